/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The address blob: what a rank publishes through the launcher so that
 * every other rank can reach it. One entry per iface of its stack that
 * has an address (transports, and wrappers such as rel that publish
 * their incarnation), inner ifaces first:
 *
 *   header  u8 version (TW_ADDR_VERSION), u8 entries, u16 reserved (0)
 *   entry   u8 name length (1..TW_ADDR_NAME_MAX), u8 flags (TW_ADDR_F_*),
 *           u16 address length (little-endian), the name, the address
 *
 * An entry's bytes are its iface's own (addr_pack); a peer hands them to
 * the iface of the same name (addr_connect). tw_addr_parse checks every
 * length against the bytes received before anything is read past them,
 * refuses duplicate names, and is fuzzed.
 */
#ifndef TW_ADDR_PROTO_H
#define TW_ADDR_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

#define TW_ADDR_VERSION    1
#define TW_ADDR_NAME_MAX   15
#define TW_ADDR_ENTRIES    32
#define TW_ADDR_F_JOB_WIDE 0x01u /* every rank must have an iface of this name */
#define TW_ADDR_F_KNOWN    TW_ADDR_F_JOB_WIDE

typedef struct tw_addr_hdr {
    uint8_t version;
    uint8_t entries;
    uint16_t reserved;
} tw_addr_hdr_t;

typedef struct tw_addr_entry_hdr {
    uint8_t name_len;
    uint8_t flags;
    uint8_t len[2]; /* little-endian */
} tw_addr_entry_hdr_t;

_Static_assert(sizeof(tw_addr_hdr_t) == 4, "address blob header layout");
_Static_assert(sizeof(tw_addr_entry_hdr_t) == 4, "address entry header layout");

/* One entry of a parsed blob: pointers into the blob. */
typedef struct tw_addr_entry {
    char name[TW_ADDR_NAME_MAX + 1];
    uint8_t flags;
    const uint8_t *addr;
    size_t len;
} tw_addr_entry_t;

/* Building a blob in a caller's buffer. */
typedef struct tw_addr_writer {
    uint8_t *buf;
    size_t cap;
    size_t len;
    unsigned entries;
    size_t open_at; /* the entry being written (tw_addr_reserve), or 0 */
} tw_addr_writer_t;

/** Start a blob in @p buf (at least sizeof(tw_addr_hdr_t) bytes). */
void tw_addr_begin(tw_addr_writer_t *w, void *buf, size_t cap);
/** Open an entry named @p name: returns where its address goes and, in
 * *@p room_p, how many bytes fit there; NULL when the blob is full (or the
 * name is too long). Close it with tw_addr_commit. */
void *tw_addr_reserve(tw_addr_writer_t *w, const char *name, uint8_t flags, size_t *room_p);
/** Close the entry opened last with its address's length (<= room). */
void tw_addr_commit(tw_addr_writer_t *w, size_t len);
/** Drop the entry opened last (an iface with nothing to publish). */
void tw_addr_cancel(tw_addr_writer_t *w);
/** The blob's length, once every entry is committed. */
size_t tw_addr_end(tw_addr_writer_t *w);

/** Check @p len bytes at @p blob and list its entries into @p out (room
 * for @p max); *@p n_p is how many. TW_OK, or TW_ERR_PROTOCOL when the
 * blob is malformed (a bad version, a length that lies, an unknown flag, a
 * duplicate or empty name, more than @p max entries, bytes left over), with
 * the reason in @p why. Thread: any. */
tw_status_t tw_addr_parse(const void *blob, size_t len, tw_addr_entry_t *out, unsigned max,
                          unsigned *n_p, const char **why);

#endif /* TW_ADDR_PROTO_H */
