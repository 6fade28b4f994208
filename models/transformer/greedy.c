/*
 * models/transformer/greedy.c: decoding with a trained Transformer (the
 * decoding half of generate.h): greedy seq2seq decoding for the
 * encoder-decoder, and greedy or sampled continuation for the decoder-only
 * model.
 *
 * What this is: the plain loop "run the decoder on the prefix, take the last
 * position's logits, pick a token, append it", under no-grad, each step in its
 * own lt_scope so memory does not grow with the length. The encoder runs once.
 *
 * What this is not: cached. Every step runs the decoder over the whole prefix
 * again, which costs O(T^2) position forwards for T tokens instead of O(T);
 * a KV cache is a later task. Nor is it beam search.
 */
#include "models/transformer/generate.h"
#include "tensor/internal.h"

#include <math.h>

static bool is_int_dtype(lt_dtype d) { return d == LT_DTYPE_I32 || d == LT_DTYPE_I64; }

/* The ids of x (any integer dtype, any layout) as a new malloc'd i64 array. */
static int64_t *read_ids(const lt_tensor *x) {
  int64_t *v = malloc(sizeof *v * (size_t)(x->numel ? x->numel : 1));
  if (!v) return lt__err(LT_ERR_NOMEM, "out of memory"), NULL;
  if (lt_tensor_read(x, LT_DTYPE_I64, v, x->numel) != LT_OK) {
    free(v);
    return NULL;
  }
  return v;
}

/* The last position's logits of the decoder on buf[:, start:start+w] (buf is
 * [B, W] i64), as a new [B, V] tensor in the current scope, or NULL. */
static lt_tensor *last_logits(const lt_transformer *m, int64_t *buf, int64_t B, int64_t W, int64_t start,
                              int64_t w, const lt_tensor *memory, const lt_tensor *src_pad) {
  lt_tensor *all = lt_tensor_from_borrowed(LT_DTYPE_I64, 2, (int64_t[]){B, W}, buf);
  lt_tensor *tgt = lt_contiguous(lt_narrow(all, 1, start, w));                   /* [B, w] */
  lt_tensor *logits = tgt ? lt_transformer_decode(m, tgt, NULL, memory, src_pad, 0, NULL) : NULL; /* [B, w, V] */
  return logits ? lt_select(logits, 1, w - 1) : NULL;                            /* [B, V] */
}

lt_tensor *lt_tf_greedy_decode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                               int64_t max_new, int64_t bos_id, int64_t eos_id, int64_t pad_id) {
  const char *op = "tf_greedy_decode";
  if (!m) return lt__err(LT_ERR_NULL, "%s: the model is NULL", op), NULL;
  if (!src) return lt__err_null(op, "src"), NULL;
  const lt_tf_config *cfg = lt_transformer_config(m);
  if (cfg->arch != LT_TF_ENCODER_DECODER)
    return lt__err(LT_ERR_INVALID, "%s: the model is %s, not encoder-decoder", op, lt_tf_arch_name(cfg->arch)),
           NULL;
  if (src->ndim != 2 || !is_int_dtype(src->dtype))
    return lt__err(LT_ERR_SHAPE, "%s: src is %s: must be [B, S] i32 or i64", op, LT__D(src)), NULL;
  if (src_pad && (src_pad->ndim != 2 || src_pad->dtype != LT_DTYPE_BOOL || src_pad->shape[0] != src->shape[0] ||
                  src_pad->shape[1] != src->shape[1]))
    return lt__err(LT_ERR_SHAPE, "%s: src is %s, src_pad is %s: src_pad must be bool of src's shape", op,
                   LT__D(src), LT__D(src_pad)), NULL;
  if (max_new < 1) return lt__err(LT_ERR_INVALID, "%s: max_new is %lld, must be >= 1", op, (long long)max_new), NULL;
  const int64_t V = cfg->vocab_size;
  if (bos_id < 0 || bos_id >= V || eos_id < 0 || eos_id >= V || pad_id < 0 || pad_id >= V)
    return lt__err(LT_ERR_INVALID, "%s: bos %lld, eos %lld, pad %lld: each must be in [0, %lld)", op,
                   (long long)bos_id, (long long)eos_id, (long long)pad_id, (long long)V), NULL;
  if (max_new > cfg->max_len) max_new = cfg->max_len;

  const int64_t B = src->shape[0], W = max_new + 1;
  int64_t *buf = malloc(sizeof *buf * (size_t)(B * W + 1)); /* [B, W]: <bos> then the tokens made */
  int64_t *next = malloc(sizeof *next * (size_t)(B + 1));
  bool *done = calloc((size_t)B + 1, sizeof *done);
  if (!buf || !next || !done) {
    free(buf), free(next), free(done);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld x %lld ids", op, (long long)B, (long long)W), NULL;
  }
  for (int64_t i = 0; i < B * W; i++) buf[i] = i % W == 0 ? bos_id : pad_id;

  bool prev = lt_set_grad_enabled(false);
  lt_scope *outer = lt_scope_begin();
  bool ok = outer != NULL;
  int64_t L = 0;
  lt_tensor *memory = ok && B > 0 ? lt_transformer_encode(m, src, src_pad, NULL) : NULL; /* [B, S, C] */
  if (B > 0 && !memory) ok = false;
  for (int64_t k = 1; ok && B > 0 && k <= max_new; k++) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *last = s ? last_logits(m, buf, B, W, 0, k, memory, src_pad) : NULL; /* [B, V] */
    lt_tensor *arg = last ? lt_argmax(last, 1, false) : NULL;                         /* [B] i64 */
    ok = arg && lt_tensor_read(arg, LT_DTYPE_I64, next, B) == LT_OK;
    lt_scope_end(s);
    if (!ok) break;
    bool all = true;
    for (int64_t b = 0; b < B; b++) {
      if (done[b]) continue;
      buf[b * W + k] = next[b];
      if (next[b] == eos_id) done[b] = true;
      all = all && done[b];
    }
    L = k;
    if (all) break;
  }
  lt_scope_end(outer);
  lt_set_grad_enabled(prev);
  lt_tensor *out = NULL;
  if (ok) {
    if (L < 1) L = 1; /* B == 0 */
    for (int64_t b = 0; b < B; b++) /* compact rows to [B, L], dropping <bos> */
      memmove(buf + b * L, buf + b * W + 1, sizeof *buf * (size_t)L);
    out = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, buf);
  }
  free(buf), free(next), free(done);
  return out;
}

/* Next token of one row from its logits l[0..V): argmax when temperature <= 0,
 * else the inverse CDF at u of softmax(l / temperature) over the top_k largest
 * (ties with the k-th largest included). work holds V doubles. */
static int64_t pick(const double *l, int64_t V, double temperature, int64_t top_k, double u, double *work) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  if (temperature <= 0) return best;
  double thresh = -INFINITY;
  if (top_k > 0 && top_k < V) { /* the k-th largest, by k passes of "largest below the previous" */
    memcpy(work, l, sizeof *work * (size_t)V);
    for (int64_t r = 0; r < top_k; r++) {
      int64_t a = -1;
      for (int64_t v = 0; v < V; v++)
        if (work[v] != -INFINITY && (a < 0 || work[v] > work[a])) a = v;
      if (a < 0) break;
      thresh = work[a];
      work[a] = -INFINITY;
    }
  }
  double total = 0;
  for (int64_t v = 0; v < V; v++) {
    work[v] = l[v] >= thresh ? exp((l[v] - l[best]) / temperature) : 0.0;
    total += work[v];
  }
  double target = u * total, cum = 0;
  for (int64_t v = 0; v < V; v++) {
    cum += work[v];
    if (work[v] > 0 && cum > target) return v;
  }
  return best; /* rounding at the very end of the CDF */
}

lt_tensor *lt_tf_generate(const lt_transformer *m, const lt_tensor *prompt, int64_t n_new, int64_t context,
                          double temperature, int64_t top_k, lt_generator *g) {
  const char *op = "tf_generate";
  if (!m) return lt__err(LT_ERR_NULL, "%s: the model is NULL", op), NULL;
  if (!prompt) return lt__err_null(op, "prompt"), NULL;
  const lt_tf_config *cfg = lt_transformer_config(m);
  if (cfg->arch != LT_TF_DECODER_ONLY)
    return lt__err(LT_ERR_INVALID, "%s: the model is %s, not decoder-only", op, lt_tf_arch_name(cfg->arch)), NULL;
  if (prompt->ndim != 2 || !is_int_dtype(prompt->dtype) || prompt->shape[1] < 1)
    return lt__err(LT_ERR_SHAPE, "%s: prompt is %s: must be [B, P] i32 or i64 with P >= 1", op, LT__D(prompt)),
           NULL;
  if (n_new < 0) return lt__err(LT_ERR_INVALID, "%s: n_new is %lld, must be >= 0", op, (long long)n_new), NULL;
  if (temperature > 0 && !g)
    return lt__err(LT_ERR_NULL, "%s: sampling (temperature %g > 0) needs a generator", op, temperature), NULL;

  const int64_t B = prompt->shape[0], P = prompt->shape[1], W = P + n_new, V = cfg->vocab_size;
  if (context <= 0 || context > cfg->max_len) context = cfg->max_len;
  int64_t *pr = read_ids(prompt);
  if (!pr) return NULL;
  int64_t *buf = malloc(sizeof *buf * (size_t)(B * W + 1));
  double *row = malloc(sizeof *row * (size_t)(B * V + 1)), *work = malloc(sizeof *work * (size_t)(V + 1));
  double *u = malloc(sizeof *u * (size_t)(B + 1));
  if (!buf || !row || !work || !u) {
    free(pr), free(buf), free(row), free(work), free(u);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  }
  for (int64_t b = 0; b < B; b++) memcpy(buf + b * W, pr + b * P, sizeof *buf * (size_t)P);
  free(pr);

  bool prev = lt_set_grad_enabled(false);
  bool ok = true;
  for (int64_t t = 0; ok && B > 0 && t < n_new; t++) {
    int64_t len = P + t, w = len < context ? len : context;
    lt_scope *s = lt_scope_begin();
    lt_tensor *last = s ? last_logits(m, buf, B, W, len - w, w, NULL, NULL) : NULL; /* [B, V] */
    ok = last && lt_tensor_read(last, LT_DTYPE_F64, row, B * V) == LT_OK;
    if (ok && temperature > 0) {
      lt_tensor *r = lt_rand(g, LT_DTYPE_F64, 1, (int64_t[]){B});
      ok = r && lt_tensor_read(r, LT_DTYPE_F64, u, B) == LT_OK;
    }
    lt_scope_end(s);
    for (int64_t b = 0; ok && b < B; b++)
      buf[b * W + len] = pick(row + b * V, V, temperature, top_k, temperature > 0 ? u[b] : 0.0, work);
  }
  lt_set_grad_enabled(prev);
  lt_tensor *out = ok ? lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, W}, buf) : NULL;
  free(buf), free(row), free(work), free(u);
  return out;
}
