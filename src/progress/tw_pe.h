/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Progress engines. A progress engine (pe) is one progress domain: a set of
 * registered progress functions, the fds they sleep on, and an MPSC
 * submission ring with an eventfd doorbell. It is driven either by its own
 * progress thread, or -- in manual mode -- by whichever caller of
 * tw_pe_progress() wins its try-lock (others skip it: they never wait).
 * Either way exactly one thread runs a pe's functions at a time, so what a
 * pe drives needs no lock ("owner" below = that thread).
 *
 * Wait modes of a progress thread when a loop did no work:
 *   spin      keep polling; back off to sched_yield after a few empty loops;
 *   block     announce sleep, re-poll once, sleep in epoll on the fds;
 *   adaptive  spin (with back-off) for spin_ns, then as block.
 * Submitters ring the doorbell only when the owner announced it sleeps.
 */
#ifndef TW_PE_H
#define TW_PE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_stats.h"
#include "threadwire/threadwire.h"

typedef struct tw_pe tw_pe_t;

/** Progress function: do pending work, return the number of events
 * handled (0 lets the thread consider sleeping). Thread: owner. */
typedef int (*tw_pe_fn_t)(void *arg);

/** A command handed to the owner through the submission ring. Runs on the
 * owner thread. Thread: owner. */
typedef struct tw_pe_cmd {
    void (*fn)(void *arg, void *data, uint64_t u64);
    void *arg;
    void *data;
    uint64_t u64;
} tw_pe_cmd_t;

typedef struct tw_pe_params {
    const char *name; /* "socket0", "hca:mlx5_0" (copied) */
    bool thread;      /* start a progress thread (else manual) */
    tw_wait_mode_t wait_mode;
    uint64_t spin_ns;    /* adaptive spin budget */
    int bind_package;    /* hwloc package to bind to, -1 = none */
    unsigned ring_depth; /* commands each submission lane holds (0 = 1024) */
} tw_pe_params_t;

enum {
    TW_PE_STAT_LOOPS,    /* progress loops run */
    TW_PE_STAT_EVENTS,   /* events reported by progress functions */
    TW_PE_STAT_CMDS,     /* submission commands run */
    TW_PE_STAT_SLEEPS,   /* times the thread went to sleep */
    TW_PE_STAT_DOORBELL, /* doorbell rings paid by submitters */
    TW_PE_STAT_AGAIN,    /* submissions refused: ring full */
    TW_PE_STAT_COUNT
};

/** Create a pe (no thread yet). TW_ERR_NOMEM, TW_ERR_TRANSPORT (eventfd
 * or epoll failed: logged). Thread: any. */
tw_status_t tw_pe_create(const tw_pe_params_t *params, tw_pe_t **pe_p);

/** Register a progress function, and optionally an fd (readable = work,
 * level-triggered; -1 = none) to sleep on. Only before tw_pe_start.
 * Thread: the creator. */
tw_status_t tw_pe_add(tw_pe_t *pe, tw_pe_fn_t fn, void *arg, int fd);

/** Wake the sleeping engine when @p fd turns readable (level-triggered),
 * without a function of its own: the progress functions look at it (see
 * tw_pe_wakeups). Thread: any. */
tw_status_t tw_pe_watch(tw_pe_t *pe, int fd);
/** Also wake it when watched @p fd turns writable (@p on), or no longer
 * (a socket whose queued bytes all went out). Thread: any. */
tw_status_t tw_pe_watch_out(tw_pe_t *pe, int fd, bool on);
/** Stop watching @p fd (e.g. a pidfd that stays readable). Thread: any. */
void tw_pe_unwatch(tw_pe_t *pe, int fd);

/** Mirror the engine's "I am going to sleep" flag into @p word (seq_cst
 * stores, 1 before the last look, 0 after waking), so another process
 * that publishes work into memory we poll knows it must wake us through a
 * watched fd. Only before tw_pe_start. */
tw_status_t tw_pe_add_sleep_word(tw_pe_t *pe, void *word /* _Atomic uint32_t * */);

/** Waiting workers poll this engine's transports for themselves
 * (tw_pe_try_call): in adaptive mode the thread then leaves the idle
 * spinning -- and the spin slot -- to them and sleeps at once when idle.
 * Only before tw_pe_start. */
tw_status_t tw_pe_workers_poll(tw_pe_t *pe);

/** Leases. A waiting worker that has just polled @p pe's transports
 * for itself (under its try-lock) calls tw_pe_lease: for the next 200 us
 * the thread, when idle, sleeps aside -- on its doorbell and timers, not
 * on the transports' fds, whose arrivals the worker takes in (each would
 * otherwise wake the thread, on the CPU the worker needs, to find the
 * data gone). Spin mode ignores leases; manual mode has no thread.
 * tw_pe_lease_end ends the leases the calling thread took since its last
 * tw_pe_lease_forget (a waiter about to sleep: from then on the thread
 * watches the fds again); tw_pe_lease_forget drops that record without
 * touching the engines (a wait begins: those the thread polled before
 * may be gone). Thread: any. */
void tw_pe_lease(tw_pe_t *pe);
/** A waiter about to poll passes its reading of tw_time_ns (0 after the
 * polls): tw_pe_lease then takes it instead of reading the clock again.
 * Thread: the waiter (thread-local). */
void tw_pe_lease_clock(uint64_t now);
void tw_pe_lease_end(void);
void tw_pe_lease_forget(void);
/** End @p pe's lease, whoever took it: the engine must watch its fds
 * again (a socket waits for room, which only the engine's epoll sees).
 * A load when there is none. Thread: any. */
void tw_pe_lease_break(tw_pe_t *pe);

/** How many times the engine went to sleep; a progress function that sees
 * it change knows an fd may have woken it (drain sockets, check pidfds).
 * Thread: owner. */
uint64_t tw_pe_wakeups(const tw_pe_t *pe);

/** Start the progress thread (when params.thread), bound per
 * params.bind_package. TW_ERR_TRANSPORT if the thread cannot start. */
tw_status_t tw_pe_start(tw_pe_t *pe);

/** Run every progress function and pending command once if no one else is
 * (try-lock). Returns events handled, 0 when busy elsewhere. Thread: any. */
int tw_pe_progress(tw_pe_t *pe);

/** Run @p fn(@p arg) as the pe's owner if no one else is (try-lock):
 * a waiting worker doing a transport's poll while the engine is idle.
 * Returns what fn returned, 0 when busy elsewhere. Thread: any. */
int tw_pe_try_call(tw_pe_t *pe, tw_pe_fn_t fn, void *arg);

/** True when a progress thread drives @p pe (else callers must). */
bool tw_pe_has_thread(const tw_pe_t *pe);

/** Hand @p cmd to the owner through the caller's lane (per-thread FIFO).
 * TW_ERR_AGAIN when the lane is full (the
 * caller retries after progress). Rings the doorbell only if the owner
 * sleeps. Thread: any. */
tw_status_t tw_pe_submit(tw_pe_t *pe, const tw_pe_cmd_t *cmd);

/** Have @p cmd run as the owner, whatever it takes: submitted (waiting
 * while the lane is full, driving the engine when it has no thread), or,
 * when the caller's lane cannot be allocated (out of memory), run by the
 * caller itself as the owner once no one else is (tw_pe_try_call) -- its
 * lane never existed, so nothing of this thread's is queued before it.
 * Run at once on the owner. For what must not fail (a rendezvous pull:
 * its sender waits for it). Thread: any. */
void tw_pe_hand_over(tw_pe_t *pe, const tw_pe_cmd_t *cmd);

/** Test hook: the next @p n tw_pe_hand_over calls that submit (any pe,
 * any thread) find no lane, as if it could not be allocated. Returns how
 * many the previous call had left unused. */
#if TW_TESTING
unsigned tw_pe_test_submit_fail(unsigned n);
#endif

/** Wake the owner if it sleeps (e.g. after posting into a ring it polls).
 * A fence and a load when nobody sleeps. Thread: any. */
void tw_pe_wake(tw_pe_t *pe);

/** True on the thread currently running @p pe's functions. */
bool tw_pe_is_owner(const tw_pe_t *pe);
/** CLOCK_MONOTONIC_COARSE as read once at the start of the current pass:
 * for the progress functions' periodic checks, one clock reading per pass
 * instead of one per function (outside a pass of @p pe: a reading of its
 * own). Thread: any; meant for @p pe's progress functions. */
uint64_t tw_pe_pass_coarse_ns(const tw_pe_t *pe);

/** Builds with assertions: the caller runs @p pe's functions -- what an
 * engine owns is touched by nobody else. */
#define tw_pe_assert_owner(pe) tw_assert(tw_pe_is_owner(pe))

/** Stop and join the thread; afterwards pending commands are run by
 * tw_pe_progress (finalize drains them). Idempotent. Thread: not the
 * owner. */
void tw_pe_stop(tw_pe_t *pe);

/** Free everything (stop first). Pending commands are run before. */
void tw_pe_destroy(tw_pe_t *pe);

/** Run one batch of queued commands on the calling thread (waiting for
 * the engine's lock): how many ran. For a component that closes after the
 * engines stopped and must leave no command naming it behind; it loops
 * with a bound of its own (a command may queue another). */
unsigned tw_pe_run_cmd_batch(tw_pe_t *pe);

tw_stats_t *tw_pe_stats(tw_pe_t *pe);
const char *tw_pe_name(const tw_pe_t *pe);
/** Kernel tid of the progress thread, 0 when none runs. */
int tw_pe_tid(const tw_pe_t *pe);
/** CPU set the thread is bound to, as text ("0-1"), or "unbound". */
const char *tw_pe_binding(const tw_pe_t *pe);

/* Topology (hwloc, loaded once per process). */
int tw_topo_num_packages(void);
/** Bind the calling thread to the CPUs of hwloc package @p package and
 * write them as a list ("0-1") to @p text. TW_ERR_INVALID (no such
 * package), TW_ERR_TRANSPORT (topology or binding failed: logged as a
 * warning by the caller's choice, not here). Thread: any. */
tw_status_t tw_topo_bind_package(int package, char *text, size_t len);
/** The CPUs of @p package that this process may use, as text ("0-1"),
 * without binding anything. Thread: any. */
tw_status_t tw_topo_package_cpus(int package, char *text, size_t len);

#endif /* TW_PE_H */
