/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "core/tw_siphash.h"

#include <string.h>

static inline uint64_t tw_sip_rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t tw_sip_load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

#define TW_SIPROUND(v0, v1, v2, v3) \
    do {                            \
        v0 += v1;                   \
        v1 = tw_sip_rotl(v1, 13);   \
        v1 ^= v0;                   \
        v0 = tw_sip_rotl(v0, 32);   \
        v2 += v3;                   \
        v3 = tw_sip_rotl(v3, 16);   \
        v3 ^= v2;                   \
        v0 += v3;                   \
        v3 = tw_sip_rotl(v3, 21);   \
        v3 ^= v0;                   \
        v2 += v1;                   \
        v1 = tw_sip_rotl(v1, 17);   \
        v1 ^= v2;                   \
        v2 = tw_sip_rotl(v2, 32);   \
    } while (0)

uint64_t tw_siphash24(const uint8_t key[16], const void *data, size_t len)
{
    const uint8_t *in = data;
    uint64_t k0 = tw_sip_load64(key), k1 = tw_sip_load64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
    uint64_t b = (uint64_t)len << 56, m;
    size_t full = len & ~(size_t)7;
    uint8_t tail[8] = {0};

    for (size_t i = 0; i < full; i += 8) {
        m = tw_sip_load64(in + i);
        v3 ^= m;
        TW_SIPROUND(v0, v1, v2, v3);
        TW_SIPROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    if (len > full) {
        memcpy(tail, in + full, len - full); /* data may be NULL when len is 0 */
    }
    b |= tw_sip_load64(tail);
    v3 ^= b;
    TW_SIPROUND(v0, v1, v2, v3);
    TW_SIPROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++) {
        TW_SIPROUND(v0, v1, v2, v3);
    }
    return v0 ^ v1 ^ v2 ^ v3;
}

tw_status_t tw_siphash_key_parse(const char *hex, uint8_t out[16])
{
    uint8_t key[16];

    if (hex == NULL || strlen(hex) != 32) {
        return TW_ERR_INVALID;
    }
    for (int i = 0; i < 32; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (v < 0) {
            return TW_ERR_INVALID;
        }
        if (i % 2 == 0) {
            key[i / 2] = (uint8_t)(v << 4);
        } else {
            key[i / 2] |= (uint8_t)v;
        }
    }
    memcpy(out, key, sizeof(key)); /* only on success */
    return TW_OK;
}
