/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The TCP transport (README.md): what the library and tests reach beyond its ops table. */
#ifndef TW_TCP_H
#define TW_TCP_H

#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "transports/base/tw_tl.h"

/** TW_TCP_* variables (tw_info lists them). */
extern const tw_cfg_table_t tw_tcp_cfg_table;

/** Test hook: the port @p peer listens on (as it published it), or 0. */
#if TW_TESTING
uint16_t tw_tcp_test_peer_port(tw_tl_iface_t *iface, int peer);
#endif

#endif /* TW_TCP_H */
