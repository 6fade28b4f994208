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
 *   lm_head.weight (untied), classifier.{weight,bias} (encoder-only).
 *
 * Ownership: lt_transformer_new returns new (free with lt_transformer_free),
 * owning its lt_params; forward functions return new tensors like every op.
 * Shapes: B batch, S source length, T target length, C d_model, V vocabulary.
 */
#ifndef LT_TRANSFORMER_H
#define LT_TRANSFORMER_H

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LT_TF_ENCODER_DECODER, LT_TF_DECODER_ONLY, LT_TF_ENCODER_ONLY } lt_tf_arch;
typedef enum { LT_TF_LAYER_NORM, LT_TF_RMS_NORM } lt_tf_norm;
typedef enum { LT_TF_POS_SINUSOIDAL, LT_TF_POS_LEARNED, LT_TF_POS_ROPE } lt_tf_pos;

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
} lt_tf_config;

/* The paper's choices for each architecture at a small size (d_model 128,
 * 4 heads, 2+2 layers, d_ff 512, dropout 0.1, vocab_size to be set). */
lt_tf_config lt_tf_config_default(lt_tf_arch arch);
/* Every field checked (positive sizes, heads dividing d_model, kv heads
 * dividing heads, even head size for RoPE, ...); the error names the field. */
lt_status lt_tf_config_validate(const lt_tf_config *cfg);

typedef struct lt_transformer lt_transformer;

/* Builds the model, drawing from g: PyTorch's default initialisation of each
 * layer, xavier_uniform on the encoder-decoder's layer matrices (as
 * nn.Transformer), and embeddings N(0, 1/d_model) when scaled by sqrt(d_model)
 * (fairseq) or N(0, 0.02^2) otherwise (GPT-2), since nn.Embedding's N(0, 1)
 * with a tied head starts with logits of standard deviation ~sqrt(d_model).
 * See docs/transformer.md. */
lt_transformer *lt_transformer_new(const lt_tf_config *cfg, lt_generator *g);
void lt_transformer_free(lt_transformer *m);  /* NULL is a no-op */
const lt_tf_config *lt_transformer_config(const lt_transformer *m);  /* borrowed */
lt_params *lt_transformer_params(lt_transformer *m);                 /* borrowed; owned by m */

/* Encoder: src [B, S] ids, src_pad [B, S] bool (true = padding) or NULL ->
 * memory [B, S, C]. (Encoder-decoder and encoder-only.) */
lt_tensor *lt_transformer_encode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                 const lt_nn_ctx *ctx);

/* Decoder (causal self-attention, and cross-attention over memory for the
 * encoder-decoder; memory NULL for decoder-only): tgt [B, T] ids, tgt_pad
 * [B, T] or NULL, positions starting at pos0 -> logits [B, T, V]. */
lt_tensor *lt_transformer_decode(const lt_transformer *m, const lt_tensor *tgt, const lt_tensor *tgt_pad,
                                 const lt_tensor *memory, const lt_tensor *src_pad, int64_t pos0,
                                 const lt_nn_ctx *ctx);

/* Encoder-only classifier: mean over non-padding positions of the encoder
 * output, then classifier -> [B, n_classes]. */
lt_tensor *lt_transformer_classify(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                   const lt_nn_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* LT_TRANSFORMER_H */
