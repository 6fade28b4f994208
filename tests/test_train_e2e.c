/*
 * tests/test_train_e2e.c: models/transformer/train end to end, and the
 * library calls it makes to decode and generate (lt_transformer_generate, as
 * train calls it) and to keep its configuration (models/transformer/config.h).
 *
 * The program tests run the real executable (its path is LT_TRAIN_EXE, set
 * by tests/CMakeLists.txt) with tiny configurations, then read what it wrote:
 *   - a tiny encoder-decoder, fixed seed, a few dozen steps: the loss falls,
 *     and two runs give bit-identical losses, validation metrics and final
 *     parameters;
 *   - resume: N steps straight against k steps, exit, a new process resuming
 *     from the checkpoint (on another thread count) for N - k steps, with
 *     dropout on, shuffled data and gradient accumulation: the same loss at
 *     every step (==) and the same final parameters and optimizer state;
 *   - the same under --precision bf16, for an encoder-decoder and for a
 *     decoder-only model stopped half way;
 *   - --recompute attention and layer give --recompute none's losses and
 *     parameters bit for bit (dropout, bf16, accumulation); --chunked-head
 *     its first loss within 1e-6, and resumes;
 *   - a decoder-only model on a generated text: the validation loss falls and
 *     text is generated; generate --precision bf16 continues prompts greedily
 *     as f32 does;
 *   - Ctrl-C (SIGINT) saves a checkpoint and exits with 130, and the run
 *     resumes from it; a non-finite run stops with exit 3; bad flags and bad
 *     data give a message and a non-zero exit;
 *   - a hook that fails (a read error injected into its data source,
 *     tests/fault_loader.c) returns its status through lt_trainer_fit: the
 *     run exits 1 with the message, its checkpoints and CSV rows up to the
 *     failure whole, and it resumes from them.
 * The library tests check train's greedy decoding (lt_transformer_generate
 * on an encoder-decoder) against teacher forcing, its text generation
 * (decoder-only: greedy, sampled, the context window), the configuration in
 * checkpoint attributes, and the error paths.
 *
 * The final parameters of two runs are compared by rebuilding the model from
 * each checkpoint's configuration (lt_tf_config_from_meta) and loading it.
 */
#define _DEFAULT_SOURCE /* mkdtemp, usleep */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "models/transformer/config.h"
#include "models/transformer/generate.h"
#include "models/transformer/transformer.h"
#include "test_util.h"
#include "util_tfckpt.h"

#ifndef LT_TRAIN_EXE
#error "LT_TRAIN_EXE (the path of the train program) must be defined by the build"
#endif
#ifndef LT_GENERATE_EXE
#error "LT_GENERATE_EXE (the path of the generate program) must be defined by the build"
#endif
#ifndef LT_TRAIN_FAULT_EXE
#error "LT_TRAIN_FAULT_EXE (train with a read error injected, tests/fault_loader.c) must be defined by the build"
#endif

static char tmpdir[256];

static void setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_train_e2e_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

static const char *in_tmp(const char *name) { return lt_test_join(tmpdir, name); }

/* Runs train with args, output to <tmpdir>/<log>; returns its exit status. */
static int run_train(const char *args, const char *log) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s > '%s' 2>&1", LT_TRAIN_EXE, args, in_tmp(log));
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
  return WEXITSTATUS(st);
}

/* The whole of a file (NUL-terminated; free with free()). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  ck_assert(fread(s, 1, (size_t)n, f) == (size_t)n);
  s[n] = '\0';
  fclose(f);
  return s;
}

/* Fails with the log's tail unless the run ended with want. */
static void expect_exit(int got, int want, const char *log) {
  if (got == want) return;
  char *s = slurp(in_tmp(log));
  size_t n = strlen(s);
  ck_abort_msg("train exited with %d, expected %d; the end of its output:\n%s", got, want,
               s + (n > 2000 ? n - 2000 : 0));
}

static void expect_in_log(const char *log, const char *needle) {
  char *s = slurp(in_tmp(log));
  bool found = strstr(s, needle) != NULL;
  if (!found) {
    size_t n = strlen(s);
    ck_abort_msg("'%s' not in the output of train:\n%s", needle, s + (n > 2000 ? n - 2000 : 0));
  }
  free(s);
}

/* Column col (0-based) of every data row of a metrics CSV: values[i] for
 * row i (NAN for an empty field), steps[i] its step. Returns the row count. */
static int read_csv(const char *path, int col, double *values, long long *steps, int cap) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char line[4096];
  int n = 0;
  ck_assert(fgets(line, sizeof line, f) != NULL);
  ck_assert_msg(!strncmp(line, "step,epoch,lr,train_loss,", 25), "unexpected CSV header: %s", line);
  while (fgets(line, sizeof line, f) && n < cap) {
    char *p = line;
    for (int c = 0; c < col; c++) {
      p = strchr(p, ',');
      ck_assert_msg(p != NULL, "short CSV row: %s", line);
      p++;
    }
    values[n] = (*p == ',' || *p == '\n') ? NAN : strtod(p, NULL);
    steps[n] = strtoll(line, NULL, 10);
    n++;
  }
  fclose(f);
  return n;
}

enum { COL_LOSS = 3, COL_VAL_LOSS = 10, COL_VAL_EXACT = 12 };

/* The model a checkpoint describes, with the checkpoint's parameters. */
static lt_transformer *load_model(const char *path) {
  lt_transformer *m = tfckpt_load_model(path);
  ck_assert_msg(m != NULL, "%s", lt_last_error());
  return m;
}

/* The full training state of a checkpoint written by train for the default
 * encoder-decoder optimizer (Adam, beta2 0.98, eps 1e-9): the model, the
 * optimizer and the dropout generator's state. */
static void load_training(const char *path, lt_transformer **m, lt_optimizer **o, lt_generator_state *gs) {
  *m = load_model(path);
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAM);
  oc.beta2 = 0.98, oc.eps = 1e-9;
  *o = lt_optimizer_new(lt_transformer_params(*m), &oc);
  ck_assert_ptr_nonnull(*o);
  lt_generator *g = lt_generator_new(0);
  const char *names[] = {"dropout"};
  lt_train_state st = {.params = lt_transformer_params(*m), .optim = *o, .optim_config = &oc, .n_generators = 1,
                       .generator_names = names, .generators = &g};
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.allow_hparam_change = true; /* the learning rate of the file's last step */
  LT_OK_OR_FAIL(lt_ckpt_load_training(path, &st, &lo, NULL));
  *gs = lt_generator_get_state(g);
  lt_generator_free(g);
}

/* Every parameter of the two checkpoints is exactly equal. */
static void expect_same_params(const char *a, const char *b) {
  lt_transformer *ma = load_model(a), *mb = load_model(b);
  lt_params *pa = lt_transformer_params(ma), *pb = lt_transformer_params(mb);
  ck_assert_int_eq(lt_params_count(pa), lt_params_count(pb));
  for (int i = 0; i < lt_params_count(pa); i++) {
    const lt_param *x = lt_params_at(pa, i), *y = lt_params_at(pb, i);
    ck_assert_str_eq(x->name, y->name);
    ck_assert_msg(lt_equal(x->value, y->value), "parameter %s differs between %s and %s", x->name, a, b);
  }
  lt_transformer_free(ma);
  lt_transformer_free(mb);
}

static const char *ckpt(const char *dir, long long step) {
  static char buf[2][512];
  static int k;
  k ^= 1;
  snprintf(buf[k], sizeof buf[k], "%s/%s/ckpt-%012lld.h5", tmpdir, dir, step);
  return buf[k];
}

/* A tiny encoder-decoder on the reverse task. */
#define TINY_TASK "--task reverse --task-max-len 6 --task-train 1000 --task-valid 60"
#define TINY_MODEL \
  "--d-model 32 --heads 2 --layers 1 --d-ff 64 --batch 16 --lr 3e-3 --warmup 10 --eval-examples 20 --examples 2"
#define TINY_ENCDEC TINY_TASK " " TINY_MODEL

/* ---- end to end ------------------------------------------------------------ */

START_TEST(tiny_run_learns_and_is_bit_identical) {
  enum { STEPS = 40 };
  char args[1024];
  for (int run = 0; run < 2; run++) {
    snprintf(args, sizeof args, TINY_ENCDEC " --steps %d --eval-every 20 --ckpt-every 20 --threads %d --ckpt-dir '%s'",
             STEPS, run ? 1 : 2, in_tmp(run ? "b" : "a"));
    expect_exit(run_train(args, run ? "b.log" : "a.log"), 0, run ? "b.log" : "a.log");
  }
  expect_in_log("a.log", "final validation at step 40");
  expect_in_log("a.log", "held-out examples (greedy decoding");
  expect_in_log("a.log", "peak RSS");
  double la[STEPS], lb[STEPS], va[STEPS], vb[STEPS];
  long long sa[STEPS], sb[STEPS];
  ck_assert_int_eq(read_csv(in_tmp("a/metrics.csv"), COL_LOSS, la, sa, STEPS), STEPS);
  ck_assert_int_eq(read_csv(in_tmp("b/metrics.csv"), COL_LOSS, lb, sb, STEPS), STEPS);
  double first = 0, last = 0;
  for (int i = 0; i < STEPS; i++) {
    ck_assert_int_eq(sa[i], i + 1);
    ck_assert_msg(la[i] == lb[i], "step %d: loss %.17g in run a, %.17g in run b", i + 1, la[i], lb[i]);
    if (i < 5) first += la[i] / 5;
    if (i >= STEPS - 5) last += la[i] / 5;
  }
  ck_assert_msg(last < 0.8 * first, "the loss did not fall: first 5 steps %g, last 5 %g", first, last);
  read_csv(in_tmp("a/metrics.csv"), COL_VAL_LOSS, va, sa, STEPS);
  read_csv(in_tmp("b/metrics.csv"), COL_VAL_LOSS, vb, sb, STEPS);
  ck_assert(isfinite(va[19]) && isfinite(va[39]) && isnan(va[0]));
  for (int i = 0; i < STEPS; i++)
    ck_assert_msg((isnan(va[i]) && isnan(vb[i])) || va[i] == vb[i], "step %d: validation loss differs", i + 1);
  expect_same_params(ckpt("a", STEPS), ckpt("b", STEPS));
}
END_TEST

/* --dump-data writes the task's pairs; training on them with the flags it
 * prints (--tsv, --valid-tsv, ...) gives the very same run. */
START_TEST(dumped_data_reproduces_the_run) {
  enum { STEPS = 12 };
  char args[2048];
  snprintf(args, sizeof args, TINY_TASK " --dump-data '%s'", in_tmp("data"));
  expect_exit(run_train(args, "dump.log"), 0, "dump.log");
  char *log = slurp(in_tmp("dump.log"));
  const char *key = "the same run from these files: ", *at = strstr(log, key), *end = at ? strstr(at, " (and the") : NULL;
  ck_assert_msg(at && end, "no reproducing command in the output of --dump-data:\n%s", log);
  at += strlen(key);
  ck_assert(!strncmp(at, "train ", 6));
  at += 6;
  char flags[1024];
  snprintf(flags, sizeof flags, "%.*s", (int)(end - at), at);
  free(log);
  const char *tail = " --steps 12 --eval-every 6 --ckpt-every 12 --threads 2 --ckpt-dir";
  snprintf(args, sizeof args, TINY_ENCDEC "%s '%s'", tail, in_tmp("task"));
  expect_exit(run_train(args, "task.log"), 0, "task.log");
  snprintf(args, sizeof args, TINY_MODEL " %s%s '%s'", flags, tail, in_tmp("tsv"));
  expect_exit(run_train(args, "tsv.log"), 0, "tsv.log");
  for (int col = 0; col < 2; col++) {
    int c = col ? COL_VAL_LOSS : COL_LOSS;
    double a[STEPS], b[STEPS];
    long long sa[STEPS], sb[STEPS];
    ck_assert_int_eq(read_csv(in_tmp("task/metrics.csv"), c, a, sa, STEPS), STEPS);
    ck_assert_int_eq(read_csv(in_tmp("tsv/metrics.csv"), c, b, sb, STEPS), STEPS);
    for (int i = 0; i < STEPS; i++)
      ck_assert_msg((isnan(a[i]) && isnan(b[i])) || a[i] == b[i], "step %d: %s %.17g from the task, %.17g from --tsv",
                    i + 1, col ? "validation loss" : "loss", a[i], b[i]);
    if (col) ck_assert(isfinite(a[5]) && isfinite(a[11]));
  }
  expect_same_params(ckpt("task", STEPS), ckpt("tsv", STEPS));
  /* Only a generated task can be dumped. */
  snprintf(args, sizeof args, "--tsv '%s' --dump-data '%s'", in_tmp("data/train.tsv"), in_tmp("d2"));
  ck_assert_int_eq(run_train(args, "dump2.log"), 2);
}
END_TEST

START_TEST(resume_is_bit_exact) {
  enum { N = 16, K = 7 };
  char args[1024];
  /* dropout on (0.1, the default), shuffled batches, two micro-batches per step */
  snprintf(args, sizeof args, TINY_ENCDEC " --accum 2 --steps %d --eval-every 5 --threads 2 --ckpt-dir '%s'", N,
           in_tmp("straight"));
  expect_exit(run_train(args, "straight.log"), 0, "straight.log");
  snprintf(args, sizeof args, TINY_ENCDEC " --accum 2 --steps %d --eval-every 5 --threads 2 --stop-after %d --ckpt-dir '%s'",
           N, K, in_tmp("split"));
  expect_exit(run_train(args, "split1.log"), 0, "split1.log");
  expect_in_log("split1.log", "stopped after step 7");
  /* a new process, another thread count: resumes from the newest checkpoint of the directory */
  snprintf(args, sizeof args, "--resume '%s' --threads 1", in_tmp("split"));
  expect_exit(run_train(args, "split2.log"), 0, "split2.log");
  expect_in_log("split2.log", "resumed from");
  double a[N], b[N];
  long long sa[N], sb[N];
  ck_assert_int_eq(read_csv(in_tmp("straight/metrics.csv"), COL_LOSS, a, sa, N), N);
  ck_assert_int_eq(read_csv(in_tmp("split/metrics.csv"), COL_LOSS, b, sb, N), N);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(sb[i], i + 1);
    ck_assert_msg(a[i] == b[i], "step %d: loss %.17g straight, %.17g resumed", i + 1, a[i], b[i]);
  }
  expect_same_params(ckpt("straight", N), ckpt("split", N));
  /* the optimizer state and the dropout generator too */
  lt_transformer *ma, *mb;
  lt_optimizer *oa, *ob;
  lt_generator_state ga, gb;
  load_training(ckpt("straight", N), &ma, &oa, &ga);
  load_training(ckpt("split", N), &mb, &ob, &gb);
  ck_assert(ga.seed == gb.seed && ga.offset == gb.offset);
  lt_params *p = lt_transformer_params(ma);
  int n_states = 0;
  for (int i = 0; i < lt_params_count(p); i++) {
    const char *name = lt_params_at(p, i)->name;
    for (int k = 0; k < 3; k++) {
      static const char *const states[] = {"exp_avg", "exp_avg_sq", "step"};
      const char *state = states[k];
      lt_tensor *x = lt_optimizer_state(oa, name, state), *y = lt_optimizer_state(ob, name, state);
      ck_assert_msg((x == NULL) == (y == NULL), "optimizer state %s of %s in one run only", state, name);
      if (x) ck_assert_msg(lt_equal(x, y), "optimizer state %s of %s differs", state, name), n_states++;
    }
  }
  ck_assert_int_gt(n_states, 0);
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_transformer_free(ma);
  lt_transformer_free(mb);
}
END_TEST

/* A small English-like text from a fixed grammar (deterministic). */
static void write_text(const char *path, int sentences) {
  static const char *const subj[] = {"the cat", "a dog", "the old man", "my sister", "the bird", "our teacher"};
  static const char *const verb[] = {"sees", "likes", "finds", "follows", "draws", "calls"};
  static const char *const obj[] = {"the house", "a red ball", "the river", "some bread", "the green tree", "a letter"};
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  uint64_t s = 12345;
  for (int i = 0; i < sentences; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    unsigned r = (unsigned)(s >> 33);
    fprintf(f, "%s %s %s.%s", subj[r % 6], verb[(r / 6) % 6], obj[(r / 36) % 6], i % 5 == 4 ? "\n" : " ");
  }
  fclose(f);
}

/* --precision bf16 (autocast): a run resumed in a new process, at another
 * thread count and without the flag (a saved run setting), gives the same
 * losses and parameters bit for bit; and autocast did change the losses. */
START_TEST(bf16_resume_is_bit_exact) {
  enum { N = 8, K = 3 };
  char args[1024];
  snprintf(args, sizeof args, TINY_ENCDEC " --steps %d --eval-every 4 --threads 2 --precision bf16 --ckpt-dir '%s'", N,
           in_tmp("bstraight"));
  expect_exit(run_train(args, "bstraight.log"), 0, "bstraight.log");
  snprintf(args, sizeof args,
           TINY_ENCDEC " --steps %d --eval-every 4 --threads 2 --precision bf16 --stop-after %d --ckpt-dir '%s'", N, K,
           in_tmp("bsplit"));
  expect_exit(run_train(args, "bsplit1.log"), 0, "bsplit1.log");
  snprintf(args, sizeof args, "--resume '%s' --threads 1", in_tmp("bsplit"));
  expect_exit(run_train(args, "bsplit2.log"), 0, "bsplit2.log");
  expect_in_log("bsplit2.log", "resumed from");
  snprintf(args, sizeof args, TINY_ENCDEC " --steps %d --eval-every 4 --threads 2 --ckpt-dir '%s'", N, in_tmp("bf32"));
  expect_exit(run_train(args, "bf32.log"), 0, "bf32.log");
  double a[N], b[N], f[N];
  long long sa[N], sb[N], sf[N];
  ck_assert_int_eq(read_csv(in_tmp("bstraight/metrics.csv"), COL_LOSS, a, sa, N), N);
  ck_assert_int_eq(read_csv(in_tmp("bsplit/metrics.csv"), COL_LOSS, b, sb, N), N);
  ck_assert_int_eq(read_csv(in_tmp("bf32/metrics.csv"), COL_LOSS, f, sf, N), N);
  bool differs = false;
  for (int i = 0; i < N; i++) {
    ck_assert_msg(a[i] == b[i], "step %d: bf16 loss %.17g straight, %.17g resumed", i + 1, a[i], b[i]);
    differs |= a[i] != f[i];
  }
  /* (where autocast leaves the products in f32, the two runs are the same one) */
  ck_assert_msg(differs || !lt_test_autocast_rounds(), "bf16 and f32 runs gave the same losses: autocast did not apply");
  expect_same_params(ckpt("bstraight", N), ckpt("bsplit", N));
}
END_TEST

/* A tiny decoder-only model on the text of write_text. */
#define TINY_LM \
  "--arch decoder-only --d-model 32 --heads 2 --layers 2 --d-ff 64 --max-len 32 --seq-len 32 --batch 8 --lr 3e-3"

/* The same for a decoder-only model under bf16, stopped at half way (N/2)
 * with dropout on: the losses, validation losses and parameters of the
 * resumed run equal the straight run's bit for bit. */
START_TEST(bf16_decoder_only_resume_is_bit_exact) {
  enum { N = 12, K = N / 2 };
  write_text(in_tmp("ltext.txt"), 600);
  char args[2048];
  snprintf(args, sizeof args, TINY_LM " --text '%s' --gen-tokens 0 --steps %d --eval-every 3 --threads 2 --precision bf16 "
           "--ckpt-dir '%s'", in_tmp("ltext.txt"), N, in_tmp("lstraight"));
  expect_exit(run_train(args, "lstraight.log"), 0, "lstraight.log");
  expect_in_log("lstraight.log", "precision bf16");
  expect_in_log("lstraight.log", "bf16 products: ");
  snprintf(args, sizeof args, TINY_LM " --text '%s' --gen-tokens 0 --steps %d --eval-every 3 --threads 2 --precision bf16 "
           "--stop-after %d --ckpt-dir '%s'", in_tmp("ltext.txt"), N, K, in_tmp("lsplit"));
  expect_exit(run_train(args, "lsplit1.log"), 0, "lsplit1.log");
  snprintf(args, sizeof args, "--resume '%s' --threads 1", in_tmp("lsplit"));
  expect_exit(run_train(args, "lsplit2.log"), 0, "lsplit2.log");
  expect_in_log("lsplit2.log", "resumed from");
  expect_in_log("lsplit2.log", "precision bf16"); /* a saved run setting */
  for (int col = 0; col < 2; col++) {
    double a[N], b[N];
    long long sa[N], sb[N];
    ck_assert_int_eq(read_csv(in_tmp("lstraight/metrics.csv"), col ? COL_VAL_LOSS : COL_LOSS, a, sa, N), N);
    ck_assert_int_eq(read_csv(in_tmp("lsplit/metrics.csv"), col ? COL_VAL_LOSS : COL_LOSS, b, sb, N), N);
    for (int i = 0; i < N; i++) {
      ck_assert_int_eq(sb[i], i + 1);
      ck_assert_msg((isnan(a[i]) && isnan(b[i])) || a[i] == b[i], "step %d: bf16 %s %.17g straight, %.17g resumed",
                    i + 1, col ? "validation loss" : "loss", a[i], b[i]);
    }
    if (col) ck_assert(isfinite(a[K - 1]) && isfinite(a[N - 1]));
  }
  expect_same_params(ckpt("lstraight", N), ckpt("lsplit", N));
}
END_TEST

/* Runs generate with args, its standard output into <tmpdir>/<out>; returns
 * the exit status. */
static int run_generate(const char *args, const char *out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s > '%s' 2>'%s.err'", LT_GENERATE_EXE, args, in_tmp(out), in_tmp(out));
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
  return WEXITSTATUS(st);
}

START_TEST(decoder_only_learns_a_text_and_generates) {
  write_text(in_tmp("text.txt"), 1500);
  char args[1024];
  snprintf(args, sizeof args,
           "--arch decoder-only --text '%s' --d-model 32 --heads 2 --layers 2 --d-ff 64 --max-len 32 --seq-len 32 "
           "--batch 8 --steps 300 --eval-every 100 --lr 3e-3 --dropout 0 --gen-tokens 60 --prompt 'the cat' "
           "--threads 2 --ckpt-dir '%s'", in_tmp("text.txt"), in_tmp("lm"));
  expect_exit(run_train(args, "lm.log"), 0, "lm.log");
  double v[300];
  long long st[300];
  ck_assert_int_eq(read_csv(in_tmp("lm/metrics.csv"), COL_VAL_LOSS, v, st, 300), 300);
  ck_assert(isfinite(v[99]) && isfinite(v[299]));
  ck_assert_msg(v[299] < 0.95 * v[99], "validation loss did not fall: %g at step 100, %g at step 300", v[99], v[299]);
  expect_in_log("lm.log", "generated text (greedy, 60 tokens)");
  /* the generated text follows the prompt and is made of the text's characters */
  char *log = slurp(in_tmp("lm.log"));
  char *p = strstr(log, "[the cat]");
  ck_assert_msg(p != NULL, "no generated text in the output");
  char *end = strchr(p, '\n');
  ck_assert(end && end - p > 9 + 20);
  for (char *q = p + 9; q < end; q++) ck_assert_msg(strchr("abcdefghijklmnopqrstuvwxyz .", *q), "odd char in %s", p);
  free(log);
  /* generate --precision bf16 continues the prompts greedily; a bf16 run
   * repeats itself bit for bit, and most continuations equal f32's to the
   * last character: a greedy continuation departs from f32's only where two
   * tokens' logits are within bf16's rounding, and then differs from there
   * on (this model: 6 of 8 prompts identical; docs/mixed-precision.md). */
  static const char prompts[] = "'the cat' 'a dog sees' 'my sister likes' 'the old man' 'our teacher draws the' "
                                "'the bird calls' 'a red' 'the house.'";
  enum { N_PROMPTS = 8 };
  static const char *const outs[] = {"gen_f32.txt", "gen_bf16.txt", "gen_bf16b.txt"};
  char gargs[2048];
  for (int k = 0; k < 3; k++) {
    snprintf(gargs, sizeof gargs, "--checkpoint '%s' --max-len 50 --precision %s %s", ckpt("lm", 300),
             k ? "bf16" : "f32", prompts);
    ck_assert_int_eq(run_generate(gargs, outs[k]), 0);
  }
  char *g32 = slurp(in_tmp(outs[0])), *g16 = slurp(in_tmp(outs[1])), *g16b = slurp(in_tmp(outs[2]));
  ck_assert_msg(!strcmp(g16, g16b), "two bf16 generate runs differ:\n%s\n%s", g16, g16b);
  int same = 0, lines = 0;
  const char *a = g32, *b = g16;
  for (; *a && *b; lines++) {
    size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n"), prefix = 0;
    while (prefix < la && prefix < lb && a[prefix] == b[prefix]) prefix++;
    same += la == lb && prefix == la;
    fprintf(stderr, "generate greedy, prompt %d: bf16 equals f32 for %zu of %zu characters\n", lines + 1, prefix, la);
    a += la + (a[la] == '\n'), b += lb + (b[lb] == '\n');
  }
  ck_assert_msg(lines == N_PROMPTS && !*a && !*b, "%d lines; f32:\n%s\nbf16:\n%s", lines, g32, g16);
  ck_assert_msg(same >= N_PROMPTS / 2, "only %d of %d greedy continuations equal f32's:\nf32:\n%s\nbf16:\n%s", same,
                N_PROMPTS, g32, g16);
  free(g32);
  free(g16);
  free(g16b);
}
END_TEST

START_TEST(sigint_saves_and_resumes) {
  char steps_arg[] = "100000";
  char *argv[] = {LT_TRAIN_EXE, "--task", "reverse", "--task-max-len", "6", "--task-train", "1000", "--task-valid",
                  "60", "--d-model", "32", "--heads", "2", "--layers", "1", "--d-ff", "64", "--batch", "16",
                  "--steps", steps_arg, "--eval-every", "0", "--threads", "1", "--ckpt-dir", (char *)in_tmp("sig"),
                  NULL};
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    if (!freopen(in_tmp("sig.log"), "w", stdout) || !freopen(in_tmp("sig.log"), "a", stderr)) _exit(99);
    execv(LT_TRAIN_EXE, argv);
    _exit(98);
  }
  /* wait until a few steps are in the CSV */
  for (int t = 0; t < 600; t++) {
    usleep(100000);
    FILE *f = fopen(in_tmp("sig/metrics.csv"), "r");
    int lines = 0;
    char buf[4096];
    while (f && fgets(buf, sizeof buf, f)) lines++;
    if (f) fclose(f);
    if (lines >= 4) break;
  }
  kill(pid, SIGINT);
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %d", status);
  expect_in_log("sig.log", "interrupted by SIGINT at step");
  int64_t step;
  char path[512];
  LT_OK_OR_FAIL(lt_ckpt_latest(in_tmp("sig"), "ckpt", true, &step, path, sizeof path));
  ck_assert_msg(step >= 3, "the newest checkpoint is at step %lld", (long long)step);
  /* the run continues from there (a shorter run now: --steps may change on resume) */
  char args[1024];
  snprintf(args, sizeof args, "--resume '%s' --steps %lld --threads 1", in_tmp("sig"), (long long)step + 3);
  expect_exit(run_train(args, "sig2.log"), 0, "sig2.log");
  expect_in_log("sig2.log", "resumed from");
  /* a fast machine gets many steps in before the signal: size by step */
  const int cap = (int)step + 16;
  double *l = malloc(sizeof *l * (size_t)cap);
  long long *s = malloc(sizeof *s * (size_t)cap);
  ck_assert(l && s);
  ck_assert_int_eq(read_csv(in_tmp("sig/metrics.csv"), COL_LOSS, l, s, cap), step + 3);
  free(l);
  free(s);
}
END_TEST

START_TEST(nonfinite_steps_stop_the_run) {
  char args[1024];
  snprintf(args, sizeof args, TINY_ENCDEC " --steps 50 --optim sgd --schedule constant --lr 1e30 --clip 0 "
           "--max-nonfinite 3 --threads 1 --ckpt-dir '%s'", in_tmp("nan"));
  expect_exit(run_train(args, "nan.log"), 3, "nan.log");
  expect_in_log("nan.log", "update skipped");
  expect_in_log("nan.log", "stopping: 3 non-finite steps in a row");
}
END_TEST

/* Standard output on a full disk: the run trains and saves, then exits 1
 * saying that output was lost (never 0 with lost lines). */
START_TEST(stdout_write_failure_exits_1) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' " TINY_ENCDEC " --steps 4 --threads 1 --ckpt-dir '%s' > /dev/full 2> '%s'",
           LT_TRAIN_EXE, in_tmp("full"), in_tmp("full.log"));
  int st = system(cmd);
  ck_assert(st != -1 && WIFEXITED(st));
  expect_exit(WEXITSTATUS(st), 1, "full.log");
  expect_in_log("full.log", "writing the output");
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ckpt-000000000004.h5", in_tmp("full"));
  ck_assert_msg(access(ck, R_OK) == 0, "the final checkpoint %s was not kept", ck);
}
END_TEST

/* A failing hook returns through lt_trainer_fit (train/trainer.h): a read
 * error injected at one call of the data source (tests/fault_loader.c: the
 * begin_step hook's pairs of an encoder-decoder, the micro_batch hook's
 * windows of a decoder-only model in the middle of an accumulation). The
 * run exits 1 with the loader's message under main's "training:" (so it
 * came back from lt_trainer_fit, not from an exit inside the hook), the CSV
 * holds every step before the failure, the newest checkpoint is the one
 * before it and whole, and the run resumes from it to the end. */
static void fault_run(const char *args, const char *dir, int fault_at, int steps, int want_ckpt, const char *loader) {
  char log[64], cmd[4096];
  snprintf(log, sizeof log, "%s.log", dir);
  snprintf(cmd, sizeof cmd, "LT_FAULT_AT=%d '%s' %s --steps %d --threads 1 --ckpt-dir '%s' > '%s' 2>&1", fault_at,
           LT_TRAIN_FAULT_EXE, args, steps, in_tmp(dir), in_tmp(log));
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
  expect_exit(WEXITSTATUS(st), 1, log);
  char want[160];
  snprintf(want, sizeof want, "train: training: next batch: %s: read error injected at call %d", loader, fault_at);
  expect_in_log(log, want);
  int64_t step;
  char path[512];
  LT_OK_OR_FAIL(lt_ckpt_latest(in_tmp(dir), "ckpt", true, &step, path, sizeof path));
  ck_assert_msg(step == want_ckpt, "%s: the newest valid checkpoint is at step %lld, expected %d", dir, (long long)step,
                want_ckpt);
  double l[64];
  long long s[64];
  char csv[600];
  snprintf(csv, sizeof csv, "%s/metrics.csv", in_tmp(dir));
  int rows = read_csv(csv, COL_LOSS, l, s, 64);
  ck_assert_msg(rows == want_ckpt && s[rows - 1] == want_ckpt, "%s: %d CSV rows, the last at step %lld", dir, rows,
                rows ? s[rows - 1] : -1);
  char resume[700];
  snprintf(resume, sizeof resume, "--resume '%s' --threads 1", in_tmp(dir));
  snprintf(log, sizeof log, "%s-resume.log", dir);
  expect_exit(run_train(resume, log), 0, log);
  ck_assert_int_eq(read_csv(csv, COL_LOSS, l, s, 64), steps);
}

START_TEST(a_failing_hook_returns_through_fit) {
  /* encoder-decoder: one pair batch per step, fetched by begin_step; call 5 is step 5's */
  fault_run(TINY_ENCDEC " --eval-every 0 --ckpt-every 2", "fault_pairs", 5, 6, 4, "seq2seq_loader_next");
  /* decoder-only, two micro-batches a step: call 6 is step 3's second, after its first ran forward */
  write_text(in_tmp("fault.txt"), 600);
  char args[1024];
  snprintf(args, sizeof args, "--arch decoder-only --text '%s' --d-model 16 --heads 2 --layers 1 --d-ff 32 --max-len 16 "
           "--seq-len 16 --batch 4 --accum 2 --eval-every 0 --ckpt-every 1 --dropout 0", in_tmp("fault.txt"));
  fault_run(args, "fault_lm", 6, 4, 2, "lm_loader_next");
}
END_TEST

START_TEST(bad_flags_and_data) {
  struct {
    const char *args;
    int code;
    const char *msg;
  } cases[] = {
      {"--bogus", 2, "unknown flag --bogus"},
      {"--d-model abc", 2, "--d-model: 'abc' is not an integer"},
      {"--steps", 2, "--steps needs a value"},
      {"--arch gpt", 2, "--arch: unknown value 'gpt'"},
      {"--lr -1", 2, "--lr -1: must be in (0, 1e+30]"},
      {"--no-steps", 2, "unknown flag --no-steps"},
      {"--d-model 30 --heads 4", 2, "model configuration"},
      {"--task copy --text x", 2, "give one data source"},
      {"--arch decoder-only", 2, "give --text FILE"},
      {"--eval-only", 2, "give --resume PATH"},
      {"--resume /nonexistent/dir", 2, "--resume '/nonexistent/dir'"},
      {"--tsv /nonexistent.tsv", 1, "/nonexistent.tsv"},
      {"positional", 2, "unexpected argument 'positional'"},
      /* every flag is bounded: the message names the flag and its range */
      {"--examples 1e18", 2, "--examples: '1e18' is not an integer in [0, 10000]"},
      {"--examples 1000000000000000000", 2, "--examples 1000000000000000000: must be in [0, 10000]"},
      {"--examples 99999999999999999999", 2, "--examples 99999999999999999999: must be in [0, 10000]"},
      {"--eval-batch 99999999999", 2, "--eval-batch 99999999999: must be in [1, 65536]"},
      {"--accum 9223372036854775807", 2, "--accum 9223372036854775807: must be in [1, 65536]"},
      {"--ckpt-every -1", 2, "--ckpt-every -1: must be in [0, 1000000000000]"},
      {"--eval-every -5", 2, "--eval-every -5: must be in [0, 1000000000000]"},
      {"--dropout nan", 2, "--dropout: 'nan' is not a finite number in [0, 1]"},
      {"--clip inf", 2, "--clip: 'inf' is not a finite number in [0, 1e+06]"},
      {"--task-train=", 2, "--task-train: '' is not an integer in [1, 10000000]"},
      {"--tokenizer words", 2, "--tokenizer: unknown value 'words' (one of: byte, char, bpe)"},
      {"--layers 2000", 2, "--layers 2000: must be in [0, 1024]"},
      /* and across flags: the sizes of a batch (the default --seq-len is --max-len, 512) */
      {"--batch 65536", 2, "--batch 65536 x --seq-len 512: at most 2^24 (16777216) tokens per micro-batch"},
      {"--eval-batch 65536", 2, "--eval-batch 65536 x --seq-len 512: at most 2^24"},
      {"--batch 1024 --accum 65536", 2, "--batch 1024 x --seq-len 512 x --accum 65536: at most 2^32"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[512];
    snprintf(args, sizeof args, "%s --ckpt-dir '%s'", cases[i].args, in_tmp("bad"));
    int rc = run_train(args, "bad.log");
    ck_assert_msg(rc == cases[i].code, "'%s': exit %d, expected %d", cases[i].args, rc, cases[i].code);
    expect_in_log("bad.log", cases[i].msg);
  }
  /* bad data files */
  FILE *f = fopen(in_tmp("notab.tsv"), "w");
  fputs("abc\tcba\nno tab on this line\n", f);
  fclose(f);
  f = fopen(in_tmp("empty.txt"), "w");
  fclose(f);
  f = fopen(in_tmp("latin1.txt"), "w");
  fputs("caf\xe9 au lait\n", f);
  fclose(f);
  char args[1024];
  snprintf(args, sizeof args, "--tsv '%s' --ckpt-dir '%s'", in_tmp("notab.tsv"), in_tmp("bad"));
  ck_assert_int_eq(run_train(args, "bad.log"), 1);
  expect_in_log("bad.log", "line 2 has no tab");
  snprintf(args, sizeof args, "--arch decoder-only --text '%s' --ckpt-dir '%s'", in_tmp("empty.txt"), in_tmp("bad"));
  ck_assert_int_eq(run_train(args, "bad.log"), 1);
  expect_in_log("bad.log", "is empty");
  snprintf(args, sizeof args, "--arch decoder-only --text '%s' --ckpt-dir '%s'", in_tmp("latin1.txt"), in_tmp("bad"));
  ck_assert_int_eq(run_train(args, "bad.log"), 1);
  expect_in_log("bad.log", "invalid UTF-8 at byte 3");
  /* a finished run's directory is not silently reused */
  snprintf(args, sizeof args, TINY_ENCDEC " --steps 2 --threads 1 --ckpt-dir '%s'", in_tmp("used"));
  expect_exit(run_train(args, "used.log"), 0, "used.log");
  ck_assert_int_eq(run_train(args, "used2.log"), 2);
  expect_in_log("used2.log", "already holds checkpoints");
  /* a resumed run keeps its settings */
  snprintf(args, sizeof args, "--resume '%s' --batch 8", in_tmp("used"));
  ck_assert_int_eq(run_train(args, "used3.log"), 2);
  expect_in_log("used3.log", "--batch 8 differs from the checkpoint's 16");
  snprintf(args, sizeof args, "--resume '%s' --eval-only", in_tmp("used"));
  expect_exit(run_train(args, "used4.log"), 0, "used4.log");
  expect_in_log("used4.log", "validation at step 2");
  /* the saved settings are checked against the flags' ranges on resume: a checkpoint whose
   * opt.eval-batch was made huge is refused, naming the setting and the range */
  {
    lt_params *empty = lt_params_new();
    lt_train_state st0 = {.params = empty};
    lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
    lo.non_strict = true;
    lt_ckpt_info *info = NULL;
    LT_OK_OR_FAIL(lt_ckpt_load_training(ckpt("used", 2), &st0, &lo, &info));
    lt_params_free(empty);
    LT_OK_OR_FAIL(lt_ckpt_meta_set_int(info->extra, "opt.eval-batch", 99999999));
    lt_transformer *m = load_model(ckpt("used", 2));
    lt_train_state st = {.params = lt_transformer_params(m), .step = 2};
    LT_OK_OR_FAIL(lt_ckpt_save_training(in_tmp("tampered.h5"), &st, info->config, info->extra, NULL));
    lt_transformer_free(m);
    lt_ckpt_info_free(info);
    snprintf(args, sizeof args, "--resume '%s' --ckpt-dir '%s'", in_tmp("tampered.h5"), in_tmp("tampered"));
    ck_assert_int_eq(run_train(args, "tampered.log"), 1);
    expect_in_log("tampered.log", "the saved setting 'opt.eval-batch' is out of range: --eval-batch 99999999: "
                  "must be in [1, 65536]");
  }
}
END_TEST

/* ---- the library helpers ----------------------------------------------------- */

static lt_transformer *tiny_model(lt_tf_arch arch, int64_t V) {
  lt_tf_config c = lt_tf_config_default(arch);
  c.vocab_size = V, c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 32, c.max_len = 24;
  c.n_enc_layers = arch == LT_TF_DECODER_ONLY ? 0 : 1;
  c.n_dec_layers = arch == LT_TF_ENCODER_ONLY ? 0 : 1;
  lt_generator *g = lt_generator_new(7);
  lt_transformer *m = lt_transformer_new(&c, g);
  lt_generator_free(g);
  ck_assert_msg(m != NULL, "%s", lt_last_error());
  return m;
}

/* Greedy decoding with an encoder-decoder as train's validation runs it:
 * the tokens after <bos> (new [B, L]), or NULL with the error set. */
static lt_tensor *greedy_decode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *mask, int64_t max_new,
                                int64_t eos) {
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = max_new, o.eos_id = eos;
  lt_generate_result r = {0};
  if (lt_transformer_generate(m, src, mask, NULL, &o, NULL, &r) != LT_OK) return NULL;
  lt_tensor *y = r.tokens;
  r.tokens = NULL;
  lt_generate_result_free(&r);
  return y;
}

/* A decoder-only continuation as train's text sample makes it (greedy when
 * temperature <= 0, else sampled; never stopping at <eos>): the prompt
 * followed by the n_new tokens (new [B, P + n_new]), or NULL with the error set. */
static lt_tensor *lm_generate(const lt_transformer *m, const lt_tensor *prompt, int64_t n_new, int64_t context,
                              double temperature, int64_t top_k, lt_generator *g) {
  lt_generate_opts o = lt_generate_defaults();
  o.strategy = temperature > 0 ? LT_GENERATE_SAMPLE : LT_GENERATE_GREEDY;
  o.temperature = temperature > 0 ? temperature : 1.0;
  o.top_k = top_k, o.gen = g, o.max_new = n_new, o.eos_id = -1;
  lt_tf_generate_opts t = lt_tf_generate_defaults();
  t.context = context;
  lt_generate_result r = {0};
  if (lt_transformer_generate(m, NULL, NULL, prompt, &o, &t, &r) != LT_OK) return NULL;
  lt_tensor *p64 = lt_to_dtype(prompt, LT_DTYPE_I64);
  lt_tensor *y = p64 ? lt_cat(2, (lt_tensor *const[]){p64, r.tokens}, 1) : NULL;
  lt_tensor_free(p64);
  lt_generate_result_free(&r);
  return y;
}

START_TEST(greedy_decode_matches_teacher_forcing) {
  const int64_t V = 11, B = 3, S = 5;
  lt_transformer *m = tiny_model(LT_TF_ENCODER_DECODER, V);
  int64_t src_ids[] = {4, 5, 6, 7, 8, 9, 10, 4, 0, 0, 5, 5, 5, 5, 5};
  bool pad[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
  lt_tensor *src = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, S), src_ids));
  lt_tensor *mask = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(B, S), pad));
  lt_tensor *y = LT_NN(greedy_decode(m, src, mask, 6, LT_TOKEN_EOS));
  ck_assert_int_eq(y->ndim, 2);
  ck_assert_int_eq(y->shape[0], B);
  ck_assert(y->shape[1] >= 1 && y->shape[1] <= 6);
  const int64_t L = y->shape[1];
  /* teacher forcing on <bos> + y[:, :-1] gives y as the argmax of every live position */
  int64_t in[3 * 6], out[3 * 6], am[3 * 6];
  LT_OK_OR_FAIL(lt_tensor_read(y, LT_DTYPE_I64, out, B * L));
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < L; t++) in[b * L + t] = t == 0 ? LT_TOKEN_BOS : out[b * L + t - 1];
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *tgt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, L), in));
  lt_tensor *mem = LT_NN(lt_transformer_encode(m, src, mask, NULL));
  lt_tensor *logits = LT_NN(lt_transformer_decode(m, tgt, NULL, mem, mask, 0, NULL));
  lt_tensor *arg = LT_NN(lt_argmax(logits, -1, false));
  LT_OK_OR_FAIL(lt_tensor_read(arg, LT_DTYPE_I64, am, B * L));
  lt_set_grad_enabled(prev);
  for (int64_t b = 0; b < B; b++) {
    bool done = false;
    for (int64_t t = 0; t < L; t++) {
      if (done) {
        ck_assert_int_eq(out[b * L + t], LT_TOKEN_PAD);
        continue;
      }
      ck_assert_msg(out[b * L + t] == am[b * L + t], "row %lld position %lld: decoded %lld, argmax %lld",
                    (long long)b, (long long)t, (long long)out[b * L + t], (long long)am[b * L + t]);
      done = out[b * L + t] == LT_TOKEN_EOS;
    }
  }
  /* errors: wrong model, bad shapes, bad ids; nothing is made */
  lt_transformer *gpt = tiny_model(LT_TF_DECODER_ONLY, V);
  LT_EXPECT_NULL_ERR(greedy_decode(gpt, src, mask, 6, 2), LT_ERR_INVALID, "decoder-only");
  LT_EXPECT_NULL_ERR(greedy_decode(m, src, mask, -1, 2), LT_ERR_INVALID, "max_new");
  LT_EXPECT_NULL_ERR(greedy_decode(m, src, mask, 6, V), LT_ERR_INVALID, "eos");
  lt_tensor *fsrc = LT_NN(lt_to_dtype(src, LT_DTYPE_F32));
  LT_EXPECT_NULL_ERR(greedy_decode(m, fsrc, mask, 6, 2), LT_ERR_DTYPE, "src");
  lt_tensor *short_mask = LT_NN(lt_narrow(mask, 1, 0, 3));
  LT_EXPECT_NULL_ERR(greedy_decode(m, src, short_mask, 6, 2), LT_ERR_SHAPE, "src_pad");
  LT_EXPECT_NULL_ERR(greedy_decode(NULL, src, mask, 6, 2), LT_ERR_NULL, "model");
  /* max_new beyond max_len is an error (train caps it); max_len itself works */
  LT_EXPECT_NULL_ERR(greedy_decode(m, src, mask, 1000, V - 1), LT_ERR_INVALID, "max_new 1000");
  lt_tensor *y2 = LT_NN(greedy_decode(m, src, mask, 24, V - 1));
  ck_assert(y2->shape[1] >= 1 && y2->shape[1] <= 24);
  lt_tensor *tensors[] = {src, mask, y, tgt, mem, logits, arg, fsrc, short_mask, y2};
  for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) lt_tensor_free(tensors[i]);
  lt_transformer_free(m);
  lt_transformer_free(gpt);
}
END_TEST

START_TEST(generate_greedy_and_sampled) {
  const int64_t V = 9;
  lt_transformer *m = tiny_model(LT_TF_DECODER_ONLY, V);
  lt_tensor *prompt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), (int64_t[]){4, 5, 6, 7, 7, 8}));
  /* greedy: 30 new tokens (beyond max_len 24: the context window slides) */
  lt_tensor *y = LT_NN(lm_generate(m, prompt, 30, 0, 0.0, 0, NULL));
  ck_assert_int_eq(y->shape[0], 2);
  ck_assert_int_eq(y->shape[1], 33);
  int64_t ids[66];
  LT_OK_OR_FAIL(lt_tensor_read(y, LT_DTYPE_I64, ids, 66));
  ck_assert(ids[0] == 4 && ids[2] == 6 && ids[33] == 7 && ids[35] == 8);
  /* the first new token is the argmax of the prompt's last position */
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *logits = LT_NN(lt_transformer_decode(m, prompt, NULL, NULL, NULL, 0, NULL));
  lt_tensor *last = LT_NN(lt_select(logits, 1, 2));
  lt_tensor *arg = LT_NN(lt_argmax(last, -1, false));
  lt_tensor_free(last);
  lt_set_grad_enabled(prev);
  int64_t a[2];
  LT_OK_OR_FAIL(lt_tensor_read(arg, LT_DTYPE_I64, a, 2));
  ck_assert_int_eq(ids[3], a[0]);
  ck_assert_int_eq(ids[36], a[1]);
  /* a context of 3 tokens: the second new token comes from the window y[:, 1:4] alone */
  lt_tensor *y3 = LT_NN(lm_generate(m, prompt, 2, 3, 0.0, 0, NULL));
  int64_t i3[10];
  LT_OK_OR_FAIL(lt_tensor_read(y3, LT_DTYPE_I64, i3, 10));
  ck_assert(i3[3] == a[0] && i3[8] == a[1]);
  prev = lt_set_grad_enabled(false);
  lt_tensor *view = LT_NN(lt_narrow(y3, 1, 1, 3));
  lt_tensor *win = LT_NN(lt_contiguous(view));
  lt_tensor *wl = LT_NN(lt_transformer_decode(m, win, NULL, NULL, NULL, 0, NULL));
  lt_tensor *wlast = LT_NN(lt_select(wl, 1, 2));
  lt_tensor *warg = LT_NN(lt_argmax(wlast, -1, false));
  lt_set_grad_enabled(prev);
  int64_t w2[2];
  LT_OK_OR_FAIL(lt_tensor_read(warg, LT_DTYPE_I64, w2, 2));
  ck_assert_int_eq(i3[4], w2[0]);
  ck_assert_int_eq(i3[9], w2[1]);
  /* sampling: reproducible from the generator state; top_k 1 is greedy */
  lt_generator *g = lt_generator_new(3);
  lt_generator_state s0 = lt_generator_get_state(g);
  lt_tensor *s1 = LT_NN(lm_generate(m, prompt, 10, 0, 1.5, 0, g));
  LT_OK_OR_FAIL(lt_generator_set_state(g, s0));
  lt_tensor *s2 = LT_NN(lm_generate(m, prompt, 10, 0, 1.5, 0, g));
  ck_assert(lt_equal(s1, s2));
  lt_tensor *k1 = LT_NN(lm_generate(m, prompt, 10, 0, 1.0, 1, g));
  lt_tensor *gr = LT_NN(lm_generate(m, prompt, 10, 0, 0.0, 0, NULL));
  ck_assert(lt_equal(k1, gr));
  int64_t sv[26];
  LT_OK_OR_FAIL(lt_tensor_read(s1, LT_DTYPE_I64, sv, 26));
  for (int i = 0; i < 26; i++) ck_assert(sv[i] >= 0 && sv[i] < V);
  /* errors */
  LT_EXPECT_NULL_ERR(lm_generate(m, prompt, 5, 0, 1.0, 0, NULL), LT_ERR_NULL, "generator");
  LT_EXPECT_NULL_ERR(lm_generate(m, prompt, -1, 0, 0.0, 0, NULL), LT_ERR_INVALID, "max_new");
  lt_transformer *s2s = tiny_model(LT_TF_ENCODER_DECODER, V);
  LT_EXPECT_NULL_ERR(lm_generate(s2s, prompt, 5, 0, 0.0, 0, NULL), LT_ERR_INVALID,
                     "prompt given to an encoder-decoder");
  lt_tensor *ts[] = {prompt, y, logits, arg, s1, s2, k1, gr, y3, view, win, wl, wlast, warg};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lt_tensor_free(ts[i]);
  lt_generator_free(g);
  lt_transformer_free(m);
  lt_transformer_free(s2s);
}
END_TEST

START_TEST(config_meta_round_trip) {
  for (int arch = 0; arch < 3; arch++) {
    lt_tf_config c = lt_tf_config_default((lt_tf_arch)arch);
    c.vocab_size = 77, c.n_classes = 3, c.norm = LT_TF_RMS_NORM, c.pos = LT_TF_POS_ROPE, c.act = LT_ACT_SILU;
    c.swiglu = true, c.n_kv_heads = 2, c.dropout = 0.25, c.rope_base = 500000;
    LT_OK_OR_FAIL(lt_tf_config_validate(&c));
    lt_ckpt_meta *meta = lt_ckpt_meta_new();
    LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
    const char *s;
    LT_OK_OR_FAIL(lt_ckpt_meta_get_string(meta, "arch", &s));
    ck_assert_str_eq(s, lt_tf_arch_name((lt_tf_arch)arch));
    LT_OK_OR_FAIL(lt_ckpt_meta_get_string(meta, "pos", &s));
    ck_assert_str_eq(s, "rope");
    lt_tf_config d;
    memset(&d, 0xab, sizeof d);
    LT_OK_OR_FAIL(lt_tf_config_from_meta(meta, &d));
    ck_assert(d.arch == c.arch && d.vocab_size == c.vocab_size && d.d_model == c.d_model && d.n_heads == c.n_heads &&
              d.n_kv_heads == c.n_kv_heads && d.n_enc_layers == c.n_enc_layers && d.n_dec_layers == c.n_dec_layers &&
              d.d_ff == c.d_ff && d.max_len == c.max_len && d.n_classes == c.n_classes && d.dropout == c.dropout &&
              d.norm == c.norm && d.pre_norm == c.pre_norm && d.act == c.act && d.swiglu == c.swiglu &&
              d.pos == c.pos && d.tie_embeddings == c.tie_embeddings && d.scale_embeddings == c.scale_embeddings &&
              d.bias == c.bias && d.norm_eps == c.norm_eps && d.rope_base == c.rope_base && d.pad_id == c.pad_id);
    /* a wrong kind, a bad name, a missing key: errors naming it, *cfg untouched */
    lt_tf_config before = d;
    LT_OK_OR_FAIL(lt_ckpt_meta_set_string(meta, "d_model", "big"));
    LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_FORMAT, "'d_model' is string, expected int");
    LT_OK_OR_FAIL(lt_ckpt_meta_set_int(meta, "d_model", c.d_model));
    LT_OK_OR_FAIL(lt_ckpt_meta_set_string(meta, "norm", "batchnorm"));
    LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_INVALID, "unknown norm 'batchnorm'");
    ck_assert(memcmp(&before, &d, sizeof d) == 0);
    lt_ckpt_meta_free(meta);
    meta = lt_ckpt_meta_new();
    LT_OK_OR_FAIL(lt_ckpt_meta_set_string(meta, "arch", "decoder-only"));
    LT_EXPECT_ERR(lt_tf_config_from_meta(meta, &d), LT_ERR_FORMAT, "lacks 'norm'");
    lt_ckpt_meta_free(meta);
  }
  lt_tf_arch a;
  LT_OK_OR_FAIL(lt_tf_arch_parse("encdec", &a));
  ck_assert_int_eq(a, LT_TF_ENCODER_DECODER);
  LT_OK_OR_FAIL(lt_tf_arch_parse("decoder-only", &a));
  ck_assert_int_eq(a, LT_TF_DECODER_ONLY);
  LT_EXPECT_ERR(lt_tf_arch_parse("gpt", &a), LT_ERR_INVALID, "encoder-decoder, decoder-only, encoder-only");
  ck_assert_int_eq(a, LT_TF_DECODER_ONLY);
  ck_assert_str_eq(lt_tf_act_name(LT_ACT_GELU_TANH), "gelu_tanh");
  ck_assert_str_eq(lt_tf_norm_name((lt_tf_norm)7), "unknown");
}
END_TEST

/* --recompute attention and layer give the losses, validation losses and
 * final parameters of --recompute none bit for bit (decoder-only, dropout on,
 * bf16 autocast, two micro-batches a step); --chunked-head gives the same
 * first loss within 1e-6 and a falling loss, and is kept across a resume. */
START_TEST(recompute_and_chunked_head_runs) {
  enum { N = 6 };
  write_text(in_tmp("rtext.txt"), 400);
  const char *modes[] = {"none", "attention", "layer"};
  double l[3][N], v[3][N];
  long long st[N];
  char args[2048], dir[64], log[64];
  for (int k = 0; k < 4; k++) {
    snprintf(dir, sizeof dir, "rc%d", k);
    snprintf(log, sizeof log, "rc%d.log", k);
    snprintf(args, sizeof args, TINY_LM " --text '%s' --gen-tokens 0 --steps %d --eval-every 3 --threads 2 --dropout 0.1 "
             "--precision bf16 --accum 2 %s%s --ckpt-dir '%s'", in_tmp("rtext.txt"), N, k < 3 ? "--recompute " : "",
             k < 3 ? modes[k] : "--chunked-head --stop-after 3", in_tmp(dir));
    expect_exit(run_train(args, log), 0, log);
    if (k == 3) break;
    ck_assert_int_eq(read_csv(lt_test_join(in_tmp(dir), "metrics.csv"), COL_LOSS, l[k], st, N), N);
    ck_assert_int_eq(read_csv(lt_test_join(in_tmp(dir), "metrics.csv"), COL_VAL_LOSS, v[k], st, N), N);
  }
  for (int k = 1; k < 3; k++) {
    for (int i = 0; i < N; i++) {
      ck_assert_msg(l[k][i] == l[0][i], "--recompute %s: step %d loss %.17g, none %.17g", modes[k], i + 1, l[k][i],
                    l[0][i]);
      ck_assert_msg((isnan(v[k][i]) && isnan(v[0][i])) || v[k][i] == v[0][i], "--recompute %s: step %d validation %.17g, "
                    "none %.17g", modes[k], i + 1, v[k][i], v[0][i]);
    }
    char a[64];
    snprintf(a, sizeof a, "rc%d", k);
    expect_same_params(ckpt("rc0", N), ckpt(a, N));
  }
  /* the chunked head, stopped at 3 and resumed (the flag is a saved run setting) */
  snprintf(args, sizeof args, "--resume '%s' --threads 1", in_tmp("rc3"));
  expect_exit(run_train(args, "rc3b.log"), 0, "rc3b.log");
  double c[N];
  ck_assert_int_eq(read_csv(in_tmp("rc3/metrics.csv"), COL_LOSS, c, st, N), N);
  ck_assert_msg(fabs(c[0] - l[0][0]) <= 1e-6 * fabs(l[0][0]), "--chunked-head: first loss %.9g, plain %.9g", c[0], l[0][0]);
  ck_assert_msg(c[N - 1] < c[0], "--chunked-head: the loss went from %g to %g", c[0], c[N - 1]);
}
END_TEST

/* T5's options from the command line: a relative-position encoder-decoder
 * trains, and its checkpoint keeps every T5 field. */
START_TEST(t5_flags_train_and_checkpoint) {
  char args[2048];
  snprintf(args, sizeof args, TINY_ENCDEC " --pos relative --rel-buckets 8 --rel-max-distance 16 --attn-scale 1"
           " --head-rescale --tie --norm rmsnorm --pre-norm --no-bias --no-scale-emb --act relu --no-swiglu --steps 3 --threads 2 --ckpt-dir '%s'", in_tmp("t5"));
  expect_exit(run_train(args, "t5.log"), 0, "t5.log");
  lt_transformer *m = load_model(ckpt("t5", 3));
  const lt_tf_config *c = lt_transformer_config(m);
  ck_assert_int_eq(c->pos, LT_TF_POS_RELATIVE);
  ck_assert_int_eq(c->rel_buckets, 8);
  ck_assert_int_eq(c->rel_max_distance, 16);
  ck_assert(c->attn_scale == 1.0);
  ck_assert(c->head_rescale);
  lt_transformer_free(m);
  /* export as an HF T5 directory, which generate reads back (its answers do not yet equal the
   * checkpoint's: an open defect, see the t5train report) */
  char cmd[4096], src[512], hf[512];
  snprintf(src, sizeof src, "%s", ckpt("t5", 3));
  snprintf(hf, sizeof hf, "%s", in_tmp("t5hf"));
  snprintf(cmd, sizeof cmd, "'%s' --checkpoint '%s' --format hf --out '%s' > /dev/null 2>&1", LT_EXPORT_EXE, src, hf);
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "export failed: %s", cmd);
  snprintf(args, sizeof args, "--checkpoint '%s' 12 305", src);
  expect_exit(run_generate(args, "t5a.out"), 0, "t5a.out.err");
  snprintf(args, sizeof args, "--checkpoint '%s' 12 305", hf);
  expect_exit(run_generate(args, "t5b.out"), 0, "t5b.out.err");
  char *b = slurp(in_tmp("t5b.out"));
  ck_assert_msg(strchr(b, '\n') != NULL, "generate on the exported T5 wrote no line: '%s'", b);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("train_e2e");
  TCase *lib = tcase_create("generate");
  tcase_add_test(lib, greedy_decode_matches_teacher_forcing);
  tcase_add_test(lib, generate_greedy_and_sampled);
  tcase_add_test(lib, config_meta_round_trip);
  suite_add_tcase(s, lib);
  TCase *tc = tcase_create("program");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, tiny_run_learns_and_is_bit_identical);
  tcase_add_test(tc, resume_is_bit_exact);
  tcase_add_test(tc, bf16_resume_is_bit_exact);
  tcase_add_test(tc, bf16_decoder_only_resume_is_bit_exact);
  tcase_add_test(tc, dumped_data_reproduces_the_run);
  tcase_add_test(tc, decoder_only_learns_a_text_and_generates);
  tcase_add_test(tc, recompute_and_chunked_head_runs);
  tcase_add_test(tc, sigint_saves_and_resumes);
  tcase_add_test(tc, nonfinite_steps_stop_the_run);
  tcase_add_test(tc, bad_flags_and_data);
  tcase_add_test(tc, stdout_write_failure_exits_1);
  suite_add_tcase(s, tc);
  TCase *hooks = tcase_create("hooks");
  tcase_add_checked_fixture(hooks, setup, teardown);
  tcase_set_timeout(hooks, 300);
  tcase_add_test(hooks, a_failing_hook_returns_through_fit);
  suite_add_tcase(s, hooks);
  TCase *t5 = tcase_create("t5");
  tcase_add_checked_fixture(t5, setup, teardown);
  tcase_set_timeout(t5, 300);
  tcase_add_test(t5, t5_flags_train_and_checkpoint);
  suite_add_tcase(s, t5);
  return lt_test_run(s);
}
