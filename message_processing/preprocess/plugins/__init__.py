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

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from message_processing.plugins import Plugin
from message_processing.requests import Message, route

if TYPE_CHECKING:
    from master.crawls import WriteBatch
    from message_processing.preprocess.service import Context


@dataclass
class Staged:
    write: Callable[["WriteBatch"], Any]   # queue the writes on the transaction
    reply: Message | None = None           # sent on the replies topic after the commit
    seen: tuple[str, str] | None = None    # (crawl id, URL) for the Bloom filter, once committed


class StoredRequestPlugin(Plugin):
    """A query or command the monitor answers: stored in its work list as is."""

    def __init__(self, context: "Context") -> None:
        self.context = context

    def prepare(self, kind: str, request: Message, source: str) -> Staged:
        entry = {"id": source, "kind": route(kind, request), "request": request,
                 "format": "scrapy-cluster" if kind.startswith("sc_") else "thesis"}
        return Staged(write=lambda batch: self.context.worklist.add(entry, pipe=batch.pipe))
