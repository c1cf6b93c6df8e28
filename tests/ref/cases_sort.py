"""Reference values for tests/test_sort.c: sort and topk, computed by PyTorch.

Case names are "<op>/<variant>/<dtype>". Keys: in0, dim, descending (sort) or k and largest
(topk), gout, out (values), indices, grad0. Cases meant for gradients have distinct values;
"ties" cases check stability (PyTorch's stable=True), "nan" cases that NaN sorts as the
largest value.
"""
import torch

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def _distinct(g, shape, dtype):
    n = 1
    for s in shape:
        n *= s
    return ((torch.randperm(n, generator=g).to(torch.float64) - n / 2) / 8).reshape(shape).to(dtype)


def _save(t, name, x, out, idx, gout, **params):
    t[f"{name}/in0"] = x.detach()
    t[f"{name}/out"] = out.detach()
    t[f"{name}/indices"] = idx
    for k, v in params.items():
        t[f"{name}/{k}"] = torch.tensor(v)
    if gout is not None and x.requires_grad:
        t[f"{name}/gout"] = gout
        t[f"{name}/grad0"] = torch.autograd.grad(out, [x], gout)[0]


def _sort(t, g):
    specs = [  # variant, shape, dim, descending
        ("asc_last", (3, 7), -1, False),
        ("desc_last", (3, 7), 1, True),
        ("asc_dim0", (9, 4), 0, False),
        ("desc_mid", (2, 40, 3), 1, True),
        ("long", (2, 1000), 1, False),
        ("scalar", (), 0, True),
    ]
    for var, shape, dim, desc in specs:
        for dn, dt in DTYPES.items():
            x = _distinct(g, shape, dt).requires_grad_()
            out, idx = torch.sort(x, dim=dim, descending=desc, stable=True)
            gout = torch.randn(tuple(out.shape), generator=g, dtype=torch.float64).to(dt)
            _save(t, f"sort/{var}/{dn}", x, out, idx, gout, dim=dim, descending=int(desc))
    for dn, dt in DTYPES.items():
        x = torch.randint(0, 4, (3, 50), generator=g).to(dt)
        for desc in (False, True):
            out, idx = torch.sort(x, dim=1, descending=desc, stable=True)
            _save(t, f"sort/ties_{int(desc)}/{dn}", x, out, idx, None, dim=1, descending=int(desc))
        nan = float("nan")
        x = torch.tensor([[3, nan, 1, nan, -2, 0.5, float("inf"), 1], [nan, nan, 0, -1, 2, 2, -3, float("-inf")]],
                         dtype=dt)
        for desc in (False, True):
            out, idx = torch.sort(x, dim=1, descending=desc, stable=True)
            _save(t, f"sort/nan_{int(desc)}/{dn}", x, out, idx, None, dim=1, descending=int(desc))
    x = torch.randint(-1000, 1000, (4, 30), generator=g)
    out, idx = torch.sort(x, dim=1, descending=True, stable=True)
    _save(t, "sort/ints/i64", x, out, idx, None, dim=1, descending=1)


def _topk(t, g):
    specs = [  # variant, shape, k, dim, largest
        ("largest", (4, 9), 3, -1, True),
        ("smallest", (4, 9), 2, 1, False),
        ("dim0", (10, 3), 4, 0, True),
        ("big_k", (2, 200), 120, 1, True),
        ("big_k_small", (2, 200), 100, 1, False),
        ("all", (3, 5), 5, 1, False),
        ("one", (6,), 1, 0, True),
        ("zero", (3, 4), 0, 1, True),
    ]
    for var, shape, k, dim, largest in specs:
        for dn, dt in DTYPES.items():
            x = _distinct(g, shape, dt).requires_grad_()
            out, idx = torch.topk(x, k, dim=dim, largest=largest, sorted=True)
            gout = torch.randn(tuple(out.shape), generator=g, dtype=torch.float64).to(dt)
            _save(t, f"topk/{var}/{dn}", x, out, idx, gout, k=k, dim=dim, largest=int(largest))
    for dn, dt in DTYPES.items():
        nan = float("nan")
        x = torch.tensor([[3, nan, 1, 4, -2, 0.5, 7, 1], [5, 2, 0, -1, nan, 6, -3, 8]], dtype=dt)
        out, idx = torch.topk(x, 3, dim=1, largest=True)
        _save(t, f"topk/nan/{dn}", x, out, idx, None, k=3, dim=1, largest=1)
    x = torch.randperm(40, generator=g).reshape(2, 20)
    out, idx = torch.topk(x, 5, dim=1, largest=False)
    _save(t, "topk/ints/i64", x, out, idx, None, k=5, dim=1, largest=0)


def build():
    g = torch.Generator().manual_seed(777)
    t = {}
    _sort(t, g)
    _topk(t, g)
    return {k: v.detach().clone() for k, v in t.items()}  # no shared storage: safetensors refuses it
