/*
 * nn/transformer_layer.c: the Transformer encoder and decoder layers of
 * nn/transformer_layer.h (PyTorch's nn.TransformerEncoderLayer /
 * nn.TransformerDecoderLayer with the flagship's options), composed from
 * lt_mha, lt_ffn and lt_layer_norm / lt_rms_norm. One forward (layer_forward)
 * serves both layers, whole-sequence and cached.
 *
 * What this is not: a stack, embeddings or positions (the model's), nor new
 * kernels: every op here is an existing one, so the layers are as fast as
 * the flagship's blocks were when it wrote them itself.
 */
#include "nn/transformer_layer.h"

#include "autograd/recompute.h"
#include "nn/params_internal.h"
#include "tensor/error_internal.h"

#include <math.h>
#include <stdio.h>

/* ---- the norm choice ------------------------------------------------------------ */

lt_status lt_norm_init(lt_norm_m *m, lt_params *p, const char *name, lt_norm_kind kind, int64_t C, double eps) {
  if (!m) return lt__err(LT_ERR_NULL, "norm_init: m is NULL");
  lt_norm_m t = {.kind = kind};
  lt_status s;
  if (kind == LT_NORM_RMS) s = lt_rms_norm_init(&t.rn, p, name, C, eps);
  else if (kind == LT_NORM_LAYER) s = lt_layer_norm_init(&t.ln, p, name, C, eps, true);
  else return lt__err(LT_ERR_INVALID, "norm_init: '%s': kind %d: must be LT_NORM_LAYER or LT_NORM_RMS", name ? name : "", (int)kind);
  if (s == LT_OK) *m = t;
  return s;
}

lt_tensor *lt_norm_forward(const lt_norm_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "norm_forward: m is NULL"), NULL;
  return m->kind == LT_NORM_RMS ? lt_rms_norm_forward(&m->rn, x) : lt_layer_norm_forward(&m->ln, x);
}

/* ---- the recompute choice -------------------------------------------------------- */

static const char *const RECOMPUTE_NAMES[] = {"none", "attention", "layer"};
const char *lt_recompute_mode_name(lt_recompute_mode m) { return lt_enum_name(RECOMPUTE_NAMES, 3, (int)m); }
LT_ENUM_PARSER(lt_recompute_mode_parse, lt_recompute_mode, "recompute mode", RECOMPUTE_NAMES, 3, NULL, 0)

/* ---- construction -------------------------------------------------------------- */

#define BAD(...) lt__err(LT_ERR_INVALID, __VA_ARGS__)

static lt_status check_opts(const char *op, const char *name, const lt_transformer_layer_opts *o) {
  if (o->d_model < 1 || o->n_heads < 1 || o->n_kv_heads < 1 || o->d_ff < 1)
    return BAD("%s: '%s': d_model %lld, n_heads %lld, n_kv_heads %lld, d_ff %lld: all must be >= 1", op, name,
               (long long)o->d_model, (long long)o->n_heads, (long long)o->n_kv_heads, (long long)o->d_ff);
  if (o->d_model % o->n_heads != 0)
    return BAD("%s: '%s': n_heads %lld does not divide d_model %lld", op, name, (long long)o->n_heads,
               (long long)o->d_model);
  if (o->n_heads % o->n_kv_heads != 0)
    return BAD("%s: '%s': n_kv_heads %lld does not divide n_heads %lld", op, name, (long long)o->n_kv_heads,
               (long long)o->n_heads);
  if (!(o->dropout >= 0.0 && o->dropout <= 1.0)) return BAD("%s: '%s': dropout %g: must be in [0, 1]", op, name, o->dropout);
  if (o->norm != LT_NORM_LAYER && o->norm != LT_NORM_RMS)
    return BAD("%s: '%s': norm %d: must be LT_NORM_LAYER or LT_NORM_RMS", op, name, (int)o->norm);
  if (!(o->norm_eps >= 0.0) || isinf(o->norm_eps))
    return BAD("%s: '%s': norm_eps %g: must be finite and >= 0", op, name, o->norm_eps);
  if (!(o->attn_scale >= 0.0) || isinf(o->attn_scale))
    return BAD("%s: '%s': attn_scale %g: must be finite and >= 0 (0: 1/sqrt(head size))", op, name, o->attn_scale);
  if (o->rope) {
    if ((o->d_model / o->n_heads) % 2 != 0)
      return BAD("%s: '%s': RoPE needs an even head size: d_model %lld / n_heads %lld = %lld", op, name,
                 (long long)o->d_model, (long long)o->n_heads, (long long)(o->d_model / o->n_heads));
    if (!(o->rope_base > 0.0) || isinf(o->rope_base))
      return BAD("%s: '%s': rope_base %g: must be finite and > 0", op, name, o->rope_base);
    if (lt_rope_scaling_check(&o->rope_scaling) != LT_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", lt_last_error());
      return BAD("%s: '%s': %s", op, name, msg);
    }
  }
  return LT_OK; /* activation and SwiGLU: lt_ffn_init checks them */
}

#undef BAD

/* Registers self_attn, [cross_attn], FFN, norm1, norm2, [norm3] under name. */
static lt_status layer_init(const char *op, lt_transformer_layer *m, lt_params *p, const char *name,
                            const lt_transformer_layer_opts *o, bool cross, lt_generator *g) {
  if (!m) return lt__err(LT_ERR_NULL, "%s: m is NULL", op);
  if (!p) return lt__err_null(op, "p");
  if (!o) return lt__err_null(op, "opts");
  if (!g) return lt__err_null(op, "g");
  if (!name) name = "";
  lt_status s = check_opts(op, name, o);
  if (s != LT_OK) return s;
  const int count = lt_params_count(p);
  const lt_generator_state gs = lt_generator_get_state(g);
  lt_transformer_layer t = {.opts = *o, .has_cross = cross};
  char sub[512];
  const int64_t C = o->d_model;
  if ((s = lt_mha_init_biases(&t.self_attn, p, lt_name_join(sub, sizeof sub, name, "self_attn"), C, o->n_heads,
                              o->n_kv_heads, o->bias || o->qkv_bias, o->bias, o->dropout, g)) != LT_OK)
    goto fail;
  t.self_attn.rope = o->rope;
  t.self_attn.rope_base = o->rope_base;
  t.self_attn.rope_scaling = o->rope_scaling;
  t.self_attn.scale = o->attn_scale;
  if (cross && (s = lt_mha_init_biases(&t.cross_attn, p, lt_name_join(sub, sizeof sub, name, "cross_attn"), C,
                                       o->n_heads, o->n_kv_heads, o->bias || o->qkv_bias, o->bias, o->dropout,
                                       g)) != LT_OK)
    goto fail;
  t.cross_attn.scale = o->attn_scale;
  if ((s = lt_ffn_init(&t.ffn, p, name, C, o->d_ff, o->act, o->swiglu, o->bias, o->dropout, g)) != LT_OK ||
      (s = lt_norm_init(&t.norm1, p, lt_name_join(sub, sizeof sub, name, "norm1"), o->norm, C, o->norm_eps)) != LT_OK ||
      (s = lt_norm_init(&t.norm2, p, lt_name_join(sub, sizeof sub, name, "norm2"), o->norm, C, o->norm_eps)) != LT_OK ||
      (cross &&
       (s = lt_norm_init(&t.norm3, p, lt_name_join(sub, sizeof sub, name, "norm3"), o->norm, C, o->norm_eps)) != LT_OK))
    goto fail;
  *m = t;
  return LT_OK;
fail:
  lt__params_truncate(p, count);
  lt_generator_set_state(g, gs);
  return s;
}

lt_status lt_transformer_encoder_layer_init(lt_transformer_layer *m, lt_params *p, const char *name,
                                            const lt_transformer_layer_opts *opts, lt_generator *g) {
  return layer_init("transformer_encoder_layer_init", m, p, name, opts, false, g);
}

lt_status lt_transformer_decoder_layer_init(lt_transformer_layer *m, lt_params *p, const char *name,
                                            const lt_transformer_layer_opts *opts, lt_generator *g) {
  return layer_init("transformer_decoder_layer_init", m, p, name, opts, true, g);
}

/* ---- forward ------------------------------------------------------------------- */

/* Replace *x (freed) by y; false when y is NULL (the error is pending). */
static bool step(lt_tensor **x, lt_tensor *y) {
  lt_tensor_free(*x);
  *x = y;
  return y != NULL;
}

/* dropout(x) in training with p > 0, else x itself. Consumes x. */
static lt_tensor *drop(lt_tensor *x, double p, const lt_nn_ctx *ctx) {
  if (!x || !(p > 0.0) || !ctx || !ctx->training) return x;
  lt_tensor *y = lt_dropout(x, p, ctx);
  lt_tensor_free(x);
  return y;
}

/* Sublayer input: norm(x) with pre-norm (new, into *own, which the caller
 * frees), x itself with post-norm (*own NULL). Not a retain of x: x may be
 * the caller's tensor in a scope, and lt_tensor_free would take it out. */
static const lt_tensor *sub_in(const lt_norm_m *n, const lt_tensor *x, bool pre, lt_tensor **own) {
  *own = pre ? lt_norm_forward(n, x) : NULL;
  return pre ? *own : x;
}

/* Residual: pre-norm x + dropout(y), post-norm norm(x + dropout(y)). Consumes y. */
static lt_tensor *sub_out(const lt_norm_m *n, const lt_tensor *x, lt_tensor *y, bool pre, double p,
                          const lt_nn_ctx *ctx) {
  y = drop(y, p, ctx);
  if (!y) return NULL;
  lt_tensor *r = lt_add(x, y);
  lt_tensor_free(y);
  if (!r || pre) return r;
  lt_tensor *o = lt_norm_forward(n, r);
  lt_tensor_free(r);
  return o;
}

/* One attention sublayer (which 0: self-attention, norm1; 1: cross-attention
 * over memory, norm2) on x: pre-norm x + dropout(attn(norm(x))), post-norm
 * norm(x + dropout(attn(x))). With lc, attention reads and extends the
 * caches. Returns new. */
static lt_tensor *attn_sublayer(const lt_transformer_layer *Ly, int which, const lt_tensor *x, const lt_tensor *memory,
                                const lt_attention_opts *mask, int64_t pos0, const lt_nn_ctx *ctx,
                                lt_transformer_layer_cache *lc) {
  const bool pre = Ly->opts.norm_first;
  const lt_norm_m *n = which == 0 ? &Ly->norm1 : &Ly->norm2;
  lt_tensor *own;
  const lt_tensor *h = sub_in(n, x, pre, &own);
  lt_tensor *y = NULL;
  if (h && which == 0)
    y = lc ? lt_mha_forward_cached(&Ly->self_attn, h, h, &lc->self, mask, pos0)
           : lt_mha_forward(&Ly->self_attn, h, h, mask, pos0, ctx, NULL);
  else if (h)
    y = lc ? lt_mha_forward_cached(&Ly->cross_attn, h, lc->cross.len == 0 ? memory : NULL, &lc->cross, mask, 0)
           : lt_mha_forward(&Ly->cross_attn, h, memory, mask, 0, ctx, NULL);
  lt_tensor_free(own);
  return y ? sub_out(n, x, y, pre, Ly->opts.dropout, ctx) : NULL;
}

/* The arguments of a recomputed region (copied by lt_recompute: the masks'
 * tensors and the generator stay borrowed, alive for the training step). */
typedef struct region_args {
  const lt_transformer_layer *Ly;
  int which;               /* 0, 1: attn_sublayer's; 2: the whole layer */
  lt_attention_opts mask;  /* which 0, 1: its mask; 2: the self-attention's */
  lt_attention_opts mem_mask;
  bool has_mask, has_mem_mask, has_ctx;
  int64_t pos0;
  lt_nn_ctx ctx;
} region_args;

static lt_tensor *layer_forward(const lt_transformer_layer *Ly, const lt_tensor *x, const lt_tensor *memory,
                                const lt_attention_opts *self_mask, const lt_attention_opts *mem_mask,
                                int64_t pos0, const lt_nn_ctx *ctx, lt_transformer_layer_cache *lc, bool whole);

/* in[0] x, in[1] memory (cross-attention, whole decoder layer). */
static lt_tensor *region_fn(int n, lt_tensor *const *in, void *user) {
  const region_args *a = user;
  const lt_attention_opts *m = a->has_mask ? &a->mask : NULL;
  const lt_nn_ctx *ctx = a->has_ctx ? &a->ctx : NULL;
  if (a->which == 2)
    return layer_forward(a->Ly, in[0], n > 1 ? in[1] : NULL, m, a->has_mem_mask ? &a->mem_mask : NULL, a->pos0, ctx,
                         NULL, false);
  return attn_sublayer(a->Ly, a->which, in[0], n > 1 ? in[1] : NULL, m, a->pos0, ctx, NULL);
}

/* attn_sublayer (which 0, 1) or the whole layer (2) as a recomputed region. */
static lt_tensor *region(const lt_transformer_layer *Ly, int which, const lt_tensor *x, const lt_tensor *memory,
                         const lt_attention_opts *mask, const lt_attention_opts *mem_mask, int64_t pos0,
                         const lt_nn_ctx *ctx) {
  region_args a = {.Ly = Ly, .which = which, .has_mask = mask != NULL, .has_mem_mask = mem_mask != NULL,
                   .has_ctx = ctx != NULL, .pos0 = pos0};
  if (mask) a.mask = *mask;
  if (mem_mask) a.mem_mask = *mem_mask;
  if (ctx) a.ctx = *ctx;
  static const char *const names[] = {"self-attention sublayer", "cross-attention sublayer", "transformer layer"};
  const lt_recompute_opts o = {.name = names[which], .gen = ctx && ctx->training ? ctx->gen : NULL,
                               .user_size = sizeof a};
  return lt_recompute(region_fn, memory ? 2 : 1, (lt_tensor *[]){(lt_tensor *)x, (lt_tensor *)memory}, &a, &o);
}

/* The layer on x [B, T, C]; memory [B, S, C] for the cross-attention. With
 * lc (incremental decoding), attention reads and extends the caches: x holds
 * the new positions only. whole: the layer's recompute mode applies (false
 * inside a region). Returns new. */
static lt_tensor *layer_forward(const lt_transformer_layer *Ly, const lt_tensor *x, const lt_tensor *memory,
                                const lt_attention_opts *self_mask, const lt_attention_opts *mem_mask,
                                int64_t pos0, const lt_nn_ctx *ctx, lt_transformer_layer_cache *lc, bool whole) {
  const lt_recompute_mode rc = whole && !lc ? Ly->recompute : LT_RECOMPUTE_NONE;
  if (rc == LT_RECOMPUTE_LAYER) return region(Ly, 2, x, Ly->has_cross ? memory : NULL, self_mask, mem_mask, pos0, ctx);
  const bool ra = rc == LT_RECOMPUTE_ATTENTION;
  lt_tensor *cur = ra ? region(Ly, 0, x, NULL, self_mask, NULL, pos0, ctx)
                      : attn_sublayer(Ly, 0, x, NULL, self_mask, pos0, ctx, lc);
  if (!cur) return NULL;
  const lt_norm_m *ffn_norm = &Ly->norm2;
  if (Ly->has_cross) {
    if (!step(&cur, ra ? region(Ly, 1, cur, memory, mem_mask, NULL, 0, ctx)
                       : attn_sublayer(Ly, 1, cur, memory, mem_mask, 0, ctx, lc)))
      return NULL;
    ffn_norm = &Ly->norm3;
  }
  const bool pre = Ly->opts.norm_first;
  lt_tensor *own;
  const lt_tensor *h = sub_in(ffn_norm, cur, pre, &own);
  lt_tensor *y = h ? lt_ffn_forward(&Ly->ffn, h, ctx) : NULL;
  lt_tensor_free(own);
  step(&cur, y ? sub_out(ffn_norm, cur, y, pre, Ly->opts.dropout, ctx) : NULL);
  return cur;
}

/* x (and memory) [B, L, C] floats of the layer's dtype. */
static lt_status check_input(const char *op, const lt_transformer_layer *m, const lt_tensor *x, const char *what) {
  const lt_tensor *w = m->self_attn.q_proj.weight;
  if (x->ndim != 3 || x->shape[2] != m->opts.d_model || x->shape[0] < 1 || x->shape[1] < 1 || x->dtype != w->dtype)
    return lt__err(x->dtype != w->dtype ? LT_ERR_DTYPE : LT_ERR_SHAPE,
                   "%s: %s is %s: need [B, L, C] (B, L >= 1) with C = d_model %lld, of the layer's dtype %s", op,
                   what, LT__D(x), (long long)m->opts.d_model, lt_dtype_name(w->dtype));
  return LT_OK;
}

lt_tensor *lt_transformer_encoder_layer_forward(const lt_transformer_layer *m, const lt_tensor *x,
                                                const lt_attention_opts *self_mask, int64_t pos0,
                                                const lt_nn_ctx *ctx) {
  const char *op = "transformer_encoder_layer_forward";
  if (!m) return lt__err(LT_ERR_NULL, "%s: m is NULL", op), NULL;
  if (!x) return lt__err_null(op, "x"), NULL;
  if (m->has_cross)
    return lt__err(LT_ERR_INVALID, "%s: a decoder layer needs the memory (transformer_decoder_layer_forward)", op), NULL;
  if (check_input(op, m, x, "x") != LT_OK) return NULL;
  return layer_forward(m, x, NULL, self_mask, NULL, pos0, ctx, NULL, true);
}

lt_tensor *lt_transformer_decoder_layer_forward(const lt_transformer_layer *m, const lt_tensor *x,
                                                const lt_tensor *memory, const lt_attention_opts *self_mask,
                                                const lt_attention_opts *mem_mask, int64_t pos0,
                                                const lt_nn_ctx *ctx) {
  const char *op = "transformer_decoder_layer_forward";
  if (!m) return lt__err(LT_ERR_NULL, "%s: m is NULL", op), NULL;
  if (!x) return lt__err_null(op, "x"), NULL;
  if (!m->has_cross)
    return lt__err(LT_ERR_INVALID, "%s: an encoder layer has no cross-attention (transformer_encoder_layer_forward)",
                   op), NULL;
  if (!memory) return lt__err_null(op, "memory"), NULL;
  if (check_input(op, m, x, "x") != LT_OK || check_input(op, m, memory, "memory") != LT_OK) return NULL;
  if (memory->shape[0] != x->shape[0])
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, memory is %s: batch sizes differ", op, LT__D(x), LT__D(memory)), NULL;
  return layer_forward(m, x, memory, self_mask, mem_mask, pos0, ctx, NULL, true);
}

/* ---- incremental decoding ------------------------------------------------------- */

lt_status lt_transformer_layer_cache_init(lt_transformer_layer_cache *c, int64_t cap) {
  if (!c) return lt__err(LT_ERR_NULL, "transformer_layer_cache_init: c is NULL");
  lt_status s = lt_kv_cache_init(&c->self, cap);
  if (s == LT_OK) s = lt_kv_cache_init(&c->cross, 1); /* capacity set from the memory at the first step */
  return s;
}

void lt_transformer_layer_cache_free(lt_transformer_layer_cache *c) {
  if (!c) return;
  lt_kv_cache_free(&c->self);
  lt_kv_cache_free(&c->cross);
}

lt_tensor *lt_transformer_layer_forward_cached(const lt_transformer_layer *m, const lt_tensor *x,
                                               const lt_tensor *memory, lt_transformer_layer_cache *c,
                                               const lt_attention_opts *self_mask,
                                               const lt_attention_opts *mem_mask, int64_t pos0) {
  const char *op = "transformer_layer_forward_cached";
  if (!m) return lt__err(LT_ERR_NULL, "%s: m is NULL", op), NULL;
  if (!x) return lt__err_null(op, "x"), NULL;
  if (!c) return lt__err(LT_ERR_NULL, "%s: the cache is NULL", op), NULL;
  if (check_input(op, m, x, "x") != LT_OK) return NULL;
  if (m->has_cross && c->cross.len == 0) {
    if (!memory)
      return lt__err(LT_ERR_NULL, "%s: memory is NULL: the cross-attention cache is empty", op), NULL;
    if (check_input(op, m, memory, "memory") != LT_OK) return NULL;
    c->cross.cap = memory->shape[1];
  }
  return layer_forward(m, x, m->has_cross ? memory : NULL, self_mask, mem_mask, pos0, NULL, c, true);
}
