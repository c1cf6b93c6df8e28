"""PyTorch's side of the GPU micro-benchmark: the cases of bench/cuda_micro.c, timed the same way.

Float32 on cuda:0. Each case is warmed up, then timed with torch.cuda.Event: --samples samples
(default 20) of R back-to-back calls each, R chosen from the warm-up so that a sample lasts about
--target-ms (default 20 ms); each call's result is dropped at once (freed into the caching
allocator, as nabla_cuda_micro frees it with nb_scope_end). The figure is the median over the
samples of the sample's time / R. Rates, columns and the --json lines are those of
nabla_cuda_micro (see bench/cuda_micro.c), with impl "pytorch". Without a GPU it prints one line
saying so and exits 0.

usage: python3 bench/cuda_micro_torch.py [--json] [--samples N] [--target-ms MS] [--cases a,b,...]
"""
import argparse
import json
import math
import sys
import warnings

import torch

N64M = 1 << 26
ROW = 4096

# name, shape string, dims, kind, tf32: the same table as CASES in bench/cuda_micro.c.
CASES = [
    ("sgemm_fp32", "4096x4096x4096", (4096,), "mm", False),
    ("sgemm_fp32", "8192x8192x8192", (8192,), "mm", False),
    ("sgemm_tf32", "4096x4096x4096", (4096,), "mm", True),
    ("sgemm_tf32", "8192x8192x8192", (8192,), "mm", True),
    ("copy", "2^26", (N64M,), "copy", False),
    ("add", "2^26", (N64M,), "add", False),
    ("mul", "2^26", (N64M,), "mul", False),
    ("relu", "2^26", (N64M,), "relu", False),
    ("exp", "2^26", (N64M,), "exp", False),
    ("add_row", "16384x4096+4096", (N64M // ROW, ROW), "add_row", False),
    ("transpose_copy", "8192x8192^T", (8192, 8192), "t_copy", False),
    ("sum_all", "2^26", (N64M,), "sum_all", False),
    ("sum_lastdim", "8192x8192", (8192, 8192), "sum_last", False),
    ("sum_dim0", "8192x8192", (8192, 8192), "sum_0", False),
    ("softmax", "8192x8192", (8192, 8192), "softmax", False),
]

OPS = {
    "mm": lambda a, b: torch.mm(a, b),
    "copy": lambda a, b: a.clone(),
    "add": lambda a, b: a + b,
    "add_row": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "relu": lambda a, b: torch.relu(a),
    "exp": lambda a, b: torch.exp(a),
    "t_copy": lambda a, b: a.contiguous(),
    "sum_all": lambda a, b: a.sum(),
    "sum_last": lambda a, b: a.sum(-1),
    "sum_0": lambda a, b: a.sum(0),
    "softmax": lambda a, b: torch.softmax(a, -1),
}


def work_per_call(dims, kind):
    """FLOPs (sgemm) or bytes moved (the rest) per call, as work_per_call in bench/cuda_micro.c."""
    if kind == "mm":
        return 2.0 * dims[0] ** 3
    n = float(math.prod(dims))
    if kind in ("add", "mul"):
        return 3.0 * 4.0 * n
    if kind == "add_row":
        return 2.0 * 4.0 * n + 4.0 * ROW
    if kind == "sum_all":
        return 4.0 * n + 4.0
    if kind == "sum_last":
        return 4.0 * n + 4.0 * dims[0]
    if kind == "sum_0":
        return 4.0 * n + 4.0 * dims[1]
    return 2.0 * 4.0 * n  # copy, relu, exp, t_copy, softmax


def set_tf32(allow):
    # PyTorch 2.9+ warns that allow_tf32 will give way to fp32_precision; the old flag still works
    # and is the one nabla's nb_cuda_set_allow_tf32 mirrors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = allow


def make_inputs(dims, kind, dev):
    """Random normal inputs (never all zeros): a, and b for the binary ops and sgemm."""
    if kind == "mm":
        return (torch.randn(dims[0], dims[0], device=dev), torch.randn(dims[0], dims[0], device=dev))
    a = torch.randn(*dims, device=dev)
    if kind in ("add", "mul"):
        return a, torch.randn(*dims, device=dev)
    if kind == "add_row":
        return a, torch.randn(ROW, device=dev)
    if kind == "t_copy":
        return a.t(), None  # the strided view, made once outside the timed loop
    return a, None


def time_batch(fn, a, b, reps, e0, e1):
    """GPU milliseconds of reps back-to-back calls, between two events on the current stream."""
    e0.record()
    for _ in range(reps):
        fn(a, b)
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1)


def measure(fn, a, b, args, e0, e1):
    """Warm-up, choice of R, then the samples: (median, min, max) per-call ms, and R."""
    for _ in range(2):
        time_batch(fn, a, b, 1, e0, e1)
    per_call = max(time_batch(fn, a, b, 3, e0, e1) / 3.0, 1e-4)
    reps = min(max(math.ceil(args.target_ms / per_call), 1), 10000)
    t = sorted(time_batch(fn, a, b, reps, e0, e1) / reps for _ in range(args.samples))
    n = len(t)
    med = t[n // 2] if n % 2 else 0.5 * (t[n // 2 - 1] + t[n // 2])
    return med, t[0], t[-1], reps


def print_row(name, shape, kind, med, lo, hi, reps, rate, copy_rate, as_json):
    unit = "TFLOP/s" if kind == "mm" else "GB/s"
    frac = f"{rate / copy_rate:.2f}" if kind != "mm" and copy_rate > 0 else "-"
    print(f"{name:<15} {shape:<16} {med:9.4f} [{lo:.4f}-{hi:.4f}] {reps:6d} {rate:10.1f} {unit:<8} {frac:>7}")
    if as_json:
        obj = {"impl": "pytorch", "case": name, "shape": shape, "median_ms": float(f"{med:.6g}"),
               "rate": float(f"{rate:.6g}"), "unit": unit}
        print(json.dumps(obj, separators=(",", ":")))
    sys.stdout.flush()


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch's side of bench/cuda_micro.c")
    p.add_argument("--json", action="store_true", help="also print one JSON object per case")
    p.add_argument("--samples", type=int, default=20)
    p.add_argument("--target-ms", type=float, default=20.0, help="GPU time of one sample, roughly")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    args = p.parse_args()
    if args.samples < 1 or not args.target_ms > 0:
        p.error("--samples must be >= 1 and --target-ms > 0")
    return args


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("cuda_micro_torch: no CUDA GPU is available to PyTorch: nothing to measure, skipped")
        return 0
    selected = set(args.cases.split(",")) if args.cases else None
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    p = torch.cuda.get_device_properties(dev)
    print(f"# pytorch {torch.__version__}, cuda:0 {p.name} (sm_{p.major}{p.minor}, "
          f"{p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB), CUDA {torch.version.cuda}")
    print(f"{'case':<15} {'shape':<16} {'median_ms':>9} {'[min-max]':<15} {'reps':>6} {'rate':>10} "
          f"{'unit':<8} {'of_copy':>7}")
    torch.manual_seed(0)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    copy_rate = 0.0
    for name, shape, dims, kind, tf32 in CASES:
        if selected is not None and name not in selected:
            continue
        set_tf32(tf32)
        a, b = make_inputs(dims, kind, dev)
        torch.cuda.synchronize()
        med, lo, hi, reps = measure(OPS[kind], a, b, args, e0, e1)
        set_tf32(False)
        del a, b
        rate = work_per_call(dims, kind) / (med * 1e-3) / (1e12 if kind == "mm" else 1e9)
        if kind == "copy":
            copy_rate = rate
        print_row(name, shape, kind, med, lo, hi, reps, rate, copy_rate, args.json)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
