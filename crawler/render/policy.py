"""``render: auto``'s policy: which pages a crawl renders, learnt per page kind.

A page's kind is its URL template (pagegroups.py), shared by every node through Redis
(``Keys.crawl_render``, and the places learnt to be variables in
``Keys.crawl_render_variables``, of which a process reads only the entries it has not
read; both retired with the crawl). The first ``SAMPLE`` pages of a
template (up to ``SAMPLE_MAX`` if they disagree), and after that a share of its pages
that shrinks fast as its comparisons keep agreeing (one in ``RECHECK`` at first), are
rendered as well, and the two compared on what the crawl wants of them
(``needs_rendering``: the page's links, and the fields its rule extracts); the rendered
one is kept if it gave more. Other pages of a template being sampled wait for the
verdict. Once a template has its sample, its pages go the way most of its compared pages
needed. A crawl learns at most ``MAX_PATTERNS`` templates; a page of another is
rendered. A site (host) has at most ``CRAWLCLUSTER_RENDER_SITE_GROUPS`` templates
sampled: the pages of its further templates go the way most of its compared pages
needed, unsampled (a hostile site's endless calendar, each depth a template of its own,
would otherwise take the browser from every other site of the crawl).
"""

import random
import time
from collections import Counter
from itertools import islice
from typing import Any

from cachetools import LRUCache, TTLCache
from scrapy.http import HtmlResponse, Response, TextResponse

from crawler.render.pagegroups import MAX_PLACES, UrlTemplates
from crawler.rules import compile_universal, every_url
from crawler.spiders import SOURCE_CALLBACKS, css_value, first_value
from master.crawls import (
    RENDER_SAMPLE,
    RENDER_SAMPLE_MAX,
    render_patterns,
    render_sample_left,
)
from master.keys import Keys
from master.rules import field_selector

SAMPLE = RENDER_SAMPLE   # pages of a template compared before its pages go one way, if
SAMPLE_MAX = RENDER_SAMPLE_MAX   # they agree; else up to this many
RECHECK = 50            # then one page in this many is compared again, times the
                        # square of (the comparisons that agreed / SAMPLE): a verdict
                        # confirmed more is checked far less (a template's re-checks grow
                        # as the cube root of its pages)
MAX_PATTERNS = 1000     # templates a crawl learns (Keys.crawl_render's fields / 2)
PLAN_FRESH = 2.0        # seconds a process reuses what it read of a crawl's templates
MAX_CRAWLS = 20         # crawls a process keeps the templates of (a spider runs for months)
PLAN_WAIT = 0.2         # seconds between looks at a template whose sample is being compared


def render_mode(config: dict[str, Any], task: dict[str, Any]) -> str:
    """How a task's page is read: its crawl rule's ``render`` (``never`` if it says
    none), or a precise rule's for the task's step (``{"list": ..., "detail": ...}``).
    A sitemap, feed or robots.txt is never rendered."""
    render = (config.get("rule") or {}).get("render", "never")
    if task.get("callback") in SOURCE_CALLBACKS:
        return "never"
    if isinstance(render, dict):
        render = render.get("detail" if task.get("callback") == "parse_detail" else "list",
                            "never")
    return str(render)


def choose_way(counts: tuple[int, int] | None, known_patterns: int, comparing: int = 0) -> str:
    """``render``, ``plain`` or ``compare`` for a page whose pattern was compared
    ``counts`` (compared, needed) times, ``comparing`` more being compared here now;
    ``known_patterns`` the crawl has learnt. ``wait`` while a pattern is short of its
    sample and enough of it is being compared: its verdict is a moment away."""
    if counts is None and known_patterns >= MAX_PATTERNS:
        return "render"                     # too many patterns to learn: the safe way
    compared, needed = counts or (0, 0)
    left = render_sample_left(compared, needed)
    if left:
        return "compare" if comparing < left else "wait"
    # the re-checks under way count as made: rendering takes seconds, and a template's
    # pages fetched meanwhile would each be drawn at the rate of a verdict less confirmed
    agreed = max(needed, compared - needed) + comparing
    if random.randrange(RECHECK * agreed * agreed) < SAMPLE * SAMPLE:
        return "compare"
    return "render" if 2 * needed > compared else "plain"


def site_way(patterns: dict[str, tuple[int, int]], template: str, site_groups: int
             ) -> str | None:
    """``render`` or ``plain`` for a page of a ``template`` not compared yet, when its
    site (the template's host) has ``site_groups`` templates compared already: the way
    most of the site's compared pages needed. ``None`` while the site may sample more."""
    host = template.split("/", 1)[0] + "/"
    groups = compared = needed = 0
    for name, (pages, pages_needed) in patterns.items():
        if name.startswith(host):
            groups, compared, needed = groups + 1, compared + pages, needed + pages_needed
    if groups < site_groups:
        return None
    return "render" if 2 * needed > compared else "plain"


def needs_rendering(plain: TextResponse, rendered: TextResponse,
                    fields: dict[str, Any] | None) -> bool:
    """Did rendering give the crawl more: links, or the rule's fields filled?"""
    if len(every_url(rendered)) > len(every_url(plain)):
        return True
    for spec in (fields or {}).values():
        kind, expression = field_selector(spec)
        read = css_value if kind == "css" else first_value
        if read(rendered, expression) and not read(plain, expression):
            return True
    return False


def looks_scripted(response: Response) -> bool:
    """An HTML page with scripts and next to nothing else: no more than two links and
    under 200 characters of text outside its scripts (a page its scripts fill in)."""
    if not isinstance(response, HtmlResponse) or response.status != 200:
        return False
    # cheapest first: most pages have links, and this runs on every page of such crawls,
    # so the walk stops at the third (an XPath count walks the whole page)
    root = response.selector.root
    links = (element for element in root.iter("a") if element.get("href") is not None)
    if next(islice(links, 2, None), None) is not None:
        return False
    if next(root.iter("script"), None) is None:
        return False
    text = response.xpath("//body//text()[not(ancestor::script or ancestor::style)]").getall()
    return len("".join(text).strip()) < 200


def rule_fields(info: dict[str, Any]) -> dict[str, Any] | None:
    """The fields a universal rule's page extracts (its task's rule), if any."""
    rule = info["config"].get("rule") or {}
    index = info["task"].get("rule_index")
    if info["task"].get("spider_type") != "universal" or index is None:
        return None
    rules = compile_universal(rule)
    return rules[index].fields if index < len(rules) else None


class RenderPlan:
    """What this process knows of a crawl's page kinds (``Keys.crawl_render``: each URL
    template's comparisons; ``Keys.crawl_render_variables``: the template places learnt
    to be variables), read again every ``PLAN_FRESH`` s, and the comparisons it adds.
    It keeps what it knows of ``MAX_CRAWLS`` crawls, the least recently used forgotten."""

    def __init__(self, redis: Any, keys: Keys, site_groups: int = MAX_PATTERNS) -> None:
        self.redis = redis
        self.keys = keys
        self.site_groups = site_groups     # templates of one site sampled at most (the
                                           # default: no bound but the crawl's)
        # crawl -> {template: (compared, needed)}, as read within PLAN_FRESH s
        self.patterns: TTLCache[str, dict[str, tuple[int, int]]] = TTLCache(
            MAX_CRAWLS, PLAN_FRESH, timer=time.monotonic)
        self.templates: LRUCache[str, UrlTemplates] = LRUCache(MAX_CRAWLS)
        self.comparing: Counter[tuple[str, str]] = Counter()   # (crawl, template) -> now

    def learn(self, crawlid: str, urls: list[str]) -> None:
        """The URLs of a fetched page and its links, for the crawl's URL templates; the
        places they show to be variables shared with the cluster."""
        templates = self._templates(crawlid)
        templates.learn(urls)
        if new := templates.take_new_variables():
            key = self.keys.crawl_render_variables(crawlid)
            pipe = self.redis.pipeline(transaction=True)
            pipe.rpush(key, *new)
            pipe.ltrim(key, 0, MAX_PLACES - 1)
            pipe.execute()

    def template(self, crawlid: str, url: str) -> str:
        self._patterns(crawlid)
        return self._templates(crawlid).template(url)

    def way(self, crawlid: str, template: str) -> str:
        patterns = self._patterns(crawlid)
        counts = patterns.get(template)
        if counts is None and (site := site_way(patterns, template, self.site_groups)):
            return site
        way = choose_way(counts, len(patterns), self.comparing[(crawlid, template)])
        if way == "compare":
            self.comparing[(crawlid, template)] += 1
        return way

    def compared(self, crawlid: str, template: str) -> None:
        """A comparison ``way`` asked for is over (recorded, or given up)."""
        key = (crawlid, template)
        self.comparing[key] -= 1
        if self.comparing[key] <= 0:
            del self.comparing[key]

    def record(self, crawlid: str, template: str, needed: bool) -> None:
        key = self.keys.crawl_render(crawlid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(key, f"{template} compared", 1)
        pipe.hincrby(key, f"{template} needed", int(needed))
        pipe.execute()
        self.patterns.pop(crawlid, None)

    def count(self, crawlid: str, what: str) -> None:
        """One more page of the crawl ``RENDERED`` or ``LOOKS_SCRIPTED``."""
        self.redis.hincrby(self.keys.crawl_render(crawlid), what, 1)

    def _templates(self, crawlid: str) -> UrlTemplates:
        templates = self.templates.get(crawlid)
        if templates is None:
            templates = self.templates[crawlid] = UrlTemplates()
        return templates

    def _patterns(self, crawlid: str) -> dict[str, tuple[int, int]]:
        """The crawl's templates' comparisons, read again after ``PLAN_FRESH`` s with the
        variables other processes learnt since the last read (only those)."""
        patterns = self.patterns.get(crawlid)
        if patterns is None:
            templates = self._templates(crawlid)
            pipe = self.redis.pipeline(transaction=False)
            pipe.hgetall(self.keys.crawl_render(crawlid))
            pipe.lrange(self.keys.crawl_render_variables(crawlid), templates.shared_read, -1)
            fields, places = pipe.execute()
            templates.shared_read += len(places)
            templates.add_variables(places)
            patterns = self.patterns[crawlid] = render_patterns(fields)
        return patterns
