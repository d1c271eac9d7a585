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

# The installed programs run as they are (their RPATH is relative to the
# binary): no LD_LIBRARY_PATH, from another directory, a job of two.
bin=$work/prefix/bin
(
  unset LD_LIBRARY_PATH
  cd /
  for p in tw_info twrun tw_perf tw_coll_perf tw_demo stencil put_ring tasks; do
    [ -x "$bin/$p" ] || { echo "not installed: bin/$p"; exit 1; }
    if ldd "$bin/$p" | grep -q 'not found'; then
      echo "installed $p does not find its libraries:"
      ldd "$bin/$p"
      exit 1
    fi
  done
  "$bin/tw_info" >/dev/null || { echo "installed tw_info failed"; exit 1; }
  out=$("$bin/twrun" -n 2 "$bin/tw_perf" -x lat -s 8 -n 50 2>&1) ||
    { echo "installed twrun -n 2 tw_perf failed: $out"; exit 1; }
  grep -q "^lat  *8 " <<<"$out" || { echo "installed tw_perf printed no 8-byte row: $out"; exit 1; }
)
echo "installed programs run without LD_LIBRARY_PATH: ok"
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
