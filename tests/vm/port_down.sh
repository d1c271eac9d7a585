#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A port going down under traffic, inside the VM (busybox sh):
#   port_down.sh TWRUN TEST_ALLTOALL
# Two ranks stream over verbs with reliability on and tcp as a second path
# (on loopback, which stays up); a moment into the stream the netdev under
# rxe0 goes down, so the device reports IBV_EVENT_PORT_ERR. The async event
# thread must turn it into a path failure: the job still delivers every
# message exactly once and intact with every operation completing TW_OK
# (test_alltoall checks both: rc 0), the log shows the event and rel
# failing over to tcp (its failovers counter too), and no rank is declared
# failed (peer_failures=0). The netdev comes back up after.
set -u
twrun=$1 prog=$2
dev=${TWTEST_VM_NETDEV:-dummy0}
log=/tmp/port_down.log

cnt=/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts
base=$(cat "$cnt" 2>/dev/null || echo 0)
TW_RELIABLE=1 TW_TRANSPORTS=verbs,tcp,self TW_TCP_IF=lo \
  "$twrun" -n 2 "$prog" -t 2 -m 3000 --max-size 16k --stats >"$log" 2>&1 &
job=$!
# Down once this job has sent a few thousand packets over rxe0 (TCG is
# slow and its speed varies: wait for traffic, not for a time; rxe counts
# them in hw_counters/sent_pkts since boot), or after 3 s if it does not.
i=0
while [ "$i" -lt 60 ] && kill -0 "$job" 2>/dev/null; do
  n=$(cat "$cnt" 2>/dev/null || echo 0)
  [ $((n - base)) -gt 3000 ] && break
  sleep 0.05
  i=$((i + 1))
done
/usr/sbin/ip link set "$dev" down
wait "$job"
rc=$?
/usr/sbin/ip link set "$dev" up
cat "$log"
fail() { echo "port_down: FAIL: $*"; exit 1; }
[ "$rc" = 0 ] || fail "the job failed (rc $rc)"
grep -q "async event port error: port down" "$log" || fail "no port-down event was handled"
grep -q "failing over to tcp" "$log" || fail "rel did not fail over to tcp"
grep -q "rel:.* failovers=[1-9]" "$log" || fail "rel counted no failover"
if grep "rel:" "$log" | grep -qv " peer_failures=0 "; then fail "a rank was declared failed"; fi
echo "port_down: the port went down mid-stream: failed over to tcp, every message once"
