"""PyTorch reference values for tests/test_unary.c: elementwise unary ops and activations.

Case names are "<op>/<variant>/<dtype>"; <op> selects the nabla function in the C test. Keys:
  in0     the input                     params  float64 [s0, s1, i0]: the op's parameters
  out     PyTorch's result (its dtype is the expected result dtype)
  gout    the upstream gradient, grad0  PyTorch's input gradient (floating inputs only)
Floating cases come in float32 and float64, PyTorch computing in that dtype. "special" variants
hold the points where implementations differ: kinks (0 for relu/abs, the clamp bounds), overflow
and underflow of exp (|x| near 88 and beyond), saturation of sigmoid/tanh/softplus, the edges of
log/sqrt's domains, infinities and NaN. Integer variants check result dtypes.
"""
import math

import torch
import torch.nn.functional as F

INF = math.inf
NAN = math.nan



def clamp(x, lo, hi):
    """nabla's infinite bound means none: for an integer tensor that is PyTorch's None (an
    infinite float bound would make the result float32)."""
    if not x.dtype.is_floating_point:
        lo, hi = (None if lo == -INF else lo), (None if hi == INF else hi)
    return torch.clamp(x, lo, hi)


# op -> (function of (x, s0, s1, i0), default params)
OPS = {
    "neg": (lambda x, a, b, i: torch.neg(x), (0, 0, 0)),
    "abs": (lambda x, a, b, i: torch.abs(x), (0, 0, 0)),
    "sign": (lambda x, a, b, i: torch.sign(x), (0, 0, 0)),
    "exp": (lambda x, a, b, i: torch.exp(x), (0, 0, 0)),
    "log": (lambda x, a, b, i: torch.log(x), (0, 0, 0)),
    "log1p": (lambda x, a, b, i: torch.log1p(x), (0, 0, 0)),
    "sqrt": (lambda x, a, b, i: torch.sqrt(x), (0, 0, 0)),
    "rsqrt": (lambda x, a, b, i: torch.rsqrt(x), (0, 0, 0)),
    "sin": (lambda x, a, b, i: torch.sin(x), (0, 0, 0)),
    "cos": (lambda x, a, b, i: torch.cos(x), (0, 0, 0)),
    "tanh": (lambda x, a, b, i: torch.tanh(x), (0, 0, 0)),
    "sigmoid": (lambda x, a, b, i: torch.sigmoid(x), (0, 0, 0)),
    "relu": (lambda x, a, b, i: torch.relu(x), (0, 0, 0)),
    "leaky_relu": (lambda x, a, b, i: F.leaky_relu(x, a), (0.01, 0, 0)),
    "gelu": (lambda x, a, b, i: F.gelu(x, approximate="tanh" if i else "none"), (0, 0, 0)),
    "silu": (lambda x, a, b, i: F.silu(x), (0, 0, 0)),
    "softplus": (lambda x, a, b, i: F.softplus(x, a, b), (1, 20, 0)),
    "clamp": (lambda x, a, b, i: clamp(x, a, b), (-1, 1, 0)),
    "logical_not": (lambda x, a, b, i: torch.logical_not(x), (0, 0, 0)),
}

# Inputs of the "basic" variants: a smooth domain per op (uniform in [lo, hi]).
DOMAIN = {"log": (0.05, 5), "sqrt": (0.05, 5), "rsqrt": (0.05, 5), "log1p": (-0.9, 5),
          "exp": (-5, 5), "sin": (-7, 7), "cos": (-7, 7)}

SPECIAL = {
    "neg": [0.0, -0.0, 1.5, -2.25, INF, -INF, NAN, 1e38],
    "abs": [0.0, -0.0, 1.5, -2.25, INF, -INF, NAN, -1e-30],
    "sign": [0.0, -0.0, 1e-30, -1e-30, 3.0, -7.0, INF, -INF, NAN],
    "exp": [0.0, -0.0, 1e-8, -1e-8, 1.0, 50.0, 88.0, 88.5, 89.0, 100.0, -87.0, -88.5, -100.0,
            -103.0, -104.0, -110.0, INF, -INF, NAN],
    "log": [1.0, 0.5, 2.0, 1e-30, 1e-40, 1e30, 3e38, 0.0, -0.0, -1.0, INF, -INF, NAN],
    "log1p": [0.0, 1e-10, -1e-10, 1e-5, -0.5, -0.999, -1.0, -2.0, 1e7, 1e30, INF, NAN],
    "sqrt": [0.0, -0.0, 4.0, 2.0, 1e-40, 1e30, -1.0, INF, -INF, NAN],
    "rsqrt": [0.0, 4.0, 2.0, 1e-30, 1e30, -1.0, INF, NAN],
    "sin": [0.0, 1e-20, 3.14159265, -1.5707963, 100.0, 1e4, -1e4, 1e6, INF, NAN],
    "cos": [0.0, 1e-20, 3.14159265, -1.5707963, 100.0, 1e4, -1e4, 1e6, INF, NAN],
    "tanh": [0.0, -0.0, 1e-20, -1e-6, 0.3, 0.6, 0.625, -0.625, 0.7, -2.0, 9.0, -10.0, 20.0, -50.0,
             100.0, INF, -INF, NAN],
    "sigmoid": [0.0, 1e-8, 2.0, -2.0, 15.0, -15.0, 20.0, -20.0, 50.0, -50.0, 87.0, -87.0, -88.5,
                -89.0, 100.0, -100.0, INF, -INF, NAN],
    "relu": [0.0, -0.0, 1e-30, -1e-30, 2.5, -2.5, INF, -INF, NAN],
    "leaky_relu": [0.0, -0.0, 1e-30, -1e-30, 2.5, -2.5, INF, -INF, NAN],
    "gelu": [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, -0.75, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.0, -4.0,
             5.5, -5.5, 10.0, 20.0, INF, -INF, NAN],
    "silu": [0.0, -0.0, 1e-8, 1.0, -1.0, 5.0, -5.0, 20.0, -20.0, 50.0, -50.0, 100.0, -100.0, INF,
             -INF, NAN],
    "softplus": [0.0, 1.0, -1.0, 5.0, -5.0, 9.5, 10.5, 19.5, 20.0, 20.5, 50.0, -30.0, -50.0, -100.0,
                 INF, -INF, NAN],
    "clamp": [-3.0, -1.0, -0.999, 0.0, 0.5, 0.999, 1.0, 3.0, 0.25, -0.25, INF, -INF, NAN],
    "logical_not": [0.0, -0.0, 1.0, -2.5, 1e-30, INF, -INF, NAN],
}

# Extra parameter sets: variant -> params (each also gets a "special" run when listed here).
VARIANTS = {
    "leaky_relu": {"slope0.2": (0.2, 0, 0), "slope_neg": (-0.5, 0, 0)},
    "gelu": {"tanh": (0, 0, 1)},
    "softplus": {"beta2_thr10": (2.0, 10.0, 0), "beta0.5_thr5": (0.5, 5.0, 0)},
    "clamp": {"min_only": (0.5, INF, 0), "max_only": (-INF, 0.5, 0), "min_gt_max": (1.0, -1.0, 0),
              "none": (-INF, INF, 0), "wide": (-0.25, 0.25, 0)},
}

FLOATS = {"f32": torch.float32, "f64": torch.float64}


def run(t, op, x, params, grad):
    fn = OPS[op][0]
    name = f"{op}/{params[0]}"
    differentiable = grad and x.dtype.is_floating_point and op not in ("logical_not",)
    xin = x.clone().requires_grad_(differentiable)
    out = fn(xin, *params[1])
    t[name + "/in0"] = x.clone()
    t[name + "/out"] = out.detach()
    t[name + "/params"] = torch.tensor(params[1], dtype=torch.float64)
    if differentiable:
        gout = torch.randn(out.shape, dtype=out.dtype)
        out.backward(gout)
        t[name + "/gout"] = gout
        t[name + "/grad0"] = xin.grad


def basic_input(op, shape, dtype):
    lo, hi = DOMAIN.get(op, (-4, 4))
    x = torch.rand(shape, dtype=torch.float64) * (hi - lo) + lo
    if op == "clamp":  # away from the bounds, where the gradient is not defined
        x = torch.where((x.abs() - 1).abs() < 0.05, x * 0.9, x)
    return x.to(dtype)


def build():
    torch.manual_seed(0)
    t = {}
    for op in OPS:
        for dn, dt in FLOATS.items():
            sets = {"basic": OPS[op][1], "special": OPS[op][1]}
            for v, prm in VARIANTS.get(op, {}).items():
                sets[v] = prm
                sets[v + "_special"] = prm
            for v, prm in sets.items():
                if v.endswith("special"):
                    x = torch.tensor(SPECIAL[op], dtype=dt)
                else:
                    x = basic_input(op, (3, 7), dt)
                run(t, op, x, (f"{v}/{dn}", prm), grad=True)
    # result dtypes of integer and bool inputs
    ints = {"i64": torch.int64, "i32": torch.int32, "u8": torch.uint8, "b8": torch.bool}
    vals = [0, 1, 2, 3, 5, 7, 100]
    svals = [-5, -1, 0, 1, 2, 7, 100]
    for op in ["neg", "abs", "sign", "relu", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos",
               "tanh", "sigmoid", "logical_not"]:
        for dn, dt in ints.items():
            if dt == torch.bool and op in ("neg", "abs", "relu"):
                continue  # errors, tested in C
            src = vals if dt in (torch.uint8, torch.bool) else svals
            x = torch.tensor(src).to(dt)
            run(t, op, x, (f"int/{dn}", OPS[op][1]), grad=False)
    # neg/abs wrap around at the type's limits, as two's complement does
    none = (0, 0, 0)
    i64, i32 = torch.int64, torch.int32
    run(t, "neg", torch.tensor([-2**63, 2**63 - 1, 0], dtype=i64), ("wrap/i64", none), False)
    run(t, "abs", torch.tensor([-2**31, 2**31 - 1, -1], dtype=i32), ("wrap/i32", none), False)
    run(t, "neg", torch.tensor([0, 1, 255], dtype=torch.uint8), ("wrap/u8", none), False)
    # clamp: whole bounds keep integer dtypes (bool becomes int64), fractional ones give float32
    for dn, dt in ints.items():
        src = vals if dt in (torch.uint8, torch.bool) else svals
        x = torch.tensor(src).to(dt)
        run(t, "clamp", x, (f"int_whole/{dn}", (1, 5, 0)), False)
        run(t, "clamp", x, (f"int_frac/{dn}", (0.5, 5, 0)), False)
    x = torch.tensor(svals, dtype=torch.int64)
    run(t, "clamp", x, ("int_min_only/i64", (2, INF, 0)), False)
    run(t, "logical_not", torch.tensor([0.0, -0.0, 1.0, NAN, INF], dtype=torch.float32),
        ("float/f32", (0, 0, 0)), False)
    return t
