#!/usr/bin/env bash
# Tests of `nabla train --model lstm --data ptb` and its `nabla eval` (tools/train_lm.c) on small
# texts in Penn Treebank's form: the errors, learning (a tiny grammar's text, validation
# perplexity below 2 where an untrained model of its 21 words is near 21), the metrics, the
# annealing rule (the rate divided by 4 after an epoch whose validation loss is not the best so
# far), eval printing what train printed, resume bit-identical to an uninterrupted run, and PyTorch
# reading the .pt checkpoint: its own LSTM with those weights gives the test perplexity nabla's
# eval gives. Usage: test_cli_lm.sh PATH/TO/nabla SOURCE_DIR. Environment: NB_PYTHON (a Python
# with torch and safetensors; without it the PyTorch checks fail rather than drop out).
set -uo pipefail
nabla=$(realpath "${1:?usage: test_cli_lm.sh PATH/TO/nabla SOURCE_DIR}")
src=$(realpath "${2:?usage: test_cli_lm.sh PATH/TO/nabla SOURCE_DIR}")
. "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"


# g/: the grammar's text for all three splits; a/: the same training text, but a validation text
# of the same words in random order, which gets worse as the model learns the grammar (annealing)
mkdir g a
python3 "$src/tests/support/grammar_text.py" g --test
python3 "$src/tests/support/grammar_text.py" a --test --valid noise

# ---- errors: one line on stderr, 2 for usage, 1 at run time ----
expect 2 'takes --data ptb, not "fashion-mnist"' "$nabla" train --model lstm --data fashion-mnist --data-dir g
expect 2 'needs --data-dir DIR' "$nabla" train --model lstm
expect 2 '--data ptb is a text' "$nabla" train --model mlp --data ptb --data-dir g
expect 2 '--bptt and --clip are for the language model' "$nabla" train --model mlp --bptt 10
expect 2 '--schedule cosine is for the image models' "$nabla" train --model lstm --data-dir g --schedule cosine
expect 2 '--bptt: expected an integer' "$nabla" train --model lstm --data-dir g --bptt 0
expect 1 'no-such-dir/ptb.train.txt' "$nabla" train --model lstm --data-dir "$work/no-such-dir"
mkdir v && cp g/ptb.train.txt v/ && echo " the cat flies " > v/ptb.valid.txt
expect 1 'flies' "$nabla" train --model lstm --data-dir v
expect 1 'too few tokens\|no batch\|lm_batches' "$nabla" train --model lstm --data-dir g --batch-size 100000

# ---- learning: 3 epochs of the grammar, metrics, test perplexity, eval of the checkpoint ----
if "$nabla" train --model lstm --data ptb --data-dir g --epochs 3 --metrics m.jsonl --save ck.pt > train.txt 2> train.err
then pass "train: $(grep '^epoch 3/3' train.txt)"; else fail "train exited non-zero: $(cat train.err)"; fi
grep -q '^training lstm (1063445 parameters) on ptb: 21 words' train.txt ||
    fail "train: header $(head -1 train.txt) (expected 21 words and 1,063,445 parameters)"
grep -q '^total training time' train.txt || fail "train: no total training time printed"
if [[ $(wc -l < m.jsonl) -eq 3 ]] &&
   ! grep -Evq '^\{"epoch": [123], "train_loss": [0-9.e+-]+, "valid_loss": [0-9.e+-]+, "valid_perplexity": [0-9.e+-]+, "lr": [0-9.e+-]+, "seconds": [0-9.e+-]+, "tokens_per_second": [0-9.e+-]+\}$' m.jsonl
then pass "metrics: 3 lines"; else fail "metrics: $(cat m.jsonl)"; fi
ppl=$(sed -n 's/^epoch 3\/3 .*valid loss [0-9.]* perplexity \([0-9.]*\) .*/\1/p' train.txt)
if [[ -n "$ppl" ]] && awk -v p="$ppl" 'BEGIN { exit !(p < 2.0) }'; then pass "validation perplexity $ppl < 2"
else fail "validation perplexity '$ppl', not below 2"; fi
train_test=$(grep '^test loss' train.txt)
eval_test=$("$nabla" eval --model lstm --data ptb --data-dir g --load ck.pt 2>&1)
if [[ -n "$train_test" && "$eval_test" == "$train_test" ]]; then pass "eval: $eval_test"
else fail "eval printed '$eval_test', training printed '$train_test'"; fi
expect 1 'holds a "lstm" model' "$nabla" eval --model mlp --load ck.pt
mkdir w && head -n 100 g/ptb.train.txt > w/ptb.train.txt && echo " zebra the cat " >> w/ptb.train.txt
cp g/ptb.test.txt w/
expect 1 'vocabulary of 21 words; w/ptb.train.txt has 22' "$nabla" eval --model lstm --data-dir w --load ck.pt

# ---- annealing: lr[e+1] = lr[e] / 4 exactly when valid[e] is not below every earlier one ----
"$nabla" train --model lstm --data-dir a --epochs 4 --threads 1 --metrics am.jsonl --save straight.safetensors \
    > a1.txt 2> a1.err || fail "anneal: straight run: $(cat a1.err)"
if python3 - am.jsonl > an.txt 2>&1 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4, rows
best, anneals = float("inf"), 0
for a, b in zip(rows, rows[1:]):
    worse = a["valid_loss"] >= best
    best = min(best, a["valid_loss"])
    assert b["lr"] == (a["lr"] / 4 if worse else a["lr"]), (a, b)
    anneals += worse
assert anneals >= 1, "the noise text's validation loss never got worse: " + str([r["valid_loss"] for r in rows])
print(f"{anneals} anneal(s), lr {[r['lr'] for r in rows]}")
PY
then pass "anneal: $(cat an.txt)"; else fail "anneal: $(cat an.txt)"; fi

# ---- resume: 4 epochs straight == 1 + 1 + 2 through two checkpoints, bit for bit (train's
# deterministic mode: without it the CPU tuners' first calls in each process try each way) ----
common=(--model lstm --data-dir a --epochs 4 --threads 1 --save resumed.safetensors)
"$nabla" train "${common[@]}" --stop-after 1 > /dev/null 2> r1.err || fail "resume: first epoch: $(cat r1.err)"
"$nabla" train "${common[@]}" --stop-after 1 --resume resumed.safetensors > r2.txt 2> r2.err ||
    fail "resume: second epoch: $(cat r2.err)"
grep -q 'resuming from resumed.safetensors after epoch 1' r2.txt || fail "resume: no 'resuming from' line"
"$nabla" train "${common[@]}" --resume resumed.safetensors > r3.txt 2> r3.err || fail "resume: last epochs: $(cat r3.err)"
if [[ "$(grep '^test loss' r3.txt)" == "$(grep '^test loss' a1.txt)" && -n "$(grep '^test loss' a1.txt)" ]]
then pass "resume: test line equal ($(grep '^test loss' r3.txt))"
else fail "resume: '$(grep '^test loss' r3.txt)' vs '$(grep '^test loss' a1.txt)'"; fi
expect 2 '--batch-size 8 differs from the checkpoint' "$nabla" train "${common[@]}" --resume resumed.safetensors --batch-size 8
expect 2 '--lr 3 differs from the checkpoint' "$nabla" train "${common[@]}" --resume resumed.safetensors --lr 3
if have_python "resume: bit-identical"; then
    if "$NB_PYTHON" "$support/same_safetensors.py" straight.safetensors resumed.safetensors epoch=4 model=lstm \
        > py1.txt 2>&1
    then pass "resume: $(cat py1.txt)"; else fail "resume: $(cat py1.txt)"; fi
fi

# ---- PyTorch: torch.load reads ck.pt, and its own model with those weights gives eval's numbers ----
if have_python "PyTorch evaluates the checkpoint"; then
    if "$NB_PYTHON" - ck.pt g "$src/bench/dlbench" "$eval_test" > py2.txt 2>&1 <<'PY'
import math, sys
import torch
sys.path.insert(0, sys.argv[3])
from torch_lm import LSTMLM
ck = torch.load(sys.argv[1], weights_only=True)
assert ck["model"] == "lstm" and ck["epoch"] == "3" and ck["vocab"] == "21", {k: v for k, v in ck.items() if isinstance(v, str)}
# the word_language_model example's reader: ids in the order words first appear, <eos> per line
w2i = {}
def read(path, grow):
    ids = []
    for line in open(path, encoding="utf8"):
        for w in line.split() + ["<eos>"]:
            if grow:
                w2i.setdefault(w, len(w2i))
            ids.append(w2i[w])
    return torch.tensor(ids)
read(sys.argv[2] + "/ptb.train.txt", True)
test = read(sys.argv[2] + "/ptb.test.txt", False)
m = LSTMLM(len(w2i), 256, 256, 2)
m.load_state_dict({k[6:]: v for k, v in ck.items() if k.startswith("model.")})  # strict
m.eval()
bptt, B = int(ck["bptt"]), 10
L = test.numel() // B
rows = test[:B * L].view(B, L)
state, total, n = None, 0.0, 0
with torch.no_grad():
    for k in range((L - 1) // bptt):
        x, y = rows[:, k * bptt:(k + 1) * bptt], rows[:, k * bptt + 1:(k + 1) * bptt + 1]
        out, state = m(x, state)
        total += torch.nn.functional.cross_entropy(out.reshape(-1, len(w2i)), y.reshape(-1)).item()
        n += 1
loss = total / n
ours = float(sys.argv[4].split()[2])
assert abs(loss - ours) < 2e-5, (loss, ours)
print(f"PyTorch's test loss {loss:.6f} (perplexity {math.exp(loss):.4f}), nabla's eval {ours:.6f}")
PY
    then pass "PyTorch: $(cat py2.txt)"; else fail "PyTorch: $(cat py2.txt)"; fi
fi

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
