#!/usr/bin/env bash
# Downloads the four MNIST files (.gz; mnist-dp reads them compressed) and checks each against the MD5 sum that
# torchvision uses. A file only gets its final name once its checksum has passed, so an interrupted or failed
# download never leaves a file that looks complete.
set -euo pipefail

readonly DEFAULT_DIR="./data/MNIST/raw"
readonly DEFAULT_MIRRORS=(
  "https://ossci-datasets.s3.amazonaws.com/mnist/"
  "http://yann.lecun.com/exdb/mnist/"
)
readonly FILES=(
  "train-images-idx3-ubyte.gz f68b3c2dcbeaaa9fbdd348bbdeb94873"
  "train-labels-idx1-ubyte.gz d53e105ee54ea40749a09fcbcd1e9432"
  "t10k-images-idx3-ubyte.gz 9fb629c4189551a2d022fa330f9573f3"
  "t10k-labels-idx1-ubyte.gz ec29112dd5afa0611ce80d1b7f02629c"
)
TMP_FILES=()  # partial downloads, removed on exit whatever happens

usage() {
  cat <<EOF
Usage: $(basename "$0") [--mirror URL] [DIR]

Downloads the four MNIST files into DIR (default: ${DEFAULT_DIR}) and checks their MD5 sums.
Files already there with the right checksum are kept. Then train with: mnist-dp train --data DIR

Options:
  --mirror URL  download from URL only (the file names are appended to it; also the MNIST_MIRROR
                variable).
                Default: ${DEFAULT_MIRRORS[0]}
                then, for files that failed there, ${DEFAULT_MIRRORS[1]}
  -h, --help    show this help
EOF
}

die() {
  echo "download-mnist: error: $*" >&2
  exit 1
}

# Prints the MD5 sum of a file, with whichever tool this system has.
md5_of() {
  if command -v md5sum >/dev/null 2>&1; then
    md5sum "$1" | cut -d' ' -f1
  elif command -v md5 >/dev/null 2>&1; then
    md5 -q "$1"
  else
    die "neither md5sum nor md5 is installed: cannot check the downloads"
  fi
}

# Downloads URL to FILE; fails (without a message of its own) when the server does not answer with the file.
fetch() {
  local url=$1 file=$2
  if command -v curl >/dev/null 2>&1; then
    curl --fail --location --silent --show-error --retry 2 --connect-timeout 20 --output "$file" "$url"
  else
    wget --no-verbose --tries=3 --timeout=20 --output-document="$file" "$url"
  fi
}

# Downloads one file from the first mirror that serves it with the right checksum. It runs on the left of ||,
# where bash ignores set -e, so every step that can fail is checked by hand.
download_one() {
  local name=$1 md5=$2 dir=$3
  shift 3
  local target="${dir}/${name}"
  if [[ -f "${target}" && "$(md5_of "${target}")" == "${md5}" ]]; then
    echo "${target}: already present, checksum OK"
    return 0
  fi
  local mirror tmp
  for mirror in "$@"; do
    tmp="$(mktemp "${dir}/.${name}.XXXXXX")" || {
      echo "download-mnist: error: cannot create a temporary file in ${dir}" >&2
      return 1
    }
    TMP_FILES+=("${tmp}")
    echo "downloading ${mirror}${name}"
    if ! fetch "${mirror}${name}" "${tmp}"; then
      echo "download-mnist: ${mirror}${name}: download failed" >&2
      rm -f "${tmp}"
      continue
    fi
    local got
    got="$(md5_of "${tmp}")" || return 1
    if [[ "${got}" != "${md5}" ]]; then
      echo "download-mnist: ${mirror}${name}: wrong MD5 sum ${got}, expected ${md5} (a damaged or different file)" >&2
      rm -f "${tmp}"
      continue
    fi
    # mktemp makes the file private (0600); a data file should get the usual permissions for this user.
    chmod "$(printf '%o' $((0666 & ~0$(umask))))" "${tmp}" || return 1
    mv -f "${tmp}" "${target}" || {
      echo "download-mnist: error: cannot rename ${tmp} to ${target}" >&2
      return 1
    }
    echo "${target}: checksum OK"
    return 0
  done
  echo "download-mnist: error: could not get ${name} with MD5 ${md5} from: $*" >&2
  return 1
}

main() {
  local dir="" mirrors=()
  if [[ -n "${MNIST_MIRROR:-}" ]]; then mirrors=("${MNIST_MIRROR}"); fi
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h | --help)
        usage
        exit 0
        ;;
      --mirror)
        [[ $# -ge 2 && -n "$2" ]] || die "--mirror needs a URL (see --help)"
        mirrors=("$2")
        shift 2
        ;;
      --mirror=*)
        mirrors=("${1#--mirror=}")
        shift
        ;;
      -*) die "unknown option '$1' (see --help)" ;;
      *)
        [[ -z "${dir}" ]] || die "more than one folder given: '${dir}' and '$1' (see --help)"
        dir=$1
        shift
        ;;
    esac
  done
  dir=${dir:-${DEFAULT_DIR}}
  if [[ ${#mirrors[@]} -eq 0 ]]; then mirrors=("${DEFAULT_MIRRORS[@]}"); fi
  # The file name is appended to the mirror, so it must end in exactly one slash.
  local i
  for i in "${!mirrors[@]}"; do mirrors[i]="${mirrors[i]%/}/"; done

  if ! command -v curl >/dev/null 2>&1 && ! command -v wget >/dev/null 2>&1; then
    die "neither curl nor wget is installed (apt-get install curl)"
  fi
  if ! command -v md5sum >/dev/null 2>&1 && ! command -v md5 >/dev/null 2>&1; then
    die "neither md5sum nor md5 is installed: cannot check the downloads"
  fi
  mkdir -p "${dir}" || die "cannot create the folder ${dir}"
  [[ -w "${dir}" ]] || die "cannot write to the folder ${dir}"

  trap 'rm -f "${TMP_FILES[@]}"' EXIT

  local entry failed=0
  for entry in "${FILES[@]}"; do
    # shellcheck disable=SC2086  # the entry is "name md5", split on purpose
    download_one ${entry} "${dir}" "${mirrors[@]}" || failed=1
  done
  if [[ ${failed} -ne 0 ]]; then
    die "some files are missing from ${dir}; try again, or pass another --mirror"
  fi
  echo "MNIST is in ${dir}. Train with: mnist-dp train --data ${dir}"
}

main "$@"
