#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# tw_perf in a job of one: lat, bw and rate with 1 and 2 threads, both
# pairings, manual progress and each wait mode, a CSV sweep (row count and
# numeric fields), usage errors (exit 2, also for the removed --plot);
# the one-sided tests (put_lat, put_bw, get_lat, get_bw) over self, both
# pairings, manual progress, eager and rendezvous sizes.
# With twrun given, a job of 2 either measures or fails with the clear
# "operation not supported" message of a build without an inter-process
# transport; and again over TCP with --stats=json (read by
# tests/common/twt_stats.py), --stats keeping the text report; the
# one-sided tests over shm and tcp, with progress threads and in manual
# mode; a job of 4 as 2 pairs at once (rows per pair, 'all' their sum),
# and the jobs that need --pair.
#   tw_perf_test.sh TW_PERF [TWRUN]
set -euo pipefail
perf=$1
twrun=${2:-}
scale=${TWTEST_SCALE:-1}
n=$((2000 / scale)) # small-message iterations
nb=$((200 / scale)) # bw iterations (16 KiB x 32 per iteration)
nr=$((50 / scale + 1)) # one-sided iterations per size
rma=put_lat,put_bw,get_lat,get_bw
stats="$(dirname "$0")/../common/twt_stats.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "tw_perf_test: $*"
  exit 1
}

# run ARGS...: tw_perf must exit 0; its stdout+stderr land in $out.
run() {
  local rc=0
  out=$("$perf" "$@" 2>&1) || rc=$?
  [ "$rc" -eq 0 ] || { echo "$out"; fail "tw_perf $* exited $rc"; }
}

# The 'all' row of TEST has a positive median latency, bandwidth and rate.
check_all_row() { # test
  awk -v t="$1" '$1 == t && $4 == "all" && $7 > 0 && $11 > 0 && $12 > 0 { ok = 1 }
                 END { exit !ok }' <<<"$out" || { echo "$out"; fail "no sane '$1 ... all' row"; }
}

for t in 1 2; do
  run -x lat -t "$t" -n "$n"
  check_all_row lat
  run -x bw -t "$t" -s 16k -n "$nb"
  check_all_row bw
  run -x rate -t "$t" -n "$((n / 4))"
  check_all_row rate
  if [ "$t" -eq 2 ]; then
    rows=$(grep -cE '^(lat|bw|rate) ' <<<"$out")
    [ "$rows" -eq 3 ] || { echo "$out"; fail "-t 2: want 2 thread rows + 'all', got $rows rows"; }
  fi
done

# Initiator and responder as separate threads (the two-process code path),
# manual progress, and the three wait modes.
run -x lat,bw,rate --split -t 2 -s 4k -n "$nb"
for t in lat bw rate; do check_all_row "$t"; done
run -x lat,bw -p 0 -t 2 -s 1k -n "$nb"
check_all_row lat
check_all_row bw
run -x lat,bw -p 0 --split -s 64k -n "$((nb / 4 + 1))"
check_all_row bw
for m in spin block adaptive; do
  run -x lat,rate -m "$m" -n "$nb"
  check_all_row rate
done
# The loops applications write: spinning on tw_cq_poll, and polling with
# the thread's own work between polls; and the overlap test, whose '#'
# line says how much of the computation the transfer hid.
for l in poll compute:2; do
  run -x lat,rate -l "$l" -t 2 -n "$nb"
  check_all_row lat
  grep -q "loop ${l}" <<<"$out" || { echo "$out"; fail "-l $l: the banner does not name the loop"; }
done
run -x lat,rate --inject -n "$nb"
check_all_row rate
run -x overlap -s 64k -n "$nb"
check_all_row overlap
grep -qE '^# overlap: round trip alone [0-9.]+ us, computation [0-9.]+ us, both [0-9.]+ us: [0-9]+ % ' \
  <<<"$out" || { echo "$out"; fail "-x overlap: no '# overlap' line"; }

# One-sided over self: a sweep (every size checked at both ends of the
# run, in the windows' two slots), both pairings with 2 threads, manual
# progress, spin; 64 KiB and 1 MiB take the rendezvous paths.
# Each one-sided test has SIZES 'all' rows, each with a positive median
# and a positive bandwidth or rate (a slow build may round a 1 MiB rate to
# 0.0000 M/s, a loaded host an 8 B bandwidth to 0.00 MB/s).
check_rma_rows() { # SIZES
  local t
  for t in ${rma//,/ }; do
    [ "$(awk -v t="$t" '$1 == t && $4 == "all" && $7 > 0 && ($11 > 0 || $12 > 0)' <<<"$out" | wc -l)" -eq "$1" ] ||
      { echo "$out"; fail "want $1 sane '$t ... all' rows"; }
  done
}
run -x "$rma" -s 8:4k -n "$nr" -w 8
check_rma_rows 10
run -x "$rma" --split -t 2 -s 1k -n "$nr"
check_rma_rows 1
run -x "$rma" -p 0 -t 2 -s 64k -n "$nr"
check_rma_rows 1
run -x "$rma" -p 0 -m spin --split -s 1m -n 4 -w 4
check_rma_rows 1
run -x "$rma" -n 1 -W 0 -s 100 -w 1 # one iteration: the last one's slot only
check_rma_rows 1
# CSV: 4 tests x 7 sizes x (2 threads + 'all') rows; nothing on stderr
# (no library warning either, e.g. about a region left registered).
"$perf" -x "$rma" -s 1k:64k -t 2 -n "$nr" -w 8 --csv >"$tmp/rma.csv" 2>"$tmp/rma.err" ||
  { cat "$tmp/rma.err"; fail "one-sided --csv sweep failed"; }
[ ! -s "$tmp/rma.err" ] || { cat "$tmp/rma.err"; fail "one-sided --csv sweep wrote to stderr"; }
[ "$(awk -F, 'NF == 13 && $1 ~ /^(put|get)_(lat|bw)$/' "$tmp/rma.csv" | wc -l)" -eq 84 ] ||
  { cat "$tmp/rma.csv"; fail "one-sided --csv: want 84 rows"; }

# CSV sweep: header + 5 sizes x 2 tests x (2 threads + 'all') rows, 13
# fields each, every field but test and thread numeric.
"$perf" -x lat,bw -s 1k:16k -t 2 -n "$nb" -w 8 --csv >"$tmp/sweep.csv" 2>"$tmp/sweep.err" ||
  { cat "$tmp/sweep.err"; fail "--csv sweep failed"; }
[ ! -s "$tmp/sweep.err" ] || { cat "$tmp/sweep.err"; fail "--csv sweep wrote to stderr"; }
head -n 1 "$tmp/sweep.csv" | grep -q '^test,size,threads,thread,iterations,' ||
  fail "--csv header: $(head -n 1 "$tmp/sweep.csv")"
lines=$(wc -l <"$tmp/sweep.csv")
[ "$lines" -eq 31 ] || { cat "$tmp/sweep.csv"; fail "--csv: want 1 + 30 lines, got $lines"; }
awk -F, 'NR > 1 {
           if (NF != 13 || ($1 != "lat" && $1 != "bw")) exit 1
           for (i = 2; i <= NF; i++)
             if (i != 4 && $i !~ /^[0-9]+(\.[0-9]+)?$/) exit 1
           if ($4 != "all" && $4 !~ /^[01]$/) exit 1
         }' "$tmp/sweep.csv" || { cat "$tmp/sweep.csv"; fail "--csv: malformed row"; }
sizes=$(awk -F, 'NR > 1 && $4 == "all" && $1 == "bw" { printf "%s ", $2 }' "$tmp/sweep.csv")
[ "$sizes" = "1024 2048 4096 8192 16384 " ] || fail "--csv sweep sizes: $sizes"

# Usage errors exit 2 and say what is wrong; --help documents every option.
usage_fails() { # ARGS...: tw_perf must exit 2 with a message; it lands in $msg.
  local rc=0
  msg=$("$perf" "$@" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "tw_perf $* exited $rc, want 2"
  grep -q "^tw_perf: " <<<"$msg" || fail "tw_perf $*: no message: $msg"
}
for bad in "--bogus" "-x nope" "-s 0:4k" "-s 4q" "-t 0" "-m fast" "-n" "-w 0" "stray" "-l busy" \
  "-l compute:0"; do
  # shellcheck disable=SC2086 # split the option from its value
  usage_fails $bad
done
# --plot is gone: it says what replaces it (tools/plot-perf.sh plots --csv).
for bad in "--plot" "--plot x.png" "--plot=x.png"; do
  # shellcheck disable=SC2086
  usage_fails -x lat $bad
  grep -q "^tw_perf: --plot was removed: .*tools/plot-perf.sh" <<<"$msg" ||
    fail "tw_perf $bad: no pointer to tools/plot-perf.sh: $msg"
done
run --help
for o in --test --size --iters --warmup --window --threads --split --transports \
  --progress-threads --wait-mode --loop --inject --csv --stats --timeout --help overlap ${rma//,/ }; do
  grep -q -- "$o" <<<"$out" || fail "--help does not document $o"
done

# A job of two over shm.
if [ -n "$twrun" ]; then
  out=$("$twrun" -n 2 "$perf" -x lat,bw -t 2 -s 1k -n "$nb" 2>&1) ||
    { echo "$out"; fail "twrun -n 2 tw_perf failed"; }
  check_all_row lat
  check_all_row bw
  # Over TCP, with each rank's counters: the messages went through tcp.
  out=$(TW_TRANSPORTS=tcp "$twrun" -n 2 "$perf" -x lat -n "$nb" --stats=json 2>&1) ||
    { echo "$out"; fail "TW_TRANSPORTS=tcp twrun -n 2 tw_perf --stats=json failed"; }
  check_all_row lat
  "$stats" - 'all ifaces/tl:tcp/tx_msgs >= 1' 'none ifaces/tl:shm' <<<"$out" ||
    { echo "$out"; fail "--stats=json: want both ranks' tcp counters with traffic, no shm"; }
  # TW_STATS=json, with no option of the program's: the library prints
  # each process's counters at tw_finalize; TW_STATS=text the text report.
  out=$(TW_STATS=json TW_TRANSPORTS=tcp "$twrun" -n 2 "$perf" -x lat -n "$nb" 2>&1) ||
    { echo "$out"; fail "TW_STATS=json twrun -n 2 tw_perf failed"; }
  "$stats" - 'all ifaces/tl:tcp/tx_msgs >= 1' 'none ifaces/tl:shm' <<<"$out" ||
    { echo "$out"; fail "TW_STATS=json: want both ranks' tcp counters at finalize, no shm"; }
  out=$(TW_STATS=text TW_TRANSPORTS=tcp "$twrun" -n 2 "$perf" -x lat -n "$nb" 2>&1) ||
    { echo "$out"; fail "TW_STATS=text twrun -n 2 tw_perf failed"; }
  [ "$(grep -c -E 'tl:tcp: tx_msgs=[1-9]' <<<"$out")" = 2 ] ||
    { echo "$out"; fail "TW_STATS=text: want both ranks' tcp counters in the text report"; }
  rc=0
  out=$(TW_STATS=yaml "$perf" -x lat -n 10 2>&1) || rc=$?
  [ "$rc" -ne 0 ] && grep -q "bad value 'yaml' for TW_STATS: expected one of off|text|json" <<<"$out" ||
    { echo "$out"; fail "TW_STATS=yaml: want tw_init refused, saying why"; }
  # --stats stays the text report.
  out=$(TW_TRANSPORTS=tcp "$twrun" -n 2 "$perf" -x lat -n "$nb" --stats 2>&1) ||
    { echo "$out"; fail "TW_TRANSPORTS=tcp twrun -n 2 tw_perf --stats failed"; }
  [ "$(grep -c -E 'tl:tcp: tx_msgs=[1-9]' <<<"$out")" = 2 ] ||
    { echo "$out"; fail "--stats: want both ranks' tcp counters in the text report"; }
  # One-sided between two processes: shm and tcp, progress threads and
  # manual progress (where the responder's wait serves the operations).
  for tl in shm tcp; do
    for p in -1 0; do
      out=$(TW_TRANSPORTS=$tl "$twrun" -n 2 "$perf" -x "$rma" -t 2 -s 8:64k -n "$nr" -w 8 \
        -p "$p" --stats=json 2>&1) ||
        { echo "$out"; fail "TW_TRANSPORTS=$tl twrun -n 2 tw_perf -x $rma -p $p failed"; }
      check_rma_rows 14
      # rank 0 posted the operations, rank 1 served them (emulated)
      "$stats" - 'rank 0 rma/puts >= 1' 'rank 0 rma/gets >= 1' 'rank 0 rma/flushes >= 1' \
        'rank 1 rma/served >= 1' "all ifaces/tl:$tl/tx_msgs >= 1" <<<"$out" ||
        { echo "$out"; fail "TW_TRANSPORTS=$tl -p $p: --stats=json shows no one-sided traffic"; }
    done
  done
  # --pair in a job of 4 on two emulated nodes under leader routing: ranks
  # 2 and 3 measure through the leaders 0 and 1, which pass frames on.
  out=$(TW_ROUTE=leader TW_NODE_ID=0,1,0,1 "$twrun" -n 4 "$perf" --pair 2,3 -x lat,bw -s 1k:64k \
    -n "$nb" --stats=json 2>&1) || { echo "$out"; fail "tw_perf --pair 2,3 through the leaders failed"; }
  check_all_row lat
  check_all_row bw
  "$stats" - 'rank 0 ifaces/route/forwarded >= 1' 'rank 1 ifaces/route/forwarded >= 1' \
    'rank 2 ifaces/tl:tcp/tx_msgs == 0' 'rank 3 ifaces/tl:tcp/tx_msgs == 0' <<<"$out" ||
    { echo "$out"; fail "--pair 2,3: want the leaders passing frames on, no tcp at ranks 2 and 3"; }
  # An even job without --pair: N/2 pairs at once (rank i with i + N/2),
  # as README's command; a row per pair and 'all', whose bandwidth and
  # rate are the pairs' sums.
  out=$("$twrun" -n 4 "$perf" -x lat,bw,rate -t 2 -s 1k -n "$nb" 2>&1) ||
    { echo "$out"; fail "twrun -n 4 tw_perf (2 pairs) failed"; }
  grep -q "^# tw_perf: 4 processes (2 pairs at once: rank i <-> rank i + 2)" <<<"$out" ||
    { echo "$out"; fail "2 pairs: no banner saying so"; }
  for t in lat bw rate; do
    check_all_row "$t"
    awk -v t="$t" '$1 == t { n[$4]++; bw[$4] = $11; r[$4] = $12 }
      END { ok = n["pair0"] == 1 && n["pair1"] == 1 && n["all"] == 1 && NR > 0 &&
                 bw["pair0"] > 0 && bw["pair1"] > 0 &&
                 (bw["pair0"] + bw["pair1"] - bw["all"])^2 < 0.0001 + 1e-6 * bw["all"]^2 &&
                 (r["pair0"] + r["pair1"] - r["all"])^2 < 1e-6 + 1e-6 * r["all"]^2
            exit !ok }' <<<"$out" || { echo "$out"; fail "2 pairs: want rows pair0, pair1, all (the sum) for $t"; }
  done
  # Otherwise more than two processes need --pair, within the job.
  job_fails() { # NP TW_PERF-ARGS...
    local np=$1 rc=0
    shift
    msg=$("$twrun" -n "$np" "$perf" -x lat -n 10 "$@" 2>&1) || rc=$?
    [ "$rc" -ne 0 ] || fail "twrun -n $np tw_perf $*: exited 0"
    grep -q "tw_perf: .*pair" <<<"$msg" || { echo "$msg"; fail "twrun -n $np tw_perf $*: no message"; }
  }
  job_fails 3
  job_fails 4 --pair 1,4
fi
echo "tw_perf: ok"
