"""Every link of a previewed page with its fate: followed (by which rule, to which step),
or refused and why, as a crawl's spider and scheduler decide it (``rule``, ``scope``,
``scheme``, ``url_length``, ``depth``, ``blacklist``, ``robots``), or already seen by a
running crawl."""

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy.http import TextResponse

from crawler.pageurls import ParameterStripper
from crawler.preview.fetch import PageFetcher
from crawler.rules import compile_universal, every_url
from crawler.scheduler.admission import refusal
from crawler.spiders import Follow
from master.urls import canonical_url
from settings import defaults

if TYPE_CHECKING:
    from crawler.preview.page import Cluster

STEP_OF_CALLBACK = {"parse": "list", "parse_detail": "detail"}


def link_fates(response: TextResponse, config: dict[str, Any], task: dict[str, Any],
               followed: list[Follow], refused: Mapping[str, int], cluster: "Cluster",
               fetcher: PageFetcher, crawlid: str | None) -> dict[str, Any]:
    """``{"links": [...], "link_counts": {...}}``: a link is ``{"url", "fate"}``, with
    ``rule`` (a universal rule's index) or ``step`` (a precise rule's) if followed, and
    ``reason`` if refused; ``refused_counts`` are the spider's own counts, which the
    crawl's ``info`` adds up."""
    links = [followed_link(link, config) for link in followed]
    if config["spider_type"] == "universal":
        links += refused_by_rules(response, config, {link.url for link in followed})
    parent = {"task": task, "config": config}
    seen_keys: set[str] = set()
    for link in links:
        if link["fate"] == "follow":
            judge(link, parent, cluster, fetcher, seen_keys)
    if crawlid and cluster.seen is not None:
        mark_seen([link for link in links if link["fate"] == "follow"], crawlid, cluster)
    counts = Counter(link["fate"] for link in links)
    reasons = Counter(link["reason"] for link in links if link["fate"] == "refused")
    return {"links": links,
            "link_counts": {"found": len(links), **counts, "refused": dict(reasons)},
            "refused_counts": dict(refused)}


def followed_link(link: Follow, config: dict[str, Any]) -> dict[str, Any]:
    described: dict[str, Any] = {"url": link.url, "fate": "follow"}
    if link.callback == "parse_document":          # a file the rule's `documents` takes
        described["document"] = True
    if config["spider_type"] == "universal":
        described["rule"] = (link.extra or {}).get("rule_index")
    else:
        described["step"] = STEP_OF_CALLBACK.get(link.callback, link.callback)
        if (link.extra or {}).get("item") is not None:     # a list element's fields
            described["fields"] = link.extra["item"]        # type: ignore[index]
    return described


def refused_by_rules(response: TextResponse, config: dict[str, Any],
                     taken: set[str]) -> list[dict[str, Any]]:
    """The page's links no universal rule took: ``scope`` if outside every rule's
    domains, else ``rule`` (as the spider counts them), each as the URL it becomes
    without its tracking parameters."""
    rules = compile_universal(config["rule"])
    stripper = ParameterStripper(defaults.CRAWLCLUSTER_STRIPPED_PARAMETERS)
    refused = []
    for url in dict.fromkeys(stripper.clean(url) for url in every_url(response)):
        if url in taken:
            continue
        in_scope = any(rule.admits_domain(url) for rule in rules)
        refused.append({"url": url, "fate": "refused", "reason": "rule" if in_scope else "scope"})
    return refused


def judge(link: dict[str, Any], parent: dict[str, Any], cluster: "Cluster",
          fetcher: PageFetcher, seen_keys: set[str]) -> None:
    """Refuse a followed link as the scheduler would, or as robots.txt would once it is
    fetched (for the page's own site, whose robots.txt the preview read); a link to a
    page the page already linked is a ``duplicate``."""
    url = link["url"]
    reason = refusal(url, parent, cluster.url_length_limit, cluster.is_blacklisted)
    if reason is None:
        robots = fetcher.known_robots(url) if fetcher.obey_robots else None
        if robots is not None and not robots.can_fetch(url, fetcher.user_agent):
            reason = "robots"
    if reason is not None:
        link.update(fate="refused", reason=reason)
        return
    try:
        key = canonical_url(url)
    except ValueError:
        link.update(fate="refused", reason="invalid")
        return
    if key in seen_keys:
        link["fate"] = "duplicate"
    seen_keys.add(key)


def mark_seen(links: list[dict[str, Any]], crawlid: str, cluster: "Cluster") -> None:
    """Links the running crawl ``crawlid`` has seen already (its Bloom filter)."""
    assert cluster.seen is not None
    flags = cluster.seen([link["url"] for link in links], crawlid)
    for link, seen in zip(links, flags, strict=True):
        if seen:
            link["fate"] = "seen"
