/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Context lifecycle: configuration, joining the job, progress engines,
 * transports and the messaging layer; finalize in reverse order.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "msg/tw_msg_proto.h"
#include "msg/tw_rma.h"
#include "progress/tw_cq.h"
#include "reliability/tw_rel.h"
#include "reliability/tw_rel_proto.h"
#include "runtime/tw_boot.h"
#include "runtime/tw_context_int.h"
#include "transports/lossy/tw_fault.h"
#include "transports/lossy/tw_lossy.h"
#include "transports/shm/tw_shm.h"
#include "transports/tcp/tw_tcp.h"
#include "transports/verbs/tw_verbs.h"

static const char *const tw_wait_mode_names[] = {"adaptive", "spin", "block", NULL};

static const tw_cfg_entry_t tw_rt_cfg_entries[] = {
    {.name = "TW_TRANSPORTS",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "comma-separated transports to use (self is always on); empty = every usable one",
     .offset = offsetof(tw_rt_cfg_t, transports)},
    {.name = "TW_PROGRESS_THREADS",
     .type = TW_CFG_INT,
     .defval = "-1",
     .help = "progress threads: -1 = one per CPU socket, 0 = manual (tw_progress), N = N",
     .offset = offsetof(tw_rt_cfg_t, progress_threads),
     .min = -1,
     .max = 64},
    {.name = "TW_WAIT_MODE",
     .type = TW_CFG_ENUM,
     .defval = "adaptive",
     .help = "how progress threads and tw_cq_wait wait: adaptive|spin|block",
     .offset = offsetof(tw_rt_cfg_t, wait_mode),
     .enum_names = tw_wait_mode_names},
    {.name = "TW_RELIABLE",
     .type = TW_CFG_BOOL,
     .defval = "0",
     .help = "reliability layer: checksums, acks, retransmission, failover (TW_REL_* tune it)",
     .offset = offsetof(tw_rt_cfg_t, reliable)},
    {.name = "TW_FAULT",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "fault injection (testing): e.g. drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=42",
     .offset = offsetof(tw_rt_cfg_t, fault)},
    {.name = "TW_FAULT_ON",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "transports TW_FAULT applies to (comma list); empty = every one",
     .offset = offsetof(tw_rt_cfg_t, fault_on)},
    {.name = "TW_FAULT_RANKS",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "ranks in which TW_FAULT applies (comma list); empty = every one",
     .offset = offsetof(tw_rt_cfg_t, fault_ranks)},
    {.name = "TW_SPIN_TIME",
     .type = TW_CFG_DURATION,
     .defval = "50us",
     .help = "adaptive waiting: how long to poll before sleeping (ns|us|ms|s)",
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
};

const tw_cfg_table_t tw_rt_cfg_table = {
    .module = "runtime",
    .entries = tw_rt_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_rt_cfg_entries),
};

/* Set by the launcher (twrun), read when joining the job. */
typedef struct tw_boot_env {
    char rank[TW_CFG_STRLEN], size[TW_CFG_STRLEN], local_rank[TW_CFG_STRLEN],
        local_size[TW_CFG_STRLEN], job_key[TW_CFG_STRLEN], boot_addr[TW_CFG_STRLEN];
} tw_boot_env_t;

static const tw_cfg_entry_t tw_boot_cfg_entries[] = {
    {.name = "TW_RANK",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: this process's rank",
     .offset = offsetof(tw_boot_env_t, rank)},
    {.name = "TW_SIZE",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: processes in the job",
     .offset = offsetof(tw_boot_env_t, size)},
    {.name = "TW_LOCAL_RANK",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: rank among the processes of this node",
     .offset = offsetof(tw_boot_env_t, local_rank)},
    {.name = "TW_LOCAL_SIZE",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: processes of the job on this node",
     .offset = offsetof(tw_boot_env_t, local_size)},
    {.name = "TW_JOB_KEY",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: the job's random 128-bit key (hex)",
     .offset = offsetof(tw_boot_env_t, job_key)},
    {.name = "TW_BOOT_ADDR",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: its address-exchange socket",
     .offset = offsetof(tw_boot_env_t, boot_addr)},
};

static const tw_cfg_table_t tw_boot_cfg_table = {
    .module = "launcher",
    .entries = tw_boot_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_boot_cfg_entries),
};

const tw_cfg_table_t *const tw_cfg_all_tables[] = {
    &tw_core_cfg_table, &tw_rt_cfg_table,    &tw_boot_cfg_table, &tw_shm_cfg_table,
    &tw_tcp_cfg_table,  &tw_verbs_cfg_table, &tw_rel_cfg_table};
const size_t tw_cfg_all_tables_count = TW_ARRAY_SIZE(tw_cfg_all_tables);

/* ---- context shells -------------------------------------------------- */

static pthread_mutex_t tw_shell_lock = PTHREAD_MUTEX_INITIALIZER;
static tw_context_t *tw_shells; /* every shell ever made; guarded by tw_shell_lock */

static tw_context_t *tw_shell_get(void)
{
    tw_context_t *c;

    pthread_mutex_lock(&tw_shell_lock);
    for (c = tw_shells; c != NULL; c = c->next) {
        if (atomic_load_explicit(&c->magic, memory_order_relaxed) == TW_CTX_DEAD) {
            break;
        }
    }
    if (c == NULL) {
        c = calloc(1, sizeof(*c)); /* libc: must outlive any jemalloc arena use */
        if (c != NULL) {
            c->next = tw_shells;
            tw_shells = c;
        }
    }
    if (c != NULL) {
        /* Claimed: not DEAD (so no one else takes it), not yet LIVE. */
        atomic_store_explicit(&c->magic, 0, memory_order_relaxed);
    }
    pthread_mutex_unlock(&tw_shell_lock);
    return c;
}

static void tw_shell_put(tw_context_t *c)
{
    pthread_mutex_lock(&tw_shell_lock);
    c->impl = NULL;
    atomic_store_explicit(&c->magic, TW_CTX_DEAD, memory_order_release);
    pthread_mutex_unlock(&tw_shell_lock);
}

__attribute__((destructor)) static void tw_shells_free(void)
{
    pthread_mutex_lock(&tw_shell_lock);
    for (tw_context_t *c = tw_shells, *next; c != NULL; c = next) {
        next = c->next;
        if (atomic_load_explicit(&c->magic, memory_order_relaxed) != TW_CTX_LIVE) {
            free(c); /* live contexts were never finalized: keep them valid */
        }
    }
    tw_shells = NULL;
    pthread_mutex_unlock(&tw_shell_lock);
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
    /* A bad TW_REL_* value is an error even with reliability off. */
    tw_rel_cfg_t relc;
    tw_cfg_set_defaults(&tw_rel_cfg_table, &relc);
    if (tw_cfg_apply_env(&tw_rel_cfg_table, &relc) != TW_OK) {
        return TW_ERR_INVALID;
    }
    tw_log_set_level((tw_log_level_t)core.log_level);
    tw_cfg_warn_unknown(tw_cfg_all_tables, tw_cfg_all_tables_count);
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
    return TW_OK;
}

/* Which job are we in? Without a launcher: a job of one. Refuse to run
 * alone when another launcher evidently started several processes. */
static tw_status_t tw_ctx_join(tw_ctx_impl_t *impl)
{
    static const char *const foreign[] = {"SLURM_STEP_NUM_TASKS", "PMI_SIZE",
                                          "OMPI_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < TW_ARRAY_SIZE(foreign); i++) {
        const char *v = getenv(foreign[i]);
        if (v != NULL && strtol(v, NULL, 10) > 1) {
            tw_error("init",
                     "%s=%s says this job has several processes, but this build of "
                     "threadwire can only join its own launcher (twrun) or run alone; "
                     "unset %s to run a job of one",
                     foreign[i], v, foreign[i]);
            return TW_ERR_BOOTSTRAP;
        }
    }
    tw_boot_env_t env;
    tw_cfg_set_defaults(&tw_boot_cfg_table, &env);
    (void)tw_cfg_apply_env(&tw_boot_cfg_table, &env); /* strings: cannot fail */
    impl->rank = 0;
    impl->size = 1;
    impl->local_rank = 0;
    impl->local_size = 1;
    if (env.boot_addr[0] == '\0') {
        if (env.size[0] != '\0' && strtol(env.size, NULL, 10) > 1) {
            tw_error("init", "TW_SIZE=%s but no TW_BOOT_ADDR: start the job with twrun", env.size);
            return TW_ERR_BOOTSTRAP;
        }
        return TW_OK; /* no launcher: a job of one */
    }
    /* Started by twrun: check what it says, then join its exchange. */
    char *end_r, *end_s;
    long rank = strtol(env.rank, &end_r, 10), size = strtol(env.size, &end_s, 10);
    if (env.rank[0] == '\0' || *end_r != '\0' || env.size[0] == '\0' || *end_s != '\0' ||
        size < 1 || size > 65536 || rank < 0 || rank >= size || strlen(env.job_key) != 32) {
        tw_error("init",
                 "bad launcher environment: TW_RANK='%s' TW_SIZE='%s' TW_JOB_KEY of %zu "
                 "characters (want 32)",
                 env.rank, env.size, strlen(env.job_key));
        return TW_ERR_BOOTSTRAP;
    }
    long lrank = strtol(env.local_rank, &end_r, 10), lsize = strtol(env.local_size, &end_s, 10);
    if (env.local_rank[0] == '\0' || *end_r != '\0' || env.local_size[0] == '\0' ||
        *end_s != '\0' || lsize < 1 || lsize > size || lrank < 0 || lrank >= lsize) {
        tw_error("init", "bad launcher environment: TW_LOCAL_RANK='%s' TW_LOCAL_SIZE='%s'",
                 env.local_rank, env.local_size);
        return TW_ERR_BOOTSTRAP;
    }
    tw_status_t st = tw_boot_connect(env.boot_addr, (int)rank, (int)size, &impl->boot);
    if (st != TW_OK) {
        return TW_ERR_BOOTSTRAP;
    }
    impl->rank = (int)rank;
    impl->size = (int)size;
    impl->local_rank = (int)lrank;
    impl->local_size = (int)lsize;
    snprintf(impl->job_key, sizeof(impl->job_key), "%s", env.job_key);
    return TW_OK;
}

/* Checks TW_TRANSPORTS / cfg.transports names: every name must be known;
 * a transport named but not usable here (verbs without an RDMA device or
 * without libibverbs at build time) is TW_ERR_UNSUPPORTED, with the reason. */
static tw_status_t tw_ctx_check_transports(const char *list)
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;

    strcpy(buf, list);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        const tw_tl_ops_t *ops = tw_tl_find(t);
        if (ops != NULL) {
            char why[256] = "";
            if (ops->query(why, sizeof(why)) != TW_OK) {
                tw_error("init", "transport '%s' in TW_TRANSPORTS is not usable here: %s", t, why);
                return TW_ERR_UNSUPPORTED;
            }
            continue;
        }
        if (strcmp(t, "lossy") == 0) {
            tw_error("init", "lossy wraps the other transports: set TW_FAULT (and TW_FAULT_ON), "
                             "not TW_TRANSPORTS");
            return TW_ERR_INVALID;
        }
        char known[128] = "";
        for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
            size_t n = strlen(known);
            snprintf(known + n, sizeof(known) - n, "%s%s", n > 0 ? ", " : "", tw_tl_all[i]->name);
        }
        tw_error("init", "unknown transport '%s' in TW_TRANSPORTS (known: %s)", t, known);
        return TW_ERR_INVALID;
    }
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

static int tw_ctx_iface_progress(void *arg)
{
    return tw_tl_progress(arg);
}

/* Is transport @p ops selected by TW_TRANSPORTS (empty: every one not
 * opt-in)? self always is. */
static bool tw_ctx_tl_wanted(const tw_ctx_impl_t *impl, const tw_tl_ops_t *ops)
{
    const char *name = ops->name;
    char buf[TW_CFG_STRLEN];
    char *save = NULL;

    if (strcmp(name, "self") == 0) {
        return true;
    }
    if (impl->cfg.transports[0] == '\0') {
        return !ops->opt_in;
    }
    strcpy(buf, impl->cfg.transports);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        if (strcmp(t, name) == 0) {
            return true;
        }
    }
    return false;
}

/* A transport saw a peer go (engine thread): fail what waits for it in the
 * messaging layer, then tell the application -- unless it left cleanly. */
static void tw_ctx_peer_down(void *arg, int peer, tw_status_t why)
{
    tw_ctx_impl_t *impl = arg;
    tw_error_handler_t fn;
    void *fn_arg;

    tw_msg_peer_down(impl->msg, peer);
    if (why == TW_OK) {
        return;
    }
    /* Down for now (a port went down): without rel the peer has no other
     * path, so it is a failure here, reported as one. */
    if (why == TW_ERR_TRANSPORT) {
        why = TW_ERR_PEER_FAILED;
    }
    pthread_mutex_lock(&impl->err_lock);
    fn = impl->err_fn;
    fn_arg = impl->err_arg;
    pthread_mutex_unlock(&impl->err_lock);
    if (fn != NULL) {
        fn(impl->ctx, peer, why, "peer failed", fn_arg);
    }
}

/* Open transport @p ops, wrapped by the fault injector when TW_FAULT
 * says so. */
static tw_status_t tw_ctx_open_one(tw_ctx_impl_t *impl, const tw_tl_ops_t *ops,
                                   const tw_tl_params_t *p, const tw_fault_spec_t *fault,
                                   tw_tl_iface_t **iface_p)
{
    static uint8_t am_type[64];

    char rank[16];

    snprintf(rank, sizeof(rank), "%d", impl->rank);
    if (fault == NULL || !tw_cfg_list_has(impl->cfg.fault_on, ops->name, NULL) ||
        !tw_cfg_list_has(impl->cfg.fault_ranks, rank, NULL)) {
        return ops->iface_open(p, iface_p);
    }
    am_type[TW_REL_AM_DATA] = TW_FAULT_DATA;
    am_type[TW_REL_AM_SDATA] = TW_FAULT_DATA;
    am_type[TW_REL_AM_ACK] = TW_FAULT_ACK;
    am_type[TW_REL_AM_NACK] = TW_FAULT_NACK;
    am_type[TW_REL_AM_CTRL] = TW_FAULT_CTRL;
    tw_info("init", "transport %s: fault injection TW_FAULT=%s", ops->name, impl->cfg.fault);
    return tw_lossy_open(ops, p, fault, am_type, iface_p);
}

static tw_status_t tw_ctx_open_transports(tw_ctx_impl_t *impl)
{
    tw_tl_params_t p = {.rank = impl->rank,
                        .size = impl->size,
                        .pe = impl->pes[0],
                        .pe_params = &impl->pe_params,
                        .recv = tw_msg_recv_cb,
                        .recv_arg = impl->msg,
                        .inline_am_ids = 1ull << TW_MSG_AM_TAG,
                        .recv_rndv = tw_msg_rndv_cb,
                        .peer_down = tw_ctx_peer_down,
                        .peer_down_arg = impl,
                        .job_key = impl->job_key,
                        .local_rank = impl->local_rank,
                        .local_size = impl->local_size};
    char why[128];
    tw_fault_spec_t fault;
    bool faulty = false;

    if (impl->cfg.fault[0] != '\0') {
        if (tw_fault_parse(impl->cfg.fault, &fault, why, sizeof(why)) != TW_OK) {
            tw_error("init", "TW_FAULT=%s: %s", impl->cfg.fault, why);
            return TW_ERR_INVALID;
        }
        faulty = fault.any;
        /* Every name and rank it lists must exist: a typo would silently
         * inject nothing. */
        char buf[TW_CFG_STRLEN];
        char *save = NULL, *end;
        snprintf(buf, sizeof(buf), "%s", impl->cfg.fault_on);
        for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
            if (tw_tl_find(t) == NULL) {
                tw_error("init", "TW_FAULT_ON=%s: no transport '%s'", impl->cfg.fault_on, t);
                return TW_ERR_INVALID;
            }
        }
        snprintf(buf, sizeof(buf), "%s", impl->cfg.fault_ranks);
        save = NULL;
        for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
            long r = strtol(t, &end, 10);
            if (*end != '\0' || r < 0 || r >= impl->size) {
                tw_error("init", "TW_FAULT_RANKS=%s: '%s' is not a rank of this job of %d",
                         impl->cfg.fault_ranks, t, impl->size);
                return TW_ERR_INVALID;
            }
        }
    }
    for (size_t i = 0; tw_tl_all[i] != NULL && impl->ntl < TW_CTX_MAX_TL; i++) {
        const tw_tl_ops_t *ops = tw_tl_all[i];
        tw_tl_iface_t *iface;
        tw_status_t st;

        if (!tw_ctx_tl_wanted(impl, ops)) {
            continue;
        }
        /* A job of one needs nothing but self. */
        if (impl->size == 1 && strcmp(ops->name, "self") != 0) {
            continue;
        }
        if (ops->query(why, sizeof(why)) != TW_OK) {
            tw_debug("init", "transport %s unavailable: %s", ops->name, why);
            continue;
        }
        tw_tl_params_t pp = p;
        if (impl->rel != NULL) {
            tw_rel_path_params(impl->rel, impl->ntl, &pp);
            if (ops->inline_on_send) {
                pp.inline_am_ids = 0; /* it would deliver inside rel's lock */
            }
        }
        st = tw_ctx_open_one(impl, ops, &pp, faulty ? &fault : NULL, &iface);
        if (st != TW_OK) {
            tw_error("init", "cannot open transport %s: %s", ops->name, tw_strerror(st));
            return st;
        }
        if (impl->rel != NULL) {
            tw_rel_set_path(impl->rel, impl->ntl, iface);
        }
        impl->ifaces[impl->ntl++] = iface;
        st = tw_pe_add(impl->pes[0], tw_ctx_iface_progress, iface, -1);
        if (st == TW_OK && ops->poll != tw_tl_stub_progress) {
            st = tw_pe_workers_poll(impl->pes[0]); /* tw_progress, tw_cq_wait */
        }
        if (st != TW_OK) {
            return st;
        }
    }
    return TW_OK;
}

/*
 * Exchange transport addresses through the launcher and connect. Blob:
 * per iface, u8 name length, name, u16 address length, address. Two
 * fences: after the puts (every address is there), and after every rank
 * connected (the transports may then drop what only connecting needed,
 * e.g. segment names).
 */
static tw_status_t tw_ctx_exchange(tw_ctx_impl_t *impl)
{
    unsigned char blob[TW_BOOT_BLOB_MAX];
    size_t off = 0;
    tw_status_t st;

    if (impl->boot == NULL) {
        return TW_OK; /* a job of one */
    }
    if (impl->rel != NULL) {
        /* "rel" and our incarnation: peers drop frames of any other. */
        uint32_t epoch = tw_rel_epoch(impl->rel);
        blob[0] = 3;
        memcpy(blob + 1, "rel", 3);
        blob[4] = sizeof(epoch);
        blob[5] = 0;
        memcpy(blob + 6, &epoch, sizeof(epoch));
        off = 6 + sizeof(epoch);
    }
    for (unsigned i = 0; i < impl->ntl; i++) {
        tw_tl_iface_t *iface = impl->ifaces[i];
        size_t nlen = strlen(iface->ops->name), alen = 0;
        if (off + 1 + nlen + 2 > sizeof(blob)) {
            tw_error("init", "transport addresses do not fit the %zu-byte bootstrap blob",
                     sizeof(blob));
            return TW_ERR_BOOTSTRAP;
        }
        blob[off] = (unsigned char)nlen;
        memcpy(blob + off + 1, iface->ops->name, nlen);
        st = iface->ops->addr_pack(iface, blob + off + 3 + nlen, sizeof(blob) - off - 3 - nlen,
                                   &alen);
        if (st != TW_OK || alen > UINT16_MAX) {
            tw_error("init", "transport %s cannot pack its address", iface->ops->name);
            return TW_ERR_BOOTSTRAP;
        }
        blob[off + 1 + nlen] = (unsigned char)(alen & 0xff);
        blob[off + 2 + nlen] = (unsigned char)(alen >> 8);
        off += 3 + nlen + alen;
    }
    if (tw_boot_put(impl->boot, blob, off) != TW_OK || tw_boot_fence(impl->boot, 60000) != TW_OK) {
        return TW_ERR_BOOTSTRAP;
    }
    for (int peer = 0; peer < impl->size; peer++) {
        size_t len = sizeof(blob);
        if (peer == impl->rank) {
            continue;
        }
        if (tw_boot_get(impl->boot, peer, blob, &len) != TW_OK) {
            return TW_ERR_BOOTSTRAP;
        }
        /* Walk the peer's blob; every length is checked. */
        bool peer_rel = false;
        for (size_t o = 0; o < len;) {
            size_t nlen = blob[o], alen;
            if (o + 1 + nlen + 2 > len) {
                tw_error("init", "rank %d published a malformed address blob", peer);
                return TW_ERR_BOOTSTRAP;
            }
            alen = blob[o + 1 + nlen] | (size_t)blob[o + 2 + nlen] << 8;
            if (o + 3 + nlen + alen > len) {
                tw_error("init", "rank %d published a malformed address blob", peer);
                return TW_ERR_BOOTSTRAP;
            }
            if (nlen == 3 && memcmp(blob + o + 1, "rel", 3) == 0) {
                uint32_t epoch;
                if (alen != sizeof(epoch)) {
                    tw_error("init", "rank %d published a malformed address blob", peer);
                    return TW_ERR_BOOTSTRAP;
                }
                memcpy(&epoch, blob + o + 3 + nlen, sizeof(epoch));
                peer_rel = true;
                if (impl->rel != NULL) {
                    tw_rel_set_peer_epoch(impl->rel, peer, epoch);
                }
            }
            for (unsigned i = 0; i < impl->ntl; i++) {
                tw_tl_iface_t *iface = impl->ifaces[i];
                if (strlen(iface->ops->name) == nlen &&
                    memcmp(iface->ops->name, blob + o + 1, nlen) == 0) {
                    st = iface->ops->addr_connect(iface, peer, blob + o + 3 + nlen, alen);
                    if (st != TW_OK) {
                        tw_error("init", "transport %s cannot connect to rank %d: %s",
                                 iface->ops->name, peer, tw_strerror(st));
                        return st;
                    }
                }
            }
            o += 3 + nlen + alen;
        }
        if (peer_rel != (impl->rel != NULL)) {
            tw_error("init",
                     "rank %d runs with reliability %s and this rank %s: set TW_RELIABLE "
                     "alike on every rank",
                     peer, peer_rel ? "on" : "off", impl->rel != NULL ? "on" : "off");
            return TW_ERR_INVALID;
        }
    }
    if (tw_boot_fence(impl->boot, 60000) != TW_OK) {
        return TW_ERR_BOOTSTRAP;
    }
    return TW_OK;
}

/* Every peer goes through the first transport (in tw_tl_all order: self,
 * shm, ...) that reaches it. */
static tw_status_t tw_ctx_route(tw_ctx_impl_t *impl)
{
    if (impl->rel != NULL) {
        /* Every peer through rel, which picks among the transports. */
        tw_status_t st = tw_rel_ready(impl->rel);
        if (st != TW_OK) {
            return st;
        }
        for (int peer = 0; peer < impl->size; peer++) {
            tw_msg_set_route(impl->msg, peer, tw_rel_iface(impl->rel));
        }
        return TW_OK;
    }
    for (int peer = 0; peer < impl->size; peer++) {
        tw_tl_iface_t *via = NULL;
        for (unsigned i = 0; i < impl->ntl && via == NULL; i++) {
            if (impl->ifaces[i]->ops->reachable(impl->ifaces[i], peer)) {
                via = impl->ifaces[i];
            }
        }
        if (via == NULL) {
            tw_error("init", "no transport reaches rank %d (TW_TRANSPORTS='%s')", peer,
                     impl->cfg.transports);
            return TW_ERR_UNREACHABLE;
        }
        tw_msg_set_route(impl->msg, peer, via);
    }
    return TW_OK;
}

static int tw_ctx_rma_progress(void *arg)
{
    return tw_progress(arg);
}

/* One-sided operations: replies retried on engine 0, manual progress
 * while a region drains, and RDMA registration where routes are direct
 * (with reliability on, every route is rel's, which emulates). */
static tw_status_t tw_ctx_rma_setup(tw_ctx_impl_t *impl)
{
    tw_rma_t *rma = tw_msg_rma(impl->msg);
    tw_status_t st = tw_pe_add(impl->pes[0], tw_rma_progress, rma, -1);

    if (impl->manual) {
        tw_rma_set_progress(rma, tw_ctx_rma_progress, impl->ctx);
    }
    for (unsigned i = 0; st == TW_OK && impl->rel == NULL && i < impl->ntl; i++) {
        tw_tl_iface_t *iface = impl->ifaces[i];
        if (iface->ops->mem_reg != tw_tl_stub_mem_reg) {
            st = tw_rma_add_registrar(rma, iface);
        }
    }
    return st;
}

/*
 * The launcher is our lifeline: when its socket reports EOF it is gone,
 * and so is the job. Its death also kills us (PR_SET_PDEATHSIG); this is
 * the second line, for launchers that cannot set it.
 */
#define TW_CTX_LIFELINE_NS (100ull * 1000 * 1000)

static int tw_ctx_lifeline(void *arg)
{
    tw_ctx_impl_t *impl = arg;
    uint64_t now = tw_time_coarse_ns(); /* every pass: the cheap clock */
    struct pollfd pfd;
    char c;

    if (now < impl->lifeline_next_ns) {
        return 0;
    }
    impl->lifeline_next_ns = now + TW_CTX_LIFELINE_NS;
    pfd = (struct pollfd){.fd = tw_boot_fd(impl->boot), .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) > 0 && recv(pfd.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        tw_error("runtime", "the launcher (twrun) is gone: the job is over, exiting");
        _exit(1);
    }
    return 0;
}

/* Run every engine until a whole pass finds nothing to do. Called with
 * the engine threads stopped: delivers what is still in flight. */
static void tw_ctx_drain(tw_ctx_impl_t *impl)
{
    int events;
    do {
        events = 0;
        for (unsigned i = 0; i < impl->npe; i++) {
            events += tw_pe_progress(impl->pes[i]);
        }
    } while (events > 0);
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
    /* Transports first: what they cancel completes through msg. */
    for (unsigned i = 0; i < impl->ntl; i++) {
        impl->ifaces[i]->ops->iface_close(impl->ifaces[i]);
    }
    if (impl->rel != NULL) {
        tw_rel_destroy(impl->rel); /* before msg: its sends complete there */
    }
    if (impl->msg != NULL) {
        tw_msg_destroy(impl->msg);
    }
    for (unsigned i = 0; i < impl->npe; i++) {
        tw_pe_destroy(impl->pes[i]);
    }
    if (impl->pes != NULL) {
        tw_free(impl->pes, (size_t)impl->npe * sizeof(*impl->pes));
    }
    if (impl->cq_stats != NULL) {
        tw_stats_destroy(impl->cq_stats);
    }
    if (impl->boot != NULL) {
        tw_boot_close(impl->boot);
    }
    pthread_mutex_destroy(&impl->err_lock);
    tw_free(impl, sizeof(*impl));
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
    impl = tw_calloc(1, sizeof(*impl));
    if (impl == NULL) {
        return TW_ERR_NOMEM;
    }
    pthread_mutex_init(&impl->err_lock, NULL);
    st = tw_ctx_configure(cfg, &impl->cfg);
    if (st != TW_OK) {
        goto err_teardown;
    }
    if (impl->cfg.transports[0] != '\0') {
        st = tw_ctx_check_transports(impl->cfg.transports);
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
                          .match_buckets = (unsigned)impl->cfg.match_buckets};
    st = tw_msg_create(&mp, &impl->msg);
    if (st != TW_OK) {
        goto err_shell;
    }
    impl->ctx = ctx;
    if (impl->cfg.reliable) {
        tw_rel_params_t rp = {.rank = impl->rank,
                              .size = impl->size,
                              .pe = impl->pes[0],
                              .recv = tw_msg_recv_cb,
                              .recv_arg = impl->msg,
                              .inline_am_ids = 1ull << TW_MSG_AM_TAG,
                              .peer_down = tw_ctx_peer_down,
                              .peer_down_arg = impl};
        st = tw_rel_create(&rp, &impl->rel);
        if (st != TW_OK) {
            goto err_shell;
        }
    }
    st = tw_ctx_open_transports(impl);
    if (st == TW_OK) {
        st = tw_ctx_exchange(impl);
    }
    if (st == TW_OK) {
        st = tw_ctx_route(impl);
    }
    /* Every rank connected, every route set: transports may drop what
     * only connecting needed, and start threads of their own. */
    for (unsigned i = 0; st == TW_OK && i < impl->ntl; i++) {
        impl->ifaces[i]->ops->ready(impl->ifaces[i]);
    }
    if (st == TW_OK) {
        st = tw_ctx_rma_setup(impl);
    }
    if (st == TW_OK && impl->boot != NULL) {
        st = tw_pe_add(impl->pes[0], tw_ctx_lifeline, impl, -1);
        if (st == TW_OK) {
            st = tw_pe_watch(impl->pes[0], tw_boot_fd(impl->boot));
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

tw_status_t tw_finalize(tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = tw_ctx_get(ctx, "tw_finalize");

    if (impl == NULL) {
        return TW_ERR_INVALID;
    }
    /* Dead first: a stray call from now on is refused, not a crash. */
    atomic_store_explicit(&ctx->magic, 0, memory_order_release);
    if (impl->rel != NULL) {
        /* Goodbyes in sequence after the data, and the acks for it. */
        tw_rel_quiesce(impl->rel, 0);
    }
    tw_ctx_teardown(impl);
    tw_shell_put(ctx);
    return TW_OK;
}
