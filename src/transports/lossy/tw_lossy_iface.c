/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The lossy transport's settings (TW_FAULT*), wrap and close. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "transports/lossy/tw_lossy_int.h"

static const tw_stat_desc_t tw_lossy_stat_descs[TW_LOSSY_STAT_COUNT] = {
    [TW_LOSSY_STAT_DROPPED] = {"dropped", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_CORRUPTED] = {"corrupted", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_DUPLICATED] = {"duplicated", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_REORDERED] = {"reordered", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_DELAYED] = {"delayed", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_BLACKHOLED] = {"blackholed", TW_STAT_COUNTER},
    [TW_LOSSY_STAT_KILLED_PATHS] = {"killed_paths", TW_STAT_COUNTER},
};

tw_status_t tw_lossy_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

/* ---- settings ---------------------------------------------------------------------- */

typedef struct tw_lossy_cfg {
    char fault[TW_CFG_STRLEN]; /* TW_FAULT: the spec (tw_fault.h) */
    char on[TW_CFG_STRLEN];    /* TW_FAULT_ON: which transports (empty: all) */
    char ranks[TW_CFG_STRLEN]; /* TW_FAULT_RANKS: in which ranks (empty: all) */
} tw_lossy_cfg_t;

static const tw_cfg_entry_t tw_lossy_cfg_entries[] = {
    {.name = "TW_FAULT",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "testing: seeded fault injection on the transports (syntax in "
             "src/transports/lossy/tw_fault.h), e.g. "
             "drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=42 or tx.ack.drop=1 or "
             "blackhole=200ms,blackhole_for=1s or blackhole_after=500 or kill=300ms",
     .offset = offsetof(tw_lossy_cfg_t, fault)},
    {.name = "TW_FAULT_ON",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "testing: transports TW_FAULT applies to (comma list); empty = every one",
     .offset = offsetof(tw_lossy_cfg_t, on)},
    {.name = "TW_FAULT_RANKS",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "testing: ranks in which TW_FAULT applies (comma list); empty = every one",
     .offset = offsetof(tw_lossy_cfg_t, ranks)},
};

const tw_cfg_table_t tw_lossy_cfg_table = {
    .module = "lossy",
    .entries = tw_lossy_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_lossy_cfg_entries),
};

/* Read TW_FAULT*: *@p any_p says whether there is anything to inject.
 * Every transport and rank the lists name must exist: a typo would
 * silently inject nothing. */
static tw_status_t tw_lossy_settings(const tw_tl_params_t *params, tw_lossy_cfg_t *c,
                                     tw_fault_spec_t *spec, bool *any_p)
{
    char why[128], buf[TW_CFG_STRLEN];
    char *save = NULL, *end;

    *any_p = false;
    tw_cfg_set_defaults(&tw_lossy_cfg_table, c);
    if (tw_cfg_apply_env(&tw_lossy_cfg_table, c) != TW_OK) {
        return TW_ERR_INVALID;
    }
    if (c->fault[0] == '\0') {
        return TW_OK;
    }
    if (tw_fault_parse(c->fault, spec, why, sizeof(why)) != TW_OK) {
        tw_error("init", "TW_FAULT=%s: %s", c->fault, why);
        return TW_ERR_INVALID;
    }
    snprintf(buf, sizeof(buf), "%s", c->on);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        if (tw_tl_find(t) == NULL) {
            tw_error("init", "TW_FAULT_ON=%s: no transport '%s'", c->on, t);
            return TW_ERR_INVALID;
        }
    }
    snprintf(buf, sizeof(buf), "%s", c->ranks);
    save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        long r = strtol(t, &end, 10);
        if (*end != '\0' || r < 0 || r >= params->size) {
            tw_error("init", "TW_FAULT_RANKS=%s: '%s' is not a rank of this job of %d", c->ranks, t,
                     params->size);
            return TW_ERR_INVALID;
        }
    }
    *any_p = spec->any;
    return TW_OK;
}

tw_status_t tw_lossy_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                bool *wants_p)
{
    tw_lossy_cfg_t c;
    tw_fault_spec_t spec;
    char rank[16];
    bool any;
    tw_status_t st = tw_lossy_settings(params, &c, &spec, &any);

    snprintf(rank, sizeof(rank), "%d", params->rank);
    *wants_p = st == TW_OK && any && tw_cfg_list_has(c.on, inner->ops->name, NULL) &&
               tw_cfg_list_has(c.ranks, rank, NULL);
    return st;
}

tw_status_t tw_lossy_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                               const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    tw_lossy_cfg_t c;
    tw_fault_spec_t spec;
    bool any;
    tw_status_t st;

    if (n != 1) {
        tw_error("lossy", "lossy wraps one transport at a time, not %u", n);
        return TW_ERR_INVALID;
    }
    st = tw_lossy_settings(params, &c, &spec, &any);
    if (st != TW_OK) {
        return st;
    }
    tw_info("init", "transport %s: fault injection TW_FAULT=%s", inner[0]->ops->name, c.fault);
    return tw_lossy_wrap(inner[0], params, &spec, iface_p);
}

/* ---- open --------------------------------------------------------------------------- */

tw_status_t tw_lossy_wrap(tw_tl_iface_t *inner, const tw_tl_params_t *params,
                          const tw_fault_spec_t *spec, tw_tl_iface_t **iface_p)
{
    tw_lossy_iface_t *lossy;
    char name[64];
    tw_status_t st;

    if (inner == NULL || params == NULL || spec == NULL || iface_p == NULL || params->size < 1 ||
        params->recv == NULL || !tw_lossy_spec_ok(spec)) {
        tw_error("lossy", "tw_lossy_wrap: NULL argument, no recv callback or a bad spec");
        return TW_ERR_INVALID;
    }
    lossy = tw_calloc(1, sizeof(*lossy));
    if (lossy == NULL) {
        tw_error("lossy", "cannot allocate a lossy iface for %s", inner->ops->name);
        return TW_ERR_NOMEM;
    }
    lossy->paths = tw_calloc((size_t)params->size, sizeof(*lossy->paths));
    if (lossy->paths == NULL) {
        tw_error("lossy", "cannot allocate fault streams for %d peers", params->size);
        st = TW_ERR_NOMEM;
        goto err_free;
    }
    snprintf(name, sizeof(name), "lossy:%s", inner->ops->name);
    lossy->fstats = tw_stats_create(name, tw_lossy_stat_descs, TW_LOSSY_STAT_COUNT);
    if (lossy->fstats == NULL) {
        tw_error("lossy", "%s: cannot allocate counters", name);
        st = TW_ERR_NOMEM;
        goto err_paths;
    }
    lossy->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (lossy->timer_fd < 0) {
        tw_error("lossy", "%s: cannot create the kill timer (timerfd_create: %m)", name);
        st = TW_ERR_TRANSPORT;
        goto err_stats;
    }
    if (tw_mutex_init(&lossy->lock, TW_LOCK_RANK_LOSSY, "fault injector") != TW_OK) {
        tw_error("lossy", "%s: cannot initialise a mutex", name);
        st = TW_ERR_NOMEM;
        goto err_timer;
    }
    st = tw_pe_watch(inner->pe, lossy->timer_fd); /* logs its failure */
    if (st != TW_OK) {
        goto err_mutex;
    }
    lossy->timer_watched = true;
    lossy->spec = *spec;
    for (int peer = 0; peer < params->size; peer++) {
        for (int dir = 0; dir < TW_FAULT_NDIRS; dir++) {
            tw_fault_rng_init(&lossy->paths[peer].rng[dir], spec->seed, params->rank, peer,
                              (tw_fault_dir_t)dir);
        }
    }
    lossy->held_tail = &lossy->held;
    lossy->done_tail = &lossy->done;
    atomic_init(&lossy->killed, false);
    atomic_init(&lossy->kill_at, UINT64_MAX);
    lossy->name = inner->name;
    lossy->inner = inner;
    /* It runs where the inner runs, and does what the inner does. */
    tw_tl_wrapper_init(&lossy->super, &tw_lossy_ops, params, inner->caps, lossy->fstats,
                       &lossy->inner, 1);
    lossy->super.name = inner->name;
    lossy->super.pe = inner->pe;
    lossy->super.attr = inner->attr;
    tw_lossy_bind_inner(lossy, params);
    lossy->t0 = tw_time_ns();
    tw_mutex_lock(&lossy->lock);
    tw_lossy_arm_locked(lossy, spec->kill_ns);
    tw_mutex_unlock(&lossy->lock);
    tw_debug("lossy",
             "%s wrapped with faults (seed %" PRIu64 ", blackhole %" PRIu64 " ns for %" PRIu64
             " ns, kill %" PRIu64 " ns)",
             inner->ops->name, spec->seed, spec->blackhole_ns, spec->blackhole_len_ns,
             spec->kill_ns);
    *iface_p = &lossy->super;
    return TW_OK;

err_mutex:
    tw_mutex_destroy(&lossy->lock);
err_timer:
    close(lossy->timer_fd);
err_stats:
    tw_stats_destroy(lossy->fstats);
err_paths:
    tw_free(lossy->paths, (size_t)params->size * sizeof(*lossy->paths));
err_free:
    tw_free(lossy, sizeof(*lossy));
    return st;
}

/* After the engine stopped, and after the inner closed (tw_tl_close):
 * what it still delivered came through our hooks; now what we hold is
 * dropped (a zero-copy frame held by reference completes TW_ERR_CANCELED)
 * and deferred completions run. */
void tw_lossy_iface_close(tw_tl_iface_t *iface)
{
    tw_lossy_iface_t *lossy = tw_lossy_of(iface);
    tw_lossy_frame_t *held;
    tw_lossy_done_t *done;

    if (lossy->timer_watched) {
        tw_pe_unwatch(lossy->super.pe, lossy->timer_fd);
    }
    close(lossy->timer_fd);
    tw_mutex_lock(&lossy->lock);
    held = lossy->held;
    done = lossy->done;
    lossy->held = NULL;
    lossy->done = NULL;
    tw_mutex_unlock(&lossy->lock);
    tw_lossy_discard(held, TW_ERR_CANCELED);
    tw_lossy_complete(done);
    tw_mutex_destroy(&lossy->lock);
    tw_stats_destroy(lossy->fstats);
    tw_free(lossy->paths, (size_t)lossy->super.size * sizeof(*lossy->paths));
    tw_free(lossy, sizeof(*lossy));
}

#if TW_TESTING
void tw_lossy_set_spec(tw_tl_iface_t *iface, const tw_fault_spec_t *spec)
{
    tw_lossy_iface_t *lossy = tw_lossy_of(iface);

    if (!tw_lossy_is(iface) || spec == NULL || !tw_lossy_spec_ok(spec)) {
        tw_error("lossy", "tw_lossy_set_spec: not a lossy iface, or a bad spec");
        return;
    }
    tw_mutex_lock(&lossy->lock);
    lossy->spec = *spec;
    tw_lossy_arm_locked(lossy, spec->kill_ns);
    tw_mutex_unlock(&lossy->lock);
}
#endif

tw_stats_t *tw_lossy_stats(const tw_tl_iface_t *iface)
{
    return tw_lossy_is(iface) ? ((const tw_lossy_iface_t *)(const void *)iface)->fstats : NULL;
}

tw_tl_iface_t *tw_lossy_inner(const tw_tl_iface_t *iface)
{
    return tw_lossy_is(iface) ? ((const tw_lossy_iface_t *)(const void *)iface)->inner : NULL;
}
