/*
 * tests/test_bf16.c: the bf16 dtype. Casts on exact bit patterns (ties,
 * NaN, infinities, subnormals, the largest finite value), every bf16 value
 * through f32 and back, printing, dtype rules of elementwise ops and
 * reductions, casts as differentiable ops, and a chain of ops forward and
 * backward in bf16 against the same chain in f32.
 *
 * The per-op values, layouts and 1-vs-2-thread checks of bf16 run in
 * tests/test_ops.c (OI_BF16 in the elementwise and reduce entries).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
static float f32_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* f32 bits -> bf16 bits. Checked against PyTorch 1.13's .bfloat16() except
 * for NaN: PyTorch 1.13 gives 0xffff for every NaN, we keep the sign and the
 * top payload bits and set the quiet bit (as newer PyTorch, Eigen and
 * oneDNN); both are NaN. */
static const struct {
  uint32_t f32;
  uint16_t bf16;
  const char *what;
} cases[] = {
    {0x3f800000u, 0x3f80, "1.0"},
    {0x3f808000u, 0x3f80, "tie, kept bit even: down"},
    {0x3f818000u, 0x3f82, "tie, kept bit odd: up"},
    {0xbf818000u, 0xbf82, "negative tie, odd: away from zero"},
    {0x3f808001u, 0x3f81, "just above half: up"},
    {0x3f807fffu, 0x3f80, "just below half: down"},
    {0x7f800000u, 0x7f80, "+inf"},
    {0xff800000u, 0xff80, "-inf"},
    {0x7fc00000u, 0x7fc0, "quiet NaN"},
    {0x7f800001u, 0x7fc0, "signalling NaN, payload in the dropped bits: stays NaN, quiet"},
    {0xff800001u, 0xffc0, "negative NaN: sign kept"},
    {0x7fffffffu, 0x7fff, "NaN with every payload bit"},
    {0x7f7f0000u, 0x7f7f, "largest finite bf16 (3.3895e38)"},
    {0x7f7f7fffu, 0x7f7f, "just below the halfway point to infinity"},
    {0x7f7f8000u, 0x7f80, "halfway to infinity, odd: rounds to inf"},
    {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to inf"},
    {0x00000000u, 0x0000, "+0"},
    {0x80000000u, 0x8000, "-0"},
    {0x00000001u, 0x0000, "smallest f32 subnormal rounds to 0"},
    {0x00010000u, 0x0001, "smallest bf16 subnormal"},
    {0x00018000u, 0x0002, "subnormal tie, odd: up"},
    {0x00008000u, 0x0000, "subnormal tie, even (0): down"},
    {0x00008001u, 0x0001, "just above half the smallest subnormal"},
    {0x80018000u, 0x8002, "negative subnormal tie"},
    {0x007fffffu, 0x0080, "largest f32 subnormal rounds up to the smallest normal"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

START_TEST(test_bf16_cast_bits) {
  float in[NCASES];
  for (int i = 0; i < NCASES; i++) {
    in[i] = f32_of(cases[i].f32);
    uint16_t got = lt_bf16_from_f32(in[i]);
    ck_assert_msg(got == cases[i].bf16, "%s: f32 0x%08x -> bf16 0x%04x, want 0x%04x", cases[i].what,
                  cases[i].f32, got, cases[i].bf16);
  }
  /* the tensor cast (strided and contiguous) gives the same bits */
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(NCASES), in));
  lt_tensor *b = LT_NN(lt_to_dtype(x, LT_DTYPE_BF16));
  ck_assert_int_eq(b->dtype, LT_DTYPE_BF16);
  ck_assert_int_eq(lt_dtype_size(LT_DTYPE_BF16), 2);
  const uint16_t *bits = b->data;
  for (int i = 0; i < NCASES; i++)
    ck_assert_msg(bits[i] == cases[i].bf16, "to_dtype %s: 0x%04x, want 0x%04x", cases[i].what, bits[i], cases[i].bf16);
  lt_tensor *xs = LT_NN(lt_slice(x, 0, 1, NCASES, 2)), *bs = LT_NN(lt_to_dtype(xs, LT_DTYPE_BF16));
  for (int i = 1, j = 0; i < NCASES; i += 2, j++)
    ck_assert_uint_eq(((const uint16_t *)bs->data)[j], cases[i].bf16);
  /* f64 -> bf16 goes through f32, as PyTorch; bf16 -> f64 is exact */
  lt_tensor *d = LT_NN(lt_to_dtype(x, LT_DTYPE_F64)), *bd = LT_NN(lt_to_dtype(d, LT_DTYPE_BF16));
  lt_tensor *back = LT_NN(lt_to_dtype(bd, LT_DTYPE_F64));
  for (int i = 0; i < NCASES; i++) {
    ck_assert_uint_eq(((const uint16_t *)bd->data)[i], cases[i].bf16);
    double v = ((const double *)back->data)[i], want = lt_f32_from_bf16(cases[i].bf16);
    ck_assert_msg((isnan(v) && isnan(want)) || v == want, "%s: bf16 -> f64 %g, want %g", cases[i].what, v, want);
  }
  LT_FREE_ALL(x, b, xs, bs, d, bd, back);
}
END_TEST

/* Every one of the 65536 bf16 values widens exactly (its bits are the top
 * half of the f32) and narrows back to itself; NaNs stay NaN. */
START_TEST(test_bf16_all_values_round_trip) {
  for (uint32_t b = 0; b < 65536u; b++) {
    float f = lt_f32_from_bf16((uint16_t)b);
    ck_assert_uint_eq(f32_bits(f), b << 16);
    uint16_t r = lt_bf16_from_f32(f);
    if (isnan(f)) ck_assert_msg(isnan(lt_f32_from_bf16(r)) && (r & 0x8000u) == (b & 0x8000u), "NaN 0x%04x", b);
    else ck_assert_msg(r == b, "0x%04x -> %g -> 0x%04x", b, (double)f, r);
  }
}
END_TEST

START_TEST(test_bf16_print_and_names) {
  ck_assert_str_eq(lt_dtype_name(LT_DTYPE_BF16), "bf16");
  ck_assert(lt_dtype_is_floating(LT_DTYPE_BF16) && !lt_dtype_is_float(LT_DTYPE_BF16));
  /* the values the first existing dtypes had stay (checkpoints store them) */
  ck_assert_int_eq(LT_DTYPE_F32, 0);
  ck_assert_int_eq(LT_DTYPE_BOOL, 4);
  ck_assert_int_eq(LT_DTYPE_BF16, 5);
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(3), (float[]){1, 1.0f / 3, -INFINITY}));
  lt_tensor *b = LT_NN(lt_to_dtype(x, LT_DTYPE_BF16));
  char *s = lt_tensor_to_string(b);
  ck_assert_str_eq(s, "tensor([1.0000, 0.3340,   -inf], dtype=bf16)"); /* 1/3 is 0.333984375 in bf16 */
  free(s);
  LT_FREE_ALL(x, b);
}
END_TEST

/* Result dtypes follow PyTorch: bf16 op bf16 -> bf16, bf16 op f32 -> f32,
 * bf16 op integer -> bf16, reductions keep bf16, argmax gives i64. */
START_TEST(test_bf16_dtype_rules) {
  lt_scope *scope = lt_scope_begin(); /* the intermediates of nested calls */
  lt_tensor *b = LT_NN(lt_to_dtype(LT_NN(lt_arange(LT_DTYPE_F32, -3, 3, 0.75)), LT_DTYPE_BF16));
  lt_tensor *f = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(8)));
  lt_tensor *i = LT_NN(lt_ones(LT_DTYPE_I32, LT_SHAPE(8)));
  lt_tensor *r[] = {LT_NN(lt_add(b, b)), LT_NN(lt_add(b, f)), LT_NN(lt_mul(i, b)), LT_NN(lt_exp(b)),
                    LT_NN(lt_sum(b, 0, NULL, false)), LT_NN(lt_softmax(b, 0)), LT_NN(lt_argmax(b, 0, false)),
                    LT_NN(lt_lt(b, f)), LT_NN(lt_mul_scalar(b, 0.5))};
  const lt_dtype want[] = {LT_DTYPE_BF16, LT_DTYPE_F32, LT_DTYPE_BF16, LT_DTYPE_BF16, LT_DTYPE_BF16,
                           LT_DTYPE_BF16, LT_DTYPE_I64, LT_DTYPE_BOOL, LT_DTYPE_BF16};
  for (size_t k = 0; k < sizeof r / sizeof *r; k++) {
    ck_assert_msg(r[k]->dtype == want[k], "result %zu is %s, want %s", k, lt_dtype_name(r[k]->dtype),
                  lt_dtype_name(want[k]));
    lt_tensor_free(r[k]);
  }
  /* in place: a bf16 tensor keeps its dtype; results round once */
  lt_tensor *c = LT_NN(lt_clone(b));
  LT_OK_OR_FAIL(lt_add_(c, f));
  ck_assert_int_eq(c->dtype, LT_DTYPE_BF16);
  lt_tensor *want_c = LT_NN(lt_to_dtype(LT_NN(lt_add(LT_NN(lt_to_dtype(b, LT_DTYPE_F32)), f)), LT_DTYPE_BF16));
  ck_assert(lt_equal(c, want_c));
  /* the scalar of a scalar op is not rounded to bf16 first (PyTorch's
   * opmath): 1 + 2^-8 is a tie that bf16 rounds to 1, which would give
   * 255 * 1 = 255; in f32 255 * (1 + 2^-8) = 255.996, rounded once to 256 */
  lt_tensor *k256 = LT_NN(lt_full(LT_DTYPE_BF16, LT_SHAPE(1), 255));
  lt_tensor *p = LT_NN(lt_mul_scalar(k256, 1.0 + 1.0 / 256));
  double v;
  LT_OK_OR_FAIL(lt_item(p, &v));
  ck_assert_double_eq(v, 256);
  LT_FREE_ALL(b, f, i, c, want_c, k256, p);
  lt_scope_end(scope);
}
END_TEST

/* lt_to_dtype is differentiable both ways: the gradient is cast back to the
 * input's dtype. */
START_TEST(test_bf16_cast_grad) {
  lt_scope *scope = lt_scope_begin(); /* the intermediates of nested calls */
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(3), (float[]){0.5f, -1.25f, 3}));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *w = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(3), (float[]){1.0f / 3, 2, -0.1f}));
  lt_tensor *wb = LT_NN(lt_to_dtype(w, LT_DTYPE_BF16));
  lt_tensor *y = LT_NN(lt_sum(LT_NN(lt_mul(LT_NN(lt_to_dtype(x, LT_DTYPE_BF16)), wb)), 0, NULL, false));
  ck_assert_int_eq(y->dtype, LT_DTYPE_BF16);
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  ck_assert_int_eq(x->grad->dtype, LT_DTYPE_F32);
  lt_tensor *wf = LT_NN(lt_to_dtype(wb, LT_DTYPE_F32));
  ck_assert(lt_equal(x->grad, wf)); /* d/dx sum(bf16(x) * wb) = wb exactly */
  /* a bf16 leaf gets a bf16 gradient */
  lt_tensor *b = LT_NN(lt_to_dtype(x, LT_DTYPE_BF16));
  lt_tensor *bl = LT_NN(lt_detach(b));
  LT_OK_OR_FAIL(lt_requires_grad_(bl, true));
  lt_tensor *z = LT_NN(lt_sum(LT_NN(lt_mul(LT_NN(lt_to_dtype(bl, LT_DTYPE_F32)), w)), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(z, NULL, false));
  ck_assert_int_eq(bl->grad->dtype, LT_DTYPE_BF16);
  ck_assert(lt_equal(bl->grad, wb));
  LT_FREE_ALL(x, w, wb, y, wf, b, bl, z);
  lt_scope_end(scope);
}
END_TEST

/* loss = mean(softmax(tanh(x) * w + exp(x/4), -1) * t) - logsumexp(x) and
 * its gradient, in bf16 against f32 on the same (bf16-exact) values. Each
 * op rounds once to 8 significant bits, so after the ~6 roundings of the
 * chain we allow 3% of the largest magnitude. */
static lt_tensor *chain(lt_tensor *x, lt_tensor *w, lt_tensor *t) {
  lt_tensor *a = lt_add(lt_mul(lt_tanh(x), w), lt_exp(lt_div_scalar(x, 4)));
  lt_tensor *s = lt_mul(lt_softmax(a, -1), t);
  return lt_sub(lt_mul_scalar(lt_sum(s, 0, NULL, false), 1.0 / (double)s->numel),
                lt_mean(lt_logsumexp(x, 1, (int[]){-1}, false), 0, NULL, false));
}

START_TEST(test_bf16_chain_vs_f32) {
  lt_scope *scope = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(14));
  lt_tensor *in[3];
  for (int k = 0; k < 3; k++) /* bf16-exact values */
    in[k] = LT_NN(lt_to_dtype(LT_NN(lt_to_dtype(LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(6, 33))), LT_DTYPE_BF16)),
                              LT_DTYPE_F32));
  lt_tensor *grads[2][3];
  lt_tensor *outs[2];
  const lt_dtype dts[2] = {LT_DTYPE_F32, LT_DTYPE_BF16};
  for (int d = 0; d < 2; d++) {
    lt_tensor *x[3];
    for (int k = 0; k < 3; k++) {
      x[k] = LT_NN(lt_to_dtype(in[k], dts[d]));
      x[k] = LT_NN(lt_detach(x[k]));
      LT_OK_OR_FAIL(lt_requires_grad_(x[k], true));
    }
    lt_tensor *y = LT_NN(chain(x[0], x[1], x[2]));
    ck_assert_int_eq(y->dtype, dts[d]);
    LT_OK_OR_FAIL(lt_backward(y, NULL, false));
    outs[d] = LT_NN(lt_to_dtype(y, LT_DTYPE_F32));
    for (int k = 0; k < 3; k++) {
      ck_assert_int_eq(x[k]->grad->dtype, dts[d]);
      grads[d][k] = LT_NN(lt_to_dtype(x[k]->grad, LT_DTYPE_F32));
    }
  }
  double m;
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(outs[0])), 0, NULL, false)), &m));
  LT_ASSERT_CLOSE(outs[1], outs[0], 0.03, 0.03 * m);
  for (int k = 0; k < 3; k++) {
    LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(grads[0][k])), 0, NULL, false)), &m));
    LT_ASSERT_CLOSE(grads[1][k], grads[0][k], 0.03, 0.03 * m);
  }
  lt_generator_free(g);
  lt_scope_end(scope);
}
END_TEST

/* cumsum of bf16 runs in f32 and rounds once: bf16 in, bf16 out (as
 * torch.cumsum), exact where the sums are; its gradient is bf16 too. */
START_TEST(test_bf16_cumsum) {
  lt_scope *scope = lt_scope_begin();
  lt_tensor *x = LT_NN(lt_to_dtype(LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3),
                                                               ((float[]){1.5f, 2, 3, -4, 0.25f, 8}))),
                                   LT_DTYPE_BF16));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *y = LT_NN(lt_cumsum(x, 1));
  ck_assert_int_eq(y->dtype, LT_DTYPE_BF16);
  lt_tensor *want = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), ((float[]){1.5f, 3.5f, 6.5f, -4, -3.75f, 4.25f})));
  LT_ASSERT_CLOSE(LT_NN(lt_to_dtype(y, LT_DTYPE_F32)), want, 0.0, 0.0);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false));
  ck_assert_int_eq(x->grad->dtype, LT_DTYPE_BF16);
  lt_tensor *gw = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), ((float[]){3, 2, 1, 3, 2, 1})));
  LT_ASSERT_CLOSE(LT_NN(lt_to_dtype(x->grad, LT_DTYPE_F32)), gw, 0.0, 0.0);
  lt_scope_end(scope);
}
END_TEST

/* Ops that have no bf16 kernel refuse it with a message (never misread the
 * bytes): they take f32 or f64 only. */
START_TEST(test_bf16_refused_where_unsupported) {
  lt_tensor *b = LT_NN(lt_zeros(LT_DTYPE_BF16, LT_SHAPE(2, 2)));
  lt_generator *g = LT_NNP(lt_generator_new(1));
  LT_EXPECT_NULL_ERR(lt_randn(g, LT_DTYPE_BF16, LT_SHAPE(2)), LT_ERR_DTYPE, "bf16");
  LT_EXPECT_NULL_ERR(lt_layer_norm(b, NULL, NULL, 1e-5), LT_ERR_DTYPE, "bf16");
  lt_generator_free(g);
  lt_tensor_free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bf16");
  TCase *tc = tcase_create("bf16");
  tcase_add_test(tc, test_bf16_cast_bits);
  tcase_add_test(tc, test_bf16_all_values_round_trip);
  tcase_add_test(tc, test_bf16_print_and_names);
  tcase_add_test(tc, test_bf16_dtype_rules);
  tcase_add_test(tc, test_bf16_cast_grad);
  tcase_add_test(tc, test_bf16_chain_vs_f32);
  tcase_add_test(tc, test_bf16_cumsum);
  tcase_add_test(tc, test_bf16_refused_where_unsupported);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
