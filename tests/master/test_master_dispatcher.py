"""Dispatcher, job registry and URL states against a real Redis, in simulated time."""

import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from master.frontier import Frontier
from master.keys import Keys
from master.registry import JobRegistry
from master.tasks import decode_task, make_task
from master.throttle import job_view


def tasks(count, crawlid="c1"):
    return [make_task(f"http://site{n % 4}.com/{n}", crawlid, "universal") for n in range(count)]


def queue_members(redis, keys, job):
    """Every task JSON in the job's queues (found through its shard index)."""
    return [member for domain in job_view(redis, keys, job).all_domains()
            for member in redis.zrange(keys.queue(job, domain), 0, -1)]


def queued(redis, keys, job):
    return len(queue_members(redis, keys, job))


def pool_members(redis, keys, spider_type="universal"):
    """Every task JSON waiting in the pools of one spider type (all shards)."""
    return [member for shard in keys.all_shards()
            for member in redis.zrange(keys.pool(shard, spider_type), 0, -1)]


def test_dispatch_follows_measured_speeds(redis, parts):
    clock, keys, registry, frontier, dispatcher = (
        parts.clock, parts.keys, parts.registry, parts.frontier, parts.dispatcher)
    for job in ("a", "b"):
        registry.register(job, "universal", job, "10.0.0.1")
    clock.now += 120
    for job in ("a", "b"):
        registry.heartbeat(job)
    registry.count_done("a", 300)          # 150 / min over its 2 minutes
    registry.count_done("b", 100)          # 50 / min
    registry.register("c", "universal", "c", "10.0.0.2")   # new: gets the mean
    assert dispatcher.weights(registry.live_jobs()) == {"a": 150, "b": 50, "c": 100}
    frontier.push(tasks(3000))
    moved = dispatcher.tick()
    assert moved > 0
    counts = {job: queued(redis, keys, job) for job in "abc"}
    assert sum(counts.values()) == moved
    assert counts["a"] == pytest.approx(moved * 0.5, abs=2)
    assert counts["b"] == pytest.approx(moved / 6, abs=2)


def test_ticks_read_the_weights_once_a_second_or_when_the_jobs_change(redis, parts):
    clock, registry, dispatcher = parts.clock, parts.registry, parts.dispatcher
    registry.register("a", "universal", "a", "10.0.0.1")
    reads = []
    weights = dispatcher.weights
    dispatcher.weights = lambda jobs: reads.append(sorted(jobs)) or weights(jobs)
    for _ in range(10):
        dispatcher.tick()
        clock.now += 0.05
    assert reads == [["a"]]                             # ten ticks in half a second
    registry.register("b", "universal", "b", "10.0.0.2")
    dispatcher.tick()
    assert reads[-1] == ["a", "b"]                      # a new job: read again at once
    clock.now += 1.0
    dispatcher.tick()
    assert len(reads) == 3


def test_an_idle_dispatcher_ticks_less_often_and_at_once_again_with_work(redis, parts):
    dispatcher, clock = parts.dispatcher, parts.clock
    dispatcher.idle_sleep = dispatcher.pause = 0.05
    parts.registry.register("a", "universal", "a", "10.0.0.1")
    pauses = []
    for _ in range(40):
        pauses.append(dispatcher.pause_after(dispatcher.tick()))
        clock.now += pauses[-1]
    idle_for = [sum(pauses[:n]) for n in range(len(pauses))]
    assert all(pause == 0.05 for pause, idle in zip(pauses, idle_for, strict=True)
               if idle < 1.0)
    assert max(pauses) == 0.5 and pauses[-1] == 0.5       # two ticks a second, not twenty
    parts.frontier.push(tasks(10))
    assert dispatcher.pause_after(dispatcher.tick()) == 0.05


def test_a_waiting_dispatcher_wakes_when_a_job_short_of_work_pushes_links(redis, parts):
    """A push with ``wake`` (a job with nothing ready) ends the dispatcher's pause at
    once, and so does a job registering; a push without leaves it; however many wake
    it, one entry is kept."""
    dispatcher, frontier, keys = parts.dispatcher, parts.frontier, parts.keys
    started = time.monotonic()
    dispatcher.wait(0.3)
    assert time.monotonic() - started >= 0.25                  # nothing pushed: the pause

    frontier.push_links(tasks(2), wake=False)
    assert redis.llen(keys.dispatch_wake()) == 0
    for batch in range(3):
        frontier.push_links(tasks(3, crawlid=f"w{batch}"), wake=True)
    assert redis.llen(keys.dispatch_wake()) == 1

    waited = []
    waiter = threading.Thread(target=lambda: waited.append(timed_wait(dispatcher, 0.0)))
    waiter.start()
    waiter.join(10)
    assert waited and waited[0] < 1.0                           # the token was there

    waiter = threading.Thread(target=lambda: waited.append(timed_wait(dispatcher, 0.2)))
    waiter.start()
    time.sleep(0.2)
    frontier.push_links(tasks(1, crawlid="late"), wake=True)   # wakes a waiting one
    waiter.join(10)
    assert waited[1] < 3.0
    assert redis.llen(keys.dispatch_wake()) == 0
    parts.registry.register("new", "universal", "n", "10.0.0.9")  # a new job wants work
    assert redis.llen(keys.dispatch_wake()) == 1


def timed_wait(dispatcher, delay):
    """Seconds a dispatcher with a 5 s pause waited, the wait starting after ``delay``."""
    time.sleep(delay)
    started = time.monotonic()
    dispatcher.wait(5.0)
    return time.monotonic() - started


def test_expired_job_returns_its_tasks_to_the_pool(redis, parts):
    clock, keys, registry, frontier, dispatcher = (
        parts.clock, parts.keys, parts.registry, parts.frontier, parts.dispatcher)
    registry.register("alive", "universal", "n1", "10.0.0.1")
    registry.register("dying", "universal", "n2", "10.0.0.2")
    frontier.push(tasks(100))
    dispatcher.tick()
    assert queued(redis, keys, "dying") == 50
    clock.now += 20
    registry.heartbeat("alive")
    clock.now += 15                         # "dying" silent for 35 s > 30 s TTL
    dispatcher.tick()                       # expires it; its 50 go back and out again
    assert "dying" not in registry.live_jobs()
    assert queued(redis, keys, "dying") == 0
    assert queued(redis, keys, "alive") == 100
    assert not registry.heartbeat("dying")  # told to register again


def test_a_job_that_closed_after_the_dispatcher_read_it_gets_no_tasks(
        redis, parts, monkeypatch):
    """The dispatcher read the live jobs, the job closed (deregistered: its queues
    emptied, shard by shard), then the dispatcher moved tasks: what its order gave the
    closed job stays in the pool, and goes to the live job next."""
    clock, keys, registry, frontier, dispatcher = (
        parts.clock, parts.keys, parts.registry, parts.frontier, parts.dispatcher)
    registry.register("alive", "universal", "n1", "10.0.0.1")
    registry.register("closing", "universal", "n2", "10.0.0.2")
    frontier.push(tasks(100))
    stale = registry.live_jobs()
    registry.deregister("closing")
    read = dispatcher._read
    monkeypatch.setattr(dispatcher, "_read", lambda: dataclasses.replace(read(), jobs=stale))
    assert dispatcher.tick() == 50
    assert queued(redis, keys, "closing") == 0
    assert len(pool_members(redis, keys)) == 50
    # Counted as planned, then taken back: the closed job's count is 0, and goes with
    # the next upkeep (a count without a job).
    assert redis.hgetall(keys.dispatched_by_job()) == {"alive": "50", "closing": "0"}
    assert int(redis.get(keys.dispatched(dispatcher._window_started))) == 50
    monkeypatch.undo()
    clock.now += 5
    registry.heartbeat("alive")
    dispatcher.tick()
    assert queued(redis, keys, "alive") == 100
    assert redis.hgetall(keys.dispatched_by_job()) == {"alive": "100"}


def test_a_job_declared_dead_that_registers_again_gets_tasks_again(redis, parts):
    clock, keys, registry, frontier, dispatcher = (
        parts.clock, parts.keys, parts.registry, parts.frontier, parts.dispatcher)
    registry.register("slow", "universal", "n1", "10.0.0.1")
    clock.now += 40
    dispatcher.tick()                                     # upkeep: "slow" is dead
    assert not registry.heartbeat("slow")
    registry.register("slow", "universal", "n1", "10.0.0.1")
    frontier.push(tasks(10))
    assert dispatcher.tick() == 10
    assert queued(redis, keys, "slow") == 10


def test_orphaned_dispatch_counts_are_cleared(redis, parts):
    """A count written after its job left (the tick's moves are counted after them)
    goes at the next upkeep."""
    clock, keys, registry, dispatcher = (
        parts.clock, parts.keys, parts.registry, parts.dispatcher)
    registry.register("alive", "universal", "n1", "10.0.0.1")
    redis.hincrby(keys.dispatched_by_job(), "gone", 3)
    clock.now += 5
    registry.heartbeat("alive")
    dispatcher.tick()
    assert "gone" not in redis.hkeys(keys.dispatched_by_job())


def test_a_dead_jobs_leases_are_reissued_at_its_heartbeat_ttl_not_its_lease(redis, parts):
    """Lease 60 s, heartbeat TTL 30 s: what a job that died had taken is re-issued (one
    attempt more) once it is declared dead, while a live job's leases stay its own."""
    clock, keys, registry, frontier, dispatcher, queues = (
        parts.clock, parts.keys, parts.registry, parts.frontier, parts.dispatcher, parts.queues)
    registry.register("alive", "universal", "n1", "10.0.0.1")
    registry.register("dying", "universal", "n2", "10.0.0.2")
    frontier.push(tasks(8))
    dispatcher.tick()
    taken = {job: [member for _, member in queues.take(job, "universal", "10.0.0.1",
                                                       per_domain=10).tasks]
             for job in ("alive", "dying")}
    assert len(taken["dying"]) == 4 and frontier.leased_count() == 8
    clock.now += 20
    registry.heartbeat("alive")
    clock.now += 15                         # "dying" silent for 35 s; leases still 25 s to go
    dispatcher.tick()
    assert frontier.leased_count() == 4     # only the live job's
    reissued = queue_members(redis, keys, "alive") + pool_members(redis, keys)
    assert sorted(decode_task(m)["url"] for m in reissued) == sorted(
        decode_task(m)["url"] for m in taken["dying"])
    assert {decode_task(m)["attempts"] for m in reissued} == {1}
    assert frontier.finish(taken["dying"][0], "done") == 0     # the dead job's lease is gone
    assert [frontier.finish(member, "done") for member in taken["alive"]] == [1] * 4
    assert frontier.leases_of("alive") == [] and frontier.leases_of("dying") == []


def test_a_link_pushed_twice_within_the_window_is_queued_once(redis, parts):
    clock, frontier = parts.clock, parts.frontier
    link = tasks(1)[0]
    twin = dict(link, id="another", depth=3)         # the same link, from another page
    assert frontier.push_links([link, twin]) == "qr"
    assert frontier.push_links([twin]) == "r"
    assert frontier.push_links([twin], recrawl=[True]) == "q"    # a page that changed
    clock.now += frontier.dedupe_seconds + 1
    assert frontier.push_links([dict(link, id="later")]) == "q"
    assert frontier.push([dict(link, id="seed")]) == [1, 0]       # seeds are not deduped
    assert frontier.push([dict(link, id="seed")]) == [0, 0]       # in the pool already


def test_expired_lease_is_reissued(redis, parts):
    clock, keys, registry, frontier, dispatcher, queues = (
        parts.clock, parts.keys, parts.registry, parts.frontier, parts.dispatcher, parts.queues)
    registry.register("j", "universal", "n", "10.0.0.1")
    frontier.push(tasks(1))
    dispatcher.tick()
    [(_, member)] = queues.take("j", "universal", "10.0.0.1").tasks
    assert frontier.leased_count() == 1
    clock.now += 61
    assert frontier.reap_leases() == (1, 0)
    [again] = pool_members(redis, keys)
    assert decode_task(again)["attempts"] == 1
    assert decode_task(again)["url"] == decode_task(member)["url"]
    assert frontier.finish(member, "done") == 0       # the old lease is gone


def test_a_url_failing_four_times_fails_for_good(redis, parts):
    clock, registry, frontier, dispatcher, queues = (
        parts.clock, parts.registry, parts.frontier, parts.dispatcher, parts.queues)
    registry.register("j", "universal", "n", "10.0.0.1")
    frontier.push(tasks(1))
    outcomes = []
    for _ in range(4):
        dispatcher.tick()
        [(_, member)] = queues.take("j", "universal", "10.0.0.1").tasks
        outcomes.append(frontier.finish_response(member, 503))
        clock.now += 2
    assert outcomes == [2, 2, 2, 3]
    assert frontier.pool_count() == 0
    failed = frontier.failed("c1")
    assert list(failed.values()) == [{"reason": "HTTP 503", "attempts": 4}]


def test_not_found_fails_at_once_and_done_is_done(redis, parts):
    registry, frontier, dispatcher, queues = (
        parts.registry, parts.frontier, parts.dispatcher, parts.queues)
    registry.register("j", "universal", "n", "10.0.0.1")
    frontier.push(tasks(2))
    dispatcher.tick()
    taken = [member for _, member in queues.take("j", "universal", "10.0.0.1").tasks]
    assert len(taken) == 2                  # two domains, one task each
    assert frontier.finish_response(taken[0], 404) == 3
    assert frontier.finish_response(taken[1], 200) == 1
    assert frontier.leased_count() == 0 and frontier.pool_count() == 0
    [(reason)] = frontier.failed("c1").values()
    assert reason["reason"] == "HTTP 404"


def test_hubs_are_reissued_every_span(redis, parts):
    clock, keys, frontier = (parts.clock, parts.keys, parts.frontier)
    [hub] = tasks(1)
    frontier.add_hub(hub, span=60)
    assert frontier.issue_due_hubs() == 0
    clock.now += 61
    assert frontier.issue_due_hubs() == 1
    assert frontier.pool_count() == 1
    redis.delete(keys.pool(keys.shard_of(hub["domain"]), "universal"))
    clock.now += 30
    assert frontier.issue_due_hubs() == 0
    clock.now += 31
    assert frontier.issue_due_hubs() == 1


def dispatcher_env(test_settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLCLUSTER_")}
    env.update(CRAWLCLUSTER_KEY_PREFIX=test_settings["CRAWLCLUSTER_KEY_PREFIX"],
               CRAWLCLUSTER_REDIS_URL=test_settings["CRAWLCLUSTER_REDIS_URL"],
               CRAWLCLUSTER_DISPATCH_WINDOW="1", CRAWLCLUSTER_DISPATCH_HEADROOM="100",
               CRAWLCLUSTER_DISPATCH_BATCH="200", CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT="600000")
    return env


def start_dispatcher(env):
    return subprocess.Popen([sys.executable, "-m", "manager.cli", "master"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_killed_dispatcher_never_loses_or_duplicates(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    registry = JobRegistry.from_settings(redis, test_settings)
    frontier = Frontier.from_settings(redis, test_settings)
    for job in ("j1", "j2", "j3"):
        registry.register(job, "universal", job, "10.0.0.1")
    beating = threading.Event()

    def beat():
        while not beating.wait(1):
            for job in ("j1", "j2", "j3"):
                registry.heartbeat(job)

    threading.Thread(target=beat, daemon=True).start()
    originals = tasks(20_000)
    frontier.push(originals)
    env = dispatcher_env(test_settings)
    rng = random.Random(7)
    try:
        for _ in range(8):
            process = start_dispatcher(env)
            time.sleep(rng.uniform(0.3, 0.9))
            process.send_signal(signal.SIGKILL)
            process.wait()
        process = start_dispatcher(env)
        deadline = time.monotonic() + 60
        while frontier.pool_count() and time.monotonic() < deadline:
            time.sleep(0.2)
        process.terminate()
        process.wait(10)
    finally:
        beating.set()
    members = pool_members(redis, keys) + [m for job in ("j1", "j2", "j3")
                                           for m in queue_members(redis, keys, job)]
    assert len(members) == 20_000
    assert {decode_task(m)["id"] for m in members} == {t["id"] for t in originals}
    assert frontier.pool_count() == 0


def test_sigterm_stops_the_dispatcher_cleanly(test_settings, local_servers):
    process = start_dispatcher(dispatcher_env(test_settings))
    started = []          # its log up to "running": its signal handlers are installed
    deadline = time.monotonic() + 60
    while not (started and "running" in started[-1]) and time.monotonic() < deadline:
        started.append(process.stderr.readline())
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, "".join(started) + stderr
    assert "dispatcher stopped" in stderr


def test_tasks_go_only_to_jobs_of_their_spider_type(redis, parts):
    registry, frontier, dispatcher = parts.registry, parts.frontier, parts.dispatcher
    registry.register("u1", "universal", "h", "10.0.0.1")
    registry.register("p1", "precise", "h", "10.0.0.1")
    frontier.push(tasks(20) + [make_task(f"http://p.com/{n}", "c2", "precise")
                                     for n in range(10)])
    assert frontier.pool_count() == 30 and frontier.pool_count("precise") == 10
    dispatcher.tick()
    assert frontier.pool_count() == 0
    for job, spider_type, count in (("u1", "universal", 20), ("p1", "precise", 10)):
        members = queue_members(redis, parts.keys, job)
        assert len(members) == count
        assert {decode_task(m)["spider_type"] for m in members} == {spider_type}
