#!/usr/bin/env python3
"""Instructions per request of sluice's in-memory path, by stage, against the gRPC no-op
floor (issue 35, item 1), counted by callgrind.

    python3 bench/profile_memory.py --sluice target/release/sluice \
        --bench target/release/sluice-bench --out DIR [--duration 4s] [--keys 10000]
        [--points floor,one,five]

Why instructions and not CPU time: this 2-core VM is shared, and its CPU time per request moves
by +-15% between runs, more than the stages differ. callgrind counts the instructions a
process runs in user space, the same for the same work whatever else the machine does. What it
does not count is the kernel (the socket reads and writes, the wake-ups), which is the same
for sluice and the floor at the same requests per read, so the ratio of user-space
instructions is an upper bound of the ratio of CPU time.

Each subject runs under `valgrind --tool=callgrind` (about 50 times slower, so the load is
small): the no-op RLS server (`sluice-bench noop --runtime current`, one descriptor), sluice
on the memory store with one descriptor over --keys keys (`k=u{i}`, a limit nothing reaches)
and with five descriptors of two limits each (bench/config's `two`). A warm-up load creates
the keys; the counters are zeroed; `sluice-bench load` (16 in flight over 2 connections)
runs for --duration; the counters are dumped and divided by the answered requests. The
stages are the inclusive instructions of the functions that run them (STAGES below; sluice
marks them `#[inline(never)]` so that they stay visible in a release build); "transport" is
the rest: tonic, hyper, h2, tokio and the system calls' user side.

Writes DIR/profile~SUBJECT~instructions~r1.json (bench/report.py's section) and prints a Markdown table.
Standard library only (plus valgrind).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tools  # noqa: E402

# Stage -> patterns of the functions whose inclusive instructions it is. No function of one
# stage calls a function of another, so the stages add up.
STAGES = [
    ("decode", [r"(Prost|Flat)Decoder<.*> as tonic::codec::Decoder>::decode\b",
                r"sluice::service::limits::RequestLimits::check\b",
                r"sluice::service::convert::request\b"]),
    ("match", [r"sluice::limiter::resolve::resolve\b"]),
    ("keys", [r"sluice::limiter::plan::Plan::add_checks\b", r"sluice::limiter::plan::Plan::checks\b"]),
    ("store", [r"sluice::store::memory::MemoryStore::decide_now\b"]),
    ("assemble", [r"sluice::limiter::assemble::assemble\b"]),
    ("metrics", [r"sluice::metrics::Metrics::rpc\b", r"sluice::limiter::observe::record\b",
                 r"sluice::limiter::Limiter<.*>::record_store_time\b"]),
    ("encode", [r"sluice::service::convert::response\b",
                r"ProstEncoder<.*> as tonic::codec::Encoder>::encode\b"]),
]
SUBJECTS = {
    "floor": ("noop", ["--descriptor", "k=x"]),
    "floor5": ("noop", [a for c in "abcde" for a in ("--descriptor", f"two={c}{{i}}")]),
    "one": ("sluice", ["--descriptor", "k=u{i}"]),
    "five": ("sluice", [a for c in "abcde" for a in ("--descriptor", f"two={c}{{i}}")]),
}
LABELS = {"floor": "gRPC no-op floor", "floor5": "gRPC no-op floor, 5 descriptors",
          "one": "sluice, 1 descriptor",
          "five": "sluice, 5 descriptors x 2 limits"}


class Counted:
    """A server under callgrind: zero, then dump and read its instructions since."""

    def __init__(self, cmd, work, name, stdout=None):
        self.dumps = os.path.join(work, f"callgrind-{name}")
        os.makedirs(self.dumps)
        log = os.path.join(work, f"{name}.log")
        with open(stdout or log, "w") as out, open(log, "a") as err:
            self.proc = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--dump-instr=no",
                 "--callgrind-out-file=" + os.path.join(self.dumps, "out.%p")] + cmd,
                stdout=out, stderr=err)

    def control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.proc.pid)], check=True,
                       capture_output=True)

    def dump(self):
        """The dump file of everything since the last zero."""
        for f in glob.glob(os.path.join(self.dumps, "out.*")):
            os.remove(f)
        self.control("-d")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for f in glob.glob(os.path.join(self.dumps, "out.*")):
                with open(f) as fh:
                    if any(line.startswith(("totals:", "summary:")) for line in fh):
                        return f
            time.sleep(0.2)
        sys.exit("callgrind wrote no dump")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start(a, subject, work):
    """(Counted, gRPC address) once the server answers."""
    if SUBJECTS[subject][0] == "noop":
        # The noop prints its address on stdout.
        out = os.path.join(work, "noop.out")
        c = Counted([a.bench, "noop", "--runtime", "current", "--addr", "127.0.0.1:0"], work,
                    subject, stdout=out)
        return c, tools.wait_line(out, "listening on ", c.proc.pid, 120)
    grpc, http = tools.free_port(), tools.free_port()
    c = Counted([a.sluice, "serve", "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr",
                 f"127.0.0.1:{http}", "--log-level", "warn", "--watch-config", "false",
                 "--config", os.path.join(HERE, "config"), "--memory-max-entries", "2000000"],
                work, subject)
    tools.wait_http(f"http://127.0.0.1:{http}/healthcheck", c.proc.pid, 180)
    return c, f"127.0.0.1:{grpc}"


def load(a, addr, flags, duration):
    cmd = [a.bench, "load", "--target", addr, "--connections", "2", "--in-flight", "8",
           "--keys", str(a.keys), "--warmup", "0s", "--duration", duration, "--timeout", "0s",
           "--json", "-"] + flags
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    if sum(r["errors"].values()) or r["over_limit"]:
        sys.exit(f"{addr}: the load saw errors or rejections: {r['errors']} {r['over_limit']}")
    return r["ok"]


def inclusive(dump):
    """{function: inclusive instructions}, and the total."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                          dump], check=True, capture_output=True, text=True).stdout
    total, functions = 0, {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(?:\*\s+)?(.*?)\s*$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        name = m.group(2)
        if "PROGRAM TOTALS" in name:
            total = n
            continue
        name = re.sub(r"^[^:]*:", "", name, count=1) if name.startswith(("???:", "/")) else name
        name = re.sub(r"\s+\[[^\]]*\]$", "", name)
        functions[name] = functions.get(name, 0) + n
    return total, functions


def stages_of(functions):
    out = {}
    for stage, patterns in STAGES:
        out[stage] = sum(n for f, n in functions.items()
                         if any(re.search(p, f) for p in patterns))
    return out


def measure(a, subject, work):
    c, addr = start(a, subject, work)
    try:
        flags = SUBJECTS[subject][1]
        load(a, addr, flags, a.warmup)  # creates the keys, warms the allocator
        c.control("-z")
        answered = load(a, addr, flags, a.duration)
        dump = c.dump()
    finally:
        c.stop()
    total, functions = inclusive(dump)
    stages = stages_of(functions)
    stages["transport"] = total - sum(stages.values())
    per = {k: v / answered for k, v in stages.items()}
    print(f"  {subject}: {answered} requests, {total / answered:.0f} instructions each",
          file=sys.stderr)
    return {"subject": subject, "label": LABELS[subject], "requests": answered,
            "instructions_per_request": total / answered, "stages": per,
            "top": sorted(((n / answered, f) for f, n in functions.items()), reverse=True)[:60]}


def table(results):
    # Each subject against the floor that sends the same descriptors.
    floors = {"five": "floor5", "floor5": "floor5"}
    names = [s for s, _ in STAGES] + ["transport"]
    lines = ["| subject | " + " | ".join(names) + " | total | to floor |",
             "|---" * (len(names) + 3) + "|"]
    for s in SUBJECTS:
        r = results.get(s)
        if not r:
            continue
        floor = results.get(floors.get(s, "floor"), {}).get("instructions_per_request")
        ratio = f"{r['instructions_per_request'] / floor:.2f}x" if floor else "-"
        lines.append(f"| {r['label']} | " + " | ".join(
            f"{r['stages'].get(n, 0):,.0f}" for n in names) +
            f" | {r['instructions_per_request']:,.0f} | {ratio} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--duration", default="4s")
    p.add_argument("--warmup", default="3s")
    p.add_argument("--keys", type=int, default=10000)
    p.add_argument("--points", default=",".join(SUBJECTS))
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for subject in a.points.split(","):
            if subject not in SUBJECTS:
                sys.exit(f"unknown point {subject}: one of {', '.join(SUBJECTS)}")
            r = measure(a, subject, work)
            results[subject] = r
            with open(os.path.join(a.out, f"profile~{subject}~instructions~r1.json"), "w") as f:
                json.dump(r, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
