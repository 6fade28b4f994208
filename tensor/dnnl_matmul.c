/*
 * tensor/dnnl_matmul.c: the bf16 GEMM engine on oneDNN's matmul primitive
 * (tensor/dnnl_internal.h).
 *
 * What it is: bf16 x bf16 -> f32 products (docs/mixed-precision.md). Each
 * operand is described by its own strides (dnnl_memory_desc_init_by_strides),
 * so a transposed view is never copied. Creating a primitive costs far more
 * than a small product, so primitives are cached by geometry: (m, n, k, the
 * six strides, alpha, beta); a training step uses a few dozen geometries, all
 * cached after the first step. Each primitive is made with a user
 * scratchpad, and each thread executes on its own stream with its own
 * scratchpad buffer (tensor/dnnl.c), so one cached primitive serves several
 * threads at once (the batched products of attention run one per thread
 * inside an OpenMP region, where oneDNN's OpenMP runtime stays on the
 * calling thread).
 *
 * What it is not: an f32 GEMM engine (BLIS does f32 and f64 products), the
 * choice of engine (tensor/gemm.c sends bf16 and autocast products here),
 * nor the convolutions (tensor/dnnl_conv.c). oneDNN 2.6's C API has no bf16
 * GEMM function (dnnl_sgemm and dnnl_gemm_u8s8s32 only; gemm_bf16bf16f32 is
 * internal C++), so the matmul primitive is the one public way in.
 *
 * Hardware: oneDNN picks its kernels by CPUID at run time, so this never
 * executes an instruction the CPU lacks. With AVX512_BF16 (or AMX) products
 * are native; on other AVX-512 CPUs oneDNN emulates them; where oneDNN has no
 * bf16 matmul at all (no AVX-512) lt__dnnl_bf16_available is false and the
 * dispatch widens to f32 and uses BLIS.
 */
#include "tensor/dnnl_internal.h"

#include "tensor/dnnl_common_internal.h"
#include "tensor/error_internal.h"
#include "tensor/threads_internal.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the primitive cache ------------------------------------------------- */

typedef struct mm_key {
  int64_t m, n, k, rsa, csa, rsb, csb, rsc, csc;
  float alpha, beta;
  int threads; /* oneDNN fixes a primitive's thread count when it is made */
  bool bias;   /* an f32 [n] bias added to every row */
} mm_key;

typedef struct mm_entry {
  mm_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[4]; /* a, b, c, bias */
  size_t scratch;           /* scratchpad bytes */
} mm_entry;

/* Entries are never removed while the process runs (a thread may be
 * executing any of them): past CACHE_MAX geometries, a product makes its
 * primitive, runs it and destroys it. */
#define CACHE_MAX 512
static mm_entry cache[CACHE_MAX];
static int ncache = 0;
static pthread_rwlock_t cache_lock = PTHREAD_RWLOCK_INITIALIZER;

int lt__dnnl_cached_primitives(void) {
  pthread_rwlock_rdlock(&cache_lock);
  int n = ncache;
  pthread_rwlock_unlock(&cache_lock);
  return n;
}

static bool key_eq(const mm_key *a, const mm_key *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->rsa == b->rsa && a->csa == b->csa && a->rsb == b->rsb &&
         a->csb == b->csb && a->rsc == b->rsc && a->csc == b->csc && a->alpha == b->alpha && a->beta == b->beta &&
         a->threads == b->threads && a->bias == b->bias;
}

static const mm_entry *cache_find(const mm_key *k) {
  const mm_entry *e = NULL;
  pthread_rwlock_rdlock(&cache_lock);
  for (int i = ncache - 1; i >= 0 && !e; i--)
    if (key_eq(&cache[i].key, k)) e = &cache[i];
  pthread_rwlock_unlock(&cache_lock);
  return e;
}

/* Builds the primitive of k into *e. Returns the oneDNN status. */
static dnnl_status_t build(const mm_key *k, mm_entry *e) {
  memset(e, 0, sizeof *e);
  e->key = *k;
  dnnl_status_t s;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_matmul_desc_t desc;
  if ((s = dnnl_memory_desc_init_by_strides(&e->md[0], 2, (dnnl_dims_t){k->m, k->k}, dnnl_bf16,
                                            (dnnl_dims_t){k->rsa, k->csa})) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_strides(&e->md[1], 2, (dnnl_dims_t){k->k, k->n}, dnnl_bf16,
                                            (dnnl_dims_t){k->rsb, k->csb})) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_strides(&e->md[2], 2, (dnnl_dims_t){k->m, k->n}, dnnl_f32,
                                            (dnnl_dims_t){k->rsc, k->csc})) != dnnl_success ||
      (k->bias && (s = dnnl_memory_desc_init_by_strides(&e->md[3], 2, (dnnl_dims_t){1, k->n}, dnnl_f32,
                                                        (dnnl_dims_t){k->n, 1})) != dnnl_success) ||
      (s = dnnl_matmul_desc_init(&desc, &e->md[0], &e->md[1], k->bias ? &e->md[3] : NULL, &e->md[2])) != dnnl_success ||
      (s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
      (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success)
    goto done;
  if (k->alpha != 1.0f && (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha)) != dnnl_success)
    goto done;
  if (k->beta != 0.0f) {
    if ((s = dnnl_post_ops_create(&po)) != dnnl_success || (s = dnnl_post_ops_append_sum(po, k->beta)) != dnnl_success ||
        (s = dnnl_primitive_attr_set_post_ops(attr, po)) != dnnl_success)
      goto done;
  }
  if ((s = dnnl_primitive_desc_create(&pd, &desc, attr, lt__dnnl_engine(), NULL)) != dnnl_success) goto done;
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
  s = dnnl_primitive_create(&e->prim, pd);
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}


/* ---- the product ---------------------------------------------------------- */

static lt_status fail(dnnl_status_t s, const char *what, int64_t m, int64_t n, int64_t k) {
  return lt__err(s == dnnl_out_of_memory ? LT_ERR_NOMEM : LT_ERR_BACKEND,
                 "matmul: bf16 product [%lld,%lld] x [%lld,%lld]: oneDNN %s failed (status %d%s)", (long long)m,
                 (long long)k, (long long)k, (long long)n, what, (int)s,
                 s == dnnl_unimplemented ? ": no bf16 matmul for this CPU" : "");
}

/* Per thread, the memory objects of each cached primitive's arguments (src,
 * weights, dst, scratchpad, bias), made on the thread's first run of the
 * primitive and pointed at the caller's buffers by
 * dnnl_memory_set_data_handle afterwards: a step runs thousands of small
 * products (attention's per-head ones), so making and destroying four or
 * five memory objects around each is a measurable share of it (figures: docs/mixed-precision.md, "Figures behind the code's rules").
 * Kept for the thread's life, like its stream. */
static _Thread_local dnnl_memory_t tl_mem[CACHE_MAX][5];

/* A thread's memory objects are released when the thread exits
 * (lt__at_thread_exit, registered by the first one made; registering again
 * is a no-op). */
static void tl_release(void) {
  for (int i = 0; i < CACHE_MAX; i++)
    for (int j = 0; j < 5; j++)
      if (tl_mem[i][j]) {
        dnnl_memory_destroy(tl_mem[i][j]);
        tl_mem[i][j] = NULL;
      }
}

static lt_status run(const mm_entry *e, const void *a, const void *b, void *c, const float *bias) {
  const mm_key *k = &e->key;
  void *scr = e->scratch ? lt__dnnl_scratch(e->scratch) : NULL;
  if (e->scratch && !scr)
    return lt__err(LT_ERR_NOMEM, "matmul: bf16 product: cannot allocate %zu bytes of scratchpad", e->scratch);
  dnnl_memory_desc_t smd;
  int arg[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}, n = 3;
  const dnnl_memory_desc_t *md[5] = {&e->md[0], &e->md[1], &e->md[2]};
  void *ptr[5] = {(void *)a, (void *)b, c};
  if (e->scratch) {
    dnnl_memory_desc_init_by_tag(&smd, 1, (dnnl_dims_t){(dnnl_dim_t)e->scratch}, dnnl_u8, dnnl_a);
    arg[n] = DNNL_ARG_SCRATCHPAD, md[n] = &smd, ptr[n++] = scr;
  }
  if (k->bias) arg[n] = DNNL_ARG_BIAS, md[n] = &e->md[3], ptr[n++] = (void *)bias;
  dnnl_status_t s;
  if (e >= cache && e < cache + CACHE_MAX) { /* a cached primitive: this thread's memory objects */
    dnnl_memory_t *mem = tl_mem[e - cache];
    dnnl_exec_arg_t args[5];
    s = lt__dnnl_thread_stream();
    if (s == dnnl_success && !mem[0]) (void)lt__at_thread_exit(tl_release);
    for (int i = 0; i < n && s == dnnl_success; i++) {
      s = mem[i] ? dnnl_memory_set_data_handle(mem[i], ptr[i])
                 : dnnl_memory_create(&mem[i], md[i], lt__dnnl_engine(), ptr[i]);
      args[i] = (dnnl_exec_arg_t){arg[i], mem[i]};
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, lt__dnnl_stream(), n, args);
    if (s == dnnl_success) s = dnnl_stream_wait(lt__dnnl_stream());
  } else {
    s = lt__dnnl_exec(e->prim, n, arg, md, ptr);
  }
  return s == dnnl_success ? LT_OK : fail(s, "execute", k->m, k->n, k->k);
}

/* Products of fewer multiply-adds than this run on one thread: oneDNN opens
 * an OpenMP region for every product it may split, and on a busy machine a
 * region of two threads waits for a descheduled one, a hundred times the
 * product's own time (figures: docs/mixed-precision.md, "Figures behind the code's rules"). BLIS keeps such products on one thread
 * by itself. */
#define PAR_MIN_MACS ((int64_t)1 << 21)

static lt_status gemm(const mm_key *key, const void *a, const void *b, void *c, const float *bias);

/* ---- dense operands -------------------------------------------------------
 *
 * oneDNN 2.6 runs a product on its brgemm kernels (AMX or AVX512_BF16, "brg:"
 * in ONEDNN_VERBOSE) only when every matrix is dense: its leading stride is
 * its row length (row-major) or its column length (column-major). Any other
 * strides (the per-head slices of attention: q, k, v and the output are
 * [T, HS] views with row stride C or 3C) fall to its generic "gemm:jit"
 * driver, one to two orders of magnitude slower for the same shape (the
 * figures: docs/mixed-precision.md, "The bf16 GEMM engine"). So a strided matrix is copied
 * dense first (C: computed into a dense buffer and copied back, after copying
 * it in when beta != 0); the copies are a few percent of a product's time. */

static bool dense(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return (cs == 1 && (rs == cols || rows == 1)) || (rs == 1 && (cs == rows || cols == 1));
}

/* rows x cols of es-byte elements from src (strides rs, cs) to dst, dense
 * row-major (dst_rs = cols) or back (to_dense false: dst strided, src dense). */
static void copy_mat(int64_t rows, int64_t cols, size_t es, const void *src, int64_t rs, int64_t cs, void *dst,
                     bool to_dense) {
  if (cs == 1) { /* rows of contiguous elements (attention's per-head slices): one memcpy a row */
    const size_t row = (size_t)cols * es;
    for (int64_t i = 0; i < rows; i++) {
      if (to_dense) memcpy((char *)dst + (size_t)(i * cols) * es, (const char *)src + (size_t)(i * rs) * es, row);
      else memcpy((char *)dst + (size_t)(i * rs) * es, (const char *)src + (size_t)(i * cols) * es, row);
    }
    return;
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      const int64_t strided = i * rs + j * cs, d = i * cols + j;
      if (to_dense) memcpy((char *)dst + d * es, (const char *)src + strided * es, es);
      else memcpy((char *)dst + strided * es, (const char *)src + d * es, es);
    }
}

/* Matrix `name` (rows x cols of es bytes at *p, strides *rs, *cs) made dense
 * when it is not: *p then points to per-thread buffer i, row-major, holding
 * a copy when copy_in (an output with beta 0 needs none). */
static lt_status to_dense(int i, int64_t rows, int64_t cols, size_t es, const void **p, int64_t *rs, int64_t *cs,
                          bool copy_in, const char *name) {
  if (dense(rows, cols, *rs, *cs)) return LT_OK;
  void *d = lt__dnnl_buf(i, (size_t)(rows * cols) * es);
  if (!d)
    return lt__err(LT_ERR_NOMEM, "matmul: bf16 product: cannot allocate a dense copy of %s [%lld,%lld]", name,
                   (long long)rows, (long long)cols);
  if (copy_in) copy_mat(rows, cols, es, *p, *rs, *cs, d, true);
  *p = d, *rs = cols, *cs = 1;
  return LT_OK;
}

lt_status lt__dnnl_gemm_bf16(bool one_thread, int64_t m, int64_t n, int64_t k, float alpha,
                             const uint16_t *a, int64_t rsa, int64_t csa, const uint16_t *b, int64_t rsb,
                             int64_t csb, float beta, float *c, int64_t rsc, int64_t csc, const float *bias) {
  if (m == 0 || n == 0) return LT_OK;
  if (k == 0) { /* an empty sum: C = beta C (+ bias) */
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        const float v = beta == 0.0f ? 0.0f : beta * c[i * rsc + j * csc];
        c[i * rsc + j * csc] = bias ? v + bias[j] : v;
      }
    return LT_OK;
  }
  if (bias && alpha != 1.0f) /* oneDNN scales after adding the bias: not what a caller would mean */
    return lt__err(LT_ERR_INVALID, "matmul: bf16 product with a bias: alpha %g must be 1", (double)alpha);
  const dnnl_status_t es = lt__dnnl_engine_status();
  if (es != dnnl_success) return fail(es, "engine_create", m, n, k);
  /* The thread count oneDNN sees (omp_get_max_threads, this thread's
   * setting) while the primitive is made and run; restored after. */
  const int nt = omp_get_max_threads();
  const int use = one_thread || omp_in_parallel() || m * n * k < PAR_MIN_MACS ? 1 : nt;
  /* Strided matrices dense (see "dense operands" above). */
  float *c_out = c;
  const int64_t rsc_out = rsc, csc_out = csc;
  const void *pa = a, *pb = b, *pc = c;
  lt_status st;
  if ((st = to_dense(0, m, k, 2, &pa, &rsa, &csa, true, "a")) != LT_OK ||
      (st = to_dense(1, k, n, 2, &pb, &rsb, &csb, true, "b")) != LT_OK ||
      (st = to_dense(2, m, n, sizeof(float), &pc, &rsc, &csc, beta != 0.0f, "c")) != LT_OK)
    return st;
  a = pa, b = pb, c = (float *)pc;
  const mm_key key = {m, n, k, rsa, csa, rsb, csb, rsc, csc, alpha, beta, use, bias != NULL};
  if (use != nt) omp_set_num_threads(use);
  st = gemm(&key, a, b, c, bias);
  if (use != nt) omp_set_num_threads(nt);
  if (st == LT_OK && c != c_out) copy_mat(m, n, sizeof(float), c, rsc_out, csc_out, c_out, false);
  return st;
}

static lt_status gemm(const mm_key *kp, const void *a, const void *b, void *c, const float *bias) {
  const mm_key key = *kp;
  const int64_t m = key.m, n = key.n, k = key.k;
  const mm_entry *e = cache_find(&key);
  if (e) return run(e, a, b, c, bias);
  mm_entry fresh;
  dnnl_status_t s = build(&key, &fresh);
  if (s != dnnl_success) {
    if (fresh.prim) dnnl_primitive_destroy(fresh.prim);
    return fail(s, "primitive creation", m, n, k);
  }
  pthread_rwlock_wrlock(&cache_lock);
  for (int i = 0; i < ncache && !e; i++) /* another thread may have added it meanwhile */
    if (key_eq(&cache[i].key, &key)) e = &cache[i];
  if (!e && ncache < CACHE_MAX) {
    cache[ncache] = fresh;
    e = &cache[ncache++];
    fresh.prim = NULL;
  }
  pthread_rwlock_unlock(&cache_lock);
  lt_status st = run(e ? e : &fresh, a, b, c, bias);
  if (fresh.prim) dnnl_primitive_destroy(fresh.prim);
  return st;
}

