/*
 * tests/test_autocast.c: bf16 matrix products (oneDNN, tensor/dnnl.c) and
 * autocast (lt_set_autocast).
 *
 * - lt_matmul on bf16 operands against the naive reference (lt__matmul_ref,
 *   f64 sums of the same bf16 values), contiguous, transposed, sliced and
 *   batched with broadcasting; strided operands give the same bits as
 *   contiguous copies;
 * - autocast: an f32 product equals the f64 product of the bf16-rounded
 *   operands to f32 accuracy (so operands really are rounded once and the
 *   sum is f32), outputs stay f32, f64 is untouched, the mode nests;
 * - Linear and multi-head attention forward and backward under autocast
 *   against f32, within the bf16 tolerance stated below;
 * - the same results on 1 and 2 threads, bit for bit.
 *
 * The CPU-without-bf16 paths: tests/CMakeLists.txt runs this program a second
 * and a third time with oneDNN limited to AVX-512 without AVX512_BF16 and to
 * AVX2 (ONEDNN_MAX_CPU_ISA) and LT_TEST_BF16_PATH naming the path
 * lt_runtime_get_info must then report. Everything above holds there too,
 * except that without a oneDNN bf16 matmul (AVX2) autocast leaves products in
 * f32 (docs/mixed-precision.md): they must then equal the f32 ones.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "util_layout.h"
#include "tensor/matmul_internal.h"

/* |got - want| <= BF16_TOL * max|want| for results whose operands were
 * rounded to bf16 (8 significant bits, relative error 2^-9 per operand): sums
 * of k such products stay well inside 2% of the largest magnitude. */
#define BF16_TOL 2e-2

static lt_tensor *rnd(lt_generator *g, lt_dtype dt, int nd, const int64_t *shape) {
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, nd, shape));
  if (dt == LT_DTYPE_F32) return x;
  lt_tensor *y = LT_NN(lt_to_dtype(x, dt));
  lt_tensor_free(x);
  return y;
}

/* Whether autocast rounds product operands on this CPU (or with the ISA
 * oneDNN is limited to): not on the path without a oneDNN bf16 matmul. */
static bool autocast_rounds(void) {
  lt_runtime_info info;
  LT_OK_OR_FAIL(lt_runtime_get_info(&info));
  return strncmp(info.bf16_gemm, "fallback (no oneDNN", 19) != 0;
}

static double max_abs(const lt_tensor *t) {
  lt_tensor *a = LT_NN(lt_abs(t));
  lt_tensor *f = LT_NN(lt_to_dtype(a, LT_DTYPE_F64));
  lt_tensor *m = LT_NN(lt_amax(f, 0, NULL, false));
  double v;
  LT_OK_OR_FAIL(lt_item(m, &v));
  LT_FREE_ALL(a, f, m);
  return v;
}

/* got close to want within rtol of want's largest magnitude (any dtypes). */
static void assert_close_scaled(const lt_tensor *got, const lt_tensor *want, double rtol, const char *what) {
  lt_tensor *g = LT_NN(lt_to_dtype(got, LT_DTYPE_F64)), *w = LT_NN(lt_to_dtype(want, LT_DTYPE_F64));
  const double m = max_abs(w);
  lt_test_assert_close(g, w, 0, rtol * (m > 0 ? m : 1), what, "the f32 / reference result", __FILE__, __LINE__);
  LT_FREE_ALL(g, w);
}

START_TEST(test_runtime_info_and_mode) {
  lt_runtime_info info;
  LT_OK_OR_FAIL(lt_runtime_get_info(&info));
  ck_assert(info.bf16_gemm && *info.bf16_gemm);
  ck_assert(info.bf16_native == (strncmp(info.bf16_gemm, "native", 6) == 0));
  fprintf(stderr, "bf16 products: %s\n", info.bf16_gemm);
  const char *want = getenv("LT_TEST_BF16_PATH"); /* set by the fallback runs of tests/CMakeLists.txt */
  if (want) ck_assert_msg(!strncmp(info.bf16_gemm, want, strlen(want)), "bf16 path '%s', expected '%s...'", info.bf16_gemm, want);
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_F32);
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_BF16), LT_DTYPE_F32);
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_BF16), LT_DTYPE_BF16); /* nests */
  lt_clear_error();
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_F64), LT_DTYPE_BF16); /* refused, unchanged */
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_DTYPE, "set_autocast: dtype f64");
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_BF16);
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_F32), LT_DTYPE_BF16);
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_F32);
}
END_TEST

/* bf16 x bf16 -> bf16 (PyTorch's result dtype), f32 accumulation. */
START_TEST(test_bf16_matmul_vs_reference) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(3));
  static const struct {
    int nda, ndb;
    int64_t sa[4], sb[4];
  } cases[] = {
      {2, 2, {5, 7}, {7, 3}},         {2, 2, {64, 96}, {96, 80}},    {1, 2, {17}, {17, 9}},
      {2, 1, {9, 17}, {17}},          {3, 2, {4, 33, 40}, {40, 24}}, {4, 4, {2, 3, 16, 8}, {2, 1, 8, 16}},
      {3, 3, {6, 64, 32}, {6, 32, 64}}, {2, 2, {1, 300}, {300, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    lt_tensor *a = rnd(g, LT_DTYPE_BF16, cases[c].nda, cases[c].sa);
    lt_tensor *b = rnd(g, LT_DTYPE_BF16, cases[c].ndb, cases[c].sb);
    lt_tensor *out = LT_NN(lt_matmul(a, b));
    ck_assert_int_eq(out->dtype, LT_DTYPE_BF16);
    lt_tensor *a64 = LT_NN(lt_to_dtype(a, LT_DTYPE_F64)), *b64 = LT_NN(lt_to_dtype(b, LT_DTYPE_F64));
    lt_tensor *ref = LT_NN(lt__matmul_ref(a64, b64));
    /* one rounding to bf16 at the end (2^-9 relative) plus f32 sums */
    lt_tensor *o64 = LT_NN(lt_to_dtype(out, LT_DTYPE_F64));
    lt_test_assert_close(o64, ref, 4.0 / 512, 1e-5 * max_abs(ref), "bf16 matmul", "f64 reference", __FILE__, __LINE__);
    /* transposed operands (passed to oneDNN as strides) give the same bits */
    if (cases[c].nda >= 2 && cases[c].ndb >= 2) {
      lt_tensor *at = LT_NN(lt_contiguous(LT_NN(lt_transpose(a, -2, -1))));
      lt_tensor *bt = LT_NN(lt_contiguous(LT_NN(lt_transpose(b, -2, -1))));
      lt_tensor *o2 = LT_NN(lt_matmul(LT_NN(lt_transpose(at, -2, -1)), LT_NN(lt_transpose(bt, -2, -1))));
      LT_ASSERT_SAME_BITS(o2, out);
    }
  }
  lt_generator_free(g);
  lt_scope_end(sc);
}
END_TEST

/* Autocast: the f32 product of bf16-rounded operands, f32 out. */
START_TEST(test_autocast_matmul) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_tensor *a = rnd(g, LT_DTYPE_F32, LT_SHAPE(3, 50, 70)), *b = rnd(g, LT_DTYPE_F32, LT_SHAPE(70, 40));
  lt_tensor *f = LT_NN(lt_matmul(a, b));
  lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *h = LT_NN(lt_matmul(a, b));
  lt_tensor *ht = LT_NN(lt_matmul(a, LT_NN(lt_transpose(LT_NN(lt_contiguous(LT_NN(lt_transpose(b, 0, 1)))), 0, 1))));
  lt_tensor *a64 = LT_NN(lt_to_dtype(a, LT_DTYPE_F64)), *d = LT_NN(lt_matmul(a64, LT_NN(lt_to_dtype(b, LT_DTYPE_F64))));
  lt_set_autocast(prev);
  ck_assert_int_eq(h->dtype, LT_DTYPE_F32);
  LT_ASSERT_SAME_BITS(ht, h);
  if (!autocast_rounds()) { /* no bf16 matmul: the f32 product, and nothing more to check */
    LT_ASSERT_SAME_BITS(h, f);
    lt_generator_free(g);
    lt_scope_end(sc);
    return;
  }
  /* f64 is never autocast */
  lt_tensor *d2 = LT_NN(lt_matmul(a64, LT_NN(lt_to_dtype(b, LT_DTYPE_F64))));
  LT_ASSERT_SAME_BITS(d, d2);
  /* equal to f32 accuracy to the exact product of the rounded operands */
  lt_tensor *ar = LT_NN(lt_to_dtype(LT_NN(lt_to_dtype(a, LT_DTYPE_BF16)), LT_DTYPE_F64));
  lt_tensor *br = LT_NN(lt_to_dtype(LT_NN(lt_to_dtype(b, LT_DTYPE_BF16)), LT_DTYPE_F64));
  lt_tensor *ref = LT_NN(lt__matmul_ref(ar, br));
  lt_tensor *h64 = LT_NN(lt_to_dtype(h, LT_DTYPE_F64));
  lt_test_assert_close(h64, ref, 1e-5, 1e-5 * max_abs(ref), "autocast matmul", "f64 product of bf16 operands",
                       __FILE__, __LINE__);
  /* and far from the f32 product (operands really were rounded) */
  ck_assert(!lt_equal(h, f));
  assert_close_scaled(h, f, BF16_TOL, "autocast matmul vs f32");
  lt_generator_free(g);
  lt_scope_end(sc);
}
END_TEST

/* y = Linear(x), loss = sum(y * r): forward and all gradients, autocast vs f32. */
typedef struct {
  lt_dtype mode;
  bool mha;
} run_ctx;

static int run_layer(void *u, lt_tensor **out, int cap) {
  const run_ctx *c = u;
  lt_generator *g = LT_NNP(lt_generator_new(11));
  lt_params *p = LT_NNP(lt_params_new());
  lt_scope *sc = lt_scope_begin();
  lt_linear_m lin;
  lt_mha mha;
  lt_tensor *x, *y;
  lt_tensor *params[8];
  int np = 0;
  if (c->mha) {
    LT_OK_OR_FAIL(lt_mha_init(&mha, p, "attn", 32, 4, 4, true, 0.0, g));
    x = rnd(g, LT_DTYPE_F32, LT_SHAPE(2, 24, 32));
    LT_OK_OR_FAIL(lt_requires_grad_(x, true));
    lt_dtype prev = lt_set_autocast(c->mode);
    lt_attention_opts o = {.causal = true};
    y = LT_NN(lt_mha_forward(&mha, x, x, &o, 0, NULL, NULL));
    lt_set_autocast(prev);
    params[np++] = mha.q_proj.weight, params[np++] = mha.k_proj.weight, params[np++] = mha.out_proj.weight;
    params[np++] = mha.v_proj.bias;
  } else {
    LT_OK_OR_FAIL(lt_linear_init(&lin, p, "lin", 48, 40, true, g));
    x = rnd(g, LT_DTYPE_F32, LT_SHAPE(3, 20, 48));
    LT_OK_OR_FAIL(lt_requires_grad_(x, true));
    lt_dtype prev = lt_set_autocast(c->mode);
    y = LT_NN(lt_linear_forward(&lin, x));
    lt_set_autocast(prev);
    params[np++] = lin.weight, params[np++] = lin.bias;
  }
  ck_assert_int_eq(y->dtype, LT_DTYPE_F32);
  lt_tensor *r = rnd(g, LT_DTYPE_F32, y->ndim, y->shape);
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(y, r)), 0, NULL, false));
  lt_dtype prev = lt_set_autocast(c->mode);
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  lt_set_autocast(prev);
  int n = 0;
  out[n++] = lt_tensor_keep(LT_NN(lt_detach(y)));
  out[n++] = lt_tensor_keep(LT_NN(lt_clone(x->grad)));
  for (int i = 0; i < np && n < cap; i++) {
    ck_assert_int_eq(params[i]->dtype, LT_DTYPE_F32);
    ck_assert_int_eq(params[i]->grad->dtype, LT_DTYPE_F32);
    out[n++] = lt_tensor_keep(LT_NN(lt_clone(params[i]->grad)));
  }
  lt_scope_end(sc);
  lt_params_free(p);
  lt_generator_free(g);
  return n;
}

static void layer_vs_f32(bool mha) {
  lt_tensor *f[16], *h[16];
  run_ctx cf = {LT_DTYPE_F32, mha}, ch = {LT_DTYPE_BF16, mha};
  const int n = run_layer(&cf, f, 16);
  ck_assert_int_eq(run_layer(&ch, h, 16), n);
  for (int i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "%s output %d under autocast", mha ? "mha" : "linear", i);
    ck_assert_int_eq(h[i]->dtype, LT_DTYPE_F32);
    if (i < 3 && autocast_rounds()) /* y, dx, the first weight's gradient come from products (a bias gradient is a plain sum) */
      ck_assert_msg(!lt_equal(h[i], f[i]), "%s: bit-identical to f32: autocast did not apply", what);
    else if (!autocast_rounds())
      ck_assert_msg(lt_equal(h[i], f[i]), "%s: differs from f32 on the path without a bf16 matmul", what);
    assert_close_scaled(h[i], f[i], BF16_TOL, what);
    lt_tensor_free(f[i]);
    lt_tensor_free(h[i]);
  }
  lt_test_same_on_threads(run_layer, &ch, mha ? "mha under autocast" : "linear under autocast");
}

START_TEST(test_autocast_linear) { layer_vs_f32(false); }
END_TEST
START_TEST(test_autocast_mha) { layer_vs_f32(true); }
END_TEST

int main(void) {
  Suite *s = suite_create("autocast");
  TCase *tc = tcase_create("autocast");
  tcase_add_test(tc, test_runtime_info_and_mode);
  tcase_add_test(tc, test_bf16_matmul_vs_reference);
  tcase_add_test(tc, test_autocast_matmul);
  tcase_add_test(tc, test_autocast_linear);
  tcase_add_test(tc, test_autocast_mha);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
