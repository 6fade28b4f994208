/*
 * examples/custom_op.c: a differentiable op of one's own (autograd/custom.h),
 * checked with lt_gradcheck and trained inside a small model, built against
 * the installed library like any user program.
 *
 * The op is swish with a learnable-free slope, swish_beta(x) = x sigmoid(beta x)
 * (Ramachandran et al. 2017), beta a plain number kept in the op's state:
 *   forward:  s = sigmoid(beta x),  y = x s            (saves x and s)
 *   backward: dy/dx = s + beta x s (1 - s)
 * Then a 2-layer MLP y = W2 swish_beta(W1 x + b1) + b2 fits sin(x) on [-3, 3]
 * with Adam in a loop of its own (a scope per step: no frees).
 *
 *   custom_op               # gradcheck, 300 steps; prints the loss falling
 * The last line is machine-readable: "summary: gradcheck=ok first_loss=A last_loss=B".
 */
#include <libtensor/libtensor.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static _Noreturn void die(const char *what) {
  fprintf(stderr, "custom_op: %s failed: %s: %s\n", what, lt_status_name(lt_last_status()), lt_last_error());
  exit(1);
}
#define TRY(expr)                    \
  do {                               \
    if ((expr) != LT_OK) die(#expr); \
  } while (0)

/* ---- the op ------------------------------------------------------------------- */

typedef struct swish_state {
  double beta;
} swish_state;

/* in[0] = x; user points at beta. Runs under no-grad in a scope of its own. */
static lt_tensor *swish_forward(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
  const swish_state st = {*(const double *)user};
  lt_tensor *s = lt_sigmoid(lt_mul_scalar(in[0], st.beta));
  if (!s || lt_custom_save(ctx, in[0]) != LT_OK || lt_custom_save(ctx, s) != LT_OK ||
      lt_custom_set_state(ctx, &st, sizeof st) != LT_OK)
    return NULL;
  return lt_mul(in[0], s);
}

/* dL/dx = gout (s + beta x s (1 - s)); temporaries belong to the engine's scope. */
static lt_status swish_backward(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
  (void)user;
  const swish_state *st = lt_custom_state(ctx, NULL);
  const lt_tensor *x = lt_custom_saved(ctx, 0), *s = lt_custom_saved(ctx, 1);
  lt_tensor *one_minus_s = lt_sub_scalar(lt_neg(s), -1.0);
  lt_tensor *d = lt_add(s, lt_mul_scalar(lt_mul(lt_mul(x, s), one_minus_s), st->beta));
  gin[0] = lt_mul(gout, d);
  return gin[0] ? LT_OK : lt_last_status();
}

static const lt_custom_op SWISH_BETA = {.name = "swish_beta", .nin = 1, .forward = swish_forward,
                                        .backward = swish_backward};

static lt_tensor *swish_beta(const lt_tensor *x, double beta) {
  return lt_custom_apply(&SWISH_BETA, 1, (lt_tensor *[]){(lt_tensor *)x}, &beta);
}

/* for lt_gradcheck: f(inputs) with beta from user */
static lt_tensor *check_fn(int n, lt_tensor *const *in, void *user) {
  (void)n;
  return swish_beta(in[0], *(const double *)user);
}

/* ---- a model using it ------------------------------------------------------------ */

int main(void) {
  lt_generator *g = lt_generator_new(1);
  if (!g) die("lt_generator_new");
  /* 1. the backward against finite differences, in f64 */
  double beta = 1.7;
  lt_tensor *xc = lt_randn(g, LT_DTYPE_F64, 2, (int64_t[]){4, 3});
  if (!xc) die("lt_randn");
  TRY(lt_requires_grad_(xc, true));
  TRY(lt_gradcheck(check_fn, &beta, 1, &xc, NULL));
  printf("custom_op: swish_beta passes lt_gradcheck (f64, 12 elements)\n");
  lt_tensor_free(xc);

  /* 2. train y = W2 swish_beta(W1 x + b1) + b2 on sin(x) */
  lt_params *p = lt_params_new();
  lt_linear_m l1, l2;
  TRY(lt_linear_init(&l1, p, "fc1", 1, 32, true, g));
  TRY(lt_linear_init(&l2, p, "fc2", 32, 1, true, g));
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAM);
  oc.lr = 0.01;
  lt_optimizer *opt = lt_optimizer_new(p, &oc);
  lt_tensor *x = lt_arange(LT_DTYPE_F32, -3.0, 3.0, 0.05), *xs = x ? lt_unsqueeze(x, 1) : NULL; /* [120, 1] */
  lt_tensor *y = xs ? lt_sin(xs) : NULL;
  if (!opt || !y) die("setup");
  double first = NAN, last = NAN;
  for (int step = 0; step < 300; step++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *h = swish_beta(lt_linear_forward(&l1, xs), beta);
    lt_tensor *loss = lt_mse_loss(lt_linear_forward(&l2, h), y, LT_REDUCTION_MEAN);
    double v;
    TRY(lt_item(loss, &v));
    TRY(lt_backward(loss, NULL, false));
    TRY(lt_optimizer_step(opt));
    lt_params_zero_grad(p);
    lt_scope_end(sc);
    if (step == 0) first = v;
    last = v;
    if (step % 100 == 0 || step == 299) printf("step %3d: loss %.5f\n", step + 1, v);
  }
  printf("summary: gradcheck=ok first_loss=%.5f last_loss=%.5f\n", first, last);
  lt_tensor_free(x), lt_tensor_free(xs), lt_tensor_free(y);
  lt_optimizer_free(opt);
  lt_params_free(p);
  lt_generator_free(g);
  return 0;
}
