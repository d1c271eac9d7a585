/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
#include "tw_test.h"

#include <dirent.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

unsigned twt_scale(void)
{
    const char *s = getenv("TWTEST_SCALE");
    long v = s ? strtol(s, NULL, 10) : 1;
    return v >= 1 ? (unsigned)v : 1u;
}

uint64_t twt_scaled(uint64_t n, uint64_t min)
{
    uint64_t v = n / twt_scale();
    return v < min ? min : v;
}

uint64_t twt_checksum(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t twt_fill(void *buf, size_t len, uint64_t seed)
{
    unsigned char *p = buf;
    uint64_t st = seed;
    size_t i = 0;
    while (i + 8 <= len) {
        uint64_t r = twt_rand(&st);
        memcpy(p + i, &r, 8);
        i += 8;
    }
    if (i < len) {
        uint64_t r = twt_rand(&st);
        memcpy(p + i, &r, len - i);
    }
    return twt_checksum(buf, len);
}

bool twt_verify(const void *buf, size_t len, uint64_t seed)
{
    const unsigned char *p = buf;
    uint64_t st = seed;
    size_t i = 0;
    while (i + 8 <= len) {
        uint64_t r = twt_rand(&st);
        if (memcmp(p + i, &r, 8) != 0) {
            return false;
        }
        i += 8;
    }
    if (i < len) {
        uint64_t r = twt_rand(&st);
        if (memcmp(p + i, &r, len - i) != 0) {
            return false;
        }
    }
    return true;
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    if (d == NULL) {
        return -1;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] != '.') {
            n++;
        }
    }
    closedir(d);
    return n;
}

int twt_thread_count(void)
{
    return count_dir("/proc/self/task");
}

/* A joined thread can linger in /proc/self/task for a moment after
 * pthread_join returns (the kernel reaps it just after it wakes the
 * joiner): wait up to a second for the count to settle at @p want. */
int twt_thread_count_settled(int want)
{
    int n = twt_thread_count();
    for (int i = 0; i < 1000 && n != want; i++) {
        usleep(1000);
        n = twt_thread_count();
    }
    return n;
}

/* opendir itself holds one fd while counting. */
int twt_fd_count(void)
{
    return count_dir("/proc/self/fd") - 1;
}

double twt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int twt_cases_main(int argc, char **argv, const twt_case_t *cases, size_t n)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++) {
            printf("%s\n", cases[i].name);
        }
        return 0;
    }
    if (argc == 1) {
        for (size_t i = 0; i < n; i++) {
            printf("case %s\n", cases[i].name);
            fflush(stdout);
            cases[i].fn();
        }
        printf("%s: %zu case(s) passed\n", argv[0], n);
        return 0;
    }
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < n && strcmp(cases[i].name, argv[a]) != 0) {
            i++;
        }
        if (i == n) {
            fprintf(stderr, "FAIL %s: no case '%s' (--list names them)\n", argv[0], argv[a]);
            return 2;
        }
        printf("case %s\n", cases[i].name);
        fflush(stdout);
        cases[i].fn();
        printf("case %s: passed\n", cases[i].name);
    }
    return 0;
}

_Noreturn void twt_exit_failed(void)
{
    fputc('\n', stderr);
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}
