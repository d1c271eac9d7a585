/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * shm, the sending side: producing cells, rendezvous sends, and the
 * engine's outbound work.
 *
 * Producing. Any thread of this process claims a cell of its ring in the
 * peer's segment by CAS on the ring's tail, once the cell's sequence word
 * says it is free for that position; it fills the cell and publishes it by
 * storing position + 1 (release). So a sender never waits for another
 * sender's commit. Ring full is TW_ERR_AGAIN.
 *
 * Wake-up, sender half. A sender that published a cell and then reads the
 * receiver's sleep flag set (a Dekker pair with the receiver's engine,
 * which sets the flag and then looks at its rings once more) sends one
 * datagram to the receiver's abstract unix socket, which its engine
 * watches. The first such sender turns the flag from 1 into 2, so a burst
 * costs one datagram per sleep, not one per message.
 *
 * Rendezvous. am_zcopy announces the message (RTS, with the buffer's
 * address) and keeps it in the send table until the receiver is done
 * with it: FIN after a CMA read, or, in the fallback, the receiver's CTS
 * makes this engine push DATA cells, and the send completes once the last
 * chunk is in the ring. CTS, FIN and DATA are posted by the engine, which
 * queues them when the ring is full -- never spins: two engines waiting on
 * each other's full rings would deadlock.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/shm/tw_shm_int.h"

/* ---- producing --------------------------------------------------------- */

/* Claim the next free cell of @p ring, or NULL when full. The consumer is
 * another process we do not trust with our progress: a sequence word that
 * never settles costs a bounded number of retries, then TW_ERR_AGAIN. */
static tw_shm_cell_t *tw_shm_claim(tw_shm_ring_hdr_t *ring, unsigned ncells, uint64_t *pos_p)
{
    uint64_t pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);

    for (unsigned tries = 0; tries < 64; tries++) {
        tw_shm_cell_t *c = tw_shm_cell(ring, ncells, pos);
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        int64_t diff = (int64_t)(seq - pos);

        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&ring->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                *pos_p = pos;
                return c;
            }
        } else if (diff < 0) {
            return NULL; /* the consumer has not freed it: full */
        } else {
            pos = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        }
    }
    return NULL;
}

void tw_shm_kick(tw_shm_iface_t *shm, tw_shm_peer_t *p)
{
    char b = 0;
    (void)sendto(shm->wake_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&p->wake_addr, p->wake_len);
}

/* Publish, then wake the receiver if it announced sleep. */
static void tw_shm_publish(tw_shm_iface_t *shm, tw_shm_peer_t *p, tw_shm_cell_t *c, uint64_t pos)
{
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    /* Store seq / load sleeping: the sender half of the Dekker pair. */
    atomic_thread_fence(memory_order_seq_cst);
    /* 1: it sleeps and nobody woke it yet -- we do (2 tells later
     * senders that a datagram is on its way); 2: already woken. */
    if (atomic_load_explicit(p->tx_sleeping, memory_order_relaxed) == 1 &&
        atomic_exchange_explicit(p->tx_sleeping, 2, memory_order_relaxed) == 1) {
        tw_shm_kick(shm, p);
    }
}

/* One cell with a header and up to two byte ranges. Thread: any. */
static tw_status_t tw_shm_post(tw_shm_iface_t *shm, tw_shm_peer_t *p, uint8_t type, uint8_t am_id,
                               const void *hdr, size_t hdr_len, const void *data, size_t len,
                               uint64_t a0, uint64_t a1, uint64_t a2)
{
    uint64_t pos;
    tw_shm_cell_t *c;

    if (!tw_shm_peer_is_up(p)) {
        return TW_ERR_PEER_FAILED;
    }
    c = tw_shm_claim(p->tx, shm->ncells, &pos);
    if (c == NULL) {
        tw_stats_inc(shm->super.stats, TW_TL_STAT_AGAIN);
        return TW_ERR_AGAIN;
    }
    c->type = type;
    c->am_id = am_id;
    c->hdr_len = (uint16_t)hdr_len;
    c->len = (uint32_t)(hdr_len + len);
    if (type != TW_SHM_EAGER) {
        c->a0 = a0;
        c->a1 = a1;
        c->a2 = a2;
    }
    unsigned char *bytes = tw_shm_cell_bytes(c, type);
    if (hdr_len > 0) {
        memcpy(bytes, hdr, hdr_len);
    }
    if (len > 0) {
        memcpy(bytes + hdr_len, data, len);
    }
    tw_shm_publish(shm, p, c, pos);
    return TW_OK;
}

tw_status_t tw_shm_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = tw_shm_peer(shm, peer);
    tw_status_t st;

    if (p == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (hdr_len + len > TW_SHM_CELL_DATA) {
        return TW_ERR_INVALID;
    }
    st = tw_shm_post(shm, p, TW_SHM_EAGER, am_id, hdr, hdr_len, data, len, 0, 0, 0);
    if (st == TW_OK) {
        tw_stats_inc(iface->stats, TW_TL_STAT_TX_MSGS);
        tw_stats_add(iface->stats, TW_TL_STAT_TX_BYTES, len);
    }
    return st;
}

/* ---- rendezvous sends ---------------------------------------------------- */

static uint64_t tw_shm_send_id(uint32_t idx, uint32_t gen)
{
    return (uint64_t)gen << 32 | idx;
}

/* Caller holds send_lock. */
tw_shm_send_t *tw_shm_send_find(tw_shm_iface_t *shm, uint64_t sid, int peer)
{
    uint32_t idx = (uint32_t)sid, gen = (uint32_t)(sid >> 32);
    tw_shm_send_t *s;

    if (idx >= TW_SHM_SENDS) {
        return NULL;
    }
    s = &shm->sends[idx];
    if (s->comp == NULL || s->gen != gen || s->peer != peer) {
        return NULL;
    }
    return s;
}

/* Caller holds send_lock. */
void tw_shm_send_release(tw_shm_iface_t *shm, tw_shm_send_t *s)
{
    s->comp = NULL;
    s->gen++;
    shm->nsends--;
    s->next_free = shm->send_free;
    shm->send_free = (uint32_t)(s - shm->sends);
}

bool tw_shm_send_complete(tw_shm_iface_t *shm, uint64_t sid, int peer, tw_status_t st)
{
    tw_tl_comp_t *comp = NULL;
    tw_shm_send_t *s;

    tw_mutex_lock(&shm->send_lock);
    s = tw_shm_send_find(shm, sid, peer);
    if (s != NULL) {
        comp = s->comp;
        tw_shm_send_release(shm, s);
    }
    tw_mutex_unlock(&shm->send_lock);
    if (comp != NULL) {
        comp->cb(comp, st);
    }
    return comp != NULL;
}

tw_status_t tw_shm_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                            size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = tw_shm_peer(shm, peer);
    tw_shm_send_t *s;
    uint64_t sid;
    tw_status_t st;

    if (p == NULL) {
        return TW_ERR_UNREACHABLE;
    }
    if (comp == NULL || hdr_len > TW_SHM_CELL_DATA || len > TW_SHM_MAX_MSG) {
        return TW_ERR_INVALID;
    }
    tw_mutex_lock(&shm->send_lock);
    if (shm->send_free == UINT32_MAX) {
        tw_mutex_unlock(&shm->send_lock);
        tw_stats_inc(iface->stats, TW_TL_STAT_AGAIN);
        return TW_ERR_AGAIN;
    }
    s = &shm->sends[shm->send_free];
    shm->send_free = s->next_free;
    shm->nsends++;
    s->comp = comp;
    s->addr = data;
    s->len = len;
    s->peer = peer;
    sid = tw_shm_send_id((uint32_t)(s - shm->sends), s->gen);
    tw_mutex_unlock(&shm->send_lock);

    st = tw_shm_post(shm, p, TW_SHM_RTS, am_id, hdr, hdr_len, NULL, 0, (uint64_t)(uintptr_t)data,
                     len, sid);
    if (st != TW_OK) {
        /* Not announced: take it back -- unless a peer failure completed
         * it meanwhile, which then reported it. */
        bool mine = false;
        tw_mutex_lock(&shm->send_lock);
        s = tw_shm_send_find(shm, sid, peer);
        if (s != NULL) {
            tw_shm_send_release(shm, s);
            mine = true;
        }
        tw_mutex_unlock(&shm->send_lock);
        return mine ? st : TW_OK;
    }
    tw_stats_inc(iface->stats, TW_TL_STAT_TX_MSGS);
    tw_stats_add(iface->stats, TW_TL_STAT_TX_BYTES, len);
    return TW_OK;
}

/* ---- engine-side outbound work ------------------------------------------ */

static void tw_shm_job_push(tw_shm_iface_t *shm, tw_shm_job_t *j)
{
    j->next = NULL;
    if (shm->jobs_tail == NULL) {
        shm->jobs_head = j;
    } else {
        shm->jobs_tail->next = j;
    }
    shm->jobs_tail = j;
}

/* A control cell goes at once when nothing is queued ahead of it. */
void tw_shm_job_add(tw_shm_iface_t *shm, int peer, uint8_t type, uint64_t a0, uint64_t a1,
                    uint64_t a2, const void *src, size_t want)
{
    tw_shm_job_t *j;

    if (type != TW_SHM_DATA && shm->jobs_head == NULL) {
        tw_status_t st = tw_shm_post(shm, &shm->peers[peer], type, 0, NULL, 0, NULL, 0, a0, a1, a2);
        if (st != TW_ERR_AGAIN) {
            return; /* posted, or the peer is down (its failure completes it) */
        }
    }
    j = tw_malloc(sizeof(*j));
    if (j == NULL) {
        /* Without it the peer's operation would hang: fail the peer. */
        tw_error("shm", "out of memory queuing a %s to rank %d", tw_shm_cell_type_name(type), peer);
        tw_shm_fail_peer(shm, peer, "out of memory");
        return;
    }
    *j = (tw_shm_job_t){
        .peer = peer, .type = type, .a0 = a0, .a1 = a1, .a2 = a2, .src = src, .want = want};
    tw_shm_job_push(shm, j);
}

/* Post what a job still has to post; true when it is done. */
static bool tw_shm_job_run(tw_shm_iface_t *shm, tw_shm_job_t *j)
{
    tw_shm_peer_t *p = &shm->peers[j->peer];

    if (!tw_shm_peer_is_up(p)) {
        return true; /* the failure completed its operation */
    }
    if (j->type != TW_SHM_DATA) {
        return tw_shm_post(shm, p, j->type, 0, NULL, 0, NULL, 0, j->a0, j->a1, j->a2) !=
               TW_ERR_AGAIN;
    }
    while (j->off < j->want) {
        size_t n = TW_MIN(j->want - j->off, (size_t)TW_SHM_CELL_DATA);
        if (tw_shm_post(shm, p, TW_SHM_DATA, 0, NULL, 0, j->src + j->off, n, j->off, j->a1, 0) !=
            TW_OK) {
            return false;
        }
        j->off += n;
    }
    /* All of it is in the ring: the sender's buffer is free. */
    tw_shm_send_complete(shm, j->a2, j->peer, TW_OK);
    return true;
}

int tw_shm_jobs_progress(tw_shm_iface_t *shm)
{
    int n = 0;

    while (shm->jobs_head != NULL) {
        tw_shm_job_t *j = shm->jobs_head;
        if (!tw_shm_job_run(shm, j)) {
            /* Ring full: ask the consumer to wake us when it frees cells
             * (we may sleep meanwhile), then look once more -- Dekker
             * again, against its free-then-check. */
            tw_shm_ring_hdr_t *ring = shm->peers[j->peer].tx;
            atomic_store_explicit(&ring->want_wake, 1, memory_order_seq_cst);
            atomic_thread_fence(memory_order_seq_cst);
            if (!tw_shm_job_run(shm, j)) {
                break; /* keep order, try next pass */
            }
        }
        shm->jobs_head = j->next;
        if (shm->jobs_head == NULL) {
            shm->jobs_tail = NULL;
        }
        tw_free(j, sizeof(*j));
        n++;
    }
    return n;
}

/* ---- test hook: a corrupt producer ------------------------------------- */

#if TW_TESTING
unsigned tw_shm_test_chaos(tw_tl_iface_t *iface, int peer, uint64_t seed)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = tw_shm_peer(shm, peer);
    uint64_t x = seed | 1;
    unsigned n = 0;

    if (p == NULL) {
        return 0;
    }
    /* Scribble on our ring in the peer's segment: its tail, sequence
     * words and cell headers. The peer must fail us and nothing else. */
    for (unsigned i = 0; i < 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned what = i == 0 ? 4 : (unsigned)(x % 5);
        tw_shm_cell_t *c = tw_shm_cell(p->tx, shm->ncells, x >> 8);
        uint64_t pos;
        switch (what) {
        case 4:
            /* A properly published cell full of nonsense. */
            c = tw_shm_claim(p->tx, shm->ncells, &pos);
            if (c != NULL) {
                c->type = (uint8_t)(x >> 5);
                c->am_id = (uint8_t)(x >> 13);
                c->hdr_len = (uint16_t)(x >> 21);
                c->len = (uint32_t)(x >> 29);
                c->a0 = x * 5, c->a1 = x * 11, c->a2 = x * 13;
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
            }
            break;
        case 0:
            atomic_store(&p->tx->tail, x);
            break;
        case 1:
            atomic_store_explicit(&c->seq, x >> 3, memory_order_release);
            break;
        case 2:
            memcpy((unsigned char *)c + 8, &x, sizeof(x));
            break;
        default:
            c->a0 = x, c->a1 = x * 3, c->a2 = x * 7, c->len = (uint32_t)x;
            c->hdr_len = (uint16_t)(x >> 16);
            c->type = (uint8_t)(x >> 24);
            /* Publish it as if it were the next cell. */
            atomic_store_explicit(&c->seq, (x >> 8) + 1, memory_order_release);
            break;
        }
        n++;
    }
    return n;
}
#endif
