/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Library memory. Normal builds allocate from a private jemalloc arena with
 * mallocx/sdallocx (never replacing the host's malloc: the library only
 * links jemalloc, libc's malloc stays the process allocator). Sanitizer
 * builds use libc malloc so ASan/LSan/TSan see every allocation.
 *
 * Sized deallocation: the size given to tw_free must be the size that was
 * allocated. Allocation failures return NULL; callers return TW_ERR_NOMEM.
 */
#ifndef TW_MEM_H
#define TW_MEM_H

#include <stddef.h>

void *tw_malloc(size_t size);
void *tw_calloc(size_t n, size_t size); /* overflow-checked */
void tw_free(void *p, size_t size);     /* NULL is a no-op */
/* @p align: power of two, at most 4096. */
void *tw_malloc_aligned(size_t align, size_t size);
void tw_free_aligned(void *p, size_t align, size_t size);
/* Copy of @p s; free with tw_free(p, strlen(p) + 1). */
char *tw_strdup(const char *s);
/* "jemalloc arena N" or "libc malloc (sanitizer build)". */
const char *tw_mem_backend(void);

#endif /* TW_MEM_H */
