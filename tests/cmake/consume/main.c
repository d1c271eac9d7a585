/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* A tiny threadwire program built against the installed library. */
#include <stdio.h>
#include <string.h>
#include <threadwire/threadwire.h>

int main(void)
{
    tw_context_t *ctx;
    tw_cq_t *cq;
    tw_completion_t c[2];
    char out[] = "consumed", in[16] = {0};
    int got = 0;

    if (tw_init(NULL, &ctx) != TW_OK || tw_cq_create(ctx, 4, &cq) != TW_OK) {
        return 1;
    }
    tw_recv(ctx, 0, 1, 0, in, sizeof(in), cq, NULL);
    tw_send(ctx, 0, 1, out, sizeof(out), cq, NULL);
    while (got < 2) {
        int n = tw_cq_wait(cq, c, 2, 5000);
        if (n <= 0) {
            return 1;
        }
        got += n;
    }
    tw_cq_destroy(cq);
    tw_finalize(ctx);
    printf("%s\n", in);
    return strcmp(in, out) == 0 ? 0 : 1;
}
