/*
 * models/transformer/lm_eval.h: how well a decoder-only Transformer predicts
 * text it did not train on:
 *   - perplexity of a token sequence of any length, in windows that move by
 *     a stride, as Hugging Face's perplexity recipe ("Perplexity of
 *     fixed-length models", huggingface.co/docs/transformers/perplexity);
 *   - multiple-choice scoring in HellaSwag's format (a context, its possible
 *     endings, the label of the right one; rowanz/hellaswag's JSON Lines): each
 *     ending is scored by the mean loss of its tokens given the context, the
 *     lowest wins (llm.c's dev/data/hellaswag.py, "acc_norm").
 * The evaluate program (programs/evaluate_main.c) prints both for any model
 * lt_tf_load reads; validation loss on token shards is train/trainer.h's
 * lt_trainer_lm_evaluate.
 *
 * What this is not: the validation of a training run on its held-out split
 * (evaluate.h), or a benchmark harness with few-shot prompts.
 *
 * Conventions are those of tensor/tensor.h; nothing here exits or prints.
 */
#ifndef LT_TF_LM_EVAL_H
#define LT_TF_LM_EVAL_H

#include "datasets/datasets.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- perplexity ------------------------------------------------------------ */

typedef struct lt_tf_ppl_opts {
  int64_t window; /* W: tokens per window (HF's max_length), 2 <= W <= max_len + 1; 0: the model's max_len */
  int64_t stride; /* S: how far each window moves, 1 <= S <= W; 0: W (windows side by side) */
} lt_tf_ppl_opts;

typedef struct lt_tf_ppl_result {
  double nll_sum;    /* summed negative log-likelihood of the scored tokens (nats) */
  int64_t n_scored;  /* tokens scored */
  int64_t n_windows; /* forward passes */
  double loss;       /* nll_sum / n_scored: mean cross-entropy per scored token */
  double perplexity; /* exp(loss) */
} lt_tf_ppl_result;

/* The perplexity of ids[0..n) (n >= 2 token ids of m's vocabulary) under
 * the decoder-only model m (borrowed), gradients off. Windows [b, e) start
 * at b = 0, S, 2S, ... with e = min(b + W, n), the last one the first that
 * reaches n; window k predicts only the tokens the windows before it did not
 * (positions [max(e_{k-1}, b + 1), e)), from up to W - 1 tokens before each:
 * HF's recipe with its labels set to -100 before the last e - e_{k-1}. With S
 * = W a window's first token is predicted by no window (as in HF's recipe);
 * with S < W every token after the first is scored exactly once. Each
 * window is one forward of its first e - b - 1 tokens, through the chunked
 * head (lt_transformer_decode_loss: no [T, V] logits). opts NULL: {0, 0}.
 * Fills *out. Errors: LT_ERR_NULL; LT_ERR_INVALID (not decoder-only, n < 2,
 * W or S out of range, naming it); LT_ERR_INDEX naming the position of an id
 * outside [0, vocab_size); the forward's errors. */
LT_API lt_status lt_tf_perplexity(const lt_transformer *m, const int64_t *ids, int64_t n, const lt_tf_ppl_opts *opts,
                                  lt_tf_ppl_result *out);

/* ---- multiple choice (HellaSwag's JSON Lines) ------------------------------ */

/* The bounds of a multiple-choice file, checked while it is read. */
#define LT_TF_MC_MAX_LINE ((size_t)1 << 20) /* bytes in one line */
#define LT_TF_MC_MAX_ENDINGS 64             /* endings of one item (HellaSwag has 4) */
#define LT_TF_MC_MAX_ITEMS ((int64_t)1 << 24)

typedef struct lt_tf_mc_item {
  char *ctx;         /* the context (UTF-8, non-empty) */
  int64_t n_endings; /* 2 .. LT_TF_MC_MAX_ENDINGS */
  char **endings;    /* [n_endings], each non-empty */
  int64_t label;     /* the right ending, in [0, n_endings) */
  int64_t line;      /* its line in the file (1-based) */
} lt_tf_mc_item;

typedef struct lt_tf_mc_set {
  int64_t n;             /* items, >= 1 */
  lt_tf_mc_item *items;  /* [n] */
} lt_tf_mc_set;

/* Parses buf[0..len) (JSON Lines, read with jansson): one object per line,
 * blank lines skipped, each with a context "ctx" (or "context"), "endings" an
 * array of 2..LT_TF_MC_MAX_ENDINGS non-empty strings, and "label" an integer
 * index into it (HellaSwag's fields; other fields ignored). name (a file's
 * path) is what messages call the text. Returns new (free with
 * lt_tf_mc_set_free) in *out; on failure *out is NULL and the message names
 * name and the line: LT_ERR_FORMAT (not JSON, a field missing or of the
 * wrong type, a label out of range, no item at all), LT_ERR_OVERFLOW (a line
 * over LT_TF_MC_MAX_LINE bytes, more than LT_TF_MC_MAX_ITEMS items),
 * LT_ERR_NOMEM. */
LT_API lt_status lt_tf_mc_parse(const char *buf, size_t len, const char *name, lt_tf_mc_set **out);
/* Reads the file at path (lt_text_file_read: a regular file, a FIFO or
 * directory refused naming it) and parses it as lt_tf_mc_parse. */
LT_API lt_status lt_tf_mc_read(const char *path, lt_tf_mc_set **out);
LT_API void lt_tf_mc_set_free(lt_tf_mc_set *s); /* NULL is a no-op */

/* Scores item it (borrowed) under the decoder-only model m with tok (both
 * borrowed): the context encoded as it is, each ending as " " + ending
 * (HellaSwag's endings follow the context after a space; llm.c's scorer),
 * both without special tokens (lt_tokenizer_encode); the sequence context +
 * ending, whose context is cut from the left when the whole does not fit in
 * max_len + 1 tokens. scores[k] (n_endings entries) receives the mean
 * cross-entropy of ending k's tokens, each predicted from all tokens before
 * it; sums (may be NULL) their sum. *choice: the ending of the lowest mean
 * (the first of equals). Gradients off. Errors: LT_ERR_NULL; LT_ERR_INVALID
 * (not decoder-only; a context of no tokens; an ending of no tokens or of
 * more than max_len, naming the item's line and the ending); LT_ERR_INDEX
 * (an id past the model's vocabulary); the tokenizer's and the forward's. */
LT_API lt_status lt_tf_mc_score(const lt_transformer *m, const lt_tokenizer *tok, const lt_tf_mc_item *it,
                                double *scores, double *sums, int64_t *choice);

typedef struct lt_tf_mc_result {
  int64_t n;           /* items scored */
  int64_t correct;     /* lowest mean loss on the label (the reported accuracy) */
  int64_t correct_sum; /* lowest summed loss on the label (HellaSwag's unnormalised "acc") */
  double accuracy;     /* correct / n */
} lt_tf_mc_result;

/* Scores every item of s (lt_tf_mc_score) and fills *out. choices (may be
 * NULL; s->n entries) receives each item's choice, scores (may be NULL; the
 * sum of the items' n_endings entries) the mean loss of every ending, item
 * after item. Errors: those of lt_tf_mc_score, naming the item's line. */
LT_API lt_status lt_tf_mc_evaluate(const lt_transformer *m, const lt_tokenizer *tok, const lt_tf_mc_set *s,
                                   int64_t *choices, double *scores, lt_tf_mc_result *out);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_LM_EVAL_H */
