/*
 * tests/test_tf_data.c: a Transformer run's data and validation through
 * library calls (models/transformer/data.h, evaluate.h), as train uses them:
 *   - classification pairs: labels numbered in sorted order, an unknown
 *     validation label counted and skipped, the one-line description;
 *   - language modelling: the text split at its end, windows of seq_len,
 *     the message naming --text and the counts when it is too short;
 *   - a generated task: a refused option is the options' fault (bad_config);
 *   - a tokenizer learnt from one side of the pairs knows only that side;
 *   - a new run's starting point (config.h): a model-only checkpoint file and
 *     its run directory give the configuration and no tokenizer, the weights
 *     load bit-exactly; a Hugging Face directory with libtensor's tokenizer
 *     file gives the tokenizer too; a directory without checkpoints fails;
 *   - lt_tf_evaluate on a small untrained model: finite loss near log(V),
 *     token accuracy in [0, 1], exact match decoded on exactly the first N
 *     examples with their texts returned, the same figures on a second call,
 *     and the evaluation text as train prints it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "models/transformer/config.h"
#include "models/transformer/load.h"
#include "models/transformer/data.h"
#include "models/transformer/evaluate.h"
#include "models/transformer/gguf_model.h"
#include "models/transformer/hf.h"
#include "models/transformer/transformer.h"
#include "test_util.h"

static lt_tf_data_opts base_opts(void) {
  lt_tf_data_opts o = {0};
  o.task = LT_TASK_COPY;
  o.task_train = 64, o.task_valid = 16, o.task_min_len = 2, o.task_max_len = 5, o.task_symbols = 6;
  o.data_seed = 7;
  o.valid_fraction = 0.25;
  o.tokenizer = LT_TOKENIZER_CHAR;
  o.tokenizer_from = LT_TF_TOKENIZER_FROM_BOTH;
  o.bpe_vocab = 300;
  o.seq_len = 16;
  o.overlong = LT_OVERLONG_SKIP;
  o.batch = 4, o.bucket = 0, o.seed = 1;
  return o;
}

START_TEST(classification_labels_are_sorted_and_unknown_ones_skipped) {
  const char tsv[] = "good film\tpos\nbad film\tneg\nfine film\tmeh\nnice film\tpos\n";
  const char valid[] = "great film\tpos\nodd film\tweird\n";
  char *p = lt_test_write_temp(tsv, sizeof tsv - 1), *v = lt_test_write_temp(valid, sizeof valid - 1);
  lt_tf_data_opts o = base_opts();
  o.tsv = p, o.valid_tsv = v, o.classify = true;
  lt_tf_data D;
  bool bad = true;
  ck_assert_int_eq(lt_tf_data_read(&o, &D, &bad), LT_OK);
  ck_assert(!bad);
  ck_assert_int_eq(D.kind, LT_TF_DATA_CLASSIFY);
  ck_assert_int_eq(lt_tf_data_prepare(&o, &D, NULL), LT_OK);
  ck_assert_int_eq(D.n_classes, 3);
  ck_assert_str_eq(D.classes[0], "meh");
  ck_assert_str_eq(D.classes[1], "neg");
  ck_assert_str_eq(D.classes[2], "pos");
  ck_assert_int_eq(lt_tf_data_class_of(&D, "pos"), 2);
  ck_assert_int_eq(lt_tf_data_class_of(&D, "weird"), -1);
  ck_assert_int_eq(lt_seq_pairs_count(D.train), 4);
  ck_assert_int_eq(lt_seq_pairs_count(D.valid), 1); /* "weird" is no class */
  ck_assert_int_eq(D.affected_train, 0);
  ck_assert_int_eq(D.affected_valid, 1);
  const int64_t *s, *t;
  int64_t sl, tl;
  lt_seq_pairs_get(D.valid, 0, &s, &sl, &t, &tl);
  ck_assert_int_eq(tl, 1);
  ck_assert_int_eq(t[0], 2);
  char text[256];
  const char *base = strrchr(p, '/') + 1;
  char want[256];
  snprintf(want, sizeof want, "%s, 4 training / 1 validation examples, char tokenizer (vocab %lld), classes", base,
           (long long)lt_tokenizer_vocab_size(D.tok));
  ck_assert_str_eq(lt_tf_data_describe(&D, text, sizeof text), want);
  lt_tf_data_free(&D);
  ck_assert_ptr_null(D.tok);
  unlink(p), unlink(v);
  free(p), free(v);
}
END_TEST

START_TEST(language_modelling_splits_the_text_at_its_end) {
  char text[2000];
  for (int i = 0; i < 1999; i++) text[i] = (char)('a' + (i * 7) % 13);
  text[1999] = '\n';
  char *p = lt_test_write_temp(text, sizeof text);
  lt_tf_data_opts o = base_opts();
  o.text = p, o.valid_fraction = 0.1, o.seq_len = 32;
  lt_tf_data D;
  ck_assert_int_eq(lt_tf_data_read(&o, &D, NULL), LT_OK);
  ck_assert_int_eq(D.kind, LT_TF_DATA_LM);
  ck_assert_int_eq(lt_tf_data_prepare(&o, &D, NULL), LT_OK);
  ck_assert_int_eq(D.valid_tokens->numel, 200);
  ck_assert_int_eq(D.train_tokens->numel, 1800);
  /* the validation part is the end of the text */
  int64_t last;
  lt_tensor *end = lt_narrow(D.valid_tokens, 0, 199, 1);
  ck_assert_int_eq(lt_tensor_read(end, LT_DTYPE_I64, &last, 1), LT_OK);
  lt_tensor_free(end);
  int64_t *nl, n;
  ck_assert_int_eq(lt_tokenizer_encode(D.tok, "\n", 1, &nl, &n), LT_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(last, nl[0]);
  free(nl);
  ck_assert_int_eq(lt_tf_data_batches_per_epoch(&D), lt_lm_loader_batches_per_epoch(D.ll));
  lt_tf_data_free(&D);

  o.seq_len = 500; /* 200 validation tokens cannot hold a window of 501 */
  ck_assert_int_eq(lt_tf_data_read(&o, &D, NULL), LT_OK);
  ck_assert_int_eq(lt_tf_data_prepare(&o, &D, NULL), LT_ERR_FORMAT);
  ck_assert_msg(strstr(lt_last_error(), "has 2000 tokens: too few for --seq-len 500") != NULL, "%s", lt_last_error());
  lt_tf_data_free(&D);
  unlink(p);
  free(p);
}
END_TEST

START_TEST(a_refused_task_option_is_a_configuration_error) {
  lt_tf_data_opts o = base_opts();
  o.task_min_len = 9, o.task_max_len = 3; /* min above max */
  lt_tf_data D;
  bool bad = false;
  ck_assert_int_ne(lt_tf_data_read(&o, &D, &bad), LT_OK);
  ck_assert(bad);
  ck_assert_msg(!strncmp(lt_last_error(), "generating the task: ", 21), "%s", lt_last_error());
  lt_tf_data_free(&D);
  /* a missing TSV is the data's fault */
  o = base_opts();
  o.tsv = "/nonexistent/pairs.tsv";
  ck_assert_int_ne(lt_tf_data_read(&o, &D, &bad), LT_OK);
  ck_assert(!bad);
  ck_assert_msg(!strncmp(lt_last_error(), "reading --tsv: ", 15), "%s", lt_last_error());
  lt_tf_data_free(&D);
}
END_TEST

START_TEST(a_tokenizer_learnt_from_one_side_knows_only_that_side) {
  const char tsv[] = "abc\txyz\nbca\tzyx\ncab\tyxz\nacb\txzy\n";
  char *p = lt_test_write_temp(tsv, sizeof tsv - 1);
  lt_tf_data_opts o = base_opts();
  o.tsv = p, o.valid_tsv = p;
  int64_t vocab[3];
  for (int from = 0; from < 3; from++) {
    o.tokenizer_from = (lt_tf_tokenizer_from)from;
    lt_tf_data D;
    ck_assert_msg(lt_tf_data_read(&o, &D, NULL) == LT_OK, "%s", lt_last_error());
    ck_assert_msg(lt_tf_data_prepare(&o, &D, NULL) == LT_OK, "%s", lt_last_error());
    vocab[from] = lt_tokenizer_vocab_size(D.tok);
    lt_tf_data_free(&D);
  }
  /* both: a b c x y z; one side: three letters fewer (specials and the newline alike) */
  ck_assert_int_eq(vocab[0] - vocab[1], 3);
  ck_assert_int_eq(vocab[1], vocab[2]);
  ck_assert_str_eq(lt_tf_tokenizer_from_name(LT_TF_TOKENIZER_FROM_TARGET), "target");
  ck_assert_str_eq(lt_tf_tokenizer_from_name(7), "unknown");
  unlink(p);
  free(p);
}
END_TEST

START_TEST(evaluation_of_an_untrained_model) {
  lt_tf_data_opts o = base_opts();
  lt_tf_data D;
  ck_assert_int_eq(lt_tf_data_read(&o, &D, NULL), LT_OK);
  ck_assert_int_eq(lt_tf_data_prepare(&o, &D, NULL), LT_OK);
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.n_enc_layers = 1, c.n_dec_layers = 1, c.d_ff = 32;
  c.max_len = 16, c.dropout = 0, c.pad_id = LT_TOKEN_PAD;
  c.vocab_size = lt_tokenizer_vocab_size(D.tok);
  lt_generator *g = lt_generator_new(3);
  lt_transformer *m = lt_transformer_new(&c, g);
  ck_assert_ptr_nonnull(m);
  int64_t nv = lt_seq_pairs_count(D.valid);
  ck_assert_int_ge(nv, 8);
  char *out[8] = {0};
  lt_tf_eval_result E, E2;
  ck_assert_int_eq(lt_tf_evaluate(m, &D, 3, 5, out, 8, &E), LT_OK);
  ck_assert(isfinite(E.loss));
  ck_assert_msg(fabs(E.loss - log((double)c.vocab_size)) < 1.5, "loss %g, log V %g", E.loss,
                log((double)c.vocab_size));
  ck_assert(E.token_acc >= 0 && E.token_acc <= 1);
  ck_assert_int_eq(E.n_decoded, 5);
  ck_assert(E.n_exact >= 0 && E.n_exact <= 5);
  ck_assert(!E.interrupted);
  for (int i = 0; i < 8; i++) {
    if (i < 5) ck_assert_ptr_nonnull(out[i]);
    else ck_assert_ptr_null(out[i]);
    free(out[i]);
  }
  ck_assert_int_eq(lt_tf_evaluate(m, &D, 7, 5, NULL, 0, &E2), LT_OK); /* another batch size: the same figures */
  ck_assert_double_eq_tol(E2.loss, E.loss, 1e-5);
  ck_assert_double_eq(E2.token_acc, E.token_acc);
  ck_assert_int_eq(E2.n_exact, E.n_exact);
  char text[256], want[256];
  lt_tf_eval_text(&D, &E, text, sizeof text);
  snprintf(want, sizeof want, "loss %.4f (ppl %.2f), token accuracy %.2f%%, exact match %.2f%% (%lld/5)", E.loss,
           exp(E.loss), 100 * E.token_acc, 100.0 * (double)E.n_exact / 5, (long long)E.n_exact);
  ck_assert_str_eq(text, want);
  ck_assert_int_eq(lt_tf_evaluate(m, &D, 0, 5, NULL, 0, &E2), LT_ERR_INVALID);
  lt_transformer_free(m);
  lt_generator_free(g);
  lt_tf_data_free(&D);
}
END_TEST

/* Whether every parameter of a and b holds the same bits. */
static bool same_params(lt_transformer *a, lt_transformer *b) {
  lt_params *pa = lt_transformer_params(a), *pb = lt_transformer_params(b);
  ck_assert_int_eq(lt_params_count(pa), lt_params_count(pb));
  bool same = true;
  for (int i = 0; i < lt_params_count(pa) && same; i++) {
    const lt_tensor *x = lt_params_at(pa, i)->value, *y = lt_params_at(pb, i)->value;
    ck_assert_int_eq(x->numel, y->numel);
    same = !memcmp(x->data, y->data, lt_dtype_size(x->dtype) * (size_t)x->numel);
  }
  return same;
}

START_TEST(a_new_run_starts_from_a_checkpoint_or_a_hugging_face_directory) {
  char dir[] = "/tmp/lt_tf_source_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.n_dec_layers = 1, c.d_ff = 32, c.max_len = 16;
  c.vocab_size = 40, c.dropout = 0, c.act = LT_ACT_GELU_TANH, c.pad_id = LT_TOKEN_PAD;
  lt_generator *g = lt_generator_new(5);
  lt_transformer *m = lt_transformer_new(&c, g);
  ck_assert_ptr_nonnull(m);
  lt_ckpt_meta *meta = lt_ckpt_meta_new();
  ck_assert_int_eq(lt_tf_config_to_meta(&c, meta), LT_OK);
  char path[600];
  snprintf(path, sizeof path, "%s/ckpt-000000000007.h5", dir);
  ck_assert_int_eq(lt_ckpt_save_params(path, lt_transformer_params(m), meta, NULL), LT_OK);

  /* the file itself, then its run directory (the newest checkpoint) */
  for (int k = 0; k < 2; k++) {
    char file[600];
    lt_tf_config got;
    lt_tokenizer *tok = (lt_tokenizer *)1;
    lt_ckpt_info *info = NULL;
    ck_assert_msg(lt_tf_source_read(k ? dir : path, "ckpt", NULL, file, sizeof file, &got, &tok, &info) == LT_OK, "%s",
                  lt_last_error());
    ck_assert_str_eq(file, path);
    ck_assert_ptr_null(tok); /* a model-only file holds none */
    ck_assert_ptr_nonnull(info);
    ck_assert_int_eq(got.d_model, 16);
    ck_assert_int_eq(got.vocab_size, 40);
    ck_assert_int_eq(got.arch, LT_TF_DECODER_ONLY);
    lt_generator *g2 = lt_generator_new(99);
    lt_transformer *m2 = lt_transformer_new(&got, g2);
    ck_assert(!same_params(m, m2));
    ck_assert_int_eq(lt_tf_source_load_weights(file, m2, NULL), LT_OK);
    ck_assert(same_params(m, m2));
    lt_transformer_free(m2), lt_generator_free(g2), lt_ckpt_info_free(info);
  }
  int64_t step = -1;
  lt_ckpt_info *info = NULL;
  ck_assert_int_ne(lt_tf_read_checkpoint_info(path, NULL, false, &info, &step), LT_OK); /* not a training state */
  ck_assert_ptr_null(info);
  ck_assert_int_eq(lt_tf_read_checkpoint_info(path, NULL, true, &info, &step), LT_OK);
  ck_assert_ptr_nonnull(info);
  lt_ckpt_info_free(info);

  /* a Hugging Face directory with libtensor's tokenizer beside the weights */
  char hf[600], tpath[700];
  snprintf(hf, sizeof hf, "%s/hf", dir);
  ck_assert_msg(lt_hf_export(m, hf) == LT_OK, "%s", lt_last_error());
  lt_tokenizer *bt = lt_tokenizer_new_byte();
  void *blob;
  size_t size;
  ck_assert_int_eq(lt_tokenizer_serialize(bt, &blob, &size), LT_OK);
  snprintf(tpath, sizeof tpath, "%s/%s", hf, LT_HF_TOKENIZER_FILE);
  ck_assert_int_eq(lt_ckpt_write_file(tpath, blob, size), LT_OK);
  free(blob);
  char file[600];
  lt_tf_config got;
  lt_tokenizer *tok = NULL;
  ck_assert_msg(lt_tf_source_read(hf, "ckpt", NULL, file, sizeof file, &got, &tok, &info) == LT_OK, "%s",
                lt_last_error());
  ck_assert_ptr_null(info);
  ck_assert_str_eq(file, hf);
  ck_assert_ptr_nonnull(tok);
  ck_assert_int_eq(lt_tokenizer_get_kind(tok), LT_TOKENIZER_BYTE);
  ck_assert_int_eq(got.d_model, 16);
  lt_transformer *m3 = lt_transformer_new(&got, g);
  ck_assert_int_eq(lt_tf_source_load_weights(file, m3, NULL), LT_OK);
  ck_assert(same_params(m, m3));
  lt_transformer_free(m3), lt_tokenizer_free(tok), lt_tokenizer_free(bt);

  /* a directory without checkpoints */
  char empty[600];
  snprintf(empty, sizeof empty, "%s/empty", dir);
  ck_assert_int_eq(mkdir(empty, 0700), 0);
  ck_assert_int_ne(lt_tf_source_read(empty, "ckpt", NULL, file, sizeof file, &got, &tok, &info), LT_OK);
  ck_assert_ptr_null(tok);
  ck_assert_ptr_null(info);

  /* lt_tf_load (load.h): each origin gives the same model, with what else it holds */
  lt_tf_loaded l;
  ck_assert_msg(lt_tf_load(dir, NULL, &l) == LT_OK, "%s", lt_last_error()); /* a run directory: its newest */
  ck_assert_int_eq(l.origin, LT_TF_FROM_CHECKPOINT);
  ck_assert_str_eq(l.path, path);
  ck_assert_ptr_null(l.tok); /* a model-only file holds none */
  ck_assert(l.info && !l.info->training);
  ck_assert(same_params(m, l.model));
  lt_tf_loaded_free(&l);
  ck_assert_ptr_null(l.model);
  lt_tf_load_opts lo = LT_TF_LOAD_DEFAULTS;
  lo.model_only = false;
  ck_assert_int_eq(lt_tf_load(path, &lo, &l), LT_ERR_FORMAT);
  ck_assert_msg(strstr(lt_last_error(), "holds a model only") && strstr(lt_last_error(), path), "%s", lt_last_error());
  ck_assert(!l.model && !l.tok && !l.info);
  ck_assert_msg(lt_tf_load(hf, NULL, &l) == LT_OK, "%s", lt_last_error());
  ck_assert_int_eq(l.origin, LT_TF_FROM_HF);
  ck_assert(l.tok && lt_tokenizer_get_kind(l.tok) == LT_TOKENIZER_BYTE && !l.info);
  ck_assert(same_params(m, l.model));
  lt_tf_loaded_free(&l);
  lo = LT_TF_LOAD_DEFAULTS;
  lo.hf_dirs = false; /* then it is a run directory without checkpoints */
  ck_assert_int_ne(lt_tf_load(hf, &lo, &l), LT_OK);
  ck_assert(!l.model && strstr(lt_last_error(), hf));
  char gguf[700];
  snprintf(gguf, sizeof gguf, "%s/m.gguf", dir);
  ck_assert_msg(lt_tf_gguf_export(m, gguf, LT_GGML_F32, NULL, 0) == LT_OK, "%s", lt_last_error());
  ck_assert_msg(lt_tf_load(gguf, NULL, &l) == LT_OK, "%s", lt_last_error());
  ck_assert_int_eq(l.origin, LT_TF_FROM_GGUF);
  ck_assert(!l.info && same_params(m, l.model));
  lt_tf_loaded_free(&l);
  ck_assert_int_ne(lt_tf_load(empty, NULL, &l), LT_OK);
  ck_assert(!l.model && strstr(lt_last_error(), empty));
  lt_clear_error(); /* a NULL argument keeps a pending error */
  ck_assert_int_eq(lt_tf_load(NULL, NULL, &l), LT_ERR_NULL);
  ck_assert_int_eq(lt_tf_load(path, NULL, NULL), LT_ERR_NULL);
  lt_tf_loaded_free(NULL);

  lt_ckpt_meta_free(meta);
  lt_transformer_free(m);
  lt_generator_free(g);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* lt_tf_source_load_encoder: a BertModel directory (no classifier) into a
 * classifier of its configuration: every source tensor copied, the new
 * classifier keeps its initialisation; a model that is no classifier is
 * refused. */
START_TEST(a_pretrained_encoder_gets_a_new_classifier) {
  char dir[256];
  lt_test_mkdtemp(dir, sizeof dir, "new_head");
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  c.vocab_size = 50, c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.n_enc_layers = 1, c.d_ff = 32;
  c.max_len = 16, c.dropout = 0.0, c.pad_id = 0, c.n_classes = 0, c.norm_eps = 1e-12;
  c.type_vocab_size = 2, c.embed_norm = true, c.pooler = true;
  lt_generator *g = LT_NNP(lt_generator_new(3));
  lt_transformer *base = LT_NNP(lt_transformer_new(&c, g));
  LT_OK_OR_FAIL(lt_hf_export(base, dir));
  c.n_classes = 3;
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_tensor *head = LT_NN(lt_clone(lt_params_find(lt_transformer_params(m), "classifier.weight")));
  LT_OK_OR_FAIL(lt_tf_source_load_encoder(dir, m, NULL));
  lt_params *from = lt_transformer_params(base), *to = lt_transformer_params(m);
  ck_assert_int_eq(lt_params_count(to), lt_params_count(from) + 2);
  for (int k = 0; k < lt_params_count(from); k++) {
    const lt_param *p = lt_params_at(from, k);
    LT_ASSERT_CLOSE(lt_params_find(to, p->name), p->value, 0, 0);
  }
  LT_ASSERT_CLOSE(lt_params_find(to, "classifier.weight"), head, 0, 0);
  LT_EXPECT_ERR(lt_tf_source_load_encoder(dir, base, NULL), LT_ERR_INVALID, "not an encoder-only classifier");
  LT_EXPECT_ERR(lt_tf_source_load_encoder(NULL, m, NULL), LT_ERR_NULL, NULL);
  lt_tensor_free(head);
  lt_transformer_free(m);
  lt_transformer_free(base);
  lt_generator_free(g);
  lt_test_rmtree(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tf_data");
  LT_TEST_CASE(s, "data", 60, classification_labels_are_sorted_and_unknown_ones_skipped,
               language_modelling_splits_the_text_at_its_end, a_refused_task_option_is_a_configuration_error,
               a_tokenizer_learnt_from_one_side_knows_only_that_side, evaluation_of_an_untrained_model,
               a_new_run_starts_from_a_checkpoint_or_a_hugging_face_directory,
               a_pretrained_encoder_gets_a_new_classifier);
  return lt_test_run(s);
}
