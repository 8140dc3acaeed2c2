"""Module statistics queries (thesis ``stats``, scrapy-cluster stats):
answered by the monitor's stats plugin."""

from message_processing.preprocess.plugins import StoredRequestPlugin


class StatsPlugin(StoredRequestPlugin):
    handles = ("stats",)
