/*
 * tensor/qgemm_bf16.c: y = x W^T for a bf16 lt_qmatrix W on oneDNN's bf16
 * matmul (tensor/dnnl_internal.h), the path lt_qmatrix_linear takes for
 * prompts and batches: M >= LT__QGEMM_BF16_MIN_ROWS rows of x, and a CPU
 * where oneDNN has a bf16 matmul. x is rounded to bf16 (round to nearest
 * even, lt__bf16_from_f32) and the products are summed in f32 by oneDNN,
 * as autocast's bf16 products are (docs/mixed-precision.md); the bias is
 * added to the f32 accumulator. W's rows are used in place: W [N, K]
 * row-major is B = W^T [K, N] with strides (1, K), never copied.
 *
 * What it is not: the decoding path. With a few rows (one token a step) the
 * hand loop of tensor/qgemm.c, which keeps x in f32 and reads W once, is
 * as fast (the product is bound by reading W) and closer to f32; oneDNN's
 * blocked kernel wins once there are rows to reuse each weight over
 * (docs/decoding.md gives the figures).
 */
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

#include "tensor/dnnl_internal.h"
#include "tensor/error_internal.h"
#include "tensor/threads_internal.h" /* omp_in_parallel */
#include "tensor/storage_internal.h" /* lt__bf16_from_f32 */

#include <stdlib.h>

static int64_t min_rows = LT__QGEMM_BF16_MIN_ROWS;

int64_t lt__qgemm_bf16_min_rows(int64_t m) {
  const int64_t prev = min_rows;
  min_rows = m;
  return prev;
}

bool lt__qgemm_bf16_wanted(const lt_qmatrix *w, int64_t M) {
  return lt_qmatrix_format(w) == LT_QFORMAT_BF16 && M >= min_rows && lt__dnnl_bf16_available();
}

lt_status lt__qgemm_bf16(const lt_qmatrix *w, const float *x, int64_t M, float *y, const float *bias) {
  const int64_t N = lt_qmatrix_rows(w), K = lt_qmatrix_cols(w);
  uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)(M * K > 0 ? M * K : 1));
  if (!xb) return lt__err(LT_ERR_NOMEM, "qmatrix_linear: x [%lld, %lld] in bf16", (long long)M, (long long)K);
  for (int64_t i = 0; i < M * K; i++) xb[i] = lt__bf16_from_f32(x[i]);
  const lt_status s = lt__dnnl_gemm_bf16(omp_in_parallel(), M, N, K, 1.0f, xb, K, 1, lt_qmatrix_data(w), 1, K, 0.0f,
                                         y, N, 1, bias);
  free(xb);
  return s;
}
