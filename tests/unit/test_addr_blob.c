/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The address blob (src/runtime/tw_addr_proto.h): what the writer builds
 * the parser gives back exactly; an entry with nothing to say can be
 * dropped; a name too long or a full buffer is refused at the writer; and
 * every malformed blob -- cut short anywhere, a wrong version, reserved
 * bits, a length that lies, an unknown flag, an empty, NUL-bearing or
 * duplicate name, more entries than the reader takes, bytes left over --
 * is refused with a reason, without reading past its end (ASan).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/tw_addr_proto.h"
#include "tw_test.h"

static size_t build(uint8_t *buf, size_t cap)
{
    tw_addr_writer_t w;
    size_t room = 0;
    uint8_t *at;

    tw_addr_begin(&w, buf, cap);
    at = tw_addr_reserve(&w, "shm", 0, &room);
    TWT_CHECK(at != NULL && room >= 40);
    for (int i = 0; i < 40; i++) {
        at[i] = (uint8_t)i;
    }
    tw_addr_commit(&w, 40);
    at = tw_addr_reserve(&w, "self", 0, &room); /* nothing to say: dropped */
    TWT_CHECK(at != NULL);
    tw_addr_cancel(&w);
    at = tw_addr_reserve(&w, "rel", TW_ADDR_F_JOB_WIDE, &room);
    TWT_CHECK(at != NULL);
    memcpy(at, "\1\0\0\0abcd", 8);
    tw_addr_commit(&w, 8);
    return tw_addr_end(&w);
}

/* Parse @p len bytes copied into a block of exactly that size. */
static tw_status_t parse(const uint8_t *bytes, size_t len, unsigned max, unsigned *n,
                         tw_addr_entry_t *e)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    const char *why = NULL;
    tw_status_t st;

    TWT_CHECK(copy != NULL);
    memcpy(copy, bytes, len);
    st = tw_addr_parse(copy, len, e, max, n, &why);
    if (st != TW_OK) {
        TWT_CHECK(why != NULL && why[0] != '\0');
    } else {
        for (unsigned i = 0; i < *n; i++) {
            e[i].addr = bytes + (e[i].addr - copy); /* valid after the copy goes */
        }
    }
    free(copy);
    return st;
}

int main(void)
{
    uint8_t buf[256], bad[256];
    tw_addr_entry_t e[TW_ADDR_ENTRIES];
    tw_addr_writer_t w;
    unsigned n = 0;
    size_t len = build(buf, sizeof(buf)), room;

    TWT_EQ(len, 4u + (4 + 3 + 40) + (4 + 3 + 8));
    TWT_EQ(parse(buf, len, TW_ADDR_ENTRIES, &n, e), TW_OK);
    TWT_EQ(n, 2u);
    TWT_CHECK(strcmp(e[0].name, "shm") == 0 && e[0].flags == 0 && e[0].len == 40);
    TWT_CHECK(e[0].addr == buf + 4 + 4 + 3 && e[0].addr[39] == 39);
    TWT_CHECK(strcmp(e[1].name, "rel") == 0 && e[1].flags == TW_ADDR_F_JOB_WIDE);
    TWT_CHECK(e[1].len == 8 && memcmp(e[1].addr, "\1\0\0\0abcd", 8) == 0);

    /* Cut short anywhere: refused. */
    for (size_t cut = 0; cut < len; cut++) {
        TWT_CHECKF(parse(buf, cut, TW_ADDR_ENTRIES, &n, e) == TW_ERR_PROTOCOL, "cut at %zu", cut);
    }
    /* One byte left over. */
    memcpy(bad, buf, len);
    bad[len] = 0;
    TWT_EQ(parse(bad, len + 1, TW_ADDR_ENTRIES, &n, e), TW_ERR_PROTOCOL);
    /* Each field wrong in turn. */
    const struct {
        size_t at;
        uint8_t value;
        const char *what;
    } lies[] = {
        {0, 2, "version"},
        {1, 3, "more entries than there are"},
        {2, 1, "reserved"},
        {4, 0, "empty name"},
        {4, 16, "name too long"},
        {5, 0x80, "unknown flag"},
        {6, 41, "address longer than the rest"},
        {7, 1, "address length high byte"},
        {8, 0, "NUL in a name"},
    };
    for (size_t i = 0; i < TWT_ARRAY_SIZE(lies); i++) {
        memcpy(bad, buf, len);
        bad[lies[i].at] = lies[i].value;
        TWT_CHECKF(parse(bad, len, TW_ADDR_ENTRIES, &n, e) == TW_ERR_PROTOCOL, "%s", lies[i].what);
    }
    /* The second entry renamed like the first. */
    memcpy(bad, buf, len);
    memcpy(bad + 4 + 4 + 3 + 40 + 4, "shm", 3);
    TWT_EQ(parse(bad, len, TW_ADDR_ENTRIES, &n, e), TW_ERR_PROTOCOL);
    /* More entries than the reader has room for. */
    TWT_EQ(parse(buf, len, 1, &n, e), TW_ERR_PROTOCOL);

    /* The writer refuses what would not parse, and what does not fit. */
    tw_addr_begin(&w, bad, sizeof(bad));
    TWT_CHECK(tw_addr_reserve(&w, "", 0, &room) == NULL);
    TWT_CHECK(tw_addr_reserve(&w, "a-name-too-long!", 0, &room) == NULL);
    TWT_CHECK(tw_addr_reserve(&w, "tcp", 0, &room) != NULL);
    TWT_EQ(room, sizeof(bad) - 4 - 4 - 3);
    tw_addr_commit(&w, room); /* fills the buffer */
    TWT_CHECK(tw_addr_reserve(&w, "shm", 0, &room) == NULL);
    TWT_EQ(tw_addr_end(&w), sizeof(bad));
    TWT_EQ(parse(bad, sizeof(bad), TW_ADDR_ENTRIES, &n, e), TW_OK);
    TWT_EQ(n, 1u);
    printf("address blob: writer and parser agree; %zu malformed forms refused\n",
           len + 1 + TWT_ARRAY_SIZE(lies) + 2);
    return 0;
}
