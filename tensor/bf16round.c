/*
 * tensor/bf16round.c: the bf16 rounding kernels (tensor/bf16round_internal.h):
 * f32 runs and matrix views rounded to bf16 (lt__bf16_from_f32's bits,
 * vectorised by LT__CLONES), bf16 widened back to f32, and a Linear's output
 * gradient copied to bf16 with its column sums in the same pass.
 *
 * What this is not: autocast's policy or caches (tensor/autocast.c decides
 * what is converted and keeps the copies) nor a product kernel (the bf16 tile
 * kernels are tensor/bf16dot.c's, the bf16 GEMM oneDNN's).
 */
#include "tensor/bf16round_internal.h"

#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/threads_internal.h"

#include <omp.h>
#include <stdlib.h>

lt__bf16_geom lt__bf16_geom_of(lt__mat x) {
  const bool colmajor = x.rs == 1 && x.cs != 1;
  return (lt__bf16_geom){colmajor, colmajor ? x.cols : x.rows, colmajor ? x.rows : x.cols, colmajor ? x.cs : x.rs,
                     colmajor ? x.rs : x.cs};
}

/* One contiguous run to bf16: the loop that vectorises (AVX-512: 16 per
 * instruction). Static, behind lt__bf16_run: GCC gives the resolver of a
 * global target_clones function default visibility, which would export it. */
LT__CLONES static void bf16_run(uint16_t *restrict dst, const float *restrict src, int64_t n) {
  for (int64_t j = 0; j < n; j++) dst[j] = lt__bf16_from_f32(src[j]);
}

void lt__bf16_run(uint16_t *restrict dst, const float *restrict src, int64_t n) { bf16_run(dst, src, n); }

/* n elements at src (stride si) to bf16 at dst (contiguous). */
static void bf16_line(uint16_t *restrict dst, const float *restrict src, int64_t n, int64_t si) {
  if (si == 1) lt__bf16_run(dst, src, n);
  else
    for (int64_t j = 0; j < n; j++) dst[j] = lt__bf16_from_f32(src[j * si]);
}

void lt__mat_bf16_rows(lt__mat x, uint16_t *dst) {
  for (int64_t i = 0; i < x.rows; i++) bf16_line(dst + i * x.cols, (const float *)x.data + i * x.rs, x.cols, x.cs);
}

/* x (f32 when to is bf16, bf16 when to is f32) converted into buf (g's
 * outer*inner elements of to), on one thread or libtensor's. */
void lt__bf16_convert(lt__mat x, lt__bf16_geom g, lt_dtype to, void *buf, bool one_thread) {
  const int nt = one_thread ? 1 : lt__threads_for(g.outer * g.inner, g.outer);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t o = 0; o < g.outer; o++) {
    if (to == LT_DTYPE_BF16) {
      bf16_line((uint16_t *)buf + o * g.inner, (const float *)x.data + o * g.so, g.inner, g.si);
    } else {
      const uint16_t *src = (const uint16_t *)x.data + o * g.so;
      float *dst = (float *)buf + o * g.inner;
      for (int64_t j = 0; j < g.inner; j++) dst[j] = lt__f32_from_bf16(src[j * g.si]);
    }
  }
}

/* One row's run of n columns: bf16 copies and the running column sums. */
LT__CLONES static void
bf16_colsum_run(uint16_t *restrict dst, const float *restrict src, double *restrict acc, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    dst[j] = lt__bf16_from_f32(src[j]);
    acc[j] += (double)src[j];
  }
}

/* Two consecutive rows (a then b) at once: acc[j] + a[j] + b[j] in that
 * order, the bits of two calls of bf16_colsum_run, with one load and store
 * of the sums instead of two. */
LT__CLONES static void
bf16_colsum_run2(uint16_t *restrict da, uint16_t *restrict db, const float *restrict a, const float *restrict b,
                 double *restrict acc, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    da[j] = lt__bf16_from_f32(a[j]);
    db[j] = lt__bf16_from_f32(b[j]);
    acc[j] = (acc[j] + (double)a[j]) + (double)b[j];
  }
}

#define CS_ALIGN 16 /* a thread's first column: a multiple of this (64 bytes of f32) */

/* The copy and sums of columns [j0, j0 + m), every row in order. Contiguous
 * rows (cs 1) are read row by row over the whole column range, two rows at
 * a time: a stream the hardware prefetcher follows. Not blocks of columns
 * over all rows: that reads a few hundred bytes per row at a stride of the
 * row length, a new page per row once rows are 4 KiB, which the prefetcher
 * does not follow (figures: docs/mixed-precision.md, "Figures behind the code's rules"). */
static void colsum_cols(lt__mat g, uint16_t *dst, double *acc, int64_t j0, int64_t m, bool sums) {
  const int64_t N = g.rows, M = g.cols;
  const float *src0 = (const float *)g.data + j0 * g.cs;
  uint16_t *dst0 = dst + j0;
  if (g.cs != 1) {
    for (int64_t i = 0; i < N; i++) {
      const float *src = src0 + i * g.rs;
      uint16_t *d = dst0 + i * M;
      for (int64_t j = 0; j < m; j++) {
        d[j] = lt__bf16_from_f32(src[j * g.cs]);
        if (sums) acc[j] += (double)src[j * g.cs];
      }
    }
    return;
  }
  if (!sums) { /* no bias: the copy alone */
    for (int64_t i = 0; i < N; i++) lt__bf16_run(dst0 + i * M, src0 + i * g.rs, m);
    return;
  }
  int64_t i = 0;
  for (; i + 1 < N; i += 2)
    bf16_colsum_run2(dst0 + i * M, dst0 + (i + 1) * M, src0 + i * g.rs, src0 + (i + 1) * g.rs, acc, m);
  if (i < N) bf16_colsum_run(dst0 + i * M, src0 + i * g.rs, acc, m);
}

lt_status lt__bf16_colsum(lt__mat g, uint16_t *dst, float *colsum) {
  const int64_t N = g.rows, M = g.cols;
  if (N * M == 0) {
    if (colsum)
      for (int64_t j = 0; j < M; j++) colsum[j] = 0.0f;
    return LT_OK;
  }
  /* The f64 sums of all columns: each thread owns a range of columns and
   * adds every row in order, so each column's sum is the same sequence of
   * additions on any thread count. */
  double *acc = colsum ? calloc((size_t)M, sizeof *acc) : NULL;
  if (colsum && !acc)
    return lt__err(LT_ERR_NOMEM, "linear backward: cannot allocate the bias gradient's sums of %lld columns",
                   (long long)M);
  const int64_t units = (M + CS_ALIGN - 1) / CS_ALIGN;
  const int nt = lt__threads_for(N * M, units);
#pragma omp parallel num_threads(nt) if (nt > 1)
  { /* split by the team OpenMP gave, which may be smaller than nt */
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t u0 = units * t / team, u1 = units * (t + 1) / team;
    const int64_t j0 = u0 * CS_ALIGN, j1 = u1 * CS_ALIGN < M ? u1 * CS_ALIGN : M;
    if (j1 > j0) colsum_cols(g, dst, acc ? acc + j0 : NULL, j0, j1 - j0, colsum != NULL);
  }
  if (colsum)
    for (int64_t j = 0; j < M; j++) colsum[j] = (float)acc[j];
  free(acc);
  return LT_OK;
}
