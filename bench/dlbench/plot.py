"""The DLBench chart: per network, seconds per mini-batch for each thread count (and the GPU),
nabla beside PyTorch, from the results compare.sh writes.

usage: .venv-bench/bin/python bench/dlbench/plot.py RESULTS_DIR [RESULTS_DIR...] [-o chart.png]
           [--log] [--title TEXT] [--models a,b,...]

Reads nabla.jsonl and torch.jsonl in each directory (a later directory adds rows, e.g. a GPU run
beside a CPU one); per (network, device, threads) each side's lowest median is drawn, with its
min-max spread as an error bar and the ratio PyTorch/nabla (> 1: nabla faster) above each pair.
One panel per network (the scales differ by 100x), each on a linear scale; --log draws all
networks in one panel on a log scale instead (the one to use when a GPU column sits beside CPU
ones: their times differ by 100x). --models draws only those networks.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["fcn-s", "alexnet-s", "resnet-50", "fcn-r", "alexnet-r", "resnet-56", "lstm", "cnn", "resnet20"]
COLORS = {"nabla": "#1f77b4", "pytorch": "#ff7f0e"}


def load(dirs):
    best = {}  # (impl, model, column) -> row
    for d in dirs:
        for name in ("nabla.jsonl", "torch.jsonl"):
            path = os.path.join(d, name)
            if not os.path.exists(path):
                continue
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if not line.startswith("{"):
                        continue
                    r = json.loads(line)
                    if r.get("median_s") is None or r["model"] == "sgemm":
                        continue
                    col = f"{r['threads']} thr" if r["device"] == "cpu" else r["device"]
                    k = (r["impl"], (r["model"], r["batch"]), col)
                    if k not in best or r["median_s"] < best[k]["median_s"]:
                        best[k] = r
    return best


def column_key(c):
    return (1, c) if not c.endswith(" thr") else (0, int(c.split()[0]))


def one_panel(best, models, cols):
    """All networks on one log axis: a group per network, nabla and PyTorch bars per column."""
    fig, ax = plt.subplots(figsize=(min(16.0, max(6.0, 2.0 + 0.5 * len(models) * len(cols))), 4.2))
    w = 0.8 / (2 * len(cols))
    labelled = set()
    for i, m in enumerate(models):
        for x, c in enumerate(cols):
            for j, impl in enumerate(("nabla", "pytorch")):
                r = best.get((impl, m, c))
                if not r:
                    continue
                pos = i + (2 * x + j + 0.5) * w - 0.4
                ax.bar(pos, r["median_s"], w, color=COLORS[impl], alpha=1.0 if x % 2 == 0 else 0.6,
                       yerr=[[r["median_s"] - r["min_s"]], [r["max_s"] - r["median_s"]]], capsize=1.5,
                       label=None if (impl, c) in labelled else f"{'PyTorch' if j else 'nabla'}, {c}")
                labelled.add((impl, c))
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels([f"{m}\nbatch {b}" for m, b in models], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("seconds per mini-batch (log)")
    ax.legend(fontsize=8, ncol=len(cols))
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("-o", "--output", default=None, help="the PNG (default RESULTS_DIR/dlbench.png)")
    ap.add_argument("--log", action="store_true")
    ap.add_argument("--title", default=None)
    ap.add_argument("--models", default=None, help="only these networks (default: all in the results)")
    args = ap.parse_args()
    best = load(args.results)
    if args.models:
        keep = set(args.models.split(","))
        best = {k: v for k, v in best.items() if k[1][0] in keep}
    if not best:
        print(f"plot: no timings in {', '.join(args.results)}", file=sys.stderr)
        return 1
    # a panel per (network, batch size); its columns: the thread counts (and GPUs) it ran with
    models = sorted({k[1] for k in best}, key=lambda m: (ORDER.index(m[0]) if m[0] in ORDER else 99, m))
    cols_of = {m: sorted({k[2] for k in best if k[1] == m}, key=column_key) for m in models}
    if args.log:
        fig = one_panel(best, models, sorted({k[2] for k in best}, key=column_key))
        fig.suptitle(args.title or "DLBench training step: nabla vs PyTorch", fontsize=10)
        fig.tight_layout()
        return save(fig, args)
    ncol = min(4, len(models))
    nrow = (len(models) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 3.2 * nrow), squeeze=False)
    w = 0.38
    for i, m in enumerate(models):
        ax, cols = axes[i // ncol][i % ncol], cols_of[m]
        for j, impl in enumerate(("nabla", "pytorch")):
            xs, ys, lo, hi = [], [], [], []
            for x, c in enumerate(cols):
                r = best.get((impl, m, c))
                if r:
                    xs.append(x + (j - 0.5) * w)
                    ys.append(r["median_s"])
                    lo.append(r["median_s"] - r["min_s"])
                    hi.append(r["max_s"] - r["median_s"])
            ax.bar(xs, ys, w, yerr=[lo, hi], capsize=2, color=COLORS[impl], label="PyTorch" if j else "nabla")
        for x, c in enumerate(cols):
            a, b = best.get(("nabla", m, c)), best.get(("pytorch", m, c))
            if a and b:
                top = max(a["max_s"], b["max_s"])
                ax.annotate(f"{b['median_s'] / a['median_s']:.2f}x", (x, top), ha="center", va="bottom",
                            fontsize=8, xytext=(0, 2), textcoords="offset points")
        ax.set_title(f"{m[0]} (batch {m[1]})", fontsize=10)
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(cols, fontsize=8)
        ax.set_ylabel("s / mini-batch", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    for i in range(len(models), nrow * ncol):
        axes[i // ncol][i % ncol].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper right", ncol=2)
    fig.suptitle(args.title or "DLBench training step: nabla vs PyTorch (ratio = PyTorch / nabla, > 1: nabla faster)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, args)


def save(fig, args):
    out = args.output or os.path.join(args.results[0], "dlbench.png")
    fig.savefig(out, dpi=120)
    print(f"plot: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
