/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport's TW_VERBS_* variables, compiled whether or not
 * libibverbs was found (tw_info lists them; unknown-variable warnings know
 * them), and the transport's stand-in when it was not: an ops table whose
 * query says why it is unavailable.
 */
#include <stddef.h>
#include <stdio.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "transports/base/tw_tl.h"
#include "transports/verbs/tw_verbs.h"

static const tw_cfg_entry_t tw_verbs_cfg_entries[] = {
    {.name = "TW_VERBS_DEVICES",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "verbs transport: RDMA devices to use (comma list of name or name:port, e.g. "
             "mlx5_0:1,rxe0); empty = every device with an active port",
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
     .help = "verbs transport: receive buffers (9 KiB each) posted to each device's shared "
             "receive queue; refilled when a quarter is used",
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
     .help = "verbs transport: a connection not set up within this long, or a connected peer "
             "that runs progress threads and stays silent this long (PINGed over UD every "
             "quarter of it), has failed; 0 = never",
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

#if !TW_HAVE_VERBS
static tw_status_t tw_verbs_query(char *why, size_t why_len)
{
    snprintf(why, why_len, "not built: libibverbs was not found at build time");
    return TW_ERR_UNSUPPORTED;
}

static tw_status_t tw_verbs_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    (void)params, (void)iface_p;
    return TW_ERR_UNSUPPORTED;
}

static void tw_verbs_iface_close(tw_tl_iface_t *iface)
{
    (void)iface;
}

static bool tw_verbs_reachable(tw_tl_iface_t *iface, int peer)
{
    (void)iface, (void)peer;
    return false;
}

const tw_tl_ops_t tw_verbs_ops = {
    .name = "verbs",
    .caps = TW_TL_CAP_OPT_IN,
    .cfg = &tw_verbs_cfg_table,
    .query = tw_verbs_query,
    .iface_open = tw_verbs_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_verbs_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tl_noaddr_pack,
    .addr_connect = tw_tl_noaddr_connect,
    .ready = tw_tl_noaddr_ready,
    .quiesce = tw_tl_noop_quiesce,
    .reachable = tw_verbs_reachable,
    .am_short = tw_tl_stub_am_short,
    .am_zcopy = tw_tl_stub_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_tl_stub_progress,
    .poll = tw_tl_stub_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

tw_status_t tw_verbs_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *rkey,
                             size_t *rkey_len_p, tw_verbs_mem_t **mem_p)
{
    (void)iface, (void)addr, (void)len, (void)rkey, (void)rkey_len_p, (void)mem_p;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_verbs_mem_dereg(tw_tl_iface_t *iface, tw_verbs_mem_t *mem)
{
    (void)iface, (void)mem;
    return TW_ERR_UNSUPPORTED;
}

tw_status_t tw_verbs_force_qp_error(tw_tl_iface_t *iface, int peer)
{
    (void)iface, (void)peer;
    return TW_ERR_UNSUPPORTED;
}

void tw_verbs_test_drop_conn(unsigned every)
{
    (void)every;
}

tw_status_t tw_verbs_test_dev_lost(tw_tl_iface_t *iface, int kind)
{
    (void)iface, (void)kind;
    return TW_ERR_UNSUPPORTED;
}

unsigned long tw_verbs_test_lost_ops(void)
{
    return 0;
}
#endif
