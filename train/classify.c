/*
 * train/classify.c: the run of a classifier on the library's trainer (see
 * train/classify.h): the examples' command line, the Fashion-MNIST data, the
 * trainer hooks (a batch's cross-entropy, the test accuracy, the loader's
 * position) and the run itself.
 *
 * What this is not: a second training loop. The step, the cadence, the
 * checkpoints and the CSV are train/trainer.c's; the batches are
 * lt_tensor_loader's (datasets/batch.c). This file only wires them.
 */
#include "train/classify.h"
#include "dist/dist.h"
#include "tensor/error_internal.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ======================================================================== */
/* Command line                                                             */
/* ======================================================================== */

void lt_classify_usage(const lt_classify_opts *o, FILE *f) {
  const char *p = o && o->program ? o->program : "classify";
  fprintf(f,
          "usage: %s [--data DIR] [--epochs N] [--batch B] [--max-steps N]\n"
          "       [--optim adamw|sgd] [--lr X] [--weight-decay X] [--seed S]\n"
          "       [--threads T] [--log-every K] [--dir DIR [--resume] [--stop-after N]]\n"
          "       [--precision f32|bf16] [--zero 0|1]\n"
          "  --data DIR       the four Fashion-MNIST *-ubyte.gz files (default %s)\n"
          "  --epochs N       passes over the training set (default %d)\n"
          "  --max-steps N    stop after N optimizer steps (a quick check; 0 = all epochs)\n"
          "  --optim          adamw (lr 1e-3, weight decay 0.01) or sgd (Nesterov momentum 0.9,\n"
          "                   lr 0.05, weight decay 5e-4) unless --lr / --weight-decay say otherwise\n"
          "  --seed S         initialisation and batch order (a run is reproducible from it)\n"
          "  --threads T      threads (default: LT_NUM_THREADS or all cores)\n"
          "  --dir DIR        run directory: a checkpoint every epoch (the 2 newest kept) and\n"
          "                   DIR/metrics.csv; Ctrl-C saves one; starts over unless --resume\n"
          "  --resume         continue from the newest checkpoint in --dir (under mpirun, with\n"
          "                   any number of ranks: the run's global batch is kept)\n"
          "  --stop-after N   stop after step N with a checkpoint in --dir, as Ctrl-C would\n"
          "  --precision P    f32 (default), or bf16: matrix products in bf16 with f32 accumulation\n"
          "                   (autocast; weights, gradients, optimizer state and checkpoints stay f32;\n"
          "                   give it again with --resume)\n"
          "  --zero 1         under mpirun: each rank keeps the optimizer state of 1/N of the\n"
          "                   parameters only (ZeRO-1; the same results and checkpoints)\n",
          p, LT_FASHION_MNIST_DIR, o ? o->epochs : 1);
  if (o && o->lr > 0) fprintf(f, "  --lr X           this program's default: %g (either optimizer)\n", o->lr);
}

/* v as an integer in [lo, hi] into *out; LT_ERR_INVALID naming the flag. */
static lt_status parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || x < lo || x > hi)
    return lt__err(LT_ERR_INVALID, "classify: %s '%s': want an integer in [%lld, %lld]", flag, v, (long long)lo,
                   (long long)hi);
  *out = x;
  return LT_OK;
}

static lt_status parse_num(const char *flag, const char *v, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !isfinite(x))
    return lt__err(LT_ERR_INVALID, "classify: %s '%s': want a finite number", flag, v);
  *out = x;
  return LT_OK;
}

/* The optimizer's settings: o's, or the defaults of its kind where o leaves
 * them unset (lr <= 0, weight decay < 0). */
static double opt_lr(const lt_classify_opts *o) { return o->lr > 0 ? o->lr : o->sgd ? 0.05 : 1e-3; }
static double opt_wd(const lt_classify_opts *o) {
  return o->weight_decay >= 0 ? o->weight_decay : o->sgd ? 5e-4 : 0.01;
}

lt_status lt_classify_parse_args(lt_classify_opts *o, int argc, char **argv) {
  if (!o || (argc > 0 && !argv)) return lt__err(LT_ERR_NULL, "classify_parse_args: opts and argv must not be NULL");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      o->help = true;
      return lt__err(LT_ERR_INVALID, "classify: --help");
    }
    if (!strcmp(a, "--resume")) {
      o->resume = true;
      continue;
    }
    static const char *const valued[] = {"--data", "--dir", "--epochs", "--batch", "--max-steps", "--log-every",
                                         "--threads", "--seed", "--lr", "--weight-decay", "--optim", "--stop-after",
                                         "--precision", "--zero"};
    bool known = false;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
    if (!known) return lt__err(LT_ERR_INVALID, "classify: unknown flag '%s'", a);
    if (!v) return lt__err(LT_ERR_INVALID, "classify: %s needs a value", a);
    i++;
    int64_t n = 0;
    lt_status s = LT_OK;
    if (!strcmp(a, "--data")) o->data = v;
    else if (!strcmp(a, "--dir")) o->dir = v;
    else if (!strcmp(a, "--epochs")) (s = parse_int(a, v, 1, 1000000, &n)) == LT_OK ? (void)(o->epochs = (int)n) : (void)0;
    else if (!strcmp(a, "--batch")) s = parse_int(a, v, 1, (int64_t)1 << 30, &o->batch);
    else if (!strcmp(a, "--max-steps")) s = parse_int(a, v, 0, (int64_t)1 << 40, &o->max_steps);
    else if (!strcmp(a, "--stop-after")) s = parse_int(a, v, 0, (int64_t)1 << 40, &o->stop_after);
    else if (!strcmp(a, "--zero")) (s = parse_int(a, v, 0, 1, &n)) == LT_OK ? (void)(o->zero = (int)n) : (void)0;
    else if (!strcmp(a, "--log-every")) (s = parse_int(a, v, 1, 1 << 30, &n)) == LT_OK ? (void)(o->log_every = (int)n) : (void)0;
    else if (!strcmp(a, "--threads")) (s = parse_int(a, v, 0, 4096, &n)) == LT_OK ? (void)(o->threads = (int)n) : (void)0;
    else if (!strcmp(a, "--seed")) (s = parse_int(a, v, 0, INT64_MAX, &n)) == LT_OK ? (void)(o->seed = (uint64_t)n) : (void)0;
    else if (!strcmp(a, "--lr")) {
      if ((s = parse_num(a, v, &o->lr)) == LT_OK && o->lr <= 0) s = lt__err(LT_ERR_INVALID, "classify: --lr %s: must be > 0", v);
    } else if (!strcmp(a, "--weight-decay")) {
      if ((s = parse_num(a, v, &o->weight_decay)) == LT_OK && o->weight_decay < 0)
        s = lt__err(LT_ERR_INVALID, "classify: --weight-decay %s: must be >= 0", v);
    } else if (!strcmp(a, "--optim")) {
      if (strcmp(v, "sgd") && strcmp(v, "adamw")) return lt__err(LT_ERR_INVALID, "classify: --optim '%s': adamw or sgd", v);
      o->sgd = !strcmp(v, "sgd");
    } else if (!strcmp(a, "--precision")) {
      if (strcmp(v, "f32") && strcmp(v, "bf16")) return lt__err(LT_ERR_INVALID, "classify: --precision '%s': f32 or bf16", v);
      o->bf16 = !strcmp(v, "bf16");
    }
    if (s != LT_OK) return s;
  }
  if (o->resume && !o->dir) return lt__err(LT_ERR_INVALID, "classify: --resume needs --dir");
  if (o->stop_after && !o->dir) return lt__err(LT_ERR_INVALID, "classify: --stop-after needs --dir");
  o->lr = opt_lr(o), o->weight_decay = opt_wd(o);
  return LT_OK;
}

/* ======================================================================== */
/* Data                                                                     */
/* ======================================================================== */

void lt_classify_data_free(lt_classify_data *d) {
  if (!d) return;
  lt_tensor_free(d->train_x), lt_tensor_free(d->train_y), lt_tensor_free(d->test_x), lt_tensor_free(d->test_y);
  *d = (lt_classify_data){0};
}

lt_status lt_classify_load_fashion_mnist(const char *dir, lt_classify_data *d) {
  if (!dir || !d) return lt__err(LT_ERR_NULL, "classify_load_fashion_mnist: dir and d must not be NULL");
  *d = (lt_classify_data){0};
  lt_mnist_opts mo = {.normalize = true, .mean = LT_FASHION_MNIST_MEAN, .std = LT_FASHION_MNIST_STD};
  lt_status s = lt_mnist_load(dir, LT_DATASET_TRAIN, &mo, &d->train_x, &d->train_y);
  if (s == LT_OK) s = lt_mnist_load(dir, LT_DATASET_TEST, &mo, &d->test_x, &d->test_y);
  if (s == LT_OK) { /* out of an open scope, if any: the caller owns them */
    lt_tensor_keep(d->train_x), lt_tensor_keep(d->train_y), lt_tensor_keep(d->test_x), lt_tensor_keep(d->test_y);
    return LT_OK;
  }
  lt_classify_data_free(d);
  return s;
}

/* ======================================================================== */
/* Evaluation                                                               */
/* ======================================================================== */

lt_status lt_classify_evaluate(const lt_classifier *m, const lt_tensor *x, const lt_tensor *y, int64_t batch,
                               int64_t n_classes, double *accuracy, double *per_class) {
  const char *op = "classify_evaluate";
  if (!m || !m->forward || !x || !y || !accuracy) return lt__err(LT_ERR_NULL, "%s: m, its forward, x, y and accuracy must not be NULL", op);
  if (x->ndim < 1 || y->ndim != 1 || x->shape[0] != y->shape[0])
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, y is %s: need x [N, ...] and y [N]", op, LT__D(x), LT__D(y));
  if (batch < 1 || n_classes < 0) return lt__err(LT_ERR_INVALID, "%s: batch %lld, n_classes %lld", op, (long long)batch, (long long)n_classes);
  const int64_t N = x->shape[0];
  int64_t *hit = calloc((size_t)n_classes + 1, sizeof *hit), *total = calloc((size_t)n_classes + 1, sizeof *total);
  int64_t *pred = malloc((size_t)batch * sizeof *pred), *lab = malloc((size_t)batch * sizeof *lab);
  lt_status s = hit && total && pred && lab ? LT_OK : lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  bool grad = lt_set_grad_enabled(false), training = lt_params_training(m->params);
  if (m->params) lt_params_train(m->params, false);
  int64_t correct = 0;
  for (int64_t b = 0; s == LT_OK && b < N; b += batch) {
    int64_t nb = N - b < batch ? N - b : batch;
    lt_scope *sc = lt_scope_begin();
    lt_tensor *xb = lt_narrow(x, 0, b, nb), *yb = lt_narrow(y, 0, b, nb); /* views: no copy */
    lt_tensor *logits = xb ? m->forward(m->model, xb) : NULL;
    if (logits && (logits->ndim != 2 || logits->shape[0] != nb))
      s = lt__err(LT_ERR_SHAPE, "%s: the model gave %s for %lld rows: want [%lld, K]", op, LT__D(logits), (long long)nb,
                  (long long)nb);
    lt_tensor *p = s == LT_OK && logits ? lt_argmax(logits, 1, false) : NULL; /* [nb] i64 */
    if (s == LT_OK && (!p || !yb)) s = lt_last_status();
    if (s == LT_OK) s = lt_tensor_read(p, LT_DTYPE_I64, pred, nb);
    if (s == LT_OK) s = lt_tensor_read(yb, LT_DTYPE_I64, lab, nb);
    for (int64_t i = 0; s == LT_OK && i < nb; i++) {
      bool ok = pred[i] == lab[i];
      correct += ok;
      if (lab[i] >= 0 && lab[i] < n_classes) hit[lab[i]] += ok, total[lab[i]]++;
    }
    lt_scope_end(sc);
  }
  if (m->params) lt_params_train(m->params, training);
  lt_set_grad_enabled(grad);
  if (s == LT_OK) {
    *accuracy = N ? (double)correct / (double)N : 0;
    for (int64_t c = 0; per_class && c < n_classes; c++) per_class[c] = total[c] ? (double)hit[c] / (double)total[c] : 0;
  }
  free(hit), free(total), free(pred), free(lab);
  return s;
}

/* ======================================================================== */
/* The trainer hooks                                                        */
/* ======================================================================== */

typedef struct run {
  const lt_classifier *m;
  const lt_classify_data *d;
  const lt_classify_opts *o;
  lt_tensor_loader *loader;
  float *losses; /* per step of this process, for the summary */
  int64_t n_losses, cap_losses;
  int64_t n_classes;
  double test_acc, per_class[LT_CLASSIFY_MAX_CLASSES];
  double eval_seconds; /* wall time of the newest evaluation */
  int64_t global_batch; /* rows of a batch over all ranks (saved: a resume on another N keeps it) */
} run;

#define KEY_GLOBAL_BATCH "classify.global_batch"

static lt_status save_extra(void *user, lt_ckpt_meta *extra) {
  return lt_ckpt_meta_set_int(extra, KEY_GLOBAL_BATCH, ((run *)user)->global_batch);
}

/* The global batch of the run that wrote the checkpoint path: its
 * classify.global_batch, or (older files) batch x its dist.ranks, or
 * *global unchanged if it has neither. Reads only the extra values. */
static lt_status saved_global_batch(const char *path, int64_t batch, int64_t *global) {
  lt_params *empty = lt_params_new();
  if (!empty) return lt_last_status();
  lt_train_state st = {.params = empty};
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true; /* the extra values only */
  lt_ckpt_info *info = NULL;
  lt_status s = lt_ckpt_load_training(path, &st, &lo, &info);
  int64_t v = 0;
  if (s == LT_OK && lt_ckpt_meta_kind(info->extra, KEY_GLOBAL_BATCH) >= 0) {
    s = lt_ckpt_meta_get_int(info->extra, KEY_GLOBAL_BATCH, &v);
  } else if (s == LT_OK && lt_ckpt_meta_kind(info->extra, LT_TRAINER_KEY_RANKS) >= 0) {
    s = lt_ckpt_meta_get_int(info->extra, LT_TRAINER_KEY_RANKS, &v);
    if (s == LT_OK && (v < 1 || __builtin_mul_overflow(v, batch, &v))) v = -1;
  } else if (s == LT_OK) {
    v = *global;
  }
  if (s == LT_OK && v < 1)
    s = lt__err(LT_ERR_FORMAT, "classify: checkpoint '%s': its global batch (%s) is not a batch size", path,
                KEY_GLOBAL_BATCH);
  if (s == LT_OK) *global = v;
  lt_ckpt_info_free(info);
  lt_params_free(empty);
  return s;
}

/* One mini-batch: forward in training mode and the mean cross-entropy. The
 * trainer does the backward pass, the optimizer step and the learning rate. */
static lt_status micro_batch(void *user, lt_trainer_micro *mb) {
  run *r = user;
  lt_tensor *xb = NULL, *yb = NULL;
  if (lt_tensor_loader_next(r->loader, &xb, &yb) != LT_OK) return lt_last_status();
  if (lt_dist_size() > 1) { /* under mpirun: this rank's rows of the global batch */
    int64_t b0, nb;
    lt_dist_shard(xb->shape[0], &b0, &nb);
    if (nb == 0)
      return lt__err(LT_ERR_INVALID, "classify: a batch of %lld rows leaves none for rank %d of %d (the epoch's last, "
                     "short batch?): use a --batch that divides the training set", (long long)xb->shape[0],
                     lt_dist_rank(), lt_dist_size());
    xb = lt_narrow(xb, 0, b0, nb), yb = lt_narrow(yb, 0, b0, nb);
    if (!xb || !yb) return lt_last_status();
  }
  mb->tokens = xb->shape[0]; /* examples, for examples/s (the trainer sums the ranks') */
  if (!mb->forward) return LT_OK;
  lt_cross_entropy_opts ce = LT_CROSS_ENTROPY_DEFAULTS;
  lt_tensor *logits = r->m->forward(r->m->model, xb);
  if (logits && logits->ndim == 2 && !r->n_classes)
    r->n_classes = logits->shape[1] < LT_CLASSIFY_MAX_CLASSES ? logits->shape[1] : LT_CLASSIFY_MAX_CLASSES;
  mb->loss = lt_cross_entropy(logits, yb, &ce); /* [] mean over the batch */
  mb->weight = 1.0 / (double)mb->accum;
  double l;
  if (!mb->loss || lt_item(mb->loss, &l) != LT_OK) return lt_last_status();
  if (r->n_losses < r->cap_losses) r->losses[r->n_losses++] = (float)l;
  return LT_OK;
}

static const lt_trainer_metric METRICS[] = {{"test_accuracy", "%.4f"}};

static lt_status evaluate_hook(void *user, lt_trainer_eval *ev) {
  run *r = user;
  const double t0 = lt_monotonic_seconds();
  lt_status s = lt_classify_evaluate(r->m, r->d->test_x, r->d->test_y, r->o->eval_batch, r->n_classes, &r->test_acc,
                                     r->per_class);
  r->eval_seconds = lt_monotonic_seconds() - t0;
  ev->values[0] = r->test_acc;
  return s;
}

static lt_loader_position get_position(void *user) { return lt_tensor_loader_get_position(((run *)user)->loader); }
static lt_status set_position(void *user, lt_loader_position pos) {
  return lt_tensor_loader_set_position(((run *)user)->loader, pos);
}
static int64_t bpe_hook(void *user) { return lt_tensor_loader_batches_per_epoch(((run *)user)->loader); }

/* ======================================================================== */
/* The run                                                                  */
/* ======================================================================== */

lt_status lt_classify_fit(const lt_classifier *m, const lt_classify_data *d, const lt_classify_opts *o, FILE *out,
                          lt_classify_result *res) {
  const char *op = "classify_fit";
  if (res) *res = (lt_classify_result){.end = LT_TRAINER_FAILED, .test_accuracy = NAN};
  if (!m || !m->forward || !m->params || !d || !d->train_x || !d->train_y || !d->test_x || !d->test_y || !o)
    return lt__err(LT_ERR_NULL, "%s: the model (forward, params), the four data tensors and opts must not be NULL", op);
  if (o->epochs < 1 || o->batch < 1 || o->eval_batch < 1 || o->max_steps < 0 || o->log_every < 1)
    return lt__err(LT_ERR_INVALID, "%s: epochs %d, batch %lld, eval_batch %lld, log_every %d must be >= 1, max_steps >= 0",
                   op, o->epochs, (long long)o->batch, (long long)o->eval_batch, o->log_every);
  if (!out) out = stdout;
  FILE *quiet = NULL; /* under mpirun, rank 0 alone prints */
  if (lt_dist_rank() != 0 && !(out = quiet = fopen("/dev/null", "w")))
    return lt__err(LT_ERR_IO, "%s: rank %d: cannot open /dev/null for its output", op, lt_dist_rank());
  if (o->threads > 0 && lt_set_num_threads(o->threads) != LT_OK) {
    if (quiet) fclose(quiet);
    return lt_last_status();
  }
  lt_runtime_info info;
  if (lt_runtime_get_info(&info) != LT_OK) {
    if (quiet) fclose(quiet);
    return lt_last_status();
  }
  fprintf(out, "libtensor %s, threads %d, BLIS kernels %s\n", info.version, info.num_threads, info.blas_arch);
  if (o->bf16)
    fprintf(out, "precision: bf16 (autocast), bf16 products: %s; convolutions: %s\n", info.bf16_gemm, info.bf16_conv);
  fprintf(out, "data: %lld training and %lld test examples from %s\n", (long long)d->train_x->shape[0],
          (long long)d->test_x->shape[0], o->data ? o->data : "memory");
  fprintf(out, "model: %s\n", m->name ? m->name : "classifier");
  if (lt_params_summary(m->params, out) != LT_OK) {
    if (quiet) fclose(quiet);
    return lt_last_status();
  }

  run r = {.m = m, .d = d, .o = o};
  /* Under mpirun every rank draws the global batch of N x --batch (the same
   * order from the same seed) and keeps its slice (docs/distributed.md). A
   * resumed run keeps the checkpoint's global batch, whatever N is now. */
  char path[4096] = "";
  int64_t batch = o->batch, global;
  lt_status s = LT_OK;
  if (__builtin_mul_overflow(o->batch, (int64_t)lt_dist_size(), &global))
    s = lt__err(LT_ERR_OVERFLOW, "%s: batch %lld x %d ranks overflows", op, (long long)o->batch, lt_dist_size());
  if (s == LT_OK && o->dir && o->resume) {
    int64_t saved = global;
    if ((s = lt_trainer_find_resume(o->dir, "ckpt", path, sizeof path)) == LT_OK)
      s = saved_global_batch(path, o->batch, &saved);
    if (s == LT_OK && saved != global) {
      if (saved % lt_dist_size() != 0)
        s = lt__err(LT_ERR_INVALID, "%s: the run in '%s' has a global batch of %lld, which %d ranks cannot share "
                    "equally: resume with a number of ranks that divides it", op, path, (long long)saved, lt_dist_size());
      else
        fprintf(out, "resuming a run of a global batch of %lld on %d rank%s: batch %lld -> %lld per rank\n",
                (long long)saved, lt_dist_size(), lt_dist_size() > 1 ? "s" : "", (long long)o->batch,
                (long long)(saved / lt_dist_size()));
      global = saved, batch = saved / lt_dist_size();
    }
  }
  if (s != LT_OK) {
    if (quiet) fclose(quiet);
    return s;
  }
  r.global_batch = global;
  lt_batch_opts bo = LT_BATCH_DEFAULTS(global);
  if (lt_dist_size() > 1)
    fprintf(out, "data parallel: %d ranks x batch %lld = a global batch of %lld\n", lt_dist_size(),
            (long long)batch, (long long)global);
  bo.seed = o->seed;
  lt_optimizer *optim = NULL;
  lt_trainer *trainer = NULL;
  r.loader = lt_tensor_loader_new(d->train_x, d->train_y, &bo);
  if (!r.loader) {
    if (quiet) fclose(quiet);
    return lt_last_status();
  }

  /* The optimizer and the schedule: linear warmup, then cosine decay to 1%
   * of the base rate at the last step. */
  const int64_t steps_per_epoch = lt_tensor_loader_batches_per_epoch(r.loader);
  int64_t total = steps_per_epoch * o->epochs;
  if (o->max_steps > 0 && o->max_steps < total) total = o->max_steps;
  lt_optim_config oc = lt_optim_defaults(o->sgd ? LT_OPTIM_SGD : LT_OPTIM_ADAMW);
  oc.lr = opt_lr(o);
  oc.weight_decay = opt_wd(o);
  if (o->sgd) oc.momentum = 0.9, oc.nesterov = true;
  lt_schedule sched = {.kind = LT_SCHED_WARMUP_COSINE, .base_lr = oc.lr, .min_lr = oc.lr * 0.01,
                       .warmup = total / 50, .total = total};
  fprintf(out, "training: %s lr %g weight decay %g, batch %lld, %lld steps (%lld per epoch)\n",
          o->sgd ? "SGD (Nesterov momentum 0.9)" : "AdamW", oc.lr, oc.weight_decay, (long long)batch,
          (long long)total, (long long)steps_per_epoch);
  r.cap_losses = total;
  r.losses = calloc((size_t)total, sizeof *r.losses);
  if (!r.losses) {
    s = lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld losses", op, (long long)total);
    goto done;
  }
  optim = lt_optimizer_new(m->params, &oc);
  if (!optim) goto fail;

  lt_trainer_config tc = LT_TRAINER_DEFAULTS;
  tc.params = m->params, tc.optim = optim, tc.optim_config = &oc, tc.schedule = &sched;
  tc.steps = total;
  tc.clip = 0; /* no clipping (the norm is still measured, and a non-finite one skips the step) */
  tc.eval_every = steps_per_epoch, tc.ckpt_every = steps_per_epoch, tc.keep = 2;
  tc.dir = o->dir;
  tc.n_metrics = 1, tc.metrics = METRICS;
  tc.log_every = o->log_every;
  tc.stop_after = o->stop_after;
  tc.zero = o->zero;
  tc.out = out;
  lt_trainer_hooks hooks = {.user = &r, .micro_batch = micro_batch, .evaluate = evaluate_hook,
                            .save_extra = save_extra, .get_position = get_position, .set_position = set_position,
                            .batches_per_epoch = bpe_hook};
  trainer = lt_trainer_new(&tc, &hooks);
  if (!trainer) goto fail;
  if (o->dir) {
    if (lt_trainer_make_dir(o->dir) != LT_OK) goto fail;
    if (o->resume) {
      if (lt_trainer_resume(trainer, path) != LT_OK) goto fail;
      fprintf(out, "resumed from %s at step %lld\n", path, (long long)lt_trainer_step(trainer));
    } else if (lt_trainer_clear_dir(o->dir, "ckpt") != LT_OK) { /* a new run starts over */
      goto fail;
    }
  }
  if (lt_trainer_install_signal_handlers(o->program) != LT_OK) goto fail; /* Ctrl-C: save and stop */
  lt_trainer_result tr;
  const lt_dtype prev_autocast = o->bf16 ? lt_set_autocast(LT_DTYPE_BF16) : LT_DTYPE_F32;
  s = lt_trainer_fit(trainer, &tr);
  if (o->bf16) lt_set_autocast(prev_autocast);
  if (res) res->end = tr.end, res->stop_reason = tr.stop_reason, res->steps = tr.step, res->train_seconds = tr.train_seconds;
  if (s != LT_OK) goto done;
  if (tr.end != LT_TRAINER_DONE) {
    fprintf(out, "stopped at step %lld; saved %s\n", (long long)tr.step,
            tr.last_checkpoint[0] ? tr.last_checkpoint : "nothing (no --dir)");
    goto done;
  }
  /* The trainer's final evaluation. */
  fprintf(out, "test accuracy %.4f after %lld steps (%.1f s of training)\n", r.test_acc, (long long)tr.step,
          tr.train_seconds);
  for (int64_t c = 0; c < r.n_classes; c++) {
    if (o->class_name) fprintf(out, "  %-12s %.3f\n", o->class_name(c), r.per_class[c]);
    else fprintf(out, "  class %-6lld %.3f\n", (long long)c, r.per_class[c]);
  }
  if (tr.csv_path[0]) fprintf(out, "metrics: %s\n", tr.csv_path);
  /* For scripts (tests/example_test.sh): mean loss of the first and the last
   * 20 steps of this process. */
  int64_t n = r.n_losses, k = n < 20 ? n : 20;
  double first = 0, last = 0;
  for (int64_t i = 0; i < k; i++) first += r.losses[i] / (double)k, last += r.losses[n - k + i] / (double)k;
  fprintf(out, "summary: steps=%lld first_loss=%.4f last_loss=%.4f test_accuracy=%.4f train_seconds=%.1f "
          "eval_seconds=%.2f\n", (long long)tr.step, first, last, r.test_acc, tr.train_seconds, r.eval_seconds);
  if (res) {
    res->test_accuracy = r.test_acc, res->first_loss = first, res->last_loss = last, res->n_classes = r.n_classes;
    res->eval_seconds = r.eval_seconds;
    memcpy(res->per_class, r.per_class, sizeof r.per_class);
  }
  goto done;
fail:
  s = lt_last_status();
done:
  lt_trainer_free(trainer);
  lt_optimizer_free(optim);
  free(r.losses);
  lt_tensor_loader_free(r.loader);
  if (quiet) fclose(quiet);
  return s;
}

/* The failure line of lt_classify_main; returns its exit code, 1. */
static int main_failed(const lt_classify_opts *o, const char *what) {
  fprintf(stderr, "%s: %s failed: %s: %s\n", o->program, what, lt_status_name(lt_last_status()), lt_last_error());
  return 1;
}

int lt_classify_main(int argc, char **argv, lt_classify_opts *o, const lt_classify_model *m) {
  if (lt_dist_init(&argc, &argv) != LT_OK) return main_failed(o, "lt_dist_init");
  if (lt_classify_parse_args(o, argc, argv) != LT_OK) {
    if (!o->help) fprintf(stderr, "%s: %s\n", o->program, lt_last_error());
    lt_classify_usage(o, o->help ? stdout : stderr);
    return o->help ? 0 : 2;
  }
  signal(SIGXFSZ, SIG_IGN); /* a file over the size limit is a write error, not a kill */
  lt_classify_data data;
  if (lt_classify_load_fashion_mnist(o->data, &data) != LT_OK) {
    fprintf(stderr, "%s: %s\n(install Debian's dataset-fashion-mnist package or pass --data DIR)\n", o->program,
            lt_last_error());
    return 1;
  }
  lt_generator *gen = lt_generator_new(o->seed); /* initialisation; the loader shuffles from its own */
  lt_params *params = lt_params_new();
  int code = 0;
  lt_classify_result res;
  if (!gen || !params) {
    code = main_failed(o, "setup");
  } else if (m->init(m->model, params, gen) != LT_OK) {
    code = main_failed(o, "the model's initialisation");
  } else {
    const lt_classifier clf = {.model = m->model, .forward = m->forward, .params = params, .name = m->name};
    if (lt_classify_fit(&clf, &data, o, stdout, &res) != LT_OK) code = main_failed(o, "training");
    else if (res.end != LT_TRAINER_DONE && res.end != LT_TRAINER_STOPPED) code = 128 + res.stop_reason; /* STOPPED: --stop-after */
  }
  lt_params_free(params);
  lt_generator_free(gen);
  lt_classify_data_free(&data);
  if (code == 0) lt_dist_finalize(); /* after a signal, mpirun is ending the job: leave without */
  return code;
}
