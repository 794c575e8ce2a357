# shellcheck shell=bash
# Sourced, not run: the build's dependencies for preset gpu on a machine without Debian's packages.
#   . scripts/gpu/deps.sh
#   gpu_deps_setup ROOT [--isolated]
#   cmake --preset gpu -B build/gpu "${gpu_cmake_args[@]}"
#
# scripts/gpu-prepare.sh leaves in ROOT/.devdeps/ the Debian packages the build and the programs need, as one
# archive (usr.tar.xz: OpenBLAS alone is 35 MiB unpacked, 4 MiB compressed, and a run on the GPU machine
# carries at most 64 MiB), and the data set in .devdeps/data. gpu_deps_setup unpacks the archive once into
# ROOT/build/devdeps/ (or $GPU_DEPS_UNPACKED; outside .devdeps/, so that what travels stays small; unpacked
# again when the archive changes), then sets:
#   gpu_cmake_args    a bash array of -D arguments for the configure (no spaces where ROOT has none): the prefix;
#                     Debian's OpenBLAS by name (dpkg -x leaves it without the alternatives' symbolic links
#                     that would let CMake find it); the unpacked multiarch include folder; NCCL where it is
#                     not beside the CUDA toolkit (a pip wheel's, say); the data set for the tests
#   LD_LIBRARY_PATH   exported: the unpacked libraries, and NCCL's folder when it is found elsewhere
#   gpu_deps_prefix   the unpacked usr/ folder ("" without .devdeps); gpu_deps_data: .devdeps/data or ""
#   gpu_deps_roots    with --isolated, the folders CMake may find anything in (an array)
# With --isolated, CMake finds packages, libraries and headers in the unpacked .devdeps, the CUDA toolkit and
# NCCL's folder alone (CMAKE_FIND_ROOT_PATH with CMAKE_FIND_ROOT_PATH_MODE_{PACKAGE,LIBRARY,INCLUDE}=ONLY):
# every search path is moved under those roots, so that a package installed in /usr cannot be picked up
# instead of the carried one. Programs (compilers, python3) are still found on PATH. scripts/gpu/
# check-isolated-build.sh checks the result. Without --isolated the machine's own packages remain a fallback,
# as on the GPU machine, which has none of ours.
# Returns non-zero, saying why, when .devdeps is missing with --isolated or its archive cannot be unpacked.
# Works under `set -u` and without `set -e` (the caller's options are left as they were).

gpu_deps_setup() {
  local root=${1:?gpu_deps_setup: ROOT (the project root) is required}
  shift
  local isolated=false
  while [ $# -gt 0 ]; do
    case $1 in
      --isolated) isolated=true ;;
      *)
        echo "gpu_deps_setup: unknown argument '$1' (ROOT [--isolated])" >&2
        return 2
        ;;
    esac
    shift
  done
  root=$(cd "$root" && pwd -P) || return 1
  gpu_cmake_args=()
  gpu_deps_prefix="" gpu_deps_data=""
  gpu_deps_roots=()
  local devdeps=$root/.devdeps

  # --- The Debian packages: .devdeps/usr.tar.xz, unpacked under build/devdeps. ---
  if [ -f "$devdeps/usr.tar.xz" ]; then
    _gpu_deps_unpack "$devdeps/usr.tar.xz" "${GPU_DEPS_UNPACKED:-$root/build/devdeps}" || return 1
    gpu_deps_prefix=$(cd "${GPU_DEPS_UNPACKED:-$root/build/devdeps}/usr" && pwd -P) || return 1
  elif [ -d "$devdeps/usr" ]; then
    # An earlier layout: the packages unpacked in .devdeps itself. Used as it is.
    gpu_deps_prefix=$devdeps/usr
  elif $isolated; then
    echo "gpu_deps_setup: no $devdeps/usr.tar.xz (scripts/gpu-prepare.sh makes it); --isolated needs it" >&2
    return 1
  else
    echo "gpu_deps_setup: warning: no .devdeps/ (fmt, Catch2, CLI11, nlohmann-json, OpenBLAS, OpenSSL, zlib):" \
      "the configure finds them on this machine or fails; scripts/gpu-prepare.sh makes .devdeps/" >&2
  fi
  [ -d "$devdeps/data" ] && gpu_deps_data=$devdeps/data
  [ -n "$gpu_deps_data" ] && gpu_cmake_args+=("-DMNISTDP_TEST_DATA=$gpu_deps_data")

  if [ -n "$gpu_deps_prefix" ]; then
    gpu_cmake_args+=("-DCMAKE_PREFIX_PATH=$gpu_deps_prefix")
    local d
    # The earlier layout kept Debian's /lib (zlib) apart from /usr/lib; gpu-prepare.sh merges them.
    for d in "$gpu_deps_prefix/../lib/x86_64-linux-gnu" "$gpu_deps_prefix/lib" \
      "$gpu_deps_prefix/lib/x86_64-linux-gnu/openblas-pthread" "$gpu_deps_prefix/lib/x86_64-linux-gnu"; do
      [ -d "$d" ] && _gpu_deps_ld_prepend "$d"
    done
    # Unpacked with dpkg -x, Debian's OpenBLAS has no alternatives symbolic links (libopenblas.so in the
    # linker's path, cblas.h in /usr/include): name the library and the header's folder. Always the carried
    # one, so that the library linked is the one LD_LIBRARY_PATH loads.
    local blas cblas
    blas=$(find "$gpu_deps_prefix" -name libopenblas.so -path '*pthread*' 2>/dev/null | head -1)
    [ -z "$blas" ] && blas=$(find "$gpu_deps_prefix" -name 'libopenblas.so*' 2>/dev/null | head -1)
    [ -n "$blas" ] && gpu_cmake_args+=("-DBLAS_LIBRARIES=$blas")
    cblas=$(find "$gpu_deps_prefix" -name cblas.h 2>/dev/null | head -1)
    [ -n "$cblas" ] && gpu_cmake_args+=("-DOPENBLAS_INCLUDE_DIR=$(dirname "$cblas")")
    # Debian puts a few headers in the multiarch folder /usr/include/x86_64-linux-gnu, which the compiler
    # searches by default (OpenSSL's <openssl/configuration.h>, included by every OpenSSL header): search the
    # carried one first, or the machine's own (another version, or none) is read.
    local multiarch=$gpu_deps_prefix/include/x86_64-linux-gnu
    [ -d "$multiarch" ] && gpu_cmake_args+=("-DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES=$multiarch"
      "-DCMAKE_CUDA_STANDARD_INCLUDE_DIRECTORIES=$multiarch")
  fi

  # --- The CUDA toolkit: the nvcc on PATH, else /usr/local/cuda's. ---
  local nvcc cuda_home
  nvcc=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
  cuda_home=$(dirname "$(dirname "$nvcc")")
  if [ ! -e "$cuda_home/include/cuda_runtime.h" ] && [ -e /usr/local/cuda/include/cuda_runtime.h ]; then
    # A wrapper script (some images put one in /usr/local/bin) rather than the toolkit's own nvcc.
    cuda_home=/usr/local/cuda nvcc=/usr/local/cuda/bin/nvcc
  fi

  # --- NCCL: beside the toolkit, else beside any nccl.h on this machine (a pip wheel's, say). ---
  local nccl_root=""
  if [ ! -e "$cuda_home/include/nccl.h" ]; then
    # The image's NCCL may come only from a pip wheel (nvidia-nccl-cu13), which ships libnccl.so.2 but no
    # unversioned libnccl.so for find_library: name both files to CMake.
    # Only an nccl.h with the library beside it (PyTorch also ships a C++ header named nccl.h).
    local h r lib nccl_h="" nccl_lib=""
    while read -r h; do
      r=$(dirname "$(dirname "$h")")
      lib=$(find "$r/lib" "$r/lib64" -maxdepth 1 -name 'libnccl.so*' 2>/dev/null | sort | head -1)
      if [ -n "$lib" ]; then
        nccl_h=$h nccl_lib=$lib
        break
      fi
    done < <(find / \( -path /proc -o -path /sys -o -path "$root" \) -prune -o -name nccl.h -print 2>/dev/null | sort)
    if [ -n "$nccl_lib" ]; then
      local nccl_lib_dir
      nccl_lib_dir=$(dirname "$nccl_lib")
      nccl_root=$(dirname "$nccl_lib_dir")
      gpu_cmake_args+=("-DMNISTDP_NCCL_ROOT=$nccl_root" "-DNCCL_INCLUDE_DIR=$(dirname "$nccl_h")"
        "-DNCCL_LIBRARY=$nccl_lib")
      _gpu_deps_ld_prepend "$nccl_lib_dir"
      echo "gpu_deps_setup: NCCL from $nccl_lib"
    else
      echo "gpu_deps_setup: warning: no NCCL library found beside any nccl.h; the configure will fail" >&2
    fi
  fi

  if $isolated; then
    # The roots, under which CMake moves every search path (a path already inside one stays as it is): the
    # unpacked packages (so /usr/include becomes build/devdeps/usr/include), the toolkit under both of its
    # names (/usr/local/cuda is often a link to /usr/local/cuda-13.0, and FindCUDAToolkit uses either), NCCL's.
    gpu_deps_roots=("$(dirname "$gpu_deps_prefix")" "$cuda_home")
    local real
    real=$(cd "$cuda_home" && pwd -P)
    [ "$real" != "$cuda_home" ] && gpu_deps_roots+=("$real")
    [ -n "$nccl_root" ] && gpu_deps_roots+=("$nccl_root")
    local roots
    roots=$(IFS=';' && echo "${gpu_deps_roots[*]}")
    gpu_cmake_args+=("-DCMAKE_FIND_ROOT_PATH=$roots" -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY
      -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY
      # The same toolkit for the compiler as for the libraries.
      "-DCMAKE_CUDA_COMPILER=$nvcc")
    # FindCUDAToolkit looks for librt for CUDA::cudart_static (unused here) and warns when it is not in the
    # roots: it is the C library's, part of the toolchain, so name the compiler's own.
    local rt
    rt=$("${CXX:-c++}" -print-file-name=librt.a 2>/dev/null)
    [ -f "$rt" ] && gpu_cmake_args+=("-DCUDAToolkit_rt_LIBRARY=$rt")
  fi
  return 0
}

# _gpu_deps_ld_prepend DIR: DIR first in LD_LIBRARY_PATH, once however often gpu_deps_setup runs.
_gpu_deps_ld_prepend() {
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$1:"*) ;;
    *) export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

# _gpu_deps_unpack ARCHIVE DIR: unpacks ARCHIVE into DIR (replacing it) unless DIR already holds that archive's
# contents, and relocates the few package files that name /usr outright. xz, else Python's tarfile (both
# read the archive; the GPU machine is sure to have Python, less so xz).
_gpu_deps_unpack() {
  local archive=$1 dir=$2 sum
  sum=$(cksum <"$archive") || return 1
  if [ -d "$dir/usr" ] && [ "$(cat "$dir/.archive-cksum" 2>/dev/null)" = "$sum" ]; then
    return 0
  fi
  local tmp=$dir.tmp
  rm -rf "$tmp" && mkdir -p "$tmp" || return 1
  if command -v xz >/dev/null 2>&1; then
    tar -xJf "$archive" -C "$tmp" || { echo "gpu_deps_setup: could not unpack $archive" >&2; return 1; }
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
      "$archive" "$tmp" || { echo "gpu_deps_setup: could not unpack $archive (no xz; python3 failed)" >&2; return 1; }
  fi
  # The archive's files all carry one fixed time (it is made reproducible): dated now instead, so that a build
  # that read the previous unpacking's headers sees them changed and compiles again.
  find "$tmp" -exec touch -h {} + || return 1
  local prefix f
  prefix=$(cd "$tmp" && pwd -P) || return 1
  prefix=${prefix%.tmp}/usr
  # Debian's package files mostly locate themselves; OpenBLAS's CMake file (SET(... /usr/include/...)) and the
  # pkg-config files name /usr outright. A quoted "/usr/lib/cmake/..." is CMake's "/usr move" check (the
  # original install path, compared with where the file is read from) and must stay; a quoted "/usr/include
  # is a plain include folder.
  while IFS= read -r f; do
    sed -i -E -e 's#([ (])/usr/(include|lib)#\1'"$prefix"'/\2#g' -e 's#"/usr/include#"'"$prefix"'/include#g' "$f" ||
      return 1
  done < <(grep -rlE '([ (]/usr/(include|lib))|"/usr/include' "$tmp/usr" --include='*.cmake' 2>/dev/null)
  while IFS= read -r f; do
    sed -i -E 's#^([A-Za-z_]+)=/usr(/|$)#\1='"$prefix"'\2#' "$f" || return 1
  done < <(grep -rlE '^[A-Za-z_]+=/usr(/|$)' "$tmp/usr" --include='*.pc' 2>/dev/null)
  echo "$sum" >"$tmp/.archive-cksum"
  rm -rf "$dir" && mv "$tmp" "$dir" || return 1
  echo "gpu_deps_setup: unpacked $archive into $dir"
}
