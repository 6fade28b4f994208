/*
 * nn/norm.c: lt_layer_norm and lt_rms_norm over the last dim, fused forward
 * and backward kernels side by side (llm.c's layernorm_forward/_backward).
 *
 * LayerNorm (torch.nn.functional.layer_norm with normalized_shape [C]):
 *   mean = sum(x) / C, var = sum((x - mean)^2) / C (biased), rstd = 1 / sqrt(var + eps)
 *   y = (x - mean) * rstd * w + b
 * RMSNorm (torch.nn.RMSNorm / F.rms_norm over [C]):
 *   rstd = 1 / sqrt(sum(x^2) / C + eps),   y = x * rstd * w
 * Either affine part may be absent (NULL).
 *
 * x [..., C] is seen as N rows of C. The forward runs rows in parallel and
 * saves per row what the backward needs (mean and rstd, or rstd alone).
 * Row statistics are summed in double (two passes for the variance: no
 * cancellation) by `omp simd` reductions, whose order is fixed when the
 * library is compiled; elementwise work is in the input's dtype.
 * The backward computes dx row by row and accumulates dweight/dbias in double
 * over fixed chunks of rows (their number depends on N only); the chunks'
 * partial sums are then added in chunk order, so results are bit-identical
 * for every thread count.
 *
 * BatchNorm and GroupNorm (lt_batch_norm, lt_group_norm) over x [N, C, *]
 * are at the end of the file; their kernels are plainer (per channel or group
 * loops in double), with the same rule: a fixed order per channel or group.
 *
 * What this is not: a norm over several trailing dims (normalized_shape of
 * rank > 1), instance norm, or synchronised (multi-process) batch norm.
 */
#include "nn/nn.h"

#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Shared helpers                                                           */
/* ======================================================================== */

/* Rows in [r0, r1) of this thread when N rows are split over nt threads. */
#define ROW_SPLIT(N, r0, r1)                                           \
  const int64_t nt_ = omp_get_num_threads(), id_ = omp_get_thread_num(); \
  const int64_t r0 = (N) * id_ / nt_, r1 = (N) * (id_ + 1) / nt_

/* Backward chunks: at most NCHUNK_MAX chunks of at least CHUNK_MIN rows,
 * fixed by N alone (never by the thread count). */
#define NCHUNK_MAX 64
#define CHUNK_MIN 16
static int64_t nchunks_for(int64_t N) {
  int64_t n = (N + CHUNK_MIN - 1) / CHUNK_MIN;
  return n < 1 ? 1 : n > NCHUNK_MAX ? NCHUNK_MAX : n;
}

typedef struct norm_aux {
  double eps;
} norm_aux;

/* Validates x [..., C] and an optional [C] parameter of op. */
static lt_status check_param(const char *op, const char *name, const lt_tensor *x, const lt_tensor *p) {
  if (!p) return LT_OK;
  if (p->dtype != x->dtype)
    return lt__err(LT_ERR_DTYPE, "%s: x is %s, %s is %s: %s must have x's dtype", op, LT__D(x), name, LT__D(p),
                   name);
  if (p->ndim != 1 || p->shape[0] != x->shape[x->ndim - 1])
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, %s is %s: %s must be [C] = [%lld] (the last dim of x)", op,
                   LT__D(x), name, LT__D(p), name, (long long)x->shape[x->ndim - 1]);
  return LT_OK;
}

static lt_status check_x(const char *op, const lt_tensor *x, double eps) {
  if (!x) return lt__err_null(op, "x");
  if (!lt_dtype_is_float(x->dtype))
    return lt__err(LT_ERR_DTYPE, "%s: x is %s: only f32 and f64 are supported (cast with lt_to_dtype)", op,
                   LT__D(x));
  if (x->ndim < 1)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s: x must have at least 1 dim (it normalises the last)", op,
                   LT__D(x));
  if (!(eps >= 0))
    return lt__err(LT_ERR_INVALID, "%s: x is %s: eps is %g, must be >= 0", op, LT__D(x), eps);
  return LT_OK;
}

/* The leading dims of x: shape of mean/rstd. */
static int64_t rows_of(const lt_tensor *x) {
  int64_t N = 1;
  for (int d = 0; d < x->ndim - 1; d++) N *= x->shape[d];
  return N;
}

/* ======================================================================== */
/* Kernels                                                                  */
/* ======================================================================== */

/* Per-dtype kernels. w/b may be NULL; the four affine cases get their own
 * loops (AFFINE picks one) so that each inner loop is plain and vectorises.
 *
 * ln_fwd: rows [r0, r1) of x [N, C] -> y, mean [N], rstd [N].
 * ln_bwd: rows [r0, r1): dx (if not NULL) and, if dw/db are not NULL, adds
 *         g * norm and g into the double accumulators dw/db [C]. Following
 *         llm.c:  norm = (x - mean) * rstd, dnorm = w * g,
 *                 dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd.
 * rms_fwd / rms_bwd: the same without the mean:
 *                 dx = (dnorm - norm * mean(dnorm * norm)) * rstd. */
#define NORM_KERNELS(NAME, T)                                                                     \
  static inline double rsum_##NAME(const T *q, int64_t n) {                                       \
    double s = 0;                                                                                 \
    _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < n; i++) s += (double)q[i];       \
    return s;                                                                                     \
  }                                                                                               \
  /* sum of (q - c)^2 */                                                                          \
  static inline double rsqdev_##NAME(const T *q, int64_t n, double c) {                           \
    double s = 0;                                                                                 \
    _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < n; i++) {                        \
      const double d = (double)q[i] - c;                                                          \
      s += d * d;                                                                                 \
    }                                                                                             \
    return s;                                                                                     \
  }                                                                                               \
  static void ln_fwd_##NAME(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t C, \
                            double eps, int64_t r0, int64_t r1) {                                 \
    for (int64_t r = r0; r < r1; r++) {                                                           \
      const T *xr = x + r * C;                                                                    \
      T *yr = y + r * C;                                                                          \
      const double m = rsum_##NAME(xr, C) / (double)C;                                            \
      const double v = rsqdev_##NAME(xr, C, m) / (double)C;                                       \
      const T mt = (T)m, rt = (T)(1.0 / sqrt(v + eps));                                           \
      mean[r] = mt;                                                                               \
      rstd[r] = rt;                                                                               \
      if (w && b) {                                                                               \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mt) * rt * w[i] + b[i]; \
      } else if (w) {                                                                             \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mt) * rt * w[i];     \
      } else if (b) {                                                                             \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mt) * rt + b[i];     \
      } else {                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mt) * rt;            \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* Row sums of dnorm and dnorm * norm (double); norm = (x - m) * rs. */                        \
  static inline void dsums_##NAME(const T *g, const T *xr, const T *w, T m, T rs, int64_t C,      \
                                  double *s1, double *s2) {                                       \
    double a = 0, c = 0;                                                                          \
    if (w) {                                                                                      \
      _Pragma("omp simd reduction(+ : a, c)") for (int64_t i = 0; i < C; i++) {                   \
        const T nrm = (xr[i] - m) * rs, dn = w[i] * g[i];                                         \
        a += (double)dn;                                                                          \
        c += (double)dn * (double)nrm;                                                            \
      }                                                                                           \
    } else {                                                                                      \
      _Pragma("omp simd reduction(+ : a, c)") for (int64_t i = 0; i < C; i++) {                   \
        const T nrm = (xr[i] - m) * rs;                                                           \
        a += (double)g[i];                                                                        \
        c += (double)g[i] * (double)nrm;                                                          \
      }                                                                                           \
    }                                                                                             \
    *s1 = a;                                                                                      \
    *s2 = c;                                                                                      \
  }                                                                                               \
  /* Shared by layer norm (center true: norm = (x - mean) * rstd) and RMS norm                    \
   * (center false: norm = x * rstd, no mean term in dx). */                                      \
  static void norm_bwd_##NAME(bool center, T *dx, double *dw, double *db, const T *g, const T *x,  \
                              const T *mean, const T *rstd, const T *w, int64_t C, int64_t r0,    \
                              int64_t r1) {                                                       \
    for (int64_t r = r0; r < r1; r++) {                                                           \
      const T *gr = g + r * C, *xr = x + r * C;                                                   \
      const T m = center ? mean[r] : (T)0, rs = rstd[r];                                          \
      if (dw) {                                                                                   \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) dw[i] += (double)gr[i] *              \
                                                                     (double)((xr[i] - m) * rs);  \
      }                                                                                           \
      if (db) {                                                                                   \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) db[i] += (double)gr[i];               \
      }                                                                                           \
      if (!dx) continue;                                                                          \
      double s1, s2;                                                                              \
      dsums_##NAME(gr, xr, w, m, rs, C, &s1, &s2);                                                \
      const T a = center ? (T)(s1 / (double)C) : (T)0, c = (T)(s2 / (double)C);                  \
      T *dr = dx + r * C;                                                                         \
      if (w) {                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) {                                     \
          const T nrm = (xr[i] - m) * rs;                                                         \
          dr[i] = (w[i] * gr[i] - a - nrm * c) * rs;                                              \
        }                                                                                         \
      } else {                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) {                                     \
          const T nrm = (xr[i] - m) * rs;                                                         \
          dr[i] = (gr[i] - a - nrm * c) * rs;                                                     \
        }                                                                                         \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  static void rms_fwd_##NAME(T *y, T *rstd, const T *x, const T *w, int64_t C, double eps,         \
                             int64_t r0, int64_t r1) {                                            \
    for (int64_t r = r0; r < r1; r++) {                                                           \
      const T *xr = x + r * C;                                                                    \
      T *yr = y + r * C;                                                                          \
      const T rt = (T)(1.0 / sqrt(rsqdev_##NAME(xr, C, 0.0) / (double)C + eps));                  \
      rstd[r] = rt;                                                                               \
      if (w) {                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) yr[i] = xr[i] * rt * w[i];            \
      } else {                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < C; i++) yr[i] = xr[i] * rt;                   \
      }                                                                                           \
    }                                                                                             \
  }
NORM_KERNELS(f32, float)
NORM_KERNELS(f64, double)

/* ======================================================================== */
/* Drivers: forward over rows, backward over chunks of rows                 */
/* ======================================================================== */

typedef struct norm_job {
  lt_dtype dt;
  bool center;              /* layer norm (true) or RMS norm (false) */
  int64_t N, C;
  double eps;
  const void *x, *w, *b, *g;
  void *y, *mean, *rstd, *dx;
} norm_job;

static void fwd_rows(const norm_job *j, int64_t r0, int64_t r1) {
  if (j->dt == LT_DTYPE_F32) {
    if (j->center) ln_fwd_f32(j->y, j->mean, j->rstd, j->x, j->w, j->b, j->C, j->eps, r0, r1);
    else rms_fwd_f32(j->y, j->rstd, j->x, j->w, j->C, j->eps, r0, r1);
  } else {
    if (j->center) ln_fwd_f64(j->y, j->mean, j->rstd, j->x, j->w, j->b, j->C, j->eps, r0, r1);
    else rms_fwd_f64(j->y, j->rstd, j->x, j->w, j->C, j->eps, r0, r1);
  }
}

static void norm_forward(const norm_job *j) {
  const int nt = lt__threads_for(j->N * j->C, j->N);
  if (nt <= 1) {
    fwd_rows(j, 0, j->N);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    ROW_SPLIT(j->N, r0, r1);
    if (r0 < r1) fwd_rows(j, r0, r1);
  }
}

static void bwd_rows(const norm_job *j, double *dw, double *db, int64_t r0, int64_t r1) {
  if (j->dt == LT_DTYPE_F32)
    norm_bwd_f32(j->center, j->dx, dw, db, j->g, j->x, j->mean, j->rstd, j->w, j->C, r0, r1);
  else
    norm_bwd_f64(j->center, j->dx, dw, db, j->g, j->x, j->mean, j->rstd, j->w, j->C, r0, r1);
}

/* dx (if j->dx) and the double sums dw/db [C] (if not NULL, zeroed here). */
static lt_status norm_backward(const norm_job *j, double *dw, double *db) {
  const int64_t N = j->N, C = j->C;
  if (!dw && !db) { /* rows alone */
    const int nt = lt__threads_for(N * C, N);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      ROW_SPLIT(N, r0, r1);
      if (r0 < r1) bwd_rows(j, NULL, NULL, r0, r1);
    }
    return LT_OK;
  }
  const int64_t nch = nchunks_for(N);
  const int64_t per = (dw ? 1 : 0) + (db ? 1 : 0);
  double *part = calloc((size_t)(nch * per * C > 0 ? nch * per * C : 1), sizeof(double));
  if (!part) return lt__err(LT_ERR_NOMEM, "norm backward: out of memory for %lld partial sums",
                            (long long)(nch * per * C));
  const int nt = lt__threads_for(N * C, nch);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t k = 0; k < nch; k++) {
    double *pw = dw ? part + k * per * C : NULL;
    double *pb = db ? part + k * per * C + (dw ? C : 0) : NULL;
    bwd_rows(j, pw, pb, N * k / nch, N * (k + 1) / nch);
  }
  /* Chunk sums in chunk order. */
  if (dw) memset(dw, 0, sizeof(double) * (size_t)C);
  if (db) memset(db, 0, sizeof(double) * (size_t)C);
  for (int64_t k = 0; k < nch; k++) {
    const double *pw = part + k * per * C, *pb = pw + (dw ? C : 0);
    if (dw)
      for (int64_t i = 0; i < C; i++) dw[i] += pw[i];
    if (db)
      for (int64_t i = 0; i < C; i++) db[i] += pb[i];
  }
  free(part);
  return LT_OK;
}

/* A new [C] tensor of dtype dt from double sums. */
static lt_tensor *from_sums(lt_dtype dt, const double *s, int64_t C) {
  lt_tensor *t = lt_empty(dt, 1, &C);
  if (!t) return NULL;
  for (int64_t i = 0; i < C; i++) lt__store((char *)t->data + i * (int64_t)lt_dtype_size(dt), dt, s[i]);
  return t;
}

/* ======================================================================== */
/* Forward and backward, shared by both norms                               */
/* ======================================================================== */

/* center: layer norm (weight, bias) or RMS norm (weight; bias NULL). */
static lt_tensor *norm_op(const char *op, bool center, const lt_tensor *x, const lt_tensor *weight,
                          const lt_tensor *bias, double eps) {
  if (check_x(op, x, eps) != LT_OK || check_param(op, "weight", x, weight) != LT_OK ||
      check_param(op, "bias", x, bias) != LT_OK)
    return NULL;
  const lt_dtype dt = x->dtype;
  const int64_t C = x->shape[x->ndim - 1], N = rows_of(x);
  lt_tensor *xt, *wt, *bt, *y = NULL, *mean = NULL, *rstd = NULL;
  const lt_tensor *xc = lt__as_contig(x, dt, &xt), *wc = lt__as_contig(weight, dt, &wt), *bc = lt__as_contig(bias, dt, &bt);
  if (!xc || (weight && !wc) || (bias && !bc)) goto done;
  y = lt_empty(dt, x->ndim, x->shape);
  /* mean / rstd [...] over the leading dims */
  mean = center ? lt_empty(dt, x->ndim - 1, x->shape) : NULL;
  rstd = lt_empty(dt, x->ndim - 1, x->shape);
  if (!y || (center && !mean) || !rstd) goto fail;
  const norm_job job = {dt, center, N, C, eps, xc->data, wc ? wc->data : NULL, bc ? bc->data : NULL, NULL,
                        y->data, mean ? mean->data : NULL, rstd->data, NULL};
  if (N > 0) norm_forward(&job);
  if (lt__needs_grad(3, (const lt_tensor *[]){x, weight, bias})) {
    const norm_aux aux = {eps};
    /* Saved: x (contiguous), weight (contiguous or absent: a 0-d placeholder
     * is not needed, the node's input edge says whether it exists), stats. */
    const lt_tensor *sv[4] = {xc, rstd, mean, wc};
    const int nsv = 2 + (center ? 1 : 0) + (wc ? 1 : 0);
    if (!center) sv[2] = wc;
    lt_status st = center ? lt__record(y, LT__OP_layer_norm, 3, (const lt_tensor *[]){x, weight, bias}, nsv, sv,
                                       &aux, sizeof aux)
                          : lt__record(y, LT__OP_rms_norm, 2, (const lt_tensor *[]){x, weight}, nsv, sv, &aux,
                                       sizeof aux);
    if (st != LT_OK) goto fail;
  }
  goto done;
fail:
  lt_tensor_free(y);
  y = NULL;
done:
  lt_tensor_free(xt);
  lt_tensor_free(wt);
  lt_tensor_free(bt);
  lt_tensor_free(mean);
  lt_tensor_free(rstd);
  return y;
}

/* Saved: x [N, C] contiguous, rstd [N], then mean [N] (layer norm only), then
 * weight [C] if the op had one. Gradients: dx [..., C], dweight [C], dbias [C]. */
static lt_status norm_bw(bool center, const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt_tensor *x = node->saved[0], *rstd = node->saved[1];
  const lt_tensor *mean = center ? node->saved[2] : NULL;
  const int iw = center ? 3 : 2;
  const bool has_w = node->nsaved > iw;
  const lt_tensor *w = has_w ? node->saved[iw] : NULL;
  const lt_dtype dt = x->dtype;
  const int64_t C = x->shape[x->ndim - 1], N = rows_of(x);
  const bool need_dx = lt__needs_input_grad(node, 0);
  const bool need_dw = lt__needs_input_grad(node, 1);
  const bool need_db = center && lt__needs_input_grad(node, 2);
  lt_tensor *gt;
  const lt_tensor *g = lt__as_contig(gout, dt, &gt);
  if (!g) return lt_last_status();
  lt_tensor *dx = need_dx ? lt_empty(dt, x->ndim, x->shape) : NULL;
  if (need_dx && !dx) return lt_last_status();
  double *sums = (need_dw || need_db) ? calloc((size_t)(2 * C > 0 ? 2 * C : 1), sizeof(double)) : NULL;
  if ((need_dw || need_db) && !sums) return lt__err(LT_ERR_NOMEM, "norm backward: out of memory");
  double *dw = need_dw ? sums : NULL, *db = need_db ? sums + C : NULL;
  const norm_job job = {dt, center, N, C, 0.0, x->data, w ? w->data : NULL, NULL, g->data,
                        NULL, mean ? mean->data : NULL, rstd->data, dx ? dx->data : NULL};
  lt_status st = N > 0 ? norm_backward(&job, dw, db) : LT_OK;
  if (st == LT_OK && need_dw && !(gin[1] = from_sums(dt, dw, C))) st = lt_last_status();
  if (st == LT_OK && need_db && !(gin[2] = from_sums(dt, db, C))) st = lt_last_status();
  free(sums);
  if (st != LT_OK) return st;
  gin[0] = dx;
  return LT_OK;
}

lt_tensor *lt_layer_norm(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias, double eps) {
  return norm_op("layer_norm", true, x, weight, bias, eps);
}
lt_status lt__bw_layer_norm(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return norm_bw(true, node, gout, gin);
}

lt_tensor *lt_rms_norm(const lt_tensor *x, const lt_tensor *weight, double eps) {
  return norm_op("rms_norm", false, x, weight, NULL, eps);
}
lt_status lt__bw_rms_norm(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return norm_bw(false, node, gout, gin);
}

/* ======================================================================== */
/* BatchNorm and GroupNorm over [N, C, *]                                   */
/* ======================================================================== */

/* Both see a contiguous x [N, C, *] as [N, C, S] (S the product of the
 * trailing dims) and keep per-group statistics in double:
 *   batch norm: per channel c over the N * S elements x[n, c, s];
 *   group norm: per (n, group) over the (C / G) * S elements of the group,
 *               which are contiguous in memory.
 * Forward y = (x - mean) * rstd * w[c] + b[c]. The backward (llm.c's
 * layernorm_backward with the sums taken over the group's elements):
 *   xhat = (x - mean) * rstd, dxhat = g * w[c],
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 * where the statistics came from the batch; dx = rstd * dxhat when batch
 * norm used running statistics (constants then). dw[c] = sum g * xhat and
 * db[c] = sum g over n and s. Every channel (or group) is computed by one
 * thread in a fixed order: results do not depend on the thread count. */

typedef struct cnorm_geom {
  int64_t N, C, S, G; /* G: groups (batch norm: C, one channel a group, across n) */
} cnorm_geom;

static cnorm_geom cnorm_geom_of(const lt_tensor *x, int64_t G) {
  cnorm_geom g = {x->shape[0], x->shape[1], 1, G};
  for (int d = 2; d < x->ndim; d++) g.S *= x->shape[d];
  return g;
}

/* Sums over a channel are kept in CN_LANES independent partial sums (the
 * compiler makes them one vector register), added up at the end in a fixed
 * order: vectorised, and still independent of the thread count. */
#define CN_LANES 8
static inline double cn_lanes_sum(const double *v) {
  double s = 0;
  for (int k = 0; k < CN_LANES; k++) s += v[k];
  return s;
}

#define CNORM_KERNELS(NAME, T)                                                                      \
  /* batch norm statistics of channel c: mean and biased variance (two passes). */                 \
  static void bn_stats_##NAME(const T *x, cnorm_geom g, int64_t c, double *mean, double *var) {     \
    double s[CN_LANES] = {0}, q[CN_LANES] = {0};                                                    \
    for (int64_t n = 0; n < g.N; n++) {                                                             \
      const T *r = x + (n * g.C + c) * g.S;                                                         \
      int64_t i = 0;                                                                                \
      for (; i + CN_LANES <= g.S; i += CN_LANES)                                                    \
        for (int k = 0; k < CN_LANES; k++) s[k] += (double)r[i + k];                                \
      for (; i < g.S; i++) s[0] += (double)r[i];                                                    \
    }                                                                                               \
    const double M = (double)(g.N * g.S), m = cn_lanes_sum(s) / M;                                  \
    for (int64_t n = 0; n < g.N; n++) {                                                             \
      const T *r = x + (n * g.C + c) * g.S;                                                         \
      int64_t i = 0;                                                                                \
      for (; i + CN_LANES <= g.S; i += CN_LANES)                                                    \
        for (int k = 0; k < CN_LANES; k++) {                                                        \
          const double d = (double)r[i + k] - m;                                                    \
          q[k] += d * d;                                                                            \
        }                                                                                           \
      for (; i < g.S; i++) {                                                                        \
        const double d = (double)r[i] - m;                                                          \
        q[0] += d * d;                                                                              \
      }                                                                                             \
    }                                                                                               \
    *mean = m;                                                                                      \
    *var = cn_lanes_sum(q) / M;                                                                     \
  }                                                                                                 \
  /* y[n, c, :] for channel c with the channel's mean, rstd, weight and bias. */                   \
  static void bn_apply_##NAME(const T *x, T *y, cnorm_geom g, int64_t c, double m, double rs,      \
                              double w, double b) {                                                 \
    const T a = (T)(rs * w), sh = (T)(b - m * rs * w);                                              \
    for (int64_t n = 0; n < g.N; n++) {                                                             \
      const int64_t o = (n * g.C + c) * g.S;                                                        \
      for (int64_t i = 0; i < g.S; i++) y[o + i] = x[o + i] * a + sh;                               \
    }                                                                                               \
  }                                                                                                 \
  /* Sums over n, s of g and g * xhat for channel c (xhat from mean/rstd of group grp(n)). */       \
  static void cn_dsums_##NAME(const T *x, const T *gy, cnorm_geom g, int64_t c, const double *mean, \
                              const double *rstd, bool per_channel, double *sg, double *sgx) {      \
    double a[CN_LANES] = {0}, b[CN_LANES] = {0};                                                    \
    const int64_t cg = g.C / g.G;                                                                   \
    for (int64_t n = 0; n < g.N; n++) {                                                             \
      const int64_t k = per_channel ? c : n * g.G + c / cg, o = (n * g.C + c) * g.S;                \
      const double m = mean[k], rs = rstd[k];                                                       \
      int64_t i = 0;                                                                                \
      for (; i + CN_LANES <= g.S; i += CN_LANES)                                                    \
        for (int l = 0; l < CN_LANES; l++) {                                                        \
          a[l] += (double)gy[o + i + l];                                                            \
          b[l] += (double)gy[o + i + l] * (((double)x[o + i + l] - m) * rs);                        \
        }                                                                                           \
      for (; i < g.S; i++) {                                                                        \
        a[0] += (double)gy[o + i];                                                                  \
        b[0] += (double)gy[o + i] * (((double)x[o + i] - m) * rs);                                  \
      }                                                                                             \
    }                                                                                               \
    *sg = cn_lanes_sum(a);                                                                          \
    *sgx = cn_lanes_sum(b);                                                                         \
  }                                                                                                 \
  /* dx of batch norm for channel c: wc rs (g - a - xhat b), a and b the means of g and g xhat      \
   * when the statistics came from the batch (0 otherwise). */                                      \
  static void bn_dx_##NAME(const T *x, const T *gy, T *dx, cnorm_geom g, int64_t c, double m,       \
                           double rs, double wc, double a, double b) {                              \
    const double k = wc * rs;                                                                       \
    for (int64_t n = 0; n < g.N; n++) {                                                             \
      const int64_t o = (n * g.C + c) * g.S;                                                        \
      for (int64_t i = 0; i < g.S; i++)                                                             \
        dx[o + i] = (T)(k * ((double)gy[o + i] - a - ((double)x[o + i] - m) * rs * b));             \
    }                                                                                               \
  }
CNORM_KERNELS(f32, float)
CNORM_KERNELS(f64, double)

/* Element e of a contiguous f32/f64 buffer as double, and back. */
static inline double ld(const void *p, lt_dtype dt, int64_t e) {
  return dt == LT_DTYPE_F32 ? (double)((const float *)p)[e] : ((const double *)p)[e];
}
static inline void st(void *p, lt_dtype dt, int64_t e, double v) {
  if (dt == LT_DTYPE_F32) ((float *)p)[e] = (float)v;
  else ((double *)p)[e] = v;
}

static lt_status check_cparam(const char *op, const char *name, const lt_tensor *x, const lt_tensor *p) {
  if (!p) return LT_OK;
  if (p->dtype != x->dtype)
    return lt__err(LT_ERR_DTYPE, "%s: x is %s, %s is %s: %s must have x's dtype", op, LT__D(x), name, LT__D(p),
                   name);
  if (p->ndim != 1 || p->shape[0] != x->shape[1])
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, %s is %s: %s must be [C] = [%lld] (dim 1 of x)", op, LT__D(x),
                   name, LT__D(p), name, (long long)x->shape[1]);
  return LT_OK;
}

static lt_status check_cx(const char *op, const lt_tensor *x, double eps) {
  if (!x) return lt__err_null(op, "x");
  if (!lt_dtype_is_float(x->dtype))
    return lt__err(LT_ERR_DTYPE, "%s: x is %s: only f32 and f64 are supported (cast with lt_to_dtype)", op,
                   LT__D(x));
  if (x->ndim < 2)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s: x must be [N, C, *] (at least 2 dims)", op, LT__D(x));
  if (!(eps >= 0)) return lt__err(LT_ERR_INVALID, "%s: x is %s: eps is %g, must be >= 0", op, LT__D(x), eps);
  return LT_OK;
}

/* A new 1-d f64 tensor of n values (saved statistics). */
static lt_tensor *f64_vec(const double *v, int64_t n) {
  return lt_tensor_from_copy(LT_DTYPE_F64, 1, &n, v);
}

typedef struct bn_aux {
  bool batch_stats; /* statistics from the batch (dx through them) */
} bn_aux;

lt_tensor *lt_batch_norm(const lt_tensor *x, lt_tensor *running_mean, lt_tensor *running_var,
                         const lt_tensor *weight, const lt_tensor *bias, bool training, double momentum,
                         double eps) {
  static const char *op = "batch_norm";
  if (check_cx(op, x, eps) != LT_OK || check_cparam(op, "weight", x, weight) != LT_OK ||
      check_cparam(op, "bias", x, bias) != LT_OK || check_cparam(op, "running_mean", x, running_mean) != LT_OK ||
      check_cparam(op, "running_var", x, running_var) != LT_OK)
    return NULL;
  if (!running_mean != !running_var)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: give both running_mean and running_var, or neither", op,
                   LT__D(x)),
           NULL;
  const bool batch_stats = training || !running_mean;
  const bool update = training && running_mean;
  if (update && !(momentum >= 0 && momentum <= 1))
    return lt__err(LT_ERR_INVALID, "%s: x is %s: momentum is %g, must be in [0, 1]", op, LT__D(x), momentum), NULL;
  const cnorm_geom g = cnorm_geom_of(x, x->shape[1]);
  const int64_t M = g.N * g.S;
  if (training && M <= 1)
    return lt__err(LT_ERR_SHAPE,
                   "%s: x is %s: training needs more than 1 value per channel (got %lld: N * spatial size)", op,
                   LT__D(x), (long long)M),
           NULL;
  if (update && (lt__check_inplace(op, running_mean) != LT_OK || lt__check_inplace(op, running_var) != LT_OK))
    return NULL;
  const lt_dtype dt = x->dtype;
  lt_tensor *xt, *wt, *bt, *rmt, *rvt, *y = NULL, *sm = NULL, *sr = NULL;
  const lt_tensor *xc = lt__as_contig(x, dt, &xt), *wc = lt__as_contig(weight, dt, &wt),
                  *bc = lt__as_contig(bias, dt, &bt), *rmc = lt__as_contig(running_mean, dt, &rmt),
                  *rvc = lt__as_contig(running_var, dt, &rvt);
  double *mean = malloc(sizeof(double) * (size_t)(2 * g.C + 1)), *rstd = mean ? mean + g.C : NULL, *var = NULL;
  if (!xc || (weight && !wc) || (bias && !bc) || (running_mean && (!rmc || !rvc))) goto done;
  if (!mean) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    goto done;
  }
  var = malloc(sizeof(double) * (size_t)(g.C + 1));
  y = var ? lt_empty(dt, x->ndim, x->shape) : NULL;
  if (!y) {
    if (!var) lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    goto done;
  }
  const int nt = lt__threads_for(x->numel, g.C);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < g.C; c++) {
    if (batch_stats) {
      if (dt == LT_DTYPE_F32) bn_stats_f32(xc->data, g, c, &mean[c], &var[c]);
      else bn_stats_f64(xc->data, g, c, &mean[c], &var[c]);
    } else {
      mean[c] = ld(rmc->data, dt, c);
      var[c] = ld(rvc->data, dt, c);
    }
    rstd[c] = 1.0 / sqrt(var[c] + eps);
    const double w = wc ? ld(wc->data, dt, c) : 1.0, b = bc ? ld(bc->data, dt, c) : 0.0;
    if (dt == LT_DTYPE_F32) bn_apply_f32(xc->data, y->data, g, c, mean[c], rstd[c], w, b);
    else bn_apply_f64(xc->data, y->data, g, c, mean[c], rstd[c], w, b);
  }
  if (lt__needs_grad(3, (const lt_tensor *[]){x, weight, bias})) {
    const bn_aux aux = {batch_stats};
    sm = f64_vec(mean, g.C);
    sr = sm ? f64_vec(rstd, g.C) : NULL;
    if (!sr || lt__record(y, LT__OP_batch_norm, 3, (const lt_tensor *[]){x, weight, bias}, wc ? 4 : 3,
                          (const lt_tensor *[]){xc, sm, sr, wc}, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(y);
      y = NULL;
      goto done;
    }
  }
  if (update) { /* in place, after everything that can fail: running = (1 - m) * running + m * batch */
    for (int64_t c = 0; c < g.C; c++) {
      const int64_t im = c * running_mean->stride[0];
      const int64_t iv = c * running_var->stride[0];
      const double unbiased = var[c] * (double)M / (double)(M - 1);
      st(running_mean->data, dt, im, momentum * mean[c] + (1 - momentum) * ld(running_mean->data, dt, im));
      st(running_var->data, dt, iv, momentum * unbiased + (1 - momentum) * ld(running_var->data, dt, iv));
    }
    lt__bump_version(running_mean);
    lt__bump_version(running_var);
  }
done:
  free(mean);
  free(var);
  lt_tensor_free(sm);
  lt_tensor_free(sr);
  lt_tensor_free(xt);
  lt_tensor_free(wt);
  lt_tensor_free(bt);
  lt_tensor_free(rmt);
  lt_tensor_free(rvt);
  return y;
}

/* Shared by the batch-norm and group-norm backwards. Saved: x [N, C, *]
 * contiguous, mean and rstd (f64; [C] for batch norm, [N * G] for group
 * norm), then weight [C] if the op had one. */
static lt_status cnorm_bw(const lt_node *node, const lt_tensor *gout, lt_tensor **gin, bool per_channel,
                          bool through_stats, int64_t G) {
  const lt_tensor *x = node->saved[0], *mt = node->saved[1], *rt = node->saved[2];
  const lt_tensor *w = node->nsaved > 3 ? node->saved[3] : NULL;
  const lt_dtype dt = x->dtype;
  const cnorm_geom g = cnorm_geom_of(x, per_channel ? x->shape[1] : G);
  const double *mean = mt->data, *rstd = rt->data;
  const bool need_dx = lt__needs_input_grad(node, 0), need_dw = lt__needs_input_grad(node, 1),
             need_db = lt__needs_input_grad(node, 2);
  lt_tensor *gt;
  const lt_tensor *gc = lt__as_contig(gout, dt, &gt);
  if (!gc) return lt_last_status();
  double *sg = malloc(sizeof(double) * (size_t)(2 * g.C + 1)), *sgx = sg ? sg + g.C : NULL;
  lt_tensor *dx = need_dx ? lt_empty(dt, x->ndim, x->shape) : NULL, *dw = NULL, *db = NULL;
  lt_status s = LT_OK;
  if (!sg || (need_dx && !dx)) {
    s = sg ? lt_last_status() : lt__err(LT_ERR_NOMEM, "%s backward: out of memory", lt__node_name(node));
    goto done;
  }
  /* per channel: dw, db (and, for batch norm, what dx needs) */
  int nt = lt__threads_for(x->numel, g.C);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < g.C; c++) {
    if (dt == LT_DTYPE_F32) cn_dsums_f32(x->data, gc->data, g, c, mean, rstd, per_channel, &sg[c], &sgx[c]);
    else cn_dsums_f64(x->data, gc->data, g, c, mean, rstd, per_channel, &sg[c], &sgx[c]);
  }
  if (need_dx && per_channel) {
    const double M = (double)(g.N * g.S);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t c = 0; c < g.C; c++) {
      const double wc = w ? ld(w->data, dt, c) : 1.0, m = mean[c], rs = rstd[c];
      const double a = through_stats ? sg[c] / M : 0.0, b = through_stats ? sgx[c] / M : 0.0;
      if (dt == LT_DTYPE_F32) bn_dx_f32(x->data, gc->data, dx->data, g, c, m, rs, wc, a, b);
      else bn_dx_f64(x->data, gc->data, dx->data, g, c, m, rs, wc, a, b);
    }
  } else if (need_dx) { /* group norm: per (n, group), sums of dxhat and dxhat * xhat */
    const int64_t cg = g.C / g.G, K = cg * g.S, ng = g.N * g.G;
    nt = lt__threads_for(x->numel, ng);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t k = 0; k < ng; k++) {
      const int64_t o = k * K, c0 = (k % g.G) * cg;
      const double m = mean[k], rs = rstd[k];
      double a = 0, b = 0;
      for (int64_t e = 0; e < K; e++) {
        const double dxh = ld(gc->data, dt, o + e) * (w ? ld(w->data, dt, c0 + e / g.S) : 1.0);
        a += dxh;
        b += dxh * ((ld(x->data, dt, o + e) - m) * rs);
      }
      a /= (double)K;
      b /= (double)K;
      for (int64_t e = 0; e < K; e++) {
        const double dxh = ld(gc->data, dt, o + e) * (w ? ld(w->data, dt, c0 + e / g.S) : 1.0);
        st(dx->data, dt, o + e, rs * (dxh - a - ((ld(x->data, dt, o + e) - m) * rs) * b));
      }
    }
  }
  if (need_dw && !(dw = from_sums(dt, sgx, g.C))) s = lt_last_status();
  if (s == LT_OK && need_db && !(db = from_sums(dt, sg, g.C))) s = lt_last_status();
done:
  free(sg);
  lt_tensor_free(gt);
  if (s != LT_OK) {
    lt_tensor_free(dx);
    lt_tensor_free(dw);
    lt_tensor_free(db);
    return s;
  }
  gin[0] = dx;
  gin[1] = dw;
  gin[2] = db;
  return LT_OK;
}

lt_status lt__bw_batch_norm(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const bn_aux *a = (const bn_aux *)node->aux;
  return cnorm_bw(node, gout, gin, true, a->batch_stats, 0);
}

typedef struct gn_aux {
  int64_t G;
} gn_aux;

lt_tensor *lt_group_norm(const lt_tensor *x, int64_t num_groups, const lt_tensor *weight, const lt_tensor *bias,
                         double eps) {
  static const char *op = "group_norm";
  if (check_cx(op, x, eps) != LT_OK || check_cparam(op, "weight", x, weight) != LT_OK ||
      check_cparam(op, "bias", x, bias) != LT_OK)
    return NULL;
  if (num_groups < 1 || x->shape[1] % num_groups)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: num_groups %lld must be >= 1 and divide C = %lld", op, LT__D(x),
                   (long long)num_groups, (long long)x->shape[1]),
           NULL;
  const lt_dtype dt = x->dtype;
  const cnorm_geom g = cnorm_geom_of(x, num_groups);
  const int64_t cg = g.C / g.G, K = cg * g.S, ng = g.N * g.G;
  lt_tensor *xt, *wt, *bt, *y = NULL, *sm = NULL, *sr = NULL;
  const lt_tensor *xc = lt__as_contig(x, dt, &xt), *wc = lt__as_contig(weight, dt, &wt),
                  *bc = lt__as_contig(bias, dt, &bt);
  double *mean = malloc(sizeof(double) * (size_t)(2 * ng + 1)), *rstd = mean ? mean + ng : NULL;
  if (!xc || (weight && !wc) || (bias && !bc)) goto done;
  if (!mean) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    goto done;
  }
  if (!(y = lt_empty(dt, x->ndim, x->shape))) goto done;
  const int nt = lt__threads_for(x->numel, ng);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t k = 0; k < ng; k++) {
    const int64_t o = k * K, c0 = (k % g.G) * cg;
    double s = 0, q = 0;
    for (int64_t e = 0; e < K; e++) s += ld(xc->data, dt, o + e);
    const double m = K ? s / (double)K : 0.0;
    for (int64_t e = 0; e < K; e++) {
      const double d = ld(xc->data, dt, o + e) - m;
      q += d * d;
    }
    const double rs = 1.0 / sqrt((K ? q / (double)K : 0.0) + eps);
    mean[k] = m;
    rstd[k] = rs;
    for (int64_t e = 0; e < K; e++) {
      const int64_t c = c0 + e / g.S;
      const double w = wc ? ld(wc->data, dt, c) : 1.0, b = bc ? ld(bc->data, dt, c) : 0.0;
      st(y->data, dt, o + e, (ld(xc->data, dt, o + e) - m) * rs * w + b);
    }
  }
  if (lt__needs_grad(3, (const lt_tensor *[]){x, weight, bias})) {
    const gn_aux aux = {num_groups};
    sm = f64_vec(mean, ng);
    sr = sm ? f64_vec(rstd, ng) : NULL;
    if (!sr || lt__record(y, LT__OP_group_norm, 3, (const lt_tensor *[]){x, weight, bias}, wc ? 4 : 3,
                          (const lt_tensor *[]){xc, sm, sr, wc}, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(y);
      y = NULL;
    }
  }
done:
  free(mean);
  lt_tensor_free(sm);
  lt_tensor_free(sr);
  lt_tensor_free(xt);
  lt_tensor_free(wt);
  lt_tensor_free(bt);
  return y;
}

lt_status lt__bw_group_norm(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const gn_aux *a = (const gn_aux *)node->aux;
  return cnorm_bw(node, gout, gin, false, true, a->G);
}
