/*
 * nn/relpos.c: T5's relative positions (Raffel et al. 2020, section 2.1;
 * transformers' T5Attention._relative_position_bucket and compute_bias):
 * the distance from each query to each key, put in one of num_buckets log
 * buckets, and the learned bias of those buckets, one scalar per head,
 * added to the attention scores.
 *
 * The buckets of the relative position r = key - query:
 *   bidirectional (an encoder): half the buckets for r > 0 (offset nb / 2),
 *     half for r <= 0, each of the nb' = nb / 2 buckets over |r|;
 *   unidirectional (a causal decoder): nb' = nb buckets over max(-r, 0).
 * Over a distance d >= 0 with max_exact = nb' / 2: d itself when d <
 * max_exact, else max_exact + trunc(log(d / max_exact) / log(max_distance /
 * max_exact) * (nb' - max_exact)), at most nb' - 1. The logarithm is taken in
 * f32 as transformers does (its tensors are f32), so the bucket edges are
 * transformers' own.
 *
 * What this is not: a cache of the bias (a model computes it once per stack
 * and forward, as transformers computes it in layer 0 and passes it on), or
 * an attention (lt_scaled_dot_product_attention adds it as a float
 * attn_mask, with its gradient).
 */
#include "nn/nn.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <stdlib.h>

#define OP "relative_position_buckets"

/* The checks both entries share; LT_OK or the error (op names the caller). */
static lt_status check(const char *op, int64_t T, int64_t S, int64_t q0, bool bidirectional, int64_t num_buckets,
                       int64_t max_distance) {
  if (T < 1 || S < 1 || q0 < 0 || T > ((int64_t)1 << 24) || S > ((int64_t)1 << 24) || q0 > ((int64_t)1 << 40))
    return lt__err(LT_ERR_INVALID, "%s: T %lld, S %lld, q0 %lld: need T, S in [1, 2^24] and q0 >= 0", op,
                   (long long)T, (long long)S, (long long)q0);
  if (T * S > ((int64_t)1 << 31))
    return lt__err(LT_ERR_INVALID, "%s: T %lld x S %lld: more than 2^31 pairs", op, (long long)T, (long long)S);
  const int64_t nb = bidirectional ? num_buckets / 2 : num_buckets, max_exact = nb / 2;
  if (num_buckets > 65536 || max_exact < 1)
    return lt__err(LT_ERR_INVALID, "%s: num_buckets %lld (%s): need at least %d and at most 65536", op,
                   (long long)num_buckets, bidirectional ? "bidirectional" : "unidirectional", bidirectional ? 4 : 2);
  if (max_distance <= max_exact)
    return lt__err(LT_ERR_INVALID, "%s: max_distance %lld: must exceed the %lld exact buckets (num_buckets %lld, %s)",
                   op, (long long)max_distance, (long long)max_exact, (long long)num_buckets,
                   bidirectional ? "bidirectional" : "unidirectional");
  return LT_OK;
}

int64_t lt_relative_position_bucket(int64_t r, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0, nb = num_buckets, d;
  if (bidirectional) {
    nb /= 2;
    bucket = r > 0 ? nb : 0;
    d = r < 0 ? -r : r;
  } else {
    d = r < 0 ? -r : 0;
  }
  const int64_t max_exact = nb / 2;
  if (d < max_exact) return bucket + d;
  /* f32 as transformers: log(d.float() / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact) */
  const float l = logf((float)d / (float)max_exact);
  const float den = (float)log((double)max_distance / (double)max_exact);
  const float v = l / den * (float)(nb - max_exact);
  int64_t large = max_exact + (int64_t)v; /* .to(torch.long): truncation */
  if (large > nb - 1) large = nb - 1;
  return bucket + large;
}

lt_tensor *lt_relative_position_buckets(int64_t T, int64_t S, int64_t q0, bool bidirectional, int64_t num_buckets,
                                        int64_t max_distance) {
  if (check(OP, T, S, q0, bidirectional, num_buckets, max_distance) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(LT_DTYPE_I64, LT_SHAPE(T, S));
  if (!out) return NULL;
  int64_t *b = out->data;
  for (int64_t t = 0; t < T; t++)
    for (int64_t s = 0; s < S; s++) b[t * S + s] = lt_relative_position_bucket(s - (q0 + t), bidirectional, num_buckets,
                                                                            max_distance);
  return out;
}

lt_tensor *lt_relative_position_bias(const lt_tensor *table, int64_t T, int64_t S, int64_t q0, bool bidirectional,
                                     int64_t max_distance) {
  const char *op = "relative_position_bias";
  if (!table) return lt__err_null(op, "table"), NULL;
  if (table->ndim != 2 || !lt_dtype_is_float(table->dtype))
    return lt__err(LT_ERR_SHAPE, "%s: table is %s: need [num_buckets, NH] floats", op, LT__D(table)), NULL;
  if (check(op, T, S, q0, bidirectional, table->shape[0], max_distance) != LT_OK) return NULL;
  lt_tensor *ids = lt_relative_position_buckets(T, S, q0, bidirectional, table->shape[0], max_distance);
  lt_tensor *e = ids ? lt_embedding(table, ids) : NULL;           /* [T, S, NH] */
  lt_tensor *p = e ? lt_permute(e, 3, (const int[]){2, 0, 1}) : NULL; /* [NH, T, S] */
  lt_tensor *out = p ? lt_unsqueeze(p, 0) : NULL;                 /* [1, NH, T, S] */
  lt_tensor_free(ids), lt_tensor_free(e), lt_tensor_free(p);
  return out;
}
