/*
 * tensor/reduce.c: reductions (sum, mean, amax/amin, max/min along a dim,
 * argmax/argmin, var/std, logsumexp), forward and backward side by side, all
 * on one reduction plan and its kernels.
 *
 * How a reduction runs. The input's dims are split into kept dims (K: they
 * index the output) and reduced dims (R). Size-1 dims are dropped and
 * neighbours within K and within R are merged where the strides allow (see
 * rplan). Then one of two loops runs:
 *   - row loop: for each output element, walk its R-space in row-major order;
 *     the innermost reduced run is a plain loop with 8 accumulator lanes that
 *     the compiler vectorises. Reductions over the last dims of a contiguous
 *     tensor (softmax rows, layernorm rows) take this path.
 *   - column loop: when the innermost kept dim has the smaller stride (the sum
 *     of [B*T, C] over dim 0, a bias gradient), a block of outputs along that
 *     dim is accumulated row after row of the input, so memory streams
 *     contiguously instead of striding down columns.
 * Each output element is computed by one thread in an order fixed by the
 * geometry alone, so results are bit-identical for any thread count. f32 sums
 * accumulate in double; integer and bool sums in (wrapping) 64 bits.
 *
 * What this is not: a split reduction (a full reduction to one value runs on
 * one thread, still vectorised), a compensated (Kahan) sum, softmax and
 * log_softmax (tensor/softmax_ops.c) or the running sum cumsum
 * (tensor/cumsum.c).
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/softmax_internal.h"
#include "tensor/reduce_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* ======================================================================== */
/* Dims, output shapes, the reduction plan                                  */
/* ======================================================================== */

/* Parse a dim list of op on x into a mask (bit i set: dim i is reduced).
 * ndims == 0 means all dims; negative dims wrap; duplicates are an error. A
 * 0-d tensor accepts dim 0 / -1 (nothing to reduce: mask 0). */
static lt_status parse_dims(const char *op, const lt_tensor *x, int ndims, const int *dims,
                            unsigned *mask) {
  if (ndims < 0)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: ndims is %d, must be >= 0 (0 reduces all dims)",
                   op, LT__D(x), ndims);
  if (ndims > 0 && !dims)
    return lt__err(LT_ERR_NULL, "%s: argument dims is NULL but ndims is %d", op, ndims);
  if (ndims == 0) {
    *mask = (1u << x->ndim) - 1u;
    return LT_OK;
  }
  unsigned seen = 0;
  for (int i = 0; i < ndims; i++) {
    int d;
    lt_status s = lt__wrap_dim(op, dims[i], x->ndim, &d);
    if (s != LT_OK) return s;
    if (seen >> d & 1u)
      return lt__err(LT_ERR_INVALID, "%s: x is %s: dim %d (given as %d) appears more than once in dims",
                     op, LT__D(x), d, dims[i]);
    seen |= 1u << d;
  }
  *mask = x->ndim ? seen : 0u;
  return LT_OK;
}

/* The output shape of reducing x over mask; returns its rank. */
static int reduced_shape(const lt_tensor *x, unsigned mask, bool keepdim, int64_t *shape) {
  int n = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (mask >> i & 1u) {
      if (keepdim) shape[n++] = 1;
    } else {
      shape[n++] = x->shape[i];
    }
  }
  return n;
}

/* Number of elements reduced into each output element. */
static int64_t reduced_count(const lt_tensor *x, unsigned mask) {
  int64_t n = 1;
  for (int i = 0; i < x->ndim; i++)
    if (mask >> i & 1u) n *= x->shape[i];
  return n;
}

/* First reduced dim of size zero, or -1. */
static int empty_reduced_dim(const lt_tensor *x, unsigned mask) {
  for (int i = 0; i < x->ndim; i++)
    if ((mask >> i & 1u) && x->shape[i] == 0) return i;
  return -1;
}

/* The geometry of one reduction: kept dims (K) and reduced dims (R) of the
 * input, size-1 dims dropped, neighbours merged where strides allow. The
 * output is contiguous over K in row-major order, so output element o is the
 * row-major index of its K coordinates. Strides in elements. */
typedef struct rplan {
  int nk, nr;
  int64_t ksh[LT_MAX_DIMS], kst[LT_MAX_DIMS];
  int64_t rsh[LT_MAX_DIMS], rst[LT_MAX_DIMS];
  int64_t nout, nred;
} rplan;

static void plan_init(rplan *p, const lt_tensor *x, unsigned mask) {
  p->nk = p->nr = 0;
  p->nout = p->nred = 1;
  for (int i = 0; i < x->ndim; i++) {
    const int64_t n = x->shape[i], s = x->stride[i];
    const bool red = mask >> i & 1u;
    if (red) p->nred *= n;
    else p->nout *= n;
    if (n == 1) continue;
    int *cnt = red ? &p->nr : &p->nk;
    int64_t *sh = red ? p->rsh : p->ksh, *st = red ? p->rst : p->kst;
    if (*cnt > 0 && st[*cnt - 1] == s * n) {
      sh[*cnt - 1] *= n;
      st[*cnt - 1] = s;
    } else {
      sh[*cnt] = n;
      st[*cnt] = s;
      (*cnt)++;
    }
  }
}

/* Offset of output element o's first input element, over the first nk K dims. */
static int64_t k_offset(const rplan *p, int nk, int64_t o) {
  int64_t off = 0;
  for (int d = nk - 1; d >= 0; d--) {
    off += (o % p->ksh[d]) * p->kst[d];
    o /= p->ksh[d];
  }
  return off;
}

/* An odometer over all K dims (row loop: consecutive output elements). */
typedef struct kodo {
  int64_t idx[LT_MAX_DIMS];
  int64_t off;
} kodo;

static void kodo_init(kodo *k, const rplan *p, int64_t o) {
  k->off = 0;
  for (int d = p->nk - 1; d >= 0; d--) {
    k->idx[d] = o % p->ksh[d];
    k->off += k->idx[d] * p->kst[d];
    o /= p->ksh[d];
  }
}

static inline void kodo_next(kodo *k, const rplan *p) {
  for (int d = p->nk - 1; d >= 0; d--) {
    k->off += p->kst[d];
    if (++k->idx[d] < p->ksh[d]) return;
    k->off -= p->kst[d] * p->ksh[d];
    k->idx[d] = 0;
  }
}

/* Runs the body once per run of the R-space (row-major): ROFF is the run's
 * offset from the output element's base, N its length and S its stride. With
 * no R dims left (all size 1) there is one run of length 1. */
#define FOR_RUNS(P, ROFF, N, S, ...)                                                    \
  do {                                                                                  \
    const rplan *fr_p = (P);                                                            \
    if (fr_p->nred > 0) {                                                               \
      const int fr_nr = fr_p->nr;                                                       \
      const int64_t N = fr_nr ? fr_p->rsh[fr_nr - 1] : 1;                               \
      const int64_t S = fr_nr ? fr_p->rst[fr_nr - 1] : 0;                               \
      const int64_t fr_runs = fr_p->nred / N;                                           \
      int64_t fr_idx[LT_MAX_DIMS] = {0};                                                \
      int64_t ROFF = 0;                                                                 \
      for (int64_t fr_r = 0; fr_r < fr_runs; fr_r++) {                                  \
        __VA_ARGS__                                                                     \
        for (int fr_d = fr_nr - 2; fr_d >= 0; fr_d--) {                                 \
          ROFF += fr_p->rst[fr_d];                                                      \
          if (++fr_idx[fr_d] < fr_p->rsh[fr_d]) break;                                  \
          ROFF -= fr_p->rst[fr_d] * fr_p->rsh[fr_d];                                    \
          fr_idx[fr_d] = 0;                                                             \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  } while (0)

/* Row loop body: visits every reduced element V (type T) of the output
 * element whose data starts at XB, with lane L in 0..7 (position in the run
 * mod 8). Stride 1 runs compile to vectorised code. The lane of an element
 * does not depend on the stride, so the summation order is the same for a
 * contiguous and a strided run. */
#define ROW_FOR_ELEMS(P, XB, T, L, V, ...)                                              \
  FOR_RUNS(P, rr_off, rr_n, rr_s, {                                                     \
    const T *rr_q = (XB) + rr_off;                                                      \
    int64_t rr_i = 0;                                                                   \
    if (rr_s == 1) {                                                                    \
      for (; rr_i + 8 <= rr_n; rr_i += 8)                                               \
        for (int L = 0; L < 8; L++) {                                                   \
          const T V = rr_q[rr_i + L];                                                   \
          __VA_ARGS__                                                                   \
        }                                                                               \
    } else {                                                                            \
      for (; rr_i + 8 <= rr_n; rr_i += 8)                                               \
        for (int L = 0; L < 8; L++) {                                                   \
          const T V = rr_q[(rr_i + L) * rr_s];                                          \
          __VA_ARGS__                                                                   \
        }                                                                               \
    }                                                                                   \
    for (int L = 0; rr_i < rr_n; rr_i++, L++) {                                         \
      const T V = rr_q[rr_i * rr_s];                                                    \
      __VA_ARGS__                                                                       \
    }                                                                                   \
  })

/* Column loop body: for every row of the R-space, visits the M outputs of the
 * block (index J) with their element V of that row; XB is the block's first
 * element, KS the stride along the block. */
#define COL_FOR_ROWS(P, XB, KS, M, T, J, V, ...)                                        \
  FOR_RUNS(P, cr_off, cr_n, cr_s, {                                                     \
    for (int64_t cr_i = 0; cr_i < cr_n; cr_i++) {                                       \
      const T *cr_q = (XB) + cr_off + cr_i * cr_s;                                      \
      if ((KS) == 1) {                                                                  \
        for (int64_t J = 0; J < (M); J++) {                                             \
          const T V = cr_q[J];                                                          \
          __VA_ARGS__                                                                   \
        }                                                                               \
      } else {                                                                          \
        for (int64_t J = 0; J < (M); J++) {                                             \
          const T V = cr_q[J * (KS)];                                                   \
          __VA_ARGS__                                                                   \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  })

/* Combine 8 lanes in a fixed tree order. */
#define LANES_SUM(a) (((a)[0] + (a)[1]) + ((a)[2] + (a)[3])) + (((a)[4] + (a)[5]) + ((a)[6] + (a)[7]))

/* Parameters the kernels read. */
typedef struct rctx {
  double div;   /* sum: 1, mean: N */
  double corr;  /* var/std: 1 for unbiased, else 0 */
  bool root;    /* std: take the square root */
} rctx;

/* Row kernel: output elements [o0, o1). Column kernel: the outputs [j0, j1)
 * along the innermost kept dim, at index ob of the other kept dims. outs[0]
 * is the (contiguous) output, outs[1] the i64 indices for arg reductions. */
typedef void (*row_kernel)(const rplan *p, const void *x, void *const *outs, int64_t o0,
                           int64_t o1, const rctx *c);
typedef void (*col_kernel)(const rplan *p, const void *x, void *const *outs, int64_t ob,
                           int64_t j0, int64_t j1, const rctx *c);

#define COLBLK 2048

/* Use the column loop when the innermost kept dim has the smaller stride. */
static bool use_columns(const rplan *p) {
  if (p->nk < 1 || p->nr < 1) return false;
  const int64_t ks = p->kst[p->nk - 1], rs = p->rst[p->nr - 1];
  return ks != 0 && llabs(ks) < llabs(rs);
}

static void run_plan(const rplan *p, const void *x, void *const *outs, row_kernel rk,
                     col_kernel ck, const rctx *c) {
  if (p->nout == 0) return;
  const int64_t work = p->nout * (p->nred > 0 ? p->nred : 1);
  int nt = work >= LT__PARALLEL_MIN ? omp_get_max_threads() : 1;
  if (ck && use_columns(p)) {
    const int64_t nl = p->ksh[p->nk - 1], nob = p->nout / nl;
    /* Blocks of 64..COLBLK outputs, as wide as possible while giving every
     * thread a task. The block size does not change any output's order. */
    const int64_t per_ob = (nt + nob - 1) / nob;
    int64_t blk = (nl + per_ob - 1) / per_ob;
    blk = (blk + 15) / 16 * 16;
    if (blk < 64) blk = 64;
    if (blk > COLBLK) blk = COLBLK;
    const int64_t nblk = (nl + blk - 1) / blk, ntasks = nob * nblk;
    if (nt > ntasks) nt = (int)ntasks;
    if (nt <= 1) {
      for (int64_t t = 0; t < ntasks; t++) {
        const int64_t j0 = (t % nblk) * blk, j1 = j0 + blk < nl ? j0 + blk : nl;
        ck(p, x, outs, t / nblk, j0, j1, c);
      }
      return;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < ntasks; t++) {
      const int64_t j0 = (t % nblk) * blk, j1 = j0 + blk < nl ? j0 + blk : nl;
      ck(p, x, outs, t / nblk, j0, j1, c);
    }
    return;
  }
  if (nt > p->nout) nt = (int)p->nout;
  if (nt <= 1) {
    rk(p, x, outs, 0, p->nout, c);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t o0 = p->nout * id / T, o1 = p->nout * (id + 1) / T;
    if (o0 < o1) rk(p, x, outs, o0, o1, c);
  }
}

/* ======================================================================== */
/* Kernels                                                                  */
/* ======================================================================== */

#define ISNAN_F(v) ((v) != (v))
#define ISNAN_I(v) 0
#define FIN_DIV(O, t) ((O)((double)(t) / c->div))
#define FIN_INT(O, t) ((O)(int64_t)(t))

/* The dtypes a reduction takes, as X(K, SFX, T, DT, A, O, FIN, ISNAN): kernel
 * family K, name suffix SFX, element type T, LT_DTYPE_##DT, and for sums the
 * accumulator A, output type O and finish FIN; ISNAN tests for NaN. The float
 * list is the first two. */
#define FLOAT_DTYPES(X, K)                                                              \
  X(K, f32, float, F32, double, float, FIN_DIV, ISNAN_F)                                \
  X(K, f64, double, F64, double, double, FIN_DIV, ISNAN_F)
#define ALL_DTYPES(X, K)                                                                \
  FLOAT_DTYPES(X, K)                                                                    \
  X(K, i32, int32_t, I32, uint64_t, int64_t, FIN_INT, ISNAN_I)                          \
  X(K, i64, int64_t, I64, uint64_t, int64_t, FIN_INT, ISNAN_I)                          \
  X(K, b8, uint8_t, BOOL, uint64_t, int64_t, FIN_INT, ISNAN_I)

/* The two kernel skeletons; a kernel family states only its body.
 * K##_row_##SFX: the body runs once per output element o in [o0, o1), with
 * xb at o's first input element and out = outs[0] (type O).
 * K##_col_##SFX: the body runs once for the block of m = j1 - j0 outputs
 * along the innermost kept dim (stride ks) at index ob of the other kept
 * dims, with xb at output j0's first input element, out at output j0, and
 * obase its index in the output. */
#define ROW_KERNEL(K, SFX, T, O, ...)                                                   \
  static void K##_row_##SFX(const rplan *p, const void *xv, void *const *outs,         \
                            int64_t o0, int64_t o1, const rctx *c) {                    \
    O *out = (O *)outs[0];                                                              \
    kodo k;                                                                             \
    kodo_init(&k, p, o0);                                                               \
    for (int64_t o = o0; o < o1; o++, kodo_next(&k, p)) {                               \
      const T *xb = (const T *)xv + k.off;                                              \
      __VA_ARGS__                                                                       \
    }                                                                                   \
    (void)c;                                                                            \
  }
#define COL_KERNEL(K, SFX, T, O, ...)                                                   \
  static void K##_col_##SFX(const rplan *p, const void *xv, void *const *outs,         \
                            int64_t ob, int64_t j0, int64_t j1, const rctx *c) {        \
    const int64_t nl = p->ksh[p->nk - 1], ks = p->kst[p->nk - 1];                       \
    const int64_t m = j1 - j0;                                                          \
    const int64_t obase = ob * nl + j0;                                                 \
    const T *xb = (const T *)xv + k_offset(p, p->nk - 1, ob) + j0 * ks;                 \
    O *out = (O *)outs[0] + obase;                                                      \
    (void)c;                                                                            \
    __VA_ARGS__                                                                         \
  }

/* sum and mean: T input, A accumulator, O output. */
#define SUM_KERNELS(K, SFX, T, DT, A, O, FIN, ISNAN)                                    \
  ROW_KERNEL(K, SFX, T, O, {                                                            \
    A a[8] = {0};                                                                       \
    ROW_FOR_ELEMS(p, xb, T, l, v, a[l] += (A)v;);                                       \
    A t = LANES_SUM(a);                                                                 \
    out[o] = FIN(O, t);                                                                 \
  })                                                                                    \
  COL_KERNEL(K, SFX, T, O, {                                                            \
    A acc[COLBLK];                                                                      \
    for (int64_t j = 0; j < m; j++) acc[j] = 0;                                         \
    /* Four rows at a time: one accumulator update per four elements. */              \
    FOR_RUNS(p, off, n, s, {                                                            \
      int64_t i = 0;                                                                    \
      for (; i + 4 <= n; i += 4) {                                                      \
        const T *q0 = xb + off + i * s, *q1 = q0 + s, *q2 = q1 + s, *q3 = q2 + s;       \
        if (ks == 1) {                                                                  \
          for (int64_t j = 0; j < m; j++)                                               \
            acc[j] += ((A)q0[j] + (A)q1[j]) + ((A)q2[j] + (A)q3[j]);                    \
        } else {                                                                        \
          for (int64_t j = 0; j < m; j++)                                               \
            acc[j] += ((A)q0[j * ks] + (A)q1[j * ks]) + ((A)q2[j * ks] + (A)q3[j * ks]); \
        }                                                                               \
      }                                                                                 \
      for (; i < n; i++) {                                                              \
        const T *q = xb + off + i * s;                                                  \
        for (int64_t j = 0; j < m; j++) acc[j] += (A)q[j * ks];                         \
      }                                                                                 \
    });                                                                                 \
    for (int64_t j = 0; j < m; j++) out[j] = FIN(O, acc[j]);                            \
  })
ALL_DTYPES(SUM_KERNELS, sum)

/* Which way amax/amin and argmax/argmin compare. */
#define CMP_amax >
#define CMP_amin <
#define CMP_argmax >
#define CMP_argmin <

/* amax/amin: a = v if v beats a or v is NaN (NaN wins and stays). Every lane
 * starts at the first reduced element, so the set must not be empty. */
#define MINMAX_KERNELS(K, SFX, T, DT, A, O, FIN, ISNAN)                                 \
  ROW_KERNEL(K, SFX, T, T, {                                                            \
    T a[8];                                                                             \
    for (int l = 0; l < 8; l++) a[l] = xb[0];                                           \
    ROW_FOR_ELEMS(p, xb, T, l, v, a[l] = (v CMP_##K a[l] || ISNAN(v)) ? v : a[l];);     \
    T r = a[0];                                                                         \
    for (int l = 1; l < 8; l++) r = (a[l] CMP_##K r || ISNAN(a[l])) ? a[l] : r;         \
    out[o] = r;                                                                         \
  })                                                                                    \
  COL_KERNEL(K, SFX, T, T, {                                                            \
    T acc[COLBLK];                                                                      \
    for (int64_t j = 0; j < m; j++) acc[j] = xb[j * ks];                                \
    COL_FOR_ROWS(p, xb, ks, m, T, j, v, acc[j] = (v CMP_##K acc[j] || ISNAN(v)) ? v : acc[j];); \
    for (int64_t j = 0; j < m; j++) out[j] = acc[j];                                    \
  })
ALL_DTYPES(MINMAX_KERNELS, amax)
ALL_DTYPES(MINMAX_KERNELS, amin)

/* max/min along one dim with the index of the first occurrence (the first NaN
 * if there is one) in outs[1]. The R-space is a single run (one dim). */
#define ARG_BETTER(v, b, CMP, ISNAN) ((v CMP b) || (ISNAN(v) && !ISNAN(b)))
#define ARG_KERNELS(K, SFX, T, DT, A, O, FIN, ISNAN)                                    \
  ROW_KERNEL(K, SFX, T, T, {                                                            \
    const int64_t n = p->nr ? p->rsh[0] : 1, s = p->nr ? p->rst[0] : 0;                 \
    T best = xb[0];                                                                     \
    int64_t bi = 0;                                                                     \
    for (int64_t i = 1; i < n; i++) {                                                   \
      const T v = xb[i * s];                                                            \
      if (ARG_BETTER(v, best, CMP_##K, ISNAN)) {                                        \
        best = v;                                                                       \
        bi = i;                                                                         \
      }                                                                                 \
    }                                                                                   \
    out[o] = best;                                                                      \
    ((int64_t *)outs[1])[o] = bi;                                                       \
  })                                                                                    \
  COL_KERNEL(K, SFX, T, T, {                                                            \
    int64_t *idx = (int64_t *)outs[1] + obase;                                          \
    const int64_t n = p->rsh[0], s = p->rst[0];                                         \
    T best[COLBLK];                                                                     \
    int64_t bi[COLBLK];                                                                 \
    for (int64_t j = 0; j < m; j++) {                                                   \
      best[j] = xb[j * ks];                                                             \
      bi[j] = 0;                                                                        \
    }                                                                                   \
    for (int64_t i = 1; i < n; i++) {                                                   \
      const T *q = xb + i * s;                                                          \
      for (int64_t j = 0; j < m; j++) {                                                 \
        const T v = q[j * ks];                                                          \
        if (ARG_BETTER(v, best[j], CMP_##K, ISNAN)) {                                   \
          best[j] = v;                                                                  \
          bi[j] = i;                                                                    \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
    for (int64_t j = 0; j < m; j++) {                                                   \
      out[j] = best[j];                                                                 \
      idx[j] = bi[j];                                                                   \
    }                                                                                   \
  })
ALL_DTYPES(ARG_KERNELS, argmax)
ALL_DTYPES(ARG_KERNELS, argmin)

/* var/std, two passes in double: mean, then the sum of squared deviations,
 * divided by max(0, N - corr) (0/0 = NaN for N - corr <= 0, as PyTorch);
 * std takes the square root. */
static inline double var_finish(double ss, double N, const rctx *c) {
  const double d = N - c->corr;
  const double v = ss / (d > 0 ? d : 0.0);
  return c->root ? sqrt(v) : v;
}
#define VAR_KERNELS(K, SFX, T, DT, A, O, FIN, ISNAN)                                    \
  ROW_KERNEL(K, SFX, T, T, {                                                            \
    const double N = (double)p->nred;                                                   \
    double a[8] = {0};                                                                  \
    ROW_FOR_ELEMS(p, xb, T, l, v, a[l] += (double)v;);                                  \
    const double mean = (LANES_SUM(a)) / N;                                             \
    double b[8] = {0};                                                                  \
    ROW_FOR_ELEMS(p, xb, T, l, v, const double d = (double)v - mean; b[l] += d * d;);   \
    out[o] = (T)var_finish(LANES_SUM(b), N, c);                                         \
  })                                                                                    \
  COL_KERNEL(K, SFX, T, T, {                                                            \
    const double N = (double)p->nred;                                                   \
    double mean[COLBLK], ss[COLBLK];                                                    \
    for (int64_t j = 0; j < m; j++) mean[j] = ss[j] = 0;                                \
    COL_FOR_ROWS(p, xb, ks, m, T, j, v, mean[j] += (double)v;);                         \
    for (int64_t j = 0; j < m; j++) mean[j] /= N;                                       \
    COL_FOR_ROWS(p, xb, ks, m, T, j, v, const double d = (double)v - mean[j]; ss[j] += d * d;); \
    for (int64_t j = 0; j < m; j++) out[j] = (T)var_finish(ss[j], N, c);                \
  })
FLOAT_DTYPES(VAR_KERNELS, var)

/* logsumexp: m = max (NaN propagates), then m' + log(sum exp(x - m')) with
 * m' = 0 where m is infinite (so all -inf gives -inf, as PyTorch). exp runs in
 * T (lt__exp_f32 for f32, tensor/softmax_internal.h); the sum accumulates in double. */
#define LSE_SHIFT(mx) (isinf(mx) ? 0.0 : (double)(mx))
#define EXP_f32 lt__exp_f32
#define EXP_f64 lt__exp_f64
#define LSE_KERNELS(K, SFX, T, DT, A, O, FIN, ISNAN)                                    \
  ROW_KERNEL(K, SFX, T, T, {                                                            \
    T a[8];                                                                             \
    for (int l = 0; l < 8; l++) a[l] = -INFINITY;                                       \
    ROW_FOR_ELEMS(p, xb, T, l, v, a[l] = (v > a[l] || v != v) ? v : a[l];);             \
    T mx = a[0];                                                                        \
    for (int l = 1; l < 8; l++) mx = (a[l] > mx || a[l] != a[l]) ? a[l] : mx;           \
    const double sh = LSE_SHIFT(mx);                                                    \
    const T sht = (T)sh;                                                                \
    double s[8] = {0};                                                                  \
    ROW_FOR_ELEMS(p, xb, T, l, v, s[l] += (double)EXP_##SFX(v - sht););                 \
    out[o] = (T)(log(LANES_SUM(s)) + sh);                                               \
  })                                                                                    \
  COL_KERNEL(K, SFX, T, T, {                                                            \
    T mx[COLBLK];                                                                       \
    double s[COLBLK];                                                                   \
    for (int64_t j = 0; j < m; j++) {                                                   \
      mx[j] = -INFINITY;                                                                \
      s[j] = 0;                                                                         \
    }                                                                                   \
    COL_FOR_ROWS(p, xb, ks, m, T, j, v, mx[j] = (v > mx[j] || v != v) ? v : mx[j];);    \
    for (int64_t j = 0; j < m; j++) mx[j] = (T)LSE_SHIFT(mx[j]);                        \
    COL_FOR_ROWS(p, xb, ks, m, T, j, v, s[j] += (double)EXP_##SFX(v - mx[j]););         \
    for (int64_t j = 0; j < m; j++) out[j] = (T)(log(s[j]) + (double)mx[j]);            \
  })
FLOAT_DTYPES(LSE_KERNELS, lse)

/* Kernel tables by input dtype (NULL: unsupported). */
typedef struct kpair {
  row_kernel row;
  col_kernel col;
} kpair;
#define KP(K, SFX, T, DT, ...) [LT_DTYPE_##DT] = {K##_row_##SFX, K##_col_##SFX},
static const kpair k_sum[LT_DTYPE_COUNT] = {ALL_DTYPES(KP, sum)};
static const kpair k_amax[LT_DTYPE_COUNT] = {ALL_DTYPES(KP, amax)};
static const kpair k_amin[LT_DTYPE_COUNT] = {ALL_DTYPES(KP, amin)};
static const kpair k_argmax[LT_DTYPE_COUNT] = {ALL_DTYPES(KP, argmax)};
static const kpair k_argmin[LT_DTYPE_COUNT] = {ALL_DTYPES(KP, argmin)};
static const kpair k_var[LT_DTYPE_COUNT] = {FLOAT_DTYPES(KP, var)};
static const kpair k_lse[LT_DTYPE_COUNT] = {FLOAT_DTYPES(KP, lse)};

/* ======================================================================== */
/* Autograd helpers                                                         */
/* ======================================================================== */

/* Parameters a reduction's backward needs (copied into the node). */
typedef struct raux {
  unsigned mask;    /* reduced dims of the input */
  bool keepdim;
  double corr;      /* var/std */
  int64_t nred;     /* elements per output element */
  int dim;          /* max_dim/min_dim, softmax: the dim (wrapped) */
} raux;

/* t (shaped like the output of a reduction over mask of a rank-ndim input,
 * with or without keepdim) as a keepdim-shaped view: size-1 dims with stride 0
 * where reduced. Returns new. */
static lt_tensor *keep_view(const lt_tensor *t, int ndim, unsigned mask) {
  if (t->ndim == ndim) return lt__view_of(t, t->ndim, t->shape, t->stride, t->offset);
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  int j = 0;
  for (int i = 0; i < ndim; i++) {
    if (mask >> i & 1u) {
      sh[i] = 1;
      st[i] = 0;
    } else {
      LT_CHECK(j < t->ndim);
      sh[i] = t->shape[j];
      st[i] = t->stride[j];
      j++;
    }
  }
  LT_CHECK(j == t->ndim);
  return lt__view_of(t, ndim, sh, st, t->offset);
}

/* The dims of a mask as a list; returns the count (0 for a 0-d input, which
 * lt_sum reads as "all dims": the same thing there). */
static int mask_dims(unsigned mask, int ndim, int *dims) {
  int n = 0;
  for (int i = 0; i < ndim; i++)
    if (mask >> i & 1u) dims[n++] = i;
  return n;
}

/* Free up to 6 temporaries (NULLs ignored). */
static void free_all(lt_tensor *a, lt_tensor *b, lt_tensor *c, lt_tensor *d, lt_tensor *e,
                     lt_tensor *f) {
  lt_tensor_free(a);
  lt_tensor_free(b);
  lt_tensor_free(c);
  lt_tensor_free(d);
  lt_tensor_free(e);
  lt_tensor_free(f);
}


/* ======================================================================== */
/* sum, mean, amax, amin, var, std, logsumexp: forward                       */
/* ======================================================================== */

typedef enum { R_SUM, R_MEAN, R_AMAX, R_AMIN, R_VAR, R_STD, R_LSE } rkind;

/* bf16 is reduced in f32 (tensor/reduce_internal.h says how): every forward
 * and backward kernel of the reductions, softmax and log_softmax goes
 * through this pair. */
const lt_tensor *lt__reduce_widen(const lt_tensor *x, lt_tensor **tmp) {
  *tmp = NULL;
  if (x->dtype != LT_DTYPE_BF16) return x;
  const bool prev = lt_set_grad_enabled(false);
  *tmp = lt_to_dtype(x, LT_DTYPE_F32);
  lt_set_grad_enabled(prev);
  return *tmp;
}
lt_tensor *lt__reduce_narrow(lt_tensor *y, lt_dtype dt) {
  if (!y || y->dtype == dt) return y;
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *r = lt_to_dtype(y, dt);
  lt_set_grad_enabled(prev);
  lt_tensor_free(y);
  return r;
}

static lt_tensor *reduce_op(const char *op, rkind kind, const lt_tensor *x, int ndims,
                            const int *dims, bool keepdim, bool unbiased) {
  if (!x) {
    lt__err_null(op, "x");
    return NULL;
  }
  unsigned mask = 0;
  if (parse_dims(op, x, ndims, dims, &mask) != LT_OK) return NULL;
  const bool fl = lt_dtype_is_floating(x->dtype);
  if (!fl && (kind == R_MEAN || kind == R_VAR || kind == R_STD)) {
    lt__err(LT_ERR_DTYPE, "%s: x is %s: %s needs a float dtype (cast with lt_to_dtype first)", op,
            LT__D(x), op);
    return NULL;
  }
  if (kind == R_AMAX || kind == R_AMIN) {
    int e = empty_reduced_dim(x, mask);
    if (e >= 0) {
      lt__err(LT_ERR_SHAPE, "%s: x is %s: cannot reduce over dim %d of size zero (the %s of an empty set is undefined)",
              op, LT__D(x), e, kind == R_AMAX ? "maximum" : "minimum");
      return NULL;
    }
  }
  /* logsumexp of integers: compute on an f32 copy (as the float functions). */
  lt_tensor *xf = NULL;
  const lt_tensor *xin = lt__reduce_widen(x, &xf);
  if (!xin) return NULL;
  if (kind == R_LSE && !fl) {
    xf = lt_to_dtype(x, LT_DTYPE_F32);
    if (!xf) return NULL;
    xin = xf;
  }

  lt_dtype odt = xin->dtype;
  const kpair *kp;
  rctx c = {1.0, 0.0, false};
  switch (kind) {
    case R_SUM: kp = &k_sum[xin->dtype]; if (!fl) odt = LT_DTYPE_I64; break;
    case R_MEAN: kp = &k_sum[xin->dtype]; c.div = (double)reduced_count(x, mask); break;
    case R_AMAX: kp = &k_amax[xin->dtype]; break;
    case R_AMIN: kp = &k_amin[xin->dtype]; break;
    case R_VAR: kp = &k_var[xin->dtype]; c.corr = unbiased ? 1.0 : 0.0; break;
    case R_STD: kp = &k_var[xin->dtype]; c.corr = unbiased ? 1.0 : 0.0; c.root = true; break;
    default: kp = &k_lse[xin->dtype]; break;
  }
  LT_CHECK(kp->row != NULL);

  int64_t shape[LT_MAX_DIMS];
  const int ond = reduced_shape(x, mask, keepdim, shape);
  lt_tensor *out = lt_empty(odt, ond, shape);
  if (!out) {
    lt_tensor_free(xf);
    return NULL;
  }
  rplan p;
  plan_init(&p, xin, mask);
  run_plan(&p, xin->data, (void *const[]){out->data}, kp->row, kp->col, &c);
  lt_tensor_free(xf);
  if (x->dtype == LT_DTYPE_BF16 && !(out = lt__reduce_narrow(out, LT_DTYPE_BF16))) return NULL;

  static const lt__op_id ids[] = {[R_SUM] = LT__OP_sum, [R_MEAN] = LT__OP_mean,
                                  [R_AMAX] = LT__OP_amax, [R_AMIN] = LT__OP_amin,
                                  [R_VAR] = LT__OP_var, [R_STD] = LT__OP_std,
                                  [R_LSE] = LT__OP_logsumexp};
  if (lt__needs_grad(1, &x)) {
    raux aux = {mask, keepdim, c.corr, reduced_count(x, mask), 0};
    /* Saved: sum/mean nothing; var x; amax/amin/std/logsumexp x and out. */
    int nsaved = (kind == R_SUM || kind == R_MEAN) ? 0 : kind == R_VAR ? 1 : 2;
    if (lt__record(out, ids[kind], 1, &x, nsaved, (const lt_tensor *[]){x, out}, &aux,
                   sizeof aux) != LT_OK) {
      lt_tensor_free(out);
      return NULL;
    }
  }
  return out;
}

lt_tensor *lt_sum(const lt_tensor *x, int ndims, const int *dims, bool keepdim) {
  return reduce_op("sum", R_SUM, x, ndims, dims, keepdim, false);
}
lt_tensor *lt_mean(const lt_tensor *x, int ndims, const int *dims, bool keepdim) {
  return reduce_op("mean", R_MEAN, x, ndims, dims, keepdim, false);
}
lt_tensor *lt_amax(const lt_tensor *x, int ndims, const int *dims, bool keepdim) {
  return reduce_op("amax", R_AMAX, x, ndims, dims, keepdim, false);
}
lt_tensor *lt_amin(const lt_tensor *x, int ndims, const int *dims, bool keepdim) {
  return reduce_op("amin", R_AMIN, x, ndims, dims, keepdim, false);
}
lt_tensor *lt_var(const lt_tensor *x, int ndims, const int *dims, bool unbiased, bool keepdim) {
  return reduce_op("var", R_VAR, x, ndims, dims, keepdim, unbiased);
}
lt_tensor *lt_std(const lt_tensor *x, int ndims, const int *dims, bool unbiased, bool keepdim) {
  return reduce_op("std", R_STD, x, ndims, dims, keepdim, unbiased);
}
lt_tensor *lt_logsumexp(const lt_tensor *x, int ndims, const int *dims, bool keepdim) {
  return reduce_op("logsumexp", R_LSE, x, ndims, dims, keepdim, false);
}

/* ======================================================================== */
/* sum, mean, amax, amin, var, std, logsumexp: backward                      */
/* ======================================================================== */

/* sum: dx = expand(g) (a broadcast view of the keepdim-shaped gradient). */
lt_status lt__bw_sum(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const raux *a = (const raux *)node->aux;
  const lt__edge *e = &node->in[0];
  lt_tensor *gk = keep_view(gout, e->ndim, a->mask);
  if (!gk) return lt_last_status();
  lt_tensor *g = lt_expand(gk, e->ndim, e->shape);
  lt_tensor_free(gk);
  return lt__set_gin(gin, g);
}

/* mean: dx = expand(g / N). */
lt_status lt__bw_mean(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const raux *a = (const raux *)node->aux;
  const lt__edge *e = &node->in[0];
  lt_tensor *gs = lt_div_scalar(gout, (double)a->nred);
  lt_tensor *gk = gs ? keep_view(gs, e->ndim, a->mask) : NULL;
  lt_tensor *g = gk ? lt_expand(gk, e->ndim, e->shape) : NULL;
  free_all(gs, gk, NULL, NULL, NULL, NULL);
  return lt__set_gin(gin, g);
}

/* amax/amin: out = max(x); the gradient is split evenly among the tied
 * extrema: dx = (x == out) * g / count(x == out). */
static lt_status bw_minmax(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const raux *a = (const raux *)node->aux;
  const lt_tensor *x = node->saved[0], *out = node->saved[1];
  int dims[LT_MAX_DIMS];
  const int nd = mask_dims(a->mask, x->ndim, dims);
  lt_tensor *ok = keep_view(out, x->ndim, a->mask);
  lt_tensor *gk = ok ? keep_view(gout, x->ndim, a->mask) : NULL;
  lt_tensor *eq = gk ? lt_eq(x, ok) : NULL;                    /* x-shaped bool */
  lt_tensor *mk = eq ? lt_to_dtype(eq, gout->dtype) : NULL;     /* 1 at the extrema */
  lt_tensor *cnt = mk ? lt_sum(mk, nd, dims, true) : NULL;      /* keepdim count */
  lt_tensor *w = cnt ? lt_div(gk, cnt) : NULL;                  /* g / count */
  lt_tensor *g = w ? lt_mul(mk, w) : NULL;
  free_all(ok, gk, eq, mk, cnt, w);
  return lt__set_gin(gin, g);
}
lt_status lt__bw_amax(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_minmax(node, gout, gin);
}
lt_status lt__bw_amin(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_minmax(node, gout, gin);
}

/* var = sum((x - mean)^2) / D, D = max(0, N - corr):
 *   dx = g * 2 (x - mean) / D.
 * std = sqrt(var): dx = g * (x - mean) / (D * std). */
static lt_status bw_var_std(const lt_node *node, const lt_tensor *gout, lt_tensor **gin,
                            bool is_std) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const raux *a = (const raux *)node->aux;
  const lt_tensor *x = node->saved[0];
  int dims[LT_MAX_DIMS];
  const int nd = mask_dims(a->mask, x->ndim, dims);
  double D = (double)a->nred - a->corr;
  if (D < 0) D = 0;
  lt_tensor *mean = lt_mean(x, nd, dims, true);
  lt_tensor *diff = mean ? lt_sub(x, mean) : NULL;
  lt_tensor *gk = diff ? keep_view(gout, x->ndim, a->mask) : NULL;
  lt_tensor *sk = NULL, *gq = NULL, *gs = NULL;
  if (gk && is_std) {
    sk = keep_view(node->saved[1], x->ndim, a->mask);
    gq = sk ? lt_div(gk, sk) : NULL;
    gs = gq ? lt_div_scalar(gq, D) : NULL;
  } else if (gk) {
    gs = lt_mul_scalar(gk, 2.0 / D);
  }
  lt_tensor *g = gs ? lt_mul(diff, gs) : NULL;
  free_all(mean, diff, gk, sk, gq, gs);
  return lt__set_gin(gin, g);
}
lt_status lt__bw_var(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_var_std(node, gout, gin, false);
}
lt_status lt__bw_std(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_var_std(node, gout, gin, true);
}

/* out = log(sum(exp(x))): dx = g * exp(x - out). */
lt_status lt__bw_logsumexp(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const raux *a = (const raux *)node->aux;
  const lt_tensor *x = node->saved[0];
  lt_tensor *ok = keep_view(node->saved[1], x->ndim, a->mask);
  lt_tensor *gk = ok ? keep_view(gout, x->ndim, a->mask) : NULL;
  lt_tensor *d = gk ? lt_sub(x, ok) : NULL;
  lt_tensor *p = d ? lt_exp(d) : NULL;
  lt_tensor *g = p ? lt_mul(p, gk) : NULL;
  free_all(ok, gk, d, p, NULL, NULL);
  return lt__set_gin(gin, g);
}

/* ======================================================================== */
/* max_dim, min_dim, argmax, argmin                                         */
/* ======================================================================== */

static lt_tensor *arg_op(const char *op, bool is_min, const lt_tensor *x, int dim, bool keepdim,
                         lt_tensor **indices, bool want_values) {
  if (indices) *indices = NULL;
  if (!x) {
    lt__err_null(op, "x");
    return NULL;
  }
  int d;
  if (lt__wrap_dim(op, dim, x->ndim, &d) != LT_OK) return NULL;
  const unsigned mask = x->ndim ? 1u << d : 0u;
  if (x->ndim && x->shape[d] == 0) {
    lt__err(LT_ERR_SHAPE, "%s: x is %s: cannot reduce over dim %d of size zero (the %s of an empty set is undefined)",
            op, LT__D(x), d, is_min ? "minimum" : "maximum");
    return NULL;
  }
  int64_t shape[LT_MAX_DIMS];
  const int ond = reduced_shape(x, mask, keepdim, shape);
  lt_tensor *xw;
  const lt_tensor *xin = lt__reduce_widen(x, &xw);
  lt_tensor *vals = xin ? lt_empty(xin->dtype, ond, shape) : NULL;
  lt_tensor *idx = vals ? lt_empty(LT_DTYPE_I64, ond, shape) : NULL;
  if (!idx) {
    lt_tensor_free(vals);
    lt_tensor_free(xw);
    return NULL;
  }
  const kpair *kp = is_min ? &k_argmin[xin->dtype] : &k_argmax[xin->dtype];
  rplan p;
  plan_init(&p, xin, mask);
  const rctx c = {1.0, 0.0, false};
  run_plan(&p, xin->data, (void *const[]){vals->data, idx->data}, kp->row, kp->col, &c);
  lt_tensor_free(xw);
  if (want_values && !(vals = lt__reduce_narrow(vals, x->dtype))) {
    lt_tensor_free(idx);
    return NULL;
  }
  if (!want_values) {
    lt_tensor_free(vals);
    return idx;
  }
  if (lt__needs_grad(1, &x)) {
    raux aux = {mask, keepdim, 0.0, 1, d};
    if (lt__record(vals, is_min ? LT__OP_min_dim : LT__OP_max_dim, 1, &x, 1,
                   (const lt_tensor *[]){idx}, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(vals);
      lt_tensor_free(idx);
      return NULL;
    }
  }
  if (indices) *indices = idx;
  else lt_tensor_free(idx);
  return vals;
}

lt_tensor *lt_max_dim(const lt_tensor *x, int dim, bool keepdim, lt_tensor **indices) {
  return arg_op("max_dim", false, x, dim, keepdim, indices, true);
}
lt_tensor *lt_min_dim(const lt_tensor *x, int dim, bool keepdim, lt_tensor **indices) {
  return arg_op("min_dim", true, x, dim, keepdim, indices, true);
}
lt_tensor *lt_argmax(const lt_tensor *x, int dim, bool keepdim) {
  return arg_op("argmax", false, x, dim, keepdim, NULL, false);
}
lt_tensor *lt_argmin(const lt_tensor *x, int dim, bool keepdim) {
  return arg_op("argmin", true, x, dim, keepdim, NULL, false);
}

/* Scatter loop for max_dim backward: operands (dx viewed keepdim-shaped, idx,
 * g); dx[.., idx, ..] = g. ctx holds dx's byte stride along the dim. */
#define SCATTER_LOOP(NAME, T)                                                           \
  static void scatter_##NAME(int64_t n, char *const *ptrs, const int64_t *strides,     \
                             void *ctx) {                                               \
    const int64_t sd = *(const int64_t *)ctx;                                           \
    for (int64_t i = 0; i < n; i++) {                                                   \
      const int64_t ix = *(const int64_t *)(ptrs[1] + i * strides[1]);                  \
      *(T *)(ptrs[0] + i * strides[0] + ix * sd) = *(const T *)(ptrs[2] + i * strides[2]); \
    }                                                                                   \
  }
SCATTER_LOOP(f32, float)
SCATTER_LOOP(f64, double)

/* values = x[.., idx, ..]: the gradient goes to the recorded index (as
 * PyTorch's max(dim) backward); dx is zero elsewhere. */
static lt_status bw_arg(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const raux *a = (const raux *)node->aux;
  const lt__edge *e = &node->in[0];
  const lt_tensor *idx = node->saved[0];
  lt_tensor *gc = NULL;
  if (gout->dtype != LT_DTYPE_F32 && gout->dtype != LT_DTYPE_F64) {
    gc = lt_to_dtype(gout, LT_DTYPE_F64);
    if (!gc) return lt_last_status();
    gout = gc;
  }
  lt_tensor *dx = lt_zeros(gout->dtype, e->ndim, e->shape);
  lt_tensor *ik = dx ? keep_view(idx, e->ndim, a->mask) : NULL;
  lt_tensor *gk = ik ? keep_view(gout, e->ndim, a->mask) : NULL;
  lt_tensor *dk = NULL;
  if (gk) {
    int64_t ksh[LT_MAX_DIMS];
    for (int i = 0; i < e->ndim; i++) ksh[i] = (a->mask >> i & 1u) ? 1 : e->shape[i];
    dk = lt__view_of(dx, e->ndim, ksh, dx->stride, dx->offset);
  }
  if (dk) {
    int64_t sd = e->ndim ? dx->stride[a->dim] * (int64_t)lt_dtype_size(dx->dtype) : 0;
    lt__iter it;
    lt__iter_init(&it, dk->ndim, dk->shape, 3, (const lt_tensor *[]){dk, ik, gk});
    lt__iter_run(&it, dx->dtype == LT_DTYPE_F32 ? scatter_f32 : scatter_f64, &sd, true);
  }
  lt_tensor *g = dk ? dx : NULL;
  if (!g) lt_tensor_free(dx);
  free_all(gc, ik, gk, dk, NULL, NULL);
  return lt__set_gin(gin, g);
}
lt_status lt__bw_max_dim(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_arg(node, gout, gin);
}
lt_status lt__bw_min_dim(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return bw_arg(node, gout, gin);
}
