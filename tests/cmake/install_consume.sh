#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Install the build into a scratch prefix, then build and run a tiny
# program against it twice: with CMake's find_package and with pkg-config.
#   install_consume.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(find "$work/prefix" -name 'libthreadwire.so' -printf '%h\n' | head -n1)
export LD_LIBRARY_PATH="$libdir"

cmake -S "$src/tests/cmake/consume" -B "$work/cm" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cm" >/dev/null
out=$("$work/cm/tw_consume")
[ "$out" = "consumed" ] || { echo "find_package consumer printed '$out'"; exit 1; }
echo "find_package(threadwire): ok"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c11 -o "$work/pc" "$src/tests/cmake/consume/main.c" \
  $(pkg-config --cflags --libs threadwire)
out=$("$work/pc")
[ "$out" = "consumed" ] || { echo "pkg-config consumer printed '$out'"; exit 1; }
echo "pkg-config threadwire: ok ($(pkg-config --modversion threadwire))"
