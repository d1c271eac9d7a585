/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The one-sided wire parsers of tw_rma_proto.h on arbitrary bytes:
 * tw_rma_rkey_parse (a packed remote key, handed to tw_put / tw_get by
 * the application) and tw_rma_hdr_parse (the RMA active-message header).
 * Checks their contract: a rejection leaves the output alone and names a
 * reason; an accepted key lies inside the bytes given, within every
 * limit, its sections inside its own length, and packs back to exactly
 * the bytes it was parsed from; an accepted header is the 48 bytes given.
 * Seeds (corpus/rkey/): keys with no, one and two sections, keys that lie
 * about a length, truncated ones, and headers of each type.
 */
#include <string.h>

#include "msg/tw_rma_proto.h"
#include "tw_fuzz.h"

static void fz_rkey(const uint8_t *data, size_t size)
{
    uint8_t packed[TW_RKEY_MAX];
    tw_rma_rkey_t k, again;
    const char *why = NULL;
    tw_status_t st;

    memset(&k, 0xa5, sizeof(k));
    again = k;
    st = tw_rma_rkey_parse(data, size, &k, &why);
    if (size < sizeof(tw_rma_rkey_hdr_t)) {
        TW_FUZZ_CHECK(st == TW_ERR_TRUNCATED);
    }
    if (st != TW_OK) {
        TW_FUZZ_CHECK(st == TW_ERR_TRUNCATED || st == TW_ERR_PROTOCOL);
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        TW_FUZZ_CHECK(memcmp(&k, &again, sizeof(k)) == 0);
        return;
    }
    TW_FUZZ_CHECK(k.h.magic == TW_RMA_RKEY_MAGIC && k.h.version == TW_RMA_RKEY_VERSION);
    TW_FUZZ_CHECK(k.h.len >= sizeof(k.h) && k.h.len <= size && k.h.len <= TW_RKEY_MAX);
    TW_FUZZ_CHECK(k.h.nsect <= TW_RMA_RKEY_SECT_MAX);
    for (unsigned i = 0; i < k.h.nsect; i++) {
        const tw_rma_rkey_sect_t *s = &k.sect[i];
        const uint8_t *name = (const uint8_t *)s->name;
        TW_FUZZ_CHECK(s->name_len >= 1 && s->name_len <= TW_RMA_RKEY_NAME_MAX);
        TW_FUZZ_CHECK(s->key_len <= TW_TL_KEY_MAX);
        TW_FUZZ_CHECK(name > data + sizeof(k.h) && name + s->name_len < data + k.h.len);
        TW_FUZZ_CHECK(s->key > name && s->key + s->key_len <= data + k.h.len);
    }
    /* Only the key's own bytes count; one fewer is truncated. */
    TW_FUZZ_CHECK(tw_rma_rkey_parse(data, k.h.len, &again, NULL) == TW_OK);
    TW_FUZZ_CHECK(memcmp(&again, &k, sizeof(k)) == 0);
    TW_FUZZ_CHECK(tw_rma_rkey_parse(data, k.h.len - 1u, &again, NULL) == TW_ERR_TRUNCATED);
    /* Round trip: what was accepted is exactly what pack writes. */
    TW_FUZZ_CHECK(tw_rma_rkey_size(&k) == k.h.len);
    tw_rma_rkey_pack(&k, packed);
    TW_FUZZ_CHECK(memcmp(packed, data, k.h.len) == 0);
}

static void fz_hdr(const uint8_t *data, size_t size)
{
    tw_rma_hdr_t h, before;
    const char *why = NULL;
    tw_status_t st;

    memset(&h, 0xa5, sizeof(h));
    before = h;
    st = tw_rma_hdr_parse(data, size, &h, &why);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(st == TW_ERR_PROTOCOL);
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        TW_FUZZ_CHECK(memcmp(&h, &before, sizeof(h)) == 0);
        return;
    }
    TW_FUZZ_CHECK(size == sizeof(h) && memcmp(&h, data, sizeof(h)) == 0);
    TW_FUZZ_CHECK(h.version == TW_RMA_HDR_VERSION);
    TW_FUZZ_CHECK(h.type >= TW_RMA_PUT_REQ && h.type <= TW_RMA_GET_REP);
    TW_FUZZ_CHECK(h.status <= TW_OK && h.status >= TW_ERR_BOOTSTRAP);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_rkey(data, size);
    fz_hdr(data, size);
    return 0;
}
