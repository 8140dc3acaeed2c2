"""deploy/check.py's checks of what a user does with the stack beyond crawling: a crawl
whose pages a browser renders in the containers, a project deployed with
``scrapyd-deploy`` and its job, and a node started apart from the stack."""

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from deploy.check_stack import (
    ROOT,
    CheckFailed,
    Sites,
    Stack,
    crawl_request,
    infos,
    items_of,
    manager_call,
    say,
    submit,
    wait_for,
    write_env_file,
)
from manager.local.ports import free_port

# Whether Chromium's sandbox holds, from inside a node's container: its sandboxed zygote
# (the parent of every renderer) in a PID namespace of its own (NSpid names more than one
# id), and no Chromium process with --no-sandbox.
SANDBOX_PROBE = """
import glob, json, os
found = {"zygotes": 0, "sandboxed": 0, "no_sandbox": 0}
for status in glob.glob("/proc/[0-9]*/status"):
    if status == f"/proc/{os.getpid()}/status":
        continue
    try:
        command = open(status[:-6] + "cmdline", "rb").read()  # a title Chromium set, too
        nspid = [line.split()[1:] for line in open(status) if line.startswith("NSpid")][0]
    except OSError:
        continue
    if b"/usr/lib/chromium/" not in command:
        continue
    found["no_sandbox"] += b"--no-sandbox" in command
    if b"--type=zygote" in command and b"--no-zygote-sandbox" not in command:
        found["zygotes"] += 1
        found["sandboxed"] += len(nspid) > 1
print(json.dumps(found))
"""


def sandbox_state(stack: Stack, nodes: list[str]) -> dict[str, int]:
    """The Chromium processes of the nodes' spiders, counted (``SANDBOX_PROBE``)."""
    total = {"zygotes": 0, "sandboxed": 0, "no_sandbox": 0}
    for node in nodes:
        found = json.loads(stack.engine_call("exec", stack.container(node), "python", "-c",
                                             SANDBOX_PROBE))
        total = {name: total[name] + found[name] for name in total}
    return total


def phase_render(stack: Stack, settings: Any, sites: Sites, stamp: str) -> dict[str, Any]:
    """A crawl with ``render: auto`` of a site whose lists and articles a script writes:
    its pages rendered by the nodes' Chromium, every article's item stored."""
    gateway = stack.values["PUBLIC_HOST"]
    spec = sites.serve("render", scripted_hosts=(gateway,), details_per_host=20)
    crawlid = f"check-render-{stamp}"
    submit(settings, [crawl_request("universal", crawlid, spec, render="auto")])
    wait_for(settings, [crawlid])
    rendered = infos(settings, [crawlid])[crawlid].get("render", {}).get("rendered", 0)
    missing = sites.details("render") - items_of(settings, "universal", crawlid)
    sandbox = sandbox_state(stack, ["node1", "node2"])
    say(f"render crawl: {rendered} pages rendered, {len(missing)} articles without an "
        f"item; Chromium: {sandbox}")
    if missing:
        raise CheckFailed(f"scripted articles without items: {sorted(missing)[:5]}")
    if sandbox["no_sandbox"] or sandbox["sandboxed"] < sandbox["zygotes"]:
        raise CheckFailed(f"Chromium renders without its sandbox: {sandbox}")
    return {"rendered": rendered, "render_sandboxed": sandbox["sandboxed"] > 0}


USER_SPIDER = '''import scrapy


class HelloSpider(scrapy.Spider):
    """Starts, finds nothing to fetch and finishes: a job that ends."""
    name = "hello"
    start_urls: list[str] = []
'''


def user_project(work: Path, stack: Stack) -> Path:
    """A Scrapy project of a user's own, its scrapy.cfg targeting node1."""
    project = work / "userproject"
    package = project / "checkproject"
    (package / "spiders").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text('BOT_NAME = "checkproject"\n'
                                         'SPIDER_MODULES = ["checkproject.spiders"]\n')
    (package / "spiders" / "__init__.py").write_text("")
    (package / "spiders" / "hello.py").write_text(USER_SPIDER)
    values = stack.values
    (project / "scrapy.cfg").write_text(
        "[settings]\ndefault = checkproject.settings\n\n[deploy:node1]\n"
        f"url = http://{values['PUBLIC_HOST']}:{values['NODE1_PORT']}/\n"
        f"project = checkproject\nusername = {values['CRAWLCLUSTER_MANAGER_USERNAME']}\n"
        f"password = {values['CRAWLCLUSTER_MANAGER_PASSWORD']}\n")
    return project


def deploy_and_run(stack: Stack, work: Path) -> str:
    """``scrapyd-deploy`` a project to node1, run its spider once (``schedule.json``)
    until its job has finished; the job's id."""
    project = user_project(work, stack)
    done = subprocess.run([shutil.which("scrapyd-deploy") or "scrapyd-deploy", "node1"],
                          cwd=project, capture_output=True, text=True, timeout=180,
                          check=False, stdin=subprocess.DEVNULL)
    if done.returncode != 0 or '"status": "ok"' not in done.stdout + done.stderr:
        raise CheckFailed(f"scrapyd-deploy failed: {(done.stdout + done.stderr)[-500:]}")
    job = manager_call(stack, "NODE1_PORT", "schedule.json",
                       {"project": "checkproject", "spider": "hello"})["jobid"]
    deadline = time.monotonic() + 120
    while job not in project_state(stack)["finished"]:
        if time.monotonic() > deadline:
            raise CheckFailed(f"job {job} of the deployed project did not finish")
        time.sleep(2)
    say(f"scrapyd-deploy: checkproject on node1, its job {job} finished")
    return str(job)


def project_state(stack: Stack) -> dict[str, Any]:
    """node1's deployed projects and the deployed project's finished jobs."""
    projects = manager_call(stack, "NODE1_PORT", "listprojects.json")["projects"]
    jobs = (manager_call(stack, "NODE1_PORT", "listjobs.json?project=checkproject")
            if "checkproject" in projects else {})
    return {"projects": projects, "finished": [job["id"] for job in jobs.get("finished", [])]}


REMOTE_PROJECT = "crawlcluster-check-remote"
REMOTE_NODE = "remote1"


def remote_node(stack: Stack, work: Path) -> Stack:
    """deploy/compose.node.yml as a project of its own (its own network), its env file
    naming the servers by the stack's published addresses only."""
    values = stack.values
    env = {"SERVERS_HOST": values["PUBLIC_HOST"], "NODE_NAME": REMOTE_NODE,
           "NODE_PORT": str(free_port()), "PUBLISH_ADDRESS": "127.0.0.1",
           "PUBLIC_HOST": "127.0.0.1",
           **{name: values[name] for name in (
               "REDIS_PORT", "KAFKA_PORT", "ZOOKEEPER_PORT", "MONGODB_PORT",
               "CRAWLCLUSTER_MANAGER_USERNAME", "CRAWLCLUSTER_MANAGER_PASSWORD",
               "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS")}}
    env_file = write_env_file(work / "remote.env", env)
    return Stack(stack.engine, REMOTE_PROJECT, [ROOT / "deploy" / "compose.node.yml"],
                 env_file, env)


def start_remote_node(remote: Stack) -> None:
    """Up, healthy, and in a network where the servers' names mean nothing."""
    remote.run("down", "-v")
    remote.run("up", "-d")
    say(f"remote node up: healthy in {remote.wait_healthy():.0f} s")
    resolved = subprocess.run(
        [remote.engine, "exec", remote.container("node"), "python", "-c",
         "import socket; socket.gethostbyname('redis')"], capture_output=True, check=False)
    if resolved.returncode == 0:
        raise CheckFailed("the remote node resolves `redis`: it shares the stack's network")
