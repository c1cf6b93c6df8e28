"""Reference values for the layer modules (tests/test_layers.c), in float32 and float64.

<case>/<dt>/sd/<key>: the module's state_dict; in0 input; gout upstream gradient; out output;
grad0 input gradient; grad/<key> parameter gradients (training mode).
BatchNorm cases also have in1 (a second training forward), after/running_mean, after/running_var
(the buffers after both forwards) and eval_out (eval mode on in0 after them).
"""
import torch
import torch.nn as nn

CASES = {
    "conv": (lambda: nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2), (2, 4, 7, 6)),
    "conv_nobias": (lambda: nn.Conv2d(3, 5, 3, padding=1, bias=False), (2, 3, 5, 5)),
    "maxpool": (lambda: nn.MaxPool2d(3, 2, 1), (2, 3, 7, 6)),
    "avgpool": (lambda: nn.AvgPool2d(3, 2, 1), (2, 3, 7, 6)),
    "adaptive": (lambda: nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 7, 5)),
    "bn2d": (lambda: nn.BatchNorm2d(3), (4, 3, 5, 4)),
    "bn1d": (lambda: nn.BatchNorm1d(5), (6, 5)),
    "lrn3": (lambda: nn.LocalResponseNorm(3, alpha=0.1, beta=0.75, k=2.0), (2, 5, 3, 4)),
    "lrn4": (lambda: nn.LocalResponseNorm(4), (2, 6, 3, 3)),
    # nabla's Sequential fuses each Conv2d + ReLU pair: same values, state_dict names and grads
    "seq_conv_relu": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                            nn.Conv2d(4, 5, 3, bias=False), nn.ReLU()), (2, 3, 8, 8)),
}


def build():
    out = {}
    g = torch.Generator().manual_seed(7)
    for name, (make, shape) in CASES.items():
        base = make().double()
        with torch.no_grad():
            for p in base.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5 + (1.0 if p.dim() == 1 and "bn" in name else 0.0))
        x64 = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0 + 0.5
        x64b = torch.randn(shape, generator=g, dtype=torch.float64) * 1.5 - 0.3
        gout64 = torch.randn(base(x64).shape, generator=g, dtype=torch.float64)
        for tag, dt in (("f32", torch.float32), ("f64", torch.float64)):
            m = make().to(dt)
            m.load_state_dict({k: v.to(dt) if v.is_floating_point() else v for k, v in base.state_dict().items()})
            pre = f"{name}/{tag}/"
            for k, v in m.state_dict().items():
                out[pre + "sd/" + k] = v.clone()
            x = x64.to(dt).requires_grad_()
            y = m(x)
            y.backward(gout64.to(dt))
            out[pre + "in0"] = x.detach()
            out[pre + "gout"] = gout64.to(dt)
            out[pre + "out"] = y.detach()
            out[pre + "grad0"] = x.grad
            for k, p in m.named_parameters():
                out[pre + "grad/" + k] = p.grad
            if name.startswith("bn"):
                out[pre + "in1"] = x64b.to(dt)
                with torch.no_grad():
                    m(x64b.to(dt))
                    out[pre + "after/running_mean"] = m.running_mean.clone()
                    out[pre + "after/running_var"] = m.running_var.clone()
                    m.eval()
                    out[pre + "eval_out"] = m(x64.to(dt))
    return out
