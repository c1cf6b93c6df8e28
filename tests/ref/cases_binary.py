"""Reference values for tests/test_binary.c: elementwise binary ops, comparisons, where, and the
in-place forms, computed by PyTorch in float32 and float64.

Case names are "<op>/<variant>/<f32|f64>". <op> is the nabla function without its nb_ prefix:
"add", "add_scalar", "add_" (in place), "add_scalar_", "eq", "eq_scalar", "where"... Keys:
  in0, in1, in2   inputs (for where: in0 is the bool condition)
  scalar          the scalar operand of the _scalar forms (float64, 0-dim)
  out             the result (for the in-place forms: the tensor after the op)
  gout            the upstream gradient, for differentiable ops
  grad<i>         the gradient of input i
"""
import torch

DTYPES = {"f32": torch.float32, "f64": torch.float64}

ARITH = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}
COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}

# Shapes of (a, b): same shape, broadcast both ways, a 0-dim tensor with a matrix and back.
SHAPES = {
    "same": ((3, 4), (3, 4)),
    "bcast": ((3, 1, 4), (2, 4)),
    "scal0": ((), (3, 4)),
    "mat0": ((2, 3), ()),
}


def operands(op, sa, sb, dt):
    """Inputs where op is smooth: positive bases for pow, denominators away from 0."""
    a = torch.randn(sa, dtype=torch.float64)
    b = torch.randn(sb, dtype=torch.float64)
    if op == "pow":
        a = torch.rand(sa, dtype=torch.float64) + 0.5
    if op == "div":
        b = (torch.rand(sb, dtype=torch.float64) + 0.5) * torch.where(torch.rand(sb) < 0.5, -1.0, 1.0).double()
    return a.to(dt), b.to(dt)


def with_grads(fn, inputs, diff):
    """Runs fn on leaves made from inputs (those marked in diff require grad) with a random
    upstream gradient; returns (leaves, out, gout)."""
    leaves = [x.clone().requires_grad_(d) for x, d in zip(inputs, diff)]
    out = fn(*leaves)
    gout = torch.randn(out.shape, dtype=torch.float64).to(out.dtype)
    out.backward(gout)
    return leaves, out, gout


def put(t, name, **kv):
    for k, v in kv.items():
        t[f"{name}/{k}"] = v.detach().clone() if isinstance(v, torch.Tensor) else v


def arith_cases(t, suffix, dt):
    for op, fn in ARITH.items():
        for variant, (sa, sb) in SHAPES.items():
            a, b = operands(op, sa, sb, dt)
            (la, lb), out, gout = with_grads(fn, [a, b], [True, True])
            put(t, f"{op}/{variant}/{suffix}", in0=a, in1=b, out=out, gout=gout, grad0=la.grad, grad1=lb.grad)
    # ties in maximum / minimum: the gradient is split half and half
    for op in ("maximum", "minimum"):
        a = torch.tensor([[1.0, 2.0, 3.0, -1.0], [0.5, 0.5, -2.0, 4.0]], dtype=dt)
        b = torch.tensor([[1.0, 3.0, 2.0, -1.0], [0.5, 0.25, -2.0, 5.0]], dtype=dt)
        (la, lb), out, gout = with_grads(ARITH[op], [a, b], [True, True])
        put(t, f"{op}/ties/{suffix}", in0=a, in1=b, out=out, gout=gout, grad0=la.grad, grad1=lb.grad)
    # pow at 0 and with 0 exponents: PyTorch's conventions for the gradients
    a = torch.tensor([0.0, 0.0, 2.0, 3.0, 0.0, 1.5], dtype=dt)
    b = torch.tensor([0.0, 2.0, 0.0, 1.5, 1.0, -2.0], dtype=dt)
    (la, lb), out, gout = with_grads(torch.pow, [a, b], [True, True])
    put(t, f"pow/zeros/{suffix}", in0=a, in1=b, out=out, gout=gout, grad0=la.grad, grad1=lb.grad)
    # one input without grad: only the other gradient is computed
    a, b = operands("mul", (3, 4), (4,), dt)
    (la, lb), out, gout = with_grads(torch.mul, [a, b], [True, False])
    put(t, f"mul/nograd1/{suffix}", in0=a, in1=b, out=out, gout=gout, grad0=la.grad)


SCALARS = {
    "add_scalar": (torch.add, [2.5, -1.0]),
    "sub_scalar": (torch.sub, [0.75]),
    "mul_scalar": (torch.mul, [-3.0, 0.1]),
    "div_scalar": (torch.div, [4.0, -0.3]),
    "pow_scalar": (torch.pow, [2.0, 0.5, 3.0, -1.5, 0.0, 1.0]),
}


def scalar_cases(t, suffix, dt):
    for op, (fn, values) in SCALARS.items():
        for i, s in enumerate(values):
            a = torch.randn(3, 4, dtype=torch.float64)
            if op == "pow_scalar" and s != int(s):
                a = torch.rand(3, 4, dtype=torch.float64) + 0.5
            a = a.to(dt)
            (la,), out, gout = with_grads(lambda x: fn(x, s), [a], [True])
            put(t, f"{op}/s{i}/{suffix}", in0=a, scalar=torch.tensor(s, dtype=torch.float64), out=out,
                gout=gout, grad0=la.grad)


def compare_cases(t, suffix, dt):
    # values on a coarse grid so that equal elements are common
    for op, fn in COMPARE.items():
        for variant, (sa, sb) in SHAPES.items():
            a = torch.randint(-2, 3, sa).to(dt) / 2
            b = torch.randint(-2, 3, sb).to(dt) / 2
            put(t, f"{op}/{variant}/{suffix}", in0=a, in1=b, out=fn(a, b))
        a = torch.randint(-2, 3, (3, 4)).to(dt) / 2
        put(t, f"{op}_scalar/s0/{suffix}", in0=a, scalar=torch.tensor(0.5, dtype=torch.float64), out=fn(a, 0.5))
    # a float32 tensor against a scalar float32 cannot hold exactly: compared in float32
    a = torch.tensor([0.1, 0.2, 0.3], dtype=dt)
    put(t, f"eq_scalar/tenth/{suffix}", in0=a, scalar=torch.tensor(0.1, dtype=torch.float64), out=a == 0.1)


def where_cases(t, suffix, dt):
    shapes = {"same": ((3, 4), (3, 4), (3, 4)), "bcast": ((3, 1, 4), (2, 4), (3, 2, 1)),
              "scal0": ((2, 3), (), (2, 3))}
    for variant, (sc, sa, sb) in shapes.items():
        cond = torch.rand(sc) < 0.5
        a = torch.randn(sa, dtype=torch.float64).to(dt)
        b = torch.randn(sb, dtype=torch.float64).to(dt)
        (_, la, lb), out, gout = with_grads(torch.where, [cond, a, b], [False, True, True])
        put(t, f"where/{variant}/{suffix}", in0=cond, in1=a, in2=b, out=out, gout=gout, grad1=la.grad,
            grad2=lb.grad)


def inplace_cases(t, suffix, dt):
    for op in ("add", "sub", "mul", "div"):
        a, b = operands(op, (3, 4), (4,), dt)
        put(t, f"{op}_/bcast/{suffix}", in0=a, in1=b, out=getattr(a.clone(), op + "_")(b))
        a, b = operands(op, (2, 3), (2, 3), dt)
        put(t, f"{op}_/same/{suffix}", in0=a, in1=b, out=getattr(a.clone(), op + "_")(b))
        s = {"add": 1.5, "sub": -2.0, "mul": 0.3, "div": 7.0}[op]
        put(t, f"{op}_scalar_/s0/{suffix}", in0=a, scalar=torch.tensor(s, dtype=torch.float64),
            out=getattr(a.clone(), op + "_")(s))
    # float32 self with a float64 other (and back): computed in the promoted dtype, cast back
    other = torch.float64 if dt == torch.float32 else torch.float32
    a = torch.randn(2, 3, dtype=torch.float64).to(dt)
    b = torch.randn(3, dtype=torch.float64).to(other)
    put(t, f"mul_/mixed/{suffix}", in0=a, in1=b, out=a.clone().mul_(b))


def build():
    t = {}
    for suffix, dt in DTYPES.items():
        arith_cases(t, suffix, dt)
        scalar_cases(t, suffix, dt)
        compare_cases(t, suffix, dt)
        where_cases(t, suffix, dt)
        inplace_cases(t, suffix, dt)
    return t
