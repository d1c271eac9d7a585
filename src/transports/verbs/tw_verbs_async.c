/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The async event thread (tw_verbs_async.h).
 *
 * One thread, blocked in poll() on the read end of a control pipe and on
 * every source's fd. Only the thread touches the source table. A caller
 * that adds or removes a source writes a pointer to a command (on its own
 * stack) into the pipe -- 8 bytes, so the write is atomic however many
 * threads write -- and waits on the command's done flag; the thread runs
 * commands between callbacks, so a source removed is never mid-callback
 * when tw_va_remove returns. Stop is a command too.
 *
 * A source whose fd reports POLLNVAL (closed while watched: a bug of the
 * caller) or a hang-up with nothing to read is dropped from the poll set
 * with a warning, rather than spinning on it; it stays in the table until
 * removed.
 *
 * Device sources read with ibv_get_async_event on a non-blocking async fd
 * until EAGAIN, and acknowledge each event as soon as its handler returns:
 * ibv_destroy_* and ibv_close_device wait for the acknowledgements of
 * events on what they destroy.
 *
 * The thread blocks every signal, so an application's handlers never run
 * on it.
 */
#define _GNU_SOURCE
#include "transports/verbs/tw_verbs_async.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "core/tw_lock.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"

typedef enum { TW_VA_CMD_ADD, TW_VA_CMD_REMOVE, TW_VA_CMD_STOP } tw_va_cmd_op_t;

typedef struct tw_va_cmd {
    tw_va_cmd_op_t op;
    int fd;
    tw_va_ready_fn_t fn;
    void *arg;
    tw_status_t status; /* set by the thread */
    bool done;          /* under va->lock */
} tw_va_cmd_t;

typedef struct tw_va_src {
    int fd;
    tw_va_ready_fn_t fn;
    void *arg;
    bool muted; /* dropped from the poll set (closed or hung up) */
} tw_va_src_t;

typedef struct tw_va_dev {
    struct tw_va_dev *next;
    struct ibv_context *ctx;
    tw_va_event_fn_t fn;
    void *arg;
} tw_va_dev_t;

struct tw_va {
    pthread_t thread;
    int ctl[2]; /* control pipe: [0] read by the thread, [1] written by callers */
    tw_mutex_t lock;
    pthread_cond_t cond; /* a command is done */
    /* The thread's own: */
    tw_va_src_t *srcs;
    struct pollfd *pfds; /* [0] the pipe, [1 + i] srcs[i] */
    unsigned nsrcs, cap;
    /* Callers': device records. */
    tw_va_dev_t *devs; /* guarded by lock */
};

/* ---- the thread --------------------------------------------------------- */

static int tw_va_find(const tw_va_t *va, int fd)
{
    for (unsigned i = 0; i < va->nsrcs; i++) {
        if (va->srcs[i].fd == fd) {
            return (int)i;
        }
    }
    return -1;
}

static tw_status_t tw_va_do_add(tw_va_t *va, const tw_va_cmd_t *c)
{
    if (tw_va_find(va, c->fd) >= 0) {
        tw_error("verbs", "async thread: fd %d is watched already", c->fd);
        return TW_ERR_INVALID;
    }
    if (va->nsrcs == va->cap) {
        unsigned cap = va->cap == 0 ? 8 : 2 * va->cap;
        tw_va_src_t *srcs = tw_calloc(cap, sizeof(*srcs));
        struct pollfd *pfds = tw_calloc(cap + 1, sizeof(*pfds));
        if (srcs == NULL || pfds == NULL) {
            tw_free(srcs, cap * sizeof(*srcs));
            tw_free(pfds, (cap + 1) * sizeof(*pfds));
            return TW_ERR_NOMEM;
        }
        if (va->nsrcs > 0) {
            memcpy(srcs, va->srcs, va->nsrcs * sizeof(*srcs));
        }
        tw_free(va->srcs, va->cap * sizeof(*va->srcs));
        tw_free(va->pfds, (va->cap + 1) * sizeof(*va->pfds));
        va->srcs = srcs;
        va->pfds = pfds;
        va->cap = cap;
    }
    va->srcs[va->nsrcs++] = (tw_va_src_t){.fd = c->fd, .fn = c->fn, .arg = c->arg};
    return TW_OK;
}

static tw_status_t tw_va_do_remove(tw_va_t *va, int fd)
{
    int i = tw_va_find(va, fd);

    if (i < 0) {
        tw_error("verbs", "async thread: fd %d is not watched", fd);
        return TW_ERR_INVALID;
    }
    va->srcs[i] = va->srcs[--va->nsrcs];
    return TW_OK;
}

/* Run every command in the pipe. False once told to stop. */
static bool tw_va_commands(tw_va_t *va)
{
    bool run = true;

    for (;;) {
        tw_va_cmd_t *c;
        ssize_t n = read(va->ctl[0], &c, sizeof(c));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n != (ssize_t)sizeof(c)) {
            return run; /* EAGAIN: the pipe is empty */
        }
        switch (c->op) {
        case TW_VA_CMD_ADD:
            c->status = tw_va_do_add(va, c);
            break;
        case TW_VA_CMD_REMOVE:
            c->status = tw_va_do_remove(va, c->fd);
            break;
        case TW_VA_CMD_STOP:
            c->status = TW_OK;
            run = false;
            break;
        }
        tw_mutex_lock(&va->lock);
        c->done = true;
        pthread_cond_broadcast(&va->cond);
        tw_mutex_unlock(&va->lock);
    }
}

static void *tw_va_main(void *arg)
{
    tw_va_t *va = arg;
    struct pollfd ctl = {.fd = va->ctl[0], .events = POLLIN};
    bool run = true;

    pthread_setname_np(pthread_self(), "tw-async");
    while (run) {
        struct pollfd *pfds = va->pfds != NULL ? va->pfds : &ctl;
        unsigned n = va->nsrcs;

        pfds[0] = ctl;
        for (unsigned i = 0; i < n; i++) {
            pfds[1 + i] =
                (struct pollfd){.fd = va->srcs[i].muted ? -1 : va->srcs[i].fd, .events = POLLIN};
        }
        if (poll(pfds, n + 1, -1) < 0) {
            if (errno != EINTR) {
                tw_error("verbs", "async thread: poll: %s", strerror(errno));
            }
            continue;
        }
        /* Sources first, as the poll saw them; the table may change only
         * in tw_va_commands, below. */
        for (unsigned i = 0; i < n; i++) {
            tw_va_src_t *s = &va->srcs[i];
            short rev = pfds[1 + i].revents;
            if (rev == 0) {
                continue;
            }
            if (rev & POLLNVAL) {
                tw_warn("verbs", "async thread: fd %d was closed while watched: no longer polled",
                        s->fd);
                s->muted = true;
                continue;
            }
            s->fn(s->arg, s->fd);
            if ((rev & (POLLHUP | POLLERR)) && !(rev & POLLIN)) {
                tw_warn("verbs", "async thread: fd %d hung up: no longer polled", s->fd);
                s->muted = true;
            }
        }
        if (pfds[0].revents != 0) {
            run = tw_va_commands(va);
        }
    }
    return NULL;
}

/* ---- callers ------------------------------------------------------------ */

static tw_status_t tw_va_call(tw_va_t *va, tw_va_cmd_t *c)
{
    ssize_t n;

    if (pthread_equal(pthread_self(), va->thread)) {
        tw_error("verbs", "async thread: a source's callback may not add or remove sources");
        return TW_ERR_INVALID;
    }
    do {
        n = write(va->ctl[1], &c, sizeof(c));
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(c)) {
        tw_error("verbs", "async thread: control pipe: %s", n < 0 ? strerror(errno) : "short");
        return TW_ERR_TRANSPORT;
    }
    tw_mutex_lock(&va->lock);
    while (!c->done) {
        tw_cond_wait(&va->cond, &va->lock);
    }
    tw_mutex_unlock(&va->lock);
    return c->status;
}

tw_status_t tw_va_create(tw_va_t **va_p)
{
    sigset_t all, old;
    tw_va_t *va;
    int rc;

    if (va_p == NULL) {
        return TW_ERR_INVALID;
    }
    va = tw_calloc(1, sizeof(*va));
    if (va == NULL) {
        return TW_ERR_NOMEM;
    }
    if (pipe2(va->ctl, O_CLOEXEC) != 0) {
        tw_error("verbs", "async thread: pipe: %s", strerror(errno));
        tw_free(va, sizeof(*va));
        return TW_ERR_TRANSPORT;
    }
    /* Only the thread reads, until the pipe is empty. */
    (void)fcntl(va->ctl[0], F_SETFL, O_NONBLOCK);
    tw_mutex_init(&va->lock, TW_LOCK_RANK_VERBS_ASYNC, "verbs async devices");
    pthread_cond_init(&va->cond, NULL);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&va->thread, NULL, tw_va_main, va);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        tw_error("verbs", "cannot start the async event thread: %s", strerror(rc));
        close(va->ctl[0]);
        close(va->ctl[1]);
        pthread_cond_destroy(&va->cond);
        tw_mutex_destroy(&va->lock);
        tw_free(va, sizeof(*va));
        return TW_ERR_TRANSPORT;
    }
    *va_p = va;
    return TW_OK;
}

void tw_va_destroy(tw_va_t *va)
{
    tw_va_cmd_t stop = {.op = TW_VA_CMD_STOP};

    if (va == NULL) {
        return;
    }
    if (tw_va_call(va, &stop) == TW_OK) {
        pthread_join(va->thread, NULL);
    } else {
        /* Without the pipe the thread cannot be told; it is left blocked
         * and the rest is not freed (logged by tw_va_call). */
        return;
    }
    while (va->devs != NULL) {
        tw_va_dev_t *d = va->devs;
        va->devs = d->next;
        tw_free(d, sizeof(*d));
    }
    close(va->ctl[0]);
    close(va->ctl[1]);
    tw_free(va->srcs, va->cap * sizeof(*va->srcs));
    tw_free(va->pfds, (va->cap + 1) * sizeof(*va->pfds));
    pthread_cond_destroy(&va->cond);
    tw_mutex_destroy(&va->lock);
    tw_free(va, sizeof(*va));
}

tw_status_t tw_va_add(tw_va_t *va, int fd, tw_va_ready_fn_t fn, void *arg)
{
    tw_va_cmd_t c = {.op = TW_VA_CMD_ADD, .fd = fd, .fn = fn, .arg = arg};

    if (va == NULL || fd < 0 || fn == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_va_call(va, &c);
}

tw_status_t tw_va_remove(tw_va_t *va, int fd)
{
    tw_va_cmd_t c = {.op = TW_VA_CMD_REMOVE, .fd = fd};

    if (va == NULL || fd < 0) {
        return TW_ERR_INVALID;
    }
    return tw_va_call(va, &c);
}

/* ---- devices ------------------------------------------------------------ */

tw_va_action_t tw_va_classify(enum ibv_event_type type)
{
    switch (type) {
    case IBV_EVENT_PORT_ERR:
        return TW_VA_PORT_DOWN;
    case IBV_EVENT_PORT_ACTIVE:
        return TW_VA_PORT_UP;
    case IBV_EVENT_DEVICE_FATAL:
        return TW_VA_DEVICE_FATAL;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
        return TW_VA_QP_FATAL;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return TW_VA_SRQ_LIMIT;
    case IBV_EVENT_SRQ_ERR:
        return TW_VA_SRQ_FATAL;
    case IBV_EVENT_CQ_ERR:
        return TW_VA_CQ_FATAL;
    default:
        /* COMM_EST, SQ_DRAINED, PATH_MIG(_ERR), LID/PKEY/GID/SM change,
         * CLIENT_REREGISTER, QP_LAST_WQE_REACHED, WQ_FATAL. */
        return TW_VA_IGNORE;
    }
}

tw_status_t tw_va_peer_status(tw_va_action_t action)
{
    switch (action) {
    case TW_VA_PORT_DOWN:
        return TW_ERR_TRANSPORT;
    case TW_VA_DEVICE_FATAL:
    case TW_VA_QP_FATAL:
    case TW_VA_SRQ_FATAL:
    case TW_VA_CQ_FATAL:
        return TW_ERR_PEER_FAILED;
    case TW_VA_IGNORE:
    case TW_VA_PORT_UP:
    case TW_VA_SRQ_LIMIT:
        break;
    }
    return TW_OK;
}

const char *tw_va_action_name(tw_va_action_t action)
{
    static const char *const names[] = {
        [TW_VA_IGNORE] = "ignored",      [TW_VA_PORT_DOWN] = "port down",
        [TW_VA_PORT_UP] = "port up",     [TW_VA_DEVICE_FATAL] = "device fatal",
        [TW_VA_QP_FATAL] = "QP fatal",   [TW_VA_SRQ_LIMIT] = "SRQ limit",
        [TW_VA_SRQ_FATAL] = "SRQ fatal", [TW_VA_CQ_FATAL] = "CQ fatal",
    };
    return (unsigned)action < sizeof(names) / sizeof(names[0]) ? names[action] : "?";
}

static void tw_va_dev_ready(void *arg, int fd)
{
    tw_va_dev_t *d = arg;
    struct ibv_async_event ev;

    (void)fd;
    while (ibv_get_async_event(d->ctx, &ev) == 0) {
        d->fn(d->arg, &ev);
        ibv_ack_async_event(&ev);
    }
}

tw_status_t tw_va_add_device(tw_va_t *va, struct ibv_context *ctx, tw_va_event_fn_t fn, void *arg)
{
    tw_va_dev_t *d;
    tw_status_t st;
    int fl;

    if (va == NULL || ctx == NULL || fn == NULL) {
        return TW_ERR_INVALID;
    }
    fl = fcntl(ctx->async_fd, F_GETFL);
    if (fl < 0 || fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        tw_error("verbs", "%s: cannot make the async event fd non-blocking: %s",
                 ibv_get_device_name(ctx->device), strerror(errno));
        return TW_ERR_TRANSPORT;
    }
    d = tw_calloc(1, sizeof(*d));
    if (d == NULL) {
        return TW_ERR_NOMEM;
    }
    *d = (tw_va_dev_t){.ctx = ctx, .fn = fn, .arg = arg};
    st = tw_va_add(va, ctx->async_fd, tw_va_dev_ready, d);
    if (st != TW_OK) {
        tw_free(d, sizeof(*d));
        return st;
    }
    tw_mutex_lock(&va->lock);
    d->next = va->devs;
    va->devs = d;
    tw_mutex_unlock(&va->lock);
    return TW_OK;
}

tw_status_t tw_va_remove_device(tw_va_t *va, struct ibv_context *ctx)
{
    tw_va_dev_t **pp, *d = NULL;
    tw_status_t st;

    if (va == NULL || ctx == NULL) {
        return TW_ERR_INVALID;
    }
    st = tw_va_remove(va, ctx->async_fd);
    tw_mutex_lock(&va->lock);
    for (pp = &va->devs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->ctx == ctx) {
            d = *pp;
            *pp = d->next;
            break;
        }
    }
    tw_mutex_unlock(&va->lock);
    if (d != NULL) {
        tw_free(d, sizeof(*d));
    }
    return st;
}
