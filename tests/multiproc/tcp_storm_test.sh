#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Simultaneous-connect storm over TCP: 4 ranks, every rank sends to every
# other at once as its first act (test_alltoall with one message per
# thread), 40 jobs in a row (TWTEST_SCALE divides). Every job must pass:
# the connect races settle without loss, error or hang.
set -eu
twrun=$1 prog=$2
runs=$((40 / ${TWTEST_SCALE:-1}))
export TW_TRANSPORTS=tcp
for i in $(seq "$runs"); do
  if ! out=$("$twrun" -n 4 "$prog" -t 2 -m 2 --seed "$i" 2>&1); then
    echo "$out"
    echo "FAIL: storm job $i of $runs"
    exit 1
  fi
done
echo "tcp storm: $runs jobs of 4 ranks, all passed"
