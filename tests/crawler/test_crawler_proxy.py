"""The proxy pool against a real local forward proxy, MongoDB and nginx."""

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from crawler.proxy import ProxyPool
from manager.local.crawl import ROOT, cluster_env, run_crawl, submit
from manager.local.ports import free_port, listening
from manager.local.processes import stop_process
from manager.local.staticsite import StaticSite
from tests.crawler.test_crawler_crawl import PRECISE_RULE

FORWARD_PROXY = """
import sys
from twisted.internet import reactor
from twisted.web import http, proxy

class LoggingRequest(proxy.ProxyRequest):
    def process(self):
        with open(sys.argv[2], "a") as log:
            log.write(self.uri.decode() + "\\n")
        super().process()

class LoggingProxy(proxy.Proxy):
    requestFactory = LoggingRequest

factory = http.HTTPFactory()
factory.protocol = LoggingProxy
reactor.listenTCP(int(sys.argv[1]), factory, interface="127.0.0.1")
reactor.run()
"""


@pytest.fixture
def forward_proxy(tmp_path):
    port, log = free_port(), tmp_path / "proxy.log"
    process = subprocess.Popen([sys.executable, "-c", FORWARD_PROXY, str(port), str(log)],
                               stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while not listening("127.0.0.1", port):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    yield {"ip": "127.0.0.1", "port": str(port), "type": "HTTP", "anonymity": "high"}, log
    stop_process(process.pid)


def dead_proxy():
    return {"ip": "127.0.0.1", "port": str(free_port()), "type": "HTTP"}


def test_validator_keeps_live_proxies_and_removes_dead_ones(mongo_db, forward_proxy,
                                                            static_site):
    live, log = forward_proxy
    manifest, _ = static_site
    pool = ProxyPool(mongo_db["proxies"], [manifest["start_url"]], timeout=4)
    assert pool.add_many([live, dead_proxy()]) == 2
    assert pool.validate() == (1, 1)
    assert [p["_id"] for p in pool.all()] == [f"127.0.0.1:{live['port']}"]
    assert manifest["start_url"] in log.read_text()
    assert pool.get_random()["_id"] == f"127.0.0.1:{live['port']}"


def test_report_bad_removes_after_repeated_failures(mongo_db):
    pool = ProxyPool(mongo_db["proxies"], [], max_failures=2)
    proxy = dead_proxy()
    pool.add_many([proxy])
    pool.report_bad(f"127.0.0.1:{proxy['port']}")
    assert len(pool.all()) == 1
    pool.report_bad(f"127.0.0.1:{proxy['port']}")
    assert pool.all() == [] and pool.get_random() is None


def test_crawl_through_the_pool_skips_a_dead_proxy(test_settings, mongo_db, redis,
                                                   forward_proxy, static_site, tmp_path):
    live, log = forward_proxy
    manifest, _ = static_site
    pool = ProxyPool(mongo_db["proxies"], [])
    dead = dead_proxy()
    pool.add_many([live, dead])
    host = manifest["spec"]["hosts"][0]
    start = f"http://{host}:{manifest['spec']['port']}/list/1.html"
    submit(test_settings, {"crawlid": "proxied", "spider_type": "precise", "url": start,
                           "rule": PRECISE_RULE})
    assert run_crawl(test_settings, "precise", tmp_path, CRAWLCLUSTER_PROXY_ENABLED="true") == [0]

    assert mongo_db["items_precise"].count_documents({"crawlid": "proxied"}) == 30
    proxied = log.read_text().splitlines()
    assert sum(1 for url in proxied if "/news/" in url) >= 30      # pages went via the proxy
    failures = mongo_db["proxies"].find_one({"_id": f"127.0.0.1:{dead['port']}"})
    assert failures is None or failures["failures"] >= 1           # the dead one was reported


def test_proxy_list_spider_stores_only_live_proxies(test_settings, mongo_db, forward_proxy,
                                                    tmp_path, static_site):
    live, _ = forward_proxy
    dead = dead_proxy()
    www = tmp_path / "www" / "127.0.0.1"
    www.mkdir(parents=True)
    rows = "".join(f"<tr><td>{p['ip']}</td><td>{p['port']}</td><td>HTTP</td><td>高匿</td>"
                   f"<td>1.2秒</td><td>3天</td></tr>" for p in (live, dead))
    (www / "list.html").write_text(f"<html><body><table id='ip'>{rows}</table></body></html>")
    port = free_port()
    manifest, _ = static_site
    with StaticSite(tmp_path / "www", ["127.0.0.1"], port, tmp_path / "run"):
        source = {"url": f"http://127.0.0.1:{port}/list.html", "rows": "//table[@id='ip']/tr",
                  "fields": {"ip": "td[1]/text()", "port": "td[2]/text()",
                             "type": "td[3]/text()", "anonymity": "td[4]/text()",
                             "speed": "td[5]/text()", "alive_time": "td[6]/text()"}}
        env = cluster_env(test_settings, CRAWLCLUSTER_PROXY_SOURCES=json.dumps([source]),
                          CRAWLCLUSTER_PROXY_TEST_URLS=json.dumps([manifest["start_url"]]))
        result = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "proxylist"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                                check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    [stored] = ProxyPool(mongo_db["proxies"], []).all()
    assert stored["_id"] == f"127.0.0.1:{live['port']}"
    assert (stored["anonymity"], stored["speed"], stored["alive_time"]) == ("高匿", "1.2秒", "3天")


def test_proxy_api_over_http(test_settings, mongo_db, forward_proxy):
    live, _ = forward_proxy
    ProxyPool(mongo_db["proxies"], []).add_many([live])
    port = free_port()
    ours = os.environ.get("CRAWLCLUSTER_PROXY_API")      # an xdist worker's own, or none
    env = cluster_env(test_settings, CRAWLCLUSTER_PROXY_API=f"127.0.0.1:{port}")
    process = subprocess.Popen([sys.executable, "-m", "manager.cli", "proxy", "serve"],
                               env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while not listening("127.0.0.1", port):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/random", timeout=5) as response:
            body = json.loads(response.read())
        assert body["proxy"] == f"http://127.0.0.1:{live['port']}"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/bad?address=127.0.0.1:{live['port']}", method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.loads(response.read()) == {"status": "ok"}
    finally:
        stop_process(process.pid)
    assert os.environ.get("CRAWLCLUSTER_PROXY_API") == ours      # the child's, not ours


def test_pushback_through_a_pooled_proxy_switches_to_another(mongo_db):
    """A site pushing back at a request through a pooled proxy: the next requests go
    through the others, and the proxy's failure is counted in the pool."""
    from scrapy import Request

    from crawler.proxy import ProxyMiddleware

    pool = ProxyPool(mongo_db["proxies"], [])
    first, second = dead_proxy(), dead_proxy()
    pool.add_many([first, second])
    middleware = ProxyMiddleware(pool, refresh=60.0)
    request = Request("http://example.org/")
    middleware.process_request(request)
    used = request.meta["proxy"]
    middleware.pushed_back(request=request, domain="example.org", reason="429")
    assert used not in middleware.proxies and len(middleware.proxies) == 1
    assert {p["_id"]: p["failures"] for p in pool.all()}[used.split("://")[1]] == 1
    for _ in range(5):
        again = Request("http://example.org/")
        middleware.process_request(again)
        assert again.meta["proxy"] != used
    mine = Request("http://example.org/", meta={"proxy": "http://127.0.0.9:1"})
    middleware.pushed_back(request=mine, domain="example.org", reason="429")   # not pooled
    assert len(middleware.proxies) == 1
