#!/usr/bin/env bash
# Soak test: runs a release build of sluice under load, first with the in-memory store, then
# with Redis (restarted twice along the way, --on-store-error local), reloading the config
# (SIGHUP) three times per run. Compares RSS and threads under load (after a warm-up against
# near the end), and open file descriptors and live tokio tasks (from sluice's debug "runtime"
# log line) idle before and after the load; fails when any grew or when any request failed
# (with `local`, a Redis outage is answered from memory, so the configured policy allows no
# errors at all).
#
#   bash scripts/soak.sh                 # 10 minutes per store
#   bash scripts/soak.sh --minutes 1     # a quick run
#   bash scripts/soak.sh --stores memory --concurrency 32
#
# Needs redis-server (apt-get install redis-server), curl and python3. Only 127.0.0.1 is used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MINUTES=10
STORES="memory redis"
CONCURRENCY=16
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) MINUTES=$2; shift 2 ;;
        --stores) STORES=$2; shift 2 ;;
        --concurrency) CONCURRENCY=$2; shift 2 ;;
        *) echo "usage: $0 [--minutes N] [--stores 'memory redis'] [--concurrency N]" >&2; exit 2 ;;
    esac
done
SECONDS_TOTAL=$((MINUTES * 60))

echo "==> cargo build --release (sluice, examples/soak_load)"
cargo build --release --bin sluice --example soak_load
SLUICE=target/release/sluice
LOAD=target/release/examples/soak_load

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_config() {
    # $1: the per-client limit; a reload changes it so the new rules are really swapped in.
    cat > "$WORK/config/soak.yaml" <<EOF
domain: soak
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: $1}
  - key: path
    value: "/api/*"
    rate_limit: {unit: minute, requests_per_unit: 1000000}
EOF
}

# Prints "rss_kib fds threads tasks" of process $1 whose log is $2.
sample() {
    local pid=$1 log=$2
    local rss fds threads tasks
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    threads=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
    fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
    tasks=$(python3 - "$log" <<'EOF'
import json, sys
tasks = "?"
for line in open(sys.argv[1], errors="replace"):
    try:
        v = json.loads(line)
    except ValueError:
        continue
    if v.get("fields", {}).get("message") == "runtime":
        tasks = v["fields"]["tasks"]
print(tasks)
EOF
)
    echo "$rss $fds $threads $tasks"
}

start_redis() {
    # $1: port
    redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        --dir "$WORK" --logfile "$WORK/redis.log" &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    for _ in $(seq 200); do
        redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "redis-server did not start" >&2
    exit 1
}

FAILED=0
REPORT=()

run_store() {
    local store=$1
    local grpc http log="$WORK/$store.log"
    grpc=$(free_port)
    http=$(free_port)
    mkdir -p "$WORK/config"
    write_config 5
    local flags=()
    if [ "$store" = redis ]; then
        REDIS_PORT=$(free_port)
        start_redis "$REDIS_PORT"
        flags=(--backend redis --redis-url "redis://127.0.0.1:$REDIS_PORT" --on-store-error local)
    fi
    echo "==> $store: sluice under load for $MINUTES min ($CONCURRENCY workers)"
    "$SLUICE" serve --config "$WORK/config" --grpc-addr "127.0.0.1:$grpc" \
        --http-addr "127.0.0.1:$http" --log-format json \
        --log-level "info,sluice::runtime=debug" "${flags[@]}" 2>"$log" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 400); do
        curl -fs "http://127.0.0.1:$http/healthcheck" >/dev/null 2>&1 && break
        sleep 0.05
    done
    curl -fs "http://127.0.0.1:$http/healthcheck" >/dev/null || { echo "sluice did not start" >&2; cat "$log" >&2; exit 1; }

    # Idle baseline: wait for a runtime report (every 10 s) with no load yet.
    sleep 11
    local idle_start
    idle_start=$(sample "$pid" "$log")

    "$LOAD" --addr "127.0.0.1:$grpc" --seconds "$SECONDS_TOTAL" --concurrency "$CONCURRENCY" \
        --keys 2000 >"$WORK/$store.counts" &
    local load=$!
    PIDS+=("$load")

    # Events at fractions of the run (tenths): warm-up sample, reloads, Redis restarts, end sample.
    local tenth=$((SECONDS_TOTAL / 10)) start_sample="" end_sample="" reloads=0 restarts=0
    for step in 1 2 3 4 5 6 7 8 9; do
        sleep "$tenth"
        case $step in
            2) start_sample=$(sample "$pid" "$log") ;;
            3|6|8) write_config $((5 + step)); kill -HUP "$pid"; reloads=$((reloads + 1)) ;;
            4|7)
                if [ "$store" = redis ]; then
                    kill "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true
                    sleep 2
                    start_redis "$REDIS_PORT"
                    restarts=$((restarts + 1))
                fi ;;
            9) end_sample=$(sample "$pid" "$log") ;;
        esac
    done
    wait "$load"
    # Idle again: open connections closed, a fresh runtime report.
    sleep 11
    local idle_end
    idle_end=$(sample "$pid" "$log")
    local counts
    counts=$(cat "$WORK/$store.counts")
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    if [ "$store" = redis ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    local loaded
    loaded=$(grep -c '"config loaded"' "$log" || true)

    local verdict
    verdict=$(python3 - "$store" "$start_sample" "$end_sample" "$idle_start" "$idle_end" "$counts" "$reloads" "$loaded" "$restarts" <<'EOF'
import json, sys
store, start, end, idle0, idle1, counts, reloads, loaded, restarts = sys.argv[1:]
# RSS and threads: warm (20% into the load) against near the end (90%), both under load.
# Open fds and live tasks: idle before the load against idle after it (under load they count
# the streams of the moment).
s = start.split(); e = end.split(); i0 = idle0.split(); i1 = idle1.split()
rss0, th0 = int(s[0]), int(s[2])
rss1, th1 = int(e[0]), int(e[2])
fd0, t0 = int(i0[1]), i0[3]
fd1, t1 = int(i1[1]), i1[3]
counts = json.loads(counts)
errors = {k: v for k, v in counts.items() if k.startswith("error")}
problems = []
if rss1 > rss0 * 1.25 + 16 * 1024:
    problems.append(f"RSS grew {rss0} -> {rss1} KiB")
if fd1 > fd0 + 2:
    problems.append(f"open fds grew {fd0} -> {fd1}")
if th1 > th0 + 4:
    problems.append(f"threads grew {th0} -> {th1}")
if t0 == "?" or t1 == "?":
    problems.append("no runtime report in the log")
elif int(t1) > int(t0) + 2:
    problems.append(f"tasks grew {t0} -> {t1}")
if errors:
    problems.append(f"errors: {errors}")
if int(loaded) < int(reloads) + 1:
    problems.append(f"only {loaded} config loads for {reloads} reloads")
total = sum(counts.values())
print(f"{store:6}  requests {total:>9}  ok {counts.get('ok', 0):>9}  over_limit {counts.get('over_limit', 0):>8}  "
      f"errors {sum(errors.values())}  reloads {reloads}  redis restarts {restarts}")
print(f"        RSS {rss0} -> {rss1} KiB, threads {th0} -> {th1} (under load); "
      f"open fds {fd0} -> {fd1}, tasks {t0} -> {t1} (idle before and after)")
print("        " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
EOF
)
    echo "$verdict"
    REPORT+=("$verdict")
    if grep -q FAIL <<<"$verdict"; then
        FAILED=1
    fi
}

for store in $STORES; do
    run_store "$store"
done

echo
echo "==> soak summary ($MINUTES min per store)"
for r in "${REPORT[@]}"; do
    echo "$r"
done
exit "$FAILED"
