/*
 * nn/gru.c: the GRU recurrence op (lt_gru_recurrence, forward and backward
 * side by side) and nn.GRU's forward (lt_gru_forward), with the treatment
 * nn/lstm.c gives the LSTM: the input projection of all steps is one product
 * before the op; per step one GEMM through lt__mat_gemm and one fused pass
 * (gates and state) over preallocated [T, ...] buffers, no allocation or
 * autograd node per step; f32 gates use tensor/vmath.h. lt_gru_init lives
 * with the other modules' registration in nn/layers.c; the stacking of
 * layers and directions is nn/rnn.c's, shared with the LSTM.
 *
 *   forward, step t (gate order r, z, n as PyTorch's weights):
 *     A   = h_{t-1} W_hh^T                                   [B, 3H] (one GEMM)
 *     r   = sigmoid(xg_r + A_r),  z = sigmoid(xg_z + A_z)
 *     hn  = A_n + b_hn,           n = tanh(xg_n + r hn)
 *     h_t = (h_{t-1} - n) z + n                              (ATen's gru_cell)
 *   with xg = x W_ih^T + b_ih + [b_hr, b_hz, 0]: the r and z parts of b_hh
 *   fold into the projection, b_hn cannot (r multiplies it). Saved: r, z, n,
 *   hn per step ([T, B, 4H]) and the output.
 *   backward, t = T-1 .. 0 (dh carries from step t+1):
 *     dh_t = gout[t] + dh
 *     dn~  = dh_t (1 - z) (1 - n^2),   dz~ = dh_t (h_{t-1} - n) z (1 - z)
 *     dr~  = dn~ hn r (1 - r)
 *     dxg  = [dr~, dz~, dn~],  dA = [dr~, dz~, dn~ r]
 *     dh   = dh_t z + dA W_hh                                (one GEMM)
 *   then dW_hh = sum_t dA[t]^T h_{t-1} (one GEMM over all T*B rows), db_hn =
 *   the sum of dA's n part, dh0 = dh.
 *
 * What this is not: the registration (nn/layers.c) or the layer stacking
 * (nn/rnn.c).
 */
#include "nn/lstm.h"

#include "tensor/graph_internal.h"
#include "nn/rnn_internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/vmath.h"

#include <math.h>
#include <string.h>

/* ======================================================================== */
/* Fused cell kernels (one row b of B, all H units)                          */
/* ======================================================================== */

/* Forward of one row: x [3H] projections, A [3H] = h_{t-1} W_hh^T, bn [H]
 * (NULL: no b_hn), hp [H] the previous state (NULL: zeros); G [4H] out (r,
 * z, n, hn), h [H] out. */
#define GRU_CELL_BODY(TY, SIG, TANH, BN, HP)                                   \
  _Pragma("omp simd") for (int64_t j = 0; j < H; j++) {                        \
    const TY r = SIG(x[j] + A[j]), z = SIG(x[H + j] + A[H + j]);               \
    const TY hn = A[2 * H + j] + (BN);                                         \
    const TY n = TANH(x[2 * H + j] + r * hn);                                  \
    G[j] = r, G[H + j] = z, G[2 * H + j] = n, G[3 * H + j] = hn;               \
    h[j] = ((HP) - n) * z + n;                                                 \
  }
#define GRU_CELL_FWD(NAME, TY, SIG, TANH)                                                                  \
  LT__CLONES static void NAME(const TY *restrict x, const TY *restrict A, const TY *restrict bn,         \
                               const TY *restrict hp, TY *restrict G, TY *restrict h, int64_t H) {        \
    if (hp && bn) {                                                                                        \
      GRU_CELL_BODY(TY, SIG, TANH, bn[j], hp[j])                                                           \
    } else if (hp) {                                                                                       \
      GRU_CELL_BODY(TY, SIG, TANH, (TY)0, hp[j])                                                           \
    } else if (bn) {                                                                                       \
      GRU_CELL_BODY(TY, SIG, TANH, bn[j], (TY)0)                                                           \
    } else {                                                                                               \
      GRU_CELL_BODY(TY, SIG, TANH, (TY)0, (TY)0)                                                           \
    }                                                                                                      \
  }

/* Backward of one row: G [4H] saved, hp [H] (NULL: zeros), gh [H] this
 * step's output gradient, dh [H] the carry in (replaced by dh_t z, to which
 * the caller adds dA W_hh); dX [3H], dA [3H] out. */
#define GRU_CELL_BWD_BODY(TY, HP)                                             \
  _Pragma("omp simd") for (int64_t j = 0; j < H; j++) {                       \
    const TY r = G[j], z = G[H + j], n = G[2 * H + j], hn = G[3 * H + j];     \
    const TY dht = gh[j] + dh[j];                                             \
    const TY dnp = dht * ((TY)1 - z) * ((TY)1 - n * n);                       \
    const TY dzp = dht * ((HP) - n) * z * ((TY)1 - z);                        \
    const TY drp = dnp * hn * r * ((TY)1 - r);                                \
    dX[j] = drp, dX[H + j] = dzp, dX[2 * H + j] = dnp;                        \
    dA[j] = drp, dA[H + j] = dzp, dA[2 * H + j] = dnp * r;                    \
    dh[j] = dht * z;                                                          \
  }
#define GRU_CELL_BWD(NAME, TY)                                                                             \
  LT__CLONES static void NAME(const TY *restrict G, const TY *restrict hp, const TY *restrict gh,        \
                               TY *restrict dh, TY *restrict dX, TY *restrict dA, int64_t H) {            \
    if (hp) {                                                                                              \
      GRU_CELL_BWD_BODY(TY, hp[j])                                                                         \
    } else {                                                                                               \
      GRU_CELL_BWD_BODY(TY, (TY)0)                                                                         \
    }                                                                                                      \
  }

static inline double sigmoid_d(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

GRU_CELL_FWD(gru_fwd_f32, float, lt__vsigmoidf, lt__vtanhf)
GRU_CELL_FWD(gru_fwd_f64, double, sigmoid_d, tanh)
GRU_CELL_BWD(gru_bwd_f32, float)
GRU_CELL_BWD(gru_bwd_f64, double)

/* The rows of one step, threaded over b (rows are independent: results do not
 * depend on the thread count); a row element costs about 12 copied ones (3
 * exp-based functions). x rows at xd + (b * xs) elements. */
static void cell_fwd(lt_dtype dt, const char *xd, int64_t xs, const char *A, const char *bn, const char *hp, char *G,
                     char *h, int64_t B, int64_t H) {
  const size_t es = lt_dtype_size(dt), a3 = (size_t)(3 * H) * es, g4 = (size_t)(4 * H) * es, hr = (size_t)H * es;
#pragma omp parallel for schedule(static) num_threads(lt__threads_for(B * H * 12, B))
  for (int64_t b = 0; b < B; b++) {
    const char *xb = xd + (size_t)(b * xs) * es, *Ab = A + (size_t)b * a3, *hpb = hp ? hp + (size_t)b * hr : NULL;
    char *Gb = G + (size_t)b * g4, *hb = h + (size_t)b * hr;
    if (dt == LT_DTYPE_F32)
      gru_fwd_f32((const float *)xb, (const float *)Ab, (const float *)bn, (const float *)hpb, (float *)Gb,
                  (float *)hb, H);
    else
      gru_fwd_f64((const double *)xb, (const double *)Ab, (const double *)bn, (const double *)hpb, (double *)Gb,
                  (double *)hb, H);
  }
}

static void cell_bwd(lt_dtype dt, const char *G, const char *hp, const char *gh, char *dh, char *dX, char *dA,
                     int64_t B, int64_t H) {
  const size_t es = lt_dtype_size(dt), a3 = (size_t)(3 * H) * es, g4 = (size_t)(4 * H) * es, hr = (size_t)H * es;
#pragma omp parallel for schedule(static) num_threads(lt__threads_for(B * H * 12, B))
  for (int64_t b = 0; b < B; b++) {
    const char *Gb = G + (size_t)b * g4, *hpb = hp ? hp + (size_t)b * hr : NULL, *ghb = gh + (size_t)b * hr;
    char *dhb = dh + (size_t)b * hr, *dXb = dX + (size_t)b * a3, *dAb = dA + (size_t)b * a3;
    if (dt == LT_DTYPE_F32)
      gru_bwd_f32((const float *)Gb, (const float *)hpb, (const float *)ghb, (float *)dhb, (float *)dXb, (float *)dAb,
                  H);
    else
      gru_bwd_f64((const double *)Gb, (const double *)hpb, (const double *)ghb, (double *)dhb, (double *)dXb,
                  (double *)dAb, H);
  }
}

/* ======================================================================== */
/* lt_gru_recurrence: forward                                               */
/* ======================================================================== */

typedef struct gru_aux {
  bool has_h0; /* saved: G, Y, w_hh, then h0 if present */
} gru_aux;

static lt_status check(const lt_tensor *xg, const lt_tensor *w, const lt_tensor *bn, const lt_tensor *h0) {
  const char *op = "gru_recurrence";
  if (!xg) return lt__err_null(op, "xg");
  if (!w) return lt__err_null(op, "w_hh");
  const lt_dtype dt = xg->dtype;
  if ((dt != LT_DTYPE_F32 && dt != LT_DTYPE_F64) || w->dtype != dt || (bn && bn->dtype != dt) ||
      (h0 && h0->dtype != dt))
    return lt__err(LT_ERR_DTYPE, "%s: xg is %s, w_hh is %s, b_hn is %s, h0 is %s: all must be f32 or all f64", op,
                   LT__D(xg), LT__D(w), bn ? LT__D(bn) : "NULL", h0 ? LT__D(h0) : "NULL");
  if (w->ndim != 2 || w->shape[0] != 3 * w->shape[1] || w->shape[1] < 1)
    return lt__err(LT_ERR_SHAPE, "%s: w_hh is %s: must be [3H, H] with H >= 1", op, LT__D(w));
  const int64_t H = w->shape[1];
  if (xg->ndim != 3 || xg->shape[2] != 3 * H || xg->shape[0] < 1 || xg->shape[1] < 1)
    return lt__err(LT_ERR_SHAPE, "%s: xg is %s, w_hh is %s: xg must be [T, B, 3H] = [T, B, %lld] with T, B >= 1",
                   op, LT__D(xg), LT__D(w), (long long)(3 * H));
  if (bn && (bn->ndim != 1 || bn->shape[0] != H))
    return lt__err(LT_ERR_SHAPE, "%s: w_hh is %s, b_hn is %s: must be [H] = [%lld]", op, LT__D(w), LT__D(bn),
                   (long long)H);
  const int64_t B = xg->shape[1];
  if (h0 && (h0->ndim != 2 || h0->shape[0] != B || h0->shape[1] != H))
    return lt__err(LT_ERR_SHAPE, "%s: xg is %s, w_hh is %s, h0 is %s: must be [B, H] = [%lld, %lld]", op, LT__D(xg),
                   LT__D(w), LT__D(h0), (long long)B, (long long)H);
  return LT_OK;
}

lt_tensor *lt_gru_recurrence(const lt_tensor *xg, const lt_tensor *w_hh, const lt_tensor *b_hn, const lt_tensor *h0) {
  if (check(xg, w_hh, b_hn, h0) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_dtype dt = xg->dtype;
  const size_t es = lt_dtype_size(dt);
  const int64_t T = xg->shape[0], B = xg->shape[1], H = w_hh->shape[1], H3 = 3 * H;
  lt_tensor *tmp[4] = {0}, *G = NULL, *Y = NULL, *A = NULL;
  /* xg is read row by row through its strides; the others as contiguous matrices. */
  const lt_tensor *x = xg->stride[2] == 1 ? xg : lt__as_contig(xg, dt, &tmp[0]);
  const lt_tensor *w = lt__as_contig(w_hh, dt, &tmp[1]), *bn = lt__as_contig(b_hn, dt, &tmp[2]),
                  *h = lt__as_contig(h0, dt, &tmp[3]);
  if (!x || !w || (b_hn && !bn) || (h0 && !h)) goto fail;
  if (!(G = lt_empty(dt, 3, (const int64_t[]){T, B, 4 * H}))) goto fail;
  if (!(Y = lt_empty(dt, 3, (const int64_t[]){T, B, H}))) goto fail;
  if (!(A = lt_zeros(dt, 2, (const int64_t[]){B, H3}))) goto fail;

  const size_t step4 = (size_t)(B * 4 * H) * es, steph = (size_t)(B * H) * es;
  char *Gd = G->data, *Yd = Y->data;
  const char *xd = (const char *)x->data;
  const lt__mat W = LT__MAT(w->data, H3, H, H, 1);
  for (int64_t t = 0; t < T; t++) {
    const char *hp = t ? Yd + (size_t)(t - 1) * steph : (h ? (const char *)h->data : NULL);
    /* A [B, 3H] = h_{t-1} [B, H] W_hh^T [H, 3H] (zeros, as allocated, when there is no h_{t-1}) */
    if (hp && lt__mat_gemm(dt, false, 1.0, LT__MAT((void *)hp, B, H, H, 1), lt__mat_t(W), 0.0,
                           LT__MAT(A->data, B, H3, H3, 1)) != LT_OK)
      goto fail;
    cell_fwd(dt, xd + (size_t)(t * x->stride[0]) * es, x->stride[1], A->data, bn ? (const char *)bn->data : NULL,
             hp, Gd + (size_t)t * step4, Yd + (size_t)t * steph, B, H);
  }
  const gru_aux aux = {h != NULL};
  const lt_tensor *saved[4] = {G, Y, w};
  int ns = 3;
  if (h) saved[ns++] = h;
  if (lt__record(Y, LT__OP_gru_recurrence, 4, (const lt_tensor *[]){xg, w_hh, b_hn, h0}, ns, saved, &aux,
                 sizeof aux) != LT_OK)
    goto fail;
  for (int k = 0; k < 4; k++) lt_tensor_free(tmp[k]);
  lt_tensor_free(G);
  lt_tensor_free(A);
  return Y;
fail:
  for (int k = 0; k < 4; k++) lt_tensor_free(tmp[k]);
  lt_tensor_free(G);
  lt_tensor_free(A);
  lt_tensor_free(Y);
  return NULL;
}

/* ======================================================================== */
/* lt_gru_recurrence: backward                                              */
/* ======================================================================== */

/* Saved: G [T, B, 4H] (r, z, n, hn), Y [T, B, H], w_hh [3H, H] contiguous,
 * h0 [B, H] contiguous when given. Temporaries belong to the engine's scope. */
lt_status lt__bw_gru_recurrence(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const gru_aux *aux = (const gru_aux *)node->aux;
  const lt_tensor *G = node->saved[0], *Y = node->saved[1], *w = node->saved[2];
  const lt_tensor *h0 = aux->has_h0 ? node->saved[3] : NULL;
  const lt_dtype dt = G->dtype;
  const size_t es = lt_dtype_size(dt);
  const int64_t T = G->shape[0], B = G->shape[1], H = w->shape[1], H3 = 3 * H;
  lt_tensor *gtmp = NULL;
  const lt_tensor *g = lt__as_contig(gout, dt, &gtmp);
  if (!g) return lt_last_status();
  lt_tensor *dX = lt_empty(dt, 3, (const int64_t[]){T, B, H3}), *dA = lt_empty(dt, 3, (const int64_t[]){T, B, H3});
  lt_tensor *dh = lt_zeros(dt, 2, (const int64_t[]){B, H});
  if (!dX || !dA || !dh) return lt_last_status();
  const size_t step4 = (size_t)(B * 4 * H) * es, step3 = (size_t)(B * H3) * es, steph = (size_t)(B * H) * es;
  const char *Gd = G->data, *Yd = Y->data, *gd = g->data;
  char *dXd = dX->data, *dAd = dA->data;
  const lt__mat W = LT__MAT(w->data, H3, H, H, 1);
  const bool need_h0 = lt__needs_input_grad(node, 3);
  for (int64_t t = T - 1; t >= 0; t--) {
    const char *hp = t ? Yd + (size_t)(t - 1) * steph : (h0 ? (const char *)h0->data : NULL);
    cell_bwd(dt, Gd + (size_t)t * step4, hp, gd + (size_t)t * steph, dh->data, dXd + (size_t)t * step3,
             dAd + (size_t)t * step3, B, H);
    /* dh [B, H] += dA[t] [B, 3H] W_hh [3H, H]: the carry into step t-1 (or dh0) */
    if ((t > 0 || need_h0) && lt__mat_gemm(dt, false, 1.0, LT__MAT(dAd + (size_t)t * step3, B, H3, H3, 1), W, 1.0,
                                           LT__MAT(dh->data, B, H, H, 1)) != LT_OK)
      return lt_last_status();
  }
  if (lt__needs_input_grad(node, 1)) { /* dW [3H, H] = sum_t dA[t]^T [3H, B] h_{t-1} [B, H] */
    lt_tensor *dw = lt_zeros(dt, 2, w->shape);
    if (!dw) return lt_last_status();
    const lt__mat DW = LT__MAT(dw->data, H3, H, H, 1);
    if (T > 1 && lt__mat_gemm(dt, false, 1.0, lt__mat_t(LT__MAT(dAd + step3, (T - 1) * B, H3, H3, 1)),
                              LT__MAT((void *)Yd, (T - 1) * B, H, H, 1), 0.0, DW) != LT_OK)
      return lt_last_status();
    if (h0 && lt__mat_gemm(dt, false, 1.0, lt__mat_t(LT__MAT(dAd, B, H3, H3, 1)), LT__MAT(h0->data, B, H, H, 1), 1.0,
                           DW) != LT_OK)
      return lt_last_status();
    gin[1] = dw;
  }
  if (lt__needs_input_grad(node, 2)) { /* db_hn [H] = the sum over steps and rows of dA's n part */
    const int dims[2] = {0, 1};
    lt_tensor *dn = lt_narrow(dA, 2, 2 * H, H);
    if (!dn || !(gin[2] = lt_sum(dn, 2, dims, false))) return lt_last_status();
  }
  if (lt__needs_input_grad(node, 0)) gin[0] = dX;
  if (need_h0) gin[3] = dh;
  return LT_OK;
}

/* ======================================================================== */
/* nn.GRU forward                                                           */
/* ======================================================================== */

/* One layer and direction, time-major: in [T, B, I] -> out [T, B, H], hn [B, H]. */
static lt_status gru_dir(const void *mod, int l, int d, const lt_tensor *in, const lt_tensor *h0, const lt_tensor *c0,
                         lt_tensor **out, lt_tensor **hn, lt_tensor **cn) {
  const lt_gru_m *m = mod;
  (void)c0, (void)cn;
  const int64_t H = m->hidden_size;
  lt_tensor *wih = d ? m->weight_ih_reverse[l] : m->weight_ih[l], *whh = d ? m->weight_hh_reverse[l] : m->weight_hh[l];
  lt_tensor *bih = d ? m->bias_ih_reverse[l] : m->bias_ih[l], *bhh = d ? m->bias_hh_reverse[l] : m->bias_hh[l];
  lt_tensor *bias = NULL, *bn = NULL;
  if (bih) { /* b_ih + [b_hr, b_hz, 0] into the projection; b_hn into the op */
    lt_tensor *rz = lt_narrow(bhh, 0, 0, 2 * H), *pad = rz ? lt_zeros(bih->dtype, 1, &H) : NULL;
    bias = pad ? lt_add(bih, lt_cat(2, (lt_tensor *[]){rz, pad}, 0)) : NULL;
    bn = bias ? lt_narrow(bhh, 0, 2 * H, H) : NULL;
    if (!bn) return lt_last_status();
  }
  lt_tensor *xg = lt_linear(in, wih, bias); /* all steps: one product [T*B, I] x [I, 3H] */
  lt_tensor *y = xg ? lt_gru_recurrence(xg, whh, bn, h0) : NULL;
  if (!y) return lt_last_status();
  *out = y;
  *hn = lt_select(y, 0, y->shape[0] - 1);
  return *hn ? LT_OK : lt_last_status();
}

lt_tensor *lt_gru_forward(const lt_gru_m *m, const lt_tensor *x, const lt_tensor *h0, const lt_nn_ctx *ctx,
                          lt_tensor **h_n) {
  if (h_n) *h_n = NULL;
  if (!m) return lt__err(LT_ERR_NULL, "gru_forward: the module is NULL"), NULL;
  const lt__rnn_spec spec = {.op = "gru_forward", .m = m, .dir = gru_dir, .input_size = m->input_size,
                             .hidden_size = m->hidden_size, .num_layers = m->opts.num_layers,
                             .bidirectional = m->opts.bidirectional, .batch_first = m->opts.batch_first,
                             .dropout = m->opts.dropout};
  return lt__rnn_forward(&spec, x, h0, NULL, ctx, h_n, NULL);
}
