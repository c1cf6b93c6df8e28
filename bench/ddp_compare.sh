#!/usr/bin/env bash
# Data parallelism on this machine's cores, nabla beside PyTorch: for each network, the same
# global mini-batch as one process on T threads, and as R processes of T/R threads each under
# mpiexec with DistributedDataParallel (nabla: MPI, bench/ddp_step.c; PyTorch: gloo,
# bench/ddp_torch.py). Runs alternate nabla and PyTorch, round after round, each in a fresh
# process with compare.sh's environment (OMP_WAIT_POLICY=PASSIVE, glibc keeping freed memory).
#
#   bench/ddp_compare.sh [--models fcn-r,alexnet-r,resnet-56] [--cores 2] [--iters 10]
#                        [--warmup 3] [--rounds 2] [--channels-last] [--results DIR]
#
# Prints, per network and layout (1 x cores threads, cores x 1 thread), each side's median
# seconds per global mini-batch (the median of the rounds' medians) and the ratio PyTorch/nabla
# (above 1: nabla faster); the raw JSON lines go to DIR/results.jsonl.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
models=fcn-r,alexnet-r,resnet-56 cores=2 iters=10 warmup=3 rounds=2 cl=() results=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --channels-last) cl=(--channels-last); shift ;;
    --results) results=$2; shift 2 ;;
    *) echo "ddp_compare: unknown argument $1" >&2; exit 2 ;;
  esac
done
nabla=${NABLA_DDP_STEP:-$root/build-bench/bench/nabla_ddp_step}
py=${PYTHON:-$root/.venv-bench/bin/python}
[ -x "$nabla" ] || { echo "ddp_compare: $nabla is missing (cmake --build build-bench --target nabla_ddp_step)" >&2; exit 2; }
[ -x "$py" ] || { echo "ddp_compare: $py is missing (PyTorch from PyPI: see bench/dlbench/README.md)" >&2; exit 2; }
results=${results:-$(mktemp -d /tmp/ddp_compare.XXXXXX)}
mkdir -p "$results"
out=$results/results.jsonl
: > "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} MALLOC_MMAP_MAX_=${MALLOC_MMAP_MAX_:-0}
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:--1}
{
  echo "date: $(date -u +%FT%TZ)  host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "nabla: $(git -C "$root" rev-parse --short HEAD)  mpi: $(mpiexec --version | head -1)"
  echo "torch: $("$py" -c 'import torch; print(torch.__version__)')"
} | tee "$results/env.txt"

# one run: ranks threads-per-rank impl model
run() {
  local r=$1 t=$2 impl=$3 m=$4 cmd
  if [ "$impl" = nabla ]; then cmd=("$nabla"); else cmd=("$py" "$root/bench/ddp_torch.py"); fi
  cmd+=(--model "$m" --threads "$t" --iters "$iters" --warmup "$warmup" "${cl[@]}")
  local rc=0
  if [ "$r" -eq 1 ]; then
    OMP_NUM_THREADS=$t "${cmd[@]}" >> "$out" || rc=$?
  else
    mpiexec -n "$r" --bind-to none -x OMP_NUM_THREADS="$t" "${cmd[@]}" >> "$out" || rc=$?
  fi
  # a failed run is reported and left out of the table; the others go on
  [ "$rc" -eq 0 ] || echo "ddp_compare: $impl $m ($r x $t) failed with exit code $rc" >&2
}

IFS=, read -r -a mlist <<< "$models"
for ((k = 0; k < rounds; k++)); do
  for m in "${mlist[@]}"; do
    for layout in "1 $cores" "$cores 1"; do
      read -r r t <<< "$layout"
      run "$r" "$t" nabla "$m"
      run "$r" "$t" torch "$m"
    done
  done
done

"$py" - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cells = {}
for r in rows:
    cells.setdefault((r["model"], r["ranks"], r["threads"]), {}).setdefault(r["impl"], []).append(r["median_s"])
print(f"{'network':<10} {'processes x threads':<20} {'nabla s':>9} {'torch s':>9} {'torch/nabla':>12}")
for (m, r, t), v in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    n, p = statistics.median(v.get("nabla", [float("nan")])), statistics.median(v.get("torch", [float("nan")]))
    print(f"{m:<10} {f'{r} x {t}':<20} {n:9.4f} {p:9.4f} {p / n:12.2f}")
EOF
echo "raw: $out"
