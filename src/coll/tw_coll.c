/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The context's part of the collectives: tunables, the group table (which
 * turns the rid in a tag or a control message back into a group), failure
 * (a member down, a revocation), sends and their staged copies, and
 * engine 0's list of nonblocking operations.
 *
 * Locks: `lock` guards the table; tw_group_fail runs under it from the
 * control hook and peer_down (engines) and pushes one completion onto the
 * group's CQ, whose slot was reserved when the group was made -- so a
 * group is taken out of the table before its CQ goes.
 */
#include "coll/tw_coll.h"

#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "coll/tw_coll_int.h"
#include "core/tw_bytes.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"

static const char *const tw_coll_barriers[] = {"auto", "flat", "gather", NULL};

static const tw_cfg_entry_t tw_coll_cfg_entries[] = {
    {.name = "TW_COLL_CREATE_TIMEOUT",
     .type = TW_CFG_DURATION,
     .defval = "60s",
     .help = "collectives: how long tw_group_create waits for every member to call it "
             "(members that disagree on the rank list or key never meet): then TW_ERR_TIMEOUT",
     .offset = offsetof(tw_coll_cfg_t, create_timeout_ns)},
    {.name = "TW_COLL_SLOTS",
     .type = TW_CFG_INT,
     .defval = "16",
     .min = 0,
     .max = 1024,
     .help = "collectives: slot sets in each node's shared segment, one per group with "
             "several members on the node (set 0: the world group); a group that finds none "
             "free runs point to point there; 0 = no shared memory for collectives (nor "
             "without the shm transport)",
     .offset = offsetof(tw_coll_cfg_t, slots)},
    {.name = "TW_COLL_SPIN",
     .type = TW_CFG_DURATION,
     .defval = "20us",
     .help = "collectives: how long a blocking collective spins on shared memory before it "
             "yields the CPU (for 1 ms), then sleeps on a futex; no spinning when the node's "
             "ranks outnumber its CPUs, and none for the next 8 waits after a spin that ran "
             "out (the machine may be busier than the node's count shows)",
     .offset = offsetof(tw_coll_cfg_t, spin_ns)},
    {.name = "TW_COLL_CMA",
     .type = TW_CFG_SIZE,
     .defval = "64k",
     .help = "collectives: bcasts of at least this many bytes among the ranks of a node go "
             "with one copy, each member reading the root's buffer (process_vm_readv), where "
             "every rank of the node may read the others' memory (checked at tw_init); smaller "
             "ones, and all with 0, through the shared cells",
     .offset = offsetof(tw_coll_cfg_t, cma_min)},
    {.name = "TW_COLL_CMA_ALLREDUCE",
     .type = TW_CFG_SIZE,
     .defval = "512k",
     .help = "collectives: allreduces of at least this many bytes among the ranks of a node go "
             "with one copy (process_vm_readv, where TW_COLL_CMA is allowed and not 0): member "
             "j reads slice j of every send buffer and reduces it, then everyone reads the "
             "slices' results; smaller ones, all on a node whose ranks outnumber its CPUs, and "
             "all with 0, through the shared cells. The node leader's value holds for its node",
     .offset = offsetof(tw_coll_cfg_t, cma_ar_min)},
    {.name = "TW_COLL_RSAG",
     .type = TW_CFG_SIZE,
     .defval = "512k",
     .help = "collectives: allreduces of at least this many bytes, point to point (between "
             "node representatives, or among all members without shared memory), go by "
             "Rabenseifner's algorithm (reduce-scatter by recursive halving, then allgather by "
             "recursive doubling: each member sends about 2 vectors and reduces about 1 in "
             "all, instead of 1 of each per round, in twice the rounds); smaller ones, those "
             "with fewer elements than the power of two at or below the member count, and all "
             "with 0, by recursive doubling. The same bits either way; must be the same on "
             "every rank (tw_init fails otherwise)",
     .offset = offsetof(tw_coll_cfg_t, rsag_min)},
    {.name = "TW_COLL_BARRIER",
     .type = TW_CFG_ENUM,
     .defval = "auto",
     .enum_names = tw_coll_barriers,
     .help = "collectives: the barrier among more than 2 members of a group on a node, through "
             "shared memory: flat (each member announces itself and waits for all the others: "
             "one step), gather (the group's first member on the node waits for the others "
             "and releases them: it leaves first, so a bcast or reduce from it that follows "
             "finds the others arriving after its data, not waiting for it) or auto (gather "
             "where the node's ranks outnumber its CPUs, flat otherwise). The node leader's "
             "value holds for its node",
     .offset = offsetof(tw_coll_cfg_t, barrier)},
};

const tw_cfg_table_t tw_coll_cfg_table = {
    .module = "coll",
    .entries = tw_coll_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_coll_cfg_entries),
};

static const tw_stat_desc_t tw_coll_stat_descs[TW_COLL_STAT_COUNT] = {
    [TW_COLL_STAT_OPS] = {"collectives", TW_STAT_COUNTER},
    [TW_COLL_STAT_NB] = {"nonblocking", TW_STAT_COUNTER},
    [TW_COLL_STAT_FAILED] = {"failed", TW_STAT_COUNTER},
    [TW_COLL_STAT_SENT] = {"sent", TW_STAT_COUNTER},
    [TW_COLL_STAT_STAGED] = {"staged", TW_STAT_COUNTER},
    [TW_COLL_STAT_DIRECT] = {"direct", TW_STAT_COUNTER},
    [TW_COLL_STAT_REVOKES] = {"revokes", TW_STAT_COUNTER},
    [TW_COLL_STAT_GROUPS] = {"groups", TW_STAT_COUNTER},
    [TW_COLL_STAT_BUSY] = {"busy", TW_STAT_COUNTER},
};

/* Sends complete here; a staged copy is freed when its send completes. */
#define TW_COLL_SEND_CQ_DEPTH 65536u

/* A staged copy: its length first, so it can be freed from the pointer. */
typedef struct tw_coll_stage {
    size_t len;
    unsigned char data[];
} tw_coll_stage_t;

/* ---- the group table ---------------------------------------------------- */

tw_group_t *tw_coll_lookup(tw_coll_t *coll, uint32_t rid)
{
    unsigned index = rid & 0xFFFFu;

    if (index >= coll->table_len || coll->gen[index] != (uint16_t)(rid >> 16)) {
        return NULL;
    }
    return coll->table[index];
}

tw_status_t tw_coll_table_add(tw_coll_t *coll, tw_group_t *g, uint32_t *rid_p)
{
    tw_status_t st = TW_OK;
    unsigned i;

    tw_mutex_lock(&coll->lock);
    /* Entry 0 is the world's. */
    for (i = 1; i < coll->table_len && coll->table[i] != NULL; i++) {
    }
    if (i == coll->table_len) {
        unsigned len = coll->table_len * 2;
        tw_group_t **t = len <= TW_COLL_TABLE_MAX ? tw_calloc(len, sizeof(*t)) : NULL;
        uint16_t *gen = t != NULL ? tw_calloc(len, sizeof(*gen)) : NULL;
        if (gen == NULL) {
            tw_free(t, len * sizeof(*t));
            tw_mutex_unlock(&coll->lock);
            tw_error("coll", "no room for another group (%u live)", coll->table_len - 1);
            return TW_ERR_NOMEM;
        }
        memcpy(t, coll->table, coll->table_len * sizeof(*t));
        memcpy(gen, coll->gen, coll->table_len * sizeof(*gen));
        tw_free(coll->table, coll->table_len * sizeof(*t));
        tw_free(coll->gen, coll->table_len * sizeof(*gen));
        coll->table = t;
        coll->gen = gen;
        coll->table_len = len;
    }
    coll->table[i] = g;
    g->index = i;
    *rid_p = TW_COLL_RID(i, coll->gen[i]);
    tw_mutex_unlock(&coll->lock);
    return st;
}

void tw_coll_table_del(tw_coll_t *coll, tw_group_t *g)
{
    tw_mutex_lock(&coll->lock);
    if (g->index < coll->table_len && coll->table[g->index] == g) {
        coll->table[g->index] = NULL;
        coll->gen[g->index]++; /* late messages for it now name nothing */
    }
    tw_mutex_unlock(&coll->lock);
}

/* ---- failure ------------------------------------------------------------- */

void tw_group_fail(tw_group_t *g, tw_status_t st)
{
    int expected = 0;
    bool no = false;

    if (atomic_compare_exchange_strong_explicit(&g->failed, &expected, (int)st,
                                                memory_order_acq_rel, memory_order_acquire)) {
        tw_cshm_abort(g); /* its members on this node, wherever they wait */
    }
    /* Wake whoever waits on the group's CQ: one completion, against the
     * slot reserved when the group was made. */
    if (atomic_compare_exchange_strong_explicit(&g->woken, &no, true, memory_order_acq_rel,
                                                memory_order_acquire)) {
        tw_completion_t c = {
            .user = NULL, .status = (tw_status_t)atomic_load(&g->failed), .op = TW_OP_COLL};
        tw_cq_push(g->cq, &c);
    }
}

static bool tw_group_has(const tw_group_t *g, int rank)
{
    for (int i = 0; i < g->n; i++) {
        if (g->ranks[i] == rank) {
            return true;
        }
    }
    return false;
}

bool tw_coll_is_down(tw_coll_t *coll, int rank)
{
    return atomic_load_explicit(&coll->down[rank], memory_order_acquire) != 0;
}

void tw_coll_peer_down(tw_coll_t *coll, int peer, bool failed)
{
    unsigned nfailed = 0;

    if (peer < 0 || peer >= coll->p.size) {
        return;
    }
    atomic_store_explicit(&coll->down[peer], 1, memory_order_release);
    if (!failed) {
        return;
    }
    tw_mutex_lock(&coll->lock);
    for (unsigned i = 0; i < coll->table_len; i++) {
        tw_group_t *g = coll->table[i];
        if (g != NULL && tw_group_has(g, peer)) {
            tw_group_fail(g, TW_ERR_PEER_FAILED);
            nfailed++;
        }
    }
    tw_mutex_unlock(&coll->lock);
    if (nfailed > 0) {
        tw_debug("coll", "rank %d is gone: %u group(s) holding it failed", peer, nfailed);
    }
}

/* A control message (engine): a member revoked a group of ours. */
static void tw_coll_ctl(void *arg, int src, uint64_t tag, const void *data, size_t len)
{
    tw_coll_t *coll = arg;
    uint8_t kind = 0;
    tw_group_t *g;

    if (len >= 1) {
        memcpy(&kind, data, 1);
    }
    if (kind != TW_COLL_CTL_REVOKE) {
        tw_warn("coll", "dropped a control message of unknown kind %u from rank %d", kind, src);
        return;
    }
    tw_stats_inc(coll->stats, TW_COLL_STAT_REVOKES);
    tw_mutex_lock(&coll->lock);
    g = tw_coll_lookup(coll, TW_COLL_TAG_RID(tag));
    if (g != NULL && tw_group_has(g, src)) {
        tw_group_fail(g, TW_ERR_PEER_FAILED);
    }
    tw_mutex_unlock(&coll->lock);
}

/* ---- sending -------------------------------------------------------------- */

void tw_coll_reap_sends(tw_coll_t *coll)
{
    tw_completion_t c[32];
    int n;

    while ((n = tw_cq_take(coll->send_cq, c, (int)TW_ARRAY_SIZE(c))) > 0) {
        for (int i = 0; i < n; i++) {
            tw_coll_stage_t *s = c[i].user;
            if (s != NULL) {
                tw_free(s, sizeof(*s) + s->len);
            }
        }
    }
}

tw_status_t tw_coll_send(tw_coll_t *coll, int dst, uint64_t tag, const void *buf, size_t len)
{
    tw_coll_stage_t *s = NULL;
    tw_status_t st;

    if (len <= TW_INJECT_MAX) {
        /* Copied at once, no completion to push and reap: a barrier's
         * send returns that much sooner to look for the peer's. */
        st = tw_msg_coll_inject(coll->p.msg, dst, tag, buf, len);
        if (st == TW_OK) {
            tw_stats_inc(coll->stats, TW_COLL_STAT_SENT);
        }
        return st;
    }
    if (len > tw_msg_eager_max(coll->p.msg, dst)) {
        /* The transport would send from the buffer until the receiver
         * pulls it; a copy lets the operation end (or fail) whenever. */
        s = tw_malloc(sizeof(*s) + len);
        if (s == NULL) {
            return TW_ERR_NOMEM;
        }
        s->len = len;
        memcpy(s->data, buf, len);
        buf = s->data;
    }
    st = tw_msg_coll_send(coll->p.msg, dst, tag, buf, len, coll->send_cq, s);
    if (st == TW_ERR_AGAIN) {
        tw_coll_reap_sends(coll);
        st = tw_msg_coll_send(coll->p.msg, dst, tag, buf, len, coll->send_cq, s);
    }
    if (st != TW_OK) {
        if (s != NULL) {
            tw_free(s, sizeof(*s) + len);
        }
        return st;
    }
    tw_stats_inc(coll->stats, TW_COLL_STAT_SENT);
    if (s != NULL) {
        tw_stats_inc(coll->stats, TW_COLL_STAT_STAGED);
    }
    return TW_OK;
}

/* ---- nonblocking operations on engine 0 ----------------------------------- */

void tw_coll_nb_finish(tw_coll_t *coll, tw_coll_op_t *op, tw_status_t st)
{
    tw_completion_t c = {.user = op->user,
                         .status = st,
                         .op = TW_OP_COLL,
                         .peer = op->g->me,
                         .length = st == TW_OK ? tw_coll_op_length(op) : 0};
    tw_cq_t *cq = op->cq;

    tw_coll_op_release(op);
    tw_stats_inc(coll->stats, TW_COLL_STAT_OPS);
    tw_stats_inc(coll->stats, TW_COLL_STAT_NB);
    if (st != TW_OK) {
        tw_stats_inc(coll->stats, TW_COLL_STAT_FAILED);
    }
    atomic_store_explicit(&op->g->busy, false, memory_order_release);
    tw_cq_push(cq, &c);
}

static void tw_coll_append_cmd(void *arg, void *data, uint64_t u64)
{
    tw_coll_t *coll = arg;
    tw_coll_op_t *op = data;
    tw_group_t *g = op->g;

    (void)u64;
    tw_pe_assert_owner(coll->p.pe);
    /* Completions of its receives may be pushed by another engine: wake
     * this one through the CQ's fd. */
    if (g->cq_fd < 0 && !coll->p.manual) {
        g->cq_fd = tw_cq_fd(g->cq);
        if (g->cq_fd >= 0 && tw_pe_watch(coll->p.pe, g->cq_fd) != TW_OK) {
            g->cq_fd = -1;
        }
    }
    op->next = coll->active;
    coll->active = op;
}

/* tw_coll_append_cmd as the engine's owner for a moment (try_call). */
static int tw_coll_append_now(void *arg)
{
    tw_coll_op_t *op = arg;

    tw_coll_append_cmd(op->g->coll, op, 0);
    return 1;
}

void tw_coll_submit(tw_coll_t *coll, tw_coll_op_t *op)
{
    tw_pe_cmd_t cmd = {.fn = tw_coll_append_cmd, .arg = coll, .data = op};

    atomic_fetch_add_explicit(&coll->nactive, 1, memory_order_relaxed);
    /* Into the list now if the engine is idle: a sleeping engine need not
     * wake for it (threads that test move it on, and so does the engine
     * when its timer or an arrival wakes it); else through its ring. */
    if (tw_pe_try_call(coll->p.pe, tw_coll_append_now, op) == 0) {
        tw_pe_hand_over(coll->p.pe, &cmd);
    }
}

/* A nonblocking operation that waits on the slot set wakes engine 0
 * every TW_COLL_TIMER_NS (writers there wake sleeping threads, not
 * engines); threads that test or wait (tw_progress) move it on between. */
#define TW_COLL_TIMER_NS 20000

static void tw_coll_timer(tw_coll_t *coll, bool on)
{
    struct itimerspec its = {0};

    if (coll->timer_fd < 0 || coll->timer_armed == on) {
        return;
    }
    if (on) {
        its.it_value.tv_nsec = TW_COLL_TIMER_NS;
        its.it_interval.tv_nsec = TW_COLL_TIMER_NS;
    }
    if (timerfd_settime(coll->timer_fd, 0, &its, NULL) == 0) {
        coll->timer_armed = on;
    }
}

/* Engine 0's progress function: drive every nonblocking operation. */
static int tw_coll_progress(void *arg)
{
    tw_coll_t *coll = arg;
    tw_coll_op_t **pp = &coll->active;
    bool shm_wait = false;
    int events = 0;

    if (coll->timer_armed) {
        uint64_t ticks;
        (void)!read(coll->timer_fd, &ticks, sizeof(ticks));
    }
    tw_coll_reap_sends(coll);
    while (*pp != NULL) {
        tw_coll_op_t *op = *pp;
        if (atomic_load_explicit(&coll->stopping, memory_order_acquire) && op->status == TW_OK) {
            op->status = TW_ERR_CANCELED;
        }
        tw_status_t st = tw_coll_exec(op, NULL, 0);
        if (st == TW_ERR_AGAIN) {
            /* A refused send is retried on the next pass: stay awake. */
            events += op->send_blocked;
            shm_wait |= op->shm_waiting;
            pp = &op->next;
            continue;
        }
        *pp = op->next;
        tw_coll_nb_finish(coll, op, st);
        atomic_fetch_sub_explicit(&coll->nactive, 1, memory_order_relaxed);
        events++;
    }
    tw_coll_timer(coll, shm_wait);
    return events;
}

int tw_coll_poll(tw_coll_t *coll)
{
    if (atomic_load_explicit(&coll->nactive, memory_order_relaxed) == 0) {
        return 0;
    }
    return tw_pe_try_call(coll->p.pe, tw_coll_progress, coll);
}

/* ---- life ------------------------------------------------------------------ */

tw_status_t tw_coll_create(const tw_coll_params_t *params, tw_coll_t **coll_p)
{
    tw_coll_t *coll = tw_calloc(1, sizeof(*coll));
    tw_cq_params_t cqp = params->cq;
    tw_status_t st;

    if (coll == NULL) {
        return TW_ERR_NOMEM;
    }
    coll->p = *params;
    tw_cfg_set_defaults(&tw_coll_cfg_table, &coll->cfg);
    st = tw_cfg_apply_env(&tw_coll_cfg_table, &coll->cfg);
    if (st != TW_OK) {
        tw_free(coll, sizeof(*coll));
        return TW_ERR_INVALID;
    }
    tw_mutex_init(&coll->lock, TW_LOCK_RANK_COLL_TABLE, "collective groups");
    coll->timer_fd = -1;
    coll->down = tw_calloc((size_t)params->size, sizeof(*coll->down));
    atomic_init(&coll->nactive, 0);
    atomic_init(&coll->stopping, false);
    coll->stats = tw_stats_create("coll", tw_coll_stat_descs, TW_COLL_STAT_COUNT);
    coll->table_len = 64;
    coll->table = tw_calloc(coll->table_len, sizeof(*coll->table));
    coll->gen = tw_calloc(coll->table_len, sizeof(*coll->gen));
    cqp.depth = TW_COLL_SEND_CQ_DEPTH;
    st = coll->stats != NULL && coll->table != NULL && coll->gen != NULL && coll->down != NULL
             ? TW_OK
             : TW_ERR_NOMEM;
    if (st == TW_OK) {
        st = tw_cq_open(&cqp, &coll->send_cq);
    }
    if (st == TW_OK) {
        coll->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (coll->timer_fd < 0) {
            tw_warn("coll", "timerfd_create failed (%m): nonblocking collectives within a node "
                            "progress only when the engine is awake anyway");
        }
        st = tw_pe_add(params->pe, tw_coll_progress, coll, coll->timer_fd);
    }
    if (st != TW_OK) {
        tw_coll_destroy(coll);
        return st;
    }
    tw_msg_coll_set_ctl(params->msg, tw_coll_ctl, coll);
    *coll_p = coll;
    return TW_OK;
}

tw_status_t tw_coll_node_prepare(tw_coll_t *coll)
{
    return tw_cshm_node_prepare(coll);
}

size_t tw_coll_node_addr(const tw_coll_t *coll, void *buf, size_t room)
{
    return tw_cshm_node_addr(coll, buf, room);
}

int tw_coll_node_leader(const tw_coll_t *coll)
{
    return tw_cshm_node_leader(coll);
}

void tw_coll_node_attach(tw_coll_t *coll, const void *addr, size_t len)
{
    tw_cshm_node_attach(coll, addr, len);
}

size_t tw_coll_job_addr(const tw_coll_t *coll, void *buf, size_t room)
{
    if (room < 8) {
        return 0;
    }
    tw_put64(buf, (uint64_t)coll->cfg.rsag_min);
    return 8;
}

tw_status_t tw_coll_job_check(const tw_coll_t *coll, int peer, const void *addr, size_t len)
{
    uint64_t theirs;

    if (addr == NULL || len != 8) {
        tw_error("init", "rank %d published no collective settings (a different threadwire?)",
                 peer);
        return TW_ERR_INVALID;
    }
    theirs = tw_get64(addr);
    if (theirs != (uint64_t)coll->cfg.rsag_min) {
        tw_error("init",
                 "rank %d has TW_COLL_RSAG=%llu bytes and this rank %zu: set it alike on every "
                 "rank (the allreduce's algorithm, and so its messages, depend on it)",
                 peer, (unsigned long long)theirs, coll->cfg.rsag_min);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

tw_status_t tw_coll_node_setup(tw_coll_t *coll)
{
    return tw_cshm_node_setup(coll);
}

tw_status_t tw_coll_start(tw_coll_t *coll)
{
    int *ranks = tw_malloc((size_t)coll->p.size * sizeof(*ranks));
    tw_group_t *g = NULL;
    tw_status_t st;

    if (ranks == NULL) {
        return TW_ERR_NOMEM;
    }
    for (int i = 0; i < coll->p.size; i++) {
        ranks[i] = i;
    }
    st = tw_group_alloc(coll, ranks, coll->p.size, coll->p.rank, &g);
    tw_free(ranks, (size_t)coll->p.size * sizeof(*ranks));
    if (st != TW_OK) {
        return st;
    }
    /* Entry 0, generation 0 on every rank: its rids need no exchange. */
    g->world = true;
    g->index = 0;
    for (int i = 0; i < g->n; i++) {
        g->rids[i] = TW_COLL_RID(0, 0);
    }
    g->shm.slot = -1;
    tw_mutex_lock(&coll->lock);
    coll->table[0] = g;
    tw_mutex_unlock(&coll->lock);
    coll->world = g;
    return TW_OK;
}

void tw_coll_stop(tw_coll_t *coll)
{
    atomic_store_explicit(&coll->stopping, true, memory_order_release);
    /* A member whose collective failed may have sent for a round this
     * one never entered (the world group is never destroyed, so nothing
     * else purges it): its sender would wait out its finalize for it. */
    tw_msg_coll_close(coll->p.msg);
}

void tw_coll_destroy(tw_coll_t *coll)
{
    if (coll == NULL) {
        return;
    }
    /* Engines stopped and msg gone: what is left cannot progress. */
    while (coll->active != NULL) {
        tw_coll_op_t *op = coll->active;
        coll->active = op->next;
        tw_coll_nb_finish(coll, op, TW_ERR_CANCELED);
    }
    if (coll->table != NULL) {
        for (unsigned i = 0; i < coll->table_len; i++) {
            tw_group_t *g = coll->table[i];
            if (g != NULL) {
                tw_cshm_unbind(g);
                tw_group_free(g);
            }
        }
    }
    tw_cshm_node_teardown(coll);
    if (coll->timer_fd >= 0) {
        close(coll->timer_fd);
    }
    if (coll->send_cq != NULL) {
        tw_coll_reap_sends(coll);
        if (tw_cq_destroy(coll->send_cq) != TW_OK) {
            tw_warn("coll", "%u collective send(s) never completed", tw_cq_inflight(coll->send_cq));
        }
    }
    tw_free(coll->table, coll->table_len * sizeof(*coll->table));
    tw_free(coll->gen, coll->table_len * sizeof(*coll->gen));
    tw_free(coll->down, (size_t)coll->p.size * sizeof(*coll->down));
    tw_stats_destroy(coll->stats);
    tw_mutex_destroy(&coll->lock);
    tw_free(coll, sizeof(*coll));
}

tw_group_t *tw_coll_world(tw_coll_t *coll)
{
    return coll->world;
}

tw_stats_t *tw_coll_stats(tw_coll_t *coll)
{
    return coll->stats;
}
