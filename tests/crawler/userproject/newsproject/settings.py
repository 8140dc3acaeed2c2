"""The project's settings: Scrapy's template, plus the one line that puts it on the
cluster."""

BOT_NAME = "newsproject"
SPIDER_MODULES = ["newsproject.spiders"]
NEWSPIDER_MODULE = "newsproject.spiders"
ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS_PER_DOMAIN = 8
FEED_EXPORT_ENCODING = "utf-8"

# The cluster: its scheduler, middlewares and guards (docs/migrating.md).
ADDONS = {"crawler.addon.ClusterAddon": 0}
