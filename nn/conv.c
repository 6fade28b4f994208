/*
 * nn/conv.c: convolution (conv2d, conv_transpose2d, and conv1d on them) and
 * im2col as ops (unfold, fold), forward and backward side by side. Public
 * API and semantics: nn/conv.h; pooling is nn/pool.c's.
 *
 * What this is: one home for im2col/col2im (im2col, col2im below), used by
 * all four convolution passes and by unfold/fold. A convolution is one GEMM
 * per group over a slice of the batch (conv2d: conv_slice images, as many
 * as keep COL in cache; conv_transpose2d: the whole batch), so BLIS sees few
 * large products rather than N small ones (its per-call setup is what makes
 * small products slow; see docs/vision.md), and conv2d's scratch stays in
 * cache:
 *
 *   COL [C_in kh kw, N OH OW]  = im2col(x)               (row (c, i, j), column (n, oh, ow))
 *   conv2d forward:   Y^T_g [C_out/g, N L]   = W_g [C_out/g, K_g] · COL_g [K_g, N L]
 *                     y [N, C_out, OH, OW]   = Y^T transposed (+ bias)
 *   conv2d backward:  G^T [C_out, N L]       = g transposed
 *                     dW_g                   = G^T_g · COL_g^T       (COL recomputed, not saved)
 *                     dCOL_g                 = W_g^T · G^T_g ;  dx = col2im(dCOL)
 *   conv_transpose2d is the same three products with the roles swapped:
 *                     forward  COL_g = W_g^T · X^T_g, y = col2im(COL) (+ bias)
 *                     backward COL = im2col(g), dx^T_g = W_g · COL_g, dW_g = X^T_g · COL_g^T
 *
 * K_g = C_in/g kh kw, L = OH OW. Each product reduces over one contraction
 * inside one BLIS call, and every other loop writes disjoint (n, c) planes,
 * so results do not depend on the thread count. Scratch is one COL buffer
 * and one transposed buffer per call (no allocation inside the loops; the
 * storage cache of tensor/tensor.c hands the same blocks back every step).
 *
 * f32 conv2d (and so conv1d) runs on oneDNN's direct JIT kernels instead
 * (lt__dnnl_conv_f32, tensor/dnnl_conv.c) wherever oneDNN has one for the
 * geometry; the im2col path stays for f64, conv_transpose2d and the rest.
 * Under autocast (lt_set_autocast(BF16)) its three passes run on oneDNN's
 * bf16 convolution (lt__dnnl_conv_bf16): bf16 inputs, f32 outputs and
 * accumulation, like every autocast product of the library (f32 out, not
 * PyTorch's bf16 out; docs/mixed-precision.md).
 *
 * What this is not: a Winograd kernel, NHWC layouts, or pooling (nn/pool.c,
 * which shares the window geometry of nn/conv_internal.h).
 */
#include "nn/conv_internal.h"

#include "tensor/graph_internal.h"
#include "tensor/autocast_internal.h"
#include "tensor/dnnl_conv_internal.h"
#include "tensor/error_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <string.h>

/* ======================================================================== */
/* Geometry and the im2col / col2im kernels                                 */
/* ======================================================================== */

int64_t lt__conv_out_size(int64_t in, int64_t k, int64_t s, int64_t pad_l, int64_t pad_r, int64_t d,
                          bool ceil_mode) {
  const int64_t span = in + pad_l + pad_r - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t o = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (o - 1) * s >= in + pad_l) o--;
  return o;
}

/* im2col: for every image n and row r = (c, i, j), writes the OH x OW values
 * x[n, c, oh sh - ph + i dh, ow sw - pw + j dw] (0 outside) to col + n*sn +
 * r*sr (OH*OW contiguous values). x has any strides xs. Parallel over (n, c). */
#define DEF_IM2COL(T, sfx)                                                                                    \
  static void im2col_##sfx(const lt__conv_geom *g, const T *x, const int64_t *xs, T *col, int64_t sn, int64_t sr) { \
    const int64_t NC = g->N * g->C, L = g->OH * g->OW;                                                        \
    const int nt = lt__threads_for(NC * g->kh * g->kw * L, NC);                                               \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t nc = 0; nc < NC; nc++) {        \
      const int64_t n = nc / g->C, c = nc % g->C;                                                             \
      const T *xp = x + n * xs[0] + c * xs[1];                                                                \
      for (int64_t i = 0; i < g->kh; i++)                                                                     \
        for (int64_t j = 0; j < g->kw; j++) {                                                                 \
          T *dst = col + n * sn + ((c * g->kh + i) * g->kw + j) * sr;                                         \
          for (int64_t oh = 0; oh < g->OH; oh++, dst += g->OW) {                                              \
            const int64_t ih = oh * g->sh - g->ph + i * g->dh;                                                \
            if (ih < 0 || ih >= g->H) {                                                                       \
              memset(dst, 0, sizeof(T) * (size_t)g->OW);                                                      \
              continue;                                                                                       \
            }                                                                                                 \
            const T *row = xp + ih * xs[2];                                                                   \
            int64_t iw = j * g->dw - g->pw;                                                                   \
            if (g->sw == 1 && xs[3] == 1) { /* zeros, the row's valid span, zeros */                          \
              const int64_t lo = iw < 0 ? (-iw < g->OW ? -iw : g->OW) : 0;                                    \
              int64_t hi = g->W - iw < g->OW ? g->W - iw : g->OW;                                             \
              if (hi < lo) hi = lo;                                                                           \
              for (int64_t ow = 0; ow < lo; ow++) dst[ow] = (T)0;                                             \
              for (int64_t ow = lo; ow < hi; ow++) dst[ow] = row[iw + ow];                                    \
              for (int64_t ow = hi; ow < g->OW; ow++) dst[ow] = (T)0;                                         \
              continue;                                                                                       \
            }                                                                                                 \
            for (int64_t ow = 0; ow < g->OW; ow++, iw += g->sw)                                               \
              dst[ow] = (iw >= 0 && iw < g->W) ? row[iw * xs[3]] : (T)0;                                      \
          }                                                                                                   \
        }                                                                                                     \
    }                                                                                                         \
  }
DEF_IM2COL(float, f32)
DEF_IM2COL(double, f64)

/* col2im, the adjoint: x [N, C, H, W] (contiguous) gets, per plane, bias[c]
 * (bias NULL: 0) plus the sum of every col entry that im2col would have read
 * from that element, in a fixed order. Parallel over (n, c) planes. bias has
 * stride bs. */
#define DEF_COL2IM(T, sfx)                                                                                       \
  static void col2im_##sfx(const lt__conv_geom *g, const T *col, int64_t sn, int64_t sr, T *x, const T *bias,    \
                           int64_t bs) {                                                                         \
    const int64_t NC = g->N * g->C, L = g->OH * g->OW, HW = g->H * g->W;                                         \
    const int nt = lt__threads_for(NC * g->kh * g->kw * L, NC);                                                  \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t nc = 0; nc < NC; nc++) {           \
      const int64_t n = nc / g->C, c = nc % g->C;                                                                \
      T *xp = x + nc * HW;                                                                                       \
      const T b0 = bias ? bias[c * bs] : (T)0;                                                                   \
      for (int64_t e = 0; e < HW; e++) xp[e] = b0;                                                               \
      for (int64_t i = 0; i < g->kh; i++)                                                                        \
        for (int64_t j = 0; j < g->kw; j++) {                                                                    \
          const T *src = col + n * sn + ((c * g->kh + i) * g->kw + j) * sr;                                      \
          for (int64_t oh = 0; oh < g->OH; oh++, src += g->OW) {                                                 \
            const int64_t ih = oh * g->sh - g->ph + i * g->dh;                                                   \
            if (ih < 0 || ih >= g->H) continue;                                                                  \
            T *row = xp + ih * g->W;                                                                             \
            int64_t iw = j * g->dw - g->pw;                                                                      \
            if (g->sw == 1) { /* the valid span only */                                                          \
              const int64_t lo = iw < 0 ? (-iw < g->OW ? -iw : g->OW) : 0;                                       \
              int64_t hi = g->W - iw < g->OW ? g->W - iw : g->OW;                                                \
              for (int64_t ow = lo; ow < hi; ow++) row[iw + ow] += src[ow];                                      \
              continue;                                                                                          \
            }                                                                                                    \
            for (int64_t ow = 0; ow < g->OW; ow++, iw += g->sw)                                                  \
              if (iw >= 0 && iw < g->W) row[iw] += src[ow];                                                      \
          }                                                                                                      \
        }                                                                                                        \
    }                                                                                                            \
  }
DEF_COL2IM(float, f32)
DEF_COL2IM(double, f64)

static void im2col(lt_dtype dt, const lt__conv_geom *g, const lt_tensor *x, void *col, int64_t sn, int64_t sr) {
  if (dt == LT_DTYPE_F32) im2col_f32(g, x->data, x->stride, col, sn, sr);
  else im2col_f64(g, x->data, x->stride, col, sn, sr);
}

static void col2im(lt_dtype dt, const lt__conv_geom *g, const void *col, int64_t sn, int64_t sr, void *x, const lt_tensor *b) {
  if (dt == LT_DTYPE_F32) col2im_f32(g, col, sn, sr, x, b ? b->data : NULL, b ? b->stride[0] : 0);
  else col2im_f64(g, col, sn, sr, x, b ? b->data : NULL, b ? b->stride[0] : 0);
}

/* The same for images [n0, n0 + nb) of x (any strides) / of a contiguous
 * [N, C, H, W] output: the geometry of nb images, pointers moved to n0. */
static void im2col_n(lt_dtype dt, const lt__conv_geom *g, const lt_tensor *x, int64_t n0, int64_t nb, void *col, int64_t sn,
                     int64_t sr) {
  lt__conv_geom gc = *g;
  gc.N = nb;
  if (dt == LT_DTYPE_F32) im2col_f32(&gc, (const float *)x->data + n0 * x->stride[0], x->stride, col, sn, sr);
  else im2col_f64(&gc, (const double *)x->data + n0 * x->stride[0], x->stride, col, sn, sr);
}

static void col2im_n(lt_dtype dt, const lt__conv_geom *g, int64_t n0, int64_t nb, const void *col, int64_t sn, int64_t sr,
                     void *x) {
  lt__conv_geom gc = *g;
  gc.N = nb;
  const int64_t off = n0 * g->C * g->H * g->W;
  if (dt == LT_DTYPE_F32) col2im_f32(&gc, col, sn, sr, (float *)x + off, NULL, 0);
  else col2im_f64(&gc, col, sn, sr, (double *)x + off, NULL, 0);
}

/* Images per slice of conv2d: the im2col matrix and the product of a slice
 * ([rows, nb OH OW], rows = max(K, C_out)) stay near 2 MiB, so that they are
 * written and read back in cache rather than through memory (a whole
 * batch's COL is many times the cache; docs/vision.md gives the sizes), and
 * the scratch is small enough for the storage cache to keep. Depends on the shapes only: results do not depend on the
 * thread count. */
static int64_t conv_slice(const lt__conv_geom *g, int64_t rows, size_t es) {
  const int64_t per = rows * g->OH * g->OW * (int64_t)es, target = (int64_t)2 << 20;
  int64_t nb = per > 0 ? target / per : g->N;
  if (nb < 1) nb = 1;
  return nb < g->N ? nb : g->N;
}

/* Channel-major transposes between x [N, C, H, W] (any strides) and
 * T [C, N H W] (contiguous): to_cm reads x, from_cm writes y [N, C, H, W]
 * (contiguous) plus bias[c] if bias. Parallel over (c, n) blocks. */
#define DEF_CM(T, sfx)                                                                                    \
  static void to_cm_##sfx(const lt_tensor *x, T *t) {                                                     \
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], HW = H * W;         \
    const int64_t *xs = x->stride;                                                                        \
    const T *xd = x->data;                                                                                \
    const int nt = lt__threads_for(N * C * HW, N * C);                                                    \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t cn = 0; cn < C * N; cn++) { \
      const int64_t c = cn / N, n = cn % N;                                                               \
      const T *src = xd + n * xs[0] + c * xs[1];                                                          \
      T *dst = t + cn * HW;                                                                               \
      for (int64_t h = 0; h < H; h++)                                                                     \
        for (int64_t w = 0; w < W; w++) dst[h * W + w] = src[h * xs[2] + w * xs[3]];                      \
    }                                                                                                     \
  }                                                                                                       \
  static void from_cm_##sfx(const T *t, T *y, int64_t N, int64_t C, int64_t HW, const T *bias, int64_t bs) { \
    const int nt = lt__threads_for(N * C * HW, N * C);                                                    \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t nc = 0; nc < N * C; nc++) { \
      const int64_t n = nc / C, c = nc % C;                                                               \
      const T *src = t + (c * N + n) * HW;                                                                \
      T *dst = y + nc * HW;                                                                               \
      if (bias) {                                                                                         \
        const T b0 = bias[c * bs];                                                                        \
        for (int64_t e = 0; e < HW; e++) dst[e] = src[e] + b0;                                            \
      } else {                                                                                            \
        memcpy(dst, src, sizeof(T) * (size_t)HW);                                                         \
      }                                                                                                   \
    }                                                                                                     \
  }
DEF_CM(float, f32)
DEF_CM(double, f64)

static void to_cm(const lt_tensor *x, void *t) {
  if (x->dtype == LT_DTYPE_F32) to_cm_f32(x, t);
  else to_cm_f64(x, t);
}

static void from_cm(lt_dtype dt, const void *t, void *y, int64_t N, int64_t C, int64_t HW, const lt_tensor *b) {
  if (dt == LT_DTYPE_F32) from_cm_f32(t, y, N, C, HW, b ? b->data : NULL, b ? b->stride[0] : 0);
  else from_cm_f64(t, y, N, C, HW, b ? b->data : NULL, b ? b->stride[0] : 0);
}

/* db [C] = sum of g [N, C, H, W] over n, h, w, in double in a fixed order
 * (g any strides, in dtype dt). */
#define DEF_CHANNEL_SUM(T, sfx)                                                                   \
  static void channel_sum_##sfx(const lt_tensor *g, T *db) {                                      \
    const int64_t N = g->shape[0], C = g->shape[1], H = g->shape[2], W = g->shape[3];             \
    const int64_t *gs = g->stride;                                                                \
    const T *gd = g->data;                                                                        \
    const int nt = lt__threads_for(g->numel, C);                                                  \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t c = 0; c < C; c++) { \
      double s = 0;                                                                               \
      for (int64_t n = 0; n < N; n++)                                                             \
        for (int64_t h = 0; h < H; h++) {                                                         \
          const T *row = gd + n * gs[0] + c * gs[1] + h * gs[2];                                  \
          for (int64_t w = 0; w < W; w++) s += row[w * gs[3]];                                    \
        }                                                                                         \
      db[c] = (T)s;                                                                               \
    }                                                                                             \
  }
DEF_CHANNEL_SUM(float, f32)
DEF_CHANNEL_SUM(double, f64)

static lt_tensor *channel_sum(const lt_tensor *g, lt_dtype dt) {
  LT_CHECK(g->dtype == dt);
  lt_tensor *db = lt_empty(dt, 1, &g->shape[1]);
  if (!db) return NULL;
  if (dt == LT_DTYPE_F32) channel_sum_f32(g, db->data);
  else channel_sum_f64(g, db->data);
  return db;
}

/* gout in the node's dtype (the engine may hand another float dtype). */
static const lt_tensor *grad_as(const lt_tensor *gout, lt_dtype dt) {
  return gout->dtype == dt ? gout : lt_to_dtype(gout, dt);
}

/* ======================================================================== */
/* Argument checks                                                          */
/* ======================================================================== */

lt_status lt__conv_check_float(const char *op, const lt_tensor *x, const lt_tensor *w, const lt_tensor *b) {
  if (!lt_dtype_is_float(x->dtype) || (w && w->dtype != x->dtype) || (b && b->dtype != x->dtype))
    return lt__err(LT_ERR_DTYPE, "%s: x is %s, weight is %s, bias is %s: x must be f32 or f64 and weight and "
                   "bias the same dtype",
                   op, LT__D(x), w ? LT__D(w) : "NULL", b ? LT__D(b) : "NULL");
  return LT_OK;
}


/* Strides, paddings and dilations of opts for `nd` spatial dims (1 or 2). */
static lt_status check_conv_opts(const char *op, const lt_conv_opts *o, int nd) {
  for (int d = 0; d < nd; d++) {
    if (o->stride[d] < 1 || o->dilation[d] < 1 || o->padding[d] < 0)
      return lt__err(LT_ERR_INVALID, "%s: stride %lld, padding %lld, dilation %lld (dim %d): stride and dilation "
                     "must be >= 1 and padding >= 0",
                     op, (long long)o->stride[d], (long long)o->padding[d], (long long)o->dilation[d], d);
  }
  return LT_OK;
}

/* The geometry of a convolution of x [N, C, H, W] by a kh x kw kernel. */
static lt_status conv_geom(const char *op, const lt_tensor *x, const lt_tensor *w, int64_t kh, int64_t kw,
                           const lt_conv_opts *o, lt__conv_geom *g) {
  lt_status s = check_conv_opts(op, o, 2);
  if (s != LT_OK) return s;
  *g = (lt__conv_geom){.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .kh = kh,
                       .kw = kw, .sh = o->stride[0], .sw = o->stride[1], .ph = o->padding[0], .pw = o->padding[1],
                       .dh = o->dilation[0], .dw = o->dilation[1], .groups = o->groups};
  int64_t pr[2] = {o->padding[0], o->padding[1]};
  if (o->padding_same) {
    if (o->stride[0] != 1 || o->stride[1] != 1)
      return lt__err(LT_ERR_INVALID, "%s: padding 'same' needs stride 1, got %lldx%lld", op,
                     (long long)o->stride[0], (long long)o->stride[1]);
    const int64_t th = o->dilation[0] * (kh - 1), tw = o->dilation[1] * (kw - 1);
    g->ph = th / 2, g->pw = tw / 2, pr[0] = th - g->ph, pr[1] = tw - g->pw;
  }
  const int64_t eh = g->dh * (kh - 1) + 1, ew = g->dw * (kw - 1) + 1;
  if (eh > g->H + g->ph + pr[0] || ew > g->W + g->pw + pr[1])
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, weight is %s: the (dilated) kernel %lldx%lld is larger than the "
                   "padded input %lldx%lld",
                   op, LT__D(x), w ? LT__D(w) : "-", (long long)eh, (long long)ew, (long long)(g->H + g->ph + pr[0]),
                   (long long)(g->W + g->pw + pr[1]));
  g->OH = lt__conv_out_size(g->H, kh, g->sh, g->ph, pr[0], g->dh, false);
  g->OW = lt__conv_out_size(g->W, kw, g->sw, g->pw, pr[1], g->dw, false);
  return LT_OK;
}

/* x [N, C_in, H, W], weight [wd0, wd1, kh, kw] (conv: [C_out, C_in/g];
 * transpose: [C_in, C_out/g]), bias [C_out]. */
static lt_status check_conv(const char *op, const lt_tensor *x, const lt_tensor *w, const lt_tensor *b,
                            const lt_conv_opts *o, bool transposed) {
  if (!x) return lt__err_null(op, "x");
  if (!w) return lt__err_null(op, "weight");
  lt_status s = lt__conv_check_float(op, x, w, b);
  if (s != LT_OK) return s;
  if (x->ndim != 4 || w->ndim != 4)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, weight is %s: x must be [N, C_in, H, W] and weight [%s, kh, kw]", op,
                   LT__D(x), LT__D(w), transposed ? "C_in, C_out/groups" : "C_out, C_in/groups");
  const int64_t G = o->groups, Cin = x->shape[1];
  if (G < 1) return lt__err(LT_ERR_INVALID, "%s: groups %lld must be >= 1", op, (long long)G);
  const int64_t Cout = transposed ? w->shape[1] * G : w->shape[0];
  if (Cin % G != 0 || Cout % G != 0)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, weight is %s: groups %lld must divide C_in %lld and C_out %lld", op,
                   LT__D(x), LT__D(w), (long long)G, (long long)Cin, (long long)Cout);
  if ((transposed ? w->shape[0] : w->shape[1] * G) != Cin)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, weight is %s, groups %lld: x has %lld channels, the weight expects "
                   "%lld",
                   op, LT__D(x), LT__D(w), (long long)G, (long long)Cin,
                   (long long)(transposed ? w->shape[0] : w->shape[1] * G));
  if (w->shape[2] < 1 || w->shape[3] < 1 || Cout < 1)
    return lt__err(LT_ERR_SHAPE, "%s: weight is %s: C_out and the kernel size must be >= 1", op, LT__D(w));
  if (b && (b->ndim != 1 || b->shape[0] != Cout))
    return lt__err(LT_ERR_SHAPE, "%s: weight is %s, bias is %s: bias must be [C_out] = [%lld]", op, LT__D(w),
                   LT__D(b), (long long)Cout);
  return LT_OK;
}

/* ======================================================================== */
/* conv2d                                                                   */
/* ======================================================================== */

/* The shared products. wd: the weight (contiguous) as [rows, K_g] per group.
 * a_t: use the weight block transposed. */
static lt_status gemm_groups(lt_dtype dt, int64_t G, double beta, lt__mat a, bool a_t, lt__mat b, bool b_t,
                             lt__mat c) {
  const size_t es = lt_dtype_size(dt);
  const int64_t ar = a.rows / G, br = b.rows / G, cr = c.rows / G;
  for (int64_t gi = 0; gi < G; gi++) {
    lt__mat ag = LT__MAT((char *)a.data + (size_t)(gi * ar * a.rs) * es, ar, a.cols, a.rs, a.cs);
    lt__mat bg = LT__MAT((char *)b.data + (size_t)(gi * br * b.rs) * es, br, b.cols, b.rs, b.cs);
    lt__mat cg = LT__MAT((char *)c.data + (size_t)(gi * cr * c.rs) * es, cr, c.cols, c.rs, c.cs);
    if (lt__mat_gemm(dt, false, 1.0, a_t ? lt__mat_t(ag) : ag, b_t ? lt__mat_t(bg) : bg, beta, cg) != LT_OK)
      return lt_last_status();
  }
  return LT_OK;
}

static const lt_conv_opts conv_defaults = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};

/* conv2d's geometry as tensor/dnnl_conv.c takes it. */
static lt__dnnl_conv dnnl_geom(const lt__conv_geom *g, int64_t Cout) {
  return (lt__dnnl_conv){.N = g->N, .C = g->C, .H = g->H, .W = g->W, .O = Cout, .kh = g->kh, .kw = g->kw,
                         .sh = g->sh, .sw = g->sw, .ph = g->ph, .pw = g->pw, .dh = g->dh, .dw = g->dw,
                         .OH = g->OH, .OW = g->OW, .G = g->groups};
}

/* One f32 conv2d pass on oneDNN (tensor/dnnl_conv.c; arrays as lt__dnnl_conv_f32
 * takes them). Under autocast (lt__autocast_active) oneDNN's bf16
 * convolution, reading the weight's bf16 copy from the autocast operand
 * cache (one conversion per weight version serves the forward and the input
 * gradient, as for a Linear); else, or where oneDNN has no bf16 kernel for
 * the geometry, the f32 one. w: the contiguous f32 weight (FWD, BWD_X),
 * NULL for BWD_W. *taken false: neither ran (the im2col path remains). */
static lt_status dnnl_pass(lt__dnnl_conv_pass pass, const lt__dnnl_conv *dg, const float *x, const lt_tensor *w,
                           const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                           bool *taken) {
  *taken = false;
  if (lt__autocast_active() && (!w || w->numel > 0)) {
    const uint16_t *wb = NULL;
    lt_status st = w ? lt__autocast_bf16_of(w, &wb) : LT_OK;
    if (st == LT_OK) st = lt__dnnl_conv_bf16(pass, dg, x, wb, bias, y, dx, dw, db, dy, taken);
    if (st != LT_OK || *taken) return st;
  }
  return lt__dnnl_conv_f32(pass, dg, x, w ? w->data : NULL, bias, y, dx, dw, db, dy, taken);
}

/* f32 conv2d on oneDNN's direct kernels (tensor/dnnl_conv.c) when it has one for
 * the geometry: x, weight (contiguous), bias -> y. *taken false: not run. */
static lt_status conv2d_dnnl(const lt__conv_geom *g, const lt_tensor *x, const lt_tensor *wc, const lt_tensor *bias,
                             lt_tensor *y, bool *taken) {
  lt_tensor *xtmp = NULL, *btmp = NULL;
  const lt_tensor *xc = lt__as_contig(x, LT_DTYPE_F32, &xtmp);
  const lt_tensor *bc = bias ? lt__as_contig(bias, LT_DTYPE_F32, &btmp) : NULL;
  lt_status st = !xc || (bias && !bc) ? lt_last_status() : LT_OK;
  if (st == LT_OK) {
    const lt__dnnl_conv dg = dnnl_geom(g, wc->shape[0]);
    st = dnnl_pass(LT__DNNL_CONV_FWD, &dg, xc->data, wc, bc ? bc->data : NULL, y->data, NULL, NULL, NULL, NULL,
                   taken);
  }
  lt_tensor_free(xtmp);
  lt_tensor_free(btmp);
  return st;
}

lt_tensor *lt_conv2d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias, const lt_conv_opts *opts) {
  const char *op = "conv2d";
  const lt_conv_opts *o = opts ? opts : &conv_defaults;
  if (check_conv(op, x, weight, bias, o, false) != LT_OK) return NULL;
  lt__conv_geom g;
  if (conv_geom(op, x, weight, weight->shape[2], weight->shape[3], o, &g) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_dtype dt = x->dtype;
  const int64_t Cout = weight->shape[0], K = g.C * g.kh * g.kw, L = g.OH * g.OW, NL = g.N * L;
  lt_tensor *wtmp = NULL, *col = NULL, *yt = NULL, *y = NULL;
  const lt_tensor *wc = lt__as_contig(weight, dt, &wtmp);
  if (!wc) goto fail;
  if (!(y = lt_empty(dt, 4, (const int64_t[]){g.N, Cout, g.OH, g.OW}))) goto fail;
  bool done = false;
  if (NL > 0 && dt == LT_DTYPE_F32 && conv2d_dnnl(&g, x, wc, bias, y, &done) != LT_OK) goto fail;
  if (NL > 0 && !done) {
    /* Slice by slice of NB images (conv_slice): COL, Y^T, then y. */
    const size_t es = lt_dtype_size(dt);
    const int64_t NB = conv_slice(&g, K > Cout ? K : Cout, es);
    if (!(col = lt_empty(dt, 1, (const int64_t[]){K * NB * L})) || !(yt = lt_empty(dt, 1, (const int64_t[]){Cout * NB * L})))
      goto fail;
    for (int64_t n0 = 0; n0 < g.N; n0 += NB) {
      const int64_t nb = g.N - n0 < NB ? g.N - n0 : NB, nbL = nb * L;
      im2col_n(dt, &g, x, n0, nb, col->data, L, nbL);
      /* Y^T_g [C_out/G, nb L] = W_g [C_out/G, K_g] · COL_g [K_g, nb L] */
      if (gemm_groups(dt, g.groups, 0.0, LT__MAT(wc->data, Cout, K / g.groups, K / g.groups, 1), false,
                      LT__MAT(col->data, K, nbL, nbL, 1), false, LT__MAT(yt->data, Cout, nbL, nbL, 1)) != LT_OK)
        goto fail;
      from_cm(dt, yt->data, (char *)y->data + (size_t)(n0 * Cout * L) * es, nb, Cout, L, bias);
    }
  }
  if (lt__record(y, LT__OP_conv2d, 3, (const lt_tensor *[]){x, weight, bias}, 2, (const lt_tensor *[]){x, wc}, &g,
                 sizeof g) != LT_OK)
    goto fail;
  lt_tensor_free(wtmp);
  lt_tensor_free(col);
  lt_tensor_free(yt);
  return y;
fail:
  lt_tensor_free(wtmp);
  lt_tensor_free(col);
  lt_tensor_free(yt);
  lt_tensor_free(y);
  return NULL;
}

/* What both convolution backwards start with: the bias gradient (input 2;
 * unless bias_later: conv2d's oneDNN weight gradient may give it),
 * and zero gradients for x and W when there are no positions (NL = 0).
 * *go is gout in x's dtype when products remain to be done, else NULL. */
static lt_status conv_bw_begin(const lt_node *node, const lt_tensor *gout, lt_tensor **gin, int64_t NL,
                               bool bias_later, const lt_tensor **go) {
  const lt_tensor *x = node->saved[0], *w = node->saved[1];
  const lt_dtype dt = x->dtype;
  const lt_tensor *g = grad_as(gout, dt);
  if (!g) return lt_last_status();
  if (!bias_later && lt__needs_input_grad(node, 2) && !(gin[2] = channel_sum(g, dt))) return lt_last_status();
  const bool need_x = lt__needs_input_grad(node, 0), need_w = lt__needs_input_grad(node, 1);
  if (NL == 0) {
    if (need_x && !(gin[0] = lt_zeros(dt, 4, x->shape))) return lt_last_status();
    if (need_w && !(gin[1] = lt_zeros(dt, 4, w->shape))) return lt_last_status();
  }
  *go = NL > 0 && (need_x || need_w) ? g : NULL;
  return LT_OK;
}

/* y = conv2d(x, W) + b. Saved: x, W (contiguous); aux: the geometry.
 * dW_g = G^T_g · COL_g^T, dCOL_g = W_g^T · G^T_g, dx = col2im(dCOL), db = sum g. */
lt_status lt__bw_conv2d(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt_tensor *x = node->saved[0], *w = node->saved[1];
  const lt__conv_geom *g = (const lt__conv_geom *)node->aux;
  const lt_dtype dt = x->dtype;
  const int64_t Cout = w->shape[0], G = g->groups, K = g->C * g->kh * g->kw, L = g->OH * g->OW, NL = g->N * L;
  const lt_tensor *go = NULL;
  /* oneDNN's weight gradient gives the bias gradient along (else channel_sum). */
  bool need_b = dt == LT_DTYPE_F32 && NL > 0 && lt__needs_input_grad(node, 1) && lt__needs_input_grad(node, 2);
  if (conv_bw_begin(node, gout, gin, NL, need_b, &go) != LT_OK) return lt_last_status();
  if (!go) return LT_OK;
  bool need_x = lt__needs_input_grad(node, 0), need_w = lt__needs_input_grad(node, 1);
  if (dt == LT_DTYPE_F32) { /* oneDNN's direct kernels, for the passes it has them */
    lt_tensor *xtmp = NULL, *gtmp = NULL;
    /* x only for the weight gradient: the input gradient reads dy and W. */
    const lt_tensor *xc = need_w ? lt__as_contig(x, dt, &xtmp) : x;
    const lt_tensor *gc = xc ? lt__as_contig(go, dt, &gtmp) : NULL;
    const lt__dnnl_conv dg = dnnl_geom(g, Cout);
    lt_status st = gc ? LT_OK : lt_last_status();
    bool taken = false;
    if (st == LT_OK && need_w) {
      if (!(gin[1] = lt_empty(dt, 4, w->shape)) || (need_b && !(gin[2] = lt_empty(dt, 1, &Cout))))
        st = lt_last_status();
      else st = dnnl_pass(LT__DNNL_CONV_BWD_W, &dg, xc->data, NULL, NULL, NULL, NULL, gin[1]->data,
                          need_b ? gin[2]->data : NULL, gc->data, &taken);
      if (st == LT_OK && taken) need_w = need_b = false;
      else {
        lt_tensor_free(gin[1]), gin[1] = NULL;
        if (need_b) lt_tensor_free(gin[2]), gin[2] = NULL;
      }
    }
    if (st == LT_OK && need_x) {
      if (!(gin[0] = lt_empty(dt, 4, x->shape))) st = lt_last_status();
      else st = dnnl_pass(LT__DNNL_CONV_BWD_X, &dg, NULL, w, NULL, NULL, gin[0]->data, NULL, NULL, gc->data,
                          &taken);
      if (st == LT_OK && taken) need_x = false;
      else lt_tensor_free(gin[0]), gin[0] = NULL;
    }
    lt_tensor_free(xtmp);
    lt_tensor_free(gtmp);
    if (st == LT_OK && need_b && !(gin[2] = channel_sum(go, dt))) st = lt_last_status();
    if (st != LT_OK) return st;
    if (!need_x && !need_w) return LT_OK;
  }
  /* G^T for the whole batch, then slice by slice of NB images (conv_slice):
   * dW accumulates over the slices in order; dx is written slice by slice. */
  const size_t es = lt_dtype_size(dt);
  const int64_t NB = conv_slice(g, K, es);
  lt_tensor *gt = lt_empty(dt, 2, (const int64_t[]){Cout, NL});
  lt_tensor *col = lt_empty(dt, 1, (const int64_t[]){K * NB * L});
  lt_tensor *dw = need_w ? lt_empty(dt, 4, w->shape) : NULL, *dx = need_x ? lt_empty(dt, 4, x->shape) : NULL;
  if (!gt || !col || (need_w && !dw) || (need_x && !dx)) return lt_last_status();
  to_cm(go, gt->data);
  const lt__mat Wm = LT__MAT(w->data, Cout, K / G, K / G, 1);
  for (int64_t n0 = 0; n0 < g->N; n0 += NB) {
    const int64_t nb = g->N - n0 < NB ? g->N - n0 : NB, nbL = nb * L;
    const lt__mat GT = LT__MAT((char *)gt->data + (size_t)(n0 * L) * es, Cout, nbL, NL, 1);
    const lt__mat COL = LT__MAT(col->data, K, nbL, nbL, 1);
    if (need_w) { /* dW_g [C_out/G, K_g] (+)= G^T_g · COL_g^T */
      im2col_n(dt, g, x, n0, nb, col->data, L, nbL);
      if (gemm_groups(dt, G, n0 ? 1.0 : 0.0, GT, false, COL, true, LT__MAT(dw->data, Cout, K / G, K / G, 1)) != LT_OK)
        return lt_last_status();
    }
    if (need_x) { /* dCOL_g [K_g, nb L] = W_g^T · G^T_g, then col2im */
      if (gemm_groups(dt, G, 0.0, Wm, true, GT, false, COL) != LT_OK) return lt_last_status();
      col2im_n(dt, g, n0, nb, col->data, L, nbL, dx->data);
    }
  }
  if (dx) gin[0] = dx;
  if (dw) gin[1] = dw;
  return LT_OK;
}

/* ======================================================================== */
/* conv_transpose2d                                                         */
/* ======================================================================== */

lt_tensor *lt_conv_transpose2d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias,
                               const lt_conv_opts *opts) {
  const char *op = "conv_transpose2d";
  const lt_conv_opts *o = opts ? opts : &conv_defaults;
  if (check_conv(op, x, weight, bias, o, true) != LT_OK || check_conv_opts(op, o, 2) != LT_OK) return NULL;
  if (o->padding_same) return lt__err(LT_ERR_INVALID, "%s: padding 'same' is not supported", op), NULL;
  for (int d = 0; d < 2; d++)
    if (o->output_padding[d] < 0 || (o->output_padding[d] >= o->stride[d] && o->output_padding[d] >= o->dilation[d]))
      return lt__err(LT_ERR_INVALID, "%s: output_padding %lld (dim %d) must be >= 0 and smaller than stride %lld "
                     "or dilation %lld",
                     op, (long long)o->output_padding[d], d, (long long)o->stride[d], (long long)o->dilation[d]),
             NULL;
  const int64_t G = o->groups, Cout = weight->shape[1] * G, kh = weight->shape[2], kw = weight->shape[3];
  const int64_t H = x->shape[2], W = x->shape[3];
  const int64_t OH = (H - 1) * o->stride[0] - 2 * o->padding[0] + o->dilation[0] * (kh - 1) + o->output_padding[0] + 1;
  const int64_t OW = (W - 1) * o->stride[1] - 2 * o->padding[1] + o->dilation[1] * (kw - 1) + o->output_padding[1] + 1;
  if (OH < 1 || OW < 1)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, weight is %s: the output size %lldx%lld is too small", op, LT__D(x),
                   LT__D(weight), (long long)OH, (long long)OW),
           NULL;
  /* The geometry of the conv2d whose input gradient this is: image [N, C_out, OH, OW], positions H x W. */
  const lt__conv_geom g = {.N = x->shape[0], .C = Cout, .H = OH, .W = OW, .kh = kh, .kw = kw, .sh = o->stride[0],
                  .sw = o->stride[1], .ph = o->padding[0], .pw = o->padding[1], .dh = o->dilation[0],
                  .dw = o->dilation[1], .OH = H, .OW = W, .groups = G};
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_dtype dt = x->dtype;
  const int64_t Cin = x->shape[1], K = Cout * kh * kw, L = H * W, NL = g.N * L;
  lt_tensor *wtmp = NULL, *col = NULL, *xt = NULL, *y = NULL;
  const lt_tensor *wc = lt__as_contig(weight, dt, &wtmp);
  if (!wc) goto fail;
  if (!(y = lt_empty(dt, 4, (const int64_t[]){g.N, Cout, OH, OW}))) goto fail;
  if (NL > 0) {
    if (!(col = lt_empty(dt, 2, (const int64_t[]){K, NL})) || !(xt = lt_empty(dt, 2, (const int64_t[]){Cin, NL})))
      goto fail;
    to_cm(x, xt->data);
    /* COL_g [K_g, NL] = W_g^T [K_g, C_in/G] · X^T_g [C_in/G, NL] */
    if (gemm_groups(dt, G, 0.0, LT__MAT(wc->data, Cin, K / G, K / G, 1), true, LT__MAT(xt->data, Cin, NL, NL, 1),
                    false, LT__MAT(col->data, K, NL, NL, 1)) != LT_OK)
      goto fail;
    col2im(dt, &g, col->data, L, NL, y->data, bias);
  }
  if (lt__record(y, LT__OP_conv_transpose2d, 3, (const lt_tensor *[]){x, weight, bias}, 2,
                 (const lt_tensor *[]){x, wc}, &g, sizeof g) != LT_OK)
    goto fail;
  lt_tensor_free(wtmp);
  lt_tensor_free(col);
  lt_tensor_free(xt);
  return y;
fail:
  lt_tensor_free(wtmp);
  lt_tensor_free(col);
  lt_tensor_free(xt);
  lt_tensor_free(y);
  return NULL;
}

/* y = col2im(W^T X^T) + b. Saved: x, W (contiguous); aux: the geometry.
 * COL = im2col(g); dx^T_g = W_g · COL_g; dW_g = X^T_g · COL_g^T; db = sum g. */
lt_status lt__bw_conv_transpose2d(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt_tensor *x = node->saved[0], *w = node->saved[1];
  const lt__conv_geom *g = (const lt__conv_geom *)node->aux;
  const lt_dtype dt = x->dtype;
  const int64_t Cin = x->shape[1], G = g->groups, K = g->C * g->kh * g->kw, L = g->OH * g->OW, NL = g->N * L;
  const lt_tensor *go = NULL;
  if (conv_bw_begin(node, gout, gin, NL, false, &go) != LT_OK) return lt_last_status();
  if (!go) return LT_OK;
  const bool need_x = lt__needs_input_grad(node, 0), need_w = lt__needs_input_grad(node, 1);
  lt_tensor *col = lt_empty(dt, 2, (const int64_t[]){K, NL});
  lt_tensor *t = lt_empty(dt, 2, (const int64_t[]){Cin, NL});
  if (!col || !t) return lt_last_status();
  im2col(dt, g, go, col->data, L, NL);
  const lt__mat COL = LT__MAT(col->data, K, NL, NL, 1), T = LT__MAT(t->data, Cin, NL, NL, 1);
  if (need_w) { /* dW_g [C_in/G, K_g] = X^T_g · COL_g^T */
    lt_tensor *dw = lt_empty(dt, 4, w->shape);
    if (!dw) return lt_last_status();
    to_cm(x, t->data);
    if (gemm_groups(dt, G, 0.0, T, false, COL, true, LT__MAT(dw->data, Cin, K / G, K / G, 1)) != LT_OK)
      return lt_last_status();
    gin[1] = dw;
  }
  if (need_x) { /* dx^T_g [C_in/G, NL] = W_g · COL_g */
    lt_tensor *dx = lt_empty(dt, 4, x->shape);
    if (!dx) return lt_last_status();
    if (gemm_groups(dt, G, 0.0, LT__MAT(w->data, Cin, K / G, K / G, 1), false, COL, false, T) != LT_OK)
      return lt_last_status();
    from_cm(dt, t->data, dx->data, g->N, Cin, L, NULL);
    gin[0] = dx;
  }
  return LT_OK;
}

/* ======================================================================== */
/* conv1d: conv2d on [N, C, 1, L] views                                     */
/* ======================================================================== */

/* A 1-d convolution (or its transpose) as the 2-d one on [N, C, 1, L] views:
 * the options' first entries become the second dimension's, the first
 * dimension has stride 1 and no padding. wshape names the weight's layout in
 * the message. */
typedef lt_tensor *(*conv2d_fn)(const lt_tensor *, const lt_tensor *, const lt_tensor *, const lt_conv_opts *);
static lt_tensor *conv_as_2d(const char *op, const char *wshape, conv2d_fn f, const lt_tensor *x,
                             const lt_tensor *weight, const lt_tensor *bias, const lt_conv_opts *opts) {
  if (!x) return lt__err_null(op, "x"), NULL;
  if (!weight) return lt__err_null(op, "weight"), NULL;
  if (x->ndim != 3 || weight->ndim != 3)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, weight is %s: x must be [N, C_in, L] and weight %s", op, LT__D(x),
                   LT__D(weight), wshape),
           NULL;
  const lt_conv_opts *o = opts ? opts : &conv_defaults;
  lt_conv_opts o2 = *o;
  o2.stride[0] = 1, o2.stride[1] = o->stride[0];
  o2.padding[0] = 0, o2.padding[1] = o->padding[0];
  o2.dilation[0] = 1, o2.dilation[1] = o->dilation[0];
  o2.output_padding[0] = 0, o2.output_padding[1] = o->output_padding[0];
  lt_tensor *x4 = lt_unsqueeze(x, 2), *w4 = lt_unsqueeze(weight, 2), *y4 = NULL, *y = NULL;
  if (x4 && w4 && (y4 = f(x4, w4, bias, &o2))) y = lt_squeeze(y4, 2);
  lt_tensor_free(x4);
  lt_tensor_free(w4);
  lt_tensor_free(y4);
  return y;
}

lt_tensor *lt_conv1d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias, const lt_conv_opts *opts) {
  return conv_as_2d("conv1d", "[C_out, C_in/groups, k]", lt_conv2d, x, weight, bias, opts);
}

lt_tensor *lt_conv_transpose1d(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias,
                               const lt_conv_opts *opts) {
  return conv_as_2d("conv_transpose1d", "[C_in, C_out/groups, k]", lt_conv_transpose2d, x, weight, bias, opts);
}

/* ======================================================================== */
/* unfold / fold                                                            */
/* ======================================================================== */

/* The geometry of unfold on [N, C, H, W] (fold: its output size). */
static lt_status fold_geom(const char *op, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw,
                           const lt_conv_opts *o, lt__conv_geom *g) {
  if (kh < 1 || kw < 1) return lt__err(LT_ERR_INVALID, "%s: kernel %lldx%lld must be >= 1", op, (long long)kh, (long long)kw);
  lt_status s = check_conv_opts(op, o, 2);
  if (s != LT_OK) return s;
  *g = (lt__conv_geom){.N = N, .C = C, .H = H, .W = W, .kh = kh, .kw = kw, .sh = o->stride[0],
                       .sw = o->stride[1], .ph = o->padding[0], .pw = o->padding[1], .dh = o->dilation[0],
                       .dw = o->dilation[1], .groups = 1};
  const int64_t eh = g->dh * (kh - 1) + 1, ew = g->dw * (kw - 1) + 1;
  if (eh > H + 2 * g->ph || ew > W + 2 * g->pw)
    return lt__err(LT_ERR_SHAPE, "%s: image [%lld, %lld, %lld, %lld]: the (dilated) kernel %lldx%lld is larger than "
                   "the padded input %lldx%lld",
                   op, (long long)N, (long long)C, (long long)H, (long long)W, (long long)eh, (long long)ew,
                   (long long)(H + 2 * g->ph), (long long)(W + 2 * g->pw));
  g->OH = lt__conv_out_size(H, kh, g->sh, g->ph, g->ph, g->dh, false);
  g->OW = lt__conv_out_size(W, kw, g->sw, g->pw, g->pw, g->dw, false);
  return LT_OK;
}

lt_tensor *lt_unfold(const lt_tensor *x, int64_t kh, int64_t kw, const lt_conv_opts *opts) {
  const char *op = "unfold";
  if (!x) return lt__err_null(op, "x"), NULL;
  if (lt__conv_check_float(op, x, NULL, NULL) != LT_OK) return NULL;
  if (x->ndim != 4) return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [N, C, H, W]", op, LT__D(x)), NULL;
  lt__conv_geom g;
  if (fold_geom(op, x->shape[0], x->shape[1], x->shape[2], x->shape[3], kh, kw, opts ? opts : &conv_defaults, &g) !=
      LT_OK)
    return NULL;
  const int64_t K = g.C * kh * kw, L = g.OH * g.OW;
  lt_tensor *y = lt_empty(x->dtype, 3, (const int64_t[]){g.N, K, L});
  if (!y) return NULL;
  if (y->numel > 0) im2col(x->dtype, &g, x, y->data, K * L, L);
  if (lt__record(y, LT__OP_unfold, 1, &x, 0, NULL, &g, sizeof g) != LT_OK) return lt_tensor_free(y), NULL;
  return y;
}

/* The col2im of x [N, C kh kw, L] (any strides) into a new [N, C, H, W]. */
static lt_tensor *fold_into(const lt__conv_geom *g, const lt_tensor *x) {
  lt_tensor *tmp = NULL;
  const lt_tensor *xc = lt__as_contig(x, x->dtype, &tmp);
  lt_tensor *y = xc ? lt_empty(x->dtype, 4, (const int64_t[]){g->N, g->C, g->H, g->W}) : NULL;
  const int64_t K = g->C * g->kh * g->kw, L = g->OH * g->OW;
  if (y && y->numel > 0) col2im(x->dtype, g, xc->data, K * L, L, y->data, NULL);
  lt_tensor_free(tmp);
  return y;
}

lt_status lt__bw_unfold(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt__conv_geom *g = (const lt__conv_geom *)node->aux;
  const lt_tensor *go = grad_as(gout, node->in[0].dtype);
  if (!go || !(gin[0] = fold_into(g, go))) return lt_last_status();
  return LT_OK;
}

lt_tensor *lt_fold(const lt_tensor *x, int64_t H, int64_t W, int64_t kh, int64_t kw, const lt_conv_opts *opts) {
  const char *op = "fold";
  if (!x) return lt__err_null(op, "x"), NULL;
  if (lt__conv_check_float(op, x, NULL, NULL) != LT_OK) return NULL;
  if (x->ndim != 3) return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [N, C kh kw, L]", op, LT__D(x)), NULL;
  if (H < 1 || W < 1 || kh < 1 || kw < 1 || x->shape[1] % (kh * kw) != 0)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, output %lldx%lld, kernel %lldx%lld: dim 1 must be C kh kw and the "
                   "sizes >= 1",
                   op, LT__D(x), (long long)H, (long long)W, (long long)kh, (long long)kw),
           NULL;
  lt__conv_geom g;
  if (fold_geom(op, x->shape[0], x->shape[1] / (kh * kw), H, W, kh, kw, opts ? opts : &conv_defaults, &g) != LT_OK)
    return NULL;
  if (x->shape[2] != g.OH * g.OW)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s: an output %lldx%lld with kernel %lldx%lld has %lld blocks, x has %lld",
                   op, LT__D(x), (long long)H, (long long)W, (long long)kh, (long long)kw,
                   (long long)(g.OH * g.OW), (long long)x->shape[2]),
           NULL;
  lt_tensor *y = fold_into(&g, x);
  if (y && lt__record(y, LT__OP_fold, 1, &x, 0, NULL, &g, sizeof g) != LT_OK) return lt_tensor_free(y), NULL;
  return y;
}

lt_status lt__bw_fold(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt__conv_geom *g = (const lt__conv_geom *)node->aux;
  const lt_tensor *go = grad_as(gout, node->in[0].dtype);
  if (!go) return lt_last_status();
  const int64_t K = g->C * g->kh * g->kw, L = g->OH * g->OW;
  lt_tensor *dx = lt_empty(go->dtype, 3, (const int64_t[]){g->N, K, L});
  if (!dx) return lt_last_status();
  if (dx->numel > 0) im2col(go->dtype, g, go, dx->data, K * L, L);
  gin[0] = dx;
  return LT_OK;
}
