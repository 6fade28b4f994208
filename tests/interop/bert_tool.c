/*
 * tests/interop/bert_tool.c: the C side of tests/reference/test_hf_bert.py,
 * which judges libtensor's BERT (models/transformer/hf_bert.c) against
 * Hugging Face transformers and sentence-transformers.
 *
 *   bert_tool make DIR SEED N_CLASSES [VOCAB MAX_LEN]
 *                                       a tiny random BERT (every parameter
 *                                       random, norms and biases too),
 *                                       exported to DIR (lt_hf_export):
 *                                       BertModel, or with N_CLASSES > 0
 *                                       BertForSequenceClassification
 *                                       (vocabulary 47 and 20 positions
 *                                       unless given)
 *   bert_tool run DIR IN OUT            loads DIR (lt_hf_load) and runs the
 *                                       inputs of IN (safetensors:
 *                                       input_ids and attention_mask [N, S],
 *                                       token_type_ids optional, integers)
 *                                       in batches of 32 rows, each cut to
 *                                       its longest row; writes OUT
 *                                       (safetensors): last_hidden_state
 *                                       [N, S, C] (zeros past a batch's
 *                                       cut), pooler_output [N, C],
 *                                       embeddings [N, C] (mean pooling, L2
 *                                       normalised: lt_transformer_embed)
 *                                       and, with a classifier, logits
 * Exit 0 on success, 1 with a message on stderr otherwise (the message
 * names what the loader refused).
 */
#include "tensor/quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libtensor_transformer.h"
#include "tests/interop/tool_export.h"

#define BATCH 32

static int fail(const char *what) {
  fprintf(stderr, "bert_tool: %s: %s\n", what, lt_last_error());
  return 1;
}

static int make(const char *dir, uint64_t seed, int64_t n_classes, int64_t vocab, int64_t max_len) {
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  c.vocab_size = vocab, c.d_model = 24, c.n_heads = 4, c.n_kv_heads = 4, c.n_enc_layers = 2, c.d_ff = 40;
  c.max_len = max_len, c.dropout = 0.0, c.pad_id = 0, c.n_classes = n_classes, c.norm_eps = 1e-12;
  c.type_vocab_size = 3, c.embed_norm = true, c.pooler = true;
  return tool_export_random("bert_tool", &c, dir, seed);
}

/* Tensor name of f as a new i64 tensor, or NULL (optional and absent too). */
static lt_tensor *read_ids(const lt_st_file *f, const char *name, bool required) {
  int i = lt_st_find(f, name);
  if (i < 0) {
    if (required) lt_error_set(LT_ERR_INVALID, "the inputs lack '%s'", name);
    return NULL;
  }
  return lt_st_tensor(f, i, LT_DTYPE_I64);
}

/* weights: NULL (f32) or a weight format name for lt_params_quantize. */
static int run(const char *dir, const char *in, const char *out, const char *weights) {
  lt_transformer *m = lt_hf_load(dir, 0);
  if (!m) return fail("loading");
  lt_qformat wf = LT_QFORMAT_F32;
  if (weights && (lt_qformat_parse(weights, &wf) != LT_OK || lt_params_quantize(lt_transformer_params(m), wf, NULL, NULL) != LT_OK))
    return fail("the weight format");
  const lt_tf_config *c = lt_transformer_config(m);
  lt_st_file *f = lt_st_open(in);
  if (!f) return fail("the inputs");
  lt_tensor *ids = read_ids(f, "input_ids", true), *mask = ids ? read_ids(f, "attention_mask", true) : NULL;
  lt_tensor *types = mask ? read_ids(f, "token_type_ids", false) : NULL;
  if (!ids || !mask) return fail("the inputs");
  lt_st_close(f);
  const int64_t N = ids->shape[0], S = ids->shape[1], C = c->d_model;
  const int64_t *id = ids->data, *mk = mask->data; /* fresh tensors: contiguous */
  lt_tensor *hidden = lt_zeros(LT_DTYPE_F32, 3, (int64_t[]){N, S, C});
  lt_tensor *pooled = lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){N, C});
  lt_tensor *emb = lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){N, C});
  lt_tensor *logits = c->n_classes > 0 ? lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){N, c->n_classes}) : NULL;
  if (!hidden || !pooled || !emb || (c->n_classes > 0 && !logits)) return fail("out of memory");
  lt_set_grad_enabled(false);
  for (int64_t b0 = 0; b0 < N; b0 += BATCH) {
    const int64_t B = N - b0 < BATCH ? N - b0 : BATCH;
    int64_t L = 1;
    for (int64_t r = b0; r < b0 + B; r++)
      for (int64_t s = 0; s < S; s++)
        if (mk[r * S + s] && s + 1 > L) L = s + 1;
    int64_t *bi = malloc(sizeof *bi * (size_t)(B * L));
    bool *bp = malloc(sizeof *bp * (size_t)(B * L));
    for (int64_t r = 0; r < B; r++)
      for (int64_t s = 0; s < L; s++) bi[r * L + s] = id[(b0 + r) * S + s], bp[r * L + s] = mk[(b0 + r) * S + s] == 0;
    lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, bi);
    lt_tensor *pad = lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){B, L}, bp);
    free(bi);
    free(bp);
    lt_tensor *tt = NULL;
    if (types) {
      lt_tensor *rows = lt_narrow(types, 0, b0, B);
      tt = rows ? lt_narrow(rows, 1, 0, L) : NULL;
      lt_tensor_free(rows);
    }
    if (!x || !pad || (types && !tt)) return fail("a batch");
    lt_tensor *h = lt_transformer_encode_typed(m, x, tt, pad, NULL); /* [B, L, C] */
    if (!h) return fail("encode");
    lt_tensor *po = lt_transformer_pool(m, h);
    lt_tensor *e = lt_transformer_embed(m, x, tt, pad, true, NULL);
    lt_tensor *lg = logits ? lt_transformer_classify_typed(m, x, tt, pad, NULL) : NULL;
    if (!po || !e || (logits && !lg)) return fail("pool / embed / classify");
    /* copy into the outputs' rows */
    lt_tensor *hr = lt_narrow(hidden, 0, b0, B), *hs = hr ? lt_narrow(hr, 1, 0, L) : NULL;
    lt_tensor *pr = lt_narrow(pooled, 0, b0, B), *er = lt_narrow(emb, 0, b0, B);
    lt_tensor *lr = logits ? lt_narrow(logits, 0, b0, B) : NULL;
    if (!hs || !pr || !er || lt_copy_(hs, h) || lt_copy_(pr, po) || lt_copy_(er, e) || (lr && lt_copy_(lr, lg)))
      return fail("copying the outputs");
    lt_tensor *tmp[] = {x, pad, tt, h, po, e, lg, hr, hs, pr, er, lr};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) lt_tensor_free(tmp[i]);
  }
  const char *names[] = {"last_hidden_state", "pooler_output", "embeddings", "logits"};
  const lt_tensor *ts[] = {hidden, pooled, emb, logits};
  if (lt_st_save(out, logits ? 4 : 3, names, ts, 0, NULL, NULL) != LT_OK) return fail("saving the outputs");
  lt_tensor *tmp[] = {ids, mask, types, hidden, pooled, emb, logits};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) lt_tensor_free(tmp[i]);
  lt_transformer_free(m);
  return 0;
}

int main(int argc, char **argv) {
  if ((argc == 5 || argc == 7) && strcmp(argv[1], "make") == 0)
    return make(argv[2], strtoull(argv[3], NULL, 10), strtoll(argv[4], NULL, 10),
                argc == 7 ? strtoll(argv[5], NULL, 10) : 47, argc == 7 ? strtoll(argv[6], NULL, 10) : 20);
  if ((argc == 5 || argc == 6) && strcmp(argv[1], "run") == 0) return run(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : NULL);
  fprintf(stderr, "usage: bert_tool make DIR SEED N_CLASSES [VOCAB MAX_LEN] | run DIR IN OUT [f32|bf16|q8_0|q4_0]\n");
  return 2;
}
