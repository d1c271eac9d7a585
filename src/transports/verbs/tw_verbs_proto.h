/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Wire formats of the verbs transport (its protocol: tw_verbs_tx.c,
 * tw_verbs_cm.c, tw_verbs_rndv.c). Pure functions, no libibverbs, so they
 * are unit-tested and fuzzable on any host. Integers are little-endian
 * on the wire; every length read from the wire is checked against the
 * bytes received and the caller's limits before anything past it is read
 * (TW_ERR_PROTOCOL otherwise, with @p why).
 *
 * Frames (RC send/receive through the SRQ) follow each other in a receive:
 * the sender coalesces what waits in a connection's queue into one send
 * of up to 9 KiB. Each has a 16-byte header:
 *   version u8 | type u8 | am_id u8 | flags u8 | hdr_len u16 | pad u16 | len u64
 *   AM   hdr_len header bytes, then len payload bytes (eager copy).
 *   RTS  a rendezvous: sid u64 | raddr u64 | rkey u32 | pad u32, then
 *        hdr_len header bytes; len = the payload length waiting at raddr.
 *   FIN  the receiver pulled (or released) rendezvous sid: sid u64 |
 *        status i32 | pad u32; hdr_len = len = 0.
 *   BYE  clean close: the sender finalizes; no failure to report.
 *
 * Connection message (UD, 48 bytes; the receive buffer has the 40-byte GRH
 * in front):
 *   magic u32 | version u8 | type u8 | pad u16 | src_rank u32 | dst_rank u32 |
 *   size u32 | src_dev u8 | dst_dev u8 | pad u16 | qpn u32 | psn u32 |
 *   gen u32 | echo u32 | mac u64 = SipHash(job key, the 40 bytes before it)
 *   REQ  "here is my RC QP for you"; REP "mine for you, and yours is
 *   connected" (so I am in RTR); RTU "yours is connected too"; DOWN "I
 *   failed you" (the QP went to error: fail me too); RESET "I lost our
 *   connection for now" (drop yours; a REQ of a newer generation follows
 *   when it is wanted again); PING / PONG: liveness of a connected peer.
 *   gen (>= 1) is the generation of the sender's
 *   endpoint for the receiver: it grows each time the sender resets its
 *   endpoint after a port went down, so messages of an older connection
 *   are told apart from a new one's (tw_verbs_cm.c, "Generations"); echo
 *   is the receiver's generation the sender is connected to (0: none
 *   yet), so a REP, RTU, PING, PONG, RESET or DOWN meant for an older
 *   endpoint of the receiver is told apart too. Version 2 added both.
 *
 * Address (the bootstrap blob): magic u32 | version u8 | ndev u8 | flags u8 |
 *   pad u8, then per device: gid[16] | lid u16 | port u8 | link u8 |
 *   ud_qpn u32 | mtu u8 | pad[7]  (32 bytes).
 *
 * Remote key (tw_verbs_mem_reg): magic u16 | ndev u8 | pad u8 | rkey u32
 *   per device (the peer uses the key of the device it is connected to).
 */
#ifndef TW_VERBS_PROTO_H
#define TW_VERBS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

#define TW_VERBS_VERSION    2u
#define TW_VERBS_FRAME_LEN  16u
#define TW_VERBS_RTS_LEN    24u /* after the frame header */
#define TW_VERBS_FIN_LEN    16u
#define TW_VERBS_CONN_LEN   48u
#define TW_VERBS_CONN_MAGIC 0x4e435754u /* "TWCN" */
#define TW_VERBS_ADDR_MAGIC 0x42565754u /* "TWVB" */
#define TW_VERBS_ADDR_HDR   8u
#define TW_VERBS_ADDR_ENTRY 32u
#define TW_VERBS_RKEY_MAGIC 0x4b56u /* "VK" */
#define TW_VERBS_MAX_DEVS   8
#define TW_VERBS_RKEY_MAX   (4u + 4u * TW_VERBS_MAX_DEVS)

enum { TW_VERBS_F_AM = 1, TW_VERBS_F_RTS, TW_VERBS_F_FIN, TW_VERBS_F_BYE, TW_VERBS_F_TYPE_MAX };
enum {
    TW_VERBS_C_REQ = 1,
    TW_VERBS_C_REP,
    TW_VERBS_C_RTU,
    TW_VERBS_C_DOWN,
    TW_VERBS_C_PING, /* liveness: the peer's engine answers PONG */
    TW_VERBS_C_PONG,
    TW_VERBS_C_RESET, /* "I lost our connection for now: drop yours, I reconnect" */
    TW_VERBS_C_TYPE_MAX
};
enum { TW_VERBS_LINK_IB = 1, TW_VERBS_LINK_ETH = 2 };
#define TW_VERBS_ADDR_FLAG_THREAD 0x01u /* the rank runs progress threads */

/** A parsed frame. Offsets are from the start of the frame. */
typedef struct tw_verbs_frame {
    uint8_t type; /* TW_VERBS_F_* */
    uint8_t am_id;
    uint16_t hdr_len;
    uint64_t len;    /* AM: payload bytes that follow; RTS: the announced length */
    uint64_t sid;    /* RTS, FIN */
    uint64_t raddr;  /* RTS */
    uint32_t rkey;   /* RTS */
    int32_t status;  /* FIN */
    size_t hdr_off;  /* AM, RTS: where the header bytes are */
    size_t data_off; /* AM: where the payload is */
    size_t total;    /* the frame's bytes; the next frame (if any) starts there */
} tw_verbs_frame_t;

typedef struct tw_verbs_conn {
    uint8_t type; /* TW_VERBS_C_* */
    uint32_t src_rank, dst_rank, size;
    uint8_t src_dev, dst_dev;
    uint32_t qpn, psn; /* 24 bits each */
    uint32_t gen;      /* the sender's endpoint generation, >= 1 */
    uint32_t echo;     /* the receiver's generation the sender knows, or 0 */
} tw_verbs_conn_t;

typedef struct tw_verbs_addr_dev {
    uint8_t gid[16];
    uint16_t lid;
    uint8_t port;
    uint8_t link; /* TW_VERBS_LINK_* */
    uint32_t ud_qpn;
    uint8_t mtu; /* enum ibv_mtu value, 1..5 */
} tw_verbs_addr_dev_t;

typedef struct tw_verbs_addr {
    uint8_t ndev;
    uint8_t flags;
    tw_verbs_addr_dev_t dev[TW_VERBS_MAX_DEVS];
} tw_verbs_addr_t;

/** Frame header + fixed part, written at @p buf; returns the bytes
 * written (the caller appends header bytes and, for AM, the payload).
 * @p f->hdr_off / data_off are ignored. */
size_t tw_verbs_frame_pack(const tw_verbs_frame_t *f, uint8_t *buf);

/** Parse the frame at the start of @p len received bytes (more frames may
 * follow it: f->total says where the next starts). Checks version, type,
 * reserved bits, that hdr_len <= @p max_hdr, that the frame's bytes are
 * all within @p len, that an RTS length is within (0, @p max_rndv], and
 * that FIN / BYE carry nothing else. */
tw_status_t tw_verbs_frame_parse(const void *buf, size_t len, size_t max_hdr, uint64_t max_rndv,
                                 tw_verbs_frame_t *f, const char **why);

/** Write @p c and its MAC under @p key: TW_VERBS_CONN_LEN bytes. */
void tw_verbs_conn_pack(const tw_verbs_conn_t *c, const uint8_t key[16],
                        uint8_t buf[TW_VERBS_CONN_LEN]);

/** Parse a connection message of @p len bytes meant for @p my_rank of a
 * job of @p size ranks; the MAC must check under @p key, and gen must not
 * be 0. */
tw_status_t tw_verbs_conn_parse(const void *buf, size_t len, const uint8_t key[16],
                                uint32_t my_rank, uint32_t size, tw_verbs_conn_t *c,
                                const char **why);

/** Is connection message @p c of a connection that is over? For an
 * endpoint of generation @p gen that is connected (@p connected) to the
 * peer's generation @p rgen, or (not connected) listens to the peer's
 * generations from @p rgen_min on: true when @p c comes from an older
 * endpoint of the peer's, or is meant for an older one of ours -- every
 * type but REQ (which starts a connection to whatever endpoint we have)
 * must echo @p gen; DOWN and RESET may echo 0 (a peer that never
 * connected). tw_verbs_conn_recv drops such messages. */
bool tw_verbs_conn_stale(const tw_verbs_conn_t *c, uint32_t gen, bool connected, uint32_t rgen,
                         uint32_t rgen_min);

/** Bytes tw_verbs_addr_pack writes for @p ndev devices. */
size_t tw_verbs_addr_len(unsigned ndev);
/** TW_ERR_INVALID when @p cap is too small or ndev is 0 or too many. */
tw_status_t tw_verbs_addr_pack(const tw_verbs_addr_t *a, void *buf, size_t cap, size_t *len_p);
tw_status_t tw_verbs_addr_parse(const void *buf, size_t len, tw_verbs_addr_t *a, const char **why);

/** Remote key: @p ndev rkeys. Returns the bytes written (<= TW_VERBS_RKEY_MAX). */
size_t tw_verbs_rkey_pack(const uint32_t *rkeys, unsigned ndev, uint8_t *buf);
/** The rkey for device @p dev of a packed key (from any caller: checked). */
tw_status_t tw_verbs_rkey_parse(const void *buf, unsigned dev, uint32_t *rkey_p);

/** The UD Q_Key of a job: from its key, high bit clear (not a controlled key). */
uint32_t tw_verbs_qkey(const uint8_t key[16]);

/* Send-queue credits: what a QP may still post. Owner thread only. */
typedef struct tw_verbs_credits {
    uint32_t avail; /* WQEs free */
    uint32_t max;
    uint64_t posted; /* work requests posted, ever */
    uint64_t done;   /* completions seen (success or flush), ever */
} tw_verbs_credits_t;

static inline void tw_verbs_credits_init(tw_verbs_credits_t *c, uint32_t max)
{
    *c = (tw_verbs_credits_t){.avail = max, .max = max};
}
/** Take @p n WQEs; false (nothing taken) when fewer are free. */
static inline bool tw_verbs_credits_take(tw_verbs_credits_t *c, uint32_t n)
{
    if (c->avail < n) {
        return false;
    }
    c->avail -= n;
    c->posted += n;
    return true;
}
/** One completion came back: its WQE is free. False on a completion
 * nobody posted (a bug or a corrupt CQ: the caller fails the QP). */
static inline bool tw_verbs_credits_put(tw_verbs_credits_t *c)
{
    if (c->done == c->posted || c->avail >= c->max) {
        return false;
    }
    c->avail++;
    c->done++;
    return true;
}

#endif /* TW_VERBS_PROTO_H */
