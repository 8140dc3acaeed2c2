"""A Scrapy project of a user's own on the cluster (tests/crawler/userproject): its
spider, written for plain Scrapy, crawls through the frontier after one settings line
(``ADDONS``), and gives the items it gives under plain Scrapy, each page fetched once."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from manager.local.crawl import cluster_env
from manager.local.services import StaticSite, free_port
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.sitelog import check_fetched_once, fetch_summary, page_fetches
from settings.clients import redis_client
from settings.loader import environment_for

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).parent / "userproject"


@pytest.fixture(scope="module")
def news_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("user-spider-site")
    spec = SiteSpec(port=free_port(["127.0.0.1"]), hosts=("127.0.0.1",),
                    details_per_host=120, seed=7)
    manifest = generate_site(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as site:
        yield manifest, site


def scrapy_crawl(env, out, start, log, *options):
    """``scrapy crawl news`` in the user's project, its items written to ``out``."""
    with open(log, "w") as stream:
        return subprocess.Popen(
            [sys.executable, "-m", "scrapy", "crawl", "news", "-a", f"start={start}",
             "-O", f"{out}:jsonlines", "-s", "LOG_LEVEL=INFO", *options],
            cwd=PROJECT, env=env, stdin=subprocess.DEVNULL, stdout=stream,
            stderr=subprocess.STDOUT)


def items_of(path):
    return sorted((json.loads(line) for line in Path(path).read_text().splitlines()),
                  key=lambda item: item["url"])


def plain_scrapy_items(start, tmp_path):
    env = {k: v for k, v in environment_for({}).items()}
    process = scrapy_crawl(env, tmp_path / "plain.jsonl", start, tmp_path / "plain.log",
                           "-s", "ADDONS={}")
    assert process.wait(120) == 0, (tmp_path / "plain.log").read_text()[-3000:]
    return items_of(tmp_path / "plain.jsonl")


def test_a_user_spider_crawls_through_the_cluster_each_page_once(
        test_settings, news_site, tmp_path):
    manifest, site = news_site
    start = manifest["start_url"]
    expected = plain_scrapy_items(start, tmp_path)
    since = len(site.access_log())
    env = cluster_env(test_settings)
    with open(tmp_path / "master.log", "w") as log:
        master = subprocess.Popen([sys.executable, "-m", "manager.cli", "master"], cwd=ROOT,
                                  env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=log)
    # the start page also yields a request whose meta holds a set
    spiders = [scrapy_crawl(env, tmp_path / f"cluster{n}.jsonl", start,
                            tmp_path / f"spider{n}.log", "-a", "bad_meta=1") for n in range(2)]
    try:
        codes = [spider.wait(180) for spider in spiders]
    finally:
        for process in [*spiders, master]:
            if process.poll() is None:
                process.terminate()
                process.wait(10)
    logs = "".join((tmp_path / f"spider{n}.log").read_text() for n in range(2))
    assert codes == [0, 0], logs[-5000:]
    assert ("spider 'news', callback 'parse_list': request meta['seen'] holds a set, which is "
            "not JSON") in logs
    assert "'crawlcluster/links/refused/not_json': 1" in logs
    fetched = page_fetches(site.access_log()[since:], site.port)
    print(f"\nuser spider, two processes: nginx served {fetch_summary(fetched)}; "
          f"{len(expected)} items under plain Scrapy")
    check_fetched_once(fetched, [p["url"] for p in manifest["pages"]
                                 if p["kind"] in ("index", "list", "detail")])
    items = sorted(items_of(tmp_path / "cluster0.jsonl") + items_of(tmp_path / "cluster1.jsonl"),
                   key=lambda item: item["url"])
    assert items == expected
    client = redis_client(test_settings, "test")
    try:
        from master.keys import Keys

        assert client.exists(Keys.from_settings(test_settings).crawl("news"))
    finally:
        client.close()
