#!/usr/bin/env python3
"""sluice on Redis against its peers on the same Redis, in one run (issue 13, item 4):
Kuadrant/limitador's server, the seeds' fixed-window script served over gRPC
(`sluice-bench noop --seed-redis`) and envoyproxy/ratelimit's INCRBY + EXPIRE.

    python3 bench/peers.py --sluice target/release/sluice --bench target/release/sluice-bench \
        --limitador PATH/limitador-server --out DIR [--rounds 3] [--in-flight 32] \
        [--duration 5s] [--keys 10000]

--limitador defaults to $LIMITADOR_BIN. It is a binary you built from Kuadrant/limitador's public
source, by its own instructions (about 25 minutes of both cores here). This suite does not
build it: nothing of limitador's, nor any recipe that builds it, is part of this repository.

The same rule on every server: one descriptor `cost_fixed_window=<key>`, a fixed 60 s window
and a limit nothing reaches (bench/config's `cost_fixed_window`; for limitador, a limit of
namespace `bench` with `descriptors[0]['cost_fixed_window']` as its variable), over --keys keys.
Each server in turn gets `sluice-bench load` at --in-flight requests outstanding over 2
connections, A/B in alternating order each round, on one Redis flushed before each run. The
figures: requests per second, the Redis process's CPU per request (INFO cpu: its utime +
stime, over the measured interval), and how many decisions per second that CPU lets one Redis
core make (10^6 / µs per request). INCRBY + EXPIRE runs under redis-benchmark (-c 1, -P the
same depth), as bench/floors.py measures it.

With --memory (on by default; --no-memory skips it) the same three-way A/B runs in memory too
(issue 35): sluice on its memory store, limitador on its `memory` storage and the gRPC no-op
floor (`sluice-bench noop --runtime current`), the same rule at --memory-in-flight (16, the
headline concurrency of bench/run.sh) over 2 connections; the figures are requests per second
and the server's CPU per request. Writes DIR/peers-memory~SUBJECT~cN~rN.json.

Writes DIR/peers~SUBJECT~cIN_FLIGHT~rN.json (bench/report.py's section) and prints a Markdown table of medians. Standard library only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import floors  # noqa: E402
import redis_cost  # noqa: E402  (start_redis, start_sluice, start_seed_server)
import tools  # noqa: E402

LIMITS = """\
- namespace: bench
  max_value: 1000000000
  seconds: 60
  conditions: []
  variables:
    - descriptors[0]['cost_fixed_window']
"""

SUBJECTS = ["sluice", "limitador", "seed-server"]
MEMORY_SUBJECTS = ["sluice", "limitador", "noop"]


def start_limitador(binary, redis_port, work, storage=None):
    """limitador-server on Redis (its `redis` storage; `storage` other arguments, as
    `["memory"]`), RLS and HTTP on free loopback ports; returns (process, RLS address) once its
    RLS port accepts connections."""
    limits = os.path.join(work, "limits.yaml")
    with open(limits, "w") as f:
        f.write(LIMITS)
    rls, http = tools.free_port(), tools.free_port()
    log = open(os.path.join(work, "limitador.log"), "w")
    p = subprocess.Popen([binary, "--rls-ip", "127.0.0.1", "--rls-port", str(rls),
                          "--http-ip", "127.0.0.1", "--http-port", str(http), limits,
                          *(storage or ["redis", f"redis://127.0.0.1:{redis_port}"])],
                         stdout=log, stderr=log)
    print(f"limitador-server log: {log.name}", file=sys.stderr)
    tools.wait_http(f"http://127.0.0.1:{http}/status", p.pid, 60)
    return p, f"127.0.0.1:{rls}"


def load(a, addr, pid):
    cmd = [a.bench, "load", "--target", addr, "--connections", "2",
           "--in-flight", str(a.in_flight // 2), "--duration", a.duration, "--warmup", "1s",
           "--keys", str(a.keys), "--redis", f"127.0.0.1:{a.port}", "--server-pid", str(pid),
           "--descriptor", "cost_fixed_window=u{i}", "--json", "-"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    if r["errors"] or r["over_limit"]:
        sys.exit(f"{addr}: the load saw errors or rejections: {r['errors']} {r['over_limit']}")
    return {"throughput_rps": r["throughput_rps"],
            "redis_cpu_us_per_request": r["redis"]["cpu_us_per_request"],
            "redis_commands": r["redis"]["commands"],
            "server_cpu_us_per_request": r["server_cpu_us_per_request"],
            "latency_us": r["latency_us"]}


def start_memory_servers(a, work):
    """sluice on its memory store, limitador on its `memory` storage, the no-op floor."""
    grpc, http = tools.free_port(), tools.free_port()
    log = open(os.path.join(work, "sluice-memory.log"), "w")
    sluice = subprocess.Popen([a.sluice, "serve", "--grpc-addr", f"127.0.0.1:{grpc}",
                               "--http-addr", f"127.0.0.1:{http}", "--log-level", "warn",
                               "--watch-config", "false", "--config",
                               os.path.join(HERE, "config")], stdout=log, stderr=log)
    tools.wait_http(f"http://127.0.0.1:{http}/healthcheck", sluice.pid, 60)
    out = os.path.join(work, "noop.out")
    with open(out, "w") as f:
        noop = subprocess.Popen([a.bench, "noop", "--runtime", "current", "--addr",
                                 "127.0.0.1:0"], stdout=f, stderr=subprocess.DEVNULL)
    noop_addr = tools.wait_line(out, "listening on ", noop.pid, 30)
    mem_work = os.path.join(work, "limitador-memory")
    os.makedirs(mem_work, exist_ok=True)
    return {"sluice": (sluice, f"127.0.0.1:{grpc}"),
            "limitador": start_limitador(a.limitador, None, mem_work, ["memory"]),
            "noop": (noop, noop_addr)}


def load_memory(a, addr, pid):
    cmd = [a.bench, "load", "--target", addr, "--connections", "2",
           "--in-flight", str(a.memory_in_flight // 2), "--duration", a.duration,
           "--warmup", "1s", "--keys", str(a.keys), "--server-pid", str(pid),
           "--descriptor", "cost_fixed_window=u{i}", "--json", "-"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    if sum(r["errors"].values()) or r["over_limit"]:
        sys.exit(f"{addr}: the load saw errors or rejections: {r['errors']} {r['over_limit']}")
    return {"throughput_rps": r["throughput_rps"],
            "server_cpu_us_per_request": r["server_cpu_us_per_request"],
            "latency_us": r["latency_us"]}


def memory_rounds(a, work):
    """The in-memory A/B: every subject in turn each round, alternating the order."""
    servers = start_memory_servers(a, work)
    results = {}
    try:
        for run in range(1, a.rounds + 1):
            order = MEMORY_SUBJECTS if run % 2 else list(reversed(MEMORY_SUBJECTS))
            for subject in order:
                proc, addr = servers[subject]
                r = load_memory(a, addr, proc.pid)
                results.setdefault(subject, []).append(r)
                name = f"peers-memory~{subject}~c{a.memory_in_flight}~r{run}.json"
                with open(os.path.join(a.out, name), "w") as f:
                    json.dump({"subject": subject, "in_flight": a.memory_in_flight, **r}, f)
                print(f"r{run} memory {subject:10} {r['throughput_rps']:9.0f} req/s "
                      f"{r['server_cpu_us_per_request']:6.2f} µs server CPU/request",
                      file=sys.stderr)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    return results


def print_memory_table(results, a):
    def med(subject, field):
        return statistics.median(r[field] for r in results[subject])

    print(f"\nfixed_window in memory, {a.memory_in_flight} in flight over 2 connections, "
          f"{a.keys} keys (median of {a.rounds} rounds)\n")
    print("| who | req/s | server CPU µs/request |")
    print("| --- | --- | --- |")
    for subject in MEMORY_SUBJECTS:
        print(f"| {subject} | {med(subject, 'throughput_rps'):,.0f} | "
              f"{med(subject, 'server_cpu_us_per_request'):.2f} |")
    ratios = [s["throughput_rps"] / l["throughput_rps"]
              for s, l in zip(results["sluice"], results["limitador"])]
    print(f"\nsluice / limitador in memory: throughput {statistics.median(ratios):.2f}× "
          f"({', '.join(f'{r:.2f}' for r in ratios)})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--limitador", default=os.environ.get("LIMITADOR_BIN"))
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--in-flight", type=int, default=32)
    p.add_argument("--duration", default="5s")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--requests", type=int, default=200_000, help="per INCRBY + EXPIRE run")
    p.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                   help="also the in-memory A/B (sluice's memory store, limitador's memory)")
    p.add_argument("--memory-in-flight", type=int, default=16)
    p.add_argument("--redis", action=argparse.BooleanOptionalAction, default=True,
                   help="the A/B on one Redis")
    a = p.parse_args()
    if not a.limitador or not os.access(a.limitador, os.X_OK):
        sys.exit("bench/peers.py: give limitador-server with --limitador or LIMITADOR_BIN "
                 "(built from github.com/Kuadrant/limitador: cargo build --release -p "
                 "limitador-server); this repository does not build it")
    a.pipeline = a.in_flight
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="peers-")
    if a.memory:
        print_memory_table(memory_rounds(a, work), a)
    if not a.redis:
        return
    a.port = tools.free_port()
    redis = redis_cost.start_redis(a.port, work)
    servers = {}
    try:
        servers["sluice"] = redis_cost.start_sluice(a.sluice, a.port, work, [])
        servers["limitador"] = start_limitador(a.limitador, a.port, work)
        servers["seed-server"] = redis_cost.start_seed_server(a.bench, a.port)
        results = {}
        for run in range(1, a.rounds + 1):
            order = SUBJECTS if run % 2 else list(reversed(SUBJECTS))
            for subject in order:
                proc, addr = servers[subject]
                floors.cli(a.port, "FLUSHALL")
                r = load(a, addr, proc.pid)
                results.setdefault(subject, []).append(r)
                with open(os.path.join(a.out, f"peers~{subject}~c{a.in_flight}~r{run}.json"), "w") as f:
                    json.dump({"subject": subject, "in_flight": a.in_flight, **r}, f)
                print(f"r{run} {subject:12} {r['throughput_rps']:9.0f} req/s "
                      f"{r['redis_cpu_us_per_request']:6.2f} µs Redis CPU/request",
                      file=sys.stderr)
            floors.cli(a.port, "FLUSHALL")
            us = floors.incr_expire(a)
            results.setdefault("incrby-expire", []).append({"redis_cpu_us_per_request": us})
            with open(os.path.join(a.out, f"peers~incrby-expire~c{a.in_flight}~r{run}.json"), "w") as f:
                json.dump({"subject": "incrby-expire", "redis_cpu_us_per_request": us}, f)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
        redis.terminate()
        redis.wait()
    print_table(results, a)


def print_table(results, a):
    def med(subject, field):
        return statistics.median(r[field] for r in results[subject])

    print(f"\nfixed_window on one Redis, {a.in_flight} in flight over 2 connections, {a.keys} keys "
          f"(median of {a.rounds} rounds)\n")
    print("| who | req/s | Redis CPU µs/request | decisions/s one Redis core sustains |")
    print("| --- | --- | --- | --- |")
    for subject in SUBJECTS + ["incrby-expire"]:
        cpu = med(subject, "redis_cpu_us_per_request")
        rps = f"{med(subject, 'throughput_rps'):,.0f}" if subject in SUBJECTS else ""
        print(f"| {subject} | {rps} | {cpu:.2f} | {1e6 / cpu:,.0f} |")
    ratios = [s["throughput_rps"] / l["throughput_rps"]
              for s, l in zip(results["sluice"], results["limitador"])]
    cpu = [s["redis_cpu_us_per_request"] / l["redis_cpu_us_per_request"]
           for s, l in zip(results["sluice"], results["limitador"])]
    print(f"\nsluice / limitador: throughput {statistics.median(ratios):.2f}× "
          f"({', '.join(f'{r:.2f}' for r in ratios)}), Redis CPU per request "
          f"{statistics.median(cpu):.2f}× ({', '.join(f'{r:.2f}' for r in cpu)})")


if __name__ == "__main__":
    main()
