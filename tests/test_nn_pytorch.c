/*
 * tests/test_nn_pytorch.c: nn/ against PyTorch, through the fixtures written
 * by tests/fixtures/make_nn_fixtures.py (read by tests/util_fixtures.c).
 *
 * Every case loads fixed inputs and parameters (written into the tensors that
 * the modules' _init registered, by state_dict name), runs forward and
 * backward (with the fixture's dout) and compares outputs, input gradients and
 * parameter gradients; optimizers are followed for 10 steps, schedules over 30.
 * Tolerances (|got - want| <= rtol * |want| + rtol * max|want|): f32 outputs
 * 1e-5, f32 gradients 1e-4, parameters after optimizer steps 1e-5; f64 1e-9.
 * A mismatch prints the case, the tensor, the first differing elements and the
 * max absolute and relative differences, and the test goes on with the other
 * cases so that one run lists them all (set LT_FIXTURE_VERBOSE=1 to print the
 * max difference of every comparison).
 *
 * Functional cases run twice: with contiguous inputs and with every float
 * input given a strided (non-contiguous) layout.
 *
 * Also here: the fixture reader's own tests (round trip, every truncation,
 * corruptions), dropout (eval, p = 0 / 1, the statistics of the random mask),
 * initialiser bounds and statistics, lt_optim_defaults.
 *
 * What this is not: the per-op tests (values, errors, gradchecks) of nn/,
 * which live with each implementation.
 */
#include "nn/conv.h"
#include "test_util.h"
#include "util_fixtures.h"
#include "util_fxcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/nn.h"

#define RTOL_OUT32 1e-5
#define RTOL_GRAD32 1e-4
#define RTOL_PARAM32 1e-5
#define RTOL_64 1e-9

/* ---- comparison that reports and goes on (util_fxcheck.h) --------------- */

static int g_layout;    /* 0: contiguous inputs, 1: strided views */

static bool fx_close(const char *label, const lt_tensor *got, const lt_tensor *want, double rtol) {
  return lt_fx_close(label, got, want, rtol, 0);
}

/* A copy of t whose last dim has stride 2 (a sliced view of a bigger buffer):
 * same values, not contiguous. 0-d and non-float tensors are just cloned. */
static lt_tensor *strided_copy(const lt_tensor *t) {
  if (t->ndim == 0 || !lt_dtype_is_float(t->dtype)) return LT_NN(lt_clone(t));
  int64_t sh[LT_MAX_DIMS];
  memcpy(sh, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  sh[t->ndim - 1] *= 2;
  lt_tensor *big = LT_NN(lt_full(t->dtype, t->ndim, sh, 1e30));
  lt_tensor *v = LT_NN(lt_slice(big, -1, 0, sh[t->ndim - 1], 2));
  lt_tensor_free(big);
  LT_OK_OR_FAIL(lt_copy_(v, t));
  return v;
}

/* ---- cases -------------------------------------------------------------- */

#define FX_MAX_IN 16

typedef struct fx_case {
  const lt_fixture *fx;
  char name[128];
  int n;
  char key[FX_MAX_IN][48];
  lt_tensor *t[FX_MAX_IN];
  lt_params *params;  /* the module's store, or NULL */
} fx_case;

static const char *rec(const fx_case *c, const char *suffix, char *buf, size_t n) {
  snprintf(buf, n, "%s.%s", c->name, suffix);
  return buf;
}
static bool fx_has(const fx_case *c, const char *suffix) {
  char b[512];
  return lt_fixture_has(c->fx, rec(c, suffix, b, sizeof b));
}
static bool fx_has_t(const fx_case *c, const char *key);
/* The record <case>.<suffix> as a new tensor (the test fails if absent). */
static lt_tensor *fx_get(const fx_case *c, const char *suffix) {
  char b[512];
  lt_tensor *t = lt_fixture_get(c->fx, rec(c, suffix, b, sizeof b));
  if (!t) ck_abort_msg("%s", lt_last_error());
  return t;
}
static double fx_num(const fx_case *c, const char *suffix) {
  char b[512];
  double v;
  if (lt_fixture_scalar(c->fx, rec(c, suffix, b, sizeof b), &v) != LT_OK) ck_abort_msg("%s", lt_last_error());
  return v;
}

/* The script's hashgen: element i is (2u - 1) * scale with
 * u = ((i * 2654435761 + seed * 97531) mod 2^32) / 2^32, in double, rounded
 * once to dtype. Big cases store this recipe instead of their inputs. */
static lt_tensor *hashgen(int ndim, const int64_t *shape, int64_t seed, double scale, lt_dtype dt) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(v);
  for (int64_t i = 0; i < n; i++) {
    uint64_t h = ((uint64_t)i * 2654435761u + (uint64_t)seed * 97531u) % 4294967296u;
    v[i] = (2.0 * ((double)h / 4294967296.0) - 1.0) * scale;
  }
  lt_tensor *t64 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, ndim, shape, v));
  free(v);
  lt_tensor *t = LT_NN(lt_to_dtype(t64, dt));
  lt_tensor_free(t64);
  return t;
}

/* A tensor of shape (ndim, shape) from the recipe record <case>.<key>
 * ([seed, scale, dtype]). */
static lt_tensor *fx_gen(const fx_case *c, const char *key, int ndim, const int64_t *shape) {
  lt_tensor *g = fx_get(c, key);
  double r[3];
  ck_assert_msg(g->numel == 3, "%s.%s: a recipe has 3 numbers", c->name, key);
  LT_OK_OR_FAIL(lt_tensor_read(g, LT_DTYPE_F64, r, 3));
  lt_tensor_free(g);
  return hashgen(ndim, shape, (int64_t)r[0], r[1], (lt_dtype)r[2]);
}

/* Input k (<case>.in.<k>, or regenerated from <case>.in.<k>.gen), laid out
 * as g_layout says, requiring grad if the fixture has its gradient; NULL if
 * the case has no such input. */
static lt_tensor *fx_in_opt(fx_case *c, const char *k) {
  char s[96];
  lt_tensor *t;
  snprintf(s, sizeof s, "in.%s", k);
  if (fx_has(c, s)) {
    t = fx_get(c, s);
  } else {
    snprintf(s, sizeof s, "in.%s.shape", k);
    if (!fx_has(c, s)) return NULL;
    lt_tensor *sh = fx_get(c, s);
    int64_t shape[LT_MAX_DIMS];
    ck_assert(sh->numel <= LT_MAX_DIMS);
    LT_OK_OR_FAIL(lt_tensor_read(sh, LT_DTYPE_I64, shape, LT_MAX_DIMS));
    snprintf(s, sizeof s, "in.%s.gen", k);
    t = fx_gen(c, s, (int)sh->numel, shape);
    lt_tensor_free(sh);
  }
  if (g_layout == 1) {
    lt_tensor *u = strided_copy(t);
    lt_tensor_free(t);
    t = u;
  }
  snprintf(s, sizeof s, "grad.%s", k);
  if (fx_has_t(c, s)) LT_OK_OR_FAIL(lt_requires_grad_(t, true));
  ck_assert(c->n < FX_MAX_IN);
  snprintf(c->key[c->n], sizeof c->key[0], "%s", k);
  c->t[c->n++] = t;
  return t;
}
static lt_tensor *fx_in(fx_case *c, const char *k) {
  lt_tensor *t = fx_in_opt(c, k);
  if (!t) ck_abort_msg("%s: no input %s", c->name, k);
  return t;
}

/* Copies every <case>.param.<name> into the store's tensor of that name
 * (which must exist with the same shape) and checks that the store has no
 * parameter the fixture lacks: the names are PyTorch's state_dict names. */
static void fx_load_params(fx_case *c, lt_params *p) {
  char pre[160];
  int np = 0;
  snprintf(pre, sizeof pre, "%s.param.", c->name);
  size_t pl = strlen(pre);
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < lt_fixture_count(c->fx); i++) {
    const char *nm = lt_fixture_name(c->fx, i);
    if (strncmp(nm, pre, pl) != 0) continue;
    lt_tensor *dst = lt_params_find(p, nm + pl);
    if (!dst) ck_abort_msg("%s: the module has no parameter \"%s\" (PyTorch's state_dict name)", c->name, nm + pl);
    lt_tensor *src = LT_NN(lt_fixture_get(c->fx, nm));
    char s1[64], s2[64];
    ck_assert_msg(src->ndim == dst->ndim && !memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)src->ndim),
                  "%s: parameter %s is %s, PyTorch's is %s", c->name, nm + pl,
                  lt_shape_str(dst->ndim, dst->shape, s1, sizeof s1), lt_shape_str(src->ndim, src->shape, s2, sizeof s2));
    LT_OK_OR_FAIL(lt_copy_(dst, src));
    lt_tensor_free(src);
    np++;
  }
  lt_set_grad_enabled(prev);
  int trainable = 0;
  for (int i = 0; i < lt_params_count(p); i++)
    if (!(lt_params_at(p, i)->flags & LT_PARAM_BUFFER)) trainable++;
  for (int i = 0; i < lt_params_count(p) && trainable != np; i++)
    printf("  store has %s\n", lt_params_at(p, i)->name);
  ck_assert_msg(trainable == np, "%s: the store has %d parameters, PyTorch's module %d", c->name, trainable, np);
  c->params = p;
}

static double rtol_for(const lt_tensor *t, double rtol32) {
  return t && t->dtype == LT_DTYPE_F64 ? RTOL_64 : rtol32;
}

/* Whether the case records tensor key, in full or summarised. */
static bool fx_has_t(const fx_case *c, const char *key) {
  char b[256];
  snprintf(b, sizeof b, "%s.rowsum", key);
  return fx_has(c, key) || fx_has(c, b);
}

/* Compares got with the record <case>.<key>, or with its summary
 * (<key>.rowsum: sums over the last dim in double; <key>.sample: every
 * format.sample_stride-th element), as the script wrote it. */
static void fx_cmp(fx_case *c, const char *key, const lt_tensor *got, double rtol32, double floor, const char *note) {
  char label[512], k2[256];
  snprintf(label, sizeof label, "%s%s.%s%s", c->name, g_layout ? " (strided)" : "", key, note);
  if (fx_has(c, key) || !got) {
    lt_tensor *want = fx_get(c, fx_has(c, key) ? key : strcat(strcpy(k2, key), ".rowsum"));
    lt_fx_close(label, got, want, rtol_for(want, rtol32), floor);
    lt_tensor_free(want);
    return;
  }
  double stride_d;
  LT_OK_OR_FAIL(lt_fixture_scalar(c->fx, "format.sample_stride", &stride_d));
  const int64_t stride = (int64_t)stride_d, n = got->numel;
  const int64_t cols = got->ndim ? got->shape[got->ndim - 1] : 1, rows = cols ? n / cols : 0;
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1)), *rs = calloc((size_t)(rows ? rows : 1), sizeof(double));
  ck_assert(v && rs);
  LT_OK_OR_FAIL(lt_tensor_read(got, LT_DTYPE_F64, v, n));
  /* A row sum can cancel to zero in exact arithmetic (the rows of a layer
   * norm's or a softmax's input gradient): its error scale is sum |v|. */
  double rowabs = 0;
  for (int64_t r = 0; r < rows; r++) {
    double a = 0;
    for (int64_t j = 0; j < cols; j++) {
      rs[r] += v[r * cols + j];
      a += fabs(v[r * cols + j]);
    }
    rowabs = fmax(rowabs, a);
  }
  int64_t ns = (n + stride - 1) / stride;
  for (int64_t i = 0; i < ns; i++) v[i] = v[i * stride];
  lt_tensor *got_rs = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, 1, &rows, rs));
  lt_tensor *got_s = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, 1, &ns, v));
  free(v);
  free(rs);
  snprintf(k2, sizeof k2, "%s.rowsum", key);
  lt_tensor *want_rs = fx_get(c, k2);
  snprintf(k2, sizeof k2, "%s.sample", key);
  lt_tensor *want_s = fx_get(c, k2);
  const double rtol = got->dtype == LT_DTYPE_F64 ? RTOL_64 : rtol32;
  char l2[600];
  snprintf(l2, sizeof l2, "%s (row sums)", label);
  lt_fx_close(l2, got_rs, want_rs, rtol, rowabs * (got->dtype == LT_DTYPE_F64 ? 1e-12 : 1e-5));
  snprintf(l2, sizeof l2, "%s (every %lld-th element)", label, (long long)stride);
  lt_fx_close(l2, got_s, want_s, rtol, floor);
  lt_tensor_free(got_rs);
  lt_tensor_free(got_s);
  lt_tensor_free(want_rs);
  lt_tensor_free(want_s);
}

/* Compares got with <case>.<key>; note (may be "") is added to the label. */
static void fx_check_note(fx_case *c, const char *key, const lt_tensor *got, const char *note) {
  fx_cmp(c, key, got, RTOL_OUT32, 0, note);
}
static void fx_check_extra(fx_case *c, const char *key, const lt_tensor *got) { fx_check_note(c, key, got, ""); }

/* The largest |value| over the case's gradient records. */
static double grad_scale(const fx_case *c) {
  char pre[192];
  snprintf(pre, sizeof pre, "%s.grad.", c->name);
  size_t pl = strlen(pre);
  double m = 0;
  for (int i = 0; i < lt_fixture_count(c->fx); i++) {
    const char *nm = lt_fixture_name(c->fx, i);
    size_t len = strlen(nm);
    if (strncmp(nm, pre, pl) != 0 || (len > 7 && strcmp(nm + len - 7, ".rowsum") == 0)) continue;
    lt_tensor *t = LT_NN(lt_fixture_get(c->fx, nm));
    if (t->numel == 0) {
      lt_tensor_free(t);
      continue;
    }
    lt_tensor *a = LT_NN(lt_amax(LT_NN(lt_abs(t)), 0, NULL, false));
    double v;
    LT_OK_OR_FAIL(lt_item(a, &v));
    if (v > m) m = v;
    lt_tensor_free(t);
  }
  return m;
}

/* Compares out with <case>.out, runs backward with <case>.dout (if any) and
 * compares the gradients of the inputs and of the module's parameters.
 *
 * A gradient that is zero in exact arithmetic (k_proj.bias in attention:
 * softmax ignores a shift shared by all keys) is f32 rounding noise in both
 * libraries, so gradients also get an absolute floor of 1e-5 (f64: 1e-12)
 * times the case's largest gradient. */
static void fx_check(fx_case *c, lt_tensor *out) {
  char key[192];
  fx_check_extra(c, "out", out);
  if (!out || !(fx_has(c, "dout") || fx_has(c, "dout.gen"))) return;
  const double floor = grad_scale(c) * (out->dtype == LT_DTYPE_F64 ? 1e-12 : 1e-5);
  lt_tensor *dout = fx_has(c, "dout") ? fx_get(c, "dout") : fx_gen(c, "dout.gen", out->ndim, out->shape);
  lt_status st = lt_backward(out, dout, false);
  lt_tensor_free(dout);
  if (st != LT_OK) {
    printf("MISMATCH %s: backward failed: %s: %s\n", c->name, lt_status_name(st), lt_last_error());
    lt_fx_failures++;
    return;
  }
  for (int i = 0; i < c->n; i++) {
    snprintf(key, sizeof key, "grad.%s", c->key[i]);
    if (!fx_has_t(c, key)) continue;
    lt_tensor *got = c->t[i]->grad ? c->t[i]->grad : LT_NN(lt_zeros_like(c->t[i]));
    fx_cmp(c, key, got, RTOL_GRAD32, floor, "");
    if (got != c->t[i]->grad) lt_tensor_free(got);
  }
  if (!c->params) return;
  for (int i = 0; i < lt_params_count(c->params); i++) {
    const lt_param *p = lt_params_at(c->params, i);
    snprintf(key, sizeof key, "grad.param.%s", p->name);
    if (!fx_has_t(c, key)) continue;
    lt_tensor *got = p->value->grad ? p->value->grad : LT_NN(lt_zeros_like(p->value));
    fx_cmp(c, key, got, RTOL_GRAD32, floor, "");
    if (got != p->value->grad) lt_tensor_free(got);
  }
}

/* A case body: builds what it needs from c (inputs, a module in a store it
 * creates and frees), calls fx_check. */
typedef void (*fx_body)(fx_case *c);

/* Runs body for every case of fx whose name starts with prefix (a case is
 * found by its "<case>.out" record), each inside a scope. Returns the count. */
static int run_cases(const lt_fixture *fx, const char *prefix, fx_body body) {
  int ran = 0;
  size_t pl = strlen(prefix);
  for (int i = 0; i < lt_fixture_count(fx); i++) {
    const char *nm = lt_fixture_name(fx, i);
    size_t len = strlen(nm), cut;
    if (strncmp(nm, prefix, pl) != 0) continue;
    if (len > 4 && strcmp(nm + len - 4, ".out") == 0)
      cut = 4;
    else if (len > 11 && strcmp(nm + len - 11, ".out.rowsum") == 0)
      cut = 11;
    else
      continue;
    fx_case c;
    memset(&c, 0, sizeof c);
    c.fx = fx;
    ck_assert(len - cut < sizeof c.name);
    memcpy(c.name, nm, len - cut);
    c.name[len - cut] = '\0';
    lt_scope *s = lt_scope_begin();
    body(&c);
    lt_scope_end(s);
    lt_clear_error();
    ran++;
  }
  ck_assert_msg(ran > 0, "no fixture case starts with %s", prefix);
  return ran;
}

/* ---- the fixture reader ------------------------------------------------- */

/* Appends one record to buf (little-endian). */
static size_t put_record(unsigned char *buf, size_t pos, const char *name, int dtype, int ndim,
                         const int64_t *shape, const void *data, size_t nbytes) {
  uint32_t nl = (uint32_t)strlen(name);
  for (int i = 0; i < 4; i++) buf[pos++] = (unsigned char)(nl >> (8 * i));
  memcpy(buf + pos, name, nl);
  pos += nl;
  buf[pos++] = (unsigned char)dtype;
  buf[pos++] = (unsigned char)ndim;
  for (int d = 0; d < ndim; d++)
    for (int i = 0; i < 8; i++) buf[pos++] = (unsigned char)((uint64_t)shape[d] >> (8 * i));
  if (nbytes) memcpy(buf + pos, data, nbytes); /* the test host is little-endian (checked) */
  return pos + nbytes;
}
static size_t put_header(unsigned char *buf, uint32_t version, uint32_t count) {
  memcpy(buf, "LTFX", 4);
  for (int i = 0; i < 4; i++) buf[4 + i] = (unsigned char)(version >> (8 * i));
  for (int i = 0; i < 4; i++) buf[8 + i] = (unsigned char)(count >> (8 * i));
  return 12;
}

/* A small valid file: three records (f32 [2,3], 0-d i64, bool [2]). */
static size_t sample_file(unsigned char *buf) {
  const float a[6] = {1, 2, 3, 4, 5, 6.5f};
  const int64_t s = -7;
  const unsigned char bl[2] = {1, 0};
  size_t pos = put_header(buf, 1, 3);
  pos = put_record(buf, pos, "a.x", 0, 2, (const int64_t[]){2, 3}, a, sizeof a);
  pos = put_record(buf, pos, "a.s", 3, 0, NULL, &s, sizeof s);
  pos = put_record(buf, pos, "a.b", 4, 1, (const int64_t[]){2}, bl, sizeof bl);
  return pos;
}

START_TEST(test_reader_round_trip) {
  const uint16_t one = 1;
  ck_assert_msg(*(const unsigned char *)&one == 1, "these hand-made files assume a little-endian host");
  unsigned char buf[512];
  size_t n = sample_file(buf);
  lt_fixture *f = lt_fixture_parse(buf, n, "sample");
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  ck_assert_int_eq(lt_fixture_count(f), 3);
  ck_assert_str_eq(lt_fixture_name(f, 0), "a.x");
  ck_assert_str_eq(lt_fixture_name(f, 2), "a.b");
  ck_assert_ptr_null(lt_fixture_name(f, 3));
  ck_assert_ptr_null(lt_fixture_name(f, -1));
  ck_assert(lt_fixture_has(f, "a.s") && !lt_fixture_has(f, "a"));
  lt_tensor *x = LT_NN(lt_fixture_get(f, "a.x"));
  ck_assert_int_eq(x->dtype, LT_DTYPE_F32);
  LT_ASSERT_SHAPE(x, 2, 3);
  LT_ASSERT_VALUES(x, 0, 1, 2, 3, 4, 5, 6.5);
  ck_assert(!x->requires_grad && lt_is_contiguous(x));
  lt_tensor *b = LT_NN(lt_fixture_get(f, "a.b"));
  ck_assert_int_eq(b->dtype, LT_DTYPE_BOOL);
  LT_ASSERT_VALUES(b, 0, 1, 0);
  double v;
  LT_OK_OR_FAIL(lt_fixture_scalar(f, "a.s", &v));
  ck_assert(v == -7);
  LT_EXPECT_ERR(lt_fixture_scalar(f, "a.x", &v), LT_ERR_SHAPE, "a.x");
  LT_EXPECT_ERR(lt_fixture_scalar(f, "nope", &v), LT_ERR_INDEX, "nope");
  LT_EXPECT_NULL_ERR(lt_fixture_get(f, "nope"), LT_ERR_INDEX, "no record \"nope\"");
  LT_EXPECT_NULL_ERR(lt_fixture_get(f, NULL), LT_ERR_NULL, NULL);
  lt_tensor_free(x);
  lt_tensor_free(b);
  lt_fixture_free(f);
  lt_fixture_free(NULL);
  /* An empty list is valid. */
  size_t e = put_header(buf, 1, 0);
  f = lt_fixture_parse(buf, e, "empty");
  ck_assert_msg(f && lt_fixture_count(f) == 0, "%s", lt_last_error());
  lt_fixture_free(f);
}
END_TEST

START_TEST(test_reader_truncated) {
  unsigned char buf[512];
  size_t n = sample_file(buf);
  /* Every proper prefix fails cleanly (under ASan: no read past the end, since
   * each prefix is parsed from its own exact-size allocation). */
  for (size_t k = 0; k < n; k++) {
    unsigned char *cut = malloc(k ? k : 1);
    ck_assert(cut);
    memcpy(cut, buf, k);
    lt_fixture *f = lt_fixture_parse(cut, k, "cut");
    free(cut);
    ck_assert_msg(f == NULL, "a %zu-byte prefix of %zu parsed", k, n);
    ck_assert_int_eq(lt_last_status(), LT_ERR_FORMAT);
    lt_clear_error();
  }
  /* A truncated real fixture written to a file: load fails naming the problem. */
  char path[1024];
  lt_fixture_path("nn_functional.bin", path, sizeof path);
  FILE *in = fopen(path, "rb");
  ck_assert_msg(in != NULL, "%s", path);
  fseek(in, 0, SEEK_END);
  long size = ftell(in);
  fseek(in, 0, SEEK_SET);
  unsigned char *all = malloc((size_t)size);
  ck_assert(all && fread(all, 1, (size_t)size, in) == (size_t)size);
  fclose(in);
  char tmp[] = "/tmp/lt_fixture_XXXXXX";
  int fd = mkstemp(tmp);
  ck_assert(fd >= 0);
  FILE *out = fdopen(fd, "wb");
  ck_assert(out && fwrite(all, 1, (size_t)size / 2, out) == (size_t)size / 2);
  fclose(out);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_load(tmp), LT_ERR_FORMAT, "truncated");
  unlink(tmp);
  /* Cuts at many points of the real file (every byte of its first records). */
  for (long k = 0; k < size; k += (k < 600 ? 1 : 997)) {
    unsigned char *cut = malloc((size_t)(k ? k : 1));
    ck_assert(cut);
    memcpy(cut, all, (size_t)k);
    lt_fixture *f = lt_fixture_parse(cut, (size_t)k, "cut");
    free(cut);
    ck_assert_msg(f == NULL && lt_last_status() == LT_ERR_FORMAT, "prefix %ld of %ld", k, size);
    lt_clear_error();
  }
  lt_fixture *f = lt_fixture_parse(all, (size_t)size, path);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  lt_fixture_free(f);
  free(all);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_load("/nonexistent/fixture.bin"), LT_ERR_IO, "cannot open");
}
END_TEST

START_TEST(test_reader_corrupt) {
  unsigned char buf[512], bad[520];
  size_t n = sample_file(buf);
  /* Offsets in the sample: header 12; record "a.x": u32 at 12, name at 16,
   * dtype at 19, ndim at 20, shape at 21..36, data at 37..60. */
  struct {
    size_t at;
    unsigned char byte;
    const char *msg;
  } flips[] = {
      {0, 'X', "magic"},        {4, 2, "version 2"},      {8, 200, "records cannot fit"},
      {12, 0, "name length 0"}, {15, 0x10, "name length"}, {17, 0, "NUL"},
      {19, 9, "dtype code 9"},  {20, 9, "ndim 9"},        {28, 0x80, "negative size"},
      {22, 0x40, "bytes"},
  };
  for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
    memcpy(bad, buf, n);
    bad[flips[i].at] = flips[i].byte;
    LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, n, "bad"), LT_ERR_FORMAT, flips[i].msg);
  }
  /* A bool byte that is not 0/1. */
  memcpy(bad, buf, n);
  bad[n - 2] = 2;
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, n, "bad"), LT_ERR_FORMAT, "not 0 or 1");
  /* A trailing byte. */
  memcpy(bad, buf, n);
  bad[n] = 0;
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, n + 1, "bad"), LT_ERR_FORMAT, "trailing");
  /* A count that claims one record more than there is. */
  memcpy(bad, buf, n);
  bad[8] = 4;
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, n, "bad"), LT_ERR_FORMAT, "truncated");
  /* Duplicate names. */
  const int64_t s = 1;
  size_t pos = put_header(bad, 1, 2);
  pos = put_record(bad, pos, "d", 3, 0, NULL, &s, 8);
  pos = put_record(bad, pos, "d", 3, 0, NULL, &s, 8);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, pos, "bad"), LT_ERR_FORMAT, "twice");
  /* A shape whose element count overflows. */
  pos = put_header(bad, 1, 1);
  pos = put_record(bad, pos, "o", 0, 3, (const int64_t[]){1LL << 40, 1LL << 40, 1LL << 40}, NULL, 0);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, pos, "bad"), LT_ERR_FORMAT, "overflows");
  /* A size whose byte count overflows size_t. */
  pos = put_header(bad, 1, 1);
  pos = put_record(bad, pos, "o", 1, 1, (const int64_t[]){INT64_MAX / 2}, NULL, 0);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(bad, pos, "bad"), LT_ERR_FORMAT, "o");
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_fixture_parse(NULL, 4, "bad"), LT_ERR_NULL, NULL);
  /* Every byte set to each of a few values: a clean success or LT_ERR_FORMAT,
   * never a crash or an out-of-bounds read (ASan). */
  const unsigned char vals[] = {0, 1, 2, 4, 8, 0x7f, 0x80, 0xff};
  for (size_t at = 0; at < n; at++)
    for (size_t k = 0; k < sizeof vals; k++) {
      unsigned char *b = malloc(n);
      ck_assert(b);
      memcpy(b, buf, n);
      b[at] = vals[k];
      lt_fixture *f = lt_fixture_parse(b, n, "flip");
      free(b);
      if (f) {
        for (int i = 0; i < lt_fixture_count(f); i++) lt_tensor_free(LT_NN(lt_fixture_get(f, lt_fixture_name(f, i))));
        lt_fixture_free(f);
      } else {
        ck_assert_msg(lt_last_status() == LT_ERR_FORMAT, "byte %zu = %u: %s", at, vals[k], lt_last_error());
        lt_clear_error();
      }
    }
}
END_TEST

START_TEST(test_reader_real_files) {
  const char *files[] = {"nn_functional.bin", "nn_attention.bin", "nn_optim.bin", "nn_lce.bin"};
  for (int k = 0; k < 3; k++) {
    lt_fixture *f = lt_fx_open(files[k]);
    ck_assert_int_gt(lt_fixture_count(f), 100);
    for (int i = 0; i < lt_fixture_count(f); i++) {
      lt_tensor *t = lt_fixture_get(f, lt_fixture_name(f, i));
      ck_assert_msg(t != NULL, "%s: %s", lt_fixture_name(f, i), lt_last_error());
      lt_tensor_free(t);
    }
    lt_fixture_free(f);
  }
}
END_TEST

/* ---- functional ops and layers ------------------------------------------ */

static lt_generator *g_gen;
static lt_generator *gen(void) {
  if (!g_gen) g_gen = lt_generator_new(1234);
  return g_gen;
}

static void body_linear(fx_case *c) {
  fx_check(c, lt_linear(fx_in(c, "x"), fx_in(c, "weight"), fx_in_opt(c, "bias")));
}

static void body_linear_m(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_linear_m m;
  LT_OK_OR_FAIL(lt_linear_init(&m, p, "m", (int64_t)fx_num(c, "in_features"), (int64_t)fx_num(c, "out_features"),
                               fx_num(c, "bias") != 0, gen()));
  ck_assert((m.bias != NULL) == (fx_num(c, "bias") != 0));
  fx_load_params(c, p);
  fx_check(c, lt_linear_forward(&m, fx_in(c, "x")));
  lt_params_free(p);
}

static void body_layer_norm(fx_case *c) {
  fx_check(c, lt_layer_norm(fx_in(c, "x"), fx_in_opt(c, "weight"), fx_in_opt(c, "bias"), fx_num(c, "eps")));
}

static void body_layer_norm_m(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_layer_norm_m m;
  bool affine = fx_num(c, "affine") != 0;
  LT_OK_OR_FAIL(lt_layer_norm_init(&m, p, "m", (int64_t)fx_num(c, "C"), fx_num(c, "eps"), affine));
  ck_assert((m.weight != NULL) == affine && (m.bias != NULL) == affine);
  if (affine) { /* nn.LayerNorm's init: ones and zeros */
    lt_tensor *ones = LT_NN(lt_ones_like(m.weight)), *zeros = LT_NN(lt_zeros_like(m.bias));
    fx_close("layer_norm_m init weight (ones)", m.weight, ones, 0);
    fx_close("layer_norm_m init bias (zeros)", m.bias, zeros, 0);
  }
  fx_load_params(c, p);
  fx_check(c, lt_layer_norm_forward(&m, fx_in(c, "x")));
  lt_params_free(p);
}

static void body_rms_norm(fx_case *c) {
  fx_check(c, lt_rms_norm(fx_in(c, "x"), fx_in(c, "weight"), fx_num(c, "eps")));
}

static void body_rms_norm_m(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_rms_norm_m m;
  LT_OK_OR_FAIL(lt_rms_norm_init(&m, p, "m", (int64_t)fx_num(c, "C"), fx_num(c, "eps")));
  lt_tensor *ones = LT_NN(lt_ones_like(m.weight));
  fx_close("rms_norm_m init weight (ones)", m.weight, ones, 0);
  fx_load_params(c, p);
  fx_check(c, lt_rms_norm_forward(&m, fx_in(c, "x")));
  lt_params_free(p);
}

static void body_act(fx_case *c) {
  fx_check(c, lt_activation_forward((lt_activation)fx_num(c, "act"), fx_in(c, "x")));
}

static lt_cross_entropy_opts ce_opts(const fx_case *c) {
  lt_cross_entropy_opts o = LT_CROSS_ENTROPY_DEFAULTS;
  o.ignore_index = (int64_t)fx_num(c, "ignore_index");
  o.label_smoothing = fx_num(c, "label_smoothing");
  o.reduction = (lt_reduction)fx_num(c, "reduction");
  return o;
}
static void body_ce(fx_case *c) {
  lt_cross_entropy_opts o = ce_opts(c);
  lt_tensor *logits = fx_in(c, "logits"), *targets = fx_in(c, "targets");
  fx_check(c, lt_cross_entropy(logits, targets, &o));
  if (strcmp(c->name, "ce.ignore100.mean") == 0) /* opts NULL: PyTorch's defaults */
    fx_check_note(c, "out", lt_cross_entropy(logits, targets, NULL), " (opts NULL)");
}
static void body_nll(fx_case *c) {
  lt_cross_entropy_opts o = ce_opts(c);
  fx_check(c, lt_nll_loss(fx_in(c, "logp"), fx_in(c, "targets"), &o));
}
static void body_mse(fx_case *c) {
  fx_check(c, lt_mse_loss(fx_in(c, "input"), fx_in(c, "target"), (lt_reduction)fx_num(c, "reduction")));
}

static void body_embedding(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_embedding_m m;
  int64_t pad = (int64_t)fx_num(c, "padding_idx");
  LT_OK_OR_FAIL(lt_embedding_init(&m, p, "m", (int64_t)fx_num(c, "num"), (int64_t)fx_num(c, "dim"), pad, gen()));
  ck_assert_int_eq(m.padding_idx, pad);
  if (pad >= 0) { /* nn.Embedding zero-initialises the padding row */
    lt_tensor *row = LT_NN(lt_select(m.weight, 0, pad)), *zeros = LT_NN(lt_zeros_like(row));
    char label[512];
    snprintf(label, sizeof label, "%s: initial padding row", c->name);
    fx_close(label, row, zeros, 0);
  }
  fx_load_params(c, p);
  fx_check(c, lt_embedding_forward(&m, fx_in(c, "ids")));
  lt_params_free(p);
}

/* A test over groups of fixture cases from one file, in layout `layout`:
 * each {prefix, body} runs every case whose name starts with prefix. Ends
 * the test (failing it, naming what, if anything mismatched). */
typedef struct fx_group {
  const char *prefix;
  fx_body body;
} fx_group;
static void run_groups(const char *file, const char *what, int layout, const fx_group *groups, int n) {
  g_layout = layout;
  lt_fixture *f = lt_fx_open(file);
  for (int i = 0; i < n; i++) run_cases(f, groups[i].prefix, groups[i].body);
  lt_fixture_free(f);
  lt_generator_free(g_gen);
  g_gen = NULL;
  lt_fx_done(what);
}
#define RUN_GROUPS(file, what, ...)                                                      \
  run_groups((file), (what), _i, (const fx_group[]){__VA_ARGS__},                        \
             (int)(sizeof((const fx_group[]){__VA_ARGS__}) / sizeof(fx_group)))

START_TEST(test_linear) {
  RUN_GROUPS("nn_functional.bin", "linear", {"linear.", body_linear}, {"linear_m.", body_linear_m});
}
END_TEST

START_TEST(test_norms) {
  RUN_GROUPS("nn_functional.bin", "norms", {"layer_norm.", body_layer_norm},
             {"layer_norm_m.", body_layer_norm_m},
             {"rms_norm.", body_rms_norm},
             {"rms_norm_m", body_rms_norm_m});
}
END_TEST

START_TEST(test_activations) {
  RUN_GROUPS("nn_functional.bin", "activations", {"act.", body_act});
}
END_TEST

START_TEST(test_losses) {
  RUN_GROUPS("nn_functional.bin", "losses", {"ce.", body_ce}, {"nll.", body_nll}, {"mse.", body_mse});
}
END_TEST

/* nn_lce.bin: the chunked head against F.cross_entropy(h @ w.T, targets). */
static void body_lce(fx_case *c) {
  lt_cross_entropy_opts o = ce_opts(c);
  fx_check(c, lt_linear_cross_entropy(fx_in(c, "h"), fx_in(c, "w_"), fx_in(c, "targets"), &o,
                                      (int64_t)fx_num(c, "chunk_rows")));
}

START_TEST(test_chunked_head) {
  RUN_GROUPS("nn_lce.bin", "chunked head", {"lce.", body_lce});
}
END_TEST

/* nn_more.bin: the losses of nn/loss_more.c against torch.nn.functional. */
static lt_reduction fx_red(const fx_case *c) { return (lt_reduction)fx_num(c, "reduction"); }
static void body_bce_logits(fx_case *c) {
  lt_tensor *x = fx_in(c, "input"), *y = fx_in(c, "target");
  lt_tensor *w = fx_in_opt(c, "weight"), *pw = fx_in_opt(c, "pos_weight");
  fx_check(c, lt_binary_cross_entropy_with_logits(x, y, w, pw, fx_red(c)));
}
static void body_l1(fx_case *c) { fx_check(c, lt_l1_loss(fx_in(c, "input"), fx_in(c, "target"), fx_red(c))); }
static void body_smooth_l1(fx_case *c) {
  fx_check(c, lt_smooth_l1_loss(fx_in(c, "input"), fx_in(c, "target"), fx_red(c), fx_num(c, "beta")));
}
static void body_huber(fx_case *c) {
  fx_check(c, lt_huber_loss(fx_in(c, "input"), fx_in(c, "target"), fx_red(c), fx_num(c, "delta")));
}
static void body_kl(fx_case *c) {
  fx_check(c, lt_kl_div(fx_in(c, "input"), fx_in(c, "target"), fx_red(c), fx_num(c, "log_target") != 0));
}
static void body_cos_emb(fx_case *c) {
  fx_check(c, lt_cosine_embedding_loss(fx_in(c, "x1"), fx_in(c, "x2"), fx_in(c, "y"), fx_num(c, "margin"), fx_red(c)));
}
/* nn_more.bin: tensor/order.c against torch.sort, topk, flip, roll, Tensor.repeat. */
static int fx_ints(const fx_case *c, const char *key, int64_t *v, int cap) {
  lt_tensor *t = fx_get(c, key);
  int n = (int)t->numel;
  ck_assert(n <= cap);
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_I64, v, n));
  lt_tensor_free(t);
  return n;
}
static void body_sort(fx_case *c) {
  lt_tensor *v = NULL, *i = NULL;
  LT_OK_OR_FAIL(lt_sort(fx_in(c, "x"), (int)fx_num(c, "dim"), fx_num(c, "descending") != 0, &v, &i));
  fx_check_extra(c, "indices", i);
  lt_tensor_free(i);
  fx_check(c, v);
}
static void body_topk(fx_case *c) {
  lt_tensor *v = NULL, *i = NULL;
  LT_OK_OR_FAIL(lt_topk(fx_in(c, "x"), (int64_t)fx_num(c, "k"), (int)fx_num(c, "dim"), fx_num(c, "largest") != 0, &v,
                        &i));
  fx_check_extra(c, "indices", i);
  lt_tensor_free(i);
  fx_check(c, v);
}
static void body_flip(fx_case *c) {
  int64_t d[LT_MAX_DIMS];
  int n = fx_ints(c, "dims", d, LT_MAX_DIMS), dims[LT_MAX_DIMS];
  for (int k = 0; k < n; k++) dims[k] = (int)d[k];
  fx_check(c, lt_flip(fx_in(c, "x"), n, dims));
}
static void body_roll(fx_case *c) {
  int64_t sh[LT_MAX_DIMS], d[LT_MAX_DIMS];
  int n = fx_ints(c, "shifts", sh, LT_MAX_DIMS), dims[LT_MAX_DIMS];
  bool has_dims = fx_has(c, "dims");
  if (has_dims) fx_ints(c, "dims", d, LT_MAX_DIMS);
  for (int k = 0; has_dims && k < n; k++) dims[k] = (int)d[k];
  fx_check(c, lt_roll(fx_in(c, "x"), n, sh, has_dims ? dims : NULL));
}
static void body_repeat(fx_case *c) {
  int64_t r[LT_MAX_DIMS];
  int n = fx_ints(c, "repeats", r, LT_MAX_DIMS);
  fx_check(c, lt_repeat(fx_in(c, "x"), n, r));
}
START_TEST(test_more_order) {
  RUN_GROUPS("nn_more.bin", "sort and reordering", {"sort.", body_sort}, {"topk.", body_topk}, {"flip.", body_flip},
             {"roll.", body_roll}, {"repeat.", body_repeat});
}
END_TEST

/* nn_more.bin: nn.ConvTranspose2d / ConvTranspose1d modules (PyTorch's
 * state_dict names and their parameters copied in) and F.interpolate. */
static lt_conv_opts fx_convt_opts(const fx_case *c) {
  lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
  o.stride[0] = o.stride[1] = (int64_t)fx_num(c, "stride");
  o.padding[0] = o.padding[1] = (int64_t)fx_num(c, "padding");
  o.output_padding[0] = o.output_padding[1] = (int64_t)fx_num(c, "output_padding");
  o.dilation[0] = o.dilation[1] = (int64_t)fx_num(c, "dilation");
  o.groups = (int64_t)fx_num(c, "groups");
  return o;
}
static void body_convt2d(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_conv_transpose2d_m m;
  const lt_conv_opts o = fx_convt_opts(c);
  LT_OK_OR_FAIL(lt_conv_transpose2d_init(&m, p, "m", (int64_t)fx_num(c, "c_in"), (int64_t)fx_num(c, "c_out"),
                                         (int64_t)fx_num(c, "kh"), (int64_t)fx_num(c, "kw"), &o, fx_num(c, "bias") != 0,
                                         gen()));
  fx_load_params(c, p);
  fx_check(c, lt_conv_transpose2d_forward(&m, fx_in(c, "x")));
  lt_params_free(p);
}
static void body_convt1d(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_conv_transpose1d_m m;
  const lt_conv_opts o = fx_convt_opts(c);
  LT_OK_OR_FAIL(lt_conv_transpose1d_init(&m, p, "m", (int64_t)fx_num(c, "c_in"), (int64_t)fx_num(c, "c_out"),
                                         (int64_t)fx_num(c, "k"), &o, fx_num(c, "bias") != 0, gen()));
  fx_load_params(c, p);
  fx_check(c, lt_conv_transpose1d_forward(&m, fx_in(c, "x")));
  lt_params_free(p);
}
static void body_interp(fx_case *c) {
  int64_t size[2] = {0, 0};
  double scale[2] = {0, 0};
  int n = fx_ints(c, "size", size, 2);
  lt_tensor *sc = fx_get(c, "scale");
  LT_OK_OR_FAIL(lt_tensor_read(sc, LT_DTYPE_F64, scale, (int64_t)n));
  lt_tensor_free(sc);
  lt_interpolate_opts o = {.mode = (lt_interp_mode)fx_num(c, "mode"), .size = {size[0], size[1]},
                           .scale_factor = {scale[0], scale[1]}, .align_corners = fx_num(c, "align_corners") != 0};
  fx_check(c, lt_interpolate(fx_in(c, "x"), &o));
}
START_TEST(test_more_conv) {
  RUN_GROUPS("nn_more.bin", "transposed convolutions and interpolation", {"convt2d.", body_convt2d},
             {"convt1d.", body_convt1d}, {"interp.", body_interp});
}
END_TEST

START_TEST(test_more_losses) {
  RUN_GROUPS("nn_more.bin", "more losses", {"bce_logits.", body_bce_logits}, {"l1.", body_l1},
             {"smooth_l1.", body_smooth_l1}, {"huber.", body_huber}, {"kl.", body_kl}, {"cos_emb.", body_cos_emb});
}
END_TEST

START_TEST(test_embedding) {
  RUN_GROUPS("nn_functional.bin", "embedding", {"embedding.", body_embedding});
}
END_TEST

/* Cross-entropy details not in a fixture: every target ignored gives 0 with
 * mean (PyTorch gives NaN; nn.h says 0) and a zero gradient. */
START_TEST(test_cross_entropy_all_ignored) {
  lt_tensor *logits = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(3, 4)));
  LT_OK_OR_FAIL(lt_requires_grad_(logits, true));
  lt_tensor *t = LT_NN(lt_full(LT_DTYPE_I64, LT_SHAPE(3), -100));
  lt_cross_entropy_opts o = LT_CROSS_ENTROPY_DEFAULTS;
  lt_tensor *loss = LT_NN(lt_cross_entropy(logits, t, &o));
  LT_ASSERT_VALUES(loss, 0, 0);
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  if (logits->grad) {
    lt_tensor *z = LT_NN(lt_zeros_like(logits));
    LT_ASSERT_CLOSE(logits->grad, z, 0, 0);
    lt_tensor_free(z);
  }
  lt_tensor_free(loss);
  lt_tensor_free(t);
  lt_tensor_free(logits);
}
END_TEST

/* ---- dropout ------------------------------------------------------------- */

START_TEST(test_dropout) {
  lt_fixture *f = lt_fx_open("nn_functional.bin");
  lt_tensor *x = LT_NN(lt_fixture_get(f, "dropout.x"));
  lt_generator *g = lt_generator_new(7);
  lt_nn_ctx eval = {false, g}, train = {true, g};
  struct {
    const char *want;
    double p;
    const lt_nn_ctx *ctx;
    const char *label;
  } cases[] = {
      {"dropout.eval", 0.5, NULL, "dropout p=0.5 ctx NULL"},
      {"dropout.eval", 0.5, &eval, "dropout p=0.5 eval"},
      {"dropout.p0", 0.0, &train, "dropout p=0 training"},
      {"dropout.p1", 1.0, &train, "dropout p=1 training"},
  };
  for (int i = 0; i < 4; i++) {
    lt_tensor *xi = LT_NN(lt_clone(x));
    LT_OK_OR_FAIL(lt_requires_grad_(xi, true));
    lt_tensor *want = LT_NN(lt_fixture_get(f, cases[i].want));
    lt_tensor *y = lt_dropout(xi, cases[i].p, cases[i].ctx);
    fx_close(cases[i].label, y, want, 0);
    if (y) {
      /* Gradient: ones where kept (p = 0 / eval), zeros for p = 1. */
      lt_tensor *ones = LT_NN(lt_ones_like(x));
      LT_OK_OR_FAIL(lt_backward(y, ones, false));
      lt_tensor *gw = LT_NN(cases[i].p == 1.0 ? lt_zeros_like(x) : lt_ones_like(x));
      lt_tensor *gg = xi->grad ? xi->grad : LT_NN(lt_zeros_like(x));
      char label[96];
      snprintf(label, sizeof label, "%s grad", cases[i].label);
      fx_close(label, gg, gw, 0);
      if (gg != xi->grad) lt_tensor_free(gg);
      lt_tensor_free(gw);
      lt_tensor_free(ones);
      lt_tensor_free(y);
    }
    lt_tensor_free(want);
    lt_tensor_free(xi);
  }
  /* The random middle: on ones, kept entries are exactly 1/(1-p), the dropped
   * fraction is p and the mean is 1 (5 standard deviations), the gradient is
   * the same mask, and the same generator state gives the same mask. */
  const int64_t n = 200000;
  const double ps[] = {0.1, 0.5, 0.9};
  for (int k = 0; k < 3; k++) {
    double p = ps[k];
    lt_tensor *ones = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(n)));
    LT_OK_OR_FAIL(lt_requires_grad_(ones, true));
    lt_generator_state st = lt_generator_get_state(g);
    lt_tensor *y = LT_NN(lt_dropout(ones, p, &train));
    float *v = malloc(sizeof(float) * (size_t)n);
    ck_assert(v);
    LT_OK_OR_FAIL(lt_tensor_read(y, LT_DTYPE_F32, v, n));
    int64_t zeros = 0, odd = 0;
    double sum = 0;
    const float kept = (float)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++) {
      if (v[i] == 0) zeros++;
      else if (fabsf(v[i] - kept) > 1e-6f * kept) odd++;
      sum += v[i];
    }
    double frac = (double)zeros / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    ck_assert_msg(odd == 0, "dropout p=%g: %lld kept values differ from 1/(1-p) = %g", p, (long long)odd, kept);
    ck_assert_msg(fabs(frac - p) < 5 * sd, "dropout p=%g: dropped fraction %g (5 sd = %g)", p, frac, 5 * sd);
    ck_assert_msg(fabs(sum / (double)n - 1) < 5 * sd / (1 - p), "dropout p=%g: mean %g", p, sum / (double)n);
    lt_tensor *dy = LT_NN(lt_ones_like(ones));
    LT_OK_OR_FAIL(lt_backward(y, dy, false));
    ck_assert(ones->grad);
    fx_close("dropout grad == mask / (1-p)", ones->grad, y, 1e-6);
    LT_OK_OR_FAIL(lt_generator_set_state(g, st));
    lt_tensor *y2 = LT_NN(lt_dropout(ones, p, &train));
    ck_assert_msg(lt_equal(y, y2), "dropout p=%g: same generator state, different mask", p);
    free(v);
    lt_tensor_free(y2);
    lt_tensor_free(dy);
    lt_tensor_free(y);
    lt_tensor_free(ones);
  }
  lt_generator_free(g);
  lt_tensor_free(x);
  lt_fixture_free(f);
  lt_fx_done("dropout");
}
END_TEST

/* ---- attention, RoPE, sinusoidal, MHA, FFN ------------------------------- */

static void body_sdpa(fx_case *c) {
  lt_tensor *q = fx_in(c, "q"), *k = fx_in(c, "k"), *v = fx_in(c, "v");
  lt_attention_opts o = {0};
  o.causal = fx_num(c, "causal") != 0;
  o.scale = fx_num(c, "scale");
  o.attn_mask = fx_in_opt(c, "attn_mask");
  o.key_padding_mask = fx_in_opt(c, "key_padding_mask");
  lt_tensor *w = NULL;
  lt_tensor *out = lt_scaled_dot_product_attention(q, k, v, &o, NULL, fx_has_t(c, "weights") ? &w : NULL);
  if (out && fx_has_t(c, "weights")) fx_check_extra(c, "weights", w);
  lt_tensor_free(w);
  fx_check(c, out);
}

static void body_rope(fx_case *c) {
  fx_check(c, lt_rope(fx_in(c, "x"), (int64_t)fx_num(c, "pos0"), fx_num(c, "base")));
}

static void body_mha(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_mha m;
  LT_OK_OR_FAIL(lt_mha_init(&m, p, "m", (int64_t)fx_num(c, "C"), (int64_t)fx_num(c, "NH"), (int64_t)fx_num(c, "NKV"),
                            fx_num(c, "bias") != 0, 0.0, gen()));
  ck_assert_int_eq(m.HS, m.C / m.NH);
  m.rope = fx_num(c, "rope") != 0;
  m.rope_base = 10000.0;
  fx_load_params(c, p);
  lt_tensor *xq = fx_in(c, "x_q"), *xkv = fx_in_opt(c, "x_kv");
  lt_attention_opts o = {0};
  o.causal = fx_num(c, "causal") != 0;
  o.attn_mask = fx_in_opt(c, "attn_mask");
  o.key_padding_mask = fx_in_opt(c, "key_padding_mask");
  lt_tensor *w = NULL;
  lt_tensor *out = lt_mha_forward(&m, xq, xkv ? xkv : xq, &o, (int64_t)fx_num(c, "pos0"), NULL, &w);
  if (out) fx_check_extra(c, "weights", w);
  lt_tensor_free(w);
  fx_check(c, out);
  /* Attention dropout changes nothing in evaluation mode. */
  lt_generator *g = lt_generator_new(8);
  lt_nn_ctx eval = {false, g};
  m.dropout = 0.5;
  fx_check_note(c, "out", lt_mha_forward(&m, xq, xkv ? xkv : xq, &o, (int64_t)fx_num(c, "pos0"), &eval, NULL),
                " (module dropout 0.5, eval)");
  lt_generator_free(g);
  lt_params_free(p);
}

static void body_ffn(fx_case *c) {
  lt_params *p = lt_params_new();
  lt_ffn m;
  LT_OK_OR_FAIL(lt_ffn_init(&m, p, "m", (int64_t)fx_num(c, "C"), (int64_t)fx_num(c, "d_ff"),
                            (lt_activation)fx_num(c, "act"), fx_num(c, "swiglu") != 0, fx_num(c, "bias") != 0, 0.0,
                            gen()));
  fx_load_params(c, p);
  lt_tensor *x = fx_in(c, "x");
  fx_check(c, lt_ffn_forward(&m, x, NULL));
  /* Dropout in the module changes nothing in evaluation mode. */
  lt_generator *g = lt_generator_new(8);
  lt_nn_ctx eval = {false, g};
  m.dropout = 0.5;
  fx_check_note(c, "out", lt_ffn_forward(&m, x, &eval), " (module dropout 0.5, eval)");
  lt_generator_free(g);
  lt_params_free(p);
}

START_TEST(test_sdpa) {
  RUN_GROUPS("nn_attention.bin", "scaled_dot_product_attention", {"sdpa.", body_sdpa});
}
END_TEST

/* Training mode with dropout_p = 0 is evaluation; with dropout_p = 1 every
 * weight is dropped and the output is zero. */
START_TEST(test_sdpa_dropout_edges) {
  lt_fixture *f = lt_fx_open("nn_attention.bin");
  fx_case c;
  memset(&c, 0, sizeof c);
  c.fx = f;
  strcpy(c.name, "sdpa.basic");
  lt_tensor *q = fx_get(&c, "in.q"), *k = fx_get(&c, "in.k"), *v = fx_get(&c, "in.v"), *want = fx_get(&c, "out");
  lt_generator *g = lt_generator_new(3);
  lt_nn_ctx train = {true, g};
  lt_attention_opts o = {0};
  lt_tensor *y = lt_scaled_dot_product_attention(q, k, v, &o, &train, NULL);
  fx_close("sdpa training dropout_p=0", y, want, RTOL_OUT32);
  o.dropout_p = 1.0;
  lt_tensor *y1 = lt_scaled_dot_product_attention(q, k, v, &o, &train, NULL);
  lt_tensor *z = LT_NN(lt_zeros_like(want));
  fx_close("sdpa training dropout_p=1", y1, z, 0);
  lt_tensor *ye = lt_scaled_dot_product_attention(q, k, v, &o, NULL, NULL);
  fx_close("sdpa dropout_p=1 in eval (ctx NULL)", ye, want, RTOL_OUT32);
  lt_tensor_free(ye);
  lt_tensor_free(y1);
  lt_tensor_free(y);
  lt_tensor_free(z);
  lt_tensor_free(q);
  lt_tensor_free(k);
  lt_tensor_free(v);
  lt_tensor_free(want);
  lt_generator_free(g);
  lt_fixture_free(f);
  lt_fx_done("sdpa dropout edges");
}
END_TEST

START_TEST(test_rope_sinusoidal) {
  g_layout = _i;
  lt_fixture *f = lt_fx_open("nn_attention.bin");
  run_cases(f, "rope.", body_rope);
  const int64_t tc[][2] = {{10, 16}, {7, 6}, {1, 2}};
  for (int i = 0; i < 3; i++)
    for (int d = 0; d < 2; d++) {
      char name[64];
      snprintf(name, sizeof name, "sinusoidal.%lldx%lld.%s", (long long)tc[i][0], (long long)tc[i][1],
               d ? "f64" : "f32");
      lt_tensor *want = LT_NN(lt_fixture_get(f, name));
      lt_tensor *got = lt_sinusoidal_table(d ? LT_DTYPE_F64 : LT_DTYPE_F32, tc[i][0], tc[i][1]);
      ck_assert(!got || !got->requires_grad);
      /* The table is exact math: f32 only within rounding of the angle. */
      fx_close(name, got, want, d ? 1e-12 : 2e-6);
      lt_tensor_free(got);
      lt_tensor_free(want);
    }
  lt_fixture_free(f);
  lt_fx_done("rope / sinusoidal");
}
END_TEST

START_TEST(test_mha) {
  RUN_GROUPS("nn_attention.bin", "mha", {"mha.", body_mha});
}
END_TEST

START_TEST(test_ffn) {
  RUN_GROUPS("nn_attention.bin", "ffn", {"ffn.", body_ffn});
}
END_TEST

/* ---- optimizers ---------------------------------------------------------- */

static const char *TINY_PARAMS[] = {"fc1.weight", "fc1.bias", "ln.weight", "ln.bias", "fc2.weight", "fc2.bias"};

typedef struct tiny {
  lt_params *p;
  lt_linear_m fc1, fc2;
  lt_layer_norm_m ln;
} tiny;

/* The fixture's TinyModel with its initial parameters. */
static void tiny_init(tiny *m, const lt_fixture *f) {
  lt_generator *g = lt_generator_new(5);
  m->p = lt_params_new();
  LT_OK_OR_FAIL(lt_linear_init(&m->fc1, m->p, "fc1", 4, 8, true, g));
  LT_OK_OR_FAIL(lt_layer_norm_init(&m->ln, m->p, "ln", 8, 1e-5, true));
  LT_OK_OR_FAIL(lt_linear_init(&m->fc2, m->p, "fc2", 8, 3, true, g));
  lt_generator_free(g);
  ck_assert_int_eq(lt_params_count(m->p), 6);
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < 6; i++) {
    char name[96];
    snprintf(name, sizeof name, "optim.init.%s", TINY_PARAMS[i]);
    lt_tensor *src = LT_NN(lt_fixture_get(f, name));
    lt_tensor *dst = lt_params_find(m->p, TINY_PARAMS[i]);
    ck_assert_msg(dst, "no parameter %s", TINY_PARAMS[i]);
    LT_OK_OR_FAIL(lt_copy_(dst, src));
    lt_tensor_free(src);
  }
  lt_set_grad_enabled(prev);
}

/* fc2(gelu(ln(fc1(x)))), cross-entropy (mean). */
static lt_tensor *tiny_loss(const tiny *m, const lt_tensor *x, const lt_tensor *y) {
  lt_tensor *h = lt_linear_forward(&m->fc1, x);
  h = lt_layer_norm_forward(&m->ln, h);
  h = lt_activation_forward(LT_ACT_GELU, h);
  h = lt_linear_forward(&m->fc2, h);
  lt_cross_entropy_opts o = LT_CROSS_ENTROPY_DEFAULTS;
  return lt_cross_entropy(h, y, &o);
}

/* Sets p->grad to exactly g: backward of sum(p * g). */
static void set_grad(lt_tensor *p, const lt_tensor *g) {
  lt_scope *s = lt_scope_begin();
  lt_tensor *l = LT_NN(lt_sum(LT_NN(lt_mul(p, g)), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(l, NULL, false));
  lt_scope_end(s);
}

static lt_optim_config optim_config(const lt_fixture *f, const char *cfg) {
  char n[128];
  double v;
#define CFG(field)                                                     \
  (snprintf(n, sizeof n, "optim.%s.%s", cfg, field),                   \
   lt_fixture_scalar(f, n, &v) == LT_OK ? v : (ck_abort_msg("%s", lt_last_error()), 0.0))
  lt_optim_config c;
  memset(&c, 0, sizeof c);
  c.kind = (lt_optim_kind)CFG("kind");
  c.lr = CFG("lr");
  c.momentum = CFG("momentum");
  c.dampening = CFG("dampening");
  c.nesterov = CFG("nesterov") != 0;
  c.beta1 = CFG("beta1");
  c.beta2 = CFG("beta2");
  c.eps = CFG("eps");
  c.weight_decay = CFG("weight_decay");
  c.decay_all = CFG("decay_all") != 0;
#undef CFG
  return c;
}

static const char *STATES[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "step"};
enum { N_STATES = sizeof STATES / sizeof STATES[0] };

/* A new optimizer continuing o as a checkpoint would: state created for
 * exactly the parameters that had some (lt_optimizer_reset_state), then the
 * state tensors copied, each parameter's step included (PyTorch's
 * optimizer.load_state_dict). Frees o. */
static lt_optimizer *resume(lt_optimizer *o, lt_params *p, const lt_optim_config *oc, const char *cfg) {
  lt_optimizer *o2 = lt_optimizer_new(p, oc);
  ck_assert_msg(o2 != NULL, "%s", lt_last_error());
  const char *with_state[64];
  int n = 0;
  for (int i = 0; i < lt_params_count(p); i++)
    for (int k = 0; k < N_STATES; k++)
      if (lt_optimizer_state(o, lt_params_at(p, i)->name, STATES[k])) {
        ck_assert_int_lt(n, 64);
        with_state[n++] = lt_params_at(p, i)->name;
        break;
      }
  LT_OK_OR_FAIL(lt_optimizer_reset_state(o2, lt_optimizer_step_count(o), n, with_state));
  lt_optimizer_set_lr(o2, lt_optimizer_get_lr(o));
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < lt_params_count(p); i++)
    for (int k = 0; k < N_STATES; k++) {
      const char *pn = lt_params_at(p, i)->name;
      lt_tensor *src = lt_optimizer_state(o, pn, STATES[k]), *dst = lt_optimizer_state(o2, pn, STATES[k]);
      if (!src && !dst) continue;
      if (!src || !dst) {
        printf("MISMATCH optim %s resume: state %s.%s is %s before and %s after reset_state\n", cfg, pn,
               STATES[k], src ? "present" : "absent", dst ? "present" : "absent");
        lt_fx_failures++;
        continue;
      }
      LT_OK_OR_FAIL(lt_copy_(dst, src));
    }
  lt_set_grad_enabled(prev);
  ck_assert_int_eq(lt_optimizer_step_count(o2), lt_optimizer_step_count(o));
  lt_optimizer_free(o);
  return o2;
}

enum { MODE_REPLAY, MODE_TRAIN, MODE_RESUME };

/* Follows PyTorch's 10 steps of configuration cfg. MODE_REPLAY: the gradients
 * come from the fixture (tests the optimizer alone); MODE_TRAIN: forward and
 * backward of the tiny model run here (loss and gradients compared at every
 * step); MODE_RESUME: replay, with the optimizer replaced after step 5 by a
 * new one restored from its state (a checkpoint round trip). */
static void run_trajectory(const lt_fixture *f, const char *cfg, int mode_) {
  tiny m;
  tiny_init(&m, f);
  char name[160], label[200];
  const bool replay = mode_ != MODE_TRAIN;
  const char *mode = mode_ == MODE_REPLAY ? "replay" : mode_ == MODE_TRAIN ? "train" : "resume";
  /* Norms and biases are the no-decay parameters (lt_param_flags). */
  for (int i = 0; i < lt_params_count(m.p); i++) {
    const lt_param *pr = lt_params_at(m.p, i);
    double nd;
    snprintf(name, sizeof name, "optim.no_decay.%s", pr->name);
    LT_OK_OR_FAIL(lt_fixture_scalar(f, name, &nd));
    if ((nd != 0) != ((pr->flags & LT_PARAM_NO_DECAY) != 0)) {
      printf("MISMATCH %s: LT_PARAM_NO_DECAY is %s, expected %s (norms and biases)\n", pr->name,
             (pr->flags & LT_PARAM_NO_DECAY) ? "set" : "unset", nd != 0 ? "set" : "unset");
      lt_fx_failures++;
    }
  }
  lt_optim_config oc = optim_config(f, cfg);
  lt_optimizer *o = lt_optimizer_new(m.p, &oc);
  ck_assert_msg(o != NULL, "%s: %s", cfg, lt_last_error());
  lt_tensor *x = LT_NN(lt_fixture_get(f, "optim.x")), *y = LT_NN(lt_fixture_get(f, "optim.y"));
  for (int s = 1; s <= 10; s++) {
    if (mode_ == MODE_RESUME && s == 6) o = resume(o, m.p, &oc, cfg);
    snprintf(name, sizeof name, "optim.%s.s%d.lr", cfg, s);
    if (lt_fixture_has(f, name)) {
      double lr;
      LT_OK_OR_FAIL(lt_fixture_scalar(f, name, &lr));
      lt_optimizer_set_lr(o, lr);
      ck_assert(lt_optimizer_get_lr(o) == lr);
    }
    lt_params_zero_grad(m.p);
    lt_scope *sc = lt_scope_begin();
    /* A gradient without a record is one PyTorch's run dropped (.grad = None). */
    if (replay) {
      for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "optim.%s.s%d.grad.%s", cfg, s, TINY_PARAMS[i]);
        if (lt_fixture_has(f, name)) set_grad(lt_params_find(m.p, TINY_PARAMS[i]), LT_NN(lt_fixture_get(f, name)));
      }
    } else {
      lt_tensor *loss = tiny_loss(&m, x, y);
      snprintf(name, sizeof name, "optim.%s.s%d.loss", cfg, s);
      snprintf(label, sizeof label, "optim %s (%s) step %d loss", cfg, mode, s);
      fx_close(label, loss, LT_NN(lt_fixture_get(f, name)), RTOL_OUT32);
      ck_assert_msg(loss && lt_backward(loss, NULL, false) == LT_OK, "%s", lt_last_error());
      for (int i = 0; i < 6; i++) {
        lt_tensor *pt = lt_params_find(m.p, TINY_PARAMS[i]);
        snprintf(name, sizeof name, "optim.%s.s%d.grad.%s", cfg, s, TINY_PARAMS[i]);
        if (!lt_fixture_has(f, name)) {
          lt_zero_grad(pt);
          continue;
        }
        snprintf(label, sizeof label, "optim %s (%s) step %d grad %s", cfg, mode, s, TINY_PARAMS[i]);
        fx_close(label, pt->grad, LT_NN(lt_fixture_get(f, name)), RTOL_GRAD32);
      }
    }
    lt_scope_end(sc);
    LT_OK_OR_FAIL(lt_optimizer_step(o));
    ck_assert_int_eq(lt_optimizer_step_count(o), s);
    sc = lt_scope_begin();
    for (int i = 0; i < 6; i++) {
      snprintf(name, sizeof name, "optim.%s.s%d.param.%s", cfg, s, TINY_PARAMS[i]);
      snprintf(label, sizeof label, "optim %s (%s) step %d param %s", cfg, mode, s, TINY_PARAMS[i]);
      fx_close(label, lt_params_find(m.p, TINY_PARAMS[i]), LT_NN(lt_fixture_get(f, name)), RTOL_PARAM32);
    }
    lt_scope_end(sc);
  }
  /* The optimizer state after 10 steps (momentum_buffer, exp_avg, exp_avg_sq). */
  const char *const *states = STATES;
  lt_scope *sc = lt_scope_begin();
  for (int i = 0; i < 6; i++)
    for (int k = 0; k < 3; k++) {
      snprintf(name, sizeof name, "optim.%s.state.%s.%s", cfg, TINY_PARAMS[i], states[k]);
      lt_tensor *got = lt_optimizer_state(o, TINY_PARAMS[i], states[k]);
      snprintf(label, sizeof label, "optim %s (%s) state %s.%s", cfg, mode, TINY_PARAMS[i], states[k]);
      if (lt_fixture_has(f, name)) {
        fx_close(label, got, LT_NN(lt_fixture_get(f, name)), replay ? RTOL_PARAM32 : RTOL_GRAD32);
      } else if (got) {
        printf("MISMATCH %s: present, PyTorch has no such state\n", label);
        lt_fx_failures++;
      }
    }
  lt_scope_end(sc);
  lt_tensor_free(x);
  lt_tensor_free(y);
  lt_optimizer_free(o);
  lt_params_free(m.p);
}

static const char *OPTIM_CONFIGS[] = {"sgd",         "sgd_momentum_wd", "sgd_dampening", "sgd_nesterov",
                                      "adam",        "adam_l2",         "adamw",         "adamw_nodecay",
                                      "adamw_sched", "adam_bigeps",     "adamw_skip",    "sgd_skip"};
#define N_OPTIM_CONFIGS ((int)(sizeof OPTIM_CONFIGS / sizeof OPTIM_CONFIGS[0]))

/* Configuration cfg in one mode as a whole test. */
static void trajectory_test(const char *cfg, int mode) {
  lt_fixture *f = lt_fx_open("nn_optim.bin");
  run_trajectory(f, cfg, mode);
  lt_fixture_free(f);
  lt_fx_done(cfg);
}

START_TEST(test_optimizer_replay) { trajectory_test(OPTIM_CONFIGS[_i], MODE_REPLAY); }
END_TEST

START_TEST(test_optimizer_train) { trajectory_test(OPTIM_CONFIGS[_i], MODE_TRAIN); }
END_TEST

/* Every configuration, adamw_skip and sgd_skip included: their parameters
 * have different step counts (PyTorch's per-parameter state['step']), which
 * the resume restores one by one. */
START_TEST(test_optimizer_resume) {
  trajectory_test(OPTIM_CONFIGS[_i], MODE_RESUME);
}
END_TEST

START_TEST(test_optim_defaults) {
  lt_fixture *f = lt_fx_open("nn_optim.bin");
  const char *kinds[] = {"sgd", "adam", "adamw"};
  for (int k = 0; k < 3; k++) {
    lt_optim_config c = lt_optim_defaults((lt_optim_kind)k);
    ck_assert_int_eq(c.kind, k);
    struct {
      const char *key;
      double got;
    } fields[] = {{"lr", c.lr},       {"momentum", c.momentum},         {"dampening", c.dampening},
                  {"nesterov", c.nesterov}, {"weight_decay", c.weight_decay}, {"eps", c.eps},
                  {"beta1", c.beta1}, {"beta2", c.beta2}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
      char name[96];
      double want;
      snprintf(name, sizeof name, "optim.defaults.%s.%s", kinds[k], fields[i].key);
      if (lt_fixture_scalar(f, name, &want) != LT_OK) {
        lt_clear_error();
        continue;
      }
      if (fields[i].got != want) {
        printf("MISMATCH lt_optim_defaults(%s).%s = %g, PyTorch %g\n", kinds[k], fields[i].key, fields[i].got, want);
        lt_fx_failures++;
      }
    }
    if (k == 0 && c.lr != 1e-3) {
      printf("MISMATCH lt_optim_defaults(sgd).lr = %g, nn.h says 1e-3\n", c.lr);
      lt_fx_failures++;
    }
  }
  lt_fixture_free(f);
  lt_fx_done("optim defaults");
}
END_TEST

/* ---- schedules, clipping --------------------------------------------------- */

START_TEST(test_schedules) {
  lt_fixture *f = lt_fx_open("nn_optim.bin");
  int found = 0;
  for (int i = 0; i < lt_fixture_count(f); i++) {
    const char *nm = lt_fixture_name(f, i);
    size_t len = strlen(nm);
    if (strncmp(nm, "sched.", 6) != 0 || len < 4 || strcmp(nm + len - 3, ".lr") != 0) continue;
    fx_case c;
    memset(&c, 0, sizeof c);
    c.fx = f;
    memcpy(c.name, nm, len - 3);
    c.name[len - 3] = '\0';
    lt_schedule s;
    memset(&s, 0, sizeof s);
    s.kind = (lt_schedule_kind)fx_num(&c, "kind");
    s.base_lr = fx_num(&c, "base_lr");
    s.min_lr = fx_num(&c, "min_lr");
    s.gamma = fx_num(&c, "gamma");
    s.scale = fx_num(&c, "scale");
    s.warmup = (int64_t)fx_num(&c, "warmup");
    s.total = (int64_t)fx_num(&c, "total");
    s.step_size = (int64_t)fx_num(&c, "step_size");
    s.d_model = (int64_t)fx_num(&c, "d_model");
    lt_tensor *want = fx_get(&c, "lr");
    lt_tensor *got = LT_NN(lt_empty(LT_DTYPE_F64, want->ndim, want->shape));
    for (int64_t k = 0; k < want->shape[0]; k++) LT_OK_OR_FAIL(lt_set(got, &k, lt_schedule_lr(&s, k + 1)));
    char label[512];
    snprintf(label, sizeof label, "%s (steps 1..%lld)", c.name, (long long)want->shape[0]);
    fx_close(label, got, want, 1e-12);
    lt_tensor_free(got);
    lt_tensor_free(want);
    found++;
  }
  ck_assert_int_ge(found, 7);
  lt_fixture_free(f);
  lt_fx_done("schedules");
}
END_TEST

/* A store with parameters a, b, c (gradients from the fixture) and one
 * without a gradient. */
static lt_params *clip_store(const lt_fixture *f) {
  lt_params *p = lt_params_new();
  const char *names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++) {
    char n[64];
    snprintf(n, sizeof n, "clip.grad.%s", names[i]);
    lt_tensor *g = LT_NN(lt_fixture_get(f, n));
    LT_OK_OR_FAIL(lt_params_add(p, names[i], LT_NN(lt_zeros_like(g)), 0));
    set_grad(lt_params_find(p, names[i]), g);
    lt_tensor_free(g);
  }
  LT_OK_OR_FAIL(lt_params_add(p, "nograd", LT_NN(lt_fixture_get(f, "clip.param_nograd")), 0));
  return p;
}

START_TEST(test_clip) {
  lt_fixture *f = lt_fx_open("nn_optim.bin");
  const char *names[] = {"a", "b", "c"};
  const double norms[] = {1.0, 100.0, 0.5};
  char n[128], label[160];
  for (int k = 0; k < 3; k++) {
    lt_params *p = clip_store(f);
    double total = -1, want;
    LT_OK_OR_FAIL(lt_clip_grad_norm(p, norms[k], &total));
    snprintf(n, sizeof n, "clip.norm%g.total_norm", norms[k]);
    LT_OK_OR_FAIL(lt_fixture_scalar(f, n, &want));
    if (!(fabs(total - want) <= 1e-6 * want)) {
      printf("MISMATCH clip_grad_norm(max_norm %g) total norm %.9g, PyTorch %.9g (diff %.3g)\n", norms[k], total, want,
             fabs(total - want));
      lt_fx_failures++;
    }
    for (int i = 0; i < 3; i++) {
      snprintf(n, sizeof n, "clip.norm%g.grad.%s", norms[k], names[i]);
      snprintf(label, sizeof label, "clip_grad_norm(max_norm %g) grad %s", norms[k], names[i]);
      lt_tensor *w = LT_NN(lt_fixture_get(f, n));
      fx_close(label, lt_params_find(p, names[i])->grad, w, RTOL_PARAM32);
      lt_tensor_free(w);
    }
    ck_assert_msg(lt_params_find(p, "nograd")->grad == NULL, "clip gave a gradient to a parameter without one");
    lt_params_free(p);
  }
  /* All gradients zero: the norm is 0 and nothing changes (PyTorch divides by
   * norm + 1e-6, so no NaN). */
  {
    lt_params *pz = lt_params_new();
    LT_OK_OR_FAIL(lt_params_add(pz, "z", LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3))), 0));
    lt_tensor *zg = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3)));
    set_grad(lt_params_find(pz, "z"), zg);
    double total = -1;
    LT_OK_OR_FAIL(lt_clip_grad_norm(pz, 1.0, &total));
    ck_assert_msg(total == 0, "clip_grad_norm of zero gradients: total norm %g", total);
    fx_close("clip_grad_norm of zero gradients", lt_params_find(pz, "z")->grad, zg, 0);
    lt_tensor_free(zg);
    lt_params_free(pz);
  }
  lt_params *p = clip_store(f);
  LT_OK_OR_FAIL(lt_clip_grad_value(p, 0.7));
  for (int i = 0; i < 3; i++) {
    snprintf(n, sizeof n, "clip.value0.7.grad.%s", names[i]);
    snprintf(label, sizeof label, "clip_grad_value(0.7) grad %s", names[i]);
    lt_tensor *w = LT_NN(lt_fixture_get(f, n));
    fx_close(label, lt_params_find(p, names[i])->grad, w, 0);
    lt_tensor_free(w);
  }
  ck_assert(lt_params_find(p, "nograd")->grad == NULL);
  lt_params_free(p);
  lt_fixture_free(f);
  lt_fx_done("clip");
}
END_TEST

/* ---- initialisers: bounds from torch.nn.init, statistics ----------------- */

/* Checks that every |w - mean| <= bound (if bound > 0), and that the sample
 * mean and std are within tolerance of the expected ones. */
static void check_stats(const char *label, const lt_tensor *w, double mean, double std, double bound) {
  int64_t n = w->numel;
  double *v = malloc(sizeof(double) * (size_t)n);
  ck_assert(v);
  LT_OK_OR_FAIL(lt_tensor_read(w, LT_DTYPE_F64, v, n));
  double s = 0, s2 = 0, mx = 0;
  for (int64_t i = 0; i < n; i++) {
    s += v[i];
    if (fabs(v[i] - mean) > mx) mx = fabs(v[i] - mean);
  }
  double m = s / (double)n;
  for (int64_t i = 0; i < n; i++) s2 += (v[i] - m) * (v[i] - m);
  double sd = sqrt(s2 / (double)(n - 1));
  free(v);
  /* std of the sample std is about std / sqrt(2n); of the mean std / sqrt(n). */
  bool ok = fabs(sd - std) <= 6 * std / sqrt(2.0 * (double)n) + 1e-12 &&
            fabs(m - mean) <= 6 * std / sqrt((double)n) + 1e-12 && (bound <= 0 || mx <= bound * (1 + 1e-6));
  if (bound > 0 && n >= 1000) ok = ok && mx >= 0.95 * bound; /* the range is used */
  if (!ok) {
    printf("MISMATCH init %s: mean %.5g (want %.5g), std %.5g (want %.5g), max |w - mean| %.5g (bound %.5g), n %lld\n",
           label, m, mean, sd, std, mx, bound, (long long)n);
    lt_fx_failures++;
  } else if (lt_fx_verbose()) {
    printf("ok init %s: mean %.5g std %.5g (want %.5g) max %.5g (bound %.5g)\n", label, m, sd, std, mx, bound);
  }
}

START_TEST(test_init) {
  lt_fixture *f = lt_fx_open("nn_optim.bin");
  lt_generator *g = lt_generator_new(99);
  const char *shapes[] = {"w2d", "w4d"};
  char n[128], label[128];
  for (int k = 0; k < 2; k++) {
    snprintf(n, sizeof n, "init.%s.shape", shapes[k]);
    lt_tensor *sh = LT_NN(lt_fixture_get(f, n));
    int64_t shape[LT_MAX_DIMS];
    LT_OK_OR_FAIL(lt_tensor_read(sh, LT_DTYPE_I64, shape, LT_MAX_DIMS));
    /* Repeat the fill so that the statistics use enough samples. */
    int64_t big[LT_MAX_DIMS + 1];
    big[0] = 16;
    memcpy(big + 1, shape, sizeof(int64_t) * (size_t)sh->numel);
    double b;
    struct {
      const char *rec;
      int kind; /* 0 kaiming a, 1 xavier uniform gain, 2 xavier normal gain */
      double arg;
    } inits[] = {{"kaiming_a_sqrt5_bound", 0, sqrt(5.0)},
                 {"kaiming_a0_bound", 0, 0},
                 {"xavier_uniform_gain1_bound", 1, 1},
                 {"xavier_uniform_gain2_bound", 1, 2},
                 {"xavier_normal_gain1_std", 2, 1},
                 {"xavier_normal_gain2_std", 2, 2}};
    for (int i = 0; i < 6; i++) {
      snprintf(n, sizeof n, "init.%s.%s", shapes[k], inits[i].rec);
      LT_OK_OR_FAIL(lt_fixture_scalar(f, n, &b));
      lt_tensor *all = LT_NN(lt_zeros(LT_DTYPE_F32, (int)sh->numel + 1, big));
      for (int64_t r = 0; r < 16; r++) {
        lt_tensor *w = LT_NN(lt_select(all, 0, r)); /* a view with the fixture's shape */
        lt_status st = inits[i].kind == 0   ? lt_init_kaiming_uniform_(g, w, inits[i].arg)
                       : inits[i].kind == 1 ? lt_init_xavier_uniform_(g, w, inits[i].arg)
                                            : lt_init_xavier_normal_(g, w, inits[i].arg);
        LT_OK_OR_FAIL(st);
        lt_tensor_free(w);
      }
      snprintf(label, sizeof label, "%s %s", shapes[k], inits[i].rec);
      if (inits[i].kind == 2)
        check_stats(label, all, 0, b, 0);
      else
        check_stats(label, all, 0, b / sqrt(3.0), b);
      lt_tensor_free(all);
    }
    lt_tensor_free(sh);
  }
  lt_tensor *w = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(100, 50)));
  LT_OK_OR_FAIL(lt_init_normal_(g, w, 0.5, 0.02));
  check_stats("normal(0.5, 0.02)", w, 0.5, 0.02, 0);
  lt_tensor_free(w);
  /* nn.Linear(32, 256) and nn.Embedding defaults. */
  double lb;
  LT_OK_OR_FAIL(lt_fixture_scalar(f, "init.linear32.bound", &lb));
  lt_params *p = lt_params_new();
  lt_linear_m lin;
  LT_OK_OR_FAIL(lt_linear_init(&lin, p, "lin", 32, 256, true, g));
  check_stats("linear(32, 256) weight", lin.weight, 0, lb / sqrt(3.0), lb);
  check_stats("linear(32, 256) bias", lin.bias, 0, lb / sqrt(3.0), lb);
  ck_assert(lt_params_find(p, "lin.weight") == lin.weight && lt_params_find(p, "lin.bias") == lin.bias);
  lt_embedding_m emb;
  LT_OK_OR_FAIL(lt_embedding_init(&emb, p, "emb", 200, 32, 5, g));
  ck_assert(lt_params_find(p, "emb.weight") == emb.weight);
  lt_tensor *rows = LT_NN(lt_narrow(emb.weight, 0, 6, 194));
  check_stats("embedding N(0, 1)", rows, 0, 1, 0);
  lt_tensor_free(rows);
  lt_params_free(p);
  lt_generator_free(g);
  lt_fixture_free(f);
  lt_fx_done("init");
}
END_TEST

/* ---- issue 18 ops: BatchNorm, GroupNorm, pad, cumsum (nn_ops.bin) ------- */

static lt_tensor *fxg(const lt_fixture *f, const char *fmt, const char *a, int k) {
  char name[256];
  snprintf(name, sizeof name, fmt, a, k);
  lt_tensor *t = lt_fixture_get(f, name);
  ck_assert_msg(t != NULL, "%s: %s", name, lt_last_error());
  return t;
}

static double fxs(const lt_fixture *f, const char *fmt, const char *a) {
  char name[256];
  double v;
  snprintf(name, sizeof name, fmt, a);
  ck_assert_msg(lt_fixture_scalar(f, name, &v) == LT_OK, "%s: %s", name, lt_last_error());
  return v;
}

/* sum(out * dout).backward() for the leaves */
static void backward_dot(lt_tensor *out, const lt_tensor *dout) {
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(out, dout)), 0, NULL, false)), NULL, false));
}

START_TEST(test_nnops_fixtures) {
  lt_fixture *f = lt_fx_open("nn_ops.bin");
  lt_scope *sc = lt_scope_begin();
  char lbl[256];
  /* BatchNorm: 3 training steps (outputs, gradients, running statistics), then eval */
  const char *bn_cases[] = {"1d", "1d_seq", "2d"};
  for (int i = 0; i < 3; i++) {
    const char *c = bn_cases[i];
    lt_tensor *w0 = fxg(f, "bn.%s.param.weight%.0d", c, 0), *b0 = fxg(f, "bn.%s.param.bias%.0d", c, 0);
    lt_params *p = LT_NNP(lt_params_new());
    lt_batch_norm_m bn;
    lt_batch_norm_opts o = LT_BATCH_NORM_DEFAULTS;
    const double mom = fxs(f, "bn.%s.momentum", c);
    o.cumulative_average = mom < 0;
    o.momentum = mom < 0 ? 0.1 : mom;
    o.eps = fxs(f, "bn.%s.eps", c);
    LT_OK_OR_FAIL(lt_batch_norm_init(&bn, p, "bn", w0->shape[0], &o));
    const bool prev = lt_set_grad_enabled(false);
    LT_OK_OR_FAIL(lt_copy_(bn.weight, w0));
    LT_OK_OR_FAIL(lt_copy_(bn.bias, b0));
    lt_set_grad_enabled(prev);
    for (int k = 0; k < 3; k++) {
      lt_tensor *x = fxg(f, "bn.%s.in.%d", c, k);
      LT_OK_OR_FAIL(lt_requires_grad_(x, true));
      lt_params_zero_grad(p);
      lt_tensor *y = LT_NN(lt_batch_norm_forward(&bn, x));
      backward_dot(y, fxg(f, "bn.%s.dout.%d", c, k));
#define BN_CMP(what, got, key, rtol)                                    \
  snprintf(lbl, sizeof lbl, "bn.%s.%s.%d", c, what, k);                 \
  lt_fx_close(lbl, got, fxg(f, "bn.%s." key ".%d", c, k), rtol, 1e-6)
      BN_CMP("out", y, "out", 1e-5);
      BN_CMP("grad_x", x->grad, "grad_x", 1e-4);
      BN_CMP("grad_w", bn.weight->grad, "grad_w", 1e-4);
      BN_CMP("grad_b", bn.bias->grad, "grad_b", 1e-4);
      BN_CMP("running_mean", bn.running_mean, "rm", 1e-5);
      BN_CMP("running_var", bn.running_var, "rv", 1e-5);
      BN_CMP("num_batches_tracked", bn.num_batches_tracked, "nbt", 0);
#undef BN_CMP
    }
    lt_params_train(p, false);
    snprintf(lbl, sizeof lbl, "bn.%s.eval.out", c);
    lt_fx_close(lbl, LT_NN(lt_batch_norm_forward(&bn, fxg(f, "bn.%s.eval.in%.0d", c, 0))),
                fxg(f, "bn.%s.eval.out%.0d", c, 0), 1e-5, 1e-6);
    lt_params_free(p);
  }
  /* GroupNorm, pad, cumsum: forward and the gradients of sum(out * dout) */
  const char *cases[] = {"gn.g2", "gn.g1_4d", "gn.g_per_channel", "pad.constant", "pad.reflect_1d",
                         "pad.reflect_2d", "pad.replicate_1d", "pad.replicate_2d", "pad.replicate_3d",
                         "cumsum.last", "cumsum.first", "cumsum.mid", "cumsum.last_f32", "cumsum.first_f32",
                         "cumsum.mid_f32", "cumsum.int"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *c = cases[i];
    const int nin = !strncmp(c, "gn.", 3) ? 3 : 1;
    lt_tensor *in[3];
    for (int k = 0; k < nin; k++) {
      in[k] = fxg(f, "%s.in.%d", c, k);
      if (lt_dtype_is_float(in[k]->dtype)) LT_OK_OR_FAIL(lt_requires_grad_(in[k], true));
    }
    lt_tensor *y;
    if (nin == 3) {
      y = lt_group_norm(in[0], (int64_t)fxs(f, "%s.groups", c), in[1], in[2], 1e-5);
    } else if (!strncmp(c, "pad.", 4)) {
      lt_tensor *pt = fxg(f, "%s.pad%.0d", c, 0);
      y = lt_pad(in[0], (int)pt->numel, pt->data, (lt_pad_mode)fxs(f, "%s.mode", c), fxs(f, "%s.value", c));
    } else {
      y = lt_cumsum(in[0], (int)fxs(f, "%s.dim", c));
    }
    snprintf(lbl, sizeof lbl, "%s.out", c);
    const double rt = in[0]->dtype == LT_DTYPE_F64 ? 1e-12 : 1e-5;
    lt_fx_close(lbl, y, fxg(f, "%s.out%.0d", c, 0), rt, 0);
    if (!y || !lt_dtype_is_float(y->dtype)) continue;
    backward_dot(y, fxg(f, "%s.dout%.0d", c, 0));
    for (int k = 0; k < nin; k++) {
      snprintf(lbl, sizeof lbl, "%s.grad.%d", c, k);
      lt_fx_close(lbl, in[k]->grad, fxg(f, "%s.grad.%d", c, k), rt * 10, rt);
    }
  }
  lt_scope_end(sc);
  lt_fixture_free(f);
  lt_fx_done("nn_ops.bin");
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_pytorch");
  LT_TEST_CASE(s, "reader", 0, test_reader_round_trip, test_reader_truncated, test_reader_corrupt,
               test_reader_real_files);
  TCase *tc = LT_TEST_CASE(s, "functional", 300, test_cross_entropy_all_ignored, test_dropout,
                           test_nnops_fixtures);
  tcase_add_loop_test(tc, test_linear, 0, 2);
  tcase_add_loop_test(tc, test_norms, 0, 2);
  tcase_add_loop_test(tc, test_activations, 0, 2);
  tcase_add_loop_test(tc, test_losses, 0, 2);
  tcase_add_loop_test(tc, test_chunked_head, 0, 2);
  tcase_add_loop_test(tc, test_more_losses, 0, 2);
  tcase_add_loop_test(tc, test_more_order, 0, 2);
  tcase_add_loop_test(tc, test_more_conv, 0, 2);
  tcase_add_loop_test(tc, test_embedding, 0, 2);
  TCase *ta = LT_TEST_CASE(s, "attention", 300, test_sdpa_dropout_edges);
  tcase_add_loop_test(ta, test_sdpa, 0, 2);
  tcase_add_loop_test(ta, test_rope_sinusoidal, 0, 2);
  tcase_add_loop_test(ta, test_mha, 0, 2);
  tcase_add_loop_test(ta, test_ffn, 0, 2);
  TCase *to = LT_TEST_CASE(s, "optim", 300, test_optim_defaults, test_schedules, test_clip,
                           test_init);
  tcase_add_loop_test(to, test_optimizer_replay, 0, N_OPTIM_CONFIGS);
  tcase_add_loop_test(to, test_optimizer_train, 0, N_OPTIM_CONFIGS);
  tcase_add_loop_test(to, test_optimizer_resume, 0, N_OPTIM_CONFIGS);
  return lt_test_run(s);
}
