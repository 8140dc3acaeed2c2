"""Every Redis key the cluster uses, as functions of one ``Keys`` object.

No other module spells a key. All keys start with the configured prefix
(``CRAWLCLUSTER_KEY_PREFIX``), so several clusters, or several tests, share
one Redis without meeting.

The frontier is sharded by site: a domain belongs to one of
``CRAWLCLUSTER_FRONTIER_SHARDS`` shards (``shard_of``: CRC-32 of the registered
domain), and every key of that domain's life (the shard's pool, the job queues
and throttle windows of its domains, the leases of its tasks, its crawls'
pending counts) carries the shard's hash tag ``{<prefix>:<shard>}`` (or
``{<prefix>:<shard>.<n>}``: master/hashtags.py). A Lua script touches the keys of one
shard only, so a Redis Cluster spreads the frontier over its masters. State
that spans shards (the job registry, the crawl index, the indexes of which
shards hold work) carries the cluster-wide tag ``{<prefix>}`` and is never
changed in the same script as a shard.

docs/architecture.md ("Redis data model") lists each key, its type, and who
writes and reads it.
"""

from typing import TYPE_CHECKING

from master.hashtags import DEFAULT_SHARDS, SPREAD_TAGS_UP_TO, shard_of, shard_tags

if TYPE_CHECKING:
    from settings.loader import Settings

class Keys:
    """Key templates under one prefix, for a frontier of ``shards`` shards."""

    def __init__(self, prefix: str, shards: int = DEFAULT_SHARDS):
        if not prefix or any(ch in prefix for ch in " {}"):
            raise ValueError(f"key prefix must be non-empty without spaces or braces: {prefix!r}")
        if not isinstance(shards, int) or shards < 1:
            raise ValueError(f"frontier shards must be a whole number >= 1, got {shards!r}")
        self.prefix = prefix
        self.shards = shards

    @classmethod
    def from_settings(cls, settings: "Settings") -> "Keys":
        return cls(settings["CRAWLCLUSTER_KEY_PREFIX"],
                   settings.getint("CRAWLCLUSTER_FRONTIER_SHARDS"))

    def pattern(self) -> str:
        """SCAN pattern matching every key under this prefix (tests, cleanup)."""
        return f"{self.prefix}:*"

    def shard_of(self, domain: str) -> int:
        return shard_of(domain, self.shards)

    def all_shards(self) -> range:
        return range(self.shards)

    # --- hash tags ---------------------------------------------------------------------

    @property
    def tag(self) -> str:
        """Start of the cluster-wide keys (registry, indexes, intake): one hash tag."""
        return f"{self.prefix}:{{{self.prefix}}}"

    @property
    def spread_tags(self) -> bool:
        """Are the shards' hash tags chosen to spread evenly (``shard_tags``)?"""
        return self.shards <= SPREAD_TAGS_UP_TO

    def shard_tag(self, shard: int) -> str:
        """Start of every key of one frontier shard: the shard's own hash tag."""
        if self.spread_tags and 0 <= shard < self.shards:
            return f"{self.prefix}:{{{shard_tags(self.prefix, self.shards)[shard]}}}"
        return f"{self.prefix}:{{{self.prefix}:{shard}}}"

    def hash_tag(self, key: str) -> str:
        """The hash tag of one of these keys (what Redis Cluster hashes to a slot)."""
        start = key.index("{") + 1
        return key[start:key.index("}", start)]

    def frontier_meta(self) -> str:
        """string (JSON): the frontier's shape (shard count; ``"tags": "spread"`` when its
        shards' tags were chosen to spread evenly), so every process agrees.

        Written by: the first process to open it
        Read by: every other (refuses another count)
        """
        return f"{self.tag}:frontier"

    # --- one shard: the pool, job queues, throttles, leases, hubs ----------------------

    def pool(self, shard: int, spider_type: str) -> str:
        """zset of task JSON, score -priority: the shard's tasks of one spider type waiting
        for the dispatcher (a crawl's first URL and every new link alike).

        Written by: preprocess (seed), spiders (new links), requeues (`pool_push.lua` and
        the finishing scripts)
        Read by: the dispatcher holding the shard (`dispatch.lua`, weighted round robin per
        type)
        """
        return f"{self.shard_tag(shard)}:pool:{spider_type}"

    def pool_template(self, shard: int) -> str:
        """``pool(shard, spider_type)`` as a Lua string.format template (spider type)."""
        return self.pool(shard, "%s")

    def queue(self, job: str, domain: str) -> str:
        """zset of task JSON, score -priority: one job's tasks for one domain.

        Written by: dispatcher, an idle job (`queue_steal.lua`)
        Read by: the job's scheduler (`throttle_take.lua`), `queue_steal.lua`
        """
        return self.queue_template(self.shard_of(domain)) % (job, domain)

    def queue_template(self, shard: int) -> str:
        """``queue(job, domain)`` of a shard's domains, as a template (job, domain)."""
        return f"{self.shard_tag(shard)}:queue:%s:%s"

    def job_domains(self, job: str, shard: int) -> str:
        """set of the shard's domains a job has a queue for (an emptied queue's domain is
        removed by the take that finds it empty).

        Written by: dispatcher, `queue_steal.lua`; `throttle_take.lua` removes emptied ones
        Read by: scheduler, `requeue_job.lua`, `queue_steal.lua`
        """
        return f"{self.shard_tag(shard)}:job:{job}:domains"

    def job_domains_template(self, shard: int) -> str:
        return self.job_domains("%s", shard)

    def closed_jobs(self, shard: int) -> str:
        """zset job -> when it left the registry, in every shard: a dispatch that read it
        as live before queues nothing more for it here (entries older than
        ``CLOSED_JOB_SECONDS`` go at the next close).

        Written by: `JobRegistry.requeue` (a closing or dead job); a job's entry is
        removed when it registers (again)
        Read by: `dispatch.lua`
        """
        return f"{self.shard_tag(shard)}:closed_jobs"

    def throttle(self, shard: int) -> str:
        """hash of the sliding windows of the shard's domains: field
        ``throttle_field(kind, who, domain)`` (kind ``type`` or ``ip``) -> its hits per
        twentieth of the window (the slot length, the first slot, then hits per slot,
        comma-separated; vertical bars between the three); and
        ``~swept``, ``~cursor``, ``~window``: when stale windows were last swept, where the
        sweep goes on, and the longest window written (the hash expires a minute and that
        long after its last sweep).

        Written by: `throttle_take.lua`
        Read by: `throttle_take.lua`
        """
        return f"{self.shard_tag(shard)}:throttle"

    @staticmethod
    def throttle_field(kind: str, who: str, domain: str) -> str:
        """The field of ``throttle(shard)`` that holds the window of (spider type | host
        ip, domain)."""
        return f"{kind}|{who}|{domain}"

    def leases(self, shard: int) -> str:
        """zset of the shard's leased task JSON, score = lease expiry time.

        Written by: `throttle_take.lua`
        Read by: `lease_finish.lua`, `lease_reap.lua`, `requeue_job.lua`
        """
        return f"{self.shard_tag(shard)}:leases"

    def lease_owners(self, shard: int) -> str:
        """hash leased task JSON -> the job holding its lease: a job that stops beating has
        its leases expired at once, not when they run out.

        Written by: `throttle_take.lua`; removed by `lease_finish.lua`, `lease_reap.lua`
        Read by: `requeue_job.lua`, a job that lost writes in a failover (`Frontier.leases_of`)
        """
        return f"{self.shard_tag(shard)}:lease_owners"

    def pushed(self, shard: int) -> str:
        """zset link digest (crawl id and canonical URL; a seed's task id) -> when it was
        pushed to the shard's pool: a link two jobs find new at once, one pushed again after
        a failed round, or a seed an intake applies again after a crash, is queued once
        (kept `CRAWLCLUSTER_PUSH_DEDUPE_SECONDS`; the key expires then too).

        Written by: `pool_push.lua` (new links of spiders)
        Read by: `pool_push.lua`
        """
        return f"{self.shard_tag(shard)}:pushed"

    def hubs(self, shard: int) -> str:
        """zset of the shard's hub task JSON, score = when the hub is next due.

        Written by: `Frontier.add_hub`
        Read by: `hubs_due.lua`
        """
        return f"{self.shard_tag(shard)}:hubs"

    def hub_state(self, shard: int) -> str:
        """hash hub URL -> JSON: an adaptively revisited hub's span (seconds to its next
        visit), the fingerprint of what it listed, its ETag and Last-Modified, how many
        visits found it changed in a row, its visits and changes.

        Written by: `hub_visit.lua` (after each visit)
        Read by: `hubs_due.lua` (the span), the scheduler (the validators it sends)
        """
        return f"{self.shard_tag(shard)}:hub_state"

    def shard_owner(self, shard: int) -> str:
        """string: the dispatcher instance that holds the shard (only it dispatches the
        shard's pool); taken over by a live one once its holder stops beating.

        Written by: `shard_claim.lua`
        Read by: `dispatch.lua` (only the holder dispatches)
        """
        return f"{self.shard_tag(shard)}:owner"

    # --- one crawl in one shard: counts, flags, failures -----------------------------------

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

    def crawl_render(self, crawlid: str) -> str:
        """hash `<URL template> compared` / `<URL template> needed` -> pages of the
        template fetched both plain and rendered, and how many of them needed rendering (a
        crawl whose rule says `render: auto`; at most `crawler.render.policy.MAX_PATTERNS`
        templates); `~var <host>|<prefix>` -> a place of the crawl's URL templates learnt
        to be a variable; `~rendered` -> pages of the crawl rendered, `~looks_scripted` ->
        pages of a crawl that renders none that looked built by scripts. One key per crawl
        in the shard its id hashes to.

        Written by: spiders (`crawler/render/`, each page they compared or rendered, each
        variable they learnt)
        Read by: spiders (which way a template's pages go, the variables others learnt),
        monitor (`info`'s `render`)
        """
        return f"{self.shard_tag(self.shard_of(crawlid))}:crawl:{crawlid}:render"

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

    # --- cluster-wide: registry, indexes of the shards that hold work, crawls ----------------

    def jobs(self) -> str:
        """zset job id -> last heartbeat time: the job registry.

        Written by: jobs (register, heartbeat)
        Read by: dispatcher (live jobs, expiry)
        """
        return f"{self.tag}:jobs"

    def job_info(self, job: str) -> str:
        """string (JSON): a job's spider type, host, ip and node.

        Written by: job registration
        Read by: dispatcher, monitor
        """
        return f"{self.tag}:job:{job}:info"

    def job_shards(self, job: str) -> str:
        """zset shard -> when it was last marked: the shards where a job may have queues
        (marked before tasks are moved there; pruned only long after a look found none).

        Written by: dispatcher, `ThrottledQueues.steal`, an idle job's rescan
        Read by: the job's scheduler, pruned by it
        """
        return f"{self.tag}:job:{job}:shards"

    def pool_shards(self, spider_type: str) -> str:
        """zset shard -> when it was last marked: the shards whose pool of this spider
        type may hold tasks (marked with every push; the dispatcher's index).

        Written by: pushers, requeues, the dispatchers' sweep
        Read by: dispatchers (which shards to dispatch), pruned by them
        """
        return f"{self.tag}:pool_shards:{spider_type}"

    def pool_types(self) -> str:
        """set of the spider types that have (had) tasks in a pool.

        Written by: pushers, `Frontier.add_hub`
        Read by: dispatcher sweep, stop/pause
        """
        return f"{self.tag}:pool_types"

    def dispatchers(self) -> str:
        """zset dispatcher instance -> last beat: the masters sharing the shards.

        Written by: each dispatcher
        Read by: dispatchers (who ranks first for a shard)
        """
        return f"{self.tag}:dispatchers"

    def dispatched(self, window_start: float) -> str:
        """string counter: tasks dispatched in the window starting then (all masters).

        Written by: dispatcher, after each tick
        Read by: dispatcher (the per-window cap)
        """
        return f"{self.tag}:dispatched:{int(window_start)}"

    def crawl(self, crawlid: str) -> str:
        """string (JSON): a crawl's config and rule, stored once per crawl.

        Written by: `CrawlStore.submit`, `CrawlStore.register` (a user spider's crawl)
        Read by: spiders (cached per process), pipelines
        """
        return f"{self.tag}:crawl:{crawlid}:config"

    def crawl_shards(self, crawlid: str) -> str:
        """set of the shards a crawl has (had) tasks in: where its counts are summed from.

        Written by: pushers, before the push
        Read by: `info`, stop, pause, resume
        """
        return f"{self.tag}:crawl:{crawlid}:shards"

    def crawls(self) -> str:
        """zset crawl id -> when it was (last) submitted: every crawl.

        Written by: preprocess, a user spider's first process
        Read by: manager (Status page)
        """
        return f"{self.tag}:crawls"

    def schedules(self) -> str:
        """zset schedule id -> when its next run is due (a paused schedule is not in it).

        Written by: monitor (`schedule` requests), masters (`schedule_claim.lua`)
        Read by: masters (`Schedules.fire_due`)
        """
        return f"{self.tag}:schedules"

    def schedule_configs(self) -> str:
        """hash schedule id -> JSON: a recurring crawl's cron expression or interval, the
        crawl it submits, its owner, whether it is paused.

        Written by: monitor (`schedule` requests)
        Read by: masters, monitor (`list`)
        """
        return f"{self.tag}:schedules:config"

    def schedule_runs(self) -> str:
        """zset run JSON -> when it was claimed: runs claimed and not yet submitted (a
        master that dies in between leaves its run here for another to submit).

        Written by: `schedule_claim.lua`; removed once submitted
        Read by: masters (`Schedules.fire_due`)
        """
        return f"{self.tag}:schedule_runs"

    def ended_crawls(self) -> str:
        """zset crawl id -> when it was first found ended (drained, stopped or expired):
        its Redis state is deleted `CRAWLCLUSTER_CRAWL_RETENTION` seconds later.

        Written by: masters (`Retention`); a crawl found running again is taken out
        Read by: masters (`Retention`)
        """
        return f"{self.tag}:crawls:ended"

    def retiring_crawls(self) -> str:
        """zset crawl id -> when its final figures went to MongoDB: its keys are being
        deleted (a master killed half-way leaves it here for the next pass to finish).

        Written by: masters (`Retention`)
        Read by: masters (`Retention`)
        """
        return f"{self.tag}:crawls:retiring"

    def retention_lock(self) -> str:
        """string with a TTL: the master running a retention pass (one at a time).

        Written by: masters (`Retention`)
        Read by: masters
        """
        return f"{self.tag}:retention:lock"

    def firehose_delivered(self) -> str:
        """hash job -> JSON {"stored_at", "spider_type", "at"}: how far a job's stored items
        are on Kafka (every batch stored up to ``stored_at``); the entry goes when the job
        closes with nothing left to send.

        Written by: jobs with the firehose on, the monitor sending a gone job's rest
        Read by: monitor (`FirehoseResender`)
        """
        return f"{self.tag}:firehose:delivered"

    def firehose_lock(self) -> str:
        """string with a TTL: the monitor sending the items of gone jobs (one at a time).

        Written by: monitors
        Read by: monitors
        """
        return f"{self.tag}:firehose:lock"

    def user_crawls(self, userid: str) -> str:
        """set of the crawl ids a user (scrapy-cluster: appid) submitted.

        Written by: preprocess
        Read by: monitor (`info`/`stop` for a whole app)
        """
        return f"{self.tag}:user:{userid}:crawls"

    # --- counters (master/counters.py) -------------------------------------------
    def rolling_counter(self, name: str) -> str:
        """hash of a rolling window's events: second -> events then, ``sum`` -> events in
        the window, ``from`` -> the oldest second the sum may hold.

        Written by: `RollingTimeCounter.increment` (`job:<job>:done`)
        Read by: dispatcher weights, the exporter and Status page (tasks finished in the
        last minute)
        """
        return f"{self.prefix}:counter:rolling:{name}"

    def step_counter(self, name: str, window_start: float) -> str:
        """zset of event times in the fixed window starting at ``window_start``.

        Written by: `StepTimeCounter.increment`
        Read by: `StepTimeCounter.value/history`
        """
        return f"{self.prefix}:counter:step:{name}:{int(window_start)}"

    # --- Bloom filter (master/bloom.py) ---------------------------------------------
    def bloom_block(self, name: str, block: int) -> str:
        """string (bitmap, or 4-bit counters in counting mode): one block of a filter.

        Written by: `AgingBloomFilter.add_many/remove_many` (spiders, submit) in its newest
        generation (remove: in every one)
        Read by: `AgingBloomFilter.contains_many` (every live generation)
        """
        return f"{self.prefix}:bloom:{name}:{block}"

    def bloom_meta(self, name: str) -> str:
        """string (JSON): the filter's parameters, so every process uses the same.

        Written by: first process opening the filter
        Read by: every other (refuses a different shape)
        """
        return f"{self.prefix}:bloom:{name}:meta"

    def bloom_generations(self, name: str) -> str:
        """string (JSON): a filter's live generations, oldest first (each its name, shape,
        capacity and start time), and those retired lately (deleted again in case a late
        writer made them anew).

        Written by: the first process opening the filter, masters (`bloom_rotate.lua`)
        Read by: every process using the filter (re-read every second)
        """
        return f"{self.prefix}:bloom:{name}:generations"

    def window_counts(self, name: str) -> str:
        """hash minute -> events, plus ``lifetime``: a WindowCounts counter.

        Written by: `WindowCounts.increment` (`preprocess:total/fail/plugin:<name>`,
        `monitor:...`, `spider:<type>:<code>`, `machine:<host>:<code>`)
        Read by: monitor (`stats`)
        """
        return f"{self.prefix}:counter:windows:{name}"

    def throttle_refusals(self) -> str:
        """zset domain -> takes a full throttle window refused, since the key was made,
        and member ``*`` -> their sum (its own slot: no hash tag; each job adds its counts
        once a round).

        Written by: spiders (`TaskTracker.report`)
        Read by: the exporter (the most refused domains), the Status page
        """
        return f"{self.prefix}:counter:throttle_refusals"

    def dispatched_by_job(self) -> str:
        """hash job -> tasks the dispatchers moved into its queues while it lived.

        Written by: dispatcher, after each tick; a job's field is removed with the job
        (`JobRegistry.requeue`)
        Read by: the exporter, the Status page; the dispatcher's upkeep (a field without
        its job: tasks queued after the job left, put back by `JobRegistry.requeue_orphans`)
        """
        return f"{self.prefix}:counter:dispatched_by_job"

    def dispatch_weights(self) -> str:
        """hash job -> its weight (tasks per minute) in the last tick, replaced each tick.

        Written by: dispatcher
        Read by: the exporter, the Status page
        """
        return f"{self.prefix}:dispatch:weights"

    def job_done(self, job: str) -> str:
        """rolling counter name: tasks a job finished (the dispatcher's weights)."""
        return f"job:{job}:done"

    # --- message processing (message_processing/) ------------------------------------
    def intake_applied(self, topic: str, partition: int) -> str:
        """string: the last offset of a Kafka partition whose result Redis holds.

        Written by: preprocess (in the same transaction as the result)
        Read by: preprocess (skips redeliveries)
        """
        return f"{self.tag}:intake:{topic}:{partition}:applied"

    def intake_topic_id(self, topic: str, partition: int) -> str:
        """string: the broker's id of the topic the partition's applied offset counts in
        (a topic made again, e.g. by a broker that lost its storage, numbers from 0).

        Written by: preprocess (same transaction)
        Read by: preprocess
        """
        return f"{self.tag}:intake:{topic}:{partition}:topic_id"

    def intake_outbox(self, topic: str, partition: int) -> str:
        """list of reply JSON for a partition's messages, not yet on the replies topic.

        Written by: preprocess
        Read by: preprocess (sends, then trims)
        """
        return f"{self.tag}:intake:{topic}:{partition}:outbox"

    def intake_staged(self, topic: str, partition: int) -> str:
        """list of JSON: a partition's writes into the frontier's shards and its counts,
        stored with its transaction and applied (then trimmed) right after it.

        Written by: preprocess (same transaction)
        Read by: preprocess (applies, then trims)
        """
        return f"{self.tag}:intake:{topic}:{partition}:staged"

    def monitor_work(self) -> str:
        """zset of stored requests (JSON) for the monitor, score = when due; a claimed
        one is pushed a lease into the future until it is answered.

        Written by: preprocess (queries, commands, expiry times)
        Read by: monitor (`worklist_claim.lua`)
        """
        return f"{self.tag}:monitor:work"

    # --- liveness --------------------------------------------------------------------
    def heartbeat(self, role: str, host: str) -> str:
        """string with a TTL: the role on that host is alive while it exists.

        Written by: preprocess, monitor
        Read by: monitor (`stats`: module up/down)
        """
        return f"{self.prefix}:heartbeat:{role}:{host}"

    def heartbeats(self) -> str:
        """zset "role:host" -> last beat time: every role instance ever seen.

        Written by: the same
        Read by: monitor (lists silent instances too)
        """
        return f"{self.prefix}:heartbeats"
