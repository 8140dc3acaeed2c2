"""The Redis key reference in docs/architecture.md is made from ``Keys``."""

from pathlib import Path

import pytest

from master.keydoc import key_doc, key_methods, keys_table, spelled_key
from master.keys import Keys

ARCHITECTURE_DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_the_documented_key_table_matches_keys():
    assert keys_table() in ARCHITECTURE_DOC.read_text(encoding="utf-8"), (
        "docs/architecture.md's key table is stale: paste `python -m master.keydoc`")


def test_every_key_says_who_writes_and_reads_it():
    keys = Keys("cc")
    docs = [key_doc(keys, name) for name in key_methods()]
    assert len(docs) >= 30
    assert all(doc.holds and doc.written_by and doc.read_by for doc in docs)


def test_keys_are_spelled_with_placeholders():
    keys = Keys("cc")
    assert spelled_key(keys, "queue") == "cc:{cc:<shard>}:queue:<job>:<domain>"
    assert spelled_key(keys, "dispatched") == "cc:{cc}:dispatched:<window start>"


def test_a_key_without_its_readers_is_refused():
    class Undocumented(Keys):
        def orphan(self) -> str:
            """string: nobody says who reads it.

            Written by: someone
            """
            return f"{self.tag}:orphan"

    with pytest.raises(ValueError, match="read by"):
        key_doc(Undocumented("cc"), "orphan")
