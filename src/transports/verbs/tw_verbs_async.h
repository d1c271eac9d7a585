/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The async event thread (tw_verbs_async.c): one thread per process that
 * waits on every open device's async event fd and on a control pipe, reads
 * each event, hands it to the device's handler and acknowledges it.
 *
 * The thread knows nothing of devices beyond that: it watches file
 * descriptors ("sources") with a callback each. Adding and removing a
 * source are commands through the control pipe, answered before the call
 * returns, so after tw_va_remove returns the source's callback never runs
 * again (and the caller may close the fd or the device). Thread: any, for
 * every function; callbacks run on the async thread, must not block on
 * the transport's engines (hand work to them with a command instead) and
 * must not call tw_va_add / tw_va_remove themselves.
 */
#ifndef TW_VERBS_ASYNC_H
#define TW_VERBS_ASYNC_H

#include <infiniband/verbs.h>

#include "threadwire/threadwire.h"

typedef struct tw_va tw_va_t;

/** A source's fd is readable (or reports an error: the callback reads
 * and finds out). It should consume what is pending: the fd is polled
 * level-triggered. */
typedef void (*tw_va_ready_fn_t)(void *arg, int fd);

/** Start the thread ("tw-async"). TW_ERR_NOMEM, TW_ERR_TRANSPORT (no
 * pipe or thread: logged). */
tw_status_t tw_va_create(tw_va_t **va_p);
/** Stop the thread and free; sources still added are dropped (their
 * fds are not closed). */
void tw_va_destroy(tw_va_t *va);

/** Watch @p fd. TW_ERR_INVALID (negative fd, NULL fn, already watched),
 * TW_ERR_NOMEM. */
tw_status_t tw_va_add(tw_va_t *va, int fd, tw_va_ready_fn_t fn, void *arg);
/** Stop watching @p fd; when this returns its callback is not running and
 * never runs again. TW_ERR_INVALID if it was not watched. */
tw_status_t tw_va_remove(tw_va_t *va, int fd);

/* ---- devices -------------------------------------------------------- */

/** An async event of a device, delivered on the async thread and
 * acknowledged (ibv_ack_async_event) when the handler returns. */
typedef void (*tw_va_event_fn_t)(void *arg, const struct ibv_async_event *ev);

/** What an event asks of the transport. */
typedef enum tw_va_action {
    TW_VA_IGNORE,       /* informational (LID change, SM change, ...) */
    TW_VA_PORT_DOWN,    /* IBV_EVENT_PORT_ERR: fail over what uses the port */
    TW_VA_PORT_UP,      /* IBV_EVENT_PORT_ACTIVE: the port may carry traffic again */
    TW_VA_DEVICE_FATAL, /* IBV_EVENT_DEVICE_FATAL: the device is gone */
    TW_VA_QP_FATAL,     /* QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR: fail that QP's peer */
    TW_VA_SRQ_LIMIT,    /* SRQ_LIMIT_REACHED: refill (and re-arm) the SRQ */
    TW_VA_SRQ_FATAL,    /* SRQ_ERR: the SRQ is unusable: the device is */
    TW_VA_CQ_FATAL      /* CQ_ERR: the CQ overran: the device is */
} tw_va_action_t;

tw_va_action_t tw_va_classify(enum ibv_event_type type);
/** How the peers that an event's action cuts off fail (peer_down):
 * TW_ERR_TRANSPORT for a port that went down (down for now: the port may
 * come back, and PORT_UP makes it usable again), TW_ERR_PEER_FAILED for a
 * dead device, SRQ, CQ or QP (for good), TW_OK for actions that fail no
 * peer (IGNORE, PORT_UP, SRQ_LIMIT). */
tw_status_t tw_va_peer_status(tw_va_action_t action);
/** "port down" ... for log lines. */
const char *tw_va_action_name(tw_va_action_t action);

/** Watch @p ctx's async fd (made non-blocking): every event is passed to
 * @p fn, then acknowledged. */
tw_status_t tw_va_add_device(tw_va_t *va, struct ibv_context *ctx, tw_va_event_fn_t fn, void *arg);
/** As tw_va_remove: after it returns, @p fn never runs again for @p ctx
 * and every event read was acknowledged (so ibv_destroy_qp and
 * ibv_close_device do not wait for us). */
tw_status_t tw_va_remove_device(tw_va_t *va, struct ibv_context *ctx);

#endif /* TW_VERBS_ASYNC_H */
