#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# Every C/C++ source is formatted per .clang-format (clang-format -i fixes).
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null || find include src tests bench tools -name '*.[ch]' -o -name '*.cc')
clang-format --dry-run --Werror $files
echo "format: $(echo "$files" | wc -w) files clean"
