#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A member SIGKILLed in the middle of collectives (test_coll_kill under
# `twrun --keep-going`): every survivor checks the failure contract
# itself (TW_ERR_PEER_FAILED within 1 s, later collectives fail at once,
# the group without the victim goes on) and leaves rankR.pass. Here:
# every survivor passed, twrun reports the victim killed by signal 9, no
# process and nothing in /dev/shm is left behind.
#   coll_kill_test.sh TWRUN TEST_COLL_KILL NRANKS VICTIM[,VICTIM2] [test_coll_kill args...]
set -eu
twrun=$1 prog=$2 n=$3 victims=${4//,/ }
shift 4
victim=${victims%% *} also=""
[ "$victims" != "$victim" ] && also=${victims#* }
. "$(dirname "$0")/mp_lib.sh"

work=$(mktemp -d /tmp/twtest-collkill.XXXXXX)
trap 'rm -rf "$work"' EXIT
before=$(shm_list)

rc=0
out=$("$twrun" -n "$n" --keep-going "$prog" --victim "$victim" ${also:+--also "$also"} "$@" \
  "$work" 2>&1) || rc=$?
echo "$out"
for r in $(seq 0 $((n - 1))); do
  case " $victims " in *" $r "*) continue ;; esac
  [ -f "$work/rank$r.pass" ] || fail "rank $r did not pass (see its output above)"
done
[ "$rc" -eq 137 ] || fail "twrun exit status $rc, want 137 (128 + SIGKILL of rank $victim)"
for v in $victims; do
  grep -q "^twrun: rank $v (pid [0-9]*) killed by signal 9" <<<"$out" ||
    fail "twrun did not report rank $v's death"
done
echo "ok: every survivor saw the collective fail in time and went on without rank(s) $victims"
no_orphans "$work" "collective kill"
shm_check "$before" "$work" "collective kill"
echo "ok: nothing left behind"
