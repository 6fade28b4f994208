/*
 * tensor/matmul.c: lt_matmul (torch.matmul semantics) on BLIS, its backward,
 * and the naive reference kernel it is tested against.
 *
 * What this is: the shape rules (1-d promotion, batch broadcasting), a plan
 * that hands each operand to BLIS with its own strides (a transposed or
 * sliced view is never copied), three ways to run a plan (one GEMM; batch
 * dims folded into the rows of one GEMM; a batch of GEMMs, in parallel over
 * the batch when the products are small), and the backward
 * dA = g B^T, dB = A^T g written as lt_matmul on transposed views.
 *
 * What this is not: a GEMM. The arithmetic is BLIS's, reached through
 * tensor/blas.c (the only file that includes blis.h). Integer matmul is not
 * supported. See docs/gemm.md for how close this stays to raw BLIS.
 *
 * Vocabulary: a is [..., m, k], b is [..., k, n], out is [..., m, n]; the
 * "..." are the batch dims, broadcast against each other.
 */
#include "tensor/matmul_internal.h"

#include "autograd/internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/blas_internal.h"
#include "tensor/dnnl_internal.h"
#include "tensor/gemm_internal.h"

#include <stdint.h>
#include <stdlib.h>
#ifdef __linux__
#endif

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
/* Strides BLIS accepts                                                     */
/* ======================================================================== */

/* The stride of a size-1 dim is never followed, so it may be anything in a
 * view (or a placeholder for a promoted 1-d operand): give it the value BLIS
 * expects of a row vector (rs = n*cs) or a column vector (cs = m*rs). */
static void mm_canon(int64_t m, int64_t n, int64_t *rs, int64_t *cs) {
  if (m == 1 && n == 1) {
    *rs = 1;
    *cs = 1;
  } else if (m == 1) {
    *rs = n * *cs;
  } else if (n == 1) {
    *cs = m * *rs;
  }
}

/* ======================================================================== */
/* Running a plan                                                           */
/* ======================================================================== */

/* Batched products of at most this many multiply-adds each may run one
 * product per thread (see batch_per_thread). Measured with 2 threads on an
 * AVX-512 EPYC (docs/gemm.md): per thread is 3-4x faster at 64x64x64, 1.5-2.5x
 * at attention sizes (128x128x64) and still 1.2-1.3x at 1024x1024x64 with 32
 * products; 3 products of 512x512x512 were 11% faster with BLIS threads. */
static int64_t batch_par_max = (int64_t)1 << 26;

int64_t lt__matmul_batch_par_max(void) { return batch_par_max; }
int64_t lt__matmul_set_batch_par_max(int64_t macs) {
  int64_t prev = batch_par_max;
  batch_par_max = macs;
  return prev;
}

/* One product per thread, or one product after another with BLIS threads?
 * Per thread wins clearly for small products (BLIS cannot split a 64x64 tile
 * usefully) and still by 20-30% at tens of millions of multiply-adds (no
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
  mm_canon(s->m, s->n, &rsc, &csc);
  const char *A = pa + oa * es, *B = pb + ob * es;
  char *C = pc + i * s->m * s->n * esc;
  return lt__mat_gemm(dt, single, 1.0, LT__MAT(A, s->m, s->k, s->rsa, s->csa),
                      LT__MAT(B, s->k, s->n, s->rsb, s->csb), 0.0, LT__MAT(C, s->m, s->n, rsc, csc));
}

/* Dims (shape, stride), outermost first, nest into one run of rows when each
 * dim's stride is the next inner dim's stride times that dim's size (dims of
 * size 1 are never followed and ignored). True if they do, with *inner set to
 * the innermost followed dim's stride (left as is when there is none). */
static bool nest_rows(int nd, const int64_t *shape, const int64_t *stride, int64_t *inner) {
  bool have = false;
  int64_t span = 0; /* the stride the next outer dim needs */
  for (int d = nd - 1; d >= 0; d--) {
    if (shape[d] == 1) continue;
    if (!have) {
      have = true;
      *inner = stride[d];
    } else if (stride[d] != span) {
      return false;
    }
    span = stride[d] * shape[d];
  }
  return true;
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
  if (!nest_rows(nd, shape, stride, &inner)) return false;
  int64_t r = s->nbatch * s->m, rsa = inner, csa = s->csa;
  mm_canon(r, s->k, &rsa, &csa);
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
    mm_canon(rows, s->k, &rsa, &csa);
    mm_canon(rows, s->n, &rsc, &csc);
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
    mm_canon(s.m, s.k, &s.rsa, &s.csa);
    mm_canon(s.k, s.n, &s.rsb, &s.csb);
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
      mm_canon(s.m, s.k, &s.rsa, &s.csa);
      mm_canon(s.k, s.n, &s.rsb, &s.csb);
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

/* ======================================================================== */
/* Strided products of matrix views (tensor/gemm_internal.h)                */
/* ======================================================================== */

bool lt__mat_ok(int64_t m, int64_t n, int64_t rs, int64_t cs) {
  if (m == 0 || n == 0) return true;
  mm_canon(m, n, &rs, &cs);
  if (rs <= 0 || cs <= 0) return false;
  if (rs != 1 && cs != 1) {
    if (rs == cs) return m == 1 || n == 1;
    if (rs < cs) return m * rs <= cs;
    return n * cs <= rs;
  }
  if (rs == 1 && cs == 1) return m == 1 || n == 1;
  if (rs == 1) return cs >= m;
  return rs >= n;
}

bool lt__mat_rows(const lt_tensor *x, lt__mat *m) {
  LT_CHECK(x->ndim >= 1);
  const int64_t K = x->shape[x->ndim - 1], cs = x->stride[x->ndim - 1];
  int64_t N = 1, inner = K * cs;
  for (int d = 0; d < x->ndim - 1; d++) N *= x->shape[d];
  if (!nest_rows(x->ndim - 1, x->shape, x->stride, &inner)) return false;
  *m = LT__MAT(x->data, N, K, inner, cs);
  return lt__mat_ok(N, K, inner, cs);
}

/* ---- autocast ------------------------------------------------------------ */

/* The mode is thread-local, like grad mode. OpenMP regions that issue
 * products hand the caller's mode to their workers (lt__autocast_adopt), so
 * a product runs in the mode of the thread that asked for it, on any number
 * of threads. */
static _Thread_local lt_dtype tl_autocast = LT_DTYPE_F32;

static void wcache_clear(void);
static void ai_clear(void);
/* Both caches go with their thread (lt__at_thread_exit, registered by their
 * first entry), as when autocast is turned off on it. */
static void autocast_release(void) {
  wcache_clear();
  ai_clear();
}

lt_dtype lt_autocast_dtype(void) { return tl_autocast; }

lt_dtype lt_set_autocast(lt_dtype dtype) {
  const lt_dtype prev = tl_autocast;
  if (dtype != LT_DTYPE_F32 && dtype != LT_DTYPE_BF16) {
    lt__err(LT_ERR_DTYPE, "set_autocast: dtype %s: autocast takes bf16 (on) or f32 (off)", lt_dtype_name(dtype));
    return prev;
  }
  tl_autocast = dtype;
  if (dtype == LT_DTYPE_F32) { /* leaving autocast drops the bf16 weights, as PyTorch */
    wcache_clear();
    ai_clear();
  }
  return prev;
}

lt_dtype lt__autocast_adopt(lt_dtype mode) {
  const lt_dtype prev = tl_autocast;
  tl_autocast = mode;
  return prev;
}

/* ---- bf16 operands -------------------------------------------------------- */

/* Per-thread conversion buffers, grown as needed and kept for the thread's
 * life (freed when it exits): a step converts the same sizes again and again. 0-1: a product's two
 * operands; 2-3: operands held for several products (lt__mat_hold_bf16). */
static _Thread_local void *tl_buf[4];
static _Thread_local size_t tl_cap[4];

static void conv_release(void) {
  for (int i = 0; i < 4; i++) {
    free(tl_buf[i]);
    tl_buf[i] = NULL;
    tl_cap[i] = 0;
  }
}

static void *conv_buf(int i, size_t bytes) {
  if (bytes <= tl_cap[i]) return tl_buf[i];
  (void)lt__at_thread_exit(conv_release); /* released with the thread */
  free(tl_buf[i]);
  size_t sz = (bytes + 4095) & ~(size_t)4095;
  tl_buf[i] = aligned_alloc(64, sz);
  tl_cap[i] = tl_buf[i] ? sz : 0;
  if (!tl_buf[i]) lt__err(LT_ERR_NOMEM, "matmul: cannot allocate %zu bytes to convert an operand", bytes);
  return tl_buf[i];
}

/* How a matrix view is copied: in its own orientation (rows contiguous
 * unless its columns are), `outer` runs of `inner` elements, source run i at
 * i*so, element j of a run at j*si. W and its transpose W^T have the same
 * geometry, so the forward product (x W^T) and the backward one (g W) share
 * one bf16 copy of a weight. */
typedef struct conv_geom {
  bool colmajor;
  int64_t outer, inner, so, si;
} conv_geom;

static conv_geom geom_of(lt__mat x) {
  const bool colmajor = x.rs == 1 && x.cs != 1;
  return (conv_geom){colmajor, colmajor ? x.cols : x.rows, colmajor ? x.rows : x.cols, colmajor ? x.cs : x.rs,
                     colmajor ? x.rs : x.cs};
}

/* One contiguous run to bf16: the loop that vectorises (AVX-512: 16 per
 * instruction). Static, behind lt__bf16_run: GCC gives the resolver of a
 * global target_clones function default visibility, which would export it. */
LT__CLONES static void bf16_run(uint16_t *restrict dst, const float *restrict src, int64_t n) {
  for (int64_t j = 0; j < n; j++) dst[j] = lt__bf16_from_f32(src[j]);
}

void lt__bf16_run(uint16_t *restrict dst, const float *restrict src, int64_t n) { bf16_run(dst, src, n); }

/* n elements at src (stride si) to bf16 at dst (contiguous). */
static void bf16_line(uint16_t *restrict dst, const float *restrict src, int64_t n, int64_t si) {
  if (si == 1) lt__bf16_run(dst, src, n);
  else
    for (int64_t j = 0; j < n; j++) dst[j] = lt__bf16_from_f32(src[j * si]);
}

void lt__mat_bf16_rows(lt__mat x, uint16_t *dst) {
  for (int64_t i = 0; i < x.rows; i++) bf16_line(dst + i * x.cols, (const float *)x.data + i * x.rs, x.cols, x.cs);
}

/* x (f32 when to is bf16, bf16 when to is f32) converted into buf (g's
 * outer*inner elements of to), on one thread or libtensor's. */
static void convert_into(lt__mat x, conv_geom g, lt_dtype to, void *buf, bool one_thread) {
  const int nt = one_thread ? 1 : lt__threads_for(g.outer * g.inner, g.outer);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t o = 0; o < g.outer; o++) {
    if (to == LT_DTYPE_BF16) {
      bf16_line((uint16_t *)buf + o * g.inner, (const float *)x.data + o * g.so, g.inner, g.si);
    } else {
      const uint16_t *src = (const uint16_t *)x.data + o * g.so;
      float *dst = (float *)buf + o * g.inner;
      for (int64_t j = 0; j < g.inner; j++) dst[j] = lt__f32_from_bf16(src[j * g.si]);
    }
  }
}

/* The view of x's copy in buf (same orientation as x). */
static lt__mat copy_view(lt__mat x, conv_geom g, void *buf) {
  return g.colmajor ? LT__MAT(buf, x.rows, x.cols, 1, x.rows) : LT__MAT(buf, x.rows, x.cols, x.cols, 1);
}

/* x converted into buffer i; *out describes the copy. */
static lt_status convert(int i, lt__mat x, lt_dtype to, bool one_thread, lt__mat *out) {
  const conv_geom g = geom_of(x);
  void *buf = conv_buf(i, (size_t)(g.outer * g.inner) * lt_dtype_size(to) + 1);
  if (!buf) return LT_ERR_NOMEM;
  convert_into(x, g, to, buf, one_thread);
  *out = copy_view(x, g, buf);
  return LT_OK;
}

/* x as bf16 in conversion buffer 2 + slot, apart from the two buffers every
 * autocast product reuses: an operand converted once and read by several
 * products. */
lt_status lt__mat_hold_bf16(int slot, lt__mat x, bool one_thread, lt__mat *out) {
  LT_CHECK(slot == 0 || slot == 1);
  if (x.bf16) {
    *out = x;
    return LT_OK;
  }
  const lt_status st = convert(2 + slot, x, LT_DTYPE_BF16, one_thread, out);
  if (st == LT_OK) out->bf16 = true;
  return st;
}

/* ---- the autocast operand cache --------------------------------------------
 *
 * A parameter's bf16 copy is made once per step instead of once per product
 * (a weight is read by its forward product and its input-gradient product),
 * and a gradient's once per Linear backward instead of twice (g W and
 * g^T x). Operands that name their tensor (lt__mat_of) are looked up here.
 * Per thread, like PyTorch's cache (autocast_mode.cpp, cached_casts): no
 * locks, and no thread reads a copy another thread is rewriting. An entry is
 * keyed by the tensor's storage id (never reused, so a freed tensor's entry
 * can never answer for a new one at the same address), the view's address
 * and geometry; it holds the copy of one storage version. Every in-place
 * write through the library bumps the version (the optimizer's step,
 * lt_copy_, lt_add_, gradient accumulation, loading a checkpoint), so a
 * product after a write converts again, into the same buffer: no stale
 * reads. Writes through ->data that bypass the library are not seen (the
 * same contract as autograd's saved tensors).
 *
 * Memory: the cache owns its buffers. Parameters (leaves requiring grad)
 * stay until their version changes, at most WC_MAX entries and WC_BYTES
 * bytes per thread, least recently used dropped first. Other tensors share
 * WC_TRANSIENT slots, reused (buffer included) in least-recently-used order.
 * Turning autocast off on the thread (lt_set_autocast(F32)) frees them all,
 * as PyTorch does when leaving its outermost autocast region. */
#define WC_MAX 256
#define WC_BYTES ((size_t)1 << 30)
#define WC_TRANSIENT 2

typedef struct wc_entry {
  uint64_t id, version, used; /* storage id and version of the copy; last use */
  const void *data;           /* the source view's address and geometry */
  conv_geom g;
  bool persistent;            /* a parameter's copy (else a transient slot) */
  uint16_t *bf16;             /* cap bytes, owned */
  size_t cap;
} wc_entry;

static _Thread_local wc_entry tl_wc[WC_MAX];
static _Thread_local int tl_wc_n;
static _Thread_local size_t tl_wc_bytes;
static _Thread_local uint64_t tl_wc_tick;
static _Thread_local int64_t tl_wc_conversions;

static void wc_drop(int i) {
  free(tl_wc[i].bf16);
  tl_wc_bytes -= tl_wc[i].cap;
  tl_wc[i] = tl_wc[--tl_wc_n];
}

static void wcache_clear(void) {
  while (tl_wc_n > 0) wc_drop(tl_wc_n - 1);
}

void lt__autocast_cache_stats(int *entries, size_t *bytes, int64_t *conversions) {
  if (entries) *entries = tl_wc_n;
  if (bytes) *bytes = tl_wc_bytes;
  if (conversions) *conversions = tl_wc_conversions;
}

static bool geom_eq(conv_geom a, conv_geom b) {
  return a.outer == b.outer && a.inner == b.inner && a.so == b.so && a.si == b.si;
}

/* The least recently used entry of the kind, or -1. */
static int wc_lru(bool persistent) {
  int lru = -1;
  for (int j = 0; j < tl_wc_n; j++)
    if (tl_wc[j].persistent == persistent && (lru < 0 || tl_wc[j].used < tl_wc[lru].used)) lru = j;
  return lru;
}

/* x (an f32 view of tensor x.src) as bf16, from the cache; falls back to
 * buffer i when the copy is too large to keep. */
static lt_status convert_cached(int i, lt__mat x, bool one_thread, lt__mat *out) {
  const conv_geom g = geom_of(x);
  const bool persistent = x.src->requires_grad && !x.src->grad_fn;
  const uint64_t id = lt__storage_id(x.src), ver = lt__version(x.src);
  const size_t bytes = ((size_t)(g.outer * g.inner) * sizeof(uint16_t) + 63) & ~(size_t)63;
  if (bytes > WC_BYTES / 4) return convert(i, x, LT_DTYPE_BF16, one_thread, out);
  wc_entry *e = NULL;
  for (int j = 0; j < tl_wc_n && !e; j++)
    if (tl_wc[j].id == id && tl_wc[j].data == x.data && geom_eq(tl_wc[j].g, g)) e = &tl_wc[j];
  if (e && e->version == ver) {
    e->used = ++tl_wc_tick;
    *out = copy_view(x, g, e->bf16);
    return LT_OK;
  }
  if (!e && !persistent) { /* a transient slot: the least recently used one, its buffer reused if it fits */
    int n = 0;
    for (int j = 0; j < tl_wc_n; j++) n += !tl_wc[j].persistent;
    const int lru = n >= WC_TRANSIENT ? wc_lru(false) : -1;
    if (lru >= 0 && tl_wc[lru].cap >= bytes) e = &tl_wc[lru];
    else if (lru >= 0) wc_drop(lru);
  }
  if (!e) {
    while (tl_wc_n > 0 && (tl_wc_n == WC_MAX || tl_wc_bytes + bytes > WC_BYTES)) {
      const int lru = wc_lru(true);
      wc_drop(lru >= 0 ? lru : wc_lru(false));
    }
    uint16_t *buf = aligned_alloc(64, bytes);
    if (!buf) return lt__err(LT_ERR_NOMEM, "matmul: cannot allocate %zu bytes for an operand's bf16 copy", bytes);
    (void)lt__at_thread_exit(autocast_release);
    e = &tl_wc[tl_wc_n++];
    e->bf16 = buf;
    e->cap = bytes;
    tl_wc_bytes += bytes;
  }
  e->id = id, e->version = ver, e->data = x.data, e->g = g, e->persistent = persistent;
  convert_into(x, g, LT_DTYPE_BF16, e->bf16, one_thread);
  tl_wc_conversions++;
  e->used = ++tl_wc_tick;
  *out = copy_view(x, g, e->bf16);
  return LT_OK;
}

lt_status lt__autocast_bf16_of(const lt_tensor *t, const uint16_t **out) {
  LT_CHECK(t && t->dtype == LT_DTYPE_F32 && t->ndim >= 1 && t->numel > 0 && lt_is_contiguous(t));
  const int64_t rows = t->shape[0], cols = t->numel / rows; /* a Linear's weight's geometry: [out, in] */
  lt__mat m;
  const lt_status st = convert_cached(0, lt__mat_of(LT__MAT(t->data, rows, cols, cols, 1), t), false, &m);
  if (st == LT_OK) *out = m.data;
  return st;
}

/* Operand i of an autocast product as bf16: as it is when it holds bf16
 * already (lt__autocast_input), cached when it names its tensor. */
static lt_status to_bf16(int i, lt__mat x, bool one_thread, lt__mat *out) {
  if (x.bf16) {
    *out = x;
    return LT_OK;
  }
  return x.src ? convert_cached(i, x, one_thread, out) : convert(i, x, LT_DTYPE_BF16, one_thread, out);
}

/* ---- a Linear's output gradient: bf16 copy and column sums in one pass ---- */

/* One row's run of n columns: bf16 copies and the running column sums. */
LT__CLONES static void
bf16_colsum_run(uint16_t *restrict dst, const float *restrict src, double *restrict acc, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    dst[j] = lt__bf16_from_f32(src[j]);
    acc[j] += (double)src[j];
  }
}

/* Two consecutive rows (a then b) at once: acc[j] + a[j] + b[j] in that
 * order, the bits of two calls of bf16_colsum_run, with one load and store
 * of the sums instead of two. */
LT__CLONES static void
bf16_colsum_run2(uint16_t *restrict da, uint16_t *restrict db, const float *restrict a, const float *restrict b,
                 double *restrict acc, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    da[j] = lt__bf16_from_f32(a[j]);
    db[j] = lt__bf16_from_f32(b[j]);
    acc[j] = (acc[j] + (double)a[j]) + (double)b[j];
  }
}

#define CS_ALIGN 16 /* a thread's first column: a multiple of this (64 bytes of f32) */

/* The copy and sums of columns [j0, j0 + m), every row in order. Contiguous
 * rows (cs 1) are read row by row over the whole column range, two rows at
 * a time: a stream the hardware prefetcher follows. (Until session 7 each
 * thread took blocks of 128 columns over all rows: 512 bytes per row at a
 * stride of the row length, a new page per row once rows are 4 KiB, which
 * the prefetcher does not follow; it was 7% of a GPT-small bf16 step.) */
static void colsum_cols(lt__mat g, uint16_t *dst, double *acc, int64_t j0, int64_t m, bool sums) {
  const int64_t N = g.rows, M = g.cols;
  const float *src0 = (const float *)g.data + j0 * g.cs;
  uint16_t *dst0 = dst + j0;
  if (g.cs != 1) {
    for (int64_t i = 0; i < N; i++) {
      const float *src = src0 + i * g.rs;
      uint16_t *d = dst0 + i * M;
      for (int64_t j = 0; j < m; j++) {
        d[j] = lt__bf16_from_f32(src[j * g.cs]);
        if (sums) acc[j] += (double)src[j * g.cs];
      }
    }
    return;
  }
  if (!sums) { /* no bias: the copy alone */
    for (int64_t i = 0; i < N; i++) lt__bf16_run(dst0 + i * M, src0 + i * g.rs, m);
    return;
  }
  int64_t i = 0;
  for (; i + 1 < N; i += 2)
    bf16_colsum_run2(dst0 + i * M, dst0 + (i + 1) * M, src0 + i * g.rs, src0 + (i + 1) * g.rs, acc, m);
  if (i < N) bf16_colsum_run(dst0 + i * M, src0 + i * g.rs, acc, m);
}

lt_tensor *lt__autocast_bf16_colsum(lt__mat g, float *colsum) {
  const int64_t N = g.rows, M = g.cols;
  lt_tensor *out = lt_empty(LT_DTYPE_BF16, 2, (const int64_t[]){N, M});
  if (!out || N * M == 0) {
    if (out && colsum)
      for (int64_t j = 0; j < M; j++) colsum[j] = 0.0f;
    return out;
  }
  /* The f64 sums of all columns: each thread owns a range of columns and
   * adds every row in order, so each column's sum is the same sequence of
   * additions on any thread count. */
  double *acc = colsum ? calloc((size_t)M, sizeof *acc) : NULL;
  if (colsum && !acc) {
    lt_tensor_free(out);
    lt__err(LT_ERR_NOMEM, "linear backward: cannot allocate the bias gradient's sums of %lld columns", (long long)M);
    return NULL;
  }
  uint16_t *dst = out->data;
  const int64_t units = (M + CS_ALIGN - 1) / CS_ALIGN;
  const int nt = lt__threads_for(N * M, units);
#pragma omp parallel num_threads(nt) if (nt > 1)
  { /* split by the team OpenMP gave, which may be smaller than nt */
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t u0 = units * t / team, u1 = units * (t + 1) / team;
    const int64_t j0 = u0 * CS_ALIGN, j1 = u1 * CS_ALIGN < M ? u1 * CS_ALIGN : M;
    if (j1 > j0) colsum_cols(g, dst, acc ? acc + j0 : NULL, j0, j1 - j0, colsum != NULL);
  }
  if (colsum)
    for (int64_t j = 0; j < M; j++) colsum[j] = (float)acc[j];
  free(acc);
  tl_wc_conversions++;
  return out;
}

/* ---- autocast inputs kept as bf16 (lt__autocast_input) --------------------
 *
 * The last AI_MEMO copies made on this thread, keyed like the operand cache
 * (storage id, version, address and geometry of the source): the q, k and v
 * projections of one input, or the encoder memory read by a decoder layer's
 * k and v projections, share one copy. The thread holds one reference to
 * each copy; displaced copies and all of them when autocast is turned off
 * are released. */
#define AI_MEMO 4

typedef struct ai_entry {
  uint64_t id, version, used;
  const void *data;
  int ndim;
  int64_t shape[LT_MAX_DIMS], stride[LT_MAX_DIMS];
  lt_tensor *copy; /* owned: one reference */
} ai_entry;

static _Thread_local ai_entry tl_ai[AI_MEMO];
static _Thread_local uint64_t tl_ai_tick;

static void ai_clear(void) {
  for (int i = 0; i < AI_MEMO; i++) {
    lt_tensor_free(tl_ai[i].copy);
    tl_ai[i] = (ai_entry){0};
  }
}

bool lt__autocast_active(void) { return tl_autocast == LT_DTYPE_BF16 && lt__dnnl_bf16_available(); }

static bool ai_match(const ai_entry *e, const lt_tensor *x, uint64_t id, uint64_t ver) {
  if (!e->copy || e->id != id || e->version != ver || e->data != x->data || e->ndim != x->ndim) return false;
  for (int d = 0; d < x->ndim; d++)
    if (e->shape[d] != x->shape[d] || (x->shape[d] != 1 && e->stride[d] != x->stride[d])) return false;
  return true;
}

lt_tensor *lt__autocast_input(const lt_tensor *x) {
  LT_CHECK(x && x->dtype == LT_DTYPE_F32);
  const uint64_t id = lt__storage_id(x), ver = lt__version(x);
  ai_entry *e = NULL;
  for (int i = 0; i < AI_MEMO && !e; i++)
    if (ai_match(&tl_ai[i], x, id, ver)) e = &tl_ai[i];
  if (!e) {
    lt__mat X;
    lt_tensor *xc = NULL, *copy = NULL;
    if (!lt__mat_rows(x, &X)) { /* leading dims that do not nest: an f32 copy first */
      const bool prev = lt_set_grad_enabled(false);
      xc = lt_contiguous(x);
      lt_set_grad_enabled(prev);
      if (!xc) return NULL;
      LT_CHECK(lt__mat_rows(xc, &X));
    }
    copy = lt_empty(LT_DTYPE_BF16, x->ndim, x->shape);
    if (copy) lt_tensor_keep(copy); /* the thread's reference, outside any open scope */
    if (copy) (void)lt__at_thread_exit(autocast_release);
    if (copy && x->numel > 0) /* row-major [N, K]: copy is contiguous in x's shape */
      convert_into(X, (conv_geom){false, X.rows, X.cols, X.rs, X.cs}, LT_DTYPE_BF16, copy->data, false);
    lt_tensor_free(xc);
    if (!copy) return NULL;
    e = &tl_ai[0];
    for (int i = 1; i < AI_MEMO; i++)
      if (tl_ai[i].used < e->used) e = &tl_ai[i];
    lt_tensor_free(e->copy);
    *e = (ai_entry){.id = id, .version = ver, .data = x->data, .ndim = x->ndim, .copy = copy};
    for (int d = 0; d < x->ndim; d++) e->shape[d] = x->shape[d], e->stride[d] = x->stride[d];
    tl_wc_conversions++;
  }
  e->used = ++tl_ai_tick;
  return lt__view_of(e->copy, e->copy->ndim, e->copy->shape, e->copy->stride, e->copy->offset);
}

/* lt__mat_gemm, and lt__mat_gemm_bias when bias is not NULL (then an
 * autocast product: the bias goes to oneDNN). */
static lt_status mat_gemm(lt_dtype dt, bool one_thread, double alpha, lt__mat a, lt__mat b, double beta, lt__mat c,
                          const float *bias) {
  LT_CHECK(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows);
  lt_status st;
  const bool bf16_ok = lt__dnnl_bf16_available();
  if (dt == LT_DTYPE_F32 && tl_autocast == LT_DTYPE_BF16 && bf16_ok && a.cols > 0 && c.rows > 0 && c.cols > 0) {
    /* Autocast: bf16 copies of the f32 operands, f32 accumulation, f32 out. */
    if ((st = to_bf16(0, a, one_thread, &a)) != LT_OK || (st = to_bf16(1, b, one_thread, &b)) != LT_OK)
      return st;
    dt = LT_DTYPE_BF16;
  } else if (dt == LT_DTYPE_F32 && (a.bf16 || b.bf16)) {
    /* A bf16 copy (lt__autocast_input) in an f32 product outside autocast: widened, exactly. */
    if ((a.bf16 && (st = convert(0, a, LT_DTYPE_F32, one_thread, &a)) != LT_OK) ||
        (b.bf16 && (st = convert(1, b, LT_DTYPE_F32, one_thread, &b)) != LT_OK))
      return st;
  } else if (dt == LT_DTYPE_BF16 && !bf16_ok) {
    /* No bf16 matmul in oneDNN for this CPU: widen (exactly) and use BLIS. */
    if ((st = convert(0, a, LT_DTYPE_F32, one_thread, &a)) != LT_OK ||
        (st = convert(1, b, LT_DTYPE_F32, one_thread, &b)) != LT_OK)
      return st;
    dt = LT_DTYPE_F32;
  }
  if (dt == LT_DTYPE_BF16)
    return lt__dnnl_gemm_bf16(one_thread, c.rows, c.cols, a.cols, (float)alpha, a.data, a.rs, a.cs, b.data, b.rs,
                              b.cs, (float)beta, c.data, c.rs, c.cs, bias);
  LT_CHECK(!bias);
  return (one_thread ? lt__blas_gemm_1t : lt__blas_gemm)(dt, c.rows, c.cols, a.cols, alpha, a.data, a.rs, a.cs,
                                                        b.data, b.rs, b.cs, beta, c.data, c.rs, c.cs);
}

lt_status lt__mat_gemm(lt_dtype dt, bool one_thread, double alpha, lt__mat a, lt__mat b, double beta, lt__mat c) {
  return mat_gemm(dt, one_thread, alpha, a, b, beta, c, NULL);
}

int64_t lt__mat_pack_floats(int64_t k, int64_t n) { return lt__autocast_active() ? 0 : lt__blas_pack_floats(k, n); }

void lt__mat_pack(lt__mat b, float *dst) {
  LT_CHECK(!b.bf16);
  lt__blas_pack(b.rows, b.cols, b.data, b.rs, b.cs, dst);
}

void lt__mat_gemm_packed(double alpha, lt__mat a, const float *bp, int64_t pn, double beta, lt__mat c) {
  LT_CHECK(a.rows == c.rows && !a.bf16);
  lt__blas_gemm_packed(c.rows, c.cols, a.cols, (float)alpha, a.data, a.rs, a.cs, bp, pn, (float)beta, c.data, c.rs,
                       c.cs);
}

lt_status lt__mat_gemm_bias(bool one_thread, lt__mat a, lt__mat b, const float *bias, lt__mat c) {
  LT_CHECK(lt__autocast_active() && bias);
  return mat_gemm(LT_DTYPE_F32, one_thread, 1.0, a, b, 0.0, c, bias);
}
