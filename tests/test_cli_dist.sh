#!/usr/bin/env bash
# Data-parallel `nabla train` under mpiexec (--dist): one set of output (rank 0's), the flag's
# errors, a one-rank group, a failure on one rank stopping all of them with "rank N:" errors,
# and the property that makes DistributedDataParallel honest: R ranks with batch B per rank train
# exactly as one process with batch R*B (the same samples in each global batch, the gradients
# averaged), so the metrics and the weights agree to float32 rounding; and the test set sharded
# over 3 ranks (10000 samples: not a multiple of 3) gives the numbers of `nabla eval` on the
# whole set. Usage: test_cli_dist.sh PATH/TO/nabla PATH/TO/mpiexec
# Environment: NB_DATA_DIR (default /usr/share/datasets/fashion-mnist), NB_PYTHON (a Python with
# torch, safetensors and numpy, as ctest sets it), and as root OMPI_ALLOW_RUN_AS_ROOT=1 and
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (ctest sets them).
set -uo pipefail
nabla=$(realpath "${1:?usage: test_cli_dist.sh PATH/TO/nabla PATH/TO/mpiexec}")
mpiexec=${2:?usage: test_cli_dist.sh PATH/TO/nabla PATH/TO/mpiexec}
data=${NB_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
# a hang (ranks that wait for each other forever) fails the case instead of the whole test's time
mpirun() { timeout 120 "$mpiexec" --oversubscribe "$@"; }

# ---- the flag's usage error (before any data is read) ----
"$nabla" train --model mlp --dist bogus > out.txt 2> err.txt
rc=$?
if [[ $rc -eq 2 && $(wc -l < err.txt) -eq 1 ]] && grep -q 'unknown --dist "bogus" (expected auto, mpi or off)' err.txt
then pass "--dist bogus -> 2: $(cat err.txt)"; else fail "--dist bogus exited $rc: $(cat err.txt)"; fi

if [[ ! -e "$data/train-images-idx3-ubyte.gz" && ! -e "$data/train-images-idx3-ubyte" ]]; then
    echo "Fashion-MNIST not found in $data: skipping the training tests"
    [[ $failures -eq 0 ]] && exit 77
    exit 1
fi
common=(--model mlp --data fashion-mnist --data-dir "$data" --seed 0)

# metric FILE KEY: the value of KEY in the last line of a --metrics file
metric() { tail -1 "$1" | sed -E "s/.*\"$2\": ([0-9.e+-]+).*/\1/"; }
# close A B TOL: |A - B| <= TOL * max(1, |B|)
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
                                                      if (m < 1) m = 1; exit !(d <= t * m) }'; }

# ---- (a) two ranks: exit 0, rank 0's output only, accuracy reported; threads = cores / 2 ----
mpirun -n 2 "$nabla" train "${common[@]}" --epochs 1 --limit 2048 --batch-size 32 --metrics a.jsonl > a.txt 2> a.err
rc=$?
if [[ $rc -ne 0 ]]; then fail "2 ranks exited $rc: $(head -c 600 a.err)"
elif [[ $(grep -c '^training mlp' a.txt) -ne 1 || $(grep -c '^epoch 1/1 ' a.txt) -ne 1 ||
        $(grep -o '32/32' a.txt | wc -l) -ne 1 || $(grep -c '^total training time' a.txt) -ne 1 ]]; then
    fail "2 ranks: expected one set of output lines: $(head -c 1500 a.txt)"
elif ! grep -q '^data parallel over 2 processes (MPI): batch 32 per process, global batch 64, 1024 samples' a.txt; then
    fail "2 ranks: no data-parallel line: $(head -3 a.txt)"
elif [[ -s a.err ]]; then fail "2 ranks: stderr not empty: $(head -c 600 a.err)"
elif [[ $(wc -l < a.jsonl) -ne 1 ]]; then fail "2 ranks: metrics written $(wc -l < a.jsonl) times"
else pass "2 ranks: $(grep '^epoch 1/1' a.txt)"; fi
acc=$(metric a.jsonl test_accuracy)
if awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }'; then pass "2 ranks: accuracy $acc > 0.6"; else fail "2 ranks: accuracy '$acc'"; fi
if [[ -z "${NABLA_NUM_THREADS:-}${OMP_NUM_THREADS:-}" ]]; then
    cores=$("$nabla" info | sed -n 's/^threads: \([0-9]*\).*/\1/p')
    want=$((cores / 2 > 1 ? cores / 2 : 1))
    if grep -q "^training mlp .*, $want threads" a.txt; then pass "2 ranks on $cores cores: $want threads each"
    else fail "2 ranks on $cores cores: expected $want threads: $(head -1 a.txt)"; fi
fi

# ---- (b) 2 ranks x batch 32 == 1 process x batch 64: same seed, same shuffled order, SGD ----
# Rank r's k-th sample is the epoch order's position 2k + r, so its batch j is the odd or even
# half of the one process's batch j, and the averaged gradient is the whole batch's.
eq=(--epochs 2 --limit 1024 --optimizer sgd --lr 0.05 --threads 1)
mpirun -n 2 "$nabla" train "${common[@]}" "${eq[@]}" --batch-size 32 --metrics d.jsonl --save d.safetensors \
    > d.txt 2> d.err || fail "equivalence: 2 ranks: $(head -c 600 d.err)"
"$nabla" train "${common[@]}" "${eq[@]}" --batch-size 64 --metrics s.jsonl --save s.safetensors > s.txt 2> s.err ||
    fail "equivalence: 1 process: $(head -c 600 s.err)"
for k in train_loss test_loss test_accuracy; do
    a=$(metric d.jsonl $k) b=$(metric s.jsonl $k)
    if close "$a" "$b" 1e-5; then pass "equivalence: $k $a (2 ranks) vs $b (1 process)"
    else fail "equivalence: $k $a (2 ranks) vs $b (1 process)"; fi
done
if [[ -z "${NB_PYTHON:-}" || ! -x "${NB_PYTHON}" ]]; then
    fail "equivalence: NB_PYTHON ('${NB_PYTHON:-}') is not an executable Python (scripts/setup.sh makes .venv)"
elif "$NB_PYTHON" - d.safetensors s.safetensors > py.txt 2>&1 <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
worst = 0.0
for k in a:
    assert a[k].shape == b[k].shape, k
    if not k.startswith("model."):
        continue
    err = float(np.max(np.abs(a[k].astype(np.float64) - b[k])))
    scale = float(np.max(np.abs(b[k]))) or 1.0
    assert err <= 1e-5 * max(scale, 1.0), f"{k}: max difference {err} (scale {scale})"
    worst = max(worst, err)
print(f"{sum(k.startswith('model.') for k in a)} weight tensors agree, max difference {worst:.2e}")
PY
then pass "equivalence: $(cat py.txt)"; else fail "equivalence: $(cat py.txt)"; fi

# ---- (c) --dist mpi as one process (MPI's singleton): a group of one, the same run as --dist off ----
one=(--epochs 1 --limit 512 --threads 1 --optimizer sgd)
"$nabla" train "${common[@]}" "${one[@]}" --dist mpi > m.txt 2> m.err
rc=$?
"$nabla" train "${common[@]}" "${one[@]}" --dist off > o.txt 2> o.err
lm=$(grep -o 'test loss [0-9.]* accuracy [0-9.]*' m.txt) lo=$(grep -o 'test loss [0-9.]* accuracy [0-9.]*' o.txt)
if [[ $rc -eq 0 && -n "$lm" && "$lm" == "$lo" ]] && grep -q '^data parallel over 1 process (MPI)' m.txt
then pass "--dist mpi alone: $lm, as --dist off"; else fail "--dist mpi alone (rc $rc): '$lm' vs '$lo': $(cat m.err o.err)"; fi

# ---- (d) the test set over 3 ranks counts each sample once: the numbers of `nabla eval` ----
mpirun -n 3 "$nabla" train "${common[@]}" --epochs 1 --limit 960 --batch-size 32 --threads 1 --save t.safetensors \
    > t.txt 2> t.err || fail "3 ranks: $(head -c 600 t.err)"
lt=$(grep -o 'test loss [0-9.]* accuracy [0-9.]*' t.txt)
le=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load t.safetensors 2>&1)
if [[ -n "$lt" && "$lt" == "$le" ]]; then pass "3 ranks: '$lt', eval of the checkpoint: '$le'"
else fail "3 ranks printed '$lt', eval of its checkpoint '$le'"; fi

# ---- (e) a failure on one rank stops every rank, each error naming its rank ----
mpirun -n 1 "$nabla" train "${common[@]}" --limit 256 --threads 1 : \
       -n 1 "$nabla" train "${common[@]}" --limit 256 --threads 1 --data-dir "$work/no-such-dir" > f.txt 2> f.err
rc=$?
if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q '^nabla: rank 1: train: .*no-such-dir' f.err &&
   grep -q '^nabla: rank 0: train: 1 other rank(s) failed' f.err && ! grep -q '^training' f.txt
then pass "a failing rank: exit $rc, $(grep -c '^nabla: rank' f.err) rank errors"
else fail "a failing rank: exit $rc: $(head -c 800 f.err)"; fi

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
