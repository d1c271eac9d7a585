#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The node's collectives segment when the ranks of a node disagree about
# it (TW_COLL_SLOTS set on one rank only: a misconfiguration the library
# must survive). 3 ranks on one node, test_coll --mode basic (every
# collective checked exactly on every rank, world group and subgroups):
#   attach  rank 2 wants 2 slot sets: the leader's segment is not the size
#           it expects, so it does not attach (a warning saying why), the
#           others see its bit missing (a warning: the world group runs
#           point to point on this node), groups without rank 2 may still
#           use the segment; both warnings must appear
#   leader  rank 0, the leader, has no slot sets (TW_COLL_SLOTS=0): it
#           publishes no segment and the others run point to point
#           quietly: no coll warning at all
#   rsag    rank 1 alone sets TW_COLL_RSAG (the allreduce's algorithm, and
#           so its messages, depend on it: it must be the same job-wide):
#           tw_init fails, and says why
#   barrier rank 1 alone wants gather barriers, the others flat
#           (TW_COLL_BARRIER): the leader's value holds for the node, so
#           all three say flat (info line) and every collective is exact
#           -- a rank on its own value would wait for a release no one
#           writes
#   coll_node_test.sh TWRUN TEST_COLL attach|leader|rsag|barrier
set -eu
twrun=$1 coll=$2 case=$3
var=TW_COLL_SLOTS
case $case in
  attach) rank=2 slots=2 ;;
  leader) rank=0 slots=0 ;;
  rsag) rank=1 slots=1k var=TW_COLL_RSAG ;;
  barrier) rank=1 slots=gather var=TW_COLL_BARRIER
    export TW_COLL_BARRIER=flat TW_LOG_LEVEL=info ;;
  *) echo "coll_node_test.sh: unknown case $case"; exit 2 ;;
esac
rc=0
out=$("$twrun" -n 3 sh -c 'if [ "$TW_RANK" = "$0" ]; then export "$1=$2"; fi
  shift 2; exec "$@"' "$rank" "$var" "$slots" "$coll" --mode basic --max-stall 20 2>&1) || rc=$?
printf '%s\n' "$out"
if [ "$case" = rsag ]; then
  [ $rc -ne 0 ] || { echo "FAIL: ranks that disagree on TW_COLL_RSAG ran"; exit 1; }
  n=$(grep -c "init\] error: rank [0-9] has TW_COLL_RSAG=[0-9]* bytes and this rank" <<<"$out" || true)
  # The first to fail ends the job (twrun stops the others): one at least.
  [ "$n" -ge 1 ] || { echo "FAIL: no rank said why tw_init failed"; exit 1; }
  echo "ok: rank 1 alone with TW_COLL_RSAG=1k: tw_init failed, naming it ($n rank(s) said so)"
  exit 0
fi
[ $rc -eq 0 ] || { echo "FAIL: the job failed ($rc)"; exit 1; }
n_attach=$(grep -c "coll\] warn: cannot attach the collectives' segment of rank 0" <<<"$out" || true)
n_world=$(grep -c "coll\] warn: a rank of this node could not attach the collectives' segment" \
  <<<"$out" || true)
case $case in
  attach)
    [ "$n_attach" -eq 1 ] || { echo "FAIL: rank 2 said $n_attach time(s) that it cannot attach"; exit 1; }
    [ "$n_world" -eq 2 ] || { echo "FAIL: $n_world of ranks 0 and 1 saw rank 2 missing"; exit 1; }
    echo "ok: rank 2 did not attach, said why, and ranks 0-1 ran the world group point to point" ;;
  leader)
    ! grep -q "coll\] warn" <<<"$out" || { echo "FAIL: a coll warning without a segment to miss"; exit 1; }
    echo "ok: no segment on the node, every collective point to point, no warning" ;;
  barrier)
    n_flat=$(grep -c "coll\] info: barriers of more than 2 members on this node: flat" <<<"$out" || true)
    n_gather=$(grep -c "coll\] info: barriers of more than 2 members on this node: gather" \
      <<<"$out" || true)
    if [ "$n_flat" -ne 3 ] || [ "$n_gather" -ne 0 ]; then
      echo "FAIL: $n_flat rank(s) barrier flat, $n_gather gather: the leader's flat must hold"
      exit 1
    fi
    echo "ok: rank 1's TW_COLL_BARRIER=gather gave way to the leader's flat on all 3 ranks" ;;
esac
