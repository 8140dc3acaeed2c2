"""``expire``: a crawl whose ``expires`` time has come is stopped like ``stop`` does;
the entry is stored by preprocess when the crawl arrives, due at that time.
Reply (scrapy-cluster's notification): ``action: expired``, ``total_expired``."""

from message_processing.monitor.plugins.stop import StopPlugin


class ExpirePlugin(StopPlugin):
    handles = ("expire",)
    action = "expired"
    total_field = "total_expired"
