#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Join time: how long tw_init takes for 2..64 processes, beside Open MPI's
# MPI_Init measured in the same run (tools/perf/tw_join.c,
# tools/bench-peers/mpi_join.c: every rank times its init call; a run's
# figure is its slowest rank's, when the whole job has joined). REPS runs
# (default 3) per cell, alternating, medians in ms.
#   tools/perf-join.sh [BUILD_DIR]        (default build/release)
#   SIZES="2 4 8 16 32 64"                process counts
#   LAUNCHERS="twrun mpirun mpirun2n srun2n"
#       twrun     the embedded launcher (threadwire only)
#       mpirun    both programs under Debian's Open MPI on this node
#                 (threadwire joins through PMIx)
#       mpirun2n, srun2n  both programs over 2 emulated nodes
#                 (tests/cluster/run-cluster.sh: root, namespaces; srun
#                 with a throw-away Slurm), ranks split between them
# Needs openmpi-bin and libopenmpi-dev for the MPI_Init column; the 2n rows
# what tests/cluster needs (slurmd slurmctld slurm-client munge for srun).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
reps=${REPS:-3}
sizes=${SIZES:-"2 4 8 16 32 64"}
launchers=${LAUNCHERS:-"twrun mpirun mpirun2n srun2n"}
[ -x "$build/tools/tw_join" ] && [ -x "$build/tools/twrun" ] ||
  { echo "build $build first (cmake --build $build --target tw_join twrun)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-join.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
have_mpi=
if command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
  mpicc -O2 -o "$tmp/mpi_join" tools/bench-peers/mpi_join.c 2>"$tmp/log"; then
  have_mpi=1
else
  echo "perf-join: no mpicc/mpirun (openmpi-bin, libopenmpi-dev): no MPI_Init column" >&2
fi
mpirun_args=(--oversubscribe --bind-to none)
[ "$(id -u)" != 0 ] || mpirun_args+=(--allow-run-as-root)

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
# slowest FILE N: the largest join time (ms) of a run's N lines, or "-".
slowest() {
  awk -F, -v n="$2" '$1 == "join" { k++; if ($5 > m) m = $5 }
    END { if (k == n) printf "%.1f\n", m / 1000; else print "-" }' "$1"
}
# run WHO LAUNCHER N: one run, its slowest rank's join time in ms.
run() {
  local who=$1 launcher=$2 n=$3 prog out=$tmp/out
  prog=$build/tools/tw_join
  [ "$who" = tw ] || prog=$tmp/mpi_join
  case $launcher in
    twrun) timeout 120 "$build/tools/twrun" -n "$n" "$prog" >"$out" 2>"$tmp/log" || true ;;
    mpirun) timeout 120 mpirun "${mpirun_args[@]}" -np "$n" "$prog" >"$out" 2>"$tmp/log" || true ;;
    mpirun2n | srun2n)
      tests/cluster/run-cluster.sh --launcher "${launcher%2n}" --nodes 2 --np "$n" --timeout 100 \
        -- "$prog" >"$out" 2>"$tmp/log" || true
      ;;
  esac
  v=$(slowest "$out" "$n")
  [ "$v" != - ] || { echo "perf-join: $who under $launcher -n $n failed:" >&2; tail -3 "$tmp/log" >&2; }
  echo "$v"
}

declare -A r
for _ in $(seq "$reps"); do
  for n in $sizes; do
    for l in $launchers; do
      r[tw.$l.$n]+="$(run tw "$l" "$n") "
      if [ "$l" != twrun ] && [ -n "$have_mpi" ]; then
        r[mpi.$l.$n]+="$(run mpi "$l" "$n") "
      fi
    done
  done
done
m() { tr ' ' '\n' <<<"${r[$1]:-}" | awk 'NF && $1 != "-"' | median; }
printf '%-10s %6s %16s %16s\n' launcher procs "tw_init (ms)" "MPI_Init (ms)"
for l in $launchers; do
  for n in $sizes; do
    printf '%-10s %6s %16s %16s\n' "$l" "$n" "$(m "tw.$l.$n")" "$(m "mpi.$l.$n")"
  done
done
