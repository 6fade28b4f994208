/*
 * tensor/blis.c: BLIS, and only BLIS: the only file of the library that
 * includes blis.h (tensor/blis_internal.h).
 *
 * What it holds: the choice of BLIS's kernel set before BLIS initialises
 * (Debian's BLIS 0.9.0 does not recognise every CPU and would fall back to
 * slow generic kernels: docs/gemm.md), BLIS's thread count, and bli_?gemm /
 * bli_?gemv with general strides: a whole product, or one block of a
 * product's rows or columns on one thread.
 *
 * What it is not: a choice of engine, threads or split (tensor/gemm.c, the
 * GEMM dispatch, decides which products come here and how they are cut),
 * nor the small-product kernels (tensor/gemm_small.c).
 */
#include "tensor/blis_internal.h"

#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"

#include <blis.h>
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
  const char *features; /* space-separated lt__cpu_info fields */
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
  const lt__cpu_info *c = lt__cpu();
#define F(x) if (!strcmp(feature, #x)) return c->x;
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
  const char *env = lt__setting_get(LT__SETTING_BLIS_ARCH_TYPE);
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
      setenv(lt__setting_name(LT__SETTING_BLIS_ARCH_TYPE), num, 1);
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
    setenv(lt__setting_name(LT__SETTING_BLIS_ARCH_TYPE), num, 1);
    size_t len = strlen(arch_why);
    snprintf(arch_why + len, sizeof arch_why - len, "'%s' from the CPU's flags (%s)", e->name,
             *e->features ? e->features : "none");
    return;
  }
}

void lt__blis_init(void) {
  choose_arch();
  bli_init();
}

const char *lt__blis_arch(void) { return bli_arch_string(bli_arch_query_id()); }
const char *lt__blis_arch_why(void) { return arch_why; }
bool lt__blis_arch_from_user(void) { return arch_from_user; }
void lt__blis_set_threads(int n) { bli_thread_set_num_threads(n); }

/* ---- products ----------------------------------------------------------- */

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
 * do not depend on the thread count. (the dispatch's run_blocks + lt__blis_gemm_block) */
/* Rows [lo, lo+len) of C and A (p->flag), or columns of C and B. */
void lt__blis_gemm_block(const lt__prod *p, int64_t lo, int64_t len) {
  const size_t es = lt__prod_elem_size(p->dtype);
  const bool by_rows = p->flag;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &rntm);
  const char *pa = (const char *)p->a + (by_rows ? (size_t)(lo * p->rsa) * es : 0);
  const char *pb = (const char *)p->b + (by_rows ? 0 : (size_t)(lo * p->csb) * es);
  char *pc = (char *)p->c + (size_t)(lo * (by_rows ? p->rsc : p->csc)) * es;
  const int64_t mm = by_rows ? len : p->m, nn = by_rows ? p->n : len, k = p->k;
  int64_t rsa = p->rsa, csa = p->csa, rsb = p->rsb, csb = p->csb, rsc = p->rsc, csc = p->csc;
  lt__prod_fix_strides(mm, k, &rsa, &csa);
  lt__prod_fix_strides(k, nn, &rsb, &csb);
  lt__prod_fix_strides(mm, nn, &rsc, &csc);
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
 * operand for a single row, which costs more than the product (a cached
 * decoding step, where every Linear has one row, was mostly packing:
 * docs/decoding.md, "Where the cached time goes"); gemv streams it once. With nt > 1 threads
 * the long dimension of C is split by the dispatch's run_blocks, each block one
 * single-threaded gemv; every element of C is the same dot product
 * whatever the split, so results do not depend on the thread count. */
void lt__blis_gemv_block(const lt__prod *p, int64_t lo, int64_t len) {
  const size_t es = lt__prod_elem_size(p->dtype);
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

/* The whole product on BLIS's threads, or on this thread only (one_thread).
 * Strides fixed by the dispatch; f32 or f64. */
void lt__blis_gemm(const lt__prod *p, bool one_thread) {
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  rntm_t *r = NULL;
  if (one_thread) {
    bli_rntm_set_num_threads(1, &rntm);
    r = &rntm;
  }
  if (p->dtype == LT_DTYPE_F32) {
    float al = (float)p->alpha, be = (float)p->beta;
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, p->m, p->n, p->k, &al, (float *)p->a, p->rsa, p->csa,
                 (float *)p->b, p->rsb, p->csb, &be, p->c, p->rsc, p->csc, NULL, r);
  } else {
    double al = p->alpha, be = p->beta;
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, p->m, p->n, p->k, &al, (double *)p->a, p->rsa, p->csa,
                 (double *)p->b, p->rsb, p->csb, &be, p->c, p->rsc, p->csc, NULL, r);
  }
}
