#!/usr/bin/env bash
# Fuzzes nabla's file readers with libFuzzer, under AddressSanitizer and UndefinedBehaviorSanitizer:
# safetensors checkpoints (and the module, optimizer and scheduler loading them), PyTorch's
# checkpoints (torch.save's zip archive and pickle), the JSON parser under safetensors' headers,
# IDX files (plain and gzipped), CIFAR-10 batches and word-level text corpora (Penn Treebank's).
# See tests/fuzz/.
#
#   scripts/fuzz.sh [--seconds N] [--jobs N] [target ...]
#
# Targets: safetensors torchfile json idx cifar words (default: all), each run for N seconds (default
# 60). Builds build-fuzz/ with clang. Corpora grow in build-fuzz/corpus/<target>/, seeded with
# valid files; first every input in tests/fuzz/regress/<target>/ is replayed (the inputs that once
# failed; each also has a test in the regular suite). A failing input is written to
# build-fuzz/artifacts/ and the script exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

seconds=60
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    safetensors|torchfile|json|idx|cifar|words) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (targets: safetensors torchfile json idx cifar words)" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(safetensors torchfile json idx cifar words)

command -v clang >/dev/null || { echo "fuzz.sh: clang is needed (Debian: apt-get install clang libomp-dev)" >&2; exit 2; }
dir=build-fuzz
cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNABLA_FUZZ=ON \
  -DNABLA_CUDA=OFF -DNABLA_BUILD_TESTS=OFF -DNABLA_BUILD_BENCH=OFF -DNABLA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$dir" --target $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$dir/artifacts"

# Valid seeds for each corpus (small: the fuzzer grows them).
seed() {
  local t=$1 c=$dir/corpus/$1
  mkdir -p "$c"
  case "$t" in
    safetensors) NB_FUZZ_SEED_DIR=$c "$dir/tests/fuzz/fuzz_safetensors" ;;
    torchfile)
      NB_FUZZ_SEED_DIR=$c "$dir/tests/fuzz/fuzz_torchfile"
      # and the small files torch.save wrote for test_torchfile (views, nested dicts, a module's
      # state dict, refused ones), when the test environment's torch is there
      if [ -x .venv/bin/python ]; then
        local tmp
        tmp=$(mktemp -d)
        .venv/bin/python tests/ref/torchfile_interop.py write "$tmp" > /dev/null 2>&1 &&
          find "$tmp" -name '*.pt' -size -64k -exec cp {} "$c/" \;
        rm -rf "$tmp"
      fi ;;
    json)
      printf '{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"k":"v"}}' > "$c/header.json"
      printf '[1,-2.5e3,true,false,null,"\\u00e9\\ud83d\\ude00",{}]' > "$c/values.json" ;;
    idx)
      # even first byte: the file as is; odd: gzipped by the harness
      printf '\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03\x01\x02\x03\x04\x05\x06' > "$c/u8.idx"
      printf '\x01\x00\x00\x0d\x01\x00\x00\x00\x02\x3f\x80\x00\x00\x40\x00\x00\x00' > "$c/f32-gz.idx" ;;
    cifar)
      { printf '\x07'; head -c 3072 /dev/zero | tr '\0' '\x80'; printf '\x02'; head -c 3072 /dev/zero; } > "$c/two.bin" ;;
    words)
      printf ' aer banknote berlitz calloway\n pierre <unk> N years old will join the board\n' > "$c/ptb.txt"
      printf 'a\tb\r\nc\rd\v\xc2\xa0e\xe2\x80\xa8f\xe3\x80\x80' > "$c/spaces.txt" ;;
  esac
}

rc=0
for t in "${targets[@]}"; do
  bin=$dir/tests/fuzz/fuzz_$t
  seed "$t"
  if compgen -G "tests/fuzz/regress/$t/*" >/dev/null; then
    echo "fuzz.sh: $t: replaying tests/fuzz/regress/$t"
    "$bin" tests/fuzz/regress/$t/* > "$dir/regress-$t.log" 2>&1 || { rc=1; tail -n 40 "$dir/regress-$t.log"; }
  fi
  echo "fuzz.sh: $t: fuzzing for ${seconds}s"
  par=()
  [ "$jobs" -le 1 ] || par=(-fork="$jobs" -ignore_crashes=0)
  "$bin" "$dir/corpus/$t" "${par[@]}" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=4096 -malloc_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/$t-" > "$dir/fuzz-$t.log" 2>&1 && ok=1 || ok=0
  if [ $ok = 1 ]; then
    # the last progress line (fork mode) or the final statistics
    { grep -E '^Done|^stat::(new_units_added|peak_rss_mb)|^#[0-9]+: cov' "$dir/fuzz-$t.log" || true; } |
      tail -n 3 | sed "s/^/fuzz.sh: $t: /"
  else
    rc=1
    grep -v '^#[0-9]' "$dir/fuzz-$t.log" | grep -v '# Uses:' | tail -n 60
  fi
done
exit $rc
