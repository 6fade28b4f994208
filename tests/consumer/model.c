/* A tiny program built against an INSTALLED libtensor_transformer (and
 * through it the core), the way a user would (tests/install_test.sh builds it
 * with find_package, shared and static, and with pkg-config): a small
 * decoder-only Transformer, its configuration through checkpoint attributes,
 * and greedy generation with and without the KV cache. */
#include <libtensor/libtensor_transformer.h>
#include <stdio.h>

static int fail(const char *what) {
  fprintf(stderr, "consumer: %s failed: %s\n", what, lt_last_error());
  return 1;
}

int main(void) {
  lt_tf_config cfg = lt_tf_config_default(LT_TF_DECODER_ONLY);
  cfg.vocab_size = 32, cfg.d_model = 16, cfg.n_heads = 2, cfg.n_kv_heads = 2, cfg.d_ff = 32, cfg.max_len = 16;
  cfg.n_enc_layers = 0, cfg.n_dec_layers = 1;
  if (lt_tf_config_validate(&cfg) != LT_OK) return fail("the config");
  lt_ckpt_meta *meta = lt_ckpt_meta_new();
  lt_tf_config back;
  if (!meta || lt_tf_config_to_meta(&cfg, meta) != LT_OK || lt_tf_config_from_meta(meta, &back) != LT_OK ||
      back.d_model != 16)
    return fail("the config in checkpoint attributes");
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = g ? lt_transformer_new(&cfg, g) : NULL;
  lt_tensor *prompt = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, 3}, (int64_t[]){4, 5, 6});
  if (!m || !prompt) return fail("building the model");
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = 6, o.eos_id = -1;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  lt_generate_result cached = {0}, uncached = {0};
  if (lt_transformer_generate(m, NULL, NULL, prompt, &o, &tf, &cached) != LT_OK) return fail("generating");
  tf.no_cache = true;
  if (lt_transformer_generate(m, NULL, NULL, prompt, &o, &tf, &uncached) != LT_OK) return fail("generating");
  if (cached.tokens->shape[1] != 6 || !lt_equal(cached.tokens, uncached.tokens)) {
    fprintf(stderr, "consumer: cached and uncached generation differ\n");
    return 1;
  }
  printf("consumer: libtensor_transformer, %s model of %lld parameters, generated %lld tokens\n",
         lt_tf_arch_name(cfg.arch), (long long)lt_params_numel(lt_transformer_params(m), false),
         (long long)cached.tokens->shape[1]);
  lt_generate_result_free(&cached), lt_generate_result_free(&uncached);
  lt_tensor_free(prompt);
  lt_transformer_free(m);
  lt_generator_free(g);
  lt_ckpt_meta_free(meta);
  return 0;
}
