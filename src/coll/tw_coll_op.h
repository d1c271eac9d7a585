/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * Reduction arithmetic: element sizes, which (dtype, op) pairs exist, and
 * the kernel every algorithm combines operands with. The kernel names its
 * operands in order -- dst = a (+) b, a being the operand that comes first
 * in the group's fixed reduction order -- so an algorithm fixes the order
 * by the way it calls it, and every member computes the same bits.
 *
 * Integer SUM and PROD wrap (computed unsigned: no undefined behaviour);
 * floating MIN and MAX keep a on ties (-0 vs +0) and let a number win over
 * a NaN, so the result never depends on anything but the order.
 * Thread: any (pure).
 */
#ifndef TW_COLL_OP_H
#define TW_COLL_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "threadwire/threadwire.h"

/** Bytes of one element of @p dt, 0 for a value out of the enum. */
size_t tw_coll_dtype_size(tw_dtype_t dt);
/** True when @p op applies to @p dt (both in range; bitwise ops on
 * integer types only). */
bool tw_coll_op_valid(tw_dtype_t dt, tw_redop_t op);
const char *tw_coll_dtype_name(tw_dtype_t dt);
const char *tw_coll_op_name(tw_redop_t op);

/** dst[i] = a[i] (+) b[i] for @p count elements; @p dst may be @p a or
 * @p b (exactly, not partially overlapping). (dt, op) must be valid. */
void tw_coll_reduce(void *dst, const void *a, const void *b, size_t count, tw_dtype_t dt,
                    tw_redop_t op);

#endif /* TW_COLL_OP_H */
