/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as in iSCSI and
 * ext4. Chainable: crc = tw_crc32c(crc, next, len) starting from 0.
 * The SSE4.2 path is chosen at run time when the CPU has it.
 */
#ifndef TW_CRC32C_H
#define TW_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t tw_crc32c(uint32_t crc, const void *buf, size_t len);
/* Both paths, for tests and benchmarks. hw returns the software result when
 * the CPU lacks SSE4.2. */
uint32_t tw_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t tw_crc32c_hw(uint32_t crc, const void *buf, size_t len);
/* "sse4.2" or "software". */
const char *tw_crc32c_impl(void);

#endif /* TW_CRC32C_H */
