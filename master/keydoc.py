"""The Redis key reference of docs/architecture.md, made from ``Keys`` itself.

Every method of ``Keys`` whose docstring starts with a Redis type is a key. Its
docstring says what the key holds, then ``Written by:`` and ``Read by:`` lines;
calling it with placeholder arguments gives the key as it is spelled.
``python -m master.keydoc`` prints the table; a test checks the page has it.
"""

import inspect
import re
from dataclasses import dataclass

from master.keys import Keys

PREFIX = "cc"
REDIS_TYPE = re.compile(r"(string|zset|hash|set|list)\b")   # how a key's docstring starts
# Whole-number arguments: a value no key contains otherwise, then its placeholder.
NUMBERS = {"shard": (987654, "<shard>"), "window_start": (1234567890, "<window start>"),
           "partition": (24680, "<partition>"), "block": (13579, "<block>")}
SHARD_TAG = re.compile(r"\{" + PREFIX + r":\d+(\.\d+)?\}")   # the shard of a domain argument


@dataclass(frozen=True)
class KeyDoc:
    key: str
    holds: str
    written_by: str
    read_by: str


def key_methods() -> list[str]:
    """Names of the ``Keys`` methods that build a key, family by family (the classes
    ``Keys`` is made of, in its order), each in the order they are defined."""
    names = []
    members = [item for family in Keys.__mro__ for item in vars(family).items()]
    for name, member in members:
        doc = inspect.getdoc(member) if callable(member) else None
        if not name.startswith("_") and doc and REDIS_TYPE.match(doc):
            names.append(name)
    return names


def spelled_key(keys: Keys, name: str) -> str:
    """The key ``name`` builds, with ``<parameter>`` in place of each argument."""
    method = getattr(keys, name)
    args = []
    for parameter in inspect.signature(method).parameters:
        args.append(NUMBERS[parameter][0] if parameter in NUMBERS
                    else "<" + parameter.replace("_", " ") + ">")
    key = method(*args)
    for value, placeholder in NUMBERS.values():
        key = key.replace(str(value), placeholder)
    return SHARD_TAG.sub("{" + PREFIX + ":<shard>}", key)


def key_doc(keys: Keys, name: str) -> KeyDoc:
    """What the docstring of ``Keys.<name>`` says: the text up to its ``Written by:``
    and ``Read by:`` lines (each may run on over several lines), then those."""
    parts: dict[str, list[str]] = {"holds": [], "written by": [], "read by": []}
    current = "holds"
    for line in (inspect.getdoc(getattr(type(keys), name)) or "").splitlines():
        label, colon, rest = line.partition(":")
        if colon and label.lower() in ("written by", "read by"):
            current, text = label.lower(), rest
        else:
            text = line
        parts[current].append(text.strip())
    joined = {part: " ".join(" ".join(lines).split()) for part, lines in parts.items()}
    missing = [part for part in ("written by", "read by") if not joined[part]]
    if missing:
        raise ValueError(f"Keys.{name}'s docstring has no {' or '.join(missing)!r} line")
    return KeyDoc(spelled_key(keys, name), joined["holds"], joined["written by"],
                  joined["read by"])


def keys_table() -> str:
    """The markdown table of every key: spelled, what it holds, who writes and reads it."""
    keys = Keys(PREFIX)
    lines = ["| key | holds | written by | read by |", "|---|---|---|---|"]
    for name in key_methods():
        doc = key_doc(keys, name)
        lines.append(f"| `{doc.key}` | {doc.holds} | {doc.written_by} | {doc.read_by} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(keys_table())
