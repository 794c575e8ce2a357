#!/usr/bin/env bash
# Divergence on the CUDA path from the command line, on emulated devices (the emu preset, docs/emulation.md):
# every step's loss is checked on the device, so a run with no log line before its first non-finite loss names
# the same step as a run that logs every step, exits 1 and writes the metrics record of that step. Here on the
# plain path and on the one that queues most (the persistent kernel, 8 steps a launch); that every other way
# of running a step (graphs, the fused head and step, programmatic launches, several steps a graph, three
# replicas on one device and three devices) names the exact step is tests/gpu/test_fast_path.cpp's to check,
# on the trainer itself ("each step's loss is checked on the device ...", "... with three replicas").
#   test_emulated_divergence.sh MNIST_DP DATA_DIR
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
export MNISTDP_EMU_DEVICES=1
train() { "$bin" train --data "$data" --device cuda --no-progress --epochs 1 --max-steps 200 "$@"; }
# The step the error message names, in the epoch ("37"), or nothing.
named_step() { sed -n 's/.*the loss became [-a-z]* at epoch 0, step \([0-9]*\) (the first step whose loss is not finite).*/\1/p' "$1"; }

# 1. lr 1e30: the second step's loss is the first that is not finite.
train --lr 1e30 --log-interval 1 >"$work/huge1.out" 2>"$work/huge1.err"
first=$(named_step "$work/huge1.err")
check "lr 1e30, a log line every step: a step named (got '$first')" test -n "$first" || cat "$work/huge1.err"
train --lr 1e30 --log-interval 1000 --metrics "$work/huge.jsonl" >"$work/huge1000.out" 2>"$work/huge1000.err"
rc=$?
check "lr 1e30, --log-interval 1000: exit 1 (got $rc)" test "$rc" -eq 1
check "lr 1e30, --log-interval 1000: the same first step" test "$(named_step "$work/huge1000.err")" = "$first" ||
  cat "$work/huge1000.err"
check "lr 1e30: a metrics record of the step" \
  grep -Eq "\"event\":\"diverged\",\"loss\":\"(nan|inf|-inf)\",\"step\":$first}" "$work/huge.jsonl"
check "lr 1e30: no loss line before it" test "$(grep -c '"event":"step"' "$work/huge.jsonl")" -eq 1

# 2. lr 50: a loss that overflows some tens of steps in, inside the persistent kernel's launches. Each way of
# running is compared with itself logging every step.
run_path() {
  local name=$1
  shift
  train --lr 50 --log-interval 1 "$@" >/dev/null 2>"$work/$name.every.err"
  local first
  first=$(named_step "$work/$name.every.err")
  check "lr 50, $name, a log line every step: a step after the first few named (got '$first')" \
    test -n "$first" -a "${first:-0}" -gt 8 || cat "$work/$name.every.err"
  train --lr 50 --log-interval 1000 --metrics "$work/$name.jsonl" "$@" >/dev/null 2>"$work/$name.err"
  check "lr 50, $name, --log-interval 1000: the same first step" \
    test "$(named_step "$work/$name.err")" = "$first" || cat "$work/$name.err"
  check "lr 50, $name: a metrics record of the step" \
    grep -Eq "\"event\":\"diverged\",\"loss\":\"(nan|inf|-inf)\",\"step\":$first}" "$work/$name.jsonl"
}
run_path plain
run_path "persistent, 8 steps a launch" --persistent --steps-per-graph 8

finish_checks
