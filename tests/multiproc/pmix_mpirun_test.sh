#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The PMIx bootstrap under Debian's Open MPI mpirun (its embedded PMIx
# server), on this one node:
#   1. test_alltoall on 4 ranks: every rank joined through PMIx, one node,
#      shm carries the traffic (tw_stats_json through twt_stats.py);
#   2. the same with -x TW_NODE_ID=0,0,1,1: two nodes, tcp across them;
#   3. tw_info --job: rank 0 prints the node map; and with two emulated
#      nodes (an rsh agent that starts each node's orted in a UTS namespace
#      of its own, as /work/shared/notes/bootstrap.md describes; skipped
#      where unshare --uts is not allowed): ranks 0-1 and 2-3 on two nodes
#      by PMIx's node ids, shm within, tcp across;
#   4. test_pmix_once: two contexts at once, then tw_init after the last
#      tw_finalize refused (one PMIx job per process);
#   5. mpirun SIGKILLed under 2 ranks past tw_init: both exit within 1.5 s
#      and say why (the lifeline: a pidfd on the parent, the PMIx server).
# Exits 77 (skipped, with the reason) without mpirun, without PMIx in this
# build, or with an mpirun that gives its ranks no PMIx.
#   pmix_mpirun_test.sh TW_INFO TEST_ALLTOALL TW_MP_RANK TEST_PMIX_ONCE
set -eu
info=$1 prog=$2 rank=$3 once=$4
stats="$(dirname "$0")/../common/twt_stats.py"
. "$(dirname "$0")/mp_lib.sh"
skip() {
  echo "skipped: $*"
  exit 77
}
command -v mpirun >/dev/null || skip "no mpirun (Debian: openmpi-bin)"
"$info" | grep -q "PMIX_RANK: built in" || skip "this threadwire is built without PMIx (TW_WITH_PMIX)"
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
timeout 60 "${mpi[@]}" -np 1 sh -c 'test -n "$PMIX_NAMESPACE" && test -n "$PMIX_RANK"' ||
  skip "this mpirun gives its ranks no PMIx (PMIX_NAMESPACE, PMIX_RANK)"
unset TW_TRANSPORTS TW_NODE_ID TW_BOOT_ADDR TW_RANK TW_SIZE

# ---- 1. four ranks through PMIx, one node --------------------------------
out=$(timeout 120 "${mpi[@]}" -np 4 "$prog" -t 2 -m 4 --stats=json 2>&1) ||
  { echo "$out"; fail "mpirun -np 4 test_alltoall"; }
[ "$(grep -c '"bootstrap":"pmix"' <<<"$out")" -eq 4 ] ||
  { echo "$out"; fail "not every rank joined through PMIx"; }
"$stats" - 'all size == 4' 'all nnodes == 1' 'all ifaces/tl:shm/tx_msgs >= 1' \
  'all ifaces/tl:tcp/tx_msgs == 0' <<<"$out" || { echo "$out"; fail "one node: shm carries it all"; }
echo "ok: 4 ranks joined through PMIx, one node, shm"

# ---- 2. TW_NODE_ID under PMIx ----------------------------------------------
out=$(TW_NODE_ID=0,0,1,1 timeout 120 "${mpi[@]}" -x TW_NODE_ID -np 4 "$prog" -t 2 -m 4 \
  --stats=json 2>&1) || { echo "$out"; fail "mpirun -np 4 with TW_NODE_ID"; }
"$stats" - 'all nnodes == 2' 'rank 3 node == 1' 'all ifaces/tl:shm/tx_msgs >= 1' \
  'all ifaces/tl:tcp/tx_msgs >= 1' <<<"$out" || { echo "$out"; fail "TW_NODE_ID=0,0,1,1 under PMIx"; }
echo "ok: TW_NODE_ID splits a PMIx job: shm within, tcp across"

# ---- 3. tw_info --job ------------------------------------------------------------
out=$(timeout 120 "${mpi[@]}" -np 3 "$info" --job 2>&1) || { echo "$out"; fail "tw_info --job"; }
grep -qx "job: 3 rank(s), bootstrap pmix; 1 node: node 0: ranks 0-2" <<<"$out" ||
  { echo "$out"; fail "tw_info --job under mpirun"; }
echo "ok: tw_info --job under mpirun"
work=$(mktemp -d /tmp/twtest-pmix.XXXXXX)
trap 'rm -rf "$work"' EXIT
if unshare --uts true 2>/dev/null; then
  printf 'n1 slots=2\nn2 slots=2\n' >"$work/hosts"
  # shellcheck disable=SC2016 # expanded by the agent
  printf '%s\n' '#!/bin/sh' 'while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done' \
    'host=$1; shift' 'exec unshare --uts sh -c "hostname $host; $*"' >"$work/agent"
  chmod +x "$work/agent"
  emu=(--mca plm_rsh_agent "$work/agent" --hostfile "$work/hosts" --mca oob_tcp_if_include lo)
  out=$(timeout 120 "${mpi[@]}" "${emu[@]}" -np 4 "$info" --job 2>&1) || { echo "$out"; fail "emulated nodes: tw_info --job"; }
  grep -qx "job: 4 rank(s), bootstrap pmix; 2 nodes: node 0: ranks 0-1; node 1: ranks 2-3" <<<"$out" ||
    { echo "$out"; fail "emulated nodes: want ranks 0-1 and 2-3 on two nodes"; }
  out=$(timeout 120 "${mpi[@]}" "${emu[@]}" -np 4 "$prog" -t 2 -m 4 --stats=json 2>&1) ||
    { echo "$out"; fail "emulated nodes: test_alltoall"; }
  "$stats" - 'all nnodes == 2' 'rank 2 node == 1' 'all ifaces/tl:shm/tx_msgs >= 1' \
    'all ifaces/tl:tcp/tx_msgs >= 1' <<<"$out" || { echo "$out"; fail "emulated nodes: shm within, tcp across"; }
  echo "ok: two emulated nodes under mpirun: PMIx's node ids, shm within, tcp across"
else
  echo "note: unshare --uts not allowed here: the emulated-node step is left out"
fi

# ---- 4. one PMIx job per process --------------------------------------------------
out=$(timeout 120 "${mpi[@]}" -np 3 "$once" 2>&1) || { echo "$out"; fail "test_pmix_once"; }
[ "$(grep -c "^pmix once: rank ok" <<<"$out")" -eq 3 ] || { echo "$out"; fail "test_pmix_once"; }
echo "ok: two contexts at once through PMIx; no second job after the last tw_finalize"

# ---- 5. the PMIx server dies ------------------------------------------------------
# Each rank's stderr to a file of its own (mpirun forwards it, and is gone).
"${mpi[@]}" -np 2 sh -c 'exec "$0" wait "$1" 60 2>"$1/rank$OMPI_COMM_WORLD_RANK.err"' \
  "$rank" "$work" >"$work/mpirun.out" 2>&1 &
mpirun_pid=$!
wait_pid_files "$work" 2 "$mpirun_pid" ||
  { cat "$work"/mpirun.out "$work"/rank*.err 2>/dev/null || true; fail "the ranks did not get past tw_init"; }
# shellcheck disable=SC2046 # one word a pid
kill_launcher "$mpirun_pid" 1500 $(cat "$work"/rank*.pid)
if [ -n "$alive" ]; then
  kill -9 $alive 2>/dev/null || true
  fail "rank pids$alive outlived mpirun by $took_ms ms"
fi
for f in "$work"/rank0.err "$work"/rank1.err; do
  grep -qE "(the PMIx server .our parent, pid [0-9]+. is gone|lost the connection to the PMIx server).*: the job is over, exiting" "$f" ||
    { cat "$f"; fail "${f##*/}: no line saying why the rank exited"; }
  cat "$f"
done
echo "ok: both ranks gone $took_ms ms after mpirun -9, saying why"
echo "pmix under mpirun: all checks passed"
