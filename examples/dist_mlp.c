/*
 * examples/dist_mlp.c: data parallelism in your own training loop, with the
 * few calls of dist/dist.h a program adds. The same binary runs alone or
 * under mpirun:
 *
 *   dist_mlp --batch 64                 # one process, batch 64
 *   mpirun -np 2 dist_mlp --batch 32    # two ranks x 32: the same global batch, the same run
 *
 * The model is a small MLP (16-64-4, ReLU) on a synthetic task (four Gaussian
 * blobs in 16 dimensions, drawn from --seed), so the example needs no data
 * files. The loop is plain: draw a batch, forward, loss, backward, step. The
 * calls that make it data parallel are marked DIST below:
 *   1. lt_dist_init / lt_dist_finalize around the program;
 *   2. lt_dist_broadcast_params: every rank starts from rank 0's weights;
 *   3. lt_dist_grads_new: the gradient reducer; its buckets start reducing
 *      during backward (autograd's post-accumulate hooks);
 *      lt_dist_grads_finish before the optimizer step averages them;
 *   4. lt_dist_shard: every rank draws the same global batch of N x --batch
 *      examples and keeps its slice;
 *   5. lt_dist_allreduce_f64 for what is printed (the loss, the accuracy).
 * Gradient accumulation would add lt_dist_grads_set_sync(g, false) before
 * the backward of each micro-batch but the last (PyTorch's no_sync).
 * Programs built on the training loop (train/trainer.h) get 3 and the loss of
 * 5 from it (docs/distributed.md).
 *
 * What it is not: a benchmark (bench/run_dist_bench.sh is), or a model worth
 * training (the blobs are easy).
 */
#include <libtensor/libtensor.h>
#include <libtensor/nn/nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 16   /* features */
#define K 4    /* classes */
#define H 64   /* hidden units */
#define N_TRAIN 4096

static _Noreturn void die(const char *what) {
  fprintf(stderr, "dist_mlp: rank %d: %s failed: %s: %s\n", lt_dist_rank(), what, lt_status_name(lt_last_status()),
          lt_last_error());
  lt_dist_abort(1); /* ends every rank: the others would wait for this one */
}
#define TRY(expr)                    \
  do {                               \
    if ((expr) != LT_OK) die(#expr); \
  } while (0)

/* A 64-bit LCG: the data and the batch order, the same on every rank. */
static uint64_t next(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}
static double uniform(uint64_t *s) { return (double)next(s) / 9007199254740992.0; }

/* Four blobs: class k's mean is a random point, each example its mean plus noise. */
static void make_data(uint64_t seed, float *x, int64_t *y) {
  float mean[K][D];
  for (int k = 0; k < K; k++)
    for (int d = 0; d < D; d++) mean[k][d] = (float)(2.0 * uniform(&seed) - 1.0);
  for (int i = 0; i < N_TRAIN; i++) {
    y[i] = (int64_t)(next(&seed) % K);
    for (int d = 0; d < D; d++) x[i * D + d] = mean[y[i]][d] + (float)(4.0 * (uniform(&seed) - 0.5));
  }
}

int main(int argc, char **argv) {
  TRY(lt_dist_init(&argc, &argv)); /* DIST 1: a world of one without mpirun */
  const int N = lt_dist_size(), R = lt_dist_rank();
  int64_t batch = 64, steps = 200;
  uint64_t seed = 42;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--batch")) batch = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps")) steps = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) seed = (uint64_t)atoll(argv[i + 1]);
    else break;
  }
  if (batch < 1 || steps < 1 || (argc > 1 && argc % 2 == 0)) {
    if (R == 0) fprintf(stderr, "usage: [mpirun -np N] dist_mlp [--batch B per rank] [--steps S] [--seed S]\n");
    lt_dist_finalize();
    return 2;
  }
  TRY(lt_init());

  float *X = malloc(sizeof(float) * N_TRAIN * D);
  int64_t *Y = malloc(sizeof(int64_t) * N_TRAIN);
  float *xb = malloc(sizeof(float) * (size_t)(N * batch) * D);
  int64_t *yb = malloc(sizeof(int64_t) * (size_t)(N * batch));
  if (!X || !Y || !xb || !yb) die("malloc");
  make_data(seed, X, Y);

  lt_generator *gen = lt_generator_new(seed);
  lt_params *params = lt_params_new();
  lt_linear_m fc1, fc2;
  if (!gen || !params) die("setup");
  TRY(lt_linear_init(&fc1, params, "fc1", D, H, true, gen));
  TRY(lt_linear_init(&fc2, params, "fc2", H, K, true, gen));
  TRY(lt_dist_broadcast_params(params));                 /* DIST 2: rank 0's weights everywhere */
  lt_dist_grads *grads = lt_dist_grads_new(params, 0); /* DIST 3: the reducer (hooks on every parameter) */
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_SGD);
  oc.lr = 0.1, oc.momentum = 0.9;
  lt_optimizer *opt = lt_optimizer_new(params, &oc);
  if (!grads || !opt) die("reducer or optimizer");
  if (R == 0) printf("dist_mlp: %d rank%s x batch %lld = a global batch of %lld\n", N, N > 1 ? "s" : "",
                     (long long)batch, (long long)(N * batch));

  uint64_t order = seed + 1;
  double loss = 0, acc = 0;
  for (int64_t step = 1; step <= steps; step++) {
    /* DIST 4: the global batch (the same on every rank), this rank's rows */
    const int64_t global = N * batch;
    for (int64_t i = 0; i < global; i++) {
      int64_t j = (int64_t)(next(&order) % N_TRAIN);
      memcpy(xb + i * D, X + j * D, sizeof(float) * D);
      yb[i] = Y[j];
    }
    int64_t first, count;
    lt_dist_shard(global, &first, &count);

    lt_scope *scope = lt_scope_begin(); /* frees the step's tensors and graph */
    lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_F32, 2, (int64_t[]){count, D}, xb + first * D);
    lt_tensor *y = lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){count}, yb + first);
    lt_tensor *logits = lt_linear_forward(&fc2, lt_relu(lt_linear_forward(&fc1, x))); /* [count, K] */
    lt_tensor *l = lt_cross_entropy(logits, y, NULL);
    lt_tensor *right = lt_sum(lt_to_dtype(lt_eq(lt_argmax(logits, 1, false), y), LT_DTYPE_F64), 0, NULL, false);
    double v[2];
    if (!l || !right || lt_item(l, &v[0]) != LT_OK || lt_item(right, &v[1]) != LT_OK) die("forward");
    TRY(lt_backward(l, NULL, false)); /* buckets start reducing as their gradients become final */
    TRY(lt_dist_grads_finish(grads)); /* DIST 3: wait, average: every rank has the same gradients */
    TRY(lt_optimizer_step(opt));
    lt_params_zero_grad(params);
    lt_scope_end(scope);

    /* DIST 5: what is printed is the global batch's (mean loss, accuracy) */
    TRY(lt_dist_allreduce_f64(v, 2, LT_DIST_SUM));
    loss = v[0] / N, acc = v[1] / (double)global;
    if (R == 0 && (step % 50 == 0 || step == 1))
      printf("step %4lld  loss %.4f  accuracy %.3f\n", (long long)step, loss, acc);
  }
  double wsum = 0; /* a checksum of the weights: equal for any N at the same global batch (to rounding) */
  for (int i = 0; i < lt_params_count(params); i++) {
    const lt_tensor *t = lt_params_at(params, i)->value;
    for (int64_t j = 0; j < t->numel; j++) wsum += ((const float *)t->data)[j];
  }
  if (R == 0) printf("final loss %.9g weight sum %.9g\n", loss, wsum);

  lt_optimizer_free(opt);
  lt_dist_grads_free(grads);
  lt_params_free(params);
  lt_generator_free(gen);
  free(X), free(Y), free(xb), free(yb);
  lt_dist_finalize(); /* DIST 1 */
  return 0;
}
