/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The public collective calls that take a group (tw_group_world and
 * tw_group_create take a context: runtime/tw_api.c). Every argument is
 * checked here, with one log line naming what is wrong, before anything
 * moves -- and before the group is marked busy, so a bad call leaves it
 * as it was.
 */
#include <stdint.h>

#include "coll/tw_coll_int.h"
#include "coll/tw_coll_op.h"
#include "core/tw_log.h"

/* @p g if it is a live group, else NULL (logged with @p fn). */
static tw_group_t *tw_group_get(const tw_group_t *g, const char *fn)
{
    if (g == NULL) {
        tw_error("api", "%s: NULL group", fn);
        return NULL;
    }
    if (atomic_load_explicit(&g->magic, memory_order_acquire) != TW_GROUP_MAGIC) {
        tw_error("api", "%s: %p is not a live group", fn, (const void *)g);
        return NULL;
    }
    return (tw_group_t *)g;
}

static bool tw_coll_root_ok(const tw_group_t *g, int root, const char *fn)
{
    if (root < 0 || root >= g->n) {
        tw_error("api", "%s: root %d is not a member (group of %d)", fn, root, g->n);
        return false;
    }
    return true;
}

static bool tw_coll_cq_ok(const tw_group_t *g, tw_cq_t *cq, const char *fn)
{
    if (cq == NULL) {
        tw_error("api", "%s: NULL completion queue", fn);
        return false;
    }
    if (tw_cq_owner(cq) != (void *)g->coll->p.ctx) {
        tw_error("api", "%s: completion queue %p belongs to another context", fn, (void *)cq);
        return false;
    }
    return true;
}

/* Checks of a reduction's arguments; bytes in *bytes_p. */
static bool tw_coll_red_ok(const tw_group_t *g, const void *sendbuf, const void *recvbuf,
                           bool need_recv, size_t count, tw_dtype_t dt, tw_redop_t op,
                           const char *fn)
{
    size_t esize = tw_coll_dtype_size(dt);

    if (esize == 0) {
        tw_error("api", "%s: %d is not a tw_dtype_t", fn, (int)dt);
        return false;
    }
    if (!tw_coll_op_valid(dt, op)) {
        tw_error("api", "%s: operator %s (%d) does not apply to %s", fn, tw_coll_op_name(op),
                 (int)op, tw_coll_dtype_name(dt));
        return false;
    }
    if (count > SIZE_MAX / esize || count * esize > (size_t)INT64_MAX) {
        tw_error("api", "%s: %zu elements of %s do not fit in memory", fn, count,
                 tw_coll_dtype_name(dt));
        return false;
    }
    if (count > 0 && (sendbuf == NULL || (need_recv && recvbuf == NULL))) {
        tw_error("api", "%s: NULL %s with %zu elements", fn,
                 sendbuf == NULL ? "sendbuf" : "recvbuf", count);
        return false;
    }
    (void)g;
    return true;
}

int tw_group_rank(const tw_group_t *g)
{
    return g != NULL ? g->me : -1;
}

int tw_group_size(const tw_group_t *g)
{
    return g != NULL ? g->n : -1;
}

tw_status_t tw_group_destroy(tw_group_t *g)
{
    if (tw_group_get(g, "tw_group_destroy") == NULL) {
        return TW_ERR_INVALID;
    }
    if (g->world) {
        tw_error("api", "tw_group_destroy: the world group is tw_finalize's to free");
        return TW_ERR_INVALID;
    }
    if (atomic_load_explicit(&g->busy, memory_order_acquire)) {
        tw_error("api", "tw_group_destroy: a collective is still outstanding on the group");
        return TW_ERR_INVALID;
    }
    tw_group_destroy_internal(g);
    return TW_OK;
}

static tw_status_t tw_barrier_post(tw_group_t *g, tw_cq_t *cq, void *user, bool nb)
{
    const char *fn = nb ? "tw_ibarrier" : "tw_barrier";

    if (tw_group_get(g, fn) == NULL || (nb && !tw_coll_cq_ok(g, cq, fn))) {
        return TW_ERR_INVALID;
    }
    return tw_coll_post(g, TW_COLL_BARRIER, NULL, NULL, 0, TW_UINT8, TW_SUM, 0, cq, user, nb);
}

static tw_status_t tw_bcast_post(tw_group_t *g, void *buf, size_t len, int root, tw_cq_t *cq,
                                 void *user, bool nb)
{
    const char *fn = nb ? "tw_ibcast" : "tw_bcast";

    if (tw_group_get(g, fn) == NULL || !tw_coll_root_ok(g, root, fn) ||
        (nb && !tw_coll_cq_ok(g, cq, fn))) {
        return TW_ERR_INVALID;
    }
    if (buf == NULL && len > 0) {
        tw_error("api", "%s: NULL buffer with %zu bytes", fn, len);
        return TW_ERR_INVALID;
    }
    return tw_coll_post(g, TW_COLL_BCAST, buf, buf, len, TW_UINT8, TW_SUM, root, cq, user, nb);
}

static tw_status_t tw_reduce_post(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                                  tw_dtype_t dt, tw_redop_t op, int root, tw_cq_t *cq, void *user,
                                  bool nb)
{
    const char *fn = nb ? "tw_ireduce" : "tw_reduce";

    if (tw_group_get(g, fn) == NULL || !tw_coll_root_ok(g, root, fn) ||
        !tw_coll_red_ok(g, sendbuf, recvbuf, g->me == root, count, dt, op, fn) ||
        (nb && !tw_coll_cq_ok(g, cq, fn))) {
        return TW_ERR_INVALID;
    }
    return tw_coll_post(g, TW_COLL_REDUCE, sendbuf, recvbuf, count, dt, op, root, cq, user, nb);
}

static tw_status_t tw_allreduce_post(tw_group_t *g, const void *sendbuf, void *recvbuf,
                                     size_t count, tw_dtype_t dt, tw_redop_t op, tw_cq_t *cq,
                                     void *user, bool nb)
{
    const char *fn = nb ? "tw_iallreduce" : "tw_allreduce";

    if (tw_group_get(g, fn) == NULL ||
        !tw_coll_red_ok(g, sendbuf, recvbuf, true, count, dt, op, fn) ||
        (nb && !tw_coll_cq_ok(g, cq, fn))) {
        return TW_ERR_INVALID;
    }
    return tw_coll_post(g, TW_COLL_ALLREDUCE, sendbuf, recvbuf, count, dt, op, 0, cq, user, nb);
}

tw_status_t tw_barrier(tw_group_t *g)
{
    return tw_barrier_post(g, NULL, NULL, false);
}

tw_status_t tw_bcast(tw_group_t *g, void *buf, size_t len, int root)
{
    return tw_bcast_post(g, buf, len, root, NULL, NULL, false);
}

tw_status_t tw_reduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                      tw_dtype_t dt, tw_redop_t op, int root)
{
    return tw_reduce_post(g, sendbuf, recvbuf, count, dt, op, root, NULL, NULL, false);
}

tw_status_t tw_allreduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                         tw_dtype_t dt, tw_redop_t op)
{
    return tw_allreduce_post(g, sendbuf, recvbuf, count, dt, op, NULL, NULL, false);
}

tw_status_t tw_ibarrier(tw_group_t *g, tw_cq_t *cq, void *user)
{
    return tw_barrier_post(g, cq, user, true);
}

tw_status_t tw_ibcast(tw_group_t *g, void *buf, size_t len, int root, tw_cq_t *cq, void *user)
{
    return tw_bcast_post(g, buf, len, root, cq, user, true);
}

tw_status_t tw_ireduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                       tw_dtype_t dt, tw_redop_t op, int root, tw_cq_t *cq, void *user)
{
    return tw_reduce_post(g, sendbuf, recvbuf, count, dt, op, root, cq, user, true);
}

tw_status_t tw_iallreduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                          tw_dtype_t dt, tw_redop_t op, tw_cq_t *cq, void *user)
{
    return tw_allreduce_post(g, sendbuf, recvbuf, count, dt, op, cq, user, true);
}
