/*
 * nn/linear.c: lt_linear, y = x W^T + b (torch.nn.functional.linear), forward
 * and backward side by side.
 *
 * What this is: one BLIS GEMM per pass. x [..., in] is seen as a matrix
 * [N, in] (N the product of the leading dims) through its own strides, and
 * W^T [in, out] is weight [out, in] with its two strides swapped, so neither
 * is copied (x is copied only when its leading dims cannot be flattened into
 * one row stride, e.g. an expanded or permuted batch). The bias is written
 * into the output rows first and the GEMM accumulates onto it (beta = 1), as
 * torch.addmm does; see the comment at fill_bias for the measurement.
 *
 *   forward:  y  [N, out] = x [N, in] · W^T [in, out] (+ b [out] per row)
 *   backward: dx [N, in]  = g [N, out] · W [out, in]
 *             dW [out, in] = g^T [out, N] · x [N, in]    (one GEMM over the batch)
 *             db [out]    = sum over rows of g            (lt_sum: deterministic)
 *
 * What this is not: a GEMM (that is BLIS, reached through lt__mat_gemm), or a
 * fused activation: lt_linear followed by lt_gelu is two passes.
 */
#define _DEFAULT_SOURCE /* madvise */
#include "nn/nn.h"

#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/autocast_internal.h"
#include "tensor/quant.h"

#include <omp.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

/* ======================================================================== */
/* Matrix views for BLIS                                                    */
/* ======================================================================== */

/* A contiguous copy of x in dtype dt, not recorded for autograd (the linear
 * node records the caller's tensors). */
static lt_tensor *copy_untracked(const lt_tensor *x) {
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *c = lt_clone(x);
  lt_set_grad_enabled(prev);
  return c;
}

/* Ask for transparent huge pages on a large output before it is first
 * touched (faulting in tens of MB in 4 KiB pages costs a large fraction of
 * the GEMM; see tensor/matmul.c and docs/gemm.md). Advice only. */
static void advise_huge_pages(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t huge = (uintptr_t)2 << 20;
  if (bytes < 2 * huge) return;
  uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

/* ======================================================================== */
/* Forward                                                                  */
/* ======================================================================== */

static lt_status check(const lt_tensor *x, const lt_tensor *w, const lt_tensor *b) {
  if (!x) return lt__err_null("linear", "x");
  if (!w) return lt__err_null("linear", "weight");
  if (!lt_dtype_is_float(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
    return lt__err(LT_ERR_DTYPE,
                   "linear: x is %s, weight is %s, bias is %s: x must be f32 or f64 and weight and bias "
                   "the same dtype (cast with lt_to_dtype)",
                   LT__D(x), LT__D(w), b ? LT__D(b) : "NULL");
  if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1])
    return lt__err(LT_ERR_SHAPE,
                   "linear: x is %s, weight is %s: x must be [..., in] (at least 1-d) and weight "
                   "[out, in] with the same in",
                   LT__D(x), LT__D(w));
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
    return lt__err(LT_ERR_SHAPE, "linear: weight is %s, bias is %s: bias must be [out] = [%lld]", LT__D(w),
                   LT__D(b), (long long)w->shape[0]);
  return LT_OK;
}

/* y [N, M] (contiguous) = b in every row: the GEMM then adds x W^T onto it
 * (beta = 1), which is also how torch.addmm computes a biased linear (and
 * gives the same bits as adding b afterwards: BLIS adds C once at the end).
 * The rows are written in parallel, so the output's pages are faulted in by
 * all threads before BLIS runs. One pass over the output, not a product and
 * a separate add: the two cost the same on their own, and the fused form is
 * faster than lt_add(lt_matmul(x, W^T), b) forward and backward (figures: docs/gemm.md, "Figures behind the code's rules");
 * test_bench in tests/test_nn_functional.c measures it with LT_BENCH=1). */
static void fill_bias(char *y, const char *b, int64_t N, int64_t M, size_t es) {
  const size_t row = (size_t)M * es;
#pragma omp parallel for schedule(static) if (N * M >= LT__PARALLEL_MIN)
  for (int64_t r = 0; r < N; r++) memcpy(y + (size_t)r * row, b, row);
}

/* A quantized weight (lt_tensor_quantize_): the product of tensor/qgemm.c,
 * not recorded (it has no backward). */
static lt_status quantized_no_grad(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias) {
  if (lt_grad_enabled() && (x->requires_grad || (bias && bias->requires_grad)))
    return lt__err(LT_ERR_AUTOGRAD,
                   "linear: weight %s holds %s weights, which have no backward, and x or bias requires grad: run "
                   "inference under lt_set_grad_enabled(false)",
                   LT__D(weight), lt_qformat_name(lt_qmatrix_format(lt_tensor_qmatrix(weight))));
  return LT_OK;
}

static lt_tensor *linear_quantized(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias) {
  if (quantized_no_grad(x, weight, bias) != LT_OK) return NULL;
  return lt_qmatrix_linear(x, lt_tensor_qmatrix(weight), bias);
}

lt_status lt_linear_many(const lt_tensor *x, int n, const lt_tensor *const *weights, const lt_tensor *const *biases,
                         lt_tensor **out) {
  if (n < 1 || n > LT_QMATRIX_MANY_MAX)
    return lt__err(LT_ERR_INVALID, "linear_many: %d weights: 1 to %d", n, LT_QMATRIX_MANY_MAX);
  if (!weights) return lt__err_null("linear_many", "weights");
  if (!out) return lt__err_null("linear_many", "out");
  const lt_qmatrix *qm[LT_QMATRIX_MANY_MAX];
  bool fused = true; /* every weight quantized, in one format */
  for (int i = 0; i < n; i++) out[i] = NULL;
  for (int i = 0; i < n; i++) {
    const lt_tensor *b = biases ? biases[i] : NULL;
    if (check(x, weights[i], b) != LT_OK) return lt_last_status();
    qm[i] = lt_tensor_qmatrix(weights[i]);
    fused = fused && qm[i] && lt_qmatrix_format(qm[i]) == lt_qmatrix_format(qm[0]);
    if (qm[i] && quantized_no_grad(x, weights[i], b) != LT_OK) return lt_last_status();
  }
  if (fused) return lt_qmatrix_linear_many(x, n, qm, biases, out);
  for (int i = 0; i < n; i++)
    if (!(out[i] = lt_linear(x, weights[i], biases ? biases[i] : NULL))) {
      for (int j = 0; j < i; j++) lt_tensor_free(out[j]), out[j] = NULL;
      return lt_last_status();
    }
  return LT_OK;
}

lt_tensor *lt_linear(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias) {
  if (check(x, weight, bias) != LT_OK) return NULL;
  if (lt_tensor_qmatrix(weight)) return linear_quantized(x, weight, bias);
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_dtype dt = x->dtype;
  const size_t es = lt_dtype_size(dt);
  const int64_t K = x->shape[x->ndim - 1], M = weight->shape[0];
  int64_t N = 1;
  for (int d = 0; d < x->ndim - 1; d++) N *= x->shape[d];
  int64_t shape[LT_MAX_DIMS];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 1] = M;

  /* Operands BLIS cannot take as they are are copied (contiguous). */
  lt_tensor *xc = NULL, *wc = NULL, *bc = NULL, *y = NULL, *xb = NULL; /* xb: x's bf16 copy (autocast) */
  lt__mat X; /* [N, K] */
  if (!lt__mat_rows(x, &X)) {
    if (!(xc = copy_untracked(x))) goto fail;
    LT_CHECK(lt__mat_rows(xc, &X));
  }
  const lt_tensor *xin = xc ? xc : x;
  X = lt__mat_of(X, xin);
  /* Under autocast the product reads x's bf16 copy, and the node saves that
   * copy (as PyTorch's autocast linear does): the backward's dW = g^T x
   * reads it without converting x again, and an f32 x read by products only
   * (a norm's output, GELU's) is freed after the forward. An input shared by
   * several Linears (q, k, v) is converted once (lt__autocast_input). */
  if (dt == LT_DTYPE_F32 && lt__autocast_active() && N * K > 0 && M > 0) {
    if (!(xb = lt__autocast_input(xin))) goto fail;
    LT_CHECK(lt__mat_rows(xb, &X));
    X.bf16 = true;
  }
  if (!lt__mat_ok(M, K, weight->stride[0], weight->stride[1]) && !(wc = copy_untracked(weight))) goto fail;
  const lt_tensor *win = wc ? wc : weight;
  /* [M, K]; under autocast a parameter's bf16 copy is kept for the backward */
  const lt__mat W = lt__mat_of(LT__MAT(win->data, M, K, win->stride[0], win->stride[1]), win);
  if (bias && bias->stride[0] != 1 && M > 1 && !(bc = copy_untracked(bias))) goto fail;
  const lt_tensor *bin = bc ? bc : bias;

  if (!(y = lt_empty(dt, x->ndim, shape))) goto fail;
  if (N * M > 0 && K > 0 && bin && xb) {
    /* Autocast: oneDNN adds the bias as it writes y (same bits as below). */
    advise_huge_pages(y->data, (size_t)(N * M) * es);
    if (lt__mat_gemm_bias(false, X, lt__mat_t(W), bin->data, LT__MAT(y->data, N, M, M, 1)) != LT_OK) goto fail;
  } else if (N * M > 0) {
    advise_huge_pages(y->data, (size_t)(N * M) * es);
    if (bin) fill_bias(y->data, bin->data, N, M, es);
    else if (K == 0) memset(y->data, 0, (size_t)(N * M) * es);
    /* y [N, M] = X [N, K] W^T [K, M] (+ the bias already in y) */
    if (K > 0 && lt__mat_gemm(dt, false, 1.0, X, lt__mat_t(W), bin ? 1.0 : 0.0, LT__MAT(y->data, N, M, M, 1)) != LT_OK)
      goto fail;
  }
  /* Saved: x and weight as the product reads them (the copies, if any; x's
   * bf16 copy under autocast). */
  if (lt__record(y, LT__OP_linear, 3, (const lt_tensor *[]){x, weight, bias}, 2,
                 (const lt_tensor *[]){xb ? xb : xin, win}, NULL, 0) != LT_OK)
    goto fail;
  lt_tensor_free(xb);
  lt_tensor_free(xc);
  lt_tensor_free(wc);
  lt_tensor_free(bc);
  return y;
fail:
  lt_tensor_free(xb);
  lt_tensor_free(xc);
  lt_tensor_free(wc);
  lt_tensor_free(bc);
  lt_tensor_free(y);
  return NULL;
}

/* ======================================================================== */
/* Backward                                                                 */
/* ======================================================================== */

/* y = x W^T + b  =>  dx = g W, dW = g^T x, db = sum_rows g. Saved: x [..., in]
 * (rows BLIS accepts; bf16, x's autocast copy, when the forward ran under
 * autocast) and weight [out, in]. Temporaries belong to the engine's scope. */
lt_status lt__bw_linear(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt_tensor *x = node->saved[0], *w = node->saved[1];
  const lt_dtype dt = w->dtype;
  const int64_t K = x->shape[x->ndim - 1], M = w->shape[0];
  int64_t Nx = 1; /* rows: the product of x's leading dims */
  for (int d = 0; d < x->ndim - 1; d++) Nx *= x->shape[d];
  lt__mat G, X; /* g [N, M], x [N, K] */
  const lt_tensor *g = gout;
  if (g->dtype != dt || !lt__mat_rows(g, &G)) {
    g = lt_to_dtype(gout, dt);
    if (g && !lt_is_contiguous(g)) g = lt_contiguous(g);
    if (!g) return lt_last_status();
    LT_CHECK(lt__mat_rows(g, &G));
  }
  LT_CHECK(lt__mat_rows(x, &X));
  G = lt__mat_of(G, g); /* g's bf16 copy serves both products under autocast */
  /* Under autocast, g's bf16 copy and the bias gradient (its column sums)
   * come from one pass over g. */
  lt_tensor *db = NULL;
  if (dt == LT_DTYPE_F32 && lt__autocast_active() && Nx * M > 0 &&
      (lt__needs_input_grad(node, 0) || lt__needs_input_grad(node, 1))) {
    if (lt__needs_input_grad(node, 2) && !(db = lt_empty(dt, 1, (const int64_t[]){M}))) return lt_last_status();
    lt_tensor *gb = lt__autocast_bf16_colsum(G, db ? db->data : NULL);
    if (!gb) return lt_last_status();
    LT_CHECK(lt__mat_rows(gb, &G));
    G.bf16 = true;
    if (db) gin[2] = db;
  }
  X = lt__mat_of(X, x);
  X.bf16 = x->dtype == LT_DTYPE_BF16; /* widened exactly if the backward runs outside autocast */
  const lt__mat W = lt__mat_of(LT__MAT(w->data, M, K, w->stride[0], w->stride[1]), w); /* [M, K] */

  if (lt__needs_input_grad(node, 0)) { /* dx [N, K] = g [N, M] · W [M, K] */
    lt_tensor *dx = (M > 0 ? lt_empty : lt_zeros)(dt, x->ndim, x->shape);
    if (!dx) return lt_last_status();
    if (M > 0 && Nx * K > 0 && lt__mat_gemm(dt, false, 1.0, G, W, 0.0, LT__MAT(dx->data, Nx, K, K, 1)) != LT_OK)
      return lt_last_status();
    gin[0] = dx;
  }
  if (lt__needs_input_grad(node, 1)) { /* dW [M, K] = g^T [M, N] · x [N, K] */
    lt_tensor *dw = (Nx > 0 ? lt_empty : lt_zeros)(dt, 2, w->shape);
    if (!dw) return lt_last_status();
    if (Nx > 0 && M * K > 0 &&
        lt__mat_gemm(dt, false, 1.0, lt__mat_t(G), X, 0.0, LT__MAT(dw->data, M, K, K, 1)) != LT_OK)
      return lt_last_status();
    gin[1] = dw;
  }
  if (lt__needs_input_grad(node, 2) && !db) { /* db [M] = sum over the N rows of g */
    lt_tensor *gv = lt__view_of(g, 2, (const int64_t[]){Nx, M}, (const int64_t[]){G.rs, G.cs}, g->offset);
    lt_tensor *sum = gv ? lt_sum(gv, LT_DIMS(0), false) : NULL;
    lt_tensor_free(gv);
    if (!sum) return lt_last_status();
    gin[2] = sum;
  }
  return LT_OK;
}
