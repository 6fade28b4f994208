/*
 * tests/interop/t5_tool.c: the C side of tests/reference/test_hf_t5.py, which
 * checks libtensor's T5 (models/transformer/hf_t5.c) against transformers'
 * T5ForConditionalGeneration.
 *
 *   t5_tool make relu|gated DIR SEED   a tiny T5 with random weights (norms
 *                                      too), exported to DIR (lt_hf_export):
 *                                      relu = v1.0 (ReLU, tied head), gated =
 *                                      v1.1 (gated GELU, untied lm_head)
 *   t5_tool logits DIR OUT SRC TGT     loads DIR (lt_hf_load), encodes the ids
 *                                      SRC (comma-separated), decodes TGT
 *                                      (the decoder's input ids) and writes
 *                                      the logits [1, T, V] to OUT
 *                                      (safetensors, tensor "logits")
 *   t5_tool greedy DIR N SRC           N new tokens, greedily, with the KV
 *                                      cache, no end token, from the
 *                                      directory's decoder_start_token_id;
 *                                      prints them comma-separated
 *   t5_tool beam DIR N K ALPHA EOS SRC beam search (K beams, length penalty
 *                                      ALPHA, end token EOS, at most N new
 *                                      tokens); prints the tokens, then the
 *                                      score on a second line (%.17g)
 *   t5_tool grads DIR OUT SRC TGT LBL  the training loss (mean cross-entropy
 *                                      of the decoder on inputs TGT against
 *                                      labels LBL, lt_transformer_decode_loss)
 *                                      and its backward: writes "loss" and
 *                                      the gradient of every parameter under
 *                                      libtensor's name to OUT
 * Exit 0 on success, 1 with a message on stderr otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libtensor_transformer.h"
#include "tests/interop/tool_export.h"

static int fail(const char *what) { return tool_fail("t5_tool", what); }

static int make(const char *kind, const char *dir, uint64_t seed) {
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  c.vocab_size = 48, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 4, c.n_enc_layers = 2, c.n_dec_layers = 3;
  c.d_ff = 24, c.max_len = 80, c.dropout = 0.0, c.pad_id = 0, c.norm = LT_TF_RMS_NORM, c.pre_norm = true;
  c.pos = LT_TF_POS_RELATIVE, c.rel_buckets = 8, c.rel_max_distance = 20, c.attn_scale = 1.0, c.bias = false;
  c.scale_embeddings = false, c.norm_eps = 1e-6, c.act = LT_ACT_RELU, c.tie_embeddings = true, c.head_rescale = true;
  if (strcmp(kind, "gated") == 0) c.act = LT_ACT_GELU_TANH, c.swiglu = true, c.tie_embeddings = false, c.head_rescale = false;
  return tool_export_random("t5_tool", &c, dir, seed);
}

static int logits(const char *dir, const char *out, const char *src_text, const char *tgt_text) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_tensor *src = tool_parse_ids(src_text), *tgt = tool_parse_ids(tgt_text);
  lt_set_grad_enabled(false);
  lt_tensor *mem = src && tgt ? lt_transformer_encode(m, src, NULL, NULL) : NULL;
  lt_tensor *y = mem ? lt_transformer_decode(m, tgt, NULL, mem, NULL, 0, NULL) : NULL;
  if (!y) return fail("encode / decode");
  const char *name[] = {"logits"};
  const lt_tensor *ts[] = {y};
  if (lt_st_save(out, 1, name, ts, 0, NULL, NULL) != LT_OK) return fail("saving the logits");
  lt_tensor_free(src), lt_tensor_free(tgt), lt_tensor_free(mem), lt_tensor_free(y);
  lt_transformer_free(m);
  return 0;
}

static int grads(const char *dir, const char *out, const char *src_text, const char *tgt_text, const char *lbl_text) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_tensor *src = tool_parse_ids(src_text), *tgt = tool_parse_ids(tgt_text), *lbl = tool_parse_ids(lbl_text);
  lt_tensor *mem = src && tgt && lbl ? lt_transformer_encode(m, src, NULL, NULL) : NULL;
  lt_tensor *loss = mem ? lt_transformer_decode_loss(m, tgt, NULL, mem, NULL, lbl, NULL, 0, NULL) : NULL;
  if (!loss || lt_backward(loss, NULL, false) != LT_OK) return fail("loss / backward");
  lt_params *P = lt_transformer_params(m);
  const int n = lt_params_count(P);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  const lt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  if (!names || !ts) return fail("memory");
  names[0] = "loss", ts[0] = loss;
  for (int i = 0; i < n; i++) {
    const lt_param *p = lt_params_at(P, i);
    if (!p->value->grad) return fail(p->name);
    names[i + 1] = p->name, ts[i + 1] = p->value->grad;
  }
  if (lt_st_save(out, n + 1, names, ts, 0, NULL, NULL) != LT_OK) return fail("saving");
  free(names), free(ts);
  lt_tensor_free(src), lt_tensor_free(tgt), lt_tensor_free(lbl), lt_tensor_free(mem), lt_tensor_free(loss);
  lt_transformer_free(m);
  return 0;
}

/* Greedy (k 0) or beam search (k beams) from dir's decoder_start_token_id. */
static int run(const char *dir, long long n, long long k, double alpha, long long eos, const char *src_text) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_hf_gen_ids ids;
  if (lt_hf_read_gen_ids(dir, &ids) != LT_OK) return fail("generation ids");
  lt_tensor *src = tool_parse_ids(src_text);
  if (!src) return fail("the source");
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = n, o.eos_id = eos;
  if (k > 0) o.strategy = LT_GENERATE_BEAM, o.beam_width = k, o.length_penalty = alpha;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  tf.bos_id = ids.decoder_start >= 0 ? ids.decoder_start : 0;
  lt_generate_result r = {0};
  if (lt_transformer_generate(m, src, NULL, NULL, &o, &tf, &r) != LT_OK) return fail("generate");
  double len, score;
  if (lt_get(r.lengths, (int64_t[]){0}, &len) != LT_OK || lt_get(r.scores, (int64_t[]){0}, &score) != LT_OK)
    return fail("reading the result");
  for (int64_t i = 0; i < (int64_t)len; i++) {
    double v;
    if (lt_get(r.tokens, (int64_t[]){0, i}, &v) != LT_OK) return fail("reading a token");
    printf("%s%lld", i ? "," : "", (long long)v);
  }
  printf("\n");
  if (k > 0) printf("%.17g\n", score);
  lt_generate_result_free(&r);
  lt_tensor_free(src);
  lt_transformer_free(m);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "make") == 0) return make(argv[2], argv[3], strtoull(argv[4], NULL, 10));
  if (argc == 6 && strcmp(argv[1], "logits") == 0) return logits(argv[2], argv[3], argv[4], argv[5]);
  if (argc == 7 && strcmp(argv[1], "grads") == 0) return grads(argv[2], argv[3], argv[4], argv[5], argv[6]);
  if (argc == 5 && strcmp(argv[1], "greedy") == 0) return run(argv[2], strtoll(argv[3], NULL, 10), 0, 0, -1, argv[4]);
  if (argc == 8 && strcmp(argv[1], "beam") == 0)
    return run(argv[2], strtoll(argv[3], NULL, 10), strtoll(argv[4], NULL, 10), strtod(argv[5], NULL),
               strtoll(argv[6], NULL, 10), argv[7]);
  fprintf(stderr, "usage: t5_tool make relu|gated DIR SEED | logits DIR OUT SRC TGT | greedy DIR N SRC | "
          "beam DIR N K ALPHA EOS SRC | grads DIR OUT SRC TGT LBL\n");
  return 2;
}
