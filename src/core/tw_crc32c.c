/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * CRC32C, software and SSE4.2.
 *
 * Representation. The CRC register is kept reflected: bit 31 holds the
 * coefficient of x^0 and bit 0 that of x^31, the polynomial is 0x82F63B78.
 * Both the tables and the crc32 instruction work on the raw register; the
 * public functions add the customary inversion on entry and exit.
 *
 * Software: slicing-by-8, eight 256-entry tables built once (pthread_once);
 * table k gives the effect of a byte followed by k zero bytes.
 *
 * SSE4.2: crc32q has a latency of 3 cycles and a throughput of 1 per cycle,
 * so one dependent chain runs at a third of the possible speed. A block of
 * 3 * L bytes is therefore split into three streams of L bytes, run
 * interleaved, stream 0 starting from the incoming register and streams 1
 * and 2 from zero. Because the raw register is linear,
 *     crc(A B C) = ((crc(A) * x^8L) ^ crc(B)) * x^8L ^ crc(C)   (mod P)
 * where * x^8L "appends L zero bytes". That multiplication by a constant is
 * linear in the 32 register bits, so it is precomputed per block length as
 * four 256-entry tables (one per register byte): four loads and XORs per
 * shift. Two block lengths are used: long blocks for bulk data, short ones
 * for the rest, then a single stream for the final bytes.
 */
#include "core/tw_crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "core/tw_compiler.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#define TW_CRC32C_HAVE_HW 1
#else
#define TW_CRC32C_HAVE_HW 0
#endif

#define CRC32C_POLY 0x82F63B78u /* reflected */

#define CRC32C_LONG  4096u /* bytes per stream in a long block */
#define CRC32C_SHORT 256u  /* bytes per stream in a short block */

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
/* All written once inside crc_once, read-only afterwards. */
static uint32_t sw_table[8][256];
#if TW_CRC32C_HAVE_HW
static uint32_t shift_long[4][256];  /* register * x^(8 * CRC32C_LONG) */
static uint32_t shift_short[4][256]; /* register * x^(8 * CRC32C_SHORT) */
#endif

static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#if TW_CRC32C_HAVE_HW
/* a * b mod P, both reflected. */
static uint32_t gf2_mul(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;

    /* Walk a from x^0 (bit 31) upwards while b runs through b * x^i. */
    for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
        if (a & bit) {
            prod ^= b;
        }
        b = (b >> 1) ^ (b & 1u ? CRC32C_POLY : 0u);
    }
    return prod;
}

/* x^(8 * nbytes) mod P, reflected. */
static uint32_t gf2_x_pow_8n(size_t nbytes)
{
    uint32_t r = 1u << 31;  /* x^0 */
    uint32_t sq = 1u << 23; /* x^8 */

    /* Square-and-multiply over the bits of nbytes. */
    while (nbytes != 0) {
        if (nbytes & 1u) {
            r = gf2_mul(r, sq);
        }
        sq = gf2_mul(sq, sq);
        nbytes >>= 1;
    }
    return r;
}

static void shift_table_init(uint32_t table[4][256], size_t nbytes)
{
    uint32_t k = gf2_x_pow_8n(nbytes);

    for (unsigned byte = 0; byte < 4; byte++) {
        for (uint32_t v = 0; v < 256; v++) {
            table[byte][v] = gf2_mul(k, v << (8 * byte));
        }
    }
}

static inline uint32_t crc_shift(const uint32_t table[4][256], uint32_t crc)
{
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
           table[3][crc >> 24];
}
#endif

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = (c >> 1) ^ (c & 1u ? CRC32C_POLY : 0u);
        }
        sw_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int k = 1; k < 8; k++) {
            uint32_t prev = sw_table[k - 1][n];
            sw_table[k][n] = (prev >> 8) ^ sw_table[0][prev & 0xff];
        }
    }
#if TW_CRC32C_HAVE_HW
    shift_table_init(shift_long, CRC32C_LONG);
    shift_table_init(shift_short, CRC32C_SHORT);
#endif
}

/* Raw register in and out (no inversion). */
static uint32_t crc_sw_raw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len != 0 && ((uintptr_t)p & 7u) != 0) {
        crc = (crc >> 8) ^ sw_table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t w = load_le64(p) ^ crc;
        crc = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^ sw_table[5][(w >> 16) & 0xff] ^
              sw_table[4][(w >> 24) & 0xff] ^ sw_table[3][(w >> 32) & 0xff] ^
              sw_table[2][(w >> 40) & 0xff] ^ sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len != 0) {
        crc = (crc >> 8) ^ sw_table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    return crc;
}

uint32_t tw_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    return ~crc_sw_raw(~crc, buf, len);
}

#if TW_CRC32C_HAVE_HW

__attribute__((target("sse4.2"))) static inline uint64_t
crc_hw_three_way(uint64_t crc, const unsigned char *p, size_t stream_len,
                 const uint32_t shift[4][256])
{
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    const unsigned char *end = p + stream_len;

    while (p < end) {
        c0 = _mm_crc32_u64(c0, load_le64(p));
        c1 = _mm_crc32_u64(c1, load_le64(p + stream_len));
        c2 = _mm_crc32_u64(c2, load_le64(p + 2 * stream_len));
        c0 = _mm_crc32_u64(c0, load_le64(p + 8));
        c1 = _mm_crc32_u64(c1, load_le64(p + stream_len + 8));
        c2 = _mm_crc32_u64(c2, load_le64(p + 2 * stream_len + 8));
        p += 16;
    }
    return crc_shift(shift, crc_shift(shift, (uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw_raw(uint32_t crc32, const unsigned char *p,
                                                             size_t len)
{
    uint64_t crc = crc32;

    /* No alignment prologue: x86 loads 8 unaligned bytes at full speed,
     * and a byte loop costs a 3-cycle crc32b per byte. */
    while (len >= 3 * CRC32C_LONG) {
        crc = crc_hw_three_way(crc, p, CRC32C_LONG, shift_long);
        p += 3 * CRC32C_LONG;
        len -= 3 * CRC32C_LONG;
    }
    while (len >= 3 * CRC32C_SHORT) {
        crc = crc_hw_three_way(crc, p, CRC32C_SHORT, shift_short);
        p += 3 * CRC32C_SHORT;
        len -= 3 * CRC32C_SHORT;
    }
    while (len >= 8) {
        crc = _mm_crc32_u64(crc, load_le64(p));
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, sizeof(w));
        crc = _mm_crc32_u32((uint32_t)crc, w);
        p += 4;
        len -= 4;
    }
    while (len != 0) {
        crc = _mm_crc32_u8((uint32_t)crc, *p++);
        len--;
    }
    return (uint32_t)crc;
}

static inline bool cpu_has_sse42(void)
{
    return __builtin_cpu_supports("sse4.2");
}

uint32_t tw_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    if (!cpu_has_sse42()) {
        return tw_crc32c_sw(crc, buf, len);
    }
    /* Shorter than a three-way block, the tables are not used: a frame
     * header's checksum does not pay for pthread_once. */
    if (len >= 3 * CRC32C_SHORT) {
        pthread_once(&crc_once, crc_init);
    }
    return ~crc_hw_raw(~crc, buf, len);
}

uint32_t tw_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return tw_crc32c_hw(crc, buf, len);
}

const char *tw_crc32c_impl(void)
{
    return cpu_has_sse42() ? "sse4.2" : "software";
}

#else /* no hardware path on this architecture */

uint32_t tw_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    return tw_crc32c_sw(crc, buf, len);
}

uint32_t tw_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return tw_crc32c_sw(crc, buf, len);
}

const char *tw_crc32c_impl(void)
{
    return "software";
}

#endif
