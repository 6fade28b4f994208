/*
 * nn/nn.h: what models are built from: a named parameter store, layers,
 * attention, positional encodings, losses, initialisers, optimizers, learning-
 * rate schedules and gradient clipping. Each piece mirrors its PyTorch
 * counterpart (linked in each comment) and is checked against PyTorch fixtures.
 *
 * What this is not: a dynamic module tree with virtual dispatch. A model is a
 * plain C struct of layer structs (llama2.c style); its parameters live in one
 * lt_params store under PyTorch state_dict names, so listing, counting,
 * freezing, zeroing, optimizing and checkpointing are single loops.
 *
 * Conventions are those of tensor/tensor.h (errors, ownership words, dims).
 * Shape letters: B batch, T query length, S key length, C channels (d_model),
 * NH query heads, NKV key/value heads, HS head size, V vocabulary.
 *
 * Ownership: lt_params owns every parameter and buffer tensor (created outside
 * any scope; freed by lt_params_free). A layer struct only borrows pointers
 * into the store, so it needs no free of its own. Forward functions return new
 * tensors (scope-owned when a scope is open) like every op.
 *
 * Train/eval: functions that behave differently in training (dropout,
 * attention dropout) take a `const lt_nn_ctx *` giving the mode and the
 * generator to draw from; NULL means evaluation (no dropout). The mode of a
 * whole model is set once on its store, as PyTorch's model.train() /
 * model.eval(): lt_params_train(p, training). Modules that hold state
 * (lt_batch_norm_m) read it from their store at each forward; code passing
 * a ctx builds it with lt_params_ctx(p, gen), so dropout follows the same
 * switch. A new store is in training mode, as a new PyTorch module.
 */
#ifndef LT_NN_H
#define LT_NN_H

#include "autograd/autograd.h"
#include "tensor/tensor.h"
#include "tensor/quant.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lt_nn_ctx {
  bool training;      /* dropout active only when true */
  lt_generator *gen;  /* dropout draws; required when training with p > 0 */
} lt_nn_ctx;

/* ======================================================================== */
/* The parameter store                                                      */
/* ======================================================================== */

typedef enum {
  LT_PARAM_DEFAULT = 0,
  LT_PARAM_BUFFER = 1 << 0,    /* saved and loaded, never trained (no grad) */
  LT_PARAM_NO_DECAY = 1 << 1,  /* excluded from weight decay (norms, biases, embeddings) */
  LT_PARAM_QUANTIZABLE = 1 << 2, /* a matrix read only through lt_linear or lt_embedding (the weights
                                  * of lt_linear_init and lt_embedding_init): lt_params_quantize converts it */
} lt_param_flags;

typedef struct lt_param {
  const char *name;   /* state_dict name, e.g. "encoder.layers.0.self_attn.q_proj.weight" */
  lt_tensor *value;   /* owned by the store; parameters require grad */
  unsigned flags;     /* lt_param_flags */
} lt_param;

typedef struct lt_params lt_params; /* an ordered, named list of lt_param */

LT_API lt_params *lt_params_new(void);           /* returns new; free with lt_params_free */
LT_API void lt_params_free(lt_params *p);        /* frees every tensor in it; NULL is a no-op */
/* Adds value under name (which must be new), taking ownership of value (it is
 * taken out of any scope). Parameters get requires_grad (quantized weights
 * excepted: they have none); buffers do not. */
LT_API lt_status lt_params_add(lt_params *p, const char *name, lt_tensor *value, unsigned flags);
LT_API int lt_params_count(const lt_params *p);
LT_API const lt_param *lt_params_at(const lt_params *p, int i);            /* borrowed; NULL if out of range */
LT_API lt_tensor *lt_params_find(const lt_params *p, const char *name);    /* borrowed; NULL if absent (no error) */
/* Number of scalar parameters (buffers excluded); trainable_only skips frozen ones. */
LT_API int64_t lt_params_numel(const lt_params *p, bool trainable_only);
/* Frees every parameter's .grad. */
LT_API void lt_params_zero_grad(lt_params *p);
/* Freeze (requires_grad false) or unfreeze every parameter whose name starts with prefix. */
LT_API lt_status lt_params_set_requires_grad(lt_params *p, const char *prefix, bool requires_grad);

/* PyTorch's model.double() / model.float(): converts every float parameter
 * and float buffer of p to dtype (a float dtype) in place. The tensor objects
 * keep their identity, so layer structs holding pointers into the store stay
 * valid; their storage, dtype and strides change (contiguous afterwards),
 * their .grad is dropped. Integer and bool buffers are left alone. Refused
 * (LT_ERR_INVALID, nothing changed) if a tensor to convert shares its memory
 * with another tensor (a view of it, one it views, a live graph that saved
 * it) or the user: convert right after building the model. An optimizer made before the conversion refuses to step
 * parameters whose dtype no longer matches its state: make it afterwards (or
 * convert before the first step). On failure nothing changed. */
LT_API lt_status lt_params_to_dtype(lt_params *p, lt_dtype dtype);

/* Weight-only quantization of a loaded model for inference (tensor/quant.h):
 * converts in place (lt_tensor_quantize_) every parameter flagged
 * LT_PARAM_QUANTIZABLE (Linear weights, embedding tables, hence tied and
 * untied output heads) to format f; biases, norms and everything else stay
 * f32. The layer structs keep working (lt_linear and lt_embedding compute
 * with the quantized weights), and the f32 memory of each converted weight
 * is released: the process then holds the quantized bytes only. Inference
 * only: run the model under lt_set_grad_enabled(false); checkpoint saving
 * and lt_params_to_dtype refuse a quantized store. LT_QFORMAT_F32 changes
 * nothing. *bytes_before / *bytes_after (either may be NULL) receive the
 * bytes those weights took before and take after. Errors (checked for
 * every weight before the first is converted, so nothing has changed):
 * LT_ERR_NULL; LT_ERR_STATE if one is already quantized; LT_ERR_DTYPE if
 * one is not f32; LT_ERR_INVALID if one shares its memory with another
 * tensor (a view, a saved graph) or is a view itself; LT_ERR_NUMERIC for a
 * weight that is not finite (Q8_0, Q4_0). LT_ERR_NOMEM part-way leaves
 * the weights converted so far quantized. */
LT_API lt_status lt_params_quantize(lt_params *p, lt_qformat f, size_t *bytes_before, size_t *bytes_after);
/* Builds weights quantized from the start, for loading a model straight into
 * a weight format (models/transformer/load.h's .weights): while f is not
 * LT_QFORMAT_F32 (on this thread), lt_linear_init and lt_embedding_init make
 * each of their 2-d weights (the LT_PARAM_QUANTIZABLE ones, those
 * lt_params_quantize converts) as lt_quantized_zeros(f, ...) (tensor/quant.h):
 * zero weights in format f, never allocated or initialised in f32, no draw
 * from the generator. A loader then writes the file's values into them
 * (lt_tensor_qset_rows_, lt_tensor_qset_blocks_). Biases, norms and every
 * other parameter are built as usual. The model is then as lt_params_quantize
 * leaves one (inference only). Returns the previous format. */
LT_API lt_qformat lt_set_weight_format(lt_qformat f);

/* Copies the values of every entry of src into the entry of dst with the
 * same name (load_state_dict between two models of one configuration),
 * under no-grad. Errors: LT_ERR_NULL; LT_ERR_INVALID naming the first name
 * of either store the other lacks; LT_ERR_SHAPE / LT_ERR_DTYPE naming a pair
 * that differ; LT_ERR_STATE if either holds quantized weights. Nothing is
 * copied unless every pair matches. */
LT_API lt_status lt_params_copy(lt_params *dst, const lt_params *src);
/* True if some parameter of p is quantized (false for NULL). */
LT_API bool lt_params_quantized(const lt_params *p);

/* A model summary to f (PyTorch's print(model) + parameter counts, as
 * torchinfo): one line per entry in registration order (name, shape, dtype,
 * elements, and "buffer" or "frozen" where it applies), then the totals:
 * parameters, trainable parameters, buffer elements, and bytes of all.
 * Borrows p and f. Errors: NULL p or f (LT_ERR_NULL), a write error (LT_ERR_IO). */
LT_API lt_status lt_params_summary(const lt_params *p, FILE *f);

/* Train/eval mode of everything registered in p (PyTorch's model.train(mode)
 * / model.eval()): BatchNorm modules of the store and ctxs made by
 * lt_params_ctx follow it. A new store is in training mode. NULL p: no-op. */
LT_API void lt_params_train(lt_params *p, bool training);
LT_API bool lt_params_training(const lt_params *p); /* false for NULL */
/* The ctx for forward functions of a model in p's mode: {lt_params_training(p),
 * gen}. gen (borrowed) is the dropout generator, needed in training mode when
 * dropout p > 0. */
LT_API lt_nn_ctx lt_params_ctx(const lt_params *p, lt_generator *gen);

/* Joins a prefix and a name with a dot into buf ("encoder.layers" + "0"); an
 * empty prefix gives the name alone. Returns buf (always NUL-terminated). */
LT_API char *lt_name_join(char *buf, size_t size, const char *prefix, const char *name);

/* ======================================================================== */
/* Initialisers (in place, from an explicit generator; under no-grad)        */
/* ======================================================================== */

/* fan_in / fan_out of a weight as torch.nn.init._calculate_fan_in_and_fan_out. */
LT_API lt_status lt_init_xavier_uniform_(lt_generator *g, lt_tensor *w, double gain);
LT_API lt_status lt_init_xavier_normal_(lt_generator *g, lt_tensor *w, double gain);
/* torch.nn.init.kaiming_uniform_(w, a, mode='fan_in', nonlinearity='leaky_relu'),
 * which with a = sqrt(5) is nn.Linear's default weight init. */
LT_API lt_status lt_init_kaiming_uniform_(lt_generator *g, lt_tensor *w, double a);
LT_API lt_status lt_init_normal_(lt_generator *g, lt_tensor *w, double mean, double std);

/* ======================================================================== */
/* Functional ops (differentiable; fused kernels where it pays)             */
/* ======================================================================== */

/* y = x W^T + b: x [..., in], weight [out, in], bias [out] or NULL. */
LT_API lt_tensor *lt_linear(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias);
/* out[i] = lt_linear(x, weights[i], biases ? biases[i] : NULL) for i < n
 * (1 <= n <= LT_QMATRIX_MANY_MAX), the same results: several projections
 * of one x (q, k and v; a gated feed-forward's two). Where every weight is
 * quantized in one format (lt_tensor_quantize_), one
 * lt_qmatrix_linear_many: x quantized once, one parallel region for all
 * (decoding: one thread wake-up instead of n); else one lt_linear each
 * (recorded for autograd as lt_linear is). out[i] new; on an error none is
 * set (NULL) and the status is returned, with lt_linear's errors and
 * LT_ERR_INVALID for n. x, weights, biases borrowed. */
LT_API lt_status lt_linear_many(const lt_tensor *x, int n, const lt_tensor *const *weights,
                                const lt_tensor *const *biases, lt_tensor **out);
/* Over the last dim (size C): weight/bias [C] or NULL (no affine); biased
 * variance and eps inside the sqrt, as PyTorch; eps must be >= 0. */
LT_API lt_tensor *lt_layer_norm(const lt_tensor *x, const lt_tensor *weight, const lt_tensor *bias, double eps);
LT_API lt_tensor *lt_rms_norm(const lt_tensor *x, const lt_tensor *weight, double eps);
/* torch.nn.functional.batch_norm over x [N, C, *] (BatchNorm1d: [N, C] or
 * [N, C, L]; BatchNorm2d: [N, C, H, W]); per-channel statistics over N and
 * the trailing dims. weight, bias, running_mean, running_var: [C] of x's
 * dtype or NULL (the running pair both or neither).
 *   training, or no running stats: normalise with the batch's mean and
 *   biased variance (gradients flow through them); if training and the
 *   running stats are given, update them in place (under no-grad, after
 *   everything that can fail): running = (1 - momentum) * running +
 *   momentum * batch, with the unbiased variance for running_var;
 *   otherwise (evaluation): normalise with running_mean / running_var.
 * y = (x - mean) / sqrt(var + eps) * weight + bias. Errors: x not float or
 * of rank < 2, parameters not [C] of x's dtype, eps < 0, momentum outside
 * [0, 1] (when updating), training with one value per channel (N * spatial
 * == 1, as PyTorch). Returns new. */
LT_API lt_tensor *lt_batch_norm(const lt_tensor *x, lt_tensor *running_mean, lt_tensor *running_var,
                         const lt_tensor *weight, const lt_tensor *bias, bool training, double momentum,
                         double eps);
/* torch.nn.functional.group_norm over x [N, C, *]: the C channels form
 * num_groups groups (num_groups divides C) normalised per sample over the
 * group's channels and trailing dims (biased variance, eps in the sqrt);
 * weight/bias [C] (per channel) or NULL. Returns new. */
LT_API lt_tensor *lt_group_norm(const lt_tensor *x, int64_t num_groups, const lt_tensor *weight, const lt_tensor *bias,
                         double eps);
/* Inverted dropout: zeroes with probability p and scales by 1/(1-p) when
 * ctx->training; otherwise returns a plain copy-free view (p in [0, 1]).
 * Training with p > 0 needs ctx->gen (LT_ERR_INVALID otherwise); p == 1 gives
 * x * 0 (NaN stays NaN). */
LT_API lt_tensor *lt_dropout(const lt_tensor *x, double p, const lt_nn_ctx *ctx);

/* How a loss reduces its pointwise values: the mean over every element, the
 * sum, none (the pointwise tensor), or (lt_kl_div only, refused by the
 * others) the sum divided by the batch size, dim 0's (PyTorch's
 * reduction='batchmean'). */
typedef enum { LT_REDUCTION_MEAN, LT_REDUCTION_SUM, LT_REDUCTION_NONE, LT_REDUCTION_BATCHMEAN } lt_reduction;

/* logits [N, V] (or [..., V]: the class dim is the LAST one, not dim 1 as in
 * PyTorch), targets [N] (or [...]) of i32/i64 class ids. opts NULL means
 * LT_CROSS_ENTROPY_DEFAULTS.
 * Fused with log-softmax. Targets equal to ignore_index contribute nothing;
 * other targets outside [0, V) are an error naming the first one. Mean over
 * zero counted targets gives 0 (not NaN). label_smoothing in [0, 1] as
 * torch.nn.functional.cross_entropy. */
typedef struct lt_cross_entropy_opts {
  int64_t ignore_index;     /* default -100 */
  double label_smoothing;   /* default 0 */
  lt_reduction reduction;   /* default mean */
} lt_cross_entropy_opts;
#define LT_CROSS_ENTROPY_DEFAULTS ((lt_cross_entropy_opts){.ignore_index = -100, .reduction = LT_REDUCTION_MEAN})
LT_API lt_tensor *lt_cross_entropy(const lt_tensor *logits, const lt_tensor *targets, const lt_cross_entropy_opts *opts);
/* The cross entropy of the logits h w^T without them (a tied output head:
 * llm.c's fused classifier): h [..., C] hidden states (N rows), w [V, C]
 * (the embedding), targets [...] as lt_cross_entropy's, opts as
 * lt_cross_entropy's except LT_REDUCTION_NONE (refused). The rows go in
 * chunks of chunk_rows (0: as many as make about 16 Mi logits, 64 MiB in
 * f32): per chunk, logits = h_chunk w^T, the row losses, and, when a
 * gradient is wanted, dlogits (for an output gradient of 1), dh_chunk =
 * dlogits w and dw += dlogits^T h_chunk; so at most two chunks of logits
 * exist at a time, never the N x V logits or their gradient. The forward
 * keeps dh [N, C] and dw [V, C] for the backward, which scales them by the
 * output gradient. Products go through autocast like lt_linear's. The same
 * loss as lt_cross_entropy(lt_linear(h, w, NULL), targets, opts) (sums in
 * double, the same row kernels) and gradients within rounding of its (the
 * products are summed in other groupings; tests/test_recompute.c: 1e-6 of
 * the largest, f32 and bf16 autocast). h and w float of one dtype
 * (f32/f64). Returns new (a 0-d loss). Errors: those of lt_cross_entropy
 * (named "linear_cross_entropy"), w not [V, C] with h's C, dtypes,
 * chunk_rows < 0, reduction none. */
LT_API lt_tensor *lt_linear_cross_entropy(const lt_tensor *h, const lt_tensor *w, const lt_tensor *targets,
                                   const lt_cross_entropy_opts *opts, int64_t chunk_rows);
/* logp [N, V] log-probabilities; same target rules (label_smoothing unused). */
LT_API lt_tensor *lt_nll_loss(const lt_tensor *logp, const lt_tensor *targets, const lt_cross_entropy_opts *opts);
/* Top-k accuracy (a metric, not differentiable): the fraction of rows of
 * scores [N, V] (or [..., V]; f32/f64) whose target (i32/i64 in [0, V), shape
 * [N] or [...]) is among the k highest scores of its row. Ties go to the
 * lower class index, as a stable sort (a target tied with a class before it
 * ranks after it); a row holding NaN counts as wrong. *correct (may be NULL)
 * gets the count, *accuracy the fraction (0 for N == 0). Errors: shapes,
 * dtypes, k < 1, a target outside [0, V) (named). */
LT_API lt_status lt_topk_accuracy(const lt_tensor *scores, const lt_tensor *targets, int64_t k, int64_t *correct,
                           double *accuracy);

/* input and target of equal shapes (no broadcasting); the mean of an empty
 * tensor is NaN, as PyTorch. */
LT_API lt_tensor *lt_mse_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction);

/* More losses (nn/loss_more.c), each torch.nn.functional's, composed of
 * differentiable ops (gradients to every float argument, the targets
 * included). Inputs f32 or f64; input and target of equal shapes (no
 * broadcasting); reduction MEAN (over every element; NaN for an empty input,
 * as PyTorch), SUM or NONE. Returns new (a scalar, or the pointwise losses
 * with NONE); errors name the loss and the shapes.
 *
 * F.binary_cross_entropy_with_logits(input, target, weight, pos_weight):
 *     weight * ((1 - y) x + (1 + (pos_weight - 1) y) softplus(-x))
 * computed stably for any x; weight and pos_weight may be NULL, else they
 * broadcast to the input's shape (pos_weight [C] for input [N, C]). */
LT_API lt_tensor *lt_binary_cross_entropy_with_logits(const lt_tensor *input, const lt_tensor *target, const lt_tensor *weight,
                                               const lt_tensor *pos_weight, lt_reduction reduction);
/* F.l1_loss: |input - target| (gradient 0 where they are equal, as PyTorch). */
LT_API lt_tensor *lt_l1_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction);
/* F.smooth_l1_loss (PyTorch's default beta 1.0): 0.5 d^2 / beta where
 * |d| < beta, else |d| - 0.5 beta; beta 0 is the L1 loss (gradient 0 at
 * d == 0, where torch 1.13 gives -1); beta < 0 refused. */
LT_API lt_tensor *lt_smooth_l1_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction, double beta);
/* F.huber_loss (default delta 1.0): 0.5 d^2 where |d| < delta, else
 * delta (|d| - 0.5 delta); delta must be > 0. */
LT_API lt_tensor *lt_huber_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction, double delta);
/* F.kl_div(input, target, reduction, log_target): input is log
 * probabilities; pointwise target (log target - input), 0 where target is 0
 * (with log_target: exp(target) (target - input)). reduction may also be
 * LT_REDUCTION_BATCHMEAN, the mathematical KL divergence for rows of
 * distributions (PyTorch's MEAN divides by every element, as here). The
 * target's gradient where target is 0 is -input (torch: NaN). */
LT_API lt_tensor *lt_kl_div(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction, bool log_target);
/* F.cosine_embedding_loss(x1, x2, y, margin) (default margin 0): x1, x2
 * [N, D] (y [N]) or [D] (y 0-d), y of 1 and -1 in any float or integer dtype;
 * cos of each row pair over D (eps 1e-12 in each squared norm, as PyTorch),
 * loss 1 - cos where y == 1, max(0, cos - margin) where y == -1, 0 where y is
 * anything else. */
LT_API lt_tensor *lt_cosine_embedding_loss(const lt_tensor *x1, const lt_tensor *x2, const lt_tensor *y, double margin,
                                    lt_reduction reduction);

/* Scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention):
 *   q [B, NH, T, HS], k and v [B, NKV, S, HS] with NH % NKV == 0 (GQA; MQA when
 *   NKV == 1): query head h uses key/value head h / (NH / NKV).
 *   out [B, NH, T, HS] = softmax(q k^T * scale + mask) v.
 * Options: causal (query t sees keys s <= t + (S - T), no T x S mask tensor is
 * made); attn_mask broadcastable to [B, NH, T, S], bool (true = may attend)
 * or float (added to the scores); key_padding_mask [B, S] bool (true = padding,
 * as nn.MultiheadAttention); dropout on the attention weights when training.
 * A query row whose keys are all masked gives zeros (and zero weights), never
 * NaN. A float attn_mask that requires a gradient (T5's learned position
 * bias, lt_relative_position_bias) gets one: the attention is then composed
 * of differentiable ops (nn/attention_bias.c), the fused and unfused kernels
 * keep the rest. If weights is not NULL, the attention weights [B, NH, T, S] are stored
 * there (new). scale <= 0 means 1/sqrt(HS). window > 0 (with causal only): a
 * sliding window, as Mistral's: query t sees the `window` newest keys up to
 * its own, t + S - T - window < s <= t + S - T; the fused path never visits
 * a key tile wholly outside it, so the work grows with T * window, not T * S.
 *
 * Two implementations compute it (docs/attention.md):
 *   fused (FlashAttention-2 style): tiles of 128 queries x 256 keys with an
 *     online softmax; only the row logsumexp [B,NH,T] and the output are
 *     saved for backward, which recomputes the probabilities tile by tile,
 *     so memory grows with T, not T*S. Dropout masks are regenerated from
 *     the generator's Philox counters in backward (never stored): the same
 *     mask bits as the unfused path for the same generator state.
 *   unfused: the [B,NH,T,S] probabilities are materialised and saved (the
 *     reference, and the only path that can return `weights`).
 * impl picks one: LT_ATTENTION_AUTO (0, the default) is fused unless weights
 * are requested or T <= 256 and S <= 256 (one fused tile: unfused there),
 * or the environment variable LT_ATTENTION=fused|unfused says otherwise
 * (for tests and benchmarks; read once per process; docs/architecture.md,
 * "Paths and switches"). The two agree to
 * rounding (1e-5 relative in f32), and each is bit-identical across thread
 * counts. */
typedef enum {
  LT_ATTENTION_AUTO = 0,
  LT_ATTENTION_FUSED = 1,
  LT_ATTENTION_UNFUSED = 2,
} lt_attention_impl;
typedef struct lt_attention_opts {
  bool causal;
  const lt_tensor *attn_mask;
  const lt_tensor *key_padding_mask;
  double dropout_p;
  double scale;
  lt_attention_impl impl; /* LT_ATTENTION_AUTO unless set */
  int64_t window;         /* sliding window (causal only), 0: none */
} lt_attention_opts;
LT_API lt_tensor *lt_scaled_dot_product_attention(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                                           const lt_attention_opts *opts, const lt_nn_ctx *ctx,
                                           lt_tensor **weights);

/* Rotary position embedding (RoPE, Su et al. 2021; GPT-NeoX/LLaMA "rotate
 * half" layout) applied to x [B, NH, T, HS] (HS even) for positions
 * pos0 .. pos0+T-1 with the given base (10000 by default). */
LT_API lt_tensor *lt_rope(const lt_tensor *x, int64_t pos0, double base);

/* RoPE's frequency scaling, as Hugging Face's rope_parameters / rope_scaling
 * (transformers' modeling_rope_utils.py). inv_i = base^(-2i/HS) is the
 * unscaled frequency of pair i:
 *   LT_ROPE_DEFAULT  inv_i (the other fields unused);
 *   LT_ROPE_LINEAR   inv_i / factor (positions divided by factor);
 *   LT_ROPE_LLAMA3   Llama 3.1's: with wavelength w = 2 pi / inv_i,
 *                    L = original_max_len, lo = L / low_freq_factor and
 *                    hi = L / high_freq_factor: w < hi keeps inv_i, w > lo
 *                    takes inv_i / factor, and between them
 *                    (1 - a) inv_i / factor + a inv_i with
 *                    a = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor).
 * Neither changes the attention's scale (transformers' attention_factor is 1
 * for both). */
typedef enum { LT_ROPE_DEFAULT = 0, LT_ROPE_LINEAR = 1, LT_ROPE_LLAMA3 = 2 } lt_rope_type;
typedef struct lt_rope_scaling {
  lt_rope_type type;
  double factor;                         /* linear, llama3: > 0 */
  double low_freq_factor, high_freq_factor; /* llama3: 0 < low < high */
  int64_t original_max_len;              /* llama3: >= 1 */
} lt_rope_scaling;
/* LT_OK when sc (NULL: none) is usable, else LT_ERR_INVALID naming the field. */
LT_API lt_status lt_rope_scaling_check(const lt_rope_scaling *sc);
/* The frequency of pair i (0 <= i < HS/2) under sc (NULL: none). */
LT_API double lt_rope_inv_freq(int64_t i, int64_t HS, double base, const lt_rope_scaling *sc);
/* lt_rope with the frequencies of sc (NULL or LT_ROPE_DEFAULT: lt_rope itself).
 * Errors: those of lt_rope and lt_rope_scaling_check. */
LT_API lt_tensor *lt_rope_scaled(const lt_tensor *x, int64_t pos0, double base, const lt_rope_scaling *sc);

/* Sinusoidal encodings of "Attention Is All You Need" as a [T, C] table
 * (returns new, no grad): PE[t, 2i] = sin(t / 10000^(2i/C)), PE[t, 2i+1] = cos(...). */
LT_API lt_tensor *lt_sinusoidal_table(lt_dtype dtype, int64_t T, int64_t C);

/* T5's relative positions (nn/relpos.c gives the formula;
 * transformers' T5Attention._relative_position_bucket): the bucket of the
 * relative position r = key - query, bidirectional (an encoder: r > 0 and
 * r <= 0 get half the buckets each) or unidirectional (a causal decoder:
 * only max(-r, 0) counts), with num_buckets buckets, the first half of them
 * (of each direction) exact, the rest logarithmic up to max_distance (and
 * beyond: the last bucket). No checks: the caller's values are those that
 * lt_relative_position_buckets accepts. */
LT_API int64_t lt_relative_position_bucket(int64_t r, bool bidirectional, int64_t num_buckets, int64_t max_distance);
/* The buckets of queries q0 .. q0+T-1 against keys 0 .. S-1 (returns new
 * [T, S] i64; entry [t, s] is the bucket of s - (q0 + t)). Errors
 * (LT_ERR_INVALID): T or S outside [1, 2^24], T * S over 2^31, q0 < 0,
 * fewer than 4 (bidirectional) or 2 buckets, more than 65536, max_distance
 * not above the exact buckets (num_buckets / 4 bidirectional, / 2 not). */
LT_API lt_tensor *lt_relative_position_buckets(int64_t T, int64_t S, int64_t q0, bool bidirectional, int64_t num_buckets,
                                        int64_t max_distance);
/* The learned relative-position bias of T5: table [num_buckets, NH] (a
 * parameter, borrowed) looked up at the buckets above -> [1, NH, T, S] (new;
 * a view of the lookup, differentiable in table), to pass as
 * lt_attention_opts.attn_mask (float, added to the scores). Errors: table
 * not a 2-d float tensor (LT_ERR_SHAPE), those of
 * lt_relative_position_buckets. */
LT_API lt_tensor *lt_relative_position_bias(const lt_tensor *table, int64_t T, int64_t S, int64_t q0, bool bidirectional,
                                     int64_t max_distance);

/* ======================================================================== */
/* Layers: structs borrowing parameters from an lt_params store             */
/* ======================================================================== */
/* Module structs end in _m where the functional op has the plain name
 * (lt_linear_m uses lt_linear). Each _init registers its parameters under `name` (e.g. "encoder.layers.0.linear1")
 * with PyTorch's default initialisation drawn from g, and fills the struct. */

typedef struct lt_linear_m {
  lt_tensor *weight;  /* [out, in] */
  lt_tensor *bias;    /* [out] or NULL */
} lt_linear_m;
LT_API lt_status lt_linear_init(lt_linear_m *m, lt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                         lt_generator *g);
LT_API lt_tensor *lt_linear_forward(const lt_linear_m *m, const lt_tensor *x);

typedef struct lt_embedding_m {
  lt_tensor *weight;    /* [V, C], N(0,1) init as nn.Embedding */
  int64_t padding_idx;  /* row that gets no gradient (zero-initialised), or -1 */
} lt_embedding_m;
LT_API lt_status lt_embedding_init(lt_embedding_m *m, lt_params *p, const char *name, int64_t num, int64_t dim,
                            int64_t padding_idx, lt_generator *g);
LT_API lt_tensor *lt_embedding_forward(const lt_embedding_m *m, const lt_tensor *ids);

typedef struct lt_layer_norm_m {
  lt_tensor *weight, *bias;  /* [C] each, or NULL without affine */
  double eps;
} lt_layer_norm_m;
LT_API lt_status lt_layer_norm_init(lt_layer_norm_m *m, lt_params *p, const char *name, int64_t C, double eps,
                             bool affine);
LT_API lt_tensor *lt_layer_norm_forward(const lt_layer_norm_m *m, const lt_tensor *x);

typedef struct lt_rms_norm_m {
  lt_tensor *weight;  /* [C] */
  double eps;
} lt_rms_norm_m;
LT_API lt_status lt_rms_norm_init(lt_rms_norm_m *m, lt_params *p, const char *name, int64_t C, double eps);
LT_API lt_tensor *lt_rms_norm_forward(const lt_rms_norm_m *m, const lt_tensor *x);

/* nn.BatchNorm1d / nn.BatchNorm2d (one module: x [N, C, *]). Registers
 * "<name>.weight" (ones) and "<name>.bias" (zeros) if affine, and the
 * buffers "<name>.running_mean" (zeros), "<name>.running_var" (ones) and
 * "<name>.num_batches_tracked" (0-d i64, 0) if track_running_stats: PyTorch's
 * state_dict names, saved and loaded by checkpoints, never optimized or
 * clipped. The forward follows the mode of the store it was registered in
 * (lt_params_train): training normalises with batch statistics and, when
 * tracking, adds 1 to num_batches_tracked and updates the running stats with
 * momentum, or with 1 / num_batches_tracked when cumulative_average
 * (PyTorch's momentum=None); evaluation uses the running stats (the batch's
 * when not tracking). */
typedef struct lt_batch_norm_opts {
  double eps;               /* default 1e-5 */
  double momentum;          /* default 0.1; unused with cumulative_average */
  bool cumulative_average;  /* momentum=None: a cumulative moving average */
  bool affine;              /* default true */
  bool track_running_stats; /* default true */
} lt_batch_norm_opts;
#define LT_BATCH_NORM_DEFAULTS ((lt_batch_norm_opts){.eps = 1e-5, .momentum = 0.1, .affine = true, \
                                                     .track_running_stats = true})
typedef struct lt_batch_norm_m {
  lt_tensor *weight, *bias;               /* [C] each, or NULL without affine */
  lt_tensor *running_mean, *running_var;  /* [C] buffers, or NULL without tracking */
  lt_tensor *num_batches_tracked;         /* 0-d i64 buffer, or NULL without tracking */
  lt_batch_norm_opts opts;
  const lt_params *store;                 /* borrowed: whose mode the forward follows */
} lt_batch_norm_m;
/* opts NULL: LT_BATCH_NORM_DEFAULTS. C >= 1. */
LT_API lt_status lt_batch_norm_init(lt_batch_norm_m *m, lt_params *p, const char *name, int64_t C,
                             const lt_batch_norm_opts *opts);
LT_API lt_tensor *lt_batch_norm_forward(const lt_batch_norm_m *m, const lt_tensor *x);

/* nn.GroupNorm(num_groups, C, eps, affine): "<name>.weight" (ones) and
 * "<name>.bias" (zeros) if affine. */
typedef struct lt_group_norm_m {
  int64_t num_groups;
  lt_tensor *weight, *bias; /* [C] each, or NULL without affine */
  double eps;
} lt_group_norm_m;
LT_API lt_status lt_group_norm_init(lt_group_norm_m *m, lt_params *p, const char *name, int64_t num_groups, int64_t C,
                             double eps, bool affine);
LT_API lt_tensor *lt_group_norm_forward(const lt_group_norm_m *m, const lt_tensor *x);

typedef enum { LT_ACT_RELU, LT_ACT_GELU, LT_ACT_GELU_TANH, LT_ACT_SILU } lt_activation;
LT_API lt_tensor *lt_activation_forward(lt_activation act, const lt_tensor *x);

/* Feed-forward block: two-layer (linear1 -> act -> dropout -> linear2, as in
 * nn.TransformerEncoderLayer, names "linear1"/"linear2"), or gated (swiglu
 * true: w2(act(w1 x) * w3 x), LLaMA names "w1"/"w2"/"w3"): SwiGLU with
 * LT_ACT_SILU, GEGLU with LT_ACT_GELU_TANH (T5 v1.1's "gated-gelu") or
 * LT_ACT_GELU, ReGLU with LT_ACT_RELU. */
typedef struct lt_ffn {
  bool swiglu;
  lt_activation act;
  double dropout;
  lt_linear_m linear1, linear2, linear3; /* linear3 only for SwiGLU */
} lt_ffn;
LT_API lt_status lt_ffn_init(lt_ffn *m, lt_params *p, const char *name, int64_t C, int64_t d_ff, lt_activation act,
                      bool swiglu, bool bias, double dropout, lt_generator *g);
LT_API lt_tensor *lt_ffn_forward(const lt_ffn *m, const lt_tensor *x, const lt_nn_ctx *ctx);

/* Multi-head attention with separate q/k/v/out projections ("q_proj",
 * "k_proj", "v_proj", "out_proj"), NKV key/value heads (GQA/MQA), optional
 * RoPE on q and k. Self-attention: x_q == x_kv. Cross-attention: x_kv is the
 * encoder output. x_q [B, T, C], x_kv [B, S, C] -> [B, T, C].
 *
 * RoPE is off after lt_mha_init (rope false, rope_base 10000, LLaMA's and
 * Hugging Face's default theta). lt_mha_set_rope(m, base) turns it on: q and
 * k (after their projections, per head) go through lt_rope (the GPT-NeoX /
 * LLaMA "rotate half" layout, nn/rope.c), q at positions pos0 + t and k at
 * pos0 + (T - S) + s; v is not rotated. It adds no parameter, so the
 * state_dict is the same with and without. For a Llama block:
 *     lt_mha_init(&attn, p, "self_attn", C, NH, NKV, false, 0.0, g);
 *     lt_mha_set_rope(&attn, 10000.0);  // or 500000.0 (Llama 3's rope_theta)
 * Setting the fields by hand is the same (they are read at each forward). */
typedef struct lt_mha {
  int64_t C, NH, NKV, HS; /* model width, query heads, key/value heads, head size C / NH */
  bool rope;              /* RoPE on q and k; default false */
  double rope_base;       /* RoPE theta: frequency i is rope_base^(-2i/HS); default 10000 */
  lt_rope_scaling rope_scaling; /* RoPE's frequency scaling; default none (zeroed: LT_ROPE_DEFAULT) */
  double dropout;         /* on the attention weights, in training mode only */
  double scale;           /* of q k^T: 0 (the default) is 1/sqrt(HS); T5 uses 1 (its q_proj is scaled instead) */
  lt_linear_m q_proj, k_proj, v_proj, out_proj; /* [C, C], [NKV*HS, C], [NKV*HS, C], [C, C] */
} lt_mha;
LT_API lt_status lt_mha_init(lt_mha *m, lt_params *p, const char *name, int64_t C, int64_t NH, int64_t NKV, bool bias,
                      double dropout, lt_generator *g);
/* lt_mha_init with biases on q_proj, k_proj and v_proj when qkv_bias, and on
 * out_proj when out_bias (Qwen2's attention: qkv_bias true, out_bias false).
 * lt_mha_init(..., bias, ...) is this with both set to bias. */
LT_API lt_status lt_mha_init_biases(lt_mha *m, lt_params *p, const char *name, int64_t C, int64_t NH, int64_t NKV,
                             bool qkv_bias, bool out_bias, double dropout, lt_generator *g);
/* Turns RoPE on with theta base (> 0 and finite); the head size must be even.
 * LT_ERR_INVALID naming the value otherwise, m unchanged. */
LT_API lt_status lt_mha_set_rope(lt_mha *m, double base);
/* opts: causal / masks as in lt_scaled_dot_product_attention (dropout_p and
 * scale are taken from the module: m->dropout, m->scale); borrowed, and may be NULL for no mask,
 * not causal. pos0: position of the first query (RoPE). */
LT_API lt_tensor *lt_mha_forward(const lt_mha *m, const lt_tensor *x_q, const lt_tensor *x_kv,
                          const lt_attention_opts *opts, int64_t pos0, const lt_nn_ctx *ctx,
                          lt_tensor **weights);

/* A key/value cache for one lt_mha (one layer's self- or cross-attention),
 * for incremental decoding: the keys and values of the positions seen so far,
 * so that each new token costs one position instead of the whole prefix.
 *   k, v  [B, NKV, rows, HS] each (k after RoPE), owned by the cache
 *         (outside any scope), allocated at the first append in the dtype of
 *         the projections; row i holds position off + i, rows [0, len - off)
 *         are filled. Without a window rows = cap and off = 0. With a
 *         sliding window W (the self-attention's opts->window, fixed at the
 *         first append) the cache keeps only what later queries can see:
 *         the last W - 1 positions before each step's new ones, in about 2W
 *         rows (more only while one step appends more than W positions).
 * Ownership: the caller owns the struct (on the stack or in a model's state);
 * lt_kv_cache_init makes it empty, lt_kv_cache_free frees the tensors (and
 * leaves it empty, ready for reuse). A cache is inference-only (no autograd). */
typedef struct lt_kv_cache {
  lt_tensor *k, *v;  /* [B, NKV, rows, HS] or NULL before the first append */
  int64_t cap;       /* positions it can take in all (>= 1) */
  int64_t len;       /* positions seen */
  int64_t off;       /* the position of row 0 (> 0 only with a window) */
  int64_t window;    /* the sliding window it keeps (0: all positions) */
} lt_kv_cache;
/* Empty cache for up to cap positions (LT_ERR_INVALID if cap < 1). */
LT_API lt_status lt_kv_cache_init(lt_kv_cache *c, int64_t cap);
LT_API void lt_kv_cache_free(lt_kv_cache *c); /* NULL is a no-op */
/* Beam search: row i of the cache becomes old row rows[i] (rows: 1-d i32/i64
 * [B'] with entries in [0, B); B' may differ from B). Same for an empty cache
 * (nothing to do). On failure the cache is unchanged. */
LT_API lt_status lt_kv_cache_reorder(lt_kv_cache *c, const lt_tensor *rows);

/* lt_mha_forward with a cache. x_kv [B, Tn, C] (or NULL: no new keys) is
 * projected to Tn new keys/values that are appended to the cache (RoPE keys at
 * positions pos0 + T - Tn + j, the last new key aligned with the last query);
 * then the T queries of x_q [B, T, C] (RoPE at pos0 + t) attend to all
 * cache->len keys, with causal alignment as lt_scaled_dot_product_attention
 * (query t sees keys s <= t + len - T; opts->window > 0: also s > t + len -
 * T - window, the cache then keeping only those, above). opts->key_padding_mask,
 * if given, covers all positions ([B, len], len after the append).
 *   self-attention step:  x_kv = x_q, opts->causal, pos0 = cache->len before;
 *   cross-attention:      x_kv = memory on the first call, NULL afterwards.
 * The same values as lt_mha_forward on the whole sequence (up to rounding).
 * Runs under no-grad, without dropout. Errors: cache full (len + Tn > cap),
 * a batch or dtype differing from the cache's, a window other than the
 * cache's, no keys at all; the cache is unchanged on failure (a window's
 * cache may have dropped positions no later query sees). Returns new
 * [B, T, C]. */
LT_API lt_tensor *lt_mha_forward_cached(const lt_mha *m, const lt_tensor *x_q, const lt_tensor *x_kv, lt_kv_cache *cache,
                                 const lt_attention_opts *opts, int64_t pos0);

/* ======================================================================== */
/* Optimizers                                                               */
/* ======================================================================== */

typedef enum { LT_OPTIM_SGD, LT_OPTIM_ADAM, LT_OPTIM_ADAMW } lt_optim_kind;

typedef struct lt_optim_config {
  lt_optim_kind kind;
  double lr;
  double momentum, dampening; /* SGD */
  bool nesterov;              /* SGD */
  double beta1, beta2, eps;   /* Adam, AdamW */
  double weight_decay;        /* L2 for SGD/Adam, decoupled for AdamW */
  bool decay_all;             /* false: LT_PARAM_NO_DECAY parameters get weight_decay 0 */
} lt_optim_config;
/* PyTorch's defaults for each kind (lr 1e-3; AdamW weight_decay 0.01). */
LT_API lt_optim_config lt_optim_defaults(lt_optim_kind kind);
/* Names of the kinds, the one table for checkpoints and command lines:
 * "sgd", "adam", "adamw". _name returns a static string ("unknown" out of
 * range); _parse sets *out from a name, or fails with LT_ERR_INVALID listing
 * the names (LT_ERR_NULL for a NULL s), *out untouched. */
LT_API const char *lt_optim_kind_name(lt_optim_kind kind);
LT_API lt_status lt_optim_kind_parse(const char *s, lt_optim_kind *out);

typedef struct lt_optimizer lt_optimizer;
/* Optimizes every trainable parameter of p (borrowed: p must outlive it). Returns new. */
LT_API lt_optimizer *lt_optimizer_new(lt_params *p, const lt_optim_config *cfg);
LT_API void lt_optimizer_free(lt_optimizer *o);
/* One update from the parameters' .grad (parameters without .grad are skipped,
 * as PyTorch, and their "step" is not advanced). Runs under no-grad. Fails,
 * changing nothing, if a .grad's shape differs from its parameter's
 * (LT_ERR_SHAPE) or a parameter's dtype from its state's (LT_ERR_DTYPE: the
 * store was converted by lt_params_to_dtype after the state was made). */
LT_API lt_status lt_optimizer_step(lt_optimizer *o);
LT_API void lt_optimizer_set_lr(lt_optimizer *o, double lr);
LT_API double lt_optimizer_get_lr(const lt_optimizer *o);
LT_API int64_t lt_optimizer_step_count(const lt_optimizer *o); /* lt_optimizer_step calls */
/* Per-parameter state by name, as PyTorch's optimizer.state[param]:
 * "momentum_buffer" (SGD with momentum), "exp_avg", "exp_avg_sq" and "step"
 * (Adam/AdamW). "step" is a 0-d i64 tensor: the updates applied to that
 * parameter, which its bias corrections use (a step that finds the parameter
 * without .grad does not advance it). State is created at a parameter's first
 * update. Borrowed (writable: checkpoint loaders fill it); NULL if absent. */
LT_API lt_tensor *lt_optimizer_state(const lt_optimizer *o, const char *param_name, const char *state_name);
/* For loading a checkpoint, atomically (on failure nothing changed): sets the
 * step count to step_count, drops every parameter's state, and gives each of
 * the n named parameters zero state with step 0, which the loader then fills
 * through lt_optimizer_state ("step" included). Every name must be a
 * parameter the optimizer updates (LT_ERR_INVALID otherwise). */
LT_API lt_status lt_optimizer_reset_state(lt_optimizer *o, int64_t step_count, int n, const char *const *param_names);
/* The largest step count and per-parameter "step" an optimizer accepts from
 * outside (2^53: exact in the double its bias corrections use; at a million
 * steps per second a run reaches it after 285 years). Larger values would
 * overflow the int64 counters (a crafted checkpoint with INT64_MAX). */
#define LT_OPTIM_MAX_STEP ((int64_t)1 << 53)
/* Checks values before a loader restores them as state state_name
 * ("momentum_buffer", "exp_avg", "exp_avg_sq" or "step"): n elements of
 * dtype at data (borrowed; nothing changes). The moments must be finite
 * (LT_ERR_NUMERIC), exp_avg_sq >= 0 (LT_ERR_INVALID: a negative second
 * moment makes sqrt NaN), a step in [0, LT_OPTIM_MAX_STEP] (LT_ERR_INVALID);
 * an unknown state name or dtype is LT_ERR_INVALID. The message names what
 * (e.g. the dataset holding the values), the flat index, the value and the
 * allowed range. */
LT_API lt_status lt_optim_check_state(const char *state_name, lt_dtype dtype, const void *data, int64_t n,
                               const char *what);
/* The parameters the optimizer updates, in its order (the store's non-buffer
 * entries when it was made): their number, and the i-th (borrowed; NULL out
 * of range) with its name (borrowed from the store) in *name if name is not
 * NULL. */
LT_API int lt_optimizer_param_count(const lt_optimizer *o);
LT_API lt_tensor *lt_optimizer_param(const lt_optimizer *o, int i, const char **name);
/* Bytes of optimizer state held now (moments, momentum buffers, steps). */
LT_API int64_t lt_optimizer_state_bytes(const lt_optimizer *o);
/* ZeRO-1 (dist/dist.h's lt_dist_zero sets it): lt_optimizer_step updates only
 * the parameters [first, first + count) of the optimizer's order, as if the
 * others had no .grad (the call is still counted), and the state of every
 * other parameter is dropped now. (0, lt_optimizer_param_count) is the
 * default: all. LT_ERR_INVALID for a range outside [0, count). Parameters
 * given state outside the shard later (a loader, lt_optimizer_ensure_state)
 * keep it until the next set_shard. */
LT_API lt_status lt_optimizer_set_shard(lt_optimizer *o, int first, int count);
LT_API void lt_optimizer_get_shard(const lt_optimizer *o, int *first, int *count);
/* Gives the parameter param_name zero state (step 0) if it has none and the
 * optimizer keeps state (a gatherer or loader then fills it through
 * lt_optimizer_state); a no-op if it has state. LT_ERR_INVALID for a name the
 * optimizer does not update. */
LT_API lt_status lt_optimizer_ensure_state(lt_optimizer *o, const char *param_name);
/* Older, coarser restore: step > 0 creates every missing state tensor as
 * zeros and sets the step count and every parameter's step to `step`; step
 * == 0 drops all state. Exact only if every parameter was updated at every
 * step (prefer lt_optimizer_reset_state). */
LT_API lt_status lt_optimizer_set_step_count(lt_optimizer *o, int64_t step);

/* ======================================================================== */
/* Learning-rate schedules and gradient clipping                            */
/* ======================================================================== */

typedef enum {
  LT_SCHED_CONSTANT,        /* base_lr */
  LT_SCHED_WARMUP_LINEAR,   /* linear 0 -> base_lr over warmup, then linear to min_lr at total */
  LT_SCHED_WARMUP_COSINE,   /* linear warmup, then cosine to min_lr at total */
  LT_SCHED_NOAM,            /* "Attention Is All You Need": scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) */
  LT_SCHED_STEP,            /* base_lr * gamma^floor((step - 1) / step_size), as StepLR */
} lt_schedule_kind;

typedef struct lt_schedule {
  lt_schedule_kind kind;
  double base_lr, min_lr, gamma, scale;
  int64_t warmup, total, step_size, d_model;
} lt_schedule;
/* The learning rate for a 1-based step. */
LT_API double lt_schedule_lr(const lt_schedule *s, int64_t step);
/* Names of the kinds, the one table for checkpoints and command lines:
 * "constant", "linear", "cosine", "noam", "step". _name returns a static
 * string ("unknown" out of range); _parse sets *out from a name, and also
 * accepts "warmup_linear" and "warmup_cosine" (the names checkpoints were
 * written with before the table was shared), or fails with LT_ERR_INVALID
 * listing the names (LT_ERR_NULL for a NULL s), *out untouched. */
LT_API const char *lt_schedule_kind_name(lt_schedule_kind kind);
LT_API lt_status lt_schedule_kind_parse(const char *s, lt_schedule_kind *out);

/* torch.nn.utils.clip_grad_norm_: scales all grads so their global L2 norm is
 * at most max_norm; stores the norm before clipping in *total_norm. */
LT_API lt_status lt_clip_grad_norm(lt_params *p, double max_norm, double *total_norm);
LT_API lt_status lt_clip_grad_value(lt_params *p, double clip_value);

#ifdef __cplusplus
}
#endif
#endif /* LT_NN_H */
