"""What a spider's download path keeps, on a real crawl (dispatcher, spider, Redis,
MongoDB, nginx): a gzip-encoded body is read, the crawl's cookie is sent, and a cookie
the site sets is sent back. (Redirects and redirect loops, the cluster's own retries on
503, DOWNLOAD_MAXSIZE: test_crawler_hostile.py; proxies: test_crawler_proxy.py;
robots.txt: test_crawler_crawl.py.)"""

import gzip
from collections import Counter

from manager.local.crawl import run_crawl, submit
from manager.local.ports import free_port
from manager.local.staticsite import StaticSite

PAGE = "<html><head><title>{0}</title></head><body><h1>{0}</h1>{1}</body></html>"
RULE = {"rules": [{"allow": [r"\.html$"], "follow": True, "fields": {"title": "//h1/text()"}}]}


def test_gzip_bodies_and_cookies_reach_the_spider(test_settings, redis, mongo_db, tmp_path):
    www = tmp_path / "www" / "127.0.0.1"
    www.mkdir(parents=True)
    links = "".join(f'<a href="/{name}.html">{name}</a>'
                    for name in ("packed", "members", "login"))
    (www / "index.html").write_text(PAGE.format("index", links))
    (www / "packed.html").write_bytes(gzip.compress(PAGE.format("packed", "").encode()))
    (www / "members.html").write_text(PAGE.format("members", ""))
    (www / "login.html").write_text(PAGE.format("login", '<a href="/private.html">p</a>'))
    (www / "private.html").write_text(PAGE.format("private", ""))
    locations = {"127.0.0.1": [
        # stored compressed: only a spider that decompresses reads its title
        'location = /packed.html { add_header Content-Encoding gzip; }',
        # the crawl's own cookie, or no page
        'location = /members.html { if ($http_cookie !~ "member=yes") { return 403; } }',
        # a cookie the site sets on one page and wants back on the next
        'location = /login.html { add_header Set-Cookie "visited=1; Path=/"; }',
        'location = /private.html { if ($http_cookie !~ "visited=1") { return 403; } }',
    ]}
    with StaticSite(tmp_path / "www", ["127.0.0.1"], free_port(), tmp_path / "run",
                    locations=locations) as site:
        submit(test_settings, {"crawlid": "download", "spider_type": "universal",
                               "url": f"http://127.0.0.1:{site.port}/index.html",
                               "cookie": "member=yes", "rule": RULE})
        (tmp_path / "logs").mkdir()
        assert run_crawl(test_settings, "universal", tmp_path / "logs") == [0]
        statuses = Counter((entry["path"], entry["status"]) for entry in site.access_log())
    titles = {item["title"] for item in mongo_db["items_universal"].find({"crawlid": "download"})}
    assert titles == {"packed", "members", "login", "private"}, (titles, statuses)
    assert not [key for key in statuses if key[1] != 200 and key[0] != "/robots.txt"], statuses
