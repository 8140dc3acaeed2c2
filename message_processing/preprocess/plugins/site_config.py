"""Site config changes (thesis rate / blacklist, scrapy-cluster zookeeper
actions): written to ZooKeeper by the monitor's zookeeper plugin."""

from message_processing.preprocess.plugins import StoredRequestPlugin


class SiteConfigPlugin(StoredRequestPlugin):
    handles = ("site_config",)
