#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# An emulated cluster leaves nothing behind on the host: after a job under
# each launcher, and after the driver itself is killed mid-job (SIGTERM
# while the ranks still run), there is
#   - no process left from the scenario: none with its scratch directory
#     in its command line or environment (every process of a scenario has:
#     its PID 1 in the command line, all it starts TWCLUSTER_DIR),
#   - none of its namespaces mounted in the host's mount namespace,
#   - no bridge or veth on the host, no new entry in `ip netns list`,
#   - nothing in the TMPDIR it was given, no new PMIx/Open MPI/Slurm files
#     of its hosts (head, nK) in /tmp or /dev/shm.
#   check_leftovers.sh RUN_CLUSTER PROBE
set -uo pipefail
run=$1 probe=$2
fail() { echo "FAIL: $*"; exit 1; }
scratch=$(mktemp -d "${TMPDIR:-/tmp}/twcluster-check.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/tmp"
record=$scratch/record

host_state() {
  ip netns list 2>/dev/null | sort
  ip -o link show | awk -F': ' '{ print $2 }' | grep -E '^(twbr0|veth-n[0-9]+)' || true
  # Open MPI and PMIx name their files after the host: ours are head, nK
  # (other jobs on the host are none of our business).
  ls -d /tmp/spmix_* /tmp/ompi.head.* /tmp/ompi.n[0-9]* /tmp/pmix*.head.* /tmp/pmix*.n[0-9]* \
    /dev/shm/*.head.* /dev/shm/*.n[0-9]*.* 2>/dev/null | sort || true
}

# Everything that still refers to the scenarios recorded so far.
check_clean() {
  local what=$1 ids dirs p id bad=0
  ids=$(awk '$1 == "ns" { print $2 }' "$record")
  dirs=$(awk '$1 == "dir" { print $2 }' "$record")
  [ -n "$ids" ] && [ -n "$dirs" ] || fail "$what: the driver recorded no scenario"
  # Namespace ids are recycled as soon as one is freed, and other scenarios
  # may be running: a process in a namespace with a recorded id may well
  # be theirs. Its directory, though, names the scenario.
  # (the patterns from a file: grep's own command line must not match)
  echo "$dirs" >"$scratch/dirs"
  for p in $(grep -lsF -f "$scratch/dirs" /proc/[0-9]*/cmdline /proc/[0-9]*/environ); do
    p=${p#/proc/}
    p=${p%%/*}
    [ -e "/proc/$p" ] || continue
    echo "$what: process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null)) refers to its directory"
    bad=1
  done
  for id in $ids; do
    if grep -qF -- "$id" /proc/self/mountinfo; then
      echo "$what: $id is still mounted on the host"
      bad=1
    fi
  done
  for id in $dirs; do
    [ ! -e "$id" ] || { echo "$what: $id is still there"; bad=1; }
  done
  [ -z "$(ls -A "$scratch/tmp")" ] || { echo "$what: left in TMPDIR: $(ls -A "$scratch/tmp")"; bad=1; }
  [ "$(host_state)" = "$before" ] ||
    { echo "$what: the host changed:"; diff <(echo "$before") <(host_state); bad=1; }
  [ $bad -eq 0 ] || fail "$what left something behind"
  echo "ok: $what: nothing left behind"
}

before=$(host_state)
export TWCLUSTER_RECORD=$record

for l in mpirun srun; do
  out=$(TMPDIR=$scratch/tmp "$run" --launcher $l --nodes 2 --np 2 -- "$probe" 2>&1)
  rc=$?
  [ $rc -ne 77 ] || { echo "$out"; echo "skipped: $l is not available"; exit 77; }
  [ $rc -eq 0 ] || { echo "$out"; fail "the $l job failed ($rc)"; }
  check_clean "a job under $l"
done

# Killed mid-job: SIGTERM to the driver while the ranks sleep.
: >"$record"
TMPDIR=$scratch/tmp "$run" --launcher srun --nodes 2 --np 2 -- sleep 60 &
driver=$!
for t in $(seq 100); do
  grep -q '^ns ' "$record" && [ -n "$(ls -A "$scratch"/tmp/twcluster.*/nodes/n2/tmp 2>/dev/null)" ] &&
    break
  sleep 0.1
done
grep -q '^ns ' "$record" || fail "the killed job's cluster never came up"
sleep 1
kill -TERM $driver
wait $driver
rc=$?
[ $rc -ne 0 ] || fail "the killed driver exited 0"
check_clean "a driver killed mid-job (exit $rc)"
