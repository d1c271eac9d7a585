/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Logging. One line per message on stderr:
 *   [tw 12345:12347 r0 progress] warn: cq 0x.. overflow ...
 * (pid:tid, rank once known, subsystem). Messages are lower case and say
 * what failed, with which peer or device. TW_LOG_LEVEL selects the level
 * (error|warn|info|debug|trace, default warn).
 */
#ifndef TW_LOG_H
#define TW_LOG_H

#include <stdint.h>

#include "core/tw_compiler.h"

typedef enum tw_log_level {
    TW_LOG_ERROR = 0,
    TW_LOG_WARN,
    TW_LOG_INFO,
    TW_LOG_DEBUG,
    TW_LOG_TRACE
} tw_log_level_t;

/** Current level (relaxed read; set by tw_log_set_level). */
tw_log_level_t tw_log_level(void);
void tw_log_set_level(tw_log_level_t level);
/** Parse "error".."trace"; returns -1 for unknown names. */
int tw_log_level_parse(const char *name);
const char *tw_log_level_name(tw_log_level_t level);
/** Rank to show in the prefix; -1 hides it. */
void tw_log_set_rank(int rank);
/** Number of messages emitted at @p level since start (tests use it). */
uint64_t tw_log_count(tw_log_level_t level);
#if TW_TESTING
/** Warn and error lines that no TWTEST_EXPECT_LOG pattern matched, with
 * TWTEST_LOG_STRICT=1 (tests/README.md); 0 when not strict. Thread: any. */
uint64_t tw_log_test_unexpected(void);
#endif

void tw_log_emit(tw_log_level_t level, const char *subsys, const char *file, int line,
                 const char *fmt, ...) TW_PRINTF(5, 6);

#define tw_log(level, subsys, ...)                                           \
    do {                                                                     \
        if (TW_UNLIKELY((level) <= tw_log_level())) {                        \
            tw_log_emit((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
        }                                                                    \
    } while (0)

#define tw_error(subsys, ...) tw_log(TW_LOG_ERROR, subsys, __VA_ARGS__)
#define tw_warn(subsys, ...)  tw_log(TW_LOG_WARN, subsys, __VA_ARGS__)
#define tw_info(subsys, ...)  tw_log(TW_LOG_INFO, subsys, __VA_ARGS__)
#define tw_debug(subsys, ...) tw_log(TW_LOG_DEBUG, subsys, __VA_ARGS__)
#define tw_trace(subsys, ...) tw_log(TW_LOG_TRACE, subsys, __VA_ARGS__)

#endif /* TW_LOG_H */
