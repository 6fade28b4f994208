/*
 * tensor/blis_internal.h: BLIS alone (tensor/blis.c, the only file that
 * includes blis.h). Not installed.
 *
 * Who calls it: the runtime (tensor/runtime.c) initialises BLIS and sets its
 * threads; the GEMM dispatch (tensor/gemm.c) runs products on it. Nothing
 * else does: modules multiply through lt__mat_gemm (tensor/gemm_internal.h),
 * and BLIS never calls back into the runtime, so initialisation runs one
 * way (runtime -> BLIS).
 */
#ifndef LT_TENSOR_BLIS_INTERNAL_H
#define LT_TENSOR_BLIS_INTERNAL_H

#include "tensor/gemm_engine_internal.h"

#include <stdbool.h>
#include <stdint.h>

/* Chooses BLIS's kernel set from the CPU's flags (or a valid BLIS_ARCH_TYPE
 * this CPU runs) and initialises BLIS. Called once, by the runtime's
 * initialisation, before any product. */
void lt__blis_init(void);
/* The kernel set in use ("skx"), how it was chosen, and whether the user
 * chose it (BLIS_ARCH_TYPE), for lt_runtime_get_info. Static strings. */
const char *lt__blis_arch(void);
const char *lt__blis_arch_why(void);
bool lt__blis_arch_from_user(void);
/* BLIS's own thread count (the runtime's one setting). */
void lt__blis_set_threads(int n);

/* p on BLIS's threads, or on this thread only (one_thread); p's strides
 * already fixed (lt__prod_fix_strides), dtype f32 or f64. */
void lt__blis_gemm(const lt__prod *p, bool one_thread);
/* One block of p on this thread (lt__prod_block_fn): lt__blis_gemm_block,
 * rows [lo, lo + len) of C and A when p->flag, else columns of C and B;
 * lt__blis_gemv_block, p with one row or one column of C (a gemv), the
 * block along C's long side. Every element of C is computed as it would be
 * unsplit, so the bits do not depend on the cut. */
void lt__blis_gemm_block(const lt__prod *p, int64_t lo, int64_t len);
void lt__blis_gemv_block(const lt__prod *p, int64_t lo, int64_t len);

#endif /* LT_TENSOR_BLIS_INTERNAL_H */
