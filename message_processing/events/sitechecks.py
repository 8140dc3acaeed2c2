"""When a site is broken: the judgments behind ``site_broken`` events (pure functions).

A site's figures come from its health counts (master/sitehealth.py): items extracted and,
per field, the items whose rule has it (``expected``) and those where it matched. A
field's coverage is judged only against the site's own earlier coverage in the crawl: a
field the site never had (an optional field, another site's layout) is not broken. Three
ways a site is found broken:

- ``coverage``: a field the site had (matched on at least ``coverage_min`` of its items
  over an earlier stretch of ``min_items``) matched on fewer than ``coverage_min`` of the
  items since the last look (at least ``min_items`` of them: a layout change shows up
  while the crawl runs, not diluted by the pages fetched before it), or over the whole
  crawl at its end;
- ``no_items``: at the end, a site that gave pages gave no items while other sites did;
- ``previous_run``: at the end of a schedule's run, a site gave fewer than
  ``previous_share`` of the items it gave in the schedule's previous run.

A field a site covered over the schedule's previous run (``covered_fields``) counts as
one it had: a layout changed between two runs is ``coverage`` at the run's end.
"""

from dataclasses import dataclass
from typing import Any, Protocol

# a site's fields when last judged: {"expected": {field: n}, "matched": {field: n},
# "had": [fields it once covered]}
Snapshot = dict[str, Any]


class SiteFigures(Protocol):
    pages: int
    items: int
    matched: dict[str, int]
    expected: dict[str, int]


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


def judged(figures: SiteFigures, field: str) -> int:
    """The site's items whose rule has ``field`` (all its items, for older counts)."""
    return figures.expected.get(field, figures.items)


def recent_coverage(site: str, figures: SiteFigures, before: Snapshot | None,
                    limits: Thresholds) -> tuple[list[Broken], Snapshot | None]:
    """Fields the site had that fell under ``coverage_min`` over their items since
    ``before``; and the snapshot to keep if a field had enough items since to be judged
    (None: keep ``before``). Each field's baseline moves only when it is judged."""
    expected = dict((before or {}).get("expected", {}))
    matched_before = dict((before or {}).get("matched", {}))
    had = set((before or {}).get("had", ()))
    found, judged_any = [], False
    for field, matched in sorted(figures.matched.items()):
        items = judged(figures, field) - expected.get(field, 0)
        if items < limits.min_items:
            continue
        judged_any = True
        share = (matched - matched_before.get(field, 0)) / items
        if share >= limits.coverage_min:
            had.add(field)
        elif field in had:
            found.append(Broken(site, field, "coverage", {
                "coverage": round(share, 4), "items": items, "threshold": limits.coverage_min,
                "over": "recent items"}))
        expected[field], matched_before[field] = judged(figures, field), matched
    if not judged_any:
        return [], None
    return found, {"expected": expected, "matched": matched_before, "had": sorted(had)}


def final_checks(sites: dict[str, SiteFigures], limits: Thresholds,
                 previous: dict[str, int] | None = None,
                 had: dict[str, list[str]] | None = None) -> list[Broken]:
    """What is wrong with the sites at the crawl's end: coverage over the whole crawl of
    the fields each site ``had`` (``recent_coverage``'s), sites without items, sites far
    below the schedule's ``previous`` run."""
    found = []
    any_items = any(figures.items for figures in sites.values())
    for site, figures in sorted(sites.items()):
        for field, matched in sorted(figures.matched.items()):
            items = judged(figures, field)
            if items < limits.min_items or field not in (had or {}).get(site, ()):
                continue
            if matched / items < limits.coverage_min:
                found.append(Broken(site, field, "coverage", {
                    "coverage": round(matched / items, 4), "items": items,
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


def covered_fields(sites: dict[str, SiteFigures], limits: Thresholds) -> dict[str, list[str]]:
    """The fields each site matched on ``coverage_min`` of its items or more, over the
    whole crawl (with ``min_items`` at least): what the schedule's next run is judged by."""
    covered = {site: sorted(field for field, matched in figures.matched.items()
                            if judged(figures, field) >= limits.min_items
                            and matched / judged(figures, field) >= limits.coverage_min)
               for site, figures in sites.items()}
    return {site: fields for site, fields in covered.items() if fields}
