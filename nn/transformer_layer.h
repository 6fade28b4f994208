/*
 * nn/transformer_layer.h: reusable Transformer layers that take embeddings,
 * PyTorch's nn.TransformerEncoderLayer and nn.TransformerDecoderLayer
 * (https://pytorch.org/docs/stable/generated/torch.nn.TransformerEncoderLayer.html)
 * with every option of the flagship model (models/transformer), which is
 * built from them:
 *
 *   post-norm (norm_first false, PyTorch's default):
 *     x = norm1(x + dropout1(self_attn(x)))
 *     x = norm2(x + dropout2(cross_attn(x, memory)))   (decoder layer)
 *     x = normN(x + dropoutN(ffn(x)))
 *   pre-norm (norm_first true):
 *     x = x + dropout1(self_attn(norm1(x)))
 *     x = x + dropout2(cross_attn(norm2(x), memory))   (decoder layer)
 *     x = x + dropoutN(ffn(normN(x)))
 * normN is norm2 in an encoder layer and norm3 in a decoder layer, as PyTorch.
 *
 * Options beyond PyTorch's layer: RMSNorm in place of LayerNorm, SwiGLU
 * feed-forward (or any gated one: GEGLU with GELU_TANH, T5 v1.1's), grouped-query
 * attention (n_kv_heads), RoPE on the self-attention (with its frequency
 * scaling), no biases, or biases on q, k and v only (qkv_bias), an attention
 * scale other than 1/sqrt(HS) (attn_scale), and an additive float attn_mask
 * that carries a gradient (T5's learned relative-position bias). Masks (causal, key padding, attn_mask) are
 * lt_attention_opts, passed per call as PyTorch's src_mask /
 * src_key_padding_mask / is_causal.
 *
 * Parameter names (under the layer's name, e.g. "encoder.layers.0"):
 *   self_attn.{q,k,v,out}_proj.{weight,bias}   (lt_mha: four Linears, not
 *                                               PyTorch's packed in_proj_weight)
 *   cross_attn.{q,k,v,out}_proj.{weight,bias}  (decoder layer; PyTorch's multihead_attn)
 *   linear1.{weight,bias}, linear2.{weight,bias} (SwiGLU: w1, w2, w3)
 *   norm1, norm2, norm3 (decoder layer) .{weight,bias} (RMSNorm: weight only)
 * registered in that order (self_attn, [cross_attn], FFN, norms), which fixes
 * the draws from the generator. A PyTorch state_dict maps over by splitting
 * in_proj_weight/in_proj_bias into q, k, v and renaming multihead_attn to
 * cross_attn (tests/fixtures/make_transformer_layer_fixtures.py does it).
 *
 * Ownership: as every nn/ module, the struct borrows its parameters from the
 * lt_params store given to _init (the store owns them; the struct needs no
 * free); forward functions return new tensors. A layer cache
 * (lt_transformer_layer_cache) is the caller's struct; lt_transformer_layer_cache_free frees
 * its tensors.
 *
 * What this is not: a stack (a model loops over its layers, as
 * models/transformer/transformer.c and examples/vit_fashion_mnist.c do),
 * nor embeddings or positions (the caller adds them to x), nor PyTorch's
 * inference fast path.
 *
 * Shapes: B batch, T the layer's sequence length, S the memory's length,
 * C d_model.
 */
#ifndef LT_NN_TRANSFORMER_LAYER_H
#define LT_NN_TRANSFORMER_LAYER_H

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A normalisation chosen at build time: LayerNorm (weight, bias) or RMSNorm
 * (weight), "<name>.weight" [C] and "<name>.bias" [C]. */
typedef enum { LT_NORM_LAYER = 0, LT_NORM_RMS = 1 } lt_norm_kind;
typedef struct lt_norm_m {
  lt_norm_kind kind;
  lt_layer_norm_m ln; /* LT_NORM_LAYER */
  lt_rms_norm_m rn;   /* LT_NORM_RMS */
} lt_norm_m;
/* Registers a LayerNorm (affine) or an RMSNorm of size C under name.
 * Errors: those of lt_layer_norm_init / lt_rms_norm_init, an unknown kind. */
LT_API lt_status lt_norm_init(lt_norm_m *m, lt_params *p, const char *name, lt_norm_kind kind, int64_t C, double eps);
/* x [..., C] -> [..., C] (new). */
LT_API lt_tensor *lt_norm_forward(const lt_norm_m *m, const lt_tensor *x);

/* The options of a layer. LT_TRANSFORMER_LAYER_DEFAULTS(C, NH) gives
 * PyTorch's nn.TransformerEncoderLayer(d_model=C, nhead=NH) defaults:
 * dim_feedforward 2048, dropout 0.1, ReLU, LayerNorm eps 1e-5, post-norm,
 * biases; plus n_kv_heads = NH (plain multi-head), no RoPE, no SwiGLU. */
typedef struct lt_transformer_layer_opts {
  int64_t d_model;      /* C */
  int64_t n_heads;      /* NH, divides C */
  int64_t n_kv_heads;   /* NKV (GQA; 1 = MQA), divides NH */
  int64_t d_ff;         /* feed-forward hidden size (dim_feedforward) */
  double dropout;       /* dropout1/2/3, attention weights, FFN hidden; in [0, 1] */
  lt_activation act;    /* RELU, GELU (erf), GELU_TANH; SILU with swiglu */
  bool swiglu;          /* gated FFN w2(act(w1 x) * w3 x) (names w1, w2, w3): SwiGLU with SiLU, GEGLU with GELU_TANH */
  bool norm_first;      /* pre-norm (PyTorch's norm_first) */
  lt_norm_kind norm;    /* LayerNorm or RMSNorm */
  double norm_eps;      /* layer_norm_eps, >= 0 */
  bool bias;            /* biases on every Linear (LayerNorm keeps its own) */
  bool rope;            /* RoPE on the self-attention's q and k (not on cross-attention) */
  double rope_base;     /* RoPE base (10000) */
  lt_rope_scaling rope_scaling; /* RoPE's frequency scaling (zeroed: none) */
  bool qkv_bias;        /* with bias false: biases on the attention's q, k, v projections only (Qwen2) */
  double attn_scale;    /* every attention's q k^T scale (lt_mha's scale): 0 is 1/sqrt(HS), T5's is 1 */
} lt_transformer_layer_opts;
#define LT_TRANSFORMER_LAYER_DEFAULTS(C, NH)                                                                 \
  ((lt_transformer_layer_opts){.d_model = (C), .n_heads = (NH), .n_kv_heads = (NH), .d_ff = 2048,           \
                               .dropout = 0.1, .act = LT_ACT_RELU, .swiglu = false, .norm_first = false,     \
                               .norm = LT_NORM_LAYER, .norm_eps = 1e-5, .bias = true, .rope = false,         \
                               .rope_base = 10000.0})

/* What a layer recomputes in its backward instead of keeping
 * (autograd/recompute.h; `train --recompute`): nothing, each attention
 * sublayer (norm, projections, attention, dropout, residual: its
 * activations are dropped, the FFN's kept), or the whole layer (only its
 * input is kept). The gradients are the same bits in every mode. */
typedef enum { LT_RECOMPUTE_NONE = 0, LT_RECOMPUTE_ATTENTION = 1, LT_RECOMPUTE_LAYER = 2 } lt_recompute_mode;
LT_API const char *lt_recompute_mode_name(lt_recompute_mode m); /* "none", "attention", "layer"; borrowed */
LT_API lt_status lt_recompute_mode_parse(const char *s, lt_recompute_mode *out); /* LT_ERR_INVALID naming the choices */

/* One layer: an encoder layer (has_cross false) or a decoder layer. */
typedef struct lt_transformer_layer {
  lt_transformer_layer_opts opts;
  bool has_cross;
  lt_mha self_attn;            /* C -> C */
  lt_mha cross_attn;           /* decoder layer only */
  lt_ffn ffn;                  /* linear1 [d_ff, C], linear2 [C, d_ff] (SwiGLU: w1, w2, w3) */
  lt_norm_m norm1, norm2, norm3; /* norm3: decoder layer only */
  lt_recompute_mode recompute; /* LT_RECOMPUTE_NONE after init; the caller may set it (training forward only) */
} lt_transformer_layer;
typedef lt_transformer_layer lt_transformer_encoder_layer;
typedef lt_transformer_layer lt_transformer_decoder_layer;

/* Builds the layer under name (e.g. "encoder.layers.0"), drawing from g
 * (nn.Linear's default init for every projection). opts NULL is an error.
 * Errors (LT_ERR_INVALID naming the field): sizes < 1, n_heads not dividing
 * d_model or n_kv_heads not dividing n_heads, dropout outside [0, 1], an
 * unknown activation or norm, swiglu without SiLU, RoPE with an odd head
 * size or a base that is not finite and > 0, norm_eps < 0. On failure
 * nothing changed: the store, the generator and *m are as before. */
LT_API lt_status lt_transformer_encoder_layer_init(lt_transformer_layer *m, lt_params *p, const char *name,
                                            const lt_transformer_layer_opts *opts, lt_generator *g);
LT_API lt_status lt_transformer_decoder_layer_init(lt_transformer_layer *m, lt_params *p, const char *name,
                                            const lt_transformer_layer_opts *opts, lt_generator *g);

/* Encoder layer (or a decoder layer without memory: GPT-style): x [B, T, C]
 * -> [B, T, C] (new). self_mask: causal / key_padding_mask [B, T] / attn_mask
 * as lt_scaled_dot_product_attention (borrowed; NULL = none); its dropout_p
 * and scale are ignored (the layer's dropout, 1/sqrt(HS)). pos0: position of
 * x's first token (RoPE only). ctx: training mode and dropout generator (NULL
 * = evaluation). Errors: x not [B, T, C] float of the layer's dtype. */
LT_API lt_tensor *lt_transformer_encoder_layer_forward(const lt_transformer_layer *m, const lt_tensor *x,
                                                const lt_attention_opts *self_mask, int64_t pos0,
                                                const lt_nn_ctx *ctx);
/* Decoder layer: x [B, T, C], memory [B, S, C] (the encoder's output) ->
 * [B, T, C] (new). self_mask as above (usually causal); mem_mask: the
 * cross-attention's key_padding_mask [B, S] / attn_mask (NULL = none).
 * Errors: as the encoder layer, memory NULL or not [B, S, C], a layer
 * without cross-attention. */
LT_API lt_tensor *lt_transformer_decoder_layer_forward(const lt_transformer_layer *m, const lt_tensor *x,
                                                const lt_tensor *memory, const lt_attention_opts *self_mask,
                                                const lt_attention_opts *mem_mask, int64_t pos0,
                                                const lt_nn_ctx *ctx);

/* ---- incremental decoding ----------------------------------------------------- */
/* A layer's key/value caches: self-attention (positions fed so far) and
 * cross-attention (the memory, projected once at the first step). */
typedef struct lt_transformer_layer_cache {
  lt_kv_cache self;
  lt_kv_cache cross;
} lt_transformer_layer_cache;
/* Empty caches: self for up to cap positions (cap >= 1); cross sized from the
 * memory at the first step. */
LT_API lt_status lt_transformer_layer_cache_init(lt_transformer_layer_cache *c, int64_t cap);
LT_API void lt_transformer_layer_cache_free(lt_transformer_layer_cache *c); /* frees the tensors; NULL is a no-op */

/* One incremental step of an encoder layer used causally or of a decoder
 * layer (lt_mha_forward_cached): x [B, T, C] holds the new positions
 * pos0 .. pos0+T-1 (pos0 = c->self.len), memory [B, S, C] is read while
 * c->cross is empty (may be NULL afterwards; ignored by a layer without
 * cross-attention). Inference only (no-grad, no dropout). The same values
 * as the whole-sequence forward (up to rounding). On failure the caches may
 * hold the new positions of this step: the caller restores c->self.len /
 * c->cross.len (lt_kv_cache holds the lengths). Returns new [B, T, C]. */
LT_API lt_tensor *lt_transformer_layer_forward_cached(const lt_transformer_layer *m, const lt_tensor *x,
                                               const lt_tensor *memory, lt_transformer_layer_cache *c,
                                               const lt_attention_opts *self_mask,
                                               const lt_attention_opts *mem_mask, int64_t pos0);

#ifdef __cplusplus
}
#endif
#endif /* LT_NN_TRANSFORMER_LAYER_H */
