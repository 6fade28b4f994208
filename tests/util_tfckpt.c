/* tests/util_tfckpt.c: see util_tfckpt.h. */
#include "util_tfckpt.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "datasets/datasets.h"
#include "models/transformer/config.h"
#include "models/transformer/load.h"
#include "nn/nn.h"

const char *const tfckpt_generator_names[TFCKPT_N_GENERATORS] = {"dropout"};

lt_tf_config tfckpt_config(lt_tf_arch arch) {
  lt_tf_config c = lt_tf_config_default(arch);
  c.vocab_size = LT_TOKEN_NUM_SPECIAL + (int64_t)strlen(TFCKPT_TEXT); /* its characters are all distinct */
  c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 16, c.max_len = 8;
  c.n_enc_layers = arch == LT_TF_DECODER_ONLY ? 0 : 1;
  c.n_dec_layers = arch == LT_TF_ENCODER_ONLY ? 0 : 1;
  c.n_classes = arch == LT_TF_ENCODER_ONLY ? 2 : 0;
  c.dropout = 0.0;
  return c;
}

lt_optim_config tfckpt_optim_config(void) {
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
  oc.lr = 1e-2;
  return oc;
}

lt_schedule tfckpt_schedule(void) {
  return (lt_schedule){.kind = LT_SCHED_WARMUP_LINEAR, .base_lr = 1e-2, .gamma = 1.0, .scale = 1.0, .warmup = 2,
                       .total = 100, .step_size = 1, .d_model = 8};
}

/* The loss of one fixed batch (B = 2, length 5): next-token prediction for
 * the decoder-only model, teacher-forced translation (target = reversed
 * source) for the encoder-decoder, two classes for the encoder-only one.
 * Returns new (in the caller's scope). */
static lt_tensor *batch_loss(const lt_transformer *m, lt_tf_arch arch, const lt_nn_ctx *ctx) {
  enum { B = 2, T = 5 };
  int64_t src[B * T], tgt[B * T], lab[B * T], cls[B] = {0, 1};
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      src[b * T + t] = LT_TOKEN_NUM_SPECIAL + (b * 7 + t * 3) % 19;
      lab[b * T + t] = LT_TOKEN_NUM_SPECIAL + (b * 7 + (T - 1 - t) * 3) % 19;
      tgt[b * T + t] = t == 0 ? LT_TOKEN_BOS : lab[b * T + t - 1];
    }
  lt_tensor *s = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, T), src);
  lt_tensor *ti = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, T), arch == LT_TF_DECODER_ONLY ? src : tgt);
  lt_tensor *l = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, T), lab);
  lt_tensor *c = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B), cls);
  if (!s || !ti || !l || !c) return NULL;
  lt_tensor *logits;
  if (arch == LT_TF_ENCODER_ONLY) return lt_cross_entropy(lt_transformer_classify(m, s, NULL, ctx), c, NULL);
  if (arch == LT_TF_DECODER_ONLY) logits = lt_transformer_decode(m, ti, NULL, NULL, NULL, 0, ctx);
  else logits = lt_transformer_decode(m, ti, NULL, lt_transformer_encode(m, s, NULL, ctx), NULL, 0, ctx);
  if (!logits) return NULL;
  return lt_cross_entropy(lt_reshape(logits, LT_SHAPE(B * T, lt_transformer_config(m)->vocab_size)),
                          lt_reshape(l, LT_SHAPE(B * T)), NULL);
}

lt_status tfckpt_write(const char *path, lt_tf_arch arch, int steps, bool training, const lt_ckpt_save_opts *opts) {
  lt_tf_config cfg = tfckpt_config(arch);
  return tfckpt_write_config(path, &cfg, steps, training, opts);
}

const char *tfckpt_classes;
size_t tfckpt_classes_size;
lt_status (*tfckpt_extra_hook)(lt_tf_arch arch, lt_ckpt_meta *extra);

lt_status tfckpt_write_config(const char *path, const lt_tf_config *cfg_in, int steps, bool training,
                              const lt_ckpt_save_opts *opts) {
  return tfckpt_write_config_tok(path, cfg_in, steps, training, opts, NULL);
}

lt_status tfckpt_write_config_tok(const char *path, const lt_tf_config *cfg_in, int steps, bool training,
                                  const lt_ckpt_save_opts *opts, const lt_tokenizer *tok_in) {
  lt_tf_config cfg = *cfg_in;
  lt_tf_arch arch = cfg.arch;
  lt_optim_config oc = tfckpt_optim_config();
  lt_schedule sc = tfckpt_schedule();
  lt_generator *init = lt_generator_new(7), *drop = lt_generator_new(8);
  lt_tokenizer *own = tok_in ? NULL : lt_tokenizer_new_char(TFCKPT_TEXT, strlen(TFCKPT_TEXT));
  const lt_tokenizer *tok = tok_in ? tok_in : own;
  lt_transformer *m = init ? lt_transformer_new(&cfg, init) : NULL;
  lt_optimizer *opt = m ? lt_optimizer_new(lt_transformer_params(m), &oc) : NULL;
  lt_ckpt_meta *config = lt_ckpt_meta_new(), *extra = lt_ckpt_meta_new();
  lt_status s = drop && tok && opt && config && extra ? LT_OK : lt_last_status();
  if (!s && lt_tokenizer_vocab_size(tok) != cfg.vocab_size)
    s = lt_error_set(LT_ERR_STATE, "tfckpt: the tokenizer has %lld ids, the configuration %lld",
                       (long long)lt_tokenizer_vocab_size(tok), (long long)cfg.vocab_size);
  lt_nn_ctx ctx = {true, drop};
  for (int i = 0; !s && i < steps; i++) {
    lt_params_zero_grad(lt_transformer_params(m));
    lt_optimizer_set_lr(opt, lt_schedule_lr(&sc, i + 1));
    lt_scope *scope = lt_scope_begin();
    lt_tensor *loss = batch_loss(m, arch, &ctx);
    s = loss ? lt_backward(loss, NULL, false) : lt_last_status();
    lt_scope_end(scope);
    if (!s) s = lt_optimizer_step(opt);
  }
  if (!s) s = lt_tf_config_to_meta(&cfg, config);
  void *blob = NULL;
  size_t size = 0;
  if (!s) s = lt_tokenizer_serialize(tok, &blob, &size);
  if (!s) s = lt_ckpt_meta_set_bytes(extra, "tokenizer", blob, size);
  free(blob);
  if (!s && arch == LT_TF_ENCODER_ONLY)
    s = tfckpt_classes ? lt_ckpt_meta_set_bytes(extra, "classes", tfckpt_classes, tfckpt_classes_size)
                       : lt_ckpt_meta_set_bytes(extra, "classes", "neg\npos\n", 8);
  if (!s) s = lt_ckpt_meta_set_int(extra, "loader.epoch", 0);
  if (!s) s = lt_ckpt_meta_set_int(extra, "loader.index", steps);
  if (!s) s = lt_ckpt_meta_set_int(extra, "run.tokens", 10 * steps);
  if (!s) s = lt_ckpt_meta_set_double(extra, "run.train_seconds", 0.25);
  if (!s) s = lt_ckpt_meta_set_string(extra, "opt.data", "tfckpt");
  if (!s && tfckpt_extra_hook) s = tfckpt_extra_hook(arch, extra);
  if (!s && training) {
    lt_train_state st = {.params = lt_transformer_params(m), .optim = opt, .optim_config = &oc, .schedule = &sc,
                         .step = steps, .n_generators = TFCKPT_N_GENERATORS, .generator_names = tfckpt_generator_names,
                         .generators = &drop};
    s = lt_ckpt_save_training(path, &st, config, extra, opts);
  } else if (!s) {
    s = lt_ckpt_save_params(path, lt_transformer_params(m), config, opts);
  }
  lt_ckpt_meta_free(config);
  lt_ckpt_meta_free(extra);
  lt_optimizer_free(opt);
  lt_transformer_free(m);
  lt_tokenizer_free(own);
  lt_generator_free(init);
  lt_generator_free(drop);
  return s;
}

lt_status tfckpt_read_info(const char *path, bool model_only_ok, lt_ckpt_info **info) {
  lt_params *empty = lt_params_new();
  if (!empty) return lt_last_status();
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true;
  lt_train_state st = {.params = empty};
  lt_status s = lt_ckpt_load_training(path, &st, &lo, info);
  if (s && model_only_ok) s = lt_ckpt_load_params(path, empty, &lo, info);
  lt_params_free(empty);
  return s;
}

lt_transformer *tfckpt_load_model(const char *path) {
  lt_ckpt_info *info = NULL;
  if (tfckpt_read_info(path, true, &info) != LT_OK) return NULL;
  lt_tf_config cfg;
  lt_status s = lt_tf_config_from_meta(info->config, &cfg);
  lt_ckpt_info_free(info);
  return s == LT_OK ? lt_tf_load_model(path, &cfg, NULL) : NULL;
}

lt_transformer *tfckpt_random_model(const lt_tf_config *c, uint64_t seed) {
  lt_generator *g = lt_generator_new(seed);
  lt_transformer *m = g ? lt_transformer_new(c, g) : NULL;
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; m && i < lt_params_count(P); i++) {
    const lt_param *p = lt_params_at(P, i);
    const bool norm = strstr(p->name, "norm") && strstr(p->name, ".weight");
    if (lt_init_normal_(g, p->value, norm ? 1.0 : 0.0, norm ? 0.2 : 0.5) != LT_OK) lt_transformer_free(m), m = NULL;
  }
  lt_generator_free(g);
  return m;
}
