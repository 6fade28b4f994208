/*
 * tests/test_hostile.c: files made by an attacker (issue 13). Each case is a
 * file that passes the integrity header (resealed with lt_ckpt_seal after
 * the damage), or an input that is not a regular file, and must be refused
 * at once with a message naming the fault, without a hang (alarm() guards
 * every case), without a large allocation (getrusage's peak RSS), and with
 * the target model and optimizer unchanged:
 *   - optimizer and schedule state out of range (INT64_MAX steps, a
 *     negative second moment, NaN moments, NaN learning rates);
 *   - a configuration that claims 1,000 layers (or a huge d_ff) over a
 *     small file, and a model over the memory cap;
 *   - /model values outside the configuration's range table (norm_eps 0 or
 *     1e308, rope_base 0.5, max_len 2^21, d_model 2^17) and a sinusoidal
 *     position table larger than LT_TF_MAX_POS_TABLE;
 *   - a FIFO, /dev/zero and a directory as checkpoint, text, TSV, IDX and
 *     BPE training input, and a FIFO under a checkpoint's name in a run
 *     directory (newest checkpoint, rotation);
 *   - HDF5 without object header checksums (h5py's default layout, written
 *     here with H5F_LIBVER_EARLIEST) refused with the rewrite hint and
 *     accepted with allow_unchecksummed; one object header whose signature
 *     says version 1 in a libtensor file;
 *   - an /extra blob whose dataspace inflates far past what a blob may hold.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h" /* lt__ckpt_seal_buffer */
#include "tensor/byteorder_internal.h"
#include "datasets/datasets.h"
#include "models/transformer/config.h"
#include "nn/nn.h"
#include "test_util.h"
#include "util_ckpt.h"

/* ---- guards ----------------------------------------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Peak resident memory of this process, bytes. */
static long long peak_rss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (long long)ru.ru_maxrss * 1024;
}

/* A refused load: fast, and the peak RSS grew by less than 64 MiB. */
typedef struct guard {
  double t0;
  long long rss0;
} guard;
static guard guard_begin(void) {
  alarm(20); /* a hang fails the test instead of blocking ctest */
  return (guard){now_s(), peak_rss()};
}
static void guard_end(guard g, const char *what) {
  alarm(0);
  double dt = now_s() - g.t0;
  long long grew = peak_rss() - g.rss0;
  ck_assert_msg(dt < 1.0, "%s: took %.2f s", what, dt);
  ck_assert_msg(grew < (64ll << 20), "%s: peak RSS grew by %lld bytes", what, grew);
}

#define EXPECT_STATUS(expr, st, substr, what)                                                              \
  do {                                                                                                     \
    lt_status s_ = (expr);                                                                                 \
    ck_assert_msg(s_ == (st), "%s: %s returned %s, expected %s (message: %s)", (what), #expr,              \
                  lt_status_name(s_), lt_status_name(st), lt_last_error());                                \
    ck_assert_msg(strstr(lt_last_error(), (substr)), "%s: message \"%s\" lacks \"%s\"", (what), lt_last_error(), \
                  (substr));                                                                               \
  } while (0)

/* ---- HDF5 damage, then reseal -------------------------------------------------- */

static hid_t open_rw(const char *p) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_file_locking(fapl, false, true);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST); /* checksummed objects, as libtensor writes */
  hid_t f = H5Fopen(p, H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  ck_assert_msg(f >= 0, "cannot open %s", p);
  return f;
}

static void close_seal(hid_t f, const char *p) {
  ck_assert_int_ge(H5Fclose(f), 0);
  LT_OK_OR_FAIL(lt_ckpt_seal(p));
}

static void copy_file(const char *from, const char *to) {
  size_t n;
  unsigned char *b = ckpt_read_file(from, &n);
  ckpt_write_file(to, b, n);
  free(b);
}

/* Replaces attribute name of obj by a scalar of type t holding *v. */
static void set_attr(hid_t f, const char *obj, const char *name, hid_t t, hid_t mt, const void *v) {
  if (H5Aexists_by_name(f, obj, name, H5P_DEFAULT) > 0) H5Adelete_by_name(f, obj, name, H5P_DEFAULT);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate_by_name(f, obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert_msg(a >= 0, "cannot create attribute %s of %s", name, obj);
  ck_assert_int_ge(H5Awrite(a, mt, v), 0);
  H5Aclose(a);
  H5Sclose(sp);
}
static void set_attr_i64(hid_t f, const char *obj, const char *name, int64_t v) {
  set_attr(f, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
static void set_attr_f64(hid_t f, const char *obj, const char *name, double v) {
  set_attr(f, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* Element i of an f32 dataset := v (the dataset is small). */
static void poke_f32(hid_t f, const char *path, int64_t i, float v) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  ck_assert_msg(d >= 0, "no dataset %s", path);
  hid_t sp = H5Dget_space(d);
  hssize_t n = H5Sget_simple_extent_npoints(sp);
  float *buf = malloc((size_t)n * sizeof *buf);
  ck_assert_int_ge(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
  buf[i] = v;
  ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
  free(buf);
  H5Sclose(sp);
  H5Dclose(d);
}

static void poke_i64(hid_t f, const char *path, int64_t v) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  ck_assert_msg(d >= 0, "no dataset %s", path);
  ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0);
  H5Dclose(d);
}

/* ---- a small model ------------------------------------------------------------ */

static lt_params *small_model(uint64_t seed) {
  lt_params *p = lt_params_new();
  lt_generator *g = lt_generator_new(seed);
  LT_OK_OR_FAIL(lt_params_add(p, "layer.w", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4, 6)), 0));
  LT_OK_OR_FAIL(lt_params_add(p, "layer.b", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4)), 0));
  lt_generator_free(g);
  return p;
}

static bool same_values(const lt_params *a, const lt_params *b) {
  for (int i = 0; i < lt_params_count(a); i++) {
    const lt_tensor *x = lt_params_at(a, i)->value, *y = lt_params_at(b, i)->value;
    if (memcmp(x->data, y->data, (size_t)x->numel * lt_dtype_size(x->dtype))) return false;
  }
  return true;
}

/* ======================================================================== */
/* Optimizer and schedule state                                             */
/* ======================================================================== */

typedef void (*damage_fn)(hid_t f);
static void step_max(hid_t f) { poke_i64(f, "/optim/layer/w/step", INT64_MAX); }
static void count_max(hid_t f) { set_attr_i64(f, "/optim", "step", INT64_MAX); }
static void sq_negative(hid_t f) { poke_f32(f, "/optim/layer/w/exp_avg_sq", 3, -1.0f); }
static void avg_nan(hid_t f) { poke_f32(f, "/optim/layer/b/exp_avg", 1, NAN); }
static void avg_inf(hid_t f) { poke_f32(f, "/optim/layer/b/exp_avg", 0, -INFINITY); }
static void lr_nan(hid_t f) { set_attr_f64(f, "/optim", "lr", NAN); }
static void sched_lr_nan(hid_t f) { set_attr_f64(f, "/schedule", "base_lr", NAN); }
static void sched_warmup(hid_t f) { set_attr_i64(f, "/schedule", "warmup", -5); }
static void sched_step_max(hid_t f) { set_attr_i64(f, "/schedule", "step", INT64_MAX); }
static void sched_step_size(hid_t f) { set_attr_i64(f, "/schedule", "step_size", 0); }

START_TEST(optimizer_state_out_of_range) {
  char good[512];
  snprintf(good, sizeof good, "%s", ckpt_path("train.h5"));
  lt_params *src = small_model(1);
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *o = lt_optimizer_new(src, &cfg);
  LT_OK_OR_FAIL(lt_optimizer_set_step_count(o, 5));
  lt_schedule sched = {.kind = LT_SCHED_STEP, .base_lr = 0.1, .gamma = 0.5, .step_size = 10};
  lt_train_state st = {.params = src, .optim = o, .optim_config = &cfg, .schedule = &sched, .step = 5};
  LT_OK_OR_FAIL(lt_ckpt_save_training(good, &st, NULL, NULL, NULL));

  lt_params *dst = small_model(2), *ref = small_model(2);
  lt_optimizer *to = lt_optimizer_new(dst, &cfg);
  lt_schedule tsched = {.kind = LT_SCHED_CONSTANT, .base_lr = 0.5};
  struct {
    damage_fn fn;
    bool allow_nonfinite;
    lt_status st;
    const char *want;
  } tc[] = {
      {step_max, false, LT_ERR_FORMAT,
       "dataset /optim/layer/w/step: step 9223372036854775807 is outside [0, 9007199254740992]"},
      {count_max, false, LT_ERR_FORMAT,
       "/optim attribute 'step' (the optimizer's step count) is 9223372036854775807, outside [0, 9007199254740992]"},
      {sq_negative, false, LT_ERR_FORMAT,
       "dataset /optim/layer/w/exp_avg_sq holds -1 at flat index 3: exp_avg_sq (a second moment) must be in [0, inf)"},
      {avg_nan, false, LT_ERR_NUMERIC, "dataset /optim/layer/b/exp_avg holds NaN at flat index 1: exp_avg must be finite"},
      {avg_nan, true, LT_ERR_NUMERIC, "dataset /optim/layer/b/exp_avg holds NaN at flat index 1"},
      {avg_inf, true, LT_ERR_NUMERIC, "dataset /optim/layer/b/exp_avg holds -inf at flat index 0"},
      {lr_nan, false, LT_ERR_FORMAT, "/optim attribute 'lr' is nan, outside [0, inf)"},
      {sched_lr_nan, false, LT_ERR_FORMAT, "/schedule attribute 'base_lr' is nan, outside [0, inf]"},
      {sched_warmup, false, LT_ERR_FORMAT, "/schedule attribute 'warmup' is -5, outside [0, 9007199254740992]"},
      {sched_step_max, false, LT_ERR_FORMAT, "/schedule attribute 'step' is 9223372036854775807, outside [0,"},
      {sched_step_size, false, LT_ERR_FORMAT, "/schedule attribute 'step_size' is 0, outside [1, 9007199254740992] for "
                                              "schedule 'step'"},
  };
  int n = (int)(sizeof tc / sizeof *tc);
  for (int i = 0; i < n; i++) {
    char name[32], what[64];
    snprintf(name, sizeof name, "opt%d.h5", i);
    snprintf(what, sizeof what, "optimizer case %d", i);
    char p[512];
  snprintf(p, sizeof p, "%s", ckpt_path(name));
    copy_file(good, p);
    hid_t f = open_rw(p);
    tc[i].fn(f);
    close_seal(f, p);
    lt_train_state ts = {.params = dst, .optim = to, .optim_config = &cfg, .schedule = &tsched, .step = 77};
    lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
    lo.allow_nonfinite = tc[i].allow_nonfinite;
    guard g = guard_begin();
    EXPECT_STATUS(lt_ckpt_load_training(p, &ts, &lo, NULL), tc[i].st, tc[i].want, what);
    guard_end(g, what);
    ck_assert_msg(same_values(dst, ref), "%s: the model changed", what);
    ck_assert_int_eq(lt_optimizer_step_count(to), 0);
    ck_assert_ptr_null(lt_optimizer_state(to, "layer.w", "exp_avg"));
    ck_assert_int_eq(ts.step, 77);
    ck_assert(tsched.kind == LT_SCHED_CONSTANT && tsched.base_lr == 0.5);
  }
  /* The undamaged file loads. */
  lt_train_state ts = {.params = dst, .optim = to, .optim_config = &cfg, .schedule = &tsched, .step = 77};
  LT_OK_OR_FAIL(lt_ckpt_load_training(good, &ts, NULL, NULL));
  ck_assert_int_eq(lt_optimizer_step_count(to), 5);
  ck_assert_int_eq(ts.step, 5);
  /* The optimizer refuses such counts directly as well. */
  LT_EXPECT_ERR(lt_optimizer_set_step_count(to, INT64_MAX), LT_ERR_INVALID, "outside [0, 9007199254740992]");
  LT_EXPECT_ERR(lt_optimizer_reset_state(to, LT_OPTIM_MAX_STEP + 1, 0, NULL), LT_ERR_INVALID, "LT_OPTIM_MAX_STEP");
  printf("hostile: optimizer_state_out_of_range: %d cases passed\n", n);
  lt_optimizer_free(o);
  lt_optimizer_free(to);
  lt_params_free(src);
  lt_params_free(dst);
  lt_params_free(ref);
}
END_TEST

/* ======================================================================== */
/* Size before building                                                     */
/* ======================================================================== */

/* What generate and train --resume do before building: configuration from
 * the file, its size, compared with the file's tensors and the cap. */
static lt_status size_check(const char *p, uint64_t cap) {
  lt_params *empty = lt_params_new();
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true;
  lt_ckpt_info *info = NULL;
  lt_status s = lt_ckpt_load_params(p, empty, &lo, &info);
  lt_tf_config cfg;
  int64_t n = 0;
  size_t bytes = 0;
  if (!s) s = lt_tf_config_from_meta(info->config, &cfg);
  if (!s) s = lt_tf_config_size(&cfg, &n, &bytes);
  if (!s) s = lt_ckpt_check_model_size(info, p, n, bytes, cap);
  lt_ckpt_info_free(info);
  lt_params_free(empty);
  return s;
}

START_TEST(config_larger_than_file) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.n_dec_layers = 1;
  c.d_ff = 16;
  c.max_len = 8;
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = lt_transformer_new(&c, g);
  ck_assert_ptr_nonnull(m);
  lt_ckpt_meta *meta = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
  char good[512];
  snprintf(good, sizeof good, "%s", ckpt_path("tf.h5"));
  LT_OK_OR_FAIL(lt_ckpt_save_params(good, lt_transformer_params(m), meta, NULL));
  int64_t n;
  size_t bytes;
  LT_OK_OR_FAIL(lt_tf_config_size(&c, &n, &bytes));
  /* The good file passes, and its totals are the model's. */
  LT_OK_OR_FAIL(size_check(good, 0));
  lt_params *empty = lt_params_new();
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true;
  lt_ckpt_info *info;
  LT_OK_OR_FAIL(lt_ckpt_load_params(good, empty, &lo, &info));
  ck_assert_int_eq(info->model_elements, n);
  ck_assert_int_eq(info->model_tensors, lt_params_count(lt_transformer_params(m)));
  ck_assert_uint_eq(info->model_bytes, (uint64_t)n * 4);
  lt_ckpt_info_free(info);
  lt_params_free(empty);

  struct {
    const char *key;
    int64_t v;
    const char *want;
  } tc[] = {
      {"n_dec_layers", 1000, "its configuration describes a model of "},
      {"d_ff", (int64_t)1 << 20, "its configuration describes a model of "},
      {"max_len", (int64_t)1 << 20, "its configuration describes a model of "},
  };
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "tf%d.h5", i);
    char p[512];
  snprintf(p, sizeof p, "%s", ckpt_path(name));
    copy_file(good, p);
    hid_t f = open_rw(p);
    set_attr_i64(f, "/model", tc[i].key, tc[i].v);
    close_seal(f, p);
    guard gd = guard_begin();
    EXPECT_STATUS(size_check(p, 0), LT_ERR_FORMAT, tc[i].want, tc[i].key);
    guard_end(gd, tc[i].key);
    ck_assert_msg(strstr(lt_last_error(), "refused before building the model"), "%s", lt_last_error());
  }
  /* A model over the memory cap (the file is right): refused too. */
  EXPECT_STATUS(size_check(good, bytes - 1), LT_ERR_NOMEM, "more than the memory cap", "cap");
  LT_OK_OR_FAIL(size_check(good, bytes));
  /* The loader's own cap: tensors summed before anything is allocated. */
  lt_params *q = lt_transformer_params(m);
  lo = LT_CKPT_LOAD_DEFAULTS;
  lo.max_bytes = bytes / 2;
  EXPECT_STATUS(lt_ckpt_load_params(good, q, &lo, NULL), LT_ERR_NOMEM, "memory cap", "load cap");
  lo.max_bytes = bytes;
  LT_OK_OR_FAIL(lt_ckpt_load_params(good, q, &lo, NULL));
  ck_assert_uint_gt(lt_ckpt_default_memory_cap(), 1u << 20);
  lt_ckpt_meta_free(meta);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* Not regular files                                                        */
/* ======================================================================== */

/* Values of /model that the flags refuse, from a file: norm_eps 0 (the
 * norms divide by sqrt(var + eps)), and a sinusoidal model whose max_len
 * asks for a position table that the file does not hold (it is computed at
 * build: 2^20 x 32 values from a file of a few KB took seconds and hundreds of
 * MB); each refused at once, naming the field, before the model is built. */
START_TEST(config_values_from_file) {
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER); /* sinusoidal positions */
  c.vocab_size = 16, c.d_model = 32, c.n_heads = 2, c.n_kv_heads = 2, c.n_enc_layers = c.n_dec_layers = 1;
  c.d_ff = 16, c.max_len = 8;
  lt_generator *g = lt_generator_new(1);
  lt_transformer *m = lt_transformer_new(&c, g);
  ck_assert_ptr_nonnull(m);
  lt_ckpt_meta *meta = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
  char good[512], p[512];
  snprintf(good, sizeof good, "%s", ckpt_path("sin.h5"));
  snprintf(p, sizeof p, "%s", ckpt_path("sin_bad.h5"));
  LT_OK_OR_FAIL(lt_ckpt_save_params(good, lt_transformer_params(m), meta, NULL));
  LT_OK_OR_FAIL(size_check(good, 0));
  static const struct {
    const char *key;
    double v;
    bool is_int;
    const char *want;
  } tc[] = {
      {"norm_eps", 0, false, "norm_eps 0: must be in (0, 1]"},
      {"norm_eps", 1e308, false, "norm_eps 1e+308: must be in (0, 1]"},
      {"rope_base", 0.5, false, "rope_base 0.5: must be in (1, 1000000000]"},
      {"max_len", 1 << 20, true, "the sinusoidal position table, computed when the model is built"},
      {"max_len", 1 << 21, true, "max_len 2097152: must be in [1, 1048576]"},
      {"d_model", 1 << 17, true, "d_model 131072: must be in [1, 65536]"},
  };
  for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) {
    copy_file(good, p);
    hid_t f = open_rw(p);
    if (tc[i].is_int) set_attr_i64(f, "/model", tc[i].key, (int64_t)tc[i].v);
    else set_attr_f64(f, "/model", tc[i].key, tc[i].v);
    close_seal(f, p);
    guard gd = guard_begin();
    EXPECT_STATUS(size_check(p, 0), LT_ERR_INVALID, tc[i].want, tc[i].key);
    guard_end(gd, tc[i].key);
  }
  lt_ckpt_meta_free(meta);
  lt_transformer_free(m);
  lt_generator_free(g);
  printf("hostile: config_values_from_file: %zu cases refused\n", sizeof tc / sizeof tc[0]);
}
END_TEST

START_TEST(not_regular_files) {
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s", ckpt_path("pipe"));
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", ckpt_path("adir"));
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  struct {
    const char *path, *kind;
  } in[] = {{fifo, "a FIFO (named pipe)"}, {"/dev/zero", "a character device"}, {dir, "a directory"}};
  lt_params *m = small_model(1);
  for (int i = 0; i < 3; i++) {
    const char *p = in[i].path, *k = in[i].kind;
    guard g = guard_begin();
    EXPECT_STATUS(lt_ckpt_load_params(p, m, NULL, NULL), LT_ERR_FORMAT, k, "checkpoint");
    ck_assert(strstr(lt_last_error(), p) && strstr(lt_last_error(), "not a regular file"));
    EXPECT_STATUS(lt_ckpt_verify(p), LT_ERR_FORMAT, k, "verify");
    char *text = NULL;
    size_t len;
    EXPECT_STATUS(lt_text_file_read(p, &text, &len), LT_ERR_IO, k, "text");
    ck_assert_ptr_null(text);
    int64_t skipped = 0;
    ck_assert_ptr_null(lt_text_pairs_load_tsv(p, NULL, &skipped));
    ck_assert_msg(lt_last_status() == LT_ERR_IO && strstr(lt_last_error(), k), "tsv: %s", lt_last_error());
    ck_assert_ptr_null(lt_idx_load(p, LT_DTYPE_F32));
    ck_assert_msg(lt_last_status() == LT_ERR_IO && strstr(lt_last_error(), k), "idx: %s", lt_last_error());
    lt_bpe_opts bo = LT_BPE_DEFAULTS;
    ck_assert_ptr_null(lt_tokenizer_train_bpe_file(p, &bo));
    ck_assert_msg(lt_last_status() == LT_ERR_IO && strstr(lt_last_error(), k), "bpe: %s", lt_last_error());
    guard_end(g, p);
  }
  /* A FIFO (and a directory) under a checkpoint's name in a run directory:
   * never taken as the newest checkpoint, never removed by rotation. */
  char run[600], path[700];
  snprintf(run, sizeof run, "%s", ckpt_path("run"));
  ck_assert_int_eq(mkdir(run, 0700), 0);
  LT_OK_OR_FAIL(lt_ckpt_step_path(path, sizeof path, run, "ckpt", 3));
  LT_OK_OR_FAIL(lt_ckpt_save_params(path, m, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_step_path(path, sizeof path, run, "ckpt", 7));
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  LT_OK_OR_FAIL(lt_ckpt_step_path(path, sizeof path, run, "ckpt", 9));
  ck_assert_int_eq(mkdir(path, 0700), 0);
  guard g = guard_begin();
  for (int verify = 0; verify < 2; verify++) {
    int64_t step;
    char latest[700];
    LT_OK_OR_FAIL(lt_ckpt_latest(run, "ckpt", verify, &step, latest, sizeof latest));
    ck_assert_int_eq(step, 3);
  }
  LT_OK_OR_FAIL(lt_ckpt_rotate(run, "ckpt", 1));
  guard_end(g, "run directory");
  struct stat sb;
  LT_OK_OR_FAIL(lt_ckpt_step_path(path, sizeof path, run, "ckpt", 7));
  ck_assert(stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
  LT_OK_OR_FAIL(lt_ckpt_step_path(path, sizeof path, run, "ckpt", 3));
  ck_assert(stat(path, &sb) == 0 && S_ISREG(sb.st_mode));
  lt_params_free(m);
}
END_TEST

/* ======================================================================== */
/* HDF5 without object header checksums                                     */
/* ======================================================================== */

START_TEST(unchecksummed_layouts) {
  lt_params *src = small_model(1), *dst = small_model(2), *ref = small_model(2);
  char p[512];
  snprintf(p, sizeof p, "%s", ckpt_path("h5py.h5"));
  ckpt_write_h5py(p, src, false);
  LT_OK_OR_FAIL(lt_ckpt_seal(p));
  guard g = guard_begin();
  EXPECT_STATUS(lt_ckpt_load_params(p, dst, NULL, NULL), LT_ERR_FORMAT,
                "version-0 superblock and unchecksummed object headers", "h5py default");
  guard_end(g, "h5py default");
  ck_assert_msg(strstr(lt_last_error(), "h5repack --latest") && strstr(lt_last_error(), "libver='latest'") &&
                    strstr(lt_last_error(), "allow_unchecksummed"),
                "no rewrite hint: %s", lt_last_error());
  ck_assert(same_values(dst, ref));
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.allow_unchecksummed = true;
  LT_OK_OR_FAIL(lt_ckpt_load_params(p, dst, &lo, NULL));
  ck_assert(same_values(dst, src));

  /* One object header of a libtensor file whose signature is replaced by a
   * version-1 header's first bytes: refused before HDF5 reads it. */
  char q[512];
  snprintf(q, sizeof q, "%s", ckpt_path("v1obj.h5"));
  LT_OK_OR_FAIL(lt_ckpt_save_params(q, src, NULL, NULL));
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_file_locking(fapl, false, true);
  hid_t f = H5Fopen(q, H5F_ACC_RDONLY, fapl);
  H5O_info_t oi;
  ck_assert_int_ge(H5Oget_info_by_name2(f, "/model/layer/w", &oi, H5O_INFO_BASIC, H5P_DEFAULT), 0);
  H5Fclose(f);
  H5Pclose(fapl);
  size_t n;
  unsigned char *b = ckpt_read_file(q, &n);
  uint64_t base = lt__get_le64(b + 512 + 12), off = base + (uint64_t)oi.addr;
  ck_assert_msg(off + 5 <= n && !memcmp(b + off, "OHDR", 4), "no OHDR at %llu", (unsigned long long)off);
  b[off] = 1; /* version 1 */
  lt__ckpt_seal_buffer(b, n);
  ckpt_write_file(q, b, n);
  free(b);
  g = guard_begin();
  EXPECT_STATUS(lt_ckpt_load_params(q, dst, NULL, NULL), LT_ERR_FORMAT,
                "/model/layer/w has a version-1 object header without a checksum", "v1 object");
  guard_end(g, "v1 object");
  lt_params_free(src);
  lt_params_free(dst);
  lt_params_free(ref);
}
END_TEST

/* ======================================================================== */
/* Blobs that inflate                                                       */
/* ======================================================================== */

/* /extra/<name>: a chunked, deflated uint8 dataset of n zeros (a few KB in
 * the file), written chunk by chunk. */
static void zero_blob(hid_t f, const char *path, hsize_t n) {
  if (H5Lexists(f, path, H5P_DEFAULT) > 0) ck_assert_int_ge(H5Ldelete(f, path, H5P_DEFAULT), 0);
  const hsize_t chunk = 1 << 20;
  hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  H5Pset_deflate(dcpl, 9);
  hid_t d = H5Dcreate2(f, path, H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ck_assert_int_ge(d, 0);
  unsigned char *z = calloc(chunk, 1);
  for (hsize_t at = 0; at < n; at += chunk) {
    hsize_t cnt = n - at < chunk ? n - at : chunk;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &cnt, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &cnt, NULL);
    ck_assert_int_ge(H5Dwrite(d, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, z), 0);
    H5Sclose(ms);
    H5Sclose(fs);
  }
  free(z);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
}

START_TEST(inflating_blobs) {
  lt_params *src = small_model(1);
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(extra, "tokenizer", "tok", 3));
  lt_train_state st = {.params = src};
  char good[512];
  snprintf(good, sizeof good, "%s", ckpt_path("blob.h5"));
  LT_OK_OR_FAIL(lt_ckpt_save_training(good, &st, NULL, extra, NULL));
  lt_params *dst = small_model(2), *ref = small_model(2);
  /* 300 MiB of zeros behind a file of a few hundred KB: over one blob's limit. */
  char p[512];
  snprintf(p, sizeof p, "%s", ckpt_path("blob300.h5"));
  copy_file(good, p);
  hid_t f = open_rw(p);
  zero_blob(f, "/extra/tokenizer", (hsize_t)300 << 20);
  close_seal(f, p);
  ck_assert_int_lt(ckpt_file_size(p), 4 << 20);
  lt_train_state ts = {.params = dst};
  guard g = guard_begin();
  EXPECT_STATUS(lt_ckpt_load_training(p, &ts, NULL, NULL), LT_ERR_OVERFLOW,
                "blob /extra/tokenizer holds 314572800 bytes, more than the 268435456 bytes allowed (one blob's limit)",
                "300 MiB blob");
  guard_end(g, "300 MiB blob");
  ck_assert(same_values(dst, ref));
  /* 2 MiB under a 1 MiB memory cap. */
  char q[512];
  snprintf(q, sizeof q, "%s", ckpt_path("blob2.h5"));
  copy_file(good, q);
  f = open_rw(q);
  zero_blob(f, "/extra/tokenizer", (hsize_t)2 << 20);
  close_seal(f, q);
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.max_bytes = 1 << 20;
  EXPECT_STATUS(lt_ckpt_load_training(q, &ts, &lo, NULL), LT_ERR_NOMEM, "under the memory cap", "2 MiB blob");
  lo.max_bytes = 4 << 20;
  lt_ckpt_info *info;
  LT_OK_OR_FAIL(lt_ckpt_load_training(q, &ts, &lo, &info));
  const void *data;
  size_t size;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_bytes(info->extra, "tokenizer", &data, &size));
  ck_assert_uint_eq(size, 2u << 20);
  lt_ckpt_info_free(info);
  lt_ckpt_meta_free(extra);
  lt_params_free(src);
  lt_params_free(dst);
  lt_params_free(ref);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hostile");
  TCase *tc = tcase_create("hostile");
  tcase_add_checked_fixture(tc, ckpt_tmpdir_make, ckpt_tmpdir_remove);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, optimizer_state_out_of_range);
  tcase_add_test(tc, config_larger_than_file);
  tcase_add_test(tc, config_values_from_file);
  tcase_add_test(tc, not_regular_files);
  tcase_add_test(tc, unchecksummed_layouts);
  tcase_add_test(tc, inflating_blobs);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
