"""Which pages of a crawl are of one kind, from their URLs: URL templates learnt per host.

``render: auto`` gives the pages of one kind one verdict. A site's URLs say a page's
kind once their variable parts are abstracted: ``/author/albert-einstein/`` and
``/author/jane-austen/`` are one kind, ``/tag/love/page/1/`` and ``/tag/life/page/2/``
another. Numbers, ids and slugs (three or more words joined by ``-`` or ``_``) are
abstracted from their shape alone. A word is a variable once it is seen to vary: the
templates are learnt from the links of the pages a crawl fetches, so by the time an
author's page is fetched, the list that linked it has shown several authors at that
place. A path segment below the first whose place (host, and template of the segments
before it) has taken ``VARIABLE_AT`` distinct shapes is a variable, ``{w}``: the authors
of ``/author/<name>/`` vary in ``/author/<name>/page/2/`` too. Where slugs are seen,
``VARIABLE_BESIDE_SLUGS`` shapes are enough: the words beside them are short titles
(``/2026/05/budget-vote/``).

The first segment is never learnt as a variable: it names a site's sections
(``/js/``, ``/tableful/``, ``/login``), whose pages are of different kinds, and mixing
a section whose pages need a browser with one whose pages do not would give both one
verdict. A first segment that is a number, an id or a slug is abstracted all the same.

Why URLs rather than the fetched HTML's tag structure: a section whose pages a script
writes shares its header, menus and footer with the rest of the site, so by structure
it is most like the plain pages whose verdict it must not take; its URLs set it apart.
"""

import re
from functools import lru_cache
from urllib.parse import urlsplit

VARIABLE_AT = 5          # distinct shapes at one place that make it a variable
VARIABLE_BESIDE_SLUGS = 3   # ... or that many where one is a slug: the others are words
                            # a slug's place takes (a one- or two-word title)
MAX_PLACES = 20000       # places a crawl's templates track, and variables it learns (each
                         # bound apart); past either, learning stops
MAX_SEEN = 20000         # URLs a crawl's templates remember having learnt from
_NUMBER = re.compile(r"\d+")
_ID = re.compile(r"^(?=.*\d)[A-Za-z0-9_-]{12,}$|^[0-9a-fA-F-]{8,}$")
_SLUG = re.compile(r"^[^\W_]+(?:[-_][^\W_]+){2,}$")
_EXTENSION = re.compile(r"^(.+?)(\.[A-Za-z0-9]{1,5})$")


@lru_cache(maxsize=65536)
def segment_shape(segment: str) -> str:
    """A path segment with what its shape says is variable abstracted: an id ``{id}``,
    a slug ``{w}``, numbers ``{n}``; an extension is kept."""
    match = _EXTENSION.match(segment)
    stem, extension = match.groups() if match else (segment, "")
    if _ID.match(stem):
        return "{id}" + extension
    if _SLUG.match(stem):
        return "{w}" + extension
    return _NUMBER.sub("{n}", stem) + extension


def _host_and_segments(url: str) -> tuple[str, list[str]]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.path.lstrip("/").split("/")


def _place(host: str, prefix: list[str]) -> str:
    """A place a segment takes values at: its host and the template of the segments
    before it."""
    return f"{host}|{'/'.join(prefix)}"


class UrlTemplates:
    """A crawl's URL templates: the shapes seen at each place, and the places that are
    variables (learnt here, or by another process and given with ``add_variables``),
    ``MAX_PLACES`` of each at most."""

    def __init__(self) -> None:
        self.shapes: dict[str, set[str]] = {}
        self.variables: set[str] = set()
        self.new_variables: list[str] = []     # learnt here, not yet shared
        self.seen: set[str] = set()            # URLs learnt from (most links repeat)
        self.shared_read = 0                   # entries of the crawl's shared list read

    def learn(self, urls: list[str]) -> None:
        """Count the shapes each URL not seen before shows at each of its places below
        the first."""
        if len(self.seen) > MAX_SEEN:
            self.seen.clear()
        for url in urls:
            if url in self.seen:
                continue
            self.seen.add(url)
            host, segments = _host_and_segments(url)
            prefix: list[str] = []
            for position, segment in enumerate(segments):
                shape = segment_shape(segment)
                place = _place(host, prefix)
                if position > 0 and segment and place not in self.variables:
                    self._saw(place, shape)
                prefix.append("{w}" if segment and place in self.variables else shape)

    def template(self, url: str) -> str:
        """The URL's host and path with its variable parts abstracted (the query is left
        out)."""
        host, segments = _host_and_segments(url)
        prefix: list[str] = []
        for segment in segments:
            place = _place(host, prefix)
            variable = segment and place in self.variables     # "/x/" ends in "" alike
            prefix.append("{w}" if variable else segment_shape(segment))
        return f"{host}/{'/'.join(prefix)}"

    def add_variables(self, places: list[str]) -> None:
        """Places another process learnt to be variables (up to ``MAX_PLACES`` in all)."""
        for place in places:
            if len(self.variables) >= MAX_PLACES:
                break
            self.variables.add(place)
            self.shapes.pop(place, None)

    def take_new_variables(self) -> list[str]:
        new, self.new_variables = self.new_variables, []
        return new

    def _saw(self, place: str, shape: str) -> None:
        if len(self.variables) >= MAX_PLACES:
            return
        shapes = self.shapes.get(place)
        if shapes is None:
            if len(self.shapes) >= MAX_PLACES:
                return
            shapes = self.shapes[place] = set()
        shapes.add(shape)
        enough = VARIABLE_BESIDE_SLUGS if any(s.startswith("{w}") for s in shapes) \
            else VARIABLE_AT
        if len(shapes) >= enough:
            self.variables.add(place)
            self.new_variables.append(place)
            del self.shapes[place]
