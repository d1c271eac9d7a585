# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Shared by the scripts here that look at a job's TCP connections between
# the nodes (sourced, bash). The ranks leave their pid in a directory DIR
# both the driver and the scenario see, as the first word of DIR/rankR.EXT
# (tw_mp_rank's rankR.up, cluster_hold's rankR.held, cluster_rank.sh's
# rankR.where).

# The node (1..N) of rank R among P ranks on N nodes: block placement, the
# first P mod N nodes one rank more (run-cluster.sh's slots_of).
node_of() { # R P N
  local r=$1 p=$2 n=$3 k=1 first=0 slots
  while :; do
    slots=$((p / n + (k <= p % n ? 1 : 0)))
    [ "$r" -lt $((first + slots)) ] && { echo $k; return; }
    first=$((first + slots)) k=$((k + 1))
  done
}

# True when rank R is its node's leader (the node's lowest rank).
is_leader() { # R P N
  [ "$1" -eq 0 ] || [ "$(node_of $(($1 - 1)) "$2" "$3")" != "$(node_of "$1" "$2" "$3")" ]
}

# Pairs "A B" (A < B) of ranks on different nodes that must be connected:
# direct, every such pair; leader, the pairs of the nodes' lowest ranks.
want_pairs() { # direct|leader P N
  local mode=$1 p=$2 n=$3 a b
  for ((a = 0; a < p; a++)); do
    for ((b = a + 1; b < p; b++)); do
      [ "$(node_of $a "$p" "$n")" != "$(node_of $b "$p" "$n")" ] || continue
      if [ "$mode" = leader ]; then
        is_leader $a "$p" "$n" && is_leader $b "$p" "$n" || continue
      fi
      echo "$a $b"
    done
  done
}

# The established TCP connections between ranks on different nodes, from
# `ss` in every node's namespace (run inside the scenario), seen from each
# end: one line "A B LOCAL PEER" per socket of rank A whose peer is a
# socket of rank B (addr:port each). Both ends must be sockets of the
# ranks' pids, so the launcher's own connections (orted, slurmd, PMIx)
# never count.
conn_ends() { # DIR EXT
  local dir=$1 ext=$2 f r n
  {
    for f in "$dir"/rank*."$ext"; do
      r=${f##*/rank}
      echo "rank ${r%."$ext"} $(head -n1 "$f" | awk '{ print $1 }')"
    done
    for n in $TWCLUSTER_NODES; do
      ip netns exec "$n" ss -tnpH state established | sed "s/^/sock /"
    done
  } | awk '
    $1 == "rank" { rank[$3] = $2; next }
    $1 == "sock" && match($0, /pid=[0-9]+/) {
      pid = substr($0, RSTART + 4, RLENGTH - 4)
      split($4, l, ":"); split($5, p, ":")
      if ((pid in rank) && l[1] != p[1]) side[$4 " " $5] = rank[pid]
    }
    END {
      for (k in side) {
        split(k, e, " ")
        if ((e[2] " " e[1]) in side) print side[k], side[e[2] " " e[1]], k
      }
    }'
}

# The same, one line "A B" (A < B) per connection, sorted.
rank_conns() { # DIR EXT
  conn_ends "$@" | awk '$1 < $2 { print $1, $2 }' | sort -n -k1,1 -k2,2
}

# rank_conns until two readings 200 ms apart agree (a connection that lost
# a simultaneous connect is closed within a moment), at most 3 s.
stable_conns() { # DIR EXT
  local a b
  a=$(rank_conns "$@")
  for _ in $(seq 15); do
    sleep 0.2
    b=$(rank_conns "$@")
    [ "$a" != "$b" ] || break
    a=$b
  done
  echo "$a"
}

# Waits up to S seconds for N files DIR/rank*.EXT; true when all are there.
wait_ranks() { # DIR EXT N S
  for _ in $(seq $(($4 * 10))); do
    [ "$(ls "$1"/rank*."$2" 2>/dev/null | wc -l)" -eq "$3" ] && return 0
    sleep 0.1
  done
  return 1
}

# Compares the connections in file CONNS with want_pairs MODE P N; prints
# what differs and returns 1 when they differ.
check_pairs() { # CONNS MODE P N WHAT
  local conns=$1 want
  want=$(want_pairs "$2" "$3" "$4")
  [ "$(cat "$conns")" = "$want" ] && return 0
  echo "$5: connections between the nodes (rank rank), counted vs wanted:"
  diff <(cat "$conns") <(echo "$want") | sed -n 's/^[<>]/  &/p'
  return 1
}
