"""Keys of the counters, the Bloom filter, message processing and liveness."""

from master.keys.space import KeySpace


class ServiceKeys(KeySpace):
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

    def pushback_counts(self) -> str:
        """zset domain -> pushbacks it gave (429, 503, 403 bursts, block pages) since the
        key was made, and member ``*`` -> their sum (its own slot: no hash tag); kept to
        the ``PUSHBACK_DOMAINS_COUNTED`` domains with the most.

        Written by: spiders (`PushbackStore.report`, with the report)
        Read by: the exporter (the most pushed-back domains), the Status page
        """
        return f"{self.prefix}:counter:pushbacks"

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
