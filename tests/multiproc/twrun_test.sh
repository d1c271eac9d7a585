#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# twrun: address exchange, rank environment, death reports, --keep-going,
# the lifeline (ranks gone within 1 s of twrun's death), signal forwarding,
# and no socket directory left behind.
#   twrun_test.sh TWRUN PROBE
set -uo pipefail
twrun=$1 probe=$2 info=${3:-} demo=${4:-}
fail() { echo "FAIL: $*"; exit 1; }
leftover() { ls -d /tmp/twrun.* 2>/dev/null | wc -l; }
dirs0=$(leftover)

"$twrun" --help | grep -q -- "--keep-going" || fail "--help does not document --keep-going"
"$twrun" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no arguments must exit 2"
"$twrun" -n 0 true >/dev/null 2>&1; [ $? -eq 2 ] || fail "-n 0 must exit 2"

"$twrun" -n 4 "$probe" kv || fail "4-rank address exchange"
"$twrun" -n 1 "$probe" kv || fail "1-rank address exchange"
echo "ok: address exchange (put, fence, get) with 1 and 4 ranks"

start=$(date +%s%N)
err=$("$twrun" -n 3 "$probe" crash 1 2>&1); rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc -eq 137 ] || fail "crash: exit status $rc, want 137 (128 + SIGKILL)"
grep -q "rank 1 (pid [0-9]*) killed by signal 9" <<<"$err" || fail "crash not reported: $err"
grep -q "stopping the other 2 rank" <<<"$err" || fail "others not stopped: $err"
[ $took_ms -lt 5000 ] || fail "crash: the job took $took_ms ms to stop"
echo "ok: a crashed rank is reported and the others stopped ($took_ms ms)"

err=$("$twrun" -n 3 --keep-going "$probe" crash 2 1 2>&1); rc=$?
[ $rc -eq 137 ] || fail "keep-going: exit status $rc, want 137"
grep -q "stopping" <<<"$err" && fail "keep-going stopped the survivors: $err"
echo "ok: --keep-going lets the survivors finish and still reports the death"

# Lifeline: kill twrun -9, its ranks must be gone within a second.
"$twrun" -n 3 "$probe" sleep &
tw=$!
sleep 0.5
kids=$(pgrep -P $tw | tr '\n' ' ')
[ -n "$kids" ] || fail "no ranks found under twrun"
# twrun -9 cannot clean up: find its socket directory by the inode of its
# listening socket (another twrun on the machine may have made a newer one).
inodes=$(for f in "/proc/$tw/fd/"*; do readlink "$f"; done 2>/dev/null |
  sed -n 's/^socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')
killed_dir=$(awk -v ino=" $inodes" '$8 ~ /^\/tmp\/twrun\./ && index(ino, " " $7 " ") {print $8}' \
  /proc/net/unix | head -n1)
killed_dir=${killed_dir%/boot.sock}
kill -9 $tw
sleep 1
for k in $kids; do
  st=$(ps -o stat= -p "$k" 2>/dev/null | cut -c1) # empty: gone; Z: dead, not yet reaped
  if [ -n "$st" ] && [ "$st" != Z ]; then
    fail "rank pid $k outlived twrun by 1 s (state $st)"
  fi
done
wait $tw 2>/dev/null
[ -n "$killed_dir" ] || fail "cannot find the socket directory of the killed twrun"
rm -rf "$killed_dir"
echo "ok: ranks die within 1 s of twrun"

# Forwarded SIGTERM stops the job.
"$twrun" -n 2 "$probe" sleep 2>/dev/null &
tw=$!
sleep 0.5
kill -TERM $tw
wait $tw; rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: exit status $rc, want 143"
echo "ok: SIGTERM forwarded to the ranks"

# The library knows the launcher's variables (no unknown-variable warning)
# and refuses, rather than silently running N rank-0s, a job it cannot join.
if [ -n "$info" ]; then
  out=$("$twrun" -n 1 "$info" 2>&1) || fail "tw_info under twrun -n 1"
  grep -q "0 unknown TW_" <<<"$out" || fail "launcher variables reported as unknown: $out"
fi
echo "ok: launcher variables are known to the library"

# tw_init joins through twrun's exchange; a job it cannot serve yet is an
# error with a reason, not N silent copies of rank 0.
if [ -n "$demo" ]; then
  "$twrun" -n 1 "$demo" -t 2 -n 2000 | grep -q "rank 0 of 1" || fail "tw_demo under twrun -n 1"
  out=$("$twrun" -n 2 "$demo" -t 2 -n 1000 2>&1) || fail "twrun -n 2 tw_demo: $out"
  grep -q "rank 1 of 2" <<<"$out" || fail "tw_demo under twrun -n 2 did not report rank 1: $out"
  echo "ok: tw_init joins twrun -n 1 and -n 2"
fi

# --bind core: rank r on the r-th usable CPU; a bad value is a usage error.
ncpu=$(nproc)
out=$("$twrun" -n 2 --bind core -- sh -c 'echo "rank $TW_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' 2>&1) ||
  fail "twrun --bind core: $out"
if [ "$ncpu" -ge 2 ]; then
  [ "$(grep -c -E '^rank [01] [0-9]+$' <<<"$out")" = 2 ] || fail "--bind core: not one CPU per rank: $out"
  [ "$(awk '{print $3}' <<<"$out" | sort -u | wc -l)" = 2 ] || fail "--bind core: ranks share a CPU: $out"
fi
rc=0
"$twrun" -n 1 --bind socket true 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--bind socket exited $rc, want 2"
echo "ok: --bind core pins each rank to its own CPU"

[ "$(leftover)" -le "$dirs0" ] || fail "socket directory left in /tmp"
echo "twrun: all checks passed"
