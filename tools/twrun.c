/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * twrun: the embedded local launcher.
 *
 *   twrun -n N [--keep-going] [--bind core|none] [--] PROGRAM [ARGS...]
 *
 * Forks N local processes and gives each, in its environment, TW_RANK,
 * TW_SIZE, TW_LOCAL_RANK, TW_LOCAL_SIZE, a random 128-bit TW_JOB_KEY and
 * TW_BOOT_ADDR: a unix socket in a fresh 0700 directory where twrun serves
 * the address exchange (one blob per rank: put, fence, get). Connections
 * from another uid are refused (SO_PEERCRED).
 *
 * twrun is every rank's lifeline: each rank gets PR_SET_PDEATHSIG(SIGKILL),
 * so ranks die with twrun. When a rank dies abnormally (a signal, or a
 * non-zero exit), twrun prints which rank and how, stops the others
 * (SIGTERM, then SIGKILL after a second) -- unless --keep-going, where the
 * survivors go on. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to
 * every rank. The exit status is the first failure's (exit code, or 128 +
 * signal number), 0 when every rank exited 0. Once all ranks are gone it
 * removes shared-memory segments of the job that a rank killed early in
 * tw_init left in /dev/shm. --bind core pins rank r to the r-th CPU (modulo
 * their count) of those twrun may use, as mpirun --bind-to core does; the
 * progress threads of a rank still bind to their CPU socket (tw_topo).
 *
 * Wire protocol on TW_BOOT_ADDR (little-endian, all lengths checked):
 *   request  u32 op | u32 rank | u32 len | len bytes
 *   op 1 PUT   store the blob of `rank` (the caller's own), reply status
 *   op 2 FENCE reply once all ranks have fenced (or a rank died)
 *   op 3 GET   reply with the blob of `rank`
 *   reply    i32 status (0 ok, -1 error) | u32 len | len bytes
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/tw_crc32c.h"

#define TWRUN_MAX_RANKS 1024
#define TWRUN_MAX_BLOB  4096
#define TWRUN_MAX_CONN  (TWRUN_MAX_RANKS + 16)

enum { OP_PUT = 1, OP_FENCE = 2, OP_GET = 3 };

typedef struct rank_state {
    pid_t pid;
    bool alive;
    int status; /* waitpid status once dead */
    unsigned char blob[TWRUN_MAX_BLOB];
    uint32_t blob_len;
    bool has_blob;
} rank_state_t;

typedef struct conn {
    int fd;
    bool fencing; /* waiting for a FENCE reply */
} conn_t;

static rank_state_t *ranks;
static int nranks;
static conn_t conns[TWRUN_MAX_CONN];
static int nconns;
static int fence_count;
static char sockdir[64], sockpath[100]; /* sun_path holds 108 */

static void usage(FILE *out, const char *argv0)
{
    fprintf(out,
            "usage: %s -n N [--keep-going] [--bind core|none] [--] PROGRAM [ARGS...]\n"
            "  -n, --np N       start N local processes (ranks 0..N-1), 1..%d\n"
            "  -k, --keep-going when a rank dies, let the others go on (fault-tolerant\n"
            "                   jobs); the exit status still reports the death\n"
            "  -b, --bind WHAT  core: pin rank r to the r-th usable CPU (modulo their\n"
            "                   count); none (default): leave placement to the kernel\n"
            "  -h, --help       this text\n"
            "Each rank gets TW_RANK, TW_SIZE, TW_LOCAL_RANK, TW_LOCAL_SIZE, TW_JOB_KEY\n"
            "and TW_BOOT_ADDR in its environment. Ranks die with twrun; when a rank\n"
            "dies abnormally twrun reports it and stops the others. SIGINT, SIGTERM,\n"
            "SIGHUP and SIGQUIT are forwarded to every rank.\n",
            argv0, TWRUN_MAX_RANKS);
}

/* Segments are named "tw-<CRC32C of the job key>-<random>" (tw_seg.c)
 * and unlinked by their ranks during tw_init; a rank killed before that
 * leaves one behind. Once every rank is gone, remove what is left. */
static void sweep_segments(const char *keyhex)
{
    char prefix[32];
    struct dirent *e;
    DIR *d;

    snprintf(prefix, sizeof(prefix), "tw-%08x-", tw_crc32c(0, keyhex, strlen(keyhex)));
    d = opendir("/dev/shm");
    if (d == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char name[sizeof(e->d_name) + 1];
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) {
            continue;
        }
        snprintf(name, sizeof(name), "/%s", e->d_name);
        if (shm_unlink(name) == 0) {
            fprintf(stderr, "twrun: removed the leftover segment /dev/shm%s\n", name);
        }
    }
    closedir(d);
}

static void cleanup_dir(void)
{
    if (sockpath[0] != '\0') {
        unlink(sockpath);
    }
    if (sockdir[0] != '\0') {
        rmdir(sockdir);
    }
}

/* Move exactly @p len bytes (write when @p out); -1 on EOF or error. */
static int io_all(int fd, void *buf, size_t len, bool out)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    return io_all(fd, (void *)buf, len, true);
}
static int read_all(int fd, void *buf, size_t len)
{
    return io_all(fd, buf, len, false);
}

static int reply(int fd, int32_t status, const void *data, uint32_t len)
{
    unsigned char hdr[8];
    memcpy(hdr, &status, 4);
    memcpy(hdr + 4, &len, 4);
    if (write_all(fd, hdr, 8) != 0) {
        return -1;
    }
    return len > 0 ? write_all(fd, data, len) : 0;
}

static void close_conn(int i)
{
    if (conns[i].fencing) {
        fence_count--;
    }
    close(conns[i].fd);
    conns[i] = conns[--nconns];
}

static int alive_count(void)
{
    int n = 0;
    for (int r = 0; r < nranks; r++) {
        n += ranks[r].alive;
    }
    return n;
}

/* Answer every waiting FENCE when all live ranks have fenced. */
static void fence_release(void)
{
    if (fence_count == 0 || fence_count < alive_count()) {
        return;
    }
    for (int i = 0; i < nconns; i++) {
        if (conns[i].fencing) {
            conns[i].fencing = false;
            reply(conns[i].fd, alive_count() == nranks ? 0 : -1, NULL, 0);
        }
    }
    fence_count = 0;
}

/* One request; -1 closes the connection. A bad request is never trusted. */
static int serve(int i)
{
    uint32_t hdr[3], op, rank, len;
    int fd = conns[i].fd;

    if (read_all(fd, hdr, sizeof(hdr)) != 0) {
        return -1; /* EOF: the rank is gone or done */
    }
    op = hdr[0];
    rank = hdr[1];
    len = hdr[2];
    if (rank >= (uint32_t)nranks || len > TWRUN_MAX_BLOB) {
        fprintf(stderr, "twrun: malformed request (op %u, rank %u, len %u): closing\n", op, rank,
                len);
        return -1;
    }
    switch (op) {
    case OP_PUT:
        if (read_all(fd, ranks[rank].blob, len) != 0) {
            return -1;
        }
        ranks[rank].blob_len = len;
        ranks[rank].has_blob = true;
        return reply(fd, 0, NULL, 0);
    case OP_FENCE:
        if (len != 0 || conns[i].fencing) {
            return -1;
        }
        conns[i].fencing = true;
        fence_count++;
        fence_release();
        return 0;
    case OP_GET:
        if (len != 0) {
            return -1;
        }
        if (!ranks[rank].has_blob) {
            return reply(fd, -1, NULL, 0);
        }
        return reply(fd, 0, ranks[rank].blob, ranks[rank].blob_len);
    default:
        fprintf(stderr, "twrun: unknown request %u: closing\n", op);
        return -1;
    }
}

static void accept_one(int lfd)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0) {
        return;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != getuid() ||
        nconns == TWRUN_MAX_CONN) {
        fprintf(stderr, "twrun: refused a bootstrap connection (uid %d)\n", (int)cred.uid);
        close(fd);
        return;
    }
    conns[nconns++] = (conn_t){.fd = fd, .fencing = false};
}

static void signal_all(int sig)
{
    for (int r = 0; r < nranks; r++) {
        if (ranks[r].alive) {
            kill(ranks[r].pid, sig);
        }
    }
}

static void describe(int r, int st, char *buf, size_t len)
{
    if (WIFSIGNALED(st)) {
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    }
    (void)r;
}

typedef struct twrun_opts {
    bool keep_going;
    bool bind_core;
    char **cmd; /* the program and its arguments */
} twrun_opts_t;

/* Options; returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, twrun_opts_t *o)
{
    static const struct option opts[] = {{"np", required_argument, NULL, 'n'},
                                         {"keep-going", no_argument, NULL, 'k'},
                                         {"bind", required_argument, NULL, 'b'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int opt;

    while ((opt = getopt_long(argc, argv, "+n:kb:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            nranks = atoi(optarg);
            break;
        case 'k':
            o->keep_going = true;
            break;
        case 'b':
            if (strcmp(optarg, "core") != 0 && strcmp(optarg, "none") != 0) {
                fprintf(stderr, "twrun: --bind %s: want core or none\n", optarg);
                return 2;
            }
            o->bind_core = strcmp(optarg, "core") == 0;
            break;
        case 'h':
            usage(stdout, argv[0]);
            return 0;
        default:
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (nranks < 1 || nranks > TWRUN_MAX_RANKS || optind >= argc) {
        usage(stderr, argv[0]);
        return 2;
    }
    o->cmd = &argv[optind];
    return -1;
}

/* The job key (hex), the socket directory and the listening socket. */
static int job_setup(char keyhex[33])
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    unsigned char key[16];
    int lfd;

    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        perror("twrun: getrandom");
        return -1;
    }
    for (int i = 0; i < 16; i++) {
        snprintf(keyhex + 2 * i, 3, "%02x", key[i]);
    }
    snprintf(sockdir, sizeof(sockdir), "/tmp/twrun.XXXXXX");
    if (mkdtemp(sockdir) == NULL) {
        perror("twrun: mkdtemp");
        return -1;
    }
    atexit(cleanup_dir);
    snprintf(sockpath, sizeof(sockpath), "%s/boot.sock", sockdir);
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sockpath);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(lfd, 128) != 0) {
        perror("twrun: bootstrap socket");
        return -1;
    }
    return lfd;
}

/* Bind the calling rank @p r to the (r mod count)-th CPU of @p usable. */
static void bind_rank(int r, const cpu_set_t *usable)
{
    int want = r % CPU_COUNT(usable), seen = 0;

    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, usable) && seen++ == want) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            if (sched_setaffinity(0, sizeof(one), &one) != 0) {
                fprintf(stderr, "twrun: cannot bind rank %d to cpu %d: %s\n", r, cpu,
                        strerror(errno));
            }
            return;
        }
    }
}

/* In the child: become rank @p r of the job and run the program. */
static void exec_rank(int r, pid_t parent, const sigset_t *mask, const twrun_opts_t *o,
                      const cpu_set_t *usable, const char *keyhex)
{
    char num[16];

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
        _exit(127); /* twrun died before we armed the lifeline */
    }
    sigprocmask(SIG_UNBLOCK, mask, NULL);
    if (o->bind_core) {
        bind_rank(r, usable);
    }
    snprintf(num, sizeof(num), "%d", r);
    setenv("TW_RANK", num, 1);
    setenv("TW_LOCAL_RANK", num, 1);
    snprintf(num, sizeof(num), "%d", nranks);
    setenv("TW_SIZE", num, 1);
    setenv("TW_LOCAL_SIZE", num, 1);
    setenv("TW_JOB_KEY", keyhex, 1);
    setenv("TW_BOOT_ADDR", sockpath, 1);
    execvp(o->cmd[0], o->cmd);
    fprintf(stderr, "twrun: cannot run %s: %s\n", o->cmd[0], strerror(errno));
    _exit(127);
}

static int spawn_ranks(const sigset_t *mask, const twrun_opts_t *o, const char *keyhex)
{
    cpu_set_t usable;
    pid_t self = getpid();

    if (o->bind_core && sched_getaffinity(0, sizeof(usable), &usable) != 0) {
        perror("twrun: sched_getaffinity");
        return -1;
    }
    for (int r = 0; r < nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("twrun: fork");
            signal_all(SIGKILL);
            return -1;
        }
        if (pid == 0) {
            exec_rank(r, self, mask, o, &usable, keyhex);
        }
        ranks[r].pid = pid;
        ranks[r].alive = true;
    }
    return 0;
}

/* The job's state while it runs. */
typedef struct twrun_loop {
    const twrun_opts_t *o;
    int exit_code;           /* the first failure's */
    struct timespec stop_at; /* SIGKILL the rest then (0: not stopping) */
} twrun_loop_t;

/* Reap the ranks that ended; the first that failed stops the others
 * (SIGTERM, then SIGKILL a second later) unless --keep-going. */
static void reap(twrun_loop_t *l)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0) {
            return;
        }
        for (int r = 0; r < nranks; r++) {
            if (ranks[r].pid != pid || !ranks[r].alive) {
                continue;
            }
            ranks[r].alive = false;
            ranks[r].status = st;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                break;
            }
            char how[96];
            describe(r, st, how, sizeof(how));
            fprintf(stderr, "twrun: rank %d (pid %d) %s\n", r, (int)pid, how);
            if (l->exit_code == 0) {
                l->exit_code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
            }
            if (!l->o->keep_going && l->stop_at.tv_sec == 0 && alive_count() > 0) {
                fprintf(stderr, "twrun: stopping the other %d rank(s)\n", alive_count());
                signal_all(SIGTERM);
                clock_gettime(CLOCK_MONOTONIC, &l->stop_at);
                l->stop_at.tv_sec += 1;
            }
            break;
        }
    }
}

/* Serve the exchange and watch the ranks until every one ended. */
static void run_job(twrun_loop_t *l, int sfd, int lfd)
{
    while (alive_count() > 0) {
        struct pollfd pfd[2 + TWRUN_MAX_CONN];
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < nconns; i++) {
            pfd[n++] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
        }
        if (poll(pfd, (nfds_t)n, 200) < 0 && errno != EINTR) {
            perror("twrun: poll");
            return;
        }
        if (l->stop_at.tv_sec != 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > l->stop_at.tv_sec ||
                (now.tv_sec == l->stop_at.tv_sec && now.tv_nsec >= l->stop_at.tv_nsec)) {
                signal_all(SIGKILL);
            }
        }
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si) && si.ssi_signo != SIGCHLD) {
                signal_all((int)si.ssi_signo); /* forward */
            }
            reap(l);
            fence_release(); /* a death may complete (and fail) a fence */
        }
        if (pfd[1].revents & POLLIN) {
            accept_one(lfd);
        }
        for (int i = n - 3; i >= 0; i--) {
            if (i < nconns && (pfd[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                serve(i) != 0) {
                close_conn(i);
            }
        }
    }
}

int main(int argc, char **argv)
{
    twrun_opts_t o = {0};
    twrun_loop_t l = {.o = &o};
    int lfd, sfd, rc = parse_args(argc, argv, &o);
    char keyhex[33];
    sigset_t mask;

    if (rc >= 0) {
        return rc;
    }
    lfd = job_setup(keyhex);
    if (lfd < 0) {
        return 1;
    }
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    ranks = calloc((size_t)nranks, sizeof(*ranks));
    if (sfd < 0 || ranks == NULL) {
        perror("twrun: setup");
        return 1;
    }
    if (spawn_ranks(&mask, &o, keyhex) != 0) {
        return 1;
    }
    run_job(&l, sfd, lfd);
    for (int i = nconns - 1; i >= 0; i--) {
        close_conn(i);
    }
    close(lfd);
    free(ranks);
    sweep_segments(keyhex);
    return l.exit_code;
}
