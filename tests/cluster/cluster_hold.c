/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A job that holds still once every rank talked to every other, so that a
 * script can look at it from outside (cluster_conncount.sh counts its TCP
 * connections):
 *
 *   cluster_hold DIR [--stats[=json]]
 *
 * Every rank sends every rank (itself included) an 8-byte word naming the
 * pair and checks the word each one sent it, then writes DIR/rankR.held
 * (its pid) and waits, progressing nothing of its own, until DIR/go exists
 * (at most TWTEST_HOLD_S seconds, default 60: then it fails). Then a
 * barrier, --stats, tw_finalize.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "threadwire/threadwire.h"
#include "tw_mp.h"

#define TAG_WORD    1
#define TAG_BARRIER 2

static uint64_t word_of(int from, int to)
{
    return 0x401d000000000000ull | ((uint64_t)from << 20) | (uint64_t)to;
}

int main(int argc, char **argv)
{
    tw_mp_opts_t o = {.threads = 1, .messages = 1, .seed = 1, .stall_s = 30};
    const char *env = getenv("TWTEST_HOLD_S");
    double hold_s = env != NULL ? atof(env) : 60;
    char path[512];

    setvbuf(stdout, NULL, _IOLBF, 0);
    tw_mp_parse(argc, argv, "cluster_hold", TW_MP_STATS, NULL, 0, &o);
    TWT_CHECKF(optind + 1 == argc, "usage: cluster_hold DIR [--stats[=json]]");
    const char *dir = argv[optind];

    tw_context_t *ctx = tw_mp_init();
    int me = tw_rank(ctx), size = tw_size(ctx);
    uint64_t *in = calloc((size_t)size, sizeof(uint64_t));
    uint64_t *out = calloc((size_t)size, sizeof(uint64_t));
    tw_cq_t *cq;
    tw_completion_t c[16];

    TW_MP_CHECK(in != NULL && out != NULL, "out of memory");
    TW_MP_CHECK(tw_cq_create(ctx, (unsigned)(2 * size + 8), &cq) == TW_OK, "tw_cq_create");
    for (int r = 0; r < size; r++) {
        TW_MP_CHECK(tw_recv(ctx, r, TAG_WORD, 0, &in[r], sizeof(in[r]), cq, (void *)(intptr_t)r) ==
                        TW_OK,
                    "tw_recv from %d", r);
    }
    for (int r = 0; r < size; r++) {
        out[r] = word_of(me, r);
        TW_MP_CHECK(TW_MP_POST(ctx, tw_send(ctx, r, TAG_WORD, &out[r], sizeof(out[r]), cq, NULL)) ==
                        TW_OK,
                    "tw_send to %d", r);
    }
    double t0 = twt_now();
    for (int done = 0; done < 2 * size;) {
        TW_MP_CHECK(twt_now() - t0 < o.stall_s, "%d of %d sends and receives after %.0f s", done,
                    2 * size, o.stall_s);
        tw_progress(ctx);
        int n = tw_cq_wait(cq, c, 16, 100);
        TW_MP_CHECK(n >= 0, "tw_cq_wait: %d", n);
        for (int i = 0; i < n; i++, done++) {
            TW_MP_CHECK(c[i].status == TW_OK, "%s with rank %d: %s",
                        c[i].op == TW_OP_SEND ? "send" : "receive", c[i].peer,
                        tw_strerror(c[i].status));
            if (c[i].op == TW_OP_RECV) {
                int r = (int)(intptr_t)c[i].user;
                TW_MP_CHECK(c[i].peer == r && c[i].length == 8 && in[r] == word_of(r, me),
                            "the word from rank %d: %#llx from %d", r, (unsigned long long)in[r],
                            c[i].peer);
            }
        }
    }

    snprintf(path, sizeof(path), "%s/rank%d.held", dir, me);
    FILE *f = fopen(path, "w");
    TW_MP_CHECK(f != NULL && fprintf(f, "%d\n", (int)getpid()) > 0 && fclose(f) == 0,
                "cannot write %s: %s", path, strerror(errno));
    snprintf(path, sizeof(path), "%s/go", dir);
    double t_held = twt_now();
    while (access(path, F_OK) != 0) {
        TW_MP_CHECK(twt_now() - t_held < hold_s, "no %s after %.0f s", path, hold_s);
        usleep(20 * 1000);
    }
    double held = twt_now() - t_held;

    tw_mp_barrier(ctx, TAG_BARRIER);
    tw_mp_stats(ctx);
    TW_MP_CHECK(tw_cq_destroy(cq) == TW_OK, "tw_cq_destroy");
    TW_MP_CHECK(tw_finalize(ctx) == TW_OK, "tw_finalize");
    printf("hold: rank %d of %d: a word to and from every rank, held %.1f s, released\n", me, size,
           held);
    free(in);
    free(out);
    return 0;
}
