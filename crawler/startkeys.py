"""scrapy-redis's start-URL key, read with an acknowledgement.

A spider of scrapy-redis (``RedisSpider``, ``RedisCrawlSpider``, any with ``redis_key``)
reads ``<name>:start_urls`` (``REDIS_START_URLS_KEY``) itself, and pops what it reads:
a process killed before it scheduled them loses those URLs. Under the cluster the
scheduler reads the key instead (the spider's own reading is switched off): it looks at
a batch, makes each entry's Requests with the spider's own ``make_request_from_data``
(plain URLs, or scrapy-redis's JSON with ``url``, ``meta``, ``method`` and form data),
queues them as start requests of the spider's crawl, and removes exactly those entries
only once they are pushed. A process killed in between leaves them in the key; the next
one queues them again, and the seen-URL filter and the pools' dedupe window keep them
from being fetched twice. The key is a list, or a set (``REDIS_START_URLS_AS_SET``) or
a sorted set, highest score first (``REDIS_START_URLS_AS_ZSET``), as in scrapy-redis,
on the cluster's Redis.
"""

from typing import Any

from settings.clients import RedisClient


class StartUrlKey:
    def __init__(self, client: RedisClient, key: str, kind: str, batch: int) -> None:
        self.client = client
        self.key = key
        self.kind = kind              # "list", "set" or "zset"
        self.batch = batch

    @classmethod
    def of(cls, spider: Any, client: RedisClient) -> "StartUrlKey | None":
        """The spider's start-URL key, its own reading of it switched off; None for a
        spider without one."""
        key = getattr(spider, "redis_key", None)
        if not key or not hasattr(spider, "make_request_from_data"):
            return None
        settings = spider.settings
        kind = ("set" if settings.getbool("REDIS_START_URLS_AS_SET")
                else "zset" if settings.getbool("REDIS_START_URLS_AS_ZSET") else "list")
        # what scrapy-redis's own idle handler and start requests read: nothing
        spider.fetch_data = lambda _key, _batch: []
        spider.count_size = lambda _key: 0
        return cls(client, key, kind, int(getattr(spider, "redis_batch_size", None) or 16))

    def peek(self) -> list[bytes]:
        """Up to a batch of entries, left in the key."""
        if self.kind == "set":
            return list(self.client.srandmember(self.key, self.batch))
        if self.kind == "zset":
            return list(self.client.zrevrange(self.key, 0, self.batch - 1))
        return list(self.client.lrange(self.key, 0, self.batch - 1))

    def acknowledge(self, entries: list[Any]) -> None:
        """Remove these entries, now pushed (those another process removed already are
        gone; nothing else is touched)."""
        if not entries:
            return
        if self.kind == "set":
            self.client.srem(self.key, *entries)
        elif self.kind == "zset":
            self.client.zrem(self.key, *entries)
        else:
            pipe = self.client.pipeline(transaction=False)
            for entry in entries:
                pipe.lrem(self.key, 1, entry)
            pipe.execute()
