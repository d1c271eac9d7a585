#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# One rank of cluster_lifeline.sh: becomes `tw_mp_rank wait DIR 10
# lifeline.ms` (n1's ranks leave once the result is in; exec,
# so the rank's parent stays the launcher's PMIx server on its node: orted
# or slurmstepd). On node n2 it first leaves DIR/n2.PID, and the rank of
# local rank 0 there starts the killer: 3 s later (every rank joined) it
# SIGKILLs that server, then waits for every rank of n2 to exit and writes
# the slowest one's time in ms to DIR/lifeline.ms.
#   lifeline_rank.sh TW_MP_RANK DIR
rank=$1 dir=$2
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-}}
if [ "$(hostname)" = n2 ]; then
  : >"$dir/n2.$$"
  if [ "$local_rank" = 0 ]; then
    (
      sleep 3
      parent=$(ps -o ppid= -p $$ | tr -d ' ')
      t0=$(date +%s%N)
      kill -9 "$parent"
      for i in $(seq 200); do # 2 s at most
        alive=0
        for f in "$dir"/n2.*; do
          if kill -0 "${f##*.}" 2>/dev/null; then alive=1; fi
        done
        [ $alive = 1 ] || break
        sleep 0.01
      done
      t1=$(date +%s%N)
      [ $alive = 1 ] && echo "still alive 2 s after the server's death" >"$dir/lifeline.ms" ||
        echo $(((t1 - t0) / 1000000)) >"$dir/lifeline.ms"
    ) &
  fi
fi
exec "$rank" wait "$dir" 10 lifeline.ms
