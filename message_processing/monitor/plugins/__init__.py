"""Monitor plugins: one module per kind of stored entry.

``answer(entry)`` returns the reply (a dict, sent on the replies topic) or
None; ``entry`` is ``{"id", "kind", "format", "request"}`` as preprocess (or
the crawl plugin, for ``expire``) stored it.
"""

from typing import TYPE_CHECKING

from message_processing.plugins import Plugin
from message_processing.requests import Message
from message_processing.worklist import Entry

if TYPE_CHECKING:
    from message_processing.monitor.service import Context


class MonitorPlugin(Plugin):
    def __init__(self, context: "Context") -> None:
        self.context = context

    def answer(self, entry: Entry) -> Message | None:
        raise NotImplementedError
