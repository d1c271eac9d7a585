#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# tw_coll_perf, small and quick: every collective over 2 ranks under twrun
# for a few iterations (a sweep of 8 B .. 1 KiB, one barrier row), -t 2
# (a group per thread), iallreduce with probes (overlap columns) and with
# a fixed computation (-C), a job of
# one; each output line well-formed (coll_bench.h's format: 14
# comma-separated fields, numeric but for the two '-' of blocking rows,
# whose whole iteration takes at least the collective's time),
# the row count per sweep, the quantiles' lines of -q, usage errors
# exit 2. Every run settles first
# (-S, default 200 ms of barriers, -t 2 on each thread's group).
#   tw_coll_perf_test.sh TW_COLL_PERF TWRUN
set -euo pipefail
perf=$1
twrun=$2

fail() {
  echo "tw_coll_perf_test: $*"
  exit 1
}

# check OP ROWS THREADS PROCS: $out has one '#' header naming the
# columns, and ROWS well-formed 'coll,tw,OP,...' lines.
check() {
  local op=$1 rows=$2 threads=$3 procs=$4
  grep -q '^# coll,impl,op,bytes,procs,threads,iters,avg_us,min_us,max_us,rate_kops,overall_us,compute_us,overlap_pct$' \
    <<<"$out" || { echo "$out"; fail "$op: no header line"; }
  awk -F, -v op="$op" -v t="$threads" -v p="$procs" '
    /^#/ { next }
    {
      if (NF != 14 || $1 != "coll" || $2 != "tw" || $3 != op || $5 != p || $6 != t) exit 1
      for (i = 7; i <= 11; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) exit 1
      if ($8 <= 0 || $9 > $8 + 0.001 || $10 < $8 - 0.001 || $11 <= 0) exit 1
      if ($12 !~ /^[0-9]+(\.[0-9]+)?$/) exit 1
      if (op != "iallreduce" && $12 < $8 - 0.001) exit 1 # a whole iteration holds the collective
      for (i = 13; i <= 14; i++)
        if (op == "iallreduce" ? $i !~ /^[0-9]+(\.[0-9]+)?$/ : $i != "-") exit 1
      n++
    }
    END { exit n != 0 ? 0 : 1 }' <<<"$out" || { echo "$out"; fail "$op: a malformed line"; }
  [ "$(grep -c '^coll,' <<<"$out")" -eq "$rows" ] || { echo "$out"; fail "$op: want $rows rows"; }
}

# run PROCS ARGS...: tw_coll_perf under twrun (PROCS 1: alone) must exit 0.
run() {
  local procs=$1 rc=0
  shift
  if [ "$procs" -eq 1 ]; then
    out=$("$perf" "$@" 2>&1) || rc=$?
  else
    out=$("$twrun" -n "$procs" "$perf" "$@" 2>&1) || rc=$?
  fi
  [ "$rc" -eq 0 ] || { echo "$out"; fail "$procs process(es): tw_coll_perf $* exited $rc"; }
}

it=(-i 20 -x 2)
run 2 -c barrier "${it[@]}"
check barrier 1 1 2
for op in bcast reduce allreduce; do
  run 2 -c "$op" -m 8:1k "${it[@]}"
  check "$op" 8 1 2
done
run 2 -c allreduce -m 8:64 -t 2 "${it[@]}"
check allreduce 4 2 2
run 2 -c iallreduce -m 8:64k -P 2 -i 5 -x 1
check iallreduce 14 1 2
# -C: a fixed computation, the COMPUTE_US column at least that long.
run 2 -c iallreduce -m 8:64 -P 2 -C 300 -i 5 -x 1
check iallreduce 4 1 2
awk -F, '/^coll,/ && $13 < 299.9 { exit 1 }' <<<"$out" || { echo "$out"; fail "-C 300: less computed"; }
# -q: after each row of a blocking collective, its quantiles' comment
# (same op and size, 0 < P50 <= P90 <= P99 <= MAX); none for iallreduce.
run 2 -c allreduce -m 8:64 -q "${it[@]}"
check allreduce 4 1 2
awk -F, '/^coll,/ { want = $4; next }
  /^# quantiles,/ {
    if (NF != 7 || $2 != "allreduce" || $3 != want || !($4 > 0 && $4 <= $5 && $5 <= $6 && $6 <= $7))
      exit 1
    want = ""; n++
  }
  END { exit n == 4 && want == "" ? 0 : 1 }' <<<"$out" || { echo "$out"; fail "-q: want 4 quantile lines"; }
run 2 -c iallreduce -m 8:8 -q -i 5 -x 1
check iallreduce 1 1 2
! grep -q '^# quantiles' <<<"$out" || { echo "$out"; fail "-q: quantiles of a nonblocking one"; }
run 1 -c allreduce -m 8:16k "${it[@]}"
check allreduce 12 1 1
run 1 -c bcast -m 1:4 "${it[@]}"
check bcast 3 1 1

# Usage errors exit 2 and say so; -h documents every option.
for bad in "-c gather" "-m 0:8" "-m 64:8" "-t 0" "-i 0" "-x -1" "-S -1" "-S 60001" "-P" "-C 0" "-C x" "-z" \
  "stray"; do
  rc=0
  # shellcheck disable=SC2086 # split the option from its value
  msg=$("$perf" $bad 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "tw_coll_perf $bad exited $rc, want 2"
  grep -q '^tw_coll_perf: ' <<<"$msg" || fail "tw_coll_perf $bad: no message: $msg"
done
out=$("$perf" -h)
for o in -c -m -i -x -S -t -P -C -q quantiles barrier bcast reduce allreduce iallreduce OVERLAP_PCT; do
  grep -q -- "$o" <<<"$out" || fail "-h does not document $o"
done
echo "tw_coll_perf: ok"
