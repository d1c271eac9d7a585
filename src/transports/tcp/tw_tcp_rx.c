/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP receive side: reading a socket, parsing its frames, and the receive
 * side of rendezvous.
 *
 * Worker polling. tw_progress and tw_cq_wait poll the lanes whose engine
 * is idle (the poll slot, tw_tcp_lane.c), as over shm: they read and deliver
 * the frames of inline ids (params.inline_am_ids: handlers that run no
 * user code) themselves. A frame of any other id stays in the buffer for
 * the engine (ep->reparse), and a failure found there is reported
 * (peer_down) by the engine: user code runs on progress threads only.
 *
 * Rendezvous, sender side (large messages). An am_zcopy of TW_TCP_RNDV
 * bytes or more arrives as an RTS (tw_tcp_tx.c): the headers, the length
 * and the sender's cookie; the payload waits at the sender. It is
 * announced (recv_rndv) with nothing staged: the handle keeps the cookie,
 * the length, and the CTS frame it will send (made now, so that sending it
 * cannot fail later) -- a few hundred bytes per announcement, whatever the
 * message's size; that is all an unmatched large message costs here.
 * rndv_get(dst, n) sends CTS(cookie, min(n, len)) -- only what fits: a
 * truncating receive reads nothing it drops -- and queues the handle on
 * the peer's pull list; n == 0 sends CTS(cookie, 0), which releases the
 * sender (its send completes TW_OK) and completes the pull at once. The
 * sender answers CTSs in order with DATA(cookie, n) frames, whose bytes
 * are read from the socket straight into dst; the last byte sends
 * DONE(cookie) and completes the pull. A DATA that is not the answer to
 * the oldest CTS (another cookie, another length) is a bad frame: the
 * peer fails. The peer's failure completes the pulls waiting on it with
 * TW_ERR_PEER_FAILED (tw_tcp_ep_close), and a later rndv_get on one of
 * its handles at once; the iface's close frees handles never asked for
 * (the peer sees our FIN and its sends complete TW_ERR_PEER_FAILED).
 *
 * Rendezvous, receive side (medium messages of inline ids). A frame of an
 * inline id whose payload is TW_TCP_RNDV_MIN or more (and less than the
 * sender's TW_TCP_RNDV) is announced as soon as its header is in; if a
 * receive matches, rndv_get names the user's buffer and the payload is
 * read from the socket straight into it (past a truncating receive's
 * length it is read and dropped). Unmatched, it is staged in a buffer of
 * its own, and a later rndv_get copies out what arrived and takes the rest
 * directly. Its sender completes once the socket took the frame.
 *
 * Either way rndv_get from another thread is applied by the handle's lane
 * (a command), and a worker that runs the lane leaves the RTS and DATA of
 * ids that are not inline to the engine (their completion runs user
 * code). A bad frame fails the peer with one log line naming why
 * (tw_tcp_fail_bad, c->bad).
 */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/tw_bytes.h"
#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/tcp/tw_tcp_int.h"

/* Payloads of inline ids from this size on are announced to the layer
 * above as a rendezvous (recv_rndv) before their bytes are read, so a
 * matched receive takes them straight from the socket into the user's
 * buffer. */
#define TW_TCP_RNDV_MIN (32u * 1024u)

void tw_tcp_rndv_free(tw_tl_rndv_t *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
    if (h->buf != NULL) {
        tw_free(h->buf, h->len);
    }
    if (h->cts != NULL) {
        tw_tcp_frame_done(h->lane, h->cts, TW_ERR_CANCELED); /* never sent */
    }
    tw_free(h, sizeof(*h));
}

/* Complete the pulls waiting on @p ep's DATA with @p st. Thread: engine
 * or try-lock holder of the peer's lane. */
void tw_tcp_pulls_fail(tw_tcp_ep_t *ep, tw_status_t st)
{
    while (ep->pull_head != NULL) {
        tw_tl_rndv_t *h = ep->pull_head;
        tw_tl_comp_t *comp = h->comp;
        ep->pull_head = h->next_pull;
        tw_tcp_rndv_free(h);
        comp->cb(comp, st);
    }
    ep->pull_tail = NULL;
}

/* Fail @p c's peer for the bad frame c->bad names: one log line. Thread:
 * engine or try-lock holder of @p c's lane. */
void tw_tcp_fail_bad(tw_tcp_conn_t *c)
{
    tw_tcp_iface_t *tcp = c->lane->tcp;
    char what[128];

    tw_stats_inc(tcp->super.stats, TW_TL_STAT_BAD_FRAMES);
    snprintf(what, sizeof(what), "bad frame (%s)", c->bad != NULL ? c->bad : "malformed");
    tw_tcp_fail_peer(c->lane, c->peer, TW_ERR_PEER_FAILED, what);
}

/* @p n payload bytes of @p h arrived at @p p (NULL: already in place). */
static void tw_tcp_rndv_sink(tw_tl_rndv_t *h, const unsigned char *p, size_t n)
{
    if (p != NULL && h->have_get && h->got < h->dst_len) {
        size_t k = TW_MIN(n, h->dst_len - h->got);
        memcpy((unsigned char *)h->dst + h->got, p, k);
    } else if (p != NULL && !h->have_get) {
        memcpy(h->buf + h->got, p, n);
    }
    h->got += n;
}

/* The last payload byte of @p h arrived. False: the DONE that tells an
 * RTS's sender cannot be queued (c->bad says so; the peer must fail). */
static bool tw_tcp_rndv_done(tw_tcp_conn_t *c)
{
    tw_tl_rndv_t *h = c->rx;
    bool ok = true;

    c->rx = NULL;
    h->done = true;
    if (h->rts) {
        tw_tl_comp_t *comp = h->comp;
        ok = tw_tcp_queue_rndv_ctl(c->lane, c->peer, NULL, TW_TCP_FRAME_DONE, h->cookie, 0);
        if (!ok) {
            c->bad = "out of memory for a DONE";
        }
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_OK); /* the data is in place either way */
    } else if (h->have_get) {
        tw_tl_comp_t *comp = h->comp;
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_OK);
    } /* else staged: rndv_get copies it out */
    return ok;
}

/* The stream of @p c ended inside a payload. */
void tw_tcp_rndv_abort(tw_tcp_conn_t *c)
{
    tw_tl_rndv_t *h = c->rx;

    c->rx = NULL;
    if (h->have_get) {
        tw_tl_comp_t *comp = h->comp;
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_ERR_PEER_FAILED);
    } else {
        h->failed = true; /* the layer above still holds it */
    }
}

/* rndv_get of an RTS: ask its sender for what fits. */
static void tw_tcp_rndv_apply_rts(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp)
{
    tw_tcp_lane_t *lane = h->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_ep_t *ep = &tcp->eps[h->peer];
    tw_tcp_frame_out_t *cts = h->cts;

    if (ep->failed || tcp->closing) {
        tw_tcp_rndv_free(h);
        comp->cb(comp, ep->failed ? TW_ERR_PEER_FAILED : TW_ERR_CANCELED);
        return;
    }
    h->cts = NULL;
    (void)tw_tcp_queue_rndv_ctl(lane, h->peer, cts, TW_TCP_FRAME_CTS, h->cookie,
                                len); /* has a frame */
    if (len == 0) {
        tw_tcp_rndv_free(h); /* released: the sender completes too */
        comp->cb(comp, TW_OK);
        return;
    }
    tw_stats_add(tcp->super.stats, TW_TL_STAT_RX_BYTES, len);
    h->have_get = true;
    h->dst = dst;
    h->dst_len = len;
    h->len = len; /* what its DATA must carry */
    h->comp = comp;
    h->next_pull = NULL;
    if (ep->pull_tail == NULL) {
        ep->pull_head = h;
    } else {
        ep->pull_tail->next_pull = h;
    }
    ep->pull_tail = h;
}

/* rndv_get on the lane's engine. */
static void tw_tcp_rndv_apply(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp)
{
    tw_tcp_iface_t *tcp = h->lane->tcp;

    if (len > h->len) {
        len = h->len;
    }
    if (h->rts) {
        tw_tcp_rndv_apply_rts(h, dst, len, comp);
        return;
    }
    if (h->failed) {
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_ERR_PEER_FAILED);
        return;
    }
    if (h->got > 0 && len > 0) {
        memcpy(dst, h->buf, TW_MIN(h->got, len)); /* what was staged */
    }
    tw_stats_add(tcp->super.stats, TW_TL_STAT_RX_BYTES, len);
    if (h->done) {
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_OK);
        return;
    }
    if (h->buf != NULL) {
        tw_free(h->buf, h->len);
        h->buf = NULL;
    }
    h->have_get = true; /* the rest goes straight to dst (or nowhere past len) */
    h->dst = dst;
    h->dst_len = len;
    h->comp = comp;
}

tw_status_t tw_tcp_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                            tw_tl_comp_t *comp)
{
    (void)iface;
    /* From another lane's engine (or a worker): the handle's lane applies it. */
    tw_tl_rndv_pull_on(h->lane->pe, h, &h->pull, tw_tcp_rndv_apply, dst, len, comp);
    return TW_OK;
}

/* A frame of an inline id with @p len payload bytes begins at @p hdr:
 * announce it, and take what of its payload is at hand (@p avail bytes at
 * @p data). */
static bool tw_tcp_rndv_begin(tw_tcp_conn_t *c, uint8_t am_id, const unsigned char *hdr,
                              size_t hdr_len, size_t len, const unsigned char *data, size_t avail)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tl_rndv_t *h = tw_calloc(1, sizeof(*h));

    if (h == NULL) {
        c->bad = "out of memory for its announcement";
        return false;
    }
    h->lane = lane;
    h->peer = c->peer;
    h->len = len;
    h->next = lane->handles.next;
    h->prev = &lane->handles;
    h->next->prev = h;
    lane->handles.next = h;
    c->rx = h;
    tw_stats_inc(tcp->super.stats, TW_TL_STAT_RX_MSGS);
    lane->events++;
    tw_tl_rndv_announce(&tcp->super, c->peer, am_id, hdr, hdr_len, len, h);
    if (!h->have_get && (h->buf = tw_malloc(len)) == NULL) {
        /* Bounded by the sender's TW_TCP_RNDV (and TW_TCP_MAX_LEN, which
         * the parser checked). */
        c->bad = "out of memory staging its payload";
        return false;
    }
    tw_tcp_rndv_sink(h, data, TW_MIN(avail, len));
    if (h->got == len) {
        (void)tw_tcp_rndv_done(c); /* not an RTS: nothing to queue */
    }
    return true;
}

/* ---- receiving ------------------------------------------------------------- */

/* What one step of the frame parser did: MORE (parse on), WAIT (stop:
 * the rest needs more bytes, or the engine), BAD (the stream is bad:
 * c->bad says why). */
enum { TW_TCP_PARSE_MORE, TW_TCP_PARSE_WAIT, TW_TCP_PARSE_BAD };

static int tw_tcp_parse_grow(tw_tcp_conn_t *c, size_t total, size_t *off);

/* Payload bytes of the announced message c->rx at c->in + *@p off (past a
 * truncating receive's length they are only counted). */
static int tw_tcp_parse_payload(tw_tcp_conn_t *c, size_t *off)
{
    size_t n = TW_MIN(c->in_len - *off, c->rx->len - c->rx->got);

    if (n == 0) {
        return TW_TCP_PARSE_WAIT;
    }
    tw_tcp_rndv_sink(c->rx, c->in + *off, n);
    *off += n;
    if (c->rx->got < c->rx->len) {
        return TW_TCP_PARSE_WAIT;
    }
    return tw_tcp_rndv_done(c) ? TW_TCP_PARSE_MORE : TW_TCP_PARSE_BAD;
}

/* The frame at c->in + *@p off runs user code: a worker running the lane
 * leaves it, and what follows it, to the engine. */
static int tw_tcp_parse_hold(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_ep_t *ep = &lane->tcp->eps[c->peer];

    if (!ep->reparse) {
        ep->reparse = true;
        lane->nreparse++;
        tw_pe_wake(lane->pe);
    }
    return TW_TCP_PARSE_WAIT;
}

/* An RTS at c->in + *@p off, all in: announce it, nothing staged. */
static int tw_tcp_parse_rts(tw_tcp_conn_t *c, const tw_tcp_frame_t *f, size_t *off)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    const unsigned char *cookie = c->in + *off + TW_TCP_FRAME_LEN;
    bool engine_only = f->am_id >= 64 || !(tcp->super.inline_am_ids & (1ull << f->am_id));
    tw_tl_rndv_t *h;

    if (tcp->super.recv_rndv == NULL) {
        c->bad = "RTS, but nothing here takes announcements";
        return TW_TCP_PARSE_BAD;
    }
    if (lane->in_worker && engine_only) {
        return tw_tcp_parse_hold(c);
    }
    h = tw_calloc(1, sizeof(*h));
    if (h == NULL || (h->cts = tw_tcp_rndv_ctl_get(lane)) == NULL) {
        if (h != NULL) {
            tw_free(h, sizeof(*h));
        }
        c->bad = "out of memory for its announcement";
        return TW_TCP_PARSE_BAD;
    }
    h->lane = lane;
    h->peer = c->peer;
    h->rts = true;
    h->engine_only = engine_only;
    h->cookie = tw_get64(cookie);
    h->len = (size_t)f->len;
    h->next = lane->handles.next;
    h->prev = &lane->handles;
    h->next->prev = h;
    lane->handles.next = h;
    *off += TW_TCP_FRAME_LEN + f->hdr_len;
    tw_stats_inc(tcp->super.stats, TW_TL_STAT_RX_MSGS);
    lane->events++;
    /* (May pull at once: a CTS is queued, never written, under the parser.) */
    tw_tl_rndv_announce(&tcp->super, c->peer, f->am_id, cookie + TW_TCP_COOKIE_LEN,
                        tw_tcp_frame_am_hdr_len(f), (size_t)f->len, h);
    return TW_TCP_PARSE_MORE;
}

/* A DATA header at c->in + *@p off: the answer to our oldest CTS to this
 * peer, whose bytes now go straight to its destination. */
static int tw_tcp_parse_data(tw_tcp_conn_t *c, const tw_tcp_frame_t *f, size_t *off)
{
    tw_tcp_ep_t *ep = &c->lane->tcp->eps[c->peer];
    tw_tl_rndv_t *h = ep->pull_head;

    if (h == NULL || h->cookie != tw_get64(c->in + *off + TW_TCP_FRAME_LEN)) {
        c->bad = "DATA for no message we asked for";
        return TW_TCP_PARSE_BAD;
    }
    if (f->len != h->len) {
        c->bad = "DATA of another length than asked for";
        return TW_TCP_PARSE_BAD;
    }
    if (c->lane->in_worker && h->engine_only) {
        return tw_tcp_parse_hold(c);
    }
    ep->pull_head = h->next_pull;
    if (ep->pull_head == NULL) {
        ep->pull_tail = NULL;
    }
    *off += TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN;
    c->rx = h; /* the payload: tw_tcp_parse_payload, tw_tcp_read_payload */
    return TW_TCP_PARSE_MORE;
}

/* A rendezvous frame (RTS, CTS, DATA, DONE) at c->in + *@p off. */
static int tw_tcp_parse_rndv_frame(tw_tcp_conn_t *c, const tw_tcp_frame_t *f, size_t *off)
{
    size_t head = TW_TCP_FRAME_LEN + f->hdr_len;
    uint64_t cookie;

    if (c->in_len - *off < head) {
        return tw_tcp_parse_grow(c, head, off);
    }
    switch (f->type) {
    case TW_TCP_FRAME_RTS:
        return tw_tcp_parse_rts(c, f, off);
    case TW_TCP_FRAME_DATA:
        return tw_tcp_parse_data(c, f, off);
    default:
        break;
    }
    cookie = tw_get64(c->in + *off + TW_TCP_FRAME_LEN);
    if (f->type == TW_TCP_FRAME_CTS ? !tw_tcp_on_cts(c, cookie, f->len)
                                    : !tw_tcp_on_done(c, cookie)) {
        return TW_TCP_PARSE_BAD;
    }
    *off += head;
    return TW_TCP_PARSE_MORE;
}

/* The frame @p f at c->in + *@p off is announced (recv_rndv) once its
 * header is in. */
static int tw_tcp_parse_rndv(tw_tcp_conn_t *c, const tw_tcp_frame_t *f, size_t *off)
{
    size_t head = TW_TCP_FRAME_LEN + f->hdr_len, avail;

    if (c->in_len - *off < head) {
        return TW_TCP_PARSE_WAIT; /* the header first */
    }
    avail = TW_MIN(c->in_len - *off - head, (size_t)f->len);
    if (!tw_tcp_rndv_begin(c, f->am_id, c->in + *off + TW_TCP_FRAME_LEN, f->hdr_len, (size_t)f->len,
                           c->in + *off + head, avail)) {
        return TW_TCP_PARSE_BAD;
    }
    *off += head + avail;
    if (c->rx != NULL) {
        return TW_TCP_PARSE_WAIT; /* the rest of the payload comes from the socket */
    }
    return TW_TCP_PARSE_MORE;
}

/* The frame at c->in + *@p off, @p total bytes, is not all in: when it is
 * larger than the buffer, move it into one of its size. */
static int tw_tcp_parse_grow(tw_tcp_conn_t *c, size_t total, size_t *off)
{
    if (total > c->in_cap) {
        /* Bounded: the parser checked both lengths. */
        unsigned char *n = tw_malloc(total);
        if (n == NULL) {
            c->bad = "out of memory for it";
            return TW_TCP_PARSE_BAD;
        }
        memcpy(n, c->in + *off, c->in_len - *off);
        tw_free(c->in, c->in_cap);
        c->in = n;
        c->in_cap = total;
        c->in_len -= *off;
        *off = 0;
    }
    return TW_TCP_PARSE_WAIT;
}

/* The frame at c->in + *@p off: skip a PING, note a FIN, deliver an AM. */
static int tw_tcp_parse_frame(tw_tcp_conn_t *c, size_t *off)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_frame_t f;
    const char *why = "?";
    size_t total;

    if (c->in_len - *off < TW_TCP_FRAME_LEN) {
        return TW_TCP_PARSE_WAIT;
    }
    if (tw_tcp_frame_parse(c->in + *off, c->in_len - *off, TW_TCP_MAX_HDR, TW_TCP_MAX_LEN, &f,
                           &why) != TW_OK) {
        c->bad = why;
        return TW_TCP_PARSE_BAD;
    }
    if (f.type >= TW_TCP_FRAME_RTS) {
        return tw_tcp_parse_rndv_frame(c, &f, off);
    }
    if (f.type != TW_TCP_FRAME_AM) {
        if (f.type == TW_TCP_FRAME_FIN) {
            tcp->eps[c->peer].left = true;
        }
        *off += TW_TCP_FRAME_LEN; /* PING: its arrival was the point */
        return TW_TCP_PARSE_MORE;
    }
    if (f.len >= TW_TCP_RNDV_MIN && f.am_id < 64 &&
        (tcp->super.inline_am_ids & (1ull << f.am_id)) && tcp->super.recv_rndv != NULL) {
        return tw_tcp_parse_rndv(c, &f, off);
    }
    total = TW_TCP_FRAME_LEN + f.hdr_len + (size_t)f.len;
    if (c->in_len - *off < total) {
        return tw_tcp_parse_grow(c, total, off);
    }
    if (lane->in_worker && (f.am_id >= 64 || !(tcp->super.inline_am_ids & (1ull << f.am_id)))) {
        return tw_tcp_parse_hold(c); /* user code runs on the engine */
    }
    tw_stats_inc(tcp->super.stats, TW_TL_STAT_RX_MSGS);
    tw_stats_add(tcp->super.stats, TW_TL_STAT_RX_BYTES, f.len);
    lane->events++;
    tcp->super.recv(tcp->super.recv_arg, c->peer, f.am_id, c->in + *off + TW_TCP_FRAME_LEN,
                    f.hdr_len, c->in + *off + TW_TCP_FRAME_LEN + f.hdr_len, (size_t)f.len);
    *off += total;
    return TW_TCP_PARSE_MORE;
}

/* Deliver every complete frame in c->in; false: the stream is bad. */
bool tw_tcp_parse_frames(tw_tcp_conn_t *c)
{
    size_t off = 0;
    int rc = TW_TCP_PARSE_MORE;

    while (rc == TW_TCP_PARSE_MORE && c->state == TW_TCP_CONNECTED) {
        rc = c->rx != NULL ? tw_tcp_parse_payload(c, &off) : tw_tcp_parse_frame(c, &off);
    }
    if (rc == TW_TCP_PARSE_BAD) {
        return false;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
    return true;
}

/* What one step of tw_tcp_read leaves: AGAIN (read on), DONE (nothing
 * more for now), GONE (EOF or an error: the connection is handled, and
 * gone). */
enum { TW_TCP_RX_AGAIN, TW_TCP_RX_DONE, TW_TCP_RX_GONE };

/* A recv returned @p n <= 0: AGAIN (EINTR), DONE (EAGAIN), or GONE. */
static int tw_tcp_recv_end(tw_tcp_conn_t *c, ssize_t n)
{
    if (n < 0 && errno == EINTR) {
        return TW_TCP_RX_AGAIN;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return TW_TCP_RX_DONE;
    }
    tw_tcp_conn_broken(c, n == 0 ? 0 : errno);
    return TW_TCP_RX_GONE;
}

/* Inside the payload @p h: into the user's buffer, or its staging. */
static int tw_tcp_read_payload(tw_tcp_conn_t *c, tw_tl_rndv_t *h)
{
    size_t want = h->have_get ? TW_MIN(h->len, h->dst_len) - h->got : h->len - h->got;
    unsigned char *to = h->have_get ? (unsigned char *)h->dst + h->got : h->buf + h->got;
    ssize_t n = recv(c->fd, to, want, 0);

    if (n <= 0) {
        return tw_tcp_recv_end(c, n);
    }
    c->last_rx = tw_time_coarse_ns(); /* liveness counts seconds */
    tw_tcp_rndv_sink(h, NULL, (size_t)n);
    if (h->got == h->len) {
        /* Then what followed it in the buffer. */
        if (!tw_tcp_rndv_done(c) || !tw_tcp_parse_frames(c)) {
            tw_tcp_fail_bad(c);
            return TW_TCP_RX_GONE;
        }
    }
    if ((size_t)n < want) {
        return TW_TCP_RX_DONE; /* drained: epoll says when there is more */
    }
    return TW_TCP_RX_AGAIN;
}

/* Room in c->in: it doubles (from 64 KiB) while less than 4 KiB is free,
 * up to 1 MiB. False: out of memory (the next event tries again). */
static bool tw_tcp_in_reserve(tw_tcp_conn_t *c)
{
    if (c->in_cap - c->in_len < 4096 && c->in_cap < (1u << 20)) {
        size_t cap = c->in_cap == 0 ? 65536 : c->in_cap * 2;
        unsigned char *n = tw_malloc(cap);
        if (n == NULL) {
            return false;
        }
        if (c->in_len > 0) {
            memcpy(n, c->in, c->in_len);
        }
        if (c->in != NULL) {
            tw_free(c->in, c->in_cap);
        }
        c->in = n;
        c->in_cap = cap;
    }
    return true;
}

/* Into c->in: the handshake messages, then frames. */
static int tw_tcp_read_buffer(tw_tcp_conn_t *c)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_iface_t *tcp = lane->tcp;

    if (c->in_len == c->in_cap && c->in_cap > 0) {
        /* Full of frames a worker left for the engine (complete frames
         * are otherwise consumed): the engine reads on. End this
         * event_base_loop pass: the socket stays readable, and
         * EVLOOP_NONBLOCK goes round again as long as a dispatch finds
         * active events, so the worker would call us back forever
         * while holding the engine's lock -- and only the engine can
         * empty this buffer. */
        event_base_loopbreak(lane->base);
        return TW_TCP_RX_DONE;
    }
    if (!tw_tcp_in_reserve(c)) {
        return TW_TCP_RX_DONE;
    }
    size_t space = c->in_cap - c->in_len;
    ssize_t n = recv(c->fd, c->in + c->in_len, space, 0);
    if (n <= 0) {
        return tw_tcp_recv_end(c, n);
    }
    /* Less than asked for: the socket is drained (epoll is
     * level-triggered), so no recv only to hear EAGAIN. */
    bool drained = (size_t)n < space;
    c->in_len += (size_t)n;
    c->last_rx = tw_time_coarse_ns(); /* liveness counts seconds */
    if (c->state != TW_TCP_CONNECTED && !tw_tcp_conn_handshake(c)) {
        return TW_TCP_RX_GONE;
    }
    if (c->state == TW_TCP_CONNECTED && !(lane->in_worker && tcp->eps[c->peer].reparse) &&
        !tw_tcp_parse_frames(c)) {
        tw_tcp_fail_bad(c);
        return TW_TCP_RX_GONE;
    }
    /* (Not connected: more handshake bytes to come. A held frame: the
     * engine parses on from it.) */
    return drained ? TW_TCP_RX_DONE : TW_TCP_RX_AGAIN;
}

/* Read what the socket holds. False: @p c is gone (closed or failed). */
bool tw_tcp_read(tw_tcp_conn_t *c)
{
    int rc = TW_TCP_RX_AGAIN;

    while (rc == TW_TCP_RX_AGAIN) {
        tw_tl_rndv_t *h = c->rx;
        if (h != NULL && (!h->have_get || h->got < h->dst_len)) {
            rc = tw_tcp_read_payload(c, h);
        } else {
            rc = tw_tcp_read_buffer(c);
        }
    }
    return rc == TW_TCP_RX_DONE;
}

void tw_tcp_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    (void)tw_tcp_read(arg);
}
