/*
 * tensor/index.c: indexing, joining and splitting, forward and backward:
 * index_select, gather, scatter_add, embedding, tril/triu, one_hot, cat,
 * stack, split, chunk, pad (PyTorch semantics; see tensor.h for the contracts).
 *
 * What this is. One strided gather/scatter kernel (gs_run) serves
 * index_select, gather, scatter_add, embedding and the backwards of all four:
 * the work is seen as positions (p, j, s), p over the dims before the indexed
 * dim, j along it, s over the dims after it, and each op only chooses strides.
 * Indices (i32 or i64, any strides) are first read into row-major int64 and
 * range-checked in one pass, so the kernels never see a bad index and errors
 * name the first bad one by position. Accumulating kernels (scatter_add and
 * the backwards) give every output element to one thread, which adds its
 * contributions in index order: results are bit-identical for any number of
 * threads, duplicate indices included. cat/stack copy each input into a slice
 * of the output with the shared iterator; split/chunk return lt_narrow views.
 *
 * What this is not. Advanced (tensor-of-tensors) indexing, lt_where and
 * lt_masked_fill (tensor/elementwise.c), or in-place scatter. Indices are
 * never differentiable; one_hot records nothing.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/quant.h"

#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Indices: read as row-major int64 and range-check                          */
/* ======================================================================== */

typedef struct idx_buf {
  const int64_t *v; /* numel values, row-major */
  int64_t *owned;   /* malloc'd copy, or NULL when v aliases the tensor's data */
} idx_buf;

static void idx_release(idx_buf *b) {
  free(b->owned);
  b->owned = NULL;
  b->v = NULL;
}

static lt_status idx_check_dtype(const char *op, const char *name, const lt_tensor *idx) {
  if (idx->dtype != LT_DTYPE_I32 && idx->dtype != LT_DTYPE_I64)
    return lt__err(LT_ERR_DTYPE, "%s: %s is %s: indices must be i32 or i64", op, name, LT__D(idx));
  return LT_OK;
}

static void idx_convert_loop(int64_t n, char *const *p, const int64_t *st, void *ctx) {
  int64_t *d = (int64_t *)p[0]; /* contiguous destination */
  if (*(const lt_dtype *)ctx == LT_DTYPE_I32) {
    const char *s = p[1];
    for (int64_t k = 0; k < n; k++) d[k] = *(const int32_t *)(s + k * st[1]);
  } else {
    const char *s = p[1];
    for (int64_t k = 0; k < n; k++) d[k] = *(const int64_t *)(s + k * st[1]);
  }
}

/* Reads idx (i32/i64, any strides) into b as row-major int64 and checks that
 * every value lies in [0, size). *bad is the flat row-major position of the
 * first value outside (its value in *bad_value), or -1. Only fails on NOMEM. */
static lt_status idx_load(const char *op, const lt_tensor *idx, int64_t size, idx_buf *b,
                          int64_t *bad, int64_t *bad_value) {
  const int64_t n = idx->numel;
  b->owned = NULL;
  if (idx->dtype == LT_DTYPE_I64 && lt_is_contiguous(idx)) {
    b->v = (const int64_t *)idx->data;
  } else {
    b->owned = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!b->owned)
      return lt__err(LT_ERR_NOMEM, "%s: cannot allocate %lld indices", op, (long long)n);
    lt_tensor dst = *idx; /* a contiguous i64 stand-in for the iterator */
    dst.dtype = LT_DTYPE_I64;
    dst.data = b->owned;
    lt__contiguous_strides(idx->ndim, idx->shape, dst.stride);
    const lt_tensor *ops[2] = {&dst, idx};
    lt__iter it;
    lt__iter_init(&it, idx->ndim, idx->shape, 2, ops);
    lt_dtype sd = idx->dtype;
    lt__iter_run(&it, idx_convert_loop, &sd, false);
    b->v = b->owned;
  }
  /* (uint64_t) makes negatives huge: one compare per index. */
  const uint64_t lim = (uint64_t)size;
  const int64_t *v = b->v;
  *bad = -1;
  for (int64_t i = 0; i < n; i++) {
    if ((uint64_t)v[i] >= lim) {
      *bad = i;
      *bad_value = v[i];
      break;
    }
  }
  return LT_OK;
}

/* "[1,3]": the multi-index of flat row-major position flat in idx. */
static char *idx_pos(const lt_tensor *idx, int64_t flat, char *buf) {
  int64_t c[LT_MAX_DIMS];
  for (int d = idx->ndim - 1; d >= 0; d--) {
    c[d] = flat % idx->shape[d];
    flat /= idx->shape[d];
  }
  return lt_shape_str(idx->ndim, c, buf, LT__DESC_SIZE);
}
#define IDX_POS(idx, flat) idx_pos((idx), (flat), (char[LT__DESC_SIZE]){0})

/* "(valid 0..4)" or "(dim is empty: no index is valid)" */
static char *valid_str(int64_t size, char *buf) {
  if (size > 0)
    snprintf(buf, LT__DESC_SIZE, "(valid 0..%lld)", (long long)(size - 1));
  else
    snprintf(buf, LT__DESC_SIZE, "(size 0: no index is valid)");
  return buf;
}
#define VALID(size) valid_str((size), (char[LT__DESC_SIZE]){0})

/* Shape and strides of t seen with rank max(ndim, 1): a 0-d tensor is [1]
 * (PyTorch's ensure_nonempty_dim for gather/scatter). */
static int nonempty_rank(const lt_tensor *t) { return t->ndim > 0 ? t->ndim : 1; }
static int64_t nonempty_size(const lt_tensor *t, int d) { return t->ndim > 0 ? t->shape[d] : 1; }
static void nonempty_geom(const lt_tensor *t, int64_t *shape, int64_t *stride) {
  if (t->ndim == 0) {
    shape[0] = 1;
    stride[0] = 0;
    return;
  }
  for (int d = 0; d < t->ndim; d++) {
    shape[d] = t->shape[d];
    stride[d] = t->stride[d];
  }
}

/* ======================================================================== */
/* The gather/scatter kernel                                                */
/* ======================================================================== */

/* Positions (p, j, s) of an iteration shape, p over dims [0, dim), j along
 * dim, s over dims (dim, r). With v = ind[p, j, s]:
 *     copy:  y[p, j, s]  = x[p, v, s]
 *     add:   x[p, v, s] += y[p, j, s]
 * Strides in elements; x's stride at dim is the step per index value. ind's
 * strides may be 0 (index_select: one index per j). */
typedef struct gs_plan {
  lt_dtype dtype;
  bool add;
  int r, dim;
  int64_t shape[LT_MAX_DIMS];
  char *x;
  int64_t xst[LT_MAX_DIMS];
  char *y;
  int64_t yst[LT_MAX_DIMS];
  const int64_t *ind;
  int64_t ist[LT_MAX_DIMS];
  /* derived by gs_exec: the suffix dims, size-1 dims dropped and merged */
  int ns;
  int64_t sshape[LT_MAX_DIMS], sx[LT_MAX_DIMS], sy[LT_MAX_DIMS], si[LT_MAX_DIMS];
} gs_plan;

/* One run of n positions along the innermost suffix dim. */
typedef void (*gs_run_fn)(int64_t n, char *x, int64_t xdim, int64_t xs, char *y, int64_t ys,
                          const int64_t *ind, int64_t is);

#define GS_COPY(name, T)                                                               \
  static void name(int64_t n, char *xb, int64_t xdim, int64_t xs, char *yb, int64_t ys, \
                   const int64_t *ind, int64_t is) {                                   \
    const T *x = (const T *)xb;                                                        \
    T *y = (T *)yb;                                                                    \
    if (is == 0) {                                                                     \
      const T *xp = x + ind[0] * xdim;                                                 \
      if (xs == 1 && ys == 1)                                                          \
        memcpy(y, xp, (size_t)n * sizeof(T));                                          \
      else                                                                             \
        for (int64_t k = 0; k < n; k++) y[k * ys] = xp[k * xs];                        \
    } else {                                                                           \
      for (int64_t k = 0; k < n; k++) y[k * ys] = x[ind[k * is] * xdim + k * xs];      \
    }                                                                                  \
  }

#define GS_ADD(name, T, ACC)                                                           \
  static void name(int64_t n, char *xb, int64_t xdim, int64_t xs, char *yb, int64_t ys, \
                   const int64_t *ind, int64_t is) {                                   \
    T *x = (T *)xb;                                                                    \
    const T *y = (const T *)yb;                                                        \
    if (is == 0) {                                                                     \
      T *xp = x + ind[0] * xdim;                                                       \
      if (xs == 1 && ys == 1)                                                          \
        for (int64_t k = 0; k < n; k++) ACC(xp[k], y[k]);                              \
      else                                                                             \
        for (int64_t k = 0; k < n; k++) ACC(xp[k * xs], y[k * ys]);                    \
    } else {                                                                           \
      for (int64_t k = 0; k < n; k++) ACC(x[ind[k * is] * xdim + k * xs], y[k * ys]);  \
    }                                                                                  \
  }
#define GS_ACC_SUM(d, s) ((d) += (s))
#define GS_ACC_OR(d, s) ((d) = (uint8_t)((d) | (s))) /* bool: a + b != 0 */

GS_COPY(gs_copy_f32, float)
GS_COPY(gs_copy_f64, double)
GS_COPY(gs_copy_i32, int32_t)
GS_COPY(gs_copy_i64, int64_t)
GS_COPY(gs_copy_bool, uint8_t)
GS_ADD(gs_add_f32, float, GS_ACC_SUM)
GS_ADD(gs_add_f64, double, GS_ACC_SUM)
GS_ADD(gs_add_i32, int32_t, GS_ACC_SUM)
GS_ADD(gs_add_i64, int64_t, GS_ACC_SUM)
GS_ADD(gs_add_bool, uint8_t, GS_ACC_OR)

static gs_run_fn gs_pick(lt_dtype dt, bool add) {
  switch (dt) {
    case LT_DTYPE_F32: return add ? gs_add_f32 : gs_copy_f32;
    case LT_DTYPE_F64: return add ? gs_add_f64 : gs_copy_f64;
    case LT_DTYPE_I32: return add ? gs_add_i32 : gs_copy_i32;
    case LT_DTYPE_I64: return add ? gs_add_i64 : gs_copy_i64;
    case LT_DTYPE_BOOL: return add ? gs_add_bool : gs_copy_bool;
    default: break;
  }
  LT_CHECK(!"gs_pick: invalid dtype");
  return NULL;
}

/* Position p of the prefix, j in [j0, j1), flat suffix positions [s0, s1). */
static void gs_task(const gs_plan *pl, gs_run_fn run, int64_t p, int64_t j0, int64_t j1,
                    int64_t s0, int64_t s1) {
  const int64_t es = (int64_t)lt_dtype_size(pl->dtype);
  const int last = pl->ns - 1;
  const int64_t xdim = pl->xst[pl->dim];
  int64_t xo = 0, yo = 0, io = 0, rem = p;
  for (int d = pl->dim - 1; d >= 0; d--) {
    int64_t c = rem % pl->shape[d];
    rem /= pl->shape[d];
    xo += c * pl->xst[d];
    yo += c * pl->yst[d];
    io += c * pl->ist[d];
  }
  if (pl->ns == 1 && pl->sshape[0] == 1) {
    /* nothing after dim (gather/scatter along the last dim): one run along j.
     * In add mode several j may hit the same x element: the run is serial. */
    run(j1 - j0, pl->x + xo * es, xdim, 0, pl->y + (yo + j0 * pl->yst[pl->dim]) * es,
        pl->yst[pl->dim], pl->ind + io + j0 * pl->ist[pl->dim], pl->ist[pl->dim]);
    return;
  }
  for (int64_t j = j0; j < j1; j++) {
    int64_t c[LT_MAX_DIMS];
    int64_t xs = xo, ys = yo + j * pl->yst[pl->dim], is = io + j * pl->ist[pl->dim];
    rem = s0;
    for (int d = last; d >= 0; d--) {
      c[d] = rem % pl->sshape[d];
      rem /= pl->sshape[d];
      xs += c[d] * pl->sx[d];
      ys += c[d] * pl->sy[d];
      is += c[d] * pl->si[d];
    }
    for (int64_t s = s0; s < s1;) {
      int64_t n = pl->sshape[last] - c[last];
      if (n > s1 - s) n = s1 - s;
      run(n, pl->x + xs * es, xdim, pl->sx[last], pl->y + ys * es, pl->sy[last], pl->ind + is,
          pl->si[last]);
      s += n;
      if (s >= s1) break;
      /* the run ended at the end of the innermost dim: carry */
      c[last] += n;
      xs += n * pl->sx[last];
      ys += n * pl->sy[last];
      is += n * pl->si[last];
      for (int d = last; d > 0 && c[d] == pl->sshape[d]; d--) {
        xs += pl->sx[d - 1] - c[d] * pl->sx[d];
        ys += pl->sy[d - 1] - c[d] * pl->sy[d];
        is += pl->si[d - 1] - c[d] * pl->si[d];
        c[d] = 0;
        c[d - 1]++;
      }
    }
  }
}

/* Runs the plan. Work is cut into tasks (p, block of j, block of s) handed
 * out statically; in add mode j is never cut, so each x element is updated
 * by one thread in index order (deterministic, no races on duplicates). */
static void gs_exec(gs_plan *pl) {
  const int dim = pl->dim;
  int64_t P = 1, S = 1;
  for (int d = 0; d < dim; d++) P *= pl->shape[d];
  const int64_t J = pl->shape[dim];
  for (int d = dim + 1; d < pl->r; d++) S *= pl->shape[d];
  if (P == 0 || J == 0 || S == 0) return;

  /* suffix dims: drop size 1, merge (outer, inner) pairs contiguous for all three */
  int ns = 0;
  for (int d = dim + 1; d < pl->r; d++) {
    if (pl->shape[d] == 1) continue;
    if (ns > 0 && pl->sx[ns - 1] == pl->xst[d] * pl->shape[d] &&
        pl->sy[ns - 1] == pl->yst[d] * pl->shape[d] && pl->si[ns - 1] == pl->ist[d] * pl->shape[d]) {
      pl->sshape[ns - 1] *= pl->shape[d];
      pl->sx[ns - 1] = pl->xst[d];
      pl->sy[ns - 1] = pl->yst[d];
      pl->si[ns - 1] = pl->ist[d];
    } else {
      pl->sshape[ns] = pl->shape[d];
      pl->sx[ns] = pl->xst[d];
      pl->sy[ns] = pl->yst[d];
      pl->si[ns] = pl->ist[d];
      ns++;
    }
  }
  if (ns == 0) {
    pl->sshape[0] = 1;
    pl->sx[0] = pl->sy[0] = pl->si[0] = 0;
    ns = 1;
  }
  pl->ns = ns;
  gs_run_fn run = gs_pick(pl->dtype, pl->add);

  const int64_t total = P * J * S;
  const int T = total >= LT__PARALLEL_MIN ? omp_get_max_threads() : 1;
  int64_t jb = 1, sb = 1;
  if (T > 1) {
    const int64_t want = 4 * (int64_t)T;
    if (P < want && !pl->add) {
      jb = (want + P - 1) / P;
      if (jb > J) jb = J;
    }
    if (P * jb < want) {
      sb = (want + P * jb - 1) / (P * jb);
      int64_t max_sb = (S + 255) / 256; /* blocks of at least 256 elements */
      if (sb > max_sb) sb = max_sb;
      if (sb < 1) sb = 1;
    }
  }
  const int64_t ntasks = P * jb * sb;
  const gs_plan *cpl = pl;
#pragma omp parallel num_threads(T) if (T > 1)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t t0 = ntasks * id / nt, t1 = ntasks * (id + 1) / nt;
    for (int64_t t = t0; t < t1; t++) {
      const int64_t p = t / (jb * sb), jbi = (t / sb) % jb, sbi = t % sb;
      gs_task(cpl, run, p, J * jbi / jb, J * (jbi + 1) / jb, S * sbi / sb, S * (sbi + 1) / sb);
    }
  }
}

/* Builds the plan and runs it. x and y strides have rank r (nonempty_geom).
 * ind is contiguous over shape, or, in select_mode, a 1-d list of J indices
 * shared by all p, s. */
static void gs_run(lt_dtype dt, bool add, int r, int dim, const int64_t *shape, void *x,
                   const int64_t *xst, void *y, const int64_t *yst, const int64_t *ind,
                   bool select_mode) {
  gs_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.dtype = dt;
  pl.add = add;
  pl.r = r;
  pl.dim = dim;
  pl.x = x;
  pl.y = y;
  pl.ind = ind;
  for (int d = 0; d < r; d++) {
    pl.shape[d] = shape[d];
    pl.xst[d] = xst[d];
    pl.yst[d] = yst[d];
  }
  if (select_mode)
    pl.ist[dim] = 1;
  else
    lt__contiguous_strides(r, shape, pl.ist);
  gs_exec(&pl);
}

/* gs_run on tensors seen with rank max(ndim, 1), x and y of one dtype. With
 * index NULL (index_select) the positions are y's; otherwise (gather and
 * scatter) they are index's, and y may be larger than index. */
static void gs_run_tensors(bool add, int dim, const lt_tensor *x, const lt_tensor *y,
                           const idx_buf *ib, const lt_tensor *index) {
  int64_t xsh[LT_MAX_DIMS], xst[LT_MAX_DIMS], ysh[LT_MAX_DIMS], yst[LT_MAX_DIMS];
  int64_t ish[LT_MAX_DIMS], ist[LT_MAX_DIMS];
  nonempty_geom(x, xsh, xst);
  nonempty_geom(y, ysh, yst);
  if (index) nonempty_geom(index, ish, ist);
  gs_run(x->dtype, add, nonempty_rank(x), dim, index ? ish : ysh, x->data, xst, y->data, yst,
         ib->v, index == NULL);
}

/* ======================================================================== */
/* Strided copies (cat, stack, scatter_add's copy of x)                     */
/* ======================================================================== */

typedef struct copy_ctx {
  lt_dtype dd, sd;
} copy_ctx;

#define COPY_FIXED(n, d, ds, s, ss, SZ)                                               \
  for (int64_t k = 0; k < (n); k++) memcpy((d) + k * (ds), (s) + k * (ss), SZ)

static void copy_loop(int64_t n, char *const *p, const int64_t *st, void *ctx) {
  const copy_ctx *c = ctx;
  char *d = p[0];
  const char *s = p[1];
  if (c->dd == c->sd) {
    const int64_t es = (int64_t)lt_dtype_size(c->dd);
    if (st[0] == es && st[1] == es) {
      memcpy(d, s, (size_t)(n * es));
    } else if (es == 4) {
      COPY_FIXED(n, d, st[0], s, st[1], 4);
    } else if (es == 8) {
      COPY_FIXED(n, d, st[0], s, st[1], 8);
    } else {
      COPY_FIXED(n, d, st[0], s, st[1], 1);
    }
  } else { /* mixed dtypes (cat/stack promotion): rare, element by element */
    for (int64_t k = 0; k < n; k++) lt__store(d + k * st[0], c->dd, lt__load(s + k * st[1], c->sd));
  }
}

/* dst[...] = src (same shape), converting dtype. dst is a stand-in view. */
static void copy_into(const lt_tensor *dst, const lt_tensor *src) {
  const lt_tensor *ops[2] = {dst, src};
  copy_ctx c = {dst->dtype, src->dtype};
  lt__iter it;
  lt__iter_init(&it, dst->ndim, dst->shape, 2, ops);
  lt__iter_run(&it, copy_loop, &c, true);
}

/* n elements of size es from src (element stride ss) to contiguous dst. */
static void copy_row(char *dst, const char *src, int64_t n, int64_t ss, int64_t es) {
  if (n <= 0) return;
  if (ss == 1) {
    memcpy(dst, src, (size_t)(n * es));
  } else if (es == 4) {
    COPY_FIXED(n, dst, 4, src, ss * 4, 4);
  } else if (es == 8) {
    COPY_FIXED(n, dst, 8, src, ss * 8, 8);
  } else {
    COPY_FIXED(n, dst, 1, src, ss, 1);
  }
}

typedef struct dim_aux {
  int dim;
} dim_aux;

/* out when its autograd record succeeded (s == LT_OK); otherwise out is freed
 * and NULL returned, the record's error set. */
static lt_tensor *recorded(lt_tensor *out, lt_status s) {
  if (s == LT_OK) return out;
  lt_tensor_free(out);
  return NULL;
}

/* idx_load for an op that indexes dim d of x: a value outside the dim is an
 * LT_ERR_INDEX naming its position ("gather: index[1,3] = 7 is out of range
 * for dim 1 of x [4,5] f32 (valid 0..4)"), and ib then holds nothing. */
static lt_status idx_load_dim(const char *op, const lt_tensor *index, const lt_tensor *x, int d,
                              idx_buf *ib) {
  const int64_t size = nonempty_size(x, d);
  int64_t bad, badv;
  lt_status s = idx_load(op, index, size, ib, &bad, &badv);
  if (s != LT_OK || bad < 0) return s;
  idx_release(ib);
  return lt__err(LT_ERR_INDEX, "%s: index%s = %lld is out of range for dim %d of x %s %s", op,
                 IDX_POS(index, bad), (long long)badv, d, LT__D(x), VALID(size));
}

/* idx_load for a backward: the forward checked every value and the engine
 * checks that the saved index was not written since, so a bad value here is
 * a broken invariant. Only fails on NOMEM. */
static lt_status idx_load_saved(const char *op, const lt_tensor *index, int64_t size,
                                idx_buf *ib) {
  int64_t bad, badv;
  lt_status s = idx_load(op, index, size, ib, &bad, &badv);
  if (s == LT_OK) LT_CHECK(bad < 0);
  return s;
}

/* ======================================================================== */
/* index_select and gather                                                  */
/* ======================================================================== */

/* The checks index_select, gather and scatter_add open with: x and index
 * given, dim valid for x (wrapped into *d), index i32 or i64. */
static lt_status index_args(const char *op, const lt_tensor *x, int dim, const lt_tensor *index,
                            int *d) {
  if (!x) return lt__err_null(op, "x");
  if (!index) return lt__err_null(op, "index");
  lt_status s = lt__wrap_dim(op, dim, x->ndim, d);
  return s != LT_OK ? s : idx_check_dtype(op, "index", index);
}

/* What index_select and gather share once their arguments are checked:
 * out [oshape] = x indexed along d by index (select: index is a 1-d list
 * along d; else index has out's shape), recorded as id with index saved. */
static lt_tensor *index_forward(const char *op, lt__op_id id, const lt_tensor *x, int d,
                                const lt_tensor *index, int ond, const int64_t *oshape,
                                bool select) {
  idx_buf ib;
  if (idx_load_dim(op, index, x, d, &ib) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(x->dtype, ond, oshape);
  if (out) gs_run_tensors(false, d, x, out, &ib, select ? NULL : index);
  idx_release(&ib);
  if (!out) return NULL;
  dim_aux aux = {d};
  return recorded(out, lt__record(out, id, 1, (const lt_tensor *[]){x}, 1,
                                  (const lt_tensor *[]){index}, &aux, sizeof aux));
}

/* Their backward: dx = zeros like x, then dout added at the indexed places
 * (index_add for index_select, scatter_add for gather). */
static lt_status index_backward(const char *op, const lt_node *node, const lt_tensor *gout,
                                lt_tensor **gin, bool select) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  dim_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  const lt__edge *e = &node->in[0];
  const lt_tensor *index = node->saved[0];
  lt_tensor *gx = lt_zeros(gout->dtype, e->ndim, e->shape);
  if (!gx) return lt_last_status();
  idx_buf ib;
  lt_status s = idx_load_saved(op, index, nonempty_size(gx, aux.dim), &ib);
  if (s != LT_OK) {
    lt_tensor_free(gx);
    return s;
  }
  gs_run_tensors(true, aux.dim, gx, gout, &ib, select ? NULL : index);
  idx_release(&ib);
  gin[0] = gx;
  return LT_OK;
}

/* x [..., N, ...] (dim), index [n] -> out [..., n, ...]:
 *     out[..., j, ...] = x[..., index[j], ...] */
lt_tensor *lt_index_select(const lt_tensor *x, int dim, const lt_tensor *index) {
  static const char *op = "index_select";
  int d;
  if (index_args(op, x, dim, index, &d) != LT_OK) return NULL;
  if (index->ndim > 1) {
    lt__err(LT_ERR_SHAPE, "index_select: x is %s, index is %s: index must be 1-d (or 0-d)", LT__D(x),
            LT__D(index));
    return NULL;
  }
  if (x->ndim == 0 && index->numel != 1) {
    lt__err(LT_ERR_SHAPE, "index_select: x is %s, index is %s: a 0-d x takes exactly one index",
            LT__D(x), LT__D(index));
    return NULL;
  }
  int64_t oshape[LT_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) oshape[i] = x->shape[i];
  if (x->ndim > 0) oshape[d] = index->numel;
  return index_forward(op, LT__OP_index_select, x, d, index, x->ndim, oshape, true);
}

/* dx = zeros like x; dx[..., index[j], ...] += dout[..., j, ...] (index_add). */
lt_status lt__bw_index_select(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return index_backward("index_select backward", node, gout, gin, true);
}

/* PyTorch's shape rules: same rank (0-d counts as 1-d); index.size(i) <=
 * a.size(i) for every i, except i == dim when skip_dim. */
static lt_status check_index_shape(const char *op, const char *an, const lt_tensor *a,
                                   const lt_tensor *index, int dim, bool skip_dim) {
  if (nonempty_rank(a) != nonempty_rank(index))
    return lt__err(LT_ERR_SHAPE, "%s: %s is %s, index is %s: index must have the same rank as %s",
                   op, an, LT__D(a), LT__D(index), an);
  for (int i = 0; i < nonempty_rank(a); i++) {
    if (skip_dim && i == dim) continue;
    if (nonempty_size(index, i) > nonempty_size(a, i))
      return lt__err(LT_ERR_SHAPE, "%s: %s is %s, index is %s: index size %lld > %s size %lld at dim %d",
                     op, an, LT__D(a), LT__D(index), (long long)nonempty_size(index, i), an,
                     (long long)nonempty_size(a, i), i);
  }
  return LT_OK;
}

/* out[i][j] = x[index[i][j]][j] (dim 0), out has index's shape. */
lt_tensor *lt_gather(const lt_tensor *x, int dim, const lt_tensor *index) {
  static const char *op = "gather";
  int d;
  if (index_args(op, x, dim, index, &d) != LT_OK) return NULL;
  if (check_index_shape(op, "x", x, index, d, true) != LT_OK) return NULL;
  return index_forward(op, LT__OP_gather, x, d, index, index->ndim, index->shape, false);
}

/* dx = zeros like x; dx[index[i][j]][j] += dout[i][j] (scatter_add). */
lt_status lt__bw_gather(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return index_backward("gather backward", node, gout, gin, false);
}

/* ======================================================================== */
/* scatter_add                                                              */
/* ======================================================================== */

/* out = x; out[index[i][j]][j] += src[i][j] (dim 0). */
lt_tensor *lt_scatter_add(const lt_tensor *x, int dim, const lt_tensor *index, const lt_tensor *src) {
  static const char *op = "scatter_add";
  int d;
  if (index_args(op, x, dim, index, &d) != LT_OK) return NULL;
  if (!src) return lt__err_null(op, "src"), NULL;
  if (src->dtype != x->dtype) {
    lt__err(LT_ERR_DTYPE, "scatter_add: x is %s, src is %s: src must have x's dtype", LT__D(x),
            LT__D(src));
    return NULL;
  }
  if (check_index_shape(op, "x", x, index, d, true) != LT_OK) return NULL;
  if (check_index_shape(op, "src", src, index, d, false) != LT_OK) return NULL;
  idx_buf ib;
  if (idx_load_dim(op, index, x, d, &ib) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(x->dtype, x->ndim, x->shape);
  if (out) {
    copy_into(out, x);
    gs_run_tensors(true, d, out, src, &ib, index);
  }
  idx_release(&ib);
  if (!out) return NULL;
  dim_aux aux = {d};
  return recorded(out, lt__record(out, LT__OP_scatter_add, 2, (const lt_tensor *[]){x, src}, 1,
                                  (const lt_tensor *[]){index}, &aux, sizeof aux));
}

/* dx = dout; dsrc[i][j] = dout[index[i][j]][j] where index reaches (gather),
 * 0 where src is larger than index. */
lt_status lt__bw_scatter_add(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  dim_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  if (lt__needs_input_grad(node, 0)) {
    gin[0] = lt__view_of(gout, gout->ndim, gout->shape, gout->stride, gout->offset);
    if (!gin[0]) return lt_last_status();
  }
  if (!lt__needs_input_grad(node, 1)) return LT_OK;
  const lt__edge *e = &node->in[1];
  const lt_tensor *index = node->saved[0];
  bool same = e->ndim == index->ndim;
  for (int i = 0; same && i < e->ndim; i++) same = e->shape[i] == index->shape[i];
  lt_tensor *gs = same ? lt_empty(gout->dtype, e->ndim, e->shape)
                       : lt_zeros(gout->dtype, e->ndim, e->shape);
  if (!gs) return lt_last_status();
  idx_buf ib;
  lt_status s = idx_load_saved("scatter_add backward", index, nonempty_size(gout, aux.dim), &ib);
  if (s != LT_OK) {
    lt_tensor_free(gs);
    return s;
  }
  gs_run_tensors(false, aux.dim, gout, gs, &ib, index);
  idx_release(&ib);
  gin[1] = gs;
  return LT_OK;
}

/* ======================================================================== */
/* embedding                                                                */
/* ======================================================================== */

/* table [V, D], ids [*] -> out [*, D]: out[i, :] = table[ids[i], :]. Rows are
 * copied with memcpy when table rows are contiguous; threads split the ids. */
lt_tensor *lt_embedding(const lt_tensor *table, const lt_tensor *ids) {
  static const char *op = "embedding";
  if (!table) return lt__err_null(op, "table"), NULL;
  if (!ids) return lt__err_null(op, "ids"), NULL;
  if (table->ndim != 2) {
    lt__err(LT_ERR_SHAPE, "embedding: table is %s: the table must be 2-d [V, D]", LT__D(table));
    return NULL;
  }
  if (idx_check_dtype(op, "ids", ids) != LT_OK) return NULL;
  if (ids->ndim + 1 > LT_MAX_DIMS) {
    lt__err(LT_ERR_INVALID, "embedding: ids is %s: the output [*ids, D] would have more than %d dims",
            LT__D(ids), LT_MAX_DIMS);
    return NULL;
  }
  const int64_t V = table->shape[0], D = table->shape[1], N = ids->numel;
  int64_t oshape[LT_MAX_DIMS];
  for (int i = 0; i < ids->ndim; i++) oshape[i] = ids->shape[i];
  oshape[ids->ndim] = D;
  int64_t onumel;
  if (lt__shape_numel(op, ids->ndim + 1, oshape, &onumel) != LT_OK) return NULL;
  idx_buf ib;
  int64_t bad, badv;
  if (idx_load(op, ids, V, &ib, &bad, &badv) != LT_OK) return NULL;
  if (bad >= 0) {
    lt__err(LT_ERR_INDEX, "embedding: ids%s = %lld is out of range for a table of %lld rows %s",
            IDX_POS(ids, bad), (long long)badv, (long long)V, LT__D(table));
    idx_release(&ib);
    return NULL;
  }
  lt_tensor *out = lt_empty(table->dtype, ids->ndim + 1, oshape);
  const lt_qmatrix *q = lt_tensor_qmatrix(table);
  if (out && q) { /* quantized rows (lt_tensor_quantize_): dequantized, not recorded */
    for (int64_t i = 0; i < N; i++) LT_CHECK(lt_qmatrix_dequantize_rows(q, ib.v[i], 1, (float *)out->data + i * D) == LT_OK);
    idx_release(&ib);
    return out;
  }
  if (out)
    gs_run(table->dtype, false, 2, 0, (const int64_t[]){N, D}, table->data, table->stride,
           out->data, (const int64_t[]){D, 1}, ib.v, true);
  idx_release(&ib);
  if (!out) return NULL;
  return recorded(out, lt__record(out, LT__OP_embedding, 1, (const lt_tensor *[]){table}, 1,
                                  (const lt_tensor *[]){ids}, NULL, 0));
}

/* dtable = zeros [V, D]; dtable[ids[i], :] += dout[i, :] for i in order.
 * Threads split the D columns, never the ids: duplicate ids accumulate
 * deterministically without atomics. */
lt_status lt__bw_embedding(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const lt__edge *e = &node->in[0];
  const lt_tensor *ids = node->saved[0];
  const int64_t V = e->shape[0], D = e->shape[1], N = ids->numel;
  lt_tensor *gt = lt_zeros(gout->dtype, 2, e->shape);
  if (!gt) return lt_last_status();
  lt_tensor *g2 = lt_reshape(gout, 2, (const int64_t[]){N, D}); /* a view unless gout is odd */
  idx_buf ib;
  lt_status s = g2 ? idx_load_saved("embedding backward", ids, V, &ib) : lt_last_status();
  if (s != LT_OK) {
    lt_tensor_free(g2);
    lt_tensor_free(gt);
    return s;
  }
  gs_run(gout->dtype, true, 2, 0, (const int64_t[]){N, D}, gt->data, (const int64_t[]){D, 1},
         g2->data, g2->stride, ib.v, true);
  idx_release(&ib);
  lt_tensor_free(g2);
  gin[0] = gt;
  return LT_OK;
}

/* ======================================================================== */
/* tril / triu                                                              */
/* ======================================================================== */

typedef struct tri_aux {
  int64_t k;
} tri_aux;

/* out[..., i, j] = x[..., i, j] if j - i <= k (tril) / j - i >= k (triu), else 0. */
static lt_tensor *tri(const char *op, const lt_tensor *x, int64_t k, bool lower) {
  if (!x) return lt__err_null(op, "x"), NULL;
  if (x->ndim < 2) {
    lt__err(LT_ERR_SHAPE, "%s: x is %s: x must have at least 2 dims", op, LT__D(x));
    return NULL;
  }
  lt_tensor *out = lt_empty(x->dtype, x->ndim, x->shape);
  if (!out) return NULL;
  const int nd = x->ndim;
  const int64_t R = x->shape[nd - 2], C = x->shape[nd - 1];
  const int64_t es = (int64_t)lt_dtype_size(x->dtype);
  const int64_t rows = C > 0 ? x->numel / C : 0;
  const int64_t lim = R + C; /* |k| beyond this changes nothing; avoids overflow */
  const int64_t kk = k < -lim ? -lim : k > lim ? lim : k;
  char *const odata = out->data;
  const char *const xdata = x->data;
#pragma omp parallel for schedule(static) if (x->numel >= LT__PARALLEL_MIN)
  for (int64_t row = 0; row < rows; row++) {
    const int64_t i = row % R;
    int64_t so = i * x->stride[nd - 2], rem = row / R;
    for (int d = nd - 3; d >= 0; d--) {
      so += (rem % x->shape[d]) * x->stride[d];
      rem /= x->shape[d];
    }
    int64_t lo, hi;
    if (lower) {
      lo = 0;
      hi = i + kk + 1;
    } else {
      lo = i + kk;
      hi = C;
    }
    lo = lo < 0 ? 0 : lo > C ? C : lo;
    hi = hi < lo ? lo : hi > C ? C : hi;
    char *dst = odata + row * C * es;
    memset(dst, 0, (size_t)(lo * es));
    copy_row(dst + lo * es, xdata + (so + lo * x->stride[nd - 1]) * es, hi - lo, x->stride[nd - 1],
             es);
    memset(dst + hi * es, 0, (size_t)((C - hi) * es));
  }
  return out;
}

static lt_tensor *tri_forward(const char *op, lt__op_id id, const lt_tensor *x, int64_t k,
                              bool lower) {
  lt_tensor *out = tri(op, x, k, lower);
  if (!out) return NULL;
  tri_aux aux = {k};
  return recorded(out, lt__record(out, id, 1, (const lt_tensor *[]){x}, 0, NULL, &aux, sizeof aux));
}

/* dx = tril(dout, k) / triu(dout, k): the same mask. */
static lt_status tri_backward(const char *op, const lt_node *node, const lt_tensor *gout,
                              lt_tensor **gin, bool lower) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  tri_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  gin[0] = tri(op, gout, aux.k, lower);
  return gin[0] ? LT_OK : lt_last_status();
}

lt_tensor *lt_tril(const lt_tensor *x, int64_t k) { return tri_forward("tril", LT__OP_tril, x, k, true); }
lt_tensor *lt_triu(const lt_tensor *x, int64_t k) { return tri_forward("triu", LT__OP_triu, x, k, false); }
lt_status lt__bw_tril(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return tri_backward("tril backward", node, gout, gin, true);
}
lt_status lt__bw_triu(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  return tri_backward("triu backward", node, gout, gin, false);
}

/* ======================================================================== */
/* one_hot (not differentiable)                                             */
/* ======================================================================== */

/* ids [*] -> out [*, C] i64: out[i, ids[i]] = 1. num_classes < 0: C = max + 1. */
lt_tensor *lt_one_hot(const lt_tensor *ids, int64_t num_classes) {
  static const char *op = "one_hot";
  if (!ids) return lt__err_null(op, "ids"), NULL;
  if (idx_check_dtype(op, "ids", ids) != LT_OK) return NULL;
  if (ids->ndim + 1 > LT_MAX_DIMS) {
    lt__err(LT_ERR_INVALID, "one_hot: ids is %s: the output would have more than %d dims", LT__D(ids),
            LT_MAX_DIMS);
    return NULL;
  }
  if (num_classes < 0 && ids->numel == 0) {
    lt__err(LT_ERR_INVALID,
            "one_hot: ids is %s: cannot infer the number of classes from empty ids (pass num_classes)",
            LT__D(ids));
    return NULL;
  }
  idx_buf ib;
  int64_t bad, badv;
  if (idx_load(op, ids, num_classes < 0 ? INT64_MAX : num_classes, &ib, &bad, &badv) != LT_OK)
    return NULL;
  if (bad >= 0) {
    if (badv < 0)
      lt__err(LT_ERR_INDEX, "one_hot: ids%s = %lld is negative: classes must be >= 0 (ids %s)",
              IDX_POS(ids, bad), (long long)badv, LT__D(ids));
    else
      lt__err(LT_ERR_INDEX, "one_hot: ids%s = %lld is out of range for %lld classes %s (ids %s)",
              IDX_POS(ids, bad), (long long)badv, (long long)num_classes, VALID(num_classes),
              LT__D(ids));
    idx_release(&ib);
    return NULL;
  }
  const int64_t N = ids->numel;
  int64_t C = num_classes;
  if (C < 0) {
    int64_t mx = 0;
    for (int64_t i = 0; i < N; i++) mx = ib.v[i] > mx ? ib.v[i] : mx;
    C = mx + 1;
  }
  int64_t oshape[LT_MAX_DIMS];
  for (int i = 0; i < ids->ndim; i++) oshape[i] = ids->shape[i];
  oshape[ids->ndim] = C;
  int64_t onumel;
  lt_tensor *out = NULL;
  if (lt__shape_numel(op, ids->ndim + 1, oshape, &onumel) == LT_OK)
    out = lt_zeros(LT_DTYPE_I64, ids->ndim + 1, oshape);
  if (out) {
    int64_t *o = out->data;
    const int64_t *v = ib.v;
#pragma omp parallel for schedule(static) if (onumel >= LT__PARALLEL_MIN)
    for (int64_t i = 0; i < N; i++) o[i * C + v[i]] = 1;
  }
  idx_release(&ib);
  return out;
}

/* ======================================================================== */
/* cat and stack                                                            */
/* ======================================================================== */

static char *arg_name(int i, char *buf) {
  snprintf(buf, 32, "xs[%d]", i);
  return buf;
}

static lt_status check_list(const char *op, int n, lt_tensor *const *xs) {
  if (!xs) return lt__err_null(op, "xs");
  if (n < 1) return lt__err(LT_ERR_INVALID, "%s: expected at least one tensor, got n = %d", op, n);
  for (int i = 0; i < n; i++)
    if (!xs[i]) return lt__err_null(op, arg_name(i, (char[32]){0}));
  return LT_OK;
}

/* cat and stack record their n inputs and the dim (nothing saved). */
static lt_tensor *record_list(lt_tensor *out, lt__op_id id, int n, lt_tensor *const *xs, int d) {
  dim_aux aux = {d};
  return recorded(out, lt__record(out, id, n, (const lt_tensor *const *)xs, 0, NULL, &aux, sizeof aux));
}

/* torch.cat's legacy rule: a 1-d tensor of size 0 may join tensors of any rank. */
static bool cat_skippable(const lt_tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* out [..., sum n_i, ...] = [xs[0] | xs[1] | ...] along dim. */
lt_tensor *lt_cat(int n, lt_tensor *const *xs, int dim) {
  static const char *op = "cat";
  if (check_list(op, n, xs) != LT_OK) return NULL;
  int ref = 0;
  while (ref < n && cat_skippable(xs[ref])) ref++;
  if (ref == n) ref = 0; /* all are [0]: an ordinary 1-d cat */
  const lt_tensor *rt = xs[ref];
  lt_dtype dt = xs[0]->dtype;
  for (int i = 0; i < n; i++) {
    dt = lt__promote(dt, xs[i]->dtype);
    if (xs[i]->ndim == 0) {
      lt__err(LT_ERR_SHAPE,
              "cat: xs[%d] is %s: 0-d tensors cannot be concatenated (unsqueeze them or use stack)", i,
              LT__D(xs[i]));
      return NULL;
    }
  }
  int d;
  if (lt__wrap_dim(op, dim, rt->ndim, &d) != LT_OK) return NULL;
  int64_t oshape[LT_MAX_DIMS];
  for (int k = 0; k < rt->ndim; k++) oshape[k] = rt->shape[k];
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    const lt_tensor *t = xs[i];
    if (i != ref && cat_skippable(t)) continue;
    if (t->ndim != rt->ndim) {
      lt__err(LT_ERR_SHAPE,
              "cat: xs[%d] is %s but xs[%d] is %s: tensors must have the same rank (or be 1-d and empty)",
              ref, LT__D(rt), i, LT__D(t));
      return NULL;
    }
    for (int k = 0; k < t->ndim; k++) {
      if (k != d && t->shape[k] != rt->shape[k]) {
        lt__err(LT_ERR_SHAPE,
                "cat: xs[%d] is %s but xs[%d] is %s: sizes must match except in dim %d (dim %d: %lld != %lld)",
                ref, LT__D(rt), i, LT__D(t), d, k, (long long)rt->shape[k], (long long)t->shape[k]);
        return NULL;
      }
    }
    if (t->shape[d] > INT64_MAX - total) {
      lt__err(LT_ERR_OVERFLOW, "cat: the total size along dim %d overflows", d);
      return NULL;
    }
    total += t->shape[d];
  }
  oshape[d] = total;
  int64_t onumel;
  if (lt__shape_numel(op, rt->ndim, oshape, &onumel) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(dt, rt->ndim, oshape);
  if (!out) return NULL;
  const int64_t es = (int64_t)lt_dtype_size(dt);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const lt_tensor *t = xs[i];
    if ((i != ref && cat_skippable(t)) || t->shape[d] == 0) continue;
    lt_tensor v = *out; /* stand-in view of the slice [off, off + n_i) */
    v.shape[d] = t->shape[d];
    v.numel = t->numel;
    v.data = (char *)out->data + off * out->stride[d] * es;
    copy_into(&v, t);
    off += t->shape[d];
  }
  return record_list(out, LT__OP_cat, n, xs, d);
}

/* dxs[i] = narrow(dout, dim, offset_i, n_i); zeros for skipped [0] inputs. */
lt_status lt__bw_cat(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  dim_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  const int d = aux.dim;
  int64_t off = 0;
  for (int i = 0; i < node->nin; i++) {
    const lt__edge *e = &node->in[i];
    const bool skipped = e->ndim != gout->ndim;
    const int64_t len = skipped ? 0 : e->shape[d];
    if (lt__needs_input_grad(node, i)) {
      if (skipped || len == 0)
        gin[i] = lt_zeros(gout->dtype, e->ndim, e->shape);
      else
        gin[i] = lt_narrow(gout, d, off, len);
      if (!gin[i]) return lt_last_status();
    }
    off += len;
  }
  return LT_OK;
}

/* out [..., n, ...] (new dim at dim): out[..., i, ...] = xs[i]. */
lt_tensor *lt_stack(int n, lt_tensor *const *xs, int dim) {
  static const char *op = "stack";
  if (check_list(op, n, xs) != LT_OK) return NULL;
  const lt_tensor *rt = xs[0];
  lt_dtype dt = rt->dtype;
  for (int i = 1; i < n; i++) {
    if (!lt__same_shape(xs[i], rt)) {
      lt__err(LT_ERR_SHAPE, "stack: xs[0] is %s but xs[%d] is %s: all tensors must have the same shape",
              LT__D(rt), i, LT__D(xs[i]));
      return NULL;
    }
    dt = lt__promote(dt, xs[i]->dtype);
  }
  const int nd = rt->ndim;
  if (nd + 1 > LT_MAX_DIMS) {
    lt__err(LT_ERR_INVALID, "stack: xs[0] is %s: the output would have more than %d dims", LT__D(rt),
            LT_MAX_DIMS);
    return NULL;
  }
  int d;
  if (lt__wrap_dim(op, dim, nd + 1, &d) != LT_OK) return NULL;
  int64_t oshape[LT_MAX_DIMS];
  for (int k = 0, j = 0; k < nd + 1; k++) oshape[k] = k == d ? n : rt->shape[j++];
  int64_t onumel;
  if (lt__shape_numel(op, nd + 1, oshape, &onumel) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(dt, nd + 1, oshape);
  if (!out) return NULL;
  const int64_t es = (int64_t)lt_dtype_size(dt);
  if (rt->numel > 0) {
    for (int i = 0; i < n; i++) {
      lt_tensor v = *out; /* stand-in view of out[..., i, ...] */
      v.ndim = nd;
      for (int k = 0, j = 0; k < nd + 1; k++) {
        if (k == d) continue;
        v.shape[j] = out->shape[k];
        v.stride[j] = out->stride[k];
        j++;
      }
      v.shape[nd] = 0;
      v.stride[nd] = 0;
      v.numel = rt->numel;
      v.data = (char *)out->data + (int64_t)i * out->stride[d] * es;
      copy_into(&v, xs[i]);
    }
  }
  return record_list(out, LT__OP_stack, n, xs, d);
}

/* dxs[i] = select(dout, dim, i). */
lt_status lt__bw_stack(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  dim_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  for (int i = 0; i < node->nin; i++) {
    if (!lt__needs_input_grad(node, i)) continue;
    gin[i] = lt_select(gout, aux.dim, i);
    if (!gin[i]) return lt_last_status();
  }
  return LT_OK;
}

/* ======================================================================== */
/* split and chunk: lt_narrow views (recorded by view.c: no backward here)  */
/* ======================================================================== */

/* count views of len `piece` along d (the last one shorter, or all of size 0
 * when the dim is empty), into out only if all succeed. */
static lt_status split_views(const char *op, const lt_tensor *x, int d, int64_t piece,
                             int64_t count, lt_tensor **out, int capacity, int *n_out) {
  if (count > capacity)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: splitting dim %d gives %lld views but capacity is %d",
                   op, LT__D(x), d, (long long)count, capacity);
  lt_tensor **tmp = malloc(sizeof(lt_tensor *) * (size_t)(count > 0 ? count : 1));
  if (!tmp) return lt__err(LT_ERR_NOMEM, "%s: cannot allocate %lld views", op, (long long)count);
  const int64_t size = x->shape[d];
  for (int64_t i = 0; i < count; i++) {
    int64_t start = i * piece < size ? i * piece : size;
    int64_t len = size - start < piece ? size - start : piece;
    tmp[i] = lt_narrow(x, d, start, len);
    if (!tmp[i]) {
      lt_status s = lt_last_status();
      for (int64_t j = 0; j < i; j++) lt_tensor_free(tmp[j]);
      free(tmp);
      return s;
    }
  }
  for (int64_t i = 0; i < count; i++) out[i] = tmp[i];
  *n_out = (int)count;
  free(tmp);
  return LT_OK;
}

static lt_status split_args(const char *op, const lt_tensor *x, int dim, lt_tensor **out,
                            int *n_out, int *d) {
  if (!x) return lt__err_null(op, "x");
  if (!out) return lt__err_null(op, "out");
  if (!n_out) return lt__err_null(op, "n_out");
  if (x->ndim == 0) return lt__err(LT_ERR_SHAPE, "%s: x is %s: cannot split a 0-d tensor", op, LT__D(x));
  return lt__wrap_dim(op, dim, x->ndim, d);
}

lt_status lt_split(const lt_tensor *x, int64_t split_size, int dim, lt_tensor **out, int capacity,
                   int *n_out) {
  static const char *op = "split";
  int d;
  lt_status s = split_args(op, x, dim, out, n_out, &d);
  if (s != LT_OK) return s;
  const int64_t size = x->shape[d];
  if (split_size < 0 || (split_size == 0 && size > 0))
    return lt__err(LT_ERR_INVALID, "split: x is %s: split_size %lld along dim %d must be positive", LT__D(x),
                   (long long)split_size, d);
  /* an empty dim gives one empty view, as PyTorch */
  int64_t count = split_size == 0 ? 1 : size / split_size + (size % split_size != 0);
  if (count < 1) count = 1;
  return split_views(op, x, d, split_size, count, out, capacity, n_out);
}

lt_status lt_chunk(const lt_tensor *x, int chunks, int dim, lt_tensor **out, int capacity,
                   int *n_out) {
  static const char *op = "chunk";
  int d;
  lt_status s = split_args(op, x, dim, out, n_out, &d);
  if (s != LT_OK) return s;
  if (chunks <= 0)
    return lt__err(LT_ERR_INVALID, "chunk: x is %s: chunks must be positive, got %d", LT__D(x), chunks);
  const int64_t size = x->shape[d];
  if (size == 0) /* PyTorch: `chunks` empty views */
    return split_views(op, x, d, 0, chunks, out, capacity, n_out);
  const int64_t piece = (size + chunks - 1) / chunks;
  return split_views(op, x, d, piece, (size + piece - 1) / piece, out, capacity, n_out);
}

/* ======================================================================== */
/* pad (constant, reflect, replicate)                                       */
/* ======================================================================== */

/* How pad runs. x (contiguous) and y are seen as rows along the last dim.
 * Every dim d gets an index map of length y->shape[d]: the source index in x
 * of output index i, or -1 (the constant). A row of y reads the row of x its
 * leading indices map to (all of it the constant if one maps to -1), then
 * maps its last dim. The backward runs the same maps the other way and adds
 * g into dx; it splits the work into slabs over the dims before the first
 * padded one (whose rows never share a source row), and adds within a slab
 * in row order, so results do not depend on the thread count. */
typedef struct pad_aux {
  int mode;                  /* lt_pad_mode */
  int64_t lo[LT_MAX_DIMS];   /* before-padding of every dim (0 where not padded) */
} pad_aux;

/* Source index in [0, n) of output index i, or -1 (constant padding). */
static int64_t pad_src(int mode, int64_t i, int64_t lo, int64_t n) {
  const int64_t k = i - lo;
  if (k >= 0 && k < n) return k;
  if (mode == LT_PAD_CONSTANT) return -1;
  if (mode == LT_PAD_REPLICATE) return k < 0 ? 0 : n - 1;
  return k < 0 ? -k : 2 * (n - 1) - k; /* reflect (pad < n checked) */
}

typedef struct pad_geom {
  int ndim;
  int64_t xs[LT_MAX_DIMS], ys[LT_MAX_DIMS]; /* shapes */
  int64_t xst[LT_MAX_DIMS];                 /* contiguous strides of x */
  int64_t *map[LT_MAX_DIMS];                /* ys[d] entries each */
  int64_t *maps;                            /* one allocation for all */
  int64_t W, rows;                          /* y's last dim, y->numel / W */
} pad_geom;

static lt_status pad_geom_init(pad_geom *g, const char *op, int mode, int ndim, const int64_t *xs,
                               const int64_t *ys, const int64_t *lo) {
  g->ndim = ndim;
  int64_t total = 1;
  for (int d = 0; d < ndim; d++) g->xs[d] = xs[d], g->ys[d] = ys[d], total += ys[d];
  lt__contiguous_strides(ndim, xs, g->xst);
  g->maps = malloc(sizeof(int64_t) * (size_t)total);
  if (!g->maps) return lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld index entries", op, (long long)total);
  int64_t *m = g->maps;
  for (int d = 0; d < ndim; d++) {
    g->map[d] = m;
    for (int64_t i = 0; i < ys[d]; i++) m[i] = pad_src(mode, i, lo[d], xs[d]);
    m += ys[d];
  }
  g->W = ndim ? ys[ndim - 1] : 1;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= ys[d];
  g->rows = g->W ? n / g->W : 0;
  return LT_OK;
}

/* Offset in x of the row that output row r reads, or -1 (a constant row). */
static int64_t pad_row_src(const pad_geom *g, int64_t r) {
  int64_t off = 0;
  for (int d = g->ndim - 2; d >= 0; d--) {
    const int64_t i = r % g->ys[d], s = g->map[d][i];
    r /= g->ys[d];
    if (s < 0) return -1;
    off += s * g->xst[d];
  }
  return off;
}

#define PAD_KERNELS(NAME, T)                                                                \
  static void pad_fwd_##NAME(const pad_geom *g, const T *x, T *y, T value, int64_t r0,     \
                             int64_t r1) {                                                 \
    const int64_t *ml = g->ndim ? g->map[g->ndim - 1] : NULL, W = g->W;                    \
    for (int64_t r = r0; r < r1; r++) {                                                    \
      const int64_t off = pad_row_src(g, r);                                               \
      T *yr = y + r * W;                                                                   \
      if (off < 0) {                                                                       \
        for (int64_t j = 0; j < W; j++) yr[j] = value;                                     \
      } else if (!ml) {                                                                    \
        yr[0] = x[0];                                                                      \
      } else {                                                                             \
        for (int64_t j = 0; j < W; j++) yr[j] = ml[j] < 0 ? value : x[off + ml[j]];        \
      }                                                                                    \
    }                                                                                      \
  }
PAD_KERNELS(b8, uint8_t)
PAD_KERNELS(b32, uint32_t)
PAD_KERNELS(b64, uint64_t)

#define PAD_BW_KERNEL(NAME, T)                                                             \
  static void pad_bwd_##NAME(const pad_geom *g, const T *gy, T *dx, int64_t r0, int64_t r1) { \
    const int64_t *ml = g->ndim ? g->map[g->ndim - 1] : NULL, W = g->W;                    \
    for (int64_t r = r0; r < r1; r++) {                                                    \
      const int64_t off = pad_row_src(g, r);                                               \
      const T *gr = gy + r * W;                                                            \
      if (off < 0) continue;                                                               \
      if (!ml) {                                                                           \
        dx[0] += gr[0];                                                                    \
        continue;                                                                          \
      }                                                                                    \
      for (int64_t j = 0; j < W; j++)                                                      \
        if (ml[j] >= 0) dx[off + ml[j]] += gr[j];                                          \
    }                                                                                      \
  }
PAD_BW_KERNEL(f32, float)
PAD_BW_KERNEL(f64, double)

/* Rows of output per slab: the product of the output dims from the first
 * padded one to the second last (rows in different slabs read different x
 * rows). */
static int64_t pad_slab_rows(const pad_geom *g, const int64_t *lo) {
  int first = g->ndim - 1;
  for (int d = 0; d < g->ndim - 1; d++)
    if (lo[d] != 0 || g->ys[d] != g->xs[d]) {
      first = d;
      break;
    }
  int64_t n = 1;
  for (int d = first; d < g->ndim - 1; d++) n *= g->ys[d];
  return n;
}

lt_tensor *lt_pad(const lt_tensor *x, int npad, const int64_t *pad, lt_pad_mode mode, double value) {
  static const char *op = "pad";
  if (!x) return lt__err_null(op, "x"), NULL;
  if (npad > 0 && !pad) return lt__err(LT_ERR_NULL, "%s: argument pad is NULL but npad is %d", op, npad), NULL;
  if (mode != LT_PAD_CONSTANT && mode != LT_PAD_REFLECT && mode != LT_PAD_REPLICATE)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: mode %d is not a pad mode (constant, reflect, replicate)", op,
                   LT__D(x), (int)mode),
           NULL;
  if (npad < 0 || npad % 2 || npad / 2 > x->ndim)
    return lt__err(LT_ERR_INVALID,
                   "%s: x is %s: %d pad values; need an even number, at most 2 per dim (%d): (left, right) of "
                   "the last dim first, as torch.nn.functional.pad",
                   op, LT__D(x), npad, 2 * x->ndim),
           NULL;
  const char *mname = mode == LT_PAD_CONSTANT ? "constant" : mode == LT_PAD_REFLECT ? "reflect" : "replicate";
  pad_aux aux = {(int)mode, {0}};
  int64_t ys[LT_MAX_DIMS];
  for (int d = 0; d < x->ndim; d++) ys[d] = x->shape[d];
  for (int k = 0; k < npad / 2; k++) {
    const int d = x->ndim - 1 - k;
    const int64_t lo = pad[2 * k], hi = pad[2 * k + 1], n = x->shape[d];
    if (mode != LT_PAD_CONSTANT) {
      if (lo < 0 || hi < 0)
        return lt__err(LT_ERR_INVALID, "%s: x is %s: %s padding of dim %d is (%lld, %lld): must be >= 0", op,
                       LT__D(x), mname, d, (long long)lo, (long long)hi),
               NULL;
      if ((lo > 0 || hi > 0) && n == 0)
        return lt__err(LT_ERR_SHAPE, "%s: x is %s: %s padding of dim %d, which is empty", op, LT__D(x), mname,
                       d),
               NULL;
      if (mode == LT_PAD_REFLECT && (lo >= n || hi >= n))
        return lt__err(LT_ERR_INVALID,
                       "%s: x is %s: reflect padding (%lld, %lld) of dim %d must be less than its size %lld", op,
                       LT__D(x), (long long)lo, (long long)hi, d, (long long)n),
               NULL;
    }
    /* sizes from outside: checked (negative constant padding crops) */
    int64_t s;
    if (__builtin_add_overflow(n, lo, &s) || __builtin_add_overflow(s, hi, &s) || s < 0 || lo < -n || hi < -n)
      return lt__err(LT_ERR_INVALID, "%s: x is %s: padding (%lld, %lld) of dim %d gives a negative or huge size",
                     op, LT__D(x), (long long)lo, (long long)hi, d),
             NULL;
    ys[d] = s;
    aux.lo[d] = lo;
  }
  int64_t numel;
  if (lt__shape_numel(op, x->ndim, ys, &numel) != LT_OK) return NULL;
  lt_tensor *xt;
  const lt_tensor *xc = lt__as_contig(x, x->dtype, &xt);
  if (!xc) return NULL;
  pad_geom g;
  lt_tensor *y = NULL;
  if (pad_geom_init(&g, op, mode, x->ndim, x->shape, ys, aux.lo) != LT_OK) goto done;
  y = lt_empty(x->dtype, x->ndim, ys);
  if (y && g.rows > 0) {
    unsigned char vb[8] = {0};
    lt__store(vb, x->dtype, value);
    const size_t es = lt_dtype_size(x->dtype);
    const int nt = lt__threads_for(numel, g.rows);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t r0 = g.rows * id / T, r1 = g.rows * (id + 1) / T;
      if (es == 1) pad_fwd_b8(&g, xc->data, y->data, vb[0], r0, r1);
      else if (es == 4) pad_fwd_b32(&g, xc->data, y->data, *(uint32_t *)vb, r0, r1);
      else pad_fwd_b64(&g, xc->data, y->data, *(uint64_t *)vb, r0, r1);
    }
  }
  free(g.maps);
  if (y && lt__record(y, LT__OP_pad, 1, &x, 0, NULL, &aux, sizeof aux) != LT_OK) {
    lt_tensor_free(y);
    y = NULL;
  }
done:
  lt_tensor_free(xt);
  return y;
}

/* y = pad(x): dx[src(i)] += g[i] over every output element i with a source
 * (constant padding has none). Nothing saved; the maps are rebuilt from aux
 * and the shapes. */
lt_status lt__bw_pad(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const pad_aux *a = (const pad_aux *)node->aux;
  const lt__edge *in = &node->in[0];
  lt_tensor *gt;
  const lt_tensor *g = lt__as_contig(gout, in->dtype, &gt);
  if (!g) return lt_last_status();
  pad_geom geo;
  lt_status st = pad_geom_init(&geo, "pad backward", a->mode, in->ndim, in->shape, node->out_shape, a->lo);
  if (st != LT_OK) return st;
  lt_tensor *dx = lt_zeros(in->dtype, in->ndim, in->shape);
  if (dx && geo.rows > 0) {
    const int64_t per = pad_slab_rows(&geo, a->lo), nslab = geo.rows / per;
    const int nt = lt__threads_for(g->numel, nslab);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t s = 0; s < nslab; s++) {
      if (in->dtype == LT_DTYPE_F32) pad_bwd_f32(&geo, g->data, dx->data, s * per, (s + 1) * per);
      else pad_bwd_f64(&geo, g->data, dx->data, s * per, (s + 1) * per);
    }
  }
  free(geo.maps);
  lt_tensor_free(gt);
  if (!dx) return lt_last_status();
  gin[0] = dx;
  return LT_OK;
}
