#!/usr/bin/env bash
# The GPU run's rehearsal (docs/gpu-run.md): scripts/gpu-session.sh --emulated end to end on emulated devices, then
# what it leaves checked: the summary names every phase with its result and time; $OUT holds the three files a
# device machine returns (at most 8, no folder); the training paths that promise the plain path's bits have them;
# bench/gpu_record.py refuses the rehearsal as a GPU result, records it into a copy of the repository with
# --emulated-rehearsal, and fills the docs' GPU tables from a GPU run (made up from the rehearsal, in a copy) so
# that bench/results_tables.py --check passes there; a phase past its limit is named stopped.
#   tests/scripts/test_gpu_session.sh        (from the repository root; builds what preset emu lacks)
# shellcheck disable=SC2015 # "CHECK && ok ... || fail ...": ok only prints, so fail runs when CHECK fails alone
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
ok() { echo "ok: $*"; }

# --- The rehearsal itself. ---
out=$tmp/out
set +e
OUT=$out TOTAL=600 scripts/gpu-session.sh --emulated >"$tmp/session.log" 2>&1
rc=$?
set -e
tail -n 40 "$tmp/session.log"
[ "$rc" = 0 ] && ok "the rehearsal exits 0" || fail "the rehearsal exited $rc"

# --- What comes back: at most 8 files, none in a folder, each under 16 MiB. ---
files=$(cd "$out" && find . -mindepth 1 | sed 's#^\./##' | sort | tr '\n' ' ')
[ "$files" = "logs.tar.gz session.json summary.md " ] && ok "\$OUT holds summary.md, session.json, logs.tar.gz" ||
  fail "\$OUT holds '$files', not the three files"
big=$(find "$out" -type f -size +16M)
[ -z "$big" ] && ok "every file is under 16 MiB" || fail "over 16 MiB: $big"
tar -tzf "$out/logs.tar.gz" >"$tmp/logs.txt"
grep -q 'train/metrics-fast-path.jsonl' "$tmp/logs.txt" && ok "the logs hold the training metrics" ||
  fail "logs.tar.gz lacks train/metrics-fast-path.jsonl"

# --- The summary, printed last: every phase, its result and seconds. ---
summary=$out/summary.md
grep -q "REHEARSED on emulated devices" "$summary" && ok "the summary says it is a rehearsal" ||
  fail "the summary does not say it ran on emulated devices"
for want in "build passed" "tests passed" "train passed" "sanitizer skipped" "bench passed" "pytorch skipped"; do
  name=${want% *} result=${want#* }
  grep -qE "^\| $name \| $result \| [0-9]+ \| .+ \|$" "$summary" && ok "summary: $name $result, with its time" ||
    fail "summary: no line '| $name | $result | SECONDS | DETAIL |'"
done
tail -n 3 "$tmp/session.log" | grep -q "bench/gpu_record.py" && ok "the summary is printed last" ||
  fail "the output does not end with the summary"

# --- The figures: every training path ran; the seven that promise the plain path's bits have them, and
# --strategy dataparallel the all-reduce's parameters. ---
python3 - "$out/session.json" <<'PY' || fail "session.json's figures (above)"
import json, sys
s = json.load(open(sys.argv[1]))
train = s["figures"]["train"]
assert s["emulated"] and s["mode"] == "emulated", "not marked emulated"
assert len(train) == 13 and all(r["exit"] == 0 and r["steps"] == 24 for r in train), "a training path did not run"
same = [r["name"] for r in train if r.get("same_bits_as_plain") is True]
assert len(same) == 8 and "dataparallel-2" in same, f"paths with the bits they promise: {same}"
assert all("step_us" not in r for r in train), "an emulated time was kept"
bench = s["figures"]["bench"]
assert bench.get("kernels_b64") and all(v["check"] == "ok" for v in bench["kernels_b64"].values()), bench.keys()
assert all("hot_us" not in v for v in bench["kernels_b64"].values()), "an emulated kernel time was kept"
print("ok: session.json: 13 paths ran, 8 with the bits they promise, the kernels checked, no time kept")
PY

# --- A planted difference: one path's parameters changed, and the training table says DIFFER. ---
mkdir -p "$tmp/planted"
tar -xzf "$out/logs.tar.gz" -C "$tmp/planted" ./train
awk -F'\t' 'BEGIN { OFS = "\t" } $1 == "pdl" { $5 = "0" substr($5, 2) } { print }' "$tmp/planted/train/runs.tsv" \
  >"$tmp/runs.tsv" && mv "$tmp/runs.tsv" "$tmp/planted/train/runs.tsv"
if python3 scripts/gpu/session_report.py --train "$tmp/planted/train" --mode emulated >"$tmp/planted.txt"; then
  fail "a path with other parameters than the plain path's passes"
else
  grep -q "DIFFER from the plain path's parameters or losses: pdl" "$tmp/planted.txt" &&
    ok "a path with other parameters is named (DIFFER: pdl)" || fail "the planted difference is not named"
fi

# --- The record: refused as a GPU result; a rehearsal's record in a copy of the repository. ---
copy() {  # a copy of the working tree (tracked and untracked-not-ignored files) at $1
  mkdir -p "$1"
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$1"
}
if python3 bench/gpu_record.py "$out" --root "$tmp/refused" >"$tmp/refused.txt" 2>&1; then
  fail "bench/gpu_record.py took a rehearsal as a GPU result"
else
  grep -q "no GPU result" "$tmp/refused.txt" && ok "bench/gpu_record.py refuses a rehearsal without --emulated-rehearsal" ||
    fail "the refusal does not say why: $(cat "$tmp/refused.txt")"
fi
copy "$tmp/repo"
python3 bench/gpu_record.py "$out" --root "$tmp/repo" --emulated-rehearsal >"$tmp/record.txt" 2>&1 ||
  fail "bench/gpu_record.py --emulated-rehearsal: $(cat "$tmp/record.txt")"
record=$(find "$tmp/repo/bench/results" -maxdepth 1 -name '*_emu_*' | head -n 1)
[ -f "$record/record.json" ] && ok "the rehearsal's record: bench/results/$(basename "$record")" ||
  fail "no bench/results/DATE_emu_COMMIT/record.json"
grep -A2 "results-table: gpu-phases" "$tmp/repo/docs/gpu-run.md" | grep -q "EMULATED rehearsal" &&
  ok "docs/gpu-run.md shows the rehearsal's phases, labelled" || fail "docs/gpu-run.md's phases table"
grep -A3 "results-table: gpu-readme" "$tmp/repo/README.md" | grep -q "none recorded yet" &&
  ok "README.md shows no rehearsal figure as a GPU figure" || fail "README.md shows a rehearsal's figures"

# --- A GPU run, made up from the rehearsal (in a copy only), fills README.md's and docs/benchmarks.md's rows. ---
mkdir -p "$tmp/made-up"
python3 - "$out/session.json" "$tmp/made-up/session.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s.update(mode="gpu", emulated=False)
s["machine"]["gpu"] = "NVIDIA H200 (made up by tests/scripts/test_gpu_session.sh)"
for i, r in enumerate(s["figures"]["train"]):
    r["step_us"] = 10.0 + i
s["figures"]["pytorch"] = {"tensor": {"epochs": 3, "step_us": 123.45, "test_accuracy": 0.8, "torch": "2.11"}}
json.dump(s, open(sys.argv[2], "w"))
PY
copy "$tmp/repo2"
python3 bench/gpu_record.py "$tmp/made-up" --root "$tmp/repo2" >"$tmp/record2.txt" 2>&1 ||
  fail "bench/gpu_record.py on a GPU run: $(cat "$tmp/record2.txt")"
grep -q "| mnist-dp fast-path | 17.00 |" "$tmp/repo2/README.md" && grep -q "| PyTorch 2.11 tensor | 123.45 | 80.00% |" \
  "$tmp/repo2/README.md" && ok "README.md's GPU rows are the record's" || fail "README.md's GPU rows"
grep -q "| mnist-dp persistent-64 | 16.00 | .* | equal |" "$tmp/repo2/docs/benchmarks.md" &&
  ok "docs/benchmarks.md's GPU rows are the record's" || fail "docs/benchmarks.md's GPU rows"
python3 bench/results_tables.py --check --root "$tmp/repo2" >/dev/null && ok "the copy's tables check" ||
  fail "bench/results_tables.py --check on the copy"

# --- A phase past its limit is stopped and named so; the others go on. ---
set +e
OUT=$tmp/out-stopped PHASES="train" LIMIT_train=3 scripts/gpu-session.sh --emulated >"$tmp/stopped.log" 2>&1
rc=$?
set -e
[ "$rc" != 0 ] && ok "a stopped phase makes the exit status non-zero" || fail "a stopped phase exits 0"
grep -qE "^\| train \| stopped \| [0-9]+ \| stopped at its 3s limit" "$tmp/out-stopped/summary.md" &&
  ok "the phase past its limit is named stopped" || fail "the stopped phase: $(grep '| train' "$tmp/out-stopped/summary.md")"
grep -qE "^\| build \| skipped \| 0 \| not in PHASES \|$" "$tmp/out-stopped/summary.md" &&
  ok "a phase not asked for is named skipped" || fail "the phases not in PHASES"

[ "$failures" = 0 ] || { echo "test_gpu_session.sh: $failures check(s) failed" >&2; exit 1; }
echo "test_gpu_session.sh: every check passed"
