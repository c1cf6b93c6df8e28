#!/usr/bin/env bash
# The core micro-benchmark, nabla beside PyTorch on this machine, in one go.
#
# Builds nabla_micro (Release, in its own build dir), makes sure .venv-bench has PyPI's PyTorch
# (scripts/bench-env.sh), then for each thread count runs nabla_micro and bench/micro_torch.py one
# after the other (nabla, PyTorch, nabla, PyTorch...) and prints one table:
#   operation, size, threads, unit, nabla median [min-max], PyTorch median [min-max], nabla/PyTorch
#
# usage: bench/run_micro.sh [--csv] [--threads "1 2"] [--ops sgemm,add,...] [--build-dir DIR]
#                           [--no-build] [--raw FILE] [--torch-keep-memory] [--retries N]
#                           [--busy-threshold CPUS]
#                           [-- extra args for both programs]
#   --csv        print the merged table as CSV (op,size,threads,unit,nabla,nabla_min,nabla_max,
#                torch,torch_min,torch_max,ratio,other_cpu) instead of the text table
#   --threads    thread counts to run (default: "1 N", N = the number of cores)
#   --raw FILE   also keep both programs' raw output in FILE
#   --retries N  on a shared machine: both programs report how many CPUs other processes kept
#                busy during each case; ops disturbed beyond --busy-threshold (default 0.15 CPUs)
#                are run again on both sides, up to N times (default 2), and the least
#                disturbed measurement of each side is kept
#   --torch-keep-memory  run PyTorch with glibc told to keep freed memory (MALLOC_MMAP_MAX_=0,
#                MALLOC_TRIM_THRESHOLD_=-1): without it, PyTorch's large outputs are fresh mmaps
#                paid for in page faults every run (nabla caches its buffers)
# The environment passes through: OPENBLAS_CORETYPE=SkylakeX, for one, reaches nabla's OpenBLAS.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

csv=0
ncpu=$(nproc)
threads="1 $ncpu"
[ "$ncpu" -eq 1 ] && threads="1"
ops=""
build_dir="$root/build-bench"
build=1
raw=""
retries=2
busy_thr=0.15
torch_env=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --csv) csv=1 ;;
    --threads) threads="$2"; shift ;;
    --ops) ops="$2"; shift ;;
    --build-dir) build_dir="$2"; shift ;;
    --no-build) build=0 ;;
    --raw) raw="$2"; shift ;;
    --retries) retries="$2"; shift ;;
    --busy-threshold) busy_thr="$2"; shift ;;
    --torch-keep-memory) torch_env=(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=-1) ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run_micro: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "$@" >&2; }

if [ "$build" -eq 1 ]; then
  log "run_micro: building nabla_micro (Release) in $build_dir"
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DNABLA_BUILD_TESTS=OFF -DNABLA_BUILD_EXAMPLES=OFF -DNABLA_BUILD_BENCH=ON >/dev/null
  cmake --build "$build_dir" --target nabla_micro >/dev/null
fi
micro="$build_dir/bench/nabla_micro"
[ -x "$micro" ] || { log "run_micro: $micro not built"; exit 1; }

"$root/scripts/bench-env.sh" >&2
py="$root/.venv-bench/bin/python"

args=()
[ -n "$ops" ] && args+=(--ops "$ops")
args+=("${extra[@]}")

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
run_pair() { # threads, then extra args for both programs
  local t=$1; shift
  log "run_micro: nabla, $t thread(s) $*"
  "$micro" --threads "$t" "${args[@]}" "$@" >>"$out" || status=1
  log "run_micro: PyTorch, $t thread(s) $*"
  env "${torch_env[@]}" "$py" "$root/bench/micro_torch.py" --threads "$t" "${args[@]}" "$@" >>"$out" || status=1
}
# The ops of thread count $1 whose best measurement so far (either side) ran beside other work.
disturbed_ops() {
  awk -F, -v t="$1" -v thr="$busy_thr" '
    $1 == "impl" || /^#/ || $4 != t { next }
    { k = $1 "," $2 "," $3; o = ($10 == "" || $10 < 0) ? 0 : $10
      if (!(k in best) || o <= best[k]) best[k] = o; op[k] = $2 }
    END { for (k in best) if (best[k] > thr) bad[op[k]] = 1
          s = ""; for (o in bad) s = s (s == "" ? "" : ",") o; print s }' "$out"
}
echo "# run_micro: $(date -u +%Y-%m-%dT%H:%MZ), load before: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
for t in $threads; do
  run_pair "$t"
  for ((r = 1; r <= retries; r++)); do
    bad=$(disturbed_ops "$t")
    [ -z "$bad" ] && break
    log "run_micro: other processes were busy during $bad at $t thread(s): again ($r/$retries)"
    run_pair "$t" --ops "$bad"
  done
done
echo "# run_micro: load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
[ -n "$raw" ] && cp "$out" "$raw"

# Merge on op,size,threads: for each side the measurement with the least other work beside it
# (the latest of equals), in the order the cases first came.
awk -F, -v csv="$csv" -v thr="$busy_thr" '
  /^#/ { if (!($0 in seen_c)) { seen_c[$0] = 1; comments[nc++] = $0 }; next }
  $1 == "impl" { next }
  {
    k = $2 "," $3 "," $4
    if (!(k in seen)) { seen[k] = 1; order[n++] = k; unit[k] = $5 }
    o = ($10 == "" || $10 < 0) ? 0 : $10 + 0
    if (($1, k) in oth && o > oth[$1, k]) next
    med[$1, k] = $6; lo[$1, k] = $7; hi[$1, k] = $8; oth[$1, k] = o
  }
  function fig(impl, k) {
    if (!((impl, k) in med) || med[impl, k] == "nan") return "n/a"
    return sprintf("%.1f [%.1f-%.1f]", med[impl, k], lo[impl, k], hi[impl, k])
  }
  function ratio(k) {
    if (!(("nabla", k) in med) || !(("torch", k) in med)) return "n/a"
    if (med["nabla", k] == "nan" || med["torch", k] == "nan" || med["torch", k] + 0 == 0) return "n/a"
    return sprintf("%.2f", med["nabla", k] / med["torch", k])
  }
  function busy(k) { return oth["nabla", k] > oth["torch", k] ? oth["nabla", k] : oth["torch", k] }
  END {
    if (csv) {
      print "op,size,threads,unit,nabla,nabla_min,nabla_max,torch,torch_min,torch_max,ratio,other_cpu"
      for (i = 0; i < n; i++) {
        k = order[i]; r = ratio(k)
        nm = (("nabla", k) in med) ? med["nabla", k] : "nan"
        tm = (("torch", k) in med) ? med["torch", k] : "nan"
        printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%.2f\n", k, unit[k], nm, lo["nabla", k], hi["nabla", k],
          tm, lo["torch", k], hi["torch", k], (r == "n/a" ? "nan" : r), busy(k)
      }
      exit
    }
    for (i = 0; i < nc; i++) print comments[i]
    printf "%-12s %-10s %7s %-8s %24s %24s %7s %6s\n", "operation", "size", "threads", "unit",
      "nabla median [min-max]", "PyTorch median [min-max]", "ratio", "other"
    for (i = 0; i < n; i++) {
      k = order[i]; split(k, f, ",")
      printf "%-12s %-10s %7s %-8s %24s %24s %7s %5.2f%s\n", f[1], f[2], f[3], unit[k], fig("nabla", k),
        fig("torch", k), ratio(k), busy(k), (busy(k) > thr ? "*" : "")
    }
    printf "ratio = nabla / PyTorch (above 1: nabla is faster). other = CPUs kept busy by other\n"
    printf "processes while the case ran (the larger of the two sides); * = above %s: disturbed.\n", thr
  }' "$out"
exit $status
