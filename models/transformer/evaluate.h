/*
 * models/transformer/evaluate.h: the validation of a Transformer on the
 * held-out part of its training data (data.h), and the decoded examples a
 * run shows at its end:
 *   - loss (mean cross-entropy per target token, no label smoothing) and
 *     token accuracy (teacher-forced argmax), on every held-out example;
 *   - sequence to sequence: exact match of greedy decoding on the first N
 *     (the text equal to the reference's: BPE may spell a text several ways);
 *   - classification: accuracy; language modelling: chunks of seq_len, over
 *     the ranks of a data-parallel run (each rank its share, sums reduced).
 * Each checks lt_trainer_stop_requested() between batches (train/trainer.h)
 * and reports an evaluation cut short.
 *
 * What this is not: the training loop's evaluate hook (train's program wraps
 * lt_tf_evaluate in one), or a benchmark of generation (generate.h).
 *
 * Conventions are those of tensor/tensor.h; nothing here exits. Only
 * lt_tf_print_examples prints, to the stream it is given.
 */
#ifndef LT_TF_EVALUATE_H
#define LT_TF_EVALUATE_H

#include <stdio.h>

#include "generate/generate.h"
#include "models/transformer/data.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lt_tf_eval_result {
  double loss;                /* mean cross-entropy per target token (no label smoothing); NAN if none */
  double token_acc;           /* teacher-forced argmax accuracy; NAN if none */
  int64_t n_exact, n_decoded; /* exact match by greedy decoding (classification: accuracy) */
  double seconds;             /* wall time */
  bool interrupted;           /* a stop request cut it short */
} lt_tf_eval_result;

/* Validates model (borrowed) on D's held-out part in batches of batch
 * examples (LM: windows of D->seq_len), with gradients off: loss and token
 * accuracy on all of it, and for seq2seq exact match on the first n_exact
 * examples (0: none). out (may be NULL) receives the decoded text of each
 * example i < n_out among them: new strings (free with free()) in out[i].
 * Fills *E; errors name the stage ("validation forward", "greedy decoding",
 * ...). With N ranks (mpirun) it must be called on every rank: each takes
 * every N-th batch and the sums are reduced; out gets every example on rank 0. */
LT_API lt_status lt_tf_evaluate(lt_transformer *model, const lt_tf_data *D, int64_t batch, int64_t n_exact, char **out,
                         int64_t n_out, lt_tf_eval_result *E);

/* The text of an evaluation: "loss 1.2345 (ppl 3.44), token accuracy
 * 81.00%, exact match 50.00% (100/200)" (classification: "loss ...,
 * accuracy ..."), into buf (size bytes, terminated). */
LT_API void lt_tf_eval_text(const lt_tf_data *D, const lt_tf_eval_result *E, char *buf, size_t size);

/* The examples printed at the end of a run. For LM: a continuation of
 * prompt (NULL: the first 32 validation tokens) of max_new tokens, sampled
 * at temperature with top_k from gen (temperature 0: greedy), the model's
 * context limited to D->seq_len. For pairs: the first n distinct sources
 * among the first n * LT_TF_EXAMPLE_POOL validation examples with the
 * model's output (outputs[i], decoded by lt_tf_evaluate; classification:
 * predicted here) and, for a miss, the reference. */
enum { LT_TF_EXAMPLE_POOL = 4 };
typedef struct lt_tf_examples_opts {
  int64_t n;          /* pairs: examples shown (0: none) */
  char *const *outputs; /* pairs: decoded outputs [n * LT_TF_EXAMPLE_POOL], entries may be NULL ("?") */
  const char *prompt; /* LM */
  int64_t max_new;    /* LM: tokens generated */
  double temperature; /* LM: 0 greedy */
  int64_t top_k;      /* LM: 0 all */
  lt_generator *gen;  /* LM: sampling draws (borrowed) */
} lt_tf_examples_opts;
/* Prints them to f. LT_ERR_INVALID "--prompt is empty" for a prompt of no
 * tokens; other errors name the stage. */
LT_API lt_status lt_tf_print_examples(FILE *f, lt_transformer *model, const lt_tf_data *D, const lt_tf_examples_opts *o);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_EVALUATE_H */
