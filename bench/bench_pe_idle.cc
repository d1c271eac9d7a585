// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// Progress-thread costs.
//   BM_pe_idle/<mode>   a pe thread with nothing to do for 1 s: its CPU
//                       time (per-thread CPU clock of its tid) as a share
//                       of one core, counter cpu_pct (target < 2 % for
//                       adaptive and block; spin burns a core by design)
//   BM_pe_wake/<mode>   a command submitted to a sleeping pe: time from
//                       tw_pe_submit until the command runs on the pe
//                       thread; counters median_us and p90_us
#include <benchmark/benchmark.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

extern "C" {
#include "core/tw_stats.h"
#include "core/tw_time.h"
#include "progress/tw_pe.h"
}

namespace
{

const char *mode_name(tw_wait_mode_t m)
{
    return m == TW_WAIT_SPIN ? "spin" : m == TW_WAIT_BLOCK ? "block" : "adaptive";
}

tw_pe_t *start_pe(tw_wait_mode_t mode)
{
    tw_pe_params_t p = {};
    tw_pe_t *pe = nullptr;

    p.name = "bench";
    p.thread = true;
    p.wait_mode = mode;
    p.bind_package = -1;
    if (tw_pe_create(&p, &pe) != TW_OK) {
        return nullptr;
    }
    if (tw_pe_start(pe) != TW_OK) {
        tw_pe_destroy(pe);
        return nullptr;
    }
    return pe;
}

// CPU time of thread @p tid of this process: the per-thread CPU clock id
// Linux builds from a tid (what pthread_getcpuclockid returns for it).
uint64_t thread_cpu_ns(int tid)
{
    clockid_t id = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6u);
    struct timespec ts;

    if (clock_gettime(id, &ts) != 0) {
        return 0;
    }
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_ns(uint64_t ns)
{
    struct timespec ts = {static_cast<time_t>(ns / 1000000000u),
                          static_cast<long>(ns % 1000000000u)};
    nanosleep(&ts, nullptr);
}

void BM_pe_idle(benchmark::State &state)
{
    auto mode = static_cast<tw_wait_mode_t>(state.range(0));
    tw_pe_t *pe = start_pe(mode);
    double pct = 0;

    if (pe == nullptr) {
        state.SkipWithError("pe start failed");
        return;
    }
    sleep_ns(100000000); // settle: the first sleep after start
    for (auto _ : state) {
        uint64_t c0 = thread_cpu_ns(tw_pe_tid(pe)), t0 = tw_time_ns();
        sleep_ns(1000000000);
        uint64_t c1 = thread_cpu_ns(tw_pe_tid(pe)), t1 = tw_time_ns();
        pct = 100.0 * static_cast<double>(c1 - c0) / static_cast<double>(t1 - t0);
        state.SetIterationTime(static_cast<double>(t1 - t0) * 1e-9);
    }
    state.counters["cpu_pct"] = pct;
    state.counters["sleeps"] =
        static_cast<double>(tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS));
    state.SetLabel(mode_name(mode));
    tw_pe_destroy(pe);
}

std::atomic<uint64_t> g_ran_at{0};

void stamp_cmd(void *, void *, uint64_t)
{
    g_ran_at.store(tw_time_ns(), std::memory_order_release);
}

void BM_pe_wake(benchmark::State &state)
{
    auto mode = static_cast<tw_wait_mode_t>(state.range(0));
    tw_pe_t *pe = start_pe(mode);
    std::vector<double> lat;
    tw_pe_cmd_t cmd = {};

    if (pe == nullptr) {
        state.SkipWithError("pe start failed");
        return;
    }
    cmd.fn = stamp_cmd;
    uint64_t slept = 0; // sleeps counted before the last submit
    for (auto _ : state) {
        // Let it fall asleep again after the last command, then wait some.
        while (tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS) <= slept) {
            sleep_ns(200000);
        }
        sleep_ns(2000000);
        slept = tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_SLEEPS);
        g_ran_at.store(0, std::memory_order_relaxed);
        uint64_t t0 = tw_time_ns();
        while (tw_pe_submit(pe, &cmd) != TW_OK) {
        }
        uint64_t t1;
        while ((t1 = g_ran_at.load(std::memory_order_acquire)) == 0) {
            sleep_ns(1000);
        }
        lat.push_back(static_cast<double>(t1 - t0) * 1e-3);
        state.SetIterationTime(static_cast<double>(t1 - t0) * 1e-9);
    }
    std::sort(lat.begin(), lat.end());
    if (!lat.empty()) {
        state.counters["median_us"] = lat[lat.size() / 2];
        state.counters["p90_us"] = lat[lat.size() * 9 / 10];
    }
    state.counters["doorbells"] =
        static_cast<double>(tw_stats_read(tw_pe_stats(pe), TW_PE_STAT_DOORBELL));
    state.SetLabel(mode_name(mode));
    tw_pe_destroy(pe);
}

} // namespace

BENCHMARK(BM_pe_idle)
    ->Arg(TW_WAIT_ADAPTIVE)
    ->Arg(TW_WAIT_BLOCK)
    ->Arg(TW_WAIT_SPIN)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_pe_wake)
    ->Arg(TW_WAIT_BLOCK)
    ->Arg(TW_WAIT_ADAPTIVE)
    ->Iterations(200)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
