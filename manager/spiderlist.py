"""scrapyd's spider list, made in a thread rather than on the manager's reactor.

scrapyd answers ``schedule.json``, ``listspiders.json`` and ``addversion.json`` with the
project's spider list, made by ``scrapy list`` in a child process and cached per
project and version; ``SpiderListInThread`` makes it before scrapyd's resource answers
(manager/web.py's ``Schedule``, and ``ListSpiders`` here), ``AddVersion`` after it has
stored the egg.
"""

import json
import logging
import zipfile
from io import BytesIO
from typing import Any

from scrapyd.webservice import AddVersion as ScrapydAddVersion
from scrapyd.webservice import ListSpiders as ScrapydListSpiders
from scrapyd.webservice import param, spider_list
from twisted.internet import defer, threads
from twisted.web import error, http, server

logger = logging.getLogger(__name__)


class SpiderListInThread:
    """Before scrapyd's resource answers, the project's spider list is made in a thread.

    scrapyd lists a project's spiders (``scrapy list`` in a child process, cached per
    project and version) while it answers ``schedule.json`` or ``listspiders.json``,
    and waits for it on the reactor: seconds on a loaded machine, during which the
    manager answers nothing and misses its watchdog's beats (a short bound ended the
    manager with the request unanswered). Here the list is made first, in a thread, one
    at a time as scrapyd made them (requests waiting meanwhile find it made); scrapyd's
    own code then finds it cached. A list made while a version was added or deleted is
    made again (it may be the old default's). A list that cannot be made is answered as
    scrapyd answers it, without making it again on the reactor."""

    root: Any
    listing_methods: tuple[bytes, ...] = ()     # the methods whose answer needs the list

    def render(self, txrequest: Any) -> Any:
        if self._uncached_list(txrequest) is None:
            return super().render(txrequest)  # type: ignore[misc]
        txrequest.notifyFinish().addErrback(lambda _: setattr(txrequest, "gone", True))
        made = _LISTING.run(self._make_list, txrequest)
        made.addErrback(lambda failure: setattr(txrequest, "spider_list_error", failure.value))
        made.addCallback(lambda _: self._answer(txrequest))
        made.addErrback(_answer_failed, txrequest)
        return server.NOT_DONE_YET

    def _uncached_list(self, txrequest: Any) -> tuple[str, str | None] | None:
        """``(project, version)`` as scrapyd reads them, when it would make the spider
        list now; None when it is cached or the request is refused before the list is
        needed."""
        if txrequest.method not in self.listing_methods:
            return None
        projects = txrequest.args.get(b"project") or [None]
        versions = txrequest.args.get(b"_version") or [None]
        try:
            project = projects[0].decode() if projects[0] is not None else None
            version = versions[0].decode() if versions[0] is not None else None
        except UnicodeDecodeError:
            return None
        if project is None or project not in self.root.poller.queues or (
                version and version not in self.root.eggstorage.list(project)):
            return None
        return None if version in spider_list.cache.get(project, {}) else (project, version)

    def _make_list(self, txrequest: Any) -> Any:
        wanted = None if getattr(txrequest, "gone", False) else self._uncached_list(txrequest)
        if wanted is None:                   # made while this waited, or nobody to answer
            return None
        project, version = wanted
        versions = self.root.eggstorage.list(project)

        def kept_unless_deployed(_: Any) -> Any:
            if self.root.eggstorage.list(project) != versions:
                spider_list.delete(project, version)
                return self._make_list(txrequest)
            return None

        made = threads.deferToThread(spider_list.set, project, version, runner=self.root.runner)
        return made.addCallback(kept_unless_deployed)

    def _answer(self, txrequest: Any) -> None:
        if getattr(txrequest, "gone", False) or txrequest.finished:
            return
        txrequest.write(super().render(txrequest))  # type: ignore[misc]
        txrequest.finish()

    def _refuse_unlisted(self, txrequest: Any) -> None:
        failed = getattr(txrequest, "spider_list_error", None)
        if failed is not None:
            raise failed


_LISTING = defer.DeferredLock()     # one spider list made at a time, as scrapyd did


def _answer_failed(failure: Any, txrequest: Any) -> None:
    """An answer that could not be rendered: logged, and an error reply naming why."""
    logger.error("answering %s failed: %s", txrequest.path.decode("utf-8", "replace"),
                 failure.getTraceback())
    if getattr(txrequest, "gone", False) or txrequest.finished or txrequest.startedWriting:
        return
    body = json.dumps({"status": "error", "message": str(failure.value)}).encode()
    txrequest.setResponseCode(http.INTERNAL_SERVER_ERROR)
    txrequest.setHeader("Content-Type", "application/json")
    txrequest.setHeader("Content-Length", str(len(body)))   # not an earlier render's
    txrequest.write(body)
    txrequest.finish()


class ListSpiders(SpiderListInThread, ScrapydListSpiders):
    listing_methods = (b"GET", b"HEAD")        # Twisted answers HEAD with render_GET

    def render_GET(self, txrequest: Any) -> Any:
        self._refuse_unlisted(txrequest)
        return super().render_GET(txrequest)


class AddVersion(ScrapydAddVersion):
    """scrapyd's ``addversion.json``, the new version's spider list made in a thread
    (``SpiderListInThread`` says why): the egg is stored as scrapyd stores it, then the
    list is made, then scrapyd's answer (its spiders' count, or the list's error) given
    by scrapyd's own rendering."""

    def render(self, txrequest: Any) -> Any:
        if txrequest.method != b"POST":
            return super().render(txrequest)
        asked = {name: list(values) for name, values in txrequest.args.items()}
        stored = super().render(txrequest)      # the egg stored, or scrapyd's refusal
        added = getattr(txrequest, "added", None)
        if added is None:
            return stored
        txrequest.notifyFinish().addErrback(lambda _: setattr(txrequest, "gone", True))
        made = _LISTING.run(threads.deferToThread, spider_list.set, *added,
                            runner=self.root.runner)
        made.addCallbacks(lambda spiders: setattr(txrequest, "listed", len(spiders)),
                          lambda failure: setattr(txrequest, "spider_list_error",
                                                  failure.value))
        made.addCallback(lambda _: self._answer(txrequest, asked))
        made.addErrback(_answer_failed, txrequest)
        return server.NOT_DONE_YET

    def _answer(self, txrequest: Any, asked: dict[bytes, list[bytes]]) -> None:
        if getattr(txrequest, "gone", False) or txrequest.finished:
            failed = getattr(txrequest, "spider_list_error", None)
            if failed is not None:
                logger.error("listing the spiders of a deploy failed: %s", failed)
            return
        txrequest.args = asked                  # scrapyd's parameters, read again
        txrequest.write(super().render(txrequest))
        txrequest.finish()

    @param("project")
    @param("version")
    @param("egg", type=bytes)
    def render_POST(self, txrequest: Any, project: str, version: str, egg: bytes) -> Any:
        failed = getattr(txrequest, "spider_list_error", None)
        if failed is not None:
            raise failed
        listed = getattr(txrequest, "listed", None)
        if listed is not None:
            return {"project": project, "version": version, "spiders": listed}
        if not zipfile.is_zipfile(BytesIO(egg)):
            raise error.Error(code=http.OK, message=b"egg is not a ZIP file (if using curl, "
                                                    b"use egg=@path not egg=path)")
        self.root.eggstorage.put(BytesIO(egg), project, version)
        self.root.update_projects()
        if project in spider_list.cache:          # the old default's list is not the new one's
            spider_list.delete(project, version)
        txrequest.added = (project, version)
        return {}                               # not sent: the answer waits for the list
