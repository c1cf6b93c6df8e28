#!/usr/bin/env bash
# Installs the built nabla into a temporary prefix, then builds and runs a consumer two ways:
# with CMake's find_package(nabla) and with pkg-config.
set -euo pipefail
build=$1 src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
cmake -S "$src" -B "$prefix/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$prefix/consumer-build" > /dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer-build/consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=gnu11 "$src/main.c" -o "$prefix/consumer-pc" $(pkg-config --cflags --libs nabla)
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer-pc"
echo "install: find_package and pkg-config consumers built and ran"
