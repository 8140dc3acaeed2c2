"""The whole cluster in containers, checked end to end as a site owner and a user see it.

  python deploy/check.py [--engine podman|docker] [--pages N] [--keep] [--steps LIST]

Builds the images (deploy/images.sh, reused when their inputs have not changed), starts
docker-compose.yml with deploy/compose.local.yml's stand-ins as a project of its own
(``crawlcluster-check``) from an env file of its own: every published port moved off its
default, the servers published on the network's gateway (an address of this machine
that containers in any network reach, as a remote machine reaches a LAN address). It
waits until every service with a health check passes it, and serves generated news
sites with nginx on that gateway. From the host, through the published addresses only:

- ``faults``: a precise and a universal crawl; node1's container SIGKILLed mid-crawl
  (its restart policy brings it back and it registers again), then Redis's container
  restarted (its AOF volume keeps the frontier); both drain with every page stored, the
  pages fetched again within what was leased when the node died plus 1%;
- ``render``: a universal crawl with ``render: auto`` of a site whose lists and articles
  a script writes: the nodes' Chromium (as a user other than root, its sandbox on)
  renders them and every article's item is stored;
- ``state``: a project deployed to node1 with ``scrapyd-deploy`` and its job run;
- then ``compose down`` and ``up`` with the volumes kept: the crawls' ``info``, their
  items, the deployed project and its finished job are all still there;
- ``nodes``: node3 added (its profile), and ``remote``: a node started apart from the
  stack (deploy/compose.node.yml, a project and network of its own, the servers named
  by their published addresses); a crawl without a fault takes tasks on each, each page
  fetched once by nginx's log.

``--steps`` runs some of them (default: all). Ends with a JSON line: ``pages``,
``node_kill_repeats``, ``node_kill_bound``, ``redis_restart_ok``, ``rendered``,
``render_sandboxed``, ``state_kept``, ``down_up_ok``, ``node3_tasks``,
``remote_node_tasks``, ``fetches_per_page`` (of the crawl without a fault),
``ports_moved_ok`` (every published port where .env moved it, a crawl through them),
``hosts_file_unchanged`` (/etc/hosts byte for byte), ``seconds`` and ``image_seconds``.
Exits non-zero if any fails.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.check_features import (  # noqa: E402
    REMOTE_NODE,
    deploy_and_run,
    phase_render,
    project_state,
    remote_node,
    start_remote_node,
)
from deploy.check_stack import (  # noqa: E402
    PROJECT,
    CheckFailed,
    Sites,
    Stack,
    ask,
    crawl_request,
    host_settings,
    infos,
    items_of,
    pages_by_node,
    ports_moved,
    say,
    stack_env,
    submit,
    wait_for,
    wait_registered,
    write_env_file,
)
from master.frontier import Frontier  # noqa: E402
from settings.clients import redis_client  # noqa: E402

RATE = 25                          # pages a second the site allows each spider type
STEPS = ("faults", "render", "state", "nodes", "remote")


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


def phase_faults(stack: Stack, settings: Any, sites: Sites, stamp: str) -> dict[str, Any]:
    """Two crawls through a node's SIGKILL and a Redis restart."""
    crawls = {"precise": f"check-precise-{stamp}", "universal": f"check-universal-{stamp}"}
    specs = {kind: sites.serve(kind) for kind in crawls}
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
        missing += sorted(sites.details(kind) - items_of(settings, kind, crawlid))[:3]
        missing += sorted(expected - set(fetched))[:3]
    bound = in_flight + math.ceil(0.01 * total)
    say(f"{pages} of {total} pages fetched, {repeats} again (bound {bound}); "
        f"missing: {missing or 'none'}")
    return {"crawls": crawls, "pages": pages, "node_kill_repeats": repeats,
            "node_kill_bound": bound, "redis_restart_ok": not missing and pages == total}


def phase_down_up(stack: Stack, settings: Any, sites: Sites, crawls: dict[str, str],
                  deployed: str | None) -> dict[str, bool]:
    """``down`` then ``up``, volumes kept: the crawls, their items, the deployed project
    and its finished job still there."""
    before = infos(settings, list(crawls.values()))
    stack.run("down")
    say("compose down (volumes kept)")
    stack.run("up", "-d")
    say(f"compose up: healthy in {stack.wait_healthy():.0f} s")
    after = infos(settings, list(crawls.values()))
    kept = all(after[c].get("done") == before[c].get("done") and after[c].get("done")
               for c in crawls.values())
    stored = all(sites.details(kind) <= items_of(settings, kind, crawlid)
                 for kind, crawlid in crawls.items())
    say(f"after down/up: info done {[after[c].get('done') for c in crawls.values()]} "
        f"(before {[before[c].get('done') for c in crawls.values()]}), items kept: {stored}")
    result = {"down_up_ok": kept and stored} if crawls else {}
    if deployed:
        state = project_state(stack)
        say(f"after down/up: node1's projects {state['projects']}, finished jobs "
            f"{state['finished']}")
        result["state_kept"] = "checkproject" in state["projects"] and deployed in state[
            "finished"]
    return result


def phase_nodes(stack: Stack, settings: Any, sites: Sites, stamp: str,
                remote: Stack | None, node3: bool) -> dict[str, Any]:
    """node3 and/or a node apart from the stack started; a crawl without a fault: the
    pages each fetched, and fetches per page."""
    started = time.time()
    if node3:
        stack.run("--profile", "node3", "up", "-d", "node3")
        stack.wait_healthy()
    if remote:
        start_remote_node(remote)
    added = ["node3"] * node3 + [REMOTE_NODE] * bool(remote)
    for node in added:
        wait_registered(stack, node, started - 60)
    say(f"registered: {added}")
    crawlid = f"check-nodes-{stamp}"
    spec = sites.serve("nodes")
    submit(settings, [crawl_request("universal", crawlid, spec)])
    wait_for(settings, [crawlid])
    fetched = sites.fetched("nodes")
    expected = sites.expected("nodes", "universal")
    shares = pages_by_node(settings, crawlid, len(expected))
    say(f"crawl with {added}: pages by node {shares}; nginx: {sum(fetched.values())} "
        f"fetches of {len(fetched)} pages ({len(expected)} expected)")
    if set(fetched) != expected:
        raise CheckFailed(f"the crawl missed {sorted(expected - set(fetched))[:5]}")
    found: dict[str, Any] = {"fetches_per_page": round(sum(fetched.values()) / len(fetched), 4),
                             "crawl_ok": True}
    if node3:
        found["node3_tasks"] = shares.get("node3", 0)
    if remote:
        found["remote_node_tasks"] = shares.get(REMOTE_NODE, 0)
    return found


def hosts_digest() -> str:
    return hashlib.sha256(Path("/etc/hosts").read_bytes()).hexdigest()


def run_steps(stack: Stack, remote: Stack | None, steps: set[str], sites: Sites,
              work: Path) -> dict[str, Any]:
    """The steps asked for, on a stack that is up; what each found."""
    settings = host_settings(stack)
    stamp = time.strftime("%H%M%S")
    found: dict[str, Any] = {}
    reply = ask(settings, {"type": "site_config", "userid": "check", "action": "rate",
                           "domain": stack.values["PUBLIC_HOST"], "rate": RATE,
                           "window": 1.0})
    say(f"site rate {RATE}/s: {reply.get('status')}")
    crawls: dict[str, str] = {}
    if "faults" in steps:
        faults = phase_faults(stack, settings, sites, stamp)
        crawls = faults.pop("crawls")
        found.update(faults)
    if "render" in steps:
        found.update(phase_render(stack, settings, sites, stamp))
    deployed = deploy_and_run(stack, work) if "state" in steps else None
    if crawls or deployed:
        found.update(phase_down_up(stack, settings, sites, crawls, deployed))
    if "nodes" in steps or remote:
        found.update(phase_nodes(stack, settings, sites, stamp, remote, "nodes" in steps))
    running = {"redis", "zookeeper", "kafka", "mongodb", "node1", "node2", "prometheus",
               "alertmanager"}
    moved = ports_moved(stack, running | ({"node3"} if "nodes" in steps else set()))
    crawled = [found.pop("crawl_ok", None), found.get("redis_restart_ok"),
               found.get("rendered")]
    if any(done is not None for done in crawled):      # a crawl went through the ports
        found["ports_moved_ok"] = moved and all(done for done in crawled if done is not None)
    return found


def passed(found: dict[str, Any]) -> bool:
    """Whether every figure of the steps run holds."""
    checks = {"fetches_per_page": lambda v: v == 1.0, "redis_restart_ok": bool,
              "node_kill_repeats": lambda v: v <= found["node_kill_bound"],
              "rendered": lambda v: v >= 1, "render_sandboxed": bool,
              "state_kept": bool, "down_up_ok": bool, "node3_tasks": lambda v: v >= 1,
              "remote_node_tasks": lambda v: v >= 1, "ports_moved_ok": bool,
              "hosts_file_unchanged": bool}
    return all(check(found[name]) for name, check in checks.items() if name in found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="podman", choices=("podman", "docker"))
    parser.add_argument("--pages", type=int, default=250, help="articles in the site")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated, of {', '.join(STEPS)} (default: all)")
    args = parser.parse_args()
    steps = set(args.steps.split(","))
    if steps - set(STEPS):
        parser.error(f"unknown steps: {sorted(steps - set(STEPS))}")
    started, hosts_before = time.monotonic(), hosts_digest()
    say("images: deploy/images.sh")
    subprocess.run(["bash", str(ROOT / "deploy" / "images.sh")], check=True,
                   env=dict(os.environ, ENGINE=args.engine), stdin=subprocess.DEVNULL)
    image_seconds = time.monotonic() - started
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"{PROJECT}-{os.getpid()}"
    work.mkdir(parents=True)
    values = stack_env(args.engine)
    stack = Stack(args.engine, PROJECT, [ROOT / "docker-compose.yml",
                                         ROOT / "deploy" / "compose.local.yml"],
                  write_env_file(work / "stack.env", values), values)
    remote = remote_node(stack, work) if "remote" in steps else None
    sites = Sites(work, values["PUBLIC_HOST"], args.pages)
    try:
        stack.run("--profile", "node3", "down", "-v")    # what an earlier check left
        stack.run("up", "-d")
        say(f"compose up on {values['PUBLIC_HOST']}: healthy in {stack.wait_healthy():.0f} s")
        found = run_steps(stack, remote, steps, sites, work)
    finally:
        sites.stop()
        if not args.keep:
            if remote:
                remote.run("down", "-v")
            stack.run("--profile", "node3", "down", "-v")
            shutil.rmtree(work, ignore_errors=True)
    found.update(hosts_file_unchanged=hosts_digest() == hosts_before,
                 image_seconds=round(image_seconds),
                 seconds=round(time.monotonic() - started))
    print(json.dumps(found, sort_keys=True))
    return 0 if passed(found) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckFailed as exc:
        print(f"container check failed: {exc}", file=sys.stderr)
        sys.exit(1)
