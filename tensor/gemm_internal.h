/*
 * tensor/gemm_internal.h: strided products of matrix views, the one place
 * outside tensor/blas.c that knows which strides BLIS takes. Not installed.
 *
 * Modules above tensor/ (nn/linear.c, nn/attention.c) multiply views of
 * their tensors through lt__mat_gemm instead of the BLAS layer: a transpose
 * is a view (lt__mat_t), never a flag, and the stride rule (lt__mat_ok) is
 * written once, here, for tensor/matmul.c as well.
 */
#ifndef LT_TENSOR_GEMM_INTERNAL_H
#define LT_TENSOR_GEMM_INTERNAL_H

#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* A rows x cols matrix view: element (i, j) is at data + i*rs + j*cs
 * elements. Borrows data. src: the tensor whose memory data points into,
 * when the caller names it (lt__mat_of), so that autocast can reuse a bf16
 * copy of the same memory at the same storage version; NULL otherwise
 * (LT__MAT). bf16: in an f32 product, this operand already holds bf16
 * elements (the autocast copy of an f32 matrix, lt__autocast_input): used
 * as it is under autocast, widened exactly to f32 otherwise. */
typedef struct lt__mat {
  void *data;
  int64_t rows, cols;
  int64_t rs, cs;
  const lt_tensor *src;
  bool bf16;
} lt__mat;

#define LT__MAT(data_, rows_, cols_, rs_, cs_) \
  ((lt__mat){(void *)(data_), (rows_), (cols_), (rs_), (cs_), NULL, false})

/* The transpose of a, as a view of the same elements. */
static inline lt__mat lt__mat_t(lt__mat a) {
  lt__mat t = LT__MAT(a.data, a.cols, a.rows, a.cs, a.rs);
  t.src = a.src;
  t.bf16 = a.bf16;
  return t;
}

/* m marked as reading t's memory (borrowed: t must stay alive and unwritten
 * during the product). Under autocast the bf16 copy of such an operand is
 * kept per thread, keyed by t's storage id, version and the view's geometry
 * (tensor/matmul.c, "the autocast operand cache"): a parameter's (a leaf
 * requiring grad: PyTorch's rule for its weight cache) until its version
 * changes, so one conversion serves the forward and backward products of a
 * step; any other tensor's in a couple of short-lived slots, so that the two
 * backward products of a Linear (g W and g^T x) convert g once. */
static inline lt__mat lt__mat_of(lt__mat m, const lt_tensor *t) {
  m.src = t;
  return m;
}

/* BLIS 0.9.0's rule for the strides of a rows x cols matrix
 * (bli_check_matrix_strides; BLIS aborts when it is broken): positive
 * strides, rows and columns that cannot overlap. A stride along a dim of
 * size 1 is never followed, so it is first given the value BLIS expects
 * (rs = cols*cs for one row, cs = rows*rs for one column). Empty matrices
 * pass. Negative strides are refused (libtensor views never make them). */
bool lt__mat_ok(int64_t rows, int64_t cols, int64_t rs, int64_t cs);

/* x [..., K] (ndim >= 1) as the matrix [N, K] of its rows, N the product of
 * the leading dims: true, with *m filled (data at x->data), when the leading
 * dims nest into one row stride and lt__mat_ok accepts the result; false
 * otherwise (then copy x contiguous). */
bool lt__mat_rows(const lt_tensor *x, lt__mat *m);

/* c = alpha * a b + beta * c for views a [m, k], b [k, n], c [m, n] whose
 * strides lt__mat_ok accepts (c must not overlap a or b). dt is a's and b's
 * dtype: f32 or f64 (c the same; BLIS), or bf16 (c is f32, accumulated in
 * f32; oneDNN, tensor/dnnl_internal.h). Under autocast (lt_set_autocast) an
 * f32 product takes bf16 copies of a and b (made here, once per call, in
 * their own orientation) and runs as a bf16 one: this is the one autocast
 * hook, so every product of the library (lt_matmul, Linear, attention, and
 * their backward) gets it. Where oneDNN has no bf16 matmul for the CPU, bf16
 * operands are widened to f32 and autocast leaves products in f32.
 * one_thread: run on this thread only (the caller parallelises over a batch
 * of products itself, inside an OpenMP region); else BLIS's, oneDNN's and
 * libtensor's threads as the size warrants. Shapes that do not chain are a
 * programmer error (LT_CHECK). Errors: LT_ERR_DTYPE, LT_ERR_BACKEND,
 * LT_ERR_NOMEM. */
lt_status lt__mat_gemm(lt_dtype dt, bool one_thread, double alpha, lt__mat a, lt__mat b, double beta, lt__mat c);

/* An f32 operand b [k, n] that many products read as their B (the fused
 * attention's K^T and V^T tiles, read by every query tile and every head of
 * a GQA group), packed once for the panel kernel of tensor/blas.c instead of
 * once per product. lt__mat_pack_floats(k, n): the floats the packed b
 * takes, or 0 when this thread's lt__mat_gemm would not run such a product
 * in the panel kernel (no AVX-512, LT_GEMM_SMALL=0, autocast active, k or n
 * outside the kernel's rule): then call lt__mat_gemm. lt__mat_pack writes
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

/* True when an f32 product issued on this thread now runs with bf16
 * operands (autocast on, and a bf16 matmul on this CPU). */
bool lt__autocast_active(void);

/* Under autocast (lt__autocast_active()), an f32 operand that several
 * products read (attention's dO in its backward) converted once:
 * *out views its bf16 copy (bf16 set) in this thread's buffer `slot` (0 or
 * 1), valid until the next call with the same slot on this thread; the
 * products then use it as it is, with the bits they would have got
 * converting it themselves. one_thread as lt__mat_gemm. Errors:
 * LT_ERR_NOMEM. */
lt_status lt__mat_hold_bf16(int slot, lt__mat x, bool one_thread, lt__mat *out);

/* dst[j] = the bf16 rounding of src[j] (lt__bf16_from_f32) for j < n, the
 * rounding every autocast conversion uses, vectorised (AVX-512: 16 a
 * step). For a kernel that writes an operand's bf16 copy while its f32
 * values are in cache (attention's softmax rows write P's). Borrows both. */
void lt__bf16_run(uint16_t *restrict dst, const float *restrict src, int64_t n);

/* x (an f32 view) rounded to bf16 into dst, row-major and dense
 * (dst[i * x.cols + j]), on the calling thread: the values an autocast
 * product would convert x to, for a caller that converts an operand once and
 * keeps the copy (attention's q, k and v, once per call for all heads; a
 * view with bf16 set then reads it). Borrows x and dst (x.rows * x.cols
 * elements). */
void lt__mat_bf16_rows(lt__mat x, uint16_t *dst);

/* The bf16 copy of t (f32, contiguous, not empty) from the autocast operand
 * cache, as a contiguous array of t's elements: a parameter's copy is made
 * once per storage version and shared with the products that read it
 * (conv2d's forward and input gradient read the weight's, nn/conv.c).
 * *out is borrowed: valid until the next autocast product or conversion on
 * this thread. Errors: LT_ERR_NOMEM. */
lt_status lt__autocast_bf16_of(const lt_tensor *t, const uint16_t **out);

/* The bf16 copy of x (f32, any strides) that an autocast product reads, as
 * a new contiguous bf16 tensor of x's shape: returns new (free with
 * lt_tensor_free), not recorded for autograd. A module that keeps its
 * operand for the backward (Linear) saves this copy instead of x, as
 * PyTorch's autocast does (its linear saves the bf16 input): the backward
 * product then needs no second conversion, and an f32 activation read only
 * by products is freed after the forward. The same copy (a new view of its
 * storage) is handed out again while x's storage version is unchanged, for
 * the last few inputs of the thread (q, k and v projections of one x
 * convert it once); the thread keeps references to those copies until
 * they are displaced or autocast is turned off. Errors: LT_ERR_NOMEM. */
lt_tensor *lt__autocast_input(const lt_tensor *x);

/* A Linear's output gradient g [N, M] (f32, any strides) for an autocast
 * backward: returns new (free with lt_tensor_free; a contiguous bf16 [N, M]
 * tensor, not recorded) holding g's bf16 copy, and, when colsum is not NULL,
 * writes its column sums (the bias gradient, f32 [M], summed in f64 row by
 * row: the same bits on any thread count) in the same pass over g. NULL on
 * error (LT_ERR_NOMEM). lt_sum over the rows is the reference. */
lt_tensor *lt__autocast_bf16_colsum(lt__mat g, float *colsum);

/* Sets this thread's autocast mode without touching its weight cache and
 * returns the previous one. For OpenMP regions that issue products: worker
 * threads never saw the caller's thread-local mode, so the region's body
 * adopts the mode the caller read before the region (lt_autocast_dtype) and
 * restores the worker's own after:
 *   const lt_dtype ac = lt_autocast_dtype();
 *   #pragma omp parallel for ...
 *   for (...) { const lt_dtype prev = lt__autocast_adopt(ac); ...; lt__autocast_adopt(prev); } */
lt_dtype lt__autocast_adopt(lt_dtype mode);

/* The calling thread's autocast weight cache: entries and bytes of bf16
 * copies held (for tests and benchmarks), and conversions made so far. */
void lt__autocast_cache_stats(int *entries, size_t *bytes, int64_t *conversions);

#endif /* LT_TENSOR_GEMM_INTERNAL_H */
