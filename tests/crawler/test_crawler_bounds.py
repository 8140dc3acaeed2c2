"""What a long-running process keeps per domain or site stays bounded (pure logic)."""

import time
from types import SimpleNamespace

from scrapy import Request
from scrapy.http import Headers

from crawler.preview import fetch
from crawler.preview.fetch import PageFetcher, RobotsRules
from crawler.scheduler import slots
from crawler.scheduler.slots import space_fetches
from crawler.urlguard import UrlGuard


def test_throttled_slot_settings_are_kept_for_a_bounded_number_of_domains(monkeypatch):
    monkeypatch.setattr(slots, "SLOT_SETTINGS_KEPT", 50)
    downloader = SimpleNamespace(slots={}, per_slot_settings={"own.example": {"delay": 1}})
    crawler = SimpleNamespace(engine=SimpleNamespace(downloader=downloader))
    for number in range(1_000):
        space_fetches(crawler, Request(f"http://d{number}.example/"), f"d{number}.example", 2.0)
        if number % 7 == 0:              # a slot Scrapy made and has not dropped yet
            downloader.slots[f"crawlcluster-throttled:d{number}.example"] = object()
    assert len(downloader.per_slot_settings) <= 50 + 1000 // 7 + 1
    assert downloader.per_slot_settings["own.example"] == {"delay": 1}   # the project's own
    assert downloader.per_slot_settings["crawlcluster-throttled:d999.example"] == {
        "concurrency": 1, "delay": 2.0, "jitter": 0.0}
    live = [key for key in downloader.slots if key not in downloader.per_slot_settings]
    assert live == []                    # a live slot's settings are never dropped


def test_a_previews_robots_cache_keeps_a_bounded_number_of_sites(monkeypatch):
    monkeypatch.setattr(fetch, "MAX_ROBOTS", 20)
    fetcher = PageFetcher(None, "preview", "universal", "127.0.0.1", True, "agent", UrlGuard())
    monkeypatch.setattr(fetcher, "_get", lambda url, headers: (200, Headers({}), b""))
    for number in range(500):
        assert fetcher.allowed(f"http://site{number}.example/page.html")
    assert len(fetcher.robots) == 20
    assert "http://site499.example" in fetcher.robots          # the newest kept


def test_a_previews_robots_rules_are_read_again_after_their_max_age(monkeypatch):
    fetcher = PageFetcher(None, "preview", "universal", "127.0.0.1", True, "agent", UrlGuard(),
                          RobotsRules(max_age=0.2))
    read = []
    monkeypatch.setattr(fetcher, "_get", lambda url, headers: read.append(url) or (
        200, Headers({}), b"User-agent: *\nDisallow: /private"))
    assert fetcher.allowed("http://site.example/a") and not fetcher.allowed(
        "http://site.example/private/1")
    assert read == ["http://site.example/robots.txt"]            # read once, kept
    time.sleep(0.3)
    assert fetcher.known_robots("http://site.example/a") is None
    fetcher.allowed("http://site.example/a")
    assert len(read) == 2
