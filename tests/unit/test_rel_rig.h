/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * test_rel's rig: two ranks in one process, each with rel over one or two
 * paths of the scripted fake transport (tests/common/tw_fake_tl.h), in
 * virtual time. A case opens it (rig_open), sends numbered messages
 * (send_msg: eager when small, zero-copy with a completion when large),
 * scripts the wire through its hooks and endpoint fields, pumps (wire,
 * progress, clock) and checks exact counters; rig_close frees all.
 *
 * Per-case state: everything a case or its hooks use lives in `rig`,
 * zeroed by case_begin, so no case sees what an earlier one left (a run
 * of several cases in one process starts each afresh).
 */
#ifndef TEST_REL_RIG_H
#define TEST_REL_RIG_H

#include <stdbool.h>
#include <stdint.h>

#include "reliability/tw_rel.h"
#include "reliability/tw_rel_proto.h"
#include "tw_fake_tl.h"
#include "tw_test.h"

#define NPATHS      2
#define UHDR        32u
#define MAX_MSGS    4096
#define PAYLOAD_MAX (200u * 1024u)
#define STEP_NS     50000ull /* virtual time per pump step: 50 us */
#define LEN3        10000u   /* a message of 3 fragments: 32 + 4064 | 4096 | rest */

typedef struct side {
    int rank;
    tw_pe_t *pe;
    tw_tl_iface_t *rel; /* over paths[] */
    tw_tl_iface_t *paths[NPATHS];
    uint64_t next_in;   /* index of the next message expected from the peer */
    uint64_t delivered; /* messages handed up */
    uint64_t bad;       /* wrong order or content */
    int downs;
    tw_status_t down_why;
} side_t;

/* A zero-copy send's completion. */
typedef struct sreq {
    tw_tl_comp_t comp;
    tw_status_t status;
    int done;
} sreq_t;

typedef struct rel_rig {
    twt_fake_t wire;
    side_t sides[2];
    int npaths;
    /* Virtual time: rel reads it through its clock hook, the pump
     * advances it, so every count is exact however slow the machine. */
    uint64_t vnow;
    uint64_t last_heard[2]; /* when a rank last got a frame */
    bool mute[2];           /* a hung rank: sends nothing, hears nothing, no progress */
    uint64_t next_out[2];   /* index of the next message each rank sends */
    uint64_t want_delivered;
    sreq_t sreqs[2][MAX_MSGS]; /* by sending rank and message index */
    /* zcopy buffers stay until the case ends (rel reads them until acked) */
    unsigned char *zbufs[MAX_MSGS];
    size_t zlens[MAX_MSGS];
    unsigned nzbufs;
    /* A frame rank 1 gets from inside its own upcall, and its delivered
     * count right after. */
    twt_fake_frame_t *reenter;
    uint64_t reenter_delivered;
    /* What the cases' hooks keep. */
    uint64_t rng;
    bool (*match)(const twt_fake_frame_t *f);
    unsigned hits; /* frames the hook acted on */
    uint8_t crc_form;
    unsigned lose_permille, corrupt_permille;
    twt_fake_frame_t *kept[4];
    unsigned nkept;
    int hold_src;      /* hold_data's rank */
    unsigned hold_max; /* and how many of its data frames (<= 4) */
} rel_rig_t;

extern rel_rig_t rig;

tw_rel_cfg_t test_cfg(void);
/* Zero the rig and name the case. */
void case_begin(const char *name);
/* Both ranks, rel over @p npaths fake paths each, connected and ready. */
void rig_open(const tw_rel_cfg_t *cfg, int npaths);
void rig_close(void);
/* rig_close, and the zero-copy buffers freed. */
void case_end(void);

uint64_t rel_stat(int r, unsigned id);
/* DATA frames path @p path carried, both ways (dark ones too). */
uint64_t carried(int path);
/* Path @p path drops everything (both ranks' ends). */
void path_dark(int path, bool dark);
/* Path @p path's sends are refused with @p st (TW_OK: taken again). */
void path_refuse(int path, tw_status_t st);
/* Rank @p r hangs: sends nothing, hears nothing, runs no progress. */
void rank_mute(int r);

/* Deliver what is on the wire (through its hooks) and run both ranks'
 * timers, step by step, for up to @p ms of virtual time or until @p done
 * says so. True when @p done did (or, with no @p done, always). */
bool pump(int ms, bool (*done)(void));
/* Rank 1 has received want_delivered messages. */
bool all_delivered(void);

/* Message next_out[r] from rank r to the other (see the file comment). */
tw_status_t send_msg(int r, size_t len);

/* Frames. */
bool is_data_frame(const twt_fake_frame_t *f);
/* A data frame in the long form, fragment @p frag of @p nfrags. */
bool is_data(const twt_fake_frame_t *f, uint32_t frag, uint32_t nfrags);

/* The cases (test_rel_frames.c, test_rel_paths.c). */
void case_basic(void);
void case_first_frag(void);
void case_last_frag(void);
void case_ack_lost(void);
void case_nack_lost(void);
void case_dup_done(void);
void case_dup_held(void);
void case_crc_short(void);
void case_crc_long(void);
void case_far_stale(void);
void case_left_then_closed(void);
void case_left_then_due(void);
void case_leaving_bye_lost(void);
void case_leaving_data_unacked(void);
void case_closed_before_bye(void);
void case_closed_then_ack(void);
void case_reenter(void);
void case_wrap(void);
void case_corrupt(void);
void case_b6(void);
void case_failover(void);
void case_failback_due(void);
void case_fornow(void);
void case_fornow_refused(void);
void case_fornow_forgood(void);
void case_refusing(void);
void case_refusing_only(void);
void case_nopath(void);
void case_keepalive(void);
void case_early_stamp(void);
void case_pause(void);

#endif /* TEST_REL_RIG_H */
