"""Preprocess plugins: one module per request kind.

``prepare(kind, request, source)`` runs before any write and may raise
``RequestError``. It returns a ``Staged``:

- ``write(batch)`` adds the Redis writes to the partition's transaction, a
  ``master.crawls.WriteBatch`` (commands on ``batch.pipe``; strings, set
  members and seed tasks gathered and written with one command each);
- ``reply``, sent on the replies topic after the commit (if the plugin acks);
- ``seen``, a URL added to a crawl's Bloom filter once committed (batched over
  the poll; adding twice is harmless).

``kind`` is the validated request type (its schema in
``message_processing/schemas/``); ``source`` names the Kafka message
(``topic/partition/offset``).
"""

from dataclasses import dataclass
from typing import Any

from message_processing.plugins import Plugin


@dataclass
class Staged:
    write: Any                 # callable(batch): queue the writes on the transaction
    reply: dict | None = None  # sent on the replies topic after the commit
    seen: tuple | None = None  # (crawl id, URL) to add to the Bloom filter once committed


class StoredRequestPlugin(Plugin):
    """A query or command the monitor answers: stored in its work list as is."""

    def __init__(self, context):
        self.context = context

    def prepare(self, kind, request, source):
        entry = {"id": source, "kind": self.handles[0], "request": request,
                 "format": "scrapy-cluster" if kind.startswith("sc_") else "thesis"}
        return Staged(write=lambda batch: self.context.worklist.add(entry, pipe=batch.pipe))
