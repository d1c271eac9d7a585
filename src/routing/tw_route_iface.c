/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * route as an iface: its tunables and stats, the ops table, opening
 * beside the transports (taps), the address entry (the mode, which every
 * rank must share), quiesce (a leader stays for its node's ranks), close.
 *
 * Lifetime: each tap holds a reference, the iface one; whichever lets go
 * last frees. The ifaces close in routing order, route among them (first
 * in leader mode, last in direct mode): from the first close on -- route's
 * or a tapped iface's -- route is closed: what the others still deliver
 * through their taps goes to the layer above, route's frames are dropped,
 * and route looks at no inner iface again.
 */
#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "routing/tw_route_int.h"

static const char *const tw_route_modes[] = {"direct", "leader", NULL};

static const tw_cfg_entry_t tw_route_cfg_entries[] = {
    {.name = "TW_ROUTE",
     .type = TW_CFG_ENUM,
     .defval = "direct",
     .enum_names = tw_route_modes,
     .help = "routing between nodes: direct (every rank connects to the ranks of other nodes "
             "it talks to) or leader (through one leader per node, its lowest rank: shm to "
             "ours, one connection between each pair of leaders, shm to theirs). Under "
             "TW_RELIABLE=1 with direct, the leaders are the last failover path",
     .offset = offsetof(tw_route_cfg_t, mode)},
    {.name = "TW_ROUTE_LINGER",
     .type = TW_CFG_DURATION,
     .defval = "0",
     .help = "routing: at tw_finalize, a node's leader keeps passing frames on until every "
             "other rank of its node has left or failed, or this long at most; 0 = no limit",
     .offset = offsetof(tw_route_cfg_t, linger_ns)},
};

const tw_cfg_table_t tw_route_cfg_table = {
    .module = "routing",
    .entries = tw_route_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_route_cfg_entries),
};

static const tw_stat_desc_t tw_route_stat_descs[TW_ROUTE_STAT_COUNT] = {
    [TW_ROUTE_STAT_SENT] = {"sent", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_SENT_BYTES] = {"sent_bytes", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_FORWARDED] = {"forwarded", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_FWD_BYTES] = {"forwarded_bytes", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_DELIVERED] = {"delivered", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_QUEUED] = {"queued", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_HELD] = {"held", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_AGAIN] = {"again", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_DROPPED] = {"dropped", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_CRC_FAILURES] = {"crc_failures", TW_STAT_COUNTER},
    [TW_ROUTE_STAT_DOWNS] = {"downs", TW_STAT_COUNTER},
};

static tw_status_t tw_route_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

static tw_status_t tw_route_load_cfg(tw_route_cfg_t *cfg)
{
    tw_cfg_set_defaults(&tw_route_cfg_table, cfg);
    return tw_cfg_apply_env(&tw_route_cfg_table, cfg) == TW_OK ? TW_OK : TW_ERR_INVALID;
}

/* Nodes in the node map. */
static int tw_route_nnodes(const tw_tl_params_t *params)
{
    int n = 0;

    for (int r = 0; r < params->size; r++) {
        n = TW_MAX(n, params->node_of[r] + 1);
    }
    return n;
}

/* Over every transport that reaches other ranks (not self, which
 * delivers on the sending thread), when the job spans nodes and leader
 * routing is asked for, or reliability wants a last path. */
static tw_status_t tw_route_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                       bool *wants_p)
{
    tw_route_cfg_t cfg;

    *wants_p = false;
    if (tw_route_load_cfg(&cfg) != TW_OK) {
        return TW_ERR_INVALID;
    }
    if (params->node_of == NULL || tw_route_nnodes(params) < 2 ||
        (inner->caps & TW_TL_CAP_INLINE_SEND) || (inner->caps & TW_TL_CAP_AM_SHORT) == 0) {
        return TW_OK;
    }
    *wants_p = cfg.mode == TW_ROUTE_LEADER || (params->features & TW_TL_FEATURE_RELIABLE) != 0;
    return TW_OK;
}

/* The retry timer off the engine, and closed. */
static void tw_route_timer_close(tw_route_t *rt)
{
    if (rt->timer_fd >= 0) {
        if (rt->timer_watched) {
            tw_pe_unwatch(rt->pe, rt->timer_fd);
        }
        close(rt->timer_fd);
        rt->timer_fd = -1;
    }
}

static void tw_route_unref(tw_route_t *rt)
{
    if (atomic_fetch_sub_explicit(&rt->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    tw_route_timer_close(rt);
    for (int r = 0; rt->locks && r < rt->size; r++) {
        tw_route_q_flush(rt, r, TW_ERR_CANCELED);
        tw_mutex_destroy(&rt->q[r].lock);
        tw_mutex_destroy(&rt->out[r].lock);
    }
    for (int r = 0; rt->locks && r < rt->size; r++) {
        tw_route_reasm_t *m = &rt->reasm[r];
        tw_mutex_lock(&m->lock);
        tw_route_reasm_clear(m);
        tw_mutex_unlock(&m->lock);
        tw_mutex_destroy(&m->lock);
    }
    tw_free(rt->q, (size_t)rt->size * sizeof(*rt->q));
    tw_free(rt->out, (size_t)rt->size * sizeof(*rt->out));
    tw_free(rt->reasm, (size_t)rt->size * sizeof(*rt->reasm));
    tw_free(rt->via, (size_t)rt->size * sizeof(*rt->via));
    tw_free(rt->down, (size_t)rt->size);
    tw_free(rt->gone, (size_t)rt->size);
    tw_free(rt->node_of, (size_t)rt->size * sizeof(int));
    tw_free(rt->leader_of, (size_t)TW_MAX(rt->nnodes, 1) * sizeof(int));
    if (rt->stats != NULL) {
        tw_stats_destroy(rt->stats);
    }
    tw_free(rt, sizeof(*rt));
}

static void tw_route_tap_release(tw_tl_tap_t *tap)
{
    tw_route_tap_t *t = (tw_route_tap_t *)(void *)tap;
    tw_route_t *rt = t->rt;

    /* A tapped iface closed: what the others still report (their own
     * closes) must not make us look at it. */
    atomic_store_explicit(&rt->closed, true, memory_order_release);
    tw_free(t, sizeof(*t));
    tw_route_unref(rt);
}

static void tw_route_iface_close(tw_tl_iface_t *iface)
{
    tw_route_t *rt = (tw_route_t *)iface;

    atomic_store_explicit(&rt->closed, true, memory_order_release);
    /* The engines have stopped: nobody drains any more. */
    for (int r = 0; r < rt->size; r++) {
        tw_route_q_flush(rt, r, TW_ERR_CANCELED);
    }
    tw_route_timer_close(rt);
    tw_route_unref(rt);
}

static tw_status_t tw_route_alloc(tw_route_t *rt, const tw_tl_params_t *params)
{
    size_t n = (size_t)params->size;

    rt->rank = params->rank;
    rt->size = params->size;
    rt->pe = params->pe;
    rt->nnodes = tw_route_nnodes(params);
    rt->stats = tw_stats_create("route", tw_route_stat_descs, TW_ROUTE_STAT_COUNT);
    rt->node_of = tw_calloc(n, sizeof(int));
    rt->leader_of = tw_calloc((size_t)rt->nnodes, sizeof(int));
    rt->q = tw_calloc(n, sizeof(*rt->q));
    rt->out = tw_calloc(n, sizeof(*rt->out));
    rt->reasm = tw_calloc(n, sizeof(*rt->reasm));
    rt->via = tw_calloc(n, sizeof(*rt->via));
    rt->down = tw_calloc(n, 1);
    rt->gone = tw_calloc(n, 1);
    if (rt->stats == NULL || rt->node_of == NULL || rt->leader_of == NULL || rt->q == NULL ||
        rt->out == NULL || rt->reasm == NULL || rt->via == NULL || rt->down == NULL ||
        rt->gone == NULL) {
        return TW_ERR_NOMEM;
    }
    for (int r = rt->size - 1; r >= 0; r--) {
        rt->node_of[r] = params->node_of[r];
        rt->leader_of[rt->node_of[r]] = r; /* the lowest, going down */
        tw_mutex_init(&rt->q[r].lock, TW_LOCK_RANK_ROUTE_Q, "route queue");
        tw_mutex_init(&rt->out[r].lock, TW_LOCK_RANK_ROUTE_OUT, "route numbering");
        tw_mutex_init(&rt->reasm[r].lock, TW_LOCK_RANK_ROUTE_REASM, "route reassembly");
        atomic_init(&rt->q[r].n, 0);
        atomic_init(&rt->via[r], NULL);
        atomic_init(&rt->down[r], 0);
        atomic_init(&rt->gone[r], 0);
    }
    rt->locks = true;
    rt->node = rt->node_of[rt->rank];
    rt->leader = rt->leader_of[rt->node];
    rt->is_leader = rt->leader == rt->rank;
    rt->ordered = (params->features & TW_TL_FEATURE_RELIABLE) == 0;
    return TW_OK;
}

static tw_status_t tw_route_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                                      const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    tw_route_t *rt;
    size_t frag = SIZE_MAX, max_hdr = TW_TL_HDR_MAX;
    tw_status_t st;

    if (n == 0 || n > TW_ROUTE_MAX_TAPS) {
        tw_error("route", "%u transports to route through: want 1..%d", n, TW_ROUTE_MAX_TAPS);
        return TW_ERR_INVALID;
    }
    for (unsigned i = 0; i < n; i++) {
        frag = TW_MIN(frag, inner[i]->attr.max_short);
        max_hdr = TW_MIN(max_hdr, inner[i]->attr.max_hdr);
        if (inner[i]->tap != NULL) {
            tw_error("route", "transport %s is tapped already", inner[i]->name);
            return TW_ERR_INVALID;
        }
    }
    if (frag < TW_TL_SHORT_MIN || max_hdr < sizeof(tw_route_hdr_t) + TW_TL_HDR_SLACK) {
        tw_error("route", "a transport's frames (%zu bytes, headers %zu) are too small to route",
                 frag, max_hdr);
        return TW_ERR_UNSUPPORTED;
    }
    rt = tw_calloc(1, sizeof(*rt));
    if (rt == NULL) {
        return TW_ERR_NOMEM;
    }
    atomic_init(&rt->refs, 1);
    atomic_init(&rt->queued, 0);
    atomic_init(&rt->closed, false);
    rt->timer_fd = -1;
    st = tw_route_load_cfg(&rt->cfg);
    if (st == TW_OK) {
        st = tw_route_alloc(rt, params);
    }
    if (st == TW_OK) {
        rt->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (rt->timer_fd < 0) {
            tw_error("route", "cannot make a timer: %s", strerror(errno));
            st = TW_ERR_TRANSPORT;
        } else {
            st = tw_pe_watch(rt->pe, rt->timer_fd); /* logs its failure */
            rt->timer_watched = st == TW_OK;
        }
    }
    for (unsigned i = 0; st == TW_OK && i < n; i++) {
        rt->taps[i] = tw_calloc(1, sizeof(*rt->taps[i]));
        if (rt->taps[i] == NULL) {
            st = TW_ERR_NOMEM;
        }
    }
    if (st != TW_OK) {
        for (unsigned i = 0; i < n; i++) {
            tw_free(rt->taps[i], sizeof(*rt->taps[i]));
        }
        tw_route_unref(rt);
        return st;
    }
    /* Nothing fails from here on. */
    rt->frag = frag;
    rt->ntaps = n;
    for (unsigned i = 0; i < n; i++) {
        tw_route_tap_t *t = rt->taps[i];
        t->rt = rt;
        t->tap.am_id = TW_ROUTE_AM;
        t->tap.recv = tw_route_tap_recv;
        t->tap.peer_down = tw_route_tap_peer_down;
        t->tap.release = tw_route_tap_release;
        rt->inner[i] = inner[i];
        atomic_fetch_add_explicit(&rt->refs, 1, memory_order_relaxed);
        tw_tl_tap(inner[i], &t->tap);
    }
    tw_tl_wrapper_init(&rt->super, &tw_route_ops, params,
                       TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY |
                           (rt->cfg.mode == TW_ROUTE_LEADER ? TW_TL_CAP_FIRST : 0),
                       rt->stats, NULL, 0);
    rt->super.attr = (tw_tl_attr_t){.max_short = frag - sizeof(tw_route_hdr_t),
                                    .max_hdr = max_hdr - sizeof(tw_route_hdr_t),
                                    .max_zcopy = TW_ROUTE_MAX_MSG};
    tw_debug("route", "%s routing over %u transport(s); rank %d of node %d, whose leader is %d",
             tw_route_modes[rt->cfg.mode], n, rt->rank, rt->node, rt->leader);
    *iface_p = &rt->super;
    return TW_OK;
}

/* The mode, which every rank must share. */
static tw_status_t tw_route_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_route_t *rt = (tw_route_t *)iface;

    if (cap < 1) {
        return TW_ERR_NOMEM;
    }
    *(uint8_t *)buf = (uint8_t)rt->cfg.mode;
    *len_p = 1;
    return TW_OK;
}

static tw_status_t tw_route_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr,
                                         size_t len)
{
    tw_route_t *rt = (tw_route_t *)iface;
    uint8_t mode = len == 1 ? *(const uint8_t *)addr : 0xff;

    if (mode != rt->cfg.mode) {
        tw_error("route",
                 "rank %d routes between nodes %s and this rank %s: set TW_ROUTE alike on "
                 "every rank",
                 peer, mode <= TW_ROUTE_LEADER ? tw_route_modes[mode] : "(malformed)",
                 tw_route_modes[rt->cfg.mode]);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

static bool tw_route_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_route_t *rt = (tw_route_t *)iface;

    return peer >= 0 && peer < rt->size && rt->node_of[peer] != rt->node;
}

/* Nothing of ours waits, and (a leader) every other rank of our node has
 * left or failed. */
static bool tw_route_done(tw_route_t *rt)
{
    bool stays = rt->is_leader;

    if (!tw_route_queues_empty(rt)) {
        return false;
    }
    for (int x = 0; stays && x < rt->size; x++) {
        if (x != rt->rank && rt->node_of[x] == rt->node &&
            !atomic_load_explicit(&rt->gone[x], memory_order_acquire)) {
            return false;
        }
    }
    return true;
}

/* A leader stays, passing frames on, until the other ranks of its node
 * have left (they may still talk to other nodes through it: under leader
 * routing always, as rel's last path whenever their direct paths failed
 * -- their last acks and goodbyes go through it), or TW_ROUTE_LINGER. */
static void tw_route_quiesce(tw_tl_iface_t *iface)
{
    tw_route_t *rt = (tw_route_t *)iface;
    uint64_t start = tw_time_ns(), next_note = start + 10000000000ull;
    tw_backoff_t b = TW_BACKOFF_INIT;

    while (!tw_route_done(rt)) {
        uint64_t now = tw_time_ns();
        if (rt->cfg.linger_ns != 0 && now - start >= rt->cfg.linger_ns) {
            tw_warn("route",
                    "finalize: %s after %llu ms (TW_ROUTE_LINGER): leaving; what still goes "
                    "through this rank is lost",
                    tw_route_queues_empty(rt) ? "ranks of this node still route through it"
                                              : "frames still wait to be passed on",
                    (unsigned long long)(rt->cfg.linger_ns / 1000000));
            break;
        }
        if (now >= next_note) {
            /* Unusual (its ranks finalize too): say what it waits for. */
            int waits = -1;
            for (int x = 0; rt->is_leader && x < rt->size && waits < 0; x++) {
                if (x != rt->rank && rt->node_of[x] == rt->node &&
                    !atomic_load_explicit(&rt->gone[x], memory_order_acquire)) {
                    waits = x;
                }
            }
            tw_warn("route",
                    "finalize: %llu s waiting for %u queued frame(s) to leave%s and for "
                    "rank %d of this node (-1: none) to leave; TW_ROUTE_LINGER bounds it",
                    (unsigned long long)((now - start) / 1000000000ull),
                    (unsigned)atomic_load_explicit(&rt->queued, memory_order_acquire),
                    rt->is_leader ? " (this node's leader)" : "", waits);
            next_note = now + 10000000000ull;
        }
        if (!tw_pe_has_thread(rt->pe)) {
            tw_pe_progress(rt->pe);
        }
        for (unsigned i = 0; i < rt->ntaps; i++) {
            if (!tw_pe_has_thread(rt->inner[i]->pe)) {
                tw_pe_progress(rt->inner[i]->pe);
            }
        }
        tw_backoff_wait(&b);
    }
}

const tw_tl_ops_t tw_route_ops = {
    .name = "route",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_FIRST | TW_TL_CAP_WRAPPER |
            TW_TL_CAP_WRAP_ALL | TW_TL_CAP_BESIDE | TW_TL_CAP_JOB_WIDE,
    .cfg = &tw_route_cfg_table,
    .query = tw_route_query,
    .iface_open = tw_tl_stub_iface_open,
    .wrap_wants = tw_route_wrap_wants,
    .wrap_open = tw_route_wrap_open,
    .iface_close = tw_route_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_route_addr_pack,
    .addr_connect = tw_route_addr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_route_quiesce,
    .reachable = tw_route_reachable,
    .am_short = tw_route_am_short,
    .am_zcopy = tw_route_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_route_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};
