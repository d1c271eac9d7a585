/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP send side: frames, the per-peer queues and their writes, and the
 * sends of the ops table.
 *
 * A send becomes a frame appended to the peer's queue, which the lane
 * writes with one sendmsg for many frames (partial writes resume at their
 * offset), so a burst of small messages costs one syscall, not one each.
 * Who appends: when the lane's engine is free (its try-lock), the peer is
 * connected and no earlier frame waits in the submission lanes, the
 * sending thread itself -- and a lone message is written at once, while
 * one that follows another within TW_TCP_BURST marks the peer dirty for
 * the next pass. Otherwise the frame goes to the engine through its
 * submission lane (tw_tl_submit) and the engine appends it; dirty queues
 * are written once per pass.
 *
 * Rendezvous. An am_zcopy of TW_TCP_RNDV or more bytes (when the layer
 * above takes announcements) sends only an RTS: the headers, the length
 * and a cookie, given when the RTS is queued (per peer, counting up, so a
 * cookie is never reused on a connection). The send (tw_tcp_rsend_t)
 * waits on its peer's list. The receiver's CTS names it and how many
 * bytes it wants: this side queues a DATA frame of that many bytes from
 * the caller's buffer, and completes the send when the receiver's DONE
 * says they landed -- or at once, TW_OK, for a CTS of 0 bytes (released
 * unread). The peer's failure completes the list with TW_ERR_PEER_FAILED
 * (the iface's close: TW_ERR_CANCELED), after the frames that point into
 * the buffers. A CTS or DONE that names no live send, asks for more than
 * was announced, or comes twice (DONE: before the DATA is all written) is
 * a bad frame: the peer fails.
 *
 * Left out: a pool for frames handed to a busy engine (only the engine or
 * try-lock holder uses a lane's pool, so those frames come from jemalloc's
 * thread cache).
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/tw_bytes.h"
#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/tcp/tw_tcp_int.h"

#define TW_TCP_IOV 128
/* A worker's send within this long of the previous write to the peer is
 * part of a burst: it is queued for the next pass's sendmsg (the sender's
 * own tw_cq_wait / tw_progress, or the engine) instead of a syscall of its
 * own. Longer than one tw_send, shorter than a TCP round trip, so a
 * ping-pong writes every message at once. */
#define TW_TCP_BURST (2000ull)
/* Frames whose header bytes (frame + am header + copied payload) fit this
 * come from a lane's pool when the lane's engine or try-lock is held
 * (direct sends, control frames): no malloc/free per small message. */
#define TW_TCP_POOL_HEAD  256u
#define TW_TCP_POOL_MAX   1024u
#define TW_TCP_POOL_ALLOC (sizeof(tw_tcp_frame_out_t) + TW_TCP_POOL_HEAD)

/* Queue @p ep for the write at the end of the progress pass. */
void tw_tcp_mark_dirty(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep)
{
    if (!ep->dirty) {
        ep->dirty = true;
        ep->next_dirty = lane->dirty;
        lane->dirty = ep;
    }
}

/* A frame for @p head_len header bytes: from the pool when it fits (the
 * caller holds @p lane's lock), else from the allocator. */
static tw_tcp_frame_out_t *tw_tcp_frame_get(tw_tcp_lane_t *lane, size_t head_len)
{
    tw_tcp_frame_out_t *f;

    if (lane != NULL && head_len <= TW_TCP_POOL_HEAD) {
        f = lane->pool;
        if (f != NULL) {
            lane->pool = f->next;
            lane->npool--;
        } else if ((f = tw_malloc(TW_TCP_POOL_ALLOC)) == NULL) {
            return NULL;
        }
        *f = (tw_tcp_frame_out_t){.alloc_len = TW_TCP_POOL_ALLOC, .pooled = true};
        return f;
    }
    f = tw_malloc(sizeof(*f) + head_len);
    if (f != NULL) {
        *f = (tw_tcp_frame_out_t){.alloc_len = sizeof(*f) + head_len};
    }
    return f;
}

/* @p f is written or failed: complete it, and recycle it (lock holder). */
void tw_tcp_frame_done(tw_tcp_lane_t *lane, tw_tcp_frame_out_t *f, tw_status_t st)
{
    if (f->comp != NULL) {
        f->comp->cb(f->comp, st);
    }
    if (st == TW_OK && f->rs != NULL && f->rs_data) {
        f->rs->data_sent = true; /* (an RTS's send completes on DONE) */
    }
    if (f->pooled && lane->npool < TW_TCP_POOL_MAX) {
        f->next = lane->pool;
        lane->pool = f;
        lane->npool++;
        return;
    }
    tw_free(f, f->alloc_len);
}

/* Fill @p f with an AM frame to @p peer, or the RTS of @p rs (its cookie
 * is written when it is queued). */
static void tw_tcp_frame_fill(tw_tcp_frame_out_t *f, int peer, uint8_t am_id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, bool copy,
                              tw_tl_comp_t *comp, tw_tcp_rsend_t *rs)
{
    size_t pre = rs != NULL ? TW_TCP_COOKIE_LEN : 0;
    tw_tcp_frame_t fh = {.type = rs != NULL ? TW_TCP_FRAME_RTS : TW_TCP_FRAME_AM,
                         .am_id = am_id,
                         .hdr_len = (uint32_t)(pre + hdr_len),
                         .len = len};

    copy = copy && rs == NULL;
    f->head_len = TW_TCP_FRAME_LEN + pre + hdr_len + (copy ? len : 0);
    f->zdata = copy || rs != NULL ? NULL : data;
    f->zlen = copy || rs != NULL ? 0 : len;
    f->comp = comp;
    f->peer = peer;
    f->rs = rs;
    f->rs_data = false;
    tw_tcp_frame_pack(&fh, f->bytes);
    if (hdr_len > 0) {
        memcpy(f->bytes + TW_TCP_FRAME_LEN + pre, hdr, hdr_len);
    }
    if (copy && len > 0) {
        memcpy(f->bytes + TW_TCP_FRAME_LEN + hdr_len, data, len);
    }
}

/* Write what the peer's queue holds: one sendmsg for many frames. */
void tw_tcp_flush(tw_tcp_lane_t *lane, tw_tcp_ep_t *ep)
{
    tw_tcp_conn_t *c = ep->conn;

    if (c == NULL || c->wr_err != 0) {
        return;
    }
    if (c->hs_off < c->hs_len) { /* the PROVE goes first */
        if (!tw_tcp_hs_write(c)) {
            tw_tcp_conn_broken(c, errno);
            return;
        }
        if (c->hs_off < c->hs_len) {
            return; /* EV_WRITE comes back here */
        }
    }
    while (ep->head != NULL) {
        struct iovec iov[TW_TCP_IOV];
        int n = 0;
        for (tw_tcp_frame_out_t *f = ep->head; f != NULL && n + 2 <= TW_TCP_IOV; f = f->next) {
            size_t off = f->off;
            if (off < f->head_len) {
                iov[n++] = (struct iovec){f->bytes + off, f->head_len - off};
                off = f->head_len;
            }
            if (f->zlen > 0 && off - f->head_len < f->zlen) {
                iov[n++] = (struct iovec){(char *)f->zdata + (off - f->head_len),
                                          f->zlen - (off - f->head_len)};
            }
        }
        /* sendmsg, not writev: a peer that reset the connection must
         * give EPIPE here, not a SIGPIPE that kills the process. */
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                tw_tcp_want_out(c, true);
                return;
            }
            if ((errno == EPIPE || errno == ECONNRESET) && c->state == TW_TCP_CONNECTED) {
                /* The peer closed. Its FIN frame may still wait unread in
                 * our socket -- a send written at once, by a worker or
                 * the engine's owner, can come before the lane's loop
                 * reads it -- and then it left, not failed: the loop
                 * reads on (the socket stays readable: EOF or the reset)
                 * and decides. Nothing more is written here. */
                c->wr_err = errno;
                if (c->want_out) {
                    tw_tcp_want_out(c, false);
                }
                return;
            }
            tw_tcp_conn_broken(c, errno);
            return;
        }
        c->last_tx = tw_time_ns();
        size_t left = (size_t)w;
        while (left > 0 && ep->head != NULL) {
            tw_tcp_frame_out_t *f = ep->head;
            size_t rest = f->head_len + f->zlen - f->off;
            if (left < rest) {
                f->off += left;
                left = 0;
                break;
            }
            left -= rest;
            lane->events++;
            ep->head = f->next;
            ep->queued--;
            if (ep->head == NULL) {
                ep->tail = NULL;
            }
            tw_tcp_frame_done(lane, f, TW_OK);
        }
    }
    if (c->want_out) {
        tw_tcp_want_out(c, false); /* all out */
    }
}

void tw_tcp_on_write(evutil_socket_t fd, short what, void *arg)
{
    tw_tcp_conn_t *c = arg;
    tw_tcp_iface_t *tcp = c->lane->tcp;

    (void)fd, (void)what;
    if (c->state != TW_TCP_CONNECTED) {
        if (!tw_tcp_hs_write(c)) {
            tw_tcp_conn_broken(c, errno);
        }
        return;
    }
    if (c->peer >= 0 && tcp->eps[c->peer].conn == c) {
        tw_tcp_flush(c->lane, &tcp->eps[c->peer]);
    }
}

/* A rendezvous send is over: complete it. Thread: engine or try-lock
 * holder of its peer's lane. */
static void tw_tcp_rsend_finish(tw_tcp_rsend_t *rs, tw_status_t st)
{
    tw_tl_comp_t *comp = rs->comp;

    atomic_fetch_sub_explicit(rs->live, 1, memory_order_release);
    tw_free(rs, sizeof(*rs));
    comp->cb(comp, st);
}

/* Append @p f to its peer's queue, nothing more: the caller writes it (or
 * marks the peer dirty). The peer is live. An RTS gets its cookie here,
 * and its send joins the peer's list. */
static void tw_tcp_append(tw_tcp_ep_t *ep, tw_tcp_frame_out_t *f)
{
    if (f->rs != NULL && !f->rs_data) {
        f->rs->cookie = ++ep->rs_cookie;
        tw_put64(f->bytes + TW_TCP_FRAME_LEN, f->rs->cookie);
        f->rs->next = NULL;
        if (ep->rs_tail == NULL) {
            ep->rs_head = f->rs;
        } else {
            ep->rs_tail->next = f->rs;
        }
        ep->rs_tail = f->rs;
    }
    f->next = NULL;
    if (ep->tail == NULL) {
        ep->head = f;
    } else {
        ep->tail->next = f;
    }
    ep->tail = f;
    ep->queued++;
}

/* Every rendezvous send to @p ep completes with @p st (its frames are
 * gone). Thread: engine or try-lock holder of the peer's lane. */
void tw_tcp_rsends_fail(tw_tcp_ep_t *ep, tw_status_t st)
{
    while (ep->rs_head != NULL) {
        tw_tcp_rsend_t *rs = ep->rs_head;
        ep->rs_head = rs->next;
        tw_tcp_rsend_finish(rs, st);
    }
    ep->rs_tail = NULL;
}

/* Queue @p f to its peer (engine side). */
static void tw_tcp_enqueue(tw_tcp_lane_t *lane, tw_tcp_frame_out_t *f)
{
    tw_tcp_iface_t *tcp = lane->tcp;
    tw_tcp_ep_t *ep = &tcp->eps[f->peer];

    if (ep->failed || tcp->closing) {
        tw_status_t st = ep->failed ? TW_ERR_PEER_FAILED : TW_ERR_CANCELED;
        if (f->rs != NULL && !f->rs_data) {
            tw_tcp_rsend_finish(f->rs, st); /* never announced */
            f->rs = NULL;
        }
        tw_tcp_frame_done(lane, f, st);
        return;
    }
    tw_tcp_append(ep, f);
    if (ep->conn == NULL) {
        if (ep->pending == NULL && ep->accepting == NULL) {
            tw_tcp_connect(lane, f->peer, 0);
        }
        return; /* flushed once a connection is up */
    }
    if (ep->queued >= TW_TCP_IOV / 2) {
        tw_tcp_flush(lane, ep); /* enough for one full sendmsg */
    } else {
        tw_tcp_mark_dirty(lane, ep);
    }
}

/* Submission command: a worker's frame reaches the lane's engine. */
static void tw_tcp_enqueue_cmd(void *arg, void *data, uint64_t u64)
{
    tw_tcp_lane_t *lane = arg;

    (void)u64;
    atomic_fetch_sub_explicit(&lane->cmds, 1, memory_order_relaxed);
    tw_tcp_enqueue(lane, data);
}

/* Header bytes of a frame (see tw_tcp_frame_fill). */
static size_t tw_tcp_head_len(size_t hdr_len, size_t len, bool copy, const tw_tcp_rsend_t *rs)
{
    if (rs != NULL) {
        return TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN + hdr_len;
    }
    return TW_TCP_FRAME_LEN + hdr_len + (copy ? len : 0);
}

/* A worker writes its frame itself when the lane's engine is free, the
 * peer is connected, and no earlier frame waits in the submission lanes
 * (so nothing is overtaken). */
typedef struct tw_tcp_direct {
    tw_tcp_lane_t *lane;
    int peer;
    uint8_t am_id;
    bool copy;
    bool done;
    tw_status_t st;
    const void *hdr, *data;
    size_t hdr_len, len;
    tw_tl_comp_t *comp;
    tw_tcp_rsend_t *rs;
} tw_tcp_direct_t;

static int tw_tcp_direct_fn(void *arg)
{
    tw_tcp_direct_t *d = arg;
    tw_tcp_lane_t *lane = d->lane;
    tw_tcp_ep_t *ep = &lane->tcp->eps[d->peer];
    tw_tcp_frame_out_t *f;

    if (atomic_load_explicit(&lane->cmds, memory_order_relaxed) != 0 || ep->conn == NULL ||
        ep->failed || lane->tcp->closing) {
        return 0;
    }
    f = tw_tcp_frame_get(lane, tw_tcp_head_len(d->hdr_len, d->len, d->copy, d->rs));
    d->done = true;
    if (f == NULL) {
        d->st = TW_ERR_NOMEM;
        return 1;
    }
    tw_tcp_frame_fill(f, d->peer, d->am_id, d->hdr, d->hdr_len, d->data, d->len, d->copy, d->comp,
                      d->rs);
    lane->in_worker = true;
    lane->busy++;
    tw_tcp_enqueue(lane, f);
    if (ep->conn != NULL && ep->queued == 1 && tw_time_ns() - ep->conn->last_tx >= TW_TCP_BURST) {
        tw_tcp_flush(lane, ep); /* a lone message: out now */
    } else if (lane->tcp->threads) {
        tw_pe_wake(lane->pe); /* part of a burst: the next pass writes them together */
    }
    lane->busy--;
    lane->in_worker = false;
    d->st = TW_OK;
    return 1;
}

/* A frame that carries nothing but its type (FIN, PING). */
void tw_tcp_enqueue_ctl(tw_tcp_lane_t *lane, int peer, uint8_t type)
{
    tw_tcp_frame_out_t *f = tw_tcp_frame_get(lane, TW_TCP_FRAME_LEN);
    tw_tcp_frame_t fh = {.type = type};

    if (f == NULL) {
        return; /* a missed PING or FIN: the peer copes (the next tick retries) */
    }
    f->head_len = TW_TCP_FRAME_LEN;
    f->peer = peer;
    tw_tcp_frame_pack(&fh, f->bytes);
    tw_tcp_enqueue(lane, f);
}

/* A frame for a rendezvous control frame, or NULL (out of memory).
 * Thread: engine or try-lock holder of @p lane. */
tw_tcp_frame_out_t *tw_tcp_rndv_ctl_get(tw_tcp_lane_t *lane)
{
    return tw_tcp_frame_get(lane, TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN);
}

/* Queue a rendezvous control frame (CTS, DONE) naming @p cookie, in @p f
 * (from tw_tcp_rndv_ctl_get) or, when NULL, a frame of its own, for the
 * end of the pass: it may be called while @p peer's stream is parsed, so
 * it never writes (a failed write would free the connection under the
 * parser). False: out of memory (logged; the caller fails the peer, which
 * would otherwise wait for it forever). Thread: engine or try-lock holder
 * of @p lane. */
bool tw_tcp_queue_rndv_ctl(tw_tcp_lane_t *lane, int peer, tw_tcp_frame_out_t *f, uint8_t type,
                           uint64_t cookie, uint64_t len)
{
    tw_tcp_ep_t *ep = &lane->tcp->eps[peer];
    tw_tcp_frame_t fh = {.type = type, .hdr_len = TW_TCP_COOKIE_LEN, .len = len};

    if (f == NULL) {
        f = tw_tcp_rndv_ctl_get(lane);
    }
    if (ep->failed || lane->tcp->closing) {
        if (f != NULL) {
            tw_tcp_frame_done(lane, f, TW_ERR_CANCELED);
        }
        return true; /* nobody waits for it any more */
    }
    if (f == NULL) {
        tw_error("tcp", "out of memory for a rendezvous frame to rank %d", peer);
        return false;
    }
    *f = (tw_tcp_frame_out_t){.alloc_len = f->alloc_len,
                              .pooled = f->pooled,
                              .head_len = TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN,
                              .peer = peer};
    tw_tcp_frame_pack(&fh, f->bytes);
    tw_put64(f->bytes + TW_TCP_FRAME_LEN, cookie);
    tw_tcp_append(ep, f);
    tw_tcp_mark_dirty(lane, ep);
    lane->events++;
    tw_pe_wake(lane->pe); /* from a command run outside a pass: the pass writes it */
    return true;
}

/* The live send to @p ep named @p cookie, or NULL; *@p prev_p: the one
 * before it on the list. CTSs and DONEs come mostly in announcement
 * order, so the search ends near the head. */
static tw_tcp_rsend_t *tw_tcp_rsend_find(tw_tcp_ep_t *ep, uint64_t cookie, tw_tcp_rsend_t **prev_p)
{
    tw_tcp_rsend_t *prev = NULL;

    for (tw_tcp_rsend_t *rs = ep->rs_head; rs != NULL; prev = rs, rs = rs->next) {
        if (rs->cookie == cookie) {
            *prev_p = prev;
            return rs;
        }
    }
    return NULL;
}

static void tw_tcp_rsend_unlink(tw_tcp_ep_t *ep, tw_tcp_rsend_t *rs, tw_tcp_rsend_t *prev)
{
    if (prev == NULL) {
        ep->rs_head = rs->next;
    } else {
        prev->next = rs->next;
    }
    if (ep->rs_tail == rs) {
        ep->rs_tail = prev;
    }
}

/* The receiver asks for @p len bytes of the send named @p cookie. False:
 * a bad frame (c->bad says why). Thread: engine or try-lock holder,
 * parsing @p c. */
bool tw_tcp_on_cts(tw_tcp_conn_t *c, uint64_t cookie, uint64_t len)
{
    tw_tcp_lane_t *lane = c->lane;
    tw_tcp_ep_t *ep = &lane->tcp->eps[c->peer];
    tw_tcp_rsend_t *prev, *rs = tw_tcp_rsend_find(ep, cookie, &prev);
    tw_tcp_frame_out_t *f;

    if (rs == NULL || rs->asked) {
        c->bad = "CTS for no live message of ours";
        return false;
    }
    if (len > rs->len) {
        c->bad = "CTS asks for more than was announced";
        return false;
    }
    lane->events++;
    if (len == 0) {
        tw_tcp_rsend_unlink(ep, rs, prev);
        tw_tcp_rsend_finish(rs, TW_OK); /* released unread */
        return true;
    }
    f = tw_tcp_frame_get(lane, TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN);
    if (f == NULL) {
        c->bad = "out of memory for a DATA frame";
        return false;
    }
    tw_tcp_frame_t fh = {.type = TW_TCP_FRAME_DATA, .hdr_len = TW_TCP_COOKIE_LEN, .len = len};
    f->head_len = TW_TCP_FRAME_LEN + TW_TCP_COOKIE_LEN;
    f->zdata = rs->data;
    f->zlen = len;
    f->peer = c->peer;
    f->rs = rs;
    f->rs_data = true;
    tw_tcp_frame_pack(&fh, f->bytes);
    tw_put64(f->bytes + TW_TCP_FRAME_LEN, cookie);
    rs->asked = true;
    tw_tcp_append(ep, f);
    tw_tcp_mark_dirty(lane, ep); /* written at the end of the pass, never under the parser */
    return true;
}

/* The receiver has the DATA of the send named @p cookie. False: a bad
 * frame (c->bad says why). Thread: as tw_tcp_on_cts. */
bool tw_tcp_on_done(tw_tcp_conn_t *c, uint64_t cookie)
{
    tw_tcp_ep_t *ep = &c->lane->tcp->eps[c->peer];
    tw_tcp_rsend_t *prev, *rs = tw_tcp_rsend_find(ep, cookie, &prev);

    if (rs == NULL || !rs->data_sent) {
        /* Not all written yet: the receiver cannot have it all. */
        c->bad = "DONE for no message of ours it was sent";
        return false;
    }
    c->lane->events++;
    tw_tcp_rsend_unlink(ep, rs, prev);
    tw_tcp_rsend_finish(rs, TW_OK);
    return true;
}

static tw_status_t tw_tcp_post(tw_tcp_iface_t *tcp, int peer, uint8_t am_id, const void *hdr,
                               size_t hdr_len, const void *data, size_t len, bool copy,
                               tw_tl_comp_t *comp, tw_tcp_rsend_t *rs)
{
    size_t head_len = tw_tcp_head_len(hdr_len, len, copy, rs);
    tw_tcp_lane_t *lane;
    tw_tcp_frame_out_t *f;

    if (peer < 0 || peer >= tcp->super.size || peer == tcp->super.rank) {
        return TW_ERR_UNREACHABLE;
    }
    if (atomic_load_explicit(&tcp->down[peer], memory_order_acquire)) {
        return TW_ERR_PEER_FAILED;
    }
    /* Closing (tw_finalize, the engines stopped): what the completions of
     * the close make a layer above send -- a tap beside us, which has no
     * closing flag of its own set yet -- would be queued to a lane's
     * engine and outlive the lane (TSan, a cut path under rel). */
    if (tcp->super.closing) {
        return TW_ERR_CANCELED;
    }
    lane = tw_tcp_lane_of(tcp, peer);
    if (atomic_load_explicit(&lane->cmds, memory_order_relaxed) == 0) {
        tw_tcp_direct_t d = {.lane = lane,
                             .peer = peer,
                             .am_id = am_id,
                             .copy = copy,
                             .hdr = hdr,
                             .hdr_len = hdr_len,
                             .data = data,
                             .len = len,
                             .comp = comp,
                             .rs = rs};
        if (!tw_pe_is_owner(lane->pe)) {
            (void)tw_pe_try_call(lane->pe, tw_tcp_direct_fn, &d);
        } else if (lane->busy == 0) {
            /* The engine's owner already -- a collective's next step run
             * by engine 0's pass or by a worker polling it: a try-lock
             * would fail, and the frame would wait in the submission ring
             * for the engine's thread, which a worker spinning on the
             * same CPU keeps off it (a 256 KiB step waited 400-900 us). */
            (void)tw_tcp_direct_fn(&d);
        }
        if (d.done && d.st == TW_OK) {
            tw_stats_inc(tcp->super.stats, TW_TL_STAT_TX_MSGS);
            tw_stats_add(tcp->super.stats, TW_TL_STAT_TX_BYTES, len);
        }
        if (d.done) {
            return d.st;
        }
    }
    f = tw_tcp_frame_get(NULL, head_len);
    if (f == NULL) {
        tw_error("tcp", "cannot allocate a frame of %zu bytes for rank %d", head_len, peer);
        return TW_ERR_NOMEM;
    }
    tw_tcp_frame_fill(f, peer, am_id, hdr, hdr_len, data, len, copy, comp, rs);
    size_t alloc_len = f->alloc_len;
    atomic_fetch_add_explicit(&lane->cmds, 1, memory_order_relaxed);
    tw_status_t st =
        tw_tl_submit(&tcp->super, lane->pe, tw_tcp_enqueue_cmd, lane, f, alloc_len, len);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&lane->cmds, 1, memory_order_relaxed);
    }
    return st;
}

tw_status_t tw_tcp_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len)
{
    if (hdr_len + len > iface->attr.max_short) {
        return TW_ERR_INVALID;
    }
    return tw_tcp_post((tw_tcp_iface_t *)iface, peer, am_id, hdr, hdr_len, data, len, true, NULL,
                       NULL);
}

tw_status_t tw_tcp_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    tw_tcp_rsend_t *rs;
    tw_status_t st;

    if (hdr_len > iface->attr.max_hdr || len > iface->attr.max_zcopy || comp == NULL) {
        return TW_ERR_INVALID;
    }
    /* (The receiver's layer above is ours: it takes announcements too.)
     * Eager ids go at once: one way instead of RTS, CTS and DATA. */
    if (len < tcp->cfg.rndv_thresh || iface->recv_rndv == NULL ||
        (am_id < 64 && (iface->eager_am_ids >> am_id & 1))) {
        return tw_tcp_post(tcp, peer, am_id, hdr, hdr_len, data, len, false, comp, NULL);
    }
    rs = tw_malloc(sizeof(*rs));
    if (rs == NULL) {
        tw_error("tcp", "out of memory announcing a %zu-byte message to rank %d", len, peer);
        return TW_ERR_NOMEM;
    }
    *rs = (tw_tcp_rsend_t){.data = data, .len = len, .comp = comp, .live = &tcp->rsends};
    atomic_fetch_add_explicit(&tcp->rsends, 1, memory_order_relaxed);
    st = tw_tcp_post(tcp, peer, am_id, hdr, hdr_len, data, len, false, NULL, rs);
    if (st != TW_OK) {
        atomic_fetch_sub_explicit(&tcp->rsends, 1, memory_order_relaxed);
        tw_free(rs, sizeof(*rs)); /* never queued: nobody else saw it */
    }
    return st;
}
