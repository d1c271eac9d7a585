/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Replays files through a fuzz target without libFuzzer, so every build
 * (gcc, TSan, ASan/UBSan) runs the seed corpus and any crash input as a
 * plain regression test:
 *
 *   fuzz_replay_<name> <file|dir>...    (directories: every file in them)
 *
 * Each input sits in a heap block of exactly its size, as under libFuzzer,
 * so ASan sees a read past the end. Exits 1 when an argument cannot be read
 * or no input was found (an empty corpus would otherwise pass).
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "tw_fuzz.h"

static int replay_file(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    uint8_t *buf;
    size_t size;

    if (f == NULL || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        goto err_close;
    }
    size = (size_t)st.st_size;
    buf = malloc(size > 0 ? size : 1);
    if (buf == NULL) {
        fprintf(stderr, "replay: %s: out of memory (%zu bytes)\n", path, size);
        goto err_close;
    }
    if (size > 0 && fread(buf, 1, size, f) != size) {
        fprintf(stderr, "replay: %s: short read\n", path);
        goto err_free;
    }
    fclose(f);
    /* The input's name first: a crash report then says which one. */
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    (*count)++;
    return 0;

err_free:
    free(buf);
err_close:
    if (f != NULL) {
        fclose(f);
    }
    return -1;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of @p dir (not recursive, dot files skipped), in name
 * order so runs are repeatable. */
static int replay_dir(const char *dir, size_t *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        if (n == cap) {
            char **grown = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof(*names));
            if (grown == NULL) {
                rc = -1;
                break;
            }
            names = grown;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if ((names[n] = malloc(len)) == NULL) {
            rc = -1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n > 0) {
        qsort(names, n, sizeof(*names), name_cmp);
    }
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            rc = replay_file(names[i], count);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    size_t count = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s <file|dir>...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int rc;

        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        rc = S_ISDIR(st.st_mode) ? replay_dir(argv[i], &count) : replay_file(argv[i], &count);
        if (rc != 0) {
            return 1;
        }
    }
    if (count == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    fprintf(stderr, "replay: %zu inputs, no crash\n", count);
    return 0;
}
