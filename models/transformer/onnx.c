/*
 * models/transformer/onnx.c: the Transformer as an ONNX graph (onnx.h),
 * written with protobuf-c from the ONNX schema (models/transformer/onnx/
 * onnx.proto, compiled by protoc-c at build time).
 *
 * The graph mirrors transformer.c's forward in evaluation mode, operator by
 * operator (docs/interop.md, "ONNX", draws it):
 *   x = Gather(embed.weight, input_ids) [* sqrt(C)] [+ positions[:T]] [+ Gather(type_embed.weight, token_type_ids)]
 *   [x = embed_norm(x)]
 *   each layer, pre-norm:  x = x + attn(norm1(x)); x = x + ffn(norm2(x))
 *              post-norm:  x = norm1(x + attn(x)); x = norm2(x + ffn(x))
 *   [x = final norm(x)]; decoder: logits = x W_head; encoder: last_hidden_state = x
 * Attention keeps grouped-query heads apart instead of repeating the key
 * and value heads: q [B, NKV, G, T, HS] (G = NH / NKV query heads per
 * key/value head, query head h = kv * G + g as libtensor's and Hugging
 * Face's repeat_kv), k^T [B, NKV, 1, HS, T], v [B, NKV, 1, T, HS], so
 * MatMul's broadcasting over the third axis does the sharing. Masks are
 * additive: the causal one is Trilu(ConstantOfShape([T, T], lowest float),
 * k = 1), the encoder's padding one (1 - attention_mask) * lowest float, as
 * Hugging Face's models (softmax then gives the masked keys weight 0).
 * LayerNorm is LayerNormalization (opset 17); RMSNorm, GELU and SiLU are
 * composed of elementary operators (opset 17 has none of them).
 *
 * Memory: every message lives in one arena (gb.allocs) released after the
 * file is written; raw_data borrows the (contiguous, f32) parameters, and the
 * transposed Linear weights are copies held in gb.keep until then.
 *
 * What this is not: a general tracer of libtensor programs (the graph is
 * written from the configuration, so an option the model gains needs a line
 * here too: build_graph refuses what it does not know, never guesses).
 */
#include "models/transformer/onnx.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "models/transformer/config.h"
#include "onnx/onnx.pb-c.h"

/* protobuf's limit on one message: a file past it cannot be parsed. */
#define ONNX_MAX_BYTES ((uint64_t)INT32_MAX)
#define SCOPE_LEN 160

typedef Onnx__NodeProto node_t;

/* The graph under construction. Every function below checks g->failed and
 * does nothing once it is set, so the builders read as straight lines and
 * the one error is reported at the end. */
typedef struct gb {
  void **allocs;              /* the arena: every message, array and string */
  size_t n_allocs, cap_allocs;
  node_t **nodes;
  size_t n_nodes, cap_nodes;
  Onnx__TensorProto **inits;
  size_t n_inits, cap_inits;
  Onnx__ValueInfoProto *in[4], *out[4];
  size_t n_in, n_out;
  lt_tensor **keep;           /* tensors that raw_data borrows */
  size_t n_keep, cap_keep;
  uint64_t init_bytes;
  int64_t next;               /* node and constant counter, for unique names */
  bool failed;
  lt_params *P;
  const lt_tf_config *c;
  char scope[SCOPE_LEN];      /* the name prefix of new nodes, e.g. "decoder.layers.0.self_attn" */
  const char *T1;             /* [1] int64: the sequence length, Shape(input_ids)[1:2] */
} gb;

static const char *const EMPTY = "";

/* Sets the error once (the first failure is the one reported). */
static void fail(gb *g, lt_status s, const char *fmt, ...) {
  if (g->failed) return;
  g->failed = true;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lt_error_set(s, "onnx_export: %s", msg);
}

/* Grows *arr (of *cap elements of size el) to hold n + 1. */
static bool grow(gb *g, void *arr, size_t *cap, size_t n, size_t el) {
  if (n < *cap) return true;
  const size_t nc = *cap ? 2 * *cap : 16;
  void *p = realloc(*(void **)arr, nc * el);
  if (!p) return fail(g, LT_ERR_NOMEM, "out of memory (%zu graph entries)", nc), false;
  *(void **)arr = p;
  *cap = nc;
  return true;
}

static void *alloc(gb *g, size_t size) {
  if (g->failed) return NULL;
  void *p = calloc(1, size ? size : 1);
  if (!p || !grow(g, &g->allocs, &g->cap_allocs, g->n_allocs, sizeof *g->allocs)) {
    free(p);
    return fail(g, LT_ERR_NOMEM, "out of memory"), NULL;
  }
  return g->allocs[g->n_allocs++] = p;
}

static char *str(gb *g, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  char *s = alloc(g, strlen(buf) + 1);
  if (s) memcpy(s, buf, strlen(buf) + 1);
  return s;
}

/* ---- nodes and attributes -------------------------------------------------- */

/* A node of type op over the inputs in (names), with n_out outputs named
 * "<scope>/<op>_<k>[:<j>]"; NULL after a failure. */
static node_t *node_n(gb *g, const char *op, size_t n_in, const char *const *in, size_t n_out) {
  node_t *n = alloc(g, sizeof *n);
  char **ins = alloc(g, sizeof *ins * n_in), **outs = alloc(g, sizeof *outs * n_out);
  char *name = str(g, "%s%s%s_%lld", g->scope, *g->scope ? "/" : "", op, (long long)g->next++);
  if (!name || !grow(g, &g->nodes, &g->cap_nodes, g->n_nodes, sizeof *g->nodes)) return NULL;
  onnx__node_proto__init(n);
  n->name = name;
  n->op_type = (char *)op; /* literals: never freed (the arena frees what it allocated) */
  for (size_t i = 0; i < n_in; i++) ins[i] = (char *)in[i];
  for (size_t j = 0; j < n_out; j++) outs[j] = j == 0 ? name : str(g, "%s:%zu", name, j);
  if (g->failed) return NULL;
  n->n_input = n_in, n->input = ins;
  n->n_output = n_out, n->output = outs;
  g->nodes[g->n_nodes++] = n;
  return n;
}

static const char *out0(const node_t *n) { return n ? n->output[0] : EMPTY; }

#define NARGS(...) (sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *))
/* A one-output node: its output's name. */
#define OP(g, op, ...) out0(node_n(g, op, NARGS(__VA_ARGS__), (const char *[]){__VA_ARGS__}, 1))
/* The node itself (to add attributes). */
#define NODE(g, op, ...) node_n(g, op, NARGS(__VA_ARGS__), (const char *[]){__VA_ARGS__}, 1)

static Onnx__AttributeProto *attr(gb *g, node_t *n, const char *name, Onnx__AttributeProto__AttributeType type) {
  if (!n || g->failed) return NULL;
  Onnx__AttributeProto *a = alloc(g, sizeof *a);
  Onnx__AttributeProto **list = alloc(g, sizeof *list * (n->n_attribute + 1));
  if (!list) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1, a->type = type;
  for (size_t i = 0; i < n->n_attribute; i++) list[i] = n->attribute[i];
  list[n->n_attribute] = a;
  n->attribute = list, n->n_attribute++;
  return a;
}

static void attr_i(gb *g, node_t *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr(g, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = 1, a->i = v;
}

static void attr_f(gb *g, node_t *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr(g, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (a) a->has_f = 1, a->f = v;
}

static void attr_ints(gb *g, node_t *n, const char *name, size_t k, const int64_t *v) {
  Onnx__AttributeProto *a = attr(g, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *vals = alloc(g, sizeof *vals * k);
  if (!a || !vals) return;
  memcpy(vals, v, sizeof *vals * k);
  a->n_ints = k, a->ints = vals;
}

/* ---- initializers ---------------------------------------------------------- */

/* A TensorProto over data (borrowed: it must outlive the export; NULL with
 * bytes 0 for none). */
static Onnx__TensorProto *tensor_proto(gb *g, const char *name, int32_t dtype, int ndim, const int64_t *dims,
                                       const void *data, size_t bytes) {
  Onnx__TensorProto *t = alloc(g, sizeof *t);
  int64_t *d = alloc(g, sizeof *d * (size_t)ndim);
  char *nm = str(g, "%s", name);
  if (!nm) return NULL;
  onnx__tensor_proto__init(t);
  t->name = nm;
  if (ndim > 0) memcpy(d, dims, sizeof *d * (size_t)ndim);
  t->n_dims = (size_t)ndim, t->dims = d;
  t->has_data_type = 1, t->data_type = dtype;
  t->has_raw_data = 1, t->raw_data.len = bytes, t->raw_data.data = (uint8_t *)data;
  return t;
}

static const char *add_init(gb *g, Onnx__TensorProto *t) {
  if (!t || !grow(g, &g->inits, &g->cap_inits, g->n_inits, sizeof *g->inits)) return EMPTY;
  g->inits[g->n_inits++] = t;
  g->init_bytes += t->raw_data.len;
  return t->name;
}

/* A constant int64 vector [k] (k 0: a scalar). */
static const char *c_i64(gb *g, size_t k, const int64_t *v) {
  int64_t *data = alloc(g, sizeof *data * (k ? k : 1));
  if (!data) return EMPTY;
  memcpy(data, v, sizeof *data * (k ? k : 1));
  char name[64];
  snprintf(name, sizeof name, "const_%lld", (long long)g->next++);
  const int64_t dims[1] = {(int64_t)k};
  return add_init(g, tensor_proto(g, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, k ? 1 : 0, dims, data,
                                  sizeof *data * (k ? k : 1)));
}
#define C_I64(g, ...) c_i64(g, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

/* A constant float scalar. */
static const char *c_f32(gb *g, float v) {
  float *data = alloc(g, sizeof *data);
  if (!data) return EMPTY;
  *data = v;
  char name[64];
  snprintf(name, sizeof name, "const_%lld", (long long)g->next++);
  return add_init(g, tensor_proto(g, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, data, sizeof *data));
}

/* t (any float dtype, any layout) as a contiguous f32 initializer named
 * name; transposed (2-d) when transpose. Takes ownership of t. */
static const char *f32_init(gb *g, const char *name, lt_tensor *t, bool transpose) {
  if (g->failed || !t) {
    lt_tensor_free(t);
    if (!g->failed) fail(g, lt_last_status(), "%s: %s", name, lt_last_error());
    return EMPTY;
  }
  lt_tensor *a = transpose ? lt_transpose(t, 0, 1) : NULL;
  lt_tensor *f = t->dtype == LT_DTYPE_F32 ? NULL : lt_to_dtype(a ? a : t, LT_DTYPE_F32);
  lt_tensor *k = lt_contiguous(f ? f : a ? a : t);
  lt_tensor_free(f);
  lt_tensor_free(a);
  lt_tensor_free(t);
  if (!k) return fail(g, lt_last_status(), "%s: %s", name, lt_last_error()), EMPTY;
  if (!grow(g, &g->keep, &g->cap_keep, g->n_keep, sizeof *g->keep)) return lt_tensor_free(k), EMPTY;
  g->keep[g->n_keep++] = k;
  return add_init(g, tensor_proto(g, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, k->ndim, k->shape, k->data,
                                  (size_t)k->numel * sizeof(float)));
}

/* The parameter "<fmt...>" (must exist) as an initializer of that name,
 * added at its first use. Each parameter is used in one orientation only
 * (Linear weights transposed; the tied head transposes the embedding with a
 * Transpose node instead of a second copy). */
static const char *param(gb *g, bool transpose, const char *fmt, ...) {
  if (g->failed) return EMPTY;
  char name[SCOPE_LEN + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  for (size_t i = 0; i < g->n_inits; i++) /* once in the file however often it is used (a tied head's embedding) */
    if (strcmp(g->inits[i]->name, name) == 0) return g->inits[i]->name;
  lt_tensor *p = lt_params_find(g->P, name);
  if (!p) return fail(g, LT_ERR_INVALID, "the model has no parameter '%s' (a configuration the exporter does not "
                      "know)", name), EMPTY;
  return f32_init(g, name, lt_contiguous(p), transpose); /* a new handle: f32_init frees it */
}

/* ---- graph inputs and outputs --------------------------------------------- */

/* dims: > 0 fixed, -1 "batch", -2 "sequence". */
static Onnx__ValueInfoProto *value_info(gb *g, const char *name, int32_t elem, int ndim, const int64_t *dims) {
  Onnx__ValueInfoProto *v = alloc(g, sizeof *v);
  Onnx__TypeProto *tp = alloc(g, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = alloc(g, sizeof *tt);
  Onnx__TensorShapeProto *sh = alloc(g, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dl = alloc(g, sizeof *dl * (size_t)ndim);
  if (g->failed) return NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int i = 0; i < ndim; i++) {
    Onnx__TensorShapeProto__Dimension *d = alloc(g, sizeof *d);
    if (!d) return NULL;
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[i] > 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d->dim_value = dims[i];
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = (char *)(dims[i] == -1 ? "batch" : "sequence");
    }
    dl[i] = d;
  }
  sh->n_dim = (size_t)ndim, sh->dim = dl;
  tt->has_elem_type = 1, tt->elem_type = elem, tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  v->name = (char *)name, v->type = tp;
  return v;
}

static const char *input(gb *g, const char *name) {
  Onnx__ValueInfoProto *v = value_info(g, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 2, (int64_t[]){-1, -2});
  if (v) g->in[g->n_in++] = v;
  return name;
}

/* x becomes the graph output name (an Identity node of that name). */
static void output(gb *g, const char *x, const char *name, int ndim, const int64_t *dims) {
  node_t *n = NODE(g, "Identity", x);
  Onnx__ValueInfoProto *v = value_info(g, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims);
  if (!n || !v) return;
  n->output[0] = (char *)name;
  g->out[g->n_out++] = v;
}

/* ---- the model's blocks ------------------------------------------------------ */

static void scope(gb *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->scope, sizeof g->scope, fmt, ap);
  va_end(ap);
}

/* x W^T [+ b] as MatMul(x, W^T) [+ b]: prefix.weight [out, in], prefix.bias. */
static const char *linear(gb *g, const char *x, const char *prefix, bool bias) {
  const char *y = OP(g, "MatMul", x, param(g, true, "%s.weight", prefix));
  return bias ? OP(g, "Add", y, param(g, false, "%s.bias", prefix)) : y;
}

/* LayerNorm or RMSNorm over the last axis (nn/norm.c's formulas). */
static const char *norm(gb *g, const char *x, const char *prefix) {
  const lt_tf_config *c = g->c;
  if (c->norm == LT_TF_LAYER_NORM) {
    node_t *n = NODE(g, "LayerNormalization", x, param(g, false, "%s.weight", prefix),
                     param(g, false, "%s.bias", prefix));
    attr_i(g, n, "axis", -1);
    attr_f(g, n, "epsilon", (float)c->norm_eps);
    return out0(n);
  }
  /* y = x / sqrt(mean(x^2) + eps) * w */
  node_t *ms = NODE(g, "ReduceMean", OP(g, "Mul", x, x));
  attr_ints(g, ms, "axes", 1, (int64_t[]){-1});
  attr_i(g, ms, "keepdims", 1);
  const char *rms = OP(g, "Sqrt", OP(g, "Add", out0(ms), c_f32(g, (float)c->norm_eps)));
  return OP(g, "Mul", OP(g, "Div", x, rms), param(g, false, "%s.weight", prefix));
}

static const char *activation(gb *g, const char *x) {
  switch (g->c->act) {
    case LT_ACT_RELU: return OP(g, "Relu", x);
    case LT_ACT_SILU: return OP(g, "Mul", x, OP(g, "Sigmoid", x));
    case LT_ACT_GELU: { /* 0.5 x (1 + erf(x / sqrt 2)) */
      const char *e = OP(g, "Erf", OP(g, "Div", x, c_f32(g, (float)sqrt(2.0))));
      return OP(g, "Mul", OP(g, "Mul", x, OP(g, "Add", e, c_f32(g, 1.0f))), c_f32(g, 0.5f));
    }
    case LT_ACT_GELU_TANH: { /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
      const char *x3 = OP(g, "Mul", OP(g, "Mul", x, x), x);
      const char *in = OP(g, "Add", x, OP(g, "Mul", x3, c_f32(g, 0.044715f)));
      const char *t = OP(g, "Tanh", OP(g, "Mul", in, c_f32(g, (float)sqrt(2.0 / 3.14159265358979323846))));
      return OP(g, "Mul", OP(g, "Mul", x, OP(g, "Add", t, c_f32(g, 1.0f))), c_f32(g, 0.5f));
    }
  }
  fail(g, LT_ERR_INVALID, "activation %d has no ONNX form here", (int)g->c->act);
  return EMPTY;
}

/* The feed-forward block of layer L: linear2(act(linear1 x)) or SwiGLU
 * w2(silu(w1 x) * w3 x). */
static const char *ffn(gb *g, const char *x, const char *L) {
  char p[SCOPE_LEN + 16];
  const bool b = g->c->bias;
  if (g->c->swiglu) {
    snprintf(p, sizeof p, "%s.w1", L);
    const char *a = linear(g, x, p, b);
    snprintf(p, sizeof p, "%s.w3", L);
    const char *u = linear(g, x, p, b);
    const char *h = OP(g, "Mul", OP(g, "Mul", a, OP(g, "Sigmoid", a)), u);
    snprintf(p, sizeof p, "%s.w2", L);
    return linear(g, h, p, b);
  }
  snprintf(p, sizeof p, "%s.linear1", L);
  const char *h = activation(g, linear(g, x, p, b));
  snprintf(p, sizeof p, "%s.linear2", L);
  return linear(g, h, p, b);
}

/* RoPE ("rotate half", nn/rope.c) of x [B, T, NKV, G, HS] with the tables
 * cos, sin [T, 1, 1, HS/2]:
 *   out_i = x_i cos - x_{i+H} sin, out_{i+H} = x_{i+H} cos + x_i sin. */
static const char *rope(gb *g, const char *x, const char *cos, const char *sin) {
  node_t *s = node_n(g, "Split", 1, (const char *[]){x}, 2);
  attr_i(g, s, "axis", -1);
  if (!s) return EMPTY;
  const char *x1 = s->output[0], *x2 = s->output[1];
  const char *o1 = OP(g, "Sub", OP(g, "Mul", x1, cos), OP(g, "Mul", x2, sin));
  const char *o2 = OP(g, "Add", OP(g, "Mul", x2, cos), OP(g, "Mul", x1, sin));
  node_t *n = NODE(g, "Concat", o1, o2);
  attr_i(g, n, "axis", -1);
  return out0(n);
}

static const char *transpose(gb *g, const char *x, size_t k, const int64_t *perm) {
  node_t *n = NODE(g, "Transpose", x);
  attr_ints(g, n, "perm", k, perm);
  return out0(n);
}
#define TRANSPOSE(g, x, ...) transpose(g, x, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

/* Rotary tables [T, 1, 1, HS/2] (nil when the model has no RoPE). */
typedef struct rope_t {
  const char *cos, *sin;
} rope_t;

/* Self-attention of layer L over x [B, T, C]; mask: additive, broadcasting
 * to the scores [B, NKV, G, T, T]. */
static const char *attention(gb *g, const char *x, const char *L, const char *mask, const rope_t *r) {
  const lt_tf_config *c = g->c;
  const int64_t NH = c->n_heads, NKV = c->n_kv_heads, G = NH / NKV, HS = c->d_model / NH;
  char p[SCOPE_LEN + 32];
  snprintf(g->scope, sizeof g->scope, "%s.self_attn", L);
  const bool qkvb = c->bias || c->qkv_bias; /* Qwen2: biases on q, k, v only */
  snprintf(p, sizeof p, "%s.self_attn.q_proj", L);
  const char *q = OP(g, "Reshape", linear(g, x, p, qkvb), C_I64(g, 0, 0, NKV, G, HS)); /* [B, T, NKV, G, HS] */
  snprintf(p, sizeof p, "%s.self_attn.k_proj", L);
  const char *k = OP(g, "Reshape", linear(g, x, p, qkvb), C_I64(g, 0, 0, NKV, 1, HS)); /* [B, T, NKV, 1, HS] */
  snprintf(p, sizeof p, "%s.self_attn.v_proj", L);
  const char *v = OP(g, "Reshape", linear(g, x, p, qkvb), C_I64(g, 0, 0, NKV, 1, HS));
  if (r->cos) q = rope(g, q, r->cos, r->sin), k = rope(g, k, r->cos, r->sin);
  q = TRANSPOSE(g, q, 0, 2, 3, 1, 4); /* [B, NKV, G, T, HS] */
  k = TRANSPOSE(g, k, 0, 2, 3, 4, 1); /* [B, NKV, 1, HS, T] */
  v = TRANSPOSE(g, v, 0, 2, 3, 1, 4); /* [B, NKV, 1, T, HS] */
  const char *s = OP(g, "Mul", OP(g, "MatMul", q, k), c_f32(g, (float)(1.0 / sqrt((double)HS)))); /* [B, NKV, G, T, T] */
  node_t *sm = NODE(g, "Softmax", OP(g, "Add", s, mask));
  attr_i(g, sm, "axis", -1);
  const char *o = TRANSPOSE(g, OP(g, "MatMul", out0(sm), v), 0, 3, 1, 2, 4); /* [B, T, NKV, G, HS] */
  o = OP(g, "Reshape", o, C_I64(g, 0, 0, -1));                               /* [B, T, C] */
  snprintf(p, sizeof p, "%s.self_attn.out_proj", L);
  return linear(g, o, p, c->bias);
}

/* One layer (nn/transformer_layer.h, without cross-attention) named L. */
static const char *layer(gb *g, const char *x, const char *L, const char *mask, const rope_t *r) {
  char n1[SCOPE_LEN + 8], n2[SCOPE_LEN + 8];
  snprintf(n1, sizeof n1, "%s.norm1", L);
  snprintf(n2, sizeof n2, "%s.norm2", L);
  if (g->c->pre_norm) { /* x = x + attn(norm1(x)); x = x + ffn(norm2(x)) */
    scope(g, "%s", L);
    x = OP(g, "Add", x, attention(g, norm(g, x, n1), L, mask, r));
    scope(g, "%s", L);
    return OP(g, "Add", x, ffn(g, norm(g, x, n2), L));
  }
  const char *a = attention(g, x, L, mask, r); /* x = norm1(x + attn(x)); x = norm2(x + ffn(x)) */
  scope(g, "%s", L);
  x = norm(g, OP(g, "Add", x, a), n1);
  return norm(g, OP(g, "Add", x, ffn(g, x, L)), n2);
}

/* Slice(table, [0], T, [0]): the first T rows. */
static const char *first_rows(gb *g, const char *table) {
  return OP(g, "Slice", table, C_I64(g, 0), g->T1, C_I64(g, 0));
}

/* The embeddings (transformer.c's embed_forward in evaluation mode). */
static const char *embeddings(gb *g, const char *ids, const char *types) {
  const lt_tf_config *c = g->c;
  scope(g, "embed");
  const char *x = OP(g, "Gather", param(g, false, "embed.weight"), ids); /* [B, T, C] */
  if (c->scale_embeddings) x = OP(g, "Mul", x, c_f32(g, (float)sqrt((double)c->d_model)));
  if (c->pos == LT_TF_POS_LEARNED) x = OP(g, "Add", x, first_rows(g, param(g, false, "pos_embed.weight")));
  if (c->pos == LT_TF_POS_SINUSOIDAL)
    x = OP(g, "Add", x, first_rows(g, f32_init(g, "pos_table", lt_sinusoidal_table(LT_DTYPE_F32, c->max_len,
                                                                                    c->d_model), false)));
  if (types) x = OP(g, "Add", x, OP(g, "Gather", param(g, false, "type_embed.weight"), types));
  if (c->embed_norm) x = norm(g, x, "embed_norm");
  return x;
}

/* cos and sin [max_len, 1, 1, HS/2] of nn/rope.c's angles (computed in
 * double, stored as f32), cut to the sequence. */
static rope_t rope_tables(gb *g) {
  const lt_tf_config *c = g->c;
  if (c->pos != LT_TF_POS_ROPE) return (rope_t){NULL, NULL};
  const int64_t H = c->d_model / c->n_heads / 2, Tm = c->max_len;
  lt_tensor *tc = lt_empty(LT_DTYPE_F32, 4, (int64_t[]){Tm, 1, 1, H});
  lt_tensor *ts = lt_empty(LT_DTYPE_F32, 4, (int64_t[]){Tm, 1, 1, H});
  if (tc && ts) {
    float *pc = tc->data, *ps = ts->data;
    const lt_rope_scaling sc = lt_tf_rope_scaling(c); /* Llama 3's or linear scaling, as the model runs */
    for (int64_t i = 0; i < H; i++) {
      const double inv = lt_rope_inv_freq(i, 2 * H, c->rope_base, &sc);
      for (int64_t t = 0; t < Tm; t++) pc[t * H + i] = (float)cos((double)t * inv), ps[t * H + i] = (float)sin((double)t * inv);
    }
  }
  scope(g, "rope");
  const char *cos_all = f32_init(g, "rope.cos", tc, false), *sin_all = f32_init(g, "rope.sin", ts, false);
  return (rope_t){first_rows(g, cos_all), first_rows(g, sin_all)};
}

/* Trilu(ConstantOfShape([T, T], lowest), k = 1): lowest above the diagonal, 0 elsewhere; with a
 * sliding window W also lowest at and below the W-th diagonal under it (Trilu lower, k = -W: the keys
 * s <= t - W), the two regions disjoint. */
static const char *causal_mask(gb *g) {
  scope(g, "mask");
  node_t *tt = NODE(g, "Concat", g->T1, g->T1);
  attr_i(g, tt, "axis", 0);
  node_t *full = NODE(g, "ConstantOfShape", out0(tt));
  Onnx__AttributeProto *a = attr(g, full, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  float *low = alloc(g, sizeof *low);
  if (a && low) {
    *low = -FLT_MAX;
    a->t = tensor_proto(g, "lowest", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){1}, low, sizeof *low);
  }
  node_t *tri = NODE(g, "Trilu", out0(full), c_i64(g, 0, (int64_t[]){1}));
  attr_i(g, tri, "upper", 1);
  if (g->c->sliding_window <= 0) return out0(tri);
  node_t *old = NODE(g, "Trilu", out0(full), c_i64(g, 0, (int64_t[]){-g->c->sliding_window}));
  attr_i(g, old, "upper", 0);
  return OP(g, "Add", out0(tri), out0(old));
}

/* (1 - attention_mask) * lowest as [B, 1, 1, 1, T]. */
static const char *padding_mask(gb *g, const char *mask_f) {
  scope(g, "mask");
  const char *m = OP(g, "Mul", OP(g, "Sub", c_f32(g, 1.0f), mask_f), c_f32(g, -FLT_MAX));
  return OP(g, "Unsqueeze", m, C_I64(g, 1, 2, 3));
}

static const char *cast_f32(gb *g, const char *x) {
  node_t *n = NODE(g, "Cast", x);
  attr_i(g, n, "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  return out0(n);
}

static void build_graph(gb *g) {
  const lt_tf_config *c = g->c;
  const int64_t C = c->d_model;
  if (c->arch == LT_TF_ENCODER_DECODER)
    return fail(g, LT_ERR_INVALID, "an encoder-decoder model has no ONNX export (decoder-only and encoder-only "
                "models have)");
  const bool enc = c->arch == LT_TF_ENCODER_ONLY;
  const char *ids = input(g, "input_ids");
  const char *mask_in = enc ? input(g, "attention_mask") : NULL;
  const char *types = enc && c->type_vocab_size > 0 ? input(g, "token_type_ids") : NULL;
  scope(g, "shape");
  g->T1 = OP(g, "Slice", OP(g, "Shape", ids), C_I64(g, 1), C_I64(g, 2), C_I64(g, 0));
  const char *mask_f = enc ? cast_f32(g, mask_in) : NULL; /* [B, T] 1 = token */
  const char *mask = enc ? padding_mask(g, mask_f) : causal_mask(g);
  const rope_t r = rope_tables(g);
  const char *x = embeddings(g, ids, types);
  const int64_t n = enc ? c->n_enc_layers : c->n_dec_layers;
  const char *stack = enc ? "encoder" : "decoder";
  for (int64_t i = 0; i < n; i++) {
    char L[SCOPE_LEN];
    snprintf(L, sizeof L, "%s.layers.%lld", stack, (long long)i);
    x = layer(g, x, L, mask, &r);
  }
  scope(g, "%s", stack);
  if (c->pre_norm) x = norm(g, x, enc ? "encoder.norm" : "decoder.norm");
  if (!enc) {
    scope(g, "lm_head");
    const char *w = c->tie_embeddings ? TRANSPOSE(g, param(g, false, "embed.weight"), 1, 0)
                                      : param(g, true, "lm_head.weight");
    output(g, OP(g, "MatMul", x, w), "logits", 3, (int64_t[]){-1, -2, c->vocab_size});
    return;
  }
  output(g, x, "last_hidden_state", 3, (int64_t[]){-1, -2, C});
  const char *pooled = NULL;
  if (c->pooler) { /* tanh(pooler(h[:, 0])) */
    scope(g, "pooler");
    node_t *first = NODE(g, "Gather", x, c_i64(g, 0, (int64_t[]){0}));
    attr_i(g, first, "axis", 1);
    pooled = OP(g, "Tanh", linear(g, out0(first), "pooler", c->bias));
    output(g, pooled, "pooler_output", 2, (int64_t[]){-1, C});
  }
  if (c->n_classes > 0) { /* lt_transformer_classify: the pooler's output, or the mean over the tokens */
    scope(g, "classifier");
    if (!pooled) {
      node_t *sum = NODE(g, "ReduceSum", OP(g, "Mul", x, OP(g, "Unsqueeze", mask_f, C_I64(g, -1))), C_I64(g, 1));
      attr_i(g, sum, "keepdims", 0);
      node_t *cnt = NODE(g, "ReduceSum", mask_f, C_I64(g, 1));
      attr_i(g, cnt, "keepdims", 1);
      pooled = OP(g, "Div", out0(sum), OP(g, "Max", out0(cnt), c_f32(g, 1.0f)));
    }
    output(g, linear(g, pooled, "classifier", c->bias), "logits", 2, (int64_t[]){-1, c->n_classes});
  }
}

static void gb_free(gb *g) {
  for (size_t i = 0; i < g->n_keep; i++) lt_tensor_free(g->keep[i]);
  for (size_t i = 0; i < g->n_allocs; i++) free(g->allocs[i]);
  free(g->keep);
  free(g->allocs);
  free(g->nodes);
  free(g->inits);
}

lt_status lt_onnx_export(lt_transformer *m, const char *path, lt_onnx_summary *summary) {
  if (!m) return lt_error_set(LT_ERR_NULL, "onnx_export: the model is NULL");
  if (!path) return lt_error_null_arg("onnx_export", "path");
  const uint16_t one = 1;
  if (*(const uint8_t *)&one != 1)
    return lt_error_set(LT_ERR_INVALID, "onnx_export: this host is big-endian; ONNX raw data is little-endian");
  gb g = {.P = lt_transformer_params(m), .c = lt_transformer_config(m)};
  const bool prev = lt_set_grad_enabled(false);
  build_graph(&g);
  lt_set_grad_enabled(prev);
  if (!g.failed && g.init_bytes > ONNX_MAX_BYTES)
    fail(&g, LT_ERR_INVALID, "the weights take %llu bytes: one ONNX file (a protobuf) holds at most 2 GiB, and "
         "external data is not written", (unsigned long long)g.init_bytes);
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  Onnx__OperatorSetIdProto *opsets[1] = {&opset};
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  char desc[512] = "";
  int64_t n_params = 0;
  for (int i = 0; i < lt_params_count(g.P); i++) n_params += lt_params_at(g.P, i)->value->numel;
  lt_tf_config_describe(g.c, n_params, desc, sizeof desc);
  graph.name = (char *)(g.c->arch == LT_TF_ENCODER_ONLY ? "libtensor encoder-only Transformer"
                                                         : "libtensor decoder-only Transformer");
  graph.doc_string = desc;
  graph.n_node = g.n_nodes, graph.node = g.nodes;
  graph.n_initializer = g.n_inits, graph.initializer = g.inits;
  graph.n_input = g.n_in, graph.input = g.in;
  graph.n_output = g.n_out, graph.output = g.out;
  opset.domain = (char *)"", opset.has_version = 1, opset.version = LT_ONNX_OPSET;
  model.has_ir_version = 1, model.ir_version = LT_ONNX_IR_VERSION;
  model.n_opset_import = 1, model.opset_import = opsets;
  model.producer_name = (char *)"libtensor";
  model.producer_version = (char *)lt_version();
  model.graph = &graph;
  lt_status s = g.failed ? lt_last_status() : LT_OK;
  uint8_t *buf = NULL;
  size_t size = 0;
  if (s == LT_OK) {
    size = onnx__model_proto__get_packed_size(&model);
    if (size > ONNX_MAX_BYTES)
      s = lt_error_set(LT_ERR_INVALID, "onnx_export: the file would take %zu bytes: one ONNX file (a protobuf) holds "
                       "at most 2 GiB, and external data is not written", size);
    else if (!(buf = malloc(size ? size : 1)))
      s = lt_error_set(LT_ERR_NOMEM, "onnx_export: out of memory for the %zu-byte file", size);
  }
  if (s == LT_OK && onnx__model_proto__pack(&model, buf) != size)
    s = lt_error_set(LT_ERR_IO, "onnx_export: protobuf-c packed a size other than it computed");
  if (s == LT_OK && (s = lt_ckpt_write_file(path, buf, size)) != LT_OK) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt_error_set(s, "onnx_export: '%s': %s", path, msg);
  }
  if (s == LT_OK && summary)
    *summary = (lt_onnx_summary){.nodes = (int64_t)g.n_nodes, .initializers = (int64_t)g.n_inits, .bytes = size};
  free(buf);
  gb_free(&g);
  return s;
}
