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
 *   hf_tool logits DIR OUT IDS         loads DIR (lt_hf_load), runs the ids
 *                                      (comma-separated) as one sequence and
 *                                      writes the logits [1, T, V] to OUT
 *                                      (safetensors, tensor "logits")
 *   hf_tool greedy DIR N IDS           loads DIR, decodes N new tokens
 *                                      greedily after the prompt IDS (with
 *                                      the KV cache, no end token) and prints
 *                                      them, comma-separated
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

static int make(const char *family, const char *dir, uint64_t seed) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 50, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 4, c.n_dec_layers = 2, c.d_ff = 40;
  c.max_len = 24, c.dropout = 0.0, c.pad_id = -1;
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
  return tool_export_random("hf_tool", &c, dir, seed);
}

/* The comma-separated ids of `text` as a new [1, T] i64 tensor. */
static lt_tensor *parse_ids(const char *text) {
  int64_t ids[256], T = 0;
  const char *p = text;
  while (*p && T < 256) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    ids[T++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  return lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, T}, ids);
}

static int greedy(const char *dir, long long n, const char *ids_text) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_tensor *x = parse_ids(ids_text);
  if (!x) return fail("the prompt");
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = n, o.eos_id = -1;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  lt_generate_result r = {0};
  if (lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r) != LT_OK) return fail("generate");
  for (int64_t i = 0; i < r.tokens->shape[1]; i++) {
    double v;
    if (lt_get(r.tokens, (int64_t[]){0, i}, &v) != LT_OK) return fail("reading a token");
    printf("%s%lld", i ? "," : "", (long long)v);
  }
  printf("\n");
  lt_generate_result_free(&r);
  lt_tensor_free(x);
  lt_transformer_free(m);
  return 0;
}

static int beam(const char *dir, long long n, long long k, double alpha, long long eos, const char *ids_text) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_tensor *x = parse_ids(ids_text);
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
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_tensor *x = parse_ids(ids_text);
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
  if (argc == 5 && strcmp(argv[1], "make") == 0) return make(argv[2], argv[3], strtoull(argv[4], NULL, 10));
  if (argc == 5 && strcmp(argv[1], "logits") == 0) return logits(argv[2], argv[3], argv[4]);
  if (argc == 5 && strcmp(argv[1], "greedy") == 0) return greedy(argv[2], strtoll(argv[3], NULL, 10), argv[4]);
  if (argc == 3 && strcmp(argv[1], "tokenizer") == 0) return tokenizer(argv[2]);
  if (argc == 8 && strcmp(argv[1], "beam") == 0)
    return beam(argv[2], strtoll(argv[3], NULL, 10), strtoll(argv[4], NULL, 10), strtod(argv[5], NULL),
                strtoll(argv[6], NULL, 10), argv[7]);
  fprintf(stderr, "usage: hf_tool make gpt2|llama|qwen2|mistral|llama3 DIR SEED | logits DIR OUT IDS | greedy DIR N IDS | beam DIR N K ALPHA EOS IDS | tokenizer DIR\n");
  return 2;
}
