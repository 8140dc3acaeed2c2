"""Plugins of preprocess and monitor, configured like Scrapy middlewares.

A setting maps a class path to an order, ``{path: order}``; ``None`` disables
a class. Each plugin names the request kinds it ``handles``; the first plugin
in order that handles a kind gets it.
"""

import importlib
from collections.abc import Mapping
from typing import Any

from settings.errors import ConfigError


def load_object(path: str) -> Any:
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot load plugin {path!r}: {exc}") from None


def load_plugins(spec: Mapping[str, int | None], *args: Any) -> list[Any]:
    """Instances of the enabled plugin classes in order, each built with ``args``."""
    enabled = sorted((order, path) for path, order in spec.items() if order is not None)
    return [load_object(path)(*args) for _, path in enabled]


def route_table(plugins: list[Any]) -> dict[str, Any]:
    """``{kind: plugin}``: the first plugin in order for each kind."""
    table: dict[str, Any] = {}
    for plugin in plugins:
        for kind in plugin.handles:
            table.setdefault(kind, plugin)
    return table


class Plugin:
    """Base of every plugin: the kinds it handles and the name its counters use."""

    handles: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return type(self).__name__
