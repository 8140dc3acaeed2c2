"""Conditional GETs for a series of crawls, and what each fetch of a series' page teaches.

A run of a series (a crawl with a ``lineage``) fetches a detail page the series has with
the validators its last fetch got (the task's ``validators``, set at the link push:
crawler/scheduler/series.py): ``If-None-Match`` with its ``ETag``, ``If-Modified-Since``
with its ``Last-Modified``. ``ConditionalGetMiddleware`` sends them, and reads the answer:

- 304 Not Modified: the page is unchanged. Nothing is parsed, and nothing is written to
  MongoDB: the series' record of the page takes the time it was seen (its ``at``), and
  the crawl counts it ``unchanged`` and ``not_modified`` (``info``'s ``changes``). A
  ``last_seen`` update of the stored item costs the MongoDB-wire server about three
  inserts: on bench/changes.py's site they made a series' run cost MongoDB 2.5 times the
  full run's CPU, against 0.6 times without.
- 200: the page is parsed and stored as any (crawler/versions.py says whether it
  changed); its new validators are kept.
- 404 or 410 for a page the series had: ``TaskStatusMiddleware`` fails its task and marks
  the stored page ``change: "gone"`` (crawler/versions.py: looked up by its lineage, on
  the firehose and in exports as any change); the series forgets the page.

A 304 ends in ``IgnoreRequest`` with its task done. The middleware sits at 56 in
``DOWNLOADER_MIDDLEWARES``: in ``process_response`` after Scrapy's redirects (600), which
leave a 304 alone, and before ``TaskStatusMiddleware`` (50), which would fail a 3xx as a
redirect not followed; Scrapy's ``HttpErrorMiddleware`` never sees a 304 as a non-2xx
page.

What a fetch teaches is written to the series (``SeriesVisits``) with its task's outcome,
in the tracker's report: only once its items are stored is a page's task done, so a
validator is never kept for a version that was not stored (the next run would be told
304 for a page it never had).
"""

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response

from crawler.context import ClusterComponent
from crawler.scheduler.series import is_detail, series_of
from crawler.versions import GONE_STATUSES
from master.frontier import Outcome
from master.keys import Keys
from master.series import VALIDATOR_HEADERS, PageState, SeriesPages, conditional_headers
from master.urls import canonical_url

logger = logging.getLogger(__name__)

TASK_FIELDS = ("callback", "depth", "rule_index", "item")   # what fetches a page again
VALIDATOR_MAX = 512     # characters of a validator kept (a site's header is untrusted)


def page_state(task: dict[str, Any], response: Response, at: float) -> PageState:
    """A fetched page's state: its response's validators (a 304's, when it gives none,
    those it was asked with; one longer than ``VALIDATOR_MAX`` is not kept) and its
    task's fields."""
    asked = task.get("validators") or {}
    given = {name: value.decode("latin-1") if (value := response.headers.get(header))
             else (asked.get(name) if response.status == 304 else None)
             for name, (header, _) in VALIDATOR_HEADERS.items()}
    given = {name: value if value and len(value) <= VALIDATOR_MAX else None
             for name, value in given.items()}
    fields = {name: task[name] for name in TASK_FIELDS if name in task}
    full_at = at if response.status != 304 else task.get("full_at")
    return PageState(task["url"], at, given["etag"], given["modified"], fields, full_at)


@dataclass
class Visit:
    """What one fetch of a series' page taught, until its task's outcome is reported."""

    crawlid: str
    lineage: str
    key: str                        # its canonical URL
    state: PageState | None         # None: gone
    not_modified: bool = False      # answered 304


class SeriesVisits:
    """The series' pages this job fetched, by task, until their outcomes are reported:
    then a page done is recorded (a 304 counted ``unchanged`` and ``not_modified``), a
    gone one forgotten; a task retried or released records nothing (its next fetch
    does). Written on the report's pipeline: if that fails, the page is recorded by its
    next fetch (asked with older validators, it is fetched in full and found unchanged)."""

    def __init__(self, pages: SeriesPages, keys: Keys) -> None:
        self.pages = pages
        self.keys = keys
        self.pending: dict[str, Visit] = {}       # task member -> its visit

    def note(self, member: str, visit: Visit) -> None:
        self.pending[member] = visit

    def write(self, outcomes: list[Outcome], pipe: Any) -> None:
        recorded: dict[str, dict[str, PageState]] = {}
        gone: dict[str, list[str]] = {}
        not_modified: Counter[str] = Counter()
        for member, outcome, _ in outcomes:
            visit = self.pending.pop(member, None)
            if visit is None:
                continue
            if visit.state is None:                 # a 404/410 fails its task for good
                if outcome == "failed":
                    gone.setdefault(visit.lineage, []).append(visit.key)
            elif outcome == "done":
                recorded.setdefault(visit.lineage, {})[visit.key] = visit.state
                not_modified[visit.crawlid] += visit.not_modified
        for lineage, states in recorded.items():
            self.pages.record(lineage, states, pipe)
        for lineage, keys in gone.items():
            self.pages.forget(lineage, keys, pipe)
        for crawlid, count in not_modified.items():
            if count:
                pipe.hincrby(self.keys.crawl_changes(crawlid), "unchanged", count)
                pipe.hincrby(self.keys.crawl_changes(crawlid), "not_modified", count)


class ConditionalGetMiddleware(ClusterComponent):
    """Sends a series page's validators, and reads what its answer teaches the series."""

    def __init__(self, crawler: Any) -> None:
        super().__init__(crawler)
        self._visits: SeriesVisits | None = None

    @property
    def visits(self) -> SeriesVisits:
        if self._visits is None:
            self._visits = SeriesVisits(self.context.series, self.context.keys)
            self.context.tracker.outcome_writers.append(self._visits.write)
        return self._visits

    def process_request(self, request: Request) -> None:
        info = request.meta.get("crawlcluster")
        validators = info["task"].get("validators") if info else None
        if validators:
            for header, value in conditional_headers(validators).items():
                request.headers.setdefault(header, value)

    def process_response(self, request: Request, response: Response) -> Response:
        info = request.meta.get("crawlcluster")
        if info is None:
            return response
        task, config = info["task"], info["config"]
        lineage = series_of(config)
        if lineage is None or not is_detail(config, task.get("callback", "parse"), task):
            return response
        visit = Visit(task["crawlid"], lineage, canonical_url(task["url"]), None)
        known = "validators" in task      # the series has the page (validators or none)
        if response.status == 304 and known:
            visit.state, visit.not_modified = page_state(task, response, time.time()), True
            self._finish(info["member"], visit, "crawlcluster/series/not_modified")
            raise IgnoreRequest("not modified since the series last fetched it")
        if response.status == 200:
            visit.state = page_state(task, response, time.time())
            self.visits.note(info["member"], visit)
        elif response.status in GONE_STATUSES and known:    # marked gone when stored
            self.visits.note(info["member"], visit)
            self.crawler.stats.inc_value("crawlcluster/series/gone")
        return response

    def _finish(self, member: str, visit: Visit, stat: str) -> None:
        """A visit that ends here: its page is done (once its items are stored)."""
        self.visits.note(member, visit)
        self.context.tracker.page_finished(member)
        self.crawler.stats.inc_value(stat)
