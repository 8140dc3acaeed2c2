"""Every Lua script of the cluster, one ``.lua`` file each, in this folder.

Each script opens with a comment naming its KEYS and ARGV. ``LuaScripts``
registers all of them on one Redis client and every call is an EVALSHA. Every
connection the client opens loads them all first (SCRIPT LOAD), so a pipeline
can send EVALSHA without asking whether the server has them (redis-py would
send SCRIPT EXISTS with every such pipeline), even right after a Redis restart
emptied the server's script cache.
"""

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

SCRIPT_DIR = Path(__file__).parent


@cache
def script_sources() -> dict[str, str]:
    """Map script name (file stem) to its source; files are read once."""
    return {path.stem: path.read_text(encoding="utf-8")
            for path in sorted(SCRIPT_DIR.glob("*.lua"))}


class LuaScripts:
    """The cluster's Lua scripts registered on one Redis client.

    ``scripts.run("counter_rolling_add", keys, args)`` runs a script on the
    client, or on ``pipe`` when given (queued with the pipeline's commands).
    ``sources`` replaces the scripts' text (tests run instrumented copies; those
    are not loaded on connect, so load them once with SCRIPT LOAD).
    """

    def __init__(self, client: Any, sources: dict[str, str] | None = None) -> None:
        self.client = client
        self._scripts = {name: client.register_script(source)
                         for name, source in (sources or script_sources()).items()}
        _load_on_every_connection(client)

    def run(self, name: str, keys: Sequence[str] = (), args: Sequence[Any] = (),
            pipe: Any = None) -> Any:
        script = self._scripts[name]
        if pipe is None:
            return script(keys=list(keys), args=list(args))
        # execute_command: redis-py's cluster pipeline refuses pipe.evalsha by name, but
        # routes an EVALSHA by its keys like any command.
        return pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


def _load_on_every_connection(client: Any) -> None:
    """Install the connect hook; connections opened before are made again, with it."""
    from redis.cluster import RedisCluster

    if isinstance(client, RedisCluster):
        # The cluster client runs its own hook (the handshake), then the user's; a
        # replica promoted by a failover gets the scripts on the first connection to it.
        if client.user_on_connect_func is not load_scripts:
            client.user_on_connect_func = load_scripts
            for node in client.get_nodes():
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect()
        return
    pool = client.connection_pool
    if pool.connection_kwargs.get("redis_connect_func") is not load_scripts_on_connect:
        pool.connection_kwargs["redis_connect_func"] = load_scripts_on_connect
        pool.disconnect()
        pool.reset()


def load_scripts_on_connect(connection: Any) -> None:
    """redis-py's connect hook: the usual handshake, then every script loaded."""
    connection.on_connect()
    load_scripts(connection)


def load_scripts(connection: Any) -> None:
    """SCRIPT LOAD every script on a connection just made (replies read after all)."""
    sources = script_sources().values()
    for source in sources:
        connection.send_command("SCRIPT", "LOAD", source)
    for _ in sources:
        connection.read_response()
