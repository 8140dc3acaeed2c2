"""Dispatcher benchmark: atomic batched moves, and the thesis Figure 5-1 run.

  python bench/dispatch.py [--quick]

1. Tasks/s moved from the pools into job queues by the dispatcher (one script
   call per shard with tasks, up to 500 each, pipelined), against the obvious
   way: one round trip per task (ZPOPMIN, then ZADD to the chosen queue; not
   even atomic).
2. Figure 5-1 in simulated time against the real Redis: three jobs finishing
   360/420/480 tasks/min; job 1 speeds up to 420 at minute 30 and to 480 at
   minute 50. Each 10-minute window, the share of tasks dispatched to each job
   is compared with its share of the speed. ``windows_to_rebalance`` counts the
   windows after a change until the shares are back within 3 points.
The last line is one JSON object.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_redis, bench_settings, finish, machine, rate
from master.dispatcher import Dispatcher
from master.frontier import Frontier
from master.keys import Keys
from master.registry import JobRegistry
from master.tasks import make_task
from master.throttle import job_view

JOBS = ("job1", "job2", "job3")


def push_tasks(client, keys, count, tag):
    frontier = Frontier(client, keys)
    for start in range(0, count, 10_000):
        frontier.push([make_task(f"http://site{n % 50}.com/{tag}/{n}", "bench", "universal")
                       for n in range(start, min(count, start + 10_000))])


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def throughput(client, keys, tasks=200_000):
    push_tasks(client, keys, tasks, "speed")
    clock = Clock(time.time())
    registry = JobRegistry(client, keys, clock=clock)
    for job in JOBS:
        registry.register(job, "universal", job, "10.0.0.1")
    dispatcher = Dispatcher(client, keys, registry, Frontier(client, keys, clock=clock),
                            clock=clock)
    dispatcher._window_started = 0
    dispatcher.leases.refresh()
    weights = {"job1": 360, "job2": 420, "job3": 480}
    started, moved = time.perf_counter(), 0
    while True:
        count = dispatcher._dispatch("universal", weights, 25_000)
        moved += count
        if count == 0:
            break
    ours = rate(moved, time.perf_counter() - started)
    print(f"  dispatch script, 500 per call: {ours:>9,.0f} tasks/s ({moved:,} moved)")

    push_tasks(client, keys, 5_000, "naive")
    started = time.perf_counter()
    order = dispatcher.robins["universal"].sequence(weights, 5_000)
    pools = [keys.pool(keys.shard_of(f"site{n}.com"), "universal") for n in range(50)]
    for n, job in enumerate(order):
        [(member, score)] = client.zpopmin(pools[n % 50])
        client.zadd(keys.queue(job, "site.com"), {member: score})
    naive = rate(5_000, time.perf_counter() - started)
    print(f"  one round trip per task:       {naive:>9,.0f} tasks/s")
    return ours, naive


def speed(job, minute):
    if job == "job1":
        return 360 if minute < 30 else 420 if minute < 50 else 480
    return {"job2": 420, "job3": 480}[job]


def figure_5_1(client, keys, minutes=70, step=5.0, tasks=130_000):
    """Simulated crawl; return per-window rows of shares and speed ratios."""
    window = 600.0
    clock = Clock(1_800_000_000.0 - 1_800_000_000.0 % window)
    registry = JobRegistry(client, keys, ttl=60, weight_minutes=10, clock=clock)
    frontier = Frontier(client, keys, clock=clock)
    dispatcher = Dispatcher(client, keys, registry, frontier, window=window, headroom=1.25,
                            default_weight=400, batch=500, clock=clock)
    push_tasks(client, keys, tasks, "fig51")
    for job in JOBS:
        registry.register(job, "universal", job, "10.0.0.1")
    start, owed = clock.now, dict.fromkeys(JOBS, 0.0)
    rows, speeds = [], {job: 0.0 for job in JOBS}
    while clock.now < start + minutes * 60:
        minute = (clock.now - start) / 60
        window_index = int((clock.now - start) // window)
        if len(rows) <= window_index:
            if rows:
                rows[-1].update(dispatched=dispatcher.window_totals())
            rows.append({"window": window_index})
            speeds = {job: 0.0 for job in JOBS}
        dispatcher.tick()
        for job in JOBS:
            owed[job] += speed(job, minute) * step / 60
            done = consume(client, keys, job, int(owed[job]))
            owed[job] -= done
            if done:
                registry.count_done(job, done)
            registry.heartbeat(job)
            speeds[job] += speed(job, minute)
        rows[-1]["speeds"] = dict(speeds)
        clock.now += step
    dispatcher.tick()
    rows[-1].update(dispatched=dispatcher.window_totals())
    return rows


def consume(client, keys, job, count):
    """The job finishes up to ``count`` tasks from its queues."""
    done = 0
    for domain in job_view(client, keys, job).all_domains():
        if done >= count:
            break
        done += len(client.zpopmin(keys.queue(job, domain), count - done))
    return done


def share_errors(rows):
    for row in rows:
        total = sum(row["dispatched"].values())
        speed_total = sum(row["speeds"].values())
        row["shares"] = {job: row["dispatched"].get(job, 0) / total for job in JOBS}
        row["speed_shares"] = {job: row["speeds"][job] / speed_total for job in JOBS}
        row["error"] = max(abs(row["shares"][j] - row["speed_shares"][j]) for j in JOBS)
        print(f"  window {row['window']} (min {row['window'] * 10:>2}-{row['window'] * 10 + 10}): "
              + ", ".join(f"{j} {row['shares'][j]:.1%} (speed {row['speed_shares'][j]:.1%})"
                          for j in JOBS)
              + f"; error {row['error']:.1%}")
    return rows


def windows_to_rebalance(rows, change_windows=(3, 5), tolerance=0.03):
    worst = 0
    for change in change_windows:
        after = [row for row in rows if row["window"] >= change]
        settled = next((row["window"] - change for row in after if row["error"] <= tolerance),
                       len(after))
        worst = max(worst, settled)
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a tenth of the tasks to move and 20 simulated minutes: a rough run")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    settings = bench_settings()
    keys = Keys.from_settings(settings)
    print(f"bench/dispatch.py on {machine()}")
    with bench_redis(settings) as client:
        print("throughput")
        ours, naive = throughput(client, keys, 200_000 // scale)
    simulation = bench_settings()
    with bench_redis(simulation) as client:
        # enough tasks that no job runs out before the simulated time ends
        minutes, tasks = (20, 40_000) if args.quick else (70, 130_000)
        print(f"thesis Figure 5-1 (simulated {minutes} minutes, 10-minute windows)")
        rows = share_errors(figure_5_1(client, Keys.from_settings(simulation), minutes,
                                       tasks=tasks))
    finish({
        "tasks_per_s": ours,
        "vs_one_roundtrip_per_task": ours / naive,
        "max_share_error": max(row["error"] for row in rows),
        "windows_to_rebalance": windows_to_rebalance(rows),
        "windows": [{k: row[k] for k in ("window", "shares", "speed_shares", "error")}
                    for row in rows],
        "machine": machine(),
    })


if __name__ == "__main__":
    main()
