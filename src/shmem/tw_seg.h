/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Node segments: shared memory that the ranks of one node map. One rank
 * creates it (O_CREAT|O_EXCL, mode 0600, an unpredictable name derived from
 * the job key plus random bits), reserves every page with posix_fallocate
 * -- a full /dev/shm is ENOSPC now, not SIGBUS later -- and the others
 * attach, refusing anything not owned by our uid, not mode 0600, of the
 * wrong size, or reached through a symlink (O_NOFOLLOW). The creator
 * unlinks the name once every rank attached.
 * Thread: any, on distinct segments.
 */
#ifndef TW_SEG_H
#define TW_SEG_H

#include <stdbool.h>
#include <stddef.h>

#include "threadwire/threadwire.h"

#define TW_SEG_NAME_MAX 64

typedef struct tw_seg {
    void *base;
    size_t size;
    int fd;
    bool creator;
    char name[TW_SEG_NAME_MAX]; /* "/tw-..." */
} tw_seg_t;

/** A fresh unpredictable name for a segment of job @p job_key. */
tw_status_t tw_seg_make_name(const char *job_key, char *name, size_t len);
/** Create and map. TW_ERR_NOMEM when /dev/shm cannot hold @p size (nothing
 * is left behind), TW_ERR_TRANSPORT for other failures (logged). */
tw_status_t tw_seg_create(const char *name, size_t size, tw_seg_t *seg);
/** Attach to a segment another rank created; TW_ERR_PROTOCOL when it is
 * not ours (owner, mode, size, symlink). */
tw_status_t tw_seg_attach(const char *name, size_t size, tw_seg_t *seg);
/** Remove the name (creator, once everyone attached). */
tw_status_t tw_seg_unlink(tw_seg_t *seg);
/** Unmap and close. */
void tw_seg_detach(tw_seg_t *seg);

#endif /* TW_SEG_H */
