#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Dependencies point one way: core <- progress, shmem (segments) <-
# transports <- reliability, routing (layers over and beside the
# transports; neither sees the other) <- msg <- runtime. A module may include its own
# headers and those of lower layers only. Inside transports, a transport
# includes base/ and its own directory, never another transport's; above
# transports, only base/ (the ops table) is visible: the runtime composes
# the stack from ops tables, it does not reach into a transport.
# ConcurrencyKit only from src/progress.
set -euo pipefail
cd "$(dirname "$0")/../src"
rank() {
  case $1 in
    core) echo 0 ;; progress | shmem) echo 1 ;; transports) echo 2 ;;
    reliability | routing) echo 3 ;; msg) echo 4 ;; coll) echo 5 ;; runtime) echo 6 ;; *) echo -1 ;;
  esac
}
bad=0
for f in $(find . -name '*.[ch]' | sort); do
  mod=$(echo "$f" | cut -d/ -f2)
  sub=$(echo "$f" | cut -d/ -f3)
  mine=$(rank "$mod")
  while IFS= read -r inc; do
    dep=${inc%%/*}
    r=$(rank "$dep")
    [ "$r" -lt 0 ] && continue
    if [ "$dep" != "$mod" ] && [ "$r" -ge "$mine" ]; then
      echo "layering: $f includes $inc ($mod may not depend on $dep)"
      bad=1
    fi
    if [ "$dep" = transports ]; then
      tl=$(echo "$inc" | cut -d/ -f2)
      if [ "$tl" != base ] && { [ "$mod" != transports ] || [ "$tl" != "$sub" ]; }; then
        echo "layering: $f includes $inc (only transports/$tl itself may: others see base/)"
        bad=1
      fi
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
  if [ "$mod" != progress ] && grep -q '^#include <ck_' "$f"; then
    echo "layering: $f includes ConcurrencyKit (only src/progress may)"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "layers: every #include points down"
exit $bad
