/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Declarative configuration tables. Each module describes its tunables in
 * one static table (environment name, type, default, help, destination
 * offset); this file parses them with typed, range-checked parsers. A bad
 * value is an error that names the variable; unknown TW_* variables draw a
 * warning. tw_info prints every table.
 */
#ifndef TW_CONFIG_H
#define TW_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "threadwire/threadwire.h"

typedef enum tw_cfg_type {
    TW_CFG_BOOL,     /* 0|1|yes|no|on|off|true|false -> bool */
    TW_CFG_INT,      /* decimal int within [min, max] -> int */
    TW_CFG_UINT64,   /* decimal/hex uint64 within [min, max] -> uint64_t */
    TW_CFG_SIZE,     /* bytes with optional k/m/g suffix (1024s) -> size_t */
    TW_CFG_DURATION, /* time: ns|us|ms|s suffix, bare number = us -> uint64_t ns */
    TW_CFG_ENUM,     /* one of enum_names (case-insensitive) -> int index */
    TW_CFG_STRING    /* copied verbatim -> char[TW_CFG_STRLEN] */
} tw_cfg_type_t;

#define TW_CFG_STRLEN 256

typedef struct tw_cfg_entry {
    const char *name; /* "TW_WAIT_MODE" */
    tw_cfg_type_t type;
    const char *defval;            /* default as text, parsed like the environment */
    const char *help;              /* one line for tw_info and README */
    size_t offset;                 /* offsetof(dest struct, field) */
    const char *const *enum_names; /* TW_CFG_ENUM: NULL-terminated */
    int64_t min, max;              /* TW_CFG_INT / UINT64 / SIZE bounds (0,0 = none) */
} tw_cfg_entry_t;

typedef struct tw_cfg_table {
    const char *module; /* "core", "progress", ... */
    const tw_cfg_entry_t *entries;
    size_t count;
} tw_cfg_table_t;

/** Store every entry's default into @p dst. Defaults are trusted (assert). */
void tw_cfg_set_defaults(const tw_cfg_table_t *table, void *dst);

/**
 * Parse the variables of @p table that are set in the environment into
 * @p dst. Stops at the first bad value: logs "bad value 'x' for TW_FOO:
 * expected ..." and returns TW_ERR_INVALID. Thread: any.
 */
tw_status_t tw_cfg_apply_env(const tw_cfg_table_t *table, void *dst);

/** Check the variables of @p table that are set in the environment
 * without storing them: the first bad value is logged (as above) and gives
 * TW_ERR_INVALID. Thread: any. */
tw_status_t tw_cfg_check_env(const tw_cfg_table_t *table);

/**
 * Parse one text value for @p e into the field at e->offset of the struct
 * @p dst (used by both of the above). The field is written only on success;
 * a bad value is logged and gives TW_ERR_INVALID.
 */
tw_status_t tw_cfg_parse_value(const tw_cfg_entry_t *e, const char *text, void *dst);

/** Parse a duration ("250ms", "2s", "10us", "500ns"; a bare number is
 * microseconds) into nanoseconds, without logging. False: not one. */
bool tw_cfg_parse_duration(const char *text, uint64_t *ns_p);

/**
 * Warn once per call about each TW_* environment variable that no table
 * in @p tables names. Returns the number of unknown variables.
 */
int tw_cfg_warn_unknown(const tw_cfg_table_t *const *tables, size_t ntables);

/** Print a table: name, type, default, current environment value, help. */
void tw_cfg_print(const tw_cfg_table_t *table, FILE *out);
/** Print a table's entries as Markdown table rows: | `NAME` | `default` |
 * help | (README's variable table is made of these). */
void tw_cfg_print_markdown(const tw_cfg_table_t *table, FILE *out);

/** Is @p name in @p list, a comma (or space) separated list of names,
 * each optionally followed by ":argument" (TW_VERBS_DEVICES=mlx5_0:1)?
 * An empty list holds every name. On a match with an argument, *@p arg_p
 * is its value (strtol, 0 if none); @p arg_p may be NULL. */
bool tw_cfg_list_has(const char *list, const char *name, int *arg_p);

/**
 * The core module's tunables. TW_LOG_LEVEL is read by tw_log itself (before
 * any configuration is parsed); it is listed here so that tw_info prints it
 * and tw_cfg_warn_unknown knows it.
 */
typedef struct tw_core_cfg {
    int log_level; /* tw_log_level_t */
} tw_core_cfg_t;
extern const tw_cfg_table_t tw_core_cfg_table;

#endif /* TW_CONFIG_H */
