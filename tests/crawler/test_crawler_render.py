"""A rule's ``render`` on real Chromium (crawler/render/): a site whose list and
articles are written by scripts from JSON. ``never`` finds none of the scripted
articles; ``always`` finds every one, with the items plain pages give, each page fetched
once (its scripts' requests too) and no image loaded; a browser SIGKILLed mid-crawl
costs the pages it held one more fetch, and nothing is lost."""

import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from crawler.render.browser import MEMORY_EVERY, browser_memory_mb, browser_processes
from crawler.render.policy import SAMPLE
from manager.local.blogsite import BLOG_RULE, BlogSpec, generate_blog_site
from manager.local.crawl import Crawl, submit
from manager.local.installs import require_program
from manager.local.ports import free_port
from manager.local.sitelog import check_fetched_once, fetch_summary, page_fetches
from manager.local.staticsite import StaticSite
from master.crawls import CrawlStore
from master.keys import Keys
from master.siteconfig import SiteConfig
from master.urls import canonical_url

ARTICLES = 6
IMAGE = '<img src="/img/logo.png">'   # a browser would load it: it must not
RULE = {"rules": [{"allow": "/(static|app)/article-", "fields": {"title": "//h1/text()"}},
                  {"allow": "/(app|static)/list", "follow": True}]}


def write_site(www, articles=ARTICLES, plain_articles=1):
    (www / "app").mkdir(parents=True)
    (www / "static").mkdir()
    (www / "img").mkdir()
    (www / "img" / "logo.png").write_bytes(b"\x89PNG\r\n")
    (www / "index.html").write_text(
        f'<html><body>{IMAGE}<a href="/static/article-1.html">plain</a>'
        '<a href="/static/list.html">notices</a><a href="/app/list.html">news</a></body></html>')
    (www / "static" / "list.html").write_text("<html><body>" + "".join(
        f'<a href="/static/article-{n}.html">{n}</a>' for n in range(1, plain_articles + 1))
        + "</body></html>")
    for n in range(1, plain_articles + 1):
        title = "A plain article" if n == 1 else f"Plain article {n}"
        (www / "static" / f"article-{n}.html").write_text(
            f"<html><body><h1>{title}</h1></body></html>")
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
         for n in range(1, articles + 1)]))
    # each article: its title written by an inline script from the article's JSON
    for n in range(1, articles + 1):
        (www / "app" / f"article-{n}.json").write_text(json.dumps({"title": f"Article {n}"}))
        (www / "app" / f"article-{n}.html").write_text(
            f'<html><body>{IMAGE}<h1 id="t"></h1><script>fetch("/app/article-{n}.json")'
            '.then(r => r.json()).then(a => { document.getElementById("t").textContent ='
            " a.title; });</script></body></html>")


def served(tmp_path, port):
    """nginx serving ``tmp_path/www/127.0.0.1`` compressed, as most sites serve pages (the
    browser must be given a page decompressed)."""
    return StaticSite(tmp_path / "www", ["127.0.0.1"], port, tmp_path / "run", compress=True)


@pytest.fixture(autouse=True, scope="module")
def browser():
    """Debian's headless Chromium, installed the way the servers are if missing."""
    return require_program("chromium-headless-shell", "chromium-headless-shell")


@pytest.fixture
def scripted_site(tmp_path):
    port = free_port(["127.0.0.1"])
    write_site(tmp_path / "www" / "127.0.0.1")
    with served(tmp_path, port) as site:
        yield f"http://127.0.0.1:{port}/", site


def crawl(test_settings, mongo_db, tmp_path, start, render, during=None, rule=None,
          crawlid=None, **extra):
    crawlid = crawlid or f"render-{render}"
    (tmp_path / crawlid).mkdir(exist_ok=True)
    submit(test_settings, {"crawlid": crawlid, "spider_type": "universal", "url": start,
                           "rule": dict(rule or RULE, render=render)})
    # a browser starting on a loaded machine can take seconds: not an idle spider's cue
    spiders = Crawl(test_settings, "universal", tmp_path / crawlid,
                    CRAWLCLUSTER_IDLE_TIMEOUT="10", **extra)
    try:
        if during:
            during(spiders.workers[0].pid)
        assert spiders.workers[0].wait(180) == 0
    finally:
        spiders.stop()
    return {item["url"]: item["title"]
            for item in mongo_db["items_universal"].find({"crawlid": crawlid})}


@pytest.mark.parametrize("render", ["never", "always"])
def test_render_never_misses_scripted_articles_and_always_gets_them(
        test_settings, mongo_db, redis, scripted_site, tmp_path, render):
    start, site = scripted_site
    items = crawl(test_settings, mongo_db, tmp_path, start, render)
    fetched = page_fetches(site.access_log(), site.port)
    print(f"\nrender {render}: {len(items)} items; nginx served {fetch_summary(fetched)}")
    plain = {start + "static/article-1.html": "A plain article"}
    scripted = {f"{start}app/article-{n}.html": f"Article {n}" for n in range(1, ARTICLES + 1)}
    pages = [start, *plain, start + "app/list.html", start + "static/list.html"]
    counts = CrawlStore(redis, Keys.from_settings(test_settings)).progress(
        f"render-{render}")["render"]                    # what info says
    if render == "never":
        assert items == plain
        check_fetched_once(fetched, pages)
        assert counts["looks_scripted"] == 1 and counts["rendered"] == 0   # the app's list
        return
    assert counts["rendered"] == len(pages) + len(scripted) and not counts["looks_scripted"]
    assert items == {**plain, **scripted}
    # the pages, and what their scripts asked for, each once; the images never
    requested = [start + "app/list.js", start + "app/list.json", *scripted,
                 *(f"{start}app/article-{n}.json" for n in range(1, ARTICLES + 1))]
    check_fetched_once(fetched, pages + requested)
    assert canonical_url(start + "img/logo.png") not in fetched


def test_render_a_browser_killed_mid_crawl_costs_one_retry(test_settings, mongo_db, tmp_path):
    articles = 40
    port = free_port(["127.0.0.1"])
    write_site(tmp_path / "www" / "127.0.0.1", articles)
    start = f"http://127.0.0.1:{port}/"
    killed = []
    with served(tmp_path, port) as site:

        def kill_the_browser_mid_crawl(spider_pid):
            deadline = time.monotonic() + 120
            while sum("/app/article-" in entry["path"] and entry["path"].endswith(".json")
                      for entry in site.access_log()) < articles // 4:
                assert time.monotonic() < deadline, "the crawl did not get going"
                assert Path(f"/proc/{spider_pid}").exists(), "the spider ended early"
                time.sleep(0.05)
            for child in browser_processes(spider_pid):
                os.kill(child, signal.SIGKILL)
                killed.append(child)

        items = crawl(test_settings, mongo_db, tmp_path, start, "always",
                      during=kill_the_browser_mid_crawl)
        fetched = page_fetches(site.access_log(), site.port)
    twice = Counter({url: count for url, count in fetched.items() if count > 1})
    print(f"\nrender always, browser ({len(killed)} processes) SIGKILLed mid-crawl: "
          f"{len(items)} items; nginx served {fetch_summary(fetched)}; fetched twice: "
          f"{sorted(twice)}")
    assert killed
    assert len(items) == articles + 1                 # every scripted article, and the plain one
    assert max(fetched.values()) <= 2
    # the pages rendering when it died (CRAWLCLUSTER_RENDER_PAGES), each with its JSON
    pages_again = [url for url in twice if url.endswith(".html")]
    assert len(pages_again) <= test_settings.getint("CRAWLCLUSTER_RENDER_PAGES"), pages_again


def test_render_auto_gets_what_always_gets_rendering_only_the_scripted_patterns(
        test_settings, mongo_db, redis, tmp_path):
    """``auto``: the items of ``always``; the plain articles' pattern learnt as not needing
    rendering (past its sample, its pages fetched as plain pages), the scripted ones' as
    needing it; each page fetched once; what was learnt is in Redis for every node."""
    articles, plain_articles = 12, 30
    port = free_port(["127.0.0.1"])
    write_site(tmp_path / "www" / "127.0.0.1", articles, plain_articles)
    start = f"http://127.0.0.1:{port}/"
    with served(tmp_path, port) as site:
        items = crawl(test_settings, mongo_db, tmp_path, start, "auto")
        fetched = page_fetches(site.access_log(), site.port)
    learnt = {field: int(count) for field, count in redis.hgetall(
        Keys.from_settings(test_settings).crawl_render("render-auto")).items()}
    print(f"\nrender auto: {len(items)} items; nginx served {fetch_summary(fetched)}; "
          f"learnt {learnt}")
    assert len(items) == articles + plain_articles
    assert {url for url, title in items.items() if "/app/" in url and title} == {
        f"{start}app/article-{n}.html" for n in range(1, articles + 1)}
    plain_pattern = "127.0.0.1/static/article-{n}.html"
    app_pattern = "127.0.0.1/app/article-{n}.html"
    assert learnt[f"{plain_pattern} needed"] == 0
    assert learnt[f"{app_pattern} needed"] == learnt[f"{app_pattern} compared"] >= SAMPLE
    # each page once, a compared one too (the browser is given the fetched page), and
    # what the scripted pages' scripts ask for; no image
    pages = [start, start + "static/list.html", start + "app/list.html",
             *(f"{start}static/article-{n}.html" for n in range(1, plain_articles + 1)),
             *(f"{start}app/article-{n}.html" for n in range(1, articles + 1))]
    requested = [start + "app/list.js", start + "app/list.json",
                 *(f"{start}app/article-{n}.json" for n in range(1, articles + 1))]
    check_fetched_once(fetched, pages + requested)
    # rendered: the compared pages and the scripted articles, not the plain ones
    compared = sum(count for field, count in learnt.items() if field.endswith(" compared"))
    assert learnt[f"{plain_pattern} compared"] <= SAMPLE + 3
    uncompared_articles = articles - learnt[f"{app_pattern} compared"]
    assert articles <= learnt["~rendered"] <= compared + uncompared_articles


def test_render_auto_on_a_site_with_words_in_its_urls_renders_its_scripted_section_only(
        test_settings, mongo_db, redis, tmp_path):
    """A magazine whose URLs carry slugs, authors and tags (manager/local/blogsite.py):
    ``auto`` learns one template per kind of page, renders the scripted live section and
    a small sample of each other template, gets every article, fetches each page once,
    each shared script once, and no stylesheet or font."""
    port = free_port(["127.0.0.1"])
    manifest = generate_blog_site(tmp_path, BlogSpec(port=port, articles=60, live_articles=30,
                                                     authors=6, tags=10))
    crawlid = "render-auto-blog"
    with StaticSite(tmp_path / "www", ["127.0.0.1"], port, tmp_path / "run",
                    compress=True) as site:
        items = crawl(test_settings, mongo_db, tmp_path, manifest["start_url"], "auto",
                      rule=BLOG_RULE, crawlid=crawlid)
        fetched = page_fetches(site.access_log(), site.port)
    learnt = {field: int(count) for field, count in redis.hgetall(
        Keys.from_settings(test_settings).crawl_render(crawlid)).items()
        if not field.startswith("~var ")}
    templates = {field.removesuffix(" compared"): (count, learnt[
        field.removesuffix(" compared") + " needed"])
        for field, count in learnt.items() if field.endswith(" compared")}
    needed = sum(page["needs_browser"] for page in manifest["pages"])
    print(f"\nrender auto, words in URLs: {len(items)} items; {learnt['~rendered']} rendered "
          f"for {needed} that need it; templates {templates}; nginx served "
          f"{fetch_summary(fetched)}")
    articles = {p["url"]: p["title"] for p in manifest["pages"] if "title" in p}
    assert items == articles
    pages = [p["url"] for p in manifest["pages"]]
    assets = {canonical_url(url): fetched[canonical_url(url)] for url in manifest["assets"]}
    check_fetched_once(Counter({url: n for url, n in fetched.items() if url not in assets}),
                       pages + manifest["script_data"])
    scripts = [url for url in assets if url.endswith(".js")]
    assert [assets[url] for url in scripts] == [1, 1], assets     # each script once
    assert sum(assets.values()) == 2, assets                      # no stylesheet
    assert not any("/fonts/" in url for url in fetched)
    # a template per kind of page (10), whatever words its URLs carry, and a few a page
    # had before its siblings showed what varies
    assert len(templates) <= 10 + 3, sorted(templates)
    plain = {name: counts for name, counts in templates.items() if not counts[1]}
    # the sample, then random re-checks (one page in RECHECK * agreed² / SAMPLE²): over
    # the 60 articles of one template, 3 or more re-checks come about one run in 60, 5
    # or more about one in 50,000 (the policy simulated)
    assert all(compared <= SAMPLE + 4 for compared, _ in plain.values()), plain
    scripted = {name for name, (_, need) in templates.items() if need}
    assert all("/live/" in name for name in scripted), scripted
    # rendered: the pages that need it, and the samples of the others
    assert needed <= learnt["~rendered"] <= needed + sum(c for c, _ in plain.values())


def test_render_a_browsers_own_requests_keep_within_the_sites_rate(
        test_settings, mongo_db, zookeeper, scripted_site, tmp_path):
    """The cluster throttle counts what a page's scripts fetch: 4 requests a second to
    the site, pages and their scripts' requests together, never more. A rule that asks
    for images (``render_load``) has them loaded, through the throttle too."""
    start, site = scripted_site
    SiteConfig.from_settings(test_settings, zookeeper).set_limit("127.0.0.1", hits=4, window=1)
    items = crawl(test_settings, mongo_db, tmp_path, start, "always",
                  rule=dict(RULE, render_load=["image"]))
    assert len(items) == ARTICLES + 1
    entries = [e for e in site.access_log() if not e["path"].endswith("robots.txt")]
    times = sorted(e["time"] for e in entries)
    densest = max(sum(1 for t in times[i:i + 6] if t - first < 1.0)
                  for i, first in enumerate(times))
    print(f"\n{len(times)} requests in {times[-1] - times[0]:.1f} s, at most {densest} "
          "in a second")
    images = [e for e in entries if e["path"].endswith("logo.png")]
    # the index's, the app list's, each article's: loaded, from the process's cache while
    # fresh (a tenth of its age: the image was written a moment ago), else revalidated
    assert 1 <= len(images) <= 2 + ARTICLES
    assert len(times) == 4 + 2 + 2 * ARTICLES + len(images)   # pages, list.js/.json, JSON
    # never more than 4 in any second (one more: nginx logs a request once served, a
    # moment after the throttle let it go)
    assert densest <= 4 + 1
    assert times[-1] - times[0] >= len(times) / 4 - 2


def browsers_and_renderers(spider_pid):
    """``(browsers, renderers)`` running below the spider: Chromium's main processes (no
    ``--type``, started by Debian's shell script: a child the main one forked a moment
    ago still carries its command line) and page renderers."""
    found = {}
    for child in browser_processes(spider_pid):
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            found[child] = (fields[0], int(fields[1]), Path(f"/proc/{child}/cmdline").read_bytes())
        except OSError:                              # it ended meanwhile
            continue
    scripts = {pid for pid, (_, _, command) in found.items() if command.startswith(b"/bin/sh")}
    live = [(parent, command) for state, parent, command in found.values()
            if state != "Z" and not command.startswith(b"/bin/sh")]
    browsers = sum(b"--type=" not in command and parent not in found.keys() - scripts
                   for parent, command in live)
    renderers = sum(b"--type=renderer" in command for _, command in live)
    return browsers, renderers


def test_render_a_browser_stays_within_its_budget_over_a_long_crawl(
        test_settings, mongo_db, tmp_path):
    """The browser budget over hundreds of rendered pages: one browser at a time (one
    past ``CRAWLCLUSTER_BROWSER_MAX_MB`` is replaced once its pages are done, never
    beside a new one), ``CRAWLCLUSTER_RENDER_PAGES`` pages at once, the memory bound
    acted on (measured every ``MEMORY_EVERY`` pages), no page lost or fetched twice.
    A fresh browser rendering 4 pages holds ~150-270 MB here and does not grow much
    over 200 pages, so the bound is set below it: it is reached every few pages."""
    articles, bound = 200, 150
    port = free_port(["127.0.0.1"])
    write_site(tmp_path / "www" / "127.0.0.1", articles)
    start = f"http://127.0.0.1:{port}/"
    held, running = [], []

    def measure_the_browser_until_done(spider_pid):
        stat = Path(f"/proc/{spider_pid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":   # until it exits
            held.append(browser_memory_mb(spider_pid))
            running.append(browsers_and_renderers(spider_pid))
            time.sleep(0.2)

    with served(tmp_path, port) as site:
        items = crawl(test_settings, mongo_db, tmp_path, start, "always",
                      during=measure_the_browser_until_done,
                      CRAWLCLUSTER_BROWSER_MAX_MB=str(bound),
                      CRAWLCLUSTER_BROWSER_RESTART_PAGES="100000")
        fetched = page_fetches(site.access_log(), site.port)
    stats = (tmp_path / "render-always" / "spider0.log").read_text()
    browsers = int(re.search(r"'crawlcluster/render/browsers': (\d+)", stats).group(1))
    most_browsers = max(roots for roots, _ in running)
    most_renderers = max(renderers for _, renderers in running)
    print(f"\nrender always, {len(items)} items, browser memory bound {bound} MB: at most "
          f"{max(held):.0f} MB held, {browsers} browsers over the crawl, at most "
          f"{most_browsers} at once rendering {most_renderers} pages")
    assert len(items) == articles + 1
    assert max(fetched.values()) == 1, fetch_summary(fetched)
    assert browsers >= 3, f"the bound was not acted on ({MEMORY_EVERY} pages a measure)"
    assert most_browsers == 1                            # never a new one beside the old
    assert most_renderers <= test_settings.getint("CRAWLCLUSTER_RENDER_PAGES")
    # one browser's worth: two at once would hold twice what one does
    assert max(held) <= bound * 2, f"{max(held)} MB"


def hostile_site(www, articles):
    """``articles`` scripted articles (write_site's) and two hostile pages linked from
    the index: ``/app/poll.html`` asks for its JSON again as soon as it has it, for ever
    (long polling: it never goes quiet), ``/app/stuck.html`` runs a script that never
    ends (its load event never comes)."""
    write_site(www, articles)
    index = www / "index.html"
    index.write_text(index.read_text().replace(
        "</body>", '<a href="/app/poll.html">poll</a><a href="/app/stuck.html">stuck</a>'
        "</body>"))
    (www / "app" / "poll.json").write_text(json.dumps({"title": "Polled"}))
    (www / "app" / "poll.html").write_text(
        '<html><body><h1 id="t"></h1><script>function poll() { fetch("/app/poll.json")'
        '.then(r => r.json()).then(a => { document.getElementById("t").textContent ='
        " a.title; poll(); }); } poll();</script></body></html>")
    (www / "app" / "stuck.html").write_text(
        "<html><body><h1>Stuck</h1><script>while (true) {}</script></body></html>")


def render_stats(tmp_path, crawlid):
    text = (tmp_path / crawlid / "spider0.log").read_text()
    return {name: int(float(value)) for name, value in re.findall(
        r"'crawlcluster/render/([\w/]+)': ([\d.]+)", text)}


def test_render_a_page_that_never_goes_quiet_is_taken_at_the_cap_and_a_stuck_page_closes_alone(
        test_settings, mongo_db, tmp_path):
    """A page polling for ever is taken as it is at ``CRAWLCLUSTER_RENDER_QUIET_MAX``
    (its item stored, fetched once, counted); a page whose script never ends fails at
    the render timeout with its own page closed, while the pages rendering beside it in
    the same browser succeed: one browser over the crawl (the failures were not in a
    row often enough to replace it), every article stored."""
    port = free_port(["127.0.0.1"])
    write_dir = tmp_path / "www" / "127.0.0.1"
    hostile_site(write_dir, ARTICLES)
    start = f"http://127.0.0.1:{port}/"
    rule = {"rules": [*RULE["rules"], {"allow": "/app/(poll|stuck)", "fields": {
        "title": "//h1/text()"}}]}
    with served(tmp_path, port) as site:
        items = crawl(test_settings, mongo_db, tmp_path, start, "always", rule=rule,
                      CRAWLCLUSTER_RENDER_QUIET_MAX="1", CRAWLCLUSTER_RENDER_TIMEOUT="6",
                      CRAWLCLUSTER_BROWSER_MAX_FAILURES="100")
        fetched = page_fetches(site.access_log(), site.port)
    stats = render_stats(tmp_path, "render-always")
    print(f"\nhostile pages: {len(items)} items; render stats {stats}; nginx served "
          f"{fetch_summary(fetched)}")
    assert items[start + "app/poll.html"] == "Polled"
    assert fetched[canonical_url(start + "app/poll.html")] == 1
    assert stats["quiet_capped"] >= 1
    assert all(items.get(f"{start}app/article-{n}.html") == f"Article {n}"
               for n in range(1, ARTICLES + 1))
    assert start + "app/stuck.html" not in items
    tries = fetched[canonical_url(start + "app/stuck.html")]
    assert stats["timeouts"] == tries >= 1
    assert stats["browsers"] == 1 and not any(name.startswith("browsers_replaced")
                                              for name in stats)
