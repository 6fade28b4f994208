/*
 * tests/test_bert.c: the Transformer's BERT extras (token types, embed_norm,
 * pooler, encoder-only without a classifier, lt_transformer_embed) and
 * BERT's Hugging Face layout (models/transformer/hf_bert.c): hostile
 * configuration values refused naming the field (lt_tf_config, checkpoint
 * attributes, config.json), sizes known before building, export then import
 * bit-identical (BertModel and BertForSequenceClassification, names with or
 * without "bert."), sentence embeddings' contract (unit norm, padding
 * ignored), gradients reaching every new parameter.
 * tests/fixtures/hf_bert_tiny (written by transformers itself) loads with
 * its outputs within 1e-4, in every build;
 * tests/reference/test_hf_bert.py checks the same layout against
 * transformers and all-MiniLM-L6-v2 against sentence-transformers.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libtensor_transformer.h"
#include "test_util.h"
#include "util_tfckpt.h"
#include "util_fixtures.h"

static char tmp[] = "/tmp/lt_bert_XXXXXX";

static void tmp_make(void) {
  strcpy(tmp, "/tmp/lt_bert_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
}
static void tmp_remove(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}

static lt_tf_config bert_config(int64_t n_classes) {
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  c.vocab_size = 19, c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.n_enc_layers = 2, c.d_ff = 12, c.max_len = 10;
  c.dropout = 0.0, c.pad_id = 0, c.n_classes = n_classes, c.norm_eps = 1e-12;
  c.type_vocab_size = 2, c.embed_norm = true, c.pooler = true;
  return c;
}

/* Random parameters (norms around 1), so that a swapped one shows. */
static lt_transformer *make(const lt_tf_config *c, uint64_t seed) { return LT_NNP(tfckpt_random_model(c, seed)); }

/* A batch [2, 6]: row 1 has 2 padding positions. */
typedef struct batch {
  lt_tensor *ids, *types, *pad;
} batch;
static batch make_batch(void) {
  const int64_t ids[] = {2, 7, 18, 4, 9, 3, 5, 11, 1, 6, 0, 0}, types[] = {0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0};
  const bool pad[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
  batch b = {LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){2, 6}, ids)),
             LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){2, 6}, types)),
             LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){2, 6}, pad))};
  return b;
}
static void free_batch(batch *b) { LT_FREE_ALL(b->ids, b->types, b->pad); }

static void assert_bit_identical(const lt_tensor *a, const lt_tensor *b, const char *what) {
  ck_assert_int_eq(a->numel, b->numel);
  ck_assert_msg(memcmp(a->data, b->data, (size_t)a->numel * lt_dtype_size(a->dtype)) == 0, "%s differ", what);
}

/* ---- configuration ----------------------------------------------------------- */

START_TEST(config_fields) {
  lt_tf_config c = bert_config(0);
  LT_OK_OR_FAIL(lt_tf_config_validate(&c)); /* n_classes 0: an encoder without a classifier */
  c.type_vocab_size = -1;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "type_vocab_size -1");
  c.type_vocab_size = (int64_t)1 << 31;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "type_vocab_size 2147483648");
  c = lt_tf_config_default(LT_TF_DECODER_ONLY), c.vocab_size = 10, c.type_vocab_size = 2;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "token types are an encoder-only input");
  c.type_vocab_size = 0, c.pooler = true;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "pooler");
  c.pooler = false, c.embed_norm = true; /* any architecture may normalise its embeddings */
  LT_OK_OR_FAIL(lt_tf_config_validate(&c));
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "embed_norm");
  c = bert_config(0), c.n_classes = -1;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "n_classes -1");
  /* the most token types: sized before anything is built */
  c = bert_config(0), c.type_vocab_size = LT_TF_HI_type_vocab_size;
  int64_t big;
  LT_OK_OR_FAIL(lt_tf_config_size(&c, &big, NULL));
  ck_assert_int_gt(big, (int64_t)LT_TF_HI_type_vocab_size * 8);
  /* the size known before building is the built model's, with every extra on or off */
  for (int k = 0; k < 16; k++) {
    c = bert_config(k & 1 ? 3 : 0);
    c.type_vocab_size = k & 2 ? 3 : 0, c.embed_norm = k & 4, c.pooler = k & 8;
    lt_transformer *m = make(&c, 1);
    int64_t n;
    LT_OK_OR_FAIL(lt_tf_config_size(&c, &n, NULL));
    ck_assert_int_eq(n, lt_params_numel(lt_transformer_params(m), false));
    lt_transformer_free(m);
  }
}
END_TEST

/* key of src into dst, of its own kind (int, double or string here). */
static lt_status copy_entry(lt_ckpt_meta *dst, const lt_ckpt_meta *src, const char *key) {
  int64_t i;
  double d;
  const char *s;
  switch (lt_ckpt_meta_kind(src, key)) {
    case LT_CKPT_INT: return lt_ckpt_meta_get_int(src, key, &i) ? lt_last_status() : lt_ckpt_meta_set_int(dst, key, i);
    case LT_CKPT_DOUBLE:
      return lt_ckpt_meta_get_double(src, key, &d) ? lt_last_status() : lt_ckpt_meta_set_double(dst, key, d);
    case LT_CKPT_STRING:
      return lt_ckpt_meta_get_string(src, key, &s) ? lt_last_status() : lt_ckpt_meta_set_string(dst, key, s);
    default: return lt_error_set(LT_ERR_INVALID, "copy_entry: '%s' is of another kind", key);
  }
}

START_TEST(config_in_checkpoints) {
  lt_tf_config c = bert_config(3), d;
  c.type_vocab_size = 5;
  lt_ckpt_meta *meta = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
  memset(&d, 0xab, sizeof d);
  LT_OK_OR_FAIL(lt_tf_config_from_meta(meta, &d));
  ck_assert(d.type_vocab_size == 5 && d.embed_norm && d.pooler && d.n_classes == 3);
  /* hostile values, each refused naming the key; d untouched */
  lt_tf_config before = d;
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(meta, "type_vocab_size", -3));
  LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_INVALID, "type_vocab_size -3");
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(meta, "type_vocab_size", INT64_MAX));
  LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_INVALID, "type_vocab_size");
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(meta, "type_vocab_size", "two"));
  LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_FORMAT, "'type_vocab_size' is string, expected int");
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(meta, "type_vocab_size", 2));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(meta, "pooler", 2));
  LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_FORMAT, "'pooler' is 2, must be 0 or 1");
  LT_OK_OR_FAIL(lt_ckpt_meta_set_double(meta, "embed_norm", 1.0));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(meta, "pooler", 1));
  LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_FORMAT, "'embed_norm' is double, expected int");
  ck_assert(memcmp(&before, &d, sizeof d) == 0);
  lt_ckpt_meta_free(meta);
  /* a checkpoint written before the fields existed: they read as 0 / false */
  c = lt_tf_config_default(LT_TF_DECODER_ONLY), c.vocab_size = 10;
  meta = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
  lt_ckpt_meta *old = lt_ckpt_meta_new();
  for (int i = 0; i < lt_ckpt_meta_count(meta); i++) {
    const char *k = lt_ckpt_meta_key(meta, i);
    if (strcmp(k, "type_vocab_size") && strcmp(k, "embed_norm") && strcmp(k, "pooler"))
      LT_OK_OR_FAIL(copy_entry(old, meta, k));
  }
  ck_assert_int_eq(lt_ckpt_meta_count(old), lt_ckpt_meta_count(meta) - 3);
  memset(&d, 0xab, sizeof d);
  LT_OK_OR_FAIL(lt_tf_config_from_meta(old, &d));
  ck_assert(d.type_vocab_size == 0 && !d.embed_norm && !d.pooler && d.vocab_size == 10);
  lt_ckpt_meta_free(meta);
  lt_ckpt_meta_free(old);
}
END_TEST

/* A checkpoint whose attributes claim more token types than its tensors
 * hold is refused by the size check, before a model is built. */
START_TEST(crafted_checkpoint) {
  lt_tf_config c = bert_config(0);
  lt_transformer *m = make(&c, 2);
  lt_ckpt_meta *meta = lt_ckpt_meta_new();
  c.type_vocab_size = LT_TF_HI_type_vocab_size; /* valid, but 65536 x 8 elements the file does not have */
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
  const char *path = lt_test_join(tmp, "bert.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_params(path, lt_transformer_params(m), meta, NULL));
  lt_params *empty = lt_params_new();
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true;
  lt_ckpt_info *info = NULL;
  LT_OK_OR_FAIL(lt_ckpt_load_params(path, empty, &lo, &info));
  lt_tf_config d;
  LT_OK_OR_FAIL(lt_tf_config_from_meta(info->config, &d));
  int64_t n;
  size_t bytes;
  LT_OK_OR_FAIL(lt_tf_config_size(&d, &n, &bytes));
  LT_EXPECT_ERR(lt_ckpt_check_model_size(info, path, n, bytes, 0), LT_ERR_FORMAT, NULL);
  lt_ckpt_info_free(info);
  lt_params_free(empty);
  lt_ckpt_meta_free(meta);
  lt_transformer_free(m);
}
END_TEST

/* ---- forward ----------------------------------------------------------------- */

START_TEST(embeddings_and_pooler) {
  lt_tf_config c = bert_config(3);
  lt_transformer *m = make(&c, 3);
  batch b = make_batch();
  lt_set_grad_enabled(false);
  /* types NULL is type 0 everywhere */
  lt_tensor *zeros = LT_NN(lt_zeros(LT_DTYPE_I64, 2, (int64_t[]){2, 6}));
  lt_tensor *h0 = LT_NN(lt_transformer_encode(m, b.ids, b.pad, NULL));
  lt_tensor *h1 = LT_NN(lt_transformer_encode_typed(m, b.ids, zeros, b.pad, NULL));
  assert_bit_identical(h0, h1, "types NULL and zeros");
  lt_tensor *h = LT_NN(lt_transformer_encode_typed(m, b.ids, b.types, b.pad, NULL));
  /* the pooler: tanh(dense(h[:, 0])) in (-1, 1); classify = classifier(pooler) */
  lt_tensor *p = LT_NN(lt_transformer_pool(m, h0));
  LT_ASSERT_SHAPE(p, 2, 8);
  lt_tensor *logits = LT_NN(lt_transformer_classify(m, b.ids, b.pad, NULL));
  const lt_tensor *W = lt_params_find(lt_transformer_params(m), "classifier.weight");
  const lt_tensor *bias = lt_params_find(lt_transformer_params(m), "classifier.bias");
  lt_tensor *want = LT_NN(lt_linear(p, W, bias));
  assert_bit_identical(logits, want, "classify and classifier(pool)");
  /* with token types: classifier(pool(encode_typed)) */
  lt_tensor *lt_ = LT_NN(lt_transformer_classify_typed(m, b.ids, b.types, b.pad, NULL));
  lt_tensor *pt = LT_NN(lt_transformer_pool(m, h)), *wt = LT_NN(lt_linear(pt, W, bias));
  assert_bit_identical(lt_, wt, "classify_typed and classifier(pool(encode_typed))");
  char text[400];
  lt_tf_config_describe(&c, 0, text, sizeof text);
  ck_assert_msg(strstr(text, "2 token types, embedding norm, pooler"), "%s", text);
  /* sentence embeddings: unit norm, padding ignored */
  lt_tensor *e = LT_NN(lt_transformer_embed(m, b.ids, b.types, b.pad, true, NULL));
  LT_ASSERT_SHAPE(e, 2, 8);
  const float *E = e->data;
  for (int r = 0; r < 2; r++) {
    double ss = 0;
    for (int k = 0; k < 8; k++) ss += (double)E[r * 8 + k] * E[r * 8 + k];
    ck_assert_msg(fabs(sqrt(ss) - 1.0) < 1e-6, "row %d norm %g", r, sqrt(ss));
  }
  lt_tensor *ids1 = LT_NN(lt_narrow(b.ids, 0, 1, 1)), *ids1s = LT_NN(lt_narrow(ids1, 1, 0, 4));
  lt_tensor *t1 = LT_NN(lt_narrow(b.types, 0, 1, 1)), *t1s = LT_NN(lt_narrow(t1, 1, 0, 4));
  lt_tensor *e1 = LT_NN(lt_transformer_embed(m, ids1s, t1s, NULL, true, NULL));
  for (int k = 0; k < 8; k++) ck_assert_msg(fabs(E[8 + k] - ((float *)e1->data)[k]) < 1e-5, "padding changed the embedding");
  lt_tensor *raw = LT_NN(lt_transformer_embed(m, b.ids, b.types, b.pad, false, NULL));
  LT_ASSERT_SHAPE(raw, 2, 8);
  /* errors */
  LT_EXPECT_NULL_ERR(lt_transformer_encode_typed(m, b.ids, b.pad, b.pad, NULL), LT_ERR_SHAPE, "types");
  lt_tensor *short_types = LT_NN(lt_narrow(b.types, 1, 0, 3));
  LT_EXPECT_NULL_ERR(lt_transformer_encode_typed(m, b.ids, short_types, b.pad, NULL), LT_ERR_SHAPE, "types");
  lt_tensor *bad_types = LT_NN(lt_full(LT_DTYPE_I64, 2, (int64_t[]){2, 6}, 2)); /* type_vocab_size 2 */
  ck_assert_ptr_null(lt_transformer_encode_typed(m, b.ids, bad_types, b.pad, NULL));
  lt_tf_config c0 = bert_config(0);
  c0.type_vocab_size = 0, c0.pooler = false;
  lt_transformer *plain = make(&c0, 4);
  LT_EXPECT_NULL_ERR(lt_transformer_encode_typed(plain, b.ids, b.types, b.pad, NULL), LT_ERR_INVALID, "type_vocab_size 0");
  LT_EXPECT_NULL_ERR(lt_transformer_pool(plain, h0), LT_ERR_INVALID, "no pooler");
  LT_EXPECT_NULL_ERR(lt_transformer_classify(plain, b.ids, b.pad, NULL), LT_ERR_INVALID, "no classifier");
  lt_tensor *e2 = LT_NN(lt_transformer_embed(plain, b.ids, NULL, b.pad, true, NULL));
  lt_set_grad_enabled(true);
  LT_FREE_ALL(lt_, pt, wt);
  LT_FREE_ALL(zeros, h0, h1, h, p, logits, want, e, ids1, ids1s, t1, t1s, e1, raw, short_types, bad_types, e2);
  lt_transformer_free(plain);
  lt_transformer_free(m);
  free_batch(&b);
}
END_TEST

/* Gradients reach the new parameters (type_embed, embed_norm, pooler)
 * through classify and embed. */
START_TEST(gradients) {
  lt_tf_config c = bert_config(3);
  lt_transformer *m = make(&c, 5);
  batch b = make_batch();
  lt_params *P = lt_transformer_params(m);
  lt_tensor *logits = LT_NN(lt_transformer_classify(m, b.ids, b.pad, NULL));
  lt_tensor *e = LT_NN(lt_transformer_embed(m, b.ids, b.types, b.pad, true, NULL));
  lt_tensor *l1 = LT_NN(lt_sum(logits, 0, NULL, false)), *sq = LT_NN(lt_mul(e, e));
  lt_tensor *w = LT_NN(lt_narrow(sq, 1, 0, 3)), *l2 = LT_NN(lt_sum(w, 0, NULL, false)), *loss = LT_NN(lt_add(l1, l2));
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  const char *names[] = {"type_embed.weight", "embed_norm.weight", "embed_norm.bias", "pooler.weight", "pooler.bias",
                         "encoder.layers.0.self_attn.q_proj.weight"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const lt_tensor *v = LT_NN(lt_params_find(P, names[i]));
    ck_assert_msg(v->grad, "%s has no gradient", names[i]);
    double s = 0;
    for (int64_t k = 0; k < v->grad->numel; k++) s += fabs(((float *)v->grad->data)[k]);
    ck_assert_msg(s > 0 && isfinite(s), "%s: gradient sum %g", names[i], s);
  }
  LT_FREE_ALL(logits, e, l1, sq, w, l2, loss);
  lt_transformer_free(m);
  free_batch(&b);
}
END_TEST

/* ---- Hugging Face layout ----------------------------------------------------- */

static void round_trip(int64_t n_classes) {
  lt_tf_config c = bert_config(n_classes);
  lt_hf_family fam;
  LT_OK_OR_FAIL(lt_hf_family_of(&c, &fam));
  ck_assert_int_eq(fam, LT_HF_BERT);
  lt_transformer *m = make(&c, 6);
  const char *dir = lt_test_join(tmp, n_classes ? "bert-cls" : "bert");
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  lt_tf_config back;
  LT_OK_OR_FAIL(lt_hf_read_config(dir, &back, &fam));
  ck_assert(fam == LT_HF_BERT && back.n_classes == n_classes && back.type_vocab_size == 2 && back.embed_norm &&
            back.pooler && back.norm_eps == 1e-12 && back.act == LT_ACT_GELU && !back.pre_norm);
  lt_transformer *m2 = lt_hf_load(dir, 0);
  ck_assert_msg(m2 != NULL, "%s", lt_last_error());
  lt_params *P = lt_transformer_params(m), *P2 = lt_transformer_params(m2);
  ck_assert_int_eq(lt_params_count(P2), lt_params_count(P));
  for (int i = 0; i < lt_params_count(P); i++)
    assert_bit_identical(lt_params_at(P, i)->value, LT_NN(lt_params_find(P2, lt_params_at(P, i)->name)),
                         lt_params_at(P, i)->name);
  char path[700];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  lt_st_file *f = LT_NNP(lt_st_open(path));
  const char *q = n_classes ? "bert.encoder.layer.1.attention.self.query.weight" : "encoder.layer.1.attention.self.query.weight";
  ck_assert_int_ge(lt_st_find(f, q), 0);
  ck_assert_int_eq(lt_st_find(f, "classifier.weight") >= 0, n_classes > 0);
  /* the same tensors under the other prefix, plus position_ids, load too */
  const int n = lt_st_count(f);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  char(*buf)[300] = calloc((size_t)n, sizeof *buf);
  lt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  for (int i = 0; i < n; i++) {
    const char *nm = lt_st_info(f, i)->name;
    if (strncmp(nm, "classifier.", 11) == 0) snprintf(buf[i], sizeof buf[i], "%s", nm);
    else if (strncmp(nm, "bert.", 5) == 0) snprintf(buf[i], sizeof buf[i], "%s", nm + 5);
    else snprintf(buf[i], sizeof buf[i], "bert.%s", nm);
    names[i] = buf[i], ts[i] = LT_NN(lt_st_tensor(f, i, LT_DTYPE_F32));
  }
  lt_st_close(f);
  const int64_t pos_ids[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  names[n] = "embeddings.position_ids", ts[n] = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, 10}, pos_ids));
  const char *k[] = {"format"}, *v[] = {"pt"};
  LT_OK_OR_FAIL(lt_st_save(path, n + 1, names, (const lt_tensor *const *)ts, 1, k, v));
  lt_transformer *m3 = lt_hf_load(dir, 0);
  ck_assert_msg(m3 != NULL, "%s", lt_last_error());
  batch b = make_batch();
  lt_set_grad_enabled(false);
  lt_tensor *h = LT_NN(lt_transformer_encode_typed(m, b.ids, b.types, b.pad, NULL));
  lt_tensor *h3 = LT_NN(lt_transformer_encode_typed(m3, b.ids, b.types, b.pad, NULL));
  lt_set_grad_enabled(true);
  assert_bit_identical(h, h3, "hidden states after export and import");
  printf("hf bert (%s): %d tensors bit-identical after export and import, either prefix\n",
         n_classes ? "BertForSequenceClassification" : "BertModel", lt_params_count(P));
  for (int i = 0; i <= n; i++) lt_tensor_free(ts[i]);
  free(ts), free(names), free(buf);
  LT_FREE_ALL(h, h3);
  free_batch(&b);
  lt_transformer_free(m);
  lt_transformer_free(m2);
  lt_transformer_free(m3);
}

START_TEST(hf_round_trip) {
  round_trip(0);
  round_trip(3);
}
END_TEST

#define BERT_KEYS                                                                                             \
  "\"model_type\": \"bert\", \"vocab_size\": 19, \"hidden_size\": 8, \"num_hidden_layers\": 2, "             \
  "\"num_attention_heads\": 2, \"intermediate_size\": 12, \"max_position_embeddings\": 10"

START_TEST(hf_refusals) {
  lt_tf_config c = bert_config(0);
  c.pre_norm = true;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "pre_norm false");
  c = bert_config(0), c.embed_norm = false;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "embed_norm");
  c = bert_config(0), c.pooler = false;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "pooler");
  c = bert_config(0), c.type_vocab_size = 0;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "type_vocab_size");
  c = bert_config(0), c.pos = LT_TF_POS_SINUSOIDAL;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "pos learned");
  c = bert_config(0), c.n_kv_heads = 1;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "n_kv_heads");
  /* config.json values libtensor cannot run, or hostile ones: refused naming the key */
  lt_transformer *m = make(&c, 7);
  c = bert_config(0);
  lt_transformer_free(m);
  m = make(&c, 7);
  const char *dir = lt_test_join(tmp, "bert");
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  char cpath[700];
  snprintf(cpath, sizeof cpath, "%s/config.json", dir);
  static const struct {
    const char *extra;
    lt_status st;
    const char *msg;
  } bad[] = {
      {"\"position_embedding_type\": \"relative_key\"", LT_ERR_INVALID, "'position_embedding_type' \"relative_key\""},
      {"\"is_decoder\": true", LT_ERR_INVALID, "'is_decoder' is true"},
      {"\"add_cross_attention\": true", LT_ERR_INVALID, "'add_cross_attention' is true"},
      {"\"hidden_act\": \"gelu_fast\"", LT_ERR_INVALID, "'hidden_act' \"gelu_fast\""},
      {"\"architectures\": [\"BertForMaskedLM\"]", LT_ERR_INVALID, "'architectures' \"BertForMaskedLM\""},
      {"\"architectures\": \"BertModel\"", LT_ERR_FORMAT, "'architectures' must be a list"},
      {"\"type_vocab_size\": -2", LT_ERR_INVALID, "'type_vocab_size' -2"},
      {"\"type_vocab_size\": 0", LT_ERR_INVALID, "type_vocab_size >= 1"},
      {"\"type_vocab_size\": 9223372036854775807", LT_ERR_INVALID, "type_vocab_size"},
      {"\"type_vocab_size\": 2.5", LT_ERR_FORMAT, "'type_vocab_size' is not an integer"},
      {"\"layer_norm_eps\": -1", LT_ERR_INVALID, "norm_eps"},
      {"\"hidden_dropout_prob\": 7", LT_ERR_INVALID, "dropout"},
      {"\"pad_token_id\": 19", LT_ERR_INVALID, "pad_id"},
      {"\"architectures\": [\"BertForSequenceClassification\"], \"num_labels\": -1", LT_ERR_INVALID, "-1 labels"},
      {"\"is_decoder\": 1", LT_ERR_FORMAT, "'is_decoder' is not true or false"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char text[1024];
    snprintf(text, sizeof text, "{" BERT_KEYS ", %s}", bad[i].extra);
    lt_test_write_text(cpath, text);
    LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), bad[i].st, bad[i].msg);
  }
  lt_test_write_text(cpath, "{\"model_type\": \"bert\", \"vocab_size\": 19}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, "'hidden_size' is missing");
  lt_test_write_text(cpath, "{\"model_type\": \"bert\", \"vocab_size\": 19, \"hidden_size\": 4611686018427387904, "
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 1, \"intermediate_size\": 12, "
                    "\"max_position_embeddings\": 10}");
  /* refused before anything is allocated, naming the value (hidden_size against the range table) */
  ck_assert_ptr_null(lt_hf_load(dir, 0));
  ck_assert_msg(strstr(lt_last_error(), "4611686018427387904"), "%s", lt_last_error());
  lt_test_write_text(cpath, "{\"model_type\": \"bert\", \"vocab_size\": 19, \"hidden_size\": 8, \"num_hidden_layers\": 1000, "
                    "\"num_attention_heads\": 2, \"intermediate_size\": 12, \"max_position_embeddings\": 10}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, "the configuration describes");
  lt_test_write_text(cpath, "{" BERT_KEYS ", \"type_vocab_size\": 1}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_SHAPE, "token_type_embeddings");
  lt_test_write_text(cpath, "{" BERT_KEYS ", \"architectures\": [\"BertForSequenceClassification\"], \"num_labels\": 2}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, "the configuration describes"); /* no classifier in the file */
  lt_test_write_text(cpath, "{" BERT_KEYS "}");
  lt_transformer *ok = lt_hf_load(dir, 0);
  ck_assert_msg(ok != NULL, "%s", lt_last_error());
  lt_transformer_free(ok);
  lt_transformer_free(m);
}
END_TEST

/* The largest |a - b| over two f32 tensors of the same shape. */
static double max_diff(const lt_tensor *a, const lt_tensor *b) {
  ck_assert_int_eq(a->numel, b->numel);
  lt_tensor *ca = LT_NN(lt_contiguous(a)), *cb = LT_NN(lt_contiguous(b));
  double m = 0;
  for (int64_t i = 0; i < a->numel; i++) {
    double d = fabs((double)((float *)ca->data)[i] - ((float *)cb->data)[i]);
    if (!(d <= m)) m = d; /* NaN wins */
  }
  LT_FREE_ALL(ca, cb);
  return m;
}

/* tests/fixtures/hf_bert_tiny: a BertForSequenceClassification written by
 * transformers' save_pretrained (tests/fixtures/make_hf_bert_fixture.py),
 * with transformers' outputs; libtensor's within 1e-4 in f32. */
START_TEST(transformers_fixture) {
  char dir[1024], want_path[1024];
  lt_fixture_path("hf_bert_tiny", dir, sizeof dir);
  lt_fixture_path("hf_bert_tiny.expected.safetensors", want_path, sizeof want_path);
  lt_transformer *m = lt_hf_load(dir, 0);
  ck_assert_msg(m != NULL, "%s", lt_last_error());
  lt_st_file *f = LT_NNP(lt_st_open(want_path));
  lt_tensor *t[6];
  const char *names[6] = {"input_ids", "token_type_ids", "attention_mask", "last_hidden_state", "pooler_output",
                          "logits"};
  for (int i = 0; i < 6; i++) t[i] = LT_NN(lt_st_tensor(f, lt_st_find(f, names[i]), i < 3 ? LT_DTYPE_I64 : LT_DTYPE_F32));
  lt_st_close(f);
  lt_tensor *pad = LT_NN(lt_eq_scalar(t[2], 0.0));
  lt_set_grad_enabled(false);
  lt_tensor *h = LT_NN(lt_transformer_encode_typed(m, t[0], t[1], pad, NULL));
  lt_tensor *p = LT_NN(lt_transformer_pool(m, h));
  lt_tensor *y = LT_NN(lt_transformer_classify_typed(m, t[0], t[1], pad, NULL));
  lt_set_grad_enabled(true);
  const double dh = max_diff(h, t[3]), dp = max_diff(p, t[4]), dy = max_diff(y, t[5]);
  printf("hf_bert_tiny (transformers' save_pretrained): max |libtensor - transformers| hidden %.2e, pooler %.2e, "
         "logits %.2e\n", dh, dp, dy);
  ck_assert_msg(dh <= 1e-4 && dp <= 1e-4 && dy <= 1e-4, "hidden %g pooler %g logits %g", dh, dp, dy);
  for (int i = 0; i < 6; i++) lt_tensor_free(t[i]);
  LT_FREE_ALL(pad, h, p, y);
  lt_transformer_free(m);
}
END_TEST

/* Texts in, vectors out (lt_hf_embed_texts, the embed program's library
 * call), with the WordPiece tokenizer.json of the conformance suite
 * ([CLS] text [SEP], 1,500 ids): each row is lt_transformer_embed of that
 * text's ids alone, whatever the batch and its padding; a text over
 * max_seq_length keeps [CLS], its first tokens and [SEP]; sentence-
 * transformers' files are read, and what libtensor does not run is refused
 * naming the file and the key. */
START_TEST(sentence_embeddings) {
  lt_tf_config c = bert_config(0);
  c.vocab_size = 1500, c.max_len = 24;
  lt_transformer *m = make(&c, 21);
  lt_tokenizer *tok = LT_NNP(lt_tokenizer_load_hf(LT_TEST_DATA_DIR "/../tokenizers/fixtures/bert_uncased.json"));
  const char *texts[] = {"the quick brown fox", "", "jumps over the lazy dog and keeps running far away from here",
                         "a", "hello world"};
  const int64_t n = 5;
  const lt_hf_sentence_config sc = {.max_seq_length = 8, .normalize = true};
  lt_tensor *e = LT_NN(lt_hf_embed_texts(m, tok, &sc, n, texts, NULL, 2)); /* batches of 2, padded */
  LT_ASSERT_SHAPE(e, n, c.d_model);
  lt_set_grad_enabled(false);
  double worst = 0;
  int cut = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t *ids, k;
    LT_OK_OR_FAIL(lt_tokenizer_encode_ex(tok, texts[i], strlen(texts[i]), LT_ENCODE_ADD_SPECIAL, &ids, NULL, &k));
    if (k > sc.max_seq_length) { /* [CLS] + the first 6 tokens + [SEP] */
      ids[sc.max_seq_length - 1] = ids[k - 1], k = sc.max_seq_length;
      cut++;
    }
    lt_tensor *x = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, k}, ids));
    lt_tensor *want = LT_NN(lt_transformer_embed(m, x, NULL, NULL, true, NULL));
    lt_tensor *row = LT_NN(lt_narrow(e, 0, i, 1));
    const double d = max_diff(row, want);
    worst = d > worst ? d : worst;
    free(ids);
    LT_FREE_ALL(x, want, row);
  }
  lt_set_grad_enabled(true);
  ck_assert_msg(worst < 1e-6, "batched rows vs each text alone: %g", worst);
  ck_assert_msg(cut >= 1 && cut <= 3, "%d of 5 texts over max_seq_length", cut);
  /* another model's tokenizer: ids past the vocabulary are refused */
  lt_tf_config small = bert_config(0);
  lt_transformer *ms = make(&small, 22);
  LT_EXPECT_NULLP_ERR(lt_hf_embed_texts(ms, tok, &sc, n, texts, NULL, 2), LT_ERR_INVALID, "the tokenizer is not");
  LT_EXPECT_NULLP_ERR(lt_hf_embed_texts(m, tok, &sc, n, texts, NULL, 0), LT_ERR_INVALID, "batch 0");
  /* sentence-transformers' files */
  const char *dir = lt_test_join(tmp, "st");
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  lt_hf_sentence_config got;
  LT_OK_OR_FAIL(lt_hf_read_sentence_config(dir, &c, &got)); /* none: mean pooling, no Normalize, max_len */
  ck_assert(!got.normalize && got.max_seq_length == c.max_len);
  char path[700], pool[700];
  snprintf(path, sizeof path, "%s/modules.json", dir);
  snprintf(pool, sizeof pool, "%s/1_Pooling", dir);
  ck_assert_int_eq(mkdir(pool, 0777), 0);
  snprintf(pool, sizeof pool, "%s/1_Pooling/config.json", dir);
  static const char *const mods =
      "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}, "
      "{\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}, "
      "{\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": \"sentence_transformers.models.Normalize\"}]";
  lt_test_write_text(path, mods);
  lt_test_write_text(pool, "{\"word_embedding_dimension\": 8, \"pooling_mode_cls_token\": false, "
                           "\"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": false}");
  char sb[700];
  snprintf(sb, sizeof sb, "%s/sentence_bert_config.json", dir);
  lt_test_write_text(sb, "{\"max_seq_length\": 16, \"do_lower_case\": false}");
  LT_OK_OR_FAIL(lt_hf_read_sentence_config(dir, &c, &got));
  ck_assert(got.normalize && got.max_seq_length == 16);
  static const struct {
    const char *file, *text, *want;
  } bad[] = {
      {"sb", "{\"max_seq_length\": 512}", "key 'max_seq_length' 512: over the model's"},
      {"sb", "{\"max_seq_length\": -1}", "key 'max_seq_length' -1: max_len must be in"},
      {"sb", "{\"do_lower_case\": true}", "key 'do_lower_case' true"},
      {"pool", "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}", "key 'pooling_mode_cls_token' is true"},
      {"pool", "{\"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": true}", "key 'pooling_mode_max_tokens' is true"},
      {"pool", "{\"word_embedding_dimension\": 384, \"pooling_mode_mean_tokens\": true}", "key 'word_embedding_dimension'"},
      {"mods", "[{\"type\": \"sentence_transformers.models.Transformer\", \"path\": \"\"}, {\"type\": "
               "\"sentence_transformers.models.Pooling\", \"path\": \"../1_Pooling\"}]", "a directory name inside"},
      {"mods", "[{\"type\": \"sentence_transformers.models.Transformer\", \"path\": \"\"}, {\"type\": "
               "\"sentence_transformers.models.Pooling\", \"path\": \"1_Pooling\"}, {\"type\": "
               "\"sentence_transformers.models.Dense\", \"path\": \"2_Dense\"}]", "type 'sentence_transformers.models.Dense'"},
      {"mods", "[{\"type\": \"sentence_transformers.models.Transformer\", \"path\": \"\"}]", "no Pooling module"},
      {"mods", "{\"type\": \"x\"}", "not a JSON array"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *f = !strcmp(bad[i].file, "sb") ? sb : !strcmp(bad[i].file, "pool") ? pool : path;
    lt_test_write_text(f, bad[i].text);
    lt_hf_sentence_config keep = {.max_seq_length = 77};
    const bool json_kind = strstr(bad[i].want, "not a JSON") != NULL; /* the file's shape: a format error */
    LT_EXPECT_ERR(lt_hf_read_sentence_config(dir, &c, &keep), json_kind ? LT_ERR_FORMAT : LT_ERR_INVALID, bad[i].want);
    ck_assert(keep.max_seq_length == 77);
    lt_test_write_text(path, mods); /* back to good files */
    lt_test_write_text(pool, "{\"pooling_mode_mean_tokens\": true}");
    lt_test_write_text(sb, "{\"max_seq_length\": 16}");
  }
  printf("bert sentence embeddings: %lld texts in batches of 2 within %.1e of each alone; %zu bad "
         "sentence-transformers files refused\n", (long long)n, worst, sizeof bad / sizeof bad[0]);
  lt_tensor_free(e);
  lt_tokenizer_free(tok);
  lt_transformer_free(ms);
  lt_transformer_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bert");
  TCase *tc = LT_TEST_CASE(s, "bert", 120, config_fields, config_in_checkpoints, crafted_checkpoint,
                           embeddings_and_pooler, gradients, hf_round_trip, hf_refusals, transformers_fixture,
                           sentence_embeddings);
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  return lt_test_run(s);
}
