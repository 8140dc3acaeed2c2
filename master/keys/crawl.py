"""Keys of one crawl in one shard: counts, flags, failures."""

from master.keys.space import KeySpace


class CrawlKeys(KeySpace):
    def crawl_failed(self, crawlid: str, shard: int) -> str:
        """hash url -> JSON reason: the crawl's URLs of this shard that failed for good.

        Written by: `lease_finish.lua`, `lease_reap.lua`
        Read by: `Frontier.failed`, monitor
        """
        return f"{self.shard_tag(shard)}:crawl:{crawlid}:failed"

    def crawl_domain_pages(self, crawlid: str, domain: str) -> str:
        """hash domain -> pages queued for the crawl (domain_max_pages), in the domain's shard.

        Written by: scheduler (when a crawl has `domain_max_pages`)
        Read by: scheduler
        """
        return self.crawl_domain_pages_in(crawlid, self.shard_of(domain))

    def crawl_domain_pages_in(self, crawlid: str, shard: int) -> str:
        """``crawl_domain_pages`` of the crawl's domains in one shard."""
        return f"{self.shard_tag(shard)}:crawl:{crawlid}:domain_pages"

    def crawl_pending(self, crawlid: str, shard: int) -> str:
        """hash domain -> the crawl's tasks of this shard not finished yet (waiting,
        queued for a job or leased); kept by every script that creates or finishes one.

        Written by: `pool_push.lua`, `lease_finish.lua`, `lease_reap.lua`, `hubs_due.lua`,
        `queue_purge.lua`, `queue_drop.lua`
        Read by: monitor (`info`), summed over the crawl's shards
        """
        return f"{self.shard_tag(shard)}:crawl:{crawlid}:pending"

    def crawl_counts(self, crawlid: str, shard: int) -> str:
        """hash queued / done / failed / dropped / purged -> the crawl's tasks of this shard.

        Written by: the same scripts
        Read by: monitor (`info`), `crawlcluster watch`
        """
        return f"{self.shard_tag(shard)}:crawl:{crawlid}:counts"

    def crawl_links(self, crawlid: str) -> str:
        """hash found / new / duplicate / `refused:<reason>` -> the links the crawl's pages
        yielded and what became of them (one key per crawl, in the shard its id hashes to;
        each job adds its counts once a round).

        Written by: scheduler (new, duplicate, refused by depth, blacklist, scheme,
        url_length, domain_max_pages; a user spider's found, not_json, callback), from
        the spider (found, refused by rule or scope), the task middleware (refused by
        robots)
        Read by: monitor (`info`), `crawlcluster watch`
        """
        return f"{self.shard_tag(self.shard_of(crawlid))}:crawl:{crawlid}:links"

    def crawl_changes(self, crawlid: str) -> str:
        """hash new / changed / unchanged / gone / not_modified -> the crawl's items stored
        for the first time, stored again with a new content, fetched again unchanged,
        marked gone (a stored page answered 404 or 410; crawler/versions.py), and of the
        unchanged those a series' conditional GET found not modified (crawler/series.py).

        Written by: spider (its item pipeline's counts, sent with its task outcomes; a
        series' 304s with theirs)
        Read by: monitor (`info`), retention (the retired crawl's record)
        """
        return f"{self.shard_tag(self.shard_of(crawlid))}:crawl:{crawlid}:changes"

    def crawl_sites(self, crawlid: str) -> str:
        """hash `<site> <measure>` -> count: the crawl's health per site (domain, as the
        throttle names it; master/sitehealth.py): pages, statuses (`status:<code>`),
        pushback (`pushback:<reason>`), pages rendered, items, items dropped (and
        `dropped:<field>` missing), `expected:<field>` items whose rule has the
        field and `matched:<field>` those where it matched. At most `MAX_SITES` sites
        (`<site> ~` marks one, `~sites` counts them), the rest counted as `(other)`;
        measures bounded by the rule's fields. One key per crawl in the shard its id
        hashes to; deleted when the crawl is retired, and expires twice
        `CRAWLCLUSTER_CRAWL_RETENTION` after its last count (a count sent after the
        crawl retired leaves no key for good).

        Written by: spiders (`site_health_add.lua`, with their counts once a second)
        Read by: `read_site_health` (`crawlcluster sites`, monitor, manager UI and
        metrics), retention (the retired crawl's record)
        """
        return f"{self.shard_tag(self.shard_of(crawlid))}:crawl:{crawlid}:sites"

    def crawl_render(self, crawlid: str) -> str:
        """hash `<URL template> compared` / `<URL template> needed` -> pages of the
        template fetched both plain and rendered, and how many of them needed rendering (a
        crawl whose rule says `render: auto`; at most `crawler.render.policy.MAX_PATTERNS`
        templates); `~rendered` -> pages of the crawl rendered, `~looks_scripted` ->
        pages of a crawl that renders none that looked built by scripts. One key per crawl
        in the shard its id hashes to; deleted when the crawl is retired.

        Written by: spiders (`crawler/render/`, each page they compared or rendered)
        Read by: spiders (which way a template's pages go), monitor (`info`'s `render`)
        """
        return f"{self.shard_tag(self.shard_of(crawlid))}:crawl:{crawlid}:render"

    def crawl_render_variables(self, crawlid: str) -> str:
        """list of `<host>|<prefix>`: the places of a `render: auto` crawl's URL templates
        learnt to be variables, in the order learnt (appended, never reordered, so a
        process reads only the entries past those it has read); trimmed to
        `crawler.render.pagegroups.MAX_PLACES` entries with each push. In the shard of
        `crawl_render`; deleted when the crawl is retired.

        Written by: spiders (`RenderPlan.learn`)
        Read by: spiders (`RenderPlan`, the entries past those read, every `PLAN_FRESH` s)
        """
        return f"{self.shard_tag(self.shard_of(crawlid))}:crawl:{crawlid}:render_variables"

    def stopped_crawls(self, shard: int) -> str:
        """hash crawl id -> when it was stopped or expired, in every shard: its tasks are
        dropped (one field per shard and crawl, removed when the crawl retires; no key
        per crawl).

        Written by: monitor (`Frontier.purge_crawl`), retention (removes)
        Read by: `pool_push.lua`, `lease_finish.lua`, `lease_reap.lua`, `hubs_due.lua`
        """
        return f"{self.shard_tag(shard)}:stopped"

    def paused_crawls(self, shard: int) -> str:
        """hash crawl id -> when it was paused, in every shard while a crawl is paused: its
        waiting tasks are parked.

        Written by: manager (`crawl.json`), monitor
        Read by: the same scripts
        """
        return f"{self.shard_tag(shard)}:paused"

    def crawl_parked(self, crawlid: str, shard: int) -> str:
        """zset of a paused crawl's task JSON of this shard (score -priority), back to the
        pool on resume.

        Written by: `queue_purge.lua` (park), the same scripts
        Read by: `parked_release.lua` (resume)
        """
        return f"{self.shard_tag(shard)}:crawl:{crawlid}:parked"

    def crawl_shard_keys(self, crawlid: str, shard: int) -> list[str]:
        """Every key a crawl may have in one shard (what retention deletes)."""
        return [self.crawl_failed(crawlid, shard), self.crawl_pending(crawlid, shard),
                self.crawl_counts(crawlid, shard), self.crawl_parked(crawlid, shard),
                self.crawl_domain_pages_in(crawlid, shard)]

    def crawl_template(self, kind: str, shard: int) -> str:
        """``crawl_<kind>(crawlid, shard)`` as a Lua string.format template (crawlid)."""
        template: str = getattr(self, f"crawl_{kind}")("%s", shard)
        return template
