"""bench/report.py renders the in-memory cost rows (issue 35) from a small SCENARIOS subset:
the per-stage table, the ratios to the floor and the in-memory ratio to limitador."""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402


def write(d, name, body):
    with open(os.path.join(d, name), "w") as f:
        json.dump(body, f)


def closed(cpu, rps):
    return {"server_cpu_us_per_request": cpu, "throughput_rps": rps, "ok": 100, "errors": {},
            "latency_us": {"p50": 100, "p99": 300}}


def profile(subject, total, store):
    stages = {s: 0 for s in report.report_memory_cost.STAGES}
    stages.update({"store": store, "transport": total - store})
    return {"subject": subject, "instructions_per_request": total, "stages": stages}


class NoPlots:
    """The plots need matplotlib; the text is what is checked here."""

    def sweep(self, *_):
        pass

    def latency(self, *_):
        pass


def render(tmp_path):
    d = str(tmp_path)
    write(d, "machine.json", {"mode": "quick"})
    for run in (1, 2):
        write(d, f"floor~noop-current~c16~r{run}.json", closed(10.0, 50000))
        write(d, f"memory-10k-keys~sluice~c16~r{run}.json", closed(11.0 + run, 45000))
        write(d, f"floor-5-descriptors~noop-current~c16~r{run}.json", closed(20.0, 30000))
        write(d, f"memory-5x2~sluice~c16~r{run}.json", closed(30.0, 20000))
        write(d, f"peers-memory~sluice~c16~r{run}.json", closed(11.0, 40000))
        write(d, f"peers-memory~limitador~c16~r{run}.json", closed(20.0, 20000 + run * 5000))
        write(d, f"peers-memory~noop~c16~r{run}.json", closed(10.0, 50000))
    write(d, "profile~floor~instructions~r1.json", profile("floor", 40000, 0))
    write(d, "profile~one~instructions~r1.json", profile("one", 46000, 1500))
    write(d, "profile~floor5~instructions~r1.json", profile("floor5", 48000, 0))
    write(d, "profile~five~instructions~r1.json", profile("five", 60000, 9000))
    results, machine = report.load(d)
    out = os.path.join(d, "BENCHMARKS.md")
    report.Report(results, machine).write(out, NoPlots())
    with open(out) as f:
        return f.read()


def test_memory_cost_rows(tmp_path):
    md = render(tmp_path)
    # 12/10 and 13/10: median 1.25, missed by 0.05 against 1.2.
    assert "| Memory, 10k keys, 1 descriptor: server CPU/request ≤ 1.2× the no-op floor (c16) | 1.25 (1.20–1.30)× | missed |" in md, md
    assert "5 descriptors × 2 limits: server CPU/request ≤ 1.3× the no-op floor with 5 descriptors (c16) | 1.50" in md
    assert ("user-space instructions/request ≤ 1.2× the no-op floor's with the same descriptors "
            "(callgrind) | 1.15× | met |") in md
    # Five descriptors against the no-op floor sending the same five: 60000 / 48000.
    assert ("5 descriptors × 2 limits: user-space instructions/request ≤ 1.3× the no-op floor's "
            "with the same descriptors (callgrind) | 1.25× | met |") in md
    # 40000 / 25000 and 40000 / 30000: median 1.47.
    assert "throughput ≥ 1.5× Kuadrant/limitador's (its memory storage, 16 in flight, A/B in each run) | 1.47" in md
    assert "## Memory store: instructions per request by stage (callgrind)" in md
    assert "| sluice, 5 descriptors × 2 limits | 0 | 0 | 0 | 9,000 | 0 | 0 | 0 | 51,000 | 60,000 | 1.25× |" in md
    assert "## Against Kuadrant/limitador in memory" in md
    assert "| sluice, 5 descriptors × 2 limits, 10k keys | 30.00 (30.00–30.00) | 1.50 (1.50–1.50) |" in md


def redis_closed(cpu, redis_cpu, rps):
    r = closed(cpu, rps)
    r["redis"] = {"cpu_us_per_request": redis_cpu, "commands": {"fcall": 10}}
    return r


def test_rejected_heavy_rows(tmp_path):
    """Issue 32, item 9: the Redis store with every key at its limit, against the memory store
    under the same rejected load and against the seed script, each taken within its run."""
    d = str(tmp_path)
    write(d, "machine.json", {"mode": "quick"})
    for run in (1, 2):
        write(d, f"redis-memory~sluice~c16~r{run}.json", closed(10.0, 50000))
        write(d, f"redis~sluice~c16~r{run}.json", redis_closed(11.0, 3.0, 40000))
        write(d, f"redis-memory-reached~sluice~c16~r{run}.json", closed(8.0, 60000))
        write(d, f"redis-reached~sluice~c16~r{run}.json", redis_closed(8.0 + run, 2.0, 50000))
        write(d, f"redis-cost~floor~fixed_window~r{run}.json", {"redis_cpu_us_per_call": 5.0})
    results, machine = report.load(d)
    out = os.path.join(d, "BENCHMARKS.md")
    report.Report(results, machine).write(out, NoPlots())
    md = open(out).read()
    # 9/8 and 10/8: median 1.19, within 1.3.
    assert ("| Redis, every key at its limit: sluice CPU/request ≤ 1.3× the memory store's (same "
            "rejected load, A/B in each run) | 1.19 (1.12–1.25)× | met |") in md, md
    # 2/5 = 0.4.
    assert ("every key at its limit: Redis CPU per rejected decision ≤ 0.7× the seed script's "
            "(seed under redis-benchmark, same Redis, same run) | 0.40 (0.40–0.40)× | met |") in md
    assert "| standalone, every key at its limit | 9.50 (9.00–10.00) | 1.19 (1.12–1.25) |" in md
