#!/usr/bin/env bash
# Prepares a run on a GPU machine that has no Debian packages of ours and reaches no package registry: makes
# .devdeps/ (git-ignored), which the run carries, then prints the size that will travel and the device call.
#   scripts/gpu-prepare.sh [--force]
#     .devdeps/usr.tar.xz  the Debian packages below (apt-get download, dpkg -x), without what neither the build
#                          nor the programs use (documentation, static libraries that no CMake package file
#                          names, OpenBLAS's reference-BLAS and LAPACK copies); one xz archive, since OpenBLAS
#                          alone is 35 MiB unpacked and a run carries at most 64 MiB. scripts/gpu/deps.sh
#                          unpacks it into build/devdeps/ where it is used.
#     .devdeps/data/       the four Fashion-MNIST IDX files (.gz, as the programs read them)
#     .devdeps/stamp       what it was made from; an existing .devdeps made from the same list is kept
#   --force   make it again anyway
# Fails, naming the package or file, when a download, an unpacking or a data file fails, and when what would
# travel is over the limit. Needs apt-get (root for the `apt-get update` done when a package is unknown).
set -euo pipefail
cd "$(dirname "$0")/.."

# The device call. The session script stops itself after TOTAL seconds (its default, 540); the call's limit
# leaves 30 s more for its start and for packing the logs, so that a slow phase ends as the script's own
# report rather than as a killed command.
session_command="scripts/gpu-session.sh"
session_total_s=540
run_timeout_s=$((session_total_s + 30))
carry=".devdeps"
travel_limit_mib=64

# What the build (CMakeLists.txt's find_package calls) and the programs load need, with the libraries those
# libraries load in turn that a machine with only the C and C++ toolchain lacks (zlib, libgfortran and its
# libquadmath, for OpenBLAS; libssl3 for libcrypto).
packages=(
  libfmt-dev libfmt9 catch2 libcli11-dev nlohmann-json3-dev
  zlib1g-dev zlib1g
  libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
  libssl-dev libssl3
)
data_src=${MNISTDP_DATA_SRC:-/usr/share/datasets/fashion-mnist}
data_files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
# Raised whenever what this script puts in .devdeps changes, so that an older .devdeps is made again.
layout=1

force=false
for arg in "$@"; do
  case $arg in
    --force) force=true ;;
    -h | --help)
      awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"  # this header
      exit 0
      ;;
    *)
      echo "gpu-prepare.sh: unknown argument '$arg' (try --help)" >&2
      exit 2
      ;;
  esac
done

die() {
  echo "gpu-prepare.sh: $*" >&2
  exit 1
}

# .devdeps must never be committed, nor travel as untracked files outside `carry`.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devdeps/' "$exclude" 2>/dev/null || echo '/.devdeps/' >>"$exclude"

stamp="layout $layout
packages ${packages[*]}
data ${data_files[*]}"

make_devdeps() {
  for f in "${data_files[@]}"; do
    [ -s "$data_src/$f" ] || die "no data file $data_src/$f (scripts/setup.sh installs Debian's dataset-fashion-mnist," \
      "or set MNISTDP_DATA_SRC to a folder with the four IDX files)"
  done
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-prepare.XXXXXX")
  # shellcheck disable=SC2064 # the folder is known now, and must go whatever happens later
  trap "rm -rf '$work'" EXIT

  # Packages apt does not know yet (a machine whose package lists were never fetched): fetch the lists once.
  local p unknown=()
  for p in "${packages[@]}"; do
    apt-cache show "$p" >/dev/null 2>&1 || unknown+=("$p")
  done
  if [ ${#unknown[@]} -gt 0 ]; then
    echo "gpu-prepare.sh: apt does not know ${unknown[*]}: apt-get update"
    apt-get update -qq || die "apt-get update failed (root is needed); unknown packages: ${unknown[*]}"
    local still=()
    for p in "${unknown[@]}"; do
      apt-cache show "$p" >/dev/null 2>&1 || still+=("$p")
    done
    [ ${#still[@]} -eq 0 ] || die "no package named ${still[*]} in apt's lists (this script's list is for Debian 12)"
  fi
  echo "gpu-prepare.sh: downloading ${#packages[@]} packages"
  mkdir -p "$work/debs" "$work/tree"
  if ! (cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root "${packages[@]}" >"$work/download.log" 2>&1); then
    # Name the package(s) at fault: one by one, which apt-get download does not do.
    local failed=()
    for p in "${packages[@]}"; do
      (cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root "$p" >/dev/null 2>&1) || failed+=("$p")
    done
    tail -5 "$work/download.log" >&2
    die "apt-get download failed for: ${failed[*]:-(each alone succeeded; see above)}"
  fi
  local deb
  for deb in "$work"/debs/*.deb; do
    dpkg -x "$deb" "$work/tree" || die "dpkg -x failed on $(basename "$deb")"
  done
  for p in "${packages[@]}"; do
    compgen -G "$work/debs/${p}_*.deb" >/dev/null || die "apt-get download left no .deb for $p"
  done

  local tree=$work/tree
  # Debian 12's packages still install some libraries (zlib) in /lib, which the machine links to /usr/lib:
  # merge them, so that one library folder holds everything.
  if [ -d "$tree/lib" ]; then
    mkdir -p "$tree/usr/lib"
    cp -a "$tree/lib/." "$tree/usr/lib/" && rm -rf "${tree:?}/lib"
  fi
  # Absolute symbolic links (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) would reach this machine's own
  # files: point them at the unpacked ones, relative, so that they hold wherever the tree is unpacked.
  local link target dest
  while IFS= read -r link; do
    target=$(readlink "$link")
    dest=$tree${target/#\/lib\//\/usr\/lib\/}
    [ -e "$dest" ] || die "$(basename "$link") in package files points to $target, which no package here provides"
    ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$dest")" "$link"
  done < <(find "$tree" -type l -lname '/*')

  # What neither the build nor the programs use. Static libraries go, but those a CMake package file names
  # (Catch2's libCatch2WithMain.a): CMake checks that an imported target's files exist.
  rm -rf "$tree/usr/share/doc" "$tree/usr/share/man" "$tree/usr/share/locale" "$tree/usr/share/lintian" \
    "$tree/usr/share/bug"
  local named a
  named=$(find "$tree" -name '*.cmake' -exec grep -ho '[A-Za-z0-9_.+-]*\.a\b' {} + 2>/dev/null | sort -u)
  while IFS= read -r a; do
    grep -qxF "$(basename "$a")" <<<"$named" || rm -f "$a"
  done < <(find "$tree" \( -type f -o -type l \) -name '*.a')
  # OpenBLAS's libblas.so.3 and liblapack.so.3 are copies behind the alternatives for the reference interfaces;
  # the project links libopenblas.so.0.
  rm -f "$tree"/usr/lib/x86_64-linux-gnu/openblas-pthread/lib{blas,lapack}.so*
  find "$tree" -xtype l -delete
  find "$tree" -depth -type d -empty -delete

  mkdir -p "$work/devdeps/data"
  echo "gpu-prepare.sh: compressing (xz)"
  # Sorted, with fixed owners and times: the same packages give the same archive.
  tar -C "$tree" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - usr |
    xz -9 -T0 >"$work/devdeps/usr.tar.xz" || die "could not make $work/devdeps/usr.tar.xz"
  for f in "${data_files[@]}"; do
    cp "$data_src/$f" "$work/devdeps/data/" || die "could not copy $data_src/$f"
  done
  (cd "$work/debs" && ls) >"$work/devdeps/packages.txt"
  printf '%s\n' "$stamp" >"$work/devdeps/stamp"
  rm -rf .devdeps
  mv "$work/devdeps" .devdeps
  echo "gpu-prepare.sh: made .devdeps/ from: ${packages[*]}"
}

if ! $force && [ -f .devdeps/usr.tar.xz ] && [ -d .devdeps/data ] && [ "$(cat .devdeps/stamp 2>/dev/null)" = "$stamp" ]; then
  echo "gpu-prepare.sh: .devdeps/ is up to date (made from the same packages; --force makes it again)"
else
  make_devdeps
fi

# What travels: the tracked files and the untracked ones that git does not ignore, shared/ where there is
# one, and the carried folder.
bytes() { awk '{ s += $1 } END { print s + 0 }'; }
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | bytes || true)
shared_bytes=0
[ -d shared ] && shared_bytes=$(find shared/ \( -type f -o -type l \) -printf '%s\n' | bytes)
deps_bytes=$(find "$carry"/ \( -type f -o -type l \) -printf '%s\n' | bytes)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=$((tree_bytes + shared_bytes + deps_bytes))
echo "gpu-prepare.sh: travels $(mib "$total") MiB of $travel_limit_mib: working tree $(mib "$((tree_bytes + shared_bytes))")," \
  "$carry $(mib "$deps_bytes") (usr.tar.xz $(mib "$(stat -c %s .devdeps/usr.tar.xz)"), data" \
  "$(mib "$(find .devdeps/data -type f -printf '%s\n' | bytes)"))"
if [ "$total" -gt $((travel_limit_mib * 1048576)) ]; then
  die "that is over the $travel_limit_mib MiB a run carries: remove or git-ignore large untracked files (git status)"
fi
echo "gpu-prepare.sh: the device call:"
echo "  run  command: \"$session_command\"  carry: [\"$carry\"]  timeout_s: $run_timeout_s"
