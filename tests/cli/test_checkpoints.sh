#!/usr/bin/env bash
# Nothing lost: resuming gives the parameters of the uninterrupted run to the bit, SIGINT saves and exits
# non-zero, a diverging run stops with the step named and leaves the last checkpoint alone; and options that
# do not apply change nothing.
#   test_checkpoints.sh MNIST_DP DATA_DIR
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
train() { "$bin" train --data "$data" --device cpu --no-progress --log-interval 100000 "$@"; }

# 1. Resumed after an epoch: the same file as the run that never stopped.
train --epochs 2 --save "$work/straight.st" >"$work/straight.log" 2>&1
train --epochs 1 --save "$work/resumed.st" >/dev/null 2>&1
train --epochs 2 --resume "$work/resumed.st" --save "$work/resumed.st" >"$work/resumed.log" 2>&1
check "resumed after epoch 1 equals the uninterrupted run to the bit" cmp -s "$work/straight.st" "$work/resumed.st"

# 2. Resumed in the middle of an epoch (as after SIGINT), with momentum: the same file again.
train --epochs 1 --momentum 0.9 --save "$work/whole.st" >/dev/null 2>&1
train --epochs 1 --momentum 0.9 --max-steps 300 --save "$work/part.st" >/dev/null 2>&1
train --epochs 1 --momentum 0.9 --resume "$work/part.st" --save "$work/part.st" >/dev/null 2>&1
check "resumed after step 300 (momentum 0.9) equals the uninterrupted run to the bit" \
  cmp -s "$work/whole.st" "$work/part.st"
# Resumed with no step left (--max-steps already reached): the checkpoint is saved again, unchanged.
train --epochs 1 --momentum 0.9 --max-steps 300 --save "$work/done.st" >/dev/null 2>&1
train --epochs 1 --momentum 0.9 --max-steps 300 --resume "$work/done.st" --save "$work/done-again.st" >/dev/null 2>&1
check "resumed with no step left saves the same checkpoint" cmp -s "$work/done.st" "$work/done-again.st"

# 3. SIGINT: the step finishes, a checkpoint is saved, the exit code says it was interrupted.
# Started directly, not through the train function, so that $! is mnist-dp itself and not a subshell.
"$bin" train --data "$data" --device cpu --no-progress --epochs 5 --log-interval 50 --save "$work/int.st" \
  >"$work/int.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "Step 50," "$work/int.log" && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
rc=$?
check "SIGINT exits with 130 (got $rc)" test "$rc" -eq 130
check "SIGINT says where the checkpoint is" grep -q "stopped by SIGINT after epoch .*checkpoint saved to $work/int.st" "$work/int.log"
check "the checkpoint saved on SIGINT loads" "$bin" eval --checkpoint "$work/int.st" --data "$data" --device cpu

# 4. Divergence: stops with the step named, exit 1, and the last checkpoint is left as it was.
cp "$work/whole.st" "$work/good.st"
cp "$work/whole.st" "$work/keep.st"
train --epochs 1 --lr 1e30 --log-interval 1 --init-from "$work/good.st" --save "$work/keep.st" >"$work/nan.log" 2>&1
rc=$?
check "a diverging run exits with 1 (got $rc)" test "$rc" -eq 1
check "a diverging run names the step" grep -q "the loss became .* at epoch 0, step" "$work/nan.log"
check "a diverging run leaves the last checkpoint intact" cmp -s "$work/good.st" "$work/keep.st"

# 5. Bad files are named.
"$bin" train --data "$data" --resume "$work/missing.st" >/dev/null 2>"$work/missing.err"
check "a missing checkpoint is named" grep -q "$work/missing.st" "$work/missing.err"
head -c 100 "$work/whole.st" >"$work/cut.st"
"$bin" eval --checkpoint "$work/cut.st" --data "$data" >/dev/null 2>"$work/cut.err"
check "a truncated checkpoint is refused with its name" grep -q "$work/cut.st" "$work/cut.err"

# 6. The CUDA-only options on the CPU: the same run, and a note that names them.
train --epochs 1 --momentum 0.9 --cuda-graphs --fused-head --fused-step --pdl --persistent --steps-per-graph 64 --gemm cublas --tf32 --save "$work/cuda_options.st" >"$work/cuda_options.log" 2>&1
check "the CUDA-only options on the CPU train as without" cmp -s "$work/whole.st" "$work/cuda_options.st"
check "the CUDA-only options on the CPU are noted" grep -q -- "GPU-only options are ignored: --gemm cublas, --tf32, --cuda-graphs, --fused-head, --fused-step, --pdl, --persistent, --steps-per-graph 64" "$work/cuda_options.log"

# 7. The activation is part of the run: recorded in the checkpoint, kept on resume, a different one refused
# naming both, and a checkpoint from before it was recorded read as relu. Short runs: 40 steps.
train --max-steps 40 --activation gelu --save "$work/gelu-straight.st" >/dev/null 2>&1
train --max-steps 20 --activation gelu --save "$work/gelu.st" >/dev/null 2>&1
check "a GELU checkpoint records its activation" grep -a -q '"mnist_dp.activation":"gelu"' "$work/gelu.st"
train --max-steps 40 --resume "$work/gelu.st" --save "$work/gelu-resumed.st" >"$work/gelu-resumed.log" 2>&1
check "resumed without --activation, a GELU run goes on with GELU, to the bit" \
  cmp -s "$work/gelu-straight.st" "$work/gelu-resumed.st"
check "the resumed run says its activation" grep -q "activation gelu" "$work/gelu-resumed.log"
train --max-steps 40 --activation relu --resume "$work/gelu.st" >/dev/null 2>"$work/gelu-relu.err"
check "resuming a GELU run with --activation relu is refused, naming both" \
  grep -q "saved with --activation gelu, but the command line gives --activation relu" "$work/gelu-relu.err"
train --max-steps 20 --save "$work/relu.st" >/dev/null 2>&1
# The same file as one written before the activation was recorded: the key blanked out of the JSON header
# (spaces of the same length keep every offset).
perl -pe 's/"mnist_dp\.activation":"relu",/" " x length($&)/e' "$work/relu.st" >"$work/old.st"
check "the blanked checkpoint has no activation key" sh -c "! grep -a -q mnist_dp.activation '$work/old.st'"
train --max-steps 40 --activation gelu --resume "$work/old.st" >/dev/null 2>"$work/old-gelu.err"
check "a checkpoint without the key reads as relu: --activation gelu is refused" \
  grep -q "saved with --activation relu, but the command line gives --activation gelu" "$work/old-gelu.err"
check "a checkpoint without the key resumes as relu" train --max-steps 21 --resume "$work/old.st"

# 8. Gradient accumulation is part of the run too: a step is --accumulate K micro-batches, so the saved step
# count means nothing under another K. Kept on resume, another K refused; the run goes on to the bit.
train --max-steps 30 --batch-size 32 --accumulate 2 --momentum 0.9 --save "$work/acc-straight.st" >/dev/null 2>&1
train --max-steps 12 --batch-size 32 --accumulate 2 --momentum 0.9 --save "$work/acc.st" >/dev/null 2>&1
check "a checkpoint records the micro-batches a step" grep -a -q '"mnist_dp.accumulate":"2"' "$work/acc.st"
train --max-steps 30 --resume "$work/acc.st" --save "$work/acc-resumed.st" >"$work/acc-resumed.log" 2>&1
check "resumed without --accumulate, an accumulating run goes on as it was, to the bit" \
  cmp -s "$work/acc-straight.st" "$work/acc-resumed.st"
check "the resumed run says its micro-batches" grep -q "batch 32 x 2 micro-batches a step (64 rows)" "$work/acc-resumed.log"
train --max-steps 30 --accumulate 3 --resume "$work/acc.st" >/dev/null 2>"$work/acc-3.err"
check "resuming with another --accumulate is refused, naming both" \
  grep -q "saved with --accumulate 2, but the command line gives --accumulate 3" "$work/acc-3.err"
perl -pe 's/"mnist_dp\.accumulate":"1",/" " x length($&)/e' "$work/relu.st" >"$work/old-acc.st"
check "the blanked checkpoint has no accumulate key" sh -c "! grep -a -q mnist_dp.accumulate '$work/old-acc.st'"
check "a checkpoint without the key resumes with one micro-batch a step" \
  sh -c "'$bin' train --data '$data' --device cpu --no-progress --max-steps 21 --resume '$work/old-acc.st' | grep 'with its settings: batch 64, ' >/dev/null"

finish_checks
