"""`crawlcluster services up|status|down` on ports of its own, as a user runs it."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from manager.local.ports import free_port


def crawlcluster(*args, env):
    return subprocess.run([sys.executable, "-m", "manager.cli", *args], env=env,
                          capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture
def private_env(tmp_path, local_servers):
    """Environment for a second set of servers: own ports, own state dir."""
    redis, kafka, zookeeper, mongo = (free_port() for _ in range(4))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLCLUSTER_")}
    env.update(
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{redis}/0",
        CRAWLCLUSTER_KAFKA_BOOTSTRAP=f"127.0.0.1:{kafka}",
        CRAWLCLUSTER_ZOOKEEPER_HOSTS=f"127.0.0.1:{zookeeper}",
        CRAWLCLUSTER_MONGODB_URL=f"mongodb://127.0.0.1:{mongo}/?directConnection=true",
    )
    yield env
    crawlcluster("services", "down", env=env)


def recorded_pids(state_dir):
    return {path.stem: json.loads(path.read_text())["pid"]
            for path in (Path(state_dir) / "pids").glob("*.json")}


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_up_status_down_leaves_nothing_behind(private_env):
    up = crawlcluster("services", "up", env=private_env)
    assert up.returncode == 0, up.stderr
    pids = recorded_pids(private_env["CRAWLCLUSTER_STATE_DIR"])
    assert sorted(pids) == ["kafka", "mongodb", "redis", "zookeeper"]
    assert all(alive(pid) for pid in pids.values())

    status = crawlcluster("services", "status", env=private_env)
    assert status.returncode == 0, status.stdout
    assert status.stdout.count("reachable (") == 4

    again = crawlcluster("services", "up", env=private_env)
    assert again.returncode == 0
    assert again.stdout.count("already running") == 4
    assert recorded_pids(private_env["CRAWLCLUSTER_STATE_DIR"]) == pids

    down = crawlcluster("services", "down", env=private_env)
    assert down.returncode == 0
    assert not any(alive(pid) for pid in pids.values())
    assert recorded_pids(private_env["CRAWLCLUSTER_STATE_DIR"]) == {}

    after = crawlcluster("services", "status", env=private_env)
    assert after.returncode != 0
    assert after.stdout.count("unreachable") == 4


def test_external_servers_are_not_started(private_env):
    env = dict(private_env, CRAWLCLUSTER_REDIS_URL="redis://192.0.2.1:6379/0",
               CRAWLCLUSTER_CONNECT_TIMEOUT="0.5")
    up = crawlcluster("services", "up", "redis", env=env)
    assert up.returncode == 0
    assert "external, not started here" in up.stdout
    assert recorded_pids(env["CRAWLCLUSTER_STATE_DIR"]) == {}


def test_a_server_that_dies_at_start_is_reported(private_env):
    # Bound but not listening: the port looks free, yet redis-server cannot bind it.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        port = squatter.getsockname()[1]
        env = dict(private_env, CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{port}/0")
        up = crawlcluster("services", "up", "redis", env=env)
    assert up.returncode == 2
    assert "redis exited" in up.stderr and "redis.log" in up.stderr
    assert recorded_pids(env["CRAWLCLUSTER_STATE_DIR"]) == {}


def test_a_recorded_server_at_another_address_is_not_running_fault(private_env):
    """The single Redis recorded, then the Redis Cluster settings: not "already running",
    and status, ping and up each say in one line what is where, never a traceback."""
    up = crawlcluster("services", "up", "redis", env=private_env)
    assert up.returncode == 0, up.stderr
    [pid] = recorded_pids(private_env["CRAWLCLUSTER_STATE_DIR"]).values()
    single = private_env["CRAWLCLUSTER_REDIS_URL"].split("//")[1].split("/")[0]
    cluster = dict(private_env, CRAWLCLUSTER_REDIS_CLUSTER="true",
                   CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    again = crawlcluster("services", "up", "redis", env=cluster)
    assert again.returncode == 2 and "already running" not in again.stdout
    assert f"(pid {pid}) serves {single}, not" in again.stderr and "Traceback" not in again.stderr
    for command in (("services", "status", "redis"), ("ping", "redis")):
        answer = crawlcluster(*command, env=cluster)
        assert answer.returncode == 1, answer
        [line] = answer.stdout.splitlines()
        assert "unreachable: Redis Cluster cannot be connected" in line
        assert "Traceback" not in answer.stderr
    status = crawlcluster("services", "status", "redis", env=cluster)
    assert f"the redis started here (pid {pid}) serves {single}" in status.stdout
    on_single = crawlcluster("ping", "redis", env=dict(cluster, CRAWLCLUSTER_REDIS_URL=(
        f"redis://{single}/0")))
    assert on_single.returncode == 1 and "Cluster mode is not enabled" in on_single.stdout
