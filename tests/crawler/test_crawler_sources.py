"""Sitemaps, feeds and robots.txt read into the URLs they list, within bounds
(crawler/sources.py)."""

import gzip

from crawler.sources import read_feed, read_robots, read_sitemap

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://a.example/1.html</loc><lastmod>2026-11-20</lastmod></url>
  <url><loc>http://a.example/2.html</loc></url>
  <url><lastmod>2026-11-21</lastmod></url>
</urlset>"""
INDEX = b"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>http://a.example/s1.xml.gz</loc></sitemap>
  <sitemap><loc>http://a.example/s2.xml</loc></sitemap>
</sitemapindex>"""
ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>News</title><id>urn:x</id>
  <updated>2026-11-23T10:00:00Z</updated>
  <entry><title>First</title><link href="http://a.example/news/1.html"/><id>1</id>
    <updated>2026-11-23T09:30:00Z</updated></entry>
  <entry><title>No link</title><id>2</id><updated>2026-11-23T09:00:00Z</updated></entry>
</feed>"""
RSS = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>N</title>
  <item><title>One</title><link>http://a.example/n/1</link>
    <pubDate>Mon, 23 Nov 2026 08:00:00 +0100</pubDate></item>
</channel></rss>"""
LIMITS = {"max_urls": 50_000, "max_bytes": 50 * 1024 * 1024}


def test_a_urlset_gives_its_pages_with_lastmod():
    source = read_sitemap(URLSET, **LIMITS)
    assert [(entry.url, entry.fields) for entry in source.pages] == [
        ("http://a.example/1.html", {"lastmod": "2026-11-20"}), ("http://a.example/2.html", {})]
    assert source.sitemaps == [] and source.problem is None


def test_an_index_gives_its_sitemaps_and_gzip_is_unpacked():
    source = read_sitemap(gzip.compress(INDEX), **LIMITS)
    assert source.sitemaps == ["http://a.example/s1.xml.gz", "http://a.example/s2.xml"]
    assert source.pages == []


def test_what_is_not_a_sitemap_says_so():
    for body in (b"<html><body><a href='/x'>x</a></body></html>", b"\x00\x01 not xml at all",
                 b"", b'{"urls": []}', gzip.compress(b"<html></html>")[:20]):
        assert read_sitemap(body, **LIMITS).problem == "sitemap_invalid", body


def test_a_gzip_bomb_is_refused_before_it_is_unpacked_whole():
    bomb = gzip.compress(b"<" * (60 * 1024 * 1024))
    assert len(bomb) < 100_000
    assert read_sitemap(bomb, **LIMITS).problem == "sitemap_too_big"
    assert read_sitemap(URLSET, max_urls=10, max_bytes=100).problem == "sitemap_too_big"


def test_entries_past_the_limit_are_counted_not_taken():
    urls = "".join(f"<url><loc>http://a.example/{n}</loc></url>" for n in range(50_001))
    body = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
    source = read_sitemap(body.encode(), **LIMITS)
    assert len(source.pages) == 50_000 and source.dropped == 1


def test_atom_and_rss_feeds_give_links_dates_and_titles():
    atom = read_feed(ATOM, max_urls=10)
    assert [(entry.url, entry.fields) for entry in atom.pages] == [
        ("http://a.example/news/1.html",
         {"feed_title": "First", "published": "2026-11-23T09:30:00+00:00"})]
    [rss] = read_feed(RSS, max_urls=10).pages
    assert rss.url == "http://a.example/n/1" and rss.fields["published"] == \
        "2026-11-23T07:00:00+00:00"
    assert read_feed(RSS, max_urls=0).dropped == 1


def test_what_is_not_a_feed_says_so():
    for body in (b"<html><body>hello</body></html>", b"plain text", URLSET[:40]):
        assert read_feed(body, max_urls=10).problem == "feed_invalid", body


def test_robots_sitemap_lines():
    robots = b"User-agent: *\nDisallow: /private/\nSitemap: /sitemap.xml\n" \
             b"sitemap: http://b.example/news.xml\n"
    assert read_robots(robots, "http://a.example/robots.txt").sitemaps == [
        "http://a.example/sitemap.xml", "http://b.example/news.xml"]
