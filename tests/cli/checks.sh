# Sourced by the command-line test scripts: numbered checks, and the closing count.
#   check DESCRIPTION COMMAND...   runs COMMAND; prints "ok: DESCRIPTION" or "FAILED: DESCRIPTION" and returns
#                                  COMMAND's success, so that a failure can show more (check ... || tail log)
#   finish_checks                  prints "N passed, M failed"; fails when any check did
passed=0 failed=0
check() {
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1)); echo "ok: $what"
  else
    failed=$((failed + 1)); echo "FAILED: $what"
    return 1
  fi
}
finish_checks() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
