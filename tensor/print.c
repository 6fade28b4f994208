/*
 * tensor/print.c: lt_print and lt_tensor_to_string, PyTorch-like text.
 *
 * This follows torch/_tensor_str.py with the default print options
 * (precision 4, threshold 1000, edgeitems 3, linewidth 80):
 *   - one formatter for the whole tensor, chosen from the elements shown:
 *     floats whose non-zero finite values are all integral print as "1." (int
 *     mode); scientific notation ("1.0000e+05") when max/min of the non-zero
 *     finite |values| exceeds 1000, or max > 1e8, or (not int mode) min < 1e-4;
 *     otherwise fixed "%.4f". Every entry is right-aligned to the widest one;
 *   - nested brackets, rows of a matrix on separate lines aligned under the
 *     first bracket, blank lines between 2-d blocks of 3-d tensors, long rows
 *     wrapped at 80 columns;
 *   - numel > 1000: only the first and last 3 entries of each dim, "..." between;
 *   - suffixes ", size=(0, 3)" for empty tensors that are not 1-d and
 *     ", dtype=f64" for every dtype other than f32 (PyTorch omits the dtype for
 *     its defaults float32, int64 and bool; we omit it only for f32);
 *   - bools print as True/False, nan and inf as nan, inf, -inf.
 * Non-contiguous tensors are read through their strides in logical order.
 * lt_print writes the text followed by a newline, as Python's print does.
 *
 * What this is not: a configurable printer (no print options) or a parser.
 */
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRINT_PRECISION 4
#define PRINT_THRESHOLD 1000
#define PRINT_EDGEITEMS 3
#define PRINT_LINEWIDTH 80

/* ---- a growing string -------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_spaces(sbuf *b, int n) {
  for (int i = 0; i < n; i++) sb_putn(b, " ", 1);
}

/* ---- the formatter ----------------------------------------------------- */

typedef struct formatter {
  lt_dtype dtype;
  bool is_float;
  bool int_mode, sci_mode;
  int width;            /* entries are right-aligned to this width */
  /* statistics over the non-zero finite values shown */
  bool any;
  double min_abs, max_abs;
} formatter;

/* One element as text (without alignment) into buf (>= 64 bytes); returns its length. */
static int format_value(const formatter *f, const char *p, char *buf) {
  switch (f->dtype) {
    case LT_DTYPE_BOOL:
      return snprintf(buf, 64, "%s", *(const uint8_t *)p ? "True" : "False");
    case LT_DTYPE_I32:
      return snprintf(buf, 64, "%ld", (long)*(const int32_t *)p);
    case LT_DTYPE_I64:
      return snprintf(buf, 64, "%lld", (long long)*(const int64_t *)p);
    default:
      break;
  }
  double v = lt__load(p, f->dtype);
  if (isnan(v)) return snprintf(buf, 64, "nan");
  if (isinf(v)) return snprintf(buf, 64, "%s", v < 0 ? "-inf" : "inf");
  if (f->sci_mode) return snprintf(buf, 64, "%.*e", PRINT_PRECISION, v);
  if (f->int_mode) return snprintf(buf, 64, "%.0f.", v);
  return snprintf(buf, 64, "%.*f", PRINT_PRECISION, v);
}

/* Element visitor over the entries that will be shown (all of them unless
 * summarising, then the first and last PRINT_EDGEITEMS of each long dim). */
typedef void (*visit_fn)(formatter *f, const char *p);

static bool shown_gap(bool summarize, int64_t size) {
  return summarize && size > 2 * PRINT_EDGEITEMS;
}

static void visit(const lt_tensor *x, int d, const char *p, bool summarize, visit_fn fn,
                  formatter *f) {
  if (d == x->ndim) {
    fn(f, p);
    return;
  }
  const int64_t size = x->shape[d];
  const int64_t step = x->stride[d] * (int64_t)lt_dtype_size(x->dtype);
  const bool gap = shown_gap(summarize, size);
  for (int64_t i = 0; i < size; i++) {
    if (gap && i == PRINT_EDGEITEMS) i = size - PRINT_EDGEITEMS;
    visit(x, d + 1, p + i * step, summarize, fn, f);
  }
}

static void stats_fn(formatter *f, const char *p) {
  double v = lt__load(p, f->dtype);
  if (!isfinite(v) || v == 0) return;
  double a = fabs(v);
  if (!f->any || a < f->min_abs) f->min_abs = a;
  if (!f->any || a > f->max_abs) f->max_abs = a;
  f->any = true;
  if (v != ceil(v)) f->int_mode = false;
}

/* Width of the widest entry; for floats only non-zero finite values count (as PyTorch). */
static void width_fn(formatter *f, const char *p) {
  if (f->is_float) {
    double v = lt__load(p, f->dtype);
    if (!isfinite(v) || v == 0) return;
  }
  char buf[64];
  int n = format_value(f, p, buf);
  if (n > f->width) f->width = n;
}

static void formatter_init(formatter *f, const lt_tensor *x, bool summarize) {
  memset(f, 0, sizeof *f);
  f->dtype = x->dtype;
  f->is_float = lt_dtype_is_floating(x->dtype);
  f->int_mode = true;
  f->width = 1;
  if (f->is_float) {
    visit(x, 0, x->data, summarize, stats_fn, f);
    if (!f->any) return; /* only zeros and non-finite values: int mode, width 1 */
    double ratio = f->max_abs / f->min_abs;
    if (f->int_mode)
      f->sci_mode = ratio > 1000.0 || f->max_abs > 1.0e8;
    else
      f->sci_mode = ratio > 1000.0 || f->max_abs > 1.0e8 || f->min_abs < 1.0e-4;
  }
  visit(x, 0, x->data, summarize, width_fn, f);
}

/* ---- layout ------------------------------------------------------------ */

static void put_value(sbuf *b, const formatter *f, const char *p) {
  char buf[64];
  int n = format_value(f, p, buf);
  sb_spaces(b, f->width - n);
  sb_putn(b, buf, (size_t)n);
}

/* The last dim: entries joined by ", ", wrapped so a line holds
 * max(1, (linewidth - indent) / (width + 2)) entries (" ..." counts as one). */
static void put_vector(sbuf *b, const lt_tensor *x, const char *p, int indent, bool summarize,
                       const formatter *f) {
  const int d = x->ndim - 1;
  const int64_t size = x->shape[d];
  const int64_t step = x->stride[d] * (int64_t)lt_dtype_size(x->dtype);
  const bool gap = shown_gap(summarize, size);
  int64_t per_line = (PRINT_LINEWIDTH - indent) / (f->width + 2);
  if (per_line < 1) per_line = 1;
  sb_puts(b, "[");
  int64_t k = 0; /* entries written so far, the " ..." included */
  for (int64_t i = 0; i < size; i++, k++) {
    if (k > 0) {
      if (k % per_line == 0) {
        sb_puts(b, ",\n");
        sb_spaces(b, indent + 1);
      } else {
        sb_puts(b, ", ");
      }
    }
    if (gap && i == PRINT_EDGEITEMS) {
      sb_puts(b, " ...");
      i = size - PRINT_EDGEITEMS - 1;
      continue;
    }
    put_value(b, f, p + i * step);
  }
  sb_puts(b, "]");
}

/* Dims d.. of x starting at p; slices of a dim are separated by "," and
 * (ndim - d - 1) newlines, then indent + 1 spaces. */
static void put_dims(sbuf *b, const lt_tensor *x, int d, const char *p, int indent,
                     bool summarize, const formatter *f) {
  if (d == x->ndim - 1) {
    put_vector(b, x, p, indent, summarize, f);
    return;
  }
  const int64_t size = x->shape[d];
  const int64_t step = x->stride[d] * (int64_t)lt_dtype_size(x->dtype);
  const bool gap = shown_gap(summarize, size);
  sb_puts(b, "[");
  for (int64_t i = 0; i < size; i++) {
    if (i > 0) {
      sb_puts(b, ",");
      for (int n = 0; n < x->ndim - d - 1; n++) sb_puts(b, "\n");
      sb_spaces(b, indent + 1);
    }
    if (gap && i == PRINT_EDGEITEMS) {
      sb_puts(b, "...");
      i = size - PRINT_EDGEITEMS - 1;
      continue;
    }
    put_dims(b, x, d + 1, p + i * step, indent + 1, summarize, f);
  }
  sb_puts(b, "]");
}

/* PyTorch's _add_suffixes: ", suffix" on the same line unless it would pass
 * the line width, then on a new line indented under the first bracket. */
static void put_suffix(sbuf *b, const char *suffix, int indent, size_t *last_line_len) {
  size_t n = strlen(suffix);
  if (*last_line_len + n + 2 > PRINT_LINEWIDTH) {
    sb_puts(b, ",\n");
    sb_spaces(b, indent);
    *last_line_len = (size_t)indent + n;
  } else {
    sb_puts(b, ", ");
    *last_line_len += n + 2;
  }
  sb_puts(b, suffix);
}

char *lt_tensor_to_string(const lt_tensor *x) {
  if (!x) return lt__err_null("tensor_to_string", "x"), NULL;
  const char *prefix = "tensor(";
  const int indent = (int)strlen(prefix);
  sbuf b = {0};
  sb_puts(&b, prefix);
  if (x->numel == 0) {
    sb_puts(&b, "[]");
  } else {
    const bool summarize = x->numel > PRINT_THRESHOLD;
    formatter f;
    formatter_init(&f, x, summarize);
    if (x->ndim == 0)
      put_value(&b, &f, x->data);
    else
      put_dims(&b, x, 0, x->data, indent, summarize, &f);
  }
  /* as Python: len(s) - s.rfind("\n") + 1 (rfind is -1 without a newline) */
  size_t last_line_len = 0;
  if (!b.oom) {
    const char *nl = strrchr(b.p, '\n');
    last_line_len = nl ? b.len - (size_t)(nl - b.p) + 1 : b.len + 2;
  }
  if (x->numel == 0 && x->ndim != 1) {
    char sz[32 + 24 * LT_MAX_DIMS];
    size_t n = (size_t)snprintf(sz, sizeof sz, "size=(");
    for (int d = 0; d < x->ndim; d++)
      n += (size_t)snprintf(sz + n, sizeof sz - n, d ? ", %lld" : "%lld", (long long)x->shape[d]);
    snprintf(sz + n, sizeof sz - n, ")");
    put_suffix(&b, sz, indent, &last_line_len);
  }
  if (x->dtype != LT_DTYPE_F32) {
    char dt[32];
    snprintf(dt, sizeof dt, "dtype=%s", lt_dtype_name(x->dtype));
    put_suffix(&b, dt, indent, &last_line_len);
  }
  sb_puts(&b, ")");
  if (b.oom) {
    free(b.p);
    lt__err(LT_ERR_NOMEM, "tensor_to_string: x is %s: out of memory for the text", LT__D(x));
    return NULL;
  }
  return b.p;
}

lt_status lt_print(const lt_tensor *x, FILE *f) {
  if (!x) return lt__err_null("print", "x");
  if (!f) return lt__err(LT_ERR_NULL, "print: x is %s: argument f (the FILE) is NULL", LT__D(x));
  char *s = lt_tensor_to_string(x);
  if (!s) return lt_last_status();
  int rc = fputs(s, f);
  if (rc >= 0) rc = fputc('\n', f);
  free(s);
  if (rc < 0) return lt__err(LT_ERR_IO, "print: x is %s: writing to the stream failed", LT__D(x));
  return LT_OK;
}
