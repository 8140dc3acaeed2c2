"""The web UI in headless Chromium against a real local cluster: submit a crawl through
the form, start a spider, see it running, see pages per minute, stop it, download its items."""

import json
import re
import time
from pathlib import Path

import pytest

from manager.local.demo import UNIVERSAL_RULE
from manager.local.installs import require_program
from manager.local.sitelog import page_fetches
from master.keys import Keys
from master.pushback import PushbackStore
from master.schedules import Schedules
from tests.manager.test_manager_node import PROJECT, Manager
from tests.message_processing.test_message_processing_intake import Role

FAST = {"CRAWLCLUSTER_THROTTLE_HITS": 100000, "CRAWLCLUSTER_THROTTLE_WINDOW": 1.0,
        "CRAWLCLUSTER_DISPATCH_WINDOW": 1.0, "CRAWLCLUSTER_DISPATCH_HEADROOM": 100.0,
        "CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT": 600000}


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    executable = require_program("chromium", "chromium")    # Debian's; installed if missing
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.fixture
def cluster(test_settings, kafka_topics, zookeeper, redis, mongo_db, static_site, tmp_path):
    settings = test_settings.copy_with(**FAST)
    roles = [Role(name, settings, tmp_path / f"{name}.log")
             for name in ("preprocess", "monitor", "master")]
    manager = Manager(settings, tmp_path, node="ui-node").start()
    yield manager
    if manager.process.poll() is None:
        for job in manager.call("listjobs.json")["running"]:
            manager.call("cancel.json", "POST", project=PROJECT, job=job["id"])
    manager.stop()
    for role in roles:
        role.stop()


def test_submit_start_watch_and_stop_in_a_browser(cluster, browser, static_site, mongo_db,
                                                  redis, test_settings, tmp_path):
    manifest, _ = static_site
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(f"http://127.0.0.1:{cluster.port}/ui/#submit")
    page.wait_for_selector("#node-name:has-text('ui-node')")

    # Submit: a bad rule is caught inline, the fixed one is acknowledged through Kafka.
    page.fill("input[name=url]", manifest["start_url"])
    page.fill("input[name=crawlid]", "ui-crawl")
    page.fill("textarea[name=rule]", json.dumps({"rules": [{"allow": ["(unclosed"]}]}))
    page.wait_for_selector(".field-error[data-for=rule]:has-text('invalid regex')")
    page.fill("textarea[name=rule]", json.dumps(UNIVERSAL_RULE))
    page.wait_for_selector(".field-error[data-for=rule]:empty", state="attached")
    page.click("#crawl-form button[type=submit]")
    page.wait_for_selector("#submit-result.ok:has-text('Accepted crawl ui-crawl')", timeout=60000)
    # The same form repeats a crawl: a bad cron expression is caught inline, then scheduled.
    page.fill("input[name=crawlid]", "ui-news")
    page.fill("input[name=cron]", "0 25 * * *")
    page.wait_for_selector(".field-error[data-for=cron]:has-text('not a cron expression')")
    page.fill("input[name=cron]", "0 * * * *")
    page.wait_for_selector(".field-error[data-for=cron]:empty", state="attached")
    page.check("input[name=series]")
    page.click("#crawl-form button[type=submit]")
    page.wait_for_selector("#submit-result.ok:has-text('Scheduled ui-news: first run 20')",
                           timeout=60000)
    assert Schedules(redis, Keys.from_settings(test_settings)).get("ui-news")["series"]
    page.fill("input[name=cron]", "")
    page.uncheck("input[name=series]")
    page.screenshot(path=str(tmp_path / "submit.png"), full_page=True)

    # Spiders: start one on the node, see it running.
    page.click("nav a[data-page=spiders]")
    page.wait_for_selector("#start-form select[name=node] option[value=ui-node]", state="attached")
    page.wait_for_selector("#start-form select[name=node] option[value='*']", state="attached")
    page.wait_for_selector("#start-form select[name=project] option[value=crawlcluster]",
                           state="attached")        # "every node", every deployed project
    page.click("#start-form button[type=submit]")
    page.wait_for_selector("#start-result.ok:has-text('Scheduled job')")
    jobid = re.search(r"Scheduled job (\S+)", page.inner_text("#start-result")).group(1)
    page.wait_for_selector(f"#jobs tr[data-job='{jobid}'][data-state=running]", timeout=60000)
    page.screenshot(path=str(tmp_path / "spiders.png"), full_page=True)

    # Status: the node's pages per minute go above zero while it crawls.
    page.click("nav a[data-page=status]")
    page.wait_for_function("""() => [...document.querySelectorAll('#nodes tbody tr')]
        .some(row => row.children[0].textContent === 'ui-node'
                     && Number(row.children[2].textContent) > 0)""", timeout=90000)
    page.wait_for_selector("#crawls tbody tr td:has-text('ui-crawl')")
    page.wait_for_function("""() => [...document.querySelectorAll('#crawls tbody tr')]
        .some(row => row.children[0].textContent === 'ui-crawl'
                     && /^[1-9]\\d* found, [1-9]\\d* new/.test(row.children[5].textContent))""",
                           timeout=30000)   # the links the crawl's pages yielded
    page.wait_for_selector("#modules tbody tr td:has-text('manager')")
    page.wait_for_selector("#frontier tbody tr td:has-text('Bloom filter')")   # the figures
    # A site pushing back shows with its rate factor and its pause.
    PushbackStore.from_settings(redis, test_settings).report("slow.example", "429", 600.0, 1.0)
    page.wait_for_selector("#frontier tbody tr:has(td:text-is('pushback: slow.example'))"
                           ":has(td:has-text('rate x0.80, paused'))", timeout=30000)
    page.screenshot(path=str(tmp_path / "status.png"), full_page=True)

    # Spiders: pause the crawl and resume it; stop the spider, it shows as finished.
    page.click("nav a[data-page=spiders]")
    page.click("#crawl-control tr[data-crawl=ui-crawl] button.pause")
    page.wait_for_selector("#crawl-control tr[data-crawl=ui-crawl][data-state=paused]")
    page.click("#crawl-control tr[data-crawl=ui-crawl] button.resume")
    page.wait_for_selector("#crawl-control tr[data-crawl=ui-crawl][data-state=running]")
    page.click(f"#jobs tr[data-job='{jobid}'] button.stop")
    page.wait_for_selector(f"#jobs tr[data-job='{jobid}'][data-state=finished]", timeout=60000)

    # The crawl's items: its row's JSONL link downloads what MongoDB holds.
    with page.expect_download() as download:
        page.click("#crawl-control tr[data-crawl=ui-crawl] a.export-jsonl")
    assert download.value.suggested_filename == "ui-crawl.jsonl"
    lines = Path(download.value.path()).read_text(encoding="utf-8").splitlines()
    items = mongo_db["items_universal"].find({"crawlid": "ui-crawl"})
    stored = {str(item["_id"]) for item in items}
    assert stored and {json.loads(line)["id"] for line in lines} == stored

    # A narrow window keeps every page usable.
    page.set_viewport_size({"width": 380, "height": 800})
    for name in ("submit", "spiders", "status"):
        page.click(f"nav a[data-page={name}]")
        # the page switches on the hash change, after the click returns
        page.wait_for_selector(f"#page-{name}", state="visible", timeout=5000)
    for name in ("submit", "spiders", "status"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


def test_rule_builder_preview_pick_two_fields_and_submit_in_a_browser(
        cluster, browser, static_site, mongo_db, tmp_path):
    """Build a rule on the Rules page: preview a news page, click its title and its date
    to make two fields, see both on three pages of the kind, submit; the crawl stores
    what the previews showed, and each preview fetched its page once."""
    manifest, site = static_site
    base = manifest["start_url"].rstrip("/")
    article = f"{base}/news/2.html"
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(f"http://127.0.0.1:{cluster.port}/ui/#rules")
    page.wait_for_selector("#node-name:has-text('ui-node')")
    page.fill("#rule-form input[name=url]", manifest["start_url"])
    page.fill("textarea[name=rule_json]", json.dumps({"rules": [
        {"allow": [r"/$", r"/list/\d+\.html$"], "follow": True},
        {"allow": [r"/news/\d+\.html$"], "follow": True}]}))   # its related articles too
    page.wait_for_selector(".link-rule[data-index='1']")          # the form follows the JSON
    since = len(site.access_log())
    page.fill("input[name=preview_url]", article)
    page.click("#preview-button")
    page.wait_for_selector("#preview-result.ok:has-text('200')", timeout=30000)

    for name, element in (("title", "h1"), ("date", "span.date")):
        page.click("#pick-button")
        page.frame_locator("#page-frame").locator(element).first.click()
        page.wait_for_selector("#pick-panel:not([hidden])")
        assert "selects 1 on this page" in page.inner_text("#pick-selects")
        page.fill("input[name=pick_name]", name)
        page.click("#add-picked")
        page.wait_for_function(f"""() => {{
            const cells = [...document.querySelectorAll('#more-pages td[data-field={name}]')];
            return cells.length === 3 && cells.every(td => td.textContent && !td.className);
        }}""", timeout=60000)
    rule = json.loads(page.input_value("textarea[name=rule_json]"))
    assert set(rule["rules"][1]["fields"]) == {"title", "date"}
    shown = page.eval_on_selector_all("#more-pages tbody tr", """rows => rows.map(row => ({
        url: row.dataset.url,
        title: row.querySelector('td[data-field=title]').textContent,
        date: row.querySelector('td[data-field=date]').textContent}))""")
    assert len(shown) == 3 and shown[0]["url"] == article
    expected = {p["url"]: p for p in manifest["pages"]}
    for row in shown:
        assert (row["title"], row["date"]) == (expected[row["url"]]["title"],
                                               expected[row["url"]]["date"])
    # each preview fetched its page once: three previews of each (first look, two fields)
    fetches = page_fetches(site.access_log()[since:], site.port)
    assert {row["url"]: fetches[row["url"]] for row in shown} == {row["url"]: 3 for row in shown}
    page.screenshot(path=str(tmp_path / "rules.png"), full_page=True)

    page.fill("#rule-form input[name=crawlid]", "ui-rules")
    page.fill("#rule-form input[name=maxdepth]", "20")
    page.click("#submit-rule")
    page.wait_for_selector("#rule-submit-result.ok:has-text('Accepted crawl ui-rules')",
                           timeout=60000)
    cluster.call("schedule.json", "POST", project="crawlcluster", spider="universal",
                 setting=["CRAWLCLUSTER_IDLE_TIMEOUT=5"])
    deadline = time.monotonic() + 120
    stored = {}
    while len(stored) < len(shown) and time.monotonic() < deadline:
        time.sleep(1)
        stored = {item["url"]: item for item in mongo_db["items_universal"].find(
            {"crawlid": "ui-rules", "url": {"$in": [row["url"] for row in shown]}})}
    for row in shown:
        assert (stored[row["url"]]["title"], stored[row["url"]]["date"]) == (
            row["title"], row["date"])


def test_rule_builder_offers_processors_and_the_preview_shows_a_date_processors_iso_date(
        cluster, browser, static_site):
    """A field reading a news page's date line (its date and its author) shows that line;
    with the builder's ``as date`` processor chosen, the rule's JSON gains ``"as": "date"``
    and the preview shows the ISO date alone."""
    manifest, _ = static_site
    base = manifest["start_url"].rstrip("/")
    article = f"{base}/news/2.html"
    expected = next(p for p in manifest["pages"] if p["url"] == article)
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(f"http://127.0.0.1:{cluster.port}/ui/#rules")
    page.wait_for_selector("#node-name:has-text('ui-node')")
    page.fill("#rule-form input[name=url]", manifest["start_url"])
    page.fill("textarea[name=rule_json]", json.dumps({"rules": [
        {"allow": [r"/$"], "follow": True},
        {"allow": [r"/news/\d+\.html$"], "follow": False,
         "fields": {"date": "//div[@class='meta']//text()"}}]}))
    page.wait_for_selector(".link-rule[data-index='1'] .field-row .field-as")
    page.fill("input[name=preview_url]", article)
    date_cell = "#preview-fields tr[data-field=date] td:nth-child(2)"
    page.click("#preview-button")
    page.wait_for_selector("#preview-result.ok:has-text('200')", timeout=30000)
    assert expected["author"] in page.inner_text(date_cell)          # the raw line

    page.select_option(".link-rule[data-index='1'] .field-row .field-as", "date")
    rule = json.loads(page.input_value("textarea[name=rule_json]"))
    assert rule["rules"][1]["fields"]["date"] == {"xpath": "//div[@class='meta']//text()",
                                                  "as": "date"}
    page.click("#preview-button")
    page.wait_for_function(f"""() => {{
        const cell = document.querySelector("{date_cell}");
        return cell && cell.textContent === "{expected['date']}";
    }}""", timeout=30000)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", page.inner_text(date_cell))
