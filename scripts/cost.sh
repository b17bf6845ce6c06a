#!/usr/bin/env bash
# The deterministic cost guard: instructions (counted by callgrind) and
# allocations of one acquire + release cycle, per scenario of lock-cost,
# against the baselines in lock-cost/baseline.txt. Fails when a figure is
# more than 10% above its baseline. Counts, unlike times, repeat from run to
# run on a busy machine.
#
# Scenarios (see lock-cost/src/main.rs):
#   memory  plain lock, in-memory store
#   redis   plain lock against a redis-server this script starts (the client
#           process only is counted, not the server)
#   hot     the same with keep_hot: a kept lock reused (lock-bench's W1h)
#
# Each scenario runs twice under callgrind, with N1 and N2 measured cycles
# after the same warm-up; a figure per cycle is (total(N2) - total(N1)) /
# (N2 - N1), which cancels start-up and shut-down. Allocations and bytes come
# from lock-cost's counting allocator in the same two runs.
#
# Usage:
#   bash scripts/cost.sh            compare with the baselines (exit 1 on a regression)
#   bash scripts/cost.sh --update   measure and rewrite the baselines (on purpose:
#                                   commit the file with the change that moved them)
# Needs valgrind, redis-server and redis-cli.
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASELINE=lock-cost/baseline.txt
SCENARIOS=(memory redis hot)
WARMUP=200
N1=500
N2=2500
# A figure may be this much above its baseline (10%).
LIMIT=1.10

update=0
case "${1:-}" in
    "") ;;
    --update) update=1 ;;
    *)
        echo "usage: bash scripts/cost.sh [--update]" >&2
        exit 2
        ;;
esac

for tool in valgrind redis-server redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: $tool is not installed (apt-get install -y valgrind redis-server redis-tools)" >&2
        exit 2
    fi
done

work="$(mktemp -d)"
redis_pid=""
cleanup() {
    if [ -n "$redis_pid" ]; then
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "building lock-cost (release)"
cargo build -q --release -p lock-cost
target_dir="$(cargo metadata -q --format-version 1 --no-deps \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
bin="$target_dir/release/lock-cost"
if [ ! -x "$bin" ]; then
    echo "error: $bin was not built" >&2
    exit 2
fi

# A redis-server on a free loopback port, no persistence: a random port is
# tried; a port in use makes the server exit, and another is tried.
start_redis() {
    local attempt port
    for attempt in $(seq 1 20); do
        port=$((20000 + RANDOM % 40000))
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize no --loglevel warning --dir "$work" >"$work/redis.log" 2>&1 &
        redis_pid=$!
        local tries
        for tries in $(seq 1 50); do
            if ! kill -0 "$redis_pid" 2>/dev/null; then
                break
            fi
            if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then
                redis_url="redis://127.0.0.1:$port/"
                return 0
            fi
            sleep 0.1
        done
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
        redis_pid=""
    done
    echo "error: could not start redis-server on a free loopback port:" >&2
    cat "$work/redis.log" >&2
    return 1
}
start_redis
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on $redis_url"

# One run under callgrind: prints "<instructions> <allocations> <bytes>".
measure() {
    local scenario=$1 cycles=$2 out="$work/callgrind.out" args=("$1")
    if [ "$scenario" != memory ]; then
        args+=(--url "$redis_url")
    fi
    args+=(--cycles "$cycles" --warmup "$WARMUP")
    local line
    if ! line="$(valgrind --tool=callgrind -q --callgrind-out-file="$out" "$bin" "${args[@]}")"; then
        echo "error: lock-cost ${args[*]} failed under callgrind" >&2
        return 1
    fi
    # The file's "summary:" line is the total of its one event, Ir.
    local instructions
    instructions="$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out")"
    rm -f "$out"
    if [ -z "$instructions" ]; then
        echo "error: no instruction total from callgrind for $scenario" >&2
        return 1
    fi
    local allocations bytes
    allocations="$(sed -n 's/.* allocations=\([0-9]*\).*/\1/p' <<<"$line")"
    bytes="$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' <<<"$line")"
    if [ -z "$allocations" ] || [ -z "$bytes" ]; then
        echo "error: lock-cost $scenario printed no allocation counts: $line" >&2
        return 1
    fi
    echo "$instructions $allocations $bytes"
}

rustc_version="$(rustc --version)"
declare -A now
for scenario in "${SCENARIOS[@]}"; do
    # (Assignments, so that a failed run stops the script under set -e.)
    first="$(measure "$scenario" "$N1")"
    second="$(measure "$scenario" "$N2")"
    read -r i1 a1 b1 <<<"$first"
    read -r i2 a2 b2 <<<"$second"
    now[$scenario]="$(awk -v i1="$i1" -v i2="$i2" -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" \
        -v n="$((N2 - N1))" 'BEGIN { printf "%.0f %.2f %.1f", (i2 - i1) / n, (a2 - a1) / n, (b2 - b1) / n }')"
done

if [ "$update" -eq 1 ]; then
    {
        echo "# Baselines of the cost guard (scripts/cost.sh), per acquire + release cycle:"
        echo "# scenario, instructions (callgrind Ir, client process only), allocations, bytes allocated."
        echo "# Rewritten by \`bash scripts/cost.sh --update\`; commit it with the change that moved it."
        echo "# Instruction counts move with the compiler and Cargo.lock; measured with:"
        echo "# rustc: $rustc_version"
        for scenario in "${SCENARIOS[@]}"; do
            echo "$scenario ${now[$scenario]}"
        done
    } >"$BASELINE"
    echo "baselines written to $BASELINE:"
fi

if [ ! -f "$BASELINE" ]; then
    echo "error: $BASELINE is missing; make it with: bash scripts/cost.sh --update" >&2
    exit 1
fi
baseline_rustc="$(sed -n 's/^# rustc: //p' "$BASELINE")"
if [ "$baseline_rustc" != "$rustc_version" ]; then
    echo "note: the baselines were measured with $baseline_rustc, this run uses $rustc_version;"
    echo "      instruction counts move with the compiler (update the baselines on purpose if so)"
fi

failed=0
printf '\n%-8s %-18s %12s %12s %7s\n' scenario figure baseline now ratio
for scenario in "${SCENARIOS[@]}"; do
    base="$(awk -v s="$scenario" '$1 == s { print $2, $3, $4 }' "$BASELINE")"
    if [ -z "$base" ]; then
        echo "$scenario: no baseline in $BASELINE (add it with: bash scripts/cost.sh --update)"
        failed=1
        continue
    fi
    read -r base_i base_a base_b <<<"$base"
    read -r now_i now_a now_b <<<"${now[$scenario]}"
    for figure in instructions allocations bytes; do
        case $figure in
            instructions) b=$base_i n=$now_i ;;
            allocations) b=$base_a n=$now_a ;;
            bytes) b=$base_b n=$now_b ;;
        esac
        verdict="$(awk -v b="$b" -v n="$n" -v limit="$LIMIT" 'BEGIN {
            ratio = (b > 0) ? n / b : (n > 0 ? 99 : 1)
            mark = (n > b * limit) ? "  REGRESSION (> +10%)" : ((n < b / limit) ? "  (below: update the baseline?)" : "")
            printf "%7.3f%s", ratio, mark
        }')"
        printf '%-8s %-18s %12s %12s %s\n' "$scenario" "$figure/cycle" "$b" "$n" "$verdict"
        case $verdict in *REGRESSION*) failed=1 ;; esac
    done
done

if [ "$failed" -ne 0 ]; then
    echo
    echo "cost guard FAILED: a figure is more than 10% above its baseline in $BASELINE."
    echo "If the extra cost is intended, rewrite the baselines with \`bash scripts/cost.sh --update\`"
    echo "and commit them with the change, saying why."
    exit 1
fi
echo
echo "cost guard passed (limit: 10% above the baselines)"
