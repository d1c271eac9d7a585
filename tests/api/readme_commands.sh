#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Every command in README.md's ```sh blocks, tried as a new user would, so
# that the README cannot drift from the tools:
#   - a command of this build's programs (build/release/tools/...: twrun,
#     tw_perf, tw_coll_perf, tw_info, with the VAR=value words before it)
#     runs, from BUILD_DIR, with short iteration counts appended (tw_perf
#     -n, tw_coll_perf -i/-x: the last one given wins), and must exit 0;
#   - a script of the repository (tools/*.sh, tests/...) must exist, be
#     executable and parse (bash -n): running it is the job of its own
#     test, or takes minutes (the peer benchmarks) or hardware (verbs);
#   - a launcher line (mpirun, srun) with the placeholder 'prog' is an
#     example for the user's own program: the tests/cluster suite runs
#     both launchers; every other command fails this test until it is
#     given a rule here.
#   readme_commands.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
ran=0 checked=0 skipped=0

fail() {
  echo "readme_commands: $*"
  exit 1
}

# The program lines run from the build directory's tools.
run_program() { # LINE
  local line=$1 words=() w env=() out rc=0
  read -r -a words <<<"${line//build\/release\//$build/}"
  while [[ ${words[0]} == *=* ]]; do
    env+=("${words[0]}")
    words=("${words[@]:1}")
  done
  case " ${words[*]} " in
    */tw_perf\ *) words+=(-n 20) ;;
    */tw_coll_perf\ *) words+=(-i 5 -x 2) ;;
  esac
  out=$(env "${env[@]}" "${words[@]}" 2>&1) || rc=$?
  [ "$rc" -eq 0 ] || { echo "$out"; fail "README command exited $rc: $line"; }
  echo "ran: $line"
  ran=$((ran + 1))
}

while IFS= read -r line; do
  line=${line%%#*}                             # the comment
  line=$(sed -e 's/[[:space:]]*$//' <<<"$line") # trailing blanks
  [ -n "$line" ] || continue
  first=$(awk '{ for (i = 1; i <= NF; i++) if ($i !~ /=/) { print $i; exit } }' <<<"$line")
  case $first in
    build/release/tools/*)
      [ -x "$build/${first#build/release/}" ] || fail "not built: $first ($line)"
      run_program "$line"
      ;;
    tools/*.sh | tests/*.sh)
      [ -x "$src/$first" ] || fail "not an executable script of the repository: $first"
      bash -n "$src/$first" || fail "does not parse: $first"
      echo "checked: $first"
      checked=$((checked + 1))
      ;;
    mpirun | srun)
      [[ " $line " == *" prog "* ]] || fail "a launcher line without the placeholder 'prog': $line"
      echo "example: $line"
      skipped=$((skipped + 1))
      ;;
    *) fail "no rule for this README command: $line" ;;
  esac
done < <(awk '/^```sh/ { f = 1; next } /^```/ { f = 0 } f' "$src/README.md")

[ "$ran" -gt 0 ] || fail "no program command found in README.md"
echo "readme_commands: $ran run, $checked scripts checked, $skipped launcher examples"
