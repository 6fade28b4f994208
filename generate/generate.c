/*
 * generate/generate.c: the one generation loop behind every strategy
 * (greedy, beam search, sampling) for any model that supplies next-token
 * logits through an lt_generate_model (generate.h). docs/decoding.md
 * describes the algorithms and the measurements.
 *
 * The loop, for R rows (B inputs x K beams):
 *     seq [R, W]: the ids so far (the prefix, then the tokens made), n
 *                 columns filled, the same n for every row
 *     repeat: log p of every row's next token       next_logp()
 *             pick one token per row (greedy / sample), or
 *             pick the best K continuations per input (beam) and
 *             permute the rows (and the model's state) to follow them
 *     until every row / input is done or max_new tokens were made.
 * next_logp() asks the model for the logits (the model decides what to
 * recompute and what to read from its cache) and takes their log-softmax
 * with lt_log_softmax in f64. Each step's tensors live in their own lt_scope,
 * so memory does not grow with the length; the per-row bookkeeping (tokens,
 * scores, hypotheses) is in plain arrays on the host, in double precision.
 *
 * What this is not: a model (no tensors of weights here), nor a place for a
 * tokenizer (ids in, ids out).
 */
#include "generate/generate.h"
#include "autograd/autograd.h"
#include "tensor/error_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const strategy_names[] = {"greedy", "beam", "sample"};

const char *lt_generate_strategy_name(lt_generate_strategy strategy) {
  return lt_enum_name(strategy_names, 3, (int)strategy);
}

LT_ENUM_PARSER(lt_generate_strategy_parse, lt_generate_strategy, "strategy", strategy_names, 3, NULL, 0)

lt_generate_opts lt_generate_defaults(void) {
  return (lt_generate_opts){
      .strategy = LT_GENERATE_GREEDY,
      .max_new = 64,
      .beam_width = 4,
      .length_penalty = 0.6,
      .temperature = 1.0,
      .top_k = 0,
      .top_p = 1.0,
      .gen = NULL,
      .eos_id = 2,
      .pad_id = 0,
  };
}

/* Does tok end a row: eos_id or one of also_eos. */
static bool is_eos(const lt_generate_opts *o, int64_t tok) {
  if (tok == o->eos_id) return true;
  for (int i = 0; i < o->n_also_eos; i++)
    if (tok == o->also_eos[i]) return true;
  return false;
}

void lt_generate_result_free(lt_generate_result *r) {
  if (!r) return;
  lt_tensor_free(r->tokens);
  lt_tensor_free(r->lengths);
  lt_tensor_free(r->scores);
  r->tokens = r->lengths = r->scores = NULL;
}

/* ======================================================================== */
/* Picking a token from one row of log-probabilities                        */
/* ======================================================================== */

static int64_t argmax_row(const double *l, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  return best;
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

/* Next token of one row from its log-probabilities l[0..V): the inverse CDF
 * at u of softmax(l / temperature) over the top_k largest (ties with the k-th
 * largest included), then over the smallest most-likely-first prefix whose
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
/* The loop's state and the log-probabilities of the next token             */
/* ======================================================================== */

typedef struct gen_state {
  const lt_generate_model *model;
  const lt_generate_opts *o;
  int64_t R, V, W;       /* rows, vocabulary, columns of seq */
  int64_t P;             /* columns before the first generated token */
  int64_t n;             /* columns filled */
  int64_t *seq, *tmp;    /* [R, W] each (tmp: row permutations) */
  double *logp;          /* [R, V]: log-softmax of the model's next-token logits */
} gen_state;

/* Fills d->logp with the log-probabilities of every row's next token. */
static lt_status next_logp(gen_state *d) {
  const char *op = "generate";
  lt_scope *s = lt_scope_begin();
  if (!s) return lt_last_status();
  lt_clear_error(); /* so that a NULL without an error of its own is told apart from an older failure */
  lt_tensor *l = d->model->next_logits(d->model->self, d->seq, d->W, d->R, d->n);
  lt_status st = LT_OK;
  if (!l) {
    st = lt_last_status();
    if (st == LT_OK) st = lt__err(LT_ERR_INVALID, "%s: the model's next_logits returned NULL without an error", op);
  } else if (l->ndim != 2 || l->shape[0] != d->R || l->shape[1] != d->V ||
             (l->dtype != LT_DTYPE_F32 && l->dtype != LT_DTYPE_F64)) {
    st = lt__err(LT_ERR_INVALID, "%s: the model's next_logits returned %s: need [R %lld, V %lld] f32 or f64", op,
                 LT__D(l), (long long)d->R, (long long)d->V);
  } else {
    lt_tensor *l64 = lt_to_dtype(l, LT_DTYPE_F64);
    lt_tensor *lp = l64 ? lt_log_softmax(l64, 1) : NULL; /* [R, V] */
    st = lp ? lt_tensor_read(lp, LT_DTYPE_F64, d->logp, d->R * d->V) : lt_last_status();
  }
  lt_scope_end(s);
  return st;
}

/* ======================================================================== */
/* Greedy and sampling: one token per row                                   */
/* ======================================================================== */

static lt_status run_rows(gen_state *d, int64_t *len, double *score) {
  const lt_generate_opts *o = d->o;
  const int64_t R = d->R, V = d->V;
  const bool sample = o->strategy == LT_GENERATE_SAMPLE;
  bool *done = calloc((size_t)R, sizeof *done);
  double *u = malloc(sizeof *u * (size_t)R), *work = malloc(sizeof *work * (size_t)V);
  prob_id *pairs = malloc(sizeof *pairs * (size_t)V);
  lt_status st = done && u && work && pairs ? LT_OK : lt__err(LT_ERR_NOMEM, "generate: out of memory");
  for (int64_t t = 0; st == LT_OK && t < o->max_new; t++) {
    if ((st = next_logp(d)) != LT_OK) break;
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
      const double *l = d->logp + r * V;
      const int64_t tok = sample ? sample_row(l, V, o->temperature, o->top_k, o->top_p, u[r], work, pairs)
                                 : argmax_row(l, V);
      row[d->n] = tok;
      score[r] += l[tok];
      len[r]++;
      done[r] = is_eos(o, tok);
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

static lt_status run_beam(gen_state *d, int64_t B, int64_t *out_tok, int64_t *len, double *score) {
  const lt_generate_opts *o = d->o;
  const lt_generate_model *model = d->model;
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
                     ? LT_OK : lt__err(LT_ERR_NOMEM, "generate: out of memory for the beams");
  for (int64_t r = 0; st == LT_OK && r < R; r++) {
    sum[r] = r % K == 0 ? 0.0 : -INFINITY; /* one live beam per input at the start */
    hy[r].tok = store + r * M;
  }
  for (int64_t t = 0; st == LT_OK && t < M; t++) {
    if ((st = next_logp(d)) != LT_OK) break;
    bool all = true;
    for (int64_t b = 0; b < B; b++) {
      if (bdone[b]) { /* keep its rows as they are */
        for (int64_t k = 0; k < K; k++)
          from[b * K + k] = b * K + k, ntok[b * K + k] = o->pad_id, nsum[b * K + k] = -INFINITY;
        continue;
      }
      /* the best 2K (beam, token) continuations, by score, ties to the lower (k, v) */
      int64_t nc = 0;
      for (int64_t k = 0; k < K; k++) {
        const int64_t r = b * K + k;
        if (sum[r] == -INFINITY) continue;
        const double *l = d->logp + r * V;
        for (int64_t v = 0; v < V; v++) {
          const double s = sum[r] + l[v];
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
        if (is_eos(o, c[i].v)) { /* a finished hypothesis, if it ranks among the best K */
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
    /* the rows follow their beams: seq and the model's state */
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
    if (model->reorder && !identity) st = model->reorder(model->self, from, R);
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
/* lt_generate                                                              */
/* ======================================================================== */

static lt_status check_opts(const char *op, int64_t V, const lt_generate_opts *o) {
  if (o->n_also_eos < 0 || o->n_also_eos > LT_GENERATE_MAX_EOS)
    return lt__err(LT_ERR_INVALID, "%s: n_also_eos %d: must be in [0, %d]", op, o->n_also_eos, LT_GENERATE_MAX_EOS);
  for (int i = 0; i < o->n_also_eos; i++)
    if (o->also_eos[i] < 0 || o->also_eos[i] >= V)
      return lt__err(LT_ERR_INVALID, "%s: also_eos[%d] %lld: must be in [0, vocab_size %lld)", op, i,
                     (long long)o->also_eos[i], (long long)V);
  if (o->strategy != LT_GENERATE_GREEDY && o->strategy != LT_GENERATE_BEAM && o->strategy != LT_GENERATE_SAMPLE)
    return lt__err(LT_ERR_INVALID, "%s: strategy %d: must be LT_GENERATE_GREEDY, _BEAM or _SAMPLE", op,
                   (int)o->strategy);
  if (o->max_new < 0) return lt__err(LT_ERR_INVALID, "%s: max_new %lld: must be >= 0", op, (long long)o->max_new);
  if (o->eos_id < -1 || o->eos_id >= V || o->pad_id < 0 || o->pad_id >= V)
    return lt__err(LT_ERR_INVALID, "%s: eos %lld, pad %lld: each must be in [0, vocab_size %lld) (eos may be -1)", op,
                   (long long)o->eos_id, (long long)o->pad_id, (long long)V);
  if (o->strategy == LT_GENERATE_BEAM) {
    if (o->beam_width < 1 || o->beam_width > 1024)
      return lt__err(LT_ERR_INVALID, "%s: beam_width %lld: must be in [1, 1024]", op, (long long)o->beam_width);
    if (!(o->length_penalty >= 0.0) || isinf(o->length_penalty))
      return lt__err(LT_ERR_INVALID, "%s: length_penalty %g: must be finite and >= 0", op, o->length_penalty);
  }
  if (o->strategy == LT_GENERATE_SAMPLE) {
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

lt_status lt_generate(const lt_generate_model *model, const lt_tensor *prefix, const lt_generate_opts *opts,
                      lt_generate_result *out) {
  const char *op = "generate";
  if (!model || !model->next_logits)
    return lt__err(LT_ERR_NULL, "%s: the model%s is NULL", op, model ? "'s next_logits" : "");
  if (!out) return lt__err(LT_ERR_NULL, "%s: out is NULL", op);
  if (!prefix) return lt__err(LT_ERR_NULL, "%s: prefix is NULL", op);
  const lt_generate_opts o = opts ? *opts : lt_generate_defaults();
  const int64_t V = model->vocab_size;
  if (V < 1) return lt__err(LT_ERR_INVALID, "%s: the model's vocab_size %lld: must be >= 1", op, (long long)V);
  lt_status st = check_opts(op, V, &o);
  if (st != LT_OK) return st;
  if (prefix->ndim != 2 || (prefix->dtype != LT_DTYPE_I32 && prefix->dtype != LT_DTYPE_I64) || prefix->shape[0] < 1 ||
      prefix->shape[1] < 1)
    return lt__err(prefix->ndim != 2 || prefix->shape[0] < 1 || prefix->shape[1] < 1 ? LT_ERR_SHAPE : LT_ERR_DTYPE,
                   "%s: prefix is %s: need [B, P] i32/i64 ids with B, P >= 1 (an empty input has nothing to "
                   "condition on)", op, LT__D(prefix));
  if ((st = check_vocab(op, "prefix", prefix, V)) != LT_OK) return st;

  const int64_t B = prefix->shape[0], K = o.strategy == LT_GENERATE_BEAM ? o.beam_width : 1, P = prefix->shape[1];
  const int64_t M = o.max_new;
  int64_t R, W, RW, RV, BM;
  if (__builtin_mul_overflow(B, K, &R) || __builtin_add_overflow(P, M, &W) || __builtin_mul_overflow(R, W, &RW) ||
      __builtin_mul_overflow(R, V, &RV) || __builtin_mul_overflow(R, M, &BM) || RW > (int64_t)(SIZE_MAX / 16) ||
      RV > (int64_t)(SIZE_MAX / 16))
    return lt__err(LT_ERR_INVALID, "%s: %lld inputs x %lld beams x (%lld + max_new %lld) ids: too large", op,
                   (long long)B, (long long)K, (long long)P, (long long)M);
  gen_state d = {.model = model, .o = &o, .R = R, .V = V, .W = W, .P = P, .n = P};
  d.seq = malloc(sizeof *d.seq * (size_t)RW);
  d.tmp = malloc(sizeof *d.tmp * (size_t)RW);
  d.logp = malloc(sizeof *d.logp * (size_t)RV);
  int64_t *len = calloc((size_t)R, sizeof *len), *tok = malloc(sizeof *tok * (size_t)(BM + 1));
  double *score = calloc((size_t)R, sizeof *score);
  if (!d.seq || !d.tmp || !d.logp || !len || !tok || !score) {
    st = lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld rows x %lld ids", op, (long long)R, (long long)W);
    goto done;
  }
  /* the rows' prefixes, each repeated K times */
  int64_t *pr = malloc(sizeof *pr * (size_t)(B * P));
  st = pr ? lt_tensor_read(prefix, LT_DTYPE_I64, pr, B * P) : lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  for (int64_t r = 0; st == LT_OK && r < R; r++) memcpy(d.seq + r * W, pr + (r / K) * P, sizeof *pr * (size_t)P);
  free(pr);
  if (st != LT_OK) goto done;

  bool prev = lt_set_grad_enabled(false);
  if (o.strategy == LT_GENERATE_BEAM) {
    st = run_beam(&d, B, tok, len, score);
  } else {
    st = run_rows(&d, len, score);
    for (int64_t r = 0; st == LT_OK && r < R; r++)
      for (int64_t i = 0; i < M; i++) tok[r * M + i] = i < len[r] ? d.seq[r * W + P + i] : o.pad_id;
  }
  lt_set_grad_enabled(prev);
  if (st == LT_OK) {
    int64_t L = 0;
    for (int64_t b = 0; b < B; b++) L = len[b] > L ? len[b] : L;
    for (int64_t b = 0; b < B; b++) memmove(tok + b * L, tok + b * M, sizeof *tok * (size_t)L); /* [B, M] -> [B, L] */
    lt_generate_result r = {0};
    r.tokens = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, tok);
    r.lengths = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){B}, len);
    r.scores = lt_tensor_from_copy(LT_DTYPE_F64, 1, (int64_t[]){B}, score);
    if (!r.tokens || !r.lengths || !r.scores) {
      st = lt_last_status();
      lt_generate_result_free(&r);
    } else {
      *out = r;
    }
  }
done:
  free(d.seq), free(d.tmp), free(d.logp), free(len), free(tok), free(score);
  return st;
}
