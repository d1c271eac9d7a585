#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A cut link really stops traffic, and only that node's: inside an emulated
# cluster of 3 nodes (run-cluster.sh --launcher none --nodes 3 -- this),
# every node serves TCP; each node connects to each other node. Then n2's
# link is cut (cluster-link.sh down n2): every pair with n2 must fail, the
# cut must have dropped packets, n1 <-> n3 must still work; after the
# restore every pair works again.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
[ -n "${TWCLUSTER_NODES:-}" ] || fail "run me with run-cluster.sh --launcher none"
link=$TWCLUSTER_LINK
port=7411
servers=()

# A server in each node that answers every connection with the node's name.
for n in $TWCLUSTER_NODES; do
  ip netns exec "$n" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    c.sendall((sys.argv[2] + "\n").encode())
    c.close()
' "$port" "$n" &
  servers+=($!)
done
trap 'kill "${servers[@]}" 2>/dev/null; wait 2>/dev/null' EXIT

# talk FROM TO: what TO's server answers FROM (empty if nothing in 2 s).
talk() {
  ip netns exec "$1" timeout 2 bash -c \
    'exec 3<>"/dev/tcp/$0/$1" && read -r line <&3 && echo "$line"' "$2" "$port" 2>/dev/null
}
# pairs WANT: every ordered pair of nodes; WANT is "ok" or "cut:NODE"
# (pairs with NODE must fail, the others must work).
pairs() {
  local want=$1 a b got bad=0
  for a in $TWCLUSTER_NODES; do
    for b in $TWCLUSTER_NODES; do
      [ "$a" != "$b" ] || continue
      got=$(talk "$a" "$b")
      if [ "$want" = "cut:$a" ] || [ "$want" = "cut:$b" ]; then
        [ -z "$got" ] || { echo "  $a -> $b: answered '$got' through a cut link"; bad=1; }
      else
        [ "$got" = "$b" ] || { echo "  $a -> $b: got '$got', want '$b'"; bad=1; }
      fi
    done
  done
  return $bad
}

# The servers take a moment to listen.
for t in $(seq 50); do
  [ "$(talk n1 n2)" = n2 ] && [ "$(talk n1 n3)" = n3 ] && break
  sleep 0.1
done
pairs ok || fail "before the cut, some pairs did not talk"
echo "ok: all 6 ordered pairs of n1 n2 n3 talk over the bridge"

"$link" down n2 || fail "cluster-link.sh down n2"
pairs cut:n2 || fail "with n2's link cut"
dropped=$("$link" dropped n2)
[ "$dropped" -gt 0 ] || fail "the cut dropped no packet"
echo "ok: n2 cut ($dropped packets dropped): n2's 4 pairs fail, n1 <-> n3 still talk"

"$link" up n2 || fail "cluster-link.sh up n2"
[ "$("$link" dropped n2)" -eq 0 ] || fail "the cut is still there after 'up'"
pairs ok || fail "after the restore"
echo "ok: n2 restored: all 6 pairs talk again"
