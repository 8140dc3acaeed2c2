"""A generated notices site whose list pages link PDF and DOCX files, with its truth.

The notices themselves are the files, as on real tenders' and regulators' sites (for
the documents crawl test).

``generate_notice_site`` writes ``www/<host>/``: an index of list pages; each list page
links its notices' files (a PDF or a DOCX each, made from their words by
``manager.local.documentfiles``) and the notices' HTML pages, and every list page links
the site's rules (one PDF linked from everywhere). Also: a copy of one notice under
another URL (the same bytes), a ``/download/`` link with no extension that
``NOTICE_LOCATIONS`` serves as ``application/pdf``, a broken PDF, one larger than
``NOTICE_MAX_BYTES``, a PDF under ``/private/``, which robots.txt forbids, and one at
the cloud metadata address, which the URL guard refuses; two files that redirect, one
into ``/private/``, one to the cloud metadata address. The
manifest (also ``notices.json``) names every page and file with what a crawl must make
of it.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from manager.local.documentfiles import docx_file, pdf_file

Manifest = dict[str, Any]
# The size limit the test rule sets: the oversized file is above it, every other below.
NOTICE_MAX_BYTES = 64 * 1024
# A document link the URL guard refuses (a cloud metadata address).
GUARDED = "http://169.254.169.254/latest/meta-data.pdf"
# A universal rule for the site: list pages followed, notice pages stored with their
# title, /download/ links taken (their answers are documents by content type).
NOTICE_RULE = {"rules": [{"allow": [r"/list-\d+\.html$"], "follow": True},
                         {"allow": [r"/notices/\d+\.html$"], "follow": False,
                          "fields": {"title": "//h1/text()"}},
                         {"allow": [r"/download/"], "follow": False}],
               "documents": {"extensions": ["pdf", "docx"], "max_bytes": NOTICE_MAX_BYTES}}
# A precise rule for it: list pages in turn, an entry's link a notice's page or its file.
NOTICE_PRECISE_RULE = {"first_page_xpath": {"list_from": "//ul/li", "second_page_url": "a/@href",
                                            "name": "a/text()"},
                       "second_page_xpath": {"title": "//h1/text()"},
                       "next_page_xpath": "//a[@rel='next']/@href", "required": ["name"],
                       "documents": {"max_bytes": NOTICE_MAX_BYTES}}
# nginx: PDF and DOCX by their types, /download/ as PDF whatever the name.
NOTICE_LOCATIONS = [
    ("location /files/ { types { application/pdf pdf; application/"
     "vnd.openxmlformats-officedocument.wordprocessingml.document docx; } }"),
    "location /download/ { default_type application/pdf; }",
    "location = /files/moved.pdf { return 302 /private/moved.pdf; }",
    "location = /files/away.pdf { return 302 http://169.254.169.254/latest/away.pdf; }"]


@dataclass
class NoticeSpec:
    port: int
    host: str = "127.0.0.1"
    lists: int = 3
    notices_per_list: int = 4

    def base(self) -> str:
        return f"http://{self.host}:{self.port}"


def notice_words(number: int) -> list[str]:
    return [f"Public notice {number}", f"Tender {number * 7} for road works in district {number}",
            f"Deadline: {1 + number % 28} March 2027"]


def generate_notice_site(root: str | Path, spec: NoticeSpec) -> Manifest:
    """Write the site under ``root/www/<host>/`` and return its manifest."""
    www = Path(root) / "www" / spec.host
    base = spec.base()
    files: dict[str, dict[str, Any]] = {}       # URL -> what a crawl makes of it
    pages: list[str] = [f"{base}/"]
    rules = _write(www, "files/rules-2027.pdf", pdf_file([["Procurement rules 2027"]]))
    files[f"{base}/files/rules-2027.pdf"] = _file(rules, "pdf", "Procurement rules 2027")
    list_links = []
    for page in range(1, spec.lists + 1):
        links = [f"{base}/files/rules-2027.pdf"]
        for offset in range(spec.notices_per_list):
            number = (page - 1) * spec.notices_per_list + offset + 1
            links += _notice(www, base, number, files, pages)
        if page == 1:
            links += _oddities(www, base, files)
        following = f"{base}/notices/list-{page + 1}.html" if page < spec.lists else None
        _write_html(www, f"notices/list-{page}.html", f"Notices, page {page}", links,
                    following)
        list_links.append(f"{base}/notices/list-{page}.html")
        pages.append(list_links[-1])
    _write_html(www, "index.html", "Notices", list_links)
    (www / "robots.txt").write_text("User-agent: *\nDisallow: /private/\n")
    manifest = {"start_url": f"{base}/", "pages": pages, "files": files,
                "disallowed": [f"{base}/private/minutes.pdf", f"{base}/private/moved.pdf"],
                "guarded": [GUARDED], "redirected": [f"{base}/files/moved.pdf",
                                                     f"{base}/files/away.pdf"]}
    (Path(root) / "notices.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def _notice(www: Path, base: str, number: int, files: dict[str, dict[str, Any]],
            pages: list[str]) -> list[str]:
    """Write notice ``number``'s file (odd: PDF, even: DOCX) and page; its links."""
    words = notice_words(number)
    kind = "pdf" if number % 2 else "docx"
    data = pdf_file([words[:2], words[2:]]) if kind == "pdf" else docx_file(words)
    path = f"files/notice-{number}.{kind}"
    files[f"{base}/{path}"] = _file(_write(www, path, data), kind, words[1])
    page = f"notices/{number}.html"
    _write_html(www, page, f"Notice {number}", [f"{base}/{path}"])
    pages.append(f"{base}/{page}")
    return [f"{base}/{page}", f"{base}/{path}"]


def _oddities(www: Path, base: str, files: dict[str, dict[str, Any]]) -> list[str]:
    """The copy, the extension-less download, the broken, the huge and the forbidden
    files; the links to them, and to a file at the cloud metadata address."""
    copy = (www / "files" / "notice-1.pdf").read_bytes()
    files[f"{base}/archive/notice-1-copy.pdf"] = _file(
        _write(www, "archive/notice-1-copy.pdf", copy), "pdf", notice_words(1)[1])
    download = pdf_file([["Amendment to notice 2", "Deadline moved to April"]])
    files[f"{base}/download/amendment-2"] = _file(
        _write(www, "download/amendment-2", download), "pdf", "Deadline moved to April")
    broken = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R"      # cut off
    files[f"{base}/files/broken.pdf"] = _file(_write(www, "files/broken.pdf", broken),
                                              "broken", "")
    huge = pdf_file([["Annual report"] * 40] * (NOTICE_MAX_BYTES // 400))
    assert len(huge) > NOTICE_MAX_BYTES
    files[f"{base}/files/annual-report.pdf"] = _file(
        _write(www, "files/annual-report.pdf", huge), "huge", "")
    _write(www, "private/minutes.pdf", pdf_file([["Minutes"]]))
    _write(www, "private/moved.pdf", pdf_file([["Minutes, moved"]]))
    return [f"{base}/archive/notice-1-copy.pdf", f"{base}/download/amendment-2",
            f"{base}/files/broken.pdf", f"{base}/files/annual-report.pdf",
            f"{base}/private/minutes.pdf", GUARDED, f"{base}/files/moved.pdf",
            f"{base}/files/away.pdf"]


def _file(data: bytes, kind: str, words: str) -> dict[str, Any]:
    return {"kind": kind, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "words": words}


def _write(www: Path, path: str, data: bytes) -> bytes:
    target = www / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return data


def _write_html(www: Path, path: str, title: str, links: list[str],
                following: str | None = None) -> None:
    """A page: its title, a list of ``links``, and a link to the ``following`` page."""
    anchors = "\n".join(f'<li><a href="{link}">{link.rsplit("/", 1)[-1]}</a></li>'
                        for link in links)
    more = f'<p><a rel="next" href="{following}">Next</a></p>' if following else ""
    _write(www, path, (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}"
                       f"</title></head><body><h1>{title}</h1><ul>{anchors}</ul>{more}"
                       f"</body></html>").encode())
