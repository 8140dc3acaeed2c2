"""Keys of a series of crawls (a lineage): what its crawls learnt of each page they fetched."""

from master.keys.space import KeySpace


class SeriesKeys(KeySpace):
    def series_pages(self, lineage: str) -> str:
        """hash canonical URL -> JSON {url, at, etag, modified, task}: the detail pages a
        series of crawls (a lineage: a schedule run as a series) fetched, when one of its
        crawls last fetched each, the validators it got and the task that fetches it again
        (one key per series, in the shard its id hashes to; at most
        `CRAWLCLUSTER_SERIES_MAX_PAGES`, those fetched longest ago forgotten first; expires
        `CRAWLCLUSTER_SERIES_RETENTION` after its last write, and with its schedule).

        Written by: the spiders, once a page's task is done (`series_record.lua`); a page
        answering 404 or 410 is removed
        Read by: the spiders' link push (a page the series has is fetched again only if it
        may have changed, with `If-None-Match`/`If-Modified-Since`), the sweep of a run's
        seed page
        """
        return f"{self.shard_tag(self.shard_of(lineage))}:series:{lineage}:pages"

    def series_fetched(self, lineage: str) -> str:
        """zset canonical URL -> when last fetched: the pages of `series_pages` by age (same
        shard, bound and expiry).

        Written by: the spiders (`series_record.lua`)
        Read by: the spider of a run's seed page (`SeriesPages.due`: pages due again that
        no page of the run may link)
        """
        return f"{self.shard_tag(self.shard_of(lineage))}:series:{lineage}:fetched"
