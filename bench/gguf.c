/*
 * bench/gguf.c: libtensor's side of the comparison with llama.cpp on the
 * same GGUF file (bench/run_gguf_bench.sh; llama.cpp's side is
 * bench/gguf_llama.py; docs/decoding.md records the results).
 *
 *   bench_gguf make gpt2|llama OUT.gguf f32|bf16|q8_0|q4_0
 *       a random-weight model written as GGUF: "gpt2" is GPT-2 124M's shape
 *       (V 50257, C 768, 12 layers, 12 heads, d_ff 3072, 1024 positions),
 *       "llama" a Llama of 205M parameters (V 32000, C 1024, 12 layers, 16
 *       heads, 8 key/value heads, d_ff 2816, 1024 positions); no tokenizer
 *       (the benchmark feeds ids).
 *   bench_gguf run FILE [--prompt 512] [--gen 128] [--threads 2] [--repeat 1]
 *       loads FILE (lt_tf_gguf_load) and holds its matrices in the file's
 *       type, as llama.cpp does: when the loader gave f32 parameters and the
 *       file's matrices are BF16, Q8_0 or Q4_0, lt_params_quantize converts
 *       them back to that type (the blocks round-trip: the same weights up
 *       to the rounding of a re-quantization), then times greedy
 *       decoding with the KV cache as bench/gguf_llama.py times llama.cpp:
 *       the prompt of --prompt ids in one step (prompt processing: prompt /
 *       its time; only its last position through the output head, as
 *       llama.cpp computes the last logits only), then --gen tokens one step
 *       each (generation: gen / their time), both in one run. Prints "pp
 *       TOK_S tg TOK_S", the best of --repeat runs.
 *   bench_gguf bound FILE [--threads 2]
 *       the bandwidth bound of generation: the bytes a token reads from the
 *       file's weights (every tensor but the input embedding, of which one
 *       row; a tied head reads it whole) in the file's types, and the same in
 *       f32, over the triad bandwidth (bench/triad.h).
 *       Prints "bytes FILE_BYTES f32_bytes F32_BYTES gbs GB_S".
 *
 * What this is not: a quality measurement (the weights are random).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "bench/triad.h"
#include "libtensor_transformer.h"

static void die(const char *what) {
  fprintf(stderr, "bench_gguf: %s: %s\n", what, lt_last_error());
  exit(1);
}

static int make(const char *arch, const char *out, const char *weights) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.dropout = 0.0, c.pad_id = -1, c.max_len = 1024;
  if (strcmp(arch, "gpt2") == 0) {
    c.vocab_size = 50257, c.d_model = 768, c.n_heads = 12, c.n_kv_heads = 12, c.n_dec_layers = 12, c.d_ff = 3072;
    c.act = LT_ACT_GELU_TANH;
  } else {
    c.vocab_size = 32000, c.d_model = 1024, c.n_heads = 16, c.n_kv_heads = 8, c.n_dec_layers = 12, c.d_ff = 2816;
    c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU, c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.bias = false;
    c.tie_embeddings = false, c.norm_eps = 1e-5, c.rope_base = 10000.0;
  }
  static const char *const names[] = {"f32", "bf16", "q8_0", "q4_0"};
  static const int types[] = {LT_GGML_F32, LT_GGML_BF16, LT_GGML_Q8_0, LT_GGML_Q4_0};
  int type = -1;
  for (int k = 0; k < 4; k++)
    if (strcmp(weights, names[k]) == 0) type = types[k];
  if (type < 0) return fprintf(stderr, "bench_gguf: weights %s: f32, bf16, q8_0 or q4_0\n", weights), 2;
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = g ? lt_transformer_new(&c, g) : NULL;
  if (!m) die("building the model");
  if (lt_tf_gguf_export(m, out, type, NULL, 0) != LT_OK) die("export");
  lt_transformer_free(m);
  lt_generator_free(g);
  return 0;
}

/* The id of the largest of the V logits [1, V] (the first on ties). */
static int64_t argmax(const lt_tensor *logits) {
  const float *v = logits->data;
  int64_t best = 0;
  for (int64_t i = 1; i < logits->numel; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

/* One greedy run with the KV cache, timed as bench/gguf_llama.py times
 * llama.cpp: the prompt in one step (prompt processing: P / its time), then
 * G tokens one step each, each fed the argmax of the last logits
 * (generation: G / their time). Both phases of the same run, so a change in
 * the machine's load between two runs does not enter the difference. */
static void greedy(const lt_transformer *m, const int64_t *ids, int64_t P, int64_t G, double *pp, double *tg) {
  lt_tf_cache *c = lt_tf_cache_new(m, P + G);
  lt_tensor *prompt = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, P}, ids);
  if (!c || !prompt) die("the cache");
  const bool prev = lt_set_grad_enabled(false);
  const double t0 = lt_monotonic_seconds();
  lt_tensor *logits = lt_transformer_decode_step_last(m, c, prompt, NULL, NULL); /* [1, V] */
  if (!logits) die("the prompt");
  int64_t next = argmax(logits);
  const double t1 = lt_monotonic_seconds();
  for (int64_t g = 0; g < G; g++) {
    lt_tensor *tok = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, 1}, &next);
    lt_tensor_free(logits);
    logits = tok ? lt_transformer_decode_step_last(m, c, tok, NULL, NULL) : NULL;
    lt_tensor_free(tok);
    if (!logits) die("decoding");
    next = argmax(logits);
  }
  const double t2 = lt_monotonic_seconds();
  lt_set_grad_enabled(prev);
  *pp = (double)P / (t1 - t0), *tg = (double)G / (t2 - t1);
  lt_tensor_free(logits);
  lt_tensor_free(prompt);
  lt_tf_cache_free(c);
}

/* The type of the file's first attention matrix (every matrix of a
 * `bench_gguf make` file has it) as a weight format. */
static lt_qformat file_format(const char *path) {
  lt_gguf_file *f = lt_gguf_open(path);
  if (!f) die("opening");
  int i = lt_gguf_find_tensor(f, "blk.0.attn_q.weight");
  if (i < 0) i = lt_gguf_find_tensor(f, "blk.0.attn_qkv.weight");
  const int type = i >= 0 ? lt_gguf_tensor(f, i)->type : LT_GGML_F32;
  lt_gguf_close(f);
  return type == LT_GGML_BF16 ? LT_QFORMAT_BF16 : type == LT_GGML_Q8_0 ? LT_QFORMAT_Q8_0
       : type == LT_GGML_Q4_0 ? LT_QFORMAT_Q4_0 : LT_QFORMAT_F32;
}

static int run(const char *path, int64_t P, int64_t G, int repeat) {
  lt_transformer *m = lt_tf_gguf_load(path, 0, NULL);
  if (!m) die("loading");
  lt_params *params = lt_transformer_params(m);
  const lt_qformat fmt = file_format(path);
  if (fmt != LT_QFORMAT_F32 && !lt_params_quantized(params) && lt_params_quantize(params, fmt, NULL, NULL) != LT_OK)
    die("quantizing");
  const int64_t V = lt_transformer_config(m)->vocab_size;
  int64_t *ids = malloc((size_t)P * sizeof *ids);
  if (!ids) die("prompt");
  for (int64_t i = 0; i < P; i++) ids[i] = (i * 7919 + 13) % V;
  double best_pp = 0, best_tg = 0;
  for (int r = 0; r < repeat; r++) {
    double pp, tg;
    greedy(m, ids, P, G, &pp, &tg);
    if (pp > best_pp) best_pp = pp;
    if (tg > best_tg) best_tg = tg;
  }
  printf("pp %.2f tg %.2f\n", best_pp, best_tg);
  free(ids);
  lt_transformer_free(m);
  return 0;
}

static int bound(const char *path, int threads) {
  lt_gguf_file *f = lt_gguf_open(path);
  if (!f) die("opening");
  const bool tied = lt_gguf_find_tensor(f, "output.weight") < 0;
  double file_bytes = 0, f32_bytes = 0;
  for (int i = 0; i < lt_gguf_tensor_count(f); i++) {
    const lt_gguf_tensor_info *t = lt_gguf_tensor(f, i);
    const double rows = t->ndim == 2 ? (double)t->shape[0] : 1;
    double share = 1.0; /* a tensor is read whole per token, */
    if (strcmp(t->name, "position_embd.weight") == 0) share = 1.0 / rows; /* an embedding one row, */
    if (strcmp(t->name, "token_embd.weight") == 0) share = (tied ? 1.0 : 0.0) + 1.0 / rows; /* and whole as a tied head */
    file_bytes += (double)t->nbytes * share;
    f32_bytes += 4.0 * (double)t->numel * share;
  }
  lt_gguf_close(f);
  printf("bytes %.0f f32_bytes %.0f gbs %.2f\n", file_bytes, f32_bytes, lt_bench_triad_gbs(threads));
  return 0;
}

int main(int argc, char **argv) {
  const char *usage = "bench_gguf make gpt2|llama OUT f32|bf16|q8_0|q4_0 | run FILE [--prompt N] [--gen N] "
                      "[--threads N] [--repeat N] | bound FILE [--threads N]";
  int64_t P = 512, G = 128, threads = 2, repeat = 1;
  const lt_bench_opt opts[] = {
      {"--prompt", LT_BENCH_INT, &P, 1, 0, NULL},
      {"--gen", LT_BENCH_INT, &G, 1, 0, NULL},
      {"--threads", LT_BENCH_INT, &threads, 1, 0, NULL},
      {"--repeat", LT_BENCH_INT, &repeat, 1, 0, NULL},
  };
  char *pos[4];
  int npos = 4;
  const int bad = lt_bench_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), usage, pos, &npos);
  if (bad) return bad;
  if (npos == 4 && strcmp(pos[0], "make") == 0) return make(pos[1], pos[2], pos[3]);
  if (npos != 2) return fprintf(stderr, "usage: %s\n", usage), 2;
  if (lt_set_num_threads((int)threads) != LT_OK) die("--threads");
  if (strcmp(pos[0], "run") == 0) return run(pos[1], P, G, (int)repeat);
  if (strcmp(pos[0], "bound") == 0) return bound(pos[1], (int)threads);
  fprintf(stderr, "usage: %s\n", usage);
  return 2;
}
