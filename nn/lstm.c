/*
 * nn/lstm.c: the LSTM recurrence op (lt_lstm_recurrence, forward and backward
 * side by side) and nn.LSTM's forward (lt_lstm_forward); lt_lstm_init lives
 * with the other modules' registration in nn/layers.c.
 *
 * What this is: per step one GEMM through lt__mat_gemm and one fused pass
 * (gates, cell, output) over preallocated [T, ...] buffers: no allocation
 * inside the time loop, no per-step autograd nodes. f32 gates use the
 * vectorised exp/tanh of tensor/vmath.h (libm's scalar calls would cost as
 * much as the products at these sizes); f64 keeps libm.
 *
 *   forward, step t (gates G [B, 4H] in the order i, f, g, o):
 *     G   = xg[t] + h_{t-1} W_hh^T
 *     i, f, o = sigmoid(G_i, G_f, G_o), g = tanh(G_g)    (stored in place of G)
 *     c_t = f c_{t-1} + i g,  h_t = o tanh(c_t)
 *   backward, t = T-1 .. 0 (dh, dc carry from step t+1):
 *     dh_t = gout_h[t] + dh,  dc_t = gout_c[t] + dc + dh_t o (1 - tanh(c_t)^2)
 *     dG_i = dc_t g i (1 - i),  dG_f = dc_t c_{t-1} f (1 - f),
 *     dG_g = dc_t i (1 - g^2),  dG_o = dh_t tanh(c_t) o (1 - o)
 *     dc = dc_t f,  dh = dG W_hh                              (one GEMM)
 *   then dW_hh = sum_t dG[t]^T h_{t-1}: one GEMM over all T*B rows;
 *   dxg = dG, dh0 = dh, dc0 = dc.
 *
 * What this is not: the registration of parameters (nn/layers.c), the
 * stacking of layers and directions (nn/rnn.c, shared with the GRU) or a GEMM.
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

/* Each kernel is compiled for AVX-512, AVX2 and the baseline, chosen at
 * load time (LT__CLONES, tensor/cpu_internal.h): the baseline alone would
 * run the vectorised exp/tanh 4 wide without FMA. */

/* Forward of one row: G [4H] pre-activations in, activations out; cp the
 * previous cell (NULL: zeros, a loop of its own so that neither has a
 * branch); h, c [H] out. */
#define LSTM_CELL_BODY(TY, SIG, TANH, CPJ)                                                      \
  _Pragma("omp simd") for (int64_t j = 0; j < H; j++) {                                         \
    const TY i = SIG(G[j]), f = SIG(G[H + j]), g = TANH(G[2 * H + j]), o = SIG(G[3 * H + j]); \
    const TY cn = f * (CPJ) + i * g;                                                            \
    G[j] = i, G[H + j] = f, G[2 * H + j] = g, G[3 * H + j] = o;                                 \
    c[j] = cn;                                                                                  \
    h[j] = o * TANH(cn);                                                                        \
  }
#define LSTM_CELL_FWD(NAME, TY, SIG, TANH)                                                                  \
  LT__CLONES static void NAME(TY *restrict G, const TY *restrict cp, TY *restrict h, TY *restrict c,      \
                               int64_t H) {                                                                 \
    if (cp) {                                                                                               \
      LSTM_CELL_BODY(TY, SIG, TANH, cp[j])                                                                  \
    } else {                                                                                                \
      LSTM_CELL_BODY(TY, SIG, TANH, (TY)0)                                                                  \
    }                                                                                                       \
  }

/* Backward of one row: G [4H] activations, c [H] this step's cell, cp the
 * previous one (NULL: zeros); gh, gc [H] the output gradients of this step;
 * dh, dc [H] the carries from step t+1, dc updated to the carry into step
 * t-1; dG [4H] out (dh is read only: the caller recomputes it from dG). */
#define LSTM_CELL_BWD_BODY(TY, TANH, CPJ)                                              \
  _Pragma("omp simd") for (int64_t j = 0; j < H; j++) {                                \
    const TY i = G[j], f = G[H + j], g = G[2 * H + j], o = G[3 * H + j];               \
    const TY tc = TANH(c[j]);                                                          \
    const TY dht = gh[j] + dh[j];                                                      \
    const TY dct = gc[j] + dc[j] + dht * o * ((TY)1 - tc * tc);                        \
    dG[j] = dct * g * i * ((TY)1 - i);                                                 \
    dG[H + j] = dct * (CPJ) * f * ((TY)1 - f);                                         \
    dG[2 * H + j] = dct * i * ((TY)1 - g * g);                                         \
    dG[3 * H + j] = dht * tc * o * ((TY)1 - o);                                        \
    dc[j] = dct * f;                                                                   \
  }
#define LSTM_CELL_BWD(NAME, TY, TANH)                                                                        \
  LT__CLONES static void NAME(const TY *restrict G, const TY *restrict c, const TY *restrict cp,          \
                               const TY *restrict gh, const TY *restrict gc, const TY *restrict dh,        \
                               TY *restrict dc, TY *restrict dG, int64_t H) {                              \
    if (cp) {                                                                                               \
      LSTM_CELL_BWD_BODY(TY, TANH, cp[j])                                                                   \
    } else {                                                                                                \
      LSTM_CELL_BWD_BODY(TY, TANH, (TY)0)                                                                   \
    }                                                                                                       \
  }

static inline double sigmoid_d(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

LSTM_CELL_FWD(cell_fwd_f32, float, lt__vsigmoidf, lt__vtanhf)
LSTM_CELL_FWD(cell_fwd_f64, double, sigmoid_d, tanh)
LSTM_CELL_BWD(cell_bwd_f32, float, lt__vtanhf)
LSTM_CELL_BWD(cell_bwd_f64, double, tanh)

/* The rows of one step, threaded over b when the step is large enough (each
 * row is independent: results do not depend on the thread count). A row
 * element costs about 16 times a copied element (5 exp-based functions), so
 * the work passed to lt__threads_for is B * H * 16. */
static void cell_fwd(lt_dtype dt, char *G, const char *cp, char *h, char *c, int64_t B, int64_t H) {
  const size_t es = lt_dtype_size(dt);
  const size_t g4 = (size_t)(4 * H) * es, hr = (size_t)H * es;
#pragma omp parallel for schedule(static) num_threads(lt__threads_for(B * H * 16, B))
  for (int64_t b = 0; b < B; b++) {
    char *Gb = G + (size_t)b * g4, *hb = h + (size_t)b * hr, *cb = c + (size_t)b * hr;
    const char *cpb = cp ? cp + (size_t)b * hr : NULL;
    if (dt == LT_DTYPE_F32) cell_fwd_f32((float *)Gb, (const float *)cpb, (float *)hb, (float *)cb, H);
    else cell_fwd_f64((double *)Gb, (const double *)cpb, (double *)hb, (double *)cb, H);
  }
}

static void cell_bwd(lt_dtype dt, const char *G, const char *c, const char *cp, const char *gh, const char *gc,
                     const char *dh, char *dc, char *dG, int64_t B, int64_t H) {
  const size_t es = lt_dtype_size(dt);
  const size_t g4 = (size_t)(4 * H) * es, hr = (size_t)H * es;
#pragma omp parallel for schedule(static) num_threads(lt__threads_for(B * H * 16, B))
  for (int64_t b = 0; b < B; b++) {
    const size_t o4 = (size_t)b * g4, oh = (size_t)b * hr;
    const char *cpb = cp ? cp + oh : NULL, *ghb = gh + oh, *gcb = gc + oh;
    if (dt == LT_DTYPE_F32)
      cell_bwd_f32((const float *)(G + o4), (const float *)(c + oh), (const float *)cpb, (const float *)ghb,
                   (const float *)gcb, (const float *)(dh + oh), (float *)(dc + oh), (float *)(dG + o4), H);
    else
      cell_bwd_f64((const double *)(G + o4), (const double *)(c + oh), (const double *)cpb, (const double *)ghb,
                   (const double *)gcb, (const double *)(dh + oh), (double *)(dc + oh), (double *)(dG + o4), H);
  }
}

/* ======================================================================== */
/* lt_lstm_recurrence: forward                                              */
/* ======================================================================== */

typedef struct lstm_aux {
  bool has_h0, has_c0; /* saved: G, Y, w_hh, then h0 and c0 if present */
} lstm_aux;

static lt_status check(const lt_tensor *xg, const lt_tensor *w, const lt_tensor *h0, const lt_tensor *c0) {
  const char *op = "lstm_recurrence";
  if (!xg) return lt__err_null(op, "xg");
  if (!w) return lt__err_null(op, "w_hh");
  const lt_dtype dt = xg->dtype;
  if ((dt != LT_DTYPE_F32 && dt != LT_DTYPE_F64) || w->dtype != dt || (h0 && h0->dtype != dt) ||
      (c0 && c0->dtype != dt))
    return lt__err(LT_ERR_DTYPE, "%s: xg is %s, w_hh is %s, h0 is %s, c0 is %s: all must be f32 or all f64", op,
                   LT__D(xg), LT__D(w), h0 ? LT__D(h0) : "NULL", c0 ? LT__D(c0) : "NULL");
  if (w->ndim != 2 || w->shape[0] != 4 * w->shape[1] || w->shape[1] < 1)
    return lt__err(LT_ERR_SHAPE, "%s: w_hh is %s: must be [4H, H] with H >= 1", op, LT__D(w));
  const int64_t H = w->shape[1];
  if (xg->ndim != 3 || xg->shape[2] != 4 * H || xg->shape[0] < 1 || xg->shape[1] < 1)
    return lt__err(LT_ERR_SHAPE, "%s: xg is %s, w_hh is %s: xg must be [T, B, 4H] = [T, B, %lld] with T, B >= 1",
                   op, LT__D(xg), LT__D(w), (long long)(4 * H));
  const int64_t B = xg->shape[1];
  const lt_tensor *st[2] = {h0, c0};
  for (int k = 0; k < 2; k++)
    if (st[k] && (st[k]->ndim != 2 || st[k]->shape[0] != B || st[k]->shape[1] != H))
      return lt__err(LT_ERR_SHAPE, "%s: xg is %s, w_hh is %s, %s is %s: must be [B, H] = [%lld, %lld]", op,
                     LT__D(xg), LT__D(w), k ? "c0" : "h0", LT__D(st[k]), (long long)B, (long long)H);
  return LT_OK;
}

lt_tensor *lt_lstm_recurrence(const lt_tensor *xg, const lt_tensor *w_hh, const lt_tensor *h0, const lt_tensor *c0) {
  if (check(xg, w_hh, h0, c0) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_dtype dt = xg->dtype;
  const size_t es = lt_dtype_size(dt);
  const int64_t T = xg->shape[0], B = xg->shape[1], H = w_hh->shape[1], H4 = 4 * H;
  lt_tensor *tmp[4] = {0}, *G = NULL, *Y = NULL;
  /* xg is read row by row through its strides; the others as contiguous matrices. */
  const lt_tensor *x = xg->stride[2] == 1 ? xg : lt__as_contig(xg, dt, &tmp[0]);
  const lt_tensor *w = lt__as_contig(w_hh, dt, &tmp[1]), *h = lt__as_contig(h0, dt, &tmp[2]),
                  *c = lt__as_contig(c0, dt, &tmp[3]);
  if (!x || !w || (h0 && !h) || (c0 && !c)) goto fail;
  if (!(G = lt_empty(dt, 3, (const int64_t[]){T, B, H4}))) goto fail;
  if (!(Y = lt_empty(dt, 4, (const int64_t[]){2, T, B, H}))) goto fail;

  const size_t step4 = (size_t)(B * H4) * es, steph = (size_t)(B * H) * es;
  char *Gd = G->data, *Yh = Y->data, *Yc = Yh + (size_t)T * steph;
  const char *xd = (const char *)x->data; /* x->data points at its first element */
  const lt__mat W = LT__MAT(w->data, H4, H, H, 1);
  for (int64_t t = 0; t < T; t++) {
    char *Gt = Gd + (size_t)t * step4;
    for (int64_t b = 0; b < B; b++)
      memcpy(Gt + (size_t)(b * H4) * es, xd + (size_t)(t * x->stride[0] + b * x->stride[1]) * es, (size_t)H4 * es);
    const char *hp = t ? Yh + (size_t)(t - 1) * steph : (h ? (const char *)h->data : NULL);
    const char *cp = t ? Yc + (size_t)(t - 1) * steph : (c ? (const char *)c->data : NULL);
    /* G[t] [B, 4H] += h_{t-1} [B, H] W_hh^T [H, 4H] */
    if (hp && lt__mat_gemm(dt, false, 1.0, LT__MAT((void *)hp, B, H, H, 1), lt__mat_t(W), 1.0,
                           LT__MAT(Gt, B, H4, H4, 1)) != LT_OK)
      goto fail;
    cell_fwd(dt, Gt, cp, Yh + (size_t)t * steph, Yc + (size_t)t * steph, B, H);
  }
  const lstm_aux aux = {h != NULL, c != NULL};
  const lt_tensor *saved[5] = {G, Y, w};
  int ns = 3;
  if (h) saved[ns++] = h;
  if (c) saved[ns++] = c;
  if (lt__record(Y, LT__OP_lstm_recurrence, 4, (const lt_tensor *[]){xg, w_hh, h0, c0}, ns, saved, &aux,
                 sizeof aux) != LT_OK)
    goto fail;
  for (int k = 0; k < 4; k++) lt_tensor_free(tmp[k]);
  lt_tensor_free(G);
  return Y;
fail:
  for (int k = 0; k < 4; k++) lt_tensor_free(tmp[k]);
  lt_tensor_free(G);
  lt_tensor_free(Y);
  return NULL;
}

/* ======================================================================== */
/* lt_lstm_recurrence: backward                                             */
/* ======================================================================== */

/* Saved: G [T, B, 4H] activated gates, Y [2, T, B, H] (h_t, c_t), w_hh
 * [4H, H] contiguous, h0 and c0 [B, H] contiguous when given. Temporaries
 * belong to the engine's scope. */
lt_status lt__bw_lstm_recurrence(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const lstm_aux *aux = (const lstm_aux *)node->aux;
  const lt_tensor *G = node->saved[0], *Y = node->saved[1], *w = node->saved[2];
  int k = 3;
  const lt_tensor *h0 = aux->has_h0 ? node->saved[k++] : NULL;
  const lt_tensor *c0 = aux->has_c0 ? node->saved[k++] : NULL;
  const lt_dtype dt = G->dtype;
  const size_t es = lt_dtype_size(dt);
  const int64_t T = G->shape[0], B = G->shape[1], H = w->shape[1], H4 = 4 * H;
  lt_tensor *gtmp = NULL; /* in the engine's scope, as every temporary here */
  const lt_tensor *g = lt__as_contig(gout, dt, &gtmp);
  if (!g) return lt_last_status();
  lt_tensor *dG = lt_empty(dt, 3, G->shape);
  lt_tensor *dh = lt_zeros(dt, 2, (const int64_t[]){B, H}), *dc = lt_zeros(dt, 2, (const int64_t[]){B, H});
  if (!dG || !dh || !dc) return lt_last_status();
  const size_t step4 = (size_t)(B * H4) * es, steph = (size_t)(B * H) * es;
  const char *Gd = G->data, *Yh = Y->data, *Yc = Yh + (size_t)T * steph;
  const char *gh = g->data, *gc = gh + (size_t)T * steph;
  char *dGd = dG->data;
  const lt__mat W = LT__MAT(w->data, H4, H, H, 1);
  const bool need_h0 = lt__needs_input_grad(node, 2);
  for (int64_t t = T - 1; t >= 0; t--) {
    const char *cp = t ? Yc + (size_t)(t - 1) * steph : (c0 ? (const char *)c0->data : NULL);
    cell_bwd(dt, Gd + (size_t)t * step4, Yc + (size_t)t * steph, cp, gh + (size_t)t * steph,
             gc + (size_t)t * steph, dh->data, dc->data, dGd + (size_t)t * step4, B, H);
    /* dh [B, H] = dG[t] [B, 4H] W_hh [4H, H]: the carry into step t-1 (or dh0) */
    if ((t > 0 || need_h0) && lt__mat_gemm(dt, false, 1.0, LT__MAT(dGd + (size_t)t * step4, B, H4, H4, 1), W,
                                           0.0, LT__MAT(dh->data, B, H, H, 1)) != LT_OK)
      return lt_last_status();
  }
  if (lt__needs_input_grad(node, 1)) { /* dW [4H, H] = sum_t dG[t]^T [4H, B] h_{t-1} [B, H] */
    lt_tensor *dw = lt_zeros(dt, 2, w->shape);
    if (!dw) return lt_last_status();
    const lt__mat DW = LT__MAT(dw->data, H4, H, H, 1);
    if (T > 1 && lt__mat_gemm(dt, false, 1.0, lt__mat_t(LT__MAT(dGd + step4, (T - 1) * B, H4, H4, 1)),
                              LT__MAT((void *)Yh, (T - 1) * B, H, H, 1), 0.0, DW) != LT_OK)
      return lt_last_status();
    if (h0 && lt__mat_gemm(dt, false, 1.0, lt__mat_t(LT__MAT(dGd, B, H4, H4, 1)), LT__MAT(h0->data, B, H, H, 1),
                           1.0, DW) != LT_OK)
      return lt_last_status();
    gin[1] = dw;
  }
  if (lt__needs_input_grad(node, 0)) gin[0] = dG;
  if (need_h0) gin[2] = dh;
  if (lt__needs_input_grad(node, 3)) gin[3] = dc;
  return LT_OK;
}

/* ======================================================================== */
/* nn.LSTM forward                                                          */
/* ======================================================================== */

/* One layer and direction, time-major: in [T, B, I] -> out [T, B, H] and
 * the final h, c [B, H] (views of the recurrence's output), in the caller's
 * scope (nn/rnn.c). */
static lt_status lstm_dir(const void *mod, int l, int d, const lt_tensor *in, const lt_tensor *h0, const lt_tensor *c0,
                          lt_tensor **out, lt_tensor **hn, lt_tensor **cn) {
  const lt_lstm_m *m = mod;
  lt_tensor *wih = d ? m->weight_ih_reverse[l] : m->weight_ih[l], *whh = d ? m->weight_hh_reverse[l] : m->weight_hh[l];
  lt_tensor *bih = d ? m->bias_ih_reverse[l] : m->bias_ih[l], *bhh = d ? m->bias_hh_reverse[l] : m->bias_hh[l];
  lt_tensor *bias = bih ? lt_add(bih, bhh) : NULL;
  if (bih && !bias) return lt_last_status();
  /* all steps' input projections: one product [T*B, I] x [I, 4H] */
  lt_tensor *xg = lt_linear(in, wih, bias);
  lt_tensor *y = xg ? lt_lstm_recurrence(xg, whh, h0, c0) : NULL;
  lt_tensor *yh = y ? lt_select(y, 0, 0) : NULL, *yc = yh ? lt_select(y, 0, 1) : NULL;
  if (!yc) return lt_last_status();
  const int64_t T = in->shape[0];
  *out = yh;
  *hn = lt_select(yh, 0, T - 1);
  if (cn) *cn = lt_select(yc, 0, T - 1);
  return *hn && (!cn || *cn) ? LT_OK : lt_last_status();
}

lt_tensor *lt_lstm_forward(const lt_lstm_m *m, const lt_tensor *x, const lt_tensor *h0, const lt_tensor *c0,
                           const lt_nn_ctx *ctx, lt_tensor **h_n, lt_tensor **c_n) {
  if (h_n) *h_n = NULL;
  if (c_n) *c_n = NULL;
  if (!m) return lt__err(LT_ERR_NULL, "lstm_forward: the module is NULL"), NULL;
  const lt__rnn_spec spec = {.op = "lstm_forward", .m = m, .dir = lstm_dir, .input_size = m->input_size,
                             .hidden_size = m->hidden_size, .num_layers = m->opts.num_layers,
                             .bidirectional = m->opts.bidirectional, .batch_first = m->opts.batch_first,
                             .dropout = m->opts.dropout, .has_cell = true};
  return lt__rnn_forward(&spec, x, h0, c0, ctx, h_n, c_n);
}
