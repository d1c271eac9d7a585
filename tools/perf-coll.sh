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
# Each measurement runs REPS times (default 3), alternating tuned, sm and
# threadwire, at high priority in its own autogroup; the tables show
# medians and threadwire / Open MPI. Latencies in us: below 1 is
# threadwire faster; rates (k collectives/s) and overlap (%): above 1 is.
#   tools/perf-coll.sh [BUILD_DIR]       (default build/release)
#   REPS=N  SECTIONS="pin over threads overlap nodes2" (default: all)
# Sections:
#   pin      2 processes bound one per core (twrun --bind core, mpirun
#            --bind-to core): barrier; bcast and allreduce at 8 B, 64 B,
#            1 KiB, 64 KiB, 1 MiB; reduce at 8 B and 64 KiB.
#   over     the same rows, 4 processes on the 2 cores (oversubscribed),
#            pinned 2 per core alike (mpirun --map-by core:OVERSUBSCRIBE
#            --bind-to core:overload-allowed).
#   threads  -t 2: two threads per process, each on its own communicator
#            (MPI_Comm_dup, MPI_THREAD_MULTIPLE) or group (tw_group_create);
#            the aggregate rate of a process beside the one-thread rate of
#            pin. Both threads of a process share its core. Open MPI tuned
#            is bimodal there: in some runs one thread takes ms per
#            collective (its partner's core is busy with the other thread;
#            mpi_yield_when_idle does not change it), so its median can
#            swing between reps.
#   overlap  iallreduce of 64 KiB as osu_iallreduce: the pure collective,
#            and how much of an equally long computation it hides, without
#            tests (OSU's default) and with 8 (-P 8: MPI_Test / tw_cq_poll).
#   nodes2   threadwire on 2 emulated nodes (TW_NODE_ID=0,1: one rank per
#            node, the collectives go between node leaders over the network
#            transport); Open MPI runs on one machine the same either way,
#            so its columns repeat pin's figures (with pin in SECTIONS).
# Every run sweeps 8 B .. 1 MiB (one line per size) with OSU's iteration
# counts; the rows pick sizes from it. Needs openmpi-bin and libopenmpi-dev
# for the Open MPI columns; without them, or without a tw_coll_perf in
# BUILD_DIR, the table has the other columns only. About 1 minute a rep on
# 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
reps=${REPS:-3}
sections=${SECTIONS:-pin over threads overlap nodes2}
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
fi
if [ -x "$build/tools/tw_coll_perf" ] && [ -x "$build/tools/twrun" ]; then
  impls+=(tw)
else
  echo "perf-coll: no $build/tools/tw_coll_perf (cmake --build $build --target tw_coll_perf" \
    "twrun): no threadwire column" >&2
fi
[ ${#impls[@]} -gt 0 ] || exit 2
declare -A name=([tuned]="OMPI tuned" [sm]="OMPI sm" [tw]=threadwire)

declare -A r
# record KEY: the lines of a run on stdin; per size, its average latency,
# rate and overlap appended to r[KEY.SIZE.lat|rate|ovl].
record() {
  local tag size avg rate ovl
  while IFS=, read -r tag _ _ size _ _ _ avg _ _ rate _ _ ovl; do
    [ "$tag" = coll ] || continue
    r[$1.$size.lat]+="$avg "
    r[$1.$size.rate]+="$rate "
    r[$1.$size.ovl]+="$ovl "
  done
}
# run SEC IMPL PROCS ARGS...: one run of the collective benchmark, its
# figures recorded under SEC.IMPL.OP (OP: the -c argument).
run() {
  local sec=$1 impl=$2 n=$3 out op
  shift 3
  op=$2
  local ompi=("${pin[@]}") env=()
  [ "$n" -le 2 ] || ompi=("${over[@]}")
  [ "$sec" != nodes2 ] || env=("TW_NODE_ID=0,1")
  case $impl in
    tw)
      out=$(hiprio env "${env[@]}" timeout 120 "$build/tools/twrun" -n "$n" --bind core \
        "$build/tools/tw_coll_perf" "$@" 2>"$log") || true ;;
    tuned) out=$(ompi_shm "$n" "${ompi[@]}" "$tmp/mpi_coll" "$@") || true ;;
    sm) out=$(ompi_shm "$n" "${ompi[@]}" "${sm[@]}" "$tmp/mpi_coll" "$@") || true ;;
  esac
  grep -q '^coll,' <<<"$out" || fail "$sec: ${name[$impl]} -n $n $*"
  record "$sec.$impl.$op" <<<"$out"
}

sweep=(-m 8:1m)
for rep in $(seq "$reps"); do
  for sec in $sections; do
    echo "perf-coll: rep $rep/$reps: $sec ($(date +%T))" >&2
    for impl in "${impls[@]}"; do
      case $sec in
        pin | over)
          n=2
          [ "$sec" = pin ] || n=4
          run "$sec" "$impl" $n -c barrier
          for op in bcast allreduce reduce; do run "$sec" "$impl" $n -c $op "${sweep[@]}"; done ;;
        threads)
          run threads "$impl" 2 -c barrier -t 2
          run threads "$impl" 2 -c allreduce -m 8:8 -t 2
          run threads "$impl" 2 -c allreduce -m 64k:64k -t 2 ;;
        overlap)
          run overlap "$impl" 2 -c iallreduce -m 64k:64k
          run overlap8 "$impl" 2 -c iallreduce -m 64k:64k -P 8 ;;
        nodes2)
          [ "$impl" = tw ] || continue # Open MPI: the pin section's run
          run nodes2 tw 2 -c barrier
          for op in bcast allreduce reduce; do run nodes2 tw 2 -c $op "${sweep[@]}"; done ;;
      esac
    done
  done
done

m() { tr ' ' '\n' <<<"${r[$1]:-}" | awk 'NF && $1 != "-"' | median; }
sz() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else if (b >= 1024)
  printf "%d KiB", b / 1024; else printf "%d B", b }'; }
header() {
  echo
  echo "== $1"
  printf '%-40s' "measurement (medians of $reps)"
  for i in "${impls[@]}"; do printf ' %11s' "${name[$i]}"; done
  for i in "${impls[@]}"; do [ "$i" = tw ] || printf ' %9s' "tw/${i}"; done
  echo
}
# row LABEL KEY_OF_EACH_IMPL...: KEY with IMPL standing for the impl, e.g.
# pin.IMPL.bcast.8.lat; a value per impl, then threadwire / each peer.
row() {
  local label=$1 key=$2 i t
  declare -A val
  for i in "${impls[@]}"; do val[$i]=$(m "${key//IMPL/$i}"); done
  t=${val[tw]:--}
  printf '%-40s' "$label"
  for i in "${impls[@]}"; do printf ' %11s' "${val[$i]}"; done
  for i in "${impls[@]}"; do [ "$i" = tw ] || printf ' %9s' "$(ratio "$t" "${val[$i]}")"; done
  echo
}
# The latency rows of pin, over and nodes2.
lat_rows() { # SEC
  row "barrier, us" "$1.IMPL.barrier.0.lat"
  for op in bcast allreduce; do
    for b in 8 64 1024 65536 1048576; do row "$op $(sz $b), us" "$1.IMPL.$op.$b.lat"; done
  done
  for b in 8 65536; do row "reduce $(sz $b), us" "$1.IMPL.reduce.$b.lat"; done
}

for sec in $sections; do
  case $sec in
    pin)
      header "2 processes, one per core: latency"
      lat_rows pin ;;
    over)
      header "4 processes on 2 cores (oversubscribed, 2 per core): latency"
      lat_rows over ;;
    threads)
      header "-t 2: aggregate rate of a process, k collectives/s (1 thread: pin's runs)"
      for b in 0 8 65536; do
        op=allreduce
        [ $b != 0 ] || op=barrier
        l="$op$([ $b = 0 ] || echo " $(sz $b)")"
        row "$l, 1 thread" "pin.IMPL.$op.$b.rate"
        row "$l, 2 threads" "threads.IMPL.$op.$b.rate"
      done ;;
    overlap)
      header "iallreduce 64 KiB, 2 processes (as osu_iallreduce)"
      row "pure iallreduce + wait, us" "overlap.IMPL.iallreduce.65536.lat"
      row "overlap, %, no tests" "overlap.IMPL.iallreduce.65536.ovl"
      row "overlap, %, 8 tests (-P 8)" "overlap8.IMPL.iallreduce.65536.ovl" ;;
    nodes2)
      header "2 emulated nodes (TW_NODE_ID=0,1; Open MPI: pin's runs, one machine)"
      # Open MPI's columns from pin: copy its values under nodes2.
      for k in "${!r[@]}"; do
        [[ $k != pin.tw.* ]] && [[ $k == pin.* ]] && r[nodes2.${k#pin.}]=${r[$k]}
      done
      lat_rows nodes2 ;;
  esac
done
