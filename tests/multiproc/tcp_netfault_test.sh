#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Network faults under a live TCP job, in a network namespace of its own
# (unshare -n, loopback up). FAULT blackhole or reset: twrun -n 2 PROG
# (test_tcp_faults), where rank 0 injects the fault with nftables
# mid-stream; see test_tcp_faults.c for what is checked. FAULT fallback:
# IPv4 connects are refused from the start (nftables), the ranks listen on
# lo's 127.0.0.1 and ::1 (TW_TCP_IF=lo), and PROG (test_alltoall) must pass
# through each peer's second address. Needs root, unshare, ip and nft
# (apt-get install nftables iproute2); skips (77) with the reason otherwise.
#   tcp_netfault_test.sh TWRUN PROG FAULT
set -eu
twrun=$1 prog=$2 fault=$3
PATH=$PATH:/usr/sbin:/sbin
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for a network namespace and nftables"
command -v nft >/dev/null || skip "nft is not installed (apt-get install nftables)"
command -v ip >/dev/null || skip "ip is not installed (apt-get install iproute2)"
unshare -n true 2>/dev/null || skip "unshare -n is not permitted here"
export TW_TRANSPORTS=tcp TWTEST_FAULT=$fault TWTEST_NFT
TWTEST_NFT=$(command -v nft)
if [ "$fault" != fallback ]; then
  # shellcheck disable=SC2016 # expanded by the inner shell
  exec unshare -n bash -c 'ip link set lo up && exec "$0" -n 2 "$1"' "$twrun" "$prog"
fi
# shellcheck disable=SC2016 # expanded by the inner shell
out=$(TW_TCP_IF=lo TW_LOG_LEVEL=debug unshare -n bash -c '
  ip link set lo up && nft -f - <<EOF && exec "$0" -n 2 "$1" -t 2
table inet twt {
 chain out {
  type filter hook output priority 0
  meta nfproto ipv4 tcp flags syn reject with tcp reset
 }
}
EOF' "$twrun" "$prog" 2>&1) || { echo "$out"; echo "FAIL: the job did not pass over IPv6"; exit 1; }
grep -q "trying its next address" <<<"$out" ||
  { echo "$out" | grep tcp; echo "FAIL: no connect fell back to the next address"; exit 1; }
grep "alltoall rank" <<<"$out"
echo "fallback: IPv4 connects refused, every rank reached over ::1"
