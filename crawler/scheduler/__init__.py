"""The cluster's Scrapy scheduler over the master's Redis frontier, one job to a module
(``SCHEDULER = "crawler.scheduler.ClusterScheduler"``).

- core.py: Scrapy's scheduler interface and the round;
- admission.py: what the crawl refuses before Redis, and the per-crawl link counts;
- linkpush.py: the Bloom check, the push and the filter add;
- replay.py: push replay after a Redis failover;
- taking.py: taking, stealing and idling;
- sitemaps.py: a revisited sitemap's changed pages;
- series.py: a series' known pages, fetched again only when they may have changed;
- slots.py: throttled domains' download slots;
- taskrequest.py: a taken task's Request;
- userlinks.py: a user spider's Requests and start-URL key.
"""

from crawler.scheduler.core import ClusterScheduler

__all__ = ["ClusterScheduler"]
