#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# tw_perf over one transport beside peers measured in the same run, so the
# ratios hold on a shared, noisy machine. Each measurement runs REPS times
# (default 5) at high priority in its own autogroup, alternating peers and
# threadwire; the table shows medians and threadwire / peer.
#   tools/perf-peers.sh shm|tcp|verbs [BUILD_DIR [BASE_BUILD_DIR]]
#   tools/perf-shm.sh, tools/perf-tcp.sh, tools/perf-verbs.sh (one transport each)
# BUILD_DIR defaults to build/release. With BASE_BUILD_DIR (another commit's
# Release build: git worktree add /tmp/tw-base <commit>; cmake -S /tmp/tw-base
# -B /tmp/tw-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release; ninja -C
# /tmp/tw-base/build tw_perf twrun), each rep also runs every threadwire row
# on that build, alternating, and the table adds its medians, new/base, and
# the spread of each build's runs ((max - min) / median).
#   shm  twrun -n 2 tw_perf (shm)   beside ucx_perftest, UCX_TLS=sm
#   tcp  TW_TRANSPORTS=tcp twrun -n 2 tw_perf   beside ucx_perftest, UCX_TLS=tcp
#        and UCX_NET_DEVICES=lo, and Open MPI's tcp BTL on lo running
#        tools/bench-peers/mpi_pingpong.c (built with mpicc in a temp dir)
#   verbs  TW_TRANSPORTS=verbs,self twrun -n 2 tw_perf, through the HCA's
#        loopback (one node), beside ucx_perftest with UCX_TLS=rc_v,self;
#        TW_VERBS_DEVICES (e.g. mlx5_0:1) picks the device for both. Rows
#        for 1, 4 and 8 thread pairs on the one HCA, and one-sided rows
#        (RDMA write / read) beside ucp_put_lat, ucp_put_bw and ucp_get.
#        For real hardware: figures from an emulated device (Soft-RoCE
#        under TCG) mean nothing.
# The poll-loop rows (tw_perf -l poll | compute:US) wait the way applications
# do, spinning on tw_cq_poll; a base build without an option a row uses
# (-l, --inject) shows "-" there. The inject rows send with tw_send_inject
# (no completion per send), as ucx_perftest's tag_bw sends (a small send
# completes in place, no request).
# Needs ucx-utils for the UCX column, openmpi-bin and libopenmpi-dev for the
# Open MPI one (tcp); a missing peer shows "-". About 15 s (shm) and
# 1.5 min (tcp) at REPS=5 on 2 cores.
# For tools/report.sh (which plots them), three more settings:
#   SWEEP=1   adds rows over message sizes (SIZES, bytes, default "8 64
#             512 4096 16384 65536 262144 1048576"): latency (manual and
#             progress thread, both spin) and bandwidth (manual spin,
#             progress thread default), and the 8 B rate over threads per
#             process (THREADS, default "1 2 4 8"; manual spin, progress
#             thread default) beside ucx_perftest -T (Open MPI's peer is
#             single-threaded: its 1-thread rate only). Kinds KIND.SIZE and
#             rate.tTHREADS; a run moves up to 1 GiB or 200000 messages.
#   MEDIANS=FILE  also writes the table to FILE, '|' between the fields,
#             with each row's kind first (header: kind|measurement|...).
#   ITERS=N   every run N iterations (a quick check of the pipeline; the
#             figures then mean little).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: tools/perf-peers.sh shm|tcp|verbs [BUILD_DIR [BASE_BUILD_DIR]]   (REPS=N, default 5)" >&2; exit 2; }
[ $# -ge 1 ] || usage
transport=$1
build=${2:-build/release}
base=${3:-}
reps=${REPS:-5}
for b in "$build" ${base:+"$base"}; do
  if [ ! -x "$b/tools/tw_perf" ] || [ ! -x "$b/tools/twrun" ]; then
    echo "build $b first (cmake --build $b --target tw_perf twrun)"
    exit 2
  fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-peers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log   # output of a failed run, echoed to stderr
# hiprio, median, ratio, fail, tw_value, ompi_build, ompi_pingpong
. tools/perf-lib.sh

# Per transport: threadwire's environment, the UCX transports, the peers and
# their runs (KIND = lat | rate | bw: 8 B latency in us, 8 B rate in
# M msg/s, 1 MiB bandwidth in MB/s; put_lat | get_lat: 8 B put or get to
# its completion in us; put_bw | get_bw: 1 MiB puts or gets in MB/s), and
# the threadwire rows as "KIND|label|tw_perf options". A peer runs the
# kinds it has arguments for; the others show "-". Iteration counts keep
# each run about a second at the speeds measured so far.
# One-sided peers: tw_perf's put_lat times one put to its completion, a
# round trip (the bytes are in place at the target), while ucp_put_lat
# ping-pongs puts and reports half the round trip: the UCX column shows
# twice its figure. ucp_get is one test for both: -O 1 times one get at a
# time (get_lat), -O 32 keeps 32 in flight (get_bw); ucp_put_bw -O 32
# likewise, where tw_perf posts windows of 32 (puts then a tw_flush); both
# move 20000 x 1 MiB.
declare -A peer_name ucx_args ompi_args
case $transport in
  shm)
    tw_env=()
    ucx_env=(UCX_TLS=sm)
    peers=(ucx)
    peer_name=([ucx]="UCX sm")
    ucx_args=([lat]="-t tag_lat -s 8 -n 100000" [rate]="-t tag_bw -s 8 -n 1000000"
      [bw]="-t tag_bw -s 1048576 -n 2000")
    rows=(
      "lat|8 B latency, us (manual progress, spin)|-x lat -s 8 -p 0 -m spin -n 100000"
      "lat|8 B latency, us (progress thread, spin)|-x lat -s 8 -m spin -n 20000"
      "lat|8 B latency, us (progress thread, adaptive)|-x lat -s 8 -n 20000"
      "lat|8 B latency, us (progress thread, poll loop)|-x lat -s 8 -l poll -n 20000"
      "lat|8 B latency, us (poll loop, 4 thr)|-x lat -s 8 -l poll -t 4 -n 20000"
      "lat|8 B latency, us (poll + 1 us compute)|-x lat -s 8 -l compute:1 -n 20000"
      "rate|8 B rate, M msg/s (manual, spin)|-x rate -s 8 -p 0 -m spin"
      "rate|8 B rate, M msg/s (manual, spin, inject)|-x rate -s 8 -p 0 -m spin --inject"
      "rate|8 B rate, M msg/s (progress thread)|-x rate -s 8"
      "rate|8 B rate, M msg/s (progress thread, inject)|-x rate -s 8 --inject"
      "rate|8 B rate, M msg/s (progress thread, 4 thr)|-x rate -s 8 -t 4"
      "rate|8 B rate, M msg/s (poll loop, 4 thr)|-x rate -s 8 -t 4 -l poll"
      "bw|1 MiB bandwidth, MB/s (manual, spin)|-x bw -s 1m -p 0 -m spin"
      "bw|1 MiB bandwidth, MB/s (progress thread)|-x bw -s 1m"
    ) ;;
  tcp)
    tw_env=(TW_TRANSPORTS=tcp)
    ucx_env=(UCX_TLS=tcp UCX_NET_DEVICES=lo)
    peers=(ucx ompi)
    peer_name=([ucx]="UCX tcp" [ompi]="OMPI tcp")
    ucx_args=([lat]="-t tag_lat -s 8 -n 20000" [rate]="-t tag_bw -s 8 -n 200000"
      [bw]="-t tag_bw -s 1048576 -n 1000")
    ompi_args=([lat]="-x lat -s 8 -n 20000" [rate]="-x rate -s 8 -n 3000"
      [bw]="-x bw -s 1048576 -n 100")
    rows=(
      "lat|8 B latency, us (manual progress, spin)|-x lat -s 8 -p 0 -m spin -n 20000"
      "lat|8 B latency, us (progress thread, spin)|-x lat -s 8 -m spin -n 20000"
      "lat|8 B latency, us (progress thread, adaptive)|-x lat -s 8 -n 20000"
      "lat|8 B latency, us (progress thread, poll loop)|-x lat -s 8 -l poll -n 20000"
      "rate|8 B rate, M msg/s (manual, spin)|-x rate -s 8 -p 0 -m spin"
      "rate|8 B rate, M msg/s (manual, spin, inject)|-x rate -s 8 -p 0 -m spin --inject"
      "rate|8 B rate, M msg/s (progress thread, spin)|-x rate -s 8 -m spin"
      "rate|8 B rate, M msg/s (progress thread)|-x rate -s 8"
      "rate|8 B rate, M msg/s (progress thread, 4 thr)|-x rate -s 8 -t 4"
      "bw|1 MiB bandwidth, MB/s (manual, spin)|-x bw -s 1m -p 0 -m spin -n 200"
      "bw|1 MiB bandwidth, MB/s (progress thread)|-x bw -s 1m -n 200"
    ) ;;
  verbs)
    tw_env=("TW_TRANSPORTS=verbs,self")
    ucx_env=("UCX_TLS=rc_v,self")
    if [ -n "${TW_VERBS_DEVICES:-}" ]; then
      dev=${TW_VERBS_DEVICES%%,*}
      [[ $dev == *:* ]] || dev=$dev:1
      ucx_env+=(UCX_NET_DEVICES="$dev")
    fi
    peers=(ucx)
    peer_name=([ucx]="UCX rc")
    ucx_args=([lat]="-t tag_lat -s 8 -n 100000" [rate]="-t tag_bw -s 8 -n 1000000"
      [bw]="-t tag_bw -s 1048576 -n 2000"
      [put_lat]="-t ucp_put_lat -s 8 -n 100000" [put_bw]="-t ucp_put_bw -s 1048576 -n 20000 -O 32"
      [get_lat]="-t ucp_get -s 8 -n 100000 -O 1" [get_bw]="-t ucp_get -s 1048576 -n 20000 -O 32")
    rows=(
      "lat|8 B latency, us (manual progress, spin)|-x lat -s 8 -p 0 -m spin -n 100000"
      "lat|8 B latency, us (progress thread, spin)|-x lat -s 8 -m spin -n 20000"
      "lat|8 B latency, us (progress thread, adaptive)|-x lat -s 8 -n 20000"
      "rate|8 B rate, M msg/s (manual, spin)|-x rate -s 8 -p 0 -m spin"
      "rate|8 B rate, M msg/s (progress thread, 1 thr/HCA)|-x rate -s 8"
      "rate|8 B rate, M msg/s (progress thread, 4 thr/HCA)|-x rate -s 8 -t 4"
      "rate|8 B rate, M msg/s (progress thread, 8 thr/HCA)|-x rate -s 8 -t 8"
      "bw|1 MiB bandwidth, MB/s (manual, spin)|-x bw -s 1m -p 0 -m spin -n 2000"
      "bw|1 MiB bandwidth, MB/s (progress thread)|-x bw -s 1m -n 2000"
      "put_lat|8 B put round trip, us (manual, spin)|-x put_lat -s 8 -p 0 -m spin -n 100000"
      "put_lat|8 B put round trip, us (progress thread)|-x put_lat -s 8 -n 20000"
      "put_bw|1 MiB put bandwidth, MB/s (manual, spin)|-x put_bw -s 1m -p 0 -m spin -n 625"
      "put_bw|1 MiB put bandwidth, MB/s (progress thread)|-x put_bw -s 1m -n 625"
      "get_lat|8 B get, us (manual, spin)|-x get_lat -s 8 -p 0 -m spin -n 100000"
      "get_lat|8 B get, us (progress thread)|-x get_lat -s 8 -n 20000"
      "get_bw|1 MiB get bandwidth, MB/s (manual, spin)|-x get_bw -s 1m -p 0 -m spin -n 625"
      "get_bw|1 MiB get bandwidth, MB/s (progress thread)|-x get_bw -s 1m -n 625"
    ) ;;
  *) usage ;;
esac

if [ -n "${SWEEP:-}" ]; then
  # sized ARGS SIZE ITERS: a peer's arguments for a kind with -s and -n
  # replaced.
  sized() { sed -E "s/-s [^ ]+/-s $2/; s/-n [^ ]+/-n $3/" <<<"$1"; }
  for size in ${SIZES:-8 64 512 4096 16384 65536 262144 1048576}; do
    # Messages per run: 1 GiB, within 2000 .. 200000 (latency: a tenth,
    # within 200 .. 20000 round trips); tw_perf's bw and mpi_pingpong's
    # count windows of 32.
    msgs=$(((1 << 30) / size))
    msgs=$((msgs < 2000 ? 2000 : msgs > 200000 ? 200000 : msgs))
    rt=$((msgs / 10 < 200 ? 200 : msgs / 10 > 20000 ? 20000 : msgs / 10))
    rows+=("lat.$size|$size B latency, us (manual, spin)|-x lat -s $size -p 0 -m spin -n $rt"
      "lat.$size|$size B latency, us (progress thread, spin)|-x lat -s $size -m spin -n $rt"
      "bw.$size|$size B bandwidth, MB/s (manual, spin)|-x bw -s $size -p 0 -m spin -n $((msgs / 32))"
      "bw.$size|$size B bandwidth, MB/s (progress thread)|-x bw -s $size -n $((msgs / 32))")
    ucx_args[lat.$size]=$(sized "${ucx_args[lat]}" "$size" $rt)
    ucx_args[bw.$size]=$(sized "${ucx_args[bw]}" "$size" $msgs)
    if [ -n "${ompi_args[lat]:-}" ]; then
      ompi_args[lat.$size]=$(sized "${ompi_args[lat]}" "$size" $rt)
      ompi_args[bw.$size]=$(sized "${ompi_args[bw]}" "$size" $((msgs / 32)))
    fi
  done
  # 192000 messages a run, shared by the threads.
  for t in ${THREADS:-1 2 4 8}; do
    n=$((6000 / t))
    rows+=("rate.t$t|8 B rate, M msg/s, $t thr (manual, spin)|-x rate -s 8 -p 0 -m spin -t $t -n $n"
      "rate.t$t|8 B rate, M msg/s, $t thr (progress thread)|-x rate -s 8 -t $t -n $n")
    ucx_args[rate.t$t]="$(sized "${ucx_args[rate]}" 8 $((32 * n))) -T $t"
    [ "$t" != 1 ] || [ -z "${ompi_args[rate]:-}" ] || ompi_args[rate.t1]=$(sized "${ompi_args[rate]}" 8 $n)
  done
fi
iters=() # ITERS: appended, the last -n wins
[ -z "${ITERS:-}" ] || iters=(-n "$ITERS")

# ucx_perftest pair on localhost, server on CPU 0, client on CPU 1; prints
# the client's final line (-f): iterations, p50 lat, avg lat, overall lat,
# avg bw, overall bw (2^20 B/s), avg rate, overall rate.
ucx_pair() {
  local port=$((20000 + RANDOM % 20000)) srv
  hiprio env "${ucx_env[@]}" timeout 60 ucx_perftest -c 0 -p $port >/dev/null 2>&1 &
  srv=$!
  sleep 0.3
  hiprio env "${ucx_env[@]}" timeout 60 ucx_perftest 127.0.0.1 -p $port -c 1 -f "$@" 2>"$log" |
    tail -1 || true
  wait $srv 2>/dev/null || true
}
# ucx KIND: the value, or nothing when the run failed.
ucx() {
  local line v
  # shellcheck disable=SC2086 # the options are words
  line=$(ucx_pair ${ucx_args[$1]} "${iters[@]}")
  # Only a line of numbers: a failed run's last line is its error message.
  # With -T (threads) the line has 4: iterations, overall latency, overall
  # bandwidth and rate, summed over the threads.
  line=$(awk 'NF >= 4 && $1 ~ /^[0-9]+$/' <<<"$line")
  v=
  [ -z "$line" ] || case ${1%%.*} in
    lat | get_lat) v=$(awk '{print $2}' <<<"$line") ;;
    put_lat) v=$(awk '{print 2 * $2}' <<<"$line") ;; # its half round trip, doubled
    rate) v=$(awk '{print $NF / 1e6}' <<<"$line") ;;
    bw | put_bw | get_bw) v=$(awk '{print $(NF - 2) * 1.048576}' <<<"$line") ;;
  esac
  [ -n "$v" ] || fail "ucx_perftest ${ucx_args[$1]} (${ucx_env[*]})"
  echo "$v"
}
# ompi KIND: mpi_pingpong on two ranks over Open MPI's tcp BTL on lo.
ompi() {
  local v
  # shellcheck disable=SC2086 # the options are words
  v=$(ompi_pingpong "${1%%.*}" ${ompi_args[$1]} "${iters[@]}")
  [ -n "$v" ] || fail "mpirun mpi_pingpong ${ompi_args[$1]}"
  echo "$v"
}
# tw BUILD KIND OPTIONS...: tw_perf, 2 processes, one per CPU like the
# peers (twrun --bind core); the value from the 'all' row of its CSV:
# test,size,threads,thread,iters,warmup,window,median,avg,min,max,bw,rate.
tw() {
  local b=$1 kind=$2 row
  shift 2
  row=$(hiprio env "${tw_env[@]}" timeout 120 "$b/tools/twrun" -n 2 --bind core "$b/tools/tw_perf" \
    --csv "$@" "${iters[@]}" 2>"$log" | awk -F, '$4 == "all"') || true
  tw_value "${kind%%.*}" <<<"$row"
  [ -n "$row" ] || grep -q 'unknown option' "$log" ||
    fail "${tw_env[*]:+${tw_env[*]} }twrun -n 2 tw_perf $* ($b)"
}

# Which peers can run here.
declare -A have
if command -v ucx_perftest >/dev/null; then
  have[ucx]=1
else
  echo "perf-peers: no ucx_perftest (ucx-utils): no UCX column" >&2
fi
if [[ " ${peers[*]} " != *" ompi "* ]]; then
  :
elif ompi_build mpi_pingpong; then
  have[ompi]=1
fi

# The kinds the rows measure; a peer runs those it has arguments for.
kinds=$(for row in "${rows[@]}"; do echo "${row%%|*}"; done | sort -u)
has_args() { # PEER KIND
  case $1 in
    ucx) [ -n "${ucx_args[$2]:-}" ] ;;
    ompi) [ -n "${ompi_args[$2]:-}" ] ;;
    *) false ;;
  esac
}

declare -A r base_lacks
for _ in $(seq "$reps"); do
  for p in "${peers[@]}"; do
    [ -n "${have[$p]:-}" ] || continue
    for kind in $kinds; do
      has_args "$p" "$kind" || continue
      r[$p.$kind]+="$($p "$kind") "
    done
  done
  for i in "${!rows[@]}"; do
    IFS='|' read -r kind _ opts <<<"${rows[$i]}"
    # shellcheck disable=SC2086
    r[tw.$i]+="$(tw "$build" "$kind" $opts) "
    if [ -n "$base" ] && [ -z "${base_lacks[$i]:-}" ]; then
      # shellcheck disable=SC2086
      r[base.$i]+="$(tw "$base" "$kind" $opts) "
      # An option the base build's tw_perf does not have: "-" from now on.
      ! grep -q 'unknown option' "$log" || base_lacks[$i]=1
    fi
  done
done

m() { tr ' ' '\n' <<<"${r[$1]:-}" | awk NF | median; }
# (max - min) / median of one cell's runs, as a percentage.
spread() {
  tr ' ' '\n' <<<"${r[$1]:-}" | awk NF | sort -g | awk '{v[NR]=$1} END {
    if (NR < 2) { print "-"; exit }
    med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2
    if (med == 0) print "-"; else printf "%d%%", 100 * (v[NR] - v[1]) / med }'
}
# cells KIND CELL...: a row of the table; FORMAT (printf) gives the widths.
# With MEDIANS, the cells again in that file, '|' between them.
cells() {
  local kind=$1
  shift
  # shellcheck disable=SC2059 # the format is the table's
  printf "$format\n" "$@"
  [ -z "${MEDIANS:-}" ] || (IFS='|' && echo "$kind|$*") >>"$MEDIANS"
}
[ -z "${MEDIANS:-}" ] || : >"$MEDIANS"
format='%-44s %12s'
hdr=("measurement (medians of $reps)" threadwire)
for p in "${peers[@]}"; do
  format+=' %12s %8s'
  hdr+=("${peer_name[$p]}" "tw/${peer_name[$p]% *}")
done
[ -z "$base" ] || { format+=' %10s %8s %7s %7s' && hdr+=(base tw/base spread "spr.b"); }
cells kind "${hdr[@]}"
for i in "${!rows[@]}"; do
  IFS='|' read -r kind label _ <<<"${rows[$i]}"
  t=$(m "tw.$i")
  row=("$label" "$t")
  for p in "${peers[@]}"; do
    v=$(m "$p.$kind")
    row+=("$v" "$(ratio "$t" "$v")")
  done
  if [ -n "$base" ]; then
    v=$(m "base.$i")
    row+=("$v" "$(ratio "$t" "$v")" "$(spread "tw.$i")" "$(spread "base.$i")")
  fi
  cells "$kind" "${row[@]}"
done
