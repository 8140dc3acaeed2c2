"""The manager's JSON ``POST`` endpoints of the web UI: ``validate.json``, ``submit.json``
and ``preview.json``.

Each takes only ``Content-Type: application/json`` (415 otherwise): a cross-site HTML
form can send only form and text types, so a page in a browser cannot reach these
without a CORS preflight, which the manager never grants with credentials. A body
nested deeper than ``CRAWLCLUSTER_MAX_JSON_DEPTH`` is refused before it is parsed.

Submits and previews may wait on a server (Kafka's reply; a page fetched under the
site's throttle, up to its window), so each runs in a ``BoundedPool`` of its own rather
than Twisted's reactor pool, which exports and shutdown need. A full pool answers 503
with ``Retry-After`` at once rather than queueing without bound. Replies are capped at
``CRAWLCLUSTER_MANAGER_REPLY_MAX_BYTES``: a preview's page HTML is cut to fit.
"""

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from scrapyd.webservice import WsResource
from twisted.internet import defer, threads
from twisted.python.threadpool import ThreadPool
from twisted.web import error, http, resource, server

from message_processing.requests import RequestError, decode, validate

logger = logging.getLogger(__name__)
JSON_TYPE = "application/json"
RETRY_AFTER = 2          # seconds a client told "busy" waits before asking again
SUBMIT_THREADS, SUBMITS_WAITING = 1, 4      # one Kafka client, used by one submit at a time


def json_type_problem(txrequest: Any) -> str | None:
    """Why the request's body is not declared JSON, or None if it is."""
    declared = (txrequest.getHeader("content-type") or "").split(";")[0].strip().lower()
    if declared == JSON_TYPE:
        return None
    return f"Content-Type must be {JSON_TYPE}, not {declared or 'none'!r}"


def json_answer(txrequest: Any, code: int, data: dict[str, Any]) -> bytes:
    """Set the status and type of a JSON answer; its body."""
    txrequest.setResponseCode(code)
    txrequest.setHeader("Content-Type", JSON_TYPE)
    return json.dumps(data, ensure_ascii=False).encode()


class BoundedPool:
    """Threads of their own for one kind of request: ``threads`` run at once, ``waiting``
    more queue, and past that ``run`` refuses (returns None) so the caller answers busy.
    Started at the first request (the reactor runs then), stopped at shutdown."""

    def __init__(self, name: str, threads: int, waiting: int = 0) -> None:
        self.pool = ThreadPool(minthreads=0, maxthreads=threads, name=name)
        self.threads = threads
        self.limit = threads + waiting
        self.in_flight = 0          # changed on the reactor's thread only

    def run(self, function: Callable[..., Any], *args: Any) -> defer.Deferred[Any] | None:
        from twisted.internet import reactor as twisted_reactor

        reactor: Any = twisted_reactor      # zope interfaces mypy cannot see through
        if self.in_flight >= self.limit:
            return None
        if not self.pool.started:
            self.pool.start()
            reactor.addSystemEventTrigger("during", "shutdown", self.pool.stop)
        self.in_flight += 1
        deferred = threads.deferToThreadPool(reactor, self.pool, function, *args)
        deferred.addBoth(self._done)
        return deferred

    def _done(self, result: Any) -> Any:
        self.in_flight -= 1
        return result


class Validate(WsResource):
    """Check a request as preprocess will (``POST`` JSON body): the reason and field."""

    def render_POST(self, txrequest: Any) -> dict[str, Any]:
        problem = json_type_problem(txrequest)
        if problem:
            raise error.Error(code=http.UNSUPPORTED_MEDIA_TYPE, message=problem.encode())
        settings = self.root.app.crawlcluster["settings"]
        try:
            kind, _ = validate(decode(txrequest.content.read(),
                                      settings.getint("CRAWLCLUSTER_MAX_MESSAGE_BYTES"),
                                      settings.getint("CRAWLCLUSTER_MAX_JSON_DEPTH")))
        except RequestError as exc:
            return {"valid": False, "error": exc.reason, "field": exc.field}
        return {"valid": True, "type": kind}


class PooledJSON(resource.Resource):
    """A ``POST`` of a JSON body whose JSON answer (``answer``) is made in the resource's
    ``BoundedPool`` (made by ``make_pool`` at the first request), with the node's name;
    an unexpected error is answered as one."""

    isLeaf = True

    def __init__(self, root: Any) -> None:
        super().__init__()
        self.root = root
        self._lock = threading.Lock()
        self._pool: BoundedPool | None = None

    @property
    def settings(self) -> Any:
        return self.root.app.crawlcluster["settings"]

    def make_pool(self) -> BoundedPool:
        raise NotImplementedError

    def answer(self, body: bytes) -> dict[str, Any]:
        raise NotImplementedError

    def render_POST(self, txrequest: Any) -> Any:
        problem = json_type_problem(txrequest)
        if problem:
            return json_answer(txrequest, http.UNSUPPORTED_MEDIA_TYPE,
                               {"status": "error", "message": problem,
                                "node_name": self.root.node_name})
        if self._pool is None:
            self._pool = self.make_pool()
        deferred = self._pool.run(self.answer, txrequest.content.read())
        if deferred is None:
            txrequest.setHeader("Retry-After", str(RETRY_AFTER))
            return json_answer(txrequest, http.SERVICE_UNAVAILABLE, {
                "status": "busy", "message": f"busy: {self._pool.threads} running at once "
                f"already; ask again in {RETRY_AFTER} s", "node_name": self.root.node_name})
        deferred.addErrback(self._failed)
        deferred.addCallback(lambda answer: self._finish(txrequest, answer))
        return server.NOT_DONE_YET

    def _failed(self, failure: Any) -> dict[str, Any]:
        logger.error("%s failed: %s", type(self).__name__, failure.getErrorMessage())
        return {"status": "error", "message": failure.getErrorMessage()}

    def _finish(self, txrequest: Any, data: dict[str, Any]) -> None:
        if getattr(txrequest, "_disconnected", False):
            return                          # the client went away meanwhile
        data["node_name"] = self.root.node_name
        cap = self.settings.getint("CRAWLCLUSTER_MANAGER_REPLY_MAX_BYTES")
        code, body = capped_reply(data, cap)
        txrequest.setResponseCode(code)
        txrequest.setHeader("Content-Type", JSON_TYPE)
        txrequest.write(body)
        txrequest.finish()


def capped_reply(data: dict[str, Any], cap: int) -> tuple[int, bytes]:
    """The HTTP status and JSON body of ``data`` in at most ``cap`` bytes: a preview's
    ``html`` cut to fit (``html_truncated``), else an error naming the limit."""
    body = json.dumps(data, ensure_ascii=False).encode()
    shown = data.get("preview")
    while len(body) > cap and isinstance(shown, dict) and shown.get("html"):
        # each character cut takes at least one byte off; the margin covers the flag
        html = shown["html"]
        shown["html"] = html[:max(0, len(html) - (len(body) - cap) - 32)]
        shown["html_truncated"] = True
        body = json.dumps(data, ensure_ascii=False).encode()
    if len(body) <= cap:
        return http.OK, body
    message = (f"the reply of {len(body)} bytes is over the {cap}-byte limit "
               "(CRAWLCLUSTER_MANAGER_REPLY_MAX_BYTES)")
    logger.warning("%s", message)
    return http.INTERNAL_SERVER_ERROR, json.dumps(
        {"status": "error", "message": message, "node_name": data.get("node_name")}).encode()


class Submit(PooledJSON):
    """Produce a request (``POST`` JSON body) to Kafka and answer with its reply."""

    _client: Any = None

    def make_pool(self) -> BoundedPool:
        return BoundedPool("submits", SUBMIT_THREADS, SUBMITS_WAITING)

    def answer(self, body: bytes) -> dict[str, Any]:
        from message_processing.client import RequestClient

        try:
            request: Any = decode(body, self.settings.getint("CRAWLCLUSTER_MAX_MESSAGE_BYTES"),
                                  self.settings.getint("CRAWLCLUSTER_MAX_JSON_DEPTH"))
        except RequestError:
            request = body              # sent as it is: the intake's reply says what is wrong
        with self._lock:
            if self._client is None:
                self._client = RequestClient.from_settings(self.settings)
            return {"status": "ok", "reply": self._client.ask(request)}


class Preview(PooledJSON):
    """``POST preview.json`` with ``{"request": crawl request, "url", "html", "step",
    "crawlid", "with_html", "render"}`` (all but ``request`` optional): the page's preview
    under the request's rule (crawler/preview/), or the error naming the field. Runs in
    a pool of ``CRAWLCLUSTER_MANAGER_PREVIEW_THREADS``."""

    _servers: Any = None
    FIELDS = ("request", "url", "html", "step", "crawlid", "with_html", "render")

    def make_pool(self) -> BoundedPool:
        return BoundedPool("previews", self.settings.getint("CRAWLCLUSTER_MANAGER_PREVIEW_THREADS"))

    def answer(self, body: bytes) -> dict[str, Any]:
        from crawler.preview import PreviewError, preview

        try:
            asked = decode(body, self.settings.getint("CRAWLCLUSTER_MAX_MESSAGE_BYTES"),
                           self.settings.getint("CRAWLCLUSTER_MAX_JSON_DEPTH"))
        except RequestError as exc:
            return {"status": "error", "message": exc.reason, "field": None}
        problem = self._problem(asked)
        if problem is not None:
            return {"status": "error", "field": problem[0], "message": problem[1]}
        try:
            shown = preview(asked["request"], self._cluster(), url=asked.get("url"),
                            html=asked.get("html"), step=asked.get("step"),
                            crawlid=asked.get("crawlid"), with_html=asked.get("with_html") is True,
                            render=asked.get("render") is True)
        except PreviewError as exc:
            return {"status": "error", "message": exc.reason, "field": exc.field}
        return {"status": "ok", "preview": shown}

    def _problem(self, asked: Any) -> tuple[str, str] | None:
        """``(field, what is wrong)`` with the body's shape, or None."""
        if not isinstance(asked, dict) or not isinstance(asked.get("request"), dict):
            return "request", "a JSON object whose request is the crawl request"
        unknown = set(asked) - set(self.FIELDS)
        if unknown:
            return min(unknown), "unknown field"
        for name in ("url", "html", "step", "crawlid"):
            if asked.get(name) is not None and not isinstance(asked[name], str):
                return name, "must be a string"
        return None

    def _cluster(self) -> Any:
        from crawler.preview.servers import PreviewServers

        with self._lock:              # made once, on the first preview
            if self._servers is None:
                self._servers = PreviewServers(self.settings)
        return self._servers.cluster()
