/*
 * models/transformer/generate.h: generating with a trained Transformer: the
 * Transformer as an lt_generate_model (generate/generate.h), for the
 * encoder-decoder (source -> output) and the decoder-only model (prompt ->
 * continuation), with or without the KV cache (lt_transformer_decode_step).
 * The strategies (greedy, beam search, sampling) and the stops are
 * lt_generate's; this file adds what is the Transformer's own: the encoder
 * run once per batch, the decoder's first input (<bos>), the cache (filled,
 * extended one column per step, reordered for beam search) and the context
 * window of the decoder-only model. docs/decoding.md.
 *
 * The cached path (the default) feeds each new token through the decoder
 * once, reading the keys and values of earlier positions from per-layer
 * caches; the uncached path runs the decoder over the whole prefix at every
 * step (O(T^2) position forwards for T tokens). Both give the same tokens and
 * (up to rounding) the same scores; tests/test_decode.c checks it.
 *
 * What this is not: batched serving (the decoder-only prompts of one call
 * share one length), or the encoder-only model (it classifies:
 * lt_transformer_classify).
 *
 * Conventions are those of tensor/tensor.h (errors, ownership words). Shapes:
 * B batch, S source length, P prompt length, L generated length, V vocabulary.
 */
#ifndef LT_TF_GENERATE_H
#define LT_TF_GENERATE_H

#include "generate/generate.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What only the Transformer needs, beside lt_generate_opts. */
typedef struct lt_tf_generate_opts {
  int64_t bos_id;   /* encoder-decoder: the decoder's first input (<bos> = 1); in [0, V) */
  int64_t context;  /* decoder-only: positions seen per step (<= 0 or > max_len: max_len); see below */
  bool no_cache;    /* true: recompute the whole prefix each step (the reference path) */
} lt_tf_generate_opts;
/* bos 1 (LT_TOKEN_BOS of datasets/datasets.h), context 0, cache on. */
LT_API lt_tf_generate_opts lt_tf_generate_defaults(void);

/* Generates for a batch with lt_generate (opts: the strategy and the stops,
 * NULL for lt_generate_defaults(); tf: NULL for lt_tf_generate_defaults()):
 *   encoder-decoder: src [B, S] integer ids (src_pad [B, S] bool, true =
 *     padding, or NULL), prompt NULL; the decoder starts from tf->bos_id and
 *     opts->max_new <= max_len (the decoder's positions);
 *   decoder-only: prompt [B, P] integer ids (P >= 1, no padding: the rows of a
 *     call share one length), src and src_pad NULL. When prompt + output
 *     exceed `context` positions, each step sees the last `context` tokens
 *     with positions restarting at 0 (GPT-2's cropping); the cache is then
 *     rebuilt at every step, so it only speeds up the first `context`
 *     positions.
 * out as lt_generate's: tokens [B, L] after <bos> or after the prompt (the
 * prompt is not repeated), lengths [B], scores [B].
 * Runs under no-grad in evaluation mode (no dropout) and leaves the grad mode
 * as it found it. On failure *out is untouched (all NULL). Errors:
 * LT_ERR_NULL (model, out, the input), LT_ERR_INVALID (an encoder-only model,
 * src given to a decoder-only model or prompt to an encoder-decoder, bos_id
 * outside the vocabulary, a source longer than max_len, max_new beyond the
 * decoder's positions), LT_ERR_SHAPE / LT_ERR_DTYPE (src, src_pad, prompt),
 * lt_generate's errors (options, prompt ids outside the vocabulary), and
 * whatever the model reports (LT_ERR_INDEX for a source id outside the
 * vocabulary, from the embedding). */
LT_API lt_status lt_transformer_generate(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                  const lt_tensor *prompt, const lt_generate_opts *opts,
                                  const lt_tf_generate_opts *tf, lt_generate_result *out);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_GENERATE_H */
