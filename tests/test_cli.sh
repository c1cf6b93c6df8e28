#!/usr/bin/env bash
# Tests of the `nabla` command (issue 3, item 6): info, error handling and exit codes, a short
# training run (metrics, accuracy, checkpoint read by `nabla eval` and by PyTorch's safetensors
# reader), resume giving bit-identical weights, and the same through a `.pt` checkpoint (PyTorch's
# format, read back by torch.load(weights_only=True)). Usage: test_cli.sh PATH/TO/nabla
# Environment: NB_DATA_DIR (default /usr/share/datasets/fashion-mnist), NB_PYTHON (a Python with
# torch and safetensors, as ctest sets it: scripts/setup.sh makes it; without it the PyTorch
# checks fail rather than drop out).
set -uo pipefail
nabla=$(realpath "${1:?usage: test_cli.sh PATH/TO/nabla}")
data=${NB_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

# ---- info ----
if "$nabla" info > info.txt 2>&1 && grep -q '^nabla [0-9]' info.txt && grep -q 'cpu isa:' info.txt &&
   grep -q 'blas:' info.txt && grep -q 'onednn:' info.txt && grep -q 'cuda:' info.txt &&
   grep -q '^threads: [1-9]' info.txt; then pass "info"; else fail "info: $(cat info.txt)"; fi

# ---- errors: one line on stderr, 2 for usage, 1 at run time ----
expect 2 'unknown command' "$nabla" frobnicate
expect 2 'unknown option --bogus' "$nabla" train --model mlp --bogus 1
expect 2 'needs a value' "$nabla" train --model mlp --epochs
expect 2 'unknown model "nope"' "$nabla" train --model nope
expect 2 'model is required' "$nabla" train --epochs 1
expect 2 '--epochs: expected an integer' "$nabla" train --model mlp --epochs 1x
expect 2 '--batch-size: expected an integer' "$nabla" train --model mlp --batch-size 0
expect 2 '--lr: expected a non-negative number' "$nabla" train --model mlp --lr abc
expect 2 'unknown optimizer' "$nabla" train --model mlp --optimizer lbfgs
expect 2 'unknown schedule "step"' "$nabla" train --model mlp --schedule step
expect 2 'unknown data set' "$nabla" train --model mlp --data imagenet
expect 2 'unknown device' "$nabla" train --model mlp --device tpu
expect 2 'train: unknown --conv-algo "fft"' "$nabla" train --model mlp --conv-algo fft
expect 2 'load is required' "$nabla" eval --model mlp
expect 1 'missing.safetensors' "$nabla" eval --model mlp --load missing.safetensors
expect 1 'no-such-dir' "$nabla" train --model mlp --data-dir "$work/no-such-dir"
echo "not a checkpoint" > junk.safetensors
expect 1 'junk.safetensors' "$nabla" eval --model mlp --load junk.safetensors
expect 1 'junk.safetensors' "$nabla" train --model mlp --resume junk.safetensors

if [[ ! -e "$data/train-images-idx3-ubyte.gz" && ! -e "$data/train-images-idx3-ubyte" ]]; then
    echo "Fashion-MNIST not found in $data: skipping the training tests"
    [[ $failures -eq 0 ]] && exit 77
    exit 1
fi

# ---- a short training run ----
if "$nabla" train --model mlp --data fashion-mnist --data-dir "$data" --epochs 1 --limit 2048 \
       --batch-size 64 --metrics m.jsonl --save ck.safetensors > train.txt 2> train.err; then
    pass "train: $(grep '^epoch 1/1' train.txt)"
else
    fail "train exited non-zero: $(cat train.err)"
fi
grep -q '^total training time' train.txt || fail "train: no total training time printed"
if [[ $(wc -l < m.jsonl) -eq 1 ]] &&
   grep -Eq '^\{"epoch": 1, "train_loss": [0-9.e+-]+, "test_loss": [0-9.e+-]+, "test_accuracy": [0-9.e+-]+, "seconds": [0-9.e+-]+, "samples_per_second": [0-9.e+-]+\}$' m.jsonl
then pass "metrics line: $(cat m.jsonl)"; else fail "metrics: $(cat m.jsonl)"; fi
# 2048 samples, one epoch of mlp with Adam reach ~0.72 test accuracy (chance: 0.1)
acc=$(sed -E 's/.*"test_accuracy": ([0-9.e+-]+).*/\1/' m.jsonl)
if awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }'; then pass "accuracy $acc > 0.6"; else fail "accuracy $acc <= 0.6"; fi
# ---- --conv-algo reaches the CPU convolutions (the header names the one in force) ----
for a in direct winograd; do
    if "$nabla" train --model cnn --data fashion-mnist --data-dir "$data" --epochs 1 --limit 256 --batch-size 64 \
           --device cpu --conv-algo "$a" > ca.txt 2> ca.err && grep -q "cpu convolutions $a\$" ca.txt &&
       grep -q '^epoch 1/1' ca.txt; then
        pass "train --conv-algo $a: $(head -1 ca.txt)"
    else
        fail "train --conv-algo $a: $(cat ca.txt ca.err | head -c 600)"
    fi
done

# ---- --memory-format: the CPU's default (auto) makes the image batches channels-last; the two
# layouts' kernels are different code, and train the same model to the same test loss ----
if grep -q 'threads, channels-last, cpu convolutions' ca.txt; then pass "train's default on the CPU: channels-last"
else fail "train's header does not say channels-last by default: $(head -1 ca.txt)"; fi
for mf in contiguous channels_last; do
    "$nabla" train --model cnn --data fashion-mnist --data-dir "$data" --epochs 1 --limit 256 --batch-size 64 \
        --device cpu --seed 3 --memory-format "$mf" > "mf-$mf.txt" 2> mf.err || fail "train --memory-format $mf: $(cat mf.err)"
done
l_nchw=$(grep -o 'test loss [0-9.]*' mf-contiguous.txt | grep -o '[0-9.]*$')
l_cl=$(grep -o 'test loss [0-9.]*' mf-channels_last.txt | grep -o '[0-9.]*$')
if grep -q 'threads, contiguous,' mf-contiguous.txt && grep -q 'threads, channels-last,' mf-channels_last.txt &&
   awk -v a="$l_nchw" -v b="$l_cl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-3 * a) }'; then
    pass "train --memory-format contiguous / channels_last: test loss $l_nchw / $l_cl"
else
    fail "train --memory-format: test loss $l_nchw (contiguous) against $l_cl (channels_last)"
fi
expect 2 'unknown --memory-format "nhwc"' "$nabla" train --model cnn --data-dir "$data" --memory-format nhwc

train_line=$(grep -o 'test loss [0-9.]* accuracy [0-9.]*' train.txt)
eval_line=$("$nabla" eval --model mlp --data fashion-mnist --data-dir "$data" --load ck.safetensors 2>&1)
if [[ -n "$train_line" && "$eval_line" == "$train_line" ]]; then pass "eval: $eval_line"
else fail "eval printed '$eval_line', training printed '$train_line'"; fi
expect 1 'holds a "mlp" model' "$nabla" eval --model cnn --data-dir "$data" --load ck.safetensors

if have_python "PyTorch reads the checkpoint"; then
    if "$NB_PYTHON" - ck.safetensors > py.txt 2>&1 <<'PY'
import sys
from safetensors import safe_open
from safetensors.torch import load_file
t = load_file(sys.argv[1])
meta = safe_open(sys.argv[1], "pt").metadata()
assert meta["model"] == "mlp" and meta["epoch"] == "1" and meta["optimizer"] == "adam", meta
model = {k[6:]: v for k, v in t.items() if k.startswith("model.")}
assert model and all(v.dtype.is_floating_point for v in model.values()), sorted(t)
assert any(k.startswith("optim.state.") for k in t), sorted(t)
import torch
net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
net.load_state_dict(model)  # strict: the same names and shapes as PyTorch's model
print(len(model), "model tensors (load_state_dict ok),", len(t) - len(model), "optimizer tensors")
PY
    then pass "PyTorch reads the checkpoint: $(cat py.txt)"; else fail "PyTorch: $(cat py.txt)"; fi
fi

# ---- resume: 2 epochs straight == 1 epoch + resume, bit for bit (one thread) ----
common=(--model mlp --data-dir "$data" --limit 1024 --batch-size 64 --threads 1 --seed 7 --optimizer sgd)
"$nabla" train "${common[@]}" --epochs 2 --save straight.safetensors > /dev/null 2> r1.err || fail "resume: straight run: $(cat r1.err)"
"$nabla" train "${common[@]}" --epochs 1 --save resumed.safetensors > /dev/null 2> r2.err || fail "resume: first epoch: $(cat r2.err)"
"$nabla" train "${common[@]}" --epochs 2 --resume resumed.safetensors --save resumed.safetensors > resume.txt 2> r3.err ||
    fail "resume: second epoch: $(cat r3.err)"
grep -q 'resuming from' resume.txt || fail "resume: no 'resuming from' line"
e1=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load straight.safetensors 2>&1)
e2=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load resumed.safetensors 2>&1)
if [[ "$e1" == "$e2" && "$e1" == test\ loss* ]]; then pass "resume: eval equal ($e1)"; else fail "resume: '$e1' vs '$e2'"; fi
if have_python "resume: bit-identical"; then
    if "$NB_PYTHON" "$support/same_safetensors.py" straight.safetensors resumed.safetensors > py2.txt 2>&1
    then pass "resume: $(cat py2.txt)"; else fail "resume: $(cat py2.txt)"; fi
fi

# ---- PyTorch's checkpoint format: .pt resumes as .safetensors does, and torch.load reads it ----
"$nabla" train "${common[@]}" --epochs 1 --save resumed.pt > /dev/null 2> p1.err || fail "pt: first epoch: $(cat p1.err)"
"$nabla" train "${common[@]}" --epochs 2 --resume resumed.pt --save resumed.pt > /dev/null 2> p2.err ||
    fail "pt: second epoch: $(cat p2.err)"
e3=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load resumed.pt 2>&1)
if [[ "$e1" == "$e3" ]]; then pass "pt: resumed from .pt, eval equal to the straight run ($e3)"; else fail "pt: '$e1' vs '$e3'"; fi
expect 1 'missing.pt' "$nabla" eval --model mlp --load missing.pt
if have_python "pt: torch.load"; then
    if "$NB_PYTHON" - straight.safetensors resumed.pt > py3.txt 2>&1 <<'PY'
import sys
import torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), torch.load(sys.argv[2], weights_only=True)
assert b["model"] == "mlp" and b["epoch"] == "2", {k: v for k, v in b.items() if isinstance(v, str)}
b = {k: v for k, v in b.items() if isinstance(v, torch.Tensor)}
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
    assert a[k].numpy().tobytes() == b[k].numpy().tobytes(), "differs: " + k
print(len(b), "tensors read by torch.load(weights_only=True), bit-identical to the straight run's")
PY
    then pass "pt: $(cat py3.txt)"; else fail "pt: $(cat py3.txt)"; fi
fi

# ---- resume with a cosine schedule: the learning rate's state is in the checkpoint ----
common+=(--schedule cosine)
"$nabla" train "${common[@]}" --epochs 2 --save cs.safetensors > /dev/null 2> c1.err || fail "cosine: straight run: $(cat c1.err)"
"$nabla" train "${common[@]}" --epochs 2 --stop-after 1 --save cr.safetensors > /dev/null 2> c2.err ||
    fail "cosine: first epoch: $(cat c2.err)"
"$nabla" train "${common[@]}" --epochs 2 --resume cr.safetensors --save cr.safetensors > /dev/null 2> c3.err ||
    fail "cosine: second epoch: $(cat c3.err)"
e1=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load cs.safetensors 2>&1)
e2=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load cr.safetensors 2>&1)
e3=$("$nabla" eval --model mlp --data-dir "$data" --threads 1 --load straight.safetensors 2>&1)
if [[ "$e1" == "$e2" && "$e1" == test\ loss* && "$e1" != "$e3" ]]; then pass "cosine resume: eval equal ($e1), differs from constant ($e3)"
else fail "cosine resume: '$e1' vs '$e2' (constant: '$e3')"; fi
expect 2 'differs from the checkpoint' "$nabla" train --model mlp --data-dir "$data" --epochs 2 --resume cr.safetensors --schedule none
expect 2 'spans 2 epochs, not --epochs 3' "$nabla" train --model mlp --data-dir "$data" --epochs 3 --resume cr.safetensors

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
