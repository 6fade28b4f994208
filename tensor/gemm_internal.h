/*
 * tensor/gemm_internal.h: strided products of matrix views: the view type
 * (lt__mat), the stride rule (tensor/mat_strides.c) and the one entry of
 * every product of the library, lt__mat_gemm (tensor/gemm.c, the GEMM
 * dispatch), on matrix views (tensor/matview_internal.h). Not installed.
 *
 * Modules above tensor/ (nn/linear.c, nn/attention*.c) and lt_matmul
 * multiply views of their tensors through lt__mat_gemm: a transpose is a
 * view (lt__mat_t), never a flag, and which engine runs a product (BLIS,
 * the small-product kernels, oneDNN; tensor/paths.def) is decided once,
 * in the dispatch. What it is not: an engine's interface (the engines'
 * headers, tensor/gemm_engine_internal.h, are the dispatch's only) nor
 * autocast's (tensor/autocast_internal.h).
 */
#ifndef LT_TENSOR_GEMM_INTERNAL_H
#define LT_TENSOR_GEMM_INTERNAL_H

#include "tensor/matview_internal.h"
#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* c = alpha * a b + beta * c for views a [m, k], b [k, n], c [m, n] whose
 * strides lt__mat_ok accepts (c must not overlap a or b). dt is a's and b's
 * dtype: f32 or f64 (c the same; BLIS), or bf16 (c is f32, accumulated in
 * f32; oneDNN, tensor/dnnl_internal.h). Under autocast (lt_set_autocast) an
 * f32 product takes bf16 copies of a and b (made here, once per call, in
 * their own orientation) and runs as a bf16 one: this is the one autocast
 * hook, so every product of the library (lt_matmul, Linear, attention, and
 * their backward) gets it. Where oneDNN has no bf16 matmul for the CPU, bf16
 * operands are widened to f32 and autocast leaves products in f32 (path
 * gemm_bf16=f32, tensor/paths.def, which LT_GEMM_BF16=f32 forces anywhere).
 * one_thread: run on this thread only (the caller parallelises over a batch
 * of products itself, inside an OpenMP region); else BLIS's, oneDNN's and
 * libtensor's threads as the size warrants. Shapes that do not chain are a
 * programmer error (LT_CHECK). Errors: LT_ERR_DTYPE, LT_ERR_BACKEND,
 * LT_ERR_NOMEM. */
lt_status lt__mat_gemm(lt_dtype dt, bool one_thread, double alpha, lt__mat a, lt__mat b, double beta, lt__mat c);

/* An f32 operand b [k, n] that many products read as their B (the fused
 * attention's K^T and V^T tiles, read by every query tile and every head of
 * a GQA group), packed once for the panel kernel (tensor/gemm_small.c) instead of
 * once per product. lt__mat_pack_floats(k, n): the floats the packed b
 * takes, or 0 when this thread's lt__mat_gemm would not run such a product
 * in the panel kernel (no AVX-512, path gemm=blis or gemm=skinny forced,
 * autocast active, k or n outside the kernel's rule): then call lt__mat_gemm. lt__mat_pack writes
 * the packed b (f32, not a bf16 copy) into dst: that many floats, 64-byte
 * aligned, owned by the caller. lt__mat_gemm_packed: c = alpha * a bp +
 * beta * c on this thread, bp packed from a [a.cols, pn] matrix, pn >=
 * c.cols (its first c.cols columns are used); f32 a and c; every element
 * of c has the bits the panel kernel gives the same product unpacked. */
int64_t lt__mat_pack_floats(int64_t k, int64_t n);
void lt__mat_pack(lt__mat b, float *dst);
void lt__mat_gemm_packed(double alpha, lt__mat a, const float *bp, int64_t pn, double beta, lt__mat c);

/* c = a b + bias (f32 [c.cols], contiguous, added to every row) for f32
 * views under autocast (lt__autocast_active() must be true: a programmer
 * error otherwise): oneDNN adds the bias to the f32 accumulator, so the
 * output is written once (no pass filling c with the bias first, no read of
 * it back), with the bits of the fill-then-accumulate form (one f32 addition
 * of the same two numbers). Errors as lt__mat_gemm. */
lt_status lt__mat_gemm_bias(bool one_thread, lt__mat a, lt__mat b, const float *bias, lt__mat c);

#endif /* LT_TENSOR_GEMM_INTERNAL_H */
