/*
 * tests/interop/onnx_tool.c: the C side of tests/reference/test_onnx_export.py,
 * which runs libtensor's ONNX files (export --format onnx) in onnxruntime
 * and compares them with libtensor's own outputs.
 *
 *   onnx_tool run SRC IN OUT   loads SRC (a Hugging Face directory, a
 *                              checkpoint or a run directory:
 *                              lt_tf_source_read) and runs the inputs of IN
 *                              (safetensors: input_ids [B, T]; encoder-only
 *                              also attention_mask and, optional,
 *                              token_type_ids) as one batch; writes OUT
 *                              (safetensors) with the outputs the ONNX graph
 *                              has, under its names: logits [B, T, V]
 *                              (decoder-only), last_hidden_state [B, T, C],
 *                              pooler_output [B, C] (with a pooler) and
 *                              logits [B, n_classes] (with a classifier)
 * Exit 0 on success, 1 with a message on stderr otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libtensor_transformer.h"

static int fail(const char *what) {
  fprintf(stderr, "onnx_tool: %s: %s\n", what, lt_last_error());
  return 1;
}

static lt_tensor *read_ids(const lt_st_file *f, const char *name) {
  int i = lt_st_find(f, name);
  return i < 0 ? NULL : lt_st_tensor(f, i, LT_DTYPE_I64);
}

static int run(const char *src, const char *in, const char *out) {
  char file[4200];
  lt_tf_config cfg;
  lt_tokenizer *tok = NULL;
  lt_ckpt_info *info = NULL;
  if (lt_tf_source_read(src, "ckpt", NULL, file, sizeof file, &cfg, &tok, &info) != LT_OK) return fail("the source");
  lt_tokenizer_free(tok);
  lt_ckpt_info_free(info);
  lt_generator *g = lt_generator_new(0);
  lt_transformer *m = g ? lt_transformer_new(&cfg, g) : NULL;
  lt_generator_free(g);
  if (!m || lt_tf_source_load_weights(file, m, NULL) != LT_OK) return fail("loading");
  lt_st_file *f = lt_st_open(in);
  if (!f) return fail("the inputs");
  lt_tensor *ids = read_ids(f, "input_ids"), *mask = read_ids(f, "attention_mask");
  lt_tensor *types = read_ids(f, "token_type_ids");
  lt_st_close(f);
  if (!ids) return fail("input_ids");
  lt_set_grad_enabled(false);
  const char *names[3];
  lt_tensor *ts[3] = {NULL, NULL, NULL};
  int n = 0;
  if (cfg.arch == LT_TF_DECODER_ONLY) {
    names[n] = "logits";
    if (!(ts[n++] = lt_transformer_decode(m, ids, NULL, NULL, NULL, 0, NULL))) return fail("decode");
  } else {
    lt_tensor *pad = mask ? lt_eq_scalar(mask, 0.0) : NULL; /* true = padding */
    if (!mask || !pad) return fail("attention_mask");
    names[n] = "last_hidden_state";
    if (!(ts[n++] = lt_transformer_encode_typed(m, ids, types, pad, NULL))) return fail("encode");
    if (cfg.pooler) {
      names[n] = "pooler_output";
      if (!(ts[n++] = lt_transformer_pool(m, ts[0]))) return fail("pool");
    }
    if (cfg.n_classes > 0) {
      names[n] = "logits";
      if (!(ts[n++] = lt_transformer_classify_typed(m, ids, types, pad, NULL))) return fail("classify");
    }
    lt_tensor_free(pad);
  }
  if (lt_st_save(out, n, names, (const lt_tensor *const *)ts, 0, NULL, NULL) != LT_OK) return fail("saving");
  for (int i = 0; i < n; i++) lt_tensor_free(ts[i]);
  lt_tensor_free(ids);
  lt_tensor_free(mask);
  lt_tensor_free(types);
  lt_transformer_free(m);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "run") == 0) return run(argv[2], argv[3], argv[4]);
  fprintf(stderr, "usage: onnx_tool run SRC IN OUT\n");
  return 2;
}
