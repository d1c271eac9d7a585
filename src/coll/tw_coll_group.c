/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Groups: their layout over the nodes, and making one.
 *
 * Layout. Member i lives on node node_of[ranks[i]]; the group's nodes are
 * numbered in order of their first member, whose member is the node's
 * leader for the group. Collectives that span nodes combine within a node
 * first and between leaders after (tw_coll_sched.c).
 *
 * Making a group (tw_group_create). Each member takes an entry of its own
 * group table -- its rid, the id its messages of the group are tagged
 * with -- and tells the first member: JOIN {key, hash of the list, n,
 * rid}. The first member collects every JOIN, checks that all agree, and
 * answers each with WELCOME {the same, every member's rid}. Both kinds are
 * tagged with a 56-bit hash of (list, key) in the upper bits and a low
 * byte no operation uses, so creations of different groups never meet,
 * and what a member receives is checked in full (a hash collision is an
 * error, never a wrong group). A member that never comes makes the others
 * give up after TW_COLL_CREATE_TIMEOUT; a member that fails makes them
 * fail at once.
 */
#include <string.h>

#include "coll/tw_coll_int.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_siphash.h"
#include "core/tw_time.h"

/* Depth of a group's CQ: every receive one operation posts at once, and
 * the failure wake-up. */
#define TW_GROUP_CQ_DEPTH 1024u

tw_status_t tw_group_alloc(tw_coll_t *coll, const int *ranks, int n, int me, tw_group_t **g_p)
{
    tw_group_t *g = tw_calloc(1, sizeof(*g));
    tw_cq_params_t cqp = coll->p.cq;
    int *first = NULL; /* [job's nodes] -> group node index, -1 */
    tw_status_t st = TW_ERR_NOMEM;

    if (g == NULL) {
        return TW_ERR_NOMEM;
    }
    g->coll = coll;
    g->n = n;
    g->me = me;
    g->cq_fd = -1;
    g->shm.slot = -1;
    atomic_init(&g->busy, false);
    atomic_init(&g->failed, 0);
    atomic_init(&g->woken, false);
    g->ranks = tw_malloc((size_t)n * sizeof(*g->ranks));
    g->rids = tw_calloc((size_t)n, sizeof(*g->rids));
    g->node_idx = tw_malloc((size_t)n * sizeof(*g->node_idx));
    g->leader = tw_malloc((size_t)n * sizeof(*g->leader));
    g->local = tw_malloc((size_t)n * sizeof(*g->local));
    g->plan_top = tw_malloc((size_t)n * sizeof(*g->plan_top));
    first = tw_malloc((size_t)coll->p.nnodes * sizeof(*first));
    if (g->ranks == NULL || g->rids == NULL || g->node_idx == NULL || g->leader == NULL ||
        g->local == NULL || g->plan_top == NULL || first == NULL) {
        goto err;
    }
    memcpy(g->ranks, ranks, (size_t)n * sizeof(*g->ranks));
    for (int k = 0; k < coll->p.nnodes; k++) {
        first[k] = -1;
    }
    int mynode = coll->p.node_of[ranks[me]];
    for (int i = 0; i < n; i++) {
        int node = coll->p.node_of[ranks[i]];
        if (first[node] < 0) {
            first[node] = g->nnodes;
            g->leader[g->nnodes++] = i;
        }
        g->node_idx[i] = first[node];
        if (node == mynode) {
            if (i == me) {
                g->my_local = g->nlocal;
            }
            g->local[g->nlocal++] = i;
        }
    }
    cqp.depth = TW_GROUP_CQ_DEPTH;
    st = tw_cq_open(&cqp, &g->cq);
    if (st != TW_OK) {
        goto err;
    }
    st = tw_cq_reserve(g->cq); /* tw_group_fail's wake-up */
    if (st != TW_OK) {
        goto err;
    }
    tw_free(first, (size_t)coll->p.nnodes * sizeof(*first));
    atomic_store_explicit(&g->magic, TW_GROUP_MAGIC, memory_order_release);
    *g_p = g;
    return TW_OK;

err:
    tw_free(first, (size_t)coll->p.nnodes * sizeof(*first));
    tw_group_free(g);
    return st;
}

void tw_group_free(tw_group_t *g)
{
    size_t n = (size_t)g->n;
    tw_completion_t c[16];

    atomic_store_explicit(&g->magic, 0, memory_order_release);
    if (g->cq != NULL) {
        if (!atomic_load_explicit(&g->woken, memory_order_acquire)) {
            tw_cq_unreserve(g->cq);
        }
        while (tw_cq_poll(g->cq, c, (int)TW_ARRAY_SIZE(c)) > 0) {
        }
        if (tw_cq_destroy(g->cq) != TW_OK) {
            tw_warn("coll", "a group's receive queue still had %u operation(s)",
                    tw_cq_inflight(g->cq));
        }
    }
    tw_coll_op_free(&g->op);
    tw_free(g->ranks, n * sizeof(*g->ranks));
    tw_free(g->rids, n * sizeof(*g->rids));
    tw_free(g->node_idx, n * sizeof(*g->node_idx));
    tw_free(g->leader, n * sizeof(*g->leader));
    tw_free(g->local, n * sizeof(*g->local));
    tw_free(g->plan_top, n * sizeof(*g->plan_top));
    tw_free(g, sizeof(*g));
}

/* ---- making a group ------------------------------------------------------ */

typedef struct tw_group_hello {
    uint64_t key;
    uint64_t list_hash; /* of (n, ranks) */
    uint32_t n;
    uint32_t rid;   /* JOIN: the sender's */
    int32_t status; /* WELCOME: TW_OK, or why the group is not made */
    int32_t slot;   /* JOIN of a node's first member: its node's slot set, or -1 */
} tw_group_hello_t;

/* WELCOME: the hello, every member's rid [n], every node's slot set [nnodes]. */
static size_t tw_group_welcome_len(const tw_group_t *g)
{
    return sizeof(tw_group_hello_t) + (size_t)g->n * sizeof(uint32_t) +
           (size_t)g->nnodes * sizeof(int32_t);
}

static uint64_t tw_group_hash(const int *ranks, int n, uint64_t key, uint8_t which)
{
    uint8_t k[16] = {'t', 'w', 'g', 'r', 'o', 'u', 'p', which};
    uint64_t h = tw_siphash24(k, ranks, (size_t)n * sizeof(*ranks));

    return h ^ tw_siphash24(k, &key, sizeof(key)) * 0x9E3779B97F4A7C15ull;
}

tw_status_t tw_coll_wait_flags(tw_group_t *g, unsigned *pending, uint64_t deadline_ns)
{
    tw_completion_t c[16];
    tw_status_t st = TW_OK;

    while (*pending > 0) {
        uint64_t now = tw_time_ns();
        if (now >= deadline_ns) {
            return TW_ERR_TIMEOUT;
        }
        int left_ms = (int)TW_MIN((deadline_ns - now) / 1000000u + 1, 100u);
        int k = tw_cq_wait(g->cq, c, (int)TW_ARRAY_SIZE(c), left_ms);
        for (int i = 0; i < k; i++) {
            if (c[i].user == NULL) {
                continue; /* a failure wake-up: the statuses say it */
            }
            (*pending)--;
            *(bool *)c[i].user = true;
            if (c[i].status != TW_OK && st == TW_OK) {
                st = c[i].status;
            }
        }
        tw_coll_reap_sends(g->coll);
    }
    return st;
}

static tw_status_t tw_group_handshake(tw_group_t *g, uint64_t key, int claim, int *slot_p)
{
    tw_coll_t *coll = g->coll;
    uint64_t h = tw_group_hash(g->ranks, g->n, key, 0) & 0x00FFFFFFFFFFFFFFull;
    uint64_t join_tag = (h << 8) | TW_COLL_STEP_JOIN, welc_tag = (h << 8) | TW_COLL_STEP_WELC;
    uint64_t deadline = tw_time_ns() + coll->cfg.create_timeout_ns;
    tw_group_hello_t me = {.key = key,
                           .list_hash = tw_group_hash(g->ranks, g->n, key, 1),
                           .n = (uint32_t)g->n,
                           .rid = g->rids[g->me],
                           .slot = claim};
    size_t welc_len = tw_group_welcome_len(g);
    size_t slots_off = sizeof(tw_group_hello_t) + (size_t)g->n * sizeof(uint32_t);
    unsigned char *welc = tw_malloc(welc_len);
    tw_group_hello_t *joins = NULL;
    bool *got = tw_calloc((size_t)g->n, sizeof(*got));
    unsigned pending = 0;
    tw_status_t st = TW_OK;

    if (welc == NULL || got == NULL) {
        st = TW_ERR_NOMEM;
        goto out;
    }
    if (g->me == 0) {
        joins = tw_calloc((size_t)g->n, sizeof(*joins));
        if (joins == NULL) {
            st = TW_ERR_NOMEM;
            goto out;
        }
        for (int i = 1; i < g->n && st == TW_OK; i++) {
            st = tw_msg_coll_recv(coll->p.msg, g->ranks[i], join_tag, &joins[i], sizeof(joins[i]),
                                  g->cq, &got[i]);
            pending += st == TW_OK;
        }
        if (st == TW_OK) {
            st = tw_coll_wait_flags(g, &pending, deadline);
        }
        for (int i = 1; i < g->n && st == TW_OK; i++) {
            if (joins[i].key != me.key || joins[i].list_hash != me.list_hash ||
                joins[i].n != me.n) {
                tw_error("coll",
                         "tw_group_create: rank %d called it with another rank list or "
                         "key than rank %d (key %llu vs %llu)",
                         g->ranks[i], g->ranks[0], (unsigned long long)joins[i].key,
                         (unsigned long long)key);
                st = TW_ERR_INVALID;
            }
            g->rids[i] = joins[i].rid;
        }
        /* Every member hears how it ended, so none waits for nothing. */
        me.status = st;
        memcpy(welc, &me, sizeof(me));
        memcpy(welc + sizeof(me), g->rids, (size_t)g->n * sizeof(uint32_t));
        for (int k = 0; k < g->nnodes; k++) {
            int32_t slot = g->leader[k] == 0 ? claim : joins[g->leader[k]].slot;
            memcpy(welc + slots_off + (size_t)k * sizeof(slot), &slot, sizeof(slot));
        }
        *slot_p = claim; /* member 0 leads its node */
        for (int i = 1; i < g->n; i++) {
            if (got[i]) {
                (void)tw_coll_send(coll, g->ranks[i], welc_tag, welc, welc_len);
            }
        }
    } else {
        st = tw_coll_send(coll, g->ranks[0], join_tag, &me, sizeof(me));
        if (st == TW_OK) {
            st = tw_msg_coll_recv(coll->p.msg, g->ranks[0], welc_tag, welc, welc_len, g->cq,
                                  &got[0]);
            pending += st == TW_OK;
        }
        if (st == TW_OK) {
            st = tw_coll_wait_flags(g, &pending, deadline);
        }
        if (st == TW_OK) {
            tw_group_hello_t w;
            memcpy(&w, welc, sizeof(w));
            if (w.key != me.key || w.list_hash != me.list_hash || w.n != me.n) {
                tw_error("coll",
                         "tw_group_create: rank %d called it with another rank list or "
                         "key than this one",
                         g->ranks[0]);
                st = TW_ERR_INVALID;
            } else if (w.status != TW_OK) {
                st = (tw_status_t)w.status;
            } else {
                uint32_t mine = g->rids[g->me];
                int32_t slot;
                memcpy(g->rids, welc + sizeof(w), (size_t)g->n * sizeof(uint32_t));
                memcpy(&slot, welc + slots_off + (size_t)g->node_idx[g->me] * sizeof(slot),
                       sizeof(slot));
                *slot_p = slot;
                if (g->rids[g->me] != mine) {
                    tw_error("coll", "tw_group_create: rank %d answered with a wrong id for us",
                             g->ranks[0]);
                    st = TW_ERR_PROTOCOL;
                }
            }
        }
    }
    /* Receives still posted (a timeout, a failure) are taken back; one
     * that matched meanwhile completes and is drained. */
    for (int i = 0; i < g->n && pending > 0; i++) {
        bool posted = g->me == 0 ? i > 0 : i == 0;
        int src = g->me == 0 ? g->ranks[i] : g->ranks[0];
        if (posted && !got[i] &&
            tw_msg_coll_cancel(coll->p.msg, src, g->me == 0 ? join_tag : welc_tag)) {
            got[i] = true;
            pending--;
        }
    }
    if (pending > 0) {
        (void)tw_coll_wait_flags(g, &pending, UINT64_MAX);
    }
out:
    if (joins != NULL) {
        tw_free(joins, (size_t)g->n * sizeof(*joins));
    }
    tw_free(got, (size_t)g->n * sizeof(*got));
    tw_free(welc, welc_len);
    return st;
}

tw_status_t tw_coll_group_create(tw_coll_t *coll, const int *ranks, int n, uint64_t key,
                                 tw_group_t **g_p)
{
    tw_group_t *g = NULL;
    int me = -1;
    tw_status_t st;

    for (int i = 0; i < n; i++) {
        if (ranks[i] == coll->p.rank) {
            me = i;
        }
    }
    st = tw_group_alloc(coll, ranks, n, me, &g);
    if (st != TW_OK) {
        return st;
    }
    g->key = key;
    st = tw_coll_table_add(coll, g, &g->rids[me]);
    /* The first member on this node finds the node's members a slot set. */
    int claim = st == TW_OK && g->local[0] == g->me ? tw_cshm_claim(coll, g) : -1, slot = -1;
    if (st == TW_OK && n > 1) {
        st = tw_group_handshake(g, key, claim, &slot);
    }
    if (st == TW_OK) {
        st = tw_cshm_bind(g, slot);
    } else if (claim >= 0) {
        g->shm.slot = claim; /* give it back whole: nobody else took it */
        (void)tw_cshm_bind(g, claim);
        tw_cshm_release(g);
    }
    if (st != TW_OK) {
        tw_group_destroy_internal(g);
        return st;
    }
    tw_stats_inc(coll->stats, TW_COLL_STAT_GROUPS);
    *g_p = g;
    return TW_OK;
}

void tw_group_destroy_internal(tw_group_t *g)
{
    tw_coll_t *coll = g->coll;
    uint32_t rid = g->rids[g->me];

    tw_coll_table_del(coll, g);
    tw_cshm_unbind(g);
    if (g->cq_fd >= 0) {
        tw_pe_unwatch(coll->p.pe, g->cq_fd);
    }
    /* What members sent that this member will never read: the leftovers
     * of a failed or revoked collective. */
    tw_msg_coll_purge(coll->p.msg, (uint64_t)rid << 32, 0xFFFFFFFF00000000ull);
    tw_group_free(g);
}
