"""Keys of one frontier shard: the pools, job queues, throttles, leases, hubs."""

from master.keys.space import KeySpace


class ShardKeys(KeySpace):
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

    def pushback(self, shard: int) -> str:
        """hash domain -> JSON of the domain's pushback state (docs/operations.md): its
        rate factor (the share of its configured limit the throttle allows), the factor
        the last decrease left and when (the factor rises from it with time once the
        pause is over), whether it is in slow start, when its pause ends, when its last
        hit was due (spacing), its pushbacks, the reason and time of the last,
        when it last changed. A take writes a new domain's state (slow start) and the
        spacing; the hash expires ``CRAWLCLUSTER_PUSHBACK_TTL`` after a report or a new
        state, and a field that old is ignored and removed (each report sweeps a slice
        of the hash for those and for states back at 1 and not paused, its cursor in
        field ``~cursor``).

        Written by: `pushback_report.lua` (a 429/503, a 403 burst, a block page),
        `throttle_take.lua` (slow start, spacing, stale fields)
        Read by: `throttle_take.lua` (pause, factor, spacing), `PushbackStore.states`
        (info, watch, the UI, metrics)
        """
        return f"{self.shard_tag(shard)}:pushback"
