/*
 * examples/fashion_mnist_mlp.c: the first model to build with libtensor, a
 * multilayer perceptron 784-256-128-100-10 with ReLU that classifies the
 * Fashion-MNIST images (28x28 grey-scale pictures of clothes, 10 classes).
 * docs/tutorial.md walks through this file from top to bottom.
 *
 * What it shows: a model as a plain C struct of layers whose parameters live
 * in one lt_params store; a training step inside an lt_scope (so none of its
 * intermediates needs a free of its own); lt_backward; an optimizer (AdamW,
 * or SGD with momentum) with a warmup + cosine learning-rate schedule;
 * mini-batches shuffled by lt_randperm from a seeded generator; evaluation
 * under no-grad; and error handling where a program (unlike the library) may
 * exit.
 *
 * What it is not: a benchmark of the best Fashion-MNIST model (a CNN does
 * better than an MLP's ~0.89).
 *
 * Data: Debian's dataset-fashion-mnist package (apt-get install
 * dataset-fashion-mnist), or --data DIR with the four *-ubyte.gz files.
 *
 *   fashion_mnist_mlp                      # the full run (10 epochs, AdamW)
 *   fashion_mnist_mlp --max-steps 300      # a quick check that it learns
 *   fashion_mnist_mlp --optim sgd --lr 0.05
 */
#include <libtensor/libtensor.h>
#include <libtensor/nn/nn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- error handling: a program may exit, the library never does ---------- */

/* Every libtensor failure leaves a message naming the op, the shapes and the
 * rule broken: print it and stop. */
static _Noreturn void die(const char *what) {
  fprintf(stderr, "fashion_mnist_mlp: %s failed: %s: %s\n", what, lt_status_name(lt_last_status()),
          lt_last_error());
  exit(1);
}
/* For calls returning lt_status. */
#define TRY(expr)                              \
  do {                                         \
    if ((expr) != LT_OK) die(#expr);           \
  } while (0)

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the model ------------------------------------------------------------ */

#define N_LAYERS 4
static const int64_t layer_sizes[N_LAYERS + 1] = {784, 256, 128, 100, 10};

typedef struct mlp {
  lt_linear_m fc[N_LAYERS]; /* fc[i].weight [out, in], fc[i].bias [out], borrowed from the store */
} mlp;

/* Registers "fc1.weight", "fc1.bias", ... "fc4.bias" in params, initialised as
 * PyTorch's nn.Linear (Kaiming-uniform weights, uniform biases) from g. */
static lt_status mlp_init(mlp *m, lt_params *params, lt_generator *g) {
  for (int i = 0; i < N_LAYERS; i++) {
    char name[16];
    snprintf(name, sizeof name, "fc%d", i + 1);
    lt_status st = lt_linear_init(&m->fc[i], params, name, layer_sizes[i], layer_sizes[i + 1], true, g);
    if (st != LT_OK) return st;
  }
  return LT_OK;
}

/* x [B, 784] -> logits [B, 10]. Every intermediate is a new tensor owned by
 * the caller's open scope. An error anywhere makes the rest of the chain
 * return NULL too, keeping the first message, so one check at the end is
 * enough. */
static lt_tensor *mlp_forward(const mlp *m, const lt_tensor *x) {
  lt_tensor *h = lt_linear_forward(&m->fc[0], x);                             /* [B, 256] */
  for (int i = 1; i < N_LAYERS; i++) h = lt_linear_forward(&m->fc[i], lt_relu(h)); /* ... [B, 10] */
  return h;
}

/* Number of rows of logits [B, 10] whose argmax equals labels [B]. */
static int64_t count_correct(const lt_tensor *logits, const lt_tensor *labels) {
  double correct = 0;
  lt_tensor *hits = lt_sum(lt_eq(lt_argmax(logits, 1, false), labels), 0, NULL, false);
  TRY(lt_item(hits, &correct));
  return (int64_t)correct;
}

/* Accuracy of the model on (x, y), in batches of 1000, under no-grad (no graph
 * is recorded). Per-class accuracies go to per_class[10] if not NULL. */
static double evaluate(const mlp *m, const lt_tensor *x, const lt_tensor *y, double *per_class) {
  bool prev = lt_set_grad_enabled(false);
  const int64_t N = x->shape[0], B = 1000;
  int64_t correct = 0, hit[10] = {0}, total[10] = {0};
  for (int64_t b = 0; b < N; b += B) {
    int64_t nb = N - b < B ? N - b : B;
    lt_scope *s = lt_scope_begin();
    lt_tensor *xb = lt_narrow(x, 0, b, nb), *yb = lt_narrow(y, 0, b, nb); /* views: no copy */
    lt_tensor *pred = lt_argmax(mlp_forward(m, xb), 1, false);             /* [nb] i64 */
    if (!pred) die("evaluate");
    const int64_t *p = pred->data, *t = yb->data; /* contiguous i64: read directly */
    for (int64_t i = 0; i < nb; i++) hit[t[i]] += p[i] == t[i], total[t[i]]++, correct += p[i] == t[i];
    lt_scope_end(s);
  }
  for (int c = 0; per_class && c < 10; c++) per_class[c] = total[c] ? (double)hit[c] / (double)total[c] : 0;
  lt_set_grad_enabled(prev);
  return (double)correct / (double)N;
}

/* ---- command line ----------------------------------------------------------- */

typedef struct options {
  const char *data;
  int epochs;
  int64_t batch;
  int64_t max_steps;  /* 0: run all epochs */
  int log_every;
  double lr, weight_decay;
  bool sgd;
  uint64_t seed;
  int threads;        /* 0: libtensor's default (LT_NUM_THREADS or all cores) */
} options;

static void usage(void) {
  fprintf(stderr,
          "usage: fashion_mnist_mlp [--data DIR] [--epochs N] [--batch B] [--max-steps N]\n"
          "                         [--optim adamw|sgd] [--lr X] [--weight-decay X] [--seed S]\n"
          "                         [--threads T] [--log-every K]\n"
          "  --data DIR       the four Fashion-MNIST *-ubyte.gz files (default %s)\n"
          "  --max-steps N    stop after N optimizer steps (a quick check; 0 = all epochs)\n",
          LT_FASHION_MNIST_DIR);
  exit(2);
}

static options parse(int argc, char **argv) {
  options o = {LT_FASHION_MNIST_DIR, 10, 128, 0, 100, 0, -1, false, 42, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage();
    if (!v) usage();
    i++;
    if (!strcmp(a, "--data")) o.data = v;
    else if (!strcmp(a, "--epochs")) o.epochs = atoi(v);
    else if (!strcmp(a, "--batch")) o.batch = atoll(v);
    else if (!strcmp(a, "--max-steps")) o.max_steps = atoll(v);
    else if (!strcmp(a, "--log-every")) o.log_every = atoi(v);
    else if (!strcmp(a, "--lr")) o.lr = atof(v);
    else if (!strcmp(a, "--weight-decay")) o.weight_decay = atof(v);
    else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--threads")) o.threads = atoi(v);
    else if (!strcmp(a, "--optim") && (!strcmp(v, "sgd") || !strcmp(v, "adamw"))) o.sgd = !strcmp(v, "sgd");
    else usage();
  }
  if (o.epochs < 1 || o.batch < 1 || o.max_steps < 0 || o.log_every < 1) usage();
  if (o.lr <= 0) o.lr = o.sgd ? 0.05 : 1e-3;
  if (o.weight_decay < 0) o.weight_decay = o.sgd ? 5e-4 : 0.01;
  return o;
}

/* ---- training --------------------------------------------------------------- */

int main(int argc, char **argv) {
  options opt = parse(argc, argv);
  if (opt.threads > 0) TRY(lt_set_num_threads(opt.threads));
  lt_runtime_info info;
  TRY(lt_runtime_get_info(&info));
  printf("libtensor %s, threads %d, BLIS kernels %s\n", info.version, info.num_threads, info.blas_arch);

  /* Data: images [N, 784] f32 normalised with the training set's mean and
   * std, labels [N] i64. These tensors are made outside any scope: we own
   * them and free them at the end. */
  lt_mnist_opts data_opts = {.normalize = true, .mean = LT_FASHION_MNIST_MEAN, .std = LT_FASHION_MNIST_STD};
  lt_tensor *train_x, *train_y, *test_x, *test_y;
  double t0 = now_seconds();
  if (lt_mnist_load(opt.data, LT_DATASET_TRAIN, &data_opts, &train_x, &train_y) != LT_OK ||
      lt_mnist_load(opt.data, LT_DATASET_TEST, &data_opts, &test_x, &test_y) != LT_OK) {
    fprintf(stderr, "fashion_mnist_mlp: %s\n(install Debian's dataset-fashion-mnist package or pass --data DIR)\n",
            lt_last_error());
    return 1;
  }
  const int64_t N = train_x->shape[0];
  printf("data: %lld training and %lld test images from %s (%.2f s)\n", (long long)N,
         (long long)test_x->shape[0], opt.data, now_seconds() - t0);

  /* The model: parameters in one store, drawn from one seeded generator,
   * which also shuffles the batches: a run is reproducible from --seed. */
  lt_generator *gen = lt_generator_new(opt.seed);
  lt_params *params = lt_params_new();
  if (!gen || !params) die("setup");
  mlp model;
  TRY(mlp_init(&model, params, gen));
  printf("model: MLP 784-256-128-100-10, %lld parameters:\n", (long long)lt_params_numel(params, true));
  for (int i = 0; i < lt_params_count(params); i++) {
    const lt_param *p = lt_params_at(params, i);
    char shape[64];
    printf("  %-10s %s\n", p->name, lt_shape_str(p->value->ndim, p->value->shape, shape, sizeof shape));
  }

  /* The optimizer and the learning-rate schedule: linear warmup, then cosine
   * decay to 1% of the base rate at the last step. */
  const int64_t steps_per_epoch = (N + opt.batch - 1) / opt.batch;
  int64_t total_steps = steps_per_epoch * opt.epochs;
  if (opt.max_steps > 0 && opt.max_steps < total_steps) total_steps = opt.max_steps;
  lt_optim_config oc = lt_optim_defaults(opt.sgd ? LT_OPTIM_SGD : LT_OPTIM_ADAMW);
  oc.lr = opt.lr;
  oc.weight_decay = opt.weight_decay;
  if (opt.sgd) oc.momentum = 0.9, oc.nesterov = true;
  lt_optimizer *optim = lt_optimizer_new(params, &oc);
  if (!optim) die("lt_optimizer_new");
  lt_schedule sched = {.kind = LT_SCHED_WARMUP_COSINE, .base_lr = opt.lr, .min_lr = opt.lr * 0.01,
                       .warmup = total_steps / 50, .total = total_steps};
  if (!(lt_schedule_lr(&sched, 1) >= 0)) die("lt_schedule_lr"); /* NaN on a bad schedule */
  printf("training: %s lr %g weight decay %g, batch %lld, %lld steps (%lld per epoch)\n",
         opt.sgd ? "SGD (Nesterov momentum 0.9)" : "AdamW", opt.lr, opt.weight_decay, (long long)opt.batch,
         (long long)total_steps, (long long)steps_per_epoch);

  lt_cross_entropy_opts ce = LT_CROSS_ENTROPY_DEFAULTS;
  float *losses = calloc((size_t)total_steps, sizeof *losses); /* per step, for the summary */
  if (!losses) die("calloc");
  int64_t step = 0;
  double t_train = now_seconds(), t_log = t_train, loss_sum = 0;
  int64_t seen = 0, correct = 0, log_examples = 0;
  for (int epoch = 1; epoch <= opt.epochs && step < total_steps; epoch++) {
    /* A fresh order of the training set each epoch: perm [N] i64. */
    lt_tensor *perm = lt_randperm(gen, N);
    if (!perm) die("lt_randperm");
    for (int64_t b = 0; b < N && step < total_steps; b += opt.batch) {
      const int64_t nb = N - b < opt.batch ? N - b : opt.batch;
      /* Everything made between begin and end belongs to the scope: the
       * batch, the activations, the graph, the loss. */
      lt_scope *scope = lt_scope_begin();
      lt_tensor *idx = lt_narrow(perm, 0, b, nb);          /* [nb] view into perm */
      lt_tensor *xb = lt_index_select(train_x, 0, idx);    /* [nb, 784] */
      lt_tensor *yb = lt_index_select(train_y, 0, idx);    /* [nb] */
      lt_tensor *logits = mlp_forward(&model, xb);         /* [nb, 10] */
      lt_tensor *loss = lt_cross_entropy(logits, yb, &ce); /* [] mean over the batch */
      if (!loss) die("forward");

      lt_params_zero_grad(params);  /* .grad of every parameter back to none */
      TRY(lt_backward(loss, NULL, false));
      lt_optimizer_set_lr(optim, lt_schedule_lr(&sched, step + 1));
      TRY(lt_optimizer_step(optim));

      double l;
      TRY(lt_item(loss, &l));
      losses[step++] = (float)l;
      loss_sum += l * (double)nb;
      correct += count_correct(logits, yb);
      seen += nb;
      log_examples += nb;
      lt_scope_end(scope); /* frees all of the above; the parameters keep their .grad */

      if (step % opt.log_every == 0 || step == total_steps) {
        double t = now_seconds();
        printf("epoch %2d  step %5lld/%lld  loss %.4f  accuracy %.4f  lr %.2e  %6.0f examples/s\n", epoch,
               (long long)step, (long long)total_steps, loss_sum / (double)seen, (double)correct / (double)seen,
               lt_optimizer_get_lr(optim), (double)log_examples / (t - t_log));
        fflush(stdout);
        t_log = t;
        loss_sum = 0, seen = 0, correct = 0, log_examples = 0;
      }
    }
    lt_tensor_free(perm);
  }
  double train_seconds = now_seconds() - t_train;

  double per_class[10];
  double acc = evaluate(&model, test_x, test_y, per_class);
  printf("test accuracy %.4f after %lld steps (%.1f s of training)\n", acc, (long long)step, train_seconds);
  for (int c = 0; c < 10; c++) printf("  %-12s %.3f\n", lt_fashion_mnist_class_name(c), per_class[c]);

  /* For scripts (tests/example_test.sh): mean loss of the first and the last
   * 20 steps. */
  int64_t k = step < 20 ? step : 20;
  double first = 0, last = 0;
  for (int64_t i = 0; i < k; i++) first += losses[i] / (double)k, last += losses[step - k + i] / (double)k;
  printf("summary: steps=%lld first_loss=%.4f last_loss=%.4f test_accuracy=%.4f train_seconds=%.1f\n",
         (long long)step, first, last, acc, train_seconds);

  free(losses);
  lt_optimizer_free(optim);
  lt_params_free(params);
  lt_generator_free(gen);
  lt_tensor_free(train_x), lt_tensor_free(train_y), lt_tensor_free(test_x), lt_tensor_free(test_y);
  return 0;
}
