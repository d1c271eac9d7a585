#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Simultaneous-connect storm over TCP: 4 ranks, every rank sends to every
# other at once as its first act (test_alltoall with one message per
# thread), 40 jobs in a row (TWTEST_SCALE divides). Every job must pass:
# the connect races settle without loss, error or hang. Every other job
# has its lanes wait with epoll (TW_TCP_POLL_MAX=0), the others with
# poll(2) (the default for 3 peers).
set -eu
twrun=$1 prog=$2
runs=$((40 / ${TWTEST_SCALE:-1}))
export TW_TRANSPORTS=tcp
for i in $(seq "$runs"); do
  max=$((i % 2 == 0 ? 8 : 0))
  if ! out=$(TW_TCP_POLL_MAX=$max "$twrun" -n 4 "$prog" -t 2 -m 2 --seed "$i" 2>&1); then
    echo "$out"
    echo "FAIL: storm job $i of $runs (TW_TCP_POLL_MAX=$max)"
    exit 1
  fi
done
echo "tcp storm: $runs jobs of 4 ranks (epoll and poll in turn), all passed"
