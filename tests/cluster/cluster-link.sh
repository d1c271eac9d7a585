#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Cuts or restores an emulated node's link (run-cluster.sh), with nftables
# inside that node's network namespace: every packet in or out of its eth0
# (the veth to the bridge) is dropped and counted; loopback keeps working.
#   cluster-link.sh down NODE      cut (idempotent)
#   cluster-link.sh up NODE        restore
#   cluster-link.sh dropped NODE   packets dropped since the cut (0 when up)
# Usable from anywhere inside the scenario (any node, the head, a rank).
set -euo pipefail
die() { echo "cluster-link: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: cluster-link.sh down|up|dropped NODE"
op=$1 node=$2
[ -e "/run/netns/$node" ] || die "no network namespace for node '$node'"
in_node() { ip netns exec "$node" "$@"; }
cut_on() { in_node nft list table inet twcut >/dev/null 2>&1; }

case $op in
  down)
    cut_on && exit 0
    in_node nft -f - <<'NFT'
table inet twcut {
  chain cut_in {
    type filter hook input priority -10; policy accept;
    iifname "eth0" counter drop
  }
  chain cut_out {
    type filter hook output priority -10; policy accept;
    oifname "eth0" counter drop
  }
}
NFT
    ;;
  up)
    if cut_on; then in_node nft delete table inet twcut; fi
    ;;
  dropped)
    if cut_on; then
      in_node nft list table inet twcut |
        awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") n += $(i + 1) }
             END { print n + 0 }'
    else
      echo 0
    fi
    ;;
  *) die "unknown operation '$op' (down, up, dropped)" ;;
esac
