"""Every Lua script of the cluster, one ``.lua`` file each, in this folder.

Each script opens with a comment naming its KEYS and ARGV. ``LuaScripts``
registers all of them on one Redis client: the source goes to the server once
(SCRIPT LOAD on first use), every later call is an EVALSHA.
"""

from functools import cache
from pathlib import Path

SCRIPT_DIR = Path(__file__).parent


@cache
def script_sources():
    """Map script name (file stem) to its source; files are read once."""
    return {path.stem: path.read_text(encoding="utf-8")
            for path in sorted(SCRIPT_DIR.glob("*.lua"))}


class LuaScripts:
    """The cluster's Lua scripts registered on one Redis client.

    ``scripts.run("counter_rolling_add", keys, args)`` runs a script on the
    client, or on ``pipe`` when given (queued with the pipeline's commands).
    """

    def __init__(self, client):
        self.client = client
        self._scripts = {name: client.register_script(source)
                         for name, source in script_sources().items()}

    def run(self, name, keys=(), args=(), pipe=None):
        return self._scripts[name](keys=list(keys), args=list(args), client=pipe)
