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
from functools import cache, lru_cache
from typing import Any

from settings.errors import ConfigError

logger = logging.getLogger(__name__)

EMPTY: dict[str, Any] = {"domains": {}, "blacklist": []}


@cache
def _extractor():
    import tldextract

    # The bundled public-suffix snapshot: no download at run time.
    return tldextract.TLDExtract(suffix_list_urls=())


_NETLOC = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


def domain_of(url):
    """The domain a URL is throttled under: its registered domain, else its host."""
    match = _NETLOC.match(url)
    return _domain_of_netloc(match.group(1) if match else url)


@lru_cache(maxsize=65536)
def _domain_of_netloc(netloc):
    # tldextract costs ~20 us a call; a crawl sees the same hosts again and again.
    parts = _extractor()(netloc)
    return parts.top_domain_under_public_suffix or parts.domain


def config_path(settings):
    return settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"].rstrip("/") + "/config/sites"


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def validate_limit(domain, hits, window, scale=1.0, ip_hits=None):
    """The entry for a domain's limit, or ConfigError naming what is wrong."""
    if not _whole(hits):
        raise ConfigError(f"{domain}: hits must be a whole number >= 0, got {hits!r}")
    if ip_hits is not None and not _whole(ip_hits):
        raise ConfigError(f"{domain}: ip_hits must be a whole number >= 0, got {ip_hits!r}")
    if not isinstance(window, (int, float)) or window <= 0:
        raise ConfigError(f"{domain}: window must be a number of seconds > 0, got {window!r}")
    if not isinstance(scale, (int, float)) or not 0 <= scale <= 1:
        raise ConfigError(f"{domain}: scale must be between 0 and 1, got {scale!r}")
    entry = {"hits": hits, "window": float(window), "scale": float(scale)}
    if ip_hits is not None:
        entry["ip_hits"] = ip_hits
    return entry


class SiteConfig:
    """The live site config of one process."""

    def __init__(self, default_hits, default_window, zookeeper=None, path=None):
        self.default = validate_limit("default", default_hits, default_window)
        self.zookeeper = zookeeper
        self.path = path
        self._config = EMPTY
        self._changed = threading.Condition()
        self.version = 0

    @classmethod
    def from_settings(cls, settings, zookeeper):
        return cls(settings.getint("CRAWLCLUSTER_THROTTLE_HITS"),
                   settings.getfloat("CRAWLCLUSTER_THROTTLE_WINDOW"),
                   zookeeper, config_path(settings))

    def start(self):
        """Read the znode and watch it (a no-op without ZooKeeper)."""
        if self.zookeeper is not None:
            self.zookeeper.ensure_path(self.path)
            self.zookeeper.DataWatch(self.path)(self._on_change)
        return self

    def _on_change(self, data, stat):
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

    def wait_for_version(self, version, timeout):
        """Block until the config changed past ``version`` (tests, tools)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.version > version, timeout)

    def limit(self, domain):
        """``(hits allowed, window seconds)`` for a domain."""
        entry = self._config["domains"].get(domain, self.default)
        return int(entry["hits"] * entry.get("scale", 1.0)), entry["window"]

    def ip_hits(self, domain):
        """Hits allowed per window from one source address (``hits`` unless set)."""
        entry = self._config["domains"].get(domain, self.default)
        return int(entry.get("ip_hits", entry["hits"]) * entry.get("scale", 1.0))

    def is_blacklisted(self, domain):
        return domain in self._config["blacklist"]

    def snapshot(self):
        return json.loads(json.dumps(self._config))

    # --- writers (the monitor's zookeeper plugin, the CLI) -----------------------

    def set_limit(self, domain, hits, window, scale=1.0, ip_hits=None):
        entry = validate_limit(domain, hits, window, scale, ip_hits)
        return self._modify(lambda config: config["domains"].__setitem__(domain, entry))

    def remove_limit(self, domain):
        return self._modify(lambda config: config["domains"].pop(domain, None))

    def blacklist_add(self, domain):
        return self._modify(lambda config: config["blacklist"].append(domain)
                            if domain not in config["blacklist"] else None)

    def blacklist_remove(self, domain):
        return self._modify(lambda config: config["blacklist"].remove(domain)
                            if domain in config["blacklist"] else None)

    def _modify(self, change):
        """Read-modify-write of the znode, retried if another writer got in first."""
        from kazoo.exceptions import BadVersionError

        self.zookeeper.ensure_path(self.path)
        while True:
            data, stat = self.zookeeper.get(self.path)
            try:
                config = parse_config(data)
            except ConfigError:
                logger.warning("replacing bad site config in %s", self.path)
                config = json.loads(json.dumps(EMPTY))
            change(config)
            encoded = json.dumps(config, sort_keys=True).encode()
            try:
                self.zookeeper.set(self.path, encoded, version=stat.version)
                return config
            except BadVersionError:
                continue


def parse_config(data):
    """The site config in a znode's bytes (empty means none), checked."""
    if not data:
        return json.loads(json.dumps(EMPTY))
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
