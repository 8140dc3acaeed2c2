"""The manager's HTTP resources beyond scrapyd's own.

``Root`` is scrapyd's root; the endpoints it serves come from the config's
``[services]`` (manager/node.py), so scrapyd's own classes serve everything
scrapyd clients know. ``Schedule`` is scrapyd's, but refuses job ids,
project and spider names that are not plain names, with a message saying
which (scrapyd would only refuse a path that leaves its logs directory, and
with a less telling error), and has the spider list made in a thread
(manager/spiderlist.py). ``Sites`` answers ``sites.json`` (a crawl's health per site).
``ClusterView`` answers ``cluster.json``: every
node in the registry and the jobs running on each. ``Overview`` serves the web UI
(``manager/ui/``), as do ``validate.json``, ``submit.json`` and ``preview.json``
(manager/json_endpoints.py); ``/metrics`` this node's spiders' Prometheus metrics.
A ``POST`` a browser marks as sent from another site, or whose ``Origin`` is not the
manager's own, is refused (``CrossSiteRefusal``).
"""

import io
import json
import logging
import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from scrapyd import website
from scrapyd.webservice import ListJobs as ScrapydListJobs
from scrapyd.webservice import Schedule as ScrapydSchedule
from scrapyd.webservice import WsResource, param
from twisted.internet import threads
from twisted.web import error, http, resource, server, static

from manager.everynode import registered_nodes
from manager.json_endpoints import Submit
from manager.metrics import MetricsPage, metrics_dir, node_registry
from manager.spiderlist import SpiderListInThread
from master.figures import FigureReader
from master.frontier import Frontier
from master.keys import Keys
from master.registry import Heartbeats, JobRegistry
from master.sitehealth import read_site_health

logger = logging.getLogger(__name__)
UI_DIR = Path(__file__).parent / "ui"

_NAME = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
CHECKED = (b"project", b"spider", b"jobid")


class Root(website.Root):
    """scrapyd's Root plus the web UI under ``/ui/`` and its ``submit`` endpoint;
    ``crawlcluster`` holds the clients the extra resources use."""

    def __init__(self, config: Any, app: Any) -> None:
        super().__init__(config, app)
        self.putChild(b"ui", static.File(str(UI_DIR)))
        self.putChild(b"submit.json", Submit(self))
        self.putChild(b"metrics", NodeMetrics(self))

    @property
    def crawlcluster(self) -> dict[str, Any]:
        return self.app.crawlcluster

    def getChildWithDefault(self, path: bytes, request: Any) -> Any:
        if request.method == b"POST":
            if request.getHeader("sec-fetch-site") == "cross-site":
                return CrossSiteRefusal("Sec-Fetch-Site: cross-site")
            origin = request.getHeader("origin")
            if origin is not None and not is_own_origin(origin, request):
                return CrossSiteRefusal(f"Origin {origin} is not this manager's")
        return super().getChildWithDefault(path, request)


def _origin(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of ``scheme://netloc``, the port made explicit; None
    for anything that is not an http(s) origin."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
        return None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def is_own_origin(origin: str, request: Any) -> bool:
    """Whether a request's ``Origin`` is the manager's own: the scheme, host and port of
    the ``Host`` the request came to (``null`` and any other origin are not)."""
    host = request.getHeader("host")
    scheme, _, netloc = origin.strip().partition("://")
    if not host or not netloc:
        return False
    own = _origin("https" if request.isSecure() else "http", host.strip())
    return own is not None and _origin(scheme.lower(), netloc) == own


class CrossSiteRefusal(resource.Resource):
    """403 for a ``POST`` a browser says another site's page sent (``Sec-Fetch-Site:
    cross-site``), or whose ``Origin`` is not the manager's own (browsers send no
    Sec-Fetch-* to plain-HTTP LAN addresses, but do send Origin with a form's or a
    script's POST): a form or script of any page the user (or a rendering spider) opens
    could otherwise schedule, cancel or delete with the manager's loopback trust or the
    browser's remembered credentials. Clients other than browsers (scrapyd-client, the
    ``crawlcluster`` CLI) send neither header; the UI's own requests come from the
    manager's origin. ``why`` names the header that refused the request."""

    isLeaf = True

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    def render(self, request: Any) -> bytes:
        request.setResponseCode(http.FORBIDDEN)
        request.setHeader("Content-Type", "application/json")
        return json.dumps({"status": "error", "message": "refused: a POST sent by another "
                           f"site's page ({self.why})"}).encode()


class SizeLimitedRequest(server.Request):
    """A request whose body is over ``max_body`` bytes is answered 413 and its
    connection closed before the rest is read (Twisted would buffer any size)."""

    max_body = 1 << 20
    refused = False
    received = 0

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self.max_body:
            self._refuse()
        else:
            super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        self.received += len(data)
        if not self.refused and self.received > self.max_body:
            self._refuse()
        if not self.refused:
            super().handleContentChunk(data)

    def allContentReceived(self) -> None:
        if not self.refused:
            super().allContentReceived()  # type: ignore[misc]

    def _refuse(self) -> None:
        self.refused = True
        body = json.dumps({"status": "error", "message": f"request body over "
                           f"{self.max_body} bytes (CRAWLCLUSTER_MAX_MESSAGE_BYTES)"}).encode()
        transport: Any = self.channel.transport
        transport.write(
            b"HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        transport.loseConnection()


def limit_request_size(app: Any, max_body: int) -> None:
    """Give the manager's web site ``SizeLimitedRequest``s of at most ``max_body``."""
    from twisted.application.service import IServiceCollection

    class LimitedRequest(SizeLimitedRequest):
        pass

    LimitedRequest.max_body = max_body
    services: Any = IServiceCollection(app)
    for service in services:
        for arg in getattr(service, "args", ()):
            if isinstance(arg, server.Site):
                arg.requestFactory = LimitedRequest


class Schedule(SpiderListInThread, ScrapydSchedule):
    listing_methods = (b"POST",)

    def render_POST(self, txrequest: Any) -> Any:
        self._refuse_unlisted(txrequest)
        for name in CHECKED:
            if len(txrequest.args.get(name, ())) > 1:
                raise error.Error(code=http.OK, message=(
                    f"{name.decode()} given {len(txrequest.args[name])} times: give it "
                    "once").encode())
            for value in txrequest.args.get(name, ()):
                if not _NAME.fullmatch(value):
                    shown = value.decode("utf-8", "replace")
                    raise error.Error(code=http.OK, message=(
                        f"{name.decode()} {shown!r} is not allowed: use 1-128 letters, digits, "
                        "'_', '.', '-'").encode())
        return super().render_POST(txrequest)


class ClusterView(WsResource):
    """Every registered node (ZooKeeper) with its live jobs (the master's registry)."""

    def render_GET(self, txrequest: Any) -> dict[str, Any]:
        clients = self.root.crawlcluster
        settings, zookeeper, redis = clients["settings"], clients["zookeeper"], clients["redis"]
        nodes = {name: dict(info, jobs={})
                 for name, info in registered_nodes(settings, zookeeper).items()}
        registry = JobRegistry.from_settings(redis, settings)
        for job, info in sorted(registry.live_jobs().items()):
            node = nodes.setdefault(info.get("node") or info["host"], {"registered": False,
                                                                        "jobs": {}})
            node["jobs"][job] = info
        beats = Heartbeats.from_settings(redis, settings).status()
        return {"nodes": nodes, "modules": beats}


class Overview(WsResource):
    """What the Status page draws: the cluster's figures (``master.figures``), the same
    the exporter serves to Prometheus."""

    reader: FigureReader | None = None

    def render_GET(self, txrequest: Any) -> dict[str, Any]:
        if self.reader is None:
            clients = self.root.crawlcluster
            self.reader = FigureReader(clients["redis"], clients["settings"])
        return self.reader.read().as_json()


class Sites(WsResource):
    """What the Sites page draws: a crawl's health per site (``?crawlid=``), most pages
    first, each as ``SiteHealth.as_json()`` (master/sitehealth.py)."""

    @param("crawlid")
    def render_GET(self, txrequest: Any, crawlid: str) -> dict[str, Any]:
        if not _NAME.fullmatch(crawlid.encode()):
            raise error.Error(code=http.OK, message=b"crawlid is not a crawl id")
        clients = self.root.crawlcluster
        keys = Keys.from_settings(clients["settings"])
        sites = read_site_health(clients["redis"], keys, crawlid).values()
        return {"crawlid": crawlid,
                "sites": [health.as_json() for health in
                          sorted(sites, key=lambda health: (-health.pages, health.site))]}


class ListJobs(ScrapydListJobs):
    """scrapyd's ``listjobs.json`` plus ``waiting``: the node's spiders that died too
    often and are started again once their servers answer (manager/launcher.py), each
    with its spider, next job id, since when, last exit status and the servers found
    down."""

    def render_GET(self, txrequest: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        jobs: dict[str, Any] = super().render_GET(txrequest, *args, **kwargs)
        jobs["waiting"] = [dict(entry) for entry in self.root.launcher.waiting.values()]
        return jobs


class NodeMetrics(MetricsPage):
    """``/metrics``: this node's spider processes (their registry is made at the first
    scrape: the clients are attached to the app after the root is built)."""

    def __init__(self, root: Root) -> None:
        resource.Resource.__init__(self)
        self.root = root
        self._registry: CollectorRegistry | None = None

    @property
    def registry(self) -> CollectorRegistry:  # type: ignore[override]
        if self._registry is None:
            self._registry = node_registry(metrics_dir(self.root.crawlcluster["settings"]),
                                           lambda: self.root.launcher.waiting)
        return self._registry


class Export(resource.Resource):
    """``GET export?crawlid=ID&format=jsonl|csv|parquet[&since=TIME][&changed_since=TIME]``:
    the crawl's stored
    items as a file (``manager/export.py``), streamed as it is made. The export runs in a
    thread that waits while the client reads slower than MongoDB is read, so memory
    stays bounded however many items there are."""

    isLeaf = True

    def __init__(self, root: Root) -> None:
        super().__init__()
        self.root = root
        self._mongo: Any = None

    def render_GET(self, txrequest: Any) -> Any:
        from manager.export import FORMATS, MEDIA_TYPES, ExportError, file_name, parse_since

        args = {key.decode(): values[0].decode() for key, values in txrequest.args.items()}
        crawlid, fmt = args.get("crawlid", ""), args.get("format", "jsonl")
        try:
            if not _NAME.fullmatch(crawlid.encode()):
                raise ExportError(f"crawlid {crawlid!r} is not a crawl id")
            if fmt not in FORMATS:
                raise ExportError(f"format {fmt!r}: choose from {', '.join(FORMATS)}")
            since = {name: parse_since(args[name]) if args.get(name) else None
                     for name in ("since", "changed_since")}
        except ExportError as exc:
            txrequest.setResponseCode(http.BAD_REQUEST)
            txrequest.setHeader("Content-Type", "text/plain; charset=utf-8")
            return f"{exc}\n".encode()
        txrequest.setHeader("Content-Type", MEDIA_TYPES[fmt])
        txrequest.setHeader("Content-Disposition",
                            f'attachment; filename="{file_name(crawlid, fmt)}"')
        sink = ResponseSink(txrequest)
        deferred = threads.deferToThread(self._export, crawlid, fmt, since, sink)
        deferred.addBoth(sink.finish)
        return server.NOT_DONE_YET

    def _export(self, crawlid: str, fmt: str, since: dict[str, float | None],
                sink: "ResponseSink") -> int:
        from manager.export import CrawlItems, export_client, export_items

        settings = self.root.crawlcluster["settings"]
        if self._mongo is None:
            self._mongo = export_client(settings, "manager")
        items = CrawlItems(self._mongo[settings["CRAWLCLUSTER_MONGODB_DATABASE"]], crawlid,
                           since["since"], since["changed_since"])
        count = export_items(items, fmt, sink)
        sink.flush()
        return count


class ResponseSink(io.RawIOBase):
    """A file an export thread writes to that sends what it is given to an HTTP client:
    it holds up to ``CHUNK`` bytes, then hands them to the reactor and waits while the
    connection's buffer is full (a push producer the transport pauses and resumes)."""

    CHUNK = 1 << 16

    def __init__(self, txrequest: Any) -> None:
        super().__init__()
        self.txrequest = txrequest
        self.buffer = bytearray()
        self.position = 0                # bytes written so far (Parquet's writer asks)
        self.writable_now = threading.Event()
        self.writable_now.set()
        self.gone = False
        txrequest.registerProducer(self, True)
        txrequest.notifyFinish().addErrback(lambda _: self.stopProducing())

    # --- the transport's side (IPushProducer) ----------------------------------------
    def pauseProducing(self) -> None:
        self.writable_now.clear()

    def resumeProducing(self) -> None:
        self.writable_now.set()

    def stopProducing(self) -> None:
        self.gone = True
        self.writable_now.set()

    # --- the export thread's side -------------------------------------------------------
    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def write(self, data: Any) -> int:
        self.buffer += data
        self.position += len(data)
        if len(self.buffer) >= self.CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        """Hand the bytes held to the reactor (from the export thread only: ``finish``
        empties the buffer first, so the flush of ``close`` has nothing to do)."""
        from twisted.internet import reactor

        if not self.buffer:
            return
        while not self.writable_now.wait(1.0):
            pass
        if self.gone:
            raise ConnectionError("the client went away")
        chunk, self.buffer = bytes(self.buffer), bytearray()
        threads.blockingCallFromThread(reactor, self.txrequest.write, chunk)

    def finish(self, result: Any) -> None:
        """On the reactor, once the export thread is done: end the response (an export
        that failed half way ends the connection, so the client sees it incomplete)."""
        from twisted.python.failure import Failure

        self.buffer = bytearray()
        if self.gone:
            return
        self.gone = True
        self.txrequest.unregisterProducer()
        if not isinstance(result, Failure):
            self.txrequest.finish()
            return
        logger.error("export failed: %s", result.getErrorMessage())
        if self.txrequest.startedWriting:
            self.txrequest.channel.loseConnection()
            return
        self.txrequest.setResponseCode(http.SERVICE_UNAVAILABLE)
        self.txrequest.responseHeaders.removeHeader("Content-Disposition")
        self.txrequest.setHeader("Content-Type", "text/plain; charset=utf-8")
        self.txrequest.write(f"export failed: {result.getErrorMessage()}\n".encode())
        self.txrequest.finish()


class CrawlControl(WsResource):
    """Pause or resume a crawl (``POST crawlid=...&action=pause|resume``)."""

    @param("crawlid")
    @param("action")
    def render_POST(self, txrequest: Any, crawlid: str, action: str) -> dict[str, Any]:
        if action not in ("pause", "resume"):
            raise error.Error(code=http.OK, message=b"action must be pause or resume")
        if not _NAME.fullmatch(crawlid.encode()):
            raise error.Error(code=http.OK, message=b"crawlid is not a crawl id")
        clients = self.root.crawlcluster
        settings, redis = clients["settings"], clients["redis"]
        frontier = Frontier.from_settings(redis, settings)
        if action == "pause":
            jobs = redis.zrange(Keys.from_settings(settings).jobs(), 0, -1)
            return {"crawlid": crawlid, "action": action,
                    "parked": frontier.pause_crawl(crawlid, jobs)}
        return {"crawlid": crawlid, "action": action, "resumed": frontier.resume_crawl(crawlid)}
