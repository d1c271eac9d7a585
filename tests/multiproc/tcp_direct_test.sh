#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TW_TCP_DIRECT_RECV: a thread that polls a lane of at most that many
# connections reads them with recv(2) without polling them first. A
# tw_perf ping-pong over TCP (tw_perf checks every payload) counts the
# passes that found data that way (tl:tcp/rx_direct): some on every rank
# with the default, a spinning worker (TW_WAIT_MODE=spin), sleeping
# workers (TW_WAIT_MODE=block: the engine reads) and in manual mode
# (tw_progress), none with 0; and some among 3 ranks, a lane of 2
# connections each. A value out of range is refused at tw_init.
#   tcp_direct_test.sh TWRUN TW_PERF TEST_ALLTOALL
set -eu
twrun=$1 perf=$2 a2a=$3
stats="$(dirname "$0")/../common/twt_stats.py"
export TW_TRANSPORTS=tcp TW_TCP_THREADS=1
. "$(dirname "$0")/mp_lib.sh"

expect_refused TW_TCP_DIRECT_RECV=-1 "TW_TCP_DIRECT_RECV" "$twrun" -n 2 "$perf" -x lat -n 10

# CASE QUERY ENV...: a ping-pong of 2000 64-byte messages; QUERY on the
# ranks' counters must hold.
check() {
  local name=$1 query=$2 out
  shift 2
  if ! out=$(env "$@" "$twrun" -n 2 "$perf" -x lat -s 64 -n 2000 --stats=json 2>&1); then
    echo "$out"
    fail "$name: the ping-pong failed"
  fi
  "$stats" - "$query" 'all ifaces/tl:tcp/rx_msgs >= 2000' <<<"$out" ||
    { echo "$out" | grep -v threadwire_stats; fail "$name: want $query"; }
  echo "$name: $("$stats" - 'print sum ifaces/tl:tcp/rx_direct' <<<"$out") direct passes found data"
}
check spin 'all ifaces/tl:tcp/rx_direct >= 1' TW_WAIT_MODE=spin
check manual 'all ifaces/tl:tcp/rx_direct >= 1' TW_PROGRESS_THREADS=0
# Workers asleep: only the engines' own passes can read first.
check block 'all ifaces/tl:tcp/rx_direct >= 1' TW_WAIT_MODE=block
check off 'all ifaces/tl:tcp/rx_direct == 0' TW_WAIT_MODE=spin TW_TCP_DIRECT_RECV=0

# 3 ranks, each with 2 connections on its one lane, all to all (every
# message counted and checked; 512 small ones per worker and peer, so most
# flow once both connections are up): direct reads with a limit of 2. (A
# limit of 1 still allows them while a lane has one connection, before
# its second comes up, so its count says nothing certain.)
if ! out=$(TW_STATS=json "$twrun" -n 3 "$a2a" -t 2 -m 512 --max-size 4096 2>&1); then
  echo "$out"
  fail "alltoall over 3 ranks failed"
fi
"$stats" - 'sum ifaces/tl:tcp/rx_direct >= 1' <<<"$out" ||
  { echo "$out" | grep -v threadwire_stats; fail "alltoall: want direct reads"; }
echo "alltoall: $("$stats" - 'print sum ifaces/tl:tcp/rx_direct' <<<"$out") direct passes found data"
echo "TW_TCP_DIRECT_RECV: direct reads where allowed, none where not, every message checked"
