/*
 * tests/test_datasets.c: the IDX reader and the MNIST / Fashion-MNIST loader.
 *
 * Two kinds of test: the real Fashion-MNIST files of Debian's
 * dataset-fashion-mnist package (shapes, the first labels, class balance,
 * exact pixel sums computed independently with Python's gzip module, the
 * normalisation constants; skipped with a message when the package is not
 * installed), and small files crafted here in a temporary directory, good
 * ones (exact values, raw and gzip, every IDX element type) and bad ones
 * (wrong magic, not IDX, not gzip, truncated header/payload/gzip stream,
 * corrupt gzip CRC, count mismatch, huge dims, labels > 9, trailing data).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "test_util.h"

static char tmpdir[256];

/* ---- writing crafted files ------------------------------------------------ */

static const char *tmp_path(const char *name) {
  static char buf[8][512];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_raw(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  ck_assert(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static void write_gz(const char *path, const void *data, size_t n) {
  gzFile f = gzopen(path, "wb");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  if (n) ck_assert(gzwrite(f, data, (unsigned)n) == (int)n);
  ck_assert(gzclose(f) == Z_OK);
}

static unsigned char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  ck_assert(b && fread(b, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* A growing byte buffer for building IDX files. */
typedef struct {
  unsigned char b[4096];
  size_t n;
} bytes;

static void put8(bytes *x, unsigned v) { x->b[x->n++] = (unsigned char)v; }
static void put32(bytes *x, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) put8(x, (v >> s) & 0xff);
}
/* An IDX header: magic bytes 0 0 type ndim, then the sizes. */
static void header(bytes *x, int type, int ndim, const uint32_t *dims) {
  put8(x, 0), put8(x, 0), put8(x, (unsigned)type), put8(x, (unsigned)ndim);
  for (int i = 0; i < ndim; i++) put32(x, dims[i]);
}

/* The good little dataset: 3 images of 2x2 and their labels. */
static const unsigned char px[3][4] = {{0, 255, 1, 128}, {10, 20, 30, 40}, {254, 0, 0, 7}};
static const unsigned char lab[3] = {9, 0, 4};

static bytes images_file(uint32_t n_header, int n_data) {
  bytes x = {.n = 0};
  header(&x, 0x08, 3, (uint32_t[]){n_header, 2, 2});
  for (int i = 0; i < n_data; i++)
    for (int j = 0; j < 4; j++) put8(&x, px[i % 3][j]);
  return x;
}

static bytes labels_file(uint32_t n_header, int n_data) {
  bytes x = {.n = 0};
  header(&x, 0x08, 1, (uint32_t[]){n_header});
  for (int i = 0; i < n_data; i++) put8(&x, lab[i % 3]);
  return x;
}

/* Writes the good pair as gzip (or raw) under the given names. */
static void write_good(const char *img, const char *lbl, bool gz) {
  bytes a = images_file(3, 3), b = labels_file(3, 3);
  (gz ? write_gz : write_raw)(tmp_path(img), a.b, a.n);
  (gz ? write_gz : write_raw)(tmp_path(lbl), b.b, b.n);
}

/* Loading must fail with status st and a message containing substr, with
 * both outputs NULL. */
static void expect_load_fail(const char *img, const char *lbl, const lt_mnist_opts *o, lt_status st,
                             const char *substr) {
  lt_tensor *x = (lt_tensor *)1, *y = (lt_tensor *)1;
  LT_EXPECT_ERR(lt_mnist_load_files(img, lbl, o, &x, &y), st, substr);
  ck_assert_ptr_null(x);
  ck_assert_ptr_null(y);
}

/* ---- good crafted files --------------------------------------------------- */

START_TEST(test_small_exact) {
  for (int gz = 0; gz < 2; gz++) {
    write_good("si", "sl", gz);
    lt_tensor *x, *y;
    LT_OK_OR_FAIL(lt_mnist_load_files(tmp_path("si"), tmp_path("sl"), NULL, &x, &y));
    LT_ASSERT_SHAPE(x, 3, 4);
    LT_ASSERT_SHAPE(y, 3);
    ck_assert_int_eq(x->dtype, LT_DTYPE_F32);
    ck_assert_int_eq(y->dtype, LT_DTYPE_I64);
    const float *xd = x->data;
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++)
        ck_assert_msg(xd[4 * i + j] == (float)(px[i][j] / 255.0), "pixel [%d,%d]: %.9g vs %.9g", i, j,
                      xd[4 * i + j], px[i][j] / 255.0);
    LT_ASSERT_VALUES(y, 0, 9, 0, 4);
    lt_tensor_free(x);
    lt_tensor_free(y);

    /* Normalised: (p/255 - mean) / std, correctly rounded from double. */
    lt_mnist_opts o = {.normalize = true, .mean = 0.25, .std = 0.5};
    LT_OK_OR_FAIL(lt_mnist_load_files(tmp_path("si"), tmp_path("sl"), &o, &x, &y));
    xd = x->data;
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) ck_assert(xd[4 * i + j] == (float)((px[i][j] / 255.0 - 0.25) / 0.5));
    lt_tensor_free(x);
    lt_tensor_free(y);

    /* max_examples: the first two only; more than there are gives all. */
    o = (lt_mnist_opts){.max_examples = 2, .std = 1};
    LT_OK_OR_FAIL(lt_mnist_load_files(tmp_path("si"), tmp_path("sl"), &o, &x, &y));
    LT_ASSERT_SHAPE(x, 2, 4);
    LT_ASSERT_VALUES(y, 0, 9, 0);
    lt_tensor_free(x);
    lt_tensor_free(y);
    o.max_examples = 100;
    LT_OK_OR_FAIL(lt_mnist_load_files(tmp_path("si"), tmp_path("sl"), &o, &x, &y));
    LT_ASSERT_SHAPE(x, 3, 4);
    lt_tensor_free(x);
    lt_tensor_free(y);
  }
}
END_TEST

START_TEST(test_mnist_dir_names) {
  write_good("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", true);
  bytes a = images_file(1, 1), b = labels_file(1, 1);
  write_gz(tmp_path("t10k-images-idx3-ubyte.gz"), a.b, a.n);
  write_gz(tmp_path("t10k-labels-idx1-ubyte.gz"), b.b, b.n);
  lt_tensor *x, *y;
  LT_OK_OR_FAIL(lt_mnist_load(tmpdir, LT_DATASET_TRAIN, NULL, &x, &y));
  LT_ASSERT_SHAPE(x, 3, 4);
  lt_tensor_free(x);
  lt_tensor_free(y);
  LT_OK_OR_FAIL(lt_mnist_load(tmpdir, LT_DATASET_TEST, NULL, &x, &y));
  LT_ASSERT_SHAPE(x, 1, 4);
  LT_ASSERT_VALUES(y, 0, 9);
  lt_tensor_free(x);
  lt_tensor_free(y);
  x = y = (lt_tensor *)1;
  LT_EXPECT_ERR(lt_mnist_load(tmpdir, (lt_dataset_split)7, NULL, &x, &y), LT_ERR_INVALID, "split is 7");
  ck_assert_ptr_null(x);
  ck_assert_ptr_null(y);
  LT_EXPECT_ERR(lt_mnist_load(tmp_path("nope"), LT_DATASET_TRAIN, NULL, &x, &y), LT_ERR_IO,
                "nope/train-images-idx3-ubyte.gz: cannot open");
  ck_assert_ptr_null(x);
}
END_TEST

START_TEST(test_empty_dataset) {
  bytes a = images_file(0, 0), b = labels_file(0, 0);
  write_gz(tmp_path("ei"), a.b, a.n);
  write_gz(tmp_path("el"), b.b, b.n);
  lt_tensor *x, *y;
  LT_OK_OR_FAIL(lt_mnist_load_files(tmp_path("ei"), tmp_path("el"), NULL, &x, &y));
  LT_ASSERT_SHAPE(x, 0, 4);
  LT_ASSERT_SHAPE(y, 0);
  lt_tensor_free(x);
  lt_tensor_free(y);
}
END_TEST

/* Every IDX element type, big-endian, into every supported dtype. */
START_TEST(test_idx_types) {
  /* i16 [2,2]: -2, 258, 32767, -32768 */
  bytes x = {.n = 0};
  header(&x, 0x0B, 2, (uint32_t[]){2, 2});
  const int16_t v16[] = {-2, 258, 32767, -32768};
  for (int i = 0; i < 4; i++) put8(&x, ((uint16_t)v16[i]) >> 8), put8(&x, ((uint16_t)v16[i]) & 0xff);
  write_gz(tmp_path("i16"), x.b, x.n);
  lt_dtype all[] = {LT_DTYPE_F32, LT_DTYPE_F64, LT_DTYPE_I32, LT_DTYPE_I64};
  for (int d = 0; d < 4; d++) {
    lt_tensor *t = LT_NN(lt_idx_load(tmp_path("i16"), all[d]));
    ck_assert_int_eq(t->dtype, all[d]);
    LT_ASSERT_SHAPE(t, 2, 2);
    LT_ASSERT_VALUES(t, 0, -2, 258, 32767, -32768);
    lt_tensor_free(t);
  }
  /* i8, i32 (1-d) */
  x.n = 0;
  header(&x, 0x09, 1, (uint32_t[]){3});
  put8(&x, 0xff), put8(&x, 0x7f), put8(&x, 0x80);
  write_raw(tmp_path("i8"), x.b, x.n);
  lt_tensor *t = LT_NN(lt_idx_load(tmp_path("i8"), LT_DTYPE_I64));
  LT_ASSERT_VALUES(t, 0, -1, 127, -128);
  lt_tensor_free(t);
  x.n = 0;
  header(&x, 0x0C, 1, (uint32_t[]){2});
  put32(&x, 0x80000000u), put32(&x, 0x01020304u);
  write_raw(tmp_path("i32"), x.b, x.n);
  t = LT_NN(lt_idx_load(tmp_path("i32"), LT_DTYPE_I64));
  LT_ASSERT_VALUES(t, 0, -2147483648.0, 16909060);
  lt_tensor_free(t);
  /* f32 and f64, 3-d [1,1,2] */
  x.n = 0;
  header(&x, 0x0D, 3, (uint32_t[]){1, 1, 2});
  float f[2] = {1.5f, -0.1f};
  for (int i = 0; i < 2; i++) {
    uint32_t u;
    memcpy(&u, &f[i], 4);
    put32(&x, u);
  }
  write_gz(tmp_path("f32"), x.b, x.n);
  t = LT_NN(lt_idx_load(tmp_path("f32"), LT_DTYPE_F32));
  LT_ASSERT_SHAPE(t, 1, 1, 2);
  ck_assert(((float *)t->data)[0] == 1.5f && ((float *)t->data)[1] == -0.1f);
  lt_tensor_free(t);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("f32"), LT_DTYPE_I32), LT_ERR_DTYPE, "holds f32 elements");
  x.n = 0;
  header(&x, 0x0E, 1, (uint32_t[]){1});
  double dv = -1e300;
  uint64_t u;
  memcpy(&u, &dv, 8);
  put32(&x, (uint32_t)(u >> 32)), put32(&x, (uint32_t)u);
  write_gz(tmp_path("f64"), x.b, x.n);
  t = LT_NN(lt_idx_load(tmp_path("f64"), LT_DTYPE_F64));
  ck_assert(((double *)t->data)[0] == -1e300);
  lt_tensor_free(t);
  /* Unsupported dtype. */
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("i16"), LT_DTYPE_BOOL), LT_ERR_DTYPE, "bool is not supported");
  /* The header alone. */
  lt_idx_header h;
  LT_OK_OR_FAIL(lt_idx_read_header(tmp_path("i16"), &h));
  ck_assert_uint_eq(h.magic, 0x00000B02u);
  ck_assert_int_eq(h.type, 0x0B);
  ck_assert_int_eq(h.ndim, 2);
  ck_assert_int_eq(h.shape[0], 2);
  ck_assert_int_eq(h.shape[1], 2);
  ck_assert_int_eq(h.numel, 4);
  LT_EXPECT_ERR(lt_idx_read_header(NULL, &h), LT_ERR_NULL, "path");
  LT_EXPECT_ERR(lt_idx_read_header(tmp_path("i16"), NULL), LT_ERR_NULL, "out");
  LT_EXPECT_NULL_ERR(lt_idx_load(NULL, LT_DTYPE_F32), LT_ERR_NULL, "path");
}
END_TEST

/* ---- bad crafted files ---------------------------------------------------- */

START_TEST(test_wrong_magic) {
  write_good("gi", "gl", true);
  /* Labels where images belong, and the other way round. */
  expect_load_fail(tmp_path("gl"), tmp_path("gi"), NULL, LT_ERR_FORMAT,
                   "magic 0x00000801 (u8 elements, 1 dim) is not that of MNIST images, 0x00000803");
  /* Right images, then images as labels. */
  expect_load_fail(tmp_path("gi"), tmp_path("gi"), NULL, LT_ERR_FORMAT, "is not that of MNIST labels");
  /* Not an IDX magic at all: nonzero leading bytes, unknown type, bad ndim. */
  bytes x = {.n = 0};
  put32(&x, 0x12345678u);
  put32(&x, 1);
  write_gz(tmp_path("m1"), x.b, x.n);
  expect_load_fail(tmp_path("m1"), tmp_path("gl"), NULL, LT_ERR_FORMAT, "magic 0x12345678 is not an IDX magic");
  x.n = 0;
  header(&x, 0x0A, 1, (uint32_t[]){1});
  write_gz(tmp_path("m2"), x.b, x.n);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("m2"), LT_DTYPE_F32), LT_ERR_FORMAT, "0x00000a01 is not an IDX magic");
  x.n = 0;
  header(&x, 0x08, 0, NULL);
  write_gz(tmp_path("m3"), x.b, x.n);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("m3"), LT_DTYPE_F32), LT_ERR_FORMAT, "declares 0 dims");
  x.n = 0;
  put32(&x, 0x00000809u);
  for (int i = 0; i < 9; i++) put32(&x, 1);
  put8(&x, 0);
  write_gz(tmp_path("m4"), x.b, x.n);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("m4"), LT_DTYPE_F32), LT_ERR_FORMAT, "declares 9 dims; supported are 1..8");
}
END_TEST

START_TEST(test_not_gzip) {
  write_good("gi", "gl", true);
  const char text[] = "this is a text file, not gzip and not IDX\n";
  write_raw(tmp_path("txt"), text, sizeof text - 1);
  expect_load_fail(tmp_path("txt"), tmp_path("gl"), NULL, LT_ERR_FORMAT, "not gzip-compressed");
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("txt"), LT_DTYPE_F32), LT_ERR_FORMAT, "not an IDX magic");
  /* An empty file and a 2-byte one. */
  write_raw(tmp_path("empty"), "", 0);
  expect_load_fail(tmp_path("empty"), tmp_path("gl"), NULL, LT_ERR_FORMAT,
                   "0 bytes, too short for the 4-byte IDX magic");
  write_raw(tmp_path("two"), "\x1f\x8b", 2);
  expect_load_fail(tmp_path("gi"), tmp_path("two"), NULL, LT_ERR_FORMAT, "two");
  /* Missing file, and a directory. */
  expect_load_fail(tmp_path("missing"), tmp_path("gl"), NULL, LT_ERR_IO, "missing: cannot open: No such file");
  expect_load_fail(tmpdir, tmp_path("gl"), NULL, LT_ERR_IO, tmpdir);
}
END_TEST

START_TEST(test_truncated) {
  write_good("gi", "gl", true);
  /* Raw payload shorter than the header says (3 images declared, 2 present). */
  bytes a = images_file(3, 2);
  write_raw(tmp_path("ti"), a.b, a.n);
  expect_load_fail(tmp_path("ti"), tmp_path("gl"), NULL, LT_ERR_FORMAT,
                   "truncated: the header declares 12 bytes of pixels, the file ends after 8");
  /* The same through gzip (a complete stream of too little data). */
  write_gz(tmp_path("tg"), a.b, a.n);
  expect_load_fail(tmp_path("tg"), tmp_path("gl"), NULL, LT_ERR_FORMAT, "ends after 8");
  /* Truncated inside the dims. */
  write_raw(tmp_path("th"), a.b, 9);
  expect_load_fail(tmp_path("th"), tmp_path("gl"), NULL, LT_ERR_FORMAT,
                   "declares 3 dims (12 bytes of sizes) but the file ends after 5");
  /* A gzip file cut in the middle of its compressed stream. */
  bytes big = {.n = 0};
  header(&big, 0x08, 1, (uint32_t[]){2000});
  for (int i = 0; i < 2000; i++) put8(&big, (unsigned)(i * 7919 % 10));
  write_gz(tmp_path("full.gz"), big.b, big.n);
  size_t n;
  unsigned char *gz = read_all(tmp_path("full.gz"), &n);
  write_raw(tmp_path("cut.gz"), gz, n / 2);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("cut.gz"), LT_DTYPE_I64), LT_ERR_FORMAT, "truncated");
  /* Cut off only the 8-byte trailer (CRC and length): all data is there but
   * the stream is incomplete. */
  write_raw(tmp_path("cut8.gz"), gz, n - 8);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("cut8.gz"), LT_DTYPE_I64), LT_ERR_FORMAT, "truncated");
  /* A corrupt CRC is caught when reading the whole file. */
  gz[n - 8] ^= 0xff;
  write_raw(tmp_path("crc.gz"), gz, n);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("crc.gz"), LT_DTYPE_I64), LT_ERR_FORMAT, "corrupt gzip data");
  gz[n - 8] ^= 0xff;
  /* Garbage in the deflate stream. */
  for (size_t i = 20; i < n - 8; i += 3) gz[i] ^= 0x5a;
  write_raw(tmp_path("garbage.gz"), gz, n);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("garbage.gz"), LT_DTYPE_I64), LT_ERR_FORMAT, "gzip");
  free(gz);
  /* The good file loads. */
  lt_tensor *t = LT_NN(lt_idx_load(tmp_path("full.gz"), LT_DTYPE_I64));
  LT_ASSERT_SHAPE(t, 2000);
  lt_tensor_free(t);
}
END_TEST

START_TEST(test_count_mismatch_and_labels) {
  bytes a = images_file(3, 3), b = labels_file(2, 2);
  write_gz(tmp_path("ci"), a.b, a.n);
  write_gz(tmp_path("cl"), b.b, b.n);
  expect_load_fail(tmp_path("ci"), tmp_path("cl"), NULL, LT_ERR_FORMAT, "ci has 3 examples but the labels file");
  expect_load_fail(tmp_path("ci"), tmp_path("cl"), NULL, LT_ERR_FORMAT, "cl has 2");
  /* A label above 9, named by index. */
  b = labels_file(3, 3);
  b.b[8 + 1] = 10;
  write_gz(tmp_path("bl"), b.b, b.n);
  expect_load_fail(tmp_path("ci"), tmp_path("bl"), NULL, LT_ERR_FORMAT, "label 1 is 10; labels must be 0..9");
  /* Trailing data after the declared payload. */
  b = labels_file(3, 4);
  write_gz(tmp_path("xl"), b.b, b.n);
  expect_load_fail(tmp_path("ci"), tmp_path("xl"), NULL, LT_ERR_FORMAT, "data continues after the 3 payload bytes");
  a = images_file(3, 4);
  write_raw(tmp_path("xi"), a.b, a.n);
  write_good("gi", "gl", true);
  expect_load_fail(tmp_path("xi"), tmp_path("gl"), NULL, LT_ERR_FORMAT, "data continues after the 12 payload");
  /* ...but a partial load (max_examples) does not look that far. */
  lt_mnist_opts o = {.max_examples = 2, .std = 1};
  lt_tensor *x, *y;
  LT_OK_OR_FAIL(lt_mnist_load_files(tmp_path("xi"), tmp_path("xl"), &o, &x, &y));
  LT_ASSERT_SHAPE(x, 2, 4);
  lt_tensor_free(x);
  lt_tensor_free(y);
}
END_TEST

START_TEST(test_huge_dims) {
  write_good("gi", "gl", true);
  /* Sizes whose product overflows 64 bits. */
  bytes a = {.n = 0};
  header(&a, 0x08, 3, (uint32_t[]){0xffffffffu, 0xffffffffu, 0xffffffffu});
  write_gz(tmp_path("h1"), a.b, a.n);
  expect_load_fail(tmp_path("h1"), tmp_path("gl"), NULL, LT_ERR_OVERFLOW, "LT_IDX_MAX_BYTES");
  /* Within 64 bits but above the cap (2^32 bytes): 65536 x 256 x 257. */
  a.n = 0;
  header(&a, 0x08, 3, (uint32_t[]){65536, 256, 257});
  write_gz(tmp_path("h2"), a.b, a.n);
  expect_load_fail(tmp_path("h2"), tmp_path("gl"), NULL, LT_ERR_OVERFLOW, "[65536,256,257] of u8");
  /* An f64 file just above the cap (2^29 + 1 elements of 8 bytes). */
  a.n = 0;
  header(&a, 0x0E, 1, (uint32_t[]){(1u << 29) + 1});
  write_gz(tmp_path("h3"), a.b, a.n);
  LT_EXPECT_NULL_ERR(lt_idx_load(tmp_path("h3"), LT_DTYPE_F64), LT_ERR_OVERFLOW, "limit");
  /* No examples but absurd image size: still rejected (the row size is bounded). */
  a.n = 0;
  header(&a, 0x08, 3, (uint32_t[]){0, 0xffffffffu, 0xffffffffu});
  write_gz(tmp_path("h4"), a.b, a.n);
  expect_load_fail(tmp_path("h4"), tmp_path("gl"), NULL, LT_ERR_OVERFLOW, "limit");
  /* Under the cap (3000 images of 28x28) but the file holds 1 image: fails
   * as truncated, without allocating what the header claims. */
  a.n = 0;
  header(&a, 0x08, 3, (uint32_t[]){3000, 28, 28});
  for (int i = 0; i < 784; i++) put8(&a, 3);
  write_gz(tmp_path("h5"), a.b, a.n);
  bytes b = labels_file(3000, 3000);
  write_gz(tmp_path("h5l"), b.b, b.n);
  expect_load_fail(tmp_path("h5"), tmp_path("h5l"), NULL, LT_ERR_FORMAT,
                   "h5: truncated: the header declares 2352000 bytes of pixels, the file ends after 784");
  b = labels_file(3000, 3);
  write_gz(tmp_path("h6l"), b.b, b.n);
  expect_load_fail(tmp_path("h5"), tmp_path("h6l"), NULL, LT_ERR_FORMAT,
                   "h6l: truncated: the header declares 3000 bytes of labels, the file ends after 3");
}
END_TEST

START_TEST(test_bad_arguments) {
  write_good("gi", "gl", true);
  lt_tensor *x, *y;
  lt_clear_error();
  expect_load_fail(NULL, tmp_path("gl"), NULL, LT_ERR_NULL, "images_path");
  expect_load_fail(tmp_path("gi"), NULL, NULL, LT_ERR_NULL, "labels_path");
  LT_EXPECT_ERR(lt_mnist_load_files(tmp_path("gi"), tmp_path("gl"), NULL, NULL, &y), LT_ERR_NULL, "images");
  LT_EXPECT_ERR(lt_mnist_load_files(tmp_path("gi"), tmp_path("gl"), NULL, &x, NULL), LT_ERR_NULL, "labels");
  LT_EXPECT_ERR(lt_mnist_load(NULL, LT_DATASET_TRAIN, NULL, &x, &y), LT_ERR_NULL, "dir");
  lt_mnist_opts o = {.max_examples = -1};
  expect_load_fail(tmp_path("gi"), tmp_path("gl"), &o, LT_ERR_INVALID, "max_examples is -1");
  o = (lt_mnist_opts){.normalize = true, .mean = 0, .std = 0};
  expect_load_fail(tmp_path("gi"), tmp_path("gl"), &o, LT_ERR_INVALID, "std must be > 0");
  o.std = NAN;
  expect_load_fail(tmp_path("gi"), tmp_path("gl"), &o, LT_ERR_INVALID, "std must be > 0");
  ck_assert_str_eq(lt_fashion_mnist_class_name(0), "T-shirt/top");
  ck_assert_str_eq(lt_fashion_mnist_class_name(9), "Ankle boot");
  ck_assert_str_eq(lt_fashion_mnist_class_name(10), "?");
  ck_assert_str_eq(lt_fashion_mnist_class_name(-1), "?");
}
END_TEST

/* ---- the real Fashion-MNIST files ----------------------------------------- */

static bool have_fashion_mnist(void) {
  if (access(LT_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0) return true;
  printf("test_datasets: SKIPPED the real Fashion-MNIST checks: %s not found "
         "(apt-get install dataset-fashion-mnist)\n", LT_FASHION_MNIST_DIR);
  return false;
}

/* Pixel sums, computed independently with Python's gzip module over the raw
 * bytes: 3431114169 (train), 573469082 (test). */
START_TEST(test_fashion_mnist_real) {
  if (!have_fashion_mnist()) return;
  struct {
    lt_dataset_split split;
    int64_t n;
    long long pixel_sum;
    int64_t first[10];
  } want[2] = {{LT_DATASET_TRAIN, 60000, 3431114169LL, {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}},
               {LT_DATASET_TEST, 10000, 573469082LL, {9, 2, 1, 1, 6, 1, 4, 6, 5, 7}}};
  for (int s = 0; s < 2; s++) {
    lt_tensor *x, *y;
    LT_OK_OR_FAIL(lt_mnist_load(LT_FASHION_MNIST_DIR, want[s].split, NULL, &x, &y));
    LT_ASSERT_SHAPE(x, want[s].n, 784);
    LT_ASSERT_SHAPE(y, want[s].n);
    const float *xd = x->data;
    const int64_t *yd = y->data;
    /* (No ck_assert inside loops over millions of pixels: each one is a
     * write to Check's pipe.) */
    long long sum = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < x->numel; i++) {
      long v = lround(xd[i] * 255.0);
      if (bad < 0 && !(v >= 0 && v <= 255 && xd[i] == (float)(v / 255.0))) bad = i;
      sum += v;
    }
    ck_assert_msg(bad < 0, "pixel %lld is %.9g, not a multiple of 1/255 in [0, 1]", (long long)bad,
                  bad < 0 ? 0.0 : xd[bad]);
    ck_assert_msg(sum == want[s].pixel_sum, "pixel sum %lld, want %lld", sum, want[s].pixel_sum);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(yd[i], want[s].first[i]);
    /* Balanced: n / 10 examples per class. */
    int64_t count[10] = {0};
    for (int64_t i = 0; i < want[s].n; i++) count[yd[i] >= 0 && yd[i] < 10 ? yd[i] : 0]++;
    for (int c = 0; c < 10; c++) ck_assert_int_eq(count[c], want[s].n / 10);
    /* The published constants match the training split. */
    if (s == 0) {
      double m = sum / 255.0 / (double)x->numel, v = 0;
      for (int64_t i = 0; i < x->numel; i++) v += (xd[i] - m) * (xd[i] - m);
      ck_assert_msg(fabs(m - LT_FASHION_MNIST_MEAN) < 1e-4, "mean %.6f", m);
      ck_assert_msg(fabs(sqrt(v / (double)x->numel) - LT_FASHION_MNIST_STD) < 1e-4, "std %.6f",
                    sqrt(v / (double)x->numel));
    }
    /* The generic reader agrees on the labels. */
    char path[512];
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", LT_FASHION_MNIST_DIR, s == 0 ? "train" : "t10k");
    lt_tensor *y2 = LT_NN(lt_idx_load(path, LT_DTYPE_I64));
    ck_assert(lt_equal(y, y2));
    lt_tensor_free(y2);
    /* A partial, normalised load gives the first rows of the full one. */
    lt_mnist_opts o = {.max_examples = 100, .normalize = true, .mean = LT_FASHION_MNIST_MEAN,
                       .std = LT_FASHION_MNIST_STD};
    lt_tensor *xn, *yn;
    LT_OK_OR_FAIL(lt_mnist_load(LT_FASHION_MNIST_DIR, want[s].split, &o, &xn, &yn));
    LT_ASSERT_SHAPE(xn, 100, 784);
    const float *xnd = xn->data;
    bad = -1;
    for (int64_t i = 0; i < xn->numel; i++) {
      long v = lround(xd[i] * 255.0);
      if (bad < 0 && xnd[i] != (float)((v / 255.0 - LT_FASHION_MNIST_MEAN) / LT_FASHION_MNIST_STD)) bad = i;
    }
    ck_assert_msg(bad < 0, "normalised pixel %lld is %.9g", (long long)bad, bad < 0 ? 0.0 : xnd[bad]);
    lt_tensor *yh = LT_NN(lt_narrow(y, 0, 0, 100));
    ck_assert(lt_equal(yn, yh));
    lt_tensor_free(yh);
    lt_tensor_free(xn);
    lt_tensor_free(yn);
    lt_tensor_free(x);
    lt_tensor_free(y);
  }
  lt_idx_header h;
  LT_OK_OR_FAIL(lt_idx_read_header(LT_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", &h));
  ck_assert_uint_eq(h.magic, LT_IDX_MAGIC_IMAGES);
  ck_assert_int_eq(h.shape[0], 60000);
  ck_assert_int_eq(h.shape[1], 28);
  ck_assert_int_eq(h.shape[2], 28);
}
END_TEST

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

int main(void) {
  const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(tmpdir, sizeof tmpdir, "%s/lt_test_datasets_XXXXXX", base);
  if (!mkdtemp(tmpdir)) {
    perror("test_datasets: mkdtemp");
    return 1;
  }
  Suite *s = suite_create("datasets");
  TCase *tc = tcase_create("datasets");
  tcase_add_test(tc, test_small_exact);
  tcase_add_test(tc, test_mnist_dir_names);
  tcase_add_test(tc, test_empty_dataset);
  tcase_add_test(tc, test_idx_types);
  tcase_add_test(tc, test_wrong_magic);
  tcase_add_test(tc, test_not_gzip);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_count_mismatch_and_labels);
  tcase_add_test(tc, test_huge_dims);
  tcase_add_test(tc, test_bad_arguments);
  tcase_add_test(tc, test_fashion_mnist_real);
  suite_add_tcase(s, tc);
  int rc = lt_test_run(s);
  nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  return rc;
}
