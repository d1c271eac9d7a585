/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_stats_json against tw_stats_print, in a job of one with manual
 * progress (no engine thread moves a counter between the two reads):
 *
 *   test_stats_json | twt_stats.py - QUERY...      (stats.cmake)
 *
 * After NMSG messages to itself over self, every "name=value" of the text
 * report must appear as "name":value in the JSON; the JSON goes to stdout
 * for twt_stats.py, which parses it (json.loads) and asserts the counters
 * of the traffic. Bad arguments are refused, and strings with quotes,
 * backslashes, control and non-ASCII bytes come out escaped.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tw_stats.h"
#include "threadwire/threadwire.h"
#include "tw_test.h"

#define NMSG 5

static char *capture(tw_context_t *ctx, tw_status_t (*fn)(tw_context_t *, FILE *))
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    TWT_CHECK(f != NULL);
    TWT_EQ(fn(ctx, f), TW_OK);
    TWT_EQ(fclose(f), 0);
    return text;
}

/* Every "name=value" of the text report is a "name":value of the JSON. */
static void same_counters(const char *text, const char *json)
{
    char *copy = strdup(text), *save = NULL;
    unsigned n = 0;

    TWT_CHECK(copy != NULL);
    for (char *tok = strtok_r(copy, " \n", &save); tok != NULL;
         tok = strtok_r(NULL, " \n", &save)) {
        char *eq = strchr(tok, '='), want[128];
        if (eq == NULL || eq[1] < '0' || eq[1] > '9') {
            continue;
        }
        *eq = '\0';
        snprintf(want, sizeof(want), "\"%s\":%s", tok, eq + 1);
        TWT_CHECKF(strstr(json, want) != NULL, "%s is not in the JSON:\n%s", want, json);
        n++;
    }
    TWT_CHECKF(n >= 30, "only %u counters in the text report:\n%s", n, text);
    free(copy);
}

static void escapes(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    TWT_CHECK(f != NULL);
    tw_stats_json_string("a\"b\\c\n\t\x01\x7f\xc3", f);
    tw_stats_json_string(NULL, f);
    TWT_EQ(fclose(f), 0);
    TWT_CHECKF(strcmp(text, "\"a\\\"b\\\\c\\u000a\\u0009\\u0001\\u007f\\u00c3\"\"\"") == 0,
               "escaped as %s", text);
    free(text);
}

int main(void)
{
    tw_config_t cfg;
    tw_context_t *ctx;
    tw_cq_t *cq;
    tw_completion_t c[2 * NMSG];
    char buf[NMSG][64];
    int got = 0;

    escapes();
    tw_config_init(&cfg);
    cfg.transports = "self";
    cfg.progress_threads = 0;
    TWT_EQ(tw_init(&cfg, &ctx), TW_OK);
    TWT_EQ(tw_stats_json(NULL, stdout), TW_ERR_INVALID);
    TWT_EQ(tw_stats_json(ctx, NULL), TW_ERR_INVALID);
    TWT_EQ(tw_cq_create(ctx, 2 * NMSG, &cq), TW_OK);
    for (int i = 0; i < NMSG; i++) {
        TWT_EQ(tw_recv(ctx, 0, (uint64_t)i, 0, buf[i], sizeof(buf[i]), cq, NULL), TW_OK);
        TWT_EQ(tw_send(ctx, 0, (uint64_t)i, "json", 5, cq, NULL), TW_OK);
    }
    for (double t0 = twt_now(); got < 2 * NMSG; got += tw_cq_poll(cq, c, 2 * NMSG - got)) {
        TWT_CHECKF(twt_now() - t0 < 10, "%d of %d completions", got, 2 * NMSG);
        tw_progress(ctx);
    }
    char *text = capture(ctx, tw_stats_print), *json = capture(ctx, tw_stats_json);
    TWT_CHECKF(strchr(json, '\n') == json + strlen(json) - 1, "not one line:\n%s", json);
    same_counters(text, json);
    fputs(json, stdout);
    free(text);
    free(json);
    TWT_EQ(tw_cq_destroy(cq), TW_OK);
    TWT_EQ(tw_finalize(ctx), TW_OK);
    return 0;
}
