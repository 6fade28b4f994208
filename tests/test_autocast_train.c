/*
 * tests/test_autocast_train.c: autocast over whole training steps.
 *
 * - the weight cache (tensor/matmul.c): a parameter's bf16 copy is made once
 *   per version and shared by its forward and backward products; an in-place
 *   update (the optimizer) makes the next product convert again, and the
 *   result has the bits of an uncached product of the new values (no stale
 *   read), also for a new parameter allocated where a freed one was; leaving
 *   autocast frees the copies;
 * - Linear under autocast: the bias added inside the product has the bits of
 *   product-then-add; the saved input is x's bf16 copy (a backward outside
 *   autocast widens it; an in-place write to x makes the next forward
 *   convert again); the fused bf16 copy and column sums of the output
 *   gradient against lt_to_dtype and lt_sum, on 1 and 2 threads;
 * - the mode inside OpenMP regions: a batched product's workers use the mode
 *   of the thread that asked for it, whatever other threads have set;
 * - a tiny decoder-only Transformer trained for a few steps under autocast
 *   against f32 (losses and first gradients within the bf16 tolerance below),
 *   and two autocast runs on the same thread count bit-identical.
 * On a CPU where autocast leaves the products in f32 (no oneDNN bf16 matmul:
 * AVX2) the tests that tell a bf16 run from an f32 one return at once.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "util_layout.h"
#include "models/transformer/transformer.h"
#include "tensor/autocast_internal.h"
#include "tensor/gemm_internal.h"

/* Losses of the autocast run within LOSS_TOL (relative) of the f32 run's at
 * every step: each product's operands are rounded to 8 significant bits
 * (relative error 2^-9), which moves a loss of ~2.8 by a few 1e-3 per step;
 * measured max over the 12 steps here: see the test's message. */
#define LOSS_TOL 2e-2
/* First-step gradients within GRAD_TOL of each parameter's largest f32
 * gradient magnitude (as tests/test_autocast.c's BF16_TOL, with the margin
 * of a deeper network), that magnitude taken as at least GRAD_FLOOR: the key
 * projection's bias has a zero gradient in exact arithmetic (softmax ignores
 * a shift shared by a row), ~1e-11 in f32 and ~1e-6 of rounding noise under
 * autocast. */
#define GRAD_TOL 5e-2
#define GRAD_FLOOR 1e-4

static lt_tensor *rnd(lt_generator *g, int nd, const int64_t *shape) { return LT_NN(lt_randn(g, LT_DTYPE_F32, nd, shape)); }

static int64_t conversions(void) {
  int64_t n;
  lt__autocast_cache_stats(NULL, NULL, &n);
  return n;
}

START_TEST(test_weight_cache) {
  if (!lt_test_autocast_rounds()) return; /* products stay f32 on this CPU: nothing to compare */
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_params *p = LT_NNP(lt_params_new());
  lt_linear_m lin;
  LT_OK_OR_FAIL(lt_linear_init(&lin, p, "lin", 64, 48, true, g));
  lt_tensor *x = rnd(g, LT_SHAPE(4, 10, 64));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_SGD);
  oc.lr = 0.5;
  lt_optimizer *opt = LT_NNP(lt_optimizer_new(p, &oc));

  const lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16);
  const int64_t c0 = conversions();
  lt_tensor *y = LT_NN(lt_linear_forward(&lin, x));
  ck_assert_int_eq(conversions() - c0, 2); /* x and the weight */
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_mul(y, y)), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  /* g once for g W and g^T x; W and x from the forward's copies */
  ck_assert_int_eq(conversions() - c0, 3);
  int entries;
  size_t bytes;
  lt__autocast_cache_stats(&entries, &bytes, NULL);
  ck_assert_int_ge(entries, 1);
  ck_assert_uint_ge(bytes, (size_t)48 * 64 * 2);

  /* Same version: no conversion, same bits. */
  lt_tensor *y2 = LT_NN(lt_linear_forward(&lin, x));
  ck_assert_int_eq(conversions() - c0, 3);
  LT_ASSERT_SAME_BITS(y2, y);

  /* The optimizer writes the weight in place: the next product converts
   * again and equals a product of an uncached copy of the new weight. */
  LT_OK_OR_FAIL(lt_optimizer_step(opt));
  lt_tensor *y3 = LT_NN(lt_linear_forward(&lin, x));
  ck_assert_int_eq(conversions() - c0, 4); /* the weight again; x unchanged */
  lt_tensor *wplain = LT_NN(lt_clone(LT_NN(lt_detach(lin.weight)))); /* not a parameter: never cached */
  lt_tensor *want = LT_NN(lt_linear(x, wplain, lin.bias));
  LT_ASSERT_SAME_BITS(y3, want);
  ck_assert_msg(!lt_equal(y3, y), "the update changed nothing: the test cannot see a stale copy");

  /* A parameter freed and another made (the allocator may give the same
   * address): the new one's product uses its own values. */
  for (int i = 0; i < 3; i++) {
    lt_tensor *w = rnd(g, LT_SHAPE(48, 64));
    LT_OK_OR_FAIL(lt_requires_grad_(w, true));
    lt_tensor *got = LT_NN(lt_linear(x, w, NULL));
    lt_tensor *wp = LT_NN(lt_clone(LT_NN(lt_detach(w))));
    lt_tensor *ref = LT_NN(lt_linear(x, wp, NULL));
    LT_ASSERT_SAME_BITS(got, ref);
    LT_FREE_ALL(got, ref, wp, w);
  }

  /* Leaving autocast frees every copy (PyTorch's rule). */
  lt_set_autocast(LT_DTYPE_F32);
  lt__autocast_cache_stats(&entries, &bytes, NULL);
  ck_assert_int_eq(entries, 0);
  ck_assert_uint_eq(bytes, 0);
  lt_set_autocast(prev);
  lt_scope_end(sc);
  lt_optimizer_free(opt);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

/* ---- Linear under autocast: the bias in the product, the bf16 input saved --- */

/* The bias added by oneDNN as it writes y (lt__mat_gemm_bias) has the bits
 * of the autocast product followed by an f32 add of the bias: the same two
 * numbers added once. One small product (one thread) and one large enough
 * to run on two threads (2048 x 512 x 256). */
START_TEST(test_linear_bias_in_product) {
  if (!lt_test_autocast_rounds()) return; /* products stay f32 on this CPU: nothing to compare */
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(21));
  const int64_t shapes[2][3] = {{40, 64, 48}, {2048, 256, 512}}; /* N, K, M */
  const int nt = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(2));
  for (int i = 0; i < 2; i++) {
    const int64_t N = shapes[i][0], K = shapes[i][1], M = shapes[i][2];
    lt_tensor *x = rnd(g, LT_SHAPE(N, K)), *w = rnd(g, LT_SHAPE(M, K)), *b = rnd(g, LT_SHAPE(M));
    const lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16);
    lt_tensor *y = LT_NN(lt_linear(x, w, b));
    lt_tensor *ref = LT_NN(lt_add(LT_NN(lt_matmul(x, LT_NN(lt_transpose(w, 0, 1)))), b));
    lt_set_autocast(prev);
    LT_ASSERT_SAME_BITS(y, ref);
    lt_tensor *f32 = LT_NN(lt_linear(x, w, b));
    ck_assert_msg(!lt_equal(y, f32), "autocast changed nothing: the test cannot see the bf16 path");
  }
  LT_OK_OR_FAIL(lt_set_num_threads(nt));
  lt_scope_end(sc);
  lt_generator_free(g);
}
END_TEST

/* The forward under autocast saves x's bf16 copy: a backward run outside
 * autocast widens it (exactly), so its weight gradient has the bits of an
 * f32 Linear on the bf16-rounded x. An in-place write to x between two
 * forwards makes the second convert again (no stale copy). */
START_TEST(test_linear_saves_bf16_input) {
  if (!lt_test_autocast_rounds()) return; /* products stay f32 on this CPU: nothing to compare */
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(22));
  lt_tensor *x = rnd(g, LT_SHAPE(3, 20, 32)), *c = rnd(g, LT_SHAPE(3, 20, 24));
  lt_tensor *w = rnd(g, LT_SHAPE(24, 32)), *b = rnd(g, LT_SHAPE(24));
  lt_tensor *w2 = LT_NN(lt_clone(w)), *b2 = LT_NN(lt_clone(b));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b, true));
  LT_OK_OR_FAIL(lt_requires_grad_(w2, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b2, true));

  lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *y = LT_NN(lt_linear(x, w, b));
  lt_set_autocast(prev);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(y, c)), 0, NULL, false)), NULL, false)); /* g = c */

  lt_tensor *xr = LT_NN(lt_to_dtype(LT_NN(lt_to_dtype(x, LT_DTYPE_BF16)), LT_DTYPE_F32));
  lt_tensor *yr = LT_NN(lt_linear(xr, w2, b2));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(yr, c)), 0, NULL, false)), NULL, false));
  LT_ASSERT_SAME_BITS(w->grad, w2->grad);
  LT_ASSERT_SAME_BITS(b->grad, b2->grad);
  ck_assert_msg(!lt_equal(xr, x), "x is exact in bf16: the test cannot see which x was saved");

  /* in place on x: the next forward converts the new values */
  prev = lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *y1 = LT_NN(lt_linear(x, w, b));
  LT_OK_OR_FAIL(lt_binary_scalar_(LT_BINARY_MUL, x, 3.0));
  lt_tensor *y2 = LT_NN(lt_linear(x, w, b));
  lt_tensor *want = LT_NN(lt_linear(LT_NN(lt_clone(x)), w, b));
  lt_set_autocast(prev);
  LT_ASSERT_SAME_BITS(y2, want);
  ck_assert_msg(!lt_equal(y1, y2), "the write changed nothing: the test cannot see a stale copy");
  lt_scope_end(sc);
  lt_generator_free(g);
}
END_TEST

/* The promise of lt__autocast_bf16_colsum's sums, written the plain way:
 * column j's rows added in order in f64, rounded once to f32. */
static lt_tensor *colsum_naive(lt__mat G) {
  lt_tensor *s = LT_NN(lt_empty(LT_DTYPE_F32, 1, (const int64_t[]){G.cols}));
  for (int64_t j = 0; j < G.cols; j++) {
    double acc = 0.0;
    for (int64_t i = 0; i < G.rows; i++) acc += (double)((const float *)G.data)[i * G.rs + j * G.cs];
    ((float *)s->data)[j] = (float)acc;
  }
  return s;
}

/* lt__autocast_bf16_colsum against its references: the copy has the bits of
 * lt_to_dtype(g, bf16), the column sums those of the row-order f64 loop
 * above (and lt_sum's within f32 rounding: it sums in another order), and
 * neither depends on the thread count. Contiguous g, a transposed view
 * (column stride != 1), a row stride wider than the row (a column slice),
 * column counts that split unevenly over threads (1000 = 62.5 blocks of 16,
 * 4100 with rows of more than 4 KiB), odd and tiny row counts, the copy
 * without sums (no bias), and values whose f64 sums change with the order of
 * the additions (so a kernel that pairs rows differently fails). */
START_TEST(test_bf16_colsum) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(23));
  const int nt = lt_get_num_threads();
  const int64_t shapes[][2] = {{300, 200}, {67, 1000}, {9, 4100}, {1, 40000}, {2049, 24}, {1028, 64}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    lt_tensor *base = rnd(g, LT_SHAPE(shapes[s][0], shapes[s][1]));
    if (s == 5) { /* rows cycling -2^60, 0, 2^60, 1 (shifted by column): f64 sums that depend on the order */
      const float cyc[4] = {-0x1p60f, 0.0f, 0x1p60f, 1.0f};
      for (int64_t i = 0; i < shapes[s][0]; i++)
        for (int64_t j = 0; j < shapes[s][1]; j++) ((float *)base->data)[i * shapes[s][1] + j] = cyc[(i + j) % 4];
    }
    for (int v = 0; v < 3; v++) {
      lt_tensor *gt = base; /* v 1: transposed; v 2: columns 3.. of each row (row stride > row length) */
      if (v == 1) gt = LT_NN(lt_transpose(base, 0, 1));
      if (v == 2 && shapes[s][1] > 3) gt = LT_NN(lt_narrow(base, 1, 3, shapes[s][1] - 3));
      if (v == 2 && gt == base) continue;
      const int64_t N = gt->shape[0], M = gt->shape[1];
      const lt__mat G = LT__MAT(gt->data, N, M, gt->stride[0], gt->stride[1]);
      lt_tensor *sums[2], *copies[2], *bare[2];
      for (int t = 0; t < 2; t++) {
        LT_OK_OR_FAIL(lt_set_num_threads(t + 1));
        sums[t] = LT_NN(lt_empty(LT_DTYPE_F32, 1, (const int64_t[]){M}));
        copies[t] = LT_NN(lt__autocast_bf16_colsum(G, sums[t]->data));
        bare[t] = LT_NN(lt__autocast_bf16_colsum(G, NULL));
      }
      LT_OK_OR_FAIL(lt_set_num_threads(nt));
      lt_tensor *want = LT_NN(lt_to_dtype(gt, LT_DTYPE_BF16));
      LT_ASSERT_SAME_BITS(copies[0], want);
      LT_ASSERT_SAME_BITS(copies[1], want);
      LT_ASSERT_SAME_BITS(bare[0], want);
      LT_ASSERT_SAME_BITS(bare[1], want);
      lt_tensor *naive = colsum_naive(G);
      LT_ASSERT_SAME_BITS(sums[0], naive);
      LT_ASSERT_SAME_BITS(sums[1], naive);
      if (s != 5) LT_ASSERT_CLOSE(sums[0], LT_NN(lt_sum(gt, LT_DIMS(0), false)), 1e-6, 1e-6);
    }
  }
  lt_scope_end(sc);
  lt_generator_free(g);
}
END_TEST

/* ---- the mode inside OpenMP regions ---------------------------------------- */

typedef struct {
  pthread_barrier_t on, done;
} other_thread;

/* Another application thread with autocast on, held until the main thread
 * has run its products. */
static void *autocast_elsewhere(void *u) {
  other_thread *o = u;
  lt_set_autocast(LT_DTYPE_BF16);
  pthread_barrier_wait(&o->on);
  pthread_barrier_wait(&o->done);
  lt_set_autocast(LT_DTYPE_F32);
  return NULL;
}

START_TEST(test_autocast_mode_in_omp_regions) {
  if (!lt_test_autocast_rounds()) return; /* products stay f32 on this CPU: nothing to compare */
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(9));
  /* 8 products of [32,64]x[64,32]: lt_matmul runs one per thread in an OpenMP
   * region on 2 threads (tensor/matmul.c, batch_per_thread). */
  lt_tensor *a = rnd(g, LT_SHAPE(8, 32, 64)), *b = rnd(g, LT_SHAPE(8, 64, 32));
  const int nt = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(2));
  lt_tensor *f32 = LT_NN(lt_matmul(a, b));
  lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *bf = LT_NN(lt_matmul(a, b));
  lt_set_autocast(prev);
  ck_assert_msg(!lt_equal(f32, bf), "autocast changed nothing: the test cannot tell the modes apart");
  /* The batched bf16 products on one thread (no OpenMP region): the reference. */
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  prev = lt_set_autocast(LT_DTYPE_BF16);
  lt_tensor *bf1 = LT_NN(lt_matmul(a, b));
  lt_set_autocast(prev);
  LT_OK_OR_FAIL(lt_set_num_threads(2));
  LT_ASSERT_SAME_BITS(bf, bf1);

  /* Another thread turns autocast on: this thread's products stay f32. */
  other_thread o;
  pthread_barrier_init(&o.on, NULL, 2);
  pthread_barrier_init(&o.done, NULL, 2);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, autocast_elsewhere, &o), 0);
  pthread_barrier_wait(&o.on);
  lt_tensor *f32b = LT_NN(lt_matmul(a, b));
  pthread_barrier_wait(&o.done);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&o.on);
  pthread_barrier_destroy(&o.done);
  LT_ASSERT_SAME_BITS(f32b, f32);
  LT_OK_OR_FAIL(lt_set_num_threads(nt));
  lt_scope_end(sc);
  lt_generator_free(g);
}
END_TEST

/* ---- a tiny Transformer trained under autocast ---------------------------- */

enum { STEPS = 12, B = 4, T = 16, V = 16 };

typedef struct {
  lt_dtype mode;
} train_ctx;

/* Trains a tiny decoder-only Transformer for STEPS AdamW steps on a fixed
 * batch (next-token prediction of a repeating pattern) in the given mode.
 * Stores: the losses [STEPS] (f64), then the first step's gradient of every
 * parameter up to cap, and returns the count. */
static int train(void *u, lt_tensor **out, int cap) {
  const train_ctx *c = u;
  lt_generator *g = LT_NNP(lt_generator_new(21));
  lt_tf_config cfg = lt_tf_config_default(LT_TF_DECODER_ONLY);
  cfg.vocab_size = V;
  cfg.d_model = 32;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 4;
  cfg.n_dec_layers = 2;
  cfg.d_ff = 64;
  cfg.max_len = T;
  cfg.dropout = 0.0;
  lt_transformer *m = LT_NNP(lt_transformer_new(&cfg, g));
  lt_params *p = lt_transformer_params(m);
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
  oc.lr = 3e-3;
  lt_optimizer *opt = LT_NNP(lt_optimizer_new(p, &oc));
  int64_t ids[B * (T + 1)];
  for (int b = 0; b < B; b++)
    for (int t = 0; t <= T; t++) ids[b * (T + 1) + t] = (3 * t + 5 * b + (t * t) % 7) % V;
  int64_t in[B * T], lab[B * T];
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) in[b * T + t] = ids[b * (T + 1) + t], lab[b * T + t] = ids[b * (T + 1) + t + 1];
  lt_tensor *tgt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, T), in));
  lt_tensor *labels = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, T), lab));
  lt_nn_ctx ctx = {true, g};
  double losses[STEPS];
  int n = 1;
  const lt_dtype prev = lt_set_autocast(c->mode);
  for (int s = 0; s < STEPS; s++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *logits = LT_NN(lt_transformer_decode(m, tgt, NULL, NULL, NULL, 0, &ctx));
    lt_tensor *loss = LT_NN(lt_cross_entropy(logits, labels, NULL));
    LT_OK_OR_FAIL(lt_item(loss, &losses[s]));
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    lt_scope_end(sc);
    for (int i = 0; s == 0 && i < lt_params_count(p) && n < cap; i++) {
      const lt_tensor *gr = lt_params_at(p, i)->value->grad;
      ck_assert(gr && gr->dtype == LT_DTYPE_F32);
      out[n++] = lt_tensor_keep(LT_NN(lt_clone(gr)));
    }
    LT_OK_OR_FAIL(lt_optimizer_step(opt));
    lt_params_zero_grad(p);
  }
  lt_set_autocast(prev);
  out[0] = lt_tensor_keep(LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(STEPS), losses)));
  LT_FREE_ALL(tgt, labels);
  lt_optimizer_free(opt);
  lt_transformer_free(m);
  lt_generator_free(g);
  return n;
}

START_TEST(test_tiny_transformer_autocast) {
  if (!lt_test_autocast_rounds()) return; /* products stay f32 on this CPU: nothing to compare */
  lt_tensor *f[16], *h[16];
  train_ctx cf = {LT_DTYPE_F32}, ch = {LT_DTYPE_BF16};
  const int n = train(&cf, f, 16);
  ck_assert_int_eq(train(&ch, h, 16), n);
  const double *lf = f[0]->data, *lh = h[0]->data;
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    const double r = fabs(lh[s] - lf[s]) / lf[s];
    if (r > worst) worst = r;
    ck_assert_msg(r <= LOSS_TOL, "step %d: loss %.6f under autocast, %.6f in f32 (relative %.3g > %.3g)", s, lh[s],
                  lf[s], r, LOSS_TOL);
  }
  fprintf(stderr, "tiny transformer: loss %.4f -> %.4f (f32), %.4f -> %.4f (autocast), max relative gap %.2e\n",
          lf[0], lf[STEPS - 1], lh[0], lh[STEPS - 1], worst);
  ck_assert_msg(lf[STEPS - 1] < 0.8 * lf[0] && lh[STEPS - 1] < 0.8 * lh[0], "the loss did not fall: %g -> %g, %g -> %g",
                lf[0], lf[STEPS - 1], lh[0], lh[STEPS - 1]);
  ck_assert_msg(!lt_equal(f[0], h[0]), "autocast changed no loss: it did not apply");
  for (int i = 1; i < n; i++) {
    lt_tensor *a = LT_NN(lt_abs(f[i]));
    lt_tensor *mx = LT_NN(lt_amax(a, 0, NULL, false));
    double m;
    LT_OK_OR_FAIL(lt_item(mx, &m));
    char what[64];
    snprintf(what, sizeof what, "first-step gradient %d under autocast", i - 1);
    lt_test_assert_close(h[i], f[i], 0, GRAD_TOL * (m > GRAD_FLOOR ? m : GRAD_FLOOR), what, "the f32 gradient", __FILE__, __LINE__);
    LT_FREE_ALL(a, mx);
  }
  for (int i = 0; i < n; i++) LT_FREE_ALL(f[i], h[i]);
}
END_TEST

/* Two autocast runs on one thread count, bit for bit (on 1 and on 2 threads;
 * lt_test_same_on_threads also compares 1 against 2: every product here is
 * below the size oneDNN would split). */
START_TEST(test_autocast_runs_bit_identical) {
  train_ctx ch = {LT_DTYPE_BF16};
  lt_tensor *a[16], *b[16];
  const int n = train(&ch, a, 16);
  ck_assert_int_eq(train(&ch, b, 16), n);
  for (int i = 0; i < n; i++) {
    LT_ASSERT_SAME_BITS(a[i], b[i]);
    LT_FREE_ALL(a[i], b[i]);
  }
  lt_test_same_on_threads(train, &ch, "tiny transformer under autocast");
}
END_TEST

int main(void) {
  Suite *s = suite_create("autocast_train");
  TCase *tc = tcase_create("autocast_train");
  tcase_add_test(tc, test_weight_cache);
  tcase_add_test(tc, test_linear_bias_in_product);
  tcase_add_test(tc, test_linear_saves_bf16_input);
  tcase_add_test(tc, test_bf16_colsum);
  tcase_add_test(tc, test_autocast_mode_in_omp_regions);
  tcase_add_test(tc, test_tiny_transformer_autocast);
  tcase_add_test(tc, test_autocast_runs_bit_identical);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
