/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Mutexes and reader-writer locks whose contracts are checked, not only
 * written:
 *  - clang's -Wthread-safety (on in every clang build; -Werror in CI)
 *    sees them as capabilities: a field declared TW_GUARDED_BY(x->lock)
 *    touched without it, a function declared TW_REQUIRES(lock) called
 *    without it, a lock left held, are compile errors;
 *  - builds with assertions (every build but Release: Debug, and the
 *    sanitizer builds CI runs) check lock ranks at run time, as jemalloc's
 *    witness does: each lock has a rank, and a thread may take a lock only
 *    of a higher rank than every lock it holds, so two code paths cannot
 *    take the same two locks in opposite orders (a deadlock waiting for the
 *    wrong interleaving). A violation aborts with both locks' names.
 *    tw_mutex_assert_held checks the calling thread holds a lock.
 * In Release builds they are plain pthread locks.
 *
 * Ranks go down the layers: the runtime's locks are taken first, a
 * transport's last (a layer calls the one below with its own lock held,
 * never the reverse). Locks of one rank never nest (two peers' locks are
 * never held at once).
 */
#ifndef TW_LOCK_H
#define TW_LOCK_H

#include <pthread.h>
#include <stdbool.h>

#include "core/tw_compiler.h"
#include "threadwire/threadwire.h"

typedef enum tw_lock_rank {
    TW_LOCK_RANK_SHELLS = 10,       /* runtime: the context shells */
    TW_LOCK_RANK_ERR_HANDLER = 12,  /* runtime: a context's error handler */
    TW_LOCK_RANK_PMIX = 14,         /* runtime: the process's PMIx client (bootstrap) */
    TW_LOCK_RANK_RMA_REG = 20,      /* msg: the region registry (rwlock) */
    TW_LOCK_RANK_RMA_SLOT = 22,     /* msg: one-sided operation slots */
    TW_LOCK_RANK_RMA_PEER = 24,     /* msg: a peer's one-sided state */
    TW_LOCK_RANK_RMA_DEFER = 26,    /* msg: deferred one-sided replies */
    TW_LOCK_RANK_MATCH_WILD = 28,   /* msg: the any-source receive list */
    TW_LOCK_RANK_COLL_TABLE = 30,   /* coll: a context's group table */
    TW_LOCK_RANK_REL_PEER = 40,     /* reliability: a peer */
    TW_LOCK_RANK_REL_ARM = 42,      /* reliability: the timer */
    TW_LOCK_RANK_ROUTE_OUT = 44,    /* routing: numbering frames to a rank */
    TW_LOCK_RANK_ROUTE_Q = 45,      /* routing: what waits for a next hop */
    TW_LOCK_RANK_ROUTE_REASM = 46,  /* routing: a sender's frames handed up */
    TW_LOCK_RANK_LOSSY = 50,        /* transports: a fault injector */
    TW_LOCK_RANK_SHM_SEND = 52,     /* transports: shm senders into one ring */
    TW_LOCK_RANK_VERBS_ASYNC = 54,  /* transports: the async event thread's devices */
    TW_LOCK_RANK_VERBS_RCACHE = 56, /* transports: the registration cache */
    TW_LOCK_RANK_LEAF = 90,         /* core: taken with nothing else after it */
} tw_lock_rank_t;

typedef struct TW_CAPABILITY("mutex") tw_mutex {
    pthread_mutex_t m;
    tw_lock_rank_t rank;
    const char *name;
} tw_mutex_t;

typedef struct TW_CAPABILITY("rwlock") tw_rwlock {
    pthread_rwlock_t l;
    tw_lock_rank_t rank;
    const char *name;
} tw_rwlock_t;

#define TW_MUTEX_INITIALIZER(rank_, name_)          \
    {                                               \
        PTHREAD_MUTEX_INITIALIZER, (rank_), (name_) \
    }

#if defined(NDEBUG)
#define TW_LOCK_CHECKED 0
#else
#define TW_LOCK_CHECKED 1
#endif

/* Witness (tw_lock.c), in builds with assertions: the calling thread's
 * held locks. */
void tw_lock_witness_acquire(const void *lock, tw_lock_rank_t rank, const char *name);
void tw_lock_witness_release(const void *lock);
bool tw_lock_witness_holds(const void *lock);
#if TW_TESTING
/* Test hook: called instead of abort() on a violation (NULL: abort). */
extern void (*tw_lock_violation_hook)(const char *taking, const char *holding);
#endif

/** Initialise @p m with its @p rank and a @p name for reports. TW_OK or
 * TW_ERR_NOMEM. Thread: any (before the lock is shared). */
static inline tw_status_t tw_mutex_init(tw_mutex_t *m, tw_lock_rank_t rank, const char *name)
{
    m->rank = rank;
    m->name = name;
    return pthread_mutex_init(&m->m, NULL) == 0 ? TW_OK : TW_ERR_NOMEM;
}

static inline void tw_mutex_destroy(tw_mutex_t *m)
{
    pthread_mutex_destroy(&m->m);
}

static inline void tw_mutex_lock(tw_mutex_t *m) TW_ACQUIRE(m) TW_NO_TSA
{
#if TW_LOCK_CHECKED
    tw_lock_witness_acquire(m, m->rank, m->name);
#endif
    pthread_mutex_lock(&m->m);
}

static inline bool tw_mutex_trylock(tw_mutex_t *m) TW_TRY_ACQUIRE(true, m) TW_NO_TSA
{
    if (pthread_mutex_trylock(&m->m) != 0) {
        return false;
    }
#if TW_LOCK_CHECKED
    tw_lock_witness_acquire(m, m->rank, m->name);
#endif
    return true;
}

static inline void tw_mutex_unlock(tw_mutex_t *m) TW_RELEASE(m) TW_NO_TSA
{
#if TW_LOCK_CHECKED
    tw_lock_witness_release(m);
#endif
    pthread_mutex_unlock(&m->m);
}

/** Wait on @p cond, releasing @p m meanwhile (the witness keeps it: the
 * thread holds it again when this returns). */
static inline void tw_cond_wait(pthread_cond_t *cond, tw_mutex_t *m) TW_REQUIRES(m) TW_NO_TSA
{
    pthread_cond_wait(cond, &m->m);
}

/** Assert (builds with assertions) that the calling thread holds @p m;
 * tells the analysis so too. */
static inline void tw_mutex_assert_held(const tw_mutex_t *m) TW_TSA(assert_capability(m))
{
#if TW_LOCK_CHECKED
    tw_assert(tw_lock_witness_holds(m));
#else
    (void)m;
#endif
}

static inline tw_status_t tw_rwlock_init(tw_rwlock_t *l, tw_lock_rank_t rank, const char *name)
{
    l->rank = rank;
    l->name = name;
    return pthread_rwlock_init(&l->l, NULL) == 0 ? TW_OK : TW_ERR_NOMEM;
}

static inline void tw_rwlock_destroy(tw_rwlock_t *l)
{
    pthread_rwlock_destroy(&l->l);
}

static inline void tw_rwlock_rdlock(tw_rwlock_t *l) TW_TSA(acquire_shared_capability(l)) TW_NO_TSA
{
#if TW_LOCK_CHECKED
    tw_lock_witness_acquire(l, l->rank, l->name);
#endif
    pthread_rwlock_rdlock(&l->l);
}

static inline void tw_rwlock_wrlock(tw_rwlock_t *l) TW_ACQUIRE(l) TW_NO_TSA
{
#if TW_LOCK_CHECKED
    tw_lock_witness_acquire(l, l->rank, l->name);
#endif
    pthread_rwlock_wrlock(&l->l);
}

static inline void tw_rwlock_unlock(tw_rwlock_t *l) TW_TSA(release_generic_capability(l)) TW_NO_TSA
{
#if TW_LOCK_CHECKED
    tw_lock_witness_release(l);
#endif
    pthread_rwlock_unlock(&l->l);
}

#endif /* TW_LOCK_H */
