#!/usr/bin/env bash
# --strategy dataparallel from the command line, on CPU replicas: the same checkpoint as the all-reduce's,
# a checkpoint of either resumed under the other, --explain telling DataParallel's step, and the refusals
# (several processes, and the options that belong to the all-reduce's step).
#   test_strategy.sh MNIST_DP DATA_DIR
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
train() {
  "$bin" train --data "$data" --device cpu --no-progress --log-interval 100000 --replicas 3 --momentum 0.9 "$@"
}

# 1. The same parameters, to the bit, after 120 steps.
train --max-steps 120 --save "$work/allreduce.st" >"$work/allreduce.log" 2>&1
train --max-steps 120 --strategy dataparallel --save "$work/dp.st" >"$work/dp.log" 2>&1
check "dataparallel trains" grep -q "^finished: " "$work/dp.log"
check "dataparallel says what runs" grep -q "strategy: nn.DataParallel's, device 0 steps alone" "$work/dp.log"
check "dataparallel's checkpoint equals the all-reduce's to the bit" cmp -s "$work/allreduce.st" "$work/dp.st"

# 2. Either resumes under the other.
train --max-steps 50 --strategy dataparallel --save "$work/a.st" >/dev/null 2>&1
train --max-steps 120 --resume "$work/a.st" --save "$work/a.st" >/dev/null 2>&1
check "a dataparallel checkpoint resumed under allreduce ends where allreduce alone does" \
  cmp -s "$work/allreduce.st" "$work/a.st"
train --max-steps 50 --save "$work/b.st" >/dev/null 2>&1
train --max-steps 120 --strategy dataparallel --resume "$work/b.st" --save "$work/b.st" >/dev/null 2>&1
check "an allreduce checkpoint resumed under dataparallel ends there too" cmp -s "$work/allreduce.st" "$work/b.st"

# 3. --explain tells DataParallel's step.
train --max-steps 1 --strategy dataparallel --explain >"$work/explain.log" 2>&1
check "--explain: replicate" grep -q "^0. Replicate. " "$work/explain.log"
check "--explain: the loss on device 0" grep -q "^6. Loss, on device 0 alone" "$work/explain.log"
check "--explain: the reduction" grep -q "^8. Reduce. " "$work/explain.log"

# 4. --trace draws DataParallel's phases, and device 0's copies in a row of their own.
train --max-steps 4 --strategy dataparallel --trace "$work/dp.trace.json" --trace-steps 3 >/dev/null 2>&1
check "--trace: the trip through device 0 on the replicas' rows" grep -q "to device 0 and back" "$work/dp.trace.json"
check "--trace: device 0's copies in a row of their own" grep -q "device 0's copies (nn.DataParallel)" "$work/dp.trace.json"
check "--trace: the reduction onto device 0" grep -q "reduce gradients" "$work/dp.trace.json"

# 5. Refusals, each in one sentence, exit 2.
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 timeout 60 \
  "$bin" train --data "$data" --device cpu --strategy dataparallel --max-steps 1 >/dev/null 2>"$work/ranks.err"
rc=$?
check "several processes: refused with exit 2 (got $rc)" test "$rc" -eq 2
check "several processes: the refusal says why" grep -q "dataparallel is nn.DataParallel's, which runs in one process" "$work/ranks.err"
train --max-steps 1 --strategy dataparallel --check-replicas 1 >/dev/null 2>"$work/check.err"
rc=$?
check "--check-replicas with dataparallel: exit 2 (got $rc)" test "$rc" -eq 2
check "--check-replicas with dataparallel: said why" grep -q "only device 0 keeps parameters" "$work/check.err"
train --max-steps 1 --strategy dataparallel --cuda-graphs >/dev/null 2>"$work/graphs.err"
check "--cuda-graphs with dataparallel: refused by name" grep -q "^.*--cuda-graphs is a fast path of the all-reduce's step" "$work/graphs.err"
train --max-steps 1 --strategy ring >/dev/null 2>"$work/ring.err"
rc=$?
check "an unknown strategy: exit 2 (got $rc)" test "$rc" -eq 2

finish_checks
