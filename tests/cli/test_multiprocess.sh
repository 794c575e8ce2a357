#!/usr/bin/env bash
# Several processes, as torchrun and srun start them (the TCP rendezvous) and as mpirun does, on the CPU:
# the same parameters as one process with as many replicas, only rank 0 speaking and writing, and every way
# for a run to fail ending every rank, non-zero, with the reason, in bounded time.
#   test_multiprocess.sh MNIST_DP CHECKPOINT_TOOL DATA_DIR [MPIRUN]
# Without MPIRUN (a build without MPI) the mpirun cases are left out and said so. Closes with 'N passed, M
# failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
tool=$2
data=$3
mpirun=${4:-}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"
is_empty() { [ ! -s "$1" ]; }


common=(train --data "$data" --device cpu --no-progress --epochs 1 --log-interval 20)

# launch NAME WORLD [RANK:extra args ...] -- ARGS...: starts WORLD ranks as torchrun would, each with its own
# log (NAME.R.out, NAME.R.err) and exit code (NAME.R.rc); returns when all have ended.
launch() {
  local name=$1 world=$2
  shift 2
  local port
  port=$(free_port)
  local pids=()
  for ((r = 0; r < world; r++)); do
    (
      RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout 300 "$bin" "$@" >"$work/$name.$r.out" 2>"$work/$name.$r.err"
      echo $? >"$work/$name.$r.rc"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
}
rc() { cat "$work/$1.rc"; }

# 1. Two and three ranks over TCP: rank 0's checkpoint is the single process's with as many replicas, to the
#    bit (the sum is taken in the same order), over 50 steps with momentum and a short last batch. The two
#    ranks are admitted by a run token; the three, without one, are told that anyone could join.
for world in 2 3; do
  "$bin" "${common[@]}" --batch-size 70 --momentum 0.9 --max-steps 50 --replicas $world \
    --save "$work/single$world.st" >"$work/single$world.out" 2>&1
  if [ "$world" = 2 ]; then export MNISTDP_RUN_TOKEN=this-run-s-secret-0123456789; fi
  launch tcp$world $world "${common[@]}" --batch-size 70 --momentum 0.9 --max-steps 50 --check-replicas 10 \
    --save "$work/tcp$world.st"
  unset MNISTDP_RUN_TOKEN
  check "TCP, $world ranks: every rank exits 0" \
    test "$(cat "$work"/tcp$world.*.rc | sort -u)" = 0
  check "TCP, $world ranks: the parameters of one process with $world replicas, to the bit" \
    cmp -s "$work/tcp$world.st" "$work/single$world.st"
  check "TCP, $world ranks: the same loss lines as one process" \
    diff <(grep Loss "$work/single$world.out") <(grep Loss "$work/tcp$world.0.out")
  check "TCP, $world ranks: only rank 0 prints" is_empty "$work/tcp$world.1.out"
  check "TCP, $world ranks: rank 0 tells how the processes meet" \
    contains "$work/tcp$world.0.out" "processes: $world started by torchrun; TCP through rank 0"
done
check "TCP, a run token: no word of an open rendezvous" sh -c '! grep -qF "can join this run" "$0"' "$work/tcp2.0.err"
check "TCP, no run token: rank 0 says anyone who reaches the port can join" \
  contains "$work/tcp3.0.err" "no run token (MNISTDP_RUN_TOKEN): any process that can reach port"

# 1a. Two ranks of two CPU replicas each: four replicas, numbered across the processes. The sum is
#     (x0 + x1) + (x2 + x3) here and ((x0 + x1) + x2) + x3 in one process, so within rtol 1e-5 rather than
#     to the bit.
"$bin" "${common[@]}" --batch-size 70 --momentum 0.9 --max-steps 50 --replicas 4 \
  --save "$work/single4.st" >/dev/null 2>&1
launch mixed 2 "${common[@]}" --batch-size 70 --momentum 0.9 --max-steps 50 --replicas 2 --check-replicas 10 \
  --save "$work/mixed.st"
check "TCP, 2 ranks x 2 replicas: every rank exits 0" test "$(cat "$work"/mixed.*.rc | sort -u)" = 0
check "TCP, 2 ranks x 2 replicas: the parameters of one process with 4 replicas (rtol 1e-5)" \
  sh -c '"$0" compare "$1" "$2" 1e-5 >"$3"' "$tool" "$work/mixed.st" "$work/single4.st" "$work/mixed.compare"
check "TCP, 2 ranks x 2 replicas: rank 0 lists replicas 2-3 on rank 1" contains "$work/mixed.0.out" "2-3  rank 1, 2 replicas each"

# 1b. torchrun itself (Debian's PyTorch), with its own store on MASTER_PORT: the ranks meet beside it.
if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  port=$(free_port)
  timeout 300 /usr/bin/python3 "$(dirname "$0")/torchrun.py" --nproc_per_node 3 --master_port "$port" --no_python \
    "$bin" "${common[@]}" --batch-size 70 --momentum 0.9 --max-steps 50 --save "$work/torchrun3.st" \
    >"$work/torchrun3.out" 2>&1
  check "torchrun --nproc_per_node 3: exit 0" test $? = 0
  check "torchrun --nproc_per_node 3: the parameters of one process with 3 replicas, to the bit" \
    cmp -s "$work/torchrun3.st" "$work/single3.st"
  check "torchrun: the ranks meet on the port after torchrun's store" \
    contains "$work/torchrun3.out" "processes: 3 started by torchrun; TCP through rank 0 at 127.0.0.1:$((port + 1))"
else
  echo "note: no PyTorch for /usr/bin/python3 (scripts/setup.sh --peers installs it): torchrun itself was not run"
fi

# 1d. The torchrun recipe of docs/multi-node.md, word for word (but for the port, the program's path and the
#     run's length), with the machine's own torchrun.
if command -v torchrun >/dev/null && /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  recipe=$(sed -n '/^    torchrun /,/[^\\]$/p' "$(dirname "$0")/../../docs/multi-node.md" | tr -d '\\\n')
  read -ra words <<<"$recipe"
  port=$(free_port)
  for i in "${!words[@]}"; do
    case ${words[$i]} in
      mnist-dp) words[$i]=$bin ;;
      29500) words[$i]=$port ;;
    esac
  done
  check "the documented torchrun recipe is there (${words[*]:0:3} ...)" test "${words[0]}" = torchrun
  timeout 300 "${words[@]}" "${common[@]:1}" --max-steps 50 --save "$work/recipe.st" >"$work/recipe.out" 2>&1
  check "the documented torchrun recipe: exit 0" test $? = 0 || tail -n 5 "$work/recipe.out"
  check "the documented torchrun recipe: two processes" contains "$work/recipe.out" "processes: 2 started by torchrun"
  "$bin" "${common[@]}" --replicas 2 --max-steps 50 --save "$work/recipe-single.st" >/dev/null 2>&1
  check "the documented torchrun recipe: the parameters of one process with 2 replicas, to the bit" \
    cmp -s "$work/recipe.st" "$work/recipe-single.st"
else
  echo "note: no torchrun on this machine (scripts/setup-python.sh installs it): the documented recipe was not run"
fi

# 1c. Resuming: rank 0 alone reads the checkpoint (rank 1 is given a path that does not exist) and hands the
#     parameters, momentum, step and seed to the others; the result is the uninterrupted run's, to the bit.
"$bin" "${common[@]}" --momentum 0.9 --max-steps 60 --replicas 2 --save "$work/straight2.st" >/dev/null 2>&1
launch first 2 "${common[@]}" --momentum 0.9 --max-steps 30 --save "$work/resumed.st"
port=$(free_port)
for r in 0 1; do
  ck=$work/resumed.st
  [ $r = 1 ] && ck=$work/not-on-this-node/resumed.st
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 \
    "$bin" "${common[@]}" --momentum 0.9 --max-steps 60 --resume "$ck" --save "$work/resumed.st" \
    >"$work/resume.$r.out" 2>"$work/resume.$r.err" &
done
wait
check "resumed on 2 ranks, the checkpoint read by rank 0 only: the uninterrupted run's parameters, to the bit" \
  cmp -s "$work/resumed.st" "$work/straight2.st" || tail -n 3 "$work"/resume.*.err

# 2. A rank that fails (here: data it cannot read) ends every rank with its message, at once.
# The bad path is given to rank 2 only.
start=$(date +%s)
port=$(free_port)
for r in 0 1 2; do
  d=$data
  [ $r = 2 ] && d=$work/no-such-dir
  (
    RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
      "$bin" train --data "$d" --device cpu --no-progress --epochs 1 --timeout 60 >"$work/fail.$r.out" 2>"$work/fail.$r.err"
    echo $? >"$work/fail.$r.rc"
  ) &
done
wait
elapsed=$(($(date +%s) - start))
check "a failing rank: every rank exits 1" test "$(cat "$work"/fail.*.rc | sort -u)" = 1
check "a failing rank: it says why, with its rank" contains "$work/fail.2.err" "[rank 2] mnist-dp: data error:"
check "a failing rank: rank 0 repeats its message" contains "$work/fail.0.err" "mnist-dp: error: rank 2 failed: data error:"
check "a failing rank: rank 1 repeats it too" contains "$work/fail.1.err" "[rank 1] mnist-dp: error: rank 2 failed: data error:"
check "a failing rank: long before the 60 s timeout (took ${elapsed} s)" test "$elapsed" -lt 45

# 3. A rank killed in the middle of training: the others end at once, naming it.
port=$(free_port)
# Started directly, not under timeout(1), so that $! is mnist-dp itself (timeout would not pass SIGKILL on).
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" "${common[@]}" --epochs 50 --timeout 60 >"$work/kill.$r.out" 2>"$work/kill.$r.err" &
  eval "pid$r=$!"
done
for _ in $(seq 100); do contains "$work/kill.0.out" "Epoch 0, Step 20" && break; sleep 0.2; done
start=$(date +%s)
kill -KILL "$pid1"
wait "$pid0"; rc0=$?
wait "$pid2"; rc2=$?
elapsed=$(($(date +%s) - start))
check "a killed rank: rank 0 exits 1 (got $rc0)" test "$rc0" = 1
check "a killed rank: rank 2 exits 1 (got $rc2)" test "$rc2" = 1
check "a killed rank: rank 0 names it" contains "$work/kill.0.err" "rank 1 vanished"
check "a killed rank: rank 2 hears it from rank 0" contains "$work/kill.2.err" "[rank 2] mnist-dp: error: rank 1 vanished"
check "a killed rank: within seconds (took ${elapsed} s)" test "$elapsed" -lt 30

# 4. Refusals at the start: a WORLD_SIZE that differs, settings that differ, a rank that never comes.
port=$(free_port)
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --timeout 3 >/dev/null 2>"$work/ws.0.err" &
RANK=1 WORLD_SIZE=3 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --timeout 3 >/dev/null 2>"$work/ws.1.err" &
wait
check "a WORLD_SIZE that differs: rank 0 drops the connection, with its address and why" \
  contains "$work/ws.0.err" "dropped a connection from 127.0.0.1:"
check "a WORLD_SIZE that differs: rank 0 names it" \
  contains "$work/ws.0.err" "it was started with a world of 3 processes, rank 0 with 2"
check "a WORLD_SIZE that differs: rank 0 then names the rank that never joined" \
  contains "$work/ws.0.err" "rank 1 of a world of 2 had not joined"
check "a WORLD_SIZE that differs: rank 1 is told why" \
  contains "$work/ws.1.err" "[rank 1] mnist-dp: error: TCP rendezvous at 127.0.0.1:$port: rank 0 refused this process (rank 1): it was started with a world of 3"

port=$(free_port)
MNISTDP_RUN_TOKEN=the-run-s-own-secret-0123 RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$port timeout 120 "$bin" "${common[@]}" --timeout 3 >/dev/null 2>"$work/token.0.err" &
MNISTDP_RUN_TOKEN=another-run-s-secret-0123 RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$port timeout 120 "$bin" "${common[@]}" --timeout 3 >/dev/null 2>"$work/token.1.err" &
wait
check "a run token that differs: rank 1 is refused" \
  contains "$work/token.1.err" "rank 0 refused this process (rank 1): its run token is not rank 0's"
check "a run token that differs: rank 0 drops it and goes on waiting" \
  contains "$work/token.0.err" "rank 1 of a world of 2 had not joined"

port=$(free_port)
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --lr 0.01 >/dev/null 2>"$work/lr.0.err" &
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --lr 0.1 >/dev/null 2>"$work/lr.1.err" &
wait
check "settings that differ: the rank that differs names the setting" \
  contains "$work/lr.1.err" "rank 1 and rank 0 differ in --lr: rank 1 has 0.1, rank 0 has 0.01;"
check "settings that differ: rank 0 names the setting too" \
  contains "$work/lr.0.err" "rank 1 and rank 0 differ in --lr: rank 1 has 0.1, rank 0 has 0.01;"

# Files that only rank 0 reads or writes, given to some ranks only: refused, nothing written.
port=$(free_port)
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --save "$work/r.st" >/dev/null 2>"$work/files.0.err" &
pid0=$!
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --resume "$work/r.st" --save "$work/r.st" >/dev/null 2>"$work/files.1.err" &
pid1=$!
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
check "--resume on rank 1 alone: both ranks exit 1 (got $rc0 and $rc1)" test "$rc0:$rc1" = 1:1
check "--resume on rank 1 alone: named, with both values" \
  contains "$work/files.1.err" "rank 1 and rank 0 differ in --resume: rank 1 has a file, rank 0 has none"
check "--resume on rank 1 alone: rank 0 names it too" \
  contains "$work/files.0.err" "rank 1 and rank 0 differ in --resume: rank 1 has a file, rank 0 has none"
check "--resume on rank 1 alone: rank 0 writes nothing" test ! -e "$work/r.st"

# A rank 0 that cannot write its --save (found before the first step): every rank stops with its message, which
# says "error" once.
port=$(free_port)
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --save /proc/x >/dev/null 2>"$work/save.0.err" &
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" >/dev/null 2>"$work/save.1.err" &
wait
check "an unwritable --save on rank 0: refused there" contains "$work/save.0.err" "mnist-dp: error: --save /proc/x:"
check "an unwritable --save on rank 0: rank 1 says why, with 'error' once" \
  contains "$work/save.1.err" "[rank 1] mnist-dp: error: rank 0 failed: --save /proc/x:"

port=$(free_port)
start=$(date +%s)
RANK=0 WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --timeout 2 >/dev/null 2>"$work/missing.0.err" &
RANK=1 WORLD_SIZE=3 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 \
  "$bin" "${common[@]}" --timeout 2 >/dev/null 2>"$work/missing.1.err" &
wait
elapsed=$(($(date +%s) - start))
check "a rank that never comes: named after the timeout" \
  contains "$work/missing.0.err" "after 2 s, rank 2 of a world of 3 had not joined"
check "a rank that never comes: the rank that came is told" contains "$work/missing.1.err" "rank 2 of a world of 3"
check "a rank that never comes: bounded (took ${elapsed} s)" test "$elapsed" -lt 20

RANK=1 WORLD_SIZE=2 "$bin" "${common[@]}" >/dev/null 2>"$work/env.err"
check "a missing variable: exit 2 (usage)" test $? = 2
check "a missing variable: named" contains "$work/env.err" "LOCAL_RANK is not set, but the other variables of a torchrun launch are"

# 5. SIGINT to every rank (as torchrun passes it on): all stop after the same step; rank 0 saves.
port=$(free_port)
# Directly, not under timeout(1): timeout passes a signal on to its command and then to its own process group,
# which holds the command too, so the command would see SIGINT twice, and a second SIGINT means "stop now".
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" "${common[@]}" --epochs 50 --save "$work/int.st" >"$work/int.$r.out" 2>"$work/int.$r.err" &
  eval "pid$r=$!"
done
for _ in $(seq 100); do contains "$work/int.0.out" "Epoch 0, Step 20" && break; sleep 0.2; done
kill -INT "$pid0" "$pid1"
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
check "SIGINT: both ranks exit 130 (got $rc0 and $rc1)" test "$rc0:$rc1" = 130:130 ||
  tail -n 5 "$work"/int.*.err
check "SIGINT: rank 0 saved a checkpoint" contains "$work/int.0.err" "checkpoint saved to $work/int.st"
check "SIGINT: the checkpoint loads" "$tool" dump "$work/int.st" >/dev/null

# 6. mpirun, two and three processes: the single process's parameters, within rtol 1e-5 (MPI does not
#    promise the order of its sum).
if [ -n "$mpirun" ]; then
  mpi=("$mpirun" --allow-run-as-root --oversubscribe)
  for world in 2 3; do
    timeout 300 "${mpi[@]}" -np $world "$bin" "${common[@]}" --batch-size 70 --momentum 0.9 --max-steps 50 \
      --check-replicas 10 --save "$work/mpi$world.st" >"$work/mpi$world.out" 2>&1
    check "mpirun -np $world: exit 0" test $? = 0
    check "mpirun -np $world: the parameters of one process with $world replicas (rtol 1e-5)" \
      sh -c '"$0" compare "$1" "$2" 1e-5 >"$3"' "$tool" "$work/mpi$world.st" "$work/single$world.st" "$work/mpi$world.compare"
    check "mpirun -np $world: rank 0 tells how the processes meet" \
      contains "$work/mpi$world.out" "processes: $world started by mpirun; MPI (Open MPI"
  done
  # Rank 1 alone gets a path that does not exist (mpirun's "A : B" form starts a different command line per
  # group of ranks).
  timeout 300 "${mpi[@]}" -np 1 "$bin" "${common[@]}" : -np 1 "$bin" "${common[@]}" --data "$work/no-such-dir" \
    >"$work/mpifail.out" 2>&1
  check "mpirun, a failing rank: mpirun exits non-zero" test $? -ne 0
  check "mpirun, a failing rank: its message, with its rank" \
    contains "$work/mpifail.out" "[rank 1] mnist-dp: data error:"
else
  echo "note: no mpirun given (a build without MPI): the mpirun cases were not run"
fi

finish_checks
