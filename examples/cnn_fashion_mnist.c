/*
 * examples/cnn_fashion_mnist.c: a convolutional network on Fashion-MNIST,
 * the CNN of issue 18, on the library's training loop (train/trainer.h):
 *
 *   conv 3x3 1->16 (pad 1) -> BatchNorm2d -> ReLU -> max pool 2   [B, 16, 14, 14]
 *   conv 3x3 16->32 (pad 1) -> BatchNorm2d -> ReLU -> max pool 2  [B, 32, 7, 7]
 *   flatten -> linear 1568->128 -> ReLU -> linear 128->10
 *
 * What it shows: lt_conv2d_m and lt_max_pool2d (nn/conv.h) in a model that
 * is a plain struct of layers; the rest (data loader with its checkpointed
 * position, the trainer hooks, resume, metrics CSV, Ctrl-C) is the MLP
 * example's (examples/fashion_mnist_mlp.c, docs/tutorial.md), so only the
 * model differs. bench/cnn_fashion_mnist_torch.py is the same run in PyTorch
 * (same configuration, seed handling and data order: a permutation per
 * epoch, batches of 128, AdamW 1e-3 with warmup + cosine).
 *
 * BatchNorm2d is composed here from lt_ ops (batch statistics in training,
 * running statistics, momentum 0.1, eps 1e-5, in evaluation, as PyTorch's),
 * with the running statistics as buffers under PyTorch's names
 * (bn1.running_mean, bn1.running_var); it moves to the library's BatchNorm
 * when that lands.
 *
 * Data: Debian's dataset-fashion-mnist package, or --data DIR.
 *
 *   cnn_fashion_mnist --epochs 3            # the measured run (docs/vision.md)
 *   cnn_fashion_mnist --max-steps 100       # a quick check that it learns
 *   cnn_fashion_mnist --dir run [--resume]  # checkpoints, metrics.csv, resume
 */
#include <libtensor/libtensor.h>
#include <libtensor/nn/nn.h>
#include <libtensor/nn/conv.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- error handling: a program may exit, the library never does ---------- */

static _Noreturn void die(const char *what) {
  fprintf(stderr, "cnn_fashion_mnist: %s failed: %s: %s\n", what, lt_status_name(lt_last_status()),
          lt_last_error());
  exit(1);
}
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

/* BatchNorm2d over [B, C, H, W]: weight/bias [C] (parameters), running_mean /
 * running_var [C] (buffers). */
typedef struct bn2d {
  lt_tensor *weight, *bias, *running_mean, *running_var;
} bn2d;

static lt_status bn_init(bn2d *m, lt_params *p, const char *name, int64_t C) {
  char n[64];
  const int64_t shape[1] = {C};
  lt_tensor *t[4] = {lt_tensor_keep(lt_ones(LT_DTYPE_F32, 1, shape)), lt_tensor_keep(lt_zeros(LT_DTYPE_F32, 1, shape)),
                     lt_tensor_keep(lt_zeros(LT_DTYPE_F32, 1, shape)), lt_tensor_keep(lt_ones(LT_DTYPE_F32, 1, shape))};
  const char *leaf[4] = {"weight", "bias", "running_mean", "running_var"};
  const unsigned flags[4] = {LT_PARAM_NO_DECAY, LT_PARAM_NO_DECAY, LT_PARAM_BUFFER, LT_PARAM_BUFFER};
  for (int i = 0; i < 4; i++) {
    snprintf(n, sizeof n, "%s.%s", name, leaf[i]);
    lt_status s = t[i] ? lt_params_add(p, n, t[i], flags[i]) : lt_last_status();
    if (s != LT_OK) return s;
  }
  m->weight = t[0], m->bias = t[1], m->running_mean = t[2], m->running_var = t[3];
  return LT_OK;
}

/* y = (x - mean) / sqrt(var + eps) * weight + bias, per channel: the batch's
 * biased statistics in training (and the running ones updated with momentum
 * 0.1, the variance unbiased, as PyTorch), the running ones in evaluation. */
static lt_tensor *bn_forward(const bn2d *m, const lt_tensor *x, bool training) {
  const int64_t C = m->weight->shape[0], cshape[4] = {1, C, 1, 1};
  lt_tensor *mean, *var;
  if (training) {
    mean = lt_mean(x, LT_DIMS(0, 2, 3), true);      /* [1, C, 1, 1] */
    var = lt_var(x, LT_DIMS(0, 2, 3), false, true);
    if (!mean || !var) return NULL;
    const double n = (double)(x->numel / C), mom = 0.1;
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *rm = lt_view(m->running_mean, 4, cshape), *rv = lt_view(m->running_var, 4, cshape);
    lt_status s = rm && rv ? LT_OK : lt_last_status();
    if (s == LT_OK) s = lt_mul_scalar_(rm, 1 - mom);
    if (s == LT_OK) s = lt_add_(rm, lt_mul_scalar(mean, mom));
    if (s == LT_OK) s = lt_mul_scalar_(rv, 1 - mom);
    if (s == LT_OK) s = lt_add_(rv, lt_mul_scalar(var, mom * n / (n - 1)));
    lt_set_grad_enabled(prev);
    if (s != LT_OK) return NULL;
  } else {
    mean = lt_view(m->running_mean, 4, cshape);
    var = lt_view(m->running_var, 4, cshape);
  }
  lt_tensor *xhat = lt_mul(lt_sub(x, mean), lt_rsqrt(lt_add_scalar(var, 1e-5)));
  return lt_add(lt_mul(xhat, lt_view(m->weight, 4, cshape)), lt_view(m->bias, 4, cshape));
}

typedef struct cnn {
  lt_conv2d_m conv1, conv2; /* [16, 1, 3, 3], [32, 16, 3, 3] */
  bn2d bn1, bn2;
  lt_linear_m fc1, fc2;     /* [128, 1568], [10, 128] */
} cnn;

/* Registers conv1.*, bn1.*, conv2.*, bn2.*, fc1.*, fc2.* (PyTorch's names and
 * default initialisation, in PyTorch's order, from g). */
static lt_status cnn_init(cnn *m, lt_params *p, lt_generator *g) {
  lt_conv_opts o = LT_CONV_OPTS_DEFAULT;
  o.padding[0] = o.padding[1] = 1;
  lt_status s;
  if ((s = lt_conv2d_init(&m->conv1, p, "conv1", 1, 16, 3, 3, &o, true, g)) != LT_OK) return s;
  if ((s = bn_init(&m->bn1, p, "bn1", 16)) != LT_OK) return s;
  if ((s = lt_conv2d_init(&m->conv2, p, "conv2", 16, 32, 3, 3, &o, true, g)) != LT_OK) return s;
  if ((s = bn_init(&m->bn2, p, "bn2", 32)) != LT_OK) return s;
  if ((s = lt_linear_init(&m->fc1, p, "fc1", 32 * 7 * 7, 128, true, g)) != LT_OK) return s;
  return lt_linear_init(&m->fc2, p, "fc2", 128, 10, true, g);
}

/* x [B, 784] -> logits [B, 10]. Intermediates belong to the open scope; a
 * failure anywhere gives NULL with the first message. */
static lt_tensor *cnn_forward(const cnn *m, const lt_tensor *x, bool training) {
  const lt_pool_opts pool = LT_POOL_OPTS(2, 2);
  lt_tensor *h = lt_view(x, 4, (const int64_t[]){x ? x->shape[0] : 0, 1, 28, 28});
  h = lt_max_pool2d(lt_relu(bn_forward(&m->bn1, lt_conv2d_forward(&m->conv1, h), training)), &pool, NULL);
  h = lt_max_pool2d(lt_relu(bn_forward(&m->bn2, lt_conv2d_forward(&m->conv2, h), training)), &pool, NULL);
  h = lt_relu(lt_linear_forward(&m->fc1, lt_flatten(h, 1, -1))); /* [B, 128] */
  return lt_linear_forward(&m->fc2, h);
}

/* Accuracy of the model on (x, y), in batches of 1000, under no-grad (no graph
 * is recorded). Per-class accuracies go to per_class[10] if not NULL. */
static double evaluate(const cnn *m, const lt_tensor *x, const lt_tensor *y, double *per_class) {
  bool prev = lt_set_grad_enabled(false);
  const int64_t N = x->shape[0], B = 1000;
  int64_t correct = 0, hit[10] = {0}, total[10] = {0};
  for (int64_t b = 0; b < N; b += B) {
    int64_t nb = N - b < B ? N - b : B;
    lt_scope *s = lt_scope_begin();
    lt_tensor *xb = lt_narrow(x, 0, b, nb), *yb = lt_narrow(y, 0, b, nb); /* views: no copy */
    lt_tensor *pred = lt_argmax(cnn_forward(m, xb, false), 1, false);             /* [nb] i64 */
    if (!pred) die("evaluate");
    const int64_t *p = pred->data, *t = yb->data; /* contiguous i64: read directly */
    for (int64_t i = 0; i < nb; i++) hit[t[i]] += p[i] == t[i], total[t[i]]++, correct += p[i] == t[i];
    lt_scope_end(s);
  }
  for (int c = 0; per_class && c < 10; c++) per_class[c] = total[c] ? (double)hit[c] / (double)total[c] : 0;
  lt_set_grad_enabled(prev);
  return (double)correct / (double)N;
}

/* ---- the data loader: shuffled mini-batches, and its position ------------- */

/* A new order of the training set each epoch (lt_randperm from gen). Its
 * position (epoch, batches done, the generator's state at the start of the
 * epoch) is what a checkpoint needs to continue with the same batches. */
typedef struct loader {
  const lt_tensor *x, *y;          /* [N, 784] f32, [N] i64 (borrowed) */
  int64_t n, batch;
  lt_generator *gen;               /* borrowed */
  lt_tensor *perm;                 /* [N] i64, this epoch's order (owned; NULL before the first batch) */
  lt_generator_state epoch_start;  /* gen before perm was drawn */
  int64_t epoch, index;            /* 0-based epoch, batches returned in it */
} loader;

static int64_t batches_per_epoch(const loader *L) { return (L->n + L->batch - 1) / L->batch; }

/* Draws the order of the current epoch (outside any scope: the loader owns it). */
static lt_status new_order(loader *L) {
  lt_tensor_free(L->perm);
  L->epoch_start = lt_generator_get_state(L->gen);
  L->perm = lt_tensor_keep(lt_randperm(L->gen, L->n));
  return L->perm ? LT_OK : lt_last_status();
}

/* The next batch: xb [nb, 784], yb [nb] (new, owned by the open scope). */
static lt_status loader_next(loader *L, lt_tensor **xb, lt_tensor **yb) {
  if (L->index == batches_per_epoch(L)) L->epoch++, L->index = 0, lt_tensor_free(L->perm), L->perm = NULL;
  if (!L->perm && new_order(L) != LT_OK) return lt_last_status();
  int64_t b = L->index++ * L->batch, nb = L->n - b < L->batch ? L->n - b : L->batch;
  lt_tensor *idx = lt_narrow(L->perm, 0, b, nb); /* [nb] view into perm */
  *xb = lt_index_select(L->x, 0, idx);
  *yb = lt_index_select(L->y, 0, idx);
  return *xb && *yb ? LT_OK : lt_last_status();
}

/* ---- the model's part of the training loop (train/trainer.h hooks) ---------- */

typedef struct run {
  cnn model;
  loader data;
  const lt_tensor *test_x, *test_y;
  float *losses;     /* per step of this process, for the summary */
  int64_t n_losses, cap_losses;
  double test_acc, per_class[10]; /* of the newest evaluation */
} run;

/* One mini-batch: forward and the mean cross-entropy. The trainer does the
 * backward pass, the optimizer step and the learning rate of the schedule. */
static lt_status micro_batch(void *user, lt_trainer_micro *m) {
  run *r = user;
  lt_tensor *xb = NULL, *yb = NULL;
  if (loader_next(&r->data, &xb, &yb) != LT_OK) return lt_last_status();
  m->tokens = xb->shape[0]; /* examples, for examples/s */
  if (!m->forward) return LT_OK;
  lt_cross_entropy_opts ce = LT_CROSS_ENTROPY_DEFAULTS;
  m->loss = lt_cross_entropy(cnn_forward(&r->model, xb, true), yb, &ce); /* [] mean over the batch */
  m->weight = 1.0 / (double)m->accum;
  double l;
  if (!m->loss || lt_item(m->loss, &l) != LT_OK) return lt_last_status();
  if (r->n_losses < r->cap_losses) r->losses[r->n_losses++] = (float)l;
  return LT_OK;
}

static const lt_trainer_metric METRICS[] = {{"test_accuracy", "%.4f"}};

static lt_status evaluate_hook(void *user, lt_trainer_eval *ev) {
  run *r = user;
  ev->values[0] = r->test_acc = evaluate(&r->model, r->test_x, r->test_y, r->per_class);
  return LT_OK;
}

static lt_loader_position get_position(void *user) {
  const loader *L = &((run *)user)->data;
  lt_generator_state g = L->perm ? L->epoch_start : lt_generator_get_state(L->gen);
  return (lt_loader_position){L->epoch, L->index, g, (uint64_t)L->n};
}

static lt_status set_position(void *user, lt_loader_position pos) {
  loader *L = &((run *)user)->data;
  if (pos.fingerprint != (uint64_t)L->n)
    return lt_error_set(LT_ERR_STATE, "the checkpoint was trained on %llu images, this data has %lld",
                           (unsigned long long)pos.fingerprint, (long long)L->n);
  if (lt_generator_set_state(L->gen, pos.gen) != LT_OK || new_order(L) != LT_OK) return lt_last_status();
  L->epoch = pos.epoch, L->index = pos.index;
  return LT_OK;
}

static int64_t bpe_hook(void *user) { return batches_per_epoch(&((run *)user)->data); }

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
  const char *dir;    /* run directory: checkpoints and metrics.csv (NULL: none) */
  bool resume;
} options;

static void usage(void) {
  fprintf(stderr,
          "usage: cnn_fashion_mnist [--data DIR] [--epochs N] [--batch B] [--max-steps N]\n"
          "                         [--optim adamw|sgd] [--lr X] [--weight-decay X] [--seed S]\n"
          "                         [--threads T] [--log-every K] [--dir DIR [--resume]]\n"
          "  --data DIR       the four Fashion-MNIST *-ubyte.gz files (default %s)\n"
          "  --max-steps N    stop after N optimizer steps (a quick check; 0 = all epochs)\n"
          "  --dir DIR        run directory: a checkpoint every epoch (the 2 newest kept) and\n"
          "                   DIR/metrics.csv; Ctrl-C saves one; starts over unless --resume\n"
          "  --resume         continue from the newest checkpoint in --dir\n",
          LT_FASHION_MNIST_DIR);
  exit(2);
}

static options parse(int argc, char **argv) {
  options o = {LT_FASHION_MNIST_DIR, 3, 128, 0, 100, 0, -1, false, 42, 0, NULL, false};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage();
    if (!strcmp(a, "--resume")) {
      o.resume = true;
      continue;
    }
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
    else if (!strcmp(a, "--dir")) o.dir = v;
    else if (!strcmp(a, "--optim") && (!strcmp(v, "sgd") || !strcmp(v, "adamw"))) o.sgd = !strcmp(v, "sgd");
    else usage();
  }
  if (o.epochs < 1 || o.batch < 1 || o.max_steps < 0 || o.log_every < 1 || (o.resume && !o.dir)) usage();
  if (o.lr <= 0) o.lr = o.sgd ? 0.05 : 1e-3;
  if (o.weight_decay < 0) o.weight_decay = o.sgd ? 5e-4 : 0.01;
  return o;
}

/* ---- training --------------------------------------------------------------- */

int main(int argc, char **argv) {
  options opt = parse(argc, argv);
  signal(SIGXFSZ, SIG_IGN); /* a file over the size limit is a write error, not a kill */
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
    fprintf(stderr, "cnn_fashion_mnist: %s\n(install Debian's dataset-fashion-mnist package or pass --data DIR)\n",
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
  run r = {.data = {train_x, train_y, N, opt.batch, gen, NULL, {0, 0}, 0, 0}, .test_x = test_x, .test_y = test_y};
  TRY(cnn_init(&r.model, params, gen));
  printf("model: CNN conv16-bn-pool conv32-bn-pool fc128 fc10, %lld parameters:\n", (long long)lt_params_numel(params, true));
  for (int i = 0; i < lt_params_count(params); i++) {
    const lt_param *p = lt_params_at(params, i);
    char shape[64];
    printf("  %-18s %s\n", p->name, lt_shape_str(p->value->ndim, p->value->shape, shape, sizeof shape));
  }

  /* The optimizer and the learning-rate schedule: linear warmup, then cosine
   * decay to 1% of the base rate at the last step. */
  const int64_t steps_per_epoch = batches_per_epoch(&r.data);
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
  printf("training: %s lr %g weight decay %g, batch %lld, %lld steps (%lld per epoch)\n",
         opt.sgd ? "SGD (Nesterov momentum 0.9)" : "AdamW", opt.lr, opt.weight_decay, (long long)opt.batch,
         (long long)total_steps, (long long)steps_per_epoch);

  /* The training loop of the library: our part is the hooks above. The
   * generator is training state (it shuffles), so checkpoints keep it. */
  r.cap_losses = total_steps;
  r.losses = calloc((size_t)total_steps, sizeof *r.losses);
  if (!r.losses) die("calloc");
  const char *const gen_names[] = {"shuffle"};
  lt_trainer_config tc = LT_TRAINER_DEFAULTS;
  tc.params = params, tc.optim = optim, tc.optim_config = &oc, tc.schedule = &sched;
  tc.n_generators = 1, tc.generator_names = gen_names, tc.generators = &gen;
  tc.steps = total_steps;
  tc.clip = 0; /* no clipping (the norm is still measured, and a non-finite one skips the step) */
  tc.eval_every = steps_per_epoch, tc.ckpt_every = steps_per_epoch, tc.keep = 2;
  tc.dir = opt.dir;
  tc.n_metrics = 1, tc.metrics = METRICS;
  tc.log_every = opt.log_every;
  lt_trainer_hooks hooks = {.user = &r, .micro_batch = micro_batch, .evaluate = evaluate_hook,
                            .get_position = get_position, .set_position = set_position,
                            .batches_per_epoch = bpe_hook};
  lt_trainer *trainer = lt_trainer_new(&tc, &hooks);
  if (!trainer) die("lt_trainer_new");
  if (opt.dir) {
    TRY(lt_trainer_make_dir(opt.dir));
    char path[4096];
    if (opt.resume) {
      TRY(lt_trainer_find_resume(opt.dir, "ckpt", path, sizeof path));
      TRY(lt_trainer_resume(trainer, path));
      printf("resumed from %s at step %lld\n", path, (long long)lt_trainer_step(trainer));
    } else {
      TRY(lt_trainer_clear_dir(opt.dir, "ckpt")); /* a new run starts over */
    }
  }
  TRY(lt_trainer_install_signal_handlers("cnn_fashion_mnist")); /* Ctrl-C: save and stop */
  lt_trainer_result res;
  if (lt_trainer_fit(trainer, &res) != LT_OK) die("training");
  if (res.end != LT_TRAINER_DONE) {
    printf("stopped at step %lld; saved %s\n", (long long)res.step, res.last_checkpoint[0] ? res.last_checkpoint : "nothing (no --dir)");
    return 128 + res.stop_reason;
  }

  double acc = r.test_acc; /* the trainer's final evaluation */
  printf("test accuracy %.4f after %lld steps (%.1f s of training)\n", acc, (long long)res.step, res.train_seconds);
  for (int c = 0; c < 10; c++) printf("  %-12s %.3f\n", lt_fashion_mnist_class_name(c), r.per_class[c]);
  if (res.csv_path[0]) printf("metrics: %s\n", res.csv_path);

  /* For scripts (tests/example_test.sh): mean loss of the first and the last
   * 20 steps of this process. */
  int64_t n = r.n_losses, k = n < 20 ? n : 20;
  double first = 0, last = 0;
  for (int64_t i = 0; i < k; i++) first += r.losses[i] / (double)k, last += r.losses[n - k + i] / (double)k;
  printf("summary: steps=%lld first_loss=%.4f last_loss=%.4f test_accuracy=%.4f train_seconds=%.1f\n",
         (long long)res.step, first, last, acc, res.train_seconds);

  lt_trainer_free(trainer);
  free(r.losses);
  lt_tensor_free(r.data.perm);
  lt_optimizer_free(optim);
  lt_params_free(params);
  lt_generator_free(gen);
  lt_tensor_free(train_x), lt_tensor_free(train_y), lt_tensor_free(test_x), lt_tensor_free(test_y);
  return 0;
}
