"""The DLBench networks in PyTorch: the twins of nabla's model zoo (src/nn/models_dlbench.c).

build(name, in_channels, height, width, num_classes) -> torch.nn.Module for
  fcn-s, alexnet-s, resnet-50, fcn-r, alexnet-r, resnet-56  (../../shared/bench/DLBENCH.md 1-6,
      the Torch definitions, with the state_dict names and shapes nabla uses),
  cnn, resnet20   (the zoo's own models, from tests/ref/cases_models.py),
  lstm            (torch_lm.LSTMLM(num_classes, 256, 256, 2): vocabulary = num_classes).
PARAMS: the spec's parameter counts at the spec's sizes.

Layers use PyTorch's default initialisation. Runs under torch 1.13 and 2.x.
"""
import functools
import importlib.util
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

PARAMS = {
    "fcn-s": 117_997_696,
    "alexnet-s": 62_378_344,
    "resnet-50": 25_557_032,
    "fcn-r": 14_205_962,
    "alexnet-r": 85_098,
    "resnet-56": 855_050,
    "lstm": 6_180_624,
}

# The spec's input (C, H, W) and classes; lstm: (vocabulary, 0, 0) and 10000.
SPEC_SHAPES = {
    "fcn-s": ((1, 1, 26752), 26752),
    "alexnet-s": ((3, 224, 224), 1000),
    "resnet-50": ((3, 224, 224), 1000),
    "fcn-r": ((1, 28, 28), 10),
    "alexnet-r": ((3, 32, 32), 10),
    "resnet-56": ((3, 32, 32), 10),
}


def Net(features, classifier):
    """features then classifier (the classifier starts with Flatten): the zoo's container."""
    return _zoo().Net(features, classifier)


def _conv_out(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def _check(name, sizes, h, w):
    """sizes: the spatial sizes after each layer; each must be >= 1."""
    if min(sizes) < 1:
        raise ValueError(f"model {name}: input {h}x{w} too small")


def fcn(sizes, chw, k):
    """Fully connected, sigmoid between layers; Sequential(Flatten, Linear, Sigmoid, ..., Linear)."""
    layers = [nn.Flatten()]
    prev = chw
    for n in sizes:
        layers += [nn.Linear(prev, n), nn.Sigmoid()]
        prev = n
    layers.append(nn.Linear(prev, k))
    return nn.Sequential(*layers)


def alexnet_s(c, h, w, k):
    def side(n):
        s = [_conv_out(n, 11, 4, 2)]
        s.append(_conv_out(s[-1], 3, 2, 0))
        s.append(_conv_out(s[-1], 3, 2, 0))
        s.append(_conv_out(s[-1], 3, 2, 0))
        return s
    sh, sw = side(h), side(w)
    _check("alexnet-s", sh + sw, h, w)
    feats = nn.Sequential(
        nn.Conv2d(c, 96, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, 1, 1), nn.ReLU(),
        nn.Conv2d(384, 384, 3, 1, 1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(3, 2))
    cls = nn.Sequential(nn.Flatten(), nn.Linear(256 * sh[-1] * sw[-1], 4096), nn.ReLU(),
                        nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, k))
    return Net(feats, cls)


def alexnet_r(c, h, w, k):
    def side(n):
        s = [_conv_out(n, 3, 2, 0)]
        s.append(_conv_out(s[-1], 3, 2, 0))
        s.append(_conv_out(s[-1], 3, 2, 0))
        return s
    sh, sw = side(h), side(w)
    _check("alexnet-r", sh + sw, h, w)
    feats = nn.Sequential(
        nn.Conv2d(c, 32, 5, 1, 2), nn.MaxPool2d(3, 2), nn.ReLU(),
        nn.Conv2d(32, 32, 5, 1, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(32, 64, 5, 1, 2), nn.ReLU(), nn.AvgPool2d(3, 2))
    cls = nn.Sequential(nn.Flatten(), nn.Linear(64 * sh[-1] * sw[-1], k))
    return Net(feats, cls)


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck: the stride in the 3x3; downsample = 1x1 conv + BN."""

    def __init__(self, cin, n, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, n, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(n)
        self.conv2 = nn.Conv2d(n, n, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(n)
        self.conv3 = nn.Conv2d(n, 4 * n, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * n)
        self.downsample = None
        if stride != 1 or cin != 4 * n:
            self.downsample = nn.Sequential(nn.Conv2d(cin, 4 * n, 1, stride, bias=False), nn.BatchNorm2d(4 * n))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for s, blocks in enumerate((3, 4, 6, 3)):
            n = 64 << s
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(cin, n, 2 if b == 0 and s > 0 else 1))
                cin = 4 * n
            setattr(self, f"layer{s + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(2048, k)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


class BlockA(nn.Module):
    """DLBench's Torch basic block (gcr/torch-residual-networks): convs with bias, affine BN,
    option-A shortcut (stride-2 subsample, new channels zero), no ReLU after the add."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride, self.extra = stride, cout - cin

    def forward(self, x):
        h = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        s = x[:, :, ::self.stride, ::self.stride] if self.stride != 1 else x
        if self.extra:
            s = F.pad(s, (0, 0, 0, 0, 0, self.extra))
        return h + s


class ResNet56(nn.Module):
    def __init__(self, c, k, n=9):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 16, 3, 1, 1)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for s in range(3):
            blocks = []
            for b in range(n):
                blocks.append(BlockA(cin, 16 << s, 2 if b == 0 and s > 0 else 1))
                cin = 16 << s
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(64, k)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


@functools.lru_cache(maxsize=None)
def _zoo():
    path = os.path.join(HERE, "..", "..", "tests", "ref", "cases_models.py")
    spec = importlib.util.spec_from_file_location("nabla_cases_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(name, in_channels, height, width, num_classes):
    c, h, w, k = in_channels, height, width, num_classes
    if name == "fcn-s":
        return fcn((2048, 2048, 2048), c * h * w, k)
    if name == "fcn-r":
        return fcn((2048, 4096, 1024), c * h * w, k)
    if name == "alexnet-s":
        return alexnet_s(c, h, w, k)
    if name == "alexnet-r":
        return alexnet_r(c, h, w, k)
    if name == "resnet-50":
        return ResNet50(c, k)
    if name == "resnet-56":
        return ResNet56(c, k)
    if name == "cnn":
        return _zoo().cnn(c, h, w, k)
    if name == "resnet20":
        return _zoo().ResNet(3, c, k)
    if name == "lstm":
        if HERE not in sys.path:
            sys.path.insert(0, HERE)
        from torch_lm import LSTMLM
        return LSTMLM(k, 256, 256, 2)
    known = ", ".join(list(PARAMS) + ["cnn", "resnet20"])
    raise ValueError(f"torch_models.build: unknown model '{name}' (known: {known})")


if __name__ == "__main__":
    for name, ((c, h, w), k) in SPEC_SHAPES.items():
        n = sum(p.numel() for p in build(name, c, h, w, k).parameters())
        print(f"{name:10s} {n:>12,d} {'ok' if n == PARAMS[name] else 'MISMATCH spec ' + str(PARAMS[name])}")
