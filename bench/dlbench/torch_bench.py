"""PyTorch's side of `nabla bench` (tools/cmd_bench.c): the same networks, specs, timing and output.

usage: .venv-bench/bin/python bench/dlbench/torch_bench.py [--model a,b,...] [--device cpu|cuda[:N]]
           [--threads 1,2,...] [--batch-size N] [--warmup N] [--iters N] [--format json|csv|table]
           [--seed N] [--cudnn-benchmark on|off] [--step-in-backward on|off|auto]
           [--cuda-graph on|off]

--step-in-backward on steps each parameter in backward, as soon as its gradient is whole, with
PyTorch's recipe ("How to save memory by fusing the optimizer step into the backward pass"): one
optimizer per parameter, stepped and zeroed by a register_post_accumulate_grad_hook; the
iteration's optimizer step then has nothing left to do (nabla's flag of the same name). auto: on
for the networks that do not clip their gradients (all but lstm), off with --cuda-graph on.

--cuda-graph on (a GPU only) times the iteration as PyTorch's "whole network capture" recipe
(torch.cuda.graphs, CUDA Graphs in the CUDA semantics notes): max(3, --warmup) warm-up iterations
on a side stream, then zero_grad(set_to_none) and one capture of forward, loss, backward,
(clip_grad_norm_), optimizer step into a torch.cuda.CUDAGraph, over static input and target tensors
(the LSTM's carried state too); each timed iteration copies the batch into the static tensors,
replays the graph and reads the static loss back (nabla's flag of the same name). Adam (cnn) is
built with capturable=True, which its capture needs. warmup_added counts the side-stream warm-up
iterations beyond --warmup.

Networks come from torch_models.build (the DLBench six, cnn, resnet20) and torch_lm.LSTMLM (lstm);
"sgemm" is one 2048^3 float32 matmul per iteration. One timed iteration = zero_grad(set_to_none),
forward, cross-entropy, backward, (clip_grad_norm_), optimizer step, loss.item() (and a device
synchronise), on synthetic inputs built once: Gaussian images and uniform labels, uniform tokens
for the LSTM (128 sequences x 32 steps, vocabulary 10000, state carried between mini-batches,
detached). Each (network, thread count) runs --warmup untimed iterations, then --iters timed ones;
torch.set_num_threads is called per thread count. Output: one JSON object per line with the same
fields as `nabla bench --format json` (impl "pytorch"); peak_rss_mb is the process's ru_maxrss,
peak_alloc_mb torch.cuda.max_memory_allocated on a GPU (null on the CPU). Runs under torch 1.13
and 2.x.
"""
import argparse
import json
import math
import os
import resource
import sys
import time
import warnings

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LSTM_T, LSTM_VOCAB, LSTM_EMBED, LSTM_HIDDEN, LSTM_LAYERS, SGEMM_N = 32, 10000, 256, 256, 2, 2048

# name: (c, h, w, classes, batch, forward FLOPs per sample, optimizer, dlbench) -- the same table as
# specs[] in tools/cmd_bench.c. Optimizer: (kind, lr, momentum, weight decay, nesterov, clip).
SPECS = {
    "fcn-s": (1, 1, 26752, 26752, 64, 0.236e9, ("sgd", 0.01, 0, 0, False, 0), True),
    "alexnet-s": (3, 224, 224, 1000, 16, 2.27e9, ("sgd", 0.01, 0, 0, False, 0), True),
    "resnet-50": (3, 224, 224, 1000, 16, 8.18e9, ("sgd", 0.1, 0.9, 1e-4, True, 0), True),
    "fcn-r": (1, 28, 28, 10, 1024, 28.4e6, ("sgd", 0.05, 0.9, 1e-4, False, 0), True),
    "alexnet-r": (3, 32, 32, 10, 1024, 21.5e6, ("sgd", 0.01, 0.9, 0, False, 0), True),
    "resnet-56": (3, 32, 32, 10, 128, 0.251e9, ("sgd", 0.01, 0.9, 1e-4, False, 0), True),
    "lstm": (1, 1, LSTM_T, LSTM_VOCAB, 128, 231e6, ("sgd", 0.1, 0, 0, False, 5.0), True),
    "cnn": (1, 28, 28, 10, 128, 8482304, ("adam", 1e-3, 0, 0, False, 0), False),
    "resnet20": (3, 32, 32, 10, 128, 81626368, ("sgd", 0.1, 0.9, 1e-4, False, 0), False),
    "sgemm": (1, SGEMM_N, SGEMM_N, 0, 1, 2.0 * SGEMM_N**3, None, False),
}
FIELDS = ["impl", "model", "device", "threads", "batch", "iters", "warmup", "median_s", "q1_s", "q3_s",
          "min_s", "max_s", "samples_per_s", "gflops", "fwd_flops_per_sample", "params", "peak_rss_mb",
          "peak_alloc_mb", "loss", "error"]


def fail(msg):
    print(f"torch_bench: {msg}", file=sys.stderr)
    sys.exit(2)


def int_list(flag, s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        v = []
    if not v or any(x < 1 or x > 4096 for x in v):
        fail(f"{flag}: expected comma-separated integers in [1, 4096], got \"{s}\"")
    return v


def quantile(v, q):
    """v sorted; linear interpolation (numpy's default, as in cmd_bench.c)."""
    pos = q * (len(v) - 1)
    i = int(math.floor(pos))
    return v[i] + (pos - i) * (v[i + 1] - v[i]) if i + 1 < len(v) else v[-1]


FASHION = ("fcn-r", "cnn")
CIFAR = ("alexnet-r", "resnet-56", "resnet20")


def read_ptb(data_dir):
    """--data real for the LSTM: Penn Treebank's ptb.train.txt in data_dir read as PyTorch's
    word_language_model example reads it (data.py's Corpus: each line's words, then '<eos>', ids
    in the order words first appear), as a 1-D int64 tensor, and the vocabulary's size."""
    if not data_dir:
        raise ValueError("--data real needs --data-dir with Penn Treebank's ptb.train.txt")
    from torch_lm import read_words
    w2i = {}
    ids = read_words(os.path.join(data_dir, "ptb.train.txt"), w2i, True)
    return ids, len(w2i)


class LMBatches:
    """The example's batchify and get_batch, batch first (as nabla's nb_lm_batches): the stream's
    first batch * L tokens as [batch, L] rows; an epoch is the (L - 1) // bptt whole batches
    x = rows[:, k bptt : (k + 1) bptt], y = x's next tokens."""

    def __init__(self, tokens, batch, bptt):
        L = tokens.numel() // batch
        if L - 1 < bptt:
            raise ValueError(f"{tokens.numel()} tokens in {batch} rows of {L} give no batch of {bptt} steps "
                             "and their next tokens")
        self.rows, self.bptt, self.n = tokens[:batch * L].view(batch, L), bptt, (L - 1) // bptt

    def __iter__(self):
        for k in range(self.n):
            a = k * self.bptt
            yield self.rows[:, a:a + self.bptt].contiguous(), self.rows[:, a + 1:a + 1 + self.bptt].contiguous()


class CaptureError(Exception):
    """The training step could not be captured as a CUDA graph (--cuda-graph on)."""


def read_real(name, data_dir):
    """--data real: the training set of `name` as float32 [N, C, H, W] in [0, 1] and int64 labels,
    normalised per channel as nabla's loader does (Fashion-MNIST's IDX files, CIFAR-10's binary
    batches)."""
    import gzip
    import numpy as np
    if name in FASHION:
        d = data_dir or "/usr/share/datasets/fashion-mnist"
        def idx(stem):
            for path, op in ((os.path.join(d, stem + ".gz"), gzip.open), (os.path.join(d, stem), open)):
                if os.path.exists(path):
                    with op(path, "rb") as f:
                        return f.read()
            raise FileNotFoundError(f"{stem} not in {d}")
        img, lab = idx("train-images-idx3-ubyte"), idx("train-labels-idx1-ubyte")
        x = np.frombuffer(img, np.uint8, offset=16).reshape(-1, 1, 28, 28)
        y = np.frombuffer(lab, np.uint8, offset=8)
        mean, std = [0.2860], [0.3530]
    else:
        if not data_dir:
            raise ValueError("--data real needs --data-dir with the CIFAR-10 binary batches")
        recs = b"".join(open(os.path.join(data_dir, f"data_batch_{i}.bin"), "rb").read() for i in range(1, 6))
        a = np.frombuffer(recs, np.uint8).reshape(-1, 3073)
        x, y = a[:, 1:].reshape(-1, 3, 32, 32), a[:, 0]
        mean, std = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
    xt = torch.from_numpy(x.astype(np.float32) / 255.0)
    m, s = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    return (xt - m) / s, torch.from_numpy(y.astype(np.int64))


class Net:
    """The model, optimizer and batch of one network (all built once; with --data real a
    DataLoader over the training set gives each iteration's batch)."""

    def __init__(self, name, batch, seed, device, data="synthetic", data_dir=None, memory_format="contiguous",
                 step_in_backward="off", cuda_graph=False):
        c, h, w, classes, _, _, opt, _ = SPECS[name]
        self.name, self.batch, self.device, self.state = name, batch, device, None
        self.cuda_graph, self.graph = cuda_graph, None
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        self.model = None
        if name == "sgemm":
            self.x = torch.randn(h, w, generator=g).to(device)
            self.y = torch.randn(h, w, generator=g).to(device)
            return
        if cuda_graph:
            if device.type != "cuda":
                raise ValueError("--cuda-graph on: cuda graphs need a CUDA device")
            if step_in_backward == "on":
                raise ValueError("--cuda-graph on and --step-in-backward on are not supported together")
        if name == "lstm":
            from torch_lm import LSTMLM
            self.model = LSTMLM(LSTM_VOCAB, LSTM_EMBED, LSTM_HIDDEN, LSTM_LAYERS)
            self.x = torch.randint(0, LSTM_VOCAB, (batch, w), generator=g)
            self.y = torch.randint(0, LSTM_VOCAB, (batch, w), generator=g)
        else:
            import torch_models
            self.model = torch_models.build(name, c, h, w, classes)
            self.x = torch.randn(batch, c, h, w, generator=g)
            self.y = torch.randint(0, classes, (batch,), generator=g)
        self.model.to(device).train()
        self.channels_last = memory_format == "channels_last" and self.model is not None
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.x, self.y = self.x.to(device), self.y.to(device)
        self.loader, self.it = None, None
        if data == "real" and name == "lstm":  # consecutive batches, the state carried between them
            tokens, words = read_ptb(data_dir)
            if words > LSTM_VOCAB:
                raise ValueError(f"ptb.train.txt in --data-dir has {words} words, more than the model's "
                                 f"vocabulary of {LSTM_VOCAB}")
            self.loader = LMBatches(tokens, batch, w)
        if data == "real" and name in FASHION + CIFAR:
            xs, ys = read_real(name, data_dir)
            self.loader = torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(xs, ys), batch_size=batch, shuffle=True, drop_last=True,
                generator=torch.Generator().manual_seed(seed))
        kind, lr, momentum, wd, nesterov, self.clip = opt
        ps = list(self.model.parameters())
        self.params = ps

        def make(ps):
            if kind == "adam":  # a CUDA graph captures Adam's step only with its step count on the device
                return torch.optim.Adam(ps, lr=lr, capturable=True) if cuda_graph else torch.optim.Adam(ps, lr=lr)
            return torch.optim.SGD(ps, lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov)

        self.opt = make(ps)
        if cuda_graph and kind == "adam":  # its warm-up steps run uncaptured, as the recipe's do
            warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
        # "on", "off" or "auto" (on where the network does not clip its gradients)
        step_in_backward = step_in_backward == "on" or (step_in_backward == "auto" and self.clip <= 0
                                                        and not cuda_graph)
        self.step_in_backward = step_in_backward
        if step_in_backward:
            if self.clip > 0:
                raise ValueError(f"{name} clips its gradients' norm to {self.clip:g} after backward, which "
                                 "--step-in-backward on leaves no gradients for")
            if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
                raise ValueError(f"--step-in-backward on needs PyTorch 2.1 or later (this is {torch.__version__})")
            per = {p: make([p]) for p in ps}

            def hook(p):
                per[p].step()
                per[p].zero_grad(set_to_none=True)

            for p in ps:
                p.register_post_accumulate_grad_hook(hook)

    def num_params(self):
        return sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def next_batch(self):
        """--data real: the loader's next batch (host tensors), starting a new epoch when one ends."""
        b = next(self.it, None) if self.it is not None else None
        if b is None:
            self.it = iter(self.loader)
            b = next(self.it)
        return b

    def step(self, x, y, state):
        """Forward, loss, backward, (clipping), optimizer step; the loss tensor and the LSTM's new
        state (None for the others)."""
        if self.name == "lstm":
            out, state = self.model(x, state)
            loss = F.cross_entropy(out.reshape(-1, LSTM_VOCAB), y.reshape(-1))
        else:
            if self.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            loss, state = F.cross_entropy(self.model(x), y), None
        loss.backward()
        if self.clip > 0:  # sync-free: foreach norms, clamp, foreach_mul (no error_if_nonfinite)
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        if not self.step_in_backward:
            self.opt.step()
        return loss, state

    def iterate(self):
        if self.model is None:
            torch.mm(self.x, self.y)
            self.sync()
            return 0.0
        if self.graph is not None:
            return self.replay()
        if self.loader is not None:  # the input pipeline is part of a real-data iteration
            b = self.next_batch()
            self.x, self.y = b[0].to(self.device), b[1].to(self.device)
        self.opt.zero_grad(set_to_none=True)
        loss, state = self.step(self.x, self.y, self.state)
        if state is not None:
            self.state = tuple(s.detach() for s in state)
        v = loss.item()
        self.sync()
        return v

    def capture(self, warmup):
        """--cuda-graph on: PyTorch's whole-network capture. `warmup` iterations on a side stream
        (optimizer state, cuDNN/cuBLAS plans and the allocator settle outside the capture), then
        the step captured once into self.graph over static tensors. Returns the last warm-up loss."""
        loss = float("nan")
        with torch.cuda.device(self.device):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(warmup):
                    loss = self.iterate()
            torch.cuda.current_stream().wait_stream(s)
            # static tensors: the graph reads and writes these addresses on every replay
            self.static_x, self.static_y = self.x.clone(), self.y.clone()
            self.static_state = tuple(t.clone() for t in self.state) if self.name == "lstm" else None
            self.graph = torch.cuda.CUDAGraph()
            self.opt.zero_grad(set_to_none=True)  # backward in the capture allocates .grad from the graph's pool
            with torch.cuda.graph(self.graph):
                self.static_loss, state = self.step(self.static_x, self.static_y, self.static_state)
                if state is not None:  # the carried state, after backward has read the old one
                    for dst, src in zip(self.static_state, state):
                        dst.copy_(src.detach())
        return loss

    def replay(self):
        """One timed --cuda-graph iteration: the batch into the static tensors, replay, the loss read back."""
        if self.loader is not None:
            b = self.next_batch()
            self.static_x.copy_(b[0])
            self.static_y.copy_(b[1])
        else:  # the same batch every time, copied as a real loop's would be
            self.static_x.copy_(self.x)
            self.static_y.copy_(self.y)
        self.graph.replay()
        v = self.static_loss.item()
        self.sync()
        return v


def time_net(net, threads, args, device_name):
    r = {"impl": "pytorch", "model": net.name, "device": device_name, "threads": threads, "batch": net.batch,
         "iters": args.iters, "warmup": args.warmup, "warmup_added": 0, "memory_format": args.memory_format,
         "step_in_backward": net.step_in_backward if net.model is not None else False,
         "cuda_graph": net.cuda_graph if net.model is not None else False,
         # PyTorch has no algorithm switch for its CPU convolutions (its oneDNN path asks for the
         # direct algorithm); cuDNN chooses its own on CUDA
         "conv_algo": ("cudnn-benchmark" if torch.backends.cudnn.benchmark else "default")
         if net.device.type == "cuda" else "default"}
    if net.device.type == "cpu":
        torch.set_num_threads(threads)
    loss = float("nan")
    if net.cuda_graph and net.model is not None and net.graph is None:
        n = max(3, args.warmup)  # the recipe's side-stream warm-up: at least 3 iterations
        r["warmup_added"] = n - args.warmup
        try:
            loss = net.capture(n)
        except Exception as e:  # an op that syncs or is not capturable in the installed torch
            net.graph = None
            raise CaptureError(f"{net.name}: the training step could not be captured as a CUDA graph: {e}") from e
    else:
        for _ in range(args.warmup):
            loss = net.iterate()
    t = []
    prof = None
    if args.profile:  # the per-op table on stderr, as `nabla bench --profile`
        acts = [torch.profiler.ProfilerActivity.CPU]
        if net.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts)
        prof.__enter__()
    if net.device.type == "cuda":  # the timed iterations' peak, as nabla's (not the process's)
        torch.cuda.reset_peak_memory_stats(net.device)
    for _ in range(args.iters):
        t0 = time.perf_counter()
        loss = net.iterate()
        t.append(time.perf_counter() - t0)
    if prof is not None:
        prof.__exit__(None, None, None)
        key = "self_cuda_time_total" if net.device.type == "cuda" else "self_cpu_time_total"
        print(f"\n{net.name}, {threads} thread{'s' if threads != 1 else ''}, {args.iters} timed iterations "
              f"(torch.profiler):", file=sys.stderr)
        print(prof.key_averages().table(sort_by=key, row_limit=25), file=sys.stderr)
    t.sort()
    spec = SPECS[net.name]
    med = quantile(t, 0.5)
    per = spec[5] if spec[6] is None else 3.0 * spec[5]
    alloc = None
    if net.device.type == "cuda":
        alloc = torch.cuda.max_memory_allocated(net.device) / 1048576.0
    r.update(median_s=med, q1_s=quantile(t, 0.25), q3_s=quantile(t, 0.75), min_s=t[0], max_s=t[-1],
             samples_per_s=net.batch / med, gflops=per * net.batch / med * 1e-9, fwd_flops_per_sample=spec[5],
             params=net.num_params(), peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
             peak_alloc_mb=alloc, loss=loss if math.isfinite(loss) else None)
    return r


def emit(r, fmt):
    if fmt == "json":
        print(json.dumps(r))
    elif fmt == "csv":
        print(",".join("" if r.get(k) is None else (f"{r[k]:.6g}" if isinstance(r[k], float) else str(r[k]))
                       for k in FIELDS))
    sys.stdout.flush()


def print_table(rows, threads, args, device_name):
    print(f"pytorch {torch.__version__}: seconds per mini-batch (median of {args.iters} after {args.warmup} "
          f"warm-up), device {device_name}")
    print(f"{'network':<10} {'batch':>6} {'parameters':>12}" + "".join(f" {str(t) + ' thr':>11}" for t in threads))
    by = {}
    for r in rows:
        by.setdefault(r["model"], []).append(r)
    for name, rs in by.items():
        cells = "".join(f" {r['median_s']:11.4g}" if "median_s" in r else f" {'n/a':>11}" for r in rs)
        print(f"{name:<10} {rs[0]['batch']:>6} {rs[0].get('params', 0):>12}{cells}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=",".join(k for k, v in SPECS.items() if v[7]))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--format", default="json", choices=["json", "csv", "table"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="synthetic", choices=["synthetic", "real"])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"],
                    help="channels_last: the model's 4-D parameters are converted once and the image batch "
                         "in each step (as `nabla bench --memory-format channels_last`)")
    ap.add_argument("--cudnn-benchmark", default="on", choices=["on", "off"],
                    help="on a GPU: torch.backends.cudnn.benchmark, cuDNN's timed search per shape (nabla's "
                         "convolutions always search); default on")
    ap.add_argument("--step-in-backward", default="off", choices=["on", "off", "auto"],
                    help="on: each parameter steps in backward (register_post_accumulate_grad_hook); auto: "
                         "on for the networks that do not clip their gradients")
    ap.add_argument("--cuda-graph", default="off", choices=["on", "off"],
                    help="on (a GPU only): the step captured once as a CUDA graph and replayed (PyTorch's "
                         "whole-network capture recipe)")
    ap.add_argument("--profile", action="store_true",
                    help="print torch.profiler's per-op table (self time) on stderr after each network")
    args = ap.parse_args()
    models = args.model.split(",")
    for m in models:
        if m not in SPECS:
            fail(f"unknown model \"{m}\" in --model {args.model} (known: {', '.join(SPECS)})")
    if args.iters < 1 or args.warmup < 0 or (args.batch_size is not None and args.batch_size < 1):
        fail("--iters must be >= 1, --warmup >= 0, --batch-size >= 1")
    threads = int_list("--threads", args.threads) if args.threads else sorted({1, torch.get_num_threads()})
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            fail(f"device {args.device}: CUDA is not available")
        device = torch.device("cuda", device.index or 0)
        threads = [torch.get_num_threads()]
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    device_name = "cpu" if device.type == "cpu" else f"cuda:{device.index}"
    if args.format == "csv":
        print(",".join(FIELDS))
    rows, status = [], 0

    def error_row(name, batch, t, msg):
        return {"impl": "pytorch", "model": name, "device": device_name, "threads": t, "batch": batch,
                "iters": args.iters, "warmup": args.warmup, "warmup_added": 0,
                "step_in_backward": args.step_in_backward == "on", "cuda_graph": args.cuda_graph == "on",
                "error": msg, "fwd_flops_per_sample": SPECS[name][5]}

    for name in models:
        batch = args.batch_size if args.batch_size and name != "sgemm" else SPECS[name][4]
        try:
            net = Net(name, batch, args.seed, device, args.data, args.data_dir, args.memory_format,
                      args.step_in_backward, args.cuda_graph == "on")
        except Exception as e:  # a network the installed torch_models lacks: say so, go on
            print(f"torch_bench: {name}: {e}", file=sys.stderr)
            status = 1
            for t in threads:
                r = error_row(name, batch, t, f"{name}: {e}")
                rows.append(r)
                emit(r, args.format)
            continue
        for t in threads:
            try:
                r = time_net(net, t, args, device_name)
            except CaptureError as e:
                print(f"torch_bench: {e}", file=sys.stderr)
                status = 1
                r = error_row(name, batch, t, str(e))
            rows.append(r)
            emit(r, args.format)
        del net
    if args.format == "table":
        print_table(rows, threads, args, device_name)
    return status


if __name__ == "__main__":
    sys.exit(main())
