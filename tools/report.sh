#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# One Markdown report of threadwire beside UCX and Open MPI, every figure
# measured in the same run: tools/perf-peers.sh over shm and over tcp (its
# fixed rows, and with SWEEP=1 latency and bandwidth against message size
# and the 8 B rate against threads per process), then tools/perf-coll.sh
# (sections pin and threads). report.md holds the machine, the commit, the
# exact commands, tables of medians and threadwire / peer, and the PNG
# plots (tools/plot-report.sh, gnuplot; without it the report says so and
# has no plots). The directory also keeps each script's table (NAME.txt),
# its messages (NAME.log), its medians (NAME.medians: what the tables and
# plots are made of) and run.info (machine, commit, commands, times).
#   tools/report.sh [--quick] [-o DIR] [BUILD_DIR]
#       BUILD_DIR: a Release build (default build/release); DIR: default
#       report-YYYY-MM-DD in the current directory
#   tools/report.sh --render DIR
#       report.md and the plots again from DIR's data, without measuring
# REPS=N runs of each measurement, medians (default: the scripts' own, 5
# for perf-peers.sh, 3 for perf-coll.sh); SIZES and THREADS as
# perf-peers.sh's (bytes; threads per process); COLL_SECTIONS (default
# pin) perf-coll.sh's SECTIONS: "pin threads" adds collectives with 2
# threads a process, about 4 minutes a rep (Open MPI's 2-thread runs
# starve for ms per collective); ITERS as both scripts'. A full run takes
# about 10 minutes on 2 busy cores (BENCHMARKS.md). --quick: one rep of a
# few iterations (ITERS, default 20, collectives 10), sizes 8 and 65536, 1
# and 2 threads, collectives pin and threads: the whole pipeline in about
# 40 s, for tests/api/report_test.sh; its figures mean nothing.
# Needs ucx-utils for the UCX columns, openmpi-bin and libopenmpi-dev for
# the Open MPI ones (a missing peer shows "-", and the report says why).
set -euo pipefail
usage() {
  echo "usage: tools/report.sh [--quick] [-o DIR] [BUILD_DIR]   (REPS=N; SIZES, THREADS, COLL_SECTIONS)" >&2
  echo "       tools/report.sh --render DIR" >&2
  exit 2
}
top=$(cd "$(dirname "$0")/.." && pwd)
quick="" out="" build="" render=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    -o | --out) [ $# -ge 2 ] || usage; out=$2; shift ;;
    --render) [ $# -ge 2 ] || usage; render=1; out=$2; shift ;;
    -h | --help) usage ;;
    -*) echo "report.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$build" ] || usage; build=$1 ;;
  esac
  shift
done
out=$(realpath -m "${out:-report-$(date +%Y-%m-%d)}")
info=$out/run.info

# note LINE: a line for the report's notes, and on stderr.
note() { echo "report: $1" >&2; echo "note: $1" >>"$info"; }
# get KEY: the value of KEY in run.info (its first line; all of them for
# command and note).
get() { awk -v k="$1: " 'index($0, k) == 1 { print substr($0, length(k) + 1) }' "$info"; }
first() { get "$1" | head -1; }
# shown PATH: PATH as the report shows it, relative to the tree when inside.
shown() { local p=$1; [[ $p != "$top"/* ]] || p=${p#"$top"/}; echo "$p"; }

measure() {
  build=$(realpath -m "${build:-$top/build/release}")
  local f
  for f in tw_perf tw_coll_perf twrun; do
    [ -x "$build/tools/$f" ] ||
      { echo "report: build $(shown "$build") first (ninja -C $(shown "$build") -j2)" >&2; exit 2; }
  done
  mkdir -p "$out"
  rm -f "$out"/*.png "$out"/*.medians "$out"/report.md
  # Each script's own default REPS (5 and 3) unless REPS is set.
  local peers=("REPS=${REPS:-5}" SWEEP=1) coll=("REPS=${REPS:-3}") started=$SECONDS
  coll+=("SECTIONS=${COLL_SECTIONS:-pin}")
  [ -z "${SIZES:-}" ] || peers+=("SIZES=$SIZES")
  [ -z "${THREADS:-}" ] || peers+=("THREADS=$THREADS")
  [ -z "${ITERS:-}" ] || { peers+=("ITERS=$ITERS") && coll+=("ITERS=$ITERS"); }
  if [ -n "$quick" ]; then
    peers=("REPS=${REPS:-1}" SWEEP=1 "SIZES=${SIZES:-8 65536}" "THREADS=${THREADS:-1 2}"
      "ITERS=${ITERS:-20}")
    coll=("REPS=${REPS:-1}" "SECTIONS=${COLL_SECTIONS:-pin threads}" "ITERS=${ITERS:-10}")
  fi
  {
    if [ -n "$quick" ]; then echo "mode: quick"; else echo "mode: full"; fi
    echo "reps-peers: ${peers[0]#REPS=}"
    echo "reps-coll: ${coll[0]#REPS=}"
    echo "started: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$top" describe --always --dirty --tags 2>/dev/null || echo unknown)"
    echo "subject: $(git -C "$top" log -1 --format=%s 2>/dev/null || echo -)"
    echo "nproc: $(nproc)"
    echo "cpu: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "kernel: $(uname -srm)"
    echo "os: $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-}")"
    echo "build: $(shown "$build"), $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt"),"\
      "$("$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")" --version | head -1)"
    echo "ucx: $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p' | grep . || echo absent)"
    echo "ompi: $(mpirun --version 2>/dev/null | head -1 | grep . || echo absent)"
    echo "load-start: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$info"
  step peers-shm "${peers[@]}" tools/perf-peers.sh shm
  step peers-tcp "${peers[@]}" tools/perf-peers.sh tcp
  step coll "${coll[@]}" tools/perf-coll.sh
  {
    echo "finished: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "seconds: $((SECONDS - started))"
    echo "load-end: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >>"$info"
}

failed=""
# quote VAR=VALUE...: the assignments as a shell would take them, then a blank.
quote() {
  local v
  for v in "$@"; do
    if [[ $v == *" "* ]]; then printf '%s="%s" ' "${v%%=*}" "${v#*=}"; else printf '%s ' "$v"; fi
  done
}
# step NAME VAR=VALUE... SCRIPT ARGS...: one script, its table in NAME.txt,
# its messages in NAME.log (and on stderr), its medians in NAME.medians.
step() {
  local name=$1 vars=() t0=$SECONDS rc=0
  shift
  while [[ $1 == *=* ]]; do vars+=("$1"); shift; done
  echo "report: $name: $* ($(date +%T))" >&2
  (cd "$top" && env "${vars[@]}" MEDIANS="$out/$name.medians" "$@" "$build" 2>&1 >"$out/$name.txt") |
    tee "$out/$name.log" >&2 || rc=$?
  echo "command: $(quote "${vars[@]}")MEDIANS=$(shown "$out")/$name.medians $* $(shown "$build")" \
    >>"$info"
  echo "time: $((SECONDS - t0))" >>"$info"
  if [ $rc -ne 0 ]; then
    note "$* exited $rc (its messages: $name.log)"
    failed+=" $name"
  fi
}

# md_table MEDIANS KIND_ERE: the rows of a perf-peers.sh table whose kind
# matches, as Markdown (its header first; numbers right-aligned).
md_table() {
  [ -s "$1" ] || { echo "(no data: ${1##*/} is missing)"; return 0; }
  awk -F'|' -v re="$2" 'NR == 1 || $1 ~ re {
      l = "|"; for (i = 2; i <= NF; i++) l = l " " $i " |"; print l
      if (NR == 1) { l = "|---|"; for (i = 3; i <= NF; i++) l = l "---:|"; print l } }' "$1"
}

# coll_table SECTION... -- METRIC ROW...: perf-coll medians as Markdown, a
# row per SECTION and ROW (OP:BYTES), a column per implementation, then
# threadwire / each Open MPI column.
coll_table() {
  local f=$out/coll.medians
  [ -s "$f" ] || { echo "(no data: coll.medians is missing)"; return 0; }
  awk -F'|' -v args="$*" '
    function sz(b) { return b >= 1048576 ? b / 1048576 " MiB" : b >= 1024 ? b / 1024 " KiB" : b " B" }
    function ratio(a, b) { return (a == "" || b == "" || a == "-" || b == "-" || b == 0) ? "-" : sprintf("%.2f", a / b) }
    { v[$1, $2, $3, $4, $5] = $6; has[$2] = 1 }
    END { n = split(args, a, " "); for (i = 1; a[i] != "--"; i++) sec[++ns] = a[i]
      metric = a[++i]; nr = 0; while (i < n) row[++nr] = a[++i]
      split("tuned sm tw", order, " "); name["tuned"] = "OMPI tuned"; name["sm"] = "OMPI sm"
      name["tw"] = "threadwire"; nc = 0
      for (o = 1; o <= 3; o++) if (order[o] in has) col[++nc] = order[o]
      l = "| measurement |"; d = "|---|"
      for (c = 1; c <= nc; c++) { l = l " " name[col[c]] " |"; d = d "---:|" }
      for (c = 1; c <= nc; c++) if (col[c] != "tw") { l = l " tw/" col[c] " |"; d = d "---:|" }
      print l; print d
      for (s = 1; s <= ns; s++) for (r = 1; r <= nr; r++) {
        split(row[r], p, ":"); label = p[1] (p[2] ? " " sz(p[2]) : "")
        if (sec[s] ~ /^threads/) label = label ", " substr(sec[s], 8) " thr"
        l = "| " label " |"
        for (c = 1; c <= nc; c++) { x[c] = v[sec[s], col[c], p[1], p[2], metric]; l = l " " (x[c] == "" ? "-" : x[c]) " |" }
        t = v[sec[s], "tw", p[1], p[2], metric]
        for (c = 1; c <= nc; c++) if (col[c] != "tw") l = l " " ratio(t, x[c]) " |"
        print l } }' "$f"
}

# sweep_kinds MEDIANS PREFIX: the first and last x of the kinds PREFIX<x>.
sweep_kinds() {
  [ -s "$1" ] || return 0
  awk -F'|' -v pre="$2" 'index($1, pre) == 1 { print substr($1, length(pre) + 1) }' "$1" |
    sort -un | sed -n '1p;$p' | sort -un | sed "s/^/$2/" | paste -sd'|'
}

# The headline rows: the smallest size's latency, the largest's bandwidth,
# the rate of 1 thread and of the most.
headline() { # MEDIANS
  local lat bw rate
  lat=$(sweep_kinds "$1" lat. | cut -d'|' -f1)
  bw=$(sweep_kinds "$1" bw. | awk -F'|' '{ print $NF }')
  rate=$(sweep_kinds "$1" rate.t)
  md_table "$1" "^(${lat:-none}|${bw:-none}|${rate:-none})\$"
}

render() {
  local r=$out/report.md plots=""
  [ -s "$info" ] || { echo "report: no $info: not a report directory" >&2; exit 2; }
  sed -i '/^note: gnuplot/d; /^note: the plots failed/d' "$info"
  rm -f "$out"/*.png
  if ! command -v gnuplot >/dev/null; then
    note "gnuplot is not installed (Debian: gnuplot-nox): no plots"
  elif ! plots=$("$top/tools/plot-report.sh" "$out"); then
    note "the plots failed (tools/plot-report.sh $(shown "$out"))"
  fi
  local quickwarn=""
  [ "$(first mode)" != quick ] ||
    quickwarn="**Quick mode** (\`--quick\`): one rep of a few iterations; these figures check the pipeline and mean nothing."
  {
    echo "# threadwire beside UCX and Open MPI"
    echo
    echo "Measured $(first started) to $(first finished) ($(($(first seconds) / 60)) min $(($(first seconds) % 60)) s),"
    echo "commit \`$(first commit)\` ($(first subject)), by \`tools/report.sh\`."
    [ -z "$quickwarn" ] || { echo; echo "$quickwarn"; }
    echo
    echo "## Machine and build"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| CPUs (nproc) | $(first nproc) |"
    echo "| CPU | $(first cpu) |"
    echo "| kernel | $(first kernel) |"
    echo "| OS | $(first os) |"
    echo "| build | $(first build) |"
    echo "| UCX (ucx_perftest) | $(first ucx) |"
    echo "| Open MPI | $(first ompi) |"
    echo "| load average (1, 5, 15 min) at start, end | $(first load-start); $(first load-end) |"
    echo
    echo "## How to read it"
    echo
    echo "- Every figure is the median of $(first reps-peers) runs (point to point) or"
    echo "  $(first reps-coll) (collectives): REPS. Within each rep the scripts alternate the"
    echo "  peers and threadwire, each run at high priority in its own autogroup."
    echo "  Columns tw/PEER are threadwire / that peer: for latency below 1 is"
    echo "  threadwire faster, for bandwidth and rates above 1 is."
    echo "- The machine is shared and noisy (other builds and tests ran beside this"
    echo "  one; the load average above says how busy it was): absolute figures drift"
    echo "  from run to run by tens of percent. Only the ratios, measured in the same"
    echo "  run, are meaningful; compare runs by their ratios, not their figures."
    echo "- \"-\": the peer has no such measurement, or is absent (see Notes)."
    echo "- Rows and peers: the comment atop tools/perf-peers.sh and tools/perf-coll.sh."
    echo
    echo "## Commands"
    echo
    echo "Run from the top of the tree (times in seconds):"
    echo
    echo '```sh'
    awk '/^command: / { c = substr($0, 10) } /^time: / { print c "  # " $2 " s" }' "$info"
    echo '```'
    echo
    echo "## Headline ratios"
    echo
    for t in shm tcp; do
      echo "Over $t: the smallest message's latency, the largest's bandwidth, the 8 B rate"
      echo "of one thread and of the most."
      echo
      headline "$out/peers-$t.medians"
      echo
    done
    echo "Collectives, 2 processes one per core:"
    echo
    coll_table pin -- lat barrier:0 allreduce:8 allreduce:1048576 bcast:1048576
    for t in shm tcp; do
      echo
      echo "## Point to point over $t: \`tools/perf-peers.sh $t\`"
      echo
      md_table "$out/peers-$t.medians" '^[a-z_]+$'
    done
    echo
    echo "## Latency and bandwidth against message size"
    echo
    plot lat-size.png "latency against message size"
    plot bw-size.png "bandwidth against message size"
    echo "perf-peers.sh's SWEEP rows: tw_perf -x lat / -x bw -s SIZE, manual progress"
    echo "(-p 0, like UCX, which progresses on the calling thread) and a progress thread."
    for t in shm tcp; do
      echo
      echo "### $t"
      echo
      md_table "$out/peers-$t.medians" '^(lat|bw)[.]'
    done
    echo
    echo "## Message rate against threads per process"
    echo
    plot rate-threads.png "message rate against threads per process"
    echo "tw_perf -x rate -s 8 -t T (T threads a process, each paired with its"
    echo "partner's thread); ucx_perftest -t tag_bw -s 8 -T T (UCP in multi-thread"
    echo "mode), the rate summed over the threads. Both processes are bound one per"
    echo "core, so a process's threads share its core. Open MPI has no threaded"
    echo "point-to-point peer here (tools/bench-peers/mpi_pingpong.c is"
    echo "MPI_THREAD_SINGLE): its column has the 1-thread rate only (tcp). UCX's"
    echo "threads (OpenMP, UCP in multi-thread mode) all run on its process's one"
    echo "CPU (-c), as threadwire's share their rank's core: its rows say how each"
    echo "library fares with threads that share a core, not with a core per thread."
    for t in shm tcp; do
      echo
      echo "### $t"
      echo
      md_table "$out/peers-$t.medians" '^rate[.]t'
    done
    echo
    echo "### Collectives, 1 and 2 threads per process (\`perf-coll.sh\` threads)"
    echo
    if grep -q '^threads1|' "$out/coll.medians" 2>/dev/null; then
      echo "The aggregate rate of a process, k collectives/s, each thread on its own"
      echo "communicator (MPI_THREAD_MULTIPLE) or group."
      echo
      coll_table threads1 threads2 -- rate barrier:0 allreduce:8 allreduce:65536
    else
      echo "Not measured in this run: COLL_SECTIONS=\"pin threads\" adds them (about 4"
      echo "minutes a rep: Open MPI's 2-thread runs starve for ms per collective)."
    fi
    echo
    echo "## Collective latency against size: \`tools/perf-coll.sh\`"
    echo
    plot coll-size.png "collective latency against size"
    echo "2 processes, one per core; the OSU loop (t0; collective; t1; barrier), us."
    echo "Open MPI 4.1 over ob1 and vader, its default coll/tuned and coll/sm."
    echo
    coll_table pin -- lat barrier:0 bcast:8 bcast:64 bcast:1024 bcast:65536 bcast:1048576 \
      allreduce:8 allreduce:64 allreduce:1024 allreduce:65536 allreduce:1048576 reduce:8 reduce:65536
    echo
    echo "## Notes"
    echo
    notes
  } >"$r"
  echo "report: wrote $r" >&2
}

# plot PNG ALT: the image, when plot-report.sh made it.
plot() {
  if grep -qx "$1" <<<"$plots"; then
    echo "![$2]($1)"
  else
    echo "(No plot of the $2: see Notes.)"
  fi
  echo
}

# The notes of run.info, and the peers' messages from the scripts' logs.
notes() {
  local n
  n=$(
    get note
    cat "$out"/*.log 2>/dev/null | grep -E '^perf-(peers|coll): ' | grep -v ': rep [0-9]' | sort -u ||
      true
  )
  if [ -z "$n" ]; then
    echo "None: every peer ran."
  else
    awk '{ print "- " $0 }' <<<"$n"
  fi
}

if [ -n "$render" ]; then
  [ -z "$quick$build" ] || usage
else
  measure
fi
render
[ -z "$failed" ] || { echo "report: failed:$failed" >&2; exit 1; }
