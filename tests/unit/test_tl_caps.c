/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Every ops table the runtime can compose -- transports, the wrappers
 * over single transports (lossy) and the layers over all of them (rel):
 * no NULL slot, the capability bits say exactly which slots are real (the
 * rest point at the shared stubs), a wrapper opens only over ifaces and a
 * transport only on its own, the selection bits agree, a query that fails
 * says why, and an open iface's caps mirror its table (a wrapper's: its
 * inner's). A table that advertises a stub, or hides a real operation,
 * fails here; so does the checker if it stops catching either.
 */
#include <string.h>

#include "progress/tw_pe.h"
#include "runtime/tw_context_int.h"
#include "transports/base/tw_tl.h"
#include "transports/lossy/tw_lossy.h"
#include "tw_test.h"

static void recv_none(void *arg, int src, uint8_t am_id, const void *hdr, size_t hdr_len,
                      const void *data, size_t len)
{
    (void)arg, (void)src, (void)am_id, (void)hdr, (void)hdr_len, (void)data, (void)len;
}

static void check_table(const tw_tl_ops_t *ops, bool wrapper)
{
    char why[128];

    TWT_CHECKF(tw_tl_caps_consistent(ops), "ops table %s", ops->name);
    TWT_CHECKF(((ops->caps & TW_TL_CAP_WRAPPER) != 0) == wrapper, "%s: wrapper bit", ops->name);
    /* A query that fails fills the reason: the buffer starts poisoned, so
     * an empty string proves it was written. */
    memset(why, 'x', sizeof(why));
    why[sizeof(why) - 1] = '\0';
    if (tw_tl_query(ops, why, sizeof(why)) != TW_OK) {
        TWT_CHECKF(why[0] != 'x' && why[0] != '\0' && strlen(why) < sizeof(why) - 1,
                   "%s: a failed query without a reason", ops->name);
    }
    for (size_t k = 0; ops->cfg != NULL && k < ops->cfg->count; k++) {
        const tw_cfg_entry_t *e = &ops->cfg->entries[k];
        TWT_CHECKF(e->name != NULL && strncmp(e->name, "TW_", 3) == 0 && e->help != NULL &&
                       e->defval != NULL,
                   "%s: config entry %zu", ops->name, k);
    }
    if (wrapper) {
        TWT_EQ(tw_tl_iface_open(ops, NULL, NULL), TW_ERR_UNSUPPORTED);
    }
}

int main(void)
{
    const tw_tl_ops_t *self = tw_tl_find("self");
    int n = 0;

    for (size_t i = 0; tw_tl_all[i] != NULL; i++) {
        check_table(tw_tl_all[i], false);
        TWT_CHECK(tw_tl_find(tw_tl_all[i]->name) == tw_tl_all[i]);
        n++;
    }
    for (size_t i = 0; tw_tl_wrappers[i] != NULL; i++) {
        check_table(tw_tl_wrappers[i], true);
        TWT_CHECK((tw_tl_wrappers[i]->caps & TW_TL_CAP_WRAP_ALL) == 0);
        TWT_CHECK(tw_tl_find(tw_tl_wrappers[i]->name) == NULL); /* not a transport */
        n++;
    }
    for (size_t i = 0; tw_stack_layers[i] != NULL; i++) {
        check_table(tw_stack_layers[i], true);
        TWT_CHECK(tw_tl_find(tw_stack_layers[i]->name) == NULL);
        n++;
    }
    TWT_CHECK(self != NULL && (self->caps & TW_TL_CAP_ALWAYS_ON));
    TWT_CHECK(tw_tl_find("no-such") == NULL);

    /* The checker itself catches a mismatch, in every direction. */
    tw_tl_ops_t bad = *self;
    bad.caps |= TW_TL_CAP_PUT;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.caps &= ~TW_TL_CAP_AM_ZCOPY;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.caps |= TW_TL_CAP_POLL; /* its poll is the stub */
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.caps |= TW_TL_CAP_OPT_IN; /* and always on */
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.caps |= TW_TL_CAP_WRAPPER; /* it opens on its own */
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.caps |= 1u << 30; /* nobody's bit */
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.flush = NULL;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *self;
    bad.bind = NULL;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    bad = *tw_tl_wrappers[0];
    bad.wrap_open = tw_tl_stub_wrap_open;
    TWT_CHECK(!tw_tl_caps_consistent(&bad));
    TWT_EQ(tw_tl_stub_put_zcopy(NULL, 0, NULL, 0, 0, NULL, NULL), TW_ERR_UNSUPPORTED);

    /* An open iface mirrors its table; a wrapper mirrors its inner. */
    tw_pe_params_t pp = {.name = "caps", .thread = false, .bind_package = -1};
    tw_pe_t *pe;
    tw_tl_iface_t *in, *w;
    tw_fault_spec_t spec;
    char why[64] = "";
    TWT_EQ(tw_pe_create(&pp, &pe), TW_OK);
    tw_tl_params_t p = {.rank = 0, .size = 1, .pe = pe, .recv = recv_none, .job_key = ""};
    TWT_EQ(tw_tl_iface_open(self, &p, &in), TW_OK);
    TWT_EQ(in->caps, self->caps & TW_TL_CAP_OPS_MASK);
    TWT_CHECK(strcmp(in->name, "self") == 0 && in->ninner == 0);
    TWT_EQ(tw_fault_parse("drop=0", &spec, why, sizeof(why)), TW_OK);
    TWT_EQ(tw_lossy_wrap(in, &p, &spec, &w), TW_OK);
    TWT_EQ(w->caps, in->caps & tw_tl_wrappers[0]->caps);
    TWT_CHECK(strcmp(w->name, "self") == 0 && w->ops == tw_tl_wrappers[0]);
    TWT_CHECK(w->ninner == 1 && w->inner[0] == in);
    tw_tl_close(w);
    tw_pe_destroy(pe);

    printf("%d ops table(s) consistent\n", n);
    return 0;
}
