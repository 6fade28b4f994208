/*
 * tests/test_safetensors.c: checkpoint/safetensors.h. Round trips of every
 * dtype written (values, shapes, metadata, views over the mapping), F16 and
 * BF16 read from hand-made bytes, and crafted files that must be refused
 * with a message naming the file, the tensor and the field: the cases of the
 * shared spec (python/libtensor/safetensors_spec.json, which
 * tests/python/test_package.py runs through the Python reader: header length
 * over the cap or past the end, overlapping offsets, gaps, trailing bytes,
 * dtype sizes that do not match, huge shapes, duplicate names, strict JSON),
 * every truncation of a good file, FIFOs, directories and devices. lt_st_load_params is checked to match everything before writing,
 * to name the missing and the unexpected tensors together and to refuse
 * non-finite values.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

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

/* ---- the shared rules: python/libtensor/safetensors_spec.json ------------- */

static json_t *spec_load(void) {
  json_error_t e;
  json_t *spec = json_load_file(LT_ST_SPEC, 0, &e);
  ck_assert_msg(spec != NULL, "%s: %s at line %d", LT_ST_SPEC, e.text, e.line);
  return spec;
}

static unsigned char *hex_bytes(const char *hex, size_t *n) {
  *n = strlen(hex) / 2;
  unsigned char *b = malloc(*n + 1);
  for (size_t i = 0; i < *n; i++) {
    unsigned v;
    ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
    b[i] = (unsigned char)v;
  }
  return b;
}

/* The file a spec case describes (tests/python/test_package.py builds the same). */
static char *spec_file(const json_t *c) {
  const json_t *hx = json_object_get(c, "header_hex");
  size_t hl;
  unsigned char *h = hx ? hex_bytes(json_string_value(hx), &hl)
                        : (unsigned char *)strdup(json_string_value(json_object_get(c, "header")));
  if (!hx) hl = strlen((char *)h);
  const json_t *hlen = json_object_get(c, "header_length"), *flen = json_object_get(c, "file_length");
  const uint64_t prefix = hlen ? (uint64_t)json_integer_value(hlen) : hl;
  const size_t nd = (size_t)json_integer_value(json_object_get(c, "data"));
  size_t total = 8 + hl + nd;
  unsigned char *buf = calloc(total + 1, 1);
  for (int k = 0; k < 8; k++) buf[k] = (unsigned char)(prefix >> (8 * k));
  memcpy(buf + 8, h, hl);
  if (flen) total = (size_t)json_integer_value(flen);
  char *path = lt_test_write_temp(buf, total);
  free(buf);
  free(h);
  return path;
}

/* A message template of the spec with {path} replaced. */
static char *spec_message(const char *tmpl, const char *path) {
  size_t cap = strlen(tmpl) + strlen(path) * 4 + 1, k = 0;
  char *out = malloc(cap);
  for (const char *p = tmpl; *p;) {
    if (strncmp(p, "{path}", 6) == 0) {
      k += (size_t)snprintf(out + k, cap - k, "%s", path);
      p += 6;
    } else {
      out[k++] = *p++;
    }
  }
  out[k] = '\0';
  return out;
}

/* The limits and the dtype table of the spec are the reader's. */
START_TEST(spec_limits) {
  json_t *spec = spec_load();
  ck_assert_int_eq(json_integer_value(json_object_get(spec, "max_header")), LT_ST_MAX_HEADER);
  ck_assert_int_eq(json_integer_value(json_object_get(spec, "max_dims")), LT_MAX_DIMS);
  const json_t *dts = json_object_get(spec, "dtypes");
  int k = 0;
  for (size_t i = 0; i < json_array_size(dts); i++) {
    const json_t *d = json_array_get(dts, i);
    if (!json_is_true(json_object_get(d, "c"))) continue;
    ck_assert_int_lt(k, LT_ST_DTYPE_COUNT);
    ck_assert_str_eq(lt_st_dtype_name((lt_st_dtype)k), json_string_value(json_object_get(d, "name")));
    ck_assert_uint_eq(lt_st_dtype_size((lt_st_dtype)k), (size_t)json_integer_value(json_object_get(d, "size")));
    k++;
  }
  ck_assert_int_eq(k, LT_ST_DTYPE_COUNT);
  json_decref(spec);
}
END_TEST

/* Every crafted case of the spec: the status and the message it names, or a
 * file that opens with the shapes it names. */
START_TEST(spec_cases) {
  json_t *spec = spec_load();
  const json_t *cases = json_object_get(spec, "cases");
  int n_ok = 0, n_refused = 0;
  for (size_t i = 0; i < json_array_size(cases); i++) {
    const json_t *c = json_array_get(cases, i), *ex = json_object_get(c, "expect");
    const char *name = json_string_value(json_object_get(c, "name"));
    char *path = spec_file(c);
    lt_st_file *f = lt_st_open(path);
    const json_t *ok = json_object_get(ex, "ok");
    if (ok) {
      ck_assert_msg(f != NULL, "case '%s': refused: %s", name, lt_last_error());
      ck_assert_int_eq(lt_st_count(f), (int)json_object_size(ok));
      const char *tn;
      const json_t *shape;
      json_object_foreach((json_t *)ok, tn, shape) {
        const int at = lt_st_find(f, tn);
        ck_assert_msg(at >= 0, "case '%s': no tensor '%s'", name, tn);
        const lt_st_tensor_info *ti = lt_st_info(f, at);
        ck_assert_int_eq(ti->ndim, (int)json_array_size(shape));
        for (int d = 0; d < ti->ndim; d++) ck_assert_int_eq(ti->shape[d], json_integer_value(json_array_get(shape, d)));
      }
      n_ok++;
    } else {
      ck_assert_msg(f == NULL, "case '%s': opened", name);
      char *want = spec_message(json_string_value(json_object_get(ex, "message")), path);
      const char *got = lt_last_error();
      ck_assert_msg(strcmp(lt_status_name(lt_last_status()), json_string_value(json_object_get(ex, "status"))) == 0,
                    "case '%s': status %s, the spec says %s (%s)", name, lt_status_name(lt_last_status()),
                    json_string_value(json_object_get(ex, "status")), got);
      const bool prefix = json_is_true(json_object_get(ex, "prefix"));
      ck_assert_msg(prefix ? strncmp(got, want, strlen(want)) == 0 : strcmp(got, want) == 0,
                    "case '%s':\n  got  %s\n  spec %s%s", name, got, want, prefix ? "..." : "");
      free(want);
      n_refused++;
    }
    lt_st_close(f);
    unlink(path);
    free(path);
  }
  printf("safetensors spec: %d cases, %d open, %d refused with the spec's status and message\n", n_ok + n_refused,
         n_ok, n_refused);
  json_decref(spec);
}
END_TEST

START_TEST(crafted_files) {
  /* (the header-length cases are in the spec) */
  char *p;
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
  LT_EXPECT_NULLP_ERR(lt_st_open(dir), LT_ERR_FORMAT, "is a directory, not a regular file");
  LT_EXPECT_NULLP_ERR(lt_st_open("/dev/zero"), LT_ERR_FORMAT, "is a character device, not a regular file");
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
  LT_EXPECT_ERR(lt_st_load_params(path, q), LT_ERR_INVALID,
                "1 missing from the file (more.weight); 0 not in the model");
  lt_params *one = lt_params_new();
  lt_linear_m only;
  LT_OK_OR_FAIL(lt_linear_init(&only, one, "fc", 4, 3, false, g));
  LT_EXPECT_ERR(lt_st_load_params(path, one), LT_ERR_INVALID, "0 missing from the file; 1 not in the model (fc.bias)");
  /* both at once (issue 30, item 7): both named, as the HDF5 loader does */
  lt_linear_m more1;
  LT_OK_OR_FAIL(lt_linear_init(&more1, one, "head", 2, 2, true, g));
  LT_EXPECT_ERR(lt_st_load_params(path, one), LT_ERR_INVALID,
                "2 missing from the file (head.weight, head.bias); 1 not in the model (fc.bias)");
  /* non-finite values (issue 26, item 2): refused naming the tensor, the model unchanged */
  lt_tensor *keep = LT_NN(lt_clone(l2.weight));
  ((float *)l1.bias->data)[2] = INFINITY;
  LT_OK_OR_FAIL(lt_st_save_params(path, p, 1, k, v));
  lt_params *q2 = lt_params_new();
  lt_linear_m l4;
  LT_OK_OR_FAIL(lt_linear_init(&l4, q2, "fc", 4, 3, true, g));
  lt_tensor *keep4 = LT_NN(lt_clone(l4.weight));
  LT_EXPECT_ERR(lt_st_load_params(path, q2), LT_ERR_NUMERIC, "tensor 'fc.bias' holds +inf at flat index 2");
  LT_ASSERT_CLOSE(l4.weight, keep4, 0, 0); /* nothing written: the weight comes before the bias */
  lt_st_file *f = LT_NNP(lt_st_open(path));
  const int bi = lt_st_find(f, "fc.bias");
  LT_EXPECT_ERR(lt_st_check_finite(f, bi), LT_ERR_NUMERIC, "+inf");
  LT_OK_OR_FAIL(lt_st_check_finite(f, lt_st_find(f, "fc.weight")));
  lt_tensor *bias_before = LT_NN(lt_clone(l4.bias));
  LT_EXPECT_ERR(lt_st_read_into(f, bi, l4.bias), LT_ERR_NUMERIC, "fc.bias");
  LT_ASSERT_CLOSE(l4.bias, bias_before, 0, 0);
  lt_tensor *raw = LT_NN(lt_st_tensor(f, bi, LT_DTYPE_F32)); /* raw access gives the values as they are */
  ck_assert(isinf(((float *)raw->data)[2]));
  lt_st_close(f);
  LT_FREE_ALL(keep, keep4, bias_before, raw);
  lt_params_free(q2);
  lt_tensor_free(before);
  lt_params_free(p), lt_params_free(q), lt_params_free(r), lt_params_free(one);
  lt_generator_free(g);
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("safetensors");
  LT_TEST_CASE(s, "safetensors", 120, round_trip, half_floats, bf16_round_trip, spec_limits, spec_cases, crafted_files,
               load_params);
  return lt_test_run(s);
}
