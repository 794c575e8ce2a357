#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/idx and tests/fuzz/corpus/checkpoint.
# Small files, valid ones and malformed ones; the output is the same on every run (gzip -n).
#   tests/fuzz/make_corpus.sh
set -euo pipefail
cd "$(dirname "$0")"
. ../cli/checks.sh  # be32, the IDX header's big-endian counts
idx=corpus/idx
ck=corpus/checkpoint
rm -rf "$idx" "$ck"
mkdir -p "$idx" "$ck"

le64() { local i; for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(($1 >> (8 * i) & 255)))"; done; }
# N images of 28x28 whose pixels count up from 0, wrapping at 256.
pixels() { local n=$(($1 * 784)) i; for ((i = 0; i < n; ++i)); do printf "\\x$(printf %02x $((i & 255)))"; done; }
images_header() { printf '\x00\x00\x08\x03'; be32 "$1"; be32 "$2"; be32 "$3"; }  # count rows cols
labels_header() { printf '\x00\x00\x08\x01'; be32 "$1"; }

# ---- IDX ----
{ images_header 2 28 28; pixels 2; } >"$idx/images-2"
gzip -9 -n -c "$idx/images-2" >"$idx/images-2.gz"
images_header 0 28 28 >"$idx/images-0"
{ labels_header 2; printf '\x03\x09'; } >"$idx/labels-2"
gzip -9 -n -c "$idx/labels-2" >"$idx/labels-2.gz"
labels_header 0 >"$idx/labels-0"
{ labels_header 3; printf '\x01\x0a\x02'; } >"$idx/labels-out-of-range"
{ images_header 2 28 28; pixels 1; } >"$idx/images-truncated-data"
head -c 10 "$idx/images-2" >"$idx/images-truncated-header"
{ images_header 1 28 28; pixels 1; printf 'xyz'; } >"$idx/images-trailing"
{ images_header 1 27 28; head -c 756 /dev/zero; } >"$idx/images-27x28"
{ images_header 4294967295 28 28; pixels 1; } >"$idx/images-huge-count"
{ printf '\x00\x00\x0c\x03'; be32 1; be32 28; be32 28; } >"$idx/images-int32"
{ printf '\x00\x00\x08\x02'; be32 1; be32 28; } >"$idx/images-two-dims"
printf '<!DOCTYPE html><html><body>Not Found</body></html>\n' >"$idx/html"
head -c 40 "$idx/images-2.gz" >"$idx/images-2-cut.gz"

# ---- checkpoints ----
# The fuzz target also parses every input followed by SimpleNet's whole data section (814,120 zero bytes),
# so these files are the 8-byte header length and the JSON header only.
header() {  # header NAME JSON: the JSON padded with spaces to a multiple of 8, as safetensors writers do
  local json=$2
  while ((${#json} % 8 != 0)); do json+=' '; done
  { le64 "${#json}"; printf '%s' "$json"; } >"$ck/$1"
}
fc1w='"fc1.weight":{"dtype":"F32","shape":[256,784],"data_offsets":[0,802816]}'
fc1b='"fc1.bias":{"dtype":"F32","shape":[256],"data_offsets":[802816,803840]}'
fc2w='"fc2.weight":{"dtype":"F32","shape":[10,256],"data_offsets":[803840,814080]}'
fc2b='"fc2.bias":{"dtype":"F32","shape":[10],"data_offsets":[814080,814120]}'
tensors="$fc1w,$fc1b,$fc2w,$fc2b"
meta='"mnist_dp.batch_size":"64","mnist_dp.data_fingerprint":"edb549ccecd20530","mnist_dp.epoch":"1",'
meta+='"mnist_dp.format_version":"1","mnist_dp.seed":"0","mnist_dp.sgd.dampening":"0","mnist_dp.sgd.lr":"0.01",'
meta+='"mnist_dp.sgd.momentum":"0","mnist_dp.sgd.nesterov":"false","mnist_dp.sgd.weight_decay":"0",'
meta+='"mnist_dp.step":"938"'

header mnist-dp "{\"__metadata__\":{$meta},$tensors}"
header pytorch "{\"__metadata__\":{\"format\":\"pt\"},$tensors}"
header no-metadata "{$tensors}"
header reordered "{$fc2b,$fc1b,\"__metadata__\":{\"format\":\"pt\"},$fc2w,$fc1w}"
header momentum-short "{\"__metadata__\":{$meta,\"mnist_dp.momentum\":\"AAAAAAAAAAA=\"},$tensors}"
header bad-base64 "{\"__metadata__\":{$meta,\"mnist_dp.momentum\":\"A*==\"},$tensors}"
header bad-epoch "{\"__metadata__\":{\"mnist_dp.format_version\":\"1\",\"mnist_dp.epoch\":\"-1\"},$tensors}"
header version-2 "{\"__metadata__\":{\"mnist_dp.format_version\":\"2\"},$tensors}"
header extra-tensor "{$tensors,\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[814120,814128]}}"
header f16 "{${fc1w/F32/F16},$fc1b,$fc2w,$fc2b}"
header transposed "{${fc1w/256,784/784,256},$fc1b,$fc2w,$fc2b}"
header missing-tensor "{$fc1w,$fc1b,$fc2w}"
header overlap "{$fc1w,$fc1b,${fc2w/803840,814080/803836,814076},$fc2b}"
header duplicate-key "{$tensors,$fc2b}"
header metadata-number "{\"__metadata__\":{\"a\":1},$tensors}"
header deep '{"a":[[[[[[[[[[1]]]]]]]]]]}'
header not-object '[1,2,3]'
header bad-json "{\"__metadata__\":{\"a\":\"b\"},$fc1w"
{ le64 1000000; printf '{}'; } >"$ck/length-past-end"
{ le64 18446744073709551615; } >"$ck/length-huge"
printf 'short' >"$ck/too-short"
echo "make_corpus.sh: $(ls "$idx" | wc -l) IDX files, $(ls "$ck" | wc -l) checkpoint files"
