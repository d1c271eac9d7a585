/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Logging: level parsing, filtering, counts, line format, whole lines, and
 * the test rule (an undeclared warn or error line is flagged). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "tw_test.h"

/* ---- stderr capture ---------------------------------------------------- */

static int saved_stderr = -1;
static FILE *capture_file;

static void capture_begin(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    TWT_CHECK(capture_file != NULL);
    saved_stderr = dup(STDERR_FILENO);
    TWT_CHECK(saved_stderr >= 0);
    TWT_CHECK(dup2(fileno(capture_file), STDERR_FILENO) == STDERR_FILENO);
}

/* Returns what was written (malloc'd, NUL-terminated). */
static char *capture_end(size_t *len_p)
{
    long len;
    char *text;

    fflush(stderr);
    TWT_CHECK(dup2(saved_stderr, STDERR_FILENO) == STDERR_FILENO);
    close(saved_stderr);
    TWT_CHECK(fseek(capture_file, 0, SEEK_END) == 0);
    len = ftell(capture_file);
    TWT_CHECK(len >= 0);
    rewind(capture_file);
    text = malloc((size_t)len + 1);
    TWT_CHECK(text != NULL);
    TWT_CHECK(fread(text, 1, (size_t)len, capture_file) == (size_t)len);
    text[len] = '\0';
    fclose(capture_file);
    if (len_p != NULL) {
        *len_p = (size_t)len;
    }
    return text;
}

/* ---- tests ------------------------------------------------------------- */

static void test_parse(void)
{
    TWT_EQ(tw_log_level_parse("error"), TW_LOG_ERROR);
    TWT_EQ(tw_log_level_parse("warn"), TW_LOG_WARN);
    TWT_EQ(tw_log_level_parse("info"), TW_LOG_INFO);
    TWT_EQ(tw_log_level_parse("debug"), TW_LOG_DEBUG);
    TWT_EQ(tw_log_level_parse("trace"), TW_LOG_TRACE);
    TWT_EQ(tw_log_level_parse("DEBUG"), TW_LOG_DEBUG);
    TWT_EQ(tw_log_level_parse("warning"), -1);
    TWT_EQ(tw_log_level_parse(""), -1);
    TWT_EQ(tw_log_level_parse(NULL), -1);
    TWT_CHECK(strcmp(tw_log_level_name(TW_LOG_WARN), "warn") == 0);
    TWT_CHECK(strcmp(tw_log_level_name(TW_LOG_TRACE), "trace") == 0);
    TWT_CHECK(strcmp(tw_log_level_name((tw_log_level_t)42), "unknown") == 0);
}

static void test_filter_and_counts(void)
{
    uint64_t e0 = tw_log_count(TW_LOG_ERROR), w0 = tw_log_count(TW_LOG_WARN);
    uint64_t i0 = tw_log_count(TW_LOG_INFO), d0 = tw_log_count(TW_LOG_DEBUG);
    size_t len;
    char *out;

    tw_log_set_level(TW_LOG_WARN);
    TWT_EQ(tw_log_level(), TW_LOG_WARN);
    capture_begin();
    tw_error("test", "an error %d", 1);
    tw_warn("test", "a warning %d", 2);
    tw_info("test", "not shown %d", 3);
    tw_debug("test", "not shown %d", 4);
    tw_log_emit(TW_LOG_INFO, "test", __FILE__, __LINE__, "direct call, also filtered");
    out = capture_end(&len);
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0 + 1);
    TWT_EQ(tw_log_count(TW_LOG_WARN), w0 + 1);
    TWT_EQ(tw_log_count(TW_LOG_INFO), i0);
    TWT_EQ(tw_log_count(TW_LOG_DEBUG), d0);
    TWT_CHECKF(strstr(out, "not shown") == NULL && strstr(out, "direct") == NULL, "%s", out);
    TWT_CHECK(strstr(out, "] error: an error 1\n") != NULL);
    TWT_CHECK(strstr(out, "] warn: a warning 2\n") != NULL);
    free(out);

    tw_log_set_level(TW_LOG_INFO);
    capture_begin();
    tw_info("test", "now shown");
    out = capture_end(NULL);
    TWT_EQ(tw_log_count(TW_LOG_INFO), i0 + 1);
    TWT_CHECK(strstr(out, "] info: now shown\n") != NULL);
    free(out);

    /* Out-of-range levels are ignored. */
    tw_log_set_level((tw_log_level_t)17);
    TWT_EQ(tw_log_level(), TW_LOG_INFO);
    TWT_EQ(tw_log_count((tw_log_level_t)17), 0);
    tw_log_set_level(TW_LOG_WARN);
}

static void test_format(void)
{
    char expect[256];
    char *out;
    int line;

    tw_log_set_level(TW_LOG_WARN);
    tw_log_set_rank(-1);
    capture_begin();
    tw_warn("core", "cq %p overflow on %s", (void *)0, "peer 3");
    out = capture_end(NULL);
    snprintf(expect, sizeof(expect), "[tw %d:%d core] warn: cq (nil) overflow on peer 3\n",
             (int)getpid(), tw_gettid());
    TWT_CHECKF(strcmp(out, expect) == 0, "got '%s' expected '%s'", out, expect);
    free(out);

    tw_log_set_rank(5);
    capture_begin();
    tw_error("progress", "device %s failed", "mlx5_0");
    out = capture_end(NULL);
    snprintf(expect, sizeof(expect), "[tw %d:%d r5 progress] error: device mlx5_0 failed\n",
             (int)getpid(), tw_gettid());
    TWT_CHECKF(strcmp(out, expect) == 0, "got '%s' expected '%s'", out, expect);
    free(out);
    tw_log_set_rank(-1);

    /* A trailing newline in the message does not end the line twice. */
    capture_begin();
    tw_warn("core", "with newline\n");
    out = capture_end(NULL);
    TWT_CHECKF(strstr(out, "] warn: with newline\n") != NULL && strchr(out, '\n')[1] == '\0', "%s",
               out);
    free(out);

    /* At debug level every line tells where it came from. */
    tw_log_set_level(TW_LOG_DEBUG);
    capture_begin();
    line = __LINE__ + 1;
    tw_debug("core", "located");
    out = capture_end(NULL);
    snprintf(expect, sizeof(expect), "[tw %d:%d core] debug: located (test_core_log.c:%d)\n",
             (int)getpid(), tw_gettid(), line);
    TWT_CHECKF(strcmp(out, expect) == 0, "got '%s' expected '%s'", out, expect);
    free(out);
    tw_log_set_level(TW_LOG_WARN);
}

static void test_truncation(void)
{
    size_t n = 5000, len;
    char *big = malloc(n + 1);
    char *out;

    TWT_CHECK(big != NULL);
    memset(big, 'x', n);
    big[n] = '\0';
    capture_begin();
    tw_warn("core", "%s", big);
    out = capture_end(&len);
    TWT_CHECKF(len <= 1025 && len > 500, "len %zu", len);
    TWT_CHECK(strncmp(out, "[tw ", 4) == 0);
    TWT_CHECK(strcmp(out + len - 4, "...\n") == 0);
    TWT_CHECK(strchr(out, '\n') == out + len - 1); /* exactly one line */
    free(out);
    free(big);
}

/* Concurrent writers never interleave within a line. */
#define WRITERS 4
#define LINES   200

static void *writer(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    for (int i = 0; i < LINES; i++) {
        tw_warn("mt", "writer %u line %d %s", (unsigned)id, i,
                "payload-payload-payload-payload-payload-payload-payload-payload");
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[WRITERS];
    char *out, *save = NULL;
    int lines = 0;
    uint64_t w0 = tw_log_count(TW_LOG_WARN);

    tw_log_set_level(TW_LOG_WARN);
    capture_begin();
    for (uintptr_t i = 0; i < WRITERS; i++) {
        TWT_EQ(pthread_create(&th[i], NULL, writer, (void *)i), 0);
    }
    for (int i = 0; i < WRITERS; i++) {
        TWT_EQ(pthread_join(th[i], NULL), 0);
    }
    out = capture_end(NULL);
    TWT_EQ(tw_log_count(TW_LOG_WARN), w0 + WRITERS * LINES);
    for (char *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        unsigned id;
        int i, pid, tid, consumed = 0;
        TWT_CHECKF(sscanf(l, "[tw %d:%d mt] warn: writer %u line %d %n", &pid, &tid, &id, &i,
                          &consumed) == 4,
                   "bad line '%s'", l);
        TWT_EQ(pid, getpid());
        TWT_CHECKF(strcmp(l + consumed,
                          "payload-payload-payload-payload-payload-payload-payload-payload") == 0,
                   "bad line '%s'", l);
        lines++;
    }
    TWT_EQ(lines, WRITERS * LINES);
    free(out);
}

/* A bad TW_LOG_LEVEL: warn, keep the default. Runs in a fresh process. */
static int child_bad_level(void)
{
    int level = tw_log_level();
    printf("level=%d warns=%llu\n", level, (unsigned long long)tw_log_count(TW_LOG_WARN));
    return 0;
}

/* Runs @p self @p mode in a child whose environment has @p n_env "NAME=value"
 * pairs set (value NULL: unset); returns its exit code, its stdout and
 * stderr in @p out. */
static int run_child(const char *self, const char *mode, const char *const *env, size_t n_env,
                     char *out, size_t cap)
{
    int pipefd[2], status;
    size_t len = 0;
    ssize_t n;
    pid_t pid;

    TWT_EQ(pipe(pipefd), 0);
    pid = fork();
    TWT_CHECK(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        for (size_t i = 0; i + 1 < n_env; i += 2) {
            if (env[i + 1] != NULL) {
                setenv(env[i], env[i + 1], 1);
            } else {
                unsetenv(env[i]);
            }
        }
        execl(self, self, mode, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    while (len < cap - 1 && (n = read(pipefd[0], out + len, cap - 1 - len)) > 0) {
        len += (size_t)n;
    }
    out[len] = '\0';
    close(pipefd[0]);
    TWT_EQ(waitpid(pid, &status, 0), pid);
    TWT_CHECKF(WIFEXITED(status), "child status %d: %s", status, out);
    return WEXITSTATUS(status);
}

static void test_env(const char *self)
{
    const char *const env[] = {"TW_LOG_LEVEL", "loud"};
    char out[4096];

    TWT_EQ(run_child(self, "child-bad-level", env, TWT_ARRAY_SIZE(env), out, sizeof(out)), 0);
    TWT_CHECKF(strstr(out, "] warn: bad value 'loud' for TW_LOG_LEVEL") != NULL, "%s", out);
    TWT_CHECKF(strstr(out, "level=1 warns=1\n") != NULL, "%s", out);
}

/* ---- the test rule (tests/README.md) ----------------------------------- */

#define RULE_MARKER "tw-test: unexpected log line: "

/* Logs two declared lines, one undeclared warning, one undeclared error
 * and an info line (never checked); reports its count, then leaves as
 * @p how says: "exit0", "exit77", or "_exit0" (no exit handlers, as a
 * process killed or leaving by _exit). */
static int child_rule(const char *how)
{
    tw_log_set_level(TW_LOG_INFO);
    tw_warn("rule", "peer %d declared gone", 3);
    tw_error("rule", "declared too: device %s", "mlx5_0");
    tw_warn("rule", "a surprise on peer %d", 4);
    tw_error("rule", "an unexpected error");
    tw_info("rule", "info lines are not checked");
    printf("unexpected=%llu\n", (unsigned long long)tw_log_test_unexpected());
    fflush(NULL);
    if (strcmp(how, "_exit0") == 0) {
        _exit(0);
    }
    return strcmp(how, "exit77") == 0 ? 77 : 0;
}

static size_t count_str(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(text, what); p != NULL; p = strstr(p + 1, what)) {
        n++;
    }
    return n;
}

static void test_rule(const char *self)
{
    const char *const strict[] = {"TWTEST_LOG_STRICT", "1", "TWTEST_EXPECT_LOG",
                                  "peer [0-9]+ declared gone\n\ndeclared too: device mlx5_"};
    const char *const lax[] = {"TWTEST_LOG_STRICT", NULL, "TWTEST_EXPECT_LOG", NULL};
    const char *const bad[] = {"TWTEST_LOG_STRICT", "1", "TWTEST_EXPECT_LOG", "(unclosed"};
    char out[8192];

    /* Strict: exactly the two undeclared lines are flagged, right after
     * themselves, and exit 0 becomes 1. */
    TWT_EQ(run_child(self, "child-rule-exit0", strict, TWT_ARRAY_SIZE(strict), out, sizeof(out)),
           1);
    TWT_CHECKF(count_str(out, RULE_MARKER) == 2, "%s", out);
    TWT_CHECKF(strstr(out, "] warn: a surprise on peer 4\n" RULE_MARKER "[tw ") != NULL, "%s", out);
    TWT_CHECKF(strstr(out, "] error: an unexpected error\n" RULE_MARKER "[tw ") != NULL, "%s", out);
    TWT_CHECKF(strstr(out, "declared gone\n" RULE_MARKER) == NULL, "%s", out);
    TWT_CHECKF(strstr(out, "unexpected=2\n") != NULL, "%s", out);
    TWT_CHECKF(strstr(out, "tw-test: 2 unexpected log line(s): exit 1, not 0\n") != NULL, "%s",
               out);

    /* A skip (77) after an unexpected line fails too: ctest would report
     * a skip and never look for the marker. */
    TWT_EQ(run_child(self, "child-rule-exit77", strict, TWT_ARRAY_SIZE(strict), out, sizeof(out)),
           1);
    TWT_CHECKF(count_str(out, RULE_MARKER) == 2, "%s", out);

    /* Leaving by _exit: the markers remain, for ctest to see. */
    TWT_EQ(run_child(self, "child-rule-_exit0", strict, TWT_ARRAY_SIZE(strict), out, sizeof(out)),
           0);
    TWT_CHECKF(count_str(out, RULE_MARKER) == 2, "%s", out);

    /* Not strict: nothing flagged, nothing counted, exit codes kept. */
    TWT_EQ(run_child(self, "child-rule-exit77", lax, TWT_ARRAY_SIZE(lax), out, sizeof(out)), 77);
    TWT_CHECKF(strstr(out, "tw-test:") == NULL && strstr(out, "unexpected=0\n") != NULL, "%s", out);

    /* A pattern that does not compile is reported; every line is then
     * unexpected. */
    TWT_EQ(run_child(self, "child-rule-_exit0", bad, TWT_ARRAY_SIZE(bad), out, sizeof(out)), 0);
    TWT_CHECKF(strstr(out, "tw-test: bad TWTEST_EXPECT_LOG pattern '(unclosed'") != NULL, "%s",
               out);
    TWT_CHECKF(count_str(out, RULE_MARKER) == 4, "%s", out);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child-bad-level") == 0) {
        return child_bad_level();
    }
    if (argc > 1 && strncmp(argv[1], "child-rule-", 11) == 0) {
        return child_rule(argv[1] + 11);
    }
    /* The environment is read at first use: this setting must win. */
    setenv("TW_LOG_LEVEL", "Error", 1);
    TWT_EQ(tw_log_level(), TW_LOG_ERROR);
    unsetenv("TW_LOG_LEVEL");

    test_parse();
    test_filter_and_counts();
    test_format();
    test_truncation();
    test_threads();
    test_env("/proc/self/exe");
    test_rule("/proc/self/exe");
    return 0;
}
