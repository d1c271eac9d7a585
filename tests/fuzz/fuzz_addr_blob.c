/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_addr_parse (the address blob a rank publishes through the launcher)
 * on arbitrary bytes. An accepted blob must keep the promises of
 * tw_addr_proto.h: every entry lies inside the blob, names are non-empty,
 * unique and free of NUL bytes, flags are known -- and writing the entries
 * again with the writer gives back the very same bytes. The rel entry
 * parser runs on every entry, and accepts only 8-byte entries.
 */
#include <stddef.h>
#include <string.h>

#include "reliability/tw_rel_proto.h"
#include "runtime/tw_addr_proto.h"
#include "tw_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t again[1 << 16];
    tw_addr_entry_t e[TW_ADDR_ENTRIES];
    tw_addr_writer_t w;
    const char *why = NULL;
    unsigned n = 0;

    if (tw_addr_parse(data, size, e, TW_ADDR_ENTRIES, &n, &why) != TW_OK) {
        TW_FUZZ_CHECK(why != NULL && why[0] != '\0');
        return 0;
    }
    TW_FUZZ_CHECK(size <= sizeof(again));
    tw_addr_begin(&w, again, sizeof(again));
    for (unsigned i = 0; i < n; i++) {
        uint32_t epoch = 0;
        size_t room = 0;
        TW_FUZZ_CHECK(e[i].addr >= data && e[i].addr + e[i].len <= data + size);
        TW_FUZZ_CHECK(strlen(e[i].name) > 0 && strlen(e[i].name) <= TW_ADDR_NAME_MAX);
        TW_FUZZ_CHECK((e[i].flags & ~TW_ADDR_F_KNOWN) == 0);
        for (unsigned k = 0; k < i; k++) {
            TW_FUZZ_CHECK(strcmp(e[k].name, e[i].name) != 0);
        }
        if (tw_rel_addr_parse(e[i].addr, e[i].len, &epoch)) {
            TW_FUZZ_CHECK(e[i].len == sizeof(tw_rel_addr_t) && epoch != 0);
        }
        void *at = tw_addr_reserve(&w, e[i].name, e[i].flags, &room);
        TW_FUZZ_CHECK(at != NULL && room >= e[i].len);
        memcpy(at, e[i].addr, e[i].len);
        tw_addr_commit(&w, e[i].len);
    }
    TW_FUZZ_CHECK(tw_addr_end(&w) == size && memcmp(again, data, size) == 0);
    return 0;
}
