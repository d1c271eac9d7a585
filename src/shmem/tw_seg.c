/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#define _GNU_SOURCE
#include "shmem/tw_seg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tw_crc32c.h"
#include "core/tw_log.h"

tw_status_t tw_seg_make_name(const char *job_key, char *name, size_t len)
{
    uint64_t rnd;
    uint32_t tag = tw_crc32c(0, job_key, job_key != NULL ? strlen(job_key) : 0);

    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        tw_error("shmem", "getrandom failed: %m");
        return TW_ERR_TRANSPORT;
    }
    if ((size_t)snprintf(name, len, "/tw-%08x-%016llx", tag, (unsigned long long)rnd) >= len) {
        return TW_ERR_INVALID;
    }
    return TW_OK;
}

/* Ours: our uid, mode 0600, a regular file of @p size bytes. */
static tw_status_t tw_seg_check(int fd, const char *name, size_t size)
{
    struct stat st;

    if (fstat(fd, &st) != 0) {
        tw_error("shmem", "fstat of segment %s failed: %m", name);
        return TW_ERR_TRANSPORT;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600 ||
        (size_t)st.st_size != size) {
        tw_error("shmem",
                 "segment %s refused: uid %d mode %04o size %lld (want uid %d, 0600, %zu bytes)",
                 name, (int)st.st_uid, (unsigned)(st.st_mode & 07777), (long long)st.st_size,
                 (int)geteuid(), size);
        return TW_ERR_PROTOCOL;
    }
    return TW_OK;
}

static tw_status_t tw_seg_map(tw_seg_t *seg, int fd, const char *name, size_t size, bool creator)
{
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (base == MAP_FAILED) {
        tw_error("shmem", "mmap of segment %s (%zu bytes) failed: %m", name, size);
        return TW_ERR_TRANSPORT;
    }
    seg->base = base;
    seg->size = size;
    seg->fd = fd;
    seg->creator = creator;
    snprintf(seg->name, sizeof(seg->name), "%s", name);
    return TW_OK;
}

tw_status_t tw_seg_create(const char *name, size_t size, tw_seg_t *seg)
{
    tw_status_t st;
    int fd, err;

    if (name == NULL || strlen(name) >= TW_SEG_NAME_MAX || size == 0) {
        return TW_ERR_INVALID;
    }
    /* O_EXCL never follows a planted symlink: it fails with EEXIST. */
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        tw_error("shmem", "cannot create segment %s: %m", name);
        return TW_ERR_TRANSPORT;
    }
    /* The umask cannot widen 0600, but make sure of the mode we check. */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0) {
        tw_error("shmem", "cannot size segment %s to %zu bytes: %m", name, size);
        st = TW_ERR_TRANSPORT;
        goto err_unlink;
    }
    err = posix_fallocate(fd, 0, (off_t)size);
    if (err != 0) {
        tw_error("shmem", "cannot reserve %zu bytes for segment %s: %s", size, name, strerror(err));
        st = (err == ENOSPC || err == EFBIG || err == ENOMEM) ? TW_ERR_NOMEM : TW_ERR_TRANSPORT;
        goto err_unlink;
    }
    st = tw_seg_check(fd, name, size);
    if (st != TW_OK) {
        goto err_unlink;
    }
    st = tw_seg_map(seg, fd, name, size, true);
    if (st != TW_OK) {
        goto err_unlink;
    }
    return TW_OK;

err_unlink:
    shm_unlink(name);
    close(fd);
    return st;
}

tw_status_t tw_seg_attach(const char *name, size_t size, tw_seg_t *seg)
{
    tw_status_t st;
    int fd;

    if (name == NULL || strlen(name) >= TW_SEG_NAME_MAX || size == 0) {
        return TW_ERR_INVALID;
    }
    fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) {
        tw_error("shmem", "cannot attach segment %s: %m", name);
        return errno == ELOOP ? TW_ERR_PROTOCOL : TW_ERR_TRANSPORT;
    }
    st = tw_seg_check(fd, name, size);
    if (st == TW_OK) {
        st = tw_seg_map(seg, fd, name, size, false);
    }
    if (st != TW_OK) {
        close(fd);
    }
    return st;
}

tw_status_t tw_seg_unlink(tw_seg_t *seg)
{
    if (shm_unlink(seg->name) != 0 && errno != ENOENT) {
        tw_error("shmem", "cannot unlink segment %s: %m", seg->name);
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

void tw_seg_detach(tw_seg_t *seg)
{
    if (seg->base != NULL) {
        munmap(seg->base, seg->size);
        seg->base = NULL;
    }
    if (seg->fd >= 0) {
        close(seg->fd);
        seg->fd = -1;
    }
}
