/*
 * models/transformer/onnx.h: the Transformer as an ONNX model file (opset
 * 17, IR version 8), for onnxruntime and every other ONNX consumer. The
 * graph is built from the model's configuration and parameters with the
 * standard operators only (Gather, MatMul, LayerNormalization, Softmax, ...;
 * docs/interop.md, "ONNX", lists them), and the protobuf is written with
 * protobuf-c from the ONNX project's own schema (models/transformer/onnx/).
 *
 *   decoder-only (GPT-2, Llama and every other decoder-only configuration:
 *   LayerNorm or RMSNorm, pre- or post-norm, GELU / tanh GELU / ReLU or
 *   SwiGLU, learned, sinusoidal or rotary positions, GQA, tied or untied
 *   head, with or without biases):
 *     input  input_ids       int64 [batch, sequence]
 *     output logits          float [batch, sequence, vocab_size]
 *   encoder-only (BERT / MiniLM and the other encoder-only configurations):
 *     inputs input_ids       int64 [batch, sequence]
 *            attention_mask  int64 [batch, sequence] (1 = token, 0 = padding)
 *            token_type_ids  int64 [batch, sequence] (models with token types)
 *     outputs last_hidden_state float [batch, sequence, d_model]
 *             pooler_output     float [batch, d_model] (models with a pooler)
 * batch and sequence are dynamic axes (named so in the file); sequence is at
 * most max_len (positions are taken from tables of max_len rows). Weights
 * are initializers named as libtensor's parameters (Linear weights stored
 * transposed, [in, out], as MatMul's right operand).
 *
 * What this is not: an exporter of the encoder-decoder (refused), of
 * training graphs (dropout is left out: the graph is the model in
 * evaluation mode), of a KV cache (each run takes the whole sequence), nor of
 * external data: a file is one protobuf, and protobuf limits that to 2 GiB,
 * so a larger model is refused (LT_ERR_INVALID naming its size).
 *
 * Errors and ownership as tensor/tensor.h.
 */
#ifndef LT_TF_ONNX_H
#define LT_TF_ONNX_H

#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LT_ONNX_OPSET 17      /* the default domain's opset the file imports */
#define LT_ONNX_IR_VERSION 8  /* the IR version of opset 17 */

/* What an export wrote (for the program's message). */
typedef struct lt_onnx_summary {
  int64_t nodes;        /* graph nodes */
  int64_t initializers; /* weight and constant tensors */
  uint64_t bytes;       /* the file's size */
} lt_onnx_summary;

/* Writes the graph of m (borrowed; unchanged) to path, durably (temporary,
 * fsync, rename: a failure leaves an old file as it was). summary may be
 * NULL. Errors: LT_ERR_NULL; LT_ERR_INVALID for an encoder-decoder model or
 * one whose file would pass protobuf's 2 GiB (naming the size); LT_ERR_NOMEM;
 * LT_ERR_IO. */
LT_API lt_status lt_onnx_export(lt_transformer *m, const char *path, lt_onnx_summary *summary);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_ONNX_H */
