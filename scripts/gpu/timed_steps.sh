# shellcheck shell=bash
# Sourced by the phases of scripts/gpu-session.sh that run several commands within the phase's LIMIT seconds
# (bench, sanitizer, pytorch): each command within its own limit and never past the phase's deadline, its
# result one line in $WORK/results.txt ("NAME: done in 12s", "NAME: stopped at its 60s limit", "NAME: exit 1
# after 3s", "NAME: skipped, no time left"), and counted in steps_done, steps_failed and steps_skipped.
steps_done=0 steps_failed=0 steps_skipped=0
steps_deadline=$((SECONDS + LIMIT - 5))

# timed_step NAME LIMIT LEAST LOG COMMAND...: runs COMMAND, its output to LOG, for at most LIMIT seconds; skips
# it when fewer than LEAST seconds are left. A phase may define step_detail LOG to add a word on the run to its
# line (a sanitizer's error summary). Returns COMMAND's status, 124 when stopped, 125 when skipped.
timed_step() {
  local name=$1 limit=$2 least=$3 log=$4
  shift 4
  local left=$((steps_deadline - SECONDS))
  if [ "$left" -lt "$least" ]; then
    steps_skipped=$((steps_skipped + 1))
    echo "$name: skipped, no time left" | tee -a "$WORK/results.txt"
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local start=$SECONDS
  timeout "$limit" "$@" >"$log" 2>&1
  local rc=$?
  local result
  case $rc in
    0) result="done in $((SECONDS - start))s" ;;
    124) result="stopped at its ${limit}s limit" ;;
    *) result="exit $rc after $((SECONDS - start))s" ;;
  esac
  if declare -F step_detail >/dev/null; then
    local detail
    detail=$(step_detail "$log")
    [ -n "$detail" ] && result="$result, $detail"
  fi
  if [ "$rc" = 0 ]; then steps_done=$((steps_done + 1)); else steps_failed=$((steps_failed + 1)); fi
  echo "$name: $result" | tee -a "$WORK/results.txt"
  return "$rc"
}
