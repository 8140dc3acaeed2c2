"""Every Redis key the cluster uses, as functions of one ``Keys`` object.

No other module spells a key. All keys start with the configured prefix
(``CRAWLCLUSTER_KEY_PREFIX``), so several clusters, or several tests, share
one Redis without meeting. A Lua script that touches several keys gets keys
sharing one ``{hash tag}`` so it also runs on Redis Cluster.

The README's "Redis data model" section lists each key, its type, and who
writes and reads it.
"""


class Keys:
    """Key templates under one prefix."""

    def __init__(self, prefix):
        if not prefix or any(ch in prefix for ch in " {}"):
            raise ValueError(f"key prefix must be non-empty without spaces or braces: {prefix!r}")
        self.prefix = prefix

    @classmethod
    def from_settings(cls, settings):
        return cls(settings["CRAWLCLUSTER_KEY_PREFIX"])

    def pattern(self):
        """SCAN pattern matching every key under this prefix (tests, cleanup)."""
        return f"{self.prefix}:*"

    # --- the frontier: every key a frontier script touches shares one hash tag -----
    # (the prefix in braces), so the atomic moves between seeds, job queues,
    # throttle windows and leases run on Redis Cluster too; the Bloom filter and
    # the counters, most of the memory and traffic, spread over the cluster.

    @property
    def tag(self):
        return f"{self.prefix}:{{{self.prefix}}}"

    def seeds(self, spider_type):
        """zset of task JSON, score -priority: one spider type's tasks waiting for the
        dispatcher (only jobs of that type get them)."""
        return f"{self.tag}:seeds:{spider_type}"

    def seeds_template(self):
        """``seeds(spider_type)`` as a Lua string.format template (spider type)."""
        return self.seeds("%s")

    def seed_types(self):
        """set of the spider types that have (had) seeds."""
        return f"{self.tag}:seed_types"

    def queue(self, job, domain):
        """zset of task JSON, score -priority: one job's tasks for one domain."""
        return f"{self.tag}:queue:{job}:{domain}"

    def queue_template(self):
        """``queue(job, domain)`` as a Lua string.format template (job, domain)."""
        return self.queue("%s", "%s")

    def job_domains(self, job):
        """set of the domains a job has (or had) a queue for."""
        return f"{self.tag}:job:{job}:domains"

    def job_domains_template(self):
        return self.job_domains("%s")

    def jobs(self):
        """zset job id -> last heartbeat time: the job registry."""
        return f"{self.tag}:jobs"

    def job_info(self, job):
        """string (JSON): a job's spider type, host, ip and node."""
        return f"{self.tag}:job:{job}:info"

    def throttle(self, kind, who, domain):
        """zset of hit times: the sliding window of (spider type | ip, domain)."""
        return f"{self.tag}:throttle:{kind}:{who}:{domain}"

    def leases(self):
        """zset of leased task JSON, score = lease expiry time."""
        return f"{self.tag}:leases"

    def dispatched(self, window_start):
        """string counter: tasks dispatched in the window starting then."""
        return f"{self.tag}:dispatched:{int(window_start)}"

    def failed(self, crawlid):
        """hash url -> JSON reason: URLs of a crawl that failed for good."""
        return f"{self.tag}:crawl:{crawlid}:failed"

    def crawl(self, crawlid):
        """string (JSON): a crawl's config and rule, stored once per crawl."""
        return f"{self.tag}:crawl:{crawlid}:config"

    def crawl_domain_pages(self, crawlid):
        """hash domain -> pages queued for the crawl (domain_max_pages)."""
        return f"{self.tag}:crawl:{crawlid}:domain_pages"

    def crawl_pending(self, crawlid):
        """hash domain -> tasks of the crawl not finished yet (queued, dispatched or
        leased); kept by every script that creates or finishes a task (info)."""
        return f"{self.tag}:crawl:{crawlid}:pending"

    def crawl_counts(self, crawlid):
        """hash queued / done / failed / dropped / purged -> tasks of the crawl."""
        return f"{self.tag}:crawl:{crawlid}:counts"

    def crawl_stopped(self, crawlid):
        """string: present once a crawl is stopped or expired; its tasks are dropped."""
        return f"{self.tag}:crawl:{crawlid}:stopped"

    def crawl_paused(self, crawlid):
        """string: present while a crawl is paused; its waiting tasks are parked."""
        return f"{self.tag}:crawl:{crawlid}:paused"

    def crawl_parked(self, crawlid):
        """zset of a paused crawl's task JSON (score -priority), back to seeds on resume."""
        return f"{self.tag}:crawl:{crawlid}:parked"

    def crawl_template(self, kind):
        """``crawl_<kind>(crawlid)`` as a Lua string.format template (crawlid)."""
        return getattr(self, f"crawl_{kind}")("%s")

    def crawls(self):
        """zset crawl id -> when it was (last) submitted: every crawl."""
        return f"{self.tag}:crawls"

    def user_crawls(self, userid):
        """set of the crawl ids a user (scrapy-cluster: appid) submitted."""
        return f"{self.tag}:user:{userid}:crawls"

    def hubs(self):
        """zset of hub task JSON, score = when the hub is next due."""
        return f"{self.tag}:hubs"

    # --- counters (master/counters.py) -------------------------------------------
    def rolling_counter(self, name):
        """zset of event times in a rolling window; member is a unique event id."""
        return f"{self.prefix}:counter:rolling:{name}"

    def step_counter(self, name, window_start):
        """zset of event times in the fixed window starting at ``window_start``."""
        return f"{self.prefix}:counter:step:{name}:{int(window_start)}"

    # --- Bloom filter (master/bloom.py) ---------------------------------------------
    def bloom_block(self, name, block):
        """string (bitmap, or 4-bit counters in counting mode): one block of a filter."""
        return f"{self.prefix}:bloom:{name}:{block}"

    def bloom_meta(self, name):
        """string (JSON): the filter's parameters, so every process uses the same."""
        return f"{self.prefix}:bloom:{name}:meta"

    def window_counts(self, name):
        """hash minute -> events, plus ``lifetime``: a WindowCounts counter."""
        return f"{self.prefix}:counter:windows:{name}"

    def job_done(self, job):
        """rolling counter name: tasks a job finished (the dispatcher's weights)."""
        return f"job:{job}:done"

    # --- message processing (message_processing/) ------------------------------------
    def intake_applied(self, topic, partition):
        """string: the last offset of a Kafka partition whose result Redis holds."""
        return f"{self.tag}:intake:{topic}:{partition}:applied"

    def intake_topic_id(self, topic, partition):
        """string: the broker's id of the topic the partition's applied offset counts in
        (a topic made again, e.g. by a broker that lost its storage, numbers from 0)."""
        return f"{self.tag}:intake:{topic}:{partition}:topic_id"

    def intake_outbox(self, topic, partition):
        """list of reply JSON for a partition's messages, not yet on the replies topic."""
        return f"{self.tag}:intake:{topic}:{partition}:outbox"

    def monitor_work(self):
        """zset of stored requests (JSON) for the monitor, score = when due; a claimed
        one is pushed a lease into the future until it is answered."""
        return f"{self.tag}:monitor:work"

    # --- liveness --------------------------------------------------------------------
    def heartbeat(self, role, host):
        """string with a TTL: the role on that host is alive while it exists."""
        return f"{self.prefix}:heartbeat:{role}:{host}"

    def heartbeats(self):
        """zset "role:host" -> last beat time: every role instance ever seen."""
        return f"{self.prefix}:heartbeats"
