"""What a crawled site's owner sees: nginx's access log, counted page by page.

A page is its canonical URL (Scrapy's: fragment dropped, query sorted, host
lower-cased), so ``/a?x=1&y=2`` and ``/a?y=2&x=1`` are one page fetched twice.
MongoDB's unique index hides a page fetched again; this log does not. Every crawl test
and benchmark without a fault checks it with ``check_fetched_once``.
"""

from collections import Counter
from collections.abc import Iterable
from typing import Any

from master.urls import canonical_url
from settings.errors import CrawlClusterError

LogEntry = dict[str, Any]       # as StaticSite.access_log gives them


class RepeatedFetches(CrawlClusterError):
    """A crawl without a fault fetched a page more than once, or missed one."""


def page_fetches(entries: Iterable[LogEntry], port: int,
                 agent: str | None = None) -> Counter[str]:
    """``Counter(canonical URL -> times served)`` of the log entries (robots.txt left
    out; only requests with user agent ``agent``, if given)."""
    return Counter(canonical_url(f"http://{entry['host']}:{port}{entry['path']}")
                   for entry in entries
                   if not entry["path"].endswith("/robots.txt")
                   and (agent is None or entry["agent"] == agent))


def fetch_summary(fetched: Counter[str]) -> str:
    """``"N requests for M distinct pages (P fetches a page)"``."""
    requests, distinct = sum(fetched.values()), len(fetched)
    return (f"{requests} requests for {distinct} distinct pages "
            f"({requests / max(distinct, 1):.3f} fetches a page)")


def check_fetched_once(fetched: Counter[str], pages: Iterable[str] | None = None,
                       what: str = "the crawl") -> None:
    """Raise ``RepeatedFetches`` naming the pages fetched more than once (and, with
    ``pages``, those never fetched or not the site's)."""
    repeated = [(url, count) for url, count in fetched.most_common() if count > 1]
    problems = []
    if repeated:
        problems.append(f"{len(repeated)} pages fetched more than once, e.g. "
                        + ", ".join(f"{url} ({count}x)" for url, count in repeated[:10]))
    if pages is not None:
        expected = {canonical_url(url) for url in pages}
        if missing := sorted(expected - set(fetched)):
            problems.append(f"{len(missing)} pages never fetched, e.g. {missing[:5]}")
        if unknown := sorted(set(fetched) - expected):
            problems.append(f"{len(unknown)} fetches of pages not on the site, e.g. "
                            f"{unknown[:5]}")
    if problems:
        raise RepeatedFetches(f"{what}: {fetch_summary(fetched)}; " + "; ".join(problems))
