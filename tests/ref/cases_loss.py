"""Reference values for tests/test_loss.c: cross_entropy, nll_loss, mse_loss and
binary_cross_entropy_with_logits from torch.nn.functional (float32 and float64 cases).

Case names are "<loss>/<variant>/<suffix>", <loss> one of ce, nll, mse, bce, <suffix> f32 or f64.
Keys:
  in0          the input (logits, log-probabilities, predictions)
  in1          the target (int64 class indices for ce / nll, floats for mse / bce)
  weight       class weights [C] (ce, nll) or the elementwise weight (bce); absent: none
  pos_weight   bce's positive-class weight; absent: none
  reduction    int64 0-dim: 0 none, 1 mean, 2 sum (nb_reduction's order)
  ignore_index int64 0-dim (ce, nll)
  smoothing    float64 0-dim (ce)
  out          the loss; gout the upstream gradient
  grad0, grad1 the gradients of in0 and (mse, bce) in1
  fd           int64 0-dim, present on float64 cases to check by finite differences
"""
import itertools
import warnings

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f64": torch.float64}
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def i64(v):
    return torch.tensor(v, dtype=torch.int64)


def put(t, name, **kv):
    for k, v in kv.items():
        if v is not None:
            t[f"{name}/{k}"] = v.detach().clone()


def run(t, name, fn, inputs, fd=True, **kv):
    """fn(*leaves) with gradients of every floating input; writes in<i>, out, gout, grad<i>."""
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    gout = torch.randn(out.shape, dtype=torch.float64).to(out.dtype)
    out.backward(gout)
    for i, (x, leaf) in enumerate(zip(inputs, leaves)):
        put(t, name, **{f"in{i}": x})
        if leaf.requires_grad:
            put(t, name, **{f"grad{i}": leaf.grad if leaf.grad is not None else torch.zeros_like(x)})
    put(t, name, out=out, gout=gout, **kv)
    if fd and out.dtype == torch.float64 and bool(torch.isfinite(out).all()):
        t[f"{name}/fd"] = i64(1)


# (variant, logits shape, target shape): [N, C], K-dimensional [N, C, d1, d2], and [C] with a 0-dim target
SHAPES = [("2d", (5, 7), (5,)), ("kd", (3, 4, 2, 3), (3, 2, 3)), ("1d", (6,), ())]


def class_targets(tshape, ncls, ignore):
    """Targets covering every class; with `ignore` set, about a third of them replaced by it."""
    n = 1
    for s in tshape:
        n *= s
    tgt = torch.randint(0, ncls, (max(n, 1),))
    if ignore is not None:
        if ignore >= 0:
            tgt[::2] = ignore  # a real class index to ignore
        else:
            tgt[1::3] = ignore
    return tgt[:n].reshape(tshape) if tshape else tgt[0].reshape(())


def class_cases(t, sfx, dt):
    ignores = {"noign": None, "ign": -100, "igc": 1}
    for (var, xs, ts), wname, (iname, ign), smooth, (rname, red) in itertools.product(
            SHAPES, ("now", "w"), ignores.items(), (0.0, 0.1), REDUCTIONS.items()):
        ncls = xs[0] if len(xs) == 1 else xs[1]
        x = torch.randn(xs, dtype=torch.float64).to(dt) * 2
        tgt = class_targets(ts, ncls, ign)
        w = (torch.rand(ncls, dtype=torch.float64) + 0.5).to(dt) if wname == "w" else None
        ii = ign if ign is not None else -100
        kv = dict(weight=w, reduction=i64(red), ignore_index=i64(ii))
        sname = "s" if smooth else "nos"
        run(t, f"ce/{var}_{wname}_{iname}_{sname}_{rname}/{sfx}",
            lambda a, b: F.cross_entropy(a, b, weight=w, ignore_index=ii, reduction=rname, label_smoothing=smooth),
            [x, tgt], smoothing=torch.tensor(smooth, dtype=torch.float64), **kv)
        if smooth == 0.0:
            lp = torch.log_softmax(x, 0 if len(xs) == 1 else 1)
            run(t, f"nll/{var}_{wname}_{iname}_{rname}/{sfx}",
                lambda a, b: F.nll_loss(a, b, weight=w, ignore_index=ii, reduction=rname), [lp, tgt], **kv)
    # every target ignored: the mean is 0/0 = NaN, the gradient zero
    x = torch.randn(4, 3, dtype=torch.float64).to(dt)
    tgt = torch.full((4,), -100, dtype=torch.int64)
    for smooth in (0.0, 0.2):
        run(t, f"ce/allign{int(smooth * 10)}/{sfx}",
            lambda a, b: F.cross_entropy(a, b, reduction="mean", label_smoothing=smooth), [x, tgt], fd=False,
            reduction=i64(1), ignore_index=i64(-100), smoothing=torch.tensor(smooth, dtype=torch.float64))
    # large logits: log_softmax keeps the loss finite
    x = torch.tensor([[1000.0, -1000.0, 0.0], [-500.0, 500.0, 499.0]], dtype=dt)
    run(t, f"ce/large/{sfx}", lambda a, b: F.cross_entropy(a, b, label_smoothing=0.3), [x, i64([1, 2])], fd=False,
        reduction=i64(1), ignore_index=i64(-100), smoothing=torch.tensor(0.3, dtype=torch.float64))
    # without smoothing (nabla's fused cross entropy): large logits, -inf logits, many classes (a
    # vector body and a tail), an ignored row
    run(t, f"ce/large_nos/{sfx}", lambda a, b: F.cross_entropy(a, b), [x, i64([1, 2])], fd=False,
        reduction=i64(1), ignore_index=i64(-100))
    xi = torch.tensor([[0.5, float("-inf"), 2.0], [float("-inf"), 1.0, -1.0]], dtype=dt)
    run(t, f"ce/neginf/{sfx}", lambda a, b: F.cross_entropy(a, b, reduction="sum"), [xi, i64([0, 2])], fd=False,
        reduction=i64(2), ignore_index=i64(-100))
    for ncls, n, red in ((1000, 6, "sum"), (37, 5, "mean")):
        x = torch.randn(n, ncls, dtype=torch.float64).to(dt) * 3
        tgt = torch.randint(0, ncls, (n,))
        tgt[1] = -100
        run(t, f"ce/many{ncls}/{sfx}", lambda a, b: F.cross_entropy(a, b, reduction=red), [x, tgt],
            fd=ncls < 100, reduction=i64(REDUCTIONS[red]), ignore_index=i64(-100))


def regression_cases(t, sfx, dt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns about mse_loss broadcasting
        for (var, ts), (rname, red) in itertools.product((("same", (3, 4)), ("bcast", (4,))), REDUCTIONS.items()):
            x = torch.randn(3, 4, dtype=torch.float64).to(dt)
            y = torch.randn(ts, dtype=torch.float64).to(dt)
            run(t, f"mse/{var}_{rname}/{sfx}", lambda a, b: F.mse_loss(a, b, reduction=rname), [x, y],
                reduction=i64(red))
    # logits from moderate to extreme: the stable form never overflows
    x = torch.cat([torch.randn(4, 3, dtype=torch.float64) * 3,
                   torch.tensor([[30.0, -30.0, 0.0], [100.0, -100.0, 1e-3]], dtype=torch.float64)]).to(dt)
    y = torch.rand(6, 3, dtype=torch.float64)
    y[4:, :2] = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    y = y.to(dt)
    weights = {"now": None, "wfull": torch.rand(6, 3, dtype=torch.float64) + 0.5, "wrow": torch.rand(3) + 0.5}
    for (wname, w), pw, (rname, red) in itertools.product(weights.items(), (False, True), REDUCTIONS.items()):
        w = w.to(dt) if w is not None else None
        p = (torch.rand(3, dtype=torch.float64) * 3 + 0.2).to(dt) if pw else None
        fd = dt == torch.float64 and wname != "wrow"  # the derivative is smooth everywhere
        run(t, f"bce/{wname}_{'pw' if pw else 'nopw'}_{rname}/{sfx}",
            lambda a, b: F.binary_cross_entropy_with_logits(a, b, weight=w, pos_weight=p, reduction=rname), [x, y],
            fd=fd, weight=w, pos_weight=p, reduction=i64(red))


def build():
    t = {}
    for sfx, dt in DTYPES.items():
        class_cases(t, sfx, dt)
        regression_cases(t, sfx, dt)
    return t
