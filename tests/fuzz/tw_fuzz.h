/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Fuzz targets: each fuzz_<name>.c defines the libFuzzer entry point below.
 * It is linked either with libFuzzer (-fsanitize=fuzzer, clang Asan builds)
 * or with replay_main.c, which feeds it the files of a seed corpus (every
 * build). A broken invariant aborts, which both drivers report as a crash.
 */
#ifndef TW_FUZZ_H
#define TW_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/** One input; returns 0 (libFuzzer reserves other values). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Invariants on wire input the parser accepted: abort when one breaks. */
#define TW_FUZZ_CHECK(cond)                                                                      \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

#endif /* TW_FUZZ_H */
