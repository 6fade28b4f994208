/*
 * models/transformer/programs/train_main.c: `train`, the command-line program that
 * trains a Transformer (models/transformer/transformer.h) on a built-in task,
 * a TSV parallel corpus or a text file, and evaluates it.
 *
 *   train                                  # the default: an encoder-decoder on
 *                                          # numbers in words, about 5 minutes
 *   train --task date --steps 1500
 *   train --arch decoder-only --text /usr/share/common-licenses/GPL-3
 *   train --resume runs/RUN                # continue a run from its last checkpoint
 *   train --resume runs/RUN --eval-only    # evaluate a checkpoint
 *   train --help                           # every flag
 *
 * What it does, in order: parse the flags (one table, in train_cli.c, drives
 * parsing, --help, saving the settings into checkpoints and checking them on
 * resume); load or generate the data and build the tokenizer (the model
 * library's data.h); build the model and the optimizer; then hand them to
 * the library's training loop (train/trainer.h: the step, resume, the
 * progress line, the CSV, checkpoints, Ctrl-C) with this program's part as
 * hooks: the loss of a micro-batch, the validation (evaluate.h: loss, token
 * accuracy and exact match by greedy decoding) and the values it keeps in
 * checkpoints (settings, tokenizer, class labels); finally print decoded
 * examples next to their references. A hook that fails returns its status
 * (train/trainer.h): lt_trainer_fit returns it, and only main exits. docs/train.md documents the flags, the
 * CSV columns, the checkpoint contents and the measured results.
 *
 * Exit codes (cli/cli.h): 0 done (also after --stop-after), 1 a runtime or
 * data error (a full disk or a file over the size limit included: SIGXFSZ is
 * ignored), 2 a bad command line or configuration, 3 stopped after too many
 * non-finite steps in a row, 128 + signal number after SIGINT / SIGTERM (the
 * checkpoint is saved first). The flags, their ranges and --help come from one
 * table (train_cli.c) read by cli/cli.h.
 *
 * What this is not: a distributed trainer. Everything runs on the CPU threads
 * of one process, in f32, or with --precision bf16 its matrix products in bf16
 * with f32 accumulation (autocast; the weights, gradients and optimizer state
 * stay f32, so checkpoints are the same either way).
 */
#include "cli/cli.h"
#include "cli/cli_ckpt.h"
#include "libtensor.h"
#include "models/transformer/config.h"
#include "models/transformer/load.h"
#include "models/transformer/data.h"
#include "models/transformer/evaluate.h"
#include "models/transformer/generate.h"
#include "models/transformer/hf.h"
#include "models/transformer/internal.h" /* lt__tf_fail, LT__TF_TRY: a failing hook returns its status */
#include "models/transformer/programs/train_cli.h"
#include "models/transformer/transformer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h> /* _exit */
#include <time.h>

#define PROG "train"
#define CKPT_PREFIX LT_TF_CKPT_PREFIX

/* The exit codes (cli/cli.h has them all) under this file's short names. */
enum { EXIT_DATA = LT_CLI_EXIT_FAILURE, EXIT_USAGE = LT_CLI_EXIT_USAGE, EXIT_NONFINITE = LT_CLI_EXIT_NONFINITE };

/* ======================================================================== */
/* Errors: a program may exit (the library never does)                     */
/* ======================================================================== */

static lt_trainer *g_trainer; /* its progress line is cleared before a message */

/* The error exit and checked allocation of cli/cli.h under this file's short
 * names; main's lt_cli_init(PROG, end_line) ends a progress line before a
 * message. */
#define die lt_cli_die
#define xmalloc lt_cli_xmalloc
#define xstrdup lt_cli_xstrdup

static void end_line(void) { lt_trainer_end_line(g_trainer); }

/* A libtensor call failed: its message names the op and what was wrong. */
static _Noreturn void die_lt(int code, const char *what) {
  die(code, "%s: %s", what, lt_last_error());
}

#define TRY(code, expr, what)                    \
  do {                                           \
    if ((expr) != LT_OK) die_lt((code), (what)); \
  } while (0)

/* Paths: formatted into PATH_LEN bytes (train_cli.h); longer is an error, never a silent cut. */
static void fmt_path(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fmt_path(char *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, PATH_LEN, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= PATH_LEN) die(EXIT_USAGE, "a path is longer than %d bytes", PATH_LEN - 1);
}

/* "4m05s", "1h02m", "12.3s", as the progress line writes them */
#define DUR(s) lt_trainer_fmt_duration((s), (char[32]){0}, 32)

/* Resident set size at its peak, in MB. */
static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* ======================================================================== */
/* Data (models/transformer/data.h)                                         */
/* ======================================================================== */

/* Loads or generates the data. tok (from a checkpoint) may be NULL: then it
 * is built from the training text. */
static void load_data(const options *o, lt_tf_data *D, lt_tokenizer *tok) {
  lt_tf_data_opts d = data_opts(o);
  bool bad_config;
  lt_status s = lt_tf_data_read(&d, D, &bad_config);
  if (D->skipped_lines) printf("%s: skipped %lld bad lines (--skip-bad-lines)\n", o->tsv, (long long)D->skipped_lines);
  if (s != LT_OK) {
    lt_tokenizer_free(tok);
    die(bad_config ? EXIT_USAGE : EXIT_DATA, "%s", lt_last_error());
  }
  if (lt_tf_data_prepare(&d, D, tok) != LT_OK) die(EXIT_DATA, "%s", lt_last_error());
  if (D->affected_train || D->affected_valid)
    printf("%s: %s %lld training and %lld validation examples (--seq-len %lld, --overlong %s%s)\n", D->name,
           o->overlong == LT_OVERLONG_TRUNCATE ? "truncated" : "skipped", (long long)D->affected_train,
           (long long)D->affected_valid, (long long)o->seq_len, overlong_ename(o->overlong),
           D->kind == LT_TF_DATA_CLASSIFY ? "; or unknown label" : "");
}

/* --dump-data DIR: the generated task's pairs as DIR/train.tsv and
 * DIR/valid.tsv, and the flags with which --tsv reproduces this run (the
 * defaults that follow from a task rather than a corpus: dropout, tokenizer). */
static void dump_data(const options *o, const lt_tf_data *D) {
  const char *dir = o->dump_data;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) die(EXIT_DATA, "--dump-data: cannot create '%s': %s", dir, strerror(errno));
  char train[PATH_LEN], valid[PATH_LEN];
  if (snprintf(train, sizeof train, "%s/train.tsv", dir) >= (int)sizeof train ||
      snprintf(valid, sizeof valid, "%s/valid.tsv", dir) >= (int)sizeof valid)
    die(EXIT_USAGE, "--dump-data: the path '%s' is too long", dir);
  TRY(EXIT_DATA, lt_text_pairs_save_tsv(D->train_text, train), "--dump-data: the training pairs");
  TRY(EXIT_DATA, lt_text_pairs_save_tsv(D->valid_text, valid), "--dump-data: the validation pairs");
  printf("%s: wrote %lld training pairs to %s and %lld validation pairs to %s\n"
         "the same run from these files: %s --tsv '%s' --valid-tsv '%s' --dropout %.17g --tokenizer %s "
         "--tokenizer-from %s (and the other flags of this command)\n",
         D->name, (long long)lt_text_pairs_count(D->train_text), train, (long long)lt_text_pairs_count(D->valid_text),
         valid, PROG, train, valid, o->dropout, tok_ename(o->tokenizer), from_ename(o->tokenizer_from));
}

/* ======================================================================== */
/* The run: the model, its data, and what the hooks need                    */
/* ======================================================================== */

typedef struct run {
  options o;
  bool given[MAX_OPTS];
  lt_tf_data D;
  lt_tf_config cfg;
  lt_ckpt_meta *cfg_meta;     /* cfg as checkpoint attributes */
  lt_transformer *model;
  lt_params *params;
  lt_optim_config oc;
  lt_optimizer *opt;
  lt_schedule sched;
  lt_generator *dropout_gen;  /* dropout draws (saved as "dropout") */
  lt_generator *sample_gen;   /* sampling of generated text (not training state) */
  int64_t step;               /* --eval-only: the checkpoint's step */
  char dir[PATH_LEN];         /* run directory */
  char csv_path[PATH_LEN];
  /* the micro-batches of the current step (pairs: all fetched first, weights need the total) */
  lt_seq2seq_batch *mb;       /* [accum], owned by the step's lt_scope */
  int64_t *mb_tokens;         /* [accum] tokens of each (real source + target), this rank's rows */
  int64_t *mb_n;              /* [accum] target tokens (classification: examples) of this rank's rows */
  int64_t mb_total;           /* target tokens (classification: examples) of the step, all ranks */
  /* validation */
  lt_tf_eval_result E;       /* the newest */
  char **outs;                /* decoded examples of the final validation [n_pool] */
  int64_t n_pool;
  lt_trainer *trainer;
} run;

static run R; /* global so that everything stays reachable (and leak-checked) whatever the exit path */

/* ---- evaluation ------------------------------------------------------------ */

/* Validation on every held-out example into *E; exact match on the first n_exact (seq2seq). */
static lt_status evaluate(run *r, int64_t n_exact, char **out, int64_t n_out, lt_tf_eval_result *E) {
  return lt_tf_evaluate(r->model, &r->D, r->o.eval_batch, n_exact, out, n_out, E);
}


/* ======================================================================== */
/* The hooks of the training loop (train/trainer.h)                         */
/* ======================================================================== */
/* A hook that fails returns its status with the message set ("<what>:
 * <the call's message>", HOOK_TRY); lt_trainer_fit cleans up the step and
 * returns it, and main exits after it (a hook never exits). */
#define HOOK_TRY(expr, what) LT__TF_TRY(expr, what)

static const char *const GEN_NAMES[] = {"dropout"};
/* The CSV's validation columns. */
static const lt_trainer_metric METRICS[] = {{"val_loss", NULL}, {"val_token_acc", NULL}, {"val_exact_match", "%.6f"}};

/* Number of false entries of a bool mask (the real tokens of a padding mask) into *n. */
static lt_status count_false(const lt_tensor *mask, int64_t *n) {
  lt_tensor *c = lt_contiguous(mask);
  if (!c) return lt__tf_fail("mask");
  *n = 0;
  const bool *p = c->data;
  for (int64_t i = 0; i < c->numel; i++) *n += !p[i];
  lt_tensor_free(c);
  return LT_OK;
}

/* Number of targets of a labels tensor (the entries that are not LT_IGNORE_INDEX) into *n. */
static lt_status count_targets(const lt_tensor *labels, int64_t *n) {
  lt_tensor *c = lt_contiguous(labels);
  if (!c) return lt__tf_fail("labels");
  *n = 0;
  const int64_t *p = c->data;
  for (int64_t i = 0; i < c->numel; i++) *n += p[i] != LT_IGNORE_INDEX;
  lt_tensor_free(c);
  return LT_OK;
}

/* This rank's rows [b0, b0 + nb) of a global batch: views (the step's scope frees them). */
static lt_status narrow_pairs(lt_seq2seq_batch *b, int64_t b0, int64_t nb) {
  lt_tensor **t[] = {&b->src, &b->src_mask, &b->tgt_in, &b->tgt_mask, &b->labels};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (*t[i] && !(*t[i] = lt_narrow(*t[i], 0, b0, nb))) return lt__tf_fail("this rank's slice of the batch");
  return LT_OK;
}

/* Pairs: all micro-batches of the step first, since each one's weight is its
 * share of the step's target tokens (classification: examples). With N ranks
 * every rank draws the same global batches (N x --batch pairs) and keeps its
 * rows (lt_dist_shard); the step's total is that of the global batches, so
 * known on every rank without a message (the count DDP users allreduce). */
static lt_status hook_begin_step(void *user, int64_t step, int64_t accum) {
  run *r = user;
  if (r->D.kind == LT_TF_DATA_LM) return LT_OK;
  const bool classify = r->D.kind == LT_TF_DATA_CLASSIFY;
  r->mb_total = 0;
  for (int64_t a = 0; a < accum; a++) {
    lt_seq2seq_batch *b = &r->mb[a];
    HOOK_TRY(lt_seq2seq_loader_next(r->D.sl, b), "next batch");
    r->mb_total += classify ? b->src->shape[0] : b->n_tokens;
    bool none = false; /* this rank has no row of the batch */
    if (lt_dist_size() > 1) {
      int64_t b0, nb;
      lt_dist_shard(b->src->shape[0], &b0, &nb);
      /* An epoch's last, short batch may have fewer pairs than there are
       * ranks: a rank left without one runs pair 0 with weight 0 (as for
       * language modelling), so that it still takes part in the reductions. */
      if (nb == 0) b0 = 0, nb = 1, none = true;
      HOOK_TRY(narrow_pairs(b, b0, nb), "next batch");
      b->n_tokens = 0;
      if (!classify) HOOK_TRY(count_targets(b->labels, &b->n_tokens), "next batch");
    }
    r->mb_n[a] = none ? 0 : classify ? b->src->shape[0] : b->n_tokens;
    /* tokens: real source tokens + target tokens (classification: source only) */
    int64_t real = 0;
    if (!none) HOOK_TRY(count_false(b->src_mask, &real), "next batch");
    r->mb_tokens[a] = none ? 0 : (classify ? 0 : b->n_tokens) + real;
  }
  return LT_OK;
}

/* One micro-batch: the forward pass and the loss (cross-entropy with
 * --label-smoothing). Language modelling fetches its batch here; every
 * micro-batch weighs 1/accum. */
static lt_status hook_micro_batch(void *user, lt_trainer_micro *m) {
  run *r = user;
  lt_nn_ctx ctx = {true, r->dropout_gen};
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, r->o.label_smoothing, LT_REDUCTION_MEAN};
  const bool chunked = r->o.chunked_head; /* a decoder's loss without its logits */
  lt_tensor *logits = NULL, *labels, *loss = NULL;
  if (r->D.kind == LT_TF_DATA_LM) {
    lt_tensor *x, *y;
    bool none = false; /* this rank has no row of the batch */
    if (r->D.shards) /* shards: the loader reads this rank's rows of the global batch only */
      HOOK_TRY(lt_shard_loader_next(r->D.shards, &x, &y), "next batch");
    else
      HOOK_TRY(lt_lm_loader_next(r->D.ll, &x, &y), "next batch");
    if (!r->D.shards && lt_dist_size() > 1) { /* this rank's rows of the global batch */
      int64_t b0, nb;
      lt_dist_shard(x->shape[0], &b0, &nb);
      /* An epoch's last, short batch may have fewer rows than there are
       * ranks: a rank left without one runs row 0 with weight 0, so that it
       * still takes part in the step's reductions. */
      if (nb == 0) b0 = 0, nb = 1, none = true;
      x = lt_narrow(x, 0, b0, nb), y = lt_narrow(y, 0, b0, nb);
      if (!x || !y) return lt__tf_fail("this rank's slice of the batch");
    }
    m->tokens = none ? 0 : y->numel;
    if (!m->forward) return LT_OK; /* the batch is still consumed: the data order stays that of a clean run */
    labels = y;
    if (chunked) loss = lt_transformer_decode_loss(r->model, x, NULL, NULL, NULL, labels, &ce, 0, &ctx);
    else logits = lt_transformer_decode(r->model, x, NULL, NULL, NULL, 0, &ctx); /* [B, T, V] */
    m->weight = none ? 0.0 : 1.0 / (double)m->accum;
  } else {
    lt_seq2seq_batch *b = &r->mb[m->index];
    m->tokens = r->mb_tokens[m->index];
    if (!m->forward) return LT_OK;
    if (r->D.kind == LT_TF_DATA_CLASSIFY) {
      logits = lt_transformer_classify(r->model, b->src, b->src_mask, &ctx); /* [B, n_classes] */
      labels = lt_select(b->labels, 1, 0);
    } else {
      lt_tensor *mem = lt_transformer_encode(r->model, b->src, b->src_mask, &ctx);                  /* [B, S, C] */
      labels = b->labels;
      if (chunked && mem)
        loss = lt_transformer_decode_loss(r->model, b->tgt_in, b->tgt_mask, mem, b->src_mask, labels, &ce, 0, &ctx);
      else if (!chunked)
        logits = lt_transformer_decode(r->model, b->tgt_in, b->tgt_mask, mem, b->src_mask, 0, &ctx); /* [B, T, V] */
    }
    /* The loss is the mean over this rank's targets: weighted by their share
     * of the step's targets on all ranks, times N, since the trainer averages
     * the ranks' gradients and losses (divides their sum by N). */
    m->weight = r->mb_total > 0 ? (double)r->mb_n[m->index] * lt_dist_size() / (double)r->mb_total : 0;
  }
  m->loss = loss ? loss : logits && labels ? lt_cross_entropy(logits, labels, &ce) : NULL;
  if (!m->loss) return lt__tf_fail("training forward");
  return LT_OK;
}

/* Periodic validation (exact match on the first --eval-examples), or the
 * final one (every held-out example, keeping the decoded texts to print). */
static lt_status hook_evaluate(void *user, lt_trainer_eval *ev) {
  run *r = user;
  int64_t n_all = r->D.kind == LT_TF_DATA_SEQ2SEQ ? lt_seq_pairs_count(r->D.valid) : 0;
  HOOK_TRY(ev->final ? evaluate(r, n_all, r->outs, r->n_pool, &r->E) : evaluate(r, r->o.eval_examples, NULL, 0, &r->E),
           "validation");
  ev->values[0] = r->E.loss;
  ev->values[1] = r->E.token_acc;
  if (r->E.n_decoded > 0) ev->values[2] = (double)r->E.n_exact / (double)r->E.n_decoded;
  ev->interrupted = r->E.interrupted;
  return LT_OK;
}

static void hook_eval_line(void *user, const lt_trainer_eval *ev, char *buf, size_t size) {
  const run *r = user;
  lt_tf_eval_text(&r->D, &r->E, buf, size);
}

/* This program's values in a checkpoint: the settings, the tokenizer, the class labels. */
static lt_status hook_save_extra(void *user, lt_ckpt_meta *extra) {
  run *r = user;
  if (lt_cli_to_meta(&CLI, &r->o, NOT_SAVED, OPT_PREFIX, extra) != LT_OK) return lt_last_status();
  return lt_tf_data_save_extra(&r->D, extra);
}

static lt_loader_position hook_get_position(void *user) { return lt_tf_data_get_position(&((run *)user)->D); }
static lt_status hook_set_position(void *user, lt_loader_position pos) {
  return lt_tf_data_set_position(&((run *)user)->D, pos);
}
static int64_t hook_batches_per_epoch(void *user) { return lt_tf_data_batches_per_epoch(&((run *)user)->D); }


/* ======================================================================== */
/* main                                                                     */
/* ======================================================================== */

/* The decoded examples (or generated text) at the end. */
static void print_examples(run *r) {
  lt_tf_examples_opts eo = {.n = r->o.examples, .outputs = r->outs, .prompt = r->o.prompt, .max_new = r->o.gen_tokens,
                            .temperature = r->o.temperature, .top_k = r->o.top_k, .gen = r->sample_gen};
  lt_status s = lt_tf_print_examples(stdout, r->model, &r->D, &eo);
  if (s != LT_OK) die(s == LT_ERR_INVALID ? EXIT_USAGE : EXIT_DATA, "%s", lt_last_error());
}

static void describe(const run *r) {
  const options *o = &r->o;
  char text[1024];
  printf("model: %s\n", lt_tf_config_describe(&r->cfg, lt_params_numel(r->params, false), text, sizeof text));
  printf("data: %s\n", lt_tf_data_describe(&r->D, text, sizeof text));
  char lr[96];
  if (o->schedule == LT_SCHED_NOAM)
    snprintf(lr, sizeof lr, "noam (scale %g, warmup %lld, peak %.2e)", o->noam_scale, (long long)o->warmup,
             lt_schedule_lr(&r->sched, o->warmup > 0 ? o->warmup : 1));
  else
    snprintf(lr, sizeof lr, "%s (lr %g, warmup %lld)", sched_ename(o->schedule), o->lr, (long long)o->warmup);
  char threads[64];
  if (o->threads == 0 && !getenv("LT_NUM_THREADS") && lt_get_num_threads() > 1)
    snprintf(threads, sizeof threads, "threads: auto (%d or 1)", lt_get_num_threads());
  else
    snprintf(threads, sizeof threads, "%d threads", lt_get_num_threads());
  printf("training: %s, %s, label smoothing %g, clip %g, batch %lld x %lld, %lld steps (%.2f epochs), seed %lld, "
         "%s, precision %s\n", optim_ename(o->optim), lr, o->label_smoothing, o->clip, (long long)o->batch,
         (long long)o->accum, (long long)o->steps,
         (double)(o->steps * o->accum) / (double)(lt_tf_data_batches_per_epoch(&r->D) ? lt_tf_data_batches_per_epoch(&r->D) : 1),
         (long long)o->seed, threads, lt_cli_precision_name(o->precision));
  if (lt_dist_size() > 1)
    printf("data parallel: %d ranks x --batch %lld = a global batch of %lld (x --accum %lld per step), gradients "
           "averaged in buckets of %g MB%s\n", lt_dist_size(), (long long)o->batch, (long long)o->batch * lt_dist_size(),
           (long long)o->accum, (double)lt_dist_bucket_bytes() / 1048576.0,
           o->zero ? "; ZeRO-1: each rank holds the optimizer state of 1/N of the parameters" : "");
}


/* The checkpoint --resume names: a file, or the newest valid one in a directory. */
static void resolve_resume(const char *arg, char *path, size_t size) {
  lt_status s = lt_trainer_find_resume(arg, CKPT_PREFIX, path, size);
  if (s != LT_OK) die(s == LT_ERR_INVALID ? EXIT_USAGE : EXIT_DATA, "--resume %s", lt_last_error());
}

static lt_ckpt_info *g_info; /* the resumed checkpoint's configuration and extra values */

/* Load options from --max-memory and --allow-unchecksummed. */
static lt_ckpt_load_opts ckpt_opts(const options *o) {
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.allow_unchecksummed = o->allow_unchecksummed;
  lo.max_bytes = lt_cli_memory_cap(o->max_memory);
  return lo;
}

/* Settings of a resumed run: the checkpoint's, with the command line's run
 * flags on top; a model, data or optimizer flag must not differ. */
static void resume_options(run *r, const char *path) {
  lt_ckpt_load_opts lo = ckpt_opts(&r->o);
  TRY(EXIT_DATA, lt_tf_read_checkpoint_info(path, &lo, false, &g_info, &r->step),
      "--resume: reading the checkpoint's settings");
  options saved = default_options();
  lt_tf_config cfg;
  TRY(EXIT_DATA, lt_tf_config_from_meta(g_info->config, &cfg), "--resume: the checkpoint's model configuration");
  options_from_config(&saved, &cfg);
  if (lt_cli_from_meta(&CLI, &saved, NOT_SAVED, OPT_PREFIX, g_info->extra, path) != LT_OK)
    die(EXIT_DATA, "%s", lt_last_error());
  merge_resumed_options(&saved, &r->o, r->given);
  r->o = saved;
  r->cfg = cfg;
}


/* --init-from PATH (a fresh run): the model configuration of a checkpoint or
 * a Hugging Face directory replaces the model flags (a given one must agree),
 * and its tokenizer, if it holds one, is the run's. The weights are loaded
 * once the model is built (lt_tf_source_load_weights). */
static lt_tf_config g_init_cfg; /* --init-from: the source model's configuration */

static lt_tokenizer *init_from_options(run *r) {
  static char file[PATH_LEN]; /* a run directory stands for its newest valid checkpoint, as --resume */
  lt_tf_config cfg;
  lt_tokenizer *tok;
  lt_ckpt_load_opts lo = ckpt_opts(&r->o);
  if (lt_tf_source_read(r->o.init_from, CKPT_PREFIX, &lo, file, sizeof file, &cfg, &tok, &g_info) != LT_OK)
    die_lt(EXIT_DATA, "--init-from");
  r->o.init_from = file;
  g_init_cfg = cfg;
  if (tok && lt_tokenizer_vocab_size(tok) != cfg.vocab_size) { /* the source disagrees with itself */
    int64_t tv = lt_tokenizer_vocab_size(tok);
    lt_tokenizer_free(tok);
    die(EXIT_DATA, "--init-from '%s': its tokenizer has %lld ids, its model's vocab_size is %lld: the source's "
        "tokenizer does not belong to its weights", file, (long long)tv, (long long)cfg.vocab_size);
  }
  options src = r->o;
  options_from_config(&src, &cfg);
  take_model_options(&r->o, r->given, &src);
  /* (an hf tokenizer has no --tokenizer value: the tokenizer object itself is the run's) */
  if (tok && lt_tokenizer_get_kind(tok) != LT_TOKENIZER_HF) r->o.tokenizer = (int)lt_tokenizer_get_kind(tok);
  return tok;
}

/* ---- under mpirun: every rank runs the same computation ---------------------- */

/* Options that may differ between ranks: they change how a rank runs, not
 * what it computes (results do not depend on --threads; --max-memory and
 * --dist-timeout are each process's own limits). */
static bool rank_local(const char *name) {
  return !strcmp(name, "threads") || !strcmp(name, "max-memory") || !strcmp(name, "dist-timeout");
}

/* v in the fewest digits that read back as v (so a compared value is whole). */
static const char *exact_text(double v, char *buf, size_t size) {
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v || v != v) break;
  }
  return buf;
}

/* Every other setting of the table (model, data, optimizer, schedule, run:
 * --dropout, --precision, --label-smoothing, --max-nonfinite, --warmup,
 * --beta2, --schedule, ...), as resolved for this run, compared whole across
 * the ranks at start; a difference names the flag, its value on rank 0 and
 * on the ranks that differ (lt_dist_check_same). */
static void check_same_settings(const options *o) {
  const char *names[MAX_OPTS], *vals[MAX_OPTS];
  char flag[MAX_OPTS][72], text[MAX_OPTS][72];
  int n = 0;
  for (int i = 0; i < CLI.n_opts; i++) {
    const lt_cli_opt *d = &CLI.opts[i];
    if (d->kind == LT_CLI_GROUP || rank_local(d->name)) continue;
    snprintf(flag[n], sizeof flag[n], "--%s", d->name);
    names[n] = flag[n];
    const void *p = (const char *)o + d->offset;
    if (d->kind == LT_CLI_STRING) vals[n] = *(const char *const *)p ? *(const char *const *)p : "(none)"; /* whole */
    else if (d->kind == LT_CLI_DOUBLE) vals[n] = exact_text(*(const double *)p, text[n], sizeof text[n]);
    else vals[n] = lt_cli_value_text(d, o, text[n], sizeof text[n]);
    n++;
  }
  TRY(EXIT_USAGE, lt_dist_check_same(PROG, n, names, vals), "mpirun");
}

/* The data every rank read (the paths are settings, compared above): each
 * file's size, the training stream's fingerprint (a hash of its token ids
 * and the loader's options), the batches per epoch and the vocabulary size.
 * The same relative path naming other files on two nodes is caught here. */
static void check_same_data(const run *r) {
  const char *files[] = {r->o.text, r->o.tsv, r->o.valid_tsv};
  const char *what[] = {"--text", "--tsv", "--valid-tsv"};
  const char *names[8], *vals[8];
  char name[8][64], text[8][64];
  int n = 0;
  for (int i = 0; i < 3; i++) {
    if (!files[i]) continue;
    struct stat st;
    if (stat(files[i], &st) != 0) die(EXIT_DATA, "%s '%s': %s", what[i], files[i], strerror(errno));
    snprintf(name[n], sizeof name[n], "the size of the %s file", what[i]);
    snprintf(text[n], sizeof text[n], "%lld bytes", (long long)st.st_size);
    names[n] = name[n], vals[n] = text[n], n++;
  }
  lt_loader_position pos = lt_tf_data_get_position(&r->D);
  snprintf(text[n], sizeof text[n], "%016llx", (unsigned long long)pos.fingerprint);
  names[n] = "the training data's fingerprint (its token ids and loader options)", vals[n] = text[n], n++;
  snprintf(text[n], sizeof text[n], "%lld", (long long)lt_tf_data_batches_per_epoch(&r->D));
  names[n] = "batches per epoch", vals[n] = text[n], n++;
  snprintf(text[n], sizeof text[n], "%lld", (long long)lt_tokenizer_vocab_size(r->D.tok));
  names[n] = "the tokenizer's vocabulary size", vals[n] = text[n], n++;
  TRY(EXIT_DATA, lt_dist_check_same(PROG, n, names, vals), "mpirun: the data");
}

static void finish(run *r) {
  lt_trainer_free(r->trainer);
  g_trainer = r->trainer = NULL;
  free(r->mb);
  free(r->mb_tokens);
  free(r->mb_n);
  for (int64_t i = 0; r->outs && i < r->n_pool; i++) free(r->outs[i]);
  free(r->outs);
  lt_ckpt_meta_free(r->cfg_meta);
  lt_optimizer_free(r->opt);
  lt_transformer_free(r->model);
  lt_generator_free(r->dropout_gen);
  lt_generator_free(r->sample_gen);
  lt_tf_data_free(&r->D);
  lt_ckpt_info_free(g_info);
  lt_dist_finalize();
  /* Progress, examples and results went to stdout: a lost line (ENOSPC,
   * EPIPE) is a failure, exit 1, after the checkpoints are safe. */
  if (ferror(stdout)) {
    fprintf(stderr, PROG ": writing the output: some output was lost (a write to standard output failed)\n");
    exit(EXIT_DATA);
  }
  lt_cli_flush(stdout, "the output");
}

int main(int argc, char **argv) {
  run *r = &R;
  double t_start = lt_monotonic_seconds();
  lt_cli_init(PROG, end_line);
  /* mpirun -np N: N ranks (dist/dist.h); a plain start is a world of one. */
  if (lt_dist_init(&argc, &argv) != LT_OK) die_lt(EXIT_DATA, "starting MPI");
  if (lt_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 alone prints progress */
    die(EXIT_DATA, "rank %d: cannot send its output to /dev/null", lt_dist_rank());
  /* lt_dist_finalize only on a normal end (finish): a rank that exits on an
   * error without it makes mpirun end the whole job instead of leaving the
   * other ranks waiting in a collective call. */
  r->o = default_options();
  parse_args(argc, argv, &r->o, r->given);
  signal(SIGXFSZ, SIG_IGN); /* a file over the size limit is an ordinary write error (EFBIG), not a kill */
  signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error (EPIPE), reported at the end; training goes on */
  if (r->o.threads > 0) TRY(EXIT_USAGE, lt_set_num_threads((int)r->o.threads), "--threads");
  if (r->o.dist_timeout >= 0) TRY(EXIT_USAGE, lt_dist_set_timeout(r->o.dist_timeout), "--dist-timeout");
  if (r->o.bucket_mb > 0) lt_dist_set_bucket_bytes((size_t)(r->o.bucket_mb * 1048576.0));
  TRY(EXIT_DATA, lt_init(), "starting libtensor");

  char resume_path[PATH_LEN] = "";
  lt_tokenizer *tok = NULL;
  if (r->o.resume) {
    resolve_resume(r->o.resume, resume_path, sizeof resume_path);
    resume_options(r, resume_path);
    const void *blob;
    size_t size;
    if (lt_ckpt_meta_get_bytes(g_info->extra, LT_TF_CKPT_TOKENIZER, &blob, &size) != LT_OK)
      die(EXIT_DATA, "checkpoint '%s' has no tokenizer (not written by " PROG "?)", resume_path);
    if (!(tok = lt_tokenizer_deserialize(blob, size))) die_lt(EXIT_DATA, "--resume: the checkpoint's tokenizer");
  } else {
    if (r->o.init_from) tok = init_from_options(r);
    if (r->o.tokenizer_file) { /* the user's tokenizer.json replaces any other */
      lt_tokenizer_free(tok);
      if (!(tok = lt_tokenizer_load_hf(r->o.tokenizer_file))) die_lt(EXIT_DATA, "--tokenizer-file");
    }
    finalize_options(&r->o, r->given);
  }
  check_options(&r->o, r->given);
  /* Resuming on another number of ranks: the global batch (N x --batch) stays
   * the checkpoint's, so the data order and position carry over. */
  int64_t saved_ranks = 1;
  if (r->o.resume && lt_ckpt_meta_kind(g_info->extra, LT_TRAINER_KEY_RANKS) >= 0)
    TRY(EXIT_DATA, lt_ckpt_meta_get_int(g_info->extra, LT_TRAINER_KEY_RANKS, &saved_ranks), "--resume: dist.ranks");
  if (saved_ranks < 1 || saved_ranks > INT32_MAX) die(EXIT_DATA, "--resume: dist.ranks %lld: not a number of ranks", (long long)saved_ranks);
  if (r->o.resume && saved_ranks != lt_dist_size()) {
    int64_t global = r->o.batch * saved_ranks;
    if (global % lt_dist_size() != 0)
      die(EXIT_USAGE, "--resume: the run's global batch is %lld (%lld ranks x --batch %lld), which %d ranks cannot "
          "share equally: resume with a number of ranks that divides it", (long long)global, (long long)saved_ranks,
          (long long)r->o.batch, lt_dist_size());
    printf("resuming a run of %lld ranks on %d: --batch %lld -> %lld per rank (the global batch %lld is kept)\n",
           (long long)saved_ranks, lt_dist_size(), (long long)r->o.batch, (long long)(global / lt_dist_size()),
           (long long)global);
    r->o.batch = global / lt_dist_size();
  }
  if (lt_dist_size() > 1) {
    if (r->o.eval_only) die(EXIT_USAGE, "--eval-only runs on one process (not under mpirun -np %d)", lt_dist_size());
    check_same_settings(&r->o);
  }

  /* data */
  load_data(&r->o, &r->D, tok);
  if (lt_dist_size() > 1) check_same_data(r);
  if (r->o.dump_data) { /* every rank generated the same data: one writes it */
    if (lt_dist_rank() == 0) dump_data(&r->o, &r->D);
    finish(r);
    return 0;
  }
  if (r->o.epochs > 0 && (!r->o.resume || r->given[opt_index("epochs")])) {
    int64_t bpe = lt_tf_data_batches_per_epoch(&r->D), micro;
    if (__builtin_mul_overflow(r->o.epochs, bpe, &micro) || micro / r->o.accum >= COUNT_MAX)
      die(EXIT_USAGE, "--epochs %lld of %lld batches (with --accum %lld) are more than %lld steps",
          (long long)r->o.epochs, (long long)bpe, (long long)r->o.accum, (long long)COUNT_MAX);
    r->o.steps = (micro + r->o.accum - 1) / r->o.accum;
  }
  if (r->o.eval_every < 0) r->o.eval_every = r->o.steps / 10 > 0 ? r->o.steps / 10 : 1;
  if (r->o.ckpt_every < 0) r->o.ckpt_every = r->o.steps / 5 > 0 ? r->o.steps / 5 : 1;

  /* model */
  if (!r->o.resume) {
    r->cfg = config_of(&r->o, r->o.init_from ? &g_init_cfg : NULL);
    r->cfg.vocab_size = lt_tokenizer_vocab_size(r->D.tok);
    if (r->D.kind == LT_TF_DATA_CLASSIFY) r->cfg.n_classes = r->D.n_classes;
    if (lt_tf_config_validate(&r->cfg) != LT_OK) die(EXIT_USAGE, "model configuration: %s", lt_last_error());
  }
  /* --init-from an encoder without a classifier (a BertModel directory) on labelled texts: a new head */
  const bool new_head = r->o.init_from && !r->o.resume && r->cfg.arch == LT_TF_ENCODER_ONLY &&
                        g_init_cfg.n_classes == 0 && r->cfg.n_classes > 0;
  if (r->o.init_from && g_init_cfg.n_classes > 0 && r->cfg.n_classes != g_init_cfg.n_classes)
    die(EXIT_DATA, "--init-from: its classifier has %lld classes, the data %lld (the sorted distinct labels of "
        "--tsv)", (long long)g_init_cfg.n_classes, (long long)r->cfg.n_classes);
  if (r->o.init_from && g_init_cfg.vocab_size != r->cfg.vocab_size)
    die(EXIT_DATA, "--init-from: its model has vocab_size %lld, this run's tokenizer %lld (the source holds no "
        "tokenizer, and the one built from the data differs)", (long long)g_init_cfg.vocab_size, (long long)r->cfg.vocab_size);
  if (r->o.resume && (r->cfg.vocab_size != lt_tokenizer_vocab_size(r->D.tok) ||
                      (r->D.kind == LT_TF_DATA_CLASSIFY && r->cfg.n_classes != r->D.n_classes))) {
    die(EXIT_DATA, "--resume: the checkpoint's model has vocab_size %lld / %lld classes, the data %lld / %lld",
        (long long)r->cfg.vocab_size, (long long)r->cfg.n_classes, (long long)lt_tokenizer_vocab_size(r->D.tok),
        (long long)r->D.n_classes);
  }
  /* The model's size before it is built: against the checkpoint it resumes and the memory cap. */
  int64_t n_params;
  size_t model_bytes;
  lt_ckpt_load_opts lo = ckpt_opts(&r->o);
  TRY(EXIT_USAGE, lt_tf_config_size(&r->cfg, &n_params, &model_bytes), "model configuration");
  if (r->o.resume) TRY(EXIT_DATA, lt_ckpt_check_model_size(g_info, resume_path, n_params, model_bytes, lo.max_bytes), "--resume");
  else if (r->o.init_from && lt_hf_is_dir(r->o.init_from))
    TRY(EXIT_DATA, lt_hf_check_size(r->o.init_from, new_head ? &g_init_cfg : &r->cfg, lo.max_bytes), "--init-from");
  else if (r->o.init_from) {
    int64_t src_params = n_params;
    size_t src_bytes = model_bytes;
    if (new_head) TRY(EXIT_USAGE, lt_tf_config_size(&g_init_cfg, &src_params, &src_bytes), "--init-from");
    TRY(EXIT_DATA, lt_ckpt_check_model_size(g_info, r->o.init_from, src_params, src_bytes, lo.max_bytes), "--init-from");
  }
  else if (lo.max_bytes && model_bytes > lo.max_bytes)
    die(EXIT_USAGE, "the model needs %zu bytes (%lld parameters), more than --max-memory (%llu bytes)", model_bytes,
        (long long)n_params, (unsigned long long)lo.max_bytes);
  lt_generator *init = lt_generator_new((uint64_t)r->o.seed);
  r->model = init ? lt_transformer_new(&r->cfg, init) : NULL;
  lt_generator_free(init);
  if (!r->model) die_lt(EXIT_USAGE, "building the model");
  r->params = lt_transformer_params(r->model);
  TRY(EXIT_USAGE, lt_transformer_set_recompute(r->model, (lt_recompute_mode)r->o.recompute), "--recompute");
  if (new_head) {
    TRY(EXIT_DATA, lt_tf_source_load_encoder(r->o.init_from, r->model, &lo), "--init-from");
    if (lt_dist_rank() == 0)
      printf("--init-from: the source has no classifier: a new one of %lld classes, initialised from --seed\n",
             (long long)r->cfg.n_classes);
  } else if (r->o.init_from) {
    TRY(EXIT_DATA, lt_tf_source_load_weights(r->o.init_from, r->model, &lo), "--init-from");
  }
  if (!(r->cfg_meta = lt_ckpt_meta_new())) die(EXIT_DATA, "out of memory");
  TRY(EXIT_DATA, lt_tf_config_to_meta(&r->cfg, r->cfg_meta), "saving the model configuration");
  r->oc = lt_optim_defaults((lt_optim_kind)r->o.optim);
  r->oc.lr = r->o.lr, r->oc.beta1 = r->o.beta1, r->oc.beta2 = r->o.beta2, r->oc.eps = r->o.eps;
  r->oc.weight_decay = r->o.weight_decay, r->oc.momentum = r->o.momentum, r->oc.nesterov = r->o.nesterov;
  r->opt = lt_optimizer_new(r->params, &r->oc);
  if (!r->opt) die_lt(EXIT_USAGE, "the optimizer");
  r->sched = (lt_schedule){.kind = (lt_schedule_kind)r->o.schedule, .base_lr = r->o.lr, .min_lr = r->o.min_lr,
                           .gamma = r->o.gamma, .scale = r->o.noam_scale, .warmup = r->o.warmup, .total = r->o.steps,
                           .step_size = r->o.step_size, .d_model = r->cfg.d_model};
  r->dropout_gen = lt_generator_new((uint64_t)r->o.seed + 1);
  r->sample_gen = lt_generator_new((uint64_t)r->o.seed + 3);
  if (!r->dropout_gen || !r->sample_gen) die_lt(EXIT_DATA, "generators");

  /* the run directory (created below, after --eval-only) */
  if (r->o.ckpt_dir) {
    fmt_path(r->dir, "%s", r->o.ckpt_dir);
  } else if (r->o.resume) {
    const char *slash = strrchr(resume_path, '/');
    fmt_path(r->dir, "%.*s", slash ? (int)(slash - resume_path) : 1, slash ? resume_path : ".");
  } else {
    time_t t = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&t));
    fmt_path(r->dir, "runs/%s-%s", stamp, r->D.name);
  }
  if (r->o.csv) fmt_path(r->csv_path, "%s", r->o.csv);
  else fmt_path(r->csv_path, "%s/metrics.csv", r->dir);

  /* the training loop, with this program's hooks */
  lt_trainer_config tc = LT_TRAINER_DEFAULTS;
  tc.params = r->params, tc.optim = r->opt, tc.optim_config = &r->oc, tc.schedule = &r->sched;
  tc.n_generators = 1, tc.generator_names = GEN_NAMES, tc.generators = &r->dropout_gen;
  tc.model_config = r->cfg_meta;
  tc.steps = r->o.steps, tc.accum = r->o.accum, tc.clip = r->o.clip, tc.max_nonfinite = r->o.max_nonfinite;
  tc.eval_every = r->o.eval_every, tc.ckpt_every = r->o.ckpt_every, tc.keep = r->o.keep;
  tc.stop_after = r->o.stop_after;
  tc.dir = r->dir, tc.ckpt_prefix = CKPT_PREFIX, tc.no_ckpt = r->o.no_ckpt, tc.csv_path = r->csv_path;
  tc.load_opts = &lo;
  tc.n_metrics = 3, tc.metrics = METRICS;
  tc.log_every = r->o.log_every;
  tc.zero = (int)r->o.zero;
  tc.auto_threads = r->o.threads == 0 && !getenv("LT_NUM_THREADS") && lt_get_num_threads() > 1;
  lt_trainer_hooks hooks = {.user = r, .micro_batch = hook_micro_batch, .begin_step = hook_begin_step,
                            .evaluate = hook_evaluate, .eval_line = hook_eval_line, .save_extra = hook_save_extra,
                            .get_position = hook_get_position, .set_position = hook_set_position,
                            .batches_per_epoch = hook_batches_per_epoch};
  if (r->D.shards) { /* token shards: the trainer keeps the loader's position itself */
    tc.shards = r->D.shards;
    hooks.get_position = NULL, hooks.set_position = NULL, hooks.batches_per_epoch = NULL;
  }
  /* After resume resolved the settings (a bf16 run resumes in bf16); this
   * thread runs every step, evaluation and decoding. */
  if (r->o.precision == LT_CLI_PRECISION_BF16) lt_set_autocast(LT_DTYPE_BF16);
  if (!(g_trainer = r->trainer = lt_trainer_new(&tc, &hooks))) die_lt(EXIT_USAGE, "the training loop");
  r->mb = xmalloc(sizeof *r->mb * (size_t)r->o.accum);
  r->mb_tokens = xmalloc(sizeof *r->mb_tokens * (size_t)r->o.accum);
  r->mb_n = xmalloc(sizeof *r->mb_n * (size_t)r->o.accum);
  r->n_pool = r->o.examples * LT_TF_EXAMPLE_POOL; /* decoded outputs kept for the examples shown */
  r->outs = calloc((size_t)r->n_pool + 1, sizeof *r->outs);
  if (!r->outs) die(EXIT_DATA, "out of memory");

  /* the training state of a resumed run */
  if (r->o.resume && r->o.eval_only) {
    TRY(EXIT_DATA, lt_ckpt_load_params(resume_path, r->params, &lo, NULL), "--resume: loading the parameters");
  } else if (r->o.resume) {
    TRY(EXIT_DATA, lt_trainer_resume(r->trainer, resume_path), "--resume: loading the training state");
  }
  describe(r);

  if (r->o.eval_only) { /* validate the checkpoint, print examples, done */
    printf("evaluating %s\n", resume_path);
    lt_tf_eval_result E;
    TRY(EXIT_DATA, evaluate(r, lt_seq_pairs_count(r->D.valid), r->outs, r->n_pool, &E), "validation");
    char text[512];
    lt_tf_eval_text(&r->D, &E, text, sizeof text);
    printf("validation at step %lld: %s [%s]\n", (long long)r->step, text, DUR(E.seconds));
    print_examples(r);
    finish(r);
    return 0;
  }

  TRY(EXIT_DATA, lt_trainer_make_dir(r->dir), "--ckpt-dir");
  if (!r->o.resume) {
    int64_t latest;
    TRY(EXIT_DATA, lt_ckpt_latest(r->dir, CKPT_PREFIX, false, &latest, NULL, 0), "--ckpt-dir");
    if (latest >= 0 && !r->o.no_ckpt) {
      if (!r->o.overwrite)
        die(EXIT_USAGE, "'%s' already holds checkpoints (the newest at step %lld): --resume %s continues that run, "
            "--overwrite starts over (deleting them), or choose another --ckpt-dir", r->dir, (long long)latest, r->dir);
      TRY(EXIT_DATA, lt_trainer_clear_dir(r->dir, CKPT_PREFIX), "--overwrite");
    }
  }
  lt_runtime_info info;
  lt_runtime_get_info(&info);
  /* The BLIS kernel set decides the last bits of every product, so of the figures (docs/train.md);
   * under --precision bf16 the bf16 path does (native or a fallback: docs/mixed-precision.md). */
  const bool bf16 = r->o.precision == LT_CLI_PRECISION_BF16;
  printf("runtime: libtensor %s, BLIS kernels %s (%s)%s%s%s%s\n", info.version, info.blas_arch, info.blas_arch_why,
         bf16 ? "; bf16 products: " : "", bf16 ? info.bf16_gemm : "", bf16 ? "; fused attention tiles (T or S > 256): " : "",
         bf16 ? info.bf16_attention : "");
  printf("run directory: %s\n", r->dir);
  if (r->o.resume) printf("resumed from %s at step %lld\n", resume_path, (long long)lt_trainer_step(r->trainer));
  fflush(stdout);

  /* train */
  TRY(EXIT_DATA, lt_trainer_install_signal_handlers(PROG), "signals");
  lt_trainer_result res;
  lt_status s = lt_trainer_fit(r->trainer, &res);
  if (res.end == LT_TRAINER_NONFINITE)
    die(EXIT_NONFINITE, "stopping: %lld non-finite steps in a row (the last at step %lld; --max-nonfinite %lld). "
        "Skipped steps leave the parameters unchanged; the newest checkpoint is %s. Try a lower --lr or --clip.",
        (long long)res.bad_streak, (long long)res.step, (long long)r->o.max_nonfinite,
        res.last_checkpoint[0] ? res.last_checkpoint : "(none yet)");
  if (s != LT_OK) die_lt(EXIT_DATA, "training");
  int sig = lt_trainer_stop_requested();
  if (res.end != LT_TRAINER_DONE) { /* stopped by a signal or --stop-after: the checkpoint is saved */
    if (res.end == LT_TRAINER_INTERRUPTED)
      printf("interrupted by %s at step %lld: ", res.stop_reason == SIGINT ? "SIGINT" : "SIGTERM", (long long)res.step);
    else
      printf("stopped after step %lld (--stop-after): ", (long long)res.step);
    if (r->o.no_ckpt) printf("no checkpoint (--no-ckpt)\n");
    else printf("saved %s\ncontinue with: " PROG " --resume %s\n", res.last_checkpoint, r->dir);
    int code = res.end == LT_TRAINER_INTERRUPTED ? 128 + res.stop_reason : 0;
    if (res.end == LT_TRAINER_INTERRUPTED && lt_dist_active()) {
      /* A signal to mpirun: it is ending the job (SIGTERM to every rank,
       * SIGKILL after odls_base_sigkill_timeout) and no longer answers
       * MPI_Finalize. The checkpoint is saved: leave now (docs/distributed.md). */
      fflush(stdout), fflush(stderr);
      _exit(code);
    }
    finish(r);
    return code;
  }

  /* the end: examples and the final validation (the trainer saved the checkpoint) */
  lt_tf_eval_result E = r->E;
  if (!sig) print_examples(r);
  double wall = lt_monotonic_seconds() - t_start;
  printf("\ndone: %lld steps", (long long)res.step);
  if (res.step > res.start_step)
    printf(" (%lld in this process) in %s, %.0f tokens/s in training steps", (long long)(res.step - res.start_step),
           DUR(wall), (double)res.tokens / (res.train_seconds > 0 ? res.train_seconds : 1));
  printf("\n");
  if (!E.interrupted) {
    if (r->D.kind == LT_TF_DATA_LM)
      printf("held-out loss %.4f (perplexity %.2f), token accuracy %.2f%%\n", E.loss, exp(E.loss), 100 * E.token_acc);
    else
      printf("held-out %s: %.2f%% (%lld/%lld), loss %.4f, token accuracy %.2f%%\n",
             r->D.kind == LT_TF_DATA_CLASSIFY ? "accuracy" : "exact match",
             100.0 * (double)E.n_exact / (double)(E.n_decoded ? E.n_decoded : 1), (long long)E.n_exact,
             (long long)E.n_decoded, E.loss, 100 * E.token_acc);
  }
  printf("peak RSS %.1f MB\n", peak_rss_mb());
  if (!r->o.no_ckpt) printf("checkpoint: %s\n", res.last_checkpoint);
  printf("metrics: %s\n", res.csv_path);
  int code = sig ? 128 + sig : 0;
  finish(r);
  return code;
}
