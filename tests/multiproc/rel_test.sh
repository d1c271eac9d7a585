#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The reliability layer under injected faults (TW_RELIABLE=1, TW_FAULT),
# through test_alltoall, which checks that every message arrives exactly
# once, intact and in order, and fails on any error. Rows of the test
# matrix (../shared/notes/test-matrix.md):
#
#   rel_test.sh TWRUN TEST_ALLTOALL b1 TRANSPORT   5% drop, 1% corrupt, 1% dup, 10% reorder,
#                                                  1 B..256 KiB, 2x10^4 messages
#   rel_test.sh TWRUN TEST_ALLTOALL b2 TRANSPORT   30% of frames lost each way, 5x10^3
#                                                  messages; retransmissions <= 3x ideal
#   rel_test.sh TWRUN TEST_ALLTOALL b4             sequence numbers wrap, 5% drop, 10^4
#   rel_test.sh TWRUN TEST_ALLTOALL b8             3 ranks over shm+tcp; rank 0's shm goes
#                                                  dark after a random frame, 20 times (8
#                                                  under sanitizers): traffic moves to tcp
#                                                  with no stall over 1 s, no rank sees an
#                                                  error
#   rel_test.sh TWRUN TEST_ALLTOALL failback       2 ranks over shm+tcp; rank 0's shm goes
#                                                  dark for 300 ms mid-stream: fails over to
#                                                  tcp, and back to shm once probes answer
#
# Message counts are divided by TWTEST_SCALE inside test_alltoall. The
# counters come from tw_stats_json (--stats=json), asserted through
# tests/common/twt_stats.py: the injector's (lossy:<transport>) prove the
# faults happened, rel's show the repairs.
set -eu
twrun=$1 prog=$2 case=$3 tl=${4:-shm}
stats="$(dirname "$0")/../common/twt_stats.py"

fail() { echo "$out" | tail -40; echo "FAIL: $*"; exit 1; }
# Every query holds over the ranks' counters (twt_stats.py says which
# not); the values of its "print" queries go to nums[], in order. One
# interpreter start per job: each costs a few 100 ms on a busy machine.
check() {
  local got
  got=$("$stats" - "$@" <<<"$out") || fail "counters: see twt_stats above"
  mapfile -t nums <<<"$got"
}
run() { out=$("$twrun" "$@" 2>&1) || fail "job failed: $*"; }

export TW_RELIABLE=1
case $case in
b1)
  export TW_TRANSPORTS=$tl TW_FAULT=drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=${TWTEST_SEED:-42}
  run -n 2 "$prog" -t 4 -m 1250 --max-size 256k --stats=json
  # the faults happened; rel repaired them; nobody was failed
  qs=('all ifaces/rel/peer_failures == 0')
  for k in lossy:$tl/dropped lossy:$tl/corrupted lossy:$tl/duplicated lossy:$tl/reordered \
    rel/retransmits rel/crc_failures rel/duplicates; do
    qs+=("sum ifaces/$k > 0" "print sum ifaces/$k")
  done
  check "${qs[@]}"
  echo "b1 over $tl: $(grep -c 'intact exactly once' <<<"$out") ranks got every message intact," \
    "once, in order; injected: dropped ${nums[0]}, corrupted ${nums[1]}, duplicated" \
    "${nums[2]}, reordered ${nums[3]}; rel: retransmits ${nums[4]}, checksum failures" \
    "${nums[5]}, duplicates dropped ${nums[6]}"
  ;;
b2)
  # tx only: each frame is lost with p = 0.3 once, in both directions.
  # Test timers: with 30% of frames lost, backoff past 20 ms only slows
  # the test down.
  export TW_TRANSPORTS=$tl TW_FAULT=tx.drop=0.3,seed=${TWTEST_SEED:-7} TW_REL_RTO_MAX=20ms
  run -n 2 "$prog" -t 4 -m 320 --max-size 64k --stats=json
  check 'print rank 0 ifaces/rel/frags_sent' 'print rank 0 ifaces/rel/retransmits' \
    'print rank 1 ifaces/rel/frags_sent' 'print rank 1 ifaces/rel/retransmits'
  for r in 0 1; do
    sent=${nums[$((2 * r))]}
    re=${nums[$((2 * r + 1))]}
    first=$((sent - re))
    # ideal: each fragment needs 1 / (1 - p) transmissions
    ideal=$((first * 3 / 7))
    [ "$re" -le $((3 * ideal)) ] ||
      fail "rank $r: $re retransmissions of $first fragments, over 3x the ideal $ideal"
    echo "b2 over $tl: $first fragments, $re retransmissions, ideal $ideal" \
      "($(awk -v a="$re" -v b="$ideal" 'BEGIN {printf "%.2f", a / b}')x)"
  done
  ;;
b4)
  export TW_TRANSPORTS=$tl TW_FAULT=drop=0.05,seed=${TWTEST_SEED:-3} TW_REL_SEQ_START=4294966996
  run -n 2 "$prog" -t 4 -m 625 --max-size 64k --stats=json
  check 'sum ifaces/rel/retransmits > 0'
  echo "b4: sequence numbers from 2^32 - 300 through the wrap with 5% drop:" \
    "$(grep -c 'intact exactly once' <<<"$out") ranks got every message once, in order"
  ;;
b8)
  # Rank 0's shm path goes dark after its N-th frame -- mid-stream however
  # fast this build and host stream; ranks 1 and 2 keep their shm between
  # them. Test timers: a path fails after 150 ms. Rank 0 alone sends 1600
  # messages (divided by TWTEST_SCALE) to its peers over shm and gets as
  # many, so its path decides at least twice that many frames: N below
  # that count falls inside the stream.
  # The bound is 1 s; sanitizer builds (TWTEST_SCALE > 1) run 5-15x
  # slower on every path, so they get 3 s -- and a path timeout that a
  # tcp connection set up on first use under ThreadSanitizer can meet.
  stall=1 timeout=150ms
  [ "${TWTEST_SCALE:-1}" -gt 1 ] && stall=3 timeout=500ms
  export TW_TRANSPORTS=shm,tcp TW_FAULT_ON=shm TW_FAULT_RANKS=0 TW_REL_PATH_TIMEOUT=$timeout \
    TW_REL_RTO_MAX=40ms
  seed=${TWTEST_SEED:-11}
  args=(-n 3 "$prog" -t 2 -m 400 --max-size 64k --stats=json)
  # 20 runs, 8 in sanitizer builds (TWTEST_B8_RUNS sets it).
  runs=20
  [ "${TWTEST_SCALE:-1}" -gt 1 ] && runs=8
  for i in $(seq 1 "${TWTEST_B8_RUNS:-$runs}"); do
    n=$((((seed * 7919 + i * 104729) % 1500 + 50) / ${TWTEST_SCALE:-1} + 1))
    export TW_FAULT=blackhole_after=$n
    run "${args[@]}" --max-stall $stall
    check 'sum ifaces/rel/failovers >= 1' 'all ifaces/rel/peer_failures == 0' \
      'rank 0 ifaces/lossy:shm/blackholed > 0' 'print sum ifaces/rel/failovers'
    echo "b8 run $i: shm of rank 0 dark after $n frames: ${nums[0]} failovers, no stall over" \
      "$stall s, every message once, no error"
  done
  ;;
failback)
  # The blackhole opens 400 ms after the injector does: after tw_init in
  # every build, and long before the stream ends (several seconds, even
  # in Release). It lasts 300 ms, five path timeouts: a busy machine can
  # hold the engines off for tens of ms, and a dark spell of 100 ms then
  # ended before the path was given up (no failover; seen beside other
  # tests).
  export TW_TRANSPORTS=shm,tcp TW_FAULT_ON=shm TW_FAULT_RANKS=0 TW_REL_PATH_TIMEOUT=60ms \
    TW_REL_RTO_MAX=10ms TW_REL_PROBE=10ms TW_FAULT=blackhole=400ms,blackhole_for=300ms
  run -n 2 "$prog" -t 2 -m 80000 --max-size 16k --stats=json
  # no fail-back (failbacks == 0): did the run end before the shm path healed?
  check 'sum ifaces/rel/failovers >= 1' 'all ifaces/rel/peer_failures == 0' \
    'sum ifaces/rel/failbacks >= 1' 'print sum ifaces/rel/failovers' 'print sum ifaces/rel/failbacks'
  echo "failback: rank 0's shm dark from 400 to 700 ms: ${nums[0]} failovers, ${nums[1]}" \
    "fail-backs, every message once, in order, no error"
  ;;
*)
  echo "rel_test.sh: unknown case $case"
  exit 2
  ;;
esac
