# Matching engine and self traffic through the API.
tw_add_bench(bench_match ${CMAKE_CURRENT_LIST_DIR}/bench_match.cc
             ${CMAKE_CURRENT_LIST_DIR}/bench_match_ops.c)
tw_add_bench(bench_self ${CMAKE_CURRENT_LIST_DIR}/bench_self.cc)
