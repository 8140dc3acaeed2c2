"""Every default of every crawlcluster role, once (site health, events, webhooks, alerting
in ``settings/observability.py``, documents in ``settings/documents.py``: imported here).

Names carry the ``CRAWLCLUSTER_`` prefix. Each value's type is the type the loader parses
an environment override into (bool, int, float, str, list or dict; lists and dicts are
given as JSON in the environment). ``SCRAPY`` holds the defaults for Scrapy's own
(unprefixed) settings; ``crawler/settings.py`` exposes them to Scrapy with the rest.

docs/settings.md's table is generated from the comments here (``crawlcluster settings --markdown``).
"""

from typing import Any

from settings.documents import *  # part of these defaults
from settings.observability import *  # part of these defaults

# --- servers ---------------------------------------------------------------
# Redis URL (redis:// or rediss://; a password goes in the URL).
CRAWLCLUSTER_REDIS_URL = "redis://127.0.0.1:6379/0"
# CRAWLCLUSTER_REDIS_URL names a node of a Redis Cluster (or several, for starting while
# one is down: redis://h1:7000,h2:7000/0): every role uses the cluster client
# (`services up` then starts a local 3-master cluster from the first node's port on).
CRAWLCLUSTER_REDIS_CLUSTER = False
# Kafka bootstrap servers, comma separated host:port.
CRAWLCLUSTER_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
# ZooKeeper hosts, comma separated host:port.
CRAWLCLUSTER_ZOOKEEPER_HOSTS = "127.0.0.1:2181"
# MongoDB URL (credentials go in the URL).
CRAWLCLUSTER_MONGODB_URL = "mongodb://127.0.0.1:27017/?directConnection=true"

# Seconds to wait for a TCP connection to any server.
CRAWLCLUSTER_CONNECT_TIMEOUT = 3.0
# Seconds to wait for any single server reply.
CRAWLCLUSTER_SOCKET_TIMEOUT = 10.0

# --- names inside the servers ----------------------------------------------
# Prefix of every Redis key the cluster writes.
CRAWLCLUSTER_KEY_PREFIX = "cc"
# Kafka topic clients produce requests to.
CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC = "crawl.requests"
# Kafka topic replies are produced to.
CRAWLCLUSTER_KAFKA_REPLIES_TOPIC = "crawl.replies"
# Partitions of the requests topic when the cluster creates it (preprocess instances share them).
CRAWLCLUSTER_KAFKA_PARTITIONS = 4
# Kafka consumer group of the preprocess role.
CRAWLCLUSTER_KAFKA_GROUP_ID = "crawlcluster-preprocess"
# Kafka consumer session timeout (ms); heartbeats go out at a sixth of it.
CRAWLCLUSTER_KAFKA_SESSION_TIMEOUT_MS = 6000
# Seconds the intake's consumer may hold no partition before a new one joins the group
# (well above a join, which takes about half the session timeout).
CRAWLCLUSTER_KAFKA_REJOIN_AFTER = 30.0
# Largest request accepted (Kafka message, manager API body), in bytes; larger get an error.
CRAWLCLUSTER_MAX_MESSAGE_BYTES = 1 << 20
# Deepest nesting of arrays and objects a request's JSON may have (Kafka message, manager
# API body); deeper is refused with an error saying so.
CRAWLCLUSTER_MAX_JSON_DEPTH = 64
# Root znode of the cluster's ZooKeeper tree.
CRAWLCLUSTER_ZOOKEEPER_ROOT = "/crawlcluster"
# MongoDB database for items and crawl records.
CRAWLCLUSTER_MONGODB_DATABASE = "crawlcluster"

# --- local servers (crawlcluster services up|status|down) -------------------
# Directory for local servers' data, logs and PID files.
CRAWLCLUSTER_STATE_DIR = "~/.crawlcluster"
# Let `services up` install missing servers with apt-get and pip.
CRAWLCLUSTER_SERVICES_INSTALL = True
# Seconds `services up` waits for a started server to answer.
CRAWLCLUSTER_SERVICES_START_TIMEOUT = 60.0
# Storage of the local Kafka-API broker: memory:// (lost when it stops) or s3://bucket/ (kept).
CRAWLCLUSTER_KAFKA_STORAGE = "memory://tansu/"
# Storage cache of the local MongoDB-wire server (WiredTiger's cache_size: 512M, 1G, 8G).
# Millions of items want more than the default: bench/soak.py runs it with 8G.
CRAWLCLUSTER_MONGODB_LOCAL_CACHE = "1G"

# --- counters ----------------------------------------------------------------
# Default window (s) of rolling counters (plugin counts, status codes).
CRAWLCLUSTER_COUNTER_WINDOW = 60
# Default step (s) of fixed-window counters.
CRAWLCLUSTER_COUNTER_STEP = 3600
# How many fixed windows a step counter keeps before Redis expires them.
CRAWLCLUSTER_COUNTER_KEEP_STEPS = 24

# --- Bloom filter (master/bloom.py) -------------------------------------------
# URLs the seen-URL filter is sized for: its memory is that of one Bloom filter of this
# capacity at CRAWLCLUSTER_BLOOM_ERROR_RATE, shared by its generations, which remember at
# least (generations - 1) / generations of it (docs/operations.md, sizing).
CRAWLCLUSTER_BLOOM_CAPACITY = 10_000_000
# False-positive rate a new URL meets at most, however many URLs went through the filter.
CRAWLCLUSTER_BLOOM_ERROR_RATE = 0.001
# Generations of the filter: a URL is seen if one holds it; once the newest is full a new
# one starts and the oldest is dropped. More generations forget in smaller steps but need
# more memory per URL (each is sized at the error rate / generations) and one more lookup.
CRAWLCLUSTER_BLOOM_GENERATIONS = 4
# Seconds after which the newest generation is turned over even if not full (0: only when
# full): URLs not met for about generations x this long are then crawled again.
CRAWLCLUSTER_BLOOM_GENERATION_MAX_AGE = 0.0
# Groups of hash functions (thesis 4.2.3.2), 1 to 6; a URL is seen only if every group
# says so.
CRAWLCLUSTER_BLOOM_GROUPS = 2
# Counting mode: 4-bit counters instead of bits, so URLs can be removed (recrawl, expiry).
CRAWLCLUSTER_BLOOM_COUNTING = False
# Largest Redis string one block of the filter may use, in bits (Redis caps a string at 2^32).
CRAWLCLUSTER_BLOOM_BLOCK_BITS = 1 << 30

# --- frontier: throttles, leases, dispatcher (master/) ------------------------
# Shards of the frontier: a domain's keys share its shard's Redis Cluster hash tag, so a
# cluster spreads the frontier over its masters. Fixed once the frontier exists (stored
# with it). Each script call serves one shard, so the fewer domains in flight a shard
# holds, the more calls and commands a page costs (docs/capacity.md). 64 suits one Redis
# or a cluster of up to ~8 masters (up to 512, shards are spread evenly over the
# masters); give a new frontier about 16 a master for more (1024 for ~60). Frontiers made
# with 1024, the default before 2026-11-26, keep it: set it to 1024 for them.
CRAWLCLUSTER_FRONTIER_SHARDS = 64
# Requests per domain per window for a domain with no limit in ZooKeeper.
CRAWLCLUSTER_THROTTLE_HITS = 10
# Window (s) of that default limit.
CRAWLCLUSTER_THROTTLE_WINDOW = 10.0
# Seconds a job holds a task before it is re-issued to another (pending timeout).
CRAWLCLUSTER_LEASE_SECONDS = 300.0
# Times a failing URL is retried before it is recorded as failed for good.
CRAWLCLUSTER_MAX_RETRIES = 3
# Pushback (docs/operations.md): at a 429 or 503 (or a burst of 403s, or a block page) a
# domain's rate factor (the share of its limit the whole cluster may use) is multiplied
# by this, at most once per window of its limit.
CRAWLCLUSTER_PUSHBACK_DECREASE = 0.8
# The least rate factor pushback leaves a domain (share of its configured limit).
CRAWLCLUSTER_PUSHBACK_FLOOR = 0.02
# Once its pause is over, a domain's rate factor rises by this share of the factor its
# last decrease left every second without pushback (additive increase), up to 1: 0.012
# regains a decrease of 0.8 in about 21 s.
CRAWLCLUSTER_PUSHBACK_INCREASE = 0.012
# Slow start: the share of its limit a domain the cluster has no pushback state of begins
# at (for CRAWLCLUSTER_PUSHBACK_TTL), doubling every second until a pushback or the limit
# (1/16: the limit in 4 s), so a site's hidden rate below the limit is found without a
# burst at it. 0 (or 1) begins at the limit.
CRAWLCLUSTER_PUSHBACK_START_FACTOR = 0.0625
# Seconds the whole cluster pauses a domain after a 429/503 without a Retry-After.
CRAWLCLUSTER_PUSHBACK_PAUSE = 2.0
# The longest pause (s) a Retry-After may ask for; a longer one is cut to this.
CRAWLCLUSTER_PUSHBACK_MAX_PAUSE = 600.0
# Seconds a domain's pushback state is kept after its last pushback or success.
CRAWLCLUSTER_PUSHBACK_TTL = 3600.0
# Times a task may go back to its pool for pushback (a 429/503, a robots.txt answered
# 429/5xx) without counting an attempt; the next time it fails for good, its reason
# naming pushback. Generous: a site that refuses a page this often refuses it for good.
CRAWLCLUSTER_PUSHBACK_MAX_RELEASES = 100
# This many 403s from one domain within CRAWLCLUSTER_PUSHBACK_403_WINDOW seconds are
# pushback too (a site that blocks instead of answering 429); 0 turns that off.
CRAWLCLUSTER_PUSHBACK_403_COUNT = 5
# Seconds within which CRAWLCLUSTER_PUSHBACK_403_COUNT 403s of one domain are pushback.
CRAWLCLUSTER_PUSHBACK_403_WINDOW = 10.0
# Regular expressions that mark a block page (searched in the first 16 KiB of an HTML
# body of at most 64 KiB): a page matching one is pushback, not content. An empty list
# turns that off.
CRAWLCLUSTER_PUSHBACK_BLOCK_MARKERS = [
    r"(?i)<title>[^<]{0,80}you have been blocked",
    r"(?i)<h1[^>]*>[^<]{0,80}you have been blocked",
    r"(?i)<title>[^<]{0,80}captcha",
    r"(?i)<title>[^<]{0,80}access denied",
    r"(?i)<title>[^<]{0,80}attention required",
]
# Seconds without a heartbeat after which a job is dead: its queues go back to the pools and
# its leased tasks are re-issued at once.
CRAWLCLUSTER_JOB_HEARTBEAT_TTL = 30.0
# Seconds a link a spider pushed to the pools is remembered in its shard: a link two jobs
# find new at the same moment, or pushed again after a round that failed half-way, is
# queued once. Longer than the job heartbeat TTL, so the pages of a job that died between
# pushing links and adding them to the Bloom filter, crawled again, do not queue them twice.
CRAWLCLUSTER_PUSH_DEDUPE_SECONDS = 120.0
# Links a spider process remembers the Bloom filter holding, so that a link met again (a
# menu, a related-articles box) is not looked up in Redis again: about 60 bytes each; past
# that many it starts over. 0: every link is looked up.
CRAWLCLUSTER_KNOWN_LINKS = 100_000
# Seconds an ended crawl (drained, stopped or expired) keeps its state in Redis; then every
# key it made is deleted, and info answers from its MongoDB crawl record (7 days).
CRAWLCLUSTER_CRAWL_RETENTION = 7 * 86400.0
# Crawls of the crawl index a master looks at per retention pass (every 10 s).
CRAWLCLUSTER_RETENTION_SLICE = 200
# Retired runs of each schedule whose MongoDB crawl records are kept (older ones deleted).
CRAWLCLUSTER_SCHEDULE_KEEP_RUNS = 48
# Minutes of finished tasks a job's dispatch weight is measured over (thesis k).
CRAWLCLUSTER_WEIGHT_MINUTES = 10
# Seconds a job runs before its own speed is its weight (until then: the mean weight).
CRAWLCLUSTER_WEIGHT_MIN_AGE = 60.0
# Length (s) of a dispatch window; the tasks dispatched in one are capped.
CRAWLCLUSTER_DISPATCH_WINDOW = 600.0
# The cap: this many times what the live jobs finish in a window.
CRAWLCLUSTER_DISPATCH_HEADROOM = 1.25
# Tasks per minute assumed for a job when no job has finished anything yet.
CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT = 600
# Tasks moved from one shard's pool per dispatcher call.
CRAWLCLUSTER_DISPATCH_BATCH = 500
# Seconds a dispatcher's shards stay its own after its last beat: one that dies has its
# shards taken over by the others about this long after it.
CRAWLCLUSTER_DISPATCH_LEASE_SECONDS = 10.0
# Seconds between the dispatcher's ticks (each moves all that the pools hold and pacing allows);
# after a second of ticks finding no work the pause doubles each tick, up to 0.5 s.
CRAWLCLUSTER_DISPATCH_IDLE_SLEEP = 0.1

# --- crawler (the Scrapy project on slave nodes) --------------------------------
# This spider process's job id ("" = the `_job` spider argument, else spider-host-pid).
CRAWLCLUSTER_JOB_ID = ""
# IP the per-host throttle counts this node under ("" = the address used to reach Redis).
CRAWLCLUSTER_NODE_IP = ""
# Seconds between the scheduler's rounds: fetch tasks, push new links, acks, heartbeat.
CRAWLCLUSTER_SCHEDULER_TICK = 0.05
# Requests kept ready in the spider process (the rest wait, throttled, in Redis); the
# scheduler takes more once half or fewer are left.
CRAWLCLUSTER_SCHEDULER_READY = 128
# Seconds with no work after which the spider closes (0 = wait for work forever).
CRAWLCLUSTER_IDLE_TIMEOUT = 0.0
# Private networks (CIDRs, e.g. ["10.0.0.0/8"]) crawls and previews may reach. Any other
# address not globally routable is refused, link-local and metadata ones always (urlguard.py,
# docs/security.md). `crawlcluster up` and the tests set ["127.0.0.0/8", "::1/128"].
CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS: list[str] = []
# Debian's Chromium (none downloaded): empty for chromium-headless-shell if there, else chromium.
CRAWLCLUSTER_BROWSER = ""
# Pages a spider process renders in its browser at once (one site at most all but one).
CRAWLCLUSTER_RENDER_PAGES = 4
# URL templates (page kinds) of one site `render: auto` samples; its others go its way so far.
CRAWLCLUSTER_RENDER_SITE_GROUPS = 20
# Seconds a page may take to render (scripts and their requests done) before it fails.
CRAWLCLUSTER_RENDER_TIMEOUT = 30.0
# Seconds a rendered page's requests may keep going after its load event before the page
# is taken as it is (server-sent events, long polling and pollers never go quiet; counted).
CRAWLCLUSTER_RENDER_QUIET_MAX = 5.0
# Renders failed in a row (timeouts, errors) after which the browser is replaced; one that
# died is replaced at once. A failed render closes its own page only.
CRAWLCLUSTER_BROWSER_MAX_FAILURES = 3
# Pages a browser renders before it is started again (a long-lived browser grows).
CRAWLCLUSTER_BROWSER_RESTART_PAGES = 200
# MB (proportional set size) a spider's browser may hold; past it, it is started again
# once its pages are done (measured every 10 pages; 0 = no bound).
CRAWLCLUSTER_BROWSER_MAX_MB = 600.0
# Items written to MongoDB per batch.
CRAWLCLUSTER_MONGODB_BATCH = 100
# Seconds an item waits at most for its batch to fill before it is written.
CRAWLCLUSTER_MONGODB_FLUSH_AFTER = 0.5
# Give every page with fields a `meta` from its markup (crawler/pagemeta.py).
CRAWLCLUSTER_PAGE_META = True
# When a page's markup has no publication date, guess it (htmldate).
CRAWLCLUSTER_PAGE_META_DATE_GUESS = True
# Earlier versions kept per stored page, in versions_<spider type> (crawler/versions.py).
CRAWLCLUSTER_VERSIONS_KEEP = 10
# Seconds an earlier version is kept (a TTL index): 90 days.
CRAWLCLUSTER_VERSIONS_TTL = 7776000

# --- items firehose (crawler/firehose.py, message_processing/firehose.py) -------
# Produce every item stored in MongoDB to Kafka as well (docs/requests.md, "Items on Kafka").
CRAWLCLUSTER_FIREHOSE = False
# Kafka topic of every stored item; a crawl's own topic is this topic, a dot and its userid.
CRAWLCLUSTER_KAFKA_ITEMS_TOPIC = "crawl.items"
# Give every crawl its user's own topic too, as scrapy-cluster's per-appid topics (a crawl
# request can ask for it alone with "items_topic": true).
CRAWLCLUSTER_FIREHOSE_USER_TOPICS = False
# Message fields: "crawlcluster" (the stored item) or "scrapy-cluster" (its crawled firehose's).
CRAWLCLUSTER_FIREHOSE_FORMAT = "crawlcluster"
# Stored batches a spider holds for Kafka; past it (Kafka slow or down) they are read back
# from MongoDB once Kafka answers again.
CRAWLCLUSTER_FIREHOSE_QUEUE = 50
# Seconds between a monitor's looks for items that spiders which are gone stored but did
# not get onto Kafka.
CRAWLCLUSTER_FIREHOSE_RESEND_EVERY = 10.0
# Allocations between Python's generation-0 garbage collections in a spider process,
# after start-up objects are frozen (crawler/extensions.py; 0 = Python's defaults).
CRAWLCLUSTER_GC_THRESHOLD = 20000
# Seconds between a spider's returns of freed memory to the system (glibc malloc_trim;
# crawler/extensions.py MemoryBound): without them a spider stays at the high-water mark
# of its largest pages (0 = never, and no memory bound either).
CRAWLCLUSTER_MEMORY_TRIM_SECONDS = 5.0
# The universal spider's links by crawler/links.py (the URLs Scrapy's LinkExtractor would
# give, at about a quarter of its CPU); false: by LinkExtractor itself (to measure).
CRAWLCLUSTER_LEAN_LINKS = True
# Resident MB past which a long-running spider (no idle timeout) closes after a trim, as
# on SIGTERM, losing nothing, and its manager starts it again at once (0 = no bound).
CRAWLCLUSTER_SPIDER_MEMORY_LIMIT_MB = 512.0

# Hosts whose robots.txt rules a spider keeps (the host read longest ago is forgotten
# first, and read again when its next URL comes; crawler/middlewares.py).
CRAWLCLUSTER_ROBOTS_HOSTS = 10000
# Seconds a host's robots.txt is obeyed before it is read again (Google: 24 hours).
CRAWLCLUSTER_ROBOTS_MAX_AGE = 86400.0

# --- proxy pool (crawler/proxy.py) -------------------------------------------------
# Give every request a random proxy from the pool.
CRAWLCLUSTER_PROXY_ENABLED = False
# URLs a proxy must fetch to stay in the pool.
CRAWLCLUSTER_PROXY_TEST_URLS = ["https://www.baidu.com/"]
# Seconds a proxy may take per test URL (thesis: 4).
CRAWLCLUSTER_PROXY_TIMEOUT = 4.0
# Seconds between the proxy middleware's reloads of the pool.
CRAWLCLUSTER_PROXY_REFRESH = 30.0
# Proxy-list pages: [{"url", "rows" (XPath), "fields": {"ip", "port", ...: XPath}}].
CRAWLCLUSTER_PROXY_SOURCES: list[dict[str, Any]] = []
# Address `crawlcluster proxy serve` listens on.
CRAWLCLUSTER_PROXY_API = "127.0.0.1:6801"

# --- message processing (message_processing/) -------------------------------------
# Preprocess plugins by request type, {class path: order}; null disables one.
CRAWLCLUSTER_PREPROCESS_PLUGINS = {
    "message_processing.preprocess.plugins.crawl.CrawlPlugin": 100,
    "message_processing.preprocess.plugins.info.InfoPlugin": 200,
    "message_processing.preprocess.plugins.stats.StatsPlugin": 300,
    "message_processing.preprocess.plugins.stop.StopPlugin": 400,
    "message_processing.preprocess.plugins.site_config.SiteConfigPlugin": 500,
    "message_processing.preprocess.plugins.pause.PausePlugin": 600,
    "message_processing.preprocess.plugins.schedule.SchedulePlugin": 700,
}
# Messages preprocess takes from Kafka per poll (one Redis transaction per partition).
CRAWLCLUSTER_PREPROCESS_BATCH = 500
# Monitor plugins, {class path: order}; null disables one.
CRAWLCLUSTER_MONITOR_PLUGINS = {
    "message_processing.monitor.plugins.info.InfoPlugin": 100,
    "message_processing.monitor.plugins.stats.StatsPlugin": 200,
    "message_processing.monitor.plugins.zookeeper.ZookeeperPlugin": 300,
    "message_processing.monitor.plugins.stop.StopPlugin": 400,
    "message_processing.monitor.plugins.expire.ExpirePlugin": 500,
    "message_processing.monitor.plugins.pause.PausePlugin": 600,
    "message_processing.monitor.plugins.schedule.SchedulePlugin": 700,
}
# Seconds the monitor sleeps when no stored request is due.
CRAWLCLUSTER_MONITOR_SLEEP = 0.1
# Seconds a monitor holds a claimed request before another instance may answer it.
CRAWLCLUSTER_MONITOR_CLAIM_SECONDS = 60.0
# Seconds a role's heartbeat lives; a role silent longer is reported down.
CRAWLCLUSTER_HEARTBEAT_TTL = 30.0
# Seconds a role or spider may take to stop after SIGTERM before it ends regardless (a
# client waiting on a server that is down); `crawlcluster down` and a manager stopping its
# spiders wait this long, plus 10 s, before SIGKILL.
CRAWLCLUSTER_SHUTDOWN_TIMEOUT = 30.0
# Seconds a role (master, preprocess, monitor, exporter, manager) keeps trying to reach
# its servers when it starts before it gives up and exits: a role started while a server
# restarts waits for it instead of dying (0: exit at once).
CRAWLCLUSTER_STARTUP_WAIT = 60.0
# Seconds a role's loop may go without coming round before its watchdog logs every
# thread's stack, marks its heartbeat stalled and ends it for its supervisor to restart
# (0: no watchdog). Well above what one round may wait: Redis calls time out after
# CRAWLCLUSTER_SOCKET_TIMEOUT (with 3 retries), a Kafka consumer is replaced after
# CRAWLCLUSTER_KAFKA_REJOIN_AFTER, and a spider's reactor runs a page's callbacks.
CRAWLCLUSTER_WATCHDOG_SECONDS = {"master": 120.0, "preprocess": 120.0, "monitor": 120.0,
                                 "exporter": 120.0, "manager": 120.0, "crawler": 300.0}
# Seconds the CLI waits for a reply on the replies topic.
CRAWLCLUSTER_REPLY_TIMEOUT = 30.0

# --- spider manager (crawlcluster manager) ---------------------------------------
# Address the manager's scrapyd-compatible API and web UI listen on.
CRAWLCLUSTER_MANAGER_ADDRESS = "127.0.0.1:6800"
# HTTP basic auth user for the manager ("" = no authentication; set both). A manager
# listening beyond loopback refuses to start without both.
CRAWLCLUSTER_MANAGER_USERNAME = ""
# HTTP basic auth password for the manager.
CRAWLCLUSTER_MANAGER_PASSWORD = ""
# Previews (preview.json) the manager runs at once, in a thread pool of their own; one
# more is answered 503 "busy" with Retry-After (the web UI sends three at once).
CRAWLCLUSTER_MANAGER_PREVIEW_THREADS = 4
# Largest JSON reply of preview.json and submit.json, in bytes: a preview's page HTML is
# cut to fit, and a reply still over it is an error naming this setting.
CRAWLCLUSTER_MANAGER_REPLY_MAX_BYTES = 2 << 20
# Spider processes a manager runs at once (0 = 4 per CPU, as scrapyd).
CRAWLCLUSTER_MANAGER_MAX_PROC = 0
# Seconds between the manager's polls of its pending-job queue.
CRAWLCLUSTER_MANAGER_POLL_INTERVAL = 1.0
# Spider processes the manager starts by itself, {spider type: count} (docker-compose nodes).
CRAWLCLUSTER_MANAGER_SPIDERS: dict[str, int] = {}
# URL other nodes' UIs reach this manager at ("" = http://<CRAWLCLUSTER_MANAGER_ADDRESS>/).
CRAWLCLUSTER_MANAGER_PUBLIC_URL = ""
# This node's name in the registry ("" = host name and manager port).
CRAWLCLUSTER_NODE_NAME = ""

# --- hostile pages (crawler/spiders, crawler/middlewares.py) ---------------------
# Links taken from one page (not a sitemap or feed); the rest count refused (links_per_page).
CRAWLCLUSTER_MAX_LINKS_PER_PAGE = 10_000

# --- one page, one URL (crawler/pageurls.py) ------------------------------------
# Query arguments (shell patterns, any case) and ";name=" path parameters taken out of
# every link before it is filtered, queued and stored: tracking and session ids. [] keeps all.
CRAWLCLUSTER_STRIPPED_PARAMETERS = ["utm_*", "fbclid", "gclid", "dclid", "msclkid", "mc_cid",
                                    "mc_eid", "_ga", "yclid", "igshid", "ref_src",
                                    "jsessionid", "phpsessid", "sessionid"]
# A page's <link rel="canonical"> (or Link header) to its own host: stored under that URL.
CRAWLCLUSTER_HONOUR_CANONICAL = True

# --- sources: sitemaps, feeds, robots.txt (crawler/sources.py) ------------------
# Entries taken from one sitemap or feed (the protocol's limit); the rest count refused.
CRAWLCLUSTER_SITEMAP_MAX_URLS = 50_000
# Bytes a sitemap may unpack to (the protocol's limit: 50 MB); a bigger one is refused.
CRAWLCLUSTER_SITEMAP_MAX_BYTES = 50 * 1024 * 1024
# Sitemap indexes followed below a crawl's sitemap (an index of indexes is 2).
CRAWLCLUSTER_SITEMAP_MAX_DEPTH = 3
# Adaptive revisits (a crawl's `revisit.min`): least seconds between a hub's visits.
CRAWLCLUSTER_REVISIT_MIN = 300.0
# The most seconds between visits of a hub, sitemap or feed (a crawl's `revisit.max`).
CRAWLCLUSTER_REVISIT_MAX = 86400.0
# Series (a crawl's `lineage`): seconds until a page is asked again if no source dates it.
CRAWLCLUSTER_SERIES_REFETCH_AFTER = 86400.0
# Pages a series keeps (~300 bytes each in Redis); those fetched longest ago go first.
CRAWLCLUSTER_SERIES_MAX_PAGES = 500_000
# Seconds a series' pages are kept after its last run (40 days: past a monthly schedule).
CRAWLCLUSTER_SERIES_RETENTION = 40 * 86400.0

# --- metrics (Prometheus) ------------------------------------------------------
# Address `crawlcluster exporter` serves the cluster's /metrics on.
CRAWLCLUSTER_EXPORTER_ADDRESS = "127.0.0.1:9410"
# Domains named in per-domain metrics (the most throttled); the rest are summed as "other".
CRAWLCLUSTER_METRICS_TOP_DOMAINS = 20
# Crawls in per-crawl metrics and on the Status page: the most recently submitted.
CRAWLCLUSTER_METRICS_CRAWLS = 20

# --- logging -----------------------------------------------------------------
# Log level of every role (DEBUG, INFO, WARNING, ERROR).
CRAWLCLUSTER_LOG_LEVEL = "INFO"

# --- Scrapy's own settings for the crawler project ---------------------------
# What every spider on the cluster needs, its own or a user's (crawler/addon.py adds these
# to a user's project, besides the scheduler): the middlewares that report each task's
# outcome and mark a page's links with their task, and the process's guards.
CLUSTER_COMPONENTS: dict[str, dict[str, int | None]] = {
    "DOWNLOADER_MIDDLEWARES": {
        "crawler.middlewares.TaskStatusMiddleware": 50,
        # 429/503/Retry-After, 403 bursts, block pages: the cluster slows down for the site
        # (after decompression at 590, before a browser would render the refusal)
        "crawler.pushback.PushbackMiddleware": 587,
        "crawler.middlewares.NotModifiedMiddleware": 55,
        "crawler.series.ConditionalGetMiddleware": 56,    # a series' 304s end before 50
        "crawler.middlewares.StatusCounterMiddleware": 950,
        # the URL guard (crawler/downloadguard.py): every URL checked first; a proxied
        # request's target name once the proxy is chosen (crawler.proxy at 740, Scrapy's
        # HttpProxyMiddleware at 750)
        "crawler.downloadguard.UrlGuardMiddleware": 60,
        "crawler.downloadguard.ProxiedTargetGuardMiddleware": 755,
        "crawler.middlewares.RedirectLoopMiddleware": 70,
        # after Scrapy's redirects (600) in process_response: sees a Location first
        "crawler.middlewares.RedirectTargetMiddleware": 610,
        "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        "crawler.middlewares.BoundedRobotsTxtMiddleware": 100,
        # The cluster retries a failed download (CRAWLCLUSTER_MAX_RETRIES); Scrapy's own
        # retries on top would fetch a failing URL three times per attempt.
        "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
        # Scrapy's decompression without its charset guess on the compressed bytes
        "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": None,
        "crawler.middlewares.DecompressionMiddleware": 590,
    },
    "SPIDER_MIDDLEWARES": {
        "crawler.middlewares.TaskOutputMiddleware": 950,
        # Outermost: frees a page's parsed tree once its output is out.
        "crawler.middlewares.ParsedPageRelease": 1,
        # A link's depth is its task's (maxdepth is enforced by the scheduler).
        "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
    },
    "EXTENSIONS": {"crawler.extensions.GarbageCollectorTuning": 0,
                   "crawler.metrics.SpiderMetrics": 0, "crawler.extensions.ShutdownGuard": 0,
                   "crawler.extensions.LoopWatchdog": 0, "crawler.extensions.MemoryBound": 0},
}

SCRAPY = {
    "BOT_NAME": "crawlcluster",
    "SCHEDULER": "crawler.scheduler.ClusterScheduler",
    # Scrapy's, checking a slow domain's throttle token as its request is sent.
    "DOWNLOADER": "crawler.token_deadlines.DeadlineDownloader",
    "DOWNLOADER_MIDDLEWARES": {
        **CLUSTER_COMPONENTS["DOWNLOADER_MIDDLEWARES"], **DOCUMENT_MIDDLEWARES,
        "crawler.middlewares.RandomUserAgentMiddleware": 400,
        "crawler.proxy.ProxyMiddleware": 740,
        # after decompression (590): repairs the charset of the body the spider reads
        "crawler.middlewares.CharsetRepairMiddleware": 100,
        "scrapy.downloadermiddlewares.useragent.UserAgentMiddleware": None,
        # a rule with render loads the page as fetched in Chromium: after decompression
        # (590) and redirects (600), before meta refresh (580) and the charset repair
        "crawler.render.middleware.BrowserRender": 585,
        # Scrapy's own, at less CPU a page (crawler/leanmiddlewares.py)
        "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware": None,
        "crawler.leanmiddlewares.MetaRefresh": 580,
        "scrapy.downloadermiddlewares.stats.DownloaderStats": None,
        "crawler.leanmiddlewares.DownloaderStats": 850,
    },
    # A page over this is cancelled and its task fails (Scrapy's default is 1 GiB).
    "DOWNLOAD_MAXSIZE": 20 * 1024 * 1024,
    "SPIDER_MIDDLEWARES": {**CLUSTER_COMPONENTS["SPIDER_MIDDLEWARES"]},
    "EXTENSIONS": {**CLUSTER_COMPONENTS["EXTENSIONS"]},
    "ITEM_PIPELINES": {**DOCUMENT_PIPELINES, "crawler.pipelines.EncodingPipeline": 100,
                       "crawler.pipelines.CleaningPipeline": 200,
                       "crawler.pipelines.MainTextPipeline": 300,
                       "crawler.pipelines.MongoPipeline": 800},
    "SPIDER_MODULES": ["crawler.spiders"],
    "NEWSPIDER_MODULE": "crawler.spiders",
    "COMMANDS_MODULE": "crawler.commands",
    "LOG_LEVEL": "INFO",
    "ROBOTSTXT_OBEY": True,
    # Scrapy's 100 starts that many asyncio tasks a response; 4 is faster on link-heavy pages
    "CONCURRENT_ITEMS": 4,
    "CONCURRENT_REQUESTS": 16,
    "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    # Connections only to addresses the URL guard allows (crawler/downloadguard.py).
    "TWISTED_DNS_RESOLVER": "crawler.downloadguard.GuardedHostnameResolver",
    "FEED_EXPORT_ENCODING": "utf-8",
    "TELNETCONSOLE_ENABLED": False,
    # Scrapy 2.19 gives every process an HTTP endpoint that runs code sent to it; the
    # node's manager is the cluster's control plane, so a spider process listens on nothing.
    "REMOTE_CONTROL_ENABLED": False,
}
