/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The lock witness (tw_lock.h): per thread, the locks it holds, in the
 * order it took them. Taking a lock whose rank is not above every held
 * one's is a lock-order violation: reported with both names, then abort
 * (it is a bug, found the first time the order is taken, not when two
 * threads finally deadlock).
 */
#include "core/tw_lock.h"

#include <stdio.h>
#include <stdlib.h>

#define TW_LOCK_HELD_MAX 16

typedef struct tw_lock_held {
    const void *lock;
    tw_lock_rank_t rank;
    const char *name;
} tw_lock_held_t;

static TW_TLS unsigned tw_lock_nheld;
static TW_TLS tw_lock_held_t tw_lock_held[TW_LOCK_HELD_MAX];

#if TW_TESTING
/* Tests replace abort() to see a violation; NULL: abort. */
void (*tw_lock_violation_hook)(const char *taking, const char *holding);
#endif

void tw_lock_witness_acquire(const void *lock, tw_lock_rank_t rank, const char *name)
{
    for (unsigned i = 0; i < tw_lock_nheld; i++) {
        const tw_lock_held_t *h = &tw_lock_held[i];
        if (h->rank >= rank) {
#if TW_TESTING
            if (tw_lock_violation_hook != NULL) {
                tw_lock_violation_hook(name, h->name);
                break;
            }
#endif
            fprintf(stderr,
                    "threadwire: lock order: taking %s (rank %d) while holding %s (rank %d)%s\n",
                    name, (int)rank, h->name, (int)h->rank,
                    h->lock == lock ? " -- the same lock, again" : "");
            abort();
        }
    }
    if (tw_lock_nheld == TW_LOCK_HELD_MAX) {
        fprintf(stderr, "threadwire: more than %d locks held by one thread (taking %s)\n",
                TW_LOCK_HELD_MAX, name);
        abort();
    }
    tw_lock_held[tw_lock_nheld++] = (tw_lock_held_t){.lock = lock, .rank = rank, .name = name};
}

void tw_lock_witness_release(const void *lock)
{
    for (unsigned i = tw_lock_nheld; i-- > 0;) {
        if (tw_lock_held[i].lock == lock) {
            for (unsigned k = i + 1; k < tw_lock_nheld; k++) {
                tw_lock_held[k - 1] = tw_lock_held[k];
            }
            tw_lock_nheld--;
            return;
        }
    }
    fprintf(stderr, "threadwire: releasing a lock this thread does not hold (%p)\n", lock);
    abort();
}

bool tw_lock_witness_holds(const void *lock)
{
    for (unsigned i = 0; i < tw_lock_nheld; i++) {
        if (tw_lock_held[i].lock == lock) {
            return true;
        }
    }
    return false;
}
