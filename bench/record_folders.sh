# Where a benchmark run's raw files and its record go. Sourced, from the repository's root, by the scripts that
# record a run: bench/compare.sh, bench/gemm_survey.sh, bench/multiprocess_cpu.sh and bench/emu_step.sh.
#
#   record_folders OUT RECORD NAME      sets raw_dir and record_dir
#
# OUT is the folder named for the run's files, or "" for build/bench-runs/NAME (git ignores build/). RECORD is the
# folder of the run's record (record.json, bench/make_record.py), "" for bench/results/ under OUT's name, or
# "none" for no record (record_dir is then ""). bench/results/ keeps records only: an OUT inside it, as these
# scripts were given before, names the record's folder, and the raw files go to build/bench-runs/ under that name.
record_folders() {
  local out=$1 record=$2 name=$3 results
  results=$(realpath -m bench/results)
  if [ -n "$out" ]; then
    name=$(basename "$(realpath -m "$out")")
    case "$(realpath -m "$out")" in
      "$results"/*)
        [ -n "$record" ] || record=$out
        out="" ;;
    esac
  fi
  raw_dir=${out:-build/bench-runs/$name}
  record_dir=${record:-bench/results/$name}
  [ "$record_dir" != none ] || record_dir=""
}
