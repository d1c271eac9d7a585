/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The lossy transport: a wrapper over an open transport that injects
 * seeded faults (tw_fault.h: drop, corrupt, dup, reorder, delay, blackhole,
 * kill) into its active messages, both as they are sent and as they
 * arrive. The runtime puts it over each transport TW_FAULT_ON names, in
 * the ranks TW_FAULT_RANKS names, when TW_FAULT is set (its ops'
 * wrap_wants / wrap_open); tests wrap an iface of their own:
 *
 *   tw_fault_parse("drop=0.05,seed=42", &spec, why, sizeof(why));
 *   tw_tl_iface_open(tw_tl_find("tcp"), &params, &inner);
 *   st = tw_lossy_wrap(inner, &params, &spec, &iface);
 *   tw_tl_pe_add_tree(iface);       (both progress functions)
 *   ... tw_tl_am_short(iface, ...) ...
 *   tw_tl_close(iface);             (closes the inner too)
 *
 * What it does is what the inner does (caps, attr, engine): the layer
 * above sees the same transport, faulty. Fault rules per frame class
 * (tx.ack.drop=1) go by the classes the layer above names for its am ids
 * (tw_tl_params_t.am_class). Rendezvous (recv_rndv, rndv_get),
 * put/get/flush and memory registration pass through untouched; it has no
 * address of its own.
 */
#ifndef TW_LOSSY_H
#define TW_LOSSY_H

#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_stats.h"
#include "threadwire/threadwire.h"
#include "transports/base/tw_tl.h"
#include "transports/lossy/tw_fault.h"

/** Counters of tw_lossy_stats(), frames summed over both directions. */
enum {
    TW_LOSSY_STAT_DROPPED,      /* lost to drop=P */
    TW_LOSSY_STAT_CORRUPTED,    /* one bit flipped */
    TW_LOSSY_STAT_DUPLICATED,   /* sent / delivered twice */
    TW_LOSSY_STAT_REORDERED,    /* held back behind later frames */
    TW_LOSSY_STAT_DELAYED,      /* held for delay_time */
    TW_LOSSY_STAT_BLACKHOLED,   /* lost in the blackhole */
    TW_LOSSY_STAT_KILLED_PATHS, /* 1 once the iface was killed */
    TW_LOSSY_STAT_COUNT
};

/** Wrap the open iface @p inner with seeded fault injection per @p spec
 * (copied), taking it over (tw_tl_bind): its arrivals and peer_down go
 * through the wrapper to @p params' callbacks. Fault types of am ids come
 * from @p params->am_class (rebinding with tw_tl_bind changes them). The
 * wrapper's counters (iface->stats) are "lossy:<inner name>"; the inner
 * keeps its own.
 *
 * Each (peer, direction) draws from its own tw_fault_rng_t, seeded with
 * (spec->seed, params->rank, peer, direction); the schedule (blackhole,
 * kill) counts from this call. Held and delayed frames, deferred zero-copy
 * completions and the kill report are handled by the wrapper's progress
 * on the inner's engine, which keeps the engine awake while frames are
 * held.
 *
 * @return TW_OK (the wrapper owns @p inner: tw_tl_close closes both);
 *   TW_ERR_INVALID (NULL argument, no recv callback, a bad spec);
 *   TW_ERR_NOMEM, TW_ERR_TRANSPORT (timer): @p inner is untouched.
 * Thread: the caller of tw_init, before traffic. */
tw_status_t tw_lossy_wrap(tw_tl_iface_t *inner, const tw_tl_params_t *params,
                          const tw_fault_spec_t *spec, tw_tl_iface_t **iface_p);

/** Replace the spec at run time (test hook): the next decisions use it,
 * frames already held keep their fate. Resets nothing else (the rng
 * streams continue, the schedule still counts from open, a killed iface
 * stays killed). Thread: any. */
#if TW_TESTING
void tw_lossy_set_spec(tw_tl_iface_t *iface, const tw_fault_spec_t *spec);
#endif

/** The fault counters of a lossy iface (its stats: group name
 * "lossy:<inner name>", TW_LOSSY_STAT_* order: dropped, corrupted,
 * duplicated, reordered, delayed, blackholed, killed_paths), or NULL when
 * @p iface is not a lossy wrapper. Valid until the iface closes.
 * Thread: any. */
tw_stats_t *tw_lossy_stats(const tw_tl_iface_t *iface);

/** The inner iface (NULL when @p iface is not lossy). Thread: any. */
tw_tl_iface_t *tw_lossy_inner(const tw_tl_iface_t *iface);

#endif /* TW_LOSSY_H */
