"""What a series of crawls knows of each detail page it fetched: when, and how to ask again.

A series is a lineage of crawls (a schedule run as a series: each run a crawl of its own,
all storing into one set of pages). For each detail page one of its crawls fetched it
keeps ``PageState``: the URL, when it was last fetched (a 200 or a 304), the ``ETag`` and
``Last-Modified`` the site gave, and the task fields that fetch it again (callback, depth,
rule). The next run asks with those validators (a 304 costs the site and the cluster
almost nothing), fetches a page it has only when the page may have changed, and sweeps
the pages due again that no page of the run may link (``due``).

State: ``Keys.series_pages`` and ``Keys.series_fetched`` of the lineage, bounded
(``CRAWLCLUSTER_SERIES_MAX_PAGES``: the pages fetched longest ago are forgotten first,
and fetched in full when next met) and expiring ``CRAWLCLUSTER_SERIES_RETENTION`` after
the last write.
"""

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from master.keys import Keys
from master.lua import LuaScripts
from settings.clients import RedisClient
from settings.loader import Settings

logger = logging.getLogger(__name__)
# the validators a page's response gives, and the conditional headers that send them back
VALIDATOR_HEADERS = {"etag": ("ETag", "If-None-Match"),
                     "modified": ("Last-Modified", "If-Modified-Since")}


def user_lineage(userid: str | None, name: str) -> str:
    """The lineage a user's series ``name`` is stored under: the user's own, so another
    user naming the same series (or the same schedule id) can neither read its pages'
    state nor replace its items. The user's part is a digest of fixed length, so no two
    (user, name) pairs give one lineage."""
    digest = hashlib.sha256((userid or "").encode()).hexdigest()[:16]
    return f"{digest}.{name}"


# Seconds after a page's last full answer (a 200) that it is asked again without its
# validators: a server answering 304 for a page that changed (a stale CDN edge, an ETag
# or Last-Modified of the template or the build) costs a series that page's versions for
# at most this long, not for good.
FULL_FETCH_EVERY = 7 * 86400.0


@dataclass(frozen=True)
class PageState:
    """A page a series fetched: its URL as fetched, when (a 200 or a 304), when it was
    last answered in full (a 200; None: at ``at``), its validators, its task's fields
    (``callback``, ``depth`` and the rule's own, such as ``rule_index``)."""

    url: str
    at: float
    etag: str | None = None
    modified: str | None = None
    task: dict[str, Any] = field(default_factory=dict)
    full_at: float | None = None

    def validators(self, now: float) -> dict[str, str]:
        """``{"etag": ..., "modified": ...}``, those the site gave; none once its last
        full answer is ``FULL_FETCH_EVERY`` old (the page is then asked in full)."""
        if now - (self.full_at if self.full_at is not None else self.at) >= FULL_FETCH_EVERY:
            return {}
        return {name: value for name, value in (("etag", self.etag),
                                                ("modified", self.modified)) if value}

    def to_json(self) -> str:
        return json.dumps({"url": self.url, "at": self.at, "etag": self.etag,
                           "modified": self.modified, "task": self.task,
                           "full_at": self.full_at},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> "PageState":
        data = json.loads(raw)
        full_at = data.get("full_at")
        return cls(data["url"], float(data["at"]), data.get("etag"), data.get("modified"),
                   data.get("task") or {}, float(full_at) if full_at is not None else None)


def read_state(lineage: str, url: str, raw: str | bytes | None) -> PageState | None:
    """A stored state, or None if there is none or it cannot be read (logged: the page
    is then new to the series, fetched in full, and its state written anew)."""
    if raw is None:
        return None
    try:
        return PageState.from_json(raw)
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("series %s: the state of %s cannot be read (%s); taken as new",
                       lineage, url[:300], exc)
        return None


def conditional_headers(validators: Mapping[str, str]) -> dict[str, str]:
    """``If-None-Match`` / ``If-Modified-Since`` for a page's stored validators."""
    return {VALIDATOR_HEADERS[name][1]: value for name, value in validators.items()
            if name in VALIDATOR_HEADERS and value}


class SeriesPages:
    def __init__(self, client: RedisClient, keys: Keys, scripts: LuaScripts | None = None,
                 max_pages: int = 500_000, retention: float = 40 * 86400.0) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts or LuaScripts(client)
        self.max_pages = max_pages
        self.retention = retention

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      scripts: LuaScripts | None = None) -> "SeriesPages":
        return cls(client, Keys.from_settings(settings), scripts,
                   settings.getint("CRAWLCLUSTER_SERIES_MAX_PAGES"),
                   settings.getfloat("CRAWLCLUSTER_SERIES_RETENTION"))

    def lookup(self, wanted: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], PageState]:
        """The state of pages ``{lineage: [canonical URL, ...]}`` that their series has,
        by ``(lineage, URL)``, in one round trip."""
        asked = {lineage: list(dict.fromkeys(urls)) for lineage, urls in wanted.items()}
        asked = {lineage: urls for lineage, urls in asked.items() if urls}
        if not asked:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for lineage, urls in asked.items():
            pipe.hmget(self.keys.series_pages(lineage), urls)
        found: dict[tuple[str, str], PageState] = {}
        for (lineage, urls), values in zip(asked.items(), pipe.execute(), strict=True):
            for url, raw in zip(urls, values, strict=True):
                if (state := read_state(lineage, url, raw)) is not None:
                    found[lineage, url] = state
        return found

    def record(self, lineage: str, states: Mapping[str, PageState], pipe: Any) -> None:
        """Queue on ``pipe`` the pages ``{canonical URL: state}`` one of the series'
        crawls fetched (``series_record.lua``: bounded, and the keys' expiry renewed)."""
        if not states:
            return
        args: list[Any] = [self.max_pages, self.retention]
        for url, state in states.items():
            args += [url, state.to_json(), repr(state.at)]
        self.scripts.run("series_record", [self.keys.series_pages(lineage),
                                           self.keys.series_fetched(lineage)], args, pipe=pipe)

    def forget(self, lineage: str, urls: list[str], pipe: Any) -> None:
        """Queue on ``pipe`` the removal of pages the series no longer has (gone)."""
        if urls:
            pipe.hdel(self.keys.series_pages(lineage), *urls)
            pipe.zrem(self.keys.series_fetched(lineage), *urls)

    def due(self, lineage: str, cutoff: float, after: float, skip: set[str],
            limit: int) -> list[tuple[str, float, PageState | None]]:
        """Up to ``limit`` pages of the series last fetched at or before ``cutoff``, from
        ``after`` on (in order of when fetched; ``skip``: those at ``after`` given
        already), as ``(canonical URL, when fetched, state)``: the next part of a sweep
        that reads them all once, whatever is fetched meanwhile. A state gone meanwhile,
        or that cannot be read, is None."""
        if after > cutoff:
            return []
        members = self.client.zrangebyscore(self.keys.series_fetched(lineage), repr(after),
                                            repr(cutoff), start=0, num=limit + len(skip),
                                            withscores=True)
        fresh = [(url, score) for url, score in members
                 if not (score == after and url in skip)][:limit]
        if not fresh:
            return []
        values = self.client.hmget(self.keys.series_pages(lineage), [url for url, _ in fresh])
        return [(url, score, read_state(lineage, url, raw))
                for (url, score), raw in zip(fresh, values, strict=True)]

    def delete(self, lineage: str, pipe: Any) -> None:
        """Queue on ``pipe`` the removal of everything the series knows (its schedule
        deleted)."""
        pipe.delete(self.keys.series_pages(lineage))
        pipe.delete(self.keys.series_fetched(lineage))
