/*
 * nn/lstm.h: the LSTM layer (torch.nn.LSTM) and its fused recurrence op.
 * Included by libtensor.h; split out of nn/nn.h as nn/conv.h is.
 *
 * What this is: nn.LSTM's semantics (https://pytorch.org/docs/stable/generated/torch.nn.LSTM.html):
 *   i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)    gate order in the weights: i, f, g, o
 *   f = sigmoid(W_if x + b_if + W_hf h + b_hf)
 *   g = tanh   (W_ig x + b_ig + W_hg h + b_hg)
 *   o = sigmoid(W_io x + b_io + W_ho h + b_ho)
 *   c' = f * c + i * g,   h' = o * tanh(c')
 * with num_layers stacked layers, bias or not, batch_first, dropout between
 * layers (training only), initial (h0, c0) and the final (h_n, c_n).
 * How: per layer, the input projection of all T steps is ONE product
 * (lt_linear on [T*B, I] -> [T*B, 4H], both biases folded in); then the
 * recurrence is one autograd op (lt_lstm_recurrence) whose forward does, per
 * step, one [B,H]x[H,4H] product and one fused pass for the gates and the
 * cell, and whose backward runs BPTT the same way (one [B,4H]x[4H,H] product
 * and one fused pass per step, then one product for dW_hh over all steps).
 *
 * What this is not: GRU/RNN, bidirectional or projected (proj_size) LSTMs,
 * packed sequences. f32 and f64 only.
 *
 * Shapes: T time steps, B batch, I input size, H hidden size, L layers.
 * Ownership: as nn/nn.h: the store owns the parameters, the module struct
 * borrows them; returned tensors are new (free with lt_tensor_free, or the
 * open scope owns them); inputs are borrowed.
 */
#ifndef LT_NN_LSTM_H
#define LT_NN_LSTM_H

#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The recurrence of one LSTM layer, as one differentiable op.
 *   xg   [T, B, 4H]  input projections with both biases (x W_ih^T + b_ih + b_hh),
 *                    any strides with a unit last stride (e.g. a permuted
 *                    [B, T, 4H] for batch_first); others are copied;
 *   w_hh [4H, H]     recurrent weight (gates i, f, g, o);
 *   h0, c0 [B, H]    initial state (NULL: zeros).
 * Returns new [2, T, B, H]: [0][t] = h_t, [1][t] = c_t (contiguous), so
 * output = select(0, 0), h_n = [0][T-1], c_n = [1][T-1] are views.
 * Gradients flow to xg, w_hh, h0 and c0. The saved state is the activated
 * gates [T, B, 4H] and the output. Results do not depend on the thread count.
 * Errors: NULL xg or w_hh (LT_ERR_NULL), dtypes not all f32 or all f64
 * (LT_ERR_DTYPE), shapes (LT_ERR_SHAPE, naming each), T or B or H of 0
 * (LT_ERR_SHAPE). */
lt_tensor *lt_lstm_recurrence(const lt_tensor *xg, const lt_tensor *w_hh, const lt_tensor *h0, const lt_tensor *c0);

#define LT_LSTM_MAX_LAYERS 16

/* nn.LSTM(input_size, hidden_size, num_layers, bias, batch_first, dropout). */
typedef struct lt_lstm_opts {
  int64_t num_layers; /* 1 .. LT_LSTM_MAX_LAYERS; default 1 */
  bool bias;          /* default true */
  bool batch_first;   /* x and output [B, T, *] instead of [T, B, *]; default false */
  double dropout;     /* on each layer's output but the last, in training; default 0 */
} lt_lstm_opts;
#define LT_LSTM_DEFAULTS ((lt_lstm_opts){1, true, false, 0.0})

typedef struct lt_lstm_m {
  int64_t input_size, hidden_size;
  lt_lstm_opts opts;
  lt_tensor *weight_ih[LT_LSTM_MAX_LAYERS]; /* [4H, I] (layer 0) or [4H, H]: "<name>.weight_ih_l<k>" */
  lt_tensor *weight_hh[LT_LSTM_MAX_LAYERS]; /* [4H, H]: "<name>.weight_hh_l<k>" */
  lt_tensor *bias_ih[LT_LSTM_MAX_LAYERS];   /* [4H] or NULL without bias: "<name>.bias_ih_l<k>" */
  lt_tensor *bias_hh[LT_LSTM_MAX_LAYERS];   /* [4H] or NULL without bias: "<name>.bias_hh_l<k>" */
} lt_lstm_m;

/* Registers the parameters under PyTorch's names in PyTorch's order
 * (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then l1, ...), each
 * U(-1/sqrt(H), 1/sqrt(H)) drawn from g in that order (f32; biases
 * LT_PARAM_NO_DECAY). opts NULL: LT_LSTM_DEFAULTS. On failure nothing
 * changed (store, generator and struct). Errors: NULL arguments,
 * input_size < 1, hidden_size < 1, num_layers outside [1, LT_LSTM_MAX_LAYERS],
 * dropout outside [0, 1]. */
lt_status lt_lstm_init(lt_lstm_m *m, lt_params *p, const char *name, int64_t input_size, int64_t hidden_size,
                       const lt_lstm_opts *opts, lt_generator *g);

/* nn.LSTM's forward. x [T, B, I] ([B, T, I] with batch_first) or unbatched
 * [T, I]; h0, c0 [L, B, H] ([L, H] unbatched), or NULL for zeros (each
 * independently). ctx gives the mode for inter-layer dropout (NULL:
 * evaluation). Returns new output [T, B, H] ([B, T, H] with batch_first, a
 * permuted view then; [T, H] unbatched): the last layer's h_t. If h_n / c_n
 * are not NULL they receive new [L, B, H] ([L, H]) final states. On failure
 * returns NULL and leaves *h_n and *c_n NULL. Errors name the op and the
 * shapes (x's last dim must be input_size, h0/c0 must be [L, B, H]). */
lt_tensor *lt_lstm_forward(const lt_lstm_m *m, const lt_tensor *x, const lt_tensor *h0, const lt_tensor *c0,
                           const lt_nn_ctx *ctx, lt_tensor **h_n, lt_tensor **c_n);

#ifdef __cplusplus
}
#endif
#endif /* LT_NN_LSTM_H */
