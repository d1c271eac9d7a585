/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Reading another process's memory for the single-copy bcasts of
 * tw_coll_shm.c (process_vm_readv), and telling a refusal from a process
 * that is gone.
 */
#define _GNU_SOURCE /* process_vm_readv */
#include "coll/tw_coll_shm.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

/* Has process @p pid exited (gone, or a zombie not reaped yet)? */
static bool tw_cshm_pid_gone(pid_t pid)
{
    char path[64], st[256];
    FILE *f;
    size_t n;

    if (kill(pid, 0) != 0 && errno == ESRCH) {
        return true;
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (f == NULL) {
        return true;
    }
    n = fread(st, 1, sizeof(st) - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *p = strrchr(st, ')'); /* after "pid (comm) ": the state */
    return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Can this process read @p len bytes at @p addr of process @p pid? */
tw_status_t tw_cshm_cma_read(pid_t pid, void *dst, uint64_t addr, size_t len)
{
    size_t done = 0;

    while (done < len) {
        struct iovec l = {.iov_base = (unsigned char *)dst + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(addr + done), .iov_len = len - done};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        /* A process that is exiting may fail a read in other ways too. */
        return (n < 0 && errno == ESRCH) || tw_cshm_pid_gone(pid) ? TW_ERR_PEER_FAILED
                                                                  : TW_ERR_TRANSPORT;
    }
    return TW_OK;
}
