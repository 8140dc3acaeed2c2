"""Stop a crawl (thesis ``stop``, scrapy-cluster action ``stop``): carried out
by the monitor's stop plugin."""

from message_processing.preprocess.plugins import StoredRequestPlugin


class StopPlugin(StoredRequestPlugin):
    handles = ("stop",)
