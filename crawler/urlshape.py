"""Whether a URL is well formed enough to fetch: what a page, sitemap, feed or redirect
names is hostile input, and a malformed one is refused with the reason here instead of
failing deep in a download (or raising where nothing catches it).

Only the shape is checked (scheme, host, port, characters, length); where a URL points
is the address guard's question."""

import re
from urllib.parse import urlsplit

from crawler.links import is_plain_url

MAX_HOST_LENGTH = 253          # a DNS name's limit (RFC 1035), dots included
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")   # "_" is met in the wild


def url_problem(url: str, max_length: int = 0) -> str | None:
    """Why ``url`` cannot be fetched (``"port out of range"``, ...), or None if it can:
    an http(s) URL of printable characters (``max_length`` at most, 0: any), with a
    host that is an IP address or a DNS name, and a port in 1-65535."""
    if max_length and len(url) > max_length:
        return f"longer than {max_length} characters"
    # most links: one regular expression, no parsing (a longer one may have a host
    # over MAX_HOST_LENGTH)
    if len(url) <= MAX_HOST_LENGTH and is_plain_url(url):
        return None
    if not url.isprintable() or any(char.isspace() for char in url):
        return "control or space characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:               # a bad IPv6 literal, a port out of range
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return f"scheme {parts.scheme!r}"
    if port == 0:
        return "port 0"
    return host_problem(parts.hostname or "", bracketed="[" in parts.netloc)


def host_problem(host: str, bracketed: bool = False) -> str | None:
    """Why ``host`` (as urlsplit gives it, lowercase) is no IP address or DNS name."""
    if not host:
        return "no host"
    if bracketed:                            # urlsplit checked the IPv6 literal
        return None
    try:
        name = host.encode("idna").decode("ascii")
    except UnicodeError:
        return f"invalid host {host[:60]!r}"
    if len(name) > MAX_HOST_LENGTH:
        return f"host longer than {MAX_HOST_LENGTH} characters"
    if not all(_LABEL.match(label) for label in name.removesuffix(".").split(".")):
        return f"invalid host {host[:60]!r}"
    return None
