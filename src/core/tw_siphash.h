/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * SipHash-2-4 (Aumasson and Bernstein): a keyed 64-bit PRF for short
 * inputs. The TCP handshake proves knowledge of the job key with it
 * (MAC over fresh nonces), so the key itself never travels.
 */
#ifndef TW_SIPHASH_H
#define TW_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#include "threadwire/threadwire.h"

/** SipHash-2-4 of @p len bytes at @p data under the 16-byte @p key. */
uint64_t tw_siphash24(const uint8_t key[16], const void *data, size_t len);

/** Parse a 32-character hex key (the launcher's job key) into 16 bytes;
 * @p out is written only on success. TW_ERR_INVALID otherwise. */
tw_status_t tw_siphash_key_parse(const char *hex, uint8_t out[16]);

#endif /* TW_SIPHASH_H */
