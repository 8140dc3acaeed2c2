"""Crawl status queries (thesis ``info``, scrapy-cluster action ``info``):
answered by the monitor's info plugin."""

from message_processing.preprocess.plugins import StoredRequestPlugin


class InfoPlugin(StoredRequestPlugin):
    handles = ("info",)
