"""The Redis CPU per decision part of BENCHMARKS.md (bench/report.py calls it): sluice's
scripts against the floor scripts of bench/floors/ and envoyproxy/ratelimit's INCRBY + EXPIRE,
from the redis-cost~* results that bench/floors.py writes."""

ALGORITHMS = ["fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket",
              "gcra"]
US = "redis_cpu_us_per_call"
HEAD = "c16"
# bench/redis_cost.py: through the server.
THROUGH = "redis-cost-through"
PER = "redis_cpu_us_per_decision"
# A floor script other than the seed's, served over gRPC (`sluice-bench noop --floor-script`).
SERVED = "floor-server"
# bench/redis_instructions.py: Redis' user-space instructions per decision (callgrind).
INSTR = "redis-instructions"
IPD = "instructions_per_decision"
# Five fixed_window descriptors per request, per decision (redis_cost.FIVE's point name).
FIVE_POINT = "fixed_windowx5"


def target_rows(rep, row):
    """Adds the Redis CPU targets through `row(target, measured, goal, lower_is_better, unit)`."""
    seed = ("redis-cost", "floor", "fixed_window")
    row(f"Redis: Redis CPU per fixed_window decision through sluice ≤ the seed script's ({HEAD}; "
        "seed under redis-benchmark, same Redis, same run; sluice on bench/config's 1 s windows, "
        "an eighth of its decisions starting a window, the seed on 60 s windows)",
        rep.ratio(("redis", "sluice", HEAD), "redis.cpu_us_per_request", seed, US), 1.0, True, "×")
    row("Redis: fixed_window script (fast path) ≤ the seed script, both under redis-benchmark",
        rep.ratio(("redis-cost", "sluice", "fixed_window"), US, seed, US), 1.0, True, "×")
    for a in ALGORITHMS[1:]:
        row(f"Redis: {a} script ≤ 1.5× its floor (bench/floors/{a}.lua)",
            rep.ratio(("redis-cost", "sluice", a), US, ("redis-cost", "floor", a), US), 1.5,
            True, "×")
    row("Redis: a sliding_log key full at 10,000 entries ≤ 2× a fixed_window decision",
        rep.ratio(("redis-cost", "sluice", "sliding_log-full-10000"), US,
                  ("redis-cost", "sluice", "fixed_window"), US), 2.0, True, "×")


def limits_target_rows(rep, row):
    """Issue 32 item 6 (bench/redis_limits.py, Redis under callgrind): a sliding_log of 9,000
    logged hits beside a fixed_window against two fixed windows (≤ 2×), and what each further
    fixed_window limit of a descriptor adds (1 → 5 limits) against a seed script call (≤ 1×)."""
    def k(point):
        return ("redis-limits", "sluice", point)

    ipc = "instructions_per_call"
    row("Redis: sliding_log (9,000 logged) + fixed_window on one descriptor ≤ 2× two "
        "fixed_window limits (instructions per decision)",
        rep.ratio(k("log_fw"), ipc, k("fw_fw"), ipc), 2.0, True, "×")
    lone, five, seed = rep.runs(k("lone")), rep.runs(k("fw5")), rep.runs(k("seed"))
    vals = []
    for run in sorted(set(lone) & set(five) & set(seed)):
        x, y, z = lone[run].get(ipc), five[run].get(ipc), seed[run].get(ipc)
        if x and y and z:
            vals.append((y - x) / 4 / z)
    row("Redis: each further fixed_window limit of a descriptor ≤ one seed script call "
        "(instructions, 1 → 5 limits)", type(rep.stat(k("lone"), ipc))(vals), 1.0, True, "×")


def item1_rows(rep, row, kind, metric, what, seed, floor, against):
    """Issue 13 item 1 for one measure (`kind` results, `metric` per decision): fixed_window and
    5 descriptors against `seed` (≤ 1×), each other algorithm measured against `floor` (≤ 1.5×);
    `against` says how the floors ran."""
    def k(subject, point):
        return (kind, subject, point)

    def ratio(point, other):
        return rep.ratio(k("sluice", point), metric, k(other, point), metric)

    # Issue 32, item 9: 0.7× (it was 1× in issue 13).
    row(f"Redis: {what} per fixed_window decision through sluice ≤ 0.7× the seed script's "
        f"({against})", ratio("fixed_window", seed), 0.7, True, "×")
    row(f"Redis: {what} per decision of 5 descriptors ≤ one seed script call's ({against})",
        ratio(FIVE_POINT, seed), 1.0, True, "×")
    for a in ALGORITHMS[1:]:
        if rep.runs(k("sluice", a)) and rep.runs(k(floor, a)):
            row(f"Redis: {what} per {a} decision through sluice ≤ 1.5× its floor's ({against})",
                ratio(a, floor), 1.5, True, "×")


def through_target_rows(rep, row):
    """Issue 13 item 1 in Redis CPU time, through the server (bench/redis_cost.py): against the
    floors under redis-benchmark -P 16, and served over gRPC the same way."""
    item1_rows(rep, row, THROUGH, PER, "CPU", "floor", "floor",
               "the floor under redis-benchmark -P 16, same Redis, same run")
    item1_rows(rep, row, THROUGH, PER, "CPU", "seed-server", SERVED,
               "the floor served over gRPC the same way, sluice-bench noop")
    # Issue 32 item 9 measured as its table measured Redis per decision: the time inside the
    # commands sent (INFO commandstats), which leaves out each round trip's reads, writes and
    # wake-ups (bench/redis_cost.py, SENT_PLAIN).
    inside = "redis_command_us_per_decision"
    for seed, against in (("floor", "under redis-benchmark -P 16"),
                          ("seed-server", "served over gRPC the same way")):
        if rep.runs((THROUGH, "sluice", "fixed_window")):
            row("Redis: time inside the commands sent (INFO commandstats) per fixed_window "
                f"decision through sluice ≤ 0.7× the seed script's ({against}, same Redis, same run)",
                rep.ratio((THROUGH, "sluice", "fixed_window"), inside,
                          (THROUGH, seed, "fixed_window"), inside), 0.7, True, "×")


def instruction_target_rows(rep, row):
    """Issue 13 item 1 in Redis' own instructions, at equal reads (bench/redis_instructions.py)."""
    if rep.runs((INSTR, "sluice", "fixed_window")):
        item1_rows(rep, row, INSTR, IPD, "instructions", "served", "served",
                   "callgrind, the floor served the same way, the same reads per decision")


def instruction_section(rep):
    i = lambda subject, point: (INSTR, subject, point)  # noqa: E731
    if not rep.runs(i("sluice", "fixed_window")):
        return
    p = rep.p
    p("## Redis' own instructions per decision")
    p()
    p("`bench/redis_instructions.py`: Redis under callgrind, which counts the instructions Redis "
      "runs in user space, the same for the same work whatever else the machine does (its CPU "
      "time here moves by ±15% between runs). The servers and the load are those of the table "
      "above at 16 in flight, with 500 keys and a warm-up that takes every key's first take of "
      "its window out of the count; the floors also run under `redis-benchmark -c 1` at `-P 8` "
      "(the reads per decision the servers make) and `-P 16`. What callgrind leaves out is the "
      "kernel: the reads, writes and wake-ups of each round trip, most of Redis' CPU time on "
      "loopback, which follow the reads per decision shown beside each figure.")
    p()
    def cell(subject, at):
        n, reads = rep.stat(i(subject, at), IPD), rep.stat(i(subject, at), "reads_per_decision")
        return f"{n.median:,.0f} ({reads.median:.3f})" if n and reads else None

    rows = []
    for a in ALGORITHMS + ["fixed_windowx5"]:
        own = cell("sluice", a)
        if not own:
            continue
        floor = "fixed_window" if a == "fixed_windowx5" else a
        row = [a, own]
        for subject, at in (("served", a), ("floor-P8", floor), ("floor-P16", floor)):
            c = cell(subject, at)
            row += [c, rep.ratio(i("sluice", a), IPD, i(subject, at), IPD).fmt(2)] if c else \
                ["", ""]
        rows.append(row)
    rep.table(["point", "sluice (reads per decision)", "floor served the same way", "×",
               "floor, redis-benchmark -P 8", "×", "floor, redis-benchmark -P 16", "×"], rows)
    p("Medians of the rounds; each ratio is taken within its round.")
    p()


def through_section(rep):
    if not rep.runs((THROUGH, "sluice", "fixed_window")):
        return
    p = rep.p
    p("## Redis CPU per decision through the server")
    p()
    p("`bench/redis_cost.py`: the Redis process's CPU (utime + stime) per decision while `sluice "
      "serve --backend redis` answers `sluice-bench load` (16 in flight over 2 connections, "
      "10,000 keys, the `cost_*` rules of bench/config: a 60 s window and a limit nothing "
      "reaches), against each floor script under `redis-benchmark -c 1 -P 16` (its best case) "
      "and the same floor script served over gRPC by `sluice-bench noop --seed-redis` under the "
      "same load as sluice (the seed script for fixed_window, `--floor-script` for the others); "
      "A/B alternating, every round. The rows \"µs inside the commands sent\" count only the "
      "time Redis spent running the commands each side sent (`INFO commandstats` usec: the "
      "script calls, and sluice's plain takes' `HINCRBY`s and one `TIME` per write; the few "
      "`HINCRBY`s sluice's scripts ran are counted twice, against sluice), leaving out each "
      "round trip's reads, writes and wake-ups, which follow the decisions per round trip: "
      "at 16 in flight over 2 serving threads each thread's connection carries at most 8, "
      "`-P 16` carries 16.")
    p()
    rows = []
    points = ALGORITHMS + ["fixed_windowx5"]
    for a in points:
        s = rep.stat((THROUGH, "sluice", a), PER)
        f = rep.stat((THROUGH, "floor", a), PER)
        if not s or not f:
            continue
        rows.append([a, s.fmt(2), f.fmt(2),
                     rep.ratio((THROUGH, "sluice", a), PER, (THROUGH, "floor", a), PER).fmt(2)])
    for a in points:
        served = "seed-server" if a.startswith("fixed_window") else SERVED
        f = rep.stat((THROUGH, served, a), PER)
        s = rep.stat((THROUGH, "sluice", a), PER)
        if f and s:
            what = "the seed script" if served == "seed-server" else "its floor"
            rows.append([f"{a}, against {what} served over gRPC", s.fmt(2), f.fmt(2),
                         rep.ratio((THROUGH, "sluice", a), PER, (THROUGH, served, a),
                                   PER).fmt(2)])
    inside = "redis_command_us_per_decision"
    for served, how in (("floor", "under redis-benchmark"), ("seed-server", "served over gRPC")):
        s = rep.stat((THROUGH, "sluice", "fixed_window"), inside)
        f = rep.stat((THROUGH, served, "fixed_window"), inside)
        if s and f:
            rows.append([f"fixed_window, µs inside the commands sent (INFO commandstats), "
                         f"against the seed script {how}", s.fmt(2), f.fmt(2),
                         rep.ratio((THROUGH, "sluice", "fixed_window"), inside,
                                   (THROUGH, served, "fixed_window"), inside).fmt(2)])
    for who, key in [("envoyproxy/ratelimit INCRBY + EXPIRE", "incrby-expire"),
                     ("a plain INCR", "incr")]:
        f = rep.stat((THROUGH, key, "fixed_window"), PER)
        if f:
            rows.append([who, "", f.fmt(2), ""])
    rep.table(["algorithm", "sluice µs/decision", "floor µs/decision", "× floor"], rows)


# bench/peers.py: sluice, limitador and the seed server on one Redis.
PEERS = "peers"
PEERS_AT = "c32"


def peers_target_rows(rep, row):
    """Issue 13 item 4 (bench/peers.py, when limitador-server was given)."""
    k = lambda subject: (PEERS, subject, PEERS_AT)  # noqa: E731
    if not rep.runs(k("limitador")):
        return
    row("Redis: sluice's throughput ≥ 3× Kuadrant/limitador's, both on one Redis, 32 in flight",
        rep.ratio(k("sluice"), "throughput_rps", k("limitador")), 3.0, False, "×")
    row("Redis: sluice's Redis CPU per request < Kuadrant/limitador's (ratio < 1)",
        rep.ratio(k("sluice"), "redis_cpu_us_per_request", k("limitador")), 1.0, True, "×")


def peers_section(rep):
    k = lambda subject: (PEERS, subject, PEERS_AT)  # noqa: E731
    if not rep.runs(k("limitador")):
        return
    p = rep.p
    p("## Against the peers on one Redis")
    p()
    p("`bench/peers.py` (given a `limitador-server` built from Kuadrant/limitador's public "
      "source; this repository does not build it): sluice, limitador (its `redis` storage) and "
      "the seeds' fixed-window script served over gRPC (`sluice-bench noop --seed-redis`) on one "
      "Redis, the same rule (one descriptor, a 60 s window, a limit nothing reaches, 10,000 "
      "keys), each loaded in turn by `sluice-bench load` at 32 in flight over 2 connections, "
      "A/B alternating every round; envoyproxy/ratelimit's INCRBY + EXPIRE under "
      "`redis-benchmark -c 1 -P 32`. Decisions per second of one Redis core = 10⁶ ÷ Redis CPU µs "
      "per request (one decision each).")
    p()

    def per_core(stat):
        return type(stat)([1e6 / v for v in stat.values if v]).fmt(0)

    rows = []
    for who, subject in [("sluice", "sluice"), ("Kuadrant/limitador", "limitador"),
                         ("the seed script, served over gRPC", "seed-server"),
                         ("envoyproxy/ratelimit INCRBY + EXPIRE (redis-benchmark)",
                          "incrby-expire")]:
        cpu = rep.stat(k(subject), "redis_cpu_us_per_request")
        if not cpu:
            continue
        rps = rep.stat(k(subject), "throughput_rps")
        rows.append([who, rps.fmt(0) if rps else "", cpu.fmt(2), per_core(cpu)])
    rep.table(["who", "requests/s", "Redis CPU µs/request", "decisions/s one Redis core "
               "sustains"], rows)
    p(f"sluice ÷ limitador: throughput "
      f"{rep.ratio(k('sluice'), 'throughput_rps', k('limitador')).fmt(2)}×, Redis CPU per "
      f"request {rep.ratio(k('sluice'), 'redis_cpu_us_per_request', k('limitador')).fmt(2)}×.")
    p()


def section(rep):
    through_section(rep)
    instruction_section(rep)
    peers_section(rep)
    if not rep.runs(("redis-cost", "floor", "fixed_window")):
        return
    p = rep.p
    p("## Redis CPU per decision")
    p()
    p("The Redis process's CPU (INFO cpu: user + system) over one `redis-benchmark` run of 200,000 "
      f"script calls (pipeline {HEAD[1:]}, 10,000 keys, every call admitted and charged) divided "
      "by the calls Redis counted, on one Redis, sluice and floor in alternating order each run. "
      "sluice's side is `sluice-bench redis-floor`: the script the Redis store runs for one "
      "descriptor with the arguments it sends (`fixed_window.lua` for a fixed_window, "
      "`sliding_log.lua` for a sliding_log, `decide.lua` otherwise). Each floor is the simplest script that does the job "
      "(`bench/floors/`: the seeds' fixed-window script; GCRA as the redis-cell ports do it; "
      "token and leaky bucket as a hash of level and time; sliding log as a sorted set; sliding "
      "window as two counters). Decisions per second of one Redis core = 10⁶ ÷ µs per decision.")
    p()
    rows = []
    for a in ALGORITHMS:
        s = rep.stat(("redis-cost", "sluice", a), US)
        f = rep.stat(("redis-cost", "floor", a), US)
        if not s:
            continue
        per_core = rep.stat(("redis-cost", "sluice", a), US)
        per_core.values = [1e6 / v for v in per_core.values if v]
        rows.append([a, s.fmt(2), f.fmt(2),
                     rep.ratio(("redis-cost", "sluice", a), US, ("redis-cost", "floor", a),
                               US).fmt(2),
                     per_core.fmt(0)])
    rep.table(["algorithm", "sluice µs/decision", "floor µs/decision", "× floor",
               "sluice decisions/s per Redis core"], rows)
    seed = rep.stat(("redis-cost", "floor", "fixed_window"), US)
    ie = rep.stat(("redis-cost", "incrby-expire", "fixed_window"), US)
    fast = rep.stat(("redis-cost", "sluice", "fixed_window"), US)
    through = rep.stat(("redis", "sluice", HEAD), "redis.cpu_us_per_request")

    def per_core(stat):
        out = type(stat)([1e6 / v for v in stat.values if v])
        return out.fmt(0)

    p("### fixed_window against the peers")
    p()
    rep.table(["who", "Redis CPU µs/decision", "decisions/s one Redis core sustains"], [
        [f"sluice, through the server ({HEAD[1:]} in flight, 10,000 keys)", through.fmt(2),
         per_core(through)],
        ["sluice's script alone (`fixed_window.lua`, redis-benchmark)", fast.fmt(2),
         per_core(fast)],
        ["the seeds' fixed-window script (redis-benchmark)", seed.fmt(2), per_core(seed)],
        ["envoyproxy/ratelimit: INCRBY + EXPIRE per decision (redis-benchmark, the two commands "
         "measured apart and added)", ie.fmt(2), per_core(ie)],
    ])
    hot = rep.stat(("redis-cost", "sluice", "sliding_log-full-10000"), US)
    if hot:
        p(f"A sliding_log key full at 10,000 entries (limit 10,000, one key, every call rejected) "
          f"costs **{hot.fmt(1)} µs** of Redis CPU per decision: its state is a sorted set, and "
          "`sliding_log.lua` reads it by rank and count (O(log n)), never entry by entry."
          + ("" if rep.runs((PEERS, "limitador", PEERS_AT)) else
             " Kuadrant/limitador was not run (`bench/peers.py` needs a `limitador-server`: "
             "LIMITADOR_BIN)."))
        p()
