/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TCP addresses: where to listen, and the address blob a rank publishes.
 *
 * TW_TCP_IF names the interfaces to listen on (comma list); by default
 * loopback when every rank is on this node, otherwise every non-loopback
 * IPv4 and IPv6 address (link-local IPv6 is skipped: it needs a scope),
 * of the families TW_TCP_AF names, in its order. The address blob
 * (tw_tcp_proto.h) lists them with the port of each lane, and says how
 * long the rank lets a peer be silent and whether it runs progress
 * threads: a connector judges it by silence and by a 2 s handshake only
 * when it does.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/tw_compiler.h"
#include "core/tw_log.h"
#include "transports/tcp/tw_tcp_int.h"

const char *tw_tcp_addr_str(const tw_tcp_addr_t *a, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    const struct sockaddr *sa = (const struct sockaddr *)&a->ss;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&a->ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a->ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    }
    return buf;
}

static bool tw_tcp_if_listed(const char *list, const char *name)
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        if (strcmp(t, name) == 0) {
            return true;
        }
    }
    return false;
}

/* Where to listen: TW_TCP_IF's interfaces, or loopback for a job on one
 * node, or every non-loopback address. */
/* TW_TCP_AF: the families in order of preference (AF_INET, AF_INET6). */
static int tw_tcp_parse_af(const char *text, int fam[2])
{
    char buf[TW_CFG_STRLEN];
    char *save = NULL;
    int n = 0;

    snprintf(buf, sizeof(buf), "%s", text);
    for (char *t = strtok_r(buf, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        int f = strcmp(t, "inet") == 0 ? AF_INET : strcmp(t, "inet6") == 0 ? AF_INET6 : -1;
        if (f < 0 || n == 2 || (n == 1 && fam[0] == f)) {
            return 0;
        }
        fam[n++] = f;
    }
    return n;
}

tw_status_t tw_tcp_pick_addrs(tw_tcp_iface_t *tcp, const tw_tl_params_t *params)
{
    const char *list = tcp->cfg.ifs;
    bool local = list[0] == '\0' && params->local_size == params->size;
    struct ifaddrs *ifs = NULL;
    char seen[256] = "";
    int fam[2], nfam = tw_tcp_parse_af(tcp->cfg.af, fam);

    if (nfam == 0) {
        tw_error("tcp", "TW_TCP_AF='%s': want inet, inet6, or both in order of preference",
                 tcp->cfg.af);
        return TW_ERR_INVALID;
    }
    if (local) {
        /* One node: the loopback address of the preferred family. */
        if (fam[0] == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&tcp->addrs[0].ss;
            *in = (struct sockaddr_in){.sin_family = AF_INET,
                                       .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            tcp->addrs[0].len = sizeof(*in);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&tcp->addrs[0].ss;
            *in6 = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
            tcp->addrs[0].len = sizeof(*in6);
        }
        tcp->naddrs = 1;
        return TW_OK;
    }
    if (getifaddrs(&ifs) != 0) {
        tw_error("tcp", "getifaddrs failed: %m");
        return TW_ERR_TRANSPORT;
    }
    for (int k = 0; k < nfam; k++) {
        for (struct ifaddrs *i = ifs; i != NULL && tcp->naddrs < TW_TCP_MAX_ADDRS;
             i = i->ifa_next) {
            const struct sockaddr *sa = i->ifa_addr;
            tw_tcp_addr_t *a = &tcp->addrs[tcp->naddrs];

            if (sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
                continue;
            }
            if (strlen(seen) + strlen(i->ifa_name) + 2 < sizeof(seen) &&
                strstr(seen, i->ifa_name) == NULL) {
                strcat(seen, seen[0] != '\0' ? "," : "");
                strcat(seen, i->ifa_name);
            }
            if (!(i->ifa_flags & IFF_UP) || sa->sa_family != fam[k]) {
                continue;
            }
            if (list[0] != '\0' ? !tw_tcp_if_listed(list, i->ifa_name)
                                : (i->ifa_flags & IFF_LOOPBACK) != 0) {
                continue;
            }
            if (sa->sa_family == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
                continue; /* needs a scope id the peers cannot use */
            }
            a->len =
                sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
            memset(&a->ss, 0, sizeof(a->ss));
            memcpy(&a->ss, sa, a->len);
            tcp->naddrs++;
        }
    }
    freeifaddrs(ifs);
    if (tcp->naddrs == 0) {
        tw_error("tcp",
                 "no address to listen on: TW_TCP_IF='%s' matches no interface that is up "
                 "with an address of TW_TCP_AF='%s' (IPv6: global scope) (interfaces here: %s)",
                 list, tcp->cfg.af, seen);
        return TW_ERR_TRANSPORT;
    }
    return TW_OK;
}

tw_status_t tw_tcp_addr_pack(tw_tl_iface_t *iface, void *buf, size_t cap, size_t *len_p)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    uint64_t ms = tcp->cfg.timeout_ns / 1000000u;
    tw_tcp_addr_blob_t b = {.lanes = (uint8_t)tcp->nlanes,
                            .naddrs = (uint8_t)tcp->naddrs,
                            .flags = tcp->threads ? TW_TCP_ADDR_THREADS : 0,
                            .timeout_ms = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms};

    for (int a = 0; a < tcp->naddrs; a++) {
        const struct sockaddr *sa = (const struct sockaddr *)&tcp->addrs[a].ss;
        tw_tcp_addr_entry_t *e = &b.addrs[a];
        if (sa->sa_family == AF_INET) {
            e->family = 4;
            memcpy(e->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        } else {
            e->family = 6;
            memcpy(e->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        }
        for (int k = 0; k < tcp->nlanes; k++) {
            e->ports[k] = tcp->lanes[k].ports[a];
        }
    }
    return tw_tcp_addr_blob_pack(&b, buf, cap, len_p);
}

tw_status_t tw_tcp_addr_connect(tw_tl_iface_t *iface, int peer, const void *addr, size_t len)
{
    tw_tcp_iface_t *tcp = (tw_tcp_iface_t *)iface;
    tw_tcp_ep_t *ep = &tcp->eps[peer];
    tw_tcp_addr_blob_t b;
    const char *why = "?";

    if (tw_tcp_addr_blob_parse(addr, len, &b, &why) != TW_OK) {
        tw_error("tcp", "rank %d published a bad tcp address (%zu bytes: %s): refused", peer, len,
                 why);
        return TW_ERR_PROTOCOL;
    }
    ep->naddrs = 0;
    for (unsigned a = 0; a < b.naddrs; a++) {
        const tw_tcp_addr_entry_t *e = &b.addrs[a];
        tw_tcp_addr_t *dst = &ep->addrs[ep->naddrs];
        /* Its lane for us: our rank modulo its lane count. */
        uint16_t port = htons(e->ports[(unsigned)tcp->super.rank % b.lanes]);

        memset(dst, 0, sizeof(*dst));
        if (e->family == 4) {
            struct sockaddr_in *in = (struct sockaddr_in *)&dst->ss;
            in->sin_family = AF_INET;
            in->sin_port = port;
            memcpy(&in->sin_addr, e->addr, 4);
            dst->len = sizeof(*in);
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&dst->ss;
            in6->sin6_family = AF_INET6;
            in6->sin6_port = port;
            memcpy(&in6->sin6_addr, e->addr, 16);
            dst->len = sizeof(*in6);
        }
        ep->naddrs++;
    }
    if ((b.flags & TW_TCP_ADDR_THREADS) && b.timeout_ms > 0 && tcp->cfg.timeout_ns > 0) {
        uint64_t theirs = (uint64_t)b.timeout_ms * 1000000u;
        ep->silence_ns = theirs > tcp->cfg.timeout_ns ? theirs : tcp->cfg.timeout_ns;
    }
    /* A rank in manual mode answers a handshake only when it calls
     * tw_progress: give it TW_TCP_TIMEOUT (0: forever), not the 2 s a
     * progress thread needs at most. */
    ep->hs_ns = TW_TCP_HS_TIMEOUT;
    if (!(b.flags & TW_TCP_ADDR_THREADS)) {
        ep->hs_ns = tcp->cfg.timeout_ns == 0 ? UINT64_MAX / 2
                                             : TW_MAX(TW_TCP_HS_TIMEOUT, tcp->cfg.timeout_ns);
    }
    return TW_OK;
}
