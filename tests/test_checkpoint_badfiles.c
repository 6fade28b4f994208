/*
 * tests/test_checkpoint_badfiles.c: crafted bad checkpoints. Every case
 * expects one specific status and message, and a model that is byte for byte
 * unchanged afterwards: empty, not HDF5, plain HDF5 without our header,
 * truncated at many offsets, single-bit flips, trailing bytes, wrong dtype,
 * wrong shape and rank, huge dims that overflow size arithmetic, missing and
 * extra datasets, wrong format version and name, wrong vocabulary size, NaN
 * and infinite weights, soft/external links, external storage, virtual
 * datasets, foreign filters, named types, aliases and cycles, dots in link
 * names, unwritten data, bad bools, unexpected objects, and training-state
 * damage.
 *
 * Files are damaged with plain HDF5 calls on a good checkpoint and then
 * resealed with lt_ckpt_seal (so the integrity header passes and the checks
 * behind it are reached), or damaged at the byte level (caught by the
 * header). Each test prints how many cases it ran.
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
/* tests/CMakeLists.txt does not add HDF5's include directory. */
#if __has_include(<hdf5.h>)
#include <hdf5.h>
#else
#include <hdf5/serial/hdf5.h>
#endif

#include "checkpoint/checkpoint.h"
#include "nn/nn.h"
#include "test_util.h"

static char tmpdir[256];
static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_ckbad_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the crafting calls below may fail on purpose */
}
static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_rf(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}
static void teardown(void) { rm_rf(tmpdir); }
static char *path_in(const char *name) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ & 3];
  snprintf(b, 512, "%s/%s", tmpdir, name);
  return b;
}

/* ---- the model and its snapshot ------------------------------------------ */

enum { V = 100, C = 8 };

static lt_params *make_model(int64_t vocab, uint64_t seed) {
  lt_params *p = lt_params_new();
  lt_generator *g = lt_generator_new(seed);
  LT_OK_OR_FAIL(lt_params_add(p, "embed.weight", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(vocab, C)), 0));
  LT_OK_OR_FAIL(lt_params_add(p, "layer.w", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4, 6)), 0));
  LT_OK_OR_FAIL(lt_params_add(p, "layer.b", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4)), 0));
  LT_OK_OR_FAIL(lt_params_add(p, "pe", lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 3)), LT_PARAM_BUFFER));
  LT_OK_OR_FAIL(lt_params_add(p, "mask", lt_bernoulli(g, LT_DTYPE_BOOL, LT_SHAPE(3, 3), 0.5), LT_PARAM_BUFFER));
  LT_OK_OR_FAIL(lt_params_add(p, "count", lt_scalar(LT_DTYPE_I64, (double)seed), LT_PARAM_BUFFER));
  lt_generator_free(g);
  return p;
}

typedef struct snapshot {
  int n;
  void *data[16];
  size_t bytes[16];
} snapshot;

static snapshot take(const lt_params *p) {
  snapshot s = {.n = lt_params_count(p)};
  for (int i = 0; i < s.n; i++) {
    const lt_tensor *t = lt_params_at(p, i)->value;
    s.bytes[i] = (size_t)t->numel * lt_dtype_size(t->dtype);
    s.data[i] = malloc(s.bytes[i] + 1);
    memcpy(s.data[i], t->data, s.bytes[i]);
  }
  return s;
}

static bool same(const lt_params *p, const snapshot *s) {
  for (int i = 0; i < s->n; i++)
    if (memcmp(lt_params_at(p, i)->value->data, s->data[i], s->bytes[i])) return false;
  return true;
}

static void drop(snapshot *s) {
  for (int i = 0; i < s->n; i++) free(s->data[i]);
}

/* The model every case loads into (values differ from the saved file's). */
static lt_params *target;
static snapshot before;
static int cases;

static void setup_target(void) {
  target = make_model(V, 999);
  before = take(target);
  cases = 0;
}
static void free_target(void) {
  drop(&before);
  lt_params_free(target);
}

/* Loads path into the target, expecting status st and a message containing
 * want; the target must be unchanged. */
static void expect_load(const char *path, const lt_ckpt_load_opts *o, lt_status st, const char *want,
                        const char *what) {
  lt_ckpt_info *info = (lt_ckpt_info *)1;
  lt_status s = lt_ckpt_load_params(path, target, o, &info);
  ck_assert_msg(s == st, "%s: load returned %s, expected %s: %s", what, lt_status_name(s), lt_status_name(st),
                lt_last_error());
  ck_assert_msg(!want || strstr(lt_last_error(), want), "%s: message \"%s\" lacks \"%s\"", what, lt_last_error(),
                want);
  ck_assert_msg(info == NULL, "%s: info not NULL after a failure", what);
  ck_assert_msg(same(target, &before), "%s: the model changed after a failed load", what);
  lt_clear_error();
  cases++;
}

/* ---- file helpers --------------------------------------------------------- */

static unsigned char *read_all(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)sz + 1);
  ck_assert_int_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  *n = (size_t)sz;
  return b;
}

static void write_all(const char *p, const void *b, size_t n) {
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(b, 1, n, f), n);
  fclose(f);
}

static lt_ckpt_meta *config(int64_t vocab) {
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "vocab_size", vocab));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "d_model", C));
  return m;
}

/* A good checkpoint of a model with different values from the target's. */
static const char *good_file(void) {
  const char *p = path_in("good.h5");
  lt_params *m = make_model(V, 1);
  lt_ckpt_meta *c = config(V);
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, m, c, NULL));
  lt_ckpt_meta_free(c);
  lt_params_free(m);
  /* It does load (so every failure below comes from the damage). */
  lt_params *back = make_model(V, 5);
  LT_OK_OR_FAIL(lt_ckpt_load_params(p, back, NULL, NULL));
  lt_params_free(back);
  return p;
}

typedef void (*damage_fn)(hid_t file);

/* A copy of the good file damaged through HDF5, then resealed. */
static const char *damaged(const char *name, damage_fn fn) {
  size_t n;
  unsigned char *b = read_all(path_in("good.h5"), &n);
  const char *p = path_in(name);
  write_all(p, b, n);
  free(b);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_file_locking(fapl, false, true);
  hid_t f = H5Fopen(p, H5F_ACC_RDWR, fapl);
  ck_assert_int_ge(f, 0);
  fn(f);
  ck_assert_int_ge(H5Fclose(f), 0);
  H5Pclose(fapl);
  LT_OK_OR_FAIL(lt_ckpt_seal(p));
  return p;
}

/* Replaces dataset path with one of type t and dims (data may be NULL). */
static void replace(hid_t f, const char *path, hid_t t, int rank, const hsize_t *dims, const void *data,
                    hid_t mem_t, hid_t dcpl) {
  if (H5Lexists(f, path, H5P_DEFAULT) > 0) ck_assert_int_ge(H5Ldelete(f, path, H5P_DEFAULT), 0);
  hid_t sp = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, NULL);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t d = H5Dcreate2(f, path, t, sp, lcpl, dcpl, H5P_DEFAULT);
  H5Pclose(lcpl);
  ck_assert_msg(d >= 0, "cannot create %s (rank %d)", path, rank);
  if (data) ck_assert_int_ge(H5Dwrite(d, mem_t, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
  H5Dclose(d);
  H5Sclose(sp);
}

static float ones24[24] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static double d24[24];

/* ---- not our file at all --------------------------------------------------- */

START_TEST(not_checkpoints) {
  setup_target();
  write_all(path_in("empty.h5"), "", 0);
  expect_load(path_in("empty.h5"), NULL, LT_ERR_FORMAT, "the file is empty", "empty file");
  char junk[4000];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)('a' + i % 26);
  write_all(path_in("text.h5"), junk, sizeof junk);
  expect_load(path_in("text.h5"), NULL, LT_ERR_FORMAT, "not a libtensor checkpoint", "text file");
  write_all(path_in("short.h5"), junk, 100);
  expect_load(path_in("short.h5"), NULL, LT_ERR_FORMAT, "fewer than the 512-byte integrity header", "short file");
  /* Plain HDF5 (no user block). */
  hid_t f = H5Fcreate(path_in("plain.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  expect_load(path_in("plain.h5"), NULL, LT_ERR_FORMAT, "without libtensor's integrity header", "plain HDF5");
  /* HDF5 with a user block but no header in it. */
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  H5Pset_userblock(fcpl, 512);
  f = H5Fcreate(path_in("unsealed.h5"), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Fclose(f);
  H5Pclose(fcpl);
  expect_load(path_in("unsealed.h5"), NULL, LT_ERR_FORMAT, "holds no libtensor integrity header", "unsealed");
  /* A sealed HDF5 file that is not laid out as a checkpoint. */
  LT_OK_OR_FAIL(lt_ckpt_seal(path_in("unsealed.h5")));
  expect_load(path_in("unsealed.h5"), NULL, LT_ERR_FORMAT, "no 'format' attribute", "sealed empty HDF5");
  /* Not a regular file; no file. */
  ck_assert_int_eq(mkdir(path_in("dir.h5"), 0755), 0);
  expect_load(path_in("dir.h5"), NULL, LT_ERR_FORMAT, "not a regular file", "directory");
  expect_load(path_in("missing.h5"), NULL, LT_ERR_IO, "cannot open", "missing file");
  printf("badfiles: not_checkpoints: %d cases passed\n", cases);
  free_target();
}
END_TEST

/* ---- byte-level damage: truncation, bit flips, trailing bytes, header ------ */

START_TEST(truncations) {
  setup_target();
  const char *good = good_file();
  size_t n;
  unsigned char *b = read_all(good, &n);
  ck_assert_int_gt(n, 2048);
  size_t offs[400];
  int k = 0;
  size_t special[] = {0, 1, 2, 7, 8, 9, 255, 256, 500, 507, 508, 511, 512, 513, 519, 520, 521, 600, 1024, n / 2,
                      n - 8, n - 2, n - 1};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++) offs[k++] = special[i];
  for (size_t o = 3; o < n && k < 400; o += n / 300 + 1) offs[k++] = o;
  const char *p = path_in("trunc.h5");
  for (int i = 0; i < k; i++) {
    write_all(p, b, offs[i]);
    char what[64];
    snprintf(what, sizeof what, "truncated at %zu of %zu", offs[i], n);
    const char *want = offs[i] == 0 ? "the file is empty" : offs[i] < 512 ? "fewer than" : "truncated: the header records";
    expect_load(p, NULL, LT_ERR_FORMAT, want, what);
  }
  free(b);
  printf("badfiles: truncations: %d cases passed\n", cases);
  free_target();
}
END_TEST

START_TEST(bit_flips) {
  setup_target();
  const char *good = good_file();
  size_t n;
  unsigned char *b = read_all(good, &n);
  const char *p = path_in("flip.h5");
  /* Every bit of the header's meaningful bytes, some reserved ones, and 600
   * random bits of the HDF5 data. */
  int positions[1200], np = 0;
  for (int i = 0; i < 32; i++) positions[np++] = i;
  for (int i = 100; i < 104; i++) positions[np++] = i;
  for (int i = 504; i < 512; i++) positions[np++] = i;
  uint64_t x = 88172645463325252ull;
  int flips = 0;
  for (int i = 0; i < np; i++)
    for (int bit = 0; bit < 8; bit++) {
      b[positions[i]] ^= (unsigned char)(1u << bit);
      write_all(p, b, n);
      b[positions[i]] ^= (unsigned char)(1u << bit);
      char what[64];
      snprintf(what, sizeof what, "bit %d of header byte %d", bit, positions[i]);
      expect_load(p, NULL, LT_ERR_FORMAT, "integrity header checksum mismatch", what);
      flips++;
    }
  for (int i = 0; i < 600; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t off = 512 + (size_t)(x % (n - 512));
    int bit = (int)((x >> 40) & 7);
    b[off] ^= (unsigned char)(1u << bit);
    write_all(p, b, n);
    b[off] ^= (unsigned char)(1u << bit);
    char what[64];
    snprintf(what, sizeof what, "bit %d of byte %zu", bit, off);
    expect_load(p, NULL, LT_ERR_FORMAT, "checksum mismatch over bytes", what);
    flips++;
  }
  /* Trailing bytes, and a header of a version we do not know (with a valid
   * header checksum). */
  unsigned char *t = malloc(n + 10);
  memcpy(t, b, n);
  memset(t + n, 0, 10);
  write_all(p, t, n + 10);
  expect_load(p, NULL, LT_ERR_FORMAT, "trailing bytes", "trailing bytes");
  memcpy(t, b, n);
  t[8] = 2;
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), t, 508);
  for (int i = 0; i < 4; i++) t[508 + i] = (unsigned char)(crc >> (8 * i));
  write_all(p, t, n);
  expect_load(p, NULL, LT_ERR_FORMAT, "integrity header version 2", "header version 2");
  free(t);
  free(b);
  printf("badfiles: bit_flips: %d cases passed (%d single-bit flips)\n", cases, flips);
  free_target();
}
END_TEST

/* ---- HDF5-level damage behind a valid header ------------------------------ */

static void to_f64(hid_t f) {
  hsize_t d[2] = {4, 6};
  replace(f, "/model/layer/w", H5T_IEEE_F64LE, 2, d, d24, H5T_NATIVE_DOUBLE, H5P_DEFAULT);
}
static void to_f32be(hid_t f) {
  hsize_t d[2] = {4, 6};
  replace(f, "/model/layer/w", H5T_IEEE_F32BE, 2, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void to_i32(hid_t f) {
  hsize_t d[2] = {4, 6};
  replace(f, "/model/layer/w", H5T_STD_I32LE, 2, d, NULL, 0, H5P_DEFAULT);
}
static void to_f16(hid_t f) {
  hsize_t d[2] = {4, 6};
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_precision(t, 16);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  replace(f, "/model/layer/w", t, 2, d, NULL, 0, H5P_DEFAULT);
  H5Tclose(t);
}
static void mask_to_u8(hid_t f) {
  hsize_t d[2] = {3, 3};
  unsigned char v[9] = {0};
  replace(f, "/model/mask", H5T_STD_U8LE, 2, d, v, H5T_NATIVE_UCHAR, H5P_DEFAULT);
}
static void count_to_f64(hid_t f) {
  double v = 1;
  replace(f, "/model/count", H5T_IEEE_F64LE, 0, NULL, &v, H5T_NATIVE_DOUBLE, H5P_DEFAULT);
}

START_TEST(wrong_dtypes) {
  setup_target();
  good_file();
  expect_load(damaged("f64.h5", to_f64), NULL, LT_ERR_DTYPE,
              "dataset /model/layer/w is f64 (float, 8 bytes, little-endian) but the model's 'layer.w' is f32",
              "f64 for f32");
  expect_load(damaged("be.h5", to_f32be), NULL, LT_ERR_DTYPE, "float, 4 bytes, big-endian", "big-endian f32");
  expect_load(damaged("i32.h5", to_i32), NULL, LT_ERR_DTYPE, "i32 (signed integer, 4 bytes", "i32 for f32");
  expect_load(damaged("f16.h5", to_f16), NULL, LT_ERR_DTYPE, "float, 2 bytes", "f16 for f32");
  expect_load(damaged("u8.h5", mask_to_u8), NULL, LT_ERR_DTYPE, "unsigned integer, 1 bytes", "u8 for bool");
  expect_load(damaged("cf.h5", count_to_f64), NULL, LT_ERR_DTYPE, "the model's 'count' is i64", "f64 for i64");
  printf("badfiles: wrong_dtypes: %d cases passed\n", cases);
  free_target();
}
END_TEST

static void shape_4x7(hid_t f) {
  hsize_t d[2] = {4, 7};
  float v[28] = {0};
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 2, d, v, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void shape_24(hid_t f) {
  hsize_t d[1] = {24};
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 1, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void shape_4x6x1(hid_t f) {
  hsize_t d[3] = {4, 6, 1};
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 3, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void shape_scalar(hid_t f) {
  replace(f, "/model/layer/b", H5T_IEEE_F32LE, 0, NULL, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void shape_rank9(hid_t f) {
  hsize_t d[9] = {1, 1, 1, 1, 1, 1, 1, 1, 4};
  replace(f, "/model/layer/b", H5T_IEEE_F32LE, 9, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void count_1d(hid_t f) {
  hsize_t d[1] = {1};
  int64_t v = 1;
  replace(f, "/model/count", H5T_STD_I64LE, 1, d, &v, H5T_NATIVE_INT64, H5P_DEFAULT);
}
static void chunked_unwritten(hid_t f, const char *path, int rank, const hsize_t *dims) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t ch[8];
  for (int i = 0; i < rank; i++) ch[i] = 1;
  ch[rank - 1] = dims[rank - 1] < 4 ? dims[rank - 1] : 4;
  H5Pset_chunk(dcpl, rank, ch);
  replace(f, path, H5T_IEEE_F32LE, rank, dims, NULL, 0, dcpl);
  H5Pclose(dcpl);
}
static void huge_overflow(hid_t f) {
  hsize_t d[3] = {1ull << 40, 1ull << 40, 1ull << 40};
  chunked_unwritten(f, "/model/layer/w", 3, d);
}
static void huge_bytes_overflow(hid_t f) {
  hsize_t d[2] = {1ull << 62, 1ull << 1}; /* 2^63 elements fit, 2^65 bytes do not */
  chunked_unwritten(f, "/model/layer/w", 2, d);
}
static void huge_rank8(hid_t f) {
  hsize_t d[8] = {256, 256, 256, 256, 256, 256, 256, 256}; /* 2^64 elements */
  chunked_unwritten(f, "/model/layer/b", 8, d);
}
static void huge_cap(hid_t f) {
  hsize_t d[2] = {1ull << 41, 4}; /* 32 TiB */
  chunked_unwritten(f, "/model/layer/w", 2, d);
}
static void huge_for_file(hid_t f) {
  hsize_t d[2] = {1ull << 28, 6}; /* 6 GiB of f32 in a file of a few KiB */
  chunked_unwritten(f, "/model/layer/w", 2, d);
}

START_TEST(wrong_shapes_and_huge_dims) {
  setup_target();
  good_file();
  expect_load(damaged("s1.h5", shape_4x7), NULL, LT_ERR_SHAPE,
              "dataset /model/layer/w has shape [4,7] but the model's 'layer.w' is [4,6]", "[4,7]");
  expect_load(damaged("s2.h5", shape_24), NULL, LT_ERR_SHAPE, "has shape [24] but", "rank 1");
  expect_load(damaged("s3.h5", shape_4x6x1), NULL, LT_ERR_SHAPE, "has shape [4,6,1] but", "rank 3");
  expect_load(damaged("s4.h5", shape_scalar), NULL, LT_ERR_SHAPE, "has shape [] but the model's 'layer.b' is [4]",
              "scalar");
  expect_load(damaged("s5.h5", shape_rank9), NULL, LT_ERR_SHAPE, "rank 9, more than LT_MAX_DIMS", "rank 9");
  expect_load(damaged("s6.h5", count_1d), NULL, LT_ERR_SHAPE, "the model's 'count' is []", "0-d as [1]");
  expect_load(damaged("h1.h5", huge_overflow), NULL, LT_ERR_OVERFLOW,
              "dims [1099511627776,1099511627776,1099511627776]: the element count overflows 64 bits", "2^120 elements");
  expect_load(damaged("h2.h5", huge_bytes_overflow), NULL, LT_ERR_OVERFLOW, "the byte count overflows 64 bits",
              "2^65 bytes");
  expect_load(damaged("h3.h5", huge_rank8), NULL, LT_ERR_OVERFLOW, "the element count overflows 64 bits", "256^8");
  expect_load(damaged("h4.h5", huge_cap), NULL, LT_ERR_OVERFLOW, "over the cap", "32 TiB");
  expect_load(damaged("h5.h5", huge_for_file), NULL, LT_ERR_OVERFLOW, "cannot be stored in a", "6 GiB");
  printf("badfiles: wrong_shapes_and_huge_dims: %d cases passed\n", cases);
  free_target();
}
END_TEST

static void drop_b(hid_t f) { H5Ldelete(f, "/model/layer/b", H5P_DEFAULT); }
static void add_extra(hid_t f) {
  hsize_t d[1] = {3};
  replace(f, "/model/layer/extra", H5T_IEEE_F32LE, 1, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void drop_and_add(hid_t f) {
  drop_b(f);
  add_extra(f);
  hsize_t d[1] = {2};
  replace(f, "/model/head/bias", H5T_IEEE_F32LE, 1, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void drop_model(hid_t f) { H5Ldelete(f, "/model", H5P_DEFAULT); }

START_TEST(missing_and_extra) {
  setup_target();
  good_file();
  expect_load(damaged("m1.h5", drop_b), NULL, LT_ERR_INVALID, "1 missing from the file (layer.b); 0 not in the model",
              "missing dataset");
  expect_load(damaged("m2.h5", add_extra), NULL, LT_ERR_INVALID, "0 missing from the file; 1 not in the model (layer.extra)",
              "extra dataset");
  expect_load(damaged("m3.h5", drop_and_add), NULL, LT_ERR_INVALID,
              "1 missing from the file (layer.b); 2 not in the model (head.bias, layer.extra)", "both");
  expect_load(damaged("m4.h5", drop_model), NULL, LT_ERR_FORMAT, "no /model group", "no /model");
  /* Non-strict accepts them (and says so). */
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.non_strict = true;
  lt_ckpt_info *info;
  LT_OK_OR_FAIL(lt_ckpt_load_params(path_in("m3.h5"), target, &o, &info));
  ck_assert_int_eq(info->n_missing, 1);
  ck_assert_int_eq(info->n_unexpected, 2);
  ck_assert(!memcmp(lt_params_find(target, "layer.b")->data, before.data[2], before.bytes[2])); /* kept */
  lt_ckpt_info_free(info);
  printf("badfiles: missing_and_extra: %d cases passed\n", cases);
  free_target();
}
END_TEST

static void set_attr_int(hid_t f, const char *obj, const char *name, int64_t v) {
  if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0) H5Adelete_by_name(f, obj, name, H5P_DEFAULT);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate_by_name(f, obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert_int_ge(a, 0);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(sp);
}
static void set_attr_str(hid_t f, const char *obj, const char *name, const char *v) {
  if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0) H5Adelete_by_name(f, obj, name, H5P_DEFAULT);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, strlen(v));
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate_by_name(f, obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, v);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
}
static void version2(hid_t f) { set_attr_int(f, "/", "format_version", 2); }
static void version0(hid_t f) { set_attr_int(f, "/", "format_version", 0); }
static void version_str(hid_t f) { set_attr_str(f, "/", "format_version", "1"); }
static void other_format(hid_t f) { set_attr_str(f, "/", "format", "keras"); }
static void no_format(hid_t f) { H5Adelete(f, "format"); }
static void bad_content(hid_t f) { set_attr_str(f, "/", "content", "weights"); }
static void array_config(hid_t f) {
  hsize_t d[1] = {3};
  hid_t sp = H5Screate_simple(1, d, NULL);
  hid_t a = H5Acreate_by_name(f, "/model", "layers", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int64_t v[3] = {1, 2, 3};
  H5Awrite(a, H5T_NATIVE_INT64, v);
  H5Aclose(a);
  H5Sclose(sp);
}
static void compound_config(hid_t f) {
  hid_t t = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(t, "a", 0, H5T_NATIVE_INT);
  H5Tinsert(t, "b", 4, H5T_NATIVE_INT);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate_by_name(f, "/model", "pair", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int v[2] = {1, 2};
  H5Awrite(a, t, v);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
}

START_TEST(wrong_format_version_and_config) {
  setup_target();
  good_file();
  expect_load(damaged("v2.h5", version2), NULL, LT_ERR_FORMAT,
              "format version 2 is newer than this library reads (1)", "version 2");
  expect_load(damaged("v0.h5", version0), NULL, LT_ERR_FORMAT, "format version 0 is invalid", "version 0");
  expect_load(damaged("vs.h5", version_str), NULL, LT_ERR_FORMAT, "'format_version' of / is not an integer",
              "version as string");
  expect_load(damaged("fk.h5", other_format), NULL, LT_ERR_FORMAT, "format is 'keras', not 'libtensor-checkpoint'",
              "other format");
  expect_load(damaged("nf.h5", no_format), NULL, LT_ERR_FORMAT, "no 'format' attribute", "no format");
  expect_load(damaged("bc.h5", bad_content), NULL, LT_ERR_FORMAT, "content 'weights'", "bad content");
  expect_load(damaged("ac.h5", array_config), NULL, LT_ERR_FORMAT, "attribute 'layers' of /model is not a single value",
              "array config");
  expect_load(damaged("cc.h5", compound_config), NULL, LT_ERR_FORMAT, "unsupported type (compound",
              "compound config");
  printf("badfiles: wrong_format_version_and_config: %d cases passed\n", cases);
  free_target();
}
END_TEST

START_TEST(wrong_vocabulary_size) {
  setup_target();
  /* A checkpoint of the same architecture with a vocabulary of 200. */
  lt_params *big = make_model(200, 3);
  lt_ckpt_meta *c200 = config(200), *c100 = config(V);
  const char *p = path_in("v200.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, big, c200, NULL));
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.expect_config = c100;
  expect_load(p, &o, LT_ERR_INVALID, "config 'vocab_size' is 200 in the file but 100 is expected", "config check");
  /* Without the config check the embedding's shape catches it. */
  expect_load(p, NULL, LT_ERR_SHAPE, "dataset /model/embed/weight has shape [200,8] but the model's 'embed.weight' is [100,8]",
              "shape check");
  /* A key the file lacks, or with another kind. */
  lt_ckpt_meta *c3 = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(c3, "n_layers", 6));
  o.expect_config = c3;
  expect_load(p, &o, LT_ERR_INVALID, "the file's config has no 'n_layers'", "missing key");
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(c3, "n_layers", "6"));
  lt_ckpt_meta_free(c3);
  c3 = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(c3, "vocab_size", "200"));
  o.expect_config = c3;
  expect_load(p, &o, LT_ERR_INVALID, "config 'vocab_size' is 200 in the file but '200' is expected", "kind");
  lt_ckpt_meta_free(c3);
  lt_ckpt_meta_free(c200);
  lt_ckpt_meta_free(c100);
  lt_params_free(big);
  printf("badfiles: wrong_vocabulary_size: %d cases passed\n", cases);
  free_target();
}
END_TEST

static void poke_float(hid_t f, const char *path, int64_t index, double v) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  hid_t sp = H5Dget_space(d);
  int nd = H5Sget_simple_extent_ndims(sp);
  hsize_t dims[8], coord[8];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  for (int i = nd - 1; i >= 0; i--) {
    coord[i] = (hsize_t)index % dims[i];
    index /= (int64_t)dims[i];
  }
  H5Sselect_elements(sp, H5S_SELECT_SET, 1, coord);
  hsize_t one = 1;
  hid_t ms = H5Screate_simple(1, &one, NULL);
  ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, &v), 0);
  H5Sclose(ms);
  H5Sclose(sp);
  H5Dclose(d);
}
static void nan_weight(hid_t f) { poke_float(f, "/model/embed/weight", 3, NAN); }
static void inf_weight(hid_t f) { poke_float(f, "/model/layer/w", 23, INFINITY); }
static void ninf_buffer(hid_t f) { poke_float(f, "/model/pe", 4, -INFINITY); }
static void bad_bool(hid_t f) {
  /* The bool enum with a raw byte 7: written with the file type as the
   * memory type, so that HDF5 converts (and checks) nothing. */
  hid_t t = H5Tenum_create(H5T_STD_I8LE);
  signed char f0 = 0, t1 = 1;
  H5Tenum_insert(t, "FALSE", &f0);
  H5Tenum_insert(t, "TRUE", &t1);
  unsigned char v[9] = {0, 1, 0, 1, 7, 0, 0, 0, 0};
  hsize_t dims[2] = {3, 3};
  replace(f, "/model/mask", t, 2, dims, v, t, H5P_DEFAULT);
  H5Tclose(t);
}

START_TEST(nonfinite_and_bad_values) {
  setup_target();
  good_file();
  expect_load(damaged("nan.h5", nan_weight), NULL, LT_ERR_NUMERIC,
              "dataset /model/embed/weight holds NaN at flat index 3", "NaN weight");
  expect_load(damaged("inf.h5", inf_weight), NULL, LT_ERR_NUMERIC, "/model/layer/w holds +inf at flat index 23",
              "+inf weight");
  expect_load(damaged("ninf.h5", ninf_buffer), NULL, LT_ERR_NUMERIC, "/model/pe holds -inf at flat index 4",
              "-inf buffer");
  expect_load(damaged("bool.h5", bad_bool), NULL, LT_ERR_FORMAT, "bool dataset /model/mask holds 7 at flat index 4",
              "bool 7");
  /* allow_nonfinite accepts them. */
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.allow_nonfinite = true;
  LT_OK_OR_FAIL(lt_ckpt_load_params(path_in("nan.h5"), target, &o, NULL));
  ck_assert(isnan(((float *)lt_params_find(target, "embed.weight")->data)[3]));
  printf("badfiles: nonfinite_and_bad_values: %d cases passed\n", cases);
  free_target();
}
END_TEST

static void soft_link(hid_t f) {
  H5Ldelete(f, "/model/layer/w", H5P_DEFAULT);
  H5Lcreate_soft("/model/layer/b", f, "/model/layer/w", H5P_DEFAULT, H5P_DEFAULT);
}
static void external_link(hid_t f) {
  H5Ldelete(f, "/model/layer/w", H5P_DEFAULT);
  H5Lcreate_external("/etc/passwd", "/x", f, "/model/layer/w", H5P_DEFAULT, H5P_DEFAULT);
}
static void external_storage(hid_t f) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_external(dcpl, "/dev/zero", 0, 96);
  hsize_t d[2] = {4, 6};
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 2, d, NULL, 0, dcpl);
  H5Pclose(dcpl);
}
static void virtual_ds(hid_t f) {
  hsize_t d[2] = {4, 6};
  hid_t vs = H5Screate_simple(2, d, NULL), ss = H5Screate_simple(2, d, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  ck_assert_int_ge(H5Pset_virtual(dcpl, vs, "other.h5", "/data", ss), 0);
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 2, d, NULL, 0, dcpl);
  H5Pclose(dcpl);
  H5Sclose(vs);
  H5Sclose(ss);
}
static void filter_ds(hid_t f, int which) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t d[2] = {4, 6}, ch[2] = {2, 6};
  H5Pset_chunk(dcpl, 2, ch);
  if (which == 0) H5Pset_shuffle(dcpl);
  if (which == 1) H5Pset_fletcher32(dcpl);
  if (which == 2) H5Pset_nbit(dcpl);
  H5Pset_deflate(dcpl, 1);
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 2, d, ones24, H5T_NATIVE_FLOAT, dcpl);
  H5Pclose(dcpl);
}
static void shuffle(hid_t f) { filter_ds(f, 0); }
static void fletcher(hid_t f) { filter_ds(f, 1); }
static void deflate_ok(hid_t f) { filter_ds(f, 3); }
static void named_type(hid_t f) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tcommit2(f, "/model/layer/ftype", t, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Tclose(t);
}
static void alias(hid_t f) { H5Lcreate_hard(f, "/model/layer/w", f, "/model/layer/w_alias", H5P_DEFAULT, H5P_DEFAULT); }
static void cycle(hid_t f) { H5Lcreate_hard(f, "/model", f, "/model/layer/loop", H5P_DEFAULT, H5P_DEFAULT); }
static void dotted(hid_t f) {
  hsize_t d[1] = {4};
  replace(f, "/model/layer/b.x", H5T_IEEE_F32LE, 1, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void unwritten(hid_t f) {
  hsize_t d[2] = {4, 6};
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 2, d, NULL, 0, H5P_DEFAULT);
}
static void partly_written(hid_t f) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t d[2] = {4, 6}, ch[2] = {1, 6};
  H5Pset_chunk(dcpl, 2, ch);
  replace(f, "/model/layer/w", H5T_IEEE_F32LE, 2, d, NULL, 0, dcpl);
  hid_t ds = H5Dopen2(f, "/model/layer/w", H5P_DEFAULT);
  hid_t sp = H5Dget_space(ds);
  hsize_t start[2] = {0, 0}, cnt[2] = {1, 6};
  H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, cnt, NULL);
  hid_t ms = H5Screate_simple(2, cnt, NULL);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, ones24);
  H5Sclose(ms);
  H5Sclose(sp);
  H5Dclose(ds);
  H5Pclose(dcpl);
}
static void top_level_junk(hid_t f) {
  hid_t g = H5Gcreate2(f, "/junk", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(g);
}
static void model_is_dataset(hid_t f) {
  H5Ldelete(f, "/model", H5P_DEFAULT);
  hsize_t d[1] = {1};
  replace(f, "/model", H5T_IEEE_F32LE, 1, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void deep(hid_t f) {
  char p[1024] = "/model";
  for (int i = 0; i < 70; i++) strcat(p, "/g");
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t g = H5Gcreate2(f, p, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(g);
  H5Pclose(lcpl);
}

START_TEST(links_storage_filters_objects) {
  setup_target();
  good_file();
  expect_load(damaged("l1.h5", soft_link), NULL, LT_ERR_FORMAT, "/model/layer/w is a soft link", "soft link");
  expect_load(damaged("l2.h5", external_link), NULL, LT_ERR_FORMAT, "/model/layer/w is a external link",
              "external link");
  expect_load(damaged("l3.h5", external_storage), NULL, LT_ERR_FORMAT, "keeps its data in external files",
              "external storage");
  expect_load(damaged("l4.h5", virtual_ds), NULL, LT_ERR_FORMAT, "is a virtual dataset", "virtual dataset");
  expect_load(damaged("l5.h5", shuffle), NULL, LT_ERR_FORMAT, "uses filter 2: only deflate (1)", "shuffle");
  expect_load(damaged("l6.h5", fletcher), NULL, LT_ERR_FORMAT, "uses filter 3", "fletcher32");
  expect_load(damaged("l7.h5", named_type), NULL, LT_ERR_FORMAT, "/model/layer/ftype is a named datatype",
              "named datatype");
  expect_load(damaged("l8.h5", alias), NULL, LT_ERR_FORMAT, "is linked more than once", "alias");
  expect_load(damaged("l9.h5", cycle), NULL, LT_ERR_FORMAT, "is linked more than once", "cycle");
  expect_load(damaged("la.h5", dotted), NULL, LT_ERR_FORMAT, "/model/layer/b.x: a name component contains '.'",
              "dot in a name");
  expect_load(damaged("lb.h5", unwritten), NULL, LT_ERR_FORMAT, "dataset /model/layer/w was never (fully) written",
              "unwritten");
  expect_load(damaged("lc.h5", partly_written), NULL, LT_ERR_FORMAT, "was never (fully) written", "partly written");
  expect_load(damaged("ld.h5", top_level_junk), NULL, LT_ERR_FORMAT, "unexpected object /junk", "top-level junk");
  expect_load(damaged("le.h5", model_is_dataset), NULL, LT_ERR_FORMAT, "/model is not a group", "model dataset");
  expect_load(damaged("lf.h5", deep), NULL, LT_ERR_FORMAT, "nested deeper than 64", "deep nesting");
  /* Deflate alone (ours) is fine, chunked or not. */
  LT_OK_OR_FAIL(lt_ckpt_load_params(damaged("lg.h5", deflate_ok), target, NULL, NULL));
  LT_ASSERT_VALUES(lt_params_find(target, "layer.w"), 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                   1, 1, 1, 1);
  printf("badfiles: links_storage_filters_objects: %d cases passed\n", cases);
  free_target();
}
END_TEST

/* ---- training state ------------------------------------------------------- */

static const char *gnames[1] = {"dropout"};

static void rng_shape(hid_t f) {
  hsize_t d[1] = {3};
  uint64_t v[3] = {1, 2, 3};
  replace(f, "/rng/dropout", H5T_STD_U64LE, 1, d, v, H5T_NATIVE_UINT64, H5P_DEFAULT);
}
static void rng_type(hid_t f) {
  hsize_t d[1] = {2};
  int64_t v[2] = {1, 2};
  replace(f, "/rng/dropout", H5T_STD_I64LE, 1, d, v, H5T_NATIVE_INT64, H5P_DEFAULT);
}
static void optim_shape(hid_t f) {
  hsize_t d[2] = {6, 4};
  replace(f, "/optim/layer/w/exp_avg", H5T_IEEE_F32LE, 2, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void optim_nan(hid_t f) { poke_float(f, "/optim/layer/w/exp_avg_sq", 5, NAN); }
static void optim_unknown_state(hid_t f) {
  hsize_t d[1] = {4};
  replace(f, "/optim/layer/b/momentum_buffer", H5T_IEEE_F32LE, 1, d, ones24, H5T_NATIVE_FLOAT, H5P_DEFAULT);
}
static void optim_step(hid_t f) { set_attr_int(f, "/optim", "step", -3); }
static void sched_step(hid_t f) { set_attr_int(f, "/schedule", "step", -1); }
static void no_rng(hid_t f) { H5Ldelete(f, "/rng", H5P_DEFAULT); }
static void blob_type(hid_t f) {
  hsize_t d[1] = {4};
  replace(f, "/extra/tokenizer", H5T_STD_I32LE, 1, d, NULL, 0, H5P_DEFAULT);
}

START_TEST(training_state_damage) {
  setup_target();
  lt_params *src = make_model(V, 1);
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *o = lt_optimizer_new(src, &cfg);
  LT_OK_OR_FAIL(lt_optimizer_set_step_count(o, 5)); /* creates the state tensors */
  lt_generator *g = lt_generator_new(7);
  lt_train_state st = {.params = src, .optim = o, .optim_config = &cfg, .step = 5, .n_generators = 1,
                       .generator_names = gnames, .generators = &g};
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(extra, "tokenizer", "abcd", 4));
  LT_OK_OR_FAIL(lt_ckpt_save_training(path_in("good.h5"), &st, NULL, extra, NULL));
  /* The target's optimizer and generator must not change either. */
  lt_optimizer *to = lt_optimizer_new(target, &cfg);
  lt_generator *tg = lt_generator_new(123);
  lt_schedule tsched = {.kind = LT_SCHED_CONSTANT, .base_lr = 0.5};
  lt_train_state ts = {.params = target, .optim = to, .optim_config = &cfg, .schedule = &tsched, .step = 77,
                       .n_generators = 1, .generator_names = gnames, .generators = &tg};
  struct {
    const char *file;
    damage_fn fn;
    lt_status st;
    const char *want;
  } tc[] = {
      {"t1.h5", rng_shape, LT_ERR_SHAPE, "dataset /rng/dropout has shape [3], expected [2]"},
      {"t2.h5", rng_type, LT_ERR_DTYPE, "dataset /rng/dropout is i64 (signed integer, 8 bytes"},
      {"t3.h5", optim_shape, LT_ERR_SHAPE, "/optim/layer/w/exp_avg has shape [6,4] but the model's 'layer.w.exp_avg' is [4,6]"},
      {"t4.h5", optim_nan, LT_ERR_NUMERIC, "/optim/layer/w/exp_avg_sq holds NaN at flat index 5"},
      {"t5.h5", optim_unknown_state, LT_ERR_INVALID, "1 not in the model (layer.b.momentum_buffer)"},
      {"t6.h5", optim_step, LT_ERR_FORMAT, "optimizer step -3 < 0"},
      {"t7.h5", sched_step, LT_ERR_FORMAT, "schedule step -1 < 0"},
      {"t8.h5", no_rng, LT_ERR_FORMAT, "no /rng group"},
      {"t9.h5", blob_type, LT_ERR_DTYPE, "dataset /extra/tokenizer is i32"},
  };
  for (size_t i = 0; i < sizeof tc / sizeof *tc; i++) {
    const char *p = damaged(tc[i].file, tc[i].fn);
    lt_ckpt_info *info = (lt_ckpt_info *)1;
    lt_status s = lt_ckpt_load_training(p, &ts, NULL, &info);
    ck_assert_msg(s == tc[i].st, "%s: %s: %s", tc[i].file, lt_status_name(s), lt_last_error());
    ck_assert_msg(strstr(lt_last_error(), tc[i].want), "%s: \"%s\" lacks \"%s\"", tc[i].file, lt_last_error(),
                  tc[i].want);
    ck_assert_ptr_null(info);
    ck_assert(same(target, &before));
    ck_assert_int_eq(lt_optimizer_step_count(to), 0);
    ck_assert_ptr_null(lt_optimizer_state(to, "layer.w", "exp_avg"));
    ck_assert_int_eq(lt_generator_get_state(tg).seed, 123);
    ck_assert_int_eq(ts.step, 77);
    ck_assert_int_eq(tsched.kind, LT_SCHED_CONSTANT);
    lt_clear_error();
    cases++;
  }
  /* The undamaged file loads. */
  LT_OK_OR_FAIL(lt_ckpt_load_training(path_in("good.h5"), &ts, NULL, NULL));
  ck_assert_int_eq(lt_optimizer_step_count(to), 5);
  ck_assert_int_eq(ts.step, 5);
  ck_assert_int_eq(lt_generator_get_state(tg).seed, 7);
  lt_ckpt_meta_free(extra);
  lt_generator_free(g);
  lt_generator_free(tg);
  lt_optimizer_free(o);
  lt_optimizer_free(to);
  lt_params_free(src);
  printf("badfiles: training_state_damage: %d cases passed\n", cases);
  free_target();
}
END_TEST

int main(void) {
  Suite *s = suite_create("checkpoint_badfiles");
  TCase *tc = tcase_create("bad");
  tcase_add_checked_fixture(tc, make_tmpdir, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, not_checkpoints);
  tcase_add_test(tc, truncations);
  tcase_add_test(tc, bit_flips);
  tcase_add_test(tc, wrong_dtypes);
  tcase_add_test(tc, wrong_shapes_and_huge_dims);
  tcase_add_test(tc, missing_and_extra);
  tcase_add_test(tc, wrong_format_version_and_config);
  tcase_add_test(tc, wrong_vocabulary_size);
  tcase_add_test(tc, nonfinite_and_bad_values);
  tcase_add_test(tc, links_storage_filters_objects);
  tcase_add_test(tc, training_state_damage);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
