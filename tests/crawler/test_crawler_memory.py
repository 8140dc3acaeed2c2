"""A spider's memory on real pages: large documentation pages of hundreds of links, one
spider at the default concurrency, its resident memory sampled all along the crawl."""

import gc
import time
import weakref

from scrapy.http import HtmlResponse

from crawler.middlewares import ParsedPageRelease
from manager.local.crawl import Crawl, submit
from manager.local.docsite import DOCS_RULE, DocsSpec, generate_docs_site
from manager.local.ports import free_port
from manager.local.sitelog import check_fetched_once, fetch_summary, page_fetches
from manager.local.staticsite import StaticSite
from master.urls import canonical_url
from settings.procfs import resident_mb

# Past 500 MB before a page's parsed tree was freed with the page (ParsedPageRelease);
# ~140 MB after. The bound for a spider on real pages.
RSS_BOUND_MB = 250


def test_a_spider_crawling_large_documentation_pages_keeps_its_memory_bounded(
        test_settings, mongo_db, tmp_path):
    # half of the reference pages 100-300 KB, ~340 links a page
    spec = DocsSpec(port=free_port([DocsSpec.host]), pages_per_section=150, large_share=0.5,
                    toc_window=250)
    manifest = generate_docs_site(tmp_path / "docs", spec)
    with StaticSite(tmp_path / "docs" / "www", [spec.host], spec.port, tmp_path / "run") as site:
        submit(test_settings, {"crawlid": "memory", "spider_type": "universal",
                               "maxdepth": 50, "url": manifest["start_url"], "rule": DOCS_RULE})
        crawl = Crawl(test_settings, "universal", tmp_path)
        spider = crawl.workers[0]
        samples = []
        deadline = time.monotonic() + 300
        try:
            while spider.poll() is None and time.monotonic() < deadline:
                rss = resident_mb(spider.pid)
                if rss is not None:
                    samples.append(rss)
                time.sleep(0.2)
        finally:
            crawl.stop()
        fetched = page_fetches(site.access_log(), site.port)
    log = (tmp_path / "spider0.log").read_text()
    print(f"\nlarge documentation pages, one spider: RSS max {max(samples):.0f} MB over "
          f"{len(samples)} samples; nginx served {fetch_summary(fetched)}")
    assert spider.returncode == 0, "the spider did not finish (recycled, killed or hung)"
    assert "crawlcluster/memory/recycled_at_mb" not in log
    check_fetched_once(fetched, [page["url"] for page in manifest["pages"]])
    details = {p["url"] for p in manifest["pages"] if p["kind"] == "detail"}
    stored = {canonical_url(item["url"])
              for item in mongo_db["items_universal"].find({"crawlid": "memory"})}
    assert stored == details
    assert max(samples) < RSS_BOUND_MB, f"spider RSS peaked at {max(samples):.0f} MB"


def _freed_once_done(release):
    """Whether a page whose selector was used is freed by reference counting alone once
    ``release(response, output)`` has let its callback's output out."""
    response = HtmlResponse("http://example.com/", body=b"<html><a href='a'>a</a></html>")
    page = weakref.ref(response)
    links = response.css("a::attr(href)").getall()
    gc.disable()
    try:
        assert list(release(response, iter(links))) == ["a"]
        del response
        return page() is None
    finally:
        gc.enable()


def test_a_pages_parsed_tree_is_freed_when_its_output_is_out():
    assert _freed_once_done(ParsedPageRelease().process_spider_output)
    # without it the page and its selector wait for the cyclic collector
    assert not _freed_once_done(lambda response, output: output)
