/*
 * tests/test_print.c: lt_tensor_to_string / lt_print (exact strings, as
 * PyTorch prints the same tensors with the dtype suffix spelled our way), and
 * lt_allclose / lt_equal.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define F32(...) lt_tensor_from_copy(LT_DTYPE_F32, __VA_ARGS__)

/* Compare the text of t (which it frees) with want. */
#define ASSERT_STR(t, want) assert_str((t), (want), __LINE__)
static void assert_str(lt_tensor *t, const char *want, int line) {
  ck_assert_msg(t, "line %d: NULL tensor: %s", line, lt_last_error());
  char *s = lt_tensor_to_string(t);
  ck_assert_msg(s, "line %d: to_string failed: %s", line, lt_last_error());
  ck_assert_msg(strcmp(s, want) == 0, "line %d:\n got: <%s>\nwant: <%s>", line, s, want);
  free(s);
  lt_tensor_free(t);
}

START_TEST(test_print_fixed) {
  ASSERT_STR(F32(LT_SHAPE(2, 2), (float[]){1, 2.5f, -3, 4}),
             "tensor([[ 1.0000,  2.5000],\n"
             "        [-3.0000,  4.0000]])");
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){0.001f, 0.5f}), "tensor([0.0010, 0.5000])");
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){-1.25f, 10.5f}), "tensor([-1.2500, 10.5000])");
  ASSERT_STR(F32(LT_SHAPE(1), (float[]){0.1f}), "tensor([0.1000])");
  ASSERT_STR(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2), (double[]){1.5, 2}),
             "tensor([1.5000, 2.0000], dtype=f64)");
  ASSERT_STR(lt_full(LT_DTYPE_F64, LT_SHAPE(5), 1.5),
             "tensor([1.5000, 1.5000, 1.5000, 1.5000, 1.5000], dtype=f64)");
  /* a suffix that would pass 80 columns goes on its own line */
  ASSERT_STR(lt_full(LT_DTYPE_F64, LT_SHAPE(9), 1.5),
             "tensor([1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000],\n"
             "       dtype=f64)");
}
END_TEST

START_TEST(test_print_int_mode_and_sci) {
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){1, 2}), "tensor([1., 2.])");
  ASSERT_STR(F32(LT_SHAPE(3), (float[]){1, NAN, -INFINITY}), "tensor([1., nan, -inf])");
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){0, 0}), "tensor([0., 0.])");
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){1e-5f, 1}), "tensor([1.0000e-05, 1.0000e+00])");
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){1e9f, 2}), "tensor([1.0000e+09, 2.0000e+00])");
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){1e-8f, NAN}), "tensor([1.0000e-08,        nan])");
  ASSERT_STR(F32(LT_SHAPE(4), (float[]){NAN, INFINITY, -INFINITY, 1.5f}),
             "tensor([   nan,    inf,   -inf, 1.5000])");
  /* -nan prints as nan */
  ASSERT_STR(F32(LT_SHAPE(2), (float[]){-NAN, 0.5f}), "tensor([   nan, 0.5000])");
}
END_TEST

START_TEST(test_print_other_dtypes) {
  ASSERT_STR(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(3), (int64_t[]){1, -20, 300}),
             "tensor([  1, -20, 300], dtype=i64)");
  ASSERT_STR(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(1), (int32_t[]){5}), "tensor([5], dtype=i32)");
  ASSERT_STR(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2), (int64_t[]){INT64_MAX, INT64_MIN}),
             "tensor([ 9223372036854775807, -9223372036854775808], dtype=i64)");
  ASSERT_STR(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(3), (uint8_t[]){1, 0, 1}),
             "tensor([ True, False,  True], dtype=bool)");
  ASSERT_STR(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(2), (uint8_t[]){1, 1}),
             "tensor([True, True], dtype=bool)");
}
END_TEST

START_TEST(test_print_0d_and_empty) {
  ASSERT_STR(lt_scalar(LT_DTYPE_F32, 3.5), "tensor(3.5000)");
  ASSERT_STR(lt_scalar(LT_DTYPE_F32, 0), "tensor(0.)");
  ASSERT_STR(lt_scalar(LT_DTYPE_F32, -2), "tensor(-2.)");
  ASSERT_STR(lt_scalar(LT_DTYPE_I32, 7), "tensor(7, dtype=i32)");
  ASSERT_STR(lt_scalar(LT_DTYPE_F64, NAN), "tensor(nan, dtype=f64)");
  ASSERT_STR(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)), "tensor([], size=(0, 3))");
  ASSERT_STR(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0)), "tensor([])");
  ASSERT_STR(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0)), "tensor([], dtype=f64)");
  ASSERT_STR(lt_zeros(LT_DTYPE_I64, LT_SHAPE(2, 0, 1)), "tensor([], size=(2, 0, 1), dtype=i64)");
}
END_TEST

START_TEST(test_print_layout) {
  /* 3-d: a blank line between 2-d blocks */
  lt_tensor *a = LT_NN(lt_arange(LT_DTYPE_F32, 0, 8, 1));
  ASSERT_STR(lt_reshape(a, LT_SHAPE(2, 2, 2)),
             "tensor([[[0., 1.],\n"
             "         [2., 3.]],\n"
             "\n"
             "        [[4., 5.],\n"
             "         [6., 7.]]])");
  lt_tensor_free(a);
  /* a long row wraps at 80 columns under the first entry */
  ASSERT_STR(lt_arange(LT_DTYPE_F32, 0, 30, 1),
             "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
             "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
             "        28., 29.])");
  /* non-contiguous: logical order */
  lt_tensor *m = LT_NN(F32(LT_SHAPE(2, 2), (float[]){1, 2, 3, 4}));
  ASSERT_STR(lt_transpose(m, 0, 1), "tensor([[1., 3.],\n        [2., 4.]])");
  ASSERT_STR(lt_slice(m, 1, 1, 2, 1), "tensor([[2.],\n        [4.]])");
  ASSERT_STR(lt_select(m, 1, 0), "tensor([1., 3.])");
  lt_tensor *r1 = LT_NN(lt_select(m, 0, 1));
  ASSERT_STR(lt_expand(r1, LT_SHAPE(2, 2)), "tensor([[3., 4.],\n        [3., 4.]])");
  lt_tensor_free(r1);
  lt_tensor_free(m);
}
END_TEST

START_TEST(test_print_summarized) {
  /* numel > 1000: first and last 3 per dim; here max/min > 1000 gives sci */
  ASSERT_STR(lt_arange(LT_DTYPE_F32, 0, 2000, 1),
             "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
             "        1.9990e+03])");
  ASSERT_STR(lt_arange(LT_DTYPE_I64, 0, 1001, 1),
             "tensor([   0,    1,    2,  ...,  998,  999, 1000], dtype=i64)");
  /* 1000 elements is not summarised */
  lt_tensor *k = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1000)));
  char *s = lt_tensor_to_string(k);
  ck_assert(s && !strstr(s, "..."));
  free(s);
  lt_tensor_free(k);
  ASSERT_STR(lt_ones(LT_DTYPE_F32, LT_SHAPE(100, 100)),
             "tensor([[1., 1., 1.,  ..., 1., 1., 1.],\n"
             "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
             "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
             "        ...,\n"
             "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
             "        [1., 1., 1.,  ..., 1., 1., 1.],\n"
             "        [1., 1., 1.,  ..., 1., 1., 1.]])");
  ASSERT_STR(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 1000)),
             "tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n"
             "        [0., 0., 0.,  ..., 0., 0., 0.]])");
  /* the formatter only sees the entries shown: the hidden 1e6 does not force sci */
  lt_tensor *x = LT_NN(lt_full(LT_DTYPE_F32, LT_SHAPE(2000), 1.5));
  int64_t mid = 1000;
  LT_OK_OR_FAIL(lt_set(x, &mid, 1e6));
  ASSERT_STR(x, "tensor([1.5000, 1.5000, 1.5000,  ..., 1.5000, 1.5000, 1.5000])");
  /* 3-d summarised: dims with <= 6 entries are shown whole */
  ASSERT_STR(lt_zeros(LT_DTYPE_I32, LT_SHAPE(2, 100, 8)),
             "tensor([[[0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         ...,\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0]],\n"
             "\n"
             "        [[0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         ...,\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0],\n"
             "         [0, 0, 0,  ..., 0, 0, 0]]], dtype=i32)");
}
END_TEST

START_TEST(test_print_file_and_errors) {
  FILE *f = tmpfile();
  ck_assert(f);
  lt_tensor *x = LT_NN(F32(LT_SHAPE(2), (float[]){1, 2}));
  LT_OK_OR_FAIL(lt_print(x, f));
  rewind(f);
  char buf[64] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  ck_assert_uint_eq(n, strlen("tensor([1., 2.])\n"));
  ck_assert_str_eq(buf, "tensor([1., 2.])\n");
  fclose(f);
  LT_EXPECT_ERR(lt_print(NULL, stdout), LT_ERR_NULL, "print: argument x");
  LT_EXPECT_ERR(lt_print(x, NULL), LT_ERR_NULL, "print");
  ck_assert_ptr_null(lt_tensor_to_string(NULL));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, "tensor_to_string");
  lt_tensor_free(x);
}
END_TEST

/* ---- allclose and equal ------------------------------------------------ */

START_TEST(test_allclose) {
  lt_tensor *a = LT_NN(F32(LT_SHAPE(2, 3), (float[]){1, 2, 3, 1, 2, 3}));
  lt_tensor *b = LT_NN(F32(LT_SHAPE(3), (float[]){1, 2, 3.0001f}));
  lt_tensor *c = LT_NN(F32(LT_SHAPE(3), (float[]){1, 2, 3.1f}));
  lt_clear_error();
  ck_assert(lt_allclose(a, b, 1e-4, 0, false)); /* b broadcast over rows */
  ck_assert(lt_allclose(b, a, 1e-4, 0, false));
  ck_assert(!lt_allclose(a, b, 1e-6, 0, false));
  ck_assert(!lt_allclose(a, c, 1e-3, 1e-3, false));
  ck_assert(lt_allclose(a, c, 0, 0.11, false)); /* atol alone */
  /* rtol is relative to b: |1 - 1.1| = 0.1 <= 0.095 * 1.1, but > 0.095 * 1 */
  lt_tensor *one = LT_NN(lt_scalar(LT_DTYPE_F64, 1.0)), *onep1 = LT_NN(lt_scalar(LT_DTYPE_F64, 1.1));
  ck_assert(lt_allclose(one, onep1, 0.095, 0, false));
  ck_assert(!lt_allclose(onep1, one, 0.095, 0, false));
  /* shapes that do not broadcast: false without an error */
  lt_tensor *d = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)));
  ck_assert(!lt_allclose(a, d, 1, 1, false));
  ck_assert_int_eq(lt_last_status(), LT_OK);
  /* NaN */
  lt_tensor *n1 = LT_NN(F32(LT_SHAPE(2), (float[]){NAN, 1}));
  lt_tensor *n2 = LT_NN(F32(LT_SHAPE(2), (float[]){NAN, 1}));
  lt_tensor *n3 = LT_NN(F32(LT_SHAPE(2), (float[]){1, 1}));
  ck_assert(!lt_allclose(n1, n2, 1e-5, 1e-8, false));
  ck_assert(lt_allclose(n1, n2, 1e-5, 1e-8, true));
  ck_assert(!lt_allclose(n1, n3, 1e-5, 1e-8, true));
  ck_assert(!lt_allclose(n3, n1, 1e9, 1e9, true));
  /* inf */
  lt_tensor *i1 = LT_NN(F32(LT_SHAPE(3), (float[]){INFINITY, -INFINITY, 0}));
  lt_tensor *i2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (double[]){INFINITY, -INFINITY, 0}));
  lt_tensor *i3 = LT_NN(F32(LT_SHAPE(3), (float[]){-INFINITY, -INFINITY, 0}));
  lt_tensor *i4 = LT_NN(F32(LT_SHAPE(3), (float[]){3e38f, -INFINITY, 0}));
  ck_assert(lt_allclose(i1, i2, 0, 0, false));
  ck_assert(!lt_allclose(i1, i3, 1, 1, false));
  ck_assert(!lt_allclose(i1, i4, 1, 1, false)); /* inf vs finite, even with large tolerance */
  ck_assert(!lt_allclose(i4, i1, 1, 1, false));
  /* mixed dtypes and non-contiguous */
  lt_tensor *ints = LT_NN(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(2, 3), (int32_t[]){1, 2, 3, 1, 2, 3}));
  ck_assert(lt_allclose(ints, a, 0, 0, false));
  lt_tensor *m = LT_NN(F32(LT_SHAPE(2, 2), (float[]){1, 2, 3, 4}));
  lt_tensor *mt = LT_NN(lt_transpose(m, 0, 1));
  lt_tensor *want = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 2), (double[]){1, 3, 2, 4}));
  ck_assert(lt_allclose(mt, want, 0, 0, false));
  ck_assert(!lt_allclose(m, want, 0, 0, false));
  /* 0-d against anything, and zero-size */
  lt_tensor *s1 = LT_NN(lt_scalar(LT_DTYPE_F32, 1));
  ck_assert(lt_allclose(s1, n3, 0, 0, false));
  lt_tensor *e1 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3))), *e2 = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(3)));
  ck_assert(lt_allclose(e1, e2, 0, 0, false));
  /* errors */
  ck_assert(!lt_allclose(NULL, a, 0, 0, false));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, "allclose: argument a");
  ck_assert(!lt_allclose(a, NULL, 0, 0, false));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, "allclose: argument b");
  ck_assert(!lt_allclose(a, a, -1, 0, false));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INVALID, ">= 0");
  ck_assert(!lt_allclose(a, a, 0, NAN, false));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INVALID, "allclose");
  lt_tensor *all[] = {a, b, c, one, onep1, d, n1, n2, n3, i1, i2, i3, i4, ints, m, mt, want, s1, e1, e2};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) lt_tensor_free(all[k]);
}
END_TEST

START_TEST(test_equal) {
  lt_tensor *a = LT_NN(F32(LT_SHAPE(2, 2), (float[]){1, 2, 3, 4}));
  lt_tensor *b = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 2), (int64_t[]){1, 2, 3, 4}));
  lt_tensor *c = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 2), (double[]){1, 2, 3, 4.0000001}));
  lt_tensor *row = LT_NN(F32(LT_SHAPE(2), (float[]){1, 2}));
  lt_clear_error();
  ck_assert(lt_equal(a, a));
  ck_assert(lt_equal(a, b) && lt_equal(b, a)); /* dtypes may differ */
  ck_assert(!lt_equal(a, c) && !lt_equal(c, a));
  ck_assert(!lt_equal(b, c) && !lt_equal(c, b));
  ck_assert(!lt_equal(a, row)); /* no broadcasting */
  ck_assert_int_eq(lt_last_status(), LT_OK);
  /* integer vs float: the float must be exactly that integer */
  lt_tensor *half = LT_NN(F32(LT_SHAPE(1), (float[]){3.5f}));
  lt_tensor *three = LT_NN(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(1), (int32_t[]){3}));
  ck_assert(!lt_equal(half, three) && !lt_equal(three, half));
  lt_tensor *big = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){(1LL << 53) + 1}));
  lt_tensor *bigf = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1), (double[]){0x1p53}));
  lt_tensor *big2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){(1LL << 53)}));
  ck_assert(!lt_equal(big, bigf) && !lt_equal(bigf, big));
  ck_assert(lt_equal(big2, bigf));
  ck_assert(!lt_equal(big, big2));
  lt_tensor *huge = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1), (double[]){0x1p63}));
  lt_tensor *imax = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){INT64_MAX}));
  ck_assert(!lt_equal(huge, imax));
  /* bool and integers */
  lt_tensor *bo = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(3), (uint8_t[]){1, 0, 1}));
  lt_tensor *bi = LT_NN(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(3), (int32_t[]){1, 0, 1}));
  lt_tensor *bf = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (double[]){1, 0, 1}));
  ck_assert(lt_equal(bo, bi) && lt_equal(bo, bf) && lt_equal(bf, bo));
  /* NaN is never equal; inf is; -0 == 0 */
  lt_tensor *n1 = LT_NN(F32(LT_SHAPE(3), (float[]){NAN, INFINITY, -0.0f}));
  lt_tensor *n2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (double[]){NAN, INFINITY, 0.0}));
  lt_tensor *n3 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2), (double[]){INFINITY, 0.0}));
  ck_assert(!lt_equal(n1, n1));
  ck_assert(!lt_equal(n1, n2));
  lt_tensor *n1s = LT_NN(lt_slice(n1, 0, 1, 3, 1));
  ck_assert(lt_equal(n1s, n3));
  /* non-contiguous, 0-d, zero-size */
  lt_tensor *at = LT_NN(lt_transpose(a, 0, 1));
  lt_tensor *want = LT_NN(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(2, 2), (int32_t[]){1, 3, 2, 4}));
  ck_assert(lt_equal(at, want) && !lt_equal(a, want));
  lt_tensor *s1 = LT_NN(lt_scalar(LT_DTYPE_F32, 2)), *s2 = LT_NN(lt_scalar(LT_DTYPE_I64, 2));
  lt_tensor *s3 = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){2}));
  ck_assert(lt_equal(s1, s2) && !lt_equal(s1, s3));
  lt_tensor *e1 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3))), *e2 = LT_NN(lt_ones(LT_DTYPE_I64, LT_SHAPE(0, 3)));
  lt_tensor *e3 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 0)));
  ck_assert(lt_equal(e1, e2) && !lt_equal(e1, e3));
  ck_assert_int_eq(lt_last_status(), LT_OK);
  /* errors */
  ck_assert(!lt_equal(NULL, a));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, "equal: argument a");
  ck_assert(!lt_equal(a, NULL));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, "equal: argument b");
  lt_tensor *all[] = {a, b, c, row, half, three, big, bigf, big2, huge, imax, bo, bi, bf, n1, n2,
                      n3, n1s, at, want, s1, s2, s3, e1, e2, e3};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) lt_tensor_free(all[k]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("print");
  TCase *tc = tcase_create("print");
  tcase_add_test(tc, test_print_fixed);
  tcase_add_test(tc, test_print_int_mode_and_sci);
  tcase_add_test(tc, test_print_other_dtypes);
  tcase_add_test(tc, test_print_0d_and_empty);
  tcase_add_test(tc, test_print_layout);
  tcase_add_test(tc, test_print_summarized);
  tcase_add_test(tc, test_print_file_and_errors);
  tcase_add_test(tc, test_allclose);
  tcase_add_test(tc, test_equal);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
