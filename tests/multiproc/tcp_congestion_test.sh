#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TW_TCP_CONGESTION: a name the host does not have fails tw_init and says
# which it allows; one it allows (other than the host's default) is what
# the connections of an all-to-all over TCP run (ss shows it while they
# are up). Skips (77) the second part without ss or such an algorithm.
#   tcp_congestion_test.sh TWRUN TEST_ALLTOALL
set -eu
twrun=$1 prog=$2
PATH=$PATH:/usr/sbin:/sbin
export TW_TRANSPORTS=tcp
. "$(dirname "$0")/mp_lib.sh"

expect_refused TW_TCP_CONGESTION=nosuch "TW_TCP_CONGESTION=nosuch: .* (this host allows: " \
  "$twrun" -n 2 "$prog" -t 1 -m 1

command -v ss >/dev/null || { echo "SKIP: ss is not installed (apt-get install iproute2)"; exit 77; }
host=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
list=/proc/sys/net/ipv4/tcp_allowed_congestion_control
[ "$(id -u)" = 0 ] && list=/proc/sys/net/ipv4/tcp_available_congestion_control
cc=$(tr ' ' '\n' <"$list" | grep -vx "$host" | grep -m1 . || true)
[ -n "$cc" ] || { echo "SKIP: no congestion control but the host's ($host) to pick"; exit 77; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
TW_TCP_CONGESTION=$cc "$twrun" -n 2 "$prog" -t 2 -m 4000 >"$log" 2>&1 &
pid=$!
seen=0
while kill -0 "$pid" 2>/dev/null; do
  # Loopback connections in the established state and their algorithm.
  if ss -tni state established dst 127.0.0.1 2>/dev/null | grep -qw "$cc"; then
    seen=1
  fi
  sleep 0.05
done
wait "$pid" || { cat "$log"; echo "FAIL: all-to-all with TW_TCP_CONGESTION=$cc"; exit 1; }
[ "$seen" = 1 ] || { echo "FAIL: no connection ran $cc (the host's default: $host)"; exit 1; }
echo "TW_TCP_CONGESTION=$cc: all-to-all passed, its connections ran $cc (host default $host)"
