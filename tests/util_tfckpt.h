/*
 * tests/util_tfckpt.h: small real checkpoints of the three Transformer
 * architectures, written the way models/transformer/train writes them (a
 * training state after a few AdamW steps, the model configuration, the
 * tokenizer, the class names, the data-loader position and run counters).
 * Used by the crafted-checkpoint suite (tests/test_crafted_ckpt.c) and by the
 * program that makes the checkpoint fuzzer's seeds (fuzz/make_ckpt_seeds.c).
 *
 * What this is not: a test helper that fails the test (no Check calls here),
 * so that programs without Check can use it. Functions return a status, with
 * lt_last_error() set by the library call that failed.
 */
#ifndef LT_TEST_UTIL_TFCKPT_H
#define LT_TEST_UTIL_TFCKPT_H

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "models/transformer/transformer.h"

/* The tiny configuration of arch (d_model 8, 2 heads, one layer per stack,
 * d_ff 16, max_len 8, the vocabulary of TFCKPT_TEXT's char tokenizer, 2
 * classes for the encoder-only model, no dropout). */
lt_tf_config tfckpt_config(lt_tf_arch arch);
/* The optimizer the checkpoints are trained with (AdamW, PyTorch's defaults
 * but lr 1e-2). */
lt_optim_config tfckpt_optim_config(void);
/* The schedule saved with them (linear warmup over 2 steps, 100 in total). */
lt_schedule tfckpt_schedule(void);
/* The generator names saved: {"dropout"} (TFCKPT_N_GENERATORS of them). */
#define TFCKPT_N_GENERATORS 1
extern const char *const tfckpt_generator_names[TFCKPT_N_GENERATORS];
/* The text whose characters make the tokenizer. */
#define TFCKPT_TEXT "abcdefgh 0123456789"

/* A model of configuration c (borrowed) with every parameter drawn from a
 * generator of seed: norm weights N(1, 0.2^2), everything else (biases too)
 * N(0, 0.5^2), so that a swapped or ignored tensor shows in the outputs and
 * logits are decisive (no near-ties). Returns new (lt_transformer_free), or
 * NULL with the error set. */
lt_transformer *tfckpt_random_model(const lt_tf_config *c, uint64_t seed);

/* Builds the tiny model of arch (seed 7), trains it for `steps` AdamW steps
 * (>= 0) on one fixed batch, and saves a training checkpoint to path
 * (training = true) or a model-only checkpoint (training = false). opts may
 * be NULL (the defaults: small tensors contiguous, larger ones deflated). */
lt_status tfckpt_write(const char *path, lt_tf_arch arch, int steps, bool training, const lt_ckpt_save_opts *opts);
/* The same with another configuration of the same kind (borrowed): cfg->arch
 * gives the architecture, cfg->vocab_size must be TFCKPT_TEXT's char
 * vocabulary, cfg->max_len at least 5 when steps > 0 (tests/test_decode.c
 * uses a wider model with a longer context). */
lt_status tfckpt_write_config(const char *path, const lt_tf_config *cfg, int steps, bool training,
                              const lt_ckpt_save_opts *opts);
/* The same with another tokenizer (borrowed; NULL: TFCKPT_TEXT's char
 * tokenizer): cfg->vocab_size must be its vocabulary size. The encoder-only
 * model's class names are tfckpt_classes (tfckpt_classes_size bytes, one
 * name per line) when set, else "neg\npos\n". */
extern const char *tfckpt_classes;
extern size_t tfckpt_classes_size;
/* When set, called with the extra values just before the checkpoint is
 * written, to add more (tests/test_crafted_ckpt.c: train's settings and the
 * trainer's loader keys, so that a resume is checked as train's). */
extern lt_status (*tfckpt_extra_hook)(lt_tf_arch arch, lt_ckpt_meta *extra);
lt_status tfckpt_write_config_tok(const char *path, const lt_tf_config *cfg, int steps, bool training,
                                  const lt_ckpt_save_opts *opts, const lt_tokenizer *tok);

/* Reads the model configuration and the extra values of the checkpoint at
 * path the way generate and train --resume do: a non-strict training load
 * into an empty store. With model_only_ok, a model-only checkpoint (which has
 * no training state) is read with lt_ckpt_load_params instead. *info: as
 * those functions set it (new on success, free with lt_ckpt_info_free; NULL
 * on failure). */
lt_status tfckpt_read_info(const char *path, bool model_only_ok, lt_ckpt_info **info);

/* The model a checkpoint (of train, or model-only) describes, with its
 * parameters: its configuration read as tfckpt_read_info does, then
 * lt_tf_load_model. Returns new (lt_transformer_free), or NULL with the
 * library's error set. */
lt_transformer *tfckpt_load_model(const char *path);

#endif
