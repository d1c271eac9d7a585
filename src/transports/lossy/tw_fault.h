/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Seeded fault injection: the TW_FAULT specification and the per-frame
 * decision, for the lossy transport (issue 5). Pure functions, no I/O, so
 * the parser is fuzzed and the decisions are unit-tested for determinism.
 *
 * TW_FAULT is a comma list of key=value:
 *   [DIR.][TYPE.]FAULT=P    probability P in [0, 1] that a frame suffers
 *                           FAULT: drop, corrupt (one bit flipped in
 *                           header or payload), dup (delivered twice),
 *                           reorder (held back behind up to `window`
 *                           later frames), delay (held for `delay_time`);
 *                           DIR tx or rx (default both), TYPE data, ack,
 *                           nack or ctrl (default all four). A narrower
 *                           key overrides a wider one whatever the order.
 *   seed=N                  the seed (default 1): the same seed and the
 *                           same frames give the same faults
 *   window=N                reorder window, 1..64 frames (default 4)
 *   delay_time=D            how long a delayed frame waits (default 1ms)
 *   blackhole=D             from D after the path opened, drop every frame
 *   blackhole_for=D         ... for D, then let frames pass again (the
 *                           path heals: fail-back); absent or 0: forever;
 *                           without blackhole=D it does nothing
 *   blackhole_after=N       from the N-th frame the path carries (either
 *                           way, to or from any peer) on, drop every frame,
 *                           for good: mid-stream whatever the speed
 *   kill=D                  at D after the path opened, the path fails
 * D is a duration (ns, us, ms, s; a bare number is us). Example:
 *   TW_FAULT=drop=0.05,corrupt=0.01,dup=0.01,reorder=0.1,seed=42
 *   TW_FAULT=rx.ack.drop=1,seed=7          (every incoming ack is lost)
 *   TW_FAULT=blackhole=1s,blackhole_for=2s (silent from 1 s to 3 s)
 */
#ifndef TW_FAULT_H
#define TW_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

typedef enum { TW_FAULT_TX, TW_FAULT_RX, TW_FAULT_NDIRS } tw_fault_dir_t;
typedef enum {
    TW_FAULT_DATA,
    TW_FAULT_ACK,
    TW_FAULT_NACK,
    TW_FAULT_CTRL,
    TW_FAULT_NTYPES
} tw_fault_type_t;
typedef enum {
    TW_FAULT_DROP,
    TW_FAULT_CORRUPT,
    TW_FAULT_DUP,
    TW_FAULT_REORDER,
    TW_FAULT_DELAY,
    TW_FAULT_NKINDS
} tw_fault_kind_t;

#define TW_FAULT_WINDOW_MAX 64

typedef struct tw_fault_spec {
    /* Probabilities as 32-bit fixed point: p * 2^32 (2^32 = always). */
    uint64_t p[TW_FAULT_NDIRS][TW_FAULT_NTYPES][TW_FAULT_NKINDS];
    uint64_t seed;
    unsigned window;
    uint64_t delay_ns;
    uint64_t blackhole_ns;     /* 0: never */
    uint64_t blackhole_len_ns; /* 0: forever (once started) */
    uint64_t kill_ns;          /* 0: never */
    uint64_t blackhole_frames; /* blackhole_after: 0: never */
    bool any;                  /* some fault can happen */
} tw_fault_spec_t;

/** Parse @p text (NULL or "" = no faults) into @p spec, written only on
 * success. TW_ERR_INVALID: @p why (may be NULL) names the bad item. */
tw_status_t tw_fault_parse(const char *text, tw_fault_spec_t *spec, char *why, size_t why_len);

/** The random stream of one path and direction (xoshiro256**). */
typedef struct tw_fault_rng {
    uint64_t s[4];
} tw_fault_rng_t;

/** Seed @p rng from the spec's seed and the path: (@p rank, @p peer, @p dir)
 * each get a stream of their own, so one path's faults do not depend on
 * the traffic of another. */
void tw_fault_rng_init(tw_fault_rng_t *rng, uint64_t seed, int rank, int peer, tw_fault_dir_t dir);
uint64_t tw_fault_rng_next(tw_fault_rng_t *rng);

/** What happens to one frame. */
typedef struct tw_fault_decision {
    bool drop;         /* lost (also: blackholed, killed) */
    bool dup;          /* delivered twice */
    bool corrupt;      /* flip bit `bit` of the frame */
    size_t bit;        /* < frame_len * 8 */
    unsigned hold;     /* reorder: let this many later frames pass first (1..window) */
    uint64_t delay_ns; /* delay: hold this long */
    bool killed;       /* the path has failed (at or after kill) */
} tw_fault_decision_t;

/** Decide the fate of a frame of @p frame_len bytes of @p type going in
 * @p dir, @p elapsed_ns after the path opened. Draws a fixed number of
 * values from @p rng per call, so decisions stay aligned with frames. */
void tw_fault_decide(const tw_fault_spec_t *spec, tw_fault_rng_t *rng, tw_fault_dir_t dir,
                     tw_fault_type_t type, size_t frame_len, uint64_t elapsed_ns,
                     tw_fault_decision_t *out);

#endif /* TW_FAULT_H */
