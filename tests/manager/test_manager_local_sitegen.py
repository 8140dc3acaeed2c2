"""The generated test site: ground truth (unit) and nginx serving it (integration)."""

import time
import urllib.request
from collections import Counter

from manager.local.sitegen import SiteSpec, generate_site


def test_site_ground_truth(tmp_path):
    spec = SiteSpec(port=8000, details_per_host=480, list_page_size=10)
    manifest = generate_site(tmp_path, spec)
    pages = manifest["pages"]
    assert len(pages) == 4 * (1 + 48 + 480) >= 2000
    assert len({p["url"] for p in pages}) == len(pages)
    assert Counter(p["host"] for p in pages) == {h: 529 for h in spec.hosts}
    assert all(p["depth"] is not None for p in pages)          # all reachable from start
    assert manifest["disallowed"] == [f"http://{h}:8000/private/1.html" for h in spec.hosts]
    assert (tmp_path / "site.json").is_file()


def test_generation_is_deterministic(tmp_path):
    one = generate_site(tmp_path / "a", SiteSpec(port=1, details_per_host=5))
    two = generate_site(tmp_path / "b", SiteSpec(port=1, details_per_host=5))
    assert one == two


def test_one_gbk_page_declared_only_in_meta(tmp_path):
    manifest = generate_site(tmp_path, SiteSpec(port=1, details_per_host=3))
    gbk = [p for p in manifest["pages"] if p["encoding"] == "gbk"]
    assert len(gbk) == 1
    raw = (tmp_path / "www" / gbk[0]["host"] / "news" / "1.html").read_bytes()
    assert b'<meta charset="gbk">' in raw
    assert gbk[0]["title"] in raw.decode("gbk")
    assert gbk[0]["title"].encode("utf-8") not in raw


def test_nginx_serves_every_host_and_logs_requests(static_site):
    manifest, site = static_site
    for host in manifest["spec"]["hosts"]:
        detail = next(p for p in manifest["pages"] if p["host"] == host and p["kind"] == "detail")
        with urllib.request.urlopen(detail["url"], timeout=5) as response:
            body = response.read().decode(detail["encoding"])
        assert response.status == 200
        assert detail["title"] in body
        assert all(paragraph in body for paragraph in detail["content"])
    robots = manifest["start_url"] + "robots.txt"
    assert b"Disallow: /private/" in urllib.request.urlopen(robots, timeout=5).read()
    # nginx writes a request's log line once it has sent the response, so it may come a
    # moment after the client has read it: look until it is there, for a few seconds.
    wanted = (manifest["spec"]["hosts"][0], "/robots.txt")
    deadline = time.monotonic() + 5
    while wanted not in (logged := {(e["host"], e["path"]) for e in site.access_log()}) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert wanted in logged
