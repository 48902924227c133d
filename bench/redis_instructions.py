#!/usr/bin/env python3
"""Redis' own instructions per decision, counted by callgrind (issue 13, item 1): sluice
through its server against the floor scripts (bench/floors/) served the same way and under
redis-benchmark, each with the reads Redis made per decision.

    python3 bench/redis_instructions.py --sluice target/release/sluice \
        --bench target/release/sluice-bench --out DIR [--rounds 2] [--in-flight 16]
        [--duration 5s] [--points fixed_window,fixed_window x5,...]

Why a second measure beside bench/redis_cost.py: Redis' CPU time on this shared 2-core VM
moves by +-15% between runs, more than the differences that matter here. callgrind counts the
instructions Redis runs in user space, the same for the same work whatever else the machine
does. What it does not count is the kernel: the reads, writes and wake-ups of each round
trip, which are most of Redis' CPU time on loopback and scale with the reads per decision
(printed beside each figure). So the comparison of script work is the instructions at equal
reads per decision; the time figures of bench/redis_cost.py hold the kernel's share.

Redis runs under `valgrind --tool=callgrind` (about 30 times slower; `hz 1`, so its timer
work is no noise), each measurement zeroes the counters after a warm-up and dumps them after
the load. sluice and the floor servers are the real servers of bench/redis_cost.py, driven by
`sluice-bench load` at --in-flight over 2 connections; the floors also run under
redis-benchmark (-c 1) at -P in-flight/2 (the reads per decision the servers make) and at
-P in-flight. Writes DIR/redis-instructions~SUBJECT~POINT~rN.json (SUBJECT sluice, served,
floor-PN; bench/report_redis_cost.py's section) and prints a Markdown table of medians.
Standard library only (plus valgrind).
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import floors  # noqa: E402
import redis_cost  # noqa: E402
import tools  # noqa: E402


class Counted:
    """redis-server under callgrind: zero, then dump and read the instructions since."""

    def __init__(self, port, work):
        self.port, self.dumps = port, os.path.join(work, "callgrind")
        os.makedirs(self.dumps, exist_ok=True)
        d = os.path.join(work, f"redis-{port}")
        os.makedirs(d, exist_ok=True)
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.path.join(
                self.dumps, "out.%p"), "redis-server", "--port", str(port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d, "--hz", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True,
                               text=True)
            if r.stdout.strip() == "PONG":
                return
            time.sleep(0.2)
        sys.exit("redis-server under callgrind did not start")

    def control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], check=True,
                       capture_output=True)

    def zero(self):
        self.control("-z")
        self.reads0 = self.reads()

    def reads(self):
        for line in floors.cli(self.port, "INFO", "stats").splitlines():
            if line.startswith("total_reads_processed:"):
                return int(line.split(":")[1])
        return 0

    def dump(self):
        """(instructions since the last zero, reads since it)."""
        reads = self.reads() - self.reads0
        for f in glob.glob(os.path.join(self.dumps, "out.*")):
            os.remove(f)
        self.control("-d")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            total = 0
            for f in glob.glob(os.path.join(self.dumps, "out.*")):
                with open(f) as fh:
                    for line in fh:
                        if line.startswith(("totals:", "summary:")):
                            total = max(total, int(line.split()[1]))
            if total:
                return total, reads
            time.sleep(0.2)
        sys.exit("callgrind wrote no dump")


def through_server(a, redis, addr, point):
    descriptors = redis_cost.descriptors_of(point)
    cmd = [a.bench, "load", "--target", addr, "--connections", "2",
           "--in-flight", str(a.in_flight // 2), "--keys", str(a.keys), "--warmup", "0s",
           "--json", "-"]
    for d in descriptors:
        cmd += ["--descriptor", d]
    # The warm-up takes every key's first take of its window out of the measured run.
    subprocess.run(cmd + ["--duration", "2s"], check=True, capture_output=True)
    redis.zero()
    r = json.loads(subprocess.run(cmd + ["--duration", a.duration], check=True,
                                  capture_output=True, text=True).stdout)
    if r["errors"] or r["over_limit"]:
        sys.exit(f"{point}: the load saw errors or rejections: {r['errors']} {r['over_limit']}")
    instructions, reads = redis.dump()
    decisions = r["requests"] * len(descriptors)
    print(f"  {addr} {point}: {r['requests']} requests", file=sys.stderr)
    return instructions / decisions, reads / decisions


def under_benchmark(a, redis, algorithm, pipeline):
    with open(os.path.join(HERE, "floors", f"{algorithm}.lua")) as f:
        sha = floors.cli(a.port, "SCRIPT", "LOAD", f.read())
    redis.zero()
    subprocess.run(["redis-benchmark", "-p", str(a.port), "-n", str(a.requests), "-c", "1",
                    "-P", str(pipeline), "-r", str(a.keys), "-q", "EVALSHA", sha, "1",
                    f"floor:{algorithm}:__rand_int__", *floors.floor_args(algorithm)],
                   check=True, capture_output=True)
    instructions, reads = redis.dump()
    return instructions / a.requests, reads / a.requests


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--in-flight", type=int, default=16)
    p.add_argument("--duration", default="5s")
    # Few keys: under callgrind a run answers a few thousand requests, and with 10,000 keys
    # most would be a key's first take of its window (a longer path on every side).
    p.add_argument("--keys", type=int, default=500)
    p.add_argument("--requests", type=int, default=40_000, help="per redis-benchmark run")
    p.add_argument("--points", default="fixed_window," + redis_cost.FIVE)
    a = p.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        sys.exit("needs valgrind (apt-get install valgrind)")
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="redis-instructions-")
    a.port = tools.free_port()
    redis = Counted(a.port, work)
    # Under callgrind a round trip takes milliseconds: a generous command timeout.
    sluice, addr = redis_cost.start_sluice(a.sluice, a.port, work, [], command_timeout="2s")
    points = a.points.split(",")
    servers = {}
    results = {}

    def record(subject, point, run, value):
        per_decision, reads = value
        results.setdefault((subject, point), []).append(value)
        path = os.path.join(a.out, f"redis-instructions~{subject}~{point.replace(' ', '')}"
                                   f"~r{run}.json")
        with open(path, "w") as f:
            json.dump({"instructions_per_decision": per_decision,
                       "reads_per_decision": reads}, f)
        print(f"r{run} {subject:16} {point:16} {per_decision:9.0f} instructions, "
              f"{reads:.3f} reads per decision", file=sys.stderr)

    try:
        for point in points:
            algorithm = "fixed_window" if point == redis_cost.FIVE else point
            if algorithm not in servers:
                servers[algorithm] = redis_cost.start_seed_server(a.bench, a.port, algorithm)
        for run in range(1, a.rounds + 1):
            for point in points:
                algorithm = "fixed_window" if point == redis_cost.FIVE else point
                server, server_addr = servers[algorithm]
                sides = [("sluice", addr), ("served", server_addr)]
                for subject, target in sides if run % 2 else sides[::-1]:
                    floors.cli(a.port, "FLUSHALL")
                    record(subject, point, run, through_server(a, redis, target, point))
            for algorithm in sorted({"fixed_window" if p == redis_cost.FIVE else p
                                     for p in points}):
                for pipeline in (a.in_flight // 2, a.in_flight):
                    floors.cli(a.port, "FLUSHALL")
                    record(f"floor-P{pipeline}", algorithm, run,
                           under_benchmark(a, redis, algorithm, pipeline))
    finally:
        for server, _ in servers.values():
            server.terminate()
        sluice.terminate()
        redis.proc.terminate()
        sluice.wait()
        redis.proc.wait()
        shutil.rmtree(work, ignore_errors=True)

    def med(subject, point, i=0):
        v = results.get((subject, point))
        return statistics.median(x[i] for x in v) if v else None

    print(f"\nRedis user-space instructions per decision (callgrind; median of {a.rounds} "
          f"rounds; servers at {a.in_flight} in flight over 2 connections)\n")
    print("| point | sluice | floor served the same way | × served | floor at -P "
          f"{a.in_flight // 2} | × | floor at -P {a.in_flight} | × |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for point in points:
        algorithm = "fixed_window" if point == redis_cost.FIVE else point
        s = med("sluice", point)
        row = [point, f"{s:.0f} ({med('sluice', point, 1):.3f} reads)"]
        for subject, at in (("served", point), (f"floor-P{a.in_flight // 2}", algorithm),
                            (f"floor-P{a.in_flight}", algorithm)):
            f = med(subject, at)
            row += [f"{f:.0f} ({med(subject, at, 1):.3f} reads)", f"**{s / f:.2f}**"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
