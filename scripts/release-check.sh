#!/usr/bin/env bash
# The long checks a release must pass, beyond what CI runs on every change
# (see RELIABILITY.md, "Before a release"):
#
# - the linearizability model of every primitive (lock-chaos/tests/model_concurrent.rs)
#   with MODEL_CONCURRENT_CASES plans per primitive on memory and half as many on Redis
#   (default 2000; CI runs 40), with its server faults;
# - the chaos harness's quick list, three times in a row, with --strict (liveness bounds
#   included).
#
# Usage: bash scripts/release-check.sh   (MODEL_CONCURRENT_CASES=N to change the count)
# Takes about an hour on 2 cores. Needs what scripts/test.sh needs (it installs redis-server
# the same way when missing).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

cases="${MODEL_CONCURRENT_CASES:-2000}"
if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server not found: run scripts/test.sh once first (it installs it)" >&2
    exit 1
fi

echo "== model_concurrent: MODEL_CONCURRENT_CASES=$cases"
start=$(date +%s)
MODEL_CONCURRENT_CASES="$cases" cargo test -q -p lock-chaos --test model_concurrent
echo "model_concurrent: passed in $(( $(date +%s) - start )) s"

cargo build -q --release -p lock-chaos
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
bin="$(mktemp -d)/lock-chaos"
# A run executes its own binary for each worker: a copy, so that a rebuild cannot break it.
cp "$target_dir/release/lock-chaos" "$bin"
for round in 1 2 3; do
    echo "== chaos quick run $round of 3 (--strict)"
    start=$(date +%s)
    "$bin" run --quick --strict
    echo "chaos quick run $round: passed in $(( $(date +%s) - start )) s"
done
echo "release checks passed"
