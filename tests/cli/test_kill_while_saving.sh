#!/usr/bin/env bash
# A kill at any moment leaves a loadable checkpoint: a training run that saves after every epoch is killed
# with SIGKILL again and again, at random moments and in the middle of saves. After each kill the checkpoint
# must load (mnist-dp eval) and must not have gone back to an older step; at the end a run must resume from
# it and save again beside the temporary files that the killed saves left behind.
#   test_kill_while_saving.sh MNIST_DP DATA_DIR [KILLS]      (KILLS: default 30)
# The runs train on the first 3000 training and 500 test images of DATA_DIR, in batches of 300: ten steps
# an epoch, so that saves come several times a second and random kills land in them too.
# Closes with 'N passed, M failed'; exits non-zero when a check failed.
set -uo pipefail
bin=$1
data=$2
kills=${3:-30}
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/cli/checks.sh
. "$(dirname "$0")/checks.sh"

# A pipe nobody writes to: 'read -t' on it sleeps for fractions of a millisecond without starting a process.
mkfifo "$work/never"
exec {never}<>"$work/never"
# A small data set: the first images of DATA_DIR.
small_data_set "$data" "$work/data" 3000 500

ck=$work/ck.st
args=(--data "$work/data" --device cpu --no-progress --log-interval 100000 --batch-size 300)
loads() { "$bin" eval --checkpoint "$ck" --data "$work/data" --device cpu >"$work/eval.log" 2>&1; }
# A value of the checkpoint's metadata (mnist_dp.step, mnist_dp.epoch), read from its safetensors header.
saved() {  # saved KEY
  local n
  n=$(od -An -t u8 -N 8 "$ck" | tr -d ' ')
  head -c $((8 + n)) "$ck" | tail -c "$n" | grep -Eo "\"mnist_dp\\.$1\":\"[0-9]+\"" | grep -Eo '[0-9]+'
}

# 1. A first checkpoint.
"$bin" train "${args[@]}" --epochs 1 --max-steps 5 --save "$ck" >"$work/first.log" 2>&1
check "the first run saves a checkpoint" loads || { cat "$work/first.log" "$work/eval.log"; exit 1; }
last_step=$(saved step)

# 2. Runs that resume from it and save after every epoch, killed. Odd rounds kill at a random moment 0.05
# to 1.5 s after training starts; even rounds kill as soon as a save has created its temporary file, or a
# random 0 to 0.5 ms later (a save, writing, flushing and renaming 0.8 MB, takes about that long).
mid_save=0 bad_rounds=0 advanced=0
for ((i = 1; i <= kills; ++i)); do
  "$bin" train "${args[@]}" --epochs 100000 --resume "$ck" --save "$ck" >"$work/run.log" 2>&1 &
  pid=$!
  tmp="$ck.tmp-$pid"
  if ((i % 2 == 1)); then
    when="at random"
    for _ in $(seq 1 500); do grep -q '^training:' "$work/run.log" && break; sleep 0.02; done
    ms=$((RANDOM % 1451 + 50))
    sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  else
    delay_us=$((i % 4 == 2 ? 0 : RANDOM % 500))
    when="${delay_us} us into a save"
    deadline=$((SECONDS + 30))
    until [ -e "$tmp" ] || ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); do :; done
    read -r -t "0.$(printf %06d "$delay_us")" -u "$never" || true
  fi
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=
  landed=""
  [ -e "$tmp" ] && { mid_save=$((mid_save + 1)); landed=", in the middle of a save"; }
  if ! loads; then
    bad_rounds=$((bad_rounds + 1))
    echo "kill $i ($when$landed): the checkpoint does not load:"
    cat "$work/eval.log"
    continue
  fi
  step=$(saved step)
  if [ -z "$step" ] || ((step < last_step)); then
    bad_rounds=$((bad_rounds + 1))
    echo "kill $i ($when$landed): the checkpoint went back from step $last_step to step ${step:-?}"
    continue
  fi
  ((step > last_step)) && advanced=$((advanced + 1))
  echo "kill $i ($when$landed): the checkpoint loads, step $step"
  last_step=$step
done
check "after each of $kills kills the checkpoint loads and has not gone back ($bad_rounds bad)" \
  test "$bad_rounds" -eq 0
check "kills landed in the middle of a save ($mid_save of $kills)" test "$mid_save" -gt 0
check "killed runs saved checkpoints before they died ($advanced of $kills)" test "$advanced" -gt 0

# 3. The killed saves' temporary files do not stop a later run from resuming and saving.
left=$(ls "$ck".tmp-* 2>/dev/null | wc -l)
epoch=$(saved epoch)
"$bin" train "${args[@]}" --epochs $((epoch + 2)) --resume "$ck" --save "$ck" >"$work/last.log" 2>&1
rc=$?
check "a run resumes and saves beside $left temporary files of killed saves (exit $rc)" test "$rc" -eq 0
check "its checkpoint loads" loads
step=$(saved step)
check "its checkpoint is newer (step $last_step, then ${step:-?})" test "${step:-0}" -gt "$last_step"
# Its saves remove the temporary files of the killed ones, whose processes are gone.
check "no temporary file remains, of its own or of the $left killed saves" \
  test "$(ls "$ck".tmp-* 2>/dev/null | wc -l)" -eq 0

echo "$kills kills, $mid_save of them in the middle of a save"
finish_checks
