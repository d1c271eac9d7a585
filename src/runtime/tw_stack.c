/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The stack: select -> open -> wrap -> exchange -> route, from the ops
 * tables alone (tw_tl.h): the runtime knows no transport by name.
 *
 *  select    every transport of tw_tl_all that is always on, or wanted
 *            (TW_TRANSPORTS: named; empty: every one not opt-in) and
 *            usable here; a job of one needs only what is always on;
 *  open      each one, with the layer above's callbacks (msg) and the job;
 *  wrap      the wrappers of tw_tl_wrappers (over single transports:
 *            fault injection), then the layers of tw_stack_layers
 *            (beside the transports: routing through node leaders, one
 *            more root that sends through them; over all of them:
 *            reliability), each where its wrap_wants says;
 *            the roots of the trees that result are impl->tops, in
 *            routing order, and every iface is registered with its engine;
 *  exchange  every iface's address entry, inner ifaces first, into one
 *            blob (tw_addr_proto.h) through the launcher; a fence; every
 *            peer's blob checked (it runs the job-wide layers we run, and
 *            no other) before any is used; then each peer's entries handed
 *            to our ifaces of the same name, inner ifaces first (a wrapper
 *            finds its paths connected); a second fence, after which
 *            transports may drop what only connecting needed;
 *  route     each peer through the first root that reaches it.
 */
#include <string.h>

#include "coll/tw_coll.h"
#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "reliability/tw_rel.h"
#include "routing/tw_route.h"
#include "runtime/tw_addr_proto.h"
#include "runtime/tw_bootstrap.h"
#include "runtime/tw_context_int.h"

/* Beside the transports: node-leader routing; over every transport (and
 * the routing): reliability. */
const tw_tl_ops_t *const tw_stack_layers[] = {&tw_route_ops, &tw_rel_ops, NULL};

/* A wrapper or layer of that name, or NULL. */
static const tw_tl_ops_t *tw_stack_find_layer(const char *name)
{
    const tw_tl_ops_t *const *lists[] = {tw_tl_wrappers, tw_stack_layers};

    for (size_t l = 0; l < TW_ARRAY_SIZE(lists); l++) {
        for (size_t i = 0; lists[l][i] != NULL; i++) {
            if (strcmp(lists[l][i]->name, name) == 0) {
                return lists[l][i];
            }
        }
    }
    return NULL;
}

static tw_status_t tw_stack_check_name(const char *t)
{
    const tw_tl_ops_t *ops = tw_tl_find(t);
    char buf[256] = "";

    if (ops != NULL) {
        if (tw_tl_query(ops, buf, sizeof(buf)) != TW_OK) {
            tw_error("init", "transport '%s' in TW_TRANSPORTS is not usable here: %s", t, buf);
            return TW_ERR_UNSUPPORTED;
        }
        return TW_OK;
    }
    ops = tw_stack_find_layer(t);
    if (ops != NULL) {
        for (size_t i = 0; ops->cfg != NULL && i < ops->cfg->count; i++) {
            size_t n = strlen(buf);
            snprintf(buf + n, sizeof(buf) - n, "%s%s", n > 0 ? ", " : "",
                     ops->cfg->entries[i].name);
        }
        tw_error("init",
                 "'%s' in TW_TRANSPORTS is a layer over the transports, not a transport: "
                 "its own settings turn it on (%s)",
                 t, buf[0] != '\0' ? buf : "see tw_info");
        return TW_ERR_INVALID;
    }
    for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
        size_t n = strlen(buf);
        snprintf(buf + n, sizeof(buf) - n, "%s%s", n > 0 ? ", " : "", tw_tl_all[i]->name);
    }
    tw_error("init", "unknown transport '%s' in TW_TRANSPORTS (known: %s)", t, buf);
    return TW_ERR_INVALID;
}

tw_status_t tw_stack_check_list(const char *list)
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        tw_status_t st = tw_stack_check_name(t);
        if (st != TW_OK) {
            return st;
        }
    }
    return TW_OK;
}

/* ---- select, open, wrap ----------------------------------------------------- */

static bool tw_stack_wanted(const tw_ctx_impl_t *impl, const tw_tl_ops_t *ops)
{
    if (ops->caps & TW_TL_CAP_ALWAYS_ON) {
        return true;
    }
    if (impl->size == 1) {
        return false; /* a job of one needs only what is always on */
    }
    if (impl->cfg.transports[0] == '\0') {
        return (ops->caps & TW_TL_CAP_OPT_IN) == 0;
    }
    return tw_cfg_list_has(impl->cfg.transports, ops->name, NULL);
}

static tw_status_t tw_stack_open(tw_ctx_impl_t *impl, const tw_tl_params_t *up)
{
    char why[256];

    for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
        const tw_tl_ops_t *ops = tw_tl_all[i];
        tw_tl_iface_t *iface;
        tw_status_t st;

        if (!tw_stack_wanted(impl, ops)) {
            continue;
        }
        why[0] = '\0';
        if (tw_tl_query(ops, why, sizeof(why)) != TW_OK) {
            tw_debug("init", "transport %s unavailable: %s", ops->name, why);
            continue;
        }
        if (impl->ntop == TW_CTX_MAX_TL) {
            tw_error("init", "more than %d transports", TW_CTX_MAX_TL);
            return TW_ERR_INVALID;
        }
        st = tw_tl_iface_open(ops, up, &iface);
        if (st != TW_OK) {
            tw_error("init", "cannot open transport %s: %s", ops->name, tw_strerror(st));
            return st;
        }
        impl->tops[impl->ntop++] = iface;
    }
    return TW_OK;
}

/* Put wrapper @p w over the roots it wants: one over each, or (WRAP_ALL)
 * one over all of them, in the place of the first. */
static tw_status_t tw_stack_wrap(tw_ctx_impl_t *impl, const tw_tl_params_t *up,
                                 const tw_tl_ops_t *w)
{
    tw_tl_iface_t *sel[TW_CTX_MAX_TL], *iface;
    bool wants[TW_CTX_MAX_TL];
    unsigned n = 0, k = 0;
    tw_status_t st;

    for (unsigned i = 0; i < impl->ntop; i++) {
        st = tw_tl_wrap_wants(w, up, impl->tops[i], &wants[i]);
        if (st != TW_OK) {
            return st;
        }
        if (wants[i]) {
            sel[n++] = impl->tops[i];
        }
    }
    if (n == 0) {
        return TW_OK;
    }
    if (w->caps & TW_TL_CAP_BESIDE) {
        if (impl->ntop == TW_CTX_MAX_TL) {
            tw_error("init", "more than %d transports", TW_CTX_MAX_TL);
            return TW_ERR_INVALID;
        }
        st = tw_tl_wrap_open(w, sel, n, up, &iface);
        if (st != TW_OK) {
            tw_error("init", "cannot open %s beside the transports: %s", w->name, tw_strerror(st));
            return st;
        }
        if (iface->caps & TW_TL_CAP_FIRST) {
            memmove(&impl->tops[1], &impl->tops[0], impl->ntop * sizeof(impl->tops[0]));
            impl->tops[0] = iface;
        } else {
            impl->tops[impl->ntop] = iface;
        }
        impl->ntop++;
        return TW_OK;
    }
    if ((w->caps & TW_TL_CAP_WRAP_ALL) == 0) {
        for (unsigned i = 0; i < impl->ntop; i++) {
            if (wants[i]) {
                st = tw_tl_wrap_open(w, &impl->tops[i], 1, up, &iface);
                if (st != TW_OK) {
                    tw_error("init", "cannot open %s over %s: %s", w->name,
                             impl->tops[i]->ops->name, tw_strerror(st));
                    return st;
                }
                impl->tops[i] = iface;
            }
        }
        return TW_OK;
    }
    st = tw_tl_wrap_open(w, sel, n, up, &iface);
    if (st != TW_OK) {
        tw_error("init", "cannot open %s over the transports: %s", w->name, tw_strerror(st));
        return st;
    }
    for (unsigned i = 0, first = 1; i < impl->ntop; i++) {
        if (!wants[i]) {
            impl->tops[k++] = impl->tops[i];
        } else if (first) {
            impl->tops[k++] = iface;
            first = 0;
        }
    }
    impl->ntop = k;
    return TW_OK;
}

tw_status_t tw_stack_build(tw_ctx_impl_t *impl, const tw_tl_params_t *up)
{
    const tw_tl_ops_t *const *lists[] = {tw_tl_wrappers, tw_stack_layers};
    tw_status_t st = tw_stack_open(impl, up);

    for (size_t l = 0; st == TW_OK && l < TW_ARRAY_SIZE(lists); l++) {
        for (size_t i = 0; st == TW_OK && lists[l][i] != NULL; i++) {
            st = tw_stack_wrap(impl, up, lists[l][i]);
        }
    }
    for (unsigned i = 0; st == TW_OK && i < impl->ntop; i++) {
        st = tw_tl_pe_add_tree(impl->tops[i]);
    }
    return st;
}

/* ---- exchange --------------------------------------------------------------- */

static int tw_stack_pack_one(tw_tl_iface_t *iface, void *arg)
{
    tw_addr_writer_t *w = arg;
    uint8_t flags = (iface->ops->caps & TW_TL_CAP_JOB_WIDE) ? TW_ADDR_F_JOB_WIDE : 0;
    size_t room = 0, len = 0;
    void *at = tw_addr_reserve(w, iface->ops->name, flags, &room);
    tw_status_t st;

    if (at == NULL) {
        tw_error("init", "transport addresses do not fit the %u-byte bootstrap blob",
                 TW_BOOTSTRAP_BLOB_MAX);
        return TW_ERR_BOOTSTRAP;
    }
    st = tw_tl_addr_pack(iface, at, room, &len);
    if (st != TW_OK || len > room) {
        tw_error("init", "transport %s cannot pack its address", iface->ops->name);
        return TW_ERR_BOOTSTRAP;
    }
    if (len == 0 && flags == 0) {
        tw_addr_cancel(w); /* nothing to say */
    } else {
        tw_addr_commit(w, len);
    }
    return 0;
}

/* Connecting to one peer: its entries, and which of them an iface took. */
typedef struct tw_stack_peer {
    int peer;
    tw_addr_entry_t e[TW_ADDR_ENTRIES];
    bool used[TW_ADDR_ENTRIES];
    unsigned n;
} tw_stack_peer_t;

static int tw_stack_connect_one(tw_tl_iface_t *iface, void *arg)
{
    tw_stack_peer_t *c = arg;
    tw_status_t st;

    for (unsigned i = 0; i < c->n; i++) {
        if (!c->used[i] && strcmp(c->e[i].name, iface->ops->name) == 0) {
            c->used[i] = true;
            st = tw_tl_addr_connect(iface, c->peer, c->e[i].addr, c->e[i].len);
            if (st != TW_OK) {
                tw_error("init", "transport %s cannot connect to rank %d: %s", iface->name, c->peer,
                         tw_strerror(st));
                return st;
            }
            return 0;
        }
    }
    return 0;
}

/* A job-wide iface of ours the peer lacks. */
static int tw_stack_agree_one(tw_tl_iface_t *iface, void *arg)
{
    tw_stack_peer_t *c = arg;

    if ((iface->ops->caps & TW_TL_CAP_JOB_WIDE) == 0) {
        return 0;
    }
    for (unsigned i = 0; i < c->n; i++) {
        if (strcmp(c->e[i].name, iface->ops->name) == 0) {
            c->used[i] = true;
            return 0;
        }
    }
    tw_error("init",
             "rank %d does not run '%s' and this rank does: every rank must run it "
             "(set its options alike on every rank)",
             c->peer, iface->ops->name);
    return TW_ERR_INVALID;
}

/* Parse @p peer's blob into @p c and check that it runs the job-wide
 * layers we run, and no other. */
static tw_status_t tw_stack_agree(tw_ctx_impl_t *impl, int peer, const void *blob, size_t len,
                                  tw_stack_peer_t *c)
{
    const char *why = "";
    tw_status_t st;

    *c = (tw_stack_peer_t){.peer = peer};
    if (tw_addr_parse(blob, len, c->e, TW_ADDR_ENTRIES, &c->n, &why) != TW_OK) {
        tw_error("init", "rank %d published a malformed address blob (%s)", peer, why);
        return TW_ERR_BOOTSTRAP;
    }
    for (unsigned i = 0; i < impl->ntop; i++) {
        st = (tw_status_t)tw_tl_walk(impl->tops[i], tw_stack_agree_one, c);
        if (st != TW_OK) {
            return st;
        }
    }
    {
        const tw_addr_entry_t *job = NULL;
        for (unsigned i = 0; i < c->n; i++) {
            if (strcmp(c->e[i].name, TW_COLL_JOB_ADDR_NAME) == 0) {
                job = &c->e[i];
            }
        }
        st = tw_coll_job_check(impl->coll, peer, job != NULL ? job->addr : NULL,
                               job != NULL ? job->len : 0);
        if (st != TW_OK) {
            return st;
        }
    }
    for (unsigned i = 0; i < c->n; i++) {
        if (!c->used[i] && (c->e[i].flags & TW_ADDR_F_JOB_WIDE)) {
            tw_error("init",
                     "rank %d runs '%s' and this rank does not: every rank must run it "
                     "(set its options alike on every rank)",
                     peer, c->e[i].name);
            return TW_ERR_INVALID;
        }
        c->used[i] = false;
    }
    return TW_OK;
}

/* Every peer's blob, checked, then (@p connect) handed to our ifaces. A
 * disagreement is found by every rank in the first pass, before any rank
 * connected -- and so tore down what a peer is connecting to. */
static tw_status_t tw_stack_peers(tw_ctx_impl_t *impl, bool connect)
{
    unsigned char blob[TW_BOOTSTRAP_BLOB_MAX];
    tw_stack_peer_t c;
    tw_status_t st;

    for (int peer = 0; peer < impl->size; peer++) {
        size_t len = sizeof(blob);
        if (peer == impl->rank) {
            continue;
        }
        if (tw_bootstrap_get(impl->bs, peer, blob, &len) != TW_OK) {
            return TW_ERR_BOOTSTRAP;
        }
        st = tw_stack_agree(impl, peer, blob, len, &c);
        for (unsigned i = 0; connect && st == TW_OK && i < impl->ntop; i++) {
            st = (tw_status_t)tw_tl_walk(impl->tops[i], tw_stack_connect_one, &c);
        }
        if (st != TW_OK) {
            return st;
        }
    }
    return TW_OK;
}

/* One entry @p name of @p len bytes from @p fill (nothing when 0). */
static void tw_stack_pack_entry(tw_ctx_impl_t *impl, tw_addr_writer_t *w, const char *name,
                                size_t (*fill)(const tw_coll_t *, void *, size_t))
{
    size_t room = 0;
    void *at = tw_addr_reserve(w, name, 0, &room);
    size_t len = at != NULL ? fill(impl->coll, at, room) : 0;

    if (len > 0) {
        tw_addr_commit(w, len);
    } else if (at != NULL) {
        tw_addr_cancel(w);
    }
}

/* The node's collectives segment, in its leader's blob (nothing when
 * this rank leads no segment); the job-wide collective settings, in
 * everyone's. */
static void tw_stack_pack_coll(tw_ctx_impl_t *impl, tw_addr_writer_t *w)
{
    tw_stack_pack_entry(impl, w, TW_COLL_ADDR_NAME, tw_coll_node_addr);
    tw_stack_pack_entry(impl, w, TW_COLL_JOB_ADDR_NAME, tw_coll_job_addr);
}

/* The others of the node attach to the segment their leader published
 * (before the exchange's closing barrier). */
static tw_status_t tw_stack_attach_coll(tw_ctx_impl_t *impl)
{
    unsigned char blob[TW_BOOTSTRAP_BLOB_MAX];
    tw_addr_entry_t e[TW_ADDR_ENTRIES];
    int leader = tw_coll_node_leader(impl->coll);
    size_t len = sizeof(blob);
    const char *why = "";
    unsigned n = 0;

    if (leader < 0) {
        return TW_OK;
    }
    if (tw_bootstrap_get(impl->bs, leader, blob, &len) != TW_OK ||
        tw_addr_parse(blob, len, e, TW_ADDR_ENTRIES, &n, &why) != TW_OK) {
        return TW_ERR_BOOTSTRAP; /* the first pass over the blobs said why */
    }
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(e[i].name, TW_COLL_ADDR_NAME) == 0) {
            tw_coll_node_attach(impl->coll, e[i].addr, e[i].len);
            return TW_OK;
        }
    }
    tw_coll_node_attach(impl->coll, NULL, 0);
    return TW_OK;
}

tw_status_t tw_stack_exchange(tw_ctx_impl_t *impl)
{
    unsigned char blob[TW_BOOTSTRAP_BLOB_MAX];
    tw_addr_writer_t w;
    tw_status_t st;

    if (impl->size == 1) {
        return TW_OK; /* a job of one */
    }
    tw_addr_begin(&w, blob, sizeof(blob));
    for (unsigned i = 0; i < impl->ntop; i++) {
        st = (tw_status_t)tw_tl_walk(impl->tops[i], tw_stack_pack_one, &w);
        if (st != TW_OK) {
            return st;
        }
    }
    tw_stack_pack_coll(impl, &w);
    st = tw_bootstrap_exchange(impl->bs, blob, tw_addr_end(&w));
    if (st != TW_OK) {
        return st == TW_ERR_TIMEOUT ? st : TW_ERR_BOOTSTRAP;
    }
    st = tw_stack_peers(impl, false);
    if (st == TW_OK) {
        st = tw_stack_peers(impl, true);
    }
    if (st == TW_OK) {
        st = tw_stack_attach_coll(impl);
    }
    if (st != TW_OK) {
        return st;
    }
    st = tw_bootstrap_barrier(impl->bs);
    return st == TW_OK || st == TW_ERR_TIMEOUT ? st : TW_ERR_BOOTSTRAP;
}

/* ---- route, ready, finalize --------------------------------------------------- */

tw_status_t tw_stack_route(tw_ctx_impl_t *impl)
{
    for (int peer = 0; peer < impl->size; peer++) {
        tw_tl_iface_t *via = NULL;
        for (unsigned i = 0; i < impl->ntop && via == NULL; i++) {
            if (tw_tl_reachable(impl->tops[i], peer)) {
                via = impl->tops[i];
            }
        }
        if (via == NULL) {
            tw_error("init", "no transport reaches rank %d (TW_TRANSPORTS='%s')", peer,
                     impl->cfg.transports);
            return TW_ERR_UNREACHABLE;
        }
        tw_msg_set_route(impl->msg, peer, via);
    }
    return TW_OK;
}

void tw_stack_ready(tw_ctx_impl_t *impl)
{
    for (unsigned i = 0; i < impl->ntop; i++) {
        tw_tl_ready_tree(impl->tops[i]);
    }
}

void tw_stack_quiesce(tw_ctx_impl_t *impl)
{
    for (unsigned i = 0; i < impl->ntop; i++) {
        tw_tl_quiesce_tree(impl->tops[i]);
    }
}

void tw_stack_close(tw_ctx_impl_t *impl)
{
    for (unsigned i = 0; i < impl->ntop; i++) {
        tw_tl_close(impl->tops[i]);
    }
    impl->ntop = 0;
}

typedef struct tw_stack_find {
    const char *name;
    bool stats; /* a counters group, not an iface */
    tw_tl_iface_t *found;
} tw_stack_find_t;

static int tw_stack_find_one(tw_tl_iface_t *iface, void *arg)
{
    tw_stack_find_t *f = arg;
    const char *name =
        f->stats ? (iface->stats != NULL ? tw_stats_name(iface->stats) : "") : iface->ops->name;

    if (strcmp(name, f->name) == 0) {
        f->found = iface;
        return 1;
    }
    return 0;
}

static tw_tl_iface_t *tw_stack_search(tw_ctx_impl_t *impl, const char *name, bool stats)
{
    tw_stack_find_t f = {.name = name, .stats = stats};

    for (unsigned i = 0; i < impl->ntop && f.found == NULL; i++) {
        (void)tw_tl_walk(impl->tops[i], tw_stack_find_one, &f);
    }
    return f.found;
}

tw_tl_iface_t *tw_stack_find(tw_ctx_impl_t *impl, const char *name)
{
    return tw_stack_search(impl, name, false);
}

tw_stats_t *tw_stack_stats(tw_ctx_impl_t *impl, const char *name)
{
    tw_tl_iface_t *iface = tw_stack_search(impl, name, true);
    return iface != NULL ? iface->stats : NULL;
}
