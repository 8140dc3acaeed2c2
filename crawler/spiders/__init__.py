"""Rule-driven spiders: ``precise`` (list then detail pages) and ``universal``.

Each takes its rule from the crawl the task belongs to (the scheduler puts
the crawl's config in ``response.meta["crawlcluster"]``), so one running
spider serves every crawl of its type.

Links to follow are handed to ``follow``: under the cluster's scheduler they go
straight to its next filter check, as data. A link only becomes a task (its
URL, callback and fields) for whichever job takes it, so a Request made for it
here, and the spider middlewares' and the engine's pass over that Request, were
work thrown away: about a tenth of a page's CPU on bench/crawl.py's site (~23
links a page). Under any other scheduler ``follow`` yields Requests as usual.
"""

import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import scrapy
from lxml import etree
from parsel import Selector, SelectorList, css2xpath
from scrapy import Request
from scrapy.http import Response, TextResponse

from crawler.documents import (
    BODY_FIELD,
    CALLBACK,
    DocumentFailure,
    DocumentRule,
    count_failure,
    document_rule,
    document_urls,
    read_document,
)
from crawler.pageurls import ParameterStripper, canonical_link, same_host
from crawler.sources import Entry, Source, read_feed, read_robots, read_sitemap
from settings import defaults

# What an element of a page can be read from: a page, an element, several elements.
Readable = TextResponse | Selector | SelectorList[Selector]


class Follow(NamedTuple):
    """A link to follow: an absolute, already escaped http(s) URL (as a link extractor
    gives it), the callback's name, and fields for the task of the page it leads to."""

    url: str
    callback: str = "parse"
    extra: dict[str, Any] | None = None


def first_value(selector: Readable, expression: str) -> str:
    """A field's text: every match stripped, the non-empty ones joined by newlines."""
    values = [value.strip() for value in xpath_strings(selector, expression)]
    return "\n".join(value for value in values if value)


_XPATHS: dict[str, etree.XPath] = {}     # expression -> compiled, parsel's namespaces


def xpath_strings(selector: Readable, expression: str) -> list[str]:
    """``selector.xpath(expression).getall()``, without a Selector made for each match:
    making them was most of a field's cost (three fields took 2.6 times as long on the
    751 pages of the main-text benchmarks). Anything but a parsed page or element with
    parsel's default namespaces goes through parsel."""
    if isinstance(selector, TextResponse):
        selector = selector.selector
    if not isinstance(selector, Selector) or selector.type not in ("html", "xml") \
            or not hasattr(selector.root, "xpath") \
            or selector.namespaces != Selector._default_namespaces:
        return selector.xpath(expression).getall()
    compiled = _XPATHS.get(expression)
    if compiled is None:
        try:
            compiled = etree.XPath(expression, namespaces=Selector._default_namespaces,
                                   smart_strings=False)
        except etree.XPathError as exc:
            raise ValueError(f"XPath error: {exc} in {expression}") from None
        if len(_XPATHS) > 10_000:              # the expressions of every crawl's rules
            _XPATHS.clear()
        _XPATHS[expression] = compiled
    try:
        result = compiled(selector.root)
    except etree.XPathError as exc:
        raise ValueError(f"XPath error: {exc} in {expression}") from None
    method = "html" if selector.type == "html" else "xml"
    return [_as_string(match, method) for match in (result if isinstance(result, list)
                                                     else [result])]


def _as_string(match: Any, method: str) -> str:
    """A match as parsel's ``get()`` gives it: text as it is, an element serialized,
    a boolean as "1" or "0", a number as ``str()`` does."""
    if isinstance(match, str):
        return match
    if isinstance(match, bool):
        return "1" if match else "0"
    if isinstance(match, float):
        return str(match)
    return etree.tostring(match, method=method, encoding="unicode", with_tail=False)


def css_strings(selector: Readable, expression: str) -> list[str]:
    """``selector.css(expression).getall()``, as ``xpath_strings`` does it."""
    if isinstance(selector, TextResponse):
        selector = selector.selector
    if isinstance(selector, Selector) and selector.type == "html":
        return xpath_strings(selector, css2xpath(expression))   # parsel's own translation
    return selector.css(expression).getall()


def css_value(selector: Readable, expression: str) -> str:
    """``first_value`` of a CSS selector."""
    values = [value.strip() for value in css_strings(selector, expression)]
    return "\n".join(value for value in values if value)


# Callbacks of the pages that list others: a crawl's sitemaps, feeds, robots.txt.
SOURCE_CALLBACKS = ("parse_sitemap", "parse_feed", "parse_robots")
PROBLEMS = {"sitemap_invalid": "not a sitemap or sitemap index",
            "sitemap_too_big": "a sitemap over CRAWLCLUSTER_SITEMAP_MAX_BYTES unpacked",
            "feed_invalid": "not an RSS or Atom feed"}


class ClusterSpider(scrapy.Spider):
    """Base: no start requests of its own; tasks come from the cluster scheduler.

    Every spider reads a crawl's sources (``parse_sitemap``, ``parse_feed``,
    ``parse_robots``, crawler/sources.py): the sitemaps they point to are followed
    (to ``CRAWLCLUSTER_SITEMAP_MAX_DEPTH`` nested indexes), and the pages they list
    become links of the crawl as a page's links do, through ``entry_links``, each
    spider's own way of taking a page the rules admit. What a source could not give
    is counted as refused links of the crawl, with the reason, and logged."""

    callbacks: tuple[str, ...] = ("parse", "parse_document", *SOURCE_CALLBACKS)
    # set by the cluster's scheduler: takes (response, [Follow, ...], refused)
    link_sink: Callable[[Response, list[Follow], Mapping[str, int] | None], None] | None = None
    # set by the cluster's scheduler: takes (URL, crawl id), marks the URL seen
    seen_sink: Callable[[str, str], None] | None = None
    # CRAWLCLUSTER_MAX_LINKS_PER_PAGE; None: the crawler's settings' (a preview's spider
    # runs without a crawler, so it is given the node's value)
    max_links_per_page: int | None = None

    async def start(self) -> AsyncIterator[Any]:
        return
        yield

    def follow(self, response: Response, links: Iterable[Follow],
               refused: Mapping[str, int] | None = None) -> Iterator[Request]:
        """Hand ``links`` (``Follow``s) on: to the cluster's scheduler if it runs this
        spider, else as Requests (with the fields in ``meta["crawlcluster_extra"]``).
        ``refused`` counts the page's other links by why the rules did not take them
        (``{"rule": n, "scope": n}``), for the crawl's link counts."""
        stripper = self.parameter_stripper()
        if stripper:
            links = [link._replace(url=stripper.clean(link.url)) for link in links]
        if self.document_option(response) is not None:   # any link may answer with a file
            links = [link._replace(extra={"linked_from": response.url, **(link.extra or {})})
                     for link in links]
        links, refused = self._bounded(response, list(links), refused)
        if self.link_sink is not None:
            self.link_sink(response, links, refused)
            return
        for link in links:
            yield Request(link.url, callback=getattr(self, link.callback),
                          meta={"crawlcluster_extra": link.extra})

    def _setting(self, name: str) -> Any:
        """A setting of the crawler, or its default for a spider run without one."""
        settings = getattr(self, "settings", None)
        return settings.get(name) if settings is not None else getattr(defaults, name)

    def parameter_stripper(self) -> ParameterStripper:
        """``CRAWLCLUSTER_STRIPPED_PARAMETERS`` as a ``ParameterStripper``, built once."""
        if getattr(self, "_stripper", None) is None:
            patterns = self._setting("CRAWLCLUSTER_STRIPPED_PARAMETERS")
            if isinstance(patterns, str):         # from the environment: comma-separated
                patterns = [name.strip() for name in patterns.split(",") if name.strip()]
            self._stripper = ParameterStripper(patterns or [])
        return self._stripper

    def page_url(self, response: Response) -> str:
        """The URL a page is stored under: its same-host ``rel=canonical`` (stripped of
        tracking parameters) if it names one and ``CRAWLCLUSTER_HONOUR_CANONICAL``,
        else its own. A canonical on another host, or one that is not another spelling
        of the same kind of page (``canonical_fits``), is counted and ignored."""
        honour = self._setting("CRAWLCLUSTER_HONOUR_CANONICAL")
        canonical = canonical_link(response) if honour not in (False, "0", "False") else None
        if canonical is None:
            return response.url
        stats = getattr(getattr(self, "crawler", None), "stats", None)
        canonical = self.parameter_stripper().clean(canonical).partition("#")[0]
        refused = ("another site" if not same_host(response.url, canonical)
                   else None if self.canonical_fits(response, canonical)
                   else "another kind of page")
        if refused:
            self.logger.info("%s names %s as canonical: %s, ignored",
                             response.url, canonical[:300], refused)
            if stats is not None:
                stats.inc_value("crawlcluster/canonical/" + (
                    "cross_site" if refused == "another site" else "other_kind"))
            return response.url
        if canonical != response.url and stats is not None:
            stats.inc_value("crawlcluster/canonical/honoured")
        return canonical

    def canonical_fits(self, response: Response, canonical: str) -> bool:
        """Whether a same-host canonical can be another spelling of this page. A site's
        root named by any other page is a template's mistake (every article naming the
        home page), not an alias: honouring it would store every such page as one."""
        return urlsplit(canonical).path not in ("", "/") \
            or urlsplit(response.url).path in ("", "/")

    def _bounded(self, response: Response, links: list[Follow], refused: Mapping[str, int] | None
                 ) -> tuple[list[Follow], Mapping[str, int] | None]:
        """A page's first ``CRAWLCLUSTER_MAX_LINKS_PER_PAGE`` links; the rest refused
        (``links_per_page``), logged. A sitemap's or feed's have bounds of their own."""
        most = self.max_links_per_page
        if most is None:        # a spider run without a crawler has no settings: the default
            settings = getattr(self, "settings", None)
            most = (settings.getint("CRAWLCLUSTER_MAX_LINKS_PER_PAGE") if settings is not None
                    else defaults.CRAWLCLUSTER_MAX_LINKS_PER_PAGE)
        task = (response.meta.get("crawlcluster") or {}).get("task", {})
        if not most or len(links) <= most or task.get("callback") in SOURCE_CALLBACKS:
            return links, refused
        self.logger.warning("%s has %d links: the first %d taken "
                            "(CRAWLCLUSTER_MAX_LINKS_PER_PAGE)", response.url, len(links), most)
        return links[:most], {**(refused or {}), "links_per_page": len(links) - most}

    # --- sources: sitemaps, feeds, robots.txt --------------------------------------------

    def parse_sitemap(self, response: Response) -> Iterator[Request]:
        source = read_sitemap(response.body, self.settings.getint("CRAWLCLUSTER_SITEMAP_MAX_URLS"),
                              self.settings.getint("CRAWLCLUSTER_SITEMAP_MAX_BYTES"))
        yield from self._follow_source(response, source)

    def parse_feed(self, response: Response) -> Iterator[Request]:
        yield from self._follow_source(response, read_feed(
            response.body, self.settings.getint("CRAWLCLUSTER_SITEMAP_MAX_URLS")))

    def parse_robots(self, response: Response) -> Iterator[Request]:
        yield from self._follow_source(response, read_robots(response.body, response.url))

    def entry_links(self, response: Response,
                    entries: list[Entry]) -> tuple[list[Follow], Mapping[str, int]]:
        """The pages a source lists as links to follow, and the ones refused by why.
        Here: each page parsed by ``parse``, with the entry's fields."""
        return [Follow(entry.url, "parse", {"entry": entry.fields}) for entry in entries], {}

    def _follow_source(self, response: Response, source: Source) -> Iterator[Request]:
        task = self.crawl_info(response)["task"]
        refused: Counter[str] = Counter()
        if source.problem:
            refused[source.problem] += 1
            self.logger.warning("crawl %s: %s is %s", task["crawlid"], response.url,
                                PROBLEMS[source.problem])
        if source.dropped:
            refused["sitemap_limit"] += source.dropped
            self.logger.warning("crawl %s: %s lists more than CRAWLCLUSTER_SITEMAP_MAX_URLS; "
                                "%d entries left out", task["crawlid"], response.url,
                                source.dropped)
        if source.invalid:
            refused["invalid"] += source.invalid
            self.logger.warning("crawl %s: %s lists %d entries that are no valid URL",
                                task["crawlid"], response.url, source.invalid)
        links, entries_refused = self.entry_links(response, source.pages)
        refused.update(entries_refused)
        nested = task.get("sitemap_depth", 0) + 1
        if nested > self.settings.getint("CRAWLCLUSTER_SITEMAP_MAX_DEPTH"):
            refused["sitemap_depth"] += len(source.sitemaps)
            if source.sitemaps:
                self.logger.warning("crawl %s: %s: sitemap indexes nested deeper than "
                                    "CRAWLCLUSTER_SITEMAP_MAX_DEPTH; %d left out",
                                    task["crawlid"], response.url, len(source.sitemaps))
        else:
            links += [Follow(url, "parse_sitemap", {"sitemap_depth": nested})
                      for url in source.sitemaps]
        yield from self.follow(response, links, refused)

    @staticmethod
    def crawl_info(response: Response) -> dict[str, Any]:
        return response.meta["crawlcluster"]

    # --- documents: the files a rule's pages link (crawler/documents.py) -----------------

    def document_option(self, response: Response) -> DocumentRule | None:
        """The crawl's rule's ``documents``, or None if it takes none (at the cost of two
        lookups for most crawls: this is asked of every page)."""
        rule = (response.meta.get("crawlcluster") or {}).get("config", {}).get("rule") or {}
        if rule.get("documents") is None:
            return None
        return document_rule(rule, int(self._setting("CRAWLCLUSTER_DOCUMENTS_MAX_BYTES")))

    def document_links(self, response: Response, urls: Iterable[str],
                       extra: dict[str, Any] | None = None) -> list[Follow]:
        """The links among ``urls`` to documents the rule takes, once each, as they are
        fetched (no fragment, no tracking parameters), each for ``parse_document`` with
        ``extra``'s fields (``follow`` adds the page's URL)."""
        option = self.document_option(response)
        if option is None:
            return []
        clean = self.parameter_stripper().clean if self.parameter_stripper() else str
        found = dict.fromkeys(clean(url.partition("#")[0])
                              for url in document_urls(urls, option))
        return [Follow(url, CALLBACK, extra) for url in found]

    def parse_document(self, response: Response) -> Iterator[dict[str, Any]]:
        """A document's item: what it is (``read_document``), the page that linked it,
        and the fields its task carries (a precise list entry's), with the file for the
        pipeline that reads its text and stores it; a file not taken is counted and
        logged, and its task done."""
        option = self.document_option(response)
        stats = getattr(getattr(self, "crawler", None), "stats", None)
        if option is None:        # the crawl's rule no longer takes documents
            return
        task = self.crawl_info(response)["task"]
        try:
            fields = read_document(response, option, task.get("linked_from"))
        except DocumentFailure as failure:
            count_failure(stats, response.url, failure.reason, failure.detail)
            return
        if stats is not None:
            stats.inc_value("crawlcluster/documents/fetched")
        item = self.item(response, {**task.get("item", {}), **fields})  # type: ignore[arg-type]
        item[BODY_FIELD] = response.body
        yield item

    def item(self, response: TextResponse, fields: dict[str, Any], url: str | None = None,
             page: bool = False, field_errors: dict[str, str] | None = None
             ) -> dict[str, Any]:
        info = self.crawl_info(response)
        # what a sitemap or feed said of the page (lastmod, published), unless a rule says
        item = {**info["task"].get("entry", {}), **fields}
        if url is None and page:
            url = self.page_url(response)
            if url != response.url and self.seen_sink is not None:
                self.seen_sink(url, info["task"]["crawlid"])
        item.update(url=url or response.url, crawlid=info["task"]["crawlid"],
                    spider_type=self.name, depth=info["task"].get("depth", 0),
                    status=response.status, fetched_at=time.time())
        if field_errors:          # fields a processor could not make (crawler/fields.py)
            item["field_errors"] = field_errors
        if info["config"].get("lineage"):      # a series' run: stored in the series' set
            item["lineage"] = info["config"]["lineage"]
        if page and info["config"]["rule"].get("main_text", True):
            item["_body"] = response.selector.root     # parsed already: not parsed again
        return item
