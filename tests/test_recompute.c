/*
 * tests/test_recompute.c: training memory, the two ways libtensor trades it:
 *   - activation checkpointing (autograd/recompute.h): a region's gradients
 *     pass lt_gradcheck in f64 (inputs passed and parameters captured,
 *     dropout replayed from its generator); its saved tensors are dropped
 *     after the forward and again after the backward; errors name the
 *     region (an input written in place, a second run recording another
 *     graph); no tensor outlives its owner;
 *   - every parameter gradient of a Transformer (decoder-only and
 *     encoder-decoder, dropout on) is the same bits with --recompute none,
 *     attention and layer, in f32 and under bf16 autocast;
 *   - the chunked head (lt_linear_cross_entropy): the loss and gradients of
 *     lt_cross_entropy(lt_linear(h, w)) within 1e-6 of the largest
 *     magnitude, for several chunk sizes, ignored rows, label smoothing, sum
 *     and mean, an output gradient other than 1, f32 and bf16 autocast; its
 *     f64 gradcheck; its errors; and lt_transformer_decode_loss against
 *     lt_transformer_decode + lt_cross_entropy.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "autograd/internal.h"        /* node->saved: what a region keeps */
#include "autograd/recompute.h"
#include "models/transformer/transformer.h"
#include "tensor/storage_internal.h" /* lt__live_tensors: the leak checks */

/* Class ids [B, T] in [0, V), fixed by seed (new). */
static lt_tensor *ids_of(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  int64_t *v = malloc(sizeof *v * (size_t)(B * T));
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int64_t i = 0; i < B * T; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = (int64_t)(x % (uint64_t)V);
  }
  lt_tensor *t = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (const int64_t[]){B, T}, v));
  free(v);
  return t;
}

/* ---- a region of one's own ------------------------------------------------------ */

typedef struct block {
  lt_tensor *w;      /* captured: [C, C] */
  lt_generator *gen; /* dropout */
  double p;
} block;

/* y = x + dropout(tanh(x w^T) * x, p) with x = in[0] (and in[1] added, when
 * given: a second input). */
static lt_tensor *block_fn(int n, lt_tensor *const *in, void *user) {
  const block *b = user;
  lt_tensor *h = lt_tanh(lt_linear(in[0], b->w, NULL));
  lt_tensor *y = lt_mul(h, in[0]);
  if (b->p > 0) y = lt_dropout(y, b->p, &(lt_nn_ctx){true, b->gen});
  lt_tensor *out = lt_add(in[0], y);
  return n > 1 ? lt_add(out, in[1]) : out;
}

typedef struct gc_user {
  lt_generator *gen;
  bool recompute;
} gc_user;

/* For lt_gradcheck: inputs x [2, 3, 4], w [4, 4] (captured by the region), z
 * [3, 4] (a second input, broadcast); the dropout generator restarts at each
 * call, so the function is deterministic. */
static lt_tensor *gc_fn(int n, lt_tensor *const *in, void *user) {
  (void)n;
  gc_user *u = user;
  lt_generator_set_state(u->gen, (lt_generator_state){7, 0});
  block b = {in[1], u->gen, 0.3};
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = u->recompute ? lt_recompute(block_fn, 2, (lt_tensor *[]){in[0], in[2]}, &b,
                                             &(lt_recompute_opts){.name = "block", .gen = u->gen, .user_size = sizeof b})
                              : block_fn(2, (lt_tensor *[]){in[0], in[2]}, &b);
  lt_tensor *out = lt_square(y); /* something after the region */
  return lt_scope_return(sc, out);
}

START_TEST(test_region_gradcheck) {
  lt_generator *g = lt_generator_new(1);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 3, 4)));
  lt_tensor *w = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4, 4)));
  lt_tensor *z = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(3, 4)));
  for (int i = 0; i < 3; i++) LT_OK_OR_FAIL(lt_requires_grad_((lt_tensor *[]){x, w, z}[i], true));
  gc_user u = {lt_generator_new(7), true};
  LT_OK_OR_FAIL(lt_gradcheck(gc_fn, &u, 3, (lt_tensor *[]){x, w, z}, NULL));
  /* The same gradients as without the region, bit for bit. */
  lt_tensor *y1 = LT_NN(gc_fn(3, (lt_tensor *[]){x, w, z}, &u));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(y1, 0, NULL, false)), NULL, false));
  lt_tensor *gx = lt_clone(x->grad), *gw = lt_clone(w->grad), *gz = lt_clone(z->grad);
  lt_zero_grad(x), lt_zero_grad(w), lt_zero_grad(z);
  u.recompute = false;
  lt_tensor *y0 = LT_NN(gc_fn(3, (lt_tensor *[]){x, w, z}, &u));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(y0, 0, NULL, false)), NULL, false));
  ck_assert(memcmp(gx->data, x->grad->data, sizeof(double) * 24) == 0);
  ck_assert(memcmp(gw->data, w->grad->data, sizeof(double) * 16) == 0);
  ck_assert(memcmp(gz->data, z->grad->data, sizeof(double) * 12) == 0);
  lt_zero_grad(x), lt_zero_grad(w), lt_zero_grad(z);
  lt_scope_end(sc);
  lt_generator_free(u.gen);
  lt_generator_free(g);
}
END_TEST

/* x [N, C] and w [C, C] f32 from g (new), w requiring grad. */
static void x_and_w(lt_generator *g, int64_t N, int64_t C, lt_tensor **x, lt_tensor **w) {
  *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(N, C)));
  *w = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(C, C)));
  LT_OK_OR_FAIL(lt_requires_grad_(*w, true));
}

/* The nodes of a region hold nothing between its forward and its backward
 * and again after it; a retained graph keeps them (a second backward works). */
START_TEST(test_region_drops_and_restores) {
  const int64_t live0 = lt__live_tensors();
  lt_generator *g = lt_generator_new(2);
  lt_tensor *x, *w;
  x_and_w(g, 4, 8, &x, &w);
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  block b = {w, g, 0.5};
  for (int retain = 0; retain < 2; retain++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *y = LT_NN(lt_recompute(block_fn, 1, &x, &b, &(lt_recompute_opts){.gen = g, .user_size = sizeof b}));
    const lt_node *n = y->grad_fn; /* add: saves nothing; its input mul (through dropout) saves */
    ck_assert(n && n->rc && n->rc_dropped);
    const lt_node *d = n->in[1].fn; /* the dropout */
    ck_assert(d && d->rc && d->rc_dropped && d->nsaved > 0 && d->saved[0] == NULL);
    lt_tensor *l = LT_NN(lt_sum(y, 0, NULL, false));
    LT_OK_OR_FAIL(lt_backward(l, NULL, retain));
    ck_assert(d->rc_dropped == !retain && (d->saved[0] != NULL) == (bool)retain);
    if (retain) LT_OK_OR_FAIL(lt_backward(l, NULL, false)); /* through the retained tensors */
    else LT_EXPECT_ERR(lt_backward(l, NULL, false), LT_ERR_AUTOGRAD, "second time");
    lt_scope_end(sc);
  }
  lt_zero_grad(x), lt_zero_grad(w);
  LT_FREE_ALL(x, w);
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

/* A function whose second run records another graph. */
static int calls;
static lt_tensor *fickle(int n, lt_tensor *const *in, void *user) {
  (void)n, (void)user;
  return calls++ == 0 ? lt_exp(in[0]) : lt_tanh(lt_exp(in[0]));
}

START_TEST(test_region_errors) {
  const int64_t live0 = lt__live_tensors();
  lt_generator *g = lt_generator_new(3);
  lt_tensor *x, *w;
  x_and_w(g, 3, 4, &x, &w);
  block b = {w, NULL, 0};
  lt_scope *sc = lt_scope_begin();
  LT_EXPECT_NULL_ERR(lt_recompute(NULL, 1, &x, &b, NULL), LT_ERR_NULL, "fn is NULL");
  LT_EXPECT_NULL_ERR(lt_recompute(block_fn, 1, (lt_tensor *[]){NULL}, &b, NULL), LT_ERR_NULL, "in[0]");
  /* the input written in place between the forward and the backward */
  lt_tensor *y = LT_NN(lt_recompute(block_fn, 1, &x, &b, &(lt_recompute_opts){.name = "my block"}));
  LT_OK_OR_FAIL(lt_add_scalar_(x, 1.0));
  LT_EXPECT_ERR(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false), LT_ERR_AUTOGRAD,
                "recompute 'my block': input 0");
  ck_assert(w->grad == NULL); /* nothing committed */
  /* another graph the second time */
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  calls = 0;
  y = LT_NN(lt_recompute(fickle, 1, &x, NULL, &(lt_recompute_opts){.name = "fickle"}));
  LT_EXPECT_ERR(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false), LT_ERR_AUTOGRAD,
                "recompute 'fickle': the second run recorded 2 ops, the first 1");
  ck_assert(x->grad == NULL);
  /* under no-grad: the function itself, no region */
  bool prev = lt_set_grad_enabled(false);
  y = LT_NN(lt_recompute(block_fn, 1, &x, &b, NULL));
  ck_assert(y->grad_fn == NULL);
  lt_set_grad_enabled(prev);
  lt_scope_end(sc);
  LT_FREE_ALL(x, w);
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

/* ---- the Transformer: the same bits in every mode ------------------------------- */

/* A small model of the architecture (GQA, dropout 0.2), from seed 11 (new). */
static lt_transformer *tiny(int arch) {
  lt_tf_config c = lt_tf_config_default(arch ? LT_TF_ENCODER_DECODER : LT_TF_DECODER_ONLY);
  c.vocab_size = 13, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 24, c.max_len = 16, c.dropout = 0.2;
  c.n_enc_layers = arch ? 2 : 0, c.n_dec_layers = 2;
  lt_generator *g = lt_generator_new(11);
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_generator_free(g);
  return m;
}

/* Clones of m's parameter gradients (new: free with grads_free). */
static lt_tensor **grads_of(lt_transformer *m) {
  lt_params *p = lt_transformer_params(m);
  lt_tensor **r = calloc((size_t)lt_params_count(p), sizeof *r);
  for (int i = 0; i < lt_params_count(p); i++) r[i] = LT_NN(lt_clone(lt_params_at(p, i)->value->grad));
  return r;
}
static void grads_free(lt_transformer *m, lt_tensor **r) {
  for (int i = 0; i < lt_params_count(lt_transformer_params(m)); i++) lt_tensor_free(r[i]);
  free(r);
}

/* The loss of one training step of m on fixed ids, dropout from a generator
 * seeded 5; backward of gout * loss into m's parameters (zeroed first).
 * *live (may be NULL): the storages made by the forward and still alive
 * before the backward (what the graph keeps). */
static double step_grads(lt_transformer *m, bool chunked, double gout, int64_t *live) {
  const lt_tf_config *c = lt_transformer_config(m);
  lt_params *p = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(p); i++) lt_zero_grad(lt_params_at(p, i)->value);
  const int64_t live0 = lt__live_storages();
  lt_generator *g = lt_generator_new(5);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *ids = ids_of(2, 9, c->vocab_size, 5);
  lt_tensor *tgt = LT_NN(lt_narrow(ids, 1, 0, 8)), *lab = LT_NN(lt_contiguous(LT_NN(lt_narrow(ids, 1, 1, 8))));
  lt_nn_ctx ctx = {true, g};
  lt_tensor *mem = c->arch == LT_TF_ENCODER_DECODER ? LT_NN(lt_transformer_encode(m, lab, NULL, &ctx)) : NULL;
  lt_tensor *loss = chunked ? LT_NN(lt_transformer_decode_loss(m, tgt, NULL, mem, NULL, lab, NULL, 5, &ctx))
                            : LT_NN(lt_cross_entropy(LT_NN(lt_transformer_decode(m, tgt, NULL, mem, NULL, 0, &ctx)),
                                                     lab, NULL));
  if (live) *live = lt__live_storages() - live0;
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_mul_scalar(loss, gout)), NULL, false));
  double v;
  LT_OK_OR_FAIL(lt_item(loss, &v));
  lt_scope_end(sc);
  lt_generator_free(g);
  return v;
}

START_TEST(test_transformer_modes_same_bits) {
  const int64_t live0 = lt__live_tensors();
  for (int arch = 0; arch < 2; arch++) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
      lt_transformer *m = tiny(arch);
      lt_params *p = lt_transformer_params(m);
      const int np = lt_params_count(p);
      const lt_dtype prev = lt_set_autocast(bf16 ? LT_DTYPE_BF16 : LT_DTYPE_F32);
      int64_t live[3];
      const double l0 = step_grads(m, false, 0.37, &live[0]);
      lt_tensor **ref = grads_of(m);
      for (int mode = LT_RECOMPUTE_ATTENTION; mode <= LT_RECOMPUTE_LAYER; mode++) {
        LT_OK_OR_FAIL(lt_transformer_set_recompute(m, (lt_recompute_mode)mode));
        const double l = step_grads(m, false, 0.37, &live[mode]);
        ck_assert_msg(l == l0, "%s, %s: loss %.17g, without recompute %.17g", arch ? "encdec" : "decoder",
                      lt_recompute_mode_name(mode), l, l0);
        for (int i = 0; i < np; i++) {
          const lt_tensor *gr = lt_params_at(p, i)->value->grad;
          ck_assert_msg(gr && memcmp(gr->data, ref[i]->data, sizeof(float) * (size_t)gr->numel) == 0,
                        "%s%s, recompute %s: the gradient of %s differs from the run without", arch ? "encdec" : "decoder",
                        bf16 ? " bf16" : "", lt_recompute_mode_name(mode), lt_params_at(p, i)->name);
        }
      }
      /* what each mode keeps between the forward and the backward: less and less */
      ck_assert_msg(live[2] < live[1] && live[1] < live[0], "storages alive: none %lld, attention %lld, layer %lld",
                    (long long)live[0], (long long)live[1], (long long)live[2]);
      LT_OK_OR_FAIL(lt_transformer_set_recompute(m, LT_RECOMPUTE_NONE));
      LT_EXPECT_ERR(lt_transformer_set_recompute(m, (lt_recompute_mode)7), LT_ERR_INVALID, "mode 7");
      lt_set_autocast(prev);
      grads_free(m, ref);
      lt_transformer_free(m);
    }
  }
  lt_recompute_mode rm;
  LT_OK_OR_FAIL(lt_recompute_mode_parse("layer", &rm));
  ck_assert_int_eq(rm, LT_RECOMPUTE_LAYER);
  LT_EXPECT_ERR(lt_recompute_mode_parse("all", &rm), LT_ERR_INVALID, "none");
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

/* ---- the chunked head ------------------------------------------------------------ */

/* max |a - b| <= tol * max(max |b|, floor) (a relative bound on the largest
 * magnitude: elementwise relative error means nothing on gradients near 0;
 * floor for a tensor whose gradient is 0 in exact arithmetic, such as a key
 * projection's bias). */
static void assert_near(const lt_tensor *a, const lt_tensor *b, double tol, double floor, const char *what) {
  ck_assert(a && b && a->numel == b->numel);
  double *x = malloc(sizeof(double) * (size_t)a->numel), *y = malloc(sizeof(double) * (size_t)b->numel);
  LT_OK_OR_FAIL(lt_tensor_read(a, LT_DTYPE_F64, x, a->numel));
  LT_OK_OR_FAIL(lt_tensor_read(b, LT_DTYPE_F64, y, b->numel));
  double md = 0, mb = 0;
  for (int64_t i = 0; i < a->numel; i++) md = fmax(md, fabs(x[i] - y[i])), mb = fmax(mb, fabs(y[i]));
  free(x), free(y);
  ck_assert_msg(md <= tol * fmax(mb, floor), "%s: max difference %.3g, %.3g of the largest magnitude %.6g (tolerance %g)", what, md,
                md / mb, mb, tol);
}

START_TEST(test_chunked_head_matches_plain) {
  const int64_t live0 = lt__live_tensors();
  lt_generator *g = lt_generator_new(4);
  const int64_t B = 3, T = 7, C = 24, V = 97;
  lt_tensor *h = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, T, C)));
  lt_tensor *w = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(V, C)));
  LT_OK_OR_FAIL(lt_mul_scalar_(w, 0.3));
  lt_tensor *t = ids_of(B, T, V, 4);
  ((int64_t *)t->data)[3] = ((int64_t *)t->data)[10] = -100; /* ignored rows */
  LT_OK_OR_FAIL(lt_requires_grad_(h, true));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  const lt_cross_entropy_opts opts[] = {LT_CROSS_ENTROPY_DEFAULTS, {-100, 0.1, LT_REDUCTION_MEAN},
                                        {-100, 0.0, LT_REDUCTION_SUM}};
  /* Under autocast the plain path rounds gout * dlogits to bf16 and the
   * chunked one dlogits (gout is not known in the forward) before the
   * products: for gout 1 the same operands, for gout 0.37 another rounding
   * of them (bf16's 2^-9), which is what the second tolerance allows. */
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int oi = 0; oi < 3; oi++)
      for (int gi = 0; gi < 2; gi++) {
      const double gout = gi ? 0.37 : 1.0, tol = bf16 && gi ? 1e-2 : 1e-6;
      const lt_dtype prev = lt_set_autocast(bf16 ? LT_DTYPE_BF16 : LT_DTYPE_F32);
      lt_scope *sc = lt_scope_begin();
      lt_tensor *l0 = LT_NN(lt_cross_entropy(LT_NN(lt_linear(h, w, NULL)), t, &opts[oi]));
      LT_OK_OR_FAIL(lt_backward(LT_NN(lt_mul_scalar(l0, gout)), NULL, false));
      lt_tensor *gh0 = h->grad, *gw0 = w->grad;
      h->grad = w->grad = NULL;
      for (int64_t chunk = 0; chunk <= B * T + 1; chunk += chunk < 2 ? 1 : 9) { /* 0 (auto), 1, 2, 11, 20 */
        lt_tensor *l = LT_NN(lt_linear_cross_entropy(h, w, t, &opts[oi], chunk));
        char what[96];
        snprintf(what, sizeof what, "%s, opts %d, chunk %lld: loss", bf16 ? "bf16" : "f32", oi, (long long)chunk);
        assert_near(l, l0, 1e-6, 0, what);
        LT_OK_OR_FAIL(lt_backward(LT_NN(lt_mul_scalar(l, gout)), NULL, false));
        snprintf(what, sizeof what, "%s, opts %d, gout %g, chunk %lld: dh", bf16 ? "bf16" : "f32", oi, gout,
                 (long long)chunk);
        assert_near(h->grad, gh0, tol, 0, what);
        snprintf(what, sizeof what, "%s, opts %d, gout %g, chunk %lld: dw", bf16 ? "bf16" : "f32", oi, gout,
                 (long long)chunk);
        assert_near(w->grad, gw0, tol, 0, what);
        lt_zero_grad(h), lt_zero_grad(w);
      }
      LT_FREE_ALL(gh0, gw0);
      lt_scope_end(sc);
      lt_set_autocast(prev);
    }
  /* no graph without grad: nothing saved, the same loss */
  bool pg = lt_set_grad_enabled(false);
  lt_tensor *l = LT_NN(lt_linear_cross_entropy(h, w, t, NULL, 4));
  ck_assert(l->grad_fn == NULL);
  lt_tensor_free(l);
  lt_set_grad_enabled(pg);
  /* errors */
  lt_cross_entropy_opts none = {-100, 0, LT_REDUCTION_NONE};
  LT_EXPECT_NULL_ERR(lt_linear_cross_entropy(h, w, t, &none, 0), LT_ERR_INVALID, "reduction none");
  LT_EXPECT_NULL_ERR(lt_linear_cross_entropy(h, h, t, NULL, 0), LT_ERR_SHAPE, "w [V, C]");
  LT_EXPECT_NULL_ERR(lt_linear_cross_entropy(h, w, w, NULL, 0), LT_ERR_SHAPE, "without the last dim");
  LT_EXPECT_NULL_ERR(lt_linear_cross_entropy(h, w, t, NULL, -1), LT_ERR_INVALID, "chunk_rows -1");
  ((int64_t *)t->data)[5] = V;
  LT_EXPECT_NULL_ERR(lt_linear_cross_entropy(h, w, t, NULL, 0), LT_ERR_INDEX, "out of range [0, 97)");
  LT_FREE_ALL(h, w, t);
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

static lt_tensor *lce_fn(int n, lt_tensor *const *in, void *user) {
  (void)n;
  const lt_tensor *t = user;
  return lt_linear_cross_entropy(in[0], in[1], t, &(lt_cross_entropy_opts){-100, 0.05, LT_REDUCTION_MEAN}, 2);
}

START_TEST(test_chunked_head_gradcheck) {
  lt_generator *g = lt_generator_new(6);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *h = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(5, 3)));
  lt_tensor *w = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(6, 3)));
  lt_tensor *t = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 1, (const int64_t[]){5}, (const int64_t[]){0, 5, -100, 2, 2}));
  LT_OK_OR_FAIL(lt_requires_grad_(h, true));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  LT_OK_OR_FAIL(lt_gradcheck(lce_fn, t, 2, (lt_tensor *[]){h, w}, NULL));
  lt_scope_end(sc);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_decode_loss_matches_decode) {
  const int64_t live0 = lt__live_tensors();
  for (int arch = 0; arch < 2; arch++)
    for (int bf16 = 0; bf16 < 2; bf16++) {
      lt_transformer *m = tiny(arch);
      lt_params *p = lt_transformer_params(m);
      const int np = lt_params_count(p);
      const lt_dtype prev = lt_set_autocast(bf16 ? LT_DTYPE_BF16 : LT_DTYPE_F32);
      const double l0 = step_grads(m, false, 1.0, NULL);
      lt_tensor **ref = grads_of(m);
      const double l1 = step_grads(m, true, 1.0, NULL);
      lt_set_autocast(prev);
      ck_assert_msg(fabs(l1 - l0) <= 1e-6 * fabs(l0), "%s%s: loss %.9g, plain %.9g", arch ? "encdec" : "decoder",
                    bf16 ? " bf16" : "", l1, l0);
      for (int i = 0; i < np; i++)
        assert_near(lt_params_at(p, i)->value->grad, ref[i], 1e-6, 1e-2, lt_params_at(p, i)->name);
      grads_free(m, ref);
      lt_transformer_free(m);
    }
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("recompute");
  LT_TEST_CASE(s, "region", 120, test_region_gradcheck, test_region_drops_and_restores, test_region_errors);
  LT_TEST_CASE(s, "transformer", 300, test_transformer_modes_same_bits);
  LT_TEST_CASE(s, "chunked_head", 300, test_chunked_head_matches_plain, test_chunked_head_gradcheck,
               test_decode_loss_matches_decode);
  return lt_test_run(s);
}
