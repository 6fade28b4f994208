/*
 * tensor/blas.c: the only file of the library that includes blis.h.
 *
 * It chooses BLIS's kernel set before BLIS initialises (Debian's BLIS 0.9.0
 * does not recognise every CPU and would fall back to slow generic kernels:
 * on an AVX-512 AMD EPYC, 39 GFLOP/s per core against 204 with 'skx'), and
 * wraps bli_?gemm with general strides. Everything else calls lt__blas_gemm.
 * Products with one row or column go to BLIS's gemv, and skinny ones (a few
 * rows or columns of C) to two small AVX-512 kernels of this file, which
 * BLIS 0.9's 'skx' set lacks ("sup" kernels; docs/gemm.md).
 */
#include "tensor/error_internal.h"
#include "tensor/threads_internal.h"
#include "tensor/blas_internal.h"

#include <blis.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- kernel-set choice -------------------------------------------------- */

/* Kernel sets Debian's x86_64 BLIS build carries (BLIS_ARCH_TYPE takes the
 * arch_t number; 'knl' and 'bulldozer' are absent from that build) and the
 * CPU features each needs. */
typedef struct {
  const char *name;
  arch_t id;
  const char *features; /* space-separated __builtin_cpu_supports names */
} arch_entry;

static const arch_entry arch_table[] = {
    {"skx", BLIS_ARCH_SKX, "avx512f avx512dq avx512bw avx512vl fma avx2"},
    {"zen3", BLIS_ARCH_ZEN3, "avx2 fma"},
    {"zen2", BLIS_ARCH_ZEN2, "avx2 fma"},
    {"zen", BLIS_ARCH_ZEN, "avx2 fma"},
    {"haswell", BLIS_ARCH_HASWELL, "avx2 fma"},
    {"excavator", BLIS_ARCH_EXCAVATOR, "avx fma"},
    {"steamroller", BLIS_ARCH_STEAMROLLER, "avx fma"},
    {"piledriver", BLIS_ARCH_PILEDRIVER, "avx fma"},
    {"sandybridge", BLIS_ARCH_SANDYBRIDGE, "avx"},
    {"penryn", BLIS_ARCH_PENRYN, "ssse3"},
    {"generic", BLIS_ARCH_GENERIC, ""},
};
#define N_ARCH ((int)(sizeof arch_table / sizeof arch_table[0]))

static bool cpu_has(const char *feature) {
  __builtin_cpu_init();
#define F(x) if (!strcmp(feature, #x)) return __builtin_cpu_supports(#x);
  F(avx512f) F(avx512dq) F(avx512bw) F(avx512vl) F(avx2) F(fma) F(avx) F(ssse3)
#undef F
  return false;
}

static bool cpu_supports(const arch_entry *e) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", e->features);
  for (char *save = NULL, *f = strtok_r(buf, " ", &save); f; f = strtok_r(NULL, " ", &save))
    if (!cpu_has(f)) return false;
  return true;
}

static char arch_why[256];
static bool arch_from_user = false;

/* Sets BLIS_ARCH_TYPE (a number) before BLIS initialises. Honours a valid
 * user choice (a number or a name such as "haswell") that this CPU supports;
 * otherwise picks from the CPU's feature flags, best first. */
static void choose_arch(void) {
  const char *env = getenv("BLIS_ARCH_TYPE");
  if (env && *env) {
    const arch_entry *pick = NULL;
    char *end;
    long v = strtol(env, &end, 10);
    for (int i = 0; i < N_ARCH; i++)
      if ((*end == '\0' && end != env && v == (long)arch_table[i].id) || !strcmp(env, arch_table[i].name))
        pick = &arch_table[i];
    if (pick && cpu_supports(pick)) {
      char num[16];
      snprintf(num, sizeof num, "%d", (int)pick->id);
      setenv("BLIS_ARCH_TYPE", num, 1);
      snprintf(arch_why, sizeof arch_why, "chosen by the user (BLIS_ARCH_TYPE=%s)", env);
      arch_from_user = true;
      return;
    }
    snprintf(arch_why, sizeof arch_why, "BLIS_ARCH_TYPE=%s ignored (%s); ", env,
             pick ? "this CPU lacks its instructions" : "not a kernel set of this BLIS");
  }
  /* Keep BLIS's own choice when it recognises the CPU; override only when it
   * would fall back to generic kernels or to a weaker set than the flags allow.
   * We cannot ask BLIS without initialising it, so decide from the flags. */
  for (int i = 0; i < N_ARCH; i++) {
    if (!cpu_supports(&arch_table[i])) continue;
    const arch_entry *e = &arch_table[i];
    /* Among the AVX2 sets, 'haswell' is the portable one. */
    if (e->id == BLIS_ARCH_ZEN3 || e->id == BLIS_ARCH_ZEN2 || e->id == BLIS_ARCH_ZEN) continue;
    if (e->id == BLIS_ARCH_EXCAVATOR || e->id == BLIS_ARCH_STEAMROLLER) continue;
    char num[16];
    snprintf(num, sizeof num, "%d", (int)e->id);
    setenv("BLIS_ARCH_TYPE", num, 1);
    size_t len = strlen(arch_why);
    snprintf(arch_why + len, sizeof arch_why - len, "'%s' from the CPU's flags (%s)", e->name,
             *e->features ? e->features : "none");
    return;
  }
}

void lt__blas_init(void) {
  choose_arch();
  bli_init();
}

const char *lt__blas_arch(void) { return bli_arch_string(bli_arch_query_id()); }
const char *lt__blas_arch_why(void) { return arch_why; }
bool lt__blas_arch_from_user(void) { return arch_from_user; }
void lt__blas_set_threads(int n) { bli_thread_set_num_threads(n); }

/* ---- GEMM --------------------------------------------------------------- */


/* BLIS rejects (and aborts on) zero strides and some size-1 layouts; a
 * stride along a dim of size <= 1 is meaningless, so make it consistent. */
static void fix_strides(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs) {
  if (rows <= 1 && cols <= 1) {
    *rs = 1;
    *cs = 1;
  } else if (rows <= 1) {
    *rs = *cs * cols;
  } else if (cols <= 1) {
    *cs = *rs * rows;
  }
}

/* Whether the environment variable name is set to "0" (a path switched off,
 * for comparisons), read once into *cache (-1 until then). */
static bool env_off(const char *name, int *cache) {
  int v;
#pragma omp atomic read
  v = *cache;
  if (v < 0) {
    const char *e = getenv(name);
    v = e && !strcmp(e, "0");
#pragma omp atomic write
    *cache = v;
  }
  return v == 1;
}

/* LT_GEMM_SPLIT=0 goes back to BLIS's own threads (for comparisons). */
static bool split_off(void) {
  static int off = -1;
  return env_off("LT_GEMM_SPLIT", &off);
}

/* One product c = alpha a b + beta c with its strides (elements), handed to
 * the per-block functions of run_blocks. */
typedef struct prod {
  lt_dtype dtype;
  int64_t m, n, k;
  double alpha, beta;
  const void *a, *b;
  void *c;
  int64_t rsa, csa, rsb, csb, rsc, csc;
  bool flag; /* gemm: split C's rows (else its columns); skinny: the dot kernel (else axpy) */
} prod;

/* The same product turned around, C^T = B^T A^T: A' = B^T, B' = A^T, m and
 * n swapped, C's strides swapped. */
static inline prod prod_t(prod p) {
  const prod t = {p.dtype, p.n, p.m, p.k, p.alpha, p.beta, p.b, p.a, p.c,
                  p.csb, p.rsb, p.csa, p.rsa, p.csc, p.rsc, p.flag};
  return t;
}

/* Runs block(p, lo, len) over [0, dim) cut into at most nt blocks, each a
 * multiple of 96 long (of every kernel set's register tile) but the last, one
 * block per thread in one OpenMP region (a single block runs inline). The
 * products split here compute every element of C the same way whatever the
 * cut, so results do not depend on the thread count. */
static void run_blocks(const prod *p, int64_t dim, int nt, void (*block)(const prod *, int64_t, int64_t)) {
  const int64_t tile = 96;
  int64_t chunk = (dim + nt - 1) / nt;
  chunk = (chunk + tile - 1) / tile * tile;
  const int parts = (int)((dim + chunk - 1) / chunk);
#pragma omp parallel for schedule(static, 1) num_threads(parts) if (parts > 1)
  for (int t = 0; t < parts; t++) {
    const int64_t lo = (int64_t)t * chunk;
    block(p, lo, lo + chunk <= dim ? chunk : dim - lo);
  }
}

static size_t elem_size(lt_dtype dtype) { return dtype == LT_DTYPE_F32 ? sizeof(float) : sizeof(double); }

/* A multi-threaded product as nt single-threaded BLIS calls, each on its own
 * block of C's rows (or columns, when C is wider than tall), in one OpenMP
 * region. BLIS's own threads meet at a barrier several times per product
 * (after packing each panel), spinning while they wait; when another process
 * holds one of the cores, every barrier waits for a time slice and a step
 * can take ten times longer (docs/benchmarks.md). Here the threads meet once,
 * at the end of the region, where libgomp's wait sleeps after a short spin.
 * Each thread packs its own copy of the shared operand's panels, which costs
 * little next to the product itself at the sizes that reach this (>= 4M
 * multiply-adds). Every element of C is computed by the same micro-kernel
 * calls in the same order as on one thread (BLIS never splits k), so results
 * do not depend on the thread count. (run_blocks + gemm_block) */
/* Rows [lo, lo+len) of C and A (p->flag), or columns of C and B. */
static void gemm_block(const prod *p, int64_t lo, int64_t len) {
  const size_t es = elem_size(p->dtype);
  const bool by_rows = p->flag;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &rntm);
  const char *pa = (const char *)p->a + (by_rows ? (size_t)(lo * p->rsa) * es : 0);
  const char *pb = (const char *)p->b + (by_rows ? 0 : (size_t)(lo * p->csb) * es);
  char *pc = (char *)p->c + (size_t)(lo * (by_rows ? p->rsc : p->csc)) * es;
  const int64_t mm = by_rows ? len : p->m, nn = by_rows ? p->n : len, k = p->k;
  int64_t rsa = p->rsa, csa = p->csa, rsb = p->rsb, csb = p->csb, rsc = p->rsc, csc = p->csc;
  fix_strides(mm, k, &rsa, &csa);
  fix_strides(k, nn, &rsb, &csb);
  fix_strides(mm, nn, &rsc, &csc);
  if (p->dtype == LT_DTYPE_F32) {
    float al = (float)p->alpha, be = (float)p->beta;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, mm, nn, k, &al, (float *)pa, rsa, csa, (float *)pb, rsb, csb,
                 &be, (float *)pc, rsc, csc, NULL, &rntm);
  } else {
    double al = p->alpha, be = p->beta;
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, mm, nn, k, &al, (double *)pa, rsa, csa, (double *)pb, rsb,
                 csb, &be, (double *)pc, rsc, csc, NULL, &rntm);
  }
}

/* A product with one row or one column of C (c[1,n] = a[1,k] b[k,n], or
 * c[m,1] = a[m,k] b[k,1]) as BLIS's gemv: gemm would pack the whole matrix
 * operand for a single row (74% of a cached decoding step, where every Linear
 * has one row: docs/decoding.md), gemv streams it once. With nt > 1 threads
 * the long dimension of C is split by run_blocks, each block one
 * single-threaded gemv; every element of C is the same dot product
 * whatever the split, so results do not depend on the thread count. */
static void gemv_block(const prod *p, int64_t lo, int64_t len) {
  const size_t es = elem_size(p->dtype);
  const bool row = p->m == 1; /* c[1,n]: c^T = b^T a^T */
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &rntm);
  /* the matrix operand (b^T for a row, a for a column), its vector, C's block */
  const trans_t tr = row ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  const int64_t mr = row ? p->k : len, mc = row ? len : p->k;
  const char *mat =
      row ? (const char *)p->b + (size_t)(lo * p->csb) * es : (const char *)p->a + (size_t)(lo * p->rsa) * es;
  const int64_t rsm = row ? p->rsb : p->rsa, csm = row ? p->csb : p->csa;
  const void *x = row ? p->a : p->b;
  const int64_t incx = row ? p->csa : p->rsb, incy = row ? p->csc : p->rsc;
  char *y = (char *)p->c + (size_t)(lo * incy) * es;
  if (p->dtype == LT_DTYPE_F32) {
    float al = (float)p->alpha, be = (float)p->beta;
    bli_sgemv_ex(tr, BLIS_NO_CONJUGATE, mr, mc, &al, (float *)mat, rsm, csm, (float *)x, incx, &be, (float *)y, incy,
                 NULL, &rntm);
  } else {
    double al = p->alpha, be = p->beta;
    bli_dgemv_ex(tr, BLIS_NO_CONJUGATE, mr, mc, &al, (double *)mat, rsm, csm, (double *)x, incx, &be, (double *)y,
                 incy, NULL, &rntm);
  }
}

/* ---- skinny products ---------------------------------------------------- */

/* Products with few rows (or columns) of C, and small ones, written here with
 * AVX-512 intrinsics. Debian's BLIS 0.9 registers no small/unpacked ("sup")
 * kernels for 'skx' (the 'haswell' set has them, but its context is not
 * reachable from the exported API while 'skx' is active), so every such
 * product packs the whole of B and runs the 32x12 micro-kernel on a tile
 * mostly of padding: [8,512]x[512,2048] with B a transposed view (a Linear's
 * W^T) ran at 25 GFLOP/s against 140 here (docs/gemm.md, "Skinny and small
 * products"). Two layouts, after orienting C so that its short side is m:
 * - dot: A's rows and B's columns contiguous along k (x W^T, Q K^T): 4x4
 *   blocks of C, each element a sum of 16-lane (8 for f64) partial sums over
 *   k, reduced at the end;
 * - axpy: B's rows contiguous along n (P V, dY W): 4 rows x 64 columns of C,
 *   each element one FMA per p in order.
 * In both, every element of C is a fixed sequence of operations that depends
 * only on m, n, k and the layout, never on where its block starts: a split
 * of n over threads gives the same bits. Compiled for AVX-512 with target
 * attributes (the library is built without -march), chosen at run time. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define LT__SK 1
#include <immintrin.h>
#define SK_TARGET __attribute__((target("avx512f,fma")))
#define SK_DEFINE(T, S, VT, MT, VW)                                                                             \
  /* dot: a[i*rsa + p], b[j*csb + p] */                                                                         \
  SK_TARGET static void sk_dot_##S(int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t rsa,          \
                                   const T *b, int64_t csb, T beta, T *c, int64_t rsc, int64_t csc) {          \
    const MT tail = (MT)((1u << (k % VW)) - 1);                                                                \
    const int64_t kv = k - k % VW;                                                                             \
    for (int64_t i0 = 0; i0 < m; i0 += 4) {                                                                    \
      const T *ar[4]; /* rows past m repeat the last (computed, not stored) */                                 \
      for (int r = 0; r < 4; r++) ar[r] = a + (i0 + r < m ? i0 + r : m - 1) * rsa;                             \
      for (int64_t j0 = 0; j0 < n; j0 += 4) {                                                                  \
        const T *bq[4];                                                                                        \
        for (int q = 0; q < 4; q++) bq[q] = b + (j0 + q < n ? j0 + q : n - 1) * csb;                           \
        VT acc[4][4];                                                                                          \
        for (int r = 0; r < 4; r++)                                                                            \
          for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_##S();                                        \
        for (int64_t p = 0; p <= kv; p += VW) {                                                                \
          VT av[4], bv[4];                                                                                     \
          if (p < kv) {                                                                                        \
            for (int r = 0; r < 4; r++) av[r] = _mm512_loadu_##S(ar[r] + p);                                   \
            for (int q = 0; q < 4; q++) bv[q] = _mm512_loadu_##S(bq[q] + p);                                   \
          } else {                                                                                             \
            if (!tail) break;                                                                                  \
            for (int r = 0; r < 4; r++) av[r] = _mm512_maskz_loadu_##S(tail, ar[r] + p);                       \
            for (int q = 0; q < 4; q++) bv[q] = _mm512_maskz_loadu_##S(tail, bq[q] + p);                       \
          }                                                                                                    \
          for (int r = 0; r < 4; r++)                                                                          \
            for (int q = 0; q < 4; q++) acc[r][q] = _mm512_fmadd_##S(av[r], bv[q], acc[r][q]);                 \
        }                                                                                                      \
        for (int r = 0; r < 4 && i0 + r < m; r++)                                                              \
          for (int q = 0; q < 4 && j0 + q < n; q++) {                                                          \
            T v = alpha * _mm512_reduce_add_##S(acc[r][q]), *pc = c + (i0 + r) * rsc + (j0 + q) * csc;         \
            *pc = beta == 0 ? v : v + beta * *pc;                                                              \
          }                                                                                                    \
      }                                                                                                        \
    }                                                                                                          \
  }                                                                                                            \
  /* axpy: a[i*rsa + p*csa], b[p*rsb + j] */                                                                   \
  SK_TARGET static void sk_axpy_##S(int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t rsa,         \
                                    int64_t csa, const T *b, int64_t rsb, T beta, T *c, int64_t rsc,           \
                                    int64_t csc) {                                                             \
    for (int64_t i0 = 0; i0 < m; i0 += 4) {                                                                    \
      const T *ar[4];                                                                                          \
      for (int r = 0; r < 4; r++) ar[r] = a + (i0 + r < m ? i0 + r : m - 1) * rsa;                             \
      for (int64_t j0 = 0; j0 < n; j0 += 4 * VW) {                                                             \
        MT mk[4]; /* lanes inside C */                                                                         \
        for (int q = 0; q < 4; q++) {                                                                          \
          const int64_t left = n - j0 - q * VW;                                                                \
          mk[q] = left >= VW ? (MT)~(MT)0 : left <= 0 ? (MT)0 : (MT)((1u << left) - 1);                        \
        }                                                                                                      \
        VT acc[4][4];                                                                                          \
        for (int r = 0; r < 4; r++)                                                                            \
          for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_##S();                                        \
        for (int64_t p = 0; p < k; p++) {                                                                      \
          VT bv[4];                                                                                            \
          const T *bp = b + p * rsb + j0;                                                                      \
          for (int q = 0; q < 4; q++)                                                                          \
            bv[q] = mk[q] == (MT)~(MT)0 ? _mm512_loadu_##S(bp + q * VW)                                        \
                                        : _mm512_maskz_loadu_##S(mk[q], bp + q * VW);                          \
          for (int r = 0; r < 4; r++) {                                                                        \
            const VT av = _mm512_set1_##S(ar[r][p * csa]);                                                     \
            for (int q = 0; q < 4; q++) acc[r][q] = _mm512_fmadd_##S(av, bv[q], acc[r][q]);                    \
          }                                                                                                    \
        }                                                                                                      \
        const int64_t w = n - j0 < 4 * VW ? n - j0 : 4 * VW;                                                   \
        for (int r = 0; r < 4 && i0 + r < m; r++) {                                                            \
          T out[4 * VW], *pc = c + (i0 + r) * rsc + j0 * csc;                                                  \
          for (int q = 0; q < 4; q++) _mm512_storeu_##S(out + q * VW, acc[r][q]);                              \
          if (beta == 0)                                                                                       \
            for (int64_t j = 0; j < w; j++) pc[j * csc] = alpha * out[j];                                      \
          else                                                                                                 \
            for (int64_t j = 0; j < w; j++) pc[j * csc] = alpha * out[j] + beta * pc[j * csc];                 \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
  }
SK_DEFINE(float, ps, __m512, __mmask16, 16)
SK_DEFINE(double, pd, __m512d, __mmask8, 8)
#undef SK_DEFINE

static bool sk_available(void) {
  static int off = -1;
  if (env_off("LT_GEMM_SKINNY", &off)) return false;
  __builtin_cpu_init(); /* idempotent: a flag check after the first call */
  return __builtin_cpu_supports("avx512f");
}

/* Columns [lo, lo+len) of C and B, one skinny kernel call (p->flag: dot). */
static void skinny_block(const prod *p, int64_t lo, int64_t len) {
  const size_t es = elem_size(p->dtype);
  const bool dot = p->flag;
  const char *pb = (const char *)p->b + (size_t)(lo * (dot ? p->csb : 1)) * es;
  char *pc = (char *)p->c + (size_t)(lo * p->csc) * es;
  const int64_t m = p->m, k = p->k;
  if (p->dtype == LT_DTYPE_F32) {
    const float al = (float)p->alpha, be = (float)p->beta;
    if (dot) sk_dot_ps(m, len, k, al, p->a, p->rsa, (const float *)pb, p->csb, be, (float *)pc, p->rsc, p->csc);
    else
      sk_axpy_ps(m, len, k, al, p->a, p->rsa, p->csa, (const float *)pb, p->rsb, be, (float *)pc, p->rsc, p->csc);
  } else {
    if (dot)
      sk_dot_pd(m, len, k, p->alpha, p->a, p->rsa, (const double *)pb, p->csb, p->beta, (double *)pc, p->rsc,
                p->csc);
    else
      sk_axpy_pd(m, len, k, p->alpha, p->a, p->rsa, p->csa, (const double *)pb, p->rsb, p->beta, (double *)pc,
                 p->rsc, p->csc);
  }
}

/* ---- small products: the panel kernel (f32) ------------------------------ */

/* Products whose B is small (k x n fits in L2 once packed) and whose k or n
 * is too short for BLIS's 32x12 tiles and per-call setup to pay: the tiny
 * batched products of attention ([17,16]x[16,17] with 512 of them per layer
 * in a ViT, docs/gemm.md, "Small products") and the Linear layers of small
 * models ([2176,64]x[64,128]). BLIS 0.9 costs there about as much in setup
 * (control tree, memory-pool mutexes, packing) as in arithmetic.
 *
 * B is packed into panels of 64 columns (nv <= 4 vectors of 16, the last
 * panel zero-padded to whole vectors), k rows each; A is read in place with
 * any strides (one broadcast per element). A tile of mr rows x nv vectors of
 * C keeps its sums in registers over the whole of k: every element of C is
 * sum_p a[i,p] b[p,j], accumulated by FMA from zero in the order p = 0..k-1,
 * then multiplied by alpha (and beta c added, as in the skinny kernels). That
 * sequence depends on nothing but k, so any split of C over threads, and any
 * tile a row lands in, gives the same bits. */
#define SP_W 64 /* panel width in floats */

SK_TARGET static inline __attribute__((always_inline)) void sp_tile(const int mr, const int nv, int64_t k,
                                                                    const float *a, int64_t rsa, int64_t csa,
                                                                    const float *bp, int64_t ldb, float alpha, float beta,
                                                                    float *c, int64_t rsc, int64_t csc, int64_t w) {
  __m512 acc[8][4];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
    for (int q = 0; q < nv; q++) acc[r][q] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p++) {
    __m512 bv[4];
#pragma GCC unroll 4
    for (int q = 0; q < nv; q++) bv[q] = _mm512_loadu_ps(bp + p * ldb + q * 16);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      const __m512 av = _mm512_set1_ps(a[r * rsa + p * csa]);
#pragma GCC unroll 4
      for (int q = 0; q < nv; q++) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++) {
    float *pc = c + r * rsc;
    if (csc == 1) {
#pragma GCC unroll 4
      for (int q = 0; q < nv; q++) {
        const int64_t left = w - q * 16;
        const __mmask16 mk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512 v = _mm512_mul_ps(al, acc[r][q]);
        if (beta != 0) v = _mm512_add_ps(v, _mm512_mul_ps(be, _mm512_maskz_loadu_ps(mk, pc + q * 16)));
        _mm512_mask_storeu_ps(pc + q * 16, mk, v);
      }
    } else {
      float out[SP_W];
#pragma GCC unroll 4
      for (int q = 0; q < nv; q++) _mm512_storeu_ps(out + q * 16, acc[r][q]);
      for (int64_t j = 0; j < w; j++)
        pc[j * csc] = beta == 0 ? alpha * out[j] : alpha * out[j] + beta * pc[j * csc];
    }
  }
}

/* Rows [i0, i1) of C against one packed panel of nv vectors (w columns):
 * tiles of 8 rows (nv <= 2) or 6 rows (nv 3, 4: 18 and 24 accumulators),
 * then the remaining rows as one shorter tile. */
#define SP_ROWS(NV, MR)                                                                                         \
  SK_TARGET static void sp_rows_##NV(int64_t i0, int64_t i1, int64_t k, const float *a, int64_t rsa,            \
                                     int64_t csa, const float *bp, int64_t ldb, float alpha, float beta,       \
                                     float *c,                                                                 \
                                     int64_t rsc, int64_t csc, int64_t w) {                                     \
    int64_t i = i0;                                                                                             \
    for (; i + MR <= i1; i += MR) sp_tile(MR, NV, k, a + i * rsa, rsa, csa, bp, ldb, alpha, beta, c + i * rsc, rsc, csc, w); \
    const float *ai = a + i * rsa;                                                                              \
    float *ci = c + i * rsc;                                                                                    \
    switch (i1 - i) {                                                                                           \
    case 7: sp_tile(7 < MR ? 7 : 1, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;              \
    case 6: sp_tile(6 < MR ? 6 : 1, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;              \
    case 5: sp_tile(5, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 4: sp_tile(4, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 3: sp_tile(3, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 2: sp_tile(2, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 1: sp_tile(1, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    default: break;                                                                                             \
    }                                                                                                           \
  }
SP_ROWS(1, 8)
SP_ROWS(2, 8)
SP_ROWS(3, 6)
SP_ROWS(4, 6)
#undef SP_ROWS

/* Per-thread packing buffer, grown as needed and kept for the thread's life
 * (a training step packs the same sizes again and again; freed when the
 * thread exits). */
static _Thread_local float *sp_buf;
static _Thread_local size_t sp_cap;

static void sp_release(void) {
  free(sp_buf);
  sp_buf = NULL;
  sp_cap = 0;
}

static float *sp_buffer(size_t floats) {
  if (floats <= sp_cap) return sp_buf;
  (void)lt__at_thread_exit(sp_release); /* released with the thread */
  free(sp_buf);
  const size_t bytes = (floats * sizeof(float) + 4095) & ~(size_t)4095;
  sp_buf = aligned_alloc(64, bytes);
  sp_cap = sp_buf ? bytes / sizeof(float) : 0;
  return sp_buf;
}

/* One panel product: C (or, with k split, the partial sums of each chunk of
 * k) from row blocks of SP_MB rows x panels x chunks, one task each. B is
 * either packed (panel q of chunk h at bp + (h*np + q)*kc*SP_W, rows of its
 * vectors) or read in place (ldb: its row stride; panel q of chunk h at
 * bp + h*kc*ldb + q*SP_W). */
#define SP_MB 96
typedef struct sp_job {
  int64_t m, n, kc, k;       /* kc: the chunk length (k when not split) */
  int64_t nrb, np, nch;      /* row blocks, panels, chunks */
  float alpha, beta;         /* of the tasks (1, 0 for partial sums) */
  const float *a;            /* A [m, k] in place */
  int64_t rsa, csa;
  const float *bp;           /* B, packed or in place */
  int64_t ldb;               /* in place: B's row stride; 0: packed */
  int64_t pn;                /* packed: the columns B was packed for (>= n) */
  float *c;                  /* C, or partials: chunk h at h*m*n, rows of n */
  int64_t rsc, csc;
} sp_job;

static void sp_task(const sp_job *jb, int64_t t) {
  const int64_t rb = t % jb->nrb, q = (t / jb->nrb) % jb->np, h = t / (jb->nrb * jb->np);
  const int64_t i0 = rb * SP_MB, i1 = i0 + SP_MB < jb->m ? i0 + SP_MB : jb->m;
  const int64_t j0 = q * SP_W, w = jb->n - j0 < SP_W ? jb->n - j0 : SP_W;
  const int64_t p0 = h * jb->kc, kl = jb->k - p0 < jb->kc ? jb->k - p0 : jb->kc;
  const float *bp;
  int64_t ldb;
  if (jb->ldb) {
    bp = jb->bp + p0 * jb->ldb + j0;
    ldb = jb->ldb;
  } else { /* a packed panel's rows are its own vectors wide (it may be wider than w) */
    const int64_t pw = jb->pn - j0 < SP_W ? jb->pn - j0 : SP_W, pnp = (jb->pn + SP_W - 1) / SP_W;
    bp = jb->bp + (h * pnp + q) * jb->kc * SP_W;
    ldb = (pw + 15) / 16 * 16;
  }
  const float *a = jb->a + p0 * jb->csa;
  float *c = jb->c + (jb->nch > 1 ? h * jb->m * jb->n : 0) + j0 * jb->csc;
  const float al = jb->alpha, be = jb->beta;
  switch ((w + 15) / 16) {
  case 1: sp_rows_1(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  case 2: sp_rows_2(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  case 3: sp_rows_3(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  default: sp_rows_4(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  }
}

/* Packs B [k, w] (w <= 64, strides rsb, csb) into k rows of nv*16 floats,
 * the lanes past w zero: masked vector loads when B's rows are contiguous,
 * gathers otherwise (a transposed view, as K^T in Q K^T: element by element
 * this packing cost as much as the product of a [17,16]x[16,17]). */
SK_TARGET static void sp_pack(int64_t k, int64_t w, const float *b, int64_t rsb, int64_t csb, float *dst) {
  const int nv = (int)((w + 15) / 16);
  __mmask16 mk[4];
  for (int q = 0; q < nv; q++) {
    const int64_t left = w - q * 16;
    mk[q] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
  }
  if (csb == 1) {
    for (int64_t p = 0; p < k; p++)
      for (int q = 0; q < nv; q++)
        _mm512_store_ps(dst + (p * nv + q) * 16, _mm512_maskz_loadu_ps(mk[q], b + p * rsb + q * 16));
  } else if (csb > 0 && csb <= ((int64_t)1 << 24)) { /* 64 csb fits the 32-bit gather indices */
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)csb));
    for (int64_t p = 0; p < k; p++)
      for (int q = 0; q < nv; q++)
        _mm512_store_ps(dst + (p * nv + q) * 16,
                        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk[q], idx, b + p * rsb + q * 16 * csb, 4));
  } else {
    for (int64_t p = 0; p < k; p++)
      for (int64_t j = 0; j < nv * 16; j++) dst[p * nv * 16 + j] = j < w ? b[p * rsb + j * csb] : 0.0f;
  }
}

/* The chunks of k a long-k product is cut into. Fixed (never derived from
 * the thread count), so the partial sums, and C, have the same bits on any
 * number of threads. */
#define SP_KC 256

/* B read in place instead of packed: its rows contiguous (csb 1), every
 * panel whole vectors (n a multiple of 16: no lane past B's row is read),
 * and rows at most SP_INPLACE_MAX_RS floats apart (farther, each row of a
 * panel is on its own page: packing pays). Packing such a B was a copy into
 * the same layout (7% of the fused attention's products at HS 128). */
#define SP_INPLACE_MAX_RS 1024

/* Runs the job's tasks on nt threads (one OpenMP region, none for one). */
static void sp_run(const sp_job *jb, int nt) {
  const int64_t tasks = jb->nrb * jb->np * jb->nch;
  const int use = tasks < nt ? (int)tasks : nt;
  if (use <= 1) { /* no OpenMP region: its team costs more than a tiny product */
    for (int64_t t = 0; t < tasks; t++) sp_task(jb, t);
  } else {
#pragma omp parallel for schedule(static) num_threads(use)
    for (int64_t t = 0; t < tasks; t++) sp_task(jb, t);
  }
}

/* C = alpha A B + beta C (f32) with the panel kernel on nt threads, k in
 * chunks of kc (kc == k: one chunk, C written directly). With several
 * chunks, each chunk's product goes to its own [m, n] block of partial sums
 * and C = alpha (P_0 + P_1 + ...) + beta C is summed in chunk order. False
 * (nothing written) when the buffer cannot be had. */
static bool gemm_panel(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float *a, int64_t rsa,
                       int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc,
                       int64_t csc, int nt) {
  const int64_t np = (n + SP_W - 1) / SP_W, nch = (k + kc - 1) / kc;
  const bool inplace = csb == 1 && n % 16 == 0 && rsb <= SP_INPLACE_MAX_RS;
  const int64_t packed = inplace ? 0 : nch * np * kc * SP_W;
  const bool split = nch > 1;
  float *buf = NULL;
  if (packed || split) {
    buf = sp_buffer((size_t)(packed + (split ? nch * m * n : 0)));
    if (!buf) return false;
  }
  if (!inplace)
    for (int64_t h = 0; h < nch; h++)
      for (int64_t q = 0; q < np; q++) { /* chunk h, panel q: kl rows of nv*16 floats */
        const int64_t j0 = q * SP_W, w = n - j0 < SP_W ? n - j0 : SP_W;
        const int64_t p0 = h * kc, kl = k - p0 < kc ? k - p0 : kc;
        sp_pack(kl, w, b + p0 * rsb + j0 * csb, rsb, csb, buf + (h * np + q) * kc * SP_W);
      }
  const sp_job jb = {m, n, kc, k, (m + SP_MB - 1) / SP_MB, np, nch, split ? 1.0f : alpha, split ? 0.0f : beta,
                     a, rsa, csa, inplace ? b : buf, inplace ? rsb : 0, n,
                     split ? buf + packed : c, split ? n : rsc, split ? 1 : csc};
  sp_run(&jb, nt);
  if (split) {
    const float *part = buf + packed;
    const int ur = m >= 2 * nt ? nt : 1;
#pragma omp parallel for schedule(static) num_threads(ur) if (ur > 1)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        float s = part[i * n + j];
        for (int64_t h = 1; h < nch; h++) s += part[h * m * n + i * n + j];
        float *pc = c + i * rsc + j * csc;
        *pc = beta == 0 ? alpha * s : alpha * s + beta * *pc;
      }
  }
  return true;
}
#endif

/* Where each kernel beats BLIS (measured on Zen 5, f32, docs/gemm.md): the
 * dot kernel up to 32 rows, and up to 64 while B is at most 2^22 elements
 * (at [64,4096]x[4096,4096] BLIS's packing pays off), from k = 64 (below, the
 * final reductions cost more than the sums); the axpy kernel up to 8 rows. */
#define LT__SK_DOT_MAX 32
#define LT__SK_DOT_MAX_SMALL_B 64
#define LT__SK_DOT_MIN_K 64
#define LT__SK_AXPY_MAX 8

/* Computes C with the skinny kernels and returns true, or returns false
 * (nothing written) when the shape or layout is not theirs. m, n >= 2 here
 * (gemv takes one row or column). With nt > 1 threads the long side of C is
 * split in blocks of 96, one kernel call each; an element's operations do
 * not depend on where its block starts, so the bits do not depend on nt. */
static bool gemm_skinny(prod p, int nt) {
#ifdef LT__SK
  if (!sk_available() || (p.dtype != LT_DTYPE_F32 && p.dtype != LT_DTYPE_F64)) return false;
  if (p.n < p.m) p = prod_t(p); /* the short side becomes m */
  const bool dot = p.csa == 1 && p.rsb == 1 && p.k >= LT__SK_DOT_MIN_K &&
                   (p.m <= LT__SK_DOT_MAX || (p.m <= LT__SK_DOT_MAX_SMALL_B && (double)p.k * (double)p.n <= 4194304.0));
  const bool axpy = !dot && p.csb == 1 && p.m <= LT__SK_AXPY_MAX;
  if (!dot && !axpy) return false;
  p.flag = dot;
  run_blocks(&p, p.n, nt, skinny_block);
  return true;
#else
  (void)p, (void)nt;
  return false;
#endif
}

/* The small-product engine: 0 off (BLIS), 1 the measured rule below, 2 every
 * f32 product the panel kernel can take (benchmarks). -1 until read from
 * LT_GEMM_SMALL (default 1). */
static int small_mode = -1;

int lt__blas_set_small(int mode) {
  int prev;
#pragma omp atomic capture
  {
    prev = small_mode;
    small_mode = mode;
  }
  return prev;
}

static int small_get(void) {
  int v;
#pragma omp atomic read
  v = small_mode;
  if (v < 0) {
    const char *e = getenv("LT_GEMM_SMALL");
    v = e && (*e == '0' || *e == '2') ? *e - '0' : 1;
#pragma omp atomic write
    small_mode = v;
  }
  return v;
}

/* Where the panel kernel beats BLIS (f32, measured on this project's Xeon,
 * docs/gemm.md "Small products"): after orienting C so that n <= m, while
 * the packed B (k x n rounded up to panels of 64) fits in half of L2, and
 * the product is small or its short sides are. */
#define LT__SP_MAX_B 65536 /* floats of packed B: 256 KiB */
#define LT__SP_MAX_K 256
#define LT__SP_MAX_N 256
#define LT__SP_MIN_N 16 /* below, a vector is mostly padding: the skinny kernels */
#define LT__SP_SPLIT_MAX_M 512     /* k split: C at most 512 x 256 */
#define LT__SP_SPLIT_MAX_K 8192    /* and k at most 32 chunks: [144,25088]x[25088,32] is BLIS's (39 vs 31) */
#define LT__SP_MAX_PARTIAL 4194304.0 /* floats of partial sums (16 MiB) */

/* Whether a product with n columns of C (the packed side) and k fits the
 * panel kernel whole (k not split) under the engine mode. */
#ifdef LT__SK
static bool small_whole(int mode, int64_t n, int64_t k) {
  const int64_t npad = (n + SP_W - 1) / SP_W * SP_W;
  return k * npad <= LT__SP_MAX_B && (mode == 2 || (k <= LT__SP_MAX_K && n <= LT__SP_MAX_N && n >= LT__SP_MIN_N));
}
#endif

/* Computes C with the panel kernel and returns true, or returns false
 * (nothing written) when the rule sends the product elsewhere. */
static bool gemm_small(prod p, int nt) {
#ifdef LT__SK
  const int mode = small_get();
  if (mode == 0 || p.dtype != LT_DTYPE_F32 || !sk_available()) return false;
  /* The short side becomes n, the packed one, unless that turns C's
   * contiguous rows into strided columns while the product fits as it is:
   * the kernel stores a row of a tile as vectors, a column element by
   * element ([128,64]x[64,256] with C's rows contiguous ran at 41 GFLOP/s
   * turned around, 150 as it is: the diagonal tiles of the fused
   * attention). Either way every element of C is the same FMA chain. */
  if (p.n > p.m && !(p.csc == 1 && p.rsc != 1 && small_whole(mode, p.n, p.k))) p = prod_t(p);
  const int64_t m = p.m, n = p.n, k = p.k, npad = (n + SP_W - 1) / SP_W * SP_W;
  /* A read down its columns a page or more apart (A^T of a wide matrix, as
   * in [128,128]x[128,1568] turned around): a TLB miss per element, BLIS's
   * packing wins (measured 145 against 122 GFLOP/s). */
  if (mode == 1 && p.rsa == 1 && p.csa >= 1024) return false;
  const bool whole = small_whole(mode, n, k);
  /* Long k, small C (a weight gradient X^T G): k in fixed chunks. */
  const bool chunks = !whole && k > SP_KC && npad * SP_KC <= LT__SP_MAX_B &&
                      (mode == 2 || (m <= LT__SP_SPLIT_MAX_M && n >= LT__SP_MIN_N && k <= LT__SP_SPLIT_MAX_K)) &&
                      (double)m * (double)n * (double)((k + SP_KC - 1) / SP_KC) <= LT__SP_MAX_PARTIAL;
  if (!whole && !chunks) return false;
  return gemm_panel(m, n, k, whole ? k : SP_KC, (float)p.alpha, p.a, p.rsa, p.csa, p.b, p.rsb, p.csb, (float)p.beta,
                    p.c, p.rsc, p.csc, nt);
#else
  (void)p, (void)nt;
  return false;
#endif
}

/* ---- packed B, multiplied many times ------------------------------------ */

int64_t lt__blas_pack_floats(int64_t k, int64_t n) {
#ifdef LT__SK
  const int mode = small_get();
  if (mode == 0 || !sk_available() || k < 1 || n < 1 || !small_whole(mode, n, k)) return 0;
  return (n + SP_W - 1) / SP_W * k * SP_W; /* gemm_panel's layout for one chunk */
#else
  (void)k, (void)n;
  return 0;
#endif
}

void lt__blas_pack(int64_t k, int64_t n, const float *b, int64_t rsb, int64_t csb, float *dst) {
#ifdef LT__SK
  fix_strides(k, n, &rsb, &csb);
  for (int64_t q = 0; q * SP_W < n; q++) {
    const int64_t j0 = q * SP_W, w = n - j0 < SP_W ? n - j0 : SP_W;
    sp_pack(k, w, b + j0 * csb, rsb, csb, dst + q * k * SP_W);
  }
#else
  (void)k, (void)n, (void)b, (void)rsb, (void)csb, (void)dst;
  LT_CHECK(!"lt__blas_pack without the panel kernel");
#endif
}

void lt__blas_gemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                          const float *bp, int64_t pn, float beta, float *c, int64_t rsc, int64_t csc) {
#ifdef LT__SK
  LT_CHECK(n <= pn && k >= 1);
  if (m == 0 || n == 0) return;
  fix_strides(m, k, &rsa, &csa);
  fix_strides(m, n, &rsc, &csc);
  const sp_job jb = {m, n, k, k, (m + SP_MB - 1) / SP_MB, (n + SP_W - 1) / SP_W, 1, alpha, beta,
                     a, rsa, csa, bp, 0, pn, c, rsc, csc};
  sp_run(&jb, 1);
#else
  (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)rsa, (void)csa, (void)bp, (void)pn, (void)beta, (void)c,
      (void)rsc, (void)csc;
  LT_CHECK(!"lt__blas_gemm_packed without the panel kernel");
#endif
}

static lt_status gemm(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                      int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb, double beta,
                      void *c, int64_t rsc, int64_t csc, bool single) {
  if (m == 0 || n == 0) return LT_OK;
  fix_strides(m, k, &rsa, &csa);
  fix_strides(k, n, &rsb, &csb);
  fix_strides(m, n, &rsc, &csc);
  if (!rsa || !csa || !rsb || !csb || !rsc || !csc)
    return lt__err(LT_ERR_BACKEND, "gemm: a zero stride reached BLIS (m %lld, n %lld, k %lld)", (long long)m,
                   (long long)n, (long long)k);
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  rntm_t *r = NULL;
  /* Below about 4M multiply-adds (tens of microseconds on one core) BLIS's
   * threads cost more at their barriers than they save, and far more when
   * the machine is oversubscribed (attention tests: 10x slower on 2 threads). */
  if ((double)m * (double)n * (double)k < LT__BLAS_SMALL_MACS) single = true;
  const int nt = single || omp_in_parallel() ? 1 : lt_get_num_threads();
  /* Splitting a gemv over threads pays from the same size as gemm's
   * (measured: smaller thresholds slowed decoding, thread wake-ups cost more
   * than the bandwidth they add). */
  if ((m == 1 || n == 1) && k > 0 && (dtype == LT_DTYPE_F32 || dtype == LT_DTYPE_F64)) {
    const prod p = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, false};
    run_blocks(&p, m == 1 ? n : m, nt, gemv_block);
    return LT_OK;
  }
  const prod pr = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, false};
  if (k > 0 && (gemm_small(pr, nt) || gemm_skinny(pr, nt))) return LT_OK;
  if (nt > 1 && (dtype == LT_DTYPE_F32 || dtype == LT_DTYPE_F64) && !split_off()) {
    const prod p = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, m >= n};
    run_blocks(&p, m >= n ? m : n, nt, gemm_block);
    return LT_OK;
  }
  if (single) {
    bli_rntm_set_num_threads(1, &rntm);
    r = &rntm;
  }
  if (dtype == LT_DTYPE_F32) {
    float al = (float)alpha, be = (float)beta;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (float *)a, rsa, csa, (float *)b, rsb, csb,
                 &be, c, rsc, csc, NULL, r);
  } else if (dtype == LT_DTYPE_F64) {
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &alpha, (double *)a, rsa, csa, (double *)b, rsb,
                 csb, &beta, c, rsc, csc, NULL, r);
  } else {
    return lt__err(LT_ERR_DTYPE, "gemm: dtype %s is not supported by BLIS (f32, f64 only)", lt_dtype_name(dtype));
  }
  return LT_OK;
}

lt_status lt__blas_gemm(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                        int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb, double beta,
                        void *c, int64_t rsc, int64_t csc) {
  return gemm(dtype, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc, false);
}

lt_status lt__blas_gemm_1t(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                           int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb, double beta,
                           void *c, int64_t rsc, int64_t csc) {
  return gemm(dtype, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc, true);
}
