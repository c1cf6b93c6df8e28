#!/usr/bin/env bash
# examples/train_lm.c on a small text in Penn Treebank's form (one sentence a line) whose next
# word is mostly determined by a tiny grammar: after 3 epochs the validation perplexity must be
# below 2, where an untrained model of its 21 words is near 21 and the grammar's own is about 1.5.
# usage: example_train_lm.sh TRAIN_LM_BINARY
set -euo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$(dirname "${BASH_SOURCE[0]}")/support/grammar_text.py" "$dir"
out=$("$bin" "$dir" --epochs 3 --size 32 --layers 1 --lr 5 --clip 0.5 --device auto)
echo "$out"
grep -q '^train_lm: 21 words' <<< "$out" || { echo "FAIL: expected a vocabulary of 21 words"; exit 1; }
ppl=$(sed -n 's/^epoch 3: .*valid loss [0-9.]* (ppl \([0-9.]*\)).*/\1/p' <<< "$out")
[ -n "$ppl" ] || { echo "FAIL: no epoch 3 line"; exit 1; }
awk -v p="$ppl" 'BEGIN { exit !(p < 2.0) }' || { echo "FAIL: validation perplexity $ppl, not below 2"; exit 1; }
echo "ok: validation perplexity $ppl after 3 epochs"
