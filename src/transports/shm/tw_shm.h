/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The shared-memory transport (README.md gives the overview): its
 * tunables and the hooks tests use to break it on purpose.
 */
#ifndef TW_SHM_H
#define TW_SHM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tw_compiler.h"
#include "core/tw_config.h"
#include "transports/base/tw_tl.h"

/** TW_SHM_CELLS, TW_SHM_CMA. */
extern const tw_cfg_table_t tw_shm_cfg_table;

/** Test hook: make every process_vm_readv fail as if the kernel refused
 * it (EPERM), to exercise the copy fallback. Thread: any. */
#if TW_TESTING
void tw_shm_test_refuse_cma(bool refuse);
#endif

/** Test hook: has this iface stopped using CMA (forced by TW_SHM_CMA=0,
 * or refused once)? Thread: any. */
#if TW_TESTING
bool tw_shm_test_cma_off(tw_tl_iface_t *iface);
#endif

/** Test hook: write random values (from @p seed) into this process's
 * ring in @p peer's segment -- its tail, sequence words and cell headers
 * -- as a corrupt peer would. Returns the number of writes. The peer must
 * fail this process and nobody else. Thread: any. */
#if TW_TESTING
unsigned tw_shm_test_chaos(tw_tl_iface_t *iface, int peer, uint64_t seed);
#endif

#endif /* TW_SHM_H */
