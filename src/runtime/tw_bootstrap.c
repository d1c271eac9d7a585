/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The bootstrap front-end (tw_bootstrap.h): the variables, the choice of
 * backend, the node map, the header on every published blob; and the two
 * small backends, twrun (over tw_boot.c, its wire protocol unchanged) and
 * a job of one.
 */
#define _GNU_SOURCE
#include "runtime/tw_bootstrap.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"

static const tw_cfg_entry_t tw_bootstrap_cfg_entries[] = {
    {.name = "TW_RANK",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: this process's rank",
     .offset = offsetof(tw_bootstrap_env_t, rank)},
    {.name = "TW_SIZE",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: processes in the job",
     .offset = offsetof(tw_bootstrap_env_t, size)},
    {.name = "TW_LOCAL_RANK",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: rank among the processes of this node",
     .offset = offsetof(tw_bootstrap_env_t, local_rank)},
    {.name = "TW_LOCAL_SIZE",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: processes of the job on this node",
     .offset = offsetof(tw_bootstrap_env_t, local_size)},
    {.name = "TW_JOB_KEY",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: the job's random 128-bit key (hex)",
     .offset = offsetof(tw_bootstrap_env_t, job_key)},
    {.name = "TW_BOOT_ADDR",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "set by twrun: its address-exchange socket",
     .offset = offsetof(tw_bootstrap_env_t, boot_addr)},
    {.name = "TW_BOOT_TIMEOUT",
     .type = TW_CFG_INT,
     .defval = "60",
     .help = "seconds every bootstrap fence and barrier (twrun, PMIx) waits for the slowest "
             "rank before tw_init fails",
     .offset = offsetof(tw_bootstrap_env_t, timeout_s),
     .min = 1,
     .max = 86400},
    {.name = "TW_NODE_ID",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "tests: this rank's node, overriding the launcher's (N; or a list a,b,... whose "
             "r-th item is rank r's); ranks of different nodes do not use shm; set on every "
             "rank or none",
     .offset = offsetof(tw_bootstrap_env_t, node_id)},
};

const tw_cfg_table_t tw_bootstrap_cfg_table = {
    .module = "bootstrap",
    .entries = tw_bootstrap_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_bootstrap_cfg_entries),
};

/* ---- the published header ------------------------------------------------ */

/* u8 version (1) | u8 round (TW_BOOTSTRAP_ROUND_*) | u16 reserved (0) |
 * u32 the publisher's node id, little-endian; then the caller's bytes. */
enum { TW_BOOTSTRAP_ROUND_NODE = 1, TW_BOOTSTRAP_ROUND_ADDR = 2 };
#define TW_BOOTSTRAP_VERSION 1u

static void tw_bootstrap_hdr_pack(unsigned char *p, unsigned round, int node)
{
    uint32_t n = (uint32_t)node;

    p[0] = TW_BOOTSTRAP_VERSION;
    p[1] = (unsigned char)round;
    p[2] = p[3] = 0;
    for (int i = 0; i < 4; i++) {
        p[4 + i] = (unsigned char)(n >> (8 * i));
    }
}

/* Put a header and @p len bytes, fence. */
static tw_status_t tw_bootstrap_round(tw_bootstrap_t *bs, unsigned round, int node,
                                      const void *data, size_t len)
{
    unsigned char buf[TW_BOOT_BLOB_MAX];
    tw_status_t st;

    if (len > TW_BOOTSTRAP_BLOB_MAX) {
        tw_error("boot", "a blob of %zu bytes exceeds %u", len, TW_BOOTSTRAP_BLOB_MAX);
        return TW_ERR_INVALID;
    }
    tw_bootstrap_hdr_pack(buf, round, node);
    if (len > 0) {
        memcpy(buf + TW_BOOTSTRAP_HDR, data, len);
    }
    st = bs->ops->put(bs, buf, TW_BOOTSTRAP_HDR + len);
    if (st == TW_OK) {
        st = bs->ops->fence(bs, bs->timeout_ms);
    }
    return st;
}

/* @p rank's blob of round @p round: its node into *@p node_p, its payload
 * into @p buf (room *@p len_p; 0 bytes from a rank already a round
 * ahead, in the node round). */
static tw_status_t tw_bootstrap_read(tw_bootstrap_t *bs, int rank, unsigned round, int *node_p,
                                     void *buf, size_t *len_p)
{
    unsigned char tmp[TW_BOOT_BLOB_MAX];
    size_t len = sizeof(tmp);
    uint32_t node = 0;
    tw_status_t st = bs->ops->get(bs, rank, tmp, &len);

    if (st != TW_OK) {
        return st;
    }
    if (len < TW_BOOTSTRAP_HDR || tmp[0] != TW_BOOTSTRAP_VERSION || tmp[2] != 0 || tmp[3] != 0) {
        tw_error("boot", "rank %d published a malformed blob (%zu bytes)", rank, len);
        return TW_ERR_BOOTSTRAP;
    }
    /* A rank ahead of us in the node round may have put its next blob
     * already (twrun keeps one per rank): its node is in the header; its
     * payload is not this round's. */
    bool ahead = round == TW_BOOTSTRAP_ROUND_NODE && tmp[1] > round;
    if (tmp[1] != round && !ahead) {
        tw_error("boot",
                 "rank %d is in another bootstrap round than this rank (%u, not %u): set "
                 "TW_NODE_ID on every rank or on none",
                 rank, tmp[1], round);
        return TW_ERR_BOOTSTRAP;
    }
    for (int i = 3; i >= 0; i--) {
        node = node << 8 | tmp[4 + i];
    }
    len = ahead ? 0 : len - TW_BOOTSTRAP_HDR;
    if (len > *len_p || node > INT32_MAX) {
        tw_error("boot", "the blob of rank %d (%zu bytes, node %u) does not fit", rank, len, node);
        return TW_ERR_BOOTSTRAP;
    }
    if (len > 0) {
        memcpy(buf, tmp + TW_BOOTSTRAP_HDR, len);
    }
    *len_p = len;
    *node_p = (int)node;
    return TW_OK;
}

/* ---- the node map ----------------------------------------------------------- */

/* TW_NODE_ID: "N", or "a,b,..." whose rank-th item is ours. -1: unset. */
static tw_status_t tw_bootstrap_node_override(const char *text, int rank, int *node_p)
{
    const char *p = text;
    char *end;
    long v = -1;

    *node_p = -1;
    if (text[0] == '\0') {
        return TW_OK;
    }
    for (int i = 0;; i++) {
        v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
            tw_error("boot", "TW_NODE_ID='%s': want a node number, or a list of them by rank",
                     text);
            return TW_ERR_INVALID;
        }
        if (i == rank || (*end == '\0' && i == 0)) {
            break; /* ours, or one number for every rank */
        }
        if (*end == '\0') {
            tw_error("boot", "TW_NODE_ID='%s' lists %d nodes: none for rank %d", text, i + 1, rank);
            return TW_ERR_INVALID;
        }
        p = end + 1;
    }
    *node_p = (int)v;
    return TW_OK;
}

/* Ids made dense (0.. in order of first rank), this rank's local rank and
 * size. */
static void tw_bootstrap_node_finish(tw_bootstrap_t *bs, const int *raw)
{
    bs->nnodes = 0;
    bs->local_rank = 0;
    bs->local_size = 0;
    for (int r = 0; r < bs->size; r++) {
        int d = -1;
        for (int q = 0; q < r && d < 0; q++) {
            if (raw[q] == raw[r]) {
                d = bs->node_of[q];
            }
        }
        bs->node_of[r] = d >= 0 ? d : bs->nnodes++;
    }
    for (int r = 0; r < bs->size; r++) {
        if (bs->node_of[r] == bs->node_of[bs->rank]) {
            bs->local_rank += r < bs->rank;
            bs->local_size++;
        }
    }
}

/* A fresh random job key, 32 hex digits (the transports authenticate
 * peers with it). */
static tw_status_t tw_bootstrap_new_key(char key[33])
{
    unsigned char raw[16];

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        tw_error("boot", "getrandom failed: %m");
        return TW_ERR_BOOTSTRAP;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        snprintf(key + 2 * i, 3, "%02x", raw[i]);
    }
    return TW_OK;
}

/* The node round: every rank publishes its node (and rank 0 the job key
 * when the launcher gave none); @p raw[r] becomes rank r's node. */
static tw_status_t tw_bootstrap_node_round(tw_bootstrap_t *bs, int mine, int *raw)
{
    char key[33] = "";
    bool need_key = bs->job_key[0] == '\0';
    tw_status_t st = TW_OK;

    if (need_key && bs->rank == 0) {
        st = tw_bootstrap_new_key(key);
    }
    if (st == TW_OK) {
        st = tw_bootstrap_round(bs, TW_BOOTSTRAP_ROUND_NODE, mine, key, strlen(key));
    }
    for (int r = 0; st == TW_OK && r < bs->size; r++) {
        size_t len = r == 0 ? sizeof(key) - 1 : 0;
        st = tw_bootstrap_read(bs, r, TW_BOOTSTRAP_ROUND_NODE, &raw[r], key, &len);
        if (st == TW_OK && r == 0 && need_key) {
            key[len] = '\0';
            if (len != 32) { /* 0: its next blob replaced it (a backend that keeps one) */
                tw_error("boot", "rank 0 published a job key of %zu characters (want 32)", len);
                st = TW_ERR_BOOTSTRAP;
            }
            snprintf(bs->job_key, sizeof(bs->job_key), "%s", key);
        }
    }
    return st;
}

/* The launcher's map; with TW_NODE_ID, ranks the launcher does not know
 * yet, or no job key from the launcher (PMIx), a round in which every rank
 * publishes its node. */
static tw_status_t tw_bootstrap_node_map(tw_bootstrap_t *bs, const char *override)
{
    size_t bytes = (size_t)bs->size * sizeof(int);
    int *raw = tw_calloc(1, bytes);
    int mine = -1;
    bool unknown = false;
    tw_status_t st;

    bs->node_of = tw_calloc(1, bytes);
    if (raw == NULL || bs->node_of == NULL) {
        st = TW_ERR_NOMEM;
        goto out;
    }
    st = bs->ops->nodes(bs, raw);
    if (st == TW_OK) {
        st = tw_bootstrap_node_override(override, bs->rank, &mine);
    }
    if (st == TW_OK && mine >= 0) {
        raw[bs->rank] = mine;
    }
    for (int r = 0; st == TW_OK && r < bs->size; r++) {
        unknown |= raw[r] < 0;
    }
    if (st == TW_OK && bs->size > 1 && (mine >= 0 || unknown || bs->job_key[0] == '\0')) {
        st = tw_bootstrap_node_round(bs, raw[bs->rank], raw);
    }
    if (st == TW_OK) {
        tw_bootstrap_node_finish(bs, raw);
    }
out:
    if (raw != NULL) {
        tw_free(raw, bytes);
    }
    return st;
}

void tw_bootstrap_node_text(const tw_bootstrap_t *bs, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%d node%s:", bs->nnodes, bs->nnodes == 1 ? "" : "s");

    for (int node = 0; node < bs->nnodes && n < len; node++) {
        int count = 0;
        for (int r = 0; r < bs->size; r++) {
            count += bs->node_of[r] == node;
        }
        const char *sep = count > 1 ? " ranks " : " rank ";
        n += (size_t)snprintf(buf + n, len - n, "%s node %d:", node > 0 ? ";" : "", node);
        for (int r = 0; r < bs->size && n < len; r++) {
            int last = r;
            if (bs->node_of[r] != node) {
                continue;
            }
            while (last + 1 < bs->size && bs->node_of[last + 1] == node) {
                last++;
            }
            n += (size_t)(last > r ? snprintf(buf + n, len - n, "%s%d-%d", sep, r, last)
                                   : snprintf(buf + n, len - n, "%s%d", sep, r));
            sep = ",";
            r = last;
        }
    }
}

/* ---- choosing the backend ---------------------------------------------------- */

/* A launcher we cannot join says it started several processes: refuse to
 * run as one of N rank 0s. */
static bool tw_bootstrap_refuse(void)
{
    static const struct {
        const char *var, *fix;
    } foreign[] = {
        {"SLURM_STEP_NUM_TASKS", "run srun --mpi=pmix (or set MpiDefault=pmix in slurm.conf)"},
        {"OMPI_COMM_WORLD_SIZE", "start the job with an mpirun that provides PMIx (Open MPI 4 or "
                                 "later), or with twrun"},
        {"PMI_SIZE", "PMI-1 and PMI-2 are not supported: run srun --mpi=pmix, or twrun"},
    };
    const char *ns = getenv("PMIX_NAMESPACE"), *rank = getenv("PMIX_RANK");

    if ((ns == NULL) != (rank == NULL)) {
        tw_error("init",
                 "%s is set but %s is not: the launcher's PMIx environment is incomplete; "
                 "start the job with srun --mpi=pmix, mpirun or twrun",
                 ns != NULL ? "PMIX_NAMESPACE" : "PMIX_RANK",
                 ns != NULL ? "PMIX_RANK" : "PMIX_NAMESPACE");
        return true;
    }
    for (size_t i = 0; i < TW_ARRAY_SIZE(foreign); i++) {
        const char *v = getenv(foreign[i].var);
        if (v != NULL && strtol(v, NULL, 10) > 1) {
            tw_error("init", "%s=%s but no PMIx in the environment: %s%s", foreign[i].var, v,
                     foreign[i].fix,
                     TW_HAVE_PMIX ? "" : " (and rebuild threadwire with -DTW_WITH_PMIX=ON)");
            return true;
        }
    }
    return false;
}

const tw_bootstrap_ops_t *tw_bootstrap_select(const tw_bootstrap_env_t *env)
{
    if (env->boot_addr[0] != '\0') {
        return &tw_bootstrap_twrun_ops;
    }
    if (getenv("PMIX_NAMESPACE") != NULL && getenv("PMIX_RANK") != NULL) {
#if TW_HAVE_PMIX
        return &tw_bootstrap_pmix_ops;
#else
        tw_error("init",
                 "built without PMIx, but PMIX_NAMESPACE and PMIX_RANK say a PMIx launcher "
                 "started this process: rebuild threadwire with -DTW_WITH_PMIX=ON (libpmix-dev), "
                 "or start the job with twrun");
        return NULL;
#endif
    }
    if (tw_bootstrap_refuse()) {
        return NULL;
    }
    if (env->size[0] != '\0' && strtol(env->size, NULL, 10) > 1) {
        tw_error("init", "TW_SIZE=%s but no TW_BOOT_ADDR: start the job with twrun", env->size);
        return NULL;
    }
    return &tw_bootstrap_single_ops;
}

void tw_bootstrap_init(tw_bootstrap_t *bs, const tw_bootstrap_ops_t *ops, int rank, int size,
                       const tw_bootstrap_env_t *env)
{
    bs->ops = ops;
    bs->rank = rank;
    bs->size = size;
    bs->timeout_ms = env->timeout_s * 1000;
}

tw_status_t tw_bootstrap_open(tw_bootstrap_t **bs_p)
{
    const tw_bootstrap_ops_t *ops;
    tw_bootstrap_env_t env;
    tw_bootstrap_t *bs;
    tw_status_t st;

    tw_cfg_set_defaults(&tw_bootstrap_cfg_table, &env);
    if (tw_cfg_apply_env(&tw_bootstrap_cfg_table, &env) != TW_OK) {
        return TW_ERR_INVALID;
    }
    ops = tw_bootstrap_select(&env);
    if (ops == NULL) {
        return TW_ERR_BOOTSTRAP;
    }
    st = ops->open(&env, &bs);
    if (st != TW_OK) {
        return st;
    }
    st = tw_bootstrap_node_map(bs, env.node_id);
    if (st != TW_OK) {
        tw_bootstrap_close(bs);
        return st;
    }
    tw_debug("boot", "joined through %s: rank %d of %d, local rank %d of %d, node %d of %d",
             ops->name, bs->rank, bs->size, bs->local_rank, bs->local_size, bs->node_of[bs->rank],
             bs->nnodes);
    *bs_p = bs;
    return TW_OK;
}

tw_status_t tw_bootstrap_exchange(tw_bootstrap_t *bs, const void *blob, size_t len)
{
    return tw_bootstrap_round(bs, TW_BOOTSTRAP_ROUND_ADDR, bs->node_of[bs->rank], blob, len);
}

tw_status_t tw_bootstrap_get(tw_bootstrap_t *bs, int rank, void *buf, size_t *len_p)
{
    int node = -1;
    tw_status_t st = tw_bootstrap_read(bs, rank, TW_BOOTSTRAP_ROUND_ADDR, &node, buf, len_p);

    /* Published dense ids: the same map on both sides gives the same one. */
    if (st == TW_OK && node != bs->node_of[rank]) {
        tw_error("boot",
                 "rank %d says it is on node %d, and this rank's node map says %d: the "
                 "launcher's node ids or TW_NODE_ID differ between ranks",
                 rank, node, bs->node_of[rank]);
        st = TW_ERR_BOOTSTRAP;
    }
    return st;
}

tw_status_t tw_bootstrap_barrier(tw_bootstrap_t *bs)
{
    return bs->ops->barrier(bs, bs->timeout_ms);
}

int tw_bootstrap_lifeline_fd(tw_bootstrap_t *bs)
{
    return bs->ops->lifeline_fd(bs);
}

bool tw_bootstrap_lifeline_lost(tw_bootstrap_t *bs, char *why, size_t why_len)
{
    return bs->ops->lifeline_lost(bs, why, why_len);
}

void tw_bootstrap_close(tw_bootstrap_t *bs)
{
    if (bs == NULL) {
        return;
    }
    if (bs->node_of != NULL) {
        tw_free(bs->node_of, (size_t)bs->size * sizeof(int));
        bs->node_of = NULL;
    }
    bs->ops->close(bs);
}

/* ---- twrun --------------------------------------------------------------------- */

typedef struct tw_bootstrap_twrun {
    tw_bootstrap_t super;
    tw_boot_t *boot;
} tw_bootstrap_twrun_t;

/* "N" with nothing after it, within [lo, hi]. */
static bool tw_bootstrap_num(const char *text, long lo, long hi, long *v_p)
{
    char *end;
    long v = strtol(text, &end, 10);

    if (text[0] == '\0' || *end != '\0' || v < lo || v > hi) {
        return false;
    }
    *v_p = v;
    return true;
}

static tw_status_t tw_bootstrap_twrun_open(const tw_bootstrap_env_t *env, tw_bootstrap_t **bs_p)
{
    tw_bootstrap_twrun_t *t;
    long rank, size, lrank, lsize;
    tw_status_t st;

    if (!tw_bootstrap_num(env->size, 1, 65536, &size) ||
        !tw_bootstrap_num(env->rank, 0, size - 1, &rank) || strlen(env->job_key) != 32) {
        tw_error("init",
                 "bad launcher environment: TW_RANK='%s' TW_SIZE='%s' TW_JOB_KEY of %zu "
                 "characters (want 32)",
                 env->rank, env->size, strlen(env->job_key));
        return TW_ERR_BOOTSTRAP;
    }
    if (!tw_bootstrap_num(env->local_size, 1, size, &lsize) ||
        !tw_bootstrap_num(env->local_rank, 0, lsize - 1, &lrank)) {
        tw_error("init", "bad launcher environment: TW_LOCAL_RANK='%s' TW_LOCAL_SIZE='%s'",
                 env->local_rank, env->local_size);
        return TW_ERR_BOOTSTRAP;
    }
    t = tw_calloc(1, sizeof(*t));
    if (t == NULL) {
        return TW_ERR_NOMEM;
    }
    st = tw_boot_connect(env->boot_addr, (int)rank, (int)size, &t->boot);
    if (st != TW_OK) {
        tw_free(t, sizeof(*t));
        return TW_ERR_BOOTSTRAP;
    }
    tw_bootstrap_init(&t->super, &tw_bootstrap_twrun_ops, (int)rank, (int)size, env);
    snprintf(t->super.job_key, sizeof(t->super.job_key), "%s", env->job_key);
    *bs_p = &t->super;
    return TW_OK;
}

static tw_boot_t *tw_bootstrap_twrun_boot(tw_bootstrap_t *bs)
{
    return ((tw_bootstrap_twrun_t *)bs)->boot;
}

static tw_status_t tw_bootstrap_twrun_put(tw_bootstrap_t *bs, const void *blob, size_t len)
{
    return tw_boot_put(tw_bootstrap_twrun_boot(bs), blob, len);
}

/* twrun's fence collects: every blob put before it is readable after it. */
static tw_status_t tw_bootstrap_twrun_fence(tw_bootstrap_t *bs, int timeout_ms)
{
    return tw_boot_fence(tw_bootstrap_twrun_boot(bs), timeout_ms);
}

static tw_status_t tw_bootstrap_twrun_get(tw_bootstrap_t *bs, int rank, void *buf, size_t *len_p)
{
    return tw_boot_get(tw_bootstrap_twrun_boot(bs), rank, buf, len_p);
}

static int tw_bootstrap_twrun_fd(tw_bootstrap_t *bs)
{
    return tw_boot_fd(tw_bootstrap_twrun_boot(bs));
}

/* EOF on the socket: twrun is gone. Its death also kills us
 * (PR_SET_PDEATHSIG); this is the second line, for a twrun that could not
 * set it. */
static bool tw_bootstrap_twrun_lost(tw_bootstrap_t *bs, char *why, size_t why_len)
{
    struct pollfd pfd = {.fd = tw_bootstrap_twrun_fd(bs), .events = POLLIN | POLLRDHUP};
    char c;

    if (poll(&pfd, 1, 0) > 0 && recv(pfd.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        snprintf(why, why_len, "the launcher (twrun) is gone");
        return true;
    }
    return false;
}

/* twrun starts every rank on its own node. */
static tw_status_t tw_bootstrap_one_node(tw_bootstrap_t *bs, int *node_of)
{
    memset(node_of, 0, (size_t)bs->size * sizeof(*node_of));
    return TW_OK;
}

static void tw_bootstrap_twrun_close(tw_bootstrap_t *bs)
{
    tw_boot_close(tw_bootstrap_twrun_boot(bs));
    tw_free(bs, sizeof(tw_bootstrap_twrun_t));
}

const tw_bootstrap_ops_t tw_bootstrap_twrun_ops = {
    .name = "twrun",
    .open = tw_bootstrap_twrun_open,
    .put = tw_bootstrap_twrun_put,
    .fence = tw_bootstrap_twrun_fence,
    .get = tw_bootstrap_twrun_get,
    .barrier = tw_bootstrap_twrun_fence,
    .lifeline_fd = tw_bootstrap_twrun_fd,
    .lifeline_lost = tw_bootstrap_twrun_lost,
    .nodes = tw_bootstrap_one_node,
    .close = tw_bootstrap_twrun_close,
};

/* ---- a job of one ------------------------------------------------------------------ */

static tw_status_t tw_bootstrap_single_open(const tw_bootstrap_env_t *env, tw_bootstrap_t **bs_p)
{
    tw_bootstrap_t *bs = tw_calloc(1, sizeof(*bs));

    if (bs == NULL) {
        return TW_ERR_NOMEM;
    }
    tw_bootstrap_init(bs, &tw_bootstrap_single_ops, 0, 1, env);
    *bs_p = bs;
    return TW_OK;
}

/* Alone, a blob has no reader: nothing to store, nobody to wait for. */
static tw_status_t tw_bootstrap_single_put(tw_bootstrap_t *bs, const void *blob, size_t len)
{
    (void)bs, (void)blob, (void)len;
    return TW_OK;
}

static tw_status_t tw_bootstrap_single_fence(tw_bootstrap_t *bs, int timeout_ms)
{
    (void)bs, (void)timeout_ms;
    return TW_OK;
}

static tw_status_t tw_bootstrap_single_get(tw_bootstrap_t *bs, int rank, void *buf, size_t *len_p)
{
    (void)bs, (void)buf, (void)len_p;
    tw_error("boot", "a job of one has no blob of rank %d", rank);
    return TW_ERR_INVALID;
}

static int tw_bootstrap_single_fd(tw_bootstrap_t *bs)
{
    (void)bs;
    return -1;
}

static bool tw_bootstrap_single_lost(tw_bootstrap_t *bs, char *why, size_t why_len)
{
    (void)bs, (void)why, (void)why_len;
    return false;
}

static void tw_bootstrap_single_close(tw_bootstrap_t *bs)
{
    tw_free(bs, sizeof(*bs));
}

const tw_bootstrap_ops_t tw_bootstrap_single_ops = {
    .name = "single",
    .open = tw_bootstrap_single_open,
    .put = tw_bootstrap_single_put,
    .fence = tw_bootstrap_single_fence,
    .get = tw_bootstrap_single_get,
    .barrier = tw_bootstrap_single_fence,
    .lifeline_fd = tw_bootstrap_single_fd,
    .lifeline_lost = tw_bootstrap_single_lost,
    .nodes = tw_bootstrap_one_node,
    .close = tw_bootstrap_single_close,
};
