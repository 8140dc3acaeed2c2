"""Defaults of crawl events, their webhooks and local alerting: part of
``settings.defaults`` (which imports every name of this module), kept apart only so
neither module grows past the project's 500 lines. Same rules: the ``CRAWLCLUSTER_``
prefix, one comment line (or more) right above each setting, read into docs/settings.md.
"""

# --- crawl events and webhooks (message_processing/events/, docs/observability.md) ---
# Kafka topic of crawl events (started, finished, failed, stalled, site_broken).
CRAWLCLUSTER_KAFKA_EVENTS_TOPIC = "crawl.events"
# Seconds between a monitor's looks at the crawls for events (0 = no events).
CRAWLCLUSTER_EVENTS_INTERVAL = 2.0
# Crawls looked at each time for events: this many newest, and this many of the older
# ones in turn (every crawl is looked at, the older ones less often).
CRAWLCLUSTER_EVENTS_CRAWLS = 200
# Seconds a drained crawl's counts must stay unchanged before it is taken as ended.
CRAWLCLUSTER_EVENTS_SETTLE = 5.0
# Seconds without progress, with work pending, before a crawl is `stalled`.
CRAWLCLUSTER_EVENTS_STALL_SECONDS = 600.0
# A field matching on fewer than this share of a site's items makes the site `site_broken`
# (over its items since the last look, once there are EVENTS_SITE_MIN_ITEMS, and over the
# whole crawl when it ends).
CRAWLCLUSTER_EVENTS_COVERAGE_MIN = 0.8
# site_broken events a crawl sends at most (the findings past it are logged, and shown by
# `crawlcluster sites`).
CRAWLCLUSTER_EVENTS_SITE_BROKEN_MAX = 20
# Items a site must have (since the last look, or in all) before its coverage is judged.
CRAWLCLUSTER_EVENTS_SITE_MIN_ITEMS = 10
# A schedule's run whose site gave fewer than this share of the previous run's items (at
# least EVENTS_SITE_MIN_ITEMS then) makes the site `site_broken`.
CRAWLCLUSTER_EVENTS_PREVIOUS_RUN_SHARE = 0.5
# Seconds an event's claim (and a schedule's last per-site items) outlive a crawl's
# CRAWLCLUSTER_CRAWL_RETENTION: the crawl retires (leaves the index the monitors read)
# before its claims expire, so none of its events is sent twice.
CRAWLCLUSTER_EVENTS_CLAIM_MARGIN = 86400.0
# Secret of the HMAC-SHA256 signature of each webhook body (X-Crawlcluster-Signature);
# empty: deliveries go unsigned (a warning at start-up).
CRAWLCLUSTER_WEBHOOK_SECRET = ""
# Private networks (CIDRs) webhook URLs may reach (crawler/urlguard.py); every other
# address that is not globally routable is refused.
CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS: list[str] = []
# Seconds before the first retry of a failed delivery; each next wait doubles, up to
# WEBHOOK_BACKOFF_MAX.
CRAWLCLUSTER_WEBHOOK_BACKOFF = 5.0
# Seconds a failed delivery waits at most before its next try.
CRAWLCLUSTER_WEBHOOK_BACKOFF_MAX = 3600.0
# Attempts at one delivery before it is given up (logged and counted): with the defaults,
# about two days of retries.
CRAWLCLUSTER_WEBHOOK_MAX_ATTEMPTS = 60
# Deliveries waiting for one receiver host at most; an event's delivery past it is dropped
# (logged, counted: stats' webhooks_dropped, and in the delivery log).
CRAWLCLUSTER_WEBHOOK_MAX_QUEUED_PER_HOST = 10_000
# Deliveries waiting in all at most (receivers on many hosts); a delivery past it is
# dropped (logged, counted: stats' webhooks_dropped, and in the delivery log).
CRAWLCLUSTER_WEBHOOK_MAX_QUEUED = 100_000
# Seconds a webhook receiver may take to answer.
CRAWLCLUSTER_WEBHOOK_TIMEOUT = 10.0
# Delivery attempts kept in the delivery log (`crawlcluster webhooks`).
CRAWLCLUSTER_WEBHOOK_LOG_SIZE = 1000
# --- local alerting: `crawlcluster services up --alerting` (manager/local/alerting.py) ---
# host:port the local Prometheus listens on.
CRAWLCLUSTER_PROMETHEUS_ADDRESS = "127.0.0.1:9090"
# host:port the local Alertmanager listens on.
CRAWLCLUSTER_ALERTMANAGER_ADDRESS = "127.0.0.1:9093"
# URL the local Alertmanager POSTs its notifications to (empty: alerts go nowhere).
CRAWLCLUSTER_ALERT_WEBHOOK = ""
# Seconds Alertmanager waits for more alerts of a group before the group's first notification.
CRAWLCLUSTER_ALERT_GROUP_WAIT = 30.0
