/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * One-sided wire formats (src/msg/tw_rma_proto.h): the packed remote key
 * and the RMA active-message header. Keys are built here byte by byte
 * from the layout the header documents, not with the packer, so the test
 * is an independent reading of the format; then the packer must write the
 * same bytes. Cases: good keys (no, one, two sections, trailing bytes
 * after the key), truncated ones, a wrong magic, version or reserved
 * word, lengths that lie (the header's, a section's name or key),
 * transport keys at and past TW_TL_KEY_MAX; headers of every type and
 * status, and each rejection.
 * A rejected input leaves the output untouched and says why.
 */
#include <string.h>

#include "msg/tw_rma_proto.h"
#include "tw_test.h"

/* Little-endian writers: the format's host order on every machine we
 * build for. */
static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

#define ID    0x1122334455667788ull
#define KEY   0x0badc0ffee0ddf00ull
#define BASE  0x00007f0000001000ull
#define SIZE  8192u
#define OWNER 3

/* A key of @p nsect sections: "verbs" with @p klen bytes 0xa0.., then
 * "shm" with 4 bytes 0xb0... Returns its length. */
static size_t build(uint8_t *b, unsigned nsect, uint8_t klen)
{
    size_t off = 48;

    memset(b, 0, TW_RKEY_MAX + 64);
    memcpy(b, "TWRK", 4);
    b[4] = TW_RMA_RKEY_VERSION;
    b[5] = (uint8_t)nsect;
    put32(b + 8, OWNER);
    put64(b + 16, ID);
    put64(b + 24, KEY);
    put64(b + 32, BASE);
    put64(b + 40, SIZE);
    if (nsect >= 1) {
        b[off++] = 5;
        memcpy(b + off, "verbs", 5);
        off += 5;
        b[off++] = klen;
        for (unsigned i = 0; i < klen; i++) {
            b[off++] = (uint8_t)(0xa0 + i);
        }
    }
    if (nsect >= 2) {
        b[off++] = 3;
        memcpy(b + off, "shm", 3);
        off += 3;
        b[off++] = 4;
        for (unsigned i = 0; i < 4; i++) {
            b[off++] = (uint8_t)(0xb0 + i);
        }
    }
    put16(b + 6, (uint16_t)off);
    return off;
}

/* @p n bytes at @p b are refused with @p want, @p k left as it was. */
static void refused(const uint8_t *b, size_t n, tw_status_t want)
{
    tw_rma_rkey_t k, before;
    const char *why = NULL;

    memset(&k, 0x5a, sizeof(k));
    before = k;
    TWT_EQ(tw_rma_rkey_parse(b, n, &k, &why), want);
    TWT_CHECK(why != NULL && why[0] != '\0');
    TWT_CHECK(memcmp(&k, &before, sizeof(k)) == 0);
    TWT_EQ(tw_rma_rkey_parse(b, n, &k, NULL), want); /* why may be NULL */
}

/* The key at @p b parses, reads back what build() wrote, and packs to
 * the same bytes. */
static void good(const uint8_t *b, size_t n, size_t key_len, unsigned nsect, uint8_t klen)
{
    uint8_t again[TW_RKEY_MAX];
    tw_rma_rkey_t k;
    const char *why = NULL;

    TWT_EQ(tw_rma_rkey_parse(b, n, &k, &why), TW_OK);
    TWT_EQ(k.h.magic, TW_RMA_RKEY_MAGIC);
    TWT_EQ(k.h.len, key_len);
    TWT_EQ(k.h.nsect, nsect);
    TWT_EQ(k.h.owner, OWNER);
    TWT_CHECK(k.h.id == ID && k.h.key == KEY && k.h.base == BASE && k.h.size == SIZE);
    if (nsect >= 1) {
        TWT_CHECK(k.sect[0].name_len == 5 && memcmp(k.sect[0].name, "verbs", 5) == 0);
        TWT_EQ(k.sect[0].key_len, klen);
        TWT_CHECK(k.sect[0].key == b + 48 + 1 + 5 + 1);
        TWT_CHECK(tw_rma_rkey_find(&k, "verbs") == k.sect[0].key);
    }
    if (nsect >= 2) {
        TWT_CHECK(k.sect[1].name_len == 3 && memcmp(k.sect[1].name, "shm", 3) == 0);
        TWT_CHECK(k.sect[1].key_len == 4 && k.sect[1].key[0] == 0xb0);
        TWT_CHECK(tw_rma_rkey_find(&k, "shm") == k.sect[1].key);
    }
    for (unsigned i = nsect; i < TW_RMA_RKEY_SECT_MAX; i++) {
        TWT_CHECK(k.sect[i].name == NULL && k.sect[i].key == NULL && k.sect[i].key_len == 0);
    }
    TWT_CHECK(tw_rma_rkey_find(&k, "verb") == NULL);
    TWT_CHECK(tw_rma_rkey_find(&k, "tcp") == NULL);
    TWT_EQ(tw_rma_rkey_size(&k), key_len);
    memset(again, 0xee, sizeof(again));
    tw_rma_rkey_pack(&k, again);
    TWT_CHECK(memcmp(again, b, key_len) == 0);
}

static void test_rkey(void)
{
    uint8_t b[TW_RKEY_MAX + 64];
    size_t n;

    /* Good keys; bytes after the key are not the key's. */
    for (unsigned nsect = 0; nsect <= 2; nsect++) {
        n = build(b, nsect, 8);
        TWT_EQ(n, nsect == 0 ? 48 : nsect == 1 ? 48 + 7 + 8 : 48 + 7 + 8 + 5 + 4);
        good(b, n, n, nsect, 8);
        good(b, sizeof(b), n, nsect, 8);
    }
    /* The transport-key limit, met and passed by one byte. */
    n = build(b, 1, TW_TL_KEY_MAX);
    good(b, n, n, 1, TW_TL_KEY_MAX);
    n = build(b, 1, TW_TL_KEY_MAX + 1);
    refused(b, n, TW_ERR_PROTOCOL);
    n = build(b, 2, 0); /* an empty transport key is a key */
    good(b, n, n, 2, 0);

    /* Truncated: shorter than the header, or than the length it claims. */
    n = build(b, 2, 8);
    for (size_t cut = 0; cut < n; cut++) {
        refused(b, cut, TW_ERR_TRUNCATED);
    }

    /* Not this format or version. */
    n = build(b, 1, 8);
    b[0] ^= 1;
    refused(b, n, TW_ERR_PROTOCOL);
    static const uint8_t versions[] = {0, TW_RMA_RKEY_VERSION + 1, UINT8_MAX};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(versions); i++) {
        n = build(b, 1, 8);
        b[4] = versions[i];
        refused(b, n, TW_ERR_PROTOCOL);
    }
    n = build(b, 1, 8);
    b[15] = 1; /* the reserved word */
    refused(b, n, TW_ERR_PROTOCOL);

    /* The header's length lies: below the header, past TW_RKEY_MAX,
     * cutting into a section, leaving bytes after the last one. */
    static const uint16_t lies[] = {0, 47, TW_RKEY_MAX + 1, UINT16_MAX, 48 + 7 + 4, 48 + 7 + 8 + 1};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(lies); i++) {
        n = build(b, 1, 8);
        put16(b + 6, lies[i]);
        refused(b, sizeof(b), TW_ERR_PROTOCOL);
    }
    /* The section count lies, or passes the limit. */
    n = build(b, 1, 8);
    b[5] = 2;
    refused(b, n, TW_ERR_PROTOCOL);
    b[5] = 0;
    refused(b, n, TW_ERR_PROTOCOL);
    n = build(b, 2, 8);
    b[5] = TW_RMA_RKEY_SECT_MAX + 1;
    refused(b, n, TW_ERR_PROTOCOL);
    /* A section's lengths lie: its name or its key runs past the key. */
    n = build(b, 2, 8);
    b[48] = 200;
    refused(b, n, TW_ERR_PROTOCOL);
    n = build(b, 2, 8);
    b[48 + 1 + 5] = 9; /* one more key byte than there is before "shm" */
    refused(b, n, TW_ERR_PROTOCOL);
    n = build(b, 2, 8);
    b[48 + 1 + 5 + 1 + 8 + 1 + 3] = 5; /* the last key, one byte past the end */
    refused(b, n, TW_ERR_PROTOCOL);
    /* Names: empty, or longer than a transport name may be. */
    n = build(b, 1, 8);
    b[48] = 0;
    refused(b, n, TW_ERR_PROTOCOL);
    uint8_t *p = b + 48;
    memset(b + 48, 0, sizeof(b) - 48);
    *p++ = TW_RMA_RKEY_NAME_MAX + 1;
    memset(p, 'x', TW_RMA_RKEY_NAME_MAX + 1);
    p += TW_RMA_RKEY_NAME_MAX + 1;
    *p++ = 0;
    put16(b + 6, (uint16_t)(p - b));
    refused(b, (size_t)(p - b), TW_ERR_PROTOCOL);
    b[48] = TW_RMA_RKEY_NAME_MAX; /* one 'x' moves into the key */
    b[48 + 1 + TW_RMA_RKEY_NAME_MAX] = 1;
    TWT_EQ(tw_rma_rkey_parse(b, (size_t)(p - b), &(tw_rma_rkey_t){0}, NULL), TW_OK);
}

/* @p n header bytes at @p b are refused, @p h left as it was. */
static void hdr_refused(const void *b, size_t n)
{
    tw_rma_hdr_t h, before;
    const char *why = NULL;

    memset(&h, 0x5a, sizeof(h));
    before = h;
    TWT_EQ(tw_rma_hdr_parse(b, n, &h, &why), TW_ERR_PROTOCOL);
    TWT_CHECK(why != NULL && why[0] != '\0');
    TWT_CHECK(memcmp(&h, &before, sizeof(h)) == 0);
}

static void test_hdr(void)
{
    uint8_t b[64];
    tw_rma_hdr_t h;

    memset(b, 0, sizeof(b));
    b[0] = TW_RMA_HDR_VERSION;
    put64(b + 8, 0x0000000700000005ull); /* cookie: slot 5, generation 7 */
    put64(b + 16, ID);
    put64(b + 24, KEY);
    put64(b + 32, BASE);
    put64(b + 40, 4096);
    for (uint8_t t = TW_RMA_PUT_REQ; t <= TW_RMA_GET_REP; t++) {
        b[1] = t;
        for (int st = TW_ERR_BOOTSTRAP; st <= TW_OK; st++) {
            put16(b + 2, (uint16_t)(int16_t)st);
            TWT_EQ(tw_rma_hdr_parse(b, 48, &h, NULL), TW_OK);
            TWT_CHECK(h.type == t && h.status == st && memcmp(&h, b, 48) == 0);
        }
    }
    TWT_CHECK(h.cookie == 0x0000000700000005ull && h.region == ID && h.key == KEY &&
              h.addr == BASE && h.len == 4096);
    put16(b + 2, 0);
    hdr_refused(b, 0);
    hdr_refused(b, 47);
    hdr_refused(b, 49);
    b[0] = TW_RMA_HDR_VERSION + 1;
    hdr_refused(b, 48);
    b[0] = TW_RMA_HDR_VERSION;
    b[1] = 0;
    hdr_refused(b, 48);
    b[1] = TW_RMA_GET_REP + 1;
    hdr_refused(b, 48);
    b[1] = TW_RMA_PUT_ACK;
    put16(b + 2, 1);
    hdr_refused(b, 48);
    put16(b + 2, (uint16_t)(int16_t)(TW_ERR_BOOTSTRAP - 1));
    hdr_refused(b, 48);
}

int main(void)
{
    test_rkey();
    test_hdr();
    printf("rma wire formats: every case behaved\n");
    return 0;
}
