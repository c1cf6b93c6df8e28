"""Reference values for tests/test_channels_last_pool.c: max_pool2d (with its indices), avg_pool2d
and adaptive_avg_pool2d (torch.nn.functional) on channels-last inputs (torch.channels_last), with
channel counts that are not multiples of a vector and one input large enough to be split across
threads by channel blocks; and max pools with channels multiples of 16 ("_v16"), which float32
runs on the AVX-512 kernels (ties, NaN, padding, ceil mode, windows that overlap by more than
half, a size split across threads); and relu(max_pool2d) ("max_relu_", nabla's
nb_max_pool2d_relu) on both kernels, with negative maxima, zeros, ties and NaN.

Each case <name>/<dtype> holds (stored contiguous, NCHW; the test lays them out channels-last):
  op      int64 [1]: 1 max_pool2d, 2 avg_pool2d, 3 adaptive_avg_pool2d
  params  int64: pools [k_h, k_w, stride_h, stride_w, pad_h, pad_w, ceil_mode, count_include_pad,
          relu] (relu 1: relu(max_pool2d));
          adaptive [out_h, out_w]
  in0     the input, out the output, idx max_pool2d's indices (h * W + w in the input plane;
          with relu, -1 where relu's gradient is 0: the maximum <= 0),
  gout    the upstream gradient, grad0 the input's gradient
Every case comes in f32 and f64, computed by PyTorch in that dtype.
"""
import torch
import torch.nn.functional as F

MAXP, AVGP, ADAPT = 1, 2, 3


def _case(t, name, op, params, x, fn):
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        key = f"{name}/{sfx}"
        xi = x.to(dt).contiguous(memory_format=torch.channels_last).requires_grad_(True)
        res = fn(xi)
        out, idx = res if isinstance(res, tuple) else (res, None)
        t[f"{key}/op"] = torch.tensor([op], dtype=torch.int64)
        t[f"{key}/params"] = torch.tensor(params, dtype=torch.int64)
        t[f"{key}/in0"] = xi.detach().clone()
        t[f"{key}/out"] = out.detach()
        if idx is not None:
            t[f"{key}/idx"] = idx
        gout = torch.randn(out.shape, dtype=dt)
        out.backward(gout)
        t[f"{key}/gout"] = gout
        t[f"{key}/grad0"] = xi.grad


def _max(t, name, x, k, s, p, ceil, relu=False):
    def fn(xi):
        out, idx = F.max_pool2d(xi, k, s, p, ceil_mode=ceil, return_indices=True)
        if not relu:
            return out, idx
        return F.relu(out), torch.where(out <= 0, torch.full_like(idx, -1), idx)
    _case(t, name, MAXP, list(k) + list(s) + list(p) + [int(ceil), 1, int(relu)], x, fn)


def _avg(t, name, x, k, s, p, ceil, cip):
    _case(t, name, AVGP, list(k) + list(s) + list(p) + [int(ceil), int(cip)], x,
          lambda xi: F.avg_pool2d(xi, k, s, p, ceil_mode=ceil, count_include_pad=cip))


def _adapt(t, name, x, oh, ow):
    _case(t, name, ADAPT, [oh, ow], x, lambda xi: F.adaptive_avg_pool2d(xi, (oh, ow)))


def build():
    # a seed of its own, and the global generator left as it was: the families generated after
    # this one keep their values
    state = torch.get_rng_state()
    torch.manual_seed(1)
    try:
        return _build()
    finally:
        torch.set_rng_state(state)


def _build():
    t = {}
    r = torch.randn
    ties = lambda *shape: torch.randint(0, 3, shape).float()
    nan = r(1, 20, 6, 6)
    nan[0, 3, 2, 3] = float("nan")  # one NaN: it is its windows' maximum
    _max(t, "max_stem", r(2, 19, 16, 15), (3, 3), (2, 2), (1, 1), False)
    _max(t, "max_alexnet", r(2, 32, 15, 15), (3, 3), (2, 2), (0, 0), False)
    # ties (small integers): the first maximum in window order wins, which the indices show
    _max(t, "max_ties", ties(2, 5, 8, 9), (3, 2), (2, 2), (0, 0), False)
    _max(t, "max_ties_pad", ties(2, 17, 9, 8), (3, 3), (2, 1), (1, 1), False)
    _max(t, "max_ceil", r(1, 33, 7, 8), (3, 2), (2, 3), (1, 0), True)
    _max(t, "max_pad2_ceil", r(2, 6, 13, 17), (5, 3), (1, 2), (2, 1), True)
    _max(t, "max_nan", nan, (3, 3), (2, 2), (1, 1), False)
    _max(t, "max_big", r(1, 40, 50, 50), (3, 3), (2, 2), (1, 1), False)
    nan16 = r(2, 32, 7, 6)
    nan16[1, 17, 3, 2] = float("nan")
    nan16[0, 5, 0, 0] = float("nan")
    _max(t, "max_ties_pad_v16", ties(2, 16, 9, 8), (3, 3), (2, 1), (1, 1), False)
    _max(t, "max_nan_v16", nan16, (3, 3), (2, 2), (1, 1), False)
    _max(t, "max_overlap_ceil_v16", r(1, 48, 13, 11), (5, 3), (1, 2), (2, 1), True)
    _max(t, "max_big_v16", r(3, 32, 33, 33), (3, 3), (2, 2), (0, 0), False)
    signed = lambda *shape: torch.randint(-2, 2, shape).float()
    nanr = r(2, 32, 7, 6) - 1
    nanr[1, 17, 3, 2] = float("nan")
    nanr[0, 5, 0, 0] = -0.0
    _max(t, "max_relu_v16", r(2, 32, 15, 15) - 1, (3, 3), (2, 2), (0, 0), False, relu=True)
    _max(t, "max_relu_small_v16", r(1, 16, 7, 7) - 1, (3, 3), (2, 2), (1, 1), False, relu=True)
    _max(t, "max_relu_small", r(1, 5, 7, 7) - 1, (3, 2), (2, 1), (0, 1), True, relu=True)
    _max(t, "max_relu_ties_pad_v16", signed(2, 64, 9, 8), (3, 3), (2, 1), (1, 1), False, relu=True)
    _max(t, "max_relu_nan_v16", nanr, (3, 3), (2, 2), (1, 1), True, relu=True)
    _max(t, "max_relu_ties", signed(2, 19, 9, 8), (3, 2), (2, 2), (1, 0), False, relu=True)
    _max(t, "max_relu_big", r(1, 40, 50, 50) - 1, (3, 3), (2, 2), (1, 1), False, relu=True)
    _avg(t, "avg_2x2", r(2, 8, 8, 8), (2, 2), (2, 2), (0, 0), False, True)
    _avg(t, "avg_alexnet", r(2, 32, 16, 16), (3, 3), (2, 2), (0, 0), False, True)
    _avg(t, "avg_pad_incl", r(2, 19, 7, 6), (3, 3), (2, 2), (1, 1), False, True)
    _avg(t, "avg_pad_excl", r(2, 19, 7, 6), (3, 3), (2, 2), (1, 1), False, False)
    _avg(t, "avg_ceil", r(1, 35, 7, 8), (3, 2), (2, 3), (1, 1), True, True)
    _avg(t, "avg_ceil_excl", r(1, 35, 7, 8), (3, 2), (2, 3), (1, 1), True, False)
    _avg(t, "avg_wide", r(1, 600, 5, 5), (3, 3), (2, 2), (1, 1), False, False)
    _avg(t, "avg_big", r(1, 40, 50, 50), (3, 3), (2, 2), (1, 1), True, True)
    _adapt(t, "adapt_1x1", r(2, 64, 5, 7), 1, 1)
    _adapt(t, "adapt_3x2", r(2, 19, 7, 5), 3, 2)
    _adapt(t, "adapt_up", r(1, 18, 3, 4), 5, 6)
    _adapt(t, "adapt_wide", r(2, 600, 3, 3), 2, 2)
    # global pools of NCHW float32 on AVX2: an odd group of eight planes, three planes left over
    # and a tail of taps; and fewer taps than a vector
    _adapt(t, "adapt_1x1_odd", r(3, 9, 6, 6), 1, 1)
    _adapt(t, "adapt_1x1_small", r(1, 24, 2, 3), 1, 1)
    # global pools of channels-last float32 on AVX2: two images at a time (an odd one left),
    # channels in blocks of 32 (here 32 and 8), and more channels than that kernel takes
    _adapt(t, "adapt_1x1_cl_blocks", r(3, 40, 5, 6), 1, 1)
    _adapt(t, "adapt_1x1_cl_many", r(2, 264, 3, 3), 1, 1)
    return t
