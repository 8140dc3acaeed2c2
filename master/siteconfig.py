"""Per-domain throttle limits and the domain blacklist, live from ZooKeeper.

One JSON znode (``<CRAWLCLUSTER_ZOOKEEPER_ROOT>/config/sites``) holds

    {"domains": {"example.com": {"hits": 10, "window": 60, "scale": 1.0, "ip_hits": 5}},
     "blacklist": ["spam.example"]}

``SiteConfig`` watches it and applies every change within moments, in every
process that watches (the master's throttle, every spider). If ZooKeeper
becomes unreachable the last config read stays in force; a znode holding bad
JSON is logged and ignored. A domain without an entry gets the default limit
from the settings. scrapy-cluster semantics: at most ``floor(hits * scale)``
requests per ``window`` seconds per spider type (the whole cluster), and at most
``floor(ip_hits * scale)`` of them from one source address (``ip_hits`` defaults to
``hits``: then one address may use the whole limit).
"""

import json
import logging
import re
import threading
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

from settings.errors import ConfigError
from settings.loader import Settings

Config = dict[str, Any]      # {"domains": {domain: limit entry}, "blacklist": [domain]}

logger = logging.getLogger(__name__)

EMPTY: dict[str, Any] = {"domains": {}, "blacklist": []}


@cache
def _extractor() -> Any:
    import tldextract

    # The bundled public-suffix snapshot: no download at run time.
    return tldextract.TLDExtract(suffix_list_urls=())


_NETLOC = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


def domain_of(url: str) -> str:
    """The domain a URL is throttled under: its registered domain, else its host."""
    match = _NETLOC.match(url)
    return _domain_of_netloc(match.group(1) if match else url)


@lru_cache(maxsize=65536)
def _domain_of_netloc(netloc: str) -> str:
    # tldextract costs ~20 us a call; a crawl sees the same hosts again and again.
    parts = _extractor()(netloc)
    return str(parts.top_domain_under_public_suffix or parts.domain)


def config_path(settings: Settings) -> str:
    return str(settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"]).rstrip("/") + "/config/sites"


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def validate_limit(domain: str, hits: Any, window: Any, scale: Any = 1.0,
                   ip_hits: Any = None) -> dict[str, Any]:
    """The entry for a domain's limit, or ConfigError naming what is wrong."""
    if not _whole(hits):
        raise ConfigError(f"{domain}: hits must be a whole number >= 0, got {hits!r}")
    if ip_hits is not None and not _whole(ip_hits):
        raise ConfigError(f"{domain}: ip_hits must be a whole number >= 0, got {ip_hits!r}")
    if not isinstance(window, (int, float)) or window <= 0:
        raise ConfigError(f"{domain}: window must be a number of seconds > 0, got {window!r}")
    if not isinstance(scale, (int, float)) or not 0 <= scale <= 1:
        raise ConfigError(f"{domain}: scale must be between 0 and 1, got {scale!r}")
    entry: dict[str, Any] = {"hits": hits, "window": float(window), "scale": float(scale)}
    if ip_hits is not None:
        entry["ip_hits"] = ip_hits
    return entry


class SiteConfig:
    """The live site config of one process."""

    def __init__(self, default_hits: int, default_window: float, zookeeper: Any = None,
                 path: str | None = None) -> None:
        self.default = validate_limit("default", default_hits, default_window)
        self.zookeeper = zookeeper
        self.path = path
        self._config = EMPTY
        self._changed = threading.Condition()
        self.version = 0

    @classmethod
    def from_settings(cls, settings: Settings, zookeeper: Any) -> "SiteConfig":
        return cls(settings.getint("CRAWLCLUSTER_THROTTLE_HITS"),
                   settings.getfloat("CRAWLCLUSTER_THROTTLE_WINDOW"),
                   zookeeper, config_path(settings))

    def start(self) -> "SiteConfig":
        """Read the znode and watch it (a no-op without ZooKeeper)."""
        if self.zookeeper is not None:
            self.zookeeper.ensure_path(self.path)
            self.zookeeper.DataWatch(self.path)(self._on_change)
        return self

    def _on_change(self, data: bytes | None, stat: Any) -> None:
        try:
            config = parse_config(data)
        except ConfigError as exc:
            logger.error("ignoring bad site config in %s (keeping the last one): %s",
                         self.path, exc)
            return
        with self._changed:
            self._config = config
            self.version += 1
            self._changed.notify_all()
        logger.info("site config now: %d domain limits, %d blacklisted",
                    len(config["domains"]), len(config["blacklist"]))

    def wait_for_version(self, version: int, timeout: float) -> bool:
        """Block until the config changed past ``version`` (tests, tools)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.version > version, timeout)

    def limit(self, domain: str) -> tuple[int, float]:
        """``(hits allowed, window seconds)`` for a domain."""
        entry = self._config["domains"].get(domain, self.default)
        return int(entry["hits"] * entry.get("scale", 1.0)), entry["window"]

    def ip_hits(self, domain: str) -> int:
        """Hits allowed per window from one source address (``hits`` unless set)."""
        entry = self._config["domains"].get(domain, self.default)
        return int(entry.get("ip_hits", entry["hits"]) * entry.get("scale", 1.0))

    def is_blacklisted(self, domain: str) -> bool:
        return domain in self._config["blacklist"]

    def snapshot(self) -> Config:
        return _copy(self._config)

    # --- writers (the monitor's zookeeper plugin, the CLI) -----------------------

    def set_limit(self, domain: str, hits: int, window: float, scale: float = 1.0,
                  ip_hits: int | None = None) -> Config:
        entry = validate_limit(domain, hits, window, scale, ip_hits)
        return self._modify(lambda config: config["domains"].__setitem__(domain, entry))

    def remove_limit(self, domain: str) -> Config:
        return self._modify(lambda config: config["domains"].pop(domain, None))

    def blacklist_add(self, domain: str) -> Config:
        return self._modify(lambda config: config["blacklist"].append(domain)
                            if domain not in config["blacklist"] else None)

    def blacklist_remove(self, domain: str) -> Config:
        return self._modify(lambda config: config["blacklist"].remove(domain)
                            if domain in config["blacklist"] else None)

    def _modify(self, change: Callable[[Config], object]) -> Config:
        """Read-modify-write of the znode, retried if another writer got in first."""
        from kazoo.exceptions import BadVersionError

        self.zookeeper.ensure_path(self.path)
        while True:
            data, stat = self.zookeeper.get(self.path)
            try:
                config = parse_config(data)
            except ConfigError:
                logger.warning("replacing bad site config in %s", self.path)
                config = _copy(EMPTY)
            change(config)
            encoded = json.dumps(config, sort_keys=True).encode()
            try:
                self.zookeeper.set(self.path, encoded, version=stat.version)
                return config
            except BadVersionError:
                continue


def _copy(config: Config) -> Config:
    copied: Config = json.loads(json.dumps(config))
    return copied


def parse_config(data: bytes | None) -> Config:
    """The site config in a znode's bytes (empty means none), checked."""
    if not data:
        return _copy(EMPTY)
    try:
        config = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError("must be a JSON object")
    domains = config.get("domains", {})
    blacklist = config.get("blacklist", [])
    if not isinstance(domains, dict) or not isinstance(blacklist, list):
        raise ConfigError("'domains' must be an object and 'blacklist' a list")
    checked = {domain: validate_limit(domain, entry.get("hits"), entry.get("window"),
                                      entry.get("scale", 1.0), entry.get("ip_hits"))
               for domain, entry in domains.items() if isinstance(entry, dict)}
    if len(checked) != len(domains):
        raise ConfigError("every domain entry must be an object")
    return {"domains": checked, "blacklist": [str(d) for d in blacklist]}
