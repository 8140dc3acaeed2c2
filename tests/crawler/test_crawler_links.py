"""crawler/links.py gives exactly the URLs Scrapy's LinkExtractor gives, for every kind of
rule: on the real pages kept in tests/crawler/pages, on the 751 pages of the shared
main-text benchmarks when they sit beside the checkout (``../shared/benchmarks``, as
bench/maintext.py reads them; ``python bench/links.py`` checks and times the same), and
on pages of generated ``href`` values (every shape the fast paths take or refuse)."""

import gzip
from pathlib import Path
from urllib.parse import urlparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.http import HtmlResponse
from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor
from scrapy.utils.url import url_has_any_extension

from crawler.links import ExtensionSet, page_urls, rule_urls, url_path

PAGES = Path(__file__).parent / "pages"
BENCHMARKS = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"
RULES = [
    {"deny_extensions": []},
    {},
    {"allow": [r"/20\d\d/", r"\.html?$"], "deny": [r"\?", r"/tag/"]},
    {"allow_domains": ["example.com"], "deny_domains": ["blog.example.com"]},
    {"deny_extensions": ["tar.gz", "pdf", ""]},
    {"restrict_xpaths": ["//body//p", "//nav"]},
    {"restrict_css": ["main", "div.content"]},
]
URLS = ["https://www.example.com/news/2024/story.html", "http://blog.example.com:8080/a//b/../c"]


def real_pages():
    """The kept pages at two URLs, the benchmarks' at one: ``(body, url)`` params."""
    for path in sorted(PAGES.rglob("*.htm*")):
        body = path.read_bytes()
        body = gzip.decompress(body) if path.suffix == ".gz" else body
        for n, url in enumerate(URLS):
            yield pytest.param(body, url, id=f"{path.name}-{n}")
    for path in sorted(BENCHMARKS.glob("*/html/*.html.gz")):
        yield pytest.param(gzip.decompress(path.read_bytes()), URLS[0], id=path.name[:16])


def scrapy_urls(response, spec):
    return [link.url for link in LinkExtractor(unique=True, **spec).extract_links(response)]


def our_urls(response, spec):
    extractor = LinkExtractor(unique=True, **spec)
    return rule_urls(response, extractor, page_urls(response),
                     ExtensionSet(extractor.deny_extensions))


@pytest.mark.parametrize("body, url", list(real_pages()))
def test_real_pages_give_scrapys_links_for_every_rule(body, url):
    response = HtmlResponse(url=url, body=body)
    assert page_urls(response) == scrapy_urls(response, {"deny_extensions": []})
    for spec in RULES:
        assert our_urls(response, spec) == scrapy_urls(response, spec), spec


HREF_PIECES = ["/", "//", ".", "..", "./", "../", "a", "B", "x.html", "?", "#", "q=1", "&",
               ";p", ":", "%", "%41", "'", " ", "\t", "\n", "é", "中", "~", "@", "-", "_",
               "http:", "https:", "HTTP:", "mailto:", "javascript:", "ftp:", "file:",
               "www.Example.com", "example.com:8080", "example.com:99999", "[::1]", "\\",
               "tar.gz", ".PDF", "%2e%2e", "\x00", "+", "$", "*", "(", "="]
BASES = ["https://www.example.com/news/2024/story.html", "http://example.com",
         "http://example.com/dir/", "https://Example.com:443/a//b/./c;x?y=1#f",
         "ftp://example.com/pub/", "http://xn--bcher-kva.example/ü/"]


@settings(max_examples=300, deadline=None)
@given(hrefs=st.lists(st.lists(st.sampled_from(HREF_PIECES), max_size=8).map("".join),
                      min_size=1, max_size=12),
       base=st.sampled_from(BASES),
       tag=st.sampled_from(["a", "area", "link"]),
       encoding=st.sampled_from(["utf-8", "gb18030", "latin-1", "utf-16"]),
       declared_base=st.sampled_from([None, "/other/", "http://b.example.org/x/y", ""]))
def test_generated_hrefs_give_scrapys_links(hrefs, base, tag, encoding, declared_base):
    head = "" if declared_base is None else f'<base href="{declared_base}">'
    anchors = "".join(f'<{tag} href="{href}">{n}</{tag}>' for n, href in enumerate(hrefs))
    html = f"<html><head>{head}</head><body><p>{anchors}</p><a>no href</a></body></html>"
    response = HtmlResponse(url=base, body=html.encode(encoding, errors="ignore"),
                            encoding=encoding)
    for spec in (RULES[0], RULES[1], RULES[4], RULES[5]):
        assert our_urls(response, spec) == scrapy_urls(response, spec), (spec, hrefs)


@settings(max_examples=300)
@given(st.sampled_from(["http://example.com/", "https://a.b:8080", "HTTP://x", "ftp://h/",
                        "", "http://[::1]/", "http://é.com/"]),
       st.lists(st.sampled_from(HREF_PIECES), max_size=10).map("".join))
def test_extension_set_answers_as_scrapy(start, path):
    url = start + path
    assert url_path(url) == urlparse(url).path
    for extensions in ({"." + e for e in IGNORED_EXTENSIONS}, {".tar.gz", ".", ".pdf"},
                       {"pdf", ".html"}):
        # LinkExtractor asks it of urllib's parse of the URL (w3lib parses a string itself)
        assert ExtensionSet(extensions).denies(url) == url_has_any_extension(urlparse(url),
                                                                            extensions)
