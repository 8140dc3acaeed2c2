"""Who this node is in the cluster, as every role on it sees it."""

import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit


def node_ip(settings: Mapping[str, Any]) -> str:
    """The configured node IP, else the local address this host reaches Redis from."""
    if settings["CRAWLCLUSTER_NODE_IP"]:
        return str(settings["CRAWLCLUSTER_NODE_IP"])
    parts = urlsplit(settings["CRAWLCLUSTER_REDIS_URL"])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((parts.hostname or "127.0.0.1", parts.port or 6379))
        return str(probe.getsockname()[0])
