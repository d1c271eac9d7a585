/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * rel as an iface: its tunables and stats, the ops table, and the
 * lifecycle. wrap takes every path over (tw_tl_bind: its arrivals and
 * failures come to rel) and gives a path that delivers on the sending
 * thread (self) no inline am ids, so its am_short never calls back into
 * rel there: rel calls paths with a peer's lock held. A peer's
 * incarnation comes in addr_connect, which also finds the paths that
 * reach it (they connected first).
 *
 * Leaving: quiesce (from tw_finalize) sends a goodbye (upper am id
 * TW_REL_BYE_AM) to every peer in sequence after all data, then waits,
 * up to the keepalive bound, for every peer to ack everything. A peer
 * whose goodbye arrives has left (tw_rel_drain): it is reported up as a
 * clean departure (TW_OK), never as a failure, and no longer pinged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_time.h"
#include "reliability/tw_rel_int.h"

#define TW_REL_AM_MASK                                                               \
    ((1ull << TW_REL_AM_DATA) | (1ull << TW_REL_AM_ACK) | (1ull << TW_REL_AM_NACK) | \
     (1ull << TW_REL_AM_CTRL) | (1ull << TW_REL_AM_SDATA))

TW_TLS bool tw_rel_in_worker;

/* What each of rel's am ids is (a fault injector's per-class rules). */
static const uint8_t tw_rel_am_class[64] = {
    [TW_REL_AM_DATA] = TW_TL_FRAME_DATA, [TW_REL_AM_SDATA] = TW_TL_FRAME_DATA,
    [TW_REL_AM_ACK] = TW_TL_FRAME_ACK,   [TW_REL_AM_NACK] = TW_TL_FRAME_NACK,
    [TW_REL_AM_CTRL] = TW_TL_FRAME_CTRL,
};

static const tw_cfg_entry_t tw_rel_cfg_entries[] = {
    {.name = "TW_REL_RTO",
     .type = TW_CFG_DURATION,
     .defval = "2ms",
     .help = "reliability: shortest retransmission timeout (srtt + 4 rttvar, at least this), and "
             "the first before a round trip is measured; doubled per retry up to TW_REL_RTO_MAX; "
             "in manual progress the first timeout of a message sent into an empty window is "
             "between one and two of it",
     .offset = offsetof(tw_rel_cfg_t, rto_ns)},
    {.name = "TW_REL_RTO_MAX",
     .type = TW_CFG_DURATION,
     .defval = "100ms",
     .help = "reliability: longest retransmission timeout",
     .offset = offsetof(tw_rel_cfg_t, rto_max_ns)},
    {.name = "TW_REL_PATH_TIMEOUT",
     .type = TW_CFG_DURATION,
     .defval = "2s",
     .help = "reliability: a path to a peer fails when a fragment was tried 6 times, or the "
             "transport refused every frame, and no ack acknowledged anything new this long; its "
             "traffic moves to the next transport that reaches the peer",
     .offset = offsetof(tw_rel_cfg_t, path_timeout_ns)},
    {.name = "TW_REL_ACK_DELAY",
     .type = TW_CFG_DURATION,
     .defval = "1ms",
     .help = "reliability: longest wait before an ack of small messages goes alone (reverse "
             "traffic carries acks; every 48th fragment, and the fragments of a message over 8 "
             "KiB, are acked at once)",
     .offset = offsetof(tw_rel_cfg_t, ack_delay_ns)},
    {.name = "TW_REL_KEEPALIVE",
     .type = TW_CFG_DURATION,
     .defval = "1s",
     .help = "reliability: a silent peer is pinged this often; silent for TW_REL_KEEPALIVE x "
             "TW_REL_MISSES, with TW_REL_MISSES - 1 pings unanswered, it has failed (in manual "
             "mode, call tw_progress more often than that)",
     .offset = offsetof(tw_rel_cfg_t, keepalive_ns)},
    {.name = "TW_REL_MISSES",
     .type = TW_CFG_INT,
     .defval = "3",
     .help = "reliability: a peer silent for TW_REL_KEEPALIVE times this has failed",
     .offset = offsetof(tw_rel_cfg_t, misses),
     .min = 1,
     .max = 1000},
    {.name = "TW_REL_PROBE",
     .type = TW_CFG_DURATION,
     .defval = "100ms",
     .help = "reliability: probe a failed path this often (fail-back)",
     .offset = offsetof(tw_rel_cfg_t, probe_ns)},
    {.name = "TW_REL_PROBES",
     .type = TW_CFG_INT,
     .defval = "3",
     .help = "reliability: answered probes before a failed path is used again",
     .offset = offsetof(tw_rel_cfg_t, probes),
     .min = 1,
     .max = 1000},
    {.name = "TW_REL_QUEUE",
     .type = TW_CFG_INT,
     .defval = "256",
     .help = "reliability: unacknowledged messages per peer before sends return TW_ERR_AGAIN (the "
             "sender's memory bound)",
     .offset = offsetof(tw_rel_cfg_t, queue),
     .min = 1,
     .max = 1 << 20},
    {.name = "TW_REL_SEQ_START",
     .type = TW_CFG_UINT64,
     .defval = "0",
     .help = "reliability: first sequence number (tests start near 2^32 for wraparound)",
     .offset = offsetof(tw_rel_cfg_t, seq_start),
     .min = 0,
     .max = UINT32_MAX},
};

const tw_cfg_table_t tw_rel_cfg_table = {
    .module = "reliability",
    .entries = tw_rel_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_rel_cfg_entries),
};

static const tw_stat_desc_t tw_rel_stat_descs[TW_REL_STAT_COUNT] = {
    [TW_REL_STAT_FRAGS_SENT] = {"frags_sent", TW_STAT_COUNTER},
    [TW_REL_STAT_RETRANSMITS] = {"retransmits", TW_STAT_COUNTER},
    [TW_REL_STAT_ACKS_SENT] = {"acks_sent", TW_STAT_COUNTER},
    [TW_REL_STAT_NACKS_SENT] = {"nacks_sent", TW_STAT_COUNTER},
    [TW_REL_STAT_DELIVERED] = {"delivered", TW_STAT_COUNTER},
    [TW_REL_STAT_DUPLICATES] = {"duplicates", TW_STAT_COUNTER},
    [TW_REL_STAT_OUT_OF_ORDER] = {"out_of_order", TW_STAT_COUNTER},
    [TW_REL_STAT_CRC_FAILURES] = {"crc_failures", TW_STAT_COUNTER},
    [TW_REL_STAT_BAD_FRAMES] = {"bad_frames", TW_STAT_COUNTER},
    [TW_REL_STAT_STALE] = {"stale", TW_STAT_COUNTER},
    [TW_REL_STAT_OUT_OF_WINDOW] = {"out_of_window", TW_STAT_COUNTER},
    [TW_REL_STAT_FAILOVERS] = {"failovers", TW_STAT_COUNTER},
    [TW_REL_STAT_FAILBACKS] = {"failbacks", TW_STAT_COUNTER},
    [TW_REL_STAT_PEER_FAILURES] = {"peer_failures", TW_STAT_COUNTER},
    [TW_REL_STAT_PINGS] = {"pings", TW_STAT_COUNTER},
    [TW_REL_STAT_AGAIN] = {"again", TW_STAT_COUNTER},
};

static uint64_t tw_rel_stats_source(void *arg, unsigned id)
{
    const tw_rel_t *rel = arg;
    uint64_t sum = 0;

    if (id != TW_REL_STAT_FRAGS_SENT && id != TW_REL_STAT_DELIVERED) {
        return 0;
    }
    for (int r = 0; r < rel->size; r++) {
        const tw_rel_peer_t *p = &rel->peers[r];
        sum +=
            atomic_load_explicit(id == TW_REL_STAT_FRAGS_SENT ? &p->n_frags_sent : &p->n_delivered,
                                 memory_order_relaxed);
    }
    return sum;
}

static tw_status_t tw_rel_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

static bool tw_rel_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    return peer >= 0 && peer < rel->size && rel->peers[peer].paths_reach != 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

static uint64_t tw_rel_monotonic(void)
{
    return tw_time_ns();
}

/* Which paths reach @p peer (after they connected to it). */
static void tw_rel_find_paths(tw_rel_t *rel, int peer)
{
    tw_rel_peer_t *p = &rel->peers[peer];

    p->paths_reach = 0;
    for (unsigned g = 0; g < rel->npaths; g++) {
        if (tw_tl_reachable(rel->paths[g].iface, peer)) {
            p->paths_reach |= (uint8_t)(1u << g);
        }
    }
}

static tw_status_t tw_rel_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    tw_rel_addr_t a = {.version = TW_REL_ADDR_VERSION, .epoch = rel->epoch};

    if (cap < sizeof(a)) {
        return TW_ERR_NOMEM;
    }
    memcpy(buf, &a, sizeof(a));
    *len_p = sizeof(a);
    return TW_OK;
}

/* After the paths connected to @p peer: its incarnation, and its paths. */
static tw_status_t tw_rel_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    uint32_t epoch;

    if (peer < 0 || peer >= rel->size || peer == rel->rank ||
        !tw_rel_addr_parse(addr, len, &epoch)) {
        tw_error("rel", "rank %d published a malformed reliability address (%zu bytes)", peer, len);
        return TW_ERR_INVALID;
    }
    rel->peers[peer].epoch = epoch;
    tw_rel_find_paths(rel, peer);
    return TW_OK;
}

/* Every rank connected: the clocks start. Registered with the engine
 * already (tw_tl_pe_add_tree). */
static void tw_rel_ready(tw_tl_iface_t *iface)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    uint64_t now = rel->clock();

    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        p->paths_up = p->paths_reach;
        p->rx_path = (uint8_t)__builtin_ctz(p->paths_reach | 0x80u);
        p->last_rx_ns = now;
        p->clock_ns = now;
        p->ping_due = now + rel->cfg.keepalive_ns;
    }
    /* In manual mode nobody sleeps on it: callers of tw_progress run
     * the passes. */
    rel->timer_used = tw_pe_has_thread(rel->pe);
    tw_rel_arm(rel, now + TW_MIN(rel->cfg.keepalive_ns, rel->cfg.probe_ns));
}

/* Say goodbye to every peer (in sequence, after all data) and wait up to
 * the keepalive bound for every peer to acknowledge everything sent,
 * driving the engine when it has no thread. */
static void tw_rel_quiesce(tw_tl_iface_t *iface)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    uint64_t timeout_ns = rel->cfg.keepalive_ns * (uint64_t)rel->cfg.misses;
    uint64_t deadline = rel->clock() + timeout_ns;
    tw_backoff_t b = TW_BACKOFF_INIT;

    atomic_store_explicit(&rel->leaving, true, memory_order_relaxed);
    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        if (peer == rel->rank || p->paths_reach == 0) {
            continue;
        }
        (void)tw_rel_post(rel, peer, TW_REL_BYE_AM, NULL, 0, NULL, 0, true, NULL, true);
    }
    for (;;) {
        bool busy = false;
        for (int peer = 0; peer < rel->size && !busy; peer++) {
            tw_rel_peer_t *p = &rel->peers[peer];
            /* Only a look: a lock the engine holds means it is busy with
             * the peer -- waiting for it could starve this thread (an
             * engine that retakes it at once) past the deadline. */
            if (!tw_mutex_trylock(&p->lock)) {
                busy = true;
                break;
            }
            /* A peer that said goodbye has finalized: nothing we still
             * owe it would be received. */
            busy = !p->down && !p->left && p->nmsgs > 0;
            tw_mutex_unlock(&p->lock);
        }
        if (!busy) {
            break;
        }
        if (rel->clock() >= deadline) {
            tw_warn("rel", "finalize: some peers did not acknowledge everything in %llu ms",
                    (unsigned long long)(timeout_ns / 1000000));
            break;
        }
        if (!tw_pe_has_thread(rel->pe)) {
            tw_pe_progress(rel->pe);
        }
        tw_backoff_wait(&b);
    }
    /* What we owe our peers' last fragments. */
    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        tw_mutex_lock(&p->lock);
        if (!p->down && p->paths_reach != 0 && (p->ack_owed > 0 || p->ack_due != 0)) {
            (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
        }
        tw_mutex_unlock(&p->lock);
    }
}

/* A waiting worker polls the paths: arrivals are handled here, messages
 * that run user code are left to an engine. */
static int tw_rel_poll(tw_tl_iface_t *iface)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    int events = 0;

    tw_rel_in_worker = true;
    for (unsigned g = 0; g < rel->npaths; g++) {
        tw_tl_iface_t *path = rel->paths[g].iface;
        if (path->caps & TW_TL_CAP_POLL) {
            events += tw_tl_poll(path);
        }
    }
    events += tw_rel_timers(rel, false);
    tw_rel_in_worker = false;
    return events;
}

static tw_status_t tw_rel_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                     bool *wants_p)
{
    (void)inner;
    *wants_p = (params->features & TW_TL_FEATURE_RELIABLE) != 0;
    return TW_OK;
}

static tw_status_t tw_rel_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                                    const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    return tw_rel_wrap(inner, n, params, NULL, iface_p);
}

static void tw_rel_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_rel_ops = {
    .name = "rel",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_POLL | TW_TL_CAP_WRAPPER |
            TW_TL_CAP_WRAP_ALL | TW_TL_CAP_JOB_WIDE,
    .cfg = &tw_rel_cfg_table,
    .query = tw_rel_query,
    .iface_open = tw_tl_stub_iface_open,
    .wrap_wants = tw_rel_wrap_wants,
    .wrap_open = tw_rel_wrap_open,
    .iface_close = tw_rel_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_rel_addr_pack,
    .addr_connect = tw_rel_addr_connect,
    .ready = tw_rel_ready,
    .quiesce = tw_rel_quiesce,
    .reachable = tw_rel_reachable,
    .am_short = tw_rel_am_short,
    .am_zcopy = tw_rel_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_rel_progress_op,
    .poll = tw_rel_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static void tw_rel_destroy(tw_rel_t *rel);

/* Its settings, and the one fragment size every path carries. */
static tw_status_t tw_rel_configure(tw_rel_t *rel, tw_tl_iface_t *const *paths, unsigned n,
                                    const tw_rel_opts_t *opts)
{
    size_t cap = TW_REL_MAX_SHORT;

    if (opts != NULL && opts->cfg != NULL) {
        rel->cfg = *opts->cfg;
    } else {
        tw_cfg_set_defaults(&tw_rel_cfg_table, &rel->cfg);
        if (tw_cfg_apply_env(&tw_rel_cfg_table, &rel->cfg) != TW_OK) {
            return TW_ERR_INVALID;
        }
    }
    if (rel->cfg.rto_ns == 0 || rel->cfg.rto_max_ns < rel->cfg.rto_ns ||
        rel->cfg.keepalive_ns == 0 || rel->cfg.probe_ns == 0) {
        tw_error("rel", "TW_REL_RTO must be > 0 and <= TW_REL_RTO_MAX; TW_REL_KEEPALIVE and "
                        "TW_REL_PROBE > 0");
        return TW_ERR_INVALID;
    }
    if (n == 0 || n > TW_REL_MAX_PATHS) {
        tw_error("rel", "%u paths: want 1..%d", n, TW_REL_MAX_PATHS);
        return TW_ERR_INVALID;
    }
    for (unsigned g = 0; g < n; g++) {
        cap = TW_MIN(cap, paths[g]->attr.max_short);
    }
    if (cap < sizeof(tw_rel_hdr_t) + TW_REL_MAX_UHDR + 256) {
        tw_error("rel",
                 "a transport's largest short message (%zu bytes) is too small to carry "
                 "reliable fragments",
                 cap);
        return TW_ERR_UNSUPPORTED;
    }
    rel->frag_cap = cap - sizeof(tw_rel_hdr_t);
    return TW_OK;
}

/* Take path @p g over: its arrivals and failures come to rel, and a
 * waiting worker may take rel's frames in (tw_rel_poll) -- but a path that
 * delivers on the sending thread (self) gets none, since rel calls its
 * paths with a peer's lock held. */
static void tw_rel_take_path(tw_rel_t *rel, unsigned g, tw_tl_iface_t *iface,
                             const tw_tl_params_t *params)
{
    tw_tl_params_t up = *params;

    rel->paths[g] = (tw_rel_path_t){.rel = rel, .iface = iface, .index = g};
    rel->inner[g] = iface;
    up.recv = tw_rel_recv_cb;
    up.recv_arg = &rel->paths[g];
    up.recv_rndv = tw_rel_rndv_cb;
    up.peer_down = tw_rel_peer_down_cb;
    up.peer_down_arg = &rel->paths[g];
    up.inline_am_ids = (iface->caps & TW_TL_CAP_INLINE_SEND) ? 0 : TW_REL_AM_MASK;
    up.eager_am_ids = 0; /* rel sends frames of its own, never zero-copy */
    up.am_class = tw_rel_am_class;
    tw_tl_bind(iface, &up);
}

tw_status_t tw_rel_wrap(tw_tl_iface_t *const *paths, unsigned n, const tw_tl_params_t *params,
                        const tw_rel_opts_t *opts, tw_tl_iface_t **iface_p)
{
    tw_rel_t *rel = tw_calloc(1, sizeof(*rel));
    uint32_t caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY;
    tw_status_t st = TW_ERR_NOMEM;

    if (rel == NULL) {
        return TW_ERR_NOMEM;
    }
    rel->timer_fd = -1;
    st = tw_rel_configure(rel, paths, n, opts);
    if (st != TW_OK) {
        goto err;
    }
    st = TW_ERR_NOMEM;
    rel->clock = opts != NULL && opts->clock != NULL ? opts->clock : tw_rel_monotonic;
    rel->rank = params->rank;
    rel->size = params->size;
    rel->pe = params->pe;
    atomic_init(&rel->next_due, UINT64_MAX);
    atomic_init(&rel->armed_at, UINT64_MAX);
    atomic_flag_clear(&rel->in_pass);
    atomic_init(&rel->drain_wanted, false);
    atomic_init(&rel->leaving, false);
    tw_mutex_init(&rel->arm_lock, TW_LOCK_RANK_REL_ARM, "rel timer");
    atomic_init(&rel->logged, 0);
    do {
        if (getrandom(&rel->epoch, sizeof(rel->epoch), 0) != (ssize_t)sizeof(rel->epoch)) {
            rel->epoch = (uint32_t)(tw_time_ns() ^ ((uint64_t)getpid() << 16));
        }
    } while (rel->epoch == 0);
    rel->stats = tw_stats_create("rel", tw_rel_stat_descs, TW_REL_STAT_COUNT);
    rel->peers = tw_calloc((size_t)rel->size, sizeof(*rel->peers));
    if (rel->stats == NULL || rel->peers == NULL) {
        goto err;
    }
    for (int i = 0; i < rel->size; i++) {
        tw_rel_peer_t *p = &rel->peers[i];
        tw_mutex_init(&p->lock, TW_LOCK_RANK_REL_PEER, "rel peer");
        p->snd_una = p->snd_nxt = p->rcv_nxt = (uint32_t)rel->cfg.seq_start;
        p->epoch = i == rel->rank ? rel->epoch : 0;
    }
    tw_stats_set_source(rel->stats, tw_rel_stats_source, rel);
    rel->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (rel->timer_fd < 0) {
        tw_error("rel", "cannot make a timer: %s", strerror(errno));
        st = TW_ERR_TRANSPORT;
        goto err;
    }
    st = tw_pe_watch(rel->pe, rel->timer_fd); /* logs its failure */
    if (st != TW_OK) {
        goto err;
    }
    /* Nothing fails from here on: the paths become rel's. */
    rel->npaths = n;
    for (unsigned g = 0; g < n; g++) {
        tw_rel_take_path(rel, g, paths[g], params);
        caps |= paths[g]->caps & TW_TL_CAP_POLL;
    }
    tw_tl_wrapper_init(&rel->super, &tw_rel_ops, params, caps, rel->stats, rel->inner, n);
    rel->super.attr = (tw_tl_attr_t){
        .max_short = TW_REL_MAX_SHORT, .max_hdr = TW_REL_MAX_UHDR, .max_zcopy = TW_REL_MAX_MSG};
    tw_rel_find_paths(rel, rel->rank); /* our own: no address exchange */
    *iface_p = &rel->super;
    return TW_OK;

err:
    tw_rel_destroy(rel);
    return st;
}

uint32_t tw_rel_epoch(const tw_tl_iface_t *iface)
{
    return ((const tw_rel_t *)(const void *)iface)->epoch;
}

#if TW_TESTING
void tw_rel_inject(tw_tl_iface_t *iface, unsigned index, int src, uint8_t am_id, const void *hdr,
                   size_t hdr_len, const void *data, size_t len)
{
    tw_rel_t *rel = (tw_rel_t *)iface;

    tw_rel_recv_cb(&rel->paths[index], src, am_id, hdr, hdr_len, data, len);
}
#endif

/* Fail what is left (TW_ERR_CANCELED) and free: after the paths closed. */
static void tw_rel_destroy(tw_rel_t *rel)
{
    if (rel == NULL) {
        return;
    }
    if (rel->peers != NULL) {
        for (int peer = 0; peer < rel->size; peer++) {
            tw_rel_peer_t *p = &rel->peers[peer];
            tw_rel_deferred_t todo = {0};
            tw_mutex_lock(&p->lock);
            p->left = true; /* no report: we are the ones leaving */
            tw_rel_peer_fail(rel, p, peer, "finalized", &todo);
            while (p->dq_head != NULL) {
                tw_rel_held_t *d = p->dq_head;
                p->dq_head = d->next;
                tw_rel_held_free(d);
            }
            while (p->pool != NULL) {
                tw_rel_smsg_t *m = p->pool;
                p->pool = m->next;
                tw_rel_smsg_free(m);
            }
            tw_mutex_unlock(&p->lock);
            for (tw_rel_smsg_t *m = todo.done; m != NULL; m = m->next) {
                m->status = TW_ERR_CANCELED;
            }
            todo.report = false;
            tw_rel_finish(rel, peer, &todo);
            tw_mutex_destroy(&p->lock);
        }
        tw_free(rel->peers, (size_t)rel->size * sizeof(*rel->peers));
    }
    if (rel->timer_fd >= 0) {
        tw_pe_unwatch(rel->pe, rel->timer_fd);
        close(rel->timer_fd);
    }
    tw_mutex_destroy(&rel->arm_lock);
    if (rel->stats != NULL) {
        tw_stats_destroy(rel->stats);
    }
    tw_free(rel, sizeof(*rel));
}

static void tw_rel_iface_close(tw_tl_iface_t *iface)
{
    tw_rel_destroy((tw_rel_t *)iface);
}
