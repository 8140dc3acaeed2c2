"""Prometheus metrics on real servers: the nodes' and the exporter's ``/metrics`` during
a real crawl across two nodes, scraped by a real Prometheus; the shipped config and
alert rules through promtool; what a scrape costs Redis with 1,000 domains queued."""

import json
import shutil
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from manager.local.cluster import LocalCluster, manager_url
from manager.local.demo import UNIVERSAL_RULE
from manager.local.installs import require_program
from manager.local.ports import free_port
from manager.local.processes import spawn, stop_process
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import StaticSite
from manager.metrics import cluster_registry
from master.figures import TOTAL
from master.frontier import Frontier
from master.keys import Keys
from master.tasks import make_task
from message_processing.client import RequestClient

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "docs" / "prometheus"


def scrape(url):
    """``{(name, labels as a sorted tuple): value}`` of one /metrics page."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples, name, **labels):
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(value for (sample, sample_labels), value in samples.items()
               if sample == name and set(labels.items()) <= set(sample_labels))


def by_label(samples, name, label):
    found = Counter()
    for (sample, labels), value in samples.items():
        if sample == name:
            found[dict(labels)[label]] += value
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics-site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=60, seed=11)
    manifest = generate_site(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        yield manifest, served


@pytest.fixture
def cluster(test_settings, kafka_topics, zookeeper, redis, mongo_db, tmp_path):
    settings = test_settings.copy_with(
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_MANAGER_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_EXPORTER_ADDRESS=f"127.0.0.1:{free_port()}",
        # a tight per-domain limit, so the throttle refuses takes
        CRAWLCLUSTER_THROTTLE_HITS=8, CRAWLCLUSTER_THROTTLE_WINDOW=1.0,
        CRAWLCLUSTER_DISPATCH_WINDOW=2.0, CRAWLCLUSTER_DISPATCH_HEADROOM=3.0,
        CRAWLCLUSTER_IDLE_TIMEOUT=0.0, CRAWLCLUSTER_HEARTBEAT_TTL=6.0)
    local = LocalCluster(settings, nodes=2, procs=1, spider_types=("universal",),
                         out=lambda *_: None)
    local.up()
    yield local
    local.down(servers=False)


@pytest.fixture
def prometheus(cluster, tmp_path):
    """A real Prometheus scraping the exporter and both managers every second, with the
    shipped alert rules loaded."""
    binary = require_program("prometheus", "prometheus")
    port = free_port()
    targets = [cluster.exporter_address()] + [
        cluster.node_settings(n)["CRAWLCLUSTER_MANAGER_ADDRESS"] for n in (1, 2)]
    shutil.copy(PROMETHEUS_DIR / "alerts.yml", tmp_path / "alerts.yml")
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": ["alerts.yml"],
              "scrape_configs": [{"job_name": "crawlcluster",
                                  "static_configs": [{"targets": targets}]}]}
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))   # JSON is YAML
    process = spawn([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prometheus.log")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail((tmp_path / "prometheus.log").read_text()[-2000:])
            time.sleep(0.3)
    yield url
    stop_process(process.pid)


def query(prometheus_url, expression):
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=10) as response:
        reply = json.loads(response.read())
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def wait_drained(client, crawlid, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.ask({"type": "info", "userid": "metrics", "crawlid": crawlid})
        if info["total_pending"] == 0 and info.get("done"):
            return info
        time.sleep(1.0)
    raise AssertionError(f"crawl {crawlid} did not drain: {info}")


def test_metrics_of_a_real_crawl_match_mongodb_and_nginx(cluster, site, mongo_db, prometheus):
    manifest, served = site
    settings = cluster.settings
    nodes = [manager_url(cluster.node_settings(n)) + "metrics" for n in (1, 2)]
    exporter = f"http://{cluster.exporter_address()}/metrics"
    since = len(served.access_log())
    client = RequestClient.from_settings(settings, timeout=60)
    try:
        ack = client.ask({"type": "crawl", "userid": "metrics", "crawlid": "watched",
                          "spider_type": "universal", "url": manifest["start_url"],
                          "rule": UNIVERSAL_RULE, "maxdepth": 20})
        assert ack["status"] == "accepted"
        # during the crawl: work pending in the exporter's gauges, pages/s in Prometheus
        busiest, rates = 0.0, []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            figures = scrape(exporter)
            busiest = max(busiest, total(figures, "crawlcluster_crawl_pending_tasks",
                                         crawlid="watched"))
            rates += [float(result["value"][1]) for result in query(
                prometheus, "sum(rate(crawlcluster_pages_total[5s]))")]
            info = client.ask({"type": "info", "userid": "metrics", "crawlid": "watched"})
            if info["total_pending"] == 0 and info.get("done"):
                break
            time.sleep(1.0)
        info = wait_drained(client, "watched")
    finally:
        client.close()
    assert busiest > 0
    assert max(rates, default=0) > 0, rates

    # The counters reach MongoDB's counts once the last report and flush are in.
    record = items = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        node_samples = [scrape(url) for url in nodes]
        record = mongo_db["crawls"].find_one({"crawlid": "watched"}) or {}
        items = mongo_db["items_universal"].count_documents({"crawlid": "watched"})
        pages = sum(total(s, "crawlcluster_pages_total", spider="universal")
                    for s in node_samples)
        stored = sum(total(s, "crawlcluster_items_total", spider="universal")
                     for s in node_samples)
        statuses = Counter()
        for samples in node_samples:
            statuses.update(by_label(samples, "crawlcluster_responses_total", "status"))
        logged = Counter(str(entry["status"]) for entry in served.access_log()[since:])
        # the page counters grow with the record; statuses are published once a second
        if (pages == record.get("pages") and stored == items and "finished_at" in record
                and statuses == logged):
            break
        time.sleep(1.0)
    assert pages == record["pages"] == info["done"], (pages, record, info)
    assert stored == items == record["items"] > 0
    assert all(total(s, "crawlcluster_pages_total") > 0 for s in node_samples), \
        "both nodes crawled"

    # Status codes: what the spiders counted is what nginx logged.
    assert statuses == logged
    latency = sum(total(s, "crawlcluster_download_latency_seconds_count") for s in node_samples)
    assert latency == sum(logged.values())

    # Drained: every queue-depth gauge is back at zero.
    deadline = time.monotonic() + 20
    while True:
        figures = scrape(exporter)
        node_samples = [scrape(url) for url in nodes]
        depths = {"pending": total(figures, "crawlcluster_crawl_pending_tasks"),
                  "pool": total(figures, "crawlcluster_pool_tasks"),
                  "leased": total(figures, "crawlcluster_leased_tasks"),
                  "jobs": sum(total(s, "crawlcluster_job_tasks") for s in node_samples)}
        if not any(depths.values()) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert depths == {"pending": 0, "pool": 0, "leased": 0, "jobs": 0}
    assert total(figures, "crawlcluster_crawl_tasks_total", crawlid="watched",
                 state="done") == info["done"]

    # The cluster view: jobs, dispatcher, throttle, roles, Bloom filter.
    assert total(figures, "crawlcluster_jobs", spider="universal") == 2
    assert len(by_label(figures, "crawlcluster_dispatch_weight", "job")) == 2
    assert total(figures, "crawlcluster_dispatched_tasks_total") >= info["done"]
    refused = by_label(figures, "crawlcluster_throttle_refusals_total", "domain")
    hosts = {urllib.parse.urlsplit(p["url"]).hostname for p in manifest["pages"]}
    assert refused and set(refused) <= hosts | {"other"}, refused
    up = {labels: value for (name, labels), value in figures.items()
          if name == "crawlcluster_up"}
    roles = {dict(labels)["role"] for labels, value in up.items() if value == 1}
    assert {"master", "preprocess", "monitor", "manager", "exporter"} <= roles, up
    assert total(figures, "crawlcluster_requests_total", role="preprocess") >= 1
    # a few hundred URLs in a filter sized for 10 million: sampled, it reads as about empty
    capacity = settings.getint("CRAWLCLUSTER_BLOOM_CAPACITY")
    assert total(figures, "crawlcluster_bloom_capacity_urls") == capacity
    assert total(figures, "crawlcluster_bloom_urls_estimated") < 0.01 * capacity

    # Prometheus answers from what it scraped: pages per second over the crawl.
    crawled = query(prometheus, "sum(increase(crawlcluster_pages_total[10m]))")
    assert crawled and float(crawled[0]["value"][1]) > 0
    rules = json.loads(urllib.request.urlopen(
        f"{prometheus}/api/v1/rules", timeout=10).read())["data"]["groups"]
    assert {rule["name"] for group in rules for rule in group["rules"]} >= {
        "CrawlStalled", "RoleDown", "SpiderFailureRatioHigh", "BloomFilterErrorAboveConfigured",
        "IntakeFailingRequests"}
    assert all(rule["health"] == "ok" for group in rules for rule in group["rules"]), rules


def test_shipped_prometheus_config_and_alert_rules_pass_promtool():
    promtool = require_program("promtool", "prometheus")
    for args in (["check", "config", str(PROMETHEUS_DIR / "prometheus.yml")],
                 ["check", "rules", str(PROMETHEUS_DIR / "alerts.yml")]):
        result = subprocess.run([promtool, *args], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    dashboard = json.loads((ROOT / "docs" / "grafana" / "crawlcluster.json").read_text())
    exported = {"crawlcluster_pages_total", "crawlcluster_crawl_pending_tasks",
                "crawlcluster_throttle_refusals_total", "crawlcluster_up"}
    exprs = " ".join(target["expr"] for panel in dashboard["panels"]
                     for target in panel["targets"])
    assert all(name in exprs for name in exported)


def redis_cpu_ms(redis):
    info = redis.info("cpu")
    return (info["used_cpu_user"] + info["used_cpu_sys"]) * 1000


def test_a_scrape_costs_redis_under_5_ms_with_1000_domains_queued(redis, test_settings):
    """Redis's own CPU time (INFO cpu, user + system) spent while the exporter reads the
    figures once, less what the two INFO calls around it cost alone; the median of 7."""
    keys = Keys.from_settings(test_settings)
    frontier = Frontier.from_settings(redis, test_settings)
    domains = [f"site{n}.example" for n in range(1000)]
    frontier.push([make_task(f"http://{domain}/{page}", "busy", "universal", depth=0)
                   for domain in domains for page in range(3)])
    pipe = redis.pipeline(transaction=False)
    pipe.zadd(keys.crawls(), {"busy": time.time()})       # as preprocess indexes a crawl
    for domain in domains:
        pipe.zincrby(keys.throttle_refusals(), 5, domain)
    pipe.zincrby(keys.throttle_refusals(), 5000, TOTAL)
    pipe.execute()
    registry = cluster_registry(redis, test_settings)
    samples = {}
    from prometheus_client import generate_latest

    costs, baseline = [], []
    for _ in range(7):
        before = redis_cpu_ms(redis)
        text = generate_latest(registry).decode()
        costs.append(redis_cpu_ms(redis) - before)
        before = redis_cpu_ms(redis)
        baseline.append(redis_cpu_ms(redis) - before)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    cost = statistics.median(costs) - statistics.median(baseline)
    print(json.dumps({"scrape_redis_cpu_ms": round(cost, 3), "runs": costs,
                      "baseline": baseline}))
    assert total(samples, "crawlcluster_pool_tasks", spider="universal") == 3000
    assert total(samples, "crawlcluster_crawl_pending_tasks", crawlid="busy") == 3000
    refused = by_label(samples, "crawlcluster_throttle_refusals_total", "domain")
    top = test_settings.getint("CRAWLCLUSTER_METRICS_TOP_DOMAINS")
    assert len(refused) == top + 1 and refused["other"] == 5 * (1000 - top)
    assert cost < 5.0


def test_pushback_metrics_show_the_top_domains_and_the_rest_as_other(redis, test_settings):
    """Domains pushing back: counts, rate factors and pauses left, for the most pushed
    back and the rest as ``other`` (the series stay bounded)."""
    from prometheus_client import generate_latest

    from master.pushback import PushbackStore

    store = PushbackStore.from_settings(redis, test_settings)
    top = test_settings.getint("CRAWLCLUSTER_METRICS_TOP_DOMAINS")
    domains = [f"site{n}.example" for n in range(top + 10)]
    for n, domain in enumerate(domains):
        for _ in range(1 + (n < top)):       # the first ``top`` twice, the rest once
            store.report(domain, "429", retry_after=60.0 if n == 0 else 0.0, window=0.0)
    samples = {}
    text = generate_latest(cluster_registry(redis, test_settings)).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    counts = by_label(samples, "crawlcluster_pushbacks_total", "domain")
    assert len(counts) == top + 1 and counts["other"] == 10 and counts["site0.example"] == 2
    factors = by_label(samples, "crawlcluster_pushback_rate_factor", "domain")
    assert len(factors) == top + 1 and factors["site0.example"] == pytest.approx(0.64)
    assert factors["other"] == pytest.approx(0.8, abs=0.01)     # rising again since
    paused = by_label(samples, "crawlcluster_pushback_paused_seconds", "domain")
    assert 55 < paused["site0.example"] <= 60 and paused["site1.example"] == 0


def test_site_metrics_show_a_crawls_top_sites_and_the_rest_as_other(redis, test_settings):
    """A recent crawl's health per site: pages, statuses, items, drops and each field's
    coverage for its sites with the most pages, the rest summed as ``(other)``."""
    from prometheus_client import generate_latest

    from manager.local.crawl import submit
    from master.lua import LuaScripts
    from master.sitehealth import OTHER, SiteCounts, queue_site_counts

    submit(test_settings, {"crawlid": "health", "spider_type": "universal",
                           "url": "http://site0.example/", "rule": UNIVERSAL_RULE})
    most = test_settings.getint("CRAWLCLUSTER_METRICS_TOP_DOMAINS")
    counts = SiteCounts()
    for n in range(most + 5):
        for _ in range(most + 5 - n):           # site0 the most pages, then fewer
            counts.page("health", f"site{n}.example", 200)
            counts.item("health", f"site{n}.example", ["title"], {"title": "T" * (n % 2)},
                        ["title"] if n % 2 == 0 else [])
    pipe = redis.pipeline(transaction=False)
    queue_site_counts(pipe, LuaScripts(redis), Keys.from_settings(test_settings),
                      counts.take(), 500)
    pipe.execute()
    samples = {}
    text = generate_latest(cluster_registry(redis, test_settings)).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    pages = by_label(samples, "crawlcluster_site_pages_total", "site")
    assert len(pages) == most + 1 and pages["site0.example"] == most + 5
    assert pages[OTHER] == 5 + 4 + 3 + 2 + 1                 # the five with the fewest
    coverage = by_label(samples, "crawlcluster_site_field_coverage", "site")
    assert coverage["site0.example"] == 0 and coverage["site1.example"] == 1
    dropped = by_label(samples, "crawlcluster_site_items_dropped_total", "site")
    assert dropped["site0.example"] == most + 5 and dropped["site1.example"] == 0
    responses = by_label(samples, "crawlcluster_site_responses_total", "site")
    assert responses["site2.example"] == most + 3
