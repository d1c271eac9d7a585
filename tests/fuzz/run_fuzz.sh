#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# One libFuzzer run, as a ctest test: fuzz <fuzzer> for TWCHECK_FUZZ_SECONDS
# (default <seconds>, the value configured; 0 skips) starting from a scratch
# copy of the seed corpus, so the committed corpus is never written. Fails
# on any crash, sanitizer report, leak, slow input (>10 s) or OOM; the input
# is kept in <artifact-dir> and the replay program reproduces it.
#
#   run_fuzz.sh <fuzzer> <seed-dir> <artifact-dir> <seconds> <replay-program>
set -euo pipefail
fuzzer=$1 seeds=$2 artifacts=$3 replay=$5
secs=${TWCHECK_FUZZ_SECONDS:-$4}
case $secs in
  '' | *[!0-9]*) echo "run_fuzz: TWCHECK_FUZZ_SECONDS='$secs' is not a number of seconds"; exit 2 ;;
esac
if [ "$secs" -eq 0 ]; then
  echo "skipped: TWCHECK_FUZZ_SECONDS=0"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/twfuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -R "$seeds"/. "$work"/
mkdir -p "$artifacts"

# libFuzzer's own exit code for a crash is 77, which ctest would count as a
# skip: ask for 1, and map whatever it returns to pass or fail below.
rc=0
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=128 \
  -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$work" 2>&1 || rc=$?
if [ $rc -ne 0 ]; then
  echo "run_fuzz: $(basename "$fuzzer") failed (exit $rc); inputs kept:"
  ls -l "$artifacts"
  echo "run_fuzz: reproduce with: $replay <input>"
  exit 1
fi
echo "run_fuzz: $(basename "$fuzzer"): ${secs}s, no crash; corpus grew to $(find "$work" -type f | wc -l) inputs"
