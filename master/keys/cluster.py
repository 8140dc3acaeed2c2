"""Cluster-wide keys: the registry, the indexes of the shards that hold work, crawls."""

from master.keys.space import KeySpace


class ClusterKeys(KeySpace):
    def frontier_meta(self) -> str:
        """string (JSON): the frontier's shape (shard count; ``"tags": "spread"`` when its
        shards' tags were chosen to spread evenly), so every process agrees.

        Written by: the first process to open it
        Read by: every other (refuses another count)
        """
        return f"{self.tag}:frontier"

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

    def dispatch_wake(self) -> str:
        """list of at most one entry: a job short of work pushed links, or a job registered.
        A dispatcher waiting between ticks (``BLPOP``) ticks at once instead of after its
        pause.

        Written by: jobs short of work (`Frontier.push_links`), job registration
        Read by: dispatchers (popped)
        """
        return f"{self.tag}:dispatch:wake"

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
