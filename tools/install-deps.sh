#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Install the Debian packages threadwire needs to build, test and benchmark.
# Idempotent: does nothing when everything is present; otherwise runs
# apt-get update once, then installs what is missing. Needs root (or sudo).
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config clang clang-format
  libclang-rt-14-dev
  libck-dev libevent-dev libjemalloc-dev libhwloc-dev
  libbenchmark-dev
  libibverbs-dev libpmix-dev
  util-linux procps nftables iproute2 python3
  # tools/plot-perf.sh, tools/report.sh: the plots
  gnuplot-nox
  # tools/perf-peers.sh, perf-coll.sh, report.sh: the peers measured beside
  # threadwire (ucx_perftest; Open MPI's mpicc for bench/mpi_*.c)
  ucx-utils libopenmpi-dev
  # tests/common/tw_mp.c: a stalled test prints its threads' stacks
  gdb
  # tests/cluster: emulated clusters under mpirun and a throw-away Slurm
  openmpi-bin slurmd slurmctld slurm-client munge
  # tests/vm (tw-vm.sh): QEMU, and what goes into the VM besides the kernel
  qemu-system-x86 busybox-static ibverbs-providers ibverbs-utils xz-utils
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
