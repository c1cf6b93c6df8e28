"""Reference strings for tests/test_print.c: str(tensor) as PyTorch prints it.

Each case stores the tensor as <case>/in0 and the expected text as <case>/str (the UTF-8 bytes
as a uint8 tensor). <case>/requires_grad (int64, 1) marks a leaf that requires grad; a case with
<case>/view (int64 shape) prints in0 (as a leaf requiring grad) viewed to that shape, which has
grad_fn=<ViewBackward0>. Floating cases come in float32 (/f32) and float64 (/f64).
"""
import torch


def _bytes(s):
    return torch.tensor(list(s.encode("utf-8")), dtype=torch.uint8)


def _float_cases():
    g = torch.Generator().manual_seed(1234)
    t = {}
    t["small"] = torch.tensor([[1.5, 2.25], [3.0, 4.125]])
    t["integer_valued"] = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    t["negative"] = torch.tensor([-1.5, 0.0, 2.25, -0.0, 1e-3])
    t["zeros"] = torch.zeros(3)
    t["neg_zero_int"] = torch.tensor([-0.0, 2.0, -3.0])
    t["large"] = torch.tensor([1e10, 1.5, -2.0])
    t["small_mag"] = torch.tensor([1e-5, 0.5, 0.25])
    t["ratio_int"] = torch.tensor([1.0, 10000.0, -3.0])
    t["ratio"] = torch.tensor([0.001, 2.5])
    t["big_int"] = torch.tensor([123456789.0, 2.0])
    t["tiny_only"] = torch.tensor([1e-8, 0.0, 3e-9])
    t["nonfinite"] = torch.tensor([float("nan"), float("inf"), float("-inf"), 1.5])
    t["nonfinite_int"] = torch.tensor([float("nan"), 1.0, float("-inf")])
    t["nonfinite_sci"] = torch.tensor([float("nan"), 1e-6, 20.0])
    t["only_nan"] = torch.tensor([float("nan")])
    t["scalar"] = torch.tensor(3.14159265)
    t["scalar_int"] = torch.tensor(-7.0)
    t["scalar_sci"] = torch.tensor(1.25e-7)
    t["cube"] = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) * 0.5 - 3
    t["wrap"] = torch.arange(30, dtype=torch.float64) * 1.5
    t["wrap_2d"] = torch.randn(3, 25, generator=g, dtype=torch.float64)
    t["randn"] = torch.randn(4, 5, generator=g, dtype=torch.float64)
    t["randn_big"] = torch.randn(3, 3, generator=g, dtype=torch.float64) * 1e5
    t["randn_tiny"] = torch.randn(6, generator=g, dtype=torch.float64) * 1e-3
    t["summary_1d"] = torch.arange(2000, dtype=torch.float64) / 7
    t["summary_2d"] = torch.randn(100, 50, generator=g, dtype=torch.float64)
    t["summary_3d"] = torch.randn(20, 10, 12, generator=g, dtype=torch.float64) * 100
    t["summary_edge"] = torch.randn(1001, generator=g, dtype=torch.float64)
    t["dims8"] = torch.arange(256, dtype=torch.float64).reshape(2, 2, 2, 2, 2, 2, 2, 2)
    t["one_row_many"] = torch.randn(1, 1200, generator=g, dtype=torch.float64)
    t["empty"] = torch.zeros(0)
    t["empty_2d"] = torch.zeros(0, 3)
    t["empty_3d"] = torch.zeros(2, 0, 4)
    return t


def build():
    out = {}
    for name, v in _float_cases().items():
        for tag, dt in (("f32", torch.float32), ("f64", torch.float64)):
            x = v.to(dt).clone()
            out[f"{name}/{tag}/in0"] = x
            out[f"{name}/{tag}/str"] = _bytes(str(x))
    others = {
        "int64": torch.tensor([[1, -20], [300, 4]]),
        "int64_scalar": torch.tensor(-42),
        "int64_summary": torch.arange(1001) * 1000 - 5,
        "int64_extremes": torch.tensor([-2**63, 2**63 - 1]),
        "int32": torch.tensor([[7, -8, 9]], dtype=torch.int32),
        "uint8": torch.arange(0, 256, 15, dtype=torch.uint8),
        "bool": torch.tensor([[True, False], [False, False]]),
        "bool_true": torch.tensor([True, True]),
        "bool_scalar": torch.tensor(False),
        "empty_int64": torch.zeros(0, dtype=torch.int64),
        # half precision prints through float32, with every special value
        "float16": torch.tensor([0.1, -2.5, 65504.0, 2.0**-24, 2.0**-14, float("inf"), float("nan")],
                                dtype=torch.float16),
        "float16_fixed": torch.tensor([[0.1, -2.5], [3.0, 0.0]], dtype=torch.float16),
        "bfloat16": torch.tensor([0.1, -2.5, 1e30, float("-inf")], dtype=torch.bfloat16),
        # the line is exactly 80 columns with its suffix: it stays on the line
        "suffix_at_80_int32": torch.arange(13, dtype=torch.int32),
        "suffix_at_80_f64": torch.arange(5, dtype=torch.float64) * 100.25,
        "suffix_at_82_int32": torch.arange(14, dtype=torch.int32),
        "empty_bool_2d": torch.zeros(0, 2, dtype=torch.bool),
    }
    for name, x in others.items():
        out[f"{name}/in0"] = x
        out[f"{name}/str"] = _bytes(str(x))
    # autograd suffixes
    g = torch.Generator().manual_seed(7)
    for tag, dt in (("f32", torch.float32), ("f64", torch.float64)):
        x = torch.randn(2, 3, generator=g, dtype=torch.float64).to(dt)
        leaf = x.clone().requires_grad_(True)
        out[f"leaf/{tag}/in0"] = x
        out[f"leaf/{tag}/requires_grad"] = torch.tensor(1)
        out[f"leaf/{tag}/str"] = _bytes(str(leaf))
        out[f"view/{tag}/in0"] = x.clone()
        out[f"view/{tag}/view"] = torch.tensor([3, 2])
        out[f"view/{tag}/str"] = _bytes(str(leaf.view(3, 2)))
        # a long last line: the suffixes go on new lines
        y = torch.arange(12, dtype=dt) * 1.25
        out[f"leaf_wrap/{tag}/in0"] = y
        out[f"leaf_wrap/{tag}/requires_grad"] = torch.tensor(1)
        out[f"leaf_wrap/{tag}/str"] = _bytes(str(y.clone().requires_grad_(True)))
        e = torch.zeros(0, 2, dtype=dt)
        out[f"leaf_empty/{tag}/in0"] = e
        out[f"leaf_empty/{tag}/requires_grad"] = torch.tensor(1)
        out[f"leaf_empty/{tag}/str"] = _bytes(str(e.clone().requires_grad_(True)))
    return out
