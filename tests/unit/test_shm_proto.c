/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * shm cross-process format (tw_shm_proto.h); tests/fuzz/fuzz_shm_cell.c
 * fuzzes the same checks. One ctest entry per case (unit/shm.cmake):
 *
 *   layout  the layout both sides compute;
 *   seg     a formatted segment and every rejection of its header check;
 *   cells   the cell parser on every type and every rejection;
 *   addr    the address: its bytes, a round trip, every rejection.
 */
#include <stdlib.h>
#include <string.h>

#include "transports/shm/tw_shm_proto.h"
#include "tw_test.h"

/* ---- layout ------------------------------------------------------------ */

static void test_layout(void)
{
    char *base = (char *)0x100000;

    TWT_EQ(TW_SHM_CELL_SIZE, 8512);
    TWT_EQ(TW_SHM_CELL_DATA, 8448);
    TWT_EQ(tw_shm_ring_stride(64), 128 + 64 * 8512);
    TWT_EQ(tw_shm_seg_size(2, 64), 4096 + 128 + 64 * 8512);
    TWT_EQ(tw_shm_seg_size(1, 4), 4096 + 128 + 4 * 8512); /* room for one ring anyway */
    TWT_EQ(tw_shm_seg_size(5, 4096), 4096 + 4 * (128 + 4096ull * 8512));
    /* Receiver 1: senders 0 and 2 have rings 0 and 1; receiver 0: sender 1 ring 0. */
    TWT_CHECK((char *)tw_shm_ring(base, 64, 0, 1) == base + 4096);
    TWT_CHECK((char *)tw_shm_ring(base, 64, 2, 1) == base + 4096 + tw_shm_ring_stride(64));
    TWT_CHECK((char *)tw_shm_ring(base, 64, 1, 0) == base + 4096);
    TWT_CHECK((char *)tw_shm_ring(base, 64, 3, 1) == base + 4096 + 2 * tw_shm_ring_stride(64));
    /* Positions wrap over the cells. */
    tw_shm_ring_hdr_t *r = tw_shm_ring(base, 64, 0, 1);
    TWT_CHECK((char *)tw_shm_cell(r, 64, 0) == base + 4096 + 128);
    TWT_CHECK(tw_shm_cell(r, 64, 65) == tw_shm_cell(r, 64, 1));
    TWT_CHECK((char *)tw_shm_cell(r, 64, 63) + TW_SHM_CELL_SIZE ==
              (char *)tw_shm_ring(base, 64, 2, 1));
}

/* ---- segment header ---------------------------------------------------- */

static const tw_shm_seg_id_t seg_id = {
    .nlocal = 3, .ncells = 8, .owner_local = 1, .owner_pid = 4242, .key_crc = 0x12345678u};

static void expect_bad_seg(const void *base, size_t size, const tw_shm_seg_id_t *want)
{
    const char *why = NULL;

    TWT_EQ(tw_shm_seg_check(base, size, want, &why), TW_ERR_PROTOCOL);
    TWT_CHECK(why != NULL && why[0] != '\0');
    TWT_EQ(tw_shm_seg_check(base, size, want, NULL), TW_ERR_PROTOCOL);
}

static void test_seg(void)
{
    size_t size = tw_shm_seg_size(seg_id.nlocal, seg_id.ncells);
    unsigned char *base = aligned_alloc(64, size);
    unsigned char *copy = aligned_alloc(64, size);
    tw_shm_seg_hdr_t *h = (tw_shm_seg_hdr_t *)copy;
    const char *why = NULL;

    TWT_CHECK(base != NULL && copy != NULL);
    memset(base, 0xee, size);
    tw_shm_seg_format(base, &seg_id);
    TWT_EQ(tw_shm_seg_check(base, size, &seg_id, &why), TW_OK);
    TWT_CHECK(why == NULL);

    /* The header, and the owner's inbound rings (from 0 and 2) empty. */
    const tw_shm_seg_hdr_t *fh = (const tw_shm_seg_hdr_t *)base;
    TWT_CHECK(fh->magic == TW_SHM_MAGIC);
    TWT_EQ(fh->version, TW_SHM_VERSION);
    TWT_EQ(fh->reserved[0] | fh->reserved[1] | fh->reserved[2], 0);
    TWT_EQ(fh->cell_size, TW_SHM_CELL_SIZE);
    TWT_EQ(atomic_load(&fh->state), TW_SHM_SEG_LIVE);
    TWT_EQ(atomic_load(&fh->sleeping), 0);
    for (unsigned from = 0; from < 3; from++) {
        if (from == seg_id.owner_local) {
            continue;
        }
        tw_shm_ring_hdr_t *r = tw_shm_ring(base, seg_id.ncells, from, seg_id.owner_local);
        TWT_EQ(atomic_load(&r->tail), 0);
        TWT_EQ(atomic_load(&r->want_wake), 0);
        for (unsigned i = 0; i < seg_id.ncells; i++) {
            TWT_EQ(atomic_load(&tw_shm_cell(r, seg_id.ncells, i)->seq), i);
        }
    }

    /* Every field a peer could get wrong, one at a time. */
    for (int k = 0; k < 14; k++) {
        tw_shm_seg_id_t want = seg_id;
        size_t sz = size;
        memcpy(copy, base, size);
        switch (k) {
        case 0:
            h->magic ^= 1;
            break;
        case 1:
            h->version = TW_SHM_VERSION + 1;
            break;
        case 2:
            h->reserved[2] = 1;
            break;
        case 3:
            h->cell_size = TW_SHM_CELL_SIZE - 64;
            break;
        case 4:
            h->ncells = 2;
            want.ncells = 2;
            break; /* below the range */
        case 5:
            h->ncells = 8192;
            want.ncells = 8192;
            break; /* above it */
        case 6:
            h->ncells = 12;
            want.ncells = 12;
            break; /* not a power of two */
        case 7:
            h->ncells = 16;
            break; /* not ours */
        case 8:
            h->owner_local = 3;
            want.owner_local = 3;
            break;
        case 9:
            h->owner_local = 2;
            break;
        case 10:
            h->owner_pid = 4243;
            break;
        case 11:
            h->key_crc ^= 0x100;
            break;
        case 12:
            h->nlocal = 4;
            break;
        default:
            sz = size - 1;
            break;
        }
        expect_bad_seg(copy, sz, &want);
    }
    /* The mapping must hold the rings the header describes, and the header. */
    expect_bad_seg(base, size + 4096, &seg_id);
    expect_bad_seg(base, TW_SHM_HDR_SIZE - 1, &seg_id);
    expect_bad_seg(base, 0, &seg_id);
    /* More ranks than the header says, consistently: still refused by size. */
    tw_shm_seg_id_t big = seg_id;
    big.nlocal = 4;
    memcpy(copy, base, size);
    h->nlocal = 4;
    expect_bad_seg(copy, size, &big);
    TWT_EQ(tw_shm_seg_check(copy, tw_shm_seg_size(4, seg_id.ncells), &big, NULL), TW_OK);
    free(base);
    free(copy);
}

/* ---- cells -------------------------------------------------------------- */

static const struct cell_case {
    uint8_t type, am_id;
    uint16_t hdr_len;
    uint32_t len;
    uint64_t a0, a1;
    bool ok;
} cell_cases[] = {
    {TW_SHM_EAGER, 7, 0, 0, 0, 0, true},
    {TW_SHM_EAGER, 255, 16, 16, 0, 0, true},
    {TW_SHM_EAGER, 1, 100, 8448, 0, 0, true}, /* exactly the cell */
    {TW_SHM_EAGER, 1, 0, 8449, 0, 0, false},  /* one byte beyond it */
    {TW_SHM_EAGER, 1, 0, UINT32_MAX, 0, 0, false},
    {TW_SHM_EAGER, 1, 17, 16, 0, 0, false}, /* header beyond the bytes */
    {TW_SHM_EAGER, 1, 65535, 8448, 0, 0, false},
    {TW_SHM_RTS, 3, 40, 40, 0x7f0000001000, 1ull << 40, true},
    {TW_SHM_RTS, 3, 0, 0, 0, 0, true},
    {TW_SHM_RTS, 3, 40, 41, 0, 1, false},                /* payload in an RTS */
    {TW_SHM_RTS, 3, 40, 40, 0, (1ull << 40) + 1, false}, /* beyond TW_SHM_MAX_MSG */
    {TW_SHM_RTS, 3, 9000, 9000, 0, 1, false},
    {TW_SHM_CTS, 0, 0, 0, 4096, 1, true},
    {TW_SHM_CTS, 0, 0, 1, 4096, 1, false},
    {TW_SHM_FIN, 0, 0, 0, 0, 0, true},
    {TW_SHM_FIN, 0, 1, 1, 0, 0, false},
    {TW_SHM_DATA, 0, 0, 8448, 0, 5, true},
    {TW_SHM_DATA, 0, 0, 8449, 0, 5, false},
    {TW_SHM_DATA, 0, 1, 8, 0, 5, false}, /* a header in DATA */
    {0, 0, 0, 0, 0, 0, false},
    {TW_SHM_TYPE_MAX, 0, 0, 0, 0, 0, false},
    {255, 0, 0, 0, 0, 0, false},
};

static void test_cells(void)
{
    tw_shm_cell_t *c = aligned_alloc(64, TW_SHM_CELL_SIZE);

    TWT_CHECK(c != NULL);
    for (size_t i = 0; i < TWT_ARRAY_SIZE(cell_cases); i++) {
        const struct cell_case *k = &cell_cases[i];
        tw_shm_cell_view_t v, untouched;
        const char *why = NULL;
        tw_status_t st;

        memset(c, 0x5a, TW_SHM_CELL_SIZE);
        atomic_init(&c->seq, 1);
        c->type = k->type;
        c->am_id = k->am_id;
        c->hdr_len = k->hdr_len;
        c->len = k->len;
        c->a0 = k->a0;
        c->a1 = k->a1;
        c->a2 = 0xabcdef0123456789ull;
        memset(&v, 0xa5, sizeof(v));
        untouched = v;
        st = tw_shm_cell_parse(c, &v, &why);
        TWT_CHECKF(st == (k->ok ? TW_OK : TW_ERR_PROTOCOL), "case %zu: %s", i, tw_strerror(st));
        if (!k->ok) {
            TWT_CHECKF(why != NULL && why[0] != '\0', "case %zu", i);
            TWT_CHECKF(memcmp(&v, &untouched, sizeof(v)) == 0, "case %zu wrote its output", i);
            TWT_EQ(tw_shm_cell_parse(c, &v, NULL), TW_ERR_PROTOCOL);
            continue;
        }
        TWT_CHECK(why == NULL);
        TWT_EQ(v.type, k->type);
        TWT_EQ(v.am_id, k->am_id);
        TWT_EQ(v.hdr_len, k->hdr_len);
        TWT_EQ(v.len, k->len);
        if (k->type == TW_SHM_EAGER) {
            /* Its bytes start where the other types keep a0..a2, which
             * it neither has nor reads (the cell holds 0x5a there). */
            TWT_CHECK(v.a0 == 0 && v.a1 == 0 && v.a2 == 0);
            TWT_CHECK(v.data == (const unsigned char *)c + TW_SHM_EAGER_OFF);
            TWT_CHECK(v.data + v.len <= (const unsigned char *)c + TW_SHM_CELL_SIZE);
        } else {
            TWT_CHECK(v.a0 == k->a0 && v.a1 == k->a1 && v.a2 == 0xabcdef0123456789ull);
            TWT_CHECK(v.data == c->data);
        }
    }
    TWT_CHECK(strcmp(tw_shm_cell_type_name(TW_SHM_DATA), "DATA") == 0);
    TWT_CHECK(strcmp(tw_shm_cell_type_name(TW_SHM_EAGER), "EAGER") == 0);
    TWT_CHECK(strcmp(tw_shm_cell_type_name(0), "?") == 0);
    TWT_CHECK(strcmp(tw_shm_cell_type_name(200), "?") == 0);
    free(c);
    printf("%zu cells parsed\n", TWT_ARRAY_SIZE(cell_cases));
}

/* ---- address ------------------------------------------------------------- */

static void expect_bad_addr(const uint8_t *buf, size_t len)
{
    tw_shm_addr_t a, untouched;
    const char *why = NULL;

    memset(&a, 0xa5, sizeof(a));
    untouched = a;
    TWT_EQ(tw_shm_addr_parse(buf, len, &a, &why), TW_ERR_PROTOCOL);
    TWT_CHECK(why != NULL && why[0] != '\0');
    TWT_CHECK(memcmp(&a, &untouched, sizeof(a)) == 0);
}

static void test_addr(void)
{
    tw_shm_addr_t a = {.local_rank = 3, .pid = 0x01020304u, .ncells = 64}, b;
    uint8_t buf[TW_SHM_ADDR_LEN], bad[TW_SHM_ADDR_LEN + 1];
    static const uint8_t head[24] = {0x54, 0x57, 0x53, 0x41, TW_SHM_VERSION, 0,    0,  0, 3, 0,
                                     0,    0,    0x04, 0x03, 0x02,           0x01, 64, 0, 0, 0,
                                     '/',  't',  'w',  '-'};
    const char *why = NULL;

    TWT_EQ(TW_SHM_ADDR_LEN, 148);
    snprintf(a.seg, sizeof(a.seg), "/tw-0000abcd-0123456789abcdef");
    snprintf(a.node, sizeof(a.node), "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab");
    memset(buf, 0xff, sizeof(buf));
    tw_shm_addr_pack(&a, buf);
    TWT_CHECK(memcmp(buf, head, sizeof(head)) == 0);
    TWT_EQ(buf[20 + strlen(a.seg)], 0);
    TWT_EQ(buf[TW_SHM_ADDR_LEN - 1], 0);
    TWT_CHECK(memcmp(buf + 20 + 64, a.node, strlen(a.node)) == 0);
    TWT_EQ(tw_shm_addr_parse(buf, sizeof(buf), &b, &why), TW_OK);
    TWT_CHECK(why == NULL);
    TWT_CHECK(b.local_rank == 3 && b.pid == 0x01020304u && b.ncells == 64);
    TWT_CHECK(strcmp(b.seg, a.seg) == 0 && strcmp(b.node, a.node) == 0);

    /* Strings too long for their field are cut, still terminated. */
    memset(a.node, 'n', sizeof(a.node));
    tw_shm_addr_pack(&a, buf);
    TWT_EQ(tw_shm_addr_parse(buf, sizeof(buf), &b, NULL), TW_OK);
    TWT_EQ(strlen(b.node), TW_SHM_NODE_MAX - 1);

    /* Every rejection. */
    expect_bad_addr(buf, sizeof(buf) - 1);
    memcpy(bad, buf, sizeof(buf));
    bad[TW_SHM_ADDR_LEN] = 0;
    expect_bad_addr(bad, sizeof(bad));
    expect_bad_addr(buf, 0);
    for (int k = 0; k < 7; k++) {
        memcpy(bad, buf, sizeof(buf));
        switch (k) {
        case 0:
            bad[0] ^= 1;
            break; /* magic */
        case 1:
            bad[4] = TW_SHM_VERSION + 1;
            break; /* version */
        case 2:
            bad[7] = 1;
            break; /* reserved */
        case 3:
            memset(bad + 20, 'x', TW_SEG_NAME_MAX);
            break; /* seg not terminated */
        case 4:
            memset(bad + 20 + 64, 'x', 64);
            break; /* node not terminated */
        case 5:
            bad[20] = 't';
            break; /* seg not "/..." */
        default:
            memset(bad + 20, 0, TW_SEG_NAME_MAX);
            break; /* empty seg */
        }
        expect_bad_addr(bad, TW_SHM_ADDR_LEN);
    }
}

static const twt_case_t cases[] = {
    {"layout", test_layout},
    {"seg", test_seg},
    {"cells", test_cells},
    {"addr", test_addr},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
