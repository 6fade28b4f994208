/*
 * nn/rnn_internal.h: the stacking of recurrent layers shared by nn.LSTM
 * (nn/lstm.c) and nn.GRU (nn/gru.c): layers, directions, batch_first,
 * unbatched input, inter-layer dropout, the final states. Not installed.
 */
#ifndef LT_NN_RNN_INTERNAL_H
#define LT_NN_RNN_INTERNAL_H

#include "nn/nn.h"

/* One layer l in direction d (0 forward, 1 reverse; the caller has already
 * reversed in's time for d = 1): in [T, B, I_l] time-major, h0 (and c0 for an
 * LSTM) [B, H] or NULL; sets out [T, B, H], hn (and cn) [B, H], each new in
 * the open scope. */
typedef lt_status (*lt__rnn_dir_fn)(const void *m, int l, int d, const lt_tensor *in, const lt_tensor *h0,
                                    const lt_tensor *c0, lt_tensor **out, lt_tensor **hn, lt_tensor **cn);

typedef struct lt__rnn_spec {
  const char *op;       /* "lstm_forward", "gru_forward": errors name it */
  const void *m;        /* the module, passed to dir */
  lt__rnn_dir_fn dir;
  int64_t input_size, hidden_size, num_layers;
  bool bidirectional, batch_first;
  double dropout;       /* between layers, in training */
  bool has_cell;        /* LSTM: c0 / c_n */
} lt__rnn_spec;

/* nn.LSTM / nn.GRU's forward over the layers and directions of spec:
 * x [T, B, I] ([B, T, I] with batch_first) or unbatched [T, I]; h0 (c0)
 * [L D, B, H] ([L D, H]) or NULL; output [T, B, D H] (batch_first: [B, T,
 * D H], a permuted view; unbatched [T, D H]), the directions concatenated on
 * the last dim; h_n (c_n) [L D, B, H] in the order l0 forward, l0 reverse,
 * l1 ... Each result new; on failure NULL and *h_n, *c_n NULL. */
lt_tensor *lt__rnn_forward(const lt__rnn_spec *spec, const lt_tensor *x, const lt_tensor *h0, const lt_tensor *c0,
                           const lt_nn_ctx *ctx, lt_tensor **h_n, lt_tensor **c_n);

#endif /* LT_NN_RNN_INTERNAL_H */
