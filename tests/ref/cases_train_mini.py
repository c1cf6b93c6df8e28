"""Reference values for tests/test_train_mini.c: a whole training run in miniature.

The model is the zoo's "cnn" (tests/ref/cases_models.py, src/nn/models.c) for 1x12x12 images and
10 classes: conv-BN-ReLU-maxpool twice, flatten, linear-ReLU-linear, trained with cross entropy.
Its Dropout(0.25) draws random masks that no two libraries share, so it is replaced by
Dropout(0.0) here and in the C test (no parameters: the state-dict keys are unchanged).

init/<key>: the initial state dict (float32 weights, BN buffers, int64 num_batches_tracked); both
libraries start from these values. data/x: [STEPS, BATCH, 1, 12, 12] float32 and data/y:
[STEPS, BATCH] int64: step s trains on x[s], y[s] (the labels follow class templates, so the loss
falls).
For each run <r> (an optimizer and its hyper-parameters, `<r>/hp` in the order the C test reads
them: sgd: lr, momentum, weight_decay, nesterov; adam/adamw: lr, weight_decay):
<r>/loss: float64 [STEPS], the loss of each step's forward pass (before that step's update);
<r>/final/<key>: the state dict after the STEPS updates (parameters and BN running statistics).
"""
import torch
import torch.nn as nn

STEPS = 20
BATCH = 8
C, H, W, K = 1, 12, 12, 10

RUNS = {
    "sgd": ("sgd", [0.05, 0.9, 0.0, 0]),
    "sgd_nesterov_wd": ("sgd", [0.05, 0.9, 5e-4, 1]),
    "adam": ("adam", [1e-3, 0.0]),
    "adamw": ("adamw", [1e-3, 0.01]),
}


def make_model():
    """The zoo's cnn as tests/ref/cases_models.py defines it, with its dropout off."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_models.py")
    spec = importlib.util.spec_from_file_location("nabla_cases_models_for_mini", path)
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    m = zoo.cnn(C, H, W, K)
    m.classifier[3] = nn.Dropout(0.0)  # classifier: Flatten, Linear, ReLU, Dropout, Linear
    return m


def make_optim(kind, hp, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=hp[0], momentum=hp[1], weight_decay=hp[2], nesterov=bool(hp[3]),
                               foreach=False)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, lr=hp[0], weight_decay=hp[1], foreach=False)


def build():
    out = {}
    g = torch.Generator().manual_seed(2024)
    with torch.random.fork_rng(devices=[]):  # leave the global generator as the next family expects
        torch.manual_seed(3)
        init = {k: v.clone() for k, v in make_model().state_dict().items()}
    for k, v in init.items():
        out[f"init/{k}"] = v
    templates = torch.randn(K, C, H, W, generator=g)
    y = torch.randint(0, K, (STEPS, BATCH), generator=g, dtype=torch.int64)
    x = templates[y] + 0.8 * torch.randn(STEPS, BATCH, C, H, W, generator=g)
    out["data/x"], out["data/y"] = x, y
    for run, (kind, hp) in RUNS.items():
        net = make_model()
        net.load_state_dict(init)
        net.train()
        opt = make_optim(kind, hp, list(net.parameters()))
        losses = []
        for s in range(STEPS):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(net(x[s]), y[s])
            loss.backward()
            opt.step()
            losses.append(loss.item())
        out[f"{run}/hp"] = torch.tensor(hp, dtype=torch.float64)
        out[f"{run}/loss"] = torch.tensor(losses, dtype=torch.float64)
        for k, v in net.state_dict().items():
            out[f"{run}/final/{k}"] = v
    return out
