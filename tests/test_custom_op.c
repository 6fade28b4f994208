/*
 * tests/test_custom_op.c: autograd/custom.h through its public calls, as a
 * user writes an op of their own:
 *   - swish (x sigmoid(x)) as a custom op equals lt_silu, values and
 *     gradients, and passes lt_gradcheck in f64; a deliberately wrong
 *     backward fails it, naming the input and element;
 *   - a two-input op with state (k a b, b broadcast): the state reaches
 *     backward, the output-shaped gradient of b is summed back by the engine,
 *     gradcheck through both inputs;
 *   - the forward's intermediates are freed when it returns, the graph's
 *     saved tensors with the graph: no tensor outlives its owner;
 *   - no graph under no-grad or without inputs requiring grad;
 *   - errors name the op: a missing backward, a forward returning its input,
 *     a failing forward, the wrong input count, a saved tensor written in
 *     place before backward, a backward returning no gradient, anomaly mode.
 * The op-runner entries (tests/opinfo_custom.inc) cover layouts and threads.
 */
#include <math.h>
#include <string.h>

#include "test_util.h"

#include "autograd/custom.h"
#include "tensor/storage_internal.h" /* lt__live_tensors: the leak checks */

/* ---- swish ------------------------------------------------------------------- */

static lt_tensor *swish_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  (void)user;
  lt_tensor *s = lt_sigmoid(in[0]); /* under no-grad: no graph */
  if (lt_custom_save(ctx, in[0]) != LT_OK || lt_custom_save(ctx, s) != LT_OK) return NULL;
  ck_assert(!lt_custom_needs_input_grad(ctx, 0) || in[0]->requires_grad);
  ck_assert(!lt_grad_enabled());
  return lt_mul(in[0], s);
}
/* d/dx x s(x) = s (1 + x (1 - s)) */
static lt_status swish_bwd(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
  (void)user;
  ck_assert_int_eq(lt_custom_num_saved(ctx), 2);
  const lt_tensor *x = lt_custom_saved(ctx, 0), *s = lt_custom_saved(ctx, 1);
  gin[0] = lt_mul(gout, lt_mul(s, lt_add_scalar(lt_mul(x, lt_sub_scalar(lt_neg(s), -1.0)), 1.0)));
  return gin[0] ? LT_OK : lt_last_status();
}
static const lt_custom_op SWISH = {.name = "swish", .nin = 1, .forward = swish_fwd, .backward = swish_bwd};

/* the same with the factor (1 - s) forgotten */
static lt_status swish_bwd_wrong(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
  (void)user;
  const lt_tensor *x = lt_custom_saved(ctx, 0), *s = lt_custom_saved(ctx, 1);
  gin[0] = lt_mul(gout, lt_mul(s, lt_add_scalar(x, 1.0)));
  return gin[0] ? LT_OK : lt_last_status();
}
static const lt_custom_op SWISH_WRONG = {.name = "swish_wrong", .nin = 1, .forward = swish_fwd, .backward = swish_bwd_wrong};

static lt_tensor *apply1(int n, lt_tensor *const *in, void *user) {
  (void)n;
  return lt_custom_apply(user, 1, in, NULL);
}

START_TEST(test_swish_matches_silu_and_gradchecks) {
  int64_t t0 = lt__live_tensors();
  lt_generator *g = LT_NNP(lt_generator_new(3));
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4, 5)));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = LT_NN(lt_custom_apply(&SWISH, 1, (lt_tensor *[]){x}, NULL));
  ck_assert_ptr_nonnull(y->grad_fn);
  lt_tensor *want = LT_NN(lt_silu(x));
  LT_ASSERT_CLOSE(y, want, 1e-6, 1e-6);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false));
  lt_tensor *gc = LT_NN(lt_clone(x->grad));
  lt_zero_grad(x);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(want, 0, NULL, false)), NULL, false));
  LT_ASSERT_CLOSE(gc, x->grad, 1e-6, 1e-6);
  lt_zero_grad(x);
  /* f64 gradcheck, and a wrong backward caught */
  lt_tensor *xd = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(3, 4)));
  LT_OK_OR_FAIL(lt_requires_grad_(xd, true));
  LT_OK_OR_FAIL(lt_gradcheck(apply1, (void *)&SWISH, 1, &xd, NULL));
  LT_EXPECT_ERR(lt_gradcheck(apply1, (void *)&SWISH_WRONG, 1, &xd, NULL), LT_ERR_AUTOGRAD, "input 0");
  /* no graph without grad */
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *ng = LT_NN(lt_custom_apply(&SWISH, 1, (lt_tensor *[]){x}, NULL));
  lt_set_grad_enabled(prev);
  ck_assert_ptr_null(ng->grad_fn);
  lt_tensor *plain = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(3)));
  ck_assert_ptr_null(LT_NN(lt_custom_apply(&SWISH, 1, (lt_tensor *[]){plain}, NULL))->grad_fn);
  lt_scope_end(sc);
  lt_tensor_free(x); /* xd and plain were made in the scope */
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), t0); /* the forward's sigmoid, the saved aliases, the graph: all gone */
}
END_TEST

/* ---- a two-input op with state ---------------------------------------------------- */

typedef struct scale_state {
  double k;
} scale_state;

static lt_tensor *scaled_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  const scale_state st = {*(const double *)user};
  if (lt_custom_set_state(ctx, &st, sizeof st) != LT_OK) return NULL;
  if (lt_custom_save(ctx, in[0]) != LT_OK || lt_custom_save(ctx, in[1]) != LT_OK) return NULL;
  return lt_mul_scalar(lt_mul(in[0], in[1]), st.k); /* the intermediate a * b is freed with the forward's scope */
}
static lt_status scaled_bwd(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
  (void)user;
  size_t n = 0;
  const scale_state *st = lt_custom_state(ctx, &n);
  ck_assert(st && n == sizeof *st);
  const lt_tensor *a = lt_custom_saved(ctx, 0), *b = lt_custom_saved(ctx, 1);
  if (lt_custom_needs_input_grad(ctx, 0) && !(gin[0] = lt_mul_scalar(lt_mul(gout, b), st->k))) return lt_last_status();
  /* b [C] was broadcast over a [N, C]: give the output-shaped gradient; the engine sums it back */
  if (lt_custom_needs_input_grad(ctx, 1) && !(gin[1] = lt_mul_scalar(lt_mul(gout, a), st->k))) return lt_last_status();
  return LT_OK;
}
static const lt_custom_op SCALED = {.name = "scaled_mul", .nin = 2, .forward = scaled_fwd, .backward = scaled_bwd};

static lt_tensor *apply2(int n, lt_tensor *const *in, void *user) { return lt_custom_apply(&SCALED, n, in, user); }

START_TEST(test_state_broadcast_and_gradcheck) {
  int64_t t0 = lt__live_tensors();
  lt_generator *g = LT_NNP(lt_generator_new(4));
  lt_tensor *in[2] = {LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(3, 4))), LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4)))};
  for (int i = 0; i < 2; i++) LT_OK_OR_FAIL(lt_requires_grad_(in[i], true));
  double k = -2.5;
  LT_OK_OR_FAIL(lt_gradcheck(apply2, &k, 2, in, NULL));
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = LT_NN(lt_custom_apply(&SCALED, 2, in, &k));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false));
  LT_ASSERT_SHAPE(in[1]->grad, 4);
  lt_tensor *want = LT_NN(lt_mul_scalar(LT_NN(lt_sum(in[0], 1, (int[]){0}, false)), k));
  LT_ASSERT_CLOSE(in[1]->grad, want, 1e-12, 1e-12);
  lt_scope_end(sc);
  for (int i = 0; i < 2; i++) lt_tensor_free(in[i]);
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), t0);
}
END_TEST

/* ---- errors -------------------------------------------------------------------------- */

static lt_tensor *identity_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  (void)ctx, (void)user;
  return in[0];
}
static lt_tensor *failing_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  (void)ctx, (void)user;
  return lt_matmul(in[0], in[0]); /* [3] x [3] is fine; [2,3] x [2,3] is not */
}
static lt_tensor *exp_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  (void)user;
  lt_tensor *e = lt_exp(in[0]);
  return e && lt_custom_save(ctx, e) == LT_OK ? lt_clone(e) : NULL;
}
static lt_status exp_bwd(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
  (void)user;
  gin[0] = lt_mul(gout, lt_custom_saved(ctx, 0));
  return gin[0] ? LT_OK : lt_last_status();
}
static lt_status lazy_bwd(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
  (void)ctx, (void)gout, (void)gin, (void)user;
  return LT_OK; /* forgets gin[0] */
}
static lt_tensor *saving_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  (void)user;
  return lt_custom_save(ctx, in[0]) == LT_OK ? lt_mul_scalar(in[0], 2) : NULL;
}

START_TEST(test_errors_name_the_op) {
  lt_scope *sc = lt_scope_begin();
  lt_generator *g = LT_NNP(lt_generator_new(5));
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(2, 3)));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  const lt_custom_op nobw = {.name = "no_backward", .nin = 1, .forward = exp_fwd};
  lt_tensor *y = LT_NN(lt_custom_apply(&nobw, 1, &x, NULL));
  LT_EXPECT_ERR(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false), LT_ERR_AUTOGRAD,
                "backward of 'no_backward' failed: op 'no_backward' has no backward");
  const lt_custom_op ident = {.name = "ident", .nin = 1, .forward = identity_fwd};
  LT_EXPECT_NULL_ERR(lt_custom_apply(&ident, 1, &x, NULL), LT_ERR_INVALID, "ident: forward returned its input 0");
  const lt_custom_op fails = {.name = "square_mm", .nin = 1, .forward = failing_fwd};
  LT_EXPECT_NULL_ERR(lt_custom_apply(&fails, 1, &x, NULL), LT_ERR_SHAPE, "square_mm: forward failed: matmul");
  LT_EXPECT_NULL_ERR(lt_custom_apply(&SCALED, 1, &x, NULL), LT_ERR_INVALID, "op 'scaled_mul' takes 2 inputs");
  LT_EXPECT_NULL_ERR(lt_custom_apply(NULL, 1, &x, NULL), LT_ERR_NULL, "op is NULL");
  const lt_custom_op lazy = {.name = "lazy", .nin = 1, .forward = exp_fwd, .backward = lazy_bwd};
  y = LT_NN(lt_custom_apply(&lazy, 1, &x, NULL));
  LT_EXPECT_ERR(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false), LT_ERR_AUTOGRAD,
                "backward of 'lazy' returned no gradient for its input 0");
  /* a saved tensor written in place before backward */
  lt_tensor *leaf = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(3)));
  LT_OK_OR_FAIL(lt_requires_grad_(leaf, true));
  lt_tensor *h = LT_NN(lt_mul_scalar(leaf, 1.0)); /* a non-leaf we may write */
  const lt_custom_op saving = {.name = "saver", .nin = 1, .forward = saving_fwd, .backward = exp_bwd};
  y = LT_NN(lt_custom_apply(&saving, 1, &h, NULL));
  bool prev = lt_set_grad_enabled(false);
  LT_OK_OR_FAIL(lt_fill_(h, 3.0));
  lt_set_grad_enabled(prev);
  LT_EXPECT_ERR(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false), LT_ERR_AUTOGRAD,
                "one of the tensors saved by 'saver' for backward was modified in place");
  /* anomaly mode names the custom op */
  lt_tensor *big = LT_NN(lt_full(LT_DTYPE_F32, 1, (int64_t[]){2}, 1000.0));
  LT_OK_OR_FAIL(lt_requires_grad_(big, true));
  const lt_custom_op expo = {.name = "my_exp", .nin = 1, .forward = exp_fwd, .backward = exp_bwd};
  lt_set_anomaly_mode(true);
  LT_EXPECT_NULL_ERR(lt_custom_apply(&expo, 1, &big, NULL), LT_ERR_NUMERIC, "my_exp");
  lt_set_anomaly_mode(false);
  lt_scope_end(sc);
  lt_generator_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("custom_op");
  LT_TEST_CASE(s, "custom_op", 60, test_swish_matches_silu_and_gradchecks, test_state_broadcast_and_gradcheck,
               test_errors_name_the_op);
  return lt_test_run(s);
}
