/*
 * tensor/dnnl.c: the bf16 GEMM engine, and f32 conv2d's direct kernels (at
 * the end of the file), on oneDNN (Debian's libdnnl-dev, oneDNN 2.6); the
 * only file of the library that includes dnnl.h.
 *
 * What it is: bf16 x bf16 -> f32 products through oneDNN's matmul primitive
 * (docs/mixed-precision.md). Each operand is described by its own strides
 * (dnnl_memory_desc_init_by_strides), so a transposed view is never copied.
 * Creating a primitive costs far more than a small product, so primitives
 * are cached by geometry: (m, n, k, the six strides, alpha, beta); a training
 * step uses a few dozen geometries, all cached after the first step. Each
 * primitive is made with a user scratchpad, and each thread executes on its
 * own stream with its own scratchpad buffer, so one cached primitive serves
 * several threads at once (the batched products of attention run one per
 * thread inside an OpenMP region, where oneDNN's OpenMP runtime stays on the
 * calling thread).
 *
 * The convolutions run in f32, or under autocast in bf16 (lt__dnnl_conv_bf16:
 * bf16 inputs, f32 outputs and accumulation), on the same chunk scheme.
 *
 * What it is not: an f32 GEMM engine (BLIS does f32 and f64 products) nor a
 * general oneDNN binding. oneDNN 2.6's C API has no bf16 GEMM function (dnnl_sgemm and
 * dnnl_gemm_u8s8s32 only; gemm_bf16bf16f32 is internal C++), so the matmul
 * primitive is the one public way in.
 *
 * Hardware: oneDNN picks its kernels by CPUID at run time, so this never
 * executes an instruction the CPU lacks. With AVX512_BF16 (or AMX) products
 * are native; on other AVX-512 CPUs oneDNN emulates them; where oneDNN has no
 * bf16 matmul at all (no AVX-512) lt__dnnl_bf16_native is false, creating the
 * primitive fails, and tensor/matmul.c widens to f32 and uses BLIS.
 */
#include "tensor/dnnl_internal.h"

#include "tensor/error_internal.h"
#include "tensor/threads_internal.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine, once ---------------------------------------------------- */

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_status_t engine_status = dnnl_runtime_error;

static void engine_init(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

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
  if ((s = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL)) != dnnl_success) goto done;
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
  s = dnnl_primitive_create(&e->prim, pd);
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

/* ---- per-thread stream and scratchpad ------------------------------------ */

static _Thread_local dnnl_stream_t tl_stream;
static void tl_arm(void);

/* This thread's stream, made on first use. */
static dnnl_status_t thread_stream(void) {
  if (tl_stream) return dnnl_success;
  tl_arm();
  return dnnl_stream_create(&tl_stream, engine, dnnl_stream_default_flags);
}

/* Executes primitive p with n args on this thread's stream and waits. Memory
 * objects are made around the user's pointers for the call. */
static dnnl_status_t exec_args(dnnl_primitive_t p, int n, const int *arg, const dnnl_memory_desc_t *const *md,
                               void *const *ptr) {
  dnnl_memory_t mem[6] = {NULL};
  dnnl_exec_arg_t args[6];
  dnnl_status_t s = thread_stream();
  for (int i = 0; i < n && s == dnnl_success; i++) {
    s = dnnl_memory_create(&mem[i], md[i], engine, ptr[i]);
    args[i] = (dnnl_exec_arg_t){arg[i], mem[i]};
  }
  if (s == dnnl_success) s = dnnl_primitive_execute(p, tl_stream, n, args);
  if (s == dnnl_success) s = dnnl_stream_wait(tl_stream);
  for (int i = 0; i < n; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  return s;
}

/* Per-thread buffers, grown and never shrunk: 0-2 the dense copies of a
 * product's a, b, c (see "dense operands"); 3-7 the convolution's blocked
 * copies; 8 the primitives' scratchpad. */
static _Thread_local void *tl_dense[9];
static _Thread_local size_t tl_dense_cap[9];

static void *dense_buf(int i, size_t bytes) {
  if (bytes <= tl_dense_cap[i]) return tl_dense[i];
  tl_arm();
  free(tl_dense[i]);
  const size_t sz = (bytes + 4095) & ~(size_t)4095;
  tl_dense[i] = aligned_alloc(64, sz);
  tl_dense_cap[i] = tl_dense[i] ? sz : 0;
  return tl_dense[i];
}

static void *scratch_for(size_t n) { return dense_buf(8, n); }

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
 * dnnl_memory_set_data_handle afterwards. Making and destroying four or five
 * memory objects around each product was 1.5% of a GPT-small bf16 step (it
 * runs about 1,500 products, most of them attention's per-head ones). Kept
 * for the thread's life, like its stream. */
static _Thread_local dnnl_memory_t tl_mem[CACHE_MAX][5];

/* A thread's stream, dense buffers and memory objects are released when the
 * thread exits (lt__at_thread_exit, registered by each allocation of any of
 * them: tl_arm; registering again is a no-op). */
static void tl_release(void) {
  for (int i = 0; i < CACHE_MAX; i++)
    for (int j = 0; j < 5; j++)
      if (tl_mem[i][j]) {
        dnnl_memory_destroy(tl_mem[i][j]);
        tl_mem[i][j] = NULL;
      }
  for (int i = 0; i < 9; i++) {
    free(tl_dense[i]);
    tl_dense[i] = NULL;
    tl_dense_cap[i] = 0;
  }
  if (tl_stream) dnnl_stream_destroy(tl_stream);
  tl_stream = NULL;
}

static void tl_arm(void) { (void)lt__at_thread_exit(tl_release); }

static lt_status run(const mm_entry *e, const void *a, const void *b, void *c, const float *bias) {
  const mm_key *k = &e->key;
  void *scr = e->scratch ? scratch_for(e->scratch) : NULL;
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
    s = thread_stream();
    for (int i = 0; i < n && s == dnnl_success; i++) {
      s = mem[i] ? dnnl_memory_set_data_handle(mem[i], ptr[i]) : dnnl_memory_create(&mem[i], md[i], engine, ptr[i]);
      args[i] = (dnnl_exec_arg_t){arg[i], mem[i]};
    }
    if (s == dnnl_success) s = dnnl_primitive_execute(e->prim, tl_stream, n, args);
    if (s == dnnl_success) s = dnnl_stream_wait(tl_stream);
  } else {
    s = exec_args(e->prim, n, arg, md, ptr);
  }
  return s == dnnl_success ? LT_OK : fail(s, "execute", k->m, k->n, k->k);
}

/* Products of fewer multiply-adds than this run on one thread: oneDNN opens
 * an OpenMP region for every product it may split, and on a busy machine a
 * region of two threads waits for a descheduled one (measured: a 96x64x32
 * product under autocast took 11.6 ms on 2 threads against 0.13 ms on 1 with
 * the default OMP_WAIT_POLICY, load average 15 on 2 cores). BLIS keeps such
 * products on one thread by itself. */
#define PAR_MIN_MACS ((int64_t)1 << 21)

static lt_status gemm(const mm_key *key, const void *a, const void *b, void *c, const float *bias);

/* ---- dense operands -------------------------------------------------------
 *
 * oneDNN 2.6 runs a product on its brgemm kernels (AMX or AVX512_BF16, "brg:"
 * in ONEDNN_VERBOSE) only when every matrix is dense: its leading stride is
 * its row length (row-major) or its column length (column-major). Any other
 * strides (the per-head slices of attention: q, k, v and the output are
 * [T, HS] views with row stride C or 3C) fall to its generic "gemm:jit"
 * driver: measured in a GPT-small bf16 step, 1,024 such [128,128]x[128,64]
 * products took 0.14-0.19 ms each against 0.004-0.01 ms for the same shape
 * on brg, 146 of the step's 330 ms of products. So a strided matrix is copied
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
  void *d = dense_buf(i, (size_t)(rows * cols) * es);
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
  pthread_once(&engine_once, engine_init);
  if (engine_status != dnnl_success) return fail(engine_status, "engine_create", m, n, k);
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

/* ---- what this CPU gets --------------------------------------------------- */

static const char *path_str = "unknown";
static bool native = false, available = false;
static pthread_once_t path_once = PTHREAD_ONCE_INIT;

static void path_init(void) {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const unsigned u = (unsigned)isa;
  available = (u & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core;
  if ((u & (unsigned)dnnl_cpu_isa_avx512_core_amx) == (unsigned)dnnl_cpu_isa_avx512_core_amx) {
    native = true;
    path_str = "native (oneDNN, AMX)";
  } else if ((u & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
    native = true;
    path_str = "native (oneDNN, AVX512_BF16)";
  } else if ((u & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core) {
    path_str = "fallback (oneDNN emulates bf16 on AVX-512 without AVX512_BF16)";
  } else {
    path_str = "fallback (no oneDNN bf16 matmul on this CPU: operands widened to f32, BLIS)";
  }
}

const char *lt__dnnl_bf16_path(void) {
  pthread_once(&path_once, path_init);
  return path_str;
}
bool lt__dnnl_bf16_native(void) {
  pthread_once(&path_once, path_init);
  return native;
}
bool lt__dnnl_bf16_available(void) {
  pthread_once(&path_once, path_init);
  return available;
}

/* ==== f32 convolution ========================================================
 *
 * conv2d's three passes on oneDNN's direct JIT kernels (docs/vision.md). The
 * kernels want blocked layouts (nChw16c, OIhw16i16o, ...; oneDNN picks them
 * from format "any"), so each pass reorders its NCHW operands in and its
 * result out, chunk by chunk, in per-thread buffers. Where oneDNN would pick
 * its im2col + GEMM ("gemm:jit") or reference kernel for a geometry, or a
 * padding it cannot express, the pass is not taken and nn/conv.c runs its own
 * im2col path.
 *
 * Determinism: the batch is cut into chunks of nb images from the shapes only
 * (chunk_plan), and each chunk runs whole on one thread on a primitive made
 * for one thread. Forward and input gradient write disjoint images; the
 * weight gradient is computed per chunk and the chunks summed in order. So
 * the bits do not depend on the thread count (oneDNN 2.6 has no
 * deterministic mode: its own multi-threaded weight gradient reduces per
 * thread). */

typedef struct cv_key {
  lt__dnnl_conv g; /* g.N: the images of one chunk */
  int32_t pass, has_bias;
  int32_t bf16, unused; /* bf16: the autocast pass (lt__dnnl_conv_bf16) */
} cv_key;

typedef struct cv_entry {
  cv_key key;
  bool ok; /* false: not taken for this geometry (remembered, so tried once) */
  dnnl_primitive_t conv;
  /* img: x / dx; out: y / dy; wei: w / dw. md_*: the primitive's layouts,
   * pl_*: plain NCHW / OIHW; r_*: the reorder between them (NULL when equal),
   * in the pass's direction (inputs plain -> blocked, the output back). In a
   * bf16 pass the inputs' reorders also round f32 to bf16 (pl_* f32, md_*
   * bf16), except the weights of FWD and BWD_X, which come as bf16 already
   * (the autocast operand cache); outputs stay f32 both sides. */
  dnnl_memory_desc_t md_img, md_out, md_wei, pl_img, pl_out, pl_wei, md_bias;
  dnnl_primitive_t r_img, r_out, r_wei;
  size_t scratch;
} cv_entry;

#define CV_MAX 128
static cv_entry cv_cache[CV_MAX];
static int ncv = 0;

static dnnl_status_t reorder_prim(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                  dnnl_primitive_t *r) {
  *r = NULL;
  if (dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(r, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return s;
}

/* Builds entry e for key k (made for one thread: the caller has set
 * omp_set_num_threads(1)). e->ok false when not taken. */
static dnnl_status_t cv_build(const cv_key *k, cv_entry *e) {
  memset(e, 0, sizeof *e);
  e->key = *k;
  const lt__dnnl_conv *g = &k->g;
  const int64_t prh = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->H - g->ph;
  const int64_t prw = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->W - g->pw;
  if (prh < 0 || prw < 0) return dnnl_success; /* a right padding oneDNN cannot express: not taken */
  const dnnl_dims_t sd = {g->N, g->C, g->H, g->W}, dd = {g->N, g->O, g->OH, g->OW}, bd = {g->O};
  const dnnl_dims_t st = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pl = {g->ph, g->pw}, pr = {prh, prw};
  const int wn = g->G > 1 ? 5 : 4;
  dnnl_dims_t wd = {g->O, g->C, g->kh, g->kw};
  if (g->G > 1) wd[0] = g->G, wd[1] = g->O / g->G, wd[2] = g->C / g->G, wd[3] = g->kh, wd[4] = g->kw;
  /* Data types: all f32, or (bf16) the primitive's inputs bf16 and its
   * output f32 (dst, diff_src, diff_weights: accumulated in f32). */
  const bool b16 = k->bf16 != 0, fw0 = k->pass == LT__DNNL_CONV_FWD, bx0 = k->pass == LT__DNNL_CONV_BWD_X,
             bw0 = k->pass == LT__DNNL_CONV_BWD_W;
  const dnnl_data_type_t t_img = b16 && !bx0 ? dnnl_bf16 : dnnl_f32, t_out = b16 && !fw0 ? dnnl_bf16 : dnnl_f32,
                         t_wei = b16 && !bw0 ? dnnl_bf16 : dnnl_f32, t_h = b16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a_img, a_out, a_wei, h_img, h_out, h_wei; /* h_*: the forward hint of a backward pass */
  dnnl_status_t s;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  dnnl_convolution_desc_t fd, bd_;
  if ((s = dnnl_memory_desc_init_by_tag(&e->pl_img, 4, sd, dnnl_f32, dnnl_nchw)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&e->pl_out, 4, dd, dnnl_f32, dnnl_nchw)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&e->pl_wei, wn, wd, t_wei, wn == 5 ? dnnl_goihw : dnnl_oihw)) !=
          dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&e->md_bias, 1, bd, dnnl_f32, dnnl_x)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&a_img, 4, sd, t_img, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&a_out, 4, dd, t_out, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&a_wei, wn, wd, t_wei, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&h_img, 4, sd, t_h, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&h_out, 4, dd, t_h, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_memory_desc_init_by_tag(&h_wei, wn, wd, t_h, dnnl_format_tag_any)) != dnnl_success ||
      (s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
      (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) != dnnl_success)
    goto done;
  const bool fwd_bias = k->pass == LT__DNNL_CONV_FWD && k->has_bias; /* BWD_W: has_bias is the bias gradient */
  if ((s = dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                      fw0 ? &a_img : &h_img, fw0 ? &a_wei : &h_wei,
                                                      fwd_bias ? &e->md_bias : NULL, fw0 ? &a_out : &h_out, st, dil,
                                                      pl, pr)) != dnnl_success ||
      (s = dnnl_primitive_desc_create(&fpd, &fd, k->pass == LT__DNNL_CONV_FWD ? attr : NULL, engine, NULL)) !=
          dnnl_success)
    goto done;
  if (k->pass == LT__DNNL_CONV_BWD_X) {
    if ((s = dnnl_dilated_convolution_backward_data_desc_init(&bd_, dnnl_convolution_direct, &a_img, &a_wei, &a_out,
                                                              st, dil, pl, pr)) != dnnl_success ||
        (s = dnnl_primitive_desc_create(&pd, &bd_, attr, engine, fpd)) != dnnl_success)
      goto done;
  } else if (k->pass == LT__DNNL_CONV_BWD_W) {
    if ((s = dnnl_dilated_convolution_backward_weights_desc_init(&bd_, dnnl_convolution_direct, &a_img, &a_wei,
                                                                 k->has_bias ? &e->md_bias : NULL, &a_out, st, dil,
                                                                 pl, pr)) != dnnl_success ||
        (s = dnnl_primitive_desc_create(&pd, &bd_, attr, engine, fpd)) != dnnl_success)
      goto done;
  } else {
    pd = fpd, fpd = NULL;
  }
  const char *impl = NULL;
  /* im2col + GEMM or reference: nn/conv.c's own path is as good. bf16 also
   * takes oneDNN's brgemm convolutions ("brg", AMX). */
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
      (strncmp(impl, "jit", 3) != 0 && !(b16 && strncmp(impl, "brg", 3) == 0)))
    goto done;
  const bool fw = k->pass == LT__DNNL_CONV_FWD, bx = k->pass == LT__DNNL_CONV_BWD_X;
  e->md_img = *dnnl_primitive_desc_query_md(pd, bx ? dnnl_query_diff_src_md : dnnl_query_src_md, 0);
  e->md_out = *dnnl_primitive_desc_query_md(pd, fw ? dnnl_query_dst_md : dnnl_query_diff_dst_md, 0);
  e->md_wei = *dnnl_primitive_desc_query_md(pd, k->pass == LT__DNNL_CONV_BWD_W ? dnnl_query_diff_weights_md
                                                                               : dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  e->scratch = smd ? dnnl_memory_desc_get_size(smd) : 0;
  if ((s = dnnl_primitive_create(&e->conv, pd)) != dnnl_success ||
      (s = bx ? reorder_prim(&e->md_img, &e->pl_img, &e->r_img) : reorder_prim(&e->pl_img, &e->md_img, &e->r_img)) !=
          dnnl_success ||
      (s = fw ? reorder_prim(&e->md_out, &e->pl_out, &e->r_out) : reorder_prim(&e->pl_out, &e->md_out, &e->r_out)) !=
          dnnl_success ||
      (s = k->pass == LT__DNNL_CONV_BWD_W ? reorder_prim(&e->md_wei, &e->pl_wei, &e->r_wei)
                                          : reorder_prim(&e->pl_wei, &e->md_wei, &e->r_wei)) != dnnl_success)
    goto done;
  e->ok = true;
done:
  if (s != dnnl_success || !e->ok) { /* unimplemented is "not taken", not an error */
    if (s == dnnl_unimplemented) s = dnnl_success;
    dnnl_primitive_t *p[4] = {&e->conv, &e->r_img, &e->r_out, &e->r_wei};
    for (int i = 0; i < 4; i++)
      if (*p[i]) dnnl_primitive_destroy(*p[i]), *p[i] = NULL;
    e->ok = false;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

/* The cached entry of k, built on first use (on one thread). NULL with an
 * error set when building failed for another reason than "unimplemented". */
static const cv_entry *cv_get(const cv_key *k) {
  const cv_entry *e = NULL;
  pthread_rwlock_rdlock(&cache_lock);
  for (int i = ncv - 1; i >= 0 && !e; i--)
    if (memcmp(&cv_cache[i].key, k, sizeof *k) == 0) e = &cv_cache[i];
  pthread_rwlock_unlock(&cache_lock);
  if (e) return e;
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  cv_entry fresh;
  const dnnl_status_t s = cv_build(k, &fresh);
  omp_set_num_threads(nt);
  if (s != dnnl_success) {
    lt__err(s == dnnl_out_of_memory ? LT_ERR_NOMEM : LT_ERR_BACKEND,
            "conv2d: x [%lld,%lld,%lld,%lld], weight [%lld,%lld,%lld,%lld]: oneDNN primitive creation failed "
            "(status %d)",
            (long long)k->g.N, (long long)k->g.C, (long long)k->g.H, (long long)k->g.W, (long long)k->g.O,
            (long long)(k->g.C / k->g.G), (long long)k->g.kh, (long long)k->g.kw, (int)s);
    return NULL;
  }
  pthread_rwlock_wrlock(&cache_lock);
  for (int i = 0; i < ncv && !e; i++)
    if (memcmp(&cv_cache[i].key, k, sizeof *k) == 0) e = &cv_cache[i];
  if (!e && ncv < CV_MAX) {
    cv_cache[ncv] = fresh;
    e = &cv_cache[ncv++];
  } else {
    dnnl_primitive_t p[4] = {fresh.conv, fresh.r_img, fresh.r_out, fresh.r_wei};
    for (int i = 0; i < 4; i++)
      if (p[i]) dnnl_primitive_destroy(p[i]);
  }
  pthread_rwlock_unlock(&cache_lock);
  if (!e) { /* the cache is full: such geometries take nn/conv.c's path */
    static const cv_entry none = {.ok = false};
    e = &none;
  }
  return e;
}

static dnnl_status_t reorder(dnnl_primitive_t r, const dnnl_memory_desc_t *from_md, const void *from,
                             const dnnl_memory_desc_t *to_md, void *to) {
  return exec_args(r, 2, (const int[]){DNNL_ARG_FROM, DNNL_ARG_TO}, (const dnnl_memory_desc_t *const[]){from_md, to_md},
                   (void *const[]){(void *)from, to});
}

/* `src` (plain md pl) as the primitive's layout md: itself, or its reorder
 * into this thread's buffer slot. NULL when out of memory. */
static void *as_blocked(dnnl_primitive_t r, const dnnl_memory_desc_t *pl, const dnnl_memory_desc_t *md,
                        const void *src, int slot, dnnl_status_t *s) {
  if (!r) return (void *)src;
  void *b = dense_buf(slot, dnnl_memory_desc_get_size(md));
  if (!b) return *s = dnnl_out_of_memory, NULL;
  *s = reorder(r, pl, src, md, b);
  return b;
}

/* One chunk of a pass: img, out, wei are the chunk's plain arrays (inputs or
 * the output), wei_blk the weights already in the primitive's layout (FWD,
 * BWD_X); bias: FWD's bias, or BWD_W's bias gradient (out). */
static dnnl_status_t cv_chunk(const cv_entry *e, const float *img_in, float *img_out, const float *out_in,
                              float *out_out, const void *wei_blk, float *wei_out, const float *bias) {
  dnnl_status_t s = dnnl_success;
  void *scr = e->scratch ? scratch_for(e->scratch) : NULL;
  if (e->scratch && !scr) return dnnl_out_of_memory;
  dnnl_memory_desc_t smd;
  dnnl_memory_desc_init_by_tag(&smd, 1, (dnnl_dims_t){(dnnl_dim_t)(e->scratch ? e->scratch : 1)}, dnnl_u8, dnnl_a);
  int arg[5], n = 0;
  const dnnl_memory_desc_t *md[5];
  void *ptr[5];
#define ARG(a, m, p) (arg[n] = (a), md[n] = (m), ptr[n] = (void *)(p), n++)
  switch ((lt__dnnl_conv_pass)e->key.pass) {
  case LT__DNNL_CONV_FWD: {
    void *src = as_blocked(e->r_img, &e->pl_img, &e->md_img, img_in, 3, &s);
    void *dst = e->r_out ? dense_buf(4, dnnl_memory_desc_get_size(&e->md_out)) : out_out;
    if (!src || s != dnnl_success) return s;
    if (!dst) return dnnl_out_of_memory;
    ARG(DNNL_ARG_SRC, &e->md_img, src), ARG(DNNL_ARG_WEIGHTS, &e->md_wei, wei_blk), ARG(DNNL_ARG_DST, &e->md_out, dst);
    if (bias) ARG(DNNL_ARG_BIAS, &e->md_bias, bias);
    if (scr) ARG(DNNL_ARG_SCRATCHPAD, &smd, scr);
    if ((s = exec_args(e->conv, n, arg, md, ptr)) != dnnl_success) return s;
    return e->r_out ? reorder(e->r_out, &e->md_out, dst, &e->pl_out, out_out) : dnnl_success;
  }
  case LT__DNNL_CONV_BWD_X: {
    void *ddst = as_blocked(e->r_out, &e->pl_out, &e->md_out, out_in, 4, &s);
    void *dsrc = e->r_img ? dense_buf(3, dnnl_memory_desc_get_size(&e->md_img)) : img_out;
    if (!ddst || s != dnnl_success) return s;
    if (!dsrc) return dnnl_out_of_memory;
    ARG(DNNL_ARG_DIFF_DST, &e->md_out, ddst), ARG(DNNL_ARG_WEIGHTS, &e->md_wei, wei_blk);
    ARG(DNNL_ARG_DIFF_SRC, &e->md_img, dsrc);
    if (scr) ARG(DNNL_ARG_SCRATCHPAD, &smd, scr);
    if ((s = exec_args(e->conv, n, arg, md, ptr)) != dnnl_success) return s;
    return e->r_img ? reorder(e->r_img, &e->md_img, dsrc, &e->pl_img, img_out) : dnnl_success;
  }
  case LT__DNNL_CONV_BWD_W: {
    void *src = as_blocked(e->r_img, &e->pl_img, &e->md_img, img_in, 3, &s);
    if (!src || s != dnnl_success) return s;
    void *ddst = as_blocked(e->r_out, &e->pl_out, &e->md_out, out_in, 4, &s);
    if (!ddst || s != dnnl_success) return s;
    void *dwei = e->r_wei ? dense_buf(5, dnnl_memory_desc_get_size(&e->md_wei)) : wei_out;
    if (!dwei) return dnnl_out_of_memory;
    ARG(DNNL_ARG_SRC, &e->md_img, src), ARG(DNNL_ARG_DIFF_DST, &e->md_out, ddst);
    ARG(DNNL_ARG_DIFF_WEIGHTS, &e->md_wei, dwei);
    if (e->key.has_bias) ARG(DNNL_ARG_DIFF_BIAS, &e->md_bias, bias);
    if (scr) ARG(DNNL_ARG_SCRATCHPAD, &smd, scr);
    if ((s = exec_args(e->conv, n, arg, md, ptr)) != dnnl_success) return s;
    return e->r_wei ? reorder(e->r_wei, &e->md_wei, dwei, &e->pl_wei, wei_out) : dnnl_success;
  }
  }
#undef ARG
  return dnnl_invalid_arguments;
}

/* Chunks of the batch, from the shapes only: at least min(N, 8) (work for
 * two threads and more), more when a chunk's larger side (input or output)
 * would pass 1 MiB (it then stays in L2 between its reorders and the
 * kernel); nb images each, the last one rem. */
static void chunk_plan(const lt__dnnl_conv *g, int64_t *nch, int64_t *nb, int64_t *rem) {
  const int64_t in = g->C * g->H * g->W, out = g->O * g->OH * g->OW, per = 4 * (in > out ? in : out);
  int64_t n = (g->N * per + ((int64_t)1 << 20) - 1) >> 20;
  if (n < (g->N < 8 ? g->N : 8)) n = g->N < 8 ? g->N : 8;
  if (n > g->N) n = g->N;
  *nb = (g->N + n - 1) / n;
  *nch = (g->N + *nb - 1) / *nb;
  *rem = g->N - (*nch - 1) * *nb;
}

static int conv_env = -1; /* LT_CONV_DNNL: 0 turns this path off */
static pthread_once_t conv_env_once = PTHREAD_ONCE_INIT;
static void conv_env_init(void) {
  const char *v = getenv("LT_CONV_DNNL");
  conv_env = !(v && v[0] == '0');
}

void lt__dnnl_conv_enable(bool on) {
  pthread_once(&conv_env_once, conv_env_init);
  conv_env = on;
}

static int64_t conv_runs = 0, conv_bf16_runs = 0;
static int64_t read_counter(const int64_t *c) {
  int64_t n;
#pragma omp atomic read
  n = *c;
  return n;
}
int64_t lt__dnnl_conv_runs(void) { return read_counter(&conv_runs); }
int64_t lt__dnnl_conv_bf16_runs(void) { return read_counter(&conv_bf16_runs); }

/* lt__dnnl_conv_f32 (bf16 false; w f32) and lt__dnnl_conv_bf16 (w bf16). */
static lt_status conv_pass(lt__dnnl_conv_pass pass, bool bf16, const lt__dnnl_conv *g, const float *x,
                           const void *w, const float *bias, float *y, float *dx, float *dw, float *db,
                           const float *dy, bool *taken) {
  *taken = false;
  pthread_once(&conv_env_once, conv_env_init);
  if (!conv_env || g->N < 1 || (bf16 && !lt__dnnl_bf16_available())) return LT_OK;
  pthread_once(&engine_once, engine_init);
  if (engine_status != dnnl_success) return LT_OK;
  int64_t nch, nb, rem;
  chunk_plan(g, &nch, &nb, &rem);
  cv_key k;
  memset(&k, 0, sizeof k);
  k.g = *g, k.g.N = nb, k.pass = (int32_t)pass, k.has_bias = (pass == LT__DNNL_CONV_BWD_W ? db : bias) != NULL;
  k.bf16 = bf16;
  const cv_entry *ef = cv_get(&k), *er = ef;
  if (ef && rem != nb) k.g.N = rem, er = cv_get(&k);
  if (!ef || !er) return lt_last_status();
  if (!ef->ok || !er->ok) return LT_OK;
  const int64_t img = g->C * g->H * g->W, out = g->O * g->OH * g->OW, wnum = g->O * (g->C / g->G) * g->kh * g->kw;
  const int64_t pnum = wnum + (db ? g->O : 0); /* a chunk's partial gradient: dw, then db */
  /* The weights in each entry's layout (FWD, BWD_X), or the chunks' weight
   * gradients (BWD_W), in this thread's buffers 6 and 7. */
  const void *wf = w, *wr = w;
  float *part = NULL;
  dnnl_status_t s = dnnl_success;
  if (pass != LT__DNNL_CONV_BWD_W) {
    wf = as_blocked(ef->r_wei, &ef->pl_wei, &ef->md_wei, w, 6, &s);
    if (wf && s == dnnl_success) wr = er == ef ? wf : as_blocked(er->r_wei, &er->pl_wei, &er->md_wei, w, 7, &s);
    if (!wf || !wr || s != dnnl_success) goto fail;
  } else if (nch > 1 && !(part = dense_buf(6, (size_t)(nch * pnum) * sizeof(float)))) {
    s = dnnl_out_of_memory;
    goto fail;
  }
  int bad = 0;
  const int nt = lt__threads_for(g->N * (img > out ? img : out), nch);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t j = 0; j < nch; j++) {
    const cv_entry *e = j == nch - 1 ? er : ef;
    const int64_t n0 = j * nb;
    dnnl_status_t sj;
    if (pass == LT__DNNL_CONV_FWD)
      sj = cv_chunk(e, x + n0 * img, NULL, NULL, y + n0 * out, j == nch - 1 ? wr : wf, NULL, bias);
    else if (pass == LT__DNNL_CONV_BWD_X)
      sj = cv_chunk(e, NULL, dx + n0 * img, dy + n0 * out, NULL, j == nch - 1 ? wr : wf, NULL, NULL);
    else
      sj = cv_chunk(e, x + n0 * img, NULL, dy + n0 * out, NULL, NULL, part ? part + j * pnum : dw,
                    part ? part + j * pnum + wnum : db);
    if (sj != dnnl_success) {
#pragma omp atomic write
      bad = (int)sj;
    }
  }
  if (bad) {
    s = (dnnl_status_t)bad;
    goto fail;
  }
  if (part) { /* the chunks' weight (and bias) gradients, summed in chunk order */
    memcpy(dw, part, (size_t)wnum * sizeof(float));
    if (db) memcpy(db, part + wnum, (size_t)g->O * sizeof(float));
    for (int64_t j = 1; j < nch; j++) {
      for (int64_t i = 0; i < wnum; i++) dw[i] += part[j * pnum + i];
      for (int64_t i = 0; db && i < g->O; i++) db[i] += part[j * pnum + wnum + i];
    }
  }
  *taken = true;
  if (bf16) {
#pragma omp atomic update
    conv_bf16_runs++;
  }
#pragma omp atomic update
  conv_runs++;
  return LT_OK;
fail:
  return lt__err(s == dnnl_out_of_memory ? LT_ERR_NOMEM : LT_ERR_BACKEND,
                 "conv2d: x [%lld,%lld,%lld,%lld], weight [%lld,%lld,%lld,%lld]: oneDNN %s pass failed (status %d)",
                 (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->O,
                 (long long)(g->C / g->G), (long long)g->kh, (long long)g->kw,
                 pass == LT__DNNL_CONV_FWD ? "forward" : pass == LT__DNNL_CONV_BWD_X ? "input-gradient" : "weight-gradient",
                 (int)s);
}

lt_status lt__dnnl_conv_f32(lt__dnnl_conv_pass pass, const lt__dnnl_conv *g, const float *x, const float *w,
                            const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                            bool *taken) {
  return conv_pass(pass, false, g, x, w, bias, y, dx, dw, db, dy, taken);
}

lt_status lt__dnnl_conv_bf16(lt__dnnl_conv_pass pass, const lt__dnnl_conv *g, const float *x, const uint16_t *w,
                             const float *bias, float *y, float *dx, float *dw, float *db, const float *dy,
                             bool *taken) {
  return conv_pass(pass, true, g, x, w, bias, y, dx, dw, db, dy, taken);
}

const char *lt__dnnl_conv_bf16_path(void) {
  pthread_once(&conv_env_once, conv_env_init);
  if (!lt__dnnl_bf16_available())
    return "f32 (no oneDNN bf16 convolution on this CPU: autocast leaves convolutions in f32)";
  if (!conv_env) return "f32 im2col path (LT_CONV_DNNL=0; its products in bf16 through the matmul engine)";
  return lt__dnnl_bf16_native() ? "native (oneDNN direct kernels; f32 for geometries oneDNN lacks)"
                                : "fallback (oneDNN emulates bf16 on AVX-512; f32 for geometries it lacks)";
}
