/*
 * tests/test_trainer.c: the training loop of train/trainer.h, through its
 * public calls only, on a tiny MLP regression (3 -> 8 -> 1, ReLU, dropout,
 * MSE) over 32 fixed examples in batches of 4, with Adam and a warmup +
 * cosine schedule:
 *   - resume is bit-exact: 8 steps straight against 4 steps, a stop request,
 *     a new model and trainer resuming from the run directory for the rest:
 *     the same parameters, optimizer state, dropout generator and per-step
 *     losses; the CSV then holds exactly one row per step even though the
 *     stopped process left rows past its checkpoint and a torn last line;
 *   - a stop request saves a checkpoint and returns;
 *   - a non-finite loss skips the update (parameters unchanged, CSV skipped=1)
 *     and too many in a row stop the run with LT_ERR_NUMERIC;
 *   - accumulation over 2 micro-batches of 4 equals one batch of 8;
 *   - keep-last-N rotation; stop_after saves and returns;
 *   - a CSV write failure (/dev/full) is an error naming the file;
 *   - restored counters out of range are refused naming key, value and range;
 *   - evaluation memory is flat: an evaluate hook that frees nothing (a 4 MB
 *     intermediate each time), and an eval_batch hook, over 50 evaluations
 *     each, leave the live tensor and storage counts and the RSS where they
 *     were;
 *   - cfg.autocast turns autocast on for the steps and evaluations, and back.
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "tensor/storage_internal.h" /* lt__live_tensors, lt__live_storages: the leak check */
#include "train/trainer.h"

enum { N = 32, D = 3, H = 8 };

static char tmpdir[256];

static void setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_trainer_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  lt_trainer_request_stop(0);
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  lt_trainer_request_stop(0);
}

static const char *in_tmp(const char *name) { return lt_test_join(tmpdir, name); }

/* ---- the model and its hooks ------------------------------------------------- */

typedef struct fx {
  lt_params *params;
  lt_linear_m l1, l2;        /* [H, D], [1, H] */
  lt_optim_config oc;
  lt_optimizer *opt;
  lt_schedule sched;
  lt_generator *drop;        /* dropout draws: training state */
  lt_tensor *X, *Y;          /* [N, D], [N, 1] */
  int64_t batch;             /* rows per micro-batch */
  double p;                  /* dropout probability */
  int64_t epoch, index;      /* the loader's position */
  int64_t nan_from;          /* from this step on the loss is NaN (0: never) */
  int64_t stop_at;           /* a stop request during this step (0: none) */
  double before[64];         /* the parameters at the start of step nan_from */
  int64_t n_before;
  int64_t evals;
  struct leak_probe *probe;  /* evaluation_memory_is_flat, autocast_on_request */
} fx;

static int64_t fx_bpe(void *u) { return N / ((fx *)u)->batch; }
static lt_loader_position fx_get_position(void *u) {
  fx *f = u;
  return (lt_loader_position){.epoch = f->epoch, .index = f->index, .gen = {0, 0}, .fingerprint = (uint64_t)N};
}
static lt_status fx_set_position(void *u, lt_loader_position pos) {
  fx *f = u;
  if (pos.fingerprint != (uint64_t)N) return lt_error_set(LT_ERR_STATE, "fingerprint %llu, expected %d",
                                                              (unsigned long long)pos.fingerprint, N);
  f->epoch = pos.epoch, f->index = pos.index;
  return LT_OK;
}

static void read_params(const fx *f, double *out, int64_t *n) {
  *n = 0;
  for (int i = 0; i < lt_params_count(f->params); i++) {
    const lt_tensor *v = lt_params_at(f->params, i)->value;
    LT_OK_OR_FAIL(lt_tensor_read(v, LT_DTYPE_F64, out + *n, 64 - *n));
    *n += v->numel;
  }
}

static lt_status fx_begin(void *u, int64_t step, int64_t accum) {
  fx *f = u;
  if (step == f->nan_from) read_params(f, f->before, &f->n_before);
  return LT_OK;
}

static lt_status fx_micro(void *u, lt_trainer_micro *m) {
  fx *f = u;
  if (m->step == f->stop_at && m->index == 0) lt_trainer_request_stop(SIGINT);
  if (f->index == fx_bpe(f)) f->epoch++, f->index = 0;
  int64_t r0 = f->index++ * f->batch;
  m->tokens = f->batch;
  if (!m->forward) return LT_OK;
  lt_nn_ctx ctx = {true, f->drop};
  lt_tensor *x = lt_narrow(f->X, 0, r0, f->batch), *y = lt_narrow(f->Y, 0, r0, f->batch);
  lt_tensor *h = lt_relu(lt_linear_forward(&f->l1, x)); /* [b, H] */
  if (f->p > 0) h = lt_dropout(h, f->p, &ctx);
  m->loss = lt_mse_loss(lt_linear_forward(&f->l2, h), y, LT_REDUCTION_MEAN);
  if (f->nan_from && m->step >= f->nan_from) m->loss = lt_mul_scalar(m->loss, NAN);
  m->weight = 1.0 / (double)m->accum;
  return m->loss ? LT_OK : lt_last_status();
}

static const lt_trainer_metric METRICS[] = {{"val_mse", NULL}};

static lt_status fx_eval(void *u, lt_trainer_eval *ev) {
  fx *f = u;
  lt_scope *s = lt_scope_begin();
  lt_tensor *out = lt_linear_forward(&f->l2, lt_relu(lt_linear_forward(&f->l1, f->X)));
  lt_status st = lt_item(lt_mse_loss(out, f->Y, LT_REDUCTION_MEAN), &ev->values[0]);
  lt_scope_end(s);
  f->evals++;
  return st;
}

static const char *const GEN_NAMES[] = {"dropout"};

/* A fresh model (initialised from seed) over the fixed data. */
static void fx_init(fx *f, uint64_t seed, int64_t batch, double p, int64_t steps, lt_optim_kind kind) {
  memset(f, 0, sizeof *f);
  lt_generator *g = LT_NNP(lt_generator_new(seed));
  f->params = LT_NNP(lt_params_new());
  LT_OK_OR_FAIL(lt_linear_init(&f->l1, f->params, "fc1", D, H, true, g));
  LT_OK_OR_FAIL(lt_linear_init(&f->l2, f->params, "fc2", H, 1, true, g));
  lt_generator_free(g);
  lt_generator *dg = LT_NNP(lt_generator_new(99));
  f->X = LT_NN(lt_randn(dg, LT_DTYPE_F32, 2, (int64_t[]){N, D}));
  lt_tensor *w = LT_NN(lt_test_from_f64(LT_DTYPE_F32, 2, (int64_t[]){D, 1}, (double[]){0.5, -1.0, 2.0}));
  f->Y = LT_NN(lt_matmul(f->X, w)); /* [N, 1] */
  lt_tensor_free(w);
  lt_generator_free(dg);
  f->oc = lt_optim_defaults(kind);
  f->oc.lr = kind == LT_OPTIM_SGD ? 0.05 : 0.01;
  f->opt = LT_NNP(lt_optimizer_new(f->params, &f->oc));
  f->sched = (lt_schedule){.kind = LT_SCHED_WARMUP_COSINE, .base_lr = f->oc.lr, .gamma = 0.1, .scale = 1.0,
                           .warmup = 2, .total = steps, .step_size = 1};
  f->drop = LT_NNP(lt_generator_new(7));
  f->batch = batch;
  f->p = p;
}

static void fx_free(fx *f) {
  lt_optimizer_free(f->opt);
  lt_params_free(f->params);
  lt_generator_free(f->drop);
  LT_FREE_ALL(f->X, f->Y);
}

static lt_trainer_config fx_config(fx *f, int64_t steps, int64_t accum, const char *dir) {
  lt_trainer_config c = LT_TRAINER_DEFAULTS;
  c.params = f->params, c.optim = f->opt, c.optim_config = &f->oc, c.schedule = &f->sched;
  c.n_generators = 1, c.generator_names = GEN_NAMES, c.generators = &f->drop;
  c.steps = steps, c.accum = accum, c.eval_every = 3, c.ckpt_every = 2, c.keep = 0;
  c.dir = dir;
  c.n_metrics = 1, c.metrics = METRICS;
  c.progress = LT_TRAINER_PROGRESS_OFF;
  c.out = stderr;
  return c;
}

static lt_trainer *fx_trainer(fx *f, const lt_trainer_config *c) {
  lt_trainer_hooks h = {.user = f, .micro_batch = fx_micro, .begin_step = fx_begin, .evaluate = fx_eval,
                        .get_position = fx_get_position, .set_position = fx_set_position, .batches_per_epoch = fx_bpe};
  lt_trainer *t = lt_trainer_new(c, &h);
  ck_assert_msg(t != NULL, "lt_trainer_new: %s", lt_last_error());
  return t;
}

/* ---- helpers ---------------------------------------------------------------- */

/* Column col of every data row; checks the steps are 1, 2, ... Returns the row count. */
static int read_csv(const char *path, int col, double *v, int cap) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *line = NULL;
  size_t size = 0;
  ck_assert(getline(&line, &size, f) > 0);
  ck_assert_msg(!strncmp(line, "step,epoch,lr,train_loss,", 25), "header: %s", line);
  ck_assert_msg(strstr(line, ",val_mse,rss_mb\n"), "header without the metric column: %s", line);
  int n = 0;
  while (getline(&line, &size, f) > 0) {
    ck_assert_msg(n < cap, "more rows than %d in %s", cap, path);
    ck_assert_msg(line[strlen(line) - 1] == '\n', "a torn row: %s", line);
    ck_assert_msg(strtoll(line, NULL, 10) == n + 1, "row %d is step %s", n + 1, line);
    char *p = line;
    for (int c = 0; c < col; c++) {
      p = strchr(p, ',');
      ck_assert_msg(p != NULL, "short CSV row: %s", line);
      p++;
    }
    v[n++] = (*p == ',' || *p == '\n') ? NAN : strtod(p, NULL);
  }
  free(line);
  fclose(f);
  return n;
}

enum { COL_LOSS = 3, COL_SKIPPED = 5, COL_METRIC = 10 };

static void expect_same_state(fx *a, fx *b) {
  for (int i = 0; i < lt_params_count(a->params); i++) {
    const lt_param *x = lt_params_at(a->params, i), *y = lt_params_at(b->params, i);
    ck_assert_str_eq(x->name, y->name);
    ck_assert_msg(lt_equal(x->value, y->value), "parameter %s differs", x->name);
    static const char *const states[] = {"exp_avg", "exp_avg_sq", "step"};
    for (int k = 0; k < 3; k++) {
      lt_tensor *u = lt_optimizer_state(a->opt, x->name, states[k]), *v = lt_optimizer_state(b->opt, x->name, states[k]);
      ck_assert_msg(u && v, "optimizer state %s of %s missing", states[k], x->name);
      ck_assert_msg(lt_equal(u, v), "optimizer state %s of %s differs", states[k], x->name);
    }
  }
  lt_generator_state ga = lt_generator_get_state(a->drop), gb = lt_generator_get_state(b->drop);
  ck_assert(ga.seed == gb.seed && ga.offset == gb.offset);
  ck_assert(a->epoch == b->epoch && a->index == b->index);
}

/* ---- tests ------------------------------------------------------------------- */

START_TEST(resume_is_bit_exact_and_the_csv_complete) {
  enum { STEPS = 8, K = 4 };
  fx a, b;
  /* straight */
  fx_init(&a, 1, 4, 0.2, STEPS, LT_OPTIM_ADAM);
  lt_trainer_config ca = fx_config(&a, STEPS, 2, in_tmp("straight"));
  LT_OK_OR_FAIL(lt_trainer_make_dir(in_tmp("straight")));
  lt_trainer *ta = fx_trainer(&a, &ca);
  lt_trainer_result ra;
  LT_OK_OR_FAIL(lt_trainer_fit(ta, &ra));
  ck_assert_int_eq(ra.end, LT_TRAINER_DONE);
  ck_assert_int_eq(ra.step, STEPS);
  ck_assert_int_eq(ra.tokens, STEPS * 2 * 4);
  /* a stop request during step K: the step finishes, a checkpoint is saved, fit returns */
  fx_init(&b, 1, 4, 0.2, STEPS, LT_OPTIM_ADAM);
  b.stop_at = K;
  lt_trainer_config cb = fx_config(&b, STEPS, 2, in_tmp("split"));
  cb.ckpt_every = 3; /* so that the stop saves a checkpoint of its own (at step 4) */
  LT_OK_OR_FAIL(lt_trainer_make_dir(in_tmp("split")));
  lt_trainer *tb = fx_trainer(&b, &cb);
  lt_trainer_result rb;
  LT_OK_OR_FAIL(lt_trainer_fit(tb, &rb));
  ck_assert_int_eq(rb.end, LT_TRAINER_INTERRUPTED);
  ck_assert_int_eq(rb.stop_reason, SIGINT);
  ck_assert_int_eq(rb.step, K);
  ck_assert_msg(strstr(rb.last_checkpoint, "ckpt-000000000004.h5"), "last checkpoint %s", rb.last_checkpoint);
  LT_OK_OR_FAIL(lt_ckpt_verify(rb.last_checkpoint));
  lt_trainer_free(tb);
  fx_free(&b);
  /* a killed process wrote rows past its checkpoint, the last one torn */
  FILE *f = fopen(in_tmp("split/metrics.csv"), "a");
  ck_assert_ptr_nonnull(f);
  fputs("5,0.1,0.1,9,9,0,1,1,1,1,,1\n6,0.1,0.", f);
  fclose(f);
  /* a new process: another initialisation, resumed from the directory's newest checkpoint */
  lt_trainer_request_stop(0);
  fx_init(&b, 2, 4, 0.2, STEPS, LT_OPTIM_ADAM);
  cb = fx_config(&b, STEPS, 2, in_tmp("split"));
  tb = fx_trainer(&b, &cb);
  char path[512];
  LT_OK_OR_FAIL(lt_trainer_find_resume(in_tmp("split"), "ckpt", path, sizeof path));
  LT_OK_OR_FAIL(lt_trainer_resume(tb, path));
  ck_assert_int_eq(lt_trainer_step(tb), K);
  LT_OK_OR_FAIL(lt_trainer_fit(tb, &rb));
  ck_assert_int_eq(rb.end, LT_TRAINER_DONE);
  ck_assert_int_eq(rb.start_step, K);
  ck_assert_int_eq(rb.tokens, ra.tokens);
  expect_same_state(&a, &b);
  double la[STEPS], lb[STEPS];
  ck_assert_int_eq(read_csv(in_tmp("straight/metrics.csv"), COL_LOSS, la, STEPS), STEPS);
  ck_assert_int_eq(read_csv(in_tmp("split/metrics.csv"), COL_LOSS, lb, STEPS), STEPS);
  for (int i = 0; i < STEPS; i++) ck_assert_msg(la[i] == lb[i], "step %d: loss %.17g vs %.17g", i + 1, la[i], lb[i]);
  read_csv(in_tmp("straight/metrics.csv"), COL_METRIC, la, STEPS);
  ck_assert(isnan(la[0]) && isfinite(la[2]) && isfinite(la[STEPS - 1])); /* every 3 steps and at the end */
  /* no temporary left beside the CSV */
  DIR *d = opendir(in_tmp("split"));
  struct dirent *e;
  while ((e = readdir(d))) ck_assert_msg(!strstr(e->d_name, ".tmp-"), "temporary %s left", e->d_name);
  closedir(d);
  lt_trainer_free(ta);
  lt_trainer_free(tb);
  fx_free(&a);
  fx_free(&b);
}
END_TEST

START_TEST(nonfinite_loss_skips_the_update) {
  fx f;
  fx_init(&f, 3, 4, 0.0, 6, LT_OPTIM_ADAM);
  f.nan_from = 3;
  lt_trainer_config c = fx_config(&f, 6, 1, NULL);
  c.csv_path = in_tmp("nan.csv");
  c.max_nonfinite = 2;
  lt_trainer *t = fx_trainer(&f, &c);
  lt_trainer_result r;
  LT_EXPECT_ERR(lt_trainer_fit(t, &r), LT_ERR_NUMERIC, "2 non-finite steps in a row");
  ck_assert_int_eq(r.end, LT_TRAINER_NONFINITE);
  ck_assert_int_eq(r.step, 4);
  ck_assert_int_eq(r.bad_streak, 2);
  double now[64];
  int64_t n;
  read_params(&f, now, &n);
  ck_assert_int_eq(n, f.n_before);
  for (int64_t i = 0; i < n; i++) ck_assert_msg(now[i] == f.before[i], "parameter value %lld changed", (long long)i);
  double sk[4];
  ck_assert_int_eq(read_csv(in_tmp("nan.csv"), COL_SKIPPED, sk, 4), 4);
  ck_assert(sk[0] == 0 && sk[1] == 0 && sk[2] == 1 && sk[3] == 1);
  ck_assert_int_eq(f.index, 4); /* the skipped steps still consumed their batches */
  lt_trainer_free(t);
  fx_free(&f);
}
END_TEST

START_TEST(accumulation_equals_one_big_batch) {
  enum { STEPS = 5 };
  fx a, b;
  fx_init(&a, 4, 8, 0.0, STEPS, LT_OPTIM_SGD);
  fx_init(&b, 4, 4, 0.0, STEPS, LT_OPTIM_SGD);
  lt_trainer_config ca = fx_config(&a, STEPS, 1, NULL), cb = fx_config(&b, STEPS, 2, NULL);
  lt_trainer *ta = fx_trainer(&a, &ca), *tb = fx_trainer(&b, &cb);
  LT_OK_OR_FAIL(lt_trainer_fit(ta, NULL));
  LT_OK_OR_FAIL(lt_trainer_fit(tb, NULL));
  int changed = 0;
  lt_generator *g = LT_NNP(lt_generator_new(4)); /* the initial values, to see that training moved them */
  lt_params *p0 = LT_NNP(lt_params_new());
  lt_linear_m l1, l2;
  LT_OK_OR_FAIL(lt_linear_init(&l1, p0, "fc1", D, H, true, g));
  LT_OK_OR_FAIL(lt_linear_init(&l2, p0, "fc2", H, 1, true, g));
  for (int i = 0; i < lt_params_count(a.params); i++) {
    const lt_tensor *x = lt_params_at(a.params, i)->value, *y = lt_params_at(b.params, i)->value;
    LT_ASSERT_CLOSE(x, y, 1e-5, 1e-6);
    changed += !lt_allclose(x, lt_params_at(p0, i)->value, 1e-3, 1e-4, false);
  }
  ck_assert_int_gt(changed, 0);
  lt_params_free(p0);
  lt_generator_free(g);
  lt_trainer_free(ta);
  lt_trainer_free(tb);
  fx_free(&a);
  fx_free(&b);
}
END_TEST

START_TEST(keep_last_n_checkpoints) {
  fx f;
  fx_init(&f, 5, 4, 0.0, 5, LT_OPTIM_ADAM);
  lt_trainer_config c = fx_config(&f, 5, 1, in_tmp("keep"));
  c.ckpt_every = 1, c.keep = 2;
  LT_OK_OR_FAIL(lt_trainer_make_dir(in_tmp("keep")));
  lt_trainer *t = fx_trainer(&f, &c);
  LT_OK_OR_FAIL(lt_trainer_fit(t, NULL));
  int n = 0, seen4 = 0, seen5 = 0;
  DIR *d = opendir(in_tmp("keep"));
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "ckpt-", 5)) continue;
    n++;
    seen4 += !strcmp(e->d_name, "ckpt-000000000004.h5");
    seen5 += !strcmp(e->d_name, "ckpt-000000000005.h5");
  }
  closedir(d);
  ck_assert_msg(n == 2 && seen4 && seen5, "%d checkpoints kept, expected steps 4 and 5", n);
  /* starting over deletes them */
  LT_OK_OR_FAIL(lt_trainer_clear_dir(in_tmp("keep"), "ckpt"));
  int64_t latest;
  LT_OK_OR_FAIL(lt_ckpt_latest(in_tmp("keep"), "ckpt", false, &latest, NULL, 0));
  ck_assert_int_eq(latest, -1);
  LT_EXPECT_ERR(lt_trainer_find_resume(in_tmp("keep"), "ckpt", (char[64]){0}, 64), LT_ERR_STATE,
                "no valid checkpoint");
  LT_EXPECT_ERR(lt_trainer_find_resume(in_tmp("none"), "ckpt", (char[64]){0}, 64), LT_ERR_INVALID, "none");
  lt_trainer_free(t);
  fx_free(&f);
  /* stop_after: a checkpoint of that step, and fit returns STOPPED */
  fx_init(&f, 5, 4, 0.0, 5, LT_OPTIM_ADAM);
  c = fx_config(&f, 5, 1, in_tmp("keep"));
  c.stop_after = 3;
  t = fx_trainer(&f, &c);
  lt_trainer_result r;
  LT_OK_OR_FAIL(lt_trainer_fit(t, &r));
  ck_assert_int_eq(r.end, LT_TRAINER_STOPPED);
  ck_assert_int_eq(r.step, 3);
  LT_OK_OR_FAIL(lt_ckpt_latest(in_tmp("keep"), "ckpt", true, &latest, NULL, 0));
  ck_assert_int_eq(latest, 3);
  lt_trainer_free(t);
  fx_free(&f);
}
END_TEST

START_TEST(csv_write_failure_is_an_error) {
  fx f;
  fx_init(&f, 6, 4, 0.0, 3, LT_OPTIM_ADAM);
  lt_trainer_config c = fx_config(&f, 3, 1, NULL);
  c.csv_path = "/dev/full";
  lt_trainer *t = fx_trainer(&f, &c);
  lt_trainer_result r;
  lt_status s = lt_trainer_fit(t, &r);
  ck_assert_msg(s == LT_ERR_IO && strstr(lt_last_error(), "metrics CSV '/dev/full'") &&
                strstr(lt_last_error(), "No space left on device"), "%s: %s", lt_status_name(s), lt_last_error());
  ck_assert_int_eq(r.end, LT_TRAINER_FAILED);
  lt_trainer_free(t);
  fx_free(&f);
}
END_TEST

/* The loader's generator offset write_state saves (a crafted file's, when not 0). */
static int64_t g_loader_offset;

/* A checkpoint with the given trainer values (a file damaged or edited). */
static void write_state(fx *f, const char *path, int64_t step, int64_t tokens, double secs, int64_t index) {
  lt_ckpt_meta *x = LT_NNP(lt_ckpt_meta_new());
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_LOADER_EPOCH, 0));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_LOADER_INDEX, index));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_LOADER_SEED, 0));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_LOADER_OFFSET, g_loader_offset));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_LOADER_FINGERPRINT, N));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_TOKENS, tokens));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_double(x, LT_TRAINER_KEY_TRAIN_SECONDS, secs));
  LT_OK_OR_FAIL(lt_ckpt_meta_set_int(x, LT_TRAINER_KEY_BAD_STREAK, 0));
  lt_train_state st = {.params = f->params, .optim = f->opt, .optim_config = &f->oc, .schedule = &f->sched,
                       .step = step, .n_generators = 1, .generator_names = GEN_NAMES, .generators = &f->drop};
  LT_OK_OR_FAIL(lt_ckpt_save_training(path, &st, NULL, x, NULL));
  lt_ckpt_meta_free(x);
}

START_TEST(restored_counters_are_range_checked) {
  fx f;
  fx_init(&f, 7, 4, 0.0, 10, LT_OPTIM_ADAM);
  lt_trainer_config c = fx_config(&f, 10, 1, NULL);
  lt_trainer *t = fx_trainer(&f, &c);
  const char *p = in_tmp("bad.h5");
  write_state(&f, p, 11, 0, 0, 0);
  LT_EXPECT_ERR(lt_trainer_resume(t, p), LT_ERR_FORMAT, "step = 11 is outside [0, 10]");
  write_state(&f, p, 3, -5, 0, 0);
  LT_EXPECT_ERR(lt_trainer_resume(t, p), LT_ERR_FORMAT, "run.tokens = -5 is outside [0, inf)");
  write_state(&f, p, 3, 5, INFINITY, 0);
  LT_EXPECT_ERR(lt_trainer_resume(t, p), LT_ERR_FORMAT, "run.train_seconds = inf");
  write_state(&f, p, 3, 5, 1.5, 9);
  LT_EXPECT_ERR(lt_trainer_resume(t, p), LT_ERR_FORMAT, "loader.index = 9 is outside [0, 8]");
  g_loader_offset = -1; /* a generator's offset is a count of blocks drawn */
  write_state(&f, p, 3, 5, 1.5, 8);
  LT_EXPECT_ERR(lt_trainer_resume(t, p), LT_ERR_FORMAT, "loader.offset = -1 is outside [0, 2^63)");
  g_loader_offset = 0;
  ck_assert_int_eq(lt_trainer_step(t), 0); /* nothing restored */
  write_state(&f, p, 3, 5, 1.5, 8);
  LT_OK_OR_FAIL(lt_trainer_resume(t, p));
  ck_assert_int_eq(lt_trainer_step(t), 3);
  ck_assert_int_eq(f.index, 8);
  /* configuration errors name the field */
  c.accum = 0;
  lt_trainer_hooks h = {.user = &f, .micro_batch = fx_micro};
  LT_EXPECT_NULLP_ERR(lt_trainer_new(&c, &h), LT_ERR_INVALID, "accum 0");
  c.accum = 1, h.micro_batch = NULL;
  LT_EXPECT_NULLP_ERR(lt_trainer_new(&c, &h), LT_ERR_NULL, "hooks.micro_batch");
  lt_trainer_free(t);
  fx_free(&f);
}
END_TEST

/* ---- evaluation memory, autocast ---------------------------------------------- */

typedef struct leak_probe {
  int64_t n;                          /* evaluations */
  int64_t tensors[64], storages[64];  /* live counts at each evaluation's start */
  double rss[64];                     /* MB, at each evaluation's start */
  int64_t batch_tensors;              /* live tensors at batch 0 of the current evaluation */
  bool batch_flat;                    /* every batch began with batch 0's count */
  double sum;
  int64_t steps_bf16, evals_bf16;     /* hooks that ran under autocast */
} leak_probe;

static double rss_now_mb(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static void probe_record(leak_probe *p) {
  if (p->n < 64) p->tensors[p->n] = lt__live_tensors(), p->storages[p->n] = lt__live_storages(), p->rss[p->n] = rss_now_mb();
  p->evals_bf16 += lt_autocast_dtype() == LT_DTYPE_BF16;
}

/* The validation loss of rows [r0, r0 + n) (reduction sum), plus 0 times
 * the mean of a 4 MB tensor: an intermediate nobody frees. */
static lt_status leaky_loss(fx *f, int64_t r0, int64_t n, double *v) {
  lt_tensor *big = lt_full(LT_DTYPE_F32, 1, (int64_t[]){1 << 20}, 1.0); /* written, so resident */
  lt_tensor *x = lt_narrow(f->X, 0, r0, n), *y = lt_narrow(f->Y, 0, r0, n);
  lt_tensor *out = lt_linear_forward(&f->l2, lt_relu(lt_linear_forward(&f->l1, x)));
  lt_tensor *loss = lt_add(lt_mse_loss(out, y, LT_REDUCTION_SUM), lt_mul_scalar(lt_mean(big, 0, NULL, false), 0));
  return lt_item(loss, v);
}

/* An evaluate hook as a newcomer writes it: no scope, no frees. */
static lt_status leaky_eval(void *u, lt_trainer_eval *ev) {
  fx *f = u;
  probe_record(f->probe);
  f->probe->n++;
  double v;
  lt_status st = leaky_loss(f, 0, N, &v);
  ev->values[0] = v / N;
  return st;
}

/* The same through eval_batch: 4 batches of 8 rows; then evaluate divides. */
static lt_status leaky_batch(void *u, lt_trainer_eval *ev, int64_t b, bool *more) {
  fx *f = u;
  leak_probe *p = f->probe;
  (void)ev;
  if (b == 0) {
    probe_record(p);
    p->sum = 0, p->batch_tensors = lt__live_tensors();
  } else if (lt__live_tensors() != p->batch_tensors) {
    p->batch_flat = false;
  }
  double v;
  lt_status st = leaky_loss(f, 8 * b, 8, &v);
  p->sum += v;
  *more = b < 3;
  return st;
}
static lt_status batch_finish(void *u, lt_trainer_eval *ev) {
  fx *f = u;
  f->probe->n++;
  ev->values[0] = f->probe->sum / N;
  return LT_OK;
}

static lt_status probe_micro(void *u, lt_trainer_micro *m) {
  fx *f = u;
  f->probe->steps_bf16 += lt_autocast_dtype() == LT_DTYPE_BF16;
  return fx_micro(u, m);
}

static void expect_flat(const leak_probe *p, int64_t n) {
  ck_assert_int_eq(p->n, n);
  for (int64_t i = 2; i < n; i++) /* the first evaluations may make what stays (Adam's state is made at step 1) */
    ck_assert_msg(p->tensors[i] == p->tensors[1] && p->storages[i] == p->storages[1],
                  "evaluation %lld began with %lld live tensors and %lld storages, evaluation 1 with %lld and %lld",
                  (long long)i, (long long)p->tensors[i], (long long)p->storages[i], (long long)p->tensors[1],
                  (long long)p->storages[1]);
  /* leaked, 4 MB per evaluation would be 190 MB here */
  ck_assert_msg(p->rss[n - 1] - p->rss[2] < 24.0, "RSS grew from %.1f MB to %.1f MB over %lld evaluations", p->rss[2],
                p->rss[n - 1], (long long)(n - 3));
}

static void run_probe(fx *f, leak_probe *p, const lt_trainer_hooks *h, lt_dtype autocast) {
  lt_trainer_config c = fx_config(f, 50, 1, NULL);
  c.eval_every = 1, c.ckpt_every = 0, c.no_ckpt = true, c.autocast = autocast;
  c.out = fopen("/dev/null", "w");
  ck_assert_ptr_nonnull(c.out);
  f->probe = p;
  lt_trainer *t = lt_trainer_new(&c, h);
  ck_assert_msg(t != NULL, "lt_trainer_new: %s", lt_last_error());
  lt_trainer_result res;
  LT_OK_OR_FAIL(lt_trainer_fit(t, &res));
  ck_assert_int_eq(res.end, LT_TRAINER_DONE);
  lt_trainer_free(t);
  fclose(c.out);
}

START_TEST(evaluation_memory_is_flat) {
  fx f;
  fx_init(&f, 1, 4, 0.0, 50, LT_OPTIM_ADAM);
  leak_probe p = {.batch_flat = true};
  run_probe(&f, &p, &(lt_trainer_hooks){.user = &f, .micro_batch = fx_micro, .evaluate = leaky_eval}, LT_DTYPE_F32);
  expect_flat(&p, 50); /* eval_every 1 over 50 steps: the last is the final one */
  leak_probe q = {.batch_flat = true};
  run_probe(&f, &q,
            &(lt_trainer_hooks){.user = &f, .micro_batch = fx_micro, .evaluate = batch_finish, .eval_batch = leaky_batch},
            LT_DTYPE_F32);
  expect_flat(&q, 50);
  ck_assert_msg(q.batch_flat, "an evaluation batch began with more live tensors than the evaluation's batch 0");
  fx_free(&f);
}
END_TEST

START_TEST(autocast_on_request) {
  fx f;
  fx_init(&f, 1, 4, 0.0, 50, LT_OPTIM_ADAM);
  leak_probe p = {.batch_flat = true};
  lt_trainer_hooks h = {.user = &f, .micro_batch = probe_micro, .evaluate = leaky_eval};
  run_probe(&f, &p, &h, LT_DTYPE_BF16);
  ck_assert_int_eq(p.steps_bf16, 50);
  ck_assert_int_eq(p.evals_bf16, 50);
  ck_assert_int_eq(lt_autocast_dtype(), LT_DTYPE_F32); /* restored */
  leak_probe q = {.batch_flat = true};
  run_probe(&f, &q, &h, LT_DTYPE_F32); /* the default: the caller's mode */
  ck_assert_int_eq(q.steps_bf16, 0);
  lt_trainer_config c = fx_config(&f, 5, 1, NULL);
  c.autocast = LT_DTYPE_F64;
  LT_EXPECT_NULLP_ERR(lt_trainer_new(&c, &h), LT_ERR_INVALID, "autocast f64");
  fx_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("trainer");
  TCase *tc = LT_TEST_CASE(s, "loop", 300, resume_is_bit_exact_and_the_csv_complete, nonfinite_loss_skips_the_update,
                           accumulation_equals_one_big_batch, keep_last_n_checkpoints, csv_write_failure_is_an_error,
                           restored_counters_are_range_checked, evaluation_memory_is_flat, autocast_on_request);
  tcase_add_checked_fixture(tc, setup, teardown);
  return lt_test_run(s);
}
