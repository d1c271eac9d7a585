#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# The launcher itself lost: 4 ranks (tw_mp_rank wait) on 2 emulated nodes;
# once every rank is past tw_init, mpirun (in the head) or srun is
# SIGKILLed. Every rank on every node must be gone within the bound, and
# nothing of the job left: no rank, no PMIx server (orted, slurmstepd), no
# /dev/shm segment of the job.
#
# Who ends the ranks (measured, Open MPI 4.1 and Slurm 22.05): each orted
# sees mpirun go at once, sends its ranks SIGCONT, SIGTERM 1 s later, then
# SIGKILL, and exits itself (ranks gone ~1.0 s after the kill); srun's
# shepherd (the second srun process) cancels the job when srun dies, and
# slurmstepd SIGKILLs the ranks (gone in 20-55 ms; slurmstepd ends ~2.4 s
# later). Either way each node's daemon acts on the launcher's death and
# the ranks go before their server, by its signal, silently. The bound is
# when the daemon acts (orted 1 s, slurmstepd at once) plus the lifeline's
# 1 s, should the server go first: 2000 ms under mpirun, 1000 ms under
# srun. A rank seen alive after its server was seen gone must say why (the
# lifeline's line); the lifeline takes ~10 ms, so such a rank may go unseen.
#
# The watcher (started by rank 0, detached from it) runs in the scenario:
# it kills the launcher by the pid run-cluster.sh leaves (--launcher-pid),
# times each rank and server by pid, and checks the scenario's private
# /dev/shm; --linger keeps the teardown from stopping anything meanwhile,
# so what is still there after it was left behind.
#   cluster_launcher_kill.sh RUN_CLUSTER mpirun|srun TW_MP_RANK
# (inside the scenario: --rank TW_MP_RANK DIR for each rank, --watch DIR)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../multiproc/mp_lib.sh"

if [ "${1:-}" = --rank ]; then
  # DIR/rankR.node: the node and the rank's parent, its PMIx server.
  r=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?no rank from the launcher}}
  echo "$(hostname) $PPID" >"$3/rank$r.node"
  if [ "$r" = 0 ]; then (setsid "$0" --watch "$3" </dev/null >"$3/watch.out" 2>&1 &); fi
  exec "$2" wait "$3" 12 2>"$3/rank$r.err"
fi

if [ "${1:-}" = --watch ]; then
  dir=$2
  # Gone or a zombie, with no fork (pid_gone's ps takes ~5 ms; times from
  # EPOCHREALTIME, in us, not date): the polls below come ~1 ms apart.
  dead() {
    local st
    { read -r st </proc/$1/stat; } 2>/dev/null || return 0
    st=${st##*) }
    [ "${st%% *}" = Z ]
  }
  launcher=$(cat "$dir/launcher.pid")
  wait_pid_files "$dir" 4 "$launcher" || { echo "the ranks did not all come up" >"$dir/watch.fail"; exit 1; }
  sleep 1 # every rank in its wait loop
  echo "$launcher $(cat "/proc/$launcher/comm")" >"$dir/launcher"
  declare -A server=() gone=() outlived=()
  for r in 0 1 2 3; do
    read -r _ s <"$dir/rank$r.node"
    server[$(cat "$dir/rank$r.pid")]=$s
  done
  servers=$(printf '%s\n' "${server[@]}" | sort -u)
  for p in $servers "${!server[@]}"; do
    if dead "$p"; then echo "pid $p was gone before the kill" >"$dir/watch.fail"; exit 1; fi
  done
  t0=${EPOCHREALTIME//[!0-9]/}
  kill -9 "$launcher"
  # Each pid's time is when it was first seen gone. Servers first: a rank
  # seen alive over 100 ms after its server was seen gone outlived it, and
  # must say why. (Within 100 ms it may be dying of the server's own kill:
  # a sanitizer build's exit unmaps its shadow memory, which takes a while.)
  while :; do # 6 s at most
    left=0
    for p in $servers "${!server[@]}"; do
      [ -z "${gone[$p]:-}" ] || continue
      now=$(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000))
      if dead "$p"; then
        gone[$p]=$now
      else
        left=1
        sv=${server[$p]:-}
        [ -z "$sv" ] || [ -z "${gone[$sv]:-}" ] || [ $((now - gone[$sv])) -le 100 ] || outlived[$p]=1
      fi
    done
    [ $left = 1 ] && [ $((${EPOCHREALTIME//[!0-9]/} - t0)) -lt 6000000 ] || break
    sleep 0.001
  done
  for p in $servers "${!server[@]}"; do
    echo "$p ${gone[$p]:-alive} ${outlived[$p]:+outlived}"
  done >"$dir/gone"
  # /dev/shm is the scenario's own: every tw-* name in it is this job's.
  if (shm_check "" "$dir" "after the launcher's death") >"$dir/shm.out" 2>&1; then
    : >"$dir/shm.ok"
  fi
  exit 0
fi

run=$1 launcher=$2 rank=$3
case $launcher in
  mpirun) bound=2000 server=orted ;;
  srun) bound=1000 server=slurmstepd ;;
  *) echo "usage: cluster_launcher_kill.sh RUN_CLUSTER mpirun|srun TW_MP_RANK"; exit 2 ;;
esac
work=$(mktemp -d /tmp/twtest-launcherkill.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"
rc=0
"$run" --launcher "$launcher" --nodes 2 --np 4 --timeout 30 --linger 12 \
  --launcher-pid "$work/launcher.pid" -- "$here/cluster_launcher_kill.sh" --rank "$rank" "$work" \
  >"$work/driver.out" 2>&1 || rc=$?
cat "$work/driver.out"
[ "$rc" -ne 77 ] || exit 77
for r in 0 1 2 3; do
  [ ! -f "$work/rank$r.err" ] || sed "s/^/rank $r: /" "$work/rank$r.err"
  [ -f "$work/rank$r.node" ] && [ -f "$work/rank$r.pid" ] ||
    fail "rank $r never got past tw_init (launcher status $rc)"
  # The library's lines obey the log rule, and tw_mp_rank's error handler
  # may report a peer its daemon killed first; anything else is a failure.
  ! grep -Eqv '^(\[tw |rank [0-9]+: error handler: rank [0-9]+, peer failed )' "$work/rank$r.err" ||
    fail "rank $r said something (above)"
done
for n in n1 n2; do
  [ "$(cut -d' ' -f1 "$work"/rank*.node | grep -cx $n)" -eq 2 ] || fail "not 2 ranks on $n"
done
[ ! -f "$work/watch.fail" ] || fail "$(cat "$work/watch.fail")"
[ -f "$work/gone" ] || { cat "$work/watch.out"; fail "the watcher left no result (launcher status $rc)"; }
read -r lpid lcomm <"$work/launcher"
[ "$lcomm" = "$launcher" ] || fail "pid $lpid killed as the launcher is $lcomm, not $launcher"

ms_of() { awk -v p="$1" '$1 == p { print $2 }' "$work/gone"; }
outlived() { awk -v p="$1" '$1 == p { print $3 }' "$work/gone"; }
times=""
for r in 0 1 2 3; do
  read -r node spid <"$work/rank$r.node"
  pid=$(cat "$work/rank$r.pid")
  ms=$(ms_of "$pid") sms=$(ms_of "$spid")
  [ "$ms" != alive ] || fail "rank $r (pid $pid, $node) still ran 6 s after $launcher's SIGKILL"
  [ "$ms" -le $bound ] || fail "rank $r on $node exited $ms ms after $launcher's SIGKILL (bound $bound)"
  [ "$sms" != alive ] || fail "$node's $server (pid $spid) still ran 6 s after $launcher's SIGKILL"
  if [ "$(outlived "$pid")" = outlived ]; then
    grep -qE "(the PMIx server .our parent, pid [0-9]+. is gone|lost the connection to the PMIx server).*: the job is over, exiting" \
      "$work/rank$r.err" || fail "rank $r outlived its $server (gone at $sms ms) and did not say why"
  fi
  echo "rank $r on $node: gone $ms ms after $launcher's SIGKILL, its $server (pid $spid) at $sms ms"
  times="$times $ms"
done
[ -f "$work/shm.ok" ] || { cat "$work/shm.out"; fail "the job left segments in /dev/shm"; }
! grep -E "run-cluster: (stopping leftovers|still running)" "$work/driver.out" >/dev/null ||
  fail "the teardown found the job's processes still running"
p=$(pgrep -f -- "$work" | tr '\n' ' ' || true)
[ -z "$p" ] || fail "processes left behind: $p"
echo "ok: $launcher SIGKILLed: all 4 ranks on n1 and n2 gone in$times ms (bound $bound), nothing left"
