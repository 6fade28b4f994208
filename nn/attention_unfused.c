/*
 * nn/attention_unfused.c: the unfused scaled dot-product attention (op
 * scaled_dot_product_attention), the reference and the only path that can
 * return the weights: per (b, h) the T x S probabilities are materialised,
 * and saved for backward (nn/attention.c gives the contract, the formulas of
 * the backward and the autocast rules; docs/attention.md). The entry is
 * lt__sdpa_unfused (nn/attention_internal.h); lt__bw_scaled_dot_product_attention
 * is its backward in the op table.
 */
#include "nn/attention_internal.h"

#include "tensor/autocast_internal.h"
#include "tensor/bf16round_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OP LT__SDPA_OP

/* ======================================================================== */
/* Row kernels (contiguous rows of S entries)                               */
/* ======================================================================== */

/* Forward row: scores p[0..S) (already scaled) -> probabilities. Keys s >= lim
 * are masked by causality, keys s < lo by the sliding window; am (stride
 * ams) is the attn_mask row (bool or T),
 * kpm (stride kpms) the padding row. A row with no finite score becomes 0.
 * The softmax steps are tensor/softmax_internal.h's (max over unmasked keys,
 * exp, sum in double). */
#define SDPA_ROW_KERNELS(NAME, T, CLONES)                                                \
  CLONES static void fwd_row_##NAME(T *p, int64_t S, int64_t lo, int64_t lim, const void *am, bool am_bool, \
                             int64_t ams, const unsigned char *kpm, int64_t kpms) {      \
    if (lim > S) lim = S;                                                                \
    if (lim < 0) lim = 0;                                                                \
    for (int64_t s = 0; s < lo && s < lim; s++) p[s] = -INFINITY;                        \
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

/* One query row t of (b, h): probabilities in place over the scores row. */
static void fwd_row(const sdpa_plan *pl, char *prow, int64_t b, int64_t h, int64_t t) {
  const int64_t lim = pl->causal ? t + pl->S - pl->T + 1 : pl->S, lo = first_key(pl, t);
  const void *am = NULL;
  int64_t ams = 0;
  if (pl->am) {
    am = pl->am + (b * pl->ams[0] + h * pl->ams[1] + t * pl->ams[2]) * pl->ames;
    ams = pl->ams[3];
  }
  const unsigned char *kpm = pl->kpm ? pl->kpm + b * pl->kpms[0] : NULL;
  if (pl->dt == LT_DTYPE_F32) fwd_row_f32((float *)prow, pl->S, lo, lim, am, pl->am_bool, ams, kpm, pl->kpms[1]);
  else fwd_row_f64((double *)prow, pl->S, lo, lim, am, pl->am_bool, ams, kpm, pl->kpms[1]);
}


/* Causal attention runs in blocks of this many query rows: block [t0, t1)
 * needs only keys s < t1 + S - T (kmax), so the products skip most of the
 * masked upper triangle (a quarter of the work at T = S = 256). Smaller
 * blocks skip more but lose it again to the fixed cost of each BLIS call
 * (measured: 16 and 32 rows are slower than no blocking at T = 128; 64 and
 * 128 about equal at T = 256). */
#define CAUSAL_ROWS 128

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

/* The unfused forward: P [B,NH,T,S] materialised (and saved for backward). */
lt_tensor *lt__sdpa_unfused(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
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
  const lt_tensor *qu = lt__sdpa_blis_ready(q, dt, &tmp[TQ]);
  const lt_tensor *ku = qu ? lt__sdpa_blis_ready(k, dt, &tmp[TK]) : NULL;
  const lt_tensor *vu = ku ? lt__sdpa_blis_ready(v, dt, &tmp[TV]) : NULL;
  if (vu && ac16 &&
      (!(tmp[TQ16] = heads_bf16(qu)) || !(tmp[TK16] = heads_bf16(ku)) || !(tmp[TV16] = heads_bf16(vu))))
    vu = NULL;
  if (!vu) {
    lt__sdpa_free_n(tmp, NTMP);
    return NULL;
  }
  /* what the products read, and the backward gets */
  const lt_tensor *qp = ac16 ? tmp[TQ16] : qu, *kp = ac16 ? tmp[TK16] : ku, *vp = ac16 ? tmp[TV16] : vu;
  sdpa_plan pl = {0};
  lt__sdpa_plan_geometry(&pl, qp, kp, vp);
  pl.ac16 = ac16;
  const int64_t B = pl.B, NH = pl.NH, T = pl.T, S = pl.S;
  pl.scale = o.scale > 0 ? o.scale : (pl.HS > 0 ? 1.0 / sqrt((double)pl.HS) : 1.0);
  pl.causal = o.causal;
  pl.window = o.window;
  const lt_tensor *am = lt__sdpa_mask_ready(o.attn_mask, dt, &tmp[TAM]);
  if (o.attn_mask && !am) {
    lt__sdpa_free_n(tmp, NTMP);
    return NULL;
  }
  lt__sdpa_plan_masks(&pl, am, o.key_padding_mask);
  if (dropout) {
    pl.ks_drop = o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 0.0;
    tmp[TKEEP] = lt_bernoulli(ctx->gen, LT_DTYPE_BOOL, LT_SHAPE(B, NH, T, S), 1.0 - o.dropout_p);
    if (!tmp[TKEEP]) {
      lt__sdpa_free_n(tmp, NTMP);
      return NULL;
    }
    pl.keep = tmp[TKEEP]->data;
  }

  /* P for all (b, h) when backward or the caller needs it; else per thread. */
  const bool p_full = grad || (weights && !dropout);
  const bool w_full = weights && dropout;
  const int64_t oshape[4] = {B, NH, T, pl.HSV};
  lt_tensor *out = lt__sdpa_alloc_like(dt, oshape, q, S == 0); /* q's memory order */
  if (p_full) tmp[TP] = lt_empty(dt, LT_SHAPE(B, NH, T, S)); /* every row is written */
  if (w_full) tmp[TW] = lt_empty(dt, LT_SHAPE(B, NH, T, S));
  if (!out || (p_full && !tmp[TP]) || (w_full && !tmp[TW])) {
    lt_tensor_free(out);
    lt__sdpa_free_n(tmp, NTMP);
    return NULL;
  }
  pl.o = out->data;
  memcpy(pl.os, out->stride, sizeof pl.os);

  const int64_t ntasks = B * NH, ts = T * S;
  bool one;
  const int nt = lt__sdpa_task_threads(ntasks, ntasks * T * (S + 1) * (pl.HS + pl.HSV + 1), &one);
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
      lt__sdpa_free_n(tmp, NTMP);
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
      lt__sdpa_free_n(tmp, NTMP);
      return NULL;
    }
  }
  free(scratch);

  if (grad) {
    sdpa_aux aux = {pl.scale, pl.ks_drop, pl.causal, dropout, pl.window, {{0}}};
    memcpy(aux.lay[0], qu->stride, sizeof aux.lay[0]);
    memcpy(aux.lay[1], ku->stride, sizeof aux.lay[1]);
    memcpy(aux.lay[2], vu->stride, sizeof aux.lay[2]);
    const lt_tensor *saved[5] = {qp, kp, vp, tmp[TP], tmp[TKEEP]};
    if (lt__record(out, LT__OP_scaled_dot_product_attention, 3, (const lt_tensor *[]){q, k, v},
                   dropout ? 5 : 4, saved, &aux, sizeof aux) != LT_OK) {
      lt_tensor_free(out);
      lt__sdpa_free_n(tmp, NTMP);
      return NULL;
    }
  }
  if (weights) {
    lt_tensor *w = dropout ? tmp[TW] : tmp[TP];
    if (dropout) tmp[TW] = NULL;
    else tmp[TP] = NULL;
    *weights = w;
  }
  lt__sdpa_free_n(tmp, NTMP);
  return out;
}

lt_status lt__bw_scaled_dot_product_attention(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const sdpa_aux *a = (const sdpa_aux *)node->aux;
  const lt_tensor *q = node->saved[0], *k = node->saved[1], *v = node->saved[2], *P = node->saved[3];
  const bool need_q = lt__needs_input_grad(node, 0), need_k = lt__needs_input_grad(node, 1),
             need_v = lt__needs_input_grad(node, 2);
  if (!need_q && !need_k && !need_v) return LT_OK;
  sdpa_plan pl = {0};
  lt__sdpa_plan_geometry(&pl, q, k, v); /* q, k, v: bf16 copies when the forward ran under autocast */
  pl.scale = a->scale;
  pl.causal = a->causal;
  pl.window = a->window;
  pl.ks_drop = a->ks_drop;
  pl.keep = a->dropout ? node->saved[4]->data : NULL;
  /* bf16 products now (the forward's mode may differ: saved bf16 copies are
   * widened exactly by an f32 product, saved f32 ones converted by a bf16 one) */
  pl.ac16 = pl.dt == LT_DTYPE_F32 && lt__autocast_active();
  const int64_t B = pl.B, NH = pl.NH, NKV = pl.NKV, T = pl.T, S = pl.S, ts = T * S;

  lt_tensor *gtmp;
  const lt_tensor *g = lt__sdpa_blis_ready(gout, pl.dt, &gtmp);
  if (!g) return lt_last_status();
  /* dq is written everywhere by the tasks, which run unless T * S == 0; dk
   * and dv accumulate. */
  lt_tensor *dq = need_q ? lt__sdpa_alloc_order(pl.dt, q->shape, q->shape, a->lay[0], ts == 0) : NULL;
  /* under autocast the tasks write dk and dv whole (bwd_task) */
  const bool dkv_zero = !pl.ac16 || ts == 0;
  lt_tensor *dk = need_k ? lt__sdpa_alloc_order(pl.dt, k->shape, k->shape, a->lay[1], dkv_zero) : NULL;
  lt_tensor *dv = need_v ? lt__sdpa_alloc_order(pl.dt, v->shape, v->shape, a->lay[2], dkv_zero) : NULL;
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
  const int nt = lt__sdpa_task_threads(ntasks, B * NH * T * (S + 1) * (pl.HS + pl.HSV + 1), &one);
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
  return lt__sdpa_hand_grads(st, dq, dk, dv, gin);
}
