#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Transport selection: with every transport on (the default), shm carries
# the traffic between ranks of one node and tcp carries none; with
# TW_TRANSPORTS=tcp, tcp carries it all and shm is not opened. Reads the
# per-transport counters of tw_stats_print (test_alltoall --stats).
#   route_test.sh TWRUN TEST_ALLTOALL
set -eu
twrun=$1 prog=$2
count() { grep -c -E "$1" <<<"$out" || true; }
unset TW_TRANSPORTS
out=$("$twrun" -n 2 "$prog" -t 2 -m 4 --stats 2>&1) || { echo "$out"; echo "FAIL: default job"; exit 1; }
[ "$(count 'tl:shm: tx_msgs=[1-9]')" = 2 ] && [ "$(count 'tl:tcp: tx_msgs=0 ')" = 2 ] ||
  { echo "$out"; echo "FAIL: by default shm should carry node-local traffic, tcp none"; exit 1; }
out=$(TW_TRANSPORTS=tcp "$twrun" -n 2 "$prog" -t 2 -m 4 --stats 2>&1) || { echo "$out"; echo "FAIL: tcp job"; exit 1; }
[ "$(count 'tl:tcp: tx_msgs=[1-9]')" = 2 ] && [ "$(count 'tl:shm:')" = 0 ] ||
  { echo "$out"; echo "FAIL: TW_TRANSPORTS=tcp should carry everything over tcp"; exit 1; }
echo "transport selection: shm by default on one node, tcp when forced"
