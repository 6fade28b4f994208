/*
 * tests/test_lstm.c: nn/lstm.c and nn/gru.c against PyTorch's nn.LSTM and
 * nn.GRU (tests/fixtures/lstm.bin, made by tests/fixtures/make_lstm_fixtures.py):
 * outputs, h_n, c_n and the gradients of the input, h0, c0 and every
 * parameter, over layers, directions, bias, batch_first, missing states and
 * an unbatched input; the same bits on 1 and 2 threads (both recurrences);
 * f64 gradchecks of the modules, bidirectional included (the ops' own
 * gradchecks are in tests/gradcases_nn.inc, run by test_ops); registration
 * names (the _reverse ones too), init bounds, roll-back and errors.
 */
#include "test_util.h"
#include "util_fixtures.h"
#include "util_fxcheck.h"
#include "util_layout.h"

#include "nn/lstm.h"
#include "tensor/paths_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const CASES[] = {"two_layers", "batch_first_nobias", "h0_only_3layers", "unbatched",
                                    "bidir_two_layers", "bidir_batch_first", "gru_two_layers", "gru_bidir_bf_nobias",
                                    "gru_unbatched", "gru_bidir_h0"};

static lt_tensor *fx(const lt_fixture *f, const char *c, const char *k) {
  char name[128];
  snprintf(name, sizeof name, "%s.%s", c, k);
  return LT_NN(lt_fixture_get(f, name));
}

/* sum(a * b) over all elements */
static lt_tensor *dot_all(const lt_tensor *a, const lt_tensor *b) {
  lt_tensor *m = LT_NN(lt_mul(a, b)), *v = LT_NN(lt_reshape(m, LT_SHAPE(m->numel)));
  lt_tensor *s = LT_NN(lt_sum(v, LT_DIMS(0), false));
  lt_tensor_free(m), lt_tensor_free(v);
  return s;
}

typedef struct run_out {
  lt_tensor *out, *hn, *cn, *gx, *gh0, *gc0;
  lt_params *p;
} run_out;

/* Runs case c of f: the module with the fixture's parameters, forward and backward. */
static run_out run_case(const lt_fixture *f, const char *c) {
  lt_tensor *cfg = fx(f, c, "cfg");
  const int64_t *v = cfg->data;
  const bool gru = v[8] != 0;
  const lt_lstm_opts o = {.num_layers = v[2], .bias = v[3] != 0, .batch_first = v[4] != 0, .bidirectional = v[7] != 0};
  run_out r = {0};
  r.p = LT_NNP(lt_params_new());
  lt_generator *g = LT_NNP(lt_generator_new(1));
  lt_lstm_m m;
  lt_gru_m mg;
  ck_assert_int_eq(gru ? lt_gru_init(&mg, r.p, "lstm", v[0], v[1], &o, g) : lt_lstm_init(&m, r.p, "lstm", v[0], v[1], &o, g),
                   LT_OK);
  for (int i = 0; i < lt_params_count(r.p); i++) {
    const lt_param *pp = lt_params_at(r.p, i);
    char k[96];
    snprintf(k, sizeof k, "p.%s", pp->name + strlen("lstm."));
    lt_tensor *want = fx(f, c, k);
    bool prev = lt_set_grad_enabled(false);
    ck_assert_int_eq(lt_copy_(pp->value, want), LT_OK);
    lt_set_grad_enabled(prev);
    lt_tensor_free(want);
  }
  lt_tensor *x = fx(f, c, "x"), *h0 = v[5] ? fx(f, c, "h0") : NULL, *c0 = v[6] ? fx(f, c, "c0") : NULL;
  ck_assert_int_eq(lt_requires_grad_(x, true), LT_OK);
  if (h0) ck_assert_int_eq(lt_requires_grad_(h0, true), LT_OK);
  if (c0) ck_assert_int_eq(lt_requires_grad_(c0, true), LT_OK);
  r.out = LT_NN(gru ? lt_gru_forward(&mg, x, h0, NULL, &r.hn) : lt_lstm_forward(&m, x, h0, c0, NULL, &r.hn, &r.cn));
  lt_tensor *dout = fx(f, c, "dout"), *dh = fx(f, c, "dh_n"), *dc = gru ? NULL : fx(f, c, "dc_n");
  lt_tensor *l1 = dot_all(r.out, dout), *l2 = dot_all(r.hn, dh), *l3 = gru ? LT_NN(lt_zeros_like(l1)) : dot_all(r.cn, dc);
  lt_tensor *a = LT_NN(lt_add(l1, l2)), *loss = LT_NN(lt_add(a, l3));
  ck_assert_int_eq(lt_backward(loss, NULL, false), LT_OK);
  r.gx = LT_NN(lt_clone(x->grad));
  r.gh0 = h0 ? LT_NN(lt_clone(h0->grad)) : NULL;
  r.gc0 = c0 ? LT_NN(lt_clone(c0->grad)) : NULL;
  lt_tensor *fr[] = {cfg, x, h0, c0, dout, dh, dc, l1, l2, l3, a, loss};
  for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) lt_tensor_free(fr[i]);
  lt_generator_free(g);
  return r;
}

static void run_free(run_out *r) {
  lt_tensor *t[] = {r->out, r->hn, r->cn, r->gx, r->gh0, r->gc0};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) lt_tensor_free(t[i]);
  lt_params_free(r->p);
}

START_TEST(test_pytorch_cases) {
  lt_fixture *f = lt_fx_open("lstm.bin");
  const double rtol = 1e-4, atol = 1e-5;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    const char *c = CASES[i];
    char label[160];
    run_out r = run_case(f, c);
    const char *outs[] = {"out", "h_n", "c_n", "grad.x", "grad.h0", "grad.c0"};
    lt_tensor *got[] = {r.out, r.hn, r.cn, r.gx, r.gh0, r.gc0};
    for (int k = 0; k < 6; k++) {
      if (!got[k]) continue;
      lt_tensor *want = fx(f, c, outs[k]);
      snprintf(label, sizeof label, "%s.%s", c, outs[k]);
      lt_fx_close(label, got[k], want, rtol, atol);
      lt_tensor_free(want);
    }
    for (int k = 0; k < lt_params_count(r.p); k++) {
      const lt_param *pp = lt_params_at(r.p, k);
      char key[96];
      snprintf(key, sizeof key, "grad.p.%s", pp->name + strlen("lstm."));
      lt_tensor *want = fx(f, c, key);
      snprintf(label, sizeof label, "%s.%s", c, key);
      lt_fx_close(label, pp->value->grad, want, rtol, atol);
      lt_tensor_free(want);
    }
    run_free(&r);
  }
  lt_fixture_free(f);
  lt_fx_done("lstm against PyTorch");
}
END_TEST

/* A recurrence of four leaves (requires_grad set here), for same_bits. */
static lt_tensor *run_lstm(lt_tensor *const *l) { return lt_lstm_recurrence(l[0], l[1], l[2], l[3]); }
static lt_tensor *run_gru(lt_tensor *const *l) { return lt_gru_recurrence(l[0], l[1], l[2], l[3]); }

/* run(leaves) and the leaves' gradients through dy have the same bits on 1
 * and 2 threads. Frees the leaves and dy. */
static void same_bits(lt_tensor *(*run)(lt_tensor *const *), lt_tensor **leaves, lt_tensor *dy) {
  lt_tensor *res[2][5];
  const int saved = lt_get_num_threads();
  for (int i = 0; i < 4; i++) ck_assert_int_eq(lt_requires_grad_(leaves[i], true), LT_OK);
  for (int nt = 1; nt <= 2; nt++) {
    ck_assert_int_eq(lt_set_num_threads(nt), LT_OK);
    lt_tensor *y = LT_NN(run(leaves));
    ck_assert_int_eq(lt_backward(y, dy, false), LT_OK);
    res[nt - 1][0] = y;
    for (int i = 0; i < 4; i++) {
      res[nt - 1][1 + i] = LT_NN(lt_clone(leaves[i]->grad));
      lt_zero_grad(leaves[i]);
    }
  }
  ck_assert_int_eq(lt_set_num_threads(saved), LT_OK);
  for (int k = 0; k < 5; k++) {
    LT_ASSERT_SAME_BITS(res[0][k], res[1][k]);
    lt_tensor_free(res[0][k]), lt_tensor_free(res[1][k]);
  }
  for (int i = 0; i < 4; i++) lt_tensor_free(leaves[i]);
  lt_tensor_free(dy);
}

/* The same bits on 1 and 2 threads, with sizes where the recurrence runs
 * on a team (nn/lstm.c, "The team"): H 96 is two chunks of units (64, 32),
 * H 272 five (the last of 16 units) with products in two and five blocks of
 * k; their weights packed for the panel kernel, then (gemm=blis forced)
 * through lt__mat_gemm. The GRU's recurrence, with b_hn and h0, too. */
START_TEST(test_threads) {
  lt_generator *g = LT_NNP(lt_generator_new(7));
  for (int run = 0; run < 4; run++) {
    const int64_t H = run % 2 ? 272 : 96;
    lt__path_force(LT__PATH_FAMILY_gemm, run < 2 ? LT__PATH_AUTO : LT__PATH_gemm_blis);
    lt_tensor *leaves[] = {LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(5, 48, 4 * H))),
                           LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4 * H, H))),
                           LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(48, H))),
                           LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(48, H)))};
    same_bits(run_lstm, leaves, LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(2, 5, 48, H))));
  }
  lt__path_force(LT__PATH_FAMILY_gemm, LT__PATH_AUTO);
  lt_tensor *gl[] = {LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(5, 48, 3 * 96))),
                     LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(3 * 96, 96))),
                     LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(96))),
                     LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(48, 96)))};
  same_bits(run_gru, gl, LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(5, 48, 96))));
  lt_generator_free(g);
}
END_TEST

/* The modules in f64 (two layers, batch_first, bias; bidirectional):
 * gradcheck through x, h0 (, c0). */
typedef struct mod_gc {
  const lt_lstm_m *m;
  const lt_gru_m *g;
} mod_gc;
static lt_tensor *mod_fn(int n, lt_tensor *const *in, void *user) {
  (void)n;
  const mod_gc *u = user;
  lt_tensor *hn = NULL, *cn = NULL;
  lt_tensor *y = u->g ? lt_gru_forward(u->g, in[0], in[1], NULL, &hn) : lt_lstm_forward(u->m, in[0], in[1], in[2], NULL, &hn, &cn);
  if (!y) return NULL;
  const int np = u->g ? 2 : 3;
  lt_tensor *parts[3] = {y, hn, cn}, *flat[3];
  for (int i = 0; i < np; i++) flat[i] = lt_reshape(parts[i], LT_SHAPE(parts[i]->numel));
  lt_tensor *r = lt_cat(np, flat, 0);
  for (int i = 0; i < np; i++) lt_tensor_free(parts[i]), lt_tensor_free(flat[i]);
  return r;
}
START_TEST(test_module_gradcheck) {
  lt_params *p = LT_NNP(lt_params_new());
  lt_generator *g = LT_NNP(lt_generator_new(3));
  lt_lstm_m m;
  const lt_lstm_opts o = {.num_layers = 2, .bias = true, .batch_first = true};
  ck_assert_int_eq(lt_lstm_init(&m, p, "rnn", 3, 2, &o, g), LT_OK);
  ck_assert_int_eq(lt_params_to_dtype(p, LT_DTYPE_F64), LT_OK);
  lt_tensor *in[3] = {LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 4, 3))),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 2, 2))),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 2, 2)))};
  for (int i = 0; i < 3; i++) ck_assert_int_eq(lt_requires_grad_(in[i], true), LT_OK);
  mod_gc u = {&m, NULL};
  ck_assert_msg(lt_gradcheck(mod_fn, &u, 3, in, NULL) == LT_OK, "%s", lt_last_error());
  for (int i = 0; i < 3; i++) lt_tensor_free(in[i]);
  /* bidirectional LSTM and GRU, two layers each: h0 (c0) [4, B 2, H 2] */
  const lt_lstm_opts ob = {.num_layers = 2, .bias = true, .batch_first = true, .bidirectional = true};
  lt_lstm_m mb;
  lt_gru_m gb;
  ck_assert_int_eq(lt_lstm_init(&mb, p, "bi", 3, 2, &ob, g), LT_OK);
  ck_assert_int_eq(lt_gru_init(&gb, p, "gru", 3, 2, &ob, g), LT_OK);
  ck_assert_int_eq(lt_params_to_dtype(p, LT_DTYPE_F64), LT_OK);
  lt_tensor *ib[3] = {LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 4, 3))),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4, 2, 2))),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4, 2, 2)))};
  for (int i = 0; i < 3; i++) ck_assert_int_eq(lt_requires_grad_(ib[i], true), LT_OK);
  mod_gc ub = {&mb, NULL}, ug = {NULL, &gb};
  ck_assert_msg(lt_gradcheck(mod_fn, &ub, 3, ib, NULL) == LT_OK, "%s", lt_last_error());
  ck_assert_msg(lt_gradcheck(mod_fn, &ug, 2, ib, NULL) == LT_OK, "%s", lt_last_error());
  for (int i = 0; i < 3; i++) lt_tensor_free(ib[i]);
  lt_generator_free(g);
  lt_params_free(p);
}
END_TEST

START_TEST(test_module_init_errors) {
  lt_params *p = LT_NNP(lt_params_new());
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_lstm_m m;
  const lt_lstm_opts o = {.num_layers = 2, .bias = true};
  ck_assert_int_eq(lt_lstm_init(&m, p, "lstm", 10, 16, &o, g), LT_OK);
  const char *names[] = {"lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0",
                         "lstm.weight_ih_l1", "lstm.weight_hh_l1", "lstm.bias_ih_l1", "lstm.bias_hh_l1"};
  ck_assert_int_eq(lt_params_count(p), 8);
  for (int i = 0; i < 8; i++) {
    const lt_param *pp = lt_params_at(p, i);
    ck_assert_str_eq(pp->name, names[i]);
    const float *d = pp->value->data;
    float mx = 0;
    for (int64_t k = 0; k < pp->value->numel; k++) mx = fmaxf(mx, fabsf(d[k]));
    ck_assert_msg(mx <= 0.25f && mx > 0.2f, "%s max %g, bound 0.25", names[i], mx);
  }
  ck_assert(m.weight_ih[0]->shape[0] == 64 && m.weight_ih[0]->shape[1] == 10 && m.weight_ih[1]->shape[1] == 16);
  /* failing inits change nothing */
  const lt_generator_state st = lt_generator_get_state(g);
  lt_lstm_m m2;
  LT_EXPECT_ERR(lt_lstm_init(&m2, p, "lstm", 10, 16, &o, g), LT_ERR_INVALID, "lstm.weight_ih_l0");
  LT_EXPECT_ERR(lt_lstm_init(&m2, p, "x", 0, 16, &o, g), LT_ERR_INVALID, "lstm_init: 'x'");
  LT_EXPECT_ERR(lt_lstm_init(&m2, p, "x", 4, 4, &(lt_lstm_opts){.num_layers = 0, .bias = true}, g), LT_ERR_INVALID,
                "num_layers 0");
  ck_assert_int_eq(lt_params_count(p), 8);
  const lt_generator_state st2 = lt_generator_get_state(g);
  ck_assert(memcmp(&st, &st2, sizeof st) == 0);
  /* forward errors name the op and the shapes */
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 2, 9)));
  lt_tensor *hn = (lt_tensor *)1;
  LT_EXPECT_NULL_ERR(lt_lstm_forward(&m, x, NULL, NULL, NULL, &hn, NULL), LT_ERR_SHAPE, "lstm_forward: x is");
  ck_assert_ptr_null(hn);
  lt_tensor *x2 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 2, 10)));
  lt_tensor *h0 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3, 16)));
  LT_EXPECT_NULL_ERR(lt_lstm_forward(&m, x2, h0, NULL, NULL, NULL, NULL), LT_ERR_SHAPE, "must be [L*D, B, H] = [2, 2, 16]");
  lt_tensor *w = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(16, 4)));
  LT_EXPECT_NULL_ERR(lt_lstm_recurrence(x2, w, NULL, NULL), LT_ERR_SHAPE, "lstm_recurrence: xg is");
  LT_EXPECT_NULL_ERR(lt_lstm_recurrence(NULL, w, NULL, NULL), LT_ERR_NULL, "lstm_recurrence");
  LT_EXPECT_NULL_ERR(lt_gru_recurrence(x2, w, NULL, NULL), LT_ERR_SHAPE, "gru_recurrence: w_hh is [16,4] f32: must be [3H, H]");
  lt_tensor_free(x), lt_tensor_free(x2), lt_tensor_free(h0), lt_tensor_free(w);
  /* bidirectional GRU names: PyTorch's order, the reverse direction after each layer's forward */
  lt_gru_m gm;
  const lt_gru_opts go = {.num_layers = 2, .bias = true, .bidirectional = true};
  ck_assert_int_eq(lt_gru_init(&gm, p, "gru", 6, 5, &go, g), LT_OK);
  const char *gnames[] = {"gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0",
                          "gru.weight_ih_l0_reverse", "gru.weight_hh_l0_reverse", "gru.bias_ih_l0_reverse",
                          "gru.bias_hh_l0_reverse", "gru.weight_ih_l1"};
  for (int i = 0; i < 9; i++) ck_assert_str_eq(lt_params_at(p, 8 + i)->name, gnames[i]);
  ck_assert_int_eq(lt_params_count(p), 8 + 16);
  ck_assert(gm.weight_ih[0]->shape[0] == 15 && gm.weight_ih[1]->shape[1] == 10 && gm.weight_ih_reverse[1]->shape[1] == 10);
  lt_tensor *gx = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 2, 6))), *gh = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 2, 5)));
  LT_EXPECT_NULL_ERR(lt_gru_forward(&gm, gx, gh, NULL, NULL), LT_ERR_SHAPE, "gru_forward: x is [3,2,6] f32, h0 is [2,2,5] f32: must be [L*D, B, H] = [4, 2, 5]");
  lt_tensor *hn2 = NULL, *y = LT_NN(lt_gru_forward(&gm, gx, NULL, NULL, &hn2));
  LT_ASSERT_SHAPE(y, 3, 2, 10);
  LT_ASSERT_SHAPE(hn2, 4, 2, 5);
  lt_tensor_free(gx), lt_tensor_free(gh), lt_tensor_free(y), lt_tensor_free(hn2);
  lt_generator_free(g);
  lt_params_free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lstm");
  LT_TEST_CASE(s, "lstm", 120, test_pytorch_cases, test_threads, test_module_gradcheck, test_module_init_errors);
  return lt_test_run(s);
}
