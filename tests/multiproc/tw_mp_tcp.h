/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* What the TCP multi-process tests reach inside a context. */
#ifndef TW_MP_TCP_H
#define TW_MP_TCP_H

#include <string.h>

#include "runtime/tw_context_int.h"
#include "threadwire/threadwire.h"

/* The context's tcp iface, or NULL. */
static inline tw_tl_iface_t *tw_mp_tcp_iface(tw_context_t *ctx)
{
    tw_ctx_impl_t *impl = ctx->impl;
    return tw_stack_find(impl, "tcp");
}

#endif /* TW_MP_TCP_H */
