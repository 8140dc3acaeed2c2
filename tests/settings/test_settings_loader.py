import json

import pytest

from settings import defaults
from settings.errors import ConfigError
from settings.loader import load_settings, parse_value


def test_defaults_are_prefixed_and_complete():
    settings = load_settings(environ={})
    assert settings["CRAWLCLUSTER_REDIS_URL"] == defaults.CRAWLCLUSTER_REDIS_URL
    assert all(name.startswith("CRAWLCLUSTER_") for name in settings)
    assert settings.scrapy["BOT_NAME"] == "crawlcluster"


def test_file_overrides_defaults_and_environment_overrides_file(tmp_path):
    path = tmp_path / "local.json"
    path.write_text(json.dumps({"CRAWLCLUSTER_KEY_PREFIX": "fromfile",
                                "CRAWLCLUSTER_CONNECT_TIMEOUT": 1.5,
                                "CONCURRENT_REQUESTS": 8}))
    settings = load_settings(path, environ={"CRAWLCLUSTER_CONNECT_TIMEOUT": "0.5"})
    assert settings["CRAWLCLUSTER_KEY_PREFIX"] == "fromfile"
    assert settings.getfloat("CRAWLCLUSTER_CONNECT_TIMEOUT") == 0.5
    assert settings.scrapy["CONCURRENT_REQUESTS"] == 8


def test_python_settings_file_named_by_environment(tmp_path):
    path = tmp_path / "local.py"
    path.write_text("CRAWLCLUSTER_KEY_PREFIX = 'py' + 'file'\n_private = 1\n")
    settings = load_settings(environ={"CRAWLCLUSTER_SETTINGS_FILE": str(path)})
    assert settings["CRAWLCLUSTER_KEY_PREFIX"] == "pyfile"


@pytest.mark.parametrize("environ, message", [
    ({"CRAWLCLUSTER_REDIS_UR": "redis://x"}, "did you mean CRAWLCLUSTER_REDIS_URL"),
    ({"CRAWLCLUSTER_CONNECT_TIMEOUT": "soon"}, "expected float, got 'soon'"),
    ({"CRAWLCLUSTER_SERVICES_INSTALL": "maybe"}, "expected a boolean"),
    ({"CRAWLCLUSTER_SETTINGS_FILE": "/nonexistent.json"}, "does not exist"),
])
def test_bad_overrides_name_the_problem(environ, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(environ=environ)


def test_bad_settings_file_is_named(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        load_settings(path, environ={})
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_settings(path, environ={})


def test_values_parse_to_the_defaults_type():
    assert parse_value("X", "true", False) is True
    assert parse_value("X", "7", 3) == 7
    assert parse_value("X", '{"a": 1}', {}) == {"a": 1}
    assert parse_value("X", "text", "default") == "text"
    with pytest.raises(ConfigError, match="expected a JSON dict"):
        parse_value("X", "[1]", {})


def test_getlist_and_copy_with():
    settings = load_settings(environ={"CRAWLCLUSTER_KAFKA_BOOTSTRAP": "a:1, b:2"})
    assert settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP") == ["a:1", "b:2"]
    changed = settings.copy_with(CRAWLCLUSTER_KEY_PREFIX="other")
    assert changed["CRAWLCLUSTER_KEY_PREFIX"] == "other"
    assert settings["CRAWLCLUSTER_KEY_PREFIX"] == "cc"
    with pytest.raises(ConfigError, match="unknown setting"):
        settings.copy_with(CRAWLCLUSTER_NOPE=1)


def test_no_other_module_carries_a_default():
    """Only settings/defaults.py (and the modules it imports every name of, to stay under
    500 lines) assigns CRAWLCLUSTER_ names at module level."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    pattern = re.compile(r"^CRAWLCLUSTER_\w+\s*=", re.MULTILINE)
    parts = re.findall(r"^from settings\.(\w+) import \*", (
        root / "settings" / "defaults.py").read_text(encoding="utf-8"), re.MULTILINE)
    allowed = {"defaults.py", *(f"{part}.py" for part in parts)}
    offenders = [
        str(path.relative_to(root))
        for package in ("crawler", "master", "message_processing", "manager", "settings")
        for path in (root / package).rglob("*.py")
        if path.name not in allowed and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
