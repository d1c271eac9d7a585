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
 * Rendezvous. A frame of an inline id whose payload is TW_TCP_RNDV_MIN or
 * more is announced to the layer above (recv_rndv) as soon as its header
 * is in; if a receive matches, rndv_get names the user's buffer and the
 * payload is read from the socket straight into it (past a truncating
 * receive's length it is read and dropped). Unmatched, it is staged in a
 * buffer of its own, and a later rndv_get copies out what arrived and
 * takes the rest directly. rndv_get from another thread is applied by the
 * handle's lane (a command). The sender is unchanged: zcopy frames
 * complete once the socket took them.
 */
#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <sys/socket.h>

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
    tw_free(h, sizeof(*h));
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

/* The last payload byte of @p h arrived. */
static void tw_tcp_rndv_done(tw_tcp_conn_t *c)
{
    tw_tl_rndv_t *h = c->rx;

    c->rx = NULL;
    h->done = true;
    if (h->have_get) {
        tw_tl_comp_t *comp = h->comp;
        tw_tcp_rndv_free(h);
        comp->cb(comp, TW_OK);
    } /* else staged: rndv_get copies it out */
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

/* rndv_get on the lane's engine. */
static void tw_tcp_rndv_apply(tw_tl_rndv_t *h, void *dst, size_t len, tw_tl_comp_t *comp)
{
    tw_tcp_iface_t *tcp = h->lane->tcp;

    if (len > h->len) {
        len = h->len;
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
        tw_error("tcp", "out of memory for a %zu-byte message from rank %d", len, c->peer);
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
        /* Bounded by TW_TCP_MAX_LEN (the parser checked it). */
        tw_error("tcp", "out of memory staging a %zu-byte message from rank %d", len, c->peer);
        return false;
    }
    tw_tcp_rndv_sink(h, data, TW_MIN(avail, len));
    if (h->got == len) {
        tw_tcp_rndv_done(c);
    }
    return true;
}

/* ---- receiving ------------------------------------------------------------- */

/* What one step of the frame parser did: MORE (parse on), WAIT (stop:
 * the rest needs more bytes, or the engine), BAD (the stream is bad). */
enum { TW_TCP_PARSE_MORE, TW_TCP_PARSE_WAIT, TW_TCP_PARSE_BAD };

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
    tw_tcp_rndv_done(c);
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
            tw_error("tcp", "out of memory for a %zu-byte frame from rank %d", total, c->peer);
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
        tw_stats_inc(tcp->super.stats, TW_TL_STAT_BAD_FRAMES);
        tw_error("tcp", "rank %d sent a bad frame (%s): connection closed", c->peer, why);
        return TW_TCP_PARSE_BAD;
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
        /* User code runs on the engine: it parses from here on. */
        tw_tcp_ep_t *ep = &tcp->eps[c->peer];
        if (!ep->reparse) {
            ep->reparse = true;
            lane->nreparse++;
            tw_pe_wake(lane->pe);
        }
        return TW_TCP_PARSE_WAIT;
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
    c->last_rx = tw_time_ns();
    tw_tcp_rndv_sink(h, NULL, (size_t)n);
    if (h->got == h->len) {
        tw_tcp_rndv_done(c);
        if (!tw_tcp_parse_frames(c)) { /* what followed it in the buffer */
            tw_tcp_fail_peer(c->lane, c->peer, TW_ERR_PEER_FAILED, "bad frame");
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
    c->last_rx = tw_time_ns();
    if (c->state != TW_TCP_CONNECTED && !tw_tcp_conn_handshake(c)) {
        return TW_TCP_RX_GONE;
    }
    if (c->state == TW_TCP_CONNECTED && !(lane->in_worker && tcp->eps[c->peer].reparse) &&
        !tw_tcp_parse_frames(c)) {
        tw_tcp_fail_peer(lane, c->peer, TW_ERR_PEER_FAILED, "bad frame");
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
