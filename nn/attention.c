/*
 * nn/attention.c: scaled dot-product attention
 * (torch.nn.functional.scaled_dot_product_attention): the public entry, its
 * checks, the one choice between the two implementations (want_fused), and
 * the plan both build on (geometry, masks, operands, output layout, task
 * threads; declared in nn/attention_internal.h).
 *
 * The files of the op:
 *   nn/attention.c           this file: entry, checks, choice, plan
 *   nn/attention_internal.h  the plan (sdpa_plan) and what the files share
 *   nn/attention_unfused.c   the unfused reference, forward and backward
 *   nn/attention_tiles.c     the fused f32/f64 tiles, forward and backward
 *                            (loops in nn/attention_fused.inc, row steps in
 *                            nn/attention_rows.inc)
 *   nn/attention_bf16.c      the fused path's bf16 tile driver under autocast
 *   nn/attention_bias.c      composed of differentiable ops, for a float
 *                            attn_mask that needs a gradient (T5's bias)
 *
 * The contract all of them keep:
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
 * cache needs; no T x S mask is made), a sliding window with it (keys
 * s > t + S - T - window too; the fused path skips the key tiles wholly
 * before a query tile's windows), attn_mask (bool: true = may attend;
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
 * The two implementations (docs/attention.md):
 *
 * Unfused (op scaled_dot_product_attention, the reference, and the only one
 * that can return the weights): the T x S probabilities are materialised per
 * (b, h) and saved for backward, as described above.
 *
 * Fused (op scaled_dot_product_attention_fused, FlashAttention-2, Dao 2023,
 * the default): tiles of FL_BR = 256 query rows x FL_BC = 256 keys
 * (nn/attention_tiles.c). For each query tile the keys are visited tile by
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
 * tensor/bf16dot.c (nn/attention_bf16.c) where the CPU has one. The forward is
 * threaded over (b, h, query tile), largest causal tiles first, the backward
 * over (b, kv head) and, when that gives fewer than FL_MIN_TASKS tasks (MQA
 * at batch 1), chunks of key tiles with partial dq sums added in a fixed order
 * (fl_chunks), so results never depend on the thread count. Per call,
 * scratch of a few tiles per thread is allocated once; nothing is allocated
 * inside the tile loops.
 *
 * What this is not: the kernels give the float attn_mask no gradient (it is
 * a constant of their ops); a mask that requires one goes to
 * nn/attention_bias.c instead. The weights handed back through `weights` are W (after
 * dropout, as nn.MultiheadAttention returns them, one per head), are not
 * differentiable, and always come from the unfused path.
 */
#include "nn/attention_internal.h"

#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OP LT__SDPA_OP

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
const lt_tensor *lt__sdpa_blis_ready(const lt_tensor *x, lt_dtype dt, lt_tensor **tmp) {
  *tmp = NULL;
  if (x->dtype == dt && lt__mat_ok(x->shape[2], x->shape[3], x->stride[2], x->stride[3])) return x;
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *c = x->dtype == dt ? lt_clone(x) : lt_to_dtype(x, dt);
  lt_set_grad_enabled(prev);
  *tmp = c;
  return c;
}

/* A new tensor of shape `shape` (4-d) whose memory follows the dim order of
 * the strides xstride of a tensor x of shape xshape when x is a permutation of a contiguous tensor (a transposed
 * view, say), else contiguous; zero-filled if zero. So the output and the
 * gradients of the usual q = view(x W^T).transpose(1, 2) are themselves
 * transposes of contiguous [B,T,NH,HS] buffers, and the transpose + reshape
 * that merge or unmerge the heads around attention need no copy. */
lt_tensor *lt__sdpa_alloc_order(lt_dtype dt, const int64_t *shape, const int64_t *xshape, const int64_t *xstride,
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
lt_tensor *lt__sdpa_alloc_like(lt_dtype dt, const int64_t *shape, const lt_tensor *x, bool zero) {
  return lt__sdpa_alloc_order(dt, shape, x->shape, x->stride, zero);
}

/* How to run ntasks independent tasks of `work` multiply-adds in all: one
 * task per thread with single-threaded BLIS; or, with fewer tasks than
 * threads but much work, the tasks one after another with BLIS threads;
 * or, for little work, everything on this thread. Each task computes the
 * same bits whichever way (BLIS splits rows and columns, not sums). */
int lt__sdpa_task_threads(int64_t ntasks, int64_t work, bool *one) {
  const int nt = omp_get_max_threads();
  *one = true;
  if (nt <= 1 || work < LT__PARALLEL_MIN * 16) return 1;
  if (ntasks >= nt) return nt;
  *one = false;
  return 1;
}

void lt__sdpa_free_n(lt_tensor **t, int n) {
  for (int i = 0; i < n; i++) lt_tensor_free(t[i]);
}

/* Fills the geometry fields of pl from the prepared q, k, v. */
void lt__sdpa_plan_geometry(sdpa_plan *pl, const lt_tensor *q, const lt_tensor *k, const lt_tensor *v) {
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
const lt_tensor *lt__sdpa_mask_ready(const lt_tensor *am, lt_dtype dt, lt_tensor **tmp) {
  *tmp = NULL;
  if (!am || am->dtype == LT_DTYPE_BOOL || am->dtype == dt) return am;
  const bool prev = lt_set_grad_enabled(false);
  *tmp = lt_to_dtype(am, dt);
  lt_set_grad_enabled(prev);
  return *tmp;
}

/* Fills the mask fields of pl: am (bool or dt, from mask_ready) broadcast on
 * [B,NH,T,S], kp [B or 1,S]; either may be NULL. */
void lt__sdpa_plan_masks(sdpa_plan *pl, const lt_tensor *am, const lt_tensor *kp) {
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

/* ======================================================================== */
/* Backward                                                                 */
/* ======================================================================== */

/* The end of both backwards: on success gin gets dq, dk, dv (each may be
 * NULL); on error they are freed. Returns st. */
lt_status lt__sdpa_hand_grads(lt_status st, lt_tensor *dq, lt_tensor *dk, lt_tensor *dv, lt_tensor **gin) {
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
  if (o->window < 0 || (o->window > 0 && !o->causal))
    return lt__err(LT_ERR_INVALID, OP ": window %lld: a sliding window is >= 1 and causal (0: none)",
                   (long long)o->window);
  if (o->impl != LT_ATTENTION_AUTO && o->impl != LT_ATTENTION_FUSED && o->impl != LT_ATTENTION_UNFUSED)
    return lt__err(LT_ERR_INVALID, OP ": impl %d is not an lt_attention_impl", (int)o->impl);
  if (ctx && ctx->training && o->dropout_p > 0 && !ctx->gen)
    return lt__err(LT_ERR_NULL, OP ": training with dropout_p %g needs ctx->gen (a generator)", o->dropout_p);
  return LT_OK;
}

/* ======================================================================== */
/* The public entry: fused or unfused                                       */
/* ======================================================================== */

/* Fused unless weights are requested (only the unfused path has them), or
 * impl or the path table (attention=fused|unfused, forced by
 * LT_ATTENTION=fused|unfused: tensor/paths.def) say otherwise. AUTO picks unfused when
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
  const lt__path forced = lt__path_forced(LT__PATH_FAMILY_attention); /* LT_ATTENTION=fused|unfused */
  if (forced != LT__PATH_AUTO) return forced == LT__PATH_attention_fused;
  return q->shape[2] > FL_BR || k->shape[2] > FL_BC;
}

lt_tensor *lt_scaled_dot_product_attention(const lt_tensor *q, const lt_tensor *k, const lt_tensor *v,
                                           const lt_attention_opts *opts, const lt_nn_ctx *ctx,
                                           lt_tensor **weights) {
  if (check_inputs(q, k, v, opts, ctx) != LT_OK) return NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  const lt_tensor *am = opts ? opts->attn_mask : NULL;
  if (am && am->dtype != LT_DTYPE_BOOL && am->requires_grad && lt_grad_enabled())
    return lt__sdpa_biased(q, k, v, opts, ctx, weights); /* the bias's gradient: composed ops */
  return want_fused(opts, weights != NULL, q, k) ? lt__sdpa_fused(q, k, v, opts, ctx)
                                           : lt__sdpa_unfused(q, k, v, opts, ctx, weights);
}
