# Sourced by the command-line test scripts: numbered checks, the closing count, and a small data set.
#   check DESCRIPTION COMMAND...   runs COMMAND; prints "ok: DESCRIPTION" or "FAILED: DESCRIPTION" and returns
#                                  COMMAND's success, so that a failure can show more (check ... || tail log)
#   finish_checks                  prints "N passed, M failed"; fails when any check did
#   small_data_set FROM TO TRAIN TEST
#                                  writes to folder TO the first TRAIN training and TEST test samples of the
#                                  MNIST files in folder FROM (raw or .gz), as raw IDX files
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

# A big-endian 32-bit count, as the IDX header holds it.
be32() {
  printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))"
  printf "\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"
}
small_data_set() {
  local from=$1 to=$2 train=$3 test=$4
  contents() { if [ -f "$from/$1" ]; then cat "$from/$1"; else gzip -dc "$from/$1.gz"; fi; }
  first() {  # first NAME HEADER_BYTES ITEM_BYTES COUNT: the magic, the new count, the rest of the header
    { head -c 4 <(contents "$1"); be32 "$4"; contents "$1" | head -c $(($2 + $3 * $4)) | tail -c +9; } >"$to/$1"
  }
  mkdir -p "$to"
  first train-images-idx3-ubyte 16 784 "$train"
  first train-labels-idx1-ubyte 8 1 "$train"
  first t10k-images-idx3-ubyte 16 784 "$test"
  first t10k-labels-idx1-ubyte 8 1 "$test"
}
