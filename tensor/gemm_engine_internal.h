/*
 * tensor/gemm_engine_internal.h: one f32/f64 product as the GEMM dispatch
 * (tensor/gemm.c) hands it to an engine: BLIS (tensor/blis_internal.h) or
 * the small-product kernels (tensor/gemm_small_internal.h). Not installed;
 * only those three files include it.
 *
 * What it is not: the contract for callers (tensor/gemm_internal.h), nor a
 * rule for which engine runs (the dispatch's, with tensor/paths.def).
 */
#ifndef LT_TENSOR_GEMM_ENGINE_INTERNAL_H
#define LT_TENSOR_GEMM_ENGINE_INTERNAL_H

#include "tensor/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One product c = alpha a b + beta c (a [m, k], b [k, n], c [m, n]) with
 * its strides in elements; f32 or f64. Borrows a, b, c. */
typedef struct lt__prod {
  lt_dtype dtype;
  int64_t m, n, k;
  double alpha, beta;
  const void *a, *b;
  void *c;
  int64_t rsa, csa, rsb, csb, rsc, csc;
  bool flag; /* BLIS gemm blocks: split C's rows (else its columns); skinny: the dot kernel (else axpy) */
} lt__prod;

/* The same product turned around, C^T = B^T A^T: A' = B^T, B' = A^T, m and
 * n swapped, C's strides swapped. */
static inline lt__prod lt__prod_t(lt__prod p) {
  const lt__prod t = {p.dtype, p.n, p.m, p.k, p.alpha, p.beta, p.b, p.a, p.c,
                      p.csb, p.rsb, p.csa, p.rsa, p.csc, p.rsc, p.flag};
  return t;
}

static inline size_t lt__prod_elem_size(lt_dtype dtype) {
  return dtype == LT_DTYPE_F32 ? sizeof(float) : sizeof(double);
}

/* BLIS rejects (and aborts on) zero strides and some size-1 layouts; a
 * stride along a dim of size <= 1 is meaningless, so make it consistent.
 * (lt__mat_canon's rule for sizes 1, and also for an empty k: the engines
 * see k == 0, lt_matmul never does.) */
static inline void lt__prod_fix_strides(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs) {
  if (rows <= 1 && cols <= 1) {
    *rs = 1;
    *cs = 1;
  } else if (rows <= 1) {
    *rs = *cs * cols;
  } else if (cols <= 1) {
    *cs = *rs * rows;
  }
}

/* A part of a product: rows or columns [lo, lo + len) of C (which, the
 * engine's block function says); run by the dispatch's run_blocks, one
 * block per thread. */
typedef void (*lt__prod_block_fn)(const lt__prod *p, int64_t lo, int64_t len);

#endif /* LT_TENSOR_GEMM_ENGINE_INTERNAL_H */
