/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The shm checks on what a hostile peer writes (tw_shm_proto.h). The first
 * byte picks what the rest is (mod 3):
 *   0  a cell as a producer left it (header and data, native layout; the
 *      rest of the cell is zero): tw_shm_cell_parse;
 *   1  8 bytes of mapping size (little-endian; 0: what the header's own
 *      fields need), then a segment header: tw_shm_seg_check, against
 *      the header's own claims and against a fixed expectation;
 *   2  a published address: tw_shm_addr_parse.
 * Buffers are allocated to their exact size, so ASan sees any read
 * beyond the cell, the mapping or the input. An accepted cell has a known
 * type, lengths within the cell and what its type allows, and all its
 * bytes are read; an accepted segment is what was expected and its every
 * ring lies inside the mapping; an accepted address has terminated
 * strings and packs back to what it was parsed from. Parsers are
 * deterministic and write their output only on success.
 */
#include <string.h>

#include "core/tw_bytes.h"
#include "transports/shm/tw_shm_proto.h"
#include "tw_fuzz.h"

static void fz_cell(const uint8_t *data, size_t size)
{
    tw_shm_cell_t *c = calloc(1, TW_SHM_CELL_SIZE);
    tw_shm_cell_view_t v, again;
    const char *why = NULL;
    unsigned sum = 0;
    tw_status_t st;

    TW_FUZZ_CHECK(c != NULL);
    memcpy(c, data, size < TW_SHM_CELL_SIZE ? size : TW_SHM_CELL_SIZE);
    memset(&v, 0xa5, sizeof(v));
    again = v;
    st = tw_shm_cell_parse(c, &v, &why);
    TW_FUZZ_CHECK(st == TW_OK || st == TW_ERR_PROTOCOL);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        TW_FUZZ_CHECK(memcmp(&v, &again, sizeof(v)) == 0);
        TW_FUZZ_CHECK(tw_shm_cell_parse(c, &again, NULL) == TW_ERR_PROTOCOL);
        free(c);
        return;
    }
    TW_FUZZ_CHECK(tw_shm_cell_parse(c, &again, NULL) == TW_OK);
    TW_FUZZ_CHECK(memcmp(&v, &again, sizeof(v)) == 0);
    TW_FUZZ_CHECK(v.type >= TW_SHM_EAGER && v.type <= TW_SHM_DATA);
    TW_FUZZ_CHECK(v.type == c->type && v.am_id == c->am_id && v.hdr_len == c->hdr_len &&
                  v.len == c->len);
    if (v.type == TW_SHM_EAGER) { /* its bytes where the others have a0..a2 */
        TW_FUZZ_CHECK(v.a0 == 0 && v.a1 == 0 && v.a2 == 0);
        TW_FUZZ_CHECK(v.data == (const unsigned char *)c + TW_SHM_EAGER_OFF);
    } else {
        TW_FUZZ_CHECK(v.a0 == c->a0 && v.a1 == c->a1 && v.a2 == c->a2);
        TW_FUZZ_CHECK(v.data == c->data);
    }
    TW_FUZZ_CHECK(v.hdr_len <= v.len && v.len <= TW_SHM_CELL_DATA);
    /* Every byte the view covers is inside the cell. */
    TW_FUZZ_CHECK(v.data + v.len <= (const unsigned char *)c + TW_SHM_CELL_SIZE);
    TW_FUZZ_CHECK(v.type != TW_SHM_RTS || (v.hdr_len == v.len && v.a1 <= TW_SHM_MAX_MSG));
    TW_FUZZ_CHECK((v.type != TW_SHM_CTS && v.type != TW_SHM_FIN) || v.len == 0);
    TW_FUZZ_CHECK(v.type != TW_SHM_DATA || v.hdr_len == 0);
    /* Everything the receiver hands on is inside the cell. */
    for (uint32_t i = 0; i < v.len; i++) {
        sum += v.data[i];
    }
    TW_FUZZ_CHECK(sum <= 255u * TW_SHM_CELL_DATA);
    free(c);
}

/* Every ring of the segment -- the owner's inbound ones, one of which a
 * peer writes into -- ends inside its @p size bytes: the last one does
 * (rings are in local-rank order without the owner). */
static void fz_rings_inside(const tw_shm_seg_id_t *id, size_t size)
{
    if (id->nlocal < 2) {
        return; /* no peer: the one ring reserved is never used */
    }
    uint32_t last = id->owner_local == id->nlocal - 1 ? id->nlocal - 2 : id->nlocal - 1;
    size_t idx = last < id->owner_local ? last : last - 1;
    TW_FUZZ_CHECK(TW_SHM_HDR_SIZE + (idx + 1) * tw_shm_ring_stride(id->ncells) <= size);
}

static void fz_seg_one(const void *base, size_t size, const tw_shm_seg_id_t *want)
{
    const char *why = NULL;
    tw_status_t st = tw_shm_seg_check(base, size, want, &why);

    TW_FUZZ_CHECK(st == TW_OK || st == TW_ERR_PROTOCOL);
    TW_FUZZ_CHECK(tw_shm_seg_check(base, size, want, NULL) == st);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        return;
    }
    const tw_shm_seg_hdr_t *h = base;
    TW_FUZZ_CHECK(h->magic == TW_SHM_MAGIC && h->version == TW_SHM_VERSION);
    TW_FUZZ_CHECK(h->cell_size == TW_SHM_CELL_SIZE);
    TW_FUZZ_CHECK(h->nlocal == want->nlocal && h->ncells == want->ncells &&
                  h->owner_local == want->owner_local && h->owner_pid == want->owner_pid &&
                  h->key_crc == want->key_crc);
    TW_FUZZ_CHECK(h->ncells >= TW_SHM_CELLS_MIN && h->ncells <= TW_SHM_CELLS_MAX &&
                  (h->ncells & (h->ncells - 1)) == 0);
    TW_FUZZ_CHECK(h->owner_local < h->nlocal);
    TW_FUZZ_CHECK(size == tw_shm_seg_size(h->nlocal, h->ncells));
    fz_rings_inside(want, size);
}

static void fz_seg(const uint8_t *data, size_t size)
{
    static const tw_shm_seg_id_t fixed = {
        .nlocal = 4, .ncells = 64, .owner_local = 2, .owner_pid = 1234, .key_crc = 0xdeadbeefu};
    tw_shm_seg_hdr_t claims;
    uint64_t mapped = 0;
    size_t n, alloc;
    void *base;

    if (size >= 8) {
        mapped = tw_get64(data);
        data += 8;
        size -= 8;
    }
    /* The header's own claims, as an expectation that can be met. */
    memset(&claims, 0, sizeof(claims));
    memcpy(&claims, data, size < sizeof(claims) ? size : sizeof(claims));
    tw_shm_seg_id_t own = {.nlocal = claims.nlocal,
                           .ncells = claims.ncells,
                           .owner_local = claims.owner_local,
                           .owner_pid = claims.owner_pid,
                           .key_crc = claims.key_crc};
    if (mapped == 0) {
        bool sane = own.ncells >= TW_SHM_CELLS_MIN && own.ncells <= TW_SHM_CELLS_MAX;
        mapped = sane ? tw_shm_seg_size(own.nlocal, own.ncells) : TW_SHM_HDR_SIZE;
    }
    /* Only the header page is ever read: map that much of the claimed size. */
    alloc = mapped < TW_SHM_HDR_SIZE ? (size_t)mapped : TW_SHM_HDR_SIZE;
    base = calloc(1, alloc > 0 ? alloc : 1);
    TW_FUZZ_CHECK(base != NULL);
    n = size < alloc ? size : alloc;
    memcpy(base, data, n);
    fz_seg_one(base, (size_t)mapped, &own);
    fz_seg_one(base, (size_t)mapped, &fixed);
    free(base);
}

static void fz_addr(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size > 0 ? size : 1), packed[TW_SHM_ADDR_LEN];
    tw_shm_addr_t a, b;
    const char *why = NULL;
    tw_status_t st;

    TW_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    memset(&a, 0xa5, sizeof(a));
    b = a;
    st = tw_shm_addr_parse(buf, size, &a, &why);
    TW_FUZZ_CHECK(st == TW_OK || st == TW_ERR_PROTOCOL);
    if (st != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        TW_FUZZ_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
        free(buf);
        return;
    }
    TW_FUZZ_CHECK(size == TW_SHM_ADDR_LEN);
    TW_FUZZ_CHECK(strnlen(a.seg, sizeof(a.seg)) < sizeof(a.seg) && a.seg[0] == '/');
    TW_FUZZ_CHECK(strnlen(a.node, sizeof(a.node)) < sizeof(a.node));
    tw_shm_addr_pack(&a, packed);
    TW_FUZZ_CHECK(memcmp(packed, buf, 20) == 0);
    TW_FUZZ_CHECK(tw_shm_addr_parse(packed, sizeof(packed), &b, NULL) == TW_OK);
    TW_FUZZ_CHECK(b.local_rank == a.local_rank && b.pid == a.pid && b.ncells == a.ncells &&
                  strcmp(b.seg, a.seg) == 0 && strcmp(b.node, a.node) == 0);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    switch (data[0] % 3) {
    case 0:
        fz_cell(data + 1, size - 1);
        break;
    case 1:
        fz_seg(data + 1, size - 1);
        break;
    default:
        fz_addr(data + 1, size - 1);
        break;
    }
    return 0;
}
