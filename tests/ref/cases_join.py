"""Reference values for tests/test_join.c: cat, stack, split, split_with_sizes and chunk,
computed by PyTorch.

Case names are "<op>/<variant>/<dtype>". cat/stack keys: in0..in<n-1>, dim, gout, out,
grad0..grad<n-1>. split/chunk keys: in0, dim, and size (split), sizes (split_with_sizes) or
chunks (chunk); the pieces out0..out<k-1> and count (their number).
"""
import torch

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def _rand(g, shape, dtype):
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


def _save_join(t, name, ins, out, gout, dim):
    for i, x in enumerate(ins):
        t[f"{name}/in{i}"] = x.detach()
    t[f"{name}/out"] = out.detach()
    t[f"{name}/dim"] = torch.tensor(dim)
    if gout is None:
        return
    t[f"{name}/gout"] = gout
    leaves = [x for x in ins if x.requires_grad]
    grads = torch.autograd.grad(out, leaves, gout)
    for i, gr in enumerate(grads):
        t[f"{name}/grad{i}"] = gr


def _cat(t, g):
    specs = [  # variant, input shapes, dim
        ("dim0", [(2, 3), (4, 3)], 0),
        ("dim1", [(2, 1, 4), (2, 3, 4), (2, 2, 4)], 1),
        ("last", [(3, 2), (3, 5)], -1),
        ("legacy_empty", [(0,), (2, 3), (0,), (1, 3)], 0),
        ("zero_size", [(0, 3), (2, 3)], 0),
        ("one", [(3, 2)], 1),
        ("vec", [(3,), (1,), (4,)], 0),
        # 16 or more positions outside the dim: the CPU writes the result in memory order, four
        # inputs a call (six inputs: two calls), chunk after chunk
        ("rows", [(20, 3), (20, 1), (20, 5), (20, 2), (20, 4), (20, 1)], 1),
        ("mid", [(17, 2, 3), (17, 1, 3), (17, 4, 3)], 1),
    ]
    for var, shapes, dim in specs:
        for dn, dt in DTYPES.items():
            ins = [_rand(g, s, dt).requires_grad_() for s in shapes]
            out = torch.cat(ins, dim)
            _save_join(t, f"cat/{var}/{dn}", ins, out, _rand(g, out.shape, dt), dim)
    # type promotion: float32 + float64 -> float64, int64 + float32 -> float32
    a = _rand(g, (2, 2), torch.float32).requires_grad_()
    b = _rand(g, (1, 2), torch.float64).requires_grad_()
    out = torch.cat([a, b], 0)
    _save_join(t, "cat/promote/f64", [a, b], out, _rand(g, out.shape, torch.float64), 0)
    a = torch.randint(-5, 5, (2, 3), generator=g)
    b = _rand(g, (2, 1), torch.float32).requires_grad_()
    out = torch.cat([a, b], 1)
    _save_join(t, "cat/promote_int/f32", [a, b], out, _rand(g, out.shape, torch.float32), 1)
    ins = [torch.randint(-100, 100, s, generator=g) for s in [(2, 2), (2, 3)]]
    _save_join(t, "cat/ints/i64", ins, torch.cat(ins, 1), None, 1)


def _stack(t, g):
    specs = [("dim0", (2, 3), 3, 0), ("dim1", (2, 3), 2, 1), ("last", (4,), 3, -1), ("scalars", (), 4, 0)]
    for var, shape, n, dim in specs:
        for dn, dt in DTYPES.items():
            ins = [_rand(g, shape, dt).requires_grad_() for _ in range(n)]
            out = torch.stack(ins, dim)
            _save_join(t, f"stack/{var}/{dn}", ins, out, _rand(g, out.shape, dt), dim)


def _save_pieces(t, name, x, dim, pieces, **params):
    t[f"{name}/in0"] = x
    t[f"{name}/dim"] = torch.tensor(dim)
    t[f"{name}/count"] = torch.tensor(len(pieces))
    for i, p in enumerate(pieces):
        t[f"{name}/out{i}"] = p.contiguous()
    for k, v in params.items():
        t[f"{name}/{k}"] = v


def _split(t, g):
    for dn, dt in DTYPES.items():
        x = _rand(g, (7, 4), dt)
        for size in (2, 3, 7, 10):
            _save_pieces(t, f"split/size{size}/{dn}", x, 0, torch.split(x, size, 0), size=torch.tensor(size))
        x = _rand(g, (3, 5, 2), dt)
        _save_pieces(t, f"split/dim1/{dn}", x, -2, torch.split(x, 2, -2), size=torch.tensor(2))
        _save_pieces(t, f"split/empty/{dn}", torch.zeros(0, 3, dtype=dt), 0, torch.split(torch.zeros(0, 3, dtype=dt), 4),
                     size=torch.tensor(4))
        x = _rand(g, (6, 3), dt)
        for var, sizes in (("sizes", [1, 0, 3, 2]), ("whole", [6])):
            _save_pieces(t, f"split_with_sizes/{var}/{dn}", x, 0, torch.split(x, sizes, 0), sizes=torch.tensor(sizes))
        x = _rand(g, (2, 5), dt)
        for chunks in (1, 2, 3, 4, 5, 6):
            _save_pieces(t, f"chunk/c{chunks}/{dn}", x, 1, torch.chunk(x, chunks, 1), chunks=torch.tensor(chunks))
        x = _rand(g, (6, 2), dt)
        _save_pieces(t, f"chunk/fewer/{dn}", x, 0, torch.chunk(x, 4, 0), chunks=torch.tensor(4))
        e = torch.zeros(0, 2, dtype=dt)
        _save_pieces(t, f"chunk/empty/{dn}", e, 0, torch.chunk(e, 3, 0), chunks=torch.tensor(3))


def build():
    g = torch.Generator().manual_seed(4321)
    t = {}
    _cat(t, g)
    _stack(t, g)
    _split(t, g)
    return {k: v.detach().clone() for k, v in t.items()}  # no shared storage: safetensors refuses it
