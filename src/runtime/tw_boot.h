/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Bootstrap client of the embedded launcher (tools/twrun.c): put this
 * rank's address blob, fence, get any rank's blob, over the unix socket
 * named by TW_BOOT_ADDR. The wire protocol is described atop twrun.c.
 * Every reply length is checked before it is read. The socket also is a
 * lifeline: EOF on tw_boot_fd() means twrun is gone.
 * Thread: one thread at a time per tw_boot_t (tw_init uses it).
 */
#ifndef TW_BOOT_H
#define TW_BOOT_H

#include <stddef.h>

#include "threadwire/threadwire.h"

#define TW_BOOT_BLOB_MAX 4096

typedef struct tw_boot tw_boot_t;

/** Connect to @p addr as @p rank of @p size. TW_ERR_BOOTSTRAP (logged). */
tw_status_t tw_boot_connect(const char *addr, int rank, int size, tw_boot_t **boot_p);
/** Publish this rank's blob (at most TW_BOOT_BLOB_MAX bytes). */
tw_status_t tw_boot_put(tw_boot_t *boot, const void *blob, size_t len);
/** Wait until every rank fenced; TW_ERR_PEER_FAILED when a rank died
 * first, TW_ERR_TIMEOUT after @p timeout_ms (-1: forever). */
tw_status_t tw_boot_fence(tw_boot_t *boot, int timeout_ms);
/** Copy @p rank's blob into @p buf (capacity *len_p); *len_p = its length.
 * TW_ERR_INVALID for a bad rank or a too small buffer, TW_ERR_BOOTSTRAP
 * when the rank published nothing. */
tw_status_t tw_boot_get(tw_boot_t *boot, int rank, void *buf, size_t *len_p);
/** The socket, for watching twrun's death (readable with EOF). */
int tw_boot_fd(const tw_boot_t *boot);
void tw_boot_close(tw_boot_t *boot);

#endif /* TW_BOOT_H */
