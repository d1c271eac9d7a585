/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Public entry points that need the context: argument checks (every bad
 * argument is TW_ERR_INVALID with one log line naming it), then the layer
 * that does the work.
 */
#include <stdint.h>

#include "coll/tw_coll.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "msg/tw_rma.h"
#include "msg/tw_stall.h"
#include "progress/tw_cq.h"
#include "runtime/tw_bootstrap.h"
#include "runtime/tw_context_int.h"

/* A buffer of @p len bytes at @p buf can exist: no object is larger than
 * PTRDIFF_MAX, and it must not wrap the address space. */
static inline bool tw_api_buf_ok(const void *buf, size_t len)
{
    if (len == 0) {
        return true;
    }
    return buf != NULL && len <= (size_t)PTRDIFF_MAX && (uintptr_t)buf + len > (uintptr_t)buf;
}

int tw_rank(const tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_rank");
    return impl != NULL ? impl->rank : -1;
}

int tw_size(const tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_size");
    return impl != NULL ? impl->size : -1;
}

/* In the gate: tw_cq_wait calls it while another thread may finalize. */
static int tw_api_progress(tw_context_t *ctx, bool quiet)
{
    tw_ctx_impl_t *impl;
    int events;

    /* Quietly -1 for a dead context: CQs of a finalized context call
     * this from tw_cq_wait. */
    if (ctx == NULL || atomic_load_explicit(&ctx->magic, memory_order_relaxed) != TW_CTX_LIVE) {
        return -1;
    }
    impl = tw_ctx_enter(ctx, quiet ? NULL : "tw_progress");
    if (impl == NULL) {
        return -1;
    }
    events = tw_ctx_progress(impl);
    tw_ctx_leave(ctx);
    return events;
}

int tw_progress(tw_context_t *ctx)
{
    return tw_api_progress(ctx, false);
}

int tw_ctx_progress(void *arg)
{
    tw_ctx_impl_t *impl = arg;
    int events = 0;

    if (!impl->manual) {
        /* Progress threads own the engines and run AM handlers; while one
         * is idle, the caller may take tagged arrivals in itself, and move
         * nonblocking collectives on. */
        for (unsigned i = 0; i < impl->ntop; i++) {
            if (impl->tops[i]->caps & TW_TL_CAP_POLL) {
                events += tw_tl_poll(impl->tops[i]);
            }
        }
        if (impl->coll != NULL) {
            events += tw_coll_poll(impl->coll);
        }
        return events;
    }
    for (unsigned i = 0; i < impl->npe; i++) {
        events += tw_pe_progress(impl->pes[i]);
    }
    return events;
}

static int tw_api_progress_cb(void *arg)
{
    return tw_api_progress(arg, true);
}

void tw_ctx_cq_params_internal(tw_ctx_impl_t *impl, unsigned depth, tw_cq_params_t *p)
{
    tw_ctx_cq_params(impl, impl->ctx, depth, p);
    p->progress_fn = impl->manual ? tw_ctx_progress : NULL;
    p->poll_fn = impl->manual ? NULL : tw_ctx_progress;
    p->progress_arg = impl;
}

void tw_ctx_cq_params(tw_ctx_impl_t *impl, tw_context_t *ctx, unsigned depth, tw_cq_params_t *p)
{
    *p = (tw_cq_params_t){.depth = depth,
                          .wait_mode = (tw_wait_mode_t)impl->cfg.wait_mode,
                          .spin_ns = impl->cfg.spin_ns,
                          .progress_fn = impl->manual ? tw_api_progress_cb : NULL,
                          .poll_fn = impl->manual ? NULL : tw_api_progress_cb,
                          .progress_arg = ctx,
                          .owner = ctx,
                          .stats = impl->cq_stats};
}

tw_status_t tw_cq_create(tw_context_t *ctx, unsigned depth, tw_cq_t **cq_p)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_cq_create");
    tw_cq_params_t p;

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    if (cq_p == NULL) {
        tw_error("api", "tw_cq_create: NULL cq_p");
        return TW_ERR_INVALID;
    }
    tw_ctx_cq_params(impl, ctx, depth, &p);
    return tw_cq_open(&p, cq_p);
}

/* A posting call's arguments. */
static bool tw_api_post_args(tw_ctx_impl_t *impl, tw_context_t *ctx, const char *fn, int peer,
                             bool any_ok, const void *buf, size_t len, tw_cq_t *cq)
{
    if (!((peer >= 0 && peer < impl->size) || (any_ok && peer == TW_ANY_SOURCE))) {
        tw_error("api", "%s: rank %d is not in the job (size %d)", fn, peer, impl->size);
        return false;
    }
    if (!tw_api_buf_ok(buf, len)) {
        tw_error("api", "%s: buffer %p of %zu bytes is not a valid buffer", fn, buf, len);
        return false;
    }
    if (cq == NULL) {
        tw_error("api", "%s: NULL completion queue", fn);
        return false;
    }
    if (tw_cq_owner(cq) != ctx) {
        tw_error("api", "%s: completion queue %p belongs to another context", fn, (void *)cq);
        return false;
    }
    return true;
}

/* Common checks of a posting call, in the gate; NULL when the call must
 * fail (then outside it). */
static tw_ctx_impl_t *tw_api_post_check(tw_context_t *ctx, const char *fn, int peer, bool any_ok,
                                        const void *buf, size_t len, tw_cq_t *cq)
{
    tw_ctx_impl_t *impl = tw_ctx_enter(ctx, fn);

    if (impl == NULL) {
        return NULL;
    }
    if (TW_UNLIKELY(!tw_api_post_args(impl, ctx, fn, peer, any_ok, buf, len, cq))) {
        tw_ctx_leave(ctx);
        return NULL;
    }
    TW_RMA_POSTING(tw_msg_rma(impl->msg));
    return impl;
}

tw_status_t tw_send(tw_context_t *ctx, int dst, uint64_t tag, const void *buf, size_t len,
                    tw_cq_t *cq, void *user)
{
    tw_ctx_impl_t *impl = tw_api_post_check(ctx, "tw_send", dst, false, buf, len, cq);

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_msg_send(impl->msg, dst, tag, buf, len, cq, user);
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_send_inject(tw_context_t *ctx, int dst, uint64_t tag, const void *buf, size_t len)
{
    tw_ctx_impl_t *impl = tw_ctx_enter(ctx, "tw_send_inject");
    tw_status_t st = TW_ERR_INVALID;

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    if (TW_UNLIKELY(dst < 0 || dst >= impl->size)) {
        tw_error("api", "tw_send_inject: rank %d is not in the job (size %d)", dst, impl->size);
    } else if (TW_UNLIKELY(len > TW_INJECT_MAX || !tw_api_buf_ok(buf, len))) {
        tw_error("api", "tw_send_inject: %zu bytes at %p (at most %d, and a buffer)", len, buf,
                 TW_INJECT_MAX);
    } else {
        TW_RMA_POSTING(tw_msg_rma(impl->msg));
        st = tw_msg_send_inject(impl->msg, dst, tag, buf, len);
    }
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_recv(tw_context_t *ctx, int src, uint64_t tag, uint64_t ignore_mask, void *buf,
                    size_t len, tw_cq_t *cq, void *user)
{
    tw_ctx_impl_t *impl = tw_api_post_check(ctx, "tw_recv", src, true, buf, len, cq);

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_msg_recv(impl->msg, src, tag, ignore_mask, buf, len, cq, user);
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_am_register(tw_context_t *ctx, uint8_t id, tw_am_handler_t fn, void *arg)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_am_register");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    if (fn == NULL) {
        tw_error("api", "tw_am_register: NULL handler for id %u", id);
        return TW_ERR_INVALID;
    }
    return tw_msg_am_register(impl->msg, id, fn, arg);
}

tw_status_t tw_am_send(tw_context_t *ctx, int dst, uint8_t id, const void *hdr, size_t hdr_len,
                       const void *data, size_t len, tw_cq_t *cq, void *user)
{
    tw_ctx_impl_t *impl = tw_api_post_check(ctx, "tw_am_send", dst, false, data, len, cq);

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = TW_ERR_INVALID;
    if (hdr_len > TW_AM_HDR_MAX || (hdr_len > 0 && hdr == NULL)) {
        tw_error("api", "tw_am_send: header %p of %zu bytes (at most %d)", hdr, hdr_len,
                 TW_AM_HDR_MAX);
    } else {
        st = tw_msg_am_send(impl->msg, dst, id, hdr, hdr_len, data, len, cq, user);
    }
    tw_ctx_leave(ctx);
    return st;
}

/* ---- one-sided ---------------------------------------------------------- */

tw_status_t tw_mem_register(tw_context_t *ctx, void *addr, size_t len, tw_mr_t **mr)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_mem_register");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    if (mr == NULL || len == 0 || !tw_api_buf_ok(addr, len)) {
        tw_error("api", "tw_mem_register: %s (%p, %zu bytes)",
                 mr == NULL ? "NULL mr" : "not a valid buffer", addr, len);
        return TW_ERR_INVALID;
    }
    return tw_rma_mem_register(tw_msg_rma(impl->msg), addr, len, mr);
}

tw_status_t tw_mem_deregister(tw_mr_t *mr)
{
    return tw_rma_mem_deregister(mr);
}

tw_status_t tw_mr_pack(const tw_mr_t *mr, void *rkey, size_t *rkey_len)
{
    return tw_rma_mr_pack(mr, rkey, rkey_len);
}

/* Checks of tw_put / tw_get beyond tw_api_post_check's. */
static tw_ctx_impl_t *tw_api_rma_check(tw_context_t *ctx, const char *fn, int peer, const void *buf,
                                       size_t len, tw_cq_t *cq)
{
    tw_ctx_impl_t *impl = tw_api_post_check(ctx, fn, peer, false, buf, len, cq);

    if (impl != NULL && len > TW_RMA_MAX_LEN) {
        tw_error("api", "%s: %zu bytes, more than TW_RMA_MAX_LEN", fn, len);
        tw_ctx_leave(ctx);
        return NULL;
    }
    return impl;
}

tw_status_t tw_put(tw_context_t *ctx, int dst, const void *src, size_t len, uint64_t remote_addr,
                   const void *rkey, tw_cq_t *cq, void *user)
{
    tw_ctx_impl_t *impl = tw_api_rma_check(ctx, "tw_put", dst, src, len, cq);

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_rma_put(tw_msg_rma(impl->msg), dst, src, len, remote_addr, rkey, cq, user);
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_get(tw_context_t *ctx, int src, void *dst, size_t len, uint64_t remote_addr,
                   const void *rkey, tw_cq_t *cq, void *user)
{
    tw_ctx_impl_t *impl = tw_api_rma_check(ctx, "tw_get", src, dst, len, cq);

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_rma_get(tw_msg_rma(impl->msg), src, dst, len, remote_addr, rkey, cq, user);
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_flush(tw_context_t *ctx, int peer, tw_cq_t *cq, void *user)
{
    tw_ctx_impl_t *impl = tw_api_post_check(ctx, "tw_flush", peer, false, NULL, 0, cq);

    if (TW_UNLIKELY(impl == NULL)) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_rma_flush(tw_msg_rma(impl->msg), peer, cq, user);
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_set_error_handler(tw_context_t *ctx, tw_error_handler_t fn, void *arg)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_set_error_handler");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    tw_mutex_lock(&impl->err_lock);
    impl->err_fn = fn;
    impl->err_arg = arg;
    tw_mutex_unlock(&impl->err_lock);
    return TW_OK;
}

/* Every iface of the stack, inner ones first, that counts something. */
static int tw_api_print_iface(tw_tl_iface_t *iface, void *arg)
{
    if (iface->stats != NULL) {
        fputs("  ", arg);
        tw_stats_print_group(iface->stats, arg);
    }
    return 0;
}

static tw_status_t tw_api_stats_print(tw_ctx_impl_t *impl, FILE *out)
{
    if (out == NULL) {
        tw_error("api", "tw_stats_print: NULL stream");
        return TW_ERR_INVALID;
    }
    char nodes[512];
    tw_bootstrap_node_text(impl->bs, nodes, sizeof(nodes));
    fprintf(out, "threadwire statistics, rank %d of %d (%s progress)\n", impl->rank, impl->size,
            impl->manual ? "manual" : "thread");
    fprintf(out, "  job: bootstrap %s, this rank on node %d; %s\n", impl->bs->ops->name,
            impl->bs->node_of[impl->rank], nodes);
    for (unsigned i = 0; i < impl->npe; i++) {
        int tid = tw_pe_tid(impl->pes[i]);
        fprintf(out, "  progress %s: tid %d, cpus %s\n    ", tw_pe_name(impl->pes[i]), tid,
                tw_pe_binding(impl->pes[i]));
        tw_stats_print_group(tw_pe_stats(impl->pes[i]), out);
    }
    for (unsigned i = 0; i < impl->ntop; i++) {
        (void)tw_tl_walk(impl->tops[i], tw_api_print_iface, out);
    }
    fputs("  ", out);
    tw_stats_print_group(tw_msg_stats(impl->msg), out);
    fputs("  ", out);
    tw_stats_print_group(tw_coll_stats(impl->coll), out);
    fputs("  ", out);
    tw_stats_print_group(tw_rma_stats(tw_msg_rma(impl->msg)), out);
    fputs("  ", out);
    tw_stats_print_group(impl->cq_stats, out);
    tw_stall_print(tw_msg_stall(impl->msg), out, "  ");
    return TW_OK;
}

/* The ifaces already printed: one stack may reach an iface twice (two
 * tops over one transport), and a JSON object's names must be unique. */
typedef struct tw_api_json_walk {
    FILE *out;
    const tw_stats_t *seen[32];
    unsigned nseen;
} tw_api_json_walk_t;

static int tw_api_json_iface(tw_tl_iface_t *iface, void *arg)
{
    tw_api_json_walk_t *w = arg;

    if (iface->stats == NULL) {
        return 0;
    }
    for (unsigned i = 0; i < w->nseen; i++) {
        if (w->seen[i] == iface->stats) {
            return 0;
        }
    }
    if (w->nseen < TW_ARRAY_SIZE(w->seen)) {
        w->seen[w->nseen] = iface->stats;
    }
    fputs(w->nseen++ > 0 ? "," : "", w->out);
    tw_stats_json_string(tw_stats_name(iface->stats), w->out);
    fputc(':', w->out);
    tw_stats_json_group(iface->stats, w->out);
    return 0;
}

/* "bootstrap":"twrun","node":0,"nnodes":2,"nodes":[[0,1],[2,3]] */
static void tw_api_json_nodes(const tw_bootstrap_t *bs, FILE *out)
{
    fputs("\"bootstrap\":", out);
    tw_stats_json_string(bs->ops->name, out);
    fprintf(out, ",\"node\":%d,\"nnodes\":%d,\"nodes\":[", bs->node_of[bs->rank], bs->nnodes);
    for (int node = 0; node < bs->nnodes; node++) {
        const char *sep = "";
        fputs(node > 0 ? ",[" : "[", out);
        for (int r = 0; r < bs->size; r++) {
            if (bs->node_of[r] == node) {
                fprintf(out, "%s%d", sep, r);
                sep = ",";
            }
        }
        fputc(']', out);
    }
    fputc(']', out);
}

static tw_status_t tw_api_stats_json(tw_ctx_impl_t *impl, FILE *out)
{
    tw_api_json_walk_t walk = {.out = out};

    if (out == NULL) {
        tw_error("api", "tw_stats_json: NULL stream");
        return TW_ERR_INVALID;
    }
    fprintf(out, "{\"threadwire_stats\":1,\"rank\":%d,\"size\":%d,\"progress\":\"%s\",", impl->rank,
            impl->size, impl->manual ? "manual" : "thread");
    tw_api_json_nodes(impl->bs, out);
    fputs(",\"engines\":[", out);
    for (unsigned i = 0; i < impl->npe; i++) {
        fputs(i > 0 ? ",{\"name\":" : "{\"name\":", out);
        tw_stats_json_string(tw_pe_name(impl->pes[i]), out);
        fprintf(out, ",\"tid\":%d,\"cpus\":", tw_pe_tid(impl->pes[i]));
        tw_stats_json_string(tw_pe_binding(impl->pes[i]), out);
        fputs(",\"counters\":", out);
        tw_stats_json_group(tw_pe_stats(impl->pes[i]), out);
        fputc('}', out);
    }
    fputs("],\"ifaces\":{", out);
    for (unsigned i = 0; i < impl->ntop; i++) {
        (void)tw_tl_walk(impl->tops[i], tw_api_json_iface, &walk);
    }
    fputs("},\"msg\":", out);
    tw_stats_json_group(tw_msg_stats(impl->msg), out);
    fputs(",\"coll\":", out);
    tw_stats_json_group(tw_coll_stats(impl->coll), out);
    fputs(",\"rma\":", out);
    tw_stats_json_group(tw_rma_stats(tw_msg_rma(impl->msg)), out);
    fputs(",\"cq\":", out);
    tw_stats_json_group(impl->cq_stats, out);
    fputs("}\n", out);
    return TW_OK;
}

/* The statistics calls, in the gate: another thread may finalize. */
tw_status_t tw_stats_print(tw_context_t *ctx, FILE *out)
{
    tw_ctx_impl_t *impl = tw_ctx_enter(ctx, "tw_stats_print");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_api_stats_print(impl, out);
    tw_ctx_leave(ctx);
    return st;
}

tw_status_t tw_stats_json(tw_context_t *ctx, FILE *out)
{
    tw_ctx_impl_t *impl = tw_ctx_enter(ctx, "tw_stats_json");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    tw_status_t st = tw_api_stats_json(impl, out);
    tw_ctx_leave(ctx);
    return st;
}

/* ---- collectives: the calls that take a context ------------------------- */

tw_group_t *tw_group_world(tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_group_world");

    return impl != NULL ? tw_coll_world(impl->coll) : NULL;
}

tw_status_t tw_group_create(tw_context_t *ctx, const int *ranks, int n, uint64_t key,
                            tw_group_t **g)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_group_create");
    unsigned char *seen;
    bool mine = false;
    tw_status_t st = TW_OK;

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    if (ranks == NULL || g == NULL || n < 1 || n > impl->size) {
        tw_error("api", "tw_group_create: %s",
                 ranks == NULL ? "NULL ranks"
                 : g == NULL   ? "NULL g"
                               : "n out of range");
        return TW_ERR_INVALID;
    }
    seen = tw_calloc((size_t)impl->size, 1);
    if (seen == NULL) {
        return TW_ERR_NOMEM;
    }
    for (int i = 0; i < n && st == TW_OK; i++) {
        if (ranks[i] < 0 || ranks[i] >= impl->size) {
            tw_error("api", "tw_group_create: ranks[%d] = %d is not in the job (size %d)", i,
                     ranks[i], impl->size);
            st = TW_ERR_INVALID;
        } else if (seen[ranks[i]]++) {
            tw_error("api", "tw_group_create: rank %d is listed twice", ranks[i]);
            st = TW_ERR_INVALID;
        }
        mine |= st == TW_OK && ranks[i] == impl->rank;
    }
    tw_free(seen, (size_t)impl->size);
    if (st == TW_OK && !mine) {
        tw_error("api", "tw_group_create: the caller (rank %d) is not in the list", impl->rank);
        st = TW_ERR_INVALID;
    }
    if (st != TW_OK) {
        return st;
    }
    return tw_coll_group_create(impl->coll, ranks, n, key, g);
}
