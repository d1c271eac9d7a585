/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * tw_fault_parse (TW_FAULT) on arbitrary text. Checks the contract of
 * tw_fault.h: the spec is written only on success, a refusal names the
 * bad item, an accepted spec has probabilities within [0, 2^32], a window
 * of 1..64 and `any` exactly when some fault can happen; and decisions
 * from it keep their bounds (a corrupt bit inside the frame, a reorder
 * hold inside the window, a dropped frame suffers nothing else).
 */
#include <string.h>

#include "transports/lossy/tw_fault.h"
#include "tw_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512], why[128] = "";
    tw_fault_spec_t s;
    bool any = false;
    tw_fault_rng_t rng;

    if (size >= sizeof(text)) {
        size = sizeof(text) - 1;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    memset(&s, 0xa5, sizeof(s));
    if (tw_fault_parse(text, &s, why, sizeof(why)) != TW_OK) {
        TW_FUZZ_CHECK(why[0] == '\'');
        TW_FUZZ_CHECK(s.window == 0xa5a5a5a5u);
        return 0;
    }
    TW_FUZZ_CHECK(s.window >= 1 && s.window <= TW_FAULT_WINDOW_MAX);
    for (int d = 0; d < TW_FAULT_NDIRS; d++) {
        for (int t = 0; t < TW_FAULT_NTYPES; t++) {
            for (int k = 0; k < TW_FAULT_NKINDS; k++) {
                TW_FUZZ_CHECK(s.p[d][t][k] <= (1ull << 32));
                any |= s.p[d][t][k] != 0;
            }
        }
    }
    TW_FUZZ_CHECK(s.any ==
                  (any || s.blackhole_ns != 0 || s.kill_ns != 0 || s.blackhole_frames != 0));
    tw_fault_rng_init(&rng, s.seed, 0, 1, TW_FAULT_TX);
    for (unsigned i = 0; i < 64; i++) {
        tw_fault_decision_t dec;
        size_t len = i % 17;
        tw_fault_decide(&s, &rng, (tw_fault_dir_t)(i & 1), (tw_fault_type_t)(i % TW_FAULT_NTYPES),
                        len, (uint64_t)i * 100000000u, &dec);
        TW_FUZZ_CHECK(!dec.corrupt || dec.bit < len * 8);
        TW_FUZZ_CHECK(dec.hold <= s.window);
        TW_FUZZ_CHECK(!dec.killed || dec.drop);
        TW_FUZZ_CHECK(!dec.drop || (!dec.corrupt && !dec.dup && dec.hold == 0));
    }
    return 0;
}
