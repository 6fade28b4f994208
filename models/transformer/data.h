/*
 * models/transformer/data.h: the data of a Transformer training run, ready
 * for the training loop: one of three sources turned into tokens, a
 * validation part and a batch loader.
 *   - language modelling: a text file, tokenized whole, split at the end
 *     into training and validation tokens, read in windows of seq_len + 1
 *     (lt_lm_loader); or token shards (the tokenize program's), training
 *     and validation shards each a glob, memory-mapped and streamed
 *     (lt_shard_loader: every rank reads its own rows);
 *   - sequence to sequence: a TSV parallel corpus (with its own validation
 *     file, or a held-out fraction), or a generated task (datasets/tasks.c),
 *     encoded into source / target id pairs (lt_seq2seq_loader);
 *   - classification (encoder-only): TSV 'text<TAB>label' pairs, the labels
 *     numbered in sorted order (the class ids).
 * The tokenizer is given (from a checkpoint), or learnt from the training
 * text: byte, char, or BPE, from both sides of the pairs or one.
 *
 * What this is not: a data format (datasets/datasets.h reads TSV, text and
 * tasks, and holds the loaders), or the program's flags: the options below
 * mirror train's data flags, and error messages name the flags ("--tsv",
 * "--seq-len", ...) so that train can print them as they are.
 *
 * Conventions are those of tensor/tensor.h: each function returns an
 * lt_status with a message in lt_last_error(); nothing here prints or exits.
 */
#ifndef LT_TF_DATA_H
#define LT_TF_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a run learns. */
typedef enum { LT_TF_DATA_SEQ2SEQ, LT_TF_DATA_LM, LT_TF_DATA_CLASSIFY } lt_tf_data_kind;

/* The side(s) of the training pairs a char or BPE tokenizer learns from. */
typedef enum {
  LT_TF_TOKENIZER_FROM_BOTH,
  LT_TF_TOKENIZER_FROM_SOURCE,
  LT_TF_TOKENIZER_FROM_TARGET,
  LT_TF_TOKENIZER_FROM_COUNT
} lt_tf_tokenizer_from;
/* "both", "source", "target"; "unknown" out of range. */
LT_API const char *lt_tf_tokenizer_from_name(int i);

/* Where the data comes from and how it is cut (train's data flags). One
 * source: text (language modelling), else tsv, else the generated task. */
typedef struct lt_tf_data_opts {
  const char *text;            /* --text: a text file for language modelling, or NULL */
  const char *data;            /* --data: a glob of training shards for language modelling, or NULL */
  const char *val_data;        /* --val-data: a glob of validation shards (with data) */
  int64_t eval_batch;          /* data: windows per validation batch and rank (0: batch) */
  const char *tsv;             /* --tsv: 'source<TAB>target' pairs, or NULL */
  const char *valid_tsv;       /* --valid-tsv: validation pairs, or NULL (--valid-fraction of tsv) */
  bool skip_bad_lines;         /* skip (and count) bad TSV lines instead of failing */
  bool classify;               /* pairs are 'text<TAB>label' (an encoder-only model) */
  lt_task_kind task;           /* with neither text nor tsv: the task generated */
  int64_t task_train, task_valid, task_min_len, task_max_len, task_symbols;
  uint64_t data_seed;          /* the task's training data; validation uses data_seed + 1 */
  double valid_fraction;       /* in (0, 1): the share held out (text, tsv without valid_tsv) */
  lt_tokenizer_kind tokenizer; /* when none is given: learnt from the training text */
  lt_tf_tokenizer_from tokenizer_from; /* pairs: the side(s) it learns from */
  int64_t bpe_vocab;           /* BPE vocabulary size */
  int64_t seq_len;             /* LM: the context; pairs: most source tokens and target positions */
  lt_overlong overlong;        /* pairs: a sequence longer than seq_len */
  int64_t batch;               /* examples (LM: windows) per rank: the loader draws batch x lt_dist_size() */
  int64_t bucket;              /* pairs: sort by length within windows of N batches (0: off) */
  bool in_order;               /* training batches in the data's order (false: a new order each epoch) */
  uint64_t seed;               /* the loader's shuffling draws from seed + 2 */
} lt_tf_data_opts;

/* The data of a run. Every pointer is owned by it (lt_tf_data_free). */
typedef struct lt_tf_data {
  lt_tf_data_kind kind;
  char name[128];              /* the file's base name or the task's name: for messages, run directories */
  int64_t seq_len;             /* the options' */
  lt_tokenizer *tok;
  /* seq2seq and classification */
  lt_text_pairs *train_text, *valid_text;
  lt_seq_pairs *train, *valid; /* encoded (classification: target = [class id]) */
  lt_seq2seq_loader *sl;
  char **classes;              /* classification: the label of class i (sorted) [n_classes] */
  int64_t n_classes;
  /* language modelling */
  lt_tensor *train_tokens, *valid_tokens; /* [N] i64 (shards: no train_tokens; valid_tokens is the first
                                             validation window, the prompt of the final sample) */
  lt_lm_loader *ll;
  lt_shard_loader *shards, *val_shards;   /* --data / --val-data (then ll is NULL) */
  /* what reading and encoding left out */
  int64_t skipped_lines;       /* bad TSV lines skipped (skip_bad_lines) */
  int64_t affected_train, affected_valid; /* examples skipped or truncated (overlong; classification: or an unknown label) */
} lt_tf_data;

/* Step 1: reads the pairs (TSV, split by valid_fraction unless valid_tsv) or
 * generates the task into *D (cleared first); language modelling only sets
 * the kind and name here. *bad_config (may be NULL) is set to whether a
 * failure is the options' fault (the task generator refused them) rather
 * than the data's. On failure *D holds what was read (free it). */
LT_API lt_status lt_tf_data_read(const lt_tf_data_opts *o, lt_tf_data *D, bool *bad_config);

/* Step 2: the tokenizer, the encoded examples and the loader. tok (may be
 * NULL: then one is learnt from the training text) is taken over by *D, also
 * on failure. Language modelling reads o->text here, or opens the shards of
 * o->data and o->val_data (tok NULL: the byte tokenizer if o->tokenizer is
 * byte, else an error: shards need the tokenizer they were made with); a
 * shard holding an id outside the tokenizer's vocabulary is refused, naming
 * the shard and the offset. On failure free *D. */
LT_API lt_status lt_tf_data_prepare(const lt_tf_data_opts *o, lt_tf_data *D, lt_tokenizer *tok);

/* Frees everything *D owns and clears it; NULL is a no-op. */
LT_API void lt_tf_data_free(lt_tf_data *D);

/* The training loader's batches per epoch, and its position (the trainer's
 * get_position / set_position hooks). */
LT_API int64_t lt_tf_data_batches_per_epoch(const lt_tf_data *D);
LT_API lt_loader_position lt_tf_data_get_position(const lt_tf_data *D);
LT_API lt_status lt_tf_data_set_position(lt_tf_data *D, lt_loader_position pos);

/* D in one line, as train prints it after "data: ": "GPL-3, 90000 training /
 * 10000 validation tokens, char tokenizer (vocab 90), context 128", or for
 * pairs "... examples, bpe tokenizer (vocab 1024)" (", classes" for
 * classification). Into buf (size bytes, terminated); returns buf. */
LT_API char *lt_tf_data_describe(const lt_tf_data *D, char *buf, size_t size);

/* What a checkpoint needs to rebuild D's vocabulary (config.h's keys): the
 * tokenizer (LT_TF_CKPT_TOKENIZER) and, for classification, the class labels
 * one per line in class-id order (LT_TF_CKPT_CLASSES), into extra
 * (borrowed; the trainer's save_extra hook). Errors: "saving the tokenizer:
 * ...", and those of lt_ckpt_meta_set_bytes. */
LT_API lt_status lt_tf_data_save_extra(const lt_tf_data *D, lt_ckpt_meta *extra);

/* The class id of label (classification), or -1. */
LT_API int64_t lt_tf_data_class_of(const lt_tf_data *D, const char *label);

/* The text of ids[0..n) up to the first <eos> (lt_tokenizer_special_ids), with newlines and tabs as
 * spaces (one line); "<undecodable>" if tok cannot decode them. Returns new
 * (free with free()), or NULL when out of memory. */
LT_API char *lt_tf_ids_text(const lt_tokenizer *tok, const int64_t *ids, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_DATA_H */
