// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// Completion-queue hand-off.
//   BM_cq_1to1/P        producer thread (CPU 0) tw_cq_reserve + tw_cq_push,
//                       consumer = benchmark thread (CPU 1) tw_cq_poll(32)
//   BM_spsc_ref_1to1/P  the same two threads and pinning through a plain C11
//                       SPSC ring of 40-byte records: the peer to divide by
//   BM_cq_local         reserve + push + poll on one thread (no sharing)
//   BM_cq_4to1/P        4 producers (CPU 0) into one consumer (CPU 1)
// P = pause instructions the consumer executes after an empty poll: 1 is a
// hot poll loop (every record then moves the ring's index lines between
// the cores), 256 (~2.5 us) a consumer that backs off like tw_cq_wait's
// spin mode and so takes records in batches.
// time_per_item is wall time per completion; compare medians of the CQ and
// the reference from the same run, under shared/tools/baselines/hiprio.sh:
//   bench_cq --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

extern "C" {
#include "progress/tw_cq.h"
}
#include "bench_spsc_ref.h"

namespace
{

constexpr unsigned kDepth = 256;
constexpr uint64_t kBatch = 1u << 16; // items per benchmark iteration
constexpr int kPollMax = 32;

static_assert(sizeof(tw_completion_t) == sizeof(twb_rec40_t), "same record size");

// core/tw_atomic.h is C11 <stdatomic.h> only; the pause hint is all we need.
inline void tw_cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void pin_self(int cpu)
{
    cpu_set_t set;
    int n = static_cast<int>(std::thread::hardware_concurrency());

    CPU_ZERO(&set);
    CPU_SET(n > 0 ? cpu % n : 0, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void unpin_self()
{
    cpu_set_t set;

    CPU_ZERO(&set);
    for (unsigned i = 0; i < std::thread::hardware_concurrency(); i++) {
        CPU_SET(i, &set);
    }
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Idle wait of a producer between batches: spin, yield a little, sleep.
void idle_wait(unsigned &n)
{
    if (++n < 64) {
        tw_cpu_relax();
    } else if (n < 80) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, nullptr);
    }
}

// Producers make the items the consumer asks for, batch by batch.
struct Feeder {
    std::atomic<uint64_t> want{0}; // items requested per producer so far
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;

    template <typename Fn> void start(unsigned producers, int cpu, Fn make)
    {
        for (unsigned p = 0; p < producers; p++) {
            threads.emplace_back([this, cpu, make, p] {
                uint64_t made = 0;
                unsigned idle = 0;
                pin_self(cpu);
                while (!stop.load(std::memory_order_acquire)) {
                    uint64_t w = want.load(std::memory_order_acquire);
                    if (made == w) {
                        idle_wait(idle);
                        continue;
                    }
                    idle = 0;
                    for (; made < w; made++) {
                        make(p, made);
                    }
                }
            });
        }
    }

    void finish()
    {
        stop.store(true, std::memory_order_release);
        for (auto &t : threads) {
            t.join();
        }
    }
};

tw_cq_t *open_cq()
{
    tw_cq_params_t p = {};
    tw_cq_t *cq = nullptr;

    p.depth = kDepth;
    p.wait_mode = TW_WAIT_SPIN;
    if (tw_cq_open(&p, &cq) != TW_OK) {
        return nullptr;
    }
    return cq;
}

void push_item(tw_cq_t *cq, unsigned p, uint64_t seq)
{
    tw_completion_t c = {};

    c.peer = static_cast<int>(p);
    c.tag = seq;
    // Full: the consumer must run; let producers sharing this core go on.
    for (unsigned n = 0; tw_cq_reserve(cq) != TW_OK; n++) {
        if (n < 16) {
            tw_cpu_relax();
        } else {
            sched_yield();
        }
    }
    tw_cq_push(cq, &c);
}

void set_counters(benchmark::State &state, uint64_t items)
{
    state.SetItemsProcessed(static_cast<int64_t>(items));
    state.counters["time_per_item"] = benchmark::Counter(
        static_cast<double>(items), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void relax_n(int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        tw_cpu_relax();
    }
}

void cq_n_to_1(benchmark::State &state, unsigned producers)
{
    tw_cq_t *cq = open_cq();
    Feeder f;
    tw_completion_t out[kPollMax];
    uint64_t per = kBatch / producers, total = 0, bad = 0;

    if (cq == nullptr) {
        state.SkipWithError("tw_cq_open failed");
        return;
    }
    pin_self(1);
    f.start(producers, 0, [cq](unsigned p, uint64_t seq) { push_item(cq, p, seq); });
    for (auto _ : state) {
        uint64_t got = 0;
        f.want.fetch_add(per, std::memory_order_release);
        while (got < per * producers) {
            int n = tw_cq_poll(cq, out, kPollMax);
            if (n == 0) {
                relax_n(state.range(0));
                continue;
            }
            bad += out[n - 1].peer >= static_cast<int>(producers);
            got += static_cast<uint64_t>(n);
        }
        total += got;
    }
    f.finish();
    unpin_self();
    tw_cq_destroy(cq);
    if (bad != 0) {
        state.SkipWithError("corrupt completion");
    }
    set_counters(state, total);
}

void BM_cq_1to1(benchmark::State &state)
{
    cq_n_to_1(state, 1);
}

void BM_cq_4to1(benchmark::State &state)
{
    cq_n_to_1(state, 4);
}

void BM_spsc_ref_1to1(benchmark::State &state)
{
    twb_spsc_t *q = twb_spsc_create(kDepth);
    Feeder f;
    twb_rec40_t out[kPollMax];
    uint64_t total = 0;

    if (q == nullptr) {
        state.SkipWithError("allocation failed");
        return;
    }
    pin_self(1);
    f.start(1, 0, [q](unsigned, uint64_t seq) {
        twb_rec40_t r = {{seq, 0, 0, 0, 0}};
        while (!twb_spsc_push(q, &r)) {
            tw_cpu_relax();
        }
    });
    for (auto _ : state) {
        uint64_t got = 0;
        f.want.fetch_add(kBatch, std::memory_order_release);
        while (got < kBatch) {
            int n = twb_spsc_pop(q, out, kPollMax);
            if (n == 0) {
                relax_n(state.range(0));
                continue;
            }
            got += static_cast<uint64_t>(n);
        }
        total += got;
    }
    f.finish();
    unpin_self();
    twb_spsc_destroy(q);
    set_counters(state, total);
}

void BM_cq_local(benchmark::State &state)
{
    tw_cq_t *cq = open_cq();
    tw_completion_t c = {}, out[1];
    uint64_t total = 0;

    if (cq == nullptr) {
        state.SkipWithError("tw_cq_open failed");
        return;
    }
    for (auto _ : state) {
        c.tag = total;
        tw_cq_reserve(cq);
        tw_cq_push(cq, &c);
        benchmark::DoNotOptimize(tw_cq_poll(cq, out, 1));
        total++;
    }
    tw_cq_destroy(cq);
    set_counters(state, total);
}

} // namespace

BENCHMARK(BM_cq_1to1)->Arg(1)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_spsc_ref_1to1)->Arg(1)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cq_local);
BENCHMARK(BM_cq_4to1)->Arg(1)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
