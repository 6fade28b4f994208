/*
 * tests/test_classify.c: the run of a classifier that the Fashion-MNIST
 * examples share (train/classify.h) and its loader (lt_tensor_loader,
 * datasets/datasets.h), on synthetic data (no dataset file needed):
 *   - the loader returns every row once per epoch, x and y rows together, in
 *     a new order each epoch, a short last batch; a restored position gives
 *     the same next batches; a wrong fingerprint and bad shapes are refused;
 *   - the command line: defaults, every flag, the optimizer's default lr,
 *     bad values and --help;
 *   - evaluation: a fixed linear model with a known accuracy and per-class
 *     accuracies, run in evaluation mode (the mode is restored);
 *   - a short run (linear model on 3 separable classes) learns: the loss
 *     falls and the test accuracy is high; with a directory it writes the
 *     CSV and a checkpoint, and --resume continues to the same end;
 *   - under --precision bf16 (autocast) a run stopped half way (a stop
 *     request in the middle of an epoch, as Ctrl-C) and resumed in a new
 *     model, on another thread count, ends with the same losses and
 *     parameters, bit for bit, as the straight run, and both differ from the
 *     f32 run (autocast applied); the caller's mode is restored.
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "autograd/autograd.h"
#include "train/classify.h"

/* x [n, 2] f32 with x[i] = (i, -i), y [n] i64 with y[i] = i % 3. */
static void rows(int64_t n, lt_tensor **x, lt_tensor **y) {
  *x = LT_NN(lt_empty(LT_DTYPE_F32, 2, (int64_t[]){n, 2}));
  *y = LT_NN(lt_empty(LT_DTYPE_I64, 1, (int64_t[]){n}));
  float *xd = (*x)->data;
  int64_t *yd = (*y)->data;
  for (int64_t i = 0; i < n; i++) xd[2 * i] = (float)i, xd[2 * i + 1] = (float)-i, yd[i] = i % 3;
}

START_TEST(test_loader_epochs_and_resume) {
  lt_tensor *x, *y;
  rows(10, &x, &y);
  lt_batch_opts o = LT_BATCH_DEFAULTS(4);
  o.seed = 7;
  lt_tensor_loader *L = LT_NNP(lt_tensor_loader_new(x, y, &o));
  ck_assert_int_eq(lt_tensor_loader_batches_per_epoch(L), 3);
  int64_t order[2][10];
  lt_loader_position mid = {0};
  for (int e = 0; e < 2; e++) {
    int seen[10] = {0}, k = 0;
    for (int b = 0; b < 3; b++) {
      if (e == 1 && b == 1) mid = lt_tensor_loader_get_position(L);
      lt_tensor *xb, *yb;
      LT_OK_OR_FAIL(lt_tensor_loader_next(L, &xb, &yb));
      ck_assert_int_eq(xb->shape[0], b < 2 ? 4 : 2); /* a short last batch */
      ck_assert_int_eq(xb->shape[1], 2);
      const float *xd = xb->data;
      const int64_t *yd = yb->data;
      for (int64_t i = 0; i < xb->shape[0]; i++) {
        int64_t r = (int64_t)xd[2 * i];
        ck_assert_float_eq(xd[2 * i + 1], (float)-r); /* whole rows */
        ck_assert_int_eq(yd[i], r % 3);                /* x and y together */
        seen[r]++, order[e][k++] = r;
      }
      lt_tensor_free(xb), lt_tensor_free(yb);
    }
    for (int i = 0; i < 10; i++) ck_assert_int_eq(seen[i], 1); /* every row once */
  }
  ck_assert(memcmp(order[0], order[1], sizeof order[0]) != 0); /* reshuffled */
  /* Restore the position before epoch 1's second batch: the same rows again. */
  LT_OK_OR_FAIL(lt_tensor_loader_set_position(L, mid));
  for (int b = 1; b < 3; b++) {
    lt_tensor *xb, *yb;
    LT_OK_OR_FAIL(lt_tensor_loader_next(L, &xb, &yb));
    const float *xd = xb->data;
    for (int64_t i = 0; i < xb->shape[0]; i++) ck_assert_int_eq((int64_t)xd[2 * i], order[1][4 * b + i]);
    lt_tensor_free(xb), lt_tensor_free(yb);
  }
  lt_loader_position bad = mid;
  bad.fingerprint ^= 1;
  LT_EXPECT_ERR(lt_tensor_loader_set_position(L, bad), LT_ERR_STATE, "fingerprint");
  lt_tensor_loader_free(L);
  lt_tensor_loader_free(NULL);
  lt_tensor *y9 = LT_NN(lt_narrow(y, 0, 0, 9));
  LT_EXPECT_NULLP_ERR(lt_tensor_loader_new(x, y9, &o), LT_ERR_SHAPE, "same first dim");
  LT_EXPECT_NULLP_ERR(lt_tensor_loader_new(x, NULL, &o), LT_ERR_NULL, "NULL");
  LT_FREE_ALL(y9, x, y);
}
END_TEST

START_TEST(test_parse_args) {
  lt_classify_opts o = LT_CLASSIFY_DEFAULTS("prog", 3);
  char *none[] = {"prog"};
  LT_OK_OR_FAIL(lt_classify_parse_args(&o, 1, none));
  ck_assert_int_eq(o.epochs, 3);
  ck_assert_int_eq(o.batch, 128);
  ck_assert(o.lr == 1e-3 && o.weight_decay == 0.01 && !o.sgd && !o.bf16);
  o = LT_CLASSIFY_DEFAULTS("prog", 3);
  char *all[] = {"prog", "--data", "d", "--epochs", "5", "--batch", "64", "--max-steps", "9", "--optim", "sgd",
                 "--seed", "11", "--threads", "1", "--log-every", "3", "--dir", "run", "--resume", "--precision", "bf16"};
  LT_OK_OR_FAIL(lt_classify_parse_args(&o, 22, all));
  ck_assert(o.bf16);
  ck_assert_str_eq(o.data, "d");
  ck_assert_str_eq(o.dir, "run");
  ck_assert(o.epochs == 5 && o.batch == 64 && o.max_steps == 9 && o.sgd && o.seed == 11 && o.threads == 1 &&
            o.log_every == 3 && o.resume);
  ck_assert(o.lr == 0.05 && o.weight_decay == 5e-4); /* SGD's defaults */
  o = LT_CLASSIFY_DEFAULTS("prog", 3);
  char *lr[] = {"prog", "--lr", "0.01", "--weight-decay", "0"};
  LT_OK_OR_FAIL(lt_classify_parse_args(&o, 5, lr));
  ck_assert(o.lr == 0.01 && o.weight_decay == 0);
  struct {
    int argc;
    char *argv[3];
    const char *msg;
  } bad[] = {{3, {"prog", "--epochs", "0"}, "--epochs '0'"},
             {3, {"prog", "--batch", "x"}, "--batch 'x'"},
             {3, {"prog", "--lr", "-1"}, "--lr"},
             {3, {"prog", "--optim", "adam"}, "adamw or sgd"},
             {3, {"prog", "--precision", "f16"}, "--precision 'f16': f32 or bf16"},
             {2, {"prog", "--epochs"}, "needs a value"},
             {3, {"prog", "--nope", "1"}, "unknown flag '--nope'"},
             {2, {"prog", "--nope"}, "unknown flag '--nope'"},
             {2, {"prog", "--resume"}, "--resume needs --dir"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o = LT_CLASSIFY_DEFAULTS("prog", 3);
    LT_EXPECT_ERR(lt_classify_parse_args(&o, bad[i].argc, bad[i].argv), LT_ERR_INVALID, bad[i].msg);
    ck_assert(!o.help);
  }
  o = LT_CLASSIFY_DEFAULTS("prog", 3);
  char *help[] = {"prog", "--help"};
  ck_assert_int_eq(lt_classify_parse_args(&o, 2, help), LT_ERR_INVALID);
  ck_assert(o.help);
}
END_TEST

/* ---- a linear classifier ------------------------------------------------------ */

typedef struct lin {
  lt_linear_m fc;
  lt_params *params;
  int calls_training, calls_eval; /* forwards seen in each mode */
} lin;

static lt_tensor *lin_forward(void *m, const lt_tensor *x) {
  lin *l = m;
  lt_params_training(l->params) ? l->calls_training++ : l->calls_eval++;
  return lt_linear_forward(&l->fc, x);
}

/* Three separable classes in 2-d: class k around (cos, sin)(2 pi k / 3) * 3. */
static void blobs(int64_t n, uint64_t seed, lt_tensor **x, lt_tensor **y) {
  lt_generator *g = LT_NNP(lt_generator_new(seed));
  lt_tensor *noise = LT_NN(lt_randn(g, LT_DTYPE_F32, 2, (int64_t[]){n, 2}));
  lt_tensor_keep(noise);
  *x = LT_NN(lt_empty(LT_DTYPE_F32, 2, (int64_t[]){n, 2}));
  *y = LT_NN(lt_empty(LT_DTYPE_I64, 1, (int64_t[]){n}));
  float *xd = (*x)->data;
  const float *nd = noise->data;
  int64_t *yd = (*y)->data;
  for (int64_t i = 0; i < n; i++) {
    int64_t k = i % 3;
    double a = 2 * M_PI * (double)k / 3;
    xd[2 * i] = (float)(3 * cos(a) + 0.5 * nd[2 * i]), xd[2 * i + 1] = (float)(3 * sin(a) + 0.5 * nd[2 * i + 1]);
    yd[i] = k;
  }
  lt_tensor_free(noise);
  lt_generator_free(g);
}

START_TEST(test_evaluate) {
  lin m = {.params = LT_NNP(lt_params_new())};
  lt_generator *g = LT_NNP(lt_generator_new(1));
  LT_OK_OR_FAIL(lt_linear_init(&m.fc, m.params, "fc", 2, 3, false, g));
  /* Logits = x * W^T with W = [[1,0],[0,1],[0,0]]: predicts 0 when x0 > x1, else 1. */
  float *w = m.fc.weight->data;
  const float W[6] = {1, 0, 0, 1, 0, 0};
  memcpy(w, W, sizeof W);
  lt_tensor *x = LT_NN(lt_test_from_f64(LT_DTYPE_F32, 2, (int64_t[]){5, 2}, (double[]){2, 1, 0, 1, 3, 0, 1, 5, 4, 0}));
  lt_tensor *y = LT_NN(lt_test_from_i64(LT_DTYPE_I64, 1, (int64_t[]){5}, (int64_t[]){0, 1, 2, 0, 0}));
  /* predictions 0, 1, 0, 1, 0: right on rows 0, 1, 4. */
  lt_classifier c = {.model = &m, .forward = lin_forward, .params = m.params, .name = "linear"};
  double acc = -1, per[3] = {-1, -1, -1};
  LT_OK_OR_FAIL(lt_classify_evaluate(&c, x, y, 2, 3, &acc, per)); /* batches of 2, 2, 1 */
  ck_assert_double_eq_tol(acc, 3.0 / 5, 1e-12);
  ck_assert_double_eq_tol(per[0], 2.0 / 3, 1e-12);
  ck_assert_double_eq_tol(per[1], 1.0, 1e-12);
  ck_assert_double_eq_tol(per[2], 0.0, 1e-12);
  ck_assert_int_eq(m.calls_eval, 3);
  ck_assert_int_eq(m.calls_training, 0);
  ck_assert(lt_params_training(m.params)); /* restored */
  ck_assert(lt_grad_enabled());
  lt_tensor *y4 = LT_NN(lt_narrow(y, 0, 0, 4));
  LT_EXPECT_ERR(lt_classify_evaluate(&c, x, y4, 2, 3, &acc, NULL), LT_ERR_SHAPE, "y [N]");
  LT_FREE_ALL(y4, x, y);
  lt_params_free(m.params);
  lt_generator_free(g);
}
END_TEST

static char tmpdir[256];

/* The runs' data (600 training and 300 test points of blobs) and a new tmpdir. */
static void fit_begin(lt_classify_data *d) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_classify_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  blobs(600, 3, &d->train_x, &d->train_y);
  blobs(300, 4, &d->test_x, &d->test_y);
}

static void fit_end(lt_classify_data *d) {
  lt_classify_data_free(d);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_fit_learns_and_resumes) {
  lt_classify_data d;
  fit_begin(&d);
  double acc[2];
  for (int resume = 0; resume < 2; resume++) {
    lin m = {.params = LT_NNP(lt_params_new())};
    lt_generator *g = LT_NNP(lt_generator_new(5));
    LT_OK_OR_FAIL(lt_linear_init(&m.fc, m.params, "fc", 2, 3, true, g));
    lt_classify_opts o = LT_CLASSIFY_DEFAULTS("test_classify", 2);
    o.batch = 32, o.lr = 0.05, o.log_every = 1000, o.class_name = NULL, o.data = NULL;
    o.dir = lt_test_join(tmpdir, "run");
    o.resume = resume;
    if (resume) o.epochs = 3; /* one more epoch from the 2-epoch checkpoint */
    lt_classifier c = {.model = &m, .forward = lin_forward, .params = m.params, .name = "linear 2-3"};
    lt_classify_result r;
    FILE *out = tmpfile();
    LT_OK_OR_FAIL(lt_classify_fit(&c, &d, &o, out, &r));
    fclose(out);
    ck_assert_int_eq(r.end, LT_TRAINER_DONE);
    ck_assert_int_eq(r.steps, 19 * o.epochs);
    ck_assert_int_eq(r.n_classes, 3);
    if (!resume) ck_assert_msg(r.last_loss < 0.5 * r.first_loss, "loss %g -> %g", r.first_loss, r.last_loss);
    ck_assert_msg(r.test_accuracy > 0.95, "test accuracy %g", r.test_accuracy);
    ck_assert(m.calls_eval > 0 && m.calls_training > 0);
    acc[resume] = r.test_accuracy;
    lt_params_free(m.params);
    lt_generator_free(g);
  }
  ck_assert(acc[1] >= acc[0] - 0.02);
  ck_assert_int_eq(access(lt_test_join(tmpdir, "run/metrics.csv"), R_OK), 0);
  lt_classify_data_free(NULL);
  fit_end(&d);
}
END_TEST

/* ---- bf16: resume is bit-exact ------------------------------------------------ */

typedef struct mlp {
  lt_linear_m fc1, fc2;
  lt_params *params;
  int stop_at, steps; /* asks the trainer to stop in training step stop_at (0: never) */
} mlp;

static lt_tensor *mlp_forward(void *m, const lt_tensor *x) {
  mlp *p = m;
  if (lt_params_training(p->params) && ++p->steps == p->stop_at) lt_trainer_request_stop(1);
  return lt_linear_forward(&p->fc2, lt_relu(lt_linear_forward(&p->fc1, x)));
}

/* The train_loss column (as written) of every row of a metrics CSV, joined
 * by '|' into buf; returns the row count. */
static int csv_losses(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char line[4096];
  ck_assert(fgets(line, sizeof line, f) != NULL);
  ck_assert_msg(!strncmp(line, "step,epoch,lr,train_loss,", 25), "unexpected CSV header: %s", line);
  int n = 0;
  buf[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    for (int c = 0; c < 3 && p; c++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    ck_assert_msg(p != NULL, "short CSV row: %s", line);
    size_t len = strcspn(p, ",\n"), used = strlen(buf);
    ck_assert(used + len + 2 < size);
    memcpy(buf + used, p, len);
    buf[used + len] = '|', buf[used + len + 1] = '\0';
    n++;
  }
  fclose(f);
  return n;
}

/* A run of the 2-16-3 MLP for 4 epochs: bf16 or not, threads, into dir
 * (NULL: none), stopped in step stop_at (0: not), resuming or not; the
 * parameters are left in *m (new, owned by the caller: lt_params_free(m->params)). */
static void mlp_run(const lt_classify_data *d, bool bf16, int stop_at, int threads, const char *dir, bool resume, mlp *m) {
  const int epochs = 4;
  *m = (mlp){.params = LT_NNP(lt_params_new()), .stop_at = stop_at};
  lt_generator *g = LT_NNP(lt_generator_new(resume ? 99 : 7)); /* a resumed run's initial values are overwritten */
  LT_OK_OR_FAIL(lt_linear_init(&m->fc1, m->params, "fc1", 2, 16, true, g));
  LT_OK_OR_FAIL(lt_linear_init(&m->fc2, m->params, "fc2", 16, 3, true, g));
  lt_generator_free(g);
  lt_classify_opts o = LT_CLASSIFY_DEFAULTS("test_classify", epochs);
  o.batch = 32, o.lr = 0.02, o.log_every = 1000, o.class_name = NULL, o.data = NULL;
  o.dir = dir, o.resume = resume, o.bf16 = bf16, o.threads = threads;
  lt_classifier c = {.model = m, .forward = mlp_forward, .params = m->params, .name = "mlp 2-16-3"};
  lt_classify_result r;
  FILE *out = tmpfile();
  LT_OK_OR_FAIL(lt_classify_fit(&c, d, &o, out, &r));
  if (bf16) { /* the banner names the path */
    char text[8192];
    rewind(out);
    size_t got = fread(text, 1, sizeof text - 1, out);
    text[got] = '\0';
    ck_assert_msg(strstr(text, "precision: bf16 (autocast), bf16 products: "), "no precision line in:\n%s", text);
  }
  fclose(out);
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_F32); /* the caller's mode, restored */
  if (stop_at) {
    ck_assert_int_eq(r.end, LT_TRAINER_INTERRUPTED);
    ck_assert_int_eq(r.steps, stop_at);
    lt_trainer_request_stop(0);
    return;
  }
  ck_assert_int_eq(r.end, LT_TRAINER_DONE);
  ck_assert_int_eq(r.steps, 19 * epochs);
  ck_assert_msg(r.test_accuracy > 0.9, "test accuracy %g", r.test_accuracy);
}

START_TEST(test_fit_bf16_resume_is_bit_exact) {
  lt_classify_data d;
  fit_begin(&d);
  char straight[512], split[512];
  snprintf(straight, sizeof straight, "%s/straight", tmpdir);
  snprintf(split, sizeof split, "%s/split", tmpdir);
  mlp a, b, b1, f;
  mlp_run(&d, true, 0, 2, straight, false, &a);
  mlp_run(&d, true, 30, 2, split, false, &b1); /* stops in step 30 of 76 (in epoch 2 of 4), saving a checkpoint */
  lt_params_free(b1.params);
  mlp_run(&d, true, 0, 1, split, true, &b); /* a new model resumes from it, on 1 thread */
  mlp_run(&d, false, 0, 2, NULL, false, &f);
  ck_assert_int_eq(lt_params_count(a.params), 4);
  bool differs = false;
  for (int i = 0; i < lt_params_count(a.params); i++) {
    const lt_param *x = lt_params_at(a.params, i), *y = lt_params_at(b.params, i), *z = lt_params_at(f.params, i);
    ck_assert_str_eq(x->name, y->name);
    ck_assert_msg(lt_equal(x->value, y->value), "parameter %s: resumed bf16 run differs from the straight one", x->name);
    differs |= !lt_equal(x->value, z->value);
  }
  /* (where autocast leaves the products in f32, the two runs are the same one) */
  ck_assert_msg(differs || !lt_test_autocast_rounds(),
                "the bf16 and f32 runs ended with the same parameters: autocast did not apply");
  static char la[65536], lb[65536];
  char pa[600], pb[600];
  snprintf(pa, sizeof pa, "%s/metrics.csv", straight);
  snprintf(pb, sizeof pb, "%s/metrics.csv", split);
  ck_assert_int_eq(csv_losses(pa, la, sizeof la), 76);
  ck_assert_int_eq(csv_losses(pb, lb, sizeof lb), 76);
  ck_assert_msg(!strcmp(la, lb), "the losses differ:\nstraight %s\nresumed  %s", la, lb);
  lt_params_free(a.params);
  lt_params_free(b.params);
  lt_params_free(f.params);
  fit_end(&d);
}
END_TEST

/* A model for lt_classify_main: a linear 784 -> 10 on lin's storage, or a
 * failing initialisation. */
static int main_inits;
static lt_status lin_init_784(void *m, lt_params *p, lt_generator *g) {
  lin *l = m;
  main_inits++;
  *l = (lin){.params = p};
  return lt_linear_init(&l->fc, p, "fc", 784, 10, true, g);
}
static lt_status failing_init(void *m, lt_params *p, lt_generator *g) {
  lin *l = m;
  main_inits++;
  lt_status s = lt_linear_init(&l->fc, p, "fc", 784, 10, true, g);
  return s == LT_OK ? lt_linear_init(&l->fc, p, "fc", 784, 10, true, g) : s; /* "fc.weight" twice: refused */
}

/* An IDX file of n items of item bytes (the value i % 10 each), gzip'd. */
static void write_idx_gz(const char *path, uint32_t magic, uint32_t n, int dims) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "gzip -c > '%s'", path);
  FILE *f = popen(cmd, "w");
  ck_assert_ptr_nonnull(f);
  const uint32_t hdr[4] = {magic, n, 28, 28};
  for (int k = 0; k < 1 + dims; k++)
    for (int b = 3; b >= 0; b--) fputc((int)(hdr[k] >> (8 * b)) & 255, f);
  for (uint32_t i = 0; i < n; i++)
    for (int j = 0; j < (dims == 3 ? 784 : 1); j++) fputc(dims == 3 ? (int)((i * 37 + (uint32_t)j) % 256) : (int)(i % 10), f);
  ck_assert_int_eq(pclose(f), 0);
}

/* lt_classify_main returns each exit code and never exits: 0 for --help and
 * a finished run, 2 for a bad flag, 1 for missing data or a failing init. */
START_TEST(test_main_exit_codes) {
  char dir[] = "/tmp/lt_classify_main_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  write_idx_gz(lt_test_join(dir, "train-images-idx3-ubyte.gz"), 0x803, 64, 3);
  write_idx_gz(lt_test_join(dir, "train-labels-idx1-ubyte.gz"), 0x801, 64, 1);
  write_idx_gz(lt_test_join(dir, "t10k-images-idx3-ubyte.gz"), 0x803, 20, 3);
  write_idx_gz(lt_test_join(dir, "t10k-labels-idx1-ubyte.gz"), 0x801, 20, 1);
  lin m;
  const lt_classify_model good = {.model = &m, .init = lin_init_784, .forward = lin_forward, .name = "linear 784-10"};
  const lt_classify_model bad = {.model = &m, .init = failing_init, .forward = lin_forward, .name = "broken"};
  struct {
    const char *argv[8];
    int argc;
    const lt_classify_model *model;
    int want, inits;
  } cases[] = {
      {{"prog", "--help"}, 2, &good, 0, 0},
      {{"prog", "--bogus"}, 2, &good, 2, 0},
      {{"prog", "--batch", "0"}, 3, &good, 2, 0},
      {{"prog", "--data", "/nonexistent/lt_classify_main"}, 3, &good, 1, 0},
      {{"prog", "--data", dir, "--max-steps", "3", "--batch", "16"}, 7, &bad, 1, 1},
      {{"prog", "--data", dir, "--max-steps", "3", "--batch", "16"}, 7, &good, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    lt_classify_opts o = LT_CLASSIFY_DEFAULTS("prog", 1);
    main_inits = 0;
    const int code = lt_classify_main(cases[i].argc, (char **)cases[i].argv, &o, cases[i].model);
    ck_assert_msg(code == cases[i].want, "case %zu (%s): exit code %d, want %d", i, cases[i].argv[1], code,
                  cases[i].want);
    ck_assert_int_eq(main_inits, cases[i].inits);
  }
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("classify");
  LT_TEST_CASE(s, "classify", 120, test_loader_epochs_and_resume, test_parse_args, test_evaluate,
               test_fit_learns_and_resumes, test_fit_bf16_resume_is_bit_exact, test_main_exit_codes);
  return lt_test_run(s);
}
