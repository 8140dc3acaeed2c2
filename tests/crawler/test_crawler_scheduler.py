"""The cluster scheduler's pacing when idle (pure logic, a driven clock)."""

from types import SimpleNamespace

from crawler import scheduler
from crawler.scheduler import IDLE_AFTER, IDLE_LOOK, ClusterScheduler


def test_an_idle_job_looks_for_work_every_idle_look_not_every_round(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(scheduler.time, "monotonic", lambda: now[0])
    held = [0]
    state = SimpleNamespace(last_work=now[0], last_look=0.0, _tasks_held=lambda: held[0])
    looks = []
    for _ in range(200):                                  # 10 s of 0.05 s rounds
        looks.append(not ClusterScheduler._resting(state))
        now[0] += 0.05
    rounds_before_idle = round(IDLE_AFTER / 0.05)
    assert all(looks[:rounds_before_idle])                # busy a second ago: every round
    idle_looks = sum(looks[rounds_before_idle:])
    assert idle_looks <= (200 - rounds_before_idle) * 0.05 / IDLE_LOOK + 1
    held[0] = 3                                           # tasks in the downloader: busy
    assert not ClusterScheduler._resting(state)
    held[0], state.last_work = 0, now[0]                  # just took work: every round again
    assert not ClusterScheduler._resting(state)
