/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Bad input from the caller gets an error code, never a crash: NULL
 * handles, depth 0, lengths near SIZE_MAX, ranks out of range, CQs of
 * another context, calls after finalize, destroying a CQ with operations
 * outstanding, bad configuration and bad TW_* values.
 */
#include <stdint.h>
#include <string.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

static void check_config_errors(void)
{
    tw_config_t cfg;
    tw_context_t *ctx = (tw_context_t *)0x1;

    TWT_EQ(tw_init(NULL, NULL), TW_ERR_INVALID);
    tw_config_init(&cfg);
    cfg.size = 3;
    TWT_EQ(tw_init(&cfg, &ctx), TW_ERR_INVALID);
    TWT_CHECK(ctx == (tw_context_t *)0x1); /* untouched on failure */
    tw_config_init(&cfg);
    cfg.progress_threads = -2;
    TWT_EQ(tw_init(&cfg, &ctx), TW_ERR_INVALID);
    tw_config_init(&cfg);
    cfg.wait_mode = (tw_wait_mode_t)7;
    TWT_EQ(tw_init(&cfg, &ctx), TW_ERR_INVALID);
    tw_config_init(&cfg);
    cfg.transports = "self,carrier-pigeon";
    TWT_EQ(tw_init(&cfg, &ctx), TW_ERR_INVALID);
    cfg.transports = "verbs"; /* without an RDMA device: not usable, said so */
    {
        tw_status_t st = tw_init(&cfg, &ctx);
        TWT_CHECKF(st == TW_ERR_UNSUPPORTED || st == TW_OK, "tw_init with verbs: %s",
                   tw_strerror(st));
        if (st == TW_OK) { /* a host (or VM) with an RDMA device */
            TWT_EQ(tw_finalize(ctx), TW_OK);
            ctx = (tw_context_t *)0x1;
        }
    }
    cfg.transports = "lossy"; /* a wrapper, set with TW_FAULT */
    TWT_EQ(tw_init(&cfg, &ctx), TW_ERR_INVALID);
    tw_config_init(&cfg);
    cfg.reliable = true; /* a job of one through the reliability layer */
    TWT_EQ(tw_init(&cfg, &ctx), TW_OK);
    TWT_EQ(tw_finalize(ctx), TW_OK);

    /* Environment: a bad value is an error naming the variable. */
    static const char *const bad[][2] = {
        {"TW_WAIT_MODE", "fast"},       {"TW_PROGRESS_THREADS", "lots"},
        {"TW_PROGRESS_THREADS", "-5"},  {"TW_EAGER_LIMIT", "1t"},
        {"TW_MATCH_BUCKETS", "3"},      {"TW_RELIABLE", "maybe"},
        {"TW_SPIN_TIME", "10 parsecs"}, {"TW_PROGRESS_RING", "100"},
        {"TW_LOG_LEVEL", "loud"},       {"TW_FAULT", "drop=2"},
        {"TW_FAULT", "explode=0.1"},    {"TW_REL_RTO", "soon"},
        {"TW_REL_MISSES", "0"},
    };
    for (size_t i = 0; i < TWT_ARRAY_SIZE(bad); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        TWT_CHECKF(tw_init(NULL, &ctx) == TW_ERR_INVALID, "%s=%s accepted", bad[i][0], bad[i][1]);
        unsetenv(bad[i][0]);
    }
    /* Fault injection aimed at a transport or rank that does not exist. */
    setenv("TW_FAULT", "drop=0.1", 1);
    static const char *const bad_aim[][2] = {
        {"TW_FAULT_ON", "tpc"}, {"TW_FAULT_RANKS", "1"}, {"TW_FAULT_RANKS", "zero"}};
    for (size_t i = 0; i < TWT_ARRAY_SIZE(bad_aim); i++) {
        setenv(bad_aim[i][0], bad_aim[i][1], 1);
        TWT_CHECKF(tw_init(NULL, &ctx) == TW_ERR_INVALID, "%s=%s accepted", bad_aim[i][0],
                   bad_aim[i][1]);
        unsetenv(bad_aim[i][0]);
    }
    setenv("TW_FAULT_ON", "self", 1);
    setenv("TW_FAULT_RANKS", "0", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_OK); /* a job of one: rank 0, transport self */
    TWT_EQ(tw_finalize(ctx), TW_OK);
    unsetenv("TW_FAULT_ON");
    unsetenv("TW_FAULT_RANKS");
    unsetenv("TW_FAULT");
    /* Another launcher started several processes: refuse to run alone. */
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_BOOTSTRAP);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    /* Launcher variables that do not add up, or a launcher that is gone. */
    setenv("TW_SIZE", "2", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_BOOTSTRAP); /* no TW_BOOT_ADDR */
    setenv("TW_BOOT_ADDR", "/nonexistent/twrun.sock", 1);
    setenv("TW_RANK", "0", 1);
    setenv("TW_JOB_KEY", "00112233445566778899aabbccddeeff", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_BOOTSTRAP); /* no TW_LOCAL_RANK / _SIZE */
    setenv("TW_LOCAL_RANK", "0", 1);
    setenv("TW_LOCAL_SIZE", "3", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_BOOTSTRAP); /* local size > size */
    setenv("TW_LOCAL_SIZE", "1", 1);
    setenv("TW_SIZE", "1", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_BOOTSTRAP); /* cannot reach it */
    setenv("TW_RANK", "1", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_ERR_BOOTSTRAP); /* rank out of range */
    unsetenv("TW_SIZE");
    unsetenv("TW_BOOT_ADDR");
    unsetenv("TW_RANK");
    unsetenv("TW_JOB_KEY");
    unsetenv("TW_LOCAL_RANK");
    unsetenv("TW_LOCAL_SIZE");
    /* Unknown TW_* variables are a warning, not an error. */
    setenv("TW_NO_SUCH_KNOB", "1", 1);
    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    TWT_EQ(tw_finalize(ctx), TW_OK);
    unsetenv("TW_NO_SUCH_KNOB");
}

int main(void)
{
    tw_context_t *ctx, *other;
    tw_cq_t *cq, *other_cq;
    tw_completion_t c;
    char buf[16];

    TWT_CHECK(tw_strerror(TW_OK) != NULL);
    TWT_CHECK(strcmp(tw_strerror((tw_status_t)12345), "unknown status") == 0);
    for (int s = 0; s >= TW_ERR_BOOTSTRAP; s--) {
        TWT_CHECK(tw_strerror((tw_status_t)s) != NULL && tw_strerror((tw_status_t)s)[0]);
    }
    check_config_errors();

    TWT_EQ(tw_init(NULL, &ctx), TW_OK);
    TWT_EQ(tw_init(NULL, &other), TW_OK);

    /* NULL handles */
    TWT_EQ(tw_rank(NULL), -1);
    TWT_EQ(tw_size(NULL), -1);
    TWT_EQ(tw_progress(NULL), -1);
    TWT_EQ(tw_cq_create(NULL, 8, &cq), TW_ERR_INVALID);
    TWT_EQ(tw_cq_create(ctx, 8, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_cq_destroy(NULL), TW_ERR_INVALID);
    TWT_EQ(tw_cq_poll(NULL, &c, 1), -1);
    TWT_EQ(tw_cq_wait(NULL, &c, 1, 0), -1);
    TWT_EQ(tw_cq_fd(NULL), -1);
    TWT_EQ(tw_set_error_handler(NULL, NULL, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_stats_print(NULL, stdout), TW_ERR_INVALID);
    TWT_EQ(tw_stats_print(ctx, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_finalize(NULL), TW_ERR_INVALID);

    /* depth */
    TWT_EQ(tw_cq_create(ctx, 0, &cq), TW_ERR_INVALID);
    TWT_EQ(tw_cq_create(ctx, (1u << 20) + 1, &cq), TW_ERR_INVALID);
    TWT_EQ(tw_cq_create(ctx, 2, &cq), TW_OK);
    TWT_EQ(tw_cq_create(other, 2, &other_cq), TW_OK);
    TWT_EQ(tw_cq_poll(cq, NULL, 1), -1);
    TWT_EQ(tw_cq_poll(cq, &c, -1), -1);
    TWT_EQ(tw_cq_poll(cq, &c, 0), 0);

    /* sends and receives */
    TWT_EQ(tw_send(NULL, 0, 1, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_send(ctx, 1, 1, buf, 1, cq, NULL), TW_ERR_INVALID);  /* rank 1 of 1 */
    TWT_EQ(tw_send(ctx, -1, 1, buf, 1, cq, NULL), TW_ERR_INVALID); /* ANY is for receives */
    TWT_EQ(tw_send(ctx, 0, 1, NULL, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_send(ctx, 0, 1, buf, SIZE_MAX, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_send(ctx, 0, 1, buf, SIZE_MAX - 8, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_send(ctx, 0, 1, buf, (size_t)PTRDIFF_MAX + 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_send(ctx, 0, 1, buf, 1, NULL, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_send(ctx, 0, 1, buf, 1, other_cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_recv(ctx, -2, 1, 0, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_recv(ctx, 5, 1, 0, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_recv(ctx, 0, 1, 0, NULL, 4, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_recv(ctx, 0, 1, 0, buf, SIZE_MAX, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_recv(ctx, TW_ANY_SOURCE, 1, 0, buf, 1, other_cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_am_register(ctx, 1, NULL, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_am_send(ctx, 0, 1, NULL, 4, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_am_send(ctx, 0, 1, buf, TW_AM_HDR_MAX + 1, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_am_send(ctx, 0, 1, buf, 1, buf, SIZE_MAX, cq, NULL), TW_ERR_INVALID);
    /* Zero length with NULL is fine. */
    TWT_EQ(tw_send(ctx, 0, 1, NULL, 0, cq, NULL), TW_OK);

    /* Depth 2: the third outstanding operation is refused, not dropped. */
    TWT_EQ(tw_recv(ctx, 0, 99, 0, buf, sizeof(buf), cq, buf), TW_OK);
    TWT_EQ(tw_recv(ctx, 0, 98, 0, buf, sizeof(buf), cq, buf), TW_ERR_AGAIN);
    TWT_EQ(tw_send(ctx, 0, 98, buf, 1, cq, NULL), TW_ERR_AGAIN);
    /* Destroying a CQ with an operation outstanding is refused. */
    TWT_EQ(tw_cq_wait(cq, &c, 1, 5000), 1); /* the zero-length send */
    TWT_EQ(c.op, TW_OP_SEND);
    TWT_EQ(tw_cq_destroy(cq), TW_ERR_AGAIN);
    TWT_EQ(tw_cq_wait(cq, &c, 1, 50), 0); /* receive 99 is still posted */

    /* Finalize cancels it; the CQ outlives the context. */
    TWT_EQ(tw_finalize(ctx), TW_OK);
    TWT_EQ(tw_cq_poll(cq, &c, 1), 1);
    TWT_EQ(c.op, TW_OP_RECV);
    TWT_EQ(c.status, TW_ERR_CANCELED);
    TWT_CHECK(c.user == buf);

    /* Calls after finalize */
    TWT_EQ(tw_finalize(ctx), TW_ERR_INVALID);
    TWT_EQ(tw_rank(ctx), -1);
    TWT_EQ(tw_size(ctx), -1);
    TWT_EQ(tw_progress(ctx), -1);
    TWT_EQ(tw_send(ctx, 0, 1, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_recv(ctx, 0, 1, 0, buf, 1, cq, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_am_register(ctx, 3, NULL, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_cq_create(ctx, 8, &cq), TW_ERR_INVALID); /* cq keeps its value */
    TWT_EQ(tw_set_error_handler(ctx, NULL, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_stats_print(ctx, stdout), TW_ERR_INVALID);
    TWT_EQ(tw_cq_wait(cq, &c, 1, 10), 0);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);

    /* The other context is unaffected. */
    TWT_EQ(tw_send(other, 0, 5, buf, 3, other_cq, NULL), TW_OK);
    TWT_EQ(tw_cq_wait(other_cq, &c, 1, 5000), 1);
    TWT_EQ(c.status, TW_OK);
    TWT_EQ(tw_cq_destroy(other_cq), TW_OK);
    TWT_EQ(tw_finalize(other), TW_OK);
    printf("bad arguments: all refused with errors\n");
    return 0;
}
