/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Configuration tables: every type, good and bad values, unknown variables. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "core/tw_log.h"
#include "tw_test.h"

typedef struct test_cfg {
    bool flag;
    int count;
    int bounded;
    uint64_t big;
    uint64_t ranged;
    size_t size;
    size_t size_ranged;
    uint64_t timeout_ns;
    int mode;
    char name[TW_CFG_STRLEN];
} test_cfg_t;

static const char *const modes[] = {"adaptive", "spin", "block", NULL};

#define E(n, t, d, field, ...)                                \
    {                                                         \
        .name = n, .type = t, .defval = d, .help = "test " n, \
        .offset = offsetof(test_cfg_t, field), __VA_ARGS__    \
    }

static const tw_cfg_entry_t entries[] = {
    E("TWT_FLAG", TW_CFG_BOOL, "no", flag),
    E("TWT_COUNT", TW_CFG_INT, "-1", count),
    E("TWT_BOUNDED", TW_CFG_INT, "4", bounded, .min = 1, .max = 64),
    E("TWT_BIG", TW_CFG_UINT64, "0x10", big),
    E("TWT_RANGED", TW_CFG_UINT64, "100", ranged, .min = 10, .max = 1000),
    E("TWT_SIZE", TW_CFG_SIZE, "64k", size),
    E("TWT_SIZE_RANGED", TW_CFG_SIZE, "1m", size_ranged, .min = 4096, .max = 1 << 30),
    E("TWT_TIMEOUT", TW_CFG_DURATION, "100ms", timeout_ns),
    E("TWT_MODE", TW_CFG_ENUM, "adaptive", mode, .enum_names = modes),
    E("TWT_NAME", TW_CFG_STRING, "self,shm", name),
};

/* Table names use TWT_ (not TW_) so the process environment cannot clash;
 * a second table with TW_ names exercises the unknown-variable check. */
static const tw_cfg_table_t table = {"test", entries, TW_ARRAY_SIZE(entries)};

static const tw_cfg_entry_t *entry(const char *name)
{
    for (size_t i = 0; i < TW_ARRAY_SIZE(entries); i++) {
        if (strcmp(entries[i].name, name) == 0) {
            return &entries[i];
        }
    }
    TWT_CHECKF(0, "no entry %s", name);
    return NULL;
}

static test_cfg_t cfg;

static void ok(const char *name, const char *text)
{
    uint64_t e0 = tw_log_count(TW_LOG_ERROR);
    TWT_CHECKF(tw_cfg_parse_value(entry(name), text, &cfg) == TW_OK, "%s='%s'", name, text);
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0);
}

/* A bad value fails, logs one error, and leaves the field alone. */
static void bad(const char *name, const char *text)
{
    uint64_t e0 = tw_log_count(TW_LOG_ERROR);
    test_cfg_t before = cfg;
    TWT_CHECKF(tw_cfg_parse_value(entry(name), text, &cfg) == TW_ERR_INVALID, "%s='%s'", name,
               text);
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0 + 1);
    TWT_CHECKF(memcmp(&before, &cfg, sizeof(cfg)) == 0, "%s='%s' changed the struct", name, text);
}

static void test_defaults(void)
{
    memset(&cfg, 0x5a, sizeof(cfg));
    tw_cfg_set_defaults(&table, &cfg);
    TWT_EQ(cfg.flag, false);
    TWT_EQ(cfg.count, -1);
    TWT_EQ(cfg.bounded, 4);
    TWT_EQ(cfg.big, 16);
    TWT_EQ(cfg.ranged, 100);
    TWT_EQ(cfg.size, 65536);
    TWT_EQ(cfg.size_ranged, 1 << 20);
    TWT_EQ(cfg.timeout_ns, 100000000);
    TWT_EQ(cfg.mode, 0);
    TWT_CHECK(strcmp(cfg.name, "self,shm") == 0);
}

static void test_bool(void)
{
    static const char *const yes[] = {"1", "yes", "on", "true", "YES", "True", "On"};
    static const char *const no[] = {"0", "no", "off", "false", "NO", "False"};
    for (size_t i = 0; i < TW_ARRAY_SIZE(yes); i++) {
        cfg.flag = false;
        ok("TWT_FLAG", yes[i]);
        TWT_EQ(cfg.flag, true);
    }
    for (size_t i = 0; i < TW_ARRAY_SIZE(no); i++) {
        cfg.flag = true;
        ok("TWT_FLAG", no[i]);
        TWT_EQ(cfg.flag, false);
    }
    bad("TWT_FLAG", "");
    bad("TWT_FLAG", "2");
    bad("TWT_FLAG", "yess");
    bad("TWT_FLAG", " yes");
    bad("TWT_FLAG", "y");
}

static void test_int(void)
{
    char buf[64];
    ok("TWT_COUNT", "0");
    TWT_EQ(cfg.count, 0);
    ok("TWT_COUNT", "-17");
    TWT_EQ(cfg.count, -17);
    ok("TWT_COUNT", "+5");
    TWT_EQ(cfg.count, 5);
    snprintf(buf, sizeof(buf), "%d", INT_MAX);
    ok("TWT_COUNT", buf);
    TWT_EQ(cfg.count, INT_MAX);
    snprintf(buf, sizeof(buf), "%d", INT_MIN);
    ok("TWT_COUNT", buf);
    TWT_EQ(cfg.count, INT_MIN);
    snprintf(buf, sizeof(buf), "%lld", (long long)INT_MAX + 1);
    bad("TWT_COUNT", buf);
    snprintf(buf, sizeof(buf), "%lld", (long long)INT_MIN - 1);
    bad("TWT_COUNT", buf);
    bad("TWT_COUNT", "99999999999999999999999");
    bad("TWT_COUNT", "");
    bad("TWT_COUNT", "-");
    bad("TWT_COUNT", "12abc");
    bad("TWT_COUNT", "1.5");
    bad("TWT_COUNT", " 3");
    bad("TWT_COUNT", "3 ");
    bad("TWT_COUNT", "0x10");

    ok("TWT_BOUNDED", "1");
    TWT_EQ(cfg.bounded, 1);
    ok("TWT_BOUNDED", "64");
    TWT_EQ(cfg.bounded, 64);
    bad("TWT_BOUNDED", "0");
    bad("TWT_BOUNDED", "65");
    bad("TWT_BOUNDED", "-1");
}

static void test_uint64(void)
{
    ok("TWT_BIG", "18446744073709551615");
    TWT_CHECK(cfg.big == UINT64_MAX);
    ok("TWT_BIG", "0xffffffffffffffff");
    TWT_CHECK(cfg.big == UINT64_MAX);
    ok("TWT_BIG", "0X1F");
    TWT_EQ(cfg.big, 31);
    ok("TWT_BIG", "010"); /* decimal, not octal */
    TWT_EQ(cfg.big, 10);
    bad("TWT_BIG", "18446744073709551616");
    bad("TWT_BIG", "0x10000000000000000");
    bad("TWT_BIG", "-1");
    bad("TWT_BIG", "+1");
    bad("TWT_BIG", "0x");
    bad("TWT_BIG", "0xg");
    bad("TWT_BIG", "12k");
    bad("TWT_BIG", "");

    ok("TWT_RANGED", "10");
    TWT_EQ(cfg.ranged, 10);
    ok("TWT_RANGED", "1000");
    TWT_EQ(cfg.ranged, 1000);
    bad("TWT_RANGED", "9");
    bad("TWT_RANGED", "1001");
}

static void test_size(void)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"0", 0},
        {"100", 100},
        {"100b", 100},
        {"4k", 4096},
        {"4K", 4096},
        {"4kb", 4096},
        {"4KiB", 4096},
        {"3m", 3ull << 20},
        {"3M", 3ull << 20},
        {"3MiB", 3ull << 20},
        {"2g", 2ull << 30},
        {"2G", 2ull << 30},
        {"1t", 1ull << 40},
        {"0x10k", 16 << 10},
        {"16777215t", 16777215ull << 40},
    };
    for (size_t i = 0; i < TW_ARRAY_SIZE(good); i++) {
        ok("TWT_SIZE", good[i].text);
        TWT_CHECKF(cfg.size == good[i].bytes, "%s gave %zu", good[i].text, cfg.size);
    }
    bad("TWT_SIZE", "16777216t"); /* 2^64 */
    bad("TWT_SIZE", "18446744073709551615k");
    bad("TWT_SIZE", "-4k");
    bad("TWT_SIZE", "4x");
    bad("TWT_SIZE", "4kk");
    bad("TWT_SIZE", "4 k");
    bad("TWT_SIZE", "k");
    bad("TWT_SIZE", "1.5m");

    ok("TWT_SIZE_RANGED", "4k");
    TWT_EQ(cfg.size_ranged, 4096);
    ok("TWT_SIZE_RANGED", "1g");
    TWT_EQ(cfg.size_ranged, 1 << 30);
    bad("TWT_SIZE_RANGED", "4095");
    bad("TWT_SIZE_RANGED", "2g");
}

static void test_duration(void)
{
    static const struct {
        const char *text;
        uint64_t ns;
    } good[] = {
        {"0", 0},         {"7", 7000},
        {"7us", 7000},    {"7ns", 7},
        {"7ms", 7000000}, {"7s", 7000000000ull},
        {"7MS", 7000000}, {"18446744073709551615ns", UINT64_MAX},
    };
    for (size_t i = 0; i < TW_ARRAY_SIZE(good); i++) {
        ok("TWT_TIMEOUT", good[i].text);
        TWT_CHECKF(cfg.timeout_ns == good[i].ns, "%s gave %llu", good[i].text,
                   (unsigned long long)cfg.timeout_ns);
    }
    bad("TWT_TIMEOUT", "18446744073709552s");
    bad("TWT_TIMEOUT", "18446744073709551615"); /* us overflow ns */
    bad("TWT_TIMEOUT", "5min");
    bad("TWT_TIMEOUT", "-5ms");
    bad("TWT_TIMEOUT", "ms");
    bad("TWT_TIMEOUT", "");
}

static void test_enum(void)
{
    ok("TWT_MODE", "spin");
    TWT_EQ(cfg.mode, 1);
    ok("TWT_MODE", "BLOCK");
    TWT_EQ(cfg.mode, 2);
    ok("TWT_MODE", "Adaptive");
    TWT_EQ(cfg.mode, 0);
    bad("TWT_MODE", "fast");
    bad("TWT_MODE", "");
    bad("TWT_MODE", "spin ");
    bad("TWT_MODE", "0");
}

static void test_string(void)
{
    char longstr[TW_CFG_STRLEN + 1];

    ok("TWT_NAME", "");
    TWT_CHECK(cfg.name[0] == '\0');
    ok("TWT_NAME", "tcp, verbs");
    TWT_CHECK(strcmp(cfg.name, "tcp, verbs") == 0);
    memset(longstr, 'a', TW_CFG_STRLEN - 1);
    longstr[TW_CFG_STRLEN - 1] = '\0';
    ok("TWT_NAME", longstr);
    TWT_EQ(strlen(cfg.name), TW_CFG_STRLEN - 1);
    longstr[TW_CFG_STRLEN - 1] = 'a';
    longstr[TW_CFG_STRLEN] = '\0';
    bad("TWT_NAME", longstr);
}

/* The error line names the variable, the value and what was expected. */
static void test_error_text(void)
{
    static const tw_cfg_entry_t wait_mode = {.name = "TW_WAIT_MODE",
                                             .type = TW_CFG_ENUM,
                                             .defval = "adaptive",
                                             .offset = offsetof(test_cfg_t, mode),
                                             .enum_names = modes};
    FILE *f = tmpfile();
    char line[1024] = "";
    int saved;

    TWT_CHECK(f != NULL);
    fflush(stderr);
    saved = dup(2);
    TWT_CHECK(saved >= 0 && dup2(fileno(f), 2) == 2);
    TWT_EQ(tw_cfg_parse_value(&wait_mode, "fast", &cfg), TW_ERR_INVALID);
    TWT_EQ(tw_cfg_parse_value(entry("TWT_BOUNDED"), "99", &cfg), TW_ERR_INVALID);
    fflush(stderr);
    TWT_CHECK(dup2(saved, 2) == 2);
    close(saved);
    rewind(f);
    TWT_CHECK(fgets(line, sizeof(line), f) != NULL);
    TWT_CHECKF(strstr(line, " config] error: bad value 'fast' for TW_WAIT_MODE: expected one of "
                            "adaptive|spin|block\n") != NULL,
               "%s", line);
    TWT_CHECK(fgets(line, sizeof(line), f) != NULL);
    TWT_CHECKF(strstr(line, "bad value '99' for TWT_BOUNDED: expected an integer in [1, 64]\n") !=
                   NULL,
               "%s", line);
    fclose(f);
}

static void test_apply_env(void)
{
    uint64_t e0;
    test_cfg_t before;

    tw_cfg_set_defaults(&table, &cfg);
    setenv("TWT_FLAG", "on", 1);
    setenv("TWT_SIZE", "2m", 1);
    setenv("TWT_MODE", "block", 1);
    TWT_EQ(tw_cfg_apply_env(&table, &cfg), TW_OK);
    TWT_EQ(cfg.flag, true);
    TWT_EQ(cfg.size, 2 << 20);
    TWT_EQ(cfg.mode, 2);
    TWT_EQ(cfg.count, -1); /* not set: default kept */

    /* One bad variable: TW_ERR_INVALID, one error, nothing applied. */
    tw_cfg_set_defaults(&table, &cfg);
    setenv("TWT_TIMEOUT", "soon", 1);
    before = cfg;
    e0 = tw_log_count(TW_LOG_ERROR);
    TWT_EQ(tw_cfg_apply_env(&table, &cfg), TW_ERR_INVALID);
    TWT_EQ(tw_log_count(TW_LOG_ERROR), e0 + 1);
    TWT_CHECK(memcmp(&before, &cfg, sizeof(cfg)) == 0);
    unsetenv("TWT_TIMEOUT");
    unsetenv("TWT_FLAG");
    unsetenv("TWT_SIZE");
    unsetenv("TWT_MODE");
}

static void test_unknown(void)
{
    static const tw_cfg_entry_t known[] = {
        {.name = "TW_KNOWN_ONE", .type = TW_CFG_BOOL, .defval = "0", .help = "known"},
        {.name = "TW_KNOWN", .type = TW_CFG_BOOL, .defval = "0", .help = "prefix of the above"},
    };
    static const tw_cfg_table_t known_table = {"known", known, TW_ARRAY_SIZE(known)};
    const tw_cfg_table_t *tables[] = {&known_table, &tw_core_cfg_table, &table};
    uint64_t w0;
    int base;

    /* Whatever TW_* the harness set is the baseline; the runtime's
     * TW_STALL_WARN (tests/CMakeLists.txt) is in none of these tables,
     * and each call would warn about it. */
    unsetenv("TW_STALL_WARN");
    base = tw_cfg_warn_unknown(tables, TW_ARRAY_SIZE(tables));
    TWT_CHECK(base >= 0);

    setenv("TW_KNOWN_ONE", "1", 1);
    setenv("TW_KNOWN", "1", 1);
    setenv("TW_LOG_LEVEL", "warn", 1); /* listed by tw_core_cfg_table */
    setenv("TWT_FLAG", "1", 1);        /* not a TW_ variable */
    setenv("TW_KNOWN_ON", "1", 1);     /* prefix of a known name: unknown */
    setenv("TW_FOO", "1", 1);
    setenv("TW_KNOWN_ONE_MORE", "", 1);
    w0 = tw_log_count(TW_LOG_WARN);
    TWT_EQ(tw_cfg_warn_unknown(tables, TW_ARRAY_SIZE(tables)), base + 3);
    TWT_EQ(tw_log_count(TW_LOG_WARN), w0 + 3);
    /* No tables: every TW_ variable is unknown. */
    TWT_EQ(tw_cfg_warn_unknown(NULL, 0), base + 6);

    unsetenv("TW_KNOWN_ON");
    unsetenv("TW_FOO");
    unsetenv("TW_KNOWN_ONE_MORE");
    TWT_EQ(tw_cfg_warn_unknown(tables, TW_ARRAY_SIZE(tables)), base);
    unsetenv("TW_KNOWN_ONE");
    unsetenv("TW_KNOWN");
    unsetenv("TW_LOG_LEVEL");
    unsetenv("TWT_FLAG");
}

static void test_print(void)
{
    FILE *f = tmpfile();
    char text[8192];
    size_t n;

    TWT_CHECK(f != NULL);
    setenv("TWT_MODE", "spin", 1);
    tw_cfg_print(&table, f);
    tw_cfg_print(&tw_core_cfg_table, f);
    unsetenv("TWT_MODE");
    rewind(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    TWT_CHECKF(strstr(text, "[test]\n") != NULL, "%s", text);
    TWT_CHECKF(strstr(text, "[core]\n") != NULL, "%s", text);
    for (size_t i = 0; i < TW_ARRAY_SIZE(entries); i++) {
        TWT_CHECKF(strstr(text, entries[i].name) != NULL, "%s missing", entries[i].name);
        TWT_CHECKF(strstr(text, entries[i].help) != NULL, "%s help missing", entries[i].name);
    }
    TWT_CHECK(strstr(text, "TW_LOG_LEVEL") != NULL);
    TWT_CHECK(strstr(text, "environment: spin") != NULL);
    TWT_CHECK(strstr(text, "adaptive|spin|block") != NULL);
}

/* Name lists: TW_FAULT_ON, TW_FAULT_RANKS, TW_VERBS_DEVICES (name:port). */
static void test_list(void)
{
    int arg = -1;

    TWT_CHECK(tw_cfg_list_has("", "shm", &arg) && arg == 0);
    TWT_CHECK(tw_cfg_list_has("shm,tcp", "tcp", NULL));
    TWT_CHECK(tw_cfg_list_has("shm tcp", "shm", NULL));
    TWT_CHECK(!tw_cfg_list_has("shm,tcp", "sh", NULL));
    TWT_CHECK(!tw_cfg_list_has("shm,tcp", "tcpx", NULL));
    TWT_CHECK(tw_cfg_list_has("mlx5_0:2,rxe0", "mlx5_0", &arg) && arg == 2);
    TWT_CHECK(tw_cfg_list_has("mlx5_0:2,rxe0", "rxe0", &arg) && arg == 0);
    TWT_CHECK(!tw_cfg_list_has("mlx5_0:2", "mlx5_1", &arg));
    TWT_CHECK(tw_cfg_list_has("1,3", "3", NULL) && !tw_cfg_list_has("1,3", "2", NULL));
}

int main(int argc, char **argv)
{
    static const twt_case_t cases[] = {
        {"defaults", test_defaults},   {"list", test_list},
        {"bool", test_bool},           {"int", test_int},
        {"uint64", test_uint64},       {"size", test_size},
        {"duration", test_duration},   {"enum", test_enum},
        {"string", test_string},       {"error_text", test_error_text},
        {"apply_env", test_apply_env}, {"unknown", test_unknown},
        {"print", test_print},
    };
    /* Errors are expected here; keep their lines but nothing below them. */
    tw_log_set_level(TW_LOG_WARN);
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
