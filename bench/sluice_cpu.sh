#!/usr/bin/env bash
# sluice's own CPU per request on Redis against the memory store (issue 13, item 3), and Redis'
# CPU per call through sluice against redis-benchmark running the same script at the same depth.
#
#     bash bench/sluice_cpu.sh                   # RUNS=3 DURATION=5s, this tree's release build
#     CONNECTIONS=8 bash bench/sluice_cpu.sh     # 16 in flight over 8 connections (default 2):
#                                                # both threads get some, whatever the hash
#     BASE=/tmp/base/sluice bash bench/sluice_cpu.sh   # also a second sluice binary on Redis
#     RATE=30000 bash bench/sluice_cpu.sh        # open loop: every server at the same offered
#                                                # rate (requests/s), so both batch alike
#
# One Redis and two sluice processes (memory, Redis; a third with BASE) run at once; each round
# drives each of them in turn with the same load (sluice-bench load: 16 in flight over 2
# HTTP/2 connections, one fixed_window descriptor over 10,000 keys), so the A/B alternates
# within one run. sluice's CPU is the process' utime+stime over the measured interval divided
# by the answers (sluice-bench --server-pid). Prints one line per measurement and a summary;
# JSON results go to bench/results/sluice-cpu/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
FLOOR_REQUESTS=${FLOOR_REQUESTS:-300000}
SLUICE=${SLUICE:-target/release/sluice}
BENCH=${BENCH:-target/release/sluice-bench}
BASE=${BASE:-}
TOOLS=bench/tools.py
OUT=${OUT:-bench/results/sluice-cpu}
LOAD=(--connections ${CONNECTIONS:-2} --in-flight $((16 / ${CONNECTIONS:-2})) --descriptor "k=u{i}" --keys 10000)
# A closed loop lets each server run at its own pace, and CPU per request falls as more
# requests share a wake-up; RATE compares them at one pace instead.
[ -z "${RATE:-}" ] ||
    LOAD=(--connections ${CONNECTIONS:-2} --rate "$RATE" --max-in-flight 2000 --descriptor "k=u{i}" --keys 10000)

[ -x "$SLUICE" ] && [ -x "$BENCH" ] || cargo build --release --bins
mkdir -p "$OUT"
rm -f "$OUT"/*.json
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

port=$(python3 "$TOOLS" free-port)
mkdir -p "$WORK/redis"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$WORK/redis" --logfile "$WORK/redis/log" &
PIDS+=($!)
for _ in $(seq 300); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.05; done

# start NAME BINARY FLAGS...: prints "PID ADDR" once healthy (and, on Redis, connected). It runs
# in a subshell (`< <(start ..)`), so the caller adds the PID to PIDS for the clean-up.
start() {
    local name=$1 bin=$2
    shift 2
    local grpc http
    grpc=$(python3 "$TOOLS" free-port)
    http=$(python3 "$TOOLS" free-port)
    "$bin" serve --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" --log-level warn \
        --watch-config false --config bench/config "$@" 2>"$WORK/$name.log" &
    local pid=$!
    python3 "$TOOLS" wait-http "http://127.0.0.1:$http/healthcheck" "$pid" 60 >/dev/null
    case " $* " in
        *" --backend redis "*)
            python3 "$TOOLS" wait-metric "http://127.0.0.1:$http/metrics" \
                sluice_store_redis_connected 1 "$pid" 60 >/dev/null ;;
    esac
    echo "$pid 127.0.0.1:$grpc"
}

REDIS_FLAGS=(--backend redis --redis-command-timeout 250ms --redis-url "redis://127.0.0.1:$port")
read -r mem_pid mem_addr < <(start memory "$SLUICE")
PIDS+=("$mem_pid")
read -r red_pid red_addr < <(start redis "$SLUICE" "${REDIS_FLAGS[@]}")
PIDS+=("$red_pid")
subjects=("memory $mem_pid $mem_addr" "redis $red_pid $red_addr")
if [ -n "$BASE" ]; then
    read -r base_pid base_addr < <(start base "$BASE" "${REDIS_FLAGS[@]}")
    PIDS+=("$base_pid")
    subjects+=("base-redis $base_pid $base_addr")
fi

for run in $(seq "$RUNS"); do
    log "run $run/$RUNS"
    for s in "${subjects[@]}"; do
        read -r name pid addr <<<"$s"
        extra=()
        [ "$name" = memory ] || extra=(--redis "127.0.0.1:$port")
        "$BENCH" load --duration "$DURATION" --warmup "$WARMUP" --label "$name" \
            --json "$OUT/$name~r$run.json" --target "$addr" --server-pid "$pid" \
            "${LOAD[@]}" "${extra[@]}" 2>>"$WORK/load.log"
    done
    "$BENCH" redis-floor --redis "127.0.0.1:$port" --pipeline 16 --clients 1 \
        --requests "$FLOOR_REQUESTS" --keys 10000 --json "$OUT/floor~r$run.json" \
        >>"$WORK/floor.log" 2>&1
done

python3 - "$OUT" "$RUNS" <<'EOF'
import json, sys
out, runs = sys.argv[1], int(sys.argv[2])

def get(name, run):
    try:
        with open(f"{out}/{name}~r{run}.json") as f:
            return json.load(f)
    except FileNotFoundError:
        return None

def us(v):
    return "-" if v is None else f"{v:.1f} µs"

def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}x"

print("| run | sluice CPU/req, memory | on Redis | ratio | BASE on Redis | ratio "
      "| Redis CPU/req via sluice | via redis-benchmark -P16 | ratio | req/s memory, Redis, BASE |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in range(1, runs + 1):
    m, x, b, f = get("memory", r), get("redis", r), get("base-redis", r), get("floor", r)
    mc, xc = m["server_cpu_us_per_request"], x["server_cpu_us_per_request"]
    bc = b["server_cpu_us_per_request"] if b else None
    rx = x["redis"]["cpu_us_per_request"]
    fl = f["redis_cpu_us_per_call"] if f else None
    rps = ", ".join("-" if d is None else f"{d['throughput_rps']:.0f}" for d in (m, x, b))
    print(f"| {r} | {us(mc)} | {us(xc)} | **{ratio(xc, mc)}** | {us(bc)} | {ratio(bc, mc)} "
          f"| {us(rx)} | {us(fl)} | {ratio(rx, fl)} | {rps} |")
EOF
