/*
 * models/transformer/load.h: where a Transformer comes from. One entry,
 * lt_tf_load, reads a model (and its tokenizer, when the source holds one)
 * from any of the three places a model lives:
 *   a checkpoint of train  a ckpt-*.h5 training state, a run directory (its
 *                          newest valid checkpoint, as train --resume), or a
 *                          model-only checkpoint (lt_ckpt_save_params): the
 *                          configuration from its attributes (config.h), the
 *                          tokenizer from its extra value "tokenizer";
 *   a Hugging Face directory  config.json and model.safetensors (hf.h), the
 *                          tokenizer from libtensor-tokenizer.bin, else the
 *                          directory's tokenizer.json;
 *   a GGUF file            llama.cpp's format (gguf_model.h), the tokenizer
 *                          from its tokenizer keys.
 * The programs (train --init-from, generate, export, embed) call these and
 * nothing else to find a model. A new run's starting point, whose model the
 * run builds itself (train --init-from), is read in two steps:
 * lt_tf_source_read, then lt_tf_source_load_weights once the model is built.
 *
 * What this is not: the formats themselves (checkpoint/, hf.h, gguf_model.h)
 * or the configuration's names and attributes (config.h).
 *
 * Conventions are those of tensor/tensor.h (errors, ownership words).
 */
#ifndef LT_TF_LOAD_H
#define LT_TF_LOAD_H

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a loaded model came from. */
typedef enum lt_tf_origin {
  LT_TF_FROM_CHECKPOINT, /* a checkpoint of train (or a model-only checkpoint) */
  LT_TF_FROM_HF,         /* a Hugging Face directory */
  LT_TF_FROM_GGUF,       /* a GGUF file */
} lt_tf_origin;

/* "checkpoint", "hf", "gguf" ("unknown" out of range; static). */
LT_API const char *lt_tf_origin_name(lt_tf_origin o);

/* How lt_tf_load reads. */
typedef struct lt_tf_load_opts {
  lt_ckpt_load_opts ckpt; /* max_bytes caps the model's memory for every origin (0: no cap);
                             allow_unchecksummed is a checkpoint's (non_strict is ignored: every
                             parameter loads strictly) */
  bool model_only;        /* a checkpoint may be model-only (lt_ckpt_save_params, no training state);
                             without it such a file is refused, the message saying "holds a model only" */
  bool hf_dirs;           /* a Hugging Face directory is read as one (without it, as a run directory) */
  bool gguf;              /* a GGUF file is read as one (without it, as a checkpoint) */
} lt_tf_load_opts;

/* Every origin, a model-only checkpoint too, no memory cap beyond the checkpoint defaults. */
#define LT_TF_LOAD_DEFAULTS \
  ((lt_tf_load_opts){.ckpt = LT_CKPT_LOAD_DEFAULTS, .model_only = true, .hf_dirs = true, .gguf = true})

/* What lt_tf_load read: every pointer owned by it (lt_tf_loaded_free). */
typedef struct lt_tf_loaded {
  lt_tf_origin origin;
  char path[4096];       /* what was read: the file, the directory, or a run directory's newest checkpoint */
  lt_transformer *model; /* new */
  lt_tokenizer *tok;     /* new, or NULL when the source holds no tokenizer */
  lt_ckpt_info *info;    /* a checkpoint's configuration and extra values (info->training: a training
                            state); NULL for the other origins */
} lt_tf_loaded;

/* Reads the model at path (a checkpoint, a run directory, a Hugging Face
 * directory or a GGUF file; above) into *out. The configuration and the
 * model's size (against the file and opts->ckpt.max_bytes) are checked
 * before anything is built, the tokenizer is read before the weights (a
 * checkpoint's must have exactly the model's vocabulary; a Hugging Face
 * directory's or a GGUF file's is returned as the source holds it, and a
 * caller that decodes checks its ids: generate refuses more ids than the
 * embedding has rows, embed a text whose ids do not fit), and every
 * parameter loads strictly. opts may be NULL (LT_TF_LOAD_DEFAULTS). On
 * failure *out is zeroed, nothing needs freeing, and the message names the
 * path (errors of lt_trainer_find_resume, lt_ckpt_load_training,
 * lt_tf_config_from_meta, lt_hf_load, lt_tf_gguf_load, the tokenizer's
 * readers; LT_ERR_FORMAT for a model-only checkpoint without
 * opts->model_only, or a tokenizer that does not fit the model). */
LT_API lt_status lt_tf_load(const char *path, const lt_tf_load_opts *opts, lt_tf_loaded *out);

/* Frees what l holds and zeroes it (a zeroed or NULL l is a no-op). */
LT_API void lt_tf_loaded_free(lt_tf_loaded *l);

/* ---- the steps, for callers that build the model themselves --------------- */

/* The model of configuration cfg (borrowed; e.g. from lt_tf_config_from_meta
 * of the checkpoint's info, size already checked with
 * lt_ckpt_check_model_size) with every parameter loaded strictly from the
 * checkpoint path (lt_ckpt_load_params; opts may be NULL, its non_strict is
 * ignored). Returns new (free with lt_transformer_free), or NULL with the
 * error set, its message naming path. */
LT_API lt_transformer *lt_tf_load_model(const char *path, const lt_tf_config *cfg, const lt_ckpt_load_opts *opts);

/* The configuration and extra values of the checkpoint at path, without its
 * parameters: a training state (*step, if not NULL, gets its step), or with
 * allow_model_only also a model-only file (step 0). opts may be NULL; its
 * non_strict is ignored. *info: new (free with lt_ckpt_info_free), NULL on
 * failure, with the loader's message. */
LT_API lt_status lt_tf_read_checkpoint_info(const char *path, const lt_ckpt_load_opts *opts, bool allow_model_only,
                                            lt_ckpt_info **info, int64_t *step);

/* Where a new run may start from (train --init-from): a Hugging Face
 * directory (hf.h; its tokenizer file if there is one), a run directory
 * (its newest valid checkpoint of prefix, lt_trainer_find_resume) or a
 * checkpoint file (its tokenizer, if it holds one). file (size bytes)
 * receives the path the weights are read from later (lt_tf_source_load_weights);
 * *cfg the model configuration; *tok the tokenizer (new, free with
 * lt_tokenizer_free) or NULL if the source has none. The checkpoint's *info
 * (new, free with lt_ckpt_info_free; NULL for a Hugging Face directory)
 * serves the size check (lt_ckpt_check_model_size). On failure nothing is
 * returned that needs freeing. */
LT_API lt_status lt_tf_source_read(const char *path, const char *prefix, const lt_ckpt_load_opts *opts, char *file,
                                   size_t size, lt_tf_config *cfg, lt_tokenizer **tok, lt_ckpt_info **info);
/* Loads the weights of the source that lt_tf_source_read resolved (file) into
 * m, every tensor strictly. */
LT_API lt_status lt_tf_source_load_weights(const char *file, lt_transformer *m, const lt_ckpt_load_opts *opts);

/* A new classification head on a pretrained encoder (train --init-from a
 * BertModel directory such as all-MiniLM-L6-v2, or any encoder without a
 * classifier): m is an encoder-only model with n_classes > 0 whose
 * configuration is the source's but for n_classes (0 in the source). Every
 * tensor of the source loads strictly (lt_tf_source_load_weights into a
 * model of the source's configuration, then copied by name); m's
 * classifier.{weight,bias} keep the initialisation m was built with (as
 * BertForSequenceClassification.from_pretrained gives a BertModel
 * checkpoint a new head). Needs the source's memory once more while it
 * runs. Errors: LT_ERR_INVALID (m not such a model), the loader's. */
LT_API lt_status lt_tf_source_load_encoder(const char *file, lt_transformer *m, const lt_ckpt_load_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_LOAD_H */
