/*
 * tensor/gemm_small_internal.h: the small-product kernels (tensor/gemm_small.c):
 * the skinny kernels (f32, f64) and the f32 panel kernel, AVX-512. Not
 * installed; only the GEMM dispatch (tensor/gemm.c) calls them, and only on
 * a CPU whose path table entry (tensor/paths.def: gemm small, gemm skinny)
 * says it runs them.
 *
 * Bits: every element of C is a fixed sequence of operations that depends
 * on m, n, k and the layout only (never on the thread count, the block it
 * lands in or where a block starts). docs/gemm.md has the kernels' layouts.
 */
#ifndef LT_TENSOR_GEMM_SMALL_INTERNAL_H
#define LT_TENSOR_GEMM_SMALL_INTERNAL_H

#include "tensor/gemm_engine_internal.h"

#include <stdbool.h>
#include <stdint.h>

/* The panel kernel's packed B: panels of LT__SMALL_W columns; a long k is
 * cut into fixed chunks of LT__SMALL_KC (never derived from the thread
 * count, so the partial sums have the same bits on any number of threads). */
#define LT__SMALL_W 64
#define LT__SMALL_KC 256

/* Columns [lo, lo + len) of C and B of p (m, n >= 2, the short side m), one
 * skinny kernel call on this thread (lt__prod_block_fn): p->flag, the dot
 * kernel (A's rows and B's columns contiguous along k); else the axpy
 * kernel (B's rows contiguous). */
void lt__small_skinny_block(const lt__prod *p, int64_t lo, int64_t len);

/* C = alpha A B + beta C (f32, strides in elements) with the panel kernel
 * on nt threads, k in chunks of kc (kc == k: one chunk, C written directly;
 * else each chunk's product in its own block of partial sums, summed in
 * chunk order). False (nothing written) when its buffer cannot be had. */
bool lt__small_panel(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float *a, int64_t rsa,
                     int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc,
                     int64_t csc, int nt);

/* B [k, n] (f32, strides rsb, csb) packed for the panel kernel into dst:
 * ceil(n / LT__SMALL_W) * k * LT__SMALL_W floats, 64-byte aligned,
 * caller-owned. lt__small_gemm_packed: C [m, n] = alpha A [m, k] B + beta C
 * on this thread from a B packed with pn >= n columns (its first n used),
 * every element of C the FMA chain the panel kernel gives the unpacked
 * product. */
void lt__small_pack(int64_t k, int64_t n, const float *b, int64_t rsb, int64_t csb, float *dst);
void lt__small_gemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                           const float *bp, int64_t pn, float beta, float *c, int64_t rsc, int64_t csc);

#endif /* LT_TENSOR_GEMM_SMALL_INTERNAL_H */
