/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The verbs transport (README.md beside this file): what reaches beyond
 * the ops table -- its variables, memory registration for one-sided
 * operations (what its mem_reg / mem_dereg slots run, on which the public
 * tw_mem_register builds; tests call it directly), the entry points of the
 * async event thread, and test hooks.
 */
#ifndef TW_VERBS_H
#define TW_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "transports/base/tw_tl.h"

/** TW_VERBS_* variables (tw_info lists them). */
extern const tw_cfg_table_t tw_verbs_cfg_table;

typedef struct tw_verbs_cfg {
    char devices[TW_CFG_STRLEN];
    int gid_index;
    uint64_t rx_depth;
    uint64_t sq_depth;
    uint64_t conn_timeout_ns;
    bool td;
} tw_verbs_cfg_t;

/** A registered region (opaque). */
typedef struct tw_verbs_mem tw_verbs_mem_t;

/** Register [@p addr, @p addr + @p len) on every device of @p iface for
 * local use and remote read/write; write its remote key (at most
 * TW_VERBS_RKEY_MAX = 36 bytes) to @p rkey. put_zcopy / get_zcopy take
 * that key; local buffers inside a registered region use it instead of a
 * registration per operation. TW_ERR_INVALID (bad arguments),
 * TW_ERR_TRANSPORT (the device refused: logged). Thread: any. */
tw_status_t tw_verbs_mem_reg(tw_tl_iface_t *iface, void *addr, size_t len, void *rkey,
                             size_t *rkey_len_p, tw_verbs_mem_t **mem_p);
/** Deregister: no later operation uses it; the device registration goes
 * when operations in flight with it completed. Thread: any. */
tw_status_t tw_verbs_mem_dereg(tw_tl_iface_t *iface, tw_verbs_mem_t *mem);

/** Test hook: move the RC QP to @p peer into the error state (as a
 * link or remote failure would), from any thread; the device's engine
 * applies it. Its work requests flush, the peer fails (its operations
 * complete TW_ERR_PEER_FAILED, peer_down runs) and the peer is told over
 * UD so it fails us too. Nothing happens if there is no QP to it yet.
 * TW_ERR_INVALID: not a verbs iface, or no such peer. */
tw_status_t tw_verbs_force_qp_error(tw_tl_iface_t *iface, int peer);

/** Test hook: drop every @p every-th connection message (REQ, REP, RTU,
 * DOWN, PING, PONG, RESET) this process sends, as a lossy fabric would
 * drop UD datagrams; 1 drops them all, 0 none. Thread: any. */
#if TW_TESTING
void tw_verbs_test_drop_conn(unsigned every);
#endif

/** A device of the transport (opaque). */
typedef struct tw_verbs_dev tw_verbs_dev_t;

/** Fail every peer reached through @p dev for good (device, SRQ or CQ
 * fatal: peer_down TW_ERR_PEER_FAILED); the device stays unusable. With
 * @p cq_lost (CQ_ERR, DEVICE_FATAL) the CQ is never polled again and the
 * work requests still posted complete here, as flushed.
 * Thread: the device's engine. */
void tw_verbs_dev_fatal(tw_verbs_dev_t *dev, const char *what, bool cq_lost);
/** From any thread (the async event thread): a device-wide fault, kind
 * TW_VERBS_LOST_SRQ or TW_VERBS_LOST_CQ (the CQ or the whole device):
 * flagged for the device's engine, which applies it (tw_verbs_dev_fatal)
 * on its next pass -- a flag, so a full submission lane cannot lose it.
 * @p what must stay valid (a string literal). */
#define TW_VERBS_LOST_SRQ 1
#define TW_VERBS_LOST_CQ  2
void tw_verbs_dev_lost(tw_verbs_dev_t *dev, int kind, const char *what);
/** Test hook: as if device 0 of @p iface reported a device-wide fault
 * (@p kind as for tw_verbs_dev_lost); TW_ERR_INVALID if @p iface is not
 * a verbs iface. tw_verbs_test_lost_ops: how many posted work requests
 * were completed by hand after a lost CQ, in this process. */
#if TW_TESTING
tw_status_t tw_verbs_test_dev_lost(tw_tl_iface_t *iface, int kind);
#endif
#if TW_TESTING
unsigned long tw_verbs_test_lost_ops(void);
#endif
/** @p dev's port went down (PORT_ERR): every peer reached through it is
 * down for now (peer_down TW_ERR_TRANSPORT), sends to them fail at once
 * with TW_ERR_TRANSPORT, and each endpoint goes back to "not connected"
 * once its QP flushed. Thread: the device's engine. */
void tw_verbs_port_down(tw_verbs_dev_t *dev, const char *what);
/** @p dev's port is active again (PORT_ACTIVE): usable once our GID (LID)
 * is back; peers down for now connect again on their next send. Thread:
 * the device's engine. */
void tw_verbs_port_up(tw_verbs_dev_t *dev);
/** Fail the peer whose RC QP is @p qp_num on @p dev for good (QP fatal,
 * request or access error events). Thread: the device's engine. */
void tw_verbs_qp_fatal(tw_verbs_dev_t *dev, uint32_t qp_num, const char *what);
#define TW_VERBS_REPORT_SRQ       (-2)
#define TW_VERBS_REPORT_PORT_DOWN (-3)
#define TW_VERBS_REPORT_PORT_UP   (-4)
/** From any thread (the async event thread): hand an event to the
 * device's engine -- a QP's (@p qp_num >= 0), the whole device's (-1),
 * the SRQ's limit reached (TW_VERBS_REPORT_SRQ: refill and re-arm), the
 * port down or up again (TW_VERBS_REPORT_PORT_DOWN / _UP).
 * @p what must stay valid (a string literal). TW_ERR_AGAIN: the engine's
 * submission lane is full; retry. */
tw_status_t tw_verbs_dev_report(tw_verbs_dev_t *dev, int64_t qp_num, const char *what);

#endif /* TW_VERBS_H */
