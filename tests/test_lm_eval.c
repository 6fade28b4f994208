/*
 * tests/test_lm_eval.c: models/transformer/lm_eval.h without Python.
 *   - lt_tf_perplexity on a tiny random decoder equals exp of the mean
 *     cross-entropy computed token by token here, each token from the
 *     context its window gives it (log_softmax of lt_transformer_decode's
 *     last row), for windows side by side and overlapping;
 *   - the multiple-choice scorer's mean losses equal the same hand
 *     computation on context + " " + ending, its choice is the lowest, its
 *     accuracy counts the labels, and a long context is cut from the left;
 *   - bad files are refused with messages naming the file and the line, a
 *     FIFO is refused, and the perplexity's arguments are checked.
 * The comparison with transformers is tests/reference/test_lm_eval.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/transformer/lm_eval.h"
#include "models/transformer/transformer.h"
#include "test_util.h"

/* A tiny decoder-only model over the byte tokenizer's vocabulary. */
static lt_transformer *tiny_model(int64_t V, int64_t max_len, lt_tf_arch arch) {
  lt_tf_config c = lt_tf_config_default(arch);
  c.vocab_size = V, c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 32, c.max_len = max_len;
  c.n_enc_layers = arch == LT_TF_DECODER_ONLY ? 0 : 1, c.n_dec_layers = arch == LT_TF_ENCODER_ONLY ? 0 : 2;
  c.dropout = 0;
  if (arch == LT_TF_ENCODER_ONLY) c.n_classes = 2;
  lt_generator *g = LT_NNP(lt_generator_new(7));
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_generator_free(g);
  return m;
}

/* -log p(ids[t] | ids[b..t)), from the full logits of the context (b < t). */
static double token_nll(const lt_transformer *m, const int64_t *ids, int64_t b, int64_t t) {
  lt_scope *s = lt_scope_begin();
  const int64_t shape[2] = {1, t - b};
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, shape, ids + b));
  lt_tensor *logits = LT_NN(lt_transformer_decode(m, x, NULL, NULL, NULL, 0, NULL)); /* [1, t-b, V] */
  lt_tensor *last = LT_NN(lt_select(lt_select(logits, 0, 0), 0, t - b - 1));    /* [V] */
  lt_tensor *lp = LT_NN(lt_log_softmax(last, 0));
  double v;
  LT_OK_OR_FAIL(lt_get(lp, (int64_t[]){ids[t]}, &v));
  lt_scope_end(s);
  return -v;
}

/* What lt_tf_perplexity must give, token by token: token t is scored by the
 * first window [kS, min(kS + W, n)) that holds it, from the tokens of that
 * window before it (none: not scored). */
static void hand_perplexity(const lt_transformer *m, const int64_t *ids, int64_t n, int64_t W, int64_t S,
                            double *loss, int64_t *scored) {
  double sum = 0;
  int64_t cnt = 0;
  for (int64_t t = 1; t < n; t++) {
    int64_t k = 0;
    while ((k * S + W < n ? k * S + W : n) <= t) k++;
    if (k * S == t) continue;
    sum += token_nll(m, ids, k * S, t), cnt++;
  }
  *loss = sum / (double)cnt, *scored = cnt;
}

START_TEST(perplexity_is_exp_of_the_mean_cross_entropy_of_its_windows) {
  lt_tokenizer *tok = LT_NNP(lt_tokenizer_new_byte());
  const int64_t V = lt_tokenizer_vocab_size(tok);
  lt_transformer *m = tiny_model(V, 12, LT_TF_DECODER_ONLY);
  int64_t ids[41];
  for (int i = 0; i < 41; i++) ids[i] = (i * 37 + 11) % 256;
  const int64_t cases[][2] = {{8, 8}, {8, 3}, {12, 5}, {13, 13}, {13, 12}, {5, 1}, {2, 1}, {2, 2}};
  const int64_t n = 41;
  bool prev = lt_set_grad_enabled(false);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t W = cases[c][0], S = cases[c][1];
    lt_tf_ppl_opts o = {W, S};
    lt_tf_ppl_result r;
    LT_OK_OR_FAIL(lt_tf_perplexity(m, ids, n, &o, &r));
    double want;
    int64_t scored;
    hand_perplexity(m, ids, n, W, S, &want, &scored);
    ck_assert_msg(r.n_scored == scored, "W %lld S %lld: %lld scored, by hand %lld", (long long)W, (long long)S,
                  (long long)r.n_scored, (long long)scored);
    ck_assert_msg(fabs(r.loss - want) <= 1e-5 * fabs(want), "W %lld S %lld: loss %.9g, by hand %.9g (diff %.3g)",
                  (long long)W, (long long)S, r.loss, want, r.loss - want);
    ck_assert(fabs(r.perplexity - exp(want)) <= 1e-4 * exp(want));
    ck_assert(fabs(r.nll_sum - want * (double)scored) <= 1e-4 * fabs(want * (double)scored));
    if (S < W) ck_assert_int_eq(r.n_scored, n - 1); /* overlapping windows score every token once */
  }
  lt_set_grad_enabled(prev);
  /* the default window is max_len: windows of 12 side by side over 41 tokens */
  lt_tf_ppl_result r;
  LT_OK_OR_FAIL(lt_tf_perplexity(m, ids, 41, NULL, &r));
  ck_assert_int_eq(r.n_windows, 4);
  ck_assert_int_eq(r.n_scored, 40 - 3);
  lt_transformer_free(m);
  lt_tokenizer_free(tok);
}
END_TEST

START_TEST(perplexity_refuses_what_it_cannot_score) {
  lt_tokenizer *tok = LT_NNP(lt_tokenizer_new_byte());
  const int64_t V = lt_tokenizer_vocab_size(tok);
  lt_transformer *m = tiny_model(V, 12, LT_TF_DECODER_ONLY);
  lt_transformer *enc = tiny_model(V, 12, LT_TF_ENCODER_ONLY);
  int64_t ids[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  lt_tf_ppl_result r;
  LT_EXPECT_ERR(lt_tf_perplexity(m, ids, 1, NULL, &r), LT_ERR_INVALID, "at least 2");
  LT_EXPECT_ERR(lt_tf_perplexity(m, ids, 10, &(lt_tf_ppl_opts){14, 0}, &r), LT_ERR_INVALID, "window 14");
  LT_EXPECT_ERR(lt_tf_perplexity(m, ids, 10, &(lt_tf_ppl_opts){1, 0}, &r), LT_ERR_INVALID, "window 1");
  LT_EXPECT_ERR(lt_tf_perplexity(m, ids, 10, &(lt_tf_ppl_opts){8, 9}, &r), LT_ERR_INVALID, "stride 9");
  ids[6] = V;
  LT_EXPECT_ERR(lt_tf_perplexity(m, ids, 10, NULL, &r), LT_ERR_INDEX, "position 6");
  ids[6] = -1;
  LT_EXPECT_ERR(lt_tf_perplexity(m, ids, 10, NULL, &r), LT_ERR_INDEX, "position 6");
  ids[6] = 7;
  LT_EXPECT_ERR(lt_tf_perplexity(enc, ids, 10, NULL, &r), LT_ERR_INVALID, "encoder-only");
  LT_EXPECT_ERR(lt_tf_perplexity(NULL, ids, 10, NULL, &r), LT_ERR_NULL, NULL);
  lt_transformer_free(m);
  lt_transformer_free(enc);
  lt_tokenizer_free(tok);
}
END_TEST

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  ck_assert(f);
  ck_assert_int_eq(fputs(text, f) >= 0, 1);
  ck_assert_int_eq(fclose(f), 0);
}

/* The hand score of ending k: mean NLL of " " + ending given the context's last tokens that fit. */
static double hand_mc_score(const lt_transformer *m, const lt_tokenizer *tok, const lt_tf_mc_item *it, int64_t k) {
  int64_t *c, nc, *e, ne;
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok, it->ctx, strlen(it->ctx), &c, &nc));
  char buf[512];
  snprintf(buf, sizeof buf, " %s", it->endings[k]);
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok, buf, strlen(buf), &e, &ne));
  const int64_t max_len = lt_transformer_config(m)->max_len;
  int64_t keep = nc + ne <= max_len + 1 ? nc : max_len + 1 - ne;
  int64_t *seq = malloc((size_t)(keep + ne) * sizeof *seq);
  memcpy(seq, c + nc - keep, (size_t)keep * sizeof *seq);
  memcpy(seq + keep, e, (size_t)ne * sizeof *seq);
  double sum = 0;
  for (int64_t t = keep; t < keep + ne; t++) sum += token_nll(m, seq, 0, t);
  free(seq), free(c), free(e);
  return sum / (double)ne;
}

START_TEST(multiple_choice_scores_are_mean_ending_losses) {
  char dir[256], path[300];
  lt_test_mkdtemp(dir, sizeof dir, "lm_eval");
  snprintf(path, sizeof path, "%s/hs.jsonl", dir);
  /* HellaSwag's fields and the other spelling, extra fields, a blank line, a CRLF line, and a context longer
   * than the model's 48 positions allow with its ending (cut from the left) */
  write_file(path,
             "{\"ind\": 4, \"ctx\": \"A man is sitting on a roof. he\", \"endings\": [\"is using wrap to wrap a "
             "pair of skis.\", \"is ripping level tiles off.\", \"is holding a rubik's cube.\", \"starts pulling up "
             "roofing on a roof.\"], \"label\": 3, \"split\": \"val\"}\n"
             "\n"
             "{\"context\": \"The cat sat\", \"endings\": [\"on the mat.\", \"in orbit around Jupiter.\"], "
             "\"label\": 0}\r\n"
             "{\"ctx\": \"ab\", \"endings\": [\"c\", \"d\", \"ab\"], \"label\": 1}\n");
  lt_tf_mc_set *s;
  LT_OK_OR_FAIL(lt_tf_mc_read(path, &s));
  ck_assert_int_eq(s->n, 3);
  ck_assert_int_eq(s->items[0].n_endings, 4);
  ck_assert_int_eq(s->items[0].label, 3);
  ck_assert_int_eq(s->items[1].line, 3);
  ck_assert_str_eq(s->items[1].ctx, "The cat sat");
  ck_assert_int_eq(s->items[2].line, 4);
  ck_assert_str_eq(s->items[2].endings[2], "ab");

  lt_tokenizer *tok = LT_NNP(lt_tokenizer_new_byte());
  lt_transformer *m = tiny_model(lt_tokenizer_vocab_size(tok), 48, LT_TF_DECODER_ONLY);
  double scores[4 + 2 + 3];
  int64_t choices[3];
  lt_tf_mc_result r;
  LT_OK_OR_FAIL(lt_tf_mc_evaluate(m, tok, s, choices, scores, &r));
  ck_assert_int_eq(r.n, 3);
  bool prev = lt_set_grad_enabled(false);
  int64_t at = 0, correct = 0;
  for (int64_t i = 0; i < s->n; i++) {
    int64_t best = 0;
    double bv = INFINITY;
    for (int64_t k = 0; k < s->items[i].n_endings; k++, at++) {
      double want = hand_mc_score(m, tok, &s->items[i], k);
      ck_assert_msg(fabs(scores[at] - want) <= 1e-5 * fabs(want), "item %lld ending %lld: %.9g, by hand %.9g",
                    (long long)i, (long long)k, scores[at], want);
      if (want < bv) bv = want, best = k;
    }
    ck_assert_int_eq(choices[i], best);
    correct += best == s->items[i].label;
  }
  lt_set_grad_enabled(prev);
  ck_assert_int_eq(r.correct, correct);
  ck_assert(fabs(r.accuracy - (double)correct / 3.0) < 1e-12);
  /* one item alone gives the same scores */
  double one[4], sums[4];
  int64_t choice;
  LT_OK_OR_FAIL(lt_tf_mc_score(m, tok, &s->items[0], one, sums, &choice));
  ck_assert_int_eq(choice, choices[0]);
  for (int k = 0; k < 4; k++) ck_assert(one[k] == scores[k] && sums[k] > one[k]);
  /* an ending longer than the model's positions is refused naming the line */
  lt_tf_mc_item big = s->items[1];
  char *endings[2] = {"this ending is far longer than twenty-four bytes", "x"};
  big.endings = endings;
  LT_EXPECT_ERR(lt_tf_mc_score(m, tok, &big, one, NULL, &choice), LT_ERR_INVALID, "line 3: ending 0 has");
  lt_transformer_free(m);
  lt_tokenizer_free(tok);
  lt_tf_mc_set_free(s);
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(bad_multiple_choice_files_are_refused_by_file_and_line) {
  static const struct {
    const char *text, *msg;
    lt_status st;
  } bad[] = {
      {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\nnot json\n", "line 2: not JSON", LT_ERR_FORMAT},
      {"[1, 2]\n", "line 1: not a JSON object", LT_ERR_FORMAT},
      {"{\"endings\": [\"b\", \"c\"], \"label\": 0}\n", "line 1: no \"ctx\"", LT_ERR_FORMAT},
      {"{\"ctx\": 3, \"endings\": [\"b\", \"c\"], \"label\": 0}\n", "\"ctx\" is not a string", LT_ERR_FORMAT},
      {"{\"context\": \"\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n", "\"context\" is empty", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": \"b\", \"label\": 0}\n", "\"endings\" must be an array", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": [\"b\"], \"label\": 0}\n", "array of 2..64", LT_ERR_FORMAT},
      {"\n\n{\"ctx\": \"a\", \"endings\": [\"b\", \"\"], \"label\": 0}\n", "line 3: ending 1 is empty", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": [\"b\", 5], \"label\": 0}\n", "ending 1 is not a string", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n", "\"label\" 2 is not the index", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": -1}\n", "\"label\" -1", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": \"0\"}\n", "must be an integer", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\", \"endings\": [\"b\", \"c\"]}\n", "must be an integer", LT_ERR_FORMAT},
      {"{\"ctx\": \"a\\u0000b\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n", "line 1: not JSON", LT_ERR_FORMAT},
      {"\n  \n", "no item", LT_ERR_FORMAT},
      {"", "no item", LT_ERR_FORMAT},
  };
  char dir[256], path[300];
  lt_test_mkdtemp(dir, sizeof dir, "lm_eval_bad");
  snprintf(path, sizeof path, "%s/bad.jsonl", dir);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_file(path, bad[i].text);
    lt_tf_mc_set *s = (lt_tf_mc_set *)1;
    lt_status st = lt_tf_mc_read(path, &s);
    ck_assert_msg(st == bad[i].st && s == NULL, "case %zu: %s", i, lt_status_name(st));
    ck_assert_msg(strstr(lt_last_error(), bad[i].msg) && strstr(lt_last_error(), path), "case %zu: '%s' lacks '%s'",
                  i, lt_last_error(), bad[i].msg);
  }
  /* a line over LT_TF_MC_MAX_LINE bytes, without reading it as JSON */
  size_t n = LT_TF_MC_MAX_LINE + 2;
  char *big = malloc(n + 1);
  memset(big, ' ', n);
  big[n] = 0;
  big[0] = '{';
  lt_tf_mc_set *s;
  LT_EXPECT_ERR(lt_tf_mc_parse(big, n, "big.jsonl", &s), LT_ERR_OVERFLOW, "'big.jsonl' line 1");
  ck_assert(s == NULL);
  free(big);
  /* a FIFO is not a file to read */
  char fifo[320];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_ne(lt_tf_mc_read(fifo, &s), LT_OK);
  ck_assert(s == NULL && strstr(lt_last_error(), fifo));
  LT_EXPECT_ERR(lt_tf_mc_read(NULL, &s), LT_ERR_NULL, NULL);
  lt_tf_mc_set_free(NULL);
  unlink(fifo);
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lm_eval");
  LT_TEST_CASE(s, "lm_eval", 120, perplexity_is_exp_of_the_mean_cross_entropy_of_its_windows,
               perplexity_refuses_what_it_cannot_score, multiple_choice_scores_are_mean_ending_losses,
               bad_multiple_choice_files_are_refused_by_file_and_line);
  return lt_test_run(s);
}
