#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# tw-vm.sh - run test cases inside a throw-away QEMU (TCG) VM that boots
# Debian's kernel with Soft-RoCE (rdma_rxe), so the verbs transport meets a
# real RDMA device on hosts without one. One boot per group, many cases.
#
# Usage:
#   tw-vm.sh [options] --case NAME='CMD' ... [--pair-case NAME='CMD' ...]
#
# Cases (names: letters, digits and _ . : - only; CMD: one line of busybox sh):
#   --case NAME=CMD       run CMD in the single-VM group
#   --pair-case NAME=CMD  run CMD in BOTH VMs of the two-VM group, at the same
#                         time (a barrier starts every case on both sides);
#                         it passes only if it passes on both
#   --cases FILE          read cases from FILE, one per line:
#                           case NAME CMD...      (single VM)
#                           pair NAME CMD...      (two VMs)
#                         blank lines and lines starting with # are ignored
#   --pair                every --case given is a two-VM case
# Payload (host files named by absolute path in a CMD come along by
# themselves, with their libraries):
#   --add PATH            copy PATH into the VM at the same absolute path;
#                         ELF files bring every library ldd lists; directories
#                         are copied whole (minus CMakeFiles/, *.o, *.a) and
#                         every ELF file inside brings its libraries. Repeatable.
#   --env K=V             export K=V to every case. Repeatable.
# Run:
#   --timeout S           kill a VM after S seconds (TWTEST_VM_TIMEOUT, default 600)
#   --case-timeout S      kill a case's process group after S seconds
#                         (TWTEST_VM_CASE_TIMEOUT, default 0 = no per-case limit)
#   --mem MB / --smp N    guest RAM / vCPUs (TWTEST_VM_MEM 1024, TWTEST_VM_SMP 2)
#   --allow-skip          a case exiting 77 does not fail the run
#   --verbose             stream the VM consoles (TWTEST_VM_VERBOSE=1)
#   --keep                keep the work directory (TWTEST_VM_KEEP=1)
#   --shell               single VM, interactive: a shell after the cases
#                         (Ctrl-A x quits QEMU)
#   --fetch-only          only prepare the cache (kernel, base initramfs)
#
# Inside the VM every case runs as root with cwd /tmp/tw-vm/NAME, stdin
# /dev/null, in its own process group (killed when the case ends), and sees
#   TWTEST_VM_DEV=rxe0        TWTEST_VM_GID_INDEX (its IPv4-mapped RoCE v2 GID)
#   TWTEST_VM_IP (10.0.0.1; .2 in the second VM)   TWTEST_VM_NETDEV (dummy0|eth0)
#   TWTEST_VM_ROLE (single|server|client)  TWTEST_VM_PEER_IP (two-VM group)
#   TWTEST_VM_CASE (the case name)
# (TWTEST_, not TW_: threadwire warns about every TW_* variable it does not
# know, here and in host tests that inherit the settings below.)
# Busybox sh runs its own applets before PATH: spell out /usr/sbin/tc and
# /usr/sbin/ip for iproute2 (netem needs them); `rdma` is iproute2's.
#
# Exit status: 0 all cases passed; 1 some case failed, timed out, did not
# run, or was skipped without --allow-skip; 2 usage; 77 the VM cannot run
# here (no qemu, no static busybox, kernel package not fetchable), or every
# case skipped with --allow-skip.
#
# Cache: ${TWTEST_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadwire-vm}
# holds the kernel .deb, a trimmed kernel tree (vmlinux, modules.dep, the
# modules used) and the base initramfs, rebuilt when this script or the host
# files it copies change. TWTEST_VM_KERNEL_PKG=linux-image-6.1.0-NN-amd64
# picks the kernel package, TWTEST_VM_KERNEL_DEB=/path/to.deb a local file.
# TWTEST_VM_QEMU names the QEMU binary; TWTEST_VM_ACCEL its accelerator (tcg).
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
CACHE=${TWTEST_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/threadwire-vm}
TIMEOUT=${TWTEST_VM_TIMEOUT:-600}
CASE_TIMEOUT=${TWTEST_VM_CASE_TIMEOUT:-0}
MEM=${TWTEST_VM_MEM:-1024}
SMP=${TWTEST_VM_SMP:-2}
VERBOSE=${TWTEST_VM_VERBOSE:-0}
KEEP=${TWTEST_VM_KEEP:-0}
QEMU_BIN=${TWTEST_VM_QEMU:-qemu-system-x86_64}
ALLOW_SKIP=0
SHELL_AT_END=0
FETCH_ONLY=0
ALL_PAIR=0
SYNC_PORT=47999

# Modules loaded by /init, in this order (each after its modules.dep
# dependencies). crc32_generic is a hidden dependency of rdma_rxe: it asks
# the crypto API for "crc32" when a device is created, and without it
# `rdma link add` fails with ENOENT. dummy creates dummy0 itself.
MODS_CORE="crc32_generic ib_core ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe ib_cm iw_cm
configfs rdma_cm rdma_ucm dummy sch_netem"
MODS_NIC="virtio_pci virtio_net"
MULTIARCH=/usr/lib/x86_64-linux-gnu

say() { printf 'tw-vm: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 2
}
skip() {
  say "SKIP: $*"
  exit 77
}
usage() {
  sed -n '5,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'
  exit "${1:-0}"
}

# ---------------------------------------------------------------- options
SINGLE_CASES=()
SINGLE_CASES_RAW=()
PAIR_CASES=()
ADDS=()
ENVS=()
add_case() { # group NAME=CMD
  local name=${2%%=*} cmd=${2#*=}
  [[ $2 == *=* ]] || die "case '$2' is not NAME=CMD"
  [[ $name =~ ^[A-Za-z0-9_.:-]+$ ]] || die "bad case name '$name'"
  [[ $cmd != *$'\n'* && -n $cmd ]] || die "case $name: CMD must be one non-empty line"
  if [ "$1" = pair ]; then PAIR_CASES+=("$name $cmd"); else SINGLE_CASES+=("$name $cmd"); fi
}
read_cases() { # FILE
  local kind name cmd n=0
  [ -r "$1" ] || die "cannot read cases file $1"
  while read -r kind name cmd || [ -n "$kind" ]; do
    n=$((n + 1))
    case $kind in
    '' | '#'*) ;;
    case | pair) add_case "$kind" "$name=$cmd" ;;
    *) die "$1:$n: expected 'case NAME CMD' or 'pair NAME CMD'" ;;
    esac
  done <"$1"
}
need_arg() { [ "$1" -ge 2 ] || die "option $2 needs an argument"; }
while [ $# -gt 0 ]; do
  case $1 in
  --case | --pair-case | --cases | --add | --env | --timeout | --case-timeout | --mem | --smp)
    need_arg $# "$1" ;;
  esac
  case $1 in
  --case) SINGLE_CASES_RAW+=("$2") && shift 2 ;;
  --pair-case) add_case pair "$2" && shift 2 ;;
  --cases) read_cases "$2" && shift 2 ;;
  --pair) ALL_PAIR=1 && shift ;;
  --add) ADDS+=("$2") && shift 2 ;;
  --env)
    [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--env wants K=V, got '$2'"
    ENVS+=("$2") && shift 2
    ;;
  --timeout) TIMEOUT=$2 && shift 2 ;;
  --case-timeout) CASE_TIMEOUT=$2 && shift 2 ;;
  --mem) MEM=$2 && shift 2 ;;
  --smp) SMP=$2 && shift 2 ;;
  --allow-skip) ALLOW_SKIP=1 && shift ;;
  --verbose) VERBOSE=1 && shift ;;
  --keep) KEEP=1 && shift ;;
  --shell) SHELL_AT_END=1 && shift ;;
  --fetch-only) FETCH_ONLY=1 && shift ;;
  -h | --help) usage 0 ;;
  *) die "unknown argument '$1' (--help)" ;;
  esac
done
for c in ${SINGLE_CASES_RAW[@]+"${SINGLE_CASES_RAW[@]}"}; do
  if [ "$ALL_PAIR" = 1 ]; then add_case pair "$c"; else add_case case "$c"; fi
done
for v in TIMEOUT CASE_TIMEOUT MEM SMP; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, got '${!v}'"
done
[ "$TIMEOUT" -gt 0 ] || die "the timeout must be positive"
NSINGLE=${#SINGLE_CASES[@]}
NPAIR=${#PAIR_CASES[@]}
if [ "$FETCH_ONLY" = 0 ] && [ "$SHELL_AT_END" = 0 ] && [ $((NSINGLE + NPAIR)) = 0 ]; then
  die "no cases (--case NAME=CMD, --pair-case, --cases FILE; --help)"
fi
[ "$SHELL_AT_END" = 0 ] || [ "$NPAIR" = 0 ] || die "--shell is for the single-VM group only"
declare -A SEEN_NAMES=()
for c in ${SINGLE_CASES[@]+"${SINGLE_CASES[@]}"} ${PAIR_CASES[@]+"${PAIR_CASES[@]}"}; do
  [ -z "${SEEN_NAMES[${c%% *}]:-}" ] || die "case name ${c%% *} used twice"
  SEEN_NAMES[${c%% *}]=1
done

# ---------------------------------------------------------------- host tools
# Without these the VM cannot run here: skip (77), saying what to install.
command -v "$QEMU_BIN" >/dev/null || skip "$QEMU_BIN not found (apt-get install qemu-system-x86)"
"$QEMU_BIN" -accel help 2>/dev/null | grep -qx tcg || skip "$QEMU_BIN has no TCG accelerator"
for t in xz gzip ldd flock sha1sum; do
  command -v $t >/dev/null || skip "host tool $t not found"
done
BUSYBOX=
for b in /bin/busybox /usr/bin/busybox; do
  if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then # ldd fails on static binaries
    BUSYBOX=$b
    break
  fi
done
[ -n "$BUSYBOX" ] || skip "no statically linked busybox (apt-get install busybox-static)"
host_path() { # NAME: path of an iproute2 tool, or nothing
  local p
  for p in /usr/sbin/$1 /sbin/$1 /usr/bin/$1 /bin/$1; do
    [ -x "$p" ] && readlink -f "$p" && return 0
  done
  return 0
}
RDMA_TOOL=$(host_path rdma)
TC_TOOL=$(host_path tc)
IP_TOOL=$(host_path ip)
if [ -z "$RDMA_TOOL" ] || [ -z "$TC_TOOL" ] || [ -z "$IP_TOOL" ]; then
  skip "iproute2's rdma, tc and ip are needed in the VM (apt-get install iproute2)"
fi
first_file() { # GLOB...: the first existing file among them
  local f
  for f in "$@"; do if [ -f "$f" ]; then echo "$f" && return 0; fi; done
}
RXE_PROVIDER=$(first_file $MULTIARCH/libibverbs/librxe-rdmav*.so)
if [ -z "$RXE_PROVIDER" ] || [ ! -r /etc/libibverbs.d/rxe.driver ]; then
  skip "the rxe verbs provider is needed in the VM (apt-get install ibverbs-providers)"
fi
LIBGCC_S=$(first_file /lib/x86_64-linux-gnu/libgcc_s.so.1 $MULTIARCH/libgcc_s.so.1)
[ -n "$LIBGCC_S" ] || skip "libgcc_s.so.1 not found (pthread_exit needs it at run time)"

T_START=$(date +%s.%N)
mkdir -p "$CACHE" || skip "cannot create the cache directory $CACHE"
exec 9>"$CACHE/.lock"
flock 9 # one run at a time updates the cache

# ---------------------------------------------------------------- kernel
KPKG=${TWTEST_VM_KERNEL_PKG:-}
if [ -z "$KPKG" ] && [ -n "${TWTEST_VM_KERNEL_DEB:-}" ]; then
  KPKG=$(dpkg-deb -f "$TWTEST_VM_KERNEL_DEB" Package) || die "cannot read $TWTEST_VM_KERNEL_DEB"
fi
if [ -z "$KPKG" ] && [ -s "$CACHE/kernel.pkg" ]; then KPKG=$(cat "$CACHE/kernel.pkg"); fi
if [ -z "$KPKG" ]; then
  command -v apt-cache >/dev/null || skip "apt-cache not found: set TWTEST_VM_KERNEL_DEB"
  # The ABI linux-image-amd64 points at, else the newest 6.1 ABI apt knows.
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-6\.1\.0-[0-9]+-amd64$/ {print $2; exit}' || true)
  [ -n "$KPKG" ] || KPKG=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null |
    awk '{print $1}' | sort -V | tail -n 1 || true)
  [ -n "$KPKG" ] || skip "apt knows no linux-image-6.1.0-*-amd64 package (apt-get update?)"
fi
[[ $KPKG =~ ^linux-image-[0-9][A-Za-z0-9.+-]*-amd64$ ]] || die "odd kernel package name '$KPKG'"

# resolve_mods MODDEP NAMES...: the modules in load order (dependencies
# first), as paths relative to the modules directory; built-in ones dropped.
mod_name() { basename "$1" | sed -E 's/\.ko(\.xz|\.zst|\.gz)?$//'; }
declare -A MOD_SEEN=()
MOD_LIST=()
mod_path() { grep -E "(^|/)$2\.ko(\.xz|\.zst|\.gz)?:" "$1" | head -n 1 | cut -d: -f1 || true; }
mod_add() { # MODDEP BUILTIN NAME
  local p d
  p=$(mod_path "$1" "$3")
  if [ -z "$p" ]; then
    grep -qE "(^|/)$3\.ko$" "$2" 2>/dev/null && return 0
    die "kernel module $3 not found in $KPKG"
  fi
  [ -z "${MOD_SEEN[$p]:-}" ] || return 0
  for d in $(grep -E "^$p:" "$1" | cut -d: -f2 | tr ' ' '\n'); do
    mod_add "$1" "$2" "$(mod_name "$d")"
  done
  MOD_SEEN[$p]=1
  MOD_LIST+=("$p")
}
resolve_mods() { # MODDIR NAMES...
  local dir=$1 m
  shift
  MOD_LIST=()
  MOD_SEEN=()
  for m in "$@"; do mod_add "$dir/modules.dep" "$dir/modules.builtin" "$m"; done
}

# The kernel tree is trimmed to what the VM loads; its directory name
# carries the module list, so a new module in the lists re-extracts it
# from the kept .deb.
MODS_KEY=$(echo "$MODS_CORE $MODS_NIC" | sha1sum | cut -c1-8)
KDIR=$CACHE/kernel/$KPKG-$MODS_KEY
fetch_kernel() {
  local deb tmp kv
  deb=${TWTEST_VM_KERNEL_DEB:-}
  if [ -z "$deb" ]; then
    deb=$(first_file "$CACHE/debs/${KPKG}"_*.deb)
  fi
  if [ -z "$deb" ]; then
    command -v apt-get >/dev/null || skip "apt-get not found: set TWTEST_VM_KERNEL_DEB"
    say "downloading $KPKG (about 70 MB, once)"
    tmp=$(mktemp -d "$CACHE/dl.XXXXXX")
    local sandbox=()
    [ "$(id -u)" != 0 ] || sandbox=(-o APT::Sandbox::User=root) # _apt cannot write $tmp
    if ! (cd "$tmp" && apt-get -q -o Acquire::http::Timeout=60 "${sandbox[@]}" download "$KPKG" >&2); then
      rm -rf "$tmp"
      skip "cannot download $KPKG from the Debian archive (no network? apt-get update?)"
    fi
    mkdir -p "$CACHE/debs"
    rm -f "$CACHE/debs"/*.deb # keep one kernel package
    mv "$tmp"/*.deb "$CACHE/debs/"
    rmdir "$tmp"
    deb=$(first_file "$CACHE/debs/${KPKG}"_*.deb)
  fi
  say "unpacking $(basename "$deb")"
  tmp=$(mktemp -d "$CACHE/kernel.XXXXXX")
  dpkg-deb -x "$deb" "$tmp/full" # unpacked, never installed
  kv=$(find "$tmp/full/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n 1)
  [ -f "$tmp/full/boot/vmlinuz-$kv" ] || die "$deb holds no kernel"
  "$BUSYBOX" depmod -b "$tmp/full" "$kv" # the package ships no modules.dep
  local mdir=$tmp/full/lib/modules/$kv
  mkdir -p "$tmp/tree/modules"
  cp "$mdir/modules.dep" "$tmp/tree/modules/"
  cp "$mdir/modules.builtin" "$tmp/tree/modules/" 2>/dev/null || : >"$tmp/tree/modules/modules.builtin"
  # shellcheck disable=SC2086 # word lists
  resolve_mods "$mdir" $MODS_CORE $MODS_NIC
  local p
  for p in "${MOD_LIST[@]}"; do
    mkdir -p "$tmp/tree/modules/$(dirname "$p")"
    cp "$mdir/$p" "$tmp/tree/modules/$p"
  done
  # An uncompressed vmlinux, booted through its PVH entry, saves the
  # in-guest decompression (seconds under TCG).
  local vmlinuz=$tmp/full/boot/vmlinuz-$kv off
  off=$(LC_ALL=C grep -abo $'\xfd7zXZ\x00' "$vmlinuz" | head -n 1 | cut -d: -f1 || true)
  [ -n "$off" ] || die "no XZ payload in $vmlinuz"
  # xz stops with an error at the data after the stream: expected.
  tail -c +$((off + 1)) "$vmlinuz" | xz -dc >"$tmp/tree/vmlinux" 2>/dev/null || true
  [ "$(head -c 4 "$tmp/tree/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] ||
    die "could not extract vmlinux from $vmlinuz"
  echo "$kv" >"$tmp/tree/version"
  rm -rf "$tmp/full" "$KDIR"
  mkdir -p "$CACHE/kernel"
  rm -rf "$CACHE/kernel/$KPKG"-* # other module sets of this kernel
  mv "$tmp/tree" "$KDIR"
  rmdir "$tmp"
}
if [ ! -s "$KDIR/vmlinux" ] || [ ! -s "$KDIR/version" ]; then fetch_kernel; fi
[ -n "${TWTEST_VM_KERNEL_PKG:-}${TWTEST_VM_KERNEL_DEB:-}" ] || echo "$KPKG" >"$CACHE/kernel.pkg"
KV=$(cat "$KDIR/version")
VMLINUX=$KDIR/vmlinux
# shellcheck disable=SC2086
resolve_mods "$KDIR/modules" $MODS_CORE
ORDER_CORE=$(for p in "${MOD_LIST[@]}"; do mod_name "$p"; done | tr '\n' ' ')
CORE_LIST=("${MOD_LIST[@]}")
# shellcheck disable=SC2086
resolve_mods "$KDIR/modules" $MODS_NIC
ORDER_NIC=$(for p in "${MOD_LIST[@]}"; do mod_name "$p"; done | tr '\n' ' ')
ALL_MODS=("${CORE_LIST[@]}" "${MOD_LIST[@]}")

# ---------------------------------------------------------------- files
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
# elf_libs FILE: the absolute paths ldd resolves for FILE (nothing if static)
elf_libs() {
  ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' || true
  if ldd "$1" 2>/dev/null | grep -q 'not found'; then
    say "warning: unresolved libraries for $1:"
    ldd "$1" | grep 'not found' >&2 || true
  fi
}
# put ROOT SRC [DST]: copy SRC (dereferenced, mode kept) to ROOT/DST
put() {
  local dst=$1${3:-$2}
  mkdir -p "$(dirname "$dst")"
  cp -L --preserve=mode "$2" "$dst"
}
# put_libs ROOT FILE: FILE's libraries at the paths ldd prints (so RUNPATH
# keeps working in the VM), unless the base image (BASE_LIST) has them.
put_libs() {
  local lib
  while read -r lib; do
    [ -e "$lib" ] || continue
    [ ! -e "$1$lib" ] || continue
    [ -z "${BASE_HAS[$lib]:-}" ] || continue
    put "$1" "$lib"
  done < <(elf_libs "$2")
}
declare -A BASE_HAS=()
# mkcpio DIR: a gzipped newc archive of DIR, owned by root
mkcpio() { (cd "$1" && find . | LC_ALL=C sort | "$BUSYBOX" cpio -o -H newc -R 0:0 2>/dev/null | gzip -1); }
# newc NAME MODE NLINK RDEVMAJOR RDEVMINOR INO: one empty cpio (newc) entry:
# magic, then ino mode uid gid nlink mtime filesize devmajor devminor
# rdevmajor rdevminor namesize check as 8 hex digits each, the name, and
# NUL padding to a multiple of 4 bytes.
newc() {
  printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\0' \
    "$6" "$2" 0 0 "$3" 0 0 0 0 "$4" "$5" $((${#1} + 1)) 0 "$1"
  head -c $(((4 - (110 + ${#1} + 1) % 4) % 4)) /dev/zero
}
# console_cpio: an archive holding only /dev/console, written by hand so
# that building it needs no root (the kernel opens it for /init).
console_cpio() {
  newc dev $((8#040755)) 2 0 0 1
  newc dev/console $((8#020600)) 1 5 1 2
  newc 'TRAILER!!!' 0 1 0 0 0
}

# ---------------------------------------------------------------- /init
# Written into the base image; the per-run archive adds /etc/tw-vm/.
read -r -d '' INIT_SCRIPT <<'INIT_EOF' || true
#!/bin/sh
# /init of the threadwire test VM (made by tests/vm/tw-vm.sh)
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm /tmp/tw-vm
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
chmod 1777 /tmp
ulimit -l unlimited
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "[tw-vm $(up)] $*"; }
off() {
  sync
  if [ -f /etc/tw-vm/shell ]; then
    echo "tw-vm: shell (exit powers off; Ctrl-A x quits QEMU)"
    setsid cttyhack sh
  fi
  poweroff -f
  sleep 30
}
fatal() {
  echo "TWVM-ERROR $*"
  dmesg | tail -n 20
  off
}
. /etc/tw-vm/conf
for m in $(cat /lib/modules/order.core) $([ "$TWTEST_VM_NIC" = virtio ] && cat /lib/modules/order.nic); do
  [ -d /sys/module/$m ] || insmod /lib/modules/$m.ko || fatal "insmod $m failed"
done
ip link set lo up
if [ "$TWTEST_VM_NIC" = virtio ]; then
  TWTEST_VM_NETDEV=eth0
else
  TWTEST_VM_NETDEV=dummy0
  ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
fi
ip link set $TWTEST_VM_NETDEV up || fatal "cannot bring $TWTEST_VM_NETDEV up"
ip addr add $TWTEST_VM_IP/24 dev $TWTEST_VM_NETDEV || fatal "cannot set $TWTEST_VM_IP on $TWTEST_VM_NETDEV"
rdma link add rxe0 type rxe netdev $TWTEST_VM_NETDEV || fatal "rdma link add rxe0 failed"
# The IPv4-mapped RoCE v2 GID appears shortly after the link; look at
# slots 0..15 only (reading all 1024 is slow under TCG).
want=$(echo $TWTEST_VM_IP | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}')
g=/sys/class/infiniband/rxe0/ports/1
TWTEST_VM_GID_INDEX=
i=0
while [ -z "$TWTEST_VM_GID_INDEX" ] && [ $i -lt 300 ]; do
  for j in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    if [ "$(cat $g/gids/$j 2>/dev/null)" = "$want" ] &&
      [ "$(cat $g/gid_attrs/types/$j 2>/dev/null)" = "RoCE v2" ]; then
      TWTEST_VM_GID_INDEX=$j
      break
    fi
  done
  [ -n "$TWTEST_VM_GID_INDEX" ] || sleep 0.1
  i=$((i + 1))
done
[ -n "$TWTEST_VM_GID_INDEX" ] || fatal "rxe0 has no RoCE v2 GID for $TWTEST_VM_IP"
export TWTEST_VM_DEV=rxe0 TWTEST_VM_GID_INDEX TWTEST_VM_IP TWTEST_VM_NETDEV TWTEST_VM_ROLE TWTEST_VM_PEER_IP
[ -f /etc/tw-vm/env ] && . /etc/tw-vm/env
echo # the firmware leaves its line open
echo "TWVM-READY $(up) kernel=$(uname -r) cpus=$(nproc) dev=$TWTEST_VM_DEV gid=$TWTEST_VM_GID_INDEX ip=$TWTEST_VM_IP netdev=$TWTEST_VM_NETDEV role=$TWTEST_VM_ROLE"

# Two VMs start each case together: the server listens, the client
# connects until it reads the server's token for this step.
sync_peer() {
  case $TWTEST_VM_ROLE in
  server) echo "twvm-sync $1" | nc -l -p $TWTEST_VM_SYNC_PORT >/dev/null 2>&1 ;;
  client)
    while [ "$(nc $TWTEST_VM_PEER_IP $TWTEST_VM_SYNC_PORT </dev/null 2>/dev/null)" != "twvm-sync $1" ]; do
      sleep 0.2
    done
    ;;
  esac
}
n=0
pass=0
fail=0
skipped=0
while read -r name cmd <&3; do
  n=$((n + 1))
  sync_peer $n
  mkdir -p /tmp/tw-vm/$name
  echo "TWVM-BEGIN $name"
  t0=$(up)
  # own session and process group, so the whole case can be killed
  export TWTEST_VM_CASE=$name
  (cd /tmp/tw-vm/$name && exec setsid sh -c "$cmd") </dev/null &
  pid=$!
  wd=
  if [ "$TWTEST_VM_CASE_TIMEOUT" -gt 0 ]; then
    (sleep $TWTEST_VM_CASE_TIMEOUT && touch /tmp/tw-vm/.timeout.$n && kill -KILL -$pid) >/dev/null 2>&1 &
    wd=$!
  fi
  wait $pid
  rc=$?
  [ -z "$wd" ] || kill $wd 2>/dev/null
  kill -KILL -$pid 2>/dev/null # whatever the case left running
  if [ -f /tmp/tw-vm/.timeout.$n ]; then
    echo "tw-vm: case $name killed after ${TWTEST_VM_CASE_TIMEOUT}s"
    rc=124
  fi
  t1=$(up)
  case $rc in 0) pass=$((pass + 1)) ;; 77) skipped=$((skipped + 1)) ;; *) fail=$((fail + 1)) ;; esac
  echo "TWVM-CASE $name $rc $(awk -v a=$t0 -v b=$t1 'BEGIN {printf "%.1f", b - a}')"
done 3</etc/tw-vm/cases
sync_peer end
echo "TWVM-DONE $n $pass $fail $skipped $(up)"
off
INIT_EOF

# ---------------------------------------------------------------- base image
# Host files the base holds; a change to any of them (or to this script)
# gives a new key and a rebuilt base.
BASE_BINS=("$RDMA_TOOL:/usr/bin/rdma" "$TC_TOOL:/usr/sbin/tc" "$IP_TOOL:/usr/sbin/ip")
for t in ibv_devices ibv_devinfo; do # handy at --shell, if installed
  p=$(command -v $t || true)
  [ -z "$p" ] || BASE_BINS+=("$p:/usr/bin/$t")
done
BASE_LIBS=("$RXE_PROVIDER" "$LIBGCC_S" "$MULTIARCH/libibverbs.so.1")
BASE_KEY=$({
  cat "$SELF"
  echo "$KPKG $KV ${ALL_MODS[*]} $BUSYBOX"
  for b in "${BASE_BINS[@]}"; do stat -L -c '%n %s %Y' "${b%%:*}"; done
  for f in "${BASE_LIBS[@]}" "$BUSYBOX" /etc/libibverbs.d/rxe.driver; do stat -L -c '%n %s %Y' "$f"; done
  for f in "${BASE_BINS[@]%%:*}" "${BASE_LIBS[@]}"; do
    for l in $(elf_libs "$f" 2>/dev/null); do stat -L -c '%n %s %Y' "$l"; done
  done
} | sha1sum | cut -c1-16)
BASE_CPIO=$CACHE/base-$BASE_KEY.cpio.gz
BASE_LIST=$CACHE/base-$BASE_KEY.list
build_base() {
  local r b p
  say "building the base initramfs ($KPKG)"
  r=$(mktemp -d "$CACHE/base.XXXXXX")
  mkdir -p "$r"/{bin,dev,proc,sys,tmp,run,root,etc/tw-vm,usr/bin,usr/sbin,lib/modules}
  put "$r" "$BUSYBOX" /bin/busybox
  ln -s busybox "$r/bin/sh"
  for b in "${BASE_BINS[@]}"; do
    put "$r" "${b%%:*}" "${b#*:}"
    put_libs "$r" "${b%%:*}"
  done
  for p in "${BASE_LIBS[@]}"; do
    put "$r" "$p"
    put_libs "$r" "$p"
  done
  # libibverbs finds the provider through its .driver file, and dlopen()s
  # it (ldd cannot see it); glibc dlopen()s libgcc_s.so.1 for
  # pthread_exit()/pthread_cancel() unwinding.
  put "$r" /etc/libibverbs.d/rxe.driver
  for p in "$MULTIARCH"/tc/*.dist; do # netem delay distributions
    [ ! -e "$p" ] || put "$r" "$p"
  done
  for p in "${ALL_MODS[@]}"; do
    case $p in # busybox insmod wants uncompressed modules
    *.xz) xz -dc "$KDIR/modules/$p" >"$r/lib/modules/$(mod_name "$p").ko" ;;
    *.zst) zstd -qdc "$KDIR/modules/$p" >"$r/lib/modules/$(mod_name "$p").ko" ;;
    *.gz) gzip -dc "$KDIR/modules/$p" >"$r/lib/modules/$(mod_name "$p").ko" ;;
    *) cp "$KDIR/modules/$p" "$r/lib/modules/$(mod_name "$p").ko" ;;
    esac
  done
  echo "$ORDER_CORE" >"$r/lib/modules/order.core"
  echo "$ORDER_NIC" >"$r/lib/modules/order.nic"
  printf '127.0.0.1 localhost\n10.0.0.1 twvm1\n10.0.0.2 twvm2\n' >"$r/etc/hosts"
  printf 'hosts: files\npasswd: files\ngroup: files\n' >"$r/etc/nsswitch.conf"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
  printf 'root:x:0:\n' >"$r/etc/group"
  printf '%s\n' "$INIT_SCRIPT" >"$r/init"
  chmod 755 "$r/init"
  chmod 1777 "$r/tmp"
  (cd "$r" && find . -type f -o -type l | sed 's/^\.//') >"$BASE_LIST.tmp"
  { console_cpio | gzip -1 && mkcpio "$r"; } >"$BASE_CPIO.tmp"
  rm -f "$CACHE"/base-*.cpio.gz "$CACHE"/base-*.list
  mv "$BASE_LIST.tmp" "$BASE_LIST"
  mv "$BASE_CPIO.tmp" "$BASE_CPIO"
  rm -rf "$r"
}
if [ ! -s "$BASE_CPIO" ] || [ ! -s "$BASE_LIST" ]; then build_base; fi
if [ "$FETCH_ONLY" = 1 ]; then
  say "cache ready in $CACHE (kernel $KV)"
  exit 0
fi
while read -r p; do BASE_HAS[$p]=1; done <"$BASE_LIST"

# ---------------------------------------------------------------- payload
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tw-vm.XXXXXX")
QPIDS=()
TAILPIDS=()
RUN_FAILED=1
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local p
  for p in ${QPIDS[@]+"${QPIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
  if [ "$KEEP" = 1 ]; then
    say "kept $WORK"
  elif [ "$RUN_FAILED" = 1 ] && [ -d "$WORK" ]; then
    rm -rf "$WORK/payload" "$WORK"/*.gz
    say "console logs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

P=$WORK/payload
mkdir -p "$P/etc/tw-vm"
# Absolute paths of host files named in case commands come along (with
# their libraries) unless the base image has them: a case is one line.
for c in ${SINGLE_CASES[@]+"${SINGLE_CASES[@]}"} ${PAIR_CASES[@]+"${PAIR_CASES[@]}"}; do
  read -ra words <<<"$(tr "=;&|<>()'\"\`" ' ' <<<"${c#* }")"
  for w in ${words[@]+"${words[@]}"}; do
    [[ $w == /* && $w != /proc/* && $w != /sys/* && $w != /dev/* ]] || continue
    if [ -f "$w" ] && [ -z "${BASE_HAS[$w]:-}" ]; then ADDS+=("$w"); fi
  done
done
for a in ${ADDS[@]+"${ADDS[@]}"}; do
  [ -e "$a" ] || die "--add $a: no such file or directory"
  a=$(readlink -f "$a")
  if [ -d "$a" ]; then
    mkdir -p "$P$a"
    tar -C "$a" -cf - --exclude=CMakeFiles --exclude='*.o' --exclude='*.a' . | tar -C "$P$a" -xf -
    while IFS= read -r -d '' f; do
      if is_elf "$f"; then put_libs "$P" "$f"; fi
    done < <(find "$a" -name CMakeFiles -prune -o -type f -perm -u+x -print0 -o -type f -name '*.so*' -print0)
  else
    put "$P" "$a"
    if is_elf "$a"; then put_libs "$P" "$a"; fi
  fi
done
quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # for busybox sh
if [ ${#ENVS[@]} -gt 0 ]; then
  for e in "${ENVS[@]}"; do printf 'export %s=%s\n' "${e%%=*}" "$(quote "${e#*=}")"; done >"$P/etc/tw-vm/env"
fi
[ "$SHELL_AT_END" = 0 ] || : >"$P/etc/tw-vm/shell"
mkcpio "$P" >"$WORK/payload.cpio.gz"
flock -u 9
T_BUILT=$(date +%s.%N)
say "kernel $KV, base $(du -h "$BASE_CPIO" | cut -f1), payload $(du -h "$WORK/payload.cpio.gz" | cut -f1)," \
  "prepared in $(awk -v a="$T_START" -v b="$T_BUILT" 'BEGIN {printf "%.1f", b - a}') s"

# vm_initrd NAME ROLE IP PEER NIC CASES...: $WORK/NAME.gz, the initramfs of
# one VM: base + payload + this VM's configuration and case list
vm_initrd() {
  local name=$1 role=$2 ip=$3 peer=$4 nic=$5 c
  shift 5
  local d=$WORK/conf-$name
  mkdir -p "$d/etc/tw-vm"
  printf 'TWTEST_VM_ROLE=%s\nTWTEST_VM_IP=%s\nTWTEST_VM_PEER_IP=%s\nTWTEST_VM_NIC=%s\nTWTEST_VM_CASE_TIMEOUT=%s\nTWTEST_VM_SYNC_PORT=%s\n' \
    "$role" "$ip" "$peer" "$nic" "$CASE_TIMEOUT" "$SYNC_PORT" >"$d/etc/tw-vm/conf"
  for c in "$@"; do printf '%s\n' "$c"; done >"$d/etc/tw-vm/cases"
  # the kernel unpacks concatenated archives in order
  cat "$BASE_CPIO" "$WORK/payload.cpio.gz" <(mkcpio "$d") >"$WORK/$name.gz"
}

# ---------------------------------------------------------------- boot
APPEND="console=ttyS0 panic=-1 oops=panic mitigations=off nokaslr"
[ "$VERBOSE" = 1 ] || APPEND="$APPEND quiet loglevel=3"
# start_vm NAME [QEMU ARGS...]: boot $WORK/NAME.gz in the background, the
# console to $WORK/NAME.log; QPIDS gets the pid of its `timeout`.
start_vm() {
  local name=$1
  shift
  local qemu=("$QEMU_BIN" -M pc -accel "${TWTEST_VM_ACCEL:-tcg}" -cpu max -m "$MEM" -smp "$SMP"
    -nographic -no-reboot -kernel "$VMLINUX" -initrd "$WORK/$name.gz" -append "$APPEND" "$@")
  timeout -k 5 "$TIMEOUT" "${qemu[@]}" </dev/null >"$WORK/$name.log" 2>&1 &
  QPIDS+=($!)
  if [ "$VERBOSE" = 1 ]; then
    tail -n +1 -f --pid=$! "$WORK/$name.log" | sed -u "s/^/[$name] /" >&2 &
    TAILPIDS+=($!)
  fi
}
# wait_vm PID NAME: wait for one VM and say how it ended
wait_vm() {
  local rc=0 t
  wait "$1" || rc=$?
  QRC[$2]=$rc
  for t in ${TAILPIDS[@]+"${TAILPIDS[@]}"}; do wait "$t" 2>/dev/null || true; done
  tr -d '\r' <"$WORK/$2.log" >"$WORK/$2.txt"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "[$2] TIMEOUT: QEMU killed after ${TIMEOUT}s (TWTEST_VM_TIMEOUT, --timeout)"
  elif [ "$rc" != 0 ]; then
    say "[$2] QEMU exited with status $rc"
  fi
  grep -a 'TWVM-ERROR' "$WORK/$2.txt" | sed "s/^/tw-vm: [$2] /" >&2 || true
  local t_ready t_done
  t_ready=$(grep -a -o -m1 'TWVM-READY [0-9.]*' "$WORK/$2.txt" | cut -d' ' -f2 || true)
  t_done=$(grep -a -o -m1 'TWVM-DONE [0-9 .]*' "$WORK/$2.txt" | cut -d' ' -f6 || true)
  say "[$2] ready after ${t_ready:-?} s of guest time, done after ${t_done:-?} s"
}
# results NAME: "case rc seconds" lines of one VM
results() { grep -a -oE 'TWVM-CASE [^ ]+ -?[0-9]+ [0-9.]+' "$WORK/$1.txt" | cut -d' ' -f2- || true; }
# case_output NAME CASE: what CASE printed in VM NAME
case_output() {
  awk -v c="$2" '$0 == "TWVM-BEGIN " c {f = 1; next}
    f && (i = index($0, "TWVM-CASE " c " ")) {$0 = substr($0, 1, i - 1); f = 0; if ($0 == "") next; print; next}
    f' "$WORK/$1.txt"
}

# unusable_qemu NAME...: skip (77) if QEMU failed before the firmware ran
# (no memory for the guest, a sandbox refusing it, ...): the host cannot run
# the VM, which says nothing about our code
unusable_qemu() {
  local n
  for n in "$@"; do
    if [ "${QRC[$n]}" = 1 ] && ! grep -aq -e SeaBIOS -e TWVM-READY "$WORK/$n.txt"; then
      say "QEMU cannot run here:"
      sed 's/^/  | /' "$WORK/$n.txt" >&2
      RUN_FAILED=0
      skip "QEMU failed to start the VM"
    fi
  done
}
declare -A QRC=()
NPASS=0 NFAIL=0 NSKIP=0
declare -A RC=() SECS=()
report() { # GROUP CASE VERDICT DETAIL
  printf '%-4s %s%s\n' "$3" "$2" "${4:+ ($4)}"
  case $3 in PASS) NPASS=$((NPASS + 1)) ;; SKIP) NSKIP=$((NSKIP + 1)) ;; *) NFAIL=$((NFAIL + 1)) ;; esac
}
load_results() { # NAME: RC[NAME/case] SECS[NAME/case]; "started" if no result
  local c r s
  while read -r c; do RC[$1/$c]=started; done < <(grep -a -oE 'TWVM-BEGIN [^ ]+' "$WORK/$1.txt" | cut -d' ' -f2 || true)
  while read -r c r s; do
    RC[$1/$c]=$r
    SECS[$1/$c]=$s
  done < <(results "$1")
}
# verdict RC: PASS, SKIP or FAIL; detail: what RC says
verdict() {
  case $1 in
  0) echo PASS ;;
  77) echo SKIP ;;
  *) echo FAIL ;;
  esac
}
detail() { # NAME CASE
  local r=${RC[$1/$2]:-}
  case $r in
  '') echo "not run" ;;
  started) echo "no result: the VM stopped or was killed" ;;
  *) echo "exit $r, ${SECS[$1/$2]} s" ;;
  esac
}
last_line() { # NAME CASE: the last line a passed case printed
  local l
  l=$(case_output "$1" "$2" | tail -n 1)
  [ -z "$l" ] || printf '       %s\n' "$l"
}
show_output() { # NAME CASE
  local out
  out=$(case_output "$1" "$2" | tail -n 200)
  [ -n "$out" ] || return 0
  say "---- output of $2 in VM $1 (last 200 lines):"
  printf '%s\n' "$out" | sed 's/^/  | /'
}

if [ "$NSINGLE" -gt 0 ] || [ "$SHELL_AT_END" = 1 ]; then
  vm_initrd vm single 10.0.0.1 "" dummy ${SINGLE_CASES[@]+"${SINGLE_CASES[@]}"}
  t0=$(date +%s.%N)
  if [ "$SHELL_AT_END" = 1 ]; then
    "$QEMU_BIN" -M pc -accel "${TWTEST_VM_ACCEL:-tcg}" -cpu max -m "$MEM" -smp "$SMP" -nographic \
      -no-reboot -kernel "$VMLINUX" -initrd "$WORK/vm.gz" -append "$APPEND" -nic none
    RUN_FAILED=0
    exit 0
  fi
  say "booting one VM for $NSINGLE case(s)"
  start_vm vm -nic none
  wait_vm "${QPIDS[0]}" vm
  QPIDS=()
  unusable_qemu vm
  say "single-VM group: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s wall"
  load_results vm
  for c in "${SINGLE_CASES[@]}"; do
    n=${c%% *}
    v=$(verdict "${RC[vm/$n]:-}")
    report single "$n" "$v" "$(detail vm "$n")"
    if [ "$v" = PASS ]; then last_line vm "$n"; else show_output vm "$n"; fi
  done
fi

if [ "$NPAIR" -gt 0 ]; then
  # Two QEMUs joined by a UDP socket netdev on host loopback (one Ethernet
  # segment; TCP's socket netdev adds tens of ms per exchange), distinct MACs.
  used=$( (ss -Hlun 2>/dev/null || true) | awk '{print $4}' | sed 's/.*://')
  for _ in 1 2 3 4 5 6 7 8; do
    pa=$((20000 + RANDOM % 30000))
    pb=$((pa + 1))
    grep -qxE "$pa|$pb" <<<"$used" || break
  done
  vm_initrd vmA server 10.0.0.1 10.0.0.2 virtio "${PAIR_CASES[@]}"
  vm_initrd vmB client 10.0.0.2 10.0.0.1 virtio "${PAIR_CASES[@]}"
  say "booting two VMs for $NPAIR case(s) (UDP 127.0.0.1:$pa <-> :$pb)"
  t0=$(date +%s.%N)
  start_vm vmA -netdev "socket,id=n0,localaddr=127.0.0.1:$pa,udp=127.0.0.1:$pb" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:54:57:01
  start_vm vmB -netdev "socket,id=n0,localaddr=127.0.0.1:$pb,udp=127.0.0.1:$pa" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:54:57:02
  # A VM that stops before its last case leaves the other one waiting at a
  # barrier: stop that one too.
  while kill -0 "${QPIDS[0]}" 2>/dev/null && kill -0 "${QPIDS[1]}" 2>/dev/null; do sleep 1; done
  for i in 0 1; do
    if ! kill -0 "${QPIDS[$i]}" 2>/dev/null &&
      ! grep -aq 'TWVM-DONE' "$WORK/vm$([ $i = 0 ] && echo A || echo B).log"; then
      say "[vm$([ $i = 0 ] && echo A || echo B)] stopped early: stopping the other VM"
      kill "${QPIDS[$((1 - i))]}" 2>/dev/null || true
    fi
  done
  wait_vm "${QPIDS[0]}" vmA
  wait_vm "${QPIDS[1]}" vmB
  QPIDS=()
  unusable_qemu vmA vmB
  say "two-VM group: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s wall"
  load_results vmA
  load_results vmB
  for c in "${PAIR_CASES[@]}"; do
    n=${c%% *}
    va=$(verdict "${RC[vmA/$n]:-}") vb=$(verdict "${RC[vmB/$n]:-}")
    d="server: $(detail vmA "$n"); client: $(detail vmB "$n")"
    if [ "$va" = PASS ] && [ "$vb" = PASS ]; then
      report pair "$n" PASS "$d"
      last_line vmA "$n"
      last_line vmB "$n"
      continue
    fi
    if [ "$va" != FAIL ] && [ "$vb" != FAIL ]; then
      report pair "$n" SKIP "$d"
    else
      report pair "$n" FAIL "$d"
    fi
    show_output vmA "$n"
    show_output vmB "$n"
  done
fi

T_END=$(date +%s.%N)
say "$NPASS passed, $NFAIL failed, $NSKIP skipped;" \
  "$(awk -v a="$T_START" -v b="$T_END" 'BEGIN {printf "%.1f", b - a}') s in all"
if [ "$NFAIL" -gt 0 ]; then exit 1; fi
if [ "$NSKIP" -gt 0 ]; then
  if [ "$ALLOW_SKIP" = 0 ]; then
    say "FAIL: $NSKIP case(s) skipped inside the VM (--allow-skip accepts that)"
    exit 1
  fi
  if [ "$NPASS" = 0 ]; then
    RUN_FAILED=0
    skip "every case skipped inside the VM"
  fi
fi
RUN_FAILED=0
exit 0
