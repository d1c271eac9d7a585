/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* CRC32C: standard vectors, hardware == software, chaining. */
#include <stdint.h>
#include <string.h>

#include "core/tw_compiler.h"
#include "core/tw_crc32c.h"
#include "core/tw_mem.h"
#include "tw_test.h"

typedef uint32_t (*crc_fn_t)(uint32_t, const void *, size_t);

static const struct {
    const char *name;
    crc_fn_t fn;
} impls[] = {
    {"auto", tw_crc32c},
    {"sw", tw_crc32c_sw},
    {"hw", tw_crc32c_hw},
};

/* Bitwise reference, independent of the library's tables. */
static uint32_t crc_ref(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (crc & 1u ? 0x82F63B78u : 0u);
        }
    }
    return ~crc;
}

static void test_vectors(void)
{
    unsigned char buf[32];

    for (size_t i = 0; i < TW_ARRAY_SIZE(impls); i++) {
        crc_fn_t fn = impls[i].fn;
        fprintf(stderr, "vectors: %s\n", impls[i].name);

        TWT_EQ(fn(0, "123456789", 9), 0xE3069283u);
        TWT_EQ(fn(0, "", 0), 0);
        TWT_EQ(fn(0x12345678u, NULL, 0), 0x12345678u);

        memset(buf, 0, sizeof(buf));
        TWT_EQ(fn(0, buf, sizeof(buf)), 0x8A9136AAu);
        memset(buf, 0xff, sizeof(buf));
        TWT_EQ(fn(0, buf, sizeof(buf)), 0x62A8AB43u);
        for (int k = 0; k < 32; k++) {
            buf[k] = (unsigned char)k;
        }
        TWT_EQ(fn(0, buf, sizeof(buf)), 0x46DD794Eu);
        for (int k = 0; k < 32; k++) {
            buf[k] = (unsigned char)(31 - k);
        }
        TWT_EQ(fn(0, buf, sizeof(buf)), 0x113FDB5Cu);
    }
}

static void test_hw_equals_sw(void)
{
    const size_t max = 200 * 1024;
    unsigned char *buf = tw_malloc(max + 16);
    uint64_t seed = 0xC0FFEE;

    TWT_CHECK(buf != NULL);
    twt_fill(buf, max + 16, 42);

    /* Every short length at every alignment, against the bitwise reference. */
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len <= 300; len++) {
            uint32_t init = (uint32_t)twt_rand(&seed);
            uint32_t ref = crc_ref(init, buf + off, len);
            TWT_CHECKF(tw_crc32c_sw(init, buf + off, len) == ref, "sw off %zu len %zu", off, len);
            TWT_CHECKF(tw_crc32c_hw(init, buf + off, len) == ref, "hw off %zu len %zu", off, len);
            TWT_CHECKF(tw_crc32c(init, buf + off, len) == ref, "auto off %zu len %zu", off, len);
        }
    }

    /* Lengths around the three-way block sizes and random long ones. */
    static const size_t edges[] = {767,   768,   769,         1023,  1024,      12287,
                                   12288, 12289, 12288 + 768, 65536, 65536 + 7, 200 * 1024};
    for (size_t off = 0; off < 16; off++) {
        for (size_t i = 0; i < TW_ARRAY_SIZE(edges); i++) {
            size_t len = edges[i];
            uint32_t sw = tw_crc32c_sw(0, buf + off, len);
            TWT_CHECKF(tw_crc32c_hw(0, buf + off, len) == sw, "hw off %zu len %zu", off, len);
        }
        for (int r = 0; r < 8; r++) {
            size_t len = (size_t)(twt_rand(&seed) % (max + 1));
            uint32_t init = (uint32_t)twt_rand(&seed);
            uint32_t sw = tw_crc32c_sw(init, buf + off, len);
            TWT_CHECKF(tw_crc32c_hw(init, buf + off, len) == sw, "hw off %zu len %zu", off, len);
            TWT_CHECKF(tw_crc32c(init, buf + off, len) == sw, "auto off %zu len %zu", off, len);
        }
    }
    /* The bitwise reference once on a long buffer (it is slow). */
    TWT_EQ(tw_crc32c_hw(7, buf + 3, 50000), crc_ref(7, buf + 3, 50000));
    tw_free(buf, max + 16);
}

static void test_chaining(void)
{
    const size_t len = 64 * 1024 + 333;
    unsigned char *buf = tw_malloc(len);
    uint64_t seed = 99;

    TWT_CHECK(buf != NULL);
    twt_fill(buf, len, 7);
    for (size_t i = 0; i < TW_ARRAY_SIZE(impls); i++) {
        crc_fn_t fn = impls[i].fn;
        uint32_t whole = fn(0, buf, len);
        for (int r = 0; r < 50; r++) {
            size_t split = (size_t)(twt_rand(&seed) % (len + 1));
            uint32_t a = fn(0, buf, split);
            TWT_CHECKF(fn(a, buf + split, len - split) == whole, "%s split %zu", impls[i].name,
                       split);
        }
        /* Byte by byte for a short prefix. */
        uint32_t c = 0;
        for (size_t k = 0; k < 100; k++) {
            c = fn(c, buf + k, 1);
        }
        TWT_EQ(c, fn(0, buf, 100));
    }
    tw_free(buf, len);
}

int main(void)
{
    fprintf(stderr, "crc32c implementation: %s\n", tw_crc32c_impl());
    TWT_CHECK(strcmp(tw_crc32c_impl(), "sse4.2") == 0 || strcmp(tw_crc32c_impl(), "software") == 0);
    test_vectors();
    test_hw_equals_sw();
    test_chaining();
    return 0;
}
