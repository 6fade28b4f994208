/*
 * tensor/autocast.c: autocast (mixed precision, docs/mixed-precision.md):
 * the thread-local mode, the bf16 copies of f32 operands that autocast
 * products read (per-thread conversion buffers, the operand cache keyed by
 * storage id and version, the inputs a Linear keeps as bf16), and the
 * accounting tests and benchmarks read.
 *
 * What this is not: a product (tensor/gemm.c asks lt__autocast_operand for
 * an operand's bf16 copy and sends the product to oneDNN) nor the rounding
 * loops (tensor/bf16round.c).
 */
#include "tensor/autocast_internal.h"

#include "tensor/bf16round_internal.h"
#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/threads_internal.h"

#include <stdint.h>
#include <stdlib.h>

/* The mode is thread-local, like grad mode. OpenMP regions that issue
 * products hand the caller's mode to their workers (lt__autocast_adopt), so
 * a product runs in the mode of the thread that asked for it, on any number
 * of threads. */
static _Thread_local lt_dtype tl_autocast = LT_DTYPE_F32;

static void wcache_clear(void);
static void ai_clear(void);
/* Both caches go with their thread (lt__at_thread_exit, registered by their
 * first entry), as when autocast is turned off on it. */
static void autocast_release(void) {
  wcache_clear();
  ai_clear();
}

lt_dtype lt_autocast_dtype(void) { return tl_autocast; }

lt_dtype lt_set_autocast(lt_dtype dtype) {
  const lt_dtype prev = tl_autocast;
  if (dtype != LT_DTYPE_F32 && dtype != LT_DTYPE_BF16) {
    lt__err(LT_ERR_DTYPE, "set_autocast: dtype %s: autocast takes bf16 (on) or f32 (off)", lt_dtype_name(dtype));
    return prev;
  }
  tl_autocast = dtype;
  if (dtype == LT_DTYPE_F32) { /* leaving autocast drops the bf16 weights, as PyTorch */
    wcache_clear();
    ai_clear();
  }
  return prev;
}

lt_dtype lt__autocast_adopt(lt_dtype mode) {
  const lt_dtype prev = tl_autocast;
  tl_autocast = mode;
  return prev;
}

/* ---- bf16 operands -------------------------------------------------------- */

/* Per-thread conversion buffers, grown as needed and kept for the thread's
 * life (freed when it exits): a step converts the same sizes again and again. 0-1: a product's two
 * operands; 2-3: operands held for several products (lt__mat_hold_bf16). */
static _Thread_local void *tl_buf[4];
static _Thread_local size_t tl_cap[4];

static void conv_release(void) {
  for (int i = 0; i < 4; i++) {
    free(tl_buf[i]);
    tl_buf[i] = NULL;
    tl_cap[i] = 0;
  }
}

static void *conv_buf(int i, size_t bytes) {
  if (bytes <= tl_cap[i]) return tl_buf[i];
  (void)lt__at_thread_exit(conv_release); /* released with the thread */
  free(tl_buf[i]);
  size_t sz = (bytes + 4095) & ~(size_t)4095;
  tl_buf[i] = aligned_alloc(64, sz);
  tl_cap[i] = tl_buf[i] ? sz : 0;
  if (!tl_buf[i]) lt__err(LT_ERR_NOMEM, "matmul: cannot allocate %zu bytes to convert an operand", bytes);
  return tl_buf[i];
}

/* The view of x's copy in buf (same orientation as x). */
static lt__mat copy_view(lt__mat x, lt__bf16_geom g, void *buf) {
  return g.colmajor ? LT__MAT(buf, x.rows, x.cols, 1, x.rows) : LT__MAT(buf, x.rows, x.cols, x.cols, 1);
}

/* x converted into buffer i; *out describes the copy. */
static lt_status convert(int i, lt__mat x, lt_dtype to, bool one_thread, lt__mat *out) {
  const lt__bf16_geom g = lt__bf16_geom_of(x);
  void *buf = conv_buf(i, (size_t)(g.outer * g.inner) * lt_dtype_size(to) + 1);
  if (!buf) return LT_ERR_NOMEM;
  lt__bf16_convert(x, g, to, buf, one_thread);
  *out = copy_view(x, g, buf);
  return LT_OK;
}

/* x as bf16 in conversion buffer 2 + slot, apart from the two buffers every
 * autocast product reuses: an operand converted once and read by several
 * products. */
lt_status lt__mat_hold_bf16(int slot, lt__mat x, bool one_thread, lt__mat *out) {
  LT_CHECK(slot == 0 || slot == 1);
  if (x.bf16) {
    *out = x;
    return LT_OK;
  }
  const lt_status st = convert(2 + slot, x, LT_DTYPE_BF16, one_thread, out);
  if (st == LT_OK) out->bf16 = true;
  return st;
}

/* ---- the autocast operand cache --------------------------------------------
 *
 * A parameter's bf16 copy is made once per step instead of once per product
 * (a weight is read by its forward product and its input-gradient product),
 * and a gradient's once per Linear backward instead of twice (g W and
 * g^T x). Operands that name their tensor (lt__mat_of) are looked up here.
 * Per thread, like PyTorch's cache (autocast_mode.cpp, cached_casts): no
 * locks, and no thread reads a copy another thread is rewriting. An entry is
 * keyed by the tensor's storage id (never reused, so a freed tensor's entry
 * can never answer for a new one at the same address), the view's address
 * and geometry; it holds the copy of one storage version. Every in-place
 * write through the library bumps the version (the optimizer's step,
 * lt_copy_, lt_add_, gradient accumulation, loading a checkpoint), so a
 * product after a write converts again, into the same buffer: no stale
 * reads. Writes through ->data that bypass the library are not seen (the
 * same contract as autograd's saved tensors).
 *
 * Memory: the cache owns its buffers. Parameters (leaves requiring grad)
 * stay until their version changes, at most WC_MAX entries and WC_BYTES
 * bytes per thread, least recently used dropped first. Other tensors share
 * WC_TRANSIENT slots, reused (buffer included) in least-recently-used order.
 * Turning autocast off on the thread (lt_set_autocast(F32)) frees them all,
 * as PyTorch does when leaving its outermost autocast region. */
#define WC_MAX 256
#define WC_BYTES ((size_t)1 << 30)
#define WC_TRANSIENT 2

typedef struct wc_entry {
  uint64_t id, version, used; /* storage id and version of the copy; last use */
  const void *data;           /* the source view's address and geometry */
  lt__bf16_geom g;
  bool persistent;            /* a parameter's copy (else a transient slot) */
  uint16_t *bf16;             /* cap bytes, owned */
  size_t cap;
} wc_entry;

static _Thread_local wc_entry tl_wc[WC_MAX];
static _Thread_local int tl_wc_n;
static _Thread_local size_t tl_wc_bytes;
static _Thread_local uint64_t tl_wc_tick;
static _Thread_local int64_t tl_wc_conversions;

static void wc_drop(int i) {
  free(tl_wc[i].bf16);
  tl_wc_bytes -= tl_wc[i].cap;
  tl_wc[i] = tl_wc[--tl_wc_n];
}

static void wcache_clear(void) {
  while (tl_wc_n > 0) wc_drop(tl_wc_n - 1);
}

void lt__autocast_cache_stats(int *entries, size_t *bytes, int64_t *conversions) {
  if (entries) *entries = tl_wc_n;
  if (bytes) *bytes = tl_wc_bytes;
  if (conversions) *conversions = tl_wc_conversions;
}

static bool geom_eq(lt__bf16_geom a, lt__bf16_geom b) {
  return a.outer == b.outer && a.inner == b.inner && a.so == b.so && a.si == b.si;
}

/* The least recently used entry of the kind, or -1. */
static int wc_lru(bool persistent) {
  int lru = -1;
  for (int j = 0; j < tl_wc_n; j++)
    if (tl_wc[j].persistent == persistent && (lru < 0 || tl_wc[j].used < tl_wc[lru].used)) lru = j;
  return lru;
}

/* x (an f32 view of tensor x.src) as bf16, from the cache; falls back to
 * buffer i when the copy is too large to keep. */
static lt_status convert_cached(int i, lt__mat x, bool one_thread, lt__mat *out) {
  const lt__bf16_geom g = lt__bf16_geom_of(x);
  const bool persistent = x.src->requires_grad && !x.src->grad_fn;
  const uint64_t id = lt__storage_id(x.src), ver = lt__version(x.src);
  const size_t bytes = ((size_t)(g.outer * g.inner) * sizeof(uint16_t) + 63) & ~(size_t)63;
  if (bytes > WC_BYTES / 4) return convert(i, x, LT_DTYPE_BF16, one_thread, out);
  wc_entry *e = NULL;
  for (int j = 0; j < tl_wc_n && !e; j++)
    if (tl_wc[j].id == id && tl_wc[j].data == x.data && geom_eq(tl_wc[j].g, g)) e = &tl_wc[j];
  if (e && e->version == ver) {
    e->used = ++tl_wc_tick;
    *out = copy_view(x, g, e->bf16);
    return LT_OK;
  }
  if (!e && !persistent) { /* a transient slot: the least recently used one, its buffer reused if it fits */
    int n = 0;
    for (int j = 0; j < tl_wc_n; j++) n += !tl_wc[j].persistent;
    const int lru = n >= WC_TRANSIENT ? wc_lru(false) : -1;
    if (lru >= 0 && tl_wc[lru].cap >= bytes) e = &tl_wc[lru];
    else if (lru >= 0) wc_drop(lru);
  }
  if (!e) {
    while (tl_wc_n > 0 && (tl_wc_n == WC_MAX || tl_wc_bytes + bytes > WC_BYTES)) {
      const int lru = wc_lru(true);
      wc_drop(lru >= 0 ? lru : wc_lru(false));
    }
    uint16_t *buf = aligned_alloc(64, bytes);
    if (!buf) return lt__err(LT_ERR_NOMEM, "matmul: cannot allocate %zu bytes for an operand's bf16 copy", bytes);
    (void)lt__at_thread_exit(autocast_release);
    e = &tl_wc[tl_wc_n++];
    e->bf16 = buf;
    e->cap = bytes;
    tl_wc_bytes += bytes;
  }
  e->id = id, e->version = ver, e->data = x.data, e->g = g, e->persistent = persistent;
  lt__bf16_convert(x, g, LT_DTYPE_BF16, e->bf16, one_thread);
  tl_wc_conversions++;
  e->used = ++tl_wc_tick;
  *out = copy_view(x, g, e->bf16);
  return LT_OK;
}

lt_status lt__autocast_bf16_of(const lt_tensor *t, const uint16_t **out) {
  LT_CHECK(t && t->dtype == LT_DTYPE_F32 && t->ndim >= 1 && t->numel > 0 && lt_is_contiguous(t));
  const int64_t rows = t->shape[0], cols = t->numel / rows; /* a Linear's weight's geometry: [out, in] */
  lt__mat m;
  const lt_status st = convert_cached(0, lt__mat_of(LT__MAT(t->data, rows, cols, cols, 1), t), false, &m);
  if (st == LT_OK) *out = m.data;
  return st;
}

/* Operand i of an autocast product as bf16: as it is when it holds bf16
 * already (lt__autocast_input), cached when it names its tensor. */
static lt_status to_bf16(int i, lt__mat x, bool one_thread, lt__mat *out) {
  if (x.bf16) {
    *out = x;
    return LT_OK;
  }
  return x.src ? convert_cached(i, x, one_thread, out) : convert(i, x, LT_DTYPE_BF16, one_thread, out);
}

/* ---- a Linear's output gradient: bf16 copy and column sums in one pass ---- */

lt_tensor *lt__autocast_bf16_colsum(lt__mat g, float *colsum) {
  const int64_t N = g.rows, M = g.cols;
  lt_tensor *out = lt_empty(LT_DTYPE_BF16, 2, (const int64_t[]){N, M});
  if (!out) return NULL;
  if (lt__bf16_colsum(g, out->data, colsum) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  if (N * M != 0) tl_wc_conversions++;
  return out;
}

/* ---- autocast inputs kept as bf16 (lt__autocast_input) --------------------
 *
 * The last AI_MEMO copies made on this thread, keyed like the operand cache
 * (storage id, version, address and geometry of the source): the q, k and v
 * projections of one input, or the encoder memory read by a decoder layer's
 * k and v projections, share one copy. The thread holds one reference to
 * each copy; displaced copies and all of them when autocast is turned off
 * are released. */
#define AI_MEMO 4

typedef struct ai_entry {
  uint64_t id, version, used;
  const void *data;
  int ndim;
  int64_t shape[LT_MAX_DIMS], stride[LT_MAX_DIMS];
  lt_tensor *copy; /* owned: one reference */
} ai_entry;

static _Thread_local ai_entry tl_ai[AI_MEMO];
static _Thread_local uint64_t tl_ai_tick;

static void ai_clear(void) {
  for (int i = 0; i < AI_MEMO; i++) {
    lt_tensor_free(tl_ai[i].copy);
    tl_ai[i] = (ai_entry){0};
  }
}

bool lt__autocast_active(void) { return tl_autocast == LT_DTYPE_BF16 && lt__path_on(LT__PATH_gemm_bf16_dnnl); }

static bool ai_match(const ai_entry *e, const lt_tensor *x, uint64_t id, uint64_t ver) {
  if (!e->copy || e->id != id || e->version != ver || e->data != x->data || e->ndim != x->ndim) return false;
  for (int d = 0; d < x->ndim; d++)
    if (e->shape[d] != x->shape[d] || (x->shape[d] != 1 && e->stride[d] != x->stride[d])) return false;
  return true;
}

lt_tensor *lt__autocast_input(const lt_tensor *x) {
  LT_CHECK(x && x->dtype == LT_DTYPE_F32);
  const uint64_t id = lt__storage_id(x), ver = lt__version(x);
  ai_entry *e = NULL;
  for (int i = 0; i < AI_MEMO && !e; i++)
    if (ai_match(&tl_ai[i], x, id, ver)) e = &tl_ai[i];
  if (!e) {
    lt__mat X;
    lt_tensor *xc = NULL, *copy = NULL;
    if (!lt__mat_rows(x, &X)) { /* leading dims that do not nest: an f32 copy first */
      const bool prev = lt_set_grad_enabled(false);
      xc = lt_contiguous(x);
      lt_set_grad_enabled(prev);
      if (!xc) return NULL;
      LT_CHECK(lt__mat_rows(xc, &X));
    }
    copy = lt_empty(LT_DTYPE_BF16, x->ndim, x->shape);
    if (copy) lt_tensor_keep(copy); /* the thread's reference, outside any open scope */
    if (copy) (void)lt__at_thread_exit(autocast_release);
    if (copy && x->numel > 0) /* row-major [N, K]: copy is contiguous in x's shape */
      lt__bf16_convert(X, (lt__bf16_geom){false, X.rows, X.cols, X.rs, X.cs}, LT_DTYPE_BF16, copy->data, false);
    lt_tensor_free(xc);
    if (!copy) return NULL;
    e = &tl_ai[0];
    for (int i = 1; i < AI_MEMO; i++)
      if (tl_ai[i].used < e->used) e = &tl_ai[i];
    lt_tensor_free(e->copy);
    *e = (ai_entry){.id = id, .version = ver, .data = x->data, .ndim = x->ndim, .copy = copy};
    for (int d = 0; d < x->ndim; d++) e->shape[d] = x->shape[d], e->stride[d] = x->stride[d];
    tl_wc_conversions++;
  }
  e->used = ++tl_ai_tick;
  return lt__view_of(e->copy, e->copy->ndim, e->copy->shape, e->copy->stride, e->copy->offset);
}

lt_status lt__autocast_operand(int i, lt__mat x, bool one_thread, lt__mat *out) { return to_bf16(i, x, one_thread, out); }

lt_status lt__autocast_widen(int i, lt__mat x, bool one_thread, lt__mat *out) {
  return convert(i, x, LT_DTYPE_F32, one_thread, out);
}
