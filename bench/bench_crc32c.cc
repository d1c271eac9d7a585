// SPDX-License-Identifier: BSD-3-Clause
// Copyright (c) 2026 The threadwire authors
//
// CRC32C throughput: the dispatched entry point, the software and SSE4.2
// paths, at 64 B, 1 KiB and 64 KiB; memcpy of 64 KiB in the same run is the
// peer to compare against. For medians:
//   bench_crc32c --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

extern "C" {
#include "core/tw_crc32c.h"
}

namespace
{

typedef uint32_t (*crc_fn_t)(uint32_t, const void *, size_t);

std::vector<unsigned char> make_buffer(size_t len)
{
    std::vector<unsigned char> buf(len);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (auto &b : buf) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b = static_cast<unsigned char>(x);
    }
    return buf;
}

void run_crc(benchmark::State &state, crc_fn_t fn, const char *impl)
{
    const size_t len = static_cast<size_t>(state.range(0));
    std::vector<unsigned char> buf = make_buffer(len);
    uint32_t crc = 0;

    for (auto _ : state) {
        crc = fn(crc, buf.data(), len);
        benchmark::DoNotOptimize(crc);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
    state.SetLabel(impl);
}

void BM_crc32c(benchmark::State &state)
{
    run_crc(state, tw_crc32c, tw_crc32c_impl());
}

void BM_crc32c_sw(benchmark::State &state)
{
    run_crc(state, tw_crc32c_sw, "software");
}

void BM_crc32c_hw(benchmark::State &state)
{
    run_crc(state, tw_crc32c_hw, tw_crc32c_impl());
}

void BM_memcpy(benchmark::State &state)
{
    const size_t len = static_cast<size_t>(state.range(0));
    std::vector<unsigned char> src = make_buffer(len);
    std::vector<unsigned char> dst(len);

    for (auto _ : state) {
        std::memcpy(dst.data(), src.data(), len);
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

} // namespace

BENCHMARK(BM_crc32c)->Arg(64)->Arg(1024)->Arg(64 * 1024);
BENCHMARK(BM_crc32c_sw)->Arg(64)->Arg(1024)->Arg(64 * 1024);
BENCHMARK(BM_crc32c_hw)->Arg(64)->Arg(1024)->Arg(64 * 1024);
BENCHMARK(BM_memcpy)->Arg(64 * 1024);

BENCHMARK_MAIN();
