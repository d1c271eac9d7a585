/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * TW_FAULT parsing and per-frame fault decisions (tw_fault.h has the
 * syntax). Probabilities are exact fixed point (p * 2^32, parsed from
 * decimal digits without floating point or locale), and every decision
 * draws the same number of values, so a seed replays the same faults on
 * the same frames.
 */
#include <stdio.h>
#include <string.h>

#include "core/tw_config.h"
#include "transports/lossy/tw_fault.h"

static const char *const tw_fault_dir_names[TW_FAULT_NDIRS] = {"tx", "rx"};
static const char *const tw_fault_type_names[TW_FAULT_NTYPES] = {"data", "ack", "nack", "ctrl"};
static const char *const tw_fault_kind_names[TW_FAULT_NKINDS] = {"drop", "corrupt", "dup",
                                                                 "reorder", "delay"};

static int tw_fault_lookup(const char *const *names, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++) {
        if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0) {
            return i;
        }
    }
    return -1;
}

static tw_status_t tw_fault_bad(char *why, size_t why_len, const char *item, size_t item_len,
                                const char *what)
{
    if (why != NULL && why_len > 0) {
        snprintf(why, why_len, "'%.*s': %s", (int)(item_len > 64 ? 64 : item_len), item, what);
    }
    return TW_ERR_INVALID;
}

/* "0", "1", "0.05", "1.0": at most 9 decimals, at most 1. */
static bool tw_fault_parse_prob(const char *s, size_t len, uint64_t *p)
{
    uint64_t whole = 0, frac = 0, scale = 1;
    size_t i = 0, nfrac = 0;

    if (len == 0 || s[0] < '0' || s[0] > '9') {
        return false;
    }
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        whole = whole * 10 + (uint64_t)(s[i] - '0');
        if (whole > 1) {
            return false;
        }
    }
    if (i < len && s[i] == '.') {
        for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            if (++nfrac > 9) {
                return false;
            }
            frac = frac * 10 + (uint64_t)(s[i] - '0');
            scale *= 10;
        }
        if (nfrac == 0) {
            return false;
        }
    }
    if (i != len || (whole == 1 && frac != 0)) {
        return false;
    }
    *p = ((whole * scale + frac) << 32) / scale;
    return true;
}

static bool tw_fault_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;

    if (len == 0 || len > 20) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        uint64_t digit = (uint64_t)(s[i] - '0');
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - digit) / 10) {
            return false;
        }
        x = x * 10 + digit;
    }
    if (x > max) {
        return false;
    }
    *v = x;
    return true;
}

static bool tw_fault_parse_dur(const char *s, size_t len, uint64_t *ns)
{
    char buf[32];

    if (len == 0 || len >= sizeof(buf)) {
        return false;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    return tw_cfg_parse_duration(buf, ns);
}

/* One key=value item (not NUL-terminated). */
static tw_status_t tw_fault_item(tw_fault_spec_t *spec,
                                 int8_t level[][TW_FAULT_NTYPES][TW_FAULT_NKINDS], const char *item,
                                 size_t len, char *why, size_t why_len)
{
    const char *eq = memchr(item, '=', len);
    const char *val, *key = item, *parts[3];
    size_t klen, vlen, plen[3];
    int nparts = 0, dir = -1, type = -1, kind;

    if (eq == NULL) {
        return tw_fault_bad(why, why_len, item, len, "want key=value");
    }
    klen = (size_t)(eq - item);
    val = eq + 1;
    vlen = len - klen - 1;
    /* Globals. */
    if (klen == 4 && strncmp(key, "seed", 4) == 0) {
        return tw_fault_parse_u64(val, vlen, UINT64_MAX, &spec->seed)
                   ? TW_OK
                   : tw_fault_bad(why, why_len, item, len, "seed wants a decimal integer");
    }
    if (klen == 6 && strncmp(key, "window", 6) == 0) {
        uint64_t w;
        if (!tw_fault_parse_u64(val, vlen, TW_FAULT_WINDOW_MAX, &w) || w == 0) {
            return tw_fault_bad(why, why_len, item, len, "window wants 1..64 frames");
        }
        spec->window = (unsigned)w;
        return TW_OK;
    }
    if (klen == 15 && strncmp(key, "blackhole_after", 15) == 0) {
        if (!tw_fault_parse_u64(val, vlen, UINT64_MAX, &spec->blackhole_frames) ||
            spec->blackhole_frames == 0) {
            return tw_fault_bad(why, why_len, item, len, "blackhole_after wants frames, >= 1");
        }
        return TW_OK;
    }
    static const char *const dur_names[] = {"delay_time", "blackhole", "blackhole_for", "kill"};
    uint64_t *const dur_fields[] = {&spec->delay_ns, &spec->blackhole_ns, &spec->blackhole_len_ns,
                                    &spec->kill_ns};
    int dur =
        tw_fault_lookup(dur_names, (int)(sizeof(dur_names) / sizeof(dur_names[0])), key, klen);
    if (dur >= 0) {
        uint64_t ns;
        if (!tw_fault_parse_dur(val, vlen, &ns)) {
            return tw_fault_bad(why, why_len, item, len,
                                "want a duration with an ns|us|ms|s suffix (a bare number is us)");
        }
        *dur_fields[dur] = ns;
        return TW_OK;
    }
    /* [dir.][type.]kind */
    for (size_t start = 0, i = 0; i <= klen; i++) {
        if (i == klen || key[i] == '.') {
            if (nparts == 3 || i == start) {
                return tw_fault_bad(why, why_len, item, len,
                                    "want [tx|rx.][data|ack|nack|ctrl.]fault");
            }
            parts[nparts] = key + start;
            plen[nparts++] = i - start;
            start = i + 1;
        }
    }
    kind =
        tw_fault_lookup(tw_fault_kind_names, TW_FAULT_NKINDS, parts[nparts - 1], plen[nparts - 1]);
    if (kind < 0) {
        return tw_fault_bad(why, why_len, item, len,
                            "unknown key (faults: drop, corrupt, dup, reorder, delay; also seed, "
                            "window, delay_time, blackhole, blackhole_for, blackhole_after, "
                            "kill)");
    }
    for (int k = 0; k < nparts - 1; k++) {
        int d = tw_fault_lookup(tw_fault_dir_names, TW_FAULT_NDIRS, parts[k], plen[k]);
        int t = tw_fault_lookup(tw_fault_type_names, TW_FAULT_NTYPES, parts[k], plen[k]);
        if (d >= 0 && dir < 0 && type < 0 && k == 0) {
            dir = d;
        } else if (t >= 0 && type < 0) {
            type = t;
        } else {
            return tw_fault_bad(why, why_len, item, len,
                                "want [tx|rx.][data|ack|nack|ctrl.]fault, in that order");
        }
    }
    uint64_t p;
    if (!tw_fault_parse_prob(val, vlen, &p)) {
        return tw_fault_bad(why, why_len, item, len,
                            "want a probability from 0 to 1 (at most 9 decimals)");
    }
    int8_t lv = (int8_t)((dir >= 0) + (type >= 0));
    for (int d = 0; d < TW_FAULT_NDIRS; d++) {
        for (int t = 0; t < TW_FAULT_NTYPES; t++) {
            if ((dir >= 0 && d != dir) || (type >= 0 && t != type) || lv < level[d][t][kind]) {
                continue;
            }
            level[d][t][kind] = lv; /* narrower wins; among equals the later */
            spec->p[d][t][kind] = p;
        }
    }
    return TW_OK;
}

tw_status_t tw_fault_parse(const char *text, tw_fault_spec_t *out, char *why, size_t why_len)
{
    tw_fault_spec_t spec = {.seed = 1, .window = 4, .delay_ns = 1000000};
    int8_t level[TW_FAULT_NDIRS][TW_FAULT_NTYPES][TW_FAULT_NKINDS];
    size_t len = text != NULL ? strlen(text) : 0;

    memset(level, -1, sizeof(level));
    for (size_t start = 0, i = 0; i <= len; i++) {
        if (i < len && text[i] != ',') {
            continue;
        }
        if (i > start) {
            tw_status_t st = tw_fault_item(&spec, level, text + start, i - start, why, why_len);
            if (st != TW_OK) {
                return st;
            }
        }
        start = i + 1;
    }
    for (int d = 0; d < TW_FAULT_NDIRS; d++) {
        for (int t = 0; t < TW_FAULT_NTYPES; t++) {
            for (int k = 0; k < TW_FAULT_NKINDS; k++) {
                spec.any |= spec.p[d][t][k] != 0;
            }
        }
    }
    spec.any |= spec.blackhole_ns != 0 || spec.kill_ns != 0 || spec.blackhole_frames != 0;
    *out = spec;
    return TW_OK;
}

/* ---- random streams -------------------------------------------------------- */

static uint64_t tw_fault_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tw_fault_rng_init(tw_fault_rng_t *rng, uint64_t seed, int rank, int peer, tw_fault_dir_t dir)
{
    uint64_t x =
        seed ^ ((uint64_t)(uint32_t)rank << 33) ^ ((uint64_t)(uint32_t)peer << 1) ^ (uint64_t)dir;

    x = tw_fault_splitmix(&x) ^ seed; /* mix before seeding the four words */
    for (int i = 0; i < 4; i++) {
        rng->s[i] = tw_fault_splitmix(&x);
    }
}

static inline uint64_t tw_fault_rotl(uint64_t v, int k)
{
    return (v << k) | (v >> (64 - k));
}

uint64_t tw_fault_rng_next(tw_fault_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t r = tw_fault_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = tw_fault_rotl(s[3], 45);
    return r;
}

/* ---- decisions --------------------------------------------------------------- */

enum { TW_FAULT_DRAWS = 7 };

void tw_fault_decide(const tw_fault_spec_t *spec, tw_fault_rng_t *rng, tw_fault_dir_t dir,
                     tw_fault_type_t type, size_t frame_len, uint64_t elapsed_ns,
                     tw_fault_decision_t *out)
{
    const uint64_t *p = spec->p[dir][type];
    uint64_t r[TW_FAULT_DRAWS];

    for (int i = 0; i < TW_FAULT_DRAWS; i++) {
        r[i] = tw_fault_rng_next(rng); /* always all: decisions stay aligned */
    }
    *out = (tw_fault_decision_t){0};
    if (spec->kill_ns != 0 && elapsed_ns >= spec->kill_ns) {
        out->killed = true;
        out->drop = true;
        return;
    }
    if (spec->blackhole_ns != 0 && elapsed_ns >= spec->blackhole_ns &&
        (spec->blackhole_len_ns == 0 || elapsed_ns - spec->blackhole_ns < spec->blackhole_len_ns)) {
        out->drop = true;
        return;
    }
    if ((r[0] >> 32) < p[TW_FAULT_DROP]) {
        out->drop = true;
        return;
    }
    if (frame_len > 0 && (r[1] >> 32) < p[TW_FAULT_CORRUPT]) {
        out->corrupt = true;
        out->bit = (size_t)(r[2] % ((uint64_t)frame_len * 8u));
    }
    out->dup = (r[3] >> 32) < p[TW_FAULT_DUP];
    if ((r[4] >> 32) < p[TW_FAULT_REORDER]) {
        out->hold = 1u + (unsigned)(r[5] % spec->window);
    }
    if ((r[6] >> 32) < p[TW_FAULT_DELAY]) {
        out->delay_ns = spec->delay_ns;
    }
}
