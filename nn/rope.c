/*
 * nn/rope.c: rotary position embedding (RoPE, Su et al. 2021, "RoFormer"),
 * in the GPT-NeoX / LLaMA (Hugging Face) "rotate half" layout, forward and
 * backward.
 *
 * What this is: for x [..., T, HS] (HS even, H = HS/2), the row of position
 * pos = pos0 + t is rotated pairwise, pair i being (x_i, x_{i+H}):
 *     theta_i     = pos * base^(-2i/HS)
 *     out_i       = x_i cos(theta_i) - x_{i+H} sin(theta_i)
 *     out_{i+H}   = x_{i+H} cos(theta_i) + x_i sin(theta_i)
 * A rotation is orthogonal, so the backward is the inverse rotation (the
 * same kernel with sin negated): dx_i = g_i cos + g_{i+H} sin, dx_{i+H} =
 * g_{i+H} cos - g_i sin. The cos/sin table [T, H] is computed in double and
 * rounded once to the tensor's dtype; nothing is saved for backward.
 *
 * Scaled frequencies (lt_rope_scaled: linear, Llama 3's) replace
 * base^(-2i/HS) by lt_rope_inv_freq's, transformers' rope_parameters rules;
 * the rotation and its backward are the same.
 *
 * What this is not: the interleaved (GPT-J / original RoFormer) layout that
 * pairs (x_{2i}, x_{2i+1}), nor a cached table shared across calls (it costs
 * T*H sin/cos, small next to the attention it feeds).
 */
#include "nn/nn.h"

#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <stdlib.h>

typedef struct rope_aux {
  int64_t pos0;
  double base;
  lt_rope_scaling sc; /* type LT_ROPE_DEFAULT: unscaled */
} rope_aux;

lt_status lt_rope_scaling_check(const lt_rope_scaling *sc) {
  if (!sc || sc->type == LT_ROPE_DEFAULT) return LT_OK;
  if (sc->type != LT_ROPE_LINEAR && sc->type != LT_ROPE_LLAMA3)
    return lt__err(LT_ERR_INVALID, "rope: scaling type %d: must be LT_ROPE_DEFAULT, LT_ROPE_LINEAR or LT_ROPE_LLAMA3",
                   (int)sc->type);
  if (!(sc->factor > 0) || isinf(sc->factor))
    return lt__err(LT_ERR_INVALID, "rope: scaling factor %g: must be finite and > 0", sc->factor);
  if (sc->type == LT_ROPE_LLAMA3) {
    if (!(sc->low_freq_factor > 0) || !(sc->high_freq_factor > sc->low_freq_factor) || isinf(sc->high_freq_factor))
      return lt__err(LT_ERR_INVALID, "rope: llama3 scaling: low_freq_factor %g, high_freq_factor %g: need 0 < low < "
                     "high, finite", sc->low_freq_factor, sc->high_freq_factor);
    if (sc->original_max_len < 1)
      return lt__err(LT_ERR_INVALID, "rope: llama3 scaling: original_max_len %lld: must be >= 1",
                     (long long)sc->original_max_len);
  }
  return LT_OK;
}

/* transformers' _compute_linear_scaling_rope_parameters and
 * _compute_llama3_parameters (modeling_rope_utils.py), in double. */
double lt_rope_inv_freq(int64_t i, int64_t HS, double base, const lt_rope_scaling *sc) {
  const double inv = pow(base, -2.0 * (double)i / (double)HS);
  if (!sc || sc->type == LT_ROPE_DEFAULT) return inv;
  if (sc->type == LT_ROPE_LINEAR) return inv / sc->factor;
  const double pi = 3.14159265358979323846, L = (double)sc->original_max_len, w = 2.0 * pi / inv;
  if (w < L / sc->high_freq_factor) return inv;       /* high frequencies: kept */
  if (w > L / sc->low_freq_factor) return inv / sc->factor; /* low frequencies: scaled */
  const double a = (L / w - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
  return (1.0 - a) * inv / sc->factor + a * inv;
}

/* Rows r in [0, rows) of x seen as [outer..., T, HS] with x's strides;
 * y contiguous. cs: [T, H] cos then [T, H] sin (sign already applied). */
#define ROPE_KERNEL(NAME, TY)                                                                \
  static void rope_rows_##NAME(const lt_tensor *x, const TY *xd, TY *y, const TY *tab,        \
                               int64_t T, int64_t H) {                                        \
    const int nd = x->ndim;                                                                   \
    const int64_t rows = x->numel / (2 * H), sx = x->stride[nd - 1];                          \
    const TY *cs = tab, *sn = tab + T * H;                                                    \
    _Pragma("omp parallel for schedule(static) if (x->numel >= LT__PARALLEL_MIN)")            \
    for (int64_t r = 0; r < rows; r++) {                                                      \
      int64_t rem = r / T, off = (r % T) * x->stride[nd - 2];                                 \
      for (int d = nd - 3; d >= 0; d--) {                                                     \
        off += (rem % x->shape[d]) * x->stride[d];                                            \
        rem /= x->shape[d];                                                                   \
      }                                                                                       \
      const int64_t t = r % T;                                                                \
      const TY *xr = xd + off, *c = cs + t * H, *s = sn + t * H;                              \
      TY *yr = y + r * 2 * H;                                                                 \
      if (sx == 1) {                                                                          \
        for (int64_t i = 0; i < H; i++) yr[i] = xr[i] * c[i] - xr[i + H] * s[i];             \
        for (int64_t i = 0; i < H; i++) yr[i + H] = xr[i + H] * c[i] + xr[i] * s[i];         \
      } else {                                                                                \
        for (int64_t i = 0; i < H; i++) {                                                     \
          const TY a = xr[i * sx], b = xr[(i + H) * sx];                                      \
          yr[i] = a * c[i] - b * s[i];                                                        \
          yr[i + H] = b * c[i] + a * s[i];                                                    \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }
ROPE_KERNEL(f32, float)
ROPE_KERNEL(f64, double)

/* y = rotation of x (sign +1) or its inverse (sign -1); y is new contiguous.
 * x is float, ndim >= 2, last dim even. */
static lt_tensor *rope_apply(const char *op, const lt_tensor *x, int64_t pos0, double base, const lt_rope_scaling *sc,
                             double sign) {
  const int nd = x->ndim;
  const int64_t T = x->shape[nd - 2], HS = x->shape[nd - 1], H = HS / 2;
  lt_tensor *y = lt_empty(x->dtype, nd, x->shape);
  if (!y || x->numel == 0) return y;
  const size_t es = lt_dtype_size(x->dtype);
  void *tab = malloc((size_t)(2 * T * H) * es);
  if (!tab) {
    lt_tensor_free(y);
    lt__err(LT_ERR_NOMEM, "%s: x is %s: out of memory for the [%lld, %lld] cos/sin table", op, LT__D(x),
            (long long)T, (long long)H);
    return NULL;
  }
  for (int64_t i = 0; i < H; i++) {
    const double inv_freq = lt_rope_inv_freq(i, HS, base, sc);
    for (int64_t t = 0; t < T; t++) {
      const double th = (double)(pos0 + t) * inv_freq, c = cos(th), s = sign * sin(th);
      if (x->dtype == LT_DTYPE_F32) {
        ((float *)tab)[t * H + i] = (float)c;
        ((float *)tab)[T * H + t * H + i] = (float)s;
      } else {
        ((double *)tab)[t * H + i] = c;
        ((double *)tab)[T * H + t * H + i] = s;
      }
    }
  }
  if (x->dtype == LT_DTYPE_F32) rope_rows_f32(x, x->data, y->data, tab, T, H);
  else rope_rows_f64(x, x->data, y->data, tab, T, H);
  free(tab);
  return y;
}

lt_tensor *lt_rope(const lt_tensor *x, int64_t pos0, double base) { return lt_rope_scaled(x, pos0, base, NULL); }

lt_tensor *lt_rope_scaled(const lt_tensor *x, int64_t pos0, double base, const lt_rope_scaling *sc) {
  if (!x) return lt__err_null("rope", "x"), NULL;
  if (x->ndim < 2) {
    lt__err(LT_ERR_SHAPE, "rope: x is %s: need [..., T, HS] (usually [B,NH,T,HS]), at least 2-d", LT__D(x));
    return NULL;
  }
  if (!lt_dtype_is_float(x->dtype)) {
    lt__err(LT_ERR_DTYPE, "rope: x is %s: only f32 and f64 are supported", LT__D(x));
    return NULL;
  }
  if (x->shape[x->ndim - 1] % 2 != 0) {
    lt__err(LT_ERR_SHAPE, "rope: x is %s: head size %lld is odd (rotate-half pairs need an even HS)", LT__D(x),
            (long long)x->shape[x->ndim - 1]);
    return NULL;
  }
  if (!(base > 0) || isinf(base)) {
    lt__err(LT_ERR_INVALID, "rope: base %g: need a finite base > 0 (10000 is usual)", base);
    return NULL;
  }
  if (lt_rope_scaling_check(sc) != LT_OK) return NULL;
  lt_tensor *y = rope_apply("rope", x, pos0, base, sc, 1.0);
  if (!y) return NULL;
  const rope_aux aux = {pos0, base, sc ? *sc : (lt_rope_scaling){0}};
  if (lt__record(y, LT__OP_rope, 1, &x, 0, NULL, &aux, sizeof aux) != LT_OK) {
    lt_tensor_free(y);
    return NULL;
  }
  return y;
}

/* The forward rotated by +theta; its transpose (the Jacobian's) rotates by
 * -theta: dx = rope with sin negated, applied to gout. */
lt_status lt__bw_rope(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const rope_aux *a = (const rope_aux *)node->aux;
  lt_tensor *gc = NULL;
  const lt_tensor *g = gout;
  if (gout->dtype != node->out_dtype) {
    gc = lt_to_dtype(gout, node->out_dtype);
    if (!gc) return lt_last_status();
    g = gc;
  }
  lt_tensor *dx = rope_apply("rope backward", g, a->pos0, a->base, &a->sc, -1.0);
  lt_tensor_free(gc);
  if (!dx) return lt_last_status();
  gin[0] = dx;
  return LT_OK;
}
