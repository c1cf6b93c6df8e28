"""PyTorch's side of the core micro-benchmark: the cases of bench/micro.c, timed the same way.

Each case is warmed up (at least 2 runs and --warmup-s seconds), then timed over
clamp(ceil(--target-s / last warm-up time), --min-reps, --max-reps) runs with
clock_gettime(CLOCK_MONOTONIC); the result is released inside the timed run, as nabla_micro
releases it with nb_scope_end. Prints the same CSV as nabla_micro:
    impl,op,size,threads,unit,median,min,max,reps,other_cpu
(other_cpu: CPUs kept busy by other processes while the case ran, as in bench/micro.c.)
Run it with the PyPI PyTorch of .venv-bench (scripts/bench-env.sh), not Debian's python3-torch.
"""
import argparse
import math
import os
import re
import sys
import time

import torch

# op, size string, shape, kind: the same table as CASES in bench/micro.c.
CASES = [
    ("sgemm", "256", (256, 256), "mm"),
    ("sgemm", "512", (512, 512), "mm"),
    ("sgemm", "1024", (1024, 1024), "mm"),
    ("sgemm", "2048", (2048, 2048), "mm"),
    ("sgemm", "4096", (4096, 4096), "mm"),
    ("linear", "64x2048x26752", (64, 2048, 26752), "linear"),
    ("linear", "64x26752x2048", (64, 26752, 2048), "linear"),
    ("linear", "64x2048x2048", (64, 2048, 2048), "linear"),
    ("linear", "16x4096x9216", (16, 4096, 9216), "linear"),
    ("linear", "16x4096x4096", (16, 4096, 4096), "linear"),
    ("add", "2^22", (1 << 22,), "add"),
    ("add", "2^24", (1 << 24,), "add"),
    ("mul", "2^22", (1 << 22,), "mul"),
    ("mul", "2^24", (1 << 24,), "mul"),
    ("sum_all", "2^24", (1 << 24,), "sum_all"),
    ("sum_lastdim", "4096x4096", (4096, 4096), "sum_last"),
    ("softmax", "4096x4096", (4096, 4096), "softmax"),
    ("softmax", "65536x128", (65536, 128), "softmax"),
    ("cross_entropy", "4096x10000", (4096, 10000), "ce"),
    ("to_channels_last", "1024x3x32x32", (1024, 3, 32, 32), "to_cl"),
    ("to_channels_last", "16x3x224x224", (16, 3, 224, 224), "to_cl"),
    ("to_channels_last", "16x64x56x56", (16, 64, 56, 56), "to_cl"),
]

OPS = {
    "mm": lambda a, b: torch.mm(a, b),
    "linear": lambda a, b: torch.nn.functional.linear(a, b),
    "add": lambda a, b: torch.add(a, b),
    "mul": lambda a, b: torch.mul(a, b),
    "sum_all": lambda a, b: torch.sum(a),
    "sum_last": lambda a, b: torch.sum(a, dim=-1),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "ce": lambda a, b: torch.nn.functional.cross_entropy(a, b),
    "to_cl": lambda a, b: a.contiguous(memory_format=torch.channels_last),
}


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) * 1e-9


def machine_busy_s():
    """CPU seconds spent by every process (all CPUs, not idle) since boot, or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    t = os.times()
    return t.user + t.system


def work_per_run(shape, kind):
    """FLOPs for sgemm, bytes moved for the rest (as work_per_run in bench/micro.c)."""
    n = math.prod(shape)
    if kind == "mm":
        return 2.0 * shape[0] ** 3
    if kind == "linear":
        return 2.0 * shape[0] * shape[1] * shape[2]
    if kind in ("add", "mul"):
        return 3.0 * 4.0 * n
    if kind == "sum_all":
        return 4.0 * n + 4.0
    if kind == "sum_last":
        return 4.0 * n + 4.0 * shape[0]
    return 2.0 * 4.0 * n  # softmax, ce, to_cl: read + write


def time_once(fn, a, b):
    t0 = now()
    r = fn(a, b)
    del r
    return now() - t0


def bench_one(op, size, shape, kind, args):
    fn = OPS[kind]
    if kind == "linear":  # shape (M, N, K): x [M, K], W [N, K]
        a = torch.rand((shape[0], shape[2]), dtype=torch.float32)
        b = torch.rand((shape[1], shape[2]), dtype=torch.float32)
    elif kind == "ce":  # logits [N, C] that require grad, N targets (micro.c's OP_CE)
        a = torch.rand(shape, dtype=torch.float32, requires_grad=True)
        b = torch.randint(0, shape[1], (shape[0],))
    else:
        a = torch.rand(shape, dtype=torch.float32)
        b = torch.rand(shape, dtype=torch.float32) if kind in ("mm", "add", "mul") else None
    busy0, own0, wall0 = machine_busy_s(), own_cpu_s(), now()
    w0, i, last = now(), 0, 0.0
    while i < 2 or now() - w0 < args.warmup_s:
        last = time_once(fn, a, b)
        i += 1
    reps = math.ceil(args.target_s / max(last, 1e-9))
    reps = max(args.min_reps, min(args.max_reps, reps))
    t = sorted(time_once(fn, a, b) for _ in range(reps))
    med = t[reps // 2] if reps % 2 else 0.5 * (t[reps // 2 - 1] + t[reps // 2])
    busy1, wall = machine_busy_s(), now() - wall0
    other = -1.0
    if busy0 is not None and busy1 is not None and wall > 0:
        other = (busy1 - busy0 - (own_cpu_s() - own0)) / wall
        if -0.05 < other < 0:
            other = 0.0  # clock-tick rounding
    w = work_per_run(shape, kind) * 1e-9
    unit = "GFLOP/s" if kind in ("mm", "linear") else "GB/s"
    print(f"torch,{op},{size},{args.threads},{unit},{w / med:.4g},{w / t[-1]:.4g},{w / t[0]:.4g},{reps},{other:.2f}",
          flush=True)


def blas_info():
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", cfg)
    isa = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    return f"blas {m.group(1) if m else '?'}, cpu capability {isa}, mkldnn {torch.backends.mkldnn.is_available()}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--ops", default=None, help="comma-separated: sgemm,linear,add,mul,sum_all,sum_lastdim,softmax,cross_entropy,to_channels_last")
    p.add_argument("--min-reps", type=int, default=10)
    p.add_argument("--max-reps", type=int, default=200)
    p.add_argument("--target-s", type=float, default=0.5)
    p.add_argument("--warmup-s", type=float, default=0.25)
    args = p.parse_args()
    if args.threads < 1 or args.min_reps < 1 or args.max_reps < args.min_reps:
        p.error("bad --threads / --min-reps / --max-reps")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, {blas_info()}")
    print("impl,op,size,threads,unit,median,min,max,reps,other_cpu", flush=True)
    wanted = set(args.ops.split(",")) if args.ops else None
    with torch.inference_mode():
        for op, size, shape, kind in CASES:
            if wanted is None or op in wanted:
                bench_one(op, size, shape, kind, args)


if __name__ == "__main__":
    sys.exit(main())
