"""Alertmanager's configurations: the compose stack's and the one `services up --alerting`
writes are accepted by Debian's amtool; Prometheus's names the rules and Alertmanager."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from manager.local.alerting import RULES, alertmanager_config, prometheus_config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "prometheus"
amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed")


def check_config(path):
    return subprocess.run(["amtool", "check-config", str(path)], capture_output=True,
                          text=True, check=False, stdin=subprocess.DEVNULL)


@amtool
def test_the_compose_stacks_routing_is_valid():
    result = check_config(DOCS / "alertmanager.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@amtool
@pytest.mark.parametrize("webhook", ["http://127.0.0.1:9999/alerts", ""])
def test_the_local_routing_is_valid_and_sends_to_the_webhook(tmp_path, webhook):
    config = alertmanager_config(webhook, group_wait=1)
    (tmp_path / "am.yml").write_text(json.dumps(config))
    result = check_config(tmp_path / "am.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    urls = [hook["url"] for receiver in config["receivers"]
            for hook in receiver.get("webhook_configs", ())]
    assert urls == ([webhook] if webhook else [])


def test_local_prometheus_evaluates_the_rules_and_alerts_alertmanager():
    config = prometheus_config("127.0.0.1:9410", "127.0.0.1:9093", RULES)
    assert config["rule_files"] == [str(DOCS / "alerts.yml")]
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:9093"]
