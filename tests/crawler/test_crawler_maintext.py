"""Main-text extraction (line-block distribution): real pages from the article-extraction
benchmark, pages written in the shapes real sites have, and the thesis's Chinese news."""

import gzip
import re
from pathlib import Path

import pytest

from crawler.maintext import extract_main_text, page_lines
from manager.local.sitegen import SiteSpec, generate_site

PAGES = Path(__file__).parent / "pages"


def paragraphs(name):
    source = (PAGES / name).read_text(encoding="utf-8")
    article = source.split("<h1>", 1)[1]
    return [re.sub(r"<[^>]+>", "", p).strip()
            for p in re.findall(r"<p>(.*?)</p>", article) if len(p) > 60]


@pytest.mark.parametrize("name, absent", [
    ("news_zh.html", ["首页", "登录", "夏季大促", "相关阅读", "我市今年将新增绿道", "热点排行",
                      "地铁五号线", "版权所有", "分享到微信", "太好了", "停车位多一些"]),
    ("news_en.html", ["Home", "Subscribe", "unlimited access", "More from Local",
                      "Road works", "Finally! Great news", "Copyright", "Privacy"]),
])
def test_body_kept_navigation_dropped(name, absent):
    text = extract_main_text((PAGES / name).read_text(encoding="utf-8"))
    body = paragraphs(name)
    assert len(body) >= 4
    for paragraph in body:
        assert paragraph in text
    for noise in absent:
        assert noise not in text, noise


def test_generated_detail_pages(tmp_path):
    manifest = generate_site(tmp_path, SiteSpec(port=1, details_per_host=10))
    for page in manifest["pages"]:
        if page["kind"] != "detail":
            continue
        path = tmp_path / "www" / page["host"] / page["url"].split("/", 3)[3]
        text = extract_main_text(path.read_bytes().decode(page["encoding"]))
        assert all(paragraph in text for paragraph in page["content"])
        assert "广告" not in text and "网友评论" not in text and "站点" not in text


def test_scripts_and_styles_are_not_text_links_are():
    lines = page_lines("<html><head><style>p{}</style><script>var x=1;</script></head>"
                       "<body><p>kept <a href='/'>link</a> tail</p></body></html>")
    assert lines == ["kept link tail"]


def test_empty_and_broken_pages():
    assert extract_main_text("") == ""
    assert extract_main_text("<html><body></body></html>") == ""
    assert extract_main_text("<p>unclosed <b>markup <div>still text</p>") != ""


def test_block_size_is_bounded():
    with pytest.raises(ValueError):
        extract_main_text("<p>x</p>", k=6)


@pytest.mark.parametrize("name", ["news_zh.html", "news_en.html"])
def test_the_parsed_page_gives_the_same_text_and_is_left_unchanged(name):
    from lxml import etree
    from parsel import Selector

    source = (PAGES / name).read_text(encoding="utf-8")
    root = Selector(text=source).root          # the tree a spider's response already has
    before = etree.tostring(root)
    assert extract_main_text(root) == extract_main_text(source)
    assert page_lines(root) == page_lines(source)
    assert etree.tostring(root) == before


def test_the_pipeline_takes_the_page_as_a_tree_or_as_html():
    import warnings

    from parsel import Selector

    from crawler.pipelines import MainTextPipeline

    source = (PAGES / "news_en.html").read_text(encoding="utf-8")
    expected = extract_main_text(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # lxml warns when a tree is truth-tested
        from_tree = MainTextPipeline().process_item({"url": "http://a.example/",
                                                     "_body": Selector(text=source).root})
    from_html = MainTextPipeline().process_item({"url": "http://a.example/", "_body": source})
    assert from_tree == from_html
    assert from_tree["main_text"] == expected and from_tree["meta"]["title"]
    assert MainTextPipeline(meta=False).process_item({"url": "http://a.example/",
                                                      "_body": ""}) == {
        "url": "http://a.example/", "main_text": ""}
    assert MainTextPipeline().process_item({"title": "no page"}) == {"title": "no page"}


def spider_tree(source):
    """The parsed page a spider's response has."""
    from parsel import Selector

    return Selector(text=source).root


def real_page(name):
    return gzip.decompress((PAGES / "real" / f"{name}.html.gz").read_bytes()).decode("utf-8")


@pytest.mark.parametrize("name, present, absent", [
    ("098bb3",                          # the page's wrapper has a class saying "menu"
     ["Walt Disney Co. executive Kevin Mayer said overwhelming demand",
      "“Operating is a lot different than a strategy role,” Mayer said."],
     ["Reprints, Rights & Permissions", "Copyright © 2019, Los Angeles Times",
      "Get our daily Entertainment newsletter", "Audio Briefs for Smart Speakers"]),
    ("33fe24",                          # one paragraph has a body class, the rest none
     ["As of 29 November 2018, thirty artworks will light up the city center",
      "From hundreds of submitted concepts, the festival jury selected thirty artworks."],
     ["Venice Art Biennale 2017", "Museums of archaeology and archaeological sites"]),
    ("5f03fc",                          # a long body of short lines
     ["If you’ve done 80 Day Obsession with Autumn Calabrese",
      "Meal Prep Menu for Eating Plan A", "Now get prepping!"],
     ["The information provided on this website",
      "Coming Soon: Chocolate Almond Crunch BEACHBAR"]),
    ("f81c6c",                          # a hidden copy of the article, related links
     ["1. Define early retirement", "The first step on the path to early retirement",
      "Sacrifice is necessary to retire early"],
     ["Related coverage from How to Do Everything", "Personal Finance Insider pfi",
      "How to invest in index funds, explained"]),
    ("85439e",                          # Japanese
     ["先日、不正に改造したiPhoneを販売したとして、商標法違反の疑いで20代の男性が逮捕された",
      "※「iPhone」は、Apple Inc.の商標です。"],
     ["Copyright © Lighthouse International Patent firm", "【TEL】 03-5809-2727"]),
])
def test_real_pages(name, present, absent):
    text = extract_main_text(spider_tree(real_page(name)))
    for sentence in present:
        assert sentence in text, sentence
    for noise in absent:
        assert noise not in text, noise


def test_a_hidden_copy_of_the_article_is_left_out():
    text = extract_main_text(spider_tree(real_page("f81c6c")))
    assert text.count("The first step on the path to early retirement") == 1


def page_paragraphs(name, container):
    """The text of every <p> and <li> inside the element with id or class ``container``
    of a written page."""
    root = spider_tree((PAGES / name).read_text(encoding="utf-8"))
    (body,) = root.xpath(f"//*[@id='{container}' or @class='{container}']")
    return [" ".join(element.text_content().split()) for element in body.iter("p", "li")]


def test_a_long_article_with_subheadings_inline_links_and_a_quote():
    source = (PAGES / "long_article.html").read_text(encoding="utf-8")
    assert "<article" not in source and "<main" not in source    # the line blocks decide
    text = extract_main_text(source)
    body = [p for p in page_paragraphs("long_article.html", "col-left")
            if "Council approves" not in p and "Rowing club" not in p and "Bakery on" not in p]
    assert len(body) >= 14
    for paragraph in body:
        assert paragraph in text, paragraph
    for kept in ["The first winter", "Paying for it", "What is different now",
                 "The regional council's independent review later found",
                 "We learned more about the river in one week", "Short."]:
        assert kept in text, kept
    for noise in ["Sport", "Share on Facebook", "More from Riverside", "Council approves",
                  "I remember that night", "Most read", "Spring sale", "All rights reserved",
                  "By Ana Lindqvist"]:
        assert noise not in text, noise


def test_a_reference_page_keeps_code_as_written_and_definition_lists():
    text = extract_main_text((PAGES / "reference.html").read_text(encoding="utf-8"))
    assert ("@retry(on=(ConnectionError, TimeoutError), attempts=5,\n"
            "       backoff=Exponential(base=0.1, cap=10.0))\n"
            "def fetch(url):\n"
            "    return session.get(url, timeout=5).json()") in text
    assert ("for attempt in retry.attempts(on=OSError, attempts=4):\n"
            "    with attempt:\n        shutil.copy(source, target)") in text
    for kept in ["attempts\nHow many times to call the function in all",
                 "give_up\nA function that receives the error",
                 "See Backoff policies for the ones included",
                 "attached as __notes__, so the log shows why",
                 "Do not retry operations that are not safe to repeat"]:
        assert kept in text, kept
    for noise in ["Quick start", "Changelog", "Edit this page", "« Client", "tidewater authors"]:
        assert noise not in text, noise


def test_a_forum_thread_keeps_every_post_and_drops_the_chrome():
    text = extract_main_text((PAGES / "forum_thread.html").read_text(encoding="utf-8"))
    posts = page_paragraphs("forum_thread.html", "thread")
    assert len(posts) == 5
    for paragraph in posts:
        assert paragraph in text, paragraph
    for noise in ["Joined:", "Posts: 3,208", "Reply", "Similar threads", "Starter not rising",
                  "Forum rules", "Thirty years of bread", "Newest first", "Log in"]:
        assert noise not in text, noise


def test_a_listing_pages_main_text_is_its_items():
    """A section front's main text is what it lists (headlines, teasers, dates), not its
    menu, pager or copyright line (docs/architecture.md, "Main text")."""
    source = (PAGES / "listing.html").read_text(encoding="utf-8")
    text = extract_main_text(source)
    for kept in ["Council approves new school on the north bank after long debate",
                 "The vote ended a two-year argument over the site",
                 "Storm warning for the coast this weekend as winds strengthen",
                 "Residents near the quay are asked to move cars away from the water."]:
        assert kept in text, kept
    for noise in ["Sport", "Opinion", "Next page", "All rights reserved", "Privacy"]:
        assert noise not in text, noise



NOSCRIPT_THREAD = """<!DOCTYPE html><html><head><title>Thread</title></head><body>
<div id="app"></div>
<noscript><div class="thread">
<div class="post"><p>Has anyone tried replacing the wheel bearings on a 2009 touring bike
without the special press? Mine started grinding after the winter and the shop is booked
for three weeks.</p></div>
<div class="post"><p>I did it with a threaded rod, two big washers and a socket that just
fits the outer race. Go slowly and keep it square, and the new bearing seats fine.</p></div>
</div></noscript>
<script>window.start()</script></body></html>"""


def test_a_thread_only_in_noscript_is_read_from_it():
    """What a crawler running no JavaScript gets of some forums: the posts in <noscript>."""
    text = extract_main_text(NOSCRIPT_THREAD)
    assert "replacing the wheel bearings on a 2009 touring bike" in text
    assert "a socket that just fits the outer race" in text
    assert "window.start" not in text
    # with a body outside it, <noscript> stays out ("enable JavaScript" notices)
    assert "wheel bearings" not in extract_main_text(NOSCRIPT_THREAD.replace(
        '<div id="app"></div>', "<article><p>" + "A body of its own. " * 30 + "</p></article>"))


def genre_page(name):
    return gzip.decompress((PAGES / "genres" / f"{name}.html.gz").read_bytes()).decode("utf-8")


@pytest.mark.parametrize("name, present, absent", [
    ("wcxb-test-5277", ["Pintoricchio Magnified: An Immersive Conservation Experience",
                        "Tags For: American Printed Silks, 1927–1947",
                        "Tags For: Adorning Ritual: Jewish Ceremonial Art"], ["Members Only"]),
    ("wcxb-dev-0424", ["Instructor: Sitan Chen (sitan@seas.harvard.edu)",
                       "Graduate textbook on robust statistics: [Diakonikolas-Kane '22]",
                       "Surveys on community detection: [Moore '17]"], []),
    ("wcxb-dev-0504", ["Should we also assume that someone is using an older edition",
                       "Bumping MSRV has never been broadly considered as a semver breaking",
                       "There are some projects who treat it as such, but they are the minority."],
     ["Related topics", "Testing MSRV in a mixed edition workspace"]),
    ("wcxb-test-5687", ["AccountEdge is powerful, easy-to-use desktop accounting software.",
                        "AccountEdge Network Edition is desktop accounting software",
                        "if you have remaining checks or forms you can customize them"],
     ["Save 20% For 6 Months With Code WELCOME20", "Contact Support", "Find an Expert"]),
    ("moz-clean-links", ["I heard a low scrape of his chair legs on the unscraped floor",
                         "At the expiration of that period, I peeped behind the screen",
                         '"Lives without dining," said I, and closed the eyes.'],
     ["Text Without Notes", "Melville Web Links"]),
])
def test_real_pages_of_other_genres(name, present, absent):
    """Several regions (sections, posts, a novel's dialogue), a listing's items, posts
    only in <noscript>: real pages (tests/crawler/pages/genres/README.md)."""
    text = extract_main_text(spider_tree(genre_page(name)))
    for sentence in present:
        assert sentence in text, sentence
    for noise in absent:
        assert noise not in text, noise
