/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_ring.h: slot sizing, full/empty, FIFO order across many wrap-arounds,
 * and several producers into one single-consumer ring (the submission-ring
 * use) with per-producer order checked.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "progress/tw_ring.h"
#include "tw_test.h"

struct twt_rec {
    uint64_t producer;
    uint64_t seq;
    uint64_t check;
};

TW_RING_DEFINE(rec, twt_rec)

static uint64_t rec_check(uint64_t p, uint64_t s)
{
    return (p * 0x9E3779B97F4A7C15ull) ^ (s * 0xBF58476D1CE4E5B9ull) ^ 0x5555;
}

static void test_sizing(void)
{
    TWT_EQ(tw_ring_slot_count(0), 0);
    TWT_EQ(tw_ring_slot_count(1), 2);
    TWT_EQ(tw_ring_slot_count(3), 4);
    TWT_EQ(tw_ring_slot_count(4), 8);
    TWT_EQ(tw_ring_slot_count(1000), 1024);
    TWT_EQ(tw_ring_slot_count(1024), 2048);
    TWT_EQ(tw_ring_slot_count(1u << 31), 0);
}

static void test_full_empty_fifo(unsigned capacity)
{
    tw_ring_rec_t r;
    struct twt_rec in, out;
    uint64_t next_in = 0, next_out = 0;

    TWT_EQ(tw_ring_rec_init(&r, capacity), TW_OK);
    TWT_CHECK(tw_ring_rec_capacity(&r) >= capacity);
    TWT_CHECK(tw_ring_rec_empty(&r));
    TWT_CHECK(!tw_ring_rec_dequeue_sc(&r, &out));
    TWT_CHECK(!tw_ring_rec_dequeue_mc(&r, &out));

    /* Fill to exactly the ring's capacity; one more must be refused. */
    for (unsigned i = 0; i < tw_ring_rec_capacity(&r); i++) {
        in = (struct twt_rec){.producer = 0, .seq = next_in, .check = rec_check(0, next_in)};
        TWT_CHECK(tw_ring_rec_enqueue_mp(&r, &in));
        next_in++;
    }
    in.seq = 12345;
    TWT_CHECK(!tw_ring_rec_enqueue_mp(&r, &in));
    TWT_CHECK(!tw_ring_rec_empty(&r));

    /* Wrap around many times with a varying fill, alternating dequeues. */
    for (unsigned round = 0; round < 20000; round++) {
        unsigned take = 1 + round % 3;
        for (unsigned k = 0; k < take; k++) {
            bool ok =
                round % 2 ? tw_ring_rec_dequeue_sc(&r, &out) : tw_ring_rec_dequeue_mc(&r, &out);
            if (!ok) {
                break;
            }
            TWT_EQ(out.seq, next_out);
            TWT_EQ(out.check, rec_check(0, next_out));
            next_out++;
        }
        while (next_in - next_out < tw_ring_rec_capacity(&r) && round % 5 != 0) {
            in = (struct twt_rec){.producer = 0, .seq = next_in, .check = rec_check(0, next_in)};
            TWT_CHECK(tw_ring_rec_enqueue_mp(&r, &in));
            next_in++;
            if (next_in % 7 == 0) {
                break;
            }
        }
    }
    while (tw_ring_rec_dequeue_sc(&r, &out)) {
        TWT_EQ(out.seq, next_out);
        next_out++;
    }
    TWT_EQ(next_out, next_in);
    TWT_CHECK(tw_ring_rec_empty(&r));
    tw_ring_rec_cleanup(&r);
}

/* ---- several producers, one consumer ----------------------------------- */

#define MP_PRODUCERS 4

typedef struct {
    tw_ring_rec_t *ring;
    uint64_t id;
    uint64_t count;
    atomic_int *go;
} mp_arg_t;

static void *mp_producer(void *p)
{
    mp_arg_t *a = p;

    while (atomic_load_explicit(a->go, memory_order_acquire) == 0) {
        sched_yield();
    }
    for (uint64_t s = 0; s < a->count; s++) {
        struct twt_rec in = {.producer = a->id, .seq = s, .check = rec_check(a->id, s)};
        unsigned spins = 0;
        while (!tw_ring_rec_enqueue_mp(a->ring, &in)) {
            if (++spins > 32) {
                usleep(20);
            } else if (spins > 4) {
                sched_yield();
            }
        }
    }
    return NULL;
}

static void test_mpsc(void)
{
    tw_ring_rec_t r;
    pthread_t th[MP_PRODUCERS];
    mp_arg_t args[MP_PRODUCERS];
    uint64_t next[MP_PRODUCERS] = {0};
    uint64_t count = twt_scaled(200000, 5000), got = 0;
    atomic_int go = 0;

    TWT_EQ(tw_ring_rec_init(&r, 16), TW_OK);
    for (int i = 0; i < MP_PRODUCERS; i++) {
        args[i] = (mp_arg_t){.ring = &r, .id = (uint64_t)i, .count = count, .go = &go};
        TWT_EQ(pthread_create(&th[i], NULL, mp_producer, &args[i]), 0);
    }
    atomic_store_explicit(&go, 1, memory_order_release);
    unsigned idle = 0;
    while (got < count * MP_PRODUCERS) {
        struct twt_rec out;
        if (!tw_ring_rec_dequeue_sc(&r, &out)) {
            if (++idle > 32) {
                usleep(20);
            } else if (idle > 4) {
                sched_yield();
            }
            continue;
        }
        idle = 0;
        TWT_CHECK(out.producer < MP_PRODUCERS);
        TWT_EQ(out.check, rec_check(out.producer, out.seq));
        /* One producer's records arrive in its order, none lost. */
        TWT_EQ(out.seq, next[out.producer]);
        next[out.producer]++;
        got++;
    }
    for (int i = 0; i < MP_PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        TWT_EQ(next[i], count);
    }
    TWT_CHECK(tw_ring_rec_empty(&r));
    tw_ring_rec_cleanup(&r);
}

int main(void)
{
    test_sizing();
    test_full_empty_fifo(1);
    test_full_empty_fifo(5);
    test_full_empty_fifo(64);
    test_mpsc();
    printf("ok\n");
    return 0;
}
