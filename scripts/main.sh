#!/usr/bin/env bash
# The main job: sets up what is missing, builds nabla (Release) and runs the example that trains a
# network. Extra arguments go to the example.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --target train_mlp
exec ./build/examples/train_mlp "$@"
