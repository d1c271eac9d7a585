# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
#
# Completion-queue stress: producers x consumers, every item checked for
# loss, duplication and per-producer order. Counts shrink by TWTEST_SCALE.
set(_d ${CMAKE_CURRENT_LIST_DIR})
foreach(_shape 4x4 1x1 2x2block 2x2adaptive)
  tw_add_test(NAME cq_stress SOURCES ${_d}/test_cq_stress.c
              LABELS stress INTERNAL TIMEOUT 300 ARGS ${_shape})
endforeach()
tw_add_test(NAME cq_stress_yield SOURCES ${_d}/test_cq_stress_yield.c
            LABELS stress INTERNAL TIMEOUT 300)
