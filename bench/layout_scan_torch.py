"""PyTorch's side of nabla_layout_scan (bench/layout_scan.c): the same ops on the same float32
[N, C, H, W] tensors, contiguous and channels-last, timed the same way (CALLS + 2 calls, the first 2
dropped, the median or the least of the rest, in ms), printed beside nabla's and as PyTorch / nabla (above 1: nabla
faster). With --nabla it runs that binary first with the same threads and shape.

usage: python bench/layout_scan_torch.py [--threads T] [--shape N C H W] [--calls 7]
                                         [--stat median|min]
                                         [--nabla build-bench/bench/nabla_layout_scan]
"""
import argparse
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

OPS = {
    "neg": lambda x, y, b: torch.neg(x),
    "exp": lambda x, y, b: torch.exp(x),
    "tanh": lambda x, y, b: torch.tanh(x),
    "sigmoid": lambda x, y, b: torch.sigmoid(x),
    "relu": lambda x, y, b: torch.relu(x),
    "add": lambda x, y, b: x + y,
    "mul": lambda x, y, b: x * y,
    "div": lambda x, y, b: x / y,
    "maximum": lambda x, y, b: torch.maximum(x, y),
    "gt": lambda x, y, b: x > y,
    "add bias [1,C,1,1]": lambda x, y, b: x + b,
    "mul_scalar": lambda x, y, b: x * 2,
    "sum all": lambda x, y, b: x.sum(),
    "sum 0,2,3": lambda x, y, b: x.sum((0, 2, 3)),
    "sum 1": lambda x, y, b: x.sum(1),
    "sum 0": lambda x, y, b: x.sum(0),
    "mean 0,2,3": lambda x, y, b: x.mean((0, 2, 3), keepdim=True),
    "var 0,2,3": lambda x, y, b: x.var((0, 2, 3)),
    "softmax 1": lambda x, y, b: torch.softmax(x, 1),
    "log_softmax 1": lambda x, y, b: torch.log_softmax(x, 1),
    "max": lambda x, y, b: x.max(),
    "argmax 1": lambda x, y, b: x.argmax(1),
    "max_dim 1": lambda x, y, b: torch.max(x, 1),
    "clone": lambda x, y, b: x.clone(),
    "contiguous": lambda x, y, b: x.contiguous(),
    "cat 1": lambda x, y, b: torch.cat([x, y], 1),
    "where": lambda x, y, b: torch.where(x > y, x, y),
    "clamp": lambda x, y, b: torch.clamp(x, -0.5, 0.5),
    "adaptive_avg_pool 1x1": lambda x, y, b: F.adaptive_avg_pool2d(x, 1),
    "avg_pool 2x2": lambda x, y, b: F.avg_pool2d(x, 2),
}


def torch_scan(shape, calls, stat):
    g = torch.Generator().manual_seed(1)
    x0, y0 = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    b = torch.randn((1, shape[1], 1, 1), generator=g)
    ms = {}
    for cl in (0, 1):
        fmt = torch.channels_last if cl else torch.contiguous_format
        x, y = x0.contiguous(memory_format=fmt), y0.contiguous(memory_format=fmt)
        for name, fn in OPS.items():
            t = []
            for _ in range(calls + 2):
                t0 = time.perf_counter()
                r = fn(x, y, b)
                t.append(time.perf_counter() - t0)
                del r
            ms[(name, cl)] = (min(t[2:]) if stat == "min" else statistics.median(t[2:])) * 1e3
    return ms


def nabla_scan(binary, threads, shape, calls, stat):
    out = subprocess.run([binary, str(threads), *map(str, shape), str(calls), stat], check=True, capture_output=True, text=True).stdout
    ms = {}
    for line in out.splitlines():
        if line.startswith("#") or line.startswith("op "):
            continue
        parts = line.replace("<<<", "").split()
        if len(parts) < 4:
            continue
        name = " ".join(parts[:-3])
        ms[(name, 0)], ms[(name, 1)] = float(parts[-3]), float(parts[-2])
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", type=int, nargs=4, default=[128, 32, 28, 28])
    ap.add_argument("--calls", type=int, default=7, help="timed calls per op (after 2 warm-ups)")
    ap.add_argument("--stat", choices=("median", "min"), default="median")
    ap.add_argument("--nabla", help="the nabla_layout_scan binary, run first")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    nb = nabla_scan(a.nabla, a.threads, a.shape, a.calls, a.stat) if a.nabla else {}
    pt = torch_scan(a.shape, a.calls, a.stat)
    label = "least" if a.stat == "min" else "median"
    print(f"# layout scan, {a.shape} float32, {a.threads} thread(s), {label} ms of {a.calls}; torch {torch.__version__}")
    if nb:
        print(f"{'op':24s} {'nabla NCHW':>10s} {'torch NCHW':>10s} {'ratio':>6s} {'nabla CL':>9s} {'torch CL':>9s} {'ratio':>6s}")
    else:
        print(f"{'op':24s} {'torch NCHW':>10s} {'torch CL':>9s}")
    for name in OPS:
        if nb:
            r0 = pt[(name, 0)] / nb[(name, 0)] if nb.get((name, 0)) else float("nan")
            r1 = pt[(name, 1)] / nb[(name, 1)] if nb.get((name, 1)) else float("nan")
            print(f"{name:24s} {nb[(name, 0)]:10.3f} {pt[(name, 0)]:10.3f} {r0:6.2f} "
                  f"{nb[(name, 1)]:9.3f} {pt[(name, 1)]:9.3f} {r1:6.2f}")
        else:
            print(f"{name:24s} {pt[(name, 0)]:10.3f} {pt[(name, 1)]:9.3f}")


if __name__ == "__main__":
    main()
