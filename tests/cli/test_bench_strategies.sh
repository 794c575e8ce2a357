#!/usr/bin/env bash
# bench/strategies.sh end to end, in a few seconds: 3 steps, 1 round, 1 and 2 CPU replicas, no record; its
# tables have both strategies' rows with the bytes of strategy_bytes, its results.json every run, and it refuses
# bad options (and --device cuda without a GPU) before training.
#   test_bench_strategies.sh BUILD_DIR DATA_DIR
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
build=$1 data=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
script=$root/bench/strategies.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"

"$script" "$work/run" --build "$build" --data "$data" --steps 3 --rounds 1 --replicas "1 2" --record none \
  >"$work/out.txt" 2>&1
check "a short run of both strategies succeeds" test $? -eq 0 || tail -n 20 "$work/out.txt"
check "it writes README.md and results.json" test -s "$work/run/README.md" -a -s "$work/run/results.json"
check "the table has 1 replica, both strategies, no bytes" grep -q '^| 1 | [0-9.]* | [0-9.]* | [0-9.]* | 0 | 0 |$' \
  "$work/run/README.md"
check "the table has 2 replicas with each strategy's bytes" \
  grep -q '^| 2 | [0-9.]* | [0-9.]* | [0-9.]* | 1,628,248 | 1,630,832 |$' "$work/run/README.md"
for name in allreduce-1 dataparallel-1 allreduce-2 dataparallel-2; do
  check "each round's table has $name" grep -q "^| $name | " "$work/run/README.md"
done
check "results.json: four configurations of 3 steps, each with its time" python3 - "$work/run/results.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["training"]
assert [(c["strategy"], c["replicas"]) for c in t] == [("allreduce", 1), ("dataparallel", 1), ("allreduce", 2),
                                                      ("dataparallel", 2)], t
assert all(c["steps"] == 3 and c["median_us_per_step"] > 0 for c in t), t
assert r["bytes"][1]["dataparallel"]["parameters_broadcast"] == 814120, r["bytes"]
EOF
check "the DataParallel run took DataParallel's step" grep -q "^strategy: nn.DataParallel's" \
  "$work/run/runs/dataparallel-2.r1.log"
check "--record none writes no record" test ! -e "$root/bench/results/run"

"$script" "$work/bad" --build "$build" --data "$data" --steps 0 >"$work/bad.txt" 2>&1
check "--steps 0 is refused with status 2" test $? -eq 2
check "the refusal names the option" grep -q -- "--steps wants a positive whole number, not '0'" "$work/bad.txt"
"$script" "$work/bad" --build "$build" --data "$data" --replicas "1 x" >"$work/bad.txt" 2>&1
check "--replicas '1 x' is refused with status 2" test $? -eq 2
"$script" "$work/bad" --build "$build" --data "$data" --device tpu >"$work/bad.txt" 2>&1
check "--device tpu is refused with status 2" test $? -eq 2
check "nothing ran for the refusals" test ! -e "$work/bad"
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; } &&
  ! grep -q '^MNISTDP_CUDA:STRING=EMU$' "$build/CMakeCache.txt" 2>/dev/null; then
  "$script" "$work/gpu" --build "$build" --data "$data" --device cuda --steps 3 --rounds 1 --record none \
    >"$work/gpu.txt" 2>&1
  check "--device cuda without a GPU exits 77" test $? -eq 77
  check "and says there is no GPU" grep -q "no GPU here" "$work/gpu.txt"
fi
"$script" --help >"$work/help.txt" 2>&1
check "--help shows the usage" grep -q "bench/strategies.sh \[OUT_DIR\]" "$work/help.txt"
finish_checks
