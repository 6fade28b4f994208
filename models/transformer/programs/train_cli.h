/*
 * models/transformer/programs/train_cli.h: the command line of `train`
 * (train_main.c): its options struct, the flag classes that decide what a
 * checkpoint keeps and a resume may change, and the functions over the one
 * option table (train_cli.c) that parse, complete and check it.
 *
 * What this is not: a library header. These are the two files of one
 * program; the functions exit with a message on a bad flag (lt_cli_die,
 * exit code 2), as only a program may.
 */
#ifndef LT_TRAIN_CLI_H
#define LT_TRAIN_CLI_H

#include "cli/cli.h"
#include "models/transformer/data.h"
#include "models/transformer/transformer.h"

#include <stdbool.h>
#include <stdint.h>

/* Paths: PATH_LEN bytes with the terminator; longer is an error, never a silent cut. */
#define PATH_LEN 4096
#define COUNT_MAX 1000000000000LL /* steps and step counts: at most 10^12 */
enum { MAX_OPTS = 128 };          /* room for the table's entries (checked in train_cli.c) */

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
  int64_t rel_buckets, rel_max_distance; /* --pos relative (T5) */
  double attn_scale;
  bool head_rescale;
  /* data */
  int task;
  const char *tsv, *valid_tsv, *text, *dump_data;
  const char *data, *val_data; /* token shards (globs) for language modelling */
  int64_t task_train, task_valid, task_min_len, task_max_len, task_symbols, data_seed;
  double valid_fraction;
  int tokenizer, tokenizer_from;
  const char *tokenizer_file; /* a tokenizer.json the user brings, or NULL */
  int64_t bpe_vocab, seq_len;
  int overlong;
  bool skip_bad_lines;
  int64_t bucket;
  bool shuffle; /* the training batches in a new order each epoch (false: the data's order) */
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
  double dist_timeout;        /* --dist-timeout: seconds; -1: not given */
  double bucket_mb;           /* --bucket-mb: gradient bucket size in MiB; 0: not given */
  int64_t zero;               /* --zero: 1 = ZeRO-1 (optimizer state sharded across ranks), 0 = off */
  int precision;              /* LT_CLI_PRECISION_* */
  int recompute;              /* lt_recompute_mode: what the layers recompute in the backward */
  bool chunked_head;          /* the loss through lt_transformer_decode_loss (no B x T x V logits) */
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

/* The settings a checkpoint keeps, as "opt.<name>" in /extra (cli/cli_ckpt.h):
 * the data, optimizer and run settings (the model is in the configuration). */
#define OPT_PREFIX "opt."
#define NOT_SAVED (F_MODEL | F_NOSAVE)

/* The command line: the table, its aliases, --help text. */
extern const lt_cli CLI;

/* The defaults of the default run (an encoder-decoder on numbers in words). */
options default_options(void);
/* Parses argv into *o; given[i] says which options the command line set.
 * --help prints the flags and exits 0; a bad flag exits 2. */
void parse_args(int argc, char **argv, options *o, bool *given);
int opt_index(const char *name);             /* the index of option name in the table */
bool G(const bool *given, const char *name); /* whether the command line gave name */

/* The model configuration the options describe, over base (NULL: the
 * architecture's defaults; train_cli.c), and back. */
lt_tf_config config_of(const options *o, const lt_tf_config *base);
void options_from_config(options *o, const lt_tf_config *c);
/* Fills every default that depends on other flags (fresh runs only). */
void finalize_options(options *o, const bool *given);
/* The checks across flags (each flag's own range is checked as it is parsed). */
void check_options(const options *o, const bool *given);
/* The data flags as the library's options (data.h). */
lt_tf_data_opts data_opts(const options *o);
/* A resumed run: saved (the checkpoint's settings) takes the command line's
 * run flags; a given model, data or optimizer flag that differs exits 2. */
void merge_resumed_options(options *saved, const options *cmd, const bool *given);
/* --init-from: the model flags of o come from src; a given one that differs
 * exits 2; each is then marked given (finalize_options keeps it). */
void take_model_options(options *o, bool *given, const options *src);

/* Enum names for messages (the table's value names). */
const char *tok_ename(int i);
const char *from_ename(int i);
const char *optim_ename(int i);
const char *sched_ename(int i);
const char *overlong_ename(int i);

#endif /* LT_TRAIN_CLI_H */
