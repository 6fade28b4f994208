/*
 * nn/attention_bias.c: scaled dot-product attention with an additive float
 * bias that carries a gradient (T5's learned relative-position bias, trained
 * with the model), composed of differentiable ops:
 *     S = q k^T * scale + bias + masks       [B, NH, T, S]
 *     W = dropout(softmax(S)) * valid         (valid: rows with a key to see)
 *     out = W v
 * so autograd gives dq, dk, dv and d(bias) (the broadcast of bias reduced
 * back to its shape by lt_add's backward). lt_scaled_dot_product_attention
 * (nn/attention.c) sends a call here only when its float attn_mask requires a
 * gradient and grad mode is on; with a constant mask (inference, a frozen
 * bias) the fused and unfused kernels add it themselves.
 *
 * The masks are those of the kernels: causal (key s <= t + S - T), a
 * sliding window with it, key_padding_mask [B, S]. They are one additive
 * tensor of 0 and -inf built here; a row with no key left gets zeros (and
 * zero gradients), never NaN, as the kernels give. GQA: each key/value head
 * is expanded over its group of query heads.
 *
 * What this is not: fast. It materialises the T x S scores per head in
 * several tensors (the unfused kernel keeps one); a fused backward for the
 * bias is the way to speed it up, if T5 training ever needs it.
 */
#include "nn/attention_internal.h"

#include "tensor/error_internal.h"

#include <math.h>
#include <stdlib.h>

/* The additive mask [Bm, 1, T, S] (0 or -inf; Bm = B with a key padding mask,
 * else 1) and the row validity [Bm, 1, T, 1] (1, or 0 for a row without
 * keys, whose mask row is then left 0 so its softmax stays finite), both in
 * dtype dt; *add NULL when nothing is masked. */
static lt_status masks(const lt_attention_opts *o, int64_t B, int64_t T, int64_t S, lt_dtype dt, lt_tensor **add,
                       lt_tensor **valid) {
  *add = *valid = NULL;
  const lt_tensor *kp = o->key_padding_mask;
  if (!o->causal && !kp) return LT_OK;
  const int64_t Bm = kp ? B : 1;
  double *m = malloc(sizeof *m * (size_t)(Bm * T * S)), *v = malloc(sizeof *v * (size_t)(Bm * T));
  lt_tensor *kpc = NULL;
  if (kp && !(kpc = lt_contiguous(kp))) {
    free(m), free(v);
    return lt_last_status();
  }
  if (!m || !v) {
    free(m), free(v), lt_tensor_free(kpc);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for a [%lld, %lld, %lld] mask", LT__SDPA_OP, (long long)Bm,
                   (long long)T, (long long)S);
  }
  for (int64_t b = 0; b < Bm; b++)
    for (int64_t t = 0; t < T; t++) {
      double *row = m + (b * T + t) * S;
      int64_t seen = 0;
      for (int64_t s = 0; s < S; s++) {
        bool ok = true;
        if (o->causal) ok = s <= t + S - T && (o->window <= 0 || s > t + S - T - o->window);
        if (ok && kpc) ok = !((const bool *)kpc->data)[(kp->shape[0] == 1 ? 0 : b) * S + s];
        row[s] = ok ? 0.0 : -INFINITY;
        seen += ok;
      }
      v[b * T + t] = seen ? 1.0 : 0.0;
      for (int64_t s = 0; !seen && s < S; s++) row[s] = 0.0;
    }
  lt_tensor *a64 = lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(Bm, 1, T, S), m);
  lt_tensor *v64 = lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(Bm, 1, T, 1), v);
  free(m), free(v), lt_tensor_free(kpc);
  *add = a64 ? lt_to_dtype(a64, dt) : NULL;
  *valid = v64 ? lt_to_dtype(v64, dt) : NULL;
  lt_tensor_free(a64), lt_tensor_free(v64);
  if (!*add || !*valid) {
    lt_tensor_free(*add), lt_tensor_free(*valid);
    *add = *valid = NULL;
    return lt_last_status();
  }
  return LT_OK;
}

/* x [B, NKV, S, HS] expanded to [B, NKV * G, S, HS] (head h reads kv head
 * h / G); x itself, retained, when G is 1. Returns new. */
static lt_tensor *expand_heads(const lt_tensor *x, int64_t G) {
  if (G == 1) return lt_tensor_retain((lt_tensor *)x);
  const int64_t B = x->shape[0], NKV = x->shape[1], S = x->shape[2], HS = x->shape[3];
  lt_tensor *u = lt_unsqueeze(x, 2);
  lt_tensor *e = u ? lt_expand(u, 5, (const int64_t[]){B, NKV, G, S, HS}) : NULL;
  lt_tensor *r = e ? lt_reshape(e, LT_SHAPE(B, NKV * G, S, HS)) : NULL;
  lt_tensor_free(u), lt_tensor_free(e);
  return r;
}

lt_tensor *lt__sdpa_biased(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v, const lt_attention_opts *o,
                           const lt_nn_ctx *ctx, lt_tensor **weights) {
  const int64_t B = q->shape[0], NH = q->shape[1], T = q->shape[2], HS = q->shape[3], S = k->shape[2];
  const double scale = o->scale > 0 ? o->scale : 1.0 / sqrt((double)HS);
  enum { KE, VE, KT, QK, SC, BI, SB, ADD, VALID, SM, P, PV, DP, OUT, N };
  lt_tensor *t[N] = {0};
  lt_tensor *out = NULL;
  const lt_tensor *bias = o->attn_mask;
  if (!(t[KE] = expand_heads(k, NH / k->shape[1])) || !(t[VE] = expand_heads(v, NH / k->shape[1]))) goto done;
  if (!(t[KT] = lt_transpose(t[KE], 2, 3)) || !(t[QK] = lt_matmul(q, t[KT]))) goto done;
  if (!(t[SC] = lt_mul_scalar(t[QK], scale))) goto done;
  if (bias->dtype != q->dtype && !(bias = t[BI] = lt_to_dtype(bias, q->dtype))) goto done;
  if (!(t[SB] = lt_add(t[SC], bias))) goto done;
  if (masks(o, B, T, S, q->dtype, &t[ADD], &t[VALID]) != LT_OK) goto done;
  if (t[ADD] && !(t[SM] = lt_add(t[SB], t[ADD]))) goto done;
  if (!(t[P] = lt_softmax(t[SM] ? t[SM] : t[SB], -1))) goto done;
  if (t[VALID] && !(t[PV] = lt_mul(t[P], t[VALID]))) goto done;
  lt_tensor *w = t[PV] ? t[PV] : t[P];
  if (ctx && ctx->training && o->dropout_p > 0 && !(w = t[DP] = lt_dropout(w, o->dropout_p, ctx))) goto done;
  if (!(t[OUT] = lt_matmul(w, t[VE]))) goto done;
  out = t[OUT], t[OUT] = NULL;
  if (weights) *weights = lt_tensor_retain(w);
done:
  for (int i = 0; i < N; i++) lt_tensor_free(t[i]);
  return out;
}
