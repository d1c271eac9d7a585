#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The "remote shell" of an emulated cluster (run-cluster.sh): mpirun calls
# it as it would call ssh (--mca plm_rsh_agent), with ssh's options, a node
# name and the command that starts that node's daemon (orted):
#   cluster-agent.sh [ssh options] nK command...
# It runs the command inside node nK's network namespace (created by
# run-cluster.sh, /run/netns/nK) and a new UTS namespace whose hostname is
# nK, with TMPDIR set to the node's own directory. Works only inside the
# scenario run-cluster.sh set up (TWCLUSTER_DIR).
set -euo pipefail
die() { echo "cluster-agent: $*" >&2; exit 255; }

# ssh's options: those that take a value, then flags (-x, -T, -q, ...).
while [ $# -gt 0 ]; do
  case $1 in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    -[bcDEeFIiJLlmOopQRSWw]*) shift ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || die "usage: cluster-agent.sh [ssh options] NODE COMMAND..."
node=${1#*@} # ssh's user@host
shift
case $node in
  n[0-9]*) ;;
  *) die "'$node' is not an emulated node (n1, n2, ...)" ;;
esac
[ -n "${TWCLUSTER_DIR:-}" ] || die "not inside run-cluster.sh's scenario (TWCLUSTER_DIR unset)"
[ -e "/run/netns/$node" ] || die "no network namespace for node '$node'"
tmp=$TWCLUSTER_DIR/nodes/$node/tmp
mkdir -p "$tmp"

# ssh joins its arguments into one line for the remote shell: so do we.
exec ip netns exec "$node" unshare --uts -- env TMPDIR="$tmp" \
  sh -c 'hostname "$1" && cd / && eval "$2"' cluster-agent "$node" "$*"
