"""`nabla train --model lstm --data ptb` in PyTorch, to time the two side by side: DLBench's LSTM
(torch_lm.LSTMLM: embedding and hidden 256, 2 layers) trained on DIR/ptb.{train,valid}.txt as
PyTorch's word_language_model example trains it (its reader, batchify and get_batch, batch first
and whole batches only as nabla's nb_lm_batches; the state carried and detached between batches,
each epoch from zero states; plain SGD at lr 20 with clip_grad_norm_ 0.25; the rate divided by 4
after an epoch whose validation loss is not the best; validation in batches of 10). Prints lines
in the form nabla's prints: "epoch E/N train loss ... valid loss ... perplexity ... (S s, R tokens/s)".

    python3 torch_train_lm.py DIR [--epochs N] [--batch-size 20] [--bptt 35] [--lr 20] [--clip 0.25]
                                  [--limit N] [--threads N] [--seed N]
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import LMBatches  # noqa: E402
from torch_lm import LSTMLM, detach_state, read_words  # noqa: E402


def epoch(model, batches, vocab, opt=None, params=None, clip=0.0):
    model.train(opt is not None)
    state, total, n = None, 0.0, 0
    with torch.set_grad_enabled(opt is not None):
        for x, y in batches:
            out, state = model(x, state)
            state = detach_state(state)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, vocab), y.reshape(-1))
            if opt is not None:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, clip)
                opt.step()
            total += loss.item()
            n += 1
    return total / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--bptt", type=int, default=35)
    ap.add_argument("--lr", type=float, default=20.0)
    ap.add_argument("--clip", type=float, default=0.25)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    w2i = {}
    train = read_words(os.path.join(a.dir, "ptb.train.txt"), w2i, True)
    valid = read_words(os.path.join(a.dir, "ptb.valid.txt"), w2i, False)
    if a.limit:
        train = train[:a.limit]
    vocab = len(w2i)
    tb, vb = LMBatches(train, a.batch_size, a.bptt), LMBatches(valid, 10, a.bptt)
    model = LSTMLM(vocab, 256, 256, 2)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=a.lr)
    print(f"torch {torch.__version__}: lstm ({sum(p.numel() for p in params)} parameters), {vocab} words, "
          f"{train.numel()} training tokens in {tb.n} batches of {a.batch_size} x {a.bptt}, "
          f"{torch.get_num_threads()} threads", flush=True)
    best, lr = math.inf, a.lr
    for e in range(a.epochs):
        t0 = time.perf_counter()
        tl = epoch(model, tb, vocab, opt, params, a.clip)
        secs = time.perf_counter() - t0
        vl = epoch(model, vb, vocab)
        print(f"epoch {e + 1}/{a.epochs} train loss {tl:.6f} (ppl {math.exp(tl):.2f}) valid loss {vl:.6f} "
              f"perplexity {math.exp(vl):.4f} lr {lr:g} ({secs:.1f} s, {tb.n * a.batch_size * a.bptt / secs:.0f} "
              "tokens/s)", flush=True)
        if vl < best:
            best = vl
        else:
            lr /= 4
            for g in opt.param_groups:
                g["lr"] = lr


if __name__ == "__main__":
    main()
