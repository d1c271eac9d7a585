#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# TW_TCP_POLL_MAX: a lane with at most that many other ranks on it waits
# with poll(2), a larger one (or any, with 0) with epoll. Each case runs a
# tw_perf ping-pong over TCP (tw_perf checks the payloads) and reads which
# method every lane of every rank chose from its debug line; a value out
# of range is refused at tw_init.
#   tcp_poll_test.sh TWRUN TW_PERF
set -eu
twrun=$1 perf=$2
export TW_TRANSPORTS=tcp TW_LOG_LEVEL=debug
. "$(dirname "$0")/mp_lib.sh"

expect_refused TW_TCP_POLL_MAX=-1 "TW_TCP_POLL_MAX" "$twrun" -n 2 "$perf" -x lat -n 10

# CASE NP EXPECTED VAR=VALUE...: EXPECTED is one "lane K: METHOD" a line
# for every rank (sorted); the job must pass.
check() {
  local name=$1 np=$2 want=$3 out got
  shift 3
  if ! out=$(env "$@" "$twrun" -n "$np" "$perf" -x lat -s 64 -n 200 2>&1); then
    echo "$out"
    fail "$name: the ping-pong failed"
  fi
  got=$(sed -n 's/.* r\([0-9]*\) tcp\] debug: lane \([0-9]*\) waits with \([a-z]*\) .*/r\1 lane \2: \3/p' \
    <<<"$out" | sort)
  if [ "$got" != "$want" ]; then
    echo "$out" | grep "waits with" || true
    printf 'want:\n%s\ngot:\n%s\n' "$want" "$got"
    fail "$name: the lanes chose other methods"
  fi
  echo "$name: $(tr '\n' ';' <<<"$got")"
}

# 2 ranks, 1 lane: one peer, the default (8) polls.
check default 2 "$(printf 'r0 lane 0: poll\nr1 lane 0: poll')" TW_TCP_THREADS=1
check epoll 2 "$(printf 'r0 lane 0: epoll\nr1 lane 0: epoll')" TW_TCP_THREADS=1 TW_TCP_POLL_MAX=0
# 4 ranks, 1 lane: 3 peers each, above a limit of 2.
check above 4 "$(printf 'r%d lane 0: epoll\n' 0 1 2 3)" TW_TCP_THREADS=1 TW_TCP_POLL_MAX=2
# 4 ranks, 2 lanes (rank p on lane p mod 2): rank 0's lane 0 holds rank 2
# only, its lane 1 ranks 1 and 3; a limit of 1 splits them.
check lanes 4 "$(printf 'r0 lane 0: poll\nr0 lane 1: epoll\nr1 lane 0: epoll\nr1 lane 1: poll\nr2 lane 0: poll\nr2 lane 1: epoll\nr3 lane 0: epoll\nr3 lane 1: poll')" \
  TW_TCP_THREADS=2 TW_TCP_POLL_MAX=1
echo "TW_TCP_POLL_MAX: every lane chose as its peers count says"
