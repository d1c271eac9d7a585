/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* The address blob (tw_addr_proto.h): writer and parser. */
#include <string.h>

#include "core/tw_compiler.h"
#include "runtime/tw_addr_proto.h"

void tw_addr_begin(tw_addr_writer_t *w, void *buf, size_t cap)
{
    *w = (tw_addr_writer_t){.buf = buf, .cap = cap, .len = sizeof(tw_addr_hdr_t)};
}

void *tw_addr_reserve(tw_addr_writer_t *w, const char *name, uint8_t flags, size_t *room_p)
{
    size_t nlen = strlen(name);
    size_t at = w->len + sizeof(tw_addr_entry_hdr_t) + nlen;
    tw_addr_entry_hdr_t e = {.name_len = (uint8_t)nlen, .flags = flags};

    tw_assert(w->open_at == 0);
    if (nlen == 0 || nlen > TW_ADDR_NAME_MAX || w->entries == TW_ADDR_ENTRIES || at > w->cap) {
        return NULL;
    }
    memcpy(w->buf + w->len, &e, sizeof(e));
    memcpy(w->buf + w->len + sizeof(e), name, nlen);
    w->open_at = w->len;
    *room_p = TW_MIN(w->cap - at, (size_t)UINT16_MAX);
    return w->buf + at;
}

void tw_addr_commit(tw_addr_writer_t *w, size_t len)
{
    uint8_t *e = w->buf + w->open_at;
    size_t nlen = e[0];

    tw_assert(w->open_at != 0 && len <= UINT16_MAX);
    e[2] = (uint8_t)(len & 0xff);
    e[3] = (uint8_t)(len >> 8);
    w->len = w->open_at + sizeof(tw_addr_entry_hdr_t) + nlen + len;
    w->open_at = 0;
    w->entries++;
}

void tw_addr_cancel(tw_addr_writer_t *w)
{
    tw_assert(w->open_at != 0);
    w->open_at = 0;
}

size_t tw_addr_end(tw_addr_writer_t *w)
{
    tw_addr_hdr_t h = {.version = TW_ADDR_VERSION, .entries = (uint8_t)w->entries};

    tw_assert(w->open_at == 0);
    memcpy(w->buf, &h, sizeof(h));
    return w->len;
}

tw_status_t tw_addr_parse(const void *blob, size_t len, tw_addr_entry_t *out, unsigned max,
                          unsigned *n_p, const char **why)
{
    const uint8_t *b = blob;
    tw_addr_hdr_t h;
    size_t off = sizeof(h);

    if (blob == NULL || len < sizeof(h)) {
        *why = "shorter than its header";
        return TW_ERR_PROTOCOL;
    }
    memcpy(&h, b, sizeof(h));
    if (h.version != TW_ADDR_VERSION) {
        *why = "an unknown version";
        return TW_ERR_PROTOCOL;
    }
    if (h.reserved != 0 || h.entries > max || h.entries > TW_ADDR_ENTRIES) {
        *why = h.reserved != 0 ? "reserved bits set" : "too many entries";
        return TW_ERR_PROTOCOL;
    }
    for (unsigned i = 0; i < h.entries; i++) {
        tw_addr_entry_hdr_t e;
        size_t alen;
        if (len - off < sizeof(e)) {
            *why = "an entry header cut short";
            return TW_ERR_PROTOCOL;
        }
        memcpy(&e, b + off, sizeof(e));
        alen = (size_t)e.len[0] | (size_t)e.len[1] << 8;
        off += sizeof(e);
        if (e.name_len == 0 || e.name_len > TW_ADDR_NAME_MAX || (e.flags & ~TW_ADDR_F_KNOWN)) {
            *why = e.flags & ~TW_ADDR_F_KNOWN ? "unknown entry flags" : "a bad name length";
            return TW_ERR_PROTOCOL;
        }
        if (len - off < e.name_len || len - off - e.name_len < alen) {
            *why = "an entry longer than the blob";
            return TW_ERR_PROTOCOL;
        }
        memcpy(out[i].name, b + off, e.name_len);
        out[i].name[e.name_len] = '\0';
        if (strlen(out[i].name) != e.name_len) {
            *why = "a name with a NUL byte";
            return TW_ERR_PROTOCOL;
        }
        for (unsigned k = 0; k < i; k++) {
            if (strcmp(out[k].name, out[i].name) == 0) {
                *why = "two entries of one name";
                return TW_ERR_PROTOCOL;
            }
        }
        off += e.name_len;
        out[i].flags = e.flags;
        out[i].addr = b + off;
        out[i].len = alen;
        off += alen;
    }
    if (off != len) {
        *why = "bytes after the last entry";
        return TW_ERR_PROTOCOL;
    }
    *n_p = h.entries;
    return TW_OK;
}
