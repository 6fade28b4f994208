/*
 * tests/test_quant_model.c: weight-only quantization of a whole model
 * (lt_params_quantize, nn/nn.h; tensor/quant.h):
 *   - quality: the fixture tests/fixtures/quant_lm/ (a small decoder-only
 *     Transformer, d_model 48 and d_ff 144 so that rows are not whole
 *     blocks, trained by `train` on the first 80% of the GPL-3 text that
 *     Debian's base-files installs; tests/fixtures/make_quant_lm_fixture.sh)
 *     and the perplexity of the last 20% (held out) in f32, bf16, Q8_0 and
 *     Q4_0: bf16 and Q8_0 within +0.5% of f32, Q4_0 within +5%; greedy
 *     continuations of three prompts compared token by token (printed;
 *     bf16 and Q8_0 must agree with f32 on at least half of the tokens);
 *   - memory: the process's resident memory falls by most of the bytes the
 *     weights lose (not in sanitizer builds, whose allocator keeps freed
 *     memory in quarantine), and the quantized model's logits stay close;
 *   - the contract: a second quantization, lt_params_to_dtype, checkpoint
 *     saving and a product that would need a backward are refused with a
 *     message;
 *   - the `generate` program with --weights in each format.
 */
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "datasets/datasets.h"
#include "models/transformer/generate.h"
#include "models/transformer/hf.h"
#include "models/transformer/transformer.h"
#include "tensor/quant.h"
#include "test_util.h"
#include "util_fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEXT_PATH "/usr/share/common-licenses/GPL-3"
enum { T = 64, TEXT_BYTES = 35149 };

static char *read_text(size_t *n) {
  FILE *f = fopen(TEXT_PATH, "rb");
  ck_assert_msg(f != NULL, "cannot open %s (Debian's base-files)", TEXT_PATH);
  char *buf = malloc(1 << 20);
  *n = fread(buf, 1, (1 << 20) - 1, f);
  fclose(f);
  buf[*n] = 0;
  return buf;
}

/* ids[start .. start + T) as input, the next tokens as labels. */
static lt_tensor *batch_logits(const lt_transformer *m, const int64_t *ids, const int64_t *starts, int nb,
                               lt_tensor **labels) {
  int64_t *x = malloc(sizeof(int64_t) * (size_t)(nb * T)), *y = malloc(sizeof(int64_t) * (size_t)(nb * T));
  for (int b = 0; b < nb; b++)
    for (int t = 0; t < T; t++) x[b * T + t] = ids[starts[b] + t], y[b * T + t] = ids[starts[b] + t + 1];
  lt_tensor *xt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){nb, T}, x));
  *labels = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){nb * T}, y));
  free(x);
  free(y);
  const lt_nn_ctx ctx = {false, NULL};
  lt_tensor *logits = lt_transformer_decode(m, xt, NULL, NULL, NULL, 0, &ctx);
  lt_tensor_free(xt);
  return logits;
}

/* Perplexity over the non-overlapping windows of T + 1 tokens of ids[0..n). */
static double perplexity(const lt_transformer *m, const int64_t *ids, int64_t n) {
  const bool prev = lt_set_grad_enabled(false);
  double sum = 0;
  int64_t count = 0;
  const int64_t V = lt_transformer_config(m)->vocab_size;
  for (int64_t s0 = 0; s0 + T + 1 <= n; s0 += 8 * T) {
    int64_t starts[8];
    int nb = 0;
    for (int64_t s = s0; nb < 8 && s + T + 1 <= n; s += T) starts[nb++] = s;
    lt_scope *sc = lt_scope_begin();
    lt_tensor *labels, *logits = LT_NN(batch_logits(m, ids, starts, nb, &labels));
    lt_tensor *l2 = LT_NN(lt_reshape(logits, 2, (int64_t[]){nb * T, V}));
    lt_tensor *loss = LT_NN(lt_cross_entropy(l2, labels, NULL));
    double v;
    LT_OK_OR_FAIL(lt_tensor_read(loss, LT_DTYPE_F64, &v, 1));
    sum += v * nb * T;
    count += nb * T;
    lt_scope_end(sc);
  }
  lt_set_grad_enabled(prev);
  return exp(sum / (double)count);
}

/* A copy of m's weights in a new model (same configuration). */
static lt_transformer *copy_model(const lt_transformer *m) {
  lt_generator *g = LT_NNP(lt_generator_new(1));
  lt_transformer *c = LT_NNP(lt_transformer_new(lt_transformer_config(m), g));
  lt_generator_free(g);
  LT_OK_OR_FAIL(lt_params_copy(lt_transformer_params(c), lt_transformer_params((lt_transformer *)m)));
  return c;
}

enum { N_PROMPTS = 3, N_NEW = 40 };
static const char *const PROMPTS[N_PROMPTS] = {"The GNU General Public License is ", "you must ",
                                               "If you convey a covered work, "};

/* Greedy continuations of the prompts: N_NEW tokens each into out. */
static void greedy(const lt_transformer *m, const lt_tokenizer *tok, int64_t out[N_PROMPTS][N_NEW], char **text) {
  for (int p = 0; p < N_PROMPTS; p++) {
    int64_t *ids, n;
    LT_OK_OR_FAIL(lt_tokenizer_encode(tok, PROMPTS[p], strlen(PROMPTS[p]), &ids, &n));
    lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, n}, ids));
    free(ids);
    lt_generate_opts d = lt_generate_defaults();
    d.strategy = LT_GENERATE_GREEDY;
    d.max_new = N_NEW;
    d.eos_id = -1;
    lt_tf_generate_opts dt = lt_tf_generate_defaults();
    dt.context = T;
    lt_generate_result r = {0};
    LT_OK_OR_FAIL(lt_transformer_generate(m, NULL, NULL, x, &d, &dt, &r));
    int64_t got[N_NEW], len;
    ck_assert_int_eq(r.tokens->shape[1], N_NEW);
    LT_OK_OR_FAIL(lt_tensor_read(r.tokens, LT_DTYPE_I64, got, N_NEW));
    LT_OK_OR_FAIL(lt_tensor_read(r.lengths, LT_DTYPE_I64, &len, 1));
    memcpy(out[p], got, sizeof got);
    size_t tl;
    LT_OK_OR_FAIL(lt_tokenizer_decode(tok, got, len, 0, &text[p], &tl));
    lt_generate_result_free(&r);
    lt_tensor_free(x);
  }
}

/* The fixture (tests/fixtures/make_quant_lm_fixture.sh): the model of a
 * `train` run on the text, exported as a Hugging Face (GPT-2 layout)
 * directory with libtensor's tokenizer. */
static lt_transformer *load_fixture_lm(lt_tokenizer **tok) {
  char dir[4096], path[4200];
  lt_fixture_path("quant_lm", dir, sizeof dir);
  lt_transformer *m = LT_NNP(lt_hf_load(dir, 0));
  snprintf(path, sizeof path, "%s/%s", dir, LT_HF_TOKENIZER_FILE);
  char *blob;
  size_t size;
  LT_OK_OR_FAIL(lt_ckpt_read_file(path, 1u << 20, &blob, &size));
  *tok = LT_NNP(lt_tokenizer_deserialize(blob, size));
  free(blob);
  return m;
}

START_TEST(test_quality_trained_lm) {
  size_t len;
  char *text = read_text(&len);
  ck_assert_msg(len == TEXT_BYTES, "%s has %zu bytes, not the %d the fixture was trained on", TEXT_PATH, len, TEXT_BYTES);
  lt_tokenizer *tok;
  lt_transformer *m = load_fixture_lm(&tok);
  int64_t *all_ids, n_all;
  LT_OK_OR_FAIL(lt_tokenizer_encode(tok, text, len, &all_ids, &n_all));
  /* train held out the last 20% of the tokens (--valid-fraction 0.2) */
  const int64_t n_held = (int64_t)((double)n_all * 0.2), n_train = n_all - n_held;
  const int64_t *held_ids = all_ids + n_train;
  const lt_tf_config cfg = *lt_transformer_config(m);
  const double ppl32 = perplexity(m, held_ids, n_held);
  int64_t g32[N_PROMPTS][N_NEW];
  char *t32[N_PROMPTS];
  greedy(m, tok, g32, t32);
  fprintf(stderr, "quant model: %lld training / %lld held-out tokens, vocabulary %lld, d_model %lld, d_ff %lld\n",
          (long long)n_train, (long long)n_held, (long long)cfg.vocab_size, (long long)cfg.d_model, (long long)cfg.d_ff);
  fprintf(stderr, "quant model: f32   ppl %.4f\n", ppl32);
  /* trained: better than the unigram model of the training part (add-one counts) */
  double *cnt = calloc((size_t)cfg.vocab_size, sizeof(double)), nll = 0;
  for (int64_t i = 0; i < n_train; i++) cnt[all_ids[i]] += 1;
  for (int64_t i = 0; i < n_held; i++) nll -= log((cnt[held_ids[i]] + 1) / (double)(n_train + cfg.vocab_size));
  const double ppl_unigram = exp(nll / (double)n_held);
  free(cnt);
  fprintf(stderr, "quant model: unigram ppl %.4f\n", ppl_unigram);
  ck_assert_msg(ppl32 < 0.8 * ppl_unigram, "the fixture is not a trained model: held-out perplexity %.3f, unigram %.3f",
                ppl32, ppl_unigram);
  const lt_qformat fmts[3] = {LT_QFORMAT_BF16, LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0};
  const double limit[3] = {1.005, 1.005, 1.05};
  for (int f = 0; f < 3; f++) {
    lt_transformer *q = copy_model(m);
    size_t before, after;
    LT_OK_OR_FAIL(lt_params_quantize(lt_transformer_params(q), fmts[f], &before, &after));
    const double ppl = perplexity(q, held_ids, n_held);
    int64_t g[N_PROMPTS][N_NEW];
    char *tq[N_PROMPTS];
    greedy(q, tok, g, tq);
    int same = 0, prefix_total = 0;
    for (int p = 0; p < N_PROMPTS; p++) {
      int prefix = 0;
      while (prefix < N_NEW && g[p][prefix] == g32[p][prefix]) prefix++;
      prefix_total += prefix;
      for (int t = 0; t < N_NEW; t++) same += g[p][t] == g32[p][t];
    }
    fprintf(stderr,
            "quant model: %-5s ppl %.4f (%+.3f%% of f32), weights %zu -> %zu bytes; greedy: %d of %d tokens as f32, "
            "first difference after %.1f tokens on average\n",
            lt_qformat_name(fmts[f]), ppl, 100 * (ppl / ppl32 - 1), before, after, same, N_PROMPTS * N_NEW,
            (double)prefix_total / N_PROMPTS);
    for (int p = 0; p < N_PROMPTS; p++) {
      fprintf(stderr, "  %-5s \"%s\" -> \"%s\"\n", lt_qformat_name(fmts[f]), PROMPTS[p], tq[p]);
      free(tq[p]);
    }
    ck_assert_msg(ppl <= ppl32 * limit[f], "%s: perplexity %.4f above %.3f x f32's %.4f", lt_qformat_name(fmts[f]), ppl,
                  limit[f], ppl32);
    if (fmts[f] != LT_QFORMAT_Q4_0)
      ck_assert_msg(same * 2 >= N_PROMPTS * N_NEW, "%s: only %d of %d greedy tokens as f32", lt_qformat_name(fmts[f]),
                    same, N_PROMPTS * N_NEW);
    lt_transformer_free(q);
  }
  for (int p = 0; p < N_PROMPTS; p++) {
    fprintf(stderr, "  f32   \"%s\" -> \"%s\"\n", PROMPTS[p], t32[p]);
    free(t32[p]);
  }
  lt_transformer_free(m);
  lt_tokenizer_free(tok);
  free(all_ids);
  free(text);
}
END_TEST

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
  fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The f32 weights leave the process; the model still runs, and what it may
 * not do is refused with a message. */
START_TEST(test_memory_and_contract) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 8192, c.d_model = 256, c.n_heads = 4, c.n_kv_heads = 4, c.n_dec_layers = 4, c.d_ff = 1024;
  c.max_len = 32, c.dropout = 0.0;
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_params *p = lt_transformer_params(m);
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, 4}, (int64_t[]){5, 6, 7, 8}));
  const lt_nn_ctx ctx = {false, NULL};
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *y32 = LT_NN(lt_transformer_decode(m, x, NULL, NULL, NULL, 0, &ctx));
  const long rss0 = rss_kib();
  size_t before, after;
  LT_OK_OR_FAIL(lt_params_quantize(p, LT_QFORMAT_Q8_0, &before, &after));
  const long rss1 = rss_kib();
  fprintf(stderr, "quant model: %zu bytes of weights -> %zu (q8_0); resident memory %ld KiB -> %ld KiB\n", before,
          after, rss0, rss1);
  ck_assert(lt_params_quantized(p));
  ck_assert_uint_eq(after * 128, before * 34); /* every row a whole number of blocks here */
#ifndef __SANITIZE_ADDRESS__ /* gcc's; the sanitizer builds use gcc */
  ck_assert_msg((double)(rss0 - rss1) * 1024 >= 0.6 * (double)(before - after),
                "resident memory fell by %ld KiB, the weights by %zu bytes", rss0 - rss1, before - after);
#endif
  lt_tensor *yq = LT_NN(lt_transformer_decode(m, x, NULL, NULL, NULL, 0, &ctx));
  double maxd = 0, maxv = 0;
  for (int64_t i = 0; i < y32->numel; i++) {
    const double d = fabs(((float *)yq->data)[i] - ((float *)y32->data)[i]);
    maxd = d > maxd ? d : maxd;
    maxv = fabs(((float *)y32->data)[i]) > maxv ? fabs(((float *)y32->data)[i]) : maxv;
  }
  fprintf(stderr, "quant model: q8_0 logits within %.3g of f32 (largest |logit| %.3g)\n", maxd, maxv);
  ck_assert_msg(maxd <= 0.05 * maxv, "q8_0 logits differ by %g (largest %g)", maxd, maxv);
  lt_set_grad_enabled(prev);

  const lt_tensor *w = lt_params_find(p, "embed.weight");
  ck_assert_ptr_nonnull(lt_tensor_qmatrix(w));
  ck_assert_int_eq(w->shape[0], 8192);
  ck_assert(!w->requires_grad);
  LT_EXPECT_ERR(lt_params_quantize(p, LT_QFORMAT_Q4_0, NULL, NULL), LT_ERR_STATE, "already quantized");
  LT_EXPECT_ERR(lt_params_to_dtype(p, LT_DTYPE_F64), LT_ERR_STATE, "quantized weights");
  LT_EXPECT_ERR(lt_ckpt_save_params("/nonexistent/x.h5", p, NULL, NULL), LT_ERR_STATE, "quantized weights");
  LT_EXPECT_ERR(lt_st_save_params("/nonexistent/x.safetensors", p, 0, NULL, NULL), LT_ERR_STATE, "quantized");
  /* under grad mode, with a bias that requires grad: no backward */
  lt_tensor *wq = lt_params_find(p, "decoder.layers.0.linear1.weight");
  lt_tensor *bias = lt_params_find(p, "decoder.layers.0.linear1.bias");
  ck_assert_ptr_nonnull(lt_tensor_qmatrix(wq));
  lt_tensor *h = LT_NN(lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){2, 256}));
  if (bias && bias->requires_grad) LT_EXPECT_NULL_ERR(lt_linear(h, wq, bias), LT_ERR_AUTOGRAD, "no backward");
  LT_OK_OR_FAIL(lt_requires_grad_(h, true));
  LT_EXPECT_NULL_ERR(lt_linear(h, wq, NULL), LT_ERR_AUTOGRAD, "no backward");
  /* any other op reads the weight as zeros, in bounds */
  lt_tensor *s = LT_NN(lt_sum(wq, 0, NULL, false));
  double sv;
  LT_OK_OR_FAIL(lt_tensor_read(s, LT_DTYPE_F64, &sv, 1));
  ck_assert(sv == 0.0);
  LT_EXPECT_ERR(lt_tensor_quantize_(wq, LT_QFORMAT_Q4_0), LT_ERR_STATE, "already quantized");
  LT_FREE_ALL(x, y32, yq, h, s);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* generate --weights: each format decodes the fixture; a bad name is a
 * usage error naming the choices. */
START_TEST(test_generate_program) {
  char dir[4096], cmd[8192];
  lt_fixture_path("quant_lm", dir, sizeof dir);
  char tmpl[] = "/tmp/lt_quant_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmpl));
  const char *fmts[] = {"f32", "bf16", "q8_0", "q4_0"};
  for (int f = 0; f < 4; f++) {
    snprintf(cmd, sizeof cmd, "'%s' --checkpoint '%s' --weights %s --max-len 24 'you must ' > '%s/out' 2> '%s/err'",
             LT_GENERATE_EXE, dir, fmts[f], tmpl, tmpl);
    int st = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/out", tmpl);
    FILE *o = fopen(cmd, "r");
    char line[512] = "";
    ck_assert_ptr_nonnull(o);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, o));
    fclose(o);
    fprintf(stderr, "  generate --weights %-5s 'you must ' -> %s", fmts[f], line);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "generate --weights %s failed", fmts[f]);
    ck_assert_int_gt((int)strlen(line), 1);
    snprintf(cmd, sizeof cmd, "grep -q 'weights %s: .* MB of Linear and embedding weights' '%s/err'", fmts[f], tmpl);
    if (f > 0) ck_assert_msg(system(cmd) == 0, "generate --weights %s: no line about the weights", fmts[f]);
  }
  snprintf(cmd, sizeof cmd, "'%s' --checkpoint '%s' --weights q5 x > /dev/null 2> '%s/err'", LT_GENERATE_EXE, dir, tmpl);
  int st = system(cmd);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  snprintf(cmd, sizeof cmd, "grep -q \"q8_0\" '%s/err'", tmpl);
  ck_assert_msg(system(cmd) == 0, "--weights q5: the message does not list the formats");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
  ck_assert(system(cmd) == 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("quant_model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_quality_trained_lm);
  tcase_add_test(tc, test_memory_and_contract);
  tcase_add_test(tc, test_generate_program);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
