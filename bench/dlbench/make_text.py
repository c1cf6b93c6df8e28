"""Writes a text in Penn Treebank's form for timing the language model where PTB itself is not at
hand: DIR/ptb.train.txt, ptb.valid.txt and ptb.test.txt with PTB's sizes (929,589 / 73,760 /
82,430 words counting each line's <eos>, 10,000 words in all with <eos>), one sentence a line
(lengths 1 to 40, 21 on average, as PTB's), words drawn from a Zipf law (exponent 1) over 9,999
word types, every type present in the training text. Only the sizes and the word frequencies are
PTB's: a model learns nothing of language from it, so it serves timing, not perplexity.

    python3 make_text.py DIR [--seed N]
"""
import argparse
import os
import random


def sentences(rng, words, weights, n_tokens):
    out, count = [], 0
    while count < n_tokens:
        k = min(rng.randint(1, 40), n_tokens - count - 1) if n_tokens - count > 1 else 0
        line = rng.choices(words, weights, k=k) if k > 0 else []
        out.append(" " + " ".join(line) + " \n")
        count += k + 1  # the reader adds <eos> to each line
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    words = [f"w{i}" for i in range(9999)]
    weights = [1.0 / (i + 1) for i in range(9999)]
    os.makedirs(a.dir, exist_ok=True)
    train = [" " + " ".join(words[i:i + 20]) + " \n" for i in range(0, 9999, 20)]  # every type once
    have = sum(len(l.split()) + 1 for l in train)
    train += sentences(rng, words, weights, 929589 - have)
    rng.shuffle(train)
    for name, lines in (("train", train), ("valid", sentences(rng, words, weights, 73760)),
                        ("test", sentences(rng, words, weights, 82430))):
        with open(os.path.join(a.dir, f"ptb.{name}.txt"), "w") as f:
            f.writelines(lines)


if __name__ == "__main__":
    main()
