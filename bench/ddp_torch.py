"""PyTorch's twin of bench/ddp_step.c: a data-parallel training step under `mpiexec -n R`.

Each rank takes 1/R of the global mini-batch; torch.nn.parallel.DistributedDataParallel on the
gloo backend averages the gradients (nabla: DistributedDataParallel on MPI). With one process it
times the plain step. The networks are bench/dlbench/torch_models.py's, the optimizer settings
ddp_step.c's table. Every rank starts a step together (a barrier) and a step's time is the slowest
rank's; rank 0 prints one JSON line.

    mpiexec -n 2 .venv-bench/bin/python bench/ddp_torch.py --model fcn-r --threads 1
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlbench"))
import torch_models  # noqa: E402

# name: (c, h, w, classes, batch, lr, momentum, weight decay, nesterov): ddp_step.c's specs[]
SPECS = {
    "fcn-r": (1, 28, 28, 10, 1024, 0.05, 0.9, 1e-4, False),
    "alexnet-r": (3, 32, 32, 10, 1024, 0.01, 0.9, 0, False),
    "resnet-56": (3, 32, 32, 10, 128, 0.01, 0.9, 1e-4, False),
    "cnn": (1, 28, 28, 10, 128, 0.01, 0.9, 0, False),
    "resnet20": (3, 32, 32, 10, 128, 0.1, 0.9, 1e-4, False),
    "fcn-s": (1, 1, 26752, 26752, 64, 0.01, 0, 0, False),
    "alexnet-s": (3, 224, 224, 1000, 16, 0.01, 0, 0, False),
    "resnet-50": (3, 224, 224, 1000, 16, 0.1, 0.9, 1e-4, True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="fcn-r", choices=sorted(SPECS))
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--port", type=int, default=29511)
    a = ap.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=size)
    torch.set_num_threads(a.threads)
    c, h, w, classes, batch, lr, momentum, wd, nesterov = SPECS[a.model]
    if batch % size:
        sys.exit(f"ddp_torch: batch {batch} does not split over {size} ranks")
    torch.manual_seed(1)
    net = torch_models.build(a.model, c, h, w, classes)
    x = torch.randn(batch // size, c, h, w)
    y = torch.randint(0, classes, (batch // size,))
    if a.channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model = torch.nn.parallel.DistributedDataParallel(net) if size > 1 else net
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov)
    times = []
    slowest = torch.zeros(1, dtype=torch.float64)
    for i in range(-a.warmup, a.iters):
        dist.barrier()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        slowest[0] = time.perf_counter() - t0
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if i >= 0:
            times.append(slowest.item())
    times.sort()
    q = statistics.quantiles(times, n=4) if len(times) > 1 else times * 3
    if rank == 0:
        med = statistics.median(times)
        print(json.dumps({"impl": "torch", "model": a.model, "ranks": size, "threads": a.threads, "batch": batch,
                          "iters": a.iters, "median_s": round(med, 6), "q1_s": round(q[0], 6),
                          "q3_s": round(q[2], 6), "samples_per_s": round(batch / med, 1),
                          "torch": torch.__version__}), flush=True)
    dist.barrier()  # gloo aborts a rank whose peer tore the group down first
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
