"""RFC 9111's rules for a shared HTTP cache, as functions of headers and times: whether
an answer may be stored (§3, §3.5), how long it stays fresh (§4.2.1, §4.2.2), its age
(§4.2.3), which stored answer a request may be given (``Vary``, §4.1), and a stored
answer's headers once a 304 revalidates it (§3.2, §4.3.4).

Headers are dicts with lower-cased names; a field sent twice comes joined by ", " (by
"\\n" for ``set-cookie``), as Playwright gives them. Times are ``time.time()`` seconds.
"""

import email.utils
import re
from collections.abc import Mapping
from typing import NamedTuple

MAX_DELTA = 2 ** 31          # §1.2.2: a larger delta-seconds is taken as this
HEURISTIC_SHARE = 0.1        # of the time since Last-Modified (§4.2.2), as browsers do
HEURISTIC_MAX = 86400.0      # a day at most
STORED_STATUSES = frozenset({200})      # a 200 is the asset; anything else passes through
HEURISTIC_STATUSES = frozenset({200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501})
# what a stored answer keeps of a 304's headers (§3.2): not what describes the body as
# sent (the body is stored decoded), not hop-by-hop fields, never a cookie
UNUPDATED = frozenset({"content-length", "content-encoding", "transfer-encoding",
                       "connection", "keep-alive", "set-cookie"})
_DIRECTIVE = re.compile(r'([!#$%&\'*+.^_`|~0-9A-Za-z-]+)[ \t]*'
                        r'(?:=[ \t]*("(?:[^"\\]|\\.)*"|[^,\s]*))?')
_DIGITS = re.compile(r"[0-9]+")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")


class Lifetime(NamedTuple):
    """A freshness lifetime, and what gave it: ``s-maxage``, ``max-age``, ``expires``,
    ``heuristic``, ``none`` or ``invalid`` (stale, §4.2.1)."""

    seconds: float
    source: str


def cache_directives(headers: Mapping[str, str]) -> dict[str, list[str]]:
    """Each Cache-Control directive (name lower-cased) with every value it was given
    (``""`` for none; a quoted value unquoted)."""
    found: dict[str, list[str]] = {}
    for match in _DIRECTIVE.finditer(headers.get("cache-control", "")):
        value = match.group(2) or ""
        if value.startswith('"'):
            value = value[1:-1]
        found.setdefault(match.group(1).lower(), []).append(value)
    return found


def delta_seconds(values: list[str]) -> int | None:
    """A directive's delta-seconds (§1.2.2), at most ``MAX_DELTA``; None if invalid: not
    a plain non-negative integer (``inf``, ``-1``, ``1.5``), or given twice with different
    values (§4.2.1)."""
    if len(set(values)) != 1 or not _DIGITS.fullmatch(values[0]):
        return None
    digits = values[0].lstrip("0") or "0"
    return MAX_DELTA if len(digits) > 10 else min(int(digits), MAX_DELTA)


def http_date(value: str | None) -> float | None:
    """An HTTP-date as seconds, None if absent or invalid (``Expires: 0`` included)."""
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def freshness_lifetime(headers: Mapping[str, str], status: int, received: float,
                       shared: bool = True) -> Lifetime:
    """How long an answer stays fresh (§4.2.1): ``s-maxage`` in a shared cache, else
    ``max-age``, else ``Expires`` - ``Date`` (the time it was received if it has none),
    else a heuristic from ``Last-Modified`` where §4.2.2 allows one."""
    directives = cache_directives(headers)
    for name in ("s-maxage", "max-age") if shared else ("max-age",):
        if name in directives:
            seconds = delta_seconds(directives[name])
            return Lifetime(0.0, "invalid") if seconds is None else Lifetime(seconds, name)
    date = http_date(headers.get("date")) or received
    if "expires" in headers:
        expires = http_date(headers["expires"])
        if expires is None:
            return Lifetime(0.0, "invalid")                   # §5.3: in the past
        return Lifetime(min(max(expires - date, 0.0), MAX_DELTA), "expires")
    modified = http_date(headers.get("last-modified"))
    if modified is not None and (status in HEURISTIC_STATUSES or "public" in directives):
        return Lifetime(min(max(date - modified, 0.0) * HEURISTIC_SHARE, HEURISTIC_MAX),
                        "heuristic")
    return Lifetime(0.0, "none")


def initial_age(headers: Mapping[str, str], request_time: float,
                response_time: float) -> float:
    """An answer's age when it was received (§4.2.3's ``corrected_initial_age``): the
    larger of its apparent age (received - ``Date``) and its ``Age`` plus the time the
    request took. Its current age is this plus the time it has been stored since."""
    date = http_date(headers.get("date"))
    apparent_age = max(response_time - date, 0.0) if date is not None else 0.0
    corrected_age = _age_value(headers.get("age")) + (response_time - request_time)
    return max(apparent_age, corrected_age)


def current_age(headers: Mapping[str, str], request_time: float, response_time: float,
                now: float) -> float:
    """§4.2.3: the initial age plus the time it has been resident in the cache."""
    return initial_age(headers, request_time, response_time) + (now - response_time)


def _age_value(value: str | None) -> float:
    """The first member of an ``Age`` field; 0 if absent or invalid (§5.1)."""
    first = (value or "").split(",")[0].strip()
    seconds = delta_seconds([first]) if first else None
    return float(seconds or 0)


def unstorable_reason(status: int, request_headers: Mapping[str, str],
                      headers: Mapping[str, str]) -> str | None:
    """Why a shared cache may not store this answer to a GET (None if it may): a status
    other than 200, ``no-store``, ``private`` (qualified or not), ``Vary: *``, a
    ``Set-Cookie``, or a request with ``Authorization`` or ``Cookie`` unless the answer
    says another user may have it (``public``, ``s-maxage``, ``must-revalidate``, §3.5)."""
    directives = cache_directives(headers)
    if status not in STORED_STATUSES:
        return "status"
    for name in ("no-store", "private"):
        if name in directives:
            return name
    if "*" in vary_fields(headers):
        return "vary-star"
    if "set-cookie" in headers:
        return "set-cookie"
    credentials = [name for name in ("authorization", "cookie") if name in request_headers]
    if credentials and not {"public", "s-maxage", "must-revalidate"} & directives.keys():
        return credentials[0]
    return None


def revalidated_each_use(headers: Mapping[str, str]) -> bool:
    """``no-cache`` (qualified or not: the named fields are most of what matters): the
    stored answer is revalidated before each use (§5.2.2.4)."""
    return "no-cache" in cache_directives(headers)


def vary_fields(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The request fields an answer's ``Vary`` names, lower-cased (``*`` kept)."""
    value = headers.get("vary", "").strip().lower()
    return tuple(sorted({name for name in _LIST_SEPARATOR.split(value) if name}))


def request_variant(fields: tuple[str, ...],
                    request_headers: Mapping[str, str]) -> tuple[str | None, ...]:
    """A request's values of ``fields``, normalised as §4.1 lets a cache compare them
    (whitespace around list commas dropped); None where it has none."""
    return tuple(_LIST_SEPARATOR.sub(",", request_headers[name].strip())
                 if name in request_headers else None for name in fields)


def validators(headers: Mapping[str, str]) -> dict[str, str]:
    """The conditional request headers that revalidate an answer with these headers."""
    found = {}
    if "etag" in headers:
        found["if-none-match"] = headers["etag"]
    if "last-modified" in headers:
        found["if-modified-since"] = headers["last-modified"]
    return found


def revalidates(stored: Mapping[str, str], not_modified: Mapping[str, str]) -> bool:
    """Whether a 304 is about the stored answer its conditional request named (§4.3.4):
    its ``ETag`` (weak or strong), else its ``Last-Modified``, equals the stored one's.
    A 304 with neither answers the request made with the stored answer's validators."""
    if "etag" in not_modified:
        return _opaque(not_modified["etag"]) == _opaque(stored.get("etag", ""))
    if "last-modified" in not_modified:
        return not_modified["last-modified"] == stored.get("last-modified")
    return True


def _opaque(etag: str) -> str:
    return etag.strip().removeprefix("W/")


def updated_headers(stored: Mapping[str, str], not_modified: Mapping[str, str]) -> dict[str, str]:
    """A stored answer's headers once a 304 revalidated it (§3.2): each field the 304
    carries replaces the stored one, but for ``UNUPDATED``."""
    return {**stored, **{name: value for name, value in not_modified.items()
                         if name not in UNUPDATED}}
