"""A page's metadata without a rule (crawler/pagemeta.py): JSON-LD first (an article
before the site's own blocks), then OpenGraph and meta tags, microdata, the page itself;
each with its source; a page whose markup has no date gets htmldate's guess."""

import json

import lxml.html

from crawler.pagemeta import page_meta

JSONLD = {"@context": "https://schema.org", "@graph": [
    {"@type": "WebSite", "name": "Daily Example", "url": "https://news.example/"},
    {"@type": "NewsArticle", "headline": "Council approves budget",
     "datePublished": "2026-11-03T09:30:00+01:00", "dateModified": "2026-11-04T10:00:00+01:00",
     "author": [{"@type": "Person", "name": "A. Writer"}],
     "image": {"@type": "ImageObject", "url": "https://news.example/img/1.jpg"}}]}

ARTICLE = f"""<html lang="en"><head><title>Budget | Daily Example</title>
<script type="application/ld+json">{json.dumps(JSONLD)}</script>
<script type="application/ld+json">{{not json</script>
<meta property="og:title" content="OG title"><meta property="og:description" content="The
council voted."><link rel="canonical" href="https://news.example/2026/budget"></head>
<body><h1>Council approves budget</h1><p>Text.</p></body></html>"""

MICRODATA = """<html><head><title>Ausschreibung</title>
<meta name="description" content="Neue Ausschreibung der Stadt"></head><body>
<article itemscope itemtype="https://schema.org/Article">
<h1 itemprop="headline">Neue Ausschreibung</h1>
<time itemprop="datePublished" datetime="2026-10-30">30. Oktober 2026</time>
<span itemprop="author">Redaktion</span></article></body></html>"""

NO_MARKUP = """<html><head><title>公告</title></head><body><h1>关于开展检查的公告</h1>
<p>发布日期：2026-09-15</p><p>各有关单位：……</p></body></html>"""


def meta_of(page, url="https://news.example/2026/budget", guess_date=True):
    return page_meta(lxml.html.fromstring(page), url, guess_date)


def test_json_ld_comes_first_and_an_article_before_the_site():
    meta = meta_of(ARTICLE)
    assert meta["title"] == "Council approves budget"
    assert meta["published"] == "2026-11-03T09:30:00+01:00"
    assert meta["modified"] == "2026-11-04T10:00:00+01:00"
    assert meta["author"] == "A. Writer"
    assert meta["image"] == "https://news.example/img/1.jpg"
    assert meta["description"] == "The council voted."
    assert meta["canonical"] == "https://news.example/2026/budget"
    assert meta["language"] == "en"
    assert meta["sources"] == {"title": "json-ld", "published": "json-ld",
                               "modified": "json-ld", "author": "json-ld", "image": "json-ld",
                               "description": "opengraph", "canonical": "html",
                               "language": "html"}


def test_microdata_and_meta_tags():
    meta = meta_of(MICRODATA, "https://stadt.example/a/1.html")
    assert (meta["title"], meta["published"], meta["author"]) == (
        "Neue Ausschreibung", "2026-10-30", "Redaktion")
    assert meta["description"] == "Neue Ausschreibung der Stadt"
    assert meta["sources"]["published"] == "microdata"
    assert meta["sources"]["description"] == "meta"


def test_a_page_without_a_date_in_its_markup_gets_a_guess_from_its_text():
    meta = meta_of(NO_MARKUP, "https://gov.example/notice/17.html")
    assert (meta["published"], meta["sources"]["published"]) == ("2026-09-15", "htmldate")
    assert "published" not in meta_of(NO_MARKUP, "https://gov.example/notice/17.html",
                                      guess_date=False)
    assert meta["title"] == "公告"


def test_a_hostile_json_ld_block_costs_that_block_only():
    nested = "[" * 50_000 + "]" * 50_000
    page = (f'<html><head><script type="application/ld+json">{nested}</script>'
            f'<meta property="og:title" content="Still read"></head><body></body></html>')
    assert meta_of(page, guess_date=False)["title"] == "Still read"


def test_microdata_is_read_only_for_what_the_markup_leaves_unknown():
    """Microdata fills title, published or author when JSON-LD and meta tags lack one;
    when they give all three, the page's itemprop elements are not walked at all."""
    lacking = MICRODATA.replace("<head>", '<head><meta property="og:title" content="OG">')
    meta = meta_of(lacking, "https://stadt.example/a/1.html")
    assert (meta["title"], meta["published"]) == ("OG", "2026-10-30")
    assert meta["sources"]["published"] == "microdata"
    known = MICRODATA.replace("<head>", '<head><meta property="og:title" content="OG">'
                              '<meta property="article:published_time" content="2026-10-29">'
                              '<meta property="article:author" content="Stadt">'
                              ).replace("</article>", '<i itemprop="dateModified">2026-11-01</i>'
                                        "</article>")
    assert meta_of(known.replace('"article:author"', '"x"'))["modified"] == "2026-11-01"
    meta = meta_of(known, "https://stadt.example/a/1.html")
    assert "modified" not in meta           # the itemprop elements were not walked
    assert (meta["title"], meta["published"], meta["author"]) == ("OG", "2026-10-29", "Stadt")
    assert set(meta["sources"].values()) <= {"opengraph", "meta", "html"}


def test_the_date_guess_leaves_the_page_tree_as_it_was():
    """htmldate copies the tree it cleans (the main text is read from the same tree
    afterwards); the guess makes no copy of its own."""
    root = lxml.html.fromstring(NO_MARKUP.replace("</body>", "<script>x()</script></body>"))
    before = lxml.html.tostring(root)
    assert page_meta(root, "https://gov.example/notice/17.html")["published"] == "2026-09-15"
    assert lxml.html.tostring(root) == before


def test_what_the_main_text_walk_gathers_gives_the_same_meta():
    """The item pipeline reads the main text first; its walk gathers the script, meta,
    title, link and time elements and the itemprop ones, in <head> and <body>, so that
    metadata needs no walk of its own, with the same result."""
    from crawler.maintext import Described, extract_main_text

    body_tags = ('<meta itemprop="x" content="y"><link rel="canonical" href="https://b.example/'
                 'a"><noscript><meta property="og:image" content="https://b.example/i.png">'
                 '</noscript>')
    for page in (ARTICLE, MICRODATA, NO_MARKUP, MICRODATA.replace("<article", body_tags
                                                                  + "<article")):
        root = lxml.html.fromstring(page)
        described = Described()
        extract_main_text(root, described=described)
        assert described.tagged and described.marked is not None
        assert page_meta(root, "https://b.example/a", described=described) == page_meta(
            root, "https://b.example/a")


def test_the_date_guess_reads_the_article_before_the_page():
    """A page without date markup whose sidebar lists older stories: the date next to
    its headline is taken, not the first one on the page."""
    page = """<html><head><title>Notice</title></head><body>
    <div class="sidebar"><h3>Earlier</h3><ul><li><a href="/n/1">Old notice</a>
    <span class="date">2025-01-05</span></li></ul></div>
    <div class="content"><div class="head"><h1>Road works on Main Street</h1>
    <p class="date">2026-09-15</p></div><p>The works last two weeks.</p></div>
    </body></html>"""
    meta = meta_of(page, "https://town.example/notices/road-works")
    assert (meta["published"], meta["sources"]["published"]) == ("2026-09-15", "htmldate")
    article = page.replace('<div class="content">', '<article>').replace(
        "</p></div>\n    </body>", "</p></article>\n    </body>")
    assert meta_of(article, "https://town.example/notices/road-works")["published"] == \
        "2026-09-15"
