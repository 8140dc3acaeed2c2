"""The spider manager as a real process: scrapyd's API running real spider processes,
the node and job registry, basic auth, pending jobs across a restart."""

import base64
import http.client
import io
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import pytest

from manager.local.crawl import cluster_env
from manager.local.ports import free_port, listening
from master.registry import Heartbeats, JobRegistry

PROJECT = "crawlcluster"


class Manager:
    def __init__(self, settings, tmp_path, **extra):
        self.host = extra.pop("host", "127.0.0.1")
        self.port = extra.pop("port", None) or free_port((self.host,))
        self.env = extra.pop("env", {})          # more environment for the process
        values = {"CRAWLCLUSTER_MANAGER_ADDRESS": f"{self.host}:{self.port}",
                  "CRAWLCLUSTER_STATE_DIR": str(tmp_path / "state"),
                  "CRAWLCLUSTER_NODE_NAME": extra.pop("node", f"node-{self.port}"),
                  "CRAWLCLUSTER_MANAGER_POLL_INTERVAL": 0.5,
                  "CRAWLCLUSTER_HEARTBEAT_TTL": 3.0, "CRAWLCLUSTER_JOB_HEARTBEAT_TTL": 5.0}
        self.settings = settings.copy_with(**{**values, **extra})
        self.auth = None
        self.log = tmp_path / f"manager-{self.port}.log"
        self.process = None

    def start(self):
        env = {**cluster_env(self.settings, fast=False), **self.env}
        with open(self.log, "a") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "manager.cli", "manager"],
                                            env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not listening(self.host, self.port):
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "manager did not start"
            time.sleep(0.1)
        return self

    def stop(self, sig=signal.SIGTERM):
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)

    def call(self, endpoint, method="GET", auth=True, **params):
        data = urllib.parse.urlencode(params, doseq=True)
        url = f"http://{self.host}:{self.port}/{endpoint}"
        request = urllib.request.Request(url + ("?" + data if method == "GET" and data else ""),
                                         data=data.encode() if method == "POST" else None,
                                         method=method)
        if auth and self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def wait_job(self, jobid, state, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.call("listjobs.json", project=PROJECT)
            for job in jobs[state]:
                if job["id"] == jobid:
                    return job
            time.sleep(0.3)
        raise AssertionError(f"job {jobid} never {state}: {jobs}\n{self.log.read_text()[-3000:]}")


@pytest.fixture
def managers(test_settings, zookeeper, redis, tmp_path):
    started = []

    def start(**extra):
        started.append(Manager(test_settings, tmp_path, **extra).start())
        return started[-1]

    yield start
    for manager in started:
        if manager.process.poll() is None:
            for job in manager.call("listjobs.json")["running"]:
                manager.call("cancel.json", "POST", project=PROJECT, job=job["id"])
        manager.stop()


def schedule(manager, jobid, spider="universal", **params):
    reply = manager.call("schedule.json", "POST", project=PROJECT, spider=spider, jobid=jobid,
                         setting=["CRAWLCLUSTER_IDLE_TIMEOUT=120", "LOG_LEVEL=INFO"], **params)
    assert reply == {"status": "ok", "jobid": jobid, "node_name": manager.settings[
        "CRAWLCLUSTER_NODE_NAME"]}, reply
    return reply


def test_schedule_run_cancel_a_real_spider_with_its_log_and_registry(managers, redis):
    manager = managers()
    node = manager.settings["CRAWLCLUSTER_NODE_NAME"]
    assert manager.call("listspiders.json", project=PROJECT)["spiders"] == [
        "precise", "proxylist", "universal"]
    schedule(manager, "job-1")
    running = manager.wait_job("job-1", "running")
    assert {"id", "project", "spider", "pid", "start_time", "log_url"} <= set(running)
    registry = JobRegistry.from_settings(redis, manager.settings)
    deadline = time.monotonic() + 60
    while "job-1" not in registry.live_jobs() and time.monotonic() < deadline:
        time.sleep(0.3)
    cluster = manager.call("cluster.json")
    assert cluster["nodes"][node]["jobs"]["job-1"]["spider_type"] == "universal"
    assert cluster["nodes"][node]["http_port"] == manager.port
    assert cluster["modules"]["manager"][node]["up"]
    assert manager.call("status.json", job="job-1")["currstate"] == "running"

    cancel = manager.call("cancel.json", "POST", project=PROJECT, job="job-1")
    assert cancel["status"] == "ok" and cancel["prevstate"] == "running"
    finished = manager.wait_job("job-1", "finished")
    assert finished["end_time"] >= finished["start_time"]
    with urllib.request.urlopen(f"http://127.0.0.1:{manager.port}{finished['log_url']}") as log:
        text = log.read().decode()
    assert "Spider opened" in text and "Spider closed" in text, (
        f"spider log:\n{text[-2000:]}\nmanager log:\n{manager.log.read_text()[-3000:]}")
    assert "job-1" not in manager.call("cluster.json")["nodes"][node]["jobs"]
    assert "job-1" not in registry.live_jobs()


SLOW_LIST = """import sys, time
if sys.argv[1:2] == ["list"]:       # scrapyd's runner listing the project's spiders
    time.sleep(4)
"""


def test_the_manager_answers_while_a_schedule_waits_for_a_slow_spider_list(managers, tmp_path):
    """scrapyd lists the project's spiders (a child process) before it schedules; listed
    on the reactor, 4 s of listing would be 4 s of the manager answering nothing (and of
    missed watchdog beats). The listing is in a thread: status answers come meanwhile,
    for a list asked with an empty ``_version`` too (scrapyd caches it apart)."""
    (tmp_path / "slowlist").mkdir()
    (tmp_path / "slowlist" / "sitecustomize.py").write_text(SLOW_LIST)
    manager = managers(env={"PYTHONPATH": str(tmp_path / "slowlist")})
    answers = []
    asking = [threading.Thread(target=lambda: answers.append(schedule(manager, "job-1"))),
              threading.Thread(target=lambda: answers.append(manager.call(
                  "listspiders.json", project=PROJECT, _version="")))]
    started = time.monotonic()
    for thread in asking:
        thread.start()
    waits = []
    while any(thread.is_alive() for thread in asking) and time.monotonic() - started < 40:
        asked = time.monotonic()
        assert manager.call("daemonstatus.json")["status"] == "ok"
        waits.append(time.monotonic() - asked)
        time.sleep(0.2)
    for thread in asking:
        thread.join(30)
    assert len(answers) == 2 and time.monotonic() - started >= 4, answers
    assert ["precise", "proxylist", "universal"] in [a.get("spiders") for a in answers], answers
    assert len(waits) >= 10 and max(waits) < 2.0, waits
    assert manager.call("listspiders.json", project=PROJECT)["spiders"] == [
        "precise", "proxylist", "universal"]          # cached: answered at once


def test_a_spider_list_that_cannot_be_made_is_an_error_reply(managers, tmp_path):
    (tmp_path / "failinglist").mkdir()
    (tmp_path / "failinglist" / "sitecustomize.py").write_text(
        'import sys\nif sys.argv[1:2] == ["list"]:\n    sys.exit("no spiders today")\n')
    manager = managers(env={"PYTHONPATH": str(tmp_path / "failinglist")})
    reply = manager.call("schedule.json", "POST", project=PROJECT, spider="universal")
    assert reply["status"] == "error" and "no spiders today" in reply["message"], reply
    reply = manager.call("listspiders.json", project=PROJECT)
    assert reply["status"] == "error" and "no spiders today" in reply["message"], reply
    egg = io.BytesIO()
    with zipfile.ZipFile(egg, "w") as archive:           # a deploy: listed after it is stored
        archive.writestr("EGG-INFO/PKG-INFO", "Name: deployed\n")
    reply = manager.call("addversion.json", "POST", project="deployed", version="1",
                         egg=egg.getvalue())
    assert reply["status"] == "error" and "no spiders today" in reply["message"], reply
    assert manager.call("daemonstatus.json")["status"] == "ok"
    assert manager.call("listjobs.json")["pending"] == []


def test_pending_jobs_survive_a_manager_restart(managers):
    # scrapyd polls its queue when it starts, then every interval: an hour here, so
    # the jobs stay pending until the restart, which launches one (max_proc 1).
    manager = managers(CRAWLCLUSTER_MANAGER_POLL_INTERVAL=3600.0, CRAWLCLUSTER_MANAGER_MAX_PROC=1)
    schedule(manager, "later-1")
    schedule(manager, "later-2", priority=5)
    assert manager.call("daemonstatus.json")["pending"] == 2
    manager.stop()
    manager.start()
    manager.wait_job("later-2", "running")                               # the higher priority
    pending = manager.call("listjobs.json", project=PROJECT)["pending"]
    assert [job["id"] for job in pending] == ["later-1"]


def test_basic_auth_is_enforced(managers):
    manager = managers(CRAWLCLUSTER_MANAGER_USERNAME="ops", CRAWLCLUSTER_MANAGER_PASSWORD="s3cret")
    with pytest.raises(urllib.error.HTTPError) as refused:
        manager.call("daemonstatus.json")
    assert refused.value.code == 401
    manager.auth = ("ops", "wrong")
    with pytest.raises(urllib.error.HTTPError) as refused:
        manager.call("daemonstatus.json")
    assert refused.value.code == 401
    manager.auth = ("ops", "s3cret")
    assert manager.call("daemonstatus.json")["status"] == "ok"
    # a crawl's items are behind the same auth
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{manager.port}/export?crawlid=c", timeout=30)
    assert refused.value.code == 401



def test_a_crawls_site_health_is_behind_the_same_auth_as_its_items(managers, redis):
    """sites.json follows the rule of every per-crawl endpoint (export, crawl.json): the
    manager's credentials, nothing less, and with them the crawl's health per site."""
    from master.keys import Keys
    from master.lua import LuaScripts
    from master.sitehealth import SiteCounts, queue_site_counts

    manager = managers(CRAWLCLUSTER_MANAGER_USERNAME="ops", CRAWLCLUSTER_MANAGER_PASSWORD="s3cret")
    counts = SiteCounts()
    counts.page("owned-crawl", "a.example", 200)
    counts.item("owned-crawl", "a.example", ["title"], {"title": "T"}, [])
    pipe = redis.pipeline(transaction=False)
    queue_site_counts(pipe, LuaScripts(redis), Keys.from_settings(manager.settings),
                      counts.take(), 500)
    pipe.execute()
    for auth in (None, ("ops", "wrong")):
        manager.auth = auth
        with pytest.raises(urllib.error.HTTPError) as refused:
            manager.call("sites.json", crawlid="owned-crawl")
        assert refused.value.code == 401
    manager.auth = ("ops", "s3cret")
    reply = manager.call("sites.json", crawlid="owned-crawl")
    assert reply["status"] == "ok", reply
    assert [(site["site"], site["pages"], site["items"]) for site in reply["sites"]] == [
        ("a.example", 1, 1)]

def test_unsafe_names_are_refused(managers):
    manager = managers()
    for field, value in (("jobid", "../../etc/x"), ("spider", "a/b"), ("project", "..")):
        params = {"project": PROJECT, "spider": "universal", "jobid": "ok-1", field: value}
        reply = manager.call("schedule.json", "POST", **params)
        assert reply["status"] == "error" and f"{field} '{value}' is not allowed" in \
            reply["message"]


def test_a_dead_manager_leaves_the_registry(managers, zookeeper, redis):
    manager = managers()
    node = manager.settings["CRAWLCLUSTER_NODE_NAME"]
    path = manager.settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"] + "/nodes/" + node
    assert zookeeper.exists(path)
    beats = Heartbeats.from_settings(redis, manager.settings)
    assert beats.status()["manager"][node]["up"]
    manager.stop(signal.SIGKILL)
    deadline = time.monotonic() + 40
    while (zookeeper.exists(path) or beats.status()["manager"][node]["up"]) and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    assert not zookeeper.exists(path)                  # the session ended with the process
    assert not beats.status()["manager"][node]["up"]   # the heartbeat's TTL ran out


def test_response_shapes_match_scrapyd(managers):
    manager = managers(CRAWLCLUSTER_MANAGER_POLL_INTERVAL=3600.0)
    node = manager.settings["CRAWLCLUSTER_NODE_NAME"]
    shapes = {
        "daemonstatus.json": {"status", "running", "pending", "finished", "node_name"},
        "listprojects.json": {"status", "projects", "node_name"},
        "listversions.json": {"status", "versions", "node_name"},
        "listspiders.json": {"status", "spiders", "node_name"},
        # scrapyd's, plus the spiders waiting for their servers (manager/launcher.py)
        "listjobs.json": {"status", "pending", "running", "finished", "node_name", "waiting"},
    }
    for endpoint, fields in shapes.items():
        reply = manager.call(endpoint, project=PROJECT)
        assert set(reply) == fields and reply["status"] == "ok" and reply["node_name"] == node
    schedule(manager, "shape-1")
    assert manager.call("status.json", job="shape-1") == {"status": "ok", "currstate": "pending",
                                                          "node_name": node}
    [pending] = manager.call("listjobs.json", project=PROJECT)["pending"]
    assert set(pending) >= {"id", "project", "spider"}
    assert manager.call("cancel.json", "POST", project=PROJECT, job="shape-1") == {
        "status": "ok", "prevstate": "pending", "node_name": node}
    missing = manager.call("schedule.json", "POST", project="nope", spider="universal")
    assert missing == {"status": "error", "message": "project 'nope' not found",
                       "node_name": node}
    bad_egg = manager.call("addversion.json", "POST", project="p", version="1", egg="not an egg")
    assert bad_egg["status"] == "error" and bad_egg["message"]


def test_configured_spiders_start_with_the_manager(managers):
    manager = managers(CRAWLCLUSTER_MANAGER_SPIDERS={"universal": 1})
    node = manager.settings["CRAWLCLUSTER_NODE_NAME"]
    deadline = time.monotonic() + 30
    jobs = []
    while not jobs and time.monotonic() < deadline:
        jobs = [job for job in manager.call("listjobs.json", project=PROJECT)["running"]
                if job["id"].startswith(f"{node}-universal-1-")]
        time.sleep(0.3)
    assert jobs and jobs[0]["spider"] == "universal"
    cluster = manager.call("cluster.json")
    assert cluster["nodes"][node]["url"] == f"http://127.0.0.1:{manager.port}/"


def raw_call(manager, endpoint, method):
    """``(status code, JSON reply or None)`` for any method, without a body."""
    request = urllib.request.Request(f"http://127.0.0.1:{manager.port}/{endpoint}",
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as refused:
        text = refused.read()
        return refused.code, json.loads(text) if text.startswith(b"{") else None


def announced_body_call(manager, endpoint, length):
    """``(status code, JSON reply)`` for a POST announcing a body of ``length`` bytes
    and sending none of it."""
    connection = http.client.HTTPConnection("127.0.0.1", manager.port, timeout=30)
    try:
        connection.putrequest("POST", f"/{endpoint}")
        connection.putheader("Content-Type", "application/x-www-form-urlencoded")
        connection.putheader("Content-Length", str(length))
        connection.endheaders()
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_bad_api_input_gets_a_clear_error_and_the_manager_lives(managers):
    manager = managers()
    for params, says in (({"project": "nope"}, "project 'nope' not found"),
                         ({"spider": "nope"}, "spider 'nope' not found"),
                         ({"jobid": "x" * 200}, "is not allowed"),
                         ({"project": [PROJECT, PROJECT]}, "project given 2 times"),
                         ({"spider": ["universal", "precise"]}, "spider given 2 times")):
        reply = manager.call("schedule.json", "POST",
                             **{"project": PROJECT, "spider": "universal", **params})
        assert reply["status"] == "error" and says in reply["message"], (params, reply)
    # wrong methods: refused naming the methods allowed (scrapyd's reply, kept for its clients)
    for endpoint, method in (("schedule.json", "GET"), ("cancel.json", "GET"),
                             ("listjobs.json", "DELETE"), ("daemonstatus.json", "PUT")):
        code, reply = raw_call(manager, endpoint, method)
        assert reply["status"] == "error" and "UnsupportedMethod: Expected one of" in \
            reply["message"], (endpoint, method, code, reply)
    # a huge body is refused with 413 on its announced length, before it is read (sending
    # it too would race the reply: the server closes, the client's send breaks the pipe)
    code, reply = announced_body_call(manager, "schedule.json", 3 << 20)
    assert code == 413 and "request body over" in reply["message"]
    # a job id that is not there, or that tries to leave the logs folder
    assert manager.call("cancel.json", "POST", project=PROJECT, job="no-such-job")[
        "prevstate"] is None
    code, _ = raw_call(manager, "logs/crawlcluster/universal/..%2F..%2F..%2Fetc%2Fpasswd", "GET")
    assert code == 404
    assert manager.call("daemonstatus.json")["status"] == "ok"          # still serving
    assert manager.call("listjobs.json", project=PROJECT)["pending"] == []   # nothing queued


def test_a_manager_whose_zookeeper_session_expired_registers_again(managers, zookeeper):
    manager = managers()
    path = (manager.settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"] + "/nodes/"
            + manager.settings["CRAWLCLUSTER_NODE_NAME"])
    assert zookeeper.exists(path)
    # Paused longer than its session (10 s): ZooKeeper expires it and drops the znode,
    # as it would for a node cut off by the network.
    manager.process.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while zookeeper.exists(path):
            assert time.monotonic() < deadline, "the session never expired"
            time.sleep(0.5)
    finally:
        manager.process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 30
    while not zookeeper.exists(path):
        assert time.monotonic() < deadline, manager.log.read_text()[-2000:]
        time.sleep(0.5)
    node = manager.settings["CRAWLCLUSTER_NODE_NAME"]
    assert manager.call("cluster.json")["nodes"][node]["url"] == f"http://127.0.0.1:{manager.port}/"
