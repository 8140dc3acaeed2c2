"""Monitor plugins: one module per kind of stored entry.

``answer(entry)`` returns the reply (a dict, sent on the replies topic) or
None; ``entry`` is ``{"id", "kind", "format", "request"}`` as preprocess (or
the crawl plugin, for ``expire``) stored it.
"""

from message_processing.plugins import Plugin


class MonitorPlugin(Plugin):
    def __init__(self, context):
        self.context = context
