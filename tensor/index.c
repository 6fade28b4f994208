/*
 * tensor/index.c: indexing, forward and backward: index_select, gather,
 * scatter_add, embedding, tril/triu, one_hot (PyTorch semantics; see
 * tensor.h for the contracts).
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
 * threads, duplicate indices included.
 *
 * What this is not. Joining and splitting (cat, stack, split, chunk:
 * tensor/join.c, which shares this file's strided copy), padding
 * (tensor/pad.c), advanced (tensor-of-tensors) indexing, lt_where and
 * lt_masked_fill (tensor/elementwise.c), or in-place scatter. Indices are
 * never differentiable; one_hot records nothing.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/quant.h"
#include "tensor/index_internal.h"

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

void lt__copy_into(const lt_tensor *dst, const lt_tensor *src) {
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
  lt__dim_aux aux = {d};
  return lt__recorded(out, lt__record(out, id, 1, (const lt_tensor *[]){x}, 1,
                                  (const lt_tensor *[]){index}, &aux, sizeof aux));
}

/* Their backward: dx = zeros like x, then dout added at the indexed places
 * (index_add for index_select, scatter_add for gather). */
static lt_status index_backward(const char *op, const lt_node *node, const lt_tensor *gout,
                                lt_tensor **gin, bool select) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  lt__dim_aux aux;
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
    lt__copy_into(out, x);
    gs_run_tensors(true, d, out, src, &ib, index);
  }
  idx_release(&ib);
  if (!out) return NULL;
  lt__dim_aux aux = {d};
  return lt__recorded(out, lt__record(out, LT__OP_scatter_add, 2, (const lt_tensor *[]){x, src}, 1,
                                  (const lt_tensor *[]){index}, &aux, sizeof aux));
}

/* dx = dout; dsrc[i][j] = dout[index[i][j]][j] where index reaches (gather),
 * 0 where src is larger than index. */
lt_status lt__bw_scatter_add(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  lt__dim_aux aux;
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
  return lt__recorded(out, lt__record(out, LT__OP_embedding, 1, (const lt_tensor *[]){table}, 1,
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
  return lt__recorded(out, lt__record(out, id, 1, (const lt_tensor *[]){x}, 0, NULL, &aux, sizeof aux));
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
