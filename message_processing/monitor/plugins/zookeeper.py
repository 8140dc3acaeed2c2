"""Site config changes written to the znode every throttle watches: the thesis's
``rate`` / ``remove_rate`` / ``blacklist`` / ``unblacklist`` and scrapy-cluster's
``domain-update`` / ``domain-remove`` / ``blacklist-update`` / ``blacklist-remove``."""

from master.siteconfig import SiteConfig
from message_processing.monitor.plugins import MonitorPlugin
from message_processing.replies import reply_to
from message_processing.requests import Message
from message_processing.worklist import Entry


class ZookeeperPlugin(MonitorPlugin):
    handles = ("site_config",)

    def answer(self, entry: Entry) -> Message:
        request = entry["request"]
        site_config = SiteConfig.from_settings(self.context.settings, self.context.zookeeper)
        domain, action = request["domain"], request["action"]
        if action in ("rate", "domain-update"):
            hits = request["rate"] if action == "rate" else request["hits"]
            site_config.set_limit(domain, hits, request.get("window", 60),
                                  request.get("scale", 1.0), request.get("ip_hits"))
        elif action in ("remove_rate", "domain-remove"):
            site_config.remove_limit(domain)
        elif action in ("blacklist", "blacklist-update"):
            site_config.blacklist_add(domain)
        else:
            site_config.blacklist_remove(domain)
        return reply_to(request, action=action, domain=domain, status="ok",
                        znode=site_config.path)
