# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/core benchmarks.
tw_add_bench(bench_crc32c bench_crc32c.cc)
