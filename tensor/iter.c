/*
 * tensor/iter.c: the strided N-d iterator behind every elementwise kernel.
 *
 * It broadcasts operands to a common shape (stride 0), drops size-1 dims,
 * merges dims that are contiguous for every operand, and then calls an inner
 * loop over the last dim. Work is split into tasks (an outer index and a chunk
 * of the inner dim) and handed out statically to OpenMP threads, so the same
 * element always goes through the same code and results do not depend on the
 * number of threads. It deliberately does not reorder dims (the output's order
 * is kept); transposed inputs are still correct, just strided.
 */
#include "tensor/error_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/iter_internal.h"

#include <omp.h>

void lt__iter_init(lt__iter *it, int ndim, const int64_t *shape, int nops,
                   const lt_tensor *const *ops) {
  LT_CHECK(nops >= 1 && nops <= LT__ITER_MAX_OPS && ndim >= 0 && ndim <= LT_MAX_DIMS);
  int64_t sh[LT_MAX_DIMS];
  int64_t st[LT__ITER_MAX_OPS][LT_MAX_DIMS];
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    sh[i] = shape[i];
    numel *= shape[i];
  }
  it->nops = nops;
  for (int k = 0; k < nops; k++) {
    const lt_tensor *t = ops[k];
    LT_CHECK(t->ndim <= ndim);
    int64_t es = (int64_t)lt_dtype_size(t->dtype);
    it->data[k] = (char *)t->data;
    for (int i = 0; i < ndim; i++) {
      int j = i - (ndim - t->ndim);
      if (j < 0 || (t->shape[j] == 1 && shape[i] != 1)) {
        st[k][i] = 0;
      } else {
        LT_CHECK(t->shape[j] == shape[i]);
        st[k][i] = t->stride[j] * es;
      }
    }
  }
  /* Drop size-1 dims, then merge (outer, inner) pairs contiguous for all ops. */
  int n = 0;
  int64_t csh[LT_MAX_DIMS];
  int64_t cst[LT__ITER_MAX_OPS][LT_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    if (sh[i] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < nops && merge; k++)
      if (cst[k][n - 1] != st[k][i] * sh[i]) merge = false;
    if (merge) {
      csh[n - 1] *= sh[i];
      for (int k = 0; k < nops; k++) cst[k][n - 1] = st[k][i];
    } else {
      csh[n] = sh[i];
      for (int k = 0; k < nops; k++) cst[k][n] = st[k][i];
      n++;
    }
  }
  if (n == 0) { /* a single element (or 0-d) */
    csh[0] = 1;
    for (int k = 0; k < nops; k++) cst[k][0] = 0;
    n = 1;
  }
  if (numel == 0) { /* keep a zero in the shape so run does nothing */
    csh[0] = 0;
    n = 1;
  }
  it->ndim = n;
  it->numel = numel;
  for (int i = 0; i < n; i++) {
    it->shape[i] = csh[i];
    for (int k = 0; k < nops; k++) it->stride[k][i] = cst[k][i];
  }
}

/* Runs tasks [t0, t1); task t is chunk (t % nchunks) of outer index (t / nchunks). */
static void run_range(const lt__iter *it, int64_t chunk, int64_t nchunks, int64_t t0,
                      int64_t t1, lt__loop_fn fn, void *ctx) {
  const int od = it->ndim - 1; /* number of outer dims */
  const int nops = it->nops;
  const int64_t inner = it->shape[od];
  int64_t idx[LT_MAX_DIMS];
  char *base[LT__ITER_MAX_OPS];
  char *ptrs[LT__ITER_MAX_OPS];
  int64_t istr[LT__ITER_MAX_OPS];
  int64_t o = t0 / nchunks, c = t0 % nchunks, rem = o;
  for (int d = od - 1; d >= 0; d--) {
    idx[d] = rem % it->shape[d];
    rem /= it->shape[d];
  }
  for (int k = 0; k < nops; k++) {
    base[k] = it->data[k];
    for (int d = 0; d < od; d++) base[k] += idx[d] * it->stride[k][d];
    istr[k] = it->stride[k][od];
  }
  for (int64_t t = t0; t < t1; t++) {
    int64_t start = c * chunk;
    int64_t cnt = inner - start < chunk ? inner - start : chunk;
    for (int k = 0; k < nops; k++) ptrs[k] = base[k] + start * istr[k];
    fn(cnt, ptrs, istr, ctx);
    if (++c == nchunks) {
      c = 0;
      for (int d = od - 1; d >= 0; d--) {
        for (int k = 0; k < nops; k++) base[k] += it->stride[k][d];
        if (++idx[d] < it->shape[d]) break;
        for (int k = 0; k < nops; k++) base[k] -= it->stride[k][d] * it->shape[d];
        idx[d] = 0;
      }
    }
  }
}

void lt__iter_run(const lt__iter *it, lt__loop_fn fn, void *ctx, bool parallel) {
  if (it->numel == 0) return;
  const int64_t inner = it->shape[it->ndim - 1];
  const int64_t outer = it->numel / inner;
  int nthreads = parallel && it->numel >= LT__PARALLEL_MIN ? lt_get_num_threads() : 1;
  if (nthreads <= 1) {
    run_range(it, inner, 1, 0, outer, fn, ctx);
    return;
  }
  /* Enough tasks for about 4 per thread, chunks of at least 4096 elements. */
  int64_t nchunks = 1;
  if (outer < 4 * (int64_t)nthreads) {
    nchunks = (4 * (int64_t)nthreads + outer - 1) / outer;
    int64_t max_chunks = (inner + 4095) / 4096;
    if (nchunks > max_chunks) nchunks = max_chunks;
    if (nchunks < 1) nchunks = 1;
  }
  const int64_t chunk = (inner + nchunks - 1) / nchunks;
  nchunks = (inner + chunk - 1) / chunk;
  const int64_t ntasks = outer * nchunks;
#pragma omp parallel num_threads(nthreads)
  {
    int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t t0 = ntasks * id / T, t1 = ntasks * (id + 1) / T;
    if (t0 < t1) run_range(it, chunk, nchunks, t0, t1, fn, ctx);
  }
}
