/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/* Packing and parsing of the one-sided wire formats (tw_rma_proto.h).
 * Pure functions. */
#include "msg/tw_rma_proto.h"

#include <string.h>

static tw_status_t tw_rma_bad(const char **why, const char *what, tw_status_t st)
{
    if (why != NULL) {
        *why = what;
    }
    return st;
}

size_t tw_rma_rkey_size(const tw_rma_rkey_t *k)
{
    size_t need = sizeof(k->h);

    for (unsigned i = 0; i < k->h.nsect; i++) {
        need += 2 + (size_t)k->sect[i].name_len + k->sect[i].key_len;
    }
    return need;
}

void tw_rma_rkey_pack(const tw_rma_rkey_t *k, void *out)
{
    tw_rma_rkey_hdr_t h = k->h;
    uint8_t *p = out;

    h.magic = TW_RMA_RKEY_MAGIC;
    h.version = TW_RMA_RKEY_VERSION;
    h.len = (uint16_t)tw_rma_rkey_size(k);
    h.reserved = 0;
    memcpy(p, &h, sizeof(h));
    p += sizeof(h);
    for (unsigned i = 0; i < k->h.nsect; i++) {
        const tw_rma_rkey_sect_t *s = &k->sect[i];
        *p++ = s->name_len;
        memcpy(p, s->name, s->name_len);
        p += s->name_len;
        *p++ = s->key_len;
        memcpy(p, s->key, s->key_len);
        p += s->key_len;
    }
}

/* The sections of a key whose header @p k->h passed: each one's lengths
 * within the @p len section bytes at @p s, and nothing left over. */
static tw_status_t tw_rma_rkey_sections(const uint8_t *s, size_t len, tw_rma_rkey_t *k,
                                        const char **why)
{
    size_t off = 0;

    for (unsigned i = 0; i < k->h.nsect; i++) {
        tw_rma_rkey_sect_t *sect = &k->sect[i];
        if (len - off < 1 || len - off - 1 < s[off]) {
            return tw_rma_bad(why, "a section's name runs past the key", TW_ERR_PROTOCOL);
        }
        sect->name_len = s[off];
        sect->name = (const char *)s + off + 1;
        off += 1 + (size_t)sect->name_len;
        if (sect->name_len == 0 || sect->name_len > TW_RMA_RKEY_NAME_MAX) {
            return tw_rma_bad(why, "a section's transport name is empty or too long",
                              TW_ERR_PROTOCOL);
        }
        if (len - off < 1 || len - off - 1 < s[off]) {
            return tw_rma_bad(why, "a section's key runs past the key", TW_ERR_PROTOCOL);
        }
        sect->key_len = s[off];
        sect->key = s + off + 1;
        off += 1 + (size_t)sect->key_len;
        if (sect->key_len > TW_TL_KEY_MAX) {
            return tw_rma_bad(why, "a transport key longer than TW_TL_KEY_MAX", TW_ERR_PROTOCOL);
        }
    }
    if (off != len) {
        return tw_rma_bad(why, "bytes after the last section", TW_ERR_PROTOCOL);
    }
    return TW_OK;
}

tw_status_t tw_rma_rkey_parse(const void *buf, size_t len, tw_rma_rkey_t *k, const char **why)
{
    tw_rma_rkey_t v;
    tw_status_t st;

    if (len < sizeof(v.h)) {
        return tw_rma_bad(why, "shorter than a key header", TW_ERR_TRUNCATED);
    }
    memcpy(&v.h, buf, sizeof(v.h));
    memset(v.sect, 0, sizeof(v.sect)); /* those past h.nsect stay so */
    if (v.h.magic != TW_RMA_RKEY_MAGIC) {
        return tw_rma_bad(why, "no key magic", TW_ERR_PROTOCOL);
    }
    if (v.h.version != TW_RMA_RKEY_VERSION) {
        return tw_rma_bad(why, "unknown key version", TW_ERR_PROTOCOL);
    }
    if (v.h.reserved != 0) {
        return tw_rma_bad(why, "reserved bytes not zero", TW_ERR_PROTOCOL);
    }
    if (v.h.len < sizeof(v.h) || v.h.len > TW_RKEY_MAX) {
        return tw_rma_bad(why, "key length out of range", TW_ERR_PROTOCOL);
    }
    if (v.h.nsect > TW_RMA_RKEY_SECT_MAX) {
        return tw_rma_bad(why, "too many sections", TW_ERR_PROTOCOL);
    }
    if (v.h.len > len) {
        return tw_rma_bad(why, "longer than the bytes given", TW_ERR_TRUNCATED);
    }
    st = tw_rma_rkey_sections((const uint8_t *)buf + sizeof(v.h), v.h.len - sizeof(v.h), &v, why);
    if (st == TW_OK) {
        *k = v;
    }
    return st;
}

const uint8_t *tw_rma_rkey_find(const tw_rma_rkey_t *k, const char *name)
{
    size_t nlen = strlen(name);

    for (unsigned i = 0; i < k->h.nsect; i++) {
        if (k->sect[i].name_len == nlen && memcmp(k->sect[i].name, name, nlen) == 0) {
            return k->sect[i].key;
        }
    }
    return NULL;
}

tw_status_t tw_rma_hdr_parse(const void *buf, size_t len, tw_rma_hdr_t *h, const char **why)
{
    tw_rma_hdr_t v;

    if (len != sizeof(v)) {
        return tw_rma_bad(why, "bad header length", TW_ERR_PROTOCOL);
    }
    memcpy(&v, buf, sizeof(v));
    if (v.version != TW_RMA_HDR_VERSION || v.type < TW_RMA_PUT_REQ || v.type > TW_RMA_GET_REP) {
        return tw_rma_bad(why, "unknown version or type", TW_ERR_PROTOCOL);
    }
    if (v.status > 0 || v.status < TW_ERR_BOOTSTRAP) {
        return tw_rma_bad(why, "unknown status", TW_ERR_PROTOCOL);
    }
    *h = v;
    return TW_OK;
}
