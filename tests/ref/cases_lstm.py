"""Reference values for tests/test_lstm.c: torch.nn.LSTM (float32 and float64 cases).

Case names are "<variant>/<suffix>", <suffix> f32 or f64. Keys:
  config       int64 [5]: input size, hidden size, num_layers, batch_first, bias
  <torch name> the weights under torch's names (weight_ih_l0, weight_hh_l0, bias_ih_l0, ...)
  x            the input; h0, c0 the initial states (absent: zeros)
  out, h_n, c_n  torch's outputs
  gout, ghn, gcn the upstream gradients of out, h_n and c_n
  grad_x, grad_h0, grad_c0, grad_<torch name>  the gradients
"""
import torch

DTYPES = {"f32": torch.float32, "f64": torch.float64}

# (variant, T, B, input size, hidden, layers, batch_first, bias, with states)
VARIANTS = [
    ("l1", 5, 3, 4, 6, 1, False, True, False),
    ("l1_states", 5, 3, 4, 6, 1, False, True, True),
    ("l2_states", 4, 2, 5, 3, 2, False, True, True),
    ("l2_bf", 6, 3, 4, 5, 2, True, True, False),
    ("l2_bf_nobias_states", 3, 2, 3, 4, 2, True, False, True),
    ("l1_nobias", 7, 2, 3, 3, 1, False, False, False),
    ("l2_long", 24, 4, 8, 16, 2, False, True, True),
    ("l2_h37", 3, 5, 7, 37, 2, False, True, True),  # hidden size: two full vectors and a tail
]


def build():
    t = {}
    for seed, (name, T, B, I, H, L, bf, bias, states) in enumerate(VARIANTS):
        for sfx, dt in DTYPES.items():
            torch.manual_seed(100 + seed)
            lstm = torch.nn.LSTM(I, H, num_layers=L, bias=bias, batch_first=bf).to(dt)
            case = f"{name}/{sfx}"
            xs = (B, T, I) if bf else (T, B, I)
            x = torch.randn(xs, dtype=dt, requires_grad=True)
            args = [x]
            h0 = c0 = None
            if states:
                h0 = torch.randn(L, B, H, dtype=dt, requires_grad=True)
                c0 = torch.randn(L, B, H, dtype=dt, requires_grad=True)
                args.append((h0, c0))
            out, (hn, cn) = lstm(*args)
            gout, ghn, gcn = (torch.randn(v.shape, dtype=dt) for v in (out, hn, cn))
            torch.autograd.backward([out, hn, cn], [gout, ghn, gcn])
            t[f"{case}/config"] = torch.tensor([I, H, L, int(bf), int(bias)], dtype=torch.int64)
            for pname, p in lstm.named_parameters():
                t[f"{case}/{pname}"] = p.detach().clone()
                t[f"{case}/grad_{pname}"] = p.grad.clone()
            t[f"{case}/x"] = x.detach().clone()
            t[f"{case}/grad_x"] = x.grad.clone()
            if states:
                for k, v in (("h0", h0), ("c0", c0)):
                    t[f"{case}/{k}"] = v.detach().clone()
                    t[f"{case}/grad_{k}"] = v.grad.clone()
            for k, v in (("out", out), ("h_n", hn), ("c_n", cn), ("gout", gout), ("ghn", ghn), ("gcn", gcn)):
                t[f"{case}/{k}"] = v.detach().clone()
    return t
