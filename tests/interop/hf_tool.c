/*
 * tests/interop/hf_tool.c: the C side of tests/interop/test_hf_torch.py,
 * which compares libtensor's Hugging Face directories with PyTorch models
 * written from the published GPT-2 and Llama descriptions.
 *
 *   hf_tool make FAMILY DIR SEED       a tiny model of that layout with
 *                                      random weights (norms and biases too),
 *                                      exported to DIR (lt_hf_export):
 *                                      gpt2, llama, qwen2 (q/k/v biases),
 *                                      mistral (sliding window 6), llama3
 *                                      (Llama with Llama 3's RoPE scaling)
 *   hf_tool make-gguf gpt2|llama DIR SEED  the same at a size whose rows fill
 *                                      GGUF's 32-weight blocks (C 64, d_ff
 *                                      128, vocab 260 = the byte tokenizer's,
 *                                      which is written beside it, as
 *                                      `tokenizer` does)
 *   hf_tool gguf-tensors FILE OUT      every tensor of a GGUF file as f32
 *                                      (lt_gguf_read_f32) into OUT
 *                                      (safetensors, the GGUF names)
 *   hf_tool logits DIR OUT IDS         loads DIR (lt_hf_load; a GGUF file:
 *                                      lt_tf_gguf_load), runs the ids
 *                                      (comma-separated) as one sequence and
 *                                      writes the logits [1, T, V] to OUT
 *                                      (safetensors, tensor "logits")
 *   hf_tool greedy DIR N IDS           loads DIR, decodes N new tokens
 *                                      greedily after the prompt IDS (with
 *                                      the KV cache, no end token) and prints
 *                                      them, comma-separated; IDS may hold
 *                                      several prompts separated by ';',
 *                                      decoded as one left-padded batch
 *                                      (lt_generate_left_pad, prompt_lens),
 *                                      one line of tokens per prompt
 *   hf_tool beam DIR N K ALPHA EOS IDS beam search (lt_generate, K beams,
 *                                      length penalty ALPHA, end token EOS,
 *                                      at most N new tokens) after the
 *                                      prompt IDS with the KV cache; prints
 *                                      the tokens (comma-separated), then
 *                                      the score on a second line (%.17g)
 *   hf_tool tokenizer DIR              writes libtensor's byte tokenizer to
 *                                      DIR/libtensor-tokenizer.bin, so that
 *                                      generate runs on a directory PyTorch
 *                                      wrote
 * With LT_TOOL_PRECISION=bf16 in the environment, logits and greedy run
 * their products under bf16 autocast (what generate --precision bf16 does);
 * with LT_TOOL_WEIGHTS=bf16 (q8_0, q4_0) the model is loaded with its
 * weights in that format (what generate --weights bf16 does).
 * Exit 0 on success, 1 with a message on stderr otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libtensor_transformer.h"
#include "tests/interop/tool_export.h"

static int fail(const char *what) {
  fprintf(stderr, "hf_tool: %s: %s\n", what, lt_last_error());
  return 1;
}

static int tokenizer(const char *dir);

static int make(const char *family, const char *dir, uint64_t seed, bool gguf) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 50, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 4, c.n_dec_layers = 2, c.d_ff = 40;
  c.max_len = 24, c.dropout = 0.0, c.pad_id = -1;
  if (gguf) c.vocab_size = 260, c.d_model = 64, c.d_ff = 128, c.max_len = 128;
  if (strcmp(family, "gpt2") == 0) {
    c.act = LT_ACT_GELU_TANH;
  } else {
    c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU, c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.bias = false;
    c.tie_embeddings = false, c.n_kv_heads = 2, c.norm_eps = 1e-6, c.rope_base = 10000.0;
    if (strcmp(family, "qwen2") == 0) c.qkv_bias = true, c.tie_embeddings = true, c.rope_base = 1e6;
    if (strcmp(family, "mistral") == 0) c.sliding_window = 6;
    if (strcmp(family, "llama3") == 0) /* head size 4: wavelengths 6.3 (between 8/4 and 8/1) and 628 (above) */
      c.rope_type = LT_ROPE_LLAMA3, c.rope_factor = 4, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4,
      c.rope_original_max_len = 8;
  }
  const int rc = tool_export_random("hf_tool", &c, dir, seed);
  return rc || !gguf ? rc : tokenizer(dir);
}

/* A Hugging Face directory or a GGUF file (returns new); with LT_TOOL_WEIGHTS=bf16|q8_0|q4_0 in the
 * environment, loaded straight into that weight format (lt_tf_load's .weights). */
static lt_transformer *load(const char *path) {
  const char *w = getenv("LT_TOOL_WEIGHTS");
  if (!w) return lt_tf_gguf_is_file(path) ? lt_tf_gguf_load(path, 0, NULL) : lt_hf_load(path, 0);
  lt_tf_load_opts o = LT_TF_LOAD_DEFAULTS;
  lt_tf_loaded l;
  if (lt_qformat_parse(w, &o.weights) != LT_OK || lt_tf_load(path, &o, &l) != LT_OK) return NULL;
  lt_transformer *m = l.model;
  l.model = NULL;
  lt_tf_loaded_free(&l);
  lt_set_grad_enabled(false); /* quantized weights have no backward: inference only */
  return m;
}

static int gguf_tensors(const char *path, const char *out) {
  lt_gguf_file *f = lt_gguf_open(path);
  if (!f) return fail("opening");
  const int n = lt_gguf_tensor_count(f);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  lt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  int rc = names && ts ? 0 : fail("memory");
  for (int i = 0; i < n && !rc; i++) {
    const lt_gguf_tensor_info *ti = lt_gguf_tensor(f, i);
    names[i] = ti->name;
    ts[i] = lt_empty(LT_DTYPE_F32, ti->ndim, ti->shape);
    if (!ts[i] || lt_gguf_read_f32(f, i, ts[i]->data) != LT_OK) rc = fail(ti->name);
  }
  if (!rc && lt_st_save(out, n, names, (const lt_tensor *const *)ts, 0, NULL, NULL) != LT_OK) rc = fail("saving");
  for (int i = 0; ts && i < n; i++) lt_tensor_free(ts[i]);
  free(ts);
  free(names);
  lt_gguf_close(f);
  return rc;
}

static int greedy(const char *dir, long long n, const char *ids_text) {
  lt_transformer *m = load(dir);
  if (!m) return fail("loading");
  /* the prompts, ';'-separated: one left-padded batch */
  enum { MAXB = 16 };
  lt_tensor *rows[MAXB];
  const int64_t *rp[MAXB];
  int64_t lens[MAXB], B = 0;
  for (const char *p = ids_text; B < MAXB;) {
    const char *end = strchr(p, ';');
    char buf[4096];
    snprintf(buf, sizeof buf, "%.*s", end ? (int)(end - p) : (int)strlen(p), p);
    if (!(rows[B] = tool_parse_ids(buf))) return fail("the prompt");
    rp[B] = rows[B]->data, lens[B] = rows[B]->shape[1], B++;
    if (!end) break;
    p = end + 1;
  }
  lt_tensor *x = NULL, *plens = NULL;
  if (lt_generate_left_pad(B, rp, lens, 0, &x, &plens) != LT_OK) return fail("padding");
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = n, o.eos_id = -1;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  tf.prompt_lens = B > 1 ? plens : NULL;
  lt_generate_result r = {0};
  if (lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r) != LT_OK) return fail("generate");
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < r.tokens->shape[1]; i++) {
      double v;
      if (lt_get(r.tokens, (int64_t[]){b, i}, &v) != LT_OK) return fail("reading a token");
      printf("%s%lld", i ? "," : "", (long long)v);
    }
    printf("\n");
    lt_tensor_free(rows[b]);
  }
  lt_generate_result_free(&r);
  lt_tensor_free(x);
  lt_tensor_free(plens);
  lt_transformer_free(m);
  return 0;
}

static int beam(const char *dir, long long n, long long k, double alpha, long long eos, const char *ids_text) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_tensor *x = tool_parse_ids(ids_text);
  if (!x) return fail("the prompt");
  lt_generate_opts o = lt_generate_defaults();
  o.strategy = LT_GENERATE_BEAM, o.max_new = n, o.beam_width = k, o.length_penalty = alpha, o.eos_id = eos;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  lt_generate_result r = {0};
  if (lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r) != LT_OK) return fail("generate");
  double len, score;
  if (lt_get(r.lengths, (int64_t[]){0}, &len) != LT_OK || lt_get(r.scores, (int64_t[]){0}, &score) != LT_OK)
    return fail("reading the result");
  for (int64_t i = 0; i < (int64_t)len; i++) {
    double v;
    if (lt_get(r.tokens, (int64_t[]){0, i}, &v) != LT_OK) return fail("reading a token");
    printf("%s%lld", i ? "," : "", (long long)v);
  }
  printf("\n%.17g\n", score);
  lt_generate_result_free(&r);
  lt_tensor_free(x);
  lt_transformer_free(m);
  return 0;
}

static int logits(const char *dir, const char *out, const char *ids_text) {
  lt_transformer *m = load(dir);
  if (!m) return fail("loading");
  lt_tensor *x = tool_parse_ids(ids_text);
  lt_tensor *y = x ? lt_transformer_decode(m, x, NULL, NULL, NULL, 0, NULL) : NULL;
  if (!y) return fail("decode");
  const char *name[] = {"logits"};
  const lt_tensor *ts[] = {y};
  if (lt_st_save(out, 1, name, ts, 0, NULL, NULL) != LT_OK) return fail("saving the logits");
  lt_tensor_free(x);
  lt_tensor_free(y);
  lt_transformer_free(m);
  return 0;
}

static int tokenizer(const char *dir) {
  lt_tokenizer *t = lt_tokenizer_new_byte();
  void *buf;
  size_t size;
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, LT_HF_TOKENIZER_FILE);
  if (!t || lt_tokenizer_serialize(t, &buf, &size) != LT_OK || lt_ckpt_write_file(path, buf, size) != LT_OK)
    return fail("the tokenizer");
  printf("%lld\n", (long long)lt_tokenizer_vocab_size(t));
  free(buf);
  lt_tokenizer_free(t);
  return 0;
}

int main(int argc, char **argv) {
  /* LT_TOOL_PRECISION=bf16: the products under bf16 autocast (generate --precision bf16) */
  const char *prec = getenv("LT_TOOL_PRECISION");
  if (prec && strcmp(prec, "bf16") == 0) lt_set_autocast(LT_DTYPE_BF16);
  if (argc == 5 && strcmp(argv[1], "make") == 0) return make(argv[2], argv[3], strtoull(argv[4], NULL, 10), false);
  if (argc == 5 && strcmp(argv[1], "make-gguf") == 0) return make(argv[2], argv[3], strtoull(argv[4], NULL, 10), true);
  if (argc == 4 && strcmp(argv[1], "gguf-tensors") == 0) return gguf_tensors(argv[2], argv[3]);
  if (argc == 5 && strcmp(argv[1], "logits") == 0) return logits(argv[2], argv[3], argv[4]);
  if (argc == 5 && strcmp(argv[1], "greedy") == 0) return greedy(argv[2], strtoll(argv[3], NULL, 10), argv[4]);
  if (argc == 3 && strcmp(argv[1], "tokenizer") == 0) return tokenizer(argv[2]);
  if (argc == 8 && strcmp(argv[1], "beam") == 0)
    return beam(argv[2], strtoll(argv[3], NULL, 10), strtoll(argv[4], NULL, 10), strtod(argv[5], NULL),
                strtoll(argv[6], NULL, 10), argv[7]);
  fprintf(stderr, "usage: hf_tool make gpt2|llama|qwen2|mistral|llama3 DIR SEED | make-gguf gpt2|llama DIR SEED | "
          "gguf-tensors FILE OUT | logits DIR OUT IDS | greedy DIR N IDS | beam DIR N K ALPHA EOS IDS | tokenizer DIR\n");
  return 2;
}
