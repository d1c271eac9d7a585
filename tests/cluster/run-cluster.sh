#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Runs a program across an emulated cluster on this one machine, then tears
# the cluster down; exits with the program's status (README.md here).
#
#   run-cluster.sh --launcher mpirun|srun|none --nodes N --np P
#                  [--env VAR=VAL]... [--timeout S] [--cut NODE@S[+D]]...
#                  [--keep-going] [--launcher-pid FILE] [--linger S]
#                  [--sidecar CMD]... -- prog args...
#
# The whole scenario runs in private mount, network, UTS and PID namespaces
# (unshare), so the host's network is never touched, parallel runs cannot
# collide, and whatever the scenario started dies with its PID namespace:
#   head   the scenario's own network namespace, hostname "head": a bridge
#          twbr0 with 198.18.0.1/24; mpirun, srun and slurmctld run here.
#   nK     one network namespace per node (/run/netns/nK on a private
#          tmpfs), joined to the bridge by a veth pair (eth0 inside, address
#          198.18.0.(10+K)); its processes get a UTS namespace named nK.
# 198.18.0.0/15 is reserved for benchmarks (RFC 2544); /etc/hosts (bound
# over in the private mount namespace) names head and every node.
#
# Launchers:
#   mpirun  Open MPI with a hostfile and cluster-agent.sh as its rsh agent
#           (orted on each node, in the node's namespaces); out-of-band and
#           TCP traffic on the bridge subnet; variables forwarded with -x.
#   srun    a throw-away Slurm: a private munged (key, socket), slurmctld in
#           the head, one slurmd per node inside the node's namespaces
#           (NodeAddr = its bridge address, spool and PMIx directories its
#           own), MpiDefault=pmix; srun --mpi=pmix -N N -n P.
#   none    the program once, in the head (for scripts that drive the
#           nodes themselves with `ip netns exec nK` and cluster-link.sh).
# Options:
#   --env VAR=VAL  set for the program on every node (TW_* and TWTEST_*
#                  variables already set are forwarded too).
#   --timeout S    stop the launcher after S seconds (default 45): exit 124.
#   --cut NODE@S[+D]  cut NODE's link S seconds after the launch, restore it
#                  D seconds later (cluster-link.sh), while the job runs.
#   --keep-going   a rank that dies does not end the job: the survivors
#                  run on (mpirun --mca orte_enable_recovery 1; srun
#                  --kill-on-bad-exit=0). Both launchers otherwise kill
#                  every rank once one dies. The exit status is then the
#                  launcher's: mpirun says 0 after a recovered death, srun
#                  the dead rank's status.
#   --launcher-pid FILE  write the launcher's pid (mpirun, srun; as the
#                  scenario's PID namespace numbers it, like the ranks'
#                  own pids) to FILE once it runs, for a rank to kill it.
#   --linger S     when the launcher has ended, give what it leaves behind
#                  (orted, slurmstepd, ranks) up to S seconds to exit by
#                  itself before the teardown stops it.
#   --sidecar CMD  run CMD (split at spaces) in the head beside the job,
#                  from the launch on, stopped with the daemons if it is
#                  still running; it sees what the program sees (TW*), so
#                  it can watch the nodes (ip netns exec nK ...) or cut them;
#                  may be given more than once.
# The program sees TWCLUSTER_NODES ("n1 n2 ..."), TWCLUSTER_SUBNET,
# TWCLUSTER_LINK (cluster-link.sh) and TWCLUSTER_DIR (scratch, shared).
# Exit 77 with a reason when root, unshare, ip, nft, namespaces or the
# launcher are missing. TWCLUSTER_RECORD=FILE appends the scenario's
# namespace ids and scratch directory to FILE (check_leftovers.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
me=$here/$(basename "$0")
SUBNET=198.18.0.0/24
HEAD_IP=198.18.0.1
node_ip() { echo "198.18.0.$((10 + $1))"; }
die() { echo "run-cluster: $*" >&2; exit 2; }
skip() { echo "run-cluster: skipped: $*" >&2; exit 77; }
log() { echo "run-cluster: $*" >&2; }

usage() {
  sed -n '8,11p' "$me" | sed 's/^# //' >&2
  exit 2
}

launcher="" nodes=2 np="" timeout=45 envs=() cuts=() prog=() keep_going=0
launcher_pid="" linger=0 sidecars=()
parse_args() {
  while [ $# -gt 0 ]; do
    case $1 in
      --launcher) launcher=${2:-}; shift 2 ;;
      --nodes) nodes=${2:-}; shift 2 ;;
      --np) np=${2:-}; shift 2 ;;
      --env) envs+=("${2:-}"); shift 2 ;;
      --timeout) timeout=${2:-}; shift 2 ;;
      --cut) cuts+=("${2:-}"); shift 2 ;;
      --keep-going) keep_going=1; shift ;;
      --launcher-pid) launcher_pid=${2:-}; shift 2 ;;
      --linger) linger=${2:-}; shift 2 ;;
      --sidecar) sidecars+=("${2:-}"); shift 2 ;;
      --) shift; prog=("$@"); break ;;
      *) usage ;;
    esac
  done
  case $launcher in mpirun | srun | none) ;; *) usage ;; esac
  [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 32 ] ||
    die "--nodes takes 1 to 32"
  np=${np:-$nodes}
  [[ $np =~ ^[0-9]+$ ]] && [ "$np" -ge "$nodes" ] || die "--np takes a number >= --nodes"
  [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout takes seconds"
  [[ $linger =~ ^[0-9]+$ ]] || die "--linger takes seconds"
  local e c
  for e in ${envs[@]+"${envs[@]}"}; do
    [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env takes VAR=VAL, not '$e'"
  done
  for c in ${cuts[@]+"${cuts[@]}"}; do
    [[ $c =~ ^n[0-9]+@[0-9.]+(\+[0-9.]+)?$ ]] || die "--cut takes NODE@S[+D], not '$c'"
  done
  [ ${#prog[@]} -gt 0 ] || usage
}

# ---- outside: checks, the scratch directory, the namespaces -------------
outside() {
  local c work rc=0
  [ "$(id -u)" -eq 0 ] || skip "needs root (namespaces, veth, nftables)"
  for c in unshare ip nft mount; do
    command -v $c >/dev/null || skip "'$c' not found (util-linux, iproute2, nftables)"
  done
  case $launcher in
    mpirun) command -v mpirun >/dev/null || skip "mpirun not found (openmpi-bin)" ;;
    srun)
      for c in srun sinfo slurmctld slurmd munged; do
        command -v $c >/dev/null ||
          skip "'$c' not found (slurmd slurmctld slurm-client munge)"
      done
      ;;
  esac
  unshare -m -n -u -p -f --mount-proc true 2>/dev/null ||
    skip "cannot create mount/network/UTS/PID namespaces here (unshare)"
  work=$(mktemp -d "${TMPDIR:-/tmp}/twcluster.XXXXXX")
  chmod 0755 "$work"
  trap 'rm -rf "$work"' EXIT
  # --kill-child: if unshare dies, the PID namespace and all in it go too.
  unshare -m -n -u -p -f --mount-proc --kill-child --propagation private \
    "$me" --inside "$work" "$@" &
  ns_pid=$!
  # A signal stops the scenario in order: its PID 1 (unshare's child)
  # stops the job and the daemons (inside's trap), then we remove $work.
  trap 'forward_stop; exit 143' TERM INT HUP
  wait $ns_pid || rc=$?
  exit $rc
}

ns_pid=""
forward_stop() {
  local init
  init=$(cat "/proc/$ns_pid/task/$ns_pid/children" 2>/dev/null) || true
  kill -TERM ${init:-$ns_pid} 2>/dev/null || true
  wait $ns_pid 2>/dev/null || true
}

# ---- inside: PID 1 of the scenario ---------------------------------------
work="" pids=() job="" stopping=0

scenario_up() {
  local i n
  mount -t tmpfs -o mode=0755 twcluster-run /run
  mkdir -p /run/netns
  mount -t tmpfs -o mode=1777 twcluster-shm /dev/shm
  hostname head
  {
    echo "127.0.0.1 localhost"
    echo "$HEAD_IP head"
    for i in $(seq 1 "$nodes"); do echo "$(node_ip "$i") n$i"; done
  } >"$work/hosts"
  mount --bind "$work/hosts" /etc/hosts
  mkdir -p "$work/tmp"

  ip link set lo up
  ip link add twbr0 type bridge
  ip addr add "$HEAD_IP/24" dev twbr0
  ip link set twbr0 up
  for i in $(seq 1 "$nodes"); do
    n=n$i
    ip netns add $n
    ip link add veth-$n type veth peer name eth0 netns $n
    ip link set veth-$n master twbr0 up
    ip -n $n link set lo up
    ip -n $n addr add "$(node_ip "$i")/24" dev eth0
    ip -n $n link set eth0 up
    mkdir -p "$work/nodes/$n/tmp"
  done
  if [ -n "${TWCLUSTER_RECORD:-}" ]; then
    {
      echo "dir $work"
      for i in pid net mnt uts; do echo "ns $(readlink /proc/self/ns/$i)"; done
      for i in $(seq 1 "$nodes"); do echo "ns net:[$(stat -L -c %i /run/netns/n$i)]"; done
    } >>"$TWCLUSTER_RECORD"
  fi
}

# Stops what we started, by pid: TERM, then KILL after 5 s (STOP_GRACE
# tenths of a second). Anything else still alive in this PID namespace is
# ours too (slurmstepd, orted, ranks).
stop_pids() {
  local p t alive
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for t in $(seq "${STOP_GRACE:-50}"); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 1 ] || break
    sleep 0.1
  done
  for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# The daemons' logs: copied to TWCLUSTER_LOGS if set; their ends shown when
# the job failed.
keep_logs() {
  local rc=$1 f
  if [ -n "${TWCLUSTER_LOGS:-}" ]; then
    mkdir -p "$TWCLUSTER_LOGS"
    (cd "$work" && find . \( -name '*.log' -o -name stdout \) -exec cp --parents {} \
      "$TWCLUSTER_LOGS" \;) || true
  fi
  [ "$rc" -ne 0 ] && [ "$launcher" = srun ] || return 0
  for f in "$work"/slurm/ctld/slurmctld.log "$work"/nodes/*/slurmd.log; do
    [ -f "$f" ] || continue
    log "the last lines of ${f#"$work"/}:"
    tail -n 8 "$f" >&2
  done
}

# The live processes of this PID namespace but PID 1, this shell, PIDS and
# the children of PIDS (slurmctld's slurmscriptd, a cut's sleep).
others() { # PIDS...
  local i st
  for i in /proc/[0-9]*; do
    i=${i#/proc/}
    [ "$i" != 1 ] || continue
    { st=$(<"/proc/$i/stat"); } 2>/dev/null && [ -e "/proc/$i/exe" ] || continue
    st=${st##*) } # after "pid (comm) ": state ppid ...
    st=${st#* }
    case " $* $BASHPID " in *" $i "* | *" ${st%% *} "*) continue ;; esac
    echo "$i"
  done
}

# --linger: nothing the launcher left runs (the daemons and cuts aside).
job_left_gone() { [ -z "$(others ${pids[@]+"${pids[@]}"})" ]; }

scenario_down() {
  local left i
  [ $stopping -eq 0 ] || return 0
  stopping=1
  # The job first (timeout passes the signal on to the launcher), then
  # the daemons and cuts in reverse order of their start.
  [ -z "$job" ] || stop_pids "$job"
  # The daemons get 1 s each: one on a node cut off (slurmd) would spend
  # the whole 5 s trying to report to its controller.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do STOP_GRACE=10 stop_pids "${pids[i]}"; done
  left=$(others)
  if [ -n "$left" ]; then
    log "stopping leftovers: $(for i in $left; do tr '\0' ' ' </proc/$i/cmdline; echo; done 2>/dev/null)"
    # What the launcher left behind gets 1 s too (a slurmstepd cut off).
    STOP_GRACE=10 stop_pids $left
  fi
  for i in $(seq 1 "$nodes"); do ip netns del "n$i" 2>/dev/null || true; done
  ip link del twbr0 2>/dev/null || true
}

# Environment for the program: --env, and TW_* / TWTEST_* already set.
fwd_vars=()
setup_env() {
  local e v
  for e in ${envs[@]+"${envs[@]}"}; do
    export "${e?}"
    fwd_vars+=("${e%%=*}")
  done
  for v in $(compgen -e); do
    case $v in TW_* | TWTEST_*) fwd_vars+=("$v") ;; esac
  done
  export TWCLUSTER_NODES TWCLUSTER_SUBNET=$SUBNET TWCLUSTER_LINK=$here/cluster-link.sh
  export TWCLUSTER_DIR=$work TMPDIR=$work/tmp
  TWCLUSTER_NODES=$(seq -f 'n%g' -s ' ' 1 "$nodes")
  fwd_vars+=(TWCLUSTER_NODES TWCLUSTER_SUBNET TWCLUSTER_LINK TWCLUSTER_DIR)
}

start_cuts() {
  local c node at dur
  for c in ${cuts[@]+"${cuts[@]}"}; do
    node=${c%@*} at=${c#*@} dur=""
    case $at in *+*) dur=${at#*+} at=${at%+*} ;; esac
    (
      sleep "$at"
      "$here/cluster-link.sh" down "$node" && log "cut $node's link"
      if [ -n "$dur" ]; then
        sleep "$dur"
        "$here/cluster-link.sh" up "$node" && log "restored $node's link"
      fi
    ) &
    pids+=($!)
  done
}

start_sidecar() {
  local cmd s
  for s in ${sidecars[@]+"${sidecars[@]}"}; do
    read -ra cmd <<<"$s"
    "${cmd[@]}" &
    pids+=($!)
  done
}

# Ranks per node, as srun's block distribution: the first P mod N get one more.
slots_of() { echo $((np / nodes + ($1 <= np % nodes ? 1 : 0))); }

# The launch command line, into launch=().
launch=()
mpirun_cmd() {
  local i x=()
  for i in $(seq 1 "$nodes"); do echo "n$i slots=$(slots_of "$i")"; done >"$work/hostfile"
  for i in "${fwd_vars[@]}"; do x+=(-x "$i"); done
  [ "$keep_going" = 0 ] || x+=(--mca orte_enable_recovery 1)
  launch=(mpirun --allow-run-as-root --bind-to none
    --hostfile "$work/hostfile" --mca plm_rsh_agent "$here/cluster-agent.sh"
    --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include "$SUBNET"
    --mca btl_tcp_if_include "$SUBNET" "${x[@]}" -np "$np" "${prog[@]}")
}

# Polls until CMD succeeds, for at most S seconds (tenths).
wait_for() {
  local s=$1 t
  shift
  for t in $(seq $((s * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

slurm_conf() {
  local d=$1 i
  cat <<CONF
# A throw-away cluster (tests/cluster/run-cluster.sh); nothing here outlives it.
ClusterName=twcluster
SlurmctldHost=head($HEAD_IP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.socket
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MailProg=/bin/true
StateSaveLocation=$d/ctld
SlurmctldPidFile=$d/ctld/slurmctld.pid
SlurmctldLogFile=$d/ctld/slurmctld.log
SlurmdSpoolDir=$work/nodes/%n/spool
SlurmdPidFile=$work/nodes/%n/slurmd.pid
SlurmdLogFile=$work/nodes/%n/slurmd.log
TmpFS=$work/nodes/%n/tmp
TaskProlog=$d/task-prolog.sh
CONF
  for i in $(seq 1 "$nodes"); do
    echo "NodeName=n$i NodeHostname=n$i NodeAddr=$(node_ip "$i") CPUs=$(slots_of 1) State=UNKNOWN"
  done
  echo "PartitionName=tw Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
}

slurm_nodes_idle() {
  [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -eq "$nodes" ]
}

slurm_up() {
  local d=$work/slurm i n
  mkdir -p "$d/ctld"
  chmod 0755 "$d" # munged: the socket's directory must be searchable
  head -c 1024 /dev/urandom >"$d/munge.key"
  chmod 0600 "$d/munge.key"
  munged --foreground --force --socket="$d/munge.socket" --key-file="$d/munge.key" \
    --pid-file="$d/munged.pid" --log-file="$d/munged.log" --seed-file="$d/munged.seed" \
    >"$d/munged.stdout" 2>&1 &
  pids+=($!)
  wait_for 10 test -S "$d/munge.socket" || { cat "$d/munged.log" >&2; die "munged did not start"; }

  slurm_conf "$d" >"$d/slurm.conf"
  # Each node's tasks get its own TMPDIR, as under mpirun (cluster-agent.sh).
  printf '#!/bin/sh\necho "export TMPDIR=%s/nodes/$(hostname)/tmp"\n' "$work" >"$d/task-prolog.sh"
  chmod 0755 "$d/task-prolog.sh"
  # Slurm 22.05 loads a cgroup plugin even when nothing uses cgroups
  # (proctrack/linuxproc, task/none): each slurmd gets an empty tmpfs as
  # /sys/fs/cgroup in its own mount namespace, so it touches no real one.
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$d/cgroup.conf"
  export SLURM_CONF=$d/slurm.conf
  srun --mpi=list 2>&1 | grep -qw pmix ||
    skip "Slurm has no pmix plugin (srun --mpi=list): $(srun --mpi=list 2>&1 | tr '\n' ' ')"
  slurmctld -D -f "$SLURM_CONF" >"$d/ctld/stdout" 2>&1 &
  pids+=($!)
  for i in $(seq 1 "$nodes"); do
    n=n$i
    mkdir -p "$work/nodes/$n/spool"
    ip netns exec $n unshare --uts -- env TMPDIR="$work/nodes/$n/tmp" \
      sh -c 'hostname "$1" && mount -t tmpfs twcluster-cgroup /sys/fs/cgroup &&
             exec slurmd -D -N "$1" -f "$2"' slurmd $n "$SLURM_CONF" \
      >"$work/nodes/$n/stdout" 2>&1 &
    pids+=($!)
  done
  if ! wait_for 20 slurm_nodes_idle; then
    sinfo -N >&2 || true
    tail -n 20 "$d/ctld/slurmctld.log" "$work"/nodes/*/slurmd.log "$work"/nodes/*/stdout >&2 || true
    die "the Slurm nodes did not come up within 20 s"
  fi
}

srun_cmd() {
  launch=(srun --mpi=pmix -N "$nodes" -n "$np" --export=ALL
    --kill-on-bad-exit=$((1 - keep_going)) "${prog[@]}")
}

inside() {
  local rc=0 left
  work=$1
  shift
  parse_args "$@"
  trap scenario_down EXIT
  trap 'exit 143' TERM INT HUP
  scenario_up
  setup_env
  # In the background, so that a signal's trap runs at once (bash runs
  # traps only between foreground commands); scenario_down stops it.
  case $launcher in
    mpirun) mpirun_cmd ;;
    srun) slurm_up && srun_cmd ;;
    none) launch=("${prog[@]}") ;;
  esac
  start_cuts
  [ -z "$launcher_pid" ] || launch=(sh -c 'echo $$ >"$0" && exec "$@"' "$launcher_pid" "${launch[@]}")
  start_sidecar
  timeout -k 5 "$timeout" "${launch[@]}" &
  job=$!
  wait $job || rc=$?
  job=""
  if [ "$linger" -gt 0 ] && ! wait_for "$linger" job_left_gone; then
    mapfile -t left < <(others ${pids[@]+"${pids[@]}"})
    log "still running $linger s after the launcher ended: ${left[*]}"
  fi
  [ $rc -ne 124 ] || log "the job did not finish within $timeout s"
  keep_logs $rc
  scenario_down
  exit $rc
}

if [ "${1:-}" = --inside ]; then
  shift
  inside "$@"
fi
parse_args "$@"
outside "$@"
