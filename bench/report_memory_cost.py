"""BENCHMARKS.md's rows and sections about the cost of the in-memory path (issue 35, item 1):
its targets against the no-op floor and Kuadrant/limitador, the instructions per request by
stage (bench/profile_memory.py) and the in-memory A/B with limitador (bench/peers.py).
Used by bench/report.py; standard library only."""

HEAD = "c16"
FLOOR = ("floor", "noop-current", HEAD)
FLOOR5 = ("floor-5-descriptors", "noop-current", HEAD)
PEERS_MEMORY = "peers-memory"
STAGES = ["decode", "match", "keys", "store", "assemble", "metrics", "encode", "transport"]
PROFILED = [("floor", "gRPC no-op floor (current-thread)"),
            ("floor5", "gRPC no-op floor, 5 descriptors (current-thread)"),
            ("one", "sluice, 1 descriptor"), ("five", "sluice, 5 descriptors × 2 limits")]
# The floor each profiled subject is compared with: the one sending the same descriptors.
PROFILE_FLOOR = {"one": "floor", "five": "floor5", "floor": "floor", "floor5": "floor5"}


def peers_at(rep):
    """The concurrency point of the in-memory peers results (one per run of bench/peers.py)."""
    points = sorted({k[2] for k in rep.r if k[0] == PEERS_MEMORY})
    return points[0] if points else None


def target_rows(rep, row):
    """Issue 35, item 1: CPU per request against the floor, throughput against limitador."""
    cpu = "server_cpu_us_per_request"
    row(f"Memory, 10k keys, 1 descriptor: server CPU/request ≤ 1.2× the no-op floor ({HEAD})",
        rep.ratio(("memory-10k-keys", "sluice", HEAD), cpu, FLOOR), 1.2, True, "×")
    row(f"Memory, 5 descriptors × 2 limits: server CPU/request ≤ 1.3× the no-op floor with 5 "
        f"descriptors ({HEAD})",
        rep.ratio(("memory-5x2", "sluice", HEAD), cpu, FLOOR5), 1.3, True, "×")
    for subject, label in PROFILED[2:]:
        key = ("profile", subject, "instructions")
        if rep.runs(key):
            goal = 1.2 if subject == "one" else 1.3
            floor = ("profile", PROFILE_FLOOR[subject], "instructions")
            row(f"Memory, {label}: user-space instructions/request ≤ {goal}× the no-op floor's "
                "with the same descriptors (callgrind)",
                rep.ratio(key, "instructions_per_request", floor), goal, True, "×")
    at = peers_at(rep)
    if at:
        k = lambda subject: (PEERS_MEMORY, subject, at)  # noqa: E731
        row(f"Memory: sluice's throughput ≥ 1.5× Kuadrant/limitador's (its memory storage, "
            f"{at[1:]} in flight, A/B in each run)",
            rep.ratio(k("sluice"), "throughput_rps", k("limitador")), 1.5, False, "×")


def profile_section(rep):
    runs = {s: rep.runs(("profile", s, "instructions")).get(1) for s, _ in PROFILED}
    if not any(runs.values()):
        return
    p = rep.p
    p("## Memory store: instructions per request by stage (callgrind)")
    p()
    p("`bench/profile_memory.py` (`SCENARIOS=profile bash bench/run.sh quick`, or run it "
      "alone): each server under `valgrind --tool=callgrind`, a warm-up load that creates the "
      "10,000 keys, counters zeroed, then `sluice-bench load` (16 in flight over 2 connections); "
      "user-space instructions divided by the answered requests. A stage is the inclusive "
      "count of the functions that run it (decode: the protobuf decoder and the request's "
      "validation and conversion; match: resolving descriptors to rules; keys: the storage "
      "keys and checks; store: the memory store's decision; assemble: the response in the "
      "model's terms; metrics: the per-request counters and histograms; encode: conversion to "
      "protobuf and its encoder); transport is the rest (tonic, hyper, h2, tokio, the system "
      "calls' user side). The kernel's work is not counted: it is the same per request for "
      "every subject at equal requests per read.")
    p()
    rows = []
    for subject, label in PROFILED:
        r = runs.get(subject)
        if not r:
            continue
        total = r["instructions_per_request"]
        floor = (runs.get(PROFILE_FLOOR[subject]) or {}).get("instructions_per_request")
        rows.append([label] + [f"{r['stages'].get(s, 0):,.0f}" for s in STAGES]
                    + [f"{total:,.0f}", f"{total / floor:.2f}×" if floor else "–"])
    rep.table(["subject"] + STAGES + ["total", "× floor"], rows)


def peers_section(rep):
    at = peers_at(rep)
    if not at:
        return
    k = lambda subject: (PEERS_MEMORY, subject, at)  # noqa: E731
    p = rep.p
    p("## Against Kuadrant/limitador in memory")
    p()
    p(f"`bench/peers.py` (given a `limitador-server` built from Kuadrant/limitador's public "
      f"source): sluice on its memory store, limitador on its `memory` storage and the no-op "
      f"floor, the same rule (one descriptor, a 60 s window, a limit nothing reaches, 10,000 "
      f"keys), each loaded in turn by `sluice-bench load` at {at[1:]} in flight over 2 "
      f"connections, A/B alternating every round.")
    p()
    rows = []
    for who, subject in [("sluice", "sluice"), ("Kuadrant/limitador", "limitador"),
                         ("gRPC no-op floor (current-thread)", "noop")]:
        if not rep.runs(k(subject)):
            continue
        rows.append([who, rep.stat(k(subject), "throughput_rps").fmt(0),
                     rep.stat(k(subject), "server_cpu_us_per_request").fmt(2),
                     rep.ratio(k(subject), "server_cpu_us_per_request", k("noop")).fmt(2)])
    rep.table(["who", "requests/s", "server CPU µs/request", "CPU × floor"], rows)
    p(f"sluice ÷ limitador: throughput "
      f"{rep.ratio(k('sluice'), 'throughput_rps', k('limitador')).fmt(2)}×, server CPU per "
      f"request {rep.ratio(k('sluice'), 'server_cpu_us_per_request', k('limitador')).fmt(2)}×.")
    p()
