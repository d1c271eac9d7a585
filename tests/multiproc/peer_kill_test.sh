#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A local peer SIGKILLed mid-transfer (tw_mp_rank peer-kill under
# `twrun -n 2 --keep-going`): rank 0 checks the failure contract itself
# (operations with rank 1 fail TW_ERR_PEER_FAILED within 500 ms, error
# handler once, new operations refused, ANY_SOURCE receive kept, finalize)
# and leaves rank0.pass. Here: twrun reports rank 1's death (exit 137, the
# message names rank 1), rank 0 exited 0, no process and nothing in
# /dev/shm is left behind.
#   peer_kill_test.sh TWRUN TW_MP_RANK
set -eu
twrun=$1 rank=$2
. "$(dirname "$0")/mp_lib.sh"

work=$(mktemp -d /tmp/twtest-peerkill.XXXXXX)
trap 'rm -rf "$work"' EXIT
before=$(shm_list)

rc=0
out=$("$twrun" -n 2 --keep-going "$rank" peer-kill "$work" 2>&1) || rc=$?
echo "$out"
[ -f "$work/rank0.pass" ] || fail "rank 0 did not pass (see its output above)"
[ "$rc" -eq 137 ] || fail "twrun exit status $rc, want 137 (128 + SIGKILL of rank 1)"
grep -q "^twrun: rank 1 (pid [0-9]*) killed by signal 9" <<<"$out" ||
  fail "twrun did not report rank 1's death"
if grep -q "^twrun: rank 0 " <<<"$out"; then
  fail "twrun reports rank 0 as failed"
fi
if grep -q "^twrun: stopping" <<<"$out"; then
  fail "--keep-going stopped the survivor"
fi
echo "ok: rank 0 survived rank 1's SIGKILL; twrun reported rank 1 (exit $rc)"
no_orphans "$work" "peer kill"
echo "ok: no rank process left"
shm_check "$before" "$work" "peer kill"
echo "ok: nothing left in /dev/shm"
echo "peer kill: all checks passed"
