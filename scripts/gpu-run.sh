#!/usr/bin/env bash
# Everything a session with the GPU machine needs, in one call (device time is short): builds nabla
# with CUDA for the machine's GPU, then runs the stages asked for, each under a time limit, and
# leaves the logs under $OUT (summary.txt, and logs.tar.gz with everything).
# Run from the repository root on the GPU machine, after packing the Debian dependencies here once
# (../shared/gpu/pack-debs.sh; copy /usr/share/datasets/fashion-mnist to .carry/fashion-mnist for
# the train and main stages) and naming .carry in the run's `carry`:
#   run: bash scripts/gpu-run.sh [stage ...]
# (While helpers edit the tree, commit first and carry `git archive HEAD src tests` to build that.)
# Device time is 15 minutes a session and one run is at most 600 s: the build takes 1-2 minutes,
# and `test graph` has stage limits of 960 s with the default 2 rounds. Run it as two calls while
# the machine stays warm (the build is kept): `bash scripts/gpu-run.sh test` (timeout_s 400), then
# `ROUNDS=1 bash scripts/gpu-run.sh graph` (timeout_s 450).
# Stages (default: all but main, profile, compare and graph): test (the CUDA tests), cputest (the other
# tests), sanitize (compute-sanitizer memcheck on six CUDA tests, racecheck on two: about 3
# minutes), train (one epoch of the CNN on cuda), main (the main
# job's 6 epochs on cuda), micro (bench/cuda_micro beside PyTorch), bench (DLBench on cuda beside
# PyTorch), profile (per-op tables of both for $PROFILE_MODELS), compare (the side-by-side table:
# DLBench, cnn and resnet20, alternating, $ROUNDS rounds; then a host-time profile), graph (the
# same DLBench table with each step captured as a CUDA graph on both sides, --cuda-graph on;
# test_cuda_graph first).
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out/logs"
L=$out/logs
log() { echo "gpu-run: $*" | tee -a "$out/summary.txt"; }
# Only 8 files come back from $OUT: the logs travel as one archive, rewritten after each stage so
# that a run killed at its time limit still brings back what it did.
pack() { tar -C "$out" -czf "$out/logs.tar.gz.tmp" logs 2>/dev/null && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"; }
trap 'pack; rm -rf "$L"' EXIT
# stage NAME SECONDS CMD...: runs CMD with its output in $L/NAME.txt, killed after SECONDS
stage() {
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" > "$L/$name.txt" 2>&1
  local rc=$?
  log "$name: exit $rc in $((SECONDS - t0)) s"
  pack
  return $rc
}
want() {
  [ -z "$stages" ] && [ "$1" != main ] && [ "$1" != profile ] && [ "$1" != compare ] && [ "$1" != graph ] ||
    [[ " $stages " == *" $1 "* ]]
}
stages="$*"

[ -f .carry/unpack-debs.sh ] && [ -z "${CMAKE_PREFIX_PATH:-}" ] && source .carry/unpack-debs.sh
nvidia-smi > "$L/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >> "$out/summary.txt" 2>&1
cudnn_hint=()
if ! ls /usr/local/cuda/include/cudnn.h /usr/include/cudnn.h >/dev/null 2>&1; then
  h=$(find /usr /opt -name cudnn.h 2>/dev/null | head -1)
  if [ -n "$h" ]; then
    root=$(dirname "$(dirname "$h")")
    cudnn_hint=(-DCUDNN_ROOT="$root")
    export LD_LIBRARY_PATH="$root/lib:${LD_LIBRARY_PATH:-}"
    log "cuDNN at $root"
  fi
fi
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
t0=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DNABLA_CUDA=ON ${cap:+-DNABLA_CUDA_ARCHS=$cap} \
  "${cudnn_hint[@]}" > "$L/configure.txt" 2>&1 || { log "configure failed"; tail -30 "$L/configure.txt"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$L/build.txt" 2>&1 || { log "build failed"; grep -B2 -A8 'error' "$L/build.txt" | head -60; exit 1; }
log "build: $((SECONDS - t0)) s"; pack
build-gpu/tools/nabla info > "$L/info.txt" 2>&1; cat "$L/info.txt" >> "$out/summary.txt"
export OMP_WAIT_POLICY=passive
# a GPU machine: a CUDA test that finds no device (a broken driver) fails instead of skipping
export NB_REQUIRE_CUDA=1

if want test; then
  # The CUDA tests compare with the CPU, not with the PyTorch reference files: skip that fixture.
  stage ctest-cuda 240 ctest --test-dir build-gpu -R 'cuda|devpool' -FS ref --output-on-failure --timeout 120 -j 4
  grep -E 'tests passed|tests failed|\*\*\*|Failed|FAILED' "$L/ctest-cuda.txt" | head -20 | tee -a "$out/summary.txt"
fi
if want cputest; then
  stage ctest-cpu 180 ctest --test-dir build-gpu -E 'cuda|devpool|ref_gen|install|cli' -FS ref --timeout 120 -j 12
  grep -E 'tests passed|tests failed|\*\*\*Failed' "$L/ctest-cpu.txt" | head -10 | tee -a "$out/summary.txt"
fi
if want sanitize && command -v compute-sanitizer >/dev/null; then
  for t in test_cuda_runtime test_cuda_elementwise test_cuda_index test_cuda_nn test_cuda_reduce_gemm test_cuda_optim; do
    stage "memcheck-$t" 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "build-gpu/tests/$t"
    grep -E 'ERROR SUMMARY' "$L/memcheck-$t.txt" | tee -a "$out/summary.txt"
  done
  for t in test_cuda_nn test_cuda_reduce_gemm; do
    stage "racecheck-$t" 150 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 "build-gpu/tests/$t"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/racecheck-$t.txt" | tee -a "$out/summary.txt"
  done
fi
data=.carry/fashion-mnist
if want train && [ -d "$data" ]; then
  stage train 150 build-gpu/tools/nabla train --model cnn --data fashion-mnist --data-dir "$data" --epochs 1 --device cuda
  tail -4 "$L/train.txt" | tee -a "$out/summary.txt"
fi
if want main && [ -d "$data" ]; then
  stage main 300 build-gpu/tools/nabla train --model cnn --data fashion-mnist --data-dir "$data" --epochs 6 \
    --device cuda --schedule cosine --seed 0
  tail -8 "$L/main.txt" | tee -a "$out/summary.txt"
fi
if want micro && [ -x build-gpu/bench/nabla_cuda_micro ]; then
  stage micro-nabla 120 build-gpu/bench/nabla_cuda_micro
  stage micro-torch 120 python3 bench/cuda_micro_torch.py
  cat "$L/micro-nabla.txt" "$L/micro-torch.txt" >> "$out/summary.txt"
fi
if want bench; then
  iters=${BENCH_ITERS:-10}
  stage bench-nabla "${BENCH_SECS:-150}" build-gpu/tools/nabla bench --device cuda --iters "$iters" --warmup 3 --format json
  stage bench-torch "${BENCH_SECS:-150}" python3 bench/dlbench/torch_bench.py --device cuda --iters "$iters" --warmup 3 --format json
  cp "$L/bench-nabla.txt" "$out/nabla-gpu.jsonl"; cp "$L/bench-torch.txt" "$out/torch-gpu.jsonl"
fi
if want compare; then
  # DLBench and issue 3's two networks, nabla and PyTorch alternating, ${ROUNDS:-2} rounds: one
  # JSON object per network and round in nabla-gpu.jsonl / torch-gpu.jsonl
  for r in $(seq "${ROUNDS:-2}"); do
    for set in fcn-s,alexnet-s,resnet-50,fcn-r,alexnet-r,resnet-56,lstm cnn,resnet20; do
      stage "cmp-nabla-$r-${set%%,*}" 150 build-gpu/tools/nabla bench --device cuda --model "$set" --iters 20 --warmup 5 --format json
      grep -h '^{' "$L/cmp-nabla-$r-${set%%,*}.txt" >> "$out/nabla-gpu.jsonl"
      stage "cmp-torch-$r-${set%%,*}" 150 python3 bench/dlbench/torch_bench.py --device cuda --model "$set" --iters 20 --warmup 5 --format json
      grep -h '^{' "$L/cmp-torch-$r-${set%%,*}.txt" >> "$out/torch-gpu.jsonl"
    done
  done
  stage host-profile 100 build-gpu/tools/nabla bench --device cuda --model resnet-50,alexnet-s,fcn-r,lstm --iters 5 --warmup 3 --profile host
fi
if want graph; then
  # the step as a CUDA graph on both sides, alternating: nabla-gpu-graph.jsonl / torch-gpu-graph.jsonl
  stage graph-test 120 build-gpu/tests/test_cuda_graph
  for r in $(seq "${ROUNDS:-2}"); do
    set=fcn-s,alexnet-s,resnet-50,fcn-r,alexnet-r,resnet-56,lstm
    stage "graph-nabla-$r" 150 build-gpu/tools/nabla bench --device cuda --model "$set" --iters 20 --warmup 5 --format json --cuda-graph on
    grep -h '^{' "$L/graph-nabla-$r.txt" >> "$out/nabla-gpu-graph.jsonl"
    stage "graph-torch-$r" 150 python3 bench/dlbench/torch_bench.py --device cuda --model "$set" --iters 20 --warmup 5 --format json --cuda-graph on
    grep -h '^{' "$L/graph-torch-$r.txt" >> "$out/torch-gpu-graph.jsonl"
  done
fi
if want profile; then
  pm=${PROFILE_MODELS:-resnet-50,alexnet-r,resnet-56,lstm}
  stage profile-nabla 150 build-gpu/tools/nabla bench --device cuda --model "$pm" --iters 5 --warmup 3 --profile sync --format json
  stage profile-torch 150 python3 bench/dlbench/torch_bench.py --device cuda --model "$pm" --iters 5 --warmup 3 --profile --format json
fi
exit 0
