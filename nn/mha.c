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
 * averaged. The module itself holds no state: a KV cache (lt_kv_cache, for
 * incremental decoding) is the caller's and is passed to
 * lt_mha_forward_cached, which shares the projections and the attention with
 * lt_mha_forward (one code path) and differs only in where the keys and
 * values come from:
 *
 *     k_new, v_new = split(k_proj(x_kv)), split(v_proj(x_kv))   [B,NKV,Tn,HS]
 *     cache.k[:, :, len:len+Tn] = rope(k_new)                     (a copy into the buffer)
 *     k = cache.k[:, :, :len+Tn]    (a view: no copy; attention reads its strides)
 */
#include "nn/nn.h"

#include "tensor/error_internal.h"

#include <math.h>
#include <stdio.h>

lt_status lt_mha_init(lt_mha *m, lt_params *p, const char *name, int64_t C, int64_t NH, int64_t NKV, bool bias,
                      double dropout, lt_generator *g) {
  return lt_mha_init_biases(m, p, name, C, NH, NKV, bias, bias, dropout, g);
}

lt_status lt_mha_init_biases(lt_mha *m, lt_params *p, const char *name, int64_t C, int64_t NH, int64_t NKV,
                             bool qkv_bias, bool out_bias, double dropout, lt_generator *g) {
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
  lt_status st = lt_linear_init(&mm.q_proj, p, lt_name_join(buf, sizeof buf, name, "q_proj"), C, C, qkv_bias, g);
  if (st == LT_OK)
    st = lt_linear_init(&mm.k_proj, p, lt_name_join(buf, sizeof buf, name, "k_proj"), C, kv, qkv_bias, g);
  if (st == LT_OK)
    st = lt_linear_init(&mm.v_proj, p, lt_name_join(buf, sizeof buf, name, "v_proj"), C, kv, qkv_bias, g);
  if (st == LT_OK)
    st = lt_linear_init(&mm.out_proj, p, lt_name_join(buf, sizeof buf, name, "out_proj"), C, C, out_bias, g);
  if (st != LT_OK) return st;
  *m = mm;
  return LT_OK;
}

lt_status lt_mha_set_rope(lt_mha *m, double base) {
  if (!m) return lt__err(LT_ERR_NULL, "mha_set_rope: m is NULL");
  if (!(base > 0 && isfinite(base))) return lt__err(LT_ERR_INVALID, "mha_set_rope: base %g: must be > 0 and finite", base);
  if (m->HS % 2 != 0)
    return lt__err(LT_ERR_INVALID, "mha_set_rope: head size %lld (C %lld / NH %lld) is odd: RoPE rotates pairs",
                   (long long)m->HS, (long long)m->C, (long long)m->NH);
  m->rope = true;
  m->rope_base = base;
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

/* The attention of q [B,NH,T,HS] on k, v [B,NKV,S,HS], heads merged and
 * projected: out_proj(merge(attention(q, k, v))) -> [B,T,C]. Returns new. */
static lt_tensor *attend(const lt_mha *m, const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                         const lt_attention_opts *o, const lt_nn_ctx *ctx, lt_tensor **weights) {
  const int64_t B = q->shape[0], T = q->shape[2];
  lt_tensor *w = NULL, *out = NULL;
  lt_tensor *a = lt_scaled_dot_product_attention(q, k, v, o, ctx, weights ? &w : NULL); /* [B,NH,T,HS] */
  lt_tensor *at = a ? lt_transpose(a, 1, 2) : NULL;                                        /* [B,T,NH,HS] */
  lt_tensor *am = at ? lt_reshape(at, LT_SHAPE(B, T, m->C)) : NULL;                        /* [B,T,C] */
  if (am) out = lt_linear_forward(&m->out_proj, am);
  if (out && weights) *weights = w;
  else lt_tensor_free(w);
  lt_tensor_free(a), lt_tensor_free(at), lt_tensor_free(am);
  return out;
}

/* rope(x, pos) when the module uses RoPE, else x itself with one more
 * reference. Returns new (or a retained x). */
static lt_tensor *maybe_rope(const lt_mha *m, lt_tensor *x, int64_t pos) {
  return m->rope ? lt_rope_scaled(x, pos, m->rope_base, &m->rope_scaling) : lt_tensor_retain(x);
}

/* split_heads(lin(x)), [B,L,C] -> [B,H,L,HS]. Returns new. */
static lt_tensor *project(const lt_linear_m *lin, const lt_tensor *x, int64_t H, int64_t HS) {
  lt_tensor *y = lt_linear_forward(lin, x);
  lt_tensor *h = y ? split_heads(y, H, HS) : NULL;
  lt_tensor_free(y);
  return h;
}

/* split_heads(lins[i](x)) into h[i] for the n projections of one x (q, k
 * and v, or k and v), H[i] heads each: one lt_linear_many (quantized
 * weights: one parallel region for all). h[i] new; on an error none is set
 * and the status is returned. */
static lt_status project_many(const lt_linear_m *const *lins, int n, const lt_tensor *x, const int64_t *H, int64_t HS,
                              lt_tensor **h) {
  const lt_tensor *w[3], *b[3];
  lt_tensor *y[3];
  for (int i = 0; i < n; i++) w[i] = lins[i]->weight, b[i] = lins[i]->bias, h[i] = NULL;
  lt_status st = lt_linear_many(x, n, w, b, y);
  if (st != LT_OK) return st;
  for (int i = 0; i < n && st == LT_OK; i++)
    if (!(h[i] = split_heads(y[i], H[i], HS))) st = lt_last_status();
  for (int i = 0; i < n; i++) lt_tensor_free(y[i]);
  if (st != LT_OK)
    for (int i = 0; i < n; i++) lt_tensor_free(h[i]), h[i] = NULL;
  return st;
}

/* The projections q of x_q and, with kv, k and v of x_kv, split into heads
 * (*q [B,NH,T,HS], *k, *v [B,NKV,S,HS]): those that read one x in one
 * project_many (self-attention: q, k, v). New; on an error none is set. */
static lt_status project_qkv(const lt_mha *m, const lt_tensor *x_q, const lt_tensor *x_kv, bool kv, lt_tensor **q,
                             lt_tensor **k, lt_tensor **v) {
  const lt_linear_m *lins[3] = {&m->q_proj, &m->k_proj, &m->v_proj};
  const int64_t heads[3] = {m->NH, m->NKV, m->NKV};
  lt_tensor *h[3] = {NULL, NULL, NULL};
  *q = *k = *v = NULL;
  lt_status st;
  if (kv && x_kv == x_q) {
    st = project_many(lins, 3, x_q, heads, m->HS, h);
  } else {
    st = (h[0] = project(&m->q_proj, x_q, m->NH, m->HS)) ? LT_OK : lt_last_status();
    if (st == LT_OK && kv && (st = project_many(lins + 1, 2, x_kv, heads + 1, m->HS, h + 1)) != LT_OK)
      lt_tensor_free(h[0]);
  }
  if (st == LT_OK) *q = h[0], *k = h[1], *v = h[2];
  return st;
}

lt_tensor *lt_mha_forward(const lt_mha *m, const lt_tensor *x_q, const lt_tensor *x_kv,
                          const lt_attention_opts *opts, int64_t pos0, const lt_nn_ctx *ctx,
                          lt_tensor **weights) {
  if (!m) return lt__err(LT_ERR_NULL, "mha_forward: m is NULL"), NULL;
  if (!x_q) return lt__err_null("mha_forward", "x_q"), NULL;
  if (!x_kv) return lt__err_null("mha_forward", "x_kv"), NULL;
  const int64_t C = m->C;
  if (x_q->ndim != 3 || x_kv->ndim != 3 || x_q->shape[2] != C || x_kv->shape[2] != C ||
      x_q->shape[0] != x_kv->shape[0]) {
    lt__err(LT_ERR_SHAPE, "mha_forward: x_q is %s, x_kv is %s: need [B,T,C] and [B,S,C] with C = %lld",
            LT__D(x_q), LT__D(x_kv), (long long)C);
    return NULL;
  }
  const int64_t T = x_q->shape[1], S = x_kv->shape[1];
  lt_attention_opts o = opts ? *opts : (lt_attention_opts){0};
  o.dropout_p = m->dropout;
  o.scale = m->scale;

  enum { Q, K, V, QR, KR, N };
  lt_tensor *t[N] = {0};
  lt_tensor *out = NULL;
  if (project_qkv(m, x_q, x_kv, true, &t[Q], &t[K], &t[V]) != LT_OK) goto done;
  if (!(t[QR] = maybe_rope(m, t[Q], pos0))) goto done;
  if (!(t[KR] = maybe_rope(m, t[K], pos0 + T - S))) goto done;
  out = attend(m, t[QR], t[KR], t[V], &o, ctx, weights);
done:
  for (int i = 0; i < N; i++) lt_tensor_free(t[i]);
  return out;
}

/* ======================================================================== */
/* KV cache                                                                 */
/* ======================================================================== */

lt_status lt_kv_cache_init(lt_kv_cache *c, int64_t cap) {
  if (!c) return lt__err(LT_ERR_NULL, "kv_cache_init: c is NULL");
  if (cap < 1) return lt__err(LT_ERR_INVALID, "kv_cache_init: cap %lld: must be >= 1", (long long)cap);
  *c = (lt_kv_cache){.cap = cap};
  return LT_OK;
}

void lt_kv_cache_free(lt_kv_cache *c) {
  if (!c) return;
  lt_tensor_free(c->k);
  lt_tensor_free(c->v);
  c->k = c->v = NULL;
  c->len = c->off = c->window = 0;
}

/* New zeroed buffers *nk, *nv of `rows` rows (shape [0], [1], [3] and the
 * dtypes of k and v: [B, NKV, rows, HS]), outside any scope, holding rows
 * [from, from + n) of k and v at the front. On failure *nk, *nv untouched. */
static lt_status kv_buffers(const lt_tensor *k, const lt_tensor *v, const int64_t *shape, int64_t rows, int64_t from,
                            int64_t n, lt_tensor **nk, lt_tensor **nv) {
  const int64_t sh[4] = {shape[0], shape[1], rows, shape[3]};
  lt_tensor *a = lt_tensor_keep(lt_zeros(k->dtype, 4, sh));
  lt_tensor *b = a ? lt_tensor_keep(lt_zeros(v->dtype, 4, sh)) : NULL;
  lt_status s = b ? LT_OK : lt_last_status();
  if (s == LT_OK && n > 0) {
    lt_tensor *src[2] = {lt_narrow(k, 2, from, n), lt_narrow(v, 2, from, n)};
    lt_tensor *dst[2] = {lt_narrow(a, 2, 0, n), lt_narrow(b, 2, 0, n)};
    for (int i = 0; i < 2 && s == LT_OK; i++)
      s = src[i] && dst[i] ? lt_copy_(dst[i], src[i]) : lt_last_status();
    for (int i = 0; i < 2; i++) lt_tensor_free(src[i]), lt_tensor_free(dst[i]);
  }
  if (s != LT_OK) {
    lt_tensor_free(a), lt_tensor_free(b);
    return s;
  }
  *nk = a, *nv = b;
  return LT_OK;
}

/* A window's cache before Tn new positions: the W - 1 newest it holds are
 * all that this step's and later queries can see. When the Tn new rows do
 * not fit after the held ones, those W - 1 move to row 0 (off moves on), in
 * buffers of max(2W, W - 1 + Tn) rows if the present ones are too small,
 * else in place (through new buffers of the same size: the rows overlap).
 * Every 2W - (W - 1) steps of one position, one move of W - 1 rows. Only
 * positions no later query sees are dropped, so the cache means the same if
 * the step fails afterwards. */
static lt_status kv_window_room(lt_kv_cache *c, int64_t Tn) {
  const int64_t W = c->window, n = c->len - c->off, rows = c->k->shape[2];
  if (n + Tn <= rows) return LT_OK;
  const int64_t keep = n < W - 1 ? n : W - 1;
  int64_t want = keep + Tn > rows ? (2 * W > keep + Tn ? 2 * W : keep + Tn) : rows;
  if (want > c->cap) want = c->cap > keep + Tn ? c->cap : keep + Tn;
  lt_tensor *nk, *nv;
  lt_status s = kv_buffers(c->k, c->v, c->k->shape, want, n - keep, keep, &nk, &nv);
  if (s != LT_OK) return s;
  lt_tensor_free(c->k), lt_tensor_free(c->v);
  c->k = nk, c->v = nv;
  c->off += n - keep;
  return LT_OK;
}

lt_status lt_kv_cache_reorder(lt_kv_cache *c, const lt_tensor *rows) {
  if (!c) return lt__err(LT_ERR_NULL, "kv_cache_reorder: c is NULL");
  if (!rows) return lt__err_null("kv_cache_reorder", "rows");
  if (rows->ndim != 1 || (rows->dtype != LT_DTYPE_I32 && rows->dtype != LT_DTYPE_I64))
    return lt__err(LT_ERR_SHAPE, "kv_cache_reorder: rows is %s: need 1-d i32/i64 row indices", LT__D(rows));
  if (!c->k) return LT_OK;
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *k = lt_tensor_keep(lt_index_select(c->k, 0, rows));
  lt_tensor *v = k ? lt_tensor_keep(lt_index_select(c->v, 0, rows)) : NULL;
  lt_set_grad_enabled(prev);
  if (!v) {
    lt_tensor_free(k);
    return lt_last_status();
  }
  lt_tensor_free(c->k), lt_tensor_free(c->v);
  c->k = k, c->v = v;
  return LT_OK;
}

lt_tensor *lt_mha_forward_cached(const lt_mha *m, const lt_tensor *x_q, const lt_tensor *x_kv, lt_kv_cache *cache,
                                 const lt_attention_opts *opts, int64_t pos0) {
  const char *op = "mha_forward_cached";
  if (!m) return lt__err(LT_ERR_NULL, "%s: m is NULL", op), NULL;
  if (!x_q) return lt__err_null(op, "x_q"), NULL;
  if (!cache) return lt__err(LT_ERR_NULL, "%s: cache is NULL", op), NULL;
  const int64_t C = m->C, NKV = m->NKV, HS = m->HS;
  if (x_q->ndim != 3 || x_q->shape[2] != C ||
      (x_kv && (x_kv->ndim != 3 || x_kv->shape[2] != C || x_kv->shape[0] != x_q->shape[0]))) {
    lt__err(LT_ERR_SHAPE, "%s: x_q is %s, x_kv is %s: need [B,T,C] and [B,Tn,C] (or NULL) with C = %lld", op,
            LT__D(x_q), x_kv ? LT__D(x_kv) : "NULL", (long long)C);
    return NULL;
  }
  const int64_t B = x_q->shape[0], T = x_q->shape[1], Tn = x_kv ? x_kv->shape[1] : 0;
  if (cache->k && cache->k->shape[0] != B)
    return lt__err(LT_ERR_SHAPE, "%s: x_q is %s, the cache holds %lld rows: batch sizes differ", op, LT__D(x_q),
                   (long long)cache->k->shape[0]), NULL;
  if (cache->len + Tn > cache->cap)
    return lt__err(LT_ERR_INVALID, "%s: the cache holds %lld of %lld positions: no room for %lld more", op,
                   (long long)cache->len, (long long)cache->cap, (long long)Tn), NULL;
  if (cache->len + Tn < 1)
    return lt__err(LT_ERR_INVALID, "%s: no keys: the cache is empty and x_kv is NULL", op), NULL;
  lt_attention_opts o = opts ? *opts : (lt_attention_opts){0};
  o.dropout_p = 0;
  o.scale = m->scale;
  if (o.window < 0 || (cache->k && o.window != cache->window))
    return lt__err(LT_ERR_INVALID, "%s: window %lld, the cache keeps %lld: one window per cache", op,
                   (long long)o.window, (long long)cache->window), NULL;
  const lt_tensor *kpm = o.key_padding_mask;
  if (kpm && (kpm->ndim != 2 || kpm->shape[1] != cache->len + Tn))
    return lt__err(LT_ERR_SHAPE, "%s: key_padding_mask is %s: need [B, %lld] (every position after the append)", op,
                   LT__D(kpm), (long long)(cache->len + Tn)), NULL;

  bool prev = lt_set_grad_enabled(false);
  enum { Q, QR, K, KR, V, KN, VN, KA, VA, KP, N };
  lt_tensor *t[N] = {0};
  lt_tensor *out = NULL;
  if (project_qkv(m, x_q, x_kv, Tn > 0, &t[Q], &t[K], &t[V]) != LT_OK) goto done;
  if (!(t[QR] = maybe_rope(m, t[Q], pos0))) goto done;
  if (Tn > 0) {
    if (!(t[KR] = maybe_rope(m, t[K], pos0 + T - Tn))) goto done;
    if (cache->k && cache->k->dtype != t[KR]->dtype) {
      lt__err(LT_ERR_DTYPE, "%s: new keys are %s, the cache is %s: dtypes differ", op, LT__D(t[KR]),
              LT__D(cache->k));
      goto done;
    }
    if (!cache->k) { /* first append: the buffers, outside any scope (a window's: about 2W rows) */
      const int64_t shape[4] = {B, NKV, 0, HS}, W = o.window;
      int64_t rows = cache->cap;
      if (W > 0 && rows > 2 * W) rows = 2 * W > Tn ? 2 * W : Tn;
      if (kv_buffers(t[KR], t[V], shape, rows, 0, 0, &cache->k, &cache->v) != LT_OK) goto done;
      cache->window = W, cache->off = 0;
    } else if (cache->window > 0 && kv_window_room(cache, Tn) != LT_OK) {
      goto done;
    }
    if (!(t[KN] = lt_narrow(cache->k, 2, cache->len - cache->off, Tn))) goto done;
    if (!(t[VN] = lt_narrow(cache->v, 2, cache->len - cache->off, Tn))) goto done;
    if (lt_copy_(t[KN], t[KR]) != LT_OK || lt_copy_(t[VN], t[V]) != LT_OK) goto done;
  }
  const int64_t S = cache->len - cache->off + Tn; /* the keys held: positions [off, len + Tn) */
  if (!(t[KA] = lt_narrow(cache->k, 2, 0, S))) goto done; /* [B,NKV,S,HS] views of the buffers */
  if (!(t[VA] = lt_narrow(cache->v, 2, 0, S))) goto done;
  if (kpm && cache->off > 0 && !(t[KP] = lt_narrow(kpm, 1, cache->off, S))) goto done;
  if (t[KP]) o.key_padding_mask = t[KP];
  out = attend(m, t[QR], t[KA], t[VA], &o, NULL, NULL);
  if (out) cache->len += Tn;
done:
  for (int i = 0; i < N; i++) lt_tensor_free(t[i]);
  lt_set_grad_enabled(prev);
  return out;
}
