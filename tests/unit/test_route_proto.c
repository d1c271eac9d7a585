/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * route's frame header (src/routing/tw_route_proto.h): tw_route_seal and
 * tw_route_parse. The known bytes come from tests/fuzz/gen_corpus.py, an
 * independent Python reading of the format (`gen_corpus.py --vectors`
 * prints them). One ctest entry per case (unit/route.cmake):
 *
 *   known_bytes  a sealed header is the bytes gen_corpus.py packs, its
 *                CRC32C over the header with crc 0;
 *   accept       valid frames: a single frame, first / middle / last
 *                fragments, without SEQ, empty, at the limits, DOWN;
 *   checksum     any bit flipped in the header, or a field changed
 *                without sealing again: TW_ERR_AGAIN, "checksum";
 *   reject       every reason of TW_ERR_INVALID, with its text;
 *   precedence   which reason a frame wrong in several ways gets (the
 *                checksum first), and the limits next to each rejection.
 */
#include <stddef.h>
#include <string.h>

#include "core/tw_crc32c.h"
#include "routing/tw_route_proto.h"
#include "tw_test.h"

#define SIZE    16 /* ranks in the job the frames come from */
#define MAX_MSG (1ull << 30)
#define UHDR    24 /* upper header bytes of the first fragment */

/* Header, upper header, payload (a frame as the transport hands it up). */
typedef struct frame {
    tw_route_hdr_t h;
    unsigned char uhdr[UHDR + 8]; /* room for a longer header than h says */
    size_t hdr_len;               /* transport header bytes: 32 + upper header */
    size_t len;                   /* payload bytes */
} frame_t;

/* The first of a 10000-byte message from rank 3 to rank 12 in 3
 * fragments (4000, 4000, 2000), numbered: gen_corpus.py's route seeds. */
static frame_t data_frame(uint8_t flags, uint32_t offset, size_t len)
{
    frame_t f = {.h = {.version = TW_ROUTE_PROTO_VERSION,
                       .type = TW_ROUTE_T_DATA,
                       .am_id = 33,
                       .hops = 1,
                       .hdr_len = (flags & TW_ROUTE_F_FIRST) ? UHDR : 0,
                       .flags = flags,
                       .src = 3,
                       .dst = 12,
                       .msg_len = 10000,
                       .offset = offset,
                       .seq = (flags & TW_ROUTE_F_SEQ) ? 7 + offset / 4000 : 0},
                 .len = len};
    f.hdr_len = sizeof(f.h) + f.h.hdr_len;
    memset(f.uhdr, 0xab, sizeof(f.uhdr));
    tw_route_seal(&f.h);
    return f;
}

static frame_t down_frame(int32_t gone, uint8_t how)
{
    frame_t f = {.h = {.version = TW_ROUTE_PROTO_VERSION,
                       .type = TW_ROUTE_T_DOWN,
                       .am_id = how,
                       .src = 2,
                       .dst = gone},
                 .hdr_len = sizeof(tw_route_hdr_t)};
    tw_route_seal(&f.h);
    return f;
}

enum { F_FIRST = TW_ROUTE_F_FIRST, F_LAST = TW_ROUTE_F_LAST, F_SEQ = TW_ROUTE_F_SEQ };

/* The frame as bytes: the route header, then the upper header. */
static const unsigned char *frame_bytes(frame_t *f)
{
    _Static_assert(offsetof(frame_t, uhdr) == sizeof(tw_route_hdr_t), "uhdr follows h");
    return (const unsigned char *)f;
}

static tw_status_t parse(frame_t *f, tw_route_hdr_t *out, const char **why)
{
    return tw_route_parse(frame_bytes(f), f->hdr_len, f->len, SIZE, MAX_MSG, out, why);
}

/* @p f parses, and what comes out is its header. */
static void accepted(frame_t *f, const char *what)
{
    tw_route_hdr_t out;
    const char *why = NULL;
    tw_status_t st;

    memset(&out, 0x5a, sizeof(out));
    st = parse(f, &out, &why);
    TWT_CHECKF(st == TW_OK, "%s: %s (%s)", what, tw_strerror(st), why ? why : "no reason");
    TWT_CHECKF(memcmp(&out, &f->h, sizeof(out)) == 0, "%s: header not copied out", what);
}

/* @p f is rejected with @p want and the reason @p reason. */
static void rejected(frame_t *f, tw_status_t want, const char *reason, const char *what)
{
    tw_route_hdr_t out;
    const char *why = NULL;
    tw_status_t st = parse(f, &out, &why);

    TWT_CHECKF(st == want, "%s: %s, want %s (%s)", what, tw_strerror(st), tw_strerror(want),
               why ? why : "no reason");
    TWT_CHECKF(why != NULL && strcmp(why, reason) == 0, "%s: reason '%s', want '%s'", what,
               why ? why : "(none)", reason);
}

/* Change a field and seal again: only the field check can reject it. */
#define RESEAL(f, field, value) \
    do {                        \
        (f).h.field = (value);  \
        tw_route_seal(&(f).h);  \
    } while (0)

/* Byte field @p field set to each of @p values in a DATA frame and in a
 * DOWN, sealed: rejected for @p reason. */
#define REJECT_BOTH(field, values, reason)                          \
    do {                                                            \
        for (size_t i_ = 0; i_ < TWT_ARRAY_SIZE(values); i_++) {    \
            f = data_frame(F_FIRST | F_SEQ, 0, 100);                \
            RESEAL(f, field, values[i_]);                           \
            rejected(&f, TW_ERR_INVALID, reason, #field);           \
            f = down_frame(1, TW_ROUTE_DOWN_LEFT);                  \
            RESEAL(f, field, values[i_]);                           \
            rejected(&f, TW_ERR_INVALID, reason, #field " (DOWN)"); \
        }                                                           \
    } while (0)

/* ---- known bytes -------------------------------------------------------- */

/* gen_corpus.py --vectors: the sealed first fragment of data_frame. */
static const unsigned char first_bytes[32] = {
    0x01, 0x01, 0x21, 0x01, 0x18, 0x00, 0x05, 0x00, 0x03, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00,
    0x10, 0x27, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xef, 0xb4, 0xe9, 0x51, 0x07, 0x00, 0x00, 0x00,
};

static void test_known_bytes(void)
{
    frame_t f = data_frame(F_FIRST | F_SEQ, 0, 4000 - UHDR);
    tw_route_hdr_t z = f.h;

    TWT_CHECK(memcmp(&f.h, first_bytes, sizeof(first_bytes)) == 0);
    /* The checksum is the CRC32C of the header with crc 0, and sealing
     * twice changes nothing. */
    z.crc = 0;
    TWT_EQ(f.h.crc, tw_crc32c(0, &z, sizeof(z)));
    tw_route_seal(&f.h);
    TWT_CHECK(memcmp(&f.h, first_bytes, sizeof(first_bytes)) == 0);
    accepted(&f, "known bytes");
}

/* ---- accepted ----------------------------------------------------------- */

static void test_accept(void)
{
    frame_t f;

    /* A message in one frame, with and without SEQ, with and without an
     * upper header, and empty. */
    for (int seq = 0; seq < 2; seq++) {
        uint8_t s = seq ? F_SEQ : 0;
        f = data_frame(F_FIRST | F_LAST | s, 0, 0);
        f.h.msg_len = 100;
        f.len = 100;
        tw_route_seal(&f.h);
        accepted(&f, "single frame");
        f.h.hdr_len = 0;
        f.hdr_len = sizeof(f.h);
        tw_route_seal(&f.h);
        accepted(&f, "single frame, no upper header");
        f.h.msg_len = 0;
        f.len = 0;
        tw_route_seal(&f.h);
        accepted(&f, "empty message");
        /* The three fragments of a message. */
        f = data_frame(F_FIRST | s, 0, 4000 - UHDR);
        accepted(&f, "first fragment");
        f = data_frame(s, 4000, 4000);
        accepted(&f, "middle fragment");
        f = data_frame(F_LAST | s, 8000, 2000);
        accepted(&f, "last fragment");
    }
    /* Hops 0 .. TW_ROUTE_MAX_HOPS; the ranks at the ends of the job. */
    for (uint8_t hops = 0; hops <= TW_ROUTE_MAX_HOPS; hops++) {
        f = data_frame(F_FIRST | F_SEQ, 0, 10);
        RESEAL(f, hops, hops);
        accepted(&f, "hops");
    }
    f = data_frame(F_LAST, 8000, 2000);
    f.h.src = 0;
    f.h.dst = SIZE - 1;
    tw_route_seal(&f.h);
    accepted(&f, "ranks 0 and size - 1");
    /* A fragment that ends its message without LAST, or shorter than
     * its room: the parser checks bounds, the receiver the sequence. */
    f = data_frame(F_SEQ, 4000, 6000);
    accepted(&f, "a middle fragment up to the end");
    f = data_frame(0, 4000, 0);
    accepted(&f, "an empty middle fragment");
    /* The message limit itself; sequence numbers wrap. */
    f = data_frame(F_FIRST | F_SEQ, 0, 100);
    f.h.msg_len = (uint32_t)MAX_MSG;
    f.h.seq = UINT32_MAX;
    tw_route_seal(&f.h);
    accepted(&f, "the first fragment of a message of max_msg bytes");
    f = data_frame(F_LAST | F_SEQ, 0, 100);
    f.h.msg_len = (uint32_t)MAX_MSG;
    f.h.offset = (uint32_t)MAX_MSG - 100;
    tw_route_seal(&f.h);
    accepted(&f, "the last fragment of a message of max_msg bytes");
    /* DOWN: a rank that left, a rank that failed. */
    f = down_frame(5, TW_ROUTE_DOWN_LEFT);
    accepted(&f, "DOWN left");
    f = down_frame(SIZE - 1, TW_ROUTE_DOWN_FAILED);
    accepted(&f, "DOWN failed");
    RESEAL(f, hops, TW_ROUTE_MAX_HOPS);
    accepted(&f, "DOWN with hops");
}

/* ---- the checksum --------------------------------------------------------- */

static void test_checksum(void)
{
    frame_t good[] = {data_frame(F_FIRST | F_SEQ, 0, 4000 - UHDR), data_frame(F_SEQ, 4000, 4000),
                      data_frame(F_LAST, 8000, 2000), down_frame(4, TW_ROUTE_DOWN_FAILED)};

    for (size_t i = 0; i < TWT_ARRAY_SIZE(good); i++) {
        for (size_t bit = 0; bit < 8 * sizeof(tw_route_hdr_t); bit++) {
            frame_t f = good[i];
            ((unsigned char *)&f.h)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            rejected(&f, TW_ERR_AGAIN, "checksum", "a bit flipped");
        }
        /* A field changed on the way (a hop that did not seal again). */
        frame_t f = good[i];
        f.h.hops++;
        rejected(&f, TW_ERR_AGAIN, "checksum", "hops changed, not sealed");
        f = good[i];
        f.h.crc = 0;
        rejected(&f, TW_ERR_AGAIN, "checksum", "crc 0");
    }
    /* The upper header and the payload are not the route header's to
     * check (rel's checksum covers them). */
    frame_t f = good[0];
    f.uhdr[0] ^= 1;
    accepted(&f, "upper header changed");
}

/* ---- rejected ----------------------------------------------------------- */

static void test_reject(void)
{
    frame_t f;

    f = data_frame(F_FIRST | F_LAST, 0, 0);
    f.hdr_len = sizeof(tw_route_hdr_t) - 1;
    rejected(&f, TW_ERR_INVALID, "header too short", "31 bytes");
    f.hdr_len = 0;
    rejected(&f, TW_ERR_INVALID, "header too short", "0 bytes");

    static const uint8_t reserved[] = {1, 0x80, 0xff};
    static const uint8_t versions[] = {0, TW_ROUTE_PROTO_VERSION + 1, 0xff};
    static const uint8_t hops[] = {TW_ROUTE_MAX_HOPS + 1, 0xff};
    REJECT_BOTH(reserved, reserved, "reserved bits set");
    REJECT_BOTH(version, versions, "unknown protocol version");
    REJECT_BOTH(hops, hops, "too many hops");

    static const int32_t ranks[] = {-1, SIZE, SIZE + 1, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(ranks); i++) {
        f = data_frame(F_LAST, 8000, 2000);
        RESEAL(f, src, ranks[i]);
        rejected(&f, TW_ERR_INVALID, "rank out of range", "src");
        f = data_frame(F_LAST, 8000, 2000);
        RESEAL(f, dst, ranks[i]);
        rejected(&f, TW_ERR_INVALID, "rank out of range", "dst");
        f = down_frame(ranks[i], TW_ROUTE_DOWN_FAILED);
        rejected(&f, TW_ERR_INVALID, "rank out of range", "DOWN of a rank out of range");
    }

    /* DOWN: no upper header, no payload, a known way of going, no number. */
    f = down_frame(1, TW_ROUTE_DOWN_FAILED);
    f.hdr_len = sizeof(tw_route_hdr_t) + 1;
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with upper header bytes");
    f = down_frame(1, TW_ROUTE_DOWN_FAILED);
    f.len = 1;
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with a payload");
    f = down_frame(1, TW_ROUTE_DOWN_FAILED + 1);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN of an unknown way");
    f = down_frame(1, 0xff);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN of way 255");
    f = down_frame(1, TW_ROUTE_DOWN_LEFT);
    RESEAL(f, seq, 1);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with a number");
    /* ... and none of DATA's fields set. */
    f = down_frame(1, TW_ROUTE_DOWN_FAILED);
    RESEAL(f, flags, 0xff);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with flags");
    f = down_frame(1, TW_ROUTE_DOWN_FAILED);
    RESEAL(f, hdr_len, 500);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with an upper header length");
    f = down_frame(1, TW_ROUTE_DOWN_FAILED);
    RESEAL(f, msg_len, 77);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with a message length");
    f = down_frame(1, TW_ROUTE_DOWN_FAILED);
    RESEAL(f, offset, 99);
    rejected(&f, TW_ERR_INVALID, "malformed DOWN", "DOWN with an offset");

    static const uint8_t types[] = {0, TW_ROUTE_T_DOWN + 1, 0xff};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(types); i++) {
        f = data_frame(F_FIRST | F_LAST, 0, 0);
        f.h.msg_len = 0;
        RESEAL(f, type, types[i]);
        rejected(&f, TW_ERR_INVALID, "unknown frame type", "type");
    }

    /* The upper header length the route header gives is what came. */
    f = data_frame(F_FIRST | F_SEQ, 0, 100);
    f.hdr_len--;
    rejected(&f, TW_ERR_INVALID, "upper header length does not match", "one byte less");
    f.hdr_len += 2;
    rejected(&f, TW_ERR_INVALID, "upper header length does not match", "one byte more");
    f = data_frame(F_SEQ, 4000, 100);
    f.hdr_len = sizeof(tw_route_hdr_t) + 1;
    rejected(&f, TW_ERR_INVALID, "upper header length does not match", "h says none");
    f = data_frame(F_FIRST | F_SEQ, 0, 100);
    RESEAL(f, hdr_len, 0xffff);
    rejected(&f, TW_ERR_INVALID, "upper header length does not match", "h says 65535");

    for (unsigned bit = 3; bit < 8; bit++) {
        f = data_frame(F_FIRST | F_SEQ, 0, 100);
        RESEAL(f, flags, (uint8_t)(f.h.flags | 1u << bit));
        rejected(&f, TW_ERR_INVALID, "unknown flags", "flag bit");
    }

    f = data_frame(F_LAST, 8000, 2000);
    RESEAL(f, seq, 1);
    rejected(&f, TW_ERR_INVALID, "a sequence number without SEQ", "seq 1");
    RESEAL(f, seq, UINT32_MAX);
    rejected(&f, TW_ERR_INVALID, "a sequence number without SEQ", "seq UINT32_MAX");

    /* The fragment lies inside its message, which is within the limit. */
    f = data_frame(F_FIRST | F_LAST | F_SEQ, 0, 0);
    RESEAL(f, msg_len, (uint32_t)MAX_MSG + 1);
    rejected(&f, TW_ERR_INVALID, "fragment outside its message", "msg_len > max_msg");
    RESEAL(f, msg_len, UINT32_MAX);
    rejected(&f, TW_ERR_INVALID, "fragment outside its message", "msg_len UINT32_MAX");
    f = data_frame(F_SEQ, 10001, 0);
    rejected(&f, TW_ERR_INVALID, "fragment outside its message", "offset > msg_len");
    f = data_frame(F_SEQ, 4000, 6001);
    rejected(&f, TW_ERR_INVALID, "fragment outside its message", "one byte past the end");
    f = data_frame(0, 10000, 1);
    rejected(&f, TW_ERR_INVALID, "fragment outside its message", "a byte at msg_len");
    /* offset + len past 2^32, under a limit that lets msg_len be anything. */
    f = data_frame(0, UINT32_MAX, 1);
    RESEAL(f, msg_len, UINT32_MAX);
    tw_route_hdr_t out;
    const char *why = NULL;
    TWT_EQ(tw_route_parse(frame_bytes(&f), f.hdr_len, f.len, SIZE, UINT64_MAX, &out, &why),
           TW_ERR_INVALID);
    TWT_CHECK(why != NULL && strcmp(why, "fragment outside its message") == 0);
    f.len = 0;
    TWT_EQ(tw_route_parse(frame_bytes(&f), f.hdr_len, f.len, SIZE, UINT64_MAX, &out, &why), TW_OK);
    f = data_frame(F_FIRST | F_SEQ, 0, 10000 - UHDR);
    f.len = SIZE_MAX;
    rejected(&f, TW_ERR_INVALID, "fragment outside its message", "len SIZE_MAX");

    /* The upper header rides in the first fragment, which starts the
     * message, and only there. */
    f = data_frame(F_FIRST | F_SEQ, 0, 100);
    RESEAL(f, offset, 4000);
    rejected(&f, TW_ERR_INVALID, "upper header outside the first fragment", "FIRST at 4000");
    f = data_frame(F_FIRST | F_LAST, 0, 100);
    f.h.hdr_len = 0;
    f.hdr_len = sizeof(f.h);
    RESEAL(f, offset, 9900);
    rejected(&f, TW_ERR_INVALID, "upper header outside the first fragment",
             "FIRST | LAST at 9900, no upper header");
    f = data_frame(F_SEQ, 4000, 4000);
    f.hdr_len = sizeof(f.h) + 8;
    RESEAL(f, hdr_len, 8);
    rejected(&f, TW_ERR_INVALID, "upper header outside the first fragment",
             "a middle fragment with an upper header");
    f = data_frame(F_LAST, 8000, 2000);
    f.hdr_len = sizeof(f.h) + 1;
    RESEAL(f, hdr_len, 1);
    rejected(&f, TW_ERR_INVALID, "upper header outside the first fragment",
             "a last fragment with an upper header");

    f = data_frame(F_LAST | F_SEQ, 8000, 1999);
    rejected(&f, TW_ERR_INVALID, "last fragment does not end the message", "one byte short");
    f = data_frame(F_LAST, 4000, 4000);
    rejected(&f, TW_ERR_INVALID, "last fragment does not end the message", "LAST in the middle");
    f = data_frame(F_FIRST | F_LAST | F_SEQ, 0, 4000 - UHDR);
    rejected(&f, TW_ERR_INVALID, "last fragment does not end the message",
             "a single frame shorter than its message");
}

/* ---- several faults at once, and the edges of each check ------------------ */

static void test_precedence(void)
{
    frame_t f;

    /* A damaged checksum wins over every field (a bit flip could have
     * made the field look wrong). */
    f = data_frame(F_FIRST, 0, 100);
    f.h.version = 0;
    f.h.src = -1;
    rejected(&f, TW_ERR_AGAIN, "checksum", "bad checksum and fields");
    /* Too short wins over the checksum: there is no header to check. */
    f.hdr_len = 16;
    rejected(&f, TW_ERR_INVALID, "header too short", "short and damaged");
    /* Then reserved, version, ranks, hops, type, in that order. */
    f = data_frame(F_FIRST, 0, 100);
    f.h.reserved = 1;
    f.h.version = 2;
    f.h.src = SIZE;
    f.h.hops = 9;
    f.h.type = 9;
    tw_route_seal(&f.h);
    rejected(&f, TW_ERR_INVALID, "reserved bits set", "all fields wrong");
    RESEAL(f, reserved, 0);
    rejected(&f, TW_ERR_INVALID, "unknown protocol version", "version and after");
    RESEAL(f, version, TW_ROUTE_PROTO_VERSION);
    rejected(&f, TW_ERR_INVALID, "rank out of range", "ranks and after");
    RESEAL(f, src, 0);
    rejected(&f, TW_ERR_INVALID, "too many hops", "hops and after");
    RESEAL(f, hops, 0);
    rejected(&f, TW_ERR_INVALID, "unknown frame type", "type");
    /* The job size and the message limit are the caller's. */
    f = data_frame(F_LAST, 8000, 2000);
    tw_route_hdr_t out;
    const char *why = NULL;
    TWT_EQ(tw_route_parse(frame_bytes(&f), f.hdr_len, f.len, 13, MAX_MSG, &out, &why), TW_OK);
    TWT_EQ(tw_route_parse(frame_bytes(&f), f.hdr_len, f.len, 12, MAX_MSG, &out, &why),
           TW_ERR_INVALID);
    TWT_CHECK(strcmp(why, "rank out of range") == 0);
    why = NULL;
    TWT_EQ(tw_route_parse(frame_bytes(&f), f.hdr_len, f.len, 13, 10000, &out, &why), TW_OK);
    TWT_EQ(tw_route_parse(frame_bytes(&f), f.hdr_len, f.len, 13, 9999, &out, &why), TW_ERR_INVALID);
    TWT_CHECK(strcmp(why, "fragment outside its message") == 0);
    /* LAST exactly at the end, with nothing in it. */
    f = data_frame(F_LAST | F_SEQ, 10000, 0);
    accepted(&f, "an empty last fragment at msg_len");
}

static const twt_case_t cases[] = {
    {"known_bytes", test_known_bytes}, {"accept", test_accept},         {"checksum", test_checksum},
    {"reject", test_reject},           {"precedence", test_precedence},
};

int main(int argc, char **argv)
{
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
