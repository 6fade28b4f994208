/*
 * models/transformer/hf_internal.h: what hf.c (the GPT-2 and Llama layouts,
 * the checked load and the export) shares with the files of the other
 * Hugging Face families (hf_bert.c, hf_t5.c), not installed: the piece
 * table, config.json's key readers (hf_keys.c) and each family's hooks.
 *
 * What this is not: a public header (hf.h is the contract).
 */
#ifndef LT_TF_HF_INTERNAL_H
#define LT_TF_HF_INTERNAL_H

#include <jansson.h>

#include "checkpoint/safetensors.h"
#include "models/transformer/hf.h"

#define LT__HF_NAME_LEN 256

/* A piece is one Hugging Face (or GGUF) tensor made of one or more
 * libtensor parameters (hf.c's header comment lists the ops; P_ROPE is
 * GGUF's: models/transformer/gguf_model.c). */
typedef enum { P_SAME, P_T, P_CAT_T, P_CAT, P_ROPE } piece_op;

typedef struct piece {
  char hf[LT__HF_NAME_LEN];
  piece_op op;
  int n;                  /* libtensor parameters (1, or 3 for q, k, v) */
  lt_tensor *src[3];      /* borrowed from the model's store */
  char lt[3][LT__HF_NAME_LEN];
  int64_t shape[2];       /* the Hugging Face tensor's shape */
  int ndim;
  int64_t heads;          /* P_ROPE: the heads whose rows are permuted */
} piece;

typedef struct pieces {
  piece *p;
  int n, cap;
} pieces;

/* Appends the piece hf made of the n parameters l0 (l1, l2) of params
 * (LT_ERR_INVALID when the model has no such parameter). */
lt_status lt__hf_add_piece(pieces *ps, lt_params *params, const char *hf, piece_op op, int n, const char *l0,
                           const char *l1, const char *l2);

/* The file's tensor of piece p, built from its parameters (returns new,
 * contiguous, the parameters' dtype). */
lt_tensor *lt__hf_piece_tensor(const piece *p);
/* Writes t (borrowed; the file's tensor of piece p, shape p->shape, any
 * float dtype) back into p's parameters: transposed, split or unpermuted as
 * p->op says. No autograd record. */
lt_status lt__hf_piece_store(const piece *p, const lt_tensor *t);
/* The JSON object (array: the array) in the file path (a regular file of at
 * most max_bytes; duplicate keys refused): *out a new reference, or NULL
 * with LT_ERR_IO / LT_ERR_FORMAT ("hf <what> '<path>': not a JSON object: ..."). */
lt_status lt__hf_read_json(const char *path, size_t max_bytes, const char *what, bool array, json_t **out);

/* ---- config.json's keys (hf_keys.c), for every family ----------------------- */
/* A reader of one config.json: the first failure is kept in s and every later
 * call does nothing, so a family reads its keys in a row and checks s once. */
typedef struct lt__hf_cfg {
  const char *path; /* the file, in messages */
  json_t *j;        /* borrowed */
  lt_status s;
} lt__hf_cfg;
/* An integer key (absent or null: *out unchanged, or LT_ERR_FORMAT when
 * required), in the range of the configuration field `field` of
 * LT_TF_CONFIG_RANGES (transformer.h: the table train's flags use), or NULL
 * for a key without one; the message names the file and the key. */
void lt__hf_get_int(lt__hf_cfg *r, const char *key, int64_t *out, bool required, const char *field);
/* A number key (absent or null: *out unchanged), in field's range (or NULL). */
void lt__hf_get_real(lt__hf_cfg *r, const char *key, double *out, const char *field);
/* A boolean key (absent or null: *out unchanged). */
void lt__hf_get_bool(lt__hf_cfg *r, const char *key, bool *out);
/* A string key (absent or null: def); the result borrows from r->j. */
const char *lt__hf_get_str(lt__hf_cfg *r, const char *key, const char *def);

/* ---- the weights: one file or shards (hf_weights.c) -------------------------- */
#define LT__HF_INDEX_MAX_BYTES (64u << 20) /* model.safetensors.index.json (a 400B model's is ~2 MB) */
#define LT__HF_MAX_SHARDS 4096
typedef struct lt__hf_weights {
  int n;               /* files (1 unless sharded) */
  lt_st_file **f;      /* owned */
  char **file;         /* each file's path (owned), for messages */
  char where[4096];    /* "<dir>/model.safetensors" or "<dir>/model.safetensors.index.json", for messages */
} lt__hf_weights;
typedef struct lt__hf_ref {
  int file, k; /* tensor k of file `file`; -1, -1: not found */
} lt__hf_ref;
/* Opens dir's weights: model.safetensors when it exists, else the shards of
 * model.safetensors.index.json, checked against the index (hf_weights.c's
 * opening comment lists the checks). On failure *w is empty (closing it is a
 * no-op) and the error names the file and the key, tensor or shard. */
lt_status lt__hf_weights_open(const char *dir, lt__hf_weights *w);
void lt__hf_weights_close(lt__hf_weights *w); /* NULL and an empty one are no-ops */
/* The tensor called name in whichever file holds it. */
lt__hf_ref lt__hf_weights_find(const lt__hf_weights *w, const char *name);

/* ---- BERT (hf_bert.c) ------------------------------------------------------- */
/* LT_OK when the (valid) encoder-only configuration c is BERT's layout, else
 * LT_ERR_INVALID naming the option that does not fit. */
lt_status lt__hf_bert_fits(const lt_tf_config *c);
/* The pieces of m's BERT layout, in Hugging Face's order ("bert." before the
 * encoder's names when the model has a classifier). */
lt_status lt__hf_bert_layout(lt_transformer *m, pieces *ps);
/* config.json's object for c (new reference; NULL when out of memory). */
json_t *lt__hf_bert_config_json(const lt_tf_config *c);
/* The configuration of config.json's object j (path names the file in
 * messages); validated and fitting the layout. *out untouched on failure. */
lt_status lt__hf_bert_read_config(json_t *j, const char *path, lt_tf_config *out);
/* Names a BERT file may hold besides the layout's (the position_ids buffer). */
bool lt__hf_bert_tolerated(const char *name);

/* ---- T5 (hf_t5.c) ------------------------------------------------------------ */
/* The same four hooks for the (valid) encoder-decoder configuration c:
 * T5ForConditionalGeneration's layout, v1.0 (ReLU, tied head) and v1.1
 * (gated GELU, untied). */
lt_status lt__hf_t5_fits(const lt_tf_config *c);
lt_status lt__hf_t5_layout(lt_transformer *m, pieces *ps);
json_t *lt__hf_t5_config_json(const lt_tf_config *c);
lt_status lt__hf_t5_read_config(json_t *j, const char *path, lt_tf_config *out);
/* Names a T5 file may hold besides the layout's (the stacks' embed_tokens, copies of shared). */
bool lt__hf_t5_tolerated(const char *name);

#endif /* LT_TF_HF_INTERNAL_H */
