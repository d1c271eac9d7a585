/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Node segments (src/shmem/tw_seg.c): a second process attaches and shares
 * the memory; a name cannot be created twice; attach refuses the wrong
 * mode, the wrong size and a planted symlink (whose target stays
 * untouched); a segment larger than /dev/shm can hold fails at creation
 * with TW_ERR_NOMEM; nothing is left in /dev/shm.
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmem/tw_seg.h"
#include "tw_test.h"

static int count_tw_segments(void)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    if (d == NULL) {
        return -1;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        n += strncmp(e->d_name, "tw-", 3) == 0;
    }
    closedir(d);
    return n;
}

int main(void)
{
    char name[TW_SEG_NAME_MAX], name2[TW_SEG_NAME_MAX], path[128];
    const size_t size = 1 << 20;
    tw_seg_t seg, other;
    int before;

    if (access("/dev/shm", W_OK) != 0) {
        printf("skipped: /dev/shm is not writable\n");
        return TWT_SKIP;
    }
    before = count_tw_segments();
    TWT_EQ(tw_seg_make_name("0123456789abcdef0123456789abcdef", name, sizeof(name)), TW_OK);
    TWT_EQ(tw_seg_make_name("0123456789abcdef0123456789abcdef", name2, sizeof(name2)), TW_OK);
    TWT_CHECK(strncmp(name, "/tw-", 4) == 0 && strcmp(name, name2) != 0);

    /* create, share with a child process, unlink */
    TWT_EQ(tw_seg_create(name, size, &seg), TW_OK);
    TWT_EQ(count_tw_segments(), before + 1);
    twt_fill(seg.base, size, 42);
    TWT_EQ(tw_seg_create(name, size, &other), TW_ERR_TRANSPORT); /* O_EXCL */
    pid_t pid = fork();
    if (pid == 0) {
        tw_seg_t s;
        if (tw_seg_attach(name, size, &s) != TW_OK || !twt_verify(s.base, size, 42)) {
            _exit(1);
        }
        memset(s.base, 0x5a, 64);
        tw_seg_detach(&s);
        _exit(0);
    }
    int status;
    TWT_EQ(waitpid(pid, &status, 0), pid);
    TWT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    TWT_EQ(((unsigned char *)seg.base)[63], 0x5a);
    /* wrong size, then wrong mode */
    TWT_EQ(tw_seg_attach(name, size + 4096, &other), TW_ERR_PROTOCOL);
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    TWT_EQ(chmod(path, 0644), 0);
    TWT_EQ(tw_seg_attach(name, size, &other), TW_ERR_PROTOCOL);
    TWT_EQ(tw_seg_unlink(&seg), TW_OK);
    tw_seg_detach(&seg);
    TWT_EQ(tw_seg_attach(name, size, &other), TW_ERR_TRANSPORT); /* gone */

    /* a planted symlink is neither followed on create nor on attach */
    char victim[] = "/tmp/tw-victim-XXXXXX";
    int vfd = mkstemp(victim);
    TWT_CHECK(vfd >= 0);
    close(vfd);
    TWT_EQ(tw_seg_make_name("k", name, sizeof(name)), TW_OK);
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    TWT_EQ(symlink(victim, path), 0);
    TWT_EQ(tw_seg_create(name, size, &seg), TW_ERR_TRANSPORT);
    TWT_EQ(tw_seg_attach(name, 0 + size, &other), TW_ERR_PROTOCOL);
    struct stat st;
    TWT_EQ(stat(victim, &st), 0);
    TWT_EQ(st.st_size, 0); /* untouched */
    unlink(path);
    unlink(victim);

    /* more than /dev/shm can hold: an error now, nothing left behind */
    TWT_EQ(tw_seg_make_name("k", name, sizeof(name)), TW_OK);
    TWT_EQ(tw_seg_create(name, (size_t)1 << 42, &seg), TW_ERR_NOMEM);
    TWT_EQ(count_tw_segments(), before);
    printf("segments: shared, exclusive, checked on attach, no symlink followed, ENOSPC at "
           "creation, none left behind\n");
    return 0;
}
