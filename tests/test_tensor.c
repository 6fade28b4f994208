/*
 * tests/test_tensor.c: the tensor core: creation, element access, views and
 * their sharing, reshape copy rules, copies and casts, scopes and reference
 * counts, status codes and error messages, the runtime (threads, BLIS kernels).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/storage_internal.h"
#include "test_util.h"

START_TEST(test_creation) {
  lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3)));
  LT_ASSERT_SHAPE(z, 2, 3);
  ck_assert_int_eq(z->numel, 6);
  ck_assert(lt_is_contiguous(z));
  LT_ASSERT_VALUES(z, 0, 0, 0, 0, 0, 0, 0);
  lt_tensor *o = LT_NN(lt_ones(LT_DTYPE_I64, LT_SHAPE(3)));
  LT_ASSERT_VALUES(o, 0, 1, 1, 1);
  lt_tensor *f = LT_NN(lt_full(LT_DTYPE_F64, LT_SHAPE(2, 2), 2.5));
  LT_ASSERT_VALUES(f, 0, 2.5, 2.5, 2.5, 2.5);
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_F32, 7));
  ck_assert_int_eq(s->ndim, 0);
  ck_assert_int_eq(s->numel, 1);
  double v;
  LT_OK_OR_FAIL(lt_item(s, &v));
  ck_assert(v == 7);
  lt_tensor *a = LT_NN(lt_arange(LT_DTYPE_I32, 0, 5, 2));
  LT_ASSERT_VALUES(a, 0, 0, 2, 4);
  lt_tensor *a2 = LT_NN(lt_arange(LT_DTYPE_F32, 1, 0, -0.25));
  LT_ASSERT_VALUES(a2, 1e-7, 1, 0.75, 0.5, 0.25);
  lt_tensor *l = LT_NN(lt_linspace(LT_DTYPE_F64, 0, 1, 5));
  LT_ASSERT_VALUES(l, 1e-15, 0, 0.25, 0.5, 0.75, 1);
  lt_tensor *e = LT_NN(lt_eye(LT_DTYPE_F32, 2, 3));
  LT_ASSERT_VALUES(e, 0, 1, 0, 0, 0, 1, 0);
  lt_tensor *b = LT_NN(lt_full(LT_DTYPE_BOOL, LT_SHAPE(2), 3.0));
  LT_ASSERT_VALUES(b, 0, 1, 1);
  lt_tensor *zs = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 4)));
  ck_assert_int_eq(zs->numel, 0);
  lt_tensor *zl = LT_NN(lt_zeros_like(f));
  ck_assert_int_eq(zl->dtype, LT_DTYPE_F64);
  lt_tensor *all[] = {z, o, f, s, a, a2, l, e, b, zs, zl};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

START_TEST(test_from_buffers) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  lt_tensor *c = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), buf));
  lt_tensor *b = LT_NN(lt_tensor_from_borrowed(LT_DTYPE_F32, LT_SHAPE(2, 3), buf));
  buf[0] = 100;
  LT_ASSERT_VALUES(c, 0, 1, 2, 3, 4, 5, 6);  /* copied */
  LT_ASSERT_VALUES(b, 0, 100, 2, 3, 4, 5, 6); /* borrowed */
  LT_OK_OR_FAIL(lt_set(b, (int64_t[]){1, -1}, 42));
  ck_assert(buf[5] == 42);
  lt_tensor_free(b);
  ck_assert(buf[5] == 42); /* the user's buffer is never freed */
  lt_tensor_free(c);
  LT_EXPECT_NULL_ERR(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2), NULL), LT_ERR_NULL, "data is NULL");
  LT_EXPECT_NULL_ERR(lt_tensor_from_borrowed(LT_DTYPE_F32, LT_SHAPE(2), NULL), LT_ERR_NULL, "data");
}
END_TEST

START_TEST(test_access_errors) {
  lt_tensor *x = LT_NN(lt_arange(LT_DTYPE_F32, 0, 6, 1));
  double v = -1;
  LT_EXPECT_ERR(lt_item(x, &v), LT_ERR_SHAPE, "only one-element");
  ck_assert(v == -1);
  LT_EXPECT_ERR(lt_get(x, (int64_t[]){6}, &v), LT_ERR_INDEX, "index 6 is out of range for dim 0 of [6] f32");
  LT_OK_OR_FAIL(lt_get(x, (int64_t[]){-1}, &v));
  ck_assert(v == 5);
  float out[5];
  LT_EXPECT_ERR(lt_tensor_read(x, LT_DTYPE_F32, out, 5), LT_ERR_INVALID, "dst holds 5");
  LT_EXPECT_NULL_ERR(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, -3)), LT_ERR_INVALID, "negative size");
  LT_EXPECT_NULL_ERR(lt_zeros(LT_DTYPE_F32, 9, (int64_t[9]){1}), LT_ERR_INVALID, "rank 9");
  LT_EXPECT_NULL_ERR(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1LL << 40, 1LL << 30)), LT_ERR_OVERFLOW, "2^62");
  LT_EXPECT_NULL_ERR(lt_zeros((lt_dtype)99, LT_SHAPE(2)), LT_ERR_DTYPE, "invalid dtype");
  LT_EXPECT_NULL_ERR(lt_arange(LT_DTYPE_F32, 0, 1, 0), LT_ERR_INVALID, "step");
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_status_table) {
  ck_assert_str_eq(lt_status_name(LT_ERR_SHAPE), "LT_ERR_SHAPE");
  ck_assert_str_eq(lt_status_message(LT_ERR_SHAPE), "incompatible shapes");
  ck_assert_str_eq(lt_status_name((lt_status)1000), "LT_UNKNOWN");
  for (int s = 0; s < LT_STATUS_COUNT; s++) ck_assert(strlen(lt_status_message((lt_status)s)) > 0);
  /* A NULL argument keeps a pending error (propagation through compositions). */
  lt_clear_error();
  LT_EXPECT_NULL_ERR(lt_reshape(NULL, LT_SHAPE(2)), LT_ERR_NULL, "reshape: argument x is NULL");
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3)));
  lt_tensor *bad = lt_view(x, LT_SHAPE(4));
  ck_assert_ptr_null(bad);
  ck_assert_ptr_null(lt_transpose(lt_view(x, LT_SHAPE(5)), 0, 1));
  ck_assert_int_eq(lt_last_status(), LT_ERR_SHAPE);
  ck_assert_msg(strstr(lt_last_error(), "view: x is [2,3] f32") != NULL, "%s", lt_last_error());
  lt_clear_error();
  ck_assert_int_eq(lt_last_status(), LT_OK);
  ck_assert_str_eq(lt_last_error(), "");
  lt_tensor_free(x);
}
END_TEST

/* The public way for code outside the library to raise an error. */
START_TEST(test_error_set) {
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(4, 8)));
  char buf[LT_TENSOR_DESC_SIZE];
  ck_assert_str_eq(lt_tensor_desc(x, buf, sizeof buf), "[4,8] f32");
  ck_assert_str_eq(lt_tensor_desc(NULL, buf, sizeof buf), "NULL");
  ck_assert_str_eq(lt_tensor_desc(x, buf, 4), "[4,");
  lt_clear_error();
  ck_assert_int_eq(lt_error_set(LT_ERR_SHAPE, "myop: x is %s: need %d-d", LT_DESC(x), 3), LT_ERR_SHAPE);
  ck_assert_int_eq(lt_last_status(), LT_ERR_SHAPE);
  ck_assert_str_eq(lt_last_error(), "myop: x is [4,8] f32: need 3-d");
  /* The arguments may point into the current message. */
  ck_assert_int_eq(lt_error_set(LT_ERR_IO, "outer: %s", lt_last_error()), LT_ERR_IO);
  ck_assert_str_eq(lt_last_error(), "outer: myop: x is [4,8] f32: need 3-d");
  /* A code outside the table is recorded as LT_ERR_INVALID. */
  ck_assert_int_eq(lt_error_set((lt_status)1000, "bad code %d", 1000), LT_ERR_INVALID);
  ck_assert_int_eq(lt_last_status(), LT_ERR_INVALID);
  /* A NULL argument keeps a pending error, else names op and argument. */
  ck_assert_int_eq(lt_error_null_arg("myop", "x"), LT_ERR_INVALID);
  ck_assert_str_eq(lt_last_error(), "bad code 1000");
  lt_clear_error();
  ck_assert_int_eq(lt_error_null_arg("myop", "x"), LT_ERR_NULL);
  ck_assert_str_eq(lt_last_error(), "myop: argument x is NULL");
  lt_clear_error();
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_views_share_storage) {
  lt_tensor *x = LT_NN(lt_arange(LT_DTYPE_F32, 0, 24, 1));
  lt_tensor *v = LT_NN(lt_view(x, LT_SHAPE(2, 3, 4)));
  ck_assert_ptr_eq(v->storage, x->storage);
  LT_ASSERT_SHAPE(v, 2, 3, 4);
  lt_tensor *t = LT_NN(lt_transpose(v, 0, 2)); /* [4,3,2] */
  LT_ASSERT_SHAPE(t, 4, 3, 2);
  ck_assert(!lt_is_contiguous(t));
  ck_assert_ptr_eq(t->storage, x->storage);
  double val;
  LT_OK_OR_FAIL(lt_get(t, (int64_t[]){3, 1, 1}, &val)); /* v[1,1,3] = 12+4+3 */
  ck_assert(val == 19);
  /* A write through a view is seen through the base. */
  LT_OK_OR_FAIL(lt_set(t, (int64_t[]){3, 1, 1}, -5));
  LT_OK_OR_FAIL(lt_get(x, (int64_t[]){19}, &val));
  ck_assert(val == -5);
  /* view of a transposed tensor is impossible, reshape copies */
  LT_EXPECT_NULL_ERR(lt_view(t, LT_SHAPE(24)), LT_ERR_SHAPE, "cannot be viewed");
  lt_tensor *r = LT_NN(lt_reshape(t, LT_SHAPE(-1)));
  ck_assert_ptr_ne(r->storage, x->storage);
  LT_OK_OR_FAIL(lt_get(r, (int64_t[]){1}, &val)); /* t[0,0,1] = v[1,0,0] = 12 */
  ck_assert(val == 12);
  /* reshape that can be a view is a view */
  lt_tensor *r2 = LT_NN(lt_reshape(v, LT_SHAPE(6, -1)));
  ck_assert_ptr_eq(r2->storage, x->storage);
  LT_ASSERT_SHAPE(r2, 6, 4);
  /* permute */
  lt_tensor *p = LT_NN(lt_permute(v, LT_DIMS(1, 2, 0)));
  LT_ASSERT_SHAPE(p, 3, 4, 2);
  LT_OK_OR_FAIL(lt_get(p, (int64_t[]){2, 1, 1}, &val)); /* v[1,2,1] = 12+8+1 */
  ck_assert(val == 21);
  LT_EXPECT_NULL_ERR(lt_permute(v, LT_DIMS(0, 0, 1)), LT_ERR_INVALID, "appears twice");
  LT_EXPECT_NULL_ERR(lt_permute(v, LT_DIMS(0, 1)), LT_ERR_INVALID, "expected 3");
  lt_tensor *all[] = {x, v, t, r, r2, p};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

START_TEST(test_view_of_noncontiguous) {
  /* Viewing a transposed tensor works when the grouped dims stay contiguous. */
  lt_tensor *x = LT_NN(lt_arange(LT_DTYPE_F64, 0, 24, 1));
  lt_tensor *v = LT_NN(lt_view(x, LT_SHAPE(2, 3, 4)));
  lt_tensor *t = LT_NN(lt_transpose(v, 0, 1)); /* [3,2,4] strides [4,12,1] */
  lt_tensor *w = LT_NN(lt_view(t, LT_SHAPE(3, 2, 2, 2)));
  ck_assert_ptr_eq(w->storage, x->storage);
  lt_tensor *wc = LT_NN(lt_contiguous(w));
  lt_tensor *tc = LT_NN(lt_contiguous(t));
  lt_tensor *tcv = LT_NN(lt_view(tc, LT_SHAPE(3, 2, 2, 2)));
  LT_ASSERT_CLOSE(wc, tcv, 0, 0);
  lt_tensor *all[] = {x, v, t, w, wc, tc, tcv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

START_TEST(test_slice_select_squeeze) {
  lt_tensor *x = LT_NN(lt_arange(LT_DTYPE_I64, 0, 10, 1));
  lt_tensor *s = LT_NN(lt_slice(x, 0, 1, 9, 3)); /* 1,4,7 */
  LT_ASSERT_VALUES(s, 0, 1, 4, 7);
  lt_tensor *s2 = LT_NN(lt_slice(x, 0, -3, 100, 1)); /* clamped: 7,8,9 */
  LT_ASSERT_VALUES(s2, 0, 7, 8, 9);
  lt_tensor *s3 = LT_NN(lt_slice(x, 0, 5, 2, 1)); /* empty */
  ck_assert_int_eq(s3->numel, 0);
  LT_EXPECT_NULL_ERR(lt_slice(x, 0, 0, 5, 0), LT_ERR_INVALID, "step 0");
  lt_tensor *n = LT_NN(lt_narrow(x, 0, 2, 3));
  LT_ASSERT_VALUES(n, 0, 2, 3, 4);
  LT_EXPECT_NULL_ERR(lt_narrow(x, 0, 8, 3), LT_ERR_INDEX, "exceeds dim 0 of size 10");
  lt_tensor *m = LT_NN(lt_view(x, LT_SHAPE(2, 5)));
  lt_tensor *row = LT_NN(lt_select(m, 0, 1));
  LT_ASSERT_VALUES(row, 0, 5, 6, 7, 8, 9);
  lt_tensor *col = LT_NN(lt_select(m, 1, -1));
  LT_ASSERT_VALUES(col, 0, 4, 9);
  LT_EXPECT_NULL_ERR(lt_select(m, 1, 5), LT_ERR_INDEX, "index 5 is out of range for dim 1");
  LT_EXPECT_NULL_ERR(lt_select(m, 2, 0), LT_ERR_INDEX, "dim 2 is out of range for a tensor of rank 2");
  lt_tensor *u = LT_NN(lt_unsqueeze(m, 1));
  LT_ASSERT_SHAPE(u, 2, 1, 5);
  lt_tensor *u2 = LT_NN(lt_unsqueeze(m, -1));
  LT_ASSERT_SHAPE(u2, 2, 5, 1);
  lt_tensor *q = LT_NN(lt_squeeze(u, 1));
  LT_ASSERT_SHAPE(q, 2, 5);
  lt_tensor *q2 = LT_NN(lt_squeeze(u, 0)); /* size 2: unchanged */
  LT_ASSERT_SHAPE(q2, 2, 1, 5);
  lt_tensor *one = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1, 3, 1)));
  lt_tensor *qa = LT_NN(lt_squeeze_all(one));
  LT_ASSERT_SHAPE(qa, 3);
  lt_tensor *f = LT_NN(lt_flatten(u, 1, 2));
  LT_ASSERT_SHAPE(f, 2, 5);
  lt_tensor *all[] = {x, s, s2, s3, n, m, row, col, u, u2, q, q2, one, qa, f};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

START_TEST(test_expand_broadcast) {
  lt_tensor *x = LT_NN(lt_arange(LT_DTYPE_F32, 0, 3, 1));
  lt_tensor *c = LT_NN(lt_view(x, LT_SHAPE(3, 1)));
  lt_tensor *e = LT_NN(lt_expand(c, LT_SHAPE(2, 3, 4)));
  LT_ASSERT_SHAPE(e, 2, 3, 4);
  ck_assert_int_eq(e->stride[0], 0);
  ck_assert_int_eq(e->stride[2], 0);
  double v;
  LT_OK_OR_FAIL(lt_get(e, (int64_t[]){1, 2, 3}, &v));
  ck_assert(v == 2);
  LT_EXPECT_NULL_ERR(lt_expand(c, LT_SHAPE(2, 4)), LT_ERR_SHAPE, "cannot expand dim 0 of size 3 to 2");
  /* in-place writes to an expanded tensor are refused */
  LT_EXPECT_ERR(lt_fill_(e, 1), LT_ERR_INVALID, "stride-0");
  int nd;
  int64_t out[LT_MAX_DIMS];
  LT_OK_OR_FAIL(lt_broadcast_shapes(LT_SHAPE(5, 1, 3), LT_SHAPE(4, 1), &nd, out));
  ck_assert_int_eq(nd, 3);
  ck_assert(out[0] == 5 && out[1] == 4 && out[2] == 3);
  LT_OK_OR_FAIL(lt_broadcast_shapes(0, NULL, LT_SHAPE(0, 2), &nd, out));
  ck_assert(nd == 2 && out[0] == 0 && out[1] == 2);
  LT_EXPECT_ERR(lt_broadcast_shapes(LT_SHAPE(2, 3), LT_SHAPE(4, 3), &nd, out), LT_ERR_SHAPE,
                "shapes [2,3] and [4,3] are not broadcastable");
  lt_tensor *all[] = {x, c, e};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

START_TEST(test_copy_cast) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 2), (float[]){1.7f, -2.5f, 3.0f, 0.0f}));
  lt_tensor *i = LT_NN(lt_to_dtype(x, LT_DTYPE_I32));
  LT_ASSERT_VALUES(i, 0, 1, -2, 3, 0); /* truncation toward zero */
  lt_tensor *b = LT_NN(lt_to_dtype(x, LT_DTYPE_BOOL));
  LT_ASSERT_VALUES(b, 0, 1, 1, 1, 0);
  lt_tensor *d = LT_NN(lt_to_dtype(x, LT_DTYPE_F64));
  LT_ASSERT_CLOSE(d, x, 0, 0);
  int64_t big = (1LL << 53) + 1;
  lt_tensor *l = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), &big));
  lt_tensor *l2 = LT_NN(lt_to_dtype(l, LT_DTYPE_I64));
  int64_t back;
  LT_OK_OR_FAIL(lt_tensor_read(l2, LT_DTYPE_I64, &back, 1));
  ck_assert(back == big); /* exact through integers */
  /* copy_ with broadcasting and a transposed source */
  lt_tensor *dst = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2, 2)));
  lt_tensor *xt = LT_NN(lt_transpose(x, 0, 1));
  LT_OK_OR_FAIL(lt_copy_(dst, xt));
  LT_ASSERT_VALUES(dst, 1e-6, 1.7, 3.0, -2.5, 0.0);
  lt_tensor *row = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2), (float[]){5, 6}));
  uint64_t v0 = lt__version(dst);
  LT_OK_OR_FAIL(lt_copy_(dst, row));
  ck_assert(lt__version(dst) == v0 + 1);
  LT_ASSERT_VALUES(dst, 0, 5, 6, 5, 6);
  lt_tensor *wrong = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3)));
  LT_EXPECT_ERR(lt_copy_(dst, wrong), LT_ERR_SHAPE, "src is [3] f32, dst is [2,2] f64");
  LT_ASSERT_VALUES(dst, 0, 5, 6, 5, 6); /* untouched */
  /* overlapping copy within one storage */
  lt_tensor *seq = LT_NN(lt_arange(LT_DTYPE_F32, 0, 5, 1));
  lt_tensor *a = LT_NN(lt_slice(seq, 0, 1, 5, 1));
  lt_tensor *bsrc = LT_NN(lt_slice(seq, 0, 0, 4, 1));
  LT_OK_OR_FAIL(lt_copy_(a, bsrc));
  LT_ASSERT_VALUES(seq, 0, 0, 0, 1, 2, 3);
  /* clone is a fresh copy; contiguous of a contiguous tensor shares storage */
  lt_tensor *cl = LT_NN(lt_clone(x));
  ck_assert_ptr_ne(cl->storage, x->storage);
  lt_tensor *ct = LT_NN(lt_contiguous(x));
  ck_assert_ptr_eq(ct->storage, x->storage);
  lt_tensor *ct2 = LT_NN(lt_contiguous(xt));
  ck_assert(lt_is_contiguous(ct2));
  LT_ASSERT_VALUES(ct2, 1e-6, 1.7, 3.0, -2.5, 0.0);
  lt_tensor *all[] = {x, i, b, d, l, l2, dst, xt, row, wrong, seq, a, bsrc, cl, ct, ct2};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) lt_tensor_free(all[k]);
}
END_TEST

START_TEST(test_fill_noncontiguous) {
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_I32, LT_SHAPE(3, 4)));
  lt_tensor *c = LT_NN(lt_slice(x, 1, 1, 4, 2)); /* columns 1 and 3 */
  LT_OK_OR_FAIL(lt_fill_(c, 7));
  LT_ASSERT_VALUES(x, 0, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7);
  LT_OK_OR_FAIL(lt_zero_(x));
  LT_ASSERT_VALUES(x, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  lt_tensor_free(c);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_scopes_and_refcounts) {
  int64_t t0 = lt__live_tensors(), s0 = lt__live_storages();
  lt_tensor *kept = NULL;
  lt_scope *outer = lt_scope_begin();
  ck_assert_ptr_nonnull(outer);
  for (int i = 0; i < 100; i++) {
    lt_tensor *a = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(4)));
    lt_tensor *v = LT_NN(lt_view(a, LT_SHAPE(2, 2)));
    (void)v;
    if (i == 50) kept = lt_tensor_keep(LT_NN(lt_transpose(v, 0, 1)));
    if (i == 60) lt_tensor_free(a); /* freeing a scoped tensor early is fine */
  }
  lt_scope *inner = lt_scope_begin();
  LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(3)));
  (void)inner;
  lt_scope_end(outer); /* ends inner too */
  /* kept survives, with its storage */
  ck_assert_int_eq(lt__live_tensors(), t0 + 1);
  ck_assert_int_eq(lt__live_storages(), s0 + 1);
  LT_ASSERT_SHAPE(kept, 2, 2);
  lt_tensor *r = lt_tensor_retain(kept);
  ck_assert_ptr_eq(r, kept);
  lt_tensor_free(kept);
  ck_assert_int_eq(lt__live_tensors(), t0 + 1);
  lt_tensor_free(r);
  ck_assert_int_eq(lt__live_tensors(), t0);
  ck_assert_int_eq(lt__live_storages(), s0);
  lt_tensor_free(NULL);
  lt_scope_end(NULL);
  /* lt_scope_return: the result goes to the enclosing scope, the rest is freed */
  lt_scope *caller = lt_scope_begin();
  lt_scope *own = lt_scope_begin();
  lt_tensor *x = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(3)));
  lt_tensor *y = lt_scope_return(own, LT_NN(lt_mul_scalar(LT_NN(lt_add_scalar(x, 1)), 2)));
  ck_assert_int_eq(lt__live_tensors(), t0 + 1); /* x and x + 1 are gone */
  LT_ASSERT_VALUES(y, 0, 4, 4, 4);
  lt_scope_end(caller);
  ck_assert_int_eq(lt__live_tensors(), t0);
  own = lt_scope_begin(); /* no enclosing scope: the caller owns it */
  y = lt_scope_return(own, LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2))));
  ck_assert_int_eq(lt__live_tensors(), t0 + 1);
  lt_tensor_free(y);
  ck_assert_ptr_null(lt_scope_return(lt_scope_begin(), NULL));
  ck_assert_int_eq(lt__live_tensors(), t0);
  ck_assert_int_eq(lt__live_storages(), s0);
}
END_TEST

START_TEST(test_zero_d_and_zero_size) {
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_F64, 3.5));
  lt_tensor *u = LT_NN(lt_unsqueeze(s, 0));
  LT_ASSERT_SHAPE(u, 1);
  lt_tensor *r = LT_NN(lt_reshape(s, LT_SHAPE(1, 1)));
  LT_ASSERT_SHAPE(r, 1, 1);
  lt_tensor *back = LT_NN(lt_reshape(r, 0, NULL));
  ck_assert_int_eq(back->ndim, 0);
  lt_tensor *e = LT_NN(lt_expand(s, LT_SHAPE(2, 3)));
  LT_ASSERT_SHAPE(e, 2, 3);
  lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 0, 3)));
  lt_tensor *zr = LT_NN(lt_reshape(z, LT_SHAPE(0, 7)));
  LT_ASSERT_SHAPE(zr, 0, 7);
  LT_EXPECT_NULL_ERR(lt_reshape(z, LT_SHAPE(-1, 0)), LT_ERR_SHAPE, "cannot infer");
  lt_tensor *zt = LT_NN(lt_transpose(z, 0, 2));
  lt_tensor *zc = LT_NN(lt_contiguous(zt));
  LT_ASSERT_SHAPE(zc, 3, 0, 2);
  LT_OK_OR_FAIL(lt_fill_(zc, 1));
  lt_tensor *all[] = {s, u, r, back, e, z, zr, zt, zc};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

START_TEST(test_runtime) {
  lt_runtime_info info;
  LT_OK_OR_FAIL(lt_runtime_get_info(&info));
  ck_assert_str_eq(info.version, lt_version());
  ck_assert(info.blas_arch && strlen(info.blas_arch) > 0);
  ck_assert(info.num_threads >= 1);
  /* On a CPU with AVX-512 the generic fallback must not be chosen. */
  __builtin_cpu_init();
  if (!getenv("BLIS_ARCH_TYPE") || info.blas_arch_from_user == false) {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      ck_assert_str_eq(info.blas_arch, "skx");
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      ck_assert_str_ne(info.blas_arch, "generic");
  }
  int n = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  ck_assert_int_eq(lt_get_num_threads(), 1);
  LT_EXPECT_ERR(lt_set_num_threads(0), LT_ERR_INVALID, "need at least 1");
  LT_OK_OR_FAIL(lt_set_num_threads(n));
  ck_assert_str_eq(lt_dtype_name(LT_DTYPE_BOOL), "bool");
  ck_assert_int_eq(lt_dtype_size(LT_DTYPE_I64), 8);
}
END_TEST

/* The strided iterator: a big non-contiguous copy gives the same result on 1
 * and 2 threads, and matches a naive loop. */
START_TEST(test_iter_parallel_copy) {
  lt_tensor *x = LT_NN(lt_arange(LT_DTYPE_F32, 0, 300 * 500, 1));
  lt_tensor *v = LT_NN(lt_view(x, LT_SHAPE(300, 500)));
  lt_tensor *t = LT_NN(lt_transpose(v, 0, 1));
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  lt_tensor *c1 = LT_NN(lt_contiguous(t));
  LT_OK_OR_FAIL(lt_set_num_threads(2));
  lt_tensor *c2 = LT_NN(lt_contiguous(t));
  LT_ASSERT_CLOSE(c1, c2, 0, 0);
  float *p = c2->data;
  for (int i = 0; i < 500; i++)
    for (int j = 0; j < 300; j++) ck_assert(p[i * 300 + j] == (float)(j * 500 + i));
  lt_tensor *all[] = {x, v, t, c1, c2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_free(all[i]);
}
END_TEST

/* The storage cache (tensor/tensor.c): a freed large block comes back for
 * the next request of its size class (the same memory, no new pages; other
 * classes: test_storage_cache_fit), and LT_STORAGE_CACHE is documented to
 * turn it off. Under AddressSanitizer a cached block is poisoned: writing
 * through a freed tensor's pointer is reported (test_storage_cache_asan). */
START_TEST(test_storage_cache) {
  const int64_t n = (int64_t)(1 << 20) / 4; /* 1 MiB of f32: above the cache's 256 KiB */
  lt_tensor *a = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n));
  void *pa = a->data;
  lt_tensor_free(a);
  const int64_t n2 = n - 1000; /* the same size class */
  lt_tensor *b = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n2));
  const char *off = getenv("LT_STORAGE_CACHE");
  if (!(off && !strcmp(off, "0"))) ck_assert_ptr_eq(b->data, pa);
  ((float *)b->data)[n2 - 1] = 1.0f; /* all of it is usable */
  lt_tensor_free(b);
}
END_TEST

/* A request whose class has no cached block takes a cached block at most
 * 50% larger (the smallest such), whole: a freed 8 MiB block serves 6 MiB
 * (usable to its end) but not 4 MiB (twice as large), which gets new memory. */
START_TEST(test_storage_cache_fit) {
  const char *off = getenv("LT_STORAGE_CACHE");
  if (off && !strcmp(off, "0")) return;
  const int64_t mib = (int64_t)1 << 20, n8 = 8 * mib / 4, n6 = 6 * mib / 4, n4 = 4 * mib / 4;
  lt_tensor *a = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n8));
  void *pa = a->data;
  lt_tensor_free(a);
  lt_tensor *b = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n6));
  ck_assert_ptr_eq(b->data, pa);
  size_t cached, used;
  lt__storage_cache_stats(&cached, &used, NULL);
  ck_assert_uint_ge(used, (size_t)(8 * mib)); /* counted whole */
  ((float *)b->data)[n6 - 1] = 1.0f;
  lt_tensor_free(b); /* cached again as the 8 MiB block */
  lt_tensor *c = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n4));
  ck_assert_ptr_ne(c->data, pa);
  lt_tensor *d = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n8)); /* its own class: still cached */
  ck_assert_ptr_eq(d->data, pa);
  lt_tensor_free(c), lt_tensor_free(d);
}
END_TEST

/* The cache's bound follows the peak of the blocks in use: a step that
 * frees 640 MiB of activations (40 blocks of 16 MiB, above the fixed 512
 * MiB) and allocates them again finds every block cached (a fixed bound
 * evicted 8, which the next step got fresh from the system). And the bound
 * holds: while blocks of another class are allocated, in use + cached stays
 * within max(peak + min(peak / 4, 512 MiB), in use + 512 MiB). */
START_TEST(test_storage_cache_follows_peak) {
  const char *off = getenv("LT_STORAGE_CACHE");
  if (off && !strcmp(off, "0")) return;
  enum { K = 40 };
  const size_t mib = (size_t)1 << 20;
  lt_tensor *t[K];
  size_t cached0, cached, used, peak;
  lt__storage_cache_stats(&cached0, NULL, NULL);
  for (int round = 0; round < 2; round++) {
    const int64_t n = (int64_t)(16 * mib / 4); /* pages are never touched: no memory is used */
    for (int i = 0; i < K; i++) t[i] = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n));
    if (round == 1) { /* every block came from the cache */
      lt__storage_cache_stats(&cached, NULL, NULL);
      ck_assert_uint_eq(cached, cached0);
    }
    for (int i = 0; i < K; i++) lt_tensor_free(t[i]);
    lt__storage_cache_stats(&cached, NULL, NULL);
    ck_assert_uint_ge(cached, cached0 + (size_t)K * 16 * mib);
  }
  for (int i = 0; i < K; i++) { /* 12 MiB: another class */
    const int64_t n = (int64_t)(12 * mib / 4);
    t[i] = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n));
    lt__storage_cache_stats(&cached, &used, &peak);
    const size_t slack = peak / 4 < 512 * mib ? peak / 4 : 512 * mib;
    const size_t bound = peak + slack > used + 512 * mib ? peak + slack : used + 512 * mib;
    ck_assert_msg(used + cached <= bound, "in use %zu + cached %zu > %zu", used, cached, bound);
  }
  for (int i = 0; i < K; i++) lt_tensor_free(t[i]);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
START_TEST(test_storage_cache_asan) {
  const int64_t n = (int64_t)(1 << 20) / 4;
  lt_tensor *a = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n));
  volatile float *p = a->data;
  lt_tensor_free(a); /* cached, poisoned */
  p[10] = 1.0f;      /* use after free: ASan reports it and exits 1 */
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("tensor");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_creation);
  tcase_add_test(tc, test_from_buffers);
  tcase_add_test(tc, test_access_errors);
  tcase_add_test(tc, test_status_table);
  tcase_add_test(tc, test_error_set);
  tcase_add_test(tc, test_views_share_storage);
  tcase_add_test(tc, test_view_of_noncontiguous);
  tcase_add_test(tc, test_slice_select_squeeze);
  tcase_add_test(tc, test_expand_broadcast);
  tcase_add_test(tc, test_copy_cast);
  tcase_add_test(tc, test_fill_noncontiguous);
  tcase_add_test(tc, test_scopes_and_refcounts);
  tcase_add_test(tc, test_zero_d_and_zero_size);
  tcase_add_test(tc, test_runtime);
  tcase_add_test(tc, test_iter_parallel_copy);
  tcase_add_test(tc, test_storage_cache);
  tcase_add_test(tc, test_storage_cache_fit);
  tcase_add_test(tc, test_storage_cache_follows_peak);
#if defined(__SANITIZE_ADDRESS__)
  /* ASan's report ends the (forked) test with exit 1, or with SIGABRT under
   * ASAN_OPTIONS=abort_on_error=1 (as ./do.sh test runs it). */
  const char *asan = getenv("ASAN_OPTIONS");
  if (asan && strstr(asan, "abort_on_error=1")) tcase_add_test_raise_signal(tc, test_storage_cache_asan, SIGABRT);
  else tcase_add_exit_test(tc, test_storage_cache_asan, 1);
#endif
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
