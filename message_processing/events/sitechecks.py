"""When a site is broken: the judgments behind ``site_broken`` events (pure functions).

A site's figures come from its health counts (master/sitehealth.py): items extracted and,
per field of the rule, the items where it matched. Three ways a site is found broken:

- ``coverage``: a field matched on fewer than ``coverage_min`` of the site's items since
  the last look (at least ``min_items`` of them: a layout change shows up while the crawl
  runs, not diluted by the pages fetched before it), or over the whole crawl at its end;
- ``no_items``: at the end, a site that gave pages gave no items while other sites did;
- ``previous_run``: at the end of a schedule's run, a site gave fewer than
  ``previous_share`` of the items it gave in the schedule's previous run.
"""

from dataclasses import dataclass
from typing import Any, Protocol

Snapshot = dict[str, Any]        # {"items": n, "matched": {field: n}}: a site when last looked at


class SiteFigures(Protocol):
    pages: int
    items: int
    matched: dict[str, int]


@dataclass(frozen=True)
class Thresholds:
    coverage_min: float = 0.8
    min_items: int = 10
    previous_share: float = 0.5


@dataclass(frozen=True)
class Broken:
    """One finding: the site, the field (None when it is about the site's items), why,
    and the figures that show it."""
    site: str
    field: str | None
    reason: str
    details: dict[str, Any]


def snapshot(figures: SiteFigures) -> Snapshot:
    return {"items": figures.items, "matched": dict(figures.matched)}


def recent_coverage(site: str, figures: SiteFigures, before: Snapshot | None,
                    limits: Thresholds) -> tuple[list[Broken], bool]:
    """Fields under ``coverage_min`` over the items since ``before``; and whether enough
    items came since (the caller then keeps the new snapshot)."""
    before = before or {"items": 0, "matched": {}}
    items = figures.items - before["items"]
    if items < limits.min_items:
        return [], False
    found = []
    for field, matched in sorted(figures.matched.items()):
        share = (matched - before["matched"].get(field, 0)) / items
        if share < limits.coverage_min:
            found.append(Broken(site, field, "coverage", {
                "coverage": round(share, 4), "items": items, "threshold": limits.coverage_min,
                "over": "recent items"}))
    return found, True


def final_checks(sites: dict[str, SiteFigures], limits: Thresholds,
                 previous: dict[str, int] | None = None) -> list[Broken]:
    """What is wrong with the sites at the crawl's end: coverage over the whole crawl,
    sites without items, sites far below the schedule's ``previous`` run."""
    found = []
    any_items = any(figures.items for figures in sites.values())
    for site, figures in sorted(sites.items()):
        if figures.items >= limits.min_items:
            for field, matched in sorted(figures.matched.items()):
                share = matched / figures.items
                if share < limits.coverage_min:
                    found.append(Broken(site, field, "coverage", {
                        "coverage": round(share, 4), "items": figures.items,
                        "threshold": limits.coverage_min, "over": "whole crawl"}))
        if any_items and figures.pages and not figures.items:
            found.append(Broken(site, None, "no_items", {"pages": figures.pages, "items": 0}))
    for site, before in sorted((previous or {}).items()):
        items = sites[site].items if site in sites else 0
        if before >= limits.min_items and items < before * limits.previous_share:
            found.append(Broken(site, None, "previous_run", {
                "items": items, "previous_items": before,
                "threshold": limits.previous_share}))
    return found
