"""The crawlcluster command as users run it."""

import os
import re
import subprocess
import sys

from settings.clients import ADDRESS_SETTING


def run(*args, **env):
    """The command with the defaults, but for the servers' addresses (a test worker's
    own, when its environment names them) and ``env``."""
    servers = set(ADDRESS_SETTING.values())
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("CRAWLCLUSTER_") or k in servers}
    full_env.update(env)
    return subprocess.run([sys.executable, "-m", "manager.cli", *args], env=full_env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_help_lists_the_commands():
    result = run("--help")
    assert result.returncode == 0
    for command in ("ping", "services", "settings"):
        assert command in result.stdout


def test_ping_names_the_dead_redis_in_one_line(local_servers):
    result = run("ping", CRAWLCLUSTER_REDIS_URL="redis://127.0.0.1:1")
    assert result.returncode != 0
    # port 1 exactly: a worker's own servers may listen on 127.0.0.1:1xxxx
    lines = [line for line in result.stdout.splitlines() if re.search(r"127\.0\.0\.1:1\b", line)]
    assert len(lines) == 1
    assert lines[0].startswith("redis") and "unreachable" in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    others = [line for line in result.stdout.splitlines() if line not in lines]
    assert len(others) == 3 and all("reachable (" in line for line in others)


def test_ping_all_up_exits_zero(local_servers):
    result = run("ping")
    assert result.returncode == 0, result.stdout
    assert len(result.stdout.splitlines()) == 4


def test_bad_setting_is_one_clear_error():
    result = run("ping", CRAWLCLUSTER_CONNECT_TIMEOUT="soon")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "crawlcluster ping: CRAWLCLUSTER_CONNECT_TIMEOUT: expected float, got 'soon'")


def test_unknown_server_kind_is_refused():
    result = run("ping", "postgres")
    assert result.returncode == 2
    assert "unknown server kind 'postgres'" in result.stderr


def test_settings_markdown_lists_every_setting():
    result = run("settings", "--markdown")
    assert result.returncode == 0
    assert "`CRAWLCLUSTER_REDIS_URL`" in result.stdout


def test_every_role_fails_the_same_way_on_a_dead_redis(local_servers):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    dead = {"CRAWLCLUSTER_REDIS_URL": "redis://127.0.0.1:1"}
    master = run("master", CRAWLCLUSTER_STARTUP_WAIT="0", **dead)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLCLUSTER_")}
    spider = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "universal"], cwd=root,
                            env=dict(full_env, **dead), capture_output=True, text=True,
                            timeout=120, check=False)
    for result, prefix in ((master, "crawlcluster master: master:"),
                           (spider, "scrapy crawl universal: crawler:")):
        assert result.returncode == 2
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"{prefix} cannot reach redis at redis://127.0.0.1:1")
        assert "Traceback" not in result.stderr


def test_a_role_started_before_its_server_waits_for_it(local_servers):
    result = run("master", CRAWLCLUSTER_REDIS_URL="redis://127.0.0.1:1",
                 CRAWLCLUSTER_STARTUP_WAIT="3")
    assert result.returncode == 2
    tries = [line for line in result.stderr.splitlines() if "trying again in" in line]
    assert len(tries) >= 2 and "cannot reach redis at redis://127.0.0.1:1" in tries[0]
    assert result.stderr.strip().splitlines()[-1].startswith(
        "crawlcluster master: master: cannot reach redis")
