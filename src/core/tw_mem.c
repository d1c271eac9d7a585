/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * jemalloc builds: one private arena per process, created at the first
 * allocation; every call passes its index to mallocx/sdallocx. The library
 * never defines malloc/free: the host keeps its own allocator. If the arena
 * cannot be created we still use jemalloc, with its automatic arenas.
 *
 * Sanitizer builds: libc malloc, so ASan/LSan/TSan see every allocation.
 *
 * Zero-byte requests allocate one byte so that the result is a unique,
 * freeable pointer; the frees below apply the same rounding.
 */
#include "core/tw_mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"

#define TW_MEM_ALIGN_MAX 4096u

static inline size_t mem_size(size_t size)
{
    return size != 0 ? size : 1;
}

static inline int mem_align_ok(size_t align)
{
    return align != 0 && (align & (align - 1)) == 0 && align <= TW_MEM_ALIGN_MAX;
}

#if TW_HAVE_JEMALLOC && !TW_SANITIZER_BUILD

#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <stdio.h>

static pthread_once_t mem_once = PTHREAD_ONCE_INIT;
static int mem_flags;            /* MALLOCX_ARENA(ind) or 0; written once in mem_once */
static char mem_backend_str[64]; /* written once in mem_once */

static void mem_init(void)
{
    unsigned ind = 0;
    size_t sz = sizeof(ind);
    int rc = mallctl("arenas.create", &ind, &sz, NULL, 0);

    if (rc == 0) {
        mem_flags = MALLOCX_ARENA(ind);
        snprintf(mem_backend_str, sizeof(mem_backend_str), "jemalloc arena %u", ind);
    } else {
        mem_flags = 0;
        snprintf(mem_backend_str, sizeof(mem_backend_str), "jemalloc (default arenas)");
        tw_warn("mem", "jemalloc arenas.create failed: %s; using the default arenas", strerror(rc));
    }
}

static inline int mem_arena_flags(void)
{
    pthread_once(&mem_once, mem_init);
    return mem_flags;
}

void *tw_malloc(size_t size)
{
    return mallocx(mem_size(size), mem_arena_flags());
}

void *tw_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) {
        return NULL;
    }
    return mallocx(mem_size(n * size), mem_arena_flags() | MALLOCX_ZERO);
}

void tw_free(void *p, size_t size)
{
    if (p == NULL) {
        return;
    }
    sdallocx(p, mem_size(size), mem_arena_flags());
}

void *tw_malloc_aligned(size_t align, size_t size)
{
    if (!mem_align_ok(align)) {
        tw_assert(!"tw_malloc_aligned: bad alignment");
        return NULL;
    }
    return mallocx(mem_size(size), mem_arena_flags() | MALLOCX_ALIGN(align));
}

void tw_free_aligned(void *p, size_t align, size_t size)
{
    if (p == NULL) {
        return;
    }
    sdallocx(p, mem_size(size), mem_arena_flags() | MALLOCX_ALIGN(align));
}

const char *tw_mem_backend(void)
{
    pthread_once(&mem_once, mem_init);
    return mem_backend_str;
}

#else /* libc */

void *tw_malloc(size_t size)
{
    return malloc(mem_size(size));
}

void *tw_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) {
        return NULL;
    }
    return n == 0 || size == 0 ? calloc(1, 1) : calloc(n, size);
}

void tw_free(void *p, size_t size)
{
    (void)size;
    free(p);
}

void *tw_malloc_aligned(size_t align, size_t size)
{
    void *p = NULL;

    if (!mem_align_ok(align)) {
        tw_assert(!"tw_malloc_aligned: bad alignment");
        return NULL;
    }
    if (align < sizeof(void *)) {
        align = sizeof(void *); /* posix_memalign's minimum */
    }
    if (posix_memalign(&p, align, mem_size(size)) != 0) {
        return NULL;
    }
    return p;
}

void tw_free_aligned(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    free(p);
}

const char *tw_mem_backend(void)
{
#if TW_SANITIZER_BUILD
    return "libc malloc (sanitizer build)";
#else
    return "libc malloc";
#endif
}

#endif

char *tw_strdup(const char *s)
{
    size_t len = strlen(s) + 1;
    char *p = tw_malloc(len);

    if (p != NULL) {
        memcpy(p, s, len);
    }
    return p;
}
