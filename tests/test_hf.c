/*
 * tests/test_hf.c: models/transformer/hf.h. For tiny GPT-2 and Llama
 * configurations (Llama with GQA, tied and untied): export, then import,
 * gives bit-identical parameters and logits; GPT-2's merged c_attn and
 * Conv1D orientation are checked element by element; configurations that fit
 * neither layout are refused naming the option; damaged directories
 * (missing, extra and misshapen tensors, config keys libtensor cannot run,
 * non-finite weights) are refused and leave the model unchanged; config.json
 * values outside the configuration's range table (the one train's flags use)
 * are refused naming the key, before any arithmetic on them. The decoder
 * families' extras: Qwen2 (q/k/v biases), Mistral (a sliding window: a
 * one-layer RoPE model's last logits with window W equal the unwindowed
 * model's on the last W tokens, and the KV cache's steps equal the
 * whole-sequence decode) and RoPE scaling (Llama 3's, linear) round-trip
 * through config.json and the checkpoint's attributes.
 * tests/reference/test_hf_transformers.py checks them against transformers;
 * tests/interop/test_hf_torch.py checks the same directories against
 * PyTorch models written from the published descriptions.
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

static char tmp[] = "/tmp/lt_hf_XXXXXX";

static void tmp_make(void) {
  strcpy(tmp, "/tmp/lt_hf_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
}
static void tmp_remove(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}

static lt_tf_config gpt2_config(void) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 13, c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.n_dec_layers = 2, c.d_ff = 24, c.max_len = 16;
  c.act = LT_ACT_GELU_TANH, c.dropout = 0.0, c.pad_id = 0;
  return c;
}

static lt_tf_config llama_config(bool tied) {
  lt_tf_config c = gpt2_config();
  c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 20, c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU;
  c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.bias = false, c.tie_embeddings = tied, c.norm_eps = 1e-6;
  c.rope_base = 500.0, c.pad_id = -1;
  return c;
}

/* Logits of m on a fixed batch [2, 7]. */
static lt_tensor *logits(const lt_transformer *m) {
  const int64_t ids[] = {1, 5, 2, 12, 0, 7, 3, 4, 4, 9, 11, 6, 10, 2};
  lt_tensor *x = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){2, 7}, ids));
  lt_tensor *y = LT_NN(lt_transformer_decode(m, x, NULL, NULL, NULL, 0, NULL));
  lt_tensor_free(x);
  return y;
}

static void assert_bit_identical(const lt_tensor *a, const lt_tensor *b, const char *what) {
  ck_assert_int_eq(a->numel, b->numel);
  ck_assert_int_eq(a->dtype, b->dtype);
  ck_assert_msg(memcmp(a->data, b->data, (size_t)a->numel * lt_dtype_size(a->dtype)) == 0, "%s differ", what);
}

/* Export m (seeded init), import, compare every parameter and the logits bit for bit. */
static void round_trip(const lt_tf_config *c, lt_hf_family want) {
  lt_hf_family fam;
  LT_OK_OR_FAIL(lt_hf_family_of(c, &fam));
  ck_assert_int_eq(fam, want);
  lt_generator *g = lt_generator_new(7);
  lt_transformer *m = LT_NNP(lt_transformer_new(c, g));
  /* nonzero norms and biases, so that a swapped or missing one shows */
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(P); i++) LT_OK_OR_FAIL(lt_init_normal_(g, lt_params_at(P, i)->value, 0.1, 0.5));
  const char *dir = lt_test_join(tmp, lt_hf_family_name(want));
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  ck_assert(lt_hf_is_dir(dir));
  lt_tf_config back;
  LT_OK_OR_FAIL(lt_hf_read_config(dir, &back, &fam));
  ck_assert_int_eq(fam, want);
  ck_assert_int_eq(back.n_kv_heads, c->n_kv_heads);
  ck_assert_int_eq(back.tie_embeddings, c->tie_embeddings);
  ck_assert(back.norm_eps == c->norm_eps && back.rope_base == (c->pos == LT_TF_POS_ROPE ? c->rope_base : back.rope_base));
  ck_assert_int_eq(back.pad_id, c->pad_id);
  ck_assert_int_eq(back.qkv_bias, c->qkv_bias);
  ck_assert_int_eq(back.sliding_window, c->sliding_window);
  ck_assert_int_eq(back.rope_type, c->rope_type);
  if (c->rope_type != LT_ROPE_DEFAULT)
    ck_assert(back.rope_factor == c->rope_factor && back.rope_low_freq_factor == c->rope_low_freq_factor &&
              back.rope_high_freq_factor == c->rope_high_freq_factor &&
              back.rope_original_max_len == c->rope_original_max_len);
  lt_transformer *m2 = lt_hf_load(dir, 0);
  ck_assert_msg(m2 != NULL, "%s", lt_last_error());
  lt_params *P2 = lt_transformer_params(m2);
  ck_assert_int_eq(lt_params_count(P2), lt_params_count(P));
  for (int i = 0; i < lt_params_count(P); i++) {
    const lt_param *a = lt_params_at(P, i);
    assert_bit_identical(a->value, LT_NN(lt_params_find(P2, a->name)), a->name);
  }
  lt_tensor *y = logits(m), *y2 = logits(m2);
  assert_bit_identical(y, y2, "logits");
  printf("hf %s: %d tensors, logits [2,7,%lld] bit-identical after export and import\n", lt_hf_family_name(want),
         lt_params_count(P), (long long)c->vocab_size);

  if (want == LT_HF_GPT2) {
    /* c_attn.weight [C, 3C]: column o < C is q_proj's row o (Conv1D: x @ W) */
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    lt_st_file *f = LT_NNP(lt_st_open(path));
    ck_assert_str_eq(lt_st_metadata_get(f, "format"), "pt");
    lt_tensor *w = LT_NN(lt_st_tensor(f, lt_st_find(f, "transformer.h.1.attn.c_attn.weight"), LT_DTYPE_F32));
    const lt_tensor *q = lt_params_find(P, "decoder.layers.1.self_attn.q_proj.weight");
    const lt_tensor *v = lt_params_find(P, "decoder.layers.1.self_attn.v_proj.weight");
    const int64_t C = c->d_model;
    LT_ASSERT_SHAPE(w, C, 3 * C);
    const float *W = w->data, *Q = q->data, *V = v->data;
    for (int64_t o = 0; o < C; o++)
      for (int64_t j = 0; j < C; j++) {
        ck_assert(W[j * 3 * C + o] == Q[o * C + j]);
        ck_assert(W[j * 3 * C + 2 * C + o] == V[o * C + j]);
      }
    ck_assert_int_lt(lt_st_find(f, "lm_head.weight"), 0); /* tied: not written */
    lt_tensor_free(w);
    lt_st_close(f);
  }
  LT_FREE_ALL(y, y2);
  lt_transformer_free(m);
  lt_transformer_free(m2);
  lt_generator_free(g);
}

START_TEST(gpt2_round_trip) {
  lt_tf_config c = gpt2_config();
  round_trip(&c, LT_HF_GPT2);
}
END_TEST

START_TEST(llama_round_trip) {
  lt_tf_config c = llama_config(false);
  round_trip(&c, LT_HF_LLAMA);
  tmp_remove(), tmp_make();
  c = llama_config(true);
  round_trip(&c, LT_HF_LLAMA);
}
END_TEST

static lt_tf_config qwen2_config(bool tied) {
  lt_tf_config c = llama_config(tied);
  c.qkv_bias = true;
  return c;
}

static lt_tf_config mistral_config(int64_t window) {
  lt_tf_config c = llama_config(false);
  c.sliding_window = window;
  return c;
}

/* Llama 3's scaling with head size 4 (frequencies 1 and 1/500^(1/2)): wavelengths 6.3 (between L/high 2 and
 * L/low 8: blended) and 140 (above: divided by factor). */
static lt_tf_config llama3_config(void) {
  lt_tf_config c = llama_config(false);
  c.rope_type = LT_ROPE_LLAMA3, c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4;
  c.rope_original_max_len = 8;
  return c;
}

START_TEST(families_round_trip) {
  lt_tf_config c = qwen2_config(false);
  round_trip(&c, LT_HF_QWEN2);
  tmp_remove(), tmp_make();
  c = qwen2_config(true);
  round_trip(&c, LT_HF_QWEN2);
  tmp_remove(), tmp_make();
  c = mistral_config(3);
  round_trip(&c, LT_HF_MISTRAL);
  tmp_remove(), tmp_make();
  c = llama3_config();
  round_trip(&c, LT_HF_LLAMA);
  tmp_remove(), tmp_make();
  c = llama_config(true), c.rope_type = LT_ROPE_LINEAR, c.rope_factor = 2.5;
  round_trip(&c, LT_HF_LLAMA);
  /* Qwen2's biases are its q, k, v's only */
  c = qwen2_config(false);
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_params *P = lt_transformer_params(m);
  ck_assert_ptr_nonnull(lt_params_find(P, "decoder.layers.1.self_attn.v_proj.bias"));
  ck_assert_ptr_null(lt_params_find(P, "decoder.layers.1.self_attn.out_proj.bias"));
  ck_assert_ptr_null(lt_params_find(P, "decoder.layers.1.w1.bias"));
  int64_t n_params;
  LT_OK_OR_FAIL(lt_tf_config_size(&c, &n_params, NULL));
  ck_assert_int_eq(n_params, lt_params_numel(P, false));
  /* the checkpoint's attributes keep the new fields (and a checkpoint without them reads as none) */
  const lt_tf_config all[] = {qwen2_config(true), mistral_config(5), llama3_config()};
  for (int i = 0; i < 3; i++) {
    lt_ckpt_meta *meta = LT_NNP(lt_ckpt_meta_new());
    LT_OK_OR_FAIL(lt_tf_config_to_meta(&all[i], meta));
    lt_tf_config back;
    LT_OK_OR_FAIL(lt_tf_config_from_meta(meta, &back));
    ck_assert(back.qkv_bias == all[i].qkv_bias && back.sliding_window == all[i].sliding_window);
    ck_assert(back.rope_type == all[i].rope_type && back.rope_factor == all[i].rope_factor &&
              back.rope_original_max_len == all[i].rope_original_max_len);
    lt_ckpt_meta_free(meta);
  }
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* Mistral's window, by what it means: in one layer with RoPE (relative
 * positions), the last position's logits with window W are the unwindowed
 * model's on the last W tokens alone; and the KV cache, one token per step,
 * gives the whole-sequence decode's logits. */
START_TEST(sliding_window) {
  const int64_t W = 4, T = 11;
  lt_tf_config c = mistral_config(W);
  c.n_dec_layers = 1;
  lt_generator *g = lt_generator_new(5);
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_tf_config c0 = c;
  c0.sliding_window = 0;
  lt_transformer *m0 = LT_NNP(lt_transformer_new(&c0, g));
  lt_params *P = lt_transformer_params(m), *P0 = lt_transformer_params(m0);
  const bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < lt_params_count(P); i++) {
    LT_OK_OR_FAIL(lt_init_normal_(g, lt_params_at(P, i)->value, 0.0, 0.5));
    LT_OK_OR_FAIL(lt_copy_(lt_params_at(P0, i)->value, lt_params_at(P, i)->value));
  }
  lt_set_grad_enabled(prev);
  const int64_t ids[] = {1, 5, 2, 12, 0, 7, 3, 4, 4, 9, 11};
  lt_tensor *x = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, T}, ids));
  lt_tensor *tail = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, W}, ids + T - W));
  lt_tensor *y = LT_NN(lt_transformer_decode(m, x, NULL, NULL, NULL, 0, NULL));
  lt_tensor *y0 = LT_NN(lt_transformer_decode(m0, x, NULL, NULL, NULL, 0, NULL));
  lt_tensor *yt = LT_NN(lt_transformer_decode(m0, tail, NULL, NULL, NULL, 0, NULL));
  const int64_t V = c.vocab_size;
  const float *a = y->data, *b = yt->data, *f = y0->data;
  double d = 0, d_first = 0, d_full = 0;
  for (int64_t v = 0; v < V; v++) {
    d = fmax(d, fabs(a[(T - 1) * V + v] - b[(W - 1) * V + v]));
    d_first = fmax(d_first, fabs(a[(W - 1) * V + v] - f[(W - 1) * V + v])); /* before the window slides */
    d_full = fmax(d_full, fabs(a[(T - 1) * V + v] - f[(T - 1) * V + v]));
  }
  ck_assert_msg(d < 1e-5, "windowed last logits vs the last %lld tokens alone: max diff %g", (long long)W, d);
  ck_assert_msg(d_first < 1e-5, "the first W positions see no difference: max diff %g", d_first);
  ck_assert_msg(d_full > 1e-3, "the window changed nothing at the last position (%g)", d_full);
  /* the cache, token by token */
  lt_tf_cache *cache = LT_NNP(lt_tf_cache_new(m, T));
  double dc = 0;
  for (int64_t t = 0; t < T; t++) {
    lt_tensor *xt = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, 1}, ids + t));
    lt_tensor *yc = LT_NN(lt_transformer_decode_step(m, cache, xt, NULL, NULL));
    const float *cd = yc->data;
    for (int64_t v = 0; v < V; v++) dc = fmax(dc, fabs(cd[v] - a[t * V + v]));
    LT_FREE_ALL(xt, yc);
  }
  ck_assert_msg(dc < 1e-5, "cached steps vs whole sequence: max diff %g", dc);
  printf("hf mistral window %lld: last logits vs the last %lld tokens alone %.2e, cache vs whole %.2e, window's "
         "effect %.2e\n", (long long)W, (long long)W, d, dc, d_full);
  lt_tf_cache_free(cache);
  LT_FREE_ALL(x, tail, y, y0, yt);
  lt_transformer_free(m);
  lt_transformer_free(m0);
  lt_generator_free(g);
}
END_TEST

/* Sharded weights (model.safetensors.index.json): a directory split in two loads bit-identically, and an
 * index that disagrees with its shards, or points outside the directory, is refused naming what. */
START_TEST(sharded) {
  lt_tf_config c = qwen2_config(false);
  lt_generator *g = lt_generator_new(9);
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(P); i++) LT_OK_OR_FAIL(lt_init_normal_(g, lt_params_at(P, i)->value, 0.1, 0.5));
  const char *dir = lt_test_join(tmp, "sharded");
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  char one[600], ipath[600], a[600], b[600];
  snprintf(one, sizeof one, "%s/model.safetensors", dir);
  snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
  snprintf(a, sizeof a, "%s/model-00001-of-00002.safetensors", dir);
  snprintf(b, sizeof b, "%s/model-00002-of-00002.safetensors", dir);
  lt_st_file *f = LT_NNP(lt_st_open(one));
  const int n = lt_st_count(f), half = n / 2;
  const char **names = calloc((size_t)n, sizeof *names);
  lt_tensor **ts = calloc((size_t)n, sizeof *ts);
  char index[16384];
  int len = snprintf(index, sizeof index, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
  for (int i = 0; i < n; i++) {
    names[i] = lt_st_info(f, i)->name, ts[i] = LT_NN(lt_st_tensor(f, i, LT_DTYPE_F32));
    len += snprintf(index + len, sizeof index - (size_t)len, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                    i ? ", " : "", names[i], i < half ? 1 : 2);
  }
  snprintf(index + len, sizeof index - (size_t)len, "}}");
  const char *k[] = {"format"}, *v[] = {"pt"};
  LT_OK_OR_FAIL(lt_st_save(a, half, names, (const lt_tensor *const *)ts, 1, k, v));
  LT_OK_OR_FAIL(lt_st_save(b, n - half, names + half, (const lt_tensor *const *)ts + half, 1, k, v));
  lt_test_write_text(ipath, index);
  ck_assert_int_eq(unlink(one), 0);
  lt_transformer *m2 = lt_hf_load(dir, 0);
  ck_assert_msg(m2 != NULL, "%s", lt_last_error());
  lt_tensor *y = logits(m), *y2 = logits(m2);
  assert_bit_identical(y, y2, "logits from the shards");
  lt_transformer_free(m2);
  /* the size check sums the shards: a configuration larger than both is refused before building */
  lt_tf_config big = c;
  big.n_dec_layers = 40;
  LT_EXPECT_ERR(lt_hf_check_size(dir, &big, 0), LT_ERR_FORMAT, "the configuration describes");
  /* refusals, each naming the index and the tensor or shard */
  static const struct {
    const char *from, *to, *want;
    lt_status status;
  } bad[] = {
      {"model-00002-of-00002.safetensors\"}", "model-00003-of-00002.safetensors\"}", "shard 'model-00003-of-00002.safetensors': ", LT_ERR_IO},
      {"\"weight_map\"", "\"weight_mop\"", "key 'weight_map' is missing", LT_ERR_FORMAT},
      {"\"model-00001-of-00002.safetensors\"", "\"../model-00001-of-00002.safetensors\"", "a shard must be a file name", LT_ERR_FORMAT},
      {"\"model-00001-of-00002.safetensors\"", "\"/etc/passwd\"", "a shard must be a file name", LT_ERR_FORMAT},
      {"\"model-00001-of-00002.safetensors\"", "\"..\"", "a shard must be a file name", LT_ERR_FORMAT},
      {"\"model-00001-of-00002.safetensors\"", "\"a\\u0000b\"", "u0000 is not allowed", LT_ERR_FORMAT},
      {"\"model-00001-of-00002.safetensors\"", "7", "is not a string", LT_ERR_FORMAT},
      {"{\"metadata\"", "[{\"metadata\"", "not a JSON object", LT_ERR_FORMAT},
      {"\"metadata\": {\"total_size\": 0}", "\"metadata\": 3", "key 'metadata' is not an object", LT_ERR_FORMAT},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[16384 + 64];
    const char *at = strstr(index, bad[i].from);
    ck_assert_ptr_nonnull(at);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - index), index, bad[i].to, at + strlen(bad[i].from));
    lt_test_write_text(ipath, text);
    LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), bad[i].status, bad[i].want);
  }
  /* a tensor in both shards; a shard holding a tensor the map does not list; the map listing one no shard holds */
  lt_test_write_text(ipath, index);
  LT_OK_OR_FAIL(lt_st_save(b, n - half + 1, names + half - 1, (const lt_tensor *const *)ts + half - 1, 1, k, v));
  char want[512];
  snprintf(want, sizeof want, "tensor '%s' is in two shards, 'model-00001-of-00002.safetensors' and "
           "'model-00002-of-00002.safetensors'", names[half - 1]);
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, want);
  lt_tensor *extra = LT_NN(lt_zeros(LT_DTYPE_F32, 1, (int64_t[]){2}));
  lt_tensor *moved = ts[half - 1];
  names[half - 1] = "stowaway", ts[half - 1] = extra;
  LT_OK_OR_FAIL(lt_st_save(b, n - half + 1, names + half - 1, (const lt_tensor *const *)ts + half - 1, 1, k, v));
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, "holds tensor 'stowaway', which weight_map does not list");
  LT_OK_OR_FAIL(lt_st_save(b, n - half - 1, names + half + 1, (const lt_tensor *const *)ts + half + 1, 1, k, v));
  snprintf(want, sizeof want, "weight_map puts tensor '%s' in shard 'model-00002-of-00002.safetensors', which does "
           "not hold it", lt_st_info(f, half)->name);
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, want);
  /* neither file */
  ck_assert_int_eq(unlink(ipath), 0);
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_IO, "model.safetensors");
  printf("hf sharded: %d tensors in 2 shards load bit-identically; %zu + 4 inconsistent indexes refused\n", n,
         sizeof bad / sizeof bad[0]);
  ts[half - 1] = moved;
  for (int i = 0; i < n; i++) lt_tensor_free(ts[i]);
  free(ts);
  free(names);
  LT_FREE_ALL(y, y2, extra);
  lt_st_close(f);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

START_TEST(refusals) {
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  c.vocab_size = 10;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "exported as T5, which needs pre_norm"); /* the paper's post-norm */
  c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 10;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "act gelu_tanh");
  c = gpt2_config(), c.pos = LT_TF_POS_ROPE;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "pos learned; this model has pos rope");
  c = gpt2_config(), c.tie_embeddings = false;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "tie_embeddings");
  c = gpt2_config(), c.n_kv_heads = 1;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "n_kv_heads");
  c = gpt2_config(), c.pre_norm = false;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "pre_norm");
  c = llama_config(false), c.bias = true;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "bias false");
  c = llama_config(false), c.swiglu = false, c.act = LT_ACT_GELU;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "swiglu with act silu");
  c = llama_config(false), c.scale_embeddings = true;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "scale_embeddings");
  c = qwen2_config(false), c.sliding_window = 8;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "qkv_bias with sliding_window 8");
  c = gpt2_config(), c.sliding_window = 8;
  LT_EXPECT_ERR(lt_hf_family_of(&c, NULL), LT_ERR_INVALID, "sliding_window 0");
  c = gpt2_config(), c.qkv_bias = true;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "qkv_bias with bias");
  c = gpt2_config(), c.rope_type = LT_ROPE_LINEAR, c.rope_factor = 2;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "RoPE scaling needs pos rope");
  c = llama3_config(), c.rope_high_freq_factor = 0.5;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "need 0 < low < high");
  c = llama3_config(), c.rope_original_max_len = 0;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "original_max_len 0");
  c = llama_config(false), c.rope_type = LT_ROPE_LINEAR, c.rope_factor = 0;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "scaling factor 0");
  c = lt_tf_config_default(LT_TF_ENCODER_ONLY), c.vocab_size = 10, c.sliding_window = 4;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "only a decoder's self-attention slides");
  /* export refuses too, and writes nothing */
  c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 10;
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  const char *dir = lt_test_join(tmp, "no");
  LT_EXPECT_ERR(lt_hf_export(m, dir), LT_ERR_INVALID, "act gelu_tanh");
  ck_assert(!lt_hf_is_dir(dir));
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

START_TEST(damaged_directories) {
  lt_tf_config c = llama_config(false);
  lt_generator *g = lt_generator_new(3);
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  const char *dir = lt_test_join(tmp, "llama");
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  char wpath[600], cpath[600];
  snprintf(wpath, sizeof wpath, "%s/model.safetensors", dir);
  snprintf(cpath, sizeof cpath, "%s/config.json", dir);
  lt_st_file *f = LT_NNP(lt_st_open(wpath));
  const int n = lt_st_count(f);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  lt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  for (int i = 0; i < n; i++) names[i] = lt_st_info(f, i)->name, ts[i] = LT_NN(lt_st_tensor(f, i, LT_DTYPE_F32));
  lt_transformer *other = LT_NNP(lt_transformer_new(&c, g));
  lt_tensor *before = logits(other);
  /* one tensor missing */
  const char *k[] = {"format"}, *v[] = {"pt"};
  LT_OK_OR_FAIL(lt_st_save(wpath, n - 1, names + 1, (const lt_tensor *const *)ts + 1, 1, k, v));
  LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_INVALID, "is missing");
  /* one extra */
  lt_tensor *extra = LT_NN(lt_zeros(LT_DTYPE_F32, 1, (int64_t[]){2}));
  names[n] = "model.layers.0.self_attn.rotary_emb.inv_freq", ts[n] = extra;
  LT_OK_OR_FAIL(lt_st_save(wpath, n + 1, names, (const lt_tensor *const *)ts, 1, k, v));
  LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_INVALID, "'model.layers.0.self_attn.rotary_emb.inv_freq' is not part");
  /* one missing and one extra: both named in one message (issue 30, item 7) */
  LT_OK_OR_FAIL(lt_st_save(wpath, n, names + 1, (const lt_tensor *const *)ts + 1, 1, k, v));
  LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_INVALID, "1 tensor missing, 1 not in the layout");
  LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_INVALID, names[0]);
  LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_INVALID, "'model.layers.0.self_attn.rotary_emb.inv_freq' is not part");
  /* one misshapen: the first tensor transposed */
  lt_tensor *t0 = ts[0], *tt = LT_NN(lt_transpose(t0, 0, 1));
  ts[0] = tt;
  LT_OK_OR_FAIL(lt_st_save(wpath, n, names, (const lt_tensor *const *)ts, 1, k, v));
  LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_SHAPE, "shape [16,13] in the file");
  ts[0] = t0;
  /* a NaN, an infinity (issue 26, item 2): refused naming the tensor, before a value is written */
  for (int w = 0; w < 2; w++) {
    lt_tensor *bad = LT_NN(lt_clone(ts[w ? n - 1 : 0])), *keep = ts[w ? n - 1 : 0];
    ((float *)bad->data)[w ? bad->numel - 1 : 3] = w ? -INFINITY : NAN;
    ts[w ? n - 1 : 0] = bad;
    LT_OK_OR_FAIL(lt_st_save(wpath, n, names, (const lt_tensor *const *)ts, 1, k, v));
    char want[200];
    snprintf(want, sizeof want, "tensor '%s' holds %s at flat index %lld", names[w ? n - 1 : 0], w ? "-inf" : "NaN",
             (long long)(w ? bad->numel - 1 : 3));
    LT_EXPECT_ERR(lt_hf_load_params(dir, other), LT_ERR_NUMERIC, want);
    LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_NUMERIC, want);
    ts[w ? n - 1 : 0] = keep;
    lt_tensor_free(bad);
  }
  lt_tensor *after = logits(other);
  assert_bit_identical(before, after, "the model after failed loads");
  /* config keys libtensor cannot run */
  LT_OK_OR_FAIL(lt_st_save(wpath, n, names, (const lt_tensor *const *)ts, 1, k, v));
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"vocab_size\": 13, \"hidden_size\": 16, \"intermediate_size\": 20,"
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 16,"
                    "\"hidden_act\": \"gelu\"}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_INVALID, "key 'hidden_act' must be \"silu\"");
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"vocab_size\": 13, \"hidden_size\": 16, \"intermediate_size\": 20,"
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 16,"
                    "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_INVALID, "rope_scaling': key 'rope_type' \"dynamic\"");
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"vocab_size\": 13, \"hidden_size\": \"16\"}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, "key 'hidden_size' is not an integer");
  /* a configuration that claims more than the file holds is refused before the model is built */
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"vocab_size\": 13, \"hidden_size\": 16, \"intermediate_size\": 20,"
                    "\"num_hidden_layers\": 1000, \"num_attention_heads\": 4, \"max_position_embeddings\": 16}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_FORMAT, "the configuration describes");
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"vocab_size\": 13, \"hidden_size\": 16, \"intermediate_size\": 20,"
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                    "\"max_position_embeddings\": 16}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 1000), LT_ERR_NOMEM, "over the memory cap");
  lt_test_write_text(cpath, "{\"model_type\": \"umt5\"}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_INVALID, "model_type");
  lt_test_write_text(cpath, "{\"model_type\": \"gpt2\", \"vocab_size\": 13, \"n_embd\": 8, \"n_layer\": 1, \"n_head\": 2,"
                    "\"n_positions\": 8, \"activation_function\": \"relu\"}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_INVALID, "activation_function");
  /* the GPT-2 config, with llama weights: names missing */
  lt_test_write_text(cpath, "{\"model_type\": \"gpt2\", \"vocab_size\": 13, \"n_embd\": 8, \"n_layer\": 1, \"n_head\": 2,"
                    "\"n_positions\": 8}");
  LT_EXPECT_NULLP_ERR(lt_hf_load(dir, 0), LT_ERR_INVALID, "'transformer.wte.weight' (libtensor's embed.weight) is missing");
  for (int i = 0; i < n; i++) lt_tensor_free(ts[i]);
  free(ts);
  free(names);
  LT_FREE_ALL(extra, tt, before, after);
  lt_st_close(f);
  lt_transformer_free(m);
  lt_transformer_free(other);
  lt_generator_free(g);
}
END_TEST

/* Values of config.json that the command line refuses are refused from the
 * file, by the same table (LT_TF_CONFIG_RANGES): the message names the key,
 * the value and the field's range, before any arithmetic on the value (a
 * huge n_embd was 4 * n_embd, a signed overflow, first). Each value, set in
 * a configuration directly, fails lt_tf_config_validate too. */
START_TEST(config_ranges) {
  const char *dir = lt_test_join(tmp, "ranges");
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  char cpath[600];
  snprintf(cpath, sizeof cpath, "%s/config.json", dir);
  /* the smallest configurations of each layout, as key/value pairs; a case replaces one */
  static const char *const gpt2[][2] = {{"model_type", "\"gpt2\""}, {"vocab_size", "13"}, {"n_embd", "8"},
                                        {"n_layer", "1"}, {"n_head", "2"}, {"n_positions", "8"}};
  static const char *const llama[][2] = {{"model_type", "\"llama\""}, {"vocab_size", "13"}, {"hidden_size", "16"},
                                         {"intermediate_size", "20"}, {"num_hidden_layers", "2"},
                                         {"num_attention_heads", "4"}, {"max_position_embeddings", "16"}};
  static const struct {
    bool llama;
    const char *key, *value, *field, *want;
  } cases[] = {
      {false, "n_embd", "4611686018427387904", "d_model", "key 'n_embd' 4611686018427387904: d_model must be in [1, 65536]"},
      {false, "n_embd", "-8", "d_model", "key 'n_embd' -8: d_model must be in [1, 65536]"},
      {false, "n_inner", "9223372036854775807", "d_ff", "key 'n_inner' 9223372036854775807: d_ff must be in [1, 1048576]"},
      {false, "n_layer", "1025", "n_dec_layers", "key 'n_layer' 1025: n_dec_layers must be in [0, 1024]"},
      {false, "n_head", "0", "n_heads", "key 'n_head' 0: n_heads must be in [1, 4096]"},
      {false, "n_positions", "1099511627776", "max_len", "key 'n_positions' 1099511627776: max_len must be in [1, 1048576]"},
      {false, "layer_norm_epsilon", "0", "norm_eps", "key 'layer_norm_epsilon' 0: norm_eps must be in (0, 1]"},
      {false, "layer_norm_epsilon", "1e308", "norm_eps", "key 'layer_norm_epsilon' 1e+308: norm_eps must be in (0, 1]"},
      {false, "resid_pdrop", "1.5", "dropout", "key 'resid_pdrop' 1.5: dropout must be in [0, 1]"},
      {true, "rms_norm_eps", "0", "norm_eps", "key 'rms_norm_eps' 0: norm_eps must be in (0, 1]"},
      {true, "rope_theta", "1e308", "rope_base", "key 'rope_theta' 1e+308: rope_base must be in (1, 1000000000]"},
      {true, "rope_theta", "1", "rope_base", "key 'rope_theta' 1: rope_base must be in (1, 1000000000]"},
      {true, "max_position_embeddings", "1099511627776", "max_len", "max_len must be in [1, 1048576]"},
      {true, "num_key_value_heads", "4097", "n_kv_heads", "key 'num_key_value_heads' 4097: n_kv_heads must be in [1, 4096]"},
      {true, "attention_dropout", "-0.5", "dropout", "key 'attention_dropout' -0.5: dropout must be in [0, 1]"},
      {true, "head_dim", "4611686018427387904", NULL, "key 'head_dim' 4611686018427387904"},
  };
  const int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) {
    char text[1024];
    int len = snprintf(text, sizeof text, "{\"%s\": %s", cases[i].key, cases[i].value);
    const char *const(*base)[2] = cases[i].llama ? llama : gpt2;
    const int nb = cases[i].llama ? 7 : 6;
    for (int k = 0; k < nb; k++)
      if (strcmp(base[k][0], cases[i].key))
        len += snprintf(text + len, sizeof text - (size_t)len, ", \"%s\": %s", base[k][0], base[k][1]);
    snprintf(text + len, sizeof text - (size_t)len, "}");
    lt_test_write_text(cpath, text);
    lt_tf_config c;
    memset(&c, 0x5a, sizeof c);
    lt_tf_config before = c;
    LT_EXPECT_ERR(lt_hf_read_config(dir, &c, NULL), LT_ERR_INVALID, cases[i].want);
    ck_assert_msg(memcmp(&c, &before, sizeof c) == 0, "case %d: the output changed", i);
    if (!cases[i].field) continue;
    /* the same value set directly: lt_tf_config_validate refuses it by the same range */
    lt_tf_config d = cases[i].llama ? llama_config(false) : gpt2_config();
    double v = strtod(cases[i].value, NULL);
    if (!strcmp(cases[i].field, "d_model")) d.d_model = (int64_t)v;
    if (!strcmp(cases[i].field, "d_ff")) d.d_ff = INT64_MAX;
    if (!strcmp(cases[i].field, "n_dec_layers")) d.n_dec_layers = (int64_t)v;
    if (!strcmp(cases[i].field, "n_heads")) d.n_heads = (int64_t)v;
    if (!strcmp(cases[i].field, "n_kv_heads")) d.n_kv_heads = (int64_t)v;
    if (!strcmp(cases[i].field, "max_len")) d.max_len = (int64_t)v;
    if (!strcmp(cases[i].field, "norm_eps")) d.norm_eps = v;
    if (!strcmp(cases[i].field, "dropout")) d.dropout = v;
    if (!strcmp(cases[i].field, "rope_base")) d.rope_base = v;
    ck_assert_int_eq(lt_tf_config_validate(&d), LT_ERR_INVALID);
    const char *msg = lt_last_error();
    ck_assert_msg(strstr(msg, cases[i].field) && strstr(msg, strstr(cases[i].want, "must be in")), "case %d: %s", i,
                  msg);
  }
  /* the bounds themselves load */
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"vocab_size\": 13, \"hidden_size\": 16, \"intermediate_size\": 20, "
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"max_position_embeddings\": 16, "
                    "\"rms_norm_eps\": 1, \"rope_theta\": 1e9}");
  lt_tf_config c;
  LT_OK_OR_FAIL(lt_hf_read_config(dir, &c, NULL));
  ck_assert(c.norm_eps == 1.0 && c.rope_base == 1e9);
  /* the decoder families' keys: rope_parameters (transformers 5) and rope_scaling, Mistral's window, Qwen2's layers */
#define LLAMA_KEYS "\"vocab_size\": 13, \"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 2, " \
                   "\"num_attention_heads\": 4, \"max_position_embeddings\": 16"
  static const struct {
    const char *text, *want;
    lt_status status;
  } more[] = {
      {"{\"model_type\": \"mistral\", " LLAMA_KEYS ", \"sliding_window\": -1}",
       "key 'sliding_window' -1: sliding_window must be in [0, 1048576]", LT_ERR_INVALID},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 1e9}}",
       "rope_parameters': key 'factor' 1000000000: rope_factor must be in [0, 1024]", LT_ERR_INVALID},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 0}}",
       "scaling factor 0", LT_ERR_INVALID},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, "
       "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 8}}",
       "key 'low_freq_factor' is missing (rope_type \"llama3\" needs it)", LT_ERR_FORMAT},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, "
       "\"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 4611686018427387904}}",
       "key 'original_max_position_embeddings' 4611686018427387904: rope_original_max_len must be in", LT_ERR_INVALID},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_theta\": 10000, \"rope_parameters\": {\"rope_theta\": 500000}}",
       "differ", LT_ERR_INVALID},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2}}",
       "key 'rope_type' \"yarn\": libtensor runs", LT_ERR_INVALID},
      {"{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": [1]}", "key 'rope_parameters' is not an object",
       LT_ERR_FORMAT},
      {"{\"model_type\": \"qwen2\", " LLAMA_KEYS ", \"use_sliding_window\": true}", "key 'use_sliding_window' is true",
       LT_ERR_INVALID},
      {"{\"model_type\": \"qwen2\", " LLAMA_KEYS ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
       "key 'layer_types' entry 1", LT_ERR_INVALID},
      {"{\"model_type\": \"umt5\"}", "key 'model_type' \"umt5\": libtensor reads", LT_ERR_INVALID},
  };
  const int n_more = (int)(sizeof more / sizeof more[0]);
  for (int i = 0; i < n_more; i++) {
    lt_test_write_text(cpath, more[i].text);
    LT_EXPECT_ERR(lt_hf_read_config(dir, &c, NULL), more[i].status, more[i].want);
  }
  /* what loads: theta from rope_parameters alone (transformers 5 writes no rope_theta), Mistral's default window */
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", " LLAMA_KEYS ", \"rope_parameters\": {\"rope_theta\": 500000.0, "
                    "\"rope_type\": \"default\"}}");
  LT_OK_OR_FAIL(lt_hf_read_config(dir, &c, NULL));
  ck_assert(c.rope_base == 500000.0 && c.rope_type == LT_ROPE_DEFAULT);
  lt_test_write_text(cpath, "{\"model_type\": \"mistral\", " LLAMA_KEYS "}");
  lt_hf_family fam;
  LT_OK_OR_FAIL(lt_hf_read_config(dir, &c, &fam));
  ck_assert(fam == LT_HF_MISTRAL && c.sliding_window == 4096);
  lt_test_write_text(cpath, "{\"model_type\": \"mistral\", " LLAMA_KEYS ", \"sliding_window\": null}");
  LT_OK_OR_FAIL(lt_hf_read_config(dir, &c, &fam));
  ck_assert(fam == LT_HF_LLAMA && c.sliding_window == 0); /* no window: Llama's layout, exported as Llama */
#undef LLAMA_KEYS
  printf("hf: config_ranges: %d + %d cases refused\n", n, n_more);
}
END_TEST

/* eos/bos/pad/decoder_start from generation_config.json, else config.json. */
START_TEST(gen_ids) {
  const char *dir = lt_test_join(tmp, "gen");
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  char cpath[600], gpath[600];
  snprintf(cpath, sizeof cpath, "%s/config.json", dir);
  snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir);
  lt_hf_gen_ids g;
  LT_OK_OR_FAIL(lt_hf_read_gen_ids(dir, &g)); /* neither file: nothing known */
  ck_assert(g.n_eos == 0 && g.bos == -1 && g.pad == -1 && g.decoder_start == -1);
  lt_test_write_text(cpath, "{\"model_type\": \"llama\", \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": null}");
  LT_OK_OR_FAIL(lt_hf_read_gen_ids(dir, &g));
  ck_assert(g.n_eos == 1 && g.eos[0] == 2 && g.bos == 1 && g.pad == -1);
  /* Llama-3's list of end ids, in generation_config.json, wins over config.json */
  lt_test_write_text(gpath, "{\"eos_token_id\": [128001, 128008, 128009], \"pad_token_id\": 5, \"decoder_start_token_id\": 0}");
  LT_OK_OR_FAIL(lt_hf_read_gen_ids(dir, &g));
  ck_assert_int_eq(g.n_eos, 3);
  ck_assert(g.eos[0] == 128001 && g.eos[1] == 128008 && g.eos[2] == 128009);
  ck_assert(g.bos == 1 && g.pad == 5 && g.decoder_start == 0);
  static const struct {
    const char *json, *msg;
  } bad[] = {
      {"{\"eos_token_id\": \"</s>\"}", "key 'eos_token_id' must be an id or a list of ids in [0, 2^31)"},
      {"{\"eos_token_id\": [1, -2]}", "key 'eos_token_id' must be an id or a list of ids"},
      {"{\"eos_token_id\": []}", "lists 0 ids"},
      {"{\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}", "lists 9 ids (1 to 8)"},
      {"{\"bos_token_id\": [1]}", "key 'bos_token_id' must be an id, not a list"},
      {"{\"pad_token_id\": 4294967296}", "key 'pad_token_id' must be an id in [0, 2^31)"},
      {"[1]", "not a JSON object"},
      {"{", "not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lt_test_write_text(gpath, bad[i].json);
    lt_hf_gen_ids keep = {.n_eos = 42};
    LT_EXPECT_ERR(lt_hf_read_gen_ids(dir, &keep), LT_ERR_FORMAT, bad[i].msg);
    ck_assert_int_eq(keep.n_eos, 42);
  }
  lt_clear_error();
}
END_TEST

int main(void) {
  Suite *s = suite_create("hf");
  TCase *tc = LT_TEST_CASE(s, "hf", 120, gpt2_round_trip, llama_round_trip, families_round_trip, sliding_window,
                              sharded, refusals, damaged_directories, config_ranges, gen_ids);
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  return lt_test_run(s);
}
