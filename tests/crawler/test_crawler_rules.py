"""Rule validation and compilation: errors name the field."""

import pytest

from master.rules import RuleError, required_fields, rule_from_scrapy_cluster, validate_rule

PRECISE = {
    "first_page_xpath": {"list_from": "//ul[@class='news-list']/li", "continue": True,
                         "second_page_url": "a/@href", "title": "a/text()"},
    "second_page_xpath": {"date": "//span[@class='date']/text()"},
    "next_page_xpath": "//a[@class='next']/@href",
}
UNIVERSAL = {"rules": [{"allow": ["/list/"], "follow": True},
                       {"allow": r"/news/\d+\.html", "follow": False,
                        "fields": {"title": "//h1/text()", "body": {"css": "div.content p"}}}]}


def test_valid_rules_pass():
    assert validate_rule("precise", PRECISE) is PRECISE
    assert validate_rule("universal", UNIVERSAL) is UNIVERSAL


@pytest.mark.parametrize("spider_type, rule, field, words", [
    ("precise", {"first_page_xpath": {"list_from": "//ul["}}, "rule.first_page_xpath.list_from",
     "invalid xpath"),
    ("precise", {"first_page_xpath": {"title": "a"}}, "rule.first_page_xpath",
     "'list_from' is a required property"),
    ("precise", {"first_page_xpath": {"list_from": "//li", "title": 5}},
     "rule.first_page_xpath.title", "is not valid under any of the given schemas"),
    ("precise", {**PRECISE, "next_page_xpath": "//a[@"}, "rule.next_page_xpath", "invalid xpath"),
    ("precise", {**PRECISE, "extra": 1}, "rule", "Additional properties"),
    ("universal", {"rules": [{"allow": "/ok/"}, {"deny": ["(unclosed"]}]}, "rule.rules[1].deny[0]",
     "invalid regex"),
    ("universal", {"rules": [{"fields": {"t": {"css": "h1::"}}}]}, "rule.rules[0].fields.t",
     "invalid css"),
    ("universal", {"rules": [{"restrict_xpaths": ["//div[@id='x'"]}]},
     "rule.rules[0].restrict_xpaths[0]", "invalid xpath"),
    ("universal", {"rules": [{"follow": "yes"}]}, "rule.rules[0].follow", "not of type"),
    ("universal", {"rules": []}, "rule.rules", "should be non-empty"),
    ("universal", {"rules": [{"fields": {"t": {"xpath": "//a", "css": "a"}}}]},
     "rule.rules[0].fields.t", "is not valid under any of the given schemas"),
    ("unknown", {}, "spider_type", "unknown spider type"),
])
def test_invalid_rules_name_the_field(spider_type, rule, field, words):
    with pytest.raises(RuleError) as caught:
        validate_rule(spider_type, rule)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_required_fields_default_to_every_named_field():
    assert required_fields("precise", PRECISE) == ["title", "date"]
    assert required_fields("universal", UNIVERSAL) == ["body", "title"]
    assert required_fields("precise", {**PRECISE, "required": ["title"]}) == ["title"]


def test_scrapy_cluster_fields_map_to_a_universal_rule():
    rule = rule_from_scrapy_cluster({"allow_regex": [r".*\.html$"], "deny_regex": ["/ads/"],
                                     "allowed_domains": ["example.com"],
                                     "deny_extensions": ["pdf"]})
    assert validate_rule("universal", rule) is rule
    [link_rule] = rule["rules"]
    assert link_rule["allow"] == [r".*\.html$"] and link_rule["deny"] == ["/ads/"]
    assert link_rule["allow_domains"] == ["example.com"]
    assert link_rule["deny_extensions"] == ["pdf"]
