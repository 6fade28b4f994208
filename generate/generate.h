/*
 * generate/generate.h: autoregressive generation for any model that gives
 * next-token logits: greedy, beam search with a length penalty, and sampling
 * with temperature, top-k and top-p from an lt_generator, stopping at an end
 * token or a maximum length. docs/decoding.md describes the algorithms and
 * how a model plugs in.
 *
 * The model is a small callbacks struct (lt_generate_model): given the
 * prefixes of a batch of rows, it returns the logits of each row's next
 * token (reading its own cache, if it keeps one), and, for beam search, it
 * reorders its per-row state when beams are chosen. lt_generate owns the
 * loop: the rows' token buffers, the choice of tokens, the beams and their
 * hypotheses, the stops, and the result. Every strategy is written once,
 * here; a model's wrapper (e.g. lt_transformer_generate in
 * models/transformer/generate.h) only prepares the prefixes and its state.
 *
 * What this is not: a batched server (the rows of a call start together and
 * share a prefix length), speculative decoding, constrained decoding, or a
 * sampler zoo (no repetition penalty, min-p, typical sampling).
 *
 * Conventions are those of tensor/tensor.h (errors, ownership words).
 * Shapes: B inputs, K beams per input (beam_width for beam search, else 1),
 * R = B x K rows, P prefix length, L generated length, V vocabulary.
 */
#ifndef LT_GENERATE_H
#define LT_GENERATE_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_GENERATE_GREEDY, LT_GENERATE_BEAM, LT_GENERATE_SAMPLE } lt_generate_strategy;
/* Names: "greedy", "beam", "sample" (the one table for files and command
 * lines). _name returns a static string ("unknown" out of range); _parse sets
 * *out from a name or fails with LT_ERR_INVALID listing the names (LT_ERR_NULL
 * for a NULL s), *out untouched. */
LT_API const char *lt_generate_strategy_name(lt_generate_strategy strategy);
LT_API lt_status lt_generate_strategy_parse(const char *s, lt_generate_strategy *out);

/* How to pick tokens and when to stop (the same for every model). */
typedef struct lt_generate_opts {
  lt_generate_strategy strategy;
  int64_t max_new;        /* most tokens generated per row, <eos> included (>= 0) */
  int64_t beam_width;     /* beam: hypotheses kept per input, K in [1, 1024] (1 = greedy) */
  double length_penalty;  /* beam: alpha >= 0; a hypothesis ranks by sum(log p) / len^alpha */
  double temperature;     /* sample: > 0; logits / temperature */
  int64_t top_k;          /* sample: keep the top_k most likely tokens (<= 0: all) */
  double top_p;           /* sample: then the smallest set of cumulative probability >= top_p, in (0, 1] */
  lt_generator *gen;      /* sample: one uniform draw per row per step (borrowed) */
  int64_t eos_id;         /* a row stops after making it (<eos> = 2); -1: never stop early */
  int64_t pad_id;         /* fills a row after it stopped (<pad> = 0) */
} lt_generate_opts;
/* Greedy, max_new 64, beam_width 4, length_penalty 0.6, temperature 1,
 * top_k 0, top_p 1, gen NULL, eos 2, pad 0 (the LT_TOKEN_* ids of
 * datasets/datasets.h). */
LT_API lt_generate_opts lt_generate_defaults(void);

/* What lt_generate makes: each tensor new (scope-owned when a scope is open,
 * like every op); lt_generate_result_free releases them. */
typedef struct lt_generate_result {
  lt_tensor *tokens;   /* [B, L] i64: the generated tokens of each input (its <eos> included), then pad_id;
                          L is the longest input's length (L = 0 when max_new = 0) */
  lt_tensor *lengths;  /* [B] i64: tokens generated per input, <eos> included */
  lt_tensor *scores;   /* [B] f64: greedy and sample: the sum of log p(token) of the input's tokens under
                          the model (log-softmax of the raw logits, before temperature / top-k / top-p);
                          beam: that sum / length^alpha, the beam score the hypothesis won with */
} lt_generate_result;
LT_API void lt_generate_result_free(lt_generate_result *r); /* frees the tensors, sets them NULL; NULL is a no-op */

/* A model, seen by the generation loop. lt_generate borrows the struct and
 * self for the call; the callbacks are called from the calling thread, in
 * order, under no-grad.
 *
 * Rows: the loop works on R = B x K rows, input-major (row r belongs to input
 * r / K). Every row of a call has the same number of ids n; the first call
 * has n = P (the prefixes given to lt_generate, each repeated K times), and
 * each later call one more column: the token picked for every row at the
 * previous call (pad_id for a row that has stopped), after the rows were
 * reordered (beam search) if they were.
 *
 * next_logits(self, ids, stride, R, n): row r's ids are ids[r * stride + 0 ..
 *   n - 1] (borrowed for the call). Returns the logits of every row's next
 *   token, [R, V] f32 or f64 (any strides), or NULL with the error set by
 *   the library call that failed (the loop stops and returns that status;
 *   lt_generate clears the pending error before each call, so a NULL with no
 *   error set is told apart: LT_ERR_INVALID). It is called inside an lt_scope
 *   that the loop ends once it has read the logits, so the result and the
 *   call's intermediates may be left to the scope. A model with a cache
 *   feeds only the columns it has not seen; a model without one recomputes
 *   from all n ids.
 * reorder(self, rows, R): beam search only, when the beams moved: row i of
 *   the model's per-row state becomes old row rows[i] (rows borrowed for
 *   the call; rows[i] always belongs to the same input as i). Not called
 *   when no row moved. NULL when the model keeps no per-row state. On
 *   failure the loop stops and returns the status. */
typedef struct lt_generate_model {
  void *self;          /* the model's state, passed back to every callback (borrowed) */
  int64_t vocab_size;  /* V >= 1: the logits' last dimension, and the range of every id */
  lt_tensor *(*next_logits)(void *self, const int64_t *ids, int64_t stride, int64_t R, int64_t n);
  lt_status (*reorder)(void *self, const int64_t *rows, int64_t R);
} lt_generate_model;

/* Generates a continuation of each row of prefix [B, P] (i32/i64 ids in
 * [0, V), B, P >= 1: what the model conditions on first, e.g. <bos> or a
 * prompt) under opts (NULL: lt_generate_defaults()).
 * Strategies: greedy takes the argmax of the logits (ties: the lowest id).
 * Beam search keeps beam_width hypotheses per input; each step extends each
 * by every token, keeps the best beam_width running ones, and retires a
 * hypothesis that ends in eos (if its rank is below beam_width, as Hugging
 * Face's BeamSearchScorer) with score sum(log p) / len^length_penalty; an
 * input is done when it has beam_width finished hypotheses (early stopping)
 * or at max_new (running hypotheses then count as finished); the best
 * finished one is returned (beam_width 1 gives greedy's tokens). Sampling
 * draws from softmax(logits / temperature) restricted to top_k then top_p, by
 * the inverse CDF of one uniform number per row per step drawn from gen
 * (lt_rand of [R] f64), so the same generator state and inputs give the same
 * output. log p is the log-softmax (lt_log_softmax, in f64) of the logits.
 * Runs under no-grad and leaves the grad mode as it found it. On failure
 * *out is untouched (all NULL). Errors: LT_ERR_NULL (model or its
 * next_logits, prefix, out, gen when sampling), LT_ERR_INVALID (an option out
 * of range, ids outside the vocabulary, vocab_size < 1, logits not [R, V]),
 * LT_ERR_SHAPE / LT_ERR_DTYPE (prefix), LT_ERR_NOMEM, and whatever the
 * callbacks report. */
LT_API lt_status lt_generate(const lt_generate_model *model, const lt_tensor *prefix, const lt_generate_opts *opts,
                      lt_generate_result *out);

#ifdef __cplusplus
}
#endif
#endif /* LT_GENERATE_H */
