"""Texts in Penn Treebank's form (one sentence a line) from a tiny grammar whose next word is
mostly determined: 21 words with <eos>, and about 1.5 for the grammar's own perplexity. Used by
tests/example_train_lm.sh and tests/test_cli_lm.sh.

    python3 grammar_text.py DIR [--valid grammar|noise] [--test]

writes DIR/ptb.train.txt (3,000 sentences) and DIR/ptb.valid.txt (400 sentences, or with noise
300 lines of 5 of the training text's words in random order, which a model gets worse at as it
learns the grammar), and with --test DIR/ptb.test.txt (400 sentences). Seeded: the same files
every time.
"""
import argparse
import os
import random

SUBJ = ["the cat", "a dog", "the man", "a bird", "the child"]
VERB = {"the cat": "eats", "a dog": "chases", "the man": "reads", "a bird": "sings", "the child": "draws"}
OBJ = {"eats": ["fish", "meat"], "chases": ["the ball", "a cat"], "reads": ["the paper", "a book"],
       "sings": ["a song"], "draws": ["a house", "the sun"]}


def text(rng, n):
    lines = []
    for _ in range(n):
        s = rng.choice(SUBJ)
        lines.append(f" {s} {VERB[s]} {rng.choice(OBJ[VERB[s]])} \n")
    return "".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--valid", choices=["grammar", "noise"], default="grammar")
    ap.add_argument("--test", action="store_true")
    a = ap.parse_args()
    rng = random.Random(2)
    train = text(rng, 3000)
    if a.valid == "grammar":
        valid = text(rng, 400)
    else:
        words = sorted(set(train.split()))
        valid = "".join(" " + " ".join(rng.choice(words) for _ in range(5)) + " \n" for _ in range(300))
    files = {"train": train, "valid": valid}
    if a.test:
        files["test"] = text(rng, 400)
    for name, body in files.items():
        with open(os.path.join(a.dir, f"ptb.{name}.txt"), "w") as f:
            f.write(body)


if __name__ == "__main__":
    main()
