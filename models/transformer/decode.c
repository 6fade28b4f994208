/*
 * models/transformer/decode.c: decoding with a trained Transformer (the
 * decoding half of generate.h): lt_tf_decode, the one loop behind every
 * strategy (greedy, beam search, sampling) for the encoder-decoder and the
 * decoder-only model, and the two older entry points built on it
 * (lt_tf_greedy_decode for train's validation, lt_tf_generate for its text
 * samples). docs/decoding.md describes the algorithms and the measurements.
 *
 * The loop, for R rows (B inputs x K beams):
 *     seq [R, W]: the decoder inputs so far (<bos> or the prompt, then the
 *                 tokens made), n columns filled, the same n for every row
 *     repeat: logits of the last position of every row     next_logits()
 *             pick one token per row (greedy / sample), or
 *             pick the best K continuations per input (beam) and
 *             permute the rows (and the cache) to follow them
 *     until every row / input is done or max_new tokens were made.
 * next_logits() is where the cache comes in: with it, the first step feeds
 * the whole prefix and each later step only the newest column
 * (lt_transformer_decode_step); without it, every step runs
 * lt_transformer_decode on the whole prefix. Everything else is shared, so
 * the two paths differ only by rounding in the logits.
 *
 * Each step's tensors live in their own lt_scope, so memory does not grow
 * with the length; the per-row bookkeeping (tokens, scores, hypotheses) is in
 * plain arrays on the host, in double precision.
 *
 * What this is not: a batched server (rows start together), nor a place for
 * the tokenizer (ids in, ids out; models/transformer/generate_main.c does text).
 */
#include "models/transformer/generate.h"
#include "tensor/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_int_dtype(lt_dtype d) { return d == LT_DTYPE_I32 || d == LT_DTYPE_I64; }

lt_decode_opts lt_decode_defaults(void) {
  return (lt_decode_opts){
      .strategy = LT_DECODE_GREEDY,
      .max_new = 64,
      .beam_width = 4,
      .length_penalty = 0.6,
      .temperature = 1.0,
      .top_k = 0,
      .top_p = 1.0,
      .gen = NULL,
      .bos_id = 1,
      .eos_id = 2,
      .pad_id = 0,
      .context = 0,
      .no_cache = false,
  };
}

void lt_decode_result_free(lt_decode_result *r) {
  if (!r) return;
  lt_tensor_free(r->tokens);
  lt_tensor_free(r->lengths);
  lt_tensor_free(r->scores);
  r->tokens = r->lengths = r->scores = NULL;
}

/* ======================================================================== */
/* Picking a token from one row of logits                                   */
/* ======================================================================== */

static int64_t argmax_row(const double *l, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  return best;
}

/* log(sum exp l): log-softmax is l - lse. */
static double logsumexp_row(const double *l, int64_t V) {
  const double mx = l[argmax_row(l, V)];
  if (isinf(mx)) return mx;
  double s = 0;
  for (int64_t v = 0; v < V; v++) s += exp(l[v] - mx);
  return mx + log(s);
}

typedef struct prob_id {
  double p;
  int64_t id;
} prob_id;

static int cmp_prob_desc(const void *a, const void *b) {
  const prob_id *x = a, *y = b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Next token of one row from its logits l[0..V): the inverse CDF at u of
 * softmax(l / temperature) over the top_k largest (ties with the k-th largest
 * included), then over the smallest most-likely-first prefix whose
 * probability reaches top_p. work holds V doubles, pairs V prob_id. */
static int64_t sample_row(const double *l, int64_t V, double temperature, int64_t top_k, double top_p, double u,
                          double *work, prob_id *pairs) {
  const int64_t best = argmax_row(l, V);
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
  if (top_p < 1.0) { /* nucleus: keep the most likely tokens until their mass reaches top_p */
    int64_t n = 0;
    for (int64_t v = 0; v < V; v++)
      if (work[v] > 0) pairs[n++] = (prob_id){work[v], v};
    qsort(pairs, (size_t)n, sizeof *pairs, cmp_prob_desc);
    double cum = 0, kept = 0;
    int64_t i = 0;
    for (; i < n; i++) {
      cum += pairs[i].p / total;
      kept += pairs[i].p;
      if (cum >= top_p) break;
    }
    for (int64_t j = i + 1; j < n; j++) work[pairs[j].id] = 0.0;
    if (i < n) total = kept;
  }
  double target = u * total, cum = 0;
  for (int64_t v = 0; v < V; v++) {
    cum += work[v];
    if (work[v] > 0 && cum > target) return v;
  }
  return best; /* rounding at the very end of the CDF */
}

/* ======================================================================== */
/* The decoding state and the logits of the next position                   */
/* ======================================================================== */

typedef struct dec {
  const lt_transformer *m;
  const lt_decode_opts *o;
  int64_t R, V, W;       /* rows, vocabulary, columns of seq */
  int64_t P;             /* columns before the first generated token (1 for <bos>, or the prompt length) */
  int64_t n;             /* columns filled */
  int64_t context;       /* positions seen per step */
  int64_t *seq, *tmp;    /* [R, W] each (tmp: row permutations) */
  double *logits;        /* [R, V]: the last position's logits */
  double *lse;           /* [R]: their log-sum-exp */
  lt_tensor *memory;     /* [R, S, C] encoder output (owned), or NULL */
  const lt_tensor *src_pad; /* [R, S] (the caller's when K = 1, else pad_owned), or NULL */
  lt_tensor *pad_owned;  /* [R, S] rows repeated for the beams (owned), or NULL */
  lt_tf_cache *cache;    /* NULL without the cache */
} dec;

/* Fills d->logits / d->lse with the next position's logits of every row. */
static lt_status next_logits(dec *d) {
  const int64_t start = d->n > d->context ? d->n - d->context : 0, w = d->n - start;
  lt_scope *s = lt_scope_begin();
  if (!s) return lt_last_status();
  lt_tensor *all = lt_tensor_from_borrowed(LT_DTYPE_I64, 2, (int64_t[]){d->R, d->W}, d->seq);
  lt_tensor *logits = NULL; /* [R, T, V] */
  if (all && d->cache) {
    int64_t from = d->n - 1; /* usually one new column */
    if (start > 0 || lt_tf_cache_len(d->cache) != d->n - 1) { /* first step, or the window slid: refill */
      lt_tf_cache_reset(d->cache);
      from = start;
    }
    lt_tensor *tgt = lt_contiguous(lt_narrow(all, 1, from, d->n - from));
    logits = tgt ? lt_transformer_decode_step(d->m, d->cache, tgt, d->memory, d->src_pad) : NULL;
  } else if (all) {
    lt_tensor *tgt = lt_contiguous(lt_narrow(all, 1, start, w));
    logits = tgt ? lt_transformer_decode(d->m, tgt, NULL, d->memory, d->src_pad, 0, NULL) : NULL;
  }
  lt_tensor *last = logits ? lt_select(logits, 1, logits->shape[1] - 1) : NULL; /* [R, V] */
  lt_status st = last ? lt_tensor_read(last, LT_DTYPE_F64, d->logits, d->R * d->V) : lt_last_status();
  lt_scope_end(s);
  if (st != LT_OK) return st;
  for (int64_t r = 0; r < d->R; r++) d->lse[r] = logsumexp_row(d->logits + r * d->V, d->V);
  return LT_OK;
}

/* ======================================================================== */
/* Greedy and sampling: one token per row                                   */
/* ======================================================================== */

static lt_status run_rows(dec *d, int64_t *len, double *score) {
  const lt_decode_opts *o = d->o;
  const int64_t R = d->R, V = d->V;
  const bool sample = o->strategy == LT_DECODE_SAMPLE;
  bool *done = calloc((size_t)R, sizeof *done);
  double *u = malloc(sizeof *u * (size_t)R), *work = malloc(sizeof *work * (size_t)V);
  prob_id *pairs = malloc(sizeof *pairs * (size_t)V);
  lt_status st = done && u && work && pairs ? LT_OK : lt__err(LT_ERR_NOMEM, "tf_decode: out of memory");
  for (int64_t t = 0; st == LT_OK && t < o->max_new; t++) {
    if ((st = next_logits(d)) != LT_OK) break;
    if (sample) {
      lt_scope *s = lt_scope_begin();
      lt_tensor *r = s ? lt_rand(o->gen, LT_DTYPE_F64, 1, (int64_t[]){R}) : NULL;
      st = r ? lt_tensor_read(r, LT_DTYPE_F64, u, R) : lt_last_status();
      lt_scope_end(s);
      if (st != LT_OK) break;
    }
    bool all = true;
    for (int64_t r = 0; r < R; r++) {
      int64_t *row = d->seq + r * d->W;
      if (done[r]) {
        row[d->n] = o->pad_id;
        continue;
      }
      const double *l = d->logits + r * V;
      const int64_t tok = sample ? sample_row(l, V, o->temperature, o->top_k, o->top_p, u[r], work, pairs)
                                 : argmax_row(l, V);
      row[d->n] = tok;
      score[r] += l[tok] - d->lse[r];
      len[r]++;
      done[r] = tok == o->eos_id;
      all = all && done[r];
    }
    d->n++;
    if (all) break;
  }
  free(done), free(u), free(work), free(pairs);
  return st;
}

/* ======================================================================== */
/* Beam search                                                              */
/* ======================================================================== */

typedef struct hyp {
  double score;   /* sum log p / len^alpha */
  double sum;     /* sum log p */
  int64_t len;    /* tokens, <eos> included */
  int64_t *tok;   /* [max_new] */
} hyp;

typedef struct cand {
  double s;      /* beam's sum + log p(v) */
  int64_t k, v;  /* beam (within the input), token */
} cand;

/* Adds a hypothesis to input b's list of at most K (replacing the worst if
 * full and worse; ties keep the earlier one). */
static void add_hyp(hyp *h, int64_t *nh, int64_t K, const int64_t *tok, int64_t len, double sum, double alpha) {
  const double score = sum / pow((double)len, alpha);
  int64_t at = *nh;
  if (*nh == K) {
    at = 0;
    for (int64_t i = 1; i < K; i++)
      if (h[i].score < h[at].score) at = i;
    if (!(score > h[at].score)) return;
  } else {
    (*nh)++;
  }
  h[at].score = score, h[at].sum = sum, h[at].len = len;
  memcpy(h[at].tok, tok, sizeof *tok * (size_t)len);
}

static lt_status run_beam(dec *d, int64_t B, int64_t *out_tok, int64_t *len, double *score) {
  const lt_decode_opts *o = d->o;
  const int64_t K = o->beam_width, R = d->R, V = d->V, M = o->max_new;
  const double alpha = o->length_penalty;
  double *sum = malloc(sizeof *sum * (size_t)R), *nsum = malloc(sizeof *nsum * (size_t)R);
  int64_t *from = malloc(sizeof *from * (size_t)R), *ntok = malloc(sizeof *ntok * (size_t)R);
  int64_t *nhyp = calloc((size_t)B, sizeof *nhyp), *store = malloc(sizeof *store * (size_t)(R * M + 1));
  int64_t *buf = malloc(sizeof *buf * (size_t)(M + 1));
  hyp *hy = calloc((size_t)R, sizeof *hy);
  cand *c = malloc(sizeof *c * (size_t)(2 * K));
  bool *bdone = calloc((size_t)B, sizeof *bdone);
  lt_status st = sum && nsum && from && ntok && nhyp && store && buf && hy && c && bdone
                     ? LT_OK : lt__err(LT_ERR_NOMEM, "tf_decode: out of memory for the beams");
  for (int64_t r = 0; st == LT_OK && r < R; r++) {
    sum[r] = r % K == 0 ? 0.0 : -INFINITY; /* one live beam per input at the start */
    hy[r].tok = store + r * M;
  }
  for (int64_t t = 0; st == LT_OK && t < M; t++) {
    if ((st = next_logits(d)) != LT_OK) break;
    bool all = true;
    for (int64_t b = 0; b < B; b++) {
      if (bdone[b]) { /* keep its rows as they are */
        for (int64_t k = 0; k < K; k++) from[b * K + k] = b * K + k, ntok[b * K + k] = o->pad_id, nsum[b * K + k] = -INFINITY;
        continue;
      }
      /* the best 2K (beam, token) continuations, by score, ties to the lower (k, v) */
      int64_t nc = 0;
      for (int64_t k = 0; k < K; k++) {
        const int64_t r = b * K + k;
        if (sum[r] == -INFINITY) continue;
        const double *l = d->logits + r * V;
        for (int64_t v = 0; v < V; v++) {
          const double s = sum[r] + (l[v] - d->lse[r]);
          if (nc == 2 * K && !(s > c[nc - 1].s)) continue;
          int64_t at = nc < 2 * K ? nc++ : nc - 1;
          while (at > 0 && s > c[at - 1].s) {
            c[at] = c[at - 1];
            at--;
          }
          c[at] = (cand){s, k, v};
        }
      }
      int64_t nb = 0;
      for (int64_t i = 0; i < nc && nb < K; i++) {
        const int64_t r = b * K + c[i].k;
        if (c[i].v == o->eos_id) { /* a finished hypothesis, if it ranks among the best K */
          if (i >= K) continue;
          const int64_t L = d->n - d->P;
          memcpy(buf, d->seq + r * d->W + d->P, sizeof *buf * (size_t)L);
          buf[L] = c[i].v;
          add_hyp(hy + b * K, &nhyp[b], K, buf, L + 1, c[i].s, alpha);
          continue;
        }
        from[b * K + nb] = r, ntok[b * K + nb] = c[i].v, nsum[b * K + nb] = c[i].s;
        nb++;
      }
      for (; nb < K; nb++) from[b * K + nb] = b * K, ntok[b * K + nb] = o->pad_id, nsum[b * K + nb] = -INFINITY;
      bdone[b] = nhyp[b] >= K;
      all = all && bdone[b];
    }
    /* the rows follow their beams: seq and the cache */
    bool identity = true;
    for (int64_t r = 0; r < R; r++) {
      identity = identity && from[r] == r;
      memcpy(d->tmp + r * d->W, d->seq + from[r] * d->W, sizeof *d->tmp * (size_t)d->n);
      d->tmp[r * d->W + d->n] = ntok[r];
    }
    int64_t *sw = d->seq;
    d->seq = d->tmp, d->tmp = sw;
    memcpy(sum, nsum, sizeof *sum * (size_t)R);
    d->n++;
    if (all) break;
    if (d->cache && !identity) {
      lt_tensor *rows = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){R}, from);
      st = rows ? lt_tf_cache_reorder(d->cache, rows) : lt_last_status();
      lt_tensor_free(rows);
    }
  }
  /* inputs still open at max_new: their running beams count as finished */
  for (int64_t b = 0; st == LT_OK && b < B; b++) {
    if (!bdone[b])
      for (int64_t k = 0; k < K; k++) {
        const int64_t r = b * K + k, L = d->n - d->P;
        if (sum[r] == -INFINITY || L < 1) continue;
        add_hyp(hy + b * K, &nhyp[b], K, d->seq + r * d->W + d->P, L, sum[r], alpha);
      }
    int64_t best = -1;
    for (int64_t i = 0; i < nhyp[b]; i++)
      if (best < 0 || hy[b * K + i].score > hy[b * K + best].score) best = i;
    len[b] = best < 0 ? 0 : hy[b * K + best].len;
    score[b] = best < 0 ? 0.0 : hy[b * K + best].score;
    for (int64_t i = 0; i < M; i++) out_tok[b * M + i] = i < len[b] ? hy[b * K + best].tok[i] : o->pad_id;
  }
  free(sum), free(nsum), free(from), free(ntok), free(nhyp), free(store), free(buf), free(hy), free(c), free(bdone);
  return st;
}

/* ======================================================================== */
/* lt_tf_decode                                                             */
/* ======================================================================== */

/* x [B, ...] with each row repeated K times -> new [B*K, ...]. */
static lt_tensor *repeat_rows(const lt_tensor *x, int64_t K) {
  const int64_t R = x->shape[0] * K;
  int64_t *idx = malloc(sizeof *idx * (size_t)R);
  if (!idx) return lt__err(LT_ERR_NOMEM, "tf_decode: out of memory"), NULL;
  for (int64_t r = 0; r < R; r++) idx[r] = r / K;
  lt_tensor *it = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){R}, idx);
  free(idx);
  lt_tensor *y = it ? lt_index_select(x, 0, it) : NULL;
  lt_tensor_free(it);
  return y;
}

static lt_status check_opts(const char *op, const lt_tf_config *cfg, const lt_decode_opts *o) {
  const int64_t V = cfg->vocab_size;
  if (o->strategy != LT_DECODE_GREEDY && o->strategy != LT_DECODE_BEAM && o->strategy != LT_DECODE_SAMPLE)
    return lt__err(LT_ERR_INVALID, "%s: strategy %d: must be LT_DECODE_GREEDY, _BEAM or _SAMPLE", op, (int)o->strategy);
  if (o->max_new < 0) return lt__err(LT_ERR_INVALID, "%s: max_new %lld: must be >= 0", op, (long long)o->max_new);
  if (o->bos_id < 0 || o->bos_id >= V || o->eos_id < -1 || o->eos_id >= V || o->pad_id < 0 || o->pad_id >= V)
    return lt__err(LT_ERR_INVALID, "%s: bos %lld, eos %lld, pad %lld: each must be in [0, vocab_size %lld) (eos may be -1)",
                   op, (long long)o->bos_id, (long long)o->eos_id, (long long)o->pad_id, (long long)V);
  if (o->strategy == LT_DECODE_BEAM) {
    if (o->beam_width < 1 || o->beam_width > 1024)
      return lt__err(LT_ERR_INVALID, "%s: beam_width %lld: must be in [1, 1024]", op, (long long)o->beam_width);
    if (!(o->length_penalty >= 0.0) || isinf(o->length_penalty))
      return lt__err(LT_ERR_INVALID, "%s: length_penalty %g: must be finite and >= 0", op, o->length_penalty);
  }
  if (o->strategy == LT_DECODE_SAMPLE) {
    if (!o->gen) return lt__err(LT_ERR_NULL, "%s: sampling needs a generator (opts->gen is NULL)", op);
    if (!(o->temperature > 0.0) || isinf(o->temperature))
      return lt__err(LT_ERR_INVALID, "%s: temperature %g: must be finite and > 0 (greedy for 0)", op, o->temperature);
    if (!(o->top_p > 0.0 && o->top_p <= 1.0))
      return lt__err(LT_ERR_INVALID, "%s: top_p %g: must be in (0, 1]", op, o->top_p);
  }
  return LT_OK;
}

/* Every id of x in [0, V). */
static lt_status check_vocab(const char *op, const char *what, const lt_tensor *x, int64_t V) {
  int64_t *v = malloc(sizeof *v * (size_t)(x->numel + 1));
  if (!v) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  lt_status st = lt_tensor_read(x, LT_DTYPE_I64, v, x->numel);
  for (int64_t i = 0; st == LT_OK && i < x->numel; i++)
    if (v[i] < 0 || v[i] >= V)
      st = lt__err(LT_ERR_INVALID, "%s: %s holds id %lld at flat index %lld: outside the vocabulary [0, %lld)", op,
                   what, (long long)v[i], (long long)i, (long long)V);
  free(v);
  return st;
}

lt_status lt_tf_decode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                       const lt_tensor *prompt, const lt_decode_opts *opts, lt_decode_result *out) {
  const char *op = "tf_decode";
  if (!m) return lt__err(LT_ERR_NULL, "%s: the model is NULL", op);
  if (!out) return lt__err(LT_ERR_NULL, "%s: out is NULL", op);
  const lt_decode_opts o = opts ? *opts : lt_decode_defaults();
  const lt_tf_config *cfg = lt_transformer_config(m);
  lt_status st = check_opts(op, cfg, &o);
  if (st != LT_OK) return st;
  const int64_t V = cfg->vocab_size;
  const bool encdec = cfg->arch == LT_TF_ENCODER_DECODER;
  const lt_tensor *in = encdec ? src : prompt;
  if (cfg->arch == LT_TF_ENCODER_ONLY)
    return lt__err(LT_ERR_INVALID, "%s: the model is encoder-only: it classifies (transformer_classify), it does "
                   "not generate", op);
  if (encdec && prompt) return lt__err(LT_ERR_INVALID, "%s: prompt given to an encoder-decoder (pass src)", op);
  if (!encdec && (src || src_pad))
    return lt__err(LT_ERR_INVALID, "%s: src / src_pad given to a decoder-only model (pass prompt)", op);
  if (!in) return lt__err(LT_ERR_NULL, "%s: %s is NULL", op, encdec ? "src" : "prompt");
  if (in->ndim != 2 || !is_int_dtype(in->dtype) || in->shape[0] < 1 || in->shape[1] < 1)
    return lt__err(in->ndim != 2 || in->shape[0] < 1 || in->shape[1] < 1 ? LT_ERR_SHAPE : LT_ERR_DTYPE,
                   "%s: %s is %s: need [B, L] i32/i64 ids with B, L >= 1 (an empty input has nothing to condition on)",
                   op, encdec ? "src" : "prompt", LT__D(in));
  if (src_pad && (src_pad->ndim != 2 || src_pad->dtype != LT_DTYPE_BOOL || src_pad->shape[0] != src->shape[0] ||
                  src_pad->shape[1] != src->shape[1]))
    return lt__err(LT_ERR_SHAPE, "%s: src is %s, src_pad is %s: src_pad must be bool of src's shape", op, LT__D(src),
                   LT__D(src_pad));
  if ((st = check_vocab(op, encdec ? "src" : "prompt", in, V)) != LT_OK) return st;
  if (encdec && in->shape[1] > cfg->max_len)
    return lt__err(LT_ERR_INVALID, "%s: src is %s: longer than the model's max_len %lld positions", op, LT__D(in),
                   (long long)cfg->max_len);
  if (encdec && o.max_new > cfg->max_len)
    return lt__err(LT_ERR_INVALID, "%s: max_new %lld: beyond the decoder's max_len %lld positions (<bos> + %lld "
                   "tokens fed back)", op, (long long)o.max_new, (long long)cfg->max_len, (long long)(cfg->max_len - 1));

  const int64_t B = in->shape[0], K = o.strategy == LT_DECODE_BEAM ? o.beam_width : 1, R = B * K;
  const int64_t P = encdec ? 1 : in->shape[1], M = o.max_new;
  dec d = {.m = m, .o = &o, .R = R, .V = V, .W = P + M, .P = P, .n = P};
  d.context = o.context <= 0 || o.context > cfg->max_len ? cfg->max_len : o.context;
  if (encdec) d.context = cfg->max_len; /* the checks above keep the encoder-decoder inside it */
  d.seq = malloc(sizeof *d.seq * (size_t)(R * d.W));
  d.tmp = malloc(sizeof *d.tmp * (size_t)(R * d.W));
  d.logits = malloc(sizeof *d.logits * (size_t)(R * V));
  d.lse = malloc(sizeof *d.lse * (size_t)R);
  int64_t *len = calloc((size_t)B * K, sizeof *len), *tok = malloc(sizeof *tok * (size_t)(B * M + 1));
  double *score = calloc((size_t)B * K, sizeof *score);
  if (!d.seq || !d.tmp || !d.logits || !d.lse || !len || !tok || !score) {
    st = lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld rows x %lld ids", op, (long long)R, (long long)d.W);
    goto done;
  }
  /* the rows' prefixes: <bos>, or the prompt (each repeated K times) */
  if (encdec) {
    for (int64_t r = 0; r < R; r++) d.seq[r * d.W] = o.bos_id;
  } else {
    int64_t *pr = malloc(sizeof *pr * (size_t)(B * P));
    st = pr ? lt_tensor_read(in, LT_DTYPE_I64, pr, B * P) : lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    for (int64_t r = 0; st == LT_OK && r < R; r++) memcpy(d.seq + r * d.W, pr + (r / K) * P, sizeof *pr * (size_t)P);
    free(pr);
    if (st != LT_OK) goto done;
  }

  bool prev = lt_set_grad_enabled(false);
  if (encdec && M > 0) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *mem = s ? lt_transformer_encode(m, src, src_pad, NULL) : NULL; /* [B, S, C] */
    if (K == 1) {
      d.memory = lt_tensor_keep(mem);
      d.src_pad = src_pad; /* borrowed */
    } else { /* each input's rows repeated for its K beams */
      d.memory = mem ? lt_tensor_keep(repeat_rows(mem, K)) : NULL; /* [R, S, C] */
      d.src_pad = d.pad_owned = d.memory && src_pad ? lt_tensor_keep(repeat_rows(src_pad, K)) : NULL;
    }
    if (!d.memory || (src_pad && !d.src_pad)) st = lt_last_status();
    lt_scope_end(s);
  }
  if (st == LT_OK && !o.no_cache && M > 0) {
    int64_t cap = P + M - 1 < d.context ? P + M - 1 : d.context;
    d.cache = lt_tf_cache_new(m, cap < 1 ? 1 : cap);
    if (!d.cache) st = lt_last_status();
  }
  if (st == LT_OK) {
    if (o.strategy == LT_DECODE_BEAM) {
      st = run_beam(&d, B, tok, len, score);
    } else {
      st = run_rows(&d, len, score);
      for (int64_t r = 0; st == LT_OK && r < R; r++)
        for (int64_t i = 0; i < M; i++) tok[r * M + i] = i < len[r] ? d.seq[r * d.W + P + i] : o.pad_id;
    }
  }
  lt_set_grad_enabled(prev);
  if (st == LT_OK) {
    int64_t L = 0;
    for (int64_t b = 0; b < B; b++) L = len[b] > L ? len[b] : L;
    for (int64_t b = 0; b < B; b++) memmove(tok + b * L, tok + b * M, sizeof *tok * (size_t)L); /* [B, M] -> [B, L] */
    lt_decode_result r = {0};
    r.tokens = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, tok);
    r.lengths = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){B}, len);
    r.scores = lt_tensor_from_copy(LT_DTYPE_F64, 1, (int64_t[]){B}, score);
    if (!r.tokens || !r.lengths || !r.scores) {
      st = lt_last_status();
      lt_decode_result_free(&r);
    } else {
      *out = r;
    }
  }
done:
  lt_tf_cache_free(d.cache);
  lt_tensor_free(d.memory), lt_tensor_free(d.pad_owned);
  free(d.seq), free(d.tmp), free(d.logits), free(d.lse), free(len), free(tok), free(score);
  return st;
}

/* ======================================================================== */
/* The older entry points                                                   */
/* ======================================================================== */

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
  if (max_new < 1) return lt__err(LT_ERR_INVALID, "%s: max_new is %lld, must be >= 1", op, (long long)max_new), NULL;
  if (eos_id < 0) /* lt_tf_decode allows -1 (never stop); this call never did */
    return lt__err(LT_ERR_INVALID, "%s: eos %lld: must be in [0, %lld)", op, (long long)eos_id,
                   (long long)cfg->vocab_size), NULL;
  lt_decode_opts o = lt_decode_defaults();
  o.max_new = max_new > cfg->max_len ? cfg->max_len : max_new;
  o.bos_id = bos_id, o.eos_id = eos_id, o.pad_id = pad_id;
  lt_decode_result r = {0};
  if (lt_tf_decode(m, src, src_pad, NULL, &o, &r) != LT_OK) return NULL;
  lt_tensor *y = r.tokens;
  r.tokens = NULL;
  lt_decode_result_free(&r);
  return y;
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
  lt_decode_opts o = lt_decode_defaults();
  o.strategy = temperature > 0 ? LT_DECODE_SAMPLE : LT_DECODE_GREEDY;
  o.temperature = temperature > 0 ? temperature : 1.0;
  o.top_k = top_k, o.gen = g;
  o.max_new = n_new, o.eos_id = -1, o.context = context;
  lt_decode_result r = {0};
  if (lt_tf_decode(m, NULL, NULL, prompt, &o, &r) != LT_OK) return NULL;
  lt_tensor *p64 = lt_to_dtype(prompt, LT_DTYPE_I64);
  lt_tensor *y = p64 ? lt_cat(2, (lt_tensor *const[]){p64, r.tokens}, 1) : NULL; /* [B, P + n_new] */
  lt_tensor_free(p64);
  lt_decode_result_free(&r);
  return y;
}
