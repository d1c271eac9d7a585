/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * pmix_probe: proves an emulated cluster (run-cluster.sh) until threadwire
 * itself speaks PMIx. A plain PMIx client, no threadwire:
 *
 *   1. PMIx_Init; the job size from the launcher.
 *   2. Put one value, "rank=<r> host=<hostname> node=<PMIX_NODEID>
 *      ip=<address>:<port>" (the node id as the launcher told it to the
 *      process -- Open MPI gives a peer's only on the same node; the
 *      address is the process's first non-loopback IPv4 address, the port
 *      that of a TCP socket it listens on there), Commit, and Fence with
 *      PMIX_COLLECT_DATA and a timeout (under Slurm a fence that collects
 *      nothing is no barrier).
 *   3. Get every peer's value and check it: the rank it names is the
 *      peer's, its hostname is the one the launcher places that peer on
 *      (PMIX_HOSTNAME), and two peers share a hostname exactly when they
 *      share a PMIX_NODEID.
 *   4. With --expect-nodes N: the ranks sit on N distinct hostnames with N
 *      distinct addresses (one emulated node each).
 *   5. With --tcp: connect to the next rank's address and port, send our
 *      rank, accept the previous rank's connection, and check both the
 *      rank it sends and the address it comes from. Between emulated nodes
 *      this traffic crosses the veth pairs and the bridge.
 *   6. A second collecting fence, so nobody leaves while a peer still
 *      talks to it; Finalize.
 *
 * Prints one line per rank; exits 0 only if every check held, 1 if one
 * failed, 77 when no PMIx launcher started it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pmix.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define PROBE_KEY "tw.cluster.probe"
/* Seconds. A rank whose own checks failed skips the TCP ring: its
 * neighbour then waits PROBE_TCP_TIMEOUT, well inside run-cluster.sh's
 * default 45 s for the whole job. */
#define PROBE_FENCE_TIMEOUT 30
#define PROBE_TCP_TIMEOUT   10

typedef struct probe_peer {
    char host[256];
    char ip[INET_ADDRSTRLEN];
    unsigned port;
    uint32_t nodeid;
} probe_peer_t;

typedef struct probe {
    pmix_proc_t me;
    uint32_t nprocs;
    probe_peer_t *peers;
    int lfd;    /* our TCP listener, or -1 */
    int failed; /* checks that did not hold */
} probe_t;

static void probe_fail(probe_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void probe_fail(probe_t *p, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pmix_probe: rank %u: ", p->me.rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    p->failed++;
}

/* The first non-loopback IPv4 address: on an emulated node, the address on
 * the bridge; "0.0.0.0" if there is none. */
static void probe_local_ip(char *buf, size_t len)
{
    struct ifaddrs *ifs, *i;
    snprintf(buf, len, "0.0.0.0");
    if (getifaddrs(&ifs) != 0) {
        return;
    }
    for (i = ifs; i != NULL; i = i->ifa_next) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;
        if (sin == NULL || sin->sin_family != AF_INET || ntohl(sin->sin_addr.s_addr) >> 24 == 127) {
            continue;
        }
        inet_ntop(AF_INET, &sin->sin_addr, buf, (socklen_t)len);
        break;
    }
    freeifaddrs(ifs);
}

/* A TCP listener on our address; its port goes into our PMIx value. */
static int probe_listen(probe_t *p, const char *ip, unsigned *port_p)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || inet_pton(AF_INET, ip, &sin.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        probe_fail(p, "cannot listen on %s: %s", ip, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    *port_p = ntohs(sin.sin_port);
    return fd;
}

static pmix_status_t probe_fence(probe_t *p)
{
    pmix_info_t info[2];
    bool collect = true;
    int timeout = PROBE_FENCE_TIMEOUT;
    pmix_status_t rc;

    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS) {
        probe_fail(p, "PMIx_Fence: %s", PMIx_Error_string(rc));
    }
    return rc;
}

/* PMIx_Get of one key of one rank (PMIX_RANK_WILDCARD: the job's). */
static pmix_value_t *probe_get(probe_t *p, pmix_rank_t rank, const char *key)
{
    pmix_proc_t proc;
    pmix_value_t *val = NULL;
    pmix_status_t rc;

    PMIX_LOAD_PROCID(&proc, p->me.nspace, rank);
    rc = PMIx_Get(&proc, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS) {
        probe_fail(p, "PMIx_Get(rank %u, %s): %s", rank, key, PMIx_Error_string(rc));
        return NULL;
    }
    return val;
}

/* Reads rank r's value and the launcher's view of it into p->peers[r]. */
static void probe_read_peer(probe_t *p, pmix_rank_t r)
{
    probe_peer_t *peer = &p->peers[r];
    pmix_value_t *val;
    unsigned said_rank;
    char host[256];

    if ((val = probe_get(p, r, PROBE_KEY)) == NULL) {
        return;
    }
    if (val->type != PMIX_STRING ||
        sscanf(val->data.string, "rank=%u host=%255s node=%u ip=%15[0-9.]:%u", &said_rank,
               peer->host, &peer->nodeid, peer->ip, &peer->port) != 5) {
        probe_fail(p, "rank %u put a malformed value", r);
    } else if (said_rank != r) {
        probe_fail(p, "rank %u's value names rank %u", r, said_rank);
    }
    PMIX_VALUE_RELEASE(val);

    if ((val = probe_get(p, r, PMIX_HOSTNAME)) != NULL) {
        snprintf(host, sizeof(host), "%s", val->type == PMIX_STRING ? val->data.string : "?");
        if (strcmp(host, peer->host) != 0) {
            probe_fail(p, "rank %u runs on host '%s' but the launcher placed it on '%s'", r,
                       peer->host, host);
        }
        PMIX_VALUE_RELEASE(val);
    }
}

/* Same host exactly when same node id; count the distinct hosts and
 * addresses. */
static void probe_check_nodes(probe_t *p, int expect_nodes)
{
    int hosts = 0, ips = 0;
    uint32_t a, b;

    for (a = 0; a < p->nprocs; a++) {
        bool new_host = true, new_ip = true;
        for (b = 0; b < a; b++) {
            bool same_host = strcmp(p->peers[a].host, p->peers[b].host) == 0;
            if (same_host != (p->peers[a].nodeid == p->peers[b].nodeid)) {
                probe_fail(p, "ranks %u and %u: hosts '%s'/'%s' but node ids %u/%u", a, b,
                           p->peers[a].host, p->peers[b].host, p->peers[a].nodeid,
                           p->peers[b].nodeid);
            }
            new_host = new_host && !same_host;
            new_ip = new_ip && strcmp(p->peers[a].ip, p->peers[b].ip) != 0;
        }
        hosts += new_host;
        ips += new_ip;
    }
    if (expect_nodes > 0 && (hosts != expect_nodes || ips != expect_nodes)) {
        probe_fail(p, "%d distinct hostnames and %d distinct addresses, expected %d of each", hosts,
                   ips, expect_nodes);
    }
}

/* Connect to the next rank, send our rank; accept the previous rank's
 * connection and check what it sends and where it comes from. */
static void probe_tcp_ring(probe_t *p)
{
    uint32_t next = (p->me.rank + 1) % p->nprocs;
    uint32_t prev = (p->me.rank + p->nprocs - 1) % p->nprocs;
    struct sockaddr_in to = {.sin_family = AF_INET}, from;
    socklen_t len = sizeof(from);
    struct timeval tv = {.tv_sec = PROBE_TCP_TIMEOUT};
    struct pollfd pfd = {.fd = p->lfd, .events = POLLIN};
    uint32_t word = htonl(p->me.rank), got = 0;
    char from_ip[INET_ADDRSTRLEN] = "?";
    int cfd, afd;

    to.sin_port = htons((uint16_t)p->peers[next].port);
    cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cfd < 0 || inet_pton(AF_INET, p->peers[next].ip, &to.sin_addr) != 1 ||
        setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        connect(cfd, (struct sockaddr *)&to, sizeof(to)) != 0 ||
        send(cfd, &word, sizeof(word), MSG_NOSIGNAL) != (ssize_t)sizeof(word)) {
        probe_fail(p, "tcp to rank %u at %s:%u: %s", next, p->peers[next].ip, p->peers[next].port,
                   strerror(errno));
    }
    if (poll(&pfd, 1, PROBE_TCP_TIMEOUT * 1000) != 1 ||
        (afd = accept(p->lfd, (struct sockaddr *)&from, &len)) < 0) {
        probe_fail(p, "no tcp connection from rank %u within %d s", prev, PROBE_TCP_TIMEOUT);
    } else {
        inet_ntop(AF_INET, &from.sin_addr, from_ip, sizeof(from_ip));
        if (setsockopt(afd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
            recv(afd, &got, sizeof(got), MSG_WAITALL) != (ssize_t)sizeof(got) ||
            ntohl(got) != prev) {
            probe_fail(p, "tcp from %s: expected rank %u's word", from_ip, prev);
        } else if (strcmp(from_ip, p->peers[prev].ip) != 0) {
            probe_fail(p, "tcp from rank %u came from %s, not its address %s", prev, from_ip,
                       p->peers[prev].ip);
        }
        close(afd);
    }
    if (cfd >= 0) {
        close(cfd);
    }
}

static int probe_usage(void)
{
    fprintf(stderr, "usage: pmix_probe [--expect-nodes N] [--tcp]\n");
    return 2;
}

int main(int argc, char **argv)
{
    probe_t p = {.lfd = -1};
    int expect_nodes = 0, i;
    bool tcp = false;
    char host[256], ip[INET_ADDRSTRLEN], value[512];
    unsigned port = 0;
    uint32_t nodeid;
    pmix_value_t *val, put;
    pmix_status_t rc;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--expect-nodes") == 0 && i + 1 < argc) {
            expect_nodes = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--tcp") == 0) {
            tcp = true;
        } else {
            return probe_usage();
        }
    }
    /* PMIx_Init without a launcher fails but leaves the library half up. */
    if (getenv("PMIX_NAMESPACE") == NULL || getenv("PMIX_RANK") == NULL) {
        fprintf(stderr, "pmix_probe: skipped: not started by a PMIx launcher "
                        "(no PMIX_NAMESPACE / PMIX_RANK)\n");
        return 77;
    }
    rc = PMIx_Init(&p.me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "pmix_probe: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if ((val = probe_get(&p, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE)) == NULL) {
        goto out_finalize;
    }
    p.nprocs = val->type == PMIX_UINT32 ? val->data.uint32 : 0;
    PMIX_VALUE_RELEASE(val);
    p.peers = calloc(p.nprocs ? p.nprocs : 1, sizeof(*p.peers));
    if (p.nprocs == 0 || p.peers == NULL) {
        probe_fail(&p, "job size %u, or out of memory", p.nprocs);
        goto out_finalize;
    }

    if (gethostname(host, sizeof(host)) != 0) {
        snprintf(host, sizeof(host), "?");
    }
    probe_local_ip(ip, sizeof(ip));
    if (tcp) {
        p.lfd = probe_listen(&p, ip, &port);
    }
    if ((val = probe_get(&p, p.me.rank, PMIX_NODEID)) == NULL) {
        goto out_free;
    }
    nodeid = val->type == PMIX_UINT32 ? val->data.uint32 : UINT32_MAX;
    PMIX_VALUE_RELEASE(val);
    snprintf(value, sizeof(value), "rank=%u host=%s node=%u ip=%s:%u", p.me.rank, host, nodeid, ip,
             port);
    PMIX_VALUE_CONSTRUCT(&put);
    put.type = PMIX_STRING;
    put.data.string = value;
    if ((rc = PMIx_Put(PMIX_GLOBAL, PROBE_KEY, &put)) != PMIX_SUCCESS ||
        (rc = PMIx_Commit()) != PMIX_SUCCESS) {
        probe_fail(&p, "PMIx_Put/Commit: %s", PMIx_Error_string(rc));
        goto out_free;
    }
    if (probe_fence(&p) != PMIX_SUCCESS) {
        goto out_free;
    }
    for (uint32_t r = 0; r < p.nprocs; r++) {
        probe_read_peer(&p, r);
    }
    probe_check_nodes(&p, expect_nodes);
    if (tcp && p.lfd >= 0 && p.failed == 0) {
        probe_tcp_ring(&p);
    }
    probe_fence(&p);
    printf("pmix_probe: rank %u of %u host %s node %u ip %s%s: %s\n", p.me.rank, p.nprocs, host,
           nodeid, ip, tcp ? " tcp ring" : "", p.failed ? "FAILED" : "ok");
    fflush(stdout);
out_free:
    if (p.lfd >= 0) {
        close(p.lfd);
    }
    free(p.peers);
out_finalize:
    PMIx_Finalize(NULL, 0);
    return p.failed ? 1 : 0;
}
