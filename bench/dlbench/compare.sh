#!/usr/bin/env bash
# DLBench, nabla beside PyTorch on this machine, in one go (issue 5; issue 3's CNN/ResNet-20 with
# --model cnn,resnet20 --threads 1,2).
#
# Builds the Release `nabla` (in its own build dir), makes sure .venv-bench has PyPI's PyTorch
# (scripts/bench-env.sh), measures the machine's sgemm peak at each thread count (nabla's and
# PyTorch's 2048^3 matmul, before the networks and again after them; the peak is the fastest of the
# four, since a shared host can be slow at either end) and its FMA ceiling (as many copies of
# bench/fma_peak.c's probe at once as threads: the float32 FMA rate of that many cores, which no
# product exceeds), then for each network and thread
# count runs `nabla bench` and bench/dlbench/torch_bench.py one after the other, alternating
# (nabla, PyTorch, nabla, PyTorch... so load drifts hit both), each in a fresh process. Prints a
# markdown table: per network x threads, the median seconds per mini-batch of each, the ratio
# PyTorch/nabla (> 1: nabla faster), GFLOP/s and the fractions of the sgemm peak and of the FMA
# ceiling (GFLOP/s count 3 x DLBENCH.md's forward FLOPs, so a network whose first layer needs no
# input gradient, or one on Winograd's fewer multiplications, can pass 100%). The raw JSON lines
# go to the results directory (nabla.jsonl, torch.jsonl, peak.jsonl, env.txt, summary.md), which
# bench/dlbench/plot.py turns into a chart.
#
# usage: bench/dlbench/compare.sh [--model a,b,...] [--threads 1,2,...] [--iters N] [--warmup N]
#                                 [--batch-size N] [--data synthetic|real] [--data-dir DIR]
#                                 [--rounds N] [--results DIR] [--build-dir DIR]
#                                 [--memory-format F] [--torch-memory-format F]
#                                 [--step-in-backward on|off|auto] [--torch-step-in-backward on|off|auto]
#                                 [--cuda-graph on|off]
#                                 [--no-build] [--no-peak] [--plain-env]
#   --model      networks (default: the seven DLBench ones: fcn-s,alexnet-s,resnet-50,fcn-r,
#                alexnet-r,resnet-56,lstm; also cnn, resnet20)
#   --threads    thread counts (default: 1 and the number of cores)
#   --iters, --warmup, --batch-size   passed to both programs (defaults 10, 2, the spec's batch)
#   --data real [--data-dir DIR]      real inputs through each side's own input pipeline:
#                Fashion-MNIST for fcn-r and cnn, CIFAR-10 (binary batches in DIR) for alexnet-r,
#                resnet-56 and resnet20, Penn Treebank (DIR/ptb.train.txt) for lstm (default:
#                synthetic)
#   --memory-format contiguous|channels_last   both sides' layout for the image networks
#                (default contiguous); --torch-memory-format then sets PyTorch's alone
#   --step-in-backward on|off|auto   both sides step each parameter in backward (nabla:
#                nb_optim_step_in_backward; PyTorch: its post-accumulate-grad hook recipe); auto: on
#                for the networks that do not clip their gradients (all but lstm); default off.
#                --torch-step-in-backward then sets PyTorch's alone (its recipe does not make PyTorch
#                faster on the CPU, docs/BENCHMARKS.md, so each side's faster mode is auto / off)
#   --cuda-graph on|off   both sides capture the training step once as a CUDA graph and time its
#                replays (PyTorch: its whole-network capture recipe); default off. A GPU only, and
#                compare.sh runs both programs on their default device, the CPU, where PyTorch's
#                side gives error rows
#   --rounds N   run every (network, threads) pair N times, alternating; each side's lowest
#                median over the rounds is reported (the least disturbed; default 1)
#   --results    where the raw results go (default build-bench/dlbench-results/<UTC time>)
#   --plain-env  do not set the environment below (each library's defaults)
# Environment (both programs get the same, PyTorch's best settings per ../shared/bench/CPU_NOTES.md):
#   OMP_NUM_THREADS=<threads>, OMP_WAIT_POLICY=PASSIVE, MALLOC_MMAP_MAX_=0,
#   MALLOC_TRIM_THRESHOLD_=-1 (glibc keeps freed memory instead of paying page faults again);
#   a value already set in the caller's environment wins.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

models="fcn-s,alexnet-s,resnet-50,fcn-r,alexnet-r,resnet-56,lstm"
ncpu=$(nproc)
threads="1,$ncpu"
[ "$ncpu" -eq 1 ] && threads="1"
iters=10
warmup=2
batch=()
data=()
rounds=1
mf_nabla=contiguous
mf_torch=contiguous
sib=off
sib_torch=off
cg=off
results=""
build_dir="$root/build-bench"
build=1
peak=1
plain=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) models="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    --iters) iters="$2"; shift ;;
    --warmup) warmup="$2"; shift ;;
    --batch-size) batch=(--batch-size "$2"); shift ;;
    --data) data+=(--data "$2"); shift ;;
    --data-dir) data+=(--data-dir "$2"); shift ;;
    --memory-format) mf_nabla="$2"; mf_torch="$2"; shift ;;
    --torch-memory-format) mf_torch="$2"; shift ;;
    --step-in-backward) sib="$2"; sib_torch="$2"; shift ;;
    --torch-step-in-backward) sib_torch="$2"; shift ;;
    --cuda-graph) cg="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --results) results="$2"; shift ;;
    --build-dir) build_dir="$2"; shift ;;
    --no-build) build=0 ;;
    --no-peak) peak=0 ;;
    --plain-env) plain=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for v in "$sib" "$sib_torch"; do
  [[ "$v" =~ ^(on|off|auto)$ ]] ||
    { echo "compare: --step-in-backward: expected on, off or auto, got \"$v\"" >&2; exit 2; }
done
[[ "$cg" =~ ^(on|off)$ ]] || { echo "compare: --cuda-graph: expected on or off, got \"$cg\"" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare: --rounds: expected an integer >= 1, got \"$rounds\"" >&2; exit 2; }
[[ "$threads" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "compare: --threads: expected comma-separated integers >= 1, got \"$threads\"" >&2; exit 2; }
log() { echo "compare: $*" >&2; }

if [ "$build" -eq 1 ]; then
  if [ -f "$build_dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_BUILD_TYPE:[A-Z]*=Release$' "$build_dir/CMakeCache.txt"; then
    log "$build_dir is not a Release build; choose another with --build-dir"; exit 2
  fi
  [ -f "$build_dir/CMakeCache.txt" ] || cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  log "building nabla (Release) in $build_dir"
  targets=(nabla_cli)
  grep -q '^NABLA_BUILD_BENCH:BOOL=ON$' "$build_dir/CMakeCache.txt" && targets+=(nabla_fma_peak)
  if ! cmake --build "$build_dir" --target "${targets[@]}" >"$build_dir/compare-build.log" 2>&1; then
    grep -E 'error|FAILED' "$build_dir/compare-build.log" | head -20 >&2
    log "the build failed (log: $build_dir/compare-build.log)"; exit 1
  fi
fi
nabla="$build_dir/tools/nabla"
[ -x "$nabla" ] || { log "$nabla not built"; exit 1; }
"$root/scripts/bench-env.sh" >&2
py="$root/.venv-bench/bin/python"

[ -n "$results" ] || results="$build_dir/dlbench-results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$results"
: >"$results/nabla.jsonl"
: >"$results/torch.jsonl"
: >"$results/peak.jsonl"

run_env() { # threads, command...: the command with the benchmark environment
  local t=$1; shift
  if [ "$plain" -eq 1 ]; then OMP_NUM_THREADS=$t "$@"; return; fi
  OMP_NUM_THREADS=$t OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} MALLOC_MMAP_MAX_=${MALLOC_MMAP_MAX_:-0} \
    MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:--1} "$@"
}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $ncpu cores"
  echo "nabla: $("$nabla" --version) ($(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "pytorch: $("$py" -c 'import torch; print(torch.__version__)')"
  if [ "$plain" -eq 1 ]; then
    echo "env: plain (OMP_NUM_THREADS only)"
  else
    echo "env: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} MALLOC_MMAP_MAX_=${MALLOC_MMAP_MAX_:-0}" \
      "MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:--1}"
  fi
  echo "command: bench/dlbench/compare.sh --model $models --threads $threads --iters $iters --warmup $warmup" \
    "${batch[*]} ${data[*]} --rounds $rounds --memory-format $mf_nabla --torch-memory-format $mf_torch" \
    "--step-in-backward $sib --torch-step-in-backward $sib_torch --cuda-graph $cg" \
    "$([ "$plain" -eq 1 ] && echo ' --plain-env')"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$results/env.txt"
cat "$results/env.txt" >&2

common=(--iters "$iters" --warmup "$warmup" "${batch[@]}" "${data[@]}" --cuda-graph "$cg" --format json)
status=0
pair() { # model threads outfile-suffix
  local m=$1 t=$2 out=${3:-}
  log "nabla $m, $t thread(s)"
  run_env "$t" "$nabla" bench --model "$m" --threads "$t" --memory-format "$mf_nabla" --step-in-backward "$sib" \
    "${common[@]}" \
    >>"$results/${out:-nabla}.jsonl" || status=1
  log "pytorch $m, $t thread(s)"
  run_env "$t" "$py" "$here/torch_bench.py" --model "$m" --threads "$t" --memory-format "$mf_torch" \
    --step-in-backward "$sib_torch" "${common[@]}" \
    >>"$results/${out:-torch}.jsonl" || status=1
}
IFS=, read -r -a tlist <<<"$threads"
IFS=, read -r -a mlist <<<"$models"
sgemm_peak() { # when (before|after): each side's 2048^3 matmul at each thread count, into peak.jsonl
  local t
  for t in "${tlist[@]}"; do
    log "sgemm peak, $t thread(s), $1 the networks"
    run_env "$t" "$nabla" bench --model sgemm --threads "$t" --iters 5 --warmup 1 --format json |
      sed "s/^{/{\"when\": \"$1\", /" >>"$results/peak.jsonl" || status=1
    run_env "$t" "$py" "$here/torch_bench.py" --model sgemm --threads "$t" --iters 5 --warmup 1 --format json |
      sed "s/^{/{\"when\": \"$1\", /" >>"$results/peak.jsonl" || status=1
  done
}
fma_ceiling() { # at each thread count t, t copies of the FMA probe at once; the sum of their best rates
  local fma="$build_dir/bench/nabla_fma_peak" t i dir gf
  [ -x "$fma" ] || { log "no $fma (NABLA_BUILD_BENCH off?): no FMA ceiling"; return 0; }
  for t in "${tlist[@]}"; do
    log "FMA ceiling, $t core(s)"
    dir=$(mktemp -d)
    for ((i = 0; i < t; i++)); do "$fma" >"$dir/$i" & done
    wait
    gf=$(awk '/^fma / { if ($4 > b[FILENAME]) b[FILENAME] = $4 } END { for (f in b) s += b[f]; printf "%.1f", s }' "$dir"/*)
    rm -r "$dir"
    echo "{\"impl\": \"fma\", \"model\": \"fma_peak\", \"threads\": $t, \"copies\": $t, \"gflops\": $gf}" \
      >>"$results/peak.jsonl"
  done
}
if [ "$peak" -eq 1 ]; then
  fma_ceiling
  sgemm_peak before
fi
for ((r = 1; r <= rounds; r++)); do
  for m in "${mlist[@]}"; do
    for t in "${tlist[@]}"; do pair "$m" "$t"; done
  done
done
[ "$peak" -eq 1 ] && sgemm_peak after
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$results/env.txt"

"$py" - "$results" <<'PY' | tee "$results/summary.md"
import json, os, sys
d = sys.argv[1]
def load(name):
    rows = []
    with open(os.path.join(d, name)) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows
def best(rows):  # per (model, threads): the row with the lowest median (errors only if none ran)
    out = {}
    for r in rows:
        k = (r["model"], r["threads"])
        if k not in out or (r.get("median_s") is not None and
                            (out[k].get("median_s") is None or r["median_s"] < out[k]["median_s"])):
            out[k] = r
    return out
nb, pt, peak, fma = best(load("nabla.jsonl")), best(load("torch.jsonl")), {}, {}
for r in load("peak.jsonl"):  # the sgemm peak: the fastest median of both sides, before and after
    into = fma if r.get("impl") == "fma" else peak
    if r.get("gflops"):
        into[r["threads"]] = max(into.get(r["threads"], 0), r["gflops"])
env = open(os.path.join(d, "env.txt")).read().splitlines()
print("<!-- " + " | ".join(env) + " -->")
print("| network | threads | nabla s/batch | PyTorch s/batch | PyTorch/nabla | nabla GFLOP/s | PyTorch GFLOP/s "
      "| nabla % peak | PyTorch % peak | % FMA ceiling (nabla / PyTorch) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
keys = list(dict.fromkeys(list(nb) + list(pt)))
def fig(r, k, fmt):
    return format(r[k], fmt) if r and r.get(k) is not None else "n/a"
for k in keys:
    a, b = nb.get(k), pt.get(k)
    ratio = (b["median_s"] / a["median_s"]) if a and b and a.get("median_s") and b.get("median_s") else None
    p = peak.get(k[1])
    pa = f"{100 * a['gflops'] / p:.0f}%" if p and a and a.get("gflops") else "n/a"
    pb = f"{100 * b['gflops'] / p:.0f}%" if p and b and b.get("gflops") else "n/a"
    f = fma.get(k[1])
    fa = f"{100 * a['gflops'] / f:.0f}%" if f and a and a.get("gflops") else "n/a"
    fb = f"{100 * b['gflops'] / f:.0f}%" if f and b and b.get("gflops") else "n/a"
    print(f"| {k[0]} | {k[1]} | {fig(a, 'median_s', '.4g')} | {fig(b, 'median_s', '.4g')} | "
          f"{'n/a' if ratio is None else format(ratio, '.2f')} | {fig(a, 'gflops', '.1f')} | "
          f"{fig(b, 'gflops', '.1f')} | {pa} | {pb} | {fa} / {fb} |")
def per_threads(d):
    return ", ".join(f"{t} thread{'s' if t > 1 else ''}: {v:.0f}" for t, v in sorted(d.items()))
if peak:
    print()
    print("sgemm peak (2048^3 float32, the fastest median of nabla's and PyTorch's, before and after the "
          "networks), GFLOP/s: " + per_threads(peak))
if fma:
    print()
    print("FMA ceiling (float32 FMAs, one probe a thread at once: bench/fma_peak.c), GFLOP/s: " + per_threads(fma))
errs = [r for r in list(nb.values()) + list(pt.values()) if r.get("error")]
for r in errs:
    print(f"\n{r['impl']} {r['model']} ({r['threads']} threads): {r['error']}")
PY
log "raw results in $results"
exit $status
