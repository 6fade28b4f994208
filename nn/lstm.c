/*
 * nn/lstm.c: the LSTM recurrence op (lt_lstm_recurrence, forward and backward
 * side by side) and nn.LSTM's forward (lt_lstm_forward); lt_lstm_init lives
 * with the other modules' registration in nn/layers.c.
 *
 * What this is: per step and chunk of hidden units one GEMM through
 * lt__mat_gemm (or its packed form) and one fused pass (gates, cell,
 * output) over preallocated [T, ...] buffers, the whole time loop in one
 * OpenMP team ("The team" below): no allocation inside the time loop, no
 * per-step autograd nodes. f32 gates use the vectorised exp/tanh of
 * tensor/vmath.h (libm's scalar calls would cost as much as the products at
 * these sizes); f64 keeps libm.
 *
 *   forward, step t (gates G [B, 4H] in the order i, f, g, o):
 *     G   = xg[t] + h_{t-1} W_hh^T      (the product first, then + xg[t])
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

#include "tensor/autocast_internal.h"
#include "tensor/graph_internal.h"
#include "nn/rnn_internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/vmath.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Fused cell kernels (one row b of B, all H units)                          */
/* ======================================================================== */

/* Each kernel is compiled for AVX-512, AVX2 and the baseline, chosen at
 * load time (LT__CLONES, tensor/cpu_internal.h): the baseline alone would
 * run the vectorised exp/tanh 4 wide without FMA. */

/* Forward of one row, n units (gate stride H in x and G, n in S): S the
 * product h_{t-1} W_hh^T of those units' gates [4][n] (zeros when there is
 * no h_{t-1}), x their input projections xg[t]; the activations out in G;
 * cp the previous cell (NULL: zeros, a loop of its own so that neither has
 * a branch); h, c [n] out. */
#define LSTM_CELL_BODY(TY, SIG, TANH, CPJ)                                                                     \
  _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                                                        \
    const TY i = SIG(S[j] + x[j]), f = SIG(S[n + j] + x[H + j]), g = TANH(S[2 * n + j] + x[2 * H + j]),      \
             o = SIG(S[3 * n + j] + x[3 * H + j]);                                                             \
    const TY cn = f * (CPJ) + i * g;                                                                           \
    G[j] = i, G[H + j] = f, G[2 * H + j] = g, G[3 * H + j] = o;                                                \
    c[j] = cn;                                                                                                 \
    h[j] = o * TANH(cn);                                                                                       \
  }
#define LSTM_CELL_FWD(NAME, TY, SIG, TANH)                                                                  \
  LT__CLONES static void NAME(const TY *restrict S, const TY *restrict x, TY *restrict G,                \
                               const TY *restrict cp, TY *restrict h, TY *restrict c, int64_t n, int64_t H) { \
    if (cp) {                                                                                               \
      LSTM_CELL_BODY(TY, SIG, TANH, cp[j])                                                                  \
    } else {                                                                                                \
      LSTM_CELL_BODY(TY, SIG, TANH, (TY)0)                                                                  \
    }                                                                                                       \
  }

/* Backward of one row, n units (gate stride H in G and dG): G the
 * activations, c this step's cell, cp the previous one (NULL: zeros); gh,
 * gc the output gradients of this step; dh, dc the carries from step t+1,
 * dc updated to the carry into step t-1; dG out (dh is read only: the
 * caller recomputes it from dG). */
#define LSTM_CELL_BWD_BODY(TY, TANH, CPJ)                                              \
  _Pragma("omp simd") for (int64_t j = 0; j < n; j++) {                                \
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
                               TY *restrict dc, TY *restrict dG, int64_t n, int64_t H) {                   \
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

/* ======================================================================== */
/* The team: the units in chunks, one OpenMP team for all steps              */
/* ======================================================================== */

/* A step's product is small (B x 4H x H: 8 M multiply-adds at B 32, H 256)
 * and the steps are sequential: forking threads for each product and each
 * cell pass (four synchronisations a step) cost more than the second core
 * gave (char_lstm: 77 ms a step on 2 threads, 63 on 1). So the hidden units
 * are cut into chunks of LSTM_UC, and one team runs all T steps, each
 * thread always the same chunks (chunk c on thread c mod nt). Forward, per
 * step, a thread computes its chunks' four gates (the W_hh rows of those
 * units, gathered once per call into a [4 uc, H] block and, where the panel
 * kernel takes it, packed once: lt__mat_pack_floats; the block then stays
 * in the owning core's cache from step to step), their cell pass, then
 * meets the team at one barrier (the next step's products read all of
 * h_t). Backward, per step: the chunk's cell backward (its units' columns
 * of dG[t]), one barrier (dh's product reads all of dG[t]), then dh of the
 * chunk's units, dG[t] [B, 4H] x W_hh[:, chunk] [4H, uc], which the chunk's
 * next cell backward alone reads. Each chunk's products are the same calls
 * whatever the thread count, so the bits do not depend on it. */
#define LSTM_UC 64

static inline int64_t lstm_nchunks(int64_t H) { return (H + LSTM_UC - 1) / LSTM_UC; }

/* Threads for the team: one per chunk at most, one below 2^20
 * multiply-adds a step (the barrier then costs more than the step). */
static int lstm_threads(int64_t B, int64_t H) {
  const int64_t nch = lstm_nchunks(H);
  int nt = omp_in_parallel() || (double)B * 4.0 * (double)H * (double)H < 1048576.0 ? 1 : omp_get_max_threads();
  return nt > nch ? (int)nch : nt;
}

/* A chunk's operand b [K, n] (f32) packed for the panel kernel once per
 * call, in blocks of LSTM_KB rows (the kernel's whole-k limit): a step's
 * product is then the blocks' packed products summed in block order (the
 * same on any thread). lstm_pack_floats: the floats a packed block takes
 * (the stride between blocks), or 0 when the panel kernel would not take
 * these blocks (f64, autocast, no AVX-512, a path forced, n too narrow):
 * the step's product is then one lt__mat_gemm of b as it is. */
#define LSTM_KB 256

static int64_t lstm_pack_floats(lt_dtype dt, int64_t K, int64_t n) {
  if (dt != LT_DTYPE_F32) return 0;
  const int64_t full = lt__mat_pack_floats(K < LSTM_KB ? K : LSTM_KB, n);
  return full && (K % LSTM_KB == 0 || lt__mat_pack_floats(K % LSTM_KB, n)) ? (full + 15) / 16 * 16 : 0;
}

static void lstm_pack(lt__mat b, int64_t pf, float *dst) {
  for (int64_t k0 = 0, i = 0; k0 < b.rows; k0 += LSTM_KB, i++) {
    const int64_t kn = b.rows - k0 < LSTM_KB ? b.rows - k0 : LSTM_KB;
    lt__mat_pack(LT__MAT((float *)b.data + k0 * b.rs, kn, b.cols, b.rs, b.cs), dst + i * pf);
  }
}

/* The units of chunk ch: [*u0, *u0 + the count returned). */
static inline int64_t lstm_chunk(int64_t H, int64_t ch, int64_t *u0) {
  *u0 = ch * LSTM_UC;
  return H - *u0 < LSTM_UC ? H - *u0 : LSTM_UC;
}

/* One pass's packed operands, a chunk each: b [K, per_unit * uc] of chunk
 * ch at stride * ch bytes, packed in blocks of lstm_floats(ch) floats (0:
 * not packed, lt__mat_gemm instead). The last chunk may be narrower. */
typedef struct lstm_packs {
  int64_t nch, pf, pf_last;
  size_t stride;
} lstm_packs;

static lstm_packs lstm_packs_of(lt_dtype dt, int64_t K, int64_t H, int64_t per_unit) {
  lstm_packs p = {lstm_nchunks(H), 0, 0, 0};
  p.pf = lstm_pack_floats(dt, K, per_unit * LSTM_UC);
  p.pf_last = lstm_pack_floats(dt, K, per_unit * (H - (p.nch - 1) * LSTM_UC));
  const int64_t most = p.pf > p.pf_last ? p.pf : p.pf_last;
  p.stride = ((size_t)(most * ((K + LSTM_KB - 1) / LSTM_KB)) * 4 + 63) / 64 * 64;
  return p;
}

static int64_t lstm_floats(const lstm_packs *p, int64_t ch) { return ch < p->nch - 1 ? p->pf : p->pf_last; }

/* c [B, n] = a [B, K] b for b packed by lstm_pack (pf floats a block). */
static void lstm_gemm_packed(lt__mat a, const float *bp, int64_t pf, lt__mat c) {
  for (int64_t k0 = 0, i = 0; k0 < a.cols; k0 += LSTM_KB, i++) {
    const int64_t kn = a.cols - k0 < LSTM_KB ? a.cols - k0 : LSTM_KB;
    lt__mat_gemm_packed(1.0, LT__MAT((float *)a.data + k0 * a.cs, a.rows, kn, a.rs, a.cs), bp + i * pf, c.cols,
                        k0 ? 1.0 : 0.0, c);
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

/* The forward's time loop (see "The team"): G [T, B, 4H] the activated
 * gates and Y [2, T, B, H] (h_t, c_t) out, from x [T, B, 4H] (xg; its rows
 * contiguous), w [4H, H], h, c [B, H] contiguous or NULL. */
static lt_status lstm_fwd_team(lt_dtype dt, const lt_tensor *x, const lt_tensor *w, const lt_tensor *h,
                               const lt_tensor *c, lt_tensor *G, lt_tensor *Y) {
  const size_t es = lt_dtype_size(dt);
  const int64_t T = G->shape[0], B = G->shape[1], H = w->shape[1], H4 = 4 * H;
  const int nt = lstm_threads(B, H);
  /* per chunk: its W_hh rows [4 uc, H] (gate-major), and W_chunk^T [H, 4 uc] packed */
  const lstm_packs pks = lstm_packs_of(dt, H, H, 4);
  const int64_t nch = pks.nch, S4 = 4 * LSTM_UC;
  const size_t wbytes = ((size_t)(H4 * H) * es + 63) / 64 * 64;
  const size_t sbytes = ((size_t)(B * S4) * es + 63) / 64 * 64; /* a thread's S [B, 4 uc] */
  char *mem = aligned_alloc(64, wbytes + pks.stride * (size_t)nch + sbytes * (size_t)nt);
  if (!mem) return lt__err(LT_ERR_NOMEM, "lstm_recurrence: xg is %s, w_hh is %s: out of memory for the chunks' weights",
                           LT__D(x), LT__D(w));
  char *wc = mem, *pk = mem + wbytes, *scr = pk + pks.stride * (size_t)nch;
  const size_t step4 = (size_t)(B * H4) * es, steph = (size_t)(B * H) * es;
  char *Gd = G->data, *Yh = Y->data, *Yc = Yh + (size_t)T * steph;
  const char *xd = (const char *)x->data; /* x->data points at its first element */
  const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
  int err = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const lt_dtype prev = lt__autocast_adopt(ac);
    const int me = nt > 1 ? omp_get_thread_num() : 0;
    char *S = scr + sbytes * (size_t)me;
    for (int64_t ch = me; ch < nch; ch += nt) { /* the chunk's rows of W_hh, and packed */
      int64_t u0;
      const int64_t uc = lstm_chunk(H, ch, &u0), pfc = lstm_floats(&pks, ch);
      char *wch = wc + (size_t)(4 * u0 * H) * es;
      for (int64_t q = 0; q < 4; q++)
        memcpy(wch + (size_t)(q * uc * H) * es, (const char *)w->data + (size_t)((q * H + u0) * H) * es,
               (size_t)(uc * H) * es);
      if (pfc) lstm_pack(lt__mat_t(LT__MAT(wch, 4 * uc, H, H, 1)), pfc, (float *)(pk + pks.stride * (size_t)ch));
    }
    for (int64_t t = 0; t < T; t++) {
      const char *hp = t ? Yh + (size_t)(t - 1) * steph : (h ? (const char *)h->data : NULL);
      const char *cp = t ? Yc + (size_t)(t - 1) * steph : (c ? (const char *)c->data : NULL);
      char *Gt = Gd + (size_t)t * step4, *ht = Yh + (size_t)t * steph, *ct = Yc + (size_t)t * steph;
      for (int64_t ch = me; ch < nch; ch += nt) {
        int64_t u0;
        const int64_t uc = lstm_chunk(H, ch, &u0), pfc = lstm_floats(&pks, ch);
        /* S [B, 4 uc] = h_{t-1} [B, H] W_chunk^T [H, 4 uc] (zeros without h_{t-1}) */
        const lt__mat Sm = LT__MAT(S, B, 4 * uc, 4 * uc, 1), hm = LT__MAT((void *)hp, B, H, H, 1);
        if (!hp) memset(S, 0, (size_t)(B * 4 * uc) * es);
        else if (pfc) lstm_gemm_packed(hm, (const float *)(pk + pks.stride * (size_t)ch), pfc, Sm);
        else if (lt__mat_gemm(dt, true, 1.0, hm, lt__mat_t(LT__MAT(wc + (size_t)(4 * u0 * H) * es, 4 * uc, H, H, 1)),
                              0.0, Sm) != LT_OK) {
#pragma omp atomic write
          err = 1;
        }
        for (int64_t b = 0; b < B; b++) {
          const size_t o4 = (size_t)(b * H4 + u0) * es, oh = (size_t)(b * H + u0) * es;
          const char *xb = xd + (size_t)(t * x->stride[0] + b * x->stride[1] + u0) * es, *Sb = S + (size_t)(b * 4 * uc) * es;
          const char *cpb = cp ? cp + oh : NULL;
          if (dt == LT_DTYPE_F32)
            cell_fwd_f32((const float *)Sb, (const float *)xb, (float *)(Gt + o4), (const float *)cpb,
                         (float *)(ht + oh), (float *)(ct + oh), uc, H);
          else
            cell_fwd_f64((const double *)Sb, (const double *)xb, (double *)(Gt + o4), (const double *)cpb,
                         (double *)(ht + oh), (double *)(ct + oh), uc, H);
        }
      }
#pragma omp barrier
    }
    lt__autocast_adopt(prev);
  }
  free(mem);
  if (err)
    return lt__err(LT_ERR_BACKEND, "lstm_recurrence: xg is %s, w_hh is %s: a step's product failed", LT__D(x),
                   LT__D(w));
  return LT_OK;
}

lt_tensor *lt_lstm_recurrence(const lt_tensor *xg, const lt_tensor *w_hh, const lt_tensor *h0, const lt_tensor *c0) {
  if (check(xg, w_hh, h0, c0) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_dtype dt = xg->dtype;
  const int64_t T = xg->shape[0], B = xg->shape[1], H = w_hh->shape[1], H4 = 4 * H;
  lt_tensor *tmp[4] = {0}, *G = NULL, *Y = NULL;
  /* xg is read row by row through its strides; the others as contiguous matrices. */
  const lt_tensor *x = xg->stride[2] == 1 ? xg : lt__as_contig(xg, dt, &tmp[0]);
  const lt_tensor *w = lt__as_contig(w_hh, dt, &tmp[1]), *h = lt__as_contig(h0, dt, &tmp[2]),
                  *c = lt__as_contig(c0, dt, &tmp[3]);
  if (!x || !w || (h0 && !h) || (c0 && !c)) goto fail;
  if (!(G = lt_empty(dt, 3, (const int64_t[]){T, B, H4}))) goto fail;
  if (!(Y = lt_empty(dt, 4, (const int64_t[]){2, T, B, H}))) goto fail;

  if (lstm_fwd_team(dt, x, w, h, c, G, Y) != LT_OK) goto fail;
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
  const bool need_h0 = lt__needs_input_grad(node, 2);
  const int nt = lstm_threads(B, H);
  const lstm_packs pks = lstm_packs_of(dt, H4, H, 1); /* per chunk, W_hh[:, chunk] [4H, uc] packed */
  const int64_t nch = pks.nch;
  char *pk = pks.pf || pks.pf_last ? aligned_alloc(64, pks.stride * (size_t)nch) : NULL;
  if ((pks.pf || pks.pf_last) && !pk)
    return lt__err(LT_ERR_NOMEM, "lstm_recurrence backward: w_hh is %s: out of memory for the chunks' weights",
                   LT__D(w));
  const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
  int err = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const lt_dtype prev = lt__autocast_adopt(ac);
    const int me = nt > 1 ? omp_get_thread_num() : 0;
    for (int64_t ch = me; ch < nch; ch += nt) {
      int64_t u0;
      const int64_t uc = lstm_chunk(H, ch, &u0), pfc = lstm_floats(&pks, ch);
      if (pfc) lstm_pack(LT__MAT((float *)w->data + u0, H4, uc, H, 1), pfc, (float *)(pk + pks.stride * (size_t)ch));
    }
    for (int64_t t = T - 1; t >= 0; t--) {
      const char *cp = t ? Yc + (size_t)(t - 1) * steph : (c0 ? (const char *)c0->data : NULL);
      const char *Gt = Gd + (size_t)t * step4, *ct = Yc + (size_t)t * steph;
      const char *ght = gh + (size_t)t * steph, *gct = gc + (size_t)t * steph;
      char *dGt = dGd + (size_t)t * step4;
      for (int64_t ch = me; ch < nch; ch += nt) { /* the chunk's columns of dG[t], its dc */
        int64_t u0;
        const int64_t uc = lstm_chunk(H, ch, &u0);
        for (int64_t b = 0; b < B; b++) {
          const size_t o4 = (size_t)(b * H4 + u0) * es, oh = (size_t)(b * H + u0) * es;
          const char *cpb = cp ? cp + oh : NULL;
          const char *dhb = (const char *)dh->data + oh;
          char *dcb = (char *)dc->data + oh;
          if (dt == LT_DTYPE_F32)
            cell_bwd_f32((const float *)(Gt + o4), (const float *)(ct + oh), (const float *)cpb,
                         (const float *)(ght + oh), (const float *)(gct + oh), (const float *)dhb, (float *)dcb,
                         (float *)(dGt + o4), uc, H);
          else
            cell_bwd_f64((const double *)(Gt + o4), (const double *)(ct + oh), (const double *)cpb,
                         (const double *)(ght + oh), (const double *)(gct + oh), (const double *)dhb,
                         (double *)dcb, (double *)(dGt + o4), uc, H);
        }
      }
      if (t == 0 && !need_h0) break;
#pragma omp barrier
      /* dh of the chunk's units [B, uc] = dG[t] [B, 4H] W_hh[:, chunk] [4H, uc]: the carry into step t-1
       * (or dh0), read next by this chunk's cell backward alone */
      for (int64_t ch = me; ch < nch; ch += nt) {
        int64_t u0;
        const int64_t uc = lstm_chunk(H, ch, &u0), pfc = lstm_floats(&pks, ch);
        const lt__mat dhm = LT__MAT((char *)dh->data + (size_t)u0 * es, B, uc, H, 1);
        if (pfc) lstm_gemm_packed(LT__MAT(dGt, B, H4, H4, 1), (const float *)(pk + pks.stride * (size_t)ch), pfc, dhm);
        else if (lt__mat_gemm(dt, true, 1.0, LT__MAT(dGt, B, H4, H4, 1),
                              LT__MAT((char *)w->data + (size_t)u0 * es, H4, uc, H, 1), 0.0, dhm) != LT_OK) {
#pragma omp atomic write
          err = 1;
        }
      }
    }
    lt__autocast_adopt(prev);
  }
  free(pk);
  if (err)
    return lt__err(LT_ERR_BACKEND, "lstm_recurrence backward: w_hh is %s, the gates are %s: a step's product failed",
                   LT__D(w), LT__D(G));
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
