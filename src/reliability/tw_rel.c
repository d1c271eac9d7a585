/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The reliability layer: sequence numbers, checksums, acks and nacks,
 * retransmission, duplicate suppression, failover and fail-back between
 * transports, keepalive. On when tw_config_t.reliable / TW_RELIABLE=1;
 * when off, msg calls the transports directly and none of this runs.
 *
 * ## Where it sits
 * rel is a wrapper iface (ops table "rel") over every transport iface of
 * the stack (self, shm, tcp, verbs, possibly wrapped by the lossy fault
 * injector): each is a *path*; a peer's paths are the ifaces that reach
 * it, in routing order. msg routes every peer to rel. rel takes each path
 * over (tw_tl_bind: its recv and peer_down become rel's), and gives a path
 * that delivers on the sending thread (self) no inline am ids, so its
 * am_short never calls back into rel on the sending thread (rel calls
 * paths with a peer's lock held). Its incarnation goes out in its entry
 * of the address blob; a peer's comes back in addr_connect, which also
 * finds the paths that reach that peer (they connected first).
 *
 * ## Wire format (tw_rel_proto.h, version 2)
 * A 64-byte header on four transport am ids (DATA, ACK, NACK, CTRL):
 * version, type, flags, upper am id, path, upper header length, both
 * incarnations (epochs), sequence number, ack base and a 64-bit ack
 * bitmap, fragment index and count, message length, offset, fragment
 * length, and a CRC32C over header, upper header and payload. A whole
 * message in one fragment, sent while nothing is held out of order here
 * (no ack bits), goes on a fifth id (SDATA) with a 24-byte header: what
 * that case fixes is left out and the two epochs are folded into one
 * word, so an 8-byte message fills two cache lines of a shm cell, as it
 * does without rel, not three. Every field is checked (tw_rel_parse,
 * fuzzed) before it is used.
 *
 * ## Messages and fragments
 * An upper message (header + payload up to 1 GiB) is cut into fragments
 * that fit every path (the smallest max_short, minus the header): the
 * first carries the upper header. Each fragment takes the peer's next
 * 32-bit sequence number (serial arithmetic: wraparound is ordinary). At
 * most TW_REL_WIN (64) fragments per peer are unacknowledged -- Open MPI
 * DR's "virtual fragment of up to 64 fragments acked by one bitmask" is
 * the window here -- and a message larger than the window flows through
 * it. Eager messages (am_short) are copied once, into the message; large
 * ones (am_zcopy) are read from the caller's buffer until every fragment
 * is acked, then their completion runs.
 *
 * ## Acks
 * The receiver acks with (base, bits): every fragment before base
 * arrived, and bit i says base + 1 + i did. Every frame rel sends to a
 * peer carries its current ack (piggybacked on reverse traffic); without
 * reverse traffic an ACK goes after 32 unacked fragments (half the
 * window), at once for the end of a message larger than 8 KiB (its
 * sender waits for the ack to complete a zero-copy send), or when the
 * delayed-ack timer (TW_REL_ACK_DELAY) runs out. A duplicate is acked
 * again at once (its sender lost our ack). A fragment that arrives ahead
 * of a gap is held and sent back as a NACK -- once per gap -- and a frame
 * whose checksum fails is answered with a NACK; when a gap fills and
 * another shows, that one is NACKed too. The sender resends the first
 * missing fragment at once, unless it sent it less than a round trip ago
 * (then it is late, not lost). A retransmission timeout resends only the
 * oldest unacked fragment, as TCP does: the rest are usually held behind
 * it at the receiver.
 *
 * ## Receiving
 * Per peer: rcv_nxt, the next fragment in order, and slots for the 63
 * after it (held copies). A fragment before rcv_nxt is a duplicate
 * (dropped, counted, acked); one past the window cannot be legitimate
 * (dropped, counted); one from another incarnation of the peer, or for
 * another incarnation of us, is stale (dropped, counted). So the
 * duplicate tracker is bounded by the window, and it wraps with the
 * sequence numbers. In-order fragments are reassembled and complete
 * messages are handed up in order, exactly once, by one thread at a time
 * per peer (the "deliverer": others queue behind it), never with a lock
 * held, so a handler may send. A lone in-order fragment is handed up
 * straight from the transport's buffer, without a copy.
 *
 * ## Timers (one timerfd, rel's progress function on engine 0)
 * - retransmission: one timer per peer, on its oldest unacked fragment;
 *   srtt + 4 rttvar (Jacobson; Karn: no samples from resent fragments),
 *   at least TW_REL_RTO, doubled per retry up to TW_REL_RTO_MAX,
 *   restarted by an ack that acknowledges something new;
 * - path failure: a fragment unacked after 6 tries on a path, when no
 *   ack has acknowledged anything new for TW_REL_PATH_TIMEOUT, fails that
 *   path for that peer (a lossy path still makes progress; a dead one
 *   does not);
 * - delayed ack: TW_REL_ACK_DELAY;
 * - keepalive: a peer silent for TW_REL_KEEPALIVE is pinged (it answers
 *   PONG from its engine); silent for TW_REL_KEEPALIVE * TW_REL_MISSES,
 *   with TW_REL_MISSES - 1 pings unanswered, it has failed, whatever its
 *   transports say (a stopped process's kernel still acks TCP);
 * - probes: a failed path is probed every TW_REL_PROBE; after
 *   TW_REL_PROBES answers in a row it carries traffic again.
 * Clock readings (17 ns each here) are made where a time must be exact:
 * a round-trip sample, a timer restart, a resend decision, a control
 * frame, a timer pass. Elsewhere the peer's latest reading stands in
 * (tw_rel_now_t), and every use of it errs on the safe side: an ack
 * deadline comes early, a data arrival's last_rx_ns is early (so the
 * keepalive also waits for misses - 1 unanswered pings before it fails a
 * peer). A send into an empty window starts the retransmission timer:
 * with an engine thread it reads the clock; in manual progress it takes
 * the peer's latest reading as an early stamp (usually the arrival the
 * send answers), and the pass that finds such a fragment due times it
 * from then on instead of resending it -- its first timeout lies between
 * TW_REL_RTO and twice that; every 16th such send reads the clock for a
 * round-trip sample.
 * Each peer's earliest deadline lowers rel's next_due; a pass over the
 * peers runs when it is reached -- by a waiting worker in tw_rel_poll,
 * or by the engine, which a one-shot timerfd armed for next_due + 250 us
 * wakes only when nobody else got there first (the engine may share a
 * core with the worker it would steal from). In manual mode the callers
 * of tw_progress run the passes and no timer is armed.
 *
 * ## On each fault
 * A lost or corrupted DATA frame is resent after a NACK (gap or
 * checksum) or the timeout. A lost ACK is made good by the next one (acks
 * are cumulative) or by the ack a resent duplicate draws; a lost NACK by
 * the next selective ack or the timeout. A duplicate is dropped and
 * acked; a reordered frame waits in its slot; a frame from another
 * incarnation is stale; a dead or dark path fails over; a silent peer
 * fails.
 *
 * ## Failover and fail-back
 * A path fails for a peer when its transport reports the peer down --
 * for good (TW_ERR_PEER_FAILED, TW_OK: that connection is gone, the path
 * is dead for that peer) or for now (TW_ERR_TRANSPORT: a port went down;
 * probed, may come back) -- when its transport refuses a send (dead; for
 * now if it says TW_ERR_TRANSPORT, which it does while the path is down,
 * possibly before its peer_down ran), or when its retries run out
 * (probed). A probe is a control frame on the failed path; a transport
 * that refuses it (its path still down) just fails that probe, and the
 * next goes TW_REL_PROBE later; the peer answers on the path the probe
 * came in on. Unacknowledged fragments then go again, at
 * once, on the next healthy path: sequence numbers belong to the peer,
 * not the path, so the receiver's tracker drops whatever arrives twice.
 * When a probed path answers TW_REL_PROBES times it is healthy again and,
 * being earlier in routing order, carries the traffic from then on
 * (fail-back). With no path left, or after the keepalive bound, the peer
 * has failed: every operation to it completes with TW_ERR_PEER_FAILED,
 * what it sent and was not yet handed up is dropped, later frames from it
 * are discarded as stale, and the upper layer's peer_down (msg, then the
 * error handler) runs once. Nothing aborts.
 *
 * ## Leaving
 * tw_finalize calls tw_rel_quiesce: a BYE message (upper am id 0) goes to
 * every peer in sequence after all data, and finalize waits (bounded) for
 * every peer to ack everything. A peer whose BYE arrives has left: it is
 * reported up as a clean departure (TW_OK), never as a failure, and no
 * longer pinged.
 *
 * ## Locking
 * Each peer has a pthread mutex. It is the one lock on the reliable
 * small-message path (taken once per send and once per arrival; with
 * reliability off the path has none): a lone in-order arrival is handed
 * up after the lock is released, and its deliverer leaves with one
 * compare-and-swap on the peer's dstate word unless another arrival
 * queued work for it meanwhile (then it takes the lock again and hands
 * that up too). Its critical sections call the
 * transport (a tcp write is a syscall), too long for a spinlock that
 * may share its CPU with the holder. A try-lock count found it
 * uncontended in the pinned benchmarks. The one syscall that path may
 * make is re-arming the timerfd when a new deadline is the earliest
 * (about once per window); a small eager send reuses a pooled message
 * and does not allocate once the pool is warm.
 *
 * ## Back-pressure and memory
 * At most TW_REL_QUEUE messages per peer are unacknowledged; beyond that a
 * send is TW_ERR_AGAIN. Held fragments are bounded by the window, a
 * message being reassembled by its announced length (<= 1 GiB).
 */
#define _GNU_SOURCE
#include "reliability/tw_rel.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/tw_atomic.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"
#include "reliability/tw_rel_proto.h"

#define TW_REL_WIN          64u
#define TW_REL_ACK_EVERY    48u
#define TW_REL_ACK_BIG      8192u     /* acked at once: their sender waits (zero-copy) */
#define TW_REL_TIMER_SLACK  250000ull /* ns the engine's timer fires after a deadline */
#define TW_REL_MIN_TRIES    6u
#define TW_REL_SAMPLE_EVERY 16u /* manual progress: a send that reads the clock, of these */
#define TW_REL_MAX_SHORT    (64u * 1024u)
#define TW_REL_SMALL        256u /* eager messages up to this (header + payload) are pooled */
#define TW_REL_POOL         64u  /* per peer */
#define TW_REL_AM_MASK                                                               \
    ((1ull << TW_REL_AM_DATA) | (1ull << TW_REL_AM_ACK) | (1ull << TW_REL_AM_NACK) | \
     (1ull << TW_REL_AM_CTRL) | (1ull << TW_REL_AM_SDATA))

/* Set while a waiting worker polls the transports (tw_rel_poll): what it
 * receives must not run user code here. */
static TW_TLS bool tw_rel_in_worker;

/* What each of rel's am ids is (a fault injector's per-class rules). */
static const uint8_t tw_rel_am_class[64] = {
    [TW_REL_AM_DATA] = TW_TL_FRAME_DATA, [TW_REL_AM_SDATA] = TW_TL_FRAME_DATA,
    [TW_REL_AM_ACK] = TW_TL_FRAME_ACK,   [TW_REL_AM_NACK] = TW_TL_FRAME_NACK,
    [TW_REL_AM_CTRL] = TW_TL_FRAME_CTRL,
};

static const tw_cfg_entry_t tw_rel_cfg_entries[] = {
    {.name = "TW_REL_RTO",
     .type = TW_CFG_DURATION,
     .defval = "2ms",
     .help = "reliability: first retransmission timeout (doubled per retry)",
     .offset = offsetof(tw_rel_cfg_t, rto_ns)},
    {.name = "TW_REL_RTO_MAX",
     .type = TW_CFG_DURATION,
     .defval = "100ms",
     .help = "reliability: longest retransmission timeout",
     .offset = offsetof(tw_rel_cfg_t, rto_max_ns)},
    {.name = "TW_REL_PATH_TIMEOUT",
     .type = TW_CFG_DURATION,
     .defval = "2s",
     .help = "reliability: no ack progress this long (6 tries at least) fails a path",
     .offset = offsetof(tw_rel_cfg_t, path_timeout_ns)},
    {.name = "TW_REL_ACK_DELAY",
     .type = TW_CFG_DURATION,
     .defval = "1ms",
     .help = "reliability: longest wait before an ack of small messages goes alone",
     .offset = offsetof(tw_rel_cfg_t, ack_delay_ns)},
    {.name = "TW_REL_KEEPALIVE",
     .type = TW_CFG_DURATION,
     .defval = "1s",
     .help = "reliability: ping a peer silent this long",
     .offset = offsetof(tw_rel_cfg_t, keepalive_ns)},
    {.name = "TW_REL_MISSES",
     .type = TW_CFG_INT,
     .defval = "3",
     .help = "reliability: a peer silent for TW_REL_KEEPALIVE times this has failed",
     .offset = offsetof(tw_rel_cfg_t, misses),
     .min = 1,
     .max = 1000},
    {.name = "TW_REL_PROBE",
     .type = TW_CFG_DURATION,
     .defval = "100ms",
     .help = "reliability: probe a failed path this often (fail-back)",
     .offset = offsetof(tw_rel_cfg_t, probe_ns)},
    {.name = "TW_REL_PROBES",
     .type = TW_CFG_INT,
     .defval = "3",
     .help = "reliability: answered probes in a row before a failed path is used again",
     .offset = offsetof(tw_rel_cfg_t, probes),
     .min = 1,
     .max = 1000},
    {.name = "TW_REL_QUEUE",
     .type = TW_CFG_INT,
     .defval = "256",
     .help = "reliability: unacknowledged messages per peer before sends return TW_ERR_AGAIN",
     .offset = offsetof(tw_rel_cfg_t, queue),
     .min = 1,
     .max = 1 << 20},
    {.name = "TW_REL_SEQ_START",
     .type = TW_CFG_UINT64,
     .defval = "0",
     .help = "reliability: first sequence number (tests start near 2^32 for wraparound)",
     .offset = offsetof(tw_rel_cfg_t, seq_start),
     .min = 0,
     .max = UINT32_MAX},
};

const tw_cfg_table_t tw_rel_cfg_table = {
    .module = "reliability",
    .entries = tw_rel_cfg_entries,
    .count = TW_ARRAY_SIZE(tw_rel_cfg_entries),
};

static const tw_stat_desc_t tw_rel_stat_descs[TW_REL_STAT_COUNT] = {
    [TW_REL_STAT_FRAGS_SENT] = {"frags_sent", TW_STAT_COUNTER},
    [TW_REL_STAT_RETRANSMITS] = {"retransmits", TW_STAT_COUNTER},
    [TW_REL_STAT_ACKS_SENT] = {"acks_sent", TW_STAT_COUNTER},
    [TW_REL_STAT_NACKS_SENT] = {"nacks_sent", TW_STAT_COUNTER},
    [TW_REL_STAT_DELIVERED] = {"delivered", TW_STAT_COUNTER},
    [TW_REL_STAT_DUPLICATES] = {"duplicates", TW_STAT_COUNTER},
    [TW_REL_STAT_OUT_OF_ORDER] = {"out_of_order", TW_STAT_COUNTER},
    [TW_REL_STAT_CRC_FAILURES] = {"crc_failures", TW_STAT_COUNTER},
    [TW_REL_STAT_BAD_FRAMES] = {"bad_frames", TW_STAT_COUNTER},
    [TW_REL_STAT_STALE] = {"stale", TW_STAT_COUNTER},
    [TW_REL_STAT_OUT_OF_WINDOW] = {"out_of_window", TW_STAT_COUNTER},
    [TW_REL_STAT_FAILOVERS] = {"failovers", TW_STAT_COUNTER},
    [TW_REL_STAT_FAILBACKS] = {"failbacks", TW_STAT_COUNTER},
    [TW_REL_STAT_PEER_FAILURES] = {"peer_failures", TW_STAT_COUNTER},
    [TW_REL_STAT_PINGS] = {"pings", TW_STAT_COUNTER},
    [TW_REL_STAT_AGAIN] = {"again", TW_STAT_COUNTER},
};

/* An upper message being sent: room for a rel header (TW_REL_ROOM), the
 * upper header, then (eager) the payload -- so a first fragment's frame
 * header is built in place, in front of the upper header, not copied. */
#define TW_REL_ROOM sizeof(tw_rel_hdr_t)
typedef struct tw_rel_smsg {
    struct tw_rel_smsg *next; /* send queue, then the completion list */
    tw_tl_comp_t *comp;       /* zcopy: runs once every fragment is acked */
    const unsigned char *data;
    size_t len;
    size_t alloc_len;
    uint32_t nfrags, issued, acked;
    tw_status_t status; /* for the completion list */
    bool failing;       /* already on a failure list */
    uint16_t hdr_len;
    uint8_t am_id;
    _Alignas(8) unsigned char bytes[]; /* TW_REL_ROOM, upper header, payload */
} tw_rel_smsg_t;

/* A fragment in the send window (in use while its seq is in [una, nxt)). */
typedef struct tw_rel_slot {
    tw_rel_smsg_t *msg; /* NULL once acked */
    uint64_t first_ns;  /* first transmission on its current path */
    uint64_t sent_ns;   /* last transmission; 0: not yet (the transport said AGAIN) */
    uint64_t due_ns;    /* (re)transmit at */
    uint64_t rto_ns;
    uint32_t frag;
    uint16_t tries;
    uint8_t path;
    bool acked;
    bool timed; /* sent_ns is a clock reading of its first send (RTT sample) */
    bool est;   /* sent_ns is an earlier reading (TW_REL_STAMP_EARLY): not yet timed */
} tw_rel_slot_t;

/* A fragment held for its turn, or a whole message waiting for the
 * deliverer: upper header, then payload. */
typedef struct tw_rel_held {
    struct tw_rel_held *next;
    tw_rel_hdr_t h;
    size_t alloc_len;
    unsigned char bytes[];
} tw_rel_held_t;

typedef struct tw_rel_peer {
    pthread_mutex_t lock;
    /* sending */
    uint32_t snd_una, snd_nxt;
    uint64_t srtt_ns, rttvar_ns; /* round-trip estimate (0: no sample yet) */
    uint64_t progress_ns;        /* an ack last acknowledged something new */
    uint64_t clock_ns;           /* the latest clock reading made for this peer */
    unsigned untimed;            /* sends into an empty window since one read the clock */
    tw_rel_slot_t win[TW_REL_WIN];
    tw_rel_smsg_t *q_head, *q_tail; /* messages with fragments not yet in the window */
    tw_rel_smsg_t *pool;            /* free small eager messages */
    unsigned npool;
    unsigned nmsgs; /* messages not completely acked */
    /* receiving */
    uint32_t rcv_nxt;
    tw_rel_held_t *ooo[TW_REL_WIN];
    unsigned nooo;        /* how many of ooo[] are held */
    tw_rel_held_t *reasm; /* the message being put together */
    uint32_t reasm_next;
    tw_rel_held_t *dq_head, *dq_tail; /* complete, in order, for the deliverer */
    /* Who hands messages up (TW_REL_DELIVERING): one thread at a time.
     * Changed under the lock, except that the deliverer of a lone
     * arrival leaves without it (tw_rel_deliverer_exit); TW_REL_PENDING:
     * work was queued for it meanwhile, so it must look again. */
    _Atomic unsigned dstate;
    bool engine_drain; /* dq's head runs user code: an engine hands it up */
    unsigned ack_owed;
    uint64_t ack_due; /* 0: no ack scheduled */
    uint32_t nacked;  /* the gap (rcv_nxt) last nacked */
    bool nack_valid;
    uint64_t crc_nack_ns;
    /* paths: bit g = rel->paths[g] */
    uint8_t reach, up, dead;
    uint8_t rx_path; /* where its last frame came in: answers go back there */
    uint8_t probe_ok[TW_REL_MAX_PATHS];
    uint64_t probe_due;
    /* liveness */
    uint32_t epoch;
    uint64_t last_rx_ns, ping_due;
    unsigned pings; /* ping rounds since its last frame */
    bool down, left, reported;
    /* The two per-message counters, bumped under the lock (a plain load
     * and store, no atomic add) and summed into rel's stats on read. */
    _Atomic uint64_t n_frags_sent, n_delivered;
} tw_rel_peer_t;

typedef struct tw_rel_path {
    struct tw_rel *rel;
    tw_tl_iface_t *iface;
    unsigned index;
} tw_rel_path_t;

typedef struct tw_rel tw_rel_t;
struct tw_rel {
    tw_tl_iface_t super; /* what msg routes to */
    tw_rel_cfg_t cfg;
    uint64_t (*clock)(void);
    int rank;
    int size;
    tw_pe_t *pe;
    tw_rel_path_t paths[TW_REL_MAX_PATHS];
    tw_tl_iface_t *inner[TW_REL_MAX_PATHS]; /* the paths' ifaces (owned) */
    unsigned npaths;
    uint32_t epoch;
    size_t frag_cap; /* upper header + payload bytes per fragment */
    tw_rel_peer_t *peers;
    int timer_fd;
    uint64_t wakeups;
    unsigned passes;           /* the engine's passes (its lock holder's) */
    _Atomic uint64_t next_due; /* the earliest deadline any peer has */
    _Atomic uint64_t armed_at; /* what the timerfd is armed for (UINT64_MAX: nothing) */
    pthread_mutex_t arm_lock;
    bool timer_used;          /* an engine thread sleeps on the timerfd */
    atomic_flag in_pass;      /* a timer pass runs */
    atomic_bool drain_wanted; /* some peer's engine_drain is set */
    atomic_uint_fast64_t logged;
    tw_stats_t *stats;
};

/* Work found under a peer's lock, done after it is released. */
typedef struct tw_rel_todo {
    tw_rel_smsg_t *done; /* completions to run, then free */
    bool report;
    tw_status_t why;
} tw_rel_todo_t;

/* Time from @p t to @p now; 0 if another thread stamped @p t after this
 * one read @p now. */
static inline uint64_t tw_rel_since(uint64_t now, uint64_t t)
{
    return now > t ? now - t : 0;
}

static inline bool tw_seq_lt(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

/* Log the first few of a kind of trouble and then every 1000th. */
/* Count one event in a per-peer counter. Lock held: one writer. */
static inline void tw_rel_count(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static uint64_t tw_rel_stats_source(void *arg, unsigned id)
{
    const tw_rel_t *rel = arg;
    uint64_t sum = 0;

    if (id != TW_REL_STAT_FRAGS_SENT && id != TW_REL_STAT_DELIVERED) {
        return 0;
    }
    for (int r = 0; r < rel->size; r++) {
        const tw_rel_peer_t *p = &rel->peers[r];
        sum +=
            atomic_load_explicit(id == TW_REL_STAT_FRAGS_SENT ? &p->n_frags_sent : &p->n_delivered,
                                 memory_order_relaxed);
    }
    return sum;
}

static bool tw_rel_should_log(tw_rel_t *rel)
{
    uint64_t n = atomic_fetch_add_explicit(&rel->logged, 1, memory_order_relaxed);
    return n < 16 || n % 1000 == 0;
}

/* ---- timers ------------------------------------------------------------- */

/* Arm the timerfd (one-shot, absolute) for @p due unless it is armed for
 * earlier: the engine wakes only when something is due and nobody saw to
 * it first (waiting workers run the same pass, tw_rel_poll, and usually
 * find the deadline moved: an ack came). TW_REL_TIMER_SLACK late, so a
 * worker that polls gets there first and the engine -- which may share
 * its core -- stays asleep. */
static void tw_rel_timer_at(tw_rel_t *rel, uint64_t due)
{
    struct itimerspec its = {{0, 0}, {0, 0}};

    if (!rel->timer_used) {
        return;
    }
    due = due > UINT64_MAX - TW_REL_TIMER_SLACK ? UINT64_MAX : due + TW_REL_TIMER_SLACK;
    if (due >= atomic_load_explicit(&rel->armed_at, memory_order_relaxed)) {
        return;
    }
    pthread_mutex_lock(&rel->arm_lock);
    if (due < atomic_load_explicit(&rel->armed_at, memory_order_relaxed)) {
        atomic_store_explicit(&rel->armed_at, due, memory_order_relaxed);
        due = TW_MAX(due, 1); /* 0 would disarm */
        its.it_value.tv_sec = (time_t)(due / 1000000000u);
        its.it_value.tv_nsec = (long)(due % 1000000000u);
        if (timerfd_settime(rel->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
            tw_warn("rel", "cannot set the timer: %s", strerror(errno));
        }
    }
    pthread_mutex_unlock(&rel->arm_lock);
}

/* Something is outstanding at @p due: make sure a pass looks then. */
static void tw_rel_arm(tw_rel_t *rel, uint64_t due)
{
    uint64_t cur = atomic_load_explicit(&rel->next_due, memory_order_relaxed);

    while (due < cur &&
           !atomic_compare_exchange_weak_explicit(&rel->next_due, &cur, due, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    if (rel->timer_used) {
        tw_rel_timer_at(rel, due);
    }
}

/* ---- paths -------------------------------------------------------------- */

static int tw_rel_cur_path(const tw_rel_peer_t *p)
{
    uint8_t ok = p->up & p->reach;
    return ok == 0 ? -1 : __builtin_ctz(ok);
}

/* The retransmission timeout of a fresh fragment: srtt + 4 rttvar
 * (Jacobson), within [TW_REL_RTO, TW_REL_RTO_MAX]. */
static uint64_t tw_rel_rto(const tw_rel_t *rel, const tw_rel_peer_t *p)
{
    uint64_t rto = p->srtt_ns + 4 * p->rttvar_ns;
    return TW_MIN(TW_MAX(rto, rel->cfg.rto_ns), rel->cfg.rto_max_ns);
}

/* A round trip measured on a fragment sent once (Karn: never on a
 * retransmitted one, whose ack may answer either copy). */
static void tw_rel_rtt_sample(tw_rel_peer_t *p, uint64_t rtt)
{
    if (p->srtt_ns == 0) {
        p->srtt_ns = rtt;
        p->rttvar_ns = rtt / 2;
        return;
    }
    uint64_t err = rtt > p->srtt_ns ? rtt - p->srtt_ns : p->srtt_ns - rtt;
    p->rttvar_ns = (3 * p->rttvar_ns + err) / 4;
    p->srtt_ns = (7 * p->srtt_ns + rtt) / 8;
}

static void tw_rel_fill_ack(const tw_rel_peer_t *p, tw_rel_hdr_t *h)
{
    uint64_t bits = 0;

    for (uint32_t i = 0; p->nooo > 0 && i < TW_REL_WIN - 1; i++) {
        uint32_t seq = p->rcv_nxt + 1 + i;
        const tw_rel_held_t *held = p->ooo[seq % TW_REL_WIN];
        if (held != NULL && held->h.seq == seq) {
            bits |= 1ull << i;
        }
    }
    h->flags |= TW_REL_F_ACK;
    h->ack_base = p->rcv_nxt;
    h->ack_bits = bits;
}

static void tw_rel_hdr_init(const tw_rel_t *rel, const tw_rel_peer_t *p, tw_rel_hdr_t *h,
                            uint8_t type, int path)
{
    memset(h, 0, sizeof(*h));
    h->version = TW_REL_VERSION;
    h->type = type;
    h->path = (uint8_t)path;
    h->src_epoch = rel->epoch;
    h->dst_epoch = p->epoch;
    tw_rel_fill_ack(p, h);
}

/* A control frame on path @p g; -1: the path the peer's last frame came
 * in on when we think it healthy (so acks follow a peer that failed over
 * before we noticed anything), else our current one. Lock held. */
static tw_status_t tw_rel_tx_ctrl(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint8_t type, int g,
                                  uint32_t cookie)
{
    tw_rel_hdr_t h;
    tw_status_t st;

    if (g < 0) {
        g = (p->up >> p->rx_path & 1) ? p->rx_path : tw_rel_cur_path(p);
    }
    if (g < 0) {
        return TW_ERR_PEER_FAILED;
    }
    tw_rel_hdr_init(rel, p, &h, type, g);
    h.seq = cookie;
    h.crc = tw_rel_crc(&h, sizeof(h), NULL, 0);
    st = tw_tl_am_short(rel->paths[g].iface, peer, tw_rel_am_of(type), &h, sizeof(h), NULL, 0);
    if (st == TW_OK) {
        p->ack_owed = 0;
        p->ack_due = 0;
        if (type == TW_REL_T_ACK) {
            tw_stats_inc(rel->stats, TW_REL_STAT_ACKS_SENT);
        } else if (type == TW_REL_T_NACK) {
            tw_stats_inc(rel->stats, TW_REL_STAT_NACKS_SENT);
        }
    }
    return st;
}

static void tw_rel_peer_fail(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const char *what,
                             tw_rel_todo_t *todo);

/* Path @p g no longer reaches @p peer: for good (@p dead: its transport
 * said so) or until probes say otherwise. Lock held. */
static void tw_rel_path_lost(tw_rel_t *rel, tw_rel_peer_t *p, int peer, int g, bool dead,
                             const char *what, uint64_t now, tw_rel_todo_t *todo)
{
    uint8_t bit = (uint8_t)(1u << g);
    int was = tw_rel_cur_path(p);

    if (dead) {
        p->dead |= bit;
    }
    if ((p->up & bit) == 0) {
        return;
    }
    p->up &= (uint8_t)~bit;
    p->probe_ok[g] = 0;
    if (tw_rel_cur_path(p) < 0) {
        tw_rel_peer_fail(rel, p, peer, what, todo);
        return;
    }
    if (was != g) {
        return; /* a standby path: nothing went over it */
    }
    tw_stats_inc(rel->stats, TW_REL_STAT_FAILOVERS);
    tw_warn("rel", "path %s to rank %d failed (%s): failing over to %s", rel->paths[g].iface->name,
            peer, what, rel->paths[tw_rel_cur_path(p)].iface->name);
    /* Everything unacked goes again, at once, on the next path. */
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
        tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg != NULL && !s->acked) {
            s->tries = 0;
            s->rto_ns = tw_rel_rto(rel, p);
            s->due_ns = now;
        }
    }
    if (!dead) {
        p->probe_due = now + rel->cfg.probe_ns;
    }
    tw_rel_arm(rel, now);
}

/* Build fragment @p frag of @p m, sequence @p seq, right before its upper
 * header (m's room), and hand it to path @p g. The frame header goes in
 * field by field (one built aside and copied in would be read back in
 * wider loads than it was written with: store-forwarding stalls); the
 * transport copies the frame before it returns. Lock held. */
static tw_status_t tw_rel_frame_tx(tw_rel_t *rel, tw_rel_peer_t *p, int peer, tw_rel_smsg_t *m,
                                   uint32_t frag, uint32_t seq, int g)
{
    unsigned char *room = m->bytes + TW_REL_ROOM; /* the upper header; frame headers end here */
    size_t cap = rel->frag_cap, first = cap - m->hdr_len;
    size_t off = frag == 0 ? 0 : first + (size_t)(frag - 1) * cap;
    size_t n = TW_MIN(frag == 0 ? first : cap, m->len - off);
    size_t uh = frag == 0 ? m->hdr_len : 0;
    const unsigned char *payload = m->data != NULL ? m->data + off : NULL; /* none: header only */

    if (m->nfrags == 1 && p->nooo == 0) {
        /* The short form: no ack bits to carry (nothing is held). */
        tw_rel_shdr_t *f = (tw_rel_shdr_t *)(void *)(room - sizeof(*f));
        f->version = TW_REL_VERSION;
        f->flags = TW_REL_F_ACK;
        f->am_id = m->am_id;
        f->path = (uint8_t)g;
        f->hdr_len = (uint16_t)uh;
        f->reserved = 0;
        f->seq = seq;
        f->ack_base = p->rcv_nxt;
        f->epochs = tw_rel_epochs(rel->epoch, p->epoch);
        f->crc = tw_rel_short_crc(f, sizeof(*f) + uh, payload, n);
        return tw_tl_am_short(rel->paths[g].iface, peer, TW_REL_AM_SDATA, f, sizeof(*f) + uh,
                              payload, n);
    }
    tw_rel_hdr_t *f = (tw_rel_hdr_t *)(void *)(room - sizeof(*f));
    tw_rel_hdr_init(rel, p, f, TW_REL_T_DATA, g);
    f->am_id = m->am_id;
    f->hdr_len = (uint16_t)uh;
    f->seq = seq;
    f->frag = frag;
    f->nfrags = m->nfrags;
    f->msg_len = m->len;
    f->offset = off;
    f->len = (uint32_t)n;
    f->crc = tw_rel_crc(f, sizeof(*f) + uh, payload, n);
    return tw_tl_am_short(rel->paths[g].iface, peer, TW_REL_AM_DATA, f, sizeof(*f) + uh, payload,
                          n);
}

/* Slot @p s just went out on path @p g: its timers. Lock held. */
static void tw_rel_slot_sent(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_slot_t *s, int g, uint64_t now)
{
    if (s->sent_ns == 0 || s->path != g) {
        s->first_ns = now;
    }
    if (s->sent_ns != 0) { /* a retransmission (on this path or another) */
        s->est = false;
        s->tries++;
        s->rto_ns = TW_MIN(s->rto_ns * 2, rel->cfg.rto_max_ns);
        tw_stats_inc(rel->stats, TW_REL_STAT_RETRANSMITS);
    }
    s->path = (uint8_t)g;
    s->sent_ns = now;
    s->due_ns = now + s->rto_ns;
    p->ack_owed = 0; /* piggybacked */
    p->ack_due = 0;
    tw_rel_count(&p->n_frags_sent);
    tw_rel_arm(rel, s->due_ns);
}

/* Transmit the fragment in slot @p s (sequence @p seq) on the current
 * path, falling over to the next when a transport refuses for good.
 * Lock held. */
static tw_status_t tw_rel_tx_data(tw_rel_t *rel, tw_rel_peer_t *p, int peer, tw_rel_slot_t *s,
                                  uint32_t seq, uint64_t now, tw_rel_todo_t *todo)
{
    tw_status_t st;
    int g;

    for (;;) {
        g = tw_rel_cur_path(p);
        if (g < 0 || p->down) {
            return TW_ERR_PEER_FAILED;
        }
        st = tw_rel_frame_tx(rel, p, peer, s->msg, s->frag, seq, g);
        if (st == TW_OK || st == TW_ERR_AGAIN) {
            break;
        }
        /* TW_ERR_TRANSPORT: down for now (its peer_down may not have run
         * yet): probed, not dead. */
        tw_rel_path_lost(rel, p, peer, g, st != TW_ERR_TRANSPORT, tw_strerror(st), now, todo);
    }
    if (st == TW_ERR_AGAIN) {
        s->due_ns = now; /* next pass */
        tw_rel_arm(rel, now);
        return st;
    }
    tw_rel_slot_sent(rel, p, s, g, now);
    return TW_OK;
}

/* What the time a fragment is pushed with (tw_rel_push's @p now) is. */
typedef enum {
    TW_REL_STAMP_READ,   /* a clock reading made for this send: an RTT sample */
    TW_REL_STAMP_LATEST, /* the peer's latest reading, made for this burst */
    TW_REL_STAMP_EARLY   /* the peer's latest reading, possibly much older */
} tw_rel_stamp_t;

/* The next fragment of the queue's head takes the next sequence number
 * and its slot in the window (which has room). Lock held. */
static tw_rel_slot_t *tw_rel_slot_take(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_stamp_t stamp)
{
    tw_rel_smsg_t *m = p->q_head;
    tw_rel_slot_t *s = &p->win[p->snd_nxt++ % TW_REL_WIN];

    *s = (tw_rel_slot_t){.msg = m,
                         .frag = m->issued++,
                         .rto_ns = tw_rel_rto(rel, p),
                         .timed = stamp == TW_REL_STAMP_READ,
                         .est = stamp == TW_REL_STAMP_EARLY};
    if (m->issued == m->nfrags) {
        p->q_head = m->next;
        if (p->q_head == NULL) {
            p->q_tail = NULL;
        }
        m->next = NULL;
    }
    return s;
}

/* Move queued messages' fragments into the window while it has room.
 * Lock held. */
static void tw_rel_push(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now,
                        tw_rel_stamp_t stamp, tw_rel_todo_t *todo)
{
    while (p->q_head != NULL && !p->down && p->snd_nxt - p->snd_una < TW_REL_WIN) {
        uint32_t seq = p->snd_nxt;
        tw_rel_slot_t *s = tw_rel_slot_take(rel, p, stamp);

        if (tw_rel_tx_data(rel, p, peer, s, seq, now, todo) != TW_OK) {
            break;
        }
    }
}

static void tw_rel_smsg_free(tw_rel_smsg_t *m)
{
    tw_free(m, m->alloc_len);
}

static void tw_rel_held_free(tw_rel_held_t *h)
{
    tw_free(h, h->alloc_len);
}

/* The peer is gone: fail what we owe it, drop what it sent. Lock held. */
static void tw_rel_peer_fail(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const char *what,
                             tw_rel_todo_t *todo)
{
    if (p->down) {
        return;
    }
    p->down = true;
    /* The queue first: its head may also have fragments in the window,
     * and `next` links the queue until the message moves to the list. */
    for (tw_rel_smsg_t *m = p->q_head, *next; m != NULL; m = next) {
        next = m->next;
        if (!m->failing) {
            m->failing = true;
            m->status = TW_ERR_PEER_FAILED;
            m->next = todo->done;
            todo->done = m;
        }
    }
    p->q_head = p->q_tail = NULL;
    p->nmsgs = 0;
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
        tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg != NULL && !s->acked && !s->msg->failing) {
            s->msg->failing = true;
            s->msg->status = TW_ERR_PEER_FAILED;
            s->msg->next = todo->done;
            todo->done = s->msg;
        }
        s->msg = NULL;
    }
    p->snd_una = p->snd_nxt;
    for (unsigned i = 0; i < TW_REL_WIN; i++) {
        if (p->ooo[i] != NULL) {
            tw_rel_held_free(p->ooo[i]);
            p->ooo[i] = NULL;
        }
    }
    p->nooo = 0;
    if (p->reasm != NULL) {
        tw_rel_held_free(p->reasm);
        p->reasm = NULL;
    }
    /* Complete messages waiting for the deliverer (who is handing up
     * another right now) still go up: they were acked. */
    p->ack_due = 0;
    if (p->left) {
        tw_debug("rel", "rank %d left; its unacknowledged operations fail (%s)", peer, what);
        return; /* reported as a clean departure already */
    }
    tw_stats_inc(rel->stats, TW_REL_STAT_PEER_FAILURES);
    tw_error("rel", "rank %d failed: %s; its operations complete with TW_ERR_PEER_FAILED", peer,
             what);
    if (!p->reported) {
        p->reported = true;
        todo->report = true;
        todo->why = TW_ERR_PEER_FAILED;
    }
}

/* After the lock: completions, then the report upward. */
static void tw_rel_finish(tw_rel_t *rel, int peer, tw_rel_todo_t *todo)
{
    while (todo->done != NULL) {
        tw_rel_smsg_t *m = todo->done;
        todo->done = m->next;
        if (m->comp != NULL) {
            m->comp->cb(m->comp, m->status);
        }
        tw_rel_smsg_free(m);
    }
    if (todo->report) {
        todo->report = false;
        if (rel->super.peer_down != NULL) {
            rel->super.peer_down(rel->super.peer_down_arg, peer, todo->why);
        }
    }
}

/* ---- acks --------------------------------------------------------------- */

/* The time an arrival is handled at, read from the clock only when
 * something needs it exact (tw_rel_now): otherwise the peer's latest
 * reading (made by an earlier arrival, a send that sampled the round
 * trip, or a timer pass -- which runs at least every TW_REL_PROBE while
 * anything drives progress). What may use that earlier reading errs on
 * the safe side with it: an ack deadline comes early, not late; path and
 * keepalive deadlines, which count seconds, come a little early. */
typedef struct tw_rel_now {
    uint64_t ns;
    bool read;
} tw_rel_now_t;

static uint64_t tw_rel_now(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_now_t *t)
{
    if (!t->read) {
        t->read = true;
        t->ns = rel->clock();
        p->clock_ns = TW_MAX(p->clock_ns, t->ns);
    }
    return t->ns;
}

/* Returns whether @p s was not acknowledged before. */
static bool tw_rel_mark_acked(tw_rel_t *rel, tw_rel_peer_t *p, tw_rel_slot_t *s, tw_rel_now_t *t,
                              tw_rel_todo_t *todo)
{
    tw_rel_smsg_t *m = s->msg;

    if (m == NULL || s->acked) {
        return false;
    }
    if (s->timed && s->tries == 0 && s->sent_ns != 0) {
        uint64_t now = tw_rel_now(rel, p, t);
        if (now > s->sent_ns) {
            tw_rel_rtt_sample(p, now - s->sent_ns);
        }
    }
    p->progress_ns = TW_MAX(p->progress_ns, t->ns);
    s->acked = true;
    s->msg = NULL;
    if (++m->acked == m->nfrags && !m->failing) {
        p->nmsgs--;
        if (m->comp == NULL && m->alloc_len == sizeof(*m) + TW_REL_ROOM + TW_REL_SMALL &&
            p->npool < TW_REL_POOL) {
            m->next = p->pool; /* eager: nothing to complete, keep it */
            p->pool = m;
            p->npool++;
            return true;
        }
        m->status = TW_OK;
        m->next = todo->done;
        todo->done = m;
    }
    return true;
}

/* Apply the ack fields of an arrival. Lock held. */
static void tw_rel_ack_apply(tw_rel_t *rel, tw_rel_peer_t *p, const tw_rel_hdr_t *h,
                             tw_rel_now_t *t, tw_rel_todo_t *todo)
{
    uint32_t base = h->ack_base;
    bool news = false;

    if (tw_seq_lt(p->snd_nxt, base)) {
        tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
        return; /* acks what was never sent */
    }
    for (uint32_t seq = p->snd_una; tw_seq_lt(seq, base); seq++) {
        news |= tw_rel_mark_acked(rel, p, &p->win[seq % TW_REL_WIN], t, todo);
    }
    for (uint32_t i = 0; i < TW_REL_WIN - 1 && h->ack_bits != 0; i++) {
        uint32_t seq = base + 1 + i;
        if ((h->ack_bits >> i & 1) && !tw_seq_lt(seq, p->snd_una) && tw_seq_lt(seq, p->snd_nxt)) {
            news |= tw_rel_mark_acked(rel, p, &p->win[seq % TW_REL_WIN], t, todo);
        }
    }
    while (p->snd_una != p->snd_nxt && p->win[p->snd_una % TW_REL_WIN].acked) {
        p->win[p->snd_una % TW_REL_WIN].acked = false;
        p->snd_una++;
    }
    /* Something new was acknowledged: the peer's timer restarts, on the
     * oldest fragment still unacked -- from an exact reading, as an early
     * deadline would resend it for nothing. */
    if (news) {
        for (uint32_t seq = p->snd_una; seq != p->snd_nxt; seq++) {
            tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
            if (s->msg != NULL && !s->acked) {
                if (s->sent_ns != 0) {
                    s->due_ns = TW_MAX(s->due_ns, tw_rel_now(rel, p, t) + s->rto_ns);
                }
                break;
            }
        }
    }
}

/* A NACK: resend the first fragment the receiver lacks, unless it went
 * out less than a round trip ago (then it is late, not lost). The next
 * gap gets its own NACK once this one is filled. Lock held. */
static void tw_rel_nack_apply(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                              uint64_t now, tw_rel_todo_t *todo)
{
    uint32_t seq = h->ack_base;
    tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
    uint64_t fresh = TW_MAX(p->srtt_ns, rel->cfg.rto_ns / 2);

    if (tw_seq_lt(seq, p->snd_una) || !tw_seq_lt(seq, p->snd_nxt) || s->msg == NULL || s->acked ||
        s->sent_ns == 0 || tw_rel_since(now, s->sent_ns) < fresh) {
        return;
    }
    (void)tw_rel_tx_data(rel, p, peer, s, seq, now, todo);
}

/* One more fragment to ack: now, or soon. Lock held. */
static void tw_rel_ack_note(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                            uint64_t now)
{
    /* A large message's sender waits for this ack to complete its send
     * (zero-copy): do not keep it waiting. Small ones wait for reverse
     * traffic, the 32nd fragment, or the delayed-ack timer. */
    bool urgent = h->msg_len > TW_REL_ACK_BIG || (h->nfrags > 1 && h->frag == h->nfrags - 1) ||
                  h->am_id == TW_REL_BYE_AM;

    if (++p->ack_owed >= TW_REL_ACK_EVERY || urgent) {
        (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
    } else if (p->ack_due == 0) {
        p->ack_due = now + rel->cfg.ack_delay_ns;
        tw_rel_arm(rel, p->ack_due);
    }
}

/* ---- receiving ---------------------------------------------------------- */

static tw_rel_held_t *tw_rel_held_new(tw_rel_t *rel, const tw_rel_hdr_t *h, size_t bytes)
{
    size_t alloc_len = sizeof(tw_rel_held_t) + bytes;
    tw_rel_held_t *held = tw_malloc(alloc_len);

    if (held == NULL) {
        if (tw_rel_should_log(rel)) {
            tw_error("rel", "out of memory holding %zu bytes", bytes);
        }
        return NULL;
    }
    held->next = NULL;
    held->h = *h;
    held->alloc_len = alloc_len;
    return held;
}

static void tw_rel_dq_append(tw_rel_peer_t *p, tw_rel_held_t *d)
{
    d->next = NULL;
    if (p->dq_tail != NULL) {
        p->dq_tail->next = d;
    } else {
        p->dq_head = d;
    }
    p->dq_tail = d;
}

/* Fragment rcv_nxt (header @p h, upper header @p uhdr, payload @p data)
 * joins its message; a complete message goes to the delivery queue.
 * @p own: a held copy of exactly this fragment that may be reused. Lock
 * held; the caller advances rcv_nxt. */
static void tw_rel_consume(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                           const unsigned char *uhdr, const unsigned char *data, tw_rel_held_t *own)
{
    if (h->frag == 0) {
        if (p->reasm != NULL) {
            /* The previous message never ended: impossible from a sane
             * peer (its fragments are consecutive). */
            tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
            tw_rel_held_free(p->reasm);
            p->reasm = NULL;
        }
        if (h->nfrags == 1) {
            if (own == NULL) {
                own = tw_rel_held_new(rel, h, h->hdr_len + h->len);
                if (own == NULL) {
                    return;
                }
                memcpy(own->bytes, uhdr, h->hdr_len);
                memcpy(own->bytes + h->hdr_len, data, h->len);
            }
            tw_rel_dq_append(p, own);
            return;
        }
        p->reasm = tw_rel_held_new(rel, h, h->hdr_len + h->msg_len);
        if (p->reasm == NULL) {
            return;
        }
        memcpy(p->reasm->bytes, uhdr, h->hdr_len);
        memcpy(p->reasm->bytes + h->hdr_len, data, h->len);
        p->reasm_next = 1;
    } else {
        tw_rel_held_t *r = p->reasm;
        if (r == NULL || h->frag != p->reasm_next || h->nfrags != r->h.nfrags ||
            h->msg_len != r->h.msg_len || h->am_id != r->h.am_id) {
            if (r != NULL || tw_rel_should_log(rel)) {
                tw_warn("rel", "rank %d sent fragment %u of %u out of its message: dropped", peer,
                        h->frag, h->nfrags);
            }
            tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
            if (r != NULL) {
                tw_rel_held_free(r);
                p->reasm = NULL;
            }
            if (own != NULL) {
                tw_rel_held_free(own);
            }
            return;
        }
        memcpy(r->bytes + r->h.hdr_len + h->offset, data, h->len);
        if (++p->reasm_next == r->h.nfrags) {
            p->reasm = NULL;
            tw_rel_dq_append(p, r);
        }
    }
    if (own != NULL) {
        tw_rel_held_free(own);
    }
}

/* May this thread hand a message of upper am id @p am_id up? */
static bool tw_rel_may_deliver(const tw_rel_t *rel, uint8_t am_id)
{
    return !tw_rel_in_worker || (am_id < 64 && (rel->super.inline_am_ids >> am_id & 1));
}

#define TW_REL_DELIVERING 1u
#define TW_REL_PENDING    2u

/* Become the peer's deliverer, or leave the work just queued to the one
 * there is (marked pending: it looks again before it leaves). Lock held. */
static bool tw_rel_deliverer_enter(tw_rel_peer_t *p)
{
    unsigned cur = atomic_load_explicit(&p->dstate, memory_order_relaxed);
    unsigned want;

    do {
        want = (cur & TW_REL_DELIVERING) ? cur | TW_REL_PENDING : TW_REL_DELIVERING;
    } while (!atomic_compare_exchange_weak_explicit(&p->dstate, &cur, want, memory_order_acq_rel,
                                                    memory_order_relaxed));
    return !(cur & TW_REL_DELIVERING);
}

/* The deliverer leaves, everything queued handed up (tw_rel_drain
 * returned): whoever queued more did so under the lock, before the drain
 * saw the queues empty. Lock held. */
static void tw_rel_deliverer_leave(tw_rel_peer_t *p)
{
    atomic_store_explicit(&p->dstate, 0, memory_order_release);
}

/* Fragments are held past rcv_nxt, which is missing: NACK it, once per
 * gap. Lock held. */
static void tw_rel_nack_gap(tw_rel_t *rel, tw_rel_peer_t *p, int peer)
{
    if (p->down || p->nooo == 0 || (p->nack_valid && p->nacked == p->rcv_nxt)) {
        return;
    }
    for (uint32_t i = 1; i < TW_REL_WIN; i++) {
        const tw_rel_held_t *held = p->ooo[(p->rcv_nxt + i) % TW_REL_WIN];
        if (held != NULL && held->h.seq == p->rcv_nxt + i) {
            p->nacked = p->rcv_nxt;
            p->nack_valid = true;
            (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_NACK, -1, 0);
            return;
        }
    }
}

/* Hand up, in order, whatever is ready; the lock is dropped around each
 * upcall. Only the peer's deliverer runs this. Lock held. */
static void tw_rel_drain(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now)
{
    for (;;) {
        while (!p->down) {
            tw_rel_held_t *held = p->ooo[p->rcv_nxt % TW_REL_WIN];
            if (held == NULL || held->h.seq != p->rcv_nxt) {
                break;
            }
            p->ooo[p->rcv_nxt % TW_REL_WIN] = NULL;
            p->nooo--;
            p->rcv_nxt++;
            tw_rel_hdr_t hh = held->h;
            tw_rel_consume(rel, p, peer, &held->h, held->bytes, held->bytes + held->h.hdr_len,
                           held);
            tw_rel_ack_note(rel, p, peer, &hh, now);
        }
        tw_rel_nack_gap(rel, p, peer);
        if (p->dq_head == NULL) {
            return;
        }
        tw_rel_held_t *d = p->dq_head;
        if (!tw_rel_may_deliver(rel, d->h.am_id)) {
            /* User code: an engine takes it (and what follows) up. */
            p->engine_drain = true;
            atomic_store_explicit(&rel->drain_wanted, true, memory_order_release);
            tw_pe_wake(rel->pe);
            return;
        }
        p->dq_head = d->next;
        if (p->dq_head == NULL) {
            p->dq_tail = NULL;
        }
        if (d->h.am_id == TW_REL_BYE_AM && d->h.msg_len == 0 && d->h.hdr_len == 0) {
            /* Everything it sent before is handed up: it left. */
            tw_rel_held_free(d);
            p->left = true;
            tw_debug("rel", "rank %d said goodbye", peer);
            if (!p->reported) {
                p->reported = true;
                pthread_mutex_unlock(&p->lock);
                if (rel->super.peer_down != NULL) {
                    rel->super.peer_down(rel->super.peer_down_arg, peer, TW_OK);
                }
                pthread_mutex_lock(&p->lock);
            }
            continue;
        }
        tw_rel_count(&p->n_delivered);
        pthread_mutex_unlock(&p->lock);
        rel->super.recv(rel->super.recv_arg, peer, d->h.am_id, d->bytes, d->h.hdr_len,
                        d->bytes + d->h.hdr_len, d->h.msg_len);
        tw_rel_held_free(d);
        pthread_mutex_lock(&p->lock);
    }
}

/* A DATA frame passed its checks. Returns true when this thread is to
 * hand it up itself, straight from the transport's buffer, once it has
 * released the lock (tw_rel_recv_cb), and then leave as the deliverer
 * (tw_rel_deliverer_exit). Lock held (dropped while handing up others). */
static bool tw_rel_data_arrived(tw_rel_t *rel, tw_rel_peer_t *p, int peer, const tw_rel_hdr_t *h,
                                const unsigned char *uhdr, const unsigned char *data, uint64_t now)
{
    int32_t d = (int32_t)(h->seq - p->rcv_nxt);

    if (d < 0) {
        /* Had it: our ack was lost or is late. Say so again, now. */
        tw_stats_inc(rel->stats, TW_REL_STAT_DUPLICATES);
        (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
        return false;
    }
    if ((uint32_t)d >= TW_REL_WIN) {
        tw_stats_inc(rel->stats, TW_REL_STAT_OUT_OF_WINDOW);
        if (tw_rel_should_log(rel)) {
            tw_warn("rel", "rank %d sent fragment %u, %d past the window: dropped", peer, h->seq,
                    d);
        }
        return false;
    }
    if (d > 0) {
        tw_rel_held_t **slot = &p->ooo[h->seq % TW_REL_WIN];
        if (*slot != NULL) {
            tw_stats_inc(rel->stats, TW_REL_STAT_DUPLICATES);
            (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
            return false;
        }
        tw_rel_held_t *held = tw_rel_held_new(rel, h, h->hdr_len + h->len);
        if (held == NULL) {
            return false; /* as if lost: it comes again */
        }
        memcpy(held->bytes, uhdr, h->hdr_len);
        memcpy(held->bytes + h->hdr_len, data, h->len);
        *slot = held;
        p->nooo++;
        tw_stats_inc(rel->stats, TW_REL_STAT_OUT_OF_ORDER);
        if (!p->nack_valid || p->nacked != p->rcv_nxt) {
            tw_rel_nack_gap(rel, p, peer);
        } else {
            tw_rel_ack_note(rel, p, peer, h, now);
        }
        return false;
    }
    p->rcv_nxt++;
    if (atomic_load_explicit(&p->dstate, memory_order_relaxed) == 0 && p->dq_head == NULL &&
        p->reasm == NULL && h->nfrags == 1 && h->am_id != TW_REL_BYE_AM &&
        tw_rel_may_deliver(rel, h->am_id)) {
        /* In order and alone: straight up from the transport's buffer,
         * by this thread, after the lock. Nobody delivers, so nobody
         * but lock holders touches dstate. Fragments held behind this
         * one are now in order: the deliverer looks at them after. */
        atomic_store_explicit(&p->dstate, TW_REL_DELIVERING | (p->nooo > 0 ? TW_REL_PENDING : 0),
                              memory_order_relaxed);
        tw_rel_ack_note(rel, p, peer, h, now);
        return true;
    }
    tw_rel_consume(rel, p, peer, h, uhdr, data, NULL);
    tw_rel_ack_note(rel, p, peer, h, now);
    if (tw_rel_deliverer_enter(p)) {
        tw_rel_drain(rel, p, peer, now);
        tw_rel_deliverer_leave(p);
    }
    return false;
}

/* The deliverer of a lone arrival handed it up without the lock: it
 * leaves, unless work was queued for it meanwhile -- then it hands that
 * up too. Lock not held. */
static void tw_rel_deliverer_exit(tw_rel_t *rel, tw_rel_peer_t *p, int peer)
{
    unsigned cur = TW_REL_DELIVERING;

    if (atomic_compare_exchange_strong_explicit(&p->dstate, &cur, 0, memory_order_acq_rel,
                                                memory_order_relaxed)) {
        return;
    }
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->dstate, TW_REL_DELIVERING, memory_order_relaxed); /* looking now */
    tw_rel_drain(rel, p, peer, p->clock_ns);
    tw_rel_deliverer_leave(p);
    pthread_mutex_unlock(&p->lock);
}

/* Transport arrival callback (recv_arg = the path). Thread: an engine. */
static void tw_rel_recv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                           const void *data, size_t len)
{
    tw_rel_path_t *path = arg;
    tw_rel_t *rel = path->rel;
    tw_rel_todo_t todo = {0};
    const char *why = "?";
    const unsigned char *uhdr;
    bool up = false;
    tw_rel_hdr_t h;
    tw_rel_peer_t *p;
    uint64_t now;

    if (src < 0 || src >= rel->size) {
        tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
        return;
    }
    p = &rel->peers[src];
    switch (tw_rel_parse(am_id, hdr, hdr_len, data, len, &h, &why)) {
    case TW_REL_PARSE_OK:
        break;
    case TW_REL_PARSE_CRC:
        tw_stats_inc(rel->stats, TW_REL_STAT_CRC_FAILURES);
        tw_debug("rel", "a frame from rank %d failed its checksum: dropped", src);
        /* Ask for what we lack at once (at most once per half RTO). */
        now = rel->clock();
        pthread_mutex_lock(&p->lock);
        if (!p->down && tw_rel_since(now, p->crc_nack_ns) >= rel->cfg.rto_ns / 2) {
            p->crc_nack_ns = now;
            (void)tw_rel_tx_ctrl(rel, p, src, TW_REL_T_NACK, -1, 0);
        }
        pthread_mutex_unlock(&p->lock);
        return;
    case TW_REL_PARSE_BAD:
        tw_stats_inc(rel->stats, TW_REL_STAT_BAD_FRAMES);
        if (tw_rel_should_log(rel)) {
            tw_warn("rel", "dropped a frame from rank %d: %s", src, why);
        }
        return;
    }
    if ((h.flags & TW_REL_F_SHORT) ? h.src_epoch != tw_rel_epochs(p->epoch, rel->epoch)
                                   : h.src_epoch != p->epoch || h.dst_epoch != rel->epoch) {
        tw_stats_inc(rel->stats, TW_REL_STAT_STALE);
        if (tw_rel_should_log(rel)) {
            tw_warn("rel", "dropped a frame from another incarnation of rank %d or of this rank",
                    src);
        }
        return;
    }
    pthread_mutex_lock(&p->lock);
    if (p->down) {
        pthread_mutex_unlock(&p->lock);
        tw_stats_inc(rel->stats, TW_REL_STAT_STALE);
        return;
    }
    /* A clock reading (17 ns here) only when this frame needs one
     * (tw_rel_now): a round-trip sample, a timer restart, a resend
     * decision, a control frame. */
    tw_rel_now_t t = {.ns = p->clock_ns, .read = false};
    if (h.type != TW_REL_T_DATA && h.type != TW_REL_T_ACK) {
        (void)tw_rel_now(rel, p, &t);
    }
    p->rx_path = (uint8_t)path->index;
    if (h.flags & TW_REL_F_ACK) {
        tw_rel_ack_apply(rel, p, &h, &t, &todo);
    }
    if (h.type == TW_REL_T_ACK && h.ack_bits != 0) {
        (void)tw_rel_now(rel, p, &t); /* for tw_rel_nack_apply below */
    }
    now = t.ns;
    p->last_rx_ns = TW_MAX(p->last_rx_ns, now);
    p->pings = 0;
    uhdr = (const unsigned char *)hdr + hdr_len - h.hdr_len;
    switch (h.type) {
    case TW_REL_T_DATA:
        up = tw_rel_data_arrived(rel, p, src, &h, uhdr, data, now);
        break;
    case TW_REL_T_NACK:
        tw_rel_nack_apply(rel, p, src, &h, now, &todo);
        break;
    case TW_REL_T_ACK:
        /* Selective acks past a gap say the same as a NACK (which may
         * itself have been lost). */
        if (h.ack_bits != 0) {
            tw_rel_nack_apply(rel, p, src, &h, now, &todo);
        }
        break;
    case TW_REL_T_PING:
        (void)tw_rel_tx_ctrl(rel, p, src, TW_REL_T_PONG, (int)path->index, h.seq);
        break;
    case TW_REL_T_PROBE:
        (void)tw_rel_tx_ctrl(rel, p, src, TW_REL_T_PROBE_ACK, (int)path->index, h.seq);
        break;
    case TW_REL_T_PROBE_ACK: {
        unsigned g = path->index;
        uint8_t bit = (uint8_t)(1u << g);
        if ((p->reach & bit) && !(p->up & bit) && !(p->dead & bit) &&
            ++p->probe_ok[g] >= (unsigned)rel->cfg.probes) {
            int was = tw_rel_cur_path(p);
            p->up |= bit;
            p->probe_ok[g] = 0;
            if (tw_rel_cur_path(p) != was) {
                tw_stats_inc(rel->stats, TW_REL_STAT_FAILBACKS);
                tw_warn("rel", "path %s to rank %d is healthy again: failing back",
                        path->iface->name, src);
            }
        }
        break;
    }
    default: /* ACK, PONG: the ack fields and last_rx were the point */
        break;
    }
    if (!p->down) {
        tw_rel_push(rel, p, src, now, t.read ? TW_REL_STAMP_READ : TW_REL_STAMP_EARLY, &todo);
    }
    if (up && p->down) {
        /* It failed on the way (a path refused the push): what it sent
         * and was not yet handed up is dropped. */
        tw_rel_deliverer_leave(p);
        up = false;
    } else if (up) {
        tw_rel_count(&p->n_delivered);
    }
    pthread_mutex_unlock(&p->lock);
    tw_rel_finish(rel, src, &todo);
    if (up) {
        rel->super.recv(rel->super.recv_arg, src, h.am_id, uhdr, h.hdr_len, data, h.len);
        tw_rel_deliverer_exit(rel, p, src);
    }
}

/* A frame a transport announced (rendezvous: tcp does so for large
 * frames of inline am ids) is pulled into a buffer of ours, then handled
 * like any arrival. Header and payload follow the struct. */
typedef struct tw_rel_pull {
    tw_tl_comp_t comp; /* first: the transport hands it back */
    tw_rel_path_t *path;
    int src;
    uint8_t am_id;
    size_t hdr_len;
    size_t len;
    size_t alloc_len;
    unsigned char bytes[];
} tw_rel_pull_t;

static void tw_rel_pull_done(tw_tl_comp_t *comp, tw_status_t status)
{
    tw_rel_pull_t *q = (tw_rel_pull_t *)comp;

    if (status == TW_OK) {
        tw_rel_recv_cb(q->path, q->src, q->am_id, q->bytes, q->hdr_len, q->bytes + q->hdr_len,
                       q->len);
    }
    tw_free(q, q->alloc_len);
}

static void tw_rel_released(tw_tl_comp_t *comp, tw_status_t status)
{
    (void)comp, (void)status;
}

static void tw_rel_rndv_cb(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                           size_t len, tw_tl_rndv_t *rndv)
{
    static tw_tl_comp_t ignore = {.cb = tw_rel_released};
    tw_rel_path_t *path = arg;
    tw_tl_iface_t *iface = path->iface;
    size_t alloc_len = sizeof(tw_rel_pull_t) + hdr_len + len;
    tw_rel_pull_t *q;

    /* Rel frames are never larger than a transport's short message. */
    if (len > TW_REL_MAX_SHORT || hdr_len > sizeof(tw_rel_hdr_t) + TW_REL_MAX_UHDR ||
        (q = tw_malloc(alloc_len)) == NULL) {
        tw_stats_inc(path->rel->stats, TW_REL_STAT_BAD_FRAMES);
        tw_warn("rel", "rank %d announced a %zu-byte frame: released unread", src, len);
        (void)tw_tl_rndv_get(iface, rndv, NULL, 0, &ignore);
        return;
    }
    *q = (tw_rel_pull_t){.comp = {.cb = tw_rel_pull_done},
                         .path = path,
                         .src = src,
                         .am_id = am_id,
                         .hdr_len = hdr_len,
                         .len = len,
                         .alloc_len = alloc_len};
    memcpy(q->bytes, hdr, hdr_len);
    tw_status_t st = tw_tl_rndv_get(iface, rndv, q->bytes + hdr_len, len, &q->comp);
    if (st != TW_OK) {
        q->comp.cb(&q->comp, st);
    }
}

/* A transport lost a peer (engine thread). */
static void tw_rel_peer_down_cb(void *arg, int peer, tw_status_t why)
{
    tw_rel_path_t *path = arg;
    tw_rel_t *rel = path->rel;
    tw_rel_todo_t todo = {0};
    tw_rel_peer_t *p;

    if (peer < 0 || peer >= rel->size) {
        return;
    }
    p = &rel->peers[peer];
    pthread_mutex_lock(&p->lock);
    if (!p->down) {
        uint8_t others = p->up & p->reach & (uint8_t) ~(1u << path->index);
        if (why == TW_OK && others == 0 && !p->left) {
            /* Its last path closed cleanly: it left (without a goodbye,
             * or the goodbye is still on its way on another path). */
            p->left = true;
            if (!p->reported) {
                p->reported = true;
                todo.report = true;
                todo.why = TW_OK;
            }
        }
        /* TW_ERR_TRANSPORT: the path is down for now (a port went down):
         * fail over and probe it; the transport takes sends again once it
         * is back, and the probes' answers bring the traffic back. */
        tw_rel_path_lost(rel, p, peer, (int)path->index, why != TW_ERR_TRANSPORT,
                         why == TW_OK ? "it closed" : tw_strerror(why), rel->clock(), &todo);
    }
    pthread_mutex_unlock(&p->lock);
    tw_rel_finish(rel, peer, &todo);
}

/* ---- the engine's pass -------------------------------------------------- */

/* Timers of one peer; returns its next deadline. Lock held. */
static uint64_t tw_rel_peer_tick(tw_rel_t *rel, tw_rel_peer_t *p, int peer, uint64_t now,
                                 int *events, tw_rel_todo_t *todo)
{
    uint64_t next = UINT64_MAX;

    p->clock_ns = TW_MAX(p->clock_ns, now);

restart:;
    /* One retransmission timer per peer, as TCP has: only the oldest
     * unacked fragment is resent on timeout (the others are likely held
     * behind it at the receiver, whose NACKs name the next gap), and an
     * ack that acknowledges something new restarts it. Fragments never
     * sent on the current path (after AGAIN, or a failover) go at once. */
    bool oldest = true;
    int cur = tw_rel_cur_path(p);
    for (uint32_t seq = p->snd_una; seq != p->snd_nxt && !p->down; seq++) {
        tw_rel_slot_t *s = &p->win[seq % TW_REL_WIN];
        if (s->msg == NULL || s->acked) {
            continue;
        }
        bool fresh = s->sent_ns == 0 || s->path != cur;
        if (!oldest && !fresh) {
            continue; /* waits for the oldest */
        }
        oldest = false;
        if (s->due_ns <= now && s->est && !fresh) {
            /* Sent at some time since sent_ns (TW_REL_STAMP_EARLY):
             * its timeout runs from now. */
            s->est = false;
            s->due_ns = now + s->rto_ns;
        } else if (s->due_ns <= now) {
            if (s->sent_ns != 0 && s->tries >= TW_REL_MIN_TRIES &&
                tw_rel_since(now, TW_MAX(s->first_ns, p->progress_ns)) >=
                    rel->cfg.path_timeout_ns) {
                tw_rel_path_lost(rel, p, peer, s->path, false, "retransmissions unanswered", now,
                                 todo);
                goto restart;
            }
            (*events)++;
            if (tw_rel_tx_data(rel, p, peer, s, seq, now, todo) == TW_ERR_AGAIN) {
                next = now;
                break;
            }
        }
        next = TW_MIN(next, s->due_ns);
    }
    if (p->down) {
        return UINT64_MAX;
    }
    tw_rel_push(rel, p, peer, now, TW_REL_STAMP_READ, todo);
    if (p->ack_due != 0) {
        if (p->ack_due <= now) {
            (*events)++;
            if (tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0) != TW_OK) {
                p->ack_due = now;
            }
        }
        if (p->ack_due != 0) {
            next = TW_MIN(next, p->ack_due);
        }
    }
    if (peer != rel->rank && !p->left) {
        uint64_t silent = tw_rel_since(now, p->last_rx_ns);
        /* Failed once silent that long with misses - 1 pings unanswered:
         * last_rx_ns may be an earlier reading than the frame's arrival
         * (tw_rel_now_t), so a pass after a long pause of progress
         * pings first. */
        if (silent >= rel->cfg.keepalive_ns * (uint64_t)rel->cfg.misses &&
            p->pings + 1 >= (unsigned)rel->cfg.misses) {
            char what[96];
            snprintf(what, sizeof(what), "silent for %llu ms (keepalive %llu ms x %d)",
                     (unsigned long long)(silent / 1000000),
                     (unsigned long long)(rel->cfg.keepalive_ns / 1000000), rel->cfg.misses);
            tw_rel_peer_fail(rel, p, peer, what, todo);
            return UINT64_MAX;
        }
        if (silent >= rel->cfg.keepalive_ns && now >= p->ping_due) {
            /* On every usable path: one that works is enough. */
            p->ping_due = now + rel->cfg.keepalive_ns;
            p->pings++;
            for (unsigned g = 0; g < rel->npaths; g++) {
                if ((p->reach & (uint8_t)~p->dead) >> g & 1 &&
                    tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_PING, (int)g, (uint32_t)(now >> 20)) ==
                        TW_OK) {
                    tw_stats_inc(rel->stats, TW_REL_STAT_PINGS);
                }
            }
        }
        next = TW_MIN(next, TW_MAX(p->last_rx_ns + rel->cfg.keepalive_ns, p->ping_due));
    }
    uint8_t probing = p->reach & (uint8_t)~p->up & (uint8_t)~p->dead;
    if (probing != 0) {
        if (now >= p->probe_due) {
            p->probe_due = now + rel->cfg.probe_ns;
            for (unsigned g = 0; g < rel->npaths; g++) {
                if (probing >> g & 1) {
                    (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_PROBE, (int)g, (uint32_t)g);
                }
            }
        }
        next = TW_MIN(next, p->probe_due);
    }
    return next;
}

/* The timer pass over every peer; returns events. Whoever wins the pass
 * flag runs it: the engine, or a waiting worker (tw_rel_poll). */
static int tw_rel_timers(tw_rel_t *rel, bool check)
{
    static TW_TLS const tw_rel_t *last;
    static TW_TLS unsigned skip;
    uint64_t now, next, armed;
    int events = 0;

    /* Callers spin on this: read the clock on every 8th call of a thread
     * for one rel only, or when told to (the engine woke: its timer may
     * have fired). */
    if (!check && last == rel && skip-- > 0) {
        return 0;
    }
    last = rel;
    skip = 7;
    now = rel->clock();
    if (now < atomic_load_explicit(&rel->next_due, memory_order_relaxed) ||
        atomic_flag_test_and_set_explicit(&rel->in_pass, memory_order_acquire)) {
        return 0;
    }
    /* The timer fired or is about to: it is armed for nothing now. */
    armed = atomic_load_explicit(&rel->armed_at, memory_order_relaxed);
    if (armed <= now + TW_REL_TIMER_SLACK) { /* for a deadline that has passed */
        (void)atomic_compare_exchange_strong_explicit(&rel->armed_at, &armed, UINT64_MAX,
                                                      memory_order_relaxed, memory_order_relaxed);
    }
    /* Peers' deadlines lower this again as the pass finds them. */
    next = now + TW_MIN(rel->cfg.keepalive_ns, rel->cfg.probe_ns);
    atomic_store_explicit(&rel->next_due, next, memory_order_relaxed);
    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        tw_rel_todo_t todo = {0};
        uint64_t due;

        if (p->reach == 0) {
            continue;
        }
        pthread_mutex_lock(&p->lock);
        due = tw_rel_peer_tick(rel, p, peer, now, &events, &todo);
        pthread_mutex_unlock(&p->lock);
        tw_rel_finish(rel, peer, &todo);
        if (due < next) {
            tw_rel_arm(rel, TW_MAX(due, now));
        }
    }
    tw_rel_timer_at(rel, atomic_load_explicit(&rel->next_due, memory_order_relaxed));
    atomic_flag_clear_explicit(&rel->in_pass, memory_order_release);
    return events;
}

static int tw_rel_progress(void *arg)
{
    tw_rel_t *rel = arg;
    int events = 0;

    /* The engine (or a manual-mode caller) spins on this: unless a
     * worker left messages to hand up, look at the timers (and whether
     * the engine woke: its timerfd may have fired) on every 16th pass
     * only -- a clock reading on every pass costs a spinning caller more
     * than the timers need, and a woken engine passes 16 times in
     * microseconds (its timerfd stays readable until read). */
    if ((++rel->passes & 15u) != 0 &&
        !atomic_load_explicit(&rel->drain_wanted, memory_order_relaxed)) {
        return 0;
    }
    uint64_t w = tw_pe_wakeups(rel->pe);
    bool woke = w != rel->wakeups;
    if (woke) {
        uint64_t ticks;
        rel->wakeups = w;
        if (read(rel->timer_fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN) {
            tw_debug("rel", "timer read: %s", strerror(errno));
        }
    }
    /* Messages a worker could not hand up (they run user code). */
    if (atomic_load_explicit(&rel->drain_wanted, memory_order_acquire) &&
        atomic_exchange_explicit(&rel->drain_wanted, false, memory_order_acq_rel)) {
        for (int peer = 0; peer < rel->size; peer++) {
            tw_rel_peer_t *p = &rel->peers[peer];
            pthread_mutex_lock(&p->lock);
            if (p->engine_drain && tw_rel_deliverer_enter(p)) {
                p->engine_drain = false;
                tw_rel_drain(rel, p, peer, rel->clock());
                tw_rel_deliverer_leave(p);
                events++;
            }
            pthread_mutex_unlock(&p->lock);
        }
    }
    return events + tw_rel_timers(rel, true);
}

/* ---- sending (the ops msg calls) ---------------------------------------- */

static uint32_t tw_rel_nfrags(const tw_rel_t *rel, size_t hdr_len, size_t len)
{
    size_t first = rel->frag_cap - hdr_len;

    if (len <= first) {
        return 1;
    }
    return (uint32_t)(1 + (len - first + rel->frag_cap - 1) / rel->frag_cap);
}

static void tw_rel_smsg_fill(const tw_rel_t *rel, tw_rel_smsg_t *m, size_t alloc_len, uint8_t am_id,
                             const void *hdr, size_t hdr_len, const void *data, size_t len,
                             bool copy, tw_tl_comp_t *comp)
{
    *m = (tw_rel_smsg_t){.comp = comp,
                         .data = copy ? m->bytes + TW_REL_ROOM + hdr_len : data,
                         .len = len,
                         .alloc_len = alloc_len,
                         .nfrags = tw_rel_nfrags(rel, hdr_len, len),
                         .hdr_len = (uint16_t)hdr_len,
                         .am_id = am_id};
    if (hdr_len > 0) {
        memcpy(m->bytes + TW_REL_ROOM, hdr, hdr_len);
    }
    if (copy && len > 0) {
        memcpy(m->bytes + TW_REL_ROOM + hdr_len, data, len);
    }
}

static tw_status_t tw_rel_post(tw_rel_t *rel, int peer, uint8_t am_id, const void *hdr,
                               size_t hdr_len, const void *data, size_t len, bool copy,
                               tw_tl_comp_t *comp, bool bye)
{
    size_t alloc_len = sizeof(tw_rel_smsg_t) + TW_REL_ROOM + hdr_len + (copy ? len : 0);
    tw_rel_todo_t todo = {0};
    tw_rel_peer_t *p;
    tw_rel_smsg_t *m;
    tw_status_t st = TW_OK;

    if (peer < 0 || peer >= rel->size || rel->peers[peer].reach == 0) {
        return TW_ERR_UNREACHABLE;
    }
    if (hdr_len > TW_REL_MAX_UHDR || len > TW_REL_MAX_MSG || (len > 0 && data == NULL)) {
        return TW_ERR_INVALID;
    }
    p = &rel->peers[peer];
    m = NULL;
    if (copy && hdr_len + len <= TW_REL_SMALL) {
        /* Small eager message: one lock for everything, the copy too
         * (at most TW_REL_SMALL bytes); checked before any allocation, so
         * a sender that retries against a stalled peer costs nothing. */
        alloc_len = sizeof(*m) + TW_REL_ROOM + TW_REL_SMALL;
        pthread_mutex_lock(&p->lock);
        if (p->down || (p->left && !bye)) {
            st = TW_ERR_PEER_FAILED;
        } else if (!bye && p->nmsgs >= (unsigned)rel->cfg.queue) {
            st = TW_ERR_AGAIN;
        } else if ((m = p->pool) != NULL) {
            p->pool = m->next;
            p->npool--;
        } else if ((m = tw_malloc(alloc_len)) == NULL) {
            st = TW_ERR_NOMEM;
        }
        if (st != TW_OK) {
            pthread_mutex_unlock(&p->lock);
            if (st == TW_ERR_AGAIN) {
                tw_stats_inc(rel->stats, TW_REL_STAT_AGAIN);
            } else if (st == TW_ERR_NOMEM) {
                tw_error("rel", "cannot allocate a %zu-byte send", alloc_len);
            }
            return st;
        }
        tw_rel_smsg_fill(rel, m, alloc_len, am_id, hdr, hdr_len, data, len, copy, comp);
    } else {
        if ((m = tw_malloc(alloc_len)) == NULL) {
            tw_error("rel", "cannot allocate a %zu-byte send", alloc_len);
            return TW_ERR_NOMEM;
        }
        tw_rel_smsg_fill(rel, m, alloc_len, am_id, hdr, hdr_len, data, len, copy, comp);
        pthread_mutex_lock(&p->lock);
        if (p->down || (p->left && !bye)) {
            st = TW_ERR_PEER_FAILED;
        } else if (!bye && p->nmsgs >= (unsigned)rel->cfg.queue) {
            st = TW_ERR_AGAIN;
        }
    }
    if (st == TW_OK) {
        /* A message in one fragment, with nothing queued before it and
         * room in the window, goes out first and takes its place in the
         * queue and its slot after: a hop's sending half is what comes
         * before the transport's publish. */
        uint32_t seq = p->snd_nxt;
        tw_status_t tx = TW_ERR_AGAIN;
        int g = -1;
        if (m->nfrags == 1 && p->q_head == NULL && seq - p->snd_una < TW_REL_WIN &&
            (g = tw_rel_cur_path(p)) >= 0) {
            tx = tw_rel_frame_tx(rel, p, peer, m, 0, seq, g);
        }
        if (p->q_tail != NULL) {
            p->q_tail->next = m;
        } else {
            p->q_head = m;
        }
        p->q_tail = m;
        p->nmsgs++;
        /* Behind earlier fragments the latest reading will do (only the
         * oldest one's deadline counts). A fragment that goes into an
         * empty window starts the peer's retransmission timer: with an
         * engine thread, that takes a clock reading (an early stamp
         * would wake the engine for nothing); without one (manual
         * progress), the peer's latest reading is its early stamp --
         * usually made a moment ago, by the arrival this send answers --
         * and the pass that finds it due times it from then on instead
         * of resending it. Every TW_REL_SAMPLE_EVERY-th such send still
         * reads the clock, for a round-trip sample. */
        bool empty = p->snd_una == p->snd_nxt;
        uint64_t now = p->clock_ns;
        tw_rel_stamp_t stamp = TW_REL_STAMP_LATEST;
        if (empty && !rel->timer_used && p->srtt_ns != 0 && ++p->untimed < TW_REL_SAMPLE_EVERY) {
            stamp = TW_REL_STAMP_EARLY;
        } else if (empty) {
            p->untimed = 0;
            now = rel->clock();
            p->clock_ns = TW_MAX(p->clock_ns, now);
            stamp = TW_REL_STAMP_READ;
        }
        if (tx == TW_OK) {
            tw_rel_slot_sent(rel, p, tw_rel_slot_take(rel, p, stamp), g, now);
        } else {
            /* Not sent (or not tried): the general way, which retries,
             * fails over, or leaves it to the timer pass. */
            tw_rel_push(rel, p, peer, now, stamp, &todo);
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (st != TW_OK) {
        if (st == TW_ERR_AGAIN) {
            tw_stats_inc(rel->stats, TW_REL_STAT_AGAIN);
        }
        tw_rel_smsg_free(m);
    }
    tw_rel_finish(rel, peer, &todo);
    return st;
}

static tw_status_t tw_rel_am_short(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                   size_t hdr_len, const void *data, size_t len)
{
    if (am_id == TW_REL_BYE_AM || hdr_len + len > iface->attr.max_short) {
        return TW_ERR_INVALID;
    }
    return tw_rel_post((tw_rel_t *)iface, peer, am_id, hdr, hdr_len, data, len, true, NULL, false);
}

static tw_status_t tw_rel_am_zcopy(tw_tl_iface_t *iface, int peer, uint8_t am_id, const void *hdr,
                                   size_t hdr_len, const void *data, size_t len, tw_tl_comp_t *comp)
{
    if (am_id == TW_REL_BYE_AM || comp == NULL) {
        return TW_ERR_INVALID;
    }
    return tw_rel_post((tw_rel_t *)iface, peer, am_id, hdr, hdr_len, data, len, false, comp, false);
}

static tw_status_t tw_rel_query(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return TW_OK;
}

static bool tw_rel_reachable(tw_tl_iface_t *iface, int peer)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    return peer >= 0 && peer < rel->size && rel->peers[peer].reach != 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

static uint64_t tw_rel_monotonic(void)
{
    return tw_time_ns();
}

/* Which paths reach @p peer (after they connected to it). */
static void tw_rel_find_paths(tw_rel_t *rel, int peer)
{
    tw_rel_peer_t *p = &rel->peers[peer];

    p->reach = 0;
    for (unsigned g = 0; g < rel->npaths; g++) {
        if (tw_tl_reachable(rel->paths[g].iface, peer)) {
            p->reach |= (uint8_t)(1u << g);
        }
    }
}

static tw_status_t tw_rel_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    tw_rel_addr_t a = {.version = TW_REL_ADDR_VERSION, .epoch = rel->epoch};

    if (cap < sizeof(a)) {
        return TW_ERR_NOMEM;
    }
    memcpy(buf, &a, sizeof(a));
    *len_p = sizeof(a);
    return TW_OK;
}

/* After the paths connected to @p peer: its incarnation, and its paths. */
static tw_status_t tw_rel_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    uint32_t epoch;

    if (peer < 0 || peer >= rel->size || peer == rel->rank ||
        !tw_rel_addr_parse(addr, len, &epoch)) {
        tw_error("rel", "rank %d published a malformed reliability address (%zu bytes)", peer, len);
        return TW_ERR_INVALID;
    }
    rel->peers[peer].epoch = epoch;
    tw_rel_find_paths(rel, peer);
    return TW_OK;
}

/* Every rank connected: the clocks start. Registered with the engine
 * already (tw_tl_pe_add_tree). */
static void tw_rel_ready(tw_tl_iface_t *iface)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    uint64_t now = rel->clock();

    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        p->up = p->reach;
        p->rx_path = (uint8_t)__builtin_ctz(p->reach | 0x80u);
        p->last_rx_ns = now;
        p->clock_ns = now;
        p->ping_due = now + rel->cfg.keepalive_ns;
    }
    /* In manual mode nobody sleeps on it: callers of tw_progress run
     * the passes. */
    rel->timer_used = tw_pe_has_thread(rel->pe);
    tw_rel_arm(rel, now + TW_MIN(rel->cfg.keepalive_ns, rel->cfg.probe_ns));
}

/* Say goodbye to every peer (in sequence, after all data) and wait up to
 * the keepalive bound for every peer to acknowledge everything sent,
 * driving the engine when it has no thread. */
static void tw_rel_quiesce(tw_tl_iface_t *iface)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    uint64_t timeout_ns = rel->cfg.keepalive_ns * (uint64_t)rel->cfg.misses;
    uint64_t deadline = rel->clock() + timeout_ns;
    tw_backoff_t b = TW_BACKOFF_INIT;

    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        if (peer == rel->rank || p->reach == 0) {
            continue;
        }
        (void)tw_rel_post(rel, peer, TW_REL_BYE_AM, NULL, 0, NULL, 0, true, NULL, true);
    }
    for (;;) {
        bool busy = false;
        for (int peer = 0; peer < rel->size && !busy; peer++) {
            tw_rel_peer_t *p = &rel->peers[peer];
            pthread_mutex_lock(&p->lock);
            /* A peer that said goodbye has finalized: nothing we still
             * owe it would be received. */
            busy = !p->down && !p->left && p->nmsgs > 0;
            pthread_mutex_unlock(&p->lock);
        }
        if (!busy) {
            break;
        }
        if (rel->clock() >= deadline) {
            tw_warn("rel", "finalize: some peers did not acknowledge everything in %llu ms",
                    (unsigned long long)(timeout_ns / 1000000));
            break;
        }
        if (!tw_pe_has_thread(rel->pe)) {
            tw_pe_progress(rel->pe);
        }
        tw_backoff_wait(&b);
    }
    /* What we owe our peers' last fragments. */
    for (int peer = 0; peer < rel->size; peer++) {
        tw_rel_peer_t *p = &rel->peers[peer];
        pthread_mutex_lock(&p->lock);
        if (!p->down && p->reach != 0 && (p->ack_owed > 0 || p->ack_due != 0)) {
            (void)tw_rel_tx_ctrl(rel, p, peer, TW_REL_T_ACK, -1, 0);
        }
        pthread_mutex_unlock(&p->lock);
    }
}

/* A waiting worker polls the paths: arrivals are handled here, messages
 * that run user code are left to an engine. */
static int tw_rel_poll(tw_tl_iface_t *iface)
{
    tw_rel_t *rel = (tw_rel_t *)iface;
    int events = 0;

    tw_rel_in_worker = true;
    for (unsigned g = 0; g < rel->npaths; g++) {
        tw_tl_iface_t *path = rel->paths[g].iface;
        if (path->caps & TW_TL_CAP_POLL) {
            events += tw_tl_poll(path);
        }
    }
    events += tw_rel_timers(rel, false);
    tw_rel_in_worker = false;
    return events;
}

static int tw_rel_progress_op(tw_tl_iface_t *iface)
{
    return tw_rel_progress(iface);
}

static tw_status_t tw_rel_wrap_wants(const tw_tl_params_t *params, const tw_tl_iface_t *inner,
                                     bool *wants_p)
{
    (void)inner;
    *wants_p = (params->features & TW_TL_FEATURE_RELIABLE) != 0;
    return TW_OK;
}

static tw_status_t tw_rel_wrap_open(tw_tl_iface_t *const *inner, unsigned n,
                                    const tw_tl_params_t *params, tw_tl_iface_t **iface_p)
{
    return tw_rel_wrap(inner, n, params, NULL, iface_p);
}

static void tw_rel_iface_close(tw_tl_iface_t *iface);

const tw_tl_ops_t tw_rel_ops = {
    .name = "rel",
    .caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY | TW_TL_CAP_POLL | TW_TL_CAP_WRAPPER |
            TW_TL_CAP_WRAP_ALL | TW_TL_CAP_JOB_WIDE,
    .cfg = &tw_rel_cfg_table,
    .query = tw_rel_query,
    .iface_open = tw_tl_stub_iface_open,
    .wrap_wants = tw_rel_wrap_wants,
    .wrap_open = tw_rel_wrap_open,
    .iface_close = tw_rel_iface_close,
    .bind = tw_tl_iface_bind,
    .addr_pack = tw_rel_addr_pack,
    .addr_connect = tw_rel_addr_connect,
    .ready = tw_rel_ready,
    .quiesce = tw_rel_quiesce,
    .reachable = tw_rel_reachable,
    .am_short = tw_rel_am_short,
    .am_zcopy = tw_rel_am_zcopy,
    .put_zcopy = tw_tl_stub_put_zcopy,
    .get_zcopy = tw_tl_stub_get_zcopy,
    .flush = tw_tl_stub_flush,
    .rndv_get = tw_tl_stub_rndv_get,
    .progress = tw_rel_progress_op,
    .poll = tw_rel_poll,
    .mem_reg = tw_tl_stub_mem_reg,
    .mem_dereg = tw_tl_stub_mem_dereg,
};

static void tw_rel_destroy(tw_rel_t *rel);

/* Its settings, and the one fragment size every path carries. */
static tw_status_t tw_rel_configure(tw_rel_t *rel, tw_tl_iface_t *const *paths, unsigned n,
                                    const tw_rel_opts_t *opts)
{
    size_t cap = TW_REL_MAX_SHORT;

    if (opts != NULL && opts->cfg != NULL) {
        rel->cfg = *opts->cfg;
    } else {
        tw_cfg_set_defaults(&tw_rel_cfg_table, &rel->cfg);
        if (tw_cfg_apply_env(&tw_rel_cfg_table, &rel->cfg) != TW_OK) {
            return TW_ERR_INVALID;
        }
    }
    if (rel->cfg.rto_ns == 0 || rel->cfg.rto_max_ns < rel->cfg.rto_ns ||
        rel->cfg.keepalive_ns == 0 || rel->cfg.probe_ns == 0) {
        tw_error("rel", "TW_REL_RTO must be > 0 and <= TW_REL_RTO_MAX; TW_REL_KEEPALIVE and "
                        "TW_REL_PROBE > 0");
        return TW_ERR_INVALID;
    }
    if (n == 0 || n > TW_REL_MAX_PATHS) {
        tw_error("rel", "%u paths: want 1..%d", n, TW_REL_MAX_PATHS);
        return TW_ERR_INVALID;
    }
    for (unsigned g = 0; g < n; g++) {
        cap = TW_MIN(cap, paths[g]->attr.max_short);
    }
    if (cap < sizeof(tw_rel_hdr_t) + TW_REL_MAX_UHDR + 256) {
        tw_error("rel",
                 "a transport's largest short message (%zu bytes) is too small to carry "
                 "reliable fragments",
                 cap);
        return TW_ERR_UNSUPPORTED;
    }
    rel->frag_cap = cap - sizeof(tw_rel_hdr_t);
    return TW_OK;
}

/* Take path @p g over: its arrivals and failures come to rel, and a
 * waiting worker may take rel's frames in (tw_rel_poll) -- but a path that
 * delivers on the sending thread (self) gets none, since rel calls its
 * paths with a peer's lock held. */
static void tw_rel_take_path(tw_rel_t *rel, unsigned g, tw_tl_iface_t *iface,
                             const tw_tl_params_t *params)
{
    tw_tl_params_t up = *params;

    rel->paths[g] = (tw_rel_path_t){.rel = rel, .iface = iface, .index = g};
    rel->inner[g] = iface;
    up.recv = tw_rel_recv_cb;
    up.recv_arg = &rel->paths[g];
    up.recv_rndv = tw_rel_rndv_cb;
    up.peer_down = tw_rel_peer_down_cb;
    up.peer_down_arg = &rel->paths[g];
    up.inline_am_ids = (iface->caps & TW_TL_CAP_INLINE_SEND) ? 0 : TW_REL_AM_MASK;
    up.am_class = tw_rel_am_class;
    tw_tl_bind(iface, &up);
}

tw_status_t tw_rel_wrap(tw_tl_iface_t *const *paths, unsigned n, const tw_tl_params_t *params,
                        const tw_rel_opts_t *opts, tw_tl_iface_t **iface_p)
{
    tw_rel_t *rel = tw_calloc(1, sizeof(*rel));
    uint32_t caps = TW_TL_CAP_AM_SHORT | TW_TL_CAP_AM_ZCOPY;
    tw_status_t st = TW_ERR_NOMEM;

    if (rel == NULL) {
        return TW_ERR_NOMEM;
    }
    rel->timer_fd = -1;
    st = tw_rel_configure(rel, paths, n, opts);
    if (st != TW_OK) {
        goto err;
    }
    st = TW_ERR_NOMEM;
    rel->clock = opts != NULL && opts->clock != NULL ? opts->clock : tw_rel_monotonic;
    rel->rank = params->rank;
    rel->size = params->size;
    rel->pe = params->pe;
    atomic_init(&rel->next_due, UINT64_MAX);
    atomic_init(&rel->armed_at, UINT64_MAX);
    atomic_flag_clear(&rel->in_pass);
    atomic_init(&rel->drain_wanted, false);
    pthread_mutex_init(&rel->arm_lock, NULL);
    atomic_init(&rel->logged, 0);
    do {
        if (getrandom(&rel->epoch, sizeof(rel->epoch), 0) != (ssize_t)sizeof(rel->epoch)) {
            rel->epoch = (uint32_t)(tw_time_ns() ^ ((uint64_t)getpid() << 16));
        }
    } while (rel->epoch == 0);
    rel->stats = tw_stats_create("rel", tw_rel_stat_descs, TW_REL_STAT_COUNT);
    rel->peers = tw_calloc((size_t)rel->size, sizeof(*rel->peers));
    if (rel->stats == NULL || rel->peers == NULL) {
        goto err;
    }
    for (int i = 0; i < rel->size; i++) {
        tw_rel_peer_t *p = &rel->peers[i];
        pthread_mutex_init(&p->lock, NULL);
        p->snd_una = p->snd_nxt = p->rcv_nxt = (uint32_t)rel->cfg.seq_start;
        p->epoch = i == rel->rank ? rel->epoch : 0;
    }
    tw_stats_set_source(rel->stats, tw_rel_stats_source, rel);
    rel->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (rel->timer_fd < 0) {
        tw_error("rel", "cannot make a timer: %s", strerror(errno));
        st = TW_ERR_TRANSPORT;
        goto err;
    }
    st = tw_pe_watch(rel->pe, rel->timer_fd); /* logs its failure */
    if (st != TW_OK) {
        goto err;
    }
    /* Nothing fails from here on: the paths become rel's. */
    rel->npaths = n;
    for (unsigned g = 0; g < n; g++) {
        tw_rel_take_path(rel, g, paths[g], params);
        caps |= paths[g]->caps & TW_TL_CAP_POLL;
    }
    tw_tl_wrapper_init(&rel->super, &tw_rel_ops, params, caps, rel->stats, rel->inner, n);
    rel->super.attr = (tw_tl_attr_t){
        .max_short = TW_REL_MAX_SHORT, .max_hdr = TW_REL_MAX_UHDR, .max_zcopy = TW_REL_MAX_MSG};
    tw_rel_find_paths(rel, rel->rank); /* our own: no address exchange */
    *iface_p = &rel->super;
    return TW_OK;

err:
    tw_rel_destroy(rel);
    return st;
}

uint32_t tw_rel_epoch(const tw_tl_iface_t *iface)
{
    return ((const tw_rel_t *)(const void *)iface)->epoch;
}

void tw_rel_inject(tw_tl_iface_t *iface, unsigned index, int src, uint8_t am_id, const void *hdr,
                   size_t hdr_len, const void *data, size_t len)
{
    tw_rel_t *rel = (tw_rel_t *)iface;

    tw_rel_recv_cb(&rel->paths[index], src, am_id, hdr, hdr_len, data, len);
}

/* Fail what is left (TW_ERR_CANCELED) and free: after the paths closed. */
static void tw_rel_destroy(tw_rel_t *rel)
{
    if (rel == NULL) {
        return;
    }
    if (rel->peers != NULL) {
        for (int peer = 0; peer < rel->size; peer++) {
            tw_rel_peer_t *p = &rel->peers[peer];
            tw_rel_todo_t todo = {0};
            pthread_mutex_lock(&p->lock);
            p->left = true; /* no report: we are the ones leaving */
            tw_rel_peer_fail(rel, p, peer, "finalized", &todo);
            while (p->dq_head != NULL) {
                tw_rel_held_t *d = p->dq_head;
                p->dq_head = d->next;
                tw_rel_held_free(d);
            }
            while (p->pool != NULL) {
                tw_rel_smsg_t *m = p->pool;
                p->pool = m->next;
                tw_rel_smsg_free(m);
            }
            pthread_mutex_unlock(&p->lock);
            for (tw_rel_smsg_t *m = todo.done; m != NULL; m = m->next) {
                m->status = TW_ERR_CANCELED;
            }
            todo.report = false;
            tw_rel_finish(rel, peer, &todo);
            pthread_mutex_destroy(&p->lock);
        }
        tw_free(rel->peers, (size_t)rel->size * sizeof(*rel->peers));
    }
    if (rel->timer_fd >= 0) {
        tw_pe_unwatch(rel->pe, rel->timer_fd);
        close(rel->timer_fd);
    }
    pthread_mutex_destroy(&rel->arm_lock);
    if (rel->stats != NULL) {
        tw_stats_destroy(rel->stats);
    }
    tw_free(rel, sizeof(*rel));
}

static void tw_rel_iface_close(tw_tl_iface_t *iface)
{
    tw_rel_destroy((tw_rel_t *)iface);
}
