/*
 * tests/test_checkpoint.c: checkpoints that work: save -> load round-trips
 * every byte of parameters, buffers (every dtype, 0-d and zero-size tensors),
 * optimizer state (each parameter's own step included), generator states,
 * schedule and extra values; a resume with parameters that some steps skip
 * is bit-exact; format version 1 files still load; f64 models keep their
 * dtype. The file lists the PyTorch names and shapes when read with plain
 * HDF5 calls (H5Ovisit), independent of our loader: for a spec'd model and
 * for the Transformers whose parameters PyTorch itself listed
 * (fixtures/transformer.bin); layouts, filters and attributes too; h5dump
 * reads it. Strict and non-strict loading (what was skipped is listed).
 * Durability: temporaries, rotation, latest, a write failure (file size
 * limit) and a full disk (a private tmpfs) leave the previous checkpoint
 * intact.
 *
 * Crafted bad files are in test_checkpoint_badfiles.c, the SIGKILL trials in
 * test_checkpoint_kill.c.
 */
#define _GNU_SOURCE /* flock, unshare */
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "nn/nn.h"
#include "models/transformer/transformer.h"
#include "test_util.h"
#include "util_ckpt.h"
#include "util_fixtures.h"

/* ---- helpers ------------------------------------------------------------- */

/* The state_dict of the equivalent PyTorch model (names and shapes), and the
 * dtype/flags we give each entry. */
typedef struct spec {
  const char *name;
  lt_dtype dtype;
  unsigned flags;
  int ndim;
  int64_t shape[4];
} spec;

enum { V = 50, C = 16, F = 32 };
static const spec model_spec[] = {
    {"embed.weight", LT_DTYPE_F32, LT_PARAM_NO_DECAY, 2, {V, C}},
    {"encoder.layers.0.self_attn.q_proj.weight", LT_DTYPE_F32, 0, 2, {C, C}},
    {"encoder.layers.0.self_attn.q_proj.bias", LT_DTYPE_F32, LT_PARAM_NO_DECAY, 1, {C}},
    {"encoder.layers.0.self_attn.k_proj.weight", LT_DTYPE_F32, 0, 2, {C, C}},
    {"encoder.layers.0.self_attn.v_proj.weight", LT_DTYPE_F32, 0, 2, {C, C}},
    {"encoder.layers.0.self_attn.out_proj.weight", LT_DTYPE_F32, 0, 2, {C, C}},
    {"encoder.layers.0.linear1.weight", LT_DTYPE_F32, 0, 2, {F, C}},
    {"encoder.layers.0.linear1.bias", LT_DTYPE_F32, LT_PARAM_NO_DECAY, 1, {F}},
    {"encoder.layers.0.linear2.weight", LT_DTYPE_F32, 0, 2, {C, F}},
    {"encoder.layers.0.norm1.weight", LT_DTYPE_F32, LT_PARAM_NO_DECAY, 1, {C}},
    {"encoder.layers.0.norm1.bias", LT_DTYPE_F32, LT_PARAM_NO_DECAY, 1, {C}},
    {"encoder.layers.1.linear1.weight", LT_DTYPE_F64, 0, 2, {F, C}},
    {"lm_head.scale", LT_DTYPE_F32, 0, 0, {0}},                       /* 0-d */
    {"encoder.pe", LT_DTYPE_F64, LT_PARAM_BUFFER, 2, {8, C}},         /* f64 buffer */
    {"encoder.mask", LT_DTYPE_BOOL, LT_PARAM_BUFFER, 2, {8, 8}},      /* bool buffer */
    {"encoder.num_batches_tracked", LT_DTYPE_I64, LT_PARAM_BUFFER, 0, {0}},
    {"encoder.ids", LT_DTYPE_I32, LT_PARAM_BUFFER, 1, {5}},
    {"encoder.empty", LT_DTYPE_F32, LT_PARAM_BUFFER, 2, {0, 4}},      /* zero-size */
    {"big.weight", LT_DTYPE_F32, 0, 2, {256, 64}},                    /* compressible (see fill) */
};
#define N_SPEC ((int)(sizeof model_spec / sizeof *model_spec))

/* A model with the spec's tensors, filled from seed (zeros if seed is 0). */
static lt_params *make_model(uint64_t seed) {
  lt_params *p = lt_params_new();
  ck_assert_ptr_nonnull(p);
  lt_generator *g = lt_generator_new(seed);
  for (int i = 0; i < N_SPEC; i++) {
    const spec *s = &model_spec[i];
    lt_tensor *t;
    if (!seed) t = lt_zeros(s->dtype, s->ndim, s->shape);
    else if (lt_dtype_is_float(s->dtype)) t = lt_randn(g, s->dtype, s->ndim, s->shape);
    else if (s->dtype == LT_DTYPE_BOOL) t = lt_bernoulli(g, s->dtype, s->ndim, s->shape, 0.5);
    else t = lt_full(s->dtype, s->ndim, s->shape, (double)(seed * 7 + (uint64_t)i));
    LT_NN(t);
    if (seed && !strcmp(s->name, "big.weight")) { /* rows of repeated values: deflate pays */
      float *f = t->data;
      for (int64_t k = 0; k < t->numel; k++) f[k] = (float)((k / 64) % 5);
    }
    LT_OK_OR_FAIL(lt_params_add(p, s->name, t, s->flags));
  }
  lt_generator_free(g);
  return p;
}

static void assert_same_bytes(const lt_params *a, const lt_params *b) {
  ck_assert_int_eq(lt_params_count(a), lt_params_count(b));
  for (int i = 0; i < lt_params_count(a); i++) {
    const lt_param *x = lt_params_at(a, i);
    lt_tensor *y = lt_params_find(b, x->name);
    ck_assert_msg(y != NULL, "%s missing", x->name);
    ck_assert_int_eq(x->value->dtype, y->dtype);
    ck_assert_int_eq(x->value->numel, y->numel);
    ck_assert_msg(!memcmp(x->value->data, y->data, (size_t)x->value->numel * lt_dtype_size(y->dtype)),
                  "%s differs", x->name);
  }
}

static lt_ckpt_meta *make_config(int64_t vocab) {
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "vocab_size", vocab));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "d_model", C));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_double(m, "dropout", 0.1));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(m, "activation", "gelu"));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(m, "empty", ""));
  return m;
}

/* ---- meta ---------------------------------------------------------------- */

START_TEST(meta_basics) {
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "a", 5));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_double(m, "b", 2.5));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(m, "c", "hello"));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(m, "d", "\0\1\2", 3));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(m, "a", 6)); /* replaces */
  ck_assert_int_eq(lt_ckpt_meta_count(m), 4);
  ck_assert_str_eq(lt_ckpt_meta_key(m, 2), "c");
  ck_assert_ptr_null(lt_ckpt_meta_key(m, 4));
  int64_t i;
  double d;
  const char *s;
  const void *b;
  size_t n;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(m, "a", &i));
  ck_assert_int_eq(i, 6);
  LT_OK_OR_FAIL(lt_ckpt_meta_get_double(m, "b", &d));
  ck_assert(d == 2.5);
  LT_OK_OR_FAIL(lt_ckpt_meta_get_string(m, "c", &s));
  ck_assert_str_eq(s, "hello");
  LT_OK_OR_FAIL(lt_ckpt_meta_get_bytes(m, "d", &b, &n));
  ck_assert_int_eq(n, 3);
  ck_assert(!memcmp(b, "\0\1\2", 3));
  LT_EXPECT_ERR(lt_ckpt_meta_get_int(m, "zz", &i), LT_ERR_INDEX, "no key 'zz'");
  LT_EXPECT_ERR(lt_ckpt_meta_get_int(m, "c", &i), LT_ERR_DTYPE, "holds a string");
  LT_EXPECT_ERR(lt_ckpt_meta_set_int(m, "a/b", 1), LT_ERR_INVALID, "contains '/'");
  LT_EXPECT_ERR(lt_ckpt_meta_set_int(m, "", 1), LT_ERR_INVALID, "1 to 255");
  LT_EXPECT_ERR(lt_ckpt_meta_set_int(m, "..", 1), LT_ERR_INVALID, "reserved");
  LT_EXPECT_ERR(lt_ckpt_meta_set_string(m, "x", NULL), LT_ERR_NULL, NULL);
  ck_assert_int_eq(lt_ckpt_meta_kind(m, "d"), LT_CKPT_BYTES);
  ck_assert_int_eq(lt_ckpt_meta_kind(m, "nope"), -1);
  lt_ckpt_meta_free(m);
  lt_ckpt_meta_free(NULL);
  lt_ckpt_info_free(NULL);
}
END_TEST

/* ---- parameters round trip ---------------------------------------------- */

START_TEST(params_roundtrip) {
  lt_params *a = make_model(1234), *b = make_model(0);
  lt_ckpt_meta *cfg = make_config(V);
  const char *p = ckpt_path("model.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, a, cfg, NULL));
  LT_OK_OR_FAIL(lt_ckpt_verify(p));
  lt_ckpt_info *info = NULL;
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.expect_config = cfg;
  LT_OK_OR_FAIL(lt_ckpt_load_params(p, b, &o, &info));
  assert_same_bytes(a, b);
  ck_assert_ptr_nonnull(info);
  ck_assert_int_eq(info->format_version, LT_CKPT_FORMAT_VERSION);
  ck_assert_str_eq(info->library_version, lt_version());
  ck_assert(!info->training);
  ck_assert_int_eq(info->n_missing, 0);
  ck_assert_int_eq(info->n_unexpected, 0);
  int64_t v;
  double d;
  const char *s;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->config, "vocab_size", &v));
  ck_assert_int_eq(v, V);
  LT_OK_OR_FAIL(lt_ckpt_meta_get_double(info->config, "dropout", &d));
  ck_assert(d == 0.1);
  LT_OK_OR_FAIL(lt_ckpt_meta_get_string(info->config, "activation", &s));
  ck_assert_str_eq(s, "gelu");
  LT_OK_OR_FAIL(lt_ckpt_meta_get_string(info->config, "empty", &s));
  ck_assert_str_eq(s, "");
  ck_assert_int_eq(lt_ckpt_meta_count(info->extra), 0);
  lt_ckpt_info_free(info);
  /* Loaded parameters still require grad; buffers do not. */
  ck_assert(lt_params_find(b, "embed.weight")->requires_grad);
  ck_assert(!lt_params_find(b, "encoder.mask")->requires_grad);
  /* No temporary left behind. */
  ck_assert_int_eq(ckpt_count_tmp_files(ckpt_tmpdir), 0);

  /* The uncompressed switch: same values, a bigger file here (big.weight compresses). */
  const char *pu = ckpt_path("model_raw.h5");
  lt_ckpt_save_opts so = LT_CKPT_SAVE_DEFAULTS;
  so.uncompressed = true;
  LT_OK_OR_FAIL(lt_ckpt_save_params(pu, a, cfg, &so));
  lt_params *c = make_model(0);
  LT_OK_OR_FAIL(lt_ckpt_load_params(pu, c, NULL, NULL));
  assert_same_bytes(a, c);
  ck_assert_msg(ckpt_file_size(pu) > ckpt_file_size(p) + 32 * 1024, "compressed %lld, raw %lld", (long long)ckpt_file_size(p),
                (long long)ckpt_file_size(pu));
  /* Overwriting an existing checkpoint works (rename over it). */
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, c, NULL, NULL));
  lt_params_free(a);
  lt_params_free(b);
  lt_params_free(c);
  lt_ckpt_meta_free(cfg);
}
END_TEST

/* Non-contiguous source tensors are saved by value; a scope being open does
 * not matter. */
START_TEST(params_noncontiguous_and_scope) {
  lt_params *a = lt_params_new(), *b = lt_params_new();
  lt_generator *g = lt_generator_new(5);
  lt_tensor *base = lt_randn(g, LT_DTYPE_F32, LT_SHAPE(6, 4));
  lt_tensor *tt = lt_transpose(base, 0, 1); /* [4, 6] view, not contiguous */
  ck_assert(!lt_is_contiguous(tt));
  LT_OK_OR_FAIL(lt_params_add(a, "w", lt_clone(tt), 0));
  /* A store tensor that is itself a transposed view: saved by value. */
  LT_OK_OR_FAIL(lt_params_add(a, "wt", lt_detach(tt), 0));
  LT_OK_OR_FAIL(lt_params_add(b, "w", lt_zeros(LT_DTYPE_F32, LT_SHAPE(4, 6)), 0));
  /* ... and loaded into a store tensor that is a transposed view. */
  lt_tensor *z = lt_zeros(LT_DTYPE_F32, LT_SHAPE(6, 4)), *zt = lt_transpose(z, 0, 1);
  LT_OK_OR_FAIL(lt_params_add(b, "wt", lt_detach(zt), 0));
  lt_tensor_free(zt);
  lt_tensor_free(z);
  ck_assert(!lt_is_contiguous(lt_params_find(b, "wt")));
  lt_scope *sc = lt_scope_begin();
  LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("nc.h5"), a, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_load_params(ckpt_path("nc.h5"), b, NULL, NULL));
  lt_scope_end(sc);
  ck_assert(lt_equal(lt_params_find(b, "w"), tt));
  ck_assert(lt_equal(lt_params_find(b, "wt"), tt));
  /* An expanded (stride-0) destination cannot be loaded into: refused before anything changes. */
  lt_params *c = lt_params_new();
  lt_tensor *row = lt_zeros(LT_DTYPE_F32, LT_SHAPE(1, 6)), *ex = lt_expand(row, LT_SHAPE(4, 6));
  LT_OK_OR_FAIL(lt_params_add(c, "wt", lt_full(LT_DTYPE_F32, LT_SHAPE(4, 6), 3.0), 0));
  LT_OK_OR_FAIL(lt_params_add(c, "w", lt_detach(ex), 0));
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  LT_EXPECT_ERR(lt_ckpt_load_params(ckpt_path("nc.h5"), c, &o, NULL), LT_ERR_INVALID, "stride-0");
  LT_ASSERT_VALUES(lt_params_find(c, "wt"), 0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3);
  lt_tensor_free(ex);
  lt_tensor_free(row);
  lt_params_free(c);
  lt_tensor_free(tt);
  lt_tensor_free(base);
  lt_generator_free(g);
  lt_params_free(a);
  lt_params_free(b);
}
END_TEST

/* ---- the file read with plain HDF5 calls ---------------------------------- */

typedef struct seen {
  char name[32][128];
  int ndim[32];
  hsize_t dims[32][8];
  H5T_class_t cls[32];
  size_t size[32];
  int n;
} seen;

static herr_t visit_cb(hid_t obj, const char *name, const H5O_info_t *info, void *data) {
  seen *s = data;
  if (info->type != H5O_TYPE_DATASET) return 0;
  ck_assert_int_lt(s->n, 32);
  hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
  hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
  snprintf(s->name[s->n], 128, "%s", name);
  for (char *c = s->name[s->n]; *c; c++)
    if (*c == '/') *c = '.';
  s->ndim[s->n] = H5Sget_simple_extent_ndims(sp);
  H5Sget_simple_extent_dims(sp, s->dims[s->n], NULL);
  s->cls[s->n] = H5Tget_class(t);
  s->size[s->n] = H5Tget_size(t);
  s->n++;
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return 0;
}

/* The layout of dataset path: H5D_CONTIGUOUS / H5D_CHUNKED, and whether its
 * only filter is deflate. */
static H5D_layout_t layout_of(hid_t f, const char *path, bool *deflate) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  ck_assert_msg(d >= 0, "no dataset %s", path);
  hid_t dcpl = H5Dget_create_plist(d);
  H5D_layout_t l = H5Pget_layout(dcpl);
  int nf = H5Pget_nfilters(dcpl);
  unsigned flags;
  size_t nelem = 0;
  *deflate = nf == 1 && H5Pget_filter2(dcpl, 0, &flags, &nelem, NULL, 0, NULL, NULL) == H5Z_FILTER_DEFLATE;
  H5Pclose(dcpl);
  H5Dclose(d);
  return l;
}

START_TEST(names_match_state_dict) {
  lt_params *a = make_model(77);
  const char *p = ckpt_path("names.h5");
  lt_ckpt_meta *cfg = make_config(V);
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, a, cfg, NULL));
  lt_ckpt_meta_free(cfg);
  /* Plain HDF5, independent of the loader. */
  hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
  ck_assert_int_ge(f, 0);
  hid_t g = H5Gopen2(f, "/model", H5P_DEFAULT);
  seen *s = calloc(1, sizeof *s);
  ck_assert_int_ge(H5Ovisit(g, H5_INDEX_NAME, H5_ITER_INC, visit_cb, s), 0);
  ck_assert_int_eq(s->n, N_SPEC);
  for (int i = 0; i < N_SPEC; i++) {
    const spec *sp = &model_spec[i];
    int k = -1;
    for (int j = 0; j < s->n; j++)
      if (!strcmp(s->name[j], sp->name)) k = j;
    ck_assert_msg(k >= 0, "%s not found by H5Ovisit", sp->name);
    ck_assert_int_eq(s->ndim[k], sp->ndim);
    for (int d = 0; d < sp->ndim; d++) ck_assert_int_eq(s->dims[k][d], sp->shape[d]);
    ck_assert_int_eq(s->size[k], lt_dtype_size(sp->dtype));
    ck_assert_int_eq(s->cls[k], lt_dtype_is_float(sp->dtype) ? H5T_FLOAT
                                : sp->dtype == LT_DTYPE_BOOL ? H5T_ENUM : H5T_INTEGER);
  }
  /* Links in /model/encoder are in creation order (as the state_dict). */
  char first[64];
  ck_assert_int_gt(H5Lget_name_by_idx(f, "/model/encoder/layers/0", H5_INDEX_CRT_ORDER, H5_ITER_INC, 0, first,
                                      sizeof first, H5P_DEFAULT), 0);
  ck_assert_str_eq(first, "self_attn");
  /* Root attributes. */
  hid_t at = H5Aopen(f, "format_version", H5P_DEFAULT);
  long long ver = 0;
  H5Aread(at, H5T_NATIVE_LLONG, &ver);
  H5Aclose(at);
  ck_assert_int_eq(ver, LT_CKPT_FORMAT_VERSION);
  char str[64] = "";
  hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, sizeof str - 1);
  H5Tset_cset(st, H5T_CSET_UTF8);
  at = H5Aopen(f, "format", H5P_DEFAULT);
  ck_assert_int_ge(H5Aread(at, st, str), 0);
  H5Aclose(at);
  ck_assert_str_eq(str, "libtensor-checkpoint");
  memset(str, 0, sizeof str);
  at = H5Aopen_by_name(f, "/model", "activation", H5P_DEFAULT, H5P_DEFAULT);
  ck_assert_int_ge(H5Aread(at, st, str), 0);
  H5Aclose(at);
  ck_assert_str_eq(str, "gelu");
  H5Tclose(st);
  at = H5Aopen_by_name(f, "/model", "vocab_size", H5P_DEFAULT, H5P_DEFAULT);
  H5Aread(at, H5T_NATIVE_LLONG, &ver);
  H5Aclose(at);
  ck_assert_int_eq(ver, V);
  /* Storage: big.weight (repetitive) chunked and deflated; random weights
   * and small tensors contiguous without filters. */
  bool deflate;
  ck_assert_int_eq(layout_of(f, "/model/big/weight", &deflate), H5D_CHUNKED);
  ck_assert(deflate);
  ck_assert_int_eq(layout_of(f, "/model/embed/weight", &deflate), H5D_CONTIGUOUS);
  ck_assert(!deflate);
  ck_assert_int_eq(layout_of(f, "/model/encoder/layers/0/norm1/bias", &deflate), H5D_CONTIGUOUS);
  free(s);
  H5Gclose(g);
  H5Fclose(f);
  /* h5dump (when installed) reads the file with its user block. */
  if (access("/usr/bin/h5dump", X_OK) == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "/usr/bin/h5dump -H -B '%s' > '%s' 2>&1", p, ckpt_path("dump.txt"));
    ck_assert_int_eq(system(cmd), 0);
    FILE *fp = fopen(ckpt_path("dump.txt"), "r");
    char *txt = calloc(1, 1 << 20);
    size_t n = fread(txt, 1, (1 << 20) - 1, fp);
    fclose(fp);
    ck_assert_int_gt(n, 0);
    ck_assert_ptr_nonnull(strstr(txt, "USER_BLOCK"));
    ck_assert_ptr_nonnull(strstr(txt, "DATASET \"q_proj\"") ? strstr(txt, "DATASET \"q_proj\"")
                                                             : strstr(txt, "GROUP \"q_proj\""));
    ck_assert_ptr_nonnull(strstr(txt, "( 50, 16 )"));
    free(txt);
  }
  lt_params_free(a);
}
END_TEST

/* ---- strict and non-strict ---------------------------------------------- */

static void train_steps(lt_params *p, lt_optimizer *o, const lt_schedule *sc, int64_t *step, int n);

START_TEST(strict_and_non_strict) {
  lt_params *a = lt_params_new(), *b = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(a, "enc.w", lt_full(LT_DTYPE_F32, LT_SHAPE(2, 2), 1.0), 0));
  LT_OK_OR_FAIL(lt_params_add(a, "enc.b", lt_full(LT_DTYPE_F32, LT_SHAPE(2), 2.0), 0));
  LT_OK_OR_FAIL(lt_params_add(a, "old.head", lt_full(LT_DTYPE_F32, LT_SHAPE(3), 3.0), 0));
  LT_OK_OR_FAIL(lt_params_add(b, "enc.w", lt_full(LT_DTYPE_F32, LT_SHAPE(2, 2), -1.0), 0));
  LT_OK_OR_FAIL(lt_params_add(b, "enc.b", lt_full(LT_DTYPE_F32, LT_SHAPE(2), -2.0), 0));
  LT_OK_OR_FAIL(lt_params_add(b, "new.head", lt_full(LT_DTYPE_F32, LT_SHAPE(4), -4.0), 0));
  LT_OK_OR_FAIL(lt_params_add(b, "new.bias", lt_full(LT_DTYPE_F32, LT_SHAPE(4), -5.0), 0));
  const char *p = ckpt_path("ft.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, a, NULL, NULL));
  lt_ckpt_info *info = (lt_ckpt_info *)1;
  LT_EXPECT_ERR(lt_ckpt_load_params(p, b, NULL, &info), LT_ERR_INVALID,
                "2 missing from the file (new.head, new.bias); 1 not in the model (old.head)");
  ck_assert_ptr_null(info);
  LT_ASSERT_VALUES(lt_params_find(b, "enc.w"), 0, -1, -1, -1, -1); /* unchanged */
  lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
  o.non_strict = true;
  LT_OK_OR_FAIL(lt_ckpt_load_params(p, b, &o, &info));
  LT_ASSERT_VALUES(lt_params_find(b, "enc.w"), 0, 1, 1, 1, 1);
  LT_ASSERT_VALUES(lt_params_find(b, "enc.b"), 0, 2, 2);
  LT_ASSERT_VALUES(lt_params_find(b, "new.head"), 0, -4, -4, -4, -4);
  ck_assert_int_eq(info->n_missing, 2);
  ck_assert_str_eq(info->missing[0], "new.head");
  ck_assert_str_eq(info->missing[1], "new.bias");
  ck_assert_int_eq(info->n_unexpected, 1);
  ck_assert_str_eq(info->unexpected[0], "old.head");
  lt_ckpt_info_free(info);
  /* A training checkpoint: the optimizer states it skips are listed too. */
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *oa = lt_optimizer_new(a, &cfg), *ob = lt_optimizer_new(b, &cfg);
  lt_schedule sc = {.kind = LT_SCHED_CONSTANT, .base_lr = 1e-3};
  lt_train_state sa = {.params = a, .optim = oa, .optim_config = &cfg};
  lt_train_state sb = {.params = b, .optim = ob, .optim_config = &cfg};
  train_steps(a, oa, &sc, &sa.step, 1);
  LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("ft_train.h5"), &sa, NULL, NULL, NULL));
  LT_EXPECT_ERR(lt_ckpt_load_training(ckpt_path("ft_train.h5"), &sb, NULL, NULL), LT_ERR_INVALID, "old.head");
  LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("ft_train.h5"), &sb, &o, &info));
  ck_assert_int_eq(info->n_missing, 2);
  ck_assert_int_eq(info->n_unexpected, 4);
  ck_assert_str_eq(info->unexpected[0], "old.head");
  ck_assert_str_eq(info->unexpected[1], "optim/old.head.exp_avg");
  ck_assert_str_eq(info->unexpected[2], "optim/old.head.exp_avg_sq");
  ck_assert_str_eq(info->unexpected[3], "optim/old.head.step");
  ck_assert(lt_optimizer_state(ob, "enc.w", "step") != NULL);
  ck_assert_ptr_null(lt_optimizer_state(ob, "new.head", "step")); /* no state in the file: none */
  lt_ckpt_info_free(info);
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_params_free(a);
  lt_params_free(b);
}
END_TEST

/* ---- argument errors ---------------------------------------------------- */

START_TEST(save_errors) {
  lt_params *a = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(a, "a", lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)), 0));
  LT_OK_OR_FAIL(lt_params_add(a, "a.b", lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)), 0));
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("x.h5"), a, NULL, NULL), LT_ERR_INVALID, "cannot both exist");
  ck_assert_int_ne(access(ckpt_path("x.h5"), F_OK), 0);
  ck_assert_int_eq(ckpt_count_tmp_files(ckpt_tmpdir), 0);
  lt_params *b = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(b, "a..b", lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)), 0));
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("x.h5"), b, NULL, NULL), LT_ERR_INVALID, "empty component");
  lt_params *c = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(c, "x/y", lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)), 0));
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("x.h5"), c, NULL, NULL), LT_ERR_INVALID, "contains '/'");
  LT_EXPECT_ERR(lt_ckpt_save_params(NULL, c, NULL, NULL), LT_ERR_NULL, NULL);
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("x.h5"), NULL, NULL, NULL), LT_ERR_NULL, NULL);
  lt_params *d = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(d, "w", lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)), 0));
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("nodir/x.h5"), d, NULL, NULL), LT_ERR_IO, "directory");
  ck_assert_int_eq(mkdir(ckpt_path("adir"), 0755), 0);
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("adir"), d, NULL, NULL), LT_ERR_IO, "cannot rename");
  ck_assert_int_eq(ckpt_count_tmp_files(ckpt_tmpdir), 0);
  lt_params_free(d);
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(m, "blob", "x", 1));
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("x.h5"), a, m, NULL), LT_ERR_INVALID, "byte blob");
  lt_ckpt_save_opts so = {false, 12};
  LT_EXPECT_ERR(lt_ckpt_save_params(ckpt_path("x.h5"), b, NULL, &so), LT_ERR_INVALID, "deflate_level");
  LT_EXPECT_ERR(lt_ckpt_load_params(ckpt_path("nope.h5"), a, NULL, NULL), LT_ERR_IO, "cannot open");
  LT_EXPECT_ERR(lt_ckpt_load_params(NULL, a, NULL, NULL), LT_ERR_NULL, NULL);
  lt_ckpt_meta_free(m);
  lt_params_free(a);
  lt_params_free(b);
  lt_params_free(c);
}
END_TEST

/* ---- full training state ------------------------------------------------ */

/* Parameters without a gradient at some steps (PyTorch's .grad = None: the
 * optimizer skips them and does not advance their step): norm1.weight gets
 * its first gradient at step 4, lm_head.scale none at steps 2 and 6,
 * big.weight none before step 6. */
static bool skipped(const char *name, int64_t step) {
  if (!strcmp(name, "encoder.layers.0.norm1.weight")) return step < 4;
  if (!strcmp(name, "lm_head.scale")) return step == 2 || step == 6;
  if (!strcmp(name, "big.weight")) return step < 6;
  return false;
}

/* n steps on loss = sum over parameters of sum(p^2 * k), without the
 * parameters skip(name, step) names (skip may be NULL). */
static void train_steps_skip(lt_params *p, lt_optimizer *o, const lt_schedule *sc, int64_t *step, int n,
                             bool (*skip)(const char *, int64_t)) {
  for (int it = 0; it < n; it++) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *loss = NULL;
    for (int i = 0; i < lt_params_count(p); i++) {
      const lt_param *q = lt_params_at(p, i);
      if (q->flags & LT_PARAM_BUFFER) continue;
      if (skip && skip(q->name, *step + 1)) continue;
      lt_tensor *l = lt_sum(lt_mul_scalar(lt_square(q->value), 0.5 + i), 0, NULL, false);
      if (l->dtype != LT_DTYPE_F32) l = lt_to_dtype(l, LT_DTYPE_F32);
      loss = loss ? lt_add(loss, l) : l;
    }
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    (*step)++;
    lt_optimizer_set_lr(o, lt_schedule_lr(sc, *step));
    LT_OK_OR_FAIL(lt_optimizer_step(o));
    lt_params_zero_grad(p);
    lt_scope_end(s);
  }
}

/* A few AdamW steps on every parameter. */
static void train_steps(lt_params *p, lt_optimizer *o, const lt_schedule *sc, int64_t *step, int n) {
  train_steps_skip(p, o, sc, step, n, NULL);
}

static void assert_optim_same(const lt_params *p, const lt_optimizer *a, const lt_optimizer *b) {
  ck_assert_int_eq(lt_optimizer_step_count(a), lt_optimizer_step_count(b));
  ck_assert(lt_optimizer_get_lr(a) == lt_optimizer_get_lr(b));
  const char *names[] = {"exp_avg", "exp_avg_sq", "step"};
  int n = 0;
  for (int i = 0; i < lt_params_count(p); i++)
    for (int k = 0; k < 3; k++) {
      const char *pn = lt_params_at(p, i)->name;
      lt_tensor *x = lt_optimizer_state(a, pn, names[k]), *y = lt_optimizer_state(b, pn, names[k]);
      ck_assert_msg((x == NULL) == (y == NULL), "%s.%s present in one only", pn, names[k]);
      if (!x) continue;
      ck_assert_msg(!memcmp(x->data, y->data, (size_t)x->numel * lt_dtype_size(x->dtype)), "%s.%s differs", pn,
                    names[k]);
      n++;
    }
  ck_assert_int_gt(n, 0);
}

START_TEST(training_roundtrip_and_resume) {
  lt_params *pa = make_model(11), *pb = make_model(0);
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAMW);
  cfg.lr = 3e-3;
  lt_optimizer *oa = lt_optimizer_new(pa, &cfg), *ob = lt_optimizer_new(pb, &cfg);
  ck_assert_ptr_nonnull(oa);
  ck_assert_ptr_nonnull(ob);
  lt_schedule sc = {.kind = LT_SCHED_WARMUP_COSINE, .base_lr = 3e-3, .min_lr = 1e-4, .warmup = 3, .total = 20};
  lt_schedule sc_b = {.kind = LT_SCHED_CONSTANT, .base_lr = 1};
  lt_generator *ga[2] = {lt_generator_new(1), lt_generator_new(2)};
  lt_generator *gb[2] = {lt_generator_new(99), lt_generator_new(98)};
  lt_tensor *tmp = lt_rand(ga[0], LT_DTYPE_F32, LT_SHAPE(37)); /* advance the dropout generator */
  lt_tensor_free(tmp);
  const char *gnames[2] = {"dropout", "shuffle"};
  lt_train_state sa = {.params = pa, .optim = oa, .optim_config = &cfg, .schedule = &sc, .step = 0,
                       .n_generators = 2, .generator_names = gnames, .generators = ga};
  train_steps(pa, oa, &sc, &sa.step, 4);
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  unsigned char tok[300];
  for (int i = 0; i < 300; i++) tok[i] = (unsigned char)(i * 37);
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(extra, "tokenizer", tok, sizeof tok));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(extra, "empty_blob", NULL, 0));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.epoch", 3));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.position", 12345));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_string(extra, "run", "test"));
  lt_ckpt_meta *cfgm = make_config(V);
  const char *p = ckpt_path("train.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_training(p, &sa, cfgm, extra, NULL));

  lt_train_state sb = {.params = pb, .optim = ob, .optim_config = &cfg, .schedule = &sc_b, .step = 0,
                       .n_generators = 2, .generator_names = gnames, .generators = gb};
  lt_ckpt_info *info = NULL;
  LT_OK_OR_FAIL(lt_ckpt_load_training(p, &sb, NULL, &info));
  ck_assert(info->training);
  assert_same_bytes(pa, pb);
  assert_optim_same(pa, oa, ob);
  ck_assert_int_eq(sb.step, 4);
  ck_assert(!memcmp(&sc, &sc_b, sizeof sc));
  for (int i = 0; i < 2; i++) {
    lt_generator_state x = lt_generator_get_state(ga[i]), y = lt_generator_get_state(gb[i]);
    ck_assert(x.seed == y.seed && x.offset == y.offset);
  }
  const void *blob;
  size_t n;
  int64_t v;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_bytes(info->extra, "tokenizer", &blob, &n));
  ck_assert_int_eq(n, 300);
  ck_assert(!memcmp(blob, tok, 300));
  LT_OK_OR_FAIL(lt_ckpt_meta_get_bytes(info->extra, "empty_blob", &blob, &n));
  ck_assert_int_eq(n, 0);
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->extra, "loader.position", &v));
  ck_assert_int_eq(v, 12345);
  lt_ckpt_info_free(info);

  /* Both continue identically (same step count, same states, same lr). */
  train_steps(pa, oa, &sc, &sa.step, 3);
  train_steps(pb, ob, &sc_b, &sb.step, 3);
  assert_same_bytes(pa, pb);
  assert_optim_same(pa, oa, ob);

  /* A model-only load of a training checkpoint works; the reverse does not. */
  lt_params *pc = make_model(0);
  LT_OK_OR_FAIL(lt_ckpt_load_params(p, pc, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("m.h5"), pc, NULL, NULL));
  LT_EXPECT_ERR(lt_ckpt_load_training(ckpt_path("m.h5"), &sb, NULL, NULL), LT_ERR_INVALID,
                "its root attribute 'content' is 'model': a model checkpoint without training state");

  /* Wrong optimizer kind or hyperparameters: refused, nothing changes. */
  lt_optim_config sgd = lt_optim_defaults(LT_OPTIM_SGD);
  sgd.momentum = 0.9;
  lt_optimizer *os = lt_optimizer_new(pc, &sgd);
  lt_train_state sx = {.params = pc, .optim = os, .optim_config = &sgd};
  LT_EXPECT_ERR(lt_ckpt_load_training(p, &sx, NULL, NULL), LT_ERR_INVALID, "adamw optimizer state");
  lt_optim_config cfg2 = cfg;
  cfg2.beta2 = 0.95;
  lt_optimizer *o2 = lt_optimizer_new(pc, &cfg2);
  lt_train_state s2 = {.params = pc, .optim = o2, .optim_config = &cfg2, .n_generators = 2,
                       .generator_names = gnames, .generators = gb};
  LT_EXPECT_ERR(lt_ckpt_load_training(p, &s2, NULL, NULL), LT_ERR_INVALID, "beta2");
  ck_assert_int_eq(lt_optimizer_step_count(o2), 0);
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.allow_hparam_change = true;
  LT_OK_OR_FAIL(lt_ckpt_load_training(p, &s2, &lo, NULL));
  ck_assert_int_eq(lt_optimizer_step_count(o2), 4);
  /* Generators must match by name in strict mode. */
  const char *other[1] = {"sampler"};
  lt_train_state s3 = {.params = pc, .n_generators = 1, .generator_names = other, .generators = gb};
  LT_EXPECT_ERR(lt_ckpt_load_training(p, &s3, NULL, NULL), LT_ERR_INVALID, "1 missing from the file (sampler)");
  lo.non_strict = true;
  LT_OK_OR_FAIL(lt_ckpt_load_training(p, &s3, &lo, &info));
  ck_assert_int_eq(info->n_missing, 1);
  ck_assert_str_eq(info->missing[0], "rng/sampler");
  ck_assert_int_eq(info->n_unexpected, 2);
  ck_assert_str_eq(info->unexpected[0], "rng/dropout");
  ck_assert_str_eq(info->unexpected[1], "rng/shuffle");
  lt_ckpt_info_free(info);

  lt_optimizer_free(os);
  lt_optimizer_free(o2);
  lt_params_free(pc);
  for (int i = 0; i < 2; i++) {
    lt_generator_free(ga[i]);
    lt_generator_free(gb[i]);
  }
  lt_ckpt_meta_free(extra);
  lt_ckpt_meta_free(cfgm);
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_params_free(pa);
  lt_params_free(pb);
}
END_TEST

/* A fresh optimizer (no state yet, step 0) round-trips as such; SGD with momentum too. */
START_TEST(training_fresh_and_sgd) {
  lt_params *pa = make_model(3), *pb = make_model(0);
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_SGD);
  cfg.momentum = 0.9;
  cfg.dampening = 0.1;
  lt_optimizer *oa = lt_optimizer_new(pa, &cfg), *ob = lt_optimizer_new(pb, &cfg);
  lt_schedule sc = {.kind = LT_SCHED_CONSTANT, .base_lr = 0.01};
  lt_train_state sa = {.params = pa, .optim = oa, .optim_config = &cfg};
  lt_train_state sb = {.params = pb, .optim = ob, .optim_config = &cfg};
  LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("fresh.h5"), &sa, NULL, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("fresh.h5"), &sb, NULL, NULL));
  ck_assert_int_eq(lt_optimizer_step_count(ob), 0);
  ck_assert_ptr_null(lt_optimizer_state(ob, "embed.weight", "momentum_buffer"));
  train_steps(pa, oa, &sc, &sa.step, 2);
  LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("sgd.h5"), &sa, NULL, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("sgd.h5"), &sb, NULL, NULL));
  assert_same_bytes(pa, pb);
  ck_assert_int_eq(lt_optimizer_step_count(ob), 2);
  lt_tensor *x = lt_optimizer_state(oa, "embed.weight", "momentum_buffer");
  lt_tensor *y = lt_optimizer_state(ob, "embed.weight", "momentum_buffer");
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(y);
  ck_assert(!memcmp(x->data, y->data, (size_t)x->numel * 4));
  train_steps(pa, oa, &sc, &sa.step, 2);
  train_steps(pb, ob, &sc, &sb.step, 2);
  assert_same_bytes(pa, pb);
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_params_free(pa);
  lt_params_free(pb);
}
END_TEST


/* Resume with parameters that some steps skip (no gradient): their own
 * steps are saved and restored, so 4 steps + save + load into a new
 * optimizer + 4 steps equals 8 straight steps bit for bit, for AdamW (per-
 * parameter bias correction) and SGD with momentum (a buffer that did not
 * exist at save time is created from the first gradient, as PyTorch). */
START_TEST(training_resume_with_skipped_params) {
  lt_optim_config cfgs[2] = {lt_optim_defaults(LT_OPTIM_ADAMW), lt_optim_defaults(LT_OPTIM_SGD)};
  cfgs[0].lr = 1e-2;
  cfgs[1].momentum = 0.9;
  cfgs[1].dampening = 0.5;
  for (int k = 0; k < 2; k++) {
    const lt_optim_config *cfg = &cfgs[k];
    lt_params *pa = make_model(8), *pb = make_model(8), *pc = make_model(0);
    lt_optimizer *oa = lt_optimizer_new(pa, cfg), *ob = lt_optimizer_new(pb, cfg), *oc = lt_optimizer_new(pc, cfg);
    lt_schedule sc = {.kind = LT_SCHED_CONSTANT, .base_lr = cfg->lr};
    int64_t sa = 0;
    lt_train_state stb = {.params = pb, .optim = ob, .optim_config = cfg, .schedule = &sc};
    lt_train_state stc = {.params = pc, .optim = oc, .optim_config = cfg, .schedule = &sc};
    train_steps_skip(pa, oa, &sc, &sa, 8, skipped);
    train_steps_skip(pb, ob, &sc, &stb.step, 4, skipped);
    LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("skip.h5"), &stb, NULL, NULL, NULL));
    if (k == 0) {
      /* In the file: norm1.weight's own step 1, no state for big.weight. */
      hid_t f = H5Fopen(ckpt_path("skip.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
      ck_assert_int_ge(f, 0);
      hid_t d = H5Dopen2(f, "/optim/encoder/layers/0/norm1/weight/step", H5P_DEFAULT);
      long long t = 0;
      ck_assert_int_ge(H5Dread(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, &t), 0);
      ck_assert_int_eq(t, 1);
      H5Dclose(d);
      ck_assert_int_eq(H5Lexists(f, "/optim/big", H5P_DEFAULT), 0);
      H5Fclose(f);
    }
    LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("skip.h5"), &stc, NULL, NULL));
    ck_assert_int_eq(stc.step, 4);
    ck_assert_ptr_null(lt_optimizer_state(oc, "big.weight", k ? "momentum_buffer" : "exp_avg"));
    if (k == 0) ck_assert_int_eq(*(int64_t *)lt_optimizer_state(oc, "lm_head.scale", "step")->data, 3);
    train_steps_skip(pc, oc, &sc, &stc.step, 4, skipped);
    assert_same_bytes(pa, pc);
    if (k == 0) assert_optim_same(pa, oa, oc);
    if (k == 0) ck_assert_int_eq(*(int64_t *)lt_optimizer_state(oc, "big.weight", "step")->data, 3);
    lt_tensor *x = lt_optimizer_state(oa, "big.weight", k ? "momentum_buffer" : "exp_avg");
    lt_tensor *y = lt_optimizer_state(oc, "big.weight", k ? "momentum_buffer" : "exp_avg");
    ck_assert(x && y && !memcmp(x->data, y->data, (size_t)x->numel * 4));
    lt_optimizer_free(oa);
    lt_optimizer_free(ob);
    lt_optimizer_free(oc);
    lt_params_free(pa);
    lt_params_free(pb);
    lt_params_free(pc);
  }
}
END_TEST

/* Format version 1 files (one optimizer step, no per-parameter "step"
 * datasets) still load: each parameter with state gets the step count. */
START_TEST(training_reads_format_version_1) {
  lt_params *pa = make_model(9), *pb = make_model(0);
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *oa = lt_optimizer_new(pa, &cfg), *ob = lt_optimizer_new(pb, &cfg);
  lt_schedule sc = {.kind = LT_SCHED_CONSTANT, .base_lr = 1e-3};
  lt_train_state sa = {.params = pa, .optim = oa, .optim_config = &cfg, .schedule = &sc};
  lt_train_state sb = {.params = pb, .optim = ob, .optim_config = &cfg, .schedule = &sc};
  train_steps_skip(pa, oa, &sc, &sa.step, 3, skipped);
  const char *p = ckpt_path("v1.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_training(p, &sa, NULL, NULL, NULL));
  /* Rewrite it as version 1 would have: no step datasets, format_version 1. */
  hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
  ck_assert_int_ge(f, 0);
  int dropped = 0;
  for (int i = 0; i < lt_params_count(pa); i++) {
    char path[512];
    snprintf(path, sizeof path, "/optim/%s/step", lt_params_at(pa, i)->name);
    for (char *c = path + 7; *c; c++)
      if (*c == '.') *c = '/';
    if (H5Lexists(f, path, H5P_DEFAULT) > 0) dropped += H5Ldelete(f, path, H5P_DEFAULT) >= 0;
  }
  ck_assert_int_gt(dropped, 5);
  hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
  long long one = 1;
  ck_assert_int_ge(H5Awrite(a, H5T_NATIVE_LLONG, &one), 0);
  H5Aclose(a);
  H5Fclose(f);
  LT_OK_OR_FAIL(lt_ckpt_seal(p));
  lt_ckpt_info *info;
  LT_OK_OR_FAIL(lt_ckpt_load_training(p, &sb, NULL, &info));
  ck_assert_int_eq(info->format_version, 1);
  lt_ckpt_info_free(info);
  assert_same_bytes(pa, pb);
  ck_assert_int_eq(lt_optimizer_step_count(ob), 3);
  ck_assert_int_eq(*(int64_t *)lt_optimizer_state(ob, "embed.weight", "step")->data, 3);
  /* (norm1.weight had no gradient yet: no state, as in the file.) */
  ck_assert_ptr_null(lt_optimizer_state(ob, "encoder.layers.0.norm1.weight", "step"));
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_params_free(pa);
  lt_params_free(pb);
}
END_TEST

/* Files written before the schedule names were shared with the command line
 * say "warmup_linear" / "warmup_cosine" in /schedule; they still load, and
 * new files use the shared names ("linear", "cosine"). */
START_TEST(training_reads_old_schedule_names) {
  static const char *const old_names[] = {"warmup_linear", "warmup_cosine"};
  static const lt_schedule_kind kinds[] = {LT_SCHED_WARMUP_LINEAR, LT_SCHED_WARMUP_COSINE};
  for (int c = 0; c < 2; c++) {
    lt_params *pa = make_model(5), *pb = make_model(0);
    lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAMW);
    lt_optimizer *oa = lt_optimizer_new(pa, &cfg), *ob = lt_optimizer_new(pb, &cfg);
    lt_schedule sc = {.kind = kinds[c], .base_lr = 1e-3, .min_lr = 1e-5, .warmup = 2, .total = 10};
    lt_schedule sc_b = {.kind = LT_SCHED_CONSTANT};
    lt_train_state sa = {.params = pa, .optim = oa, .optim_config = &cfg, .schedule = &sc};
    lt_train_state sb = {.params = pb, .optim = ob, .optim_config = &cfg, .schedule = &sc_b};
    train_steps(pa, oa, &sc, &sa.step, 2);
    const char *p = ckpt_path("oldsched.h5");
    LT_OK_OR_FAIL(lt_ckpt_save_training(p, &sa, NULL, NULL, NULL));
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    hid_t g = H5Gopen2(f, "schedule", H5P_DEFAULT);
    ck_assert_int_ge(g, 0);
    /* The name this version writes. */
    hid_t a = H5Aopen(g, "kind", H5P_DEFAULT), t = H5Aget_type(a);
    char now[32] = {0};
    ck_assert_int_lt(H5Tget_size(t), sizeof now);
    ck_assert_int_ge(H5Aread(a, t, now), 0);
    ck_assert_str_eq(now, lt_schedule_kind_name(kinds[c]));
    H5Tclose(t);
    H5Aclose(a);
    /* Rewrite it as the older writer did. */
    ck_assert_int_ge(H5Adelete(g, "kind"), 0);
    t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(old_names[c]));
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    hid_t sp = H5Screate(H5S_SCALAR);
    a = H5Acreate2(g, "kind", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(H5Awrite(a, t, old_names[c]), 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    H5Gclose(g);
    H5Fclose(f);
    LT_OK_OR_FAIL(lt_ckpt_seal(p));
    LT_OK_OR_FAIL(lt_ckpt_load_training(p, &sb, NULL, NULL));
    ck_assert_int_eq(sc_b.kind, kinds[c]);
    ck_assert(sc_b.base_lr == sc.base_lr && sc_b.min_lr == sc.min_lr);
    ck_assert_int_eq(sc_b.warmup, 2);
    ck_assert_int_eq(sc_b.total, 10);
    ck_assert_int_eq(sb.step, 2);
    assert_same_bytes(pa, pb);
    lt_optimizer_free(oa);
    lt_optimizer_free(ob);
    lt_params_free(pa);
    lt_params_free(pb);
  }
}
END_TEST

/* A model converted to f64 (lt_params_to_dtype) saves its tensors as f64
 * and loads back into an f64 model; an f32 model refuses the file, naming
 * the fix. Training state (optimizer made after the conversion) too. */
START_TEST(f64_model_roundtrip) {
  lt_params *a = make_model(13), *b = make_model(0), *c = make_model(0);
  LT_OK_OR_FAIL(lt_params_to_dtype(a, LT_DTYPE_F64));
  LT_OK_OR_FAIL(lt_params_to_dtype(b, LT_DTYPE_F64));
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *oa = lt_optimizer_new(a, &cfg), *ob = lt_optimizer_new(b, &cfg);
  lt_schedule sc = {.kind = LT_SCHED_CONSTANT, .base_lr = 1e-3};
  lt_train_state sa = {.params = a, .optim = oa, .optim_config = &cfg, .schedule = &sc};
  lt_train_state sb = {.params = b, .optim = ob, .optim_config = &cfg, .schedule = &sc};
  train_steps(a, oa, &sc, &sa.step, 2);
  LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("f64.h5"), &sa, NULL, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("f64.h5"), &sb, NULL, NULL));
  assert_same_bytes(a, b);
  assert_optim_same(a, oa, ob);
  ck_assert_int_eq(lt_optimizer_state(ob, "embed.weight", "exp_avg")->dtype, LT_DTYPE_F64);
  LT_EXPECT_ERR(lt_ckpt_load_params(ckpt_path("f64.h5"), c, NULL, NULL), LT_ERR_DTYPE,
                "is f32 (float, 4 bytes, little-endian) (tensors are saved in their "
                "own dtype: lt_params_to_dtype");
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_params_free(a);
  lt_params_free(b);
  lt_params_free(c);
}
END_TEST

/* The datasets module's state as the trainer stores it: the tokenizer as a
 * blob, the loader position as int64 values (u64 fields by bit pattern). */
START_TEST(tokenizer_and_loader_in_extra) {
  const char *text = "the quick brown fox jumps over the lazy dog; the dog sleeps. ";
  lt_tokenizer *tok = lt_tokenizer_train_bpe(text, strlen(text), NULL);
  ck_assert_ptr_nonnull(tok);
  lt_tensor *ids = LT_NN(lt_tokenizer_encode_tensor(tok, text, strlen(text)));
  lt_batch_opts bo = LT_BATCH_DEFAULTS(2);
  bo.seed = 17;
  lt_lm_loader *L = lt_lm_loader_new(ids, 4, &bo);
  ck_assert_ptr_nonnull(L);
  for (int i = 0; i < 5; i++) { /* into the second epoch */
    lt_tensor *x, *y;
    LT_OK_OR_FAIL(lt_lm_loader_next(L, &x, &y));
    lt_tensor_free(x);
    lt_tensor_free(y);
  }
  void *blob;
  size_t n;
  LT_OK_OR_FAIL(lt_tokenizer_serialize(tok, &blob, &n));
  lt_loader_position pos = lt_lm_loader_get_position(L);
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  LT_OK_OR_FAIL(lt_ckpt_meta_set_bytes(extra, "tokenizer", blob, n));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.epoch", pos.epoch));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.index", pos.index));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.seed", (int64_t)pos.gen.seed));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.offset", (int64_t)pos.gen.offset));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(extra, "loader.fingerprint", (int64_t)pos.fingerprint));
  free(blob);
  lt_params *p = make_model(2);
  lt_train_state st = {.params = p};
  LT_OK_OR_FAIL(lt_ckpt_save_training(ckpt_path("data.h5"), &st, NULL, extra, NULL));
  lt_ckpt_info *info;
  LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt_path("data.h5"), &st, NULL, &info));
  const void *b2;
  size_t n2;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_bytes(info->extra, "tokenizer", &b2, &n2));
  lt_tokenizer *tok2 = lt_tokenizer_deserialize(b2, n2);
  ck_assert_ptr_nonnull(tok2);
  ck_assert_int_eq(lt_tokenizer_vocab_size(tok2), lt_tokenizer_vocab_size(tok));
  lt_tensor *ids2 = LT_NN(lt_tokenizer_encode_tensor(tok2, text, strlen(text)));
  ck_assert(lt_equal(ids, ids2));
  lt_loader_position q;
  int64_t v;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->extra, "loader.epoch", &q.epoch));
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->extra, "loader.index", &q.index));
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->extra, "loader.seed", &v));
  q.gen.seed = (uint64_t)v;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->extra, "loader.offset", &v));
  q.gen.offset = (uint64_t)v;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->extra, "loader.fingerprint", &v));
  q.fingerprint = (uint64_t)v;
  lt_lm_loader *L2 = lt_lm_loader_new(ids2, 4, &bo);
  LT_OK_OR_FAIL(lt_lm_loader_set_position(L2, q));
  for (int i = 0; i < 4; i++) { /* both continue with the same batches */
    lt_tensor *x, *y, *x2, *y2;
    LT_OK_OR_FAIL(lt_lm_loader_next(L, &x, &y));
    LT_OK_OR_FAIL(lt_lm_loader_next(L2, &x2, &y2));
    ck_assert(lt_equal(x, x2) && lt_equal(y, y2));
    lt_tensor_free(x);
    lt_tensor_free(y);
    lt_tensor_free(x2);
    lt_tensor_free(y2);
  }
  lt_ckpt_info_free(info);
  lt_ckpt_meta_free(extra);
  lt_lm_loader_free(L);
  lt_lm_loader_free(L2);
  lt_tokenizer_free(tok);
  lt_tokenizer_free(tok2);
  lt_tensor_free(ids);
  lt_tensor_free(ids2);
  lt_params_free(p);
}
END_TEST

/* ---- durability ---------------------------------------------------------- */

START_TEST(numbered_rotation_latest) {
  lt_params *a = make_model(5);
  char p[512];
  int64_t step = 0;
  LT_OK_OR_FAIL(lt_ckpt_latest(ckpt_tmpdir, "ckpt", true, &step, p, sizeof p));
  ck_assert_int_eq(step, -1);
  ck_assert_str_eq(p, "");
  for (int64_t s = 1; s <= 5; s++) {
    LT_OK_OR_FAIL(lt_ckpt_step_path(p, sizeof p, ckpt_tmpdir, "ckpt", s * 100));
    LT_OK_OR_FAIL(lt_ckpt_save_params(p, a, NULL, NULL));
    LT_OK_OR_FAIL(lt_ckpt_rotate(ckpt_tmpdir, "ckpt", 2));
  }
  ck_assert_int_eq(access(ckpt_path("ckpt-000000000300.h5"), F_OK), -1);
  ck_assert_int_eq(access(ckpt_path("ckpt-000000000400.h5"), F_OK), 0);
  ck_assert_int_eq(access(ckpt_path("ckpt-000000000500.h5"), F_OK), 0);
  /* Decoys that must never be taken for a checkpoint. */
  const char *decoys[] = {"ckpt-900.h5", "ckpt-000000000900.h5.tmp", "ckpt-00000000090x.h5",
                          "ckpt-0000000000900.h5", "ckpt-000000000900.h5~", "ckpt_000000000900.h5",
                          "xckpt-000000000900.h5", ".ckpt-000000000900.h5.lttmp.1.2"};
  for (size_t i = 0; i < sizeof decoys / sizeof *decoys; i++) {
    FILE *f = fopen(ckpt_path(decoys[i]), "w");
    fputs("junk", f);
    fclose(f);
  }
  LT_OK_OR_FAIL(lt_ckpt_latest(ckpt_tmpdir, "ckpt", false, &step, p, sizeof p));
  ck_assert_int_eq(step, 500);
  ck_assert_str_eq(p, ckpt_path("ckpt-000000000500.h5"));
  /* A damaged newest checkpoint is skipped when verifying. */
  FILE *f = fopen(ckpt_path("ckpt-000000000600.h5"), "w");
  fputs("truncated garbage", f);
  fclose(f);
  LT_OK_OR_FAIL(lt_ckpt_latest(ckpt_tmpdir, "ckpt", false, &step, NULL, 0));
  ck_assert_int_eq(step, 600);
  LT_OK_OR_FAIL(lt_ckpt_latest(ckpt_tmpdir, "ckpt", true, &step, p, sizeof p));
  ck_assert_int_eq(step, 500);
  ck_assert_int_eq(lt_last_status(), LT_OK); /* skipped candidates leave no error */
  /* The stale temporary among the decoys is removed by the next save; the
   * others are left alone. */
  ck_assert_int_eq(ckpt_count_tmp_files(ckpt_tmpdir), 1);
  LT_OK_OR_FAIL(lt_ckpt_step_path(p, sizeof p, ckpt_tmpdir, "ckpt", 700));
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, a, NULL, NULL));
  ck_assert_int_eq(ckpt_count_tmp_files(ckpt_tmpdir), 0);
  ck_assert_int_eq(access(ckpt_path("ckpt-900.h5"), F_OK), 0);
  LT_OK_OR_FAIL(lt_ckpt_rotate(ckpt_tmpdir, "ckpt", 1));
  LT_OK_OR_FAIL(lt_ckpt_latest(ckpt_tmpdir, "ckpt", true, &step, p, sizeof p));
  ck_assert_int_eq(step, 700);
  ck_assert_int_eq(access(ckpt_path("ckpt-000000000500.h5"), F_OK), -1);
  ck_assert_int_eq(access(ckpt_path("ckpt-000000000600.h5"), F_OK), -1);
  LT_EXPECT_ERR(lt_ckpt_step_path(p, 10, ckpt_tmpdir, "ckpt", 1), LT_ERR_INVALID, "too few");
  LT_EXPECT_ERR(lt_ckpt_step_path(p, sizeof p, ckpt_tmpdir, "a/b", 1), LT_ERR_INVALID, "without '/'");
  LT_EXPECT_ERR(lt_ckpt_step_path(p, sizeof p, ckpt_tmpdir, "ckpt", -1), LT_ERR_INVALID, "negative");
  LT_EXPECT_ERR(lt_ckpt_latest(ckpt_path("nodir"), "ckpt", true, &step, p, sizeof p), LT_ERR_IO, "cannot open directory");
  lt_params_free(a);
}
END_TEST

/* A temporary still locked by a live saver is not removed. */
START_TEST(live_temporary_kept) {
  const char *t = ckpt_path(".x.h5.lttmp.1.1");
  int fd = open(t, O_RDWR | O_CREAT, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
  lt_params *a = make_model(5);
  LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("x.h5"), a, NULL, NULL));
  ck_assert_int_eq(access(t, F_OK), 0);
  close(fd);
  LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("x.h5"), a, NULL, NULL));
  ck_assert_int_eq(access(t, F_OK), -1);
  lt_params_free(a);
}
END_TEST

/* A failed write (file size limit, as a full disk) is an error, and the
 * previous checkpoint under that name stays intact and loadable. */
START_TEST(write_failure_keeps_previous) {
  lt_params *small = make_model(21), *big = lt_params_new(), *back = make_model(0);
  lt_generator *g = lt_generator_new(4);
  LT_OK_OR_FAIL(lt_params_add(big, "w", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(512, 512)), 0));
  const char *p = ckpt_path("keep.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_params(p, small, NULL, NULL));
  off_t before = ckpt_file_size(p);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, lim;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 256 * 1024; /* the big model needs 1 MiB */
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  lt_status s = lt_ckpt_save_params(p, big, NULL, NULL);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  ck_assert_msg(s == LT_ERR_IO, "save under RLIMIT_FSIZE returned %s: %s", lt_status_name(s), lt_last_error());
  ck_assert_msg(strstr(lt_last_error(), "keep.h5"), "%s", lt_last_error());
  printf("write failure reported as: %s\n", lt_last_error());
  lt_clear_error();
  ck_assert_int_eq(ckpt_file_size(p), before);
  LT_OK_OR_FAIL(lt_ckpt_load_params(p, back, NULL, NULL));
  assert_same_bytes(small, back);
  ck_assert_int_eq(ckpt_count_tmp_files(ckpt_tmpdir), 0);
  lt_generator_free(g);
  lt_params_free(small);
  lt_params_free(big);
  lt_params_free(back);
}
END_TEST

/* A full disk: in a private mount namespace (a child process, so nothing is
 * mounted for anyone else) a 192 KiB tmpfs takes a small checkpoint, then a
 * 1 MiB one fails with ENOSPC: LT_ERR_IO naming the cause, the previous
 * checkpoint intact and loadable, no temporary left. Skipped where mount
 * namespaces are not allowed (not root, no CAP_SYS_ADMIN). */
static int full_disk_child(const char *dir) {
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", dir, "tmpfs", 0, "size=192k") != 0)
    return 77;
  lt_params *small = lt_params_new(), *big = lt_params_new(), *back = lt_params_new();
  lt_generator *g = lt_generator_new(4);
  if (lt_params_add(small, "w", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(64, 64)), 0) ||
      lt_params_add(back, "w", lt_zeros(LT_DTYPE_F32, LT_SHAPE(64, 64)), 0) ||
      lt_params_add(big, "w", lt_randn(g, LT_DTYPE_F32, LT_SHAPE(512, 512)), 0))
    return 2;
  char path[600];
  snprintf(path, sizeof path, "%s/ckpt.h5", dir);
  if (lt_ckpt_save_params(path, small, NULL, NULL) != LT_OK) return fprintf(stderr, "%s\n", lt_last_error()), 3;
  struct stat st0, st1;
  stat(path, &st0);
  lt_status s = lt_ckpt_save_params(path, big, NULL, NULL);
  printf("full disk reported as: %s\n", lt_last_error());
  fflush(stdout);
  if (s != LT_ERR_IO || !strstr(lt_last_error(), "No space left on device")) return 4;
  if (stat(path, &st1) != 0 || st1.st_size != st0.st_size || st1.st_ino != st0.st_ino) return 5;
  if (lt_ckpt_load_params(path, back, NULL, NULL) != LT_OK) return fprintf(stderr, "%s\n", lt_last_error()), 6;
  if (!lt_equal(lt_params_find(back, "w"), lt_params_find(small, "w"))) return 7;
  if (ckpt_count_tmp_files(dir) != 0) return 8;
  /* Space is back: the next save works. */
  if (lt_ckpt_save_params(path, back, NULL, NULL) != LT_OK) return 9;
  lt_params_free(small);
  lt_params_free(big);
  lt_params_free(back);
  lt_generator_free(g);
  return 0;
}

START_TEST(full_disk_keeps_previous) {
  const char *dir = ckpt_path("full");
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  fflush(stdout);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(full_disk_child(dir));
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status), "the child died (status %d)", status);
  if (WEXITSTATUS(status) == 77) {
    printf("full_disk_keeps_previous: skipped (no private mount namespace with a tmpfs here)\n");
    return;
  }
  ck_assert_msg(WEXITSTATUS(status) == 0, "full-disk check %d failed (see the child's output)", WEXITSTATUS(status));
}
END_TEST

/* The names and shapes in a checkpoint of a Transformer are those of the
 * equivalent PyTorch model's parameters, as PyTorch itself listed them
 * (tests/fixtures/transformer.bin, "<case>.param.<name>", written by
 * make_transformer_fixtures.py from named_parameters()), read back with
 * plain HDF5 calls. */
typedef struct name_list {
  char name[256][128];
  int ndim[256];
  hsize_t dims[256][8];
  int n;
} name_list;

/* lt_ckpt_describe: the configuration and every tensor's name, dtype and
 * shape, from the metadata, match what was saved: the store's lt_params (every
 * dtype, 0-d and zero-size, buffers) and, for a training checkpoint, every
 * optimizer state the optimizer holds (parameters that some steps skipped
 * included); nothing is built. Bad arguments, a missing file and the memory
 * cap are errors with *desc NULL. Crafted files: test_checkpoint_badfiles.c
 * runs it on every case. */
static void assert_desc_matches(const lt_ckpt_tensor_desc *d, const lt_tensor *t, const char *name) {
  ck_assert_msg(d->dtype == t->dtype, "%s: dtype %d, saved %d", name, (int)d->dtype, (int)t->dtype);
  ck_assert_msg(d->ndim == t->ndim, "%s: rank %d, saved %d", name, d->ndim, t->ndim);
  for (int k = 0; k < t->ndim; k++) ck_assert_int_eq(d->shape[k], t->shape[k]);
  ck_assert_int_eq(d->numel, t->numel);
  ck_assert_uint_eq(d->bytes, (uint64_t)t->numel * lt_dtype_size(t->dtype));
}

START_TEST(describe_lists_params) {
  lt_params *pa = make_model(11);
  lt_ckpt_meta *cfgm = make_config(V);
  const char *mp = ckpt_path("model.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_params(mp, pa, cfgm, NULL));
  lt_ckpt_desc *d = NULL;
  LT_OK_OR_FAIL(lt_ckpt_describe(mp, NULL, &d));
  ck_assert(!d->training);
  ck_assert_int_eq(d->format_version, LT_CKPT_FORMAT_VERSION);
  ck_assert_str_eq(d->library_version, lt_version());
  int64_t iv;
  const char *sv;
  LT_OK_OR_FAIL(lt_ckpt_meta_get_int(d->config, "vocab_size", &iv));
  ck_assert_int_eq(iv, V);
  LT_OK_OR_FAIL(lt_ckpt_meta_get_string(d->config, "activation", &sv));
  ck_assert_str_eq(sv, "gelu");
  ck_assert_int_eq(lt_ckpt_meta_count(d->config), lt_ckpt_meta_count(cfgm));
  ck_assert_int_eq(d->n_tensors, lt_params_count(pa));
  int64_t elems = 0;
  for (int i = 0; i < d->n_tensors; i++) {
    if (i) ck_assert_msg(strcmp(d->tensors[i - 1].name, d->tensors[i].name) < 0, "not sorted at %d", i);
    const lt_tensor *t = lt_params_find(pa, d->tensors[i].name);
    ck_assert_msg(t != NULL, "'%s' is not in the store", d->tensors[i].name);
    assert_desc_matches(&d->tensors[i], t, d->tensors[i].name);
    elems += t->numel;
  }
  ck_assert_int_eq(d->model_elements, elems);
  ck_assert_ptr_null(d->optim_kind);
  ck_assert_int_eq(d->n_optim, 0);
  lt_ckpt_desc_free(d);

  /* a training checkpoint: the optimizer's states too */
  lt_optim_config cfg = lt_optim_defaults(LT_OPTIM_ADAMW);
  lt_optimizer *oa = lt_optimizer_new(pa, &cfg);
  lt_schedule sc = {.kind = LT_SCHED_CONSTANT, .base_lr = 1e-3};
  lt_train_state sa = {.params = pa, .optim = oa, .optim_config = &cfg, .schedule = &sc};
  train_steps_skip(pa, oa, &sc, &sa.step, 3, skipped);
  const char *tp = ckpt_path("train.h5");
  LT_OK_OR_FAIL(lt_ckpt_save_training(tp, &sa, cfgm, NULL, NULL));
  LT_OK_OR_FAIL(lt_ckpt_describe(tp, NULL, &d));
  ck_assert(d->training);
  ck_assert_int_eq(d->n_tensors, lt_params_count(pa));
  ck_assert_str_eq(d->optim_kind, "adamw");
  ck_assert_int_eq(d->optim_step, 3);
  static const char *const states[] = {"exp_avg", "exp_avg_sq", "step"};
  int held = 0;
  for (int i = 0; i < lt_params_count(pa); i++)
    for (int k = 0; k < 3; k++) held += lt_optimizer_state(oa, lt_params_at(pa, i)->name, states[k]) != NULL;
  ck_assert_int_gt(held, 0);
  ck_assert_int_eq(d->n_optim, held);
  for (int i = 0; i < d->n_optim; i++) {
    char name[256];
    snprintf(name, sizeof name, "%s", d->optim[i].name);
    char *dot = strrchr(name, '.');
    ck_assert_ptr_nonnull(dot);
    *dot = '\0';
    const lt_tensor *t = lt_optimizer_state(oa, name, dot + 1);
    ck_assert_msg(t != NULL, "'%s' is not a state of the optimizer", d->optim[i].name);
    assert_desc_matches(&d->optim[i], t, d->optim[i].name);
  }
  lt_ckpt_desc_free(d);

  /* errors: *desc NULL, a message */
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.max_bytes = 64; /* less than the list of names */
  d = (lt_ckpt_desc *)1;
  ck_assert_int_eq(lt_ckpt_describe(tp, &lo, &d), LT_ERR_NOMEM);
  ck_assert_ptr_null(d);
  ck_assert_ptr_nonnull(strstr(lt_last_error(), "memory cap"));
  d = (lt_ckpt_desc *)1;
  ck_assert_int_eq(lt_ckpt_describe(ckpt_path("absent.h5"), NULL, &d), LT_ERR_IO);
  ck_assert_ptr_null(d);
  lt_clear_error();
  ck_assert_int_eq(lt_ckpt_describe(NULL, NULL, &d), LT_ERR_NULL);
  lt_clear_error();
  ck_assert_int_eq(lt_ckpt_describe(tp, NULL, NULL), LT_ERR_NULL);
  lt_clear_error();
  lt_ckpt_desc_free(NULL);
  lt_optimizer_free(oa);
  lt_ckpt_meta_free(cfgm);
  lt_params_free(pa);
}
END_TEST

static herr_t list_cb(hid_t obj, const char *name, const H5O_info_t *info, void *data) {
  name_list *l = data;
  if (info->type != H5O_TYPE_DATASET) return 0;
  ck_assert_int_lt(l->n, 256);
  hid_t d = H5Dopen2(obj, name, H5P_DEFAULT), sp = H5Dget_space(d);
  snprintf(l->name[l->n], 128, "%s", name);
  for (char *c = l->name[l->n]; *c; c++)
    if (*c == '/') *c = '.';
  l->ndim[l->n] = H5Sget_simple_extent_ndims(sp);
  H5Sget_simple_extent_dims(sp, l->dims[l->n], NULL);
  l->n++;
  H5Sclose(sp);
  H5Dclose(d);
  return 0;
}

static double fx_num(const lt_fixture *f, const char *c, const char *key) {
  char name[256];
  double v = 0;
  snprintf(name, sizeof name, "%s.cfg.%s", c, key);
  LT_OK_OR_FAIL(lt_fixture_scalar(f, name, &v));
  return v;
}

START_TEST(transformer_names_match_pytorch) {
  char fpath[1024];
  lt_fixture *f = lt_fixture_load(lt_fixture_path("transformer.bin", fpath, sizeof fpath));
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  int cases = 0;
  for (int r = 0; r < lt_fixture_count(f); r++) {
    const char *rec = lt_fixture_name(f, r), *dot = strstr(rec, ".cfg.arch");
    if (!dot || dot[9]) continue;
    char c[128];
    snprintf(c, sizeof c, "%.*s", (int)(dot - rec), rec);
    lt_tf_config g = {0}; /* fields the fixture lacks (BERT's extras) stay 0 */
#define I(k) ((int64_t)fx_num(f, c, #k))
    g.arch = (lt_tf_arch)I(arch), g.vocab_size = I(vocab_size), g.d_model = I(d_model), g.n_heads = I(n_heads);
    g.n_kv_heads = I(n_kv_heads), g.n_enc_layers = I(n_enc_layers), g.n_dec_layers = I(n_dec_layers);
    g.d_ff = I(d_ff), g.max_len = I(max_len), g.n_classes = I(n_classes), g.dropout = fx_num(f, c, "dropout");
    g.norm = (lt_tf_norm)I(norm), g.pre_norm = I(pre_norm) != 0, g.act = (lt_activation)I(act);
    g.swiglu = I(swiglu) != 0, g.pos = (lt_tf_pos)I(pos), g.tie_embeddings = I(tie_embeddings) != 0;
    g.scale_embeddings = I(scale_embeddings) != 0, g.bias = I(bias) != 0, g.norm_eps = fx_num(f, c, "norm_eps");
    g.rope_base = fx_num(f, c, "rope_base"), g.pad_id = I(pad_id);
#undef I
    lt_generator *gen = lt_generator_new(1);
    lt_transformer *m = lt_transformer_new(&g, gen);
    ck_assert_msg(m != NULL, "%s: %s", c, lt_last_error());
    LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("tf.h5"), lt_transformer_params(m), NULL, NULL));
    hid_t h = H5Fopen(ckpt_path("tf.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t grp = H5Gopen2(h, "/model", H5P_DEFAULT);
    name_list *l = calloc(1, sizeof *l);
    ck_assert_int_ge(H5Ovisit(grp, H5_INDEX_NAME, H5_ITER_INC, list_cb, l), 0);
    H5Gclose(grp);
    H5Fclose(h);
    char prefix[160];
    int np = snprintf(prefix, sizeof prefix, "%s.param.", c), in_torch = 0;
    for (int i = 0; i < lt_fixture_count(f); i++) {
      const char *n = lt_fixture_name(f, i);
      if (strncmp(n, prefix, (size_t)np)) continue;
      in_torch++;
      int k = -1;
      for (int j = 0; j < l->n; j++)
        if (!strcmp(l->name[j], n + np)) k = j;
      ck_assert_msg(k >= 0, "%s: PyTorch's %s is not in the file", c, n + np);
      lt_tensor *t = LT_NN(lt_fixture_get(f, n));
      ck_assert_int_eq(l->ndim[k], t->ndim);
      for (int d = 0; d < t->ndim; d++)
        ck_assert_msg((int64_t)l->dims[k][d] == t->shape[d], "%s: %s dim %d", c, n + np, d);
      lt_tensor_free(t);
    }
    ck_assert_msg(in_torch == l->n, "%s: %d datasets in the file, %d parameters in PyTorch", c, l->n, in_torch);
    free(l);
    lt_transformer_free(m);
    lt_generator_free(gen);
    cases++;
  }
  ck_assert_int_gt(cases, 2);
  printf("transformer_names_match_pytorch: %d PyTorch models, names and shapes equal\n", cases);
  lt_fixture_free(f);
}
END_TEST

/* lt_ckpt_seal adopts a file written by another tool with a 512-byte user
 * block and our layout (what h5py would write: ckpt_write_h5py). h5py's
 * default (unchecksummed) layout is refused with a hint unless
 * allow_unchecksummed; libver 'latest' loads. */
START_TEST(seal_foreign_file) {
  lt_params *m = lt_params_new(), *src = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(m, "layer.weight", lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3)), 0));
  const float w[6] = {1, 2, 3, 4, 5, 6};
  LT_OK_OR_FAIL(lt_params_add(src, "layer.weight", lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), w), 0));
  for (int latest = 0; latest < 2; latest++) {
    const char *p = ckpt_path(latest ? "foreign-latest.h5" : "foreign.h5");
    ckpt_write_h5py(p, src, latest);
    memset(lt_params_find(m, "layer.weight")->data, 0, 6 * sizeof(float));
    LT_EXPECT_ERR(lt_ckpt_load_params(p, m, NULL, NULL), LT_ERR_FORMAT, "no libtensor integrity header");
    LT_OK_OR_FAIL(lt_ckpt_seal(p));
    lt_ckpt_info *info = NULL;
    lt_ckpt_load_opts o = LT_CKPT_LOAD_DEFAULTS;
    if (!latest) {
      ck_assert_int_eq(lt_ckpt_load_params(p, m, NULL, &info), LT_ERR_FORMAT);
      const char *e = lt_last_error();
      ck_assert_msg(strstr(e, "version-0 superblock and unchecksummed object headers") &&
                        strstr(e, "h5repack --latest") && strstr(e, "allow_unchecksummed"),
                    "no reason or rewrite hint: %s", e);
      ck_assert_ptr_null(info);
      LT_ASSERT_VALUES(lt_params_find(m, "layer.weight"), 0, 0, 0, 0, 0, 0, 0);
      o.allow_unchecksummed = true;
    }
    LT_OK_OR_FAIL(lt_ckpt_load_params(p, m, &o, &info));
    LT_ASSERT_VALUES(lt_params_find(m, "layer.weight"), 0, 1, 2, 3, 4, 5, 6);
    ck_assert_str_eq(info->library_version, "h5py");
    int64_t b = -1; /* h5py's bools are ints 0/1 */
    LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->config, "pre_norm", &b));
    ck_assert_int_eq(b, 1);
    LT_OK_OR_FAIL(lt_ckpt_meta_get_int(info->config, "bias", &b));
    ck_assert_int_eq(b, 0);
    ck_assert_int_eq(info->model_tensors, 1);
    ck_assert_int_eq(info->model_elements, 6);
    ck_assert_int_eq((int64_t)info->model_bytes, 24);
    lt_ckpt_info_free(info);
  }
  /* A file without a user block cannot be sealed. */
  hid_t f = H5Fcreate(ckpt_path("noub.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  LT_EXPECT_ERR(lt_ckpt_seal(ckpt_path("noub.h5")), LT_ERR_FORMAT, "user block");
  lt_params_free(m);
  lt_params_free(src);
}
END_TEST

/* HDF5's error printing is restored after our calls. */
static int custom_calls;
static herr_t custom_auto(hid_t stack, void *data) {
  custom_calls++;
  return 0;
}

START_TEST(hdf5_state_restored) {
  H5Eset_auto2(H5E_DEFAULT, custom_auto, NULL);
  lt_params *a = make_model(5);
  LT_OK_OR_FAIL(lt_ckpt_save_params(ckpt_path("r.h5"), a, NULL, NULL));
  FILE *f = fopen(ckpt_path("bad.h5"), "w");
  fputs("not a checkpoint at all, but long enough? no.", f);
  fclose(f);
  LT_EXPECT_ERR(lt_ckpt_load_params(ckpt_path("bad.h5"), a, NULL, NULL), LT_ERR_FORMAT, NULL);
  ck_assert_int_eq(custom_calls, 0);
  H5E_auto2_t fn;
  void *data;
  H5Eget_auto2(H5E_DEFAULT, &fn, &data);
  ck_assert(fn == custom_auto);
  unsigned plugins = 0;
  H5PLget_loading_state(&plugins);
  ck_assert_uint_ne(plugins, 0);
  H5Fopen(ckpt_path("bad.h5"), H5F_ACC_RDONLY, H5P_DEFAULT); /* fails, through our handler */
  ck_assert_int_gt(custom_calls, 0);
  lt_params_free(a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, ckpt_tmpdir_make, ckpt_tmpdir_remove);
  tcase_add_test(tc, meta_basics);
  tcase_add_test(tc, params_roundtrip);
  tcase_add_test(tc, params_noncontiguous_and_scope);
  tcase_add_test(tc, names_match_state_dict);
  tcase_add_test(tc, strict_and_non_strict);
  tcase_add_test(tc, save_errors);
  tcase_add_test(tc, training_roundtrip_and_resume);
  tcase_add_test(tc, training_fresh_and_sgd);
  tcase_add_test(tc, training_resume_with_skipped_params);
  tcase_add_test(tc, training_reads_format_version_1);
  tcase_add_test(tc, training_reads_old_schedule_names);
  tcase_add_test(tc, f64_model_roundtrip);
  tcase_add_test(tc, tokenizer_and_loader_in_extra);
  tcase_add_test(tc, numbered_rotation_latest);
  tcase_add_test(tc, live_temporary_kept);
  tcase_add_test(tc, write_failure_keeps_previous);
  tcase_add_test(tc, full_disk_keeps_previous);
  tcase_add_test(tc, transformer_names_match_pytorch);
  tcase_add_test(tc, seal_foreign_file);
  tcase_add_test(tc, hdf5_state_restored);
  tcase_add_test(tc, describe_lists_params);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
