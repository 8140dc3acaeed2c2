"""A crawl's health per site, end to end: a crawl over a generated site where one site's
layout changes halfway (its title stops matching) shows that site and field's coverage
falling in ``crawlcluster sites`` and on the web UI's Sites page, in headless Chromium."""

import json

import pytest

from manager.local.crawl import run_crawl, submit
from manager.local.demo import UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import StaticSite
from master.keys import Keys
from master.sitehealth import read_site_health
from tests.manager.test_manager_node import Manager
from tests.manager.test_manager_ui import browser  # noqa: F401 - the fixture
from tests.message_processing.test_message_processing_intake import Role, run_cli

BROKEN = "127.0.0.2"       # the host whose later detail pages lose their <h1> title
DETAILS = 20


def break_titles(root, spec):
    """The second half of the broken host's detail pages: the title is an <h2> now."""
    for number in range(DETAILS // 2 + 1, DETAILS + 1):
        path = root / "www" / BROKEN / "news" / f"{number}.html"
        html = path.read_text(encoding="utf-8")
        assert '<h1 class="title">' in html
        path.write_text(html.replace('<h1 class="title">', '<h2 class="title">')
                        .replace("</h1>", "</h2>"), encoding="utf-8")


@pytest.fixture
def crawled(test_settings, kafka_topics, zookeeper, redis, mongo_db, tmp_path):
    """The crawl ``sites-1`` run to its end over the generated site, one host broken."""
    root = tmp_path / "site"
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=DETAILS)
    manifest = generate_site(root, spec)
    break_titles(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run"):
        submit(test_settings, {"crawlid": "sites-1", "spider_type": "universal",
                               "url": manifest["start_url"], "rule": UNIVERSAL_RULE})
        assert run_crawl(test_settings, "universal", tmp_path) == [0]
    return spec


def test_a_site_whose_title_stops_matching_shows_in_sites_cli_and_ui(
        crawled, test_settings, redis, browser, tmp_path):  # noqa: F811 - the fixture
    keys = Keys.from_settings(test_settings)
    sites = read_site_health(redis, keys, "sites-1")
    hosts = set(crawled.hosts)
    assert set(sites) == hosts
    broken = sites[BROKEN]
    assert broken.coverage["title"] == 0.5 and broken.coverage["date"] == 1.0
    assert broken.dropped_by_field == {"title": DETAILS // 2}
    assert broken.problems() == ["title coverage 50%"]
    for host in hosts - {BROKEN}:
        assert sites[host].coverage == {"title": 1.0, "date": 1.0}, host
        assert sites[host].problems() == [] and sites[host].statuses.get("200")

    roles = [Role(name, test_settings, tmp_path / f"{name}.log")
             for name in ("preprocess", "monitor")]
    manager = Manager(test_settings, tmp_path, node="sites-node").start()
    try:
        table = run_cli(test_settings, "sites", "--crawlid", "sites-1", timeout=120)
        assert table.returncode == 0, table
        line = next(row for row in table.stdout.splitlines() if BROKEN in row)
        assert line.startswith("!") and "title coverage 50%" in line, table.stdout
        raw = json.loads(run_cli(test_settings, "sites", "--crawlid", "sites-1",
                                 "--json").stdout)
        by_site = {site["site"]: site for site in raw}
        assert by_site[BROKEN]["coverage"] == {"title": 0.5, "date": 1.0}
        assert by_site[BROKEN]["dropped_by_field"] == {"title": DETAILS // 2}

        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(f"http://127.0.0.1:{manager.port}/ui/?crawlid=sites-1#sites")
        row = f"#sites tbody tr[data-site='{BROKEN}']"
        page.wait_for_selector(f"{row}.unwell td.bad[data-column='coverage:title']"
                               ":text-is('50%')", timeout=30000)
        assert page.locator("#sites tbody tr.unwell").count() == 1     # the broken one only
        page.click("#sites th[data-column='coverage:title']")       # sort by its coverage
        page.wait_for_selector("#sites th[data-column='coverage:title']:has-text('▲')")
        first = page.locator("#sites tbody tr").first
        assert first.get_attribute("data-site") == BROKEN
        page.screenshot(path=str(tmp_path / "sites.png"), full_page=True)
    finally:
        manager.stop()
        for role in roles:
            role.stop()
