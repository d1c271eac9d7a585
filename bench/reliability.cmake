# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
# The reliability layer's CPU cost per message, on and off, over the
# scripted fake transport of the tests (tests/common/tw_fake_tl.h).
if(TARGET tw_fake_tl)
  tw_add_bench(bench_rel ${CMAKE_CURRENT_LIST_DIR}/bench_rel.cc
               ${CMAKE_CURRENT_LIST_DIR}/bench_rel_ops.c)
  target_link_libraries(bench_rel PRIVATE tw_fake_tl)
else()
  message(STATUS "bench_rel: not built (it needs the tests' fake transport: TW_BUILD_TESTS=ON)")
endif()
