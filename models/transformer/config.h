/*
 * models/transformer/config.h: the Transformer's configuration (lt_tf_config,
 * transformer.h) in words and in files: the names of its enums (train's
 * command line, checkpoints, messages) and the configuration as checkpoint
 * attributes, so that a checkpoint written by `train` rebuilds its model
 * without other input (docs/train.md lists the attributes).
 *
 * What this is not: the checkpoint format itself (checkpoint/), or the
 * configuration's defaults and checks (lt_tf_config_default and
 * lt_tf_config_validate, transformer.h).
 *
 * Conventions are those of tensor/tensor.h (errors, ownership words).
 */
#ifndef LT_TF_CONFIG_H
#define LT_TF_CONFIG_H

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- names of the configuration's enums ------------------------------------ */
/* Canonical names (used on train's command line and in checkpoints):
 *   arch: "encoder-decoder", "decoder-only", "encoder-only"
 *   norm: "layernorm", "rmsnorm"
 *   pos:  "sinusoidal", "learned", "rope"
 *   act:  "relu", "gelu", "gelu_tanh", "silu"
 * The _name functions return a static string ("unknown" out of range); the
 * _parse functions accept the canonical name and fail with LT_ERR_INVALID
 * listing the accepted ones (LT_ERR_NULL for a NULL name; *out untouched).
 * lt_tf_arch_parse also accepts "encdec", "decoder" and "encoder". */
LT_API const char *lt_tf_arch_name(lt_tf_arch a);
LT_API const char *lt_tf_norm_name(lt_tf_norm n);
LT_API const char *lt_tf_pos_name(lt_tf_pos p);
LT_API const char *lt_tf_act_name(lt_activation a);
LT_API lt_status lt_tf_arch_parse(const char *s, lt_tf_arch *out);
LT_API lt_status lt_tf_norm_parse(const char *s, lt_tf_norm *out);
LT_API lt_status lt_tf_pos_parse(const char *s, lt_tf_pos *out);
LT_API lt_status lt_tf_act_parse(const char *s, lt_activation *out);

/* cfg in one line, as train prints it after "model: ": "encoder-decoder,
 * 1.23M parameters (d_model 128, 4 heads, 2+2 layers, d_ff 512, pre-norm
 * layernorm relu, sinusoidal positions, dropout 0)"; n_params is the
 * model's parameter count. Into buf (size bytes, terminated); returns buf. */
LT_API char *lt_tf_config_describe(const lt_tf_config *cfg, int64_t n_params, char *buf, size_t size);

/* ---- the configuration in a checkpoint ------------------------------------- */
/* One entry per lt_tf_config field, keyed by the field's name: the enums as
 * strings (names above), the bools as int 0/1, sizes as int, dropout,
 * norm_eps and rope_base as double. These become the attributes of /model in
 * a checkpoint (docs/train.md lists them). cfg and meta are borrowed; meta
 * gets the entries (a key already there is replaced). Errors: LT_ERR_NULL,
 * and what lt_ckpt_meta_set_* reports. */
LT_API lt_status lt_tf_config_to_meta(const lt_tf_config *cfg, lt_ckpt_meta *meta);
/* Reads every field back; a missing key or one of the wrong kind is
 * LT_ERR_FORMAT naming it, and the result must pass lt_tf_config_validate.
 * On failure *cfg is untouched. */
LT_API lt_status lt_tf_config_from_meta(const lt_ckpt_meta *meta, lt_tf_config *cfg);

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

/* Keys of the values `train` saves in a checkpoint's /extra beside the
 * trainer's own (train/trainer.h: loader.*, run.*) and `generate` reads: one
 * home for both programs. */
#define LT_TF_CKPT_TOKENIZER "tokenizer" /* bytes: lt_tokenizer_serialize of the run's tokenizer */
#define LT_TF_CKPT_CLASSES "classes"     /* bytes: encoder-only class labels, one per line, in class-id order */

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_CONFIG_H */
