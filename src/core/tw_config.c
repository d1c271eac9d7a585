/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Typed parsers for the declarative tunable tables. Every parser is
 * strict: the whole text must be consumed, numbers may not overflow, an
 * unsigned value may not carry a sign, and whitespace is not trimmed.
 * Errors are logged here, once, naming the variable, the bad value and
 * what was expected; callers only pass TW_ERR_INVALID on.
 */
#define _GNU_SOURCE
#include "core/tw_config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"

/* One parsed value, before it is stored into the destination field. */
typedef union tw_cfg_value {
    bool b;
    int i;
    uint64_t u;
    size_t z;
    char s[TW_CFG_STRLEN];
} tw_cfg_value_t;

static const char *const bool_true[] = {"1", "yes", "on", "true"};
static const char *const bool_false[] = {"0", "no", "off", "false"};

/* ---- TW_LOG_LEVEL, read by tw_log itself ------------------------------ */

static const char *const log_level_names[] = {"error", "warn", "info", "debug", "trace", NULL};

static const tw_cfg_entry_t core_entries[] = {
    {.name = "TW_LOG_LEVEL",
     .type = TW_CFG_ENUM,
     .defval = "warn",
     .help = "messages at this level and more severe are printed on stderr: error, warn, info, "
             "debug, trace",
     .offset = offsetof(tw_core_cfg_t, log_level),
     .enum_names = log_level_names},
};

const tw_cfg_table_t tw_core_cfg_table = {
    .module = "core",
    .entries = core_entries,
    .count = TW_ARRAY_SIZE(core_entries),
};

/* ---- number parsing ---------------------------------------------------- */

static bool has_bounds(const tw_cfg_entry_t *e)
{
    return e->min != 0 || e->max != 0;
}

/*
 * Unsigned decimal, or hex with a 0x prefix. Stops at the first character
 * that is not part of the number (*end_p). Rejects a sign, leading
 * whitespace, an empty number and overflow.
 */
static bool parse_u64_prefix(const char *text, uint64_t *v_p, const char **end_p)
{
    int base = 10;
    const char *digits = text;
    char *end;
    unsigned long long v;

    if (text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        digits = text + 2;
        if (!((digits[0] >= '0' && digits[0] <= '9') || (digits[0] >= 'a' && digits[0] <= 'f') ||
              (digits[0] >= 'A' && digits[0] <= 'F'))) {
            return false;
        }
    } else if (!(digits[0] >= '0' && digits[0] <= '9')) {
        return false;
    }
    errno = 0;
    v = strtoull(text, &end, base);
    if (errno != 0 || end == digits) {
        return false;
    }
    *v_p = (uint64_t)v;
    *end_p = end;
    return true;
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *r_p)
{
    return !__builtin_mul_overflow(a, b, r_p);
}

static bool u64_in_bounds(const tw_cfg_entry_t *e, uint64_t v)
{
    if (!has_bounds(e)) {
        return true;
    }
    return v >= (uint64_t)TW_MAX(e->min, 0) && e->max >= 0 && v <= (uint64_t)e->max;
}

static bool parse_int(const tw_cfg_entry_t *e, const char *text, int *v_p)
{
    int64_t lo = has_bounds(e) ? TW_MAX(e->min, (int64_t)INT_MIN) : INT_MIN;
    int64_t hi = has_bounds(e) ? TW_MIN(e->max, (int64_t)INT_MAX) : INT_MAX;
    const char *p = text;
    char *end;
    long long v;

    if (*p == '-' || *p == '+') {
        p++;
    }
    if (!(*p >= '0' && *p <= '9')) {
        return false;
    }
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        return false;
    }
    *v_p = (int)v;
    return true;
}

static bool parse_uint64(const tw_cfg_entry_t *e, const char *text, uint64_t *v_p)
{
    const char *end;
    uint64_t v;

    if (!parse_u64_prefix(text, &v, &end) || *end != '\0' || !u64_in_bounds(e, v)) {
        return false;
    }
    *v_p = v;
    return true;
}

/* A number with a unit suffix (case-insensitive) from @p units. */
typedef struct tw_cfg_unit {
    const char *suffix;
    uint64_t mult;
} tw_cfg_unit_t;

static bool parse_with_unit(const char *text, const tw_cfg_unit_t *units, size_t n, uint64_t *v_p)
{
    const char *end;
    uint64_t v;

    if (!parse_u64_prefix(text, &v, &end)) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            return mul_ok(v, units[i].mult, v_p);
        }
    }
    return false;
}

static bool parse_size(const tw_cfg_entry_t *e, const char *text, size_t *v_p)
{
    static const tw_cfg_unit_t units[] = {
        {"", 1},
        {"b", 1},
        {"k", 1ull << 10},
        {"kb", 1ull << 10},
        {"kib", 1ull << 10},
        {"m", 1ull << 20},
        {"mb", 1ull << 20},
        {"mib", 1ull << 20},
        {"g", 1ull << 30},
        {"gb", 1ull << 30},
        {"gib", 1ull << 30},
        {"t", 1ull << 40},
        {"tb", 1ull << 40},
        {"tib", 1ull << 40},
    };
    uint64_t bytes;

    if (!parse_with_unit(text, units, TW_ARRAY_SIZE(units), &bytes) || bytes > SIZE_MAX ||
        !u64_in_bounds(e, bytes)) {
        return false;
    }
    *v_p = (size_t)bytes;
    return true;
}

bool tw_cfg_parse_duration(const char *text, uint64_t *ns_p)
{
    static const tw_cfg_unit_t units[] = {
        {"", 1000}, /* bare number: microseconds */
        {"ns", 1},  {"us", 1000}, {"ms", 1000000}, {"s", 1000000000},
    };
    return parse_with_unit(text, units, TW_ARRAY_SIZE(units), ns_p);
}

static bool parse_bool(const char *text, bool *v_p)
{
    for (size_t i = 0; i < TW_ARRAY_SIZE(bool_true); i++) {
        if (strcasecmp(text, bool_true[i]) == 0) {
            *v_p = true;
            return true;
        }
        if (strcasecmp(text, bool_false[i]) == 0) {
            *v_p = false;
            return true;
        }
    }
    return false;
}

static bool parse_enum(const tw_cfg_entry_t *e, const char *text, int *v_p)
{
    if (e->enum_names == NULL) {
        return false;
    }
    for (int i = 0; e->enum_names[i] != NULL; i++) {
        if (strcasecmp(text, e->enum_names[i]) == 0) {
            *v_p = i;
            return true;
        }
    }
    return false;
}

/* ---- error text -------------------------------------------------------- */

static void format_enum_names(const char *const *names, char *buf, size_t cap)
{
    size_t pos = 0;

    buf[0] = '\0';
    for (size_t i = 0; names != NULL && names[i] != NULL && pos < cap; i++) {
        int n = snprintf(buf + pos, cap - pos, "%s%s", i ? "|" : "", names[i]);
        if (n < 0) {
            break;
        }
        pos += (size_t)n;
    }
}

static void format_range(const tw_cfg_entry_t *e, char *buf, size_t cap)
{
    if (has_bounds(e)) {
        snprintf(buf, cap, " in [%" PRId64 ", %" PRId64 "]", e->min, e->max);
    } else {
        buf[0] = '\0';
    }
}

/* What a value of @p e must look like, for the error message and tw_info. */
static void format_expected(const tw_cfg_entry_t *e, char *buf, size_t cap)
{
    char extra[256];

    switch (e->type) {
    case TW_CFG_BOOL:
        snprintf(buf, cap, "one of 0|1|yes|no|on|off|true|false");
        break;
    case TW_CFG_INT:
        if (has_bounds(e)) {
            format_range(e, extra, sizeof(extra));
        } else {
            snprintf(extra, sizeof(extra), " in [%d, %d]", INT_MIN, INT_MAX);
        }
        snprintf(buf, cap, "an integer%s", extra);
        break;
    case TW_CFG_UINT64:
        format_range(e, extra, sizeof(extra));
        snprintf(buf, cap, "an unsigned integer (decimal or 0x hex)%s", extra);
        break;
    case TW_CFG_SIZE:
        format_range(e, extra, sizeof(extra));
        snprintf(buf, cap, "a size in bytes with an optional k|m|g|t suffix%s", extra);
        break;
    case TW_CFG_DURATION:
        snprintf(buf, cap, "a duration with an ns|us|ms|s suffix (a bare number is us)");
        break;
    case TW_CFG_ENUM:
        format_enum_names(e->enum_names, extra, sizeof(extra));
        snprintf(buf, cap, "one of %s", extra);
        break;
    case TW_CFG_STRING:
        snprintf(buf, cap, "at most %d characters", TW_CFG_STRLEN - 1);
        break;
    default:
        snprintf(buf, cap, "a value of a known type");
        break;
    }
}

static const char *type_name(tw_cfg_type_t type)
{
    switch (type) {
    case TW_CFG_BOOL:
        return "bool";
    case TW_CFG_INT:
        return "int";
    case TW_CFG_UINT64:
        return "uint64";
    case TW_CFG_SIZE:
        return "size";
    case TW_CFG_DURATION:
        return "duration";
    case TW_CFG_ENUM:
        return "enum";
    case TW_CFG_STRING:
        return "string";
    }
    return "unknown";
}

/* ---- parse and store --------------------------------------------------- */

static tw_status_t cfg_parse(const tw_cfg_entry_t *e, const char *text, tw_cfg_value_t *v)
{
    bool ok = false;

    switch (e->type) {
    case TW_CFG_BOOL:
        ok = parse_bool(text, &v->b);
        break;
    case TW_CFG_INT:
        ok = parse_int(e, text, &v->i);
        break;
    case TW_CFG_UINT64:
        ok = parse_uint64(e, text, &v->u);
        break;
    case TW_CFG_SIZE:
        ok = parse_size(e, text, &v->z);
        break;
    case TW_CFG_DURATION:
        ok = tw_cfg_parse_duration(text, &v->u);
        break;
    case TW_CFG_ENUM:
        ok = parse_enum(e, text, &v->i);
        break;
    case TW_CFG_STRING: {
        size_t len = strnlen(text, TW_CFG_STRLEN);
        ok = len < TW_CFG_STRLEN;
        if (ok) {
            memcpy(v->s, text, len + 1);
        }
        break;
    }
    }
    if (!ok) {
        char expected[512];
        format_expected(e, expected, sizeof(expected));
        tw_error("config", "bad value '%s' for %s: expected %s", text, e->name, expected);
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

static void cfg_store(const tw_cfg_entry_t *e, const tw_cfg_value_t *v, void *dst)
{
    char *field = (char *)dst + e->offset;

    switch (e->type) {
    case TW_CFG_BOOL:
        memcpy(field, &v->b, sizeof(bool));
        break;
    case TW_CFG_INT:
    case TW_CFG_ENUM:
        memcpy(field, &v->i, sizeof(int));
        break;
    case TW_CFG_UINT64:
    case TW_CFG_DURATION:
        memcpy(field, &v->u, sizeof(uint64_t));
        break;
    case TW_CFG_SIZE:
        memcpy(field, &v->z, sizeof(size_t));
        break;
    case TW_CFG_STRING:
        memcpy(field, v->s, strlen(v->s) + 1);
        break;
    }
}

tw_status_t tw_cfg_parse_value(const tw_cfg_entry_t *e, const char *text, void *dst)
{
    tw_cfg_value_t v;
    tw_status_t st;

    if (e == NULL || text == NULL || dst == NULL) {
        return TW_ERR_INVALID;
    }
    st = cfg_parse(e, text, &v);
    if (st == TW_OK) {
        cfg_store(e, &v, dst);
    }
    return st;
}

void tw_cfg_set_defaults(const tw_cfg_table_t *table, void *dst)
{
    for (size_t i = 0; i < table->count; i++) {
        const tw_cfg_entry_t *e = &table->entries[i];
        tw_status_t st = tw_cfg_parse_value(e, e->defval != NULL ? e->defval : "", dst);
        tw_assert(st == TW_OK);
        (void)st;
    }
}

tw_status_t tw_cfg_apply_env(const tw_cfg_table_t *table, void *dst)
{
    tw_cfg_value_t v;

    if (table == NULL || dst == NULL) {
        return TW_ERR_INVALID;
    }
    /* Check everything first so that a bad value leaves @p dst untouched. */
    for (size_t i = 0; i < table->count; i++) {
        const char *text = getenv(table->entries[i].name);
        if (text != NULL && cfg_parse(&table->entries[i], text, &v) != TW_OK) {
            return TW_ERR_INVALID;
        }
    }
    for (size_t i = 0; i < table->count; i++) {
        const char *text = getenv(table->entries[i].name);
        if (text != NULL) {
            if (cfg_parse(&table->entries[i], text, &v) != TW_OK) {
                return TW_ERR_INVALID; /* the environment changed under us */
            }
            cfg_store(&table->entries[i], &v, dst);
        }
    }
    return TW_OK;
}

tw_status_t tw_cfg_check_env(const tw_cfg_table_t *table)
{
    tw_cfg_value_t v;

    for (size_t i = 0; i < table->count; i++) {
        const char *text = getenv(table->entries[i].name);
        if (text != NULL && cfg_parse(&table->entries[i], text, &v) != TW_OK) {
            return TW_ERR_INVALID;
        }
    }
    return TW_OK;
}

/* ---- unknown variables and printing ----------------------------------- */

static bool cfg_known(const tw_cfg_table_t *const *tables, size_t ntables, const char *name,
                      size_t len)
{
    for (size_t t = 0; t < ntables; t++) {
        if (tables[t] == NULL) {
            continue;
        }
        for (size_t i = 0; i < tables[t]->count; i++) {
            const char *known = tables[t]->entries[i].name;
            if (strncmp(known, name, len) == 0 && known[len] == '\0') {
                return true;
            }
        }
    }
    return false;
}

int tw_cfg_warn_unknown(const tw_cfg_table_t *const *tables, size_t ntables)
{
    int unknown = 0;

    for (char **env = environ; env != NULL && *env != NULL; env++) {
        const char *var = *env;
        const char *eq;
        size_t len;

        if (strncmp(var, "TW_", 3) != 0) {
            continue;
        }
        eq = strchr(var, '=');
        len = eq != NULL ? (size_t)(eq - var) : strlen(var);
        if (!cfg_known(tables, ntables, var, len)) {
            tw_warn("config",
                    "unknown environment variable %.*s ignored (tw_info lists the known ones)",
                    (int)TW_MIN(len, (size_t)INT_MAX), var);
            unknown++;
        }
    }
    return unknown;
}

void tw_cfg_print(const tw_cfg_table_t *table, FILE *out)
{
    char expected[512];

    fprintf(out, "[%s]\n", table->module);
    for (size_t i = 0; i < table->count; i++) {
        const tw_cfg_entry_t *e = &table->entries[i];
        const char *env = getenv(e->name);

        format_expected(e, expected, sizeof(expected));
        fprintf(out, "  %-24s %-8s default: %s", e->name, type_name(e->type),
                e->defval != NULL && e->defval[0] != '\0' ? e->defval : "(empty)");
        if (env != NULL) {
            fprintf(out, "  environment: %s", env);
        }
        fprintf(out, "\n      %s\n      value: %s\n", e->help != NULL ? e->help : "", expected);
    }
}

void tw_cfg_print_markdown(const tw_cfg_table_t *table, FILE *out)
{
    for (size_t i = 0; i < table->count; i++) {
        const tw_cfg_entry_t *e = &table->entries[i];
        const char *help = e->help != NULL ? e->help : "";

        if (e->defval != NULL && e->defval[0] != '\0') {
            fprintf(out, "| `%s` | `%s` | ", e->name, e->defval);
        } else {
            fprintf(out, "| `%s` | (empty) | ", e->name);
        }
        for (const char *c = help; *c != '\0'; c++) {
            if (*c == '|') {
                fputc('\\', out); /* a table cell: escape the separator */
            }
            fputc(*c, out);
        }
        fputs(" |\n", out);
    }
}

bool tw_cfg_list_has(const char *list, const char *name, int *arg_p)
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;

    if (arg_p != NULL) {
        *arg_p = 0;
    }
    if (list[0] == '\0') {
        return true;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        char *colon = strchr(t, ':');
        if (colon != NULL) {
            *colon = '\0';
        }
        if (strcmp(t, name) == 0) {
            if (arg_p != NULL && colon != NULL) {
                *arg_p = (int)strtol(colon + 1, NULL, 10);
            }
            return true;
        }
    }
    return false;
}
