/*
 * nn/attention_tiles.c: the fused scaled dot-product attention (op
 * scaled_dot_product_attention_fused, FlashAttention-2), in f32 and f64:
 * the K^T / V^T packs, the threading over (b, h, query tile) and (b, kv
 * head, key chunk), the forward lt__sdpa_fused and its backward
 * lt__bw_scaled_dot_product_attention_fused. The tile loops are
 * nn/attention_fused.inc and their row steps nn/attention_rows.inc, both
 * included once per float type; under autocast the tile products go to the
 * bf16 driver (nn/attention_bf16.c). nn/attention.c gives the contract and
 * the algorithm.
 */
#include "nn/attention_internal.h"

#include "tensor/autocast_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OP LT__SDPA_OP

/* The query rows of a (b, kv head), T x the heads of its group, from which
 * the forward packs K^T: below, the copy costs more than the products save.
 * A decoding step (1 query row a head, groups of 1-2) then reads the cache
 * once instead of three times (read, write the pack, read it): Llama 205M
 * generation after a prompt of 512 (bench/gguf.c, 2 threads, 3 alternating
 * rounds, medians) BF16 58 -> 66 tok/s, Q4_0 88 -> 107, GPT-2 Q8_0 86 -> 98. */
#define FL_PACK_MIN_ROWS 16

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
#include "nn/attention_rows.inc"
#include "nn/attention_fused.inc"
#undef FT
#undef FN
#undef FDT
#undef FL_CLONES

#define FT double
#define FN f64
#define FDT LT_DTYPE_F64
#define FL_CLONES
#include "nn/attention_rows.inc"
#include "nn/attention_fused.inc"
#undef FT
#undef FN
#undef FDT
#undef FL_CLONES

/* ======================================================================== */
/* Fused forward and backward (FlashAttention-2 style)                      */
/* ======================================================================== */

typedef struct fl_aux {
  double scale, ks_drop;
  bool causal, dropout;
  int64_t window;
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
 * FL_MIN_TASKS is 4, not more: each extra task is a partial dQ to hold and
 * sum, and at B * NKV = 4 (B 1, NH 4) four whole tasks balance 2 threads as
 * well as eight split ones (figures: docs/attention.md, "Figures behind the code's rules"). */
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
lt_tensor *lt__sdpa_fused(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                             const lt_attention_opts *opts, const lt_nn_ctx *ctx) {
  const lt_attention_opts o = opts ? *opts : (lt_attention_opts){0};
  const lt_dtype dt = q->dtype;
  const bool dropout = ctx && ctx->training && o.dropout_p > 0;
  const bool grad = lt__needs_grad(3, (const lt_tensor *[]){q, k, v});
  enum { TQ, TK, TV, TAM, TLSE, NTMP };
  lt_tensor *tmp[NTMP] = {0};
  const lt_tensor *qu = lt__sdpa_blis_ready(q, dt, &tmp[TQ]);
  const lt_tensor *ku = qu ? lt__sdpa_blis_ready(k, dt, &tmp[TK]) : NULL;
  const lt_tensor *vu = ku ? lt__sdpa_blis_ready(v, dt, &tmp[TV]) : NULL;
  const lt_tensor *am = vu ? lt__sdpa_mask_ready(o.attn_mask, dt, &tmp[TAM]) : NULL;
  if (!vu || (o.attn_mask && !am)) {
    lt__sdpa_free_n(tmp, NTMP);
    return NULL;
  }
  sdpa_plan pl = {0};
  lt__sdpa_plan_geometry(&pl, qu, ku, vu);
  lt__sdpa_plan_masks(&pl, am, o.key_padding_mask);
  const int64_t B = pl.B, NH = pl.NH, T = pl.T, S = pl.S, es = pl.es;
  pl.scale = o.scale > 0 ? o.scale : (pl.HS > 0 ? 1.0 / sqrt((double)pl.HS) : 1.0);
  pl.causal = o.causal;
  pl.window = o.window;
  fl_aux aux = {.scale = pl.scale, .causal = o.causal, .window = o.window, .dropout = dropout, .am_at = -1, .kpm_at = -1};
  if (dropout) {
    int64_t n;
    if (lt__shape_numel(OP, LT_SHAPE(B, NH, T, S), &n) != LT_OK) { /* the mask's element count */
      lt__sdpa_free_n(tmp, NTMP);
      return NULL;
    }
    pl.ks_drop = aux.ks_drop = o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 0.0;
    lt__bernoulli_defer(ctx->gen, n, 1.0 - o.dropout_p, &aux.draw);
    pl.drop = &aux.draw;
  }
  const int64_t oshape[4] = {B, NH, T, pl.HSV};
  lt_tensor *out = lt__sdpa_alloc_like(dt, oshape, q, false); /* q's memory order; every row is written */
  tmp[TLSE] = lt_empty(dt, LT_SHAPE(B, NH, T));
  if (!out || !tmp[TLSE]) {
    lt_tensor_free(out);
    lt__sdpa_free_n(tmp, NTMP);
    return NULL;
  }
  pl.o = out->data;
  memcpy(pl.os, out->stride, sizeof pl.os);
  pl.lse = tmp[TLSE]->data;

  const int64_t ntq = (T + FL_BR - 1) / FL_BR, ntasks = B * NH * ntq;
  const int nt = fl_threads(ntasks, B * NH * T * (S + 1) * (pl.HS + pl.HSV + 1));
  /* under autocast: q, k, v as bf16, packed once (fl16) */
  lt_status st16 = LT_OK;
  fl16 *b16 = ntasks ? lt__fl16_make(&pl, lt__fl16_kind(&pl, pl.HSV == 1 ? 1 : pl.os[3]), false, &st16) : NULL;
  pl.b16 = b16;
  /* per thread: scores [BR,BC], m [BR], l [BR] (double), keep [BR,BC], bf16 scratch */
  const size_t x16b = b16 ? lt__fl16_scr_bytes(&pl, 0, false) : 0;
  const size_t per = (size_t)(FL_BR * FL_BC * es + FL_BR * es + FL_BR * 8 + FL_BR * FL_BC + 64 + 63) / 64 * 64 + x16b;
  char *scratch = ntasks && st16 == LT_OK ? aligned_alloc(64, per * (size_t)nt) : NULL;
  if (ntasks && !scratch) {
    if (st16 == LT_OK) lt__err(LT_ERR_NOMEM, OP ": out of memory for %d tile buffers", nt);
    lt__fl16_free(b16);
    lt_tensor_free(out);
    lt__sdpa_free_n(tmp, NTMP);
    return NULL;
  }
  int err = 0;
  fl_packs pk = {0};
  /* K^T packed when enough query rows read each key tile (the bf16 tiles
   * have their own packs) */
  if (!b16 && T * pl.group >= FL_PACK_MIN_ROWS) pk.kt = fl_pack_buf(&pl, false, &pk.ktile, &pk.ktt);
  const lt_dtype ac = lt_autocast_dtype(); /* the workers run the products in the caller's mode */
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const lt_dtype prev = lt__autocast_adopt(ac);
    fl_pack_all(&pl, &pk); /* K^T (if any), then the team's barrier */
    lt__fl16_pack_all(&pl, b16); /* or the bf16 packs */
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < ntasks; i++) {
      char *mine = scratch + per * (size_t)(nt > 1 ? omp_get_thread_num() : 0);
      double *l = (double *)mine; /* doubles first: aligned */
      char *Sb = mine + FL_BR * 8, *m = Sb + FL_BR * FL_BC * es;
      uint8_t *kb = (uint8_t *)(m + FL_BR * es);
      fl16_scr x16 = b16 ? lt__fl16_scr_at(&pl, mine + (per - x16b), 0, false) : (fl16_scr){0};
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
  lt__fl16_free(b16);
  if (err) {
    lt__err(LT_ERR_BACKEND, OP ": q is %s, k is %s, v is %s: a BLIS product failed", LT__D(q), LT__D(k), LT__D(v));
    lt_tensor_free(out);
    lt__sdpa_free_n(tmp, NTMP);
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
      lt__sdpa_free_n(tmp, NTMP);
      return NULL;
    }
  }
  lt__sdpa_free_n(tmp, NTMP);
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
  lt__sdpa_plan_geometry(&pl, q, k, v);
  lt__sdpa_plan_masks(&pl, a->am_at >= 0 ? node->saved[a->am_at] : NULL, a->kpm_at >= 0 ? node->saved[a->kpm_at] : NULL);
  pl.scale = a->scale;
  pl.causal = a->causal;
  pl.window = a->window;
  pl.ks_drop = a->ks_drop;
  pl.drop = a->dropout ? &a->draw : NULL;
  pl.o = O->data;
  memcpy(pl.os, O->stride, sizeof pl.os);
  pl.lse = lse->data;
  const int64_t B = pl.B, NKV = pl.NKV, es = pl.es;

  lt_tensor *gtmp;
  const lt_tensor *g = lt__sdpa_blis_ready(gout, pl.dt, &gtmp);
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
  lt_tensor *dq = need_q ? lt__sdpa_alloc_like(pl.dt, q->shape, q, !ntasks) : NULL;
  lt_tensor *dk = need_k ? lt__sdpa_alloc_like(pl.dt, k->shape, k, !ntasks) : NULL;
  lt_tensor *dv = need_v ? lt__sdpa_alloc_like(pl.dt, v->shape, v, !ntasks) : NULL;
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
                  ? lt__fl16_make(&pl, lt__fl16_kind(&pl, dq_cs), true, &st16)
                  : NULL;
  pl.b16 = b16;
  /* per thread: D [BR] (double), P, W, dP [BR,BC] each, keep [BR,BC], bf16 scratch */
  const size_t x16b = b16 ? lt__fl16_scr_bytes(&pl, b16->tp, true) : 0;
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
      lt__fl16_pack_all(&pl, b16); /* or the bf16 packs */
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < ntasks; i++) {
        char *mine = scratch + per * (size_t)(nt > 1 ? omp_get_thread_num() : 0);
        double *D = (double *)mine;
        char *Pb = mine + FL_BR * 8, *Wb = Pb + FL_BR * FL_BC * es, *dPb = Wb + FL_BR * FL_BC * es;
        uint8_t *kb = (uint8_t *)(dPb + FL_BR * FL_BC * es);
        const fl16_scr x16 = b16 ? lt__fl16_scr_at(&pl, mine + (per - x16b), b16->tp, true) : (fl16_scr){0};
        const int64_t bg = i / nch, c = i % nch, bb = bg / NKV, gg = bg % NKV;
        /* dQ of the group's first head and its strides: dq itself, or this task's slab */
        char *dqt = NULL;
        int64_t dqh = 0, dqr = 0, dqc = 0;
        if (dqp) dqt = dqp + i * slab * es, dqh = T * HS, dqr = HS, dqc = 1;
        else if (dq) dqt = at4(pl.dq, pl.dqs, es, bb, gg * grp), dqh = pl.dqs[1], dqr = pl.dqs[2], dqc = pl.dqs[3];
        lt_status s2 = LT_OK;
        if (b16) /* writes every row of dK, dV it owns: no zeroing */
          lt__fl16_bwd(&pl, bb, gg, bounds[c], bounds[c + 1], (float *)dqt, dqh, dqr, dqc, (float *)Pb, (float *)Wb,
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
  lt__fl16_free(b16);
  lt_tensor_free(gtmp);
  return lt__sdpa_hand_grads(st, dq, dk, dv, gin);
}
