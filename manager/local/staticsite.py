"""nginx serving a generated site on loopback hosts, for tests, benchmarks and the demo;
its access log as the site owner sees a crawl.
"""

import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from manager.local.installs import require_program
from manager.local.ports import listening
from manager.local.processes import spawn, stop_process
from settings.errors import ServiceError

_NGINX_CONF = """\
worker_processes 1;
daemon off;
{user}
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    types {{ text/html html; text/plain txt; application/json json;
             application/javascript js; }}
    default_type application/octet-stream;
    log_format timed '$msec $request_time $server_addr $remote_addr '
                     '$request_method $request_uri $status "$http_user_agent"';
    access_log {run}/access.log timed;
    client_body_temp_path {run}/tmp/body;
    proxy_temp_path {run}/tmp/proxy;
    fastcgi_temp_path {run}/tmp/fastcgi;
    uwsgi_temp_path {run}/tmp/uwsgi;
    scgi_temp_path {run}/tmp/scgi;
    keepalive_requests 100000;
{compression}
{rate_zones}
{servers}
}}
"""


@dataclass(frozen=True)
class RateLimit:
    """A host's own rate limiter, as a site behind nginx's ``limit_req`` has one: above
    ``rate`` requests a second (plus a burst of ``burst``) it answers ``status`` (429, or
    503 as an overloaded server), with ``Retry-After`` when ``retry_after`` is set.
    robots.txt is not limited."""

    rate: float
    burst: int = 0
    retry_after: int | None = None
    status: int = 429

    def zone(self, name: str) -> str:
        per_minute = max(1, round(self.rate * 60))
        return f"    limit_req_zone $server_addr zone={name}:1m rate={per_minute}r/m;"

    def directives(self, name: str) -> str:
        header = (f"add_header Retry-After {self.retry_after} always; "
                  if self.retry_after is not None else "")
        return (f"location / {{ limit_req zone={name} burst={self.burst} nodelay; "
                f"limit_req_status {self.status}; error_page {self.status} @limited; }} "
                f"location @limited {{ {header}return {self.status} 'Slow down'; }} "
                f"location = /robots.txt {{ }}")


_NGINX_GZIP = ("    gzip on; gzip_min_length 0; "
               "gzip_types application/json application/javascript text/plain;")


class StaticSite:
    """nginx serving ``www/<host>/`` on ``host:port`` for each host, from ``run_dir``.

    Python's http.server manages ~3k requests/s here and would be the
    bottleneck of any crawl; nginx-light serves tens of thousands.
    """

    def __init__(self, www: str | Path, hosts: Iterable[str], port: int, run_dir: str | Path,
                 locations: dict[str, list[str]] | None = None, compress: bool = False,
                 rate_limits: dict[str, RateLimit] | None = None) -> None:
        self.www = Path(www)
        self.rate_limits = rate_limits or {}     # host -> its limiter (429 above a rate)
        self.compress = compress                 # gzip, as most sites serve pages
        self.hosts = list(hosts)
        self.locations = locations or {}         # host -> extra nginx location blocks
        self.port = port
        self.run_dir = Path(run_dir)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> Self:
        require_program("nginx", "nginx-light")
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.run_dir / "nginx.conf"
        conf.write_text(self._config())
        error_log = self.run_dir / "error.log"
        self.process = spawn(["nginx", "-c", str(conf), "-p", str(self.run_dir),
                              "-e", str(error_log)], self.run_dir / "nginx.out")
        deadline = time.monotonic() + timeout
        while not all(listening(host, self.port) for host in self.hosts):
            if self.process.poll() is not None or time.monotonic() > deadline:
                error = error_log.read_text(errors="replace")[-500:]
                self.stop()
                raise ServiceError(f"nginx did not start on port {self.port}: {error}")
            time.sleep(0.05)
        return self

    def _config(self) -> str:
        zones = {host: f"limited{n}" for n, host in enumerate(self.rate_limits)}
        servers = "\n".join(
            f"    server {{ listen {host}:{self.port}; root {self.www / host}; "
            f"{' '.join(self.locations.get(host, ()))} "
            f"{self.rate_limits[host].directives(zones[host]) if host in zones else ''} }}"
            for host in self.hosts)
        user = "user root;" if os.geteuid() == 0 else ""
        compression = _NGINX_GZIP if self.compress else ""
        rate_zones = "\n".join(limit.zone(zones[host])
                                for host, limit in self.rate_limits.items())
        return _NGINX_CONF.format(user=user, run=self.run_dir, servers=servers,
                                  compression=compression, rate_zones=rate_zones)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            stop_process(self.process.pid)
        self.process = None

    def access_log(self) -> list[dict[str, Any]]:
        """Requests served so far: dicts with time (when nginx read the request's
        first bytes: the log's time less the request's), host, client (the source
        address), method, path, status, agent."""
        return self.access_log_from(0)[0]

    def access_log_from(self, offset: int) -> tuple[list[dict[str, Any]], int]:
        """The requests logged from byte ``offset`` of the log on (whole lines only),
        and the offset to read on from: a watcher reads each line once."""
        path = self.run_dir / "access.log"
        if not path.exists():
            return [], offset
        with path.open("rb") as log:
            log.seek(offset)
            chunk = log.read()
        whole = chunk[:chunk.rfind(b"\n") + 1]
        entries = []
        for line in whole.decode(errors="replace").splitlines():
            head, _, agent = line.partition(' "')
            logged, took, host, client, method, uri, status = head.split(" ", 6)
            entries.append({"time": float(logged) - float(took), "host": host,
                            "client": client,
                            "method": method,
                            "path": uri, "status": int(status), "agent": agent.rstrip('"')})
        return entries, offset + len(whole)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
