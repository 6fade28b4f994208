/*
 * models/transformer/generate.c: the Transformer as an lt_generate_model
 * (generate.h): lt_transformer_generate checks its inputs and hands the loop
 * (greedy, beam search, sampling; generate/generate.c) two callbacks:
 *
 *   next_logits   the logits of the last position of every row. With the
 *                 cache, the first call feeds the whole prefix and each later
 *                 call only the newest column (lt_transformer_decode_step_last:
 *                 only the last position goes through the output head);
 *                 without it, every call runs lt_transformer_decode on the
 *                 whole prefix. The first call also runs the encoder (the
 *                 encoder-decoder), with each source repeated for its beams.
 *   reorder       beam search: the cache follows the beams
 *                 (lt_tf_cache_reorder).
 *
 * Everything else is the loop's, so the two paths differ only by rounding in
 * the logits. docs/decoding.md describes the algorithms and the measurements.
 *
 * What this is not: a place for the tokenizer (ids in, ids out;
 * models/transformer/programs/generate_main.c does text).
 */
#include "models/transformer/generate.h"

#include <stdlib.h>

lt_tf_generate_opts lt_tf_generate_defaults(void) {
  return (lt_tf_generate_opts){.bos_id = 1, .context = 0, .no_cache = false, .prompt_lens = NULL};
}

/* The state behind the callbacks. */
typedef struct tf_gen {
  const lt_transformer *m;
  const lt_tensor *src, *src_pad; /* [B, S] the caller's (encoder-decoder), or NULL */
  int64_t B;                      /* inputs; the loop's rows are B x K */
  int64_t max_new, context;       /* context: positions seen per step */
  bool use_cache;
  bool started;                   /* the first call has built the state below */
  lt_tensor *memory;              /* [R, S, C] encoder output (owned), or NULL */
  const lt_tensor *pad;           /* [R, S] (src_pad when K = 1, else pad_owned), or NULL */
  lt_tensor *pad_owned;           /* [R, S] rows repeated for the beams (owned), or NULL */
  lt_tf_cache *cache;             /* NULL without the cache */
  int64_t *left_pad;              /* [B] a ragged batch's padding columns per input (owned), or NULL */
  int64_t *row_pad;               /* [R] the same per row (inputs repeated for their beams; owned), or NULL */
} tf_gen;

/* x [B, ...] with each row repeated K times -> new [B*K, ...]. */
static lt_tensor *repeat_rows(const lt_tensor *x, int64_t K) {
  const int64_t R = x->shape[0] * K;
  int64_t *idx = malloc(sizeof *idx * (size_t)R);
  if (!idx) return lt_error_set(LT_ERR_NOMEM, "transformer_generate: out of memory"), NULL;
  for (int64_t r = 0; r < R; r++) idx[r] = r / K;
  lt_tensor *it = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){R}, idx);
  free(idx);
  lt_tensor *y = it ? lt_index_select(x, 0, it) : NULL;
  lt_tensor_free(it);
  return y;
}

/* The first call: the encoder output and the source padding for the R rows,
 * and the cache, sized for the longest decoder input of the call (prefix n +
 * max_new - 1, at most the context). */
static lt_status start(tf_gen *g, int64_t R, int64_t n) {
  const int64_t K = R / g->B;
  if (g->src) {
    lt_tensor *mem = lt_transformer_encode(g->m, g->src, g->src_pad, NULL); /* [B, S, C] */
    if (K == 1) {
      g->memory = lt_tensor_keep(mem);
      g->pad = g->src_pad; /* borrowed */
    } else { /* each input's rows repeated for its K beams */
      g->memory = mem ? lt_tensor_keep(repeat_rows(mem, K)) : NULL; /* [R, S, C] */
      g->pad = g->pad_owned = g->memory && g->src_pad ? lt_tensor_keep(repeat_rows(g->src_pad, K)) : NULL;
    }
    if (!g->memory || (g->src_pad && !g->pad)) return lt_last_status();
  }
  if (g->left_pad) {
    if (!(g->row_pad = malloc(sizeof *g->row_pad * (size_t)R)))
      return lt_error_set(LT_ERR_NOMEM, "transformer_generate: out of memory");
    for (int64_t r = 0; r < R; r++) g->row_pad[r] = g->left_pad[r / K];
  }
  if (g->use_cache) {
    const int64_t cap = n + g->max_new - 1 < g->context ? n + g->max_new - 1 : g->context;
    g->cache = lt_tf_cache_new(g->m, cap < 1 ? 1 : cap);
    if (!g->cache) return lt_last_status();
    if (g->row_pad && lt_tf_cache_set_left_pad(g->cache, R, g->row_pad) != LT_OK) return lt_last_status();
  }
  g->started = true;
  return LT_OK;
}

/* The first n columns of all [R, stride], contiguous (new). */
static lt_tensor *all_n(const lt_tensor *all, int64_t n) { return lt_contiguous(lt_narrow(all, 1, 0, n)); }

static lt_tensor *tf_next_logits(void *self, const int64_t *ids, int64_t stride, int64_t R, int64_t n) {
  tf_gen *g = self;
  if (!g->started && start(g, R, n) != LT_OK) return NULL;
  const int64_t first = n > g->context ? n - g->context : 0; /* the window's first column */
  lt_tensor *all = lt_tensor_from_borrowed(LT_DTYPE_I64, 2, (int64_t[]){R, stride}, (int64_t *)ids);
  lt_tensor *logits = NULL; /* [R, T, V] */
  if (all && g->cache) {
    int64_t from = n - 1; /* usually one new column */
    if (first > 0 || lt_tf_cache_len(g->cache) != n - 1) { /* first step, or the window slid: refill */
      lt_tf_cache_reset(g->cache);
      from = first;
    }
    lt_tensor *tgt = lt_contiguous(lt_narrow(all, 1, from, n - from));
    return tgt ? lt_transformer_decode_step_last(g->m, g->cache, tgt, g->memory, g->pad) : NULL; /* [R, V] */
  } else if (all && g->row_pad) { /* a ragged batch without the cache: the whole prefix through a fresh one */
    lt_tf_cache *c = lt_tf_cache_new(g->m, n);
    lt_tensor *last = c && lt_tf_cache_set_left_pad(c, R, g->row_pad) == LT_OK
                          ? lt_transformer_decode_step_last(g->m, c, all_n(all, n), NULL, NULL) : NULL;
    lt_tf_cache_free(c);
    return last; /* [R, V] */
  } else if (all) {
    lt_tensor *tgt = lt_contiguous(lt_narrow(all, 1, first, n - first));
    logits = tgt ? lt_transformer_decode(g->m, tgt, NULL, g->memory, g->pad, 0, NULL) : NULL;
  }
  return logits ? lt_select(logits, 1, logits->shape[1] - 1) : NULL; /* [R, V] */
}

static lt_status tf_reorder(void *self, const int64_t *rows, int64_t R) {
  tf_gen *g = self;
  if (g->row_pad) { /* beams move within their input, whose padding they share */
    for (int64_t i = 0; i < R; i++)
      if (g->row_pad[rows[i]] != g->row_pad[i])
        return lt_error_set(LT_ERR_INVALID, "transformer_generate: reorder moved row %lld to row %lld of another "
                            "padding", (long long)rows[i], (long long)i);
  }
  lt_tensor *t = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){R}, rows);
  lt_status st = t ? lt_tf_cache_reorder(g->cache, t) : lt_last_status();
  lt_tensor_free(t);
  return st;
}

static bool is_ids(const lt_tensor *x) {
  return x->ndim == 2 && (x->dtype == LT_DTYPE_I32 || x->dtype == LT_DTYPE_I64) && x->shape[0] >= 1 &&
         x->shape[1] >= 1;
}

lt_status lt_transformer_generate(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                  const lt_tensor *prompt, const lt_generate_opts *opts,
                                  const lt_tf_generate_opts *tf, lt_generate_result *out) {
  const char *op = "transformer_generate";
  if (!m) return lt_error_set(LT_ERR_NULL, "%s: the model is NULL", op);
  if (!out) return lt_error_set(LT_ERR_NULL, "%s: out is NULL", op);
  const lt_generate_opts o = opts ? *opts : lt_generate_defaults();
  const lt_tf_generate_opts t = tf ? *tf : lt_tf_generate_defaults();
  const lt_tf_config *cfg = lt_transformer_config(m);
  const int64_t V = cfg->vocab_size;
  const bool encdec = cfg->arch == LT_TF_ENCODER_DECODER;
  const lt_tensor *in = encdec ? src : prompt;
  if (cfg->arch == LT_TF_ENCODER_ONLY)
    return lt_error_set(LT_ERR_INVALID, "%s: the model is encoder-only: it classifies (transformer_classify), it does "
                   "not generate", op);
  if (encdec && prompt) return lt_error_set(LT_ERR_INVALID, "%s: prompt given to an encoder-decoder (pass src)", op);
  if (!encdec && (src || src_pad))
    return lt_error_set(LT_ERR_INVALID, "%s: src / src_pad given to a decoder-only model (pass prompt)", op);
  if (!in) return lt_error_set(LT_ERR_NULL, "%s: %s is NULL", op, encdec ? "src" : "prompt");
  if (!is_ids(in))
    return lt_error_set(in->ndim != 2 || in->shape[0] < 1 || in->shape[1] < 1 ? LT_ERR_SHAPE : LT_ERR_DTYPE,
                   "%s: %s is %s: need [B, L] i32/i64 ids with B, L >= 1 (an empty input has nothing to condition on)",
                   op, encdec ? "src" : "prompt", LT_DESC(in));
  if (src_pad && (src_pad->ndim != 2 || src_pad->dtype != LT_DTYPE_BOOL || src_pad->shape[0] != src->shape[0] ||
                  src_pad->shape[1] != src->shape[1]))
    return lt_error_set(LT_ERR_SHAPE, "%s: src is %s, src_pad is %s: src_pad must be bool of src's shape", op, LT_DESC(src),
                   LT_DESC(src_pad));
  if (t.bos_id < 0 || t.bos_id >= V)
    return lt_error_set(LT_ERR_INVALID, "%s: bos %lld: must be in [0, vocab_size %lld)", op, (long long)t.bos_id,
                   (long long)V);
  if (encdec && in->shape[1] > cfg->max_len)
    return lt_error_set(LT_ERR_INVALID, "%s: src is %s: longer than the model's max_len %lld positions", op, LT_DESC(in),
                   (long long)cfg->max_len);
  if (encdec && o.max_new > cfg->max_len)
    return lt_error_set(LT_ERR_INVALID, "%s: max_new %lld: beyond the decoder's max_len %lld positions (<bos> + %lld "
                   "tokens fed back)", op, (long long)o.max_new, (long long)cfg->max_len,
                   (long long)(cfg->max_len - 1));

  tf_gen g = {.m = m, .src = encdec ? src : NULL, .src_pad = encdec ? src_pad : NULL, .B = in->shape[0],
              .max_new = o.max_new, .use_cache = !t.no_cache};
  /* the encoder-decoder's checks above keep it inside max_len */
  g.context = encdec || t.context <= 0 || t.context > cfg->max_len ? cfg->max_len : t.context;
  if (t.prompt_lens) { /* a ragged batch: checked, then each row's padding */
    const lt_tensor *pl = t.prompt_lens;
    const int64_t B = in->shape[0], P = in->shape[1];
    if (encdec) return lt_error_set(LT_ERR_INVALID, "%s: prompt_lens given to an encoder-decoder (src_pad pads src)", op);
    if (pl->ndim != 1 || pl->shape[0] != B || (pl->dtype != LT_DTYPE_I32 && pl->dtype != LT_DTYPE_I64))
      return lt_error_set(LT_ERR_SHAPE, "%s: prompt_lens is %s, prompt is %s: need [B] i32/i64 lengths", op,
                          LT_DESC(pl), LT_DESC(in));
    if (P + (o.max_new > 0 ? o.max_new : 1) - 1 > g.context)
      return lt_error_set(LT_ERR_INVALID, "%s: a ragged batch of %lld columns with max_new %lld needs %lld positions, "
                          "more than the context of %lld: cropping the window has no padding rule (decode such rows "
                          "one length at a time)", op, (long long)P, (long long)o.max_new,
                          (long long)(P + o.max_new - 1), (long long)g.context);
    if (!(g.left_pad = malloc(sizeof *g.left_pad * (size_t)B))) return lt_error_set(LT_ERR_NOMEM, "%s: out of memory", op);
    if (lt_tensor_read(pl, LT_DTYPE_I64, g.left_pad, B) != LT_OK) return free(g.left_pad), lt_last_status();
    for (int64_t b = 0; b < B; b++) {
      if (g.left_pad[b] < 1 || g.left_pad[b] > P) {
        lt_status st = lt_error_set(LT_ERR_INVALID, "%s: prompt_lens[%lld] = %lld: must be in [1, P = %lld] (a row "
                                    "needs a token)", op, (long long)b, (long long)g.left_pad[b], (long long)P);
        free(g.left_pad);
        return st;
      }
      g.left_pad[b] = P - g.left_pad[b];
    }
  }
  lt_tensor *bos = encdec ? lt_full(LT_DTYPE_I64, 2, (int64_t[]){g.B, 1}, (double)t.bos_id) : NULL; /* [B, 1] */
  if (encdec && !bos) return free(g.left_pad), lt_last_status();
  const lt_generate_model model = {
      .self = &g, .vocab_size = V, .next_logits = tf_next_logits, .reorder = g.use_cache ? tf_reorder : NULL};
  lt_status st = lt_generate(&model, encdec ? bos : prompt, &o, out);
  lt_tf_cache_free(g.cache);
  lt_tensor_free(g.memory), lt_tensor_free(g.pad_owned), lt_tensor_free(bos);
  free(g.left_pad), free(g.row_pad);
  return st;
}
