/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Node segments (src/shmem/tw_seg.c): a second process attaches and shares
 * the memory; a name cannot be created twice; attach refuses the wrong
 * mode, the wrong size and a planted symlink (whose target stays
 * untouched); a segment larger than /dev/shm can hold fails at creation
 * with TW_ERR_NOMEM; nothing is left in /dev/shm. Created mode 0600 and
 * owned by us even under a umask that would narrow it; the name is gone
 * after tw_seg_unlink.
 *
 * `test_shm_seg other-uid` (run as root; skipped otherwise or without
 * setpriv): another uid (65534, via setpriv) cannot attach to a live
 * segment root created, neither at mode 0600 nor after a chmod to 0666
 * (the owner check refuses it: TW_ERR_PROTOCOL); and a segment the other
 * uid planted under a name is refused on attach by root and blocks root's
 * create of that name (O_EXCL), rather than being adopted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmem/tw_seg.h"
#include "tw_test.h"

/* Whether segment NAME ("/tw-...") exists in /dev/shm. The checks look
 * at their own names only: other tests running at the same time create
 * and remove segments of their own. */
static bool seg_exists(const char *name)
{
    char path[128];
    struct stat st;

    snprintf(path, sizeof(path), "/dev/shm%s", name);
    return stat(path, &st) == 0;
}

#define OTHER_UID  65534
#define OTHER_SIZE (1u << 20)

/* As the other uid (started by setpriv): what may it do to segment NAME?
 *   attach NAME any|protocol  tw_seg_attach must fail (with TW_ERR_PROTOCOL)
 *   plant NAME                create NAME as ours, mode 0600, OTHER_SIZE
 * Exit 0 as expected, 10 attached, 11 not running as the other uid, 12
 * another error than wanted, 13 plant failed. */
static int as_other(const char *what, const char *name, const char *want)
{
    if (getuid() != OTHER_UID || geteuid() != OTHER_UID || getegid() != OTHER_UID ||
        getgroups(0, NULL) != 0) {
        fprintf(stderr, "other uid: running as uid %d gid %d\n", (int)geteuid(), (int)getegid());
        return 11;
    }
    if (strcmp(what, "plant") == 0) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || ftruncate(fd, OTHER_SIZE) != 0) {
            perror("other uid: plant");
            return 13;
        }
        close(fd);
        return 0;
    }
    tw_seg_t s;
    tw_status_t st = tw_seg_attach(name, OTHER_SIZE, &s);
    if (st == TW_OK) {
        fprintf(stderr, "other uid %d attached to root's segment %s\n", OTHER_UID, name);
        tw_seg_detach(&s);
        return 10;
    }
    printf("other uid: attach to %s refused: %s\n", name, tw_strerror(st));
    return strcmp(want, "protocol") == 0 && st != TW_ERR_PROTOCOL ? 12 : 0;
}

/* Run this program as the other uid; returns its exit status (77 when
 * setpriv could not run it at all). */
static int run_as_other(const char *self, const char *what, const char *name, const char *want)
{
    pid_t pid = fork();
    TWT_CHECK(pid >= 0);
    if (pid == 0) {
        execlp("setpriv", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", self,
               "--as-other", what, name, want, (char *)NULL);
        _exit(127);
    }
    int status;
    TWT_EQ(waitpid(pid, &status, 0), pid);
    TWT_CHECKF(WIFEXITED(status), "the other uid's process died by signal %d", WTERMSIG(status));
    if (WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127) {
        return TWT_SKIP;
    }
    return WEXITSTATUS(status);
}

static int other_uid_test(void)
{
    char self[PATH_MAX], name[TW_SEG_NAME_MAX], path[128];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    tw_seg_t seg, other;
    struct stat st;
    char first[TW_SEG_NAME_MAX];
    int rc;

    if (geteuid() != 0) {
        printf("skipped: the other-uid check needs root (to start uid %d with setpriv)\n",
               OTHER_UID);
        return TWT_SKIP;
    }
    if (system("command -v setpriv >/dev/null 2>&1") != 0) {
        printf("skipped: setpriv (util-linux) is not installed\n");
        return TWT_SKIP;
    }
    if (access("/dev/shm", W_OK) != 0) {
        printf("skipped: /dev/shm is not writable\n");
        return TWT_SKIP;
    }
    TWT_CHECK(n > 0);
    self[n] = '\0';

    /* a live segment of root's, 0600: the other uid cannot even open it */
    TWT_EQ(tw_seg_make_name("0123456789abcdef0123456789abcdef", name, sizeof(name)), TW_OK);
    TWT_EQ(tw_seg_create(name, OTHER_SIZE, &seg), TW_OK);
    snprintf(first, sizeof(first), "%s", name);
    rc = run_as_other(self, "attach", name, "any");
    if (rc == TWT_SKIP) {
        tw_seg_unlink(&seg);
        tw_seg_detach(&seg);
        printf("skipped: setpriv could not run %s as uid %d (is its directory readable to "
               "others?)\n",
               self, OTHER_UID);
        return TWT_SKIP;
    }
    TWT_CHECKF(rc == 0, "uid %d vs root's 0600 segment: exit %d", OTHER_UID, rc);
    /* widened by mistake to 0666: still refused, by the owner check */
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    TWT_EQ(chmod(path, 0666), 0);
    rc = run_as_other(self, "attach", name, "protocol");
    TWT_CHECKF(rc == 0, "uid %d vs root's 0666 segment: exit %d", OTHER_UID, rc);
    TWT_EQ(((unsigned char *)seg.base)[0], 0); /* untouched */
    TWT_EQ(tw_seg_unlink(&seg), TW_OK);
    tw_seg_detach(&seg);

    /* a name planted by the other uid: root neither adopts it on create
     * nor accepts it on attach */
    TWT_EQ(tw_seg_make_name("0123456789abcdef0123456789abcdef", name, sizeof(name)), TW_OK);
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    rc = run_as_other(self, "plant", name, "-");
    TWT_CHECKF(rc == 0, "uid %d could not plant %s: exit %d", OTHER_UID, name, rc);
    TWT_EQ(stat(path, &st), 0);
    TWT_EQ(st.st_uid, OTHER_UID);
    TWT_EQ(tw_seg_create(name, OTHER_SIZE, &other), TW_ERR_TRANSPORT); /* O_EXCL */
    TWT_EQ(tw_seg_attach(name, OTHER_SIZE, &other), TW_ERR_PROTOCOL);  /* not ours */
    TWT_EQ(stat(path, &st), 0);
    TWT_EQ(st.st_uid, OTHER_UID); /* and left alone */
    TWT_EQ(unlink(path), 0);
    TWT_CHECK(!seg_exists(first) && !seg_exists(name)); /* none left behind */
    printf("segments: uid %d cannot attach to root's live segment (0600, nor 0666); a "
           "segment it planted is refused and not adopted\n",
           OTHER_UID);
    return 0;
}

int main(int argc, char **argv)
{
    char name[TW_SEG_NAME_MAX], name2[TW_SEG_NAME_MAX], path[128];
    const size_t size = 1 << 20;
    tw_seg_t seg, other;

    if (argc == 5 && strcmp(argv[1], "--as-other") == 0) {
        return as_other(argv[2], argv[3], argv[4]);
    }
    if (argc == 2 && strcmp(argv[1], "other-uid") == 0) {
        return other_uid_test();
    }
    if (access("/dev/shm", W_OK) != 0) {
        printf("skipped: /dev/shm is not writable\n");
        return TWT_SKIP;
    }
    TWT_EQ(tw_seg_make_name("0123456789abcdef0123456789abcdef", name, sizeof(name)), TW_OK);
    TWT_EQ(tw_seg_make_name("0123456789abcdef0123456789abcdef", name2, sizeof(name2)), TW_OK);
    TWT_CHECK(strncmp(name, "/tw-", 4) == 0 && strcmp(name, name2) != 0);

    /* create (0600 and ours, also under a umask that would narrow it),
     * share with a child process, unlink */
    struct stat st;
    mode_t old_umask = umask(0277);
    TWT_EQ(tw_seg_create(name, size, &seg), TW_OK);
    umask(old_umask);
    TWT_CHECK(seg_exists(name));
    snprintf(path, sizeof(path), "/dev/shm%s", name);
    TWT_EQ(stat(path, &st), 0);
    TWT_CHECKF((st.st_mode & 07777) == 0600, "created with mode %04o",
               (unsigned)(st.st_mode & 07777));
    TWT_EQ(st.st_uid, geteuid());
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
    TWT_EQ(chmod(path, 0644), 0);
    TWT_EQ(tw_seg_attach(name, size, &other), TW_ERR_PROTOCOL);
    TWT_EQ(tw_seg_unlink(&seg), TW_OK);
    TWT_CHECK(stat(path, &st) != 0 && errno == ENOENT); /* the name is gone at once */
    TWT_EQ(((unsigned char *)seg.base)[63], 0x5a);      /* the mapping lives on */
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
    TWT_EQ(stat(victim, &st), 0);
    TWT_EQ(st.st_size, 0); /* untouched */
    unlink(path);
    unlink(victim);

    /* more than /dev/shm can hold: an error now, nothing left behind */
    TWT_EQ(tw_seg_make_name("k", name, sizeof(name)), TW_OK);
    TWT_EQ(tw_seg_create(name, (size_t)1 << 42, &seg), TW_ERR_NOMEM);
    TWT_CHECK(!seg_exists(name));
    printf("segments: 0600 and ours, shared, exclusive, checked on attach, gone after unlink, "
           "no symlink followed, ENOSPC at creation, none left behind\n");
    return 0;
}
