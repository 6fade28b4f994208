/*
 * tests/test_attention.c: lt_scaled_dot_product_attention, lt_rope,
 * lt_sinusoidal_table and the lt_mha module.
 *
 * Attention is checked against a naive composition of tensor ops (lt_matmul,
 * lt_masked_fill, lt_softmax, ...: ref_sdpa below), forward values, returned
 * weights and the gradients of q, k, v through lt_backward, over MHA / GQA /
 * MQA, causal with S == T, S > T and S < T, bool / float / padding masks,
 * non-contiguous and expanded inputs, dropout (with the keep mask read back
 * from the returned weights) and zero-size shapes; fully masked rows give
 * zeros and no NaN forward and backward; GQA equals MHA on repeated k/v heads;
 * causal equals an explicit tril mask; the fused path against the unfused one.
 * RoPE: hand values, norm preservation, shift consistency (pos0) and its
 * backward against the formula written out element by element; the
 * sinusoidal table against hand values. The module against the same
 * computation written with lt_matmul. The per-op checks (values against an
 * f64 reference over layouts and dtypes, 1 vs 2 threads, error cases,
 * gradchecks) are the runner's: tests/opinfo_attention.inc.
 */
#include "autograd/internal.h"
#include "tensor/bf16dot_internal.h"
#include "tensor/autocast_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/paths_internal.h"
#include "test_util.h"
#include "util_layout.h"

#include "nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Forces the fused attention's tile kernel under autocast (the
 * attention_bf16 paths, tensor/paths.def), as LT_ATTENTION_BF16 does; a
 * kernel this CPU lacks leaves the rule (which then picks no kernel, the
 * per-tile path, as the switch would). LT__PATH_AUTO: back to the rule. */
static void force_tiles(lt__path p) {
  lt__path_force(LT__PATH_FAMILY_attention_bf16, p != LT__PATH_AUTO && lt__path_supported(p) ? p : LT__PATH_AUTO);
}

/* ---- helpers ------------------------------------------------------------- */

static lt_generator *gen;
static lt_scope *scope;

static void setup(void) {
  gen = lt_generator_new(42);
  ck_assert(gen);
  scope = lt_scope_begin();
  ck_assert(scope);
}
static void teardown(void) {
  lt_scope_end(scope);
  lt_generator_free(gen);
}

static lt_tensor *randn(lt_dtype dt, int ndim, const int64_t *shape) {
  return LT_NN(lt_randn(gen, dt, ndim, shape));
}

static lt_tensor *leaf(lt_tensor *t) {
  LT_OK_OR_FAIL(lt_requires_grad_(t, true));
  return t;
}

static bool all_finite(const lt_tensor *t) {
  int64_t n = t->numel;
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(v);
  ck_assert(lt_tensor_read(t, LT_DTYPE_F64, v, n) == LT_OK);
  bool ok = true;
  for (int64_t i = 0; i < n; i++) ok = ok && isfinite(v[i]);
  free(v);
  return ok;
}

static bool all_zero(const lt_tensor *t) {
  int64_t n = t->numel;
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(v);
  ck_assert(lt_tensor_read(t, LT_DTYPE_F64, v, n) == LT_OK);
  bool ok = true;
  for (int64_t i = 0; i < n; i++) ok = ok && v[i] == 0.0;
  free(v);
  return ok;
}

/* The naive composition attention is tested against (same contract):
 * k, v repeated per query head (expand + reshape), scores by lt_matmul,
 * masks by lt_masked_fill / lt_add, softmax with fully masked rows set to 0,
 * optional dropout multiplier drop [B,NH,T,S], then lt_matmul with v.
 * *p gets the probabilities (after drop) if p is not NULL. */
static lt_tensor *ref_sdpa(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                           const lt_attention_opts *o, const lt_tensor *drop, lt_tensor **p) {
  const int64_t B = q->shape[0], NH = q->shape[1], T = q->shape[2], HS = q->shape[3];
  const int64_t NKV = k->shape[1], S = k->shape[2], HSV = v->shape[3], G = NH / NKV;
  lt_tensor *kr = LT_NN(lt_reshape(LT_NN(lt_expand(LT_NN(lt_unsqueeze(k, 2)), LT_SHAPE(B, NKV, G, S, HS))),
                                   LT_SHAPE(B, NH, S, HS)));
  lt_tensor *vr = LT_NN(lt_reshape(LT_NN(lt_expand(LT_NN(lt_unsqueeze(v, 2)), LT_SHAPE(B, NKV, G, S, HSV))),
                                   LT_SHAPE(B, NH, S, HSV)));
  const double scale = o && o->scale > 0 ? o->scale : 1.0 / sqrt((double)HS);
  lt_tensor *sc = LT_NN(lt_mul_scalar(LT_NN(lt_matmul(q, LT_NN(lt_transpose(kr, -2, -1)))), scale));
  if (o && o->causal) {
    lt_tensor *tri = LT_NN(lt_tril(LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(T, S))), S - T));
    sc = LT_NN(lt_masked_fill(sc, LT_NN(lt_eq_scalar(tri, 0)), -INFINITY));
  }
  if (o && o->attn_mask) {
    if (o->attn_mask->dtype == LT_DTYPE_BOOL)
      sc = LT_NN(lt_masked_fill(sc, LT_NN(lt_eq_scalar(o->attn_mask, 0)), -INFINITY));
    else sc = LT_NN(lt_add(sc, LT_NN(lt_to_dtype(o->attn_mask, q->dtype))));
  }
  if (o && o->key_padding_mask) {
    const lt_tensor *kp = o->key_padding_mask;
    sc = LT_NN(lt_masked_fill(sc, LT_NN(lt_view(kp, LT_SHAPE(kp->shape[0], 1, 1, S))), -INFINITY));
  }
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *full = S ? LT_NN(lt_eq_scalar(LT_NN(lt_amax(sc, LT_DIMS(-1), true)), -INFINITY))
                      : LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(B, NH, T, 1)));
  lt_set_grad_enabled(prev);
  lt_tensor *pr = LT_NN(lt_masked_fill(LT_NN(lt_softmax(LT_NN(lt_masked_fill(sc, full, 0)), -1)), full, 0));
  if (drop) pr = LT_NN(lt_mul(pr, drop));
  if (p) *p = pr;
  return LT_NN(lt_matmul(pr, vr));
}

/* One configuration of the comparison with the reference. */
typedef struct cfg {
  int64_t B, NH, NKV, T, S, HS, HSV;
  bool causal;
  int mask;        /* 0 none; 1 bool [T,S]; 2 bool [B,1,T,S] with a full row; 3 f32 float [NH,T,S] with -inf */
  bool padding;    /* key_padding_mask [B,S]: last batch fully padded when B > 1, else the last key */
  bool q_trans;    /* q made as [B,T,NH,HS] and transposed */
  int k_kind;      /* 0 plain; 1 stepped slice along HS (BLIS cannot take it: copied); 2 expanded heads */
  bool v_expand;   /* v expanded along S (stride 0: copied) */
  bool g_trans;    /* the loss weights the transposed output (non-contiguous gradient) */
  double scale;
} cfg;

static lt_tensor *make_mask(const cfg *c, lt_dtype dt) {
  const int64_t B = c->B, NH = c->NH, T = c->T, S = c->S;
  if (c->mask == 1) {
    lt_tensor *u = LT_NN(lt_rand(gen, LT_DTYPE_F64, LT_SHAPE(T, S)));
    return LT_NN(lt_lt_scalar(u, 0.7));
  }
  if (c->mask == 2) {
    lt_tensor *u = LT_NN(lt_rand(gen, LT_DTYPE_F64, LT_SHAPE(B, 1, T, S)));
    lt_tensor *m = LT_NN(lt_lt_scalar(u, 0.6));
    for (int64_t s = 0; s < S; s++) LT_OK_OR_FAIL(lt_set(m, (int64_t[]){0, 0, T - 1, s}, 0));
    return m;
  }
  if (c->mask == 3) {
    lt_tensor *m = LT_NN(lt_to_dtype(randn(LT_DTYPE_F64, LT_SHAPE(NH, T, S)), LT_DTYPE_F32));
    LT_OK_OR_FAIL(lt_set(m, (int64_t[]){0, 0, 0}, -INFINITY));
    if (S > 1) LT_OK_OR_FAIL(lt_set(m, (int64_t[]){NH - 1, T - 1, 1}, -INFINITY));
    (void)dt;
    return m;
  }
  return NULL;
}

static lt_tensor *make_padding(const cfg *c) {
  if (!c->padding) return NULL;
  lt_tensor *m = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(c->B, c->S)));
  for (int64_t s = 0; s < c->S; s++)
    if (c->B > 1 || s == c->S - 1) LT_OK_OR_FAIL(lt_set(m, (int64_t[]){c->B - 1, s}, 1));
  return m;
}

/* Forward, weights and gradients of lt_scaled_dot_product_attention against
 * ref_sdpa for configuration c in dtype dt. */
static void check_cfg(cfg c, lt_dtype dt) {
  const int64_t B = c.B, NH = c.NH, NKV = c.NKV, T = c.T, S = c.S, HS = c.HS, HSV = c.HSV ? c.HSV : c.HS;
  lt_tensor *ql = leaf(c.q_trans ? randn(dt, LT_SHAPE(B, T, NH, HS)) : randn(dt, LT_SHAPE(B, NH, T, HS)));
  lt_tensor *kl = leaf(c.k_kind == 1   ? randn(dt, LT_SHAPE(B, NKV, S, 2 * HS))
                       : c.k_kind == 2 ? randn(dt, LT_SHAPE(B, 1, S, HS))
                                       : randn(dt, LT_SHAPE(B, NKV, S, HS)));
  lt_tensor *vl = leaf(c.v_expand ? randn(dt, LT_SHAPE(B, NKV, 1, HSV)) : randn(dt, LT_SHAPE(B, NKV, S, HSV)));
  lt_tensor *q = c.q_trans ? LT_NN(lt_transpose(ql, 1, 2)) : ql;
  lt_tensor *k = c.k_kind == 1   ? LT_NN(lt_slice(kl, 3, 0, 2 * HS, 2))
                 : c.k_kind == 2 ? LT_NN(lt_expand(kl, LT_SHAPE(B, NKV, S, HS)))
                                 : kl;
  lt_tensor *v = c.v_expand ? LT_NN(lt_expand(vl, LT_SHAPE(B, NKV, S, HSV))) : vl;
  lt_attention_opts o = {.causal = c.causal, .attn_mask = make_mask(&c, dt), .key_padding_mask = make_padding(&c),
                         .scale = c.scale};
  lt_tensor *w = NULL;
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, &w));
  LT_ASSERT_SHAPE(out, B, NH, T, HSV);
  LT_ASSERT_SHAPE(w, B, NH, T, S);
  ck_assert(out->dtype == dt && w->dtype == dt);
  ck_assert_msg(all_finite(out) && all_finite(w), "NaN or inf in the output or weights");
  lt_tensor *pref = NULL;
  lt_tensor *ref = ref_sdpa(q, k, v, &o, NULL, &pref);
  const double tol = dt == LT_DTYPE_F32 ? 1e-5 : 1e-12;
  LT_ASSERT_CLOSE(out, ref, tol, tol);
  LT_ASSERT_CLOSE(w, pref, tol, tol);

  /* Gradients: loss = sum(out * r), r random (on the transposed output when g_trans). */
  lt_tensor *r = randn(dt, LT_SHAPE(B, NH, T, HSV));
  lt_tensor *xs[3] = {ql, kl, vl}, *g1[3], *g2[3];
  for (int pass = 0; pass < 2; pass++) {
    lt_tensor *y = pass == 0 ? out : ref;
    if (c.g_trans) {
      y = LT_NN(lt_transpose(y, 1, 2));
      r = pass == 0 ? LT_NN(lt_contiguous(LT_NN(lt_transpose(r, 1, 2)))) : r;
    }
    lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(y, r)), 0, NULL, false));
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    for (int i = 0; i < 3; i++) {
      ck_assert_msg(xs[i]->grad, "input %d got no gradient", i);
      (pass == 0 ? g1 : g2)[i] = xs[i]->grad;
      lt_tensor_keep(xs[i]->grad);
      xs[i]->grad = NULL;
    }
  }
  const double gtol = dt == LT_DTYPE_F32 ? 1e-4 : 1e-11;
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(all_finite(g1[i]), "gradient %d has NaN or inf", i);
    LT_ASSERT_CLOSE(g1[i], g2[i], gtol, gtol);
    lt_tensor_free(g1[i]);
    lt_tensor_free(g2[i]);
  }
}

/* ---- fused against unfused ------------------------------------------------ */

static double max_abs(const lt_tensor *t) {
  double m = 0;
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(LT_NN(lt_to_dtype(t, LT_DTYPE_F64)))), 0, NULL, false)), &m));
  return m;
}

/* The fused path against the unfused one for c in dtype dt (neither asked
 * for weights, so each runs its own kernels), with dropout p drawn from the
 * same generator state: output and the gradients of sum(out * r) for q, k, v
 * agree within rtol of each tensor's largest element. */
static void check_fused(cfg c, lt_dtype dt, double p, double rtol) {
  const int64_t B = c.B, NH = c.NH, NKV = c.NKV, T = c.T, S = c.S, HS = c.HS, HSV = c.HSV ? c.HSV : c.HS;
  lt_tensor *ql = leaf(c.q_trans ? randn(dt, LT_SHAPE(B, T, NH, HS)) : randn(dt, LT_SHAPE(B, NH, T, HS)));
  lt_tensor *kl = leaf(randn(dt, LT_SHAPE(B, NKV, S, HS)));
  lt_tensor *vl = leaf(randn(dt, LT_SHAPE(B, NKV, S, HSV)));
  lt_tensor *q = c.q_trans ? LT_NN(lt_transpose(ql, 1, 2)) : ql;
  lt_tensor *r = randn(dt, LT_SHAPE(B, NH, T, HSV));
  lt_attention_opts o = {.causal = c.causal, .attn_mask = make_mask(&c, dt), .key_padding_mask = make_padding(&c),
                         .scale = c.scale, .dropout_p = p};
  lt_generator *dg = lt_generator_new(99);
  lt_nn_ctx train = {p > 0, dg};
  lt_tensor *xs[3] = {ql, kl, vl}, *res[2][4];
  uint64_t offsets[2];
  for (int pass = 0; pass < 2; pass++) {
    LT_OK_OR_FAIL(lt_generator_set_state(dg, (lt_generator_state){.seed = 99, .offset = 5}));
    o.impl = pass ? LT_ATTENTION_FUSED : LT_ATTENTION_UNFUSED;
    lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, kl, vl, &o, &train, NULL));
    ck_assert(out->grad_fn && out->grad_fn->op == (pass ? LT__OP_scaled_dot_product_attention_fused
                                                         : LT__OP_scaled_dot_product_attention));
    offsets[pass] = lt_generator_get_state(dg).offset;
    ck_assert_msg(all_finite(out), "NaN or inf in the %s output", pass ? "fused" : "unfused");
    LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(out, r)), 0, NULL, false)), NULL, false));
    res[pass][0] = out;
    for (int i = 0; i < 3; i++) {
      res[pass][1 + i] = lt_tensor_keep(xs[i]->grad);
      xs[i]->grad = NULL;
    }
  }
  ck_assert(offsets[0] == offsets[1]);
  static const char *what[] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; i++) {
    const double m = max_abs(res[0][i]);
    lt_test_assert_close(res[1][i], res[0][i], rtol, rtol * m, what[i], "unfused", __FILE__, __LINE__);
  }
  for (int i = 1; i < 4; i++) lt_tensor_free(res[0][i]), lt_tensor_free(res[1][i]);
  lt_generator_free(dg);
}

/* Odd sizes: T not a multiple of the 256-row tile, S of the 256-key tile,
 * head sizes 8 to 128, T = 1 (decoding), T != S (cross-attention, a KV
 * cache), GQA/MQA, every mask kind, a transposed q. */
static const cfg fused_cfgs[] = {
    {.B = 1, .NH = 2, .NKV = 2, .T = 67, .S = 67, .HS = 8, .causal = true},
    {.B = 2, .NH = 4, .NKV = 2, .T = 130, .S = 130, .HS = 16, .causal = true, .q_trans = true},
    {.B = 1, .NH = 2, .NKV = 1, .T = 1, .S = 200, .HS = 64},
    {.B = 1, .NH = 4, .NKV = 1, .T = 1, .S = 129, .HS = 64, .causal = true},
    {.B = 2, .NH = 2, .NKV = 2, .T = 5, .S = 300, .HS = 32, .padding = true},
    {.B = 1, .NH = 2, .NKV = 2, .T = 200, .S = 70, .HS = 128, .causal = true},
    {.B = 2, .NH = 2, .NKV = 2, .T = 65, .S = 129, .HS = 24, .mask = 1},
    {.B = 2, .NH = 4, .NKV = 2, .T = 40, .S = 150, .HS = 8, .mask = 2, .causal = true},
    {.B = 2, .NH = 2, .NKV = 2, .T = 64, .S = 128, .HS = 16, .mask = 3},
    {.B = 1, .NH = 2, .NKV = 2, .T = 3, .S = 4, .HS = 2, .HSV = 5, .scale = 0.3},
    {.B = 3, .NH = 2, .NKV = 1, .T = 70, .S = 140, .HS = 96, .padding = true, .causal = true},
    {.B = 1, .NH = 2, .NKV = 2, .T = 257, .S = 257, .HS = 64, .causal = true},
    /* MQA at batch 1: the backward splits the keys into chunks (3 and 2
     * here), each with its own partial dq */
    {.B = 1, .NH = 3, .NKV = 1, .T = 600, .S = 600, .HS = 16, .causal = true, .padding = true},
    {.B = 1, .NH = 2, .NKV = 1, .T = 270, .S = 520, .HS = 40, .mask = 1},
    /* causal T < S across key tiles: the rows' last visible key inside a
     * packed K^T tile (the f32 panel kernel once read such a tile with the
     * visible width instead of the packed one) */
    {.B = 1, .NH = 2, .NKV = 2, .T = 300, .S = 600, .HS = 32, .causal = true},
};
#define NFUSED ((int)(sizeof fused_cfgs / sizeof fused_cfgs[0]))

/* f32 at 1e-5; every third case with dropout 0.2. */
START_TEST(test_fused_vs_unfused_f32) { check_fused(fused_cfgs[_i], LT_DTYPE_F32, _i % 3 == 2 ? 0.2 : 0, 1e-5); }
END_TEST

START_TEST(test_fused_vs_unfused_f64) { check_fused(fused_cfgs[_i], LT_DTYPE_F64, _i % 3 == 1 ? 0.2 : 0, 1e-12); }
END_TEST

/* The attention paths forced (LT_ATTENTION=fused|unfused, or lt__path_force)
 * switch the default path; an explicit impl wins over them; weights always come from the unfused path;
 * the same rule under autocast. */
START_TEST(test_fused_switch) {
  lt_tensor *q = leaf(randn(LT_DTYPE_F32, LT_SHAPE(1, 2, 257, 8)));
  lt_tensor *qs = leaf(randn(LT_DTYPE_F32, LT_SHAPE(1, 2, 256, 8)));
  lt_attention_opts o = {.causal = true};
  lt__path_force(LT__PATH_FAMILY_attention, LT__PATH_AUTO);
  ck_assert(LT_NN(lt_scaled_dot_product_attention(q, q, q, &o, NULL, NULL))->grad_fn->op ==
            LT__OP_scaled_dot_product_attention_fused);
  /* one tile (T <= 256, S <= 256): unfused unless LT_ATTENTION=fused */
  ck_assert(LT_NN(lt_scaled_dot_product_attention(qs, qs, qs, &o, NULL, NULL))->grad_fn->op ==
            LT__OP_scaled_dot_product_attention);
  /* the same under autocast, whichever tile kernel would run */
  const lt_dtype was = lt_set_autocast(LT_DTYPE_BF16);
  static const lt__path tilek[] = {LT__PATH_attention_bf16_gemm, LT__PATH_attention_bf16_vdpbf16ps,
                                   LT__PATH_AUTO}; /* the per-tile path, vdpbf16ps, the best kernel */
  for (int i = 0; i < 3; i++) {
    force_tiles(tilek[i]);
    ck_assert(LT_NN(lt_scaled_dot_product_attention(qs, qs, qs, &o, NULL, NULL))->grad_fn->op ==
              LT__OP_scaled_dot_product_attention);
    ck_assert(LT_NN(lt_scaled_dot_product_attention(q, q, q, &o, NULL, NULL))->grad_fn->op ==
              LT__OP_scaled_dot_product_attention_fused);
  }
  force_tiles(LT__PATH_AUTO);
  lt_set_autocast(was);
  lt__path_force(LT__PATH_FAMILY_attention, LT__PATH_attention_fused);
  ck_assert(LT_NN(lt_scaled_dot_product_attention(qs, qs, qs, &o, NULL, NULL))->grad_fn->op ==
            LT__OP_scaled_dot_product_attention_fused);
  lt__path_force(LT__PATH_FAMILY_attention, LT__PATH_attention_unfused);
  ck_assert(LT_NN(lt_scaled_dot_product_attention(q, q, q, &o, NULL, NULL))->grad_fn->op ==
            LT__OP_scaled_dot_product_attention);
  o.impl = LT_ATTENTION_FUSED;
  ck_assert(LT_NN(lt_scaled_dot_product_attention(q, q, q, &o, NULL, NULL))->grad_fn->op ==
            LT__OP_scaled_dot_product_attention_fused);
  lt__path_force(LT__PATH_FAMILY_attention, LT__PATH_AUTO);
  lt_tensor *w = NULL;
  ck_assert(LT_NN(lt_scaled_dot_product_attention(q, q, q, &o, NULL, &w))->grad_fn->op ==
            LT__OP_scaled_dot_product_attention);
  ck_assert(w != NULL);
  lt_tensor_free(w);
  o.impl = (lt_attention_impl)7;
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(q, q, q, &o, NULL, NULL), LT_ERR_INVALID, "impl 7");
}
END_TEST

/* ---- attention: against the reference ------------------------------------ */

static const cfg cfgs[] = {
    {.B = 2, .NH = 2, .NKV = 2, .T = 5, .S = 7, .HS = 4},
    {.B = 2, .NH = 4, .NKV = 2, .T = 6, .S = 6, .HS = 3, .g_trans = true},              /* GQA */
    {.B = 3, .NH = 3, .NKV = 1, .T = 4, .S = 5, .HS = 2, .causal = true},               /* MQA causal S>T */
    {.B = 1, .NH = 2, .NKV = 2, .T = 6, .S = 6, .HS = 5, .causal = true},               /* causal S==T */
    {.B = 2, .NH = 2, .NKV = 1, .T = 6, .S = 3, .HS = 4, .causal = true},               /* causal S<T */
    {.B = 2, .NH = 2, .NKV = 2, .T = 4, .S = 5, .HS = 3, .mask = 1},                    /* bool [T,S] */
    {.B = 2, .NH = 4, .NKV = 2, .T = 4, .S = 5, .HS = 3, .mask = 2, .causal = true},    /* bool + full row */
    {.B = 2, .NH = 2, .NKV = 2, .T = 3, .S = 4, .HS = 3, .mask = 3},                    /* float (cast) */
    {.B = 3, .NH = 2, .NKV = 1, .T = 3, .S = 4, .HS = 2, .padding = true},              /* padding */
    {.B = 1, .NH = 2, .NKV = 2, .T = 3, .S = 4, .HS = 2, .padding = true, .mask = 3},
    {.B = 2, .NH = 4, .NKV = 2, .T = 5, .S = 6, .HS = 3, .q_trans = true, .g_trans = true},
    {.B = 2, .NH = 2, .NKV = 2, .T = 4, .S = 5, .HS = 3, .k_kind = 1, .v_expand = true},
    {.B = 2, .NH = 4, .NKV = 2, .T = 4, .S = 5, .HS = 3, .k_kind = 2, .causal = true},
    {.B = 1, .NH = 2, .NKV = 1, .T = 3, .S = 4, .HS = 2, .HSV = 5, .scale = 0.3},      /* HSV != HS */
    {.B = 2, .NH = 4, .NKV = 4, .T = 33, .S = 40, .HS = 16, .causal = true, .mask = 1}, /* parallel path */
    {.B = 4, .NH = 8, .NKV = 2, .T = 32, .S = 32, .HS = 32, .causal = true, .q_trans = true},
    {.B = 2, .NH = 2, .NKV = 1, .T = 300, .S = 100, .HS = 4, .causal = true, .padding = true}, /* empty block */
    {.B = 1, .NH = 2, .NKV = 2, .T = 145, .S = 300, .HS = 8, .causal = true, .mask = 3, .g_trans = true},
    {.B = 1, .NH = 4, .NKV = 2, .T = 260, .S = 260, .HS = 8, .causal = true, .q_trans = true},
};
#define NCFGS ((int)(sizeof cfgs / sizeof cfgs[0]))

START_TEST(test_vs_reference_f64) { check_cfg(cfgs[_i], LT_DTYPE_F64); }
END_TEST

START_TEST(test_vs_reference_f32) { check_cfg(cfgs[_i], LT_DTYPE_F32); }
END_TEST

/* Hand-computed: one query, two keys, HS 1, scale 1: weights softmax([1*1, 1*2]). */
START_TEST(test_hand_values) {
  lt_tensor *q = LT_NN(lt_full(LT_DTYPE_F64, LT_SHAPE(1, 1, 1, 1), 1.0));
  double kv[] = {1, 2}, vv[] = {10, 20};
  lt_tensor *k = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 1, 2, 1), kv));
  lt_tensor *v = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 1, 2, 1), vv));
  lt_attention_opts o = {.scale = 1.0};
  lt_tensor *w = NULL;
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, &w));
  const double e1 = exp(1.0), e2 = exp(2.0), p1 = e1 / (e1 + e2), p2 = e2 / (e1 + e2);
  LT_ASSERT_VALUES(w, 1e-15, p1, p2);
  LT_ASSERT_VALUES(out, 1e-13, 10 * p1 + 20 * p2);
  /* Default scale 1/sqrt(HS): HS 4 gives 1/2. */
  lt_tensor *q4 = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(1, 1, 1, 4)));
  lt_tensor *k4 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 1, 2, 4), (double[]){0, 0, 0, 0, 1, 1, 1, 1}));
  lt_tensor *v4 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 1, 2, 1), vv));
  lt_tensor *w4 = NULL;
  LT_NN(lt_scaled_dot_product_attention(q4, k4, v4, NULL, NULL, &w4));
  const double a = 1 / (1 + exp(2.0));
  LT_ASSERT_VALUES(w4, 1e-15, a, 1 - a);
}
END_TEST

/* Fully masked rows (bool mask, padding, causal S < T): zeros forward, zero
 * weights, finite gradients with zero rows of dq. */
START_TEST(test_fully_masked_rows) {
  const int64_t B = 2, NH = 2, T = 3, S = 4, HS = 2;
  lt_tensor *q = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NH, T, HS)));
  lt_tensor *k = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NH, S, HS)));
  lt_tensor *v = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NH, S, HS)));
  /* Row 1 masked everywhere by the bool mask; batch 1 all padding. */
  lt_tensor *m = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(T, S)));
  for (int64_t s = 0; s < S; s++) LT_OK_OR_FAIL(lt_set(m, (int64_t[]){1, s}, 0));
  lt_tensor *kp = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(B, S)));
  for (int64_t s = 0; s < S; s++) LT_OK_OR_FAIL(lt_set(kp, (int64_t[]){1, s}, 1));
  lt_attention_opts o = {.attn_mask = m, .key_padding_mask = kp};
  lt_tensor *w = NULL;
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, &w));
  ck_assert(all_finite(out) && all_finite(w));
  ck_assert(all_zero(LT_NN(lt_select(out, 0, 1))));          /* batch 1: padding everywhere */
  ck_assert(all_zero(LT_NN(lt_select(w, 0, 1))));
  ck_assert(all_zero(LT_NN(lt_select(LT_NN(lt_select(out, 0, 0)), 1, 1)))); /* batch 0, row 1 */
  ck_assert(all_zero(LT_NN(lt_select(LT_NN(lt_select(w, 0, 0)), 1, 1))));
  ck_assert(!all_zero(LT_NN(lt_select(LT_NN(lt_select(out, 0, 0)), 1, 0))));
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(out, randn(LT_DTYPE_F64, LT_SHAPE(B, NH, T, HS)))), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  ck_assert(all_finite(q->grad) && all_finite(k->grad) && all_finite(v->grad));
  ck_assert(all_zero(LT_NN(lt_select(q->grad, 0, 1))));
  ck_assert(all_zero(LT_NN(lt_select(k->grad, 0, 1))));
  ck_assert(all_zero(LT_NN(lt_select(v->grad, 0, 1))));
  ck_assert(all_zero(LT_NN(lt_select(LT_NN(lt_select(q->grad, 0, 0)), 1, 1))));

  /* Causal with S < T: the first T - S rows see no key. A float mask of -inf everywhere. */
  lt_tensor *q2 = leaf(randn(LT_DTYPE_F32, LT_SHAPE(1, 1, 5, 3)));
  lt_tensor *k2 = leaf(randn(LT_DTYPE_F32, LT_SHAPE(1, 1, 2, 3)));
  lt_tensor *v2 = leaf(randn(LT_DTYPE_F32, LT_SHAPE(1, 1, 2, 3)));
  lt_attention_opts oc = {.causal = true};
  lt_tensor *out2 = LT_NN(lt_scaled_dot_product_attention(q2, k2, v2, &oc, NULL, NULL));
  ck_assert(all_zero(LT_NN(lt_narrow(out2, 2, 0, 3))));
  ck_assert(!all_zero(LT_NN(lt_narrow(out2, 2, 3, 2))));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(out2, 0, NULL, false)), NULL, false));
  ck_assert(all_finite(q2->grad) && all_zero(LT_NN(lt_narrow(q2->grad, 2, 0, 3))));
  lt_tensor *ninf = LT_NN(lt_full(LT_DTYPE_F32, LT_SHAPE(5, 2), -INFINITY));
  lt_attention_opts of = {.attn_mask = ninf};
  lt_tensor *out3 = LT_NN(lt_scaled_dot_product_attention(q2, k2, v2, &of, NULL, NULL));
  ck_assert(all_zero(out3));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(out3, 0, NULL, false)), NULL, false));
  ck_assert(all_finite(q2->grad) && all_finite(k2->grad) && all_finite(v2->grad));
}
END_TEST

/* GQA equals MHA on k/v heads repeated (materialised) per query head. */
START_TEST(test_gqa_equals_repeated_mha) {
  const int64_t B = 2, NH = 6, NKV = 2, G = 3, T = 5, S = 7, HS = 4;
  lt_tensor *q = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NH, T, HS)));
  lt_tensor *k = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NKV, S, HS)));
  lt_tensor *v = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NKV, S, HS)));
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *kr = leaf(LT_NN(lt_clone(LT_NN(lt_reshape(LT_NN(lt_expand(LT_NN(lt_unsqueeze(k, 2)),
                                                                        LT_SHAPE(B, NKV, G, S, HS))),
                                                       LT_SHAPE(B, NH, S, HS))))));
  lt_tensor *vr = leaf(LT_NN(lt_clone(LT_NN(lt_reshape(LT_NN(lt_expand(LT_NN(lt_unsqueeze(v, 2)),
                                                                        LT_SHAPE(B, NKV, G, S, HS))),
                                                       LT_SHAPE(B, NH, S, HS))))));
  lt_set_grad_enabled(prev);
  lt_attention_opts o = {.causal = true};
  lt_tensor *a = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, NULL));
  lt_tensor *b = LT_NN(lt_scaled_dot_product_attention(q, kr, vr, &o, NULL, NULL));
  LT_ASSERT_CLOSE(a, b, 1e-14, 1e-14);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(a, 0, NULL, false)), NULL, false));
  lt_tensor *gq = lt_tensor_keep(q->grad);
  q->grad = NULL;
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(b, 0, NULL, false)), NULL, false));
  LT_ASSERT_CLOSE(gq, q->grad, 1e-13, 1e-13);
  lt_tensor_free(gq);
  /* dk of GQA = sum over the group of the repeated heads' gradients. */
  lt_tensor *gk = LT_NN(lt_sum(LT_NN(lt_view(kr->grad, LT_SHAPE(B, NKV, G, S, HS))), LT_DIMS(2), false));
  lt_tensor *gv = LT_NN(lt_sum(LT_NN(lt_view(vr->grad, LT_SHAPE(B, NKV, G, S, HS))), LT_DIMS(2), false));
  LT_ASSERT_CLOSE(k->grad, gk, 1e-13, 1e-13);
  LT_ASSERT_CLOSE(v->grad, gv, 1e-13, 1e-13);
}
END_TEST

/* causal equals an explicit mask tril(ones(T, S), S - T) (equal to tril when S == T). */
START_TEST(test_causal_equals_tril) {
  const int64_t TS[][2] = {{6, 6}, {3, 7}, {7, 3}, {1, 5}, {70, 70}, {40, 75}, {75, 40}, {200, 200}, {300, 130}};
  for (int c = 0; c < 9; c++) {
    const int64_t T = TS[c][0], S = TS[c][1];
    lt_tensor *q = randn(LT_DTYPE_F64, LT_SHAPE(2, 3, T, 4));
    lt_tensor *k = randn(LT_DTYPE_F64, LT_SHAPE(2, 3, S, 4));
    lt_tensor *v = randn(LT_DTYPE_F64, LT_SHAPE(2, 3, S, 4));
    lt_tensor *tri = LT_NN(lt_ne_scalar(LT_NN(lt_tril(LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(T, S))), S - T)), 0));
    lt_attention_opts oc = {.causal = true}, om = {.attn_mask = tri};
    lt_tensor *w1 = NULL, *w2 = NULL;
    lt_tensor *a = LT_NN(lt_scaled_dot_product_attention(q, k, v, &oc, NULL, &w1));
    lt_tensor *b = LT_NN(lt_scaled_dot_product_attention(q, k, v, &om, NULL, &w2));
    /* (causal skips the masked blocks, so the sums may group differently) */
    LT_ASSERT_CLOSE(a, b, 1e-14, 1e-14);
    LT_ASSERT_CLOSE(w1, w2, 1e-14, 1e-14);
    /* query t sees exactly keys s <= t + S - T */
    for (int64_t t = 0; t < T; t++)
      for (int64_t s = 0; s < S; s++) {
        double x;
        LT_OK_OR_FAIL(lt_get(w1, (int64_t[]){1, 2, t, s}, &x));
        ck_assert_msg((x > 0) == (s <= t + S - T), "T %lld S %lld: weight[%lld,%lld] = %g", (long long)T,
                      (long long)S, (long long)t, (long long)s, x);
      }
  }
}
END_TEST

/* The weights are returned whether or not a gradient is recorded, and the
 * output is the same along every internal path (scratch vs saved P). */
START_TEST(test_paths_agree) {
  lt_tensor *q = randn(LT_DTYPE_F32, LT_SHAPE(2, 4, 17, 8));
  lt_tensor *k = randn(LT_DTYPE_F32, LT_SHAPE(2, 2, 19, 8));
  lt_tensor *v = randn(LT_DTYPE_F32, LT_SHAPE(2, 2, 19, 8));
  lt_attention_opts o = {.causal = true, .impl = _i ? LT_ATTENTION_FUSED : LT_ATTENTION_UNFUSED};
  lt_tensor *a = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, NULL));
  lt_tensor *w = NULL;
  lt_tensor *b = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, &w)); /* weights: always unfused */
  lt_tensor *ql = leaf(LT_NN(lt_clone(q)));
  lt_tensor *c = LT_NN(lt_scaled_dot_product_attention(ql, k, v, &o, NULL, NULL));
  ck_assert(c->grad_fn != NULL && w->grad_fn == NULL && !w->requires_grad);
  if (_i) LT_ASSERT_CLOSE(a, b, 1e-5, 1e-6);
  else LT_ASSERT_SAME_BITS(a, b);
  LT_ASSERT_SAME_BITS(a, c);
  /* the output follows q's memory order: contiguous for a contiguous q, a
   * transpose of a contiguous [B,T,NH,HS] for q = transpose(x, 1, 2), so that
   * merging the heads needs no copy */
  ck_assert(lt_is_contiguous(a));
  lt_tensor *qt = LT_NN(lt_transpose(LT_NN(lt_contiguous(LT_NN(lt_transpose(q, 1, 2)))), 1, 2));
  lt_tensor *e = LT_NN(lt_scaled_dot_product_attention(qt, k, v, &o, NULL, NULL));
  ck_assert(!lt_is_contiguous(e) && lt_is_contiguous(LT_NN(lt_transpose(e, 1, 2))));
  LT_ASSERT_CLOSE(e, a, 0, 0);
  /* with an open no-grad mode nothing is recorded */
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *d = LT_NN(lt_scaled_dot_product_attention(ql, k, v, &o, NULL, NULL));
  lt_set_grad_enabled(prev);
  ck_assert(d->grad_fn == NULL);
  LT_ASSERT_SAME_BITS(a, d);
}
END_TEST

/* lt_test_same_on_threads callback: causal attention's output and the
 * gradients of sum(out * r) for q, k, v. */
typedef struct attn_ctx {
  lt_tensor *q, *k, *v, *r;
  lt_attention_impl impl;
  bool autocast; /* forward and backward under lt_set_autocast(LT_DTYPE_BF16) */
} attn_ctx;
static int attn_run(void *u, lt_tensor **res, int cap) {
  attn_ctx *c = u;
  lt_attention_opts o = {.causal = true, .impl = c->impl};
  const lt_dtype prev = lt_set_autocast(c->autocast ? LT_DTYPE_BF16 : LT_DTYPE_F32);
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(c->q, c->k, c->v, &o, NULL, NULL));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(out, c->r)), 0, NULL, false)), NULL, false));
  lt_set_autocast(prev);
  res[0] = out;
  res[1] = lt_tensor_keep(c->q->grad);
  res[2] = lt_tensor_keep(c->k->grad);
  res[3] = lt_tensor_keep(c->v->grad);
  c->q->grad = c->k->grad = c->v->grad = NULL;
  return 4;
}

/* Results do not depend on the thread count (one task per thread, or one
 * task with BLIS threads). */
START_TEST(test_thread_count_independent) {
  /* B NH NKV T HS; the last: MQA at batch 1, the backward's keys in 3 chunks */
  const int64_t shapes[][5] = {{2, 4, 2, 48, 32}, {1, 1, 1, 200, 32}, {2, 4, 2, 150, 64}, {1, 2, 1, 600, 16}};
  for (int c = 0; c < 8; c++) {
    const int impl = c % 2 ? LT_ATTENTION_FUSED : LT_ATTENTION_UNFUSED;
    const int64_t *sh = shapes[c / 2];
    const int64_t B = sh[0], NH = sh[1], NKV = sh[2], T = sh[3], HS = sh[4];
    attn_ctx ctx = {leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS))), leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, NKV, T, HS))),
                    leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, NKV, T, HS))), randn(LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS)),
                    impl, false};
    static const char *names[] = {"unfused, a task per thread", "fused, a task per thread", "unfused, one task",
                                  "fused, one task", "unfused, tiles", "fused, several tiles",
                                  "unfused, MQA", "fused, MQA, key chunks"};
    lt_test_same_on_threads(attn_run, &ctx, names[c]);
  }
  /* Under autocast every worker runs its tile products in bf16, as the
   * caller does (the fused path once left its other threads in f32); the
   * fused path's bf16 tile kernels (AMX, and vdpbf16ps forced by its path)
   * with a task per thread and with MQA key chunks. */
  static const int64_t ash[][5] = {{2, 4, 2, 300, 32}, {2, 4, 2, 300, 32}, {2, 4, 2, 300, 32}, {1, 2, 1, 600, 16}};
  static const char *anames[] = {"unfused, autocast", "fused, autocast", "fused, autocast, vdpbf16ps tiles",
                                 "fused, autocast, MQA key chunks"};
  for (int c = 0; c < 4; c++) {
    const int64_t B = ash[c][0], NH = ash[c][1], NKV = ash[c][2], T = ash[c][3], HS = ash[c][4];
    attn_ctx ctx = {leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS))), leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, NKV, T, HS))),
                    leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, NKV, T, HS))), randn(LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS)),
                    c ? LT_ATTENTION_FUSED : LT_ATTENTION_UNFUSED, true};
    if (c == 2) force_tiles(LT__PATH_attention_bf16_vdpbf16ps);
    lt_test_same_on_threads(attn_run, &ctx, anames[c]);
    force_tiles(LT__PATH_AUTO);
  }
}
END_TEST

/* ---- bf16 tiles under autocast --------------------------------------------- */

/* Output and the gradients of sum(out * r) for q, k, v (res[0..3]; the
 * gradients kept out of the scope: free them), in autocast mode ac. ctx: dropout (its generator is set to
 * st first, so every run draws the same mask), or NULL. */
static void sdpa4(lt_tensor *q, lt_tensor *k, lt_tensor *v, const lt_tensor *r, const lt_attention_opts *o,
                  const lt_nn_ctx *ctx, const lt_generator_state *st, bool ac, lt_tensor **res) {
  if (ctx) LT_OK_OR_FAIL(lt_generator_set_state(ctx->gen, *st));
  const lt_dtype prev = lt_set_autocast(ac ? LT_DTYPE_BF16 : LT_DTYPE_F32);
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, k, v, o, ctx, NULL));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(out, r)), 0, NULL, false)), NULL, false));
  lt_set_autocast(prev);
  lt_tensor *xs[3] = {q, k, v};
  res[0] = out;
  for (int i = 0; i < 3; i++) {
    res[i + 1] = lt_tensor_keep(xs[i]->grad);
    xs[i]->grad = NULL;
  }
}

/* |got - want| <= tol * max|want| for each of the four results. */
static void close4(lt_tensor **got, lt_tensor **want, double tol, const char *what) {
  static const char *names[4] = {"out", "dq", "dk", "dv"};
  for (int i = 0; i < 4; i++) {
    double m = 0;
    LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(want[i])), 0, NULL, false)), &m));
    char a[96];
    snprintf(a, sizeof a, "%s: %s", what, names[i]);
    lt_test_assert_close(got[i], want[i], 0, tol * (m > 0 ? m : 1), a, "reference", __FILE__, __LINE__);
  }
}

static bool same4(lt_tensor **a, lt_tensor **b) {
  bool same = true;
  for (int i = 0; i < 4; i++) same = same && lt_test_same_bits(a[i], b[i]);
  return same;
}

/* The fused path under autocast runs its tile products on bf16 operands
 * packed once per call (tensor/bf16dot.c: AMX where the CPU has it, else
 * vdpbf16ps; the attention_bf16 paths vdpbf16ps / gemm force the vdpbf16ps
 * kernel / the per-tile lt__mat_gemm path). Each of the three against the f32 result and
 * against the unfused path under autocast, within bf16 accuracy: 2% of the
 * largest element (operands rounded to 8 significant bits, relative error
 * 2^-9 each; f32 accumulation), output and the three gradients, across odd
 * sizes (T, S not multiples of a tile or of the kernels' 32, head sizes 7
 * and 24), every mask kind, GQA / MQA (with the backward's key chunks),
 * T != S (causal T > S: rows that see no key), T = 1 and dropout. The three bf16 paths differ in the order of
 * their f32 sums, so their bits differ: that shows each one ran. */
START_TEST(test_fused_bf16_tiles) {
  const lt_dtype was = lt_set_autocast(LT_DTYPE_BF16);
  const bool active = lt__autocast_active(); /* a bf16 matmul on this CPU */
  lt_set_autocast(was);
  if (!active) return; /* autocast leaves products in f32: nothing to compare */
  const lt__bf16dot_kind best = lt__bf16dot_best();
  typedef struct {
    int64_t B, NH, NKV, T, S, HS, HSV;
    bool causal;
    int mask; /* 0 none, 1 bool attn_mask, 2 float attn_mask, 3 key_padding_mask */
    double p;
  } bcase;
  static const bcase cases[] = {
      {2, 4, 2, 300, 300, 32, 32, true, 0, 0},   /* GQA, two query and key tiles */
      {1, 2, 1, 270, 520, 24, 24, false, 1, 0},  /* MQA at batch 1: key chunks; T != S; bool mask */
      {2, 2, 2, 257, 257, 7, 7, false, 3, 0},    /* odd head size, padding */
      {1, 2, 2, 600, 600, 64, 40, true, 2, 0.2}, /* float mask, dropout, HSV != HS, diagonal pieces */
      {2, 2, 1, 1, 300, 16, 16, true, 0, 0},     /* T = 1 (decoding) */
      {1, 2, 2, 600, 300, 32, 32, true, 3, 0},   /* causal T > S: the first rows see no key; padding */
  };
  lt_generator *dg = lt_generator_new(11);
  const lt_generator_state st = lt_generator_get_state(dg);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const bcase *b = &cases[c];
    lt_tensor *q = leaf(randn(LT_DTYPE_F32, LT_SHAPE(b->B, b->NH, b->T, b->HS)));
    lt_tensor *k = leaf(randn(LT_DTYPE_F32, LT_SHAPE(b->B, b->NKV, b->S, b->HS)));
    lt_tensor *v = leaf(randn(LT_DTYPE_F32, LT_SHAPE(b->B, b->NKV, b->S, b->HSV)));
    lt_tensor *r = randn(LT_DTYPE_F32, LT_SHAPE(b->B, b->NH, b->T, b->HSV));
    lt_attention_opts o = {.causal = b->causal, .dropout_p = b->p, .impl = LT_ATTENTION_FUSED};
    if (b->mask == 1) o.attn_mask = LT_NN(lt_gt_scalar(randn(LT_DTYPE_F32, LT_SHAPE(b->T, b->S)), -1.0));
    if (b->mask == 2) o.attn_mask = randn(LT_DTYPE_F32, LT_SHAPE(b->B, 1, b->T, b->S));
    if (b->mask == 3) o.key_padding_mask = LT_NN(lt_gt_scalar(randn(LT_DTYPE_F32, LT_SHAPE(b->B, b->S)), 1.0));
    lt_nn_ctx train = {true, dg};
    const lt_nn_ctx *ctx = b->p > 0 ? &train : NULL;
    lt_tensor *f32[4], *unf[4], *amx[4], *dot[4], *per[4];
    sdpa4(q, k, v, r, &o, ctx, &st, false, f32);
    lt_attention_opts ou = o;
    ou.impl = LT_ATTENTION_UNFUSED;
    sdpa4(q, k, v, r, &ou, ctx, &st, true, unf);
    force_tiles(LT__PATH_AUTO);
    sdpa4(q, k, v, r, &o, ctx, &st, true, amx);
    force_tiles(LT__PATH_attention_bf16_vdpbf16ps);
    sdpa4(q, k, v, r, &o, ctx, &st, true, dot);
    force_tiles(LT__PATH_attention_bf16_gemm);
    sdpa4(q, k, v, r, &o, ctx, &st, true, per);
    force_tiles(LT__PATH_AUTO);
    char what[96];
    snprintf(what, sizeof what, "case %zu, fused bf16 tiles (kernel %d) vs f32", c, (int)best);
    close4(amx, f32, 2e-2, what);
    snprintf(what, sizeof what, "case %zu, fused bf16 tiles vs unfused under autocast", c);
    close4(amx, unf, 2e-2, what);
    snprintf(what, sizeof what, "case %zu, vdpbf16ps tiles vs f32", c);
    close4(dot, f32, 2e-2, what);
    snprintf(what, sizeof what, "case %zu, per-tile lt__mat_gemm vs f32", c);
    close4(per, f32, 2e-2, what);
    /* each selection ran its own kernel (T = 1: one product row, sums may agree) */
    if (b->T > 1 && best >= LT__BF16DOT_DOT) ck_assert_msg(!same4(dot, per), "case %zu: dot = per-tile bits", c);
    if (b->T > 1 && best == LT__BF16DOT_AMX) ck_assert_msg(!same4(amx, dot), "case %zu: amx = dot bits", c);
    if (best == LT__BF16DOT_NONE) ck_assert(same4(amx, per));
    lt_tensor **all[5] = {f32, unf, amx, dot, per};
    for (int i = 0; i < 5; i++) LT_FREE_ALL(all[i][1], all[i][2], all[i][3]); /* the kept gradients */
  }
  lt_generator_free(dg);
  /* zero sizes through the packs: HS 0 (uniform weights: the mean of v), S 0 (zeros) */
  const lt_dtype was2 = lt_set_autocast(LT_DTYPE_BF16);
  const lt_attention_opts of = {.impl = LT_ATTENTION_FUSED};
  lt_tensor *qh = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1, 2, 3, 0)));
  lt_tensor *vh = randn(LT_DTYPE_F32, LT_SHAPE(1, 1, 4, 2));
  lt_tensor *oh = LT_NN(lt_scaled_dot_product_attention(qh, LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1, 1, 4, 0))), vh,
                                                        &of, NULL, NULL));
  LT_ASSERT_CLOSE(oh, LT_NN(lt_expand(LT_NN(lt_mean(vh, LT_DIMS(2), true)), LT_SHAPE(1, 2, 3, 2))), 1e-2, 1e-2);
  lt_tensor *q0 = randn(LT_DTYPE_F32, LT_SHAPE(1, 2, 3, 4)), *k0 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1, 1, 0, 4)));
  ck_assert(all_zero(LT_NN(lt_scaled_dot_product_attention(q0, k0, k0, &of, NULL, NULL))));
  lt_set_autocast(was2);
}
END_TEST

/* The sliding window (opts.window) equals causal attention with the
 * window's bool mask, key t + S - T - W < s <= t + S - T, on every path:
 * unfused and fused in f64 and f32, and the fused bf16 tiles under
 * autocast; output and the three gradients. The shapes put windows
 * smaller and larger than a 256-key tile, the width 1, T < S (a cache),
 * T > S (rows that see no key), GQA and MQA (the backward's key chunks),
 * padding and dropout, so whole key tiles are skipped in forward and in
 * both backwards. The mask runs the same tiles with nothing skipped. */
static lt_tensor *window_mask_of(int64_t T, int64_t S, int64_t W) {
  lt_tensor *m = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(T, S)));
  bool *d = m->data;
  for (int64_t t = 0; t < T; t++)
    for (int64_t s = 0; s < S; s++) d[t * S + s] = s <= t + S - T && s > t + S - T - W;
  return m;
}

START_TEST(test_sliding_window) {
  typedef struct {
    int64_t B, NH, NKV, T, S, HS, W;
    bool pad;
    double p;
  } wcase;
  static const wcase cases[] = {
      {1, 2, 1, 700, 700, 16, 100, false, 0}, /* MQA at batch 1: key chunks; window < a tile */
      {2, 2, 2, 600, 600, 8, 300, false, 0},  /* window > a tile */
      {1, 2, 2, 520, 520, 8, 1, false, 0},    /* each row sees itself only */
      {1, 2, 1, 5, 900, 16, 256, false, 0},   /* a cached step: T < S */
      {1, 2, 2, 600, 300, 8, 50, true, 0},    /* T > S: the first rows see no key; padding */
      {1, 2, 2, 640, 640, 24, 200, false, 0.2},
  };
  const lt_dtype was = lt_set_autocast(LT_DTYPE_BF16);
  const bool bf16 = lt__autocast_active();
  lt_set_autocast(was);
  lt_generator *dg = lt_generator_new(5);
  const lt_generator_state st = lt_generator_get_state(dg);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const wcase *w = &cases[c];
    for (int dt = 0; dt < 2; dt++) {
      const lt_dtype d = dt ? LT_DTYPE_F64 : LT_DTYPE_F32;
      lt_tensor *q = leaf(randn(d, LT_SHAPE(w->B, w->NH, w->T, w->HS)));
      lt_tensor *k = leaf(randn(d, LT_SHAPE(w->B, w->NKV, w->S, w->HS)));
      lt_tensor *v = leaf(randn(d, LT_SHAPE(w->B, w->NKV, w->S, w->HS)));
      lt_tensor *r = randn(d, LT_SHAPE(w->B, w->NH, w->T, w->HS));
      lt_attention_opts ow = {.causal = true, .window = w->W, .dropout_p = w->p};
      if (w->pad) ow.key_padding_mask = LT_NN(lt_gt_scalar(randn(LT_DTYPE_F32, LT_SHAPE(w->B, w->S)), 1.0));
      lt_attention_opts om = ow;
      om.window = 0, om.attn_mask = window_mask_of(w->T, w->S, w->W);
      lt_nn_ctx train = {true, dg};
      const lt_nn_ctx *ctx = w->p > 0 ? &train : NULL;
      const double tol = dt ? 1e-12 : 2e-5;
      for (int impl = 1; impl <= 2; impl++) {
        ow.impl = om.impl = (lt_attention_impl)impl;
        lt_tensor *a[4], *b[4];
        sdpa4(q, k, v, r, &ow, ctx, &st, false, a);
        sdpa4(q, k, v, r, &om, ctx, &st, false, b);
        char what[96];
        snprintf(what, sizeof what, "case %zu, %s %s: window vs its mask", c, lt_dtype_name(d),
                 impl == 1 ? "fused" : "unfused");
        close4(a, b, tol, what);
        LT_FREE_ALL(a[1], a[2], a[3], b[1], b[2], b[3]);
      }
      if (dt == 0 && bf16) { /* the bf16 tiles: the vdpbf16ps kernel (AMX where present), and per tile */
        ow.impl = om.impl = LT_ATTENTION_FUSED;
        for (int kind = 0; kind < 2; kind++) {
          if (kind) setenv("LT_ATTENTION_BF16", "0", 1);
          lt_tensor *a[4], *b[4];
          sdpa4(q, k, v, r, &ow, ctx, &st, true, a);
          sdpa4(q, k, v, r, &om, ctx, &st, true, b);
          char what[96];
          snprintf(what, sizeof what, "case %zu, bf16 tiles%s: window vs its mask", c, kind ? " (per tile)" : "");
          close4(a, b, 1e-2, what);
          LT_FREE_ALL(a[1], a[2], a[3], b[1], b[2], b[3]);
          unsetenv("LT_ATTENTION_BF16");
        }
      }
    }
  }
  lt_generator_free(dg);
}
END_TEST

/* ---- dropout ------------------------------------------------------------- */

START_TEST(test_dropout) {
  const int64_t B = 2, NH = 4, NKV = 2, T = 6, S = 7, HS = 3;
  const double p = 0.3;
  lt_tensor *q = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NH, T, HS)));
  lt_tensor *k = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NKV, S, HS)));
  lt_tensor *v = leaf(randn(LT_DTYPE_F64, LT_SHAPE(B, NKV, S, HS)));
  lt_attention_opts o = {.causal = true, .dropout_p = p};
  /* evaluation (ctx NULL or training false): no dropout */
  lt_tensor *plain = LT_NN(lt_scaled_dot_product_attention(q, k, v, &(lt_attention_opts){.causal = true}, NULL, NULL));
  lt_nn_ctx eval = {false, NULL};
  LT_ASSERT_SAME_BITS(plain, LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, NULL, NULL)));
  LT_ASSERT_SAME_BITS(plain, LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, &eval, NULL)));
  /* training: out = ref with the keep mask read back from the weights */
  lt_generator *dg = lt_generator_new(7);
  lt_nn_ctx train = {true, dg};
  lt_generator_state st0 = lt_generator_get_state(dg);
  lt_tensor *w = NULL;
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, k, v, &o, &train, &w));
  lt_generator_state st1 = lt_generator_get_state(dg);
  ck_assert_msg(st1.offset > st0.offset, "dropout did not draw from the generator");
  lt_tensor *drop = LT_NN(lt_mul_scalar(LT_NN(lt_to_dtype(LT_NN(lt_ne_scalar(w, 0)), LT_DTYPE_F64)), 1 / (1 - p)));
  lt_tensor *pw = NULL;
  lt_tensor *ref = ref_sdpa(q, k, v, &o, drop, &pw);
  LT_ASSERT_CLOSE(out, ref, 1e-12, 1e-12);
  LT_ASSERT_CLOSE(w, pw, 1e-12, 1e-12);
  ck_assert(!lt_test_same_bits(out, plain));
  lt_tensor *r = randn(LT_DTYPE_F64, LT_SHAPE(B, NH, T, HS));
  lt_tensor *xs[3] = {q, k, v}, *g1[3];
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(out, r)), 0, NULL, false)), NULL, false));
  for (int i = 0; i < 3; i++) {
    g1[i] = lt_tensor_keep(xs[i]->grad);
    xs[i]->grad = NULL;
  }
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(ref, r)), 0, NULL, false)), NULL, false));
  for (int i = 0; i < 3; i++) {
    LT_ASSERT_CLOSE(g1[i], xs[i]->grad, 1e-11, 1e-11);
    lt_tensor_free(xs[i]->grad);
    xs[i]->grad = NULL;
  }
  /* the same generator state gives the same draw (unfused), and the fused
   * path regenerates the same mask bits from the counters and advances the
   * generator as far */
  lt_attention_opts ou = o, of = o;
  ou.impl = LT_ATTENTION_UNFUSED;
  of.impl = LT_ATTENTION_FUSED;
  LT_OK_OR_FAIL(lt_generator_set_state(dg, st0));
  LT_ASSERT_SAME_BITS(out, LT_NN(lt_scaled_dot_product_attention(q, k, v, &ou, &train, NULL)));
  LT_OK_OR_FAIL(lt_generator_set_state(dg, st0));
  lt_tensor *fo = LT_NN(lt_scaled_dot_product_attention(q, k, v, &of, &train, NULL));
  ck_assert(lt_generator_get_state(dg).offset == st1.offset);
  LT_ASSERT_CLOSE(fo, out, 1e-12, 1e-12);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(fo, r)), 0, NULL, false)), NULL, false));
  for (int i = 0; i < 3; i++) {
    LT_ASSERT_CLOSE(xs[i]->grad, g1[i], 1e-11, 1e-11);
    lt_tensor_free(g1[i]);
  }
  /* p = 1 drops everything */
  lt_attention_opts o1 = {.dropout_p = 1.0};
  ck_assert(all_zero(LT_NN(lt_scaled_dot_product_attention(q, k, v, &o1, &train, NULL))));
  /* the kept fraction is about 1 - p */
  lt_tensor *qb = randn(LT_DTYPE_F32, LT_SHAPE(4, 4, 64, 8));
  lt_tensor *wb = NULL;
  LT_NN(lt_scaled_dot_product_attention(qb, qb, qb, &(lt_attention_opts){.dropout_p = p}, &train, &wb));
  double kept;
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_mean(LT_NN(lt_to_dtype(LT_NN(lt_ne_scalar(wb, 0)), LT_DTYPE_F64)), 0, NULL,
                                      false)),
                        &kept));
  ck_assert_msg(fabs(kept - (1 - p)) < 0.02, "kept fraction %g, expected about %g", kept, 1 - p);
  /* training with dropout needs a generator */
  lt_nn_ctx nogen = {true, NULL};
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(q, k, v, &o, &nogen, NULL), LT_ERR_NULL, "gen");
  lt_generator_free(dg);
}
END_TEST

/* ---- zero-size shapes ----------------------------------------------------- */

START_TEST(test_zero_size) {
  /* S == 0: every row is fully masked: zeros; gradients zeros */
  lt_tensor *q = leaf(randn(LT_DTYPE_F64, LT_SHAPE(2, 2, 3, 4)));
  lt_tensor *k = leaf(LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2, 1, 0, 4))));
  lt_tensor *v = leaf(LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2, 1, 0, 4))));
  lt_tensor *w = NULL;
  lt_tensor *out = LT_NN(lt_scaled_dot_product_attention(q, k, v, NULL, NULL, &w));
  LT_ASSERT_SHAPE(out, 2, 2, 3, 4);
  LT_ASSERT_SHAPE(w, 2, 2, 3, 0);
  ck_assert(all_zero(out));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(out, 0, NULL, false)), NULL, false));
  ck_assert(all_zero(q->grad));
  LT_ASSERT_SHAPE(k->grad, 2, 1, 0, 4);
  /* HS == 0: every score is 0, so the weights are uniform */
  lt_tensor *qh = leaf(LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(1, 2, 3, 0))));
  lt_tensor *kh = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(1, 1, 4, 0)));
  lt_tensor *vh = leaf(randn(LT_DTYPE_F64, LT_SHAPE(1, 1, 4, 2)));
  lt_tensor *wh = NULL;
  lt_tensor *oh = LT_NN(lt_scaled_dot_product_attention(qh, kh, vh, NULL, NULL, &wh));
  LT_ASSERT_CLOSE(wh, LT_NN(lt_full(LT_DTYPE_F64, LT_SHAPE(1, 2, 3, 4), 0.25)), 1e-15, 1e-15);
  LT_ASSERT_CLOSE(oh, LT_NN(lt_expand(LT_NN(lt_mean(vh, LT_DIMS(2), true)), LT_SHAPE(1, 2, 3, 2))), 1e-14, 1e-14);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(oh, 0, NULL, false)), NULL, false));
  LT_ASSERT_SHAPE(qh->grad, 1, 2, 3, 0);
  LT_ASSERT_CLOSE(vh->grad, LT_NN(lt_full(LT_DTYPE_F64, LT_SHAPE(1, 1, 4, 2), 1.5)), 1e-14, 1e-14);
  /* T == 0 and B == 0 */
  lt_tensor *q0 = randn(LT_DTYPE_F32, LT_SHAPE(1, 2, 0, 4));
  lt_tensor *k0 = randn(LT_DTYPE_F32, LT_SHAPE(1, 2, 5, 4));
  LT_ASSERT_SHAPE(LT_NN(lt_scaled_dot_product_attention(q0, k0, k0, NULL, NULL, NULL)), 1, 2, 0, 4);
  lt_tensor *qb = randn(LT_DTYPE_F32, LT_SHAPE(0, 2, 3, 4));
  lt_tensor *kb = randn(LT_DTYPE_F32, LT_SHAPE(0, 2, 5, 4));
  LT_ASSERT_SHAPE(LT_NN(lt_scaled_dot_product_attention(qb, kb, kb, &(lt_attention_opts){.causal = true}, NULL, NULL)),
                  0, 2, 3, 4);
}
END_TEST

/* ---- errors --------------------------------------------------------------- */

/* The error cases themselves (status and message, inputs unchanged) are the
 * runner's (tests/opinfo_attention.inc). Here: a failed call leaves the
 * weights out-parameter untouched, dropout_p out of range, and masks of
 * every broadcastable rank are accepted. */
START_TEST(test_errors) {
  lt_tensor *q = randn(LT_DTYPE_F32, LT_SHAPE(2, 4, 3, 8));
  lt_tensor *k = randn(LT_DTYPE_F32, LT_SHAPE(2, 2, 5, 8));
  lt_tensor *v = randn(LT_DTYPE_F32, LT_SHAPE(2, 2, 5, 8));
  lt_tensor *w = (lt_tensor *)&w; /* a sentinel: must stay untouched on failure */
  lt_tensor *const sentinel = w;
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(NULL, k, v, NULL, NULL, &w), LT_ERR_NULL, "q");
  lt_clear_error();
  lt_tensor *k3 = randn(LT_DTYPE_F32, LT_SHAPE(2, 3, 5, 8)); /* 4 % 3 != 0 */
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(q, k3, k3, NULL, NULL, &w), LT_ERR_SHAPE, "not a multiple");
  lt_tensor *m_bad = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(3, 4)));
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(q, k, v, &(lt_attention_opts){.attn_mask = m_bad}, NULL, &w),
                     LT_ERR_SHAPE, "does not broadcast");
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(q, k, v, &(lt_attention_opts){.dropout_p = 1.5}, NULL, &w),
                     LT_ERR_INVALID, "dropout_p");
  LT_EXPECT_NULL_ERR(lt_scaled_dot_product_attention(q, k, v, &(lt_attention_opts){.scale = NAN}, NULL, &w),
                     LT_ERR_INVALID, "scale");
  ck_assert(w == sentinel);
  /* a broadcastable mask of every rank works */
  lt_tensor *m_ok = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(2, 1, 1, 5)));
  LT_NN(lt_scaled_dot_product_attention(q, k, v, &(lt_attention_opts){.attn_mask = m_ok}, NULL, NULL));
  lt_tensor *m_1d = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(5)));
  LT_NN(lt_scaled_dot_product_attention(q, k, v, &(lt_attention_opts){.attn_mask = m_1d}, NULL, NULL));
}
END_TEST

/* ---- RoPE ----------------------------------------------------------------- */

/* The formula element by element, in double, on a [..., T, HS] tensor. */
static lt_tensor *rope_naive(const lt_tensor *x, int64_t pos0, double base, double sign) {
  const int nd = x->ndim;
  const int64_t T = x->shape[nd - 2], HS = x->shape[nd - 1], H = HS / 2, n = x->numel;
  double *a = malloc(sizeof(double) * (size_t)(n ? n : 1)), *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(a && y);
  ck_assert(lt_tensor_read(x, LT_DTYPE_F64, a, n) == LT_OK);
  for (int64_t r = 0; r < n / (HS ? HS : 1); r++) {
    const int64_t t = r % T;
    for (int64_t i = 0; i < H; i++) {
      const double th = (double)(pos0 + t) * pow(base, -2.0 * (double)i / (double)HS);
      const double c = cos(th), s = sign * sin(th), x1 = a[r * HS + i], x2 = a[r * HS + i + H];
      y[r * HS + i] = x1 * c - x2 * s;
      y[r * HS + i + H] = x2 * c + x1 * s;
    }
  }
  lt_tensor *out = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, nd, x->shape, y));
  free(a);
  free(y);
  return out;
}

/* Hand values (the runner checks lt_rope against the formula over shapes,
 * layouts, dtypes and threads: tests/opinfo_attention.inc). */
START_TEST(test_rope_values) {
  /* HS 2, pos 1, theta = 1: (1, 0) -> (cos 1, sin 1) */
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 1, 2, 2), (double[]){1, 0, 1, 0}));
  LT_ASSERT_VALUES(LT_NN(lt_rope(x, 0, 10000.0)), 1e-15, 1, 0, cos(1.0), sin(1.0));
  /* HS 4, base 100, pos 2: pairs (x0, x2) by 2 rad, (x1, x3) by 2/10 rad */
  lt_tensor *y = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 4), (double[]){1, 1, 0, 0}));
  LT_ASSERT_VALUES(LT_NN(lt_rope(y, 2, 100.0)), 1e-15, cos(2.0), cos(0.2), sin(2.0), sin(0.2));
}
END_TEST

START_TEST(test_rope_properties) {
  /* rotation preserves the norm of each (x_i, x_{i+H}) pair and of each row */
  lt_tensor *x = randn(LT_DTYPE_F64, LT_SHAPE(2, 2, 7, 6));
  lt_tensor *y = LT_NN(lt_rope(x, 3, 10000.0));
  lt_tensor *nx = LT_NN(lt_add(LT_NN(lt_square(LT_NN(lt_narrow(x, 3, 0, 3)))), LT_NN(lt_square(LT_NN(lt_narrow(x, 3, 3, 3))))));
  lt_tensor *ny = LT_NN(lt_add(LT_NN(lt_square(LT_NN(lt_narrow(y, 3, 0, 3)))), LT_NN(lt_square(LT_NN(lt_narrow(y, 3, 3, 3))))));
  LT_ASSERT_CLOSE(ny, nx, 1e-13, 1e-13);
  /* position 0 is the identity */
  LT_ASSERT_CLOSE(LT_NN(lt_narrow(LT_NN(lt_rope(x, 0, 10000.0)), 2, 0, 1)), LT_NN(lt_narrow(x, 2, 0, 1)), 0, 0);
  /* shifting: rope(x[..., 2:, :], pos0 2) == rope(x, 0)[..., 2:, :] */
  lt_tensor *full = LT_NN(lt_rope(x, 0, 10000.0));
  LT_ASSERT_CLOSE(LT_NN(lt_rope(LT_NN(lt_narrow(x, 2, 2, 5)), 2, 10000.0)), LT_NN(lt_narrow(full, 2, 2, 5)), 1e-14,
                  1e-14);
  /* relative: <rope(q, m), rope(k, n)> depends on m - n only */
  lt_tensor *q = randn(LT_DTYPE_F64, LT_SHAPE(1, 1, 1, 8)), *k = randn(LT_DTYPE_F64, LT_SHAPE(1, 1, 1, 8));
  double d1, d2;
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_sum(LT_NN(lt_mul(LT_NN(lt_rope(q, 7, 100.0)), LT_NN(lt_rope(k, 3, 100.0)))), 0,
                                     NULL, false)),
                        &d1));
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_sum(LT_NN(lt_mul(LT_NN(lt_rope(q, 14, 100.0)), LT_NN(lt_rope(k, 10, 100.0)))), 0,
                                     NULL, false)),
                        &d2));
  ck_assert_msg(fabs(d1 - d2) < 1e-12, "%g vs %g", d1, d2);
  /* non-contiguous inputs: a transposed view and a stepped slice of the last dim */
  lt_tensor *xt = LT_NN(lt_transpose(randn(LT_DTYPE_F32, LT_SHAPE(2, 5, 3, 4)), 1, 2));
  LT_ASSERT_CLOSE(LT_NN(lt_rope(xt, 4, 10000.0)), rope_naive(xt, 4, 10000.0, 1), 1e-5, 1e-5);
  lt_tensor *xs = LT_NN(lt_slice(randn(LT_DTYPE_F64, LT_SHAPE(2, 3, 4, 12)), 3, 1, 12, 2));
  LT_ASSERT_CLOSE(LT_NN(lt_rope(xs, 1, 10000.0)), rope_naive(xs, 1, 10000.0, 1), 1e-13, 1e-13);
  /* zero-size */
  LT_ASSERT_SHAPE(LT_NN(lt_rope(randn(LT_DTYPE_F32, LT_SHAPE(2, 0, 3, 4)), 0, 10000.0)), 2, 0, 3, 4);
  LT_ASSERT_SHAPE(LT_NN(lt_rope(randn(LT_DTYPE_F32, LT_SHAPE(2, 3, 0)), 0, 10000.0)), 2, 3, 0);
}
END_TEST

/* The gradient of sum(rope(x) * r) is the inverse rotation of r. */
START_TEST(test_rope_backward) {
  lt_tensor *x = leaf(randn(LT_DTYPE_F64, LT_SHAPE(2, 3, 5, 8)));
  lt_tensor *r = randn(LT_DTYPE_F64, LT_SHAPE(2, 3, 5, 8));
  lt_tensor *y = LT_NN(lt_rope(x, 9, 1000.0));
  ck_assert(y->grad_fn != NULL);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(y, r)), 0, NULL, false)), NULL, false));
  LT_ASSERT_CLOSE(x->grad, rope_naive(r, 9, 1000.0, -1), 1e-13, 1e-13);
  /* a gradient with zero strides (from sum) */
  lt_tensor_free(lt_tensor_keep(x->grad));
  x->grad = NULL;
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_rope(x, 9, 1000.0)), 0, NULL, false)), NULL, false));
  LT_ASSERT_CLOSE(x->grad, rope_naive(LT_NN(lt_ones_like(x)), 9, 1000.0, -1), 1e-13, 1e-13);
}
END_TEST

/* RoPE scaling: lt_rope_inv_freq against transformers' _compute_llama3_parameters written out here
 * (modeling_rope_utils.py, line by line), linear as base frequencies / factor; lt_rope_scaled's values against
 * the rotation by those frequencies; its backward by f64 gradcheck; bad scalings refused. */
static double hf_llama3_inv_freq(int64_t i, int64_t HS, double base, double factor, double low, double high,
                                 double L) {
  const double inv = 1.0 / pow(base, (double)(2 * i) / (double)HS), wavelen = 2 * 3.14159265358979323846 / inv;
  const double low_freq_wavelen = L / low, high_freq_wavelen = L / high;
  double f = wavelen > low_freq_wavelen ? inv / factor : inv;
  const double smooth = (L / wavelen - low) / (high - low), smoothed = (1 - smooth) * f / factor + smooth * f;
  if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) f = smoothed;
  return f;
}

static lt_tensor *rope_scaled_fn(int n, lt_tensor *const *in, void *user) {
  return lt_rope_scaled(in[0], 5, 10000.0, (const lt_rope_scaling *)user);
}

START_TEST(test_rope_scaled) {
  const lt_rope_scaling l3 = {.type = LT_ROPE_LLAMA3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                              .original_max_len = 64};
  const lt_rope_scaling lin = {.type = LT_ROPE_LINEAR, .factor = 2.5};
  const int64_t HS = 16;
  int kept = 0, scaled = 0, blended = 0;
  for (int64_t i = 0; i < HS / 2; i++) {
    const double inv = pow(10000.0, -2.0 * (double)i / (double)HS), got = lt_rope_inv_freq(i, HS, 10000.0, &l3);
    const double want = hf_llama3_inv_freq(i, HS, 10000.0, 8, 1, 4, 64);
    ck_assert_msg(fabs(got - want) <= 1e-15 * want, "pair %lld: %.17g vs %.17g", (long long)i, got, want);
    kept += got == inv, scaled += fabs(got - inv / 8) < 1e-18, blended += got != inv && fabs(got - inv / 8) >= 1e-18;
    ck_assert(lt_rope_inv_freq(i, HS, 10000.0, &lin) == inv / 2.5);
    ck_assert(lt_rope_inv_freq(i, HS, 10000.0, NULL) == inv);
  }
  ck_assert_msg(kept > 0 && scaled > 0 && blended > 0, "kept %d, scaled %d, blended %d", kept, scaled, blended);
  /* linear with factor f at position p is the unscaled rotation at p / f: p 5, f 2.5 -> position 2 */
  lt_tensor *x = randn(LT_DTYPE_F64, LT_SHAPE(2, 3, 1, 16));
  LT_ASSERT_CLOSE(LT_NN(lt_rope_scaled(x, 5, 10000.0, &lin)), rope_naive(x, 2, 10000.0, 1), 1e-14, 1e-14);
  /* llama3: pair i rotated by p * inv_freq(i) */
  lt_tensor *y = LT_NN(lt_rope_scaled(x, 5, 10000.0, &l3));
  double *xa = x->data, *ya = y->data;
  for (int64_t r = 0; r < 6; r++)
    for (int64_t i = 0; i < 8; i++) {
      const double th = 5 * hf_llama3_inv_freq(i, HS, 10000.0, 8, 1, 4, 64), a = xa[r * 16 + i], b = xa[r * 16 + i + 8];
      ck_assert(fabs(ya[r * 16 + i] - (a * cos(th) - b * sin(th))) < 1e-14);
      ck_assert(fabs(ya[r * 16 + i + 8] - (b * cos(th) + a * sin(th))) < 1e-14);
    }
  /* the default type is lt_rope itself */
  LT_ASSERT_CLOSE(LT_NN(lt_rope_scaled(x, 5, 10000.0, &(lt_rope_scaling){0})), LT_NN(lt_rope(x, 5, 10000.0)), 0, 0);
  /* f64 gradcheck of the scaled rotation's backward */
  lt_tensor *xl = leaf(randn(LT_DTYPE_F64, LT_SHAPE(1, 2, 4, 16)));
  LT_OK_OR_FAIL(lt_gradcheck(rope_scaled_fn, (void *)&l3, 1, &xl, NULL));
  LT_OK_OR_FAIL(lt_gradcheck(rope_scaled_fn, (void *)&lin, 1, &xl, NULL));
  /* refusals name the field */
  LT_EXPECT_NULL_ERR(lt_rope_scaled(x, 0, 10000.0, &(lt_rope_scaling){.type = LT_ROPE_LINEAR}), LT_ERR_INVALID,
                     "factor 0");
  LT_EXPECT_NULL_ERR(lt_rope_scaled(x, 0, 10000.0, &(lt_rope_scaling){.type = LT_ROPE_LLAMA3, .factor = 8,
                                                                      .low_freq_factor = 4, .high_freq_factor = 1,
                                                                      .original_max_len = 8}),
                     LT_ERR_INVALID, "low < high");
  LT_EXPECT_NULL_ERR(lt_rope_scaled(x, 0, 10000.0, &(lt_rope_scaling){.type = LT_ROPE_LLAMA3, .factor = 8,
                                                                      .low_freq_factor = 1, .high_freq_factor = 4}),
                     LT_ERR_INVALID, "original_max_len 0");
  LT_EXPECT_NULL_ERR(lt_rope_scaled(x, 0, 10000.0, &(lt_rope_scaling){.type = (lt_rope_type)7, .factor = 1}),
                     LT_ERR_INVALID, "scaling type 7");
}
END_TEST

/* ---- sinusoidal table ------------------------------------------------------ */

START_TEST(test_sinusoidal) {
  lt_tensor *pe = LT_NN(lt_sinusoidal_table(LT_DTYPE_F64, 3, 4));
  LT_ASSERT_SHAPE(pe, 3, 4);
  ck_assert(!pe->requires_grad);
  /* columns: sin(t), cos(t), sin(t/100), cos(t/100) since 10000^(2/4) = 100 */
  LT_ASSERT_VALUES(pe, 1e-15, 0, 1, 0, 1, sin(1.0), cos(1.0), sin(0.01), cos(0.01), sin(2.0), cos(2.0), sin(0.02),
                   cos(0.02));
  /* odd C: the last column is a sine; f32 */
  lt_tensor *p5 = LT_NN(lt_sinusoidal_table(LT_DTYPE_F32, 2, 5));
  ck_assert(p5->dtype == LT_DTYPE_F32);
  const double f1 = pow(10000.0, -2.0 / 5), f2 = pow(10000.0, -4.0 / 5);
  LT_ASSERT_VALUES(p5, 1e-7, 0, 1, 0, 1, 0, sin(1.0), cos(1.0), sin(f1), cos(f1), sin(f2));
  LT_ASSERT_SHAPE(LT_NN(lt_sinusoidal_table(LT_DTYPE_F32, 0, 8)), 0, 8);
  LT_ASSERT_SHAPE(LT_NN(lt_sinusoidal_table(LT_DTYPE_F32, 3, 0)), 3, 0);
  LT_EXPECT_NULL_ERR(lt_sinusoidal_table(LT_DTYPE_I32, 3, 4), LT_ERR_DTYPE, "f32");
  LT_EXPECT_NULL_ERR(lt_sinusoidal_table(LT_DTYPE_F32, -1, 4), LT_ERR_INVALID, ">= 0");
  LT_EXPECT_NULL_ERR(lt_sinusoidal_table((lt_dtype)99, 1, 4), LT_ERR_DTYPE, "invalid");
}
END_TEST

/* ---- the module ------------------------------------------------------------ */

/* x W^T + b written with lt_matmul (the reference for lt_linear_forward). */
static lt_tensor *ref_linear(const lt_tensor *x, const lt_tensor *w, const lt_tensor *b) {
  lt_tensor *y = LT_NN(lt_matmul(x, LT_NN(lt_transpose(w, 0, 1))));
  return b ? LT_NN(lt_add(y, b)) : y;
}

static lt_tensor *param(lt_params *p, const char *name) {
  lt_tensor *t = lt_params_find(p, name);
  ck_assert_msg(t != NULL, "parameter %s missing", name);
  return t;
}

START_TEST(test_mha_init) {
  lt_params *p = lt_params_new();
  ck_assert(p);
  lt_mha m;
  LT_OK_OR_FAIL(lt_mha_init(&m, p, "enc.attn", 12, 4, 2, true, 0.1, gen));
  ck_assert_int_eq(m.C, 12);
  ck_assert_int_eq(m.NH, 4);
  ck_assert_int_eq(m.NKV, 2);
  ck_assert_int_eq(m.HS, 3);
  ck_assert(!m.rope && m.rope_base == 10000.0 && m.dropout == 0.1);
  ck_assert_int_eq(lt_params_count(p), 8);
  LT_ASSERT_SHAPE(param(p, "enc.attn.q_proj.weight"), 12, 12);
  LT_ASSERT_SHAPE(param(p, "enc.attn.k_proj.weight"), 6, 12);
  LT_ASSERT_SHAPE(param(p, "enc.attn.v_proj.weight"), 6, 12);
  LT_ASSERT_SHAPE(param(p, "enc.attn.out_proj.weight"), 12, 12);
  LT_ASSERT_SHAPE(param(p, "enc.attn.k_proj.bias"), 6);
  ck_assert(param(p, "enc.attn.out_proj.bias") == m.out_proj.bias);
  ck_assert(param(p, "enc.attn.q_proj.weight") == m.q_proj.weight);
  /* nn.Linear init: |w| <= 1/sqrt(in) */
  double mx;
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(m.q_proj.weight)), 0, NULL, false)), &mx));
  ck_assert(mx > 0 && mx <= 1 / sqrt(12.0));
  lt_mha m2;
  LT_OK_OR_FAIL(lt_mha_init(&m2, p, "", 8, 2, 2, false, 0.0, gen));
  ck_assert(m2.q_proj.bias == NULL && lt_params_find(p, "q_proj.weight") == m2.q_proj.weight);
  /* errors */
  lt_mha m3;
  memset(&m3, 0x5a, sizeof m3);
  LT_EXPECT_ERR(lt_mha_init(&m3, p, "x", 10, 4, 4, true, 0.0, gen), LT_ERR_INVALID, "not a multiple of NH");
  LT_EXPECT_ERR(lt_mha_init(&m3, p, "x", 12, 4, 3, true, 0.0, gen), LT_ERR_INVALID, "not a multiple of NKV");
  LT_EXPECT_ERR(lt_mha_init(&m3, p, "x", 12, 0, 1, true, 0.0, gen), LT_ERR_INVALID, ">= 1");
  LT_EXPECT_ERR(lt_mha_init(&m3, p, "x", 12, 4, 4, true, 2.0, gen), LT_ERR_INVALID, "dropout");
  LT_EXPECT_ERR(lt_mha_init(&m3, p, "x", 12, 4, 4, true, 0.0, NULL), LT_ERR_NULL, "generator");
  ck_assert_int_eq(lt_params_count(p), 12);
  ck_assert(m3.C == 0x5a5a5a5a5a5a5a5a);
  /* RoPE: off by default (above), on with a theta; refused with an odd head size or a bad theta */
  LT_OK_OR_FAIL(lt_mha_set_rope(&m2, 500000.0));
  ck_assert(m2.rope && m2.rope_base == 500000.0);
  ck_assert_int_eq(lt_params_count(p), 12); /* no parameter added */
  LT_EXPECT_ERR(lt_mha_set_rope(&m, 10000.0), LT_ERR_INVALID, "head size 3");
  LT_EXPECT_ERR(lt_mha_set_rope(&m2, 0.0), LT_ERR_INVALID, "base 0");
  LT_EXPECT_ERR(lt_mha_set_rope(&m2, NAN), LT_ERR_INVALID, "finite");
  LT_EXPECT_ERR(lt_mha_set_rope(NULL, 1.0), LT_ERR_NULL, "m is NULL");
  ck_assert(!m.rope && m2.rope_base == 500000.0);
  lt_params_free(p);
}
END_TEST

/* The module against the same computation written out with lt_matmul,
 * views and ref_sdpa, forward and gradients of every parameter and input. */
static void check_mha(int64_t NH, int64_t NKV, bool rope, bool bias, int64_t T, int64_t S, int64_t pos0) {
  const int64_t B = 2, C = 24, HS = C / NH;
  lt_params *p = lt_params_new();
  lt_mha m;
  LT_OK_OR_FAIL(lt_mha_init(&m, p, "attn", C, NH, NKV, bias, 0.0, gen));
  lt_tensor *params[8];
  int np = lt_params_count(p);
  ck_assert_int_eq(np, bias ? 8 : 4);
  for (int i = 0; i < np; i++) params[i] = lt_params_at(p, i)->value;
  if (rope) LT_OK_OR_FAIL(lt_mha_set_rope(&m, 500.0)); /* nn/nn.h's documented way */
  ck_assert(m.rope == rope && m.rope_base == (rope ? 500.0 : 10000.0));
  lt_tensor *xq = leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, T, C)));
  lt_tensor *xkv = S == T ? xq : leaf(randn(LT_DTYPE_F32, LT_SHAPE(B, S, C)));
  lt_attention_opts o = {.causal = true};
  lt_tensor *w = NULL;
  lt_tensor *out = LT_NN(lt_mha_forward(&m, xq, xkv, &o, pos0, NULL, &w));
  LT_ASSERT_SHAPE(out, B, T, C);
  LT_ASSERT_SHAPE(w, B, NH, T, S);
  /* reference */
  lt_tensor *q = LT_NN(lt_transpose(LT_NN(lt_view(ref_linear(xq, m.q_proj.weight, m.q_proj.bias), LT_SHAPE(B, T, NH, HS))), 1, 2));
  lt_tensor *k = LT_NN(lt_transpose(LT_NN(lt_view(ref_linear(xkv, m.k_proj.weight, m.k_proj.bias), LT_SHAPE(B, S, NKV, HS))), 1, 2));
  lt_tensor *v = LT_NN(lt_transpose(LT_NN(lt_view(ref_linear(xkv, m.v_proj.weight, m.v_proj.bias), LT_SHAPE(B, S, NKV, HS))), 1, 2));
  if (rope) {
    q = LT_NN(lt_rope(q, pos0, 500.0));
    k = LT_NN(lt_rope(k, pos0 + T - S, 500.0));
  }
  lt_tensor *pw = NULL;
  lt_tensor *a = ref_sdpa(q, k, v, &o, NULL, &pw);
  lt_tensor *am = LT_NN(lt_reshape(LT_NN(lt_transpose(a, 1, 2)), LT_SHAPE(B, T, C)));
  lt_tensor *ref = ref_linear(am, m.out_proj.weight, m.out_proj.bias);
  LT_ASSERT_CLOSE(out, ref, 1e-5, 1e-5);
  LT_ASSERT_CLOSE(w, pw, 1e-5, 1e-5);
  /* gradients */
  lt_tensor *r = randn(LT_DTYPE_F32, LT_SHAPE(B, T, C));
  lt_tensor *xs[10], *g1[10];
  int nx = 0;
  for (int i = 0; i < np; i++) xs[nx++] = params[i];
  xs[nx++] = xq;
  if (xkv != xq) xs[nx++] = xkv;
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(out, r)), 0, NULL, false)), NULL, false));
  for (int i = 0; i < nx; i++) {
    ck_assert_msg(xs[i]->grad, "input %d got no gradient", i);
    g1[i] = lt_tensor_keep(xs[i]->grad);
    xs[i]->grad = NULL;
  }
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(ref, r)), 0, NULL, false)), NULL, false));
  for (int i = 0; i < nx; i++) {
    LT_ASSERT_CLOSE(g1[i], xs[i]->grad, 1e-4, 1e-5);
    lt_tensor_free(g1[i]);
  }
  lt_params_free(p);
}

START_TEST(test_mha_forward) {
  check_mha(4, 4, false, true, 5, 5, 0);  /* plain MHA, self-attention */
  check_mha(4, 2, true, false, 5, 5, 3);  /* GQA + RoPE at pos0 3 */
  check_mha(3, 1, true, true, 4, 6, 2);   /* MQA, cross-attention S > T, RoPE */
}
END_TEST

START_TEST(test_mha_errors) {
  lt_params *p = lt_params_new();
  lt_mha m;
  LT_OK_OR_FAIL(lt_mha_init(&m, p, "a", 8, 2, 1, true, 0.5, gen));
  lt_tensor *x = randn(LT_DTYPE_F32, LT_SHAPE(2, 3, 8));
  lt_tensor *w = (lt_tensor *)&w;
  lt_tensor *const sentinel = w;
  LT_EXPECT_NULL_ERR(lt_mha_forward(&m, x, NULL, NULL, 0, NULL, &w), LT_ERR_NULL, "x_kv");
  LT_EXPECT_NULL_ERR(lt_mha_forward(&m, NULL, x, NULL, 0, NULL, &w), LT_ERR_NULL, "x_q");
  lt_clear_error();
  LT_EXPECT_NULL_ERR(lt_mha_forward(&m, randn(LT_DTYPE_F32, LT_SHAPE(2, 3, 6)), x, NULL, 0, NULL, &w), LT_ERR_SHAPE,
                     "C = 8");
  LT_EXPECT_NULL_ERR(lt_mha_forward(&m, x, randn(LT_DTYPE_F32, LT_SHAPE(3, 3, 8)), NULL, 0, NULL, &w), LT_ERR_SHAPE,
                     "[B,S,C]");
  /* a mask that does not fit S */
  lt_tensor *bad = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(3, 4)));
  LT_EXPECT_NULL_ERR(lt_mha_forward(&m, x, x, &(lt_attention_opts){.attn_mask = bad}, 0, NULL, &w), LT_ERR_SHAPE,
                     "attn_mask");
  /* dropout from the module needs a generator when training */
  lt_nn_ctx train = {true, NULL};
  LT_EXPECT_NULL_ERR(lt_mha_forward(&m, x, x, NULL, 0, &train, &w), LT_ERR_NULL, "gen");
  ck_assert(w == sentinel);
  /* evaluation: no dropout, deterministic */
  lt_tensor *a = LT_NN(lt_mha_forward(&m, x, x, NULL, 0, NULL, NULL));
  lt_tensor *b = LT_NN(lt_mha_forward(&m, x, x, NULL, 0, &(lt_nn_ctx){false, NULL}, NULL));
  LT_ASSERT_SAME_BITS(a, b);
  lt_params_free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("attention");
  TCase *tc = tcase_create("sdpa");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_vs_reference_f64, 0, NCFGS);
  tcase_add_loop_test(tc, test_vs_reference_f32, 0, NCFGS);
  tcase_add_loop_test(tc, test_fused_vs_unfused_f32, 0, NFUSED);
  tcase_add_loop_test(tc, test_fused_vs_unfused_f64, 0, NFUSED);
  tcase_add_test(tc, test_fused_switch);
  tcase_add_test(tc, test_hand_values);
  tcase_add_test(tc, test_fully_masked_rows);
  tcase_add_test(tc, test_gqa_equals_repeated_mha);
  tcase_add_test(tc, test_causal_equals_tril);
  tcase_add_loop_test(tc, test_paths_agree, 0, 2); /* 0 unfused, 1 fused */
  tcase_add_test(tc, test_thread_count_independent); /* the runner's sample aside: GQA, tiles, MQA key chunks */
  tcase_add_test(tc, test_fused_bf16_tiles);
  tcase_add_test(tc, test_sliding_window);
  tcase_add_test(tc, test_dropout);
  tcase_add_test(tc, test_zero_size);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  TCase *tr = tcase_create("positional");
  tcase_add_checked_fixture(tr, setup, teardown);
  tcase_add_test(tr, test_rope_values);
  tcase_add_test(tr, test_rope_properties);
  tcase_add_test(tr, test_rope_backward);
  tcase_add_test(tr, test_rope_scaled);
  tcase_add_test(tr, test_sinusoidal);
  suite_add_tcase(s, tr);
  TCase *tm = tcase_create("mha");
  tcase_add_checked_fixture(tm, setup, teardown);
  tcase_add_test(tm, test_mha_init);
  tcase_add_test(tm, test_mha_forward);
  tcase_add_test(tm, test_mha_errors);
  suite_add_tcase(s, tm);
  return lt_test_run(s);
}
