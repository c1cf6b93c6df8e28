"""Reference values for the model zoo (tests/test_models.c): the PyTorch definitions that
src/nn/models.c mirrors, name for name.

<model>/names: state_dict keys in torch's order, newline-joined, uint8.
<model>/num_parameters: int64. <model>/sd/<key>: the weights (default init, BatchNorm statistics
and affine parameters randomised so that eval mode is not the identity). <model>/in0: input
[2, C, H, W]; <model>/out: the output in eval mode, float32.
<model>/train/...: one training-mode step in float64 for the models in TRAIN (cnn's dropout draws
cannot be matched; resnet56 is resnet20's code): sd/<key> the weights before it, in and target
(a batch of 4), loss (cross entropy), grad/<parameter>, buf/<buffer> after the forward (batch
norm's running statistics updated from the batch).
"""
import copy

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, features, classifier):
        super().__init__()
        self.features = features
        self.classifier = classifier

    def forward(self, x):
        return self.classifier(self.features(x))


def mlp(c, h, w, k):
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 256), nn.ReLU(), nn.Linear(256, k))


def lenet5(c, h, w, k):
    oh, ow = (h // 2 - 4) // 2, (w // 2 - 4) // 2
    return Net(nn.Sequential(nn.Conv2d(c, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2)),
               nn.Sequential(nn.Flatten(), nn.Linear(16 * oh * ow, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, k)))


def cnn(c, h, w, k):
    return Net(nn.Sequential(nn.Conv2d(c, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2)),
               nn.Sequential(nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(), nn.Dropout(0.25),
                             nn.Linear(128, k)))


class BasicBlock(nn.Module):
    """He et al.'s basic block; shortcut option B (1x1 conv + BN) when the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(h + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet(nn.Module):
    def __init__(self, n, c, k):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for s in range(3):
            blocks = []
            for b in range(n):
                blocks.append(BasicBlock(cin, 16 << s, 2 if b == 0 and s > 0 else 1))
                cin = 16 << s
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(64, k)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


MODELS = {
    "mlp": (lambda: mlp(1, 28, 28, 10), (1, 28, 28)),
    "lenet5": (lambda: lenet5(1, 28, 28, 10), (1, 28, 28)),
    "lenet5_rgb": (lambda: lenet5(3, 32, 32, 7), (3, 32, 32)),
    "cnn": (lambda: cnn(1, 28, 28, 10), (1, 28, 28)),
    "resnet20": (lambda: ResNet(3, 3, 10), (3, 32, 32)),
    "resnet56": (lambda: ResNet(9, 3, 10), (3, 32, 32)),
}


TRAIN = ("mlp", "lenet5", "lenet5_rgb", "resnet20")


def build():
    out = {}
    g = torch.Generator().manual_seed(11)
    torch.manual_seed(5)
    for name, (make, shape) in MODELS.items():
        model = make()
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, nn.BatchNorm2d):
                    mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                    mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
                    mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=g) * 0.1)
                    mod.num_batches_tracked.fill_(3)
        model.eval()
        sd = model.state_dict()
        out[f"{name}/names"] = torch.tensor(list("\n".join(sd.keys()).encode()), dtype=torch.uint8)
        out[f"{name}/num_parameters"] = torch.tensor(sum(p.numel() for p in model.parameters()), dtype=torch.int64)
        for k, v in sd.items():
            out[f"{name}/sd/{k}"] = v
        x = torch.randn((2,) + shape, generator=g)
        out[f"{name}/in0"] = x
        with torch.no_grad():
            out[f"{name}/out"] = model(x)
        if name in TRAIN:
            m64 = copy.deepcopy(model).double().train()
            for k, v in m64.state_dict().items():
                out[f"{name}/train/sd/{k}"] = v.clone()
            xt = torch.randn((4,) + shape, generator=g, dtype=torch.float64)
            yt = torch.randint(0, out[f"{name}/out"].shape[1], (4,), generator=g)
            loss = nn.functional.cross_entropy(m64(xt), yt)
            loss.backward()
            out[f"{name}/train/in"] = xt
            out[f"{name}/train/target"] = yt
            out[f"{name}/train/loss"] = loss.detach()
            for k, p in m64.named_parameters():
                out[f"{name}/train/grad/{k}"] = p.grad
            for k, b in m64.named_buffers():
                out[f"{name}/train/buf/{k}"] = b.clone()
    return out
