#!/usr/bin/env bash
# Checks that preset gpu configures and builds against .devdeps/ and the CUDA toolkit alone, as it must on a GPU
# machine that has none of the Debian packages this machine has:
#   1. scripts/gpu-prepare.sh makes .devdeps/ where it is missing or out of date (and checks that a run would
#      carry no more than its limit);
#   2. configures `cmake --preset gpu -B build/gpu-isolated` with scripts/gpu/deps.sh's --isolated arguments
#      (CMake finds nothing outside the unpacked .devdeps and the toolkit), builds every target;
#   3. reads every header the compilers read from ninja's record of them (`ninja -t deps`): each must be the
#      project's, the unpacked .devdeps', the CUDA toolkit's, or a file of the C and C++ toolchain and C
#      library's packages (libc6-dev, linux-libc-dev, libstdc++-N-dev, libgcc-N-dev, gcc-N; `dpkg -S`);
#   4. `ldd`s every program with LD_LIBRARY_PATH as deps.sh sets it: each library must load from .devdeps or the
#      toolkit, but for the C and C++ runtime (libc, libm, libstdc++, libgcc_s, the loader).
# The checks of steps 3 and 4 are first run on made-up lists that they must reject (a header from
# /usr/include/fmt, libfmt from /usr/lib), so that a check that lets everything through cannot pass.
# Ends with one line: "check-isolated-build: passed: ..." or "check-isolated-build: FAILED: ...".
#   scripts/gpu/check-isolated-build.sh [--self-test]   (--self-test: the made-up lists alone, no build)
# Environment: BUILD_DIR (default build/gpu-isolated), JOBS (default: all cores). Without a CUDA toolkit there is
# nothing to check: it says so and passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
BUILD_DIR=${BUILD_DIR:-build/gpu-isolated}
JOBS=${JOBS:-$(nproc)}

self_test_only=false
case ${1:-} in
  --self-test) self_test_only=true ;;
  -h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"  # this header
    exit 0
    ;;
  "") ;;
  *)
    echo "check-isolated-build.sh: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
esac

fail() {
  echo "check-isolated-build: FAILED: $*"
  exit 1
}

# The packages of the C and C++ toolchain and the C library: their headers are the compiler's own, on any
# machine that builds.
toolchain_packages='^(libc6-dev|linux-libc-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev|gcc-[0-9]+)(:[a-z0-9]+)?$'
# The C and C++ runtime's libraries, which every machine that runs the programs has.
runtime_libraries='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|lib(c|m|dl|pthread|rt|resolv|util|gcc_s|stdc\+\+)\.so\.[0-9]+)$'

# allowed_folders: the folders whose files need no package check (set by deps_check's caller).
allowed_folders=()
in_allowed_folder() {
  local f=$1 d
  for d in "${allowed_folders[@]}"; do
    case $f in "$d"/*) return 0 ;; esac
  done
  return 1
}

# check_headers: reads absolute, normalised header paths on stdin; prints each that is neither in an allowed
# folder nor a file of a toolchain package, with why, and returns non-zero if there is one. A path is looked
# up as read (dpkg knows the paths that packages install) and with its links resolved (the toolkit's headers
# are also reached through links such as /usr/local/cuda). One dpkg -S for all of them: it takes a second or
# so however many files it is given, where one call a file would take minutes.
check_headers() {
  local f r outside=() bad=0
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    r=$(realpath -m -- "$f")
    in_allowed_folder "$f" || in_allowed_folder "$r" || outside+=("$f")
  done
  [ ${#outside[@]} -gt 0 ] || return 0
  local owners
  owners=$({ printf '%s\n' "${outside[@]}"; printf '%s\0' "${outside[@]}" | xargs -0 realpath -m --; } | sort -u |
    xargs -d '\n' dpkg -S 2>/dev/null || true)
  local pkgs p ok
  for f in "${outside[@]}"; do
    pkgs=$(owner_of "$f" <<<"$owners")
    [ -n "$pkgs" ] || pkgs=$(owner_of "$(realpath -m -- "$f")" <<<"$owners")
    if [ -z "$pkgs" ]; then
      echo "  $f: in no Debian package, and outside the project, .devdeps and the CUDA toolkit"
      bad=1
      continue
    fi
    ok=true
    for p in ${pkgs//,/ }; do
      [[ $p =~ $toolchain_packages ]] || ok=false
    done
    if ! $ok; then
      echo "  $f: from the Debian package $pkgs, which the GPU machine does not have"
      bad=1
    fi
  done
  return $bad
}

# owner_of PATH: from `dpkg -S` output on stdin ("pkg1, pkg2: /path"), the packages owning exactly PATH (dpkg
# also prints longer paths that contain it).
owner_of() {
  awk -v f="$1" 'substr($0, length($0) - length(f) - 1) == ": " f { sub(/: \/.*/, ""); print; exit }'
}

# check_libraries: reads `ldd` output on stdin; prints each library that does not load from an allowed folder and
# is not the C and C++ runtime, and each that does not load at all; returns non-zero if there is one.
check_libraries() {
  local line name path bad=0
  while IFS= read -r line; do
    line=${line#"${line%%[![:space:]]*}"}
    case $line in
      "" | *:) continue ;;                     # blank, or the name of the next program
      *"=> not found"*) name=${line%% *} path="" ;;
      *" => "*) name=${line%% *} path=${line#* => } path=${path%% (*} ;;
      *) name=${line%% *} path=$name ;; # the loader and the vDSO, named by their paths
    esac
    name=${name##*/}
    if [ -z "$path" ]; then
      echo "  $name: not found"
      bad=1
    elif [[ $name =~ $runtime_libraries ]]; then
      :
    elif ! in_allowed_folder "$path" && ! in_allowed_folder "$(realpath -m -- "$path")"; then
      echo "  $name: loads $path, which only this machine provides"
      bad=1
    fi
  done
  return $bad
}

# The checks must reject what they are meant to reject: a header of a Debian package of ours, a header in no
# package, a library from this machine's /usr/lib, a library not found; and let through the toolchain's.
self_test() {
  local saved=("${allowed_folders[@]}") out
  allowed_folders=("$root")
  out=$(printf '%s\n' "$root/host/main.cpp" /usr/include/fmt/format.h | check_headers) &&
    fail "self-test: a header from /usr/include/fmt passed the header check"
  grep -q '/usr/include/fmt/format.h' <<<"$out" || fail "self-test: the header check did not name /usr/include/fmt/format.h"
  printf '%s\n' /nonexistent/include/foo.h | check_headers >/dev/null &&
    fail "self-test: a header in no package passed the header check"
  local stdio
  stdio=$(realpath -m /usr/include/stdio.h)
  if dpkg -S "$stdio" >/dev/null 2>&1; then
    out=$(printf '%s\n' "$stdio" | check_headers) || fail "self-test: the C library's stdio.h failed the header check: $out"
  fi
  printf '\tlibfmt.so.9 => /usr/lib/x86_64-linux-gnu/libfmt.so.9 (0x00007f0000000000)\n' | check_libraries >/dev/null &&
    fail "self-test: libfmt from /usr/lib passed the library check"
  printf '\tlibnccl.so.2 => not found\n' | check_libraries >/dev/null &&
    fail "self-test: a library not found passed the library check"
  out=$(printf '%s\n' $'\tlinux-vdso.so.1 (0x00007ffd00000000)' \
    $'\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f0000000000)' \
    $'\t/lib64/ld-linux-x86-64.so.2 (0x00007f0000000000)' | check_libraries) ||
    fail "self-test: the C++ runtime failed the library check: $out"
  allowed_folders=("${saved[@]}")
}

self_test
if $self_test_only; then
  echo "check-isolated-build: passed: the self-test (made-up headers and libraries from /usr are rejected)"
  exit 0
fi

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "check-isolated-build: passed: nothing to check, no CUDA toolkit here (preset gpu needs one)"
  exit 0
fi

# --- 1. .devdeps (made once; kept while the package list is the same). ---
mkdir -p "$root/build"
scripts/gpu-prepare.sh >"$root/build/gpu-prepare.log" 2>&1 || {
  cat "$root/build/gpu-prepare.log"
  fail "scripts/gpu-prepare.sh failed (above)"
}
grep -E "travels|up to date|made .devdeps" "$root/build/gpu-prepare.log" || true

# --- 2. Configure and build. ---
# shellcheck source=scripts/gpu/deps.sh
. scripts/gpu/deps.sh
gpu_deps_setup "$root" --isolated || fail "scripts/gpu/deps.sh could not set up .devdeps"
mkdir -p "$BUILD_DIR"
log=$BUILD_DIR/build.log
# A fresh configure each time: a cache left by another configuration would keep what it found, isolated or
# not. The objects stay, and are rebuilt only where the flags changed.
rm -f "$BUILD_DIR/CMakeCache.txt"
# Host code unoptimised: what the check reads (the headers each compilation includes, the libraries each
# program loads) is the same at every optimisation level, and -O0 took the check from about 10 CPU-minutes
# to 7 (a 2-vCPU AMD EPYC, 2026-12-08).
# The device code is optimised as ever (nvcc's -O is the host compiler's).
unoptimised=("-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG" "-DCMAKE_CUDA_FLAGS_RELEASE=-O0 -DNDEBUG")
if ! cmake --preset gpu -B "$BUILD_DIR" "${gpu_cmake_args[@]}" "${unoptimised[@]}" >"$log" 2>&1; then
  grep -E -A8 "CMake Error|Could NOT|not found" "$log" | head -40
  fail "the configure of preset gpu against .devdeps alone failed (whole log: $log)"
fi
# Every target: the GPU machine builds them all, and any source may include what .devdeps lacks.
if ! cmake --build "$BUILD_DIR" -j "$JOBS" >>"$log" 2>&1; then
  grep -E -B2 -A12 "error|FAILED" "$log" | head -60
  fail "the build of preset gpu against .devdeps alone failed (whole log: $log)"
fi

# The folders that need no package check: the project (the build folders other than this one aside), the
# unpacked .devdeps and its archive, the toolkit and NCCL (deps.sh's CMake roots).
build_abs=$(realpath "$BUILD_DIR")
allowed_folders=("$build_abs" "$root/.devdeps")
for d in "${gpu_deps_roots[@]}"; do
  allowed_folders+=("$(realpath -m "$d")")
done
# The project's own files, listed: a folder test would let the other build folders' files through.
in_project() { [[ $1 == "$root"/* && $1 != "$root"/build/* ]]; }

# --- 3. The headers, from ninja's record of what each compilation read. ---
objects=$(ninja -C "$BUILD_DIR" -t targets all | awk -F': ' '$2 ~ /^(CXX|CUDA)_COMPILER__/ { print $1 }')
[ -n "$objects" ] || fail "ninja lists no compiled objects in $BUILD_DIR"
# shellcheck disable=SC2086 # one path per word: the build folder's paths hold no spaces
deps=$(ninja -C "$BUILD_DIR" -t deps $objects)
# Each object must have its record, valid (ninja records a compilation's headers only when it ran).
n_objects=$(wc -w <<<"$objects")
n_valid=$(grep -cE '^[^ ].*: #deps [1-9][0-9]*, deps mtime [0-9]+ \(VALID\)$' <<<"$deps" || true)
[ "$n_valid" -eq "$n_objects" ] || {
  grep -E '^[^ ]' <<<"$deps" | grep -vE '\(VALID\)$' | head -5
  fail "ninja holds a valid record of headers for $n_valid of $n_objects objects"
}
# Made absolute and normalised (ninja keeps the compilers' spelling: relative to the build folder, with ..),
# links kept: check_headers looks at both.
headers=$(grep -E '^    ' <<<"$deps" | sed 's/^ *//' | sort -u | (cd "$BUILD_DIR" && xargs -r -d '\n' realpath -m -s --) |
  sort -u)
not_ours=$(while IFS= read -r h; do in_project "$h" || echo "$h"; done <<<"$headers")
if ! report=$(check_headers <<<"$not_ours"); then
  echo "$report"
  # ninja keeps what an object last read until it is compiled again: a header read before a fix to .devdeps
  # stays named while that object is older than it.
  fail "the build read headers that the GPU machine lacks (above; once .devdeps is fixed, remove $BUILD_DIR" \
    "if objects compiled before the fix are still named)"
fi
n_headers=$(wc -l <<<"$headers")
n_not_ours=$(grep -c . <<<"$not_ours" || true)

# --- 4. The libraries each program loads. ---
# (The linker rules also name the CMake scripts that list each test program's cases.)
programs=$(ninja -C "$BUILD_DIR" -t targets all | awk -F': ' '$2 ~ /_EXECUTABLE_LINKER__/ && $1 !~ /\.cmake$/ { print $1 }' |
  sort -u)
lddout=""
n_programs=0
for p in $programs; do
  [ -x "$BUILD_DIR/$p" ] || fail "the program $BUILD_DIR/$p was not built"
  lddout+="$p:"$'\n'"$(ldd "$BUILD_DIR/$p")"$'\n'
  n_programs=$((n_programs + 1))
done
if ! report=$(check_libraries <<<"$lddout"); then
  sort -u <<<"$report"
  fail "the programs load libraries that the GPU machine lacks (above; LD_LIBRARY_PATH as scripts/gpu/deps.sh sets it)"
fi
n_libs=$(grep -c '=>' <<<"$lddout" || true)

echo "check-isolated-build: passed: preset gpu configured and built against .devdeps and the CUDA toolkit alone;" \
  "$n_headers headers of $n_objects compilations ($n_not_ours outside the project, checked), $n_libs library loads of" \
  "$n_programs programs"
