#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TW_BOOT_TIMEOUT bounds the bootstrap fences: under twrun, with rank 1
# starting 5 s late and TW_BOOT_TIMEOUT=1, rank 0's tw_init fails with a
# fence timeout after about 1 s (not 60), and the job ends well before
# rank 1 would have joined.
#   boot_timeout_test.sh TWRUN TW_INFO
set -eu
twrun=$1 info=$2
start=$(date +%s%N)
rc=0
# shellcheck disable=SC2016 # expanded by the rank's shell
out=$(TW_BOOT_TIMEOUT=1 "$twrun" -n 2 sh -c 'if [ "$TW_RANK" = 1 ]; then sleep 5 >/dev/null 2>&1; fi; exec "$0" --job' "$info" 2>&1) || rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
[ "$rc" -ne 0 ] || { echo "FAIL: the job succeeded though rank 1 came 4 s after the timeout"; exit 1; }
grep -q "r0 boot\] error: rank 0: fence timed out after 1000 ms" <<<"$out" ||
  { echo "FAIL: rank 0 did not report a fence timeout"; exit 1; }
[ "$took_ms" -lt 4500 ] || { echo "FAIL: the job took $took_ms ms: the timeout was not 1 s"; exit 1; }
echo "boot timeout: rank 0 gave up after TW_BOOT_TIMEOUT=1 s ($took_ms ms in all)"
