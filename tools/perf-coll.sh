#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Collectives beside Open MPI, measured in the same run so the ratios hold
# on a shared, noisy machine: tw_coll_perf under twrun against
# tools/bench-peers/mpi_coll.c (built with mpicc into a temp dir), the same
# OSU loop (tools/perf/coll_bench.h: t0; collective; t1; barrier; the
# average over ranks of each rank's mean). Open MPI 4.1 (Debian's) runs
# over ob1 with the vader (shared-memory) BTL in two configurations:
#   tuned  its default collective component (coll/tuned);
#   sm     coll/sm forced (--mca coll_sm_priority 100; checked to be the
#          component selected, else the column is left out).
#   floor  tools/bench-peers/floor_coll.c, the same loop over nothing but
#          the medium, no library in the timed path: a shared cache line
#          per rank (pin) or one TCP socket spun on with recv(2)
#          (cluster, 1 rank a node); barrier, bcast and allreduce of 8
#          and 64 B only, 2 ranks only. What no library can beat: tw/floor
#          is how far above it threadwire is.
# Each measurement runs REPS times (default 3), alternating tuned, sm,
# floor and threadwire, at high priority in its own autogroup; the tables
# show medians and threadwire / each other column. Latencies in us: below
# 1 is threadwire faster; rates (k collectives/s) and overlap (%): above
# 1 is.
#   tools/perf-coll.sh [BUILD_DIR]       (default build/release)
#   REPS=N  SECTIONS="pin over threads overlap cluster" (default: all)
#   CLUSTER_BIND=node|none (cluster: default node)
#   CLUSTER_CC=host|NAME (cluster: the nodes' TCP congestion control)
# Sections:
#   pin      2 processes bound one per core (twrun --bind core, mpirun
#            --bind-to core): barrier; bcast and allreduce at 8 B, 64 B,
#            1 KiB, 64 KiB, 1 MiB; reduce at 8 B and 64 KiB.
#   over     the same rows, 4 processes on the 2 cores (oversubscribed),
#            pinned 2 per core alike (mpirun --map-by core:OVERSUBSCRIBE
#            --bind-to core:overload-allowed); and a second table of whole
#            iterations (the collective and the barrier after it: the
#            loop's throughput; the latency of one collective there says
#            as much about where a library makes its members wait).
#   threads  -t 2: two threads per process, each on its own communicator
#            (MPI_Comm_dup, MPI_THREAD_MULTIPLE) or group (tw_group_create);
#            the aggregate rate of a process beside its one-thread rate,
#            threadwire in runs of 500000 iterations (20000 at 64 KiB),
#            Open MPI in runs of 20000 (500), long enough for the threads'
#            turns on a core. Both threads of a process
#            share its core. Open MPI tuned
#            is bimodal there: in some runs one thread takes ms per
#            collective (its partner's core is busy with the other thread;
#            mpi_yield_when_idle does not change it), so its median can
#            swing between reps.
#   overlap  iallreduce of 64 KiB as osu_iallreduce: the pure collective,
#            and how much of an equally long computation it hides, without
#            tests (OSU's default) and with 8 (-P 8: MPI_Test / tw_cq_poll).
#   cluster  pin's rows across 2 emulated nodes (tests/cluster/run-cluster.sh
#            --launcher mpirun: each node a network namespace with its own
#            address, the job started by a real mpirun), 2 ranks (one per
#            node) and 4 (two per node), each node's ranks bound to a core
#            of their own (CLUSTER_BIND=node, below; none: unbound),
#            their TCP congestion control the host's (CLUSTER_CC=host)
#            or the one named, for both libraries (below).
#            Open MPI tuned over ob1 with the tcp BTL between the
#            nodes and vader within one (with 4 ranks yielding when idle,
#            as over's oversubscribed mapping makes it); threadwire
#            bootstraps through PMIx, shm within a node, tcp between the
#            nodes. No sm column (coll/sm is for one node). Needs root; a
#            few seconds a launch.
#            nodes2, its former name, still selects it.
# Every run sweeps 8 B .. 1 MiB (one line per size) with OSU's iteration
# counts; the rows pick sizes from it. Needs openmpi-bin and libopenmpi-dev
# for the Open MPI columns; without them, or without a tw_coll_perf in
# BUILD_DIR, the table has the other columns only. About 1 minute a rep on
# 2 cores for the one-node sections, half a minute for cluster.
# For tools/report.sh: MEDIANS=FILE also writes every median there, one a
# line: SECTION|IMPL|OP|BYTES|METRIC|MEDIAN (SECTION as below, or
# threads1/2, overlap8, cluster2/4; IMPL tuned, sm, floor or tw; BYTES 0 for
# barrier; METRIC lat, loop in us, rate in k/s, ovl in %), sorted; ITERS=N
# runs every measurement N iterations (a quick check; figures then mean
# little).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
reps=${REPS:-3}
sections=${SECTIONS:-pin over threads overlap cluster}
sections=${sections//nodes2/cluster} # the cluster section's former name
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-coll.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log # output of a failed run, echoed to stderr
# hiprio, median, ratio, fail, ompi_build, ompi_shm
. tools/perf-lib.sh

pin=(--bind-to core)
over=(--map-by core:OVERSUBSCRIBE --bind-to core:overload-allowed)
sm=(--mca coll_sm_priority 100)
impls=()
if ompi_build mpi_coll; then
  impls=(tuned sm)
  # coll/sm must be what the benchmark's communicators use: a world and a
  # dup per rank, each "selecting sm, priority 100, Enabled".
  ompi_shm 2 "${pin[@]}" "${sm[@]}" --mca coll_base_verbose 100 "$tmp/mpi_coll" -c barrier \
    -i 10 -x 1 >"$tmp/sm.out" || true
  n=$(cat "$tmp/sm.out" "$log" |
    grep -cE 'coll:base:comm_select: selecting +sm, priority +100, Enabled') || true
  if [ "${n:-0}" -lt 4 ]; then
    echo "perf-coll: coll/sm was not selected (--mca coll_sm_priority 100): no sm column" >&2
    impls=(tuned)
  fi
  ! ompi_build floor_coll || impls+=(floor)
fi
if [ -x "$build/tools/tw_coll_perf" ] && [ -x "$build/tools/twrun" ]; then
  impls+=(tw)
else
  echo "perf-coll: no $build/tools/tw_coll_perf (cmake --build $build --target tw_coll_perf" \
    "twrun): no threadwire column" >&2
fi
[ ${#impls[@]} -gt 0 ] || exit 2
declare -A name=([tuned]="OMPI tuned" [sm]="OMPI sm" [floor]="raw floor" [tw]=threadwire)

declare -A r
# record KEY: the lines of a run on stdin; per size, its average latency,
# rate, whole-iteration time and overlap appended to
# r[KEY.SIZE.lat|rate|loop|ovl].
record() {
  local tag size avg rate loop ovl
  while IFS=, read -r tag _ _ size _ _ _ avg _ _ rate loop _ ovl; do
    [ "$tag" = coll ] || continue
    r[$1.$size.lat]+="$avg "
    r[$1.$size.rate]+="$rate "
    r[$1.$size.loop]+="$loop "
    r[$1.$size.ovl]+="$ovl "
  done
}
# cluster PROCS PROGRAM ARGS...: PROCS ranks across 2 emulated nodes,
# started by mpirun (block placement: PROCS / 2 a node), at high priority.
# Stdout is the ranks' (rank 0 prints the figures); stderr (the driver's,
# mpirun's and the ranks') goes to $log.
# CLUSTER_BIND=node (the default) binds every rank to its node's CPU (node
# K: CPU K-1, modulo the CPUs), as if each emulated node had a core of its
# own: 1 rank a node then runs like ranks on two machines, 2 a node share
# their node's core (oversubscribed within the node). CLUSTER_BIND=none
# leaves them to the kernel, which may place ranks of both nodes on one
# core and keep them there for a whole run (their waits sleep, so the
# load balancer sees no imbalance): a bimodal figure.
# CLUSTER_CC=NAME sets net.ipv4.tcp_congestion_control in every node's
# namespace before the rank starts (so for every connection of both
# libraries; host: the host's, which a new namespace inherits). It
# matters: bbr caps what is in flight at about two of the round trips it
# measured idle, and these nodes' round trips grow many times over while
# their one core is busy, so large transfers between busy nodes slow
# (tw allreduce 1 MiB 607 us under bbr, 329 under reno, Open MPI's 390
# under bbr; the tcp transport's own TW_TCP_CONGESTION sets threadwire's
# alone).
cluster_bind=${CLUSTER_BIND:-node}
case $cluster_bind in node | none) ;; *) echo "perf-coll: CLUSTER_BIND=node|none" >&2; exit 2 ;; esac
cluster_cc=${CLUSTER_CC:-host}
if [ "$cluster_cc" != host ] && ! grep -qw -- "$cluster_cc" /proc/sys/net/ipv4/tcp_available_congestion_control; then
  echo "perf-coll: CLUSTER_CC=$cluster_cc is not in $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)" >&2
  exit 2
fi
cat >"$tmp/nodecpu" <<EOS
#!/bin/sh
[ "$cluster_cc" = host ] || sysctl -qw net.ipv4.tcp_congestion_control=$cluster_cc || exit 1
[ "$cluster_bind" = none ] && exec "\$@"
k=\$(hostname)
exec taskset -c \$(((\${k#n} - 1) % \$(nproc))) "\$@"
EOS
chmod +x "$tmp/nodecpu"
cluster() {
  local n=$1 pre=()
  shift
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  set -- "$tmp/nodecpu" "$@"
  hiprio tests/cluster/run-cluster.sh --launcher mpirun --nodes 2 --np "$n" --timeout 120 \
    "${pre[@]}" -- "$@" 2>"$log"
}
# Open MPI across the emulated nodes: ob1, tcp between them, vader within.
# With 4 ranks it yields when idle, as over's --map-by core:OVERSUBSCRIBE
# makes it: mpirun sees 2 slots a node, not that the nodes share 2 cores,
# and its busy polling then starves the ranks (barrier ~20 ms, not ~70 us).
ompi_net=(--env OMPI_MCA_pml=ob1 --env "OMPI_MCA_btl=tcp,vader,self")

# run SEC IMPL PROCS ARGS...: one run of the collective benchmark, its
# figures recorded under SEC.IMPL.OP (OP: the -c argument). SEC cluster2,
# cluster4: across the emulated nodes.
run() {
  local sec=$1 impl=$2 n=$3 out op
  shift 3
  op=$2
  local ompi=("${pin[@]}")
  [ "$n" -le 2 ] || ompi=("${over[@]}")
  [ -z "${ITERS:-}" ] || set -- "$@" -i "$ITERS" -x 1 # the last -i wins
  case $sec.$impl in
    cluster*.tw) out=$(cluster "$n" -- "$build/tools/tw_coll_perf" "$@") || true ;;
    cluster*.floor) out=$(cluster "$n" "${ompi_net[@]}" -- "$tmp/floor_coll" "$@") || true ;;
    cluster*.tuned)
      out=$(cluster "$n" "${ompi_net[@]}" --env OMPI_MCA_mpi_yield_when_idle=$((n > 2)) \
        -- "$tmp/mpi_coll" "$@") || true ;;
    *.tw)
      out=$(hiprio timeout 120 "$build/tools/twrun" -n "$n" --bind core \
        "$build/tools/tw_coll_perf" "$@" 2>"$log") || true ;;
    *.tuned) out=$(ompi_shm "$n" "${ompi[@]}" "$tmp/mpi_coll" "$@") || true ;;
    *.sm) out=$(ompi_shm "$n" "${ompi[@]}" "${sm[@]}" "$tmp/mpi_coll" "$@") || true ;;
    *.floor) out=$(ompi_shm "$n" "${ompi[@]}" "$tmp/floor_coll" "$@") || true ;;
  esac
  grep -q '^coll,' <<<"$out" || fail "$sec: ${name[$impl]} -n $n $*"
  record "$sec.$impl.$op" <<<"$out"
}

sweep=(-m 8:1m)
for rep in $(seq "$reps"); do
  for sec in $sections; do
    echo "perf-coll: rep $rep/$reps: $sec ($(date +%T))" >&2
    for impl in "${impls[@]}"; do
      if [ "$impl" = floor ]; then
        # 2 ranks and the small rows only; pin and cluster (1 rank a node).
        case $sec in
          pin | cluster)
            [ "$sec" = pin ] && s=pin || s=cluster2
            run "$s" floor 2 -c barrier
            for op in bcast allreduce; do run "$s" floor 2 -c $op -m 8:64; done ;;
        esac
        continue
      fi
      case $sec in
        pin | over)
          n=2
          [ "$sec" = pin ] || n=4
          run "$sec" "$impl" $n -c barrier
          for op in bcast allreduce reduce; do run "$sec" "$impl" $n -c $op "${sweep[@]}"; done ;;
        threads)
          # Longer runs than pin's: the threads take turns on a core for
          # ms, so a run must span many turns -- threadwire's 20000 small
          # collectives took 4 ms, and its 2-thread/1-thread ratio then
          # went from 0.45 to 2.1 between runs. Open MPI keeps the shorter
          # runs: with two threads tuned starves for ms per collective
          # (20000 take minutes). Each ratio is within one library.
          small=20000 big=500
          [ "$impl" != tw ] || small=500000 big=20000
          for t in 1 2; do
            run threads$t "$impl" 2 -c barrier -t $t -i $small
            run threads$t "$impl" 2 -c allreduce -m 8:8 -t $t -i $small
            run threads$t "$impl" 2 -c allreduce -m 64k:64k -t $t -i $big
          done ;;
        overlap)
          run overlap "$impl" 2 -c iallreduce -m 64k:64k
          run overlap8 "$impl" 2 -c iallreduce -m 64k:64k -P 8 ;;
        cluster)
          [ "$impl" != sm ] || continue # coll/sm: within one node only
          for n in 2 4; do
            run cluster$n "$impl" $n -c barrier
            for op in bcast allreduce reduce; do run cluster$n "$impl" $n -c $op "${sweep[@]}"; done
          done ;;
      esac
    done
  done
done

m() { tr ' ' '\n' <<<"${r[$1]:-}" | awk 'NF && $1 != "-"' | median; }
if [ -n "${MEDIANS:-}" ]; then
  # m of every key in one awk (m per key forks 4 times: ~20 s on 2 busy cores).
  for k in "${!r[@]}"; do echo "${k//./|} ${r[$k]}"; done | awk '
    { n = 0
      for (i = 2; i <= NF; i++) if ($i != "-") {
        for (j = n++; j > 0 && v[j] + 0 > $i + 0; j--) v[j + 1] = v[j]
        v[j + 1] = $i }
      print $1 "|" (n == 0 ? "-" : n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2) }' |
    sort -t'|' -k1,3 -k4,4n -k5 >"$MEDIANS"
fi
sz() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else if (b >= 1024)
  printf "%d KiB", b / 1024; else printf "%d B", b }'; }
# The columns of the table being printed: impls (cluster: but sm; floor:
# pin and 1 rank a node only).
cols=("${impls[@]}")
# but IMPL...: set cols to impls without those named.
but() {
  local i x keep
  cols=()
  for i in "${impls[@]}"; do
    keep=1
    for x in "$@"; do [ "$i" != "$x" ] || keep=0; done
    [ "$keep" = 0 ] || cols+=("$i")
  done
}
# The congestion control the emulated nodes ran.
cluster_cc_name() {
  if [ "$cluster_cc" = host ]; then
    echo "$(cat /proc/sys/net/ipv4/tcp_congestion_control) (the host's)"
  else
    echo "$cluster_cc (CLUSTER_CC)"
  fi
}
header() {
  echo
  echo "== $1"
  printf '%-40s' "measurement (medians of $reps)"
  for i in "${cols[@]}"; do printf ' %11s' "${name[$i]}"; done
  for i in "${cols[@]}"; do [ "$i" = tw ] || printf ' %9s' "tw/${i}"; done
  echo
}
# row LABEL KEY_OF_EACH_IMPL...: KEY with IMPL standing for the impl, e.g.
# pin.IMPL.bcast.8.lat; a value per impl, then threadwire / each peer.
row() {
  local label=$1 key=$2 i t
  declare -A val
  for i in "${cols[@]}"; do val[$i]=$(m "${key//IMPL/$i}"); done
  t=${val[tw]:--}
  printf '%-40s' "$label"
  for i in "${cols[@]}"; do printf ' %11s' "${val[$i]}"; done
  for i in "${cols[@]}"; do [ "$i" = tw ] || printf ' %9s' "$(ratio "$t" "${val[$i]}")"; done
  echo
}
# The latency rows of pin, over, cluster2 and cluster4 (METRIC: lat, or
# loop for whole iterations).
lat_rows() { # SEC [METRIC]
  local x=${2:-lat}
  row "barrier, us" "$1.IMPL.barrier.0.$x"
  for op in bcast allreduce; do
    for b in 8 64 1024 65536 1048576; do row "$op $(sz $b), us" "$1.IMPL.$op.$b.$x"; done
  done
  for b in 8 65536; do row "reduce $(sz $b), us" "$1.IMPL.reduce.$b.$x"; done
}

for sec in $sections; do
  but floor
  case $sec in
    pin)
      cols=("${impls[@]}")
      header "2 processes, one per core: latency"
      lat_rows pin ;;
    over)
      header "4 processes on 2 cores (oversubscribed, 2 per core): latency"
      lat_rows over
      header "4 processes on 2 cores: whole iterations (the collective + a barrier)"
      lat_rows over loop ;;
    threads)
      header "-t 2: aggregate rate of a process, k collectives/s (long runs)"
      for b in 0 8 65536; do
        op=allreduce
        [ $b != 0 ] || op=barrier
        l="$op$([ $b = 0 ] || echo " $(sz $b)")"
        row "$l, 1 thread" "threads1.IMPL.$op.$b.rate"
        row "$l, 2 threads" "threads2.IMPL.$op.$b.rate"
      done ;;
    overlap)
      header "iallreduce 64 KiB, 2 processes (as osu_iallreduce)"
      row "pure iallreduce + wait, us" "overlap.IMPL.iallreduce.65536.lat"
      row "overlap, %, no tests" "overlap.IMPL.iallreduce.65536.ovl"
      row "overlap, %, 8 tests (-P 8)" "overlap8.IMPL.iallreduce.65536.ovl" ;;
    cluster)
      but sm
      header "2 emulated nodes (network namespaces, mpirun): 1 rank per node, congestion control $(cluster_cc_name)"
      lat_rows cluster2
      but sm floor
      header "2 emulated nodes (network namespaces, mpirun): 2 ranks per node"
      lat_rows cluster4 ;;
  esac
done
