"""The whole cluster in containers, checked end to end as a site owner and a user see it.

  python deploy/check.py [--engine podman|docker] [--pages N] [--keep]

Builds the images (deploy/images.sh, reused when their inputs have not changed), starts
docker-compose.yml with deploy/compose.local.yml's stand-ins as a project of its own
(``crawlcluster-check``, its published ports chosen free), waits until every service
with a health check passes it, and serves a generated news site with nginx on the
host, on the containers' network gateway. From the host, through the published ports:

1. a precise and a universal crawl submitted with ``crawlcluster submit``; node1's
   container SIGKILLed mid-crawl (its restart policy brings it back and it registers
   again), then Redis's container restarted mid-crawl (its AOF volume keeps the
   frontier); both crawls drain with every page stored in MongoDB, the pages fetched
   again within what was leased when the node died plus 1%;
2. ``compose down`` and ``up`` with the volumes kept: ``info`` answers for both crawls
   with what they did, and their items are still there;
3. node3 added (its profile): a third crawl, without a fault, takes tasks on it, and
   each of its pages is fetched once by nginx's log.

Ends with a JSON line: ``pages``, ``fetches_per_page`` (of the crawl without a fault),
``node_kill_repeats``, ``node_kill_bound``, ``redis_restart_ok``, ``down_up_ok``,
``node3_tasks``, ``seconds`` (and ``image_seconds``). Exits non-zero if any fails.
"""

import argparse
import base64
import json
import math
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from manager.local.demo import PRECISE_RULE, UNIVERSAL_RULE  # noqa: E402
from manager.local.ports import free_port  # noqa: E402
from manager.local.sitegen import SiteSpec, generate_site  # noqa: E402
from manager.local.sitelog import page_fetches  # noqa: E402
from manager.local.staticsite import StaticSite  # noqa: E402
from master.frontier import Frontier  # noqa: E402
from message_processing.client import RequestClient  # noqa: E402
from settings.clients import mongo_client, redis_client  # noqa: E402
from settings.loader import load_settings  # noqa: E402

PROJECT = "crawlcluster-check"
KAFKA_INTERNAL_PORT = 29092        # the stand-in broker's one listener: kafka:29092
PUBLISHED = ("REDIS_PORT", "ZOOKEEPER_PORT", "KAFKA_PORT", "MONGODB_PORT", "NODE1_PORT",
             "NODE2_PORT", "NODE3_PORT", "PROMETHEUS_PORT", "GRAFANA_PORT")
RATE = 25                          # pages a second the site allows each spider type


class CheckFailed(Exception):
    pass


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Stack:
    """The compose project: commands, its containers, waiting for their health."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.compose = (["podman-compose"] if engine == "podman" else ["docker", "compose"])
        self.compose += ["-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"),
                         "-f", str(ROOT / "deploy" / "compose.local.yml")]
        self.env = dict(os.environ, **{name: str(free_port()) for name in PUBLISHED},
                        KAFKA_INTERNAL_PORT=str(KAFKA_INTERNAL_PORT),
                        CRAWLCLUSTER_MANAGER_USERNAME="crawlcluster",
                        CRAWLCLUSTER_MANAGER_PASSWORD=secrets.token_urlsafe(18),
                        # The check's site is served on the network's gateway, whose
                        # address is known only once the network exists: the private
                        # ranges a container network takes are allowed for this
                        # throwaway stack (a user's stack keeps the default, none).
                        CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS=json.dumps(
                            ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]))

    def manager_auth(self) -> dict[str, str]:
        """The header the stack's managers ask for (their basic auth)."""
        token = (f"{self.env['CRAWLCLUSTER_MANAGER_USERNAME']}:"
                 f"{self.env['CRAWLCLUSTER_MANAGER_PASSWORD']}").encode()
        return {"Authorization": "Basic " + base64.b64encode(token).decode()}

    def port(self, name: str) -> int:
        return int(self.env[name])

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
        return f"{PROJECT}_{service}_1" if self.engine == "podman" else f"{PROJECT}-{service}-1"

    def containers(self) -> list[str]:
        names = self.engine_call("ps", "-a", "--format", "{{.Names}}").split()
        return [name for name in names if name.startswith(PROJECT)]

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

    def gateway(self) -> str:
        network = f"{PROJECT}_default"
        if self.engine == "podman":
            return self.engine_call("network", "inspect", network, "--format",
                                    "{{range .Subnets}}{{.Gateway}}{{end}}")
        return self.engine_call("network", "inspect", network, "--format",
                                "{{range .IPAM.Config}}{{.Gateway}}{{end}}")


def check_kafka_name(stack: Stack) -> None:
    """Inside the network, ``kafka`` is the broker's container, not the host's name."""
    address = stack.engine_call("exec", stack.container("node1"), "python", "-c",
                                "import socket; print(socket.gethostbyname('kafka'))")
    if address.startswith("127."):
        raise CheckFailed("inside the containers `kafka` is the host's 127.0.0.1 entry: "
                          "set base_hosts_file = \"none\" in containers.conf "
                          "(deploy/podman-setup.sh)")


def host_settings(stack: Stack) -> Any:
    """The settings of a client on the host: the published ports; Kafka by its name."""
    return load_settings().copy_with(
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{stack.port('REDIS_PORT')}/0",
        CRAWLCLUSTER_ZOOKEEPER_HOSTS=f"127.0.0.1:{stack.port('ZOOKEEPER_PORT')}",
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=f"kafka:{KAFKA_INTERNAL_PORT}",
        CRAWLCLUSTER_MONGODB_URL=f"mongodb://127.0.0.1:{stack.port('MONGODB_PORT')}/"
                                 "?directConnection=true")


def ensure_kafka_name() -> None:
    """The stand-in broker advertises kafka:29092: the host must resolve ``kafka``."""
    hosts = Path("/etc/hosts")
    if any(line.split()[1:2] == ["kafka"] or " kafka" in line
           for line in hosts.read_text().splitlines() if not line.startswith("#")):
        return
    if os.geteuid() != 0:
        raise CheckFailed("add `127.0.0.1 kafka` to /etc/hosts (docs/containers.md)")
    with hosts.open("a") as out:
        out.write("127.0.0.1 kafka\n")
    say("added `127.0.0.1 kafka` to /etc/hosts (the stand-in broker's advertised name)")


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


def crawl_request(kind: str, crawlid: str, spec: SiteSpec) -> dict[str, Any]:
    base = spec.base(spec.hosts[0])
    if kind == "precise":
        return {"type": "crawl", "userid": "check", "crawlid": crawlid, "maxdepth": 100,
                "spider_type": "precise", "rule": PRECISE_RULE, "url": f"{base}/list/1.html"}
    return {"type": "crawl", "userid": "check", "crawlid": crawlid, "maxdepth": 100,
            "spider_type": "universal", "rule": UNIVERSAL_RULE, "url": f"{base}/"}


class Sites:
    """The generated site, served on the gateway by one nginx per crawl (each crawl's
    fetches in a log of their own)."""

    def __init__(self, work: Path, gateway: str, pages: int) -> None:
        self.spec = SiteSpec(port=0, hosts=(gateway,), details_per_host=pages,
                             related_links=60, gbk_page=False)
        self.work = work
        self.served: dict[str, StaticSite] = {}
        self.manifests: dict[str, dict[str, Any]] = {}

    def serve(self, name: str) -> SiteSpec:
        spec = SiteSpec(**{**self.spec.__dict__, "port": free_port(list(self.spec.hosts))})
        manifest = generate_site(self.work / name, spec)
        site = StaticSite(self.work / name / "www", spec.hosts, spec.port,
                          self.work / name / "run").start()
        self.served[name], self.manifests[name] = site, manifest
        return spec

    def expected(self, name: str, kind: str) -> set[str]:
        kinds = ("list", "detail") if kind == "precise" else ("index", "list", "detail")
        return {p["url"] for p in self.manifests[name]["pages"] if p["kind"] in kinds}

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


def leased_now(settings: Any) -> int:
    client = redis_client(settings, "check")
    try:
        return Frontier.from_settings(client, settings).leased_count()
    finally:
        client.close()


def kill_node(stack: Stack, settings: Any) -> int:
    """SIGKILL node1's manager (and with it its spiders); what was leased then."""
    in_flight = leased_now(settings)
    pid = stack.main_pid("node1")
    os.kill(pid, 9)
    say(f"node1 SIGKILLed (pid {pid}) with {in_flight} tasks leased")
    return in_flight


def wait_registered(stack: Stack, node: str, after: float, timeout: float = 180) -> None:
    """Until ``node`` is listed with jobs registered after ``after`` (its manager's
    cluster.json on node2)."""
    import urllib.request

    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{stack.port('NODE2_PORT')}/cluster.json"
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(url, headers=stack.manager_auth())
            with urllib.request.urlopen(request, timeout=5) as reply:
                jobs = json.load(reply)["nodes"].get(node, {}).get("jobs", {})
            if any(job.get("registered", 0) > after for job in jobs.values()):
                return
        except (OSError, ValueError):
            pass
        time.sleep(2)
    raise CheckFailed(f"{node} did not register again within {timeout:.0f} s")


def items_of(settings: Any, kind: str, crawlid: str) -> set[str]:
    client = mongo_client(settings, "check")
    try:
        collection = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]][f"items_{kind}"]
        return {item["url"] for item in collection.find({"crawlid": crawlid}, {"url": 1})}
    finally:
        client.close()


def details(sites: Sites, name: str) -> set[str]:
    return {p["url"] for p in sites.manifests[name]["pages"] if p["kind"] == "detail"}


def phase_faults(stack: Stack, settings: Any, sites: Sites, stamp: str) -> dict[str, Any]:
    """Two crawls through a node's SIGKILL and a Redis restart."""
    crawls = {"precise": f"check-precise-{stamp}", "universal": f"check-universal-{stamp}"}
    specs = {kind: sites.serve(kind) for kind in crawls}
    domain = specs["precise"].hosts[0]
    reply = ask(settings, {"type": "site_config", "userid": "check", "action": "rate",
                           "domain": domain, "rate": RATE, "window": 1.0})
    say(f"site rate {RATE}/s: {reply.get('status')}")
    submit(settings, [crawl_request(kind, crawlid, specs[kind])
                      for kind, crawlid in crawls.items()])
    total = sum(len(sites.expected(kind, kind)) for kind in crawls)
    wait_for(settings, list(crawls.values()), done_at_least=total // 5)
    killed_at = time.time()
    in_flight = kill_node(stack, settings)
    wait_registered(stack, "node1", killed_at)
    say("node1 is back (restart policy) and registered again")
    wait_for(settings, list(crawls.values()), done_at_least=total // 2)
    stack.engine_call("restart", "-t", "10", stack.container("redis"))
    say("redis restarted")
    wait_for(settings, list(crawls.values()))
    pages = repeats = 0
    missing = []
    for kind, crawlid in crawls.items():
        fetched = sites.fetched(kind)
        expected = sites.expected(kind, kind)
        pages += len(expected & set(fetched))
        repeats += sum(fetched[url] - 1 for url in expected if fetched[url] > 1)
        missing += sorted(details(sites, kind) - items_of(settings, kind, crawlid))[:3]
        missing += sorted(expected - set(fetched))[:3]
    bound = in_flight + math.ceil(0.01 * total)
    say(f"{pages} of {total} pages fetched, {repeats} again (bound {bound}); "
        f"missing: {missing or 'none'}")
    return {"crawls": crawls, "pages": pages, "total": total, "repeats": repeats,
            "bound": bound, "complete": not missing and pages == total}


def phase_down_up(stack: Stack, settings: Any, sites: Sites,
                  crawls: dict[str, str]) -> bool:
    before = infos(settings, list(crawls.values()))
    stack.run("down")
    say("compose down (volumes kept)")
    stack.run("up", "-d")
    say(f"compose up: healthy in {stack.wait_healthy():.0f} s")
    after = infos(settings, list(crawls.values()))
    kept = all(after[c].get("done") == before[c].get("done") and after[c].get("done")
               for c in crawls.values())
    stored = all(details(sites, kind) <= items_of(settings, kind, crawlid)
                 for kind, crawlid in crawls.items())
    say(f"after down/up: info done {[after[c].get('done') for c in crawls.values()]} "
        f"(before {[before[c].get('done') for c in crawls.values()]}), items kept: {stored}")
    return kept and stored


def phase_node3(stack: Stack, settings: Any, sites: Sites, stamp: str) -> tuple[int, float]:
    """node3 started; a fault-free crawl: pages node3 fetched, fetches per page."""
    stack.run("--profile", "node3", "up", "-d", "node3")
    started = time.time()
    stack.wait_healthy()
    wait_registered(stack, "node3", started - 60)
    crawlid = f"check-node3-{stamp}"
    spec = sites.serve("node3")
    submit(settings, [crawl_request("universal", crawlid, spec)])
    wait_for(settings, [crawlid])
    fetched = sites.fetched("node3")
    expected = sites.expected("node3", "universal")
    client = mongo_client(settings, "check")
    try:
        deadline = time.monotonic() + 15
        while True:           # the spiders write their records about every second
            record = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["crawls"].find_one(
                {"crawlid": crawlid}) or {}
            if sum(record.get("pages_by_node", {}).values()) >= len(expected) \
                    or time.monotonic() > deadline:
                break
            time.sleep(1)
    finally:
        client.close()
    shares = record.get("pages_by_node", {})
    say(f"node3 crawl: pages by node {shares}; nginx: {sum(fetched.values())} fetches of "
        f"{len(fetched)} pages ({len(expected)} expected)")
    if set(fetched) != expected:
        raise CheckFailed(f"node3 crawl missed {sorted(expected - set(fetched))[:5]}")
    return shares.get("node3", 0), sum(fetched.values()) / len(fetched)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="podman", choices=("podman", "docker"))
    parser.add_argument("--pages", type=int, default=250, help="articles in the site")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()
    started = time.monotonic()
    say("images: deploy/images.sh")
    subprocess.run(["bash", str(ROOT / "deploy" / "images.sh")], check=True,
                   env=dict(os.environ, ENGINE=args.engine), stdin=subprocess.DEVNULL)
    image_seconds = time.monotonic() - started
    stack = Stack(args.engine)
    ensure_kafka_name()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"{PROJECT}-{os.getpid()}"
    sites = None
    try:
        stack.run("down", "-v")                   # what an earlier check left
        stack.run("up", "-d")
        say(f"compose up: healthy in {stack.wait_healthy():.0f} s")
        check_kafka_name(stack)
        settings = host_settings(stack)
        sites = Sites(work, stack.gateway(), args.pages)
        stamp = time.strftime("%H%M%S")
        faults = phase_faults(stack, settings, sites, stamp)
        down_up_ok = phase_down_up(stack, settings, sites, faults["crawls"])
        node3_tasks, fetches_per_page = phase_node3(stack, settings, sites, stamp)
    finally:
        if sites:
            sites.stop()
        if not args.keep:
            stack.run("--profile", "node3", "down", "-v")
    summary = {"pages": faults["pages"], "fetches_per_page": round(fetches_per_page, 4),
               "node_kill_repeats": faults["repeats"], "node_kill_bound": faults["bound"],
               "redis_restart_ok": faults["complete"], "down_up_ok": down_up_ok,
               "node3_tasks": node3_tasks, "image_seconds": round(image_seconds),
               "seconds": round(time.monotonic() - started)}
    print(json.dumps(summary, sort_keys=True))
    ok = (summary["fetches_per_page"] == 1.0 and faults["repeats"] <= faults["bound"]
          and faults["complete"] and down_up_ok and node3_tasks > 0)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as exc:
        print(f"container check failed: {exc}", file=sys.stderr)
        sys.exit(1)
