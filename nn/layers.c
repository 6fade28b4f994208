/*
 * nn/layers.c: the layer modules (Linear, Conv1d/Conv2d, Embedding, LayerNorm, RMSNorm,
 * activations, the feed-forward block, LSTM) as structs borrowing parameters from
 * an lt_params store, with PyTorch's default initialisation.
 *
 * What this is: each _init creates its parameters (f32, as PyTorch's default
 * dtype), initialises them from the generator in PyTorch's order, registers
 * them under "<name>.weight", "<name>.bias", ... and fills the struct; each
 * _forward is a thin composition of the functional ops (lt_linear,
 * lt_layer_norm, lt_rms_norm, lt_dropout, lt_embedding, activations). On an
 * _init failure nothing changed: the parameters already registered by the
 * call are removed from the store again, the generator is restored to its
 * state before the call and the struct is left untouched.
 *
 * PyTorch defaults mirrored (https://pytorch.org/docs/stable/nn.html):
 *   nn.Linear      weight kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)),
 *                  then bias U(-1/sqrt(in), 1/sqrt(in)) (0 bound when in == 0)
 *   nn.Conv1d/2d   weight kaiming_uniform_(a=sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
 *                  fan_in = C_in/groups * kernel elements
 *   nn.Embedding   weight N(0, 1), the padding_idx row zeroed
 *   nn.LayerNorm   weight 1, bias 0
 *   nn.RMSNorm     weight 1
 *   nn.BatchNorm   weight 1, bias 0; buffers running_mean 0, running_var 1,
 *                  num_batches_tracked 0 (i64)
 *   nn.GroupNorm   weight 1, bias 0
 *   nn.LSTM        every weight and bias U(-1/sqrt(H), 1/sqrt(H)), in
 *                  parameter order (weight_ih_l0, weight_hh_l0, bias_ih_l0, ...)
 * Biases, norm weights and embeddings are registered LT_PARAM_NO_DECAY.
 *
 * Embedding padding_idx: the gradient is masked in a differentiable way
 * rather than by a hook on the weight. The output rows looked up at
 * padding_idx are taken from a detached alias of the lookup (lt_where on
 * ids == padding_idx), so this lookup sends no gradient into that row, exactly
 * as torch.nn.functional.embedding(padding_idx=...); other uses of the same
 * weight (an output projection tied to it) still reach the row, as in PyTorch.
 * The masking is only done when a gradient can flow and an id equals
 * padding_idx.
 *
 * What this is not: attention (nn/attention.c) or the fused kernels
 * themselves (nn/linear.c, nn/norm.c, nn/dropout.c).
 */
#include "nn/nn.h"
#include "nn/conv.h"
#include "nn/lstm.h"
#include "nn/params_internal.h"
#include "tensor/error_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 512

/* ---- registration with roll-back ---------------------------------------------- */

typedef struct reg_mark {
  lt_params *p;
  int count;
  lt_generator *g;
  lt_generator_state gs;
} reg_mark;

static reg_mark mark_begin(lt_params *p, lt_generator *g) {
  reg_mark m = {p, lt_params_count(p), g, {0, 0}};
  if (g) m.gs = lt_generator_get_state(g);
  return m;
}

/* Undo a failed init; returns the status of the failure (kept as pending). */
static lt_status mark_rollback(const reg_mark *m, lt_status s) {
  lt__params_truncate(m->p, m->count);
  if (m->g) lt_generator_set_state(m->g, m->gs);
  return s;
}

/* Registers t (owned; freed on failure) as "<prefix>.<leaf>". A NULL t means
 * its creation failed: the pending status is returned. */
static lt_status add_param(lt_params *p, const char *prefix, const char *leaf, lt_tensor *t, unsigned flags) {
  if (!t) return lt_last_status() != LT_OK ? lt_last_status() : LT_ERR_NOMEM;
  char name[NAME_MAX_LEN];
  lt_name_join(name, sizeof name, prefix, leaf);
  if (strlen(prefix) + strlen(leaf) + 2 > sizeof name) {
    lt_tensor_free(t);
    return lt__err(LT_ERR_INVALID, "params_add: the name '%s.%s' is longer than %d characters", prefix, leaf,
                   NAME_MAX_LEN - 1);
  }
  lt_status s = lt_params_add(p, name, t, flags);
  if (s != LT_OK) lt_tensor_free(t);
  return s;
}

/* lt_set_weight_format's format (per thread: a loader on one thread does not
 * change the models another builds). */
static _Thread_local lt_qformat weight_format = LT_QFORMAT_F32;

lt_qformat lt_set_weight_format(lt_qformat f) {
  const lt_qformat prev = weight_format;
  weight_format = f;
  return prev;
}

/* A 2-d weight [N, K] built quantized under lt_set_weight_format (no values
 * drawn), or NULL (*quantized false) when the format is f32. */
static lt_tensor *quantized_weight(int64_t N, int64_t K, bool *quantized) {
  *quantized = weight_format != LT_QFORMAT_F32;
  return *quantized ? lt_quantized_zeros(weight_format, N, K) : NULL;
}

/* A new f32 parameter tensor outside any scope. */
static lt_tensor *new_param(int ndim, const int64_t *shape) {
  return lt_tensor_keep(lt_empty(LT_DTYPE_F32, ndim, shape));
}

static lt_status check_common(const char *op, const void *m, const lt_params *p, const char *name) {
  if (!m) return lt__err(LT_ERR_NULL, "%s: the module struct is NULL", op);
  if (!p) return lt__err(LT_ERR_NULL, "%s: the parameter store is NULL", op);
  if (!name) return lt__err(LT_ERR_NULL, "%s: name is NULL", op);
  return LT_OK;
}

static lt_status check_eps(const char *op, const char *name, double eps) {
  if (!(eps >= 0) || isinf(eps))
    return lt__err(LT_ERR_INVALID, "%s: '%s': eps %g must be finite and >= 0", op, name, eps);
  return LT_OK;
}

/* ======================================================================== */
/* Linear                                                                   */
/* ======================================================================== */

/* Creates and registers "<name>.weight" of the given shape [out, ...] and,
 * with bias, "<name>.bias" [out], by PyTorch's reset_parameters rule for
 * Linear and Conv: weight kaiming_uniform(a = sqrt(5)), bias
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in the product of the weight's
 * dims after the first (bound 0 when it is 0). */
static lt_status register_weight_bias(lt_params *p, const char *name, int ndim, const int64_t *shape, int64_t nbias, bool bias,
                                      lt_generator *g, lt_tensor **wout, lt_tensor **bout) {
  bool quantized = false;
  lt_tensor *w = ndim == 2 ? quantized_weight(shape[0], shape[1], &quantized) : NULL;
  if (!quantized) w = new_param(ndim, shape);
  lt_status s = !w ? lt_last_status() : quantized ? LT_OK : lt_init_kaiming_uniform_(g, w, sqrt(5.0));
  if (s != LT_OK) {
    lt_tensor_free(w);
    return s;
  }
  /* a 2-d weight is a Linear's (conv weights are 3-d and up) */
  if ((s = add_param(p, name, "weight", w, ndim == 2 ? LT_PARAM_QUANTIZABLE : LT_PARAM_DEFAULT)) != LT_OK) return s;
  lt_tensor *b = NULL;
  if (bias) {
    int64_t fan_in = 1;
    for (int d = 1; d < ndim; d++) fan_in *= shape[d];
    const double bound = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0.0;
    b = new_param(LT_SHAPE(nbias));
    bool prev = lt_set_grad_enabled(false);
    s = b ? lt_uniform_(g, b, -bound, bound) : lt_last_status();
    lt_set_grad_enabled(prev);
    if (s != LT_OK) {
      lt_tensor_free(b);
      return s;
    }
    if ((s = add_param(p, name, "bias", b, LT_PARAM_NO_DECAY)) != LT_OK) return s;
  }
  *wout = w;
  *bout = b;
  return LT_OK;
}

/* Creates and registers "<name>.weight" [out, in] (and "<name>.bias" [out]). */
static lt_status linear_register(lt_linear_m *m, lt_params *p, const char *name, int64_t in, int64_t out,
                                 bool bias, lt_generator *g) {
  return register_weight_bias(p, name, 2, (const int64_t[]){out, in}, out, bias, g, &m->weight, &m->bias);
}

lt_status lt_linear_init(lt_linear_m *m, lt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                         lt_generator *g) {
  const char *op = "linear_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  if (in < 0 || out < 0)
    return lt__err(LT_ERR_INVALID, "%s: '%s': in %lld and out %lld must be >= 0", op, name, (long long)in,
                   (long long)out);
  reg_mark mk = mark_begin(p, g);
  lt_linear_m tmp;
  if ((s = linear_register(&tmp, p, name, in, out, bias, g)) != LT_OK) return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

lt_tensor *lt_linear_forward(const lt_linear_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "linear_forward: the module is NULL"), NULL;
  return lt_linear(x, m->weight, m->bias);
}

/* ======================================================================== */
/* Conv1d, Conv2d (nn/conv.h)                                               */
/* ======================================================================== */

/* Creates and registers "<name>.weight" [C_out, C_in/groups, k...] (nk = 1 or
 * 2 kernel dims) and "<name>.bias" [C_out], as nn.Conv2d's reset_parameters:
 * kaiming_uniform(a = sqrt(5)), then bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
static lt_status conv_register(const char *op, lt_tensor **wout, lt_tensor **bout, lt_params *p, const char *name,
                               int64_t cin, int64_t cout, int nk, const int64_t *k, const lt_conv_opts *o,
                               bool bias, lt_generator *g) {
  if (o->groups < 1 || cin < 1 || cout < 1 || cin % o->groups != 0 || cout % o->groups != 0 || k[0] < 1 ||
      (nk == 2 && k[1] < 1))
    return lt__err(LT_ERR_INVALID, "%s: '%s': C_in %lld, C_out %lld, kernel %lld, groups %lld: sizes must be >= 1 "
                   "and groups must divide both channel counts",
                   op, name, (long long)cin, (long long)cout, (long long)k[0], (long long)o->groups);
  const int64_t shape[4] = {cout, cin / o->groups, k[0], nk == 2 ? k[1] : 1};
  return register_weight_bias(p, name, 2 + nk, shape, cout, bias, g, wout, bout);
}

/* The transposed convolutions' "<name>.weight" [C_in, C_out/groups, k...]
 * and "<name>.bias" [C_out], as nn.ConvTranspose2d's reset_parameters (the
 * same rule as Conv2d's on this weight: fan_in = C_out/groups k...). */
static lt_status convt_register(const char *op, lt_tensor **wout, lt_tensor **bout, lt_params *p, const char *name,
                                int64_t cin, int64_t cout, int nk, const int64_t *k, const lt_conv_opts *o, bool bias,
                                lt_generator *g) {
  if (o->groups < 1 || cin < 1 || cout < 1 || cin % o->groups != 0 || cout % o->groups != 0 || k[0] < 1 ||
      (nk == 2 && k[1] < 1))
    return lt__err(LT_ERR_INVALID, "%s: '%s': C_in %lld, C_out %lld, kernel %lld, groups %lld: sizes must be >= 1 "
                   "and groups must divide both channel counts",
                   op, name, (long long)cin, (long long)cout, (long long)k[0], (long long)o->groups);
  const int64_t shape[4] = {cin, cout / o->groups, k[0], nk == 2 ? k[1] : 1};
  return register_weight_bias(p, name, 2 + nk, shape, cout, bias, g, wout, bout);
}

lt_status lt_conv2d_init(lt_conv2d_m *m, lt_params *p, const char *name, int64_t C_in, int64_t C_out, int64_t kh,
                         int64_t kw, const lt_conv_opts *opts, bool bias, lt_generator *g) {
  const char *op = "conv2d_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  lt_conv2d_m tmp = {.opts = opts ? *opts : LT_CONV_OPTS_DEFAULT};
  reg_mark mk = mark_begin(p, g);
  if ((s = conv_register(op, &tmp.weight, &tmp.bias, p, name, C_in, C_out, 2, (const int64_t[]){kh, kw}, &tmp.opts,
                         bias, g)) != LT_OK)
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

lt_tensor *lt_conv2d_forward(const lt_conv2d_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "conv2d_forward: the module is NULL"), NULL;
  return lt_conv2d(x, m->weight, m->bias, &m->opts);
}

lt_status lt_conv1d_init(lt_conv1d_m *m, lt_params *p, const char *name, int64_t C_in, int64_t C_out, int64_t k,
                         const lt_conv_opts *opts, bool bias, lt_generator *g) {
  const char *op = "conv1d_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  lt_conv1d_m tmp = {.opts = opts ? *opts : LT_CONV_OPTS_DEFAULT};
  reg_mark mk = mark_begin(p, g);
  if ((s = conv_register(op, &tmp.weight, &tmp.bias, p, name, C_in, C_out, 1, &k, &tmp.opts, bias, g)) != LT_OK)
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

lt_tensor *lt_conv1d_forward(const lt_conv1d_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "conv1d_forward: the module is NULL"), NULL;
  return lt_conv1d(x, m->weight, m->bias, &m->opts);
}

lt_status lt_conv_transpose2d_init(lt_conv_transpose2d_m *m, lt_params *p, const char *name, int64_t C_in,
                                   int64_t C_out, int64_t kh, int64_t kw, const lt_conv_opts *opts, bool bias,
                                   lt_generator *g) {
  const char *op = "conv_transpose2d_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  lt_conv_transpose2d_m tmp = {.opts = opts ? *opts : LT_CONV_OPTS_DEFAULT};
  reg_mark mk = mark_begin(p, g);
  if ((s = convt_register(op, &tmp.weight, &tmp.bias, p, name, C_in, C_out, 2, (const int64_t[]){kh, kw}, &tmp.opts,
                          bias, g)) != LT_OK)
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

lt_tensor *lt_conv_transpose2d_forward(const lt_conv_transpose2d_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "conv_transpose2d_forward: the module is NULL"), NULL;
  return lt_conv_transpose2d(x, m->weight, m->bias, &m->opts);
}

lt_status lt_conv_transpose1d_init(lt_conv_transpose1d_m *m, lt_params *p, const char *name, int64_t C_in,
                                   int64_t C_out, int64_t k, const lt_conv_opts *opts, bool bias, lt_generator *g) {
  const char *op = "conv_transpose1d_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  lt_conv_transpose1d_m tmp = {.opts = opts ? *opts : LT_CONV_OPTS_DEFAULT};
  reg_mark mk = mark_begin(p, g);
  if ((s = convt_register(op, &tmp.weight, &tmp.bias, p, name, C_in, C_out, 1, &k, &tmp.opts, bias, g)) != LT_OK)
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

lt_tensor *lt_conv_transpose1d_forward(const lt_conv_transpose1d_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "conv_transpose1d_forward: the module is NULL"), NULL;
  return lt_conv_transpose1d(x, m->weight, m->bias, &m->opts);
}

/* ======================================================================== */
/* Embedding                                                                */
/* ======================================================================== */

lt_status lt_embedding_init(lt_embedding_m *m, lt_params *p, const char *name, int64_t num, int64_t dim,
                            int64_t padding_idx, lt_generator *g) {
  const char *op = "embedding_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  if (num < 0 || dim < 0)
    return lt__err(LT_ERR_INVALID, "%s: '%s': num %lld and dim %lld must be >= 0", op, name, (long long)num,
                   (long long)dim);
  if (padding_idx < -1 || padding_idx >= num)
    return lt__err(LT_ERR_INDEX, "%s: '%s': padding_idx %lld must be in [0, %lld) or -1 (none)", op, name,
                   (long long)padding_idx, (long long)num);
  reg_mark mk = mark_begin(p, g);
  bool quantized;
  lt_tensor *w = quantized_weight(num, dim, &quantized);
  if (!quantized) w = new_param(LT_SHAPE(num, dim));
  s = !w ? lt_last_status() : quantized ? LT_OK : lt_init_normal_(g, w, 0.0, 1.0);
  if (s == LT_OK && padding_idx >= 0 && !quantized) {
    lt_tensor *row = lt_select(w, 0, padding_idx);
    s = row ? lt_zero_(row) : lt_last_status();
    lt_tensor_free(row);
  }
  if (s != LT_OK) {
    lt_tensor_free(w);
    return mark_rollback(&mk, s);
  }
  if ((s = add_param(p, name, "weight", w, LT_PARAM_NO_DECAY | LT_PARAM_QUANTIZABLE)) != LT_OK)
    return mark_rollback(&mk, s);
  m->weight = w;
  m->padding_idx = padding_idx;
  return LT_OK;
}

/* True if some id equals pad; *mask (new, bool, ids' shape) is set then. */
static lt_status padding_mask(const lt_tensor *ids, int64_t pad, lt_tensor **mask) {
  *mask = NULL;
  lt_tensor *eq = lt_eq_scalar(ids, (double)pad);
  if (!eq) return lt_last_status();
  const unsigned char *b = eq->data; /* a new contiguous bool tensor */
  bool any = false;
  for (int64_t i = 0; i < eq->numel && !any; i++) any = b[i] != 0;
  if (any) *mask = eq;
  else lt_tensor_free(eq);
  return LT_OK;
}

lt_tensor *lt_embedding_forward(const lt_embedding_m *m, const lt_tensor *ids) {
  if (!m) return lt__err(LT_ERR_NULL, "embedding_forward: the module is NULL"), NULL;
  lt_tensor *e = lt_embedding(m->weight, ids); /* [*ids, C] */
  if (!e || m->padding_idx < 0 || !e->requires_grad) return e;
  lt_tensor *mask = NULL;
  if (padding_mask(ids, m->padding_idx, &mask) != LT_OK) {
    lt_tensor_free(e);
    return NULL;
  }
  if (!mask) return e;
  /* out = ids == padding_idx ? detach(e) : e   (same values; no gradient through padding rows) */
  lt_tensor *m1 = lt_unsqueeze(mask, -1);
  lt_tensor *det = lt_detach(e);
  lt_tensor *out = m1 && det ? lt_where(m1, det, e) : NULL;
  lt_tensor_free(det);
  lt_tensor_free(m1);
  lt_tensor_free(mask);
  lt_tensor_free(e);
  return out;
}

/* ======================================================================== */
/* Norms                                                                    */
/* ======================================================================== */

static lt_tensor *new_filled(int64_t C, double v) {
  lt_tensor *t = new_param(LT_SHAPE(C));
  if (t && lt_fill_(t, v) != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

lt_status lt_layer_norm_init(lt_layer_norm_m *m, lt_params *p, const char *name, int64_t C, double eps,
                             bool affine) {
  const char *op = "layer_norm_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (C < 0) return lt__err(LT_ERR_INVALID, "%s: '%s': C %lld must be >= 0", op, name, (long long)C);
  if ((s = check_eps(op, name, eps)) != LT_OK) return s;
  reg_mark mk = mark_begin(p, NULL);
  lt_tensor *w = NULL, *b = NULL;
  if (affine) {
    w = new_filled(C, 1.0);
    if ((s = add_param(p, name, "weight", w, LT_PARAM_NO_DECAY)) != LT_OK) return mark_rollback(&mk, s);
    b = new_filled(C, 0.0);
    if ((s = add_param(p, name, "bias", b, LT_PARAM_NO_DECAY)) != LT_OK) return mark_rollback(&mk, s);
  }
  m->weight = w;
  m->bias = b;
  m->eps = eps;
  return LT_OK;
}

lt_tensor *lt_layer_norm_forward(const lt_layer_norm_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "layer_norm_forward: the module is NULL"), NULL;
  return lt_layer_norm(x, m->weight, m->bias, m->eps);
}

lt_status lt_rms_norm_init(lt_rms_norm_m *m, lt_params *p, const char *name, int64_t C, double eps) {
  const char *op = "rms_norm_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (C < 0) return lt__err(LT_ERR_INVALID, "%s: '%s': C %lld must be >= 0", op, name, (long long)C);
  if ((s = check_eps(op, name, eps)) != LT_OK) return s;
  reg_mark mk = mark_begin(p, NULL);
  lt_tensor *w = new_filled(C, 1.0);
  if ((s = add_param(p, name, "weight", w, LT_PARAM_NO_DECAY)) != LT_OK) return mark_rollback(&mk, s);
  m->weight = w;
  m->eps = eps;
  return LT_OK;
}

lt_tensor *lt_rms_norm_forward(const lt_rms_norm_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "rms_norm_forward: the module is NULL"), NULL;
  return lt_rms_norm(x, m->weight, m->eps);
}

/* nn.BatchNorm1d/2d: weight 1, bias 0 (no decay); buffers running_mean 0,
 * running_var 1, num_batches_tracked 0 (i64), in PyTorch's order. */
lt_status lt_batch_norm_init(lt_batch_norm_m *m, lt_params *p, const char *name, int64_t C,
                             const lt_batch_norm_opts *opts) {
  const char *op = "batch_norm_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  const lt_batch_norm_opts o = opts ? *opts : LT_BATCH_NORM_DEFAULTS;
  if (C < 1) return lt__err(LT_ERR_INVALID, "%s: '%s': C %lld must be >= 1", op, name, (long long)C);
  if ((s = check_eps(op, name, o.eps)) != LT_OK) return s;
  if (!o.cumulative_average && !(o.momentum >= 0 && o.momentum <= 1))
    return lt__err(LT_ERR_INVALID, "%s: '%s': momentum %g must be in [0, 1]", op, name, o.momentum);
  reg_mark mk = mark_begin(p, NULL);
  lt_batch_norm_m r = {.opts = o, .store = p};
  if (o.affine) {
    if ((s = add_param(p, name, "weight", r.weight = new_filled(C, 1.0), LT_PARAM_NO_DECAY)) != LT_OK ||
        (s = add_param(p, name, "bias", r.bias = new_filled(C, 0.0), LT_PARAM_NO_DECAY)) != LT_OK)
      return mark_rollback(&mk, s);
  }
  if (o.track_running_stats) {
    const unsigned buf = LT_PARAM_BUFFER | LT_PARAM_NO_DECAY;
    if ((s = add_param(p, name, "running_mean", r.running_mean = new_filled(C, 0.0), buf)) != LT_OK ||
        (s = add_param(p, name, "running_var", r.running_var = new_filled(C, 1.0), buf)) != LT_OK ||
        (s = add_param(p, name, "num_batches_tracked",
                       r.num_batches_tracked = lt_tensor_keep(lt_zeros(LT_DTYPE_I64, 0, NULL)), buf)) != LT_OK)
      return mark_rollback(&mk, s);
  }
  *m = r;
  return LT_OK;
}

lt_tensor *lt_batch_norm_forward(const lt_batch_norm_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "batch_norm_forward: the module is NULL"), NULL;
  const bool training = lt_params_training(m->store);
  lt_tensor *nbt = m->num_batches_tracked;
  const bool count = training && nbt;
  const int64_t tracked = count ? *(const int64_t *)nbt->data + 1 : 0;
  const double momentum = count && m->opts.cumulative_average ? 1.0 / (double)tracked : m->opts.momentum;
  lt_tensor *y = lt_batch_norm(x, m->running_mean, m->running_var, m->weight, m->bias, training, momentum,
                               m->opts.eps);
  if (y && count && lt_fill_(nbt, (double)tracked) != LT_OK) { /* a 0-d i64 buffer: cannot fail */
    lt_tensor_free(y);
    return NULL;
  }
  return y;
}

lt_status lt_group_norm_init(lt_group_norm_m *m, lt_params *p, const char *name, int64_t num_groups, int64_t C,
                             double eps, bool affine) {
  const char *op = "group_norm_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (C < 1 || num_groups < 1 || C % num_groups)
    return lt__err(LT_ERR_INVALID, "%s: '%s': num_groups %lld must be >= 1 and divide C = %lld", op, name,
                   (long long)num_groups, (long long)C);
  if ((s = check_eps(op, name, eps)) != LT_OK) return s;
  reg_mark mk = mark_begin(p, NULL);
  lt_group_norm_m r = {.num_groups = num_groups, .eps = eps};
  if (affine) {
    if ((s = add_param(p, name, "weight", r.weight = new_filled(C, 1.0), LT_PARAM_NO_DECAY)) != LT_OK ||
        (s = add_param(p, name, "bias", r.bias = new_filled(C, 0.0), LT_PARAM_NO_DECAY)) != LT_OK)
      return mark_rollback(&mk, s);
  }
  *m = r;
  return LT_OK;
}

lt_tensor *lt_group_norm_forward(const lt_group_norm_m *m, const lt_tensor *x) {
  if (!m) return lt__err(LT_ERR_NULL, "group_norm_forward: the module is NULL"), NULL;
  return lt_group_norm(x, m->num_groups, m->weight, m->bias, m->eps);
}

/* ======================================================================== */
/* Activations and the feed-forward block                                   */
/* ======================================================================== */

static bool valid_act(lt_activation a) {
  return a == LT_ACT_RELU || a == LT_ACT_GELU || a == LT_ACT_GELU_TANH || a == LT_ACT_SILU;
}

lt_tensor *lt_activation_forward(lt_activation act, const lt_tensor *x) {
  switch (act) {
    case LT_ACT_RELU: return lt_relu(x);
    case LT_ACT_GELU: return lt_gelu(x);
    case LT_ACT_GELU_TANH: return lt_gelu_tanh(x);
    case LT_ACT_SILU: return lt_silu(x);
  }
  if (!x) return lt__err_null("activation_forward", "x"), NULL;
  return lt__err(LT_ERR_INVALID, "activation_forward: x is %s: unknown activation %d", LT__D(x), (int)act),
         NULL;
}

lt_status lt_ffn_init(lt_ffn *m, lt_params *p, const char *name, int64_t C, int64_t d_ff, lt_activation act,
                      bool swiglu, bool bias, double dropout, lt_generator *g) {
  const char *op = "ffn_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  if (C < 0 || d_ff < 0)
    return lt__err(LT_ERR_INVALID, "%s: '%s': C %lld and d_ff %lld must be >= 0", op, name, (long long)C,
                   (long long)d_ff);
  if (!valid_act(act)) return lt__err(LT_ERR_INVALID, "%s: '%s': unknown activation %d", op, name, (int)act);
  if (!(dropout >= 0 && dropout <= 1))
    return lt__err(LT_ERR_INVALID, "%s: '%s': dropout %g must be in [0, 1]", op, name, dropout);
  char sub[NAME_MAX_LEN];
  reg_mark mk = mark_begin(p, g);
  lt_ffn tmp = {.swiglu = swiglu, .act = act, .dropout = dropout};
  /* Registration (and draw) order is the PyTorch definition order:
   * linear1, linear2 (TransformerEncoderLayer); w1, w2, w3 (LLaMA FeedForward). */
  const char *n1 = swiglu ? "w1" : "linear1", *n2 = swiglu ? "w2" : "linear2";
  if (strlen(name) + 9 > sizeof sub)
    return lt__err(LT_ERR_INVALID, "%s: the name '%s' is too long", op, name);
  if ((s = linear_register(&tmp.linear1, p, lt_name_join(sub, sizeof sub, name, n1), C, d_ff, bias, g)) != LT_OK ||
      (s = linear_register(&tmp.linear2, p, lt_name_join(sub, sizeof sub, name, n2), d_ff, C, bias, g)) != LT_OK ||
      (swiglu &&
       (s = linear_register(&tmp.linear3, p, lt_name_join(sub, sizeof sub, name, "w3"), C, d_ff, bias, g)) != LT_OK))
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

/* two-layer:  y = linear2(dropout(act(linear1(x))))
 * gated:      y = w2(dropout(act(w1 x) * w3 x))   (SwiGLU: act SiLU; GEGLU: GELU)
 * (dropout only when m->dropout > 0) */
lt_tensor *lt_ffn_forward(const lt_ffn *m, const lt_tensor *x, const lt_nn_ctx *ctx) {
  if (!m) return lt__err(LT_ERR_NULL, "ffn_forward: the module is NULL"), NULL;
  lt_tensor *ab[2] = {NULL, NULL}; /* linear1(x), and linear3(x) when gated: one lt_linear_many */
  if (m->swiglu) {
    const lt_tensor *w[2] = {m->linear1.weight, m->linear3.weight}, *bs[2] = {m->linear1.bias, m->linear3.bias};
    if (lt_linear_many(x, 2, w, bs, ab) != LT_OK) return NULL;
  } else if (!(ab[0] = lt_linear_forward(&m->linear1, x))) {
    return NULL;
  }
  lt_tensor *a = ab[0]; /* [..., d_ff] */
  lt_tensor *h = lt_activation_forward(m->act, a);
  lt_tensor_free(a);
  if (!h) lt_tensor_free(ab[1]);
  if (m->swiglu && h) {
    lt_tensor *b = ab[1]; /* [..., d_ff] */
    lt_tensor *hb = lt_mul(h, b);
    lt_tensor_free(b);
    lt_tensor_free(h);
    h = hb;
  }
  if (h && m->dropout > 0) {
    lt_tensor *d = lt_dropout(h, m->dropout, ctx);
    lt_tensor_free(h);
    h = d;
  }
  lt_tensor *y = lt_linear_forward(&m->linear2, h); /* [..., C] */
  lt_tensor_free(h);
  return y;
}

/* ======================================================================== */
/* LSTM (nn/lstm.h; the forward is in nn/lstm.c)                            */
/* ======================================================================== */

/* The arrays of one recurrent module: [direction][layer] weight_ih,
 * weight_hh, bias_ih, bias_hh (the LSTM's and the GRU's structs). */
typedef struct rnn_slots {
  lt_tensor **w[2][4];
} rnn_slots;

/* Registers nn.LSTM's (G = 4) or nn.GRU's (G = 3) parameters in PyTorch's
 * order (layer by layer, the reverse direction after the forward one, each
 * weight_ih, weight_hh, bias_ih, bias_hh), each U(-1/sqrt(H), 1/sqrt(H)). */
static lt_status rnn_register(const char *op, lt_params *p, const char *name, int64_t input_size, int64_t hidden_size,
                              int64_t G, const lt_lstm_opts *o, lt_generator *g, const rnn_slots *sl) {
  if (input_size < 1 || hidden_size < 1 ||
      hidden_size > INT64_MAX / 8 / (input_size > hidden_size ? input_size : hidden_size))
    return lt__err(LT_ERR_INVALID, "%s: '%s': input_size %lld and hidden_size %lld must be >= 1 (and %lld * hidden_size * size must fit)", op,
                   name, (long long)input_size, (long long)hidden_size, (long long)(2 * G));
  if (o->num_layers < 1 || o->num_layers > LT_LSTM_MAX_LAYERS)
    return lt__err(LT_ERR_INVALID, "%s: '%s': num_layers %lld must be in [1, %d]", op, name, (long long)o->num_layers,
                   LT_LSTM_MAX_LAYERS);
  if (!(o->dropout >= 0 && o->dropout <= 1))
    return lt__err(LT_ERR_INVALID, "%s: '%s': dropout %g must be in [0, 1]", op, name, o->dropout);
  const double bound = 1.0 / sqrt((double)hidden_size);
  const int64_t HG = G * hidden_size, D = o->bidirectional ? 2 : 1;
  for (int l = 0; l < o->num_layers; l++)
    for (int d = 0; d < D; d++) {
      const char *leaf[4] = {"weight_ih_l%d%s", "weight_hh_l%d%s", "bias_ih_l%d%s", "bias_hh_l%d%s"};
      for (int k = 0; k < (o->bias ? 4 : 2); k++) {
        char lname[48];
        snprintf(lname, sizeof lname, leaf[k], l, d ? "_reverse" : "");
        lt_tensor *t = k < 2 ? new_param(LT_SHAPE(HG, k == 0 ? (l == 0 ? input_size : D * hidden_size) : hidden_size))
                             : new_param(LT_SHAPE(HG));
        lt_status s = LT_OK;
        if (t) {
          bool prev = lt_set_grad_enabled(false);
          s = lt_uniform_(g, t, -bound, bound);
          lt_set_grad_enabled(prev);
          if (s != LT_OK) lt_tensor_free(t), t = NULL;
        }
        if ((s = add_param(p, name, lname, t, k < 2 ? LT_PARAM_DEFAULT : LT_PARAM_NO_DECAY)) != LT_OK) return s;
        sl->w[d][k][l] = t;
      }
    }
  return LT_OK;
}

lt_status lt_lstm_init(lt_lstm_m *m, lt_params *p, const char *name, int64_t input_size, int64_t hidden_size,
                       const lt_lstm_opts *opts, lt_generator *g) {
  const char *op = "lstm_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  lt_lstm_m tmp = {.input_size = input_size, .hidden_size = hidden_size, .opts = opts ? *opts : LT_LSTM_DEFAULTS};
  const rnn_slots sl = {{{tmp.weight_ih, tmp.weight_hh, tmp.bias_ih, tmp.bias_hh},
                         {tmp.weight_ih_reverse, tmp.weight_hh_reverse, tmp.bias_ih_reverse, tmp.bias_hh_reverse}}};
  reg_mark mk = mark_begin(p, g);
  if ((s = rnn_register(op, p, name, input_size, hidden_size, 4, &tmp.opts, g, &sl)) != LT_OK)
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}

lt_status lt_gru_init(lt_gru_m *m, lt_params *p, const char *name, int64_t input_size, int64_t hidden_size,
                      const lt_gru_opts *opts, lt_generator *g) {
  const char *op = "gru_init";
  lt_status s = check_common(op, m, p, name);
  if (s != LT_OK) return s;
  if (!g) return lt__err_null(op, "g");
  lt_gru_m tmp = {.input_size = input_size, .hidden_size = hidden_size, .opts = opts ? *opts : LT_GRU_DEFAULTS};
  const rnn_slots sl = {{{tmp.weight_ih, tmp.weight_hh, tmp.bias_ih, tmp.bias_hh},
                         {tmp.weight_ih_reverse, tmp.weight_hh_reverse, tmp.bias_ih_reverse, tmp.bias_hh_reverse}}};
  reg_mark mk = mark_begin(p, g);
  if ((s = rnn_register(op, p, name, input_size, hidden_size, 3, &tmp.opts, g, &sl)) != LT_OK)
    return mark_rollback(&mk, s);
  *m = tmp;
  return LT_OK;
}
