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
 * optimizer; then hand them to the library's training loop (train/trainer.h:
 * the step, resume, the progress line, the CSV, checkpoints, Ctrl-C) with
 * this program's part as hooks: the loss of a micro-batch, the validation
 * (loss, token accuracy and exact match by greedy decoding) and the values
 * it keeps in checkpoints (settings, tokenizer, class labels); finally print
 * decoded examples next to their references. docs/train.md documents the
 * flags, the CSV columns, the checkpoint contents and the measured results.
 *
 * Exit codes (cli/cli.h): 0 done (also after --stop-after), 1 a runtime or
 * data error (a full disk or a file over the size limit included: SIGXFSZ is
 * ignored), 2 a bad command line or configuration, 3 stopped after too many
 * non-finite steps in a row, 128 + signal number after SIGINT / SIGTERM (the
 * checkpoint is saved first). The flags, their ranges and --help come from one
 * table read by cli/cli.h.
 *
 * What this is not: a distributed trainer. Everything runs on the CPU threads
 * of one process, in f32, or with --precision bf16 its matrix products in bf16
 * with f32 accumulation (autocast; the weights, gradients and optimizer state
 * stay f32, so checkpoints are the same either way).
 */
#include "cli/cli.h"
#include "libtensor.h"
#include "models/transformer/config.h"
#include "models/transformer/generate.h"
#include "models/transformer/hf.h"
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
#include <time.h>
#include <unistd.h>

#define PROG "train"
#define CKPT_PREFIX "ckpt"

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

/* "4m05s", "1h02m", "12.3s", as the progress line writes them */
#define DUR(s) lt_trainer_fmt_duration((s), (char[32]){0}, 32)

/* Resident set size at its peak, in MB. */
static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
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
  const char *tsv, *valid_tsv, *text, *dump_data;
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
  const char *resume, *init_from;
  bool overwrite, no_ckpt, eval_only;
  int64_t stop_after;
  /* run */
  int64_t threads, log_every;
  int precision;              /* LT_CLI_PRECISION_* */
  const char *csv;
  int64_t max_memory;         /* MiB; -1: lt_ckpt_default_memory_cap(); 0: no cap */
  bool allow_unchecksummed;
} options;

/* lt_cli_opt.flags (cli/cli.h) of this table:
 * F_MODEL: a model configuration field (on resume it comes from the checkpoint).
 * F_STATE: saved in checkpoints; on resume it must not change (data, optimizer, ...).
 * F_RUN:   how the run goes on; saved, and may be changed on resume.
 * F_NOSAVE (with F_RUN): about this process only; not saved. */
enum { F_MODEL = LT_CLI_USER, F_STATE = LT_CLI_USER << 1, F_RUN = LT_CLI_USER << 2, F_NOSAVE = LT_CLI_USER << 3 };

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
static bool arch_alias(const char *text, int *value) { /* encdec, decoder, encoder */
  lt_tf_arch a;
  return lt_tf_arch_parse(text, &a) == LT_OK ? (*value = (int)a, true) : false;
}

/* Table entries: O and OD give LO..HI (an INT's or DOUBLE's range; a STRING's
 * length in bytes; 0, 0 for a BOOL), OD and OE a --help default text, OE's
 * tail more fields (.parse_alias). */
#define OD(N_, K_, FIELD_, FLAGS_, ARG_, LO_, HI_, HELP_, DEF_)                                                   \
  {.name = N_, .kind = K_, .offset = offsetof(options, FIELD_), .flags = FLAGS_, .arg = ARG_, .help = HELP_,     \
   .min = I64_(LO_), .max = I64_(HI_), .dmin = (double)(LO_), .dmax = (double)(HI_), .default_text = DEF_}
#define I64_(x) ((x) >= 9e18 ? INT64_MAX : (int64_t)(x)) /* an INT's bound; a DOUBLE's may be larger */
#define O(N_, K_, FIELD_, FLAGS_, ARG_, LO_, HI_, HELP_) OD(N_, K_, FIELD_, FLAGS_, ARG_, LO_, HI_, HELP_, NULL)
#define OE(N_, FIELD_, FLAGS_, FN_, COUNT_, HELP_, DEF_, ...)                                                  \
  {.name = N_, .kind = LT_CLI_ENUM, .offset = offsetof(options, FIELD_), .flags = FLAGS_, .help = HELP_,      \
   .value_name = FN_, .n_values = COUNT_, .default_text = DEF_, __VA_ARGS__}
#define GROUP(TITLE_) LT_CLI_GROUP_TITLE(TITLE_) /* a --help heading */
#define COUNT_MAX 1000000000000LL                /* steps and step counts: at most 10^12 */
#define PATH_MAX_LEN (PATH_LEN - 1)

static const lt_cli_opt OPTS[] = {
    GROUP("Model (every lt_tf_config field; vocab_size, n_classes and pad_id come from the data)"),
    OE("arch", arch, F_MODEL, arch_ename, 3, "architecture (or encdec, decoder, encoder)", NULL,
       .parse_alias = arch_alias),
    OD("d-model", LT_CLI_INT, d_model, F_MODEL, "N", 1, 65536, "model width C", "by --arch"),
    OD("heads", LT_CLI_INT, heads, F_MODEL, "N", 1, 4096, "attention heads", "by --arch"),
    OD("kv-heads", LT_CLI_INT, kv_heads, F_MODEL, "N", 1, 4096, "key/value heads (GQA; 1 = MQA)", "= --heads"),
    OD("enc-layers", LT_CLI_INT, enc_layers, F_MODEL, "N", 0, 1024, "encoder layers (--layers N sets both)",
       "by --arch"),
    OD("dec-layers", LT_CLI_INT, dec_layers, F_MODEL, "N", 0, 1024, "decoder layers", "by --arch"),
    OD("d-ff", LT_CLI_INT, d_ff, F_MODEL, "N", 1, 1 << 20, "feed-forward hidden size", "by --arch"),
    OD("max-len", LT_CLI_INT, max_len, F_MODEL, "N", 1, 1 << 20, "longest sequence the model takes (positions)",
       "--seq-len for --text, else by --arch"),
    OD("dropout", LT_CLI_DOUBLE, dropout, F_MODEL, "P", 0, 1, "dropout probability (PyTorch's places)",
       "0 for built-in tasks, else by --arch"),
    OE("norm", norm, F_MODEL, norm_ename, 2, "normalisation", "by --arch"),
    OD("pre-norm", LT_CLI_BOOL, pre_norm, F_MODEL, NULL, 0, 0, "pre-norm (--post-norm or --no-pre-norm: post-norm)",
       "by --arch"),
    OE("act", act, F_MODEL, act_ename, 4, "feed-forward activation", "by --arch"),
    OD("swiglu", LT_CLI_BOOL, swiglu, F_MODEL, NULL, 0, 0, "SwiGLU feed-forward (with --act silu)", "by --arch"),
    OE("pos", pos, F_MODEL, pos_ename, 3, "positions", "by --arch"),
    OD("tie", LT_CLI_BOOL, tie, F_MODEL, NULL, 0, 0, "tie the output projection to the embedding", "by --arch"),
    OD("scale-emb", LT_CLI_BOOL, scale_emb, F_MODEL, NULL, 0, 0, "multiply embeddings by sqrt(d_model)", "by --arch"),
    OD("bias", LT_CLI_BOOL, bias, F_MODEL, NULL, 0, 0, "biases on every Linear", "by --arch"),
    OD("norm-eps", LT_CLI_DOUBLE, norm_eps, F_MODEL | LT_CLI_MIN_OPEN, "X", 0, 1, "epsilon of the norms", "by --arch"),
    OD("rope-base", LT_CLI_DOUBLE, rope_base, F_MODEL | LT_CLI_MIN_OPEN, "X", 1, 1e9, "RoPE base", "by --arch"),

    GROUP("Data (one source: a built-in task, --tsv or --text)"),
    OE("task", task, F_STATE, task_ename, LT_TASK_COUNT, "built-in seq2seq task, generated from --data-seed", NULL),
    O("tsv", LT_CLI_STRING, tsv, F_STATE, "FILE", 1, PATH_MAX_LEN,
      "parallel corpus, one 'source<TAB>target' per line (encoder-only: 'text<TAB>label')"),
    OD("valid-tsv", LT_CLI_STRING, valid_tsv, F_STATE, "FILE", 1, PATH_MAX_LEN,
       "validation pairs (else --valid-fraction of --tsv)", "none"),
    O("text", LT_CLI_STRING, text, F_STATE, "FILE", 1, PATH_MAX_LEN, "plain text for decoder-only language modelling"),
    O("task-train", LT_CLI_INT, task_train, F_STATE, "N", 1, 10000000, "training examples to generate"),
    O("task-valid", LT_CLI_INT, task_valid, F_STATE, "N", 1, 10000000, "held-out examples to generate"),
    OD("task-min-len", LT_CLI_INT, task_min_len, F_STATE, "N", 1, 200,
       "shortest source (symbols; digits for number_words)", "by task"),
    OD("task-max-len", LT_CLI_INT, task_max_len, F_STATE, "N", 1, 200, "longest source", "by task"),
    O("task-symbols", LT_CLI_INT, task_symbols, F_STATE, "N", 2, 36, "alphabet size of copy/reverse/sort (2..36)"),
    O("data-seed", LT_CLI_INT, data_seed, F_STATE, "N", 0, INT64_MAX,
      "seed of the generated training data (validation: N + 1)"),
    O("dump-data", LT_CLI_STRING, dump_data, F_RUN | F_NOSAVE, "DIR", 1, PATH_MAX_LEN,
      "write the task's train.tsv and valid.tsv into DIR, print the flags that train on them, and exit"),
    O("valid-fraction", LT_CLI_DOUBLE, valid_fraction, F_STATE | LT_CLI_MIN_OPEN | LT_CLI_MAX_OPEN, "X", 0, 1,
      "share held out for validation"),
    OE("tokenizer", tokenizer, F_STATE, tok_ename, 3, "tokenizer (char and bpe learn from the training text)",
       "bpe for number_words (whole words), else char"),
    OE("tokenizer-from", tokenizer_from, F_STATE, from_ename, 3, "pairs: the side(s) char and bpe learn from",
       "target for number_words, else both"),
    O("bpe-vocab", LT_CLI_INT, bpe_vocab, F_STATE, "N", 261, 1 << 20,
      "BPE vocabulary size (>= 261; learning stops early when no pair repeats)"),
    OD("seq-len", LT_CLI_INT, seq_len, F_STATE, "N", 2, 1 << 20,
       "language modelling: context length; seq2seq: most source tokens and target positions",
       "128 (LM), --max-len (seq2seq)"),
    OE("overlong", overlong, F_STATE, overlong_ename, 3, "what to do with a sequence longer than --seq-len", NULL),
    O("skip-bad-lines", LT_CLI_BOOL, skip_bad_lines, F_STATE, NULL, 0, 0,
      "skip (and count) bad TSV lines instead of failing"),
    O("bucket", LT_CLI_INT, bucket, F_STATE, "N", 0, 1 << 20, "sort by length within windows of N batches (0: off)"),

    GROUP("Training"),
    O("batch", LT_CLI_INT, batch, F_STATE, "N", 1, 65536, "examples (LM: sequences) per micro-batch"),
    O("steps", LT_CLI_INT, steps, F_RUN, "N", 1, COUNT_MAX, "optimizer steps"),
    OD("epochs", LT_CLI_INT, epochs, F_RUN, "N", 0, 1000000, "train for N epochs instead of --steps", "0: use --steps"),
    O("accum", LT_CLI_INT, accum, F_STATE, "N", 1, 65536, "micro-batches per optimizer step (gradient accumulation)"),
    OE("optim", optim, F_STATE, optim_ename, 3, "optimizer", "adam (encoder-decoder, as the paper), else adamw"),
    OD("lr", LT_CLI_DOUBLE, lr, F_STATE | LT_CLI_MIN_OPEN, "X", 0, 1e30,
       "learning rate (with noam: the peak, setting --noam-scale)", "1e-3"),
    OD("beta1", LT_CLI_DOUBLE, beta1, F_STATE | LT_CLI_MAX_OPEN, "X", 0, 1, "Adam beta1", "0.9"),
    OD("beta2", LT_CLI_DOUBLE, beta2, F_STATE | LT_CLI_MAX_OPEN, "X", 0, 1, "Adam beta2",
       "0.98 (encoder-decoder), else 0.999"),
    OD("eps", LT_CLI_DOUBLE, eps, F_STATE, "X", 0, 1, "Adam epsilon", "1e-9 (encoder-decoder), else 1e-8"),
    OD("weight-decay", LT_CLI_DOUBLE, weight_decay, F_STATE, "X", 0, 100,
       "weight decay (decoupled for adamw; not on norms, biases, embeddings)", "0.01 (adamw), else 0"),
    O("momentum", LT_CLI_DOUBLE, momentum, F_STATE, "X", 0, 1, "SGD momentum"),
    O("nesterov", LT_CLI_BOOL, nesterov, F_STATE, NULL, 0, 0, "SGD Nesterov momentum"),
    OE("schedule", schedule, F_STATE, sched_ename, 5, "learning-rate schedule",
       "noam (encoder-decoder, the paper's warmup), else cosine"),
    OD("warmup", LT_CLI_INT, warmup, F_STATE, "N", 0, COUNT_MAX, "warmup steps", "by --schedule"),
    O("min-lr", LT_CLI_DOUBLE, min_lr, F_STATE, "X", 0, 100, "final learning rate of linear and cosine"),
    O("noam-scale", LT_CLI_DOUBLE, noam_scale, F_STATE | LT_CLI_MIN_OPEN, "X", 0, 1e300,
      "noam: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)"),
    O("step-size", LT_CLI_INT, step_size, F_STATE, "N", 1, COUNT_MAX, "step schedule: decay every N steps"),
    O("gamma", LT_CLI_DOUBLE, gamma, F_STATE, "X", 0, 1e3, "step schedule: decay factor"),
    OD("label-smoothing", LT_CLI_DOUBLE, label_smoothing, F_STATE, "X", 0, 1, "label smoothing of the training loss",
       "0.1 (encoder-decoder), else 0"),
    O("clip", LT_CLI_DOUBLE, clip, F_STATE, "X", 0, 1e6, "clip the global gradient norm to X (0: off)"),
    O("seed", LT_CLI_INT, seed, F_STATE, "N", 0, INT64_MAX, "seed of initialisation, dropout and shuffling"),
    O("max-nonfinite", LT_CLI_INT, max_nonfinite, F_RUN, "N", 1, 1000000,
      "stop after N non-finite steps in a row (each is skipped)"),

    GROUP("Evaluation"),
    OD("eval-every", LT_CLI_INT, eval_every, F_RUN, "N", 0, COUNT_MAX, "validate every N steps (0: only at the end)",
       "by --steps"),
    O("eval-examples", LT_CLI_INT, eval_examples, F_RUN, "N", 1, 10000000,
      "held-out examples decoded for exact match during training (the end uses all)"),
    O("eval-batch", LT_CLI_INT, eval_batch, F_RUN, "N", 1, 65536, "batch size of validation and decoding"),
    O("examples", LT_CLI_INT, examples, F_RUN, "N", 0, 10000, "decoded examples printed at the end"),
    O("gen-tokens", LT_CLI_INT, gen_tokens, F_RUN, "N", 0, 1 << 20, "decoder-only: tokens generated at the end"),
    OD("prompt", LT_CLI_STRING, prompt, F_RUN, "TEXT", 1, 1 << 16, "decoder-only: prompt of the generated text",
       "the start of the validation text"),
    O("temperature", LT_CLI_DOUBLE, temperature, F_RUN, "X", 0, 100, "decoder-only: sampling temperature (0: greedy)"),
    O("top-k", LT_CLI_INT, top_k, F_RUN, "N", 0, 1 << 24,
      "decoder-only: sample among the N most likely tokens (0: all)"),

    GROUP("Checkpoints"),
    OD("ckpt-dir", LT_CLI_STRING, ckpt_dir, F_RUN | F_NOSAVE, "DIR", 1, PATH_MAX_LEN,
       "run directory: checkpoints and metrics.csv", "runs/<date>-<time>-<data>, or the resumed run's"),
    OD("ckpt-every", LT_CLI_INT, ckpt_every, F_RUN, "N", 0, COUNT_MAX, "save every N steps (0: only at the end)",
       "by --steps"),
    O("keep", LT_CLI_INT, keep, F_RUN, "N", 0, 1000000, "keep the N newest checkpoints (0: all)"),
    O("resume", LT_CLI_STRING, resume, F_RUN | F_NOSAVE, "PATH", 1, PATH_MAX_LEN,
      "continue from a checkpoint file, or the newest in a run directory"),
    O("init-from", LT_CLI_STRING, init_from, F_RUN | F_NOSAVE, "PATH", 1, PATH_MAX_LEN,
      "start from the weights (and model configuration and tokenizer) of a checkpoint file or a Hugging Face "
      "directory (export's, docs/interop.md), with a fresh optimizer and schedule"),
    O("overwrite", LT_CLI_BOOL, overwrite, F_RUN | F_NOSAVE, NULL, 0, 0,
      "start over in a --ckpt-dir that holds checkpoints (deletes them)"),
    O("no-ckpt", LT_CLI_BOOL, no_ckpt, F_RUN | F_NOSAVE, NULL, 0, 0, "write no checkpoint"),
    O("eval-only", LT_CLI_BOOL, eval_only, F_RUN | F_NOSAVE, NULL, 0, 0,
      "with --resume: only validate and print examples"),
    OD("stop-after", LT_CLI_INT, stop_after, F_RUN | F_NOSAVE, "N", 0, COUNT_MAX,
       "stop after step N with a checkpoint, as Ctrl-C would (for resume)", "0: off"),

    GROUP("Run"),
    OD("threads", LT_CLI_INT, threads, F_RUN | F_NOSAVE, "N", 0, 1024,
       "threads for BLIS and libtensor's kernels (results do not depend on it)",
       "LT_NUM_THREADS, else auto: all cores or 1, whichever trains faster (measured as it goes)"),
    O("log-every", LT_CLI_INT, log_every, F_RUN, "N", 1, COUNT_MAX,
      "progress line every N steps when stdout is not a terminal"),
    OE("precision", precision, F_RUN, lt_cli_precision_name, LT_CLI_PRECISION_COUNT,
       "matrix products in f32, or bf16 with f32 accumulation (autocast; master weights, gradients and "
       "optimizer state stay f32; docs/mixed-precision.md)", "f32"),
    OD("csv", LT_CLI_STRING, csv, F_RUN | F_NOSAVE, "FILE", 1, PATH_MAX_LEN, "metrics CSV, one row per step",
       "<ckpt-dir>/metrics.csv"),
    OD("max-memory", LT_CLI_INT, max_memory, F_RUN | F_NOSAVE, "MIB", 0, INT64_MAX >> 20,
       "refuse a model (built or resumed) whose parameters need more memory (0: no cap)", "half of physical memory"),
    O("allow-unchecksummed", LT_CLI_BOOL, allow_unchecksummed, F_RUN | F_NOSAVE, NULL, 0, 0,
      "--resume: accept an HDF5 file without object header checksums (h5py's default layout; trusted sources "
      "only, docs/security.md)"),
};
#define N_OPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

/* The defaults of the default run (an encoder-decoder on numbers in words,
 * docs/train.md "The default run"). Model fields left at -1 / NAN take
 * lt_tf_config_default(arch) unless given. */
static options default_options(void) {
  options o;
  memset(&o, 0, sizeof o);
  o.max_memory = -1; /* lt_ckpt_default_memory_cap() */
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

static const lt_cli_alias ALIASES[] = {
  {"layers", {"enc-layers", "dec-layers"}, false, "sets --enc-layers and --dec-layers"},
  {"post-norm", {"pre-norm", NULL}, true, "the same as --no-pre-norm"},
};

static options g_defaults; /* default_options(), for --help */

static const lt_cli CLI = {
  .prog = PROG,
  .synopsis = "usage: " PROG " [--FLAG VALUE | --FLAG=VALUE | --[no-]SWITCH]...\n"
              "\n"
              "Trains a Transformer and reports validation loss, token accuracy and exact match (greedy\n"
              "decoding). With no flags: an encoder-decoder learns to write numbers in words (about five\n"
              "minutes on 2 cores). Ctrl-C saves a checkpoint; --resume continues bit-exactly.\n",
  .epilogue = "Cross-flag limits: --batch x --seq-len and --eval-batch x --seq-len at most 2^24 tokens per\n"
              "micro-batch; --batch x --seq-len x --accum at most 2^32 tokens per step.\n"
              LT_CLI_EXIT_HELP
              "docs/train.md describes the flags, the CSV columns and checkpoints in full.\n",
  .opts = OPTS,
  .n_opts = N_OPTS,
  .aliases = ALIASES,
  .n_aliases = (int)(sizeof ALIASES / sizeof ALIASES[0]),
  .defaults = &g_defaults,
};

static int opt_index(const char *name) { return lt_cli_find(&CLI, name); }

/* Parses argv into *o; given[i] says which options the command line set.
 * --help prints the flags and exits 0; a bad flag exits 2. */
static void parse_args(int argc, char **argv, options *o, bool *given) {
  g_defaults = default_options();
  lt_cli_parse_or_exit(&CLI, argc, argv, o, given, NULL, NULL);
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
    if ((OPTS[i].flags & F_MODEL) && OPTS[i].kind != LT_CLI_GROUP && !given[i]) lt_cli_copy_value(&OPTS[i], o, &m);
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

/* The checks across flags (each flag's own range is in OPTS and was checked
 * as it was parsed, or read from a checkpoint). */
static void check_options(const options *o, const bool *given) {
#define NEED(cond, ...) \
  do {                  \
    if (!(cond)) die(EXIT_USAGE, __VA_ARGS__); \
  } while (0)
  NEED(!(G(given, "steps") && G(given, "epochs")), "give --steps or --epochs, not both");
  NEED(o->seq_len <= o->max_len, "--seq-len %lld is longer than the model's --max-len %lld", (long long)o->seq_len,
       (long long)o->max_len);
  NEED(!o->eval_only || o->resume, "--eval-only evaluates a checkpoint: give --resume PATH");
  NEED(!o->dump_data || (!o->tsv && !o->text && !o->resume),
       "--dump-data writes a generated task's data: give no --tsv, --text or --resume");
  NEED(!(o->resume && o->init_from), "--init-from starts a new run from weights; --resume continues one: not both");
  /* tokens per micro-batch and per step (sizes of the batches, logits and their counts) */
  const int64_t micro_max = (int64_t)1 << 24, step_max = (int64_t)1 << 32;
  int64_t micro, eval_micro, step;
  NEED(!__builtin_mul_overflow(o->batch, o->seq_len, &micro) && micro <= micro_max,
       "--batch %lld x --seq-len %lld: at most 2^24 (%lld) tokens per micro-batch", (long long)o->batch,
       (long long)o->seq_len, (long long)micro_max);
  NEED(!__builtin_mul_overflow(o->eval_batch, o->seq_len, &eval_micro) && eval_micro <= micro_max,
       "--eval-batch %lld x --seq-len %lld: at most 2^24 (%lld) tokens per validation batch", (long long)o->eval_batch,
       (long long)o->seq_len, (long long)micro_max);
  NEED(!__builtin_mul_overflow(micro, o->accum, &step) && step <= step_max,
       "--batch %lld x --seq-len %lld x --accum %lld: at most 2^32 (%lld) tokens per optimizer step",
       (long long)o->batch, (long long)o->seq_len, (long long)o->accum, (long long)step_max);
#undef NEED
}

/* ---- options in a checkpoint ("opt.<name>" in /extra) ----------------------- */

/* Saved: the data, optimizer and run settings (the model is in the config). */
static bool saved_option(const lt_cli_opt *d) {
  return d->kind != LT_CLI_GROUP && !(d->flags & (F_MODEL | F_NOSAVE));
}

static void options_to_meta(const options *o, lt_ckpt_meta *m) {
  for (int i = 0; i < N_OPTS; i++) {
    const lt_cli_opt *d = &OPTS[i];
    if (!saved_option(d)) continue;
    char key[96];
    snprintf(key, sizeof key, "opt.%s", d->name);
    const void *p = (const char *)o + d->offset;
    lt_status s = LT_OK;
    switch (d->kind) {
      case LT_CLI_INT: s = lt_ckpt_meta_set_int(m, key, *(const int64_t *)p); break;
      case LT_CLI_DOUBLE: s = lt_ckpt_meta_set_double(m, key, *(const double *)p); break;
      case LT_CLI_BOOL: s = lt_ckpt_meta_set_int(m, key, *(const bool *)p); break;
      case LT_CLI_ENUM: s = lt_ckpt_meta_set_string(m, key, d->value_name(*(const int *)p)); break;
      case LT_CLI_STRING:
        if (*(const char *const *)p) s = lt_ckpt_meta_set_string(m, key, *(const char *const *)p);
        break;
      case LT_CLI_GROUP: break;
    }
    TRY(EXIT_DATA, s, "saving the settings");
  }
}

/* Strings restored from a checkpoint live until exit. */
static char *g_strings[64];
static int g_nstrings;

/* The saved settings of a checkpoint into *o (which holds the defaults). Each
 * value must be in its flag's range, or be the built-in default (-1 of a
 * setting "by task" and the like), as a command line would have to. */
static void options_from_meta(options *o, const lt_ckpt_meta *m, const char *path) {
  const options def = default_options();
  for (int i = 0; i < N_OPTS; i++) {
    const lt_cli_opt *d = &OPTS[i];
    if (!saved_option(d)) continue;
    char key[96];
    snprintf(key, sizeof key, "opt.%s", d->name);
    int kind = lt_ckpt_meta_kind(m, key);
    void *p = (char *)o + d->offset;
    if (kind < 0) {
      if (d->kind == LT_CLI_STRING) *(const char **)p = NULL;
      continue; /* absent: the default */
    }
    int64_t iv;
    double dv;
    const char *sv;
    bool ok = true;
    switch (d->kind) {
      case LT_CLI_INT: ok = lt_ckpt_meta_get_int(m, key, &iv) == LT_OK, *(int64_t *)p = iv; break;
      case LT_CLI_DOUBLE: ok = lt_ckpt_meta_get_double(m, key, &dv) == LT_OK, *(double *)p = dv; break;
      case LT_CLI_BOOL: ok = lt_ckpt_meta_get_int(m, key, &iv) == LT_OK, *(bool *)p = iv != 0; break;
      case LT_CLI_ENUM:
        ok = lt_ckpt_meta_get_string(m, key, &sv) == LT_OK;
        if (ok) {
          int k = 0;
          while (k < d->n_values && strcmp(d->value_name(k), sv)) k++;
          if (k == d->n_values)
            die(EXIT_DATA, "checkpoint '%s': the saved setting '%s' is '%s', which this " PROG " does not know",
                path, key, sv);
          *(int *)p = k;
        }
        break;
      case LT_CLI_STRING:
        ok = lt_ckpt_meta_get_string(m, key, &sv) == LT_OK;
        if (ok && g_nstrings == 64) die(EXIT_DATA, "checkpoint '%s': more than 64 saved text settings", path);
        if (ok) *(const char **)p = g_strings[g_nstrings++] = xstrdup(sv);
        break;
      case LT_CLI_GROUP: break;
    }
    if (!ok) die(EXIT_DATA, "checkpoint '%s': the saved setting '%s' is not of the type of --%s", path, key, d->name);
    char why[512];
    if (!lt_cli_same_value(d, o, &def) && !lt_cli_check(d, o, why, sizeof why))
      die(EXIT_DATA, "checkpoint '%s': the saved setting '%s' is out of range: %s", path, key, why);
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
    /* With N ranks (mpirun) every rank draws the global batch of N x --batch
     * chunks in the same order and trains on its slice (lt_dist_shard). */
    lt_batch_opts bo = LT_BATCH_DEFAULTS(o->batch * lt_dist_size());
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

/* --dump-data DIR: the generated task's pairs as DIR/train.tsv and
 * DIR/valid.tsv, and the flags with which --tsv reproduces this run (the
 * defaults that follow from a task rather than a corpus: dropout, tokenizer). */
static void dump_data(const options *o, const data *D) {
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
/* The run: the model, its data, and what the hooks need                    */
/* ======================================================================== */

typedef struct eval_result {
  double loss;        /* mean cross-entropy per target token (no label smoothing) */
  double token_acc;   /* teacher-forced argmax accuracy */
  int64_t n_exact, n_decoded; /* exact match by greedy decoding (classification: accuracy) */
  double seconds;
  bool interrupted;
} eval_result;

typedef struct run {
  options o;
  bool given[N_OPTS];
  data D;
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
  int64_t *mb_tokens;         /* [accum] tokens of each (real source + target) */
  int64_t mb_total;           /* target tokens (classification: examples) of the step */
  /* validation */
  eval_result E;              /* the newest */
  char **outs;                /* decoded examples of the final validation [n_pool] */
  int64_t n_pool;
  lt_trainer *trainer;
} run;

static run R; /* global so that everything stays reachable (and leak-checked) whatever the exit path */

/* ---- evaluation ------------------------------------------------------------ */
/* ---- evaluation ------------------------------------------------------------ */

/* Loss and token accuracy of examples [0, n) of pairs, teacher forced. */
static void eval_pairs_loss(run *r, const lt_seq_pairs *pairs, eval_result *E) {
  int64_t n = lt_seq_pairs_count(pairs), B = r->o.eval_batch;
  double loss_sum = 0, correct = 0, count = 0;
  int64_t *idx = lt_cli_xmalloc_n((size_t)B, sizeof *idx);
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
  for (int64_t b0 = 0; b0 < n && !lt_trainer_stop_requested(); b0 += B) {
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
  E->interrupted = lt_trainer_stop_requested() != 0;
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
  len_idx *order = lt_cli_xmalloc_n((size_t)n, sizeof *order);
  for (int64_t i = 0; i < n; i++) {
    const int64_t *s, *t;
    int64_t sl, tl;
    lt_seq_pairs_get(V, i, &s, &sl, &t, &tl);
    order[i] = (len_idx){tl, i};
  }
  qsort(order, (size_t)n, sizeof *order, cmp_len);
  int64_t B = r->o.eval_batch, *idx = lt_cli_xmalloc_n((size_t)B, sizeof *idx), *gen = NULL;
  E->n_exact = E->n_decoded = 0;
  for (int64_t b0 = 0; b0 < n && !lt_trainer_stop_requested(); b0 += B) {
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
    free(gen);
    gen = lt_cli_xmalloc_n((size_t)nb, sizeof *gen * (size_t)L); /* L <= maxlen + 1 */
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
  E->interrupted = lt_trainer_stop_requested() != 0;
}

/* Language modelling: mean loss over the validation tokens in chunks of --seq-len. */
static void eval_lm(run *r, eval_result *E) {
  lt_batch_opts bo = LT_BATCH_DEFAULTS(r->o.eval_batch);
  bo.shuffle = false;
  lt_lm_loader *L = lt_lm_loader_new(r->D.valid_tokens, r->o.seq_len, &bo);
  if (!L) die_lt(EXIT_DATA, "validation loader");
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, 0.0, LT_REDUCTION_SUM};
  double sum = 0, correct = 0, count = 0;
  /* With N ranks, rank r evaluates batches r, r + N, ... and the sums are
   * reduced (a stop request does not cut it short: every rank must reach the
   * reduction). */
  const int N = lt_dist_size(), rank = lt_dist_rank();
  for (int64_t i = 0; i < lt_lm_loader_batches_per_epoch(L) && (N > 1 || !lt_trainer_stop_requested()); i++) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *x, *y;
    TRY(EXIT_DATA, lt_lm_loader_next(L, &x, &y), "validation batch");
    if (i % N != rank) {
      lt_scope_end(s);
      continue;
    }
    lt_tensor *logits = lt_transformer_decode(r->model, x, NULL, NULL, NULL, 0, NULL);
    double l, c;
    lt_tensor *hit = lt_sum(lt_eq(lt_argmax(logits, -1, false), y), 0, NULL, false);
    if (!hit || lt_item(lt_cross_entropy(logits, y, &ce), &l) != LT_OK || lt_item(hit, &c) != LT_OK)
      die_lt(EXIT_DATA, "validation forward");
    sum += l, correct += c, count += (double)y->numel;
    lt_scope_end(s);
  }
  lt_lm_loader_free(L);
  double v[3] = {sum, correct, count};
  TRY(EXIT_DATA, lt_dist_allreduce_f64(v, 3, LT_DIST_SUM), "validation: reducing over the ranks");
  sum = v[0], correct = v[1], count = v[2];
  E->loss = count > 0 ? sum / count : NAN;
  E->token_acc = count > 0 ? correct / count : NAN;
  E->interrupted = N == 1 && lt_trainer_stop_requested() != 0;
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


/* The text of an evaluation line after "validation at step N: ". */
static void eval_text(const run *r, const eval_result *E, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "loss %.4f", E->loss);
  if (n < size && r->D.kind != DATA_CLASSIFY)
    n += (size_t)snprintf(buf + n, size - n, " (ppl %.2f), token accuracy %.2f%%", exp(E->loss), 100 * E->token_acc);
  if (n < size && E->n_decoded > 0)
    snprintf(buf + n, size - n, ", %s %.2f%% (%lld/%lld)", r->D.kind == DATA_CLASSIFY ? "accuracy" : "exact match",
             100.0 * (double)E->n_exact / (double)E->n_decoded, (long long)E->n_exact, (long long)E->n_decoded);
}

/* ======================================================================== */
/* The hooks of the training loop (train/trainer.h)                         */
/* ======================================================================== */

static const char *const GEN_NAMES[] = {"dropout"};
/* The CSV's validation columns. */
static const lt_trainer_metric METRICS[] = {{"val_loss", NULL}, {"val_token_acc", NULL}, {"val_exact_match", "%.6f"}};

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

/* Pairs: all micro-batches of the step first, since each one's weight is its
 * share of the step's target tokens (classification: examples). */
static lt_status hook_begin_step(void *user, int64_t step, int64_t accum) {
  run *r = user;
  if (r->D.kind == DATA_LM) return LT_OK;
  r->mb_total = 0;
  for (int64_t a = 0; a < accum; a++) {
    lt_seq2seq_batch *b = &r->mb[a];
    TRY(EXIT_DATA, lt_seq2seq_loader_next(r->D.sl, b), "next batch");
    r->mb_total += r->D.kind == DATA_CLASSIFY ? b->src->shape[0] : b->n_tokens;
    /* tokens: real source tokens + target tokens (classification: source only) */
    r->mb_tokens[a] = (r->D.kind == DATA_CLASSIFY ? 0 : b->n_tokens) + count_false(b->src_mask);
  }
  return LT_OK;
}

/* One micro-batch: the forward pass and the loss (cross-entropy with
 * --label-smoothing). Language modelling fetches its batch here; every
 * micro-batch weighs 1/accum. */
static lt_status hook_micro_batch(void *user, lt_trainer_micro *m) {
  run *r = user;
  lt_nn_ctx ctx = {true, r->dropout_gen};
  lt_tensor *logits, *labels;
  if (r->D.kind == DATA_LM) {
    lt_tensor *x, *y;
    TRY(EXIT_DATA, lt_lm_loader_next(r->D.ll, &x, &y), "next batch");
    if (lt_dist_size() > 1) { /* this rank's rows of the global batch */
      int64_t b0, nb;
      lt_dist_shard(x->shape[0], &b0, &nb);
      if (nb == 0) die(EXIT_DATA, "rank %d: a global batch of %lld rows has none for this rank", lt_dist_rank(),
                       (long long)x->shape[0]);
      x = lt_narrow(x, 0, b0, nb), y = lt_narrow(y, 0, b0, nb);
      if (!x || !y) die_lt(EXIT_DATA, "this rank's slice of the batch");
    }
    m->tokens = y->numel;
    if (!m->forward) return LT_OK; /* the batch is still consumed: the data order stays that of a clean run */
    logits = lt_transformer_decode(r->model, x, NULL, NULL, NULL, 0, &ctx); /* [B, T, V] */
    labels = y;
    m->weight = 1.0 / (double)m->accum;
  } else {
    lt_seq2seq_batch *b = &r->mb[m->index];
    m->tokens = r->mb_tokens[m->index];
    if (!m->forward) return LT_OK;
    double n;
    if (r->D.kind == DATA_CLASSIFY) {
      logits = lt_transformer_classify(r->model, b->src, b->src_mask, &ctx); /* [B, n_classes] */
      labels = lt_select(b->labels, 1, 0);
      n = (double)b->src->shape[0];
    } else {
      lt_tensor *mem = lt_transformer_encode(r->model, b->src, b->src_mask, &ctx);                  /* [B, S, C] */
      logits = lt_transformer_decode(r->model, b->tgt_in, b->tgt_mask, mem, b->src_mask, 0, &ctx); /* [B, T, V] */
      labels = b->labels;
      n = (double)b->n_tokens;
    }
    m->weight = r->mb_total > 0 ? n / (double)r->mb_total : 0;
  }
  lt_cross_entropy_opts ce = {LT_IGNORE_INDEX, r->o.label_smoothing, LT_REDUCTION_MEAN};
  m->loss = logits && labels ? lt_cross_entropy(logits, labels, &ce) : NULL;
  if (!m->loss) die_lt(EXIT_DATA, "training forward");
  return LT_OK;
}

/* Periodic validation (exact match on the first --eval-examples), or the
 * final one (every held-out example, keeping the decoded texts to print). */
static lt_status hook_evaluate(void *user, lt_trainer_eval *ev) {
  run *r = user;
  int64_t n_all = r->D.kind == DATA_SEQ2SEQ ? lt_seq_pairs_count(r->D.valid) : 0;
  r->E = ev->final ? evaluate(r, n_all, r->outs, r->n_pool) : evaluate(r, r->o.eval_examples, NULL, 0);
  ev->values[0] = r->E.loss;
  ev->values[1] = r->E.token_acc;
  if (r->E.n_decoded > 0) ev->values[2] = (double)r->E.n_exact / (double)r->E.n_decoded;
  ev->interrupted = r->E.interrupted;
  return LT_OK;
}

static void hook_eval_line(void *user, const lt_trainer_eval *ev, char *buf, size_t size) {
  const run *r = user;
  eval_text(r, &r->E, buf, size);
}

/* This program's values in a checkpoint: the settings, the tokenizer, the class labels. */
static lt_status hook_save_extra(void *user, lt_ckpt_meta *extra) {
  run *r = user;
  options_to_meta(&r->o, extra);
  void *blob;
  size_t size;
  TRY(EXIT_DATA, lt_tokenizer_serialize(r->D.tok, &blob, &size), "saving the tokenizer");
  lt_status s = lt_ckpt_meta_set_bytes(extra, LT_TF_CKPT_TOKENIZER, blob, size);
  free(blob);
  if (s == LT_OK && r->D.kind == DATA_CLASSIFY) {
    size_t total = 1;
    for (int64_t i = 0; i < r->D.n_classes; i++) total += strlen(r->D.classes[i]) + 1;
    char *c = xmalloc(total), *p = c;
    for (int64_t i = 0; i < r->D.n_classes; i++) p += sprintf(p, "%s\n", r->D.classes[i]);
    s = lt_ckpt_meta_set_bytes(extra, LT_TF_CKPT_CLASSES, c, (size_t)(p - c));
    free(c);
  }
  return s;
}

static lt_loader_position hook_get_position(void *user) { return loader_pos(&((run *)user)->D); }
static lt_status hook_set_position(void *user, lt_loader_position pos) {
  run *r = user;
  return r->D.kind == DATA_LM ? lt_lm_loader_set_position(r->D.ll, pos) : lt_seq2seq_loader_set_position(r->D.sl, pos);
}
static int64_t hook_batches_per_epoch(void *user) { return batches_per_epoch(&((run *)user)->D); }

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
      ids = lt_cli_xmalloc_n((size_t)r->D.valid_tokens->numel, sizeof *ids);
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
    int64_t *g = lt_cli_xmalloc_n((size_t)y->numel + 1, sizeof *g);
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
    pred = lt_cli_xmalloc_n((size_t)n, sizeof *pred);
    int64_t *idx = lt_cli_xmalloc_n((size_t)n, sizeof *idx);
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
  if (lt_dist_size() > 1)
    printf("data parallel: %d ranks x --batch %lld = a global batch of %lld (x --accum %lld per step), gradients "
           "averaged in buckets of %.0f MB\n", lt_dist_size(), (long long)o->batch, (long long)o->batch * lt_dist_size(),
           (long long)o->accum, (double)lt_dist_bucket_bytes() / 1048576.0);
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
  lo.max_bytes = o->max_memory < 0 ? lt_ckpt_default_memory_cap() : (uint64_t)o->max_memory << 20;
  return lo;
}

/* Settings of a resumed run: the checkpoint's, with the command line's run
 * flags on top; a model, data or optimizer flag must not differ. */
static void resume_options(run *r, const char *path) {
  lt_params *empty = lt_params_new();
  lt_train_state st0 = {.params = empty};
  lt_ckpt_load_opts lo = ckpt_opts(&r->o);
  lo.non_strict = true; /* only the configuration and extra values are wanted here */
  lt_status s = lt_ckpt_load_training(path, &st0, &lo, &g_info);
  lt_params_free(empty);
  if (s != LT_OK) die_lt(EXIT_DATA, "--resume: reading the checkpoint's settings");
  r->step = st0.step;
  options saved = default_options();
  lt_tf_config cfg;
  TRY(EXIT_DATA, lt_tf_config_from_meta(g_info->config, &cfg), "--resume: the checkpoint's model configuration");
  options_from_config(&saved, &cfg);
  options_from_meta(&saved, g_info->extra, path);
  for (int i = 0; i < N_OPTS; i++) {
    const lt_cli_opt *d = &OPTS[i];
    if (d->kind == LT_CLI_GROUP) continue;
    if (d->flags & F_NOSAVE) {
      lt_cli_copy_value(d, &saved, &r->o); /* this process's own */
    } else if (r->given[i]) {
      if (d->flags & F_RUN) {
        lt_cli_copy_value(d, &saved, &r->o);
      } else if (!lt_cli_same_value(d, &saved, &r->o)) {
        char mine[256], theirs[256];
        die(EXIT_USAGE, "--%s %s differs from the checkpoint's %s: a resumed run keeps the %s it was started with "
            "(leave the flag out, or start a new run)", d->name, lt_cli_value_text(d, &r->o, mine, sizeof mine),
            lt_cli_value_text(d, &saved, theirs, sizeof theirs),
            d->flags & F_MODEL ? "model" : "data and optimizer settings");
      }
    }
  }
  if (r->given[opt_index("steps")]) saved.epochs = 0;
  r->o = saved;
  r->cfg = cfg;
}


/* --init-from PATH (a fresh run): the model configuration of a checkpoint or
 * a Hugging Face directory replaces the model flags (a given one must agree),
 * and its tokenizer, if it holds one, is the run's. The weights are loaded
 * once the model is built (init_weights). */
static int64_t g_init_vocab; /* --init-from: the source model's vocab_size */

static lt_tokenizer *init_from_options(run *r) {
  const char *path = r->o.init_from;
  lt_tf_config cfg;
  lt_tokenizer *tok = NULL;
  if (lt_hf_is_dir(path)) {
    TRY(EXIT_DATA, lt_hf_read_config(path, &cfg, NULL), "--init-from");
    char tpath[PATH_LEN];
    fmt_path(tpath, "%s/%s", path, LT_HF_TOKENIZER_FILE);
    char *blob = NULL;
    size_t size = 0;
    if (access(tpath, F_OK) == 0) {
      TRY(EXIT_DATA, lt_ckpt_read_file(tpath, 1u << 30, &blob, &size), "--init-from: the tokenizer");
      tok = lt_tokenizer_deserialize(blob, size);
      free(blob);
      if (!tok) die_lt(EXIT_DATA, "--init-from: the tokenizer");
    }
  } else {
    static char file[PATH_LEN]; /* a run directory stands for its newest valid checkpoint, as --resume */
    if (lt_trainer_find_resume(path, CKPT_PREFIX, file, sizeof file) != LT_OK) die_lt(EXIT_DATA, "--init-from");
    r->o.init_from = path = file;
    lt_params *empty = lt_params_new();
    lt_train_state st0 = {.params = empty};
    lt_ckpt_load_opts lo = ckpt_opts(&r->o);
    lo.non_strict = true;
    if (lt_ckpt_load_training(path, &st0, &lo, &g_info) != LT_OK &&
        lt_ckpt_load_params(path, empty, &lo, &g_info) != LT_OK)
      die_lt(EXIT_DATA, "--init-from");
    lt_params_free(empty);
    TRY(EXIT_DATA, lt_tf_config_from_meta(g_info->config, &cfg), "--init-from: the checkpoint's model configuration");
    const void *blob;
    size_t size;
    if (g_info->extra && lt_ckpt_meta_get_bytes(g_info->extra, LT_TF_CKPT_TOKENIZER, &blob, &size) == LT_OK &&
        !(tok = lt_tokenizer_deserialize(blob, size)))
      die_lt(EXIT_DATA, "--init-from: the checkpoint's tokenizer");
  }
  g_init_vocab = cfg.vocab_size;
  options src = r->o;
  options_from_config(&src, &cfg);
  for (int i = 0; i < N_OPTS; i++) {
    const lt_cli_opt *d = &OPTS[i];
    if (!(d->flags & F_MODEL) || d->kind == LT_CLI_GROUP) continue;
    if (r->given[i] && !lt_cli_same_value(d, &src, &r->o)) {
      char mine[256], theirs[256];
      die(EXIT_USAGE, "--%s %s differs from --init-from's %s (the model comes from it: leave the flag out)", d->name,
          lt_cli_value_text(d, &r->o, mine, sizeof mine), lt_cli_value_text(d, &src, theirs, sizeof theirs));
    }
    lt_cli_copy_value(d, &r->o, &src);
    r->given[i] = true; /* so that finalize_options keeps it */
  }
  if (tok) r->o.tokenizer = (int)lt_tokenizer_get_kind(tok);
  return tok;
}

/* --init-from: the weights into the new model (every tensor, strictly). */
static void init_weights(run *r) {
  const char *path = r->o.init_from;
  lt_ckpt_load_opts lo = ckpt_opts(&r->o);
  if (lt_hf_is_dir(path)) TRY(EXIT_DATA, lt_hf_load_params(path, r->model), "--init-from");
  else TRY(EXIT_DATA, lt_ckpt_load_params(path, r->params, &lo, NULL), "--init-from");
}

static void finish(run *r) {
  lt_trainer_free(r->trainer);
  g_trainer = r->trainer = NULL;
  free(r->mb);
  free(r->mb_tokens);
  for (int64_t i = 0; r->outs && i < r->n_pool; i++) free(r->outs[i]);
  free(r->outs);
  lt_ckpt_meta_free(r->cfg_meta);
  lt_optimizer_free(r->opt);
  lt_transformer_free(r->model);
  lt_generator_free(r->dropout_gen);
  lt_generator_free(r->sample_gen);
  free_data(&r->D);
  lt_ckpt_info_free(g_info);
  for (int i = 0; i < g_nstrings; i++) free(g_strings[i]);
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
  double t_start = now_s();
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
    if (r->o.text == NULL)
      die(EXIT_USAGE, "mpirun -np %d: data parallelism covers language modelling (--text) so far; the pair tasks "
          "(--task, --tsv) run on one process", lt_dist_size());
    if (r->o.eval_only) die(EXIT_USAGE, "--eval-only runs on one process (not under mpirun -np %d)", lt_dist_size());
    char v[6][64];
    snprintf(v[0], 64, "%lld", (long long)r->o.seed);
    snprintf(v[1], 64, "%lld", (long long)r->o.batch);
    snprintf(v[2], 64, "%lld", (long long)r->o.seq_len);
    snprintf(v[3], 64, "%.17g", r->o.lr);
    snprintf(v[4], 64, "%lld", (long long)r->o.accum);
    snprintf(v[5], 64, "%.63s", r->o.resume ? r->o.resume : "");
    const char *names[6] = {"--seed", "--batch", "--seq-len", "--lr", "--accum", "--resume"};
    const char *vals[6] = {v[0], v[1], v[2], v[3], v[4], v[5]};
    TRY(EXIT_USAGE, lt_dist_check_same(PROG, 6, names, vals), "mpirun");
  }

  /* data */
  load_data(&r->o, &r->D, tok);
  if (r->o.dump_data) {
    dump_data(&r->o, &r->D);
    finish(r);
    return 0;
  }
  if (r->o.epochs > 0 && (!r->o.resume || r->given[opt_index("epochs")])) {
    int64_t bpe = batches_per_epoch(&r->D), micro;
    if (__builtin_mul_overflow(r->o.epochs, bpe, &micro) || micro / r->o.accum >= COUNT_MAX)
      die(EXIT_USAGE, "--epochs %lld of %lld batches (with --accum %lld) are more than %lld steps",
          (long long)r->o.epochs, (long long)bpe, (long long)r->o.accum, (long long)COUNT_MAX);
    r->o.steps = (micro + r->o.accum - 1) / r->o.accum;
  }
  if (r->o.eval_every < 0) r->o.eval_every = r->o.steps / 10 > 0 ? r->o.steps / 10 : 1;
  if (r->o.ckpt_every < 0) r->o.ckpt_every = r->o.steps / 5 > 0 ? r->o.steps / 5 : 1;

  /* model */
  if (!r->o.resume) {
    r->cfg = config_of(&r->o);
    r->cfg.vocab_size = lt_tokenizer_vocab_size(r->D.tok);
    if (r->D.kind == DATA_CLASSIFY) r->cfg.n_classes = r->D.n_classes;
    if (lt_tf_config_validate(&r->cfg) != LT_OK) die(EXIT_USAGE, "model configuration: %s", lt_last_error());
  }
  if (r->o.init_from && g_init_vocab != r->cfg.vocab_size)
    die(EXIT_DATA, "--init-from: its model has vocab_size %lld, this run's tokenizer %lld (the source holds no "
        "tokenizer, and the one built from the data differs)", (long long)g_init_vocab, (long long)r->cfg.vocab_size);
  if (r->o.resume && (r->cfg.vocab_size != lt_tokenizer_vocab_size(r->D.tok) ||
                      (r->D.kind == DATA_CLASSIFY && r->cfg.n_classes != r->D.n_classes))) {
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
    TRY(EXIT_DATA, lt_hf_check_size(r->o.init_from, &r->cfg, lo.max_bytes), "--init-from");
  else if (r->o.init_from)
    TRY(EXIT_DATA, lt_ckpt_check_model_size(g_info, r->o.init_from, n_params, model_bytes, lo.max_bytes), "--init-from");
  else if (lo.max_bytes && model_bytes > lo.max_bytes)
    die(EXIT_USAGE, "the model needs %zu bytes (%lld parameters), more than --max-memory (%llu bytes)", model_bytes,
        (long long)n_params, (unsigned long long)lo.max_bytes);
  lt_generator *init = lt_generator_new((uint64_t)r->o.seed);
  r->model = init ? lt_transformer_new(&r->cfg, init) : NULL;
  lt_generator_free(init);
  if (!r->model) die_lt(EXIT_USAGE, "building the model");
  r->params = lt_transformer_params(r->model);
  if (r->o.init_from) init_weights(r);
  if (!(r->cfg_meta = lt_ckpt_meta_new())) die(EXIT_DATA, "out of memory");
  TRY(EXIT_DATA, lt_tf_config_to_meta(&r->cfg, r->cfg_meta), "saving the model configuration");
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
  tc.auto_threads = r->o.threads == 0 && !getenv("LT_NUM_THREADS") && lt_get_num_threads() > 1;
  lt_trainer_hooks hooks = {r, hook_micro_batch, hook_begin_step, hook_evaluate, hook_eval_line, hook_save_extra,
                            NULL, hook_get_position, hook_set_position, hook_batches_per_epoch};
  /* After resume resolved the settings (a bf16 run resumes in bf16); this
   * thread runs every step, evaluation and decoding. */
  if (r->o.precision == LT_CLI_PRECISION_BF16) lt_set_autocast(LT_DTYPE_BF16);
  if (!(g_trainer = r->trainer = lt_trainer_new(&tc, &hooks))) die_lt(EXIT_USAGE, "the training loop");
  r->mb = xmalloc(sizeof *r->mb * (size_t)r->o.accum);
  r->mb_tokens = xmalloc(sizeof *r->mb_tokens * (size_t)r->o.accum);
  r->n_pool = r->o.examples * EXAMPLE_POOL; /* decoded outputs kept for the examples shown */
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
    eval_result E = evaluate(r, lt_seq_pairs_count(r->D.valid), r->outs, r->n_pool);
    char text[512];
    eval_text(r, &E, text, sizeof text);
    printf("validation at step %lld: %s [%s]\n", (long long)r->step, text, DUR(E.seconds));
    print_examples(r, r->outs, r->o.examples);
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
  /* The BLIS kernel set decides the last bits of every product, so of the figures (docs/train.md). */
  printf("runtime: libtensor %s, BLIS kernels %s (%s)\n", info.version, info.blas_arch, info.blas_arch_why);
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
  eval_result E = r->E;
  if (!sig) print_examples(r, r->outs, r->o.examples);
  double wall = now_s() - t_start;
  printf("\ndone: %lld steps", (long long)res.step);
  if (res.step > res.start_step)
    printf(" (%lld in this process) in %s, %.0f tokens/s in training steps", (long long)(res.step - res.start_step),
           DUR(wall), (double)res.tokens / (res.train_seconds > 0 ? res.train_seconds : 1));
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
  if (!r->o.no_ckpt) printf("checkpoint: %s\n", res.last_checkpoint);
  printf("metrics: %s\n", res.csv_path);
  int code = sig ? 128 + sig : 0;
  finish(r);
  return code;
}
