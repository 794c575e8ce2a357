# Sourced by the command-line test scripts: numbered checks, the closing count, and a small data set.
#   check DESCRIPTION COMMAND...   runs COMMAND; prints "ok: DESCRIPTION" or "FAILED: DESCRIPTION" and returns
#                                  COMMAND's success, so that a failure can show more (check ... || tail log)
#   finish_checks                  prints "N passed, M failed"; fails when any check did
#   contains FILE TEXT             whether FILE holds TEXT
#   free_port                      prints a local TCP port nothing listens on, for a rendezvous
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
contains() { grep -qF -- "$2" "$1"; }
# The --gemm choices of mnist-dp BINARY that sum in the hand-written versions' common order, as
# `--gemm NAME` words, the default (blocked, the plain run they are compared with) left out: every row of
# kernels/cuda/gemm/gemm_version.hpp's table but cuBLAS, which the sweeps check within its own bound.
common_bits_gemm_options() {
  "$1" train --help | sed -n 's/.*--gemm TEXT:{\([^}]*\)}.*/\1/p' | tr ',' '\n' |
    grep -v -x -e blocked -e cublas | sed 's/^/--gemm /'
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# A big-endian 32-bit count, as the IDX header holds it.
be32() {
  printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))"
  printf "\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"
}
# The contents of IDX file NAME in folder FROM, raw or .gz.
idx_contents() { if [ -f "$1/$2" ]; then cat "$1/$2"; else gzip -dc "$1/$2.gz"; fi; }
# idx_first FROM TO NAME HEADER_BYTES ITEM_BYTES COUNT: the first COUNT items of FROM/NAME into TO/NAME, the
# magic, the new count, the rest of the header, then the items.
idx_first() {
  local from=$1 to=$2 name=$3 header=$4 item=$5 count=$6
  { head -c 4 <(idx_contents "$from" "$name"); be32 "$count"
    idx_contents "$from" "$name" | head -c $((header + item * count)) | tail -c +9; } >"$to/$name"
}
small_data_set() {
  local from=$1 to=$2 train=$3 test=$4
  mkdir -p "$to"
  idx_first "$from" "$to" train-images-idx3-ubyte 16 784 "$train"
  idx_first "$from" "$to" train-labels-idx1-ubyte 8 1 "$train"
  idx_first "$from" "$to" t10k-images-idx3-ubyte 16 784 "$test"
  idx_first "$from" "$to" t10k-labels-idx1-ubyte 8 1 "$test"
}
