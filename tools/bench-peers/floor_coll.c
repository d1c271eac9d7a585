/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * floor_coll: the floor under the smallest collectives of tools/perf-coll.sh
 * -- the same loop as tw_coll_perf and mpi_coll (tools/perf/coll_bench.h),
 * over nothing but the medium between the two processes, with no library
 * in the timed path:
 *
 *   shm  (both ranks on one node) a shared mapping: each rank writes its
 *        own 128-byte line (the data, then a sequence number, release) and
 *        spins on the other's (acquire): a barrier is one store and one
 *        wait, an allreduce one exchange of the data lines, a bcast the
 *        root's store and the other's wait;
 *   tcp  (ranks on two nodes, or FLOOR_VIA=tcp) one TCP connection with
 *        TCP_NODELAY: a barrier or allreduce sends its byte or data and
 *        spins on a nonblocking recv(2) for the other's; a bcast is the
 *        root's send and the other's recv.
 *
 * MPI starts the two ranks and carries the set-up (the mapping's name, the
 * listener's host and port) and the report; nothing of MPI runs while a
 * collective is timed. What a library adds on top -- calls, checks,
 * matching, its progress engine -- is the distance between its figure and
 * this one, measured in the same run; a library cannot beat the medium a
 * collective must cross (a barrier between two cores needs a cache line
 * to cross from each to the other at least once).
 *
 *   mpirun -np 2 floor_coll [-c barrier|bcast|allreduce] [-m MIN:MAX] ...
 *
 * Two ranks and one thread; bcast and allreduce (doubles, sum, root 0) of
 * up to 64 bytes. Options and output as coll_bench.h (IMPL floor-shm or
 * floor-tcp). FLOOR_VIA=shm|tcp chooses the medium (default: shm when the
 * ranks share a node, by MPI_COMM_TYPE_SHARED; else tcp).
 * Build: mpicc -O2 -o floor_coll tools/bench-peers/floor_coll.c -lpthread
 */
#define _GNU_SOURCE /* getaddrinfo, gethostname, shm_open */
#include <fcntl.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../perf/coll_bench.h"

#define FL_MAX_BYTES 64 /* data in a line, beside its sequence number */

typedef struct fl_line {
    _Alignas(128) atomic_uint_fast64_t seq;
    unsigned char data[FL_MAX_BYTES];
} fl_line_t;

/* The shared mapping: a barrier line per rank, and per rank two data
 * lines used by turns (a rank is at most one operation ahead of the
 * other: the line it writes next was read before the other went on). */
typedef struct fl_shm {
    fl_line_t bar[2];
    fl_line_t data[2][2]; /* [rank][seq & 1] */
} fl_shm_t;

typedef struct fl_handle {
    int me;
    fl_shm_t *shm; /* or NULL: tcp */
    int fd;        /* tcp */
    uint64_t bar_seq, data_seq;
} fl_handle_t;

static int fl_rank;

static void fl_die(const char *what)
{
    fprintf(stderr, "floor_coll: rank %d: %s: %s\n", fl_rank, what, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static uint64_t fl_wait(const fl_line_t *l, uint64_t seq)
{
    uint64_t v;

    while ((v = atomic_load_explicit(&l->seq, memory_order_acquire)) < seq) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause(); /* lets the writer have the line sooner */
#endif
    }
    return v;
}

static void fl_post(fl_line_t *l, uint64_t seq, const void *buf, size_t len)
{
    memcpy(l->data, buf, len);
    atomic_store_explicit(&l->seq, seq, memory_order_release);
}

static int fl_send(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            fprintf(stderr, "floor_coll: rank %d: send: %s\n", fl_rank, strerror(errno));
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Spins on a nonblocking recv(2), as a polling library does. */
static int fl_recv(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            fprintf(stderr, "floor_coll: rank %d: the peer closed the connection\n", fl_rank);
            return -1;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            fprintf(stderr, "floor_coll: rank %d: recv: %s\n", fl_rank, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int fl_barrier(void *hv)
{
    fl_handle_t *h = hv;
    unsigned char b = 1;

    if (h->shm == NULL) {
        return fl_send(h->fd, &b, 1) != 0 || fl_recv(h->fd, &b, 1) != 0 ? -1 : 0;
    }
    uint64_t s = ++h->bar_seq;
    atomic_store_explicit(&h->shm->bar[h->me].seq, s, memory_order_release);
    fl_wait(&h->shm->bar[!h->me], s);
    return 0;
}

/* Two doubles' sums in rank order (rank 0's first), as a library's
 * deterministic reduction. */
static void fl_sum(double *dst, const void *mine, const void *theirs, size_t bytes, int me)
{
    double a[FL_MAX_BYTES / sizeof(double)], b[FL_MAX_BYTES / sizeof(double)];

    memcpy(me == 0 ? a : b, mine, bytes);
    memcpy(me == 0 ? b : a, theirs, bytes);
    for (size_t j = 0; j < bytes / sizeof(double); j++) {
        dst[j] = a[j] + b[j];
    }
}

static int fl_coll(void *hv, cb_coll_t c, const void *sbuf, void *rbuf, size_t bytes)
{
    fl_handle_t *h = hv;
    unsigned char theirs[FL_MAX_BYTES];

    if (c == CB_BARRIER) {
        return fl_barrier(hv);
    }
    if (bytes > FL_MAX_BYTES || (c != CB_BCAST && c != CB_ALLREDUCE)) {
        fprintf(stderr,
                "floor_coll: %s of %zu bytes: only barrier, and bcast and allreduce of up"
                " to %d bytes\n",
                cb_coll_names[c], bytes, FL_MAX_BYTES);
        return -1;
    }
    if (h->shm == NULL) {
        if (c == CB_BCAST) {
            return h->me == 0 ? fl_send(h->fd, rbuf, bytes) : fl_recv(h->fd, rbuf, bytes);
        }
        if (fl_send(h->fd, sbuf, bytes) != 0 || fl_recv(h->fd, theirs, bytes) != 0) {
            return -1;
        }
        fl_sum(rbuf, sbuf, theirs, bytes, h->me);
        return 0;
    }
    uint64_t s = ++h->data_seq;
    fl_line_t *mine = &h->shm->data[h->me][s & 1], *peer = &h->shm->data[!h->me][s & 1];
    if (c == CB_BCAST) {
        if (h->me == 0) {
            fl_post(mine, s, rbuf, bytes);
        } else {
            fl_wait(&h->shm->data[0][s & 1], s);
            memcpy(rbuf, h->shm->data[0][s & 1].data, bytes);
        }
        return 0;
    }
    fl_post(mine, s, sbuf, bytes);
    fl_wait(peer, s);
    memcpy(theirs, peer->data, bytes);
    fl_sum(rbuf, sbuf, theirs, bytes, h->me);
    return 0;
}

static int fl_allreduce_d(double *v, int n, cb_redop_t op)
{
    MPI_Op mop = op == CB_SUM ? MPI_SUM : op == CB_MIN ? MPI_MIN : MPI_MAX;

    return MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, mop, MPI_COMM_WORLD) == MPI_SUCCESS ? 0
                                                                                             : -1;
}

/* Rank 0 makes the mapping and names it; rank 1 opens it; the name is
 * gone from /dev/shm before the first collective. */
static fl_shm_t *fl_shm_setup(void)
{
    char name[64];
    int fd;
    void *p;

    if (fl_rank == 0) {
        snprintf(name, sizeof(name), "/floor_coll.%ld", (long)getpid());
    }
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    fd = fl_rank == 0 ? shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600) : -1;
    if (fl_rank == 0 && (fd < 0 || ftruncate(fd, sizeof(fl_shm_t)) != 0)) {
        fl_die("making the shared mapping");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (fl_rank == 1 && (fd = shm_open(name, O_RDWR, 0)) < 0) {
        int err = errno;
        shm_unlink(name); /* the abort ends rank 0 before it could */
        errno = err;
        fl_die("opening the shared mapping");
    }
    p = mmap(NULL, sizeof(fl_shm_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        fl_die("mmap");
    }
    close(fd);
    MPI_Barrier(MPI_COMM_WORLD);
    if (fl_rank == 0) {
        shm_unlink(name);
    }
    return p;
}

/* Rank 1 listens on every address and sends its host name and port; rank
 * 0 connects to that name. */
static int fl_tcp_setup(void)
{
    struct {
        char host[256];
        char port[16];
    } where = {0};
    int one = 1, fd;

    if (fl_rank == 1) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
        socklen_t alen = sizeof(a);
        int lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 1) != 0 ||
            getsockname(lfd, (struct sockaddr *)&a, &alen) != 0 ||
            gethostname(where.host, sizeof(where.host) - 1) != 0) {
            fl_die("listening");
        }
        snprintf(where.port, sizeof(where.port), "%u", ntohs(a.sin_port));
        MPI_Send(&where, sizeof(where), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        if ((fd = accept(lfd, NULL, NULL)) < 0) {
            fl_die("accept");
        }
        close(lfd);
    } else {
        struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
        MPI_Recv(&where, sizeof(where), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int rc = getaddrinfo(where.host, where.port, &hints, &ai);
        if (rc != 0) {
            fprintf(stderr, "floor_coll: rank 0: %s:%s: %s\n", where.host, where.port,
                    gai_strerror(rc));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
            connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            fl_die("connecting to rank 1");
        }
        freeaddrinfo(ai);
    }
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        fl_die("TCP_NODELAY");
    }
    return fd;
}

int main(int argc, char **argv)
{
    cb_opts_t o;
    cb_ops_t ops = {.prog = "floor_coll",
                    .coll = fl_coll,
                    .barrier = fl_barrier,
                    .allreduce_d = fl_allreduce_d};
    fl_handle_t h = {.fd = -1};
    void *handles[1] = {&h};
    const char *via = getenv("FLOOR_VIA");
    MPI_Comm node;
    int rc, local;

    if ((rc = cb_parse(&o, argc, argv, "floor_coll", "mpirun -np 2 floor_coll")) >= 0) {
        return rc;
    }
    if (o.threads != 1 || o.coll == CB_REDUCE || o.coll == CB_IALLREDUCE ||
        (o.coll != CB_BARRIER && o.max > FL_MAX_BYTES)) {
        fprintf(stderr,
                "floor_coll: one thread; barrier, and bcast and allreduce of up to %d"
                " bytes (-m)\n",
                FL_MAX_BYTES);
        return 2;
    }
    if (via != NULL && strcmp(via, "shm") != 0 && strcmp(via, "tcp") != 0) {
        fprintf(stderr, "floor_coll: FLOOR_VIA=%s: shm or tcp\n", via);
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &ops.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ops.size);
    fl_rank = h.me = ops.rank;
    if (ops.size != 2) {
        if (ops.rank == 0) {
            fprintf(stderr, "floor_coll: two ranks, not %d\n", ops.size);
        }
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    if (via != NULL ? strcmp(via, "shm") == 0 : local == 2) {
        if (local != 2) {
            if (ops.rank == 0) {
                fprintf(stderr, "floor_coll: FLOOR_VIA=shm: the ranks are on two nodes\n");
            }
            MPI_Finalize();
            return 2;
        }
        h.shm = fl_shm_setup();
        ops.impl = "floor-shm";
    } else {
        h.fd = fl_tcp_setup();
        ops.impl = "floor-tcp";
    }
    rc = cb_run(&ops, &o, handles);
    if (h.shm != NULL) {
        munmap(h.shm, sizeof(*h.shm));
    } else {
        close(h.fd);
    }
    MPI_Finalize();
    return rc;
}
