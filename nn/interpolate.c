/*
 * nn/interpolate.c: torch.nn.functional.interpolate (nn.Upsample) in the
 * modes "nearest", "linear" (3-d input) and "bilinear" (4-d), nn/conv.h.
 *
 * What this is: one spatial dim at a time (bilinear is separable), each a
 * gather of rows with lt_index_select and, for linear, the blend l0 a + l1 b
 * of the two neighbours, so autograd differentiates it (index_select's
 * backward sums each output's gradient into its sources). The source
 * indices and weights follow ATen's UpSample.h (nearest_idx,
 * area_pixel_compute_source_index, compute_indices_weights_linear) in the
 * tensor's own precision (float for f32, as ATen's opmath), so the same rows
 * are picked as PyTorch's.
 *
 * What this is not: bicubic, area or trilinear modes, antialiasing, or a
 * fused kernel (it costs two gathers and a blend per dim).
 */
#include "nn/conv.h"

#include "tensor/error_internal.h"

#include <math.h>
#include <stdlib.h>

/* Source rows (and the weight of the upper one, linear) of each of out
 * outputs from in inputs; sf > 0: PyTorch's given scale factor. */
static void nearest_rows(int64_t in, int64_t out, double sf, bool f32, int64_t *idx) {
  for (int64_t i = 0; i < out; i++) {
    int64_t j;
    if (out == in) j = i;
    else if (out == 2 * in) j = i >> 1;
    else if (f32) {
      const float sc = sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
      j = (int64_t)floorf((float)i * sc);
    } else {
      const double sc = sf > 0 ? 1.0 / sf : (double)in / (double)out;
      j = (int64_t)floor((double)i * sc);
    }
    idx[i] = j < in - 1 ? j : in - 1;
  }
}

#define LINEAR_ROWS(T, FLOOR)                                                                                   \
  static void linear_rows_##T(int64_t in, int64_t out, double sf, bool align, int64_t *i0, int64_t *i1, T *l1) { \
    T sc;                                                                                                       \
    if (align) sc = out > 1 ? (T)(in - 1) / (T)(out - 1) : (T)0;                                                \
    else sc = sf > 0 ? (T)(1.0 / sf) : (T)in / (T)out;                                                          \
    for (int64_t i = 0; i < out; i++) {                                                                         \
      T src = align ? sc * (T)i : sc * ((T)i + (T)0.5) - (T)0.5;                                                \
      if (src < 0) src = 0;                                                                                     \
      const int64_t j = (int64_t)FLOOR(src);                                                                    \
      T lam = src - (T)j;                                                                                       \
      if (lam > 1) lam = 1;                                                                                     \
      i0[i] = j < in - 1 ? j : in - 1;                                                                          \
      i1[i] = j < in - 1 ? j + 1 : in - 1;                                                                      \
      l1[i] = lam;                                                                                              \
    }                                                                                                           \
  }
LINEAR_ROWS(float, floorf)
LINEAR_ROWS(double, floor)

/* One spatial dim (axis of x) from in to out rows; in the caller's scope. */
static lt_tensor *resize_dim(lt_tensor *x, int axis, int64_t out, double sf, const lt_interpolate_opts *o) {
  const int64_t in = x->shape[axis];
  const bool f32 = x->dtype == LT_DTYPE_F32;
  int64_t *i0 = malloc(sizeof(int64_t) * (size_t)out * 2);
  double *l1 = malloc(sizeof(double) * (size_t)out);
  if (!i0 || !l1) {
    free(i0), free(l1);
    return lt__err(LT_ERR_NOMEM, "interpolate: out of memory for %lld rows", (long long)out), NULL;
  }
  int64_t *i1 = i0 + out;
  lt_tensor *y = NULL;
  if (o->mode == LT_INTERP_NEAREST) {
    nearest_rows(in, out, sf, f32, i0);
    lt_tensor *idx = lt_tensor_from_copy(LT_DTYPE_I64, 1, &out, i0);
    y = idx ? lt_index_select(x, axis, idx) : NULL;
  } else {
    float *lf = (float *)l1;
    if (f32) linear_rows_float(in, out, sf, o->align_corners, i0, i1, lf);
    else linear_rows_double(in, out, sf, o->align_corners, i0, i1, l1);
    /* the weights [out, 1, ...] broadcast along the dims after axis */
    int64_t wshape[LT_MAX_DIMS];
    int nd = 0;
    wshape[nd++] = out;
    for (int d = axis + 1; d < x->ndim; d++) wshape[nd++] = 1;
    lt_tensor *w1 = lt_tensor_from_copy(x->dtype, nd, wshape, l1);
    lt_tensor *w0 = w1 ? lt_sub_scalar(lt_neg(w1), -1.0) : NULL; /* 1 - l1 */
    lt_tensor *a = lt_index_select(x, axis, lt_tensor_from_copy(LT_DTYPE_I64, 1, &out, i0));
    lt_tensor *b = lt_index_select(x, axis, lt_tensor_from_copy(LT_DTYPE_I64, 1, &out, i1));
    y = lt_add(lt_mul(a, w0), lt_mul(b, w1));
  }
  free(i0), free(l1);
  return y;
}

lt_tensor *lt_interpolate(const lt_tensor *x, const lt_interpolate_opts *opts) {
  const char *op = "interpolate";
  if (!x) return lt__err_null(op, "x"), NULL;
  if (!opts) return lt__err_null(op, "opts"), NULL;
  if (x->dtype != LT_DTYPE_F32 && x->dtype != LT_DTYPE_F64)
    return lt__err(LT_ERR_DTYPE, "%s: x is %s: must be f32 or f64", op, LT__D(x)), NULL;
  if (x->ndim != 3 && x->ndim != 4)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [N, C, L] or [N, C, H, W]", op, LT__D(x)), NULL;
  if (opts->mode != LT_INTERP_NEAREST && opts->mode != LT_INTERP_LINEAR)
    return lt__err(LT_ERR_INVALID, "%s: mode %d is not LT_INTERP_NEAREST or LT_INTERP_LINEAR", op, (int)opts->mode), NULL;
  if (opts->align_corners && opts->mode == LT_INTERP_NEAREST)
    return lt__err(LT_ERR_INVALID, "%s: align_corners is for LT_INTERP_LINEAR only (as PyTorch)", op), NULL;
  const int ns = x->ndim - 2;
  int64_t out[2];
  for (int d = 0; d < ns; d++) {
    const int64_t in = x->shape[2 + d];
    const double sf = opts->scale_factor[d];
    if (opts->size[d] < 0 || (opts->size[d] == 0 && !(sf > 0 && isfinite(sf))))
      return lt__err(LT_ERR_INVALID, "%s: x is %s: spatial dim %d: size %lld, scale_factor %g: give a size >= 1 or a "
                     "scale factor > 0", op, LT__D(x), d, (long long)opts->size[d], sf),
             NULL;
    const double o = opts->size[d] ? (double)opts->size[d] : floor((double)in * sf);
    if (in < 1 || !(o >= 1 && o <= (double)INT64_MAX / 4))
      return lt__err(LT_ERR_SHAPE, "%s: x is %s: spatial dim %d of size %lld to %.0f: both must be >= 1", op, LT__D(x),
                     d, (long long)in, o),
             NULL;
    out[d] = (int64_t)o;
  }
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  lt_tensor *y = (lt_tensor *)x; /* not written: each step makes a new tensor */
  for (int d = ns - 1; d >= 0 && y; d--) /* the last dim first, as ATen's loops */
    y = resize_dim(y, 2 + d, out[d], opts->size[d] ? 0 : opts->scale_factor[d], opts);
  if (y && y->storage == x->storage) y = lt_clone(x);
  return lt_scope_return(sc, y);
}
