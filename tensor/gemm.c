/*
 * tensor/gemm.c: the GEMM dispatch, the one selector of the library's
 * products (tensor/gemm_internal.h: lt__mat_gemm and its packed and bias
 * forms).
 *
 * What this is: for each product, the engine and the cut. Under autocast an
 * f32 product takes bf16 copies of its operands (tensor/autocast.c) and goes
 * to oneDNN (tensor/dnnl_matmul.c), as bf16 products do; where oneDNN has no
 * bf16 matmul, bf16 operands are widened to f32. f32 and f64 products go to
 * the skinny dot kernel or BLIS's gemv (one row or column of C), the panel
 * kernel or the skinny kernels (tensor/gemm_small.c, where the rules below
 * measured them faster), or BLIS's gemm, cut into one block of C per thread
 * (run_blocks) or left to BLIS's threads. Each alternative is a path of tensor/paths.def, whose
 * switch forces it and whose CPU check this asks before calling a kernel.
 *
 * What this is not: an engine (BLIS is tensor/blis.c, the kernels
 * tensor/gemm_small.c, oneDNN tensor/dnnl_matmul.c), the stride rule
 * (tensor/matview.c) nor autocast's caches (tensor/autocast.c).
 */
#include "tensor/gemm_internal.h"

#include "tensor/autocast_internal.h"
#include "tensor/blis_internal.h"
#include "tensor/dnnl_internal.h"
#include "tensor/error_internal.h"
#include "tensor/gemm_small_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/runtime_internal.h"

#include <omp.h>

#define SP_W LT__SMALL_W
#define SP_KC LT__SMALL_KC

/* ---- the paths (tensor/paths.def) ------------------------------------------ */

/* The panel kernel's mode: 0 off, 1 the measured rule below, 2 every f32
 * product it can take. gemm=small forces 2, gemm=blis and gemm=skinny 0. */
static int small_mode(void) {
  if (!lt__path_supported(LT__PATH_gemm_small)) return 0;
  const lt__path f = lt__path_forced(LT__PATH_FAMILY_gemm);
  return f == LT__PATH_AUTO ? 1 : f == LT__PATH_gemm_small ? 2 : 0;
}

/* The skinny kernels: on unless gemm=blis is forced (gemm=small leaves them
 * the products the panel kernel cannot take). */
static bool skinny_on(void) {
  return lt__path_supported(LT__PATH_gemm_skinny) && lt__path_forced(LT__PATH_FAMILY_gemm) != LT__PATH_gemm_blis;
}

/* ---- cutting a product over threads --------------------------------------- */

/* Runs block(p, lo, len) over [0, dim) cut into at most nt blocks, each a
 * multiple of 96 long (of every kernel set's register tile) but the last, one
 * block per thread in one OpenMP region (a single block runs inline). The
 * products split here compute every element of C the same way whatever the
 * cut, so results do not depend on the thread count. */
static void run_blocks(const lt__prod *p, int64_t dim, int nt, lt__prod_block_fn block) {
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

/* ---- the rules ----------------------------------------------------------- */
/* Where each kernel beats BLIS (measured on Zen 5, f32, docs/gemm.md): the
 * dot kernel up to 32 rows, and up to 64 while B is at most 2^22 elements
 * (at [64,4096]x[4096,4096] BLIS's packing pays off), from k = 64 (below, the
 * final reductions cost more than the sums); the axpy kernel up to 8 rows. */
#define LT__SK_DOT_MAX 32
#define LT__SK_DOT_MAX_SMALL_B 64
#define LT__SK_DOT_MIN_K 64
#define LT__SK_AXPY_MAX 8

/* Whether the dot kernel can read the product: A's rows and B's columns
 * contiguous along k, and k long enough for its partial sums to pay. */
static bool skinny_dot_layout(const lt__prod *p) { return p->csa == 1 && p->rsb == 1 && p->k >= LT__SK_DOT_MIN_K; }

/* Computes C with the skinny kernels and returns true, or returns false
 * (nothing written) when the shape or layout is not theirs. m, n >= 2 here
 * (gemv takes one row or column). With nt > 1 threads the long side of C is
 * split in blocks of 96, one kernel call each; an element's operations do
 * not depend on where its block starts, so the bits do not depend on nt. */
static bool gemm_skinny(lt__prod p, int nt) {
  if (!skinny_on() || (p.dtype != LT_DTYPE_F32 && p.dtype != LT_DTYPE_F64)) return false;
  if (p.n < p.m) p = lt__prod_t(p); /* the short side becomes m */
  const bool dot = skinny_dot_layout(&p) &&
                   (p.m <= LT__SK_DOT_MAX || (p.m <= LT__SK_DOT_MAX_SMALL_B && (double)p.k * (double)p.n <= 4194304.0));
  const bool axpy = !dot && p.csb == 1 && p.m <= LT__SK_AXPY_MAX;
  if (!dot && !axpy) return false;
  p.flag = dot;
  run_blocks(&p, p.n, nt, lt__small_skinny_block);
  return true;
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
static bool small_whole(int mode, int64_t n, int64_t k) {
  const int64_t npad = (n + SP_W - 1) / SP_W * SP_W;
  return k * npad <= LT__SP_MAX_B && (mode == 2 || (k <= LT__SP_MAX_K && n <= LT__SP_MAX_N && n >= LT__SP_MIN_N));
}

/* Computes C with the panel kernel and returns true, or returns false
 * (nothing written) when the rule sends the product elsewhere. */
static bool gemm_small(lt__prod p, int nt) {
  const int mode = small_mode();
  if (mode == 0 || p.dtype != LT_DTYPE_F32) return false;
  /* The short side becomes n, the packed one, unless that turns C's
   * contiguous rows into strided columns while the product fits as it is:
   * the kernel stores a row of a tile as vectors, a column element by
   * element, several times slower (the diagonal tiles of the fused
   * attention (figures: docs/gemm.md, "Figures behind the code's rules")). Either way every element of C is the same FMA chain. */
  if (p.n > p.m && !(p.csc == 1 && p.rsc != 1 && small_whole(mode, p.n, p.k))) p = lt__prod_t(p);
  const int64_t m = p.m, n = p.n, k = p.k, npad = (n + SP_W - 1) / SP_W * SP_W;
  /* A read down its columns a page or more apart (A^T of a wide matrix, as
   * in [128,128]x[128,1568] turned around): a TLB miss per element, so
   * BLIS, which packs A first, wins (figures: docs/gemm.md, "Figures behind the code's rules"). */
  if (mode == 1 && p.rsa == 1 && p.csa >= 1024) return false;
  const bool whole = small_whole(mode, n, k);
  /* Long k, small C (a weight gradient X^T G): k in fixed chunks. */
  const bool chunks = !whole && k > SP_KC && npad * SP_KC <= LT__SP_MAX_B &&
                      (mode == 2 || (m <= LT__SP_SPLIT_MAX_M && n >= LT__SP_MIN_N && k <= LT__SP_SPLIT_MAX_K)) &&
                      (double)m * (double)n * (double)((k + SP_KC - 1) / SP_KC) <= LT__SP_MAX_PARTIAL;
  if (!whole && !chunks) return false;
  return lt__small_panel(m, n, k, whole ? k : SP_KC, (float)p.alpha, p.a, p.rsa, p.csa, p.b, p.rsb, p.csb,
                         (float)p.beta, p.c, p.rsc, p.csc, nt);
}

/* ---- f32 and f64 products ------------------------------------------------ */

static lt_status gemm(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                      int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb, double beta,
                      void *c, int64_t rsc, int64_t csc, bool single) {
  if (m == 0 || n == 0) return LT_OK;
  lt__prod_fix_strides(m, k, &rsa, &csa);
  lt__prod_fix_strides(k, n, &rsb, &csb);
  lt__prod_fix_strides(m, n, &rsc, &csc);
  if (!rsa || !csa || !rsb || !csb || !rsc || !csc)
    return lt__err(LT_ERR_BACKEND, "gemm: a zero stride reached BLIS (m %lld, n %lld, k %lld)", (long long)m,
                   (long long)n, (long long)k);
  /* Below about 4M multiply-adds (tens of microseconds on one core) BLIS's
   * threads cost more at their barriers than they save, and far more when
   * the machine is oversubscribed (a descheduled thread stalls the barrier
   * for a whole time slice). */
  if ((double)m * (double)n * (double)k < LT__BLAS_SMALL_MACS) single = true;
  const int nt = single || omp_in_parallel() ? 1 : lt_get_num_threads();
  /* Splitting a gemv over threads pays from the same size as gemm's
   * (measured: smaller thresholds slowed decoding, thread wake-ups cost more
   * than the bandwidth they add). */
  if ((m == 1 || n == 1) && k > 0 && (dtype == LT_DTYPE_F32 || dtype == LT_DTYPE_F64)) {
    lt__prod p = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, false};
    if (p.m != 1) p = lt__prod_t(p); /* the one row of C */
    /* x W^T with both contiguous along k (every Linear of a decoding step): the dot kernel, a few
     * streams of W at once (BLIS's gemv read them at 25 of the machine's 37 GB/s: docs/decoding.md) */
    if (skinny_on() && skinny_dot_layout(&p)) {
      p.flag = true;
      run_blocks(&p, p.n, nt, lt__small_skinny_block);
    } else
      run_blocks(&p, p.n, nt, lt__blis_gemv_block);
    return LT_OK;
  }
  const lt__prod pr = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, false};
  if (k > 0 && (gemm_small(pr, nt) || gemm_skinny(pr, nt))) return LT_OK;
  if (nt > 1 && (dtype == LT_DTYPE_F32 || dtype == LT_DTYPE_F64) && lt__path_on(LT__PATH_gemm_threads_split)) {
    const lt__prod p = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, m >= n};
    run_blocks(&p, m >= n ? m : n, nt, lt__blis_gemm_block);
    return LT_OK;
  }
  if (dtype != LT_DTYPE_F32 && dtype != LT_DTYPE_F64)
    return lt__err(LT_ERR_DTYPE, "gemm: dtype %s is not supported by BLIS (f32, f64 only)", lt_dtype_name(dtype));
  const lt__prod p = {dtype, m, n, k, alpha, beta, a, b, c, rsa, csa, rsb, csb, rsc, csc, false};
  lt__blis_gemm(&p, single);
  return LT_OK;
}

/* ---- packed B ------------------------------------------------------------ */

static int64_t pack_floats(int64_t k, int64_t n) {
  const int mode = small_mode();
  if (mode == 0 || k < 1 || n < 1 || !small_whole(mode, n, k)) return 0;
  return (n + SP_W - 1) / SP_W * k * SP_W; /* gemm_panel's layout for one chunk */
}

/* ---- the entry: autocast, bf16, f32 and f64 ------------------------------- */

/* lt__mat_gemm, and lt__mat_gemm_bias when bias is not NULL (then an
 * autocast product: the bias goes to oneDNN). */
static lt_status mat_gemm(lt_dtype dt, bool one_thread, double alpha, lt__mat a, lt__mat b, double beta, lt__mat c,
                          const float *bias) {
  LT_CHECK(a.rows == c.rows && b.cols == c.cols && a.cols == b.rows);
  lt_status st = lt__ensure_init(); /* the runtime sets up the engines (BLIS's kernel, threads) first */
  if (st != LT_OK) return st;
  const bool bf16_ok = lt__path_on(LT__PATH_gemm_bf16_dnnl); /* else bf16 widened for BLIS, autocast off */
  if (dt == LT_DTYPE_F32 && lt_autocast_dtype() == LT_DTYPE_BF16 && bf16_ok && a.cols > 0 && c.rows > 0 && c.cols > 0) {
    /* Autocast: bf16 copies of the f32 operands, f32 accumulation, f32 out. */
    if ((st = lt__autocast_operand(0, a, one_thread, &a)) != LT_OK ||
        (st = lt__autocast_operand(1, b, one_thread, &b)) != LT_OK)
      return st;
    dt = LT_DTYPE_BF16;
  } else if (dt == LT_DTYPE_F32 && (a.bf16 || b.bf16)) {
    /* A bf16 copy (lt__autocast_input) in an f32 product outside autocast: widened, exactly. */
    if ((a.bf16 && (st = lt__autocast_widen(0, a, one_thread, &a)) != LT_OK) ||
        (b.bf16 && (st = lt__autocast_widen(1, b, one_thread, &b)) != LT_OK))
      return st;
  } else if (dt == LT_DTYPE_BF16 && !bf16_ok) {
    /* No bf16 matmul in oneDNN for this CPU: widen (exactly) and use BLIS. */
    if ((st = lt__autocast_widen(0, a, one_thread, &a)) != LT_OK ||
        (st = lt__autocast_widen(1, b, one_thread, &b)) != LT_OK)
      return st;
    dt = LT_DTYPE_F32;
  }
  if (dt == LT_DTYPE_BF16)
    return lt__dnnl_gemm_bf16(one_thread, c.rows, c.cols, a.cols, (float)alpha, a.data, a.rs, a.cs, b.data, b.rs,
                              b.cs, (float)beta, c.data, c.rs, c.cs, bias);
  LT_CHECK(!bias);
  return gemm(dt, c.rows, c.cols, a.cols, alpha, a.data, a.rs, a.cs, b.data, b.rs, b.cs, beta, c.data, c.rs, c.cs,
              one_thread);
}

lt_status lt__mat_gemm(lt_dtype dt, bool one_thread, double alpha, lt__mat a, lt__mat b, double beta, lt__mat c) {
  return mat_gemm(dt, one_thread, alpha, a, b, beta, c, NULL);
}

int64_t lt__mat_pack_floats(int64_t k, int64_t n) { return lt__autocast_active() ? 0 : pack_floats(k, n); }

void lt__mat_pack(lt__mat b, float *dst) {
  LT_CHECK(!b.bf16);
  lt__small_pack(b.rows, b.cols, b.data, b.rs, b.cs, dst);
}

void lt__mat_gemm_packed(double alpha, lt__mat a, const float *bp, int64_t pn, double beta, lt__mat c) {
  LT_CHECK(a.rows == c.rows && !a.bf16);
  lt__small_gemm_packed(c.rows, c.cols, a.cols, (float)alpha, a.data, a.rs, a.cs, bp, pn, (float)beta, c.data,
                        c.rs, c.cs);
}

lt_status lt__mat_gemm_bias(bool one_thread, lt__mat a, lt__mat b, const float *bias, lt__mat c) {
  LT_CHECK(lt__autocast_active() && bias);
  return mat_gemm(LT_DTYPE_F32, one_thread, 1.0, a, b, 0.0, c, bias);
}