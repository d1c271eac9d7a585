/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The PMIx backend (tw_bootstrap.h), for jobs started by mpirun (Open MPI
 * 4's embedded server) or srun --mpi=pmix. Built only with PMIx
 * (TW_WITH_PMIX); chosen only when PMIX_NAMESPACE and PMIX_RANK are set.
 *
 *   put      one small value per round: PMIx_Put(PMIX_GLOBAL, "tw.blob.<n>")
 *            and PMIx_Commit, n counting the process's puts over every
 *            context (each rank makes the same ones in the same order:
 *            tw_init is collective). A key is never put twice: a put never
 *            replaces a value a slower rank has yet to read, and a later
 *            context never meets an earlier one's value;
 *   fence    PMIx_Fence over the namespace with PMIX_COLLECT_DATA (under
 *            Slurm a fence without it is not a barrier, and a Get without
 *            a fence before it races) and PMIX_TIMEOUT (TW_BOOT_TIMEOUT);
 *   get      PMIx_Get of the peer's key of the last round, after the fence;
 *   barrier  the same fence with nothing new put;
 *   nodes    our PMIX_NODEID (or a hash of the host name where the server
 *            has none); the others' as the front-end's node round brings
 *            them (under mpirun a remote rank's PMIX_NODEID is not there
 *            before a fence);
 *   job key  none: the front-end's first round carries rank 0's.
 *
 * Lifeline. The PMIx server is our parent under both launchers (mpirun or
 * its orted, slurmstepd). We watch it with a pidfd on getppid(), which the
 * progress engine polls with its other fds: its death is seen at once, by
 * a thread of ours, whatever state the PMIx library is in. Not
 * PR_SET_PDEATHSIG: it fires when the parent *thread* that forked us
 * exits, and a server may fork from a thread it later ends. An event
 * handler for PMIX_ERR_LOST_CONNECTION / PMIX_ERR_UNREACH is the second
 * line, for a server that is not our parent (a wrapper between them).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pmix.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/tw_crc32c.h"
#include "core/tw_lock.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "runtime/tw_bootstrap.h"

typedef struct tw_bootstrap_pmix {
    tw_bootstrap_t super;
    pmix_proc_t me;
    unsigned last_put; /* the key of this context's last put */
    bool have_put;
    int pidfd; /* the parent's, or -1 */
    pid_t ppid;
    size_t evhdlr; /* registered event handler */
    bool have_evhdlr;
} tw_bootstrap_pmix_t;

static tw_bootstrap_pmix_t *tw_pmix(tw_bootstrap_t *bs)
{
    return (tw_bootstrap_pmix_t *)bs;
}

/* Any integer type PMIx may hand us, as a long; false for anything else. */
static bool tw_pmix_num(const pmix_value_t *v, long *out)
{
    switch (v->type) {
    case PMIX_UINT8:
        *out = v->data.uint8;
        return true;
    case PMIX_UINT16:
        *out = v->data.uint16;
        return true;
    case PMIX_UINT32:
        *out = (long)v->data.uint32;
        return true;
    case PMIX_UINT64:
        *out = (long)v->data.uint64;
        return true;
    case PMIX_INT:
        *out = v->data.integer;
        return true;
    case PMIX_INT32:
        *out = v->data.int32;
        return true;
    case PMIX_SIZE:
        *out = (long)v->data.size;
        return true;
    default:
        return false;
    }
}

/* A number the server holds for @p rank (PMIX_RANK_WILDCARD: the job). */
static pmix_status_t tw_pmix_get_num(tw_bootstrap_pmix_t *p, pmix_rank_t rank, const char *key,
                                     long *out)
{
    pmix_proc_t proc;
    pmix_value_t *v = NULL;
    pmix_status_t rc;

    PMIX_LOAD_PROCID(&proc, p->me.nspace, rank);
    rc = PMIx_Get(&proc, key, NULL, 0, &v);
    if (rc == PMIX_SUCCESS && !tw_pmix_num(v, out)) {
        rc = PMIX_ERR_BAD_PARAM;
    }
    if (v != NULL) {
        PMIX_VALUE_RELEASE(v);
    }
    return rc;
}

/* The server is gone (its socket closed): the job is over. Runs on PMIx's
 * own thread. */
static void tw_pmix_on_lost(size_t id, pmix_status_t status, const pmix_proc_t *source,
                            pmix_info_t info[], size_t ninfo, pmix_info_t *results, size_t nresults,
                            pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void)id, (void)source, (void)info, (void)ninfo, (void)results, (void)nresults;
    (void)cbfunc, (void)cbdata;
    tw_error("runtime", "lost the connection to the PMIx server (%s): the job is over, exiting",
             PMIx_Error_string(status));
    _exit(1);
}

static void tw_pmix_watch(tw_bootstrap_pmix_t *p)
{
    pmix_status_t codes[] = {PMIX_ERR_LOST_CONNECTION, PMIX_ERR_UNREACH};
    pmix_status_t rc;

    p->ppid = getppid();
    p->pidfd = (int)syscall(SYS_pidfd_open, p->ppid, 0);
    if (p->pidfd < 0) {
        tw_debug("boot",
                 "pidfd_open of the parent (pid %d) failed (%m): only the PMIx event "
                 "handler watches the server",
                 (int)p->ppid);
    }
    /* Blocking registration (no callback): the reference, or an error. */
    rc = PMIx_Register_event_handler(codes, TW_ARRAY_SIZE(codes), NULL, 0, tw_pmix_on_lost, NULL,
                                     NULL);
    if (rc >= 0) {
        p->evhdlr = (size_t)rc;
        p->have_evhdlr = true;
    } else {
        tw_debug("boot", "no PMIx event handler for a lost server: %s", PMIx_Error_string(rc));
    }
}

/*
 * One PMIx job per process. Contexts that live at once share the client
 * (PMIx_Init counts its callers); once the last one finalized, PMIx_Init
 * again connects, but mpirun's server no longer counts the process in
 * its fences (they fail with PARTIAL_SUCCESS, or values go missing): so a
 * tw_init after that is refused, as MPI_Init after MPI_Finalize is.
 * Guarded by tw_pmix_lock (held across PMIx_Init / PMIx_Finalize).
 */
static tw_mutex_t tw_pmix_lock = TW_MUTEX_INITIALIZER(TW_LOCK_RANK_PMIX, "PMIx client");
static int tw_pmix_users;
static bool tw_pmix_left;

static void tw_pmix_close(tw_bootstrap_t *bs)
{
    tw_bootstrap_pmix_t *p = tw_pmix(bs);
    pmix_status_t rc;

    if (p->have_evhdlr) {
        (void)PMIx_Deregister_event_handler(p->evhdlr, NULL, NULL);
    }
    if (p->pidfd >= 0) {
        close(p->pidfd);
    }
    tw_mutex_lock(&tw_pmix_lock);
    rc = PMIx_Finalize(NULL, 0);
    tw_pmix_left = --tw_pmix_users == 0;
    tw_mutex_unlock(&tw_pmix_lock);
    if (rc != PMIX_SUCCESS) {
        tw_warn("boot", "PMIx_Finalize failed: %s", PMIx_Error_string(rc));
    }
    tw_free(p, sizeof(*p));
}

static tw_status_t tw_pmix_open(const tw_bootstrap_env_t *env, tw_bootstrap_t **bs_p)
{
    tw_bootstrap_pmix_t *p = tw_calloc(1, sizeof(*p));
    pmix_status_t rc;
    long size = 0;
    bool left;

    if (p == NULL) {
        return TW_ERR_NOMEM;
    }
    p->pidfd = -1;
    tw_mutex_lock(&tw_pmix_lock);
    left = tw_pmix_left;
    rc = left ? PMIX_ERR_INIT : PMIx_Init(&p->me, NULL, 0);
    tw_pmix_users += rc == PMIX_SUCCESS;
    tw_mutex_unlock(&tw_pmix_lock);
    if (left) {
        tw_error("boot", "this process left its PMIx job when its last context was finalized: "
                         "a PMIx job is joined once per process (keep one context alive)");
        tw_free(p, sizeof(*p));
        return TW_ERR_BOOTSTRAP;
    }
    if (rc != PMIX_SUCCESS) {
        tw_error("boot",
                 "PMIx_Init failed (%s) though PMIX_NAMESPACE=%s is set: the launcher's PMIx "
                 "server is not reachable",
                 PMIx_Error_string(rc), getenv("PMIX_NAMESPACE"));
        tw_free(p, sizeof(*p));
        return TW_ERR_BOOTSTRAP;
    }
    rc = tw_pmix_get_num(p, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, &size);
    if (rc != PMIX_SUCCESS || size < 1 || size > 65536 || p->me.rank >= (pmix_rank_t)size) {
        tw_error("boot", "PMIx: no usable job size (%s, %ld) for rank %u of %s",
                 PMIx_Error_string(rc), size, p->me.rank, p->me.nspace);
        tw_pmix_close(&p->super);
        return TW_ERR_BOOTSTRAP;
    }
    tw_bootstrap_init(&p->super, &tw_bootstrap_pmix_ops, (int)p->me.rank, (int)size, env);
    tw_pmix_watch(p);
    *bs_p = &p->super;
    return TW_OK;
}

/* Puts of this process so far, over every context: the next key. */
static atomic_uint tw_pmix_puts;

static void tw_pmix_key(char *key, size_t len, unsigned n)
{
    snprintf(key, len, "tw.blob.%u", n);
}

static tw_status_t tw_pmix_put(tw_bootstrap_t *bs, const void *blob, size_t len)
{
    tw_bootstrap_pmix_t *p = tw_pmix(bs);
    pmix_value_t v;
    char key[PMIX_MAX_KEYLEN + 1];
    unsigned n = atomic_fetch_add_explicit(&tw_pmix_puts, 1, memory_order_relaxed);
    pmix_status_t rc;

    tw_pmix_key(key, sizeof(key), n);
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)blob; /* PMIx_Put copies it */
    v.data.bo.size = len;
    rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    if (rc == PMIX_SUCCESS) {
        rc = PMIx_Commit();
    }
    if (rc != PMIX_SUCCESS) {
        tw_error("boot", "rank %d: PMIx_Put/Commit of %zu bytes failed: %s", bs->rank, len,
                 PMIx_Error_string(rc));
        return TW_ERR_BOOTSTRAP;
    }
    p->last_put = n;
    p->have_put = true;
    return TW_OK;
}

static tw_status_t tw_pmix_fence(tw_bootstrap_t *bs, int timeout_ms)
{
    pmix_info_t info[2];
    bool collect = true;
    int secs = timeout_ms < 1000 ? 1 : timeout_ms / 1000;
    pmix_status_t rc;

    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc == PMIX_ERR_TIMEOUT) {
        tw_error("boot", "rank %d: PMIx fence timed out after %d s (TW_BOOT_TIMEOUT)", bs->rank,
                 secs);
        return TW_ERR_TIMEOUT;
    }
    if (rc != PMIX_SUCCESS) {
        tw_error("boot", "rank %d: PMIx fence failed: %s", bs->rank, PMIx_Error_string(rc));
        return TW_ERR_BOOTSTRAP;
    }
    return TW_OK;
}

static tw_status_t tw_pmix_get(tw_bootstrap_t *bs, int rank, void *buf, size_t *len_p)
{
    tw_bootstrap_pmix_t *p = tw_pmix(bs);
    char key[PMIX_MAX_KEYLEN + 1];
    pmix_proc_t proc;
    pmix_value_t *v = NULL;
    pmix_info_t info;
    int secs = bs->timeout_ms / 1000;
    tw_status_t st = TW_OK;
    pmix_status_t rc;

    if (rank < 0 || rank >= bs->size || !p->have_put) {
        return TW_ERR_INVALID;
    }
    tw_pmix_key(key, sizeof(key), p->last_put);
    PMIX_LOAD_PROCID(&proc, p->me.nspace, (pmix_rank_t)rank);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
    rc = PMIx_Get(&proc, key, &info, 1, &v);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS || v->type != PMIX_BYTE_OBJECT || v->data.bo.size > *len_p) {
        tw_error("boot", "rank %d: no usable %s of rank %d from PMIx (%s)", bs->rank, key, rank,
                 rc != PMIX_SUCCESS ? PMIx_Error_string(rc) : "wrong type or size");
        st = TW_ERR_BOOTSTRAP;
    } else {
        if (v->data.bo.size > 0) {
            memcpy(buf, v->data.bo.bytes, v->data.bo.size);
        }
        *len_p = v->data.bo.size;
    }
    if (v != NULL) {
        PMIX_VALUE_RELEASE(v);
    }
    return st;
}

static int tw_pmix_lifeline_fd(tw_bootstrap_t *bs)
{
    return tw_pmix(bs)->pidfd;
}

/* A pidfd turns readable when its process exits. */
static bool tw_pmix_lifeline_lost(tw_bootstrap_t *bs, char *why, size_t why_len)
{
    tw_bootstrap_pmix_t *p = tw_pmix(bs);
    struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};

    if (p->pidfd >= 0 && poll(&pfd, 1, 0) > 0) {
        snprintf(why, why_len, "the PMIx server (our parent, pid %d) is gone", (int)p->ppid);
        return true;
    }
    return false;
}

/* Our node: PMIX_NODEID, or where the server has none, a hash of the host
 * name (emulated nodes have names of their own). */
static int tw_pmix_my_node(tw_bootstrap_pmix_t *p)
{
    char host[256] = "";
    long id;

    if (tw_pmix_get_num(p, p->me.rank, PMIX_NODEID, &id) == PMIX_SUCCESS && id >= 0 &&
        id <= INT32_MAX) {
        return (int)id;
    }
    (void)gethostname(host, sizeof(host) - 1);
    tw_debug("boot", "PMIx has no PMIX_NODEID of this rank: node of host name '%s'", host);
    return (int)(tw_crc32c(0, host, strlen(host)) & INT32_MAX);
}

/* PMIX_NODEID of every rank that the server knows before any fence: under
 * mpirun, those of our node only (a remote rank's is NOT-FOUND until data
 * is exchanged). The others are -1: the front-end's node round, which
 * every PMIx job runs (for the job key), fills them in. */
static tw_status_t tw_pmix_nodes(tw_bootstrap_t *bs, int *node_of)
{
    tw_bootstrap_pmix_t *p = tw_pmix(bs);

    for (int r = 0; r < bs->size; r++) {
        long id;
        node_of[r] = -1;
        if (r != bs->rank && tw_pmix_get_num(p, (pmix_rank_t)r, PMIX_NODEID, &id) == PMIX_SUCCESS &&
            id >= 0 && id <= INT32_MAX) {
            node_of[r] = (int)id;
        }
    }
    node_of[bs->rank] = tw_pmix_my_node(p);
    return TW_OK;
}

const tw_bootstrap_ops_t tw_bootstrap_pmix_ops = {
    .name = "pmix",
    .open = tw_pmix_open,
    .put = tw_pmix_put,
    .fence = tw_pmix_fence,
    .get = tw_pmix_get,
    .barrier = tw_pmix_fence,
    .lifeline_fd = tw_pmix_lifeline_fd,
    .lifeline_lost = tw_pmix_lifeline_lost,
    .nodes = tw_pmix_nodes,
    .close = tw_pmix_close,
};
