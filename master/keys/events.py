"""Keys of crawl events and their webhook deliveries (message_processing/events/)."""

from master.keys.space import KeySpace


class EventKeys(KeySpace):
    def event_claim(self, event_id: str) -> str:
        """string: the time an event (``<crawlid>:<kind>[:<reason>:<site>[:<field>]]``) was claimed;
        set once (SET NX, in `event_claim.lua`), so an event is sent once however many
        monitors see it; expires ``CRAWLCLUSTER_CRAWL_RETENTION`` and
        ``CRAWLCLUSTER_EVENTS_CLAIM_MARGIN`` after (an ended crawl's ``:ended`` claim
        given that time again at each look while the crawl is in the index).

        Written by: monitor (`CrawlEvents`)
        Read by: monitor (`CrawlEvents`: an ended crawl is not looked at again)
        """
        return f"{self.tag}:event:{event_id}"

    def event_outbox(self) -> str:
        """zset of event JSON -> when due: claimed events not yet on the events topic
        (leased while a monitor sends one, sent again if it dies first).

        Written by: monitor (`event_claim.lua`; removed once sent)
        Read by: monitor (`EventOutbox`, `worklist_claim.lua`)
        """
        return f"{self.tag}:events:outbox"

    def event_watch(self) -> str:
        """hash crawl id -> JSON {sig, since, sites}: what a crawl's progress was when last
        seen changing, and its sites' item and field counts when last checked (stall and
        settle times, recent field coverage).

        Written by: monitor (`CrawlEvents`; a crawl's field removed once it ended)
        Read by: monitor
        """
        return f"{self.tag}:events:watch"

    def schedule_last_sites(self, schedule_id: str) -> str:
        """string (JSON) {"items": {site: items}, "had": {site: [field]}}: the items per
        site of the last finished run of a schedule and the fields each site covered,
        compared with the next run's (``site_broken``); expires with the claims.

        Written by: monitor (`CrawlEvents`, when a run finishes)
        Read by: monitor (the next run's end)
        """
        return f"{self.tag}:events:schedule:{schedule_id}:sites"

    def webhook_queue(self) -> str:
        """zset of webhook delivery JSON -> when due: deliveries to make (retried with
        exponential backoff; leased while a monitor makes one).

        Written by: monitor (`EventOutbox` adds one per `notify` URL, `Webhooks` retries)
        Read by: monitor (`Webhooks`, `worklist_claim.lua`)
        """
        return f"{self.tag}:webhooks:queue"

    def webhook_host_queue(self, host: str) -> str:
        """zset of a webhook delivery's SHA-256 -> when due: the deliveries of
        `webhook_queue` to one receiver host, counted so that at most
        ``CRAWLCLUSTER_WEBHOOK_MAX_QUEUED_PER_HOST`` wait for it (gone once empty).

        Written by: monitor (`Webhooks`, beside `webhook_queue`)
        Read by: monitor (`Webhooks.add_new`: its size)
        """
        return f"{self.tag}:webhooks:host:{host}"

    def webhook_log(self) -> str:
        """list of JSON: the last ``CRAWLCLUSTER_WEBHOOK_LOG_SIZE`` delivery attempts, newest
        first (event id, url, attempt, HTTP status or error, delivered or retried when).

        Written by: monitor (`Webhooks`)
        Read by: `crawlcluster webhooks`
        """
        return f"{self.tag}:webhooks:log"
