/*
 * tests/test_safetensors.c: checkpoint/safetensors.h. Round trips of every
 * dtype written (values, shapes, metadata, views over the mapping), F16 and
 * BF16 read from hand-made bytes, and crafted files that must be refused
 * with a message naming the file, the tensor and the field: header length
 * over the cap or past the end, overlapping offsets, gaps, trailing bytes,
 * dtype sizes that do not match, huge shapes, duplicate names, truncation,
 * FIFOs. lt_st_load_params is checked to match everything before writing.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/safetensors.h"
#include "test_util.h"

/* A file of an 8-byte length, the header text and the data bytes. */
static char *craft(const char *header, const void *data, size_t n) {
  size_t hl = strlen(header);
  unsigned char *buf = malloc(8 + hl + n + 1);
  ck_assert_ptr_nonnull(buf);
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hl >> (8 * b));
  memcpy(buf + 8, header, hl);
  if (n) memcpy(buf + 8 + hl, data, n);
  char *path = lt_test_write_temp(buf, 8 + hl + n);
  free(buf);
  return path;
}

static void expect_open_fails(const char *header, const void *data, size_t n, lt_status st, const char *substr) {
  char *path = craft(header, data, n);
  lt_st_file *f = lt_st_open(path);
  if (f) ck_abort_msg("opened a bad file: header %s", header);
  ck_assert_msg(strstr(lt_last_error(), path), "the message does not name the file: %s", lt_last_error());
  LT_EXPECT_ERR(lt_last_status(), st, substr);
  unlink(path);
  free(path);
}

START_TEST(round_trip) {
  char dir[] = "/tmp/lt_st_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *path = lt_test_join(dir, "t.safetensors");
  lt_tensor *a = LT_NN(lt_arange(LT_DTYPE_F32, -3, 3, 0.5)), *a2 = LT_NN(lt_reshape(a, 2, (int64_t[]){3, 4}));
  lt_tensor *at = LT_NN(lt_transpose(a2, 0, 1)); /* not contiguous: written row-major */
  lt_tensor *b = LT_NN(lt_test_from_f64(LT_DTYPE_F64, 1, (int64_t[]){3}, (double[]){1e300, -0.0, 1.0 / 3}));
  lt_tensor *c = LT_NN(lt_test_from_i64(LT_DTYPE_I32, 1, (int64_t[]){2}, (int64_t[]){-7, 2147483647}));
  lt_tensor *d = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 2, (int64_t[]){1, 2}, (int64_t[]){INT64_MIN, 5}));
  lt_tensor *e = LT_NN(lt_scalar(LT_DTYPE_F32, 2.5));
  lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){0, 3}));
  const char *names[] = {"w.t", "b", "c", "d", "scalar", "empty"};
  const lt_tensor *ts[] = {at, b, c, d, e, z};
  const char *keys[] = {"format", "note"}, *vals[] = {"pt", "héllo \"quoted\""};
  LT_OK_OR_FAIL(lt_st_save(path, 6, names, ts, 2, keys, vals));

  lt_st_file *f = lt_st_open(path);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  ck_assert(lt_st_is_mapped(f));
  ck_assert_int_eq(lt_st_count(f), 6);
  ck_assert_int_eq(lt_st_metadata_count(f), 2);
  ck_assert_str_eq(lt_st_metadata_get(f, "note"), "héllo \"quoted\"");
  ck_assert_ptr_null(lt_st_metadata_get(f, "absent"));
  for (int k = 0; k < 6; k++) {
    int i = lt_st_find(f, names[k]);
    ck_assert_int_ge(i, 0);
    const lt_st_tensor_info *ti = lt_st_info(f, i);
    ck_assert_int_eq(ti->ndim, ts[k]->ndim);
    for (int j = 0; j < ti->ndim; j++) ck_assert_int_eq(ti->shape[j], ts[k]->shape[j]);
    lt_tensor *r = LT_NN(lt_st_tensor(f, i, ts[k]->dtype));
    LT_ASSERT_CLOSE(r, ts[k], 0, 0);
    /* the header is padded to 8 bytes, and every offset here is a multiple of its dtype's size */
    lt_tensor *v = lt_st_view(f, i);
    ck_assert_msg(v != NULL, "view of '%s': %s", names[k], lt_last_error());
    LT_ASSERT_CLOSE(v, ts[k], 0, 0);
    lt_tensor_free(v);
    lt_tensor_free(r);
  }
  ck_assert_int_eq(lt_st_find(f, "nope"), -1);
  /* widening loads; narrowing refused */
  lt_tensor *w = LT_NN(lt_st_tensor(f, lt_st_find(f, "w.t"), LT_DTYPE_F64));
  LT_ASSERT_CLOSE(w, at, 0, 0);
  lt_tensor *ci = LT_NN(lt_st_tensor(f, lt_st_find(f, "c"), LT_DTYPE_I64));
  LT_ASSERT_VALUES(ci, 0, -7, 2147483647);
  LT_EXPECT_NULL_ERR(lt_st_tensor(f, lt_st_find(f, "b"), LT_DTYPE_F32), LT_ERR_DTYPE, "tensor 'b'");
  LT_EXPECT_NULL_ERR(lt_st_tensor(f, lt_st_find(f, "d"), LT_DTYPE_I32), LT_ERR_DTYPE, "I64");
  LT_EXPECT_NULL_ERR(lt_st_tensor(f, lt_st_find(f, "c"), LT_DTYPE_F32), LT_ERR_DTYPE, "I32");
  lt_tensor *wrong = LT_NN(lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){3, 4}));
  LT_EXPECT_ERR(lt_st_read_into(f, lt_st_find(f, "w.t"), wrong), LT_ERR_SHAPE, "[4,3] in the file");
  lt_st_close(f);
  lt_st_close(NULL);

  /* names refused by the writer */
  const char *dup[] = {"x", "x"}, *meta[] = {"__metadata__"};
  const lt_tensor *two[] = {e, e};
  LT_EXPECT_ERR(lt_st_save(path, 2, dup, two, 0, NULL, NULL), LT_ERR_INVALID, "given twice");
  LT_EXPECT_ERR(lt_st_save(path, 1, meta, two, 0, NULL, NULL), LT_ERR_INVALID, "not allowed");
  lt_tensor *bo = LT_NN(lt_ones(LT_DTYPE_BOOL, 1, (int64_t[]){2}));
  const lt_tensor *bos[] = {bo};
  LT_EXPECT_ERR(lt_st_save(path, 1, names, bos, 0, NULL, NULL), LT_ERR_DTYPE, "bool");
  unlink(path);
  rmdir(dir);
  LT_FREE_ALL(a, a2, at, b, c, d, e, z, w, ci, wrong, bo);
}
END_TEST

START_TEST(half_floats) {
  /* F16: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal), inf, NaN; BF16: 1.0, -3.0 (bf16 0xc040), 1e38ish */
  const uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x7e00};
  const uint16_t bf[] = {0x3f80, 0xc040, 0x7f00};
  unsigned char data[18];
  for (int k = 0; k < 6; k++) data[2 * k] = (unsigned char)h[k], data[2 * k + 1] = (unsigned char)(h[k] >> 8);
  for (int k = 0; k < 3; k++) data[12 + 2 * k] = (unsigned char)bf[k], data[13 + 2 * k] = (unsigned char)(bf[k] >> 8);
  char *path = craft("{\"h\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]},"
                     "\"bf\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]}}",
                     data, sizeof data);
  lt_st_file *f = lt_st_open(path);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  lt_tensor *t = LT_NN(lt_st_tensor(f, lt_st_find(f, "h"), LT_DTYPE_F32));
  const float *x = t->data;
  ck_assert(x[0] == 1.0f && x[1] == -2.0f && x[2] == 65504.0f && x[3] == 0x1p-24f && isinf(x[4]) && isnan(x[5]));
  lt_tensor *u = LT_NN(lt_st_tensor(f, lt_st_find(f, "bf"), LT_DTYPE_F64));
  const double *y = u->data;
  ck_assert(y[0] == 1.0 && y[1] == -3.0 && y[2] == 0x1p127);
  /* BF16 into bf16: the bits as they are; into i64 or f16-less dtypes: refused */
  lt_tensor *v = LT_NN(lt_st_tensor(f, lt_st_find(f, "bf"), LT_DTYPE_BF16));
  ck_assert(v->dtype == LT_DTYPE_BF16 && !memcmp(v->data, bf, sizeof bf));
  ck_assert(!lt_st_dtype_loads_into(LT_ST_F16, LT_DTYPE_BF16) && !lt_st_dtype_loads_into(LT_ST_F32, LT_DTYPE_BF16));
  LT_EXPECT_NULL_ERR(lt_st_tensor(f, lt_st_find(f, "h"), LT_DTYPE_BF16), LT_ERR_DTYPE, "h");
  LT_EXPECT_NULL_ERR(lt_st_view(f, 0), LT_ERR_INVALID, "lt_st_tensor");
  lt_st_close(f);
  LT_FREE_ALL(t, u, v);
  unlink(path);
  free(path);
}
END_TEST

/* A bf16 tensor is written as BF16 and reads back bit for bit, as bf16 and
 * (exactly) as f32. */
START_TEST(bf16_round_trip) {
  char dir[] = "/tmp/lt_st_bf16_XXXXXX";
  ck_assert(mkdtemp(dir) != NULL);
  char path[64];
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  const float src[] = {1.0f, -3.0f, 0.1f, 65504.0f, -0.0f, 1e-40f};
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, 2, (int64_t[]){2, 3}, src));
  lt_tensor *b = LT_NN(lt_to_dtype(x, LT_DTYPE_BF16));
  const char *names[] = {"w"};
  const lt_tensor *ts[] = {b};
  ck_assert_msg(lt_st_save(path, 1, names, ts, 0, NULL, NULL) == LT_OK, "%s", lt_last_error());
  lt_st_file *f = lt_st_open(path);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  ck_assert(lt_st_info(f, 0)->dtype == LT_ST_BF16 && lt_st_info(f, 0)->numel == 6);
  lt_tensor *r = LT_NN(lt_st_tensor(f, 0, LT_DTYPE_BF16));
  ck_assert(r->ndim == 2 && r->shape[0] == 2 && r->shape[1] == 3 && !memcmp(r->data, b->data, 12));
  lt_tensor *r32 = LT_NN(lt_st_tensor(f, 0, LT_DTYPE_F32));
  lt_tensor *b32 = LT_NN(lt_to_dtype(b, LT_DTYPE_F32));
  ck_assert(!memcmp(r32->data, b32->data, 24));
  lt_st_close(f);
  LT_FREE_ALL(x, b, r, r32, b32);
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(crafted_files) {
  const unsigned char z[64] = {0};
#define E(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"
  /* the good file these are variations of */
  char *ok = craft("{" E("a", "F32", "[2]", 0, 8) "," E("b", "I64", "[1]", 8, 16) "}", z, 16);
  lt_st_file *f = lt_st_open(ok);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  lt_st_close(f);
  unlink(ok);
  free(ok);

  expect_open_fails("{" E("a", "F32", "[2]", 0, 8) "," E("b", "I64", "[1]", 4, 12) "}", z, 12, LT_ERR_FORMAT,
                    "tensor 'b': field 'data_offsets' [4, 12] overlaps tensor 'a'");
  expect_open_fails("{" E("a", "F32", "[2]", 0, 8) "," E("b", "I64", "[1]", 12, 20) "}", z, 20, LT_ERR_FORMAT,
                    "gap of 4 bytes");
  expect_open_fails("{" E("a", "F32", "[2]", 4, 12) "}", z, 12, LT_ERR_FORMAT, "gap");
  expect_open_fails("{" E("a", "F32", "[2]", 0, 8) "}", z, 12, LT_ERR_FORMAT, "4 bytes at the end");
  expect_open_fails("{" E("a", "F32", "[3]", 0, 8) "}", z, 8, LT_ERR_FORMAT, "dtype F32 x shape [3] is 12 bytes");
  expect_open_fails("{" E("a", "F64", "[2]", 0, 8) "}", z, 8, LT_ERR_FORMAT, "field 'data_offsets'");
  expect_open_fails("{" E("a", "F32", "[4611686018427387904, 4]", 0, 8) "}", z, 8, LT_ERR_OVERFLOW,
                    "tensor 'a': field 'shape'");
  expect_open_fails("{" E("a", "F32", "[4611686018427387904]", 0, 8) "}", z, 8, LT_ERR_OVERFLOW, "overflows");
  expect_open_fails("{" E("a", "F32", "[-2]", 0, 8) "}", z, 8, LT_ERR_FORMAT, "non-negative");
  expect_open_fails("{" E("a", "F32", "[1,1,1,1,1,1,1,1,2]", 0, 8) "}", z, 8, LT_ERR_FORMAT, "9 dimensions");
  expect_open_fails("{" E("a", "F32", "[2]", 0, 8) "," E("a", "F32", "[2]", 8, 16) "}", z, 16, LT_ERR_FORMAT,
                    "duplicate");
  expect_open_fails("{" E("a", "F32", "[2]", 0, 8) "}", z, 4, LT_ERR_FORMAT, "outside the data section");
  expect_open_fails("{" E("a", "F32", "[2]", 8, 0) "}", z, 8, LT_ERR_FORMAT, "ends before it begins");
  expect_open_fails("{" E("a", "U8", "[2]", 0, 2) "}", z, 2, LT_ERR_DTYPE, "field 'dtype' is \"U8\"");
  expect_open_fails("{" E("", "F32", "[2]", 0, 8) "}", z, 8, LT_ERR_FORMAT, "empty name");
  expect_open_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", z, 0, LT_ERR_FORMAT, "'data_offsets' is missing");
  expect_open_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", z, 8, LT_ERR_FORMAT,
                    "unknown field 'x'");
  expect_open_fails("{\"__metadata__\":{\"k\":1}}", z, 0, LT_ERR_FORMAT, "the value of 'k' is not a string");
  expect_open_fails("[1,2]", z, 0, LT_ERR_FORMAT, "not an object");
  expect_open_fails("{\"a\":", z, 0, LT_ERR_FORMAT, "does not parse");
  expect_open_fails("{" E("a", "F32", "[2]", 0, 18446744073709551615) "}", z, 8, LT_ERR_FORMAT, "does not parse");
#undef E

  /* header length: over the cap, past the end, a file shorter than 8 bytes */
  unsigned char big[16] = {0};
  uint64_t len = (uint64_t)LT_ST_MAX_HEADER + 1;
  for (int b = 0; b < 8; b++) big[b] = (unsigned char)(len >> (8 * b));
  char *p = lt_test_write_temp(big, sizeof big);
  LT_EXPECT_NULLP_ERR(lt_st_open(p), LT_ERR_FORMAT, "exceeds the cap of 100000000 bytes");
  unlink(p), free(p);
  big[0] = 100, big[1] = big[2] = big[3] = 0;
  p = lt_test_write_temp(big, sizeof big);
  LT_EXPECT_NULLP_ERR(lt_st_open(p), LT_ERR_FORMAT, "past the end");
  unlink(p), free(p);
  p = lt_test_write_temp(big, 5);
  LT_EXPECT_NULLP_ERR(lt_st_open(p), LT_ERR_FORMAT, "too short");
  unlink(p), free(p);

  /* every truncation of a good file is refused */
  char dir[] = "/tmp/lt_st_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *path = lt_test_join(dir, "t.safetensors");
  lt_tensor *a = LT_NN(lt_ones(LT_DTYPE_F32, 2, (int64_t[]){3, 5}));
  const char *nm[] = {"a"};
  const lt_tensor *ts[] = {a};
  LT_OK_OR_FAIL(lt_st_save(path, 1, nm, ts, 0, NULL, NULL));
  FILE *fp = fopen(path, "rb");
  unsigned char whole[512];
  size_t n = fread(whole, 1, sizeof whole, fp);
  fclose(fp);
  ck_assert_uint_gt(n, 60);
  for (size_t cut = 0; cut < n; cut++) {
    p = lt_test_write_temp(whole, cut);
    lt_st_file *g = lt_st_open(p);
    ck_assert_msg(g == NULL, "a file cut at %zu of %zu bytes opened", cut, n);
    ck_assert_int_ne(lt_last_status(), LT_OK);
    unlink(p), free(p);
  }
  /* a FIFO is refused without blocking */
  const char *fifo = lt_test_join(dir, "fifo");
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  LT_EXPECT_NULLP_ERR(lt_st_open(fifo), LT_ERR_FORMAT, "FIFO");
  unlink(fifo);
  unlink(path);
  rmdir(dir);
  lt_tensor_free(a);
}
END_TEST

START_TEST(load_params) {
  char dir[] = "/tmp/lt_st_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  const char *path = lt_test_join(dir, "p.safetensors");
  lt_generator *g = lt_generator_new(1);
  lt_params *p = lt_params_new(), *q = lt_params_new(), *r = lt_params_new();
  lt_linear_m l1, l2, l3;
  LT_OK_OR_FAIL(lt_linear_init(&l1, p, "fc", 4, 3, true, g));
  LT_OK_OR_FAIL(lt_linear_init(&l2, q, "fc", 4, 3, true, g));
  LT_OK_OR_FAIL(lt_linear_init(&l3, r, "fc", 3, 4, true, g)); /* transposed shapes */
  const char *k[] = {"format"}, *v[] = {"pt"};
  LT_OK_OR_FAIL(lt_st_save_params(path, p, 1, k, v));
  lt_tensor *before = LT_NN(lt_clone(l3.weight));
  LT_EXPECT_ERR(lt_st_load_params(path, r), LT_ERR_SHAPE, "tensor 'fc.weight': shape [3,4] in the file");
  LT_ASSERT_CLOSE(l3.weight, before, 0, 0); /* unchanged */
  LT_OK_OR_FAIL(lt_st_load_params(path, q));
  LT_ASSERT_CLOSE(l2.weight, l1.weight, 0, 0);
  LT_ASSERT_CLOSE(l2.bias, l1.bias, 0, 0);
  lt_linear_m extra;
  LT_OK_OR_FAIL(lt_linear_init(&extra, q, "more", 2, 2, false, g));
  LT_EXPECT_ERR(lt_st_load_params(path, q), LT_ERR_INVALID, "'more.weight' is missing");
  lt_params *one = lt_params_new();
  lt_linear_m only;
  LT_OK_OR_FAIL(lt_linear_init(&only, one, "fc", 4, 3, false, g));
  LT_EXPECT_ERR(lt_st_load_params(path, one), LT_ERR_INVALID, "tensor 'fc.bias' is not in the model");
  lt_tensor_free(before);
  lt_params_free(p), lt_params_free(q), lt_params_free(r), lt_params_free(one);
  lt_generator_free(g);
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("safetensors");
  LT_TEST_CASE(s, "safetensors", 120, round_trip, half_floats, bf16_round_trip, crafted_files, load_params);
  return lt_test_run(s);
}
