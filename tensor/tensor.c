/*
 * tensor/tensor.c: the tensor object's life: storage, reference counts,
 * ownership scopes, creation, element access. Copies, casts and fills are
 * tensor/copy.c's.
 *
 * Ownership model (see tensor.h): a tensor object has a reference count; its
 * storage has another (views share storage). A tensor made while a scope is
 * open is owned by that scope, which releases it at lt_scope_end. Views, math
 * and autograd live elsewhere (view.c, elementwise.c, autograd/).
 */
#define _DEFAULT_SOURCE /* madvise */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/quant.h" /* lt_qmatrix_free */

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif

struct lt_storage {
  void *base;        /* 64-byte aligned, or the user's buffer */
  size_t nbytes;
  size_t alloc_size; /* bytes actually allocated (cache bookkeeping) */
  int refcount;
  bool borrowed;     /* base belongs to the user */
  uint64_t version;  /* bumped by every in-place write */
  uint64_t id;       /* unique for the process's life (never reused, unlike the address) */
};

struct lt_scope {
  lt_tensor **items; /* NULL entries: freed early by the user */
  int64_t n, cap;
  lt_scope *parent;
};

static _Thread_local lt_scope *tl_scope = NULL;

/* Live-object counters, for leak tests (lt__live_tensors / lt__live_storages). */
static int64_t live_tensors = 0, live_storages = 0;
int64_t lt__live_tensors(void) {
  int64_t n;
#pragma omp atomic read
  n = live_tensors;
  return n;
}
int64_t lt__live_storages(void) {
  int64_t n;
#pragma omp atomic read
  n = live_storages;
  return n;
}

/* ---- storage ----------------------------------------------------------- */

/* A cache of large freed blocks, by size class. glibc serves big blocks
 * straight from mmap and returns them on free, so without it every large
 * output and scratch buffer of every step is fresh memory that the kernel
 * faults in and zeroes page by page, a large part of a big GEMM's and of a
 * CNN step's time (docs/gemm.md and docs/vision.md give the figures).
 *
 * - Blocks of CACHE_MIN (256 KiB) or more are rounded up to a size class
 *   (4 classes per power of two: at most 25% slack; from 4 MiB on, also to
 *   whole 2 MiB huge pages, which new blocks are advised to use) and a freed
 *   one is kept for the next request of the same class (the newest first),
 *   or, when none is cached, of a smaller class needing at least 2/3 of it
 *   (the block at most 50% larger than the request: CACHE_FIT).
 * - Bounded: at most CACHE_SLOTS blocks and CACHE_MAX_BYTES in all, or up
 *   to the peak of the blocks in use when that is more (cache_cap); a free
 *   that does not fit evicts the least recently cached blocks, and a block
 *   larger than the bound goes back to the system.
 * - Thread-safe (one mutex; the blocks are large, so calls are rare next to
 *   the work done in them).
 * - Under AddressSanitizer a cached block is poisoned until it is handed out
 *   again, so a use after free of a tensor is still reported.
 * LT_STORAGE_CACHE=0 in the environment turns it off (every block goes back
 * to the system at once), for comparisons. */
#define CACHE_MIN ((size_t)256 << 10)
#define CACHE_HUGE ((size_t)4 << 20)
/* Slots enough for every block of a bf16 training step (more, smaller
 * blocks: bf16 copies of activations and gradients), so that a step never
 * evicts a block it needs again later in the same step (docs/benchmarks.md
 * gives the page faults and peak RSS against fewer slots). */
#define CACHE_SLOTS 256
#define CACHE_MAX_BYTES ((size_t)512 << 20)
/* A request whose class has no cached block takes the smallest cached block
 * at most alloc / CACHE_FIT larger (the newest of that size), whole, rather
 * than new memory.
 * A training step frees blocks of other classes than its next step asks
 * for in places (the fused attention's backward: its gradients and packs),
 * and under the bound the exact classes it needs had been evicted: the
 * decoder step of docs/attention.md at T 2,048 got 34 blocks (about 200 MB,
 * zeroed by the kernel page by page) fresh every step, and its peak RSS grew
 * from 653 MB after 3 steps to 1,138 MB after 6 (freed blocks fragmenting
 * glibc's heap); with the fit, none after the first step, and 651 MB. */
#define CACHE_FIT 2

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CACHE_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define CACHE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define CACHE_POISON(p, n) ((void)(p), (void)(n))
#define CACHE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static struct {
  void *p;
  size_t size;
  uint64_t age; /* when it was cached: the oldest is evicted first */
} cache[CACHE_SLOTS];
static size_t cache_bytes = 0;
static uint64_t cache_clock = 0;
static int cache_enabled = -1; /* -1: not read yet */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* Bytes of blocks of CACHE_MIN or more in use (handed out, not yet freed),
 * and the most ever in use at once. */
static size_t live_bytes = 0, live_peak = 0;

/* The size class of a request of alloc >= CACHE_MIN bytes. */
static size_t cache_class(size_t alloc) {
  size_t top = CACHE_MIN;
  while (top < alloc / 2 && top <= SIZE_MAX / 4) top *= 2; /* top <= alloc < 4 top */
  size_t step = top / 4, c = (alloc + step - 1) / step * step;
  if (c < alloc) return alloc; /* overflow: no class (aligned_alloc then fails) */
  if (c >= CACHE_HUGE) {
    const size_t huge = (size_t)2 << 20;
    size_t h = (c + huge - 1) / huge * huge;
    c = h >= c ? h : c;
  }
  return c;
}

/* Called with cache_lock held. */
static bool cache_on(void) {
  if (cache_enabled < 0) {
    const char *e = lt__setting_get(LT__SETTING_STORAGE_CACHE);
    cache_enabled = !(e && e[0] == '0' && !e[1]);
  }
  return cache_enabled;
}

/* The cache's bound in bytes (cache_lock held): CACHE_MAX_BYTES, or, while
 * the blocks in use are further than that below their peak, what brings
 * them back to it. A training step frees most of its forward's activations
 * in the backward and allocates them again in the next forward; with a
 * fixed bound, a large model's backward evicts blocks its next forward then
 * gets fresh from the system, zeroed by the kernel (docs/mixed-precision.md
 * gives the figures). Blocks in use plus cached blocks stay below
 * max(peak + min(peak / 4, CACHE_MAX_BYTES), in use + CACHE_MAX_BYTES), the
 * peak being the largest in use since the process started (it never
 * decays): after one large phase (a big evaluation batch) up to that much
 * stays cached, never more than CACHE_SLOTS blocks. */
static size_t cache_cap(void) {
  const size_t slack = live_peak / 4 < CACHE_MAX_BYTES ? live_peak / 4 : CACHE_MAX_BYTES;
  const size_t room = live_peak + slack - live_bytes;
  return room > CACHE_MAX_BYTES ? room : CACHE_MAX_BYTES;
}

/* Evicts the oldest blocks (cache_lock held) until `bytes` more fit under
 * cache_cap and `slots` more in the table; stores them in ev/es (freed by
 * the caller after unlocking) and returns how many. */
static int cache_trim(size_t bytes, int slots, void **ev, size_t *es) {
  int ne = 0;
  for (;;) {
    int used = 0, old = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
      if (cache[i].p) {
        used++;
        if (old < 0 || cache[i].age < cache[old].age) old = i;
      }
    if (old < 0 || (cache_bytes + bytes <= cache_cap() && used + slots <= CACHE_SLOTS)) break;
    ev[ne] = cache[old].p, es[ne++] = cache[old].size;
    cache_bytes -= cache[old].size;
    cache[old].p = NULL;
  }
  return ne;
}

static void free_evicted(int ne, void **ev, const size_t *es) {
  for (int i = 0; i < ne; i++) {
    CACHE_UNPOISON(ev[i], es[i]);
    free(ev[i]);
  }
}

/* Counts a block of `alloc` bytes as in use (cache_lock held). */
static void live_add(size_t alloc) {
  live_bytes += alloc;
  if (live_bytes > live_peak) live_peak = live_bytes;
}

void lt__storage_cache_stats(size_t *cached, size_t *in_use, size_t *peak) {
  pthread_mutex_lock(&cache_lock);
  if (cached) *cached = cache_bytes;
  if (in_use) *in_use = live_bytes;
  if (peak) *peak = live_peak;
  pthread_mutex_unlock(&cache_lock);
}

void lt__storage_cache_release(void) {
  void *ev[CACHE_SLOTS];
  size_t es[CACHE_SLOTS];
  int ne = 0;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].p) {
      ev[ne] = cache[i].p, es[ne++] = cache[i].size;
      cache_bytes -= cache[i].size;
      cache[i].p = NULL;
    }
  pthread_mutex_unlock(&cache_lock);
  free_evicted(ne, ev, es);
#ifdef __GLIBC__
  malloc_trim(0); /* free pages inside the heap go back too */
#endif
}

static void *block_alloc(size_t alloc, size_t *got) {
  *got = alloc;
  if (alloc < CACHE_MIN) return aligned_alloc(64, alloc);
  alloc = cache_class(alloc);
  *got = alloc;
  void *p = NULL;
  pthread_mutex_lock(&cache_lock);
  if (cache_on()) { /* the newest block of the class: the likeliest still in the CPU's caches */
    int best = -1;
    for (int i = 0; i < CACHE_SLOTS; i++)
      if (cache[i].p && cache[i].size == alloc && (best < 0 || cache[i].age > cache[best].age)) best = i;
    if (best < 0) /* none: the smallest larger block within CACHE_FIT, the newest of that size */
      for (int i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].p && cache[i].size > alloc && cache[i].size - alloc <= alloc / CACHE_FIT &&
            (best < 0 || cache[i].size < cache[best].size ||
             (cache[i].size == cache[best].size && cache[i].age > cache[best].age)))
          best = i;
    if (best >= 0) {
      alloc = cache[best].size; /* the caller's block is the whole of it (freed by that size) */
      *got = alloc;
      p = cache[best].p;
      cache_bytes -= cache[best].size;
      cache[best].p = NULL;
      live_add(alloc);
    }
  }
  pthread_mutex_unlock(&cache_lock);
  if (p) {
    CACHE_UNPOISON(p, alloc);
    return p;
  }
  const bool huge = alloc >= CACHE_HUGE;
  p = aligned_alloc(huge ? (size_t)2 << 20 : 64, alloc);
#ifdef MADV_HUGEPAGE
  if (p && huge) (void)madvise(p, alloc, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
  if (p) { /* new memory: cached blocks beyond the bound (now that more is in use) go back */
    void *ev[CACHE_SLOTS];
    size_t es[CACHE_SLOTS];
    pthread_mutex_lock(&cache_lock);
    live_add(alloc);
    const int ne = cache_trim(0, 0, ev, es);
    pthread_mutex_unlock(&cache_lock);
    free_evicted(ne, ev, es);
  }
  return p;
}

static void block_free(void *p, size_t size) {
  if (!p) return;
  if (size >= CACHE_MIN) {
    void *ev[CACHE_SLOTS];
    size_t es[CACHE_SLOTS];
    int ne = 0;
    pthread_mutex_lock(&cache_lock);
    live_bytes -= size;
    if (cache_on() && size <= cache_cap()) {
      ne = cache_trim(size, 1, ev, es); /* the oldest blocks go until this one fits */
      for (int i = 0; i < CACHE_SLOTS; i++)
        if (!cache[i].p) {
          cache[i].p = p;
          cache[i].size = size;
          cache[i].age = ++cache_clock;
          cache_bytes += size;
          CACHE_POISON(p, size);
          p = NULL;
          break;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    free_evicted(ne, ev, es);
  }
  free(p);
}

/* The next storage id (lt__storage_id); 0 is never given. */
static uint64_t next_storage_id = 0;
static uint64_t storage_id_new(void) {
  uint64_t id;
#pragma omp atomic capture
  id = ++next_storage_id;
  return id;
}

static lt_storage *storage_new(const char *op, size_t nbytes) {
  lt_storage *s = calloc(1, sizeof *s);
  size_t alloc = (nbytes + 63) & ~(size_t)63;
  if (alloc < nbytes) alloc = nbytes; /* overflow guard; aligned_alloc then fails */
  if (alloc == 0) alloc = 64;
  size_t got = 0;
  void *base = s ? block_alloc(alloc, &got) : NULL;
  if (!s || !base) {
    free(s);
    free(base);
    lt__err(LT_ERR_NOMEM, "%s: cannot allocate %zu bytes", op, nbytes);
    return NULL;
  }
  s->base = base;
  s->nbytes = nbytes;
  s->alloc_size = got;
  s->refcount = 1;
  s->id = storage_id_new();
#pragma omp atomic
  live_storages++;
  return s;
}

static void storage_release(lt_storage *s) {
  if (!s || --s->refcount > 0) return;
  if (!s->borrowed) block_free(s->base, s->alloc_size);
  free(s);
#pragma omp atomic
  live_storages--;
}

uint64_t lt__version(const lt_tensor *x) { return x->storage->version; }
void lt__bump_version(lt_tensor *x) { x->storage->version++; }
uint64_t lt__storage_id(const lt_tensor *x) { return x->storage->id; }

/* ---- scopes ------------------------------------------------------------ */

lt_scope *lt_scope_begin(void) {
  lt_scope *s = calloc(1, sizeof *s);
  if (!s) {
    lt__err(LT_ERR_NOMEM, "scope_begin: out of memory");
    return NULL;
  }
  s->parent = tl_scope;
  tl_scope = s;
  return s;
}

static void release(lt_tensor *t);

void lt_scope_end(lt_scope *s) {
  if (!s) return;
  /* s must be on this thread's stack; ending an outer scope ends inner ones. */
  lt_scope *p = tl_scope;
  while (p && p != s) p = p->parent;
  if (!p) {
    lt__err(LT_ERR_STATE, "scope_end: the scope is not open on this thread");
    return;
  }
  for (;;) {
    lt_scope *top = tl_scope;
    tl_scope = top->parent;
    /* Release in reverse creation order: consumers before producers. */
    for (int64_t i = top->n - 1; i >= 0; i--) {
      lt_tensor *t = top->items[i];
      if (!t) continue;
      t->scope_ = NULL;
      release(t);
    }
    free(top->items);
    free(top);
    if (top == s) break;
  }
}

/* Give t to the innermost scope, if any. On failure (out of memory) t is
 * freed and NULL returned. */
static lt_tensor *adopt(lt_tensor *t) {
  lt_scope *s = tl_scope;
  if (!s) return t;
  if (s->n == s->cap) {
    int64_t cap = s->cap ? s->cap * 2 : 256;
    lt_tensor **items = realloc(s->items, (size_t)cap * sizeof *items);
    if (!items) {
      release(t);
      lt__err(LT_ERR_NOMEM, "scope: out of memory");
      return NULL;
    }
    s->items = items;
    s->cap = cap;
  }
  t->scope_ = s;
  t->scope_slot_ = s->n;
  s->items[s->n++] = t;
  return t;
}

lt_tensor *lt_tensor_keep(lt_tensor *t) {
  if (t && t->scope_) {
    t->scope_->items[t->scope_slot_] = NULL;
    t->scope_ = NULL;
  }
  return t;
}

lt_tensor *lt__scope_adopt(lt_tensor *t) { return t ? adopt(t) : NULL; }

lt_tensor *lt_scope_return(lt_scope *s, lt_tensor *t) {
  lt_tensor_keep(t);
  lt_scope_end(s);
  return t ? adopt(t) : NULL;
}

/* ---- tensor objects ---------------------------------------------------- */

static void release(lt_tensor *t) {
  if (--t->refcount_ > 0) return;
  LT_CHECK(t->scope_ == NULL);
  if (t->grad) lt_tensor_free(t->grad);
  lt__node_release(t->grad_fn);
  storage_release(t->storage);
  lt_qmatrix_free(t->qmatrix_);
  free(t);
#pragma omp atomic
  live_tensors--;
}

void lt__tensor_release(lt_tensor *t) {
  if (t) release(t);
}

void lt_tensor_free(lt_tensor *t) {
  if (!t) return;
  lt_tensor_keep(t);
  release(t);
}

bool lt__tensor_exclusive(const lt_tensor *t) {
  return t && t->refcount_ == 1 && !t->scope_ && t->storage->refcount == 1 && !t->storage->borrowed &&
         t->offset == 0 && lt_is_contiguous(t) &&
         (size_t)t->numel * lt_dtype_size(t->dtype) == t->storage->nbytes;
}

bool lt__storage_shared(const lt_tensor *t) { return t->storage->refcount > 1 || t->storage->borrowed; }

void lt__tensor_take_storage(lt_tensor *dst, lt_tensor *src) {
  LT_CHECK(src->refcount_ == 1 && !src->scope_ && !src->grad_fn && !src->grad);
  uint64_t version = dst->storage->version + 1;
  lt_storage *old = dst->storage;
  dst->dtype = src->dtype;
  dst->ndim = src->ndim;
  memcpy(dst->shape, src->shape, sizeof dst->shape);
  memcpy(dst->stride, src->stride, sizeof dst->stride);
  dst->numel = src->numel;
  dst->offset = src->offset;
  dst->data = src->data;
  dst->storage = src->storage;
  src->storage = old; /* released with src */
  if (dst->storage->version < version) dst->storage->version = version;
  old->version++; /* views of the old storage (saved by a graph) see a write too */
  release(src);
}

lt_tensor *lt_tensor_retain(lt_tensor *t) {
  if (t) t->refcount_++;
  return t;
}

/* A tensor object over storage s (one reference to s is taken). */
static lt_tensor *tensor_over(lt_storage *s, lt_dtype dtype, int ndim, const int64_t *shape,
                              const int64_t *stride, int64_t offset) {
  lt_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    lt__err(LT_ERR_NOMEM, "tensor: out of memory");
    return NULL;
  }
#pragma omp atomic
  live_tensors++;
  t->dtype = dtype;
  t->ndim = ndim;
  t->numel = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->stride[i] = stride[i];
    t->numel *= shape[i];
  }
  t->offset = offset;
  t->storage = s;
  s->refcount++;
  t->data = (char *)s->base + offset * (int64_t)lt_dtype_size(dtype);
  t->refcount_ = 1;
  return adopt(t);
}

lt_tensor *lt__view_of(const lt_tensor *x, int ndim, const int64_t *shape,
                       const int64_t *stride, int64_t offset) {
  return tensor_over(x->storage, x->dtype, ndim, shape, stride, offset);
}

lt_tensor *lt__tensor_new(const char *op, lt_dtype dtype, int ndim, const int64_t *shape) {
  if (!lt__valid_dtype(dtype)) {
    lt__err(LT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
    return NULL;
  }
  int64_t numel;
  if (lt__shape_numel(op, ndim, shape, &numel) != LT_OK) return NULL;
  size_t es = lt_dtype_size(dtype);
  if ((uint64_t)numel > SIZE_MAX / es) {
    lt__err(LT_ERR_OVERFLOW, "%s: %s of %s does not fit in memory", op, LT__S(ndim, shape),
            lt_dtype_name(dtype));
    return NULL;
  }
  lt_storage *s = storage_new(op, (size_t)numel * es);
  if (!s) return NULL;
  int64_t stride[LT_MAX_DIMS];
  lt__contiguous_strides(ndim, shape, stride);
  lt_tensor *t = tensor_over(s, dtype, ndim, shape, stride, 0);
  storage_release(s); /* the tensor holds it now (or it is freed on failure) */
  return t;
}

lt_tensor *lt_empty(lt_dtype dtype, int ndim, const int64_t *shape) {
  return lt__tensor_new("empty", dtype, ndim, shape);
}

lt_tensor *lt_full(lt_dtype dtype, int ndim, const int64_t *shape, double value) {
  lt_tensor *t = lt__tensor_new("full", dtype, ndim, shape);
  if (t && lt_fill_(t, value) != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

lt_tensor *lt_zeros(lt_dtype dtype, int ndim, const int64_t *shape) {
  lt_tensor *t = lt__tensor_new("zeros", dtype, ndim, shape);
  if (t) memset(t->data, 0, (size_t)t->numel * lt_dtype_size(dtype));
  return t;
}

lt_tensor *lt_ones(lt_dtype dtype, int ndim, const int64_t *shape) {
  return lt_full(dtype, ndim, shape, 1.0);
}

lt_tensor *lt_scalar(lt_dtype dtype, double value) { return lt_full(dtype, 0, NULL, value); }

#define LIKE(name, expr)                                    \
  lt_tensor *lt_##name(const lt_tensor *x) {                 \
    if (!x) return lt__err_null(#name, "x"), NULL;           \
    return expr;                                             \
  }
LIKE(empty_like, lt_empty(x->dtype, x->ndim, x->shape))
LIKE(zeros_like, lt_zeros(x->dtype, x->ndim, x->shape))
LIKE(ones_like, lt_ones(x->dtype, x->ndim, x->shape))
#undef LIKE

lt_tensor *lt_full_like(const lt_tensor *x, double value) {
  if (!x) return lt__err_null("full_like", "x"), NULL;
  return lt_full(x->dtype, x->ndim, x->shape, value);
}

lt_tensor *lt_arange(lt_dtype dtype, double start, double end, double step) {
  if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end)) {
    lt__err(LT_ERR_INVALID, "arange: start %g, end %g, step %g: step must be non-zero and all finite",
            start, end, step);
    return NULL;
  }
  double len = ceil((end - start) / step);
  if (len < 0) len = 0;
  if (len > 4e18) {
    lt__err(LT_ERR_OVERFLOW, "arange: start %g, end %g, step %g gives too many elements", start, end, step);
    return NULL;
  }
  int64_t n = (int64_t)len;
  lt_tensor *t = lt__tensor_new("arange", dtype, 1, &n);
  if (!t) return NULL;
  char *p = t->data;
  size_t es = lt_dtype_size(dtype);
  for (int64_t i = 0; i < n; i++) lt__store(p + i * es, dtype, start + (double)i * step);
  return t;
}

lt_tensor *lt_linspace(lt_dtype dtype, double start, double end, int64_t steps) {
  if (steps < 0) {
    lt__err(LT_ERR_INVALID, "linspace: steps %lld must be non-negative", (long long)steps);
    return NULL;
  }
  lt_tensor *t = lt__tensor_new("linspace", dtype, 1, &steps);
  if (!t) return NULL;
  char *p = t->data;
  size_t es = lt_dtype_size(dtype);
  double d = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  /* As PyTorch: the first half counts from start, the second half from end. */
  for (int64_t i = 0; i < steps; i++) {
    double v = i < steps / 2 ? start + d * (double)i : end - d * (double)(steps - 1 - i);
    lt__store(p + i * es, dtype, v);
  }
  return t;
}

lt_tensor *lt_eye(lt_dtype dtype, int64_t n, int64_t m) {
  lt_tensor *t = lt_zeros(dtype, 2, (int64_t[]){n, m});
  if (!t) return NULL;
  size_t es = lt_dtype_size(dtype);
  for (int64_t i = 0; i < n && i < m; i++) lt__store((char *)t->data + (i * m + i) * es, dtype, 1.0);
  return t;
}

lt_tensor *lt_tensor_from_copy(lt_dtype dtype, int ndim, const int64_t *shape, const void *data) {
  lt_tensor *t = lt__tensor_new("tensor_from_copy", dtype, ndim, shape);
  if (!t) return NULL;
  if (t->numel > 0) {
    if (!data) {
      lt_tensor_free(t);
      lt__err(LT_ERR_NULL, "tensor_from_copy: data is NULL for %s", LT__S(ndim, shape));
      return NULL;
    }
    memcpy(t->data, data, (size_t)t->numel * lt_dtype_size(dtype));
  }
  return t;
}

lt_tensor *lt_tensor_from_borrowed(lt_dtype dtype, int ndim, const int64_t *shape, void *data) {
  const char *op = "tensor_from_borrowed";
  if (!lt__valid_dtype(dtype)) return lt__err(LT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype), NULL;
  int64_t numel;
  if (lt__shape_numel(op, ndim, shape, &numel) != LT_OK) return NULL;
  if (!data) return lt__err(LT_ERR_NULL, "%s: data is NULL", op), NULL;
  if ((uintptr_t)data % lt_dtype_size(dtype))
    return lt__err(LT_ERR_INVALID, "%s: data %p is not aligned for %s", op, data, lt_dtype_name(dtype)), NULL;
  lt_storage *s = calloc(1, sizeof *s);
  if (!s) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
#pragma omp atomic
  live_storages++;
  s->base = data;
  s->nbytes = (size_t)numel * lt_dtype_size(dtype);
  s->refcount = 1;
  s->borrowed = true;
  s->id = storage_id_new();
  int64_t stride[LT_MAX_DIMS];
  lt__contiguous_strides(ndim, shape, stride);
  lt_tensor *t = tensor_over(s, dtype, ndim, shape, stride, 0);
  storage_release(s);
  return t;
}

/* ---- inspection -------------------------------------------------------- */

bool lt_is_contiguous(const lt_tensor *x) {
  if (!x) return false;
  int64_t s = 1;
  for (int i = x->ndim - 1; i >= 0; i--) {
    if (x->shape[i] == 1) continue;
    if (x->shape[i] == 0) return true;
    if (x->stride[i] != s) return false;
    s *= x->shape[i];
  }
  return true;
}

static lt_status resolve_index(const char *op, const lt_tensor *x, const int64_t *index, char **out) {
  if (!x) return lt__err_null(op, "x");
  if (x->ndim > 0 && !index) return lt__err(LT_ERR_NULL, "%s: index is NULL for %s", op, LT__D(x));
  int64_t off = 0;
  for (int i = 0; i < x->ndim; i++) {
    int64_t k = index[i] < 0 ? index[i] + x->shape[i] : index[i];
    if (k < 0 || k >= x->shape[i])
      return lt__err(LT_ERR_INDEX, "%s: index %lld is out of range for dim %d of %s", op,
                     (long long)index[i], i, LT__D(x));
    off += k * x->stride[i];
  }
  *out = (char *)x->data + off * (int64_t)lt_dtype_size(x->dtype);
  return LT_OK;
}

lt_status lt_get(const lt_tensor *x, const int64_t *index, double *out) {
  char *p;
  lt_status s = resolve_index("get", x, index, &p);
  if (s != LT_OK) return s;
  if (!out) return lt__err(LT_ERR_NULL, "get: out is NULL");
  *out = lt__load(p, x->dtype);
  return LT_OK;
}

lt_status lt_set(lt_tensor *x, const int64_t *index, double value) {
  char *p;
  lt_status s = resolve_index("set", x, index, &p);
  if (s != LT_OK) return s;
  if ((s = lt__check_inplace("set", x)) != LT_OK) return s;
  lt__store(p, x->dtype, value);
  lt__bump_version(x);
  return LT_OK;
}

lt_status lt_item(const lt_tensor *x, double *out) {
  if (!x) return lt__err_null("item", "x");
  if (!out) return lt__err(LT_ERR_NULL, "item: out is NULL");
  if (x->numel != 1)
    return lt__err(LT_ERR_SHAPE, "item: x is %s: only one-element tensors have an item", LT__D(x));
  *out = lt__load(x->data, x->dtype);
  return LT_OK;
}
