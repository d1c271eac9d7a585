/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Library memory: sizes, alignments, calloc overflow, strdup, threads. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/tw_mem.h"
#include "tw_build_config.h"
#include "tw_test.h"

static void test_sizes(void)
{
    static const size_t sizes[] = {0,    1,    7,    8,     15,      16,           100,
                                   4095, 4096, 4097, 65536, 1 << 20, (8 << 20) + 3};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t sz = sizes[i];
        unsigned char *p = tw_malloc(sz);
        TWT_CHECKF(p != NULL, "size %zu", sz);
        memset(p, 0xA5, sz);
        tw_free(p, sz);

        p = tw_calloc(1, sz);
        TWT_CHECKF(p != NULL, "calloc size %zu", sz);
        for (size_t k = 0; k < sz; k++) {
            TWT_CHECK(p[k] == 0);
        }
        tw_free(p, sz);
    }
    /* Two zero-size allocations are distinct pointers. */
    void *a = tw_malloc(0), *b = tw_malloc(0);
    TWT_CHECK(a != NULL && b != NULL && a != b);
    tw_free(a, 0);
    tw_free(b, 0);
    tw_free(NULL, 0);
    tw_free_aligned(NULL, 64, 0);
}

static void test_aligned(void)
{
    for (size_t align = 1; align <= 4096; align *= 2) {
        static const size_t sizes[] = {0, 1, 63, 64, 1000, 5000, 100000};
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            unsigned char *p = tw_malloc_aligned(align, sizes[i]);
            TWT_CHECKF(p != NULL, "align %zu size %zu", align, sizes[i]);
            TWT_CHECKF(((uintptr_t)p & (align - 1)) == 0, "align %zu got %p", align, (void *)p);
            memset(p, 1, sizes[i]);
            tw_free_aligned(p, align, sizes[i]);
        }
    }
}

static void test_calloc(void)
{
    unsigned *p = tw_calloc(1000, sizeof(unsigned));
    TWT_CHECK(p != NULL);
    for (int i = 0; i < 1000; i++) {
        TWT_EQ(p[i], 0);
    }
    tw_free(p, 1000 * sizeof(unsigned));

    TWT_CHECK(tw_calloc(SIZE_MAX / 2 + 1, 2) == NULL);
    TWT_CHECK(tw_calloc(2, SIZE_MAX / 2 + 1) == NULL);
    TWT_CHECK(tw_calloc(SIZE_MAX, SIZE_MAX) == NULL);
    TWT_CHECK(tw_calloc((size_t)1 << 33, (size_t)1 << 33) == NULL);

    p = tw_calloc(0, 16);
    TWT_CHECK(p != NULL);
    tw_free(p, 0);
}

static void test_strdup(void)
{
    const char *s = "threadwire core";
    char *d = tw_strdup(s);
    TWT_CHECK(d != NULL && d != s);
    TWT_CHECK(strcmp(d, s) == 0);
    tw_free(d, strlen(d) + 1);
    d = tw_strdup("");
    TWT_CHECK(d != NULL && d[0] == '\0');
    tw_free(d, 1);
}

/* Allocate in one thread, free in another. */
#define NPTRS 1000
static void *ptrs[NPTRS];

static void *alloc_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < NPTRS; i++) {
        ptrs[i] = tw_malloc((size_t)i * 8);
        TWT_CHECK(ptrs[i] != NULL);
        memset(ptrs[i], i & 0xff, (size_t)i * 8);
    }
    return NULL;
}

static void *free_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < NPTRS; i++) {
        const unsigned char *p = ptrs[i];
        for (size_t k = 0; k < (size_t)i * 8; k++) {
            TWT_CHECK(p[k] == (i & 0xff));
        }
        tw_free(ptrs[i], (size_t)i * 8);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t;
    TWT_EQ(pthread_create(&t, NULL, alloc_thread, NULL), 0);
    TWT_EQ(pthread_join(t, NULL), 0);
    TWT_EQ(pthread_create(&t, NULL, free_thread, NULL), 0);
    TWT_EQ(pthread_join(t, NULL), 0);
}

int main(void)
{
    const char *backend = tw_mem_backend();

    fprintf(stderr, "backend: %s\n", backend);
#if TW_SANITIZER_BUILD
    TWT_CHECK(strstr(backend, "libc malloc") != NULL);
#elif TW_HAVE_JEMALLOC
    TWT_CHECKF(strncmp(backend, "jemalloc arena ", 15) == 0, "backend '%s'", backend);
#endif
    test_sizes();
    test_aligned();
    test_calloc();
    test_strdup();
    test_threads();
    return 0;
}
