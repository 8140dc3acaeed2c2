"""Main-text extraction by line-block distribution (thesis 4.3.1.4), made to hold up on
real pages.

The page becomes text lines, one per block element, each knowing how much of its
text is link text, whether it sits in a boilerplate container (``nav``, ``footer``,
``aside``, share and comment widgets, cookie banners: by tag, ``role``, class and id)
and in which body hints (``itemprop="articleBody"``, article-body classes,
``<article>``, ``<main>``). A line's weight is its length in characters without
whitespace (characters, not words, so Chinese counts the same as English), less its
link text, and nothing in boilerplate. A line block is ``k`` consecutive lines; the
body is where block weights peak: from the heaviest block the region grows a line at
a time while the blocks stay above a share of the peak, and across gaps of up to
``MAX_GAP`` light lines (subheadings, captions, short quotes, list items) when heavy
blocks continue after them. When the page marks its body, only lines inside the mark
count (unless the marks hold less than a third of the page's text: several small
"entry-content" boxes on a long service page), and a body marked by ``itemprop`` or a
body class is kept whole. A region that is mostly link text is a listing (a section
front, a product grid): its items, headlines with their teasers, are its main text. A
page with no text outside ``<noscript>`` (a thread a crawler running no JavaScript
receives) is read from its ``<noscript>``. Linear in the size of the page; no
training, no site rules. docs/architecture.md ("Main text") has the
details; bench/maintext.py scores it on real pages.
"""

import re
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, TypeAlias

from lxml import etree, html

BLOCK_TAGS = {
    "address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "td", "th",
    "tr", "ul",
}
DROPPED_TAGS = frozenset((
    "script", "style", "noscript", "template", "iframe", "select", "button", "svg", "canvas",
    "object", "embed", "video", "audio", "head", "title", "textarea", "option"))
BOILERPLATE_TAGS = {"nav", "footer", "aside", "header", "menu", "dialog", "figcaption"}
BOILERPLATE_ROLES = {"navigation", "banner", "contentinfo", "complementary", "menu",
                     "menubar", "search", "dialog", "alert", "toolbar"}
# Words of a class or id (split at anything but letters and digits) that mark a
# container as not the body; never checked on html, body, article and main, whose
# classes describe the whole page ("has-sidebar", "author-jane").
BOILERPLATE_WORDS = frozenset((
    "nav", "navbar", "navigation", "menu", "breadcrumb", "breadcrumbs", "footer", "sidebar",
    "share", "sharing", "social", "comment", "comments", "disqus", "related", "recommended",
    "recirc", "morestories", "promo", "newsletter", "subscribe", "subscription", "signup",
    "cookie", "cookies", "consent", "gdpr", "advert", "advertisement", "ad", "ads", "dfp",
    "sponsored", "outbrain", "taboola", "popup", "modal", "toolbar", "byline", "dateline",
    "caption", "skip", "masthead", "trending", "mostpopular", "readmore", "pagination",
    "sronly"))
BOILERPLATE_PAIRS = frozenset([("more", "stories"), ("most", "popular"), ("read", "more"),
                               ("sign", "up"), ("visually", "hidden"), ("screen", "reader"),
                               ("sr", "only"), ("ad", "slot")])
NO_CLASS_CHECK_TAGS = {"html", "body", "article", "main"}
# A class or id that marks the body itself.
BODY_WORDS = re.compile(
    r"(?:article|story|entry|post|content|news|text|main)[-_]?(?:body|content|text)|"
    r"articlebody|storytext|post-?text|body-?text|rich-?text|paywall|caas-body")
_BODY_WORD_PARTS = ("body", "content", "text", "paywall")
# Attributes rarer than class and id that mark a container; elements with any of them
# are found in one XPath call per page and classified apart (any style: which of them
# hide is for _hidden to say). A union of attribute paths is several times faster in
# libxml2 than a predicate tested on every element.
_RARE_MARKS = etree.XPath("(//@itemprop|//@role|//@aria-hidden|//@hidden|//@style)/..")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_COPYRIGHT = re.compile(r"(?:©|\(c\)|copyright\b)", re.IGNORECASE)
MAX_GAP = 12                  # light lines bridged when heavy blocks go on after them
EDGE_RATIO = 0.25             # of the peak block, a line's share to start or end the body
BLOCK_CHARS = 100             # text of a block that keeps it in the body, whatever the peak
EDGE_CHARS = 200              # ... and of a block whose lines may start or end the body
LISTING_FACTOR = 3            # a listing this many times the body's text is the main text
MAX_LINK_DENSITY = 0.5        # a line mostly of link text is navigation
MAX_LISTING_LINKS = 0.3       # a body whose text is more link text than this is a listing

# Body hint strength: the strongest hint present, with enough text, chooses the body.
_ITEMPROP, _BODY_CLASS, _ARTICLE, _MAIN = 4, 3, 2, 1
_HINT_TAGS = {"article": _ARTICLE, "main": _MAIN}
MIN_HINT_CHARS = 200
MIN_HINT_SHARE = 1 / 3          # of the page's text, for body hints to choose the body
_TRUSTED_HINT = _BODY_CLASS     # a body marked this strongly is kept whole
_HINT_CONTAINERS = {"div", "section", "article", "main", "td"}   # not one paragraph


@dataclass
class Line:
    text: str
    chars: int          # characters without whitespace
    noise_chars: int    # of them, in links and inline boilerplate (a share button)
    path: tuple["Mark", ...]   # marked containers open around it, outermost first: (kind, n),
                        # kind -1 hidden, 0 boilerplate, 1-4 a body hint's strength
    boilerplate: bool = False

    @property
    def weight(self) -> int:
        if self.boilerplate or self.noise_chars > self.chars * MAX_LINK_DENSITY:
            return 0
        return self.chars - self.noise_chars


# Elements that say what a page is rather than show it (crawler/pagemeta.py reads them).
DESCRIBING_TAGS = ("script", "meta", "title", "link", "time")


@dataclass
class Described:
    """What a page says of itself, gathered by the main-text walk as it passes, so that
    its metadata (crawler/pagemeta.py) needs no walk of its own: the page's script,
    meta, title, link and time elements (``tagged``), and its elements with an
    ``itemprop``, a role or a hiding attribute (``marked``), each in document order."""

    tagged: list[html.HtmlElement] = field(default_factory=list)
    marked: list[html.HtmlElement] | None = None     # None: not gathered


Page: TypeAlias = "str | html.HtmlElement"   # HTML, or the page already parsed by lxml
Mark = tuple[int, int]               # an open marked container: (kind, its number)


def parse_page(page: Page) -> html.HtmlElement | None:
    """A page's lxml tree, from its HTML or the tree itself; None if it has none."""
    if not isinstance(page, str):
        return page
    try:
        return html.fromstring(page)
    except (etree.ParserError, ValueError):
        return None


_HIDDEN, _BOILERPLATE = -1, 0   # hidden: not even a body hint inside shows it
_MARKS: dict[tuple[Any, ...], Any] = {}   # (tag, class, id) -> its kind (see Line.path) or None


def _mark(tag: str, element: html.HtmlElement, rare: set[html.HtmlElement]) -> int | None:
    """What a container is: ``_HIDDEN``, ``_BOILERPLATE``, a body hint's strength, or
    None. ``rare``: the page's elements with a role, itemprop or hiding attribute,
    classified one by one; the others by tag, class and id, cached."""
    if element in rare:
        return _classify(tag, element.get("class"), element.get("id"), element)
    key = (tag, element.get("class"), element.get("id"))
    try:
        return _MARKS[key]
    except KeyError:
        if len(_MARKS) > 50_000:          # a site shares its class names across pages
            _MARKS.clear()
        _MARKS[key] = mark = _classify(*key)
        return mark


def _classify(tag: str, class_names: str | None, ident: str | None,
              element: html.HtmlElement | None = None) -> int | None:
    if element is not None:
        if _hidden(element):
            return _HIDDEN
        prop = element.get("itemprop")
        if prop and "articlebody" in prop.lower():
            return _ITEMPROP
    names = f"{class_names or ''} {ident or ''}".lower()
    if tag in _HINT_CONTAINERS and any(part in names for part in _BODY_WORD_PARTS) \
            and BODY_WORDS.search(names):
        return _BODY_CLASS
    if tag in _HINT_TAGS:
        return _HINT_TAGS[tag]
    if tag in BOILERPLATE_TAGS or (element is not None and _aside_role(element)):
        return _BOILERPLATE
    if tag not in NO_CLASS_CHECK_TAGS and _boilerplate_names(names):
        return _BOILERPLATE
    return None


def _hidden(element: html.HtmlElement) -> bool:
    # Not aria-hidden: pages set it on visible tab panels and accordions too.
    return element.get("hidden") is not None \
        or "display:none" in (element.get("style") or "").replace(" ", "")


def _aside_role(element: html.HtmlElement) -> bool:
    role = element.get("role")
    return bool(role) and role.lower() in BOILERPLATE_ROLES


def _boilerplate_names(names: str) -> bool:
    words = _NON_WORD.split(names)
    return not BOILERPLATE_WORDS.isdisjoint(words) or \
        not BOILERPLATE_PAIRS.isdisjoint(pairwise(words))


# Inline tags never worth classifying (no share button is a <b>), and the void tags
# that describe the page (a mark on an element with no text changes no line).
_PLAIN_TAGS = {"b", "i", "em", "strong", "u", "s", "q", "sup", "sub", "small", "big", "font",
               "abbr", "cite", "code", "kbd", "samp", "var", "tt", "mark", "ins", "del",
               "strike", "time", "img", "br", "hr", "wbr", "bdi", "bdo", "meta", "link"}
_DESCRIBING_SHOWN = {"meta", "link", "time"}    # the describing tags the text walk enters


def _lines(root: html.HtmlElement, dropped: frozenset[str] = DROPPED_TAGS,
           described: Described | None = None) -> list[Line]:
    """The text lines of ``root`` (read, not changed), boilerplate resolved; what the
    page says of itself gathered into ``described`` on the way, when given.

    One walk; the walk's state is what is open around the text: ``noise`` (open links
    and inline boilerplate: their text counts as noise in its line), ``path`` (the
    open marked containers) and ``pre`` (inside preformatted text, whose line breaks
    and indents stay). Entering an element saves the state on ``saved``, leaving it
    restores it. The hot loop of the extractor, kept flat for speed."""
    lines: list[Line] = []
    parts: list[str] = []
    noise_chars = 0
    noise, pre, containers = 0, False, 0
    path: tuple[Mark, ...] = ()
    saved: list[tuple[int, tuple[Mark, ...], bool]] = []
    marked = _RARE_MARKS(root)
    rare = set(marked)
    tagged = None
    if described is not None:
        described.marked, tagged = marked, described.tagged

    def end_line() -> None:
        raw = "".join(parts)
        words = raw.split()
        if words:
            text = _preformatted(raw) if pre else " ".join(words)
            lines.append(Line(text, sum(map(len, words)), noise_chars, path))
        parts.clear()

    walker = etree.iterwalk(root, events=("start", "end", "comment"))
    for event, element in walker:
        if event == "start":
            tag = element.tag              # lowercase from lxml's HTML parser
            saved.append((noise, path, pre))
            if tag in dropped:
                if tagged is None:
                    pass
                elif tag == "script" or tag == "title":
                    tagged.append(element)
                elif len(element):           # <head>, a subtree the text skips
                    tagged.extend(element.iter(*DESCRIBING_TAGS))
                walker.skip_subtree()        # its "end" still comes, for the tail
                continue
            block = tag in BLOCK_TAGS
            if block and parts:
                end_line()
                noise_chars = 0
            if tag == "a":
                noise += 1
            elif tag == "pre":
                pre = True
            elif tag in _PLAIN_TAGS:
                if tagged is not None and tag in _DESCRIBING_SHOWN:
                    tagged.append(element)
            else:
                mark = _mark(tag, element, rare)
                if mark is None:
                    pass
                elif block:
                    containers += 1          # numbered: an element's id() is reused
                    path = (*path, (mark, containers))
                elif mark <= _BOILERPLATE:
                    noise += 1
            value = element.text
        else:
            if event == "end":
                if parts and element.tag in BLOCK_TAGS:
                    end_line()
                    noise_chars = 0
                noise, path, pre = saved.pop()
                if element is root:
                    break
            value = element.tail
        if value:
            parts.append(value)
            if noise:
                noise_chars += sum(map(len, value.split()))     # as a line's chars
    if parts:
        end_line()
    _resolve_boilerplate(lines)
    return lines


def _preformatted(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\r\n").splitlines())


def _resolve_boilerplate(lines: list[Line]) -> None:
    """Mark each line boilerplate if a hidden container is open around it, or a
    boilerplate container with no body hint inside that container. A hidden or
    boilerplate container that holds most of the page's text is a misnamed wrapper and
    is not counted."""
    held: dict[Mark, int] = {}
    total = 0
    for line in lines:
        text = line.chars - line.noise_chars
        total += text
        for entry in line.path:
            if entry[0] <= _BOILERPLATE:
                held[entry] = held.get(entry, 0) + text
    misnamed = {entry for entry, text in held.items() if text * 2 > total}
    for line in lines:
        hidden = boilerplate = False
        for entry in line.path:
            if entry[0] > _BOILERPLATE:
                boilerplate = False
            elif entry not in misnamed:
                hidden = hidden or entry[0] == _HIDDEN
                boilerplate = True
        line.boilerplate = hidden or boilerplate


def page_lines(page: Page) -> list[str]:
    """The visible text of an HTML page (a string, or the page already parsed by lxml,
    which is read, not changed), one line per block element, link text included."""
    root = parse_page(page)
    return [] if root is None else [line.text for line in _lines(root)]


def visible_text(page: Page) -> str:
    """Every visible text of a page, one line per block element (the floor any
    extractor must beat)."""
    return "\n".join(page_lines(page))


def _body_hint(lines: list[Line]) -> tuple[list[Line], int]:
    """``(lines, strength)``: the lines inside the page's strongest body hint that
    holds enough text, and the hint's strength; all lines and 0 when there is none.

    A hint with a hint of its kind inside holding a third of its text gives way to it
    (a page-wide "content" around the article's own). Of several containers with the
    same hint (a body split by ads, say), every one with a third of the largest's text
    counts; hints that hold less than ``MIN_HINT_SHARE`` of the page's text give way to
    weaker ones (a page whose few small "entry-content" boxes sit among its body)."""
    weight_by_hint, heaviest_inner = _hint_weights(lines)
    total = sum(line.weight for line in lines)
    for strength in (_ITEMPROP, _BODY_CLASS, _ARTICLE, _MAIN):
        weights = {hint: weight for hint, weight in weight_by_hint.items()
                   if hint[0] == strength and heaviest_inner.get(hint, 0) * 3 < weight}
        if weights and max(weights.values()) >= MIN_HINT_CHARS:
            floor = max(weights.values()) / 3
            chosen = {hint for hint, weight in weights.items() if weight >= floor}
            if sum(weights[hint] for hint in chosen) >= total * MIN_HINT_SHARE:
                return [line for line in lines if chosen.intersection(line.path)], strength
    return lines, 0


def _hint_weights(lines: list[Line]) -> tuple[dict[Mark, int], dict[Mark, int]]:
    """The weight of the lines in each body hint, and for each hint the weight of the
    heaviest hint of its kind directly inside it."""
    weight_by_hint: dict[Mark, int] = {}
    outer_of: dict[Mark, Mark] = {}
    for line in lines:
        enclosing: dict[int, Mark] = {}                     # strength -> innermost hint so far
        for hint in line.path:
            if hint[0] <= _BOILERPLATE:
                continue
            weight_by_hint[hint] = weight_by_hint.get(hint, 0) + line.weight
            if hint[0] in enclosing:
                outer_of[hint] = enclosing[hint[0]]
            enclosing[hint[0]] = hint
    heaviest_inner: dict[Mark, int] = {}
    for inner, outer in outer_of.items():
        heaviest_inner[outer] = max(heaviest_inner.get(outer, 0), weight_by_hint[inner])
    return weight_by_hint, heaviest_inner


def _blocks(weights: list[int], k: int) -> list[int]:
    """The weight of the block of ``k`` lines centred on each line."""
    before = (k - 1) // 2
    return [sum(weights[max(0, i - before):i - before + k]) for i in range(len(weights))]


def _peak_region(weights: list[int], k: int, keep_ratio: float) -> tuple[int, int]:
    """``(start, end)`` of the body: around the heaviest block of ``k`` lines, while the
    blocks stay above ``keep_ratio`` of it, bridging up to ``MAX_GAP`` lighter lines."""
    blocks = _blocks(weights, k)
    peak = max(range(len(blocks)), key=blocks.__getitem__)
    # A block with BLOCK_CHARS of text stays whatever the peak: the dialogue of a novel
    # next to its long paragraphs, the short steps of a guide.
    floor = min(blocks[peak] * keep_ratio, BLOCK_CHARS)
    start = end = peak
    step = 1
    while end + step < len(blocks) and step <= MAX_GAP + 1:
        if blocks[end + step] >= floor:
            end, step = end + step, 1
        else:
            step += 1
    step = 1
    while start - step >= 0 and step <= MAX_GAP + 1:
        if blocks[start - step] >= floor:
            start, step = start - step, 1
        else:
            step += 1
    # A centred block lets a light line ride on a heavy neighbour: trim light lines
    # off the two edges (light lines inside the body stay).
    edge = min(blocks[peak] * EDGE_RATIO, EDGE_CHARS) / k
    while start < end and weights[start] < edge:
        start += 1
    while end > start and weights[end] < edge:
        end -= 1
    return start, end


def extract_main_text(page: Page, k: int = 3, keep_ratio: float = 0.1,
                      described: Described | None = None) -> str:
    """The main text of a page (HTML, or its lxml tree: lines joined by newlines), or ""
    if it has none; what the page says of itself gathered into ``described`` on the
    way, when given (see ``Described``)."""
    if not 1 <= k <= 5:
        raise ValueError(f"block size k must be 1..5, got {k}")
    root = parse_page(page)
    if root is None:
        return ""
    text = _main_text(_lines(root, described=described), k, keep_ratio)
    if not text:
        # All a crawler that runs no JavaScript gets of some pages is in <noscript>.
        text = _main_text(_lines(root, DROPPED_TAGS - {"noscript"}), k, keep_ratio)
    return text


def _main_text(all_lines: list[Line], k: int, keep_ratio: float) -> str:
    lines, hint = _body_hint(all_lines)
    weights = [line.weight for line in lines]
    if not any(weights):
        return ""
    if hint >= _TRUSTED_HINT:
        start, end = 0, len(lines) - 1
    else:
        start, end = _peak_region(weights, k, keep_ratio)
        start, end = _listing_instead(lines, weights, (start, end), k, keep_ratio)
        if _is_listing(lines[start:end + 1]):
            # A listing's items (headlines, teasers, link text included) are its text,
            # up to its pager and the page's copyright line.
            return "\n".join(line.text for line in lines[start:end + 1]
                             if not line.boilerplate and not _COPYRIGHT.match(line.text)
                             and not (line.noise_chars == line.chars and line.chars < 12))
    return "\n".join(line.text for line in lines[start:end + 1]
                     if line.weight or (not line.boilerplate and not line.noise_chars))


def _listing_instead(lines: list[Line], weights: list[int], region: tuple[int, int], k: int,
                     keep_ratio: float) -> tuple[int, int]:
    """The region of the page's largest listing (its link text counted) if it holds
    ``LISTING_FACTOR`` times the text of ``region`` (a grid of cards around a short
    introduction), else ``region``."""
    chars = [0 if line.boilerplate else line.chars for line in lines]
    start, end = _peak_region(chars, k, keep_ratio)
    text = sum(weights[region[0]:region[1] + 1])
    if _is_listing(lines[start:end + 1]) and sum(chars[start:end + 1]) > LISTING_FACTOR * text:
        return start, end
    return region


def _is_listing(region: list[Line]) -> bool:
    """Is the region headlines with teasers (a section front, search results), not a
    body? Its text is then largely link text, where an article's links are a few words
    of a paragraph. (Not asked of a body the page marks as such.)"""
    chars = sum(line.chars for line in region if not line.boilerplate)
    links = sum(line.noise_chars for line in region if not line.boilerplate)
    return links > chars * MAX_LISTING_LINKS
