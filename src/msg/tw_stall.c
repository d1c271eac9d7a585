/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The stall watchdog: the tick, the check, the listing (tw_stall.h). */
#include "msg/tw_stall.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "progress/tw_pe.h"

/* Epochs an operation must be old, and its peer quiet, to be stalled: it
 * was posted after the tick of its epoch, so three ticks later it is at
 * least two periods -- the limit -- old, and at most three. */
#define TW_STALL_EPOCHS 3u

struct tw_stall_visit {
    tw_stall_t *s;
    unsigned now;       /* the epoch of this walk */
    FILE *out;          /* listing: where; NULL: the tick */
    const char *indent; /* listing */
    unsigned count;     /* listing: lines written */
};

tw_status_t tw_stall_init(tw_stall_t *s, uint64_t warn_ns, int size, tw_stats_t *stats,
                          unsigned stat_id)
{
    *s = (tw_stall_t){
        .period_ns = warn_ns / 2, .size = size, .stats = stats, .stat_id = stat_id, .timer_fd = -1};
    atomic_init(&s->epoch, 0);
    atomic_init(&s->heard_any, 0);
    if (warn_ns == 0) {
        return TW_OK;
    }
    if (s->period_ns == 0) {
        s->period_ns = 1;
    }
    s->heard = tw_calloc((size_t)size, sizeof(*s->heard));
    if (s->heard == NULL) {
        return TW_ERR_NOMEM;
    }
    for (int i = 0; i < size; i++) {
        atomic_init(&s->heard[i], 0);
    }
    return TW_OK;
}

void tw_stall_cleanup(tw_stall_t *s)
{
    if (s->timer_fd >= 0) {
        close(s->timer_fd);
        s->timer_fd = -1;
    }
    tw_free(s->heard, (size_t)s->size * sizeof(*s->heard));
    s->heard = NULL;
}

tw_status_t tw_stall_add_walker(tw_stall_t *s, tw_stall_walk_fn_t fn, void *arg)
{
    if (s->nwalkers == TW_STALL_MAX_WALKERS) {
        return TW_ERR_INVALID;
    }
    s->walkers[s->nwalkers].fn = fn;
    s->walkers[s->nwalkers].arg = arg;
    s->nwalkers++;
    return TW_OK;
}

static void tw_stall_walk(tw_stall_visit_t *v)
{
    for (unsigned i = 0; i < v->s->nwalkers; i++) {
        v->s->walkers[i].fn(v->s->walkers[i].arg, v);
    }
}

/* "send to rank 1 tag 0x2a, 1048576 bytes over shm" */
static void tw_stall_describe(const tw_stall_desc_t *d, char *buf, size_t size)
{
    char peer[32], tag[40] = "";

    if (d->peer == TW_ANY_SOURCE) {
        snprintf(peer, sizeof(peer), "any rank");
    } else {
        snprintf(peer, sizeof(peer), "rank %d", d->peer);
    }
    if (d->has_tag) {
        snprintf(tag, sizeof(tag), " tag 0x%" PRIx64, d->tag);
    }
    const char *prep = d->prep;
    if (prep == NULL) {
        prep = strstr(d->op, "receive") != NULL ? "from" : "to";
    }
    snprintf(buf, size, "%s %s %s%s, %zu bytes%s%s", d->op, prep, peer, tag, d->len,
             d->tl != NULL ? " over " : "", d->tl != NULL ? d->tl : "");
}

void tw_stall_check(tw_stall_visit_t *v, tw_stall_mark_t *m, const tw_stall_desc_t *d)
{
    tw_stall_t *s = v->s;
    double over_s = (double)((v->now - m->epoch - 1u) * s->period_ns) / 1e9;
    char what[160];

    if (v->out != NULL) {
        if (m->warned) {
            tw_stall_describe(d, what, sizeof(what));
            fprintf(v->out, "%sstalled: %s, outstanding for over %.1f s: waits for %s\n", v->indent,
                    what, over_s, d->waits);
            v->count++;
        }
        return;
    }
    if (m->warned || v->now - m->epoch < TW_STALL_EPOCHS) {
        return;
    }
    unsigned heard = d->peer == TW_ANY_SOURCE || d->peer < 0 || d->peer >= s->size
                         ? atomic_load_explicit(&s->heard_any, memory_order_relaxed)
                         : atomic_load_explicit(&s->heard[d->peer], memory_order_relaxed);
    if (v->now - heard < TW_STALL_EPOCHS) {
        return; /* the peer is alive and busy: slow, not stalled */
    }
    m->warned = true;
    tw_stall_note(s, d, over_s);
}

void tw_stall_note(tw_stall_t *s, const tw_stall_desc_t *d, double over_s)
{
    char what[160];

    tw_stats_inc(s->stats, s->stat_id);
    tw_stall_describe(d, what, sizeof(what));
    tw_warn("stall",
            "%s, outstanding for over %.1f s with no sign of life from the peer: waits for %s "
            "(TW_STALL_WARN)",
            what, over_s, d->waits);
}

void tw_stall_print(tw_stall_t *s, FILE *out, const char *indent)
{
    tw_stall_visit_t v = {.s = s,
                          .now = atomic_load_explicit(&s->epoch, memory_order_relaxed),
                          .out = out,
                          .indent = indent};

    if (!tw_stall_on(s)) {
        fprintf(out, "%sstalls: not watched (TW_STALL_WARN=0)\n", indent);
        return;
    }
    tw_stall_walk(&v);
    if (v.count == 0) {
        fprintf(out, "%sstalled: none\n", indent);
    }
}

/* Engine 0's progress function: cheap on every pass (a clock read that
 * the pass has made already); at each period, the walk. */
static int tw_stall_progress(void *arg)
{
    tw_stall_t *s = arg;
    uint64_t now = tw_pe_pass_coarse_ns(s->pe), expirations;

    /* The coarse clock lags by a tick of the kernel's: accept a little
     * early, or the level-triggered timerfd would wake the engine again
     * and again until the clock catches up. */
    if (now + s->period_ns / 8 < s->next_ns) {
        return 0;
    }
    if (read(s->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN) {
        tw_warn("stall", "reading the watchdog's timer: %s", strerror(errno));
    }
    /* A whole period late: this process did not run (stopped, starved,
     * or in manual mode not progressed), and its peers' silence meanwhile
     * says nothing about them -- their frames waited for us. They all
     * count as heard now. */
    bool away = now >= s->next_ns + s->period_ns;
    s->next_ns = now + s->period_ns;
    tw_stall_visit_t v = {.s = s, .now = atomic_fetch_add(&s->epoch, 1) + 1};
    if (away) {
        for (int i = 0; i < s->size; i++) {
            atomic_store_explicit(&s->heard[i], v.now, memory_order_relaxed);
        }
        atomic_store_explicit(&s->heard_any, v.now, memory_order_relaxed);
    }
    tw_stall_walk(&v);
    return 0;
}

tw_status_t tw_stall_start(tw_stall_t *s, tw_pe_t *pe)
{
    struct itimerspec its = {
        .it_interval = {.tv_sec = (time_t)(s->period_ns / 1000000000u),
                        .tv_nsec = (long)(s->period_ns % 1000000000u)},
    };

    if (!tw_stall_on(s) || s->nwalkers == 0) {
        return TW_OK;
    }
    its.it_value = its.it_interval;
    s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->timer_fd < 0 || timerfd_settime(s->timer_fd, 0, &its, NULL) != 0) {
        tw_error("stall", "cannot start the stall watchdog's timer (timerfd: %s)", strerror(errno));
        return TW_ERR_TRANSPORT;
    }
    s->pe = pe;
    s->next_ns = tw_time_coarse_ns() + s->period_ns;
    return tw_pe_add(pe, tw_stall_progress, s, s->timer_fd);
}
