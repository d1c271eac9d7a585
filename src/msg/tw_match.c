/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Tag matching without a global lock
 * ==================================
 *
 * MPI matching has two queues: posted receives (waiting for a message) and
 * unexpected messages (waiting for a receive). A message matches the
 * earliest-posted receive that accepts it; a receive matches the
 * earliest-arrived message it accepts. Many threads post receives while
 * progress threads deliver messages, so one lock around both queues would
 * serialize every thread of the process on every message.
 *
 * Exact receives (one source, every tag bit significant) and every message
 * are hashed by (source, tag) into buckets, each with its own short
 * spinlock and its own posted and unexpected lists, both kept in order.
 * A message and an exact receive that could match always meet in the same
 * bucket, so with only exact receives matching takes one bucket lock, and
 * threads working on different (source, tag) pairs do not contend.
 *
 * Wildcard receives (TW_ANY_SOURCE, or a tag mask) cannot be hashed. They
 * live in one list under `wild_lock`, and `n_wild` counts them. The paths:
 *
 *   arrival (src, tag), bucket b:
 *     lock b; if n_wild == 0: match in b.posted or queue as unexpected.
 *     Otherwise unlock b, take wild_lock then b, and match against both
 *     b.posted and the wildcard list, picking the receive with the lower
 *     post sequence number -- that is the earliest posted of the two.
 *
 *   exact receive, bucket b:
 *     lock b; take the first matching message of b.unexpected, else
 *     append to b.posted. It needs no wildcard check: see the invariant.
 *
 *   wildcard receive:
 *     take wild_lock; n_wild++; visit every bucket (lock, scan unexpected,
 *     unlock) and remember the matching message with the lowest arrival
 *     number (a bucket's scan stops at messages younger than the best one
 *     found so far); if there is one, lock its bucket and take it (if an exact
 *     receive took it meanwhile, rescan); otherwise append to the wildcard
 *     list. n_wild-- when the receive leaves the list or never entered it.
 *
 * Invariant: no unexpected message matches any posted receive. Every
 * operation keeps it, so an exact receive that finds a message in its
 * bucket knows no earlier (wildcard) receive wanted that message.
 *
 * Why the fast path's unlocked-looking read of n_wild is safe: the
 * wildcard poster increments n_wild before it locks each bucket; an
 * arrival reads n_wild while holding its bucket. If the arrival reads 0,
 * its critical section on b precedes the poster's visit of b (had the
 * visit come first, the increment would happen-before the arrival's lock
 * and be seen), so the poster's scan sees what the arrival queued. If it
 * reads non-zero it takes the slow path, which waits for wild_lock and so
 * for the poster to finish. Arrivals after the visit see n_wild > 0.
 *
 * Order: post and arrival numbers come from atomic counters taken under
 * the lock that publishes the element, so they agree with list order. A
 * sender's messages arrive one after another from one progress thread, so
 * their arrival numbers follow send order; both rules above then keep MPI's
 * non-overtaking order per (source, sending thread).
 *
 * Cost: exact receive or arrival, one uncontended spinlock; wildcard
 * receive, one lock per bucket (the slow path, as in MPI implementations
 * that keep a separate wildcard queue).
 */
#include "msg/tw_match.h"

#include <string.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"

static inline unsigned tw_match_hash(const tw_match_t *m, int src, uint64_t tag)
{
    uint64_t h =
        (tag ^ ((uint64_t)(unsigned)src << 32 | (uint64_t)(unsigned)src)) * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 40) & (m->nbuckets - 1);
}

static inline bool tw_match_is_exact(const tw_match_recv_t *r)
{
    return r->src != TW_ANY_SOURCE && r->ignore == 0;
}

tw_status_t tw_match_init(tw_match_t *m, unsigned nbuckets)
{
    if (nbuckets == 0 || nbuckets > 65536 || (nbuckets & (nbuckets - 1)) != 0) {
        tw_error("msg", "match bucket count %u is not a power of two in 1..65536", nbuckets);
        return TW_ERR_INVALID;
    }
    memset(m, 0, sizeof(*m));
    m->buckets = tw_malloc_aligned(TW_CACHELINE, nbuckets * sizeof(tw_match_bucket_t));
    if (m->buckets == NULL) {
        return TW_ERR_NOMEM;
    }
    memset(m->buckets, 0, nbuckets * sizeof(tw_match_bucket_t));
    for (unsigned i = 0; i < nbuckets; i++) {
        tw_spinlock_init(&m->buckets[i].lock);
    }
    m->nbuckets = nbuckets;
    tw_mutex_init(&m->wild_lock, TW_LOCK_RANK_MATCH_WILD, "any-source receives");
    atomic_init(&m->n_wild, 0);
    atomic_init(&m->post_seq, 0);
    atomic_init(&m->arrival_seq, 0);
    atomic_init(&m->n_unexp, 0);
    return TW_OK;
}

void tw_match_unexp_free(tw_match_unexp_t *u)
{
    tw_free(u, sizeof(*u) + (u->rndv != NULL ? 0 : u->len));
}

/* Unlink every receive of [*head..] naming @p src into *out. */
static void tw_match_take_src(tw_match_recv_t **head, tw_match_recv_t **tail, int src,
                              tw_match_recv_t **out, unsigned *n)
{
    tw_match_recv_t *prev = NULL;

    for (tw_match_recv_t *r = *head, *next; r != NULL; r = next) {
        next = r->next;
        if (r->src != src) {
            prev = r;
            continue;
        }
        if (prev == NULL) {
            *head = next;
        } else {
            prev->next = next;
        }
        if (*tail == r) {
            *tail = prev;
        }
        r->next = *out;
        *out = r;
        (*n)++;
    }
}

void tw_match_fail_src(tw_match_t *m, int src, void (*fail)(tw_match_recv_t *r, void *arg),
                       void *arg)
{
    tw_match_recv_t *out = NULL;
    unsigned nwild = 0, nexact = 0;

    tw_mutex_lock(&m->wild_lock);
    tw_match_take_src(&m->wild_head, &m->wild_tail, src, &out, &nwild);
    if (nwild > 0) {
        atomic_fetch_sub_explicit(&m->n_wild, nwild, memory_order_relaxed);
    }
    for (unsigned i = 0; i < m->nbuckets; i++) {
        tw_match_bucket_t *b = &m->buckets[i];
        tw_spinlock_lock(&b->lock);
        tw_match_take_src(&b->posted_head, &b->posted_tail, src, &out, &nexact);
        tw_spinlock_unlock(&b->lock);
    }
    tw_mutex_unlock(&m->wild_lock);
    /* Outside the locks: @p fail completes them. */
    for (tw_match_recv_t *r = out, *next; r != NULL; r = next) {
        next = r->next;
        fail(r, arg);
    }
}

void tw_match_walk(tw_match_t *m, void (*fn)(tw_match_recv_t *r, void *arg), void *arg)
{
    tw_mutex_lock(&m->wild_lock);
    for (tw_match_recv_t *r = m->wild_head; r != NULL; r = r->next) {
        fn(r, arg);
    }
    tw_mutex_unlock(&m->wild_lock);
    for (unsigned i = 0; i < m->nbuckets; i++) {
        tw_match_bucket_t *b = &m->buckets[i];
        tw_spinlock_lock(&b->lock);
        for (tw_match_recv_t *r = b->posted_head; r != NULL; r = r->next) {
            fn(r, arg);
        }
        tw_spinlock_unlock(&b->lock);
    }
}

void tw_match_cleanup(tw_match_t *m, void (*cancel)(tw_match_recv_t *r, void *arg),
                      void *arg) TW_NO_TSA
{
    for (unsigned i = 0; i < m->nbuckets; i++) {
        tw_match_bucket_t *b = &m->buckets[i];
        for (tw_match_recv_t *r = b->posted_head, *next; r != NULL; r = next) {
            next = r->next;
            cancel(r, arg);
        }
        for (tw_match_unexp_t *u = b->unexp_head, *next; u != NULL; u = next) {
            next = u->next;
            tw_match_unexp_free(u);
        }
        b->posted_head = b->posted_tail = NULL;
        b->unexp_head = b->unexp_tail = NULL;
    }
    for (tw_match_recv_t *r = m->wild_head, *next; r != NULL; r = next) {
        next = r->next;
        cancel(r, arg);
    }
    m->wild_head = m->wild_tail = NULL;
    tw_mutex_destroy(&m->wild_lock);
    tw_free_aligned(m->buckets, TW_CACHELINE, m->nbuckets * sizeof(tw_match_bucket_t));
    m->buckets = NULL;
}

/* ---- list helpers (caller holds the list's lock) --------------------- */

/* First receive in [*head..] accepting (src, tag); unlinked when found. */
static tw_match_recv_t *tw_match_take_recv(tw_match_recv_t **head, tw_match_recv_t **tail, int src,
                                           uint64_t tag, bool take)
{
    tw_match_recv_t *prev = NULL;
    for (tw_match_recv_t *r = *head; r != NULL; prev = r, r = r->next) {
        if (!tw_match_hits(r, src, tag)) {
            continue;
        }
        if (take) {
            if (prev == NULL) {
                *head = r->next;
            } else {
                prev->next = r->next;
            }
            if (*tail == r) {
                *tail = prev;
            }
            r->next = NULL;
        }
        return r;
    }
    return NULL;
}

static void tw_match_unlink_unexp(tw_match_bucket_t *b, tw_match_unexp_t *prev, tw_match_unexp_t *u)
    TW_REQUIRES(b->lock)
{
    if (prev == NULL) {
        b->unexp_head = u->next;
    } else {
        prev->next = u->next;
    }
    if (b->unexp_tail == u) {
        b->unexp_tail = prev;
    }
    u->next = NULL;
}

/* First unexpected message of @p b that @p r accepts and that arrived
 * before @p before (a list is in arrival order, so the scan stops there),
 * and its predecessor. */
static tw_match_unexp_t *tw_match_find_unexp(tw_match_bucket_t *b, const tw_match_recv_t *r,
                                             uint64_t before, tw_match_unexp_t **prev_p)
    TW_REQUIRES(b->lock)
{
    tw_match_unexp_t *prev = NULL;
    for (tw_match_unexp_t *u = b->unexp_head; u != NULL && u->seq < before; prev = u, u = u->next) {
        if (tw_match_hits(r, u->src, u->tag)) {
            *prev_p = prev;
            return u;
        }
    }
    return NULL;
}

static void tw_match_append_recv(tw_match_recv_t **head, tw_match_recv_t **tail, tw_match_recv_t *r)
{
    r->next = NULL;
    if (*tail == NULL) {
        *head = r;
    } else {
        (*tail)->next = r;
    }
    *tail = r;
}

static void tw_match_append_unexp(tw_match_t *m, tw_match_bucket_t *b, tw_match_unexp_t *u)
    TW_REQUIRES(b->lock)
{
    u->seq = atomic_fetch_add_explicit(&m->arrival_seq, 1, memory_order_relaxed);
    u->next = NULL;
    if (b->unexp_tail == NULL) {
        b->unexp_head = u;
    } else {
        b->unexp_tail->next = u;
    }
    b->unexp_tail = u;
    atomic_fetch_add_explicit(&m->n_unexp, 1, memory_order_relaxed);
}

/* ---- posting receives ------------------------------------------------ */

static tw_match_unexp_t *tw_match_post_exact(tw_match_t *m, tw_match_recv_t *r)
{
    tw_match_bucket_t *b = &m->buckets[tw_match_hash(m, r->src, r->tag)];
    tw_match_unexp_t *u, *prev = NULL;

    tw_spinlock_lock(&b->lock);
    r->seq = atomic_fetch_add_explicit(&m->post_seq, 1, memory_order_relaxed);
    u = tw_match_find_unexp(b, r, UINT64_MAX, &prev);
    if (u != NULL) {
        tw_match_unlink_unexp(b, prev, u);
        tw_spinlock_unlock(&b->lock);
        atomic_fetch_sub_explicit(&m->n_unexp, 1, memory_order_relaxed);
        return u;
    }
    tw_match_append_recv(&b->posted_head, &b->posted_tail, r);
    tw_spinlock_unlock(&b->lock);
    return NULL;
}

static tw_match_unexp_t *tw_match_post_wild(tw_match_t *m, tw_match_recv_t *r)
{
    tw_match_unexp_t *found = NULL;

    tw_mutex_lock(&m->wild_lock);
    r->seq = atomic_fetch_add_explicit(&m->post_seq, 1, memory_order_relaxed);
    /* Announce first: arrivals from here on take the slow path. */
    atomic_fetch_add_explicit(&m->n_wild, 1, memory_order_seq_cst);
    for (;;) {
        tw_match_bucket_t *best_b = NULL;
        tw_match_unexp_t *best = NULL;
        uint64_t best_seq = UINT64_MAX;

        for (unsigned i = 0; i < m->nbuckets; i++) {
            tw_match_bucket_t *b = &m->buckets[i];
            tw_match_unexp_t *u, *prev;

            tw_spinlock_lock(&b->lock);
            u = tw_match_find_unexp(b, r, best_seq, &prev);
            if (u != NULL) {
                best_seq = u->seq;
                best = u;
                best_b = b;
            }
            tw_spinlock_unlock(&b->lock);
        }
        if (best == NULL) {
            break;
        }
        /* Take it unless an exact receive got there first. */
        tw_spinlock_lock(&best_b->lock);
        tw_match_unexp_t *prev = NULL, *u = best_b->unexp_head;
        while (u != NULL && u != best) {
            prev = u;
            u = u->next;
        }
        if (u != NULL) {
            tw_match_unlink_unexp(best_b, prev, u);
            tw_spinlock_unlock(&best_b->lock);
            atomic_fetch_sub_explicit(&m->n_unexp, 1, memory_order_relaxed);
            found = u;
            break;
        }
        tw_spinlock_unlock(&best_b->lock);
    }
    if (found != NULL) {
        atomic_fetch_sub_explicit(&m->n_wild, 1, memory_order_relaxed);
    } else {
        tw_match_append_recv(&m->wild_head, &m->wild_tail, r);
    }
    tw_mutex_unlock(&m->wild_lock);
    return found;
}

tw_match_unexp_t *tw_match_post(tw_match_t *m, tw_match_recv_t *r)
{
    return tw_match_is_exact(r) ? tw_match_post_exact(m, r) : tw_match_post_wild(m, r);
}

/* ---- arrivals -------------------------------------------------------- */

/* Slow path: wildcard receives are posted. Caller holds nothing. */
static tw_match_recv_t *tw_match_arrive_wild(tw_match_t *m, tw_match_bucket_t *b, int src,
                                             uint64_t tag, tw_match_unexp_t *u, bool *queued_p)
{
    tw_match_recv_t *exact, *wild, *r = NULL;

    tw_mutex_lock(&m->wild_lock);
    tw_spinlock_lock(&b->lock);
    exact = tw_match_take_recv(&b->posted_head, &b->posted_tail, src, tag, false);
    wild = tw_match_take_recv(&m->wild_head, &m->wild_tail, src, tag, false);
    if (exact != NULL && (wild == NULL || exact->seq < wild->seq)) {
        r = tw_match_take_recv(&b->posted_head, &b->posted_tail, src, tag, true);
    } else if (wild != NULL) {
        r = tw_match_take_recv(&m->wild_head, &m->wild_tail, src, tag, true);
        atomic_fetch_sub_explicit(&m->n_wild, 1, memory_order_relaxed);
    } else if (u != NULL) {
        tw_match_append_unexp(m, b, u);
        *queued_p = true;
    }
    tw_spinlock_unlock(&b->lock);
    tw_mutex_unlock(&m->wild_lock);
    return r;
}

tw_match_recv_t *tw_match_arrive(tw_match_t *m, int src, uint64_t tag, const void *data, size_t len,
                                 void *rndv, tw_status_t *st_p)
{
    tw_match_bucket_t *b = &m->buckets[tw_match_hash(m, src, tag)];
    tw_match_unexp_t *u = NULL;
    tw_match_recv_t *r;

    *st_p = TW_OK;
    /* At most two rounds: the first without a copy (the common case is a
     * posted receive); if none matched, copy the payload outside the lock
     * and try again, since a receive may have been posted meanwhile. */
    for (;;) {
        bool queued = false;

        tw_spinlock_lock(&b->lock);
        if (atomic_load_explicit(&m->n_wild, memory_order_seq_cst) == 0) {
            r = tw_match_take_recv(&b->posted_head, &b->posted_tail, src, tag, true);
            if (r == NULL && u != NULL) {
                tw_match_append_unexp(m, b, u);
                queued = true;
            }
            tw_spinlock_unlock(&b->lock);
        } else {
            tw_spinlock_unlock(&b->lock);
            r = tw_match_arrive_wild(m, b, src, tag, u, &queued);
        }
        if (r != NULL) {
            if (u != NULL) {
                tw_match_unexp_free(u);
            }
            return r;
        }
        if (queued) {
            return NULL;
        }
        u = tw_malloc(sizeof(*u) + (rndv != NULL ? 0 : len));
        if (u == NULL) {
            tw_error("msg",
                     "out of memory queuing an unexpected %zu-byte message from rank %d "
                     "tag 0x%llx: message dropped",
                     len, src, (unsigned long long)tag);
            *st_p = TW_ERR_NOMEM;
            return NULL;
        }
        u->src = src;
        u->tag = tag;
        u->len = len;
        u->rndv = rndv;
        if (rndv == NULL && len > 0) {
            memcpy(u->data, data, len);
        }
    }
}

/* ---- taking back ----------------------------------------------------- */

tw_match_recv_t *tw_match_cancel(tw_match_t *m, int src, uint64_t tag)
{
    tw_match_bucket_t *b = &m->buckets[tw_match_hash(m, src, tag)];
    tw_match_recv_t *r;

    /* A bucket holds exact receives only: the first that accepts
     * (src, tag) is the earliest posted for exactly that. */
    tw_spinlock_lock(&b->lock);
    r = tw_match_take_recv(&b->posted_head, &b->posted_tail, src, tag, true);
    tw_spinlock_unlock(&b->lock);
    return r;
}

void tw_match_purge(tw_match_t *m, uint64_t tag, uint64_t mask,
                    void (*fn)(tw_match_unexp_t *u, void *arg), void *arg)
{
    tw_match_unexp_t *out = NULL;

    for (unsigned i = 0; i < m->nbuckets; i++) {
        tw_match_bucket_t *b = &m->buckets[i];
        tw_match_unexp_t *prev = NULL;
        tw_spinlock_lock(&b->lock);
        for (tw_match_unexp_t *u = b->unexp_head, *next; u != NULL; u = next) {
            next = u->next;
            if (((u->tag ^ tag) & mask) != 0) {
                prev = u;
                continue;
            }
            tw_match_unlink_unexp(b, prev, u);
            atomic_fetch_sub_explicit(&m->n_unexp, 1, memory_order_relaxed);
            u->next = out;
            out = u;
        }
        tw_spinlock_unlock(&b->lock);
    }
    for (tw_match_unexp_t *u = out, *next; u != NULL; u = next) {
        next = u->next;
        fn(u, arg);
    }
}
