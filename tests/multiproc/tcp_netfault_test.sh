#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Network faults under a live TCP job: runs twrun -n 2 test_tcp_faults in a
# network namespace of its own (unshare -n, loopback up), where rank 0
# injects FAULT (blackhole or reset) with nftables mid-stream; see
# test_tcp_faults.c for what is checked. Needs root, unshare, ip and nft
# (apt-get install nftables iproute2); skips (77) with the reason otherwise.
#   tcp_netfault_test.sh TWRUN TEST_TCP_FAULTS FAULT
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
exec unshare -n bash -c 'ip link set lo up && exec "$0" -n 2 "$1"' "$twrun" "$prog"
