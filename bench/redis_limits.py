#!/usr/bin/env python3
"""Redis time per decision for descriptors of several limits (issue 32, item 6): a lone
fixed_window, two fixed_window limits on one descriptor, and a sliding_log of 10,000 per hour
holding thousands of logged hits beside a day's fixed_window, against the same request with a
fixed_window in the sliding_log's place.

    python3 bench/redis_limits.py --sluice target/release/sluice \
        --bench target/release/sluice-bench [--logged 9000] [--duration 1s] [--rounds 3]

One client, one request in flight, one key per row, sluice on `--clock local` so that every
decision is one `FCALL` (no plain takes, no `TIME`): Redis' own `usec_per_call` of `FCALL`
(time inside the call, `INFO commandstats`, counters reset before each run) is the Redis time
of one decision. The sliding_log's key is filled with `--logged` entries spread over the last
50 minutes before each run (its layout: sliding_log.lua's header). A run lasts --duration
(500 ms), short enough that its requests (about 600 under callgrind on a quiet machine) stay
below the limit of 10,000, the most a sliding_log keeps: at 1 s a quiet run reached it, and
its rejected decisions (the general path, about 0.54 M instructions whatever the log's length,
measured at 1,000 and 10,000 entries) were averaged into the admitted ones. Prints a Markdown table of medians. Standard library
only.
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
import redis_cost  # noqa: E402  (redis-server and sluice start-up, one copy)
import redis_instructions  # noqa: E402  (redis-server under callgrind)
import tools  # noqa: E402

CONFIG = """\
domain: limits
descriptors:
  - key: lone
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: fw_fw
    rate_limits:
      - {name: hour, unit: hour, requests_per_unit: 10000}
      - {name: day, unit: day, requests_per_unit: 1000000000}
  - key: log_fw
    rate_limits:
      - {name: hour, unit: hour, requests_per_unit: 10000, algorithm: sliding_log}
      - {name: day, unit: day, requests_per_unit: 1000000000}
  - key: fw3
    rate_limits:
      - {name: hour, unit: hour, requests_per_unit: 10000}
      - {name: day, unit: day, requests_per_unit: 1000000000}
      - {name: minute, unit: minute, requests_per_unit: 1000000}
  - key: fw5
    rate_limits:
      - {name: hour, unit: hour, requests_per_unit: 10000}
      - {name: day, unit: day, requests_per_unit: 1000000000}
      - {name: minute, unit: minute, requests_per_unit: 1000000}
      - {name: second, unit: second, requests_per_unit: 100000}
      - {name: day2, unit: day, requests_per_unit: 999999999}
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 10000, algorithm: sliding_log}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
  - key: window
    rate_limit: {window: 10s, requests_per_unit: 1000000000, algorithm: sliding_window, precision: 10}
  - key: d1
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: d2
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: d3
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: d4
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: d5
    rate_limit: {unit: day, requests_per_unit: 1000000000}
"""

ROWS = [
    ("seed", "the seed script (EVALSHA; `sluice-bench noop --seed-redis`)"),
    ("lone", "fixed_window alone"),
    ("fw_fw", "fixed_window (10,000/hour) + fixed_window (day)"),
    ("log_fw", "sliding_log (10,000/hour, {logged} logged) + fixed_window (day)"),
    ("fw3", "three fixed_window limits on one descriptor"),
    ("fw5", "five fixed_window limits on one descriptor"),
    ("log", "sliding_log alone (10,000/hour, {logged} logged)"),
    ("bucket", "token_bucket alone"),
    ("window", "sliding_window alone (precision 10)"),
    ("desc5", "five descriptors of one fixed_window each"),
]

# Result files: DIR/redis-limits~sluice~ROW~rN.json (bench/report_redis_cost.py's
# `limits_target_rows`).
KIND = "redis-limits"

# The descriptors of a row's request (one, unless listed here).
DESCRIPTORS = {"desc5": [f"d{i}=u1" for i in range(1, 6)]}

# Fills a sliding_log key with ARGV[2] entries before ARGV[1] (us), 300 ms apart, in the
# layout of sliding_log.lua (member: time and a 10-digit sequence number).
FILL = """
redis.call('DEL', KEYS[1])
local now, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 1, n do
  local t = string.format('%.0f', now - i * 300000)
  redis.call('ZADD', KEYS[1], t, t .. ':0000000000')
end
redis.call('PEXPIRE', KEYS[1], 3600000)
return n
"""


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], check=True,
                          capture_output=True, text=True).stdout


def fcall_usec(port):
    """(calls, usec) of FCALL and EVALSHA since the last CONFIG RESETSTAT."""
    calls = usec = 0
    for line in cli(port, "INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_fcall:", "cmdstat_evalsha:")):
            fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
            calls += int(fields["calls"])
            usec += int(fields["usec"])
    return calls, usec


def one_run(a, addr, row):
    if row == "seed":
        addr = a.seed_addr
    cli(a.port, "FLUSHALL")
    descriptor = DESCRIPTORS.get(row, [f"{row}=u1"])
    # One request makes the keys; then the sliding_log's is filled.
    load(a, addr, descriptor, "200ms")
    if row in ("log_fw", "log"):
        zsets = [k for k in cli(a.port, "KEYS", "*").split()
                 if cli(a.port, "TYPE", k).strip() == "zset"]
        if len(zsets) != 1:
            sys.exit(f"expected one sliding_log key, found {zsets}")
        now_us = time.time_ns() // 1000
        cli(a.port, "EVAL", FILL, "1", zsets[0], str(now_us), str(a.logged))
    if a.verbose:
        print(row, cli(a.port, "KEYS", "*").split(), file=sys.stderr)
    cli(a.port, "CONFIG", "RESETSTAT")
    if a.counted:
        a.counted.zero()
    r = load(a, addr, descriptor, a.duration)
    instructions = a.counted.dump()[0] if a.counted else None
    calls, usec = fcall_usec(a.port)
    if a.verbose:
        print(cli(a.port, "INFO", "commandstats"), file=sys.stderr)
    if r["errors"]:
        sys.exit(f"{row}: the load saw errors: {r['errors']}")
    return {"fcall_usec_per_call": usec / max(calls, 1), "calls": calls,
            "instructions_per_call": instructions and instructions / max(calls, 1),
            "answered": r.get("answered"), "over_limit": r["over_limit"]}


def load(a, addr, descriptor, duration):
    cmd = [a.bench, "load", "--target", addr, "--connections", "1", "--in-flight", "1",
           "--duration", duration, "--warmup", "0s", "--domain", "limits", "--json", "-"]
    for d in descriptor:
        cmd += ["--descriptor", d]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--logged", type=int, default=9000)
    p.add_argument("--duration", default="500ms")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--clock", default="local",
                   help="sluice's --clock: with `redis`, a lone fixed_window goes as plain "
                        "HINCRBYs and FCALL counts only a key's first take of a window")
    p.add_argument("--rows", help="only these rows (comma-separated: lone,fw_fw,log_fw,log,bucket,window)")
    p.add_argument("--callgrind", action="store_true",
                   help="Redis under callgrind: its instructions per decision (the same for the "
                        "same work however busy the machine), beside the time")
    p.add_argument("--out", help="a directory for the JSON of each run")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="redis-limits-")
    config = os.path.join(work, "config")
    os.makedirs(config)
    with open(os.path.join(config, "limits.yaml"), "w") as f:
        f.write(CONFIG)
    a.port = tools.free_port()
    a.counted = None
    if a.callgrind:
        a.counted = redis_instructions.Counted(a.port, work)
        redis = a.counted.proc
    else:
        redis = redis_cost.start_redis(a.port, work)
    sluice = seed = None
    try:
        sluice, addr = redis_cost.start_sluice(a.sluice, a.port, work, ["--clock", a.clock],
                                               config=config)
        seed, a.seed_addr = redis_cost.start_seed_server(a.bench, a.port)
        results, counts = {}, {}
        for run in range(1, a.rounds + 1):
            for row, _ in ROWS:
                if a.rows and row not in a.rows.split(","):
                    continue
                r = one_run(a, addr, row)
                results.setdefault(row, []).append(r["fcall_usec_per_call"])
                counts.setdefault(row, []).append(r["instructions_per_call"] or 0)
                print(f"r{run} {row:8} {r['fcall_usec_per_call']:9.2f} µs per FCALL "
                      f"({r['calls']} calls, {r['over_limit']} over limit, "
                      f"{r['instructions_per_call'] or 0:.0f} instructions per call)",
                      file=sys.stderr)
                if a.out:
                    os.makedirs(a.out, exist_ok=True)
                    with open(os.path.join(a.out, f"{KIND}~sluice~{row}~r{run}.json"), "w") as f:
                        json.dump(r, f)
        if a.rows:
            return
        med = {row: statistics.median(v) for row, v in results.items()}
        ins = {row: statistics.median(v) for row, v in counts.items()}
        print("| descriptor | Redis µs per decision (FCALL usec_per_call, median) "
              "| × fixed_window alone | Redis instructions per decision (callgrind) |")
        print("| --- | --- | --- | --- |")
        for row, label in ROWS:
            i = f"{ins[row]:,.0f}" if a.callgrind else "-"
            print(f"| {label.format(logged=f'{a.logged:,}')} | {med[row]:.2f} "
                  f"| {med[row] / med['lone']:.2f} | {i} |")
        if a.callgrind:
            step = (ins["fw5"] - ins["lone"]) / 4
            print(f"\nEach further fixed_window limit of a descriptor (1 → 5 limits) adds "
                  f"{step:,.0f} instructions against {ins['seed']:,.0f} for a seed script call "
                  f"(**{step / ins['seed']:.2f}×**, target ≤ 1×).")
        print(f"\nThe second limit adds {med['fw_fw'] - med['lone']:.2f} µs against "
              f"{med['seed']:.2f} µs for a seed script call; "
              f"sliding_log + fixed_window against fixed_window + fixed_window: "
              f"**{med['log_fw'] / med['fw_fw']:.2f}×** in time (target ≤ 2×)", end="")
        if a.callgrind:
            print(f", **{ins['log_fw'] / ins['fw_fw']:.2f}×** in instructions", end="")
        print()
    finally:
        if seed is not None:
            seed.terminate()
            seed.wait()
        if sluice is not None:
            sluice.terminate()
            sluice.wait()
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    main()
