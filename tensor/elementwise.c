/*
 * tensor/elementwise.c: every elementwise op of tensor.h (unary functions,
 * pow/clamp, binary arithmetic and comparisons with broadcasting, their
 * scalar and in-place forms, where, masked_fill) and their backward.
 *
 * Layout, top to bottom:
 *   1. running a kernel (ew_run): bf16 operands widened to f32 here and
 *      nowhere else; the kernels themselves are tensor/elementwise_kernels.c's
 *      (tensor/elementwise_internal.h);
 *   2. dtype rules: result and compute dtypes (bool < i32 < i64 < f32 < f64);
 *      operands of another dtype are converted into a temporary first, so
 *      every kernel sees one dtype (mixed-dtype calls are rare and pay a copy);
 *   3. the ops, each forward followed by its backward (written with public
 *      ops, so it works for any float dtype; backward runs with grad mode off
 *      inside the engine's scope, so temporaries are not freed one by one).
 *
 * What this is not: the inner loops (tensor/elementwise_kernels.c), or a
 * fused-kernel generator: each call is one pass over memory; a chain like
 * gelu(x*w+b) makes three passes.
 *
 * Semantics follow PyTorch: maximum/minimum propagate NaN, clamp with lo > hi
 * gives hi, relu'(0) = abs'(0) = 0, integer division is true division (f32),
 * integer arithmetic wraps (two's complement) instead of being undefined.
 */
#include "tensor/graph_internal.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/elementwise_internal.h"

#include <math.h>
#include <string.h>

/* ======================================================================== */
/* 1. Running a kernel                                                      */
/* ======================================================================== */

static lt_tensor *ew_copy_as(const lt_tensor *x, lt_dtype dtype);

/* Runs fn over ops[0]'s shape (ops[0] is the output; the others broadcast to
 * it, and may be ops[0] itself for in-place ops).
 *
 * bf16 is computed in f32, as PyTorch does, here and nowhere else: the bf16
 * entries of the kernel tables are the f32 kernels, bf16 inputs are widened
 * into f32 temporaries (exact), the kernel writes an f32 temporary, and a bf16
 * output is rounded from it once (nearest even). Every elementwise op, in
 * place or not, forward or backward, goes through here. Errors: LT_ERR_NOMEM
 * for the temporaries (ops[0] unchanged). */
static lt_status ew_run(lt__loop_fn fn, int nops, const lt_tensor *const *ops, void *ctx) {
  const lt_tensor *run[LT__ITER_MAX_OPS];
  lt_tensor *tmp[LT__ITER_MAX_OPS] = {NULL};
  lt_status s = LT_OK;
  for (int k = 0; k < nops; k++) {
    run[k] = ops[k];
    if (ops[k]->dtype != LT_DTYPE_BF16) continue;
    tmp[k] = k == 0 ? lt_empty(LT_DTYPE_F32, ops[0]->ndim, ops[0]->shape) : ew_copy_as(ops[k], LT_DTYPE_F32);
    if (!tmp[k]) {
      s = lt_last_status();
      goto done;
    }
    run[k] = tmp[k];
  }
  lt__iter it;
  lt__iter_init(&it, run[0]->ndim, run[0]->shape, nops, run);
  lt__iter_run(&it, fn, ctx, true);
  if (tmp[0]) {
    const bool prev = lt_set_grad_enabled(false);
    s = lt_copy_((lt_tensor *)ops[0], tmp[0]);
    lt_set_grad_enabled(prev);
  }
done:
  for (int k = 0; k < nops; k++) lt_tensor_free(tmp[k]);
  return s;
}

/* ew_run into a fresh output: out, or NULL (out freed) on failure. */
static lt_tensor *ew_into(lt_tensor *out, lt__loop_fn fn, int nops, const lt_tensor *const *ops, void *ctx) {
  if (out && ew_run(fn, nops, ops, ctx) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

/* ======================================================================== */
/* 2. Names, dtype rules and shared helpers                                 */
/* ======================================================================== */

/* Per-op names (for messages: "exp", in place "exp_") and autograd op ids,
 * generated from the public tables. A unary or binary op without its line in
 * ops_elementwise.def fails to compile here. */
typedef struct ew_unary_info {
  const char *name, *name_;
  lt__op_id id;
} ew_unary_info;
static const ew_unary_info unary_info[LT_UNARY_COUNT] = {
#define EW_U_INFO(N, n) [LT_UNARY_##N] = {#n, #n "_", LT__OP_##n},
    LT_UNARY_TABLE(EW_U_INFO)
#undef EW_U_INFO
};

/* EW_SEL(c, x, y): x if c is 0, y if c is 1 (the other is dropped unseen). */
#define EW_SEL_0(x, y) x
#define EW_SEL_1(x, y) y
#define EW_SEL(c, x, y) EW_SEL_##c(x, y)
typedef struct ew_binary_info {
  const char *name, *name_, *sname, *sname_; /* "add", "add_", "add_scalar", "add_scalar_" */
  bool cmp;                                  /* comparison: bool result, not differentiable */
  lt__op_id id, sid;                         /* tensor and scalar forms (LT__OP_COUNT: none) */
} ew_binary_info;
static const ew_binary_info binary_info[LT_BINARY_COUNT] = {
#define EW_B_INFO(N, n, c)                                                       \
  [LT_BINARY_##N] = {#n, #n "_", #n "_scalar", #n "_scalar_", (c),             \
                     EW_SEL(c, LT__OP_##n, LT__OP_COUNT), EW_SEL(c, LT__OP_##n##_scalar, LT__OP_COUNT)},
    LT_BINARY_TABLE(EW_B_INFO)
#undef EW_B_INFO
};

const char *lt_unary_name(lt_unary_op op) {
  return (unsigned)op < LT_UNARY_COUNT ? unary_info[op].name : "unknown";
}
const char *lt_binary_name(lt_binary_op op) {
  return (unsigned)op < LT_BINARY_COUNT ? binary_info[op].name : "unknown";
}

/* A fresh contiguous copy of x converted to dtype (never recorded). */
static lt_tensor *ew_copy_as(const lt_tensor *x, lt_dtype dtype) {
  lt_tensor *t = lt_empty(dtype, x->ndim, x->shape);
  if (!t) return NULL;
  bool prev = lt_set_grad_enabled(false);
  lt_status s = lt_copy_(t, x);
  lt_set_grad_enabled(prev);
  if (s != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

/* Does an operand of dtype x need converting for a kernel of dtype compute?
 * Not when they match, nor f32 for bf16: bf16 kernels run in f32 (ew_run),
 * so f32 operands (a scalar, the other side of an in-place op) go in
 * unrounded, as PyTorch's opmath. */
static bool ew_needs_cast(lt_dtype x, lt_dtype compute) {
  return x != compute && !(compute == LT_DTYPE_BF16 && x == LT_DTYPE_F32);
}

/* x itself if it already has dtype, else a converted copy stored in *tmp
 * (which the caller frees). NULL on error. */
static const lt_tensor *ew_as(const lt_tensor *x, lt_dtype dtype, lt_tensor **tmp) {
  *tmp = NULL;
  if (!ew_needs_cast(x->dtype, dtype)) return x;
  *tmp = ew_copy_as(x, dtype);
  return *tmp;
}

/* The broadcast shape of a and b, or an error naming both shapes and the dim. */
static lt_status ew_broadcast(const char *name, const lt_tensor *a, const lt_tensor *b,
                              int *nd, int64_t *shape) {
  if (lt_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, nd, shape) == LT_OK)
    return LT_OK;
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 1; i <= n; i++) {
    int64_t sa = i <= a->ndim ? a->shape[a->ndim - i] : 1;
    int64_t sb = i <= b->ndim ? b->shape[b->ndim - i] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return lt__err(LT_ERR_SHAPE,
                     "%s: a is %s, b is %s: shapes do not broadcast (sizes %lld and %lld at dim "
                     "-%d, neither is 1)",
                     name, LT__D(a), LT__D(b), (long long)sa, (long long)sb, i);
  }
  return lt__err(LT_ERR_SHAPE, "%s: a is %s, b is %s: shapes do not broadcast", name, LT__D(a),
                 LT__D(b));
}

static bool ew_shape_is(const lt_tensor *x, int nd, const int64_t *shape) {
  if (x->ndim != nd) return false;
  for (int i = 0; i < nd; i++)
    if (x->shape[i] != shape[i]) return false;
  return true;
}

/* Is s an integer that the integer dtype d (or bool: 0/1) holds exactly? */
static bool ew_scalar_fits(double s, lt_dtype d) {
  if (!(s == floor(s))) return false; /* also rejects NaN and infinities */
  switch (d) {
    case LT_DTYPE_BOOL: return s == 0 || s == 1;
    case LT_DTYPE_I32: return s >= -2147483648.0 && s <= 2147483647.0;
    case LT_DTYPE_I64: return s >= -9223372036854775808.0 && s < 9223372036854775808.0;
    default: return true;
  }
}

/* ======================================================================== */
/* 3a. Unary ops                                                            */
/* ======================================================================== */

/* What the backward of each unary op saves: nothing, the input or the output
 * (for exp, sqrt, rsqrt, tanh, sigmoid, relu the output is enough). */
enum { EW_SAVE_NONE, EW_SAVE_X, EW_SAVE_OUT };
static const unsigned char unary_saves[LT_UNARY_COUNT] = {
    [LT_UNARY_NEG] = EW_SAVE_NONE,   [LT_UNARY_ABS] = EW_SAVE_X,
    [LT_UNARY_EXP] = EW_SAVE_OUT,    [LT_UNARY_LOG] = EW_SAVE_X,
    [LT_UNARY_LOG1P] = EW_SAVE_X,    [LT_UNARY_SQRT] = EW_SAVE_OUT,
    [LT_UNARY_RSQRT] = EW_SAVE_OUT,  [LT_UNARY_SQUARE] = EW_SAVE_X,
    [LT_UNARY_TANH] = EW_SAVE_OUT,   [LT_UNARY_SIGMOID] = EW_SAVE_OUT,
    [LT_UNARY_RELU] = EW_SAVE_OUT,   [LT_UNARY_GELU] = EW_SAVE_X,
    [LT_UNARY_GELU_TANH] = EW_SAVE_X, [LT_UNARY_SILU] = EW_SAVE_X,
    [LT_UNARY_SIN] = EW_SAVE_X,      [LT_UNARY_COS] = EW_SAVE_X};

/* Result dtype of unary op (public or private) on d, or an error. neg, abs,
 * square and relu keep integer dtypes; the rest are float-only (f32). */
static lt_status unary_dtype(int op, const char *name, const lt_tensor *x, lt_dtype *out) {
  if (lt__ew_unary_kernel(op, x->dtype)) {
    *out = x->dtype;
    return LT_OK;
  }
  if (lt__ew_unary_kernel(op, LT_DTYPE_I32)) /* an integer op without a bool kernel */
    return lt__err(LT_ERR_DTYPE, "%s: x is %s: not defined for bool tensors", name, LT__D(x));
  *out = lt__float_result(x->dtype);
  return LT_OK;
}

/* out = op(x) (op may be a private derivative op); not recorded. */
static lt_tensor *unary_compute(int op, const char *name, const lt_tensor *x) {
  lt_dtype dt = LT_DTYPE_F32;
  if (unary_dtype(op, name, x, &dt) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  lt_tensor *tmp;
  const lt_tensor *src = ew_as(x, dt, &tmp);
  if (!src) return NULL;
  lt_tensor *out = lt_empty(dt, x->ndim, x->shape);
  out = ew_into(out, lt__ew_unary_kernel(op, dt), 2, (const lt_tensor *[]){out, src}, NULL);
  lt_tensor_free(tmp);
  return out;
}

lt_tensor *lt_unary(lt_unary_op op, const lt_tensor *x) {
  if ((unsigned)op >= LT_UNARY_COUNT) {
    lt__err(LT_ERR_INVALID, "unary: %d is not an lt_unary_op", (int)op);
    return NULL;
  }
  const char *name = unary_info[op].name;
  if (!x) {
    lt__err_null(name, "x");
    return NULL;
  }
  lt_tensor *out = unary_compute(op, name, x);
  if (!out || !lt__needs_grad(1, &x)) return out;
  const lt_tensor *saved = unary_saves[op] == EW_SAVE_X ? x : out;
  int nsaved = unary_saves[op] == EW_SAVE_NONE ? 0 : 1;
  if (lt__record(out, unary_info[op].id, 1, &x, nsaved, &saved, NULL, 0) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

lt_status lt_unary_(lt_unary_op op, lt_tensor *x) {
  if ((unsigned)op >= LT_UNARY_COUNT)
    return lt__err(LT_ERR_INVALID, "unary_: %d is not an lt_unary_op", (int)op);
  const char *name = unary_info[op].name_;
  if (!x) return lt__err_null(name, "x");
  lt_dtype dt = LT_DTYPE_F32;
  lt_status s = unary_dtype(op, name, x, &dt);
  if (s != LT_OK) return s;
  if (dt != x->dtype)
    return lt__err(LT_ERR_DTYPE, "%s: x is %s: the result is %s and cannot be stored in x in place",
                   name, LT__D(x), lt_dtype_name(dt));
  if ((s = lt__check_inplace(name, x)) != LT_OK) return s;
  if ((s = lt__ensure_init()) != LT_OK) return s;
  if ((s = ew_run(lt__ew_unary_kernel(op, dt), 2, (const lt_tensor *[]){x, x}, NULL)) != LT_OK) return s;
  lt__bump_version(x);
  return LT_OK;
}

#define EW_UNARY_WRAP(N, n)                                                        \
  lt_tensor *lt_##n(const lt_tensor *x) { return lt_unary(LT_UNARY_##N, x); }     \
  lt_status lt_##n##_(lt_tensor *x) { return lt_unary_(LT_UNARY_##N, x); }
LT_UNARY_TABLE(EW_UNARY_WRAP)
#undef EW_UNARY_WRAP

/* g * f'(s) by a fused kernel when g and s are float tensors of one dtype
 * and shape (always, from the engine, for float inputs); NULL otherwise (no
 * error set: the caller then composes public ops). */
static lt_tensor *grad_compute(int op, const lt_tensor *g, const lt_tensor *s) {
  if (g->dtype != s->dtype || !lt__ew_grad_kernel(op, g->dtype) || g->ndim != s->ndim ||
      memcmp(g->shape, s->shape, sizeof(int64_t) * (size_t)g->ndim) != 0)
    return NULL;
  lt_tensor *out = lt_empty(g->dtype, g->ndim, g->shape);
  out = ew_into(out, lt__ew_grad_kernel(op, g->dtype), 3, (const lt_tensor *[]){out, g, s}, NULL);
  return out;
}

/* 1 - t */
static lt_tensor *ew_one_minus(const lt_tensor *t) { return lt_add_scalar(lt_neg(t), 1.0); }

/* Backward of every unary op; s is the saved x or out (see unary_saves). */
static lt_status unary_backward(lt_unary_op op, const lt_node *node, const lt_tensor *g,
                                lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const lt_tensor *s = node->nsaved ? node->saved[0] : NULL;
  const char *name = unary_info[op].name;
  lt_tensor *r = NULL;
  switch (op) {
    case LT_UNARY_NEG: r = lt_neg(g); break;                          /* -g */
    case LT_UNARY_ABS:                                                /* g sign(x), 0 at 0 */
      r = lt_masked_fill(lt_where(lt_lt_scalar(s, 0), lt_neg(g), g), lt_eq_scalar(s, 0), 0);
      break;
    case LT_UNARY_EXP: r = lt_mul(g, s); break;                       /* g out */
    case LT_UNARY_LOG: r = lt_div(g, s); break;                       /* g / x */
    case LT_UNARY_LOG1P: r = lt_div(g, lt_add_scalar(s, 1)); break;   /* g / (1 + x) */
    case LT_UNARY_SQRT: r = lt_div(lt_mul_scalar(g, 0.5), s); break;  /* g / (2 out) */
    case LT_UNARY_RSQRT:                                              /* -g out^3 / 2 */
      r = lt_mul(g, lt_mul_scalar(lt_mul(s, lt_square(s)), -0.5));
      break;
    case LT_UNARY_SQUARE: r = lt_mul(g, lt_mul_scalar(s, 2)); break;  /* 2 g x */
    case LT_UNARY_TANH:                                               /* g (1 - out^2) */
      r = (r = grad_compute(LT__EW_G_TANH, g, s)) ? r : lt_mul(g, ew_one_minus(lt_square(s)));
      break;
    case LT_UNARY_SIGMOID:                                            /* g out (1-out) */
      r = (r = grad_compute(LT__EW_G_SIGMOID, g, s)) ? r : lt_mul(g, lt_mul(s, ew_one_minus(s)));
      break;
    case LT_UNARY_RELU:                                               /* 0 where out<=0 */
      r = (r = grad_compute(LT__EW_G_RELU, g, s)) ? r : lt_masked_fill(g, lt_le_scalar(s, 0), 0);
      break;
    case LT_UNARY_GELU:
      r = (r = grad_compute(LT__EW_G_GELU, g, s)) ? r : lt_mul(g, unary_compute(LT__EW_U_DGELU, name, s));
      break;
    case LT_UNARY_GELU_TANH:
      r = (r = grad_compute(LT__EW_G_GELU_TANH, g, s)) ? r : lt_mul(g, unary_compute(LT__EW_U_DGELU_TANH, name, s));
      break;
    case LT_UNARY_SILU:
      r = (r = grad_compute(LT__EW_G_SILU, g, s)) ? r : lt_mul(g, unary_compute(LT__EW_U_DSILU, name, s));
      break;
    case LT_UNARY_SIN: r = lt_mul(g, lt_cos(s)); break;               /* g cos x */
    case LT_UNARY_COS: r = lt_neg(lt_mul(g, lt_sin(s))); break;       /* -g sin x */
    default: LT_CHECK(!"unary op without backward");
  }
  if (!r) return lt_last_status();
  gin[0] = r;
  return LT_OK;
}

#define EW_UNARY_BW(N, n)                                                            \
  lt_status lt__bw_##n(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) { \
    return unary_backward(LT_UNARY_##N, node, gout, gin);                            \
  }
LT_UNARY_TABLE(EW_UNARY_BW)
#undef EW_UNARY_BW

/* ======================================================================== */
/* 3b. clamp                                                                */
/* ======================================================================== */

typedef struct ew_clamp_aux {
  double lo, hi;
} ew_clamp_aux;

/* The bounds in the compute dtype, as the kernel's ctx. */
typedef union ew_bounds {
  float f32[2];
  double f64[2];
  int32_t i32[2];
  int64_t i64[2];
} ew_bounds;

/* Result dtype of clamp: float x keeps its dtype; integer x keeps it when the
 * bounds are integers (or infinite), else f32. bool is an error. */
static lt_status clamp_prepare(const char *name, const lt_tensor *x, double lo, double hi,
                               lt_dtype *dt, ew_bounds *bounds) {
  if (isnan(lo) || isnan(hi))
    return lt__err(LT_ERR_INVALID, "%s: x is %s: bound lo=%g hi=%g is NaN", name, LT__D(x), lo, hi);
  if (x->dtype == LT_DTYPE_BOOL)
    return lt__err(LT_ERR_DTYPE, "%s: x is %s: not defined for bool tensors", name, LT__D(x));
  *dt = x->dtype;
  if (!lt_dtype_is_floating(x->dtype) && !((isinf(lo) || lo == floor(lo)) && (isinf(hi) || hi == floor(hi))))
    *dt = LT_DTYPE_F32;
  switch (*dt) {
    case LT_DTYPE_F32:
    case LT_DTYPE_BF16: /* computed in f32 (ew_run) */
      bounds->f32[0] = (float)lo;
      bounds->f32[1] = (float)hi;
      break;
    case LT_DTYPE_F64:
      bounds->f64[0] = lo;
      bounds->f64[1] = hi;
      break;
    case LT_DTYPE_I32: /* integral or infinite: saturate to the range */
      bounds->i32[0] = lo <= INT32_MIN ? INT32_MIN : lo >= INT32_MAX ? INT32_MAX : (int32_t)lo;
      bounds->i32[1] = hi <= INT32_MIN ? INT32_MIN : hi >= INT32_MAX ? INT32_MAX : (int32_t)hi;
      break;
    case LT_DTYPE_I64:
      bounds->i64[0] = lo <= -9223372036854775808.0 ? INT64_MIN
                               : lo >= 9223372036854775808.0 ? INT64_MAX : (int64_t)lo;
      bounds->i64[1] = hi <= -9223372036854775808.0 ? INT64_MIN
                               : hi >= 9223372036854775808.0 ? INT64_MAX : (int64_t)hi;
      break;
    default: LT_CHECK(!"clamp dtype");
  }
  return LT_OK;
}

lt_tensor *lt_clamp(const lt_tensor *x, double lo, double hi) {
  if (!x) {
    lt__err_null("clamp", "x");
    return NULL;
  }
  ew_bounds bounds;
  lt_dtype dt = LT_DTYPE_F32;
  if (clamp_prepare("clamp", x, lo, hi, &dt, &bounds) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  lt_tensor *tmp;
  const lt_tensor *src = ew_as(x, dt, &tmp);
  if (!src) return NULL;
  lt_tensor *out = lt_empty(dt, x->ndim, x->shape);
  out = ew_into(out, lt__ew_clamp_kernel(dt), 2, (const lt_tensor *[]){out, src}, &bounds);
  lt_tensor_free(tmp);
  if (!out) return NULL;
  ew_clamp_aux aux = {lo, hi};
  if (lt__record(out, LT__OP_clamp, 1, &x, 1, &x, &aux, sizeof aux) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

lt_status lt_clamp_(lt_tensor *x, double lo, double hi) {
  if (!x) return lt__err_null("clamp_", "x");
  ew_bounds bounds;
  lt_dtype dt = LT_DTYPE_F32;
  lt_status s = clamp_prepare("clamp_", x, lo, hi, &dt, &bounds);
  if (s != LT_OK) return s;
  if (dt != x->dtype)
    return lt__err(LT_ERR_DTYPE, "clamp_: x is %s: bounds lo=%g hi=%g give %s, which cannot be "
                   "stored in x in place", LT__D(x), lo, hi, lt_dtype_name(dt));
  if ((s = lt__check_inplace("clamp_", x)) != LT_OK) return s;
  if ((s = lt__ensure_init()) != LT_OK) return s;
  if ((s = ew_run(lt__ew_clamp_kernel(dt), 2, (const lt_tensor *[]){x, x}, &bounds)) != LT_OK) return s;
  lt__bump_version(x);
  return LT_OK;
}

/* d clamp(x, lo, hi) / dx = 1 where lo <= x <= hi, else 0 (PyTorch). */
lt_status lt__bw_clamp(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  ew_clamp_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  const lt_tensor *x = node->saved[0];
  lt_tensor *inside = lt_mul(lt_ge_scalar(x, aux.lo), lt_le_scalar(x, aux.hi)); /* bool and */
  gin[0] = lt_where(inside, gout, lt_scalar(gout->dtype, 0));
  return gin[0] ? LT_OK : lt_last_status();
}

/* ======================================================================== */
/* 3c. Binary ops                                                           */
/* ======================================================================== */

/* Compute dtype (the kernel's) of a op b: the promoted dtype, f32 at least
 * for div. Errors where the op has no kernel for it (sub/pow of two bools). */
static lt_status binary_dtype(lt_binary_op op, const char *name, const lt_tensor *a,
                              const lt_tensor *b, lt_dtype *compute) {
  lt_dtype c = lt__promote(a->dtype, b->dtype);
  if (op == LT_BINARY_DIV) c = lt__float_result(c);
  if (!lt__ew_binary_kernel(op, c))
    return lt__err(LT_ERR_DTYPE, "%s: a is %s, b is %s: not defined for %s operands", name,
                   LT__D(a), LT__D(b), lt_dtype_name(c));
  *compute = c;
  return LT_OK;
}

/* out = a op b (out allocated here with the broadcast shape; a and b
 * converted to the compute dtype when needed). Not recorded. */
static lt_tensor *binary_compute(lt_binary_op op, const char *name, const lt_tensor *a,
                                 const lt_tensor *b, lt_dtype compute) {
  int nd;
  int64_t shape[LT_MAX_DIMS];
  if (ew_broadcast(name, a, b, &nd, shape) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  lt_tensor *ta, *tb = NULL, *out = NULL;
  const lt_tensor *ca = ew_as(a, compute, &ta);
  const lt_tensor *cb = ca ? ew_as(b, compute, &tb) : NULL;
  if (cb) out = lt_empty(binary_info[op].cmp ? LT_DTYPE_BOOL : compute, nd, shape);
  out = ew_into(out, lt__ew_binary_kernel(op, compute), 3, (const lt_tensor *[]){out, ca, cb}, NULL);
  lt_tensor_free(ta);
  lt_tensor_free(tb);
  return out;
}

/* Which of a, b, out the backward of a binary op needs, given which inputs
 * need a gradient. Indices into node->saved, -1 when not saved. */
typedef struct ew_binary_aux {
  signed char ia, ib, iout;
} ew_binary_aux;

static void binary_saves(lt_binary_op op, bool need_a, bool need_b, bool *sa, bool *sb,
                         bool *sout) {
  *sa = *sb = *sout = false;
  switch (op) {
    case LT_BINARY_MUL: *sb = need_a; *sa = need_b; break;   /* ga = g b, gb = g a */
    case LT_BINARY_DIV: *sb = true; *sa = need_b; break;     /* ga = g/b, gb = -g a/b^2 */
    case LT_BINARY_POW: *sa = *sb = true; *sout = need_b; break;
    case LT_BINARY_MAXIMUM:
    case LT_BINARY_MINIMUM: *sa = *sb = true; break;
    default: break; /* add, sub: nothing */
  }
}

lt_tensor *lt_binary(lt_binary_op op, const lt_tensor *a, const lt_tensor *b) {
  if ((unsigned)op >= LT_BINARY_COUNT) {
    lt__err(LT_ERR_INVALID, "binary: %d is not an lt_binary_op", (int)op);
    return NULL;
  }
  const char *name = binary_info[op].name;
  if (!a || !b) {
    lt__err_null(name, !a ? "a" : "b");
    return NULL;
  }
  lt_dtype c = LT_DTYPE_F32;
  if (binary_dtype(op, name, a, b, &c) != LT_OK) return NULL;
  lt_tensor *out = binary_compute(op, name, a, b, c);
  if (!out || binary_info[op].cmp || !lt__needs_grad(2, (const lt_tensor *[]){a, b})) return out;
  bool sa, sb, sout;
  binary_saves(op, lt__needs_grad(1, &a), lt__needs_grad(1, &b), &sa, &sb, &sout);
  const lt_tensor *saved[3];
  ew_binary_aux aux = {-1, -1, -1};
  int ns = 0;
  if (sa) aux.ia = (signed char)ns, saved[ns++] = a;
  if (sb) aux.ib = (signed char)ns, saved[ns++] = b;
  if (sout) aux.iout = (signed char)ns, saved[ns++] = out;
  if (lt__record(out, binary_info[op].id, 2, (const lt_tensor *[]){a, b}, ns, saved, &aux,
                 sizeof aux) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

/* For in-place ops: the compute dtype must be storable in a (no float result
 * into an integer a, no integer result into a bool a). */
static lt_status ew_inplace_dtype(const char *name, const lt_tensor *a, lt_dtype result,
                                  const char *what) {
  bool ok = lt_dtype_is_floating(a->dtype) || !lt_dtype_is_floating(result);
  if (a->dtype == LT_DTYPE_BOOL && result != LT_DTYPE_BOOL) ok = false;
  if (!ok)
    return lt__err(LT_ERR_DTYPE, "%s: a is %s, %s: the result is %s and cannot be stored in a "
                   "in place", name, LT__D(a), what, lt_dtype_name(result));
  return LT_OK;
}

/* a = a op b computed in a's dtype; b (already checked to broadcast to a and
 * to convert safely) is converted, or copied when it shares a's storage with
 * a different layout (so no element of b is overwritten before it is read). */
static lt_status binary_inplace_run(lt_binary_op op, const char *name, lt_tensor *a,
                                    const lt_tensor *b) {
  lt_status s;
  if ((s = lt__check_inplace(name, a)) != LT_OK) return s;
  if ((s = lt__ensure_init()) != LT_OK) return s;
  if (binary_info[op].cmp) { /* write 0/1 into a's dtype through a bool temporary */
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *r = binary_compute(op, name, a, b, lt__promote(a->dtype, b->dtype));
    s = r ? lt_copy_(a, r) : lt_last_status();
    lt_set_grad_enabled(prev);
    lt_tensor_free(r);
    return s;
  }
  bool same_layout = a->data == b->data && a->ndim == b->ndim &&
                     memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0 &&
                     memcmp(a->stride, b->stride, sizeof(int64_t) * (size_t)a->ndim) == 0;
  lt_tensor *tmp = NULL;
  const lt_tensor *cb = b;
  if (ew_needs_cast(b->dtype, a->dtype) || (b->storage == a->storage && !same_layout)) {
    tmp = ew_copy_as(b, ew_needs_cast(b->dtype, a->dtype) ? a->dtype : b->dtype);
    if (!tmp) return lt_last_status();
    cb = tmp;
  }
  if (!lt__ew_binary_kernel(op, a->dtype)) {
    lt_tensor_free(tmp);
    return lt__err(LT_ERR_DTYPE, "%s: a is %s, b is %s: not defined for %s operands", name,
                   LT__D(a), LT__D(b), lt_dtype_name(a->dtype));
  }
  s = ew_run(lt__ew_binary_kernel(op, a->dtype), 3, (const lt_tensor *[]){a, a, cb}, NULL);
  lt_tensor_free(tmp);
  if (s != LT_OK) return s;
  lt__bump_version(a);
  return LT_OK;
}

lt_status lt_binary_(lt_binary_op op, lt_tensor *a, const lt_tensor *b) {
  if ((unsigned)op >= LT_BINARY_COUNT)
    return lt__err(LT_ERR_INVALID, "binary_: %d is not an lt_binary_op", (int)op);
  const char *name = binary_info[op].name_;
  if (!a || !b) return lt__err_null(name, !a ? "a" : "b");
  int nd;
  int64_t shape[LT_MAX_DIMS];
  lt_status s = ew_broadcast(name, a, b, &nd, shape);
  if (s != LT_OK) return s;
  if (!ew_shape_is(a, nd, shape))
    return lt__err(LT_ERR_SHAPE, "%s: a is %s, b is %s: the result would be %s, but an in-place "
                   "op cannot change a's shape", name, LT__D(a), LT__D(b), LT__S(nd, shape));
  lt_dtype c = LT_DTYPE_F32;
  if ((s = binary_dtype(op, name, a, b, &c)) != LT_OK) return s;
  if (!binary_info[op].cmp && (s = ew_inplace_dtype(name, a, c, "b is another dtype")) != LT_OK)
    return s;
  return binary_inplace_run(op, name, a, b);
}

/* Backward of add, sub, mul, div, pow, maximum, minimum (derivatives.yaml). */
static lt_status binary_backward(lt_binary_op op, const lt_node *node, const lt_tensor *g,
                                 lt_tensor **gin) {
  ew_binary_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  const lt_tensor *a = aux.ia >= 0 ? node->saved[aux.ia] : NULL;
  const lt_tensor *b = aux.ib >= 0 ? node->saved[aux.ib] : NULL;
  const lt_tensor *out = aux.iout >= 0 ? node->saved[aux.iout] : NULL;
  const bool need_a = lt__needs_input_grad(node, 0), need_b = lt__needs_input_grad(node, 1);
  lt_tensor *ga = NULL, *gb = NULL;
  switch (op) {
    case LT_BINARY_ADD: /* out = a + b */
      if (need_a) ga = lt_detach(g);
      if (need_b) gb = lt_detach(g);
      break;
    case LT_BINARY_SUB: /* out = a - b */
      if (need_a) ga = lt_detach(g);
      if (need_b) gb = lt_neg(g);
      break;
    case LT_BINARY_MUL: /* out = a * b */
      if (need_a) ga = lt_mul(g, b);
      if (need_b) gb = lt_mul(g, a);
      break;
    case LT_BINARY_DIV: /* out = a / b: ga = g / b, gb = -g a / b^2 */
      if (need_a) ga = lt_div(g, b);
      if (need_b) gb = lt_neg(lt_div(lt_mul(g, a), lt_square(b)));
      break;
    case LT_BINARY_POW: {
      /* out = a^b: ga = g b a^(b-1), 0 where b == 0;
       * gb = g out log(a), 0 where a == 0 and b >= 0 */
      if (need_a)
        ga = lt_masked_fill(lt_mul(g, lt_mul(b, lt_pow(a, lt_sub_scalar(b, 1)))),
                            lt_eq_scalar(b, 0), 0);
      if (need_b)
        gb = lt_masked_fill(lt_mul(g, lt_mul(out, lt_log(a))),
                            lt_mul(lt_eq_scalar(a, 0), lt_ge_scalar(b, 0)), 0);
      break;
    }
    case LT_BINARY_MAXIMUM:
    case LT_BINARY_MINIMUM: {
      /* The gradient goes to the larger (smaller) operand; ties split it. */
      lt_tensor *t = lt_where(lt_eq(a, b), lt_mul_scalar(g, 0.5), g);
      bool mx = op == LT_BINARY_MAXIMUM;
      if (need_a) ga = lt_masked_fill(t, mx ? lt_lt(a, b) : lt_gt(a, b), 0);
      if (need_b) gb = lt_masked_fill(t, mx ? lt_gt(a, b) : lt_lt(a, b), 0);
      break;
    }
    default: LT_CHECK(!"binary op without backward");
  }
  if ((need_a && !ga) || (need_b && !gb)) return lt_last_status();
  gin[0] = ga;
  gin[1] = gb;
  return LT_OK;
}

/* ---- scalar forms ---- */

/* Compute dtype of a op s: float a keeps its dtype; an integer a keeps it
 * when s is an integer it can hold and op is not div/pow (bool goes to i64),
 * else f32. A comparison uses a's dtype when s fits, else f64. */
static lt_status scalar_dtype(lt_binary_op op, const char *name, const lt_tensor *a, double s,
                              lt_dtype *compute) {
  lt_dtype c = a->dtype;
  if (lt_dtype_is_floating(c)) {
  } else if (binary_info[op].cmp) {
    if (!ew_scalar_fits(s, c)) c = LT_DTYPE_F64;
  } else if (op == LT_BINARY_DIV || op == LT_BINARY_POW || !(s == floor(s))) {
    c = LT_DTYPE_F32;
  } else {
    if (c == LT_DTYPE_BOOL) c = LT_DTYPE_I64;
    if (!ew_scalar_fits(s, c))
      return lt__err(LT_ERR_INVALID, "%s: a is %s: scalar %.17g does not fit in %s", name,
                     LT__D(a), s, lt_dtype_name(c));
  }
  LT_CHECK(lt__ew_binary_kernel(op, c) != NULL);
  *compute = c;
  return LT_OK;
}

typedef struct ew_scalar_aux {
  double s;
} ew_scalar_aux;

lt_tensor *lt_binary_scalar(lt_binary_op op, const lt_tensor *a, double s) {
  if ((unsigned)op >= LT_BINARY_COUNT) {
    lt__err(LT_ERR_INVALID, "binary_scalar: %d is not an lt_binary_op", (int)op);
    return NULL;
  }
  const char *name = binary_info[op].sname;
  if (!a) {
    lt__err_null(name, "a");
    return NULL;
  }
  lt_dtype c = LT_DTYPE_F32;
  if (scalar_dtype(op, name, a, s, &c) != LT_OK) return NULL;
  lt_tensor *sc = lt_scalar(lt__compute_dtype(c), s); /* bf16: s stays f32 (ew_as) */
  if (!sc) return NULL;
  lt_tensor *out = binary_compute(op, name, a, sc, c);
  lt_tensor_free(sc);
  if (!out || binary_info[op].cmp) return out;
  /* pow, maximum, minimum need a; add, sub, mul, div only s. */
  int ns = op == LT_BINARY_POW || op == LT_BINARY_MAXIMUM || op == LT_BINARY_MINIMUM;
  ew_scalar_aux aux = {s};
  if (lt__record(out, binary_info[op].sid, 1, &a, ns, &a, &aux, sizeof aux) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

lt_status lt_binary_scalar_(lt_binary_op op, lt_tensor *a, double s) {
  if ((unsigned)op >= LT_BINARY_COUNT)
    return lt__err(LT_ERR_INVALID, "binary_scalar_: %d is not an lt_binary_op", (int)op);
  const char *name = binary_info[op].sname_;
  if (!a) return lt__err_null(name, "a");
  lt_dtype c = LT_DTYPE_F32;
  lt_status st = scalar_dtype(op, name, a, s, &c);
  if (st != LT_OK) return st;
  if (!binary_info[op].cmp && c != a->dtype)
    return lt__err(LT_ERR_DTYPE, "%s: a is %s, s = %.17g: the result is %s and cannot be stored "
                   "in a in place", name, LT__D(a), s, lt_dtype_name(c));
  lt_tensor *sc = lt_scalar(lt__compute_dtype(c), s);
  if (!sc) return lt_last_status();
  st = binary_inplace_run(op, name, a, sc);
  lt_tensor_free(sc);
  return st;
}

/* Backward of a op s (s a constant). */
static lt_status scalar_backward(lt_binary_op op, const lt_node *node, const lt_tensor *g,
                                 lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  ew_scalar_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  const double s = aux.s;
  const lt_tensor *a = node->nsaved ? node->saved[0] : NULL;
  lt_tensor *r = NULL;
  switch (op) {
    case LT_BINARY_ADD:
    case LT_BINARY_SUB: r = lt_detach(g); break;
    case LT_BINARY_MUL: r = lt_mul_scalar(g, s); break;
    case LT_BINARY_DIV: r = lt_div_scalar(g, s); break;
    case LT_BINARY_POW: /* g s a^(s-1); zero for s == 0 (PyTorch) */
      r = s == 0 ? lt_zeros_like(g) : lt_mul(g, lt_mul_scalar(lt_pow_scalar(a, s - 1), s));
      break;
    case LT_BINARY_MAXIMUM:
    case LT_BINARY_MINIMUM: { /* as maximum(a, s) with a constant tensor s */
      lt_tensor *t = lt_where(lt_eq_scalar(a, s), lt_mul_scalar(g, 0.5), g);
      r = lt_masked_fill(t, op == LT_BINARY_MAXIMUM ? lt_lt_scalar(a, s) : lt_gt_scalar(a, s), 0);
      break;
    }
    default: LT_CHECK(!"scalar op without backward");
  }
  if (!r) return lt_last_status();
  gin[0] = r;
  return LT_OK;
}

/* Named wrappers and the per-op backward entry points (none for comparisons). */
#define EW_BINARY_WRAP(N, n, c)                                                          \
  lt_tensor *lt_##n(const lt_tensor *a, const lt_tensor *b) {                            \
    return lt_binary(LT_BINARY_##N, a, b);                                               \
  }                                                                                      \
  lt_tensor *lt_##n##_scalar(const lt_tensor *a, double s) {                             \
    return lt_binary_scalar(LT_BINARY_##N, a, s);                                        \
  }                                                                                      \
  lt_status lt_##n##_(lt_tensor *a, const lt_tensor *b) { return lt_binary_(LT_BINARY_##N, a, b); } \
  lt_status lt_##n##_scalar_(lt_tensor *a, double s) {                                   \
    return lt_binary_scalar_(LT_BINARY_##N, a, s);                                       \
  }                                                                                      \
  EW_SEL(c,                                                                            \
    lt_status lt__bw_##n(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {  \
      return binary_backward(LT_BINARY_##N, node, gout, gin);                            \
    }                                                                                    \
    lt_status lt__bw_##n##_scalar(const lt_node *node, const lt_tensor *gout,            \
                                  lt_tensor **gin) {                                     \
      return scalar_backward(LT_BINARY_##N, node, gout, gin);                            \
    }, )
LT_BINARY_TABLE(EW_BINARY_WRAP)
#undef EW_BINARY_WRAP

/* ======================================================================== */
/* 3d. where, masked_fill                                                   */
/* ======================================================================== */

lt_tensor *lt_where(const lt_tensor *cond, const lt_tensor *a, const lt_tensor *b) {
  if (!cond || !a || !b) {
    lt__err_null("where", !cond ? "cond" : !a ? "a" : "b");
    return NULL;
  }
  if (cond->dtype != LT_DTYPE_BOOL) {
    lt__err(LT_ERR_DTYPE, "where: cond is %s, a is %s, b is %s: cond must be bool", LT__D(cond),
            LT__D(a), LT__D(b));
    return NULL;
  }
  int nd, nd2;
  int64_t s1[LT_MAX_DIMS], shape[LT_MAX_DIMS];
  if (lt_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, s1) != LT_OK ||
      lt_broadcast_shapes(cond->ndim, cond->shape, nd, s1, &nd2, shape) != LT_OK) {
    lt__err(LT_ERR_SHAPE, "where: cond is %s, a is %s, b is %s: shapes do not broadcast",
            LT__D(cond), LT__D(a), LT__D(b));
    return NULL;
  }
  if (lt__ensure_init() != LT_OK) return NULL;
  lt_dtype dt = lt__promote(a->dtype, b->dtype);
  lt_tensor *ta, *tb = NULL, *out = NULL;
  const lt_tensor *ca = ew_as(a, dt, &ta);
  const lt_tensor *cb = ca ? ew_as(b, dt, &tb) : NULL;
  if (cb) out = lt_empty(dt, nd2, shape);
  out = ew_into(out, lt__ew_where_kernel(dt), 4, (const lt_tensor *[]){out, cond, ca, cb}, NULL);
  lt_tensor_free(ta);
  lt_tensor_free(tb);
  if (!out) return NULL;
  if (lt__record(out, LT__OP_where, 3, (const lt_tensor *[]){cond, a, b}, 1, &cond, NULL, 0) !=
      LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

/* out = where(cond, a, b): ga = where(cond, g, 0), gb = where(cond, 0, g). */
lt_status lt__bw_where(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lt_tensor *cond = node->saved[0];
  lt_tensor *zero = lt_scalar(gout->dtype, 0);
  if (!zero) return lt_last_status();
  if (lt__needs_input_grad(node, 1) && !(gin[1] = lt_where(cond, gout, zero)))
    return lt_last_status();
  if (lt__needs_input_grad(node, 2) && !(gin[2] = lt_where(cond, zero, gout)))
    return lt_last_status();
  return LT_OK;
}

lt_tensor *lt_masked_fill(const lt_tensor *x, const lt_tensor *mask, double value) {
  if (!x || !mask) {
    lt__err_null("masked_fill", !x ? "x" : "mask");
    return NULL;
  }
  if (mask->dtype != LT_DTYPE_BOOL) {
    lt__err(LT_ERR_DTYPE, "masked_fill: x is %s, mask is %s: mask must be bool", LT__D(x),
            LT__D(mask));
    return NULL;
  }
  int nd;
  int64_t shape[LT_MAX_DIMS];
  if (lt_broadcast_shapes(x->ndim, x->shape, mask->ndim, mask->shape, &nd, shape) != LT_OK ||
      !ew_shape_is(x, nd, shape)) {
    lt__err(LT_ERR_SHAPE, "masked_fill: x is %s, mask is %s: mask must broadcast to x's shape",
            LT__D(x), LT__D(mask));
    return NULL;
  }
  if (lt__ensure_init() != LT_OK) return NULL;
  lt_tensor *v = lt_scalar(x->dtype, value);
  lt_tensor *out = v ? lt_empty(x->dtype, x->ndim, x->shape) : NULL;
  out = ew_into(out, lt__ew_where_kernel(x->dtype), 4, (const lt_tensor *[]){out, mask, v, x}, NULL);
  lt_tensor_free(v);
  if (!out) return NULL;
  if (lt__record(out, LT__OP_masked_fill, 2, (const lt_tensor *[]){x, mask}, 1, &mask, NULL, 0) !=
      LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

/* out = masked_fill(x, mask, v): gx = g with zeros where mask. */
lt_status lt__bw_masked_fill(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  gin[0] = lt_masked_fill(gout, node->saved[0], 0);
  return gin[0] ? LT_OK : lt_last_status();
}
