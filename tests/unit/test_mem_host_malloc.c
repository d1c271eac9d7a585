/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * libthreadwire links jemalloc (whose Debian build exports an unprefixed
 * malloc) only as its own dependency: the process's malloc must remain
 * libc's. Linked against the public shared library, as users do.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "threadwire/threadwire.h"
#include "tw_test.h"

/* Sanitizer runtimes interpose malloc themselves. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

int main(void)
{
    Dl_info info;
    void *sym;

    if (SANITIZED) {
        printf("skip: sanitizer build, malloc belongs to the sanitizer runtime\n");
        return TWT_SKIP;
    }
    /* Use the library so that it is really loaded. */
    TWT_CHECK(strcmp(tw_strerror(TW_OK), "success") == 0);

    sym = dlsym(RTLD_DEFAULT, "malloc");
    TWT_CHECK(sym != NULL);
    TWT_CHECK(dladdr(sym, &info) != 0);
    TWT_CHECKF(info.dli_fname != NULL && strstr(info.dli_fname, "libc.so") != NULL,
               "malloc comes from %s", info.dli_fname ? info.dli_fname : "(null)");

    /* And what malloc returns can be freed by libc, with the library loaded. */
    void *p = malloc(100);
    TWT_CHECK(p != NULL);
    free(p);
    return 0;
}
