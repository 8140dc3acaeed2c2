"""A rule's ``render`` on real Chromium (crawler/render.py): a site whose list and
articles are written by scripts from JSON. ``never`` finds none of the scripted
articles; ``always`` finds every one, with the items plain pages give, each page fetched
once (its scripts' requests too) and no image loaded."""

import json

import pytest

from manager.local.crawl import Crawl, submit
from manager.local.services import StaticSite, free_port
from manager.local.sitelog import check_fetched_once, fetch_summary, page_fetches
from master.urls import canonical_url

ARTICLES = 6
IMAGE = '<img src="/img/logo.png">'   # a browser would load it: it must not
RULE = {"rules": [{"allow": "/(static|app)/article-", "fields": {"title": "//h1/text()"}},
                  {"allow": "/app/list", "follow": True}]}


def write_site(www):
    (www / "app").mkdir(parents=True)
    (www / "static").mkdir()
    (www / "img").mkdir()
    (www / "img" / "logo.png").write_bytes(b"\x89PNG\r\n")
    (www / "index.html").write_text(
        f'<html><body>{IMAGE}<a href="/static/article-1.html">plain</a>'
        '<a href="/app/list.html">news</a></body></html>')
    (www / "static" / "article-1.html").write_text(
        "<html><body><h1>A plain article</h1></body></html>")
    # the list: its links written by a script from a JSON endpoint
    (www / "app" / "list.html").write_text(
        f'<html><body>{IMAGE}<ul id="list"></ul><script src="/app/list.js"></script>'
        "</body></html>")
    (www / "app" / "list.js").write_text(
        "fetch('/app/list.json').then(r => r.json()).then(items => {"
        " document.getElementById('list').innerHTML = items.map(i =>"
        " `<li><a href=\"${i.href}\">${i.title}</a></li>`).join(''); });")
    (www / "app" / "list.json").write_text(json.dumps(
        [{"href": f"/app/article-{n}.html", "title": f"Article {n}"}
         for n in range(1, ARTICLES + 1)]))
    # each article: its title written by an inline script from the article's JSON
    for n in range(1, ARTICLES + 1):
        (www / "app" / f"article-{n}.json").write_text(json.dumps({"title": f"Article {n}"}))
        (www / "app" / f"article-{n}.html").write_text(
            f'<html><body>{IMAGE}<h1 id="t"></h1><script>fetch("/app/article-{n}.json")'
            '.then(r => r.json()).then(a => { document.getElementById("t").textContent ='
            " a.title; });</script></body></html>")


@pytest.fixture
def scripted_site(tmp_path):
    port = free_port(["127.0.0.1"])
    write_site(tmp_path / "www" / "127.0.0.1")
    with StaticSite(tmp_path / "www", ["127.0.0.1"], port, tmp_path / "run") as site:
        yield f"http://127.0.0.1:{port}/", site


def crawl(test_settings, mongo_db, tmp_path, start, render):
    crawlid = f"render-{render}"
    submit(test_settings, {"crawlid": crawlid, "spider_type": "universal", "url": start,
                           "rule": dict(RULE, render=render)})
    spiders = Crawl(test_settings, "universal", tmp_path / crawlid)
    try:
        assert spiders.workers[0].wait(180) == 0
    finally:
        spiders.stop()
    return {item["url"]: item["title"]
            for item in mongo_db["items_universal"].find({"crawlid": crawlid})}


@pytest.mark.parametrize("render", ["never", "always"])
def test_render_never_misses_scripted_articles_and_always_gets_them(
        test_settings, mongo_db, scripted_site, tmp_path, render):
    start, site = scripted_site
    (tmp_path / f"render-{render}").mkdir()
    items = crawl(test_settings, mongo_db, tmp_path, start, render)
    fetched = page_fetches(site.access_log(), site.port)
    print(f"\nrender {render}: {len(items)} items; nginx served {fetch_summary(fetched)}")
    plain = {start + "static/article-1.html": "A plain article"}
    scripted = {f"{start}app/article-{n}.html": f"Article {n}" for n in range(1, ARTICLES + 1)}
    pages = [start, *plain, start + "app/list.html"]
    if render == "never":
        assert items == plain
        check_fetched_once(fetched, pages)
        return
    assert items == {**plain, **scripted}
    # the pages, and what their scripts asked for, each once; the images never
    requested = [start + "app/list.js", start + "app/list.json", *scripted,
                 *(f"{start}app/article-{n}.json" for n in range(1, ARTICLES + 1))]
    check_fetched_once(fetched, pages + requested)
    assert canonical_url(start + "img/logo.png") not in fetched
