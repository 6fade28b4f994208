/*
 * models/transformer/transformer.h: the flagship Transformer, one
 * configuration-driven implementation composed from nn/ blocks, in three
 * architectures:
 *   - encoder-decoder, as in "Attention Is All You Need" (Vaswani et al. 2017):
 *     post-norm, ReLU feed-forward, sinusoidal positions, shared source/target
 *     embeddings tied to the output projection and scaled by sqrt(d_model);
 *   - decoder-only (GPT-style): pre-norm, GELU, learned positions or RoPE,
 *     tied output head;
 *   - encoder-only (BERT-style) for sequence classification.
 * Every option (norm kind and placement, activation, positions, GQA, tying)
 * applies to all three.
 *
 * Parameter names follow PyTorch's nn.Transformer / GPT conventions so that
 * checkpoints list like a state_dict (see docs/transformer.md):
 *   embed.weight, pos_embed.weight (learned positions),
 *   encoder.layers.<i>.self_attn.{q,k,v,out}_proj.{weight,bias},
 *   encoder.layers.<i>.{linear1,linear2}.{weight,bias} (or ffn w1/w2/w3 for SwiGLU),
 *   encoder.layers.<i>.{norm1,norm2}.{weight,bias}, encoder.norm.* (always for
 *   the encoder-decoder, as nn.Transformer; pre-norm only for the others),
 *   decoder.layers.<i>.{self_attn,cross_attn}..., decoder.layers.<i>.norm3...,
 *   lm_head.weight (untied), classifier.{weight,bias} (encoder-only),
 *   type_embed.weight, embed_norm.{weight,bias}, pooler.{weight,bias} (BERT's
 *   extras, when the configuration asks for them), encoder.rel_bias.weight and
 *   decoder.rel_bias.weight [rel_buckets, NH] (T5's relative positions).
 *
 * Ownership: lt_transformer_new returns new (free with lt_transformer_free),
 * owning its lt_params; forward functions return new tensors like every op.
 * Shapes: B batch, S source length, T target length, C d_model, V vocabulary.
 */
#ifndef LT_TRANSFORMER_H
#define LT_TRANSFORMER_H

#include "nn/nn.h"
#include "nn/transformer_layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_TF_ENCODER_DECODER, LT_TF_DECODER_ONLY, LT_TF_ENCODER_ONLY } lt_tf_arch;
typedef enum { LT_TF_LAYER_NORM, LT_TF_RMS_NORM } lt_tf_norm;
/* RELATIVE: no positions added to the embeddings; T5's learned bias of
 * relative-position buckets (lt_relative_position_bias) added to every
 * self-attention's scores, one table per stack (rel_buckets below). */
typedef enum { LT_TF_POS_SINUSOIDAL, LT_TF_POS_LEARNED, LT_TF_POS_ROPE, LT_TF_POS_RELATIVE } lt_tf_pos;

typedef struct lt_tf_config {
  lt_tf_arch arch;
  int64_t vocab_size;     /* V, shared by source and target */
  int64_t d_model;        /* C */
  int64_t n_heads;        /* NH */
  int64_t n_kv_heads;     /* NKV (GQA; 1 = MQA; == n_heads = MHA) */
  int64_t n_enc_layers;   /* encoder layers (encoder-decoder, encoder-only) */
  int64_t n_dec_layers;   /* decoder layers (encoder-decoder, decoder-only) */
  int64_t d_ff;           /* feed-forward hidden size */
  int64_t max_len;        /* longest sequence (positions) */
  int64_t n_classes;      /* encoder-only classifier outputs */
  double dropout;         /* at PyTorch's places: embeddings+positions, attention weights, sublayer outputs, FFN hidden */
  lt_tf_norm norm;
  bool pre_norm;          /* false: post-norm as the paper */
  lt_activation act;      /* RELU, GELU, GELU_TANH; SILU with swiglu */
  bool swiglu;
  lt_tf_pos pos;
  bool tie_embeddings;    /* output projection = embedding matrix */
  bool scale_embeddings;  /* multiply embeddings by sqrt(d_model) */
  bool bias;              /* biases on every Linear */
  double norm_eps;
  double rope_base;
  int64_t pad_id;         /* padding token id (embedding padding_idx) */
  /* BERT's extras (docs/transformer.md); zero / false in every other model,
   * and in a checkpoint that predates them: */
  int64_t type_vocab_size; /* encoder-only: rows of the token-type (segment) embedding type_embed [TV, C]
                              added to the input; 0 = none */
  bool embed_norm;        /* a norm (embed_norm, the model's norm kind) over the summed embeddings, before
                             dropout and the first layer (BERT's embeddings.LayerNorm) */
  bool pooler;            /* encoder-only: pooler = tanh(Linear(C, C)) of the first position's output
                             (BERT's pooler); lt_transformer_classify then classifies it instead of the mean */
  /* Decoder families' extras (docs/interop.md); zero / false elsewhere, and
   * in a checkpoint that predates them: */
  bool qkv_bias;          /* biases on the attention's q, k, v projections only, none on its output or the
                             feed-forward (Qwen2); needs bias false (bias true has them already) */
  int64_t sliding_window; /* decoder self-attention: each query sees only its latest sliding_window keys,
                             itself included (Mistral's sliding window); 0 = every earlier key */
  /* RoPE's frequency scaling (pos rope; nn.h's lt_rope_scaling, which says how each is used): */
  lt_rope_type rope_type; /* LT_ROPE_DEFAULT (none, the fields below unused), LT_ROPE_LINEAR, LT_ROPE_LLAMA3 */
  double rope_factor;     /* linear, llama3: > 0 */
  double rope_low_freq_factor, rope_high_freq_factor; /* llama3: 0 < low < high */
  int64_t rope_original_max_len; /* llama3: the context length trained before scaling, >= 1 */
  /* T5's extras (docs/interop.md); zero / false elsewhere, and in a
   * checkpoint that predates them: */
  int64_t rel_buckets;      /* pos relative: buckets of each stack's bias table [rel_buckets, n_heads]
                               (relative_attention_num_buckets), >= 4 */
  int64_t rel_max_distance; /* pos relative: the distance from which the last bucket is used
                               (relative_attention_max_distance), > rel_buckets / 2 */
  double attn_scale;        /* every attention's q k^T scale; 0 = 1/sqrt(head size); T5: 1 */
  bool head_rescale;        /* the decoder's output times d_model^-0.5 before a tied head (T5) */
} lt_tf_config;

/* The paper's choices for each architecture at a small size (d_model 128,
 * 4 heads, 2+2 layers, d_ff 512, dropout 0.1, vocab_size to be set). */
LT_API lt_tf_config lt_tf_config_default(lt_tf_arch arch);
/* Every field checked (the ranges below, heads dividing d_model, kv heads
 * dividing heads, even head size for RoPE, pooler only for encoder-only,
 * ...); the error names the field. n_classes 0 is an encoder-only model
 * without a classifier (hidden states, pooler, sentence embeddings;
 * lt_transformer_classify refuses it). */
LT_API lt_status lt_tf_config_validate(const lt_tf_config *cfg);

/* The range of each numeric field, in one table: lt_tf_config_validate
 * checks it, so every reader of a configuration does (a checkpoint's
 * lt_tf_config_from_meta, a Hugging Face config.json, whose messages name
 * the config key), and train's flags take their ranges and --help text from
 * it (programs/train_cli.c). X(field, lo, hi, lo_open): lo <= field <= hi, lo < field
 * when lo_open. vocab_size, n_classes and pad_id come from the data and are
 * checked by validate on their own terms. */
#define LT_TF_CONFIG_RANGES(X) \
  X(d_model, 1, 65536, 0)      \
  X(n_heads, 1, 4096, 0)       \
  X(n_kv_heads, 1, 4096, 0)    \
  X(n_enc_layers, 0, 1024, 0)  \
  X(n_dec_layers, 0, 1024, 0)  \
  X(d_ff, 1, 1048576, 0)       \
  X(max_len, 1, 1048576, 0)    \
  X(dropout, 0, 1, 0)          \
  X(norm_eps, 0, 1, 1)         \
  X(rope_base, 1, 1000000000, 1) \
  X(type_vocab_size, 0, 65536, 0) \
  X(sliding_window, 0, 1048576, 0) \
  X(rope_factor, 0, 1024, 0) \
  X(rope_low_freq_factor, 0, 1024, 0) \
  X(rope_high_freq_factor, 0, 1024, 0) \
  X(rope_original_max_len, 0, 1048576, 0) \
  X(rel_buckets, 0, 65536, 0) \
  X(rel_max_distance, 0, 1048576, 0) \
  X(attn_scale, 0, 1000000, 0)
/* Each bound as a constant expression, for static tables: LT_TF_LO_d_model,
 * LT_TF_HI_d_model, LT_TF_LO_OPEN_d_model, ... */
#define LT_TF_RANGE_ENUM_(f, lo, hi, open) LT_TF_LO_##f = lo, LT_TF_HI_##f = hi, LT_TF_LO_OPEN_##f = open,
enum { LT_TF_CONFIG_RANGES(LT_TF_RANGE_ENUM_) };
#undef LT_TF_RANGE_ENUM_

/* The sinusoidal position table [max_len, d_model] is computed when the
 * model is built, not read from a file: max_len x d_model is at most this
 * many values (64 MiB of f32; a file of a few KB could otherwise ask for
 * gigabytes and minutes of sin/cos). lt_tf_config_validate checks it. */
#define LT_TF_MAX_POS_TABLE ((int64_t)1 << 24)

/* Whether v is in the range of field (a name of the table, "d_model"): LT_OK,
 * or LT_ERR_INVALID with "<what> <v>: <field> must be in [lo, hi]" (what, e.g.
 * "hf config 'x/config.json': key 'n_embd'", or NULL for "tf_config:
 * <field>"). An unknown field is LT_ERR_INVALID naming it. */
LT_API lt_status lt_tf_config_check_range(const char *field, double v, const char *what);
/* The same for an integer field (the value printed exactly). */
LT_API lt_status lt_tf_config_check_range_int(const char *field, int64_t v, const char *what);

/* What a model of this configuration holds, before building it (checked
 * 64-bit arithmetic, nothing allocated): *n_params, the elements of its
 * parameters (as lt_params_numel of the built model's store, buffers
 * included), and *bytes, the memory its tensors take as built (f32: the
 * parameters plus the sinusoidal position table). Training needs about four
 * times bytes (gradients, Adam's two moments) plus activations. Either
 * output may be NULL. Errors: those of lt_tf_config_validate, and
 * LT_ERR_OVERFLOW (naming the term) when a count does not fit in 63 bits. A
 * loader compares these with the checkpoint before building
 * (lt_ckpt_check_model_size). */
LT_API lt_status lt_tf_config_size(const lt_tf_config *cfg, int64_t *n_params, size_t *bytes);

/* The RoPE scaling of cfg's rope_* fields, as nn.h's struct. */
LT_API lt_rope_scaling lt_tf_rope_scaling(const lt_tf_config *cfg);

typedef struct lt_transformer lt_transformer;

/* Builds the model, drawing from g: PyTorch's default initialisation of each
 * layer, xavier_uniform on the encoder-decoder's layer matrices (as
 * nn.Transformer), and embeddings N(0, 1/d_model) when scaled by sqrt(d_model)
 * (fairseq) or N(0, 0.02^2) otherwise (GPT-2), since nn.Embedding's N(0, 1)
 * with a tied head starts with logits of standard deviation ~sqrt(d_model).
 * See docs/transformer.md. */
LT_API lt_transformer *lt_transformer_new(const lt_tf_config *cfg, lt_generator *g);
LT_API void lt_transformer_free(lt_transformer *m);  /* NULL is a no-op */
LT_API const lt_tf_config *lt_transformer_config(const lt_transformer *m);  /* borrowed */
LT_API lt_params *lt_transformer_params(lt_transformer *m);                 /* borrowed; owned by m */

/* Encoder: src [B, S] ids, src_pad [B, S] bool (true = padding) or NULL ->
 * memory [B, S, C]. (Encoder-decoder and encoder-only.) A model with token
 * types (type_vocab_size > 0) gives every position type 0. */
LT_API lt_tensor *lt_transformer_encode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                 const lt_nn_ctx *ctx);
/* The same with token types: types [B, S] integer ids in [0,
 * type_vocab_size) (BERT's token_type_ids; NULL = all 0), which a model
 * without token types refuses unless NULL. */
LT_API lt_tensor *lt_transformer_encode_typed(const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                                       const lt_tensor *src_pad, const lt_nn_ctx *ctx);
/* The pooler (a model with pooler): hidden [B, S, C] (the encoder's output)
 * -> tanh(pooler(hidden[:, 0])) [B, C] (new), BERT's pooler_output. */
LT_API lt_tensor *lt_transformer_pool(const lt_transformer *m, const lt_tensor *hidden);
/* Sentence embeddings as sentence-transformers' mean pooling and Normalize
 * modules (all-MiniLM-L6-v2): h = lt_transformer_encode_typed(src, types,
 * src_pad); e = sum_s h[b, s] * keep[b, s] / max(sum_s keep[b, s], 1e-9),
 * keep = !src_pad (NULL: every position); then, if normalize, e / max(||e||_2,
 * 1e-12) (torch.nn.functional.normalize). -> [B, C] (new). Any encoder
 * (encoder-decoder or encoder-only); differentiable like the rest. */
LT_API lt_tensor *lt_transformer_embed(const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                                const lt_tensor *src_pad, bool normalize, const lt_nn_ctx *ctx);

/* Decoder (causal self-attention, and cross-attention over memory for the
 * encoder-decoder; memory NULL for decoder-only): tgt [B, T] ids, tgt_pad
 * [B, T] or NULL, positions starting at pos0 -> logits [B, T, V]. */
LT_API lt_tensor *lt_transformer_decode(const lt_transformer *m, const lt_tensor *tgt, const lt_tensor *tgt_pad,
                                 const lt_tensor *memory, const lt_tensor *src_pad, int64_t pos0,
                                 const lt_nn_ctx *ctx);

/* The decoder's loss through the chunked head: the same as
 * lt_cross_entropy(lt_transformer_decode(m, tgt, tgt_pad, memory, src_pad,
 * 0, ctx), labels, ce) (within rounding, nn/nn.h lt_linear_cross_entropy)
 * without the B x T x V logits: the head (the tied embedding, or lm_head)
 * and the loss go chunk_rows rows at a time (0: about 16 Mi logits a
 * chunk), forward and backward fused. labels [B, T] (i32/i64); ce NULL is
 * LT_CROSS_ENTROPY_DEFAULTS (reduction none is refused). Returns new (0-d).
 * Errors as lt_transformer_decode and lt_linear_cross_entropy. */
LT_API lt_tensor *lt_transformer_decode_loss(const lt_transformer *m, const lt_tensor *tgt, const lt_tensor *tgt_pad,
                                      const lt_tensor *memory, const lt_tensor *src_pad, const lt_tensor *labels,
                                      const lt_cross_entropy_opts *ce, int64_t chunk_rows, const lt_nn_ctx *ctx);

/* What every layer of m recomputes in its backward instead of keeping
 * (nn/transformer_layer.h, lt_recompute_mode; autograd/recompute.h): the
 * same gradients, bit for bit, for less memory. A new model has
 * LT_RECOMPUTE_NONE. Errors: m NULL, an unknown mode. */
LT_API lt_status lt_transformer_set_recompute(lt_transformer *m, lt_recompute_mode mode);

/* ---- Incremental decoding (a KV cache per decoder layer) ------------------- */
/* The state of an incremental decode: per decoder layer, the self-attention
 * keys and values of the positions fed so far and (encoder-decoder) the
 * cross-attention keys and values of the memory, computed once. Inference
 * only (no-grad, no dropout). Returns new (free with lt_tf_cache_free); cap
 * (1 <= cap <= max_len) is the most decoder positions it will hold; the
 * batch size is set by the first step. Buffers are allocated at the first
 * step: 2 x n_dec_layers x B x n_kv_heads x (cap + S) x head size floats. */
typedef struct lt_tf_cache lt_tf_cache;
LT_API lt_tf_cache *lt_tf_cache_new(const lt_transformer *m, int64_t cap);
LT_API void lt_tf_cache_free(lt_tf_cache *c);        /* NULL is a no-op */
LT_API int64_t lt_tf_cache_len(const lt_tf_cache *c); /* positions fed so far (0 for NULL) */
LT_API void lt_tf_cache_reset(lt_tf_cache *c);        /* back to empty (a new batch or source; keeps the left padding) */
/* Beam search: row i becomes old row rows[i] (1-d i32/i64), in every layer's
 * self- and cross-attention cache (and the left padding below). Unchanged on
 * failure. */
LT_API lt_status lt_tf_cache_reorder(lt_tf_cache *c, const lt_tensor *rows);
/* A ragged batch (prompts of different lengths, left-padded to one length):
 * row b's first left_pad[b] columns (borrowed, copied; B entries, each in
 * [0, cap)) are padding. Every later lt_transformer_decode_step then masks
 * them as keys (they are never attended to; a padding query attends to
 * nothing and gives zeros, not NaN) and gives row b's column j the position
 * j - left_pad[b] (learned and sinusoidal positions: max(.., 0) for the
 * padding itself), so each row computes what it would alone, up to rounding.
 * RoPE keeps the column as the rotation's position: its attention depends on
 * position differences only, so the shift changes nothing but rounding.
 * Set on an empty cache (before the first step); lt_tf_cache_reset keeps it;
 * left_pad NULL clears it. Errors: LT_ERR_NULL, LT_ERR_INVALID (a cache that
 * holds positions, B < 1, a padding outside [0, cap)), LT_ERR_NOMEM; a later
 * step with another batch size is LT_ERR_SHAPE. */
LT_API lt_status lt_tf_cache_set_left_pad(lt_tf_cache *c, int64_t B, const int64_t *left_pad);

/* One incremental decoder step: tgt [B, T] (T >= 1; usually T = 1 after a
 * first call with the whole prefix) holds the ids at positions len .. len+T-1
 * (len = lt_tf_cache_len(c)); returns their logits [B, T, V] (new), the same
 * values (up to rounding) as lt_transformer_decode on the whole sequence so
 * far. memory [B, S, C] is needed while the cache is empty (the
 * cross-attention keys and values are computed from it then, and it is
 * ignored afterwards, may be NULL); src_pad [B, S] (or NULL) at every step.
 * Errors as lt_transformer_decode, plus a full cache (len + T > cap) and a
 * batch size other than the first step's. On failure the cache is unchanged. */
LT_API lt_tensor *lt_transformer_decode_step(const lt_transformer *m, lt_tf_cache *c, const lt_tensor *tgt,
                                      const lt_tensor *memory, const lt_tensor *src_pad);
/* lt_transformer_decode_step when only the next token is wanted: the same
 * step through the cache, but only the last position of tgt goes through
 * the output head. Returns new logits [B, V], the last column of
 * lt_transformer_decode_step's [B, T, V] up to rounding (the head's product
 * runs on B rows instead of B x T: for a prompt of 512 tokens through a
 * head of 50257 x 768, GPT-2's, that is a third of the prefill's
 * multiply-adds). Arguments, errors and the cache as
 * lt_transformer_decode_step. */
LT_API lt_tensor *lt_transformer_decode_step_last(const lt_transformer *m, lt_tf_cache *c, const lt_tensor *tgt,
                                                  const lt_tensor *memory, const lt_tensor *src_pad);

/* Encoder-only classifier: mean over non-padding positions of the encoder
 * output (with pooler: the pooler's output, then dropout, as
 * BertForSequenceClassification), then classifier -> [B, n_classes].
 * A model with n_classes 0 has no classifier: LT_ERR_INVALID. */
LT_API lt_tensor *lt_transformer_classify(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                   const lt_nn_ctx *ctx);
/* The same with token types (types as lt_transformer_encode_typed), e.g.
 * BERT's sentence pairs. */
LT_API lt_tensor *lt_transformer_classify_typed(const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                                         const lt_tensor *src_pad, const lt_nn_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* LT_TRANSFORMER_H */
