"""Writes PyTorch's reference values for the C tests.

Every tests/ref/cases_<family>.py defines build() -> {name: torch.Tensor}; this saves each dict
with the safetensors library (the reader PyTorch users use) to <outdir>/<family>.safetensors.
Run by ctest as the `ref_gen` fixture, in Debian's python3-torch (see scripts/setup.sh).
"""
import importlib.util
import os
import sys

import torch
from safetensors.torch import save_file


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    families = sorted(f[6:-3] for f in os.listdir(here) if f.startswith("cases_") and f.endswith(".py"))
    for fam in families:
        spec = importlib.util.spec_from_file_location("cases_" + fam, os.path.join(here, "cases_" + fam + ".py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        # clone: safetensors refuses tensors that share memory
        tensors = {k: v.detach().clone().contiguous() for k, v in mod.build().items()}
        save_file(tensors, os.path.join(out, fam + ".safetensors"))
        print(f"ref_gen: {fam}: {len(tensors)} tensors")
    print(f"ref_gen: {len(families)} families written to {out}")


if __name__ == "__main__":
    main()
