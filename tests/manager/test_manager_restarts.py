"""When supervised processes are started again (pure logic, a driven clock): the backoff,
and a role that keeps dying waiting for its servers instead of being given up on."""

import os
import subprocess
from types import SimpleNamespace

from manager.local.statedir import StateDir
from manager.local.supervisor import Supervisor
from manager.restarts import (
    BACKOFF_CAP,
    RESTART_LIMIT,
    RESTART_WINDOW,
    SERVER_CHECK_EVERY,
    RestartPolicy,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_backoff_doubles_up_to_its_cap_and_a_process_dying_too_often_waits():
    clock = Clock()
    policy = RestartPolicy(clock=clock)
    delays = []
    for _ in range(RESTART_LIMIT + 3):
        delays.append(policy.died("spider"))
        clock.now += 1
    assert delays[:RESTART_LIMIT] == [1, 2, 4, 8, 16]
    assert delays[RESTART_LIMIT:] == [SERVER_CHECK_EVERY] * 3     # its servers looked at
    assert policy.waiting("spider") and not policy.waiting("other")
    assert policy.may_start("spider", outage_seen=True)          # they were down: at once
    assert not policy.may_start("spider", outage_seen=False)     # else a minute after
    clock.now += BACKOFF_CAP
    assert policy.may_start("spider", outage_seen=False)
    clock.now += 2 * RESTART_WINDOW                  # waiting for its servers
    assert policy.waiting("spider") and policy.died("spider") == SERVER_CHECK_EVERY
    policy.started("spider")
    clock.now += RESTART_WINDOW                      # a start that held for a whole window
    assert policy.died("spider") == 1 and not policy.waiting("spider")
    policy.died("other")
    clock.now += RESTART_WINDOW                      # healthy for a window: forgotten
    policy.died("third")
    assert set(policy.deaths) == {"third"} and set(policy.starts) <= {"third"}


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_role_that_keeps_dying_waits_for_the_servers_then_is_started_again(tmp_path):
    state = StateDir(tmp_path)
    state.record("cluster-master", dead_pid(), ["master"])
    started = []
    answering = [False]

    def start(role):                                  # it dies at once while servers are down
        started.append(role)
        if answering[0]:
            state.record("cluster-master", os.getpid(), ["master"])

    cluster = SimpleNamespace(state=state, settings={}, start=start)
    clock = Clock()
    supervisor = Supervisor(cluster, clock=clock, servers_answer=lambda: answering[0])

    def rounds(seconds: float) -> None:
        for _ in range(int(seconds)):
            supervisor.round()
            clock.now += 1

    rounds(1 + 2 + 4 + 8 + 16 + 5 + 3)               # it dies again at each start
    assert started == ["master"] * RESTART_LIMIT
    assert state.restarts()["master"] == {"restarts": RESTART_LIMIT, "waiting": True,
                                          "last": state.restarts()["master"]["last"]}
    rounds(10 * BACKOFF_CAP)                          # the servers are down: not started
    assert len(started) == RESTART_LIMIT
    assert state.restarts()["master"]["waiting"] is True

    answering[0] = True                               # they answer: started, and it runs
    rounds(SERVER_CHECK_EVERY + 1)
    assert len(started) == RESTART_LIMIT + 1
    rounds(2 * BACKOFF_CAP)
    assert len(started) == RESTART_LIMIT + 1
    assert state.restarts()["master"] == {"restarts": RESTART_LIMIT + 1, "waiting": False,
                                          "last": state.restarts()["master"]["last"]}


def test_a_role_dying_while_its_servers_answer_is_started_once_a_minute(tmp_path):
    state = StateDir(tmp_path)
    state.record("cluster-monitor", dead_pid(), ["monitor"])
    clock = Clock()
    started = []
    supervisor = Supervisor(SimpleNamespace(state=state, settings={}, start=started.append),
                            clock=clock, servers_answer=lambda: True)
    for _ in range(10 * 60):                          # ten minutes of one-second rounds
        supervisor.round()
        clock.now += 1
    assert RESTART_LIMIT + 5 <= len(started) <= RESTART_LIMIT + 10   # then one a minute
