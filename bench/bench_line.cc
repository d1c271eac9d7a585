// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// The hardware floor of the collectives within a node: two threads on two
// CPUs talking through single-writer cache lines, as src/coll's shared
// memory algorithms do, with nothing else around it.
//   BM_line_barrier   each stores its line, then waits for the other's
//                     (the flat barrier of tw_coll_shm.c: one step)
//   BM_line_pingpong  one stores, the other answers (a round trip: two
//                     transfers one after the other, as a fan-in/fan-out)
// With threads, Google Benchmark divides the wall time by the iterations
// of both threads together: a round takes twice the time it prints. That
// doubled figure is what a 2-member barrier of that shape cannot beat on
// this machine; BENCHMARKS.md sets tw_coll_perf's barrier beside it.
// Needs 2 CPUs (skipped otherwise). For medians:
//   bench_line --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <pthread.h>
#include <sched.h>

namespace
{

struct alignas(64) Line {
    std::atomic<uint64_t> v{0};
};

Line g_lines[2];

inline void relax()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// The CPUs the process may run on, read before any thread is pinned (the
// main thread runs benchmark thread 0 and keeps its pinning).
cpu_set_t g_cpus;
const bool g_cpus_read = sched_getaffinity(0, sizeof(g_cpus), &g_cpus) == 0;

// Pin the calling benchmark thread to the idx-th of those CPUs; false
// when there are fewer than 2.
bool pin(int idx)
{
    int seen = 0;

    if (!g_cpus_read || CPU_COUNT(&g_cpus) < 2) {
        return false;
    }
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &g_cpus) && seen++ == idx) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            return pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
        }
    }
    return false;
}

inline void wait_for(const Line &l, uint64_t k)
{
    while (l.v.load(std::memory_order_acquire) < k) {
        relax();
    }
}

// Both threads run the same number of iterations per run, so the lines
// hold equal values when a run starts: each counts on from its own.
void BM_line_barrier(benchmark::State &state)
{
    const int me = state.thread_index(), other = 1 - me;
    if (!pin(me)) {
        state.SkipWithError("needs 2 CPUs");
        return;
    }
    uint64_t k = g_lines[me].v.load(std::memory_order_relaxed);
    for (auto _ : state) {
        g_lines[me].v.store(++k, std::memory_order_release);
        wait_for(g_lines[other], k);
    }
}
BENCHMARK(BM_line_barrier)->Threads(2)->UseRealTime();

void BM_line_pingpong(benchmark::State &state)
{
    const int me = state.thread_index();
    if (!pin(me)) {
        state.SkipWithError("needs 2 CPUs");
        return;
    }
    uint64_t k = g_lines[me].v.load(std::memory_order_relaxed);
    for (auto _ : state) {
        ++k;
        if (me == 0) {
            g_lines[0].v.store(k, std::memory_order_release);
            wait_for(g_lines[1], k);
        } else {
            wait_for(g_lines[0], k);
            g_lines[1].v.store(k, std::memory_order_release);
        }
    }
}
BENCHMARK(BM_line_pingpong)->Threads(2)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
