"""Start a spider on every node: ``crawlcluster start-spider PROJECT SPIDER``.

A deployed project (``scrapyd-deploy`` to each node's ``addversion.json``) runs on a
node when its ``schedule.json`` is called; a spider of the cluster's runs on every node
that runs a job of it. This calls ``schedule.json`` on every node the registry lists
(ZooKeeper's ``nodes`` children, each with its manager's URL), or on the nodes named,
with the same spider arguments (``-a``) and settings (``-s``), and the manager's basic
auth if set. A job started this way is a long-running cluster job, as the node's own
spiders are: registered, weighted by the dispatcher, watched and started again if it
dies (manager/launcher.py), unless its settings give it an idle timeout.
"""

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from manager.registry import nodes_path
from settings.errors import CrawlClusterError
from settings.loader import Settings


def registered_nodes(settings: Settings, zookeeper: Any) -> dict[str, dict[str, Any]]:
    """Every node in the registry: its name -> what it registered (``url`` among it)."""
    path = nodes_path(settings)
    nodes = {}
    for name in sorted(zookeeper.get_children(path) if zookeeper.exists(path) else []):
        data, _ = zookeeper.get(f"{path}/{name}")
        nodes[name] = json.loads(data)
    return nodes


def auth_headers(settings: Settings) -> dict[str, str]:
    """The ``Authorization`` header of the managers' basic auth, if the settings set it."""
    username = settings["CRAWLCLUSTER_MANAGER_USERNAME"]
    if not username:
        return {}
    token = f"{username}:{settings['CRAWLCLUSTER_MANAGER_PASSWORD']}".encode()
    return {"Authorization": "Basic " + base64.b64encode(token).decode()}


def schedule_on(settings: Settings, url: str, project: str, spider: str,
                arguments: dict[str, str], spider_settings: dict[str, str]) -> dict[str, Any]:
    """Call one manager's ``schedule.json``; its reply (an error reply if it cannot be
    reached, naming why)."""
    fields = [("project", project), ("spider", spider), *arguments.items(),
              *(("setting", f"{name}={value}") for name, value in spider_settings.items())]
    request = urllib.request.Request(urllib.parse.urljoin(url, "schedule.json"),
                                     data=urllib.parse.urlencode(fields).encode(),
                                     method="POST")
    for name, value in auth_headers(settings).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            reply: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return {"status": "error", "message": f"HTTP {exc.code} {exc.reason}"}
    except (OSError, ValueError) as exc:
        return {"status": "error", "message": f"{url} did not answer: {exc}"}
    return reply


def start_everywhere(settings: Settings, zookeeper: Any, project: str, spider: str,
                     arguments: dict[str, str], spider_settings: dict[str, str],
                     only: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Schedule the spider on every registered node (or those in ``only``); each node's
    reply by its name."""
    nodes = registered_nodes(settings, zookeeper)
    unknown = sorted(set(only or ()) - set(nodes))
    if unknown:
        raise CrawlClusterError(f"no node named {', '.join(unknown)} in the registry "
                                f"(registered: {', '.join(nodes) or 'none'})")
    if not nodes:
        raise CrawlClusterError("no node is registered: start a manager first "
                                "(`crawlcluster manager` or `crawlcluster up`)")
    return {name: schedule_on(settings, info["url"], project, spider, arguments,
                              spider_settings)
            for name, info in nodes.items() if not only or name in only}


def pairs(values: list[str], option: str) -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a value without ``=`` is an error naming it."""
    found = {}
    for value in values:
        name, equals, rest = value.partition("=")
        if not equals or not name:
            raise CrawlClusterError(f"{option} {value!r}: give NAME=VALUE")
        found[name] = rest
    return found
