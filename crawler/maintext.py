"""Main-text extraction by line-block distribution (thesis 4.3.1.4).

The page is reduced to text lines: scripts, styles and link text are removed
(navigation, related links and footers are mostly links) and every block
element starts a new line. A line block is ``k`` consecutive lines (k <= 5);
its length is their character count without whitespace. The body is where
the block lengths peak: from the longest block the region grows in both
directions, a line at a time, while the block centred on the line stays
above a fraction of that peak, so short neighbours (ads, comments, share
buttons) are left out. Linear in
the size of the page; no training, no site-specific rules.
"""

import re

from lxml import etree, html

BLOCK_TAGS = {
    "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption",
    "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li",
    "main", "nav", "ol", "p", "pre", "section", "table", "td", "th", "tr", "ul",
}
DROPPED_TAGS = ("script", "style", "noscript", "template", "iframe", "select", "button")
SKIPPED_TAGS = {*DROPPED_TAGS, "a"}      # link text too: navigation is mostly links
_SPACE = re.compile(r"\s+")


def page_lines(page):
    """The visible non-link text of an HTML page (a string, or the page already parsed
    by lxml, which is read, not changed), one line per block element."""
    if isinstance(page, str):
        try:
            page = html.fromstring(page)
        except (etree.ParserError, ValueError):
            return []
    return [_SPACE.sub(" ", line).strip() for line in "".join(_text_parts(page)).split("\n")]


def _text_parts(root):
    """The text of ``root`` in document order, without scripts, styles, comments and
    link text (the text after them stays), a newline around every block element."""
    parts = []
    walker = etree.iterwalk(root, events=("start", "end", "comment", "pi"))
    skipped = None
    for event, element in walker:
        if event in ("comment", "pi"):
            if element.tail:
                parts.append(element.tail)
            continue
        tag = element.tag.lower() if isinstance(element.tag, str) else ""
        if event == "start":
            if tag in SKIPPED_TAGS:
                walker.skip_subtree()       # its "end" still comes, for the tail
                skipped = element
                continue
            if tag in BLOCK_TAGS:
                parts.append("\n")
            if element.text:
                parts.append(element.text)
            continue
        if element is skipped:
            skipped = None
        elif tag in BLOCK_TAGS:
            parts.append("\n")
        if element.tail and element is not root:
            parts.append(element.tail)
    return parts


def extract_main_text(page, k=3, keep_ratio=0.3):
    """The main text of a page (HTML, or its lxml tree: lines joined by newlines), or ""
    if it has none."""
    if not 1 <= k <= 5:
        raise ValueError(f"block size k must be 1..5, got {k}")
    lines = [line for line in page_lines(page) if line]
    if not lines:
        return ""
    lengths = [len(line.replace(" ", "")) for line in lines]
    before = (k - 1) // 2                   # a block is centred on its line
    blocks = [sum(lengths[max(0, i - before):i - before + k]) for i in range(len(lines))]
    peak = max(range(len(blocks)), key=blocks.__getitem__)
    floor = blocks[peak] * keep_ratio
    start = peak
    while start > 0 and blocks[start - 1] >= floor:
        start -= 1
    end = peak
    while end + 1 < len(blocks) and blocks[end + 1] >= floor:
        end += 1
    # A centred block lets a short line ride on a long neighbour: trim short
    # lines off the two edges (short lines inside the body stay).
    while start < end and lengths[start] < floor / k:
        start += 1
    while end > start and lengths[end] < floor / k:
        end -= 1
    return "\n".join(lines[start:end + 1])
