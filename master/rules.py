"""Extraction rules, the contract: their JSON Schemas, spider types and validation.

A crawl names a spider type and gives a rule for it.

``precise`` (thesis table 4-9) reads list pages, then detail pages::

    {"first_page_xpath": {"list_from": "//ul[@class='news']/li",
                          "second_page_url": "a/@href", "continue": true,
                          "title": "a/text()"},
     "second_page_xpath": {"date": "//span[@class='date']/text()"},
     "next_page_xpath": "//a[@class='next']/@href",
     "required": ["title", "date"]}

``universal`` follows link rules (thesis tables 4-10, 4-11)::

    {"rules": [{"allow": ["/list/"], "follow": true},
               {"allow": ["/news/\\\\d+\\\\.html"], "follow": false,
                "fields": {"title": "//h1/text()", "body": {"css": "div.content"},
                           "date": {"xpath": "//time/@datetime", "as": "date"}}}],
     "required": ["title"]}

``validate_rule`` checks a rule against its JSON Schema and compiles every
XPath, CSS selector and regular expression in it (a field may be a selector with
processors: crawler/fields.py); a ``RuleError`` names the
field that is wrong (``rule.rules[1].allow[0]: ...``). The intake validates crawl
requests with it, the spiders read rules by it: it sits below both
(crawler/rules.py compiles a rule's link rules for the spiders).
"""

import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from settings.errors import CrawlClusterError
from settings.jsonschemas import SchemaChecker

SCHEMA_DIR = Path(__file__).parent / "schemas"
SPIDER_TYPES = ("precise", "universal")
PRECISE_KEYWORDS = {"list_from", "second_page_url", "continue"}
Rule = dict[str, Any]     # a crawl's rule as JSON gives it (see the schemas)


class RuleError(CrawlClusterError):
    """A rule is invalid; ``field`` is the dotted path of the offending value."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@cache
def checker(spider_type: str) -> SchemaChecker:
    return SchemaChecker.from_file(SCHEMA_DIR / f"rule_{spider_type}.json")


def _path(parts: Any, root: str = "rule") -> str:
    text = root
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def validate_rule(spider_type: str, rule: Rule) -> Rule:
    """Return the rule if valid for the spider type, else raise RuleError."""
    key = (spider_type, json.dumps(rule, sort_keys=True))
    if key not in _VALID_RULES:
        _check_rule(spider_type, rule)
        if len(_VALID_RULES) >= 4096:
            _VALID_RULES.clear()
        _VALID_RULES.add(key)
    return rule


# Rules found valid, by spider type and canonical JSON: crawls resubmit the same
# rules, and compiling every XPath and regex again costs more than the lookup.
_VALID_RULES: set[tuple[str, str]] = set()


def _check_rule(spider_type: str, rule: Rule) -> None:
    if spider_type not in SPIDER_TYPES:
        raise RuleError("spider_type", f"unknown spider type {spider_type!r}; "
                                       f"choose from {', '.join(SPIDER_TYPES)}")
    error = checker(spider_type).first_error(rule)
    if error is not None:
        raise RuleError(_path(error.absolute_path), error.message)
    for field, kind, expression in _expressions(spider_type, rule):
        _compile(field, kind, expression)


def _expressions(spider_type: str, rule: Rule) -> Iterator[tuple[str, str, str]]:
    """Every ``(field path, kind, expression)`` a rule holds."""
    if spider_type == "precise":
        for section in ("first_page_xpath", "second_page_xpath"):
            for name, spec in rule.get(section, {}).items():
                if name != "continue":
                    yield from _field_expressions(f"rule.{section}.{name}", spec)
        if "next_page_xpath" in rule:
            yield "rule.next_page_xpath", "xpath", rule["next_page_xpath"]
        return
    for i, link_rule in enumerate(rule["rules"]):
        base = f"rule.rules[{i}]"
        for key, kind in (("allow", "regex"), ("deny", "regex"), ("restrict_xpaths", "xpath"),
                          ("restrict_css", "css")):
            for j, expression in enumerate(as_list(link_rule.get(key))):
                yield f"{base}.{key}[{j}]", kind, expression
        for name, spec in link_rule.get("fields", {}).items():
            yield from _field_expressions(f"{base}.fields.{name}", spec)


def _field_expressions(path: str, spec: str | dict[str, str]) -> Iterator[tuple[str, str, str]]:
    kind, expression = field_selector(spec)
    yield path, kind, expression
    if isinstance(spec, dict) and "re" in spec:
        yield f"{path}.re", "regex", spec["re"]


def field_selector(spec: str | dict[str, str]) -> tuple[str, str]:
    """``(kind, expression)`` of a field: a bare string is an XPath."""
    if isinstance(spec, str):
        return "xpath", spec
    kind = "css" if "css" in spec else "xpath"
    return kind, spec[kind]


def as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _compile(field: str, kind: str, expression: str) -> None:
    from cssselect import SelectorError
    from lxml import etree
    from parsel.csstranslator import HTMLTranslator

    try:
        if kind == "regex":
            re.compile(expression)
        elif kind == "xpath":
            etree.XPath(expression)
        else:
            HTMLTranslator().css_to_xpath(expression)
    except (re.error, etree.XPathError, SelectorError) as exc:
        raise RuleError(field, f"invalid {kind} {expression!r}: {exc}") from None


def rule_from_scrapy_cluster(request: dict[str, Any]) -> Rule:
    """A universal rule from scrapy-cluster crawl fields (allow_regex, ...)."""
    link_rule: dict[str, Any] = {"follow": True, "fields": {"title": "//title/text()"}}
    for source, target in (("allow_regex", "allow"), ("deny_regex", "deny"),
                           ("allowed_domains", "allow_domains"),
                           ("deny_extensions", "deny_extensions")):
        if request.get(source):
            link_rule[target] = list(request[source])
    return {"rules": [link_rule]}


def field_names(spider_type: str, rule: Rule) -> list[str]:
    """Every field a rule names, in the rule's order (a universal rule's once each)."""
    if spider_type == "precise":
        names = [*rule.get("first_page_xpath", {}), *rule.get("second_page_xpath", {})]
        return [n for n in names if n not in PRECISE_KEYWORDS]
    return list(dict.fromkeys(name for r in rule["rules"] for name in r.get("fields", {})))


def required_fields(spider_type: str, rule: Rule) -> list[str]:
    """The fields a rule requires: its ``required``, else every field it names (of
    those, an item is asked for its own rule's: crawler/fields.py ``missing_fields``)."""
    if "required" in rule:
        return list(rule["required"])
    names = field_names(spider_type, rule)
    return names if spider_type == "precise" else sorted(names)
