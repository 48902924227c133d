#!/usr/bin/env python3
"""Redis CPU per decision THROUGH sluice (a real server on the Redis store, driven over gRPC)
against each algorithm's floor script (bench/floors/), envoyproxy/ratelimit's INCRBY + EXPIRE
and a plain INCR, all on one Redis in one run, A/B in alternating order (issue 13, item 1).

    python3 bench/redis_cost.py --sluice target/release/sluice \
        --bench target/release/sluice-bench --out DIR [--rounds 3] [--in-flight 16]
        [--duration 5s] [--keys 10000]

Each figure is the Redis process's CPU (INFO cpu: used_cpu_user + used_cpu_sys, its utime +
stime) over a run divided by the decisions made in it. sluice's side: `sluice-bench load`
against `sluice serve --backend redis` on bench/config, one descriptor per request (one
decision) or five (five decisions), over --keys values, --in-flight requests outstanding over
2 connections (sluice's 2 serving threads). The floors' side: redis-benchmark calling each
floor script by EVALSHA, 1 connection with --in-flight commands pipelined (the floor's best
case: one read per 16 calls), and the same floor script served over gRPC under the same load
as sluice (`sluice-bench noop --seed-redis`, subject seed-server for fixed_window, floor-server
for the others: the same traffic, the same machine). For the lone fixed_window it also records
the Redis time inside the commands each side sent (INFO commandstats usec: the script calls and
sluice's plain takes, see SENT_PLAIN), the measure that leaves out Redis' reads, writes and
wake-ups of each round trip. Writes
DIR/redis-cost-through~SUBJECT~POINT~rN.json and prints a Markdown table of medians. Standard
library only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import floors  # noqa: E402  (the floor scripts and their arguments, one copy)
import tools  # noqa: E402

# The commands each server sends outside a script. INFO commandstats cannot tell a command a
# script ran from one sent plain, so the Redis time in the commands a server sends is its script
# calls' time plus these commands' time: sluice's plain takes (src/store/redis/plain.rs) are an
# HINCRBY each after one TIME per write; the HINCRBYs its scripts run are then counted twice (in
# their FCALL and under their own name), against sluice. The floor servers send only EVALSHA.
# Reported for the lone fixed_window only, where sluice's scripts run a few in a thousand
# decisions (a key's first take of a window); where every decision is scripted (five
# descriptors, the other algorithms) the double count would be most of the figure.
COMMAND_TIME_POINTS = ("fixed_window",)
SENT_PLAIN = {"sluice": ("hincrby", "time")}
SCRIPTS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")

ALGORITHMS = ["fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket",
              "gcra"]
FIVE = "fixed_window x5"


def start_redis(port, work):
    d = os.path.join(work, f"redis-{port}")
    os.makedirs(d, exist_ok=True)
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True,
                          text=True).stdout.strip() == "PONG":
            return p
        time.sleep(0.05)
    sys.exit("redis-server did not start")


def start_sluice(binary, redis_port, work, extra, command_timeout="250ms", config=None):
    grpc, http = tools.free_port(), tools.free_port()
    log = open(os.path.join(work, "sluice.log"), "w")
    p = subprocess.Popen([binary, "serve", "--grpc-addr", f"127.0.0.1:{grpc}",
                          "--http-addr", f"127.0.0.1:{http}", "--log-level", "warn",
                          "--watch-config", "false", "--config", config or os.path.join(HERE, "config"),
                          "--backend", "redis", "--redis-command-timeout", command_timeout,
                          "--redis-url", f"redis://127.0.0.1:{redis_port}", *extra],
                         stdout=log, stderr=log)
    # Health says SERVING only once the store answers (issue 13, item 6).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthcheck", timeout=1) as r:
                if r.status == 200:
                    return p, f"127.0.0.1:{grpc}"
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.1)
    sys.exit("sluice did not become healthy; see " + log.name)


def start_seed_server(bench, redis_port, algorithm="fixed_window"):
    """`sluice-bench noop --seed-redis`: a floor script per descriptor (the seeds' fixed-window
    script, or `algorithm`'s floor of bench/floors/ with its arguments), served over gRPC on
    sluice's own pipelined connection, with sluice's runtime layout (2 threads, each its own
    listener and connection)."""
    floor = []
    if algorithm != "fixed_window":
        floor = ["--floor-script", os.path.join(HERE, "floors", f"{algorithm}.lua")]
        floor += [f"--floor-arg={x}" for x in floors.floor_args(algorithm)]
    p = subprocess.Popen([bench, "noop", "--runtime", "per-core", "--threads", "2",
                          "--addr", "127.0.0.1:0", "--seed-redis", f"127.0.0.1:{redis_port}",
                          *floor],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        sys.exit(f"the seed server did not start: {line!r}")
    return p, line.split()[-1]


def served(point):
    """The subject of `point`'s floor served over gRPC: the seed script's server for
    fixed_window, the floor script's for the others."""
    return "seed-server" if point in ("fixed_window", FIVE) else "floor-server"


def descriptors_of(point):
    """The descriptors of every request of `point` (bench/config's `cost_*` rules)."""
    if point == FIVE:
        return [f"cost_fixed_window={c}{{i}}" for c in "abcde"]
    return [f"cost_{point}=u{{i}}"]


def command_us(subject, usec):
    """The µs Redis spent inside the commands `subject` sent (see SENT_PLAIN)."""
    sent = SCRIPTS + SENT_PLAIN.get(subject, ())
    return sum(us for name, us in usec.items() if name in sent)


def through_server(a, addr, pid, point, subject):
    descriptors = descriptors_of(point)
    cmd = [a.bench, "load", "--target", addr, "--connections", "2",
           "--in-flight", str(a.in_flight // 2), "--duration", a.duration, "--warmup", "1s",
           "--keys", str(a.keys), "--redis", f"127.0.0.1:{a.port}", "--server-pid", str(pid),
           "--json", "-"]
    for d in descriptors:
        cmd += ["--descriptor", d]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    if r["errors"] or r["over_limit"]:
        sys.exit(f"{point}: the load saw errors or rejections: {r['errors']} {r['over_limit']}")
    per_request = r["redis"]["cpu_us_per_request"]
    decisions = (r["ok"] + r["over_limit"] + r["unknown"]) * len(descriptors)
    return {"redis_cpu_us_per_decision": per_request / len(descriptors),
            "redis_command_us_per_decision": command_us(subject, r["redis"]["usec"]) / decisions,
            "redis_cpu_us_per_request": per_request,
            "scripts_per_request": r["redis"]["scripts_per_request"],
            "commands": r["redis"]["commands"], "throughput_rps": r["throughput_rps"],
            "sluice_cpu_us_per_request": r["server_cpu_us_per_request"],
            "latency_us": r["latency_us"],
            "decisions_per_request": len(descriptors)}


def plain(a, *command):
    cpu, calls, _ = floors.benchmark(a, *command)
    return cpu * 1e6 / calls[command[0].lower()]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--in-flight", type=int, default=16)
    p.add_argument("--duration", default="5s")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--requests", type=int, default=200_000, help="per floor run")
    p.add_argument("--points", default=",".join(ALGORITHMS + [FIVE]),
                   help="which rows, comma-separated")
    p.add_argument("--sluice-flag", action="append", default=[],
                   help="a flag for sluice serve (repeatable), e.g. --sluice-flag=--grpc-threads=1")
    p.add_argument("--floor-pipeline", type=int,
                   help="redis-benchmark's -P for the floors (default: --in-flight). A server "
                        "at N in flight sends about N/2 decisions per round trip, so "
                        "--in-flight 32 --floor-pipeline 16 compares at equal reads")
    a = p.parse_args()
    a.pipeline = a.floor_pipeline or a.in_flight
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="redis-cost-")
    a.port = tools.free_port()
    redis = start_redis(a.port, work)
    sluice, addr = start_sluice(a.sluice, a.port, work, a.sluice_flag)
    points = a.points.split(",")
    # Each point's floor served over gRPC the same way as sluice: the seed script for
    # fixed_window, each other algorithm's floor script for it.
    servers = {}
    for point in points:
        algorithm = "fixed_window" if point == FIVE else point
        if algorithm not in servers:
            servers[algorithm] = start_seed_server(a.bench, a.port, algorithm)
    results, inside = {}, {}

    def record(subject, point, run, value, extra=None):
        results.setdefault((subject, point), []).append(value)
        if extra and "redis_command_us_per_decision" in extra:
            inside.setdefault((subject, point), []).append(extra["redis_command_us_per_decision"])
        path = os.path.join(a.out, f"redis-cost-through~{subject}~{point.replace(' ', '')}~r{run}.json")
        with open(path, "w") as f:
            json.dump({"redis_cpu_us_per_decision": value, **(extra or {})}, f)
        print(f"r{run} {subject:14} {point:16} {value:7.2f} µs of Redis CPU per decision",
              file=sys.stderr)

    try:
        for run in range(1, a.rounds + 1):
            sides = ["sluice", "floor"] if run % 2 else ["floor", "sluice"]
            for point in points:
                for side in sides:
                    floors.cli(a.port, "FLUSHALL")
                    if side == "sluice":
                        r = through_server(a, addr, sluice.pid, point, "sluice")
                        record("sluice", point, run, r["redis_cpu_us_per_decision"], r)
                        floors.cli(a.port, "FLUSHALL")
                        algorithm = "fixed_window" if point == FIVE else point
                        server, server_addr = servers[algorithm]
                        r = through_server(a, server_addr, server.pid, point, served(point))
                        record(served(point), point, run, r["redis_cpu_us_per_decision"], r)
                    else:
                        algorithm = "fixed_window" if point == FIVE else point
                        cpu, in_call = floors.floor_timed(a, algorithm)
                        record("floor", point, run, cpu,
                               {"redis_command_us_per_decision": in_call})
            floors.cli(a.port, "FLUSHALL")
            record("incrby-expire", "fixed_window", run, floors.incr_expire(a))
            floors.cli(a.port, "FLUSHALL")
            record("incr", "fixed_window", run, plain(a, "INCR", "k:__rand_int__"))
    finally:
        for server, _ in servers.values():
            server.terminate()
        sluice.terminate()
        redis.terminate()
        sluice.wait()
        redis.wait()

    def med(subject, point):
        v = results.get((subject, point))
        return statistics.median(v) if v else None

    print(f"\nRedis CPU per decision, µs (median of {a.rounds} rounds; sluice through the "
          f"server at {a.in_flight} in flight over 2 connections, floors under redis-benchmark "
          f"-c 1 -P {a.pipeline}; {a.keys} keys)\n")
    print("| algorithm | sluice | floor | × floor (rounds) |")
    print("| --- | --- | --- | --- |")
    for point in points:
        s, f = results[("sluice", point)], results[("floor", point)]
        ratios = [x / y for x, y in zip(s, f)]
        print(f"| {point} | {statistics.median(s):.2f} | {statistics.median(f):.2f} | "
              f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)}) |")
    for point in points:
        s, f = results[("sluice", point)], results[(served(point), point)]
        ratios = [x / y for x, y in zip(s, f)]
        print(f"| {point}, against its floor served over gRPC the same way | "
              f"{statistics.median(s):.2f} | {statistics.median(f):.2f} | "
              f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)}) |")
    for point in (p for p in points if p in COMMAND_TIME_POINTS):
        for other, how in (("floor", f"its floor under redis-benchmark -P {a.pipeline}"),
                           (served(point), "its floor served over gRPC the same way")):
            s, f = inside.get(("sluice", point)), inside.get((other, point))
            if s and f:
                ratios = [x / y for x, y in zip(s, f)]
                print(f"| {point}, µs inside the commands sent (INFO commandstats), against "
                      f"{how} | {statistics.median(s):.2f} | {statistics.median(f):.2f} | "
                      f"**{statistics.median(ratios):.2f}** "
                      f"({', '.join(f'{r:.2f}' for r in ratios)}) |")
    print(f"| envoyproxy/ratelimit INCRBY + EXPIRE | {med('incrby-expire', 'fixed_window'):.2f} | | |")
    print(f"| a plain INCR | {med('incr', 'fixed_window'):.2f} | | |")
    print("\nDecisions per second one Redis core sustains = 10^6 / µs per decision.")


if __name__ == "__main__":
    main()
