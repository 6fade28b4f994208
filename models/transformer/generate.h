/*
 * models/transformer/generate.h: using a trained Transformer, and keeping its
 * configuration in a checkpoint.
 *
 * What this is:
 *   - greedy decoding for the encoder-decoder (lt_tf_greedy_decode): the
 *     output of a seq2seq model for a batch of sources, used by
 *     models/transformer/train for validation exact match and for the decoded
 *     examples it prints;
 *   - continuation of a prompt for the decoder-only model (lt_tf_generate),
 *     greedy or sampled with a temperature and top-k;
 *   - names of the configuration's enums and the configuration as checkpoint
 *     attributes (lt_tf_config_to_meta / lt_tf_config_from_meta), so that a
 *     checkpoint written by `train` rebuilds its model without other input.
 *
 * What this is not: fast inference. Decoding here is uncached: every new
 * token runs the decoder over the whole prefix again (O(T^2) position
 * forwards for T tokens). A KV cache is a later task; the results will not
 * change, only the speed.
 *
 * Conventions are those of tensor/tensor.h (errors, ownership words). Every
 * function here runs under no-grad and in evaluation mode (no dropout), and
 * leaves the grad mode as it found it. Shapes: B batch, S source length,
 * P prompt length, L generated length, V vocabulary.
 */
#ifndef LT_TF_GENERATE_H
#define LT_TF_GENERATE_H

#include "checkpoint/checkpoint.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- decoding ------------------------------------------------------------ */

/* Greedy decoding with an encoder-decoder model: src [B, S] integer ids,
 * src_pad [B, S] bool (true = padding) or NULL. The decoder starts from
 * bos_id and appends the argmax token each step (ties to the lowest id),
 * until every row has produced eos_id or max_new tokens were made (max_new is
 * capped at the model's max_len). Returns new [B, L] i64 (1 <= L <= max_new):
 * row b holds its tokens after <bos>, up to and including its first eos_id,
 * then pad_id. Errors: LT_ERR_NULL, LT_ERR_INVALID (not an encoder-decoder,
 * max_new < 1, ids outside the vocabulary), LT_ERR_SHAPE / LT_ERR_DTYPE for
 * src and src_pad, and whatever the model's forward reports. */
lt_tensor *lt_tf_greedy_decode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                               int64_t max_new, int64_t bos_id, int64_t eos_id, int64_t pad_id);

/* Continues prompt [B, P] (integer ids, P >= 1, no padding) of a
 * decoder-only model by n_new >= 0 tokens. Each step feeds the last
 * min(length, context) tokens (positions restart at 0 in the window, as
 * GPT-2 generation crops its context; context <= 0 or beyond the model's
 * max_len means max_len; a model trained on shorter sequences should be given
 * its training length, since later positions were never trained) and picks
 * the next token from the
 * logits of the last position: the argmax when temperature <= 0 (g may be
 * NULL), else a draw from softmax(logits / temperature) restricted to the
 * top_k most likely tokens (top_k <= 0: all), using one uniform number per
 * row from g (so the same generator state gives the same text). Returns new
 * [B, P + n_new] i64: the prompt followed by the new tokens. */
lt_tensor *lt_tf_generate(const lt_transformer *m, const lt_tensor *prompt, int64_t n_new, int64_t context,
                          double temperature, int64_t top_k, lt_generator *g);

/* ---- names of the configuration's enums ------------------------------------ */
/* Canonical names (used on train's command line and in checkpoints):
 *   arch: "encoder-decoder", "decoder-only", "encoder-only"
 *   norm: "layernorm", "rmsnorm"
 *   pos:  "sinusoidal", "learned", "rope"
 *   act:  "relu", "gelu", "gelu_tanh", "silu"
 * The _name functions return a static string ("unknown" out of range); the
 * _parse functions accept the canonical name and fail with LT_ERR_INVALID
 * listing the accepted ones (*out untouched). lt_tf_arch_parse also accepts
 * "encdec", "decoder" and "encoder". */
const char *lt_tf_arch_name(lt_tf_arch a);
const char *lt_tf_norm_name(lt_tf_norm n);
const char *lt_tf_pos_name(lt_tf_pos p);
const char *lt_tf_act_name(lt_activation a);
lt_status lt_tf_arch_parse(const char *s, lt_tf_arch *out);
lt_status lt_tf_norm_parse(const char *s, lt_tf_norm *out);
lt_status lt_tf_pos_parse(const char *s, lt_tf_pos *out);
lt_status lt_tf_act_parse(const char *s, lt_activation *out);

/* ---- the configuration in a checkpoint ------------------------------------- */
/* One entry per lt_tf_config field, keyed by the field's name: the enums as
 * strings (names above), the bools as int 0/1, sizes as int, dropout,
 * norm_eps and rope_base as double. These become the attributes of /model in
 * a checkpoint (docs/train.md lists them). */
lt_status lt_tf_config_to_meta(const lt_tf_config *cfg, lt_ckpt_meta *meta);
/* Reads every field back; a missing key or one of the wrong kind is
 * LT_ERR_FORMAT naming it, and the result must pass lt_tf_config_validate.
 * On failure *cfg is untouched. */
lt_status lt_tf_config_from_meta(const lt_ckpt_meta *meta, lt_tf_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_GENERATE_H */
