/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Context lifecycle: configuration, joining the job, progress engines,
 * transports and the messaging layer; finalize in reverse order.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "coll/tw_coll.h"
#include "core/tw_lock.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma.h"
#include "msg/tw_stall.h"
#include "progress/tw_cq.h"
#include "runtime/tw_bootstrap.h"
#include "runtime/tw_context_int.h"

/* The am ids whose arrivals run no user code -- tagged messages and the
 * library's own (src/coll: matching, a revoke) -- so a waiting worker
 * takes them in itself (tw_tl_params_t.inline_am_ids). Collectives
 * across nodes took 2-4x longer while their messages waited for the
 * progress thread to wake. */
#define TW_CTX_INLINE_AM_IDS (1ull << TW_MSG_AM_TAG | 1ull << TW_MSG_AM_COLL)
/* The am ids whose large sends skip the rendezvous (tw_tl_params_t
 * .eager_am_ids): collectives, whose receives are posted step by step
 * and whose sends are few at a time per group. Over tcp between 2
 * emulated nodes, allreduce 64 KiB took 194 us by rendezvous (RTS, CTS,
 * DATA: each hop a wake-up) against 72 at once (Open MPI 67). */
#define TW_CTX_EAGER_AM_IDS (1ull << TW_MSG_AM_COLL)

/* The shortest TW_STALL_WARN: its tick runs every half of it. */
#define TW_CTX_STALL_MIN_NS 100000000ull

static const char *const tw_wait_mode_names[] = {"adaptive", "spin", "block", NULL};
/* by TW_CTX_STATS_* */
static const char *const tw_stats_at_exit_names[] = {"off", "text", "json", NULL};

static const tw_cfg_entry_t tw_rt_cfg_entries[] = {
    {.name = "TW_TRANSPORTS",
     .type = TW_CFG_STRING,
     .defval = "",
     .help =
         "comma-separated transports (self, shm, verbs, tcp); self is always on; the first that "
         "reaches a peer carries its traffic (shm, then verbs, then tcp), so TW_TRANSPORTS=tcp "
         "forces TCP; verbs is opt-in (used only when named); empty = every usable one",
     .offset = offsetof(tw_rt_cfg_t, transports)},
    {.name = "TW_PROGRESS_THREADS",
     .type = TW_CFG_INT,
     .defval = "-1",
     .help = "progress threads: -1 = one per CPU socket (hwloc), 0 = manual mode (tw_progress), N "
             "= exactly N",
     .offset = offsetof(tw_rt_cfg_t, progress_threads),
     .min = -1,
     .max = 64},
    {.name = "TW_WAIT_MODE",
     .type = TW_CFG_ENUM,
     .defval = "adaptive",
     .help = "how progress threads and tw_cq_wait wait: adaptive (spin briefly, then sleep), spin, "
             "block",
     .offset = offsetof(tw_rt_cfg_t, wait_mode),
     .enum_names = tw_wait_mode_names},
    {.name = "TW_RELIABLE",
     .type = TW_CFG_BOOL,
     .defval = "0",
     .help = "reliability layer (src/reliability): sequence numbers, CRC32C, acks and nacks, "
             "retransmission, failover between transports and fail-back, keepalive; TW_REL_* tune "
             "it; every rank must agree",
     .offset = offsetof(tw_rt_cfg_t, reliable)},
    {.name = "TW_SPIN_TIME",
     .type = TW_CFG_DURATION,
     .defval = "50us",
     .help = "adaptive waiting: how long to poll before sleeping (ns, us, ms, s)",
     .offset = offsetof(tw_rt_cfg_t, spin_ns)},
    {.name = "TW_EAGER_LIMIT",
     .type = TW_CFG_SIZE,
     .defval = "8k",
     .help = "largest payload sent by copy (completes at once); larger ones go zero-copy",
     .offset = offsetof(tw_rt_cfg_t, eager_limit),
     .min = 0,
     .max = 65536},
    {.name = "TW_MATCH_BUCKETS",
     .type = TW_CFG_UINT64,
     .defval = "64",
     .help = "hash buckets of the tag-matching engine (power of two)",
     .offset = offsetof(tw_rt_cfg_t, match_buckets),
     .min = 1,
     .max = 65536},
    {.name = "TW_PROGRESS_RING",
     .type = TW_CFG_UINT64,
     .defval = "1024",
     .help = "commands each thread's submission lane to a progress thread holds (power of two)",
     .offset = offsetof(tw_rt_cfg_t, pe_ring_depth),
     .min = 64,
     .max = 1048576},
    {.name = "TW_STATS",
     .type = TW_CFG_ENUM,
     .defval = "off",
     .help = "the counters on stderr at tw_finalize, one write per process: off, text (as "
             "tw_stats_print) or json (as tw_stats_json: one object per process, per transport, "
             "progress thread and peer)",
     .offset = offsetof(tw_rt_cfg_t, stats_at_exit),
     .enum_names = tw_stats_at_exit_names},
    {.name = "TW_STALL_WARN",
     .type = TW_CFG_DURATION,
     .defval = "10s",
     .help = "stall watchdog: an operation outstanding this long (to 1.5 times it) while its peer "
             "sent nothing and took nothing gets one warning line and counts in msg's stalls; "
             "tw_stats_print lists those still waiting; 0 = off, else at least 100ms (a bare "
             "number is microseconds: write 30s)",
     .offset = offsetof(tw_rt_cfg_t, stall_warn_ns)},
};

const tw_cfg_table_t tw_rt_cfg_table = {
    .module = "runtime",
    .entries = tw_rt_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_rt_cfg_entries),
};

size_t tw_cfg_all_tables(const tw_cfg_table_t **tables, size_t max)
{
    const tw_tl_ops_t *const *lists[] = {tw_tl_all, tw_tl_wrappers, tw_stack_layers};
    const tw_cfg_table_t *own[] = {&tw_core_cfg_table, &tw_rt_cfg_table, &tw_bootstrap_cfg_table,
                                   &tw_coll_cfg_table};
    size_t n = 0;

    for (size_t i = 0; i < TW_ARRAY_SIZE(own) && n < max; i++) {
        tables[n++] = own[i];
    }
    for (size_t l = 0; l < TW_ARRAY_SIZE(lists); l++) {
        for (size_t i = 0; lists[l][i] != NULL && n < max; i++) {
            if (lists[l][i]->cfg != NULL) {
                tables[n++] = lists[l][i]->cfg;
            }
        }
    }
    return n;
}

/* ---- context shells -------------------------------------------------- */

static tw_mutex_t tw_shell_lock = TW_MUTEX_INITIALIZER(TW_LOCK_RANK_SHELLS, "context shells");
static tw_context_t *tw_shells; /* every shell ever made; guarded by tw_shell_lock */

static tw_context_t *tw_shell_get(void)
{
    tw_context_t *c;

    tw_mutex_lock(&tw_shell_lock);
    for (c = tw_shells; c != NULL; c = c->next) {
        if (atomic_load_explicit(&c->magic, memory_order_relaxed) == TW_CTX_DEAD) {
            break;
        }
    }
    if (c == NULL) {
        /* libc: must outlive any jemalloc arena use; aligned for the gate. */
        c = aligned_alloc(TW_CACHELINE, sizeof(*c));
        if (c != NULL) {
            memset(c, 0, sizeof(*c));
            c->next = tw_shells;
            tw_shells = c;
        }
    }
    if (c != NULL) {
        /* Claimed: not DEAD (so no one else takes it), not yet LIVE. */
        atomic_store_explicit(&c->magic, 0, memory_order_relaxed);
    }
    tw_mutex_unlock(&tw_shell_lock);
    return c;
}

static void tw_shell_put(tw_context_t *c)
{
    tw_mutex_lock(&tw_shell_lock);
    c->impl = NULL;
    atomic_store_explicit(&c->magic, TW_CTX_DEAD, memory_order_release);
    tw_mutex_unlock(&tw_shell_lock);
}

__attribute__((destructor)) static void tw_shells_free(void)
{
    tw_mutex_lock(&tw_shell_lock);
    for (tw_context_t *c = tw_shells, *next; c != NULL; c = next) {
        next = c->next;
        if (atomic_load_explicit(&c->magic, memory_order_relaxed) != TW_CTX_LIVE) {
            free(c); /* live contexts were never finalized: keep them valid */
        }
    }
    tw_shells = NULL;
    tw_mutex_unlock(&tw_shell_lock);
}

/* ---- the gate (tw_context_int.h) ---------------------------------------- */

atomic_bool tw_gate_fence = true;
static pthread_once_t tw_gate_once = PTHREAD_ONCE_INIT;

/* Callers need no fence when tw_finalize can make every thread of the
 * process run one (Linux 4.14; a seccomp filter may refuse it). */
static void tw_gate_setup(void)
{
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);

    if (cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
        atomic_store_explicit(&tw_gate_fence, false, memory_order_relaxed);
    } else {
        tw_debug("init", "membarrier is not available (%s): calls pay a fence instead",
                 strerror(errno));
    }
}

tw_ctx_impl_t *tw_ctx_refuse(tw_context_t *ctx, const char *fn, bool inside)
{
    if (inside) {
        tw_ctx_leave(ctx);
    }
    if (fn == NULL) {
        return NULL;
    }
    if (ctx == NULL) {
        tw_error("api", "%s: NULL context", fn);
    } else {
        tw_error("api", "%s: context %p is finalized or not a context", fn, (void *)ctx);
    }
    return NULL;
}

/* After @p ctx was marked dead: wait until no other thread is inside its
 * gate (the caller's own calls, if it is inside one, do not count). */
static void tw_gate_drain(tw_context_t *ctx)
{
    unsigned self = tw_thread_index();

    if (atomic_load_explicit(&tw_gate_fence, memory_order_relaxed) ||
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
        atomic_thread_fence(memory_order_seq_cst);
    }
    for (unsigned i = 0; i < TW_GATE_SLOTS; i++) {
        unsigned mine =
            i == self ? atomic_load_explicit(&ctx->gate[i].inside, memory_order_relaxed) : 0;
        while (atomic_load_explicit(&ctx->gate[i].inside, memory_order_acquire) != mine) {
            sched_yield();
        }
    }
    while (atomic_load_explicit(&ctx->gate_shared, memory_order_acquire) !=
           (self >= TW_GATE_SLOTS ? 1u : 0u)) {
        sched_yield();
    }
}

tw_ctx_impl_t *tw_ctx_get(const tw_context_t *ctx, const char *fn)
{
    if (TW_UNLIKELY(ctx == NULL)) {
        tw_error("api", "%s: NULL context", fn);
        return NULL;
    }
    if (TW_UNLIKELY(atomic_load_explicit(&((tw_context_t *)ctx)->magic, memory_order_acquire) !=
                    TW_CTX_LIVE)) {
        tw_error("api", "%s: context %p is finalized or not a context", fn, (const void *)ctx);
        return NULL;
    }
    return ctx->impl;
}

/* ---- configuration --------------------------------------------------- */

void tw_config_init(tw_config_t *cfg)
{
    if (cfg == NULL) {
        return;
    }
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->transports = NULL;
    cfg->progress_threads = -1;
    cfg->wait_mode = TW_WAIT_ADAPTIVE;
    cfg->reliable = false;
}

static tw_status_t tw_ctx_configure(const tw_config_t *user, tw_rt_cfg_t *rc)
{
    tw_config_t cfg;

    tw_config_init(&cfg);
    if (user != NULL) {
        if (user->size < offsetof(tw_config_t, transports) || user->size > 4096) {
            tw_error("init", "tw_config_t.size is %zu: call tw_config_init first", user->size);
            return TW_ERR_INVALID;
        }
        memcpy(&cfg, user, TW_MIN(user->size, sizeof(cfg)));
    }
    tw_cfg_set_defaults(&tw_rt_cfg_table, rc);
    if (cfg.transports != NULL) {
        if (strlen(cfg.transports) >= sizeof(rc->transports)) {
            tw_error("init", "tw_config_t.transports is too long");
            return TW_ERR_INVALID;
        }
        strcpy(rc->transports, cfg.transports);
    }
    if (cfg.progress_threads < -1 || cfg.progress_threads > 64) {
        tw_error("init", "tw_config_t.progress_threads %d is out of range -1..64",
                 cfg.progress_threads);
        return TW_ERR_INVALID;
    }
    if ((unsigned)cfg.wait_mode > TW_WAIT_BLOCK) {
        tw_error("init", "tw_config_t.wait_mode %d is not a tw_wait_mode_t", (int)cfg.wait_mode);
        return TW_ERR_INVALID;
    }
    rc->progress_threads = cfg.progress_threads;
    rc->wait_mode = (int)cfg.wait_mode;
    rc->reliable = cfg.reliable;
    /* The environment overrides the caller's configuration. */
    tw_core_cfg_t core;
    tw_cfg_set_defaults(&tw_core_cfg_table, &core);
    if (tw_cfg_apply_env(&tw_core_cfg_table, &core) != TW_OK ||
        tw_cfg_apply_env(&tw_rt_cfg_table, rc) != TW_OK) {
        return TW_ERR_INVALID;
    }
    /* A bad value is an error even for a module this job will not use
     * (TW_REL_* with reliability off, TW_VERBS_* without verbs). */
    const tw_cfg_table_t *tables[32];
    size_t ntables = tw_cfg_all_tables(tables, TW_ARRAY_SIZE(tables));
    for (size_t i = 0; i < ntables; i++) {
        if (tw_cfg_check_env(tables[i]) != TW_OK) {
            return TW_ERR_INVALID;
        }
    }
    tw_log_set_level((tw_log_level_t)core.log_level);
    tw_cfg_warn_unknown(tables, ntables);
    if ((rc->match_buckets & (rc->match_buckets - 1)) != 0) {
        tw_error("init", "TW_MATCH_BUCKETS=%llu is not a power of two",
                 (unsigned long long)rc->match_buckets);
        return TW_ERR_INVALID;
    }
    if ((rc->pe_ring_depth & (rc->pe_ring_depth - 1)) != 0) {
        tw_error("init", "TW_PROGRESS_RING=%llu is not a power of two",
                 (unsigned long long)rc->pe_ring_depth);
        return TW_ERR_INVALID;
    }
    if (rc->stall_warn_ns != 0 && rc->stall_warn_ns < TW_CTX_STALL_MIN_NS) {
        tw_error("init",
                 "TW_STALL_WARN=%s is below 100ms (a bare number is microseconds: write 10s)",
                 getenv("TW_STALL_WARN") != NULL ? getenv("TW_STALL_WARN") : "?");
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

/* Which job are we in (tw_bootstrap.h): the backend the environment
 * names, the node map. */
static tw_status_t tw_ctx_join(tw_ctx_impl_t *impl)
{
    tw_bootstrap_t *bs;
    tw_status_t st = tw_bootstrap_open(&bs);

    if (st != TW_OK) {
        return st;
    }
    impl->bs = bs;
    impl->rank = bs->rank;
    impl->size = bs->size;
    impl->local_rank = bs->local_rank;
    impl->local_size = bs->local_size;
    snprintf(impl->job_key, sizeof(impl->job_key), "%s", bs->job_key);
    return TW_OK;
}

static tw_status_t tw_ctx_start_engines(tw_ctx_impl_t *impl)
{
    int n = impl->cfg.progress_threads;
    int npkg = tw_topo_num_packages();

    impl->manual = (n == 0);
    if (n < 0) {
        n = npkg;
    }
    if (n == 0) {
        n = 1; /* manual mode: one engine, driven by tw_progress */
    }
    impl->pe_params = (tw_pe_params_t){.name = "",
                                       .thread = !impl->manual,
                                       .wait_mode = (tw_wait_mode_t)impl->cfg.wait_mode,
                                       .spin_ns = impl->cfg.spin_ns,
                                       .bind_package = -1,
                                       .ring_depth = (unsigned)impl->cfg.pe_ring_depth};
    impl->pes = tw_calloc((size_t)n, sizeof(*impl->pes));
    if (impl->pes == NULL) {
        return TW_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "socket%d", i % npkg);
        if (n > npkg) {
            snprintf(name, sizeof(name), "socket%d.%d", i % npkg, i / npkg);
        }
        tw_pe_params_t p = impl->pe_params;
        p.name = name;
        p.bind_package = impl->manual ? -1 : i % npkg;
        tw_status_t st = tw_pe_create(&p, &impl->pes[i]);
        if (st != TW_OK) {
            return st;
        }
        impl->npe++;
    }
    return TW_OK;
}

/* A transport saw a peer go (engine thread): fail what waits for it in the
 * messaging layer, then tell the application -- unless it left cleanly. */
static void tw_ctx_peer_down(void *arg, int peer, tw_status_t why)
{
    tw_ctx_impl_t *impl = arg;
    tw_error_handler_t fn;
    void *fn_arg;

    if (!tw_msg_peer_down(impl->msg, peer)) {
        return; /* reported already (by another root that reaches it) */
    }
    if (impl->coll != NULL) {
        tw_coll_peer_down(impl->coll, peer, why != TW_OK);
    }
    if (why == TW_OK) {
        return; /* it left: not a failure to report */
    }
    /* Down for now (a port went down): without rel the peer has no other
     * path, so it is a failure here, reported as one. */
    if (why == TW_ERR_TRANSPORT) {
        why = TW_ERR_PEER_FAILED;
    }
    tw_mutex_lock(&impl->err_lock);
    fn = impl->err_fn;
    fn_arg = impl->err_arg;
    tw_mutex_unlock(&impl->err_lock);
    if (fn != NULL) {
        fn(impl->ctx, peer, why, "peer failed", fn_arg);
    }
}

static int tw_ctx_rma_progress(void *arg)
{
    return tw_progress(arg);
}

/* One-sided operations: replies retried on engine 0, manual progress
 * while a region drains, and RDMA registration where a route registers
 * memory (with reliability on, every route is rel's, which emulates). */
static tw_status_t tw_ctx_rma_setup(tw_ctx_impl_t *impl)
{
    tw_rma_t *rma = tw_msg_rma(impl->msg);
    tw_status_t st = tw_pe_add(impl->pes[0], tw_rma_progress, rma, -1);

    if (st == TW_OK) {
        st = tw_stall_start(tw_msg_stall(impl->msg), impl->pes[0]); /* its walkers are in */
    }
    if (impl->manual) {
        tw_rma_set_progress(rma, tw_ctx_rma_progress, impl->ctx);
    }
    for (unsigned i = 0; st == TW_OK && i < impl->ntop; i++) {
        if (impl->tops[i]->caps & TW_TL_CAP_MEM_REG) {
            st = tw_rma_add_registrar(rma, impl->tops[i]);
        }
    }
    return st;
}

/* Collectives: engine 0 drives the nonblocking ones; the world group. */
static tw_status_t tw_ctx_coll_setup(tw_ctx_impl_t *impl)
{
    tw_coll_params_t cp = {.rank = impl->rank,
                           .size = impl->size,
                           .ctx = impl->ctx,
                           .msg = impl->msg,
                           .pe = impl->pes[0],
                           .manual = impl->manual,
                           .progress_fn = tw_ctx_progress,
                           .progress_arg = impl,
                           .job_key = impl->job_key,
                           .node_shm = tw_stack_find(impl, "shm") != NULL,
                           .eager_limit = impl->cfg.eager_limit,
                           .node_of = impl->bs->node_of,
                           .nnodes = impl->bs->nnodes};
    tw_status_t st;

    tw_ctx_cq_params_internal(impl, 1, &cp.cq);
    st = tw_coll_create(&cp, &impl->coll);
    if (st == TW_OK) {
        st = tw_coll_start(impl->coll);
    }
    return st;
}

/*
 * The launcher is our lifeline (twrun's socket, the PMIx server's pidfd):
 * when it is gone, so is the job. Engine 0 watches its fd and looks at it
 * every TW_CTX_LIFELINE_NS at the latest.
 */
#define TW_CTX_LIFELINE_NS (100ull * 1000 * 1000)

static int tw_ctx_lifeline(void *arg)
{
    tw_ctx_impl_t *impl = arg;
    uint64_t now = tw_pe_pass_coarse_ns(impl->pes[0]); /* every pass: read once */
    char why[128];

    if (now < impl->lifeline_next_ns) {
        return 0;
    }
    impl->lifeline_next_ns = now + TW_CTX_LIFELINE_NS;
    if (tw_bootstrap_lifeline_lost(impl->bs, why, sizeof(why))) {
        tw_error("runtime", "%s: the job is over, exiting", why);
        _exit(1);
    }
    return 0;
}

/* How long tw_finalize runs the engines for what is still in flight. */
#define TW_CTX_DRAIN_NS (2ull * 1000 * 1000 * 1000)

/* Run every engine until a whole pass finds nothing to do, or for
 * TW_CTX_DRAIN_NS: something that keeps reporting work (a frame a full
 * path keeps refusing, a peer that keeps retransmitting) must not hold
 * tw_finalize for ever; what is left is cancelled as the stack closes.
 * Called with the engine threads stopped: delivers what is in flight. */
static void tw_ctx_drain(tw_ctx_impl_t *impl)
{
    uint64_t until = tw_time_ns() + TW_CTX_DRAIN_NS;
    int events;

    do {
        events = 0;
        for (unsigned i = 0; i < impl->npe; i++) {
            events += tw_pe_progress(impl->pes[i]);
        }
    } while (events > 0 && tw_time_ns() < until);
    if (events > 0) {
        tw_warn("runtime",
                "finalize: the engines still had work after %llu ms; what is in flight is "
                "cancelled",
                (unsigned long long)(TW_CTX_DRAIN_NS / 1000000));
    }
}

static void tw_ctx_teardown(tw_ctx_impl_t *impl)
{
    for (unsigned i = 0; i < impl->npe; i++) {
        tw_pe_stop(impl->pes[i]);
    }
    if (impl->npe > 0) {
        tw_ctx_drain(impl);
    }
    if (impl->msg != NULL) {
        /* Regions left registered go while their transports are open. */
        tw_rma_release_regions(tw_msg_rma(impl->msg));
    }
    /* The stack first: what it cancels completes through msg. */
    tw_stack_close(impl);
    if (impl->msg != NULL) {
        tw_msg_destroy(impl->msg);
    }
    for (unsigned i = 0; i < impl->npe; i++) {
        tw_pe_destroy(impl->pes[i]);
    }
    /* After msg (its receives cancelled into the groups' CQs) and the
     * engines (their last commands run). */
    tw_coll_destroy(impl->coll);
    if (impl->pes != NULL) {
        tw_free(impl->pes, (size_t)impl->npe * sizeof(*impl->pes));
    }
    if (impl->cq_stats != NULL) {
        tw_stats_destroy(impl->cq_stats);
    }
    tw_bootstrap_close(impl->bs); /* PMIx_Finalize: after every transport */
    tw_mutex_destroy(&impl->err_lock);
    tw_free(impl, sizeof(*impl));
}

/* What the transports are opened with: this rank, engine 0, msg above. */
static tw_tl_params_t tw_ctx_tl_params(tw_ctx_impl_t *impl)
{
    return (tw_tl_params_t){.rank = impl->rank,
                            .size = impl->size,
                            .pe = impl->pes[0],
                            .pe_params = &impl->pe_params,
                            .features = impl->cfg.reliable ? TW_TL_FEATURE_RELIABLE : 0,
                            .recv = tw_msg_recv_cb,
                            .recv_arg = impl->msg,
                            .inline_am_ids = TW_CTX_INLINE_AM_IDS,
                            .eager_am_ids = TW_CTX_EAGER_AM_IDS,
                            .recv_rndv = tw_msg_rndv_cb,
                            .peer_down = tw_ctx_peer_down,
                            .peer_down_arg = impl,
                            .job_key = impl->job_key,
                            .node_of = impl->bs->node_of,
                            .local_rank = impl->local_rank,
                            .local_size = impl->local_size};
}

tw_status_t tw_init(const tw_config_t *cfg, tw_context_t **ctx_p)
{
    tw_context_t *ctx;
    tw_ctx_impl_t *impl;
    tw_status_t st;

    if (ctx_p == NULL) {
        tw_error("init", "tw_init: NULL ctx_p");
        return TW_ERR_INVALID;
    }
    (void)pthread_once(&tw_gate_once, tw_gate_setup);
    impl = tw_calloc(1, sizeof(*impl));
    if (impl == NULL) {
        return TW_ERR_NOMEM;
    }
    tw_mutex_init(&impl->err_lock, TW_LOCK_RANK_ERR_HANDLER, "context error handler");
    st = tw_ctx_configure(cfg, &impl->cfg);
    if (st != TW_OK) {
        goto err_teardown;
    }
    if (impl->cfg.transports[0] != '\0') {
        st = tw_stack_check_list(impl->cfg.transports);
        if (st != TW_OK) {
            goto err_teardown;
        }
    }
    st = tw_ctx_join(impl);
    if (st != TW_OK) {
        goto err_teardown;
    }
    tw_log_set_rank(impl->rank);
    impl->cq_stats = tw_stats_create("cq", tw_cq_stat_descs, TW_CQ_STAT_COUNT);
    if (impl->cq_stats == NULL) {
        st = TW_ERR_NOMEM;
        goto err_teardown;
    }
    st = tw_ctx_start_engines(impl);
    if (st != TW_OK) {
        goto err_teardown;
    }
    ctx = tw_shell_get();
    if (ctx == NULL) {
        st = TW_ERR_NOMEM;
        goto err_teardown;
    }
    tw_msg_params_t mp = {.rank = impl->rank,
                          .size = impl->size,
                          .ctx = ctx,
                          .eager_limit = impl->cfg.eager_limit,
                          .match_buckets = (unsigned)impl->cfg.match_buckets,
                          .stall_warn_ns = impl->cfg.stall_warn_ns};
    st = tw_msg_create(&mp, &impl->msg);
    if (st != TW_OK) {
        goto err_shell;
    }
    impl->ctx = ctx;
    tw_tl_params_t up = tw_ctx_tl_params(impl);
    st = tw_stack_build(impl, &up);
    /* The collectives before the exchange: the node's segment goes out
     * in the leader's address blob. */
    if (st == TW_OK) {
        st = tw_ctx_coll_setup(impl);
    }
    if (st == TW_OK) {
        st = tw_coll_node_prepare(impl->coll);
    }
    if (st == TW_OK) {
        st = tw_stack_exchange(impl);
    }
    if (st == TW_OK) {
        st = tw_stack_route(impl);
    }
    /* Every rank connected, every route set: transports may drop what
     * only connecting needed, and start threads of their own. */
    if (st == TW_OK) {
        tw_stack_ready(impl);
    }
    if (st == TW_OK) {
        st = tw_ctx_rma_setup(impl);
    }
    if (st == TW_OK) {
        st = tw_coll_node_setup(impl->coll); /* every local rank attached */
    }
    if (st == TW_OK && tw_bootstrap_lifeline_fd(impl->bs) >= 0) {
        st = tw_pe_add(impl->pes[0], tw_ctx_lifeline, impl, -1);
        if (st == TW_OK) {
            st = tw_pe_watch(impl->pes[0], tw_bootstrap_lifeline_fd(impl->bs));
        }
    }
    if (st != TW_OK) {
        goto err_shell;
    }
    for (unsigned i = 0; i < impl->npe; i++) {
        st = tw_pe_start(impl->pes[i]);
        if (st != TW_OK) {
            goto err_shell;
        }
    }
    ctx->impl = impl;
    atomic_store_explicit(&ctx->magic, TW_CTX_LIVE, memory_order_release);
    tw_debug("init", "rank %d of %d, %u progress engine(s)%s", impl->rank, impl->size, impl->npe,
             impl->manual ? " in manual mode" : "");
    *ctx_p = ctx;
    return TW_OK;

err_shell:
    tw_shell_put(ctx);
err_teardown:
    tw_ctx_teardown(impl);
    return st;
}

/* TW_STATS: the counters as they are when tw_finalize starts, on stderr
 * in one write, so that the processes' reports do not interleave. */
static void tw_ctx_stats_at_exit(tw_context_t *ctx, int how)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tw_status_t st;

    if (f == NULL) {
        tw_warn("api", "TW_STATS: cannot buffer the counters: %s", strerror(errno));
        return;
    }
    st = how == TW_CTX_STATS_JSON ? tw_stats_json(ctx, f) : tw_stats_print(ctx, f);
    if (fclose(f) == 0 && st == TW_OK) {
        (void)fwrite(buf, 1, len, stderr);
        fflush(stderr);
    }
    free(buf); /* open_memstream's, from libc's malloc */
}

tw_status_t tw_finalize(tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_finalize");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    if (impl->cfg.stats_at_exit != TW_CTX_STATS_OFF) {
        tw_ctx_stats_at_exit(ctx, impl->cfg.stats_at_exit);
    }
    /* Dead first: a call from now on is refused, not a crash; one still
     * inside the gate finishes before anything is torn down. */
    unsigned live = TW_CTX_LIVE;
    if (!atomic_compare_exchange_strong_explicit(&ctx->magic, &live, 0, memory_order_seq_cst,
                                                 memory_order_relaxed)) {
        tw_error("api", "tw_finalize: context %p is being finalized by another thread",
                 (void *)ctx);
        return TW_ERR_INVALID;
    }
    tw_gate_drain(ctx);
    /* Nonblocking collectives still running end CANCELED. */
    tw_coll_stop(impl->coll);
    /* Goodbyes in sequence after the data, and the acks for it. */
    tw_stack_quiesce(impl);
    tw_ctx_teardown(impl);
    tw_shell_put(ctx);
    return TW_OK;
}
