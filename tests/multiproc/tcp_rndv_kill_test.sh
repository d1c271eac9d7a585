#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TCP rendezvous sends pending at a receiver that dies (test_tcp_rndv kill
# under `twrun -n 2 --keep-going`): rank 0 checks that its unmatched large
# sends complete with TW_ERR_PEER_FAILED and leaves rank0.pass. Here: rank 1
# died of SIGKILL (twrun exits 137), rank 0 passed.
#   tcp_rndv_kill_test.sh TWRUN TEST_TCP_RNDV
set -eu
twrun=$1 prog=$2
. "$(dirname "$0")/mp_lib.sh"

work=$(mktemp -d /tmp/twtest-rndvkill.XXXXXX)
trap 'rm -rf "$work"' EXIT

rc=0
out=$("$twrun" -n 2 --keep-going "$prog" kill "$work" 2>&1) || rc=$?
echo "$out"
[ -f "$work/rank0.pass" ] || fail "rank 0 did not pass (see its output above)"
[ "$rc" -eq 137 ] || fail "twrun exit status $rc, want 137 (128 + SIGKILL of rank 1)"
grep -q "^twrun: rank 1 (pid [0-9]*) killed by signal 9" <<<"$out" ||
  fail "twrun did not report rank 1's death"
echo "tcp rendezvous, receiver killed: all checks passed"
