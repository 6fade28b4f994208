/*
 * models/transformer/evaluate.c: validation of a Transformer on its run's
 * held-out data, and the decoded examples (evaluate.h). Moved out of train's
 * program so that any program or test evaluates the same way.
 *
 * What this is not: the decoder (generate.c, generate/ in the core) or a
 * place that exits: errors come back as statuses naming the stage.
 */
#include "models/transformer/evaluate.h"

#include "dist/dist.h"
#include "models/transformer/internal.h"
#include "models/transformer/generate.h"
#include "nn/nn.h"
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>



static void *alloc_n(size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n ? n : 1, size, &bytes)) return NULL;
  return malloc(bytes);
}
#define NOMEM(what) lt_error_set(LT_ERR_NOMEM, "%s: out of memory", what)

/* Loss and token accuracy of every example of pairs, teacher forced. With N
 * ranks, as for language modelling (eval_lm): rank r takes batches r, r + N,
 * ... and the sums are reduced; a stop request does not cut it short. */
static lt_status eval_pairs_loss(lt_transformer *model, const lt_tf_data *D, int64_t B, lt_tf_eval_result *E) {
  const lt_seq_pairs *pairs = D->valid;
  int64_t n = lt_seq_pairs_count(pairs);
  double loss_sum = 0, correct = 0, count = 0;
  int64_t *idx = alloc_n((size_t)B, sizeof *idx);
  if (!idx) return NOMEM("validation");
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
  const int N = lt_dist_size(), rank = lt_dist_rank();
  lt_status st = LT_OK;
  for (int64_t b0 = 0, k = 0; b0 < n && (N > 1 || !lt_trainer_stop_requested()) && st == LT_OK; b0 += B, k++) {
    if (k % N != rank) continue;
    int64_t nb = n - b0 < B ? n - b0 : B;
    for (int64_t i = 0; i < nb; i++) idx[i] = b0 + i;
    lt_scope *s = lt_scope_begin();
    lt_seq2seq_batch b;
    if (lt_seq2seq_collate(pairs, idx, nb, &b) != LT_OK) {
      st = lt__tf_fail("validation batch");
      lt_scope_end(s);
      break;
    }
    lt_tensor *logits, *labels;
    if (D->kind == LT_TF_DATA_CLASSIFY) {
      logits = lt_transformer_classify(model, b.src, b.src_mask, NULL); /* [B, n_classes] */
      labels = lt_select(b.labels, 1, 0);                               /* [B] */
    } else {
      lt_tensor *mem = lt_transformer_encode(model, b.src, b.src_mask, NULL);
      logits = lt_transformer_decode(model, b.tgt_in, b.tgt_mask, mem, b.src_mask, 0, NULL); /* [B, T, V] */
      labels = b.labels;
    }
    double l, c;
    lt_tensor *hit = lt_sum(lt_eq(lt_argmax(logits, -1, false), labels), 0, NULL, false);
    if (!hit || lt_item(lt_cross_entropy(logits, labels, &ce), &l) != LT_OK || lt_item(hit, &c) != LT_OK) {
      st = lt__tf_fail("validation forward");
    } else {
      loss_sum += l, correct += c;
      count += D->kind == LT_TF_DATA_CLASSIFY ? (double)nb : (double)b.n_tokens;
    }
    lt_seq2seq_batch_free(&b);
    lt_scope_end(s);
  }
  free(idx);
  if (st != LT_OK) return st;
  double v[3] = {loss_sum, correct, count};
  LT__TF_TRY(lt_dist_allreduce_f64(v, 3, LT_DIST_SUM), "validation: reducing over the ranks");
  loss_sum = v[0], correct = v[1], count = v[2];
  E->loss = count > 0 ? loss_sum / count : NAN;
  E->token_acc = count > 0 ? correct / count : NAN;
  if (D->kind == LT_TF_DATA_CLASSIFY) E->n_exact = (int64_t)correct, E->n_decoded = (int64_t)count;
  E->interrupted = N == 1 && lt_trainer_stop_requested() != 0;
  return LT_OK;
}

typedef struct len_idx {
  int64_t len, i;
} len_idx;
static int cmp_len(const void *a, const void *b) {
  const len_idx *x = a, *y = b;
  return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->i < y->i ? -1 : x->i > y->i);
}

/* One batch of eval_exact: the examples idx[0..nb), decoded greedily for at
 * most max_new tokens, compared with their references. */
static lt_status exact_batch(lt_transformer *model, const lt_tf_data *D, const int64_t *idx, int64_t nb,
                             int64_t max_new, lt_tf_eval_result *E, char **out, int64_t n_out) {
  const lt_seq_pairs *V = D->valid;
  lt_seq2seq_batch b;
  LT__TF_TRY(lt_seq2seq_collate(V, idx, nb, &b), "decoding batch");
  /* greedy; <bos>, <eos>, <pad>: the ids the batches were made with (the target tokenizer's) */
  const lt_special_ids sp = lt_seq_pairs_special_ids(V);
  lt_generate_opts go = lt_generate_defaults();
  go.max_new = max_new, go.eos_id = sp.eos, go.pad_id = sp.pad;
  lt_tf_generate_opts to = lt_tf_generate_defaults();
  to.bos_id = sp.bos;
  lt_generate_result gr = {0};
  lt_status st = lt_transformer_generate(model, b.src, b.src_mask, NULL, &go, &to, &gr);
  if (st != LT_OK) {
    lt_seq2seq_batch_free(&b);
    return lt__tf_fail("greedy decoding");
  }
  lt_tensor *y = gr.tokens; /* [nb, L] */
  int64_t L = y->shape[1];
  int64_t *gen = alloc_n((size_t)nb, sizeof *gen * (size_t)L); /* L <= max_new */
  if (!gen) st = NOMEM("decoding");
  else if (lt_tensor_read(y, LT_DTYPE_I64, gen, nb * L) != LT_OK) st = lt__tf_fail("reading decoded ids");
  for (int64_t k = 0; k < nb && st == LT_OK; k++) {
    const int64_t *src, *tgt, *g = gen + k * L;
    int64_t sl, tl, gl = 0;
    lt_seq_pairs_get(V, idx[k], &src, &sl, &tgt, &tl);
    while (gl < L && g[gl] != sp.eos) gl++;
    /* exact: an <eos> was made and the text equals the reference's (BPE may spell a text in several ways) */
    bool ok = gl < L && gl == tl && !memcmp(g, tgt, sizeof *g * (size_t)tl);
    char *text = lt_tf_ids_text(D->tok, g, L);
    if (!text) {
      st = NOMEM("decoding");
      break;
    }
    if (!ok && gl < L) {
      char *ref = lt_tf_ids_text(D->tok, tgt, tl);
      ok = ref && !strcmp(text, ref);
      free(ref);
    }
    E->n_exact += ok;
    if (out && idx[k] < n_out) out[idx[k]] = text;
    else free(text);
  }
  free(gen);
  E->n_decoded += nb;
  lt_seq2seq_batch_free(&b);
  return st;
}

/* Exact match of greedy decoding on examples [0, n) of the validation pairs.
 * Batches hold examples of similar target length (decoding stops when the
 * longest reference + 1 tokens are made: anything longer is wrong anyway).
 * out[i] (if out) receives the decoded text of example i < n_out.
 * With N ranks, rank r decodes batches r, r + N, ... and the counts are
 * reduced (a stop request does not cut it short); then rank 0 decodes the
 * examples i < n_out that other ranks had, for out (not counted again). */
static lt_status eval_exact(lt_transformer *model, const lt_tf_data *D, int64_t B, int64_t n, lt_tf_eval_result *E,
                            char **out, int64_t n_out) {
  const lt_seq_pairs *V = D->valid;
  const int64_t max_len = lt_transformer_config(model)->max_len;
  if (n > lt_seq_pairs_count(V)) n = lt_seq_pairs_count(V);
  len_idx *order = alloc_n((size_t)n, sizeof *order);
  int64_t *idx = alloc_n((size_t)B, sizeof *idx);
  if (!order || !idx) {
    free(order), free(idx);
    return NOMEM("decoding");
  }
  for (int64_t i = 0; i < n; i++) {
    const int64_t *s, *t;
    int64_t sl, tl;
    lt_seq_pairs_get(V, i, &s, &sl, &t, &tl);
    order[i] = (len_idx){tl, i};
  }
  qsort(order, (size_t)n, sizeof *order, cmp_len);
  E->n_exact = E->n_decoded = 0;
  const int N = lt_dist_size(), rank = lt_dist_rank();
  lt_status st = LT_OK;
  for (int64_t b0 = 0, j = 0; b0 < n && (N > 1 || !lt_trainer_stop_requested()) && st == LT_OK; b0 += B, j++) {
    if (j % N != rank) continue;
    int64_t nb = n - b0 < B ? n - b0 : B, maxlen = 0;
    for (int64_t k = 0; k < nb; k++) {
      idx[k] = order[b0 + k].i;
      if (order[b0 + k].len > maxlen) maxlen = order[b0 + k].len;
    }
    lt_scope *s = lt_scope_begin();
    st = exact_batch(model, D, idx, nb, maxlen + 1 < max_len ? maxlen + 1 : max_len, E, out, n_out);
    lt_scope_end(s);
  }
  if (st == LT_OK && N > 1) {
    int64_t v[2] = {E->n_exact, E->n_decoded};
    st = lt_dist_allreduce_i64(v, 2, LT_DIST_SUM);
    E->n_exact = v[0], E->n_decoded = v[1];
    if (st != LT_OK) st = lt__tf_fail("exact match: reducing over the ranks");
  }
  /* rank 0's outputs of the examples other ranks decoded: in the same sorted order */
  int64_t nb = 0, maxlen = 0;
  lt_tf_eval_result scratch = *E;
  for (int64_t k = 0; k < n && N > 1 && rank == 0 && out && st == LT_OK; k++) {
    if (order[k].i < n_out && !out[order[k].i]) {
      idx[nb++] = order[k].i;
      if (order[k].len > maxlen) maxlen = order[k].len;
    }
    if (nb == B || (k == n - 1 && nb > 0)) {
      lt_scope *s = lt_scope_begin();
      st = exact_batch(model, D, idx, nb, maxlen + 1 < max_len ? maxlen + 1 : max_len, &scratch, out, n_out);
      lt_scope_end(s);
      nb = maxlen = 0;
    }
  }
  free(idx), free(order);
  E->interrupted = N == 1 && lt_trainer_stop_requested() != 0;
  return st;
}

/* Language modelling: the decoder's logits of the ids x, for
 * lt_trainer_lm_batch_sums and lt_trainer_lm_evaluate (a few rows at a time). */
static lt_tensor *decode_logits(void *model, const lt_tensor *x) {
  return lt_transformer_decode(model, x, NULL, NULL, NULL, 0, NULL);
}

static lt_status eval_shards(lt_transformer *model, const lt_tf_data *D, lt_tf_eval_result *E) {
  lt_trainer_lm_eval ev;
  LT__TF_TRY(lt_trainer_lm_evaluate(D->val_shards, decode_logits, model, &ev), "validation on --val-data");
  E->loss = ev.loss, E->token_acc = ev.token_acc, E->interrupted = ev.interrupted;
  return LT_OK;
}

/* Language modelling: mean loss over the validation tokens in chunks of seq_len. */
static lt_status eval_lm(lt_transformer *model, const lt_tf_data *D, int64_t B, lt_tf_eval_result *E) {
  if (D->val_shards) return eval_shards(model, D, E);
  lt_batch_opts bo = LT_BATCH_DEFAULTS(B);
  bo.shuffle = false;
  lt_lm_loader *L = lt_lm_loader_new(D->valid_tokens, D->seq_len, &bo);
  if (!L) return lt__tf_fail("validation loader");
  double v[3] = {0, 0, 0};
  /* With N ranks, rank r evaluates batches r, r + N, ... and the sums are
   * reduced (a stop request does not cut it short: every rank must reach the
   * reduction). */
  const int N = lt_dist_size(), rank = lt_dist_rank();
  lt_status st = LT_OK;
  for (int64_t i = 0; i < lt_lm_loader_batches_per_epoch(L) && (N > 1 || !lt_trainer_stop_requested()); i++) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *x, *y;
    if (lt_lm_loader_next(L, &x, &y) != LT_OK) st = lt__tf_fail("validation batch");
    if (st == LT_OK && i % N == rank && lt_trainer_lm_batch_sums(decode_logits, model, x, y, v) != LT_OK)
      st = lt__tf_fail("validation forward");
    lt_scope_end(s);
    if (st != LT_OK) break;
  }
  lt_lm_loader_free(L);
  if (st != LT_OK) return st;
  LT__TF_TRY(lt_dist_allreduce_f64(v, 3, LT_DIST_SUM), "validation: reducing over the ranks");
  E->loss = v[2] > 0 ? v[0] / v[2] : NAN;
  E->token_acc = v[2] > 0 ? v[1] / v[2] : NAN;
  E->interrupted = N == 1 && lt_trainer_stop_requested() != 0;
  return LT_OK;
}

lt_status lt_tf_evaluate(lt_transformer *model, const lt_tf_data *D, int64_t batch, int64_t n_exact, char **out,
                         int64_t n_out, lt_tf_eval_result *E) {
  *E = (lt_tf_eval_result){.loss = NAN, .token_acc = NAN};
  if (!model || !D || batch < 1)
    return lt_error_set(LT_ERR_INVALID, "lt_tf_evaluate: %s", batch < 1 ? "batch must be >= 1" : "model or data is NULL");
  double t0 = lt_monotonic_seconds();
  bool prev = lt_set_grad_enabled(false);
  lt_status st = D->kind == LT_TF_DATA_LM ? eval_lm(model, D, batch, E) : eval_pairs_loss(model, D, batch, E);
  if (st == LT_OK && D->kind == LT_TF_DATA_SEQ2SEQ && !E->interrupted && n_exact > 0)
    st = eval_exact(model, D, batch, n_exact, E, out, n_out);
  lt_set_grad_enabled(prev);
  E->seconds = lt_monotonic_seconds() - t0;
  return st;
}

void lt_tf_eval_text(const lt_tf_data *D, const lt_tf_eval_result *E, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "loss %.4f", E->loss);
  if (n < size && D->kind != LT_TF_DATA_CLASSIFY)
    n += (size_t)snprintf(buf + n, size - n, " (ppl %.2f), token accuracy %.2f%%", exp(E->loss), 100 * E->token_acc);
  if (n < size && E->n_decoded > 0)
    snprintf(buf + n, size - n, ", %s %.2f%% (%lld/%lld)", D->kind == LT_TF_DATA_CLASSIFY ? "accuracy" : "exact match",
             100.0 * (double)E->n_exact / (double)E->n_decoded, (long long)E->n_exact, (long long)E->n_decoded);
}

/* Language modelling: a prompt, and the model's continuation. */
static lt_status print_generated(FILE *f, lt_transformer *model, const lt_tf_data *D, const lt_tf_examples_opts *o) {
  int64_t *ids, P;
  if (o->prompt) {
    LT__TF_TRY(lt_tokenizer_encode(D->tok, o->prompt, strlen(o->prompt), &ids, &P), "encoding --prompt");
    if (P == 0) {
      free(ids);
      return lt_error_set(LT_ERR_INVALID, "--prompt is empty");
    }
  } else {
    P = D->valid_tokens->numel < 32 ? D->valid_tokens->numel : 32;
    if (!(ids = alloc_n((size_t)D->valid_tokens->numel, sizeof *ids))) return NOMEM("prompt");
    if (lt_tensor_read(D->valid_tokens, LT_DTYPE_I64, ids, D->valid_tokens->numel) != LT_OK) {
      free(ids);
      return lt__tf_fail("prompt");
    }
  }
  lt_scope *s = lt_scope_begin();
  lt_tensor *prompt = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, P}, ids);
  lt_generate_opts go = lt_generate_defaults();
  go.strategy = o->temperature > 0 ? LT_GENERATE_SAMPLE : LT_GENERATE_GREEDY;
  go.temperature = o->temperature > 0 ? o->temperature : 1.0;
  go.top_k = o->top_k, go.gen = o->gen, go.max_new = o->max_new, go.eos_id = -1;
  lt_tf_generate_opts to = lt_tf_generate_defaults();
  to.context = D->seq_len; /* the trained context length */
  lt_generate_result gr = {0};
  lt_status st = LT_OK;
  int64_t *g = NULL;
  char *pt = NULL, *ct = NULL;
  size_t pl, cl;
  if (!prompt || lt_transformer_generate(model, NULL, NULL, prompt, &go, &to, &gr) != LT_OK) {
    st = lt__tf_fail("generating text");
  } else {
    lt_tensor *y = gr.tokens; /* [1, max_new] */
    if (!(g = alloc_n((size_t)y->numel + 1, sizeof *g))) st = NOMEM("generated ids");
    else if (lt_tensor_read(y, LT_DTYPE_I64, g, y->numel) != LT_OK) st = lt__tf_fail("generated ids");
    else if (lt_tokenizer_decode(D->tok, ids, P, 0, &pt, &pl) != LT_OK ||
             lt_tokenizer_decode(D->tok, g, y->numel, 0, &ct, &cl) != LT_OK)
      st = lt__tf_fail("decoding");
    else
      fprintf(f, "\ngenerated text (%s, %lld tokens) after the prompt in [brackets]:\n[%s]%s\n",
              o->temperature > 0 ? "sampled" : "greedy", (long long)y->numel, pt, ct);
  }
  free(pt), free(ct), free(g), free(ids);
  lt_scope_end(s);
  return st;
}

/* Classification: the predicted class of validation examples [0, n). */
static lt_status predict_classes(lt_transformer *model, const lt_tf_data *D, int64_t n, int64_t *pred) {
  int64_t *idx = alloc_n((size_t)n, sizeof *idx);
  if (!idx) return NOMEM("examples");
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  bool prev = lt_set_grad_enabled(false);
  lt_scope *s = lt_scope_begin();
  lt_seq2seq_batch b;
  lt_status st = LT_OK;
  if (lt_seq2seq_collate(D->valid, idx, n, &b) != LT_OK) {
    st = lt__tf_fail("examples");
  } else {
    lt_tensor *a = lt_argmax(lt_transformer_classify(model, b.src, b.src_mask, NULL), -1, false);
    if (!a) st = lt__tf_fail("classifying the examples");
    else if (lt_tensor_read(a, LT_DTYPE_I64, pred, n) != LT_OK) st = lt__tf_fail("predictions");
    lt_seq2seq_batch_free(&b);
  }
  lt_scope_end(s);
  lt_set_grad_enabled(prev);
  free(idx);
  return st;
}

lt_status lt_tf_print_examples(FILE *f, lt_transformer *model, const lt_tf_data *D, const lt_tf_examples_opts *o) {
  int64_t n = o->n;
  if (n <= 0) return LT_OK;
  if (D->kind == LT_TF_DATA_LM) return print_generated(f, model, D, o);
  int64_t nv = lt_seq_pairs_count(D->valid), n_want = n;
  n *= LT_TF_EXAMPLE_POOL; /* outputs[] covers this many: the examples shown are the first distinct sources */
  if (n > nv) n = nv;
  fprintf(f, "\nheld-out examples (%s):\n",
          D->kind == LT_TF_DATA_CLASSIFY ? "predicted class" : "greedy decoding; a MISS shows the reference");
  int64_t *pred = NULL;
  if (D->kind == LT_TF_DATA_CLASSIFY) { /* predictions of the first n examples */
    if (!(pred = alloc_n((size_t)n, sizeof *pred))) return NOMEM("examples");
    lt_status st = predict_classes(model, D, n, pred);
    if (st != LT_OK) {
      free(pred);
      return st;
    }
  }
  for (int64_t i = 0, shown = 0; i < n && shown < n_want; i++) {
    const int64_t *src, *tgt;
    int64_t sl, tl;
    lt_seq_pairs_get(D->valid, i, &src, &sl, &tgt, &tl);
    bool seen = false;
    for (int64_t j = 0; j < i && !seen; j++) {
      const int64_t *s2, *t2;
      int64_t l2, m2;
      lt_seq_pairs_get(D->valid, j, &s2, &l2, &t2, &m2);
      seen = l2 == sl && !memcmp(s2, src, sizeof *src * (size_t)sl);
    }
    if (seen) continue;
    shown++;
    char *st = lt_tf_ids_text(D->tok, src, sl);
    char *rt = D->kind == LT_TF_DATA_CLASSIFY ? NULL : lt_tf_ids_text(D->tok, tgt, tl);
    if (!st || (D->kind != LT_TF_DATA_CLASSIFY && !rt)) {
      free(st), free(rt), free(pred);
      return NOMEM("examples");
    }
    if (D->kind == LT_TF_DATA_CLASSIFY) {
      bool ok = pred[i] == tgt[0];
      fprintf(f, "  %-4s %s\n       predicted %s, reference %s\n", ok ? "ok" : "MISS", st, D->classes[pred[i]],
              D->classes[tgt[0]]);
    } else {
      const char *mt = o->outputs && o->outputs[i] ? (o->outputs[i][0] ? o->outputs[i] : "(empty)") : "?";
      bool ok = !strcmp(mt, rt);
      fprintf(f, "  %-4s %s\n       -> %s\n", ok ? "ok" : "MISS", st, mt);
      if (!ok) fprintf(f, "       reference: %s\n", rt);
    }
    free(rt), free(st);
  }
  free(pred);
  return LT_OK;
}
