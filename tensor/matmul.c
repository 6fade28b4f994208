/*
 * tensor/matmul.c: lt_matmul (torch.matmul semantics), its backward, and the
 * naive reference kernel it is tested against.
 *
 * What this is: the shape rules (1-d promotion, batch broadcasting), a plan
 * that hands each operand to the GEMM dispatch with its own strides (a
 * transposed or sliced view is never copied), three ways to run a plan (one
 * GEMM; batch dims folded into the rows of one GEMM; a batch of GEMMs, in
 * parallel over the batch when the products are small), and the backward
 * dA = g B^T, dB = A^T g written as lt_matmul on transposed views.
 *
 * What this is not: a GEMM, nor the choice of one. Every product goes
 * through lt__mat_gemm (tensor/gemm.c, the one dispatch: BLIS, the
 * small-product kernels or oneDNN); the stride rule is tensor/matview.c's
 * and autocast tensor/autocast.c's. Integer matmul is not supported. See
 * docs/gemm.md for how close this stays to raw BLIS.
 *
 * Vocabulary: a is [..., m, k], b is [..., k, n], out is [..., m, n]; the
 * "..." are the batch dims, broadcast against each other.
 */
#include "tensor/matmul_internal.h"

#include "tensor/autocast_internal.h"
#include "tensor/error_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/graph_internal.h"
#include "tensor/matview_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"

#include <stdint.h>
#include <stdlib.h>

/* ======================================================================== */
/* Shapes                                                                   */
/* ======================================================================== */

/* The geometry of one call. 1-d operands are promoted: a [k] is a [1,k]
 * matrix and b [k] a [k,1] matrix; those unit dims are not in the output. */
typedef struct mm_shape {
  int nbd;                      /* batch dims of the output */
  int64_t bshape[LT_MAX_DIMS];  /* [nbd] broadcast batch shape */
  int64_t sa[LT_MAX_DIMS];      /* a's batch strides on bshape (0 where broadcast) */
  int64_t sb[LT_MAX_DIMS];      /* b's batch strides on bshape */
  int64_t nbatch;               /* product of bshape */
  int64_t m, n, k;
  int64_t rsa, csa;             /* a's matrix [m,k] row and column strides */
  int64_t rsb, csb;             /* b's matrix [k,n] */
  int out_ndim;
  int64_t out_shape[LT_MAX_DIMS];
  int64_t numel;                /* of the output */
} mm_shape;

/* Validates a and b and fills *s. Sets the error (naming the op, both shapes
 * and dtypes, and the rule) and returns it on failure. */
static lt_status mm_check(const lt_tensor *a, const lt_tensor *b, mm_shape *s) {
  if (!a) return lt__err_null("matmul", "a");
  if (!b) return lt__err_null("matmul", "b");
  if (a->ndim == 0 || b->ndim == 0)
    return lt__err(LT_ERR_SHAPE,
                   "matmul: a is %s, b is %s: both operands need at least 1 dimension (%s is 0-d; "
                   "use lt_mul for a scalar factor)",
                   LT__D(a), LT__D(b), a->ndim == 0 ? "a" : "b");
  if (!lt_dtype_is_floating(a->dtype) || !lt_dtype_is_floating(b->dtype))
    return lt__err(LT_ERR_DTYPE,
                   "matmul: a is %s, b is %s: only f32, f64 and bf16 are supported (cast with lt_to_dtype)",
                   LT__D(a), LT__D(b));
  if (a->dtype != b->dtype)
    return lt__err(LT_ERR_DTYPE,
                   "matmul: a is %s, b is %s: dtypes differ (%s vs %s); cast one with lt_to_dtype",
                   LT__D(a), LT__D(b), lt_dtype_name(a->dtype), lt_dtype_name(b->dtype));

  const bool a1 = a->ndim == 1, b1 = b->ndim == 1;
  const int nda = a->ndim, ndb = b->ndim;
  s->m = a1 ? 1 : a->shape[nda - 2];
  s->k = a->shape[nda - 1];
  const int64_t kb = b1 ? b->shape[0] : b->shape[ndb - 2];
  s->n = b1 ? 1 : b->shape[ndb - 1];
  if (s->k != kb)
    return lt__err(LT_ERR_SHAPE, "matmul: a is %s, b is %s: inner dimensions %lld != %lld",
                   LT__D(a), LT__D(b), (long long)s->k, (long long)kb);
  /* Strides of size-1 matrix dims are fixed up in mm_canon; 0 is a placeholder. */
  s->rsa = a1 ? 0 : a->stride[nda - 2];
  s->csa = a->stride[nda - 1];
  s->rsb = b1 ? b->stride[0] : b->stride[ndb - 2];
  s->csb = b1 ? 0 : b->stride[ndb - 1];

  const int nba = a1 ? 0 : nda - 2, nbb = b1 ? 0 : ndb - 2;
  s->nbd = nba > nbb ? nba : nbb;
  s->nbatch = 1;
  for (int d = 0; d < s->nbd; d++) {
    const int ia = d - (s->nbd - nba), ib = d - (s->nbd - nbb);
    const int64_t za = ia >= 0 ? a->shape[ia] : 1, zb = ib >= 0 ? b->shape[ib] : 1;
    if (za != zb && za != 1 && zb != 1)
      return lt__err(LT_ERR_SHAPE,
                     "matmul: a is %s, b is %s: batch dimensions %s and %s do not broadcast "
                     "(%lld vs %lld)",
                     LT__D(a), LT__D(b), LT__S(nba, a->shape), LT__S(nbb, b->shape),
                     (long long)za, (long long)zb);
    s->bshape[d] = za == 1 ? zb : za;
    s->sa[d] = za == 1 ? 0 : a->stride[ia];
    s->sb[d] = zb == 1 ? 0 : b->stride[ib];
    s->nbatch *= s->bshape[d];
  }
  s->out_ndim = 0;
  for (int d = 0; d < s->nbd; d++) s->out_shape[s->out_ndim++] = s->bshape[d];
  if (!a1) s->out_shape[s->out_ndim++] = s->m;
  if (!b1) s->out_shape[s->out_ndim++] = s->n;
  return lt__shape_numel("matmul", s->out_ndim, s->out_shape, &s->numel);
}

/* ======================================================================== */
/* Running a plan                                                           */
/* ======================================================================== */

/* Batched products of at most this many multiply-adds each may run one
 * product per thread (see batch_per_thread): below it one product per thread
 * beats BLIS threads inside each product, the more the smaller the products;
 * above it a few large products do better split by BLIS (bench_gemm
 * --switch places it; the figures: docs/gemm.md, "Batched products"). */
static int64_t batch_par_max = (int64_t)1 << 26;

int64_t lt__matmul_batch_par_max(void) { return batch_par_max; }
int64_t lt__matmul_set_batch_par_max(int64_t macs) {
  int64_t prev = batch_par_max;
  batch_par_max = macs;
  return prev;
}

/* One product per thread, or one product after another with BLIS threads?
 * Per thread wins clearly for small products (BLIS cannot split a 64x64 tile
 * usefully) and still at tens of millions of multiply-adds (no
 * synchronisation inside each product). For the larger products only a
 * batch that spreads evenly over the threads is worth it: 3 products on 2
 * threads leave one thread idle a third of the time. */
static bool batch_per_thread(int64_t nbatch, int64_t macs, int nt) {
  if (nt <= 1 || nbatch < 2 || macs > batch_par_max) return false;
  return macs <= batch_par_max / 16 || nbatch % nt == 0 || nbatch >= 4 * (int64_t)nt;
}

/* Product number i of the batch (out is contiguous: its i-th matrix starts at
 * i*m*n). single: one thread (we are inside an OpenMP region). */
static lt_status mm_gemm_at(const mm_shape *s, lt_dtype dt, const char *pa, const char *pb,
                            char *pc, int64_t i, bool single) {
  const int64_t es = (int64_t)lt_dtype_size(dt);
  const int64_t esc = (int64_t)lt_dtype_size(lt__compute_dtype(dt)); /* bf16 products write f32 */
  int64_t oa = 0, ob = 0, rem = i;
  for (int d = s->nbd - 1; d >= 0; d--) {
    const int64_t id = rem % s->bshape[d];
    rem /= s->bshape[d];
    oa += id * s->sa[d];
    ob += id * s->sb[d];
  }
  int64_t rsc = s->n, csc = 1;
  lt__mat_canon(s->m, s->n, &rsc, &csc);
  const char *A = pa + oa * es, *B = pb + ob * es;
  char *C = pc + i * s->m * s->n * esc;
  return lt__mat_gemm(dt, single, 1.0, LT__MAT(A, s->m, s->k, s->rsa, s->csa),
                      LT__MAT(B, s->k, s->n, s->rsb, s->csb), 0.0, LT__MAT(C, s->m, s->n, rsc, csc));
}

/* When b is the same matrix for every batch entry and a's batch dims nest
 * into its rows (a [B,T,C] contiguous, say), the batch is one GEMM of
 * [nbatch*m, k] x [k, n]: out is contiguous, so its rows nest the same way.
 * This is every Linear layer. Fills the folded row count and row stride. */
static bool mm_fold_rows(const mm_shape *s, int64_t *rows, int64_t *rs) {
  if (s->nbatch <= 1) return false;
  for (int d = 0; d < s->nbd; d++)
    if (s->sb[d] != 0) return false;
  int64_t shape[LT_MAX_DIMS + 1], stride[LT_MAX_DIMS + 1], inner = 0;
  int nd = 0;
  for (int d = 0; d < s->nbd; d++, nd++) {
    shape[nd] = s->bshape[d];
    stride[nd] = s->sa[d];
  }
  if (s->m > 1) {
    shape[nd] = s->m;
    stride[nd++] = s->rsa;
  }
  if (!lt__mat_nest_rows(nd, shape, stride, &inner)) return false;
  int64_t r = s->nbatch * s->m, rsa = inner, csa = s->csa;
  lt__mat_canon(r, s->k, &rsa, &csa);
  if (!lt__mat_ok(r, s->k, rsa, csa)) return false;
  *rows = r;
  *rs = rsa;
  return true;
}

/* out = a b for validated operands whose matrix strides BLIS accepts. */
static lt_status mm_run(const lt_tensor *a, const lt_tensor *b, const mm_shape *s, lt_tensor *out) {
  const lt_dtype dt = a->dtype;
  const char *pa = a->data, *pb = b->data;
  char *pc = out->data;
  if (s->nbatch == 1) return mm_gemm_at(s, dt, pa, pb, pc, 0, false);

  int64_t rows, rsa;
  if (mm_fold_rows(s, &rows, &rsa)) {
    int64_t csa = s->csa, rsc = s->n, csc = 1;
    lt__mat_canon(rows, s->k, &rsa, &csa);
    lt__mat_canon(rows, s->n, &rsc, &csc);
    return lt__mat_gemm(dt, false, 1.0, LT__MAT(pa, rows, s->k, rsa, csa),
                        LT__MAT(pb, s->k, s->n, s->rsb, s->csb), 0.0, LT__MAT(pc, rows, s->n, rsc, csc));
  }

  const int nt = lt_get_num_threads();
  if (batch_per_thread(s->nbatch, s->m * s->n * s->k, nt)) {
    /* Many small products (attention: B*NH of [T,HS]x[HS,T]): one per thread.
     * Errors are set on the worker's thread, so report one here. */
    int bad = 0;
    const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
#pragma omp parallel for schedule(static) num_threads(nt) reduction(| : bad)
    for (int64_t i = 0; i < s->nbatch; i++) {
      const lt_dtype prev = lt__autocast_adopt(ac);
      if (!bad) bad |= mm_gemm_at(s, dt, pa, pb, pc, i, true) != LT_OK;
      lt__autocast_adopt(prev);
    }
    if (bad)
      return lt__err(LT_ERR_BACKEND, "matmul: a is %s, b is %s: BLIS gemm failed in a batched product",
                     LT__D(a), LT__D(b));
    return LT_OK;
  }
  for (int64_t i = 0; i < s->nbatch; i++) {
    lt_status st = mm_gemm_at(s, dt, pa, pb, pc, i, false);
    if (st != LT_OK) return st;
  }
  return LT_OK;
}

/* A contiguous copy made for BLIS only: not recorded for autograd (the
 * matmul node records the caller's tensors). */
static lt_tensor *contiguous_untracked(const lt_tensor *x) {
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *c = lt_contiguous(x);
  lt_set_grad_enabled(prev);
  return c;
}

/* ======================================================================== */
/* Forward                                                                  */
/* ======================================================================== */

lt_tensor *lt_matmul(const lt_tensor *a, const lt_tensor *b) {
  mm_shape s;
  if (mm_check(a, b, &s) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;

  /* k == 0: an empty sum, zeros. m, n or a batch dim == 0: an empty result.
   * bf16 operands accumulate in f32 (oneDNN writes f32) and the result is
   * rounded to bf16 once, as PyTorch. */
  const bool compute = s.numel > 0 && s.k > 0;
  const lt_dtype acc = lt__compute_dtype(a->dtype);
  lt_tensor *out = compute ? lt_empty(acc, s.out_ndim, s.out_shape) : lt_zeros(a->dtype, s.out_ndim, s.out_shape);
  if (!out) return NULL;

  if (compute) {
    /* Each operand goes to BLIS with its own strides; only a matrix whose
     * strides BLIS cannot take (0 from lt_expand, overlapping rows) is copied. */
    lt_tensor *ac = NULL, *bc = NULL;
    lt__mat_canon(s.m, s.k, &s.rsa, &s.csa);
    lt__mat_canon(s.k, s.n, &s.rsb, &s.csb);
    const bool copy_a = !lt__mat_ok(s.m, s.k, s.rsa, s.csa);
    const bool copy_b = !lt__mat_ok(s.k, s.n, s.rsb, s.csb);
    if ((copy_a && !(ac = contiguous_untracked(a))) || (copy_b && !(bc = contiguous_untracked(b)))) {
      lt_tensor_free(ac);
      lt_tensor_free(out);
      return NULL;
    }
    const lt_tensor *ua = ac ? ac : a, *ub = bc ? bc : b;
    lt_status st = LT_OK;
    if (ac || bc) {
      st = mm_check(ua, ub, &s);
      lt__mat_canon(s.m, s.k, &s.rsa, &s.csa);
      lt__mat_canon(s.k, s.n, &s.rsb, &s.csb);
      LT_CHECK(st != LT_OK || (lt__mat_ok(s.m, s.k, s.rsa, s.csa) &&
                               lt__mat_ok(s.k, s.n, s.rsb, s.csb)));
    }
    if (st == LT_OK) st = mm_run(ua, ub, &s, out);
    lt_tensor_free(ac);
    lt_tensor_free(bc);
    if (st == LT_OK && acc != a->dtype) {
      const bool prev = lt_set_grad_enabled(false);
      lt_tensor *r = lt_to_dtype(out, a->dtype);
      lt_set_grad_enabled(prev);
      lt_tensor_free(out);
      out = r;
      if (!r) return NULL;
    }
    if (st != LT_OK) {
      lt_tensor_free(out);
      return NULL;
    }
  }

  if (lt__record(out, LT__OP_matmul, 2, (const lt_tensor *[]){a, b}, 2,
                 (const lt_tensor *[]){a, b}, NULL, 0) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

/* ======================================================================== */
/* Backward                                                                 */
/* ======================================================================== */

/* out = a b  =>  dA = g B^T, dB = A^T g, with 1-d operands promoted as in the
 * forward (a [k] -> [1,k], b [k] -> [k,1], g given the unit dims back) and
 * the promoted dim squeezed out of the gradient again. Gradients come back in
 * the broadcast batch shape, right-aligned with the input's shape ([2,3,4,5]
 * for a [2,1,4,5]); the engine sums them to the input's shape. Saved: a, b.
 * Temporaries belong to the engine's scope. */
lt_status lt__bw_matmul(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt_tensor *a = node->saved[0], *b = node->saved[1];
  const bool a1 = a->ndim == 1, b1 = b->ndim == 1;
  const lt_tensor *g = gout->dtype == a->dtype ? gout : lt_to_dtype(gout, a->dtype);
  const lt_tensor *A = a1 ? lt_unsqueeze(a, 0) : a;  /* [..., m, k] */
  const lt_tensor *B = b1 ? lt_unsqueeze(b, 1) : b;  /* [..., k, n] */
  const lt_tensor *G = g;                            /* [..., m, n] */
  if (G && b1) G = lt_unsqueeze(G, G->ndim);
  if (G && a1) G = lt_unsqueeze(G, G->ndim - 1);
  if (!A || !B || !G) return lt_last_status();

  if (lt__needs_input_grad(node, 0)) {
    /* dA = g B^T: [..., m, n] x [..., n, k] */
    const lt_tensor *Bt = lt_transpose(B, -2, -1);
    lt_tensor *dA = Bt ? lt_matmul(G, Bt) : NULL;
    if (dA && a1) dA = lt_squeeze(dA, -2);
    if (!dA) return lt_last_status();
    gin[0] = dA;
  }
  if (lt__needs_input_grad(node, 1)) {
    /* dB = A^T g: [..., k, m] x [..., m, n]. When b has no batch dims but a
     * has (x [B,T,C] times a weight), sum over the batch inside one GEMM:
     * [B*T, C]^T x [B*T, n] instead of B products summed afterwards. */
    lt_tensor *dB;
    if (B->ndim == 2 && A->ndim > 2) {
      int64_t rows = 1;
      for (int d = 0; d < A->ndim - 1; d++) rows *= A->shape[d];
      const int64_t k = A->shape[A->ndim - 1], n = G->shape[G->ndim - 1];
      const lt_tensor *Af = lt_reshape(A, LT_SHAPE(rows, k));
      const lt_tensor *Gf = lt_reshape(G, LT_SHAPE(rows, n));
      const lt_tensor *Aft = Af ? lt_transpose(Af, 0, 1) : NULL;
      dB = Aft && Gf ? lt_matmul(Aft, Gf) : NULL;
    } else {
      const lt_tensor *At = lt_transpose(A, -2, -1);
      dB = At ? lt_matmul(At, G) : NULL;
    }
    if (dB && b1) dB = lt_squeeze(dB, -1);
    if (!dB) return lt_last_status();
    gin[1] = dB;
  }
  return LT_OK;
}

/* ======================================================================== */
/* Reference                                                                */
/* ======================================================================== */

/* The textbook loop, indexing each operand through its own shape and strides
 * (no promotion tricks, no canonical strides, no copies), summing in double. */
lt_tensor *lt__matmul_ref(const lt_tensor *a, const lt_tensor *b) {
  mm_shape s;
  if (mm_check(a, b, &s) != LT_OK) return NULL;
  lt_tensor *out = lt_zeros(a->dtype, s.out_ndim, s.out_shape);
  if (!out || s.numel == 0) return out;
  const lt_dtype dt = a->dtype;
  const int64_t es = (int64_t)lt_dtype_size(dt);
  const int nda = a->ndim, ndb = b->ndim;
  const bool a1 = nda == 1, b1 = ndb == 1;
  const int nba = a1 ? 0 : nda - 2, nbb = b1 ? 0 : ndb - 2;
  const int64_t ak = a->stride[nda - 1], am = a1 ? 0 : a->stride[nda - 2];
  const int64_t bk = b1 ? b->stride[0] : b->stride[ndb - 2], bn = b1 ? 0 : b->stride[ndb - 1];
  char *pc = out->data;
  int64_t idx[LT_MAX_DIMS] = {0};
  for (int64_t bi = 0; bi < s.nbatch; bi++) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (int d = s.nbd - 1; d >= 0; d--) {
      idx[d] = rem % s.bshape[d];
      rem /= s.bshape[d];
    }
    for (int j = 0; j < nba; j++)
      if (a->shape[j] != 1) oa += idx[j + s.nbd - nba] * a->stride[j];
    for (int j = 0; j < nbb; j++)
      if (b->shape[j] != 1) ob += idx[j + s.nbd - nbb] * b->stride[j];
    for (int64_t i = 0; i < s.m; i++)
      for (int64_t j = 0; j < s.n; j++) {
        double acc = 0;
        for (int64_t q = 0; q < s.k; q++)
          acc += lt__load((const char *)a->data + (oa + i * am + q * ak) * es, dt) *
                 lt__load((const char *)b->data + (ob + q * bk + j * bn) * es, dt);
        lt__store(pc + ((bi * s.m + i) * s.n + j) * es, dt, acc);
      }
  }
  return out;
}
