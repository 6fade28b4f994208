/*
 * nn/attention_internal.h: what the files of the scaled dot-product
 * attention share (nn/attention.c lists them and gives the contract): the
 * plan both implementations run on (sdpa_plan), the small inline helpers
 * over it, the tile geometry of the fused path, and the calls between the
 * files. Internal: not installed.
 */
#ifndef LT_NN_ATTENTION_INTERNAL_H
#define LT_NN_ATTENTION_INTERNAL_H

#include "nn/nn.h"

#include "tensor/graph_internal.h"
#include "tensor/bf16dot_internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/autocast_internal.h"
#include "tensor/gemm_internal.h"
#include "tensor/random_internal.h"
#include "tensor/softmax_internal.h"

#include <stdint.h>
#include <string.h>

#define LT__SDPA_OP "scaled_dot_product_attention"

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

/* ======================================================================== */
/* The plan shared by forward and backward                                  */
/* ======================================================================== */

typedef struct sdpa_plan {
  lt_dtype dt;
  int64_t es; /* element size in bytes */
  int64_t B, NH, NKV, T, S, HS, HSV, group;
  double scale;
  bool causal;
  int64_t window; /* sliding window (causal): query t sees keys s > t + S - T - window; 0: none */
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
static inline void zero_mat(char *p, int64_t n, int64_t m, int64_t rs, int64_t cs, int64_t es) {
  for (int64_t i = 0; i < n; i++) {
    if (cs == 1) memset(p + i * rs * es, 0, (size_t)(m * es));
    else
      for (int64_t j = 0; j < m; j++) memset(p + (i * rs + j * cs) * es, 0, (size_t)es);
  }
}

static inline char *at4(const char *base, const int64_t *st, int64_t es, int64_t i0, int64_t i1) {
  return (char *)base + (i0 * st[0] + i1 * st[1]) * es;
}

/* Keys the rows [t0, t1) can see: all S, or causally up to t1 + S - T. */
static inline int64_t block_keys(const sdpa_plan *pl, int64_t t1) {
  if (!pl->causal) return pl->S;
  const int64_t k = t1 + pl->S - pl->T;
  return k < 0 ? 0 : k > pl->S ? pl->S : k;
}

/* The first key the rows from t0 on can see: 0, or under the sliding window
 * the first inside the window of row t0 (later rows' windows start later). */
static inline int64_t first_key(const sdpa_plan *pl, int64_t t0) {
  if (pl->window <= 0) return 0;
  const int64_t k = t0 + pl->S - pl->T - pl->window + 1;
  return k < 0 ? 0 : k;
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

/* ======================================================================== */
/* Fused tiles (FlashAttention-2 style; nn/attention_fused.inc)             */
/* ======================================================================== */

/* A tile is FL_BR query rows x FL_BC keys: large tiles, because each tile
 * pays a fixed cost per product call and repacks its k/v tile once per
 * query tile, so small tiles lose to the unfused path; 256 x 256 was the
 * fastest of the sizes tried (docs/attention.md, "Figures behind the code's
 * rules"). */
#define FL_BR 256
#define FL_BC 256

/* The first key tile (its first key, a multiple of FL_BC) that the query
 * tile from row t0 sees: 0 but under a sliding window. */
static inline int64_t first_tile(const sdpa_plan *pl, int64_t t0) {
  return first_key(pl, t0) / FL_BC * FL_BC;
}

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
static inline int fl_pieces(const sdpa_plan *pl, int64_t t0, int64_t nb, int64_t s0, int64_t nc, fl_piece *p) {
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
 * vectorises the portable lt__vexpf 8 wide only, and these exps are the
 * largest cost of the fused row steps (figures: docs/attention.md, "Figures behind the code's rules")), the portable form
 * otherwise and for f64. The
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

/* ======================================================================== */
/* Forward                                                                  */
/* ======================================================================== */

typedef struct sdpa_aux {
  double scale, ks_drop;
  bool causal, dropout;
  int64_t window;
  /* the strides of q, k, v (as BLIS-ready) whose memory order dq, dk, dv
   * follow (alloc_order): the saved q, k, v are contiguous bf16 copies under
   * autocast */
  int64_t lay[3][4];
} sdpa_aux;

/* A thread's bf16 scratch: tile operands and the transposed dK, dV of a
 * key tile. */
typedef struct fl16_scr {
  uint16_t *p;      /* rows [FL_BR][FL_BC]: P (forward), dS (backward) */
  uint16_t *w, *ds; /* pairs [tp/2][FL16_LDP]: W, dS of a head's query rows, one key tile (backward) */
  float *dkt, *dvt; /* [HS][FL16_LDC], [HSV][FL16_LDC]: dK^T, dV^T of one key tile (backward) */
  double *d;        /* [group][T]: D = rowsum(dO * out) of the task's query rows (backward) */
} fl16_scr;

/* The bf16 packs of a fused call under autocast (nn/attention_bf16.c). */
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

/* ---- nn/attention.c: the plan ----------------------------------------- */

/* x (4-d) as a tensor of dtype dt whose last-two-dims matrices BLIS takes:
 * x itself (*tmp NULL), else a contiguous copy (*tmp, to free). NULL on error. */
const lt_tensor *lt__sdpa_blis_ready(const lt_tensor *x, lt_dtype dt, lt_tensor **tmp);
/* attn_mask as the plan reads it (bool or dt; *tmp to free). */
const lt_tensor *lt__sdpa_mask_ready(const lt_tensor *am, lt_dtype dt, lt_tensor **tmp);
/* Fill the geometry, resp. the mask fields of pl. */
void lt__sdpa_plan_geometry(sdpa_plan *pl, const lt_tensor *q, const lt_tensor *k, const lt_tensor *v);
void lt__sdpa_plan_masks(sdpa_plan *pl, const lt_tensor *am, const lt_tensor *kp);
/* A new 4-d tensor in the memory order of x (zero-filled if zero); returns new. */
lt_tensor *lt__sdpa_alloc_order(lt_dtype dt, const int64_t *shape, const int64_t *xshape, const int64_t *xstride,
                                bool zero);
lt_tensor *lt__sdpa_alloc_like(lt_dtype dt, const int64_t *shape, const lt_tensor *x, bool zero);
/* Threads for ntasks tasks of `work` elements; *one: one thread per task. */
int lt__sdpa_task_threads(int64_t ntasks, int64_t work, bool *one);
/* Frees t[0..n). */
void lt__sdpa_free_n(lt_tensor **t, int n);
/* The end of both backwards: gin gets dq, dk, dv on success, else frees them; returns st. */
lt_status lt__sdpa_hand_grads(lt_status st, lt_tensor *dq, lt_tensor *dk, lt_tensor *dv, lt_tensor **gin);

/* ---- the two implementations (inputs checked by the entry) ------------- */

/* nn/attention_unfused.c; returns new (NULL on error), *weights new when asked. */
lt_tensor *lt__sdpa_unfused(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                            const lt_attention_opts *opts, const lt_nn_ctx *ctx, lt_tensor **weights);
/* nn/attention_tiles.c; returns new (NULL on error). */
lt_tensor *lt__sdpa_fused(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                          const lt_attention_opts *opts, const lt_nn_ctx *ctx);

/* nn/attention_bias.c: the attention composed of differentiable ops, for a
 * float attn_mask that requires a gradient; returns new, *weights new when asked. */
lt_tensor *lt__sdpa_biased(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                           const lt_attention_opts *opts, const lt_nn_ctx *ctx, lt_tensor **weights);

/* ---- nn/attention_bf16.c: the bf16 tile driver ------------------------- */

/* The tile kernel for a fused call under autocast, for an output of column stride out_cs, or NONE. */
lt__bf16dot_kind lt__fl16_kind(const sdpa_plan *pl, int64_t out_cs);
/* The packs of a call (backward: its extra packs too); returns new (free with lt__fl16_free), NULL with *st. */
fl16 *lt__fl16_make(const sdpa_plan *pl, lt__bf16dot_kind kind, bool backward, lt_status *st);
void lt__fl16_free(fl16 *x);
/* Packs every operand of x from the plan's tensors (threaded). */
void lt__fl16_pack_all(const sdpa_plan *pl, const fl16 *x);
/* Bytes of a thread's scratch for T padded to tp; its parts laid out in mem. */
size_t lt__fl16_scr_bytes(const sdpa_plan *pl, int64_t tp, bool backward);
fl16_scr lt__fl16_scr_at(const sdpa_plan *pl, char *mem, int64_t tp, bool backward);
/* Forward products of query rows [t, t + nr) of (b, h) against keys [s0, s0 + nv):
 * scores S = Q K^T into Sb (f32, FL_BC a row), and O (+)= P V from the bf16 P in sc. */
void lt__fl16_scores(const sdpa_plan *pl, int64_t b, int64_t h, int64_t t, int64_t nr, int64_t s0, int64_t nv,
                     void *Sb);
void lt__fl16_pv(const sdpa_plan *pl, fl16_scr *sc, int64_t b, int64_t h, int64_t nr, int64_t s0, int64_t nv,
                 const void *Sb, void *O, int64_t ldo, bool accumulate);
/* The backward of (b, kv head g) over the keys [j0, j1) on the bf16 tiles (the
 * f32 loop's contract, key tiles outside; nn/attention_bf16.c). */
void lt__fl16_bwd(const sdpa_plan *pl, int64_t b, int64_t g, int64_t j0, int64_t j1, float *dq, int64_t dqh,
                  int64_t dqr, int64_t dqc, float *Pb, float *Wb, float *dPb, uint8_t *kb, const fl16_scr *sc);
#endif /* LT_NN_ATTENTION_INTERNAL_H */
