/*
 * nn/pool.c: pooling in NCHW (max_pool1d/2d with indices, avg_pool1d/2d,
 * adaptive_avg_pool2d), forward and backward side by side. Public API and
 * semantics: nn/conv.h. The 1-d forms are the 2-d ones on a height of one.
 *
 * Each output plane (n, c) is computed by one thread, and each backward
 * writes disjoint (n, c) planes of dx, so results do not depend on the
 * thread count. Max pooling keeps the flat index of each maximum in its
 * plane (PyTorch's indices), and its backward scatters through them; the
 * 2x2, stride 2 window without padding or dilation has a kernel of its own.
 *
 * What this is not: convolution or im2col (nn/conv.c, whose window geometry
 * and output-size rule it shares through nn/conv_internal.h).
 */
#include "nn/conv_internal.h"

#include "tensor/cpu_internal.h"
#include "tensor/graph_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/error_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Pooling geometry: reuses lt__conv_geom (C = channels, groups unused). */
static lt_status pool_geom(const char *op, const lt_tensor *x, const lt_pool_opts *o, bool dilation_ok,
                           lt__conv_geom *g) {
  if (!x) return lt__err_null(op, "x");
  if (!o) return lt__err_null(op, "opts");
  lt_status s = lt__conv_check_float(op, x, NULL, NULL);
  if (s != LT_OK) return s;
  if (x->ndim != 4) return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [N, C, H, W]", op, LT__D(x));
  for (int d = 0; d < 2; d++) {
    if (o->kernel[d] < 1 || o->stride[d] < 1 || o->dilation[d] < 1)
      return lt__err(LT_ERR_INVALID, "%s: kernel %lld, stride %lld, dilation %lld (dim %d): each must be >= 1", op,
                     (long long)o->kernel[d], (long long)o->stride[d], (long long)o->dilation[d], d);
    if (!dilation_ok && o->dilation[d] != 1)
      return lt__err(LT_ERR_INVALID, "%s: dilation %lld (dim %d): average pooling has no dilation", op,
                     (long long)o->dilation[d], d);
    if (o->padding[d] < 0 || o->padding[d] > o->kernel[d] / 2)
      return lt__err(LT_ERR_INVALID, "%s: padding %lld (dim %d) must be in [0, kernel / 2] = [0, %lld]", op,
                     (long long)o->padding[d], d, (long long)(o->kernel[d] / 2));
  }
  *g = (lt__conv_geom){.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3],
                       .kh = o->kernel[0], .kw = o->kernel[1], .sh = o->stride[0], .sw = o->stride[1],
                       .ph = o->padding[0], .pw = o->padding[1], .dh = o->dilation[0], .dw = o->dilation[1],
                       .groups = 1};
  g->OH = lt__conv_out_size(g->H, g->kh, g->sh, g->ph, g->ph, g->dh, o->ceil_mode);
  g->OW = lt__conv_out_size(g->W, g->kw, g->sw, g->pw, g->pw, g->dw, o->ceil_mode);
  if (g->OH < 1 || g->OW < 1)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, kernel %lldx%lld, padding %lldx%lld, dilation %lldx%lld: the output "
                   "size %lldx%lld is too small",
                   op, LT__D(x), (long long)g->kh, (long long)g->kw, (long long)g->ph, (long long)g->pw,
                   (long long)g->dh, (long long)g->dw, (long long)g->OH, (long long)g->OW);
  return LT_OK;
}

/* The 2x2 window of stride 2 without padding or dilation (the CNN's), over
 * rows with unit stride: the four values in the general loop's order, so
 * the same first maximum (and the same NaN rule) as there. idx may be NULL
 * (no backward will read it). */
#define MAXPOOL22_BODY(T, IDX)                                                                    \
  _Pragma("omp simd") for (int64_t ow = 0; ow < OW; ow++) {                                        \
    const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];               \
    /* branch-free (selects): the data decides each comparison at random */                        \
    T m = a;                                                                                       \
    int64_t k = 0;                                                                                 \
    const bool tb = (b > m) | (b != b);                                                            \
    m = tb ? b : m, k = tb ? 1 : k;                                                                \
    const bool tc = (c > m) | (c != c);                                                            \
    m = tc ? c : m, k = tc ? W : k;                                                                \
    const bool td = (d > m) | (d != d);                                                            \
    m = td ? d : m, k = td ? W + 1 : k;                                                            \
    y[ow] = m;                                                                                     \
    IDX;                                                                                           \
  }
/* One output row: r0, r1 the window's two input rows, base the flat
 * position of r0[0] in the plane (W its width); idx NULL: not wanted. In
 * a loop the compiler vectorises (the selects, the even and odd columns),
 * compiled per instruction set (LT__CLONES). */
#define DEF_MAXPOOL22_ROW(T, sfx)                                                                                \
  LT__CLONES static void maxpool22_row_##sfx(const T *restrict r0, const T *restrict r1, T *restrict y,           \
                                             int64_t *restrict idx, int64_t OW, int64_t base, int64_t W) {        \
    if (idx) {                                                                                                   \
      MAXPOOL22_BODY(T, idx[ow] = base + 2 * ow + k)                                                             \
    } else {                                                                                                     \
      MAXPOOL22_BODY(T, (void)k)                                                                                 \
    }                                                                                                            \
  }
DEF_MAXPOOL22_ROW(float, f32)
DEF_MAXPOOL22_ROW(double, f64)

#if defined(__x86_64__)
#define POOL22_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
/* maxpool22_row_f32 on AVX-512 (path pool=avx512): the same selects in the
 * same order, 16 outputs a step. A row of the CNN's planes has 7 or 14
 * outputs, too few for the compiler's vectorised loop, whose scalar
 * remainder branched on the data (mispredicted about half the time: the
 * pooling was 19% of a CNN training step). The two input rows are read
 * under masks and split into even and odd columns by permutes. */
POOL22_TARGET static void maxpool22_row_f32_avx512(const float *r0, const float *r1, float *y, int64_t *idx,
                                                   int64_t OW, int64_t base, int64_t W) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1), kw = _mm512_set1_epi32((int)W), kw1 = _mm512_set1_epi32((int)W + 1);
  for (int64_t o = 0; o < OW; o += 16) {
    const int64_t n = OW - o < 16 ? OW - o : 16, n2 = 2 * n;
    const __mmask16 m = (__mmask16)((1u << n) - 1);
    const __mmask16 mlo = n2 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n2) - 1);
    const __mmask16 mhi = n2 <= 16 ? (__mmask16)0 : (__mmask16)((1u << (n2 - 16)) - 1);
    const float *p0 = r0 + 2 * o, *p1 = r1 + 2 * o;
    const __m512 x0 = _mm512_maskz_loadu_ps(mlo, p0), x1 = _mm512_maskz_loadu_ps(mhi, p0 + 16);
    const __m512 z0 = _mm512_maskz_loadu_ps(mlo, p1), z1 = _mm512_maskz_loadu_ps(mhi, p1 + 16);
    const __m512 a = _mm512_permutex2var_ps(x0, ev, x1), b = _mm512_permutex2var_ps(x0, od, x1);
    const __m512 c = _mm512_permutex2var_ps(z0, ev, z1), d = _mm512_permutex2var_ps(z0, od, z1);
    __m512 mx = a;
    __m512i k = _mm512_setzero_si512();
    __mmask16 t = _mm512_cmp_ps_mask(b, mx, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    mx = _mm512_mask_mov_ps(mx, t, b), k = _mm512_mask_mov_epi32(k, t, one);
    t = _mm512_cmp_ps_mask(c, mx, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    mx = _mm512_mask_mov_ps(mx, t, c), k = _mm512_mask_mov_epi32(k, t, kw);
    t = _mm512_cmp_ps_mask(d, mx, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    mx = _mm512_mask_mov_ps(mx, t, d), k = _mm512_mask_mov_epi32(k, t, kw1);
    _mm512_mask_storeu_ps(y + o, m, mx);
    if (idx) { /* base + 2 (o + lane) + k (ev: 2 lane), in 64 bits */
      const __m512i off = _mm512_add_epi32(k, ev), b64 = _mm512_set1_epi64(base + 2 * o);
      const __m512i lo = _mm512_add_epi64(b64, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(off)));
      const __m512i hi = _mm512_add_epi64(b64, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(off, 1)));
      _mm512_mask_storeu_epi64(idx + o, (__mmask8)(m & 0xff), lo);
      _mm512_mask_storeu_epi64(idx + o + 8, (__mmask8)(m >> 8), hi);
    }
  }
}
#endif

/* A row of the f32 kernel: on AVX-512 where the path table allows it. */
static void pool22_row_f32(const float *r0, const float *r1, float *y, int64_t *idx, int64_t OW, int64_t base,
                           int64_t W) {
#if defined(__x86_64__)
  if (lt__path_on(LT__PATH_pool_avx512)) {
    maxpool22_row_f32_avx512(r0, r1, y, idx, OW, base, W);
    return;
  }
#endif
  maxpool22_row_f32(r0, r1, y, idx, OW, base, W);
}
#define POOL22_ROW_f32 pool22_row_f32
#define POOL22_ROW_f64 maxpool22_row_f64

#define DEF_MAXPOOL22(T, sfx)                                                                                    \
  static void maxpool22_plane_##sfx(const lt__conv_geom *g, const T *xp, int64_t rs, T *y, int64_t *idx) {       \
    for (int64_t oh = 0; oh < g->OH; oh++)                                                                       \
      POOL22_ROW_##sfx(xp + 2 * oh * rs, xp + (2 * oh + 1) * rs, y + oh * g->OW, idx ? idx + oh * g->OW : NULL,   \
                       g->OW, 2 * oh * g->W, g->W);                                                              \
  }
DEF_MAXPOOL22(float, f32)
DEF_MAXPOOL22(double, f64)

static bool is_pool22(const lt__conv_geom *g, const int64_t *xs) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 && g->dh == 1 &&
         g->dw == 1 && xs[3] == 1 && 2 * g->OH <= g->H && 2 * g->OW <= g->W;
}

/* Max pooling over (n, c) planes; idx (NULL: not wanted) gets flat positions
 * h W + w. */
#define DEF_MAXPOOL(T, sfx)                                                                                       \
  static void maxpool_##sfx(const lt__conv_geom *g, const T *x, const int64_t *xs, T *y, int64_t *idx) {         \
    const int64_t NC = g->N * g->C, L = g->OH * g->OW;                                                           \
    const int nt = lt__threads_for(NC * L * g->kh * g->kw, NC);                                                  \
    const bool p22 = is_pool22(g, xs);                                                                           \
    _Pragma("omp parallel for schedule(static) num_threads(nt)") for (int64_t nc = 0; nc < NC; nc++) {           \
      const T *xp = x + (nc / g->C) * xs[0] + (nc % g->C) * xs[1];                                               \
      if (p22) {                                                                                                 \
        maxpool22_plane_##sfx(g, xp, xs[2], y + nc * L, idx ? idx + nc * L : NULL);                              \
        continue;                                                                                                \
      }                                                                                                          \
      for (int64_t oh = 0; oh < g->OH; oh++)                                                                     \
        for (int64_t ow = 0; ow < g->OW; ow++) {                                                                 \
          int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;                                              \
          while (h0 < 0) h0 += g->dh;                                                                            \
          while (w0 < 0) w0 += g->dw;                                                                            \
          const int64_t h1 = oh * g->sh - g->ph + (g->kh - 1) * g->dh + 1;                                       \
          const int64_t w1 = ow * g->sw - g->pw + (g->kw - 1) * g->dw + 1;                                       \
          int64_t best = h0 * g->W + w0;                                                                         \
          T m = -(T)INFINITY;                                                                                    \
          for (int64_t h = h0; h < h1 && h < g->H; h += g->dh)                                                   \
            for (int64_t w = w0; w < w1 && w < g->W; w += g->dw) {                                               \
              const T v = xp[h * xs[2] + w * xs[3]];                                                             \
              if (v > m || isnan(v)) {                                                                           \
                m = v;                                                                                           \
                best = h * g->W + w;                                                                             \
              }                                                                                                  \
            }                                                                                                    \
          y[nc * L + oh * g->OW + ow] = m;                                                                       \
          if (idx) idx[nc * L + oh * g->OW + ow] = best;                                                         \
        }                                                                                                        \
    }                                                                                                            \
  }
DEF_MAXPOOL(float, f32)
DEF_MAXPOOL(double, f64)

lt_tensor *lt_max_pool2d(const lt_tensor *x, const lt_pool_opts *opts, lt_tensor **indices) {
  const char *op = "max_pool2d";
  if (indices) *indices = NULL;
  lt__conv_geom g;
  if (pool_geom(op, x, opts, true, &g) != LT_OK) return NULL;
  const int64_t shape[4] = {g.N, g.C, g.OH, g.OW};
  /* The indices only if the caller or a backward wants them. */
  const bool want_idx = indices || lt__needs_grad(1, &x);
  lt_tensor *y = lt_empty(x->dtype, 4, shape), *idx = want_idx ? lt_empty(LT_DTYPE_I64, 4, shape) : NULL;
  if (!y || (want_idx && !idx)) goto fail;
  if (y->numel > 0) {
    int64_t *ix = idx ? idx->data : NULL;
    if (x->dtype == LT_DTYPE_F32) maxpool_f32(&g, x->data, x->stride, y->data, ix);
    else maxpool_f64(&g, x->data, x->stride, y->data, ix);
  }
  if (lt__record(y, LT__OP_max_pool2d, 1, &x, 1, (const lt_tensor *[]){idx}, &g, sizeof g) != LT_OK) goto fail;
  if (indices) *indices = idx;
  else lt_tensor_free(idx);
  return y;
fail:
  lt_tensor_free(y);
  lt_tensor_free(idx);
  return NULL;
}

/* y = x[idx]: dx[idx] += g, plane by plane (in parallel over planes). */
lt_status lt__bw_max_pool2d(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt__conv_geom *g = (const lt__conv_geom *)node->aux;
  const lt_tensor *idx = node->saved[0];
  const lt_dtype dt = node->in[0].dtype;
  lt_tensor *gtmp = NULL;
  const lt_tensor *go = lt__as_contig(gout, dt, &gtmp);
  lt_tensor *dx = go ? lt_zeros(dt, 4, (const int64_t[]){g->N, g->C, g->H, g->W}) : NULL;
  if (!dx) return lt_last_status();
  const int64_t NC = g->N * g->C, L = g->OH * g->OW, HW = g->H * g->W;
  const int64_t *ix = idx->data;
  const int nt = lt__threads_for(NC * L, NC);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t nc = 0; nc < NC; nc++) {
    if (dt == LT_DTYPE_F32) {
      const float *gp = (const float *)go->data + nc * L;
      float *dp = (float *)dx->data + nc * HW;
      for (int64_t e = 0; e < L; e++) dp[ix[nc * L + e]] += gp[e];
    } else {
      const double *gp = (const double *)go->data + nc * L;
      double *dp = (double *)dx->data + nc * HW;
      for (int64_t e = 0; e < L; e++) dp[ix[nc * L + e]] += gp[e];
    }
  }
  gin[0] = dx;
  return LT_OK;
}

/* The options of a 1-d pooling of x [N, C, L] as a 2-d pooling of
 * [N, C, 1, L]: the given window along the width, a window of one along the
 * height. */
static lt_status pool1d_as_2d(const char *op, const lt_tensor *x, const lt_pool_opts *opts, lt_pool_opts *o) {
  if (!x) return lt__err_null(op, "x");
  if (!opts) return lt__err_null(op, "opts");
  if (x->ndim != 3) return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [N, C, L]", op, LT__D(x));
  *o = *opts;
  o->kernel[1] = o->kernel[0], o->stride[1] = o->stride[0], o->padding[1] = o->padding[0];
  o->dilation[1] = o->dilation[0];
  o->kernel[0] = 1, o->stride[0] = 1, o->padding[0] = 0, o->dilation[0] = 1;
  return LT_OK;
}

lt_tensor *lt_max_pool1d(const lt_tensor *x, const lt_pool_opts *opts, lt_tensor **indices) {
  const char *op = "max_pool1d";
  if (indices) *indices = NULL;
  lt_pool_opts o;
  if (pool1d_as_2d(op, x, opts, &o) != LT_OK) return NULL;
  lt_tensor *x4 = lt_unsqueeze(x, 2), *idx4 = NULL, *y4 = x4 ? lt_max_pool2d(x4, &o, indices ? &idx4 : NULL) : NULL;
  lt_tensor *y = y4 ? lt_squeeze(y4, 2) : NULL;
  if (y && indices && !(*indices = lt_squeeze(idx4, 2))) lt_tensor_free(y), y = NULL;
  lt_tensor_free(x4);
  lt_tensor_free(y4);
  lt_tensor_free(idx4);
  return y;
}

/* The window of output (oh, ow) in avg pooling, clipped to the input, and its divisor. */
typedef struct win {
  int64_t h0, h1, w0, w1;
  double div;
} win;

static win avg_window(const lt__conv_geom *g, const lt_pool_opts *o, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
  int64_t h1 = h0 + g->kh, w1 = w0 + g->kw;
  if (h1 > g->H + g->ph) h1 = g->H + g->ph;
  if (w1 > g->W + g->pw) w1 = g->W + g->pw;
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0;
  h1 = h1 > g->H ? g->H : h1, w1 = w1 > g->W ? g->W : w1;
  win r = {h0, h1, w0, w1, 0};
  if (o->divisor_override > 0) r.div = (double)o->divisor_override;
  else r.div = (double)(o->count_include_pad ? padded : (h1 - h0) * (w1 - w0));
  return r;
}

/* aux of avg_pool2d: the geometry and the options (for the divisors). */
typedef struct avg_aux {
  lt__conv_geom g;
  bool ceil_mode, count_include_pad;
  int32_t divisor_override;
} avg_aux;

lt_tensor *lt_avg_pool2d(const lt_tensor *x, const lt_pool_opts *opts) {
  const char *op = "avg_pool2d";
  avg_aux a;
  if (pool_geom(op, x, opts, false, &a.g) != LT_OK) return NULL;
  if (opts->divisor_override < 0 || opts->divisor_override > INT32_MAX)
    return lt__err(LT_ERR_INVALID, "%s: divisor_override %lld must be >= 0 (0: none)", op,
                   (long long)opts->divisor_override),
           NULL;
  a.ceil_mode = opts->ceil_mode, a.count_include_pad = opts->count_include_pad;
  a.divisor_override = (int32_t)opts->divisor_override;
  const lt__conv_geom *g = &a.g;
  lt_tensor *y = lt_empty(x->dtype, 4, (const int64_t[]){g->N, g->C, g->OH, g->OW});
  if (!y) return NULL;
  const int64_t NC = g->N * g->C, L = g->OH * g->OW;
  const lt_dtype dt = x->dtype;
  const size_t es = lt_dtype_size(dt);
  const int nt = lt__threads_for(NC * L * g->kh * g->kw, NC);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t nc = 0; nc < NC; nc++) {
    const char *xp = (const char *)x->data + (size_t)((nc / g->C) * x->stride[0] + (nc % g->C) * x->stride[1]) * es;
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        const win wn = avg_window(g, opts, oh, ow);
        double s = 0;
        for (int64_t h = wn.h0; h < wn.h1; h++)
          for (int64_t w = wn.w0; w < wn.w1; w++)
            s += lt__load(xp + (size_t)(h * x->stride[2] + w * x->stride[3]) * es, dt);
        lt__store((char *)y->data + (size_t)(nc * L + oh * g->OW + ow) * es, dt, s / wn.div);
      }
  }
  if (lt__record(y, LT__OP_avg_pool2d, 1, &x, 0, NULL, &a, sizeof a) != LT_OK) return lt_tensor_free(y), NULL;
  return y;
}

lt_status lt__bw_avg_pool2d(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const avg_aux *a = (const avg_aux *)node->aux;
  const lt__conv_geom *g = &a->g;
  const lt_pool_opts o = {.ceil_mode = a->ceil_mode, .count_include_pad = a->count_include_pad,
                          .divisor_override = a->divisor_override};
  const lt_dtype dt = node->in[0].dtype;
  const size_t es = lt_dtype_size(dt);
  lt_tensor *gtmp = NULL;
  const lt_tensor *go = lt__as_contig(gout, LT_DTYPE_F64, &gtmp);
  lt_tensor *dx = go ? lt_zeros(LT_DTYPE_F64, 4, (const int64_t[]){g->N, g->C, g->H, g->W}) : NULL;
  if (!dx) return lt_last_status();
  const int64_t NC = g->N * g->C, L = g->OH * g->OW, HW = g->H * g->W;
  const int nt = lt__threads_for(NC * L * g->kh * g->kw, NC);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t nc = 0; nc < NC; nc++) {
    const double *gp = (const double *)go->data + nc * L;
    double *dp = (double *)dx->data + nc * HW;
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        const win wn = avg_window(g, &o, oh, ow);
        const double v = gp[oh * g->OW + ow] / wn.div;
        for (int64_t h = wn.h0; h < wn.h1; h++)
          for (int64_t w = wn.w0; w < wn.w1; w++) dp[h * g->W + w] += v;
      }
  }
  (void)es;
  gin[0] = dt == LT_DTYPE_F64 ? dx : lt_to_dtype(dx, dt);
  return gin[0] ? LT_OK : lt_last_status();
}

lt_tensor *lt_avg_pool1d(const lt_tensor *x, const lt_pool_opts *opts) {
  const char *op = "avg_pool1d";
  lt_pool_opts o;
  if (pool1d_as_2d(op, x, opts, &o) != LT_OK) return NULL;
  o.divisor_override = 0;
  lt_tensor *x4 = lt_unsqueeze(x, 2), *y4 = x4 ? lt_avg_pool2d(x4, &o) : NULL;
  lt_tensor *y = y4 ? lt_squeeze(y4, 2) : NULL;
  lt_tensor_free(x4);
  lt_tensor_free(y4);
  return y;
}

/* Adaptive windows: rows floor(i H / OH) .. ceil((i + 1) H / OH). */
static int64_t ad_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
static int64_t ad_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

lt_tensor *lt_adaptive_avg_pool2d(const lt_tensor *x, int64_t OH, int64_t OW) {
  const char *op = "adaptive_avg_pool2d";
  if (!x) return lt__err_null(op, "x"), NULL;
  if (lt__conv_check_float(op, x, NULL, NULL) != LT_OK) return NULL;
  if (x->ndim != 4) return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [N, C, H, W]", op, LT__D(x)), NULL;
  if (OH < 1 || OW < 1)
    return lt__err(LT_ERR_INVALID, "%s: output size %lldx%lld must be >= 1", op, (long long)OH, (long long)OW), NULL;
  const lt__conv_geom g = {.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .OH = OH, .OW = OW};
  if (g.H < 1 || g.W < 1)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s: H and W must be >= 1", op, LT__D(x)), NULL;
  lt_tensor *y = lt_empty(x->dtype, 4, (const int64_t[]){g.N, g.C, OH, OW});
  if (!y) return NULL;
  const lt_dtype dt = x->dtype;
  const size_t es = lt_dtype_size(dt);
  const int64_t NC = g.N * g.C;
  const int nt = lt__threads_for(NC * g.H * g.W, NC);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t nc = 0; nc < NC; nc++) {
    const char *xp = (const char *)x->data + (size_t)((nc / g.C) * x->stride[0] + (nc % g.C) * x->stride[1]) * es;
    for (int64_t i = 0; i < OH; i++)
      for (int64_t j = 0; j < OW; j++) {
        const int64_t h0 = ad_start(i, g.H, OH), h1 = ad_end(i, g.H, OH);
        const int64_t w0 = ad_start(j, g.W, OW), w1 = ad_end(j, g.W, OW);
        double s = 0;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) s += lt__load(xp + (size_t)(h * x->stride[2] + w * x->stride[3]) * es, dt);
        lt__store((char *)y->data + (size_t)((nc * OH + i) * OW + j) * es, dt, s / (double)((h1 - h0) * (w1 - w0)));
      }
  }
  if (lt__record(y, LT__OP_adaptive_avg_pool2d, 1, &x, 0, NULL, &g, sizeof g) != LT_OK)
    return lt_tensor_free(y), NULL;
  return y;
}

lt_status lt__bw_adaptive_avg_pool2d(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt__conv_geom *g = (const lt__conv_geom *)node->aux;
  const lt_dtype dt = node->in[0].dtype;
  lt_tensor *gtmp = NULL;
  const lt_tensor *go = lt__as_contig(gout, LT_DTYPE_F64, &gtmp);
  lt_tensor *dx = go ? lt_zeros(LT_DTYPE_F64, 4, (const int64_t[]){g->N, g->C, g->H, g->W}) : NULL;
  if (!dx) return lt_last_status();
  const int64_t NC = g->N * g->C;
  const int nt = lt__threads_for(NC * g->H * g->W, NC);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t nc = 0; nc < NC; nc++) {
    const double *gp = (const double *)go->data + nc * g->OH * g->OW;
    double *dp = (double *)dx->data + nc * g->H * g->W;
    for (int64_t i = 0; i < g->OH; i++)
      for (int64_t j = 0; j < g->OW; j++) {
        const int64_t h0 = ad_start(i, g->H, g->OH), h1 = ad_end(i, g->H, g->OH);
        const int64_t w0 = ad_start(j, g->W, g->OW), w1 = ad_end(j, g->W, g->OW);
        const double v = gp[i * g->OW + j] / (double)((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) dp[h * g->W + w] += v;
      }
  }
  gin[0] = dt == LT_DTYPE_F64 ? dx : lt_to_dtype(dx, dt);
  return gin[0] ? LT_OK : lt_last_status();
}
