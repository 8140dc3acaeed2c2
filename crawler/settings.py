"""Scrapy settings of the crawler project (named in scrapy.cfg).

Nothing is defaulted here: Scrapy's own names and every ``CRAWLCLUSTER_``
setting come from the one loader in ``settings/`` (defaults, then the
settings file, then the environment), so Scrapy components read
``crawler.settings["CRAWLCLUSTER_REDIS_URL"]`` like every other role.
"""

from settings.loader import load_settings

_loaded = load_settings()
globals().update(_loaded.scrapy)
globals().update(_loaded)
del _loaded
