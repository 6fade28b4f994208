/*
 * tests/test_conv.c: nn/conv.c against PyTorch (tests/fixtures/conv.bin,
 * made by tests/fixtures/make_conv_fixtures.py): forward, backward (input,
 * weight and bias gradients) and max-pooling indices, over strides, padding,
 * dilation, groups, "same", odd sizes, tied maxima, and each case again with
 * non-contiguous inputs; and the Conv1d/Conv2d modules (names, shapes,
 * PyTorch's init bounds, roll-back on error).
 *
 * Values, layouts, 1 vs 2 threads, errors and f64 gradchecks of every op are
 * in the op table (tests/opinfo_conv.inc, run by tests/test_ops.c).
 */
#include "test_util.h"
#include "util_fixtures.h"
#include "util_fxcheck.h"
#include "util_layout.h"

#include "nn/conv.h"
#include "tensor/dnnl_conv_internal.h" /* lt__dnnl_conv_runs */
#include "tensor/paths_internal.h"     /* lt__path_force */
#include "tensor/storage_internal.h" /* lt__live_tensors */

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { OP_CONV2D, OP_CONV1D, OP_CONVT, OP_UNFOLD, OP_FOLD, OP_MAXPOOL2D, OP_AVGPOOL2D, OP_MAXPOOL1D, OP_AVGPOOL1D,
       OP_ADAPTIVE };

/* Runs case op with the fixture's arguments a (layout: make_conv_fixtures.py). */
static lt_tensor *run_op(int op, const double *a, int nin, lt_tensor *const *in, lt_tensor **indices) {
  lt_conv_opts c = LT_CONV_OPTS_DEFAULT;
  for (int d = 0; d < 2; d++) {
    c.stride[d] = (int64_t)a[0 + d], c.padding[d] = (int64_t)a[2 + d], c.dilation[d] = (int64_t)a[4 + d];
    c.output_padding[d] = (int64_t)a[6 + d];
  }
  c.groups = a[8] > 0 ? (int64_t)a[8] : 1;
  c.padding_same = a[9] != 0;
  lt_pool_opts p = LT_POOL_OPTS((int64_t)a[10], (int64_t)a[11]);
  for (int d = 0; d < 2; d++) p.stride[d] = (int64_t)a[d], p.padding[d] = (int64_t)a[2 + d], p.dilation[d] = (int64_t)a[4 + d];
  p.ceil_mode = a[12] != 0, p.count_include_pad = a[13] != 0, p.divisor_override = (int64_t)a[14];
  const lt_tensor *b = nin > 2 ? in[2] : NULL;
  switch (op) {
    case OP_CONV2D: return lt_conv2d(in[0], in[1], b, &c);
    case OP_CONV1D: return lt_conv1d(in[0], in[1], b, &c);
    case OP_CONVT: return lt_conv_transpose2d(in[0], in[1], b, &c);
    case OP_UNFOLD: return lt_unfold(in[0], p.kernel[0], p.kernel[1], &c);
    case OP_FOLD: return lt_fold(in[0], (int64_t)a[15], (int64_t)a[16], p.kernel[0], p.kernel[1], &c);
    case OP_MAXPOOL2D: return lt_max_pool2d(in[0], &p, indices);
    case OP_AVGPOOL2D: return lt_avg_pool2d(in[0], &p);
    case OP_MAXPOOL1D: return lt_max_pool1d(in[0], &p, indices);
    case OP_AVGPOOL1D: return lt_avg_pool1d(in[0], &p);
    default: return lt_adaptive_avg_pool2d(in[0], (int64_t)a[15], (int64_t)a[16]);
  }
}

/* One case, with contiguous inputs or (strided) in other layouts. */
static void check_case(lt_fixture *f, const char *c, bool strided) {
  char key[256], label[300];
  double opd = 0;
  ck_assert(lt_fixture_scalar(f, (snprintf(key, sizeof key, "%s.op", c), key), &opd) == LT_OK);
  lt_tensor *args = LT_NN(lt_fixture_get(f, (snprintf(key, sizeof key, "%s.args", c), key)));
  const double *a = args->data;
  lt_tensor *in[3] = {0};
  int nin = 0;
  while (nin < 3 && lt_fixture_has(f, (snprintf(key, sizeof key, "%s.in.%d", c, nin), key))) {
    lt_tensor *t = LT_NN(lt_fixture_get(f, key));
    if (strided) t = lt_test_layout_of(t, nin == 0 ? LT_TEST_TRANSPOSED : LT_TEST_STRIDED);
    ck_assert(lt_requires_grad_(t, true) == LT_OK);
    in[nin++] = t;
  }
  const double rtol = in[0]->dtype == LT_DTYPE_F64 ? 1e-9 : 1e-5;
  lt_scope *scope = lt_scope_begin();
  lt_tensor *idx = NULL;
  const bool want_idx = lt_fixture_has(f, (snprintf(key, sizeof key, "%s.indices", c), key));
  lt_tensor *y = run_op((int)opd, a, nin, in, want_idx ? &idx : NULL);
  lt_tensor *want = LT_NN(lt_fixture_get(f, (snprintf(key, sizeof key, "%s.out", c), key)));
  snprintf(label, sizeof label, "%s%s.out", c, strided ? " (strided)" : "");
  lt_fx_close(label, y, want, rtol, 0);
  if (want_idx) {
    lt_tensor *wi = LT_NN(lt_fixture_get(f, (snprintf(key, sizeof key, "%s.indices", c), key)));
    snprintf(label, sizeof label, "%s%s.indices", c, strided ? " (strided)" : "");
    lt_fx_close(label, idx, wi, 0, 0);
  }
  if (y) {
    lt_tensor *dout = LT_NN(lt_fixture_get(f, (snprintf(key, sizeof key, "%s.dout", c), key)));
    ck_assert_msg(lt_backward(y, dout, false) == LT_OK, "%s: backward: %s", c, lt_last_error());
    for (int k = 0; k < nin; k++) {
      lt_tensor *gw = LT_NN(lt_fixture_get(f, (snprintf(key, sizeof key, "%s.grad.%d", c, k), key)));
      snprintf(label, sizeof label, "%s%s.grad.%d", c, strided ? " (strided)" : "", k);
      lt_fx_close(label, in[k]->grad, gw, in[0]->dtype == LT_DTYPE_F64 ? 1e-9 : 1e-4, 0);
    }
  }
  lt_scope_end(scope);
  for (int k = 0; k < nin; k++) lt_tensor_free(in[k]);
  lt_tensor_free(args);
}

START_TEST(test_pytorch_cases) {
  lt_fixture *f = lt_fx_open("conv.bin");
  const int64_t live = lt__live_tensors();
  int cases = 0;
  for (int i = 0; i < lt_fixture_count(f); i++) {
    const char *name = lt_fixture_name(f, i);
    const size_t n = strlen(name);
    if (n < 4 || strcmp(name + n - 3, ".op") != 0) continue;
    char c[200];
    snprintf(c, sizeof c, "%.*s", (int)(n - 3), name);
    check_case(f, c, false);
    check_case(f, c, true);
    cases++;
  }
  lt_fixture_free(f);
  printf("conv: %d PyTorch cases, contiguous and strided\n", cases);
  ck_assert_msg(cases >= 25, "only %d cases in conv.bin", cases);
  ck_assert_msg(lt__live_tensors() == live, "leaks %lld tensors", (long long)(lt__live_tensors() - live));
  lt_fx_done("conv PyTorch cases");
}
END_TEST

/* Conv2d: parameter names and shapes, PyTorch's bounds (weight within
 * 1/sqrt(fan_in) = kaiming_uniform(a = sqrt(5)), bias the same bound), the
 * forward equal to lt_conv2d, and an init that fails changes nothing. */
START_TEST(test_modules) {
  lt_params *p = lt_params_new();
  lt_generator *g = lt_generator_new(7);
  lt_conv2d_m m;
  lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
  o.padding[0] = o.padding[1] = 1, o.groups = 2;
  ck_assert_int_eq(lt_conv2d_init(&m, p, "conv1", 4, 6, 3, 3, &o, true, g), LT_OK);
  ck_assert_ptr_eq(lt_params_find(p, "conv1.weight"), m.weight);
  ck_assert_ptr_eq(lt_params_find(p, "conv1.bias"), m.bias);
  ck_assert_int_eq(m.weight->ndim, 4);
  ck_assert(m.weight->shape[0] == 6 && m.weight->shape[1] == 2 && m.weight->shape[2] == 3 && m.weight->shape[3] == 3);
  const double bound = 1.0 / sqrt(2.0 * 9.0);
  double wmax = 0, bmax = 0;
  for (int64_t i = 0; i < m.weight->numel; i++) wmax = fmax(wmax, fabs(((const float *)m.weight->data)[i]));
  for (int64_t i = 0; i < m.bias->numel; i++) bmax = fmax(bmax, fabs(((const float *)m.bias->data)[i]));
  ck_assert_msg(wmax <= bound && wmax > 0.5 * bound, "weight max %g, bound %g", wmax, bound);
  ck_assert_msg(bmax <= bound && bmax > 0.3 * bound, "bias max %g, bound %g", bmax, bound);
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (const int64_t[]){2, 4, 5, 5}));
  lt_tensor *y = LT_NN(lt_conv2d_forward(&m, x)), *r = LT_NN(lt_conv2d(x, m.weight, m.bias, &o));
  LT_ASSERT_SAME_BITS(y, r);
  /* a failing init (groups do not divide) leaves the store and the generator as they were */
  const int count = lt_params_count(p);
  const lt_generator_state st = lt_generator_get_state(g);
  lt_conv1d_m m1;
  o.groups = 3;
  LT_EXPECT_ERR(lt_conv1d_init(&m1, p, "conv2", 4, 6, 3, &o, true, g), LT_ERR_INVALID, "conv1d_init: 'conv2'");
  ck_assert_int_eq(lt_params_count(p), count);
  const lt_generator_state st2 = lt_generator_get_state(g);
  ck_assert(memcmp(&st, &st2, sizeof st) == 0);
  o.groups = 1;
  ck_assert_int_eq(lt_conv1d_init(&m1, p, "conv2", 4, 6, 3, &o, false, g), LT_OK);
  ck_assert_ptr_null(m1.bias);
  ck_assert(m1.weight->ndim == 3 && m1.weight->shape[2] == 3);
  lt_tensor_free(x);
  lt_tensor_free(y);
  lt_tensor_free(r);
  lt_generator_free(g);
  lt_params_free(p);
}
END_TEST

/* conv2d over a batch large enough to be done in several slices of images
 * (conv_slice in nn/conv.c: about 2 MiB of im2col per slice, 18 images of
 * the CNN's second layer) equals image-by-image convolution (one slice
 * each): y, dx, the dW accumulated over slices, and db. Groups 2, stride 1,
 * padding 1, a strided (transposed) input. */
START_TEST(test_conv2d_slices) {
  const int64_t N = 41, C = 16, H = 14, W = 14, CO = 32;
  lt_scope *scope = lt_scope_begin();
  lt_generator *g = lt_generator_new(11);
  lt_tensor *x0 = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (int64_t[]){N, C, W, H}));
  lt_tensor *w = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (int64_t[]){CO, C / 2, 3, 3}));
  lt_tensor *b = LT_NN(lt_randn(g, LT_DTYPE_F32, 1, (int64_t[]){CO}));
  lt_tensor *dout = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (int64_t[]){N, CO, H, W}));
  lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
  o.padding[0] = o.padding[1] = 1, o.groups = 2;
  /* the whole batch, x [N, C, H, W] a transposed (strided) view */
  lt_tensor *in[3] = {x0, w, b};
  for (int k = 0; k < 3; k++) ck_assert(lt_requires_grad_(in[k], true) == LT_OK);
  lt_tensor *y = LT_NN(lt_conv2d(LT_NN(lt_transpose(x0, 2, 3)), w, b, &o));
  ck_assert(lt_backward(y, dout, false) == LT_OK);
  /* image by image: one slice each */
  lt_tensor *ys[41], *dxs[41];
  lt_tensor *dw1 = LT_NN(lt_zeros(LT_DTYPE_F32, 4, w->shape)), *db1 = LT_NN(lt_zeros(LT_DTYPE_F32, 1, b->shape));
  for (int64_t n = 0; n < N; n++) {
    bool grad = lt_set_grad_enabled(false); /* fresh leaves */
    lt_tensor *xn = LT_NN(lt_clone(LT_NN(lt_narrow(x0, 0, n, 1))));
    lt_tensor *wi = LT_NN(lt_clone(w)), *bi = LT_NN(lt_clone(b));
    lt_set_grad_enabled(grad);
    lt_tensor *pi[3] = {xn, wi, bi};
    for (int k = 0; k < 3; k++) ck_assert(lt_requires_grad_(pi[k], true) == LT_OK);
    ys[n] = LT_NN(lt_conv2d(LT_NN(lt_transpose(xn, 2, 3)), wi, bi, &o));
    ck_assert(lt_backward(ys[n], LT_NN(lt_narrow(dout, 0, n, 1)), false) == LT_OK);
    dxs[n] = xn->grad;
    ck_assert(lt_add_(dw1, wi->grad) == LT_OK);
    ck_assert(lt_add_(db1, bi->grad) == LT_OK);
  }
  lt_fx_close("conv2d slices: y", y, LT_NN(lt_cat((int)N, ys, 0)), 1e-5, 1e-5);
  lt_fx_close("conv2d slices: dx", x0->grad, LT_NN(lt_cat((int)N, dxs, 0)), 1e-5, 1e-5);
  lt_fx_close("conv2d slices: dW", w->grad, dw1, 1e-4, 1e-3);
  lt_fx_close("conv2d slices: db", b->grad, db1, 1e-4, 1e-3);
  lt_scope_end(scope);
  lt_generator_free(g);
  lt_fx_done("conv2d slices");
}
END_TEST

/* conv2d on oneDNN (tensor/dnnl_conv.c) against the im2col path, forward and all
 * three gradients: the CNN's two layers (conv1: one input channel, plain
 * input; conv2: blocked layouts), a grouped, strided, dilated one and a
 * "same"-padded grouped one, on 41 images (chunks of 6 and a last one of 5),
 * with the passes that ran on oneDNN counted (so the test fails if they no
 * longer do; the dilated one's gradients have no JIT kernel in oneDNN 2.6 and
 * take the im2col path in the same call); and a stride that leaves input
 * columns unread (a negative right padding, which this path refuses). */
/* max_pool2d's 2x2 kernel (nn/pool.c) on both paths of the pool family:
 * a NaN wins wherever it is in the window, the last of several in scan
 * order (PyTorch's rule: `val > max || isnan(val)`), the first of tied
 * maxima wins, and the indices are flat positions in the plane; rows
 * of 1, 16 and 21 outputs (the AVX-512 kernel's masks), same bits and
 * indices on both paths. */
START_TEST(test_max_pool22_paths) {
  const int64_t widths[3] = {2, 32, 42};
  lt_generator *g = lt_generator_new(9);
  for (int wi = 0; wi < 3; wi++) {
    const int64_t W = widths[wi], OW = W / 2;
    lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (int64_t[]){2, 3, 4, W}));
    float *xd = x->data;
    xd[1] = NAN;                 /* plane 0, row 0: window 0, second column */
    xd[W + 1] = NAN;             /* the same window's second row: this later NaN wins */
    xd[4 * W + W] = NAN;         /* plane 1, window 0, second row, first column */
    xd[2 * 4 * W] = xd[2 * 4 * W + 1] = 5.0f; /* plane 2: a tie in window 0's first row */
    lt_tensor *y[2], *ix[2];
    const lt_pool_opts o = LT_POOL_OPTS(2, 2);
    for (int p = 0; p < 2; p++) {
      const lt__path path = p ? LT__PATH_pool_c : LT__PATH_pool_avx512;
      if (!lt__path_supported(path)) {
        y[p] = ix[p] = NULL;
        continue;
      }
      lt__path_force(LT__PATH_FAMILY_pool, path);
      y[p] = LT_NN(lt_max_pool2d(x, &o, &ix[p]));
      const float *yd = y[p]->data;
      const int64_t *id = ix[p]->data, L = 2 * OW;
      ck_assert(isnan(yd[0]) && id[0] == W + 1);
      ck_assert(isnan(yd[L]) && id[L] == W);
      ck_assert(yd[2 * L] == 5.0f && id[2 * L] == 0);
      for (int64_t e = 0; e < y[p]->numel; e++) { /* every output is its window's value at its index */
        const int64_t pl = e / L, q = id[e];
        ck_assert(q >= 0 && q < 4 * W);
        const float v = xd[pl * 4 * W + q];
        ck_assert(isnan(v) ? isnan(yd[e]) : v == yd[e]);
      }
    }
    lt__path_force(LT__PATH_FAMILY_pool, LT__PATH_AUTO);
    if (y[0] && y[1]) {
      LT_ASSERT_SAME_BITS(y[0], y[1]);
      LT_ASSERT_SAME_BITS(ix[0], ix[1]);
    }
    for (int p = 0; p < 2; p++) lt_tensor_free(y[p]), lt_tensor_free(ix[p]);
    lt_tensor_free(x);
  }
  lt_generator_free(g);
}
END_TEST

START_TEST(test_conv2d_dnnl) {
  typedef struct cs {
    int64_t C, H, W, CO, k, stride, pad, dil, groups;
    bool same;
    int passes; /* of the 3 (forward, weight and input gradients) that oneDNN 2.6 runs on a JIT kernel */
  } cs;
  const cs cases[] = {{1, 28, 28, 16, 3, 1, 1, 1, 1, false, 3}, {16, 14, 14, 32, 3, 1, 1, 1, 1, false, 3},
                      {32, 13, 11, 32, 3, 2, 2, 2, 2, false, 1}, {32, 9, 10, 32, 4, 1, 0, 1, 2, true, 3},
                      {3, 10, 10, 5, 3, 3, 0, 1, 1, false, 0}};
  const int64_t N = 41;
  lt_generator *g = lt_generator_new(5);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const cs *c = &cases[ci];
    lt_scope *scope = lt_scope_begin();
    lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
    o.stride[0] = o.stride[1] = c->stride, o.padding[0] = o.padding[1] = c->pad;
    o.dilation[0] = o.dilation[1] = c->dil, o.groups = c->groups, o.padding_same = c->same;
    lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (int64_t[]){N, c->C, c->H, c->W}));
    lt_tensor *w = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, (int64_t[]){c->CO, c->C / c->groups, c->k, c->k}));
    lt_tensor *b = LT_NN(lt_randn(g, LT_DTYPE_F32, 1, (int64_t[]){c->CO}));
    lt_tensor *y[2], *gr[2][3], *dy = NULL;
    for (int path = 0; path < 2; path++) { /* 0: oneDNN, 1: im2col */
      lt__path_force(LT__PATH_FAMILY_conv, path == 0 ? LT__PATH_conv_dnnl : LT__PATH_conv_im2col);
      const int64_t runs = lt__dnnl_conv_runs();
      bool grad = lt_set_grad_enabled(false);
      lt_tensor *in[3] = {LT_NN(lt_clone(x)), LT_NN(lt_clone(w)), LT_NN(lt_clone(b))};
      lt_set_grad_enabled(grad);
      for (int k = 0; k < 3; k++) ck_assert(lt_requires_grad_(in[k], true) == LT_OK);
      y[path] = LT_NN(lt_conv2d(in[0], in[1], in[2], &o));
      if (!dy) dy = LT_NN(lt_randn(g, LT_DTYPE_F32, 4, y[path]->shape));
      ck_assert(lt_backward(y[path], dy, false) == LT_OK);
      for (int k = 0; k < 3; k++) gr[path][k] = in[k]->grad;
      const int64_t ran = lt__dnnl_conv_runs() - runs, want = path == 0 ? c->passes : 0;
      ck_assert_msg(ran == want, "conv2d case %zu, %s: %lld passes on oneDNN, expected %lld", ci,
                    path ? "im2col" : "oneDNN", (long long)ran, (long long)want);
    }
    lt_fx_close("conv2d oneDNN/im2col: y", y[0], y[1], 1e-5, 1e-4);
    lt_fx_close("conv2d oneDNN/im2col: dx", gr[0][0], gr[1][0], 1e-5, 1e-4);
    lt_fx_close("conv2d oneDNN/im2col: dW", gr[0][1], gr[1][1], 1e-4, 1e-3);
    lt_fx_close("conv2d oneDNN/im2col: db", gr[0][2], gr[1][2], 1e-4, 1e-3);
    lt_scope_end(scope);
  }
  lt__path_force(LT__PATH_FAMILY_conv, LT__PATH_AUTO);
  lt_generator_free(g);
  lt_fx_done("conv2d oneDNN/im2col");
}
END_TEST

int main(void) {
  Suite *s = suite_create("conv");
  LT_TEST_CASE(s, "conv", 300, test_pytorch_cases, test_modules, test_conv2d_slices, test_max_pool22_paths,
               test_conv2d_dnnl);
  return lt_test_run(s);
}
