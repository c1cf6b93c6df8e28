"""Reference values for tests/test_optim.c: torch.optim updates, lr schedules and clipping.

Optimizers: for each configuration and dtype, two parameters start from stored values and get a
stored gradient at each of STEPS steps (parameter 1 has none at step 2: it must be skipped); the
parameters after every step are stored. `<case>/hp` holds the hyper-parameters in the order the
C test reads them (sgd: lr, momentum, dampening, weight_decay, nesterov; adam/adamw: lr, beta1,
beta2, eps, weight_decay, amsgrad; rmsprop: lr, alpha, eps, weight_decay, momentum, centered).
Schedulers: the lr after construction and after each of 30 steps (`sched_<name>/lrs`).
Clipping: gradients before and after clip_grad_norm_ / clip_grad_value_ and the total norm.
"""
import math
import zlib

import torch

STEPS = 5
SKIP_STEP = 2

OPTIMS = {
    "sgd_plain": ("sgd", [0.1, 0.0, 0.0, 0.0, 0]),
    "sgd_momentum": ("sgd", [0.05, 0.9, 0.0, 0.0, 0]),
    "sgd_nesterov": ("sgd", [0.05, 0.9, 0.0, 0.01, 1]),
    "sgd_dampening": ("sgd", [0.05, 0.8, 0.3, 0.0, 0]),
    "sgd_wd": ("sgd", [0.1, 0.5, 0.0, 0.05, 0]),
    "adam": ("adam", [0.01, 0.9, 0.999, 1e-8, 0.0, 0]),
    "adam_wd": ("adam", [0.01, 0.8, 0.99, 1e-6, 0.1, 0]),
    "adam_amsgrad": ("adam", [0.02, 0.9, 0.999, 1e-8, 0.0, 1]),
    "adamw": ("adamw", [0.01, 0.9, 0.999, 1e-8, 0.01, 0]),
    "adamw_amsgrad": ("adamw", [0.02, 0.85, 0.99, 1e-7, 0.1, 1]),
    "rmsprop_plain": ("rmsprop", [0.01, 0.99, 1e-8, 0.0, 0.0, 0]),
    "rmsprop_centered": ("rmsprop", [0.01, 0.9, 1e-6, 0.0, 0.0, 1]),
    "rmsprop_momentum": ("rmsprop", [0.005, 0.95, 1e-8, 0.02, 0.9, 0]),
    "rmsprop_all": ("rmsprop", [0.005, 0.9, 1e-8, 0.01, 0.5, 1]),
}

SHAPES = [(3, 4), (5,)]


def make_optim(kind, hp, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=hp[0], momentum=hp[1], dampening=hp[2], weight_decay=hp[3],
                               nesterov=bool(hp[4]), foreach=False)
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(params, lr=hp[0], betas=(hp[1], hp[2]), eps=hp[3], weight_decay=hp[4],
                   amsgrad=bool(hp[5]), foreach=False)
    return torch.optim.RMSprop(params, lr=hp[0], alpha=hp[1], eps=hp[2], weight_decay=hp[3],
                               momentum=hp[4], centered=bool(hp[5]), foreach=False)


def optim_cases(t):
    for name, (kind, hp) in OPTIMS.items():
        for dt, dn in ((torch.float32, "f32"), (torch.float64, "f64")):
            case = f"{name}/{dn}"
            g = torch.Generator().manual_seed(zlib.crc32(name.encode()) % 1000 + (dn == "f64"))
            init = [torch.randn(s, generator=g, dtype=torch.float64).to(dt) for s in SHAPES]
            params = [x.clone().requires_grad_(True) for x in init]
            opt = make_optim(kind, hp, params)
            t[f"{case}/hp"] = torch.tensor(hp, dtype=torch.float64)
            for i, x in enumerate(init):
                t[f"{case}/p{i}"] = x
            for s in range(STEPS):
                for i, p in enumerate(params):
                    if i == 1 and s == SKIP_STEP:
                        p.grad = None
                        continue
                    gr = torch.randn(p.shape, generator=g, dtype=torch.float64).to(dt)
                    t[f"{case}/g{s}_{i}"] = gr
                    p.grad = gr.clone()
                opt.step()
                for i, p in enumerate(params):
                    t[f"{case}/out{s}_{i}"] = p.detach().clone()


def sched_cases(t):
    def sgd():
        return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    S = torch.optim.lr_scheduler
    makers = {
        "step": lambda o: S.StepLR(o, step_size=7, gamma=0.5),
        "multistep": lambda o: S.MultiStepLR(o, milestones=[5, 12, 12, 20], gamma=0.3),
        "cosine": lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.01),
        "linear": lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=8),
        "onecycle_cos": lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=31, pct_start=0.3,
                                               anneal_strategy="cos", cycle_momentum=False,
                                               div_factor=25.0, final_div_factor=1e4),
        "onecycle_linear": lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=40, pct_start=0.25,
                                                  anneal_strategy="linear", cycle_momentum=False,
                                                  div_factor=10.0, final_div_factor=100.0),
    }
    for name, mk in makers.items():
        o = sgd()
        s = mk(o)
        lrs = [s.get_last_lr()[0]]
        for _ in range(30):
            o.step()
            s.step()
            lrs.append(s.get_last_lr()[0])
        t[f"sched_{name}/lrs"] = torch.tensor(lrs, dtype=torch.float64)


def clip_cases(t):
    g = torch.Generator().manual_seed(7)
    for dt, dn in ((torch.float32, "f32"), (torch.float64, "f64")):
        grads = [torch.randn(s, generator=g, dtype=torch.float64).to(dt) for s in SHAPES]
        for nt, nn in ((2.0, "l2"), (1.0, "l1"), (3.0, "l3"), (math.inf, "inf")):
            for mx, mn in ((1.0, "clip"), (100.0, "noclip")):
                case = f"clipnorm_{nn}_{mn}/{dn}"
                params = [torch.zeros(s, dtype=dt, requires_grad=True) for s in SHAPES]
                for p, gr in zip(params, grads):
                    p.grad = gr.clone()
                total = torch.nn.utils.clip_grad_norm_(params, mx, norm_type=nt)
                t[f"{case}/hp"] = torch.tensor([mx, nt], dtype=torch.float64)
                t[f"{case}/total"] = total.detach().to(torch.float64).reshape(())
                for i, (p, gr) in enumerate(zip(params, grads)):
                    t[f"{case}/g{i}"] = gr
                    t[f"{case}/out{i}"] = p.grad.clone()
        case = f"clipvalue/{dn}"
        params = [torch.zeros(s, dtype=dt, requires_grad=True) for s in SHAPES]
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        torch.nn.utils.clip_grad_value_(params, 0.5)
        for i, (p, gr) in enumerate(zip(params, grads)):
            t[f"{case}/g{i}"] = gr
            t[f"{case}/out{i}"] = p.grad.clone()


def build():
    t = {}
    optim_cases(t)
    sched_cases(t)
    clip_cases(t)
    return t
