"""Reference values for the module system (tests/test_module.c).

mlp/<dt>/sd/<name>: the weights of Sequential(Linear(8, 16), ReLU(), Linear(16, 4)) under torch's
state_dict names; in0 [5, 8] the input, gout [5, 4] the upstream gradient, out the output,
grad0 the input's gradient, grad/<name> each parameter's gradient.
mlp/names: the state_dict keys in torch's order, joined by newlines, as uint8.
mlp/num_parameters: sum(p.numel() for p in model.parameters()), int64.
"""
import torch


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def build():
    out = {}
    g = torch.Generator().manual_seed(3)
    base = mlp()
    with torch.no_grad():
        for p in base.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    x64 = torch.randn(5, 8, generator=g, dtype=torch.float64)
    gout64 = torch.randn(5, 4, generator=g, dtype=torch.float64)
    names = list(base.state_dict().keys())
    out["mlp/names"] = torch.tensor(list("\n".join(names).encode()), dtype=torch.uint8)
    out["mlp/num_parameters"] = torch.tensor(sum(p.numel() for p in base.parameters()), dtype=torch.int64)
    for tag, dt in (("f32", torch.float32), ("f64", torch.float64)):
        model = mlp().to(dt)
        model.load_state_dict({k: v.to(dt) for k, v in base.state_dict().items()})
        x = x64.to(dt).requires_grad_()
        y = model(x)
        y.backward(gout64.to(dt))
        pre = f"mlp/{tag}/"
        for k, v in model.state_dict().items():
            out[pre + "sd/" + k] = v
        for k, p in model.named_parameters():
            out[pre + "grad/" + k] = p.grad
        out[pre + "in0"] = x.detach()
        out[pre + "gout"] = gout64.to(dt)
        out[pre + "out"] = y.detach()
        out[pre + "grad0"] = x.grad
    return out
