/*
 * models/transformer/hf.h: the Transformer in Hugging Face's layouts, GPT-2
 * and Llama (decoder-only) and BERT (encoder-only): a directory holding
 * model.safetensors (the weights under Hugging Face's names and
 * orientations) and config.json (the GPT2Config, LlamaConfig or BertConfig
 * keys). docs/interop.md lists every name and key
 * written and read, and the refusals.
 *
 *   GPT-2  when the configuration is GPT-2's: decoder-only, pre-norm
 *          LayerNorm, tanh GELU, learned positions, tied head, biases,
 *          n_kv_heads == n_heads, unscaled embeddings. q, k, v are merged
 *          into attn.c_attn and every matrix is stored as Conv1D's [in, out].
 *   Llama  when it is Llama's: decoder-only, pre-norm RMSNorm, SwiGLU (SiLU),
 *          RoPE, no biases, unscaled embeddings (GQA and an untied head as the
 *          configuration says). libtensor's RoPE rotates halves (x_i with
 *          x_{i+HS/2}) as Hugging Face's Llama does (rotate_half), so q_proj
 *          and k_proj are stored unpermuted.
 *   BERT   when it is BERT's (hf_bert.c): encoder-only, post-norm LayerNorm,
 *          learned absolute positions, token types, embed_norm, pooler,
 *          biases, n_kv_heads == n_heads; BertModel (n_classes 0) or
 *          BertForSequenceClassification (n_classes > 0: names under
 *          "bert.", and classifier.{weight,bias}). Names load with or
 *          without "bert."; embeddings.position_ids is tolerated.
 * Any other configuration is refused with LT_ERR_INVALID naming the option
 * that does not fit (and its value).
 *
 * What this is not: a tokenizer converter (the programs copy the
 * checkpoint's serialised tokenizer beside the weights, LT_HF_TOKENIZER_FILE),
 * nor a reader of sharded or 16-bit-only checkpoints beyond what
 * checkpoint/safetensors.h reads (F16/BF16 weights load as f32).
 *
 * Errors and ownership as tensor/tensor.h.
 */
#ifndef LT_TF_HF_H
#define LT_TF_HF_H

#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_HF_GPT2, LT_HF_LLAMA, LT_HF_BERT } lt_hf_family;

/* The files of an exported directory. */
#define LT_HF_WEIGHTS_FILE "model.safetensors"
#define LT_HF_CONFIG_FILE "config.json"
/* libtensor's tokenizer as the checkpoint holds it (lt_tokenizer_serialize),
 * written by `export` and read by `generate` (not a Hugging Face file). */
#define LT_HF_TOKENIZER_FILE "libtensor-tokenizer.bin"

/* "gpt2", "llama" or "bert" (config.json's model_type); "unknown" out of range. */
LT_API const char *lt_hf_family_name(lt_hf_family f);

/* The layout cfg fits (LT_OK and *out), or LT_ERR_INVALID naming the first
 * option that fits neither (a configuration with LayerNorm is judged as
 * GPT-2, one with RMSNorm as Llama). *out is untouched on failure. */
LT_API lt_status lt_hf_family_of(const lt_tf_config *cfg, lt_hf_family *out);

/* Writes dir/model.safetensors (metadata {"format": "pt"}) and
 * dir/config.json for m (borrowed), creating dir if it does not exist (its
 * parent must); files of those names already there are replaced (the export
 * program refuses such a directory without --overwrite). Both files are
 * written durably (temporary, fsync, rename). Errors: those of
 * lt_hf_family_of, LT_ERR_IO (also when dir exists and is not a directory),
 * LT_ERR_NOMEM. */
LT_API lt_status lt_hf_export(lt_transformer *m, const char *dir);

/* True when path is a directory holding config.json (no error set). */
LT_API bool lt_hf_is_dir(const char *path);

/* Reads dir/config.json (a regular file of at most 1 MiB) into *cfg and
 * *family (either may be NULL): model_type "gpt2", "llama" or "bert"; keys read and
 * their defaults in docs/interop.md; a key with a value libtensor cannot
 * run (activation_function, hidden_act, attention_bias, rope_scaling, ...)
 * is refused naming it. The result passes lt_tf_config_validate and
 * lt_hf_family_of. Errors: LT_ERR_IO, LT_ERR_FORMAT (not JSON, a key of the
 * wrong type, naming the file and the key), LT_ERR_INVALID. *cfg untouched
 * on failure. */
LT_API lt_status lt_hf_read_config(const char *dir, lt_tf_config *cfg, lt_hf_family *family);

/* Loads dir/model.safetensors into m (borrowed; its configuration must be
 * the directory's, e.g. built from lt_hf_read_config). Every name the layout
 * needs must be present with its shape and a float dtype, and no other name
 * (GPT-2's attention-mask buffers "attn.bias" / "attn.masked_bias" and, for
 * a tied head, an "lm_head.weight" equal to the embedding, and BERT's
 * "embeddings.position_ids" are tolerated; GPT-2 names are accepted with or
 * without the "transformer." prefix, BERT's with or without "bert."). The
 * missing and the unexpected names are given together in one message (the
 * first 8 of them). All of it is checked before a value is written: on
 * failure m is unchanged.
 * Errors: those of lt_st_open, LT_ERR_INVALID (names),
 * LT_ERR_SHAPE, LT_ERR_DTYPE, each naming the file and the tensor. */
LT_API lt_status lt_hf_load_params(const char *dir, lt_transformer *m);

/* Before a model of configuration cfg (borrowed) is built for dir: its size
 * (lt_tf_config_size) against dir/model.safetensors (opened and checked, no
 * tensor read): a configuration claiming more elements than the file holds
 * is refused (LT_ERR_FORMAT, such as 100,000 layers in a small file), and so
 * is a model of more than max_bytes bytes (LT_ERR_NOMEM; 0: no cap). */
LT_API lt_status lt_hf_check_size(const char *dir, const lt_tf_config *cfg, uint64_t max_bytes);

/* lt_hf_read_config, lt_hf_check_size, lt_transformer_new,
 * lt_hf_load_params: the model of an exported directory. Returns new (free
 * with lt_transformer_free), or NULL with the error set. */
LT_API lt_transformer *lt_hf_load(const char *dir, uint64_t max_bytes);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_HF_H */
