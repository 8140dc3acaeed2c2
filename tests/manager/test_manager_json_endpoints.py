"""The manager is safe to expose: beyond loopback it will not start without credentials
and asks for them (401); its JSON endpoints take only JSON (415); a browser's cross-site
POST is refused (403); previews run in a bounded pool of their own (503 "busy" when it
is full, Twisted's pool left free) and their replies are capped.

An address beyond loopback is made for the test: a bridge of its own with an address of
198.18.0.0/15 (manager/local/netns.py; needs root)."""

import base64
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from manager.json_endpoints import capped_reply
from manager.local.crawl import cluster_env
from manager.local.demo import UNIVERSAL_RULE
from manager.local.netns import NodeNetwork
from manager.local.ports import listening
from master.siteconfig import SiteConfig, domain_of
from tests.manager.test_manager_node import Manager

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "pw-" + base64.b32encode(bytes(range(10))).decode()
AUTH = ("ops", PASSWORD)
JSON = "application/json"


@pytest.fixture
def outside_address():
    """An address of this host that is not loopback."""
    with NodeNetwork(0, site_addresses=0) as network:
        yield network.gateway


@pytest.fixture
def managers(test_settings, zookeeper, redis, tmp_path):
    started = []

    def start(**extra):
        started.append(Manager(test_settings, tmp_path, **extra).start())
        return started[-1]

    yield start
    for manager in started:
        manager.stop()


def post(manager, endpoint, body, content_type=JSON, auth=None, headers=()):
    """``(status, JSON reply, headers)`` of a POST of ``body`` (bytes, or JSON made)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{manager.host}:{manager.port}/{endpoint}",
                                     data=data, method="POST", headers=dict(headers))
    if content_type:
        request.add_header("Content-Type", content_type)
    if auth:
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.startswith(b"{") else raw, exc.headers


def crawl_request(url):
    return {"url": url, "spider_type": "universal", "rule": UNIVERSAL_RULE}


MULTIPART = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n{}\r\n--x--\r\n'
PAGE = ("<html><body><h1>News</h1><a href='/list/2.html'>next</a>"
        "<a href='/news/1.html'>one</a></body></html>")


def test_beyond_loopback_without_credentials_it_will_not_start(test_settings, outside_address,
                                                                tmp_path):
    for host in (outside_address, "0.0.0.0"):
        manager = Manager(test_settings, tmp_path, host=host)
        run = subprocess.run([sys.executable, "-m", "manager.cli", "manager"],
                             env=cluster_env(manager.settings, fast=False), capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        assert run.returncode != 0
        assert f"listen on {host}:{manager.port}, beyond loopback, with no authentication" in \
            run.stderr, run.stderr
        assert "set CRAWLCLUSTER_MANAGER_USERNAME and CRAWLCLUSTER_MANAGER_PASSWORD" in run.stderr
        assert not listening(host, manager.port)


def test_beyond_loopback_a_preview_without_credentials_gets_401(managers, outside_address):
    manager = managers(host=outside_address, CRAWLCLUSTER_MANAGER_USERNAME=AUTH[0],
                       CRAWLCLUSTER_MANAGER_PASSWORD=AUTH[1])
    asked = {"request": crawl_request("http://example.com/"), "html": PAGE}
    code, _, _ = post(manager, "preview.json", asked)
    assert code == 401
    code, _, _ = post(manager, "preview.json", asked, auth=("ops", "wrong"))
    assert code == 401
    form = urllib.parse.urlencode({"project": "crawlcluster", "spider": "universal"}).encode()
    assert post(manager, "schedule.json", form, "application/x-www-form-urlencoded")[0] == 401
    code, reply, _ = post(manager, "preview.json", asked, auth=AUTH)
    assert code == 200 and reply["status"] == "ok", reply
    assert reply["preview"]["link_counts"]["follow"] >= 1


def test_json_endpoints_take_only_json(managers):
    manager = managers()
    valid = {"type": "info", "userid": "u", "crawlid": "c", "uuid": "q1"}
    for endpoint in ("preview.json", "validate.json", "submit.json"):
        for content_type, body in ((None, valid), ("text/plain", valid),
                                   ("application/x-www-form-urlencoded", valid),
                                   ("multipart/form-data; boundary=x", MULTIPART)):
            code, reply, _ = post(manager, endpoint, body, content_type)
            assert code == 415, (endpoint, content_type, reply)
            assert "Content-Type must be application/json" in reply["message"]
    code, reply, _ = post(manager, "validate.json", valid, "application/json; charset=utf-8")
    assert code == 200 and reply["valid"] is True, reply
    # nested past the limit: refused before it is parsed, naming the limit
    deep = b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    code, reply, _ = post(manager, "validate.json", deep)
    assert code == 200 and "nested deeper than 64 levels" in reply["error"], reply
    code, reply, _ = post(manager, "preview.json", deep)
    assert code == 200 and "nested deeper than 64 levels" in reply["message"], reply


def test_a_cross_site_browser_post_is_refused(managers):
    manager = managers()
    form = urllib.parse.urlencode({"project": "no-such-project", "spider": "universal"}).encode()
    kind = "application/x-www-form-urlencoded"
    code, reply, _ = post(manager, "schedule.json", form, kind,
                          headers={"Sec-Fetch-Site": "cross-site"})
    assert code == 403 and "another site" in reply["message"], reply
    # the UI's own requests, another node's on the same host too, are same-site
    for site in ("same-origin", "same-site", None):
        code, reply, _ = post(manager, "schedule.json", form, kind,
                              headers={"Sec-Fetch-Site": site} if site else {})
        assert "project 'no-such-project' not found" in reply["message"], (site, reply)
    # browsers send no Sec-Fetch-* to a plain-HTTP LAN address, but do send Origin
    own = f"http://{manager.host}:{manager.port}"
    for origin in ("http://evil.example", f"http://{manager.host}:1", "null",
                   f"https://{manager.host}:{manager.port}", own + "/path"):
        code, reply, _ = post(manager, "schedule.json", form, kind,
                              headers={"Origin": origin})
        assert code == 403 and f"Origin {origin} is not" in reply["message"], (origin, reply)
    for origin in (own, own.upper().replace("HTTP://", "http://")):
        code, reply, _ = post(manager, "schedule.json", form, kind,
                              headers={"Origin": origin, "Referer": "http://evil.example/"})
        assert "project 'no-such-project' not found" in reply["message"], (origin, reply)


class SlowSite(http.server.ThreadingHTTPServer):
    """Pages held until ``release`` is set (robots.txt at once: none); counts the pages
    being served right now."""

    def __init__(self):
        self.release, self.serving, self.lock = threading.Event(), 0, threading.Lock()
        super().__init__(("127.0.0.1", 0), SlowPage)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class SlowPage(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/robots.txt":
            self.send_error(404)
            return
        with self.server.lock:
            self.server.serving += 1
        try:
            self.server.release.wait(timeout=120)
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            with self.server.lock:
                self.server.serving -= 1

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_site():
    site = SlowSite()
    yield site
    site.release.set()
    site.shutdown()
    site.server_close()


def test_previews_run_in_a_bounded_pool_of_their_own(managers, slow_site, zookeeper):
    """12 slow previews all fetch at once (more than Twisted's 10 threads), the 13th is
    told "busy" with Retry-After, and an export (Twisted's pool) is answered meanwhile."""
    manager = managers(CRAWLCLUSTER_MANAGER_PREVIEW_THREADS=12)
    SiteConfig.from_settings(manager.settings, zookeeper).set_limit(
        domain_of(f"{slow_site.base}/"), 1000, 1.0)
    time.sleep(1.0)                                   # the manager's watcher sees it

    def asked(n):
        return {"request": crawl_request(f"{slow_site.base}/"),
                "url": f"{slow_site.base}/list/{n}.html"}

    with ThreadPoolExecutor(12) as pool:
        previews = [pool.submit(post, manager, "preview.json", asked(n)) for n in range(12)]
        deadline = time.monotonic() + 15
        while slow_site.serving < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slow_site.serving == 12               # each in a thread of the pool
        code, reply, headers = post(manager, "preview.json", asked(99))
        assert code == 503 and reply["status"] == "busy" and "busy" in reply["message"]
        assert int(headers["Retry-After"]) > 0
        started = time.monotonic()
        export = f"http://127.0.0.1:{manager.port}/export?crawlid=nothing&format=jsonl"
        with urllib.request.urlopen(export, timeout=30) as response:
            assert response.status == 200 and response.read() == b""
        assert time.monotonic() - started < 3.0       # not behind the previews
        slow_site.release.set()
        answers = [future.result() for future in previews]
    assert all(code == 200 and reply["status"] == "ok" for code, reply, _ in answers), answers
    code, reply, _ = post(manager, "preview.json", asked(100))     # the pool is free again
    assert code == 200 and reply["status"] == "ok", reply


def test_a_previews_reply_is_capped(managers):
    cap = 50_000
    manager = managers(CRAWLCLUSTER_MANAGER_REPLY_MAX_BYTES=cap)
    page = PAGE.replace("</body>", "<p>" + "long text " * 30_000 + "</p></body>")
    asked = {"request": crawl_request("http://example.com/"), "html": page, "with_html": True}
    request = urllib.request.Request(f"http://127.0.0.1:{manager.port}/preview.json",
                                     data=json.dumps(asked).encode(), headers={
                                         "Content-Type": JSON})
    with urllib.request.urlopen(request, timeout=60) as response:
        raw = response.read()
    assert len(raw) <= cap
    shown = json.loads(raw)["preview"]
    assert shown["html_truncated"] is True and page.startswith(shown["html"])
    assert shown["link_counts"]["follow"] >= 1                  # the rest is all there


def test_a_reply_over_the_cap_with_nothing_to_cut_names_the_setting():
    code, body = capped_reply({"status": "ok", "reply": {"x": "y" * 1000}}, 500)
    assert code == 500 and len(body) <= 500
    assert "CRAWLCLUSTER_MANAGER_REPLY_MAX_BYTES" in json.loads(body)["message"]
    assert capped_reply({"status": "ok"}, 500) == (200, b'{"status": "ok"}')


def test_the_compose_nodes_health_check_passes_with_auth_on(managers):
    """docker-compose.yml's manager health check, run as the container runs it (the
    node's credentials in its environment) against a manager asking for them."""
    manager = managers(CRAWLCLUSTER_MANAGER_USERNAME=AUTH[0],
                       CRAWLCLUSTER_MANAGER_PASSWORD=AUTH[1])
    node = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["node1"]
    command = [part.replace("127.0.0.1:6800", f"127.0.0.1:{manager.port}")
               for part in node["healthcheck"]["test"][1:]]

    def check(password):
        env = cluster_env(manager.settings, fast=False, CRAWLCLUSTER_MANAGER_PASSWORD=password)
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    assert check(AUTH[1]).returncode == 0
    refused = check("wrong")
    assert refused.returncode != 0 and "401" in refused.stderr
