/*
 * tests/test_autocast.c: bf16 matrix products (oneDNN, tensor/dnnl_matmul.c) and
 * autocast (lt_set_autocast).
 *
 * - lt_matmul on bf16 operands against the naive reference (lt__matmul_ref,
 *   f64 sums of the same bf16 values), contiguous, transposed, sliced and
 *   batched with broadcasting; strided operands give the same bits as
 *   contiguous copies;
 * - autocast: an f32 product equals the f64 product of the bf16-rounded
 *   operands to f32 accuracy (so operands really are rounded once and the
 *   sum is f32), outputs stay f32, f64 is untouched, the mode nests;
 * - Linear and multi-head attention forward and backward under autocast
 *   against f32, within the bf16 tolerance stated below;
 * - conv2d and conv1d forward and backward under autocast (oneDNN's bf16
 *   convolution, tensor/dnnl_conv.c) against f32 within the same tolerance: the
 *   CNN example's two layers, a strided grouped dilated case, a conv1d; the
 *   weight converted once for forward and backward (the operand cache);
 * - attention's unfused path under autocast (nn/attention.c: q, k, v converted
 *   once and saved as bf16, P, W and dS converted by the row steps) against
 *   f32: causal over two row blocks with GQA and dropout, masks with the
 *   weights returned, some inputs without gradients; a backward run outside
 *   autocast after an autocast forward (the saved bf16 copies widened);
 * - the same results on 1 and 2 threads, bit for bit.
 *
 * The CPU-without-bf16 paths: tests/CMakeLists.txt runs this program a second
 * and a third time with oneDNN limited to AVX-512 without AVX512_BF16 and to
 * AVX2 (ONEDNN_MAX_CPU_ISA) and LT_TEST_BF16_PATH naming the path
 * lt_runtime_get_info must then report. Everything above holds there too,
 * except that without a oneDNN bf16 matmul (AVX2) autocast leaves products in
 * f32 (docs/mixed-precision.md): they must then equal the f32 ones.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h" /* a node's saved tensors */
#include "test_util.h"
#include "util_layout.h"
#include "tensor/matmul_internal.h"
#include "nn/conv.h"
#include "tensor/autocast_internal.h" /* lt__autocast_cache_stats */
#include "tensor/dnnl_conv_internal.h" /* lt__dnnl_conv_bf16_runs */
#include "tensor/dnnl_internal.h"  /* lt__dnnl_bf16_available */

/* |got - want| <= BF16_TOL * max|want| for results whose operands were
 * rounded to bf16 (8 significant bits, relative error 2^-9 per operand): sums
 * of k such products stay well inside 2% of the largest magnitude. */
#define BF16_TOL 2e-2

static lt_tensor *rnd(lt_generator *g, lt_dtype dt, int nd, const int64_t *shape) {
  return lt_test_as_dtype(LT_NN(lt_randn(g, LT_DTYPE_F32, nd, shape)), dt);
}

/* Whether autocast rounds product operands on this CPU (or with the ISA
 * oneDNN is limited to): not on the path without a oneDNN bf16 matmul. */
static bool autocast_rounds(void) { return lt_test_autocast_rounds(); }

static double max_abs(const lt_tensor *t) {
  lt_tensor *a = LT_NN(lt_abs(t));
  lt_tensor *f = LT_NN(lt_to_dtype(a, LT_DTYPE_F64));
  lt_tensor *m = LT_NN(lt_amax(f, 0, NULL, false));
  double v;
  LT_OK_OR_FAIL(lt_item(m, &v));
  LT_FREE_ALL(a, f, m);
  return v;
}

/* got close to want within rtol of want's largest magnitude (any dtypes). */
static void assert_close_scaled(const lt_tensor *got, const lt_tensor *want, double rtol, const char *what) {
  lt_tensor *g = LT_NN(lt_to_dtype(got, LT_DTYPE_F64)), *w = LT_NN(lt_to_dtype(want, LT_DTYPE_F64));
  const double m = max_abs(w);
  lt_test_assert_close(g, w, 0, rtol * (m > 0 ? m : 1), what, "the f32 / reference result", __FILE__, __LINE__);
  LT_FREE_ALL(g, w);
}

START_TEST(test_runtime_info_and_mode) {
  lt_runtime_info info;
  LT_OK_OR_FAIL(lt_runtime_get_info(&info));
  ck_assert(info.bf16_gemm && *info.bf16_gemm);
  ck_assert(info.bf16_native == (strncmp(info.bf16_gemm, "native", 6) == 0));
  fprintf(stderr, "bf16 products: %s\nconvolutions under autocast: %s\n", info.bf16_gemm, info.bf16_conv);
  ck_assert(info.bf16_conv && *info.bf16_conv);
  ck_assert(info.bf16_attention && *info.bf16_attention);
  fprintf(stderr, "attention tiles under autocast: %s\n", info.bf16_attention);
  /* no bf16 matmul (AVX2): no bf16 convolution either, and the name says f32 */
  ck_assert(autocast_rounds() == (strncmp(info.bf16_conv, "f32 (", 5) != 0));
  ck_assert(!info.bf16_native || !strncmp(info.bf16_conv, "native", 6));
  const char *want = getenv("LT_TEST_BF16_PATH"); /* set by the fallback runs of tests/CMakeLists.txt */
  /* ONEDNN_MAX_CPU_ISA only lowers the ISA: an AVX2 CPU asked for AVX-512 stays on AVX2 (no oneDNN bf16) */
  if (want && !strncmp(want, "fallback (oneDNN emulates", 25) && !__builtin_cpu_supports("avx512bw"))
    want = "fallback (no oneDNN";
  if (want) ck_assert_msg(!strncmp(info.bf16_gemm, want, strlen(want)), "bf16 path '%s', expected '%s...'", info.bf16_gemm, want);
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_F32);
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_BF16), LT_DTYPE_F32);
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_BF16), LT_DTYPE_BF16); /* nests */
  lt_clear_error();
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_F64), LT_DTYPE_BF16); /* refused, unchanged */
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_DTYPE, "set_autocast: dtype f64");
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_BF16);
  ck_assert_int_eq(lt_set_autocast(LT_DTYPE_F32), LT_DTYPE_BF16);
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_F32);
}
END_TEST

/* bf16 x bf16 -> bf16 (PyTorch's result dtype), f32 accumulation. */
START_TEST(test_bf16_matmul_vs_reference) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(3));
  static const struct {
    int nda, ndb;
    int64_t sa[4], sb[4];
  } cases[] = {
      {2, 2, {5, 7}, {7, 3}},         {2, 2, {64, 96}, {96, 80}},    {1, 2, {17}, {17, 9}},
      {2, 1, {9, 17}, {17}},          {3, 2, {4, 33, 40}, {40, 24}}, {4, 4, {2, 3, 16, 8}, {2, 1, 8, 16}},
      {3, 3, {6, 64, 32}, {6, 32, 64}}, {2, 2, {1, 300}, {300, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    lt_tensor *a = rnd(g, LT_DTYPE_BF16, cases[c].nda, cases[c].sa);
    lt_tensor *b = rnd(g, LT_DTYPE_BF16, cases[c].ndb, cases[c].sb);
    lt_tensor *out = LT_NN(lt_matmul(a, b));
    ck_assert_int_eq(out->dtype, LT_DTYPE_BF16);
    lt_tensor *a64 = LT_NN(lt_to_dtype(a, LT_DTYPE_F64)), *b64 = LT_NN(lt_to_dtype(b, LT_DTYPE_F64));
    lt_tensor *ref = LT_NN(lt__matmul_ref(a64, b64));
    /* one rounding to bf16 at the end (2^-9 relative) plus f32 sums */
    lt_tensor *o64 = LT_NN(lt_to_dtype(out, LT_DTYPE_F64));
    lt_test_assert_close(o64, ref, 4.0 / 512, 1e-5 * max_abs(ref), "bf16 matmul", "f64 reference", __FILE__, __LINE__);
    /* transposed operands (passed to oneDNN as strides) give the same bits */
    if (cases[c].nda >= 2 && cases[c].ndb >= 2) {
      lt_tensor *at = LT_NN(lt_contiguous(LT_NN(lt_transpose(a, -2, -1))));
      lt_tensor *bt = LT_NN(lt_contiguous(LT_NN(lt_transpose(b, -2, -1))));
      lt_tensor *o2 = LT_NN(lt_matmul(LT_NN(lt_transpose(at, -2, -1)), LT_NN(lt_transpose(bt, -2, -1))));
      LT_ASSERT_SAME_BITS(o2, out);
    }
  }
  lt_generator_free(g);
  lt_scope_end(sc);
}
END_TEST

/* A thread of the caller's that runs bf16 products (oneDNN: a stream, dense
 * copies of strided operands, memory objects per cached primitive; without
 * oneDNN's bf16, the widened operands and the panel kernel's packing) and
 * f32 products under autocast (the bf16 copies it caches), and exits with
 * autocast still on, releases what it made: under AddressSanitizer, LeakSanitizer
 * reports them at exit otherwise (in other builds only the bits are
 * checked). Each thread's product matches the main thread's bit for bit. */
typedef struct bf16_thread_job {
  const lt_tensor *a, *b;   /* bf16 */
  const lt_tensor *af, *wf; /* f32; wf a parameter (requires grad) */
  lt_tensor *out, *out_ac;
  int cached; /* the thread's autocast cache entries when it exits */
  char err[256]; /* the thread's error message (errors are per thread) */
} bf16_thread_job;
/* a b^T in bf16, and the Linear af wf^T under autocast (wf's bf16 copy
 * cached by the thread, af's memoised; the thread exits with autocast on,
 * its caches full). */
static void *bf16_thread(void *arg) {
  bf16_thread_job *j = arg;
  lt_tensor *bt = lt_transpose(j->b, 0, 1); /* a strided operand: copied dense first */
  j->out = bt ? lt_matmul(j->a, bt) : NULL;
  lt_tensor_free(bt);
  const bool grad = lt_set_grad_enabled(false);
  lt_set_autocast(LT_DTYPE_BF16);
  j->out_ac = j->out ? lt_linear(j->af, j->wf, NULL) : NULL; /* af wf^T: wf's copy cached, af's memoised */
  lt__autocast_cache_stats(&j->cached, NULL, NULL);
  lt_set_grad_enabled(grad);
  if (!j->out || !j->out_ac) snprintf(j->err, sizeof j->err, "%s", lt_last_error());
  return NULL;
}
START_TEST(test_bf16_thread_exit) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_tensor *a = rnd(g, LT_DTYPE_BF16, 2, (const int64_t[]){48, 40});
  lt_tensor *b = rnd(g, LT_DTYPE_BF16, 2, (const int64_t[]){24, 40});
  lt_tensor *want = LT_NN(lt_matmul(a, LT_NN(lt_transpose(b, 0, 1))));
  lt_tensor *af = LT_NN(lt_to_dtype(a, LT_DTYPE_F32)), *wf = LT_NN(lt_to_dtype(b, LT_DTYPE_F32));
  LT_OK_OR_FAIL(lt_requires_grad_(wf, true));
  const bool grad = lt_set_grad_enabled(false);
  lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *want_ac = LT_NN(lt_linear(af, wf, NULL));
  lt_set_autocast(LT_DTYPE_F32);
  lt_set_grad_enabled(grad);
  for (int t = 0; t < 3; t++) {
    bf16_thread_job j = {a, b, af, wf, NULL, NULL, 0, ""};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, bf16_thread, &j), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(j.out && j.out_ac, "%s", j.err);
    LT_ASSERT_SAME_BITS(j.out, want);
    LT_ASSERT_SAME_BITS(j.out_ac, want_ac);
    if (lt__dnnl_bf16_available()) /* autocast on (else products stay f32): the thread had copies to release */
      ck_assert_int_gt(j.cached, 0);
    lt_tensor_free(j.out), lt_tensor_free(j.out_ac);
  }
  lt_generator_free(g);
  lt_scope_end(sc);
}
END_TEST

/* Autocast: the f32 product of bf16-rounded operands, f32 out. */
START_TEST(test_autocast_matmul) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_tensor *a = rnd(g, LT_DTYPE_F32, LT_SHAPE(3, 50, 70)), *b = rnd(g, LT_DTYPE_F32, LT_SHAPE(70, 40));
  lt_tensor *f = LT_NN(lt_matmul(a, b));
  lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *h = LT_NN(lt_matmul(a, b));
  lt_tensor *ht = LT_NN(lt_matmul(a, LT_NN(lt_transpose(LT_NN(lt_contiguous(LT_NN(lt_transpose(b, 0, 1)))), 0, 1))));
  lt_tensor *a64 = LT_NN(lt_to_dtype(a, LT_DTYPE_F64)), *d = LT_NN(lt_matmul(a64, LT_NN(lt_to_dtype(b, LT_DTYPE_F64))));
  lt_set_autocast(prev);
  ck_assert_int_eq(h->dtype, LT_DTYPE_F32);
  if (!autocast_rounds()) { /* no bf16 matmul: the f32 product (of each layout: BLIS's sums may depend on it), and
                             * nothing more to check */
    LT_ASSERT_SAME_BITS(h, f);
    LT_ASSERT_SAME_BITS(ht, LT_NN(lt_matmul(a, LT_NN(lt_transpose(LT_NN(lt_contiguous(LT_NN(lt_transpose(b, 0, 1)))), 0, 1)))));
    lt_generator_free(g);
    lt_scope_end(sc);
    return;
  }
  LT_ASSERT_SAME_BITS(ht, h);
  /* f64 is never autocast */
  lt_tensor *d2 = LT_NN(lt_matmul(a64, LT_NN(lt_to_dtype(b, LT_DTYPE_F64))));
  LT_ASSERT_SAME_BITS(d, d2);
  /* equal to f32 accuracy to the exact product of the rounded operands */
  lt_tensor *ar = LT_NN(lt_to_dtype(LT_NN(lt_to_dtype(a, LT_DTYPE_BF16)), LT_DTYPE_F64));
  lt_tensor *br = LT_NN(lt_to_dtype(LT_NN(lt_to_dtype(b, LT_DTYPE_BF16)), LT_DTYPE_F64));
  lt_tensor *ref = LT_NN(lt__matmul_ref(ar, br));
  lt_tensor *h64 = LT_NN(lt_to_dtype(h, LT_DTYPE_F64));
  lt_test_assert_close(h64, ref, 1e-5, 1e-5 * max_abs(ref), "autocast matmul", "f64 product of bf16 operands",
                       __FILE__, __LINE__);
  /* and far from the f32 product (operands really were rounded) */
  ck_assert(!lt_equal(h, f));
  assert_close_scaled(h, f, BF16_TOL, "autocast matmul vs f32");
  lt_generator_free(g);
  lt_scope_end(sc);
}
END_TEST

/* y = Linear(x), loss = sum(y * r): forward and all gradients, autocast vs f32. */
typedef struct {
  lt_dtype mode;
  int kind; /* LINEAR, MHA, or a convolution: CONV_CASES[kind - CONV0] */
} run_ctx;

enum { LINEAR, MHA, CONV0 };

/* Convolutions: x [N, C, H, W] (H 0: conv1d on [N, C, W]), weight [O, C/G, kh, kw], options. N 20 cuts
 * into 7 chunks of 3 and one of 2 (tensor/dnnl_conv.c's chunk_plan), so both of a pass's primitives run. */
static const struct conv_case {
  const char *name;
  int64_t N, C, H, W, O, kh, kw, stride, pad, dil, G;
  bool x_grad;
  bool all_bf16; /* on the native path every pass runs in bf16 (else oneDNN may lack some: f32 for those) */
} CONV_CASES[] = {
    {"CNN conv1 (1 -> 16, 3x3, pad 1)", 20, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, false, true},
    {"CNN conv2 (16 -> 32, 3x3, pad 1)", 20, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, true, true},
    {"strided grouped (32 -> 32, groups 2, stride 2)", 20, 32, 13, 11, 32, 3, 3, 2, 1, 1, 2, true, true},
    {"dilated (8 -> 16, dilation 2)", 20, 8, 13, 11, 16, 3, 3, 1, 2, 2, 1, true, true},
    {"conv1d (8 -> 16, k 5, pad 2)", 20, 8, 0, 40, 16, 1, 5, 1, 2, 1, 1, true, true},
    /* 4 and 6 channels a group: oneDNN 2.6 on AMX has the bf16 forward only, the backward passes run in f32 */
    {"small groups (8 -> 12, groups 2, stride 2, dilation 2)", 20, 8, 13, 11, 12, 3, 3, 2, 1, 2, 2, true, false},
};
#define N_CONV ((int)(sizeof CONV_CASES / sizeof *CONV_CASES))

/* The conversions the autocast operand cache made in one conv run (on the calling thread). */
static int64_t conv_conversions;

/* One convolution's forward in the caller's autocast mode: y; x, weight and
 * bias (leaves; x requires grad if the case says so). */
static lt_tensor *run_conv(const struct conv_case *k, lt_generator *g, lt_tensor **x, lt_tensor **w, lt_tensor **b) {
  const bool d1 = k->H == 0;
  *x = d1 ? rnd(g, LT_DTYPE_F32, LT_SHAPE(k->N, k->C, k->W)) : rnd(g, LT_DTYPE_F32, LT_SHAPE(k->N, k->C, k->H, k->W));
  *w = d1 ? rnd(g, LT_DTYPE_F32, LT_SHAPE(k->O, k->C / k->G, k->kw))
          : rnd(g, LT_DTYPE_F32, LT_SHAPE(k->O, k->C / k->G, k->kh, k->kw));
  *b = rnd(g, LT_DTYPE_F32, LT_SHAPE(k->O));
  if (k->x_grad) LT_OK_OR_FAIL(lt_requires_grad_(*x, true));
  LT_OK_OR_FAIL(lt_requires_grad_(*w, true));
  LT_OK_OR_FAIL(lt_requires_grad_(*b, true));
  lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
  for (int d = 0; d < 2; d++) o.stride[d] = k->stride, o.padding[d] = k->pad, o.dilation[d] = k->dil;
  o.groups = k->G;
  lt__autocast_cache_stats(NULL, NULL, &conv_conversions); /* run_layer subtracts it after the backward */
  return LT_NN(d1 ? lt_conv1d(*x, *w, *b, &o) : lt_conv2d(*x, *w, *b, &o));
}

static int run_layer(void *u, lt_tensor **out, int cap) {
  const run_ctx *c = u;
  lt_generator *g = LT_NNP(lt_generator_new(11));
  lt_params *p = LT_NNP(lt_params_new());
  lt_scope *sc = lt_scope_begin();
  lt_linear_m lin;
  lt_mha mha;
  lt_tensor *x, *y;
  lt_tensor *params[8];
  int np = 0;
  /* A convolution runs its forward and backward in one autocast region, as
   * the trainer does: leaving autocast drops the weight's bf16 copy, which
   * the backward reads again (one conversion per step, checked below). */
  const lt_dtype prev_conv = c->kind >= CONV0 ? lt_set_autocast(c->mode) : LT_DTYPE_F32;
  if (c->kind >= CONV0) {
    lt_tensor *w, *b;
    y = run_conv(&CONV_CASES[c->kind - CONV0], g, &x, &w, &b);
    params[np++] = w, params[np++] = b;
  } else if (c->kind == MHA) {
    LT_OK_OR_FAIL(lt_mha_init(&mha, p, "attn", 32, 4, 4, true, 0.0, g));
    x = rnd(g, LT_DTYPE_F32, LT_SHAPE(2, 24, 32));
    LT_OK_OR_FAIL(lt_requires_grad_(x, true));
    lt_dtype prev = lt_set_autocast(c->mode);
    lt_attention_opts o = {.causal = true};
    y = LT_NN(lt_mha_forward(&mha, x, x, &o, 0, NULL, NULL));
    lt_set_autocast(prev);
    params[np++] = mha.q_proj.weight, params[np++] = mha.k_proj.weight, params[np++] = mha.out_proj.weight;
    params[np++] = mha.v_proj.bias;
  } else {
    LT_OK_OR_FAIL(lt_linear_init(&lin, p, "lin", 48, 40, true, g));
    x = rnd(g, LT_DTYPE_F32, LT_SHAPE(3, 20, 48));
    LT_OK_OR_FAIL(lt_requires_grad_(x, true));
    lt_dtype prev = lt_set_autocast(c->mode);
    y = LT_NN(lt_linear_forward(&lin, x));
    lt_set_autocast(prev);
    params[np++] = lin.weight, params[np++] = lin.bias;
  }
  ck_assert_int_eq(y->dtype, LT_DTYPE_F32);
  lt_tensor *r = rnd(g, LT_DTYPE_F32, y->ndim, y->shape);
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(y, r)), 0, NULL, false));
  lt_dtype prev = lt_set_autocast(c->mode);
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  if (c->kind >= CONV0) {
    int64_t after = 0;
    lt__autocast_cache_stats(NULL, NULL, &after);
    conv_conversions = after - conv_conversions;
    lt_set_autocast(prev_conv);
  }
  lt_set_autocast(prev);
  int n = 0;
  out[n++] = lt_tensor_keep(LT_NN(lt_detach(y)));
  if (x->grad) out[n++] = lt_tensor_keep(LT_NN(lt_clone(x->grad)));
  for (int i = 0; i < np && n < cap; i++) {
    ck_assert_int_eq(params[i]->dtype, LT_DTYPE_F32);
    ck_assert_int_eq(params[i]->grad->dtype, LT_DTYPE_F32);
    out[n++] = lt_tensor_keep(LT_NN(lt_clone(params[i]->grad)));
  }
  lt_scope_end(sc);
  lt_params_free(p);
  lt_generator_free(g);
  return n;
}

static void layer_vs_f32(int kind) {
  lt_tensor *f[16], *h[16];
  run_ctx cf = {LT_DTYPE_F32, kind}, ch = {LT_DTYPE_BF16, kind};
  const char *name = kind == LINEAR ? "linear" : kind == MHA ? "mha" : CONV_CASES[kind - CONV0].name;
  const int n = run_layer(&cf, f, 16);
  const int64_t bf16_runs = lt__dnnl_conv_bf16_runs();
  ck_assert_int_eq(run_layer(&ch, h, 16), n);
  if (kind >= CONV0) {
    /* The CPU's bf16 convolution ran (native path: every pass; oneDNN's
     * emulation may lack some), with the weight converted once for the
     * forward and the input gradient; none without a bf16 matmul. */
    lt_runtime_info info;
    LT_OK_OR_FAIL(lt_runtime_get_info(&info));
    const int64_t ran = lt__dnnl_conv_bf16_runs() - bf16_runs;
    const int64_t passes = CONV_CASES[kind - CONV0].x_grad ? 3 : 2;
    fprintf(stderr, "%s: %lld of %lld passes in bf16, %lld conversions\n", name, (long long)ran, (long long)passes,
            (long long)conv_conversions);
    if (!strncmp(info.bf16_conv, "native", 6) && CONV_CASES[kind - CONV0].all_bf16) {
      ck_assert_msg(ran == passes, "%s: %lld of %lld passes ran on oneDNN's bf16 convolution", name, (long long)ran,
                    (long long)passes);
      ck_assert_msg(conv_conversions == 1, "%s: %lld bf16 conversions in a step, want 1 (the weight)", name,
                    (long long)conv_conversions);
    }
    if (!autocast_rounds()) ck_assert_int_eq(ran, 0);
  }
  for (int i = 0; i < n; i++) {
    char what[160];
    snprintf(what, sizeof what, "%s output %d under autocast", name, i);
    ck_assert_int_eq(h[i]->dtype, LT_DTYPE_F32);
    if (i < 2 && kind >= CONV0 && autocast_rounds() && CONV_CASES[kind - CONV0].all_bf16) /* y and the next gradient from a product */
      ck_assert_msg(!lt_equal(h[i], f[i]), "%s: bit-identical to f32: autocast did not apply", what);
    else if (i < 3 && kind < CONV0 && autocast_rounds()) /* y, dx, the first weight's gradient come from products (a bias gradient is a plain sum) */
      ck_assert_msg(!lt_equal(h[i], f[i]), "%s: bit-identical to f32: autocast did not apply", what);
    else if (!autocast_rounds())
      ck_assert_msg(lt_equal(h[i], f[i]), "%s: differs from f32 on the path without a bf16 matmul", what);
    assert_close_scaled(h[i], f[i], BF16_TOL, what);
    lt_tensor_free(f[i]);
    lt_tensor_free(h[i]);
  }
  char what[160];
  snprintf(what, sizeof what, "%s under autocast", name);
  lt_test_same_on_threads(run_layer, &ch, what);
}

START_TEST(test_autocast_linear) { layer_vs_f32(LINEAR); }
END_TEST
START_TEST(test_autocast_mha) { layer_vs_f32(MHA); }
END_TEST
/* conv2d / conv1d under autocast: one case per _i (CONV_CASES). */
START_TEST(test_autocast_conv) { layer_vs_f32(CONV0 + _i); }
END_TEST

/* ---- attention's unfused path --------------------------------------------- */

typedef struct attn_case {
  int64_t B, NH, NKV, T, S, HS;
  bool causal, masks, dropout, weights;
  bool need[3]; /* q, k, v require grad */
} attn_case;
static const attn_case ATTN_CASES[] = {
    {2, 4, 2, 200, 200, 32, true, false, true, false, {true, true, true}}, /* 2 causal row blocks, GQA, dropout */
    {2, 2, 2, 40, 56, 16, false, true, false, true, {true, false, true}},  /* float mask, padding, weights */
};
#define N_ATTN ((int)(sizeof ATTN_CASES / sizeof ATTN_CASES[0]))

typedef struct attn_ctx {
  int c;
  lt_dtype fwd, bwd; /* autocast modes of the forward and of the backward */
} attn_ctx;

/* Unfused attention of q, k, v laid out as lt_mha passes them (transposes of
 * [B,T,NH,HS]); outputs: out, the weights (when asked), the gradients of
 * sum(out * r) for the inputs that require them. */
static int attn_layer(void *u, lt_tensor **out, int cap) {
  const attn_ctx *x = u;
  const attn_case *c = &ATTN_CASES[x->c];
  lt_generator *g = LT_NNP(lt_generator_new(5)), *dg = LT_NNP(lt_generator_new(9));
  lt_scope *sc = lt_scope_begin();
  const int64_t H[3] = {c->NH, c->NKV, c->NKV}, L[3] = {c->T, c->S, c->S};
  lt_tensor *leaf[3], *in[3];
  for (int i = 0; i < 3; i++) {
    leaf[i] = rnd(g, LT_DTYPE_F32, LT_SHAPE(c->B, L[i], H[i], c->HS));
    LT_OK_OR_FAIL(lt_requires_grad_(leaf[i], c->need[i]));
    in[i] = LT_NN(lt_transpose(leaf[i], 1, 2));
  }
  lt_attention_opts o = {.causal = c->causal, .impl = LT_ATTENTION_UNFUSED, .dropout_p = c->dropout ? 0.2 : 0};
  if (c->masks) {
    o.attn_mask = rnd(g, LT_DTYPE_F32, LT_SHAPE(c->T, c->S));
    o.key_padding_mask = LT_NN(lt_gt_scalar(rnd(g, LT_DTYPE_F32, LT_SHAPE(c->B, c->S)), 1.0));
  }
  lt_nn_ctx ctx = {true, dg};
  lt_tensor *w = NULL;
  lt_dtype prev = lt_set_autocast(x->fwd);
  lt_tensor *y = LT_NN(lt_scaled_dot_product_attention(in[0], in[1], in[2], &o, &ctx, c->weights ? &w : NULL));
  lt_set_autocast(prev);
  /* what the backward reads: the bf16 copies when the products ran in bf16 */
  const lt_dtype saved = x->fwd == LT_DTYPE_BF16 && autocast_rounds() ? LT_DTYPE_BF16 : LT_DTYPE_F32;
  for (int i = 0; i < 3; i++) ck_assert_int_eq(y->grad_fn->saved[i]->dtype, saved);
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(y, rnd(g, LT_DTYPE_F32, 4, y->shape))), 0, NULL, false));
  prev = lt_set_autocast(x->bwd);
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  lt_set_autocast(prev);
  int n = 0;
  out[n++] = lt_tensor_keep(LT_NN(lt_detach(y)));
  if (w) out[n++] = lt_tensor_keep(w);
  for (int i = 0; i < 3 && n < cap; i++) {
    ck_assert(c->need[i] == (leaf[i]->grad != NULL));
    if (leaf[i]->grad) out[n++] = lt_tensor_keep(LT_NN(lt_clone(leaf[i]->grad)));
  }
  lt_scope_end(sc);
  lt_generator_free(g), lt_generator_free(dg);
  return n;
}

/* Case _i: under autocast (and with only the forward under it) against f32
 * within the bf16 tolerance; the same bits on 1 and 2 threads. */
START_TEST(test_autocast_attention_unfused) {
  lt_tensor *f[8], *h[8], *m[8];
  attn_ctx cf = {_i, LT_DTYPE_F32, LT_DTYPE_F32}, ch = {_i, LT_DTYPE_BF16, LT_DTYPE_BF16},
           cm = {_i, LT_DTYPE_BF16, LT_DTYPE_F32};
  const int n = attn_layer(&cf, f, 8);
  ck_assert_int_eq(attn_layer(&ch, h, 8), n);
  ck_assert_int_eq(attn_layer(&cm, m, 8), n);
  for (int i = 0; i < n; i++) {
    char what[160];
    snprintf(what, sizeof what, "attention case %d, output %d under autocast", _i, i);
    if (autocast_rounds()) ck_assert_msg(!lt_equal(h[i], f[i]), "%s: bit-identical to f32: autocast did not apply", what);
    else ck_assert_msg(lt_equal(h[i], f[i]) && lt_equal(m[i], f[i]), "%s: differs from f32 without a bf16 matmul", what);
    assert_close_scaled(h[i], f[i], BF16_TOL, what);
    snprintf(what, sizeof what, "attention case %d, output %d, backward outside autocast", _i, i);
    assert_close_scaled(m[i], f[i], BF16_TOL, what);
    if (i == 0 || (ATTN_CASES[_i].weights && i == 1)) /* the forward's results do not depend on the backward's mode */
      ck_assert_msg(lt_equal(m[i], h[i]), "%s: forward differs from the autocast run's", what);
    LT_FREE_ALL(f[i], h[i], m[i]);
  }
  lt_test_same_on_threads(attn_layer, &ch, "unfused attention under autocast");
}
END_TEST

int main(void) {
  Suite *s = suite_create("autocast");
  TCase *tc = tcase_create("autocast");
  tcase_add_test(tc, test_runtime_info_and_mode);
  tcase_add_test(tc, test_bf16_matmul_vs_reference);
  tcase_add_test(tc, test_bf16_thread_exit);
  tcase_add_test(tc, test_autocast_matmul);
  tcase_add_test(tc, test_autocast_linear);
  tcase_add_test(tc, test_autocast_mha);
  tcase_add_loop_test(tc, test_autocast_conv, 0, N_CONV);
  tcase_add_loop_test(tc, test_autocast_attention_unfused, 0, N_ATTN);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
