"""A generated news-like site over several hosts, with its ground truth.

Used by the tests, the benchmarks and the demo; served by nginx
(``manager.local.services.StaticSite``). Each host has an index, paginated list
pages, detail pages (title, date, author, body between navigation, ads and
comments, related links to details on every host), a ``robots.txt`` that
disallows ``/private/`` and names the sitemap, a private page linked from the
index, a sitemap index with a gzip sitemap of the detail pages and an Atom feed of
the newest ten. The first host's first detail page is GBK-encoded and says so
only in ``<meta>``.

``generate_site`` writes ``www/<host>/...`` under a folder and returns the
manifest (also written as ``site.json``): every page with its kind, host,
encoding, depth from the start URL and, for details, the expected fields.
"""

import gzip
import json
import math
import random
from collections import deque
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import Any

Manifest = dict[str, Any]      # what generate_site returns (site.json)
DEFAULT_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")

_TOPICS = ("城市交通", "教育改革", "科技创新", "医疗保障", "文化遗产", "生态环境",
           "乡村振兴", "体育赛事", "金融市场", "住房政策", "航天工程", "数字经济")
_EVENTS = ("新规今日起实施", "取得阶段性进展", "发布年度报告", "举行专题会议",
           "迎来重要突破", "公布最新数据", "启动试点工作", "召开新闻发布会")
_WORDS = ("记者", "今天", "表示", "相关部门", "进一步", "推进", "工作", "发展", "加强",
          "市民", "服务", "建设", "项目", "数据", "显示", "同比", "增长", "方面", "措施",
          "目前", "已经", "完成", "计划", "预计", "年底", "全面", "落实", "提升", "质量")
_AUTHORS = ("张伟", "王芳", "李娜", "刘洋", "陈静", "杨帆", "赵磊", "黄敏")


@dataclass
class SiteSpec:
    """What to generate. ``port`` is the one port every host serves on."""

    port: int
    hosts: tuple = DEFAULT_HOSTS
    details_per_host: int = 50
    list_page_size: int = 10
    related_links: int = 5
    seed: int = 1
    gbk_page: bool = True
    # a share of detail pages made 50-500 KB long by their comments, as real pages can be
    large_share: float = 0.0
    large_kb: tuple = (50, 500)
    crawl_delays: dict = field(default_factory=dict)     # host -> robots.txt Crawl-delay
    # hosts whose list and detail pages are written by a script from a JSON endpoint
    # (``<page>.json``): a crawl that does not render them finds none of their links
    scripted_hosts: tuple = ()

    def base(self, host: str) -> str:
        return f"http://{host}:{self.port}"

    def list_pages(self) -> int:
        return max(1, math.ceil(self.details_per_host / self.list_page_size))


@dataclass
class Page:
    url: str
    kind: str
    host: str
    path: str
    encoding: str = "utf-8"
    links: list = field(default_factory=list)
    fields: dict = field(default_factory=dict)


def generate_site(root: str | Path, spec: SiteSpec, lean: bool = False) -> Manifest:
    """Write the site under ``root``; return (and write) its manifest.

    ``lean``: the manifest's pages carry only their url, kind, host and depth, and the
    pages' texts are not kept once written (a million-page site's full manifest, every
    page's links and fields, would take tens of GB)."""
    root = Path(root)
    rng = random.Random(spec.seed)
    pages = []
    for host in spec.hosts:
        host_pages = _host_pages(spec, host, rng)
        for page in host_pages:
            _write_page(root / "www" / host, page, spec)
        _write_host_files(root / "www" / host, spec, host,
                          [page for page in host_pages if page.kind == "detail"])
        if lean:
            for page in host_pages:
                page.fields = {}
        pages.extend(host_pages)
    manifest = _manifest(spec, pages, lean)
    with open(root / "site.json", "w", encoding="utf-8") as out:
        json.dump(manifest, out, ensure_ascii=False, indent=None if lean else 1)
    return manifest


def _write_host_files(www: Path, spec: SiteSpec, host: str, details: list[Page]) -> None:
    robots = "User-agent: *\nDisallow: /private/\n"
    if spec.crawl_delays.get(host):
        robots += f"Crawl-delay: {spec.crawl_delays[host]}\n"
    robots += f"Sitemap: {spec.base(host)}/sitemap.xml\n"
    _write(www / "robots.txt", robots.encode())
    _write_sources(www, spec.base(host), details)


def write_latest(root: str | Path, spec: SiteSpec, host: str, urls: list[str],
                 lastmod: str | None = None) -> tuple[str, str]:
    """A new version of a host's "latest news": ``latest.html`` (a hub linking ``urls``)
    and ``latest.xml`` (a sitemap of them, with ``lastmod``: one date for all, or
    ``{url: date}``). Tests write one version, then the next, and see what a revisit
    finds."""
    www = Path(root) / "www" / host
    links = "".join(f'<li><a href="{url}">{url}</a></li>' for url in urls)
    _write(www / "latest.html", f"<html><body><h1>Latest</h1><ul>{links}</ul></body></html>"
           .encode())
    dates = lastmod if isinstance(lastmod, dict) else dict.fromkeys(urls, lastmod)
    entries = "".join(f"<url><loc>{url}</loc>" + (f"<lastmod>{dates[url]}</lastmod>"
                                                    if dates.get(url) else "") + "</url>"
                      for url in urls)
    _write(www / "latest.xml", (f'<?xml version="1.0"?><urlset '
                                f'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                                f"{entries}</urlset>").encode())
    return f"{spec.base(host)}/latest.html", f"{spec.base(host)}/latest.xml"


def _write_sources(www: Path, base: str, details: list[Page]) -> None:
    """A host's sitemap index (``sitemap.xml``, naming robots.txt too) with one gzip
    sitemap of its detail pages and their dates, and an Atom feed of the newest ten."""
    namespace = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    urls = "".join(f"<url><loc>{page.url}</loc><lastmod>{page.fields['date']}</lastmod></url>"
                   for page in details)
    _write(www / "sitemap-news.xml.gz", gzip.compress(
        f'<?xml version="1.0"?><urlset {namespace}>{urls}</urlset>'.encode(), mtime=0))
    _write(www / "sitemap.xml", (f'<?xml version="1.0"?><sitemapindex {namespace}><sitemap>'
                                 f"<loc>{base}/sitemap-news.xml.gz</loc></sitemap>"
                                 "</sitemapindex>").encode())
    newest = sorted(details, key=lambda page: page.fields["date"], reverse=True)[:10]
    entries = "".join(
        f"<entry><title>{escape(page.fields['title'])}</title><link href=\"{page.url}\"/>"
        f"<id>{page.url}</id><updated>{page.fields['date']}T08:00:00Z</updated></entry>"
        for page in newest)
    _write(www / "feed.atom", (f'<?xml version="1.0" encoding="utf-8"?>'
                               f'<feed xmlns="http://www.w3.org/2005/Atom"><title>{base}</title>'
                               f"<id>{base}/</id><updated>2026-12-31T00:00:00Z</updated>"
                               f"{entries}</feed>").encode())


def _host_pages(spec: SiteSpec, host: str, rng: random.Random) -> list[Page]:
    base = spec.base(host)
    details = [_detail(spec, host, number, rng) for number in range(1, spec.details_per_host + 1)]
    lists = []
    for number in range(1, spec.list_pages() + 1):
        chunk = details[(number - 1) * spec.list_page_size:number * spec.list_page_size]
        links = [d.url for d in chunk]
        # numbered pagination: the next page, then up to four after it
        links += [f"{base}/list/{n}.html"
                  for n in range(number + 1, min(number + 5, spec.list_pages()) + 1)]
        lists.append(Page(f"{base}/list/{number}.html", "list", host, f"list/{number}.html",
                          links=links, fields={"items": [d.fields["title"] for d in chunk]}))
    index = Page(f"{base}/", "index", host, "index.html",
                 links=[lists[0].url, f"{base}/private/1.html"])
    private = Page(f"{base}/private/1.html", "private", host, "private/1.html")
    return [index, *lists, *details, private]


def _detail(spec: SiteSpec, host: str, number: int, rng: random.Random) -> Page:
    base = spec.base(host)
    title = f"{rng.choice(_TOPICS)}{rng.choice(_EVENTS)}（{host.rsplit('.', 1)[-1]}-{number}号）"
    paragraphs = ["".join(rng.choice(_WORDS) for _ in range(rng.randint(25, 45))) + "。"
                  for _ in range(rng.randint(3, 6))]
    date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    fields: dict[str, Any] = {"title": title, "date": date, "author": rng.choice(_AUTHORS),
                              "content": paragraphs}
    related = [f"{spec.base(rng.choice(spec.hosts))}/news/"
               f"{rng.randint(1, spec.details_per_host)}.html"
               for _ in range(spec.related_links)]
    gbk = spec.gbk_page and host == spec.hosts[0] and number == 1
    if spec.large_share and rng.random() < spec.large_share:
        fields["padding_kb"] = rng.randint(*spec.large_kb)
    return Page(f"{base}/news/{number}.html", "detail", host, f"news/{number}.html",
                encoding="gbk" if gbk else "utf-8", links=related, fields=fields)


def _write_page(www: Path, page: Page, spec: SiteSpec) -> None:
    body = {"index": _index_body, "list": _list_body, "detail": _detail_body,
            "private": lambda p: "<p>不应被抓取的页面</p>"}[page.kind](page)
    if _scripted(page, spec):
        data = page.path.removesuffix(".html") + ".json"
        _write(www / data, json.dumps({"html": body}, ensure_ascii=False).encode())
        body = ('<div id="app"></div><script>fetch("/' + data + '").then(r => r.json())'
                '.then(d => { document.getElementById("app").innerHTML = d.html; });</script>')
    _write(www / page.path, _render(page, spec, body).encode(page.encoding))


def _scripted(page: Page, spec: SiteSpec) -> bool:
    return page.host in spec.scripted_hosts and page.kind in ("list", "detail")


def _render(page: Page, spec: SiteSpec, body: str) -> str:
    title = page.fields.get("title") or f"{page.kind} {page.path}"
    sites = " ".join(f'<a href="{spec.base(h)}/">站点 {h}</a>' for h in spec.hosts)
    return (f'<!DOCTYPE html>\n<html><head><meta charset="{page.encoding}">'
            f"<title>{escape(title)}</title></head><body>\n"
            f'<div class="nav"><a href="/">首页</a> <a href="/list/1.html">新闻列表</a> '
            f'<a href="javascript:void(0)">收藏</a> <a href="mailto:news@example.com">投稿</a>'
            f"</div>\n{body}\n"
            f'<div class="footer">{sites}</div>\n</body></html>\n')


def _index_body(page: Page) -> str:
    return (f'<h1>新闻网</h1><a class="more" href="{page.links[0]}">全部新闻</a>'
            f'<a class="internal" href="{page.links[1]}">内部资料</a>')


def _list_body(page: Page) -> str:
    items = "".join(f'<li><a class="title" href="{url}">{escape(title)}</a></li>'
                    for url, title in zip(page.links, page.fields["items"], strict=False))
    following = page.links[len(page.fields["items"]):]
    pager = "".join(f'<a class="page" href="{url}">{url.rsplit("/", 1)[1][:-5]}</a> '
                    for url in following[1:])
    if following:
        pager = f'<a class="next" href="{following[0]}">下一页</a> ' + pager
    return f'<ul class="news-list">{items}</ul><div class="pager">{pager}</div>'


def _detail_body(page: Page) -> str:
    f = page.fields
    paragraphs = "".join(f"<p>{escape(p)}</p>" for p in f["content"])
    related = "".join(f'<li><a href="{url}">相关新闻</a></li>' for url in page.links)
    return (f'<div class="ad">广告：限时优惠，点击领取</div>'
            f'<div class="article"><h1 class="title">{escape(f["title"])}</h1>'
            f'<div class="meta"><span class="date">{f["date"]}</span> '
            f'<span class="author">{f["author"]}</span></div>'
            f'<div class="content">{paragraphs}</div></div>'
            f'<ul class="related">{related}</ul>'
            f'<div class="comments"><p>网友评论：写得很好！</p><p>网友评论：支持。</p>'
            f'{_padding(f.get("padding_kb", 0))}</div>')


def _padding(kb: int) -> str:
    """About ``kb`` KB of comments (UTF-8)."""
    comment = "<p>网友评论：" + "这篇报道很有参考价值，希望继续关注后续进展。" * 8 + "</p>"
    return comment * (kb * 1024 // len(comment.encode()))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _manifest(spec: SiteSpec, pages: list[Page], lean: bool = False) -> Manifest:
    start = f"{spec.base(spec.hosts[0])}/"
    crawlable = [p for p in pages if p.kind != "private"]
    depths = _depths(start, crawlable, spec)
    return {
        "spec": asdict(spec),
        "start_url": start,
        "pages": [{"url": p.url, "kind": p.kind, "host": p.host, "depth": depths.get(p.url)}
                  if lean else
                  {"url": p.url, "kind": p.kind, "host": p.host, "encoding": p.encoding,
                   "depth": depths.get(p.url), "links": _page_links(p, spec), **p.fields}
                  for p in crawlable],
        "disallowed": [p.url for p in pages if p.kind == "private"],
        # what the scripted pages' scripts fetch (a browser rendering them does)
        **({"script_data": [p.url.removesuffix(".html") + ".json" for p in crawlable
                            if _scripted(p, spec)]} if spec.scripted_hosts else {}),
    }


def _page_links(page: Page, spec: SiteSpec) -> list[str]:
    """Every http link on a page, navigation and footer included, in page order."""
    base = spec.base(page.host)
    return [f"{base}/", f"{base}/list/1.html", *page.links,
            *(f"{spec.base(h)}/" for h in spec.hosts)]


def _depths(start: str, pages: list[Page], spec: SiteSpec) -> dict[str, int]:
    """Breadth-first depth of every page from the start URL over all its links."""
    by_url = {p.url: p for p in pages}
    depths = {start: 0}
    queue = deque([start])
    while queue:
        page = by_url[queue.popleft()]
        for url in _page_links(page, spec):
            if url in by_url and url not in depths:
                depths[url] = depths[page.url] + 1
                queue.append(url)
    return depths


# --- a hostile site: what a crawler must survive --------------------------------------------

HOSTILE_TITLE = "城市交通新规今日起实施"
MANY_LINKS = 3000        # links of many-links.html, each to a page of /hostile/many/
BAD_LINKS = ("http://example.com:99999/hostile/a.html", "http://[zz]/hostile/b.html",
             "http://exa mple.com/hostile/c.html", "http://a..b/hostile/d.html")
HOSTILE_PAGES = {
    # path: (what it is, title a crawl must store, or None when no item may come of it)
    "lying-header.html": ("GBK page served with 'charset=utf-8' in its HTTP header",
                          HOSTILE_TITLE),
    "lying-meta.html": ("GBK page whose <meta> says utf-8", HOSTILE_TITLE),
    "undeclared.html": ("GBK page with no charset anywhere", HOSTILE_TITLE),
    "malformed.html": ("unclosed and stray tags, a broken comment", HOSTILE_TITLE),
    "binary.html": ("64 KiB of random bytes served as text/html", None),
    "huge.html": ("21 MiB page, over DOWNLOAD_MAXSIZE", None),
    "loop-a.html": ("redirects to loop-b.html, which redirects back", None),
    "to-file.html": ("redirects to file:///etc/passwd", None),
    "bomb.html": ("2 MiB of gzip that unpacks to 40 MiB (Content-Encoding: gzip)", None),
    "bad-port.html": ("redirects to a port out of range", None),
    "bad-ipv6.html": ("redirects to a malformed IPv6 literal", None),
    "overlong.html": ("redirects to a URL over URLLENGTH_LIMIT", None),
    "many-links.html": (f"{MANY_LINKS} links, and a title", HOSTILE_TITLE),
    "bad-links.html": ("links that are no URL, and a title", HOSTILE_TITLE),
}
UNSAFE_LINKS = ("javascript:alert(1)", "data:text/html,<h1>x</h1>", "file:///etc/passwd",
                "ftp://127.0.0.1/", "mailto:a@example.com")


def generate_hostile_site(root: str | Path, port: int,
                          host: str = "127.0.0.1") -> tuple[Manifest, dict[str, list[str]]]:
    """Pages that lie about their charset, are binary, huge or malformed, redirect in a
    loop or to a file, link to unsafe schemes, and an endless calendar, under
    ``www/<host>/hostile/``. Returns the manifest and the nginx locations that serve
    the lies, redirects and the calendar (``StaticSite(locations=...)``)."""
    folder = Path(root) / "www" / host / "hostile"
    base = f"http://{host}:{port}/hostile/"
    head = "<html><head><title>t</title>{meta}</head><body>"
    # a paragraph of text, as any article has: detection needs more than a title
    paragraph = "记者今天表示，相关部门将进一步推进工作，加强市民服务和项目建设。" * 3
    gbk_page = head + f"<h1>{HOSTILE_TITLE}</h1><p>{paragraph}</p></body></html>"
    _write(folder / "lying-header.html",
           gbk_page.format(meta='<meta charset="gbk">').encode("gbk"))
    _write(folder / "lying-meta.html",
           gbk_page.format(meta='<meta charset="utf-8">').encode("gbk"))
    _write(folder / "undeclared.html", gbk_page.format(meta="").encode("gbk"))
    _write(folder / "malformed.html", (
        '<html><head><meta charset="utf-8"><title>t</title><body><div><div class="x">'
        f"<p>没有结束<b><i>标签</div></div></div><<<h1 class=>{HOSTILE_TITLE}</h1><p>"
        "<!-- 没有结束的注释 <table><tr><td>").encode())
    _write(folder / "binary.html", random.Random(7).randbytes(64 * 1024))
    _write(folder / "huge.html", b"<html><body><h1>huge</h1>" + b"x" * (21 << 20))
    _write(folder / "bomb.html", gzip.compress(b"<html><body>" + b" " * (40 << 20), 1))
    many = "".join(f'<a href="many/{n}.html">{n}</a>' for n in range(MANY_LINKS))
    _write(folder / "many-links.html", f'<html><head><meta charset="utf-8"></head><body>'
           f"<h1>{HOSTILE_TITLE}</h1>{many}</body></html>".encode())
    bad = "".join(f'<a href="{escape(link)}">x</a>' for link in BAD_LINKS)
    _write(folder / "bad-links.html", f'<html><head><meta charset="utf-8"></head><body>'
           f"<h1>{HOSTILE_TITLE}</h1>{bad}</body></html>".encode())
    _write(folder / "calendar.html",
           b'<html><body><h1>calendar</h1><a href="next/">next month</a></body></html>')
    links = [*HOSTILE_PAGES, "calendar/", *UNSAFE_LINKS]
    _write(folder / "index.html", (
        '<html><head><meta charset="utf-8"></head><body><h1>hostile</h1>'
        + "".join(f'<a href="{link}">{escape(link)}</a>' for link in links)
        + "</body></html>").encode())
    locations = [
        "location = /hostile/lying-header.html { charset utf-8; }",
        "location = /hostile/loop-a.html { return 302 /hostile/loop-b.html; }",
        "location = /hostile/loop-b.html { return 302 /hostile/loop-a.html; }",
        'location = /hostile/to-file.html { return 302 "file:///etc/passwd"; }',
        "location /hostile/calendar/ { try_files /hostile/calendar.html =404; }",
        "location = /hostile/bomb.html { add_header Content-Encoding gzip; }",
        'location = /hostile/bad-port.html { return 302 "http://127.0.0.1:99999/x"; }',
        'location = /hostile/bad-ipv6.html { return 302 "http://[zz]/x"; }',
        f'location = /hostile/overlong.html {{ return 302 "/hostile/{"a" * 3000}"; }}',
        "location /hostile/many/ { default_type text/html; return 200 '<h1>many</h1>'; }",
    ]
    manifest = {"start_url": base + "index.html", "base": base,
                "titled": {base + path: title for path, (_, title) in HOSTILE_PAGES.items()
                           if title}}
    return manifest, {host: locations}
