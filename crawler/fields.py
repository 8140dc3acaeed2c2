"""A rule's fields read from a page: selected, then processed.

A field is a string (an XPath: every match stripped, the non-empty ones joined by
newlines, as always) or an object::

    {"xpath": "//time", "attr": "datetime", "re": "(\\\\d{4}-\\\\d\\\\d-\\\\d\\\\d)",
     "take": "first", "as": "date"}

applied in that order:

- ``xpath`` or ``css``: the selector; ``attr``: read that attribute of each match (at
  most ``VALUES_MAX`` matches, each cut at ``VALUE_MAX`` characters);
- ``re``: keep from each value the regular expression's first group (or its whole match);
  a value it does not match is left out;
- ``take``: ``join`` (the default: the values joined by newlines), ``first`` or ``list``;
- ``as``: ``text`` (the default), ``date`` (ISO 8601, from any language or a relative
  date such as "vor 2 Stunden", with dateparser), ``number``, ``price`` (``{"amount",
  "currency"}``, with price-parser) or ``url`` (absolute, escaped).

A value no processor can make (a date nobody can read) leaves the field out, and the
item says why in ``field_errors`` (``{field: reason}``), so a required field missing
for that reason is dropped with it in the log.
"""

import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from master.rules import Rule, required_fields
from master.sitehealth import has_value

if TYPE_CHECKING:
    from scrapy.http import TextResponse

    from crawler.spiders import Readable

FieldSpec = str | dict[str, str]
PROCESSORS = ("text", "date", "number", "price", "url")
TAKES = ("join", "first", "list")
VALUES_MAX = 1000         # matches of one field read at most
VALUE_MAX = 10_000        # characters of one match kept (what a regex runs over)


class FieldError(ValueError):
    """A field's value could not be made; the message says why."""


def read_field(selector: "Readable", spec: FieldSpec, response: "TextResponse",
               fetched_at: float) -> Any:
    """The field's value on the page (``selector``: the page or, on a precise spider's
    list page, an element of it); ``None`` when nothing matched."""
    from crawler.spiders import css_strings, xpath_strings

    if isinstance(spec, str):
        spec = {"xpath": spec}
    if "css" in spec:
        css = spec["css"] + (f"::attr({spec['attr']})" if spec.get("attr") else "")
        values = css_strings(selector, css)
    else:
        xpath = spec["xpath"] + (f"/@{spec['attr']}" if spec.get("attr") else "")
        values = xpath_strings(selector, xpath)
    values = [value.strip()[:VALUE_MAX] for value in values[:VALUES_MAX]]
    values = [value for value in values if value]
    if spec.get("re"):
        values = _matches(_regex(spec["re"]), values)
    if not values:
        return None
    kind = spec.get("as", "text")
    take = spec.get("take", "join")
    if take == "list":
        return [process(kind, value, response, fetched_at) for value in values]
    value = values[0] if take == "first" else "\n".join(values)
    return process(kind, value, response, fetched_at)


@lru_cache(maxsize=512)
def _regex(expression: str) -> re.Pattern[str]:
    return re.compile(expression)


def _matches(pattern: re.Pattern[str], values: list[str]) -> list[str]:
    found = []
    for value in values:
        match = pattern.search(value)
        if match:
            found.append((match.group(1) if pattern.groups else match.group(0)).strip())
    return [value for value in found if value]


def process(kind: str, value: str, response: "TextResponse", fetched_at: float) -> Any:
    """``value`` as ``kind`` says, or ``FieldError``."""
    if kind == "date":
        return as_date(value, fetched_at)
    if kind in ("number", "price"):
        return as_price(value) if kind == "price" else as_number(value)
    if kind == "url":
        from w3lib.url import safe_url_string

        return safe_url_string(response.urljoin(value), response.encoding)
    return value


def as_date(value: str, fetched_at: float) -> str:
    """ISO 8601: the date as the page wrote it, in any language; a relative date from
    when the page was fetched; the page's own offset kept when it gives one."""
    import dateparser
    from dateparser.search import search_dates

    base = datetime.fromtimestamp(fetched_at, UTC).replace(tzinfo=None)
    settings = {"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past"}
    parsed = dateparser.parse(value[:200], settings=settings)
    if parsed is None:          # a date within words ("Posted 3 Nov 2026 by ...")
        found = search_dates(value[:200], settings=settings)
        parsed = found[0][1] if found else None
    if parsed is None:
        raise FieldError(f"as date: no date in {value[:60]!r}")
    if parsed.tzinfo is None and parsed.time() == datetime.min.time():
        return parsed.date().isoformat()
    return parsed.isoformat()


def as_number(value: str) -> float:
    from price_parser import Price

    amount = Price.fromstring(value).amount_float
    if amount is None:
        raise FieldError(f"as number: no number in {value[:60]!r}")
    return amount


def as_price(value: str) -> dict[str, Any]:
    from price_parser import Price

    price = Price.fromstring(value)
    if price.amount_float is None:
        raise FieldError(f"as price: no amount in {value[:60]!r}")
    return {"amount": price.amount_float, "currency": price.currency}


def read_fields(selector: "Readable", specs: dict[str, FieldSpec], response: "TextResponse",
                fetched_at: float) -> tuple[dict[str, Any], dict[str, str]]:
    """Every field of ``specs``: ``(values, {field: why it is missing})``. A field that
    matched nothing is an empty string, as it always was."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, spec in specs.items():
        try:
            value = read_field(selector, spec, response, fetched_at)
        except FieldError as exc:
            errors[name] = str(exc)
            continue
        values[name] = "" if value is None else value
    return values, errors


def missing_fields(spider_type: str, rule: Rule, item: dict[str, Any]) -> list[str]:
    """The required fields ``item`` has no value for (0 is a value): the rule's
    ``required``, else every field of the rule that made it. A universal crawl's rules
    each name their own fields, and an item carries those of its rule (one that matched
    nothing as "", one no processor could make in ``field_errors``): another rule's
    fields are not asked of it."""
    required = required_fields(spider_type, rule)
    if spider_type != "precise" and "required" not in rule:
        errors = item.get("field_errors") or {}
        required = [name for name in required if name in item or name in errors]
    return [name for name in required if not has_value(item.get(name))]
