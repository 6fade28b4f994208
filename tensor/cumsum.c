/*
 * tensor/cumsum.c: the running sum along one dim (lt_cumsum) and its
 * backward, a running sum from the back.
 *
 * What this is not: a reduction (tensor/reduce.c) or a general scan: no
 * cumprod, cummax or logcumsumexp.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/reduce_internal.h"

#include <omp.h>

/* Running sums along n of a contiguous [outer, n, inner] tensor, line by line
 * (line l is (o, j) = (l / inner, l % inner)), from the front (the forward)
 * or from the back (the backward: dx[i] = sum over k >= i of g[k]). Floats
 * accumulate in double, as PyTorch's CPU kernel (acc_type), storing each
 * partial sum rounded once; integers and bool accumulate in wrapping 64 bits
 * (ACC uint64_t) into i64. A line runs on one thread in a fixed order, so
 * results do not depend on the thread count. */
#define CUMSUM_KERNEL(NAME, TI, TO, ACC, LOAD)                                             \
  static void cumsum_##NAME(const TI *x, TO *y, lt__dim_geom g, bool reverse, int64_t l0,        \
                            int64_t l1) {                                                 \
    for (int64_t l = l0; l < l1; l++) {                                                   \
      const int64_t base = (l / g.inner) * g.n * g.inner + l % g.inner;                   \
      ACC s = 0;                                                                          \
      for (int64_t k = 0; k < g.n; k++) {                                                 \
        const int64_t i = base + (reverse ? g.n - 1 - k : k) * g.inner;                   \
        s += LOAD(x[i]);                                                                  \
        y[i] = (TO)s;                                                                     \
      }                                                                                   \
    }                                                                                     \
  }
#define CS_LOAD_F(v) ((double)(v))
#define CS_LOAD_I(v) ((uint64_t)(int64_t)(v))
CUMSUM_KERNEL(f32, float, float, double, CS_LOAD_F)
CUMSUM_KERNEL(f64, double, double, double, CS_LOAD_F)
CUMSUM_KERNEL(i32, int32_t, int64_t, uint64_t, CS_LOAD_I)
CUMSUM_KERNEL(i64, int64_t, int64_t, uint64_t, CS_LOAD_I)
CUMSUM_KERNEL(b8, uint8_t, int64_t, uint64_t, CS_LOAD_I)

/* x (contiguous, any dtype) -> y (contiguous: x's float dtype, else i64). */
static void cumsum_run(const lt_tensor *x, lt_tensor *y, int d, bool reverse) {
  const lt__dim_geom g = lt__dim_geom_of(x, d);
  const int64_t lines = g.outer * g.inner;
  if (x->numel == 0) return;
  const int nt = lt__threads_for(x->numel, lines);
  /* contiguous chunks of lines per thread (static): fixed work per line */
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t l0 = lines * id / T, l1 = lines * (id + 1) / T;
    switch (x->dtype) {
      case LT_DTYPE_F32: cumsum_f32(x->data, y->data, g, reverse, l0, l1); break;
      case LT_DTYPE_F64: cumsum_f64(x->data, y->data, g, reverse, l0, l1); break;
      case LT_DTYPE_I32: cumsum_i32(x->data, y->data, g, reverse, l0, l1); break;
      case LT_DTYPE_I64: cumsum_i64(x->data, y->data, g, reverse, l0, l1); break;
      default: cumsum_b8(x->data, y->data, g, reverse, l0, l1); break;
    }
  }
}

/* The dtype a cumsum of d runs in: bf16 in f32 (its result rounded back
 * once, as the reductions do), the others in their own. */
static lt_dtype cumsum_wide(lt_dtype d) { return d == LT_DTYPE_BF16 ? LT_DTYPE_F32 : d; }

/* The dtype of a cumsum of d: floats keep theirs, integers and bool give i64. */
static lt_dtype cumsum_dtype(lt_dtype d) { return lt_dtype_is_floating(d) ? d : LT_DTYPE_I64; }

lt_tensor *lt_cumsum(const lt_tensor *x, int dim) {
  const char *op = "cumsum";
  if (!x) return lt__err_null(op, "x"), NULL;
  int d;
  if (lt__wrap_dim(op, dim, x->ndim, &d) != LT_OK) return NULL;
  lt_tensor *xt;
  const lt_tensor *xc = lt__as_contig(x, cumsum_wide(x->dtype), &xt);
  if (!xc) return NULL;
  lt_tensor *y = lt_empty(cumsum_dtype(xc->dtype), x->ndim, x->shape);
  if (y) cumsum_run(xc, y, d, false);
  lt_tensor_free(xt);
  if (!(y = lt__reduce_narrow(y, cumsum_dtype(x->dtype)))) return NULL;
  if (y && lt__needs_grad(1, &x)) {
    const int aux = d; /* the dim (wrapped) */
    if (lt__record(y, LT__OP_cumsum, 1, &x, 0, NULL, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(y);
      return NULL;
    }
  }
  return y;
}

/* y = cumsum(x) along dim: dx[i] = sum over k >= i of g[k] (a reversed cumsum
 * of g). Nothing saved. */
lt_status lt__bw_cumsum(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const int dim = *(const int *)node->aux;
  lt_tensor *gc;
  const lt_tensor *g = lt__as_contig(gout, cumsum_wide(node->in[0].dtype), &gc);
  if (!g) return lt_last_status();
  lt_tensor *dx = lt_empty(g->dtype, g->ndim, g->shape);
  if (dx) cumsum_run(g, dx, dim, true);
  lt_tensor_free(gc);
  if (!(dx = lt__reduce_narrow(dx, node->in[0].dtype))) return lt_last_status();
  return lt__set_gin(gin, dx);
}
