"""The preview of a page under a rule (crawler/preview/) on the test's real servers and
a generated site on nginx: every fate a link can have, both spider types, bad input, and
the preview's items equal to what a crawl of those pages stores."""

import base64
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from crawler.preview import PreviewError, preview
from crawler.preview.servers import PreviewServers
from manager.local.crawl import run_crawl, submit
from manager.local.demo import PRECISE_RULE, UNIVERSAL_RULE
from manager.local.sitelog import page_fetches
from settings.loader import environment_for
from tests.manager.test_manager_node import Manager

# The demo's rules, one taking the pages robots.txt forbids, one for a host's pages only.
PRIVATE_TOO_RULE = {"rules": [*UNIVERSAL_RULE["rules"], {"allow": [r"/private/"],
                                                         "follow": False}]}


@pytest.fixture
def servers(test_settings):
    made = PreviewServers(test_settings)
    yield made
    made.close()


def site_of(static_site, host_number=0):
    manifest, site = static_site
    host = manifest["spec"]["hosts"][host_number]
    return manifest, site, f"http://{host}:{manifest['spec']['port']}"


def universal(url, rule=UNIVERSAL_RULE, **more):
    return {"url": url, "spider_type": "universal", "rule": rule, **more}


def fates(result):
    """``{url: (fate, why)}``: why is the reason, the universal rule or the precise step."""
    return {link["url"]: (link["fate"], next((link[key] for key in ("reason", "rule", "step")
                                              if key in link), None))
            for link in result["links"]}


def test_a_universal_page_gives_its_fields_and_each_links_fate(servers, static_site):
    manifest, _, base = site_of(static_site)
    page = next(p for p in manifest["pages"] if p["kind"] == "detail"
                and p["url"].startswith(base) and p["encoding"] == "utf-8")
    rule = {"rules": [{"allow": [r"/news/\d+\.html$"], "allow_domains": [base[7:]],
                       "fields": {"title": "//h1/text()", "date": "//span[@class='date']/text()",
                                  "nothing": "//h6/text()"}, "follow": True}],
            "required": ["title"]}
    result = preview(universal(f"{base}/", rule), servers.cluster(), url=page["url"])
    [item] = result["items"]
    assert item["kept"] and item["item"]["title"] == page["title"]
    assert item["fields"]["date"] == {"value": page["date"]}
    assert item["fields"]["nothing"] == {"value": "", "missing": "matched nothing"}
    assert page["content"][0] in item["item"]["main_text"]
    got = fates(result)
    for link in page["links"]:
        if not link.startswith(base):
            expected = ("refused", "scope")
        elif re.search(r"/news/\d+\.html$", link):
            expected = ("follow", 0)
        else:
            expected = ("refused", "rule")       # the site's menus: not a news page
        assert got[link] in (expected, ("duplicate", 0)), link
    assert ("follow", 0) in got.values() and ("refused", "scope") in got.values()
    # the spider's own counts, as the crawl's ``info`` adds them up
    assert result["refused_counts"].get("scope", 0) == result["link_counts"]["refused"].get(
        "scope", 0)


def test_every_refusal_reason_a_page_can_give(servers, static_site, test_settings):
    _, _, base = site_of(static_site)
    cluster = servers.cluster()
    # robots.txt forbids /private/, which the rule takes; the rest of the rules' links
    index = fates(preview(universal(f"{base}/", PRIVATE_TOO_RULE), cluster))
    assert index[f"{base}/list/1.html"] == ("follow", 0)
    assert index[f"{base}/private/1.html"] == ("refused", "robots")
    assert fates(preview(universal(f"{base}/"), cluster))[f"{base}/private/1.html"] == (
        "refused", "rule")
    # too deep for the crawl's maxdepth
    deep = fates(preview(universal(f"{base}/", maxdepth=0), cluster))
    assert deep[f"{base}/list/1.html"] == ("refused", "depth")
    # a blacklisted host, as the cluster's site config says
    servers.site_config.blacklist_add(base[7:].split(":")[0])
    deadline = time.monotonic() + 10
    while not servers.site_config.is_blacklisted(base[7:].split(":")[0]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    html = f'<html><body><a href="{base}/list/2.html">a blacklisted host</a></body></html>'
    assert fates(preview(universal("http://elsewhere.test/"), cluster, html=html)) == {
        f"{base}/list/2.html": ("refused", "blacklist")}
    with pytest.raises(PreviewError, match="blacklisted"):
        preview(universal(f"{base}/"), cluster)      # and the page itself is not fetched
    # a scheme and a length no crawl fetches, from a precise list page given as HTML
    long = "http://elsewhere.test/" + "x" * 2100
    html = ("<ul class='news-list'><li><a href='ftp://elsewhere.test/f'>ftp</a></li>"
            f"<li><a href='{long}'>long</a></li></ul>")
    listed = fates(preview({"url": "http://elsewhere.test/", "spider_type": "precise",
                            "rule": PRECISE_RULE}, cluster, html=html))
    assert listed == {"ftp://elsewhere.test/f": ("refused", "scheme"),
                      long: ("refused", "url_length")}


def test_a_precise_rule_previews_its_list_and_detail_steps_and_a_running_crawls_seen_pages(
        servers, static_site, test_settings, mongo_db, tmp_path):
    manifest, site, base = site_of(static_site, 1)
    request = {"url": f"{base}/list/1.html", "spider_type": "precise", "rule": PRECISE_RULE}
    cluster = servers.cluster()
    since = len(site.access_log())
    listed = preview(request, cluster)
    details = [p for p in manifest["pages"] if p["kind"] == "detail"
               and p["url"].startswith(base)]
    followed = {link["url"]: link for link in listed["links"] if link["fate"] == "follow"}
    first_list = next(p for p in manifest["pages"] if p["url"] == f"{base}/list/1.html")
    listed_details = [url for url in first_list["links"] if "/news/" in url]
    assert [url for url in followed if "/news/" in url] == listed_details    # in page order
    assert {followed[url]["step"] for url in listed_details} == {"detail"}
    assert followed[f"{base}/list/2.html"]["step"] == "list"
    previews = {}
    for page in details[:3]:
        shown = preview(request, cluster, url=page["url"], step="detail")
        [item] = shown["items"]
        previews[page["url"]] = {**followed[page["url"]]["fields"], **item["item"]}
    # each previewed page fetched once per preview (robots.txt once for the host)
    fetches = page_fetches(site.access_log()[since:], site.port)
    assert {url: fetches[url] for url in previews} == dict.fromkeys(previews, 1)
    assert fetches[f"{base}/list/1.html"] == 1

    # the crawl stores what the previews showed; then its seen pages are marked
    submit(test_settings, {"crawlid": "shown", "userid": "u", **request})
    assert run_crawl(test_settings, "precise", tmp_path) == [0]
    stored = {item["url"]: item for item in mongo_db["items_precise"].find()}
    for url, shown in previews.items():
        for name in ("title", "date", "author", "content", "main_text", "url", "status"):
            assert stored[url][name] == shown[name], (url, name)
    again = preview(request, cluster, crawlid="shown")
    assert {link["fate"] for link in again["links"]} == {"seen"}


def test_bad_input_gets_an_answer_naming_the_field(servers, static_site):
    _, _, base = site_of(static_site)
    cluster = servers.cluster()
    with pytest.raises(PreviewError) as bad_rule:
        preview(universal(f"{base}/", {"rules": [{"allow": ["("]}]}), cluster)
    assert bad_rule.value.field.startswith("rule.rules[0].allow")
    with pytest.raises(PreviewError) as no_type:
        preview({"url": f"{base}/", "rule": UNIVERSAL_RULE}, cluster)
    assert no_type.value.field == "spider_type" or "spider_type" in no_type.value.reason
    with pytest.raises(PreviewError) as bad_step:
        preview(universal(f"{base}/"), cluster, step="detail")
    assert bad_step.value.field == "step"
    with pytest.raises(PreviewError, match="could not fetch") as unreachable:
        preview(universal("http://127.0.0.1:9/"), cluster)
    assert unreachable.value.field == "url"


def test_crawlcluster_try_prints_the_preview(static_site, test_settings, tmp_path):
    _, _, base = site_of(static_site, 2)
    (tmp_path / "crawl.json").write_text(json.dumps(universal(f"{base}/list/1.html")))
    env = environment_for(test_settings)
    run = subprocess.run([sys.executable, "-m", "manager.cli", "try", str(tmp_path / "crawl.json"),
                          "--json"], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    assert shown["link_counts"]["follow"] >= 1 and shown["status"] == 200
    readable = subprocess.run([sys.executable, "-m", "manager.cli", "try",
                               str(tmp_path / "crawl.json")], capture_output=True, text=True,
                              timeout=120, env=env, check=False)
    assert readable.returncode == 0 and "links:" in readable.stdout
    broken = subprocess.run([sys.executable, "-m", "manager.cli", "try", str(tmp_path / "no")],
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    assert broken.returncode == 2 and "cannot read" in broken.stderr


def post_json(port, endpoint, body, auth=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{endpoint}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(
            ":".join(auth).encode()).decode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_the_managers_preview_endpoint_behind_its_auth(test_settings, zookeeper, redis,
                                                        static_site, tmp_path):
    _, _, base = site_of(static_site, 3)
    manager = Manager(test_settings, tmp_path, CRAWLCLUSTER_MANAGER_USERNAME="ops",
                      CRAWLCLUSTER_MANAGER_PASSWORD="s3cret").start()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            post_json(manager.port, "preview.json", {"request": universal(f"{base}/")})
        assert refused.value.code == 401
        auth = ("ops", "s3cret")
        answer = post_json(manager.port, "preview.json",
                           {"request": universal(f"{base}/"), "url": f"{base}/list/1.html"},
                           auth)
        assert answer["status"] == "ok" and answer["preview"]["link_counts"]["follow"] >= 1
        bad = post_json(manager.port, "preview.json",
                        {"request": universal(f"{base}/", {"rules": "x"})}, auth)
        assert bad["status"] == "error" and bad["field"].startswith("rule")
        assert post_json(manager.port, "preview.json", {"url": 3}, auth)["field"] == "request"
    finally:
        manager.stop()


def test_previews_keep_within_the_sites_rate(servers, static_site):
    """Previews go through the cluster's throttle of the site: with 2 requests allowed a
    2 s window, five previews' requests (robots.txt once, then the pages) never put a
    third into any 2 s of nginx's log, and the crawl's User-Agent is what the site sees."""
    _, site, base = site_of(static_site, 3)
    host = base[7:].split(":")[0]
    servers.site_config.set_limit(host, 2, 2.0)
    deadline = time.monotonic() + 10
    while servers.site_config.limit(host) != (2, 2.0):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    since = len(site.access_log())
    request = universal(f"{base}/", useragent="preview-test-agent")
    for number in range(1, 6):
        preview(request, servers.cluster(), url=f"{base}/list/{number}.html")
    wanted = ["/robots.txt"] + [f"/list/{number}.html" for number in range(1, 6)]
    deadline = time.monotonic() + 5           # nginx writes a request's line once it is sent
    while True:
        served = [entry for entry in site.access_log()[since:] if entry["host"].startswith(host)]
        if len(served) >= len(wanted) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    times = [round(entry["time"] - served[0]["time"], 3) for entry in served]
    assert [entry["path"] for entry in served] == wanted, [(e["path"], e["time"]) for e in served]
    assert all(later - earlier >= 2.0 - 0.05 for earlier, later
               in zip(times, times[2:], strict=False)), times
    assert {entry["agent"] for entry in served} == {"preview-test-agent"}


@pytest.fixture(scope="module")
def scripted_site(tmp_path_factory):
    """The generated site with one host whose list and detail pages a script writes."""
    from manager.local.ports import free_port
    from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
    from manager.local.staticsite import StaticSite
    from tests.conftest import serve_or_fail

    root = tmp_path_factory.mktemp("scripted")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=6,
                    scripted_hosts=(DEFAULT_HOSTS[1],))
    manifest = generate_site(root, spec)
    site = serve_or_fail(StaticSite(root / "www", spec.hosts, spec.port, root / "run"))
    yield manifest, site, spec.base(DEFAULT_HOSTS[1])
    site.stop()


def test_what_rendering_changes_on_a_scripted_page(servers, scripted_site):
    """``render: auto`` on a list page a script writes (its menus are plain, so it does
    not look scripted: a crawl compares its kind's pages): rendered it gives the links
    the plain page lacks, its script's data fetched through the throttle; a page as
    complete as fetched gains nothing."""
    manifest, site, base = scripted_site
    request = universal(f"{base}/", {**UNIVERSAL_RULE, "render": "auto"})
    since = len(site.access_log())
    shown = preview(request, servers.cluster(), url=f"{base}/list/1.html", render=True)
    assert shown["render"]["mode"] == "auto" and shown["render"]["looks_scripted"] is False
    changes = shown["render"]["rendered"]
    listed = next(p for p in manifest["pages"] if p["url"] == f"{base}/list/1.html")
    assert changes["needs_rendering"] is True
    assert {url for url in listed["links"] if "/news/" in url} <= set(changes["links_added"])
    assert not [link for link in shown["links"] if "/news/" in link["url"]]   # as fetched
    paths = [entry["path"] for entry in site.access_log()[since:]]
    assert paths.count("/list/1.html") == 1 and paths.count("/list/1.json") == 1
    _, _, plain_base = site_of((manifest, site), 0)
    plain = preview(universal(f"{plain_base}/", {**UNIVERSAL_RULE, "render": "auto"}),
                    servers.cluster(), url=f"{plain_base}/list/1.html", render=True)
    assert plain["render"]["rendered"] == {"needs_rendering": False, "links_added": [],
                                           "fields_filled": [], "items": 0}


NOTICE = """<html lang="de"><head><title>Bekanntmachung</title>
<script type="application/ld+json">{"@type": "NewsArticle", "headline": "Neue Satzung",
"datePublished": "2026-11-03T09:30:00+01:00", "author": {"name": "Stadt"}}</script></head>
<body><h1>Neue Satzung</h1><p class="date">3. November 2026</p><p class="fee">1.299,00 €</p>
<p class="when">irgendwann</p><a class="pdf" href="/files/satzung.pdf">PDF</a></body></html>"""


def test_the_preview_shows_processed_values_their_failures_and_the_pages_meta(
        servers, tmp_path, test_settings):
    rule = {"rules": [{"allow": [r"/n/"], "follow": False, "fields": {
        "title": "//h1/text()", "date": {"css": "p.date::text", "as": "date"},
        "fee": {"css": "p.fee::text", "as": "price"},
        "file": {"css": "a.pdf", "attr": "href", "as": "url"},
        "when": {"css": "p.when::text", "as": "date"}}}]}
    request = universal("http://amt.example/", rule)
    result = preview(request, servers.cluster(), url="http://amt.example/n/1.html", html=NOTICE)
    [item] = result["items"]
    fields = item["fields"]
    assert fields["date"]["value"].startswith("2026-11-03")
    assert fields["fee"]["value"] == {"amount": 1299.0, "currency": "€"}
    assert fields["file"]["value"] == "http://amt.example/files/satzung.pdf"
    assert "as date" in fields["when"]["missing"]            # the processor names itself
    meta = item["item"]["meta"]
    assert (meta["published"], meta["author"], meta["sources"]["published"]) == (
        "2026-11-03T09:30:00+01:00", "Stadt", "json-ld")
    (tmp_path / "crawl.json").write_text(json.dumps(request))
    (tmp_path / "page.html").write_text(NOTICE)
    shown = subprocess.run([sys.executable, "-m", "manager.cli", "try",
                            str(tmp_path / "crawl.json"), "http://amt.example/n/1.html",
                            "--html", str(tmp_path / "page.html")],
                           capture_output=True, text=True, timeout=120,
                           env=environment_for(test_settings), check=False)
    assert shown.returncode == 0, shown.stderr
    assert '"amount": 1299.0' in shown.stdout and "meta.published" in shown.stdout
    assert "(json-ld)" in shown.stdout
