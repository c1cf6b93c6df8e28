"""Reference values for tests/test_reduce.c: reductions, softmax, log_softmax and cumsum, computed
by PyTorch (float cases in float32 and float64).

Case names are "<op>/<variant>/<suffix>", <op> the nabla function without its nb_ prefix (sum,
mean, prod, var, std, logsumexp, norm, all, any, max, min, max_dim, min_dim, argmax, argmin,
softmax, log_softmax, cumsum), <suffix> f32 / f64 or the input's dtype for integer cases. Keys:
  in0          the input
  dims         int64 [k]: the dims to reduce (absent: every dim); for ops along one dim, [dim]
               (absent for argmax / argmin over the flattened tensor)
  keepdim      int64 0-dim, 0 or 1 (absent: 0)
  correction   int64 0-dim (var, std)
  p            float64 0-dim (norm)
  out          the result; indices: int64 positions (max_dim, min_dim)
  gout, grad0  the upstream gradient and the input's gradient (differentiable float cases)
  fd           int64 0-dim, present on float64 cases smooth enough for finite differences
The "bigsum" cases hold one large input and several results (sum, mean, norm, exact: the sum in
float64, norm64: the norm in float64, rows / cols: sums of the input viewed as [-1, 512] along dim 1 / 0, max).
"""
import math

import torch

DTYPES = {"f32": torch.float32, "f64": torch.float64}

# (variant, shape, dims or None for every dim, keepdim)
DIMSETS = [
    ("d1", (3, 4, 5), (1,), False),
    ("d1k", (3, 4, 5), (1,), True),
    ("neg", (3, 4, 5), (-1,), False),
    ("multi", (3, 4, 5), (0, 2), False),
    ("multik", (3, 4, 5), (2, 0), True),
    ("negmulti", (3, 4, 5), (-3, -2), False),
    ("all", (3, 4, 5), None, False),
    ("allk", (3, 4, 5), (0, 1, 2), True),
    ("vec", (7,), (0,), False),
    ("scalar", (), None, False),
    ("inner", (5, 67), (1,), False),   # contiguous runs with vector tails
    ("outer", (130, 9), (0,), False),  # rows accumulated into the outputs
    ("middle", (3, 70, 4), (1,), True),
    ("sides", (6, 3, 33), (0, 2), False),
    ("wide", (8, 2100), (0,), False),  # more columns than one accumulator block
]


def put(t, name, **kv):
    for k, v in kv.items():
        if v is None:
            continue
        t[f"{name}/{k}"] = v.detach().clone() if isinstance(v, torch.Tensor) else v


def i64(v):
    return torch.tensor(v, dtype=torch.int64)


def all_dims(shape, dims):
    return tuple(range(len(shape))) if dims is None else dims


def flat_reduce(fn, x, dims, keepdim):
    """fn(x2, -1) over several dims at once (prod, all, any take one dim in PyTorch): the
    reduced dims are moved last and flattened."""
    nd = x.dim()
    if nd == 0:
        return fn(x.reshape(1), -1).reshape(())
    red = sorted(d % nd for d in dims)
    kept = [d for d in range(nd) if d not in red]
    y = x.permute(kept + red).reshape([x.shape[d] for d in kept] + [-1])
    r = fn(y, -1)
    if keepdim:
        r = r.reshape([1 if d in red else x.shape[d] for d in range(nd)])
    return r


def grad_case(t, name, fn, x, fd=True, **params):
    leaf = x.clone().requires_grad_(True)
    out = fn(leaf)
    gout = torch.randn(out.shape, dtype=torch.float64).to(out.dtype)
    out.backward(gout)
    grad = leaf.grad if leaf.grad is not None else torch.zeros_like(x)
    put(t, name, in0=x, out=out, gout=gout, grad0=grad, **params)
    # finite differences cost two evaluations per input element: small inputs only
    if fd and x.dtype == torch.float64 and x.numel() <= 1000 and bool(torch.isfinite(out).all()):
        t[f"{name}/fd"] = i64(1)


def params(shape, dims, keepdim):
    kv = {"keepdim": i64(int(keepdim))}
    if dims is not None:
        kv["dims"] = i64(list(dims))
    return kv


def dims_cases(t, sfx, dt):
    for var, shape, dims, keep in DIMSETS:
        x = torch.randn(shape, dtype=torch.float64).to(dt)
        xp = (torch.rand(shape, dtype=torch.float64) + 0.5).to(dt)  # positive, away from 0
        ad = all_dims(shape, dims)
        kv = params(shape, dims, keep)
        grad_case(t, f"sum/{var}/{sfx}", lambda a: torch.sum(a, dim=ad, keepdim=keep), x, **kv)
        grad_case(t, f"mean/{var}/{sfx}", lambda a: torch.mean(a, dim=ad, keepdim=keep), x, **kv)
        grad_case(t, f"prod/{var}/{sfx}", lambda a: flat_reduce(torch.prod, a, ad, keep), xp, **kv)
        grad_case(t, f"logsumexp/{var}/{sfx}", lambda a: torch.logsumexp(a, ad, keep), x, **kv)
        for c in (0, 1):
            grad_case(t, f"var/{var}c{c}/{sfx}", lambda a: torch.var(a, dim=ad, correction=c, keepdim=keep), x,
                      correction=i64(c), **kv)
            grad_case(t, f"std/{var}c{c}/{sfx}", lambda a: torch.std(a, dim=ad, correction=c, keepdim=keep), x,
                      correction=i64(c), **kv)
        xn = x.sign() * (x.abs() + 0.25)  # away from the kink at 0 (and |x|^(p-1) blowing up)
        for p in (2.0, 1.0, 3.0, 0.5, 1.5, math.inf):
            # random inputs have no ties of |x| for p = inf
            pn = "inf" if p == math.inf else str(p).replace(".", "_")
            grad_case(t, f"norm/{var}p{pn}/{sfx}", lambda a: torch.norm(a, p=p, dim=ad, keepdim=keep), xn,
                      p=torch.tensor(p, dtype=torch.float64), **kv)
        # all / any of floats: zeros are false
        xa, xb = x * (x > -0.5), x * (x > 1.0)
        put(t, f"all/{var}/{sfx}", in0=xa, out=flat_reduce(torch.all, xa, ad, keep), **kv)
        put(t, f"any/{var}/{sfx}", in0=xb, out=flat_reduce(torch.any, xb, ad, keep), **kv)


def special_cases(t, sfx, dt):
    def T(v):
        return torch.tensor(v, dtype=dt)

    inf, nan = math.inf, math.nan
    # prod with no zero, one zero and two zeros in a slice: PyTorch's safe-zero gradients
    x = T([[1.5, 2.0, 0.0, 3.0], [0.0, 1.0, 0.0, 2.0], [1.0, -2.0, 0.5, 4.0]])
    grad_case(t, f"prod/zeros/{sfx}", lambda a: torch.prod(a, 1), x, fd=False, dims=i64([1]), keepdim=i64(0))
    grad_case(t, f"prod/zeroall/{sfx}", lambda a: torch.prod(a), x[0], fd=False)
    grad_case(t, f"prod/twozeros/{sfx}", lambda a: torch.prod(a), x[1], fd=False)
    # var with n - correction <= 0: infinities and NaNs in the value and the gradient
    x = T([1.0, 2.0, 4.0])
    grad_case(t, f"var/dof0/{sfx}", lambda a: torch.var(a, 0, correction=3), x, fd=False,
              dims=i64([0]), correction=i64(3))
    grad_case(t, f"var/dofneg/{sfx}", lambda a: torch.var(a, 0, correction=4), x, fd=False,
              dims=i64([0]), correction=i64(4))
    grad_case(t, f"std/zero/{sfx}", lambda a: torch.std(a, 1), T([[2.0, 2.0], [1.0, 3.0]]), fd=False,
              dims=i64([1]), correction=i64(1))
    # logsumexp with -inf entries, a slice of only -inf, and +inf
    x = T([[-inf, 1.0, 2.0], [-inf, -inf, -inf], [inf, 1.0, 0.0]])
    grad_case(t, f"logsumexp/inf/{sfx}", lambda a: torch.logsumexp(a, 1), x, fd=False, dims=i64([1]))
    # large values: the max shift keeps exp from overflowing
    grad_case(t, f"logsumexp/big/{sfx}", lambda a: torch.logsumexp(a, 0), T([1000.0, 1001.0, 999.5]),
              dims=i64([0]))
    # norms at a zero slice: gradient 0
    x = T([[0.0, 0.0, 0.0], [3.0, -4.0, 1.0]])
    for p, pn in ((2.0, "2"), (1.0, "1"), (3.0, "3"), (0.5, "0_5"), (1.5, "1_5"), (inf, "inf"), (-inf, "ninf"),
                  (0.0, "0"), (-1.0, "n1")):
        grad_case(t, f"norm/zero{pn}/{sfx}", lambda a: torch.norm(a, p=p, dim=1), x, fd=False,
                  dims=i64([1]), p=torch.tensor(p, dtype=torch.float64))
    # inf norm with ties: the gradient is shared
    grad_case(t, f"norm/infties/{sfx}", lambda a: torch.norm(a, p=inf), T([1.0, -3.0, 3.0, 2.0]), fd=False,
              p=torch.tensor(inf, dtype=torch.float64))
    # max / min: over everything (ties share the gradient; NaN wins) and along a dim
    for op in ("max", "min"):
        f = getattr(torch, op)
        grad_case(t, f"{op}/ties/{sfx}", lambda a: f(a), T([[1.0, 3.0, -2.0], [3.0, 2.0, -2.0]]), fd=False)
        grad_case(t, f"{op}/nan/{sfx}", lambda a: f(a), T([1.0, nan, 3.0, nan]), fd=False)
        grad_case(t, f"{op}/plain/{sfx}", lambda a: f(a), torch.randn(4, 5, dtype=torch.float64).to(dt))
        grad_case(t, f"{op}/big/{sfx}", lambda a: f(a), torch.randn(3000, dtype=torch.float64).to(dt))
        grad_case(t, f"{op}/scalar/{sfx}", lambda a: f(a), T(2.5))
        for var, shape, dim, keep in (("d1", (4, 5, 6), 1, False), ("d1k", (4, 5, 6), 1, True),
                                      ("neg", (4, 5, 6), -1, False), ("d0", (40, 6), 0, False),
                                      ("scalar", (), 0, False)):
            x = torch.randn(shape, dtype=torch.float64).to(dt)

            def fd_(a, dim=dim, keep=keep):
                return f(a, dim, keep)[0]

            leaf = x.clone().requires_grad_(True)
            v, idx = f(leaf, dim, keep)
            gout = torch.randn(v.shape, dtype=torch.float64).to(dt)
            v.backward(gout)
            name = f"{op}_dim/{var}/{sfx}"
            put(t, name, in0=x, out=v, indices=idx, gout=gout, grad0=leaf.grad, dims=i64([dim]),
                keepdim=i64(int(keep)))
            if dt == torch.float64:
                t[f"{name}/fd"] = i64(1)
        x = T([[1.0, 5.0, 5.0, nan], [2.0, 2.0, 0.0, 1.0]])
        leaf = x.clone().requires_grad_(True)
        v, idx = f(leaf, 1)
        gout = torch.randn(v.shape, dtype=torch.float64).to(dt)
        v.backward(gout)
        put(t, f"{op}_dim/tiesnan/{sfx}", in0=x, out=v, indices=idx, gout=gout, grad0=leaf.grad,
            dims=i64([1]), keepdim=i64(0))
    # argmax / argmin: first occurrence; NaN wins; flattened or along a dim
    x = T([[1.0, 5.0, 5.0, 0.0], [2.0, nan, 7.0, nan], [-1.0, -1.0, -3.0, -3.0]])
    for op in ("argmax", "argmin"):
        f = getattr(torch, op)
        put(t, f"{op}/flat/{sfx}", in0=x, out=f(x))
        put(t, f"{op}/d1/{sfx}", in0=x, out=f(x, 1), dims=i64([1]), keepdim=i64(0))
        put(t, f"{op}/d0k/{sfx}", in0=x, out=f(x, 0, True), dims=i64([0]), keepdim=i64(1))
        y = torch.randn(5, 6, 7, dtype=torch.float64).to(dt)
        put(t, f"{op}/neg/{sfx}", in0=y, out=f(y, -2), dims=i64([-2]), keepdim=i64(0))
        put(t, f"{op}/flatrand/{sfx}", in0=y, out=f(y))
    # all / any on floats with NaN (NaN is true) and zeros
    x = T([[0.0, nan, 1.0], [0.0, 0.0, 0.0], [2.0, -1.0, nan]])
    put(t, f"all/nan/{sfx}", in0=x, out=torch.all(x, 1), dims=i64([1]), keepdim=i64(0))
    put(t, f"any/nan/{sfx}", in0=x, out=torch.any(x, 1), dims=i64([1]), keepdim=i64(0))
    # accuracy: sums of 2^20 float32 elements must not drift (no gradients: they are trivial)
    n = 1 << 20 if dt == torch.float32 else 1 << 16
    big = (torch.randn(n, dtype=torch.float64) + 0.5).to(dt)
    m = big.reshape(-1, 512)
    put(t, f"bigsum/all/{sfx}", in0=big, sum=torch.sum(big), mean=torch.mean(big), norm=torch.norm(big),
        exact=torch.sum(big.double()), norm64=torch.norm(big.double()), rows=torch.sum(m, 1), cols=torch.sum(m, 0), max=torch.max(big))


def along_cases(t, sfx, dt):
    for var, shape, dim in (("last", (4, 7), 1), ("first", (4, 7), 0), ("mid", (3, 5, 4), 1), ("neg", (3, 5, 4), -3),
                            ("vec", (9,), 0), ("scalar", (), 0), ("long", (3, 1000), -1), ("tail", (6, 37), 1),
                            ("short", (70, 16), 1), ("cols", (5, 600), 0)):
        x = (torch.randn(shape, dtype=torch.float64) * 3).to(dt)
        kv = {"dims": i64([dim])}
        grad_case(t, f"softmax/{var}/{sfx}", lambda a: torch.softmax(a, dim), x, **kv)
        grad_case(t, f"log_softmax/{var}/{sfx}", lambda a: torch.log_softmax(a, dim), x, **kv)
        grad_case(t, f"cumsum/{var}/{sfx}", lambda a: torch.cumsum(a, dim), x, **kv)
    inf, nan = math.inf, math.nan
    x = torch.tensor([[-inf, 1.0, 2.0, -inf], [-inf, -inf, -inf, -inf], [1.0, nan, 0.0, 2.0],
                      [100.0, -100.0, 50.0, 0.0]], dtype=dt)
    for op in ("softmax", "log_softmax"):
        f = getattr(torch, op)
        grad_case(t, f"{op}/special/{sfx}", lambda a: f(a, 1), x, fd=False, dims=i64([1]))


def integer_cases(t):
    """Result dtypes for integer and bool inputs (no gradients)."""
    x = torch.tensor([[3, -1, 4, 1], [5, 9, -2, 6], [0, 5, 3, 5]], dtype=torch.int64)
    for name, dt in (("int64", torch.int64), ("int32", torch.int32), ("uint8", torch.uint8), ("bool", torch.bool)):
        y = (x.abs() % 3 if dt == torch.bool else (x.abs() if dt == torch.uint8 else x)).to(dt)
        put(t, f"sum/all/{name}", in0=y, out=torch.sum(y))
        put(t, f"sum/d1/{name}", in0=y, out=torch.sum(y, 1), dims=i64([1]), keepdim=i64(0))
        put(t, f"prod/d0/{name}", in0=y, out=torch.prod(y, 0), dims=i64([0]), keepdim=i64(0))
        put(t, f"prod/all/{name}", in0=y, out=torch.prod(y))
        put(t, f"cumsum/d1/{name}", in0=y, out=torch.cumsum(y, 1), dims=i64([1]))
        put(t, f"all/d1/{name}", in0=y, out=torch.all(y, 1), dims=i64([1]), keepdim=i64(0))
        put(t, f"any/d0/{name}", in0=y, out=torch.any(y, 0), dims=i64([0]), keepdim=i64(0))
        put(t, f"logsumexp/d1/{name}", in0=y, out=torch.logsumexp(y, 1), dims=i64([1]), keepdim=i64(0))
        put(t, f"max/all/{name}", in0=y, out=torch.max(y))
        put(t, f"min/all/{name}", in0=y, out=torch.min(y))
        v, idx = torch.max(y, 1)
        put(t, f"max_dim/d1/{name}", in0=y, out=v, indices=idx, dims=i64([1]), keepdim=i64(0))
        v, idx = torch.min(y, 0, True)
        put(t, f"min_dim/d0k/{name}", in0=y, out=v, indices=idx, dims=i64([0]), keepdim=i64(1))
        if dt != torch.bool:
            put(t, f"argmax/d1/{name}", in0=y, out=torch.argmax(y, 1), dims=i64([1]), keepdim=i64(0))
            put(t, f"argmin/flat/{name}", in0=y, out=torch.argmin(y))
    big = torch.tensor([2**60 + 1, -(2**60), 3], dtype=torch.int64)  # int64 sums beyond double's 53 bits
    put(t, "sum/exact/int64", in0=big, out=torch.sum(big))


def build():
    torch.manual_seed(0)
    t = {}
    for sfx, dt in DTYPES.items():
        dims_cases(t, sfx, dt)
        special_cases(t, sfx, dt)
        along_cases(t, sfx, dt)
    integer_cases(t)
    return t
