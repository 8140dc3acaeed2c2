"""deploy/check.py's compose projects and the crawls it runs through them.

A project is started with an env file of its own (``--env-file``, as a user's ``.env``):
every published port moved off its default, the servers published on the network's
gateway (an address of this machine that the containers, the host and a node in another
network all reach), so a client on the host uses the addresses a remote machine would.
"""

import base64
import ipaddress
import json
import os
import secrets
import subprocess
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from manager.local.demo import PRECISE_RULE, UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.sitelog import page_fetches
from manager.local.staticsite import StaticSite
from message_processing.client import RequestClient
from settings.clients import mongo_client
from settings.loader import load_settings

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "crawlcluster-check"
# each published port, its service and its default (docker-compose.yml)
PUBLISHED = {"REDIS_PORT": ("redis", 6379), "ZOOKEEPER_PORT": ("zookeeper", 2181),
             "KAFKA_PORT": ("kafka", 9092), "MONGODB_PORT": ("mongodb", 27017),
             "NODE1_PORT": ("node1", 6800), "NODE2_PORT": ("node2", 6801),
             "NODE3_PORT": ("node3", 6802), "PROMETHEUS_PORT": ("prometheus", 9090),
             "ALERTMANAGER_PORT": ("alertmanager", 9093), "GRAFANA_PORT": ("grafana", 3000)}
SUBNETS = [f"10.89.{n}.0/24" for n in range(200, 250)]    # one not taken is the stack's


class CheckFailed(Exception):
    pass


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def taken_subnets(engine: str) -> set[str]:
    names = subprocess.run([engine, "network", "ls", "--format", "{{.Name}}"], text=True,
                           capture_output=True, check=True).stdout.split()
    found = json.loads(subprocess.run([engine, "network", "inspect", *names], text=True,
                                      capture_output=True, check=True).stdout or "[]")
    subnets = set()
    for network in found:       # podman: subnets[].subnet; docker: IPAM.Config[].Subnet
        subnets |= {entry.get("subnet") for entry in network.get("subnets") or []}
        subnets |= {entry.get("Subnet") for entry in
                    (network.get("IPAM") or {}).get("Config") or []}
    return {str(subnet) for subnet in subnets if subnet}


def stack_env(engine: str) -> dict[str, str]:
    """The check stack's env file: a free subnet, its gateway as the published address,
    every port moved, a password, the gateway (the check's sites) allowed to crawl."""
    subnet = next(net for net in SUBNETS if net not in taken_subnets(engine))
    gateway = str(next(ipaddress.ip_network(subnet).hosts()))
    ports: dict[str, str] = {}
    for name, (_, default) in PUBLISHED.items():
        while (port := free_port()) in (default, *map(int, ports.values())):
            pass
        ports[name] = str(port)
    return {**ports, "LOCAL_SUBNET": subnet, "LOCAL_GATEWAY": gateway,
            "PUBLISH_ADDRESS": gateway, "PUBLIC_HOST": gateway,
            "CRAWLCLUSTER_MANAGER_USERNAME": "crawlcluster",
            "CRAWLCLUSTER_MANAGER_PASSWORD": secrets.token_urlsafe(18),
            "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS": json.dumps([f"{gateway}/32"])}


def write_env_file(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{name}='{value}'\n" for name, value in values.items()))
    path.chmod(0o600)
    return path


class Stack:
    """A compose project started with an env file: commands, its containers, health."""

    def __init__(self, engine: str, project: str, files: list[Path], env_file: Path,
                 values: dict[str, str]) -> None:
        self.engine, self.project, self.values = engine, project, values
        self.compose = (["podman-compose"] if engine == "podman" else ["docker", "compose"])
        self.compose += ["-p", project, "--env-file", str(env_file)]
        for file in files:
            self.compose += ["-f", str(file)]
        # what the env file says is read from it alone
        self.env = {name: value for name, value in os.environ.items() if name not in values}

    def manager_auth(self) -> dict[str, str]:
        """The header the stack's managers ask for (their basic auth)."""
        token = (f"{self.values['CRAWLCLUSTER_MANAGER_USERNAME']}:"
                 f"{self.values['CRAWLCLUSTER_MANAGER_PASSWORD']}").encode()
        return {"Authorization": "Basic " + base64.b64encode(token).decode()}

    def port(self, name: str) -> int:
        return int(self.values[name])

    def run(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run([*self.compose, *args], env=self.env, cwd=ROOT, text=True,
                                capture_output=True, timeout=timeout, check=False,
                                stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise CheckFailed(f"`compose {' '.join(args)}` failed: "
                              f"{(result.stderr or result.stdout)[-800:]}")
        return result.stdout

    def engine_call(self, *args: str) -> str:
        return subprocess.run([self.engine, *args], text=True, capture_output=True,
                              check=True, stdin=subprocess.DEVNULL).stdout.strip()

    def container(self, service: str) -> str:
        return (f"{self.project}_{service}_1" if self.engine == "podman"
                else f"{self.project}-{service}-1")

    def containers(self) -> list[str]:
        label = ("io.podman.compose.project" if self.engine == "podman"
                 else "com.docker.compose.project")
        return self.engine_call("ps", "-a", "--filter", f"label={label}={self.project}",
                                "--format", "{{.Names}}").split()

    def wait_healthy(self, timeout: float = 300) -> float:
        """Until every container with a health check passes it (run here: podman 4.3
        runs its checks from systemd timers, which a machine without systemd lacks)."""
        started, pending = time.monotonic(), set(self.containers())
        while pending:
            for name in sorted(pending):
                result = subprocess.run([self.engine, "healthcheck", "run", name],
                                        capture_output=True, text=True, check=False)
                if result.returncode == 0 or "no healthcheck" in result.stderr.lower() \
                        or "has no defined healthcheck" in result.stderr:
                    pending.discard(name)
            if time.monotonic() - started > timeout:
                raise CheckFailed(f"not healthy within {timeout:.0f} s: {sorted(pending)}")
            if pending:
                time.sleep(2)
        return time.monotonic() - started

    def main_pid(self, service: str) -> int:
        return int(self.engine_call("inspect", "-f", "{{.State.Pid}}", self.container(service)))

    def published(self, service: str) -> set[tuple[str, int]]:
        """The ``(address, port)`` pairs the service's container is published on."""
        lines = self.engine_call("port", self.container(service)).splitlines()
        pairs = [line.split("->", 1)[1].strip().rsplit(":", 1) for line in lines if "->" in line]
        return {(address, int(port)) for address, port in pairs}


def ports_moved(stack: Stack, services: set[str]) -> bool:
    """Every running service's ports are the env file's, none at its default."""
    wrong = []
    for name, (service, default) in PUBLISHED.items():
        if service not in services:
            continue
        ports = {port for _, port in stack.published(service)}
        if ports != {stack.port(name)} or default in ports:
            wrong.append(f"{service}: {sorted(ports)} (.env {name}={stack.port(name)})")
    say(f"published ports: {wrong or 'as .env moved them'}")
    return not wrong


def manager_call(stack: Stack, port_name: str, path: str,
                 data: dict[str, str] | None = None) -> dict[str, Any]:
    """A JSON endpoint of a node's manager, at its published address."""
    url = f"http://{stack.values['PUBLIC_HOST']}:{stack.port(port_name)}/{path}"
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=stack.manager_auth())
    with urllib.request.urlopen(request, timeout=10) as reply:
        found: dict[str, Any] = json.load(reply)
        return found


def wait_registered(stack: Stack, node: str, after: float, timeout: float = 180) -> None:
    """Until ``node`` is listed with jobs registered after ``after`` (node2's
    cluster.json)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            nodes = manager_call(stack, "NODE2_PORT", "cluster.json")["nodes"]
            jobs = nodes.get(node, {}).get("jobs", {})
            if any(job.get("registered", 0) > after for job in jobs.values()):
                return
        except (OSError, ValueError):
            pass
        time.sleep(2)
    raise CheckFailed(f"{node} did not register within {timeout:.0f} s")


def host_settings(stack: Stack) -> Any:
    """The settings of a client on the host: the published addresses, as elsewhere."""
    host = stack.values["PUBLIC_HOST"]
    return load_settings().copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://{host}:{stack.port('REDIS_PORT')}/0",
        CRAWLCLUSTER_ZOOKEEPER_HOSTS=f"{host}:{stack.port('ZOOKEEPER_PORT')}",
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=f"{host}:{stack.port('KAFKA_PORT')}",
        CRAWLCLUSTER_MONGODB_URL=f"mongodb://{host}:{stack.port('MONGODB_PORT')}/"
                                 "?directConnection=true")


def submit(settings: Any, requests: list[dict[str, Any]]) -> None:
    """``crawlcluster submit -`` from the host, as a user would."""
    env = dict(os.environ, **{name: str(settings[name]) for name in (
        "CRAWLCLUSTER_REDIS_URL", "CRAWLCLUSTER_ZOOKEEPER_HOSTS",
        "CRAWLCLUSTER_KAFKA_BOOTSTRAP", "CRAWLCLUSTER_MONGODB_URL")})
    result = subprocess.run(["crawlcluster", "submit", "-"], input="\n".join(
        json.dumps(r) for r in requests), env=env, text=True, capture_output=True,
        timeout=120, check=False)
    say(f"crawlcluster submit: {result.stdout.strip()} {result.stderr.strip()[-300:]}")
    if result.returncode != 0 or "accepted" not in result.stdout:
        raise CheckFailed("the crawls were not accepted")


def crawl_request(kind: str, crawlid: str, spec: SiteSpec, **rule: Any) -> dict[str, Any]:
    base = spec.base(spec.hosts[0])
    if kind == "precise":
        return {"type": "crawl", "userid": "check", "crawlid": crawlid, "maxdepth": 100,
                "spider_type": "precise", "rule": PRECISE_RULE, "url": f"{base}/list/1.html"}
    return {"type": "crawl", "userid": "check", "crawlid": crawlid, "maxdepth": 100,
            "spider_type": "universal", "rule": dict(UNIVERSAL_RULE, **rule),
            "url": f"{base}/"}


class Sites:
    """The generated site, served on the gateway by one nginx per crawl (each crawl's
    fetches in a log of their own)."""

    def __init__(self, work: Path, gateway: str, pages: int) -> None:
        self.spec = SiteSpec(port=0, hosts=(gateway,), details_per_host=pages,
                             related_links=60, gbk_page=False)
        self.work = work
        self.served: dict[str, StaticSite] = {}
        self.manifests: dict[str, dict[str, Any]] = {}

    def serve(self, name: str, **changes: Any) -> SiteSpec:
        spec = SiteSpec(**{**self.spec.__dict__, **changes,
                           "port": free_port(list(self.spec.hosts))})
        manifest = generate_site(self.work / name, spec)
        site = StaticSite(self.work / name / "www", spec.hosts, spec.port,
                          self.work / name / "run").start()
        self.served[name], self.manifests[name] = site, manifest
        return spec

    def expected(self, name: str, kind: str) -> set[str]:
        kinds = ("list", "detail") if kind == "precise" else ("index", "list", "detail")
        return {p["url"] for p in self.manifests[name]["pages"] if p["kind"] in kinds}

    def details(self, name: str) -> set[str]:
        return {p["url"] for p in self.manifests[name]["pages"] if p["kind"] == "detail"}

    def fetched(self, name: str) -> Counter[str]:
        site = self.served[name]
        return page_fetches(site.access_log(), site.port)

    def stop(self) -> None:
        for site in self.served.values():
            site.stop()


def ask(settings: Any, request: dict[str, Any]) -> dict[str, Any]:
    client = RequestClient.from_settings(settings, timeout=60)
    try:
        return client.ask(request)
    finally:
        client.close()


def infos(settings: Any, crawlids: list[str]) -> dict[str, dict[str, Any]]:
    return {crawlid: ask(settings, {"type": "info", "userid": "check", "crawlid": crawlid})
            for crawlid in crawlids}


def progress(settings: Any, crawlids: list[str]) -> tuple[int, bool]:
    """Pages done in all, and whether every crawl drained."""
    found = infos(settings, crawlids)
    done = sum(info.get("done", 0) for info in found.values())
    drained = all(info.get("total_pending", 1) == 0 and info.get("done") for info in
                  found.values())
    print(f"\r  {done} pages done, pending "
          f"{[info.get('total_pending') for info in found.values()]}   ", end="", flush=True)
    return done, drained


def wait_for(settings: Any, crawlids: list[str], done_at_least: int = 0,
             timeout: float = 420) -> int:
    """Until ``done_at_least`` pages are done (or, without it, every crawl drained)."""
    deadline = time.monotonic() + timeout
    while True:
        done, drained = progress(settings, crawlids)
        if (done_at_least and done >= done_at_least) or (not done_at_least and drained):
            print(flush=True)
            return done
        if time.monotonic() > deadline:
            print(flush=True)
            raise CheckFailed(f"the crawls did not get there within {timeout:.0f} s")
        time.sleep(1)


def items_of(settings: Any, kind: str, crawlid: str) -> set[str]:
    client = mongo_client(settings, "check")
    try:
        collection = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]][f"items_{kind}"]
        return {item["url"] for item in collection.find({"crawlid": crawlid}, {"url": 1})}
    finally:
        client.close()


def pages_by_node(settings: Any, crawlid: str, pages: int, timeout: float = 15) -> dict[str, int]:
    """The crawl's pages per node from its record, once it counts ``pages`` (the spiders
    write their records about every second) or ``timeout`` s have passed."""
    client = mongo_client(settings, "check")
    try:
        deadline = time.monotonic() + timeout
        while True:
            record = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["crawls"].find_one(
                {"crawlid": crawlid}) or {}
            shares: dict[str, int] = record.get("pages_by_node", {})
            if sum(shares.values()) >= pages or time.monotonic() > deadline:
                return shares
            time.sleep(1)
    finally:
        client.close()
