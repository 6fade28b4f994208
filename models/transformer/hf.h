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
 *   Qwen2  Llama's layout with biases on q_proj, k_proj and v_proj only
 *          (qkv_bias); no sliding window (use_sliding_window false).
 *   Mistral Llama's layout with a sliding window (sliding_window > 0).
 *          The RoPE families (Llama, Qwen2, Mistral) also carry RoPE
 *          scaling ("linear", Llama 3's "llama3"), as rope_parameters.
 *   BERT   when it is BERT's (hf_bert.c): encoder-only, post-norm LayerNorm,
 *          learned absolute positions, token types, embed_norm, pooler,
 *          biases, n_kv_heads == n_heads; BertModel (n_classes 0) or
 *          BertForSequenceClassification (n_classes > 0: names under
 *          "bert.", and classifier.{weight,bias}). Names load with or
 *          without "bert."; embeddings.position_ids is tolerated.
 *   T5     when it is T5's (hf_t5.c): encoder-decoder, pre-norm RMSNorm
 *          (T5LayerNorm), no biases, unscaled attention, relative-position
 *          buckets (one bias table per stack), ReLU (v1.0) or gated GELU
 *          (v1.1, "gated-gelu") feed-forward, tied head rescaled by
 *          d_model^-0.5 or untied lm_head; T5ForConditionalGeneration.
 *          Files' encoder/decoder.embed_tokens.weight copies are tolerated.
 * Any other configuration is refused with LT_ERR_INVALID naming the option
 * that does not fit (and its value).
 *
 * What this is not: a tokenizer converter (the programs copy the
 * checkpoint's serialised tokenizer beside the weights, LT_HF_TOKENIZER_FILE),
 * nor a reader of 16-bit-only checkpoints beyond what
 * checkpoint/safetensors.h reads (F16/BF16 weights load as f32). Sharded
 * weights (LT_HF_WEIGHTS_INDEX_FILE) are read, never written.
 *
 * Errors and ownership as tensor/tensor.h.
 */
#ifndef LT_TF_HF_H
#define LT_TF_HF_H

#include "datasets/datasets.h"
#include "models/transformer/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_HF_GPT2, LT_HF_LLAMA, LT_HF_BERT, LT_HF_QWEN2, LT_HF_MISTRAL, LT_HF_T5 } lt_hf_family;

/* The files of an exported directory. */
#define LT_HF_WEIGHTS_FILE "model.safetensors"
/* Read when LT_HF_WEIGHTS_FILE is absent: the weights split over shards
 * (its weight_map names each tensor's file; docs/interop.md). Never written. */
#define LT_HF_WEIGHTS_INDEX_FILE "model.safetensors.index.json"
#define LT_HF_CONFIG_FILE "config.json"
/* libtensor's tokenizer as the checkpoint holds it (lt_tokenizer_serialize),
 * written by `export` and read by `generate` (not a Hugging Face file). */
#define LT_HF_TOKENIZER_FILE "libtensor-tokenizer.bin"

/* "gpt2", "llama", "bert", "qwen2", "mistral" or "t5" (config.json's model_type);
 * "unknown" out of range. */
LT_API const char *lt_hf_family_name(lt_hf_family f);

/* The layout cfg fits (LT_OK and *out), or LT_ERR_INVALID naming the first
 * option that fits neither (a configuration with LayerNorm is judged as
 * GPT-2, one with RMSNorm as Llama, Qwen2 when it has qkv_bias, Mistral when
 * it has a sliding_window). *out is untouched on failure. */
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
 * *family (either may be NULL): model_type "gpt2", "llama", "qwen2", "mistral",
 * "bert" or "t5"; keys read and
 * their defaults in docs/interop.md; a key with a value libtensor cannot
 * run (activation_function, hidden_act, attention_bias, rope_scaling, ...)
 * is refused naming it. The result passes lt_tf_config_validate and
 * lt_hf_family_of, whose layout *family is (a "mistral" without a
 * sliding_window is Llama's). Errors: LT_ERR_IO, LT_ERR_FORMAT (not JSON, a key of the
 * wrong type, naming the file and the key), LT_ERR_INVALID. *cfg untouched
 * on failure. */
LT_API lt_status lt_hf_read_config(const char *dir, lt_tf_config *cfg, lt_hf_family *family);

/* The ids a Hugging Face directory gives for generation: eos_token_id (an
 * id or a list of ids), bos_token_id, pad_token_id and
 * decoder_start_token_id, each from dir/generation_config.json when that
 * file has it, else from dir/config.json; -1 (n_eos 0) where neither has it
 * or where it is null. Each file is optional (absent: nothing from it), a
 * regular file of at most 1 MiB when there, and checked: JSON, each key an
 * integer in [0, 2^31) or (eos) a list of at most LT_HF_MAX_EOS of them.
 * Errors: LT_ERR_IO (a file there but unreadable), LT_ERR_FORMAT naming the
 * file and the key. *out untouched on failure. */
#define LT_HF_MAX_EOS 8
typedef struct lt_hf_gen_ids {
  int64_t eos[LT_HF_MAX_EOS];
  int n_eos;
  int64_t bos, pad, decoder_start;
} lt_hf_gen_ids;
LT_API lt_status lt_hf_read_gen_ids(const char *dir, lt_hf_gen_ids *out);

/* Loads dir/model.safetensors (or, when it is absent, the shards that
 * dir/model.safetensors.index.json names, checked against it: each shard a
 * file of dir, every tensor where the index says and in one shard only;
 * docs/interop.md) into m (borrowed; its configuration must be
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

/* ---- sentence embeddings, as sentence-transformers (hf_embed.c) ------------ */

/* What sentence-transformers' files in an encoder directory say. */
typedef struct lt_hf_sentence_config {
  int64_t max_seq_length; /* tokens per text, special tokens included (sentence_bert_config.json; absent: max_len) */
  bool normalize;         /* L2-normalise each embedding (a Normalize module in modules.json) */
} lt_hf_sentence_config;

/* Reads dir's modules.json (absent: mean pooling without Normalize, what
 * sentence-transformers does with a plain model), its Pooling module's
 * config.json and sentence_bert_config.json for a model of configuration
 * cfg (borrowed). The pipeline must be Transformer (the directory itself),
 * Pooling with pooling_mode_mean_tokens only (of cfg's d_model), then
 * optionally Normalize; any other module, pooling mode, a path leaving the
 * directory, do_lower_case true or a max_seq_length outside [1, max_len] is
 * refused naming the file and the key (LT_ERR_INVALID, LT_ERR_FORMAT,
 * LT_ERR_IO). *out untouched on failure. */
LT_API lt_status lt_hf_read_sentence_config(const char *dir, const lt_tf_config *cfg, lt_hf_sentence_config *out);

/* Sentence embeddings of texts[0..n) (lens[i] bytes each, or NULL: each
 * NUL-terminated) with the encoder m and its tokenizer tok (both borrowed):
 * each text encoded with the tokenizer's special tokens, its text tokens cut
 * to fit sc->max_seq_length (transformers' truncation for one sequence),
 * then in batches of at most `batch` texts of similar lengths (longest
 * first, each batch padded to its longest), lt_transformer_embed (mean over
 * the tokens, normalised when sc->normalize). Returns new [n, C] f32, row i
 * for texts[i], or NULL with LT_ERR_NULL, LT_ERR_INVALID (a decoder-only
 * model, batch < 1, a token id outside the vocabulary: another model's
 * tokenizer), the tokenizer's errors, LT_ERR_NOMEM. */
LT_API lt_tensor *lt_hf_embed_texts(const lt_transformer *m, const lt_tokenizer *tok, const lt_hf_sentence_config *sc,
                             int64_t n, const char *const *texts, const size_t *lens, int64_t batch);

#ifdef __cplusplus
}
#endif
#endif /* LT_TF_HF_H */
