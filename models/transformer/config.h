/*
 * models/transformer/config.h: the Transformer's configuration (lt_tf_config,
 * transformer.h) in words and in files: the names of its enums (train's
 * command line, checkpoints, messages) and the configuration as checkpoint
 * attributes, so that a checkpoint written by `train` rebuilds its model
 * without other input (docs/train.md lists the attributes).
 *
 * What this is not: the checkpoint format itself (checkpoint/), where a
 * model is loaded from (load.h), or the configuration's defaults and checks (lt_tf_config_default and
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
 *   pos:  "sinusoidal", "learned", "rope", "relative"
 *   act:  "relu", "gelu", "gelu_tanh", "silu"
 * The _name functions return a static string ("unknown" out of range); the
 * _parse functions accept the canonical name and fail with LT_ERR_INVALID
 * listing the accepted ones (LT_ERR_NULL for a NULL name; *out untouched).
 * lt_tf_arch_parse also accepts "encdec", "decoder" and "encoder". */
LT_API const char *lt_tf_arch_name(lt_tf_arch a);
LT_API const char *lt_tf_norm_name(lt_tf_norm n);
LT_API const char *lt_tf_pos_name(lt_tf_pos p);
LT_API const char *lt_tf_rope_type_name(lt_rope_type t); /* "default", "linear", "llama3" */
LT_API const char *lt_tf_act_name(lt_activation a);
LT_API lt_status lt_tf_arch_parse(const char *s, lt_tf_arch *out);
LT_API lt_status lt_tf_norm_parse(const char *s, lt_tf_norm *out);
LT_API lt_status lt_tf_pos_parse(const char *s, lt_tf_pos *out);
LT_API lt_status lt_tf_rope_type_parse(const char *s, lt_rope_type *out);
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

/* Keys of the values `train` saves in a checkpoint's /extra beside the
 * trainer's own (train/trainer.h: loader.*, run.*) and `generate` reads: one
 * home for both programs. */
#define LT_TF_CKPT_TOKENIZER "tokenizer" /* bytes: lt_tokenizer_serialize of the run's tokenizer */
#define LT_TF_CKPT_CLASSES "classes"     /* bytes: encoder-only class labels, one per line, in class-id order */
/* The prefix of train's checkpoint files (<prefix>-<step>.h5), by which a run
 * directory is searched for its newest checkpoint (lt_trainer_find_resume). */
#define LT_TF_CKPT_PREFIX "ckpt"

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_CONFIG_H */
