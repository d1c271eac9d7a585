/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * shm, the receiving side: consuming cells, rendezvous receives, and
 * failing peers.
 *
 * Consuming. The receiver's engine takes the cell at its private head
 * when the sequence word reads head + 1, and frees it by storing
 * head + ncells. After freeing cells it wakes a producer engine that
 * asked for room (want_wake): the other half of that Dekker pair.
 *
 * Trust. Peers run as our uid (they could ptrace us), so this is about
 * robustness, not secrecy: whatever a buggy or crashed peer leaves in its
 * ring must not make us read or write outside our buffers. At the head
 * the sequence word must be head (empty) or head + 1 (ready); anything
 * else is corruption. A cell is read once and its shape checked
 * (tw_shm_cell_parse); its ids name entries of our own tables and carry a
 * generation, and a DATA cell must fit the pull it feeds. A violation
 * fails that peer only: its ring is no longer read, its operations
 * complete with TW_ERR_PEER_FAILED, the layer above is told.
 *
 * Rendezvous. rndv_get reads the announced buffer with process_vm_readv
 * straight into the destination (one copy) and sends FIN; when CMA is off
 * (TW_SHM_CMA=0, or the kernel refused it once) it sends CTS and copies
 * the DATA cells the sender's engine pushes (two copies, pipelined over
 * the ring).
 *
 * Waiting workers. A thread waiting in tw_cq_wait (or calling
 * tw_progress) while the engine is idle takes its lock (tw_pe_try_call)
 * and runs tw_shm_poll: the same consumer, but it stops at the first
 * arrival that runs user code (a user active message), which the engine
 * delivers in order later. A peer the worker finds bad is failed by the
 * engine (the error handler runs there).
 *
 * Dead peers. A pidfd per peer, watched by the engine and polled every
 * TW_SHM_CHECK_NS: when it turns readable the peer's ring is drained
 * (what it published before it went is good) and the peer failed -- or,
 * if it marked its segment closed first, it left cleanly -- well within
 * the 500 ms the API promises.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/shm/tw_shm_int.h"

#if TW_TESTING
/* Test hook: refuse CMA as if the kernel said EPERM. */
static atomic_bool tw_shm_cma_refused_by_test;

void tw_shm_test_refuse_cma(bool refuse)
{
    atomic_store(&tw_shm_cma_refused_by_test, refuse);
}

bool tw_shm_test_cma_off(tw_tl_iface_t *iface)
{
    return atomic_load(&((tw_shm_iface_t *)iface)->cma_off);
}

static bool tw_shm_cma_refused(void)
{
    return atomic_load_explicit(&tw_shm_cma_refused_by_test, memory_order_relaxed);
}
#else
static bool tw_shm_cma_refused(void)
{
    return false;
}
#endif

/* ---- rendezvous receives ------------------------------------------------- */

void tw_shm_handle_unlink(tw_tl_rndv_t *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
}

static tw_status_t tw_shm_pull_add(tw_shm_iface_t *shm, int peer, void *dst, size_t want,
                                   tw_tl_comp_t *comp, uint64_t *rid_p)
{
    uint32_t i;

    for (i = 0; i < shm->npulls; i++) {
        if (shm->pulls[i].comp == NULL) {
            break;
        }
    }
    if (i == shm->npulls) {
        uint32_t n = shm->npulls == 0 ? 64 : shm->npulls * 2;
        tw_shm_pull_t *a = tw_calloc(n, sizeof(*a));
        if (a == NULL) {
            return TW_ERR_NOMEM;
        }
        if (shm->npulls > 0) {
            memcpy(a, shm->pulls, shm->npulls * sizeof(*a));
            tw_free(shm->pulls, shm->npulls * sizeof(*a));
        }
        shm->pulls = a;
        shm->npulls = n;
    }
    tw_shm_pull_t *pl = &shm->pulls[i];
    pl->comp = comp;
    pl->dst = dst;
    pl->want = want;
    pl->got = 0;
    pl->peer = peer;
    *rid_p = (uint64_t)pl->gen << 32 | i;
    return TW_OK;
}

void tw_shm_pull_done(tw_shm_iface_t *shm, tw_shm_pull_t *pl, tw_status_t st)
{
    tw_tl_comp_t *comp = pl->comp;

    pl->comp = NULL;
    pl->gen++;
    comp->cb(comp, st);
    (void)shm;
}

/* One copy with CMA; TW_ERR_UNSUPPORTED when the kernel refuses. */
static tw_status_t tw_shm_cma_read(tw_shm_iface_t *shm, tw_shm_peer_t *p, void *dst, uint64_t raddr,
                                   size_t len)
{
    size_t done = 0;

    if (TW_UNLIKELY(tw_shm_cma_refused())) {
        errno = EPERM;
        goto refused;
    }
    while (done < len) {
        struct iovec l = {.iov_base = (char *)dst + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EPERM || errno == ENOSYS)) {
            goto refused;
        }
        if (n < 0 && errno == ESRCH) {
            return TW_ERR_PEER_FAILED;
        }
        /* EFAULT or no progress: the announced range is not readable. */
        tw_error("shm", "rank %d announced %zu bytes at 0x%llx that cannot be read (%s)", p->rank,
                 len, (unsigned long long)raddr, n < 0 ? strerror(errno) : "short read");
        return TW_ERR_PROTOCOL;
    }
    return TW_OK;

refused:
    if (!atomic_exchange(&shm->cma_off, true)) {
        tw_warn("shm",
                "process_vm_readv refused (%s): large messages are copied through the rings "
                "from now on (check /proc/sys/kernel/yama/ptrace_scope, or set TW_SHM_CMA=0)",
                strerror(errno));
    }
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_shm_rndv_get(tw_tl_iface_t *iface, tw_tl_rndv_t *h, void *dst, size_t len,
                            tw_tl_comp_t *comp)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = &shm->peers[h->peer];
    tw_status_t st = TW_OK;
    uint64_t rid;

    tw_shm_handle_unlink(h);
    if (len > h->len) {
        len = h->len;
    }
    if (!tw_shm_peer_is_up(p)) {
        st = TW_ERR_PEER_FAILED;
        goto out;
    }
    if (len > 0 && !atomic_load_explicit(&shm->cma_off, memory_order_relaxed)) {
        st = tw_shm_cma_read(shm, p, dst, h->raddr, len);
        if (st == TW_OK) {
            tw_shm_job_add(shm, h->peer, TW_SHM_FIN, 0, 0, h->sid, NULL, 0);
            tw_stats_add(iface->stats, TW_TL_STAT_RX_BYTES, len);
            goto out;
        }
        if (st != TW_ERR_UNSUPPORTED) {
            tw_shm_fail_peer(shm, h->peer, "rendezvous read failed");
            st = TW_ERR_PEER_FAILED;
            goto out;
        }
    }
    if (len == 0) {
        /* Release the sender without data. */
        tw_shm_job_add(shm, h->peer, TW_SHM_FIN, 0, 0, h->sid, NULL, 0);
        st = TW_OK;
        goto out;
    }
    st = tw_shm_pull_add(shm, h->peer, dst, len, comp, &rid);
    if (st != TW_OK) {
        tw_shm_job_add(shm, h->peer, TW_SHM_FIN, 1, 0, h->sid, NULL, 0);
        goto out;
    }
    tw_shm_job_add(shm, h->peer, TW_SHM_CTS, len, rid, h->sid, NULL, 0);
    tw_stats_add(iface->stats, TW_TL_STAT_RX_BYTES, len);
    tw_free(h, sizeof(*h));
    return TW_OK; /* completes when the last DATA cell arrived */

out:
    tw_free(h, sizeof(*h));
    comp->cb(comp, st);
    return TW_OK;
}

/* ---- failure --------------------------------------------------------------- */

void tw_shm_fail_peer(tw_shm_iface_t *shm, int peer, const char *why)
{
    tw_shm_peer_t *p = &shm->peers[peer];
    bool clean = strcmp(why, "left") == 0;
    unsigned expected = TW_SHM_PEER_UP;

    if (shm->in_poll) {
        /* A worker's poll found it: failing calls the error handler, which
         * runs on the engine only. Leave it to the engine, now. */
        if (p->fail_pending == NULL) {
            p->fail_pending = why;
            shm->nfail_pending++;
        }
        tw_pe_wake(shm->super.pe);
        return;
    }

    if (!atomic_compare_exchange_strong(&p->state, &expected,
                                        clean ? TW_SHM_PEER_LEFT : TW_SHM_PEER_FAILED)) {
        return; /* already down */
    }
    shm->npeers_up--;
    if (clean) {
        tw_debug("shm", "rank %d (pid %d) left the job", p->rank, (int)p->pid);
    } else {
        tw_error("shm",
                 "rank %d (pid %d) failed: %s; its operations complete with "
                 "TW_ERR_PEER_FAILED",
                 p->rank, (int)p->pid, why);
    }
    if (p->pidfd >= 0) {
        tw_pe_unwatch(shm->super.pe, p->pidfd);
    }
    /* Sends waiting for it. */
    for (;;) {
        tw_tl_comp_t *comp = NULL;
        tw_mutex_lock(&shm->send_lock);
        for (uint32_t i = 0; i < TW_SHM_SENDS && comp == NULL; i++) {
            tw_shm_send_t *s = &shm->sends[i];
            if (s->comp != NULL && s->peer == peer) {
                comp = s->comp;
                tw_shm_send_release(shm, s);
            }
        }
        tw_mutex_unlock(&shm->send_lock);
        if (comp == NULL) {
            break;
        }
        comp->cb(comp, TW_ERR_PEER_FAILED);
    }
    /* Pulls from it. */
    for (uint32_t i = 0; i < shm->npulls; i++) {
        if (shm->pulls[i].comp != NULL && shm->pulls[i].peer == peer) {
            tw_shm_pull_done(shm, &shm->pulls[i], TW_ERR_PEER_FAILED);
        }
    }
    /* Queued jobs for it are dropped by tw_shm_job_run. */
    if (shm->super.peer_down != NULL) {
        shm->super.peer_down(shm->super.peer_down_arg, peer, clean ? TW_OK : TW_ERR_PEER_FAILED);
    }
}

static int tw_shm_rx_peer(tw_shm_iface_t *shm, tw_shm_peer_t *p, bool inline_only);

/* Is the peer still there? Thread: engine owner. */
static void tw_shm_check_peers(tw_shm_iface_t *shm)
{
    for (int r = 0; r < shm->super.size; r++) {
        tw_shm_peer_t *p = &shm->peers[r];
        bool dead;

        if (!p->attached || !tw_shm_peer_is_up(p)) {
            continue;
        }
        if (p->pidfd >= 0) {
            struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
            dead = poll(&pfd, 1, 0) > 0;
        } else {
            dead = kill(p->pid, 0) != 0 && errno == ESRCH;
        }
        if (dead) {
            /* What it published before it went is still good. */
            for (unsigned k = 0; k <= shm->ncells / TW_SHM_BUDGET; k++) {
                if (tw_shm_rx_peer(shm, p, false) == 0) {
                    break;
                }
            }
            if (!tw_shm_peer_is_up(p)) {
                continue;
            }
            bool left =
                atomic_load_explicit(p->tx_state, memory_order_acquire) == TW_SHM_SEG_CLOSED;
            tw_shm_fail_peer(shm, r, left ? "left" : "the process died");
        }
    }
}

/* ---- consuming ------------------------------------------------------------- */

static void tw_shm_rx_data(tw_shm_iface_t *shm, int src, uint64_t rid, uint64_t off,
                           const unsigned char *data, size_t len, bool *bad)
{
    uint32_t idx = (uint32_t)rid, gen = (uint32_t)(rid >> 32);
    tw_shm_pull_t *pl;

    if (idx >= shm->npulls || (pl = &shm->pulls[idx])->comp == NULL || pl->gen != gen ||
        pl->peer != src || off != pl->got || len > pl->want - pl->got) {
        *bad = true;
        return;
    }
    memcpy(pl->dst + pl->got, data, len);
    pl->got += len;
    if (pl->got == pl->want) {
        tw_shm_pull_done(shm, pl, TW_OK);
    }
}

enum { TW_SHM_RX_BAD, TW_SHM_RX_DONE, TW_SHM_RX_STOP };

/* A rendezvous announced by @p p: its handle goes to the layer above. */
static int tw_shm_rx_rts(tw_shm_iface_t *shm, tw_shm_peer_t *p, const tw_shm_cell_view_t *v)
{
    tw_tl_rndv_t *h = tw_malloc(sizeof(*h));

    if (h == NULL) {
        tw_error("shm", "out of memory taking a rendezvous from rank %d", p->rank);
        return TW_SHM_RX_BAD;
    }
    *h = (tw_tl_rndv_t){.peer = p->rank, .raddr = v->a0, .len = v->a1, .sid = v->a2};
    h->next = shm->handles.next;
    h->prev = &shm->handles;
    h->next->prev = h;
    shm->handles.next = h;
    tw_stats_inc(shm->super.stats, TW_TL_STAT_RX_MSGS);
    shm->super.recv_rndv(shm->super.recv_arg, p->rank, v->am_id, v->data, v->hdr_len, v->a1, h);
    return TW_SHM_RX_DONE;
}

/* The receiver wants a0 bytes of send a2: push them (a1 names its pull). */
static int tw_shm_rx_cts(tw_shm_iface_t *shm, tw_shm_peer_t *p, const tw_shm_cell_view_t *v)
{
    tw_shm_send_t *s;
    const void *addr = NULL;
    bool ok;

    tw_mutex_lock(&shm->send_lock);
    s = tw_shm_send_find(shm, v->a2, p->rank);
    ok = s != NULL && v->a0 <= s->len;
    if (ok) {
        addr = s->addr;
    }
    tw_mutex_unlock(&shm->send_lock);
    if (!ok) {
        return TW_SHM_RX_BAD;
    }
    tw_shm_job_add(shm, p->rank, TW_SHM_DATA, 0, v->a1, v->a2, addr, v->a0);
    return TW_SHM_RX_DONE;
}

/* Handle one published cell: DONE, BAD (corrupt: the caller fails the
 * peer; *@p why says why when the cell's shape is wrong), or STOP
 * (@p inline_only and the cell must go to the engine: an arrival whose am
 * id runs user code). */
static int tw_shm_rx_cell(tw_shm_iface_t *shm, tw_shm_peer_t *p, const tw_shm_cell_t *c,
                          bool inline_only, const char **why)
{
    tw_shm_cell_view_t v;
    bool bad = false;

    if (tw_shm_cell_parse(c, &v, why) != TW_OK) {
        return TW_SHM_RX_BAD;
    }
    if (inline_only && (v.type == TW_SHM_EAGER || v.type == TW_SHM_RTS) &&
        (v.am_id >= 64 || (shm->super.inline_am_ids & (1ull << v.am_id)) == 0)) {
        return TW_SHM_RX_STOP;
    }
    switch (v.type) {
    case TW_SHM_EAGER:
        tw_stats_inc(shm->super.stats, TW_TL_STAT_RX_MSGS);
        tw_stats_add(shm->super.stats, TW_TL_STAT_RX_BYTES, v.len - v.hdr_len);
        shm->super.recv(shm->super.recv_arg, p->rank, v.am_id, v.data, v.hdr_len,
                        v.data + v.hdr_len, v.len - v.hdr_len);
        return TW_SHM_RX_DONE;
    case TW_SHM_RTS:
        return tw_shm_rx_rts(shm, p, &v);
    case TW_SHM_FIN:
        /* a0 != 0: the receiver could not take it. */
        return tw_shm_send_complete(shm, v.a2, p->rank, v.a0 == 0 ? TW_OK : TW_ERR_NOMEM)
                   ? TW_SHM_RX_DONE
                   : TW_SHM_RX_BAD;
    case TW_SHM_CTS:
        return tw_shm_rx_cts(shm, p, &v);
    case TW_SHM_DATA:
        tw_shm_rx_data(shm, p->rank, v.a1, v.a0, v.data, v.len, &bad);
        return bad ? TW_SHM_RX_BAD : TW_SHM_RX_DONE;
    default:
        return TW_SHM_RX_BAD;
    }
}

static int tw_shm_rx_peer(tw_shm_iface_t *shm, tw_shm_peer_t *p, bool inline_only)
{
    int n = 0;

    while (n < TW_SHM_BUDGET && tw_shm_peer_is_up(p) && p->fail_pending == NULL) {
        uint64_t head = p->rx_head;
        tw_shm_cell_t *c = tw_shm_cell(p->rx, shm->ncells, head);
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);

        if (seq == head) {
            break; /* not published yet */
        }
        if (seq != head + 1) {
            tw_shm_fail_peer(shm, p->rank, "corrupt ring (sequence word)");
            break;
        }
        const char *why = "corrupt or unexpected ring cell";
        int rc = tw_shm_rx_cell(shm, p, c, inline_only, &why);
        if (rc == TW_SHM_RX_STOP) {
            tw_pe_wake(shm->super.pe); /* sleeping aside, it would not look */
            break;                     /* the engine takes it, in order */
        }
        if (rc == TW_SHM_RX_BAD) {
            tw_shm_fail_peer(shm, p->rank, why);
            break;
        }
        atomic_store_explicit(&c->seq, head + shm->ncells, memory_order_release);
        p->rx_head = head + 1;
        n++;
    }
    if (n > 0) {
        /* Freed cells: wake a producer engine that waits for room. */
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&p->rx->want_wake, memory_order_relaxed) != 0 &&
            atomic_exchange_explicit(&p->rx->want_wake, 0, memory_order_relaxed) != 0) {
            tw_shm_kick(shm, p);
        }
    }
    return n;
}

/* Every live peer's ring, then the queued outbound work. */
static int tw_shm_rx_all(tw_shm_iface_t *shm, bool inline_only)
{
    int n = 0;

    for (int r = 0; r < shm->super.size; r++) {
        tw_shm_peer_t *p = &shm->peers[r];
        if (p->attached && tw_shm_peer_is_up(p)) {
            n += tw_shm_rx_peer(shm, p, inline_only);
        }
    }
    if (shm->jobs_head != NULL) {
        n += tw_shm_jobs_progress(shm); /* (another file: no call when idle) */
    }
    return n;
}

int tw_shm_progress(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    uint64_t w = tw_pe_wakeups(iface->pe);
    int n;

    if (shm->npeers_up == 0 && shm->jobs_head == NULL) {
        return 0;
    }
    if (shm->nfail_pending > 0) {
        for (int r = 0; r < iface->size; r++) {
            const char *why = shm->peers[r].fail_pending;
            if (why != NULL) {
                shm->peers[r].fail_pending = NULL;
                shm->nfail_pending--;
                tw_shm_fail_peer(shm, r, why);
            }
        }
    }
    n = tw_shm_rx_all(shm, false);
    if (w != shm->seen_wakeups) {
        char buf[64];
        shm->seen_wakeups = w;
        while (recv(shm->wake_fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
        }
        shm->next_check_ns = 0;
    }
    uint64_t now = tw_pe_pass_coarse_ns(shm->super.pe); /* every pass: read once */
    if (now >= shm->next_check_ns) {
        shm->next_check_ns = now + TW_SHM_CHECK_NS;
        tw_shm_check_peers(shm);
    }
    return n;
}

/* A waiting worker's share: tagged arrivals and what goes with them. */
/* Thread: holder of the engine's lock (tw_shm_poll). */
static int tw_shm_poll_locked(void *arg)
{
    tw_shm_iface_t *shm = arg;
    int n;

    if (shm->npeers_up == 0 && shm->jobs_head == NULL) {
        return 0;
    }
    shm->in_poll = true;
    n = tw_shm_rx_all(shm, true);
    shm->in_poll = false;
    /* No lease (tw_pe_lease) from here: shm wakes a sleeping engine only
     * through the sleep words, and with it a poll loop of 2 pinned
     * processes went from 0.24-0.26 to 0.34-0.56 us (tw_perf -l poll). */
    return n;
}

int tw_shm_poll(tw_tl_iface_t *iface)
{
    return tw_pe_try_call(iface->pe, tw_shm_poll_locked, iface);
}
