#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz": clang, AddressSanitizer, UBSan) and runs each one for SECONDS
# on a copy of its seed corpus (tests/fuzz/corpus). Fails when a target finds an input that crashes it, trips
# a sanitizer, throws an exception other than the reader's own error, runs out of memory or hangs; the input
# is saved under build/fuzz/findings/TARGET/ and the path printed.
#   scripts/fuzz.sh [SECONDS]       (default 30 per target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
case "$seconds" in
  ''|*[!0-9]*|0) echo "fuzz.sh: SECONDS must be a positive whole number, got '$seconds'" >&2; exit 2 ;;
esac

scripts/build.sh fuzz
bin=build/fuzz/tests/fuzz
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

status=0
for target in idx checkpoint; do
  fuzzer="$bin/fuzz_$target"
  corpus="build/fuzz/corpus/$target"     # the seeds, and what the run adds to them
  findings="build/fuzz/findings/$target"
  log="build/fuzz/fuzz_$target.log"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$findings"
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$findings/")
  [ -f "tests/fuzz/$target.dict" ] && args+=(-dict="tests/fuzz/$target.dict")
  echo "fuzz.sh: fuzz_$target for ${seconds} s on $(ls "$corpus" | wc -l) seeds (log: $log)"
  if "$fuzzer" "${args[@]}" "$corpus" >"$log" 2>&1; then
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    echo "fuzz.sh: fuzz_$target: nothing found in $runs inputs; the corpus grew to $(ls "$corpus" | wc -l) files"
  else
    status=1
    grep -E -A40 '^==[0-9]+==|runtime error|fuzz_[a-z]+: |ERROR: libFuzzer' "$log" | head -60 >&2 || tail -40 "$log" >&2
    saved=$(grep -Eo "Test unit written to [^ ]+" "$log" | sed 's/Test unit written to //' || true)
    echo "fuzz.sh: fuzz_$target FOUND A PROBLEM; the input is saved as: ${saved:-(see $log)}" >&2
    echo "fuzz.sh: to reproduce: $fuzzer ${saved:-INPUT}" >&2
  fi
done
exit "$status"
