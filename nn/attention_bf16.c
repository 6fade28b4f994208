/*
 * nn/attention_bf16.c: the fused attention's bf16 tile driver under
 * autocast: q, k, v (and dO) packed once per call for the tile kernels of
 * tensor/bf16dot.c (AMX tdpbf16ps or vdpbf16ps), the forward's two tile
 * products (lt__fl16_scores, lt__fl16_pv, called by the tile loop of
 * nn/attention_fused.inc) and the backward's own loop, key tiles outside
 * (lt__fl16_bwd). The f32 row steps are nn/attention_rows.inc's, included
 * here once. Declared in nn/attention_internal.h.
 */
#include "nn/attention_internal.h"

#include "tensor/autocast_internal.h"
#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OP LT__SDPA_OP

#define FT float
#define FN f32
#define FL_CLONES FL_CLONES_F32
#include "nn/attention_rows.inc"
#undef FT
#undef FN
#undef FL_CLONES

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


/* The kernel for a fused call of dtype dt on this thread: under autocast,
 * f32, on a CPU with a kernel; else NONE (tile products then go through
 * lt__mat_gemm). The path table's attention_bf16 paths (tensor/paths.def;
 * LT_ATTENTION_BF16=0|dot|amx, or lt__path_force in tests): gemm = NONE,
 * vdpbf16ps = at most the vdpbf16ps kernel, amx = the best kernel. */
static lt__bf16dot_kind fl16_select(lt_dtype dt) {
  if (dt != LT_DTYPE_F32 || !lt__autocast_active()) return LT__BF16DOT_NONE;
  const lt__bf16dot_kind best = lt__bf16dot_best();
  const lt__path forced = lt__path_forced(LT__PATH_FAMILY_attention_bf16);
  if (forced == LT__PATH_attention_bf16_gemm) return LT__BF16DOT_NONE;
  if (forced == LT__PATH_attention_bf16_vdpbf16ps && best > LT__BF16DOT_DOT) return LT__BF16DOT_DOT;
  return best;
}

/* fl16_select for a planned call whose output (or dq) has column stride
 * out_cs: the kernels write rows with contiguous columns. */
lt__bf16dot_kind lt__fl16_kind(const sdpa_plan *pl, int64_t out_cs) {
  return out_cs == 1 ? fl16_select(pl->dt) : LT__BF16DOT_NONE;
}

void lt__fl16_free(fl16 *x) {
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
fl16 *lt__fl16_make(const sdpa_plan *pl, lt__bf16dot_kind kind, bool backward, lt_status *st) {
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
      lt__fl16_free(x);
      return NULL;
    }
    if (!(x->store[i] = lt_empty(LT_DTYPE_BF16, LT_SHAPE(n > 0 ? n : 1)))) {
      lt__fl16_free(x);
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
void lt__fl16_pack_all(const sdpa_plan *pl, const fl16 *x) {
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
size_t lt__fl16_scr_bytes(const sdpa_plan *pl, int64_t tp, bool backward) {
  const size_t rows = (size_t)FL_BR * FL_BC * 2, pairs = (size_t)tp / 2 * FL16_LDP * 2;
  size_t n = (rows + 63) / 64 * 64;
  if (backward)
    n += 2 * ((pairs + 63) / 64 * 64) + (size_t)(pl->HS + pl->HSV) * FL16_LDC * sizeof(float) +
         (size_t)pl->group * (size_t)pl->T * sizeof(double) + 64;
  return (n + 63) / 64 * 64;
}

fl16_scr lt__fl16_scr_at(const sdpa_plan *pl, char *mem, int64_t tp, bool backward) {
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
void lt__fl16_scores(const sdpa_plan *pl, int64_t b, int64_t h, int64_t t, int64_t nr, int64_t s0, int64_t nv,
                        void *Sb) {
  const fl16 *x = pl->b16;
  const int64_t bh = b * pl->NH + h, bg = b * pl->NKV + h / pl->group;
  lt__bf16dot_gemm(x->kind, nr, nv, pl->HS, (float)pl->scale, x->q + (bh * x->tp + t) * x->hp, x->hp,
                   x->kt + bg * x->hp / 2 * x->lds + 2 * s0, x->lds, false, (float *)Sb, FL_BC);
}

/* O (row stride ldo) = P V, or += when accumulate, for the keys s0.. (nv);
 * P: the f32 weights in Sb (nr x nv), converted here. */
void lt__fl16_pv(const sdpa_plan *pl, fl16_scr *sc, int64_t b, int64_t h, int64_t nr, int64_t s0, int64_t nv,
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
void lt__fl16_bwd(const sdpa_plan *pl, int64_t b, int64_t g, int64_t j0, int64_t j1, float *dq, int64_t dqh,
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
        if (block_keys(pl, t0 + nb) <= 0 || first_tile(pl, t0) >= j1) /* (or the window starts after the chunk) */
          zero_mat((char *)(dq + (h - h0) * dqh + t0 * dqr), nb, HS, dqr, dqc, 4);
      }
  for (int64_t s0 = j0; s0 < j1; s0 += FL_BC) {
    const int64_t ncf = s0 + FL_BC < j1 ? FL_BC : j1 - s0; /* the key tile's keys */
    bool seen = false;
    for (int64_t h = h0; h < h1; h++) {
      const int64_t bh = b * NH + h;
      const float *lse = (const float *)pl->lse + bh * T;
      int64_t rlo = -1, rhi = -1; /* the query rows [rlo, rhi) see the key tile (a sliding window: not all later ones) */
      for (int64_t t0 = 0; t0 < T; t0 += FL_BR) {
        const int64_t nb = t0 + FL_BR < T ? FL_BR : T - t0, kmax = block_keys(pl, t0 + nb), sb = first_tile(pl, t0);
        if (kmax <= s0) continue; /* causal: the query tile sees none of the key tile */
        if (sb > s0) break;       /* the window: neither this query tile nor any later one sees it */
        const int64_t nc = s0 + ncf < kmax ? ncf : kmax - s0;
        const bool first = j0 == 0 && s0 == sb; /* dQ's first write */
        if (rlo < 0) rlo = t0;
        rhi = t0 + nb;
        float *dQ = dq ? dq + (h - h0) * dqh + t0 * dqr : NULL;
        const double *D = sc->d + (h - h0) * T + t0;
        fl_piece pc[FL_BR / FL_SUB];
        const int np = fl_pieces(pl, t0, nb, s0, nc, pc);
        if (dQ && first) fl_zero_gaps_f32(pc, np, nb, dQ, HS, dqr, dqc); /* the pieces write the others */
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
          lt__fl16_scores(pl, b, h, t, nr, s0, nv, Pb);
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
                             !first, dQ + r0 * dqr, dqr);
        }
      }
      if (rlo < 0) continue; /* no query row of the head sees the key tile */
      const int64_t rend = rhi < T ? rhi : x->tp; /* the products' depth ends there */
      if (rhi == T && dV) fl16_zero_pairs(sc->w, T, x->tp - T, 0, ncf); /* the padding rows up to tp */
      if (rhi == T && dK) fl16_zero_pairs(sc->ds, T, x->tp - T, 0, ncf);
      /* dV^T (+)= dO^T W: [HSV, rows] x [rows, keys]; dK^T (+)= scale Q^T dS; in blocks of 32 keys
       * with the same first row r that sees them (causal: a diagonal tile's blocks start 32 rows
       * apart, the rows above see none of their keys, W and dS are 0 there) */
      for (int64_t c0 = 0, c1; c0 < ncf; c0 = c1) {
        const int64_t r = fl16_first_row(pl, rlo, s0 + c0);
        for (c1 = c0 + 32; c1 < ncf && fl16_first_row(pl, rlo, s0 + c1) == r;) c1 += 32;
        if (c1 > ncf) c1 = ncf;
        if (dV)
          lt__bf16dot_gemm(x->kind, HSV, c1 - c0, rend - r, 1.0f, x->got + bh * x->hvp * x->ldt + r, x->ldt,
                           sc->w + r / 2 * FL16_LDP + 2 * c0, FL16_LDP, seen, sc->dvt + c0, FL16_LDC);
        if (dK)
          lt__bf16dot_gemm(x->kind, HS, c1 - c0, rend - r, sc32, x->qt + bh * x->hp * x->ldt + r, x->ldt,
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
