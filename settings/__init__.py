"""Shared foundation of every role: settings, the client factory, errors."""

from settings.errors import ConfigError, CrawlClusterError, ServerUnreachable
from settings.loader import Settings, load_settings

__all__ = [
    "ConfigError",
    "CrawlClusterError",
    "ServerUnreachable",
    "Settings",
    "load_settings",
]
