/*
 * models/transformer/lm_eval.c: perplexity in strided windows and
 * multiple-choice scoring of a decoder-only Transformer (lm_eval.h), and the
 * reader of HellaSwag's JSON Lines.
 *
 * Both reduce to one quantity, the summed cross-entropy of a window's tokens
 * from a given position on (window_nll), computed through the chunked head
 * so that a 50,257-token vocabulary costs no [T, V] logits.
 *
 * What this is not: the validation of a run's held-out split (evaluate.c),
 * or a place that prints or exits.
 */
#include "models/transformer/lm_eval.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/transformer/internal.h"
#include "nn/nn.h"

#define NOMEM(what) lt_error_set(LT_ERR_NOMEM, "%s: out of memory", what)

/* Every id of ids[0..n) in [0, V); the message names what and the position. */
static lt_status check_ids(const int64_t *ids, int64_t n, int64_t V, const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= V)
      return lt_error_set(LT_ERR_INDEX, "%s: token %lld at position %lld is outside the model's vocabulary [0, %lld)",
                          what, (long long)ids[i], (long long)i, (long long)V);
  return LT_OK;
}

/* The summed cross-entropy of ids[first..L) (1 <= first < L), each token
 * predicted from the tokens before it in ids[0..L): one forward of
 * ids[0..L-1) ([1, L-1]) whose labels are the next tokens, those before
 * first ignored. The caller has turned gradients off. */
static lt_status window_nll(const lt_transformer *m, const int64_t *ids, int64_t L, int64_t first, double *sum) {
  lt_scope *s = lt_scope_begin();
  if (!s) return lt__tf_fail("window");
  const int64_t T = L - 1, shape[2] = {1, T};
  lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, shape, ids);
  lt_tensor *y = lt_empty(LT_DTYPE_I64, 2, shape);
  lt_status st = LT_OK;
  if (!x || !y) {
    st = lt__tf_fail("window");
  } else {
    int64_t *yd = y->data;
    for (int64_t j = 0; j < T; j++) yd[j] = j + 1 >= first ? ids[j + 1] : LT_IGNORE_INDEX; /* logits j predict j + 1 */
    lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
    lt_tensor *loss = lt_transformer_decode_loss(m, x, NULL, NULL, NULL, y, &ce, 0, NULL);
    if (lt_item(loss, sum) != LT_OK) st = lt__tf_fail("forward");
  }
  lt_scope_end(s);
  return st;
}

static lt_status need_decoder(const lt_transformer *m, const char *who) {
  if (lt_transformer_config(m)->arch != LT_TF_DECODER_ONLY)
    return lt_error_set(LT_ERR_INVALID, "%s: the model is %s; a decoder-only model predicts the next token", who,
                        lt_transformer_config(m)->arch == LT_TF_ENCODER_ONLY ? "encoder-only" : "an encoder-decoder");
  return LT_OK;
}

lt_status lt_tf_perplexity(const lt_transformer *m, const int64_t *ids, int64_t n, const lt_tf_ppl_opts *opts,
                           lt_tf_ppl_result *out) {
  if (!m || !ids || !out) return lt_error_set(LT_ERR_NULL, "lt_tf_perplexity: model, ids or out is NULL");
  *out = (lt_tf_ppl_result){.loss = NAN, .perplexity = NAN};
  lt_status st = need_decoder(m, "lt_tf_perplexity");
  if (st != LT_OK) return st;
  const lt_tf_config *c = lt_transformer_config(m);
  lt_tf_ppl_opts o = opts ? *opts : (lt_tf_ppl_opts){0, 0};
  const int64_t W = o.window ? o.window : c->max_len, S = o.stride ? o.stride : W;
  if (n < 2) return lt_error_set(LT_ERR_INVALID, "lt_tf_perplexity: %lld tokens: at least 2 are needed", (long long)n);
  if (W < 2 || W > c->max_len + 1)
    return lt_error_set(LT_ERR_INVALID, "lt_tf_perplexity: window %lld must be in [2, max_len + 1 = %lld]",
                        (long long)W, (long long)c->max_len + 1);
  if (S < 1 || S > W)
    return lt_error_set(LT_ERR_INVALID, "lt_tf_perplexity: stride %lld must be in [1, window %lld]", (long long)S,
                        (long long)W);
  if ((st = check_ids(ids, n, c->vocab_size, "lt_tf_perplexity")) != LT_OK) return st;
  bool prev = lt_set_grad_enabled(false);
  double total = 0;
  int64_t scored = 0, windows = 0, prev_end = 0;
  for (int64_t b = 0; st == LT_OK; b += S) {
    const int64_t e = n - b < W ? n : b + W, first = (prev_end > b + 1 ? prev_end : b + 1) - b;
    if (first < e - b) { /* a window inside the previous one (S < W near the end) predicts nothing new */
      double sum;
      st = window_nll(m, ids + b, e - b, first, &sum);
      if (st != LT_OK) {
        st = lt_error_set(lt_last_status(), "lt_tf_perplexity: window [%lld, %lld): %s", (long long)b, (long long)e,
                          lt_last_error());
        break;
      }
      total += sum, scored += e - b - first, windows++;
    }
    prev_end = e;
    if (e == n) break;
  }
  lt_set_grad_enabled(prev);
  if (st != LT_OK) return st;
  out->nll_sum = total, out->n_scored = scored, out->n_windows = windows;
  out->loss = scored > 0 ? total / (double)scored : NAN;
  out->perplexity = exp(out->loss);
  return LT_OK;
}

/* ---- the multiple-choice file ----------------------------------------------- */

void lt_tf_mc_set_free(lt_tf_mc_set *s) {
  if (!s) return;
  for (int64_t i = 0; i < s->n; i++) {
    lt_tf_mc_item *it = &s->items[i];
    free(it->ctx);
    for (int64_t k = 0; it->endings && k < it->n_endings; k++) free(it->endings[k]);
    free(it->endings);
  }
  free(s->items);
  free(s);
}

/* A copy of the non-empty JSON string v into *out: LT_OK; LT_ERR_FORMAT with
 * *why saying what v is instead; LT_ERR_NOMEM. */
static lt_status dup_string(const json_t *v, char **out, const char **why) {
  if (!json_is_string(v)) return *why = "is not a string", LT_ERR_FORMAT;
  size_t n = json_string_length(v);
  if (n == 0) return *why = "is empty", LT_ERR_FORMAT;
  if (!(*out = malloc(n + 1))) return LT_ERR_NOMEM;
  memcpy(*out, json_string_value(v), n);
  (*out)[n] = 0;
  return LT_OK;
}

#define BAD(...) (st = lt_error_set(LT_ERR_FORMAT, __VA_ARGS__))

/* The item of one line's JSON object o into *it (zeroed first). */
static lt_status parse_item(const json_t *o, const char *name, int64_t line, lt_tf_mc_item *it) {
  lt_status st = LT_OK;
  const char *why = NULL;
  memset(it, 0, sizeof *it);
  it->line = line;
  if (!json_is_object(o)) return BAD("multiple choice '%s' line %lld: not a JSON object", name, (long long)line);
  const json_t *ctx = json_object_get(o, "ctx");
  const char *ctx_key = "ctx";
  if (!ctx) ctx = json_object_get(o, "context"), ctx_key = "context";
  const json_t *ends = json_object_get(o, "endings"), *label = json_object_get(o, "label");
  if (!ctx) return BAD("multiple choice '%s' line %lld: no \"ctx\" (or \"context\")", name, (long long)line);
  if ((st = dup_string(ctx, &it->ctx, &why)) != LT_OK)
    return st == LT_ERR_NOMEM ? NOMEM("multiple choice")
                              : BAD("multiple choice '%s' line %lld: \"%s\" %s", name, (long long)line, ctx_key, why);
  if (!json_is_array(ends) || json_array_size(ends) < 2 || json_array_size(ends) > LT_TF_MC_MAX_ENDINGS)
    return BAD("multiple choice '%s' line %lld: \"endings\" must be an array of 2..%d strings", name, (long long)line,
               LT_TF_MC_MAX_ENDINGS);
  const int64_t K = (int64_t)json_array_size(ends);
  if (!(it->endings = calloc((size_t)K, sizeof *it->endings))) return NOMEM("multiple choice");
  it->n_endings = K;
  for (int64_t k = 0; k < K; k++)
    if ((st = dup_string(json_array_get(ends, (size_t)k), &it->endings[k], &why)) != LT_OK)
      return st == LT_ERR_NOMEM ? NOMEM("multiple choice")
                                : BAD("multiple choice '%s' line %lld: ending %lld %s", name, (long long)line,
                                      (long long)k, why);
  if (!json_is_integer(label))
    return BAD("multiple choice '%s' line %lld: \"label\" must be an integer", name, (long long)line);
  it->label = (int64_t)json_integer_value(label);
  if (it->label < 0 || it->label >= K)
    return BAD("multiple choice '%s' line %lld: \"label\" %lld is not the index of one of the %lld endings", name,
               (long long)line, (long long)it->label, (long long)K);
  return LT_OK;
}

static bool blank(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return false;
  return true;
}

lt_status lt_tf_mc_parse(const char *buf, size_t len, const char *name, lt_tf_mc_set **out) {
  if (!out) return lt_error_set(LT_ERR_NULL, "lt_tf_mc_parse: out is NULL");
  *out = NULL;
  if (!buf && len) return lt_error_set(LT_ERR_NULL, "lt_tf_mc_parse: buf is NULL");
  if (!name) name = "(buffer)";
  lt_tf_mc_set *s = calloc(1, sizeof *s);
  if (!s) return NOMEM("multiple choice");
  lt_status st = LT_OK;
  int64_t cap = 0, line = 0;
  for (size_t at = 0; at < len && st == LT_OK;) {
    const char *p = buf + at, *nl = memchr(p, '\n', len - at);
    size_t n = nl ? (size_t)(nl - p) : len - at;
    at += n + (nl != NULL);
    line++;
    if (n > LT_TF_MC_MAX_LINE) {
      st = lt_error_set(LT_ERR_OVERFLOW, "multiple choice '%s' line %lld: %zu bytes, more than %zu", name,
                        (long long)line, n, LT_TF_MC_MAX_LINE);
      break;
    }
    if (blank(p, n)) continue;
    if (s->n == LT_TF_MC_MAX_ITEMS) {
      st = lt_error_set(LT_ERR_OVERFLOW, "multiple choice '%s' line %lld: more than %lld items", name,
                        (long long)line, (long long)LT_TF_MC_MAX_ITEMS);
      break;
    }
    if (s->n == cap) {
      int64_t nc = cap ? 2 * cap : 64;
      lt_tf_mc_item *ni = realloc(s->items, (size_t)nc * sizeof *ni);
      if (!ni) {
        st = NOMEM("multiple choice");
        break;
      }
      s->items = ni, cap = nc;
    }
    json_error_t err;
    json_t *o = json_loadb(p, n, 0, &err);
    if (!o) {
      st = lt_error_set(LT_ERR_FORMAT, "multiple choice '%s' line %lld: not JSON: %s (column %d)", name,
                        (long long)line, err.text, err.column);
      break;
    }
    st = parse_item(o, name, line, &s->items[s->n]);
    s->n++; /* a half-filled item too: lt_tf_mc_set_free frees what it holds */
    json_decref(o);
  }
  if (st == LT_OK && s->n == 0) st = lt_error_set(LT_ERR_FORMAT, "multiple choice '%s': no item in it", name);
  if (st != LT_OK) {
    lt_tf_mc_set_free(s);
    return st;
  }
  *out = s;
  return LT_OK;
}

lt_status lt_tf_mc_read(const char *path, lt_tf_mc_set **out) {
  if (!out || !path) return lt_error_set(LT_ERR_NULL, "lt_tf_mc_read: path or out is NULL");
  *out = NULL;
  char *data;
  size_t len;
  if (lt_text_file_read(path, &data, &len) != LT_OK) return lt__tf_fail("multiple choice");
  lt_status st = lt_tf_mc_parse(data, len, path, out);
  free(data);
  return st;
}

/* ---- scoring ------------------------------------------------------------------ */

lt_status lt_tf_mc_score(const lt_transformer *m, const lt_tokenizer *tok, const lt_tf_mc_item *it, double *scores,
                         double *sums, int64_t *choice) {
  if (!m || !tok || !it || !scores || !choice)
    return lt_error_set(LT_ERR_NULL, "lt_tf_mc_score: model, tokenizer, item, scores or choice is NULL");
  lt_status st = need_decoder(m, "lt_tf_mc_score");
  if (st != LT_OK) return st;
  const lt_tf_config *c = lt_transformer_config(m);
  const long long line = (long long)it->line;
  int64_t *cids = NULL, nc = 0, *seq = NULL;
  if (lt_tokenizer_encode(tok, it->ctx, strlen(it->ctx), &cids, &nc) != LT_OK)
    return lt_error_set(lt_last_status(), "multiple choice line %lld: the context: %s", line, lt_last_error());
  if (nc == 0) st = lt_error_set(LT_ERR_INVALID, "multiple choice line %lld: the context has no tokens", line);
  if (st == LT_OK) st = check_ids(cids, nc, c->vocab_size, "multiple choice: the context");
  size_t seq_n;
  if (st == LT_OK && (__builtin_add_overflow((size_t)c->max_len, 1, &seq_n) || !(seq = malloc(seq_n * sizeof *seq))))
    st = NOMEM("multiple choice");
  bool prev = lt_set_grad_enabled(false);
  double best = INFINITY;
  *choice = -1;
  for (int64_t k = 0; k < it->n_endings && st == LT_OK; k++) {
    size_t el = strlen(it->endings[k]);
    char *text = malloc(el + 2);
    int64_t *eids = NULL, ne = 0;
    if (!text) {
      st = NOMEM("multiple choice");
      break;
    }
    text[0] = ' ';
    memcpy(text + 1, it->endings[k], el + 1);
    if (lt_tokenizer_encode(tok, text, el + 1, &eids, &ne) != LT_OK)
      st = lt_error_set(lt_last_status(), "multiple choice line %lld: ending %lld: %s", line, (long long)k,
                        lt_last_error());
    free(text);
    if (st == LT_OK && (ne == 0 || ne > c->max_len))
      st = lt_error_set(LT_ERR_INVALID, "multiple choice line %lld: ending %lld has %lld tokens (1..max_len %lld fit)",
                        line, (long long)k, (long long)ne, (long long)c->max_len);
    if (st == LT_OK) st = check_ids(eids, ne, c->vocab_size, "multiple choice: an ending");
    if (st == LT_OK) {
      /* the context's last tokens that fit before the ending: at most max_len + 1 in all (max_len inputs) */
      const int64_t keep = nc < c->max_len + 1 - ne ? nc : c->max_len + 1 - ne;
      memcpy(seq, cids + nc - keep, (size_t)keep * sizeof *seq);
      memcpy(seq + keep, eids, (size_t)ne * sizeof *seq);
      double sum;
      st = window_nll(m, seq, keep + ne, keep, &sum);
      if (st != LT_OK) {
        st = lt_error_set(lt_last_status(), "multiple choice line %lld: ending %lld: %s", line, (long long)k,
                          lt_last_error());
      } else {
        scores[k] = sum / (double)ne;
        if (sums) sums[k] = sum;
        if (scores[k] < best || *choice < 0) best = scores[k], *choice = k;
      }
    }
    free(eids);
  }
  lt_set_grad_enabled(prev);
  free(seq), free(cids);
  return st;
}

lt_status lt_tf_mc_evaluate(const lt_transformer *m, const lt_tokenizer *tok, const lt_tf_mc_set *s,
                            int64_t *choices, double *scores_out, lt_tf_mc_result *out) {
  if (!m || !tok || !s || !out) return lt_error_set(LT_ERR_NULL, "lt_tf_mc_evaluate: an argument is NULL");
  *out = (lt_tf_mc_result){.accuracy = NAN};
  double scores[LT_TF_MC_MAX_ENDINGS], sums[LT_TF_MC_MAX_ENDINGS];
  for (int64_t i = 0; i < s->n; i++) {
    const lt_tf_mc_item *it = &s->items[i];
    int64_t choice;
    if (it->n_endings < 1 || it->n_endings > LT_TF_MC_MAX_ENDINGS)
      return lt_error_set(LT_ERR_INVALID, "multiple choice line %lld: %lld endings", (long long)it->line,
                          (long long)it->n_endings);
    LT__TF_TRY(lt_tf_mc_score(m, tok, it, scores, sums, &choice), "lt_tf_mc_evaluate");
    int64_t by_sum = 0;
    for (int64_t k = 1; k < it->n_endings; k++)
      if (sums[k] < sums[by_sum]) by_sum = k;
    if (choices) choices[i] = choice;
    if (scores_out) memcpy(scores_out, scores, (size_t)it->n_endings * sizeof *scores), scores_out += it->n_endings;
    out->n++;
    out->correct += choice == it->label;
    out->correct_sum += by_sum == it->label;
  }
  out->accuracy = out->n ? (double)out->correct / (double)out->n : NAN;
  return LT_OK;
}
