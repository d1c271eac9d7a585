# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# src/runtime unit tests.
tw_add_test(NAME addr_blob SOURCES test_addr_blob.c LABELS unit INTERNAL TIMEOUT 60)
