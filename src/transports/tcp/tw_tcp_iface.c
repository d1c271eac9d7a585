/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The TCP transport's iface: its config table, ops table, open and close
 * (README.md: the overview; tw_tcp_int.h: the types, and who may touch
 * them).
 */
#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/tw_config.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_siphash.h"
#include "core/tw_time.h"
#include "transports/tcp/tw_tcp.h"
#include "transports/tcp/tw_tcp_int.h"

static const tw_cfg_entry_t tw_tcp_cfg_entries[] = {
    {.name = "TW_TCP_IF",
     .type = TW_CFG_STRING,
     .defval = "",
     .help =
         "tcp transport: interfaces to listen on (comma list, e.g. eth0,ib0); empty = loopback "
         "when every rank is on this node, else every non-loopback IPv4 and global IPv6 address",
     .offset = offsetof(tw_tcp_cfg_t, ifs)},
    {.name = "TW_TCP_AF",
     .type = TW_CFG_STRING,
     .defval = "inet,inet6",
     .help = "tcp transport: address families to listen on and dial (inet, inet6), in order of "
             "preference; a connect that fails tries the peer's next address",
     .offset = offsetof(tw_tcp_cfg_t, af)},
    {.name = "TW_TCP_TIMEOUT",
     .type = TW_CFG_DURATION,
     .defval = "10s",
     .help = "tcp transport: a peer whose data stays unacknowledged (TCP_USER_TIMEOUT, keepalive) "
             "or, if it runs progress threads, that is silent this long has failed; idle "
             "connections carry a PING every quarter of it; detection takes at most 1.125 x the "
             "larger of the two ranks' values; a handshake with a rank in manual mode may take "
             "this long (others get 2 s); 0 = never",
     .offset = offsetof(tw_tcp_cfg_t, timeout_ns),
     .max = 3600ull * 1000 * 1000 * 1000},
    {.name = "TW_TCP_THREADS",
     .type = TW_CFG_INT,
     .defval = "-1",
     .help = "tcp transport: lanes (a libevent base and progress engine each; rank p's connection "
             "lives on lane p mod lanes); -1 = one per CPU socket (one in manual mode)",
     .offset = offsetof(tw_tcp_cfg_t, threads),
     .min = -1,
     .max = TW_TCP_MAX_LANES},
    {.name = "TW_TCP_RNDV",
     .type = TW_CFG_SIZE,
     .defval = "64k",
     .help = "tcp transport: zero-copy payloads of this size or more go by rendezvous: the sender "
             "sends only a request (RTS) and keeps the buffer; the receiver reads the payload "
             "straight into the matched receive's buffer, so an unmatched message costs it a "
             "header (under 1 KiB), not its size, and the send completes once received; smaller "
             "ones are written at once and staged by the receiver",
     .offset = offsetof(tw_tcp_cfg_t, rndv_thresh),
     .min = 0,
     .max = TW_TCP_MAX_LEN},
    {.name = "TW_TCP_CONGESTION",
     .type = TW_CFG_STRING,
     .defval = "",
     .help = "tcp transport: the congestion control of every connection (TCP_CONGESTION, e.g. "
             "cubic, reno); empty = the host's (net.ipv4.tcp_congestion_control). bbr keeps "
             "about two round trips of data in flight, which between busy hosts close by (a "
             "short idle round trip, a long busy one) slows large transfers; tw_init fails if "
             "this host does not allow the one named",
     .offset = offsetof(tw_tcp_cfg_t, congestion)},
    {.name = "TW_TCP_NOTSENT_LOWAT",
     .type = TW_CFG_SIZE,
     .defval = "32k",
     .help = "tcp transport: what a connection may hold unsent in the kernel (TCP_NOTSENT_LOWAT; "
             "more waits in our queue); 0 = the host's (net.ipv4.tcp_notsent_lowat). A deep "
             "unsent queue is sent from acknowledgements as they arrive; between emulated nodes "
             "under bbr that came with spurious retransmissions and 30 % less bandwidth",
     .offset = offsetof(tw_tcp_cfg_t, notsent_lowat),
     .min = 0,
     .max = 1u << 30},
    {.name = "TW_TCP_POLL_MAX",
     .type = TW_CFG_INT,
     .defval = "8",
     .help = "tcp transport: a lane whose job has at most this many other ranks on it (rank p "
             "on lane p mod lanes) waits for its sockets with poll(2), a larger one with epoll; "
             "0 = always epoll. With few sockets poll is cheaper for each message that arrives "
             "(8 B across two emulated nodes: 13.0 -> 11.8 us on a busy host, 8.59 -> 8.36 on a "
             "quiet one), but its cost grows with the sockets polled on every pass",
     .offset = offsetof(tw_tcp_cfg_t, poll_max),
     .min = 0,
     .max = 4096},
    {.name = "TW_TCP_DIRECT_RECV",
     .type = TW_CFG_INT,
     .defval = "2",
     .help = "tcp transport: a thread that polls a lane of at most this many connections (a "
             "spinning tw_cq_wait, tw_cq_poll, tw_progress) reads them with recv(2) without "
             "polling them first, running the event loop once in 64 passes or after 1 ms; 0 = "
             "never. A message then costs one syscall instead of two, but each connection costs "
             "one on every pass (barrier across two emulated nodes: 15.6 -> 12.1 us)",
     .offset = offsetof(tw_tcp_cfg_t, direct_recv),
     .min = 0,
     .max = 64},
};

const tw_cfg_table_t tw_tcp_cfg_table = {
    .module = "tcp",
    .entries = tw_tcp_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_tcp_cfg_entries),
};

static pthread_once_t tw_tcp_evthread_once = PTHREAD_ONCE_INIT;

static void tw_tcp_evthread_init(void)
{
    (void)evthread_use_pthreads();
}

static tw_status_t tw_tcp_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

static bool tw_tcp_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    return peer != iface->rank && peer >= 0 && peer < iface->size && tcp->eps[peer].naddrs > 0;
}

/* Every address is known: the lanes of our own engines may start. */
static void tw_tcp_ready(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    for (int k = 1; k < tcp->nlanes && tcp->threads; k++) {
        if (tw_pe_start(tcp->lanes[k].pe) != TW_OK) {
            /* Its commands still run: tw_tcp_progress drives it instead. */
            tw_warn("tcp", "cannot start the thread of lane %d: lane 0's engine drives it", k);
            tcp->threads = false;
        }
    }
}

static tw_status_t tw_tcp_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p);
static void tw_tcp_iface_close(tw_tl_iface_t *iface);

static unsigned tw_tcp_pending(tw_tl_iface_t *iface)
{
    return atomic_load_explicit(&((tw_tcp_iface_t *)iface)->rsends, memory_order_acquire);
}

/* Our rendezvous sends are read before the FIN of close tells the peers
 * we left (a collective's staged send completes locally first). */
static void tw_tcp_quiesce(tw_tl_iface_t *iface)
{
    tw_tl_quiesce_wait(iface, tw_tcp_pending, "rendezvous send(s)");
}

const tw_tl_ops_t tw_tcp_ops = {
    .name = "tcp",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_RNDV | TW_TL_CAP_POLL |
            TW_TL_CAP_EAGER_IDS,
    .cfg = &tw_tcp_cfg_table,
    .query = tw_tcp_query,
    .iface_open = tw_tcp_iface_open,
    .wrap_wants = tw_tl_stub_wrap_wants,
    .wrap_open = tw_tl_stub_wrap_open,
    .iface_close = tw_tcp_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_tcp_addr_pack,
    .addr_connect = tw_tcp_addr_connect,
    .ready = tw_tcp_ready,
    .quiesce = tw_tcp_quiesce,
    .reachable = tw_tcp_reachable,
    .am_short = tw_tcp_am_short,
    .am_zcopy = tw_tcp_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tcp_rndv_get,
    .progress = tw_tcp_progress,
    .poll = tw_tcp_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static tw_status_t tw_tcp_iface_open(const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    const tw_tl_attr_t attr = {
        .max_short = TW_TCP_MAX_SHORT,
        .max_hdr = TW_TCP_MAX_HDR,
        .max_zcopy = TW_TCP_MAX_LEN,
    };
    tw_tcp_iface_t *tcp;
    tw_status_t st;

    pthread_once(&tw_tcp_evthread_once, tw_tcp_evthread_init);
    tcp = tw_calloc(1, sizeof(*tcp));
    if (tcp == NULL) {
        return TW_ERR_NOMEM;
    }
    st = tw_tl_iface_init(&tcp->super, &tw_tcp_ops, params, &attr);
    if (st != TW_OK) {
        tw_free(tcp, sizeof(*tcp));
        return st;
    }
    tw_cfg_set_defaults(&tw_tcp_cfg_table, &tcp->cfg);
    if (tw_cfg_apply_env(&tw_tcp_cfg_table, &tcp->cfg) != TW_OK ||
        (tcp->cfg.congestion[0] != '\0' && tw_tcp_check_congestion(tcp->cfg.congestion) != TW_OK)) {
        st = TW_ERR_INVALID;
        goto err;
    }
    if (tw_siphash_key_parse(params->job_key, tcp->key) != TW_OK) {
        tw_error("tcp", "no job key: the TCP transport needs twrun's TW_JOB_KEY");
        st = TW_ERR_INVALID;
        goto err;
    }
    tcp->threads = tw_pe_has_thread(params->pe);
    tcp->nlanes = tcp->cfg.threads;
    if (tcp->nlanes <= 0) {
        tcp->nlanes = tcp->threads ? tw_topo_num_packages() : 1;
    }
    if (tcp->nlanes > TW_TCP_MAX_LANES) {
        tcp->nlanes = TW_TCP_MAX_LANES;
    }
    /* The tick: an eighth of the timeout, between 10 ms and 250 ms. */
    tcp->tick_ns = tcp->cfg.timeout_ns / 8;
    if (tcp->tick_ns < 10000000u || tcp->tick_ns > 250000000u) {
        tcp->tick_ns = tcp->tick_ns < 10000000u && tcp->cfg.timeout_ns > 0 ? 10000000u : 250000000u;
    }
    st = tw_tcp_pick_addrs(tcp, params);
    if (st != TW_OK) {
        goto err;
    }
    tcp->eps = tw_calloc((size_t)params->size, sizeof(*tcp->eps));
    tcp->down = tw_calloc((size_t)params->size, sizeof(*tcp->down));
    tcp->lanes = tw_calloc((size_t)tcp->nlanes, sizeof(*tcp->lanes));
    if (tcp->eps == NULL || tcp->down == NULL || tcp->lanes == NULL) {
        st = TW_ERR_NOMEM;
        goto err;
    }
    for (int i = 0; i < params->size; i++) {
        tcp->eps[i].hs_ns = TW_TCP_HS_TIMEOUT; /* until its address says otherwise */
    }
    for (int k = 0; k < tcp->nlanes; k++) {
        st = tw_tcp_lane_open(tcp, k, params);
        if (st != TW_OK) {
            goto err;
        }
    }
    *iface_p = &tcp->super;
    return TW_OK;

err:
    tw_tcp_iface_close(&tcp->super);
    return st;
}

static void tw_tcp_iface_close(tw_tl_iface_t *iface)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    /* The caller drives every lane from here on. */
    for (int k = 1; tcp->lanes != NULL && k < tcp->nlanes; k++) {
        tw_pe_stop(tcp->lanes[k].pe);
    }
    if (tcp->eps != NULL && tcp->lanes != NULL && tcp->lanes[tcp->nlanes - 1].base != NULL) {
        /* Clean close: what was sent before finalize still goes out,
         * then a FIN, so the peers do not report a failure (connections
         * may still be in their handshake): up to TW_TCP_HS_TIMEOUT. */
        uint64_t until = tw_time_ns() + TW_TCP_HS_TIMEOUT;
        for (int r = 0; r < iface->size; r++) {
            tw_tcp_ep_t *ep = &tcp->eps[r];
            if (!ep->failed && (ep->conn != NULL || ep->pending != NULL || ep->accepting != NULL)) {
                tw_tcp_enqueue_ctl(tw_tcp_lane_of(tcp, r), r, TW_TCP_FRAME_FIN);
            }
        }
        while (tw_tcp_queued(tcp) && tw_time_ns() < until) {
            (void)tw_pe_try_call(tcp->lanes[0].pe, tw_tcp_lane_progress, &tcp->lanes[0]);
            for (int k = 1; k < tcp->nlanes; k++) {
                (void)tw_pe_progress(tcp->lanes[k].pe);
            }
            usleep(50);
        }
    }
    tcp->closing = true; /* late commands: TW_ERR_CANCELED */
    /* What was submitted on the shared engine of lane 0 during the
     * flush above (tw_tl_close ran what came before) names our lanes: it
     * runs now, while they exist, refused (closing); the engine goes
     * later, with the context. Our own engines (lanes 1..) run theirs as
     * they go below. */
    if (tcp->lanes != NULL &&
        atomic_load_explicit(&tcp->lanes[0].cmds, memory_order_relaxed) != 0) {
        tw_tl_run_leftovers(tcp->lanes[0].pe, tw_time_ns() + TW_TCP_HS_TIMEOUT);
    }
    for (int k = 1; tcp->lanes != NULL && k < tcp->nlanes; k++) {
        tw_pe_destroy(tcp->lanes[k].pe);
        tcp->lanes[k].pe = NULL;
    }
    if (tcp->eps != NULL && tcp->lanes != NULL) {
        for (int r = 0; r < iface->size; r++) {
            tw_tcp_ep_close(tw_tcp_lane_of(tcp, r), &tcp->eps[r], TW_ERR_CANCELED);
        }
    }
    if (tcp->eps != NULL) {
        tw_free(tcp->eps, (size_t)iface->size * sizeof(*tcp->eps));
    }
    if (tcp->lanes != NULL) {
        for (int k = 0; k < tcp->nlanes; k++) {
            tw_tcp_lane_close(&tcp->lanes[k]);
        }
        tw_free(tcp->lanes, (size_t)tcp->nlanes * sizeof(*tcp->lanes));
    }
    if (tcp->down != NULL) {
        tw_free(tcp->down, (size_t)iface->size * sizeof(*tcp->down));
    }
    tw_tl_iface_cleanup(iface);
    tw_free(tcp, sizeof(*tcp));
}

#if TW_TESTING
uint16_t tw_tcp_test_peer_port(tw_tl_iface_t *iface, int peer)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;

    if (peer < 0 || peer >= iface->size || tcp->eps[peer].naddrs == 0) {
        return 0;
    }
    return ntohs(((struct sockaddr_in *)&tcp->eps[peer].addrs[0].ss)->sin_port);
}
#endif
