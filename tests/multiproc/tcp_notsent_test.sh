#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TW_TCP_NOTSENT_LOWAT bounds what a connection holds unsent in the kernel.
# In a private network namespace whose receive buffers are capped at 64 KiB
# (and send buffers are 1 MiB from the start), rank 0 streams 32 KiB
# messages to rank 1 in windows of 1024, and rank 1 is stopped (SIGSTOP)
# three times for 0.4 s; meanwhile ss samples the connections' unsent
# bytes. With the option off (0) they must pass 256 KiB (the scenario does
# fill the socket: otherwise the check below would prove nothing); with
# 16 KiB they must stay within 16 KiB and one loopback segment (64 KiB).
# The stream must still run when the stops are over (it is then stopped:
# it is sized to outlast the check in any build). Skips (77) without root,
# unshare or ss. The script runs itself again inside the namespace
# (--inside TWRUN TW_PERF).
#   tcp_notsent_test.sh TWRUN TW_PERF
set -eu
twrun=$1 perf=$2
PATH=$PATH:/usr/sbin:/sbin
skip() { echo "SKIP: $*"; exit 77; }

if [ "${1:-}" != --inside ]; then
  [ "$(id -u)" = 0 ] || skip "needs root (a network namespace and its sysctls)"
  command -v ss >/dev/null || skip "ss is not installed (apt-get install iproute2)"
  command -v unshare >/dev/null || skip "unshare is not installed (util-linux)"
  unshare -n true 2>/dev/null || skip "cannot create a network namespace here"
  exec unshare -n "$0" --inside "$twrun" "$perf"
fi
twrun=$2 perf=$3
ip link set lo up
sysctl -qw net.ipv4.tcp_rmem="4096 65536 65536"
sysctl -qw net.ipv4.tcp_wmem="4096 1048576 1048576" # room to fill, however slow the build

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run LOWAT: prints the largest unsent byte count seen while rank 1 stood.
run() {
  local pid p r1="" max=0 v
  TW_TRANSPORTS=tcp TW_PROGRESS_THREADS=0 TW_TCP_NOTSENT_LOWAT=$1 \
    "$twrun" -n 2 "$perf" -x bw -s 32k -w 1024 -n 10000000 >"$log" 2>&1 &
  pid=$!
  # rank 1, once the stream runs: 4 MiB through a connection (bounded: 20 s)
  for _ in $(seq 400); do
    for p in $(pgrep -f -- "$perf -x bw -s 32k" || true); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx TW_RANK=1 && r1=$p
    done
    v=$(ss -tniH state established | grep -o "bytes_sent:[0-9]*" | cut -d: -f2 | sort -n | tail -1)
    [ -n "$r1" ] && [ "${v:-0}" -gt $((4 << 20)) ] && break
    r1=""
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$r1" ] || { cat "$log" >&2; echo "FAIL: TW_TCP_NOTSENT_LOWAT=$1: the stream never started" >&2; return 1; }
  # Three stops: one that lands while rank 0 waits for a window's
  # acknowledgement finds nothing queued.
  for _ in 1 2 3; do
    kill -STOP "$r1"
    for _ in $(seq 8); do
      v=$(ss -tniH state established | grep -o "notsent:[0-9]*" | cut -d: -f2 | sort -n | tail -1)
      if [ -n "$v" ] && [ "$v" -gt "$max" ]; then max=$v; fi
      sleep 0.05
    done
    kill -CONT "$r1"
    sleep 0.1
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$log" >&2
    echo "FAIL: TW_TCP_NOTSENT_LOWAT=$1: the stream ended before the check did" >&2
    return 1
  fi
  kill -TERM "$pid" # twrun stops its ranks (TERM, then KILL)
  wait "$pid" 2>/dev/null || true
  echo "$max"
}

off=$(run 0)
[ "$off" -gt $((256 * 1024)) ] ||
  { echo "FAIL: with the option off only $off bytes stayed unsent: the scenario did not fill the socket"; exit 1; }
on=$(run 16k)
[ "$on" -le $((16 * 1024 + 64 * 1024)) ] ||
  { echo "FAIL: TW_TCP_NOTSENT_LOWAT=16k: $on bytes stayed unsent (off: $off)"; exit 1; }
echo "unsent while the receiver stood: $off bytes with the option off, $on with 16 KiB"
