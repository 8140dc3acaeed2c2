"""The one settings loader: defaults < settings file < environment.

A settings file is JSON (``*.json``) or a Python module (``*.py``, its
upper-case names are read, like Scrapy's ``settings.py``). Its path comes
from the ``settings_file`` argument or ``CRAWLCLUSTER_SETTINGS_FILE``.
Environment variables named like a ``CRAWLCLUSTER_`` setting override it;
values are parsed to the default's type.
"""

import difflib
import json
import os
import runpy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from settings import defaults
from settings.errors import ConfigError

PREFIX = "CRAWLCLUSTER_"
SETTINGS_FILE_VAR = "CRAWLCLUSTER_SETTINGS_FILE"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
Number = TypeVar("Number", int, float)


def default_settings() -> dict[str, Any]:
    """Return a fresh dict of every prefixed default."""
    return {
        name: value
        for name, value in vars(defaults).items()
        if name.startswith(PREFIX)
    }


def default_scrapy_settings() -> dict[str, Any]:
    """Return a fresh dict of the crawler's defaults for Scrapy's own names."""
    return dict(defaults.SCRAPY)


class Settings(dict[str, Any]):
    """Settings of one process: a dict with typed getters.

    Holds every ``CRAWLCLUSTER_`` setting; ``scrapy`` holds Scrapy's own
    names for the crawler project.
    """

    def __init__(self, values: Mapping[str, Any], scrapy: Mapping[str, Any] | None = None):
        super().__init__(values)
        self.scrapy = dict(scrapy or {})

    def getbool(self, name: str) -> bool:
        return parse_bool(name, self[name])

    def getint(self, name: str) -> int:
        return _convert(name, self[name], int)

    def getfloat(self, name: str) -> float:
        return _convert(name, self[name], float)

    def getpath(self, name: str) -> Path:
        return Path(os.path.expanduser(str(self[name])))

    def getlist(self, name: str) -> list[Any]:
        value = self[name]
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return list(value)

    def copy_with(self, **overrides: Any) -> "Settings":
        """Return a copy with some settings replaced (names checked)."""
        values = dict(self)
        _apply(values, overrides, "copy_with()")
        return Settings(values, self.scrapy)


def load_settings(settings_file: str | Path | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Build the settings: defaults, then the settings file, then the environment."""
    environ = os.environ if environ is None else environ
    values = default_settings()
    scrapy = default_scrapy_settings()
    settings_file = settings_file or environ.get(SETTINGS_FILE_VAR)
    if settings_file:
        _apply_file(values, scrapy, Path(settings_file))
    _apply(values, _environment_overrides(environ, values), "the environment")
    return Settings(values, scrapy)


def environment_for(settings: Mapping[str, Any], **extra: object) -> dict[str, str]:
    """The environment that gives a child process exactly these settings (plus ``extra``):
    this process's environment without its own ``CRAWLCLUSTER_*`` variables, then every
    setting as ``load_settings`` reads it back."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update({name: _environment_value(value) for name, value in settings.items()})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _environment_value(value: object) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, bool)) else str(value)


def _apply_file(values: dict[str, Any], scrapy: dict[str, Any], path: Path) -> None:
    source = f"settings file {path}"
    overrides = read_settings_file(path)
    prefixed = {k: v for k, v in overrides.items() if k.startswith(PREFIX)}
    _apply(values, prefixed, source)
    for name, value in overrides.items():
        if name in prefixed:
            continue
        if name not in scrapy and not name.isupper():
            raise ConfigError(f"{source}: {name!r} is not a setting name")
        scrapy[name] = value


def read_settings_file(path: Path) -> dict[str, Any]:
    """Return the upper-case names a JSON or Python settings file defines."""
    if not path.is_file():
        raise ConfigError(f"settings file {path} does not exist")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"settings file {path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"settings file {path} must hold a JSON object")
        return data
    if path.suffix == ".py":
        namespace = runpy.run_path(str(path))
        return {k: v for k, v in namespace.items() if k.isupper()}
    raise ConfigError(f"settings file {path}: use a .json or .py file")


def _environment_overrides(environ: Mapping[str, str],
                           values: dict[str, Any]) -> dict[str, Any]:
    return {
        name: parse_value(name, text, values.get(name))
        for name, text in environ.items()
        if name.startswith(PREFIX) and name != SETTINGS_FILE_VAR
    }


def _apply(values: dict[str, Any], overrides: Mapping[str, Any], source: str) -> None:
    for name, value in overrides.items():
        if name not in values:
            raise ConfigError(f"{source}: unknown setting {name}{_suggest(name, values)}")
        values[name] = value


def _suggest(name: str, known: dict[str, Any]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_value(name: str, text: str, default: object) -> Any:
    """Parse an environment string to the type of the setting's default."""
    if isinstance(default, bool):
        return parse_bool(name, text)
    if isinstance(default, (int, float)):
        return _convert(name, text, type(default))
    if isinstance(default, (list, dict)):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{name}: expected JSON, got {text!r}") from exc
        if not isinstance(value, type(default)):
            raise ConfigError(f"{name}: expected a JSON {type(default).__name__}")
        return value
    return text


def parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}: expected a boolean (true/false), got {value!r}")


def _convert(name: str, value: Any, kind: type[Number]) -> Number:
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: expected {kind.__name__}, got {value!r}") from exc
