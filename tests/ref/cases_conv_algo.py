"""Reference values for tests/test_conv_algo.c: float32 convolutions that oneDNN may run on
Winograd's F(4x4, 3x3) (3x3, stride 1, channels in and out multiples of 16), and one it may not
(stride 2); 5x5 ones ("k5_") that nabla's own Winograd F(2x2, 5x5) may run (stride 1, padding 2,
channels multiples of 16, channels-last), and one it may not (padding 1); and ones with 2 to 4
input channels ("few_") whose weight gradient nabla's own kernel takes on channels-last inputs
(src/cpu/ops/stem.c: each vector count of output channels it blocks by, 4, 2 and 1, tap blocks of
several sizes, strides, padding beyond the kernel's reach, rows that are not square). One
channel would not do: such a tensor is both contiguous and channels-last, and nabla takes it as
contiguous. All computed by PyTorch in float64 from the same float32 inputs, so that the
reference is free of float32 rounding and the test can bound each algorithm's own error.

Each case <name> holds:
  params  int64 [stride, pad, relu] (relu 1: relu(conv2d), nabla's fused conv2d + ReLU)
  in0, in1(, in2)  x, weight(, bias): float32
  gout    the upstream gradient (float32)
  out, grad0, grad1(, grad2)  float64: conv2d(x, w, b) and the inputs' gradients
"""
import math

import torch
import torch.nn.functional as F


def _case(t, name, n, c, oc, h, w, stride, pad, bias, relu=False, k=3):
    x = torch.randn(n, c, h, w)
    wt = torch.randn(oc, c, k, k) * math.sqrt(2.0 / (c * k * k))
    b = torch.randn(oc) if bias else None
    ins = [x, wt] + ([b] if bias else [])
    leaves = [v.double().requires_grad_(True) for v in ins]
    out = F.conv2d(leaves[0], leaves[1], leaves[2] if bias else None, stride, pad)
    if relu:
        out = F.relu(out)
    gout = torch.randn(out.shape)
    out.backward(gout.double())
    t[f"{name}/params"] = torch.tensor([stride, pad, int(relu)], dtype=torch.int64)
    for i, v in enumerate(ins):
        t[f"{name}/in{i}"] = v
        t[f"{name}/grad{i}"] = leaves[i].grad
    t[f"{name}/gout"] = gout
    t[f"{name}/out"] = out.detach()


def build():
    t = {}
    _case(t, "c32_oc48_pad1_bias", 2, 32, 48, 12, 12, 1, 1, True)
    _case(t, "c16_oc16_pad0_odd", 3, 16, 16, 9, 11, 1, 0, False)
    _case(t, "c64_oc32_pad1_relu", 2, 64, 32, 7, 7, 1, 1, True, relu=True)
    _case(t, "c48_oc64_pad1_big", 4, 48, 64, 20, 20, 1, 1, True)
    _case(t, "c16_oc16_pad1_many", 4, 16, 16, 16, 16, 1, 1, True)
    _case(t, "c32_oc32_stride2", 2, 32, 32, 10, 10, 2, 1, True)
    # 5x5: auto takes Winograd from 32 channels in and out and 256 tiles of 2x2 over the batch
    _case(t, "k5_c32_oc32_bias", 16, 32, 32, 15, 15, 1, 2, True, k=5)
    _case(t, "k5_c32_oc32_few", 3, 32, 32, 15, 15, 1, 2, True, k=5)
    _case(t, "k5_c16_oc48_relu_odd", 2, 16, 48, 7, 9, 1, 2, True, relu=True, k=5)
    _case(t, "k5_c48_oc32_tiny", 1, 48, 32, 5, 6, 1, 2, False, k=5)
    _case(t, "k5_c32_oc32_pad1", 2, 32, 32, 8, 8, 1, 1, True, k=5)
    # few input channels: AlexNet-R's, ResNet-50's and AlexNet-S's first layers, scaled down
    _case(t, "few_c3_oc32_k5", 3, 3, 32, 12, 12, 1, 2, True, k=5)
    _case(t, "few_c3_oc64_k7_s2_relu", 2, 3, 64, 17, 15, 2, 3, True, relu=True, k=7)
    _case(t, "few_c3_oc96_k11_s4", 2, 3, 96, 35, 33, 4, 2, False, k=11)
    _case(t, "few_c3_oc16_k3_pad0", 4, 3, 16, 9, 7, 1, 0, True, k=3)
    _case(t, "few_c2_oc48_k3_pad2", 2, 2, 48, 6, 5, 1, 2, True, k=3)
    _case(t, "few_c4_oc16_k1_s2", 3, 4, 16, 5, 6, 2, 0, True, k=1)  # stride 1 would be a product
    return t
