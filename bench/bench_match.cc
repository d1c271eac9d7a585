// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// Matching cost against queue length (src/msg/tw_match.c).
//   BM_PostedScan/queue:N/buckets:B     N non-matching posted receives in the
//                                       way; then a receive and its message
//   BM_UnexpectedScan/queue:N/buckets:B N non-matching unexpected messages in
//                                       the way; then a message and its receive
//   BM_WildcardPost/queue:N/buckets:B   a TW_ANY_SOURCE receive that must pass
//                                       N unexpected messages in every bucket
// With 1 bucket everything shares one list (a plain MPI queue); with 64
// buckets exact traffic of other (source, tag) pairs is never scanned.
#include <benchmark/benchmark.h>

#include "bench_match_ops.h"

namespace
{

void BM_PostedScan(benchmark::State &state)
{
    bm_match_t *b = bm_match_create(static_cast<unsigned>(state.range(1)));
    bm_match_fill_posted(b, static_cast<uint64_t>(state.range(0)));
    for (auto _ : state) {
        bm_match_step_posted(b);
    }
    bm_match_destroy(b);
    state.SetItemsProcessed(state.iterations());
}

void BM_UnexpectedScan(benchmark::State &state)
{
    bm_match_t *b = bm_match_create(static_cast<unsigned>(state.range(1)));
    bm_match_fill_unexpected(b, static_cast<uint64_t>(state.range(0)), 1);
    for (auto _ : state) {
        bm_match_step_unexpected(b);
    }
    bm_match_destroy(b);
    state.SetItemsProcessed(state.iterations());
}

void BM_WildcardPost(benchmark::State &state)
{
    bm_match_t *b = bm_match_create(static_cast<unsigned>(state.range(1)));
    bm_match_fill_unexpected(b, static_cast<uint64_t>(state.range(0)), 16);
    for (auto _ : state) {
        bm_match_step_wildcard(b);
    }
    bm_match_destroy(b);
    state.SetItemsProcessed(state.iterations());
}

void Args(benchmark::internal::Benchmark *b)
{
    for (int buckets : {1, 64}) {
        for (int n : {0, 16, 256, 4096}) {
            b->Args({n, buckets});
        }
    }
    b->ArgNames({"queue", "buckets"});
}

} // namespace

BENCHMARK(BM_PostedScan)->Apply(Args);
BENCHMARK(BM_UnexpectedScan)->Apply(Args);
BENCHMARK(BM_WildcardPost)->Apply(Args);
BENCHMARK_MAIN();
