/*
 * tensor/status.c: status codes, the thread-local error message, dtype helpers
 * and shape formatting. The status table itself lives in tensor.h
 * (LT_STATUS_TABLE) so names and messages cannot drift from the enum.
 */
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LT__ERRMSG_SIZE 1024

static _Thread_local lt_status tl_status = LT_OK;
static _Thread_local char tl_message[LT__ERRMSG_SIZE];

lt_status lt_last_status(void) { return tl_status; }
const char *lt_last_error(void) { return tl_message; }

void lt_clear_error(void) {
  tl_status = LT_OK;
  tl_message[0] = '\0';
}

const char *lt_status_name(lt_status s) {
  switch (s) {
#define LT__STATUS_NAME(name, msg) \
  case name:                       \
    return #name;
    LT_STATUS_TABLE(LT__STATUS_NAME)
#undef LT__STATUS_NAME
    default:
      return "LT_UNKNOWN";
  }
}

const char *lt_status_message(lt_status s) {
  switch (s) {
#define LT__STATUS_MSG(name, msg) \
  case name:                      \
    return msg;
    LT_STATUS_TABLE(LT__STATUS_MSG)
#undef LT__STATUS_MSG
    default:
      return "unknown status";
  }
}

static lt_status set_error(lt_status s, const char *fmt, va_list ap) {
  /* Format into a local buffer first: fmt arguments may point into tl_message. */
  char buf[LT__ERRMSG_SIZE];
  vsnprintf(buf, sizeof buf, fmt, ap);
  memcpy(tl_message, buf, sizeof buf);
  tl_status = s;
  return s;
}

lt_status lt__err(lt_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(s, fmt, ap);
  va_end(ap);
  return s;
}

lt_status lt_error_set(lt_status code, const char *fmt, ...) {
  if ((unsigned)code >= LT_STATUS_COUNT) code = LT_ERR_INVALID;
  va_list ap;
  va_start(ap, fmt);
  set_error(code, fmt ? fmt : "(no message)", ap);
  va_end(ap);
  return code;
}

lt_status lt__err_null(const char *op, const char *arg) {
  if (tl_status != LT_OK) return tl_status;
  return lt__err(LT_ERR_NULL, "%s: argument %s is NULL", op, arg);
}

lt_status lt_error_null_arg(const char *op, const char *arg) { return lt__err_null(op, arg); }

/* ---- enum names -------------------------------------------------------- */

const char *lt_enum_name(const char *const *names, int n, int v) {
  return names && v >= 0 && v < n && names[v] ? names[v] : "unknown";
}

lt_status lt_enum_parse(const char *what, const char *const *names, int n, const lt_enum_alias *aliases,
                        int naliases, const char *s, int *out) {
  if (!what) what = "value";
  if (!s) return lt__err(LT_ERR_NULL, "parsing a %s: the name is NULL", what);
  if (!out) return lt__err(LT_ERR_NULL, "parsing a %s: out is NULL", what);
  for (int i = 0; i < n; i++)
    if (names[i] && !strcmp(s, names[i])) return *out = i, LT_OK;
  for (int i = 0; i < naliases; i++)
    if (!strcmp(s, aliases[i].name)) return *out = aliases[i].value, LT_OK;
  char list[512] = "";
  for (int i = 0; i < n; i++) {
    strncat(list, names[i] ? names[i] : "?", sizeof list - strlen(list) - 1);
    if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  return lt__err(LT_ERR_INVALID, "unknown %s '%s' (one of: %s)", what, s, list);
}

_Noreturn void lt__check_failed(const char *expr, const char *file, int line) {
  fprintf(stderr, "libtensor: internal invariant failed: %s (%s:%d)\n", expr, file, line);
  abort();
}

/* ---- dtypes ------------------------------------------------------------ */

static const char *const dtype_names[LT_DTYPE_COUNT] = {"f32", "f64", "i32", "i64", "bool", "bf16"};
static const size_t dtype_sizes[LT_DTYPE_COUNT] = {4, 8, 4, 8, 1, 2};
/* Promotion rank: bool < i32 < i64 < bf16 < f32 < f64 (PyTorch's: bf16 with
 * an integer is bf16, bf16 with f32 is f32). */
static const int dtype_rank[LT_DTYPE_COUNT] = {4, 5, 1, 2, 0, 3};

bool lt__valid_dtype(lt_dtype d) { return (unsigned)d < LT_DTYPE_COUNT; }
const char *lt_dtype_name(lt_dtype d) { return lt__valid_dtype(d) ? dtype_names[d] : "invalid"; }
size_t lt_dtype_size(lt_dtype d) { return lt__valid_dtype(d) ? dtype_sizes[d] : 0; }
bool lt_dtype_is_float(lt_dtype d) { return d == LT_DTYPE_F32 || d == LT_DTYPE_F64; }
bool lt_dtype_is_floating(lt_dtype d) { return lt_dtype_is_float(d) || d == LT_DTYPE_BF16; }

lt_dtype lt__promote(lt_dtype a, lt_dtype b) { return dtype_rank[a] >= dtype_rank[b] ? a : b; }
lt_dtype lt__float_result(lt_dtype d) {
  return d == LT_DTYPE_F64 || d == LT_DTYPE_BF16 ? d : LT_DTYPE_F32;
}
lt_dtype lt__compute_dtype(lt_dtype d) { return d == LT_DTYPE_BF16 ? LT_DTYPE_F32 : d; }

uint16_t lt_bf16_from_f32(float x) { return lt__bf16_from_f32(x); }
float lt_f32_from_bf16(uint16_t b) { return lt__f32_from_bf16(b); }

double lt__load(const void *p, lt_dtype d) {
  switch (d) {
    case LT_DTYPE_F32: return *(const float *)p;
    case LT_DTYPE_F64: return *(const double *)p;
    case LT_DTYPE_I32: return *(const int32_t *)p;
    case LT_DTYPE_I64: return (double)*(const int64_t *)p;
    case LT_DTYPE_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    case LT_DTYPE_BF16: return lt__f32_from_bf16(*(const uint16_t *)p);
    default: LT_CHECK(!"bad dtype");
  }
}

/* Float to integer conversion truncates toward zero (as C and PyTorch); values
 * outside the target range (and NaN) are clamped instead of being undefined. */
static int64_t to_i64(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

void lt__store(void *p, lt_dtype d, double v) {
  switch (d) {
    case LT_DTYPE_F32: *(float *)p = (float)v; break;
    case LT_DTYPE_F64: *(double *)p = v; break;
    case LT_DTYPE_I32: *(int32_t *)p = (int32_t)to_i64(v, -2147483648.0, 2147483647.0); break;
    case LT_DTYPE_I64: *(int64_t *)p = to_i64(v, -9223372036854775808.0, 9223372036854774784.0); break;
    case LT_DTYPE_BOOL: *(uint8_t *)p = v != 0.0; break;
    /* Through f32, as PyTorch's c10::BFloat16(float(v)). */
    case LT_DTYPE_BF16: *(uint16_t *)p = lt__bf16_from_f32((float)v); break;
    default: LT_CHECK(!"bad dtype");
  }
}

/* ---- shapes ------------------------------------------------------------ */

char *lt_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
  if (!buf || size == 0) return buf;
  size_t pos = 0;
  int w = snprintf(buf, size, "[");
  pos = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < ndim && shape && pos < size; i++) {
    w = snprintf(buf + pos, size - pos, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (w < 0) break;
    pos += (size_t)w;
  }
  if (pos < size) snprintf(buf + pos, size - pos, "]");
  buf[size - 1] = '\0';
  return buf;
}

char *lt_tensor_desc(const lt_tensor *t, char *buf, size_t size) {
  if (!buf || size == 0) return buf;
  if (!t) {
    snprintf(buf, size, "NULL");
    return buf;
  }
  char s[LT_TENSOR_DESC_SIZE - 16];
  lt_shape_str(t->ndim, t->shape, s, sizeof s);
  snprintf(buf, size, "%s %s", s, lt_dtype_name(t->dtype));
  return buf;
}

char *lt__desc(const lt_tensor *t, char *buf) { return lt_tensor_desc(t, buf, LT__DESC_SIZE); }

lt_status lt__wrap_dim(const char *op, int dim, int ndim, int *out) {
  int n = ndim > 0 ? ndim : 1; /* PyTorch lets a 0-d tensor use dim 0 / -1 */
  if (dim < -n || dim >= n)
    return lt__err(LT_ERR_INDEX, "%s: dim %d is out of range for a tensor of rank %d (valid: %d..%d)",
                   op, dim, ndim, -n, n - 1);
  *out = dim < 0 ? dim + n : dim;
  return LT_OK;
}

#define LT__MAX_NUMEL ((int64_t)1 << 62)

lt_status lt__shape_numel(const char *op, int ndim, const int64_t *shape, int64_t *numel) {
  if (ndim < 0 || ndim > LT_MAX_DIMS)
    return lt__err(LT_ERR_INVALID, "%s: rank %d is outside 0..%d", op, ndim, LT_MAX_DIMS);
  if (ndim > 0 && !shape) return lt__err(LT_ERR_NULL, "%s: shape is NULL for rank %d", op, ndim);
  int64_t n = 1;
  bool zero = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return lt__err(LT_ERR_INVALID, "%s: shape %s has a negative size at dim %d", op,
                     LT__S(ndim, shape), i);
    if (shape[i] == 0) zero = true;
  }
  for (int i = 0; i < ndim && !zero; i++) {
    if (shape[i] > 0 && n > LT__MAX_NUMEL / shape[i])
      return lt__err(LT_ERR_OVERFLOW, "%s: shape %s has more than 2^62 elements", op,
                     LT__S(ndim, shape));
    n *= shape[i];
  }
  *numel = zero ? 0 : n;
  return LT_OK;
}

bool lt__same_shape(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

void lt__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    stride[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
}
