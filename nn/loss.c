/*
 * nn/loss.c: the losses lt_cross_entropy (fused log-softmax + NLL with label
 * smoothing), lt_nll_loss and lt_mse_loss, each forward beside its backward.
 *
 * Cross entropy over the last dim of logits x [..., V] (N rows) with class
 * targets t [...] follows torch.nn.functional.cross_entropy for class-index
 * targets (class dim last instead of dim 1):
 *     logp = log_softmax(x),  nll_i = -logp[i, t_i],  smooth_i = -sum_c logp[i, c]
 *     loss = (1 - eps) * reduce(nll) + (eps / V) * reduce(smooth)
 * where rows whose target is ignore_index contribute 0 to both and "mean"
 * divides by the number of counted (not ignored) rows. Per row, with
 * lse = log(sum_c exp(x_c)), this is lse - (1 - eps) x_t - eps * mean_c(x_c),
 * computed in one read of the row (max, then sum of exp and of x) with the
 * sums in double. The gradient of row i is
 *     dx_c = k_i * (softmax_c - eps / V - (1 - eps) [c == t_i])
 * with k_i the row's output gradient times 1/count (mean) or 1 (sum). It is
 * rebuilt from the logits and two saved numbers per row (max and log-sum), so
 * the forward saves the logits (a reference, no copy when contiguous) and
 * [N, 2] row statistics, not an [N, V] softmax.
 *
 * Differences from PyTorch, on purpose: a mean over zero counted targets is
 * 0 (PyTorch gives NaN), and the class dim is the last one. mse_loss keeps
 * PyTorch's NaN for the mean of an empty tensor.
 *
 * Also the top-k accuracy metric (lt_topk_accuracy, not differentiable).
 *
 * What this is not: class weights, probability ("soft") targets, or the
 * N-d class-dim-1 layout of PyTorch.
 */
#include "nn/nn.h"

#include "tensor/graph_internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/softmax_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Shared helpers                                                           */
/* ======================================================================== */

/* Row-major multi-index of flat position i in (ndim, shape), as "[1,2]". */
static char *pos_str(int ndim, const int64_t *shape, int64_t i, char *buf, size_t size) {
  int64_t idx[LT_MAX_DIMS];
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return lt_shape_str(ndim, idx, buf, size);
}

/* ======================================================================== */
/* Targets (cross_entropy, nll_loss)                                        */
/* ======================================================================== */

typedef struct ce_aux {
  int64_t N, V;          /* rows, classes */
  int64_t count;         /* rows whose target is not ignore_index */
  int64_t ignore_index;
  double eps;            /* label smoothing */
  lt_reduction reduction;
} ce_aux;

/* Checks x [..., V] (float; given as its dtype and shape, since the chunked
 * head's logits never exist; xd, the tensor named in messages as xn)
 * against targets [...] (i32/i64) and the options; on success *tout is an
 * i64 contiguous tensor of the targets (new), every target is in [0, V) or
 * ignore_index, and aux is filled. */
static lt_status targets_check_as(const char *op, const char *xn, const lt_tensor *xd, lt_dtype dt, int ndim,
                                  const int64_t *shape, const lt_tensor *targets, const lt_cross_entropy_opts *o,
                                  bool smoothing, lt_tensor **tout, ce_aux *aux) {
  *tout = NULL;
  if (!targets) return lt__err_null(op, "targets");
  if (!lt_dtype_is_float(dt))
    return lt__err(LT_ERR_DTYPE, "%s: %s is %s: only f32 and f64 are supported (cast with lt_to_dtype)", op, xn,
                   LT__D(xd));
  if (targets->dtype != LT_DTYPE_I32 && targets->dtype != LT_DTYPE_I64)
    return lt__err(LT_ERR_DTYPE, "%s: targets is %s: class targets must be i32 or i64", op, LT__D(targets));
  if (ndim < 1 || targets->ndim != ndim - 1 ||
      memcmp(targets->shape, shape, sizeof(int64_t) * (size_t)targets->ndim) != 0)
    return lt__err(LT_ERR_SHAPE,
                   "%s: %s is %s, targets is %s: %s must be [..., V] and targets [...] (%s's shape without the "
                   "last dim, %s)",
                   op, xn, LT__D(xd), LT__D(targets), xn, xn, ndim >= 1 ? LT__S(ndim - 1, shape) : "n/a");
  if (o->reduction != LT_REDUCTION_MEAN && o->reduction != LT_REDUCTION_SUM && o->reduction != LT_REDUCTION_NONE)
    return lt__err(LT_ERR_INVALID, "%s: reduction %d is not one of LT_REDUCTION_MEAN, _SUM, _NONE", op,
                   (int)o->reduction);
  if (smoothing && !(o->label_smoothing >= 0 && o->label_smoothing <= 1))
    return lt__err(LT_ERR_INVALID, "%s: label_smoothing is %g, must be in [0, 1]", op, o->label_smoothing);
  const int64_t V = shape[ndim - 1], N = targets->numel;
  lt_tensor *t;
  const lt_tensor *tc = lt__as_contig(targets, LT_DTYPE_I64, &t);
  if (!tc) return lt_last_status();
  if (!t) t = lt__view_of(tc, tc->ndim, tc->shape, tc->stride, tc->offset); /* own a reference */
  if (!t) return lt_last_status();
  const int64_t *tv = t->data, ig = o->ignore_index;
  int64_t count = 0, bad = -1;
  for (int64_t i = 0; i < N; i++) {
    if (tv[i] == ig) continue;
    if (tv[i] < 0 || tv[i] >= V) {
      bad = i;
      break;
    }
    count++;
  }
  if (bad >= 0) {
    char pos[LT__DESC_SIZE];
    lt_status s = lt__err(LT_ERR_INDEX,
                          "%s: %s is %s, targets is %s: target %lld at position %s is out of range [0, %lld) "
                          "(V = %lld; ignore_index = %lld)",
                          op, xn, LT__D(xd), LT__D(targets), (long long)tv[bad],
                          pos_str(targets->ndim, targets->shape, bad, pos, sizeof pos), (long long)V, (long long)V,
                          (long long)ig);
    lt_tensor_free(t);
    return s;
  }
  *aux = (ce_aux){N, V, count, ig, smoothing ? o->label_smoothing : 0.0, o->reduction};
  *tout = t;
  return LT_OK;
}

/* targets_check_as for an x that exists. */
static lt_status targets_check(const char *op, const char *xn, const lt_tensor *x, const lt_tensor *targets,
                               const lt_cross_entropy_opts *o, bool smoothing, lt_tensor **tout, ce_aux *aux) {
  *tout = NULL;
  if (!x) return lt__err_null(op, xn);
  return targets_check_as(op, xn, x, x->dtype, x->ndim, x->shape, targets, o, smoothing, tout, aux);
}

/* The loss tensor from per-row losses (double): [...] for none, else 0-d. */
static lt_tensor *reduce_rows(lt_dtype dt, const ce_aux *a, const double *loss, int ndim, const int64_t *shape,
                              double denom) {
  if (a->reduction == LT_REDUCTION_NONE) {
    lt_tensor *out = lt_empty(dt, ndim, shape);
    if (out)
      for (int64_t i = 0; i < a->N; i++)
        lt__store((char *)out->data + i * (int64_t)lt_dtype_size(dt), dt, loss[i]);
    return out;
  }
  double s = 0;
  for (int64_t i = 0; i < a->N; i++) s += loss[i]; /* row order: deterministic */
  if (a->reduction == LT_REDUCTION_MEAN) s = denom > 0 ? s / denom : 0.0;
  return lt_scalar(dt, s);
}

/* Per-row gradient factors k_i (double) from gout: g_i (none), g (sum) or
 * g / count (mean; 0 when nothing is counted). */
static double *row_factors(const lt_tensor *gout, const ce_aux *a) {
  double *k = malloc(sizeof(double) * (size_t)(a->N > 0 ? a->N : 1));
  if (!k) {
    lt__err(LT_ERR_NOMEM, "loss backward: out of memory for %lld row factors", (long long)a->N);
    return NULL;
  }
  if (a->reduction == LT_REDUCTION_NONE) {
    if (lt_tensor_read(gout, LT_DTYPE_F64, k, a->N > 0 ? a->N : 1) != LT_OK && a->N > 0) {
      free(k);
      return NULL;
    }
    return k;
  }
  double g;
  if (lt_item(gout, &g) != LT_OK) {
    free(k);
    return NULL;
  }
  if (a->reduction == LT_REDUCTION_MEAN) g = a->count > 0 ? g / (double)a->count : 0.0;
  for (int64_t i = 0; i < a->N; i++) k[i] = g;
  return k;
}

/* ======================================================================== */
/* Cross entropy: kernels                                                   */
/* ======================================================================== */

/* ce_fwd: rows [r0, r1) of x [N, V]: loss[i] (double; 0 for ignored rows) and
 * stat[i] = {max, log(sum exp(x - max))} in T.
 * ce_bwd: rows [r0, r1): dx = k_i * (exp((x - max) - logsum) - eps/V - (1-eps)[c == t]),
 * zeros for ignored rows. */
#define CE_KERNELS(NAME, T, CLONES)                                                          \
  CLONES static void ce_fwd_##NAME(const T *x, const int64_t *t, double *loss, T *stat, const ce_aux *a, \
                            int64_t r0, int64_t r1) {                                             \
    const int64_t V = a->V;                                                                       \
    const double eps = a->eps;                                                                    \
    for (int64_t r = r0; r < r1; r++) {                                                           \
      const T *xr = x + r * V;                                                                    \
      if (t[r] == a->ignore_index) {                                                              \
        loss[r] = 0;                                                                              \
        stat[2 * r] = stat[2 * r + 1] = 0;                                                        \
        continue;                                                                                 \
      }                                                                                           \
      const T m = lt__row_max_##NAME(xr, V);                                                      \
      const double ls = log(lt__row_sumexp_##NAME(xr, m, V)), lse = (double)m + ls;               \
      stat[2 * r] = m;                                                                            \
      stat[2 * r + 1] = (T)ls;                                                                    \
      const double nll = lse - (double)xr[t[r]];                                                  \
      loss[r] = eps > 0 ? (1 - eps) * nll + (eps / (double)V) * ((double)V * lse - lt__row_sum_##NAME(xr, V)) : nll; \
    }                                                                                             \
  }                                                                                               \
  CLONES static void ce_bwd_##NAME(T *dx, const T *x, const int64_t *t, const T *stat, const double *k,  \
                            const ce_aux *a, int64_t r0, int64_t r1) {                            \
    const int64_t V = a->V;                                                                       \
    for (int64_t r = r0; r < r1; r++) {                                                           \
      T *dr = dx + r * V;                                                                         \
      if (t[r] == a->ignore_index) {                                                 \
        memset(dr, 0, sizeof(T) * (size_t)V);                                                     \
        continue;                                                                                 \
      }                                                                                           \
      const T *xr = x + r * V;                                                                    \
      const T m = stat[2 * r], ls = stat[2 * r + 1], kr = (T)k[r], sm = (T)(a->eps / (double)V);  \
      for (int64_t i = 0; i < V; i++) dr[i] = kr * (lt__exp_##NAME((xr[i] - m) - ls) - sm);                  \
      dr[t[r]] = kr * ((lt__exp_##NAME((xr[t[r]] - m) - ls) - sm) - (T)(1 - a->eps));                        \
    }                                                                                             \
  }
/* The row steps are tensor/softmax_internal.h's (f32 exp: vmath's lt__vexpf,
 * branch-free, so the row loops vectorise); f32 is compiled for AVX-512,
 * AVX2+FMA and baseline SSE2, picked at load time like tensor/elementwise_kernels.c
 * (-std=c11 keeps -ffp-contract=off: every clone gives the same bits). f64
 * keeps libm (gradient checks). */
CE_KERNELS(f32, float, LT__CLONES)
CE_KERNELS(f64, double, )

/* ======================================================================== */
/* Cross entropy: forward and backward                                      */
/* ======================================================================== */

lt_tensor *lt_cross_entropy(const lt_tensor *logits, const lt_tensor *targets, const lt_cross_entropy_opts *opts) {
  const lt_cross_entropy_opts o = opts ? *opts : LT_CROSS_ENTROPY_DEFAULTS;
  ce_aux a;
  lt_tensor *t, *xt = NULL, *stat = NULL, *out = NULL;
  double *loss = NULL;
  if (targets_check("cross_entropy", "logits", logits, targets, &o, true, &t, &a) != LT_OK) return NULL;
  const lt_dtype dt = logits->dtype;
  const lt_tensor *x = lt__as_contig(logits, dt, &xt);
  stat = x ? lt_empty(dt, 2, (const int64_t[]){a.N, 2}) : NULL; /* [N, 2]: max, log-sum */
  loss = stat ? malloc(sizeof(double) * (size_t)(a.N > 0 ? a.N : 1)) : NULL;
  if (stat && !loss) lt__err(LT_ERR_NOMEM, "cross_entropy: out of memory for %lld row losses", (long long)a.N);
  if (!loss) goto done;
  const int nt = lt__threads_for(a.N * a.V, a.N);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t r0 = a.N * id / T, r1 = a.N * (id + 1) / T;
    if (dt == LT_DTYPE_F32) ce_fwd_f32(x->data, t->data, loss, stat->data, &a, r0, r1);
    else ce_fwd_f64(x->data, t->data, loss, stat->data, &a, r0, r1);
  }
  out = reduce_rows(dt, &a, loss, targets->ndim, targets->shape, (double)a.count);
  if (out && lt__record(out, LT__OP_cross_entropy, 1, &logits, 3, (const lt_tensor *[]){x, t, stat}, &a,
                        sizeof a) != LT_OK) {
    lt_tensor_free(out);
    out = NULL;
  }
done:
  free(loss);
  lt_tensor_free(stat);
  lt_tensor_free(xt);
  lt_tensor_free(t);
  return out;
}

/* Saved: logits x [N, V] (contiguous), targets [N] (i64), stat [N, 2]. */
lt_status lt__bw_cross_entropy(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const ce_aux *a = (const ce_aux *)node->aux;
  const lt_tensor *x = node->saved[0], *t = node->saved[1], *stat = node->saved[2];
  double *k = row_factors(gout, a);
  if (!k) return lt_last_status();
  lt_tensor *dx = lt_empty(x->dtype, x->ndim, x->shape);
  if (!dx) {
    free(k);
    return lt_last_status();
  }
  const int nt = lt__threads_for(a->N * a->V, a->N);
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t r0 = a->N * id / T, r1 = a->N * (id + 1) / T;
    if (x->dtype == LT_DTYPE_F32) ce_bwd_f32(dx->data, x->data, t->data, stat->data, k, a, r0, r1);
    else ce_bwd_f64(dx->data, x->data, t->data, stat->data, k, a, r0, r1);
  }
  free(k);
  gin[0] = dx;
  return LT_OK;
}

/* ======================================================================== */
/* The chunked head: cross entropy of h w^T, a chunk of rows at a time      */
/* ======================================================================== */

/* llm.c's fused classifier (train_gpt2.c, fused_classifier), in chunks of
 * rows: the forward makes each chunk's logits, its row losses and, when a
 * gradient is wanted, its dlogits for an output gradient of 1 (the k_i of
 * lt_cross_entropy's backward for gout 1: 1/count or 1), and sends them on
 * into dh and dw at once; the backward only scales dh and dw by gout. */
typedef struct lce_aux {
  ce_aux ce;
  bool gh, gw; /* saved: dh (if gh), then dw (if gw) */
} lce_aux;

#define LCE_CHUNK_LOGITS ((int64_t)16 << 20) /* logits per chunk when chunk_rows is 0 */

lt_tensor *lt_linear_cross_entropy(const lt_tensor *h, const lt_tensor *w, const lt_tensor *targets,
                                   const lt_cross_entropy_opts *opts, int64_t chunk_rows) {
  const char *op = "linear_cross_entropy";
  const lt_cross_entropy_opts o = opts ? *opts : LT_CROSS_ENTROPY_DEFAULTS;
  if (!h) return lt__err_null(op, "h"), NULL;
  if (!w) return lt__err_null(op, "w"), NULL;
  if (!targets) return lt__err_null(op, "targets"), NULL;
  if (!lt_dtype_is_float(h->dtype) || w->dtype != h->dtype)
    return lt__err(LT_ERR_DTYPE, "%s: h is %s, w is %s: need f32 or f64, both of one dtype", op, LT__D(h), LT__D(w)),
           NULL;
  if (h->ndim < 1 || w->ndim != 2 || w->shape[1] != h->shape[h->ndim - 1] || w->shape[0] < 1)
    return lt__err(LT_ERR_SHAPE, "%s: h is %s, w is %s: need h [..., C] and w [V, C] (V >= 1)", op, LT__D(h),
                   LT__D(w)),
           NULL;
  if (targets->ndim != h->ndim - 1 || memcmp(targets->shape, h->shape, sizeof(int64_t) * (size_t)targets->ndim) != 0)
    return lt__err(LT_ERR_SHAPE, "%s: h is %s, targets is %s: targets must have h's shape without the last dim, %s", op,
                   LT__D(h), LT__D(targets), LT__S(h->ndim - 1, h->shape)),
           NULL;
  if (o.reduction == LT_REDUCTION_NONE)
    return lt__err(LT_ERR_INVALID, "%s: reduction none is not supported (the gradient is made in the forward for a "
                   "scalar loss; use lt_cross_entropy on lt_linear(h, w, NULL))", op),
           NULL;
  if (chunk_rows < 0) return lt__err(LT_ERR_INVALID, "%s: chunk_rows %lld: must be >= 0", op, (long long)chunk_rows), NULL;
  const lt_dtype dt = h->dtype;
  const int64_t V = w->shape[0], C = w->shape[1];
  int64_t lshape[LT_MAX_DIMS];
  memcpy(lshape, h->shape, sizeof lshape);
  lshape[h->ndim - 1] = V;
  lce_aux A = {.gh = lt__needs_grad(1, &h), .gw = lt__needs_grad(1, &w)};
  lt_tensor *t;
  if (targets_check_as(op, "h", h, dt, h->ndim, lshape, targets, &o, true, &t, &A.ce) != LT_OK) return NULL;
  const ce_aux *a = &A.ce;
  const int64_t N = a->N;
  const int64_t R = N < 1 ? 1 : chunk_rows > 0 ? (chunk_rows < N ? chunk_rows : N)
                              : (LCE_CHUNK_LOGITS / V < 1 ? 1 : LCE_CHUNK_LOGITS / V < N ? LCE_CHUNK_LOGITS / V : N);
  const bool grad = A.gh || A.gw;
  const size_t es = lt_dtype_size(dt);
  lt_tensor *hown = NULL, *wown = NULL, *L = NULL, *D = NULL, *dh = NULL, *dw = NULL, *stat = NULL, *out = NULL;
  double *loss = NULL, *k = NULL;
  const lt_tensor *hc = lt__as_contig(h, dt, &hown), *wc = hc ? lt__as_contig(w, dt, &wown) : NULL;
  if (!wc) goto done;
  L = lt_empty(dt, 2, (const int64_t[]){R, V});      /* one chunk's logits */
  stat = L ? lt_empty(dt, 2, (const int64_t[]){R, 2}) : NULL;
  if (!stat || (grad && !(D = lt_empty(dt, 2, (const int64_t[]){R, V})))) goto done; /* its dlogits */
  if (A.gh && !(dh = lt_empty(dt, h->ndim, h->shape))) goto done;
  if (A.gw && !(dw = lt_empty(dt, 2, w->shape))) goto done;
  loss = malloc(sizeof(double) * (size_t)(N > 0 ? N : 1));
  k = malloc(sizeof(double) * (size_t)R);
  if (!loss || !k) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld row losses", op, (long long)N);
    goto done;
  }
  const double k1 = a->reduction == LT_REDUCTION_MEAN ? (a->count > 0 ? 1.0 / (double)a->count : 0.0) : 1.0;
  for (int64_t i = 0; i < R; i++) k[i] = k1; /* row_factors for gout 1 */
  const lt__mat wm = lt__mat_of(LT__MAT(wc->data, V, C, C, 1), wc);
  const int64_t *tv = t->data;
  lt_status st = LT_OK;
  for (int64_t r0 = 0; r0 < N && st == LT_OK; r0 += R) {
    const int64_t rows = N - r0 < R ? N - r0 : R;
    const lt__mat hm = lt__mat_of(LT__MAT((const char *)hc->data + (size_t)(r0 * C) * es, rows, C, C, 1), hc);
    const lt__mat Lm = LT__MAT(L->data, rows, V, V, 1), Dm = LT__MAT(D ? D->data : NULL, rows, V, V, 1);
    /* logits [rows, V] = h_chunk [rows, C] w^T [C, V] */
    if ((st = lt__mat_gemm(dt, false, 1.0, hm, lt__mat_t(wm), 0.0, Lm)) != LT_OK) break;
    const int nt = lt__threads_for(rows * V, rows);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t q0 = rows * id / T, q1 = rows * (id + 1) / T;
      if (dt == LT_DTYPE_F32) {
        ce_fwd_f32(L->data, tv + r0, loss + r0, stat->data, a, q0, q1);
        if (grad) ce_bwd_f32(D->data, L->data, tv + r0, stat->data, k, a, q0, q1);
      } else {
        ce_fwd_f64(L->data, tv + r0, loss + r0, stat->data, a, q0, q1);
        if (grad) ce_bwd_f64(D->data, L->data, tv + r0, stat->data, k, a, q0, q1);
      }
    }
    /* dh_chunk [rows, C] = dlogits [rows, V] w [V, C]; dw [V, C] += dlogits^T [V, rows] h_chunk [rows, C] */
    if (A.gh)
      st = lt__mat_gemm(dt, false, 1.0, Dm, wm, 0.0,
                        LT__MAT((char *)dh->data + (size_t)(r0 * C) * es, rows, C, C, 1));
    if (A.gw && st == LT_OK)
      st = lt__mat_gemm(dt, false, 1.0, lt__mat_t(Dm), hm, r0 == 0 ? 0.0 : 1.0, LT__MAT(dw->data, V, C, C, 1));
  }
  if (st != LT_OK) goto done;
  if (A.gw && N == 0 && lt_fill_(dw, 0.0) != LT_OK) goto done;
  out = reduce_rows(dt, a, loss, targets->ndim, targets->shape, (double)a->count);
  const lt_tensor *sv[2];
  int ns = 0;
  if (A.gh) sv[ns++] = dh;
  if (A.gw) sv[ns++] = dw;
  if (out && lt__record(out, LT__OP_linear_cross_entropy, 2, (const lt_tensor *[]){h, w}, ns, sv, &A, sizeof A) !=
                 LT_OK) {
    lt_tensor_free(out);
    out = NULL;
  }
done:
  free(loss);
  free(k);
  lt_tensor *tmp[] = {hown, wown, L, D, dh, dw, stat, t};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) lt_tensor_free(tmp[i]);
  return out;
}

/* Saved: dh [..., C] (if gh) and dw [V, C] (if gw), the gradients for an
 * output gradient of 1: gin = gout * saved (gout 1: the saved tensors as they are). */
lt_status lt__bw_linear_cross_entropy(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lce_aux *A = (const lce_aux *)node->aux;
  double g;
  if (lt_item(gout, &g) != LT_OK) return lt_last_status();
  int k = 0;
  for (int i = 0; i < 2; i++) {
    if (!(i == 0 ? A->gh : A->gw)) continue;
    const lt_tensor *s = node->saved[k++];
    if (!lt__needs_input_grad(node, i)) continue;
    if (!(gin[i] = g == 1.0 ? lt_detach(s) : lt_mul_scalar(s, g))) return lt_last_status();
  }
  return LT_OK;
}

/* ======================================================================== */
/* NLL loss                                                                 */
/* ======================================================================== */

/* loss_i = -logp[i, t_i] (0 when ignored), read through logp's own strides:
 * row i's offset comes from its multi-index over the leading dims. */
static int64_t row_offset(const lt_tensor *x, int64_t i) {
  int64_t off = 0;
  for (int d = x->ndim - 2; d >= 0; d--) {
    off += (i % x->shape[d]) * x->stride[d];
    i /= x->shape[d];
  }
  return off;
}

lt_tensor *lt_nll_loss(const lt_tensor *logp, const lt_tensor *targets, const lt_cross_entropy_opts *opts) {
  const lt_cross_entropy_opts o = opts ? *opts : LT_CROSS_ENTROPY_DEFAULTS;
  ce_aux a;
  lt_tensor *t, *out = NULL;
  if (targets_check("nll_loss", "logp", logp, targets, &o, false, &t, &a) != LT_OK) return NULL;
  double *loss = malloc(sizeof(double) * (size_t)(a.N > 0 ? a.N : 1));
  if (!loss) {
    lt__err(LT_ERR_NOMEM, "nll_loss: out of memory for %lld row losses", (long long)a.N);
    lt_tensor_free(t);
    return NULL;
  }
  const int64_t *tv = t->data, es = (int64_t)lt_dtype_size(logp->dtype), cs = logp->stride[logp->ndim - 1];
  for (int64_t i = 0; i < a.N; i++)
    loss[i] = tv[i] == a.ignore_index
                  ? 0.0
                  : -lt__load((const char *)logp->data + (row_offset(logp, i) + tv[i] * cs) * es, logp->dtype);
  out = reduce_rows(logp->dtype, &a, loss, targets->ndim, targets->shape, (double)a.count);
  free(loss);
  if (out && lt__record(out, LT__OP_nll_loss, 1, &logp, 1, (const lt_tensor *[]){t}, &a, sizeof a) != LT_OK) {
    lt_tensor_free(out);
    out = NULL;
  }
  lt_tensor_free(t);
  return out;
}

/* dlogp [..., V] = 0 except dlogp[i, t_i] = -k_i. Saved: targets [N] (i64). */
lt_status lt__bw_nll_loss(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const ce_aux *a = (const ce_aux *)node->aux;
  const lt__edge *e = &node->in[0];
  const int64_t *tv = node->saved[0]->data;
  double *k = row_factors(gout, a);
  if (!k) return lt_last_status();
  lt_tensor *dx = lt_zeros(e->dtype, e->ndim, e->shape);
  if (dx) {
    const int64_t es = (int64_t)lt_dtype_size(e->dtype);
    for (int64_t i = 0; i < a->N; i++)
      if (tv[i] != a->ignore_index) lt__store((char *)dx->data + (i * a->V + tv[i]) * es, e->dtype, -k[i]);
  }
  free(k);
  if (!dx) return lt_last_status();
  gin[0] = dx;
  return LT_OK;
}

/* ======================================================================== */
/* MSE loss                                                                 */
/* ======================================================================== */

typedef struct mse_aux {
  lt_reduction reduction;
  int64_t numel;
} mse_aux;

/* Fixed chunks of the flat index for the sum (their number depends on the
 * size alone), added in order: bit-identical for every thread count. */
#define MSE_CHUNK 16384

#define MSE_KERNELS(NAME, T)                                                                     \
  static void mse_none_##NAME(T *y, const T *x, const T *t, int64_t n) {                         \
    _Pragma("omp parallel for simd schedule(static) if (n >= LT__PARALLEL_MIN)")                 \
    for (int64_t i = 0; i < n; i++) {                                                            \
      const T d = x[i] - t[i];                                                                   \
      y[i] = d * d;                                                                              \
    }                                                                                            \
  }                                                                                              \
  static double mse_sum_##NAME(const T *x, const T *t, int64_t n) {                              \
    const int64_t nch = (n + MSE_CHUNK - 1) / MSE_CHUNK;                                         \
    double part[64], total = 0;                                                                  \
    for (int64_t c0 = 0; c0 < nch; c0 += 64) { /* 64 chunks at a time */                         \
      const int64_t c1 = c0 + 64 < nch ? c0 + 64 : nch;                                          \
      _Pragma("omp parallel for schedule(static) if (n >= LT__PARALLEL_MIN)")                    \
      for (int64_t c = c0; c < c1; c++) {                                                        \
        const int64_t i0 = c * MSE_CHUNK, i1 = i0 + MSE_CHUNK < n ? i0 + MSE_CHUNK : n;          \
        double a = 0;                                                                            \
        _Pragma("omp simd reduction(+ : a)") for (int64_t i = i0; i < i1; i++) {                 \
          const T d = x[i] - t[i];                                                               \
          a += (double)(d * d);                                                                  \
        }                                                                                        \
        part[c - c0] = a;                                                                        \
      }                                                                                          \
      for (int64_t c = c0; c < c1; c++) total += part[c - c0];                                   \
    }                                                                                            \
    return total;                                                                                \
  }                                                                                              \
  /* dx = f * (x - t) with f = 2 k (k a scalar, or per element when kv). */                      \
  static void mse_bwd_##NAME(T *dx, const T *x, const T *t, const T *kv, T f, int64_t n) {       \
    if (kv) {                                                                                    \
      _Pragma("omp parallel for simd schedule(static) if (n >= LT__PARALLEL_MIN)")               \
      for (int64_t i = 0; i < n; i++) dx[i] = (T)2 * (x[i] - t[i]) * kv[i];                      \
    } else {                                                                                     \
      _Pragma("omp parallel for simd schedule(static) if (n >= LT__PARALLEL_MIN)")               \
      for (int64_t i = 0; i < n; i++) dx[i] = f * (x[i] - t[i]);                                 \
    }                                                                                            \
  }
MSE_KERNELS(f32, float)
MSE_KERNELS(f64, double)

lt_tensor *lt_mse_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction) {
  if (!input) return lt__err_null("mse_loss", "input"), NULL;
  if (!target) return lt__err_null("mse_loss", "target"), NULL;
  if (!lt_dtype_is_float(input->dtype) || !lt_dtype_is_float(target->dtype))
    return lt__err(LT_ERR_DTYPE, "mse_loss: input is %s, target is %s: both must be f32 or f64", LT__D(input),
                   LT__D(target)),
           NULL;
  if (!lt__same_shape(input, target))
    return lt__err(LT_ERR_SHAPE,
                   "mse_loss: input is %s, target is %s: shapes must be equal (no broadcasting; expand "
                   "explicitly if that is meant)",
                   LT__D(input), LT__D(target)),
           NULL;
  if (reduction != LT_REDUCTION_MEAN && reduction != LT_REDUCTION_SUM && reduction != LT_REDUCTION_NONE)
    return lt__err(LT_ERR_INVALID, "mse_loss: input is %s: reduction %d is not one of LT_REDUCTION_MEAN, _SUM, _NONE",
                   LT__D(input), (int)reduction),
           NULL;
  const lt_dtype dt = lt__promote(input->dtype, target->dtype);
  const int64_t n = input->numel;
  lt_tensor *xt = NULL, *tt = NULL, *out = NULL;
  const lt_tensor *x = lt__as_contig(input, dt, &xt);
  const lt_tensor *t = x ? lt__as_contig(target, dt, &tt) : NULL;
  if (!t) goto done;
  if (reduction == LT_REDUCTION_NONE) {
    out = lt_empty(dt, input->ndim, input->shape);
    if (out && dt == LT_DTYPE_F32) mse_none_f32(out->data, x->data, t->data, n);
    else if (out) mse_none_f64(out->data, x->data, t->data, n);
  } else {
    double s = dt == LT_DTYPE_F32 ? mse_sum_f32(x->data, t->data, n) : mse_sum_f64(x->data, t->data, n);
    if (reduction == LT_REDUCTION_MEAN) s /= (double)n; /* NaN for n == 0, as PyTorch */
    out = lt_scalar(dt, s);
  }
  const mse_aux aux = {reduction, n};
  if (out && lt__record(out, LT__OP_mse_loss, 2, (const lt_tensor *[]){input, target}, 2,
                        (const lt_tensor *[]){x, t}, &aux, sizeof aux) != LT_OK) {
    lt_tensor_free(out);
    out = NULL;
  }
done:
  lt_tensor_free(xt);
  lt_tensor_free(tt);
  return out;
}

/* d input = 2 (x - t) g (times 1/numel for mean), d target = -d input.
 * Saved: x, t (contiguous, the computation dtype). */
lt_status lt__bw_mse_loss(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const mse_aux *a = (const mse_aux *)node->aux;
  const lt_tensor *x = node->saved[0], *t = node->saved[1];
  const lt_dtype dt = x->dtype;
  lt_tensor *gt = NULL;
  const lt_tensor *g = NULL;
  double f = 0;
  if (a->reduction == LT_REDUCTION_NONE) {
    if (!(g = lt__as_contig(gout, dt, &gt))) return lt_last_status();
  } else {
    lt_status s = lt_item(gout, &f);
    if (s != LT_OK) return s;
    f *= 2.0;
    if (a->reduction == LT_REDUCTION_MEAN) f /= (double)a->numel;
  }
  lt_tensor *dx = lt_empty(dt, x->ndim, x->shape);
  if (!dx) return lt_last_status();
  if (dt == LT_DTYPE_F32) mse_bwd_f32(dx->data, x->data, t->data, g ? g->data : NULL, (float)f, x->numel);
  else mse_bwd_f64(dx->data, x->data, t->data, g ? g->data : NULL, f, x->numel);
  if (lt__needs_input_grad(node, 1)) {
    const bool prev = lt_set_grad_enabled(false);
    gin[1] = lt_neg(dx);
    lt_set_grad_enabled(prev);
    if (!gin[1]) return lt_last_status();
  }
  if (lt__needs_input_grad(node, 0)) gin[0] = dx;
  return LT_OK;
}

/* ======================================================================== */
/* Top-k accuracy (a metric)                                                */
/* ======================================================================== */

/* The rank of the target in its row: classes scoring higher, plus classes
 * before it scoring the same (a stable sort); a NaN row ranks last. */
lt_status lt_topk_accuracy(const lt_tensor *scores, const lt_tensor *targets, int64_t k, int64_t *correct,
                           double *accuracy) {
  static const char *op = "topk_accuracy";
  if (!scores) return lt__err_null(op, "scores");
  if (!targets) return lt__err_null(op, "targets");
  if (!accuracy) return lt__err(LT_ERR_NULL, "%s: argument accuracy is NULL", op);
  if (!lt_dtype_is_float(scores->dtype) || scores->ndim < 1)
    return lt__err(LT_ERR_DTYPE, "%s: scores is %s: must be f32 or f64 [..., V]", op, LT__D(scores));
  if (targets->dtype != LT_DTYPE_I32 && targets->dtype != LT_DTYPE_I64)
    return lt__err(LT_ERR_DTYPE, "%s: targets is %s: must be i32 or i64", op, LT__D(targets));
  bool same = targets->ndim == scores->ndim - 1;
  for (int d = 0; same && d < targets->ndim; d++) same = targets->shape[d] == scores->shape[d];
  if (!same)
    return lt__err(LT_ERR_SHAPE, "%s: scores is %s, targets is %s: targets must be scores' shape without the last dim",
                   op, LT__D(scores), LT__D(targets));
  if (k < 1) return lt__err(LT_ERR_INVALID, "%s: scores is %s: k %lld must be >= 1", op, LT__D(scores), (long long)k);
  const int64_t V = scores->shape[scores->ndim - 1], N = targets->numel;
  lt_tensor *st, *tt;
  const lt_tensor *sc = lt__as_contig(scores, LT_DTYPE_F64, &st), *tc = lt__as_contig(targets, LT_DTYPE_I64, &tt);
  if (!sc || !tc) {
    lt_tensor_free(st);
    lt_tensor_free(tt);
    return lt_last_status();
  }
  const double *s = sc->data;
  const int64_t *t = tc->data;
  lt_status rs = LT_OK;
  int64_t hit = 0;
  for (int64_t r = 0; r < N && rs == LT_OK; r++) {
    const int64_t c = t[r];
    if (c < 0 || c >= V) {
      rs = lt__err(LT_ERR_INDEX, "%s: targets is %s: target %lld at row %lld is outside [0, %lld)", op,
                   LT__D(targets), (long long)c, (long long)r, (long long)V);
      break;
    }
    const double *row = s + r * V, v = row[c];
    int64_t rank = 0;
    bool nan = isnan(v);
    for (int64_t j = 0; j < V && !nan; j++) {
      nan = isnan(row[j]);
      rank += row[j] > v || (j < c && row[j] == v);
    }
    hit += !nan && rank < k;
  }
  lt_tensor_free(st);
  lt_tensor_free(tt);
  if (rs != LT_OK) return rs;
  if (correct) *correct = hit;
  *accuracy = N ? (double)hit / (double)N : 0.0;
  return LT_OK;
}
