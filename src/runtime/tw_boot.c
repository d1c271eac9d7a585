/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "runtime/tw_boot.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/tw_log.h"
#include "core/tw_mem.h"
#include "core/tw_time.h"

enum { TW_BOOT_PUT = 1, TW_BOOT_FENCE = 2, TW_BOOT_GET = 3 };

struct tw_boot {
    int fd;
    int rank;
    int size;
};

/* Wait for @p events until @p deadline; false on timeout (or error). */
static bool tw_boot_wait(int fd, short events, uint64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        uint64_t now = tw_time_ns();
        int ms = deadline == UINT64_MAX ? -1
                 : now >= deadline      ? 0
                                        : (int)TW_MIN((deadline - now) / 1000000 + 1, 60000);
        int r = poll(&p, 1, ms);
        if (r > 0) {
            return true;
        }
        if (r == 0 && deadline != UINT64_MAX && tw_time_ns() >= deadline) {
            return false;
        }
        if (r < 0 && errno != EINTR) {
            return false;
        }
    }
}

static tw_status_t tw_boot_io(tw_boot_t *b, bool out, void *buf, size_t len, uint64_t deadline)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n;
        if (!tw_boot_wait(b->fd, out ? POLLOUT : POLLIN, deadline)) {
            return TW_ERR_TIMEOUT;
        }
        n = out ? send(b->fd, p, len, MSG_NOSIGNAL) : recv(b->fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            tw_error("boot", "rank %d: the launcher's socket %s", b->rank,
                     n == 0 ? "closed (twrun is gone)" : "failed");
            return TW_ERR_BOOTSTRAP;
        }
        p += n;
        len -= (size_t)n;
    }
    return TW_OK;
}

/* One request and its reply header; the reply's payload length comes back
 * in *rlen_p (checked against @p cap) and is read into @p rbuf. */
static tw_status_t tw_boot_call(tw_boot_t *b, uint32_t op, uint32_t rank, const void *data,
                                uint32_t len, void *rbuf, size_t cap, size_t *rlen_p,
                                int32_t *status_p, uint64_t deadline)
{
    uint32_t hdr[3] = {op, rank, len};
    unsigned char rh[8];
    uint32_t rlen;
    tw_status_t st;

    if ((st = tw_boot_io(b, true, hdr, sizeof(hdr), UINT64_MAX)) != TW_OK ||
        (len > 0 && (st = tw_boot_io(b, true, (void *)data, len, UINT64_MAX)) != TW_OK) ||
        (st = tw_boot_io(b, false, rh, sizeof(rh), deadline)) != TW_OK) {
        return st;
    }
    memcpy(status_p, rh, 4);
    memcpy(&rlen, rh + 4, 4);
    if (rlen > cap || rlen > TW_BOOT_BLOB_MAX) {
        tw_error("boot", "rank %d: launcher reply of %u bytes exceeds %zu", b->rank, rlen, cap);
        return TW_ERR_PROTOCOL;
    }
    if (rlen > 0 && (st = tw_boot_io(b, false, rbuf, rlen, deadline)) != TW_OK) {
        return st;
    }
    if (rlen_p != NULL) {
        *rlen_p = rlen;
    }
    return TW_OK;
}

tw_status_t tw_boot_connect(const char *addr, int rank, int size, tw_boot_t **boot_p)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    tw_boot_t *b;

    if (addr == NULL || strlen(addr) >= sizeof(sa.sun_path) || rank < 0 || rank >= size) {
        tw_error("boot", "bad launcher address or rank %d of %d", rank, size);
        return TW_ERR_BOOTSTRAP;
    }
    b = tw_calloc(1, sizeof(*b));
    if (b == NULL) {
        return TW_ERR_NOMEM;
    }
    b->rank = rank;
    b->size = size;
    strcpy(sa.sun_path, addr);
    b->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->fd < 0 || connect(b->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        tw_error("boot", "rank %d: cannot reach the launcher at %s: %m", rank, addr);
        if (b->fd >= 0) {
            close(b->fd);
        }
        tw_free(b, sizeof(*b));
        return TW_ERR_BOOTSTRAP;
    }
    *boot_p = b;
    return TW_OK;
}

tw_status_t tw_boot_put(tw_boot_t *b, const void *blob, size_t len)
{
    int32_t status;
    tw_status_t st;

    if (len > TW_BOOT_BLOB_MAX || (len > 0 && blob == NULL)) {
        return TW_ERR_INVALID;
    }
    st = tw_boot_call(b, TW_BOOT_PUT, (uint32_t)b->rank, blob, (uint32_t)len, NULL, 0, NULL,
                      &status, UINT64_MAX);
    if (st == TW_OK && status != 0) {
        tw_error("boot", "rank %d: the launcher refused our address", b->rank);
        st = TW_ERR_BOOTSTRAP;
    }
    return st;
}

tw_status_t tw_boot_fence(tw_boot_t *b, int timeout_ms)
{
    int32_t status;
    tw_status_t st = tw_boot_call(b, TW_BOOT_FENCE, (uint32_t)b->rank, NULL, 0, NULL, 0, NULL,
                                  &status, tw_deadline_ms(timeout_ms));
    if (st == TW_ERR_TIMEOUT) {
        tw_error("boot", "rank %d: fence timed out after %d ms", b->rank, timeout_ms);
    } else if (st == TW_OK && status != 0) {
        tw_error("boot", "rank %d: a rank died before the fence completed", b->rank);
        st = TW_ERR_PEER_FAILED;
    }
    return st;
}

tw_status_t tw_boot_get(tw_boot_t *b, int rank, void *buf, size_t *len_p)
{
    int32_t status;
    size_t len;
    tw_status_t st;

    if (rank < 0 || rank >= b->size || len_p == NULL || (buf == NULL && *len_p > 0)) {
        return TW_ERR_INVALID;
    }
    unsigned char tmp[TW_BOOT_BLOB_MAX];
    st = tw_boot_call(b, TW_BOOT_GET, (uint32_t)rank, NULL, 0, tmp, sizeof(tmp), &len, &status,
                      UINT64_MAX);
    if (st == TW_OK && status != 0) {
        tw_error("boot", "rank %d: rank %d published no address", b->rank, rank);
        st = TW_ERR_BOOTSTRAP;
    }
    if (st == TW_OK && len > *len_p) {
        tw_error("boot", "rank %d: the address of rank %d (%zu bytes) exceeds the buffer", b->rank,
                 rank, len);
        st = TW_ERR_INVALID;
    }
    if (st == TW_OK) {
        if (len > 0) {
            memcpy(buf, tmp, len);
        }
        *len_p = len;
    }
    return st;
}

int tw_boot_fd(const tw_boot_t *b)
{
    return b->fd;
}

void tw_boot_close(tw_boot_t *b)
{
    if (b != NULL) {
        close(b->fd);
        tw_free(b, sizeof(*b));
    }
}
