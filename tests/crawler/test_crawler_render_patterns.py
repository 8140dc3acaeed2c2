"""``render: auto``'s pure logic (crawler/render.py): URL patterns, the way a pattern's
pages go from its comparisons, and what counts as a page needing rendering."""

from scrapy.http import HtmlResponse

from crawler.render import MAX_PATTERNS, SAMPLE, choose_way, needs_rendering, url_pattern


def test_render_patterns_abstract_numbers_and_ids():
    assert url_pattern("http://a.example/app/article-17.html?x=1") == (
        "a.example/app/article-{n}.html")
    assert url_pattern("http://a.example/app/article-3.html") == (
        "a.example/app/article-{n}.html")
    assert url_pattern("http://a.example/p/3f9c2a7be1d04c55/view") == "a.example/p/{id}/view"
    assert url_pattern("http://a.example/") == "a.example/"
    assert url_pattern("http://a.example/news/") != url_pattern("http://a.example/app/")


def test_render_way_samples_then_follows_the_majority(monkeypatch):
    monkeypatch.setattr("crawler.render.random.randrange", lambda n: 1)   # no re-check
    assert choose_way(None, 0) == "compare"
    assert choose_way((SAMPLE - 1, SAMPLE - 1), 1) == "compare"
    # its sample being compared already: the page waits for the verdict
    assert choose_way((SAMPLE - 1, 0), 1, comparing=1) == "wait"
    assert choose_way((SAMPLE, SAMPLE), 1) == "render"
    assert choose_way((SAMPLE, 0), 1) == "plain"
    assert choose_way(None, MAX_PATTERNS) == "render"      # past the bound: the safe way
    monkeypatch.setattr("crawler.render.random.randrange", lambda n: 0)
    assert choose_way((SAMPLE, 0), 1) == "compare"          # the occasional re-check


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
