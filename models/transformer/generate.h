/*
 * models/transformer/generate.h: using a trained Transformer, and keeping its
 * configuration in a checkpoint.
 *
 * What this is:
 *   - lt_tf_decode: the one decoding loop, for the encoder-decoder (source ->
 *     output) and the decoder-only model (prompt -> continuation), with three
 *     strategies (greedy; beam search with a length penalty; sampling with
 *     temperature, top-k and top-p from a generator), stopping at an end
 *     token or a maximum length, with or without the KV cache
 *     (lt_transformer_decode_step); docs/decoding.md;
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
 * The cached path (the default) feeds each new token through the decoder
 * once, reading the keys and values of earlier positions from per-layer
 * caches; the uncached path runs the decoder over the whole prefix at every
 * step (O(T^2) position forwards for T tokens). Both give the same tokens and
 * (up to rounding) the same scores; tests/test_decode.c checks it.
 *
 * What this is not: batched serving (rows of a batch start together: the
 * decoder-only prompts of one call share one length), speculative decoding,
 * or a sampler zoo (no repetition penalty, min-p, typical sampling).
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

typedef enum { LT_DECODE_GREEDY, LT_DECODE_BEAM, LT_DECODE_SAMPLE } lt_decode_strategy;

typedef struct lt_decode_opts {
  lt_decode_strategy strategy;
  int64_t max_new;        /* most tokens generated per row, <eos> included (>= 0) */
  int64_t beam_width;     /* beam: hypotheses kept per input, K >= 1 (1 = greedy) */
  double length_penalty;  /* beam: alpha >= 0; a hypothesis ranks by sum(log p) / len^alpha */
  double temperature;     /* sample: > 0; logits / temperature */
  int64_t top_k;          /* sample: keep the top_k most likely tokens (<= 0: all) */
  double top_p;           /* sample: then the smallest set of cumulative probability >= top_p, in (0, 1] */
  lt_generator *gen;      /* sample: one uniform draw per row per step (borrowed) */
  int64_t bos_id;         /* encoder-decoder: the decoder's first input (<bos> = 1) */
  int64_t eos_id;         /* a row stops after making it (<eos> = 2); -1: never stop early */
  int64_t pad_id;         /* fills a row after it stopped (<pad> = 0) */
  int64_t context;        /* decoder-only: positions seen per step (<= 0 or > max_len: max_len); see below */
  bool no_cache;          /* true: recompute the whole prefix each step (the reference path) */
} lt_decode_opts;
/* Greedy, max_new 64, beam_width 4, length_penalty 0.6, temperature 1,
 * top_k 0, top_p 1, gen NULL, bos 1, eos 2, pad 0 (the LT_TOKEN_* ids of
 * datasets/datasets.h), context 0, cache on. */
lt_decode_opts lt_decode_defaults(void);

/* What lt_tf_decode makes: each tensor new (scope-owned when a scope is open, like
 * every op); lt_decode_result_free releases them. */
typedef struct lt_decode_result {
  lt_tensor *tokens;   /* [B, L] i64: the generated tokens of each row (its <eos> included), then pad_id;
                          L is the longest row's length (L = 0 when max_new = 0) */
  lt_tensor *lengths;  /* [B] i64: tokens generated per row, <eos> included */
  lt_tensor *scores;   /* [B] f64: greedy and sample: the sum of log p(token) of the row's tokens under
                          the model (softmax of the raw logits, before temperature / top-k / top-p);
                          beam: that sum / length^alpha, the beam score the hypothesis won with */
} lt_decode_result;
void lt_decode_result_free(lt_decode_result *r); /* frees the tensors, sets them NULL; NULL is a no-op */

/* Decodes a batch:
 *   encoder-decoder: src [B, S] integer ids (src_pad [B, S] bool, true =
 *     padding, or NULL), prompt NULL; the decoder starts from bos_id and
 *     max_new <= max_len (the decoder's positions);
 *   decoder-only: prompt [B, P] integer ids (P >= 1, no padding: the rows of a
 *     call share one length), src and src_pad NULL. When prompt + output
 *     exceed `context` positions, each step sees the last `context` tokens
 *     with positions restarting at 0 (GPT-2's cropping); the cache is then
 *     rebuilt at every step, so it only speeds up the first `context`
 *     positions.
 * Strategies: greedy takes the argmax (ties: the lowest id). Beam search keeps
 * beam_width hypotheses per input; each step extends each by every token,
 * keeps the best beam_width running ones, and retires a hypothesis that ends
 * in eos (if its rank is below beam_width, as Hugging Face's BeamSearchScorer)
 * with score sum(log p) / len^length_penalty; an input is done when it has
 * beam_width finished hypotheses (early stopping) or at max_new (running
 * hypotheses then count as finished); the best finished one is returned
 * (beam_width 1 gives greedy's tokens). Sampling draws from softmax(logits /
 * temperature) restricted to top_k then top_p, by the inverse CDF of one
 * uniform number per row per step drawn from gen (lt_rand of [B] f64), so
 * the same generator state and inputs give the same output.
 * Runs under no-grad in evaluation mode. On failure *out is untouched (all
 * NULL). Errors: LT_ERR_NULL (model, out, the input, gen when sampling),
 * LT_ERR_INVALID (arch mismatch, an option out of range, ids outside the
 * vocabulary, max_new beyond the decoder's positions), LT_ERR_SHAPE /
 * LT_ERR_DTYPE (src, src_pad, prompt), and whatever the model reports. */
lt_status lt_tf_decode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                       const lt_tensor *prompt, const lt_decode_opts *opts, lt_decode_result *out);

/* The two calls below predate lt_tf_decode and are thin wrappers of it. */

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

/* Keys of the values `train` saves in a checkpoint's /extra beside the
 * trainer's own (train/trainer.h: loader.*, run.*) and `generate` reads: one
 * home for both programs. */
#define LT_TF_CKPT_TOKENIZER "tokenizer" /* bytes: lt_tokenizer_serialize of the run's tokenizer */
#define LT_TF_CKPT_CLASSES "classes"     /* bytes: encoder-only class labels, one per line, in class-id order */

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_GENERATE_H */
