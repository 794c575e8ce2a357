# Sourced by scripts/test.sh and scripts/test-quick.sh: runs the suite as named stages and prints, at the end,
# each stage's wall time and CPU time (user + sys of everything it ran), the total, and a warning naming the
# slowest stage when the whole run passes the warning's minutes (CI's limit is 90 on two cores).
#   stage NAME COMMAND...    runs COMMAND as stage NAME; a failing stage is recorded and the run goes on
#   stages_report            prints the table; returns non-zero when any stage failed
# The CPU time is read from /proc/self/stat (the children's user and sys ticks, which count every process a
# stage waited for), so that what the suite costs shows apart from how loaded the machine was.
stage_names=() stage_walls=() stage_cpus=() stage_results=()
stage_warn_minutes=${STAGE_WARN_MINUTES:-60}
stages_start=$SECONDS

children_cpu_ticks() {
  # Fields 16 and 17 of /proc/PID/stat (cutime, cstime), after the command name, which may hold spaces.
  local stat
  stat=$(</proc/$$/stat)
  stat=${stat##*) }
  read -r -a fields <<<"$stat"
  echo $((fields[13] + fields[14]))
}

stage() {
  local name=$1
  shift
  echo "==== $name ===="
  local wall0=$SECONDS cpu0 rc=0
  cpu0=$(children_cpu_ticks)
  "$@" || rc=$?
  local cpu1
  cpu1=$(children_cpu_ticks)
  stage_names+=("$name")
  stage_walls+=($((SECONDS - wall0)))
  stage_cpus+=($(((cpu1 - cpu0) / $(getconf CLK_TCK))))
  if [ "$rc" -eq 0 ]; then stage_results+=(passed); else stage_results+=("FAILED (exit $rc)"); fi
  return 0
}

minutes() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

stages_report() {
  local i total_cpu=0 slowest=0 failures=0
  echo
  echo "==== time by stage (wall, and CPU: user + sys of all that the stage ran) ===="
  printf '%-44s %8s %8s  %s\n' stage wall CPU result
  for i in "${!stage_names[@]}"; do
    printf '%-44s %8s %8s  %s\n' "${stage_names[$i]}" "$(minutes "${stage_walls[$i]}")" \
      "$(minutes "${stage_cpus[$i]}")" "${stage_results[$i]}"
    total_cpu=$((total_cpu + stage_cpus[i]))
    [ "${stage_walls[$i]}" -gt "${stage_walls[$slowest]}" ] && slowest=$i
    [ "${stage_results[$i]}" = passed ] || failures=$((failures + 1))
  done
  local total_wall=$((SECONDS - stages_start))
  printf '%-44s %8s %8s  on %s cores\n' total "$(minutes "$total_wall")" "$(minutes "$total_cpu")" "$(nproc)"
  if [ "$total_wall" -gt $((stage_warn_minutes * 60)) ]; then
    echo "WARNING: the suite took $(minutes "$total_wall") (m:ss), past $stage_warn_minutes minutes; its slowest stage is" \
      "'${stage_names[$slowest]}' ($(minutes "${stage_walls[$slowest]}") wall, $(minutes "${stage_cpus[$slowest]}") CPU):" \
      "make it faster before adding to it (CI stops at 90 minutes)"
  fi
  echo "stages: $((${#stage_names[@]} - failures)) passed, $failures failed"
  [ "$failures" -eq 0 ]
}
