#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# tw_info lists the transports, placement and every variable, shows what
# the environment sets, and warns about an unknown TW_* variable.
set -euo pipefail
out=$(TW_WAIT_MODE=spin TW_NO_SUCH_KNOB=1 "$1" 2>&1)
for want in "self   available" "shm    available" "rndv" "TW_SHM_CELLS" "TW_SHM_CMA" "TW_TCP_IF" "TW_TCP_AF" "TW_TCP_TIMEOUT" "TW_TCP_THREADS" "TW_VERBS_DEVICES" "TW_VERBS_GID_INDEX" "TW_VERBS_TIMEOUT" "socket0: cpus" "TW_WAIT_MODE" "[set: spin]" "TW_LOG_LEVEL" \
            "TW_PROGRESS_RING" "TW_FAULT" "TW_REL_RTO" "TW_REL_KEEPALIVE" "reliability layer" \
            "unknown environment variable TW_NO_SUCH_KNOB" \
            "this environment: single" "TW_BOOT_TIMEOUT" "TW_NODE_ID" \
            "1 unknown TW_\* variable"; do
  grep -q -- "$want" <<<"$out" || { echo "tw_info output lacks '$want':"; echo "$out"; exit 1; }
done
[ "$(grep -c '^  shm ' <<<"$out")" -eq 1 ] || { echo "shm listed more than once:"; echo "$out"; exit 1; }
# Why a transport is unavailable is said, not hidden (verbs: no RDMA device on
# this host, or not built); where it is available it is opt-in for now. tcp
# is in the default set.
grep -qE "verbs  (unavailable \(.+\)|available .*opt-in)" <<<"$out" || { echo "no reason for verbs:"; echo "$out"; exit 1; }
grep -q "lossy  available" <<<"$out" || { echo "lossy not listed:"; echo "$out"; exit 1; }
grep -q "tcp    available" <<<"$out" || { echo "tcp not available:"; echo "$out"; exit 1; }
if grep -q "^  tcp .*opt-in" <<<"$out"; then echo "tcp shown as opt-in:"; echo "$out"; exit 1; fi
verbose=$("$1" -v 2>&1)
grep -q "value:" <<<"$verbose" || { echo "tw_info -v lacks the value lines"; exit 1; }
echo "tw_info: ok"
