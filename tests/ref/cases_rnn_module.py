"""Reference values for tests/test_rnn_module.c: torch.nn.LSTM as a module and the LSTM language
model of bench/dlbench/torch_lm.py (the same definition the benchmark runs).

Cases "<name>/<sfx>", sfx f32 or f64 (torch 1.13). Keys:
  lstm_<variant>: config int64 [5] (input, hidden, layers, batch_first, bias); names (the
    state_dict keys, newline-joined, uint8); sd:<key> the weights; x, h0 and c0 (absent: zeros);
    out, h_n, c_n; gout, ghn, gcn upstream gradients; grad_x, grad_h0, grad_c0, grad_<key>.
  lm: config int64 [6] (vocab, embed, hidden, layers, B, T); names; sd:<key>; num_parameters;
    tokens1, tokens2 [B, T] and targets1, targets2 (two consecutive mini-batches);
    logits1, loss1 (mean cross entropy over B*T), grad1_<key> from zero state;
    logits2, loss2, grad2_<key>: tokens2 from call 1's detached final state (grads zeroed first);
    logits2_zero: tokens2 from zero state; tokens3 [B-1, T], logits3: from zero state.
  dlbench (f32 only): num_parameters and names of LSTMLM(10000, 256, 256, 2).
"""
import importlib.util
import os

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f64": torch.float64}

# (variant, T, B, input size, hidden, layers, batch_first, bias, with states)
LSTM_VARIANTS = [
    ("l2_bf_states", 4, 3, 5, 6, 2, True, True, True),
    ("l2_nostates", 5, 3, 4, 6, 2, False, True, False),
    ("l1_nobias_bf_states", 3, 2, 3, 4, 1, True, False, True),
]

LM = (50, 8, 12, 2, 3, 5)  # vocab, embed, hidden, layers, B, T


def _torch_lm():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "bench", "dlbench", "torch_lm.py")
    spec = importlib.util.spec_from_file_location("torch_lm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _names(module):
    return torch.tensor(list("\n".join(module.state_dict().keys()).encode()), dtype=torch.uint8)


def _lstm_cases(t):
    for seed, (name, T, B, I, H, L, bf, bias, states) in enumerate(LSTM_VARIANTS):
        for sfx, dt in DTYPES.items():
            torch.manual_seed(300 + seed)
            lstm = torch.nn.LSTM(I, H, num_layers=L, bias=bias, batch_first=bf).to(dt)
            case = f"lstm_{name}/{sfx}"
            x = torch.randn((B, T, I) if bf else (T, B, I), dtype=dt, requires_grad=True)
            h0 = c0 = None
            if states:
                h0 = torch.randn(L, B, H, dtype=dt, requires_grad=True)
                c0 = torch.randn(L, B, H, dtype=dt, requires_grad=True)
            out, (hn, cn) = lstm(x, (h0, c0)) if states else lstm(x)
            gout, ghn, gcn = (torch.randn(v.shape, dtype=dt) for v in (out, hn, cn))
            torch.autograd.backward([out, hn, cn], [gout, ghn, gcn])
            t[f"{case}/config"] = torch.tensor([I, H, L, int(bf), int(bias)], dtype=torch.int64)
            t[f"{case}/names"] = _names(lstm)
            for pname, p in lstm.named_parameters():
                t[f"{case}/sd:{pname}"] = p.detach().clone()
                t[f"{case}/grad_{pname}"] = p.grad.clone()
            t[f"{case}/x"] = x.detach().clone()
            t[f"{case}/grad_x"] = x.grad.clone()
            if states:
                for k, v in (("h0", h0), ("c0", c0)):
                    t[f"{case}/{k}"] = v.detach().clone()
                    t[f"{case}/grad_{k}"] = v.grad.clone()
            for k, v in (("out", out), ("h_n", hn), ("c_n", cn), ("gout", gout), ("ghn", ghn), ("gcn", gcn)):
                t[f"{case}/{k}"] = v.detach().clone()


def _loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _lm_cases(t, torch_lm):
    V, E, H, L, B, T = LM
    for sfx, dt in DTYPES.items():
        torch.manual_seed(400)
        model = torch_lm.LSTMLM(V, E, H, L).to(dt)
        case = f"lm/{sfx}"
        t[f"{case}/config"] = torch.tensor(list(LM), dtype=torch.int64)
        t[f"{case}/names"] = _names(model)
        t[f"{case}/num_parameters"] = torch.tensor(sum(p.numel() for p in model.parameters()))
        for k, v in model.state_dict().items():
            t[f"{case}/sd:{k}"] = v.clone()
        tok = [torch.randint(0, V, (B, T)) for _ in range(2)]
        tgt = [torch.randint(0, V, (B, T)) for _ in range(2)]
        state = None
        for i in range(2):
            model.zero_grad()
            logits, state = model(tok[i], state)
            loss = _loss(logits, tgt[i])
            loss.backward()
            state = torch_lm.detach_state(state)
            t[f"{case}/tokens{i + 1}"] = tok[i]
            t[f"{case}/targets{i + 1}"] = tgt[i]
            t[f"{case}/logits{i + 1}"] = logits.detach().clone()
            t[f"{case}/loss{i + 1}"] = loss.detach().clone()
            for k, p in model.named_parameters():
                t[f"{case}/grad{i + 1}_{k}"] = p.grad.clone()
        with torch.no_grad():
            t[f"{case}/logits2_zero"] = model(tok[1])[0].clone()
            tok3 = torch.randint(0, V, (B - 1, T))
            t[f"{case}/tokens3"] = tok3
            t[f"{case}/logits3"] = model(tok3)[0].clone()


def build():
    t = {}
    torch_lm = _torch_lm()
    _lstm_cases(t)
    _lm_cases(t, torch_lm)
    big = torch_lm.LSTMLM(10000, 256, 256, 2)
    t["dlbench/f32/num_parameters"] = torch.tensor(sum(p.numel() for p in big.parameters()))
    t["dlbench/f32/names"] = _names(big)
    return t
