import re

import pytest

from master.keys import Keys
from master.lua import LuaScripts, script_sources
from settings.clients import redis_client


def test_keys_carry_the_prefix():
    keys = Keys("cc")
    assert keys.rolling_counter("preprocess:crawl") == "cc:counter:rolling:preprocess:crawl"
    assert keys.step_counter("x", 3600.0) == "cc:counter:step:x:3600"
    assert keys.heartbeat("monitor", "node1") == "cc:heartbeat:monitor:node1"
    assert keys.pattern() == "cc:*"


@pytest.mark.parametrize("prefix", ["", "a b", "{x}"])
def test_bad_prefix_is_refused(prefix):
    with pytest.raises(ValueError):
        Keys(prefix)


def test_every_lua_script_documents_its_keys_and_args():
    for name, source in script_sources().items():
        header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
        used_keys = set(re.findall(r"KEYS\[(\d+)\]", source))
        used_args = set(re.findall(r"ARGV\[(\d+)\]", source))
        for index in used_keys:
            assert f"-- KEYS[{index}]" in header, f"{name}.lua: KEYS[{index}] undocumented"
        for index in used_args:
            assert f"-- ARGV[{index}]" in header, f"{name}.lua: ARGV[{index}] undocumented"


def test_scripts_go_to_the_server_once_then_run_by_sha(redis, test_settings):
    from master.counters import RollingTimeCounter

    def calls(command):
        return redis.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)

    client = redis_client(test_settings, "test")          # a client of its own
    before = {cmd: calls(cmd) for cmd in ("eval", "evalsha", "script|load", "script|exists")}
    scripts = LuaScripts(client)
    counter = RollingTimeCounter.from_settings(client, test_settings, "sha", window=5,
                                               scripts=scripts)
    for _ in range(5):
        counter.increment()
        pipe = client.pipeline(transaction=False)
        counter.increment(pipe=pipe)
        pipe.execute()
    assert calls("eval") == before["eval"]                     # source never re-sent
    assert calls("script|exists") == before["script|exists"]   # pipelines never ask
    assert calls("script|load") - before["script|load"] == len(script_sources())
    assert calls("evalsha") - before["evalsha"] >= 10
    # a server that lost its scripts (a restart): every new connection loads them first
    client.script_flush()
    client.connection_pool.disconnect()
    pipe = client.pipeline(transaction=False)
    counter.increment(pipe=pipe)
    pipe.execute()
    assert counter.value() == 11
    client.close()
