#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# A port going down under traffic and coming back, inside the VM (busybox sh):
#   port_flap.sh TWRUN TEST_ALLTOALL
# Two ranks stream over verbs with reliability on and tcp as a second path
# (on loopback, which stays up). A moment into the stream the netdev under
# rxe0 goes down (IBV_EVENT_PORT_ERR): the verbs peers are down for now, rel
# fails over to tcp. A while later the netdev comes back up
# (IBV_EVENT_PORT_ACTIVE): rel's probes reconnect the verbs path and, once
# answered, rel fails back to it, so the rest of the stream goes over verbs
# again. Checked: the job delivers every message exactly once and intact
# with every operation completing TW_OK (test_alltoall: rc 0), both ranks'
# rel counted failovers and failbacks, rxe0 carried the stream again after
# the up (its sent_pkts counter), no rank was declared failed
# (peer_failures=0), and the log shows both events and both rel transitions.
set -u
twrun=$1 prog=$2
dev=${TWTEST_VM_NETDEV:-dummy0}
log=/tmp/port_flap.log
cnt=/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts
fail() {
  echo "port_flap: FAIL: $*"
  exit 1
}
pkts() { cat "$cnt" 2>/dev/null || echo 0; }
now() { cut -d' ' -f1 /proc/uptime; }
# Wait (0.05 s steps, at most $2 of them) while the job runs until rxe0 sent
# $1 packets more than now; false if the job ended or time ran out first.
wait_pkts() {
  from=$(pkts) i=0
  while [ "$i" -lt "$2" ]; do
    kill -0 "$job" 2>/dev/null || return 1
    [ $(($(pkts) - from)) -gt "$1" ] && return 0
    sleep 0.05
    i=$((i + 1))
  done
  return 1
}

# Enough messages that the stream outlasts the flap under TCG (the job
# ends early if it is fast: then the after-up check below fails, saying so).
TW_LOG_LEVEL=info TW_RELIABLE=1 TW_TRANSPORTS=verbs,tcp,self TW_TCP_IF=lo \
  "$twrun" -n 2 "$prog" -t 2 -m 8000 --max-size 16k --stats >"$log" 2>&1 &
job=$!
# Down once the job has sent a few thousand packets over rxe0 (wait for
# traffic, not for a time: TCG's speed varies), or after 3 s if it has not.
t0=$(now)
wait_pkts 3000 60
t_down=$(now)
/usr/sbin/ip link set "$dev" down
# Down for a second: rel is on tcp by then, its probes of verbs refused.
sleep 1
up_at=$(pkts)
/usr/sbin/ip link set "$dev" up
# Traffic back on rxe0: thousands of packets, far more than rel's probes
# and a reconnection take.
t_up=$(now)
back=no
wait_pkts 3000 600 && back=yes
t_back=$(now)
after_up=$(($(pkts) - up_at))
wait "$job"
rc=$?
t_end=$(now)
/usr/sbin/ip link set "$dev" up
cat "$log"
echo "port_flap: rxe0 sent $after_up packets after the port came back up"
echo "port_flap: start $t0, down $t_down, up $t_up, back on rxe0 $t_back, end $t_end (uptime, s)"
[ "$rc" = 0 ] || fail "the job failed (rc $rc)"
grep -q "async event port error: port down" "$log" || fail "no port-down event was handled"
grep -q "async event port active: port 1 is active again" "$log" ||
  fail "no port-active event was handled"
grep -q "rxe0 port 1 is usable again" "$log" || fail "the port was not found usable again"
grep -q "failing over to tcp" "$log" || fail "rel did not fail over to tcp"
grep -q "path verbs to rank [0-9]* is healthy again: failing back" "$log" ||
  fail "rel did not fail back to verbs"
# Both ranks' (one device: both lose the port) counters, on every rel line.
[ "$(grep -c "rel:.* failovers=[1-9]" "$log")" = 2 ] || fail "a rank counted no failover"
[ "$(grep -c "rel:.* failbacks=[1-9]" "$log")" = 2 ] || fail "a rank counted no failback"
if grep "rel:" "$log" | grep -qv " peer_failures=0 "; then fail "a rank was declared failed"; fi
[ "$back" = yes ] || fail "the stream did not come back to rxe0 after the up ($after_up packets)"
echo "port_flap: the port went down and came back mid-stream: failed over to tcp and back" \
  "to verbs, every message once"
