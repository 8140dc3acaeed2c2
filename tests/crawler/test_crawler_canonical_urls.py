"""One page, one URL on a real site: a page linked with tracking parameters and by a
page naming it canonical is fetched once and stored once."""

import pytest

from manager.local.crawl import run_crawl, submit
from manager.local.ports import free_port
from manager.local.staticsite import StaticSite

HOST = "127.0.0.1"
RULE = {"rules": [
    {"allow": [r"/$"], "follow": True},
    {"allow": [r"/[a-z]\.html"], "follow": False, "fields": {"title": "//h1/text()"}},
]}


def page(title: str, head: str = "") -> str:
    return f"<html><head>{head}</head><body><h1>{title}</h1></body></html>"


@pytest.fixture()
def aliased_site(tmp_path):
    """An index linking /a.html as ``?utm_source=x`` and ``?fbclid=y``, and /c.html,
    which names /a.html its canonical URL."""
    www = tmp_path / "www" / HOST
    www.mkdir(parents=True)
    (www / "index.html").write_text(
        "<html><body><a href='/a.html?utm_source=x'>a</a> <a href='/a.html?fbclid=y'>a</a>"
        " <a href='/c.html'>c</a></body></html>")
    (www / "a.html").write_text(page("A"))
    (www / "c.html").write_text(page("A", '<link rel="canonical" href="/a.html?gclid=z">'))
    port = free_port((HOST,))
    with StaticSite(tmp_path / "www", (HOST,), port, tmp_path / "run") as served:
        yield served, f"http://{HOST}:{port}"


def test_a_page_under_tracking_parameters_and_a_canonical_alias_is_fetched_and_stored_once(
        test_settings, mongo_db, aliased_site, tmp_path):
    served, base = aliased_site
    submit(test_settings, {"crawlid": "canon", "spider_type": "universal",
                           "url": f"{base}/", "rule": RULE, "maxdepth": 2})
    assert run_crawl(test_settings, "universal", tmp_path, timeout=200) == [0]

    fetched = [entry["path"] for entry in served.access_log()]
    assert [path for path in fetched if path.startswith("/a.html")] == ["/a.html"], fetched
    items = list(mongo_db["items_universal"].find({"crawlid": "canon"}))
    assert [item["url"] for item in items] == [f"{base}/a.html"], items


def test_a_canonical_url_learnt_from_an_alias_is_not_fetched(test_settings, mongo_db, tmp_path):
    """The alias comes first: it is stored under its canonical URL, which is then seen,
    so the alias's own link to it is not followed."""
    www = tmp_path / "www" / HOST
    www.mkdir(parents=True)
    (www / "index.html").write_text("<html><body><a href='/c.html'>c</a></body></html>")
    (www / "a.html").write_text(page("A"))
    (www / "c.html").write_text(page("A", '<link rel="canonical" href="/a.html">')
                                .replace("</h1>", "</h1><a href='/a.html?utm_source=q'>a</a>"))
    rule = {"rules": [RULE["rules"][0], {**RULE["rules"][1], "follow": True}]}
    port = free_port((HOST,))
    with StaticSite(tmp_path / "www", (HOST,), port, tmp_path / "run") as served:
        submit(test_settings, {"crawlid": "canon-first", "spider_type": "universal",
                               "url": f"http://{HOST}:{port}/", "rule": rule, "maxdepth": 3})
        assert run_crawl(test_settings, "universal", tmp_path, timeout=200) == [0]
        fetched = [entry["path"] for entry in served.access_log()]
    assert "/c.html" in fetched and not any(path.startswith("/a.html") for path in fetched)
    items = list(mongo_db["items_universal"].find({"crawlid": "canon-first"}))
    assert [item["url"] for item in items] == [f"http://{HOST}:{port}/a.html"]
