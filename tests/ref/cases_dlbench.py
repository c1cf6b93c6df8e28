"""Reference values for the DLBench networks (tests/test_dlbench_models.c), from their PyTorch twins
in bench/dlbench/torch_models.py (imported by path: one definition serves the benchmark and the test).

spec/<model>/num_parameters: int64, the twin's count at the spec's sizes (checked here against
DLBENCH.md's counts too).
Per case <case>:
  names: state_dict keys in torch's order, newline-joined, uint8; shape/<key>: int64 shape.
  The weights, one of two ways:
    sd/<key>: the tensor itself (small nets: default init, BatchNorm statistics and affine
      parameters randomised so that eval mode is not the identity);
    recipe/<key>: float64 [offset, scale, freq, phase]; the weight, seen as [rows, n] (rows =
      shape[0], or 1 for vectors), is float32(sin(((o + 1) (i + 1)) * freq + phase) * scale + offset)
      at [o, i], computed in float64 (big nets, whose weights would not fit a reference file; a
      chirp, not sin of the flat index, whose matrices would have rank 2); integer buffers are
      always stored in sd/.
  num_parameters: int64 at the case's sizes; in0: input [N, C, H, W]; out: eval-mode output.
  target: int64 [N]; loss: training-mode cross entropy (mean); gradnames + grad/<key>: the
  gradients of a few parameters after loss.backward(); postnames + post/<key> (nets with
  BatchNorm): BatchNorm buffers after the training forward.
"""
import importlib.util
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def _twins():
    path = os.path.join(HERE, "..", "..", "bench", "dlbench", "torch_models.py")
    spec = importlib.util.spec_from_file_location("nabla_dlbench_torch_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# case, model, (C, H, W), classes, batch, weights ("sd" stored / "recipe"), grads, post
CASES = [
    ("fcn_s", "fcn-s", (1, 1, 64), 32, 4, "recipe", ["1.weight", "1.bias", "5.bias", "7.weight"], []),
    ("fcn_r", "fcn-r", (1, 28, 28), 10, 4, "recipe", ["1.bias", "3.bias", "5.bias", "7.weight"], []),
    ("alexnet_s", "alexnet-s", (3, 95, 95), 10, 2, "recipe",
     ["features.0.weight", "features.3.bias", "features.10.bias", "classifier.1.bias", "classifier.5.weight"], []),
    ("alexnet_r", "alexnet-r", (3, 32, 32), 10, 4, "sd",
     ["features.0.weight", "features.0.bias", "features.6.weight", "classifier.1.weight", "classifier.1.bias"], []),
    ("alexnet_r_28", "alexnet-r", (1, 28, 28), 7, 3, "sd", ["features.0.weight", "classifier.1.weight"], []),
    ("resnet_50", "resnet-50", (3, 64, 64), 10, 4, "recipe",
     ["fc.weight", "fc.bias"],  # deeper gradients: float32 itself is off by ~5 % there (see below)
     ["bn1.running_mean", "layer4.2.bn3.running_var"]),
    ("resnet_56", "resnet-56", (3, 32, 32), 10, 2, "sd",
     ["conv1.weight", "layer2.0.conv1.weight", "layer3.8.bn2.weight", "fc.weight", "fc.bias"],  # conv biases: 0 before BN
     ["bn1.running_mean", "layer3.8.bn2.running_var"]),
]


# ResNet-50 in training mode at 64x64 divides by batch statistics of 16 values per channel in
# layer4: torch's own float32 gradients of conv1.weight / bn1.weight differ from float64 by 3-4 % of
# their peak (the loss by 1e-5), so only the head's gradients are compared there.


def _joined(names):
    return torch.tensor(list("\n".join(names).encode()), dtype=torch.uint8)


def _recipes(model):
    """key -> [offset, scale, freq, phase] for every floating state_dict entry."""
    bn = {n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    out = {}
    for i, (key, v) in enumerate(model.state_dict().items()):
        if not v.is_floating_point():
            continue
        owner, leaf = key.rsplit(".", 1) if "." in key else ("", key)
        freq = 0.01 + 0.09 * ((i * 0.6180339887) % 1.0)
        phase = 0.37 * i
        if owner in bn:
            offset, scale = {"weight": (1.0, 0.25), "bias": (0.0, 0.1), "running_mean": (0.0, 0.1),
                             "running_var": (1.0, 0.4)}[leaf]
        elif v.dim() >= 2:
            offset, scale = 0.0, 1.0 / math.sqrt(v[0].numel())
        else:
            offset, scale = 0.0, 0.05
        out[key] = [offset, scale, freq, phase]
    return out


def _apply_recipe(v, r):
    rows = v.shape[0] if v.dim() >= 2 else 1
    o = torch.arange(1, rows + 1, dtype=torch.float64).reshape(rows, 1)
    i = torch.arange(1, v.numel() // rows + 1, dtype=torch.float64).reshape(1, -1)
    return (((o * i) * r[2] + r[3]).sin() * r[1] + r[0]).float().reshape(v.shape)


def _randomise_bn(model, g):
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
            mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
            mod.bias.copy_(torch.randn(mod.bias.shape, generator=g) * 0.1)
            mod.num_batches_tracked.fill_(3)


def _case(tm, out, case, g):
    name, model_name, (c, h, w), k, batch, weights, grads, post = case
    model = tm.build(model_name, c, h, w, k)
    sd = model.state_dict()
    out[f"{name}/names"] = _joined(sd.keys())
    out[f"{name}/num_parameters"] = torch.tensor(sum(p.numel() for p in model.parameters()), dtype=torch.int64)
    with torch.no_grad():
        if weights == "sd":
            _randomise_bn(model, g)
        else:
            for key, r in _recipes(model).items():
                sd[key].copy_(_apply_recipe(sd[key], r))
                out[f"{name}/recipe/{key}"] = torch.tensor(r, dtype=torch.float64)
    for key, v in model.state_dict().items():
        out[f"{name}/shape/{key}"] = torch.tensor(list(v.shape), dtype=torch.int64)
        if weights == "sd" or not v.is_floating_point():
            out[f"{name}/sd/{key}"] = v.clone()
    x = torch.randn((batch, c, h, w), generator=g)
    target = torch.randint(0, k, (batch,), generator=g)
    out[f"{name}/in0"] = x
    out[f"{name}/target"] = target
    model.eval()
    with torch.no_grad():
        out[f"{name}/out"] = model(x)
    model.train()
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    out[f"{name}/loss"] = loss.detach()
    params = dict(model.named_parameters())
    out[f"{name}/gradnames"] = _joined(grads)
    for key in grads:
        out[f"{name}/grad/{key}"] = params[key].grad.clone()
    buffers = dict(model.named_buffers())
    if post:
        out[f"{name}/postnames"] = _joined(post)
    for key in post:
        out[f"{name}/post/{key}"] = buffers[key].clone()


def build():
    tm = _twins()
    out = {}
    for model_name, ((c, h, w), k) in tm.SPEC_SHAPES.items():
        n = sum(p.numel() for p in tm.build(model_name, c, h, w, k).parameters())
        if n != tm.PARAMS[model_name]:
            raise AssertionError(f"{model_name}: torch twin has {n} parameters, DLBENCH.md {tm.PARAMS[model_name]}")
        out[f"spec/{model_name}/num_parameters"] = torch.tensor(n, dtype=torch.int64)
    g = torch.Generator().manual_seed(2016)
    torch.manual_seed(1608)
    for case in CASES:
        _case(tm, out, case, g)
    return out
