"""Pushback benchmark: a site whose hosts limit their rate, crawled by crawlcluster on two
nodes, by Scrapy with AutoThrottle, and by the same spider under scrapy-redis.

  python bench/pushback.py [--seconds S] [--rounds N] [--runs ours autothrottle ...]

Four hosts (127.0.0.1-4), each a generated documentation site (``manager.local.docsite``:
hundreds of links a page, index pages linked from every page, fragments), served by nginx
with nginx's own limiter (``limit_req``, ``nodelay``) at a rate the crawlers are not told:
  127.0.0.1  10/s, burst 5:  429 with ``Retry-After: 1``
  127.0.0.2   6/s, burst 5:  429 without ``Retry-After``
  127.0.0.3   4/s, burst 2:  429 with ``Retry-After: 2``
  127.0.0.4   5/s, burst 20 (and 10/s, burst 3): 503 with ``Retry-After: 3``, an
             overloaded server: bursts pass until its backlog fills, then it refuses
robots.txt is not limited. Each host has pages in proportion to its rate (``--seconds`` of
crawling at the hidden rates), so a crawler that keeps every host at its rate finishes
all four together, at the sum of the rates. Every crawler is configured well above them:
``LIMIT`` requests a second a host (ours: the throttle's hits a second; Scrapy:
``DOWNLOAD_DELAY`` = 1/``LIMIT``). Every round runs, in turn:
  - ``ours``: crawlcluster, a dispatcher and two spider processes as two nodes (their own
    addresses for the per-node throttle), one crawl a host;
  - ``autothrottle``: one Scrapy process, the ``CrawlSpider`` of bench/crawl_vanilla.py with
    ``AUTOTHROTTLE_ENABLED`` and Scrapy's other defaults (``RETRY_HTTP_CODES`` has 429
    and 503, ``RETRY_TIMES`` 2), items to MongoDB as Scrapy's documentation shows;
  - ``scrapy_redis``: the same spider and settings under scrapy-redis's scheduler and
    dupefilter, two processes.
Every figure comes from nginx's log of the run ($msec, $request_time, $status and the
``Retry-After`` sent): ``pushbacks_per_1000`` (429 and 503 answers per 1,000 of the site's
pages), ``retry_after_violations`` (requests that arrived at a host while a
``Retry-After`` it sent was running, those arriving within ``GRACE`` s of the answer left
out: they were on the wire before it), ``efficiency`` (distinct pages answered 200 a
second, first request to last, over the sum of the hidden rates), ``pages_done_ratio``
(pages answered 200 at least once over the site's pages), ``fetches_per_page`` (200
answers over pages done), ``requests_per_page`` (every answer over pages done); and
``cpu_ms_per_page``, the crawler processes' CPU time (user + system; ours with its
dispatcher) over pages done. The last line is one JSON object: ours' medians over the
rounds as top-level keys, ``pushbacks_vs_autothrottle`` (the median of the rounds' ours
over AutoThrottle's ``pushbacks_per_1000``), ``targets`` (each target and whether the
medians meet it), each run's medians under ``runs`` and every round under ``rounds``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_redis,
    bench_settings,
    drop_bench_database,
    drop_zookeeper_root,
    finish,
    machine,
)
from bench.crawl import children_cpu_seconds, scrapy_redis_settings  # noqa: E402
from manager.local.crawl import Crawl, cluster_env, submit  # noqa: E402
from manager.local.docsite import DOCS_RULE, DocsSpec, generate_docs_site  # noqa: E402
from manager.local.ports import free_port  # noqa: E402
from manager.local.staticsite import StaticSite  # noqa: E402
from master.urls import canonical_url  # noqa: E402


@dataclass(frozen=True)
class HostLimit:
    """One host's hidden limit: ``rate`` a second with ``burst`` more at once, refused
    with ``status`` (and ``Retry-After: retry_after`` when set); ``peak``: a second,
    short-term limit (rate, burst) in front of it."""

    host: str
    rate: float
    burst: int
    status: int = 429
    retry_after: int | None = None
    peak: tuple[float, int] | None = None


HOSTS = (
    HostLimit("127.0.0.1", 10, 5, retry_after=1),
    HostLimit("127.0.0.2", 6, 5),
    HostLimit("127.0.0.3", 4, 2, retry_after=2),
    HostLimit("127.0.0.4", 5, 20, status=503, retry_after=3, peak=(10, 3)),
)
LIMIT = 40                      # what every crawler is configured to, requests/s a host
GRACE = 0.05                    # s after a Retry-After answer: requests already on the wire
COOL_DOWN = 5.0                 # s between runs: every pause over, every bucket drained
NODES = ["10.0.0.1", "10.0.0.2"]
TIMEOUT = 1800
RUNS = ("ours", "autothrottle", "scrapy_redis")
TARGETS = {"retry_after_violations": ("<=", 0), "pushbacks_per_1000": ("<=", 20),
           "pushbacks_vs_autothrottle": ("<=", 0.5), "efficiency": (">=", 0.8),
           "pages_done_ratio": (">=", 1.0)}
LOG_FORMAT = ("log_format pushback '$msec $request_time $server_addr $status "
              "\"$sent_http_retry_after\" $request_uri';")


class LimitedSite(StaticSite):
    """``StaticSite`` with more directives in nginx's http block (the limiters' zones, the
    benchmark's log format and access log)."""

    def __init__(self, *args, http_directives=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.http_directives = list(http_directives)

    def _config(self):
        config = super()._config().rstrip()
        assert config.endswith("}"), "the http block closes the configuration"
        return config[:-1] + "".join(f"    {line}\n" for line in self.http_directives) + "}\n"


def nginx_limits(limits, run_dir):
    """``(http directives, {host: server directives})`` of the hidden limits and the
    benchmark's own access log (``pushback.log``)."""
    http = [LOG_FORMAT, f"access_log {run_dir}/pushback.log pushback;"]
    servers = {}
    for number, limit in enumerate(limits):
        zones = [(f"host{number}", limit.rate, limit.burst)]
        if limit.peak:
            zones.append((f"peak{number}", *limit.peak))
        http += [f"limit_req_zone $server_addr zone={zone}:1m rate={rate}r/s;"
                 for zone, rate, _ in zones]
        refusal = f"return {limit.status};"
        if limit.retry_after is not None:
            refusal = f"add_header Retry-After {limit.retry_after} always; {refusal}"
        servers[limit.host] = [
            "location / { "
            + " ".join(f"limit_req zone={zone} burst={burst} nodelay;"
                       for zone, _, burst in zones)
            + f" limit_req_status {limit.status}; error_page {limit.status} @refused; }}",
            f"location @refused {{ {refusal} }}",
            "location = /robots.txt { }"]
    return http, servers


def generate_hosts(root, port, limits, seconds):
    """A documentation site on each host, its pages in proportion to the host's rate
    (``seconds`` of crawling at it); ``[manifest]``, one a host."""
    manifests = []
    for number, limit in enumerate(limits):
        spec = DocsSpec(port=port, host=limit.host, seed=number + 1, toc_window=200)
        fixed = len(spec.sections) + 6          # indexes, search, the queried pages
        per_section = max(1, round((limit.rate * seconds - fixed) / len(spec.sections)))
        spec.pages_per_section = per_section
        manifests.append(generate_docs_site(root, spec))
    return manifests


def read_answers(path, since):
    """The answers logged from line ``since`` on: dicts with ``arrived`` (s), ``answered``
    (s), host, status, retry_after (s or None), path; and the next line's number."""
    if not path.exists():
        return [], since
    lines = path.read_text(errors="replace").splitlines()
    answers = []
    for line in lines[since:]:
        msec, taken, host, status, retry_after, uri = line.split(" ", 5)
        retry_after = retry_after.strip('"')
        answers.append({"answered": float(msec), "arrived": float(msec) - float(taken),
                        "host": host, "status": int(status), "path": uri,
                        "retry_after": float(retry_after) if retry_after.isdigit() else None})
    return answers, len(lines)


def retry_after_violations(answers):
    """Requests that arrived at a host while a Retry-After it had sent was running (those
    within ``GRACE`` s of the answer that started the pause left out)."""
    paused = {}                 # host -> (answered at, paused until)
    violations = 0
    for answer in sorted(answers, key=lambda a: a["arrived"]):
        started, until = paused.get(answer["host"], (0.0, 0.0))
        if started + GRACE < answer["arrived"] < until:
            violations += 1
        if answer["retry_after"] is not None:
            end = answer["answered"] + answer["retry_after"]
            paused[answer["host"]] = ((started, max(until, end)) if answer["arrived"] < until
                                      else (answer["answered"], end))
    return violations


def figures(answers, pages, port, hidden_sum, cpu_seconds):
    """One run's figures from its answers (robots.txt left out) and CPU seconds."""
    answers = [a for a in answers if not a["path"].endswith("/robots.txt")]
    if not answers:
        raise SystemExit("no request reached the site; see the run's logs")
    url = {id(a): canonical_url(f"http://{a['host']}:{port}{a['path']}") for a in answers}
    done = {url[id(a)] for a in answers if a["status"] == 200} & pages
    oks = sum(1 for a in answers if a["status"] == 200)
    pushbacks = sum(1 for a in answers if a["status"] in (429, 503))
    times = [a["arrived"] for a in answers]
    span = max(times) - min(times)
    pages_per_s = len(done) / span if span > 0 else 0.0
    return {"pages_done": len(done), "pages_done_ratio": len(done) / len(pages),
            "pushbacks": pushbacks, "pushbacks_per_1000": pushbacks * 1000 / len(pages),
            "retry_after_violations": retry_after_violations(answers),
            "pages_per_s": pages_per_s, "efficiency": pages_per_s / hidden_sum,
            "seconds": span, "fetches_per_page": oks / max(len(done), 1),
            "requests_per_page": len(answers) / max(len(done), 1),
            "cpu_ms_per_page": cpu_seconds * 1e3 / max(len(done), 1),
            "others": len(answers) - oks - pushbacks}


def run_ours(settings, manifests, work, label):
    """One crawl a host on crawlcluster (a frontier of its own), a dispatcher and two
    spider processes as two nodes; CPU seconds of all three."""
    settings = settings.copy_with(
        CRAWLCLUSTER_KEY_PREFIX=f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{label}")
    for number, manifest in enumerate(manifests):
        submit(settings, {"crawlid": f"{label}-{number}", "spider_type": "universal",
                          "maxdepth": 50, "url": manifest["start_url"], "rule": DOCS_RULE})
    log_dir = work / label
    log_dir.mkdir()
    before = children_cpu_seconds()
    crawl = Crawl(settings, "universal", log_dir, node_ips=NODES, LOG_LEVEL="INFO",
                  CRAWLCLUSTER_IDLE_TIMEOUT=10, CRAWLCLUSTER_THROTTLE_HITS=LIMIT,
                  CRAWLCLUSTER_THROTTLE_WINDOW=1)
    codes = crawl.wait(TIMEOUT)
    if any(codes):
        raise SystemExit(f"a spider of ours failed ({codes}); see {log_dir}")
    return children_cpu_seconds() - before


def peer_settings(settings, label, processes):
    """The Scrapy settings of the peer: AutoThrottle on, at most ``LIMIT`` a second a
    host, items to MongoDB; under scrapy-redis (its keys under the benchmark's prefix,
    kept while another process runs) when ``processes`` > 1."""
    scrapy = {"AUTOTHROTTLE_ENABLED": "True", "DOWNLOAD_DELAY": str(1 / LIMIT),
              "CONCURRENT_REQUESTS": "16", "LOG_LEVEL": "INFO",
              "ITEM_PIPELINES": json.dumps({"bench.crawl_vanilla.VanillaMongoPipeline": 300})}
    if processes > 1:
        prefix = f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{label}"
        scrapy.update(scrapy_redis_settings(settings), SCHEDULER_FLUSH_ON_START="False",
                      SCHEDULER_PERSIST="True",
                      SCHEDULER_QUEUE_KEY=f"{prefix}:%(spider)s:requests",
                      SCHEDULER_DUPEFILTER_KEY=f"{prefix}:%(spider)s:dupefilter")
    return scrapy


def run_peer(settings, manifests, work, label, processes):
    """bench/crawl_vanilla.py's CrawlSpider from outside the project, ``processes`` at
    once, every host's start URL; their CPU seconds."""
    rule_file = work / "rule.json"
    rule_file.write_text(json.dumps(DOCS_RULE))
    starts = " ".join(manifest["start_url"] for manifest in manifests)
    args = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "crawl_vanilla.py"),
            "-a", f"start={starts}", "-a", f"rule={rule_file}", "-a", f"crawlid={label}"]
    for name, value in peer_settings(settings, label, processes).items():
        args += ["-s", f"{name}={value}"]
    env = cluster_env(settings, fast=False, PYTHONPATH=str(ROOT))
    before = children_cpu_seconds()
    workers = []
    for number in range(processes):
        with open(work / f"{label}-{number}.log", "w") as log:
            workers.append(subprocess.Popen(args, cwd=tempfile.mkdtemp(prefix="pushback-"),
                                            env=env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT))
    codes = [worker.wait(TIMEOUT) for worker in workers]
    if any(codes):
        raise SystemExit(f"the peer {label} failed ({codes}); see {work}")
    return children_cpu_seconds() - before


def one_round(settings, manifests, site, work, number, runs):
    """Every run of one round: ``{run: figures}``."""
    pages = {page["url"] for manifest in manifests for page in manifest["pages"]}
    hidden_sum = sum(limit.rate for limit in HOSTS)
    log = site.run_dir / "pushback.log"
    results = {"load_average": os.getloadavg()[0]}
    for run in runs:
        label = f"{run}-{number}-{uuid.uuid4().hex[:4]}"
        _, since = read_answers(log, 0)
        if run == "ours":
            cpu = run_ours(settings, manifests, work, label)
        else:
            cpu = run_peer(settings, manifests, work, label, 2 if run == "scrapy_redis" else 1)
        answers, _ = read_answers(log, since)
        results[run] = figures(answers, pages, site.port, hidden_sum, cpu)
        print(f"  {run:<13} " + ", ".join(
            f"{name} {value:.3g}" for name, value in results[run].items()), flush=True)
        time.sleep(COOL_DOWN)
    return results


def median_ratio(pairs):
    """The median of ``top / bottom`` over the rounds' pairs: a round with neither
    counts as 0, one with only ``top`` has no ratio (None if no round has one). A peer
    slowed by a loaded machine may meet no pushback at all."""
    ratios = [top / bottom if bottom else (0.0 if not top else None) for top, bottom in pairs]
    ratios = [ratio for ratio in ratios if ratio is not None]
    return statistics.median(ratios) if ratios else None


def summary(rounds, runs):
    """Every run's medians, ours' as the headline, the ratio to AutoThrottle, targets."""
    medians = {run: {name: statistics.median(r[run][name] for r in rounds)
                     for name in rounds[0][run]} for run in runs}
    top = dict(medians.get("ours", {}))
    if "ours" in runs and "autothrottle" in runs:
        top["pushbacks_vs_autothrottle"] = median_ratio(
            [(r["ours"]["pushbacks_per_1000"], r["autothrottle"]["pushbacks_per_1000"])
             for r in rounds])
    targets = {name: (value, top[name] is not None and (
                   top[name] <= value if op == "<=" else top[name] >= value))
               for name, (op, value) in TARGETS.items() if name in top}
    if "fetches_per_page" in top:
        targets["fetches_per_page"] = (1.0, top["fetches_per_page"] <= 1.0)
    return top, medians, {name: {"target": value, "met": met}
                          for name, (value, met) in targets.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60,
                        help="pages on each host for this long a crawl at its hidden rate")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    args = parser.parse_args()
    settings = bench_settings(("redis", "zookeeper", "mongodb", "kafka"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    work = Path(tempfile.mkdtemp(prefix="pushbackbench-"))
    port = free_port([limit.host for limit in HOSTS])
    manifests = generate_hosts(work / "site", port, HOSTS, args.seconds)
    pages = sum(len(manifest["pages"]) for manifest in manifests)
    print(f"bench/pushback.py on {machine()}: {pages} pages on {len(HOSTS)} hosts, hidden "
          f"rates {', '.join(f'{limit.rate:g}' for limit in HOSTS)}/s, crawlers configured "
          f"to {LIMIT}/s a host; {args.rounds} rounds of {', '.join(args.runs)}", flush=True)
    http, servers = nginx_limits(HOSTS, work / "run")
    rounds = []
    with bench_redis(settings), \
            LimitedSite(work / "site" / "www", [limit.host for limit in HOSTS], port,
                        work / "run", locations=servers, http_directives=http) as site:
        for number in range(1, args.rounds + 1):
            print(f"round {number}", flush=True)
            rounds.append(one_round(settings, manifests, site, work, number, args.runs))
            drop_bench_database(settings)
    drop_zookeeper_root(settings)
    top, medians, targets = summary(rounds, args.runs)
    finish({**top, "targets": targets, "runs": medians, "rounds": rounds,
            "hidden_rates": {limit.host: limit.rate for limit in HOSTS},
            "configured_limit": LIMIT, "pages": pages, "seconds": args.seconds,
            "machine": machine()})


if __name__ == "__main__":
    main()
