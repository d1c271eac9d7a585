/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A scripted fake transport for unit tests and benchmarks: a loopback
 * between the endpoints -- (rank, path) -- of one process. A send copies
 * the frame onto an in-memory wire; nothing moves until the test pumps
 * it (twt_fake_pump), so the test decides what happens to every frame,
 * and when:
 *
 *   twt_fake_t w;
 *   twt_fake_init(&w, 2, &attr);                   both ranks, one wire
 *   twt_fake_open(&w, 0, &params_of_rank_r, &iface);   path 0, per rank
 *   ... wrap the ifaces (rel, lossy), send ...
 *   w.on_deliver = my_hook;                        drop / hold / dup ...
 *   twt_fake_pump(&w);                             deliver what is queued
 *   tw_tl_close(...); twt_fake_cleanup(&w);
 *
 * Per frame, two hooks may decide its fate (twt_fake_fate_t): on_send,
 * inside am_short, after the frame was copied (it may also refuse the
 * send with back-pressure), and on_deliver, as the pump takes the frame
 * off the wire. A hook may corrupt the frame (twt_fake_flip_bit), keep a
 * copy for a replay later (twt_fake_copy), or hold the frame itself; a
 * held frame is the test's until it goes back on the wire
 * (twt_fake_release: reordering), is delivered at once (twt_fake_deliver:
 * even from inside an upcall) or is lost (twt_fake_discard). Per endpoint,
 * fields the test sets refuse its sends with a status (a path down for
 * now), lose what it sends (dark: a path gone silent) or what comes to it
 * (deaf); counters say what went where.
 *
 * The table (twt_fake_ops) is a transport like the others: `static const`,
 * every slot filled (the shared stubs for what it lacks: it has am_short
 * only), tw_tl_caps_consistent accepts it. Frames are recycled, so a send
 * costs a copy and no allocation once the wire is warm (bench/ measures
 * the layers above over it); in ASan builds the bytes of a frame beyond
 * its length, and of a recycled frame, are poisoned, so a layer that
 * reads past a frame or keeps a pointer into one after its upcall
 * returned is caught as it would be over a real transport.
 *
 * Misuse (a send beyond the iface's attr, a hook's impossible answer)
 * fails the program through TWT_CHECK: it is the caller's bug.
 *
 * Thread: everything here runs on the one thread that drives the test
 * (the wire, its counters and its hooks are not shared); a test that
 * sends from several threads needs a real transport.
 */
#ifndef TW_FAKE_TL_H
#define TW_FAKE_TL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transports/base/tw_tl.h"

#define TWT_FAKE_RANKS 8 /* ranks with endpoints on one wire */
#define TWT_FAKE_PATHS 4 /* endpoints per rank (rel's paths) */

/** One frame on the wire (or held by the test). The test may change
 * bytes (corruption) but not the lengths. */
typedef struct twt_fake_frame twt_fake_frame_t;
struct twt_fake_frame {
    twt_fake_frame_t *next; /* the wire's queue, or the free list */
    twt_fake_frame_t *all;  /* every frame the wire made (cleanup frees them) */
    int src, dst, path;
    uint8_t am_id;
    uint8_t cls; /* tw_tl_frame_class_t, from the sender's am_class */
    size_t hdr_len, len;
    unsigned char *bytes; /* the header, then the payload */
};

/** What becomes of a frame, as a hook decides. */
typedef enum twt_fake_fate {
    TWT_FAKE_PASS,  /* on_send: onto the wire; on_deliver: handed to its endpoint */
    TWT_FAKE_DROP,  /* lost (counted in dropped; a send is still TW_OK) */
    TWT_FAKE_HOLD,  /* the test's now: twt_fake_release / _deliver / _discard it */
    TWT_FAKE_DUP,   /* as PASS, and a copy onto the wire behind everything queued */
    TWT_FAKE_AGAIN, /* on_send only: the send is refused with TW_ERR_AGAIN */
} twt_fake_fate_t;

typedef twt_fake_fate_t (*twt_fake_hook_fn_t)(void *arg, twt_fake_frame_t *f);

/** One end of the wire: a rank's iface on one path. */
typedef struct twt_fake_ep {
    tw_tl_iface_t *iface; /* NULL until twt_fake_open, and after its close */
    /* Set by the test. */
    tw_status_t refuse; /* not TW_OK: its sends are refused with it */
    bool dark;          /* what it sends is lost (the sends succeed) */
    bool deaf;          /* what comes to it is lost */
    /* Counters. */
    uint64_t sent[TW_TL_FRAME_NCLASSES]; /* sends it took, by frame class (dark ones too) */
    uint64_t refused;                    /* sends refused (refuse, AGAIN, a full wire) */
    uint64_t received;                   /* frames handed up to its iface */
} twt_fake_ep_t;

typedef struct twt_fake {
    /* Set by twt_fake_init; the test may change them before traffic. */
    int size;            /* ranks with endpoints (<= TWT_FAKE_RANKS) */
    tw_tl_attr_t attr;   /* every endpoint's */
    unsigned max_frames; /* frames queued at once before sends get TW_ERR_AGAIN; 0: no bound */
    /* Hooks (NULL: every frame passes), with their argument. */
    twt_fake_hook_fn_t on_send;
    twt_fake_hook_fn_t on_deliver;
    void *hook_arg;
    twt_fake_ep_t ep[TWT_FAKE_RANKS][TWT_FAKE_PATHS];
    /* Counters over the whole wire. */
    uint64_t delivered;  /* frames handed up */
    uint64_t dropped;    /* lost: DROP, dark, deaf, discarded */
    uint64_t duplicated; /* copies DUP made */
    uint64_t corrupted;  /* bits flipped */
    uint64_t stray;      /* frames for a rank or path with no endpoint (lost) */
    unsigned held;       /* frames the test holds now (HOLD, twt_fake_copy) */
    unsigned queued;     /* frames on the wire now */
    /* The wire (internal). */
    twt_fake_frame_t *head, *tail, *free, *all;
} twt_fake_t;

/** The ops table (name "fake", caps TW_TL_CAP_AM_SHORT). Open its ifaces
 * with twt_fake_open: iface_open alone does not know the wire. */
extern const tw_tl_ops_t twt_fake_ops;

/** An empty wire for ranks 0 .. @p size - 1 whose endpoints have @p attr
 * (attr->max_short bounds every frame). */
void twt_fake_init(twt_fake_t *w, int size, const tw_tl_attr_t *attr);
/** Free every frame (queued, held or recycled). Close the ifaces first. */
void twt_fake_cleanup(twt_fake_t *w);

/** Open the endpoint (@p params->rank, @p path) through twt_fake_ops:
 * TW_OK, TW_ERR_INVALID (out of range, or open already), TW_ERR_NOMEM.
 * The iface closes as any other (tw_tl_close). */
tw_status_t twt_fake_open(twt_fake_t *w, int path, const tw_tl_params_t *params,
                          tw_tl_iface_t **iface_p);

/** Take frames off the wire in order (through on_deliver) until it is
 * empty, frames queued meanwhile (replies sent from upcalls) included.
 * Returns how many it took. */
unsigned twt_fake_pump(twt_fake_t *w);

/** Put a frame from @p src (which needs no endpoint: a forged or foreign
 * frame) to (@p dst, @p path) on the wire, past every send check and
 * on_send. TW_OK, TW_ERR_INVALID (larger than attr.max_short). */
tw_status_t twt_fake_inject(twt_fake_t *w, int src, int dst, int path, uint8_t am_id,
                            const void *hdr, size_t hdr_len, const void *data, size_t len);

/** A held copy of @p f (a replay for later). */
twt_fake_frame_t *twt_fake_copy(twt_fake_t *w, const twt_fake_frame_t *f);
/** A held frame goes back on the wire, behind everything queued. */
void twt_fake_release(twt_fake_t *w, twt_fake_frame_t *f);
/** A held frame is handed to its endpoint now (no hook), then recycled.
 * May run inside an upcall: a frame that arrives while another is being
 * handed up. */
void twt_fake_deliver(twt_fake_t *w, twt_fake_frame_t *f);
/** A held frame is lost (counted in dropped). */
void twt_fake_discard(twt_fake_t *w, twt_fake_frame_t *f);
/** Flip bit @p bit of @p f's bytes (header first, then payload); counted. */
void twt_fake_flip_bit(twt_fake_t *w, twt_fake_frame_t *f, size_t bit);

/** The transport under (@p rank, @p path) tells the layer above that
 * @p peer is down through it (tw_tl_peer_down_fn_t, with @p why). */
void twt_fake_report_down(twt_fake_t *w, int rank, int path, int peer, tw_status_t why);

#endif /* TW_FAKE_TL_H */
