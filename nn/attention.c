/*
 * nn/attention.c: scaled dot-product attention
 * (torch.nn.functional.scaled_dot_product_attention), a fused forward and a
 * fused backward.
 *
 * What this is: for every (batch b, query head h), with g = h / (NH / NKV) the
 * key/value head of h's group (GQA/MQA, no copy of k/v per query head):
 *     P[b,h] = softmax(scale * q[b,h] k[b,g]^T  + masks)      [T, S]
 *     W[b,h] = P[b,h] * keep[b,h] / (1 - p)  (dropout, training only)
 *     out[b,h] = W[b,h] v[b,g]                                [T, HSV]
 * The products are BLIS GEMMs on the operands' own strides (a q made by
 * transposing [B,T,NH,HS] is never copied), one (b, h) per OpenMP thread with
 * single-threaded BLIS inside. Masks are applied row by row while the scores
 * are in cache: causal (query t sees keys s <= t + S - T, the alignment a KV
 * cache needs; no T x S mask is made), attn_mask (bool: true = may attend;
 * float: added), key_padding_mask [B,S] (true = padding). A row whose keys
 * are all masked gets weights 0 and output 0 (not NaN), and gradient 0.
 * Causal attention works in blocks of query rows and skips the key columns
 * a whole block cannot see. The output (and each gradient) is laid out in
 * the memory order of q (of the input): for the usual q = transpose of a
 * [B,T,NH,HS] projection, out is the transpose of a contiguous [B,T,NH,HS],
 * so merging the heads afterwards is a view, not a copy.
 *
 * Saved for backward: the (possibly copied) q, k, v, the probabilities P
 * [B,NH,T,S] after masking and before dropout, and the keep mask (bool) when
 * dropout was on. Under autocast (f32 inputs, bf16 products) the unfused
 * path converts q, k, v to bf16 once per call and saves those copies; its
 * row steps write the bf16 copies of P (W) and dS that the next products
 * read, so no product converts anything but dO (the same bits as converting
 * per product). The backward, per (b, kv head g) so that the GQA sums over
 * the group's query heads need no locks:
 *     dV[g] += W^T dO                  for each h of the group
 *     dW     = dO V^T,  dP = dW * keep / (1 - p)
 *     dS     = P * (dP - rowsum(dP * P))
 *     dQ[h]  = scale * dS K[g]
 *     dK[g] += scale * dS^T Q[h]
 *
 * Two implementations of that contract live here (docs/attention.md):
 *
 * Unfused (op scaled_dot_product_attention, the reference, and the only one
 * that can return the weights): the T x S probabilities are materialised per
 * (b, h) and saved for backward, as described above.
 *
 * Fused (op scaled_dot_product_attention_fused, FlashAttention-2, Dao 2023,
 * the default): tiles of FL_BR = 256 query rows x FL_BC = 256 keys
 * (nn/attention_fused.inc). For each query tile the keys are visited tile by
 * tile (causal: only those up to the tile's last visible key) with an online
 * softmax: a running row max m and sum l of exp(score - m); when m grows the
 * sum and the output rows accumulated so far are rescaled by exp(m_old -
 * m_new); at the end out /= l. The exp, max and sums are
 * tensor/softmax_internal.h's. Saved for backward: q, k, v, out and the row
 * logsumexp lse = m + log(l) [B,NH,T] (+inf for a row without keys), so
 * memory is O(T) per head, not O(T*S). The backward, per (b, kv head g),
 * recomputes P = exp(score - lse) tile by tile:
 *     D      = rowsum(dO * out)        (= rowsum(P * dP), per query row)
 *     dV[g] += W^T dO,  dP = (dO V^T) * keep / (1 - p),  dS = P * (dP - D)
 *     dQ[h] += scale * dS K[g],  dK[g] += scale * dS^T Q[h]
 * Dropout never stores a mask: the forward reserves the generator's counters
 * for a [B,NH,T,S] bernoulli draw (lt__bernoulli_defer) and both passes
 * regenerate any tile's bits from them (lt__bernoulli_tile): the same bits
 * the unfused path draws from the same generator state. Tile products run
 * on one thread each: in f32 on the panel kernel with K^T and V^T packed
 * once per call (lt__mat_gemm_packed, else lt__mat_gemm, the GEMM entry
 * lt_matmul uses); under autocast on the bf16 tile kernels of
 * tensor/bf16dot.c (fl16_*) where the CPU has one. The forward is
 * threaded over (b, h, query tile), largest causal tiles first, the backward
 * over (b, kv head) and, when that gives fewer than FL_MIN_TASKS tasks (MQA
 * at batch 1), chunks of key tiles with partial dq sums added in a fixed order
 * (fl_chunks), so results never depend on the thread count. Per call,
 * scratch of a few tiles per thread is allocated once; nothing is allocated
 * inside the tile loops.
 *
 * What this is not: the float attn_mask gets no gradient (it is a constant
 * of the op). The weights handed back through `weights` are W (after
 * dropout, as nn.MultiheadAttention returns them, one per head), are not
 * differentiable, and always come from the unfused path.
 */
#include "nn/nn.h"

#include "autograd/internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/softmax_internal.h"
#include "tensor/random_internal.h"
#include "tensor/bf16dot_internal.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OP "scaled_dot_product_attention"

/* ======================================================================== */
/* Strides BLIS accepts                                                     */
/* ======================================================================== */

/* The batch dims (b, h) are indexed here and may have any stride; the
 * last two dims of q, k, v and dO must form matrices BLIS takes
 * (lt__mat_ok), else the tensor is copied (an expanded dim of stride 0, some
 * stepped slices). */
/* x (4-d) as a tensor of dtype dt whose last-two-dims matrices BLIS takes:
 * x itself (*tmp NULL) when it already is, else a contiguous copy made with
 * grad mode off (*tmp, to free). NULL on error. */
static const lt_tensor *blis_ready(const lt_tensor *x, lt_dtype dt, lt_tensor **tmp) {
  *tmp = NULL;
  if (x->dtype == dt && lt__mat_ok(x->shape[2], x->shape[3], x->stride[2], x->stride[3])) return x;
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *c = x->dtype == dt ? lt_clone(x) : lt_to_dtype(x, dt);
  lt_set_grad_enabled(prev);
  *tmp = c;
  return c;
}

/* ======================================================================== */
/* Row kernels (contiguous rows of S entries)                               */
/* ======================================================================== */

/* The f32 row steps (these and the fused tiles') are compiled for AVX-512,
 * AVX2+FMA and baseline SSE2, picked at load time (like
 * tensor/elementwise.c; -std=c11 keeps -ffp-contract=off and the row sums
 * of tensor/softmax_internal.h run in fixed lanes, so every clone gives the
 * same bits); f64 keeps libm's exp and one build. Without the clones
 * the rows would run 4 lanes wide (SSE2), a visible share of a bf16 step. */
#define FL_CLONES_F32 LT__CLONES

/* Every loop over a row runs in blocks of 8 lanes plus a tail (EACH8): gcc
 * -O2 (the Release flags) vectorises such fixed-width blocks but not plain
 * loops of unknown length. */
#define EACH8(s, l, n, BODY)                                          \
  do {                                                                \
    int64_t s##0_ = 0;                                                \
    for (; s##0_ + 8 <= (n); s##0_ += 8)                              \
      for (int l = 0; l < 8; l++) {                                   \
        const int64_t s = s##0_ + l;                                  \
        BODY;                                                         \
      }                                                               \
    for (int l = 0; s##0_ + l < (n); l++) {                           \
      const int64_t s = s##0_ + l;                                    \
      BODY;                                                           \
    }                                                                 \
  } while (0)

/* Forward row: scores p[0..S) (already scaled) -> probabilities. Keys s >= lim
 * are masked by causality; am (stride ams) is the attn_mask row (bool or T),
 * kpm (stride kpms) the padding row. A row with no finite score becomes 0.
 * The softmax steps are tensor/softmax_internal.h's (max over unmasked keys,
 * exp, sum in double). */
#define SDPA_ROW_KERNELS(NAME, T, CLONES)                                                \
  CLONES static void fwd_row_##NAME(T *p, int64_t S, int64_t lim, const void *am, bool am_bool, \
                             int64_t ams, const unsigned char *kpm, int64_t kpms) {      \
    if (lim > S) lim = S;                                                                \
    if (lim < 0) lim = 0;                                                                \
    if (am && am_bool) {                                                                 \
      const unsigned char *m = (const unsigned char *)am;                                \
      for (int64_t s = 0; s < lim; s++)                                                  \
        if (!m[s * ams]) p[s] = -INFINITY;                                               \
    } else if (am) {                                                                     \
      const T *m = (const T *)am;                                                        \
      for (int64_t s = 0; s < lim; s++) p[s] += m[s * ams];                              \
    }                                                                                    \
    if (kpm)                                                                             \
      for (int64_t s = 0; s < lim; s++)                                                  \
        if (kpm[s * kpms]) p[s] = -INFINITY;                                             \
    const T mx = lt__row_max_##NAME(p, lim); /* NaN wins: a NaN score gives a NaN row */ \
    if (mx == -INFINITY) { /* every key masked (or no key) */                            \
      EACH8(s, l, S, p[s] = 0);                                                             \
      return;                                                                            \
    }                                                                                    \
    const T inv = (T)(1.0 / lt__row_exp_##NAME(p, mx, p, lim));                          \
    EACH8(s, l, lim, p[s] *= inv);                                                          \
    T *z = p + lim;                                                                      \
    EACH8(s, l, S - lim, z[s] = 0);                                                         \
  }                                                                                      \
  /* Dropout: w = p * keep * ks. */                                                      \
  CLONES static void drop_row_##NAME(const T *restrict p, const unsigned char *restrict keep,  \
                              T ks, T *restrict w,                                      \
                              int64_t n) {                                              \
    EACH8(s, l, n, w[s] = p[s] * (T)keep[s] * ks);                                          \
  }                                                                                      \
  /* Backward row: d holds dW = dO V^T on entry and dS on exit (without scale):  \
   * dP = dW * keep * ks;  dS = P * (dP - sum(dP * P)). */                               \
  CLONES static void bwd_row_##NAME(const T *restrict p, T *restrict d, int64_t n,            \
                             const unsigned char *restrict keep,                        \
                             T ks) {                                                     \
    if (keep) EACH8(s, l, n, d[s] *= (T)keep[s] * ks);                                      \
    const T c = (T)lt__row_dot_##NAME(p, d, n);                                          \
    EACH8(s, l, n, d[s] = p[s] * (d[s] - c));                                               \
  }
SDPA_ROW_KERNELS(f32, float, FL_CLONES_F32)
SDPA_ROW_KERNELS(f64, double, )

/* ======================================================================== */
/* The plan shared by forward and backward                                  */
/* ======================================================================== */

typedef struct sdpa_plan {
  lt_dtype dt;
  int64_t es; /* element size in bytes */
  int64_t B, NH, NKV, T, S, HS, HSV, group;
  double scale;
  bool causal;
  /* q [B,NH,T,HS], k [B,NKV,S,HS], v [B,NKV,S,HSV]: data and strides, qes
   * bytes an element: dt's, or 2 when qkv16 (unfused path under autocast:
   * they are the bf16 copies of f32 q, k, v that the products read as they
   * are, made once per call by heads_bf16; dt is then f32) */
  const char *q, *k, *v;
  int64_t qs[4], ks[4], vs[4];
  int64_t qes;
  bool qkv16;
  /* unfused path: autocast is on for this call (lt__autocast_active): the
   * row steps also write the bf16 copies of what the products read next
   * (forward: P, or W with dropout; backward: dS and W) */
  bool ac16;
  /* attn_mask broadcast on [B,NH,T,S] (stride 0 where broadcast), or NULL */
  const char *am;
  bool am_bool;
  int64_t ames, ams[4];
  /* key_padding_mask [B,S] (bool; stride 0 on a broadcast batch), or NULL */
  const unsigned char *kpm;
  int64_t kpms[2];
  /* dropout keep mask, contiguous [B,NH,T,S] bool, or NULL */
  const unsigned char *keep;
  double ks_drop; /* 1 / (1 - p), or 0 when p == 1 */
  /* forward: out [B,NH,T,HSV]; backward: dO (same shape), and the gradients
   * dq, dk, dv (NULL when not needed): data and strides */
  char *o;
  int64_t os[4];
  const char *go;
  int64_t gs[4];
  char *dq, *dk, *dv;
  int64_t dqs[4], dks[4], dvs[4];
  /* fused path only: the row logsumexp [B,NH,T] (contiguous, dtype dt), and
   * the deferred dropout draw over [B,NH,T,S] (NULL without dropout) */
  char *lse;
  const lt__bern_draw *drop;
  bool x16; /* f32 row exps 16 lanes wide (AVX-512 CPU; fl_row_exp_f32) */
  /* fused path under autocast only: q, k, v (and in backward dO) packed as
   * bf16 for the tile kernels of tensor/bf16dot.c (fl16), or NULL */
  const struct fl16 *b16;
} sdpa_plan;

/* Zeroes the [n, m] matrix at p with strides (rs, cs). */
static void zero_mat(char *p, int64_t n, int64_t m, int64_t rs, int64_t cs, int64_t es) {
  for (int64_t i = 0; i < n; i++) {
    if (cs == 1) memset(p + i * rs * es, 0, (size_t)(m * es));
    else
      for (int64_t j = 0; j < m; j++) memset(p + (i * rs + j * cs) * es, 0, (size_t)es);
  }
}

static inline char *at4(const char *base, const int64_t *st, int64_t es, int64_t i0, int64_t i1) {
  return (char *)base + (i0 * st[0] + i1 * st[1]) * es;
}

/* One query row t of (b, h): probabilities in place over the scores row. */
static void fwd_row(const sdpa_plan *pl, char *prow, int64_t b, int64_t h, int64_t t) {
  const int64_t lim = pl->causal ? t + pl->S - pl->T + 1 : pl->S;
  const void *am = NULL;
  int64_t ams = 0;
  if (pl->am) {
    am = pl->am + (b * pl->ams[0] + h * pl->ams[1] + t * pl->ams[2]) * pl->ames;
    ams = pl->ams[3];
  }
  const unsigned char *kpm = pl->kpm ? pl->kpm + b * pl->kpms[0] : NULL;
  if (pl->dt == LT_DTYPE_F32) fwd_row_f32((float *)prow, pl->S, lim, am, pl->am_bool, ams, kpm, pl->kpms[1]);
  else fwd_row_f64((double *)prow, pl->S, lim, am, pl->am_bool, ams, kpm, pl->kpms[1]);
}


/* Causal attention runs in blocks of this many query rows: block [t0, t1)
 * needs only keys s < t1 + S - T (kmax), so the products skip most of the
 * masked upper triangle (a quarter of the work at T = S = 256). Smaller
 * blocks skip more but lose it again to the fixed cost of each BLIS call
 * (measured: 16 and 32 rows are slower than no blocking at T = 128; 64 and
 * 128 about equal at T = 256). */
#define CAUSAL_ROWS 128

/* Keys the rows [t0, t1) can see: all S, or causally up to t1 + S - T. */
static inline int64_t block_keys(const sdpa_plan *pl, int64_t t1) {
  if (!pl->causal) return pl->S;
  const int64_t k = t1 + pl->S - pl->T;
  return k < 0 ? 0 : k > pl->S ? pl->S : k;
}

/* A [rows, cols] view of q, k or v at p (strides rs, cs): the bf16 copies
 * of the unfused path's autocast (pl->qkv16), which the products then read
 * as they are, or dt's elements. */
static inline lt__mat qkv_mat(const sdpa_plan *pl, const char *p, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  lt__mat m = LT__MAT(p, rows, cols, rs, cs);
  m.bf16 = pl->qkv16;
  return m;
}

/* A dense [rows, cols] bf16 matrix (an operand already converted). */
static inline lt__mat bf16_mat(const uint16_t *p, int64_t rows, int64_t cols) {
  lt__mat m = LT__MAT(p, rows, cols, cols, 1);
  m.bf16 = true;
  return m;
}

/* Forward of one (b, h): P (contiguous [T,S]) gets the probabilities, W the
 * dropped weights (when dropout; may be a scratch), pl->o the output. Row
 * block by row block (one block unless causal). Under autocast (pl->ac16)
 * each row step also writes the bf16 copy of the block's W (P without
 * dropout) into W16 (scratch of [CAUSAL_ROWS or T, S]), which the product
 * W V reads: the values it would have converted W to itself. */
static lt_status fwd_task(const sdpa_plan *pl, bool one, int64_t b, int64_t h, char *P, char *W, uint16_t *W16) {
  const int64_t T = pl->T, S = pl->S, HSV = pl->HSV, es = pl->es, qes = pl->qes, g = h / pl->group;
  const int64_t *qs = pl->qs, *ks = pl->ks, *vs = pl->vs;
  const char *Q = at4(pl->q, qs, qes, b, h);
  const char *K = at4(pl->k, ks, qes, b, g);
  const char *V = at4(pl->v, vs, qes, b, g);
  char *O = at4(pl->o, pl->os, es, b, h);
  const unsigned char *keep = pl->keep ? pl->keep + ((b * pl->NH + h) * T) * S : NULL;
  const int64_t rb = pl->causal ? CAUSAL_ROWS : T;
  for (int64_t t0 = 0; t0 < T; t0 += rb) {
    const int64_t t1 = t0 + rb < T ? t0 + rb : T, nb = t1 - t0, kmax = block_keys(pl, t1);
    char *Pb = P + t0 * S * es, *Wb = keep ? W + t0 * S * es : Pb, *Ob = O + t0 * pl->os[2] * es;
    if (kmax == 0) { /* no row of the block sees a key */
      memset(Pb, 0, (size_t)(nb * S * es));
      if (keep) memset(Wb, 0, (size_t)(nb * S * es));
      zero_mat(Ob, nb, HSV, pl->os[2], pl->os[3], es);
      continue;
    }
    /* P = scale * Q K^T: [nb,HS] x [HS,kmax] */
    lt_status st = lt__mat_gemm(pl->dt, one, pl->scale, qkv_mat(pl, Q + t0 * qs[2] * qes, nb, pl->HS, qs[2], qs[3]),
                                lt__mat_t(qkv_mat(pl, K, kmax, pl->HS, ks[2], ks[3])), 0.0,
                                LT__MAT(Pb, nb, kmax, S, 1));
    if (st != LT_OK) return st;
    for (int64_t t = t0; t < t1; t++) {
      char *prow = P + t * S * es, *wrow = keep ? W + t * S * es : prow;
      fwd_row(pl, prow, b, h, t); /* zeroes keys >= lim */
      if (keep) {
        if (pl->dt == LT_DTYPE_F32)
          drop_row_f32((const float *)prow, keep + t * S, (float)pl->ks_drop, (float *)wrow, S);
        else drop_row_f64((const double *)prow, keep + t * S, pl->ks_drop, (double *)wrow, S);
      }
      if (pl->ac16) lt__bf16_run(W16 + (t - t0) * kmax, (const float *)wrow, kmax);
    }
    /* out = W V: [nb,kmax] x [kmax,HSV] */
    st = lt__mat_gemm(pl->dt, one, 1.0, pl->ac16 ? bf16_mat(W16, nb, kmax) : LT__MAT(Wb, nb, kmax, S, 1),
                      qkv_mat(pl, V, kmax, HSV, vs[2], vs[3]), 0.0, LT__MAT(Ob, nb, HSV, pl->os[2], pl->os[3]));
    if (st != LT_OK) return st;
  }
  return LT_OK;
}

/* Copies the dense [n, m] f32 matrix src into dst (strides rs, cs). */
static void put_mat(char *dst, int64_t rs, int64_t cs, const float *src, int64_t n, int64_t m) {
  for (int64_t i = 0; i < n; i++) {
    float *d = (float *)dst + i * rs;
    if (cs == 1) memcpy(d, src + i * m, (size_t)m * sizeof(float));
    else
      for (int64_t j = 0; j < m; j++) d[j * cs] = src[i * m + j];
  }
}

/* Backward of one (b, kv head g): loops over the query heads of the group,
 * accumulating dK[g] and dV[g] (zero on entry); dQ[h] is overwritten. scr
 * and wscr are per-thread scratch of T*S elements (wscr only with dropout
 * and dv). The same row blocks as the forward. Under autocast (pl->ac16)
 * the row step that computes dS also writes the bf16 copies of dS and of
 * the block's W (P without dropout) into ds16 and w16 (scratch of
 * [CAUSAL_ROWS or T, S] each), which the products then read; dO is
 * converted once per block for its two products; and dK[g], dV[g] are
 * accumulated in the dense f32 scratch acc ([S, HS] then [S, HSV]) and
 * written once at the end (their own rows are strided, a per-head slice
 * of the gradient laid out like k: oneDNN would copy them in and out for
 * every product), so dk and dv need not be zero on entry. */
static lt_status bwd_task(const sdpa_plan *pl, bool one, int64_t b, int64_t g, const char *P, char *scr,
                          char *wscr, uint16_t *ds16, uint16_t *w16, float *acc) {
  const int64_t T = pl->T, S = pl->S, HS = pl->HS, HSV = pl->HSV, es = pl->es, qes = pl->qes;
  const int64_t *gs = pl->gs, *qs = pl->qs, *ks = pl->ks, *vs = pl->vs, *dqs = pl->dqs;
  const char *K = at4(pl->k, ks, qes, b, g);
  const char *V = at4(pl->v, vs, qes, b, g);
  char *dKg = pl->dk ? at4(pl->dk, pl->dks, es, b, g) : NULL;
  char *dVg = pl->dv ? at4(pl->dv, pl->dvs, es, b, g) : NULL;
  const int64_t rb = pl->causal ? CAUSAL_ROWS : T;
  const bool ac = pl->ac16;
  /* where dK[g] and dV[g] accumulate: [S, HS] and [S, HSV] */
  char *dKa = dKg, *dVa = dVg;
  int64_t dkr = pl->dks[2], dkc = pl->dks[3], dvr = pl->dvs[2], dvc = pl->dvs[3];
  if (ac) {
    dKa = (char *)acc, dkr = HS, dkc = 1;
    dVa = (char *)(acc + S * HS), dvr = HSV, dvc = 1;
    memset(acc, 0, (size_t)(S * (HS + HSV)) * sizeof(float));
  }
  for (int64_t h = g * pl->group; h < (g + 1) * pl->group; h++) {
    const int64_t bh = b * pl->NH + h;
    const char *Q = at4(pl->q, qs, qes, b, h);
    const char *dOh = at4(pl->go, gs, es, b, h);
    char *dQh = pl->dq ? at4(pl->dq, dqs, es, b, h) : NULL;
    const unsigned char *keep = pl->keep ? pl->keep + bh * T * S : NULL;
    for (int64_t t0 = 0; t0 < T; t0 += rb) {
      const int64_t t1 = t0 + rb < T ? t0 + rb : T, nb = t1 - t0, kmax = block_keys(pl, t1);
      if (kmax == 0) {
        if (dQh) zero_mat(dQh + t0 * dqs[2] * es, nb, HS, dqs[2], dqs[3], es);
        continue;
      }
      const char *Pb = P + (bh * T + t0) * S * es, *dOb = dOh + t0 * gs[2] * es, *Qb = Q + t0 * qs[2] * qes;
      const unsigned char *kb = keep ? keep + t0 * S : NULL;
      const bool ds_needed = dQh || dKg;
      const int64_t dld = ac ? kmax : S; /* the row stride of dW and dS in scr */
      /* w16 gets W's bf16 copy in the dS row step (when there is one) */
      const bool wrow16 = ac && dVg && ds_needed;
      lt_status st;
      /* dO block [nb,HSV]; under autocast converted once for dV and dW */
      lt__mat dO = LT__MAT(dOb, nb, HSV, gs[2], gs[3]);
      if (wrow16 && (st = lt__mat_hold_bf16(0, dO, one, &dO)) != LT_OK) return st;
      if (ds_needed) {
        /* dW = dO V^T: [nb,HSV] x [HSV,kmax], rows dld apart in scr (dense
         * under autocast: oneDNN would compute a strided one into a copy) */
        st = lt__mat_gemm(pl->dt, one, 1.0, dO, lt__mat_t(qkv_mat(pl, V, kmax, HSV, vs[2], vs[3])), 0.0,
                          LT__MAT(scr, nb, kmax, dld, 1));
        if (st != LT_OK) return st;
        for (int64_t t = 0; t < nb; t++) { /* P is 0 at keys >= kmax: they add nothing */
          const unsigned char *kr = kb ? kb + t * S : NULL;
          if (pl->dt == LT_DTYPE_F64) {
            bwd_row_f64((const double *)Pb + t * S, (double *)scr + t * dld, kmax, kr, pl->ks_drop);
            continue;
          }
          const float *prow = (const float *)Pb + t * S;
          float *drow = (float *)scr + t * dld;
          bwd_row_f32(prow, drow, kmax, kr, (float)pl->ks_drop);
          if (!ac) continue;
          lt__bf16_run(ds16 + t * kmax, drow, kmax);
          if (wrow16) {
            if (kr) { /* W = P * keep / (1 - p), as the f32 path's drop_row */
              float *wrow = (float *)wscr + t * S;
              drop_row_f32(prow, kr, (float)pl->ks_drop, wrow, kmax);
              prow = wrow;
            }
            lt__bf16_run(w16 + t * kmax, prow, kmax);
          }
        }
      }
      if (dVg) {
        /* dV[g] += W^T dO: [kmax,nb] x [nb,HSV] */
        lt__mat Wm = LT__MAT(Pb, nb, kmax, S, 1);
        if (wrow16) Wm = bf16_mat(w16, nb, kmax);
        else if (kb) {
          if (pl->dt == LT_DTYPE_F32)
            drop_row_f32((const float *)Pb, kb, (float)pl->ks_drop, (float *)wscr, nb * S);
          else drop_row_f64((const double *)Pb, kb, pl->ks_drop, (double *)wscr, nb * S);
          Wm.data = wscr;
        }
        st = lt__mat_gemm(pl->dt, one, 1.0, lt__mat_t(Wm), dO, 1.0, LT__MAT(dVa, kmax, HSV, dvr, dvc));
        if (st != LT_OK) return st;
      }
      if (!ds_needed) continue;
      /* dS [nb,kmax] (its bf16 copy under autocast) */
      const lt__mat dS = ac ? bf16_mat(ds16, nb, kmax) : LT__MAT(scr, nb, kmax, dld, 1);
      if (dQh) { /* dQ[h] = scale * dS K: [nb,kmax] x [kmax,HS] */
        st = lt__mat_gemm(pl->dt, one, pl->scale, dS, qkv_mat(pl, K, kmax, HS, ks[2], ks[3]), 0.0,
                          LT__MAT(dQh + t0 * dqs[2] * es, nb, HS, dqs[2], dqs[3]));
        if (st != LT_OK) return st;
      }
      if (dKg) { /* dK[g] += scale * dS^T Q: [kmax,nb] x [nb,HS] */
        st = lt__mat_gemm(pl->dt, one, pl->scale, lt__mat_t(dS), qkv_mat(pl, Qb, nb, HS, qs[2], qs[3]), 1.0,
                          LT__MAT(dKa, kmax, HS, dkr, dkc));
        if (st != LT_OK) return st;
      }
    }
  }
  if (ac && dKg) put_mat(dKg, pl->dks[2], pl->dks[3], (const float *)dKa, S, HS);
  if (ac && dVg) put_mat(dVg, pl->dvs[2], pl->dvs[3], (const float *)dVa, S, HSV);
  return LT_OK;
}

/* ======================================================================== */
/* Fused tiles (FlashAttention-2 style; nn/attention_fused.inc)             */
/* ======================================================================== */

/* A tile is FL_BR query rows x FL_BC keys. Measured (bench/attention.c, f32,
 * B 2, NH 4, HS 64, T 1024, fwd+bwd, machine loaded): 64 x 128 tiles were
 * 2.6x slower than unfused (BLIS's fixed cost per call and the repacking
 * of each k/v tile per query tile), 128 x 128 1.7x, 128 x 256 and 256 x 256
 * 1.2-1.5x. On the Xeon (AVX-512), CPU time of fwd+bwd at T 2048, B 2:
 * 256 x 256 0.91x the time of 128 x 256 (0.89x non-causal), 128 x 512
 * 0.93x, 64 x 512 1.5x; 256 x 256 it is. */
#define FL_BR 256
#define FL_BC 256

/* The pieces of a tile (query rows t0 .. t0+nb, keys s0 .. s0+nc) worth
 * computing: the whole tile, or, where causal masking hides part of it (the
 * diagonal tiles), its blocks of FL_SUB rows, each with only the nv keys its
 * last row can see (blocks that see none are left out): with 32-row blocks
 * 0.56 of a diagonal tile's products instead of all of them (128-row blocks:
 * 0.75; 32 rows measured faster, docs/log/attention-2026-11.md).
 * Fills p (first row within the tile, rows, keys) and returns the count (at
 * most FL_BR / FL_SUB). */
#define FL_SUB 32
typedef struct fl_piece {
  int64_t r0, nr, nv;
} fl_piece;
static int fl_pieces(const sdpa_plan *pl, int64_t t0, int64_t nb, int64_t s0, int64_t nc, fl_piece *p) {
  if (!pl->causal || block_keys(pl, t0 + (nb < FL_SUB ? nb : FL_SUB)) >= s0 + nc) {
    p[0] = (fl_piece){0, nb, nc};
    return 1;
  }
  int n = 0;
  for (int64_t r0 = 0; r0 < nb; r0 += FL_SUB) {
    const int64_t nr = r0 + FL_SUB < nb ? FL_SUB : nb - r0, k = block_keys(pl, t0 + r0 + nr) - s0;
    if (k > 0) p[n++] = (fl_piece){r0, nr, k < nc ? k : nc};
  }
  return n;
}

/* The f32 row steps of the tiles are compiled for several instruction sets
 * (FL_CLONES_F32, with the unfused path's row kernels above). */
/* exp(x - m) of a row and its sum (tensor/softmax_internal.h): on an
 * AVX-512 CPU 16 lanes wide with lt__vexpf16 (FMA and vscalefps; gcc
 * vectorises the portable lt__vexpf 8 wide only, and these exps were the
 * largest cost of the fused row steps: fwd+bwd CPU time at T 1024, HS 64,
 * causal, 26.7 -> 23.0 ms), the portable form otherwise and for f64. The
 * two differ in the last bits (both <= 2 ulp); a CPU always takes the same
 * one, so results never depend on the thread count. */
static inline double fl_row_exp_f32(const sdpa_plan *pl, const float *x, float m, float *y, int64_t n) {
#ifdef LT__HAVE_VEXP16
  if (pl->x16) return lt__row_exp_f32x16(x, m, y, n);
#endif
  (void)pl;
  return lt__row_exp_f32(x, m, y, n);
}
static inline double fl_row_exp_f64(const sdpa_plan *pl, const double *x, double m, double *y, int64_t n) {
  (void)pl;
  return lt__row_exp_f64(x, m, y, n);
}

/* ---- bf16 tiles under autocast (tensor/bf16dot_internal.h) -------------
 *
 * Under autocast every tile product of an f32 call would otherwise go
 * through lt__mat_gemm, which converts both operands of each product to
 * bf16 and calls oneDNN once per tile. Here q, k, v (backward: also dO) are
 * converted once per call, into the layouts the kernels read, and the f32
 * tile matrices that are operands (P, W, dS) are converted by the pass that
 * packs them, right after the row step that computed them; the products
 * accumulate in f32. The rounding points are the lt__mat_gemm path's
 * (every operand rounded once to bf16, to nearest even), the accumulation
 * order is the kernel's (tensor/bf16dot_internal.h).
 *
 * Operand packs (b = batch, h = query head, g = its kv head; tp, sp, hp,
 * hvp: T, S, HS, HSV rounded up to 32, the kernels' padding):
 *   q   rows  [B*NH][tp][hp]        A of S = Q K^T
 *   kt  pairs [B*NKV][hp/2][lds]    B of S = Q K^T        (k: head dim)
 *   v   pairs [B*NKV][sp/2][2*hvp]  B of O += P V         (forward; k: key)
 *   qt  rows  [B*NH][hp][ldt]       A of dK^T += Q^T dS   (backward)
 *   k   pairs [B*NKV][sp/2][2*hp]   B of dQ += dS K       (backward; k: key)
 *   vt  pairs [B*NKV][hvp/2][lds]   B of dP = dO V^T      (backward)
 *   go  rows  [B*NH][tp][hvp]       A of dP = dO V^T      (backward)
 *   got rows  [B*NH][hvp][ldt]      A of dV^T += dO^T W   (backward)
 * with lds = 2*sp + 32 and ldt = tp + 32: an AMX tile load reads 16 rows at
 * the row stride, and a stride of a multiple of 4 KB (sp = 1024) put all of
 * them in one L1 set, so tile loads would stall on L1 misses; 64 bytes
 * more per row spread them. The tile scratch's pair rows are
 * FL16_LDP elements apart for the same reason.
 * The kernels' B operand pairs elements along k, so the two products whose
 * k is the query row (dV += W^T dO, dK += dS^T Q) run transposed, and the
 * backward visits key tiles in its outer loop (fl16_bwd): W and dS of every
 * query row of a head that sees the key tile are collected, as bf16 pairs,
 * in per-thread buffers [tp/2][FL16_LDP], and dV^T, dK^T of the key tile
 * are then one product each per head, k running over all those query rows,
 * into per-thread f32 buffers [HSV][FL16_LDC], [HS][FL16_LDC] that are
 * transposed into dv, dk when the key tile is done. */
#define FL16_LDP (2 * FL_BC + 32)
#define FL16_LDC (FL_BC + 16)
/* One pack of a call: a [rows, cols] f32 matrix of each (batch, head) of a
 * 4-d tensor (data x, strides st, n1 heads) into dst, ld elements a row
 * (rows layout, transposed when tr) or a pair row (pairs layout, when
 * pairs), `per` elements between heads. twin: the next job packs the same
 * source in another layout, right after this one for each head (the
 * second pass then reads the head from L2, not from memory). */
typedef struct fl16_job {
  uint16_t *dst;
  int64_t per, ld, n1, rows, cols;
  bool pairs, tr, twin;
  const char *x;
  const int64_t *st;
} fl16_job;

typedef struct fl16 {
  lt__bf16dot_kind kind;
  int64_t tp, sp, hp, hvp, lds, ldt;
  uint16_t *q, *kt, *v, *qt, *k, *vt, *go, *got; /* the data of store[] */
  /* the packs' memory, one tensor each, job by job: blocks of the storage cache, so a training step
   * reuses their pages, and the backward the forward's (q, K^T, and V's for K when HS = HSV) */
  lt_tensor *store[7];
  fl16_job job[7]; /* the packs to make (fl16_pack_all), njob of them */
  int njob;
} fl16;

/* A thread's bf16 scratch: tile operands and the transposed dK, dV of a
 * key tile. */
typedef struct fl16_scr {
  uint16_t *p;      /* rows [FL_BR][FL_BC]: P (forward), dS (backward) */
  uint16_t *w, *ds; /* pairs [tp/2][FL16_LDP]: W, dS of a head's query rows, one key tile (backward) */
  float *dkt, *dvt; /* [HS][FL16_LDC], [HSV][FL16_LDC]: dK^T, dV^T of one key tile (backward) */
  double *d;        /* [group][T]: D = rowsum(dO * out) of the task's query rows (backward) */
} fl16_scr;

/* The kernel for a fused call of dtype dt on this thread: under autocast,
 * f32, on a CPU with a kernel; else NONE (tile products then go through
 * lt__mat_gemm). LT_ATTENTION_BF16 (read at each call, for tests and
 * benchmarks): "0" = NONE, "dot" = at most the vdpbf16ps kernel. */
static lt__bf16dot_kind fl16_select(lt_dtype dt) {
  if (dt != LT_DTYPE_F32 || !lt__autocast_active()) return LT__BF16DOT_NONE;
  const lt__bf16dot_kind best = lt__bf16dot_best();
  const char *e = getenv("LT_ATTENTION_BF16");
  if (e && !strcmp(e, "0")) return LT__BF16DOT_NONE;
  if (e && !strcmp(e, "dot") && best > LT__BF16DOT_DOT) return LT__BF16DOT_DOT;
  return best;
}

/* fl16_select for a planned call whose output (or dq) has column stride
 * out_cs: the kernels write rows with contiguous columns. */
static lt__bf16dot_kind fl16_kind(const sdpa_plan *pl, int64_t out_cs) {
  return out_cs == 1 ? fl16_select(pl->dt) : LT__BF16DOT_NONE;
}

static void fl16_free(fl16 *x) {
  if (!x) return;
  for (int i = 0; i < 7; i++) lt_tensor_free(x->store[i]);
  free(x);
}

static void fl16_job_run(const fl16_job *j, int64_t i) { /* (batch, head) i of the job */
  const int64_t rs = j->tr ? j->st[3] : j->st[2], cs = j->tr ? j->st[2] : j->st[3];
  const float *src = (const float *)at4(j->x, j->st, sizeof(float), i / j->n1, i % j->n1);
  if (j->pairs) lt__bf16dot_pack_pairs(j->dst + i * j->per, j->ld, src, j->rows, j->cols, rs, cs);
  else lt__bf16dot_pack_rows(j->dst + i * j->per, j->ld, src, j->rows, j->cols, rs, cs);
}

/* The packs of a call (backward: with dO, pl->go set), allocated and
 * described, not yet made (fl16_pack_all makes them), or NULL with *st set
 * (LT_ERR_NOMEM; LT_OK when the kind is NONE). Returns new (fl16_free). */
static fl16 *fl16_make(const sdpa_plan *pl, lt__bf16dot_kind kind, bool backward, lt_status *st) {
  *st = LT_OK;
  if (kind == LT__BF16DOT_NONE) return NULL;
  fl16 *x = calloc(1, sizeof *x);
  if (!x) {
    *st = lt__err(LT_ERR_NOMEM, OP ": out of memory for the bf16 operands");
    return NULL;
  }
  const int64_t B = pl->B, NH = pl->NH, NKV = pl->NKV;
  x->kind = kind;
  x->tp = LT__BF16DOT_CEIL(pl->T), x->sp = LT__BF16DOT_CEIL(pl->S);
  x->hp = LT__BF16DOT_CEIL(pl->HS), x->hvp = LT__BF16DOT_CEIL(pl->HSV);
  x->lds = 2 * x->sp + 32, x->ldt = x->tp + 32;
  const int64_t T = pl->T, S = pl->S, HS = pl->HS, HSV = pl->HSV, tp = x->tp, sp = x->sp, hp = x->hp, hvp = x->hvp;
  const int64_t lds = x->lds, ldt = x->ldt;
  fl16_job *j = x->job;
  /* dst (below), per, ld, heads, rows, cols, pairs, transposed, twin, source, strides; per is a
   * head's rows x their stride (pair rows x theirs for pairs): dims[i], checked below */
  int64_t dims[7][2];
  dims[j - x->job][0] = tp, dims[j - x->job][1] = hp;
  *j++ = (fl16_job){NULL, tp * hp, hp, NH, T, HS, false, false, backward, pl->q, pl->qs};
  if (backward) {
    dims[j - x->job][0] = hp, dims[j - x->job][1] = ldt;
    *j++ = (fl16_job){NULL, hp * ldt, ldt, NH, HS, T, false, true, false, pl->q, pl->qs};
  }
  dims[j - x->job][0] = hp / 2, dims[j - x->job][1] = lds;
  *j++ = (fl16_job){NULL, hp / 2 * lds, lds, NKV, HS, S, true, true, backward, pl->k, pl->ks};
  if (!backward) {
    dims[j - x->job][0] = sp / 2, dims[j - x->job][1] = 2 * hvp;
    *j++ = (fl16_job){NULL, sp * hvp, 2 * hvp, NKV, S, HSV, true, false, false, pl->v, pl->vs};
  } else {
    dims[j - x->job][0] = sp / 2, dims[j - x->job][1] = 2 * hp;
    *j++ = (fl16_job){NULL, sp * hp, 2 * hp, NKV, S, HS, true, false, false, pl->k, pl->ks};
    dims[j - x->job][0] = hvp / 2, dims[j - x->job][1] = lds;
    *j++ = (fl16_job){NULL, hvp / 2 * lds, lds, NKV, HSV, S, true, true, false, pl->v, pl->vs};
    dims[j - x->job][0] = tp, dims[j - x->job][1] = hvp;
    *j++ = (fl16_job){NULL, tp * hvp, hvp, NH, T, HSV, false, false, true, pl->go, pl->gs};
    dims[j - x->job][0] = hvp, dims[j - x->job][1] = ldt;
    *j++ = (fl16_job){NULL, hvp * ldt, ldt, NH, HSV, T, false, true, false, pl->go, pl->gs};
  }
  x->njob = (int)(j - x->job);
  /* the sizes, checked (at T = 1 or HS = 1 the padding makes them far above q's numel) */
  for (int i = 0; i < x->njob; i++) {
    int64_t n;
    if ((*st = lt__shape_numel(OP, 4, (const int64_t[]){B, x->job[i].n1, dims[i][0], dims[i][1]}, &n)) != LT_OK) {
      fl16_free(x);
      return NULL;
    }
    if (!(x->store[i] = lt_empty(LT_DTYPE_BF16, LT_SHAPE(n > 0 ? n : 1)))) {
      fl16_free(x);
      *st = lt__err(LT_ERR_NOMEM, OP ": out of memory for the bf16 operands (%lld bytes for one)", (long long)n * 2);
      return NULL;
    }
    x->job[i].dst = (uint16_t *)x->store[i]->data;
  }
  uint16_t **dst[2][7] = {{&x->q, &x->kt, &x->v}, {&x->q, &x->qt, &x->kt, &x->k, &x->vt, &x->go, &x->got}};
  for (int i = 0; i < x->njob; i++) *dst[backward][i] = x->job[i].dst;
  return x;
}

/* Makes the packs of x (every (job, batch, head), dealt out one by one; a
 * job and its twin as one item per head):
 * called by every thread of the parallel region of the tile tasks (or
 * outside any region, on one thread) before the tasks, as fl_pack_all: an
 * orphaned worksharing loop that ends in the team's barrier, so the packs
 * wake the threads once with the tasks, not once per pack (each region
 * start waits for a sleeping thread under OMP_WAIT_POLICY=PASSIVE). */
static void fl16_pack_all(const sdpa_plan *pl, const fl16 *x) {
  if (!x) return; /* the same on every thread */
  int64_t n = 0;
  for (int i = 0; i < x->njob; i += 1 + x->job[i].twin) n += pl->B * x->job[i].n1;
#pragma omp for schedule(static, 1)
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i;
    int jb = 0;
    while (r >= pl->B * x->job[jb].n1) {
      r -= pl->B * x->job[jb].n1;
      jb += 1 + x->job[jb].twin;
    }
    fl16_job_run(&x->job[jb], r);
    if (x->job[jb].twin) fl16_job_run(&x->job[jb + 1], r);
  }
}

/* Bytes of a thread's fl16_scr (backward: with W, dS, dK^T, dV^T),
 * 64-aligned. tp: T rounded up to 32. */
static size_t fl16_scr_bytes(const sdpa_plan *pl, int64_t tp, bool backward) {
  const size_t rows = (size_t)FL_BR * FL_BC * 2, pairs = (size_t)tp / 2 * FL16_LDP * 2;
  size_t n = (rows + 63) / 64 * 64;
  if (backward)
    n += 2 * ((pairs + 63) / 64 * 64) + (size_t)(pl->HS + pl->HSV) * FL16_LDC * sizeof(float) +
         (size_t)pl->group * (size_t)pl->T * sizeof(double) + 64;
  return (n + 63) / 64 * 64;
}

static fl16_scr fl16_scr_at(const sdpa_plan *pl, char *mem, int64_t tp, bool backward) {
  fl16_scr s = {0};
  s.p = (uint16_t *)mem;
  if (backward) {
    const size_t rows = ((size_t)FL_BR * FL_BC * 2 + 63) / 64 * 64;
    const size_t pairs = ((size_t)tp / 2 * FL16_LDP * 2 + 63) / 64 * 64;
    s.w = (uint16_t *)(void *)(mem + rows), s.ds = (uint16_t *)(void *)(mem + rows + pairs);
    s.dkt = (float *)(void *)(mem + rows + 2 * pairs);
    s.dvt = s.dkt + pl->HS * FL16_LDC;
    s.d = (double *)(void *)(s.dvt + pl->HSV * FL16_LDC);
  }
  return s;
}

/* The products of the tiles (f32 buffers passed as void *: the f64
 * instantiation of nn/attention_fused.inc names these calls too, with a
 * NULL scratch that never reaches them). */

/* Sb (row stride FL_BC) = scale * Q K^T for the rows t.. (nr) of (b, h) and
 * the keys s0.. (nv). */
static void fl16_scores(const sdpa_plan *pl, int64_t b, int64_t h, int64_t t, int64_t nr, int64_t s0, int64_t nv,
                        void *Sb) {
  const fl16 *x = pl->b16;
  const int64_t bh = b * pl->NH + h, bg = b * pl->NKV + h / pl->group;
  lt__bf16dot_gemm(x->kind, nr, nv, pl->HS, (float)pl->scale, x->q + (bh * x->tp + t) * x->hp, x->hp,
                   x->kt + bg * x->hp / 2 * x->lds + 2 * s0, x->lds, false, (float *)Sb, FL_BC);
}

/* O (row stride ldo) = P V, or += when accumulate, for the keys s0.. (nv);
 * P: the f32 weights in Sb (nr x nv), converted here. */
static void fl16_pv(const sdpa_plan *pl, fl16_scr *sc, int64_t b, int64_t h, int64_t nr, int64_t s0, int64_t nv,
                    const void *Sb, void *O, int64_t ldo, bool accumulate) {
  const fl16 *x = pl->b16;
  const int64_t bg = b * pl->NKV + h / pl->group;
  lt__bf16dot_pack_rows(sc->p, FL_BC, (const float *)Sb, nr, nv, FL_BC, 1);
  lt__bf16dot_gemm(x->kind, nr, pl->HSV, nv, 1.0f, sc->p, FL_BC, x->v + bg * x->sp * x->hvp + s0 * x->hvp,
                   2 * x->hvp, accumulate, (float *)O, ldo);
}

/* dPb (row stride FL_BC) = dO V^T for the rows t.. (nr) of (b, h), keys
 * s0.. (nv). */
static void fl16_dp(const sdpa_plan *pl, int64_t b, int64_t h, int64_t t, int64_t nr, int64_t s0, int64_t nv,
                    void *dPb) {
  const fl16 *x = pl->b16;
  const int64_t bh = b * pl->NH + h, bg = b * pl->NKV + h / pl->group;
  lt__bf16dot_gemm(x->kind, nr, nv, pl->HSV, 1.0f, x->go + (bh * x->tp + t) * x->hvp, x->hvp,
                   x->vt + bg * x->hvp / 2 * x->lds + 2 * s0, x->lds, false, (float *)dPb, FL_BC);
}

/* dst rows s in [0, m) (strides rs, cs) = columns s of src [n][lds]: in
 * registers when dst's columns are contiguous (the usual case), else in
 * blocks of 16 keys (a cache line of src per (block, d), 16 rows of dst). */
static void fl16_untranspose(float *dst, int64_t rs, int64_t cs, const float *src, int64_t lds, int64_t n, int64_t m) {
  if (cs == 1 || n == 1) {
    lt__bf16dot_transpose_f32(dst, rs, src, lds, n, m);
    return;
  }
  for (int64_t s0 = 0; s0 < m; s0 += 16) {
    const int64_t ns = m - s0 < 16 ? m - s0 : 16;
    for (int64_t d = 0; d < n; d++) {
      const float *row = src + d * lds + s0;
      for (int64_t i = 0; i < ns; i++) dst[(s0 + i) * rs + d * cs] = row[i];
    }
  }
}

/* K^T (Q K^T's B) and V^T (dO V^T's B) of every key tile of every (b, kv
 * head), packed once per call for the panel kernel (f32; lt__mat_pack,
 * tensor/gemm_internal.h), so no product gathers its B anew for each query
 * tile, head and diagonal piece that reads the key tile. Tile j of (b, g) is
 * at base + ((b * NKV + g) * ntk + j) * tile; a NULL base: not packed (f64,
 * autocast, no AVX-512, a head size outside the kernel's rule, no memory). */
typedef struct fl_packs {
  float *kt, *vt;
  int64_t ktile, vtile; /* floats per packed tile */
  lt_tensor *ktt, *vtt; /* the storage of kt, vt (free with lt_tensor_free) */
} fl_packs;

/* The packed tile j (keys j*FL_BC .., nc of them, kdim rows) of (b, g) in
 * base, tile floats apart, or NULL: use lt__mat_gemm. The test is the one
 * fl_pack_all packed by, so both name the same tiles. */
static const float *fl_tile(const float *base, int64_t tile, const sdpa_plan *pl, int64_t b, int64_t g, int64_t j,
                            int64_t kdim, int64_t nc) {
  if (!base || !lt__mat_pack_floats(kdim, nc)) return NULL;
  return base + ((b * pl->NKV + g) * ((pl->S + FL_BC - 1) / FL_BC) + j) * tile;
}

/* The buffer for K^T (v false) or V^T (v true) of every key tile of every
 * (b, g): *store, a new f32 tensor (free with lt_tensor_free; its storage
 * comes from the library's block cache, so a training step reuses the same
 * pages instead of paying the kernel's zeroing of fresh ones)
 * of *tile floats per tile; returns its data, or NULL with *store NULL (then
 * the products pack their B themselves, as before). */
static float *fl_pack_buf(const sdpa_plan *pl, bool v, int64_t *tile, lt_tensor **store) {
  const int64_t kdim = v ? pl->HSV : pl->HS, S = pl->S, n = pl->B * pl->NKV * ((S + FL_BC - 1) / FL_BC);
  *tile = pl->dt == LT_DTYPE_F32 && n > 0 ? lt__mat_pack_floats(kdim, S < FL_BC ? S : FL_BC) : 0;
  int64_t numel;
  *store = NULL;
  if (!*tile || lt__shape_numel(OP, LT_SHAPE(n, *tile), &numel) != LT_OK) return NULL;
  *store = lt_empty(LT_DTYPE_F32, LT_SHAPE(numel));
  float *buf = *store ? (float *)(*store)->data : NULL;
  if (!buf || ((uintptr_t)buf & 63)) { /* packed panels are read with aligned loads */
    lt_tensor_free(*store);
    *store = NULL;
    return NULL;
  }
  return buf;
}

/* Packs every key tile of every (b, g) into pk's buffers (K^T into kt, V^T
 * into vt, those not NULL). Called by every thread of the parallel region
 * of the tile tasks (or outside any region, on one thread), in the caller's
 * autocast mode, before the tasks: an orphaned worksharing loop that ends
 * in the team's barrier, so the passes wake their threads once, not twice
 * (with OMP_WAIT_POLICY=PASSIVE each region start waits for a sleeping
 * thread to be scheduled, on a loaded machine a time slice). The tiles are
 * dealt out one by one (static, 1): in blocks, the forward (K^T only) gave
 * every tile to the first thread and none to the second, all of the
 * packing serial in wall time. */
static void fl_pack_all(const sdpa_plan *pl, const fl_packs *pk) {
  const int64_t S = pl->S, ntk = (S + FL_BC - 1) / FL_BC, n = pl->B * pl->NKV * ntk;
  const int64_t last = S - (ntk - 1) * FL_BC; /* keys of the last tile */
  /* in this thread's autocast mode: the test fl_tile repeats */
  const bool klast = pk->kt && lt__mat_pack_floats(pl->HS, last), vlast = pk->vt && lt__mat_pack_floats(pl->HSV, last);
  if (!pk->kt && !pk->vt) return; /* the same on every thread */
#pragma omp for schedule(static, 1)
  for (int64_t i = 0; i < 2 * n; i++) {
    const bool v = i >= n;
    const int64_t t = v ? i - n : i, bg = t / ntk, j = t % ntk, s0 = j * FL_BC, nc = j == ntk - 1 ? last : FL_BC;
    float *buf = v ? pk->vt : pk->kt;
    if (!buf || (j == ntk - 1 && !(v ? vlast : klast))) continue;
    const int64_t kdim = v ? pl->HSV : pl->HS, *xs = v ? pl->vs : pl->ks;
    const float *x = (const float *)at4(v ? pl->v : pl->k, xs, sizeof(float), bg / pl->NKV, bg % pl->NKV) + s0 * xs[2];
    lt__mat_pack(lt__mat_t(LT__MAT(x, nc, kdim, xs[2], xs[3])), buf + t * (v ? pk->vtile : pk->ktile));
  }
}

#define FT float
#define FN f32
#define FDT LT_DTYPE_F32
#define FL_CLONES FL_CLONES_F32
#include "nn/attention_fused.inc"
#undef FT
#undef FN
#undef FDT
#undef FL_CLONES

/* Zeroes columns [c, nc) of the pair rows of the rows [r, r + n) in a pairs
 * buffer (FL16_LDP elements a pair row): query rows that no piece of the
 * tile computed, the padding rows past T (r = T: the pair of row T - 1 when
 * T is odd is left alone, the packing zeroed its other half), or the keys a
 * piece did not see. */
static void fl16_zero_pairs(uint16_t *w, int64_t r, int64_t n, int64_t c, int64_t nc) {
  for (int64_t p = (r + 1) / 2; p < (r + n + 1) / 2; p++) memset(w + p * FL16_LDP + 2 * c, 0, (size_t)(nc - c) * 4);
}

/* The first query row, a multiple of 32 and at least rlo (the first row of
 * the query tiles that see the key tile), from which rows may see key s:
 * causal, the rows before s + T - S see none of the keys from s on. */
static int64_t fl16_first_row(const sdpa_plan *pl, int64_t rlo, int64_t s) {
  if (!pl->causal) return rlo;
  const int64_t f = s + pl->T - pl->S, r = f > 0 ? f / 32 * 32 : 0;
  return r > rlo ? r : rlo;
}

/* The backward of (b, kv head g) over the keys [j0, j1) on the bf16 tiles:
 * fl_bwd_f32's contract (dq, dqh, dqr, dqc, Pb, Wb, dPb, kb as there; sc:
 * the thread's bf16 scratch, D in sc->d) with the same recomputation and
 * formulas, in another order: key tiles outside, then the group's query
 * heads, then their query tiles and pieces (fl_pieces). Per piece:
 * S = scale Q K^T, P and W (fl_bwd_p), dP = dO V^T, dS (fl_bwd_ds),
 * dQ += scale dS K (rows of dS, the piece's keys deep), and W and dS
 * converted to pairs into the head's buffers sc->w, sc->ds at the piece's
 * query rows. Per (key tile, head): dV^T (+)= dO^T W and dK^T (+)= scale
 * Q^T dS, each one product as deep as all the query rows that see the key
 * tile (the first head writes, the others add). Per key tile: dK^T, dV^T
 * transposed into dk, dv: products as deep as all those rows, instead of
 * 32-row-deep ones into [HS][S] buffers whose 4 KB rows would share L1
 * sets. dQ's rows are written by the first key tile's
 * products and accumulated by the others in key order (as fl_bwd), so only
 * the sums of dK and dV are in another order. Rows and keys no piece
 * computed are zeros in the pairs buffers. Only this task writes dk, dv
 * rows [j0, j1) and its dQ, in a fixed order: results never depend on the
 * thread count. */
static void fl16_bwd(const sdpa_plan *pl, int64_t b, int64_t g, int64_t j0, int64_t j1, float *dq, int64_t dqh,
                     int64_t dqr, int64_t dqc, float *Pb, float *Wb, float *dPb, uint8_t *kb, const fl16_scr *sc) {
  const fl16 *x = pl->b16;
  const int64_t T = pl->T, S = pl->S, HS = pl->HS, HSV = pl->HSV, NH = pl->NH;
  const int64_t *os = pl->os, *gs = pl->gs, *dks = pl->dks, *dvs = pl->dvs;
  float *dK = pl->dk ? (float *)at4(pl->dk, dks, 4, b, g) : NULL;
  float *dV = pl->dv ? (float *)at4(pl->dv, dvs, 4, b, g) : NULL;
  const bool need_ds = dq || dK;
  const float sc32 = (float)pl->scale;
  const int64_t h0 = g * pl->group, h1 = h0 + pl->group, bg = b * pl->NKV + g;
  if (need_ds) /* D of the group's query rows that see keys of [j0, j1), once (sc->d) */
    for (int64_t h = h0; h < h1; h++)
      for (int64_t t0 = 0; t0 < T; t0 += FL_BR) {
        const int64_t nb = t0 + FL_BR < T ? FL_BR : T - t0;
        if (block_keys(pl, t0 + nb) > j0)
          fl_bwd_d_f32(pl, (const float *)at4(pl->go, gs, 4, b, h) + t0 * gs[2],
                       (const float *)at4(pl->o, os, 4, b, h) + t0 * os[2], nb, sc->d + (h - h0) * T + t0);
      }
  if (dq && j0 == 0) /* rows that see no key at all: no key tile writes them */
    for (int64_t h = h0; h < h1; h++)
      for (int64_t t0 = 0; t0 < T; t0 += FL_BR) {
        const int64_t nb = t0 + FL_BR < T ? FL_BR : T - t0;
        if (block_keys(pl, t0 + nb) <= 0) zero_mat((char *)(dq + (h - h0) * dqh + t0 * dqr), nb, HS, dqr, dqc, 4);
      }
  for (int64_t s0 = j0; s0 < j1; s0 += FL_BC) {
    const int64_t ncf = s0 + FL_BC < j1 ? FL_BC : j1 - s0; /* the key tile's keys */
    bool seen = false;
    for (int64_t h = h0; h < h1; h++) {
      const int64_t bh = b * NH + h;
      const float *lse = (const float *)pl->lse + bh * T;
      int64_t rlo = -1; /* the first query row that sees the key tile */
      for (int64_t t0 = 0; t0 < T; t0 += FL_BR) {
        const int64_t nb = t0 + FL_BR < T ? FL_BR : T - t0, kmax = block_keys(pl, t0 + nb);
        if (kmax <= s0) continue; /* causal: the query tile sees none of the key tile */
        const int64_t nc = s0 + ncf < kmax ? ncf : kmax - s0;
        if (rlo < 0) rlo = t0;
        float *dQ = dq ? dq + (h - h0) * dqh + t0 * dqr : NULL;
        const double *D = sc->d + (h - h0) * T + t0;
        fl_piece pc[FL_BR / FL_SUB];
        const int np = fl_pieces(pl, t0, nb, s0, nc, pc);
        if (dQ && s0 == 0) fl_zero_gaps_f32(pc, np, nb, dQ, HS, dqr, dqc); /* the pieces write the others */
        int64_t r = 0; /* rows up to r: computed by a piece, or zeroed */
        for (int ip = 0; ip <= np; ip++) {
          const int64_t r1 = ip < np ? pc[ip].r0 : nb;
          if (r1 > r) {
            if (dV) fl16_zero_pairs(sc->w, t0 + r, r1 - r, 0, ncf);
            if (dK) fl16_zero_pairs(sc->ds, t0 + r, r1 - r, 0, ncf);
          }
          if (ip == np) break;
          const int64_t r0 = pc[ip].r0, nr = pc[ip].nr, nv = pc[ip].nv, t = t0 + r0;
          r = r0 + nr;
          fl16_scores(pl, b, h, t, nr, s0, nv, Pb);
          if (pl->drop) lt__bernoulli_tile(pl->drop, (bh * T + t) * S + s0, S, nr, nv, kb, FL_BC);
          fl_bwd_p_f32(pl, Pb, Wb, kb, lse + t, b, h, t, nr, s0, nv);
          if (dV) { /* W as pairs at the piece's rows, keys it did not see zero */
            lt__bf16dot_pack_pairs(sc->w + t / 2 * FL16_LDP, FL16_LDP, pl->drop ? Wb : Pb, nr, nv, FL_BC, 1);
            if (nv < ncf) fl16_zero_pairs(sc->w, t, nr, nv, ncf);
          }
          if (!need_ds) continue;
          fl16_dp(pl, b, h, t, nr, s0, nv, dPb);
          fl_bwd_ds_f32(pl, Pb, dPb, kb, D + r0, nr, nv);
          /* dS as rows (dQ's A) and as pairs at the piece's rows (dK^T's B) */
          uint16_t *dsp = sc->ds + t / 2 * FL16_LDP;
          if (dQ && dK) lt__bf16dot_pack_rows_pairs(sc->p, FL_BC, dsp, FL16_LDP, dPb, nr, nv, FL_BC);
          else if (dQ) lt__bf16dot_pack_rows(sc->p, FL_BC, dPb, nr, nv, FL_BC, 1);
          else lt__bf16dot_pack_pairs(dsp, FL16_LDP, dPb, nr, nv, FL_BC, 1);
          if (dK && nv < ncf) fl16_zero_pairs(sc->ds, t, nr, nv, ncf);
          if (dQ) /* dQ += scale dS K: [nr,nv] x [nv,HS] */
            lt__bf16dot_gemm(x->kind, nr, HS, nv, sc32, sc->p, FL_BC, x->k + (bg * x->sp + s0) * x->hp, 2 * x->hp,
                             s0 > 0, dQ + r0 * dqr, dqr);
        }
      }
      if (rlo < 0) continue; /* no query row of the head sees the key tile */
      if (dV) fl16_zero_pairs(sc->w, T, x->tp - T, 0, ncf); /* the padding rows up to tp */
      if (dK) fl16_zero_pairs(sc->ds, T, x->tp - T, 0, ncf);
      /* dV^T (+)= dO^T W: [HSV, rows] x [rows, keys]; dK^T (+)= scale Q^T dS; in blocks of 32 keys
       * with the same first row r that sees them (causal: a diagonal tile's blocks start 32 rows
       * apart, the rows above see none of their keys, W and dS are 0 there) */
      for (int64_t c0 = 0, c1; c0 < ncf; c0 = c1) {
        const int64_t r = fl16_first_row(pl, rlo, s0 + c0);
        for (c1 = c0 + 32; c1 < ncf && fl16_first_row(pl, rlo, s0 + c1) == r;) c1 += 32;
        if (c1 > ncf) c1 = ncf;
        if (dV)
          lt__bf16dot_gemm(x->kind, HSV, c1 - c0, x->tp - r, 1.0f, x->got + bh * x->hvp * x->ldt + r, x->ldt,
                           sc->w + r / 2 * FL16_LDP + 2 * c0, FL16_LDP, seen, sc->dvt + c0, FL16_LDC);
        if (dK)
          lt__bf16dot_gemm(x->kind, HS, c1 - c0, x->tp - r, sc32, x->qt + bh * x->hp * x->ldt + r, x->ldt,
                           sc->ds + r / 2 * FL16_LDP + 2 * c0, FL16_LDP, seen, sc->dkt + c0, FL16_LDC);
      }
      seen = true;
    }
    if (!seen) { /* no query row sees these keys */
      if (dK) zero_mat((char *)(dK + s0 * dks[2]), ncf, HS, dks[2], dks[3], 4);
      if (dV) zero_mat((char *)(dV + s0 * dvs[2]), ncf, HSV, dvs[2], dvs[3], 4);
      continue;
    }
    if (dK) fl16_untranspose(dK + s0 * dks[2], dks[2], dks[3], sc->dkt, FL16_LDC, HS, ncf);
    if (dV) fl16_untranspose(dV + s0 * dvs[2], dvs[2], dvs[3], sc->dvt, FL16_LDC, HSV, ncf);
  }
}

#define FT double
#define FN f64
#define FDT LT_DTYPE_F64
#define FL_CLONES
#include "nn/attention_fused.inc"
#undef FT
#undef FN
#undef FDT
#undef FL_CLONES

/* A new tensor of shape `shape` (4-d) whose memory follows the dim order of
 * the strides xstride of a tensor x of shape xshape when x is a permutation of a contiguous tensor (a transposed
 * view, say), else contiguous; zero-filled if zero. So the output and the
 * gradients of the usual q = view(x W^T).transpose(1, 2) are themselves
 * transposes of contiguous [B,T,NH,HS] buffers, and the transpose + reshape
 * that merge or unmerge the heads around attention need no copy. */
static lt_tensor *alloc_order(lt_dtype dt, const int64_t *shape, const int64_t *xshape, const int64_t *xstride,
                              bool zero) {
  int ord[4] = {0, 1, 2, 3};
  for (int i = 1; i < 4; i++) /* stable insertion sort by decreasing stride */
    for (int j = i; j > 0 && xstride[ord[j]] > xstride[ord[j - 1]]; j--) {
      const int t = ord[j];
      ord[j] = ord[j - 1];
      ord[j - 1] = t;
    }
  bool dense = xshape[0] * xshape[1] * xshape[2] * xshape[3] > 0;
  int64_t want = 1;
  for (int i = 3; i >= 0 && dense; i--) { /* x's strides are the permuted contiguous ones */
    if (xshape[ord[i]] != 1 && xstride[ord[i]] != want) dense = false;
    want *= xshape[ord[i]];
  }
  if (!dense)
    for (int i = 0; i < 4; i++) ord[i] = i;
  int64_t pshape[4], st[4];
  for (int i = 0; i < 4; i++) pshape[i] = shape[ord[i]];
  lt_tensor *buf = zero ? lt_zeros(dt, 4, pshape) : lt_empty(dt, 4, pshape);
  if (!buf) return NULL;
  if (!dense) return buf;
  int64_t acc = 1;
  for (int i = 3; i >= 0; i--) {
    st[ord[i]] = acc;
    acc *= pshape[i];
  }
  lt_tensor *v = lt__view_of(buf, 4, shape, st, buf->offset);
  lt_tensor_free(buf);
  if (!v) lt__err(LT_ERR_NOMEM, OP ": out of memory for a tensor object");
  return v;
}
/* The same, in the memory order of the 4-d tensor x. */
static lt_tensor *alloc_like(lt_dtype dt, const int64_t *shape, const lt_tensor *x, bool zero) {
  return alloc_order(dt, shape, x->shape, x->stride, zero);
}

/* How to run ntasks independent tasks of `work` multiply-adds in all: one
 * task per thread with single-threaded BLIS; or, with fewer tasks than
 * threads but much work, the tasks one after another with BLIS threads;
 * or, for little work, everything on this thread. Each task computes the
 * same bits whichever way (BLIS splits rows and columns, not sums). */
static int task_threads(int64_t ntasks, int64_t work, bool *one) {
  const int nt = omp_get_max_threads();
  *one = true;
  if (nt <= 1 || work < LT__PARALLEL_MIN * 16) return 1;
  if (ntasks >= nt) return nt;
  *one = false;
  return 1;
}

/* ======================================================================== */
/* Validation                                                               */
/* ======================================================================== */

static lt_status check_inputs(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                              const lt_attention_opts *o, const lt_nn_ctx *ctx) {
  if (!q) return lt__err_null(OP, "q");
  if (!k) return lt__err_null(OP, "k");
  if (!v) return lt__err_null(OP, "v");
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
    return lt__err(LT_ERR_SHAPE,
                   OP ": q is %s, k is %s, v is %s: q must be [B,NH,T,HS] and k, v [B,NKV,S,HS] (4-d)",
                   LT__D(q), LT__D(k), LT__D(v));
  if (!lt_dtype_is_float(q->dtype) || q->dtype != k->dtype || q->dtype != v->dtype)
    return lt__err(LT_ERR_DTYPE, OP ": q is %s, k is %s, v is %s: q, k, v need one float dtype (f32 or f64)",
                   LT__D(q), LT__D(k), LT__D(v));
  const int64_t B = q->shape[0], NH = q->shape[1], NKV = k->shape[1];
  if (k->shape[0] != B || v->shape[0] != B)
    return lt__err(LT_ERR_SHAPE, OP ": q is %s, k is %s, v is %s: batch sizes differ", LT__D(q), LT__D(k),
                   LT__D(v));
  if (k->shape[3] != q->shape[3])
    return lt__err(LT_ERR_SHAPE, OP ": q is %s, k is %s: head sizes differ (%lld vs %lld)", LT__D(q), LT__D(k),
                   (long long)q->shape[3], (long long)k->shape[3]);
  if (v->shape[1] != NKV || v->shape[2] != k->shape[2])
    return lt__err(LT_ERR_SHAPE, OP ": k is %s, v is %s: k and v need the same heads and length [B,NKV,S,*]",
                   LT__D(k), LT__D(v));
  if (NKV < 1 ? NH != 0 : NH % NKV != 0)
    return lt__err(LT_ERR_SHAPE,
                   OP ": q is %s, k is %s: %lld query heads are not a multiple of %lld key/value heads",
                   LT__D(q), LT__D(k), (long long)NH, (long long)NKV);
  if (!o) return LT_OK;
  const int64_t full[4] = {B, NH, q->shape[2], k->shape[2]};
  const lt_tensor *am = o->attn_mask;
  if (am) {
    if (am->dtype != LT_DTYPE_BOOL && !lt_dtype_is_float(am->dtype))
      return lt__err(LT_ERR_DTYPE, OP ": attn_mask is %s: must be bool (true = attend) or float (added)",
                     LT__D(am));
    bool ok = am->ndim <= 4;
    for (int i = 0; ok && i < am->ndim; i++) {
      const int64_t z = am->shape[am->ndim - 1 - i];
      ok = z == 1 || z == full[3 - i];
    }
    if (!ok)
      return lt__err(LT_ERR_SHAPE, OP ": attn_mask is %s: does not broadcast to [B,NH,T,S] = %s", LT__D(am),
                     LT__S(4, full));
  }
  const lt_tensor *kp = o->key_padding_mask;
  if (kp) {
    if (kp->dtype != LT_DTYPE_BOOL)
      return lt__err(LT_ERR_DTYPE, OP ": key_padding_mask is %s: must be bool (true = padding)", LT__D(kp));
    if (kp->ndim != 2 || (kp->shape[0] != B && kp->shape[0] != 1) || kp->shape[1] != full[3])
      return lt__err(LT_ERR_SHAPE, OP ": key_padding_mask is %s: must be [B,S] = [%lld,%lld]", LT__D(kp),
                     (long long)B, (long long)full[3]);
  }
  if (!(o->dropout_p >= 0.0 && o->dropout_p <= 1.0))
    return lt__err(LT_ERR_INVALID, OP ": dropout_p %g: need 0 <= p <= 1", o->dropout_p);
  if (isnan(o->scale)) return lt__err(LT_ERR_INVALID, OP ": scale is NaN (use 0 for 1/sqrt(HS))");
  if (o->impl != LT_ATTENTION_AUTO && o->impl != LT_ATTENTION_FUSED && o->impl != LT_ATTENTION_UNFUSED)
    return lt__err(LT_ERR_INVALID, OP ": impl %d is not an lt_attention_impl", (int)o->impl);
  if (ctx && ctx->training && o->dropout_p > 0 && !ctx->gen)
    return lt__err(LT_ERR_NULL, OP ": training with dropout_p %g needs ctx->gen (a generator)", o->dropout_p);
  return LT_OK;
}

/* ======================================================================== */
/* Forward                                                                  */
/* ======================================================================== */

typedef struct sdpa_aux {
  double scale, ks_drop;
  bool causal, dropout;
  /* the strides of q, k, v (as BLIS-ready) whose memory order dq, dk, dv
   * follow (alloc_order): the saved q, k, v are contiguous bf16 copies under
   * autocast */
  int64_t lay[3][4];
} sdpa_aux;

/* x (f32, 4-d [B,H,L,D], any strides) rounded to bf16 as a new contiguous
 * tensor (returns new, not recorded; NULL on error), each (b, h) matrix
 * converted by one thread: the operands of the unfused path's products
 * under autocast, converted once per call for all heads (and saved for the
 * backward) instead of once per product and row block, dense per head (the
 * layout oneDNN's brgemm kernels take without a copy). */
static lt_tensor *heads_bf16(const lt_tensor *x) {
  lt_tensor *y = lt_empty(LT_DTYPE_BF16, 4, x->shape);
  if (!y) return NULL;
  const int64_t H = x->shape[1], L = x->shape[2], D = x->shape[3], n = x->shape[0] * H;
  const int nt = lt__threads_for(x->numel, n);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; i++)
    lt__mat_bf16_rows(LT__MAT((const float *)x->data + (i / H) * x->stride[0] + (i % H) * x->stride[1], L, D,
                              x->stride[2], x->stride[3]),
                      (uint16_t *)y->data + i * L * D);
  return y;
}

static void free_n(lt_tensor **t, int n) {
  for (int i = 0; i < n; i++) lt_tensor_free(t[i]);
}

/* Fills the geometry fields of pl from the prepared q, k, v. */
static void plan_geometry(sdpa_plan *pl, const lt_tensor *q, const lt_tensor *k, const lt_tensor *v) {
  pl->qkv16 = q->dtype == LT_DTYPE_BF16; /* the unfused path's autocast copies: computing in f32 */
  pl->dt = pl->qkv16 ? LT_DTYPE_F32 : q->dtype;
  pl->es = (int64_t)lt_dtype_size(pl->dt);
  pl->qes = (int64_t)lt_dtype_size(q->dtype);
#ifdef LT__HAVE_VEXP16
  pl->x16 = pl->dt == LT_DTYPE_F32 && lt__cpu_avx512();
#endif
  pl->B = q->shape[0];
  pl->NH = q->shape[1];
  pl->T = q->shape[2];
  pl->HS = q->shape[3];
  pl->NKV = k->shape[1];
  pl->S = k->shape[2];
  pl->HSV = v->shape[3];
  pl->group = pl->NKV > 0 ? pl->NH / pl->NKV : 1;
  pl->q = q->data;
  pl->k = k->data;
  pl->v = v->data;
  memcpy(pl->qs, q->stride, sizeof pl->qs);
  memcpy(pl->ks, k->stride, sizeof pl->ks);
  memcpy(pl->vs, v->stride, sizeof pl->vs);
}

/* attn_mask as the plan reads it: bool or dtype dt (a float mask of
 * another dtype is cast, *tmp to free). NULL for no mask or on error. */
static const lt_tensor *mask_ready(const lt_tensor *am, lt_dtype dt, lt_tensor **tmp) {
  *tmp = NULL;
  if (!am || am->dtype == LT_DTYPE_BOOL || am->dtype == dt) return am;
  const bool prev = lt_set_grad_enabled(false);
  *tmp = lt_to_dtype(am, dt);
  lt_set_grad_enabled(prev);
  return *tmp;
}

/* Fills the mask fields of pl: am (bool or dt, from mask_ready) broadcast on
 * [B,NH,T,S], kp [B or 1,S]; either may be NULL. */
static void plan_masks(sdpa_plan *pl, const lt_tensor *am, const lt_tensor *kp) {
  if (am) {
    pl->am = am->data;
    pl->am_bool = am->dtype == LT_DTYPE_BOOL;
    pl->ames = (int64_t)lt_dtype_size(am->dtype);
    for (int i = 0; i < 4; i++) {
      const int d = am->ndim - 4 + i;
      pl->ams[i] = d >= 0 && am->shape[d] != 1 ? am->stride[d] : 0;
    }
  }
  if (kp) {
    pl->kpm = kp->data;
    pl->kpms[0] = kp->shape[0] != 1 ? kp->stride[0] : 0;
    pl->kpms[1] = kp->stride[1];
  }
}

/* The unfused forward: P [B,NH,T,S] materialised (and saved for backward). */
static lt_tensor *sdpa_unfused(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                               const lt_attention_opts *opts, const lt_nn_ctx *ctx, lt_tensor **weights) {
  const lt_attention_opts o = opts ? *opts : (lt_attention_opts){0};
  const lt_dtype dt = q->dtype;
  const bool dropout = ctx && ctx->training && o.dropout_p > 0;
  const bool grad = lt__needs_grad(3, (const lt_tensor *[]){q, k, v});

  /* Autocast (bf16 products): q, k, v converted once here, for all heads,
   * and saved as bf16 for the backward (whose products read them too). */
  const bool ac16 = dt == LT_DTYPE_F32 && lt__autocast_active();

  /* tmp: copies of q, k, v, a cast float mask, P, keep, W, the bf16 q, k, v */
  enum { TQ, TK, TV, TAM, TP, TKEEP, TW, TQ16, TK16, TV16, NTMP };
  lt_tensor *tmp[NTMP] = {0};
  const lt_tensor *qu = blis_ready(q, dt, &tmp[TQ]);
  const lt_tensor *ku = qu ? blis_ready(k, dt, &tmp[TK]) : NULL;
  const lt_tensor *vu = ku ? blis_ready(v, dt, &tmp[TV]) : NULL;
  if (vu && ac16 &&
      (!(tmp[TQ16] = heads_bf16(qu)) || !(tmp[TK16] = heads_bf16(ku)) || !(tmp[TV16] = heads_bf16(vu))))
    vu = NULL;
  if (!vu) {
    free_n(tmp, NTMP);
    return NULL;
  }
  /* what the products read, and the backward gets */
  const lt_tensor *qp = ac16 ? tmp[TQ16] : qu, *kp = ac16 ? tmp[TK16] : ku, *vp = ac16 ? tmp[TV16] : vu;
  sdpa_plan pl = {0};
  plan_geometry(&pl, qp, kp, vp);
  pl.ac16 = ac16;
  const int64_t B = pl.B, NH = pl.NH, T = pl.T, S = pl.S;
  pl.scale = o.scale > 0 ? o.scale : (pl.HS > 0 ? 1.0 / sqrt((double)pl.HS) : 1.0);
  pl.causal = o.causal;
  const lt_tensor *am = mask_ready(o.attn_mask, dt, &tmp[TAM]);
  if (o.attn_mask && !am) {
    free_n(tmp, NTMP);
    return NULL;
  }
  plan_masks(&pl, am, o.key_padding_mask);
  if (dropout) {
    pl.ks_drop = o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 0.0;
    tmp[TKEEP] = lt_bernoulli(ctx->gen, LT_DTYPE_BOOL, LT_SHAPE(B, NH, T, S), 1.0 - o.dropout_p);
    if (!tmp[TKEEP]) {
      free_n(tmp, NTMP);
      return NULL;
    }
    pl.keep = tmp[TKEEP]->data;
  }

  /* P for all (b, h) when backward or the caller needs it; else per thread. */
  const bool p_full = grad || (weights && !dropout);
  const bool w_full = weights && dropout;
  const int64_t oshape[4] = {B, NH, T, pl.HSV};
  lt_tensor *out = alloc_like(dt, oshape, q, S == 0); /* q's memory order */
  if (p_full) tmp[TP] = lt_empty(dt, LT_SHAPE(B, NH, T, S)); /* every row is written */
  if (w_full) tmp[TW] = lt_empty(dt, LT_SHAPE(B, NH, T, S));
  if (!out || (p_full && !tmp[TP]) || (w_full && !tmp[TW])) {
    lt_tensor_free(out);
    free_n(tmp, NTMP);
    return NULL;
  }
  pl.o = out->data;
  memcpy(pl.os, out->stride, sizeof pl.os);

  const int64_t ntasks = B * NH, ts = T * S;
  bool one;
  const int nt = task_threads(ntasks, ntasks * T * (S + 1) * (pl.HS + pl.HSV + 1), &one);
  const int nscr = (!p_full) + (dropout && !w_full);
  /* per thread: nscr [T,S] scratch scores of dt, and under autocast the bf16
   * copy of a row block's W */
  const int64_t w16n = ac16 ? (pl.causal && CAUSAL_ROWS < T ? CAUSAL_ROWS : T) * S : 0;
  const size_t per = (size_t)(nscr * ts * pl.es + w16n * 2);
  char *scratch = NULL;
  if (per && ntasks && ts) {
    scratch = malloc(per * (size_t)nt);
    if (!scratch) {
      lt__err(LT_ERR_NOMEM, OP ": q is %s, k is %s: out of memory for %d x %zu bytes of scratch scores", LT__D(q),
              LT__D(k), nt, per);
      lt_tensor_free(out);
      free_n(tmp, NTMP);
      return NULL;
    }
  }
  if (S > 0 && T > 0) {
    int err = 0;
    const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < ntasks; i++) {
      const lt_dtype prev = lt__autocast_adopt(ac);
      const int tid = nt > 1 ? omp_get_thread_num() : 0;
      char *mine = scratch ? scratch + per * (size_t)tid : NULL;
      char *P = p_full ? (char *)tmp[TP]->data + i * ts * pl.es : mine;
      char *W = w_full ? (char *)tmp[TW]->data + i * ts * pl.es : (p_full ? mine : mine + ts * pl.es);
      uint16_t *W16 = ac16 ? (uint16_t *)(mine + nscr * ts * pl.es) : NULL;
      if (fwd_task(&pl, one, i / NH, i % NH, P, W, W16) != LT_OK) {
#pragma omp atomic write
        err = 1;
      }
      lt__autocast_adopt(prev);
    }
    if (err) {
      lt__err(LT_ERR_BACKEND, OP ": q is %s, k is %s, v is %s: a BLIS product failed", LT__D(q), LT__D(k),
              LT__D(v));
      free(scratch);
      lt_tensor_free(out);
      free_n(tmp, NTMP);
      return NULL;
    }
  }
  free(scratch);

  if (grad) {
    sdpa_aux aux = {pl.scale, pl.ks_drop, pl.causal, dropout, {{0}}};
    memcpy(aux.lay[0], qu->stride, sizeof aux.lay[0]);
    memcpy(aux.lay[1], ku->stride, sizeof aux.lay[1]);
    memcpy(aux.lay[2], vu->stride, sizeof aux.lay[2]);
    const lt_tensor *saved[5] = {qp, kp, vp, tmp[TP], tmp[TKEEP]};
    if (lt__record(out, LT__OP_scaled_dot_product_attention, 3, (const lt_tensor *[]){q, k, v},
                   dropout ? 5 : 4, saved, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(out);
      free_n(tmp, NTMP);
      return NULL;
    }
  }
  if (weights) {
    lt_tensor *w = dropout ? tmp[TW] : tmp[TP];
    if (dropout) tmp[TW] = NULL;
    else tmp[TP] = NULL;
    *weights = w;
  }
  free_n(tmp, NTMP);
  return out;
}

/* ======================================================================== */
/* Backward                                                                 */
/* ======================================================================== */

/* The end of both backwards: on success gin gets dq, dk, dv (each may be
 * NULL); on error they are freed. Returns st. */
static lt_status hand_grads(lt_status st, lt_tensor *dq, lt_tensor *dk, lt_tensor *dv, lt_tensor **gin) {
  if (st != LT_OK) {
    lt_tensor_free(dq);
    lt_tensor_free(dk);
    lt_tensor_free(dv);
    return st;
  }
  gin[0] = dq;
  gin[1] = dk;
  gin[2] = dv;
  return LT_OK;
}

lt_status lt__bw_scaled_dot_product_attention(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const sdpa_aux *a = (const sdpa_aux *)node->aux;
  const lt_tensor *q = node->saved[0], *k = node->saved[1], *v = node->saved[2], *P = node->saved[3];
  const bool need_q = lt__needs_input_grad(node, 0), need_k = lt__needs_input_grad(node, 1),
             need_v = lt__needs_input_grad(node, 2);
  if (!need_q && !need_k && !need_v) return LT_OK;
  sdpa_plan pl = {0};
  plan_geometry(&pl, q, k, v); /* q, k, v: bf16 copies when the forward ran under autocast */
  pl.scale = a->scale;
  pl.causal = a->causal;
  pl.ks_drop = a->ks_drop;
  pl.keep = a->dropout ? node->saved[4]->data : NULL;
  /* bf16 products now (the forward's mode may differ: saved bf16 copies are
   * widened exactly by an f32 product, saved f32 ones converted by a bf16 one) */
  pl.ac16 = pl.dt == LT_DTYPE_F32 && lt__autocast_active();
  const int64_t B = pl.B, NH = pl.NH, NKV = pl.NKV, T = pl.T, S = pl.S, ts = T * S;

  lt_tensor *gtmp;
  const lt_tensor *g = blis_ready(gout, pl.dt, &gtmp);
  if (!g) return lt_last_status();
  /* dq is written everywhere by the tasks, which run unless T * S == 0; dk
   * and dv accumulate. */
  lt_tensor *dq = need_q ? alloc_order(pl.dt, q->shape, q->shape, a->lay[0], ts == 0) : NULL;
  /* under autocast the tasks write dk and dv whole (bwd_task) */
  const bool dkv_zero = !pl.ac16 || ts == 0;
  lt_tensor *dk = need_k ? alloc_order(pl.dt, k->shape, k->shape, a->lay[1], dkv_zero) : NULL;
  lt_tensor *dv = need_v ? alloc_order(pl.dt, v->shape, v->shape, a->lay[2], dkv_zero) : NULL;
  pl.go = g->data;
  memcpy(pl.gs, g->stride, sizeof pl.gs);
  if (dq) {
    pl.dq = dq->data;
    memcpy(pl.dqs, dq->stride, sizeof pl.dqs);
  }
  if (dk) {
    pl.dk = dk->data;
    memcpy(pl.dks, dk->stride, sizeof pl.dks);
  }
  if (dv) {
    pl.dv = dv->data;
    memcpy(pl.dvs, dv->stride, sizeof pl.dvs);
  }
  const int64_t ntasks = B * NKV;
  bool one;
  const int nt = task_threads(ntasks, B * NH * T * (S + 1) * (pl.HS + pl.HSV + 1), &one);
  const int nscr = 1 + (a->dropout && need_v);
  /* per thread: nscr [T,S] scratch of dt; under autocast the f32
   * accumulators of dK[g] and dV[g] and the bf16 copies of a row block's dS
   * and W */
  const int64_t b16n = pl.ac16 ? (pl.causal && CAUSAL_ROWS < T ? CAUSAL_ROWS : T) * S : 0;
  const int64_t accn = pl.ac16 ? S * (pl.HS + pl.HSV) : 0;
  const size_t per = (size_t)(nscr * ts * pl.es + accn * 4 + 2 * b16n * 2);
  char *scratch = ntasks && ts ? malloc(per * (size_t)nt) : NULL;
  lt_status st = LT_OK;
  if ((need_q && !dq) || (need_k && !dk) || (need_v && !dv)) st = lt_last_status();
  else if (ntasks && ts && !scratch)
    st = lt__err(LT_ERR_NOMEM, OP " backward: q is %s, k is %s: out of memory for %d x %zu bytes of scratch scores",
                 LT__D(q), LT__D(k), nt, per);
  if (st == LT_OK && ntasks && ts) {
    int err = 0;
    const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < ntasks; i++) {
      const lt_dtype prev = lt__autocast_adopt(ac);
      const int tid = nt > 1 ? omp_get_thread_num() : 0;
      char *scr = scratch + per * (size_t)tid;
      float *acc = (float *)(scr + nscr * ts * pl.es);
      uint16_t *ds16 = (uint16_t *)(acc + accn);
      if (bwd_task(&pl, one, i / NKV, i % NKV, P->data, scr, scr + ts * pl.es, ds16, ds16 + b16n, acc) != LT_OK) {
#pragma omp atomic write
        err = 1;
      }
      lt__autocast_adopt(prev);
    }
    if (err) st = lt__err(LT_ERR_BACKEND, OP " backward: q is %s, k is %s: a BLIS product failed", LT__D(q), LT__D(k));
  }
  free(scratch);
  lt_tensor_free(gtmp);
  return hand_grads(st, dq, dk, dv, gin);
}

/* ======================================================================== */
/* Fused forward and backward (FlashAttention-2 style)                      */
/* ======================================================================== */

typedef struct fl_aux {
  double scale, ks_drop;
  bool causal, dropout;
  int am_at, kpm_at; /* index of the saved attn_mask / key_padding_mask, or -1 */
  lt__bern_draw draw;
} fl_aux;

/* Threads for ntasks independent tile tasks of `work` multiply-adds in all:
 * all of them unless the work is small; each task runs BLIS on its thread,
 * so the result never depends on the count. */
static int fl_threads(int64_t ntasks, int64_t work) {
  const int nt = omp_get_max_threads();
  if (nt <= 1 || work < LT__PARALLEL_MIN * 16) return 1;
  return ntasks < nt ? (int)(ntasks > 0 ? ntasks : 1) : nt;
}

/* The backward's key chunks. One task per (b, kv head) leaves threads idle
 * when B * NKV is small (MQA at batch 1: one task), so the keys of each
 * (b, g) are then split into up to FL_MAX_CHUNKS chunks of whole key tiles,
 * enough for FL_MIN_TASKS tasks, each with its own dK, dV rows and a partial
 * dQ (summed in chunk order afterwards). The split depends on the shapes
 * only, never on the thread count, so results do not either. Causal: the
 * chunks are balanced by work (the query rows that see each key tile: the
 * first keys are seen by all). Fills bounds[0..n] (key indices); returns n.
 * FL_MIN_TASKS was 8: at B * NKV = 4 (the benchmark's B 1, NH 4) that made
 * 8 tasks with partial dQ sums where 4 whole ones balance 2 threads as well
 * (fwd+bwd CPU time at T 1024, HS 64, causal 23.0 -> 22.7 ms, within the
 * noise of a loaded machine; 2 MB less). */
#define FL_MIN_TASKS 4
#define FL_MAX_CHUNKS 8
static int64_t fl_chunks(const sdpa_plan *pl, int64_t *bounds) {
  const int64_t bg = pl->B * pl->NKV, nkt = (pl->S + FL_BC - 1) / FL_BC;
  int64_t n = bg >= FL_MIN_TASKS || bg == 0 ? 1 : (FL_MIN_TASKS + bg - 1) / bg;
  if (n > nkt) n = nkt;
  if (n > FL_MAX_CHUNKS) n = FL_MAX_CHUNKS;
  bounds[0] = 0;
  if (n <= 1) {
    bounds[1] = pl->S;
    return 1;
  }
  double total = 0, w[64 * FL_MAX_CHUNKS]; /* per key tile; tiles beyond the array count as the last */
  const int64_t nw = nkt < 64 * FL_MAX_CHUNKS ? nkt : 64 * FL_MAX_CHUNKS;
  for (int64_t j = 0; j < nkt; j++) {
    int64_t rows = pl->T;
    if (pl->causal) { /* rows t with t + S - T >= j * BC see the tile */
      const int64_t first = j * FL_BC - pl->S + pl->T;
      rows = first <= 0 ? pl->T : first >= pl->T ? 0 : pl->T - first;
    }
    const double wj = (double)rows + 1; /* + 1: every tile costs something */
    if (j < nw) w[j] = wj;
    else w[nw - 1] += wj;
    total += wj;
  }
  int64_t c = 1;
  double acc = 0;
  for (int64_t j = 0; j < nw && c < n; j++) {
    acc += w[j];
    /* close chunk c after tile j when its share is reached, keeping a tile for each chunk left */
    const int64_t left = nw - 1 - j; /* tiles after j */
    if ((acc >= total * (double)c / (double)n || left <= n - c) && left >= n - c) bounds[c++] = (j + 1) * FL_BC;
  }
  n = c;
  bounds[n] = pl->S;
  return n;
}

/* Zeroes what the backward task of (b, kv head g) over the keys [j0, j1)
 * owns and accumulates into: the rows [j0, j1) of dK[b, g] and dV[b, g]
 * (those not NULL), on the task's thread. (dQ needs none: fl_bwd.) */
static void fl_bwd_zero(const sdpa_plan *pl, int64_t b, int64_t g, int64_t j0, int64_t j1) {
  const int64_t es = pl->es;
  if (pl->dk) zero_mat(at4(pl->dk, pl->dks, es, b, g) + j0 * pl->dks[2] * es, j1 - j0, pl->HS, pl->dks[2], pl->dks[3], es);
  if (pl->dv)
    zero_mat(at4(pl->dv, pl->dvs, es, b, g) + j0 * pl->dvs[2] * es, j1 - j0, pl->HSV, pl->dvs[2], pl->dvs[3], es);
}

/* Saved for backward: q, k, v (as BLIS-ready), out, lse [B,NH,T], and the
 * masks (attn_mask as cast) when present; the dropout draw in aux. */
static lt_tensor *sdpa_fused(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                             const lt_attention_opts *opts, const lt_nn_ctx *ctx) {
  const lt_attention_opts o = opts ? *opts : (lt_attention_opts){0};
  const lt_dtype dt = q->dtype;
  const bool dropout = ctx && ctx->training && o.dropout_p > 0;
  const bool grad = lt__needs_grad(3, (const lt_tensor *[]){q, k, v});
  enum { TQ, TK, TV, TAM, TLSE, NTMP };
  lt_tensor *tmp[NTMP] = {0};
  const lt_tensor *qu = blis_ready(q, dt, &tmp[TQ]);
  const lt_tensor *ku = qu ? blis_ready(k, dt, &tmp[TK]) : NULL;
  const lt_tensor *vu = ku ? blis_ready(v, dt, &tmp[TV]) : NULL;
  const lt_tensor *am = vu ? mask_ready(o.attn_mask, dt, &tmp[TAM]) : NULL;
  if (!vu || (o.attn_mask && !am)) {
    free_n(tmp, NTMP);
    return NULL;
  }
  sdpa_plan pl = {0};
  plan_geometry(&pl, qu, ku, vu);
  plan_masks(&pl, am, o.key_padding_mask);
  const int64_t B = pl.B, NH = pl.NH, T = pl.T, S = pl.S, es = pl.es;
  pl.scale = o.scale > 0 ? o.scale : (pl.HS > 0 ? 1.0 / sqrt((double)pl.HS) : 1.0);
  pl.causal = o.causal;
  fl_aux aux = {.scale = pl.scale, .causal = o.causal, .dropout = dropout, .am_at = -1, .kpm_at = -1};
  if (dropout) {
    int64_t n;
    if (lt__shape_numel(OP, LT_SHAPE(B, NH, T, S), &n) != LT_OK) { /* the mask's element count */
      free_n(tmp, NTMP);
      return NULL;
    }
    pl.ks_drop = aux.ks_drop = o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 0.0;
    lt__bernoulli_defer(ctx->gen, n, 1.0 - o.dropout_p, &aux.draw);
    pl.drop = &aux.draw;
  }
  const int64_t oshape[4] = {B, NH, T, pl.HSV};
  lt_tensor *out = alloc_like(dt, oshape, q, false); /* q's memory order; every row is written */
  tmp[TLSE] = lt_empty(dt, LT_SHAPE(B, NH, T));
  if (!out || !tmp[TLSE]) {
    lt_tensor_free(out);
    free_n(tmp, NTMP);
    return NULL;
  }
  pl.o = out->data;
  memcpy(pl.os, out->stride, sizeof pl.os);
  pl.lse = tmp[TLSE]->data;

  const int64_t ntq = (T + FL_BR - 1) / FL_BR, ntasks = B * NH * ntq;
  const int nt = fl_threads(ntasks, B * NH * T * (S + 1) * (pl.HS + pl.HSV + 1));
  /* under autocast: q, k, v as bf16, packed once (fl16) */
  lt_status st16 = LT_OK;
  fl16 *b16 = ntasks ? fl16_make(&pl, fl16_kind(&pl, pl.HSV == 1 ? 1 : pl.os[3]), false, &st16) : NULL;
  pl.b16 = b16;
  /* per thread: scores [BR,BC], m [BR], l [BR] (double), keep [BR,BC], bf16 scratch */
  const size_t x16b = b16 ? fl16_scr_bytes(&pl, 0, false) : 0;
  const size_t per = (size_t)(FL_BR * FL_BC * es + FL_BR * es + FL_BR * 8 + FL_BR * FL_BC + 64 + 63) / 64 * 64 + x16b;
  char *scratch = ntasks && st16 == LT_OK ? aligned_alloc(64, per * (size_t)nt) : NULL;
  if (ntasks && !scratch) {
    if (st16 == LT_OK) lt__err(LT_ERR_NOMEM, OP ": out of memory for %d tile buffers", nt);
    fl16_free(b16);
    lt_tensor_free(out);
    free_n(tmp, NTMP);
    return NULL;
  }
  int err = 0;
  fl_packs pk = {0};
  if (!b16) /* the bf16 tiles have their own packs */
    pk.kt = fl_pack_buf(&pl, false, &pk.ktile, &pk.ktt);
  const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const lt_dtype prev = lt__autocast_adopt(ac);
    fl_pack_all(&pl, &pk); /* K^T (if any), then the team's barrier */
    fl16_pack_all(&pl, b16); /* or the bf16 packs */
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < ntasks; i++) {
      char *mine = scratch + per * (size_t)(nt > 1 ? omp_get_thread_num() : 0);
      double *l = (double *)mine; /* doubles first: aligned */
      char *Sb = mine + FL_BR * 8, *m = Sb + FL_BR * FL_BC * es;
      uint8_t *kb = (uint8_t *)(m + FL_BR * es);
      fl16_scr x16 = b16 ? fl16_scr_at(&pl, mine + (per - x16b), 0, false) : (fl16_scr){0};
      /* the last query tiles first: causal, they have the most keys to see
       * (dynamic scheduling then evens out the triangle) */
      const int64_t bh = i % (B * NH), t0 = (ntq - 1 - i / (B * NH)) * FL_BR;
      const lt_status st = dt == LT_DTYPE_F32
                               ? fl_fwd_f32(&pl, bh / NH, bh % NH, t0, (float *)Sb, (float *)m, l, kb, &pk,
                                            b16 ? &x16 : NULL)
                               : fl_fwd_f64(&pl, bh / NH, bh % NH, t0, (double *)Sb, (double *)m, l, kb, &pk, NULL);
      if (st != LT_OK) {
#pragma omp atomic write
        err = 1;
      }
    }
    lt__autocast_adopt(prev);
  }
  lt_tensor_free(pk.ktt);
  free(scratch);
  fl16_free(b16);
  if (err) {
    lt__err(LT_ERR_BACKEND, OP ": q is %s, k is %s, v is %s: a BLIS product failed", LT__D(q), LT__D(k), LT__D(v));
    lt_tensor_free(out);
    free_n(tmp, NTMP);
    return NULL;
  }
  if (grad) {
    const lt_tensor *saved[7] = {qu, ku, vu, out, tmp[TLSE]};
    int ns = 5;
    if (am) aux.am_at = ns, saved[ns++] = am;
    if (o.key_padding_mask) aux.kpm_at = ns, saved[ns++] = o.key_padding_mask;
    if (lt__record(out, LT__OP_scaled_dot_product_attention_fused, 3, (const lt_tensor *[]){q, k, v}, ns, saved,
                   &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(out);
      free_n(tmp, NTMP);
      return NULL;
    }
  }
  free_n(tmp, NTMP);
  return out;
}

lt_status lt__bw_scaled_dot_product_attention_fused(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const fl_aux *a = (const fl_aux *)node->aux;
  const lt_tensor *q = node->saved[0], *k = node->saved[1], *v = node->saved[2], *O = node->saved[3],
                  *lse = node->saved[4];
  const bool need_q = lt__needs_input_grad(node, 0), need_k = lt__needs_input_grad(node, 1),
             need_v = lt__needs_input_grad(node, 2);
  if (!need_q && !need_k && !need_v) return LT_OK;
  sdpa_plan pl = {0};
  plan_geometry(&pl, q, k, v);
  plan_masks(&pl, a->am_at >= 0 ? node->saved[a->am_at] : NULL, a->kpm_at >= 0 ? node->saved[a->kpm_at] : NULL);
  pl.scale = a->scale;
  pl.causal = a->causal;
  pl.ks_drop = a->ks_drop;
  pl.drop = a->dropout ? &a->draw : NULL;
  pl.o = O->data;
  memcpy(pl.os, O->stride, sizeof pl.os);
  pl.lse = lse->data;
  const int64_t B = pl.B, NKV = pl.NKV, es = pl.es;

  lt_tensor *gtmp;
  const lt_tensor *g = blis_ready(gout, pl.dt, &gtmp);
  if (!g) return lt_last_status();
  /* tasks: (b, g, key chunk c); with several chunks each task sums its dQ
   * into its own zeroed slab [group, T, HS] of dqp, reduced afterwards */
  int64_t bounds[FL_MAX_CHUNKS + 1];
  const int64_t nch = fl_chunks(&pl, bounds), NH = pl.NH, T = pl.T, HS = pl.HS, grp = pl.group;
  const int64_t ntasks = pl.T && pl.S ? B * NKV * nch : 0, slab = grp * T * HS;
  /* With tasks, dq, dk, dv are not zeroed here (a serial memset of all
   * three would run on one thread while the other waits): each task zeroes
   * its dK, dV rows (fl_bwd_zero) and writes dQ's first key tile with beta
   * 0 (fl_bwd). */
  lt_tensor *dq = need_q ? alloc_like(pl.dt, q->shape, q, !ntasks) : NULL;
  lt_tensor *dk = need_k ? alloc_like(pl.dt, k->shape, k, !ntasks) : NULL;
  lt_tensor *dv = need_v ? alloc_like(pl.dt, v->shape, v, !ntasks) : NULL;
  pl.go = g->data;
  memcpy(pl.gs, g->stride, sizeof pl.gs);
  if (dq) pl.dq = dq->data, memcpy(pl.dqs, dq->stride, sizeof pl.dqs);
  if (dk) pl.dk = dk->data, memcpy(pl.dks, dk->stride, sizeof pl.dks);
  if (dv) pl.dv = dv->data, memcpy(pl.dvs, dv->stride, sizeof pl.dvs);
  const int nt = fl_threads(ntasks, B * pl.NH * pl.T * (pl.S + 1) * (pl.HS + pl.HSV + 1));
  /* under autocast: q, k, v, dO as bf16, packed once (fl16); dq's rows are
   * the chunks' slabs (contiguous) when there are several chunks */
  lt_status st16 = LT_OK;
  const int64_t dq_cs = !dq || nch > 1 || HS == 1 ? 1 : pl.dqs[3];
  fl16 *b16 = ntasks && (!need_q || dq) && (!need_k || dk) && (!need_v || dv)
                  ? fl16_make(&pl, fl16_kind(&pl, dq_cs), true, &st16)
                  : NULL;
  pl.b16 = b16;
  /* per thread: D [BR] (double), P, W, dP [BR,BC] each, keep [BR,BC], bf16 scratch */
  const size_t x16b = b16 ? fl16_scr_bytes(&pl, b16->tp, true) : 0;
  const size_t per = (size_t)(FL_BR * 8 + 3 * FL_BR * FL_BC * es + FL_BR * FL_BC + 64 + 63) / 64 * 64 + x16b;
  char *scratch = ntasks && st16 == LT_OK ? aligned_alloc(64, per * (size_t)nt) : NULL;
  char *dqp = NULL;
  lt_status st = st16; /* not LT_OK: fl16_make set the message */
  if (st != LT_OK) {
  } else if ((need_q && !dq) || (need_k && !dk) || (need_v && !dv)) st = lt_last_status();
  else if (ntasks && !scratch)
    st = lt__err(LT_ERR_NOMEM, OP " backward: out of memory for %d tile buffers", nt);
  else if (ntasks && dq && nch > 1 && !(dqp = calloc((size_t)(ntasks * slab), (size_t)es)))
    st = lt__err(LT_ERR_NOMEM, OP " backward: q is %s: out of memory for %lld partial dq sums", LT__D(q),
                 (long long)nch);
  if (st == LT_OK && ntasks) {
    int err = 0;
    fl_packs pk = {0};
    if (!b16 && (need_q || need_k)) { /* Q K^T and dO V^T are needed for dS only (bf16 tiles: own packs) */
      pk.kt = fl_pack_buf(&pl, false, &pk.ktile, &pk.ktt);
      pk.vt = fl_pack_buf(&pl, true, &pk.vtile, &pk.vtt);
    }
    const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const lt_dtype prev = lt__autocast_adopt(ac);
      fl_pack_all(&pl, &pk); /* K^T and V^T (if any), then the team's barrier */
      fl16_pack_all(&pl, b16); /* or the bf16 packs */
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < ntasks; i++) {
        char *mine = scratch + per * (size_t)(nt > 1 ? omp_get_thread_num() : 0);
        double *D = (double *)mine;
        char *Pb = mine + FL_BR * 8, *Wb = Pb + FL_BR * FL_BC * es, *dPb = Wb + FL_BR * FL_BC * es;
        uint8_t *kb = (uint8_t *)(dPb + FL_BR * FL_BC * es);
        const fl16_scr x16 = b16 ? fl16_scr_at(&pl, mine + (per - x16b), b16->tp, true) : (fl16_scr){0};
        const int64_t bg = i / nch, c = i % nch, bb = bg / NKV, gg = bg % NKV;
        /* dQ of the group's first head and its strides: dq itself, or this task's slab */
        char *dqt = NULL;
        int64_t dqh = 0, dqr = 0, dqc = 0;
        if (dqp) dqt = dqp + i * slab * es, dqh = T * HS, dqr = HS, dqc = 1;
        else if (dq) dqt = at4(pl.dq, pl.dqs, es, bb, gg * grp), dqh = pl.dqs[1], dqr = pl.dqs[2], dqc = pl.dqs[3];
        lt_status s2 = LT_OK;
        if (b16) /* writes every row of dK, dV it owns: no zeroing */
          fl16_bwd(&pl, bb, gg, bounds[c], bounds[c + 1], (float *)dqt, dqh, dqr, dqc, (float *)Pb, (float *)Wb,
                   (float *)dPb, kb, &x16);
        else {
          fl_bwd_zero(&pl, bb, gg, bounds[c], bounds[c + 1]);
          s2 = pl.dt == LT_DTYPE_F32 ? fl_bwd_f32(&pl, bb, gg, bounds[c], bounds[c + 1], (float *)dqt, dqh, dqr, dqc,
                                                  (float *)Pb, (float *)Wb, (float *)dPb, D, kb, &pk)
                                     : fl_bwd_f64(&pl, bb, gg, bounds[c], bounds[c + 1], (double *)dqt, dqh, dqr, dqc,
                                                  (double *)Pb, (double *)Wb, (double *)dPb, D, kb, &pk);
        }
        if (s2 != LT_OK) {
#pragma omp atomic write
          err = 1;
        }
      }
      lt__autocast_adopt(prev);
    }
    lt_tensor_free(pk.ktt);
    lt_tensor_free(pk.vtt);
    if (err) st = lt__err(LT_ERR_BACKEND, OP " backward: q is %s, k is %s: a BLIS product failed", LT__D(q), LT__D(k));
    if (!err && dqp) { /* dq = the chunks' partial sums, added in chunk order */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
      for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t bb = bh / NH, hh = bh % NH, gg = hh / grp;
        char *dst = at4(pl.dq, pl.dqs, es, bb, hh);
        const char *src = dqp + (((bb * NKV + gg) * nch) * slab + (hh - gg * grp) * T * HS) * es;
        for (int64_t t = 0; t < T; t++)
          for (int64_t x = 0; x < HS; x++) {
            const int64_t o = (t * pl.dqs[2] + x * pl.dqs[3]) * es, si = (t * HS + x) * es;
            if (es == 4) {
              float acc = 0;
              for (int64_t c = 0; c < nch; c++) acc += *(const float *)(src + c * slab * es + si);
              *(float *)(dst + o) = acc;
            } else {
              double acc = 0;
              for (int64_t c = 0; c < nch; c++) acc += *(const double *)(src + c * slab * es + si);
              *(double *)(dst + o) = acc;
            }
          }
      }
    }
  }
  free(dqp);
  free(scratch);
  fl16_free(b16);
  lt_tensor_free(gtmp);
  return hand_grads(st, dq, dk, dv, gin);
}

/* ======================================================================== */
/* The public entry: fused or unfused                                       */
/* ======================================================================== */

/* Fused unless weights are requested (only the unfused path has them), or
 * impl / LT_ATTENTION=fused|unfused say otherwise. AUTO picks unfused when
 * the whole T x S fits one fused tile (T <= FL_BR, S <= FL_BC; 256 x 256):
 * there the fused path saves little memory (P is at most 256 KB per head)
 * and its backward recomputes P: slower there in f32, no faster under
 * autocast; above the tile fused is faster and its memory O(T). The
 * measurements behind the rule are in docs/attention.md ("Choosing") and
 * docs/log/attention-2026-11.md. This is the one
 * place the rule lives. */
static bool want_fused(const lt_attention_opts *o, bool weights, const lt_tensor *q, const lt_tensor *k) {
  if (weights) return false;
  const lt_attention_impl impl = o ? o->impl : LT_ATTENTION_AUTO;
  if (impl != LT_ATTENTION_AUTO) return impl == LT_ATTENTION_FUSED;
  const char *e = getenv("LT_ATTENTION");
  if (e && !strcmp(e, "unfused")) return false;
  if (e && !strcmp(e, "fused")) return true;
  return q->shape[2] > FL_BR || k->shape[2] > FL_BC;
}

lt_tensor *lt_scaled_dot_product_attention(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                                           const lt_attention_opts *opts, const lt_nn_ctx *ctx,
                                           lt_tensor **weights) {
  if (check_inputs(q, k, v, opts, ctx) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  return want_fused(opts, weights != NULL, q, k) ? sdpa_fused(q, k, v, opts, ctx)
                                           : sdpa_unfused(q, k, v, opts, ctx, weights);
}
