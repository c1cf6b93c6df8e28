"""Reference values for tests/test_index.c: index_select, gather, scatter, scatter_add,
masked_fill, embedding and one_hot, computed by PyTorch.

Case names are "<op>/<variant>/<dtype>". Keys: in0 (and in1: scatter's src), index, mask, dim,
value (masked_fill), classes (one_hot), gout (the upstream gradient), out, grad0, grad1. Every
float case exists in float32 and float64; "i64" cases hold int64 data (forward only).
"""
import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def _rand(g, shape, dtype):
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


def _grads(out, inputs, gout):
    leaves = [x for x in inputs if x.requires_grad]
    grads = torch.autograd.grad(out, leaves, gout, allow_unused=True)
    return [gr if gr is not None else torch.zeros_like(x) for gr, x in zip(grads, leaves)]


def _save(t, name, ins, out, grads, gout, **params):
    for i, x in enumerate(ins):
        t[f"{name}/in{i}"] = x.detach()
    t[f"{name}/out"] = out.detach()
    if gout is not None:
        t[f"{name}/gout"] = gout
    for i, gr in enumerate(grads):
        t[f"{name}/grad{i}"] = gr
    for k, v in params.items():
        t[f"{name}/{k}"] = v


def _index_select(t, g):
    specs = [  # variant, shape, dim, index values, index dtype
        ("dim0", (5, 3), 0, [4, 0, 2, 2, 1, 4, 4], torch.int64),
        ("dim1", (2, 6, 3), 1, [5, 0, 3], torch.int64),
        ("last", (3, 4), -1, [3, 3, 0, 1, 2], torch.int32),
        ("rows", (6, 40), 0, [5, 1, 1, 0], torch.int64),
        ("empty", (4, 3), 0, [], torch.int64),
        ("vec", (7,), 0, [6, 0, 3, 3], torch.int64),
    ]
    for var, shape, dim, idx, idt in specs:
        for dn, dt in DTYPES.items():
            x = _rand(g, shape, dt).requires_grad_()
            index = torch.tensor(idx, dtype=torch.int64)
            out = torch.index_select(x, dim, index)
            gout = _rand(g, out.shape, dt)
            grads = _grads(out, [x], gout)
            _save(t, f"index_select/{var}/{dn}", [x], out, grads, gout, index=index.to(idt),
                  dim=torch.tensor(dim))
    x = torch.randint(-100, 100, (4, 5), generator=g)
    index = torch.tensor([3, 0, 0])
    _save(t, "index_select/ints/i64", [x], torch.index_select(x, 1, index), [], None, index=index,
          dim=torch.tensor(1))


def _gather(t, g):
    specs = [  # variant, input shape, dim, index shape (values drawn in range)
        ("dim0", (4, 3), 0, (6, 3)),
        ("dim1", (3, 5), 1, (3, 4)),
        ("smaller", (4, 5, 3), 1, (2, 7, 2)),
        ("last", (2, 3, 4), -1, (2, 3, 4)),
        ("vec", (6,), 0, (9,)),
    ]
    for var, shape, dim, ishape in specs:
        for dn, dt in DTYPES.items():
            x = _rand(g, shape, dt).requires_grad_()
            index = torch.randint(0, shape[dim], ishape, generator=g)
            out = torch.gather(x, dim, index)
            gout = _rand(g, out.shape, dt)
            _save(t, f"gather/{var}/{dn}", [x], out, _grads(out, [x], gout), gout, index=index,
                  dim=torch.tensor(dim))
    x = torch.randint(-100, 100, (3, 4), generator=g)
    index = torch.randint(0, 4, (3, 2), generator=g)
    _save(t, "gather/ints/i64", [x], torch.gather(x, 1, index), [], None, index=index, dim=torch.tensor(1))


def _unique_index(g, size, ishape, dim):
    """An index of shape ishape whose values along dim are distinct (scatter without duplicates:
    PyTorch leaves the winner of duplicates unspecified)."""
    moved = list(ishape)
    n = moved.pop(dim)
    rows = []
    count = 1
    for s in moved:
        count *= s
    for _ in range(count):
        rows.append(torch.randperm(size, generator=g)[:n])
    idx = torch.stack(rows).reshape(*moved, n) if rows else torch.zeros(*moved, n, dtype=torch.int64)
    return idx.movedim(-1, dim).contiguous()


def _scatter(t, g):
    specs = [  # variant, self shape, dim, index shape, src shape
        ("dim0", (5, 3), 0, (3, 3), (3, 3)),
        ("dim1", (3, 6), 1, (3, 4), (3, 4)),
        ("bigsrc", (4, 5), 0, (2, 5), (3, 6)),
        ("small", (4, 5, 3), 2, (2, 3, 2), (3, 3, 3)),
        ("vec", (8,), 0, (5,), (5,)),
    ]
    for op in ("scatter", "scatter_add"):
        for var, shape, dim, ishape, sshape in specs:
            for dn, dt in DTYPES.items():
                x = _rand(g, shape, dt).requires_grad_()
                src = _rand(g, sshape, dt).requires_grad_()
                if op == "scatter":
                    index = _unique_index(g, shape[dim], ishape, dim)
                    out = torch.scatter(x, dim, index, src)
                else:
                    index = torch.randint(0, shape[dim], ishape, generator=g)  # duplicates add up
                    out = torch.scatter_add(x, dim, index, src)
                gout = _rand(g, out.shape, dt)
                grads = [gout.clone(), torch.zeros(sshape, dtype=dt)]
                if op == "scatter":
                    grads[0] = gout.scatter(dim, index, 0.0)
                region = tuple(slice(0, s) for s in ishape)
                grads[1][region] = gout.gather(dim, index)  # PyTorch's rule, padded to src's shape
                if sshape == ishape:  # PyTorch can differentiate these itself: use its values
                    grads = _grads(out, [x, src], gout)
                _save(t, f"{op}/{var}/{dn}", [x, src], out, grads, gout, index=index, dim=torch.tensor(dim))
    x = torch.randint(-100, 100, (3, 4), generator=g)
    src = torch.randint(-100, 100, (3, 4), generator=g)
    index = torch.tensor([[0, 2], [1, 1], [3, 0]])
    _save(t, "scatter_add/ints/i64", [x, src], torch.scatter_add(x, 1, index, src[:, :2]), [], None,
          index=index, dim=torch.tensor(1))


def _masked_fill(t, g):
    specs = [  # variant, self shape, mask shape, value
        ("same", (3, 4), (3, 4), -1.5),
        ("bcast_mask", (2, 3, 4), (3, 1), 2.0),
        ("bcast_self", (4,), (3, 4), 0.25),
        ("neg_inf", (2, 5), (2, 5), float("-inf")),
    ]
    for var, shape, mshape, value in specs:
        for dn, dt in DTYPES.items():
            x = _rand(g, shape, dt).requires_grad_()
            mask = torch.rand(*mshape, generator=g) < 0.5
            out = x.masked_fill(mask, value)
            gout = _rand(g, out.shape, dt)
            _save(t, f"masked_fill/{var}/{dn}", [x], out, _grads(out, [x], gout), gout, mask=mask,
                  value=torch.tensor(value, dtype=torch.float64))
    x = torch.randint(-100, 100, (3, 4), generator=g)
    mask = torch.rand(3, 4, generator=g) < 0.5
    _save(t, "masked_fill/ints/i64", [x], x.masked_fill(mask, 7.9), [], None, mask=mask,
          value=torch.tensor(7.9, dtype=torch.float64))


def _embedding(t, g):
    specs = [  # variant, weight shape, indices
        ("vec", (6, 4), [5, 0, 2, 2, 3]),
        ("mat", (10, 3), [[1, 9, 1], [0, 4, 4]]),
        ("rank3", (5, 8), [[[0, 1], [4, 4]], [[3, 2], [1, 0]]]),
        ("scalar", (4, 2), 3),
    ]
    for var, wshape, idx in specs:
        for dn, dt in DTYPES.items():
            w = _rand(g, wshape, dt).requires_grad_()
            index = torch.tensor(idx, dtype=torch.int64)
            out = F.embedding(index, w)
            gout = _rand(g, out.shape, dt)
            _save(t, f"embedding/{var}/{dn}", [w], out, _grads(out, [w], gout), gout,
                  index=index.to(torch.int32) if var == "mat" else index)


def _one_hot(t, g):
    specs = [("vec", [0, 3, 1, 1], -1), ("mat", [[2, 0], [1, 4]], 6), ("scalar", 2, 3), ("empty", [], 4)]
    for var, idx, classes in specs:
        index = torch.tensor(idx, dtype=torch.int64)
        t[f"one_hot/{var}/i64/index"] = index
        t[f"one_hot/{var}/i64/classes"] = torch.tensor(classes)
        t[f"one_hot/{var}/i64/out"] = F.one_hot(index, classes)


def build():
    g = torch.Generator().manual_seed(1234)
    t = {}
    _index_select(t, g)
    _gather(t, g)
    _scatter(t, g)
    _masked_fill(t, g)
    _embedding(t, g)
    _one_hot(t, g)
    return {k: v.detach().clone() for k, v in t.items()}  # no shared storage: safetensors refuses it
