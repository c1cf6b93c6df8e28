"""Reference values for tests/test_nn_conv.c: conv2d, max_pool2d, avg_pool2d,
adaptive_avg_pool2d and batch_norm (torch.nn.functional).

Each case <name>/<dtype> holds:
  op      int64 [1]: 0 conv2d, 1 max_pool2d, 2 avg_pool2d, 3 adaptive_avg_pool2d, 4 batch_norm
  params  int64: conv2d [stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups(, relu)]
          (relu 1: relu(conv2d), nabla's fused conv2d + ReLU);
          pools [k_h, k_w, stride_h, stride_w, pad_h, pad_w, ceil_mode, count_include_pad(, relu)]
          (relu 1: relu(max_pool2d), nabla's nb_max_pool2d_relu);
          adaptive [out_h, out_w]; batch_norm [training(, relu)] (relu 1: relu(batch_norm),
          nabla's nb_batch_norm_relu)
  scalars float64 [momentum, eps] (batch_norm)
  in0.. inputs (conv2d: x, weight, bias when present; batch_norm: x, weight, bias),
  rm, rv  batch_norm's running stats before the call; rm_out, rv_out after it
  gout the upstream gradient, out the output, grad0.. the inputs' gradients
Every case comes in f32 and f64, computed by PyTorch in that dtype.
"""
import torch
import torch.nn.functional as F

CONV, MAXP, AVGP, ADAPT, BN = range(5)


def _store(t, name, op, params, inputs, out, scalars=None):
    t[f"{name}/op"] = torch.tensor([op], dtype=torch.int64)
    t[f"{name}/params"] = torch.tensor(params, dtype=torch.int64)
    if scalars is not None:
        t[f"{name}/scalars"] = torch.tensor(scalars, dtype=torch.float64)
    for i, x in enumerate(inputs):
        t[f"{name}/in{i}"] = x.detach().clone()
    t[f"{name}/out"] = out.detach()
    gout = torch.randn(out.shape, dtype=out.dtype)
    out.backward(gout)
    t[f"{name}/gout"] = gout
    for i, x in enumerate(inputs):
        t[f"{name}/grad{i}"] = x.grad


def _leaves(xs, dtype):
    return [x.to(dtype).clone().requires_grad_(True) for x in xs]


def _conv(t, name, x, w, b, stride, pad, dil, groups, relu=False):
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        ins = _leaves([x, w] + ([b] if b is not None else []), dt)
        out = F.conv2d(ins[0], ins[1], ins[2] if b is not None else None, stride, pad, dil, groups)
        if relu:
            out = F.relu(out)
        params = list(stride) + list(pad) + list(dil) + [groups] + ([1] if relu else [])
        _store(t, f"{name}/{sfx}", CONV, params, ins, out)


def _pool(t, name, op, x, k, s, p, ceil, cip=True, relu=False):
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        (xi,) = _leaves([x], dt)
        if op == MAXP:
            out = F.max_pool2d(xi, k, s, p, ceil_mode=ceil)
        else:
            out = F.avg_pool2d(xi, k, s, p, ceil_mode=ceil, count_include_pad=cip)
        if relu:
            out = F.relu(out)
        params = list(k) + list(s) + list(p) + [int(ceil), int(cip)] + ([1] if relu else [])
        _store(t, f"{name}/{sfx}", op, params, [xi], out)


def _adapt(t, name, x, oh, ow):
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        (xi,) = _leaves([x], dt)
        out = F.adaptive_avg_pool2d(xi, (oh, ow))
        _store(t, f"{name}/{sfx}", ADAPT, [oh, ow], [xi], out)


def _bn(t, name, x, training, momentum=0.1, eps=1e-5, affine=True, relu=False, residual=None):
    """params: training, relu, and the residual's input index (0: none; it comes after x, weight
    and bias: batch_norm(x) + residual, then the ReLU when relu: nabla's nb_batch_norm_add and
    nb_batch_norm_add_relu)."""
    c = x.shape[1]
    rm0, rv0 = torch.randn(c), torch.rand(c) + 0.5
    wb = [torch.randn(c), torch.randn(c)] if affine else []
    res = [residual] if residual is not None else []
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        ins = _leaves([x] + wb + res, dt)
        rm, rv = rm0.to(dt).clone(), rv0.to(dt).clone()
        t[f"{name}/{sfx}/rm"] = rm.clone()
        t[f"{name}/{sfx}/rv"] = rv.clone()
        w, b = (ins[1], ins[2]) if affine else (None, None)
        out = F.batch_norm(ins[0], rm, rv, w, b, training, momentum, eps)
        if res:
            out = out + ins[-1]
        if relu:
            out = F.relu(out)
        t[f"{name}/{sfx}/rm_out"] = rm
        t[f"{name}/{sfx}/rv_out"] = rv
        params = [int(training)] + ([int(relu), len(ins) - 1 if res else 0] if relu or res else [])
        _store(t, f"{name}/{sfx}", BN, params, ins, out, [momentum, eps])


def build():
    t = {}
    r = torch.randn
    _conv(t, "conv_basic", r(2, 3, 7, 6), r(4, 3, 3, 3), r(4), (1, 1), (0, 0), (1, 1), 1)
    _conv(t, "conv_nobias_pad", r(2, 3, 6, 6), r(5, 3, 3, 3), None, (1, 1), (1, 1), (1, 1), 1)
    _conv(t, "conv_stride_pad", r(2, 4, 9, 8), r(6, 4, 3, 2), r(6), (2, 3), (1, 2), (1, 1), 1)
    _conv(t, "conv_dilation", r(1, 2, 10, 9), r(3, 2, 3, 3), r(3), (1, 2), (2, 1), (2, 3), 1)
    _conv(t, "conv_groups", r(2, 6, 8, 8), r(9, 2, 3, 3), r(9), (1, 1), (1, 1), (1, 1), 3)
    _conv(t, "conv_depthwise", r(2, 4, 7, 7), r(4, 1, 5, 5), r(4), (2, 2), (2, 2), (1, 1), 4)
    _conv(t, "conv_1x1", r(3, 8, 5, 5), r(16, 8, 1, 1), r(16), (1, 1), (0, 0), (1, 1), 1)
    _conv(t, "conv_resnet", r(4, 16, 12, 12), r(16, 16, 3, 3), None, (1, 1), (1, 1), (1, 1), 1)
    _conv(t, "conv_relu", r(2, 3, 7, 6), r(4, 3, 3, 3), r(4), (1, 1), (1, 1), (1, 1), 1, relu=True)
    _conv(t, "conv_relu_nobias_s2", r(2, 8, 9, 9), r(16, 8, 3, 3), None, (2, 2), (1, 1), (1, 1), 1, relu=True)
    _conv(t, "conv_relu_groups", r(2, 6, 8, 8), r(9, 2, 3, 3), r(9), (1, 1), (1, 1), (1, 1), 3, relu=True)
    # strided 1x1 (ResNet-50's shortcuts): on channels-last, a stride-1 convolution of the gathered pixels
    _conv(t, "conv_1x1_s2", r(2, 16, 9, 7), r(32, 16, 1, 1), r(32), (2, 2), (0, 0), (1, 1), 1)
    _conv(t, "conv_1x1_s2x3_relu", r(2, 5, 8, 10), r(6, 5, 1, 1), None, (2, 3), (0, 0), (1, 1), 1, relu=True)
    # 1x1 with fewer input than output channels and no bias: on channels-last, one matrix product
    # (stride 1, and stride 2 on the gathered pixels)
    _conv(t, "conv_1x1_expand", r(3, 8, 5, 6), r(24, 8, 1, 1), None, (1, 1), (0, 0), (1, 1), 1)
    _conv(t, "conv_1x1_s2_expand", r(2, 16, 9, 7), r(48, 16, 1, 1), None, (2, 2), (0, 0), (1, 1), 1)
    # and with more input than output channels: its input gradient is one matrix product
    _conv(t, "conv_1x1_contract", r(3, 24, 5, 6), r(8, 24, 1, 1), r(8), (1, 1), (0, 0), (1, 1), 1)
    # strided, several taps, 32 channels: on channels-last the weight gradient is a product of windows
    _conv(t, "conv_s2_c32", r(2, 32, 9, 8), r(16, 32, 3, 3), r(16), (2, 2), (1, 1), (1, 1), 1)
    _conv(t, "conv_s2x3_dil_c32", r(1, 32, 11, 10), r(8, 32, 3, 2), None, (2, 3), (1, 0), (2, 1), 1)
    _pool(t, "max_3x3_s2", MAXP, r(2, 3, 11, 9), (3, 3), (2, 2), (0, 0), False)
    # ties (small integers): the first maximum in window order wins, which the gradient shows
    _pool(t, "max_ties", MAXP, torch.randint(0, 3, (2, 3, 8, 9)).float(), (3, 2), (2, 2), (0, 0), False)
    _pool(t, "max_ties_pad", MAXP, torch.randint(0, 3, (2, 3, 8, 9)).float(), (3, 3), (2, 1), (1, 1), False)
    _pool(t, "max_2x2", MAXP, r(2, 3, 8, 8), (2, 2), (2, 2), (0, 0), False)
    _pool(t, "max_3x3_s2_p1", MAXP, r(2, 3, 9, 7), (3, 3), (2, 2), (1, 1), False)
    _pool(t, "max_ceil", MAXP, r(1, 2, 7, 8), (3, 2), (2, 3), (1, 0), True)
    # padded planes with a large interior (ResNet's stem pool, and an asymmetric one with ceil mode)
    _pool(t, "max_stem", MAXP, r(2, 2, 16, 15), (3, 3), (2, 2), (1, 1), False)
    _pool(t, "max_pad2_ceil", MAXP, r(1, 2, 13, 17), (5, 3), (1, 2), (2, 1), True)
    # relu(max_pool2d) (nb_max_pool2d_relu): about half the maxima of shifted data are negative
    _pool(t, "max_relu_3x3_s2", MAXP, r(2, 3, 11, 9) - 1, (3, 3), (2, 2), (0, 0), False, relu=True)
    _pool(t, "max_relu_ties_pad", MAXP, torch.randint(-2, 2, (2, 3, 8, 9)).float(), (3, 3), (2, 1), (1, 1),
          False, relu=True)
    _pool(t, "max_relu_stem_ceil", MAXP, r(2, 2, 16, 15) - 1, (3, 3), (2, 2), (1, 1), True, relu=True)
    _pool(t, "avg_2x2", AVGP, r(2, 3, 8, 8), (2, 2), (2, 2), (0, 0), False)
    _pool(t, "avg_pad_incl", AVGP, r(2, 3, 7, 6), (3, 3), (2, 2), (1, 1), False, True)
    _pool(t, "avg_pad_excl", AVGP, r(2, 3, 7, 6), (3, 3), (2, 2), (1, 1), False, False)
    _pool(t, "avg_ceil", AVGP, r(1, 2, 7, 8), (3, 2), (2, 3), (1, 1), True, True)
    _pool(t, "avg_ceil_excl", AVGP, r(1, 2, 7, 8), (3, 2), (2, 3), (1, 1), True, False)
    _adapt(t, "adapt_1x1", r(2, 3, 5, 7), 1, 1)
    _adapt(t, "adapt_3x2", r(2, 3, 7, 5), 3, 2)
    _adapt(t, "adapt_up", r(1, 2, 3, 4), 5, 6)
    _bn(t, "bn_train_4d", r(4, 3, 5, 6) * 2 + 1, True)
    _bn(t, "bn_eval_4d", r(4, 3, 5, 6), False)
    _bn(t, "bn_train_2d", r(8, 5), True, momentum=0.3, eps=1e-3)
    _bn(t, "bn_eval_3d", r(3, 4, 5), False, eps=1e-3)
    # a plane of 99 (16-value blocks and a remainder) far from zero (the one-pass statistics)
    _bn(t, "bn_train_offset", r(3, 4, 9, 11) * 3 + 50, True)
    _bn(t, "bn_train_noaffine", r(4, 3, 2, 2), True, affine=False)
    # relu(batch_norm), nabla's nb_batch_norm_relu
    _bn(t, "bn_relu_train_4d", r(4, 3, 5, 6) * 2 + 1, True, relu=True)
    _bn(t, "bn_relu_eval_4d", r(4, 3, 5, 6), False, relu=True)
    _bn(t, "bn_relu_train_offset", r(3, 4, 9, 11) * 3 + 50, True, relu=True)
    _bn(t, "bn_relu_train_noaffine", r(4, 3, 2, 2), True, affine=False, relu=True)
    # relu(batch_norm(x) + residual), nabla's nb_batch_norm_add_relu
    _bn(t, "bn_add_relu_train_4d", r(4, 3, 5, 6) * 2 + 1, True, relu=True, residual=r(4, 3, 5, 6))
    _bn(t, "bn_add_relu_eval_4d", r(4, 3, 5, 6), False, relu=True, residual=r(4, 3, 5, 6))
    _bn(t, "bn_add_relu_train_offset", r(3, 4, 9, 11) * 3 + 50, True, relu=True, residual=r(3, 4, 9, 11) - 0.5)
    _bn(t, "bn_add_relu_train_noaffine", r(4, 3, 2, 2), True, affine=False, relu=True, residual=r(4, 3, 2, 2))
    # batch_norm(x) + residual without the ReLU, nabla's nb_batch_norm_add
    _bn(t, "bn_add_train_4d", r(4, 3, 5, 6) * 2 + 1, True, residual=r(4, 3, 5, 6))
    _bn(t, "bn_add_eval_4d", r(4, 3, 5, 6), False, residual=r(4, 3, 5, 6))
    _bn(t, "bn_add_train_noaffine", r(4, 3, 2, 2), True, affine=False, residual=r(4, 3, 2, 2))
    _bn(t, "bn_add_train_c32", r(2, 32, 9, 10) * 2 + 1, True, residual=r(2, 32, 9, 10) - 0.5)
    # C a multiple of 16: nabla's float32 AVX-512 loops on channels-last (the sums in registers
    # for C = 16 and 32, in memory for 48; 126, 105 and 180 rows: no multiple of their 16-row steps)
    _bn(t, "bn_train_c16", r(2, 16, 7, 9) * 2 + 1, True)
    _bn(t, "bn_relu_train_c48_offset", r(3, 48, 5, 7) * 3 + 50, True, relu=True)
    _bn(t, "bn_add_relu_train_c32", r(2, 32, 9, 10) * 2 + 1, True, relu=True, residual=r(2, 32, 9, 10) - 0.5)
    return t
