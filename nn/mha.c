/*
 * nn/mha.c: the multi-head attention module (lt_mha): q/k/v/out projections
 * around lt_scaled_dot_product_attention, with NKV key/value heads (GQA; MQA
 * when NKV == 1) and optional RoPE on q and k.
 *
 *     q = q_proj(x_q)  [B,T,C]        -> view [B,T,NH,HS]  -> transpose [B,NH,T,HS]
 *     k = k_proj(x_kv) [B,S,NKV*HS]   -> view [B,S,NKV,HS] -> transpose [B,NKV,S,HS]
 *     v = v_proj(x_kv) likewise
 *     (rope: q at positions pos0 + t, k at pos0 + (T - S) + s)
 *     a = attention(q, k, v)           [B,NH,T,HS] -> transpose [B,T,NH,HS] -> reshape [B,T,C]
 *     out = out_proj(a)                [B,T,C]
 * The head split is a view (no copy); attention reads the transposed views
 * with their strides. The head merge is the one copy (reshape of a
 * transposed tensor).
 *
 * Keys' RoPE positions: the last key is aligned with the last query, the
 * same alignment as causal masking (key s at pos0 + T - S + s); when S == T
 * (self-attention) both start at pos0.
 *
 * What this is not: PyTorch's nn.MultiheadAttention parameter layout (one
 * packed in_proj_weight, xavier init): the projections here are four
 * separate nn.Linear with nn.Linear's default init, as in LLaMA / Hugging
 * Face models, and the weights returned are per head ([B,NH,T,S]), not
 * averaged. There is no KV cache inside the module.
 */
#include "nn/nn.h"

#include "tensor/internal.h"

#include <math.h>
#include <stdio.h>

lt_status lt_mha_init(lt_mha *m, lt_params *p, const char *name, int64_t C, int64_t NH, int64_t NKV, bool bias,
                      double dropout, lt_generator *g) {
  if (!m) return lt__err(LT_ERR_NULL, "mha_init: m is NULL");
  if (!p) return lt__err(LT_ERR_NULL, "mha_init: p (the parameter store) is NULL");
  if (!g) return lt__err(LT_ERR_NULL, "mha_init: g (the generator) is NULL");
  if (!name) name = "";
  if (C < 1 || NH < 1 || NKV < 1)
    return lt__err(LT_ERR_INVALID, "mha_init: C %lld, NH %lld, NKV %lld: all must be >= 1", (long long)C,
                   (long long)NH, (long long)NKV);
  if (C % NH != 0)
    return lt__err(LT_ERR_INVALID, "mha_init: C %lld is not a multiple of NH %lld (head size C / NH)",
                   (long long)C, (long long)NH);
  if (NH % NKV != 0)
    return lt__err(LT_ERR_INVALID, "mha_init: NH %lld is not a multiple of NKV %lld (query heads per kv head)",
                   (long long)NH, (long long)NKV);
  if (!(dropout >= 0.0 && dropout <= 1.0))
    return lt__err(LT_ERR_INVALID, "mha_init: dropout %g: need 0 <= dropout <= 1", dropout);
  lt_mha mm = {.C = C, .NH = NH, .NKV = NKV, .HS = C / NH, .rope = false, .rope_base = 10000.0,
               .dropout = dropout};
  const int64_t kv = NKV * (C / NH);
  char buf[512];
  /* Registration order q, k, v, out (weight then bias each) fixes the draws from g. */
  lt_status st = lt_linear_init(&mm.q_proj, p, lt_name_join(buf, sizeof buf, name, "q_proj"), C, C, bias, g);
  if (st == LT_OK)
    st = lt_linear_init(&mm.k_proj, p, lt_name_join(buf, sizeof buf, name, "k_proj"), C, kv, bias, g);
  if (st == LT_OK)
    st = lt_linear_init(&mm.v_proj, p, lt_name_join(buf, sizeof buf, name, "v_proj"), C, kv, bias, g);
  if (st == LT_OK)
    st = lt_linear_init(&mm.out_proj, p, lt_name_join(buf, sizeof buf, name, "out_proj"), C, C, bias, g);
  if (st != LT_OK) return st;
  *m = mm;
  return LT_OK;
}

/* [B, L, H*HS] -> view [B, L, H, HS] -> transpose [B, H, L, HS]. Returns new. */
static lt_tensor *split_heads(const lt_tensor *x, int64_t H, int64_t HS) {
  lt_tensor *v = lt_view(x, LT_SHAPE(x->shape[0], x->shape[1], H, HS));
  if (!v) return NULL;
  lt_tensor *t = lt_transpose(v, 1, 2);
  lt_tensor_free(v);
  return t;
}

lt_tensor *lt_mha_forward(const lt_mha *m, const lt_tensor *x_q, const lt_tensor *x_kv,
                          const lt_attention_opts *opts, int64_t pos0, const lt_nn_ctx *ctx,
                          lt_tensor **weights) {
  if (!m) return lt__err(LT_ERR_NULL, "mha_forward: m is NULL"), NULL;
  if (!x_q) return lt__err_null("mha_forward", "x_q"), NULL;
  if (!x_kv) return lt__err_null("mha_forward", "x_kv"), NULL;
  const int64_t C = m->C, NH = m->NH, NKV = m->NKV, HS = m->HS;
  if (x_q->ndim != 3 || x_kv->ndim != 3 || x_q->shape[2] != C || x_kv->shape[2] != C ||
      x_q->shape[0] != x_kv->shape[0]) {
    lt__err(LT_ERR_SHAPE, "mha_forward: x_q is %s, x_kv is %s: need [B,T,C] and [B,S,C] with C = %lld",
            LT__D(x_q), LT__D(x_kv), (long long)C);
    return NULL;
  }
  const int64_t T = x_q->shape[1], S = x_kv->shape[1];
  lt_attention_opts o = opts ? *opts : (lt_attention_opts){0};
  o.dropout_p = m->dropout;
  o.scale = 0;

  enum { QL, KL, VL, Q, K, V, QR, KR, A, AT, AM, N };
  lt_tensor *t[N] = {0};
  lt_tensor *out = NULL, *w = NULL;
  const lt_tensor *q, *k;
  if (!(t[QL] = lt_linear_forward(&m->q_proj, x_q))) goto done;
  if (!(t[KL] = lt_linear_forward(&m->k_proj, x_kv))) goto done;
  if (!(t[VL] = lt_linear_forward(&m->v_proj, x_kv))) goto done;
  if (!(t[Q] = split_heads(t[QL], NH, HS))) goto done;
  if (!(t[K] = split_heads(t[KL], NKV, HS))) goto done;
  if (!(t[V] = split_heads(t[VL], NKV, HS))) goto done;
  q = t[Q];
  k = t[K];
  if (m->rope) {
    if (!(t[QR] = lt_rope(t[Q], pos0, m->rope_base))) goto done;
    if (!(t[KR] = lt_rope(t[K], pos0 + T - S, m->rope_base))) goto done;
    q = t[QR];
    k = t[KR];
  }
  if (!(t[A] = lt_scaled_dot_product_attention(q, k, t[V], &o, ctx, weights ? &w : NULL))) goto done;
  if (!(t[AT] = lt_transpose(t[A], 1, 2))) goto done;
  if (!(t[AM] = lt_reshape(t[AT], LT_SHAPE(x_q->shape[0], T, C)))) goto done;
  out = lt_linear_forward(&m->out_proj, t[AM]);
  if (out && weights) *weights = w;
  else lt_tensor_free(w);
done:
  for (int i = 0; i < N; i++) lt_tensor_free(t[i]);
  return out;
}
