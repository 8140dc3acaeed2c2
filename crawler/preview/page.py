"""What a crawl would make of one page: its items (each field's value, or why it is
missing), its links with their fates, and how it would be read (``render``)."""

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy import Request
from scrapy.http import HtmlResponse, Response, TextResponse

from crawler.fields import missing_fields
from crawler.pipelines import EncodingPipeline, MainTextPipeline
from crawler.preview.fetch import FetchError, PageFetcher
from crawler.preview.links import link_fates
from crawler.preview.render import rendered_page
from crawler.render.policy import looks_scripted, needs_rendering, render_mode, rule_fields
from crawler.rules import compile_universal
from crawler.spiders import Follow
from crawler.spiders.precise import PreciseSpider
from crawler.spiders.universal import UniversalSpider
from master.rules import field_names
from master.sitehealth import has_value
from master.tasks import make_task
from message_processing.requests import (
    RequestError,
    crawl_config,
    is_cluster_spider,
    validate,
)
from settings.errors import CrawlClusterError

PREVIEW_ID = "preview"       # the crawl and user id of a request that names none
STEPS = {"universal": ("page",), "precise": ("list", "detail")}


class PreviewError(CrawlClusterError):
    """A preview that cannot be made: ``field`` names what was wrong in the input."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.reason, self.field = reason, field


@dataclass
class Cluster:
    """What a preview reads of the cluster: its settings, the blacklist, the seen-URL
    filter (None: not asked), and a page fetcher for a crawl config."""

    url_length_limit: int
    lean_links: bool
    max_links_per_page: int
    is_blacklisted: Callable[[str], bool]
    seen: Callable[[list[str], str], list[bool]] | None
    fetcher: Callable[[dict[str, Any]], PageFetcher]
    browser: str = ""           # CRAWLCLUSTER_BROWSER: the Chromium a render runs


def preview(request: dict[str, Any], cluster: Cluster, url: str | None = None,
            html: str | None = None, step: str | None = None,
            crawlid: str | None = None, with_html: bool = False,
            render: bool = False) -> dict[str, Any]:
    """The preview of ``url`` (the crawl's own by default) under the crawl request's rule:
    fetched, or ``html`` as given. ``step``: a precise rule's ``list`` or ``detail``
    page. ``crawlid``: a running crawl, whose seen pages are marked. ``with_html``: the
    page's HTML too (the UI shows it). ``render``: for a rule that renders, what
    rendering the page changes."""
    config = checked_config(request)
    spider_type = config["spider_type"]
    step = step or STEPS[spider_type][0]
    if step not in STEPS[spider_type]:
        raise PreviewError(f"a {spider_type} rule's pages are {' or '.join(STEPS[spider_type])}",
                           "step")
    url = url or config["url"]
    task = page_task(config, url, step)
    fetcher = cluster.fetcher(config)
    response = with_meta(page_response(fetcher, url, html, config), task, config)
    items, links, refused = run_spider(spider_type, response, cluster)
    result = {"url": url, "status": response.status, "spider_type": spider_type, "step": step,
              "fetched": html is None, "items": [described(item, config) for item in items],
              "render": render_verdict(config, task, response),
              "rule_index": task.get("rule_index")}
    if render and result["render"]["mode"] != "never":
        result["render"]["rendered"] = render_changes(response, fetcher, cluster, task, config,
                                                      items, links)
    if with_html:
        result["html"] = response.text
    result.update(link_fates(response, config, task, links, refused, cluster, fetcher,
                             crawlid))
    return result


def checked_config(request: dict[str, Any]) -> dict[str, Any]:
    """The crawl config a crawl request stores, checked as the intake checks it."""
    if not isinstance(request, dict):
        raise PreviewError("a crawl request is a JSON object", "request")
    message = {"type": "crawl", "userid": PREVIEW_ID, "crawlid": PREVIEW_ID, **request}
    try:
        kind, checked = validate(message)
    except RequestError as exc:
        raise PreviewError(exc.reason, exc.field) from None
    if kind not in ("crawl", "sc_crawl"):
        raise PreviewError(f"a preview takes a crawl request, not {kind!r}", "type")
    config = crawl_config(kind, checked)
    if not is_cluster_spider(config["spider_type"]):
        raise PreviewError("a user spider's pages are previewed with `scrapy parse`; "
                           "a rule is a precise or universal spider's", "spider_type")
    return config


def page_task(config: dict[str, Any], url: str, step: str) -> dict[str, Any]:
    """The task a crawl would have for the page: a universal page with the first rule
    that admits it (the crawl's own page: every rule), a precise step's callback."""
    extra: dict[str, Any] = {}
    if step == "detail":
        extra = {"callback": "parse_detail", "item": {}}
    elif config["spider_type"] == "universal" and url != config["url"]:
        rules = compile_universal(config["rule"])
        index = next((n for n, rule in enumerate(rules) if rule.admits(url)), None)
        if index is not None:
            extra = {"rule_index": index}
    depth = 0 if url == config["url"] else 1
    return make_task(url, config["crawlid"], config["spider_type"], depth=depth, **extra)


def page_response(fetcher: PageFetcher, url: str, html: str | None,
                  config: dict[str, Any]) -> HtmlResponse:
    if html is not None:
        return HtmlResponse(url, body=html.encode("utf-8"), encoding="utf-8")
    try:
        return fetcher.page(url, config.get("cookie") if isinstance(config.get("cookie"), str)
                            else None)
    except FetchError as exc:
        raise PreviewError(str(exc), "url") from None


def with_meta(response: HtmlResponse, task: dict[str, Any],
              config: dict[str, Any]) -> HtmlResponse:
    """The response as a task's page reaches the spider (``meta["crawlcluster"]``)."""
    meta = {"crawlcluster": {"task": task, "config": config, "member": None},
            "depth": task["depth"]}
    return response.replace(request=Request(response.url, meta=meta))


def run_spider(spider_type: str, response: TextResponse, cluster: Cluster
               ) -> tuple[list[dict[str, Any]], list[Follow], Mapping[str, int]]:
    """The spider's own callback on the page: its items, the links it follows, and how
    many more the rules refused, by why."""
    spider: Any = (UniversalSpider if spider_type == "universal" else PreciseSpider)()
    spider.lean_links = cluster.lean_links
    spider.max_links_per_page = cluster.max_links_per_page
    followed: list[Follow] = []
    refused: Counter[str] = Counter()

    def sink(_: Response, links: list[Follow], more: Mapping[str, int] | None) -> None:
        followed.extend(links)
        refused.update(more or {})

    spider.link_sink = sink
    task = response.meta["crawlcluster"]["task"]
    callback = getattr(spider, task.get("callback", "parse"))
    items = [output for output in callback(response) if isinstance(output, dict)]
    return items, followed, refused


def described(item: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """An item as the pipelines would store it, with each rule field's value or why it
    is missing, and whether the crawl keeps it (its required fields)."""
    item = EncodingPipeline().process_item(dict(item))
    if item.get("_body") is not None:      # main_text and meta, as the pipeline adds them
        item = MainTextPipeline().process_item(item)
    item.pop("_body", None)
    item.pop("fetched_at", None)
    names = field_names(config["spider_type"], config["rule"])
    reasons = item.get("field_errors") or {}      # a processor's, by field (crawler/fields.py)
    fields = {name: ({"value": item[name]} if has_value(item.get(name)) else
                     {"value": item.get(name, ""),
                      "missing": reasons.get(name, "matched nothing")})
              for name in names if name in item or name in reasons}
    missing = missing_fields(config["spider_type"], config["rule"], item)
    return {"item": item, "fields": fields, "kept": not missing,
            **({"dropped_for": missing} if missing else {})}


def render_changes(response: HtmlResponse, fetcher: PageFetcher, cluster: Cluster,
                   task: dict[str, Any], config: dict[str, Any], items: list[dict[str, Any]],
                   links: list[Follow]) -> dict[str, Any]:
    """What the page gives once rendered, against what it gives as fetched: links the
    rule follows only then, fields filled only then, and the verdict a crawl's ``auto``
    would reach (``needs_rendering``)."""
    load = tuple(config["rule"].get("render_load", ()))
    try:
        rendered = with_meta(rendered_page(response, fetcher, cluster.browser, load), task,
                             config)
    except CrawlClusterError as exc:
        return {"error": str(exc)}
    rendered_items, rendered_links, _ = run_spider(config["spider_type"], rendered, cluster)
    plain_fields = {name for item in items for name, value in item.items() if value}
    named = set(field_names(config["spider_type"], config["rule"]))
    filled = sorted({name for item in rendered_items for name, value in item.items()
                     if value and name not in plain_fields} & named)
    plain_urls = {link.url for link in links}
    added = [link.url for link in rendered_links if link.url not in plain_urls]
    return {"needs_rendering": needs_rendering(response, rendered, rule_fields({
                "config": config, "task": task})) or bool(filled),
            "links_added": added, "fields_filled": filled,
            "items": len(rendered_items)}


def render_verdict(config: dict[str, Any], task: dict[str, Any],
                   response: Response) -> dict[str, Any]:
    """How a crawl would read the page: its rule's ``render`` for this step, and for
    ``auto`` whether the page looks filled in by scripts (then it is rendered first)."""
    mode = render_mode(config, task)
    verdict: dict[str, Any] = {"mode": mode}
    if mode == "auto":
        verdict["looks_scripted"] = looks_scripted(response)
    return verdict
