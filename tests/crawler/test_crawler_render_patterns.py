"""``render: auto``'s pure logic (crawler/render/policy.py): the way a URL template's pages go
from its comparisons, and what counts as a page needing rendering (the templates
themselves: test_crawler_pagegroups.py)."""

import random

import pytest
from scrapy.http import HtmlResponse

from crawler.render.policy import (
    MAX_PATTERNS,
    SAMPLE,
    SAMPLE_MAX,
    choose_way,
    needs_rendering,
    render_mode,
    site_way,
)
from master.rules import RuleError, validate_rule


def test_render_way_samples_then_follows_the_majority(monkeypatch):
    monkeypatch.setattr("crawler.render.policy.random.randrange", lambda n: n - 1)   # no re-check
    assert choose_way(None, 0) == "compare"
    assert choose_way((SAMPLE - 1, SAMPLE - 1), 1) == "compare"
    # its sample being compared already: the page waits for the verdict
    assert choose_way((SAMPLE - 1, 0), 1, comparing=1) == "wait"
    assert choose_way((SAMPLE, SAMPLE), 1) == "render"
    assert choose_way((SAMPLE, 0), 1) == "plain"
    assert choose_way(None, MAX_PATTERNS) == "render"      # past the bound: the safe way
    monkeypatch.setattr("crawler.render.policy.random.randrange", lambda n: 0)
    assert choose_way((SAMPLE, 0), 1) == "compare"          # the occasional re-check


def test_render_a_pattern_is_checked_again_less_often_the_more_its_comparisons_agree():
    def checks(counts, pages=20000):
        random.seed(1)
        return sum(choose_way(counts, 1) == "compare" for _ in range(pages)) / pages

    assert 0.015 < checks((SAMPLE, 0)) < 0.025                       # one in RECHECK
    assert 0.003 < checks((2 * SAMPLE, 0)) < 0.007                   # a quarter as often
    # comparisons that disagree keep it up: half of these agree with the majority, and
    # the template is checked four times as often
    assert checks((SAMPLE_MAX + 1, 3)) == pytest.approx(4 * checks((SAMPLE_MAX + 1, 0)),
                                                        abs=0.003)


def test_render_a_re_check_under_way_counts_as_made():
    """Rendering takes seconds, and the template's pages fetched meanwhile are drawn with
    the re-checks being made counted: as rarely as once they are recorded."""
    def checks(counts, comparing, pages=20000):
        random.seed(1)
        return sum(choose_way(counts, 1, comparing) == "compare" for _ in range(pages)) / pages

    assert checks((SAMPLE, 0), SAMPLE) == pytest.approx(checks((2 * SAMPLE, 0), 0))
    assert checks((SAMPLE, 0), SAMPLE) < checks((SAMPLE, 0), 0) / 3


def test_render_a_pattern_whose_sample_disagrees_is_compared_further(monkeypatch):
    monkeypatch.setattr("crawler.render.policy.random.randrange", lambda n: n - 1)   # no re-check
    assert choose_way((SAMPLE, 1), 1) == "compare"               # one needed it, one not
    assert choose_way((SAMPLE, 1), 1, comparing=SAMPLE_MAX - SAMPLE) == "wait"
    assert choose_way((SAMPLE_MAX, 3), 1) == "render"            # the majority needed it
    assert choose_way((SAMPLE_MAX, 2), 1) == "plain"


def test_render_a_site_past_its_sampled_templates_goes_its_way_so_far():
    """An endless calendar makes each depth a template of its own: past ``site_groups``
    sampled, a site's new templates take the way most of its compared pages needed."""
    calendar = {f"h.example/cal/{'next/' * depth}": (1, 0) for depth in range(3)}
    assert site_way(calendar, "h.example/cal/next/next/next/next/", 4) is None
    assert site_way(calendar, "h.example/cal/next/next/next/", 3) == "plain"
    rendered = {**calendar, "h.example/app/{n}": (SAMPLE, SAMPLE), "h.example/js/": (5, 5)}
    assert site_way(rendered, "h.example/cal/next/next/next/", 3) == "render"
    # another site's templates count for nothing, not even a host named alike
    assert site_way(calendar, "other.example/cal/", 3) is None
    assert site_way(calendar, "h.example.org/cal/", 3) is None


def page(body):
    return HtmlResponse("http://a.example/app/1.html", body=body.encode(), encoding="utf-8")


def test_render_needed_when_it_gives_more_links_or_fields():
    empty = page("<h1 id=t></h1><ul></ul>")
    listed = page('<h1 id=t></h1><ul><li><a href="/a/1.html">1</a></li></ul>')
    titled = page("<h1 id=t>Title</h1><ul></ul>")
    assert needs_rendering(empty, listed, None)
    assert needs_rendering(empty, titled, {"title": "//h1/text()"})
    assert not needs_rendering(empty, titled, None)
    assert not needs_rendering(titled, titled, {"title": "//h1/text()"})


def test_render_a_precise_rule_chooses_per_step_and_sources_are_never_rendered():
    rule = {"first_page_xpath": {"list_from": "//li"}, "render": {"detail": "auto"}}
    config = {"rule": rule}
    assert render_mode(config, {"callback": "parse"}) == "never"          # a list page
    assert render_mode(config, {"callback": "parse_detail"}) == "auto"
    assert render_mode({"rule": dict(rule, render="always")}, {}) == "always"
    assert render_mode({"rule": dict(rule, render="always")},
                       {"callback": "parse_sitemap"}) == "never"
    assert render_mode({"rule": {}}, {}) == "never"


def test_render_rule_schemas_take_a_mode_and_a_precise_rule_a_mode_per_step():
    base = {"first_page_xpath": {"list_from": "//li"}}
    assert validate_rule("precise", dict(base, render={"list": "never", "detail": "auto"}))
    assert validate_rule("universal", {"rules": [{"allow": "/"}], "render": "auto"})
    for bad in ({"page": "auto"}, {"detail": "sometimes"}, {}, "sometimes"):
        with pytest.raises(RuleError, match="render"):
            validate_rule("precise", dict(base, render=bad))
