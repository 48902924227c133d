#!/usr/bin/env python3
"""Redis CPU per decision: sluice's scripts against the floors of bench/floors/ and against
envoyproxy/ratelimit's INCRBY + EXPIRE, all on one Redis, A/B in alternating order.

    python3 bench/floors.py --bench target/release/sluice-bench --port PORT --out DIR --run N
        [--requests 200000] [--keys 10000] [--pipeline 16]

One call is one round; it writes DIR/redis-cost~SUBJECT~POINT~rN.json (SUBJECT sluice, floor
or incrby-expire; POINT the algorithm) for bench/report.py. Each figure is the Redis process's
CPU (INFO cpu: used_cpu_user + used_cpu_sys, the process's utime + stime) over one
redis-benchmark run divided by the decisions Redis counted
(INFO commandstats). sluice's side is `sluice-bench redis-floor`, which runs the script the
Redis store runs with the arguments the store sends. Decisions per second of one Redis core =
1 / CPU per decision. Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys

FLOORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "floors")
WINDOW_US = 60_000_000
LIMIT = 1_000_000_000  # high: every call is admitted and charged, on both sides

# Each floor's ARGV for the limit above (see the header of each script).
FLOOR_ARGS = {
    "fixed_window": [WINDOW_US // 1000, LIMIT],
    "sliding_window": [WINDOW_US, LIMIT],
    "sliding_log": [WINDOW_US, LIMIT],
    "token_bucket": [LIMIT, LIMIT / WINDOW_US],
    "leaky_bucket": [LIMIT, LIMIT / WINDOW_US],
    "gcra": [WINDOW_US / LIMIT, WINDOW_US],
}


def cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *map(str, args)],
                         check=True, capture_output=True, text=True).stdout
    return out.strip()


def sample(port):
    """(CPU seconds of the Redis process, {command: calls}, {command: µs inside it})."""
    cpu = 0.0
    for line in cli(port, "INFO", "cpu").splitlines():
        if line.startswith(("used_cpu_user:", "used_cpu_sys:")):
            cpu += float(line.split(":")[1])
    calls, usec = {}, {}
    for line in cli(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(kv.split("=") for kv in rest.split(","))
            calls[name] = int(fields["calls"])
            usec[name] = int(fields["usec"])
    return cpu, calls, usec


def benchmark(a, *command):
    """Runs redis-benchmark with `command`; returns (CPU s, {command: calls}, {command: µs
    inside it})."""
    before = sample(a.port)
    out = subprocess.run(["redis-benchmark", "-p", str(a.port), "-n", str(a.requests),
                          "-c", "1", "-P", str(a.pipeline), "-r", str(a.keys), "--csv",
                          *map(str, command)], check=True, capture_output=True, text=True)
    if "ERR" in out.stdout or "NOSCRIPT" in out.stdout:
        sys.exit(f"redis-benchmark: {out.stdout}")
    after = sample(a.port)
    calls = {k: v - before[1].get(k, 0) for k, v in after[1].items()}
    usec = {k: v - before[2].get(k, 0) for k, v in after[2].items()}
    return after[0] - before[0], calls, usec


def floor_args(algorithm):
    """The floor script's ARGV as text."""
    return [f"{x:.17g}" if isinstance(x, float) else str(x) for x in FLOOR_ARGS[algorithm]]


def floor(a, algorithm):
    return floor_timed(a, algorithm)[0]


def floor_timed(a, algorithm):
    """(the Redis process's CPU µs, the µs inside the script call (INFO commandstats)), each
    per call of `algorithm`'s floor script."""
    with open(os.path.join(FLOORS, f"{algorithm}.lua")) as f:
        sha = cli(a.port, "SCRIPT", "LOAD", f.read())
    args = floor_args(algorithm)
    cpu, calls, usec = benchmark(a, "EVALSHA", sha, 1, f"floor:{algorithm}:__rand_int__",
                                 *args)
    return cpu * 1e6 / calls["evalsha"], usec["evalsha"] / calls["evalsha"]


def incr_expire(a):
    """envoyproxy/ratelimit's pair per decision: INCRBY then EXPIRE of the same key."""
    cpu1, c1, _ = benchmark(a, "INCRBY", "rl:__rand_int__", 1)
    cpu2, c2, _ = benchmark(a, "EXPIRE", "rl:__rand_int__", 60)
    return (cpu1 / c1["incrby"] + cpu2 / c2["expire"]) * 1e6


def sluice(a, algorithm, keys=None, requests=None, limit=LIMIT):
    out = subprocess.run([a.bench, "redis-floor", "--redis", f"127.0.0.1:{a.port}",
                          "--algorithm", algorithm, "--pipeline", str(a.pipeline),
                          "--requests", str(requests or a.requests),
                          "--keys", str(keys or a.keys), "--limit", str(limit),
                          "--json", "-"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["redis_cpu_us_per_call"]


def hot_sliding_log(a):
    """One sliding_log key full at 10,000 entries: sluice's call on it (rejected), after
    filling it with 10,000 admitted calls."""
    cli(a.port, "FLUSHALL")
    sluice(a, "sliding_log", keys=1, requests=10_000, limit=10_000)
    return sluice(a, "sliding_log", keys=1, requests=500, limit=10_000)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out", required=True, help="the results directory of bench/run.sh")
    p.add_argument("--run", type=int, required=True, help="this round's number")
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--pipeline", type=int, default=16)
    a = p.parse_args()

    def write(subject, point, us):
        path = os.path.join(a.out, f"redis-cost~{subject}~{point}~r{a.run}.json")
        with open(path, "w") as f:
            json.dump({"redis_cpu_us_per_call": us, "requests": a.requests, "keys": a.keys,
                       "pipeline": a.pipeline}, f)
        print(f"{subject} {point}: {us:.2f} µs of Redis CPU per decision", file=sys.stderr)

    # A/B: the order flips every round, so drift in the machine's load hits both sides.
    sides = ["sluice", "floor"] if a.run % 2 else ["floor", "sluice"]
    for algorithm in FLOOR_ARGS:
        for side in sides:
            cli(a.port, "FLUSHALL")
            write(side, algorithm, sluice(a, algorithm) if side == "sluice" else floor(a, algorithm))
    cli(a.port, "FLUSHALL")
    write("incrby-expire", "fixed_window", incr_expire(a))
    # A sorted set: filling the key costs what 10,000 admitted calls cost, so every round.
    write("sluice", "sliding_log-full-10000", hot_sliding_log(a))
    cli(a.port, "FLUSHALL")


if __name__ == "__main__":
    main()
