/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport's TW_VERBS_* variables, compiled whether or not
 * libibverbs was found (tw_info lists them; unknown-variable warnings know
 * them).
 */
#include <stddef.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "transports/verbs/tw_verbs.h"

static const tw_cfg_entry_t tw_verbs_cfg_entries[] = {
    {.name = "TW_VERBS_DEVICES",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "verbs transport (opt-in: name it in TW_TRANSPORTS): RDMA devices to use (comma list "
             "of name or name:port, e.g. mlx5_0:1,rxe0); empty = every device with an active port; "
             "ranks a and b talk through device (a + b) mod devices on both sides (a rail)",
     .offset = offsetof(tw_verbs_cfg_t, devices)},
    {.name = "TW_VERBS_GID_INDEX",
     .type = TW_CFG_INT,
     .defval = "-1",
     .help = "verbs transport: GID table index on RoCE ports; -1 = the first IPv4-mapped RoCE v2 "
             "GID among indexes 0-15",
     .offset = offsetof(tw_verbs_cfg_t, gid_index),
     .min = -1,
     .max = 255 /* ibv_global_route.sgid_index is 8 bits */},
    {.name = "TW_VERBS_RX_DEPTH",
     .type = TW_CFG_UINT64,
     .defval = "512",
     .help = "verbs transport: 9 KiB receive buffers in each device's shared receive queue, "
             "refilled when a quarter is used (senders wait on receiver-not-ready, never fail)",
     .offset = offsetof(tw_verbs_cfg_t, rx_depth),
     .min = 64,
     .max = 65536},
    {.name = "TW_VERBS_SQ_DEPTH",
     .type = TW_CFG_UINT64,
     .defval = "128",
     .help = "verbs transport: send work requests in flight per connection (send-queue "
             "credits); more wait in the connection's queue",
     .offset = offsetof(tw_verbs_cfg_t, sq_depth),
     .min = 8,
     .max = 16384},
    {.name = "TW_VERBS_TIMEOUT",
     .type = TW_CFG_DURATION,
     .defval = "10s",
     .help = "verbs transport: a connection not set up within this long (requests retransmitted "
             "over UD meanwhile), or a connected peer that runs progress threads and stays silent "
             "this long (PINGed over UD every quarter of it), has failed; a peer that dies with "
             "our work requests in flight fails sooner (the QP's retries, about 2 s); 0 = never",
     .offset = offsetof(tw_verbs_cfg_t, conn_timeout_ns),
     .max = 3600ull * 1000 * 1000 * 1000},
    {.name = "TW_VERBS_TD",
     .type = TW_CFG_BOOL,
     .defval = "1",
     .help = "verbs transport: use a thread domain and a single-threaded CQ per device where "
             "the provider has them (the device's progress thread owns its QPs); 0 = never",
     .offset = offsetof(tw_verbs_cfg_t, td)},
};

const tw_cfg_table_t tw_verbs_cfg_table = {
    .module = "verbs",
    .entries = tw_verbs_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_verbs_cfg_entries),
};
