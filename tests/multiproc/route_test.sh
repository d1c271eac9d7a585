#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Transport selection: with every transport on (the default), shm carries
# the traffic between ranks of one node and tcp carries none; with
# TW_TRANSPORTS=tcp, tcp carries it all and shm is not opened. Reads the
# per-transport counters of tw_stats_json (test_alltoall --stats=json)
# through tests/common/twt_stats.py.
#   route_test.sh TWRUN TEST_ALLTOALL
set -eu
twrun=$1 prog=$2
stats="$(dirname "$0")/../common/twt_stats.py"
unset TW_TRANSPORTS
out=$("$twrun" -n 2 "$prog" -t 2 -m 4 --stats=json 2>&1) || { echo "$out"; echo "FAIL: default job"; exit 1; }
"$stats" - 'all ifaces/tl:shm/tx_msgs >= 1' 'all ifaces/tl:tcp/tx_msgs == 0' <<<"$out" ||
  { echo "$out"; echo "FAIL: by default shm should carry node-local traffic, tcp none"; exit 1; }
out=$(TW_TRANSPORTS=tcp "$twrun" -n 2 "$prog" -t 2 -m 4 --stats=json 2>&1) || { echo "$out"; echo "FAIL: tcp job"; exit 1; }
"$stats" - 'all ifaces/tl:tcp/tx_msgs >= 1' 'none ifaces/tl:shm' <<<"$out" ||
  { echo "$out"; echo "FAIL: TW_TRANSPORTS=tcp should carry everything over tcp"; exit 1; }
echo "transport selection: shm by default on one node, tcp when forced"
