/*
 * tests/test_load_quant.c: models loaded straight into a weight format
 * (models/transformer/load.h's .weights; nn/nn.h's lt_set_weight_format;
 * the construction calls of tensor/quant.h):
 *   - each format (bf16, Q8_0, Q4_0) from each origin (a Hugging Face
 *     directory of GPT-2's and Llama's layouts, a GGUF file, a checkpoint)
 *     gives the weights lt_params_quantize gives the f32 model, byte for
 *     byte, no quantized weight holds f32 memory, and greedy decoding gives
 *     the same tokens;
 *   - a GGUF Q8_0 (and Q4_0, BF16) file loaded in its own format keeps its
 *     blocks bit for bit;
 *   - bf16 products of M >= 16 rows on oneDNN (tensor/qgemm_bf16.c) against
 *     an f64 reference of the bf16-rounded operands, and a whole GPT-2
 *     loaded in bf16 against f32 within the bf16 tolerance
 *     (docs/decoding.md);
 *   - bad inputs are refused with a message: an unknown format, a weight
 *     that is not finite, rows out of range, blocks that are not whole.
 */
#include "checkpoint/checkpoint.h"
#include "checkpoint/gguf.h"
#include "models/transformer/generate.h"
#include "models/transformer/gguf_model.h"
#include "models/transformer/hf.h"
#include "models/transformer/load.h"
#include "models/transformer/config.h"
#include "models/transformer/transformer.h"
#include "tensor/dnnl_internal.h"
#include "tensor/quant.h"
#include "tensor/quant_internal.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmp[256];

static lt_tf_config gpt2_config(void) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 96, c.d_model = 64, c.n_heads = 2, c.n_kv_heads = 2, c.n_dec_layers = 2, c.d_ff = 128;
  c.max_len = 24, c.act = LT_ACT_GELU_TANH, c.dropout = 0.0, c.pad_id = -1;
  return c;
}

static lt_tf_config llama_config(void) {
  lt_tf_config c = gpt2_config();
  /* d_ff 80: rows of the down projection are not whole blocks (padded) */
  c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 80, c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU;
  c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.bias = false, c.tie_embeddings = false, c.norm_eps = 1e-6;
  return c;
}

static lt_transformer *random_model(const lt_tf_config *c) {
  lt_generator *g = lt_generator_new(5);
  lt_transformer *m = LT_NNP(lt_transformer_new(c, g));
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(P); i++) LT_OK_OR_FAIL(lt_init_normal_(g, lt_params_at(P, i)->value, 0.0, 0.3));
  lt_generator_free(g);
  return m;
}

static lt_tf_loaded load(const char *path, lt_qformat f) {
  lt_tf_load_opts o = LT_TF_LOAD_DEFAULTS;
  o.weights = f;
  lt_tf_loaded l;
  ck_assert_msg(lt_tf_load(path, &o, &l) == LT_OK, "%s as %s: %s", path, lt_qformat_name(f), lt_last_error());
  return l;
}

enum { N_NEW = 10 };

static void greedy(const lt_transformer *m, int64_t out[N_NEW]) {
  const int64_t prompt[] = {3, 17, 42, 5, 60};
  lt_tensor *x = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, 5}, prompt));
  lt_generate_opts d = lt_generate_defaults();
  d.strategy = LT_GENERATE_GREEDY, d.max_new = N_NEW, d.eos_id = -1;
  lt_tf_generate_opts dt = lt_tf_generate_defaults();
  lt_generate_result r = {0};
  const bool prev = lt_set_grad_enabled(false);
  LT_OK_OR_FAIL(lt_transformer_generate(m, NULL, NULL, x, &d, &dt, &r));
  lt_set_grad_enabled(prev);
  ck_assert_int_eq(r.tokens->shape[1], N_NEW);
  LT_OK_OR_FAIL(lt_tensor_read(r.tokens, LT_DTYPE_I64, out, N_NEW));
  lt_generate_result_free(&r);
  lt_tensor_free(x);
}

/* got (loaded as f) against want (loaded in f32, then lt_params_quantize(f)): every weight byte for
 * byte, every other parameter equal, the quantized ones without f32 memory, the same greedy tokens. */
static void expect_same(lt_transformer *want, lt_transformer *got, lt_qformat f, const char *what) {
  lt_params *W = lt_transformer_params(want), *G = lt_transformer_params(got);
  ck_assert_int_eq(lt_params_count(W), lt_params_count(G));
  int n_quantized = 0;
  for (int i = 0; i < lt_params_count(W); i++) {
    const lt_param *a = lt_params_at(W, i);
    const lt_tensor *b = lt_params_find(G, a->name);
    ck_assert_msg(b != NULL, "%s: %s missing", what, a->name);
    const lt_qmatrix *qa = lt_tensor_qmatrix(a->value), *qb = lt_tensor_qmatrix(b);
    ck_assert_msg((qa != NULL) == (qb != NULL), "%s: %s quantized in one model only", what, a->name);
    if (qa) {
      n_quantized++;
      ck_assert_int_eq(lt_qmatrix_format(qb), f);
      ck_assert_uint_eq(lt_qmatrix_bytes(qa), lt_qmatrix_bytes(qb));
      ck_assert_msg(memcmp(lt_qmatrix_data(qa), lt_qmatrix_data(qb), lt_qmatrix_bytes(qa)) == 0,
                    "%s: %s: the %s bytes differ from lt_params_quantize's", what, a->name, lt_qformat_name(f));
      ck_assert_msg(b->stride[0] == 0 && b->stride[1] == 0 && !b->requires_grad,
                    "%s: %s holds f32 memory or requires grad", what, a->name);
    } else {
      LT_ASSERT_CLOSE(b, a->value, 0, 0);
    }
  }
  ck_assert_int_gt(n_quantized, 4);
  int64_t ta[N_NEW], tb[N_NEW];
  greedy(want, ta);
  greedy(got, tb);
  for (int k = 0; k < N_NEW; k++) ck_assert_msg(ta[k] == tb[k], "%s: token %d: %lld, want %lld", what, k, (long long)tb[k], (long long)ta[k]);
}

static const lt_qformat FMTS[3] = {LT_QFORMAT_BF16, LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0};

/* Every format from path against f32-then-quantize from the same path. */
static void each_format(const char *path, const char *what) {
  for (int fi = 0; fi < 3; fi++) {
    lt_tf_loaded ref = load(path, LT_QFORMAT_F32), got = load(path, FMTS[fi]);
    LT_OK_OR_FAIL(lt_params_quantize(lt_transformer_params(ref.model), FMTS[fi], NULL, NULL));
    char w[128];
    snprintf(w, sizeof w, "%s as %s", what, lt_qformat_name(FMTS[fi]));
    expect_same(ref.model, got.model, FMTS[fi], w);
    lt_tf_loaded_free(&ref);
    lt_tf_loaded_free(&got);
  }
}

START_TEST(hf_directories) {
  const lt_tf_config cfgs[2] = {gpt2_config(), llama_config()};
  for (int c = 0; c < 2; c++) {
    lt_transformer *m = random_model(&cfgs[c]);
    char *dir = strdup(lt_test_join(tmp, c ? "llama" : "gpt2"));
    LT_OK_OR_FAIL(lt_hf_export(m, dir));
    each_format(dir, c ? "hf llama" : "hf gpt2");
    lt_transformer_free(m);
    free(dir);
  }
}
END_TEST

START_TEST(checkpoint) {
  lt_tf_config c = llama_config();
  lt_transformer *m = random_model(&c);
  char *path = strdup(lt_test_join(tmp, "model.h5"));
  lt_ckpt_meta *cm = LT_NNP(lt_ckpt_meta_new());
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, cm));
  LT_OK_OR_FAIL(lt_ckpt_save_params(path, lt_transformer_params(m), cm, NULL));
  lt_ckpt_meta_free(cm);
  each_format(path, "checkpoint");
  lt_transformer_free(m);
  free(path);
}
END_TEST

START_TEST(gguf_blocks) {
  const lt_tf_config cfgs[2] = {gpt2_config(), llama_config()};
  static const int types[3] = {LT_GGML_BF16, LT_GGML_Q8_0, LT_GGML_Q4_0};
  for (int c = 0; c < 2; c++) {
    lt_transformer *m = random_model(&cfgs[c]);
    for (int fi = 0; fi < 3; fi++) {
      char name[64];
      snprintf(name, sizeof name, "%s.%s.gguf", c ? "llama" : "gpt2", lt_qformat_name(FMTS[fi]));
      char *path = strdup(lt_test_join(tmp, name));
      LT_OK_OR_FAIL(lt_tf_gguf_export(m, path, types[fi], NULL, 0));
      /* in its own format: the file's blocks, bit for bit */
      lt_tf_loaded got = load(path, FMTS[fi]);
      lt_gguf_file *gf = LT_NNP(lt_gguf_open(path));
      static const char *const pairs[][2] = {{"token_embd.weight", "embed.weight"},
                                             {"blk.1.ffn_up.weight", NULL}, {"blk.0.attn_v.weight", NULL}};
      for (int k = 0; k < 3; k++) {
        const char *lt = pairs[k][1] ? pairs[k][1]
                         : k == 1 ? (c ? "decoder.layers.1.w3.weight" : "decoder.layers.1.linear1.weight")
                                  : "decoder.layers.0.self_attn.v_proj.weight";
        if (k == 2 && !c) continue; /* GPT-2's v is part of attn_qkv, checked below */
        const int ti = lt_gguf_find_tensor(gf, pairs[k][0]);
        ck_assert_msg(ti >= 0, "%s: no %s", name, pairs[k][0]);
        ck_assert_int_eq(lt_gguf_tensor(gf, ti)->type, types[fi]);
        const lt_qmatrix *q = lt_tensor_qmatrix(lt_params_find(lt_transformer_params(got.model), lt));
        ck_assert_msg(q && lt_qmatrix_bytes(q) == lt_gguf_tensor(gf, ti)->nbytes, "%s: %s", name, lt);
        ck_assert_msg(memcmp(lt_qmatrix_data(q), lt_gguf_tensor_data(gf, ti), lt_qmatrix_bytes(q)) == 0,
                      "%s: %s: not the file's blocks", name, lt);
      }
      if (c) { /* attn_q's rows in ggml's RoPE order: row (h, i, j) of the file is Hugging Face's (h, j, i) */
        const int ti = lt_gguf_find_tensor(gf, "blk.0.attn_q.weight");
        const lt_qmatrix *q =
            lt_tensor_qmatrix(lt_params_find(lt_transformer_params(got.model), "decoder.layers.0.self_attn.q_proj.weight"));
        ck_assert(q && ti >= 0);
        const int64_t HS = cfgs[c].d_model / cfgs[c].n_heads;
        const size_t rb = lt_qmatrix_row_bytes(q);
        for (int64_t h = 0; h < cfgs[c].n_heads; h++)
          for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < HS / 2; i++)
              ck_assert_msg(memcmp((const char *)lt_qmatrix_data(q) + (size_t)(h * HS + j * HS / 2 + i) * rb,
                                   (const char *)lt_gguf_tensor_data(gf, ti) + (size_t)(h * HS + 2 * i + j) * rb, rb) == 0,
                            "%s: attn_q row (%lld, %lld, %lld) not the file's blocks", name, (long long)h, (long long)i,
                            (long long)j);
      }
      if (!c) { /* attn_qkv's rows, split into q, k, v: k's blocks are the middle third */
        const int ti = lt_gguf_find_tensor(gf, "blk.0.attn_qkv.weight");
        const lt_qmatrix *q =
            lt_tensor_qmatrix(lt_params_find(lt_transformer_params(got.model), "decoder.layers.0.self_attn.k_proj.weight"));
        ck_assert(q && ti >= 0);
        ck_assert(memcmp(lt_qmatrix_data(q), (const char *)lt_gguf_tensor_data(gf, ti) + lt_qmatrix_bytes(q),
                         lt_qmatrix_bytes(q)) == 0);
      }
      lt_gguf_close(gf);
      /* and the same model as f32-then-quantize of the same file */
      lt_tf_loaded ref = load(path, LT_QFORMAT_F32);
      LT_OK_OR_FAIL(lt_params_quantize(lt_transformer_params(ref.model), FMTS[fi], NULL, NULL));
      expect_same(ref.model, got.model, FMTS[fi], name);
      lt_tf_loaded_free(&ref);
      lt_tf_loaded_free(&got);
      free(path);
    }
    /* an f32 file in each format: converted */
    char *path = strdup(lt_test_join(tmp, c ? "llama.f32.gguf" : "gpt2.f32.gguf"));
    LT_OK_OR_FAIL(lt_tf_gguf_export(m, path, LT_GGML_F32, NULL, 0));
    each_format(path, c ? "gguf llama f32" : "gguf gpt2 f32");
    free(path);
    lt_transformer_free(m);
  }
}
END_TEST

START_TEST(refused) {
  lt_tf_config c = gpt2_config();
  lt_transformer *m = random_model(&c);
  char *dir = strdup(lt_test_join(tmp, "bad"));
  /* a NaN in a weight: refused before any value is written, in every format */
  float *w = lt_params_find(lt_transformer_params(m), "decoder.layers.0.linear1.weight")->data;
  w[7] = 0.0f / 0.0f;
  LT_OK_OR_FAIL(lt_hf_export(m, dir));
  lt_tf_load_opts o = LT_TF_LOAD_DEFAULTS;
  lt_tf_loaded l;
  for (int fi = 0; fi < 3; fi++) {
    o.weights = FMTS[fi];
    LT_EXPECT_ERR(lt_tf_load(dir, &o, &l), LT_ERR_NUMERIC, "NaN");
    ck_assert(l.model == NULL);
  }
  o.weights = (lt_qformat)99;
  LT_EXPECT_ERR(lt_tf_load(dir, &o, &l), LT_ERR_INVALID, "unknown weight format 99");
  ck_assert_int_eq(lt_set_weight_format(LT_QFORMAT_F32), LT_QFORMAT_F32); /* the loader restored it */
  /* the construction calls */
  LT_EXPECT_NULLP_ERR(lt_qmatrix_new(LT_QFORMAT_F32, 2, 32), LT_ERR_INVALID, "not a quantized format");
  LT_EXPECT_NULLP_ERR(lt_qmatrix_new(LT_QFORMAT_Q8_0, -1, 32), LT_ERR_INVALID, "rows");
  lt_tensor *q = LT_NN(lt_quantized_zeros(LT_QFORMAT_Q8_0, 3, 40)); /* rows of 40: padded to 64 */
  lt_tensor *rows = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2, 40)));
  LT_OK_OR_FAIL(lt_tensor_qset_rows_(q, 1, rows));
  LT_EXPECT_ERR(lt_tensor_qset_rows_(q, 2, rows), LT_ERR_INDEX, "rows [2, 2 + 2) of t [3, 40] q8_0");
  lt_tensor *r32 = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2, 32)));
  LT_EXPECT_ERR(lt_tensor_qset_rows_(q, 0, r32), LT_ERR_SHAPE, "need [count, 40]");
  LT_EXPECT_ERR(lt_tensor_qset_blocks_(q, 0, 1, lt_qmatrix_data(lt_tensor_qmatrix(q))), LT_ERR_SHAPE,
                "not whole blocks of 32");
  LT_EXPECT_ERR(lt_tensor_qset_rows_(rows, 0, rows), LT_ERR_STATE, "not quantized");
  lt_tensor *y = LT_NN(lt_qmatrix_dequantize(lt_tensor_qmatrix(q)));
  const float *v = y->data;
  for (int k = 0; k < 40; k++) ck_assert(v[k] == 0.0f && fabsf(v[40 + k] - 1.0f) < 1e-3f && fabsf(v[80 + k] - 1.0f) < 1e-3f);
  lt_tensor *f = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(3, 41)));
  LT_EXPECT_ERR(lt_tensor_set_qmatrix_(f, LT_NNP(lt_qmatrix_new(LT_QFORMAT_BF16, 3, 40))), LT_ERR_SHAPE,
                "the weights are [3, 40] bf16");
  LT_FREE_ALL(q, rows, r32, y, f);
  lt_transformer_free(m);
  free(dir);
}
END_TEST

START_TEST(bf16_onednn) {
  if (!lt__dnnl_bf16_available()) {
    fprintf(stderr, "load_quant: oneDNN has no bf16 matmul on this CPU: the hand loop serves every product\n");
    return;
  }
  enum { M = 20, N = 48, K = 72 };
  lt_generator *g = LT_NNP(lt_generator_new(3));
  lt_tensor *w = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(N, K))), *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(M, K)));
  lt_tensor *bias = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(N)));
  lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(w, LT_QFORMAT_BF16));
  lt_tensor *y = LT_NN(lt_qmatrix_linear(x, q, bias)); /* M >= 16: oneDNN */
  const int64_t prev = lt__qgemm_bf16_min_rows(INT64_MAX);
  lt_tensor *yl = LT_NN(lt_qmatrix_linear(x, q, bias)); /* the hand loop, x in f32 */
  lt__qgemm_bf16_min_rows(prev);
  const float *xv = x->data, *bv = bias->data, *yv = y->data, *ylv = yl->data;
  const uint16_t *wb = lt_qmatrix_data(q);
  double worst = 0, worst_loop = 0;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double ref = bv[n], mag = fabs(bv[n]);
      for (int k = 0; k < K; k++) {
        const double t = (double)lt_f32_from_bf16(lt_bf16_from_f32(xv[m * K + k])) * lt_f32_from_bf16(wb[n * K + k]);
        ref += t, mag += fabs(t);
      }
      /* f32 sums of K products: a few ulps of the magnitude */
      const double e = fabs(yv[m * N + n] - ref) / mag, el = fabs(yv[m * N + n] - ylv[m * N + n]) / mag;
      if (e > worst) worst = e;
      if (el > worst_loop) worst_loop = el;
    }
  fprintf(stderr, "load_quant: bf16 on oneDNN: max |y - ref| / sum |terms| = %.2e; against the f32-activation loop %.2e\n",
          worst, worst_loop);
  ck_assert_msg(worst < 1e-5, "oneDNN bf16 product off the bf16 reference: %g", worst);
  ck_assert_msg(worst_loop < 1.0 / 128, "oneDNN bf16 product off the hand loop by more than x's rounding: %g", worst_loop);
  LT_FREE_ALL(w, x, bias, y, yl);
  lt_qmatrix_free(q);
  lt_generator_free(g);
}
END_TEST

/* Whole-model bf16: GPT-2 and Llama loaded in bf16 against f32, logits of a prompt of 2 x 12 tokens (24 rows:
 * oneDNN's path where it has bf16) within LT_BF16_LOGIT_TOL of the largest |logit| (docs/decoding.md). */
#define LT_BF16_LOGIT_TOL 0.03
START_TEST(bf16_model) {
  const lt_tf_config cfgs[2] = {gpt2_config(), llama_config()};
  for (int c = 0; c < 2; c++) {
    lt_transformer *m = random_model(&cfgs[c]);
    char *dir = strdup(lt_test_join(tmp, c ? "llama16" : "gpt216"));
    LT_OK_OR_FAIL(lt_hf_export(m, dir));
    lt_tf_loaded a = load(dir, LT_QFORMAT_F32), b = load(dir, LT_QFORMAT_BF16);
    int64_t ids[24];
    for (int k = 0; k < 24; k++) ids[k] = (k * 37 + 11) % 96;
    lt_tensor *x = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){2, 12}, ids));
    const bool prev = lt_set_grad_enabled(false);
    lt_tensor *la = LT_NN(lt_transformer_decode(a.model, x, NULL, NULL, NULL, 0, NULL));
    lt_tensor *lb = LT_NN(lt_transformer_decode(b.model, x, NULL, NULL, NULL, 0, NULL));
    lt_set_grad_enabled(prev);
    const float *va = la->data, *vb = lb->data;
    double amax = 0, dmax = 0;
    for (int64_t k = 0; k < la->numel; k++) {
      if (fabs(va[k]) > amax) amax = fabs(va[k]);
      if (fabs(va[k] - vb[k]) > dmax) dmax = fabs(va[k] - vb[k]);
    }
    fprintf(stderr, "load_quant: %s bf16 against f32: max |logit difference| %.4f, max |logit| %.3f (%.4f of it)\n",
            c ? "llama" : "gpt2", dmax, amax, dmax / amax);
    ck_assert_msg(dmax <= LT_BF16_LOGIT_TOL * amax, "bf16 logits off f32 by %g (max |logit| %g)", dmax, amax);
    LT_FREE_ALL(x, la, lb);
    lt_tf_loaded_free(&a);
    lt_tf_loaded_free(&b);
    lt_transformer_free(m);
    free(dir);
  }
}
END_TEST

static void tmp_make(void) { lt_test_mkdtemp(tmp, sizeof tmp, "load_quant"); }
static void tmp_remove(void) { lt_test_rmtree(tmp); }

int main(void) {
  Suite *s = suite_create("load_quant");
  TCase *tc = LT_TEST_CASE(s, "load_quant", 600, hf_directories, checkpoint, gguf_blocks, bf16_onednn, bf16_model,
                           refused);
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  return lt_test_run(s);
}
