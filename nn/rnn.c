/*
 * nn/rnn.c: the stacking of recurrent layers shared by the LSTM and the GRU
 * (nn/rnn_internal.h): per layer, each direction through the module's own
 * fused recurrence (the reverse one on the time-reversed input, its output
 * reversed back), the directions concatenated, dropout between layers in
 * training, the final states stacked in PyTorch's order. Every intermediate
 * lives in a scope of this function's; the results are handed to the
 * caller's (lt__scope_adopt).
 *
 * What this is not: a recurrence (nn/lstm.c, nn/gru.c), packed sequences or
 * proj_size.
 */
#include "nn/rnn_internal.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#define MAX_STATES 64

lt_tensor *lt__rnn_forward(const lt__rnn_spec *sp, const lt_tensor *x, const lt_tensor *h0, const lt_tensor *c0,
                           const lt_nn_ctx *ctx, lt_tensor **h_n, lt_tensor **c_n) {
  const char *op = sp->op;
  if (h_n) *h_n = NULL;
  if (c_n) *c_n = NULL;
  if (!x) return lt__err_null(op, "x"), NULL;
  const int64_t L = sp->num_layers, H = sp->hidden_size, D = sp->bidirectional ? 2 : 1, LD = L * D;
  if ((x->ndim != 3 && x->ndim != 2) || x->shape[x->ndim - 1] != sp->input_size)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s: must be [T, B, I]%s or unbatched [T, I] with I = input_size = %lld",
                   op, LT__D(x), sp->batch_first ? " ([B, T, I] with batch_first)" : "", (long long)sp->input_size),
           NULL;
  const bool unbatched = x->ndim == 2, bf = sp->batch_first && !unbatched;
  const int64_t B = unbatched ? 1 : x->shape[bf ? 0 : 1];
  const lt_tensor *st[2] = {h0, c0};
  for (int k = 0; k < 2; k++) {
    const lt_tensor *s = st[k];
    if (s && (unbatched ? (s->ndim != 2 || s->shape[0] != LD || s->shape[1] != H)
                        : (s->ndim != 3 || s->shape[0] != LD || s->shape[1] != B || s->shape[2] != H)))
      return lt__err(LT_ERR_SHAPE, "%s: x is %s, %s is %s: must be [L*D, B, H] = [%lld, %lld, %lld]%s", op, LT__D(x),
                     k ? "c0" : "h0", LT__D(s), (long long)LD, (long long)B, (long long)H,
                     unbatched ? " without the B for an unbatched x" : ""),
             NULL;
  }
  if (LD > MAX_STATES) return lt__err(LT_ERR_INVALID, "%s: %lld layers x directions: at most %d", op, (long long)LD, MAX_STATES), NULL;
  const bool training = ctx && ctx->training && sp->dropout > 0;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  lt_tensor *hs[MAX_STATES] = {0}, *cs[MAX_STATES] = {0};
  lt_tensor *in = unbatched ? lt_unsqueeze(x, 1) : bf ? lt_transpose(x, 0, 1) : (lt_tensor *)x; /* [T, B, I] */
  lt_tensor *h0b = h0 && unbatched ? lt_unsqueeze(h0, 1) : (lt_tensor *)h0;
  lt_tensor *c0b = c0 && unbatched ? lt_unsqueeze(c0, 1) : (lt_tensor *)c0;
  lt_status s = in && (!h0 || h0b) && (!c0 || c0b) ? LT_OK : lt_last_status();
  const int time0[1] = {0};
  for (int64_t l = 0; l < L && s == LT_OK; l++) {
    lt_tensor *outs[2] = {0};
    for (int d = 0; d < D && s == LT_OK; d++) {
      const int64_t k = l * D + d;
      lt_tensor *h0k = h0b ? lt_select(h0b, 0, k) : NULL, *c0k = c0b ? lt_select(c0b, 0, k) : NULL;
      lt_tensor *ind = d ? lt_flip(in, 1, time0) : in;
      if ((h0b && !h0k) || (c0b && !c0k) || !ind) {
        s = lt_last_status();
        break;
      }
      s = sp->dir(sp->m, (int)l, d, ind, h0k, c0k, &outs[d], &hs[k], sp->has_cell ? &cs[k] : NULL);
      if (s == LT_OK && d && !(outs[d] = lt_flip(outs[d], 1, time0))) s = lt_last_status();
    }
    if (s != LT_OK) break;
    lt_tensor *o = D == 2 ? lt_cat(2, outs, 2) : outs[0];
    if (o && training && l < L - 1) o = lt_dropout(o, sp->dropout, ctx);
    if (!(in = o)) s = lt_last_status();
  }
  lt_tensor *res = NULL, *hn = NULL, *cn = NULL;
  if (s == LT_OK) res = unbatched ? lt_squeeze(in, 1) : bf ? lt_transpose(in, 0, 1) : in;
  if (res && h_n) {
    hn = lt_stack((int)LD, hs, 0);
    if (hn && unbatched) hn = lt_squeeze(hn, 1);
  }
  if (res && c_n && sp->has_cell) {
    cn = lt_stack((int)LD, cs, 0);
    if (cn && unbatched) cn = lt_squeeze(cn, 1);
  }
  if (!res || (h_n && !hn) || (c_n && sp->has_cell && !cn)) {
    lt_scope_end(sc);
    return NULL;
  }
  lt_tensor_keep(res), lt_tensor_keep(hn), lt_tensor_keep(cn);
  lt_scope_end(sc);
  res = lt__scope_adopt(res);
  if (h_n) *h_n = lt__scope_adopt(hn);
  if (c_n) *c_n = lt__scope_adopt(cn);
  return res;
}
