"""The project's fixed layout, install and standing rules."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from settings.loader import default_settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("crawler", "master", "message_processing", "manager", "settings")


def test_top_level_layout():
    for name in (*PACKAGES, "tests", "docker-compose.yml", "scrapy.cfg", "setup.py"):
        assert (ROOT / name).exists(), name


def scrapy(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLCLUSTER_")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-m", "scrapy", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_scrapy_project_loads_from_the_repo_root():
    assert scrapy("list").returncode == 0


def test_scrapy_reads_the_same_settings_source():
    got = scrapy("settings", "--get", "CRAWLCLUSTER_REDIS_URL",
                 CRAWLCLUSTER_REDIS_URL="redis://10.0.0.9:6379/1")
    assert got.stdout.strip() == "redis://10.0.0.9:6379/1"
    assert scrapy("settings", "--get", "BOT_NAME").stdout.strip() == "crawlcluster"


def test_no_pickle_anywhere_in_the_package():
    pattern = re.compile(r"^\s*(import pickle|from pickle|import cPickle)|pickle\.(loads?|dumps?)",
                         re.MULTILINE)
    offenders = [str(path.relative_to(ROOT)) for package in PACKAGES
                 for path in (ROOT / package).rglob("*.py")
                 if pattern.search(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_docker_compose_defines_the_servers_with_pinned_images():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("redis", "zookeeper", "kafka", "mongodb"):
        image = services[name]["image"]
        assert re.fullmatch(r"[\w./-]+:\d+(\.\d+)+", image), image
        for port in services[name].get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    known = default_settings()
    for name, service in services.items():
        for variable in service.get("environment", {}):
            if variable.startswith("CRAWLCLUSTER_"):
                assert variable in known, f"{name}: unknown setting {variable}"
