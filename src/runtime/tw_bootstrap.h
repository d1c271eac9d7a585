/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Joining the job: one interface over the ways a process can be started.
 *
 *   backend  chosen when                          lifeline
 *   twrun    TW_BOOT_ADDR is set                  EOF on twrun's socket
 *   pmix     PMIX_NAMESPACE and PMIX_RANK are set a pidfd on the parent
 *            (built with PMIx)                    (the PMIx server)
 *   single   neither (and no other launcher       none
 *            says there are several processes)
 *
 * The choice is made from the environment alone, before any backend runs
 * (PMIx_Init without a server returns an error but leaves the library
 * half up, so its return code must not decide). docs/bootstrap.md says
 * why each piece is so.
 *
 * Every backend offers: put this rank's blob (one small value, at most
 * TW_BOOT_BLOB_MAX bytes: far under the 4 MiB that break mpirun's PMIx
 * server), a fence that waits for every rank's put and makes the blobs
 * readable (with a timeout: TW_BOOT_TIMEOUT), get any rank's blob after
 * the fence, a barrier, a lifeline, and the node of every rank as the
 * launcher knows it. The front-end (tw_bootstrap.c) adds the node map:
 * TW_NODE_ID overrides this rank's node (tests emulate nodes so), the
 * ranks then exchange their nodes in a round of their own; local rank and
 * size follow from the map, so every rank derives the same ones.
 *
 * Every blob a rank publishes starts with a small header -- the kind of
 * round and the publisher's node -- so a rank that reads a blob of
 * another round (ranks that disagree on TW_NODE_ID) says so instead of
 * misreading it.
 *
 * Thread: the caller of tw_init / tw_finalize, except lifeline_lost
 * (engine 0's owner).
 */
#ifndef TW_BOOTSTRAP_H
#define TW_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "runtime/tw_boot.h"
#include "threadwire/threadwire.h"

typedef struct tw_bootstrap tw_bootstrap_t;

/** What the environment says (the launcher's variables and ours). */
typedef struct tw_bootstrap_env {
    char rank[TW_CFG_STRLEN], size[TW_CFG_STRLEN], local_rank[TW_CFG_STRLEN],
        local_size[TW_CFG_STRLEN], job_key[TW_CFG_STRLEN], boot_addr[TW_CFG_STRLEN],
        node_id[TW_CFG_STRLEN];
    int timeout_s; /* TW_BOOT_TIMEOUT */
} tw_bootstrap_env_t;

typedef struct tw_bootstrap_ops {
    const char *name; /* "twrun", "pmix", "single": logs, stats, tw_info */
    /** Join: rank, size and job key into the base (tw_bootstrap_init).
     * TW_ERR_BOOTSTRAP (logged), TW_ERR_NOMEM. */
    tw_status_t (*open)(const tw_bootstrap_env_t *env, tw_bootstrap_t **bs_p);
    /** Publish this rank's blob (replaces an earlier one). */
    tw_status_t (*put)(tw_bootstrap_t *bs, const void *blob, size_t len);
    /** Wait until every rank put and fenced, collecting the blobs:
     * TW_ERR_TIMEOUT after @p timeout_ms, TW_ERR_PEER_FAILED, TW_ERR_BOOTSTRAP. */
    tw_status_t (*fence)(tw_bootstrap_t *bs, int timeout_ms);
    /** @p rank's blob as of the last fence into @p buf (room *@p len_p). */
    tw_status_t (*get)(tw_bootstrap_t *bs, int rank, void *buf, size_t *len_p);
    /** Every rank got here (statuses as fence). */
    tw_status_t (*barrier)(tw_bootstrap_t *bs, int timeout_ms);
    /** An fd that turns readable when the launcher may be gone, or -1. */
    int (*lifeline_fd)(tw_bootstrap_t *bs);
    /** Is the launcher gone? Then @p why says how. Thread: engine 0's owner. */
    bool (*lifeline_lost)(tw_bootstrap_t *bs, char *why, size_t why_len);
    /** The node of every rank as the launcher knows it: @p node_of[size]
     * (any non-negative ids; ranks of one node share one). This rank's
     * must be known; -1 for a rank the launcher does not know yet: then
     * the front-end runs the node round, where every rank publishes its
     * own (a backend may leave ranks unknown only when it runs that round
     * anyway, on every rank: PMIx, for the job key). */
    tw_status_t (*nodes)(tw_bootstrap_t *bs, int *node_of);
    /** Leave the job (PMIx_Finalize) and free. */
    void (*close)(tw_bootstrap_t *bs);
} tw_bootstrap_ops_t;

/** Base of every backend's struct (its first member, `super`). The node
 * map is the front-end's: filled by tw_bootstrap_open. */
struct tw_bootstrap {
    const tw_bootstrap_ops_t *ops;
    int rank;
    int size;
    int timeout_ms;              /* TW_BOOT_TIMEOUT: every fence and barrier */
    char job_key[TW_CFG_STRLEN]; /* "" when the launcher has none */
    int *node_of;                /* [size]: dense node ids 0 .. nnodes-1 */
    int nnodes;
    int local_rank; /* among the ranks of this rank's node, in rank order */
    int local_size;
};

extern const tw_bootstrap_ops_t tw_bootstrap_twrun_ops;
extern const tw_bootstrap_ops_t tw_bootstrap_single_ops;
#if TW_HAVE_PMIX
extern const tw_bootstrap_ops_t tw_bootstrap_pmix_ops;
#endif

/** The launcher's and our variables (tw_info, validation at tw_init). */
extern const tw_cfg_table_t tw_bootstrap_cfg_table;

/** Which backend the environment asks for, or NULL with the reason logged
 * (a launcher started several processes we cannot join: TW_ERR_BOOTSTRAP).
 * Looks at the environment only. */
const tw_bootstrap_ops_t *tw_bootstrap_select(const tw_bootstrap_env_t *env);

/** Read the environment, select, open, and build the node map.
 * TW_ERR_BOOTSTRAP (logged), TW_ERR_NOMEM, TW_ERR_TIMEOUT, TW_ERR_INVALID
 * (a bad TW_NODE_ID or TW_BOOT_TIMEOUT). */
tw_status_t tw_bootstrap_open(tw_bootstrap_t **bs_p);

/** Publish @p blob, fence: then tw_bootstrap_get reads any rank's. */
tw_status_t tw_bootstrap_exchange(tw_bootstrap_t *bs, const void *blob, size_t len);
/** @p rank's blob of the last exchange (room *@p len_p, at most
 * TW_BOOT_BLOB_MAX). TW_ERR_BOOTSTRAP when it is of another round or
 * says another node than the map (logged). */
tw_status_t tw_bootstrap_get(tw_bootstrap_t *bs, int rank, void *buf, size_t *len_p);
tw_status_t tw_bootstrap_barrier(tw_bootstrap_t *bs);
int tw_bootstrap_lifeline_fd(tw_bootstrap_t *bs);
bool tw_bootstrap_lifeline_lost(tw_bootstrap_t *bs, char *why, size_t why_len);
/** Node map as text, "2 nodes: node 0: ranks 0-1; node 1: ranks 2-3". */
void tw_bootstrap_node_text(const tw_bootstrap_t *bs, char *buf, size_t len);
/** Fill the base of a backend's struct. */
void tw_bootstrap_init(tw_bootstrap_t *bs, const tw_bootstrap_ops_t *ops, int rank, int size,
                       const tw_bootstrap_env_t *env);
void tw_bootstrap_close(tw_bootstrap_t *bs);

/** Largest blob a caller may exchange: what the header leaves of
 * TW_BOOT_BLOB_MAX. */
#define TW_BOOTSTRAP_HDR      8u
#define TW_BOOTSTRAP_BLOB_MAX (TW_BOOT_BLOB_MAX - TW_BOOTSTRAP_HDR)

#endif /* TW_BOOTSTRAP_H */
