#!/usr/bin/env bash
# Installs what nabla's build and tests need on Debian, when it is missing, and the Python
# environment the reference tests use (Debian's python3-torch plus safetensors from PyPI).
# Safe to run again: it only installs what is not there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ocl-icd-opencl-dev: only a Recommends of libdnnl-dev, but Debian's oneDNN is built with the OpenCL
# GPU runtime and its CMake config (find_package(dnnl)) fails without the OpenCL headers and library.
# libopenmpi-dev, openmpi-bin: the process group and DistributedDataParallel (nabla/dist.h) and
# their tests under mpiexec.
pkgs=(build-essential cmake ninja-build pkg-config libcmocka-dev libopenblas-openmp-dev libdnnl-dev
      ocl-icd-opencl-dev zlib1g-dev libopenmpi-dev openmpi-bin python3 python3-venv python3-torch python3-numpy dataset-fashion-mnist)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The reference-value generator runs in Debian's Python (/usr/bin/python3, which has
# python3-torch) inside a venv that sees the system packages and adds safetensors from PyPI.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, safetensors" 2>/dev/null; then
  echo "setup: creating $venv (system python3-torch + safetensors)"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check safetensors
fi
"$venv/bin/python" -c "import torch, safetensors; print('setup: torch', torch.__version__, '/ safetensors', safetensors.__version__)"
