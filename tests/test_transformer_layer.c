/*
 * tests/test_transformer_layer.c: the Transformer layers of
 * nn/transformer_layer.h.
 *
 * - PyTorch parity: tests/fixtures/transformer_layer.bin (written by
 *   tests/fixtures/make_transformer_layer_fixtures.py from PyTorch's own
 *   nn.TransformerEncoderLayer / nn.TransformerDecoderLayer, post- and
 *   pre-norm, ReLU and GELU, key padding and causal masks): forward and the
 *   gradients of x, memory and every parameter, with the layer converted to
 *   f64 (tight) and as built in f32 (loose).
 * - Incremental decoding: lt_transformer_layer_forward_cached fed one position
 *   at a time gives the whole-sequence causal forward.
 * - Errors: options, inputs, and a failed init that changes nothing.
 * - Ownership: x is borrowed; a caller's x in a scope stays there (the live
 *   tensor count returns to where it was).
 * The f64 gradchecks of the layers are in tests/test_nn_module_gradcheck.c,
 * the flagship built on them in tests/test_transformer.c.
 */
#include "test_util.h"
#include "util_fixtures.h"
#include "util_fxcheck.h"

#include <stdio.h>
#include <string.h>

#include "nn/transformer_layer.h"
#include "tensor/storage_internal.h"

/* The record "<c>.<key>", floats converted to dtype. */
static lt_tensor *fx_get(const lt_fixture *f, const char *c, const char *key, lt_dtype dtype) {
  lt_tensor *t = lt_fx_get(f, c, key);
  return lt_dtype_is_float(t->dtype) ? lt_test_as_dtype(t, dtype) : t;
}

/* One fixture case in dtype: build, load PyTorch's weights by name, forward,
 * backward of sum(out * dout), compare everything. */
static void parity_case(const char *c, lt_dtype dtype, double rtol) {
  lt_fixture *f = lt_fx_open("transformer_layer.bin");
  const int64_t live0 = lt__live_tensors(); /* the caller's x in a scope must not leak (it is borrowed) */
  const bool decoder = lt_fx_num(f, c, "decoder") != 0;
  lt_transformer_layer_opts o = LT_TRANSFORMER_LAYER_DEFAULTS((int64_t)lt_fx_num(f, c, "d_model"),
                                                              (int64_t)lt_fx_num(f, c, "n_heads"));
  o.d_ff = (int64_t)lt_fx_num(f, c, "d_ff");
  o.dropout = 0;
  o.act = (lt_activation)lt_fx_num(f, c, "act");
  o.norm_first = lt_fx_num(f, c, "norm_first") != 0;
  o.norm_eps = lt_fx_num(f, c, "norm_eps");
  lt_generator *g = lt_generator_new(1);
  lt_params *p = lt_params_new();
  lt_transformer_layer L;
  LT_OK_OR_FAIL(decoder ? lt_transformer_decoder_layer_init(&L, p, "layer", &o, g)
                        : lt_transformer_encoder_layer_init(&L, p, "layer", &o, g));
  if (dtype != LT_DTYPE_F32) LT_OK_OR_FAIL(lt_params_to_dtype(p, dtype));
  char key[512], label[600];
  int in_file = 0;
  snprintf(key, sizeof key, "%s.param.", c);
  for (int i = 0; i < lt_fixture_count(f); i++) in_file += strncmp(lt_fixture_name(f, i), key, strlen(key)) == 0;
  ck_assert_int_eq(in_file, lt_params_count(p)); /* every PyTorch parameter has a home, and back */
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *pr = lt_params_at(p, i);
    snprintf(key, sizeof key, "param.%s", pr->name + strlen("layer."));
    lt_tensor *t = fx_get(f, c, key, dtype);
    LT_OK_OR_FAIL(lt_copy_(pr->value, t));
    lt_tensor_free(t);
  }
  lt_set_grad_enabled(prev);

  lt_scope *s = lt_scope_begin();
  lt_tensor *x = fx_get(f, c, "in.x", dtype), *mem = NULL;
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_attention_opts self_mask = {.causal = lt_fx_num(f, c, "causal") != 0,
                                 .key_padding_mask = fx_get(f, c, "in.pad", dtype)};
  lt_attention_opts mem_mask = {0};
  lt_tensor *out;
  if (decoder) {
    mem = fx_get(f, c, "in.memory", dtype);
    LT_OK_OR_FAIL(lt_requires_grad_(mem, true));
    mem_mask.key_padding_mask = fx_get(f, c, "in.mem_pad", dtype);
    out = lt_transformer_decoder_layer_forward(&L, x, mem, &self_mask, &mem_mask, 0, NULL);
  } else {
    out = lt_transformer_encoder_layer_forward(&L, x, &self_mask, 0, NULL);
  }
  snprintf(label, sizeof label, "%s (%s).out", c, lt_dtype_name(dtype));
  lt_fx_close(label, out, fx_get(f, c, "out", dtype), rtol, rtol);
  ck_assert_msg(out, "%s", lt_last_error());
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(out, fx_get(f, c, "dout", dtype))), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  snprintf(label, sizeof label, "%s (%s).grad.x", c, lt_dtype_name(dtype));
  lt_fx_close(label, x->grad, fx_get(f, c, "grad.x", dtype), rtol, rtol);
  if (decoder) {
    snprintf(label, sizeof label, "%s (%s).grad.memory", c, lt_dtype_name(dtype));
    lt_fx_close(label, mem->grad, fx_get(f, c, "grad.memory", dtype), rtol, rtol);
  }
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *pr = lt_params_at(p, i);
    snprintf(key, sizeof key, "grad.param.%s", pr->name + strlen("layer."));
    snprintf(label, sizeof label, "%s (%s).%s", c, lt_dtype_name(dtype), key);
    lt_fx_close(label, pr->value->grad, fx_get(f, c, key, dtype), rtol, rtol);
  }
  lt_scope_end(s);
  lt_params_free(p);
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), live0);
  lt_fixture_free(f);
  lt_fx_done(c);
}

static const char *const CASES[] = {"enc_post", "enc_pre_gelu_causal", "dec_post", "dec_pre_gelu"};

START_TEST(test_parity_f64) { parity_case(CASES[_i], LT_DTYPE_F64, 1e-10); }
END_TEST

START_TEST(test_parity_f32) { parity_case(CASES[_i], LT_DTYPE_F32, 2e-5); }
END_TEST

/* ---- incremental decoding equals the whole sequence ------------------------------- */

START_TEST(test_cached_equals_full) {
  enum { B = 2, T = 6, S = 5, C = 16 };
  for (int decoder = 0; decoder < 2; decoder++) {
    const int64_t live0 = lt__live_tensors();
    lt_generator *g = lt_generator_new(7 + decoder);
    lt_params *p = lt_params_new();
    lt_transformer_layer L;
    lt_transformer_layer_opts o = LT_TRANSFORMER_LAYER_DEFAULTS(C, 4);
    o.d_ff = 32, o.norm_first = decoder, o.rope = true, o.n_kv_heads = 2, o.act = LT_ACT_GELU;
    LT_OK_OR_FAIL(decoder ? lt_transformer_decoder_layer_init(&L, p, "l", &o, g)
                          : lt_transformer_encoder_layer_init(&L, p, "l", &o, g));
    lt_scope *s = lt_scope_begin();
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, T, C)));
    lt_tensor *mem = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, S, C)));
    lt_attention_opts causal = {.causal = true};
    lt_tensor *full = decoder ? lt_transformer_decoder_layer_forward(&L, x, mem, &causal, NULL, 0, NULL)
                              : lt_transformer_encoder_layer_forward(&L, x, &causal, 0, NULL);
    ck_assert_msg(full, "%s", lt_last_error());
    lt_transformer_layer_cache cache;
    LT_OK_OR_FAIL(lt_transformer_layer_cache_init(&cache, T));
    /* a prefix of 2, then one position at a time */
    for (int64_t t0 = 0; t0 < T;) {
      const int64_t n = t0 == 0 ? 2 : 1;
      lt_tensor *xs = LT_NN(lt_narrow(x, 1, t0, n));
      lt_tensor *ys = lt_transformer_layer_forward_cached(&L, xs, t0 == 0 ? mem : NULL, &cache, &causal, NULL, t0);
      ck_assert_msg(ys, "%s", lt_last_error());
      char label[128];
      snprintf(label, sizeof label, "%s cached positions %lld..%lld", decoder ? "decoder" : "encoder",
               (long long)t0, (long long)(t0 + n - 1));
      lt_fx_close(label, ys, LT_NN(lt_narrow(full, 1, t0, n)), 1e-5, 1e-5);
      ck_assert_int_eq(cache.self.len, t0 + n);
      t0 += n;
    }
    /* full: one more position is refused and changes nothing */
    lt_tensor *one = LT_NN(lt_narrow(x, 1, 0, 1));
    ck_assert_ptr_null(lt_transformer_layer_forward_cached(&L, one, NULL, &cache, &causal, NULL, T));
    ck_assert_int_eq(cache.self.len, T);
    lt_transformer_layer_cache_free(&cache);
    lt_transformer_layer_cache_free(NULL);
    lt_set_grad_enabled(prev);
    lt_scope_end(s);
    lt_params_free(p);
    lt_generator_free(g);
    ck_assert_int_eq(lt__live_tensors(), live0); /* nothing leaked, post-norm (x read as is) or pre-norm */
  }
  lt_fx_done("cached");
}
END_TEST

/* ---- errors ---------------------------------------------------------------------- */

START_TEST(test_errors) {
  lt_generator *g = lt_generator_new(3);
  lt_params *p = lt_params_new();
  lt_transformer_layer L, E;
  lt_transformer_layer_opts o = LT_TRANSFORMER_LAYER_DEFAULTS(16, 4);
  o.d_ff = 8;
  LT_OK_OR_FAIL(lt_transformer_encoder_layer_init(&E, p, "enc", &o, g));
  const int n0 = lt_params_count(p);
  ck_assert_int_eq(n0, 4 * 2 + 2 * 2 + 2 * 2); /* q,k,v,out; linear1,2; norm1,2 (weight + bias each) */
  const lt_generator_state gs = lt_generator_get_state(g);
  struct {
    lt_transformer_layer_opts o;
    const char *msg;
  } bad[] = {
      {o, "n_heads 3 does not divide d_model 16"},
      {o, "n_kv_heads 3 does not divide n_heads 4"},
      {o, "dropout 1.5"},
      {o, "d_ff 0"},
      {o, "RoPE needs an even head size"},
      {o, "attn_scale -1"},
      {o, "norm 7"},
      {o, "norm_eps -1"},
  };
  bad[0].o.n_heads = 3;
  bad[1].o.n_kv_heads = 3;
  bad[2].o.dropout = 1.5;
  bad[3].o.d_ff = 0;
  bad[4].o.d_model = 12, bad[4].o.n_heads = 4, bad[4].o.rope = true; /* head size 3 */
  bad[5].o.attn_scale = -1;
  bad[6].o.norm = (lt_norm_kind)7;
  bad[7].o.norm_eps = -1;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    memset(&L, 0xab, sizeof L);
    lt_transformer_layer before = L;
    LT_EXPECT_ERR(lt_transformer_decoder_layer_init(&L, p, "dec", &bad[i].o, g), LT_ERR_INVALID, bad[i].msg);
    ck_assert_int_eq(lt_params_count(p), n0); /* nothing registered */
    ck_assert(memcmp(&L, &before, sizeof L) == 0);
    lt_generator_state now = lt_generator_get_state(g);
    ck_assert(memcmp(&now, &gs, sizeof now) == 0);
  }
  /* a name taken half-way (norm1 exists) rolls back what the call registered */
  LT_OK_OR_FAIL(lt_layer_norm_init(&(lt_layer_norm_m){0}, p, "dup.norm1", 16, 1e-5, true));
  const int n1 = lt_params_count(p);
  ck_assert_int_ne(lt_transformer_encoder_layer_init(&L, p, "dup", &o, g), LT_OK);
  ck_assert_int_eq(lt_params_count(p), n1);
  lt_generator_state now = lt_generator_get_state(g);
  ck_assert(memcmp(&now, &gs, sizeof now) == 0);
  ck_assert_int_ne(lt_transformer_encoder_layer_init(&L, p, "x", NULL, g), LT_OK);

  lt_scope *s = lt_scope_begin();
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3, 16)));
  lt_tensor *x8 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3, 8)));
  lt_tensor *x64 = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2, 3, 16)));
  LT_EXPECT_NULL_ERR(lt_transformer_encoder_layer_forward(&E, x8, NULL, 0, NULL), LT_ERR_SHAPE, "[2,3,8]");
  LT_EXPECT_NULL_ERR(lt_transformer_encoder_layer_forward(&E, x64, NULL, 0, NULL), LT_ERR_DTYPE, "dtype f32");
  LT_EXPECT_NULL_ERR(lt_transformer_encoder_layer_forward(&E, NULL, NULL, 0, NULL), LT_ERR_NULL, "x");
  LT_EXPECT_NULL_ERR(lt_transformer_decoder_layer_forward(&E, x, x, NULL, NULL, 0, NULL), LT_ERR_INVALID,
                     "no cross-attention");
  lt_transformer_layer D;
  LT_OK_OR_FAIL(lt_transformer_decoder_layer_init(&D, p, "dec", &o, g));
  LT_EXPECT_NULL_ERR(lt_transformer_encoder_layer_forward(&D, x, NULL, 0, NULL), LT_ERR_INVALID, "needs the memory");
  LT_EXPECT_NULL_ERR(lt_transformer_decoder_layer_forward(&D, x, NULL, NULL, NULL, 0, NULL), LT_ERR_NULL, "memory");
  LT_EXPECT_NULL_ERR(lt_transformer_decoder_layer_forward(&D, x, x8, NULL, NULL, 0, NULL), LT_ERR_SHAPE, "memory");
  lt_transformer_layer_cache cache;
  LT_OK_OR_FAIL(lt_transformer_layer_cache_init(&cache, 4));
  LT_EXPECT_NULL_ERR(lt_transformer_layer_forward_cached(&D, x, NULL, &cache, NULL, NULL, 0), LT_ERR_NULL,
                     "cross-attention cache is empty");
  lt_transformer_layer_cache_free(&cache);
  lt_scope_end(s);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("transformer_layer");
  TCase *tc = tcase_create("layers");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_parity_f64, 0, (int)(sizeof CASES / sizeof *CASES));
  tcase_add_loop_test(tc, test_parity_f32, 0, (int)(sizeof CASES / sizeof *CASES));
  tcase_add_test(tc, test_cached_equals_full);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
