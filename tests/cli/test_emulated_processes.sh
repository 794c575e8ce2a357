#!/usr/bin/env bash
# Several processes on emulated devices (docs/emulation.md, "NCCL across processes"): `--device cuda` under
# mpirun and under torchrun's variables (the TCP rendezvous), each process seeing two emulated devices and
# taking the one of its local rank, the ranks all-reducing through the emulated NCCL's shared memory. Rank
# 0's checkpoint is the one of one process training on two emulated devices, to the bit (two ranks: each
# element's sum is one addition, whichever rank the ring starts it at). A rank whose NCCL fails ends every
# rank, non-zero, with NCCL's error, in bounded time.
#   test_emulated_processes.sh MNIST_DP DATA_DIR [MPIRUN]
# Without MPIRUN (a build without MPI) the mpirun case is left out and said so. Closes with 'N passed, M
# failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
data=$2
mpirun=${3:-}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
# What the emulated NCCL leaves in /dev/shm: nothing, once every rank has joined.
rendezvous() { find /dev/shm -maxdepth 1 -name 'mnistdp-emu-nccl-*' -newer "$work/start" 2>/dev/null | wc -l; }
touch "$work/start"

export MNISTDP_EMU_DEVICES=2
common=(train --data "$data" --device cuda --no-progress --epochs 1 --batch-size 70 --momentum 0.9
  --max-steps 20 --log-interval 10)

# launch NAME ARGS...: two ranks as torchrun starts them, each with its log and exit code. Rank 1's emulated
# device 0 fails every call that touches it (MNISTDP_EMU_FAILING_DEVICE): it must use device 1 alone.
launch() {
  local name=$1
  shift
  local port
  port=$(free_port)
  for r in 0 1; do
    (
      failing=
      [ $r = 1 ] && failing=0
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MNISTDP_EMU_FAILING_DEVICE=$failing \
        timeout 120 "$bin" "$@" >"$work/$name.$r.out" 2>"$work/$name.$r.err"
      echo $? >"$work/$name.$r.rc"
    ) &
  done
  wait
}

"$bin" "${common[@]}" --save "$work/single.st" >"$work/single.out" 2>&1
check "one process, two emulated devices: exit 0" test $? = 0 || tail -5 "$work/single.out"
check "one process, two emulated devices: NCCL over both" contains "$work/single.out" "all-reduce: NCCL"

# 1. torchrun's variables: rank r on emulated device r of its own process.
launch tcp "${common[@]}" --save "$work/tcp.st"
check "TCP, 2 ranks on emulated devices: every rank exits 0" test "$(cat "$work"/tcp.*.rc | sort -u)" = 0 ||
  tail -5 "$work"/tcp.*.err
check "TCP, 2 ranks: rank 0 on emulated device 0 of its process" \
  grep -q "^device: rank 0 of 2 (local rank 0): cuda:0 emulated" "$work/tcp.0.out"
check "TCP, 2 ranks: through the emulated NCCL's rank communicator" \
  contains "$work/tcp.0.out" "all-reduce: NCCL 2.28.0 (emulated) all-reduce, rank 0 of 2"
check "TCP, 2 ranks: the parameters of one process with two emulated devices, to the bit" \
  cmp -s "$work/tcp.st" "$work/single.st"
check "TCP, 2 ranks: the same loss lines as one process" \
  diff <(grep Loss "$work/single.out") <(grep Loss "$work/tcp.0.out")

# 2. mpirun.
if [ -n "$mpirun" ]; then
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np 2 -x MNISTDP_EMU_DEVICES "$bin" "${common[@]}" \
    --save "$work/mpi.st" >"$work/mpi.out" 2>&1
  check "mpirun -np 2 on emulated devices: exit 0" test $? = 0 || tail -5 "$work/mpi.out"
  check "mpirun -np 2: through the emulated NCCL's rank communicator" \
    contains "$work/mpi.out" "all-reduce: NCCL 2.28.0 (emulated) all-reduce, rank 0 of 2"
  check "mpirun -np 2: the parameters of one process with two emulated devices, to the bit" \
    cmp -s "$work/mpi.st" "$work/single.st"
else
  echo "note: no mpirun given (a build without MPI): the mpirun case was not run"
fi

# 3. Rank 1's third all-reduce fails (planted, MNISTDP_EMU_NCCL_FAIL): rank 1 reports NCCL's error and
#    aborts; rank 0, waiting for rank 1 in the all-reduce, is told by its NCCL or its process group. Both end,
#    non-zero, well before --timeout.
start=$(date +%s)
port=$(free_port)
for r in 0 1; do
  plant=
  [ $r = 1 ] && plant=ncclAllReduce:3:ncclRemoteError
  (
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MNISTDP_EMU_NCCL_FAIL=$plant \
      timeout 120 "$bin" "${common[@]}" --timeout 60 >"$work/fail.$r.out" 2>"$work/fail.$r.err"
    echo $? >"$work/fail.$r.rc"
  ) &
done
wait
elapsed=$(($(date +%s) - start))
check "a rank's NCCL fails: every rank exits 1" test "$(cat "$work"/fail.*.rc | sort -u)" = 1 ||
  tail -3 "$work"/fail.*.err
check "a rank's NCCL fails: rank 1 names NCCL's error" \
  contains "$work/fail.1.err" "ncclAllReduce #3 on rank 1 ended with ncclRemoteError"
check "a rank's NCCL fails: every rank ends within 30 s, not at --timeout 60 ($elapsed s)" test "$elapsed" -lt 30

check "nothing left in /dev/shm" test "$(rendezvous)" = 0
finish_checks
