/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * A rank for the twrun tests (see twrun_test.sh):
 *   twrun_probe kv            put a blob, fence, get every rank's blob, check
 *   twrun_probe crash R [S]   rank R dies by SIGKILL; the others sleep S s (30)
 *   twrun_probe sleep         sleep 30 s (lifeline test)
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int env_int(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL) {
        fprintf(stderr, "probe: %s not set\n", name);
        exit(3);
    }
    return atoi(v);
}

static int request(int fd, uint32_t op, uint32_t rank, const void *data, uint32_t len, void *out,
                   uint32_t *out_len)
{
    uint32_t hdr[3] = {op, rank, len};
    int32_t st;
    uint32_t rlen;
    if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) ||
        (len > 0 && write(fd, data, len) != (ssize_t)len) || read(fd, &st, 4) != 4 ||
        read(fd, &rlen, 4) != 4 || rlen > 4096 ||
        (rlen > 0 && read(fd, out, rlen) != (ssize_t)rlen)) {
        return -1;
    }
    if (out_len != NULL) {
        *out_len = rlen;
    }
    return st;
}

int main(int argc, char **argv)
{
    int rank = env_int("TW_RANK"), size = env_int("TW_SIZE");
    const char *key = getenv("TW_JOB_KEY"), *addr = getenv("TW_BOOT_ADDR");

    if (key == NULL || strlen(key) != 32 || addr == NULL || env_int("TW_LOCAL_RANK") != rank ||
        env_int("TW_LOCAL_SIZE") != size || rank < 0 || rank >= size) {
        fprintf(stderr, "probe: bad launcher environment\n");
        return 3;
    }
    if (argc > 1 && strcmp(argv[1], "kv") == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        char blob[64], got[4096];
        uint32_t len;
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", addr);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
            perror("probe: connect");
            return 4;
        }
        snprintf(blob, sizeof(blob), "rank-%d-of-%d-%s", rank, size, key);
        if (request(fd, 1, (uint32_t)rank, blob, (uint32_t)strlen(blob), got, &len) != 0 ||
            request(fd, 2, (uint32_t)rank, NULL, 0, got, &len) != 0) {
            fprintf(stderr, "probe: put/fence failed\n");
            return 5;
        }
        for (int r = 0; r < size; r++) {
            snprintf(blob, sizeof(blob), "rank-%d-of-%d-%s", r, size, key);
            if (request(fd, 3, (uint32_t)r, NULL, 0, got, &len) != 0 || len != strlen(blob) ||
                memcmp(got, blob, len) != 0) {
                fprintf(stderr, "probe: rank %d got a wrong blob for rank %d\n", rank, r);
                return 6;
            }
        }
        close(fd);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "crash") == 0) {
        if (rank == atoi(argv[2])) {
            usleep(200000);
            raise(SIGKILL); /* not SIGSEGV: sanitizer builds catch that */
        }
        sleep(argc > 3 ? (unsigned)atoi(argv[3]) : 30);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "sleep") == 0) {
        sleep(30);
        return 0;
    }
    fprintf(stderr, "usage: twrun_probe kv | crash R [S] | sleep\n");
    return 2;
}
