/*
 * tests/test_checkpoint_badfiles.c: crafted bad checkpoints. Every case
 * expects one specific status and message, and a model that is byte for byte
 * unchanged afterwards: empty, not HDF5, plain HDF5 without our header,
 * truncated at many offsets, single-bit flips, trailing bytes, wrong dtype,
 * wrong shape and rank, huge dims that overflow size arithmetic, missing and
 * extra datasets, wrong format version and name, wrong vocabulary size, NaN
 * and infinite weights, soft/external links, external storage, virtual
 * datasets, foreign filters, named types, aliases and cycles, dots in link
 * names, unwritten data, bad bools, unexpected objects, HDF5 data HDF5
 * cannot parse behind a valid header (its error stack in the message), and
 * training-state damage (per-parameter optimizer steps included).
 *
 * Files are damaged with plain HDF5 calls on a good checkpoint and then
 * resealed with lt_ckpt_seal (so the integrity header passes and the checks
 * behind it are reached), or damaged at the byte level (caught by the
 * header). Most cases are table rows (replace_case, damage_case). Each test
 * prints how many cases it ran.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h" /* lt__ckpt_seal_buffer */
#include "nn/nn.h"
#include "test_util.h"
#include "util_ckpt.h"

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
  /* lt_ckpt_describe reads the same file with the same checks and no model:
   * it never crashes (ASan), keeps its contract, and refuses what the load
   * refused for the file's structure or size. */
  lt_ckpt_desc *d = (lt_ckpt_desc *)1;
  lt_status ds = lt_ckpt_describe(path, o, &d);
  ck_assert_msg(ds == LT_OK ? d != NULL : d == NULL && lt_last_error()[0], "%s: describe broke its contract (%s)",
                what, lt_status_name(ds));
  if (st == LT_ERR_OVERFLOW || st == LT_ERR_IO || (st == LT_ERR_FORMAT && !(want && strstr(want, "bool"))))
    ck_assert_msg(ds == st, "%s: the load said %s but describe %s: %s", what, lt_status_name(st),
                  lt_status_name(ds), ds ? lt_last_error() : "ok");
  lt_ckpt_desc_free(d);
  lt_clear_error();
  cases++;
}

/* ---- file helpers --------------------------------------------------------- */

static lt_ckpt_meta *config(int64_t vocab) {
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "vocab_size", vocab));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "d_model", C));
  return m;
}

/* A good checkpoint of a model with different values from the target's. */
static const char *good_file(void) {
  const char *p = ckpt_path("good.h5");
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
  unsigned char *b = ckpt_read_file(ckpt_path("good.h5"), &n);
  const char *p = ckpt_path(name);
  ckpt_write_file(p, b, n);
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
  ckpt_write_file(ckpt_path("empty.h5"), "", 0);
  expect_load(ckpt_path("empty.h5"), NULL, LT_ERR_FORMAT, "the file is empty", "empty file");
  char junk[4000];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)('a' + i % 26);
  ckpt_write_file(ckpt_path("text.h5"), junk, sizeof junk);
  expect_load(ckpt_path("text.h5"), NULL, LT_ERR_FORMAT, "not a libtensor checkpoint", "text file");
  ckpt_write_file(ckpt_path("short.h5"), junk, 100);
  expect_load(ckpt_path("short.h5"), NULL, LT_ERR_FORMAT, "fewer than the 512-byte integrity header", "short file");
  /* Plain HDF5 (no user block). */
  hid_t f = H5Fcreate(ckpt_path("plain.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  expect_load(ckpt_path("plain.h5"), NULL, LT_ERR_FORMAT, "without libtensor's integrity header", "plain HDF5");
  /* HDF5 with a user block but no header in it, in the default
   * (unchecksummed) layout and in the latest one. */
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_userblock(fcpl, 512);
  f = H5Fcreate(ckpt_path("unsealed.h5"), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Fclose(f);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  f = H5Fcreate(ckpt_path("unsealed2.h5"), H5F_ACC_TRUNC, fcpl, fapl);
  H5Fclose(f);
  H5Pclose(fapl);
  H5Pclose(fcpl);
  expect_load(ckpt_path("unsealed.h5"), NULL, LT_ERR_FORMAT, "holds no libtensor integrity header", "unsealed");
  /* A sealed HDF5 file that is not laid out as a checkpoint: in the default
   * layout refused for its unchecksummed headers first; accepted so far
   * with allow_unchecksummed; in the latest layout it reaches the layout
   * checks. */
  LT_OK_OR_FAIL(lt_ckpt_seal(ckpt_path("unsealed.h5")));
  expect_load(ckpt_path("unsealed.h5"), NULL, LT_ERR_FORMAT, "version-0 superblock and unchecksummed object headers",
              "sealed empty HDF5 (default layout)");
  lt_ckpt_load_opts uo = LT_CKPT_LOAD_DEFAULTS;
  uo.allow_unchecksummed = true;
  expect_load(ckpt_path("unsealed.h5"), &uo, LT_ERR_FORMAT, "no 'format' attribute", "sealed empty HDF5, allowed");
  LT_OK_OR_FAIL(lt_ckpt_seal(ckpt_path("unsealed2.h5")));
  expect_load(ckpt_path("unsealed2.h5"), NULL, LT_ERR_FORMAT, "no 'format' attribute", "sealed empty HDF5");
  /* A valid integrity header over HDF5 data that HDF5 cannot parse (the
   * superblock signature broken: refused before HDF5 looks for a superblock
   * elsewhere; a byte of the superblock's base address changed: HDF5's own
   * error stack (its checksum) ends the message). */
  {
    size_t n;
    lt_params *m = make_model(V, 1);
    LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("sb.h5"), m, NULL, NULL));
    lt_params_free(m);
    unsigned char *b = ckpt_read_file(ckpt_path("sb.h5"), &n);
    ck_assert(!memcmp(b + 512, "\x89HDF", 4));
    b[513] = 'X';
    lt__ckpt_seal_buffer(b, n);
    ckpt_write_file(ckpt_path("sb.h5"), b, n);
    free(b);
    LT_OK_OR_FAIL(lt_ckpt_verify(ckpt_path("sb.h5")));
    expect_load(ckpt_path("sb.h5"), NULL, LT_ERR_FORMAT, "no HDF5 superblock at byte 512", "broken signature");
    b = ckpt_read_file(ckpt_path("sb.h5"), &n);
    b[513] = 'H';
    b[512 + 44] ^= 0x40; /* the superblock's checksum */
    lt__ckpt_seal_buffer(b, n);
    ckpt_write_file(ckpt_path("sb.h5"), b, n);
    free(b);
    LT_OK_OR_FAIL(lt_ckpt_verify(ckpt_path("sb.h5")));
    expect_load(ckpt_path("sb.h5"), NULL, LT_ERR_FORMAT, "HDF5 cannot open it: HDF5: ", "broken superblock");
  }
  /* Not a regular file; no file. */
  ck_assert_int_eq(mkdir(ckpt_path("dir.h5"), 0755), 0);
  expect_load(ckpt_path("dir.h5"), NULL, LT_ERR_FORMAT, "not a regular file", "directory");
  expect_load(ckpt_path("missing.h5"), NULL, LT_ERR_IO, "cannot open", "missing file");
  printf("badfiles: not_checkpoints: %d cases passed\n", cases);
  free_target();
}
END_TEST

/* ---- byte-level damage: truncation, bit flips, trailing bytes, header ------ */

START_TEST(truncations) {
  setup_target();
  const char *good = good_file();
  size_t n;
  unsigned char *b = ckpt_read_file(good, &n);
  ck_assert_int_gt(n, 2048);
  size_t offs[400];
  int k = 0;
  size_t special[] = {0, 1, 2, 7, 8, 9, 255, 256, 500, 507, 508, 511, 512, 513, 519, 520, 521, 600, 1024, n / 2,
                      n - 8, n - 2, n - 1};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++) offs[k++] = special[i];
  for (size_t o = 3; o < n && k < 400; o += n / 300 + 1) offs[k++] = o;
  const char *p = ckpt_path("trunc.h5");
  for (int i = 0; i < k; i++) {
    ckpt_write_file(p, b, offs[i]);
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
  unsigned char *b = ckpt_read_file(good, &n);
  const char *p = ckpt_path("flip.h5");
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
      ckpt_write_file(p, b, n);
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
    ckpt_write_file(p, b, n);
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
  ckpt_write_file(p, t, n + 10);
  expect_load(p, NULL, LT_ERR_FORMAT, "trailing bytes", "trailing bytes");
  memcpy(t, b, n);
  t[8] = 2;
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), t, 508);
  for (int i = 0; i < 4; i++) t[508 + i] = (unsigned char)(crc >> (8 * i));
  ckpt_write_file(p, t, n);
  expect_load(p, NULL, LT_ERR_FORMAT, "integrity header version 2", "header version 2");
  free(t);
  free(b);
  printf("badfiles: bit_flips: %d cases passed (%d single-bit flips)\n", cases, flips);
  free_target();
}
END_TEST

/* ---- HDF5-level damage behind a valid header ------------------------------ */

/* A dataset replaced by one of another type, rank or dims: the cases of
 * wrong_dtypes and wrong_shapes_and_huge_dims. Types are HDF5 globals (not
 * constants), so the tables are built at run time. chunked: 1-element chunks
 * along all but the last dim and no data written, so that huge dims cost no
 * space. */
typedef struct replace_case {
  const char *what, *path;
  hid_t type;
  int rank;
  hsize_t dims[9];
  const void *data; /* NULL: nothing written */
  hid_t mem;
  bool chunked;
  lt_status st;
  const char *want;
} replace_case;

static const replace_case *cur_replace;

static void do_replace(hid_t f) {
  const replace_case *c = cur_replace;
  hid_t dcpl = H5P_DEFAULT;
  if (c->chunked) {
    hsize_t ch[9];
    for (int i = 0; i < c->rank; i++) ch[i] = 1;
    ch[c->rank - 1] = c->dims[c->rank - 1] < 4 ? c->dims[c->rank - 1] : 4;
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, c->rank, ch);
  }
  replace(f, c->path, c->type, c->rank, c->dims, c->data, c->mem, dcpl);
  if (dcpl != H5P_DEFAULT) H5Pclose(dcpl);
}

static void run_replace_cases(const replace_case *tc, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char file[32];
    snprintf(file, sizeof file, "r%zu.h5", i);
    cur_replace = &tc[i];
    expect_load(damaged(file, do_replace), NULL, tc[i].st, tc[i].want, tc[i].what);
  }
}

/* A damage function per case, and what loading must then report. */
typedef struct damage_case {
  const char *what;
  damage_fn fn;
  lt_status st;
  const char *want;
} damage_case;

static void run_damage_cases(const damage_case *tc, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char file[32];
    snprintf(file, sizeof file, "d%zu.h5", i);
    expect_load(damaged(file, tc[i].fn), NULL, tc[i].st, tc[i].want, tc[i].what);
  }
}
#define N_OF(a) (sizeof(a) / sizeof *(a))

/* The prologue and epilogue of a table-driven test: a fresh target and good
 * file, and the count of cases passed. */
static void begin_cases(void) {
  setup_target();
  good_file();
}
static void end_cases(const char *test) {
  printf("badfiles: %s: %d cases passed\n", test, cases);
  free_target();
}

START_TEST(wrong_dtypes) {
  begin_cases();
  hid_t f16 = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(f16, 15, 10, 5, 0, 10);
  H5Tset_precision(f16, 16);
  H5Tset_size(f16, 2);
  H5Tset_ebias(f16, 15);
  static unsigned char zeros9[9];
  static double one = 1;
  const replace_case tc[] = {
      {"f64 for f32", "/model/layer/w", H5T_IEEE_F64LE, 2, {4, 6}, d24, H5T_NATIVE_DOUBLE, false, LT_ERR_DTYPE,
       "dataset /model/layer/w is f64 (float, 8 bytes, little-endian) but the model's 'layer.w' is f32"},
      {"big-endian f32", "/model/layer/w", H5T_IEEE_F32BE, 2, {4, 6}, ones24, H5T_NATIVE_FLOAT, false, LT_ERR_DTYPE,
       "float, 4 bytes, big-endian"},
      {"i32 for f32", "/model/layer/w", H5T_STD_I32LE, 2, {4, 6}, NULL, 0, false, LT_ERR_DTYPE,
       "i32 (signed integer, 4 bytes"},
      {"f16 for f32", "/model/layer/w", f16, 2, {4, 6}, NULL, 0, false, LT_ERR_DTYPE, "float, 2 bytes"},
      {"u8 for bool", "/model/mask", H5T_STD_U8LE, 2, {3, 3}, zeros9, H5T_NATIVE_UCHAR, false, LT_ERR_DTYPE,
       "unsigned integer, 1 bytes"},
      {"f64 for i64", "/model/count", H5T_IEEE_F64LE, 0, {0}, &one, H5T_NATIVE_DOUBLE, false, LT_ERR_DTYPE,
       "the model's 'count' is i64"},
  };
  run_replace_cases(tc, N_OF(tc));
  H5Tclose(f16);
  end_cases("wrong_dtypes");
}
END_TEST

START_TEST(wrong_shapes_and_huge_dims) {
  begin_cases();
  static float zeros28[28];
  static int64_t one = 1;
  const hsize_t T40 = 1ull << 40;
  const replace_case tc[] = {
      {"[4,7]", "/model/layer/w", H5T_IEEE_F32LE, 2, {4, 7}, zeros28, H5T_NATIVE_FLOAT, false, LT_ERR_SHAPE,
       "dataset /model/layer/w has shape [4,7] but the model's 'layer.w' is [4,6]"},
      {"rank 1", "/model/layer/w", H5T_IEEE_F32LE, 1, {24}, ones24, H5T_NATIVE_FLOAT, false, LT_ERR_SHAPE,
       "has shape [24] but"},
      {"rank 3", "/model/layer/w", H5T_IEEE_F32LE, 3, {4, 6, 1}, ones24, H5T_NATIVE_FLOAT, false, LT_ERR_SHAPE,
       "has shape [4,6,1] but"},
      {"scalar", "/model/layer/b", H5T_IEEE_F32LE, 0, {0}, ones24, H5T_NATIVE_FLOAT, false, LT_ERR_SHAPE,
       "has shape [] but the model's 'layer.b' is [4]"},
      {"rank 9", "/model/layer/b", H5T_IEEE_F32LE, 9, {1, 1, 1, 1, 1, 1, 1, 1, 4}, ones24, H5T_NATIVE_FLOAT, false,
       LT_ERR_SHAPE, "rank 9, more than LT_MAX_DIMS"},
      {"0-d as [1]", "/model/count", H5T_STD_I64LE, 1, {1}, &one, H5T_NATIVE_INT64, false, LT_ERR_SHAPE,
       "the model's 'count' is []"},
      {"2^120 elements", "/model/layer/w", H5T_IEEE_F32LE, 3, {T40, T40, T40}, NULL, 0, true, LT_ERR_OVERFLOW,
       "dims [1099511627776,1099511627776,1099511627776]: the element count overflows 64 bits"},
      /* 2^63 elements fit, 2^65 bytes do not */
      {"2^65 bytes", "/model/layer/w", H5T_IEEE_F32LE, 2, {1ull << 62, 2}, NULL, 0, true, LT_ERR_OVERFLOW,
       "the byte count overflows 64 bits"},
      {"256^8", "/model/layer/b", H5T_IEEE_F32LE, 8, {256, 256, 256, 256, 256, 256, 256, 256}, NULL, 0, true,
       LT_ERR_OVERFLOW, "the element count overflows 64 bits"},
      {"32 TiB", "/model/layer/w", H5T_IEEE_F32LE, 2, {1ull << 41, 4}, NULL, 0, true, LT_ERR_OVERFLOW, "over the cap"},
      /* 6 GiB of f32 in a file of a few KiB */
      {"6 GiB", "/model/layer/w", H5T_IEEE_F32LE, 2, {1ull << 28, 6}, NULL, 0, true, LT_ERR_OVERFLOW,
       "cannot be stored in a"},
  };
  run_replace_cases(tc, N_OF(tc));
  end_cases("wrong_shapes_and_huge_dims");
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
  begin_cases();
  const damage_case tc[] = {
      {"missing dataset", drop_b, LT_ERR_INVALID, "1 missing from the file (layer.b); 0 not in the model"},
      {"extra dataset", add_extra, LT_ERR_INVALID, "0 missing from the file; 1 not in the model (layer.extra)"},
      {"both", drop_and_add, LT_ERR_INVALID,
       "1 missing from the file (layer.b); 2 not in the model (head.bias, layer.extra)"},
      {"no /model", drop_model, LT_ERR_FORMAT, "no /model group"},
  };
  run_damage_cases(tc, N_OF(tc));
  /* Non-strict accepts them (and says so). */
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.non_strict = true;
  lt_ckpt_info *info;
  LT_OK_OR_FAIL(lt_ckpt_load_params(ckpt_path("d2.h5"), target, &o, &info));
  ck_assert_int_eq(info->n_missing, 1);
  ck_assert_str_eq(info->missing[0], "layer.b");
  ck_assert_int_eq(info->n_unexpected, 2);
  ck_assert_str_eq(info->unexpected[0], "head.bias");
  ck_assert_str_eq(info->unexpected[1], "layer.extra");
  ck_assert(!memcmp(lt_params_find(target, "layer.b")->data, before.data[2], before.bytes[2])); /* kept */
  lt_ckpt_info_free(info);
  end_cases("missing_and_extra");
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
static void version_next(hid_t f) { set_attr_int(f, "/", "format_version", LT_CKPT_FORMAT_VERSION + 1); }
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
/* A bool attribute (h5py's enum) holding the raw byte 7, and an enum that is
 * not a bool. */
static void enum_config(hid_t f, signed char raw, const char *true_name) {
  hid_t t = H5Tenum_create(H5T_STD_I8LE);
  signed char f0 = 0, t1 = 1;
  H5Tenum_insert(t, "FALSE", &f0);
  H5Tenum_insert(t, true_name, &t1);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate_by_name(f, "/model", "flag", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, &raw);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
}
static void bool7_config(hid_t f) { enum_config(f, 7, "TRUE"); }
static void color_config(hid_t f) { enum_config(f, 1, "RED"); }

START_TEST(wrong_format_version_and_config) {
  begin_cases();
  char newer[96];
  snprintf(newer, sizeof newer, "format version %d is newer than this library reads (%d)", LT_CKPT_FORMAT_VERSION + 1,
           LT_CKPT_FORMAT_VERSION);
  const damage_case tc[] = {
      {"newer version", version_next, LT_ERR_FORMAT, newer},
      {"version 0", version0, LT_ERR_FORMAT, "format version 0 is invalid"},
      {"version as string", version_str, LT_ERR_FORMAT, "'format_version' of / is not an integer"},
      {"other format", other_format, LT_ERR_FORMAT, "format is 'keras', not 'libtensor-checkpoint'"},
      {"no format", no_format, LT_ERR_FORMAT, "no 'format' attribute"},
      {"bad content", bad_content, LT_ERR_FORMAT, "content 'weights'"},
      {"array config", array_config, LT_ERR_FORMAT, "attribute 'layers' of /model is not a single value"},
      {"compound config", compound_config, LT_ERR_FORMAT, "unsupported type (compound"},
      {"bool config 7", bool7_config, LT_ERR_FORMAT, "bool attribute 'flag' of /model holds 7, not 0 or 1"},
      {"enum config", color_config, LT_ERR_FORMAT, "unsupported type (enum"},
  };
  run_damage_cases(tc, N_OF(tc));
  end_cases("wrong_format_version_and_config");
}
END_TEST

START_TEST(wrong_vocabulary_size) {
  setup_target();
  /* A checkpoint of the same architecture with a vocabulary of 200. */
  lt_params *big = make_model(200, 3);
  lt_ckpt_meta *c200 = config(200), *c100 = config(V);
  const char *p = ckpt_path("v200.h5");
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
  begin_cases();
  const damage_case tc[] = {
      {"NaN weight", nan_weight, LT_ERR_NUMERIC, "dataset /model/embed/weight holds NaN at flat index 3"},
      {"+inf weight", inf_weight, LT_ERR_NUMERIC, "/model/layer/w holds +inf at flat index 23"},
      {"-inf buffer", ninf_buffer, LT_ERR_NUMERIC, "/model/pe holds -inf at flat index 4"},
      {"bool 7", bad_bool, LT_ERR_FORMAT, "bool dataset /model/mask holds 7 at flat index 4"},
  };
  run_damage_cases(tc, N_OF(tc));
  /* allow_nonfinite accepts them. */
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.allow_nonfinite = true;
  LT_OK_OR_FAIL(lt_ckpt_load_params(ckpt_path("d0.h5"), target, &o, NULL));
  ck_assert(isnan(((float *)lt_params_find(target, "embed.weight")->data)[3]));
  LT_OK_OR_FAIL(lt_ckpt_load_params(ckpt_path("d1.h5"), target, &o, NULL));
  ck_assert(isinf(((float *)lt_params_find(target, "layer.w")->data)[23]));
  end_cases("nonfinite_and_bad_values");
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
  begin_cases();
  const damage_case tc[] = {
      {"soft link", soft_link, LT_ERR_FORMAT, "/model/layer/w is a soft link"},
      {"external link", external_link, LT_ERR_FORMAT, "/model/layer/w is a external link"},
      {"external storage", external_storage, LT_ERR_FORMAT, "keeps its data in external files"},
      {"virtual dataset", virtual_ds, LT_ERR_FORMAT, "is a virtual dataset"},
      {"shuffle", shuffle, LT_ERR_FORMAT, "uses filter 2: only deflate (1)"},
      {"fletcher32", fletcher, LT_ERR_FORMAT, "uses filter 3"},
      {"named datatype", named_type, LT_ERR_FORMAT, "/model/layer/ftype is a named datatype"},
      {"alias", alias, LT_ERR_FORMAT, "is linked more than once"},
      {"cycle", cycle, LT_ERR_FORMAT, "is linked more than once"},
      {"dot in a name", dotted, LT_ERR_FORMAT, "/model/layer/b.x: a name component contains '.'"},
      {"unwritten", unwritten, LT_ERR_FORMAT, "dataset /model/layer/w was never (fully) written"},
      {"partly written", partly_written, LT_ERR_FORMAT, "was never (fully) written"},
      {"top-level junk", top_level_junk, LT_ERR_FORMAT, "unexpected object /junk"},
      {"model dataset", model_is_dataset, LT_ERR_FORMAT, "/model is not a group"},
      {"deep nesting", deep, LT_ERR_FORMAT, "nested deeper than 64"},
  };
  run_damage_cases(tc, N_OF(tc));
  /* Deflate alone (ours) is fine, chunked or not. */
  LT_OK_OR_FAIL(lt_ckpt_load_params(damaged("lg.h5", deflate_ok), target, NULL, NULL));
  LT_ASSERT_VALUES(lt_params_find(target, "layer.w"), 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                   1, 1, 1, 1);
  end_cases("links_storage_filters_objects");
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
static void param_step(hid_t f, const void *v, hid_t type, hid_t mem, int rank) {
  hsize_t d[1] = {1};
  replace(f, "/optim/layer/w/step", type, rank, d, v, mem, H5P_DEFAULT);
}
static const int64_t minus2 = -2;
static const float five_f = 5;
static void param_step_negative(hid_t f) { param_step(f, &minus2, H5T_STD_I64LE, H5T_NATIVE_INT64, 0); }
static void param_step_f32(hid_t f) { param_step(f, &five_f, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 0); }
static void param_step_1d(hid_t f) { param_step(f, &minus2, H5T_STD_I64LE, H5T_NATIVE_INT64, 1); }
static void param_step_dropped(hid_t f) { H5Ldelete(f, "/optim/layer/b/step", H5P_DEFAULT); }
static void param_sq_dropped(hid_t f) { H5Ldelete(f, "/optim/embed/weight/exp_avg_sq", H5P_DEFAULT); }
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
  LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("good.h5"), &st, NULL, extra, NULL));
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
      {"t6.h5", optim_step, LT_ERR_FORMAT, "/optim attribute 'step' (the optimizer's step count) is -3, outside [0, 9007199254740992]"},
      {"ta.h5", param_step_negative, LT_ERR_FORMAT, "dataset /optim/layer/w/step: step -2 is outside [0, 9007199254740992]"},
      {"tb.h5", param_step_f32, LT_ERR_DTYPE, "dataset /optim/layer/w/step is f32"},
      {"tc.h5", param_step_1d, LT_ERR_SHAPE, "/optim/layer/w/step has shape [1] but the model's 'layer.w.step' is []"},
      {"td.h5", param_step_dropped, LT_ERR_FORMAT, "the optimizer state of 'layer.b' lacks 'step' (format version 2"},
      {"te.h5", param_sq_dropped, LT_ERR_FORMAT, "the optimizer state of 'embed.weight' lacks 'exp_avg_sq'"},
      {"t7.h5", sched_step, LT_ERR_FORMAT, "/schedule attribute 'step' is -1, outside [0, 9007199254740992]"},
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
  LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("good.h5"), &ts, NULL, NULL));
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
  tcase_add_checked_fixture(tc, ckpt_tmpdir_make, ckpt_tmpdir_remove);
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
