"""Metadata benchmark: a page's publication date without a rule, on real news pages.

  python bench/fields.py [--pages DIR] [--crawl-rounds N] [--copies N]

On the article-extraction benchmark's 181 pages (../shared/benchmarks/article-extraction):

- truth: the publication date the page's markup gives, as extruct (a peer library) reads
  it: JSON-LD ``datePublished``, OpenGraph ``article:published_time``, microdata
  ``datePublished``, or the date ``<meta>`` tags; pages whose markup gives none are left
  out of the scores;
- ``published_same_day_with_markup``: pages where our ``meta.published``
  (crawler/pagemeta.py) is on the truth's day, over the pages with a truth;
- with every JSON-LD block, ``<meta>`` tag, ``itemprop`` and ``<time>`` stripped, the
  same day found by our fallback against the best library run here on the stripped
  page (htmldate with its extensive search, and dateparser's search of the visible text):
  ``fallback_vs_best_library``;
- ``cpu_meta_on_vs_off``: CPU per page of what a spider does with a page it stores, on
  against off: the response parsed (``response.selector``, as Scrapy parses it), its
  links (crawler/links.py), then the item pipeline (MainTextPipeline: the main text;
  with ``meta`` on, the metadata too); ``cpu_pipeline_meta_on_vs_off`` the same for the
  item pipeline's work on the parsed page alone (htmldate's caches of parsed dates
  emptied before each pass);
- ``spider_cpu_meta_on_vs_off``: one spider process of ours crawling the pages served by
  nginx (``--copies`` times each), its whole life's CPU a page, meta on against off, the
  median of the rounds' ratios (bench/meta_crawl.py; ``--crawl-rounds 0`` leaves it
  out); ``spider_meta_cpu_ms_per_page`` what meta adds a page.

The last line is one JSON object.
"""

import argparse
import copy
import gzip
import json
import re
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scrapy.http import HtmlResponse  # noqa: E402

from bench.common import bench_settings, drop_zookeeper_root, finish, machine  # noqa: E402
from bench.meta_crawl import spider_cpu_meta_on_vs_off  # noqa: E402
from crawler.links import page_urls  # noqa: E402
from crawler.pagemeta import page_meta  # noqa: E402
from crawler.pipelines import MainTextPipeline  # noqa: E402

PAGES = ROOT.parent / "shared" / "benchmarks" / "article-extraction"
ROUNDS = 15          # passes each way; a pass of 181 pages is ~1 s
DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
DATE_META = ("article:published_time", "datepublished", "date", "pubdate", "publishdate",
             "dc.date", "dc.date.issued", "dcterms.created", "sailthru.date",
             "parsely-pub-date")


def day(value):
    """The ``YYYY-MM-DD`` a date string starts with, or None."""
    found = DAY.search(str(value or ""))
    return "-".join(found.groups()) if found else None


def markup_truth(html, url):
    """The page's publication day as extruct reads its markup, or None."""
    import extruct

    data = extruct.extract(html, base_url=url, syntaxes=["json-ld", "microdata", "opengraph"],
                           uniform=True, errors="ignore")
    for thing in _flat(data.get("json-ld", [])) + _flat(data.get("microdata", [])):
        if isinstance(thing, dict) and day(thing.get("datePublished")):
            return day(thing["datePublished"])
    for graph in data.get("opengraph", []):
        if day(graph.get("article:published_time")):
            return day(graph["article:published_time"])
    import lxml.html

    for tag in lxml.html.fromstring(html).xpath("//meta[@content]"):
        name = (tag.get("property") or tag.get("name") or tag.get("itemprop") or "").lower()
        if name in DATE_META and day(tag.get("content")):
            return day(tag.get("content"))
    return None


def _flat(things):
    out = []
    for thing in things:
        if isinstance(thing, dict) and "@graph" in thing:
            out += _flat(thing["@graph"])
        elif isinstance(thing, list):
            out += _flat(thing)
        else:
            out.append(thing)
    return out


def stripped(root):
    """The page with its date markup taken out."""
    root = copy.deepcopy(root)
    for element in root.xpath('//script[@type="application/ld+json"] | //meta | //time'):
        element.drop_tree()
    for element in root.xpath("//*[@itemprop]"):
        del element.attrib["itemprop"]
    return root


def peers(root, url):
    """The days the libraries find on a stripped page: {library: day or None}."""
    from dateparser.search import search_dates
    from htmldate import find_date

    found = {}
    try:
        found["htmldate"] = day(find_date(copy.deepcopy(root), url=url, extensive_search=True,
                                          original_date=True))
    except Exception:  # noqa: BLE001 - a library that fails finds nothing
        found["htmldate"] = None
    text = " ".join(root.text_content().split())[:5000]
    dates = search_dates(text, settings={"PREFER_DATES_FROM": "past"}) or []
    found["dateparser_search"] = day(dates[0][1].isoformat()) if dates else None
    return found


def spider_work(pipeline, body, url):
    """What a spider does with a page it stores: the response parsed, its links, then
    the item pipeline (the main text, whose walk gathers what the metadata reads, then
    ``meta``)."""
    response = HtmlResponse(url, body=body, encoding="utf-8")
    page_urls(response)
    pipeline.process_item({"_body": response.selector.root, "url": url})


def pipeline_work(pipeline, root, url):
    """The item pipeline's own work on the parsed page."""
    pipeline.process_item({"_body": root, "url": url})


def forget_parsed_dates():
    """Empty htmldate's caches of the date strings it has parsed (they outlive a page:
    its latest acceptable date changes once a day), so that each pass meets the pages'
    dates anew as a spider meets new pages."""
    import htmldate.extractors
    import htmldate.validators

    for cached in (htmldate.extractors.try_date_expr, htmldate.validators.filter_ymd_candidate,
                   htmldate.validators._parse_and_validate):
        cached.cache_clear()


def on_vs_off(work, pages, rounds=ROUNDS):
    """CPU seconds a page with meta off and on: every page's work done with one, then
    with the other (which comes first alternates round by round), each the least of
    ``rounds``. Each page once a pass, as a spider sees it: work done twice in a row on
    one page is cheaper the second time, whichever it is."""
    pipelines = {False: MainTextPipeline(meta=False), True: MainTextPipeline(meta=True)}

    def one_pass(meta):
        forget_parsed_dates()
        started = time.process_time()
        for page, url in pages:
            work(pipelines[meta], page, url)
        return (time.process_time() - started) / len(pages)

    one_pass(True)                # imports and compiled patterns: the first page's only
    least = {False: float("inf"), True: float("inf")}
    for number in range(rounds):
        for meta in ((False, True) if number % 2 == 0 else (True, False)):
            least[meta] = min(least[meta], one_pass(meta))
    return least[False], least[True]


def main():
    import lxml.html

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=Path, default=PAGES)
    parser.add_argument("--crawl-rounds", type=int, default=3,
                        help="rounds of the spider's crawl with meta off and on (0: none)")
    parser.add_argument("--copies", type=int, default=16,
                        help="times each page is served to that crawl")
    args = parser.parse_args()
    truth_file = json.loads((args.pages / "ground-truth.json").read_text())
    with_truth = same_day = 0
    fallback = {"ours": 0, "htmldate": 0, "dateparser_search": 0}
    trees, pages = [], []
    for n, path in enumerate(sorted((args.pages / "html").glob("*.html.gz")), 1):
        html = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        url = truth_file[path.name.split(".")[0]]["url"]
        root = lxml.html.fromstring(html)
        trees.append((root, url))
        pages.append((html.encode(), url))
        truth = markup_truth(html, url)
        print(f"\r  page {n}/{len(truth_file)}", end="", flush=True)
        if truth is None:
            continue
        with_truth += 1
        same_day += day(page_meta(root, url).get("published")) == truth
        bare = stripped(root)
        fallback["ours"] += day(page_meta(bare, url).get("published")) == truth
        for library, found in peers(bare, url).items():
            fallback[library] += found == truth
    print()
    best = max(("htmldate", "dateparser_search"), key=lambda name: fallback[name])
    off, on = on_vs_off(spider_work, pages)
    pipeline_off, pipeline_on = on_vs_off(pipeline_work, trees)
    crawled = crawl_on_vs_off(pages, args.copies, args.crawl_rounds)
    finish({"pages": len(trees), "pages_with_markup_date": with_truth,
            "published_same_day_with_markup": same_day / max(with_truth, 1),
            "fallback_same_day": fallback, "best_library": best,
            "fallback_vs_best_library": fallback["ours"] / max(fallback[best], 1),
            "cpu_ms_per_page_meta_off": off * 1000, "cpu_ms_per_page_meta_on": on * 1000,
            "cpu_meta_on_vs_off": on / off,
            "cpu_ms_per_parsed_page_meta_off": pipeline_off * 1000,
            "cpu_ms_per_parsed_page_meta_on": pipeline_on * 1000,
            "cpu_pipeline_meta_on_vs_off": pipeline_on / pipeline_off, **crawled,
            "machine": machine()})


def crawl_on_vs_off(pages, copies, rounds):
    """The spider's CPU a page crawling the pages, meta on and off (bench/meta_crawl.py)."""
    if rounds < 1:
        return {}
    settings = bench_settings(("redis", "zookeeper", "mongodb", "kafka"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    print(f"a spider crawling them ({copies} copies a page), meta off and on:", flush=True)
    try:
        crawled, each_round = spider_cpu_meta_on_vs_off(settings, pages, copies, rounds)
    finally:
        drop_zookeeper_root(settings)
    # by round: the machine's speed drifts over minutes, a round's two runs are adjacent
    return {"spider_crawled_pages": crawled,
            "spider_cpu_ms_per_page_meta_off": median(off for off, _ in each_round),
            "spider_cpu_ms_per_page_meta_on": median(on for _, on in each_round),
            "spider_meta_cpu_ms_per_page": median(on - off for off, on in each_round),
            "spider_cpu_meta_on_vs_off": median(on / off for off, on in each_round),
            "spider_cpu_ms_rounds_off_on": each_round}


if __name__ == "__main__":
    main()
