"""Reference file for tests/test_safetensors.c, written by the safetensors library itself.

One tensor per dtype nabla reads, and the edge cases of the format: a 0-dim tensor, empty
tensors, 8 dims, extreme integers, float16 specials, and a name that needs JSON escapes. Every
value follows a formula that the C test recomputes on its own (see case_values() there), so the
test checks nabla's reader against PyTorch's writer, never against nabla's own output. The C
interop test also imports this module to check the files nabla writes.
"""
import torch

# Needs escaping in the JSON header: a quote, a backslash, a tab and a control character; and
# non-ASCII text, which serde_json writes as raw UTF-8.
ODD_NAME = 'odd "name" \\ \u00e9\t\u0001'


def build():
    t = {}
    t["float32"] = (torch.arange(24, dtype=torch.float32) * 0.5 - 3).reshape(2, 3, 4)
    t["float64"] = (torch.arange(35, dtype=torch.float64) / 3).reshape(5, 7)
    t["int64"] = ((torch.arange(20, dtype=torch.int64) - 10) * 1000000007 * 1000000).reshape(4, 5)
    t["int64_extremes"] = torch.tensor([-2**63, 2**63 - 1, -1, 0], dtype=torch.int64)
    t["int32"] = ((torch.arange(12, dtype=torch.int32) - 6) * 100000007).reshape(3, 4)
    t["uint8"] = torch.arange(256, dtype=torch.int64).to(torch.uint8).reshape(16, 16)
    t["bool"] = (torch.arange(15) % 3 == 0).reshape(3, 5)
    t["float16"] = ((torch.arange(16, dtype=torch.float32) - 8) * 0.25).to(torch.float16).reshape(4, 4)
    t["float16_special"] = torch.tensor(
        [float("inf"), float("-inf"), float("nan"), 2.0**-24, 65504.0, -0.0], dtype=torch.float16)
    t["bfloat16"] = ((torch.arange(16, dtype=torch.float32) - 8) * 1.5).to(torch.bfloat16).reshape(2, 8)
    t["scalar"] = torch.tensor(42.5, dtype=torch.float32)
    t["empty"] = torch.zeros(0, 3, dtype=torch.float32)
    t["empty_int64"] = torch.zeros(0, dtype=torch.int64)
    t["dims8"] = torch.arange(96, dtype=torch.float64).reshape(2, 1, 2, 1, 2, 1, 2, 6)
    t[ODD_NAME] = torch.tensor([7, -7], dtype=torch.int32)
    return t
