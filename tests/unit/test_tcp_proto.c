/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP wire format. The known answers (vectors, proofs, packed bytes) come
 * from tests/fuzz/gen_corpus.py, an independent Python reading of the
 * format; `gen_corpus.py --vectors` prints them. One ctest entry per case
 * (unit/tcp.cmake):
 *
 *   siphash         SipHash-2-4 against the reference vectors; alignment,
 *                   every key and message bit;
 *   hs_round_trip   handshake pack/parse: the known bytes, round trips;
 *   hs_reject       every rejection of a handshake;
 *   hs_proof        the handshake proofs: known answers, each input counts,
 *                   a whole exchange;
 *   frame           frame header pack/parse, every rejection, the limits;
 *   frame_rndv      the rendezvous frames (RTS, CTS, DATA, DONE): the cookie
 *                   leads their header bytes, and their own limits;
 *   key_parse       the job-key parser;
 *   addr_good       address blob pack/parse round trips;
 *   addr_reject     every rejection of an address blob, nothing read past
 *                   its length;
 *   contract_edges  NULL with length 0, outputs untouched on rejection, an
 *                   unknown wanted type.
 */
#include <stdint.h>
#include <string.h>

#include "core/tw_siphash.h"
#include "transports/tcp/tw_tcp_proto.h"
#include "tw_test.h"

/* a == b for 64-bit unsigned values, printed in hex on failure. */
#define EQ64(a, b)                                                                     \
    do {                                                                               \
        uint64_t eq_a_ = (a), eq_b_ = (b);                                             \
        TWT_CHECKF(eq_a_ == eq_b_, "0x%016" PRIx64 " != 0x%016" PRIx64, eq_a_, eq_b_); \
    } while (0)

/* SipHash-2-4, key 00..0f, message 00..n-1: the reference implementation's
 * vectors.h (vectors_sip64), recomputed by gen_corpus.py. */
static const uint64_t sip_vectors[64] = {
    0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
    0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
    0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
    0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
    0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
    0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
    0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
    0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
    0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
    0x314dffbe0815a3b4ull, 0x027990f029623981ull, 0xcadcd4e59ef40c4dull, 0x9abfd8766a33735cull,
    0x0e3ea96b5304a7d0ull, 0xad0c42d6fc585992ull, 0x187306c89bc215a9ull, 0xd4a60abcf3792b95ull,
    0xf935451de4f21df2ull, 0xa9538f0419755787ull, 0xdb9acddff56ca510ull, 0xd06c98cd5c0975ebull,
    0xe612a3cb9ecba951ull, 0xc766e62cfcadaf96ull, 0xee64435a9752fe72ull, 0xa192d576b245165aull,
    0x0a8787bf8ecb74b2ull, 0x81b3e73d20b49b6full, 0x7fa8220ba3b2eceaull, 0x245731c13ca42499ull,
    0xb78dbfaf3a8d83bdull, 0xea1ad565322a1a0bull, 0x60e61c23a3795013ull, 0x6606d7e446282b93ull,
    0x6ca4ecb15c5f91e1ull, 0x9f626da15c9625f3ull, 0xe51b38608ef25f57ull, 0x958a324ceb064572ull,
};

/* The handshake of gen_corpus.py: acceptor rank 3, connector rank 5, job
 * size 8, key 00..0f, nonce_c 10..1f, nonce_a a0..af. */
#define HS_A_RANK 3u
#define HS_C_RANK 5u
#define HS_SIZE   8u
#define PROOF_A   0xfb74098d695efc7dull
#define PROOF_C   0xdd15e014ad221420ull

static const uint8_t hello_bytes[TW_TCP_HS_LEN] = {
    0x54, 0x57, 0x54, 0x43, 0x02, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

/* Fixed for every case: key 00..0f, nonce_c 10..1f, nonce_a a0..af. */
static const uint8_t key[16] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
static const uint8_t nonce_c[16] = {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
                                    0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f};
static const uint8_t nonce_a[16] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
                                    0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};

static void fill_seq(uint8_t *p, size_t n, uint8_t first)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(first + i);
    }
}

/* ---- SipHash-2-4 ------------------------------------------------------ */

static void test_siphash_vectors(void)
{
    uint8_t k[16], msg[64 + 8];
    /* Messages end where this block ends: ASan sees any read past them. */
    uint8_t *block = malloc(64);

    TWT_CHECK(block != NULL);
    fill_seq(k, sizeof(k), 0);
    TWT_CHECK(memcmp(k, key, sizeof(k)) == 0); /* the other cases' key */
    for (size_t n = 0; n < 64; n++) {
        uint8_t *m = block + 64 - n;
        fill_seq(m, n, 0);
        TWT_CHECKF(tw_siphash24(k, m, n) == sip_vectors[n], "n=%zu: 0x%016" PRIx64, n,
                   tw_siphash24(k, m, n));
        /* Alignment does not matter. */
        for (size_t off = 1; off < 8; off++) {
            fill_seq(msg + off, n, 0);
            EQ64(tw_siphash24(k, msg + off, n), sip_vectors[n]);
        }
    }
    free(block);
    /* The two most quoted, spelled out. */
    EQ64(tw_siphash24(k, msg, 0), 0x726fdb47dd0e0e31ull);
    fill_seq(msg, 15, 0);
    EQ64(tw_siphash24(k, msg, 15), 0xa129ca6149be45e5ull);

    /* Every key bit and every message bit matter. */
    fill_seq(msg, 64, 0);
    for (int bit = 0; bit < 128; bit++) {
        k[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        TWT_CHECKF(tw_siphash24(k, msg, 15) != sip_vectors[15], "key bit %d", bit);
        k[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    for (int bit = 0; bit < 15 * 8; bit++) {
        msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        TWT_CHECKF(tw_siphash24(k, msg, 15) != sip_vectors[15], "message bit %d", bit);
        msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    EQ64(tw_siphash24(k, msg, 15), sip_vectors[15]);
}

/* ---- handshake ---------------------------------------------------------- */

static tw_tcp_hs_t hs_make(uint8_t type)
{
    tw_tcp_hs_t hs;

    memset(&hs, 0, sizeof(hs));
    hs.type = type;
    hs.size = HS_SIZE;
    if (type == TW_TCP_HS_WELCOME) {
        hs.rank = HS_A_RANK;
        memcpy(hs.nonce, nonce_a, 16);
        hs.proof = PROOF_A;
    } else {
        hs.rank = HS_C_RANK;
        memcpy(hs.nonce, nonce_c, 16);
        hs.proof = type == TW_TCP_HS_PROVE ? PROOF_C : 0;
    }
    return hs;
}

static void hs_check_eq(const tw_tcp_hs_t *a, const tw_tcp_hs_t *b)
{
    TWT_EQ(a->type, b->type);
    TWT_EQ(a->rank, b->rank);
    TWT_EQ(a->size, b->size);
    TWT_CHECK(memcmp(a->nonce, b->nonce, 16) == 0);
    EQ64(a->proof, b->proof);
}

/* Parse @p buf (48 bytes) as @p want in a job of @p job_size and expect
 * TW_ERR_PROTOCOL with a reason. */
static void hs_reject(const uint8_t *buf, uint8_t want, uint32_t job_size, const char *what)
{
    tw_tcp_hs_t hs;
    const char *why = NULL;
    tw_status_t st = tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, want, job_size, &hs, &why);

    TWT_CHECKF(st == TW_ERR_PROTOCOL, "%s: status %d", what, (int)st);
    TWT_CHECKF(why != NULL && why[0] != '\0', "%s: no reason", what);
    /* A NULL @p why is allowed and changes nothing. */
    TWT_EQ(tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, want, job_size, &hs, NULL), TW_ERR_PROTOCOL);
}

static void test_hs_round_trip(void)
{
    static const uint8_t types[] = {TW_TCP_HS_HELLO, TW_TCP_HS_WELCOME, TW_TCP_HS_PROVE};
    uint8_t buf[TW_TCP_HS_LEN + 16];

    for (size_t i = 0; i < TWT_ARRAY_SIZE(types); i++) {
        tw_tcp_hs_t in = hs_make(types[i]), out;
        const char *why = NULL;

        memset(buf, 0xee, sizeof(buf));
        tw_tcp_hs_pack(&in, buf);
        TWT_EQ(buf[TW_TCP_HS_LEN], 0xee); /* writes 48 bytes, no more */
        TWT_EQ(buf[6], types[i]);
        TWT_EQ(tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, types[i], HS_SIZE, &out, &why), TW_OK);
        hs_check_eq(&in, &out);
        /* Bytes after the message belong to the next read. */
        memset(&out, 0, sizeof(out));
        TWT_EQ(tw_tcp_hs_parse(buf, sizeof(buf), types[i], HS_SIZE, &out, NULL), TW_OK);
        hs_check_eq(&in, &out);

        /* Any prefix is TW_ERR_AGAIN and leaves the output alone. */
        for (size_t len = 0; len < TW_TCP_HS_LEN; len++) {
            memset(&out, 0x5a, sizeof(out));
            why = NULL;
            TWT_EQ(tw_tcp_hs_parse(buf, len, types[i], HS_SIZE, &out, &why), TW_ERR_AGAIN);
            TWT_EQ(out.rank, 0x5a5a5a5au);
        }
    }

    /* The layout, byte by byte, as gen_corpus.py writes it. */
    tw_tcp_hs_t hello = hs_make(TW_TCP_HS_HELLO);
    tw_tcp_hs_pack(&hello, buf);
    TWT_CHECK(memcmp(buf, hello_bytes, TW_TCP_HS_LEN) == 0);

    /* Edges that are valid: rank size-1, a 1-rank job, the largest job. */
    tw_tcp_hs_t e = hs_make(TW_TCP_HS_WELCOME), out;
    e.rank = HS_SIZE - 1;
    tw_tcp_hs_pack(&e, buf);
    TWT_EQ(tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, TW_TCP_HS_WELCOME, HS_SIZE, &out, NULL), TW_OK);
    hs_check_eq(&e, &out);
    e.rank = 0;
    e.size = 1;
    e.proof = UINT64_MAX;
    tw_tcp_hs_pack(&e, buf);
    TWT_EQ(tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, TW_TCP_HS_WELCOME, 1, &out, NULL), TW_OK);
    hs_check_eq(&e, &out);
    e.rank = UINT32_MAX - 1;
    e.size = UINT32_MAX;
    tw_tcp_hs_pack(&e, buf);
    TWT_EQ(tw_tcp_hs_parse(buf, TW_TCP_HS_LEN, TW_TCP_HS_WELCOME, UINT32_MAX, &out, NULL), TW_OK);
    hs_check_eq(&e, &out);
}

static void test_hs_reject(void)
{
    static const uint8_t types[] = {TW_TCP_HS_HELLO, TW_TCP_HS_WELCOME, TW_TCP_HS_PROVE};
    uint8_t good[TW_TCP_HS_LEN], buf[TW_TCP_HS_LEN];

    for (size_t i = 0; i < TWT_ARRAY_SIZE(types); i++) {
        uint8_t type = types[i];
        tw_tcp_hs_t hs = hs_make(type);

        tw_tcp_hs_pack(&hs, good);

        /* Magic (0..3), version (4..5), type (6), reserved (7, 40..47):
         * flipping any bit of them is refused. */
        static const int fixed[] = {0, 1, 2, 3, 4, 5, 6, 7, 40, 41, 42, 43, 44, 45, 46, 47};
        for (size_t k = 0; k < TWT_ARRAY_SIZE(fixed); k++) {
            for (int bit = 0; bit < 8; bit++) {
                char what[64];
                memcpy(buf, good, sizeof(buf));
                buf[fixed[k]] ^= (uint8_t)(1u << bit);
                snprintf(what, sizeof(what), "type %u byte %d bit %d", type, fixed[k], bit);
                hs_reject(buf, type, HS_SIZE, what);
            }
        }
        /* Whole-field values. */
        memcpy(buf, good, sizeof(buf));
        memcpy(buf, "TWTD", 4);
        hs_reject(buf, type, HS_SIZE, "wrong magic");
        memcpy(buf, good, sizeof(buf));
        buf[4] = 0;
        hs_reject(buf, type, HS_SIZE, "version 0");
        buf[4] = 1;
        hs_reject(buf, type, HS_SIZE, "version 1 (before the rendezvous frames)");
        buf[4] = 3;
        hs_reject(buf, type, HS_SIZE, "version 3");
        buf[4] = 2;
        buf[5] = 1;
        hs_reject(buf, type, HS_SIZE, "version 0x102");

        /* Another message type than the one expected. */
        for (unsigned want = 0; want < 256; want++) {
            if (want != type) {
                hs_reject(good, (uint8_t)want, HS_SIZE, "unexpected type");
            }
        }
        memcpy(buf, good, sizeof(buf));
        buf[6] = 0;
        hs_reject(buf, type, HS_SIZE, "type byte 0");
        buf[6] = 0xff;
        hs_reject(buf, type, HS_SIZE, "type byte 255");

        /* Size other than the job's: another job. */
        hs_reject(good, type, HS_SIZE - 1, "size mismatch (smaller job)");
        hs_reject(good, type, HS_SIZE + 1, "size mismatch (larger job)");
        hs_reject(good, type, 0, "size mismatch (job size 0)");
        hs_reject(good, type, UINT32_MAX, "size mismatch (largest job)");
        for (int bit = 0; bit < 32; bit++) {
            hs_reject(good, type, HS_SIZE ^ (1u << bit), "size mismatch (one bit)");
        }

        /* Rank outside [0, size). */
        static const uint32_t bad_ranks[] = {HS_SIZE, HS_SIZE + 1, INT32_MAX, UINT32_MAX};
        for (size_t k = 0; k < TWT_ARRAY_SIZE(bad_ranks); k++) {
            tw_tcp_hs_t b = hs;
            b.rank = bad_ranks[k];
            tw_tcp_hs_pack(&b, buf);
            hs_reject(buf, type, HS_SIZE, "rank >= size");
        }
        /* A zero-size job has no valid rank. */
        tw_tcp_hs_t z = hs;
        z.rank = 0;
        z.size = 0;
        tw_tcp_hs_pack(&z, buf);
        hs_reject(buf, type, 0, "size 0");

        /* Bytes that are not a handshake at all. */
        memset(buf, 0, sizeof(buf));
        hs_reject(buf, type, HS_SIZE, "zeros");
        memset(buf, 0xff, sizeof(buf));
        hs_reject(buf, type, HS_SIZE, "ones");
    }

    /* HELLO must not carry a proof (it has nothing to prove yet). */
    static const uint64_t proofs[] = {1, PROOF_C, 1ull << 63, UINT64_MAX};
    for (size_t k = 0; k < TWT_ARRAY_SIZE(proofs); k++) {
        tw_tcp_hs_t h = hs_make(TW_TCP_HS_HELLO);
        h.proof = proofs[k];
        tw_tcp_hs_pack(&h, buf);
        hs_reject(buf, TW_TCP_HS_HELLO, HS_SIZE, "HELLO with proof");
    }
}

/* ---- proofs ------------------------------------------------------------- */

static void test_hs_proof(void)
{
    uint64_t pa = tw_tcp_hs_proof(key, 'A', nonce_c, nonce_a, HS_A_RANK, HS_C_RANK);
    uint64_t pc = tw_tcp_hs_proof(key, 'C', nonce_a, nonce_c, HS_A_RANK, HS_C_RANK);
    uint8_t k2[16], n2[16];

    /* Known answers: SipHash(key, role | their nonce | my nonce | a | c). */
    EQ64(pa, PROOF_A);
    EQ64(pc, PROOF_C);
    /* Same inputs, same proof. */
    EQ64(tw_tcp_hs_proof(key, 'A', nonce_c, nonce_a, HS_A_RANK, HS_C_RANK), pa);
    /* The two roles never prove alike, even over the same nonces. */
    TWT_CHECK(pa != pc);
    TWT_CHECK(tw_tcp_hs_proof(key, 'C', nonce_c, nonce_a, HS_A_RANK, HS_C_RANK) != pa);
    /* Each input counts: key, either nonce (any byte), the order of the
     * nonces, either rank, their order. */
    for (int i = 0; i < 16; i++) {
        memcpy(k2, key, 16);
        k2[i] ^= 0x01;
        TWT_CHECKF(tw_tcp_hs_proof(k2, 'A', nonce_c, nonce_a, HS_A_RANK, HS_C_RANK) != pa,
                   "key byte %d", i);
        memcpy(n2, nonce_c, 16);
        n2[i] ^= 0x80;
        TWT_CHECKF(tw_tcp_hs_proof(key, 'A', n2, nonce_a, HS_A_RANK, HS_C_RANK) != pa,
                   "their nonce byte %d", i);
        memcpy(n2, nonce_a, 16);
        n2[i] ^= 0x80;
        TWT_CHECKF(tw_tcp_hs_proof(key, 'A', nonce_c, n2, HS_A_RANK, HS_C_RANK) != pa,
                   "my nonce byte %d", i);
    }
    TWT_CHECK(tw_tcp_hs_proof(key, 'A', nonce_a, nonce_c, HS_A_RANK, HS_C_RANK) != pa);
    TWT_CHECK(tw_tcp_hs_proof(key, 'A', nonce_c, nonce_a, HS_A_RANK + 1, HS_C_RANK) != pa);
    TWT_CHECK(tw_tcp_hs_proof(key, 'A', nonce_c, nonce_a, HS_A_RANK, HS_C_RANK + 1) != pa);
    TWT_CHECK(tw_tcp_hs_proof(key, 'A', nonce_c, nonce_a, HS_C_RANK, HS_A_RANK) != pa);
    TWT_CHECK(tw_tcp_hs_proof(key, 'A', nonce_c, nonce_a, HS_A_RANK | 0x100, HS_C_RANK) != pa);

    /* A whole exchange through pack and parse; a wrong key is caught by
     * both sides. */
    uint8_t wire[TW_TCP_HS_LEN], wrong[16];
    tw_tcp_hs_t m, got;
    memcpy(wrong, key, 16);
    wrong[15] ^= 0x40;

    m = hs_make(TW_TCP_HS_HELLO); /* C -> A */
    tw_tcp_hs_pack(&m, wire);
    TWT_EQ(tw_tcp_hs_parse(wire, sizeof(wire), TW_TCP_HS_HELLO, HS_SIZE, &got, NULL), TW_OK);
    m = hs_make(TW_TCP_HS_WELCOME); /* A -> C, proof over C's nonce */
    m.proof = tw_tcp_hs_proof(key, 'A', got.nonce, nonce_a, HS_A_RANK, got.rank);
    tw_tcp_hs_pack(&m, wire);
    TWT_EQ(tw_tcp_hs_parse(wire, sizeof(wire), TW_TCP_HS_WELCOME, HS_SIZE, &got, NULL), TW_OK);
    EQ64(got.proof, tw_tcp_hs_proof(key, 'A', nonce_c, got.nonce, got.rank, HS_C_RANK));
    TWT_CHECK(got.proof != tw_tcp_hs_proof(wrong, 'A', nonce_c, got.nonce, got.rank, HS_C_RANK));
    m = hs_make(TW_TCP_HS_PROVE); /* C -> A, proof over A's nonce */
    m.proof = tw_tcp_hs_proof(key, 'C', got.nonce, nonce_c, got.rank, HS_C_RANK);
    tw_tcp_hs_pack(&m, wire);
    TWT_EQ(tw_tcp_hs_parse(wire, sizeof(wire), TW_TCP_HS_PROVE, HS_SIZE, &got, NULL), TW_OK);
    EQ64(got.proof, tw_tcp_hs_proof(key, 'C', nonce_a, got.nonce, HS_A_RANK, got.rank));
    EQ64(got.proof, PROOF_C);
    TWT_CHECK(got.proof != tw_tcp_hs_proof(wrong, 'C', nonce_a, got.nonce, HS_A_RANK, got.rank));
    /* A replayed PROVE from another exchange (other acceptor nonce) fails. */
    memcpy(n2, nonce_a, 16);
    n2[0] ^= 1;
    TWT_CHECK(got.proof != tw_tcp_hs_proof(key, 'C', n2, got.nonce, HS_A_RANK, got.rank));
}

/* ---- frame header ------------------------------------------------------- */

static void frame_reject(const uint8_t *buf, uint32_t max_hdr, uint64_t max_len, const char *what)
{
    tw_tcp_frame_t f;
    const char *why = NULL;
    tw_status_t st = tw_tcp_frame_parse(buf, TW_TCP_FRAME_LEN, max_hdr, max_len, &f, &why);

    TWT_CHECKF(st == TW_ERR_PROTOCOL, "%s: status %d", what, (int)st);
    TWT_CHECKF(why != NULL && why[0] != '\0', "%s: no reason", what);
    TWT_EQ(tw_tcp_frame_parse(buf, TW_TCP_FRAME_LEN, max_hdr, max_len, &f, NULL), TW_ERR_PROTOCOL);
}

static tw_tcp_frame_t frame_make(uint8_t type, uint8_t am_id, uint32_t hdr_len, uint64_t len)
{
    tw_tcp_frame_t f;

    memset(&f, 0, sizeof(f));
    f.type = type;
    f.am_id = am_id;
    f.hdr_len = hdr_len;
    f.len = len;
    return f;
}

static void frame_accept(const tw_tcp_frame_t *in, uint32_t max_hdr, uint64_t max_len)
{
    uint8_t buf[TW_TCP_FRAME_LEN + 8];
    tw_tcp_frame_t out;

    memset(buf, 0xee, sizeof(buf));
    tw_tcp_frame_pack(in, buf);
    TWT_EQ(buf[TW_TCP_FRAME_LEN], 0xee);
    memset(&out, 0x5a, sizeof(out));
    TWT_CHECKF(tw_tcp_frame_parse(buf, sizeof(buf), max_hdr, max_len, &out, NULL) == TW_OK,
               "type %u hdr_len %u len %" PRIu64, in->type, in->hdr_len, in->len);
    TWT_EQ(out.type, in->type);
    TWT_EQ(out.am_id, in->am_id);
    TWT_EQ(out.flags, 0);
    TWT_EQ(out.hdr_len, in->hdr_len);
    EQ64(out.len, in->len);
}

static void test_frame(void)
{
    const uint32_t mh = 256;
    const uint64_t ml = 1ull << 20;
    uint8_t buf[TW_TCP_FRAME_LEN];
    tw_tcp_frame_t f;

    /* Round trips, up to and at the limits. */
    f = frame_make(TW_TCP_FRAME_AM, 7, 24, 4096);
    frame_accept(&f, mh, ml);
    f = frame_make(TW_TCP_FRAME_AM, 0, 0, 0);
    frame_accept(&f, 0, 0);
    f = frame_make(TW_TCP_FRAME_AM, 255, mh, ml);
    frame_accept(&f, mh, ml);
    f = frame_make(TW_TCP_FRAME_AM, 1, UINT32_MAX, UINT64_MAX);
    frame_accept(&f, UINT32_MAX, UINT64_MAX);
    f = frame_make(TW_TCP_FRAME_AM, 1, 0, 1ull << 63);
    frame_accept(&f, 0, 1ull << 63);
    f = frame_make(TW_TCP_FRAME_FIN, 0, 0, 0);
    frame_accept(&f, mh, ml);
    frame_accept(&f, 0, 0);
    f = frame_make(TW_TCP_FRAME_PING, 0, 0, 0);
    frame_accept(&f, mh, ml);
    frame_accept(&f, 0, 0);

    /* The layout: version | type | am_id | flags | hdr_len LE | len LE. */
    static const uint8_t am_bytes[TW_TCP_FRAME_LEN] = {
        0x02, 0x01, 0x07, 0x00, 0x18, 0x00, 0x00, 0x00, 0x00, 0x10, 0, 0, 0, 0, 0, 0,
    };
    f = frame_make(TW_TCP_FRAME_AM, 7, 24, 4096);
    tw_tcp_frame_pack(&f, buf);
    TWT_CHECK(memcmp(buf, am_bytes, sizeof(buf)) == 0);

    /* Short reads are TW_ERR_AGAIN and leave the output alone. */
    for (size_t len = 0; len < TW_TCP_FRAME_LEN; len++) {
        tw_tcp_frame_t out;
        memset(&out, 0x5a, sizeof(out));
        TWT_EQ(tw_tcp_frame_parse(buf, len, mh, ml, &out, NULL), TW_ERR_AGAIN);
        EQ64(out.len, 0x5a5a5a5a5a5a5a5aull);
    }

    /* Header length above the limit. */
    f = frame_make(TW_TCP_FRAME_AM, 1, mh + 1, 0);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "hdr_len = max_hdr + 1");
    frame_reject(buf, 0, ml, "hdr_len with max_hdr 0");
    f.hdr_len = UINT32_MAX;
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, UINT32_MAX - 1, UINT64_MAX, "hdr_len UINT32_MAX");

    /* Payload length above the limit, including the ones that overflow a
     * signed or size_t computation. */
    static const uint64_t lens[] = {ml + 1,           1ull << 32,     (1ull << 63) - 1, 1ull << 63,
                                    (1ull << 63) + 1, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(lens); i++) {
        char what[64];
        f = frame_make(TW_TCP_FRAME_AM, 1, 0, lens[i]);
        tw_tcp_frame_pack(&f, buf);
        snprintf(what, sizeof(what), "len 0x%" PRIx64, lens[i]);
        frame_reject(buf, mh, ml, what);
        frame_reject(buf, mh, lens[i] - 1, what);
        frame_reject(buf, mh, 0, what);
    }
    f = frame_make(TW_TCP_FRAME_AM, 1, 0, 1ull << 63);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, UINT32_MAX, INT64_MAX, "len 2^63 over INT64_MAX");
    f = frame_make(TW_TCP_FRAME_AM, 1, 0, UINT64_MAX);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, UINT32_MAX, SIZE_MAX - 1, "len UINT64_MAX over SIZE_MAX - 1");

    /* FIN carries nothing: no header, no payload, no AM id. */
    f = frame_make(TW_TCP_FRAME_FIN, 0, 1, 0);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "FIN with hdr_len");
    f = frame_make(TW_TCP_FRAME_FIN, 0, 0, 1);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "FIN with len");
    f = frame_make(TW_TCP_FRAME_FIN, 0, 0, UINT64_MAX);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, UINT32_MAX, UINT64_MAX, "FIN with len UINT64_MAX");
    f = frame_make(TW_TCP_FRAME_FIN, 3, 0, 0);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "FIN with am_id");
    /* PING likewise. */
    f = frame_make(TW_TCP_FRAME_PING, 0, 1, 0);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "PING with hdr_len");
    f = frame_make(TW_TCP_FRAME_PING, 0, 0, 1ull << 63);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, UINT32_MAX, UINT64_MAX, "PING with len 2^63");
    f = frame_make(TW_TCP_FRAME_PING, 9, 0, 0);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "PING with am_id");

    /* Unknown type, flags, version. */
    for (unsigned t = 0; t < 256; t++) {
        if (t >= TW_TCP_FRAME_AM && t < TW_TCP_FRAME_NTYPES) {
            continue;
        }
        f = frame_make((uint8_t)t, 0, 0, 0);
        tw_tcp_frame_pack(&f, buf);
        frame_reject(buf, mh, ml, "unknown type");
    }
    for (int bit = 0; bit < 8; bit++) {
        f = frame_make(TW_TCP_FRAME_AM, 0, 0, 0);
        f.flags = (uint8_t)(1u << bit);
        tw_tcp_frame_pack(&f, buf);
        frame_reject(buf, mh, ml, "unknown flag (AM)");
        f.type = TW_TCP_FRAME_FIN;
        tw_tcp_frame_pack(&f, buf);
        frame_reject(buf, mh, ml, "unknown flag (FIN)");
    }
    f = frame_make(TW_TCP_FRAME_AM, 0, 0, 0);
    for (unsigned v = 0; v < 256; v++) {
        if (v == TW_TCP_VERSION) {
            continue;
        }
        tw_tcp_frame_pack(&f, buf);
        buf[0] = (uint8_t)v;
        frame_reject(buf, mh, ml, "unknown version");
    }
}

/* The rendezvous frames: a cookie leads their header bytes. */
static void test_frame_rndv(void)
{
    const uint32_t mh = 256, ck = TW_TCP_COOKIE_LEN;
    const uint64_t ml = 1ull << 30;
    uint8_t buf[TW_TCP_FRAME_LEN];
    tw_tcp_frame_t f;

    /* RTS: the limit is on the am header after the cookie; len is the
     * payload waiting at the sender, not in the stream. */
    f = frame_make(TW_TCP_FRAME_RTS, 7, ck + 24, ml);
    frame_accept(&f, mh, ml);
    TWT_EQ(tw_tcp_frame_am_hdr_len(&f), 24);
    EQ64(tw_tcp_frame_body_len(&f), ck + 24);
    f = frame_make(TW_TCP_FRAME_RTS, 255, ck + mh, 0);
    frame_accept(&f, mh, ml);
    f = frame_make(TW_TCP_FRAME_RTS, 1, ck, 1);
    frame_accept(&f, 0, 1);
    f = frame_make(TW_TCP_FRAME_RTS, 1, ck + mh + 1, 1);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "RTS am header = max_hdr + 1");
    f = frame_make(TW_TCP_FRAME_RTS, 1, ck - 1, 1);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "RTS shorter than its cookie");
    f = frame_make(TW_TCP_FRAME_RTS, 1, ck, ml + 1);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, mh, ml, "RTS len above the limit");
    /* CTS, DATA, DONE: exactly a cookie, no am id; DONE no length. */
    static const uint8_t types[] = {TW_TCP_FRAME_CTS, TW_TCP_FRAME_DATA, TW_TCP_FRAME_DONE};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(types); i++) {
        uint64_t len = types[i] == TW_TCP_FRAME_DONE ? 0 : ml;
        f = frame_make(types[i], 0, ck, len);
        frame_accept(&f, 0, ml);
        TWT_EQ(tw_tcp_frame_am_hdr_len(&f), 0);
        EQ64(tw_tcp_frame_body_len(&f), ck + (types[i] == TW_TCP_FRAME_DATA ? len : 0));
        static const uint32_t bad_hdr[] = {0, ck - 1, ck + 1, UINT32_MAX};
        for (size_t k = 0; k < TWT_ARRAY_SIZE(bad_hdr); k++) {
            f = frame_make(types[i], 0, bad_hdr[k], len);
            tw_tcp_frame_pack(&f, buf);
            frame_reject(buf, UINT32_MAX, UINT64_MAX, "rendezvous frame: hdr_len not a cookie");
        }
        f = frame_make(types[i], 3, ck, len);
        tw_tcp_frame_pack(&f, buf);
        frame_reject(buf, mh, ml, "rendezvous frame with an am_id");
        f = frame_make(types[i], 0, ck, ml + 1);
        tw_tcp_frame_pack(&f, buf);
        frame_reject(buf, mh, ml, "rendezvous frame: len above the limit");
    }
    f = frame_make(TW_TCP_FRAME_DONE, 0, ck, 1);
    tw_tcp_frame_pack(&f, buf);
    frame_reject(buf, UINT32_MAX, UINT64_MAX, "DONE with a length");
    /* AM and FIN: the body is header + payload, or nothing. */
    f = frame_make(TW_TCP_FRAME_AM, 7, 24, 4096);
    EQ64(tw_tcp_frame_body_len(&f), 24 + 4096);
    f = frame_make(TW_TCP_FRAME_FIN, 0, 0, 0);
    EQ64(tw_tcp_frame_body_len(&f), 0);
}

/* ---- job key ------------------------------------------------------------ */

static void test_key_parse(void)
{
    static const uint8_t want[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                     0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98};
    static const char *const good[] = {
        "001122334455667789abcdeffedcba98",
        "001122334455667789ABCDEFFEDCBA98",
        "001122334455667789aBcDeFfEdCbA98",
    };
    /* Neighbours of the hex ranges, and other strangers. */
    static const char not_hex[] = " -/:@G`gxX\n\xff";
    char s[40];
    uint8_t k[16];

    for (size_t i = 0; i < TWT_ARRAY_SIZE(good); i++) {
        TWT_EQ(strlen(good[i]), 32);
        memset(k, 0x5a, sizeof(k));
        TWT_CHECKF(tw_siphash_key_parse(good[i], k) == TW_OK, "%s", good[i]);
        TWT_CHECKF(memcmp(k, want, 16) == 0, "%s", good[i]);
    }
    TWT_EQ(tw_siphash_key_parse("000102030405060708090a0b0c0d0e0f", k), TW_OK);
    for (int i = 0; i < 16; i++) {
        TWT_EQ(k[i], i);
    }
    TWT_EQ(tw_siphash_key_parse("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", k), TW_OK);
    for (int i = 0; i < 16; i++) {
        TWT_EQ(k[i], 0xff);
    }

    /* Lengths other than 32: 0, 1, 31, 33, 34. */
    static const size_t lens[] = {0, 1, 31, 33, 34};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(lens); i++) {
        memset(s, 'a', lens[i]);
        s[lens[i]] = '\0';
        TWT_CHECKF(tw_siphash_key_parse(s, k) == TW_ERR_INVALID, "length %zu accepted", lens[i]);
    }
    /* One non-hex character anywhere. */
    for (size_t pos = 0; pos < 32; pos++) {
        for (size_t c = 0; c < sizeof(not_hex) - 1; c++) {
            memcpy(s, good[0], 33);
            s[pos] = not_hex[c];
            TWT_CHECKF(tw_siphash_key_parse(s, k) == TW_ERR_INVALID, "'%c' at %zu accepted",
                       not_hex[c], pos);
        }
    }
    /* "0x" prefix, spaces around, an embedded NUL (shortens the string). */
    TWT_EQ(tw_siphash_key_parse("0x001122334455667789abcdeffedcba98", k), TW_ERR_INVALID);
    TWT_EQ(tw_siphash_key_parse(" 001122334455667789abcdeffedcba98", k), TW_ERR_INVALID);
    TWT_EQ(tw_siphash_key_parse("001122334455667789abcdeffedcba98\n", k), TW_ERR_INVALID);
    memcpy(s, good[0], 33);
    s[20] = '\0';
    TWT_EQ(tw_siphash_key_parse(s, k), TW_ERR_INVALID);
    TWT_EQ(tw_siphash_key_parse(NULL, k), TW_ERR_INVALID);
}

/* ---- address blob -------------------------------------------------------- */

/* corpus/tcp_addr/v4 of gen_corpus.py: one lane, 127.0.0.1 port 0x1234,
 * progress threads, a 10 s timeout. */
static const uint8_t addr_v4_bytes[] = {
    0x54, 0x57, 0x54, 0x41, 0x01, 0x01, 0x01, 0x01, 0x10, 0x27, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x34, 0x12,
};

static tw_tcp_addr_blob_t addr_make(unsigned lanes, unsigned naddrs)
{
    tw_tcp_addr_blob_t b;

    memset(&b, 0, sizeof(b));
    b.lanes = (uint8_t)lanes;
    b.naddrs = (uint8_t)naddrs;
    b.flags = TW_TCP_ADDR_THREADS;
    b.timeout_ms = 10000;
    for (unsigned a = 0; a < naddrs; a++) {
        b.addrs[a].family = a % 2 == 0 ? 4 : 6;
        fill_seq(b.addrs[a].addr, b.addrs[a].family == 4 ? 4 : 16, (uint8_t)(10 + a));
        for (unsigned k = 0; k < lanes; k++) {
            b.addrs[a].ports[k] = (uint16_t)(1000 + 100 * a + k);
        }
    }
    return b;
}

static void addr_check_eq(const tw_tcp_addr_blob_t *a, const tw_tcp_addr_blob_t *b)
{
    TWT_EQ(a->lanes, b->lanes);
    TWT_EQ(a->naddrs, b->naddrs);
    TWT_EQ(a->flags, b->flags);
    TWT_EQ(a->timeout_ms, b->timeout_ms);
    for (unsigned i = 0; i < a->naddrs; i++) {
        TWT_EQ(a->addrs[i].family, b->addrs[i].family);
        TWT_CHECK(memcmp(a->addrs[i].addr, b->addrs[i].addr, 16) == 0);
        for (unsigned k = 0; k < a->lanes; k++) {
            TWT_EQ(a->addrs[i].ports[k], b->addrs[i].ports[k]);
        }
    }
}

/* Parse @p len bytes and expect TW_ERR_PROTOCOL with a reason, the output
 * untouched. */
static void addr_reject(const uint8_t *buf, size_t len, const char *what)
{
    tw_tcp_addr_blob_t b;
    const char *why = NULL;
    tw_status_t st;

    memset(&b, 0x5a, sizeof(b));
    st = tw_tcp_addr_blob_parse(buf, len, &b, &why);
    TWT_CHECKF(st == TW_ERR_PROTOCOL, "%s: status %d", what, (int)st);
    TWT_CHECKF(why != NULL && why[0] != '\0', "%s: no reason", what);
    TWT_CHECKF(b.lanes == 0x5a && b.timeout_ms == 0x5a5a5a5au, "%s: output written", what);
    TWT_EQ(tw_tcp_addr_blob_parse(buf, len, &b, NULL), TW_ERR_PROTOCOL);
}

static void test_addr_good(void)
{
    uint8_t buf[TW_TCP_ADDR_MAX + 8];
    tw_tcp_addr_blob_t in, out;
    size_t len = 0;

    /* The layout, byte by byte, as gen_corpus.py writes it. */
    in = addr_make(1, 1);
    in.addrs[0].addr[0] = 127;
    in.addrs[0].addr[1] = in.addrs[0].addr[2] = 0;
    in.addrs[0].addr[3] = 1;
    in.addrs[0].ports[0] = 0x1234;
    TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_OK);
    TWT_EQ(len, sizeof(addr_v4_bytes));
    TWT_CHECK(memcmp(buf, addr_v4_bytes, sizeof(addr_v4_bytes)) == 0);
    TWT_EQ(tw_tcp_addr_blob_parse(addr_v4_bytes, sizeof(addr_v4_bytes), &out, NULL), TW_OK);
    addr_check_eq(&in, &out);

    /* Every count from 1 to the largest round-trips, in exactly its length. */
    for (unsigned lanes = 1; lanes <= TW_TCP_MAX_LANES; lanes++) {
        for (unsigned naddrs = 1; naddrs <= TW_TCP_MAX_ADDRS; naddrs++) {
            in = addr_make(lanes, naddrs);
            in.flags = naddrs % 2 == 0 ? TW_TCP_ADDR_THREADS : 0;
            in.timeout_ms = lanes == 1 ? 0 : UINT32_MAX - naddrs;
            memset(buf, 0xee, sizeof(buf));
            TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_OK);
            TWT_EQ(len, tw_tcp_addr_blob_len(lanes, naddrs));
            TWT_EQ(len, TW_TCP_ADDR_HDR + naddrs * (TW_TCP_ADDR_ENTRY + 2 * lanes));
            TWT_EQ(buf[len], 0xee); /* writes len bytes, no more */
            TWT_CHECK(len <= TW_TCP_ADDR_MAX);
            memset(&out, 0, sizeof(out));
            TWT_EQ(tw_tcp_addr_blob_parse(buf, len, &out, NULL), TW_OK);
            addr_check_eq(&in, &out);
            /* A buffer of exactly the length packs; one byte less does not. */
            TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, len, &len), TW_OK);
            TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, len - 1, &len), TW_ERR_INVALID);
        }
    }
    TWT_EQ(tw_tcp_addr_blob_len(TW_TCP_MAX_LANES, TW_TCP_MAX_ADDRS), TW_TCP_ADDR_MAX);

    /* The packer refuses what the parser would. */
    static const struct {
        unsigned lanes, naddrs;
    } bad_counts[] = {{0, 1}, {1, 0}, {TW_TCP_MAX_LANES + 1, 1}, {1, TW_TCP_MAX_ADDRS + 1}};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(bad_counts); i++) {
        in = addr_make(1, 1);
        in.lanes = (uint8_t)bad_counts[i].lanes;
        in.naddrs = (uint8_t)bad_counts[i].naddrs;
        TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_ERR_INVALID);
    }
    in = addr_make(2, 2);
    in.flags = 0x80;
    TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_ERR_INVALID);
    in = addr_make(2, 2);
    in.addrs[1].family = 5;
    TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_ERR_INVALID);
    in = addr_make(2, 2);
    in.addrs[0].addr[15] = 1; /* IPv4 with a byte past its 4 */
    TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_ERR_INVALID);
    in = addr_make(2, 2);
    in.addrs[1].ports[1] = 0;
    TWT_EQ(tw_tcp_addr_blob_pack(&in, buf, sizeof(buf), &len), TW_ERR_INVALID);
}

static void test_addr_reject(void)
{
    tw_tcp_addr_blob_t in = addr_make(3, 2);
    uint8_t good[TW_TCP_ADDR_MAX + 1], buf[TW_TCP_ADDR_MAX + 1];
    size_t len = 0, entry = TW_TCP_ADDR_ENTRY + 2 * 3;

    TWT_EQ(tw_tcp_addr_blob_pack(&in, good, sizeof(good), &len), TW_OK);

    /* Truncated: every prefix, header or entry. */
    for (size_t n = 0; n < len; n++) {
        char what[80];
        snprintf(what, sizeof(what), "truncated to %zu of %zu", n, len);
        addr_reject(good, n, what);
    }
    addr_reject(NULL, 0, "no bytes at all");

    /* Bad magic (the old, unversioned blob began with the handshake's),
     * bad version. */
    memcpy(buf, good, len);
    tw_tcp_hs_t hs = hs_make(TW_TCP_HS_HELLO);
    tw_tcp_hs_pack(&hs, buf); /* TW_TCP_MAGIC, then the handshake */
    addr_reject(buf, len, "handshake magic");
    for (int bit = 0; bit < 32; bit++) {
        memcpy(buf, good, len);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        addr_reject(buf, len, "magic bit");
    }
    static const uint8_t versions[] = {0, 2, 0x81, 0xff};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(versions); i++) {
        memcpy(buf, good, len);
        buf[4] = versions[i];
        addr_reject(buf, len, "bad version");
    }

    /* Bad family, in either entry. */
    static const uint8_t families[] = {0, 1, 2, 5, 10, 0x84, 0xff};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(families); i++) {
        for (unsigned a = 0; a < 2; a++) {
            memcpy(buf, good, len);
            buf[TW_TCP_ADDR_HDR + a * entry] = families[i];
            addr_reject(buf, len, "bad family");
        }
    }
    /* Reserved bytes, IPv4 padding, a port 0 (any lane), unknown flags. */
    for (unsigned r = 1; r <= 3; r++) {
        memcpy(buf, good, len);
        buf[TW_TCP_ADDR_HDR + entry + r] = 0x01;
        addr_reject(buf, len, "reserved byte set");
    }
    for (unsigned pad = 8; pad < 20; pad++) {
        memcpy(buf, good, len);
        buf[TW_TCP_ADDR_HDR + pad] = 0x40; /* entry 0 is IPv4 */
        addr_reject(buf, len, "IPv4 padding set");
    }
    for (unsigned k = 0; k < 3; k++) {
        memcpy(buf, good, len);
        memset(buf + TW_TCP_ADDR_HDR + entry + TW_TCP_ADDR_ENTRY + 2 * k, 0, 2);
        addr_reject(buf, len, "port 0");
    }
    for (int bit = 1; bit < 8; bit++) {
        memcpy(buf, good, len);
        buf[7] |= (uint8_t)(1u << bit);
        addr_reject(buf, len, "unknown flag");
    }

    /* Bad counts: no lane, no address, more than the limits. */
    static const uint8_t bad_lanes[] = {0, TW_TCP_MAX_LANES + 1, 0xff};
    static const uint8_t bad_naddrs[] = {0, TW_TCP_MAX_ADDRS + 1, 0xff};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(bad_lanes); i++) {
        memcpy(buf, good, len);
        buf[5] = bad_lanes[i];
        addr_reject(buf, len, "bad lane count");
        memcpy(buf, good, len);
        buf[6] = bad_naddrs[i];
        addr_reject(buf, len, "bad address count");
    }

    /* Lengths that lie: counts saying more, or fewer, than the bytes. */
    for (uint8_t lanes = 1; lanes <= TW_TCP_MAX_LANES; lanes++) {
        for (uint8_t naddrs = 1; naddrs <= TW_TCP_MAX_ADDRS; naddrs++) {
            if (tw_tcp_addr_blob_len(lanes, naddrs) == len) {
                continue; /* counts that fit the length (2 x 3 lanes, 1 x 16) */
            }
            memcpy(buf, good, len);
            buf[5] = lanes;
            buf[6] = naddrs;
            addr_reject(buf, len, "counts that lie");
        }
    }
    memcpy(buf, good, len);
    buf[len] = 0;
    addr_reject(buf, len + 1, "a trailing byte");
    /* A whole blob that holds fewer entries than its count: still refused,
     * and nothing is read past @p len (ASan: the bytes end at the block). */
    uint8_t *block = malloc(len - entry);
    TWT_CHECK(block != NULL);
    memcpy(block, good, len - entry);
    addr_reject(block, len - entry, "an entry missing");
    free(block);
}

/* Fixes of what the first review found: NULL with length 0, outputs
 * untouched on rejection, an unknown wanted type. */
static void test_contract_edges(void)
{
    uint8_t k[16] = {0}, buf[TW_TCP_HS_LEN], fbuf[TW_TCP_FRAME_LEN];
    tw_tcp_hs_t hs = {.type = TW_TCP_HS_HELLO, .rank = 5, .size = 4}, out;
    tw_tcp_frame_t f = {.type = TW_TCP_FRAME_AM, .hdr_len = 10, .len = 100}, fout;
    uint8_t kout[16];
    const char *why = NULL;

    fill_seq(k, 16, 0);
    TWT_EQ(tw_siphash24(k, NULL, 0), 0x726fdb47dd0e0e31ull);
    /* rank 5 of 4: rejected, and `out` keeps what it held. */
    tw_tcp_hs_pack(&hs, buf);
    memset(&out, 0xab, sizeof(out));
    TWT_EQ(tw_tcp_hs_parse(buf, sizeof(buf), TW_TCP_HS_HELLO, 4, &out, &why), TW_ERR_PROTOCOL);
    TWT_EQ(out.rank, 0xabababab);
    TWT_EQ(tw_tcp_hs_parse(buf, sizeof(buf), 0, 4, &out, &why), TW_ERR_PROTOCOL);
    TWT_EQ(tw_tcp_hs_parse(buf, sizeof(buf), 4, 4, &out, &why), TW_ERR_PROTOCOL);
    /* len above the limit: rejected, `fout` untouched. */
    tw_tcp_frame_pack(&f, fbuf);
    memset(&fout, 0xcd, sizeof(fout));
    TWT_EQ(tw_tcp_frame_parse(fbuf, sizeof(fbuf), 64, 99, &fout, &why), TW_ERR_PROTOCOL);
    TWT_EQ(fout.len, 0xcdcdcdcdcdcdcdcdull);
    /* A bad character late in the key: nothing written. */
    memset(kout, 0xee, sizeof(kout));
    TWT_EQ(tw_siphash_key_parse("00112233445566778899aabbccddeeXf", kout), TW_ERR_INVALID);
    for (int i = 0; i < 16; i++) {
        TWT_EQ(kout[i], 0xee);
    }
}

static const twt_case_t cases[] = {
    {"siphash", test_siphash_vectors},
    {"hs_round_trip", test_hs_round_trip},
    {"hs_reject", test_hs_reject},
    {"hs_proof", test_hs_proof},
    {"frame", test_frame},
    {"frame_rndv", test_frame_rndv},
    {"key_parse", test_key_parse},
    {"addr_good", test_addr_good},
    {"addr_reject", test_addr_reject},
    {"contract_edges", test_contract_edges},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
