"""A crawl's health per site: what each site (domain, as the throttle names it) gave.

The spiders count, per crawl and site, the pages fetched and their status codes, the
pushback (429, 503, 403 bursts, block pages: crawler/pushback.py), the pages rendered,
the items extracted, those dropped (and which required field was missing) and, for
every field of the crawl's rule, the items where it matched. ``SiteCounts`` gathers a
job's counts between two sends; they go to Redis with the job's other counts (once a
second, in the same pipeline: ``site_health_add.lua``, one call per crawl), into one
hash per crawl (``Keys.crawl_sites``) that keeps at most ``MAX_SITES`` (500) sites
apart and counts the rest as ``OTHER``.

``read_site_health(redis, keys, crawlid)`` reads it back as ``{site: SiteHealth}``;
``SiteHealth.coverage`` is each field's share of the site's items where it matched,
``SiteHealth.problems()`` what looks wrong with a site (the views highlight it).
"""

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from master.keys import Keys
from master.lua import LuaScripts

# Sites of a crawl kept apart (a crawl of more counts the rest as OTHER): at ~30 measures
# a site, a crawl's hash stays under ~15,000 fields, read whole in a few milliseconds.
MAX_SITES = 500
OTHER = "(other)"        # the sites past the bound, counted together (never a host name)
MARKER = "~"             # measure marking a site admitted to the hash
SITE_COUNT = "~sites"    # field counting the admitted sites
# What ``problems`` calls wrong, unless told otherwise.
LOW_COVERAGE = 0.8       # a field matching on fewer than 80% of a site's items
HIGH_ERRORS = 0.5        # more than half of a site's pages answered 4xx/5xx
HIGH_DROPS = 0.5         # more than half of a site's items dropped as incomplete

RETENTION = 7 * 86400.0   # CRAWLCLUSTER_CRAWL_RETENTION's default, when none is given
Measure = tuple[str, str]       # (site, measure): "pages", "status:200", "matched:title", ...


class SiteCounts:
    """A job's site counts not yet sent: crawlid -> Counter((site, measure))."""

    def __init__(self) -> None:
        self.pending: dict[str, Counter[Measure]] = {}

    def __bool__(self) -> bool:
        return bool(self.pending)

    def _add(self, crawlid: str, site: str, measure: str, count: int = 1) -> None:
        counts = self.pending.setdefault(crawlid, Counter())
        counts[(site, measure)] += count

    def page(self, crawlid: str, site: str, status: int) -> None:
        """A response from the site (a redirect is one too), with its status code."""
        self._add(crawlid, site, "pages")
        self._add(crawlid, site, f"status:{status if 100 <= status <= 599 else 'other'}")

    def pushback(self, crawlid: str, site: str, reason: str) -> None:
        """The site pushed back (``reason``: "429", "503", "403 burst", "block page")."""
        self._add(crawlid, site, f"pushback:{reason}")

    def rendered(self, crawlid: str, site: str) -> None:
        self._add(crawlid, site, "rendered")

    def item(self, crawlid: str, site: str, fields: list[str], item: dict[str, Any],
             missing: list[str]) -> None:
        """An item extracted from the site's page: which of its rule's fields it has, and
        the required ones ``missing`` (it is dropped if any). ``fields`` are every field
        of the crawl's rule; those of the rule that made this item are the ones it
        carries (a spider puts each in, "" when it matched nothing, or in
        ``field_errors``), so another rule's fields are not counted against it."""
        self._add(crawlid, site, "items")
        errors = item.get("field_errors") or {}
        for name in fields:
            if name in item or name in errors:
                self._add(crawlid, site, f"expected:{name}")
                self._add(crawlid, site, f"matched:{name}", 1 if has_value(item.get(name)) else 0)
        if missing:
            self._add(crawlid, site, "dropped")
            for name in missing:
                self._add(crawlid, site, f"dropped:{name}")

    def take(self) -> dict[str, Counter[Measure]]:
        """The counts gathered, cleared here (``restore`` puts them back)."""
        pending, self.pending = self.pending, {}
        return pending

    def restore(self, taken: dict[str, Counter[Measure]]) -> None:
        for crawlid, counts in taken.items():
            self.pending.setdefault(crawlid, Counter()).update(counts)


def has_value(value: Any) -> bool:
    """Whether a field matched: a value other than None, "" and [] (0 and False are
    values a processor made)."""
    return value is not None and value != "" and value != []


def queue_site_counts(pipe: Any, scripts: LuaScripts, keys: Keys,
                      taken: dict[str, Counter[Measure]], max_sites: int = MAX_SITES,
                      retention: float = RETENTION) -> None:
    """Queue ``taken`` counts on ``pipe``: one ``site_health_add.lua`` call per crawl. A
    crawl's hash expires twice its ``retention`` (CRAWLCLUSTER_CRAWL_RETENTION) after its
    last count: the crawl's retirement deletes it first, and counts a spider sends after
    the crawl retired leave no key for good."""
    for crawlid, counts in taken.items():
        args: list[Any] = [max_sites, OTHER, max(int(2 * retention), 1)]
        for (site, measure), count in counts.items():
            args += [site, measure, count]
        scripts.run("site_health_add", [keys.crawl_sites(crawlid)], args, pipe=pipe)


@dataclass
class SiteHealth:
    """One site's figures in one crawl. ``expected``: field -> the site's items whose
    rule has the field; ``coverage``: field -> share of those where it matched (0.0 to
    1.0; counts of older spiders, without ``expected``, over all the site's items)."""

    site: str
    pages: int = 0
    items: int = 0
    dropped: int = 0
    rendered: int = 0
    dropped_by_field: dict[str, int] = field(default_factory=dict)
    matched: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    pushback: dict[str, int] = field(default_factory=dict)

    @property
    def coverage(self) -> dict[str, float]:
        shares = {}
        for name, count in self.matched.items():
            judged = self.expected.get(name, self.items)
            shares[name] = count / judged if judged else 0.0
        return shares

    @property
    def errors(self) -> int:
        """Pages answered 4xx or 5xx."""
        return sum(count for status, count in self.statuses.items()
                   if status[:1] in ("4", "5"))

    @property
    def error_share(self) -> float:
        return self.errors / self.pages if self.pages else 0.0

    def problems(self, low_coverage: float = LOW_COVERAGE, high_errors: float = HIGH_ERRORS,
                 high_drops: float = HIGH_DROPS) -> list[str]:
        """What looks wrong: each field covering less than ``low_coverage`` of the items,
        more than ``high_errors`` of the pages in errors, more than ``high_drops`` of the
        items dropped, any pushback; empty if nothing."""
        found = [f"{name} coverage {share:.0%}" for name, share in self.coverage.items()
                 if self.items and share < low_coverage]
        if self.pages and self.error_share > high_errors:
            found.append(f"{self.error_share:.0%} of pages in errors")
        if self.items and self.dropped / self.items > high_drops:
            found.append(f"{self.dropped / self.items:.0%} of items dropped")
        if self.pushback:
            found.append(f"pushback {sum(self.pushback.values())}")
        return found

    def add(self, other: "SiteHealth") -> None:
        """Add another site's figures into this one (sites folded together)."""
        self.pages += other.pages
        self.items += other.items
        self.dropped += other.dropped
        self.rendered += other.rendered
        for mine, theirs in ((self.dropped_by_field, other.dropped_by_field),
                             (self.matched, other.matched), (self.expected, other.expected),
                             (self.statuses, other.statuses),
                             (self.pushback, other.pushback)):
            for name, count in theirs.items():
                mine[name] = mine.get(name, 0) + count

    def as_json(self) -> dict[str, Any]:
        """The figures as JSON: every field, with ``coverage``, ``errors`` and
        ``problems``."""
        return {**asdict(self), "coverage": self.coverage, "errors": self.errors,
                "problems": self.problems()}


PLAIN = ("pages", "items", "dropped", "rendered")
GROUPED = {"dropped": "dropped_by_field", "matched": "matched", "expected": "expected",
           "status": "statuses", "pushback": "pushback"}


def site_health_of(raw: dict[str, str]) -> dict[str, SiteHealth]:
    """``{site: SiteHealth}`` from a crawl's site health hash as read (``HGETALL``)."""
    sites: dict[str, SiteHealth] = {}
    for name, value in raw.items():
        site, _, measure = name.partition(" ")
        if not measure or measure == MARKER:
            continue
        health = sites.setdefault(site, SiteHealth(site))
        kind, colon, detail = measure.partition(":")
        if not colon and kind in PLAIN:
            setattr(health, kind, getattr(health, kind) + int(value))
        elif colon and kind in GROUPED:
            grouped: dict[str, int] = getattr(health, GROUPED[kind])
            grouped[detail] = grouped.get(detail, 0) + int(value)
    return sites


def read_site_health(redis: Any, keys: Keys, crawlid: str) -> dict[str, SiteHealth]:
    """The crawl's health per site, ``{site: SiteHealth}`` (sites past the bound as
    ``OTHER``); empty for a crawl with no counts (unknown, or retired)."""
    return site_health_of(redis.hgetall(keys.crawl_sites(crawlid)))


def top_sites(sites: dict[str, SiteHealth], most: int) -> dict[str, SiteHealth]:
    """The ``most`` sites with the most pages, the rest folded into ``OTHER`` (so a
    view or a metric has at most ``most`` + 1 sites)."""
    ranked = sorted(sites.values(), key=lambda health: (-health.pages, health.site))
    kept = {health.site: health for health in ranked[:most] if health.site != OTHER}
    rest = [health for health in ranked if health.site not in kept]
    if rest:
        other = SiteHealth(OTHER)
        for health in rest:
            other.add(health)
        kept[OTHER] = other
    return kept
