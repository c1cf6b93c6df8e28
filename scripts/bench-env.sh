#!/usr/bin/env bash
# Creates .venv-bench at the repository root: PyTorch's current release from PyPI (not Debian's
# python3-torch), numpy and matplotlib, for bench/micro_torch.py and bench/dlbench/ (torch_bench.py,
# plot.py). Safe to run again: it only installs what is missing or cannot be imported. The
# default torch wheel pulls the CUDA libraries (several GB); the benchmark uses only its CPU side.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv-bench"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
  echo "bench-env: creating $venv (torch + numpy from PyPI)"
  /usr/bin/python3 -m venv "$venv"
  # Keep git out of it (as Python 3.13's venv does): the top-level .gitignore does not name it.
  printf '# created by scripts/bench-env.sh: the environment is not part of the repository\n*\n' \
    >"$venv/.gitignore"
  "$venv/bin/pip" install --disable-pip-version-check torch numpy
fi
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
  echo "bench-env: installing matplotlib into $venv (for bench/dlbench/plot.py)"
  "$venv/bin/pip" install --disable-pip-version-check matplotlib
fi
[ -f "$venv/.gitignore" ] || printf '# created by scripts/bench-env.sh\n*\n' >"$venv/.gitignore"
"$venv/bin/python" -c "import torch, numpy, matplotlib; print('bench-env: torch', torch.__version__, '/ numpy', numpy.__version__, '/ matplotlib', matplotlib.__version__)"
