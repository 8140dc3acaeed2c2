"""Main-text extraction (line-block distribution) on news-like pages."""

import re
from pathlib import Path

import pytest

from crawler.maintext import extract_main_text, page_lines
from crawler.sitegen import SiteSpec, generate_site

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
        from_tree = MainTextPipeline().process_item({"_body": Selector(text=source).root})
    from_html = MainTextPipeline().process_item({"_body": source})
    assert from_tree == from_html == {"main_text": expected}
    assert MainTextPipeline().process_item({"_body": ""}) == {"main_text": ""}
    assert MainTextPipeline().process_item({"title": "no page"}) == {"title": "no page"}
