/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The lossy transport: a wrapper around an open transport that injects
 * seeded faults (tw_fault.h: drop, corrupt, dup, reorder, delay, blackhole,
 * kill) into its active messages, both as they are sent and as they
 * arrive. The wrapper looks like the transport it wraps -- same name,
 * capabilities, attributes, counters and engine -- so the layers above
 * (reliability, tests) use it through the ops table unchanged:
 *
 *   const uint8_t am_type[64] = {[MY_ACK_ID] = TW_FAULT_ACK};
 *   tw_fault_spec_t spec;
 *   tw_fault_parse("drop=0.05,seed=42", &spec, why, sizeof(why));
 *   st = tw_lossy_open(tw_tl_find("tcp"), &params, &spec, am_type, &iface);
 *   ... tw_tl_am_short(iface, ...), tw_tl_progress(iface) ...
 *   iface->ops->iface_close(iface);   (closes the wrapped transport too)
 *
 * Rendezvous (recv_rndv, rndv_get), put/get/flush and the address
 * exchange pass through untouched.
 */
#ifndef TW_LOSSY_H
#define TW_LOSSY_H

#include <stdint.h>

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

/** Open transport @p inner with @p params, interposing seeded fault
 * injection per @p spec (copied). am_type[i] (i < 64) is the
 * tw_fault_type_t of transport am id i (ids >= 64 are TW_FAULT_DATA; a NULL
 * @p am_type makes every id data). The returned iface looks like the inner
 * one to everybody (its ops->name, caps and opt_in are the inner's; its ops
 * table is a per-instance copy of lossy's forwarding table, with the
 * inner's stubs where the inner has them; attr and stats pointer are the
 * inner's, pe is the inner's). Its ops->iface_close closes the inner iface
 * and frees the wrapper; its ops->iface_open is never to be called
 * (TW_ERR_UNSUPPORTED): this function is the entry point.
 *
 * Each (peer, direction) draws from its own tw_fault_rng_t, seeded with
 * (spec->seed, params->rank, peer, direction); the schedule (blackhole,
 * kill) counts from this call. Held and delayed frames, deferred zero-copy
 * completions and the kill report are handled by the wrapper's progress
 * on the engine, which keeps the engine awake while frames are held.
 *
 * @return TW_OK; TW_ERR_INVALID (NULL argument, an am_type entry that is
 *   no tw_fault_type_t); TW_ERR_NOMEM, TW_ERR_TRANSPORT (timer); or what
 *   the inner iface_open returned.
 * Thread: the caller of tw_init (as iface_open). */
tw_status_t tw_lossy_open(const tw_tl_ops_t *inner, const tw_tl_params_t *params,
                          const tw_fault_spec_t *spec, const uint8_t am_type[64],
                          tw_tl_iface_t **iface_p);

/** Replace the spec at run time (test hook): the next decisions use it,
 * frames already held keep their fate. Resets nothing else (the rng
 * streams continue, the schedule still counts from open, a killed iface
 * stays killed). Thread: any. */
void tw_lossy_set_spec(tw_tl_iface_t *iface, const tw_fault_spec_t *spec);

/** The fault counters of a lossy iface (group name "lossy:<inner name>",
 * TW_LOSSY_STAT_* order: dropped, corrupted, duplicated, reordered,
 * delayed, blackholed, killed_paths), or NULL when @p iface is not a lossy
 * wrapper. Valid until the iface closes. Thread: any. */
tw_stats_t *tw_lossy_stats(const tw_tl_iface_t *iface);

/** The inner iface (NULL when @p iface is not lossy). Thread: any. */
tw_tl_iface_t *tw_lossy_inner(const tw_tl_iface_t *iface);

#endif /* TW_LOSSY_H */
