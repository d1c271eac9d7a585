#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# twrun and its ranks die together, with real threadwire ranks past tw_init
# (tw_mp_rank; twrun_test.sh covers the same with a plain probe):
#   1. twrun -9 with 4 ranks waiting on their CQs: every rank is gone
#      within 1 s; nothing left in /dev/shm; nothing but twrun's own socket
#      in twrun's directory (twrun -9 cannot remove that; we do).
#   2. rank 2 aborts without --keep-going: twrun names rank 2 and the
#      signal, stops the other 3, exits 134 (128 + SIGABRT); no process
#      and nothing in /dev/shm left.
#   twrun_kill_test.sh TWRUN TW_MP_RANK
set -eu
twrun=$1 rank=$2
. "$(dirname "$0")/mp_lib.sh"

work=$(mktemp -d /tmp/twtest-twkill.XXXXXX)
trap 'rm -rf "$work"' EXIT
before=$(shm_list)

# ---- 1. twrun SIGKILLed --------------------------------------------------
st=$work/kill
mkdir "$st"
"$twrun" -n 4 "$rank" wait "$st" 60 >"$work/kill.out" 2>&1 &
tw=$!
wait_pid_files "$st" 4 "$tw" || true
if ! kill -0 "$tw" 2>/dev/null; then
  rc=0
  wait "$tw" || rc=$?
  cat "$work/kill.out"
  fail "twrun -n 4 ended (status $rc) before the kill"
fi
[ "$(ls "$st"/rank*.pid | wc -l)" -eq 4 ] || fail "not every rank got past tw_init"
pids=$(cat "$st"/rank*.pid)
bootdir=$(dirname "$(cat "$st/rank0.boot")")
# shellcheck disable=SC2086 # one word a pid
kill_launcher "$tw" 1000 $pids
[ -z "$alive" ] || fail "rank pids$alive outlived twrun by $took_ms ms"
echo "ok: 4 threadwire ranks gone $took_ms ms after twrun -9"
no_orphans "$st" "twrun -9"
case "$bootdir" in
/tmp/twrun.*)
  extra=""
  for f in "$bootdir"/* "$bootdir"/.[!.]*; do
    [ -e "$f" ] && [ "$f" != "$bootdir/boot.sock" ] && extra="$extra ${f##*/}"
  done
  [ -z "$extra" ] || fail "twrun -9: the ranks left in $bootdir:$extra"
  rm -rf "$bootdir" # twrun -9 cannot clean up its own socket directory
  ;;
*) fail "unexpected TW_BOOT_ADDR directory '$bootdir'" ;;
esac
echo "ok: nothing of the ranks' in twrun's directory"
shm_check "$before" "$st" "twrun -9"
echo "ok: nothing left in /dev/shm"

# ---- 2. a rank aborts ----------------------------------------------------
st=$work/crash
mkdir "$st"
start=$(date +%s%N)
rc=0
out=$("$twrun" -n 4 "$rank" crash 2 "$st" 2>&1) || rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ -f "$st/crash.t" ] || { echo "$out"; fail "rank 2 did not get to abort past tw_init"; }
[ "$rc" -eq 134 ] || { echo "$out"; fail "abort: exit status $rc, want 134 (128 + SIGABRT)"; }
grep -q "^twrun: rank 2 (pid [0-9]*) killed by signal 6" <<<"$out" ||
  fail "abort not reported: $out"
grep -q "^twrun: stopping the other 3 rank" <<<"$out" || fail "others not stopped: $out"
[ "$took_ms" -lt 10000 ] || fail "abort: the job took $took_ms ms to stop"
no_orphans "$st" "abort"
shm_check "$before" "$st" "abort"
echo "ok: rank 2's abort reported, the other 3 stopped ($took_ms ms), nothing left behind"
echo "twrun kill: all checks passed"
