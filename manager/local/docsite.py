"""A generated site shaped like real documentation (a Sphinx build), with its ground truth.

News-like generated sites (``sitegen``) link their pages by plain URLs, a few dozen a
page. Real documentation does not: every page carries the whole table of contents
(hundreds of links), links the root index, the general index and the search page,
links itself (``#``, its own name, its section anchors), and cross-references other
pages by many different ``#fragments`` (one popular page may be the target of dozens),
with relative, ``./`` and absolute spellings, and now and then a query in either order.
Some reference pages are hundreds of KB. A crawler that fails to see that
``ref/settings.html#a`` and ``../ref/settings.html?b=2&a=1#c`` are pages it has already
queued fetches them again and again; this site shows it in nginx's log.

``generate_docs_site`` writes ``www/<host>/...`` and returns the manifest (also written
as ``docs.json``): the start URL, and every page by its canonical URL (fragment dropped,
query sorted, as Scrapy fingerprints it) with its kind (``index`` pages are followed
only, ``detail`` pages stored too, as ``DOCS_RULE`` does) and its title.
"""

import json
import random
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Any

from master.urls import canonical_url

Manifest = dict[str, Any]
# Index pages followed; every other page followed and stored with its title.
DOCS_RULE = {"rules": [{"allow": [r"/(gen)?index\.html$", r"/search\.html$"], "follow": True},
                       {"allow": [r"\.html"], "follow": True,
                        "fields": {"title": "//h1/text()"}}]}
_INDEXES = ("index.html", "genindex.html", "search.html")
_WORDS = ("request", "spider", "queue", "setting", "pipeline", "item", "response", "crawl",
          "frontier", "filter", "middleware", "scheduler", "extension", "signal", "engine",
          "selector", "download", "throttle", "node", "cluster", "default", "value")


@dataclass
class DocsSpec:
    """What to generate: ``pages_per_section`` in each of ``sections`` pages plus the root index,
    a section index each, the general index and the search page, on one host."""

    port: int
    host: str = "127.0.0.1"
    sections: tuple = ("intro", "topics", "howto", "ref", "api")
    pages_per_section: int = 50
    anchors: int = 8               # sections of a page, each with a headerlink
    cross_refs: int = 60           # links into other pages' anchors in a page's body
    popular: int = 5               # pages every page cross-references, by many fragments
    large_share: float = 0.1       # reference pages made 100-300 KB long
    large_kb: tuple = (100, 300)
    toc_window: int = 0            # the toctree: every page (0) or this many around the page
    seed: int = 5

    def base(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass
class _Page:
    path: str                      # under the host's root, no leading "/"
    title: str
    anchors: list


def generate_docs_site(root: str | Path, spec: DocsSpec) -> Manifest:
    """Write the site under ``root``; return (and write) its manifest."""
    rng = random.Random(spec.seed)
    pages = _pages(spec, rng)
    www = Path(root) / "www" / spec.host
    # popular pages: every page cross-references them, by many fragments
    popular = rng.sample(pages[1:], spec.popular)
    query_page = popular[0]
    links = 0
    for number, page in enumerate(pages):
        html, count = _render(spec, pages, number, popular, rng)
        links += count
        _write(www / page.path, html)
    queried = [_Page(f"{query_page.path}?area=default&highlight={word}", query_page.title,
                     []) for word in _WORDS[:3]]
    manifest = {
        "spec": asdict(spec),
        "start_url": f"{spec.base()}/index.html",
        "pages": [{"url": canonical_url(f"{spec.base()}/{page.path}"), "title": page.title,
                   "kind": "index" if page.path.endswith(_INDEXES) else "detail"}
                  for page in pages + queried],
        "links": links,
    }
    _write(Path(root) / "docs.json", json.dumps(manifest, indent=1))
    return manifest


def _pages(spec: DocsSpec, rng: random.Random) -> list[_Page]:
    def page(path: str, title: str) -> _Page:
        anchors = [f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{n}"
                   for n in range(spec.anchors)]
        return _Page(path, title, anchors)

    pages = [page("index.html", "Documentation"), page("genindex.html", "Index"),
             page("search.html", "Search")]
    for section in spec.sections:
        pages.append(page(f"{section}/index.html", f"{section.title()} overview"))
        for number in range(1, spec.pages_per_section + 1):
            topic = f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS)}s"
            pages.append(page(f"{section}/{topic.lower().replace(' ', '-')}-{number}.html",
                              f"{topic} ({section} {number})"))
    return pages


def _href(spec: DocsSpec, here: _Page, target: _Page, fragment: str,
          rng: random.Random) -> str:
    """A link from ``here`` to ``target``, spelt as real pages spell them: relative,
    ``./`` or absolute, with a fragment or none."""
    depth = here.path.count("/")
    relative = "../" * depth + target.path
    spelling = rng.random()
    if spelling < 0.1:
        href = f"{spec.base()}/{target.path}"
    elif spelling < 0.2 and "/" not in relative:
        href = f"./{relative}"
    elif spelling < 0.25 and depth:
        # up out of the section and back into it
        href = f"../{here.path.split('/')[0]}/../{relative[3:]}" if relative.startswith(
            "../") else relative
    else:
        href = relative
    return f"{href}#{fragment}" if fragment else href


def _render(spec: DocsSpec, pages: list[_Page], number: int, popular: list[_Page],
            rng: random.Random) -> tuple[str, int]:
    """The page's HTML and how many links it has."""
    here = pages[number]
    links: list[str] = []

    def link(target: _Page, text: str, fragment: str = "") -> str:
        href = _href(spec, here, target, fragment, rng)
        links.append(href)
        return f'<a class="reference internal" href="{escape(href)}">{escape(text)}</a>'

    up = "../" * here.path.count("/")
    header = (link(pages[0], "Home") + " " + link(pages[1], "Index") + " "
              + link(pages[2], "Search") + " "
              + (link(pages[number - 1], "previous") if number else "") + " "
              + (link(pages[number + 1], "next") if number + 1 < len(pages) else ""))
    toctree = "".join(f"<li>{link(page, page.title)}</li>" for page in _toc(spec, pages, number))
    local = "".join(f'<li><a href="#{anchor}">{anchor}</a></li>' for anchor in here.anchors)
    links += [f"#{anchor}" for anchor in here.anchors]
    body = [f'<h1>{escape(here.title)}<a class="headerlink" href="#">¶</a></h1>',
            f'<p>This page: <a href="{here.path.rsplit("/", 1)[-1]}">permalink</a>.</p>']
    links += ["#", here.path.rsplit("/", 1)[-1]]
    for anchor in here.anchors:
        refs = []
        for _ in range(spec.cross_refs // spec.anchors):
            target = rng.choice(popular) if rng.random() < 0.4 else rng.choice(pages)
            refs.append(link(target, rng.choice(_WORDS), rng.choice(target.anchors)))
        body.append(f'<section id="{anchor}"><h2>{anchor}'
                    f'<a class="headerlink" href="#{anchor}">¶</a></h2>'
                    f"<p>{_sentence(rng)} {' '.join(refs)} {_sentence(rng)}</p></section>")
        links.append(f"#{anchor}")
    if here.path == "search.html" or number % 7 == 0:
        # search results link with a query, its arguments in either order
        word = _WORDS[number % 3]
        for query in (f"area=default&highlight={word}", f"highlight={word}&area=default"):
            href = f"{up}{popular[0].path}?{query}#{popular[0].anchors[0]}"
            links.append(href)
            body.append(f'<p><a href="{escape(href)}">{word}</a></p>')
    if here.path == "genindex.html":
        # a large site's index names each page once (a few MB, as real ones are)
        per_page = 1 if spec.toc_window else spec.anchors
        body.append("<dl>" + "".join(f"<dt>{link(page, anchor, anchor)}</dt>"
                                     for page in pages for anchor in page.anchors[:per_page])
                    + "</dl>")
    if here.path.startswith(("ref/", "api/")) and rng.random() < spec.large_share:
        body.append(_padding(rng.randint(*spec.large_kb), rng))
    html = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{escape(here.title)}'
            f"</title></head><body>\n<div class=\"related\">{header}</div>\n"
            f'<div class="sphinxsidebar"><ul class="toc">{toctree}</ul>'
            f'<ul class="local">{local}</ul></div>\n'
            f'<div class="body" role="main">{"".join(body)}</div>\n</body></html>\n')
    return html, len(links)


def _toc(spec: DocsSpec, pages: list[_Page], number: int) -> list[_Page]:
    """The pages a page's toctree lists: every page, or (a large site, whose toctree
    Sphinx folds) the indexes and the ``toc_window`` pages around it."""
    if not spec.toc_window or spec.toc_window >= len(pages):
        return pages
    start = max(0, min(number - spec.toc_window // 2, len(pages) - spec.toc_window))
    # the root indexes come first, a section's index first in its section
    sections = len(spec.sections)
    indexes = pages[:3] + [pages[3 + n * (spec.pages_per_section + 1)] for n in range(sections)]
    return indexes + [page for page in pages[start:start + spec.toc_window]
                      if not page.path.endswith(_INDEXES)]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(12, 30))).capitalize() + "."


def _padding(kb: int, rng: random.Random) -> str:
    """About ``kb`` KB of reference text (tables of settings)."""
    rows = []
    size = 0
    while size < kb * 1024:
        row = (f"<tr><td><code>{rng.choice(_WORDS).upper()}_{rng.choice(_WORDS).upper()}"
               f"</code></td><td>{_sentence(rng)}</td></tr>")
        rows.append(row)
        size += len(row)
    return f'<table class="docutils">{"".join(rows)}</table>'


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
