/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport's stand-in, built instead of the transport when
 * libibverbs was not found (src/transports/CMakeLists.txt): an ops table
 * whose query says why it is unavailable, and the registration and test
 * hooks of tw_verbs.h, which refuse (TW_ERR_UNSUPPORTED) or do nothing.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "transports/base/tw_tl.h"
#include "transports/verbs/tw_verbs.h"

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

#if TW_TESTING
void tw_verbs_test_drop_conn(unsigned every)
{
    (void)every;
}
#endif

#if TW_TESTING
tw_status_t tw_verbs_test_dev_lost(tw_tl_iface_t *iface, int kind)
{
    (void)iface, (void)kind;
    return TW_ERR_UNSUPPORTED;
}
#endif

#if TW_TESTING
unsigned long tw_verbs_test_lost_ops(void)
{
    return 0;
}
#endif
