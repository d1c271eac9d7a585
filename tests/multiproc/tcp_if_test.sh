#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TW_TCP_IF: an all-to-all over TCP listening on the first non-loopback
# interface that is up with an address (the log must show the lanes
# listening there), and a clear error for an interface that does not
# exist. Skips (77) the first part on a machine without such an interface.
#   tcp_if_test.sh TWRUN TEST_ALLTOALL
set -eu
twrun=$1 prog=$2
PATH=$PATH:/usr/sbin:/sbin
export TW_TRANSPORTS=tcp
. "$(dirname "$0")/mp_lib.sh"

# A name that matches nothing: tw_init fails and says why.
expect_refused TW_TCP_IF=nosuch0 "TW_TCP_IF='nosuch0' matches no interface" \
  "$twrun" -n 2 "$prog" -t 1 -m 1

command -v ip >/dev/null || { echo "SKIP: ip is not installed (apt-get install iproute2)"; exit 77; }
# First interface other than lo with an IPv4 or global IPv6 address.
read -r ifname addr < <(ip -o addr show up | awk '$2 != "lo" && ($3 == "inet" || ($3 == "inet6" && $0 ~ /scope global/)) { sub(/\/.*/, "", $4); print $2, $4; exit }') || true
[ -n "${ifname:-}" ] || { echo "SKIP: no interface but lo has an address"; exit 77; }
if ! out=$(TW_TCP_IF=$ifname TW_LOG_LEVEL=debug "$twrun" -n 2 "$prog" -t 2 2>&1); then
  echo "$out"; echo "FAIL: all-to-all with TW_TCP_IF=$ifname"; exit 1
fi
grep -q "listening on \[\?$addr\]\?:" <<<"$out" ||
  { echo "$out" | grep -i tcp; echo "FAIL: no lane listened on $addr ($ifname)"; exit 1; }
if grep -q "listening on 127.0.0.1" <<<"$out"; then
  fail "listened on loopback although TW_TCP_IF=$ifname"
fi
echo "TW_TCP_IF=$ifname: all-to-all passed, lanes listened on $addr"
