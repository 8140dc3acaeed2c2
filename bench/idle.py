"""What an idle cluster costs Redis: a dispatcher and a spider process with no work.

  python bench/idle.py [--seconds N]

Starts, against the bench Redis, nothing, then a dispatcher (``crawlcluster master``),
then one spider process, then both, each left idle for ``--seconds`` after a warm-up,
and reads the Redis server's CPU (INFO cpu, user + system) and round trips (its read
calls, /proc/<pid>/io ``syscr``) over that time. The roles' share is the figure less the
server's own (the "nothing" row). The last line is one JSON object.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_redis, bench_settings, finish, machine, redis_cpu_seconds
from manager.local.crawl import ROOT, cluster_env, start_spider

WARM_UP = 6.0


def reads(pid):
    """Read calls the Redis server made so far: one a round trip of a client."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    return 0


def measure(client, pid, seconds):
    cpu, calls = redis_cpu_seconds(client), reads(pid)
    time.sleep(seconds)
    return ((redis_cpu_seconds(client) - cpu) * 1000 / seconds,
            (reads(pid) - calls) / seconds)


def idle(settings, roles, client, pid, seconds, work):
    env = cluster_env(settings, CRAWLCLUSTER_IDLE_TIMEOUT="600")
    processes = []
    if "master" in roles:
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "manager.cli", "master"], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=(work / "master.log").open("w")))
    if "spider" in roles:
        processes.append(start_spider("universal", env, work / "spider.log", "idle-job"))
    try:
        time.sleep(WARM_UP if processes else 1.0)
        return measure(client, pid, seconds)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    settings = bench_settings(("redis", "kafka", "zookeeper", "mongodb"))
    work = Path(tempfile.mkdtemp(prefix="crawlcluster-idle-"))
    summary = {"machine": machine(), "seconds": args.seconds}
    with bench_redis(settings) as client:
        pid = client.info("server")["process_id"]
        for name, roles in (("nothing", ()), ("dispatcher", ("master",)),
                            ("spider", ("spider",)), ("both", ("master", "spider"))):
            cpu_ms, trips = idle(settings, roles, client, pid, args.seconds, work)
            print(f"{name:<11} Redis CPU {cpu_ms:5.2f} ms/s, {trips:5.1f} round trips/s",
                  flush=True)
            summary[f"{name}_redis_cpu_ms_per_s"] = cpu_ms
            summary[f"{name}_round_trips_per_s"] = trips
    for name in ("dispatcher", "spider", "both"):
        summary[f"{name}_share_ms_per_s"] = (summary[f"{name}_redis_cpu_ms_per_s"]
                                             - summary["nothing_redis_cpu_ms_per_s"])
    finish(summary)


if __name__ == "__main__":
    main()
