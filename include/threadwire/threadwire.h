/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/**
 * @file threadwire.h
 * @brief threadwire: messaging for threaded HPC applications.
 *
 * Every thread of the application may send and receive at once. The library
 * runs its own progress threads (or none, in manual mode) and hands each
 * finished operation to the completion queue (CQ) it was posted with.
 *
 * Usage in brief:
 * @code
 *   tw_config_t cfg;
 *   tw_context_t *ctx;
 *   tw_config_init(&cfg);                  // defaults; TW_* env overrides
 *   if (tw_init(&cfg, &ctx) != TW_OK) ...  // joins the job
 *
 *   // in each worker thread
 *   tw_cq_t *cq;
 *   tw_cq_create(ctx, 256, &cq);           // one CQ per thread
 *   tw_recv(ctx, TW_ANY_SOURCE, 7, 0, rbuf, sizeof rbuf, cq, rctx);
 *   tw_send(ctx, peer, 7, sbuf, len, cq, sctx);
 *   tw_completion_t c[8];
 *   int n = tw_cq_wait(cq, c, 8, -1);      // c[i].user, .status, .op, ...
 *   tw_cq_destroy(cq);
 *
 *   tw_finalize(ctx);                      // after the workers are done
 * @endcode
 *
 * Thread contract: every function may be called by any number of threads
 * at once unless its comment says otherwise ("Thread:" lines). No function
 * takes a lock that a progress thread holds while it runs a user callback.
 * The two callbacks (active-message handlers, the error handler) run on a
 * progress thread, or in manual mode inside the tw_progress() or waiting
 * call (tw_cq_wait) of the thread that drives progress, and must not
 * block; a handler may post but never retries a TW_ERR_AGAIN itself
 * (tw_am_handler_t).
 */
#ifndef THREADWIRE_H
#define THREADWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TW_API __attribute__((visibility("default")))
#else
#define TW_API
#endif

/* ---- status ---------------------------------------------------------- */

/** Status of every call and every completion. */
typedef enum tw_status {
    TW_OK = 0,
    TW_ERR_INVALID = -1,      /**< bad argument or call in the wrong state */
    TW_ERR_NOMEM = -2,        /**< out of memory */
    TW_ERR_AGAIN = -3,        /**< resource busy (CQ full, no credits): retry */
    TW_ERR_TRUNCATED = -4,    /**< message longer than the receive buffer */
    TW_ERR_TIMEOUT = -5,      /**< a deadline passed */
    TW_ERR_CANCELED = -6,     /**< canceled (e.g. by tw_finalize) */
    TW_ERR_UNREACHABLE = -7,  /**< no transport reaches that peer */
    TW_ERR_PEER_FAILED = -8,  /**< peer died or its last path failed */
    TW_ERR_TRANSPORT = -9,    /**< local device/transport error */
    TW_ERR_PROTOCOL = -10,    /**< malformed or unauthenticated wire input */
    TW_ERR_UNSUPPORTED = -11, /**< feature absent in this build / device */
    TW_ERR_BOOTSTRAP = -12    /**< could not find or join the job */
} tw_status_t;

/**
 * Short English description of a status.
 * @return a static string; never NULL (unknown values give "unknown status").
 * Thread: any.
 */
TW_API const char *tw_strerror(tw_status_t st);

/* ---- context --------------------------------------------------------- */

/** A job membership: one per process is typical. Opaque. */
typedef struct tw_context tw_context_t;

/** How progress threads (and tw_cq_wait) wait for work. */
typedef enum tw_wait_mode {
    TW_WAIT_ADAPTIVE = 0, /**< spin briefly, then sleep on an fd (default) */
    TW_WAIT_SPIN,         /**< never sleep: lowest latency, burns a core */
    TW_WAIT_BLOCK         /**< sleep at once: lowest CPU use */
} tw_wait_mode_t;

/**
 * Context configuration. Each field has an environment variable that
 * overrides it at tw_init: TW_TRANSPORTS, TW_PROGRESS_THREADS,
 * TW_WAIT_MODE (adaptive|spin|block), TW_RELIABLE (0|1). README.md lists
 * every TW_* variable.
 */
typedef struct tw_config {
    size_t size;              /**< = sizeof(tw_config_t); lets the struct grow */
    const char *transports;   /**< "self,shm,tcp,verbs"; NULL = every usable one */
    int progress_threads;     /**< -1 = auto (per HCA + per CPU socket);
                                   0 = manual: callers drive tw_progress() */
    tw_wait_mode_t wait_mode; /**< progress threads' and tw_cq_wait's wait */
    bool reliable;            /**< checksums, acks, retransmit, failover and
                                   keepalive (TW_REL_* tune it); every rank
                                   must agree, else tw_init fails */
} tw_config_t;

/**
 * Fill @p cfg with the defaults: every usable transport, automatic
 * progress threads, adaptive waiting, reliability off.
 * Thread: any (on distinct cfg objects).
 */
TW_API void tw_config_init(tw_config_t *cfg);

/**
 * Join the job: through the local launcher twrun (TW_BOOT_ADDR), through
 * PMIx when a PMIx launcher started the process (PMIX_NAMESPACE and
 * PMIX_RANK: mpirun, srun --mpi=pmix; builds with PMIx), or as a job of
 * one process when no launcher is present (docs/bootstrap.md). Under PMIx
 * a process joins one job: a tw_init after its last context was finalized
 * fails with TW_ERR_BOOTSTRAP. TW_* environment variables override @p cfg.
 * Starts the progress threads (unless progress_threads == 0).
 *
 * @param cfg   configuration, or NULL for the defaults.
 * @param ctx_p receives the context on success (untouched otherwise).
 * @return TW_OK;
 *   TW_ERR_INVALID: NULL ctx_p, a bad cfg field, a TW_* variable with a
 *     bad value (the log names it), or ranks that disagree on a layer
 *     every rank must run (reliability on some ranks only) — fix the
 *     configuration;
 *   TW_ERR_UNSUPPORTED: a requested feature or transport is not built or
 *     not usable here (the log says why);
 *   TW_ERR_BOOTSTRAP: a launcher we cannot join started several
 *     processes (SLURM_STEP_NUM_TASKS, PMI_SIZE or OMPI_COMM_WORLD_SIZE > 1
 *     without PMIx; the log names the variable and the fix), a PMIx
 *     environment in a build without PMIx, PMIx_Init failed, or twrun's
 *     variables do not add up or its socket cannot be reached;
 *   TW_ERR_TIMEOUT: a rank did not reach the bootstrap exchange within
 *     TW_BOOT_TIMEOUT seconds;
 *   TW_ERR_NOMEM, TW_ERR_TRANSPORT: resources could not be had.
 * Thread: any; several contexts may live at once.
 */
TW_API tw_status_t tw_init(const tw_config_t *cfg, tw_context_t **ctx_p);

/**
 * Leave the job. Every operation still outstanding completes exactly once
 * on its CQ:
 *   - sends already handed to a transport are delivered (TW_OK); a large
 *     -- rendezvous -- send that its receiver has not read within 2 s ends
 *     TW_ERR_CANCELED, with one warning line, or TW_ERR_PEER_FAILED when
 *     the receiver left first;
 *   - receives never matched end TW_ERR_CANCELED (TW_ERR_PEER_FAILED when
 *     their source was seen leaving first); nonblocking collectives end
 *     TW_ERR_CANCELED; one-sided operations waiting for a peer's reply end
 *     TW_ERR_CANCELED.
 * With peers already gone (failed or finalized), their operations end as
 * above or TW_ERR_PEER_FAILED, and nothing waits for them.
 * Every thread the context made is joined, its fds closed, its shared
 * memory unmapped and unlinked. CQs outlive the context: poll them for
 * those last completions, then tw_cq_destroy them. Afterwards every call
 * on @p ctx returns TW_ERR_INVALID (or -1 / 0 where the call returns a
 * count). The last context of a PMIx job leaves it (PMIx_Finalize).
 *
 * Bound: about 2 s (the rendezvous grace), plus with TW_RELIABLE=1 the
 * wait for the acks of the last messages (at most TW_REL_KEEPALIVE x
 * TW_REL_MISSES), plus for a node's leader under leader routing the wait
 * for its node's other ranks to leave (at most TW_ROUTE_LINGER when set).
 *
 * Other threads: the posting calls (tw_send, tw_send_inject, tw_recv,
 * tw_am_send, tw_put, tw_get, tw_flush), tw_progress, tw_cq_poll /
 * tw_cq_wait on the context's CQs, and tw_stats_print / tw_stats_json may
 * run in other threads during the call. One that began before it
 * finishes first (tw_finalize waits for it) and its operation completes
 * as above; one that begins after it started is refused with
 * TW_ERR_INVALID and an error line; a waiting tw_cq_wait returns the
 * completions as they come. No other call may run on @p ctx, its groups
 * or its memory regions during or after tw_finalize, nor may an
 * active-message handler call it.
 *
 * @return TW_OK; TW_ERR_INVALID for NULL, an already finalized context,
 * or one another thread is finalizing.
 * Thread: any.
 */
TW_API tw_status_t tw_finalize(tw_context_t *ctx);

/** This process's rank in the job, or -1 for an invalid context. Thread: any. */
TW_API int tw_rank(const tw_context_t *ctx);
/** Number of processes in the job, or -1 for an invalid context. Thread: any. */
TW_API int tw_size(const tw_context_t *ctx);

/**
 * Drive every transport once from the calling thread.
 * Required in manual mode (progress_threads == 0): when another thread is
 * already progressing a domain this call skips it rather than wait. With
 * progress threads it only helps: while a progress thread is idle, the
 * caller takes in tagged messages for itself (no waiting for the thread to
 * wake); it never runs active-message handlers, which stay on the
 * progress threads. tw_cq_wait does the same while it spins.
 * @return the number of events handled (>= 0), or -1 for an invalid context.
 * Thread: any.
 */
TW_API int tw_progress(tw_context_t *ctx);

/* ---- completion queues ----------------------------------------------- */

/** A completion queue. Opaque. */
typedef struct tw_cq tw_cq_t;

/** Kind of operation a completion reports. */
typedef enum tw_op {
    TW_OP_SEND,
    TW_OP_RECV,
    TW_OP_AM_SEND,
    TW_OP_PUT,
    TW_OP_GET,
    TW_OP_FLUSH,
    TW_OP_COLL /**< a nonblocking collective (tw_ibarrier, ...) */
} tw_op_t;

/** One finished operation. */
typedef struct tw_completion {
    void *user;         /**< the pointer given when the operation was posted */
    tw_status_t status; /**< TW_OK or why it failed */
    tw_op_t op;         /**< what finished */
    int peer;           /**< source of a receive; target of anything else */
    uint64_t tag;       /**< tag of the matched message (receives) */
    size_t length;      /**< bytes moved; for TRUNCATED, the sent length */
} tw_completion_t;

/**
 * Create a CQ that holds at most @p depth outstanding operations (posted
 * and not yet polled). Posting one more returns TW_ERR_AGAIN, so a
 * completion is never dropped and memory stays bounded.
 * @param depth 1 .. 2^20.
 * @return TW_OK; TW_ERR_INVALID (NULL or finalized ctx, NULL cq_p, depth
 *   out of range); TW_ERR_NOMEM.
 * Thread: any.
 */
TW_API tw_status_t tw_cq_create(tw_context_t *ctx, unsigned depth, tw_cq_t **cq_p);

/**
 * Destroy a CQ. Completions not yet polled are discarded. A completion
 * already in the CQ whose producer is still finishing its hand-over (a
 * wake-up) is waited for, however long that thread is descheduled.
 * @return TW_OK; TW_ERR_AGAIN while operations posted on it have not
 *   completed (progress or finalize, then retry); TW_ERR_INVALID for NULL.
 * Thread: any, but no other thread may use @p cq during the call. A CQ may
 * be destroyed after its context was finalized.
 */
TW_API tw_status_t tw_cq_destroy(tw_cq_t *cq);

/**
 * Take up to @p max completions without blocking. Made to be called in a
 * loop (as MPI codes call MPI_Test), alone or between pieces of the
 * caller's own work: with progress threads, a poll that finds the CQ
 * empty first drives the transports the calling thread may drive (those
 * whose progress thread is not busy with them at that moment; never a
 * user callback) and looks again, so a spinning worker does not wait for
 * a progress thread that shares its CPU. After 64 empty polls in a row on
 * one thread it yields the CPU once (sched_yield), so a poll loop cannot
 * starve the thread it waits for. In manual mode it only takes what is
 * there: drive tw_progress as well.
 * @return the number taken (0 .. max), or -1 for NULL arguments or max < 0.
 * Thread: any (a CQ may be shared by several consumers).
 */
TW_API int tw_cq_poll(tw_cq_t *cq, tw_completion_t *out, int max);

/**
 * Like tw_cq_poll, but waits up to @p timeout_ms (-1 = forever) for at least
 * one completion. Sleeps per the context's wait mode; in manual mode the
 * waiting thread drives progress itself.
 * @return the number taken; 0 on timeout; -1 for bad arguments.
 * Thread: any.
 */
TW_API int tw_cq_wait(tw_cq_t *cq, tw_completion_t *out, int max, int timeout_ms);

/**
 * A file descriptor that is readable when completions may be waiting: add
 * it to epoll/poll, then tw_cq_poll until it returns 0. Owned by the CQ (do
 * not close). In manual mode, progress must still be driven.
 * @return the fd, or -1 (NULL cq, or no fd could be created: see the log).
 * Thread: any.
 */
TW_API int tw_cq_fd(tw_cq_t *cq);

/* ---- tagged messages (MPI-style matching) ---------------------------- */

/** Wildcard source for tw_recv. */
#define TW_ANY_SOURCE (-1)

/**
 * Send @p len bytes to rank @p dst with @p tag. Completes (TW_OP_SEND) when
 * @p buf may be reused. Messages from one thread to one peer are matched in
 * the order they were sent (non-overtaking).
 * @return TW_OK (the completion follows on @p cq);
 *   TW_ERR_AGAIN: @p cq is full, or the transport's ring to @p dst is
 *     (the receiver is slow): poll, progress and retry;
 *   TW_ERR_INVALID: bad handle, dst out of range, NULL buf with len > 0,
 *     cq of another context, finalized context;
 *   TW_ERR_UNREACHABLE: no transport reaches @p dst;
 *   TW_ERR_PEER_FAILED: @p dst died (or left) -- see tw_set_error_handler;
 *   TW_ERR_TRANSPORT: the local device or port of the route to @p dst went
 *     down (the peer is then failed, unless reliability fails over);
 *   TW_ERR_NOMEM.
 * Thread: any.
 */
TW_API tw_status_t tw_send(tw_context_t *ctx, int dst, uint64_t tag, const void *buf, size_t len,
                           tw_cq_t *cq, void *user);

/** The largest message tw_send_inject takes, on every transport. */
#define TW_INJECT_MAX 1024

/**
 * Send a small message (at most TW_INJECT_MAX bytes) and return with it
 * copied: @p buf may be reused at once, and no completion is queued -- the
 * message costs no CQ slot and no completion to poll (as a UCX send that
 * completes in place, or libfabric's fi_inject). Otherwise as tw_send: it
 * is matched in order with the calling thread's other sends to @p dst
 * (non-overtaking), a receive sees it like any message, and it is
 * delivered unless @p dst fails, which the error handler reports (as for
 * every message already on its way).
 * @return TW_OK (copied and on its way);
 *   TW_ERR_AGAIN: the transport's ring to @p dst is full: progress, retry;
 *   TW_ERR_INVALID: @p len > TW_INJECT_MAX, bad handle, dst out of range,
 *     NULL buf with len > 0, finalized context;
 *   TW_ERR_UNREACHABLE, TW_ERR_PEER_FAILED, TW_ERR_TRANSPORT, TW_ERR_NOMEM:
 *     as tw_send.
 * Thread: any.
 */
TW_API tw_status_t tw_send_inject(tw_context_t *ctx, int dst, uint64_t tag, const void *buf,
                                  size_t len);

/**
 * Receive a message whose tag equals @p tag on every bit not set in
 * @p ignore_mask, from @p src or from any source (TW_ANY_SOURCE). The
 * completion (TW_OP_RECV) carries the source, the tag and the length; a
 * longer message completes TW_ERR_TRUNCATED with its sent length, and the
 * first @p len bytes are stored.
 * A receive naming a rank that fails (exact or masked, not TW_ANY_SOURCE)
 * completes TW_ERR_PEER_FAILED; what that rank sent before it failed is
 * still delivered.
 * @return TW_OK; TW_ERR_AGAIN (cq full); TW_ERR_INVALID (as for tw_send,
 *   src out of range); TW_ERR_NOMEM.
 * Thread: any.
 */
TW_API tw_status_t tw_recv(tw_context_t *ctx, int src, uint64_t tag, uint64_t ignore_mask,
                           void *buf, size_t len, tw_cq_t *cq, void *user);

/* ---- active messages ------------------------------------------------- */

/**
 * Active-message handler. Runs on a progress thread, or in manual mode
 * inside the tw_progress, tw_cq_wait or other waiting call of the thread
 * that drives progress (with progress threads, a worker's tw_progress,
 * tw_cq_poll and tw_cq_wait never run handlers). @p hdr and @p data are
 * valid only during the call. The handler must not block and must not
 * call tw_finalize.
 *
 * It may post: tw_am_send and tw_send to any rank, its own included
 * (checked over self, shm and tcp, reliability on and off, with progress
 * threads and in manual mode). Such a post never waits: when the
 * transport's ring or submission lane, or the CQ, is full it returns
 * TW_ERR_AGAIN at once. That TW_ERR_AGAIN must not be retried in the
 * handler: tcp and self queue the post for their progress engine, and
 * when that is the engine running the handler (one engine per CPU socket
 * by default) nothing drains the queue while the handler retries; a full
 * shm ring waits for the peer's engine, which may be in a handler
 * retrying toward us. Keep the post instead (in a queue of the
 * application) and make it from a worker thread, which may drain its CQ
 * and retry. The completion goes to the CQ the post names, which some
 * thread must poll; a buffer is read until that completion, not only
 * during the call: post a copy of the handler's @p data, never @p data.
 */
typedef void (*tw_am_handler_t)(tw_context_t *ctx, int src, const void *hdr, size_t hdr_len,
                                const void *data, size_t len, void *arg);

/**
 * Register the handler for active-message @p id. An id is registered once
 * for the life of the context.
 * @return TW_OK; TW_ERR_INVALID (NULL fn, id already registered, bad ctx).
 * Thread: any.
 */
TW_API tw_status_t tw_am_register(tw_context_t *ctx, uint8_t id, tw_am_handler_t fn, void *arg);

/**
 * Send an active message: @p hdr (at most 1 KiB) and @p data to @p dst,
 * where the handler registered for @p id runs. Completes (TW_OP_AM_SEND)
 * when both buffers may be reused. A message for an id with no handler at
 * the target is dropped there with a log line.
 * @return as tw_send; TW_ERR_INVALID also for hdr_len > 1024.
 * Thread: any, an active-message handler too (never retrying its
 * TW_ERR_AGAIN there: see tw_am_handler_t).
 */
TW_API tw_status_t tw_am_send(tw_context_t *ctx, int dst, uint8_t id, const void *hdr,
                              size_t hdr_len, const void *data, size_t len, tw_cq_t *cq,
                              void *user);

/** Largest active-message header, in bytes. */
#define TW_AM_HDR_MAX 1024

/* ---- one-sided (RMA) ------------------------------------------------- */

/** A registered memory region. Opaque. */
typedef struct tw_mr tw_mr_t;

/** Largest packed remote key (tw_mr_pack), in bytes. */
#define TW_RKEY_MAX 256
/** Largest single tw_put / tw_get, in bytes (1 GiB). */
#define TW_RMA_MAX_LEN (1ull << 30)

/**
 * Register [@p addr, @p addr + @p len) for one-sided access by peers: puts
 * into it and gets from it, by anyone holding its packed key. Where the
 * route to a peer does RDMA (verbs, with reliability off) the region is
 * registered with the device too. Deregister every region before
 * tw_finalize; one still registered then is released by it, and only
 * tw_mem_deregister (which then just frees the handle) may use it.
 * @return TW_OK; TW_ERR_INVALID (bad ctx, NULL mr, NULL addr, len 0 or a
 *   range that cannot exist); TW_ERR_NOMEM; TW_ERR_TRANSPORT (a device
 *   refused the registration: logged).
 * Thread: any.
 */
TW_API tw_status_t tw_mem_register(tw_context_t *ctx, void *addr, size_t len, tw_mr_t **mr);

/**
 * Deregister a region: requests that arrive from now on are refused
 * (their operations complete TW_ERR_INVALID at the origin), transfers
 * already writing into or reading from it are waited for. The memory
 * may be freed once this returns. Not from an active-message handler.
 * @return TW_OK; TW_ERR_INVALID (NULL, or not a region).
 * Thread: any, but no other call may use @p mr during it or after.
 */
TW_API tw_status_t tw_mem_deregister(tw_mr_t *mr);

/**
 * Write the region's remote key -- an opaque blob of at most TW_RKEY_MAX
 * bytes -- to @p rkey, for peers to pass to tw_put / tw_get (send it with
 * tw_send, for example). *@p rkey_len is the room at @p rkey on entry and
 * the key's length on return. With @p rkey NULL, only the length is
 * returned.
 * @return TW_OK; TW_ERR_TRUNCATED (too little room: *@p rkey_len says how
 *   much is needed); TW_ERR_INVALID (NULL rkey_len, not a region, or one
 *   released by tw_finalize).
 * Thread: any.
 */
TW_API tw_status_t tw_mr_pack(const tw_mr_t *mr, void *rkey, size_t *rkey_len);

/**
 * Write @p len bytes from @p src into rank @p dst's memory at
 * @p remote_addr (an address in @p dst's address space inside the region
 * of @p rkey). Completes (TW_OP_PUT, length = len) when the bytes are in
 * place at @p dst: @p src may be reused then. A put names no tag and
 * wakes nobody at the target; tell it with a message afterwards. The
 * target's progress engine serves puts on routes without RDMA: in manual
 * mode it must drive progress.
 * @return as tw_send, and TW_ERR_INVALID also for a NULL or damaged
 *   @p rkey, a key of another rank's memory, a range outside its region,
 *   or len > TW_RMA_MAX_LEN. A target that refuses the access (region
 *   deregistered) completes the put with TW_ERR_INVALID.
 * Thread: any.
 */
TW_API tw_status_t tw_put(tw_context_t *ctx, int dst, const void *src, size_t len,
                          uint64_t remote_addr, const void *rkey, tw_cq_t *cq, void *user);

/**
 * Read @p len bytes of rank @p src's memory at @p remote_addr (inside the
 * region of @p rkey) into @p dst. Completes (TW_OP_GET) when they are in
 * @p dst.
 * @return as tw_put.
 * Thread: any.
 */
TW_API tw_status_t tw_get(tw_context_t *ctx, int src, void *dst, size_t len, uint64_t remote_addr,
                          const void *rkey, tw_cq_t *cq, void *user);

/**
 * Complete (TW_OP_FLUSH) when every put to @p peer posted before this call
 * -- by any thread -- is visible at @p peer: at once if none is left. A
 * flush whose puts failed because @p peer failed completes
 * TW_ERR_PEER_FAILED.
 * @return TW_OK; TW_ERR_AGAIN (cq full); TW_ERR_INVALID (bad ctx, peer out
 *   of range, cq); TW_ERR_UNREACHABLE; TW_ERR_PEER_FAILED; TW_ERR_NOMEM.
 * Thread: any.
 */
TW_API tw_status_t tw_flush(tw_context_t *ctx, int peer, tw_cq_t *cq, void *user);

/* ---- collectives ----------------------------------------------------- */

/** A set of ranks that run collectives together. Opaque. */
typedef struct tw_group tw_group_t;

/** Element types of reductions (and of nothing else: bcast moves bytes). */
typedef enum tw_dtype {
    TW_INT32,
    TW_INT64,
    TW_UINT32,
    TW_UINT64,
    TW_FLOAT,
    TW_DOUBLE,
    TW_INT8,
    TW_UINT8
} tw_dtype_t;

/** Reduction operators. The bitwise ones (BAND, BOR, BXOR) take integer
 * types only. Integer SUM and PROD wrap (two's complement); MIN and MAX of
 * floating types follow fmin/fmax (a NaN loses to a number). */
typedef enum tw_redop { TW_SUM, TW_PROD, TW_MIN, TW_MAX, TW_BAND, TW_BOR, TW_BXOR } tw_redop_t;

/**
 * The group of every rank of the job, in rank order: made by tw_init,
 * freed by tw_finalize (tw_group_destroy refuses it). Never NULL for a
 * live context.
 * Thread: any.
 */
TW_API tw_group_t *tw_group_world(tw_context_t *ctx);

/**
 * Make a group of the @p n ranks listed in @p ranks; the caller must be one
 * of them. Collective over those ranks: each calls it with the same list,
 * in the same order (member i of the group is ranks[i]: roots and
 * reduction order follow it), and the same @p key. The key tells apart
 * groups that threads create at the same time over the same ranks (as
 * MPI_Comm_create_group's tag does); two creations with the same ranks and
 * key must not overlap in time. Blocks until every member called it (or
 * TW_COLL_CREATE_TIMEOUT passed).
 * @return TW_OK; TW_ERR_INVALID (NULL arguments, n < 1, a rank out of
 *   range or listed twice, the caller not listed); TW_ERR_PEER_FAILED (a
 *   member failed); TW_ERR_TIMEOUT (a member did not join in time: a
 *   different list or key, or never called); TW_ERR_NOMEM.
 * Thread: any; a group belongs to no thread.
 */
TW_API tw_status_t tw_group_create(tw_context_t *ctx, const int *ranks, int n, uint64_t key,
                                   tw_group_t **g);

/**
 * Free a group made by tw_group_create. Not collective: it waits for
 * nobody (members free their part of what they share when the last of
 * them lets go), so a member may free a group that failed at once.
 * @return TW_OK; TW_ERR_INVALID (NULL, the world group, or a collective
 *   still outstanding on it).
 * Thread: any, but no other call may use @p g during it or after. Groups
 * left at tw_finalize are freed by it.
 */
TW_API tw_status_t tw_group_destroy(tw_group_t *g);

/** Rank of the caller in @p g (its index in the list), or -1 for NULL. */
TW_API int tw_group_rank(const tw_group_t *g);
/** Number of members of @p g, or -1 for NULL. */
TW_API int tw_group_size(const tw_group_t *g);

/*
 * Collectives. The contract of every call below:
 * - Every member calls the same collectives on a group in the same order,
 *   with matching arguments (root, length, count, dtype, op).
 * - One collective at a time per group, blocking or not: a second one
 *   while the first is outstanding returns TW_ERR_INVALID at once (it is
 *   not started; the first is unharmed). Any number of groups may run
 *   collectives concurrently, from different threads.
 * - Reductions are deterministic: every member gets the same bits, the
 *   operands combined in a fixed order that depends on the group's size
 *   and layout only (never on timing).
 * - sendbuf == recvbuf is allowed (in place). Roots are group ranks.
 * - A member that fails (or whose node does) makes the collective complete
 *   with TW_ERR_PEER_FAILED on every survivor, within about a second; later
 *   collectives on the group fail at once. Groups without it go on.
 * - Within a node they run through shared memory where a slot set is
 *   free (TW_COLL_SLOTS), else point to point, large bcasts and allreduces
 *   with one copy (TW_COLL_CMA, TW_COLL_CMA_ALLREDUCE); across nodes,
 *   through each node's leader and point-to-point trees between leaders
 *   (large allreduces by Rabenseifner, TW_COLL_RSAG: it must be alike on
 *   every rank, else tw_init fails with TW_ERR_INVALID).
 * Common errors: TW_ERR_INVALID (NULL group, root out of range, a bad
 * dtype or op, a bitwise op on a floating type, NULL buffer with data, a
 * collective outstanding on the group); TW_ERR_PEER_FAILED.
 */

/** Return when every member entered it. Thread: any (see above). */
TW_API tw_status_t tw_barrier(tw_group_t *g);
/** Copy @p len bytes at @p buf of member @p root to @p buf of every member. */
TW_API tw_status_t tw_bcast(tw_group_t *g, void *buf, size_t len, int root);
/** Combine the @p count elements of every member's @p sendbuf with @p op
 * into @p recvbuf of member @p root (recvbuf is not touched elsewhere and
 * may be NULL there). */
TW_API tw_status_t tw_reduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                             tw_dtype_t dt, tw_redop_t op, int root);
/** As tw_reduce, the result in @p recvbuf of every member. */
TW_API tw_status_t tw_allreduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                                tw_dtype_t dt, tw_redop_t op);

/*
 * Nonblocking forms: post, return at once, complete on @p cq with @p user
 * (op TW_OP_COLL, peer = the group rank of the caller, length = bytes of
 * the result) like any operation. The progress threads drive them (or
 * tw_progress in manual mode), so they overlap with the caller's work.
 * Buffers belong to the operation until it completes. Posting returns
 * TW_ERR_AGAIN when @p cq is full; errors found later (a failed member)
 * arrive as the completion's status.
 */
TW_API tw_status_t tw_ibarrier(tw_group_t *g, tw_cq_t *cq, void *user);
TW_API tw_status_t tw_ibcast(tw_group_t *g, void *buf, size_t len, int root, tw_cq_t *cq,
                             void *user);
TW_API tw_status_t tw_ireduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                              tw_dtype_t dt, tw_redop_t op, int root, tw_cq_t *cq, void *user);
TW_API tw_status_t tw_iallreduce(tw_group_t *g, const void *sendbuf, void *recvbuf, size_t count,
                                 tw_dtype_t dt, tw_redop_t op, tw_cq_t *cq, void *user);

/* ---- errors ---------------------------------------------------------- */

/**
 * Called (from a progress or async-event thread) when a peer fails or a
 * device reports an error. Operations to a failed peer complete with
 * TW_ERR_PEER_FAILED; they never hang. Must not block.
 */
typedef void (*tw_error_handler_t)(tw_context_t *ctx, int peer, tw_status_t err, const char *what,
                                   void *arg);

/**
 * Install (or, with NULL, remove) the error handler.
 * @return TW_OK; TW_ERR_INVALID for a bad context.
 * Thread: any.
 */
TW_API tw_status_t tw_set_error_handler(tw_context_t *ctx, tw_error_handler_t fn, void *arg);

/* ---- introspection --------------------------------------------------- */

/**
 * Print the job's node map (how many nodes, which ranks on each) and
 * counters per transport and per progress thread: messages, bytes,
 * unexpected messages, CQ high-water marks, wake-ups.
 * @return TW_OK; TW_ERR_INVALID (bad ctx or NULL out).
 * Thread: any (counters are read without stopping traffic).
 */
TW_API tw_status_t tw_stats_print(tw_context_t *ctx, FILE *out);

/**
 * The counters of tw_stats_print as one JSON object on one line (ended by
 * a newline), for scripts and tools to read instead of parsing text:
 *
 *     {"threadwire_stats":1,"rank":0,"size":2,"progress":"thread",
 *      "bootstrap":"twrun","node":0,"nnodes":1,"nodes":[[0,1]],
 *      "engines":[{"name":"...","tid":123,"cpus":"0-3","counters":{...}}],
 *      "ifaces":{"tl:shm":{"tx_msgs":12,...},"lossy:shm":{...},"rel":{...}},
 *      "msg":{...},"coll":{...},"rma":{...},"cq":{...}}
 *
 * "threadwire_stats" is the format's version (1); "progress" is "thread"
 * or "manual"; "bootstrap" how the job was joined ("twrun", "pmix",
 * "single"); "node" this rank's node, "nnodes" the job's node count and
 * "nodes" the ranks of each node (node ids 0 .. nnodes-1 in order of
 * their first rank; shm carries traffic within a node only); "ifaces" holds every iface of the
 * stack that counts, by the name of its counters: transports as "tl:<name>", wrappers by their own
 * ("rel", "lossy:<inner>"). Every counter is a non-negative integer.
 * Strings are escaped, so the output is valid JSON whatever they hold.
 * @return TW_OK; TW_ERR_INVALID (bad ctx or NULL out).
 * Thread: any (counters are read without stopping traffic).
 */
TW_API tw_status_t tw_stats_json(tw_context_t *ctx, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* THREADWIRE_H */
