/*
 * models/transformer/train_main.c: `train`, the command-line program that
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
 * What it does, in order: parse the flags (one table, below, drives parsing,
 * --help, saving the settings into checkpoints and checking them on resume);
 * load or generate the data and build the tokenizer; build the model and the
 * optimizer (or restore the whole training state from a checkpoint); then
 * train, one step per lt_scope (so memory stays flat), with a live progress
 * line, a CSV row per step, periodic validation (loss, token accuracy and
 * exact match by greedy decoding) and periodic checkpoints; finally validate
 * on every held-out example and print decoded examples next to their
 * references. docs/train.md documents the flags, the CSV columns, the
 * checkpoint contents and the measured results.
 *
 * Exit codes: 0 done (also after --stop-after), 1 a runtime or data error,
 * 2 a bad command line or configuration, 3 stopped after too many non-finite
 * steps in a row, 128 + signal number after SIGINT / SIGTERM (the checkpoint
 * is saved first).
 *
 * What this is not: a distributed or mixed-precision trainer. Everything runs
 * in f32 on the CPU threads of one process.
 */
#include "libtensor.h"
#include "models/transformer/config.h"
#include "models/transformer/generate.h"
#include "models/transformer/transformer.h"

#include <dirent.h>
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
#include <time.h>
#include <unistd.h>

#define PROG "train"
#define CKPT_PREFIX "ckpt"

enum { EXIT_DATA = 1, EXIT_USAGE = 2, EXIT_NONFINITE = 3 };

/* ======================================================================== */
/* Errors: a program may exit (the library never does)                     */
/* ======================================================================== */

static bool g_tty;          /* stdout is a terminal: the progress line redraws in place */
static bool g_line_open;    /* a progress line without its newline is on screen */

static void end_line(void) {
  if (g_line_open) fputs("\r\033[K", stdout), fflush(stdout);
  g_line_open = false;
}

static _Noreturn void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void die(int code, const char *fmt, ...) {
  end_line();
  fflush(stdout);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(code);
}

/* A libtensor call failed: its message names the op and what was wrong. */
static _Noreturn void die_lt(int code, const char *what) {
  die(code, "%s: %s", what, lt_last_error());
}

#define TRY(code, expr, what)                    \
  do {                                           \
    if ((expr) != LT_OK) die_lt((code), (what)); \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die(EXIT_DATA, "out of memory (%zu bytes)", n);
  return p;
}

static char *xstrdup(const char *s) {
  char *p = xmalloc(strlen(s) + 1);
  return strcpy(p, s);
}

/* Paths: formatted into PATH_LEN bytes; longer is an error, never a silent cut. */
#define PATH_LEN 4096
static void fmt_path(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fmt_path(char *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, PATH_LEN, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= PATH_LEN) die(EXIT_USAGE, "a path is longer than %d bytes", PATH_LEN - 1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "4m05s", "1h02m", "12.3s" */
static char *fmt_dur(double s, char *buf, size_t n) {
  if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.1fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  return buf;
}
#define DUR(s) fmt_dur((s), (char[32]){0}, 32)

/* Resident set size now and at its peak, in MB. */
static double rss_mb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}
static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* ======================================================================== */
/* Signals: the handler only sets a flag; the loop checks it between steps  */
/* ======================================================================== */

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) {
  g_signal = sig;
  static const char msg[] = "\n" PROG ": signal received: stopping after this step and saving a checkpoint "
                            "(again to quit at once)\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
}

static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills at once (saves are atomic: no torn file) */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* ======================================================================== */
/* Options: one table drives parsing, --help, checkpoints and resume        */
/* ======================================================================== */

typedef struct options {
  /* model (the lt_tf_config fields; vocab_size, n_classes and pad_id come from the data) */
  int arch;
  int64_t d_model, heads, kv_heads, enc_layers, dec_layers, d_ff, max_len;
  double dropout;
  int norm;
  bool pre_norm;
  int act;
  bool swiglu;
  int pos;
  bool tie, scale_emb, bias;
  double norm_eps, rope_base;
  /* data */
  int task;
  const char *tsv, *valid_tsv, *text;
  int64_t task_train, task_valid, task_min_len, task_max_len, task_symbols, data_seed;
  double valid_fraction;
  int tokenizer, tokenizer_from;
  int64_t bpe_vocab, seq_len;
  int overlong;
  bool skip_bad_lines;
  int64_t bucket;
  /* training */
  int64_t batch, steps, epochs, accum;
  int optim;
  double lr, beta1, beta2, eps, weight_decay, momentum;
  bool nesterov;
  int schedule;
  int64_t warmup;
  double min_lr, noam_scale;
  int64_t step_size;
  double gamma, label_smoothing, clip;
  int64_t seed, max_nonfinite;
  /* evaluation */
  int64_t eval_every, eval_examples, eval_batch, examples, gen_tokens;
  const char *prompt;
  double temperature;
  int64_t top_k;
  /* checkpoints */
  const char *ckpt_dir;
  int64_t ckpt_every, keep;
  const char *resume;
  bool overwrite, no_ckpt, eval_only;
  int64_t stop_after;
  /* run */
  int64_t threads, log_every;
  const char *csv;
} options;

typedef enum { K_INT, K_DBL, K_STR, K_BOOL, K_ENUM } opt_kind;
/* F_MODEL: a model configuration field (on resume it comes from the checkpoint).
 * F_STATE: saved in checkpoints; on resume it must not change (data, optimizer, ...).
 * F_RUN:   how the run goes on; saved, and may be changed on resume.
 * F_NOSAVE (with F_RUN): about this process only; not saved. */
enum { F_MODEL = 1, F_STATE = 2, F_RUN = 4, F_NOSAVE = 8 };

typedef struct optdef {
  const char *name;
  opt_kind kind;
  size_t off;
  unsigned flags;
  const char *arg;                /* "N", "X", "FILE" ... in --help */
  const char *help;
  const char *(*ename)(int);      /* K_ENUM: the name of value i */
  int ecount;                     /* K_ENUM: number of values */
  const char *defdesc;            /* --help: describes a default that depends on other flags */
} optdef;

static const char *arch_ename(int i) { return lt_tf_arch_name((lt_tf_arch)i); }
static const char *norm_ename(int i) { return lt_tf_norm_name((lt_tf_norm)i); }
static const char *act_ename(int i) { return lt_tf_act_name((lt_activation)i); }
static const char *pos_ename(int i) { return lt_tf_pos_name((lt_tf_pos)i); }
static const char *task_ename(int i) { return lt_task_name((lt_task_kind)i); }
static const char *tok_ename(int i) { return lt_tokenizer_kind_name((lt_tokenizer_kind)i); }
static const char *from_ename(int i) {
  static const char *const n[] = {"both", "source", "target"};
  return i >= 0 && i < 3 ? n[i] : "unknown";
}
enum { FROM_BOTH, FROM_SOURCE, FROM_TARGET };
static const char *optim_ename(int i) { return lt_optim_kind_name((lt_optim_kind)i); }
static const char *sched_ename(int i) { return lt_schedule_kind_name((lt_schedule_kind)i); }
static const char *overlong_ename(int i) { return lt_overlong_name((lt_overlong)i); }

#define O(name, kind, field, flags, arg, help) {name, kind, offsetof(options, field), flags, arg, help, NULL, 0, NULL}
#define OD(name, kind, field, flags, arg, help, defdesc) \
  {name, kind, offsetof(options, field), flags, arg, help, NULL, 0, defdesc}
#define OE(name, field, flags, fn, count, help, defdesc) \
  {name, K_ENUM, offsetof(options, field), flags, NULL, help, fn, count, defdesc}
#define GROUP(title) {title, K_INT, 0, 0, NULL, NULL, NULL, -1, NULL} /* a --help heading */

static const optdef OPTS[] = {
  GROUP("Model (every lt_tf_config field; vocab_size, n_classes and pad_id come from the data)"),
  OE("arch", arch, F_MODEL, arch_ename, 3, "architecture (or encdec, decoder, encoder)", NULL),
  OD("d-model", K_INT, d_model, F_MODEL, "N", "model width C", "by --arch"),
  OD("heads", K_INT, heads, F_MODEL, "N", "attention heads", "by --arch"),
  OD("kv-heads", K_INT, kv_heads, F_MODEL, "N", "key/value heads (GQA; 1 = MQA)", "= --heads"),
  OD("enc-layers", K_INT, enc_layers, F_MODEL, "N", "encoder layers (--layers N sets both)", "by --arch"),
  OD("dec-layers", K_INT, dec_layers, F_MODEL, "N", "decoder layers", "by --arch"),
  OD("d-ff", K_INT, d_ff, F_MODEL, "N", "feed-forward hidden size", "by --arch"),
  OD("max-len", K_INT, max_len, F_MODEL, "N", "longest sequence the model takes (positions)",
     "--seq-len for --text, else by --arch"),
  OD("dropout", K_DBL, dropout, F_MODEL, "P", "dropout probability (PyTorch's places)",
     "0 for built-in tasks, else by --arch"),
  OE("norm", norm, F_MODEL, norm_ename, 2, "normalisation", "by --arch"),
  OD("pre-norm", K_BOOL, pre_norm, F_MODEL, NULL, "pre-norm (--post-norm or --no-pre-norm: post-norm)", "by --arch"),
  OE("act", act, F_MODEL, act_ename, 4, "feed-forward activation", "by --arch"),
  OD("swiglu", K_BOOL, swiglu, F_MODEL, NULL, "SwiGLU feed-forward (with --act silu)", "by --arch"),
  OE("pos", pos, F_MODEL, pos_ename, 3, "positions", "by --arch"),
  OD("tie", K_BOOL, tie, F_MODEL, NULL, "tie the output projection to the embedding", "by --arch"),
  OD("scale-emb", K_BOOL, scale_emb, F_MODEL, NULL, "multiply embeddings by sqrt(d_model)", "by --arch"),
  OD("bias", K_BOOL, bias, F_MODEL, NULL, "biases on every Linear", "by --arch"),
  OD("norm-eps", K_DBL, norm_eps, F_MODEL, "X", "epsilon of the norms", "by --arch"),
  OD("rope-base", K_DBL, rope_base, F_MODEL, "X", "RoPE base", "by --arch"),

  GROUP("Data (one source: a built-in task, --tsv or --text)"),
  OE("task", task, F_STATE, task_ename, LT_TASK_COUNT, "built-in seq2seq task, generated from --data-seed", NULL),
  O("tsv", K_STR, tsv, F_STATE, "FILE", "parallel corpus, one 'source<TAB>target' per line (encoder-only: 'text<TAB>label')"),
  OD("valid-tsv", K_STR, valid_tsv, F_STATE, "FILE", "validation pairs (else --valid-fraction of --tsv)", "none"),
  O("text", K_STR, text, F_STATE, "FILE", "plain text for decoder-only language modelling"),
  O("task-train", K_INT, task_train, F_STATE, "N", "training examples to generate"),
  O("task-valid", K_INT, task_valid, F_STATE, "N", "held-out examples to generate"),
  OD("task-min-len", K_INT, task_min_len, F_STATE, "N", "shortest source (symbols; digits for number_words)", "by task"),
  OD("task-max-len", K_INT, task_max_len, F_STATE, "N", "longest source", "by task"),
  O("task-symbols", K_INT, task_symbols, F_STATE, "N", "alphabet size of copy/reverse/sort (2..36)"),
  O("data-seed", K_INT, data_seed, F_STATE, "N", "seed of the generated task data"),
  O("valid-fraction", K_DBL, valid_fraction, F_STATE, "X", "share held out for validation"),
  OE("tokenizer", tokenizer, F_STATE, tok_ename, 3, "tokenizer (char and bpe learn from the training text)",
     "bpe for number_words (whole words), else char"),
  OE("tokenizer-from", tokenizer_from, F_STATE, from_ename, 3, "pairs: the side(s) char and bpe learn from",
     "target for number_words, else both"),
  O("bpe-vocab", K_INT, bpe_vocab, F_STATE, "N", "BPE vocabulary size (>= 261; learning stops early when no pair repeats)"),
  OD("seq-len", K_INT, seq_len, F_STATE, "N", "language modelling: context length; seq2seq: most source tokens and target positions",
     "128 (LM), --max-len (seq2seq)"),
  OE("overlong", overlong, F_STATE, overlong_ename, 3, "what to do with a sequence longer than --seq-len", NULL),
  O("skip-bad-lines", K_BOOL, skip_bad_lines, F_STATE, NULL, "skip (and count) bad TSV lines instead of failing"),
  O("bucket", K_INT, bucket, F_STATE, "N", "sort by length within windows of N batches (0: off)"),

  GROUP("Training"),
  O("batch", K_INT, batch, F_STATE, "N", "examples (LM: sequences) per micro-batch"),
  O("steps", K_INT, steps, F_RUN, "N", "optimizer steps"),
  OD("epochs", K_INT, epochs, F_RUN, "N", "train for N epochs instead of --steps", "0: use --steps"),
  O("accum", K_INT, accum, F_STATE, "N", "micro-batches per optimizer step (gradient accumulation)"),
  OE("optim", optim, F_STATE, optim_ename, 3, "optimizer", "adam (encoder-decoder, as the paper), else adamw"),
  OD("lr", K_DBL, lr, F_STATE, "X", "learning rate (with noam: the peak, setting --noam-scale)", "1e-3"),
  OD("beta1", K_DBL, beta1, F_STATE, "X", "Adam beta1", "0.9"),
  OD("beta2", K_DBL, beta2, F_STATE, "X", "Adam beta2", "0.98 (encoder-decoder), else 0.999"),
  OD("eps", K_DBL, eps, F_STATE, "X", "Adam epsilon", "1e-9 (encoder-decoder), else 1e-8"),
  OD("weight-decay", K_DBL, weight_decay, F_STATE, "X", "weight decay (decoupled for adamw; not on norms, biases, embeddings)",
     "0.01 (adamw), else 0"),
  O("momentum", K_DBL, momentum, F_STATE, "X", "SGD momentum"),
  O("nesterov", K_BOOL, nesterov, F_STATE, NULL, "SGD Nesterov momentum"),
  OE("schedule", schedule, F_STATE, sched_ename, 5, "learning-rate schedule",
     "noam (encoder-decoder, the paper's warmup), else cosine"),
  OD("warmup", K_INT, warmup, F_STATE, "N", "warmup steps", "by --schedule"),
  O("min-lr", K_DBL, min_lr, F_STATE, "X", "final learning rate of linear and cosine"),
  O("noam-scale", K_DBL, noam_scale, F_STATE, "X", "noam: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)"),
  O("step-size", K_INT, step_size, F_STATE, "N", "step schedule: decay every N steps"),
  O("gamma", K_DBL, gamma, F_STATE, "X", "step schedule: decay factor"),
  OD("label-smoothing", K_DBL, label_smoothing, F_STATE, "X", "label smoothing of the training loss",
     "0.1 (encoder-decoder), else 0"),
  O("clip", K_DBL, clip, F_STATE, "X", "clip the global gradient norm to X (0: off)"),
  O("seed", K_INT, seed, F_STATE, "N", "seed of initialisation, dropout and shuffling"),
  O("max-nonfinite", K_INT, max_nonfinite, F_RUN, "N", "stop after N non-finite steps in a row (each is skipped)"),

  GROUP("Evaluation"),
  OD("eval-every", K_INT, eval_every, F_RUN, "N", "validate every N steps (0: only at the end)", "by --steps"),
  O("eval-examples", K_INT, eval_examples, F_RUN, "N", "held-out examples decoded for exact match during training (the end uses all)"),
  O("eval-batch", K_INT, eval_batch, F_RUN, "N", "batch size of validation and decoding"),
  O("examples", K_INT, examples, F_RUN, "N", "decoded examples printed at the end"),
  O("gen-tokens", K_INT, gen_tokens, F_RUN, "N", "decoder-only: tokens generated at the end"),
  OD("prompt", K_STR, prompt, F_RUN, "TEXT", "decoder-only: prompt of the generated text", "the start of the validation text"),
  O("temperature", K_DBL, temperature, F_RUN, "X", "decoder-only: sampling temperature (0: greedy)"),
  O("top-k", K_INT, top_k, F_RUN, "N", "decoder-only: sample among the N most likely tokens (0: all)"),

  GROUP("Checkpoints"),
  OD("ckpt-dir", K_STR, ckpt_dir, F_RUN | F_NOSAVE, "DIR", "run directory: checkpoints and metrics.csv",
     "runs/<date>-<time>-<data>, or the resumed run's"),
  OD("ckpt-every", K_INT, ckpt_every, F_RUN, "N", "save every N steps (0: only at the end)", "by --steps"),
  O("keep", K_INT, keep, F_RUN, "N", "keep the N newest checkpoints (0: all)"),
  O("resume", K_STR, resume, F_RUN | F_NOSAVE, "PATH", "continue from a checkpoint file, or the newest in a run directory"),
  O("overwrite", K_BOOL, overwrite, F_RUN | F_NOSAVE, NULL, "start over in a --ckpt-dir that holds checkpoints (deletes them)"),
  O("no-ckpt", K_BOOL, no_ckpt, F_RUN | F_NOSAVE, NULL, "write no checkpoint"),
  O("eval-only", K_BOOL, eval_only, F_RUN | F_NOSAVE, NULL, "with --resume: only validate and print examples"),
  OD("stop-after", K_INT, stop_after, F_RUN | F_NOSAVE, "N", "stop after step N with a checkpoint, as Ctrl-C would (for resume)", "0: off"),

  GROUP("Run"),
  OD("threads", K_INT, threads, F_RUN | F_NOSAVE, "N", "threads for BLIS and libtensor's kernels (results do not depend on it)",
     "LT_NUM_THREADS, else auto: all cores or 1, whichever trains faster (measured as it goes)"),
  O("log-every", K_INT, log_every, F_RUN, "N", "progress line every N steps when stdout is not a terminal"),
  OD("csv", K_STR, csv, F_RUN | F_NOSAVE, "FILE", "metrics CSV, one row per step", "<ckpt-dir>/metrics.csv"),
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

/* The defaults of the default run (an encoder-decoder on numbers in words,
 * docs/train.md "The default run"). Model fields left at -1 / NAN take
 * lt_tf_config_default(arch) unless given. */
static options default_options(void) {
  options o;
  memset(&o, 0, sizeof o);
  o.arch = LT_TF_ENCODER_DECODER;
  o.d_model = o.heads = o.kv_heads = o.enc_layers = o.dec_layers = o.d_ff = o.max_len = -1;
  o.dropout = o.norm_eps = o.rope_base = NAN;
  o.norm = o.act = o.pos = -1;
  o.task = LT_TASK_NUMBER_WORDS;
  o.task_train = 200000;
  o.task_valid = 1000;
  o.task_min_len = o.task_max_len = -1;
  o.task_symbols = 10;
  o.data_seed = 1234;
  o.valid_fraction = 0.1;
  o.tokenizer = o.tokenizer_from = -1;
  o.bpe_vocab = 1024;
  o.seq_len = -1;
  o.overlong = LT_OVERLONG_SKIP;
  o.bucket = 8;
  o.batch = 64;
  o.steps = 4000;
  o.accum = 1;
  o.optim = -1;
  o.lr = o.beta1 = o.beta2 = o.eps = o.weight_decay = NAN;
  o.momentum = 0;
  o.schedule = -1;
  o.warmup = -1;
  o.min_lr = 0;
  o.noam_scale = 0.5;
  o.step_size = 1000;
  o.gamma = 0.1;
  o.label_smoothing = NAN;
  o.clip = 1.0;
  o.seed = 42;
  o.max_nonfinite = 5;
  o.eval_every = -1;
  o.eval_examples = 200;
  o.eval_batch = 128;
  o.examples = 8;
  o.gen_tokens = 200;
  o.temperature = 0;
  o.top_k = 0;
  o.ckpt_every = -1;
  o.keep = 3;
  o.threads = 0;
  o.log_every = 100;
  return o;
}

static void *field(options *o, const optdef *d) { return (char *)o + d->off; }
static const void *cfield(const options *o, const optdef *d) { return (const char *)o + d->off; }

static int opt_index(const char *name) {
  for (int i = 0; i < N_OPTS; i++)
    if (OPTS[i].ecount >= 0 && !strcmp(OPTS[i].name, name)) return i;
  return -1;
}

/* The value of option d in o, as text. */
static char *fmt_value(const options *o, const optdef *d, char *buf, size_t n) {
  const void *p = cfield(o, d);
  switch (d->kind) {
    case K_INT: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
    case K_DBL: snprintf(buf, n, "%g", *(const double *)p); break;
    case K_STR: snprintf(buf, n, "%s", *(const char *const *)p ? *(const char *const *)p : "(none)"); break;
    case K_BOOL: snprintf(buf, n, "%s", *(const bool *)p ? "on" : "off"); break;
    case K_ENUM: snprintf(buf, n, "%s", *(const int *)p < 0 ? "(auto)" : d->ename(*(const int *)p)); break;
  }
  return buf;
}
#define VAL(o, d) fmt_value((o), (d), (char[256]){0}, 256)

static bool same_value(const options *a, const options *b, const optdef *d) {
  const void *x = cfield(a, d), *y = cfield(b, d);
  switch (d->kind) {
    case K_INT: return *(const int64_t *)x == *(const int64_t *)y;
    case K_DBL: return *(const double *)x == *(const double *)y;
    case K_BOOL: return *(const bool *)x == *(const bool *)y;
    case K_ENUM: return *(const int *)x == *(const int *)y;
    case K_STR: {
      const char *s = *(const char *const *)x, *t = *(const char *const *)y;
      return s == t || (s && t && !strcmp(s, t));
    }
  }
  return false;
}

static void copy_value(options *dst, const options *src, const optdef *d) {
  static const size_t sizes[] = {sizeof(int64_t), sizeof(double), sizeof(const char *), sizeof(bool), sizeof(int)};
  memcpy(field(dst, d), cfield(src, d), sizes[d->kind]);
}

/* "  --flag ARG   text" with the text wrapped at 100 columns under itself. */
static void print_wrapped(FILE *f, const char *lhs, const char *text) {
  enum { INDENT = 27, WIDTH = 100 };
  int col = fprintf(f, "  %-24s ", lhs);
  if (col > INDENT) fprintf(f, "\n%*s", INDENT, ""), col = INDENT;
  const char *p = text;
  while (*p) {
    const char *w = p;
    while (*w && *w != ' ') w++;
    int len = (int)(w - p);
    if (col > INDENT && col + 1 + len > WIDTH) fprintf(f, "\n%*s", INDENT, ""), col = INDENT;
    else if (col > INDENT) fputc(' ', f), col++;
    fprintf(f, "%.*s", len, p);
    col += len;
    p = *w ? w + 1 : w;
  }
  fputc('\n', f);
}

static void usage(FILE *f) {
  options def = default_options();
  fprintf(f,
          "usage: " PROG " [FLAG VALUE | --FLAG=VALUE | --[no-]SWITCH]...\n"
          "\n"
          "Trains a Transformer and reports validation loss, token accuracy and exact match (greedy\n"
          "decoding). With no flags: an encoder-decoder learns to write numbers in words (about five\n"
          "minutes on 2 cores). Ctrl-C saves a checkpoint; --resume continues bit-exactly.\n");
  for (int i = 0; i < N_OPTS; i++) {
    const optdef *d = &OPTS[i];
    if (d->ecount < 0) {
      fprintf(f, "\n%s:\n", d->name);
      continue;
    }
    char lhs[64], text[1024];
    size_t n = 0;
    if (d->kind == K_BOOL)
      snprintf(lhs, sizeof lhs, "--%s%s", d->defdesc || *(const bool *)cfield(&def, d) ? "[no-]" : "", d->name);
    else if (d->kind == K_ENUM) snprintf(lhs, sizeof lhs, "--%s NAME", d->name);
    else snprintf(lhs, sizeof lhs, "--%s %s", d->name, d->arg);
    n += (size_t)snprintf(text + n, sizeof text - n, "%s", d->help);
    if (d->kind == K_ENUM) {
      n += (size_t)snprintf(text + n, sizeof text - n, ": ");
      for (int k = 0; k < d->ecount && n < sizeof text; k++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", k ? ", " : "", d->ename(k));
    }
    if (n < sizeof text && d->defdesc) n += (size_t)snprintf(text + n, sizeof text - n, " (default: %s)", d->defdesc);
    else if (n < sizeof text && d->kind != K_BOOL && (d->kind != K_STR || *(const char *const *)cfield(&def, d)))
      n += (size_t)snprintf(text + n, sizeof text - n, " (default: %s)", VAL(&def, d));
    print_wrapped(f, lhs, text);
  }
  fprintf(f,
          "\n  --layers N               sets --enc-layers and --dec-layers\n"
          "  --post-norm              the same as --no-pre-norm\n"
          "  -h, --help               this text\n"
          "\nExit status: 0 done, 1 runtime or data error, 2 bad flags or configuration, 3 too many\n"
          "non-finite steps in a row, 128+N after signal N (a checkpoint is saved first).\n"
          "docs/train.md describes the flags, the CSV columns and checkpoints in full.\n");
}

static bool parse_bool(const char *v, bool *out) {
  if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) return *out = true, true;
  if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) return *out = false, true;
  return false;
}

/* Sets option d of o from text v, or exits with a message naming the flag. */
static void set_value(options *o, const optdef *d, const char *v) {
  void *p = field(o, d);
  char *end = NULL;
  errno = 0;
  switch (d->kind) {
    case K_INT: {
      long long x = strtoll(v, &end, 10);
      if (end == v || *end || errno) die(EXIT_USAGE, "--%s: '%s' is not an integer", d->name, v);
      *(int64_t *)p = x;
      break;
    }
    case K_DBL: {
      double x = strtod(v, &end);
      if (end == v || *end || errno || !isfinite(x)) die(EXIT_USAGE, "--%s: '%s' is not a finite number", d->name, v);
      *(double *)p = x;
      break;
    }
    case K_STR:
      *(const char **)p = v;
      break;
    case K_BOOL:
      if (!parse_bool(v, (bool *)p)) die(EXIT_USAGE, "--%s: '%s' is not on/off (true/false, 1/0)", d->name, v);
      break;
    case K_ENUM: {
      if (d->ename == arch_ename) {
        lt_tf_arch a;
        if (lt_tf_arch_parse(v, &a) == LT_OK) {
          *(int *)p = (int)a;
          break;
        }
      }
      for (int k = 0; k < d->ecount; k++)
        if (!strcmp(v, d->ename(k))) {
          *(int *)p = k;
          return;
        }
      char list[512] = "";
      for (int k = 0; k < d->ecount; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", d->ename(k));
      die(EXIT_USAGE, "--%s: unknown value '%s' (one of: %s)", d->name, v, list);
    }
  }
}

/* Parses argv into *o; given[i] says which options the command line set. */
static void parse_args(int argc, char **argv, options *o, bool *given) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (strncmp(a, "--", 2) != 0 || !a[2]) die(EXIT_USAGE, "unexpected argument '%s' (flags start with --; see --help)", a);
    char name[128];
    const char *eq = strchr(a, '='), *val = NULL;
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof name) die(EXIT_USAGE, "unknown flag '%s' (see --help)", a);
    memcpy(name, a + 2, len);
    name[len] = '\0';
    if (eq) val = eq + 1;
    bool negated = false;
    int idx = opt_index(name);
    if (!strcmp(name, "layers")) { /* sets both layer counts */
      if (!val && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) die(EXIT_USAGE, "--layers needs a value (N)");
      if (!val) val = argv[++i];
      int e = opt_index("enc-layers"), d = opt_index("dec-layers");
      set_value(o, &OPTS[e], val);
      set_value(o, &OPTS[d], val);
      given[e] = given[d] = true;
      continue;
    }
    if (idx < 0 && !strcmp(name, "post-norm")) idx = opt_index("pre-norm"), negated = true;
    if (idx < 0 && !strncmp(name, "no-", 3) && (idx = opt_index(name + 3)) >= 0) {
      if (OPTS[idx].kind != K_BOOL) idx = -1;
      negated = true;
    }
    if (idx < 0) die(EXIT_USAGE, "unknown flag --%s (see --help)", name);
    const optdef *d = &OPTS[idx];
    if (d->kind == K_BOOL) {
      bool b = true;
      if (val && !parse_bool(val, &b)) die(EXIT_USAGE, "--%s: '%s' is not on/off (true/false, 1/0)", name, val);
      *(bool *)field(o, d) = negated ? !b : b;
    } else {
      if (!val) { /* the next argument, unless it is the next flag (use --flag=--value for such a value) */
        if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
          die(EXIT_USAGE, "--%s needs a value (%s)", name, d->arg ? d->arg : "NAME");
        val = argv[++i];
      }
      set_value(o, d, val);
    }
    given[idx] = true;
  }
}

static bool G(const bool *given, const char *name) { return given[opt_index(name)]; }

/* The model configuration the options describe (vocab_size etc. set by the caller). */
static lt_tf_config config_of(const options *o) {
  lt_tf_config c = lt_tf_config_default((lt_tf_arch)o->arch);
  c.d_model = o->d_model, c.n_heads = o->heads, c.n_kv_heads = o->kv_heads;
  c.n_enc_layers = o->enc_layers, c.n_dec_layers = o->dec_layers, c.d_ff = o->d_ff, c.max_len = o->max_len;
  c.dropout = o->dropout, c.norm = (lt_tf_norm)o->norm, c.pre_norm = o->pre_norm, c.act = (lt_activation)o->act;
  c.swiglu = o->swiglu, c.pos = (lt_tf_pos)o->pos, c.tie_embeddings = o->tie, c.scale_embeddings = o->scale_emb;
  c.bias = o->bias, c.norm_eps = o->norm_eps, c.rope_base = o->rope_base;
  c.pad_id = LT_TOKEN_PAD;
  return c;
}

static void options_from_config(options *o, const lt_tf_config *c) {
  o->arch = (int)c->arch;
  o->d_model = c->d_model, o->heads = c->n_heads, o->kv_heads = c->n_kv_heads;
  o->enc_layers = c->n_enc_layers, o->dec_layers = c->n_dec_layers, o->d_ff = c->d_ff, o->max_len = c->max_len;
  o->dropout = c->dropout, o->norm = (int)c->norm, o->pre_norm = c->pre_norm, o->act = (int)c->act;
  o->swiglu = c->swiglu, o->pos = (int)c->pos, o->tie = c->tie_embeddings, o->scale_emb = c->scale_embeddings;
  o->bias = c->bias, o->norm_eps = c->norm_eps, o->rope_base = c->rope_base;
}

/* Fills every default that depends on other flags (fresh runs only: a resumed
 * run takes its settings from the checkpoint). */
static void finalize_options(options *o, const bool *given) {
  /* model: lt_tf_config_default(arch) for every field not given */
  options m = *o;
  lt_tf_config dc = lt_tf_config_default((lt_tf_arch)o->arch);
  options_from_config(&m, &dc);
  for (int i = 0; i < N_OPTS; i++)
    if ((OPTS[i].flags & F_MODEL) && OPTS[i].ecount >= 0 && !given[i]) copy_value(o, &m, &OPTS[i]);
  if (given[opt_index("heads")] && !given[opt_index("kv-heads")]) o->kv_heads = o->heads;
  /* generated tasks never repeat an epoch's worth of data much: no dropout needed (and it slows learning) */
  if (!given[opt_index("dropout")] && !o->tsv && !o->text) o->dropout = 0.0;

  bool encdec = o->arch == LT_TF_ENCODER_DECODER;
  int n_src = G(given, "task") + (o->tsv != NULL) + (o->text != NULL);
  if (n_src > 1) die(EXIT_USAGE, "give one data source: --task, --tsv or --text");
  if (o->text && o->arch != LT_TF_DECODER_ONLY)
    die(EXIT_USAGE, "--text is language modelling: it needs --arch decoder-only");
  if (o->arch == LT_TF_DECODER_ONLY && !o->text)
    die(EXIT_USAGE, "--arch decoder-only trains on a text file: give --text FILE (for example "
                    "--text /usr/share/common-licenses/GPL-3)");
  if (o->arch == LT_TF_ENCODER_ONLY && !o->tsv)
    die(EXIT_USAGE, "--arch encoder-only classifies: give --tsv FILE with 'text<TAB>label' lines");
  if (o->valid_tsv && !o->tsv) die(EXIT_USAGE, "--valid-tsv needs --tsv");
  bool words = !o->tsv && !o->text && o->task == LT_TASK_NUMBER_WORDS;
  if (o->tokenizer < 0) o->tokenizer = words ? LT_TOKENIZER_BPE : LT_TOKENIZER_CHAR;
  if (o->tokenizer_from < 0) o->tokenizer_from = words ? FROM_TARGET : FROM_BOTH;
  if (!o->tsv && !o->text) { /* task lengths by task */
    lt_task_opts td = LT_TASK_DEFAULTS((lt_task_kind)o->task);
    if (o->task == LT_TASK_NUMBER_WORDS) td.min_len = 1, td.max_len = 6;
    if (!G(given, "task-min-len")) o->task_min_len = td.min_len;
    if (!G(given, "task-max-len")) o->task_max_len = td.max_len;
  }

  /* optimizer: the paper's Adam for the encoder-decoder, AdamW otherwise */
  if (o->optim < 0) o->optim = encdec ? LT_OPTIM_ADAM : LT_OPTIM_ADAMW;
  lt_optim_config od = lt_optim_defaults((lt_optim_kind)o->optim);
  if (encdec && o->optim != LT_OPTIM_SGD) od.beta2 = 0.98, od.eps = 1e-9;
  if (!G(given, "beta1")) o->beta1 = od.beta1;
  if (!G(given, "beta2")) o->beta2 = od.beta2;
  if (!G(given, "eps")) o->eps = od.eps;
  if (!G(given, "weight-decay")) o->weight_decay = od.weight_decay;
  if (!G(given, "momentum")) o->momentum = od.momentum;
  if (!G(given, "nesterov")) o->nesterov = od.nesterov;

  if (o->schedule < 0) o->schedule = encdec ? LT_SCHED_NOAM : LT_SCHED_WARMUP_COSINE;
  if (!G(given, "warmup")) {
    int64_t w = o->steps / 10 > 0 ? o->steps / 10 : 1;
    o->warmup = o->schedule == LT_SCHED_NOAM ? (w < 400 ? w : 400) : (w < 100 ? w : 100);
    if (o->schedule == LT_SCHED_CONSTANT || o->schedule == LT_SCHED_STEP) o->warmup = 0;
  }
  if (!G(given, "lr")) o->lr = 1e-3;
  if (o->schedule == LT_SCHED_NOAM && G(given, "lr")) {
    if (G(given, "noam-scale")) die(EXIT_USAGE, "with --schedule noam give --lr (the peak) or --noam-scale, not both");
    /* peak at step = warmup: scale * d_model^-0.5 * warmup^-0.5 = lr */
    double w = (double)(o->warmup > 0 ? o->warmup : 1);
    o->noam_scale = o->lr * sqrt((double)o->d_model) * sqrt(w);
  }
  if (!G(given, "label-smoothing")) o->label_smoothing = encdec ? 0.1 : 0.0;
  if (o->text) { /* language modelling: the model's positions are the context it trains on */
    if (!G(given, "seq-len")) o->seq_len = G(given, "max-len") && o->max_len < 128 ? o->max_len : 128;
    if (!G(given, "max-len")) o->max_len = o->seq_len;
  } else if (!G(given, "seq-len")) {
    o->seq_len = o->max_len;
  }
}

/* Range checks of everything the library does not check itself. */
static void check_options(const options *o, const bool *given) {
#define NEED(cond, ...) \
  do {                  \
    if (!(cond)) die(EXIT_USAGE, __VA_ARGS__); \
  } while (0)
  NEED(o->batch >= 1, "--batch %lld: must be >= 1", (long long)o->batch);
  NEED(o->steps >= 1, "--steps %lld: must be >= 1", (long long)o->steps);
  NEED(o->epochs >= 0, "--epochs %lld: must be >= 0", (long long)o->epochs);
  NEED(!(G(given, "steps") && G(given, "epochs")), "give --steps or --epochs, not both");
  NEED(o->accum >= 1, "--accum %lld: must be >= 1", (long long)o->accum);
  NEED(o->lr > 0, "--lr %g: must be > 0", o->lr);
  NEED(o->noam_scale > 0, "--noam-scale %g: must be > 0", o->noam_scale);
  NEED(o->warmup >= 0, "--warmup %lld: must be >= 0", (long long)o->warmup);
  NEED(o->min_lr >= 0, "--min-lr %g: must be >= 0", o->min_lr);
  NEED(o->step_size >= 1, "--step-size %lld: must be >= 1", (long long)o->step_size);
  NEED(o->label_smoothing >= 0 && o->label_smoothing <= 1, "--label-smoothing %g: must be in [0, 1]",
       o->label_smoothing);
  NEED(o->clip >= 0, "--clip %g: must be >= 0 (0 turns clipping off)", o->clip);
  NEED(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1, "--beta1 %g / --beta2 %g: must be in [0, 1)",
       o->beta1, o->beta2);
  NEED(o->eps >= 0 && o->weight_decay >= 0 && o->momentum >= 0, "--eps, --weight-decay and --momentum must be >= 0");
  NEED(o->max_nonfinite >= 1, "--max-nonfinite %lld: must be >= 1", (long long)o->max_nonfinite);
  NEED(o->valid_fraction > 0 && o->valid_fraction < 1, "--valid-fraction %g: must be in (0, 1)", o->valid_fraction);
  NEED(o->task_train >= 1 && o->task_valid >= 1, "--task-train and --task-valid must be >= 1");
  NEED(o->bpe_vocab >= 261, "--bpe-vocab %lld: must be >= 261 (4 specials + 256 bytes + 1 merge)",
       (long long)o->bpe_vocab);
  NEED(o->seq_len >= 2, "--seq-len %lld: must be >= 2", (long long)o->seq_len);
  NEED(o->seq_len <= o->max_len, "--seq-len %lld is longer than the model's --max-len %lld", (long long)o->seq_len,
       (long long)o->max_len);
  NEED(o->bucket >= 0, "--bucket %lld: must be >= 0", (long long)o->bucket);
  NEED(o->eval_examples >= 1 && o->eval_batch >= 1, "--eval-examples and --eval-batch must be >= 1");
  NEED(o->examples >= 0 && o->gen_tokens >= 0 && o->top_k >= 0, "--examples, --gen-tokens and --top-k must be >= 0");
  NEED(o->temperature >= 0, "--temperature %g: must be >= 0", o->temperature);
  NEED(o->keep >= 0 && o->stop_after >= 0, "--keep and --stop-after must be >= 0");
  NEED(o->threads >= 0 && o->threads <= 1024, "--threads %lld: must be in [1, 1024]", (long long)o->threads);
  NEED(o->log_every >= 1, "--log-every %lld: must be >= 1", (long long)o->log_every);
  NEED(!o->eval_only || o->resume, "--eval-only evaluates a checkpoint: give --resume PATH");
#undef NEED
}

/* ---- options in a checkpoint ("opt.<name>" in /extra) ----------------------- */

/* Saved: the data, optimizer and run settings (the model is in the config). */
static bool saved_option(const optdef *d) { return d->ecount >= 0 && !(d->flags & (F_MODEL | F_NOSAVE)); }

static void options_to_meta(const options *o, lt_ckpt_meta *m) {
  for (int i = 0; i < N_OPTS; i++) {
    const optdef *d = &OPTS[i];
    if (!saved_option(d)) continue;
    char key[96];
    snprintf(key, sizeof key, "opt.%s", d->name);
    const void *p = cfield(o, d);
    lt_status s = LT_OK;
    switch (d->kind) {
      case K_INT: s = lt_ckpt_meta_set_int(m, key, *(const int64_t *)p); break;
      case K_DBL: s = lt_ckpt_meta_set_double(m, key, *(const double *)p); break;
      case K_BOOL: s = lt_ckpt_meta_set_int(m, key, *(const bool *)p); break;
      case K_ENUM: s = lt_ckpt_meta_set_string(m, key, d->ename(*(const int *)p)); break;
      case K_STR:
        if (*(const char *const *)p) s = lt_ckpt_meta_set_string(m, key, *(const char *const *)p);
        break;
    }
    TRY(EXIT_DATA, s, "saving the settings");
  }
}

/* Strings restored from a checkpoint live until exit. */
static char *g_strings[64];
static int g_nstrings;

static void options_from_meta(options *o, const lt_ckpt_meta *m, const char *path) {
  for (int i = 0; i < N_OPTS; i++) {
    const optdef *d = &OPTS[i];
    if (!saved_option(d)) continue;
    char key[96];
    snprintf(key, sizeof key, "opt.%s", d->name);
    int kind = lt_ckpt_meta_kind(m, key);
    void *p = field(o, d);
    if (kind < 0) {
      if (d->kind == K_STR) *(const char **)p = NULL;
      continue; /* absent: the default */
    }
    int64_t iv;
    double dv;
    const char *sv;
    bool ok = true;
    switch (d->kind) {
      case K_INT: ok = lt_ckpt_meta_get_int(m, key, &iv) == LT_OK, *(int64_t *)p = iv; break;
      case K_DBL: ok = lt_ckpt_meta_get_double(m, key, &dv) == LT_OK, *(double *)p = dv; break;
      case K_BOOL: ok = lt_ckpt_meta_get_int(m, key, &iv) == LT_OK, *(bool *)p = iv != 0; break;
      case K_ENUM:
        ok = lt_ckpt_meta_get_string(m, key, &sv) == LT_OK;
        if (ok) {
          int k = 0;
          while (k < d->ecount && strcmp(d->ename(k), sv)) k++;
          ok = k < d->ecount;
          *(int *)p = k;
        }
        break;
      case K_STR:
        ok = lt_ckpt_meta_get_string(m, key, &sv) == LT_OK && g_nstrings < 64;
        if (ok) *(const char **)p = g_strings[g_nstrings++] = xstrdup(sv);
        break;
    }
    if (!ok) die(EXIT_DATA, "checkpoint '%s': the saved setting '%s' is unreadable", path, key);
  }
}

/* ======================================================================== */
/* Data                                                                     */
/* ======================================================================== */

typedef enum { DATA_SEQ2SEQ, DATA_LM, DATA_CLASSIFY } data_kind;

typedef struct data {
  data_kind kind;
  char name[128];                   /* for messages and the run directory */
  lt_tokenizer *tok;
  /* seq2seq and classification */
  lt_text_pairs *train_text, *valid_text;
  lt_seq_pairs *train, *valid;
  lt_seq2seq_loader *sl;
  char **classes;                   /* classification: label of class i (sorted) */
  int64_t n_classes;
  /* language modelling */
  lt_tensor *train_tokens, *valid_tokens;
  lt_lm_loader *ll;
} data;

static int64_t batches_per_epoch(const data *D) {
  return D->kind == DATA_LM ? lt_lm_loader_batches_per_epoch(D->ll) : lt_seq2seq_loader_batches_per_epoch(D->sl);
}
static lt_loader_position loader_pos(const data *D) {
  return D->kind == DATA_LM ? lt_lm_loader_get_position(D->ll) : lt_seq2seq_loader_get_position(D->sl);
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static lt_tokenizer *build_tokenizer(const options *o, const char *text, size_t len, const char *what) {
  lt_tokenizer *t = NULL;
  if (o->tokenizer == LT_TOKENIZER_BYTE) t = lt_tokenizer_new_byte();
  else if (o->tokenizer == LT_TOKENIZER_CHAR) t = lt_tokenizer_new_char(text, len);
  else t = lt_tokenizer_train_bpe(text, len, &(lt_bpe_opts){0, o->bpe_vocab, 2});
  if (!t) die(EXIT_DATA, "building the %s tokenizer from %s: %s", tok_ename(o->tokenizer), what, lt_last_error());
  return t;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Classification: the class id of each label (sorted distinct training labels). */
static void build_classes(data *D) {
  int64_t n = lt_text_pairs_count(D->train_text);
  char **v = xmalloc(sizeof *v * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    const char *tgt;
    lt_text_pairs_get(D->train_text, i, NULL, NULL, &tgt, NULL);
    v[i] = (char *)tgt;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    if (k == 0 || strcmp(v[k - 1], v[i])) v[k++] = v[i];
  if (k < 2) die(EXIT_DATA, "'%s': encoder-only classification needs at least 2 distinct labels, found %lld", D->name,
                 (long long)k);
  D->classes = xmalloc(sizeof *D->classes * (size_t)k);
  for (int64_t i = 0; i < k; i++) D->classes[i] = xstrdup(v[i]);
  D->n_classes = k;
  free(v);
}

static int64_t class_of(const data *D, const char *label) {
  int64_t lo = 0, hi = D->n_classes - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2;
    int c = strcmp(D->classes[mid], label);
    if (!c) return mid;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* Classification pairs: source ids, target = [class id]. Unknown validation
 * labels are counted and skipped. */
static lt_seq_pairs *encode_classes(const options *o, data *D, const lt_text_pairs *tp, int64_t *n_aff) {
  lt_seq_pairs *sp = lt_seq_pairs_new();
  if (!sp) die_lt(EXIT_DATA, "encoding");
  *n_aff = 0;
  for (int64_t i = 0; i < lt_text_pairs_count(tp); i++) {
    const char *src, *tgt;
    size_t sl;
    lt_text_pairs_get(tp, i, &src, &sl, &tgt, NULL);
    int64_t c = class_of(D, tgt);
    int64_t *ids, n;
    TRY(EXIT_DATA, lt_tokenizer_encode(D->tok, src, sl, &ids, &n), "encoding a text");
    if (c < 0 || n == 0 || (n > o->seq_len && o->overlong == LT_OVERLONG_SKIP)) {
      (*n_aff)++;
      free(ids);
      continue;
    }
    if (n > o->seq_len && o->overlong == LT_OVERLONG_ERROR)
      die(EXIT_DATA, "'%s': example %lld has %lld tokens, more than --seq-len %lld (--overlong skip or truncate)",
          D->name, (long long)i + 1, (long long)n, (long long)o->seq_len);
    if (n > o->seq_len) n = o->seq_len;
    TRY(EXIT_DATA, lt_seq_pairs_add(sp, ids, n, &c, 1), "encoding");
    free(ids);
  }
  if (lt_seq_pairs_count(sp) == 0) die(EXIT_DATA, "'%s': no usable example left", D->name);
  return sp;
}

/* Loads or generates the data. tok (from a checkpoint) may be NULL: then it
 * is built from the training text. */
static void load_data(const options *o, data *D, lt_tokenizer *tok) {
  memset(D, 0, sizeof *D);
  D->tok = tok;
  if (o->text) { /* ---- language modelling ---- */
    D->kind = DATA_LM;
    snprintf(D->name, sizeof D->name, "%s", base_name(o->text));
    char *text;
    size_t len;
    TRY(EXIT_DATA, lt_text_file_read(o->text, &text, &len), "reading --text");
    if (len == 0) die(EXIT_DATA, "--text '%s' is empty", o->text);
    if (o->tokenizer == LT_TOKENIZER_CHAR) {
      size_t bad;
      if (!lt_utf8_valid(text, len, &bad))
        die(EXIT_DATA, "--text '%s': invalid UTF-8 at byte %zu (use --tokenizer byte for arbitrary bytes)", o->text,
            bad);
    }
    if (!D->tok) D->tok = build_tokenizer(o, text, len, o->text);
    lt_tensor *all = lt_tokenizer_encode_tensor(D->tok, text, len);
    free(text);
    if (!all) die_lt(EXIT_DATA, "tokenizing --text");
    int64_t N = all->numel, nv = (int64_t)((double)N * o->valid_fraction);
    if (nv < o->seq_len + 1 || N - nv < o->seq_len + 1)
      die(EXIT_DATA, "--text '%s' has %lld tokens: too few for --seq-len %lld with --valid-fraction %g (each part needs "
          "at least seq-len + 1 tokens)", o->text, (long long)N, (long long)o->seq_len, o->valid_fraction);
    lt_scope *split = lt_scope_begin(); /* frees the narrow views */
    D->train_tokens = lt_tensor_keep(lt_contiguous(lt_narrow(all, 0, 0, N - nv)));
    D->valid_tokens = lt_tensor_keep(lt_contiguous(lt_narrow(all, 0, N - nv, nv)));
    lt_scope_end(split);
    lt_tensor_free(all);
    if (!D->train_tokens || !D->valid_tokens) die_lt(EXIT_DATA, "splitting --text");
    lt_batch_opts bo = LT_BATCH_DEFAULTS(o->batch);
    bo.seed = (uint64_t)o->seed + 2;
    D->ll = lt_lm_loader_new(D->train_tokens, o->seq_len, &bo);
    if (!D->ll) die_lt(EXIT_DATA, "the text loader");
    return;
  }
  /* ---- pairs: a task or a TSV corpus ---- */
  D->kind = o->arch == LT_TF_ENCODER_ONLY ? DATA_CLASSIFY : DATA_SEQ2SEQ;
  if (o->tsv) {
    snprintf(D->name, sizeof D->name, "%s", base_name(o->tsv));
    lt_tsv_opts to = {o->skip_bad_lines};
    int64_t skipped = 0;
    lt_text_pairs *all = lt_text_pairs_load_tsv(o->tsv, &to, &skipped);
    if (!all) die_lt(EXIT_DATA, "reading --tsv");
    if (skipped) printf("%s: skipped %lld bad lines (--skip-bad-lines)\n", o->tsv, (long long)skipped);
    if (o->valid_tsv) {
      D->train_text = all;
      D->valid_text = lt_text_pairs_load_tsv(o->valid_tsv, &to, &skipped);
      if (!D->valid_text) die_lt(EXIT_DATA, "reading --valid-tsv");
    } else {
      TRY(EXIT_DATA, lt_text_pairs_split(all, o->valid_fraction, &D->train_text, &D->valid_text), "splitting --tsv");
      lt_text_pairs_free(all);
      if (lt_text_pairs_count(D->valid_text) == 0)
        die(EXIT_DATA, "--tsv '%s': no example fell into the validation part (raise --valid-fraction or give "
            "--valid-tsv)", o->tsv);
      if (lt_text_pairs_count(D->train_text) == 0)
        die(EXIT_DATA, "--tsv '%s': no training example left after the split (lower --valid-fraction)", o->tsv);
    }
  } else {
    snprintf(D->name, sizeof D->name, "%s", lt_task_name((lt_task_kind)o->task));
    lt_task_opts to = LT_TASK_DEFAULTS((lt_task_kind)o->task);
    to.num_examples = o->task_train;
    to.min_len = o->task_min_len, to.max_len = o->task_max_len;
    to.num_symbols = (int)o->task_symbols;
    to.valid_fraction = o->valid_fraction;
    to.seed = (uint64_t)o->data_seed;
    D->train_text = lt_task_generate(&to, LT_SPLIT_TRAIN);
    if (!D->train_text) die_lt(EXIT_USAGE, "generating the task");
    to.num_examples = o->task_valid;
    to.seed = (uint64_t)o->data_seed + 1;
    D->valid_text = lt_task_generate(&to, LT_SPLIT_VALID);
    if (!D->valid_text) die_lt(EXIT_USAGE, "generating the task's validation examples");
  }
  if (!D->tok) {
    char *text;
    size_t len;
    TRY(EXIT_DATA, lt_text_pairs_concat(D->train_text, &text, &len), "collecting the training text");
    if (o->tokenizer_from != FROM_BOTH) { /* one side only: keep every other line of "src\ntgt\n..." */
      size_t k = 0;
      int line = 0;
      for (size_t i = 0; i < len; i++) {
        bool keep = (line % 2 == 0) == (o->tokenizer_from == FROM_SOURCE);
        if (keep) text[k++] = text[i];
        if (text[i] == '\n') line++;
      }
      len = k;
      text[len] = '\0';
    }
    D->tok = build_tokenizer(o, text, len,
                             o->tokenizer_from == FROM_BOTH ? "the training text" : "one side of the training text");
    free(text);
  }
  int64_t aff_t = 0, aff_v = 0;
  if (D->kind == DATA_CLASSIFY) {
    build_classes(D);
    D->train = encode_classes(o, D, D->train_text, &aff_t);
    D->valid = encode_classes(o, D, D->valid_text, &aff_v);
  } else {
    lt_seq_opts so = {o->seq_len, o->seq_len, (lt_overlong)o->overlong};
    D->train = lt_seq_pairs_encode(D->train_text, D->tok, D->tok, &so, &aff_t);
    if (!D->train) die_lt(EXIT_DATA, "encoding the training examples (see --seq-len, --overlong)");
    D->valid = lt_seq_pairs_encode(D->valid_text, D->tok, D->tok, &so, &aff_v);
    if (!D->valid) die_lt(EXIT_DATA, "encoding the validation examples (see --seq-len, --overlong)");
  }
  if (aff_t || aff_v)
    printf("%s: %s %lld training and %lld validation examples (--seq-len %lld, --overlong %s%s)\n", D->name,
           o->overlong == LT_OVERLONG_TRUNCATE ? "truncated" : "skipped", (long long)aff_t, (long long)aff_v,
           (long long)o->seq_len, overlong_ename(o->overlong), D->kind == DATA_CLASSIFY ? "; or unknown label" : "");
  lt_batch_opts bo = LT_BATCH_DEFAULTS(o->batch);
  bo.bucket_batches = o->bucket;
  bo.seed = (uint64_t)o->seed + 2;
  D->sl = lt_seq2seq_loader_new(D->train, &bo);
  if (!D->sl) die_lt(EXIT_DATA, "the batch loader");
}

static void free_data(data *D) {
  lt_seq2seq_loader_free(D->sl);
  lt_lm_loader_free(D->ll);
  lt_seq_pairs_free(D->train);
  lt_seq_pairs_free(D->valid);
  lt_text_pairs_free(D->train_text);
  lt_text_pairs_free(D->valid_text);
  lt_tensor_free(D->train_tokens);
  lt_tensor_free(D->valid_tokens);
  for (int64_t i = 0; i < D->n_classes; i++) free(D->classes[i]);
  free(D->classes);
  lt_tokenizer_free(D->tok);
  memset(D, 0, sizeof *D);
}

/* Text of ids[0..n) (stopping at <eos>), new (free with free()). */
static char *ids_text(const lt_tokenizer *tok, const int64_t *ids, int64_t n) {
  int64_t k = 0;
  while (k < n && ids[k] != LT_TOKEN_EOS) k++;
  char *s;
  size_t len;
  if (lt_tokenizer_decode(tok, ids, k, 0, &s, &len) != LT_OK) return xstrdup("<undecodable>");
  for (size_t i = 0; i < len; i++)
    if (s[i] == '\n' || s[i] == '\t' || s[i] == '\r') s[i] = ' ';
  return s;
}

/* ======================================================================== */
/* The run: everything a step, an evaluation and a checkpoint need          */
/* ======================================================================== */

typedef struct run {
  options o;
  bool given[N_OPTS];
  data D;
  lt_tf_config cfg;
  lt_transformer *model;
  lt_params *params;
  lt_optim_config oc;
  lt_optimizer *opt;
  lt_schedule sched;
  lt_generator *dropout_gen;  /* dropout draws (saved as "dropout") */
  lt_generator *sample_gen;   /* sampling of generated text (not training state) */
  int64_t step;               /* optimizer steps done (including skipped ones) */
  int64_t start_step;         /* where this process started */
  int64_t last_saved;         /* step of the newest checkpoint this run wrote or loaded */
  int64_t tokens;             /* tokens trained on so far (all processes) */
  double train_seconds;       /* time in training steps so far (all processes) */
  int64_t bad_streak;         /* non-finite steps in a row */
  char dir[PATH_LEN];         /* run directory */
  char csv_path[PATH_LEN];
  FILE *csv;
  char last_ckpt[PATH_LEN];
} run;

static run R; /* global so that everything stays reachable (and leak-checked) whatever the exit path */

/* ---- evaluation ------------------------------------------------------------ */

typedef struct eval_result {
  double loss;        /* mean cross-entropy per target token (no label smoothing) */
  double token_acc;   /* teacher-forced argmax accuracy */
  int64_t n_exact, n_decoded; /* exact match by greedy decoding (classification: accuracy) */
  double seconds;
  bool interrupted;
} eval_result;

/* Loss and token accuracy of examples [0, n) of pairs, teacher forced. */
static void eval_pairs_loss(run *r, const lt_seq_pairs *pairs, eval_result *E) {
  int64_t n = lt_seq_pairs_count(pairs), B = r->o.eval_batch;
  double loss_sum = 0, correct = 0, count = 0;
  int64_t *idx = xmalloc(sizeof *idx * (size_t)B);
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
  for (int64_t b0 = 0; b0 < n && !g_signal; b0 += B) {
    int64_t nb = n - b0 < B ? n - b0 : B;
    for (int64_t i = 0; i < nb; i++) idx[i] = b0 + i;
    lt_scope *s = lt_scope_begin();
    lt_seq2seq_batch b;
    TRY(EXIT_DATA, lt_seq2seq_collate(pairs, idx, nb, &b), "validation batch");
    lt_tensor *logits, *labels;
    if (r->D.kind == DATA_CLASSIFY) {
      logits = lt_transformer_classify(r->model, b.src, b.src_mask, NULL); /* [B, n_classes] */
      labels = lt_select(b.labels, 1, 0);                                  /* [B] */
    } else {
      lt_tensor *mem = lt_transformer_encode(r->model, b.src, b.src_mask, NULL);
      logits = lt_transformer_decode(r->model, b.tgt_in, b.tgt_mask, mem, b.src_mask, 0, NULL); /* [B, T, V] */
      labels = b.labels;
    }
    double l, c;
    lt_tensor *hit = lt_sum(lt_eq(lt_argmax(logits, -1, false), labels), 0, NULL, false);
    if (!hit || lt_item(lt_cross_entropy(logits, labels, &ce), &l) != LT_OK || lt_item(hit, &c) != LT_OK)
      die_lt(EXIT_DATA, "validation forward");
    loss_sum += l, correct += c;
    count += r->D.kind == DATA_CLASSIFY ? (double)nb : (double)b.n_tokens;
    lt_seq2seq_batch_free(&b);
    lt_scope_end(s);
  }
  free(idx);
  E->loss = count > 0 ? loss_sum / count : NAN;
  E->token_acc = count > 0 ? correct / count : NAN;
  if (r->D.kind == DATA_CLASSIFY) E->n_exact = (int64_t)correct, E->n_decoded = (int64_t)count;
  E->interrupted = g_signal != 0;
}

typedef struct len_idx {
  int64_t len, i;
} len_idx;
static int cmp_len(const void *a, const void *b) {
  const len_idx *x = a, *y = b;
  return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->i < y->i ? -1 : x->i > y->i);
}

/* Exact match of greedy decoding on examples [0, n) of the validation pairs.
 * Batches hold examples of similar target length (decoding stops when the
 * longest reference + 1 tokens are made: anything longer is wrong anyway).
 * out[i] (if out) receives the decoded text of example i < n_out. */
static void eval_exact(run *r, int64_t n, eval_result *E, char **out, int64_t n_out) {
  const lt_seq_pairs *V = r->D.valid;
  if (n > lt_seq_pairs_count(V)) n = lt_seq_pairs_count(V);
  len_idx *order = xmalloc(sizeof *order * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    const int64_t *s, *t;
    int64_t sl, tl;
    lt_seq_pairs_get(V, i, &s, &sl, &t, &tl);
    order[i] = (len_idx){tl, i};
  }
  qsort(order, (size_t)n, sizeof *order, cmp_len);
  int64_t B = r->o.eval_batch, *idx = xmalloc(sizeof *idx * (size_t)B), *gen = NULL;
  E->n_exact = E->n_decoded = 0;
  for (int64_t b0 = 0; b0 < n && !g_signal; b0 += B) {
    int64_t nb = n - b0 < B ? n - b0 : B, maxlen = 0;
    for (int64_t k = 0; k < nb; k++) {
      idx[k] = order[b0 + k].i;
      if (order[b0 + k].len > maxlen) maxlen = order[b0 + k].len;
    }
    lt_scope *s = lt_scope_begin();
    lt_seq2seq_batch b;
    TRY(EXIT_DATA, lt_seq2seq_collate(V, idx, nb, &b), "decoding batch");
    lt_generate_opts go = lt_generate_defaults(); /* greedy; <bos>, <eos>, <pad>: the LT_TOKEN_* ids */
    go.max_new = maxlen + 1 < r->cfg.max_len ? maxlen + 1 : r->cfg.max_len;
    lt_generate_result gr = {0};
    TRY(EXIT_DATA, lt_transformer_generate(r->model, b.src, b.src_mask, NULL, &go, NULL, &gr), "greedy decoding");
    lt_tensor *y = gr.tokens; /* [nb, L] */
    int64_t L = y->shape[1];
    gen = realloc(gen, sizeof *gen * (size_t)(nb * L));
    if (!gen) die(EXIT_DATA, "out of memory");
    TRY(EXIT_DATA, lt_tensor_read(y, LT_DTYPE_I64, gen, nb * L), "reading decoded ids");
    for (int64_t k = 0; k < nb; k++) {
      const int64_t *src, *tgt, *g = gen + k * L;
      int64_t sl, tl, gl = 0;
      lt_seq_pairs_get(V, idx[k], &src, &sl, &tgt, &tl);
      while (gl < L && g[gl] != LT_TOKEN_EOS) gl++;
      /* exact: an <eos> was made and the text equals the reference's (BPE may spell a text in several ways) */
      bool ok = gl < L && gl == tl && !memcmp(g, tgt, sizeof *g * (size_t)tl);
      char *text = ids_text(r->D.tok, g, L);
      if (!ok && gl < L) {
        char *ref = ids_text(r->D.tok, tgt, tl);
        ok = !strcmp(text, ref);
        free(ref);
      }
      E->n_exact += ok;
      if (out && idx[k] < n_out) out[idx[k]] = text;
      else free(text);
    }
    E->n_decoded += nb;
    lt_seq2seq_batch_free(&b);
    lt_scope_end(s);
  }
  free(gen), free(idx), free(order);
  E->interrupted = g_signal != 0;
}

/* Language modelling: mean loss over the validation tokens in chunks of --seq-len. */
static void eval_lm(run *r, eval_result *E) {
  lt_batch_opts bo = LT_BATCH_DEFAULTS(r->o.eval_batch);
  bo.shuffle = false;
  lt_lm_loader *L = lt_lm_loader_new(r->D.valid_tokens, r->o.seq_len, &bo);
  if (!L) die_lt(EXIT_DATA, "validation loader");
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
  double sum = 0, correct = 0, count = 0;
  for (int64_t i = 0; i < lt_lm_loader_batches_per_epoch(L) && !g_signal; i++) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *x, *y;
    TRY(EXIT_DATA, lt_lm_loader_next(L, &x, &y), "validation batch");
    lt_tensor *logits = lt_transformer_decode(r->model, x, NULL, NULL, NULL, 0, NULL);
    double l, c;
    lt_tensor *hit = lt_sum(lt_eq(lt_argmax(logits, -1, false), y), 0, NULL, false);
    if (!hit || lt_item(lt_cross_entropy(logits, y, &ce), &l) != LT_OK || lt_item(hit, &c) != LT_OK)
      die_lt(EXIT_DATA, "validation forward");
    sum += l, correct += c, count += (double)y->numel;
    lt_scope_end(s);
  }
  lt_lm_loader_free(L);
  E->loss = count > 0 ? sum / count : NAN;
  E->token_acc = count > 0 ? correct / count : NAN;
  E->interrupted = g_signal != 0;
}

/* Validation: loss and token accuracy on every held-out example; exact match
 * on the first n_exact (seq2seq). */
static eval_result evaluate(run *r, int64_t n_exact, char **out, int64_t n_out) {
  eval_result E = {NAN, NAN, 0, 0, 0, false};
  double t0 = now_s();
  bool prev = lt_set_grad_enabled(false);
  if (r->D.kind == DATA_LM) eval_lm(r, &E);
  else eval_pairs_loss(r, r->D.valid, &E);
  if (r->D.kind == DATA_SEQ2SEQ && !E.interrupted && n_exact > 0) eval_exact(r, n_exact, &E, out, n_out);
  lt_set_grad_enabled(prev);
  E.seconds = now_s() - t0;
  return E;
}

static void print_eval(const run *r, const eval_result *E, const char *what) {
  end_line();
  printf("%s step %lld: loss %.4f", what, (long long)r->step, E->loss);
  if (r->D.kind != DATA_CLASSIFY) printf(" (ppl %.2f), token accuracy %.2f%%", exp(E->loss), 100 * E->token_acc);
  if (E->n_decoded > 0)
    printf(", %s %.2f%% (%lld/%lld)", r->D.kind == DATA_CLASSIFY ? "accuracy" : "exact match",
           100.0 * (double)E->n_exact / (double)E->n_decoded, (long long)E->n_exact, (long long)E->n_decoded);
  printf(" [%s]\n", DUR(E->seconds));
  fflush(stdout);
}

/* ---- checkpoints ------------------------------------------------------------- */

static const char *const GEN_NAMES[] = {"dropout"};

static void save_checkpoint(run *r) {
  if (r->o.no_ckpt) return;
  char path[PATH_LEN];
  TRY(EXIT_DATA, lt_ckpt_step_path(path, sizeof path, r->dir, CKPT_PREFIX, r->step), "checkpoint path");
  lt_ckpt_meta *config = lt_ckpt_meta_new(), *extra = lt_ckpt_meta_new();
  if (!config || !extra) die(EXIT_DATA, "out of memory");
  TRY(EXIT_DATA, lt_tf_config_to_meta(&r->cfg, config), "saving the model configuration");
  options_to_meta(&r->o, extra);
  void *blob;
  size_t size;
  TRY(EXIT_DATA, lt_tokenizer_serialize(r->D.tok, &blob, &size), "saving the tokenizer");
  lt_status s = lt_ckpt_meta_set_bytes(extra, "tokenizer", blob, size);
  free(blob);
  lt_loader_position pos = loader_pos(&r->D);
  s = s ? s : lt_ckpt_meta_set_int(extra, "loader.epoch", pos.epoch);
  s = s ? s : lt_ckpt_meta_set_int(extra, "loader.index", pos.index);
  s = s ? s : lt_ckpt_meta_set_int(extra, "loader.seed", (int64_t)pos.gen.seed);
  s = s ? s : lt_ckpt_meta_set_int(extra, "loader.offset", (int64_t)pos.gen.offset);
  s = s ? s : lt_ckpt_meta_set_int(extra, "loader.fingerprint", (int64_t)pos.fingerprint);
  s = s ? s : lt_ckpt_meta_set_int(extra, "run.tokens", r->tokens);
  s = s ? s : lt_ckpt_meta_set_double(extra, "run.train_seconds", r->train_seconds);
  s = s ? s : lt_ckpt_meta_set_int(extra, "run.bad_streak", r->bad_streak);
  if (r->D.kind == DATA_CLASSIFY) {
    size_t total = 1;
    for (int64_t i = 0; i < r->D.n_classes; i++) total += strlen(r->D.classes[i]) + 1;
    char *c = xmalloc(total), *p = c;
    for (int64_t i = 0; i < r->D.n_classes; i++) p += sprintf(p, "%s\n", r->D.classes[i]);
    s = s ? s : lt_ckpt_meta_set_bytes(extra, "classes", c, (size_t)(p - c));
    free(c);
  }
  TRY(EXIT_DATA, s, "saving the training state");
  lt_train_state st = {r->params, r->opt, &r->oc, &r->sched, r->step, 1, GEN_NAMES, &r->dropout_gen};
  s = lt_ckpt_save_training(path, &st, config, extra, NULL);
  lt_ckpt_meta_free(config);
  lt_ckpt_meta_free(extra);
  if (s != LT_OK) die_lt(EXIT_DATA, "saving the checkpoint");
  if (r->o.keep > 0) TRY(EXIT_DATA, lt_ckpt_rotate(r->dir, CKPT_PREFIX, (int)r->o.keep), "rotating checkpoints");
  fmt_path(r->last_ckpt, "%s", path);
  r->last_saved = r->step;
}

/* Deletes the numbered checkpoints of dir (--overwrite). */
static void remove_checkpoints(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    if (len == strlen(CKPT_PREFIX) + 16 && !strncmp(n, CKPT_PREFIX "-", strlen(CKPT_PREFIX) + 1) &&
        !strcmp(n + len - 3, ".h5")) {
      char p[PATH_LEN];
      fmt_path(p, "%s/%s", dir, n);
      if (remove(p) != 0) die(EXIT_DATA, "--overwrite: cannot delete '%s': %s", p, strerror(errno));
    }
  }
  closedir(d);
}

static void mkdir_p(const char *dir) {
  char p[PATH_LEN];
  fmt_path(p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) die(EXIT_DATA, "cannot create directory '%s': %s", p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, 0777) != 0 && errno != EEXIST) die(EXIT_DATA, "cannot create directory '%s': %s", p, strerror(errno));
}

/* ---- metrics CSV --------------------------------------------------------------- */

#define CSV_HEADER \
  "step,epoch,lr,train_loss,grad_norm,skipped,tokens,step_ms,tokens_per_s,elapsed_s,val_loss,val_token_acc,val_exact_match,rss_mb\n"

/* Opens the CSV: new with its header, or (resume) keeping only the rows up
 * to the resumed step, so that rows written after the last checkpoint by a
 * crashed process are not duplicated. */
static void open_csv(run *r, bool resuming) {
  if (resuming) {
    FILE *f = fopen(r->csv_path, "r");
    if (f) {
      char **lines = NULL, buf[4096];
      size_t n = 0;
      while (fgets(buf, sizeof buf, f)) {
        long long st = -1;
        if (n > 0 && (sscanf(buf, "%lld", &st) != 1 || st > r->step)) continue;
        lines = realloc(lines, sizeof *lines * (n + 1));
        if (!lines) die(EXIT_DATA, "out of memory");
        lines[n++] = xstrdup(buf);
      }
      fclose(f);
      r->csv = fopen(r->csv_path, "w");
      if (!r->csv) die(EXIT_DATA, "cannot write --csv '%s': %s", r->csv_path, strerror(errno));
      if (n == 0) fputs(CSV_HEADER, r->csv);
      for (size_t i = 0; i < n; i++) fputs(lines[i], r->csv), free(lines[i]);
      free(lines);
      fflush(r->csv);
      return;
    }
  }
  r->csv = fopen(r->csv_path, "w");
  if (!r->csv) die(EXIT_DATA, "cannot write --csv '%s': %s", r->csv_path, strerror(errno));
  fputs(CSV_HEADER, r->csv);
  fflush(r->csv);
}

/* ======================================================================== */
/* One training step                                                        */
/* ======================================================================== */

typedef struct step_result {
  double loss;       /* the optimized loss (with label smoothing), token-weighted mean over micro-batches */
  double grad_norm;  /* before clipping */
  double lr;
  int64_t tokens;
  bool skipped;
  const char *why;   /* why it was skipped */
} step_result;

/* Forward and backward of one micro-batch; returns the loss value (times w
 * for the gradient) or NAN. */
static double micro_step(run *r, lt_tensor *logits, lt_tensor *labels, double w) {
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, r->o.label_smoothing, LT_REDUCTION_MEAN};
  lt_tensor *loss = lt_cross_entropy(logits, labels, &ce);
  double v;
  if (!loss || lt_item(loss, &v) != LT_OK) die_lt(EXIT_DATA, "training forward");
  if (!isfinite(v)) return v;
  TRY(EXIT_DATA, lt_backward(lt_mul_scalar(loss, w), NULL, false), "backward");
  return v;
}

/* Number of false entries of a bool mask (the real tokens of a padding mask). */
static int64_t count_false(const lt_tensor *mask) {
  lt_tensor *c = lt_contiguous(mask);
  if (!c) die_lt(EXIT_DATA, "mask");
  int64_t n = 0;
  const bool *p = c->data;
  for (int64_t i = 0; i < c->numel; i++) n += !p[i];
  lt_tensor_free(c);
  return n;
}

/* One optimizer step: --accum micro-batches forward and backward, all inside
 * one lt_scope (every intermediate and the autograd graph are freed at its
 * end; only the parameters' .grad survive until lt_params_zero_grad), then
 * the gradient norm (clipped to --clip), the learning rate of the schedule
 * and the update. A non-finite loss or gradient norm skips the update (the
 * step's data is still consumed, so the data order stays that of a clean run). */
static step_result train_step(run *r) {
  step_result S = {0, NAN, 0, 0, false, NULL};
  const int64_t A = r->o.accum;
  lt_nn_ctx ctx = {true, r->dropout_gen};
  lt_scope *scope = lt_scope_begin();
  if (!scope) die_lt(EXIT_DATA, "scope");
  bool finite = true;
  if (r->D.kind == DATA_LM) {
    for (int64_t a = 0; a < A; a++) {
      lt_tensor *x, *y;
      TRY(EXIT_DATA, lt_lm_loader_next(r->D.ll, &x, &y), "next batch");
      S.tokens += y->numel;
      if (!finite) continue; /* the batch is still consumed: the data order stays that of a clean run */
      lt_tensor *logits = lt_transformer_decode(r->model, x, NULL, NULL, NULL, 0, &ctx); /* [B, T, V] */
      if (!logits) die_lt(EXIT_DATA, "training forward");
      double v = micro_step(r, logits, y, 1.0 / (double)A);
      finite = isfinite(v);
      S.loss += v / (double)A;
    }
  } else {
    lt_seq2seq_batch mb[64], *b = A <= 64 ? mb : xmalloc(sizeof *b * (size_t)A);
    int64_t total = 0;
    for (int64_t a = 0; a < A; a++) { /* all micro-batches first: the weights need the total */
      TRY(EXIT_DATA, lt_seq2seq_loader_next(r->D.sl, &b[a]), "next batch");
      total += r->D.kind == DATA_CLASSIFY ? b[a].src->shape[0] : b[a].n_tokens;
      /* tokens: real source tokens + target tokens (classification: source only) */
      S.tokens += (r->D.kind == DATA_CLASSIFY ? 0 : b[a].n_tokens) + count_false(b[a].src_mask);
    }
    for (int64_t a = 0; a < A && finite; a++) {
      lt_tensor *logits, *labels;
      double n;
      if (r->D.kind == DATA_CLASSIFY) {
        logits = lt_transformer_classify(r->model, b[a].src, b[a].src_mask, &ctx); /* [B, n_classes] */
        labels = lt_select(b[a].labels, 1, 0);
        n = (double)b[a].src->shape[0];
      } else {
        lt_tensor *mem = lt_transformer_encode(r->model, b[a].src, b[a].src_mask, &ctx);        /* [B, S, C] */
        logits = lt_transformer_decode(r->model, b[a].tgt_in, b[a].tgt_mask, mem, b[a].src_mask, 0, &ctx); /* [B, T, V] */
        labels = b[a].labels;
        n = (double)b[a].n_tokens;
      }
      if (!logits || !labels) die_lt(EXIT_DATA, "training forward");
      double w = total > 0 ? n / (double)total : 0;
      double v = micro_step(r, logits, labels, w);
      finite = isfinite(v);
      S.loss += finite ? v * w : v;
    }
    for (int64_t a = 0; a < A; a++) lt_seq2seq_batch_free(&b[a]);
    if (b != mb) free(b);
  }
  S.lr = lt_schedule_lr(&r->sched, r->step + 1);
  if (!isfinite(S.lr)) die_lt(EXIT_USAGE, "the learning-rate schedule");
  if (!finite) {
    S.skipped = true, S.why = "non-finite loss";
  } else {
    lt_status s = lt_clip_grad_norm(r->params, r->o.clip > 0 ? r->o.clip : INFINITY, &S.grad_norm);
    if (s == LT_ERR_NUMERIC) {
      S.skipped = true, S.why = "non-finite gradient";
      lt_clear_error();
    } else if (s != LT_OK) {
      die_lt(EXIT_DATA, "gradient clipping");
    } else {
      lt_optimizer_set_lr(r->opt, S.lr);
      TRY(EXIT_DATA, lt_optimizer_step(r->opt), "optimizer step");
    }
  }
  lt_params_zero_grad(r->params);
  lt_scope_end(scope);
  return S;
}

/* ======================================================================== */
/* Threads: all cores or one, whichever is faster right now                 */
/* ======================================================================== */

/* A small model on a busy machine can train many times faster on one thread
 * than on two: every parallel region waits for a thread that another process
 * holds, and a step can go from 50 ms to seconds. Since results never depend
 * on the thread count, "auto" measures and switches:
 *   - it trains on the chosen setting (all cores at first) and keeps a moving
 *     average of its speed in tokens per second;
 *   - now and then it probes the other setting for PROBE_STEPS steps: 10
 *     steps in, then every PROBE_EVERY seconds (doubling, up to PROBE_MAX,
 *     after each probe that loses), and at once when a step runs at less than
 *     a third of the average;
 *   - a probe step at less than a third of the chosen setting's speed ends
 *     the probe (so a bad probe costs one step);
 *   - the faster setting (by 10%) becomes the chosen one. */
typedef struct autothreads {
  bool on;
  int max;              /* all cores */
  int chosen;           /* max or 1 */
  double rate[2];       /* tokens/s moving averages: [0] all cores, [1] one thread; 0 = not measured */
  int probe_left;       /* steps left in the current probe of the other setting */
  double probe_tokens, probe_seconds;
  double next_probe;    /* wall time of the next scheduled probe */
  double interval;      /* seconds between scheduled probes */
  int64_t steps;        /* steps seen */
} autothreads;

enum { PROBE_STEPS = 8, PROBE_FIRST_STEP = 10 };
#define PROBE_EVERY 20.0
#define PROBE_MAX 320.0

static int at_slot(const autothreads *T, int threads) { return threads == T->max ? 0 : 1; }

/* The thread count for the next step. */
static int auto_threads_next(autothreads *T) {
  int other = T->chosen == T->max ? 1 : T->max;
  if (T->probe_left == 0 && T->steps >= PROBE_FIRST_STEP && now_s() >= T->next_probe) {
    T->probe_left = PROBE_STEPS;
    T->probe_tokens = T->probe_seconds = 0;
  }
  return T->probe_left > 0 ? other : T->chosen;
}

static void auto_threads_record(autothreads *T, int threads, const step_result *S, double dt) {
  T->steps++;
  if (dt <= 0 || S->tokens <= 0) return;
  double r = (double)S->tokens / dt, *cur = &T->rate[at_slot(T, T->chosen)];
  if (threads == T->chosen) {
    bool slow = *cur > 0 && r < *cur / 3;
    *cur = *cur > 0 ? *cur + 0.2 * (r - *cur) : r;
    if (slow && T->steps >= PROBE_FIRST_STEP) T->next_probe = 0; /* something changed: probe now */
    return;
  }
  T->probe_tokens += (double)S->tokens, T->probe_seconds += dt;
  bool bad = *cur > 0 && r < *cur / 3;
  if (--T->probe_left > 0 && !bad) return;
  T->probe_left = 0;
  double p = T->probe_tokens / T->probe_seconds;
  T->rate[at_slot(T, threads)] = p;
  if (p > 1.1 * *cur) {
    end_line();
    printf("threads: now %d (%.0f tokens/s, against %.0f on %d)\n", threads, p, *cur, T->chosen);
    fflush(stdout);
    T->chosen = threads;
    T->interval = PROBE_EVERY;
  } else if (T->interval < PROBE_MAX) {
    T->interval *= 2;
  }
  T->next_probe = now_s() + T->interval;
}

/* ======================================================================== */
/* Progress                                                                 */
/* ======================================================================== */

typedef struct meter {
  double loss_ema, time_ema, tokens_ema; /* moving averages over steps (the plain mean of the first 20) */
  int64_t n, n_loss;
  double last_eval_s;                    /* duration of the last periodic validation */
  int64_t win_steps, win_tokens;         /* since the last printed line (not a terminal) */
  double win_time, win_loss;
  int64_t win_finite;
} meter;

static void meter_add(meter *M, const step_result *S, double dt) {
  M->n++;
  double a = M->n < 20 ? 1.0 / (double)M->n : 0.05;
  M->time_ema += a * (dt - M->time_ema);
  M->tokens_ema += a * ((double)S->tokens - M->tokens_ema);
  if (isfinite(S->loss)) {
    M->n_loss++;
    double b = M->n_loss < 20 ? 1.0 / (double)M->n_loss : 0.05;
    M->loss_ema = M->n_loss == 1 ? S->loss : M->loss_ema + b * (S->loss - M->loss_ema);
  }
  M->win_steps++, M->win_tokens += S->tokens, M->win_time += dt;
  if (isfinite(S->loss)) M->win_loss += S->loss, M->win_finite++;
}

static double epoch_of(const run *r) {
  lt_loader_position p = loader_pos(&r->D);
  int64_t bpe = batches_per_epoch(&r->D);
  return (double)p.epoch + (bpe > 0 ? (double)p.index / (double)bpe : 0.0);
}

/* The live line: redrawn in place on a terminal, else printed every --log-every steps. */
static void progress(run *r, meter *M, const step_result *S) {
  bool tty = g_tty;
  if (!tty && r->step % r->o.log_every != 0 && r->step != r->o.steps) return;
  double loss = tty ? M->loss_ema : (M->win_finite ? M->win_loss / (double)M->win_finite : NAN);
  double tps = tty ? M->tokens_ema / M->time_ema : (double)M->win_tokens / M->win_time;
  int64_t left = r->o.steps - r->step;
  int64_t evals_left = r->o.eval_every > 0 ? left / r->o.eval_every : 0;
  double eta = (double)left * M->time_ema + (double)evals_left * M->last_eval_s;
  char line[256];
  snprintf(line, sizeof line, "step %*lld/%lld | epoch %.2f | loss %.4f | lr %.2e | %.0f tok/s | %s | ETA %s",
           (int)snprintf(NULL, 0, "%lld", (long long)r->o.steps), (long long)r->step, (long long)r->o.steps,
           epoch_of(r), loss, S->lr, tps, DUR(r->train_seconds), DUR(eta));
  if (tty) {
    printf("\r\033[K%s", line);
    g_line_open = true;
  } else {
    printf("%s\n", line);
  }
  fflush(stdout);
  M->win_steps = M->win_tokens = M->win_finite = 0;
  M->win_time = M->win_loss = 0;
}

static void csv_row(run *r, const step_result *S, double step_s, const meter *M, double elapsed,
                    const eval_result *E) {
  if (!r->csv) return;
  fprintf(r->csv, "%lld,%.4f,%.9g,%.17g,%.9g,%d,%lld,%.3f,%.1f,%.3f,", (long long)r->step, epoch_of(r), S->lr,
          S->loss, S->grad_norm, S->skipped ? 1 : 0, (long long)r->tokens, 1000 * step_s,
          M->tokens_ema / M->time_ema, elapsed);
  if (E && !E->interrupted) {
    fprintf(r->csv, "%.9g,%.9g,", E->loss, E->token_acc);
    if (E->n_decoded > 0) fprintf(r->csv, "%.6f", (double)E->n_exact / (double)E->n_decoded);
    fputc(',', r->csv);
  } else {
    fputs(",,,", r->csv);
  }
  fprintf(r->csv, "%.1f\n", rss_mb());
  fflush(r->csv);
}

/* ======================================================================== */
/* The end: examples                                                        */
/* ======================================================================== */

/* print_examples shows the first n distinct sources among the first
 * n * EXAMPLE_POOL validation examples (a task may repeat a short source). */
enum { EXAMPLE_POOL = 4 };

static void print_examples(run *r, char **outputs, int64_t n) {
  if (n <= 0) return;
  if (r->D.kind == DATA_LM) {
    /* a prompt, and the model's continuation */
    int64_t *ids, P;
    if (r->o.prompt) {
      TRY(EXIT_DATA, lt_tokenizer_encode(r->D.tok, r->o.prompt, strlen(r->o.prompt), &ids, &P), "encoding --prompt");
      if (P == 0) die(EXIT_USAGE, "--prompt is empty");
    } else {
      P = r->D.valid_tokens->numel < 32 ? r->D.valid_tokens->numel : 32;
      ids = xmalloc(sizeof *ids * (size_t)r->D.valid_tokens->numel);
      TRY(EXIT_DATA, lt_tensor_read(r->D.valid_tokens, LT_DTYPE_I64, ids, r->D.valid_tokens->numel), "prompt");
    }
    lt_scope *s = lt_scope_begin();
    lt_tensor *prompt = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, P}, ids);
    lt_generate_opts go = lt_generate_defaults();
    go.strategy = r->o.temperature > 0 ? LT_GENERATE_SAMPLE : LT_GENERATE_GREEDY;
    go.temperature = r->o.temperature > 0 ? r->o.temperature : 1.0;
    go.top_k = r->o.top_k, go.gen = r->sample_gen, go.max_new = r->o.gen_tokens, go.eos_id = -1;
    lt_tf_generate_opts to = lt_tf_generate_defaults();
    to.context = r->o.seq_len; /* the trained context length */
    lt_generate_result gr = {0};
    if (!prompt || lt_transformer_generate(r->model, NULL, NULL, prompt, &go, &to, &gr) != LT_OK)
      die_lt(EXIT_DATA, "generating text");
    lt_tensor *y = gr.tokens; /* [1, gen_tokens] */
    int64_t *g = xmalloc(sizeof *g * (size_t)(y->numel + 1));
    TRY(EXIT_DATA, lt_tensor_read(y, LT_DTYPE_I64, g, y->numel), "generated ids");
    char *pt, *ct;
    size_t pl, cl;
    TRY(EXIT_DATA, lt_tokenizer_decode(r->D.tok, ids, P, 0, &pt, &pl), "decoding");
    TRY(EXIT_DATA, lt_tokenizer_decode(r->D.tok, g, y->numel, 0, &ct, &cl), "decoding");
    printf("\ngenerated text (%s, %lld tokens) after the prompt in [brackets]:\n[%s]%s\n",
           r->o.temperature > 0 ? "sampled" : "greedy", (long long)y->numel, pt, ct);
    free(pt), free(ct), free(g), free(ids);
    lt_scope_end(s);
    return;
  }
  int64_t nv = lt_seq_pairs_count(r->D.valid), n_want = n;
  n *= EXAMPLE_POOL; /* outputs[] covers this many: the examples shown are the first distinct sources */
  if (n > nv) n = nv;
  printf("\nheld-out examples (%s):\n",
         r->D.kind == DATA_CLASSIFY ? "predicted class" : "greedy decoding; a MISS shows the reference");
  int64_t *pred = NULL;
  if (r->D.kind == DATA_CLASSIFY) { /* predictions of the first n examples */
    pred = xmalloc(sizeof *pred * (size_t)n);
    int64_t *idx = xmalloc(sizeof *idx * (size_t)n);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    bool prev = lt_set_grad_enabled(false);
    lt_scope *s = lt_scope_begin();
    lt_seq2seq_batch b;
    TRY(EXIT_DATA, lt_seq2seq_collate(r->D.valid, idx, n, &b), "examples");
    lt_tensor *a = lt_argmax(lt_transformer_classify(r->model, b.src, b.src_mask, NULL), -1, false);
    if (!a) die_lt(EXIT_DATA, "classifying the examples");
    TRY(EXIT_DATA, lt_tensor_read(a, LT_DTYPE_I64, pred, n), "predictions");
    lt_seq2seq_batch_free(&b);
    lt_scope_end(s);
    lt_set_grad_enabled(prev);
    free(idx);
  }
  for (int64_t i = 0, shown = 0; i < n && shown < n_want; i++) {
    const int64_t *src, *tgt;
    int64_t sl, tl;
    lt_seq_pairs_get(r->D.valid, i, &src, &sl, &tgt, &tl);
    bool seen = false;
    for (int64_t j = 0; j < i && !seen; j++) {
      const int64_t *s2, *t2;
      int64_t l2, m2;
      lt_seq_pairs_get(r->D.valid, j, &s2, &l2, &t2, &m2);
      seen = l2 == sl && !memcmp(s2, src, sizeof *src * (size_t)sl);
    }
    if (seen) continue;
    shown++;
    char *st = ids_text(r->D.tok, src, sl);
    if (r->D.kind == DATA_CLASSIFY) {
      bool ok = pred[i] == tgt[0];
      printf("  %-4s %s\n       predicted %s, reference %s\n", ok ? "ok" : "MISS", st, r->D.classes[pred[i]],
             r->D.classes[tgt[0]]);
    } else {
      char *rt = ids_text(r->D.tok, tgt, tl);
      const char *mt = outputs && outputs[i] ? (outputs[i][0] ? outputs[i] : "(empty)") : "?";
      bool ok = !strcmp(mt, rt);
      printf("  %-4s %s\n       -> %s\n", ok ? "ok" : "MISS", st, mt);
      if (!ok) printf("       reference: %s\n", rt);
      free(rt);
    }
    free(st);
  }
  free(pred);
}

/* ======================================================================== */
/* main                                                                     */
/* ======================================================================== */

static void describe(const run *r) {
  const lt_tf_config *c = &r->cfg;
  char layers[64];
  if (c->arch == LT_TF_ENCODER_DECODER)
    snprintf(layers, sizeof layers, "%lld+%lld layers", (long long)c->n_enc_layers, (long long)c->n_dec_layers);
  else
    snprintf(layers, sizeof layers, "%lld layers",
             (long long)(c->arch == LT_TF_DECODER_ONLY ? c->n_dec_layers : c->n_enc_layers));
  printf("model: %s, %.3gM parameters (d_model %lld, %lld heads", lt_tf_arch_name(c->arch),
         (double)lt_params_numel(r->params, false) / 1e6, (long long)c->d_model, (long long)c->n_heads);
  if (c->n_kv_heads != c->n_heads) printf(" / %lld kv", (long long)c->n_kv_heads);
  printf(", %s, d_ff %lld, %s %s %s%s, %s positions%s, dropout %g)\n", layers, (long long)c->d_ff,
         c->pre_norm ? "pre-norm" : "post-norm", lt_tf_norm_name(c->norm), c->swiglu ? "swiglu-" : "",
         lt_tf_act_name(c->act), lt_tf_pos_name(c->pos), c->tie_embeddings ? ", tied embeddings" : "", c->dropout);
  const options *o = &r->o;
  if (r->D.kind == DATA_LM)
    printf("data: %s, %lld training / %lld validation tokens, %s tokenizer (vocab %lld), context %lld\n", r->D.name,
           (long long)r->D.train_tokens->numel, (long long)r->D.valid_tokens->numel, tok_ename(o->tokenizer),
           (long long)lt_tokenizer_vocab_size(r->D.tok), (long long)o->seq_len);
  else
    printf("data: %s, %lld training / %lld validation examples, %s tokenizer (vocab %lld)%s\n", r->D.name,
           (long long)lt_seq_pairs_count(r->D.train), (long long)lt_seq_pairs_count(r->D.valid),
           tok_ename(o->tokenizer), (long long)lt_tokenizer_vocab_size(r->D.tok),
           r->D.kind == DATA_CLASSIFY ? ", classes" : "");
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
         "%s\n", optim_ename(o->optim), lr, o->label_smoothing, o->clip, (long long)o->batch, (long long)o->accum,
         (long long)o->steps,
         (double)(o->steps * o->accum) / (double)(batches_per_epoch(&r->D) ? batches_per_epoch(&r->D) : 1),
         (long long)o->seed, threads);
}

/* The checkpoint --resume names: a file, or the newest valid one in a directory. */
static void resolve_resume(const char *arg, char *path, size_t size) {
  struct stat sb;
  if (stat(arg, &sb) != 0) die(EXIT_USAGE, "--resume '%s': %s", arg, strerror(errno));
  if (S_ISDIR(sb.st_mode)) {
    int64_t step;
    TRY(EXIT_DATA, lt_ckpt_latest(arg, CKPT_PREFIX, true, &step, path, size), "--resume");
    if (step < 0) die(EXIT_DATA, "--resume '%s': no valid checkpoint (" CKPT_PREFIX "-*.h5) in this directory", arg);
  } else {
    snprintf(path, size, "%s", arg);
  }
}

static lt_ckpt_info *g_info; /* the resumed checkpoint's configuration and extra values */

/* Settings of a resumed run: the checkpoint's, with the command line's run
 * flags on top; a model, data or optimizer flag must not differ. */
static void resume_options(run *r, const char *path) {
  lt_params *empty = lt_params_new();
  lt_train_state st0 = {.params = empty};
  lt_ckpt_load_opts lo = LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true; /* only the configuration and extra values are wanted here */
  lt_status s = lt_ckpt_load_training(path, &st0, &lo, &g_info);
  lt_params_free(empty);
  if (s != LT_OK) die_lt(EXIT_DATA, "--resume");
  r->step = st0.step;
  options saved = default_options();
  lt_tf_config cfg;
  TRY(EXIT_DATA, lt_tf_config_from_meta(g_info->config, &cfg), "--resume: the checkpoint's model configuration");
  options_from_config(&saved, &cfg);
  options_from_meta(&saved, g_info->extra, path);
  for (int i = 0; i < N_OPTS; i++) {
    const optdef *d = &OPTS[i];
    if (d->ecount < 0) continue;
    if (d->flags & F_NOSAVE) {
      copy_value(&saved, &r->o, d); /* this process's own */
    } else if (r->given[i]) {
      if (d->flags & F_RUN) copy_value(&saved, &r->o, d);
      else if (!same_value(&saved, &r->o, d))
        die(EXIT_USAGE, "--%s %s differs from the checkpoint's %s: a resumed run keeps the %s it was started with "
            "(leave the flag out, or start a new run)", d->name, VAL(&r->o, d), VAL(&saved, d),
            d->flags & F_MODEL ? "model" : "data and optimizer settings");
    }
  }
  if (r->given[opt_index("steps")]) saved.epochs = 0;
  r->o = saved;
  r->cfg = cfg;
}

static int64_t extra_int(const char *key, const char *path) {
  int64_t v;
  if (lt_ckpt_meta_get_int(g_info->extra, key, &v) != LT_OK)
    die(EXIT_DATA, "checkpoint '%s' lacks the training value '%s' (not written by " PROG "?)", path, key);
  return v;
}

static void finish(run *r) {
  if (r->csv) fclose(r->csv);
  r->csv = NULL;
  lt_optimizer_free(r->opt);
  lt_transformer_free(r->model);
  lt_generator_free(r->dropout_gen);
  lt_generator_free(r->sample_gen);
  free_data(&r->D);
  lt_ckpt_info_free(g_info);
  for (int i = 0; i < g_nstrings; i++) free(g_strings[i]);
}

int main(int argc, char **argv) {
  run *r = &R;
  double t_start = now_s();
  r->o = default_options();
  parse_args(argc, argv, &r->o, r->given);
  g_tty = isatty(STDOUT_FILENO);
  if (r->o.threads > 0) TRY(EXIT_USAGE, lt_set_num_threads((int)r->o.threads), "--threads");
  TRY(EXIT_DATA, lt_init(), "starting libtensor");

  char resume_path[PATH_LEN] = "";
  lt_tokenizer *tok = NULL;
  if (r->o.resume) {
    resolve_resume(r->o.resume, resume_path, sizeof resume_path);
    resume_options(r, resume_path);
    const void *blob;
    size_t size;
    if (lt_ckpt_meta_get_bytes(g_info->extra, "tokenizer", &blob, &size) != LT_OK)
      die(EXIT_DATA, "checkpoint '%s' has no tokenizer (not written by " PROG "?)", resume_path);
    if (!(tok = lt_tokenizer_deserialize(blob, size))) die_lt(EXIT_DATA, "--resume: the checkpoint's tokenizer");
  } else {
    finalize_options(&r->o, r->given);
  }
  check_options(&r->o, r->given);

  /* data */
  load_data(&r->o, &r->D, tok);
  if (r->o.epochs > 0 && (!r->o.resume || r->given[opt_index("epochs")])) {
    int64_t bpe = batches_per_epoch(&r->D);
    r->o.steps = (r->o.epochs * bpe + r->o.accum - 1) / r->o.accum;
  }
  if (r->o.eval_every < 0) r->o.eval_every = r->o.steps / 10 > 0 ? r->o.steps / 10 : 1;
  if (r->o.ckpt_every < 0) r->o.ckpt_every = r->o.steps / 5 > 0 ? r->o.steps / 5 : 1;

  /* model */
  if (!r->o.resume) {
    r->cfg = config_of(&r->o);
    r->cfg.vocab_size = lt_tokenizer_vocab_size(r->D.tok);
    if (r->D.kind == DATA_CLASSIFY) r->cfg.n_classes = r->D.n_classes;
    if (lt_tf_config_validate(&r->cfg) != LT_OK) die(EXIT_USAGE, "model configuration: %s", lt_last_error());
  } else if (r->cfg.vocab_size != lt_tokenizer_vocab_size(r->D.tok) ||
             (r->D.kind == DATA_CLASSIFY && r->cfg.n_classes != r->D.n_classes)) {
    die(EXIT_DATA, "--resume: the checkpoint's model has vocab_size %lld / %lld classes, the data %lld / %lld",
        (long long)r->cfg.vocab_size, (long long)r->cfg.n_classes, (long long)lt_tokenizer_vocab_size(r->D.tok),
        (long long)r->D.n_classes);
  }
  lt_generator *init = lt_generator_new((uint64_t)r->o.seed);
  r->model = init ? lt_transformer_new(&r->cfg, init) : NULL;
  lt_generator_free(init);
  if (!r->model) die_lt(EXIT_USAGE, "building the model");
  r->params = lt_transformer_params(r->model);
  r->oc = lt_optim_defaults((lt_optim_kind)r->o.optim);
  r->oc.lr = r->o.lr, r->oc.beta1 = r->o.beta1, r->oc.beta2 = r->o.beta2, r->oc.eps = r->o.eps;
  r->oc.weight_decay = r->o.weight_decay, r->oc.momentum = r->o.momentum, r->oc.nesterov = r->o.nesterov;
  r->opt = lt_optimizer_new(r->params, &r->oc);
  if (!r->opt) die_lt(EXIT_USAGE, "the optimizer");
  r->sched = (lt_schedule){(lt_schedule_kind)r->o.schedule, r->o.lr, r->o.min_lr, r->o.gamma, r->o.noam_scale,
                           r->o.warmup, r->o.steps, r->o.step_size, r->cfg.d_model};
  r->dropout_gen = lt_generator_new((uint64_t)r->o.seed + 1);
  r->sample_gen = lt_generator_new((uint64_t)r->o.seed + 3);
  if (!r->dropout_gen || !r->sample_gen) die_lt(EXIT_DATA, "generators");

  /* the training state of a resumed run */
  if (r->o.resume && r->o.eval_only) {
    TRY(EXIT_DATA, lt_ckpt_load_params(resume_path, r->params, NULL, NULL), "--resume");
  } else if (r->o.resume) {
    lt_train_state st = {r->params, r->opt, &r->oc, NULL, 0, 1, GEN_NAMES, &r->dropout_gen};
    TRY(EXIT_DATA, lt_ckpt_load_training(resume_path, &st, NULL, NULL), "--resume");
    r->step = st.step;
    lt_loader_position pos = {extra_int("loader.epoch", resume_path), extra_int("loader.index", resume_path),
                              {(uint64_t)extra_int("loader.seed", resume_path),
                               (uint64_t)extra_int("loader.offset", resume_path)},
                              (uint64_t)extra_int("loader.fingerprint", resume_path)};
    lt_status s = r->D.kind == DATA_LM ? lt_lm_loader_set_position(r->D.ll, pos)
                                       : lt_seq2seq_loader_set_position(r->D.sl, pos);
    if (s != LT_OK) die_lt(EXIT_DATA, "--resume: the data loader's position (has the data changed?)");
    r->tokens = extra_int("run.tokens", resume_path);
    r->bad_streak = extra_int("run.bad_streak", resume_path);
    double ts = 0;
    lt_ckpt_meta_get_double(g_info->extra, "run.train_seconds", &ts);
    r->train_seconds = ts;
  }
  r->start_step = r->last_saved = r->step;
  describe(r);

  int64_t n_show = r->o.examples, n_pool = n_show * EXAMPLE_POOL; /* examples shown; outputs kept */
  if (r->o.eval_only) { /* validate the checkpoint, print examples, done */
    printf("evaluating %s\n", resume_path);
    char **outs = calloc((size_t)n_pool + 1, sizeof *outs);
    eval_result E = evaluate(r, lt_seq_pairs_count(r->D.valid), outs, n_pool);
    print_eval(r, &E, "validation at");
    print_examples(r, outs, n_show);
    for (int64_t i = 0; i < n_pool; i++) free(outs[i]);
    free(outs);
    finish(r);
    return 0;
  }

  /* the run directory */
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
  mkdir_p(r->dir);
  if (!r->o.resume) {
    int64_t latest;
    TRY(EXIT_DATA, lt_ckpt_latest(r->dir, CKPT_PREFIX, false, &latest, NULL, 0), "--ckpt-dir");
    if (latest >= 0 && !r->o.no_ckpt) {
      if (!r->o.overwrite)
        die(EXIT_USAGE, "'%s' already holds checkpoints (the newest at step %lld): --resume %s continues that run, "
            "--overwrite starts over (deleting them), or choose another --ckpt-dir", r->dir, (long long)latest, r->dir);
      remove_checkpoints(r->dir);
    }
  }
  if (r->o.csv) fmt_path(r->csv_path, "%s", r->o.csv);
  else fmt_path(r->csv_path, "%s/metrics.csv", r->dir);
  open_csv(r, r->o.resume != NULL);
  printf("run directory: %s\n", r->dir);
  if (r->o.resume) printf("resumed from %s at step %lld\n", resume_path, (long long)r->step);
  fflush(stdout);

  /* train */
  autothreads AT = {r->o.threads == 0 && !getenv("LT_NUM_THREADS") && lt_get_num_threads() > 1,
                    lt_get_num_threads(), lt_get_num_threads(), {0, 0}, 0, 0, 0, 0, PROBE_EVERY, 0};
  install_signals();
  meter M = {0};
  M.loss_ema = NAN;
  int64_t n_eval_exact = r->o.eval_examples;
  int64_t n_all = r->D.kind == DATA_SEQ2SEQ ? lt_seq_pairs_count(r->D.valid) : 0;
  char **outs = calloc((size_t)n_pool + 1, sizeof *outs); /* decoded examples of the final validation */
  eval_result final;
  bool stopped = false, final_done = false;
  while (r->step < r->o.steps && !g_signal) {
    int threads = AT.on ? auto_threads_next(&AT) : 0;
    if (AT.on) lt_set_num_threads(threads);
    double t0 = now_s();
    step_result S = train_step(r);
    double dt = now_s() - t0;
    if (AT.on) {
      auto_threads_record(&AT, threads, &S, dt);
      lt_set_num_threads(AT.chosen); /* validation and checkpoints run on the chosen setting */
    }
    r->step++;
    r->tokens += S.tokens;
    r->train_seconds += dt;
    meter_add(&M, &S, dt);
    if (S.skipped) {
      r->bad_streak++;
      end_line();
      printf("step %lld: %s (loss %g, gradient norm %g): update skipped (%lld in a row)\n", (long long)r->step, S.why,
             fabs(S.loss), fabs(S.grad_norm), (long long)r->bad_streak);
      if (r->bad_streak >= r->o.max_nonfinite) {
        csv_row(r, &S, dt, &M, r->train_seconds, NULL);
        die(EXIT_NONFINITE, "stopping: %lld non-finite steps in a row (the last at step %lld; --max-nonfinite %lld). "
            "Skipped steps leave the parameters unchanged; the newest checkpoint is %s. Try a lower --lr or --clip.",
            (long long)r->bad_streak, (long long)r->step, (long long)r->o.max_nonfinite,
            r->last_ckpt[0] ? r->last_ckpt : "(none yet)");
      }
    } else {
      r->bad_streak = 0;
    }
    progress(r, &M, &S);
    eval_result E;
    bool evaluated = false;
    if (r->step == r->o.steps && !g_signal) { /* the end: every held-out example */
      end_line();
      E = final = evaluate(r, n_all, outs, n_pool);
      evaluated = final_done = !E.interrupted;
      if (evaluated) print_eval(r, &E, "final validation at");
    } else if (r->o.eval_every > 0 && r->step % r->o.eval_every == 0 && !g_signal) {
      E = evaluate(r, n_eval_exact, NULL, 0);
      if (!E.interrupted) {
        print_eval(r, &E, "validation at");
        M.last_eval_s = E.seconds;
        evaluated = true;
      }
    }
    csv_row(r, &S, dt, &M, r->train_seconds, evaluated ? &E : NULL);
    if (r->o.ckpt_every > 0 && r->step % r->o.ckpt_every == 0 && r->step < r->o.steps) save_checkpoint(r);
    if (r->o.stop_after > 0 && r->step >= r->o.stop_after && r->step < r->o.steps) {
      stopped = true;
      break;
    }
  }
  end_line();
  if (g_signal || stopped) {
    for (int64_t i = 0; i < n_pool; i++) free(outs[i]);
    free(outs);
    if (r->last_saved != r->step) save_checkpoint(r);
    if (g_signal)
      printf("interrupted by %s at step %lld: ", g_signal == SIGINT ? "SIGINT" : "SIGTERM", (long long)r->step);
    else
      printf("stopped after step %lld (--stop-after): ", (long long)r->step);
    if (r->o.no_ckpt) printf("no checkpoint (--no-ckpt)\n");
    else printf("saved %s\ncontinue with: " PROG " --resume %s\n", r->last_ckpt, r->dir);
    int code = g_signal ? 128 + (int)g_signal : 0;
    finish(r);
    return code;
  }

  /* the end: save, show examples and the final validation */
  if (!final_done) { /* resumed at the last step: validate now */
    final = evaluate(r, n_all, outs, n_pool);
    if (!final.interrupted) print_eval(r, &final, "final validation at");
  }
  eval_result E = final;
  if (r->last_saved != r->step) save_checkpoint(r);
  if (!g_signal) print_examples(r, outs, n_show);
  for (int64_t i = 0; i < n_pool; i++) free(outs[i]);
  free(outs);
  double wall = now_s() - t_start;
  printf("\ndone: %lld steps", (long long)r->step);
  if (r->step > r->start_step)
    printf(" (%lld in this process) in %s, %.0f tokens/s in training steps", (long long)(r->step - r->start_step),
           DUR(wall), (double)r->tokens / (r->train_seconds > 0 ? r->train_seconds : 1));
  printf("\n");
  if (!E.interrupted) {
    if (r->D.kind == DATA_LM)
      printf("held-out loss %.4f (perplexity %.2f), token accuracy %.2f%%\n", E.loss, exp(E.loss), 100 * E.token_acc);
    else
      printf("held-out %s: %.2f%% (%lld/%lld), loss %.4f, token accuracy %.2f%%\n",
             r->D.kind == DATA_CLASSIFY ? "accuracy" : "exact match",
             100.0 * (double)E.n_exact / (double)(E.n_decoded ? E.n_decoded : 1), (long long)E.n_exact,
             (long long)E.n_decoded, E.loss, 100 * E.token_acc);
  }
  printf("peak RSS %.1f MB\n", peak_rss_mb());
  if (!r->o.no_ckpt) printf("checkpoint: %s\n", r->last_ckpt);
  printf("metrics: %s\n", r->csv_path);
  int code = g_signal ? 128 + (int)g_signal : 0;
  finish(r);
  return code;
}
