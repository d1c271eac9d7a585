/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Node-leader routing (README.md here has the overview): a layer beside
 * the transports (ops table "route", TW_TL_CAP_BESIDE). It sends to a
 * rank of another node through the leaders -- the lowest rank of each
 * node: shm to our leader, one connection between each pair of leaders,
 * shm from theirs to the rank -- so the connections between nodes grow
 * with the nodes, not with the processes squared.
 *
 * TW_ROUTE=leader puts it first in routing order: every rank of another
 * node goes through it. TW_ROUTE=direct (the default) opens it only under
 * TW_RELIABLE=1, last: rel then has it as the last path to every rank of
 * another node, for when the direct paths fail.
 */
#ifndef TW_ROUTE_H
#define TW_ROUTE_H

#include "core/tw_config.h"
#include "transports/base/tw_tl.h"

enum { TW_ROUTE_DIRECT, TW_ROUTE_LEADER };

/* Tunables (TW_ROUTE*; table tw_route_cfg_table). */
typedef struct tw_route_cfg {
    int mode;           /* TW_ROUTE_DIRECT / TW_ROUTE_LEADER */
    uint64_t linger_ns; /* a leader at finalize waits this long for its node's ranks */
} tw_route_cfg_t;

extern const tw_cfg_table_t tw_route_cfg_table;
extern const tw_tl_ops_t tw_route_ops;

enum {
    TW_ROUTE_STAT_SENT,         /* frames this rank started */
    TW_ROUTE_STAT_SENT_BYTES,   /* their payload bytes */
    TW_ROUTE_STAT_FORWARDED,    /* frames passed on for other ranks (leaders) */
    TW_ROUTE_STAT_FWD_BYTES,    /* their payload bytes */
    TW_ROUTE_STAT_DELIVERED,    /* messages handed up */
    TW_ROUTE_STAT_QUEUED,       /* frames that waited for room at the next hop */
    TW_ROUTE_STAT_HELD,         /* frames that overtook an earlier one: held for it */
    TW_ROUTE_STAT_AGAIN,        /* sends refused: the next hop full, or a queue to it */
    TW_ROUTE_STAT_DROPPED,      /* frames dropped: next hop gone, or malformed (logged) */
    TW_ROUTE_STAT_CRC_FAILURES, /* frames whose header failed its checksum: dropped */
    TW_ROUTE_STAT_DOWNS,        /* ranks reported unreachable up */
    TW_ROUTE_STAT_COUNT
};

#endif /* TW_ROUTE_H */
