/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Each message is formatted into a stack buffer and written with a single
 * fwrite, so lines from concurrent threads never interleave (stdio locks
 * the stream for the call, and stderr is unbuffered: one write(2)).
 *
 * The level is read on every tw_log() call: a relaxed load, with the
 * environment read once (pthread_once) the first time the level is
 * needed. A negative stored level means "not read yet".
 *
 * The test rule (builds with the test hooks, tests/README.md): when
 * TWTEST_LOG_STRICT=1, each warn and error line, once formatted, is matched
 * against the POSIX extended regular expressions in TWTEST_EXPECT_LOG, one
 * per line of the variable (a log line never holds a newline, so no pattern
 * needs one). A line that none matches is followed by a marker line,
 * "tw-test: unexpected log line: <the line>", which fails the test in ctest
 * (FAIL_REGULAR_EXPRESSION), and is counted; a process that counted one
 * exits 1 where it would exit 0 or 77 (rule_on_exit). The variables are read and the
 * patterns compiled once (pthread_once); regexec on a compiled pattern is
 * thread-safe (POSIX), so matching takes no lock.
 */
#define _GNU_SOURCE
#include "core/tw_log.h"

#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/tw_atomic.h"

#define TW_LOG_DEFAULT_LEVEL TW_LOG_WARN
#define TW_LOG_LINE_MAX      1024
#define TW_LOG_NLEVELS       (TW_LOG_TRACE + 1)

static const char *const level_names[TW_LOG_NLEVELS] = {
    [TW_LOG_ERROR] = "error", [TW_LOG_WARN] = "warn",   [TW_LOG_INFO] = "info",
    [TW_LOG_DEBUG] = "debug", [TW_LOG_TRACE] = "trace",
};

static atomic_int log_level_v = -1;                     /* relaxed; -1 until log_init ran */
static atomic_int log_rank = -1;                        /* relaxed */
static atomic_uint_fast64_t log_counts[TW_LOG_NLEVELS]; /* relaxed */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_write(tw_log_level_t level, const char *subsys, const char *file, int line,
                      const char *fmt, va_list ap) TW_PRINTF(5, 0);

static void log_write_fmt(tw_log_level_t level, const char *subsys, const char *fmt, ...)
    TW_PRINTF(3, 4);

static void log_write_fmt(tw_log_level_t level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_write(level, subsys, __FILE__, __LINE__, fmt, ap);
    va_end(ap);
}

static void log_init(void)
{
    const char *env = getenv("TW_LOG_LEVEL");
    int level = TW_LOG_DEFAULT_LEVEL;
    int parsed = env != NULL ? tw_log_level_parse(env) : -1;

    if (parsed >= 0) {
        level = parsed;
    }
    atomic_store_explicit(&log_level_v, level, memory_order_relaxed);
    if (env != NULL && parsed < 0) {
        /* Direct write: tw_log() here would re-enter log_once. */
        log_write_fmt(TW_LOG_WARN, "log",
                      "bad value '%s' for TW_LOG_LEVEL: expected one of "
                      "error|warn|info|debug|trace; using %s",
                      env, level_names[level]);
    }
}

static inline int log_level_get(void)
{
    int level = atomic_load_explicit(&log_level_v, memory_order_relaxed);

    if (TW_UNLIKELY(level < 0)) {
        pthread_once(&log_once, log_init);
        level = atomic_load_explicit(&log_level_v, memory_order_relaxed);
    }
    return level;
}

tw_log_level_t tw_log_level(void)
{
    return (tw_log_level_t)log_level_get();
}

void tw_log_set_level(tw_log_level_t level)
{
    if ((int)level < TW_LOG_ERROR || level > TW_LOG_TRACE) {
        return;
    }
    /* Read the environment first, or it would later override this call. */
    pthread_once(&log_once, log_init);
    atomic_store_explicit(&log_level_v, (int)level, memory_order_relaxed);
}

int tw_log_level_parse(const char *name)
{
    if (name == NULL) {
        return -1;
    }
    for (int i = 0; i < TW_LOG_NLEVELS; i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *tw_log_level_name(tw_log_level_t level)
{
    if ((int)level < TW_LOG_ERROR || level > TW_LOG_TRACE) {
        return "unknown";
    }
    return level_names[level];
}

void tw_log_set_rank(int rank)
{
    atomic_store_explicit(&log_rank, rank < 0 ? -1 : rank, memory_order_relaxed);
}

uint64_t tw_log_count(tw_log_level_t level)
{
    if ((int)level < TW_LOG_ERROR || level > TW_LOG_TRACE) {
        return 0;
    }
    return atomic_load_explicit(&log_counts[level], memory_order_relaxed);
}

/* Appends to buf[*pos..cap); *pos stops at cap - 1 when the text is cut. */
static void buf_vappend(char *buf, size_t cap, size_t *pos, const char *fmt, va_list ap)
    TW_PRINTF(4, 0);

static void buf_vappend(char *buf, size_t cap, size_t *pos, const char *fmt, va_list ap)
{
    if (*pos >= cap - 1) {
        return;
    }
    int n = vsnprintf(buf + *pos, cap - *pos, fmt, ap);
    if (n < 0) {
        return;
    }
    *pos = TW_MIN(*pos + (size_t)n, cap - 1);
}

static void buf_append(char *buf, size_t cap, size_t *pos, const char *fmt, ...) TW_PRINTF(4, 5);

static void buf_append(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vappend(buf, cap, pos, fmt, ap);
    va_end(ap);
}

#if TW_TESTING
#define TW_LOG_RULE_MARKER "tw-test: unexpected log line: "

static bool rule_strict;
static regex_t *rule_patterns;
static size_t rule_npatterns;
static atomic_uint_fast64_t rule_unexpected; /* relaxed */
static pthread_once_t rule_once = PTHREAD_ONCE_INIT;

/* A marker in output that a script captured, or a rank's that twrun's
 * caller never shows, would go unseen; and exit code 77 reads as "skipped"
 * in ctest, which then ignores the output. So a process that logged an
 * unexpected line and exits 0 or 77 exits 1 instead. */
static void rule_on_exit(int status, void *arg)
{
    uint64_t n = atomic_load_explicit(&rule_unexpected, memory_order_relaxed);

    (void)arg;
    if (n > 0 && (status == 0 || status == 77)) {
        fprintf(stderr, "tw-test: %llu unexpected log line(s): exit 1, not %d\n",
                (unsigned long long)n, status);
        fflush(NULL);
        _exit(1);
    }
}

/* Compiles the patterns of TWTEST_EXPECT_LOG. Writes with fprintf, not
 * tw_log: a log line from here would wait for this very pthread_once. */
static void rule_init(void)
{
    const char *strict = getenv("TWTEST_LOG_STRICT");
    const char *env = getenv("TWTEST_EXPECT_LOG");
    char *list, *save = NULL;
    size_t max = 1;

    if (strict == NULL || strcmp(strict, "1") != 0) {
        return;
    }
    rule_strict = true;
    on_exit(rule_on_exit, NULL);
    if (env == NULL || env[0] == '\0') {
        return;
    }
    for (const char *c = env; *c != '\0'; c++) {
        max += *c == '\n';
    }
    list = strdup(env);
    rule_patterns = calloc(max, sizeof(*rule_patterns));
    if (list == NULL || rule_patterns == NULL) {
        fprintf(stderr, "tw-test: bad TWTEST_EXPECT_LOG pattern: out of memory\n");
        free(list);
        return;
    }
    /* Empty patterns are skipped: one would match every line. */
    for (char *p = strtok_r(list, "\n", &save); p != NULL; p = strtok_r(NULL, "\n", &save)) {
        int rc = regcomp(&rule_patterns[rule_npatterns], p, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char why[128];
            regerror(rc, &rule_patterns[rule_npatterns], why, sizeof(why));
            fprintf(stderr, "tw-test: bad TWTEST_EXPECT_LOG pattern '%s': %s\n", p, why);
            continue;
        }
        rule_npatterns++;
    }
    free(list);
}

/* Flags @p line (NUL-terminated, without its newline) when strict and no
 * pattern matches it. */
static void rule_check(const char *line)
{
    pthread_once(&rule_once, rule_init);
    if (!rule_strict) {
        return;
    }
    for (size_t i = 0; i < rule_npatterns; i++) {
        if (regexec(&rule_patterns[i], line, 0, NULL, 0) == 0) {
            return;
        }
    }
    atomic_fetch_add_explicit(&rule_unexpected, 1, memory_order_relaxed);
    fprintf(stderr, TW_LOG_RULE_MARKER "%s\n", line);
}

uint64_t tw_log_test_unexpected(void)
{
    return atomic_load_explicit(&rule_unexpected, memory_order_relaxed);
}
#endif

static void log_write(tw_log_level_t level, const char *subsys, const char *file, int line,
                      const char *fmt, va_list ap)
{
    /* One byte more than the line so the newline always fits. */
    char buf[TW_LOG_LINE_MAX + 1];
    const size_t cap = TW_LOG_LINE_MAX; /* text, without the newline */
    size_t pos = 0;
    int rank = atomic_load_explicit(&log_rank, memory_order_relaxed);
    int cur = atomic_load_explicit(&log_level_v, memory_order_relaxed);

    if (rank >= 0) {
        buf_append(buf, cap, &pos, "[tw %d:%d r%d %s] %s: ", (int)getpid(), tw_gettid(), rank,
                   subsys, level_names[level]);
    } else {
        buf_append(buf, cap, &pos, "[tw %d:%d %s] %s: ", (int)getpid(), tw_gettid(), subsys,
                   level_names[level]);
    }
    buf_vappend(buf, cap, &pos, fmt, ap);
    /* A message must not end its own line early. */
    while (pos > 0 && buf[pos - 1] == '\n') {
        pos--;
    }
    if (cur >= TW_LOG_DEBUG && file != NULL) {
        const char *base = strrchr(file, '/');
        buf_append(buf, cap, &pos, " (%s:%d)", base != NULL ? base + 1 : file, line);
    }
    if (pos >= cap - 1) {
        /* Truncated: mark it. */
        memcpy(buf + cap - 4, "...", 3);
        pos = cap - 1;
    }
    buf[pos++] = '\n';

    atomic_fetch_add_explicit(&log_counts[level], 1, memory_order_relaxed);
    fwrite(buf, 1, pos, stderr);
#if TW_TESTING
    if (level <= TW_LOG_WARN) {
        buf[pos - 1] = '\0';
        rule_check(buf);
    }
#endif
}

void tw_log_emit(tw_log_level_t level, const char *subsys, const char *file, int line,
                 const char *fmt, ...)
{
    va_list ap;

    if ((int)level < TW_LOG_ERROR || level > TW_LOG_TRACE || (int)level > log_level_get()) {
        return;
    }
    va_start(ap, fmt);
    log_write(level, subsys != NULL ? subsys : "-", file, line, fmt, ap);
    va_end(ap);
}
