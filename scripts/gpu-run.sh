#!/usr/bin/env bash
# Everything a session with the GPU machine needs, in one call (device time is short): builds nabla
# with CUDA for the machine's GPU, runs the CUDA tests and the CPU suite, compute-sanitizer on a
# subset, and DLBench on the GPU beside PyTorch. Results go under $OUT (the device tool brings them
# back). Run from the repository root on the GPU machine, after packing the Debian dependencies
# here once (../shared/gpu/pack-debs.sh) and naming .carry in the run's `carry`:
#   run: source .carry/unpack-debs.sh; bash scripts/gpu-run.sh [quick]
# `quick` skips the sanitizer and the benchmarks.
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
log() { echo "gpu-run: $*" | tee -a "$out/summary.txt"; }
[ -f .carry/unpack-debs.sh ] && [ -z "${CMAKE_PREFIX_PATH:-}" ] && source .carry/unpack-debs.sh
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed"
cudnn_hint=()
if ! ls /usr/local/cuda/include/cudnn.h >/dev/null 2>&1; then
  h=$(find / -name cudnn.h -not -path '*/proc/*' 2>/dev/null | head -1)
  [ -n "$h" ] && cudnn_hint=(-DCUDNN_ROOT="$(dirname "$(dirname "$h")")") && log "cuDNN at ${cudnn_hint[*]}"
fi
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DNABLA_CUDA=ON ${cap:+-DNABLA_CUDA_ARCHS=$cap} \
  "${cudnn_hint[@]}" > "$out/configure.txt" 2>&1 || { log "configure failed"; tail -30 "$out/configure.txt"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$out/build.txt" 2>&1 || { log "build failed"; tail -40 "$out/build.txt"; exit 1; }
build-gpu/tools/nabla info | tee "$out/info.txt"
# The CUDA tests compare with the CPU, not with the PyTorch reference files: skip that fixture.
ctest --test-dir build-gpu -R 'cuda|devpool' -FS ref --output-on-failure -j 4 > "$out/ctest-cuda.txt" 2>&1
log "CUDA tests: $(grep -E 'tests passed|tests failed' "$out/ctest-cuda.txt")"
ctest --test-dir build-gpu -E 'cuda|devpool|ref_gen|install|cli' -FS ref -j 8 > "$out/ctest-cpu.txt" 2>&1
log "other tests (no PyTorch references here): $(grep -E 'tests passed|tests failed' "$out/ctest-cpu.txt")"
[ "${1:-}" = quick ] && exit 0
if command -v compute-sanitizer >/dev/null; then
  for t in test_cuda_runtime test_cuda_elementwise test_cuda_index; do
    compute-sanitizer --tool memcheck --error-exitcode 9 "build-gpu/tests/$t" > "$out/sanitizer-$t.txt" 2>&1
    log "compute-sanitizer memcheck $t: exit $?"
  done
fi
OMP_WAIT_POLICY=passive build-gpu/tools/nabla bench --device cuda --format json > "$out/nabla-gpu.jsonl" 2> "$out/nabla-gpu.err"
log "nabla bench --device cuda: exit $?"
py=$(command -v python3)
if "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  "$py" bench/dlbench/torch_bench.py --device cuda --format json > "$out/torch-gpu.jsonl" 2> "$out/torch-gpu.err"
  log "torch_bench --device cuda: exit $?"
fi
