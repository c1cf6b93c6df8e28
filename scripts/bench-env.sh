#!/usr/bin/env bash
# Creates .venv-bench at the repository root: PyTorch's current release from PyPI (not Debian's
# python3-torch) and numpy, for bench/micro_torch.py. Safe to run again: it only installs when the
# environment is missing or cannot import torch. The default torch wheel pulls the CUDA libraries
# (several GB); the benchmark uses only its CPU side.
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
[ -f "$venv/.gitignore" ] || printf '# created by scripts/bench-env.sh\n*\n' >"$venv/.gitignore"
"$venv/bin/python" -c "import torch, numpy; print('bench-env: torch', torch.__version__, '/ numpy', numpy.__version__)"
