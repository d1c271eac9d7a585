#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# What the reliability layer costs, in one run: tw_perf over shm and tcp
# with TW_RELIABLE=0 and =1, and -- with a second build of the commit
# before the layer -- reliability off against that build, so "off costs
# nothing" is a measured ratio too. Each measurement runs REPS times
# (default 5), alternating the builds and settings, at high priority, one
# rank per CPU (twrun --bind core); the table shows medians and ratios.
#   tools/perf-rel.sh [BUILD_DIR [BASE_BUILD_DIR]]   (default build/release)
# Make the base build with:
#   git worktree add /tmp/tw-base <commit before the layer>
#   cmake -S /tmp/tw-base -B /tmp/tw-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release
#   ninja -C /tmp/tw-base/build tw_perf twrun
# About 3 minutes at REPS=5 on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
base=${2:-}
reps=${REPS:-5}
for b in "$build" ${base:+"$base"}; do
  if [ ! -x "$b/tools/tw_perf" ] || [ ! -x "$b/tools/twrun" ]; then
    echo "build $b first (cmake --build $b --target tw_perf twrun)" >&2
    exit 2
  fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-rel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log

hiprio() { setsid -w bash -c 'echo -20 > /proc/self/autogroup 2>/dev/null; exec nice -n -20 "$@"' hiprio "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "-" || b == 0 || a == "-") print "-"; else printf "%.2f", a / b }'; }

# tw BUILD RELIABLE TRANSPORT KIND OPTIONS...: the value from the 'all' row
# of tw_perf's CSV (test,size,threads,thread,iters,warmup,window,median,
# avg,min,max,bw,rate): the median latency (us) or the rate (M msg/s).
tw() {
  local b=$1 rel=$2 tl=$3 kind=$4 row
  shift 4
  row=$(hiprio env TW_RELIABLE="$rel" TW_TRANSPORTS="$tl" timeout 120 "$b/tools/twrun" -n 2 \
    --bind core "$b/tools/tw_perf" --csv "$@" 2>"$log" | awk -F, '$4 == "all"') || true
  if [ -z "$row" ]; then
    echo "perf-rel: TW_RELIABLE=$rel TW_TRANSPORTS=$tl tw_perf $* ($b) failed:" >&2
    tail -5 "$log" >&2
    return
  fi
  case $kind in
    lat) awk -F, '{print $8}' <<<"$row" ;;
    rate) awk -F, '{print $13}' <<<"$row" ;;
  esac
}

rows=(
  "lat|8 B latency, us (progress thread, adaptive)|-x lat -s 8 -n 20000"
  "lat|8 B latency, us (manual progress, spin)|-x lat -s 8 -p 0 -m spin -n 20000"
  "rate|8 B rate, M msg/s (progress thread)|-x rate -s 8"
  "rate|8 B rate, M msg/s (manual, spin)|-x rate -s 8 -p 0 -m spin"
)
declare -A r
for _ in $(seq "$reps"); do
  for tl in shm tcp; do
    for i in "${!rows[@]}"; do
      IFS='|' read -r kind _ opts <<<"${rows[$i]}"
      # shellcheck disable=SC2086 # the options are words
      {
        r[$tl.$i.on]+="$(tw "$build" 1 "$tl" "$kind" $opts) "
        r[$tl.$i.off]+="$(tw "$build" 0 "$tl" "$kind" $opts) "
        if [ -n "$base" ]; then
          r[$tl.$i.base]+="$(tw "$base" 0 "$tl" "$kind" $opts) "
        fi
      }
    done
  done
done

m() { tr ' ' '\n' <<<"${r[$1]:-}" | awk NF | median; }
printf '%-4s %-46s %9s %9s %9s %9s %9s\n' "" "measurement (medians of $reps)" "rel off" "rel on" \
  "on/off" "base" "off/base"
for tl in shm tcp; do
  for i in "${!rows[@]}"; do
    IFS='|' read -r _ label _ <<<"${rows[$i]}"
    on=$(m "$tl.$i.on")
    off=$(m "$tl.$i.off")
    b=$(m "$tl.$i.base")
    printf '%-4s %-46s %9s %9s %9s %9s %9s\n' "$tl" "$label" "$off" "$on" "$(ratio "$on" "$off")" \
      "$b" "$(ratio "$off" "$b")"
  done
done
