/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The reliability layer (src/reliability/tw_rel.c) between two ranks in
 * one process, in virtual time, over a "wire" transport written here: every frame goes
 * through a queue the test controls, so it can drop, duplicate, corrupt,
 * hold or replay exactly the frame it means, and expect exact counters
 * (test-matrix rows B3, B4 and parts of B6, B8, B9, C2):
 *
 *   basic        sizes 0 B .. 200 KiB both ways: in order, intact, no
 *                retransmission, no duplicate;
 *   first/last   the first, or the last, fragment of a 3-fragment message
 *                lost: one retransmission, delivered once;
 *   ack, nack    the ack, or the nack, lost: one retransmission (and, for
 *                the ack, one duplicate at the receiver);
 *   dup          a fragment replayed after its message completed: one
 *                duplicate, nothing delivered twice;
 *   crc          a bit of the checksum field flipped: one checksum
 *                failure, one nack, one retransmission;
 *   far          sequence numbers 1000 ahead and 1000 behind: one
 *                out-of-window drop, one duplicate;
 *   replay       a frame of an earlier incarnation of the peer: stale;
 *   wrap         sequence numbers start 40 below 2^32, 5 % of frames lost
 *                both ways: every message once, in order;
 *   corrupt      1 % of frames get a bit flipped anywhere: 0 corrupted
 *                deliveries;
 *   failover     path 0 goes dark mid-stream: traffic moves to path 1
 *                within the path timeout, exactly once; path 0 heals:
 *                probes bring the traffic back (fail-back);
 *   fornow       path 0's transport reports the peer down for now
 *                (TW_ERR_TRANSPORT) and refuses sends: traffic moves to
 *                path 1 at once; probes are refused, so no fail-back while
 *                it is down; once it takes sends again, probes bring the
 *                traffic back. Also with the refusal seen before the
 *                report (the transport's peer_down not run yet), and, for
 *                contrast, a report for good: never probed again;
 *   nopath       the only path goes dark: every pending send completes
 *                TW_ERR_PEER_FAILED, the peer is reported down once;
 *   keepalive    the peer stops answering anything: failed after
 *                keepalive x misses, not before.
 */
#include <string.h>

#include "core/tw_crc32c.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "reliability/tw_rel.h"
#include "reliability/tw_rel_proto.h"
#include "tw_test.h"

#define NPATHS      2
#define WIRE_SHORT  4160u /* fragments of 4096 bytes of upper header + payload */
#define UHDR        32u
#define MAX_MSGS    4096
#define PAYLOAD_MAX (200u * 1024u)

/* ---- the wire --------------------------------------------------------- */

typedef struct frame {
    struct frame *next;
    int src, dst, path;
    uint8_t am_id;
    size_t hdr_len, len;
    unsigned char *bytes; /* header, then payload */
} frame_t;

typedef struct wire_iface {
    tw_tl_iface_t super;
    int path;
} wire_iface_t;

/* A path's end: its iface, whose callbacks are rel's once rel took it. */
typedef struct endpoint {
    tw_tl_iface_t *iface;
} endpoint_t;

static frame_t *q_head, *q_tail;
static endpoint_t eps[2][NPATHS];
static bool dark[NPATHS]; /* the path drops everything */
/* Not TW_OK: the path's am_short refuses with it (a transport whose path
 * is down); carried: DATA frames each path took. */
static tw_status_t refuse[NPATHS];
static uint64_t carried[NPATHS];
static bool mute[2];     /* this rank's frames vanish (a hung peer) */
static uint64_t dropped; /* by dark or mute */
/* Per-test fate of a frame about to be delivered: false drops it. */
static bool (*filter)(frame_t *f);
static uint64_t rng_state = 42;
/* Virtual time: rel reads it through its clock hook, pump advances it,
 * so every count here is exact however slow the machine is. */
static uint64_t vnow = 1000000000ull;
#define STEP_NS 50000ull /* 50 us per pump step */

static uint64_t vclock(void)
{
    return vnow;
}
static uint64_t last_heard[2]; /* when a rank last got a frame */

static frame_t *frame_copy(int src, int dst, int path, uint8_t am_id, const void *hdr,
                           size_t hdr_len, const void *data, size_t len)
{
    frame_t *f = calloc(1, sizeof(*f));
    f->bytes = malloc(hdr_len + len + 1);
    TWT_CHECK(f != NULL && f->bytes != NULL);
    f->src = src;
    f->dst = dst;
    f->path = path;
    f->am_id = am_id;
    f->hdr_len = hdr_len;
    f->len = len;
    memcpy(f->bytes, hdr, hdr_len);
    if (len > 0) {
        memcpy(f->bytes + hdr_len, data, len);
    }
    return f;
}

static void frame_free(frame_t *f)
{
    free(f->bytes);
    free(f);
}

static void enqueue(frame_t *f)
{
    f->next = NULL;
    if (q_tail != NULL) {
        q_tail->next = f;
    } else {
        q_head = f;
    }
    q_tail = f;
}

static tw_status_t wire_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                 size_t hdr_len, const void *data, size_t len)
{
    wire_iface_t *w = (wire_iface_t *)iface;

    TWT_CHECK(hdr_len + len <= iface->attr.max_short);
    if (refuse[w->path] != TW_OK) {
        return refuse[w->path];
    }
    if (am_id == TW_REL_AM_DATA || am_id == TW_REL_AM_SDATA) {
        carried[w->path]++;
    }
    if (dark[w->path] || mute[iface->rank]) {
        dropped++;
        return TW_OK;
    }
    enqueue(frame_copy(iface->rank, peer, w->path, am_id, hdr, hdr_len, data, len));
    return TW_OK;
}

static tw_status_t wire_query(char *why, size_t len)
{
    (void)why, (void)len;
    return TW_OK;
}

static bool wire_reachable(tw_tl_iface_t *iface, int peer)
{
    (void)iface;
    return peer >= 0 && peer < 2;
}

static tw_status_t wire_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void wire_close(tw_tl_iface_t *iface)
{
    tw_tl_iface_cleanup(iface);
    free(iface);
}

static const tw_tl_ops_t wire_ops = {
    .name = "wire",
    .caps = TW_TL_CAP_AM_SHORT,
    .query = wire_query,
    .iface_open = wire_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = wire_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tl_noaddr_pack,
    .addr_connect = tw_tl_noaddr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = wire_reachable,
    .am_short = wire_am_short,
    .am_zcopy = tw_tl_stub_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_tl_stub_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static int opening_path;

static tw_status_t wire_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {.max_short = WIRE_SHORT, .max_hdr = 1024, .max_zcopy = 0};
    wire_iface_t *w = calloc(1, sizeof(*w));

    TWT_CHECK(w != NULL);
    TWT_CHECK(tw_tl_iface_init(&w->super, &wire_ops, params, &attr) == TW_OK);
    w->path = opening_path;
    eps[params->rank][opening_path] = (endpoint_t){.iface = &w->super};
    *iface_p = &w->super;
    return TW_OK;
}

/* ---- the two ranks ---------------------------------------------------- */

typedef struct side {
    int rank;
    tw_pe_t *pe;
    tw_tl_iface_t *rel; /* over paths[] */
    tw_tl_iface_t *paths[NPATHS];
    uint64_t next_in;   /* index of the next message expected from the peer */
    uint64_t delivered; /* messages handed up */
    uint64_t bad;       /* wrong order or content */
    int downs;
    tw_status_t down_why;
} side_t;

static side_t sides[2];

static void fill(unsigned char *p, size_t n, uint64_t idx)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (unsigned char)(idx * 131 + i * 7 + (i >> 8));
    }
}

/* A frame handed to rank 1 from inside its own upcall: another arrival
 * while the deliverer hands a message up without the lock. */
static frame_t *reenter;
static uint64_t reenter_delivered = UINT64_MAX; /* delivered count right after it */

static void up_recv(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                    const void *data, size_t len)
{
    side_t *s = arg;
    static unsigned char want[PAYLOAD_MAX];
    uint64_t idx, hlen;

    TWT_CHECK(src == 1 - s->rank && am_id == 7 && hdr_len == UHDR);
    memcpy(&idx, hdr, sizeof(idx));
    memcpy(&hlen, (const unsigned char *)hdr + 8, sizeof(hlen));
    fill(want, len, idx);
    if (idx != s->next_in || hlen != len || len > PAYLOAD_MAX || memcmp(want, data, len) != 0) {
        s->bad++;
        fprintf(stderr, "rank %d: message %llu (expected %llu) of %zu bytes is wrong\n", s->rank,
                (unsigned long long)idx, (unsigned long long)s->next_in, len);
    }
    s->next_in = idx + 1;
    s->delivered++;
    if (reenter != NULL && s->rank == 1) {
        frame_t *f = reenter;
        endpoint_t *e = &eps[f->dst][f->path];
        reenter = NULL;
        e->iface->recv(e->iface->recv_arg, f->src, f->am_id, f->bytes, f->hdr_len,
                       f->bytes + f->hdr_len, f->len);
        reenter_delivered = s->delivered;
        frame_free(f);
    }
}

static void up_down(void *arg, int peer, tw_status_t why)
{
    side_t *s = arg;
    TWT_CHECK(peer == 1 - s->rank);
    s->downs++;
    s->down_why = why;
}

static tw_rel_cfg_t test_cfg(void)
{
    tw_rel_cfg_t c;
    tw_cfg_set_defaults(&tw_rel_cfg_table, &c);
    c.rto_ns = 20000000;     /* 20 ms: exact counters even on a slow machine */
    c.rto_max_ns = 80000000; /* 80 ms */
    c.path_timeout_ns = 300000000;
    c.ack_delay_ns = 50000;
    c.keepalive_ns = 5000000000ull; /* out of the way unless a test wants it */
    c.probe_ns = 20000000;
    return c;
}

static void sides_open(const tw_rel_cfg_t *cfg, int npaths)
{
    const tw_rel_opts_t opts = {.cfg = cfg, .clock = vclock};

    for (int r = 0; r < 2; r++) {
        side_t *s = &sides[r];
        tw_pe_params_t pp = {.name = r ? "rank1" : "rank0", .thread = false};
        *s = (side_t){.rank = r};
        TWT_CHECK(tw_pe_create(&pp, &s->pe) == TW_OK);
        tw_tl_params_t up = {.rank = r,
                             .size = 2,
                             .pe = s->pe,
                             .recv = up_recv,
                             .recv_arg = s,
                             .peer_down = up_down,
                             .peer_down_arg = s};
        for (int g = 0; g < npaths; g++) {
            opening_path = g;
            TWT_CHECK(tw_tl_iface_open(&wire_ops, &up, &s->paths[g]) == TW_OK);
        }
        TWT_CHECK(tw_rel_wrap(s->paths, (unsigned)npaths, &up, &opts, &s->rel) == TW_OK);
        for (int g = 0; g < npaths; g++) {
            /* Taken over: rel's own ids are the ones a polling worker may take in. */
            TWT_CHECK(s->paths[g]->recv != up_recv && s->paths[g]->peer_down != up_down);
            TWT_EQ(s->paths[g]->inline_am_ids,
                   (1ull << TW_REL_AM_DATA) | (1ull << TW_REL_AM_ACK) | (1ull << TW_REL_AM_NACK) |
                       (1ull << TW_REL_AM_CTRL) | (1ull << TW_REL_AM_SDATA));
        }
        TWT_CHECK(tw_tl_pe_add_tree(s->rel) == TW_OK);
    }
    /* The address exchange: each rank's incarnation. */
    for (int r = 0; r < 2; r++) {
        unsigned char addr[64];
        size_t len = 0;
        TWT_CHECK(tw_tl_addr_pack(sides[r].rel, addr, sizeof(addr), &len) == TW_OK);
        TWT_CHECK(tw_tl_addr_connect(sides[1 - r].rel, r, addr, len) == TW_OK);
    }
    for (int r = 0; r < 2; r++) {
        TWT_CHECK(tw_tl_reachable(sides[r].rel, 1 - r));
        tw_tl_ready_tree(sides[r].rel);
    }
    memset(dark, 0, sizeof(dark));
    memset(refuse, 0, sizeof(refuse));
    memset(carried, 0, sizeof(carried));
    memset(mute, 0, sizeof(mute));
    filter = NULL;
}

static void sides_close(void)
{
    while (q_head != NULL) {
        frame_t *f = q_head;
        q_head = f->next;
        frame_free(f);
    }
    q_tail = NULL;
    for (int r = 0; r < 2; r++) {
        side_t *s = &sides[r];
        tw_tl_close(s->rel); /* and its paths */
        tw_pe_destroy(s->pe);
    }
}

static uint64_t stat(int r, unsigned id)
{
    return tw_stats_read(sides[r].rel->stats, id);
}

/* Deliver what is on the wire (through the filter) and run both ranks'
 * timers, for up to @p ms or until @p done says so. */
static bool pump(int ms, bool (*done)(void))
{
    uint64_t end = vnow + (uint64_t)ms * 1000000u;

    do {
        while (q_head != NULL) {
            frame_t *f = q_head;
            q_head = f->next;
            if (q_head == NULL) {
                q_tail = NULL;
            }
            if ((filter == NULL || filter(f)) && !mute[f->dst]) {
                endpoint_t *e = &eps[f->dst][f->path];
                last_heard[f->dst] = vnow;
                e->iface->recv(e->iface->recv_arg, f->src, f->am_id, f->bytes, f->hdr_len,
                               f->bytes + f->hdr_len, f->len);
            }
            frame_free(f);
        }
        for (int r = 0; r < 2; r++) {
            if (!mute[r]) {
                tw_pe_progress(sides[r].pe);
            }
        }
        if (done != NULL && done()) {
            return true;
        }
        vnow += STEP_NS;
    } while (vnow < end);
    return done == NULL;
}

/* ---- sending ---------------------------------------------------------- */

typedef struct sreq {
    tw_tl_comp_t comp;
    tw_status_t status;
    int done;
} sreq_t;

static sreq_t sreqs[2][MAX_MSGS]; /* by sending rank and message index */
/* zcopy buffers stay until the case ends (rel reads them until acked) */
static unsigned char *zbufs[MAX_MSGS];
static size_t zlens[MAX_MSGS];
static unsigned nzbufs;

static void zbuf_keep(unsigned char *b, size_t len)
{
    TWT_CHECK(nzbufs < MAX_MSGS);
    zbufs[nzbufs] = b;
    zlens[nzbufs++] = len;
}

static uint64_t next_out[2];
static unsigned char payload[PAYLOAD_MAX];

static void sreq_done(tw_tl_comp_t *comp, tw_status_t status)
{
    sreq_t *q = (sreq_t *)comp;
    q->status = status;
    q->done++;
}

/* Message number next_out[r] from rank r: eager when small, else zcopy
 * with a completion in sreqs[]. */
static tw_status_t send_msg(int r, size_t len)
{
    unsigned char hdr[UHDR] = {0};
    uint64_t idx = next_out[r], hlen = len;
    tw_tl_iface_t *rel = sides[r].rel;
    tw_status_t st;

    memcpy(hdr, &idx, 8);
    memcpy(hdr + 8, &hlen, 8);
    fill(payload, len, idx);
    if (len <= 8192) {
        st = rel->ops->am_short(rel, 1 - r, 7, hdr, UHDR, payload, len);
    } else {
        sreq_t *q = &sreqs[r][idx % MAX_MSGS];
        *q = (sreq_t){.comp = {.cb = sreq_done}};
        /* zcopy reads the buffer until acked: keep one per message */
        unsigned char *buf = tw_malloc(len);
        TWT_CHECK(buf != NULL);
        memcpy(buf, payload, len);
        st = rel->ops->am_zcopy(rel, 1 - r, 7, hdr, UHDR, buf, len, &q->comp);
        zbuf_keep(buf, len);
    }
    if (st == TW_OK) {
        next_out[r]++;
    }
    return st;
}

static void zbufs_free(void)
{
    for (unsigned i = 0; i < nzbufs; i++) {
        tw_free(zbufs[i], zlens[i]);
    }
    nzbufs = 0;
}

static uint64_t want_delivered;
static bool all_delivered(void)
{
    return sides[1].delivered >= want_delivered;
}

static void case_begin(const char *name)
{
    printf("  %s\n", name);
    fflush(stdout);
    next_out[0] = next_out[1] = 0;
    dropped = 0;
}

static void case_end(void)
{
    sides_close();
    zbufs_free();
}

/* ---- frame inspection ------------------------------------------------- */

/* A data frame in either form (a whole small message goes short). */
static bool is_data_frame(const frame_t *f)
{
    return f->am_id == TW_REL_AM_DATA || f->am_id == TW_REL_AM_SDATA;
}

static bool frame_hdr(const frame_t *f, tw_rel_hdr_t *h)
{
    return tw_rel_parse(f->am_id, f->bytes, f->hdr_len, f->bytes + f->hdr_len, f->len, h, NULL) ==
           TW_REL_PARSE_OK;
}

static bool is_data(const frame_t *f, uint32_t frag, uint32_t nfrags)
{
    tw_rel_hdr_t h;
    return is_data_frame(f) && frame_hdr(f, &h) && h.frag == frag && h.nfrags == nfrags;
}

/* Drop the first frame that @p match accepts, once. */
static bool (*match)(const frame_t *f);
static int dropped_once;
static bool drop_first_match(frame_t *f)
{
    if (!dropped_once && match(f)) {
        dropped_once = 1;
        return false;
    }
    return true;
}

static bool m_first_frag(const frame_t *f)
{
    return f->src == 0 && is_data(f, 0, 3);
}
static bool m_last_frag(const frame_t *f)
{
    return f->src == 0 && is_data(f, 2, 3);
}
static bool m_ack(const frame_t *f)
{
    return f->src == 1 && f->am_id == TW_REL_AM_ACK;
}
static bool m_first_frag_or_nack(frame_t *f)
{
    static int n;
    if (f->src == 0 && is_data(f, 0, 3) && !(n & 1)) {
        n |= 1;
        return false;
    }
    if (f->src == 1 && f->am_id == TW_REL_AM_NACK && !(n & 2)) {
        n |= 2;
        return false;
    }
    return true;
}

/* A message of 3 fragments: 32 + 4064 | 4096 | rest. */
#define LEN3 10000u

static void one_lost(const char *name, bool (*m)(const frame_t *), uint64_t retransmits,
                     uint64_t dups, uint64_t out_of_order, uint64_t nacks)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin(name);
    sides_open(&cfg, 1);
    match = m;
    dropped_once = 0;
    filter = drop_first_match;
    TWT_CHECK(send_msg(0, m == m_ack ? 100 : LEN3) == TW_OK);
    want_delivered = 1;
    TWT_CHECK(pump(2000, all_delivered));
    TWT_CHECK(pump(100, NULL)); /* acks settle */
    TWT_CHECK(dropped_once == 1);
    TWT_EQ(sides[1].delivered, 1u);
    TWT_EQ(sides[1].bad, 0u);
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), retransmits);
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), dups);
    TWT_EQ(stat(1, TW_REL_STAT_OUT_OF_ORDER), out_of_order);
    TWT_EQ(stat(1, TW_REL_STAT_NACKS_SENT), nacks);
    TWT_EQ(stat(1, TW_REL_STAT_DELIVERED), 1u);
    if (m != m_ack) {
        TWT_EQ(sreqs[0][0].done, 1);
        TWT_EQ(sreqs[0][0].status, TW_OK);
    }
    case_end();
}

static void test_basic(void)
{
    static const size_t sizes[] = {0, 1, 100, 4064, 4065, 8192, 8193, 50000, PAYLOAD_MAX};
    tw_rel_cfg_t cfg = test_cfg();

    case_begin("basic");
    sides_open(&cfg, 1);
    for (int rep = 0; rep < 4; rep++) {
        for (size_t i = 0; i < TWT_ARRAY_SIZE(sizes); i++) {
            TWT_CHECK(send_msg(0, sizes[i]) == TW_OK);
            TWT_CHECK(send_msg(1, sizes[i]) == TW_OK);
            pump(0, NULL);
        }
    }
    want_delivered = next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    TWT_CHECK(pump(20, NULL));
    for (int r = 0; r < 2; r++) {
        TWT_EQ(sides[r].delivered, next_out[1 - r]);
        TWT_EQ(sides[r].bad, 0u);
        TWT_EQ(stat(r, TW_REL_STAT_RETRANSMITS), 0u);
        TWT_EQ(stat(r, TW_REL_STAT_DUPLICATES), 0u);
        TWT_EQ(stat(r, TW_REL_STAT_CRC_FAILURES), 0u);
    }
    for (uint64_t i = 0; i < next_out[0]; i++) {
        if (sreqs[0][i].comp.cb != NULL) {
            TWT_EQ(sreqs[0][i].done, 1);
            TWT_EQ(sreqs[0][i].status, TW_OK);
        }
    }
    case_end();
}

/* Replay a data frame after its message completed. */
static frame_t *kept;
static bool keep_first_data(frame_t *f)
{
    if (kept == NULL && f->src == 0 && is_data_frame(f)) {
        kept = frame_copy(f->src, f->dst, f->path, f->am_id, f->bytes, f->hdr_len,
                          f->bytes + f->hdr_len, f->len);
    }
    return true;
}

static void test_dup_after_completion(void)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin("duplicate after completion");
    sides_open(&cfg, 1);
    kept = NULL;
    filter = keep_first_data;
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    want_delivered = 1;
    TWT_CHECK(pump(2000, all_delivered));
    TWT_CHECK(pump(20, NULL));
    TWT_CHECK(kept != NULL);
    uint64_t acks = stat(1, TW_REL_STAT_ACKS_SENT);
    enqueue(kept);
    kept = NULL;
    TWT_CHECK(pump(20, NULL));
    TWT_EQ(sides[1].delivered, 1u);
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), 1u);
    TWT_EQ(stat(1, TW_REL_STAT_ACKS_SENT), acks + 1);
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), 0u);
    case_end();
}

/* Flip a bit of the checksum field of the first data frame, in the form
 * @p crc_form expects. */
static uint8_t crc_form;
static bool crc_done;
static bool corrupt_crc_once(frame_t *f)
{
    if (!crc_done && f->src == 0 && f->am_id == crc_form) {
        crc_done = true;
        f->bytes[crc_form == TW_REL_AM_SDATA ? offsetof(tw_rel_shdr_t, crc)
                                             : offsetof(tw_rel_hdr_t, crc)] ^= 0x10;
    }
    return true;
}

/* @p len: 100 bytes go in one short frame, LEN3 in three long ones. */
static void test_crc_field(size_t len)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin(len == 100 ? "corrupt checksum field (short form)"
                          : "corrupt checksum field (long form)");
    sides_open(&cfg, 1);
    crc_form = len == 100 ? TW_REL_AM_SDATA : TW_REL_AM_DATA;
    crc_done = false;
    filter = corrupt_crc_once;
    TWT_CHECK(send_msg(0, len) == TW_OK);
    want_delivered = 1;
    TWT_CHECK(pump(2000, all_delivered));
    TWT_CHECK(pump(50, NULL));
    TWT_EQ(sides[1].delivered, 1u);
    TWT_EQ(stat(1, TW_REL_STAT_CRC_FAILURES), 1u);
    /* The checksum failure draws a NACK, which resends fragment 0. In
     * the long form fragments 1 and 2 arrive after the lost one and are
     * held: the gap draws the second NACK, its resend is suppressed (the
     * fragment went out less than a round trip ago). */
    TWT_EQ(stat(1, TW_REL_STAT_NACKS_SENT), len == 100 ? 1u : 2u);
    TWT_EQ(stat(1, TW_REL_STAT_OUT_OF_ORDER), len == 100 ? 0u : 2u);
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), 1u);
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), 0u);
    case_end();
}

/* A well-formed data frame from rank 0's incarnation @p src_epoch to rank
 * 1's @p dst_epoch, in the long form or the short one (@p sform). */
static void inject_frame(bool sform, uint32_t seq, uint32_t src_epoch, uint32_t dst_epoch)
{
    union {
        tw_rel_hdr_t h;
        tw_rel_shdr_t s;
    } u;
    size_t hl = sform ? sizeof(u.s) : sizeof(u.h), skip = sform ? sizeof(u.s.crc) : 0;
    unsigned char buf[sizeof(tw_rel_hdr_t) + UHDR];
    unsigned char data[16];
    unsigned char whole[sizeof(buf) + sizeof(data)];
    uint32_t crc;

    memset(&u, 0, sizeof(u));
    if (sform) {
        u.s = (tw_rel_shdr_t){.version = TW_REL_VERSION,
                              .flags = TW_REL_F_ACK,
                              .am_id = 7,
                              .hdr_len = UHDR,
                              .seq = seq,
                              .epochs = tw_rel_epochs(src_epoch, dst_epoch)};
    } else {
        u.h = (tw_rel_hdr_t){.version = TW_REL_VERSION,
                             .type = TW_REL_T_DATA,
                             .am_id = 7,
                             .hdr_len = UHDR,
                             .src_epoch = src_epoch,
                             .dst_epoch = dst_epoch,
                             .seq = seq,
                             .nfrags = 1,
                             .msg_len = sizeof(data),
                             .len = sizeof(data)};
    }
    memset(data, 0xee, sizeof(data));
    memcpy(buf, &u, hl);
    memset(buf + hl, 0x3c, UHDR);
    crc = sform ? tw_rel_short_crc(buf, hl + UHDR, data, sizeof(data))
                : tw_rel_crc(buf, hl + UHDR, data, sizeof(data));
    /* The wire format's definition: CRC32C over the header (the long
     * form's with crc = 0, the short form's after its crc field), the
     * upper header and the payload, in one run. */
    memcpy(whole, buf, hl + UHDR);
    memcpy(whole + hl + UHDR, data, sizeof(data));
    TWT_EQ(crc, tw_crc32c(0, whole + skip, hl + UHDR + sizeof(data) - skip));
    memcpy(buf + (sform ? offsetof(tw_rel_shdr_t, crc) : offsetof(tw_rel_hdr_t, crc)), &crc,
           sizeof(crc));
    tw_rel_inject(sides[1].rel, 0, 0, sform ? TW_REL_AM_SDATA : TW_REL_AM_DATA, buf, hl + UHDR,
                  data, sizeof(data));
}

static void test_far_and_stale(void)
{
    tw_rel_cfg_t cfg = test_cfg();
    uint32_t e0, e1, old_e0;

    case_begin("sequence far ahead / behind, replay from an old incarnation");
    sides_open(&cfg, 1);
    old_e0 = tw_rel_epoch(sides[0].rel);
    case_end();
    sides_open(&cfg, 1);
    e0 = tw_rel_epoch(sides[0].rel);
    e1 = tw_rel_epoch(sides[1].rel);
    TWT_CHECK(e0 != old_e0);
    inject_frame(false, 1000, e0, e1);
    TWT_EQ(stat(1, TW_REL_STAT_OUT_OF_WINDOW), 1u);
    inject_frame(false, (uint32_t)-1000, e0, e1);
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), 1u);
    inject_frame(false, 0, old_e0, e1); /* the right sequence number, the old sender */
    TWT_EQ(stat(1, TW_REL_STAT_STALE), 1u);
    inject_frame(false, 0, e0, e1 ^ 1); /* meant for another incarnation of us */
    TWT_EQ(stat(1, TW_REL_STAT_STALE), 2u);
    /* the same in the short form */
    inject_frame(true, 1000, e0, e1);
    TWT_EQ(stat(1, TW_REL_STAT_OUT_OF_WINDOW), 2u);
    inject_frame(true, (uint32_t)-1000, e0, e1);
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), 2u);
    inject_frame(true, 0, old_e0, e1);
    TWT_EQ(stat(1, TW_REL_STAT_STALE), 3u);
    inject_frame(true, 0, e0, e1 ^ 1);
    TWT_EQ(stat(1, TW_REL_STAT_STALE), 4u);
    inject_frame(true, 0, e0 ^ 1, e1 ^ 1); /* both changed: still not ours */
    TWT_EQ(stat(1, TW_REL_STAT_STALE), 5u);
    TWT_EQ(sides[1].delivered, 0u);
    /* and the real sequence still flows */
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    want_delivered = 1;
    TWT_CHECK(pump(2000, all_delivered));
    TWT_EQ(sides[1].bad, 0u);
    case_end();
}

/* Lose @p permille of all frames (either way), or flip one bit. */
static unsigned lose_permille, corrupt_permille;
static uint64_t corrupted;
static bool lossy_filter(frame_t *f)
{
    if (twt_rand(&rng_state) % 1000 < lose_permille) {
        return false;
    }
    if (twt_rand(&rng_state) % 1000 < corrupt_permille) {
        size_t bit = twt_rand(&rng_state) % ((f->hdr_len + f->len) * 8);
        f->bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        corrupted++;
    }
    return true;
}

static bool all_delivered_both(void)
{
    return sides[1].delivered >= next_out[0] && sides[0].delivered >= next_out[1];
}

/* Stream @p n messages each way through the lossy filter. */
static void stream(int n, size_t max_len)
{
    for (int i = 0; i < n; i++) {
        size_t len = (size_t)(twt_rand(&rng_state) % 8 == 0 ? twt_rand(&rng_state) % max_len
                                                            : twt_rand(&rng_state) % 300);
        for (int r = 0; r < 2; r++) {
            tw_status_t st;
            while ((st = send_msg(r, len)) == TW_ERR_AGAIN) {
                pump(1, NULL);
            }
            TWT_CHECK(st == TW_OK);
        }
        if (i % 8 == 0) {
            pump(0, NULL);
        }
    }
    TWT_CHECK(pump(20000, all_delivered_both));
    for (int r = 0; r < 2; r++) {
        TWT_EQ(sides[r].delivered, next_out[1 - r]);
        TWT_EQ(sides[r].bad, 0u);
        TWT_EQ(sides[r].downs, 0);
    }
}

static void test_wrap(void)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin("sequence wraparound with 5% loss");
    cfg.seq_start = UINT32_MAX - 40;
    cfg.rto_ns = 2000000;
    cfg.rto_max_ns = 10000000;
    sides_open(&cfg, 1);
    lose_permille = 50;
    corrupt_permille = 0;
    filter = lossy_filter;
    stream(400 / twt_scale() + 100, 20000);
    TWT_CHECK(stat(0, TW_REL_STAT_RETRANSMITS) > 0);
    case_end();
}

static void test_corrupt(int msgs, size_t max_len)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin("1% of frames corrupted");
    cfg.rto_ns = 2000000;
    cfg.rto_max_ns = 10000000;
    sides_open(&cfg, 1);
    lose_permille = 0;
    corrupt_permille = 10;
    corrupted = 0;
    filter = lossy_filter;
    stream(msgs, max_len);
    TWT_CHECK(corrupted > 0);
    /* every corrupted frame was caught (a bit flipped in a frame still
     * queued behind a retransmission may be the same fragment twice) */
    TWT_EQ(stat(0, TW_REL_STAT_CRC_FAILURES) + stat(1, TW_REL_STAT_CRC_FAILURES), corrupted);
    printf("    %llu data fragments sent, %llu frames corrupted, all caught, 0 corrupted "
           "deliveries\n",
           (unsigned long long)(stat(0, TW_REL_STAT_FRAGS_SENT) + stat(1, TW_REL_STAT_FRAGS_SENT)),
           (unsigned long long)corrupted);
    case_end();
}

static bool path1_used(void)
{
    return sides[1].delivered >= next_out[0];
}

static void test_failover(void)
{
    tw_rel_cfg_t cfg = test_cfg();
    uint64_t t0;

    case_begin("failover to path 1, fail-back to path 0");
    cfg.rto_ns = 2000000;
    cfg.rto_max_ns = 10000000;
    cfg.path_timeout_ns = 100000000; /* 100 ms */
    sides_open(&cfg, 2);
    for (int i = 0; i < 20; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    want_delivered = next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    dark[0] = true;
    t0 = vnow;
    for (int i = 0; i < 20; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    TWT_CHECK(pump(3000, path1_used));
    uint64_t took = vnow - t0;
    printf("    traffic moved to path 1 after %.0f ms (path timeout 100 ms)\n", took / 1e6);
    TWT_CHECK(took < 1000000000u);
    TWT_EQ(stat(0, TW_REL_STAT_FAILOVERS), 1u);
    TWT_EQ(sides[1].delivered, next_out[0]);
    TWT_EQ(sides[1].bad, 0u);
    TWT_EQ(sides[0].downs + sides[1].downs, 0);
    /* heal: probes (every 20 ms, 3 answers) bring traffic back */
    dark[0] = false;
    TWT_CHECK(pump(500, NULL));
    TWT_EQ(stat(0, TW_REL_STAT_FAILBACKS), 1u);
    for (int i = 0; i < 20; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    want_delivered = next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    TWT_EQ(sides[1].bad, 0u);
    case_end();
}

/* Path 0's transport tells both ranks the peer is down through it (as
 * tw_tl_peer_down_fn_t: @p why). */
static void path0_down(tw_status_t why)
{
    for (int r = 0; r < 2; r++) {
        tw_tl_iface_t *path = eps[r][0].iface;
        path->peer_down(path->peer_down_arg, 1 - r, why);
    }
}

/* @p n messages from rank 0, all delivered. */
static void stream_small(int n)
{
    for (int i = 0; i < n; i++) {
        TWT_CHECK(send_msg(0, 1000) == TW_OK);
    }
    want_delivered = next_out[0];
    TWT_CHECK(pump(2000, all_delivered));
    TWT_EQ(sides[1].bad, 0u);
}

/* A path down for now (TW_ERR_TRANSPORT, as verbs reports a port that went
 * down): fail over at once, probe, fail back once the transport takes
 * sends again. @p refused_first: its sends are refused before its
 * peer_down runs (the transport's engine reports later). @p why: what the
 * report says (TW_ERR_PEER_FAILED for contrast: dead, never probed). */
static void fornow_case(const char *name, bool refused_first, tw_status_t why)
{
    tw_rel_cfg_t cfg = test_cfg();
    bool back = why == TW_ERR_TRANSPORT;

    case_begin(name);
    sides_open(&cfg, 2);
    stream_small(20);
    TWT_EQ(carried[1], 0u);
    refuse[0] = TW_ERR_TRANSPORT;
    if (refused_first) {
        stream_small(20); /* the first DATA refused is the news */
        path0_down(why);
    } else {
        path0_down(why);
        stream_small(20);
    }
    TWT_EQ(stat(0, TW_REL_STAT_FAILOVERS), 1u);
    TWT_CHECK(carried[1] >= 20);
    /* Still down: probes (every 20 ms) are refused, nothing fails back,
     * nobody fails. */
    TWT_CHECK(pump(300, NULL));
    TWT_EQ(stat(0, TW_REL_STAT_FAILBACKS), 0u);
    TWT_EQ(stat(1, TW_REL_STAT_FAILBACKS), 0u);
    /* Back: three answered probes later, path 0 carries the stream again
     * (for good: never). */
    refuse[0] = TW_OK;
    TWT_CHECK(pump(300, NULL));
    TWT_EQ(stat(0, TW_REL_STAT_FAILBACKS), (back ? 1u : 0u));
    TWT_EQ(stat(1, TW_REL_STAT_FAILBACKS), (back ? 1u : 0u));
    uint64_t c0 = carried[0], c1 = carried[1];
    stream_small(20);
    if (back) {
        TWT_CHECK(carried[0] >= c0 + 20);
        TWT_EQ(carried[1], c1);
    } else {
        TWT_EQ(carried[0], c0);
        TWT_CHECK(carried[1] >= c1 + 20);
    }
    TWT_EQ(sides[1].delivered, next_out[0]);
    TWT_EQ(sides[0].downs + sides[1].downs, 0);
    TWT_EQ(stat(0, TW_REL_STAT_PEER_FAILURES) + stat(1, TW_REL_STAT_PEER_FAILURES), 0u);
    case_end();
}

static void test_fornow(void)
{
    fornow_case("a path down for now fails over, then back", false, TW_ERR_TRANSPORT);
    fornow_case("... refused before its report", true, TW_ERR_TRANSPORT);
    fornow_case("a path down for good is not probed", false, TW_ERR_PEER_FAILED);
}

static bool peer_down_seen(void)
{
    return sides[0].downs > 0;
}

static void test_nopath(void)
{
    tw_rel_cfg_t cfg = test_cfg();
    uint64_t t0;

    case_begin("the only path dies");
    cfg.rto_ns = 2000000;
    cfg.rto_max_ns = 10000000;
    cfg.path_timeout_ns = 100000000;
    sides_open(&cfg, 1);
    dark[0] = true;
    t0 = vnow;
    for (int i = 0; i < 10; i++) {
        TWT_CHECK(send_msg(0, 20000) == TW_OK); /* zcopy: completions to check */
    }
    TWT_CHECK(pump(3000, peer_down_seen));
    double ms = (vnow - t0) / 1e6;
    printf("    peer failed after %.0f ms (path timeout 100 ms)\n", ms);
    TWT_CHECK(ms < 1000);
    TWT_EQ(sides[0].downs, 1);
    TWT_EQ(sides[0].down_why, TW_ERR_PEER_FAILED);
    for (int i = 0; i < 10; i++) {
        TWT_EQ(sreqs[0][i].done, 1);
        TWT_EQ(sreqs[0][i].status, TW_ERR_PEER_FAILED);
    }
    tw_tl_iface_t *rel = sides[0].rel;
    unsigned char b[8] = {0};
    TWT_EQ(rel->ops->am_short(rel, 1, 7, b, 8, b, 8), TW_ERR_PEER_FAILED);
    TWT_CHECK(pump(50, NULL));
    TWT_EQ(sides[0].downs, 1); /* once */
    case_end();
}

/* In manual progress a send into an empty window is stamped with the
 * peer's latest clock reading (here: the ack of the message before): the
 * pass that finds it due times it from then on, so its first timeout
 * comes between one and two TW_REL_RTO after the send -- also when that
 * reading is much older than the send. */
static void test_early_stamp(void)
{
    tw_rel_cfg_t cfg = test_cfg();
    int rto_ms = (int)(cfg.rto_ns / 1000000);

    case_begin("a send stamped with an earlier reading: timed from the pass");
    sides_open(&cfg, 1);
    /* The first send reads the clock (no round-trip sample yet); its ack
     * gives the sample. */
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    TWT_CHECK(pump(5, NULL));
    dark[0] = true;
    TWT_CHECK(send_msg(0, 100) == TW_OK); /* lost */
    TWT_CHECK(pump(rto_ms + 5, NULL));    /* a clock read at the send would resend by now */
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), 0u);
    TWT_CHECK(pump(rto_ms, NULL));
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), 1u);
    dark[0] = false;
    want_delivered = 2;
    TWT_CHECK(pump(500, all_delivered));
    TWT_CHECK(pump(5, NULL));
    uint64_t resent = stat(0, TW_REL_STAT_RETRANSMITS);
    /* A pause: no pass runs, rank 0's latest reading ages by 10 RTO. */
    vnow += 10 * cfg.rto_ns;
    dark[0] = true;
    TWT_CHECK(send_msg(0, 100) == TW_OK); /* lost */
    TWT_CHECK(pump(2, NULL));             /* passes ran: due, stamped, not resent */
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), resent);
    TWT_CHECK(pump(rto_ms + 2, NULL));
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), resent + 1);
    dark[0] = false;
    want_delivered = 3;
    TWT_CHECK(pump(500, all_delivered));
    TWT_EQ(sides[1].bad, 0u);
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), 0u);
    case_end();
}

/* As rank 0's first data frame goes to rank 1, take its second off the
 * wire: rank 1 gets it from inside the upcall of the first. */
static bool hold_second_data(frame_t *f)
{
    static bool done;
    if (!done && f->src == 0 && is_data_frame(f)) {
        for (frame_t **pp = &q_head, *prev = NULL; *pp != NULL; prev = *pp, pp = &(*pp)->next) {
            if ((*pp)->src == 0 && is_data_frame(*pp)) {
                reenter = *pp;
                *pp = reenter->next;
                if (q_tail == reenter) {
                    q_tail = prev;
                }
                done = true;
                break;
            }
        }
    }
    return true;
}

static void test_arrival_while_delivering(void)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin("an arrival while the deliverer hands one up: queued, handed up after it");
    sides_open(&cfg, 1);
    filter = hold_second_data;
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    want_delivered = 2;
    TWT_CHECK(pump(100, all_delivered));
    TWT_CHECK(reenter == NULL);
    TWT_EQ(reenter_delivered, 1u); /* not handed up from inside the first upcall */
    TWT_EQ(sides[1].delivered, 2u);
    TWT_EQ(sides[1].bad, 0u);
    TWT_CHECK(pump(50, NULL));
    TWT_EQ(stat(1, TW_REL_STAT_DUPLICATES), 0u);
    TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), 0u);
    case_end();
}

/* After a pause of progress longer than the keepalive bound, both sides
 * see the other as silent -- from readings older than the frames that
 * arrive first: they ping before they fail anyone. */
static void keepalive_open(const char *name)
{
    tw_rel_cfg_t cfg = test_cfg();

    case_begin(name);
    cfg.keepalive_ns = 50000000; /* 50 ms x 3 */
    cfg.misses = 3;
    sides_open(&cfg, 1);
}

static void test_pause(void)
{
    keepalive_open("a pause longer than the keepalive bound: ping first, fail nobody");
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    want_delivered = 1;
    TWT_CHECK(pump(100, all_delivered));
    vnow += 1000000000ull; /* 1 s, 20 x the keepalive */
    TWT_CHECK(send_msg(0, 100) == TW_OK);
    want_delivered = 2;
    TWT_CHECK(pump(100, all_delivered));
    TWT_CHECK(pump(300, NULL));
    TWT_EQ(sides[0].downs + sides[1].downs, 0);
    TWT_EQ(stat(0, TW_REL_STAT_PEER_FAILURES) + stat(1, TW_REL_STAT_PEER_FAILURES), 0u);
    TWT_CHECK(stat(0, TW_REL_STAT_PINGS) > 0 && stat(1, TW_REL_STAT_PINGS) > 0);
    TWT_EQ(sides[1].bad, 0u);
    case_end();
}

static void test_keepalive(void)
{
    keepalive_open("keepalive: a hung peer");
    TWT_CHECK(pump(400, NULL)); /* pings answered: nobody fails */
    TWT_EQ(sides[0].downs + sides[1].downs, 0);
    TWT_CHECK(stat(0, TW_REL_STAT_PINGS) > 0);
    mute[1] = true;
    TWT_CHECK(pump(3000, peer_down_seen));
    double ms = (vnow - last_heard[0]) / 1e6;
    printf("    hung peer failed %.0f ms after it was last heard (bound 150 ms)\n", ms);
    TWT_CHECK(ms >= 150 && ms <= 150 * 1.1);
    TWT_EQ(sides[0].down_why, TW_ERR_PEER_FAILED);
    case_end();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "b6") == 0) {
        /* Matrix row B6: 10^6 fragments (both ways) with 1% corrupted. */
        test_corrupt((int)twt_scaled(500000, 20000), 8000); /* eager: no buffers kept */
        printf("rel b6: passed\n");
        return 0;
    }
    test_basic();
    one_lost("first fragment lost", m_first_frag, 1, 0, 2, 1);
    one_lost("last fragment lost", m_last_frag, 1, 0, 0, 0);
    one_lost("ack lost", m_ack, 1, 1, 0, 0);
    {
        tw_rel_cfg_t cfg = test_cfg();
        case_begin("nack lost");
        sides_open(&cfg, 1);
        filter = m_first_frag_or_nack;
        TWT_CHECK(send_msg(0, LEN3) == TW_OK);
        want_delivered = 1;
        TWT_CHECK(pump(2000, all_delivered));
        TWT_CHECK(pump(50, NULL));
        TWT_EQ(sides[1].delivered, 1u);
        TWT_EQ(stat(1, TW_REL_STAT_NACKS_SENT), 1u);
        TWT_EQ(stat(0, TW_REL_STAT_RETRANSMITS), 1u);
        case_end();
    }
    test_dup_after_completion();
    test_crc_field(100);
    test_crc_field(LEN3);
    test_far_and_stale();
    test_wrap();
    test_corrupt((int)twt_scaled(4000, 500), 12000);
    test_failover();
    test_fornow();
    test_nopath();
    test_keepalive();
    test_early_stamp();
    test_arrival_while_delivering();
    test_pause();
    printf("rel: all cases passed\n");
    return 0;
}
