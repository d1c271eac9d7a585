# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Shared by the multiproc scripts (sourced, bash). The ranks (tw_mp_rank)
# leave in their state directory DIR: rankR.pid, rankR.boot, rankR.shm
# (/dev/shm files they mapped) and job.prefix.

fail() {
  echo "FAIL: $*"
  exit 1
}

# A job CMD that VAR=VALUE must make fail, saying why in a line that
# matches PATTERN (grep basic regex); prints that line.
expect_refused() { # VAR=VALUE PATTERN CMD...
  local setting=$1 pattern=$2 out
  shift 2
  if out=$(env "$setting" "$@" 2>&1); then
    echo "$out"
    fail "$setting was accepted"
  fi
  grep -q -- "$pattern" <<<"$out" || { echo "$out"; fail "no clear error for $setting"; }
  echo "$setting refused: $(grep -m1 -- "$pattern" <<<"$out")"
}

# tw-* names in /dev/shm, one a line, sorted.
shm_list() {
  (cd /dev/shm && ls -A) 2>/dev/null | grep '^tw-' | sort || true
}

# Nothing of this job left in /dev/shm: no file a rank mapped, none with the
# job's name prefix, and no other tw-* name that appeared since BEFORE (a
# listing from shm_list) and outlives a 2 s grace (another job's segment
# being set up would be unlinked by then).
shm_check() { # BEFORE DIR WHAT
  local before=$1 dir=$2 what=$3 prefix="" ours name left=""
  [ -f "$dir/job.prefix" ] && prefix=$(cat "$dir/job.prefix")
  ours=$(cat "$dir"/rank*.shm 2>/dev/null | sort -u || true)
  for name in $(shm_list); do
    if [ -n "$prefix" ] && [ "${name#"$prefix"}" != "$name" ]; then
      left="$left $name(job-prefix)"
    elif [ -n "$ours" ] && grep -qxF -- "$name" <<<"$ours"; then
      left="$left $name(mapped-by-a-rank)"
    fi
  done
  [ -z "$left" ] || fail "$what: left in /dev/shm:$left"
  for _ in $(seq 20); do
    left=$(comm -13 <(printf '%s\n' "$before") <(shm_list) | tr '\n' ' ')
    [ -z "${left// /}" ] && return 0
    sleep 0.1
  done
  fail "$what: new names left in /dev/shm: $left"
}

# True when pid $1 is gone (or a zombie: dead, not yet reaped).
pid_gone() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null | cut -c1 || true)
  [ -z "$st" ] || [ "$st" = Z ]
}

# Every pid listed in DIR/rank*.pid is gone, and no live process has DIR on
# its command line (a rank that died before writing its pid file).
no_orphans() { # DIR WHAT
  local p
  for p in $(cat "$1"/rank*.pid 2>/dev/null); do
    pid_gone "$p" || fail "$2: rank pid $p is still alive ($(ps -o args= -p "$p"))"
  done
  p=$(pgrep -f -- "$1" | tr '\n' ' ' || true)
  [ -z "$p" ] || fail "$2: processes left behind: $p"
}

# Wait until DIR holds N rank*.pid files (every rank past tw_init), up to
# 30 s (sanitizer builds start slowly), or until process LAUNCHER ended.
# True when all N are there.
wait_pid_files() { # DIR N LAUNCHER
  for _ in $(seq 300); do
    [ "$(ls "$1"/rank*.pid 2>/dev/null | wc -l)" -eq "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.1
  done
  [ "$(ls "$1"/rank*.pid 2>/dev/null | wc -l)" -eq "$2" ]
}

# SIGKILL process LAUNCHER and wait up to MS ms for every pid of PIDS to be
# gone. Sets took_ms, and alive to the pids still there (empty: all gone).
kill_launcher() { # LAUNCHER MS PIDS...
  local launcher=$1 ms=$2 start p
  shift 2
  start=$(date +%s%N)
  kill -9 "$launcher"
  while :; do
    alive=""
    for p in "$@"; do
      pid_gone "$p" || alive="$alive $p"
    done
    took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
    [ -z "$alive" ] || [ "$took_ms" -ge "$ms" ] && break
    sleep 0.02
  done
  { wait "$launcher"; } 2>/dev/null || true # no "Killed" job notice
}
