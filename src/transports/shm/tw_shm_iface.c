/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * shm, the iface: its tunables and ops table, open and close, and the
 * address exchange.
 *
 * Every rank creates one segment holding its inbound rings (tw_seg:
 * O_EXCL, 0600, an unpredictable name, fallocated) and publishes the name
 * in its address; every rank attaches to every peer's segment and checks
 * its header against the address and the layout it computes itself. After
 * the job-wide fence that follows, the creator unlinks the name (ready),
 * so nothing is left in /dev/shm however the job ends later.
 *
 * Open acquires in steps (tables, segment, wake-up socket); a failed step
 * leaves what it got in the iface, and tw_shm_iface_close, which tolerates
 * every state a step can leave (NULL pointers, fds of -1, no segment),
 * releases it -- the idiom tw_tl.h describes for transports.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/tw_config.h"
#include "core/tw_crc32c.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "transports/shm/tw_shm_int.h"

_Static_assert(TW_SHM_CELL_DATA >= TW_TL_SHORT_MIN, "shm's am_short holds TW_TL_SHORT_MIN");

static const tw_cfg_entry_t tw_shm_cfg_entries[] = {
    {.name = "TW_SHM_CELLS",
     .type = TW_CFG_UINT64,
     .defval = "64",
     .help = "shm transport: cells of 8.3 KiB in each sender's ring to each local peer (power of "
             "two); must be the same on every rank",
     .offset = offsetof(tw_shm_cfg_t, cells),
     .min = TW_SHM_CELLS_MIN,
     .max = TW_SHM_CELLS_MAX},
    {.name = "TW_SHM_CMA",
     .type = TW_CFG_BOOL,
     .defval = "1",
     .help = "shm transport: pull large messages with one copy (process_vm_readv); 0 = copy "
             "them through the rings",
     .offset = offsetof(tw_shm_cfg_t, cma)},
};

const tw_cfg_table_t tw_shm_cfg_table = {
    .module = "shm",
    .entries = tw_shm_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_shm_cfg_entries),
};

static void tw_shm_read_node_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

    snprintf(buf, len, "unknown");
    if (f != NULL) {
        if (fgets(buf, (int)len, f) != NULL) {
            buf[strcspn(buf, "\n")] = '\0';
        }
        fclose(f);
    }
}

static tw_status_t tw_shm_query(char *why, size_t why_len)
{
    if (access("/dev/shm", W_OK) != 0) {
        snprintf(why, why_len, "/dev/shm is not writable: %s", strerror(errno));
        return TW_ERR_UNSUPPORTED;
    }
    return TW_OK;
}

/* The abstract socket "threadwire-<job key CRC>-<pid>" that wakes a rank. */
static void tw_shm_wake_name(const tw_shm_iface_t *shm, pid_t pid, struct sockaddr_un *a,
                             socklen_t *len)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* Abstract name: sun_path[0] = '\0'. */
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "threadwire-%08x-%d", shm->key_crc,
                     (int)pid);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static tw_status_t tw_shm_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_shm_iface_close(tw_tl_iface_t *iface);
static tw_status_t tw_shm_iface_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap,
                                          size_t *len_p);
static tw_status_t tw_shm_iface_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr,
                                             size_t len);
static void tw_shm_ready(tw_tl_iface_t *iface);

/* Rendezvous sends waiting for their receivers' reads (send_lock). */
static unsigned tw_shm_pending(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    unsigned n;

    tw_mutex_lock(&shm->send_lock);
    n = shm->sends != NULL ? shm->nsends : 0;
    tw_mutex_unlock(&shm->send_lock);
    return n;
}

/* A collective's staged send completes locally before it is read: it
 * still is, before we leave. */
static void tw_shm_quiesce(tw_tl_iface_t *iface)
{
    tw_tl_quiesce_wait(iface, tw_shm_pending, "rendezvous send(s)");
}

static bool tw_shm_reachable(tw_tl_iface_t *iface, int peer)
{
    return tw_shm_peer((tw_shm_iface_t *)iface, peer) != NULL;
}

const tw_tl_ops_t tw_shm_ops = {
    .name = "shm",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_RNDV | TW_TL_CAP_POLL,
    .cfg = &tw_shm_cfg_table,
    .query = tw_shm_query,
    .iface_open = tw_shm_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_shm_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_shm_iface_addr_pack,
    .addr_connect = tw_shm_iface_addr_connect,
    .ready = tw_shm_ready,
    .quiesce = tw_shm_quiesce,
    .reachable = tw_shm_reachable,
    .am_short = tw_shm_am_short,
    .am_zcopy = tw_shm_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_shm_rndv_get,
    .progress = tw_shm_progress,
    .poll = tw_shm_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

/* ---- open ------------------------------------------------------------- */

/* The iface with its base and lock; nothing else acquired yet.
 * On failure nothing is left to release. */
static tw_status_t tw_shm_open_base(const tw_tl_params_t *params, tw_shm_iface_t **shm_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_SHM_CELL_DATA,
        .max_hdr = TW_SHM_CELL_DATA,
        .max_zcopy = TW_SHM_MAX_MSG,
    };
    tw_shm_iface_t *shm;
    tw_status_t st;

    if (params->local_size < 1 || params->local_rank < 0 ||
        params->local_rank >= params->local_size || params->recv_rndv == NULL) {
        return TW_ERR_INVALID;
    }
    shm = tw_calloc(1, sizeof(*shm));
    if (shm == NULL) {
        return TW_ERR_NOMEM;
    }
    shm->wake_fd = -1;
    shm->seg.fd = -1;
    st = tw_tl_iface_init(&shm->super, &tw_shm_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(shm, sizeof(*shm));
        return st;
    }
    tw_mutex_init(&shm->send_lock, TW_LOCK_RANK_SHM_SEND, "shm sends to failed peers");
    shm->handles.next = shm->handles.prev = &shm->handles;
    *shm_p = shm;
    return TW_OK;
}

/* Tunables, identity, the send table and the peer table. */
static tw_status_t tw_shm_open_tables(tw_shm_iface_t *shm, const tw_tl_params_t *params)
{
    tw_cfg_set_defaults(&tw_shm_cfg_table, &shm->cfg);
    if (tw_cfg_apply_env(&tw_shm_cfg_table, &shm->cfg) != TW_OK) {
        return TW_ERR_INVALID;
    }
    if ((shm->cfg.cells & (shm->cfg.cells - 1)) != 0) {
        tw_error("shm", "TW_SHM_CELLS=%llu is not a power of two",
                 (unsigned long long)shm->cfg.cells);
        return TW_ERR_INVALID;
    }
    atomic_init(&shm->cma_off, !shm->cfg.cma);
    shm->ncells = (unsigned)shm->cfg.cells;
    shm->nlocal = (unsigned)params->local_size;
    shm->local_rank = (unsigned)params->local_rank;
    shm->key_crc = tw_crc32c(0, params->job_key, strlen(params->job_key));
    tw_shm_read_node_id(shm->node, sizeof(shm->node));

    /* Each table is set up as soon as it exists: close reads it. */
    shm->peers = tw_calloc((size_t)params->size, sizeof(*shm->peers));
    if (shm->peers == NULL) {
        return TW_ERR_NOMEM;
    }
    for (int r = 0; r < params->size; r++) {
        shm->peers[r].on_node =
            params->node_of == NULL || params->node_of[r] == params->node_of[params->rank];
        shm->peers[r].pidfd = -1;
        shm->peers[r].seg.fd = -1;
        atomic_init(&shm->peers[r].state, TW_SHM_PEER_UP);
    }
    shm->sends = tw_calloc(TW_SHM_SENDS, sizeof(*shm->sends));
    if (shm->sends == NULL) {
        return TW_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < TW_SHM_SENDS; i++) {
        shm->sends[i].next_free = i + 1 < TW_SHM_SENDS ? i + 1 : UINT32_MAX;
    }
    shm->send_free = 0;
    return TW_OK;
}

/* Our segment, with our inbound rings. */
static tw_status_t tw_shm_open_segment(tw_shm_iface_t *shm, const tw_tl_params_t *params)
{
    char name[TW_SEG_NAME_MAX];
    tw_status_t st;

    st = tw_seg_make_name(params->job_key, name, sizeof(name));
    if (st == TW_OK) {
        st = tw_seg_create(name, tw_shm_seg_size(shm->nlocal, shm->ncells), &shm->seg);
    }
    if (st != TW_OK) {
        return st;
    }
    shm->hdr = shm->seg.base;
    tw_shm_seg_format(shm->seg.base, &(tw_shm_seg_id_t){.nlocal = shm->nlocal,
                                                        .ncells = shm->ncells,
                                                        .owner_local = shm->local_rank,
                                                        .owner_pid = (uint32_t)getpid(),
                                                        .key_crc = shm->key_crc});
    return TW_OK;
}

/* The wake-up socket, watched by the engine, and the sleep flag that
 * tells senders to use it. */
static tw_status_t tw_shm_open_wake(tw_shm_iface_t *shm, const tw_tl_params_t *params)
{
    struct sockaddr_un a;
    socklen_t alen;
    tw_status_t st;

    shm->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (shm->wake_fd < 0) {
        tw_error("shm", "socket(AF_UNIX, SOCK_DGRAM) failed: %m");
        return TW_ERR_TRANSPORT;
    }
    tw_shm_wake_name(shm, getpid(), &a, &alen);
    if (bind(shm->wake_fd, (struct sockaddr *)&a, alen) != 0) {
        tw_error("shm", "cannot bind the wake-up socket @%s: %m", a.sun_path + 1);
        return TW_ERR_TRANSPORT;
    }
    st = tw_pe_add_sleep_word(params->pe, &shm->hdr->sleeping);
    if (st == TW_OK) {
        st = tw_pe_watch(params->pe, shm->wake_fd);
    }
    return st;
}

static tw_status_t tw_shm_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    tw_shm_iface_t *shm;
    tw_status_t st;

    st = tw_shm_open_base(params, &shm);
    if (st != TW_OK) {
        return st;
    }
    st = tw_shm_open_tables(shm, params);
    if (st == TW_OK) {
        st = tw_shm_open_segment(shm, params);
    }
    if (st == TW_OK) {
        st = tw_shm_open_wake(shm, params);
    }
    if (st != TW_OK) {
        tw_shm_iface_close(&shm->super); /* releases what the steps got */
        return st;
    }
    *iface_p = &shm->super;
    return TW_OK;
}

/* ---- address exchange ----------------------------------------------------- */

static tw_status_t tw_shm_iface_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap,
                                          size_t *len_p)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_addr_t a = {
        .local_rank = shm->local_rank, .pid = (uint32_t)getpid(), .ncells = shm->ncells};

    if (cap < TW_SHM_ADDR_LEN) {
        return TW_ERR_INVALID;
    }
    snprintf(a.seg, sizeof(a.seg), "%s", shm->seg.name);
    snprintf(a.node, sizeof(a.node), "%s", shm->node);
    tw_shm_addr_pack(&a, buf);
    *len_p = TW_SHM_ADDR_LEN;
    return TW_OK;
}

/* Attach to the segment @p a names and check that it is what @p a says. */
static tw_status_t tw_shm_attach(tw_shm_iface_t *shm, int peer, const tw_shm_addr_t *a)
{
    tw_shm_peer_t *p = &shm->peers[peer];
    const char *why = NULL;
    tw_status_t st;

    st = tw_seg_attach(a->seg, tw_shm_seg_size(shm->nlocal, shm->ncells), &p->seg);
    if (st != TW_OK) {
        tw_error("shm",
                 "rank %d is on this node by the node map, but its segment %s cannot be "
                 "attached: /dev/shm is not shared with it (the launcher's node ids or "
                 "TW_NODE_ID are wrong)",
                 peer, a->seg);
        return st;
    }
    st = tw_shm_seg_check(p->seg.base, p->seg.size,
                          &(tw_shm_seg_id_t){.nlocal = shm->nlocal,
                                             .ncells = shm->ncells,
                                             .owner_local = a->local_rank,
                                             .owner_pid = a->pid,
                                             .key_crc = shm->key_crc},
                          &why);
    if (st != TW_OK) {
        tw_error("shm", "segment %s of rank %d does not match its address: %s", a->seg, peer, why);
        tw_seg_detach(&p->seg);
        return TW_ERR_PROTOCOL;
    }
    return TW_OK;
}

static tw_status_t tw_shm_iface_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr,
                                             size_t len)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;
    tw_shm_peer_t *p = &shm->peers[peer];
    tw_shm_seg_hdr_t *h;
    const char *why = NULL;
    tw_shm_addr_t a;
    tw_status_t st;

    if (tw_shm_addr_parse(addr, len, &a, &why) != TW_OK) {
        tw_error("shm", "rank %d published a malformed shm address (%zu bytes): %s", peer, len,
                 why);
        return TW_ERR_PROTOCOL;
    }
    if (!p->on_node) {
        return TW_OK; /* another node by the node map: not ours to reach */
    }
    if (strcmp(a.node, shm->node) != 0) {
        tw_error("shm",
                 "rank %d is on this node by the node map, but runs under another kernel (boot "
                 "id %s, ours %s): the launcher's node ids or TW_NODE_ID are wrong",
                 peer, a.node, shm->node);
        return TW_ERR_UNREACHABLE;
    }
    if (a.local_rank >= shm->nlocal || a.local_rank == shm->local_rank || a.ncells != shm->ncells) {
        tw_error("shm",
                 "rank %d: local rank %u of %u, %u cells per ring (we are local rank %u, %u "
                 "cells): set TW_SHM_CELLS alike on every rank",
                 peer, a.local_rank, shm->nlocal, a.ncells, shm->local_rank, shm->ncells);
        return TW_ERR_PROTOCOL;
    }
    st = tw_shm_attach(shm, peer, &a);
    if (st != TW_OK) {
        return st;
    }
    h = p->seg.base;
    p->rank = peer;
    p->local = (int)a.local_rank;
    p->pid = (pid_t)a.pid;
    p->tx = tw_shm_ring(p->seg.base, shm->ncells, shm->local_rank, a.local_rank);
    p->tx_sleeping = &h->sleeping;
    p->tx_state = &h->state;
    p->rx = tw_shm_ring(shm->seg.base, shm->ncells, a.local_rank, shm->local_rank);
    p->rx_head = 0;
    tw_shm_wake_name(shm, p->pid, &p->wake_addr, &p->wake_len);
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd < 0) {
        tw_debug("shm", "pidfd_open(%d) failed (%m): polling kill(pid, 0) instead", (int)p->pid);
        p->pidfd = -1;
    } else if (tw_pe_watch(iface->pe, p->pidfd) != TW_OK) {
        close(p->pidfd);
        p->pidfd = -1;
    }
    p->attached = true;
    shm->npeers_up++;
    return TW_OK;
}

/* ---- ready, close ----------------------------------------------------------- */

static void tw_shm_ready(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;

    /* Everyone attached (the caller fenced): the name can go. */
    (void)tw_seg_unlink(&shm->seg);
    shm->seg.creator = false;
}

static void tw_shm_iface_close(tw_tl_iface_t *iface)
{
    tw_shm_iface_t *shm = (tw_shm_iface_t *)iface;

    if (shm->hdr != NULL) {
        /* Peers that see us exit now know it was on purpose. */
        atomic_store_explicit(&shm->hdr->state, TW_SHM_SEG_CLOSED, memory_order_release);
    }
    /* Whatever is still in flight is canceled. */
    if (shm->sends != NULL) {
        for (uint32_t i = 0; i < TW_SHM_SENDS; i++) {
            tw_shm_send_t *s = &shm->sends[i];
            if (s->comp != NULL) {
                tw_tl_comp_t *comp = s->comp;
                s->comp = NULL;
                comp->cb(comp, TW_ERR_CANCELED);
            }
        }
    }
    for (uint32_t i = 0; i < shm->npulls; i++) {
        if (shm->pulls[i].comp != NULL) {
            tw_shm_pull_done(shm, &shm->pulls[i], TW_ERR_CANCELED);
        }
    }
    while (shm->handles.next != NULL && shm->handles.next != &shm->handles) {
        tw_tl_rndv_t *h = shm->handles.next;
        tw_shm_handle_unlink(h);
        tw_free(h, sizeof(*h));
    }
    while (shm->jobs_head != NULL) {
        tw_shm_job_t *j = shm->jobs_head;
        shm->jobs_head = j->next;
        tw_free(j, sizeof(*j));
    }
    if (shm->peers != NULL) {
        for (int r = 0; r < iface->size; r++) {
            tw_shm_peer_t *p = &shm->peers[r];
            if (p->pidfd >= 0) {
                close(p->pidfd);
            }
            if (p->attached) {
                tw_seg_detach(&p->seg);
            }
        }
        tw_free(shm->peers, (size_t)iface->size * sizeof(*shm->peers));
    }
    if (shm->pulls != NULL) {
        tw_free(shm->pulls, shm->npulls * sizeof(*shm->pulls));
    }
    if (shm->sends != NULL) {
        tw_free(shm->sends, TW_SHM_SENDS * sizeof(*shm->sends));
    }
    if (shm->wake_fd >= 0) {
        close(shm->wake_fd);
    }
    if (shm->seg.base != NULL) {
        if (shm->seg.creator) {
            (void)tw_seg_unlink(&shm->seg); /* if ready never ran */
        }
        tw_seg_detach(&shm->seg);
    }
    tw_mutex_destroy(&shm->send_lock);
    tw_tl_iface_cleanup(iface);
    tw_free(shm, sizeof(*shm));
}
