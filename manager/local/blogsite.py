"""A generated site shaped like a real magazine, with its ground truth: words in its URLs.

``sitegen`` makes a tidy news site whose URLs are numbered. Real sites are not: their
articles sit under slugs of their titles (``/2026/05/city-opens-new-line/``), their
authors and tags under names and words (``/author/wang-fang/``, ``/tag/transport/page/2/``),
and every page loads the same stylesheets and scripts. One section here, ``/live/``, is
written by a script from JSON, as a live blog often is: its list pages and articles need a
browser, the rest do not.

``generate_blog_site`` writes ``www/<host>/...`` under a folder and returns the manifest:
every page with its kind (``index``, ``category``, ``tag``, ``author``, ``article``,
``live-list``, ``live``) and whether it ``needs_browser``, the articles' fields, the
assets every page loads and the JSON the live pages' script fetches.
"""

import json
import os
import random
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

_WORDS = ("city", "river", "budget", "school", "metro", "line", "vote", "council", "park",
          "energy", "plan", "market", "harbour", "bridge", "library", "festival", "clinic",
          "housing", "water", "rail", "court", "museum", "farm", "airport", "storm", "grant")
_FIRST = ("wang", "li", "zhang", "liu", "chen", "yang", "zhao", "huang", "anna", "marc",
          "sofia", "omar", "lena", "ivan", "mei", "tom")
_LAST = ("fang", "wei", "na", "yang", "jing", "fan", "lei", "min", "berg", "costa", "novak",
         "silva", "okafor", "tanaka", "smith", "rossi")
_CATEGORIES = ("politics", "business", "culture", "sport", "science", "travel")
ASSETS = ("/static/css/site.css", "/static/css/print.css", "/static/js/site.js")
LIVE_SCRIPT = "/static/js/live.js"
# A universal rule for the site: every article an item, every list followed
BLOG_FIELDS = {"title": "//h1[@class='entry-title']/text()",
               "date": "//time[@class='date']/text()",
               "content": "//div[@class='entry-content']/p/text()"}
BLOG_RULE = {"rules": [
    {"allow": [r"/(2026/\d\d|live)/(?!page/)[^/]+/$"], "follow": True, "fields": BLOG_FIELDS},
    {"allow": [r"/$"], "deny": [r"/static/"], "follow": True},
]}
# Last-Modified of the assets: deployed a month before the crawl, as a site's are
ASSET_AGE = 30 * 86400


@dataclass
class BlogSpec:
    port: int
    host: str = "127.0.0.1"
    articles: int = 400
    live_articles: int = 300
    authors: int = 14
    tags: int = 80
    page_size: int = 10
    seed: int = 7

    def base(self) -> str:
        return f"http://{self.host}:{self.port}"


def _slug(rng: random.Random, used: set[str]) -> str:
    """A title's slug, mostly of 3-6 words; one in ten of two (a shape alone does not
    tell a two-word slug from a section's name)."""
    while True:
        count = 2 if rng.random() < 0.1 else rng.randint(3, 6)
        slug = "-".join(rng.sample(_WORDS, count))
        if slug not in used and slug != "page":
            used.add(slug)
            return slug


def _people(rng: random.Random, count: int) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        names.add(f"{rng.choice(_FIRST)}-{rng.choice(_LAST)}")
    return sorted(names)


def blog_plan(spec: BlogSpec) -> dict[str, Any]:
    """Every article (regular and live) with its fields, authors and tags (what
    ``generate_blog_site`` writes; a benchmark edits it and writes the site's next
    edition)."""
    rng = random.Random(spec.seed)
    authors = _people(rng, spec.authors)
    tags = sorted({"-".join(rng.sample(_WORDS, rng.choice((1, 1, 2))))
                   for _ in range(spec.tags * 3)})[:spec.tags]
    used: set[str] = set()
    articles = []
    for number in range(spec.articles + spec.live_articles):
        live = number >= spec.articles
        slug = _slug(rng, used)
        month = rng.randint(1, 12)
        path = f"/live/{slug}/" if live else f"/2026/{month:02d}/{slug}/"
        articles.append({
            "path": path, "live": live, "slug": slug,
            "title": " ".join(slug.split("-")).capitalize() + f" ({number + 1})",
            "date": f"2026-{month:02d}-{rng.randint(1, 28):02d}",
            "author": rng.choice(authors), "category": rng.choice(_CATEGORIES),
            "tags": rng.sample(tags, 3),
            "content": [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(30, 60))) + "."
                        for _ in range(rng.randint(3, 6))]})
    return {"authors": authors, "tags": tags, "articles": articles}


def _pages(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]


def _paged(base: str, number: int) -> str:
    return base if number == 1 else f"{base}page/{number}/"


class _Writer:
    """Writes the pages of one site and records them for the manifest."""

    def __init__(self, www: Path, spec: BlogSpec, plan: dict[str, Any]) -> None:
        self.www, self.spec, self.plan = www, spec, plan
        self.pages: list[dict[str, Any]] = []
        self.script_data: list[str] = []

    def page(self, path: str, kind: str, heading: str, body: str,
             live: bool = False, **fields: Any) -> None:
        data = ""
        if live:
            data_path = path.rstrip("/") + ".json"
            self._write(data_path, json.dumps({"html": body}).encode())
            self.script_data.append(self.spec.base() + data_path)
            data = f' data-src="{data_path}"'
            body = f'<div id="live"{data}></div><script src="{LIVE_SCRIPT}"></script>'
        html = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                f"<title>{escape(heading)}</title>"
                f'<link rel="stylesheet" href="{ASSETS[0]}">'
                f'<link rel="stylesheet" href="{ASSETS[1]}" media="print">'
                f'<script src="{ASSETS[2]}" defer></script></head>\n'
                f'<body class="{kind}">{self._header()}\n<main>{body}</main>\n'
                f"{self._sidebar()}{self._footer()}</body></html>\n")
        self._write(path, html.encode())
        self.pages.append({"url": self.spec.base() + path, "kind": kind,
                           "needs_browser": live, **fields})

    def _header(self) -> str:
        sections = "".join(f'<li><a href="/category/{name}/">{name.title()}</a></li>'
                           for name in _CATEGORIES)
        return (f'<header class="site-header"><a class="logo" href="/">The Daily</a>'
                f'<nav class="menu"><ul>{sections}<li><a href="/live/">Live</a></li></ul>'
                '</nav></header>')

    def _sidebar(self) -> str:
        tags = "".join(f'<a class="tag-cloud-link" href="/tag/{tag}/">{tag}</a> '
                       for tag in self.plan["tags"])
        authors = "".join(f'<li><a href="/author/{name}/">{name.replace("-", " ").title()}'
                          "</a></li>" for name in self.plan["authors"])
        return (f'<aside class="sidebar"><section class="tags">{tags}</section>'
                f'<section class="authors"><ul>{authors}</ul></section></aside>')

    def _footer(self) -> str:
        return ('<footer class="site-footer"><a href="/">Home</a> '
                '<a href="#top">Back to top</a> <a href="mailto:desk@example.com">Contact</a>'
                "</footer>")

    def _write(self, path: str, data: bytes) -> None:
        target = self.www / path.lstrip("/")
        if path.endswith("/"):
            target = target / "index.html"
        if target.exists() and target.read_bytes() == data:
            return          # an edition that leaves the page be: its ETag stays the same
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _teasers(articles: list[dict[str, Any]]) -> str:
    return '<ul class="posts">' + "".join(
        f'<li class="post"><a class="post-title" href="{a["path"]}">{escape(a["title"])}</a> '
        f'<a class="post-author" href="/author/{a["author"]}/">{a["author"]}</a></li>'
        for a in articles) + "</ul>"


def _pager(base: str, number: int, count: int) -> str:
    links = "".join(f'<a class="page-numbers" href="{_paged(base, n)}">{n}</a> '
                    for n in range(1, count + 1) if n != number)
    if number < count:
        links += f'<a class="next" href="{_paged(base, number + 1)}">Older posts</a>'
    return f'<nav class="pagination">{links}</nav>'


def _article_body(article: dict[str, Any]) -> str:
    tags = "".join(f'<a rel="tag" href="/tag/{tag}/">{tag}</a> ' for tag in article["tags"])
    paragraphs = "".join(f"<p>{escape(p)}</p>" for p in article["content"])
    return (f'<article class="post"><h1 class="entry-title">{escape(article["title"])}</h1>'
            f'<div class="entry-meta"><time class="date">{article["date"]}</time> '
            f'<a class="author" href="/author/{article["author"]}/">{article["author"]}</a>'
            f'</div><div class="entry-content">{paragraphs}</div>'
            f'<div class="entry-tags">{tags}</div></article>')


def _write_lists(writer: _Writer, base: str, kind: str, heading: str,
                 articles: list[dict[str, Any]], live: bool = False) -> None:
    chunks = _pages(articles, writer.spec.page_size)
    for number, chunk in enumerate(chunks, 1):
        body = (f'<h1 class="page-title">{escape(heading)}</h1>{_teasers(chunk)}'
                f"{_pager(base, number, len(chunks))}")
        writer.page(_paged(base, number), kind, heading, body, live=live)


def generate_blog_site(root: str | Path, spec: BlogSpec,
                       plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the site under ``root`` (``plan``: an edition of ``blog_plan``'s; a page it
    leaves as it was is not written again); return (and write) its manifest."""
    plan = plan or blog_plan(spec)
    www = Path(root) / "www" / spec.host
    writer = _Writer(www, spec, plan)
    articles = plan["articles"]
    regular = [a for a in articles if not a["live"]]
    live = [a for a in articles if a["live"]]
    writer.page("/", "index", "The Daily", '<h1 class="page-title">Latest</h1>'
                + _teasers(regular[-10:] + live[-5:]))
    for article in articles:
        writer.page(article["path"], "live" if article["live"] else "article",
                    article["title"], _article_body(article), live=article["live"],
                    title=article["title"], date=article["date"], author=article["author"])
    _write_lists(writer, "/live/", "live-list", "Live", live, live=True)
    for name in _CATEGORIES:
        _write_lists(writer, f"/category/{name}/", "category", name.title(),
                     [a for a in regular if a["category"] == name])
    for tag in plan["tags"]:
        _write_lists(writer, f"/tag/{tag}/", "tag", f"Tagged {tag}",
                     [a for a in regular if tag in a["tags"]])
    for name in plan["authors"]:
        writer.page(f"/author/{name}/", "author", name, f'<h1 class="page-title">{name}</h1>'
                    f'<p class="bio">Writes for The Daily.</p>'
                    + _teasers([a for a in regular if a["author"] == name]))
    _write_assets(www)
    manifest = {"start_url": spec.base() + "/", "pages": writer.pages,
                "assets": [spec.base() + path for path in (*ASSETS, LIVE_SCRIPT)],
                "script_data": writer.script_data}
    (Path(root) / "site.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def _write_assets(www: Path) -> None:
    """The stylesheets and scripts every page loads (with a font the stylesheet names),
    last modified ``ASSET_AGE`` ago."""
    files = {
        ASSETS[0]: "@font-face{font-family:Body;src:url(/static/fonts/body.woff2)}"
                   "body{font-family:Body,serif}.sidebar{float:right}" * 20,
        ASSETS[1]: ".sidebar,.menu{display:none}" * 20,
        ASSETS[2]: "document.documentElement.classList.add('js');"
                   "document.addEventListener('DOMContentLoaded',()=>{"
                   "document.querySelectorAll('a[href^=\"#\"]').forEach(a=>a.rel='nofollow')});",
        LIVE_SCRIPT: "(function(){var box=document.getElementById('live');"
                     "fetch(box.dataset.src).then(r=>r.json()).then(d=>{box.innerHTML=d.html;});"
                     "})();",
        "/static/fonts/body.woff2": "wOF2",
    }
    old = time.time() - ASSET_AGE
    for path, text in files.items():
        target = www / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        os.utime(target, (old, old))
