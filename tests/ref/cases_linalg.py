"""Reference values for tests/test_linalg.c: matmul, mm, bmm, addmm and linear.

Each case <name>/<dtype> holds:
  op      int64 [1]: 0 matmul, 1 mm, 2 bmm, 3 addmm (in0 = input, in1 = a, in2 = b),
          4 linear (in0 = x, in1 = weight, in2 = bias when present)
  tr      int64 [n_inputs]: 1 where the stored input is the transpose of the operand (its last
          two dims swapped): the test passes transpose(in_i, -1, -2) to the op, so that the
          operand is column-major; grad_i is the gradient of the stored tensor
  scales  float64 [2]: beta, alpha (addmm only)
  in0.. inputs, gout the upstream gradient, out the output, grad0.. the inputs' gradients
Floating cases come in f32 and f64, computed by PyTorch in that dtype; integer cases have no
gradients.
"""
import torch

MATMUL, MM, BMM, ADDMM, LINEAR = range(5)


def _case(t, name, op, inputs, dtype, tr=None, scales=None):
    tr = tr or [0] * len(inputs)
    leaves = [x.detach().to(dtype).clone().requires_grad_(dtype.is_floating_point) for x in inputs]
    args = [x.transpose(-1, -2) if f else x for x, f in zip(leaves, tr)]
    if op == MATMUL:
        out = torch.matmul(*args)
    elif op == MM:
        out = torch.mm(*args)
    elif op == BMM:
        out = torch.bmm(*args)
    elif op == ADDMM:
        beta, alpha = scales if dtype.is_floating_point else (int(scales[0]), int(scales[1]))
        out = torch.addmm(args[0], args[1], args[2], beta=beta, alpha=alpha)
    else:
        out = torch.nn.functional.linear(*args)
    t[f"{name}/op"] = torch.tensor([op], dtype=torch.int64)
    t[f"{name}/tr"] = torch.tensor(tr, dtype=torch.int64)
    if scales is not None:
        t[f"{name}/scales"] = torch.tensor(scales, dtype=torch.float64)
    for i, x in enumerate(leaves):
        t[f"{name}/in{i}"] = x.detach()
    t[f"{name}/out"] = out.detach()
    if dtype.is_floating_point:
        gout = torch.randn(out.shape, dtype=dtype)
        out.backward(gout)
        t[f"{name}/gout"] = gout
        for i, x in enumerate(leaves):
            t[f"{name}/grad{i}"] = x.grad


def _float_cases():
    r = torch.randn
    return [
        # torch.matmul: every combination of ranks
        ("matmul_1d_1d", MATMUL, [r(5), r(5)], None, None),
        ("matmul_2d_1d", MATMUL, [r(3, 5), r(5)], None, None),
        ("matmul_1d_2d", MATMUL, [r(5), r(5, 4)], None, None),
        ("matmul_2d_2d", MATMUL, [r(3, 5), r(5, 4)], None, None),
        ("matmul_3d_2d", MATMUL, [r(2, 3, 5), r(5, 4)], None, None),
        ("matmul_3d_1d", MATMUL, [r(2, 3, 5), r(5)], None, None),
        ("matmul_2d_3d", MATMUL, [r(3, 5), r(2, 5, 4)], None, None),
        ("matmul_1d_3d", MATMUL, [r(5), r(2, 5, 4)], None, None),
        ("matmul_3d_3d", MATMUL, [r(2, 3, 5), r(2, 5, 4)], None, None),
        ("matmul_4d_3d_bcast", MATMUL, [r(2, 3, 4, 5), r(3, 5, 2)], None, None),
        ("matmul_batch_bcast", MATMUL, [r(2, 1, 3, 4), r(5, 4, 2)], None, None),
        ("matmul_3d_3d_bcast1", MATMUL, [r(1, 3, 4), r(4, 4, 2)], None, None),
        ("matmul_3d_2d_tr", MATMUL, [r(2, 5, 3), r(4, 5)], [1, 1], None),
        ("matmul_4d_4d_tr", MATMUL, [r(2, 3, 5, 4), r(2, 3, 2, 5)], [1, 1], None),
        ("matmul_k0", MATMUL, [r(2, 3, 0), r(0, 4)], None, None),
        # mm and bmm, with column-major operands
        ("mm", MM, [r(4, 6), r(6, 3)], None, None),
        ("mm_tr_a", MM, [r(6, 4), r(6, 3)], [1, 0], None),
        ("mm_tr_ab", MM, [r(6, 4), r(3, 6)], [1, 1], None),
        ("mm_row", MM, [r(1, 7), r(7, 5)], None, None),
        ("mm_col", MM, [r(5, 7), r(7, 1)], None, None),
        ("mm_k0", MM, [r(3, 0), r(0, 2)], None, None),
        ("mm_k300", MM, [r(20, 300), r(300, 17)], None, None),
        ("bmm", BMM, [r(3, 4, 5), r(3, 5, 2)], None, None),
        ("bmm_tr_b", BMM, [r(3, 4, 5), r(3, 2, 5)], [0, 1], None),
        ("bmm_tr_ab", BMM, [r(2, 5, 4), r(2, 3, 5)], [1, 1], None),
        # addmm: beta, alpha, input broadcast
        ("addmm", ADDMM, [r(3, 4), r(3, 5), r(5, 4)], None, [0.5, 2.0]),
        ("addmm_bcast_row", ADDMM, [r(4), r(3, 5), r(5, 4)], None, [1.0, 1.0]),
        ("addmm_bcast_col", ADDMM, [r(3, 1), r(3, 5), r(5, 4)], None, [-1.5, 0.25]),
        ("addmm_scalar", ADDMM, [r(()), r(3, 5), r(5, 4)], None, [2.0, -1.0]),
        ("addmm_beta0", ADDMM, [r(3, 4), r(3, 5), r(5, 4)], None, [0.0, 1.0]),
        ("addmm_tr", ADDMM, [r(3, 4), r(5, 3), r(4, 5)], [0, 1, 1], [1.0, 3.0]),
        # linear: x [..., in], weight [out, in], bias [out]
        ("linear", LINEAR, [r(4, 6), r(3, 6), r(3)], None, None),
        ("linear_nobias", LINEAR, [r(4, 6), r(3, 6)], None, None),
        ("linear_3d", LINEAR, [r(2, 3, 6), r(5, 6), r(5)], None, None),
        ("linear_4d_nobias", LINEAR, [r(2, 2, 3, 6), r(5, 6)], None, None),
        ("linear_1d", LINEAR, [r(6), r(3, 6), r(3)], None, None),
        ("linear_wt", LINEAR, [r(4, 6), r(6, 3), r(3)], [0, 1, 0], None),
    ]


def build():
    t = {}
    for name, op, inputs, tr, scales in _float_cases():
        for dtype, suffix in ((torch.float32, "f32"), (torch.float64, "f64")):
            _case(t, f"{name}/{suffix}", op, inputs, dtype, tr, scales)
    ia, ib = torch.randint(-9, 10, (3, 4)), torch.randint(-9, 10, (4, 2))
    for dtype, suffix in ((torch.int64, "i64"), (torch.int32, "i32")):
        _case(t, f"mm_int/{suffix}", MM, [ia, ib], dtype)
        _case(t, f"matmul_int_bcast/{suffix}", MATMUL, [torch.randint(-9, 10, (2, 3, 4)), ib], dtype)
    ua, ub = torch.randint(0, 256, (3, 4)), torch.randint(0, 256, (4, 2))  # wraps mod 256
    _case(t, "mm_int/u8", MM, [ua, ub], torch.uint8)
    _case(t, "addmm_int/i64", ADDMM, [torch.randint(-9, 10, (2,)), ia, ib], torch.int64, scales=[2.0, -3.0])
    return t
