"""Link extraction: crawler/links.py against Scrapy's LinkExtractor on real pages.

  python bench/links.py [--pages DIR ...] [--rounds 3]

Every page of the shared benchmarks (the 181 news pages of article-extraction and the
570 pages of maintext-genres, each at its own URL where the benchmark gives one) is
parsed once; then, for each rule below, the URLs the universal spider takes from it by
``crawler.links`` and by Scrapy's ``LinkExtractor`` are compared (any difference is
printed and the run exits non-zero), and the CPU time of each is measured (the page's
parse is not counted: both start from the parsed page; each rule's extractors take
turns, the best of ``--rounds``). The rules: every link (what the spider counts), the
default deny extensions, ``allow`` and ``deny`` patterns, ``allow_domains``,
``restrict_xpaths`` and ``restrict_css``. The last line is one JSON object with
``pages``, ``links``, ``differences`` and ``cpu_vs_link_extractor`` (our time over
LinkExtractor's, all rules).
"""

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrapy.http import HtmlResponse  # noqa: E402
from scrapy.linkextractors import LinkExtractor  # noqa: E402

from bench.common import finish, machine  # noqa: E402
from crawler.links import ExtensionSet, page_urls, rule_urls  # noqa: E402

BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
DEFAULT_URL = "https://www.example.com/section/page.html"


def rules_for(url):
    """The rules each page is read with (``allow_domains`` its own host)."""
    host = urlparse(url).hostname or "example.com"
    return {
        "every link": {"deny_extensions": []},
        "default deny extensions": {},
        "allow and deny": {"allow": [r"/20\d\d/", r"\.html?$", r"/(news|blog|docs?)/"],
                           "deny": [r"\?", r"/tag/"]},
        "allow_domains": {"allow_domains": [host.removeprefix("www.")]},
        "restrict_xpaths": {"restrict_xpaths": ["//body//p", "//nav"]},
        "restrict_css": {"restrict_css": ["main", "article", "div.content"]},
    }


def load_pages(directories):
    """``[(url, body bytes)]`` of every page of the benchmark directories."""
    pages = []
    for directory in directories:
        truth = {}
        for name in ("ground-truth.json", "truth.json"):
            if (directory / name).exists():
                truth = json.loads((directory / name).read_text(encoding="utf-8"))
        for path in sorted((directory / "html").glob("*.html.gz")):
            key = path.name.removesuffix(".html.gz")
            url = truth.get(key, {}).get("url") or DEFAULT_URL
            pages.append((url, gzip.decompress(path.read_bytes())))
    return pages


def compare(pages, rounds):
    """``(links, differences, ours seconds, LinkExtractor seconds)`` over every page and
    rule."""
    links = differences = 0
    ours_s = theirs_s = 0.0
    for url, body in pages:
        response = HtmlResponse(url=url, body=body)
        assert response.selector.root is not None   # parsed once, before either runs
        for label, spec in rules_for(url).items():
            extractor = LinkExtractor(unique=True, **spec)
            extensions = ExtensionSet(extractor.deny_extensions)
            best = [float("inf"), float("inf")]
            for _ in range(rounds):
                started = time.process_time()
                ours = rule_urls(response, extractor, page_urls(response), extensions)
                best[0] = min(best[0], time.process_time() - started)
                started = time.process_time()
                theirs = [link.url for link in extractor.extract_links(response)]
                best[1] = min(best[1], time.process_time() - started)
            ours_s, theirs_s = ours_s + best[0], theirs_s + best[1]
            links += len(theirs)
            if ours != theirs:
                differences += 1
                print(f"  DIFFERENT: {url} ({label}): only ours "
                      f"{sorted(set(ours) - set(theirs))[:5]}, only Scrapy's "
                      f"{sorted(set(theirs) - set(ours))[:5]}, "
                      f"order differs: {set(ours) == set(theirs)}", flush=True)
    return links, differences, ours_s, theirs_s


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=Path, nargs="*",
                        default=[BENCHMARKS / "article-extraction",
                                 BENCHMARKS / "maintext-genres"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pages = load_pages(args.pages)
    if not pages:
        sys.exit(f"no pages under {', '.join(map(str, args.pages))}")
    print(f"links: {len(pages)} pages, {len(rules_for(DEFAULT_URL))} rules; {machine()}",
          flush=True)
    links, differences, ours_s, theirs_s = compare(pages, args.rounds)
    checked = len(pages) * len(rules_for(DEFAULT_URL))
    print(f"  {links:,} links; {differences} of {checked} page-rules differ; "
          f"crawler.links {ours_s * 1e3 / checked:.2f} ms, LinkExtractor "
          f"{theirs_s * 1e3 / checked:.2f} ms a page and rule: "
          f"{ours_s / theirs_s:.2f}x", flush=True)
    finish({"pages": len(pages), "rules": len(rules_for(DEFAULT_URL)), "links": links,
            "differences": differences,
            "ms_per_page_rule": ours_s * 1e3 / checked,
            "link_extractor_ms_per_page_rule": theirs_s * 1e3 / checked,
            "cpu_vs_link_extractor": ours_s / theirs_s})
    if differences:
        sys.exit(1)


if __name__ == "__main__":
    main()
