/*
 * models/transformer/gguf_model.h: the decoder-only Transformer as a GGUF
 * file that llama.cpp runs (checkpoint/gguf.h is the container), GPT-2's
 * and Llama's layouts (models/transformer/hf.h judges which one a
 * configuration fits), with the names, orientations and keys that
 * llama.cpp's convert_hf_to_gguf.py writes (docs/interop.md lists them):
 *   general.architecture "gpt2" or "llama", general.name, general.file_type,
 *   <arch>.context_length, .embedding_length, .feed_forward_length,
 *   .block_count, .attention.head_count (and head_count_kv,
 *   layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base for Llama;
 *   layer_norm_epsilon for GPT-2);
 *   tensors token_embd, position_embd (GPT-2), blk.N.attn_norm,
 *   attn_qkv (GPT-2) or attn_q/attn_k/attn_v (Llama, q and k rows permuted
 *   to ggml's interleaved RoPE pairs as the converter does), attn_output,
 *   ffn_norm, ffn_up, ffn_down, ffn_gate (Llama), output_norm, output
 *   (an untied Llama head only);
 *   the tokenizer from a tokenizer.json: tokenizer.ggml.model "gpt2"
 *   (byte-level BPE: tokens, token_type, merges, pre "gpt-2") or "llama"
 *   (BPE with byte fallback, SentencePiece-style: tokens, scores -1000 as
 *   the converter's LlamaHfVocab, token_type), bos/eos ids, and the whole
 *   file as tokenizer.huggingface.json (the key the GGUF spec defines), which
 *   the import reads back; a tokenizer GGUF cannot express (a character
 *   vocabulary) is written as tokenizer.ggml.model "none" (llama.cpp loads
 *   the weights and cannot tokenize).
 * Matrices are written in the chosen type (F32, BF16, Q8_0, Q4_0; a matrix
 * whose rows do not fill 32-weight blocks stays F32), vectors (norms,
 * biases) in F32, as the converter writes them.
 *
 * What this is not: a runner of GGUF models other than GPT-2 and Llama
 * layouts (other architectures are refused naming general.architecture),
 * nor of quantized weights in their blocks (the import expands every
 * tensor to the f32 parameters).
 *
 * Errors and ownership as tensor/tensor.h.
 */
#ifndef LT_TF_GGUF_MODEL_H
#define LT_TF_GGUF_MODEL_H

#include "checkpoint/gguf.h"
#include "datasets/datasets.h"
#include "models/transformer/hf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes m (borrowed) to path as GGUF: matrices in `weights` (an
 * lt_ggml_type: F32, BF16, Q8_0, Q4_0), vectors in F32, the tokenizer of
 * tokenizer_json[0..len) (borrowed; NULL: none, tokenizer.ggml.model
 * "none"). Durable (temporary, fsync, rename). Errors: those of
 * lt_hf_family_of (a layout neither GPT-2's nor Llama's), LT_ERR_FORMAT (a
 * tokenizer.json that does not parse), LT_ERR_DTYPE, LT_ERR_IO,
 * LT_ERR_NOMEM. */
LT_API lt_status lt_tf_gguf_export(lt_transformer *m, const char *path, int weights, const char *tokenizer_json,
                            size_t len);

/* True when path is a regular file starting with GGUF's magic (no error set). */
LT_API bool lt_tf_gguf_is_file(const char *path);

/* The configuration of an open GGUF file (borrowed) into *cfg and *family
 * (either may be NULL): every key range-checked as config.json's are
 * (LT_TF_CONFIG_RANGES), the vocabulary from token_embd's rows, the head
 * tied unless an output tensor is there. Errors: LT_ERR_INVALID (another
 * architecture, a value libtensor cannot run, naming the key),
 * LT_ERR_FORMAT (a key of the wrong type or missing). *cfg untouched on
 * failure. */
LT_API lt_status lt_tf_gguf_read_config(const lt_gguf_file *f, lt_tf_config *cfg, lt_hf_family *family);

/* Loads path into a new model: the configuration (above), its size
 * against the file's tensors and max_bytes (0: no cap; LT_ERR_NOMEM
 * above it), then every tensor of the layout by name and shape, no other
 * tensor (a GPT-2 "output.weight" is tolerated when it equals token_embd
 * byte for byte), every value finite, all checked before a value is
 * written. When tok is not NULL, *tok gets the file's tokenizer (returns
 * new, free with lt_tokenizer_free): tokenizer.huggingface.json when
 * present, else one rebuilt from tokenizer.ggml.* for model "gpt2"
 * (byte-level BPE with GPT-2's pieces), else NULL (no error). The model's
 * weights are in the thread's lt_set_weight_format (nn/nn.h; f32 unless a
 * caller such as lt_tf_load set another): a tensor the file holds in that
 * format, in whole rows, is copied block for block; any other is expanded
 * to f32 and converted. Returns new (free with lt_transformer_free), or NULL
 * with the error set. */
LT_API lt_transformer *lt_tf_gguf_load(const char *path, uint64_t max_bytes, lt_tokenizer **tok);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_GGUF_MODEL_H */
