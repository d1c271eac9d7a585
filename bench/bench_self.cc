// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// Self traffic through the public API, one context shared by all threads
// (progress-thread mode, TW_WAIT_MODE from the environment).
//   BM_SelfRoundTrip/threads:T  each thread: post an exact receive, send 8 B
//                               to itself, wait for both completions. The
//                               aggregate rate with T = 1, 2, 4, 8 shows
//                               whether threads collapse (target: 4 threads
//                               >= 70 % of 1 thread's rate).
//   BM_SelfStream/threads:T     each thread keeps a window of 32 receives
//                               and sends in flight: message rate.
//   BM_EmptyPoll                tw_cq_poll on a CQ with nothing in it: what
//                               a poll loop pays per turn (with progress
//                               threads it polls the stack's roots under
//                               their engines' try-locks, and yields every
//                               64th turn). A job of one has only self;
//                               `twrun -n 2 bench_self --benchmark_filter=
//                               EmptyPoll` measures it over shm and tcp.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "threadwire/threadwire.h"

namespace
{

tw_context_t *g_ctx;

void drain(tw_cq_t *cq, int want)
{
    tw_completion_t c[64];
    while (want > 0) {
        int n = tw_cq_wait(cq, c, 64, 1000);
        if (n < 0) {
            std::abort();
        }
        for (int i = 0; i < n; i++) {
            if (c[i].status != TW_OK) {
                std::abort();
            }
        }
        want -= n;
    }
}

void BM_SelfRoundTrip(benchmark::State &state)
{
    tw_cq_t *cq;
    uint64_t sbuf = 42, rbuf = 0;
    const uint64_t tag = static_cast<uint64_t>(state.thread_index()) << 32;
    if (tw_cq_create(g_ctx, 8, &cq) != TW_OK) {
        state.SkipWithError("tw_cq_create");
        return;
    }
    for (auto _ : state) {
        tw_recv(g_ctx, 0, tag, 0, &rbuf, sizeof(rbuf), cq, nullptr);
        tw_send(g_ctx, 0, tag, &sbuf, sizeof(sbuf), cq, nullptr);
        drain(cq, 2);
    }
    tw_cq_destroy(cq);
    state.SetItemsProcessed(state.iterations());
}

void BM_SelfStream(benchmark::State &state)
{
    constexpr int window = 32;
    tw_cq_t *cq;
    uint64_t sbuf = 42, rbuf[window];
    const uint64_t tag = static_cast<uint64_t>(state.thread_index()) << 32;
    if (tw_cq_create(g_ctx, 2 * window, &cq) != TW_OK) {
        state.SkipWithError("tw_cq_create");
        return;
    }
    for (auto _ : state) {
        for (int i = 0; i < window; i++) {
            tw_recv(g_ctx, 0, tag, 0, &rbuf[i], sizeof(rbuf[i]), cq, nullptr);
        }
        for (int i = 0; i < window; i++) {
            tw_send(g_ctx, 0, tag, &sbuf, sizeof(sbuf), cq, nullptr);
        }
        drain(cq, 2 * window);
    }
    tw_cq_destroy(cq);
    state.SetItemsProcessed(state.iterations() * window);
}

void BM_EmptyPoll(benchmark::State &state)
{
    tw_cq_t *cq;
    tw_completion_t c[8];
    if (tw_cq_create(g_ctx, 8, &cq) != TW_OK) {
        state.SkipWithError("tw_cq_create");
        return;
    }
    for (auto _ : state) {
        if (tw_cq_poll(cq, c, 8) != 0) {
            state.SkipWithError("a completion from nowhere");
            break;
        }
    }
    tw_cq_destroy(cq);
    state.SetItemsProcessed(state.iterations());
}

} // namespace

BENCHMARK(BM_EmptyPoll);
BENCHMARK(BM_SelfRoundTrip)->ThreadRange(1, 8)->UseRealTime();
BENCHMARK(BM_SelfStream)->ThreadRange(1, 8)->UseRealTime();

int main(int argc, char **argv)
{
    benchmark::Initialize(&argc, argv);
    if (tw_init(nullptr, &g_ctx) != TW_OK) {
        std::fprintf(stderr, "tw_init failed\n");
        return 1;
    }
    benchmark::RunSpecifiedBenchmarks();
    tw_finalize(g_ctx);
    benchmark::Shutdown();
    return 0;
}
