/*
 * tensor/pad.c: lt_pad (constant, reflect, replicate, on any number of
 * trailing dims), forward and backward (torch.nn.functional.pad semantics;
 * tensor.h has the contract).
 *
 * What this is not: joining (tensor/join.c) or indexing (tensor/index.c);
 * circular padding.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

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
