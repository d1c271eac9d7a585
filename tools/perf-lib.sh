# shellcheck shell=bash
# shellcheck disable=SC2154 # tmp and log: the sourcing script sets them
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# What the tools/perf-*.sh scripts share; they source it from the top of the
# tree, after setting tmp (their temp dir) and log (where a run's stderr
# goes, shown when it fails). High priority, medians and ratios, the value
# of a tw_perf CSV row, Open MPI's peers built (tools/bench-peers/) and
# run, over its tcp BTL (mpi_pingpong.c) or shared memory (ompi_shm).

perf_name=${0##*/}
perf_name=${perf_name%.sh}

# Run at high priority in an autogroup of its own, so other load disturbs
# the measurement less.
hiprio() { setsid -w bash -c 'echo -20 > /proc/self/autogroup 2>/dev/null; exec nice -n -20 "$@"' hiprio "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b == 0 || a == "-") print "-"; else printf "%.2f", a / b }'; }
fail() { echo "$perf_name: $1 failed; its last lines:" >&2; tail -5 "$log" >&2; }

# tw_value KIND: from tw_perf's CSV 'all' row on stdin (test,size,threads,
# thread,iters,warmup,window,median,avg,min,max,bw,rate), the median
# latency in us (lat, put_lat, get_lat), the rate in M msg/s (rate) or the
# bandwidth in MB/s (bw, put_bw, get_bw).
tw_value() {
  case $1 in
    lat | put_lat | get_lat) awk -F, '{print $8}' ;;
    rate) awk -F, '{print $13}' ;;
    bw | put_bw | get_bw) awk -F, '{print $12}' ;;
  esac
}

# ompi_build PROG...: each tools/bench-peers/PROG.c into $tmp/PROG with
# mpicc; false (said why) without Open MPI (openmpi-bin, libopenmpi-dev) or
# when one does not compile.
ompi_build() {
  local p
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "$perf_name: no mpicc or mpirun (openmpi-bin, libopenmpi-dev): no OMPI column" >&2
    return 1
  fi
  for p in "$@"; do
    mpicc -O2 -o "$tmp/$p" "tools/bench-peers/$p.c" -lpthread 2>"$log" ||
      { fail "mpicc tools/bench-peers/$p.c"; return 1; }
  done
}

# ompi_shm NPROCS MPIRUN_OPTIONS... PROGRAM ARGS...: NPROCS ranks over Open
# MPI's shared-memory BTL (ob1, vader), at high priority, 120 s at most;
# binding and further --mca options are the caller's. Stderr goes to $log.
ompi_shm() {
  local n=$1
  shift
  hiprio timeout 120 mpirun --allow-run-as-root -np "$n" --mca pml ob1 --mca btl vader,self "$@" \
    2>"$log"
}

# ompi_pingpong KIND ARGS...: mpi_pingpong ARGS on two ranks over Open
# MPI's tcp BTL (ob1) on lo, one per core; of its CSV row (test,size,
# iterations,window,lat_median_us,lat_avg_us,bw_MBps,rate_Mmsgps) the
# value of KIND (lat, rate or bw, as tw_value), or nothing when it failed.
ompi_pingpong() {
  local kind=$1 row
  shift
  row=$(hiprio timeout 60 mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ob1 \
    --mca btl tcp,self --mca btl_tcp_if_include lo "$tmp/mpi_pingpong" "$@" \
    2>"$log" | awk -F, '$1 ~ /^(lat|rate|bw)$/') || true
  [ -n "$row" ] || return 0
  case $kind in
    lat) awk -F, '{print $5}' <<<"$row" ;;
    rate) awk -F, '{print $8}' <<<"$row" ;;
    bw) awk -F, '{print $7}' <<<"$row" ;;
  esac
}
