"""The manager's HTTP resources beyond scrapyd's own.

``Root`` is scrapyd's root; the endpoints it serves come from the config's
``[services]`` (manager/node.py), so scrapyd's own classes serve everything
scrapyd clients know. ``Schedule`` is scrapyd's, but refuses job ids,
project and spider names that are not plain names, with a message saying
which (scrapyd would only refuse a path that leaves its logs directory, and
with a less telling error). ``ClusterView`` answers ``cluster.json``: every
node in the registry and the jobs running on each.
"""

import json
import re

from scrapyd import website
from scrapyd.webservice import Schedule as ScrapydSchedule
from scrapyd.webservice import WsResource
from twisted.web import error, http

from manager.node import nodes_path
from master.registry import Heartbeats, JobRegistry

_NAME = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
CHECKED = (b"project", b"spider", b"jobid")


class Root(website.Root):
    """scrapyd's Root; ``crawlcluster`` holds the clients the extra resources use."""

    @property
    def crawlcluster(self):
        return self.app.crawlcluster


class Schedule(ScrapydSchedule):
    def render_POST(self, txrequest):
        for name in CHECKED:
            for value in txrequest.args.get(name, ()):
                if not _NAME.fullmatch(value):
                    shown = value.decode("utf-8", "replace")
                    raise error.Error(code=http.OK, message=(
                        f"{name.decode()} {shown!r} is not allowed: use 1-128 letters, digits, "
                        "'_', '.', '-'").encode())
        return super().render_POST(txrequest)


class ClusterView(WsResource):
    """Every registered node (ZooKeeper) with its live jobs (the master's registry)."""

    def render_GET(self, txrequest):
        clients = self.root.crawlcluster
        settings, zookeeper, redis = clients["settings"], clients["zookeeper"], clients["redis"]
        path = nodes_path(settings)
        nodes = {}
        for name in sorted(zookeeper.get_children(path) if zookeeper.exists(path) else []):
            data, _ = zookeeper.get(f"{path}/{name}")
            nodes[name] = dict(json.loads(data), jobs={})
        registry = JobRegistry.from_settings(redis, settings)
        for job, info in sorted(registry.live_jobs().items()):
            node = nodes.setdefault(info.get("node") or info["host"], {"registered": False,
                                                                        "jobs": {}})
            node["jobs"][job] = info
        beats = Heartbeats.from_settings(redis, settings).status()
        return {"nodes": nodes, "modules": beats}
