"""The project's fixed layout, install and standing rules."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from settings.loader import load_settings
from tests import modulemap

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
    for name in ("redis", "zookeeper", "kafka", "mongodb"):
        assert services[name]["restart"] == "unless-stopped" and services[name]["healthcheck"]
    for name, service in services.items():
        for port in service.get("ports", []):    # with nothing set in .env: loopback only
            assert interpolated(port).startswith("127.0.0.1:"), f"{name} publishes {port}"


def interpolated(text, env=None):
    """``text`` as compose gives it: ``${NAME:-default}`` is ``env[NAME]``, or its default;
    ``${NAME:?error}`` is ``env[NAME]`` (required), or stays as written."""
    env = env or {}
    return re.sub(r"\$\{(\w+)(:-|:\?)([^}]*)\}",
                  lambda m: env.get(m[1], m[3] if m[2] == ":-" else m[0]), str(text))


def as_given(service, env=None):
    """A compose service's environment as compose gives it from ``env`` (.env)."""
    return {key: interpolated(value, env) for key, value in service["environment"].items()}


def test_docker_compose_runs_every_role_with_valid_settings():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    roles = {"master": "master", "preprocess": "preprocess", "monitor": "monitor",
             "exporter": "exporter", "node1": "manager", "node2": "manager",
             "node3": "manager"}
    for name, role in roles.items():
        service = services[name]
        assert service["command"] == ["crawlcluster", role]
        assert service["build"] == "." and (ROOT / "Dockerfile").exists()
        assert {"redis", "zookeeper", "kafka", "mongodb"} <= set(service["depends_on"])
        assert service["restart"] == "unless-stopped"
        settings = load_settings(environ=as_given(service))   # every value parses
        assert settings["CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS"] == []   # the guard's default
        assert settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"] == "kafka:29092"
        assert settings["CRAWLCLUSTER_REDIS_URL"].startswith("redis://redis:")
    ui_ports = [service["ports"][0] for name, service in services.items()
                if name.startswith("node")]
    # each published port can be moved (deploy/check.py runs beside a local cluster)
    assert [interpolated(port) for port in ui_ports] == [
        "127.0.0.1:6800:6800", "127.0.0.1:6801:6800", "127.0.0.1:6802:6800"]
    assert services["node3"]["profiles"] == ["node3"]                  # only when asked
    for name in ("node1", "node2", "node3"):      # basic auth on; no password shipped
        environment = services[name]["environment"]
        assert environment["CRAWLCLUSTER_MANAGER_PASSWORD"].startswith(
            "${CRAWLCLUSTER_MANAGER_PASSWORD:?"), name
        assert environment["CRAWLCLUSTER_MANAGER_USERNAME"].startswith("${"), name
    assert "CRAWLCLUSTER_MANAGER_PASSWORD=\n" in (ROOT / ".env.example").read_text()
    scrapes = yaml.safe_load((ROOT / "docs" / "prometheus" / "prometheus.yml").read_text())
    nodes_job = next(job for job in scrapes["scrape_configs"]
                     if job["job_name"] == "crawlcluster-nodes")
    assert nodes_job["basic_auth"]["password_file"] in services["prometheus"]["entrypoint"][-1]
    node2 = load_settings(environ=as_given(services["node2"]))
    assert node2["CRAWLCLUSTER_MANAGER_SPIDERS"] == {"universal": 1, "precise": 1}
    assert node2["CRAWLCLUSTER_MANAGER_PUBLIC_URL"] == "http://127.0.0.1:6801/"


# .env for a stack other machines' nodes join (docs/containers.md, "Nodes on other machines")
REMOTE_ENV = {"PUBLISH_ADDRESS": "198.18.0.1", "PUBLIC_HOST": "198.18.0.1",
              "KAFKA_PORT": "19092", "NODE2_PORT": "16801", "REDIS_PORT": "16379"}


def test_docker_compose_addresses_and_ports_come_from_the_env_file():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    node2 = load_settings(environ=as_given(services["node2"], REMOTE_ENV))
    assert node2["CRAWLCLUSTER_MANAGER_PUBLIC_URL"] == "http://198.18.0.1:16801/"
    assert interpolated(services["node2"]["ports"][0], REMOTE_ENV) == "198.18.0.1:16801:6800"
    assert interpolated(services["redis"]["ports"][0], REMOTE_ENV) == "198.18.0.1:16379:6379"
    advertised = as_given(services["kafka"], REMOTE_ENV)["KAFKA_ADVERTISED_LISTENERS"]
    assert "EXTERNAL://198.18.0.1:19092" in advertised.split(",")
    assert interpolated(services["kafka"]["ports"][0], REMOTE_ENV) == "198.18.0.1:19092:9092"
    for name in ("prometheus", "grafana"):      # no auth of their own: loopback always
        assert interpolated(services[name]["ports"][0], REMOTE_ENV).startswith("127.0.0.1:")
    documented = (ROOT / ".env.example").read_text()
    for name in {m for service in services.values() for text in map(str, service.values())
                 for m in re.findall(r"\$\{(\w+)", text)}:
        assert name in documented, f"{name} is not in .env.example"


def test_a_node_apart_reaches_the_servers_at_their_published_addresses():
    compose = yaml.safe_load((ROOT / "deploy" / "compose.node.yml").read_text())
    node = compose["services"]["node"]
    env = {**REMOTE_ENV, "SERVERS_HOST": "198.18.0.1", "PUBLIC_HOST": "198.18.0.2",
           "NODE_NAME": "node4", "NODE_PORT": "16804"}
    settings = load_settings(environ=as_given(node, env))
    assert settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"] == "198.18.0.1:19092"
    assert settings["CRAWLCLUSTER_REDIS_URL"] == "redis://198.18.0.1:16379/0"
    assert settings["CRAWLCLUSTER_MONGODB_URL"].startswith("mongodb://198.18.0.1:27017/")
    assert settings["CRAWLCLUSTER_MANAGER_PUBLIC_URL"] == "http://198.18.0.2:16804/"
    assert node["volumes"] == ["node-state:/var/lib/crawlcluster"]
    documented = (ROOT / ".env.example").read_text()
    for name in ("SERVERS_HOST", "NODE_NAME", "NODE_PORT"):
        assert name in documented, name


def test_docker_compose_keeps_state_and_checks_the_health_of_every_role():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("master", "preprocess", "monitor", "exporter", "node1", "node2", "node3"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    for name in ("master", "preprocess", "monitor"):    # the role's own heartbeat
        assert services[name]["healthcheck"]["test"][-1] == name
    state = "/var/lib/crawlcluster"                     # the image's CRAWLCLUSTER_STATE_DIR
    assert f"CRAWLCLUSTER_STATE_DIR={state}" in (ROOT / "Dockerfile").read_text()
    for name in ("node1", "node2", "node3"):     # job database, logs, eggs under it
        volume = services[name]["volumes"][0]
        assert volume == f"{name}-state:{state}" and f"{name}-state" in compose["volumes"]


RUNTIME = ("settings", "master", "crawler", "message_processing")
LOCAL_IMPORT = re.compile(r"^\s*(from|import) manager\.local\b", re.MULTILINE)


def test_no_runtime_role_imports_the_local_tooling():
    """manager/local (servers, local cluster, demo, test site) is for one machine; the
    roles run without it. Only the CLI's local commands reach it."""
    modules = [path for package in RUNTIME for path in (ROOT / package).rglob("*.py")]
    modules += list((ROOT / "manager").glob("*.py"))      # the CLI (manager/cli/) may
    offenders = [str(path.relative_to(ROOT)) for path in modules
                 if LOCAL_IMPORT.search(path.read_text(encoding="utf-8"))]
    assert modules and offenders == []


class _ComposeLoader(yaml.SafeLoader):
    """YAML with compose's ``!override`` and ``!reset`` tags."""


_ComposeLoader.add_constructor("!override", lambda loader, node: loader.construct_sequence(node))
_ComposeLoader.add_constructor("!reset", lambda loader, node: None)


def test_the_stand_in_override_changes_only_the_servers():
    """deploy/compose.local.yml swaps server images and their checks; every crawlcluster
    role runs as docker-compose.yml defines it."""
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    override = yaml.load((ROOT / "deploy" / "compose.local.yml").read_text(),
                         Loader=_ComposeLoader)["services"]
    roles = {name for name, service in base.items() if "build" in service}
    assert roles >= {"master", "preprocess", "monitor", "node1", "node2", "exporter"}
    assert not roles & set(override)
    for name, service in override.items():
        assert set(service) <= {"image", "healthcheck", "environment", "ports", "profiles"}, name
        assert service.get("image", "localhost/crawlcluster-").startswith(
            "localhost/crawlcluster-"), name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_the_image_renders_as_a_user_other_than_root():
    """Chromium and the [render] extra in the image, and every role not root, so that
    Chromium's sandbox stays on (crawler/render/browser.py's launch_args)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "chromium-headless-shell" in dockerfile and "'.[render]'" in dockerfile
    users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    for path in (ROOT / "docker-compose.yml", ROOT / "deploy" / "compose.node.yml"):
        services = yaml.safe_load(path.read_text())["services"]
        assert not [name for name, service in services.items()
                    if str(service.get("user", "")).split(":")[0] in ("root", "0")], path


def test_the_stand_in_broker_advertises_one_address_the_host_and_the_containers_reach():
    """No /etc/hosts entry: the stand-in broker advertises PUBLIC_HOST:KAFKA_PORT (the
    network's gateway on one machine, fixed by LOCAL_SUBNET and LOCAL_GATEWAY), and the
    port docker-compose.yml publishes KAFKA_PORT to is relayed to its one listener."""
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["kafka"]
    local = yaml.load((ROOT / "deploy" / "compose.local.yml").read_text(),
                      Loader=_ComposeLoader)
    kafka = local["services"]["kafka"]
    env = {"PUBLIC_HOST": "10.89.201.1", "PUBLISH_ADDRESS": "10.89.201.1",
           "KAFKA_PORT": "19092", "LOCAL_SUBNET": "10.89.201.0/24",
           "LOCAL_GATEWAY": "10.89.201.1"}
    given = as_given(kafka, env)
    assert given["ADVERTISED_LISTENER_URL"] == "tcp://10.89.201.1:19092"
    assert given["LISTENER_URL"].endswith(":29092")     # the roles' kafka:29092
    assert interpolated(base["ports"][0], env) == f"10.89.201.1:19092:{given['RELAY_PORT']}"
    assert "${PUBLIC_HOST:?" in kafka["environment"]["ADVERTISED_LISTENER_URL"]  # required
    subnet = local["networks"]["default"]["ipam"]["config"][0]
    assert interpolated(subnet["subnet"], env) == "10.89.201.0/24"
    assert interpolated(subnet["gateway"], env) == "10.89.201.1"
    assert "/etc/hosts" not in (ROOT / "docs" / "containers.md").read_text().split(
        "## With podman")[1].split("```")[3]       # the podman commands touch no host file
    for name in ("LOCAL_SUBNET", "LOCAL_GATEWAY"):
        assert name in (ROOT / ".env.example").read_text(), name


# The layers, lowest first: a package imports only its own floor and those below it.
FLOORS = {"settings": 0, "master": 1, "message_processing": 2, "crawler": 3, "manager": 4}
PACKAGE_IMPORT = re.compile(r"^\s*(?:from|import) (\w+)", re.MULTILINE)


def imports_up_the_layers(root):
    """``[(module, package it imports from a higher floor)]`` under ``root``."""
    found = []
    for package, floor in FLOORS.items():
        for path in sorted((root / package).rglob("*.py")):
            for imported in PACKAGE_IMPORT.findall(path.read_text(encoding="utf-8")):
                if FLOORS.get(imported, -1) > floor:
                    found.append((str(path.relative_to(root)), imported))
    return found


def test_no_import_runs_up_the_layers():
    assert imports_up_the_layers(ROOT) == []


def test_the_layer_check_finds_an_import_up_the_layers(tmp_path):
    (tmp_path / "master").mkdir()
    (tmp_path / "master" / "ok.py").write_text("from settings.loader import Settings\n")
    (tmp_path / "master" / "up.py").write_text("import json\nfrom crawler.rules import x\n")
    assert imports_up_the_layers(tmp_path) == [("master/up.py", "crawler")]


MAX_MODULE_LINES = 500
CHECKED_TREES = (*PACKAGES, "tests", "bench", "deploy")


def modules_over(root, limit=MAX_MODULE_LINES):
    """``[(module, lines)]`` of the Python modules under ``root`` longer than ``limit``."""
    found = []
    for tree in CHECKED_TREES:
        for path in sorted((root / tree).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                found.append((str(path.relative_to(root)), lines))
    return found


def test_no_module_is_over_500_lines():
    assert modules_over(ROOT) == []


def test_the_size_check_finds_a_module_over_500_lines(tmp_path):
    (tmp_path / "crawler").mkdir()
    (tmp_path / "crawler" / "small.py").write_text("x = 1\n" * 500)
    (tmp_path / "crawler" / "big.py").write_text("x = 1\n" * 501)
    assert modules_over(tmp_path) == [("crawler/big.py", 501)]


def test_the_module_map_matches_the_tree():
    documented = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert modulemap.table() in documented, (
        "docs/architecture.md's module map is stale: paste `python -m tests.modulemap`")
    undescribed = [name for name, what in modulemap.entries() if not what]
    assert undescribed == [], "say what these hold (a docstring, or tests/modulemap.py)"


def test_the_module_map_check_sees_a_module_added(tmp_path):
    (tmp_path / "master").mkdir()
    (tmp_path / "master" / "new.py").write_text('"""Something new. More."""\n')
    (tmp_path / "master" / "data").mkdir()
    assert modulemap.entries(tmp_path) == [("master/data/", ""),
                                           ("master/new.py", "Something new")]


def test_the_readme_is_a_front_door():
    """The README says what the project is, its two commands and where to read on; the
    rest (every benchmark's history, every setting) lives under docs/."""
    assert (ROOT / "README.md").stat().st_size <= 15 * 1024
