"""``crawlcluster proxy serve``: the proxy pool over HTTP (JSON), on loopback.

  GET  /random            -> {"proxy": "http://ip:port", ...fields} or 404
  POST /bad?address=ip:port -> {"status": "ok"}
"""

import json
from typing import Any

from twisted.internet import reactor
from twisted.web import resource, server
from twisted.web.server import Request

from crawler.proxy import ProxyPool, proxy_url
from settings.loader import Settings


class _Json(resource.Resource):
    isLeaf = True

    def __init__(self, pool: ProxyPool) -> None:
        super().__init__()
        self.pool = pool

    def _reply(self, request: Request, status: int, body: dict[str, Any]) -> bytes:
        request.setResponseCode(status)
        request.setHeader(b"Content-Type", b"application/json")
        return json.dumps(body).encode()


class RandomProxy(_Json):
    def render_GET(self, request: Request) -> bytes:
        proxy = self.pool.get_random()
        if proxy is None:
            return self._reply(request, 404, {"status": "error", "message": "the pool is empty"})
        return self._reply(request, 200, {"proxy": proxy_url(proxy),
                                          **{k: v for k, v in proxy.items() if k != "_id"}})


class BadProxy(_Json):
    def render_POST(self, request: Request) -> bytes:
        address = ((request.args or {}).get(b"address") or [b""])[0].decode()
        if ":" not in address:
            return self._reply(request, 400, {"status": "error",
                                              "message": "give address=ip:port"})
        self.pool.report_bad(address)
        return self._reply(request, 200, {"status": "ok"})


def serve(pool: ProxyPool, settings: Settings) -> int:
    host, _, port = settings["CRAWLCLUSTER_PROXY_API"].rpartition(":")
    root = resource.Resource()
    # Twisted declares its resources and reactor through zope interfaces mypy cannot see.
    root.putChild(b"random", RandomProxy(pool))  # type: ignore[arg-type]
    root.putChild(b"bad", BadProxy(pool))  # type: ignore[arg-type]
    reactor.listenTCP(int(port), server.Site(root),  # type: ignore[arg-type]
                      interface=host or "127.0.0.1")
    print(f"proxy API on http://{host or '127.0.0.1'}:{port}/random")
    reactor.run()  # type: ignore[misc]
    return 0
