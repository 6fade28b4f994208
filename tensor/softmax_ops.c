/*
 * tensor/softmax_ops.c: the ops softmax and log_softmax along one dim,
 * forward and backward side by side.
 *
 * They work on rows [outer, n, inner] of a contiguous input (a
 * non-contiguous input is copied first): inner == 1 streams each row with
 * the row kernel of tensor/softmax_internal.h, inner > 1 processes blocks of
 * columns. Their backward is a fused kernel of the same shape over the saved
 * output. Each row or block is computed by one thread in a fixed order, so
 * results do not depend on the thread count. bf16 computes in f32 (the pair
 * of tensor/reduce_internal.h); integers give f32.
 *
 * What this is not: the strided logsumexp reduction (tensor/reduce.c), the
 * fused cross-entropy (nn/loss.c) or attention's rows (nn/attention*.c),
 * which share the row kernel but not these ops.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/reduce_internal.h"
#include "tensor/softmax_internal.h"

#include <math.h>
#include <omp.h>

#define SMBLK 256

/* Forward, y = softmax(x) or log_softmax(x) along n. m = max (NaN wins), then
 * e = exp(x - m) in T with the sum in double; softmax y = e * (1/sum),
 * log_softmax y = (x - m) - log(sum).
 * Rows (inner == 1): rows [r0, r1). Columns: block [j0, j1) of outer index o. */
#define SOFTMAX_KERNELS(NAME, T, EXP)                                                   \
  static void sm_rows_##NAME(const T *x, T *y, int64_t n, int64_t r0, int64_t r1,       \
                             bool logsm) {                                              \
    for (int64_t r = r0; r < r1; r++) {                                                 \
      const T *xr = x + r * n;                                                          \
      T *yr = y + r * n;                                                                \
      const T m = lt__row_max_##NAME(xr, n);                                            \
      const double sum = lt__row_exp_##NAME(xr, m, yr, n);                              \
      if (!logsm) {                                                                     \
        const T inv = (T)(1.0 / sum);                                                   \
        for (int64_t i = 0; i < n; i++) yr[i] *= inv;                                   \
      } else {                                                                          \
        const T ls = (T)log(sum);                                                       \
        for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] - m) - ls;                       \
      }                                                                                 \
    }                                                                                   \
  }                                                                                     \
  static void sm_cols_##NAME(const T *x, T *y, lt__dim_geom g, int64_t o, int64_t j0,          \
                             int64_t j1, bool logsm) {                                  \
    const int64_t m = j1 - j0, in = g.inner;                                            \
    const T *xb = x + o * g.n * in + j0;                                                \
    T *yb = y + o * g.n * in + j0;                                                      \
    T mx[SMBLK], f[SMBLK];                                                              \
    double s[SMBLK];                                                                    \
    for (int64_t j = 0; j < m; j++) {                                                   \
      mx[j] = -INFINITY;                                                                \
      s[j] = 0;                                                                         \
    }                                                                                   \
    for (int64_t i = 0; i < g.n; i++)                                                   \
      for (int64_t j = 0; j < m; j++) {                                                 \
        const T v = xb[i * in + j];                                                     \
        mx[j] = (v > mx[j] || v != v) ? v : mx[j];                                      \
      }                                                                                 \
    for (int64_t i = 0; i < g.n; i++)                                                   \
      for (int64_t j = 0; j < m; j++) {                                                 \
        const T e = EXP(xb[i * in + j] - mx[j]);                                        \
        if (!logsm) yb[i * in + j] = e;                                                 \
        s[j] += e;                                                                      \
      }                                                                                 \
    if (!logsm) {                                                                       \
      for (int64_t j = 0; j < m; j++) f[j] = (T)(1.0 / s[j]);                           \
      for (int64_t i = 0; i < g.n; i++)                                                 \
        for (int64_t j = 0; j < m; j++) yb[i * in + j] *= f[j];                         \
    } else {                                                                            \
      for (int64_t j = 0; j < m; j++) f[j] = (T)log(s[j]);                              \
      for (int64_t i = 0; i < g.n; i++)                                                 \
        for (int64_t j = 0; j < m; j++)                                                 \
          yb[i * in + j] = (xb[i * in + j] - mx[j]) - f[j];                             \
    }                                                                                   \
  }
SOFTMAX_KERNELS(f32, float, lt__exp_f32)
SOFTMAX_KERNELS(f64, double, lt__exp_f64)

/* Backward: softmax dx = y * (g - sum(g * y)); log_softmax dx = g - exp(y) *
 * sum(g). Sums in double. */
#define SOFTMAX_BW_KERNELS(NAME, T, EXP)                                                \
  static void smbw_rows_##NAME(const T *y, const T *g, T *dx, int64_t n, int64_t r0,    \
                               int64_t r1, bool logsm) {                                \
    for (int64_t r = r0; r < r1; r++) {                                                 \
      const T *yr = y + r * n, *gr = g + r * n;                                         \
      T *dr = dx + r * n;                                                               \
      if (!logsm) {                                                                     \
        const T st = (T)lt__row_dot_##NAME(gr, yr, n);                                         \
        for (int64_t i = 0; i < n; i++) dr[i] = yr[i] * (gr[i] - st);                   \
      } else {                                                                          \
        const T st = (T)lt__row_sum_##NAME(gr, n);                                             \
        for (int64_t i = 0; i < n; i++) dr[i] = gr[i] - EXP(yr[i]) * st;                \
      }                                                                                 \
    }                                                                                   \
  }                                                                                     \
  static void smbw_cols_##NAME(const T *y, const T *g, T *dx, lt__dim_geom gm, int64_t o,      \
                               int64_t j0, int64_t j1, bool logsm) {                    \
    const int64_t m = j1 - j0, in = gm.inner, base = o * gm.n * in + j0;                \
    const T *yb = y + base, *gb = g + base;                                             \
    T *db = dx + base;                                                                  \
    double s[SMBLK];                                                                    \
    T st[SMBLK];                                                                        \
    for (int64_t j = 0; j < m; j++) s[j] = 0;                                           \
    for (int64_t i = 0; i < gm.n; i++)                                                  \
      for (int64_t j = 0; j < m; j++)                                                   \
        s[j] += logsm ? (double)gb[i * in + j]                                          \
                      : (double)gb[i * in + j] * (double)yb[i * in + j];                \
    for (int64_t j = 0; j < m; j++) st[j] = (T)s[j];                                    \
    for (int64_t i = 0; i < gm.n; i++)                                                  \
      for (int64_t j = 0; j < m; j++) {                                                 \
        const int64_t k = i * in + j;                                                   \
        db[k] = logsm ? gb[k] - EXP(yb[k]) * st[j] : yb[k] * (gb[k] - st[j]);           \
      }                                                                                 \
  }
SOFTMAX_BW_KERNELS(f32, float, lt__exp_f32)
SOFTMAX_BW_KERNELS(f64, double, lt__exp_f64)

/* Runs a softmax-shaped kernel over rows or column blocks, in parallel when
 * big enough (each row / block is independent). */
typedef struct smjob {
  lt_dtype dtype;
  bool backward, logsm;
  const void *a, *b; /* forward: x; backward: y, g */
  void *out;
  lt__dim_geom g;
} smjob;

static void sm_task_rows(const smjob *j, int64_t r0, int64_t r1) {
  if (j->dtype == LT_DTYPE_F32) {
    if (j->backward) smbw_rows_f32(j->a, j->b, j->out, j->g.n, r0, r1, j->logsm);
    else sm_rows_f32(j->a, j->out, j->g.n, r0, r1, j->logsm);
  } else {
    if (j->backward) smbw_rows_f64(j->a, j->b, j->out, j->g.n, r0, r1, j->logsm);
    else sm_rows_f64(j->a, j->out, j->g.n, r0, r1, j->logsm);
  }
}

static void sm_task_cols(const smjob *j, int64_t o, int64_t j0, int64_t j1) {
  if (j->dtype == LT_DTYPE_F32) {
    if (j->backward) smbw_cols_f32(j->a, j->b, j->out, j->g, o, j0, j1, j->logsm);
    else sm_cols_f32(j->a, j->out, j->g, o, j0, j1, j->logsm);
  } else {
    if (j->backward) smbw_cols_f64(j->a, j->b, j->out, j->g, o, j0, j1, j->logsm);
    else sm_cols_f64(j->a, j->out, j->g, o, j0, j1, j->logsm);
  }
}

static void sm_run(const smjob *j) {
  const lt__dim_geom g = j->g;
  const int64_t numel = g.outer * g.n * g.inner;
  if (numel == 0) return;
  int nt = numel >= LT__PARALLEL_MIN ? omp_get_max_threads() : 1;
  if (g.inner == 1) {
    if (nt > g.outer) nt = (int)g.outer;
    if (nt <= 1) {
      sm_task_rows(j, 0, g.outer);
      return;
    }
#pragma omp parallel num_threads(nt)
    {
      const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t r0 = g.outer * id / T, r1 = g.outer * (id + 1) / T;
      if (r0 < r1) sm_task_rows(j, r0, r1);
    }
    return;
  }
  const int64_t nblk = (g.inner + SMBLK - 1) / SMBLK, ntasks = g.outer * nblk;
  if (nt > ntasks) nt = (int)ntasks;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < ntasks; t++) {
    const int64_t j0 = (t % nblk) * SMBLK;
    const int64_t j1 = j0 + SMBLK < g.inner ? j0 + SMBLK : g.inner;
    sm_task_cols(j, t / nblk, j0, j1);
  }
}

static lt_tensor *softmax_op(const char *op, bool logsm, const lt_tensor *x, int dim) {
  if (!x) {
    lt__err_null(op, "x");
    return NULL;
  }
  int d;
  if (lt__wrap_dim(op, dim, x->ndim, &d) != LT_OK) return NULL;
  /* The kernel wants a contiguous float input (integers compute in f32). */
  lt_tensor *xc;
  const lt_tensor *xin = lt__as_contig(x, lt__compute_dtype(lt__float_result(x->dtype)), &xc);
  if (!xin) return NULL;
  lt_tensor *y = lt_empty(xin->dtype, xin->ndim, xin->shape);
  if (!y) {
    lt_tensor_free(xc);
    return NULL;
  }
  const smjob job = {xin->dtype, false, logsm, xin->data, NULL, y->data, lt__dim_geom_of(xin, d)};
  sm_run(&job);
  lt_tensor_free(xc);
  if (!(y = lt__reduce_narrow(y, lt__float_result(x->dtype)))) return NULL;
  if (lt__needs_grad(1, &x)) {
    const int aux = d; /* the dim (wrapped) */
    if (lt__record(y, logsm ? LT__OP_log_softmax : LT__OP_softmax, 1, &x, 1,
                   (const lt_tensor *[]){y}, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(y);
      return NULL;
    }
  }
  return y;
}

lt_tensor *lt_softmax(const lt_tensor *x, int dim) { return softmax_op("softmax", false, x, dim); }
lt_tensor *lt_log_softmax(const lt_tensor *x, int dim) {
  return softmax_op("log_softmax", true, x, dim);
}

/* Fused backward over the saved output y (contiguous). */
static lt_status bw_softmax_common(const lt_node *node, const lt_tensor *gout, lt_tensor **gin,
                                   bool logsm) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const int dim = *(const int *)node->aux;
  lt_tensor *yw;
  const lt_tensor *y = lt__reduce_widen(node->saved[0], &yw);
  if (!y) return lt_last_status();
  lt_tensor *gc;
  const lt_tensor *g = lt__as_contig(gout, y->dtype, &gc);
  lt_tensor *dx = g ? lt_empty(y->dtype, y->ndim, y->shape) : NULL;
  if (dx) {
    const smjob job = {y->dtype, true, logsm, y->data, g->data, dx->data, lt__dim_geom_of(y, dim)};
    sm_run(&job);
  }
  lt_tensor_free(gc);
  lt_tensor_free(yw);
  return lt__set_gin(gin, lt__reduce_narrow(dx, node->saved[0]->dtype));
}
lt_status lt__bw_softmax(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_softmax_common(node, gout, gin, false);
}
lt_status lt__bw_log_softmax(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_softmax_common(node, gout, gin, true);
}
