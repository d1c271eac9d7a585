// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// The reliability layer's own CPU cost per message: two ranks in one
// thread over an in-memory wire, with the layer (arg 1) and without it
// (arg 0) in the same run. An 8-byte message with msg's 32-byte header;
// the stream acks as the layer does (every 48 fragments, or per tick),
// the ping-pong piggybacks acks on the reply. Medians of repetitions:
//   bench_rel --benchmark_repetitions=9 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "bench_rel_ops.h"

namespace
{

void BM_rel_stream(benchmark::State &state)
{
    bm_rel_t *b = bm_rel_create(state.range(0) != 0);
    for (auto _ : state) {
        if (!bm_rel_stream_step(b, 8)) {
            state.SkipWithError("send failed");
            break;
        }
    }
    if (bm_rel_bad(b) != 0 || bm_rel_received(b) != static_cast<uint64_t>(state.iterations())) {
        state.SkipWithError("lost, reordered or corrupted messages");
    }
    state.SetItemsProcessed(state.iterations());
    bm_rel_destroy(b);
}
BENCHMARK(BM_rel_stream)->ArgName("reliable")->Arg(0)->Arg(1);

void BM_rel_pingpong(benchmark::State &state)
{
    bm_rel_t *b = bm_rel_create(state.range(0) != 0);
    for (auto _ : state) {
        if (!bm_rel_pingpong_step(b, 8)) {
            state.SkipWithError("send failed");
            break;
        }
    }
    if (bm_rel_bad(b) != 0 || bm_rel_received(b) != 2 * static_cast<uint64_t>(state.iterations())) {
        state.SkipWithError("lost, reordered or corrupted messages");
    }
    state.SetItemsProcessed(2 * state.iterations());
    bm_rel_destroy(b);
}
BENCHMARK(BM_rel_pingpong)->ArgName("reliable")->Arg(0)->Arg(1);

} // namespace

BENCHMARK_MAIN();
