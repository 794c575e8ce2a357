#!/usr/bin/env bash
# Nothing a user types loses their work or silently changes their run: two options naming one file are
# refused, an output that cannot be written is found before the first step, a resumed run keeps the settings
# it was saved with, a closed output or terminal stops the run as SIGTERM does, a divergence is named at its
# step; and the messages of all of these say what happened in the run's own numbers.
#   test_nothing_lost.sh MNIST_DP DATA_DIR
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
train() { "$bin" train --data "$data" --device cpu --no-progress --log-interval 100000 "$@"; }
lacks() { ! grep -qF -- "$2" "$1"; }
loads() { "$bin" eval --checkpoint "$1" --data "$data" --device cpu >/dev/null 2>&1; }

train --epochs 1 --max-steps 20 --save "$work/a.st" >/dev/null 2>&1
cp "$work/a.st" "$work/a.orig"

# 1. Two options that name one file (as files: another spelling or a link counts) are refused at the start,
#    and the file is left as it was.
ln -s a.st "$work/link.st"
same_file() {  # same_file NAME ARGS...: refused with exit 2, both options named, a.st unchanged
  local name=$1
  shift
  train --epochs 1 --max-steps 5 "$@" >"$work/same.out" 2>"$work/same.err"
  local rc=$?
  check "$name: refused with exit 2 (got $rc)" test "$rc" -eq 2 || cat "$work/same.err"
  check "$name: both options named" grep -q -- "--.* and --.* name the same file" "$work/same.err"
  check "$name: the file is left as it was" cmp -s "$work/a.st" "$work/a.orig"
  cp "$work/a.orig" "$work/a.st"
}
same_file "--resume a.st --metrics a.st" --resume "$work/a.st" --metrics "$work/a.st"
same_file "--trace x --save ./x" --save "$work/a.st" --trace "$work/./a.st"
same_file "--init-from x --metrics (a link to x)" --init-from "$work/a.st" --metrics "$work/link.st"
same_file "--metrics x --save x" --metrics "$work/a.st" --save "$work/a.st"
same_file "--init-from x --save x" --init-from "$work/a.st" --save "$work/a.st"

# 2. A resumed run takes the settings saved in the checkpoint, and refuses a given one that differs, naming
#    both values; the result is the uninterrupted run's to the bit.
sgd=(--lr 0.05 --momentum 0.9 --weight-decay 0.001 --seed 7)
train --epochs 1 --max-steps 200 "${sgd[@]}" --save "$work/straight.st" >/dev/null 2>&1
train --epochs 1 --max-steps 100 "${sgd[@]}" --batch-size 64 --save "$work/part.st" >/dev/null 2>&1
cp "$work/part.st" "$work/part.orig"
train --epochs 1 --max-steps 200 --resume "$work/part.st" --save "$work/part.st" >"$work/resume.out" 2>&1
check "resumed with the README's command: the uninterrupted run's file, to the bit" \
  cmp -s "$work/straight.st" "$work/part.st"
check "resumed: the saved settings are stated" contains "$work/resume.out" "lr 0.05, momentum 0.9"
refused() {  # refused NAME SAVED GIVEN ARGS...
  local name=$1 saved=$2 given=$3
  shift 3
  train --epochs 1 --max-steps 200 --resume "$work/part.orig" "$@" >/dev/null 2>"$work/refused.err"
  local rc=$?
  check "resumed with another $name: refused with exit 2 (got $rc)" test "$rc" -eq 2
  check "resumed with another $name: both values named" \
    grep -qF -- "saved with $saved, but the command line gives $given" "$work/refused.err" ||
    cat "$work/refused.err"
}
refused --lr "--lr 0.05" "--lr 0.01" --lr 0.01
refused --momentum "--momentum 0.9" "--momentum 0" --momentum 0
refused --seed "--seed 7" "--seed 0" --seed 0
refused --batch-size "--batch-size 64" "--batch-size 32" --batch-size 32
train --epochs 1 --max-steps 200 --resume "$work/part.orig" --lr 0.05 --seed 7 --save "$work/same-values.st" \
  >/dev/null 2>&1
check "resumed with the saved values given: accepted, the same file" \
  cmp -s "$work/straight.st" "$work/same-values.st"

# 3. Outputs that cannot be written are refused before the first step.
unwritable() {  # unwritable OPTION PATH WHAT
  local option=$1 path=$2 what=$3
  train --epochs 1 --log-interval 1 "$option" "$path" >"$work/path.out" 2>"$work/path.err"
  local rc=$?
  check "$option $what: refused (exit $rc)" test "$rc" -ne 0
  check "$option $what: before the first step" lacks "$work/path.out" "Step 0"
  check "$option $what: named" contains "$work/path.err" "$option"
}
mkdir "$work/folder"
for option in --save --trace --metrics; do
  unwritable "$option" "$work/folder" "a folder"
  unwritable "$option" "$work/missing/x" "in a missing folder"
  unwritable "$option" /proc/x "/proc/x"
  unwritable "$option" "" "an empty path"
done
if [ "$(id -u)" -ne 0 ]; then  # root writes into read-only folders
  mkdir "$work/readonly" && chmod 555 "$work/readonly"
  unwritable --save "$work/readonly/x.st" "in a read-only folder"
fi
check "no probe file is left behind" test -z "$(find "$work" -name '*.probe-*')"

# 4. A closed standard output (SIGPIPE) or terminal (SIGHUP) stops the run as SIGTERM does: the step finishes,
#    the checkpoint is saved, the exit code says why.
"$bin" train --data "$data" --device cpu --no-progress --log-interval 1 --save "$work/pipe.st" \
  2>"$work/pipe.err" | head -n 12 >/dev/null
rc=${PIPESTATUS[0]}
check "SIGPIPE: exit 141 (got $rc)" test "$rc" -eq 141
check "SIGPIPE: said on standard error" contains "$work/pipe.err" "stopped by SIGPIPE (standard output was closed)"
check "SIGPIPE: the checkpoint is saved and loads" loads "$work/pipe.st"
# Started directly, not through the train function, so that $! is mnist-dp itself and not a subshell.
"$bin" train --data "$data" --device cpu --no-progress --epochs 50 --log-interval 20 --save "$work/hup.st" \
  >"$work/hup.out" 2>"$work/hup.err" &
pid=$!
for _ in $(seq 300); do contains "$work/hup.out" "Step 20," && break; sleep 0.1; done
kill -HUP "$pid"
wait "$pid"
rc=$?
check "SIGHUP: exit 129 (got $rc)" test "$rc" -eq 129
check "SIGHUP: said, with the checkpoint" contains "$work/hup.err" "stopped by SIGHUP (the terminal was closed)"
check "SIGHUP: the checkpoint is saved and loads" loads "$work/hup.st"
# SIGINT's message numbers the last step as the loss lines do, and counts the steps apart.
"$bin" train --data "$data" --device cpu --no-progress --epochs 50 --log-interval 20 >"$work/int.out" \
  2>"$work/int.err" &
pid=$!
for _ in $(seq 300); do contains "$work/int.out" "Step 20," && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
if [[ $(cat "$work/int.err") =~ after\ epoch\ ([0-9]+),\ step\ ([0-9]+)\ \(([0-9]+)\ steps\ in\ all\) ]]; then
  check "SIGINT: the last step numbered from 0, the steps counted from 1" \
    test "$((BASH_REMATCH[1] * 938 + BASH_REMATCH[2] + 1))" -eq "${BASH_REMATCH[3]}"
else
  check "SIGINT: says after which step it stopped" false
  cat "$work/int.err"
fi
# A second SIGINT stops at once and says which checkpoint is kept. Steps of 30000 rows take long enough for
# the second signal to arrive while the first waits for the step to end.
"$bin" train --data "$data" --device cpu --no-progress --batch-size 30000 --epochs 100 --save "$work/kill.st" \
  >"$work/kill.out" 2>"$work/kill.err" &
pid=$!
# Two minutes at most: a sanitizer build takes a while over an epoch of 30000-row steps and its evaluation.
for _ in $(seq 1200); do contains "$work/kill.out" "Epoch 0 done" && break; sleep 0.1; done
kill -INT "$pid"
sleep 0.05
kill -INT "$pid"
wait "$pid"
rc=$?
check "a second SIGINT: exit 130 (got $rc)" test "$rc" -eq 130
# The last checkpoint is epoch 0's (2 steps) when the second signal comes while the first waits for its step;
# on a fast host that step and its save may be done first (3 steps), and the message must then say so.
kept=2
if [[ $(cat "$work/kill.err") =~ stopped\ by\ SIGINT\ after\ epoch\ [0-9]+,\ step\ [0-9]+\ \(([0-9]+)\ steps\ in\ all\)\;\ checkpoint\ saved ]]; then
  kept=${BASH_REMATCH[1]}
fi
check "a second SIGINT: says the last checkpoint is kept, and where" \
  contains "$work/kill.err" "the last checkpoint, after $kept steps, is kept in $work/kill.st" || cat "$work/kill.err"
check "a second SIGINT: that checkpoint loads" loads "$work/kill.st"

# 5. Divergence is found at the step it happens, whatever the log interval, and recorded in the metrics.
train --epochs 1 --lr 100 --log-interval 1 >"$work/nan1.out" 2>"$work/nan1.err"
first=$(sed -n 's/.*the loss became [-a-z]* at epoch 0, step \([0-9]*\).*/\1/p' "$work/nan1.err")
check "diverging: a step named (got '$first')" test -n "$first"
train --epochs 1 --lr 100 --log-interval 1000 --metrics "$work/nan.jsonl" >/dev/null 2>"$work/nan1000.err"
check "diverging with --log-interval 1000: the same first step" \
  contains "$work/nan1000.err" "at epoch 0, step $first (the first step whose loss is not finite)"
check "diverging: a metrics record of the step" contains "$work/nan.jsonl" "\"event\":\"diverged\",\"loss\":\"nan\",\"step\":$first"

# 9. GPU-only options are named when the run is on the CPU, only those given.
train --epochs 1 --max-steps 5 --devices 0 --gemm cublas >"$work/gpu.out" 2>&1
check "GPU-only options on the CPU: named on one line" \
  contains "$work/gpu.out" "GPU-only options are ignored: --devices 0, --gemm cublas"
check "GPU-only options on the CPU: only those given" lacks "$work/gpu.out" "--fused-head"

# 10. The run's own numbers, in its own words.
train --epochs 5 --max-steps 5 --trace "$work/t.json" --metrics "$work/m.jsonl" >"$work/short.out" 2>&1
check "after --max-steps: the steps run, not '1 epoch'" contains "$work/short.out" "finished: 5 steps (--max-steps 5"
check "the trace's title: the steps traced" contains "$work/short.out" "timeline of 5 steps (epoch 0, steps 0 to 4)"
check "the metrics: lr as given" contains "$work/m.jsonl" '"lr":0.01,'
check "one CPU replica: the device line names it and the instruction set of its products" \
  grep -q "^device: cpu: 1 replica, 1 thread, matrix products in .* (chosen by the CPU.s features)$" "$work/short.out"
train --epochs 1 --max-steps 150 --resume "$work/part.orig" --trace "$work/rt.json" --explain \
  >"$work/resumed.out" 2>&1
check "a resumed run's trace numbers its steps in all" grep -q '"step":100[,}]' "$work/rt.json"
check "a resumed run's trace: no step 0" test "$(grep -c '"step":0[,}]' "$work/rt.json")" -eq 0
check "--explain after --resume: the next step" contains "$work/resumed.out" "What step 100 of epoch 0 does"
check "--explain: momentum and weight decay" contains "$work/resumed.out" "momentum 0.9, dampening 0, Nesterov off, weight decay 0.001"
check "resuming: no '(1 epochs complete)'" contains "$work/resumed.out" "resuming: $work/part.orig, 100 steps done, epoch 0 up to its step 99"
train --epochs 1 --max-steps 100 --resume "$work/part.orig" >"$work/nothing.out" 2>&1
check "resumed with nothing left: said" contains "$work/nothing.out" "finished: no step left to run"
check "resumed with nothing left: no '0 steps in 0.000 s'" lacks "$work/nothing.out" "0 steps in"
"$bin" eval --checkpoint "$work/a.st" --data "$data" >"$work/eval.out" 2>&1
check "eval does not say it trains" lacks "$work/eval.out" "training on the CPU"

finish_checks
