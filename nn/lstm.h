/*
 * nn/lstm.h: the recurrent layers, torch.nn.LSTM and torch.nn.GRU, and their
 * fused recurrence ops.
 * Included by libtensor.h; split out of nn/nn.h as nn/conv.h is.
 *
 * What this is: nn.LSTM's semantics (https://pytorch.org/docs/stable/generated/torch.nn.LSTM.html):
 *   i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)    gate order in the weights: i, f, g, o
 *   f = sigmoid(W_if x + b_if + W_hf h + b_hf)
 *   g = tanh   (W_ig x + b_ig + W_hg h + b_hg)
 *   o = sigmoid(W_io x + b_io + W_ho h + b_ho)
 *   c' = f * c + i * g,   h' = o * tanh(c')
 * with num_layers stacked layers, bidirectional or not, bias or not,
 * batch_first, dropout between layers (training only), initial (h0, c0) and
 * the final (h_n, c_n). nn.GRU (below) the same way, gates r, z, n.
 * How: per layer, the input projection of all T steps is ONE product
 * (lt_linear on [T*B, I] -> [T*B, 4H], both biases folded in); then the
 * recurrence is one autograd op (lt_lstm_recurrence) whose forward does, per
 * step, one [B,H]x[H,4H] product and one fused pass for the gates and the
 * cell, and whose backward runs BPTT the same way (one [B,4H]x[4H,H] product
 * and one fused pass per step, then one product for dW_hh over all steps).
 *
 * A bidirectional layer runs a second recurrence of its own weights
 * ("..._reverse") on the time-reversed input; the two outputs are
 * concatenated on the last dim ([T, B, 2H]) and the next layer's input size
 * is 2H, as PyTorch's.
 *
 * What this is not: the plain RNN (tanh/relu), projected (proj_size) LSTMs,
 * packed sequences. f32 and f64 only.
 *
 * Shapes: T time steps, B batch, I input size, H hidden size, L layers, D
 * directions (2 if bidirectional, else 1).
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
LT_API lt_tensor *lt_lstm_recurrence(const lt_tensor *xg, const lt_tensor *w_hh, const lt_tensor *h0, const lt_tensor *c0);

#define LT_LSTM_MAX_LAYERS 16

/* nn.LSTM(input_size, hidden_size, num_layers, bias, batch_first, dropout,
 * bidirectional); nn.GRU takes the same (lt_gru_opts). */
typedef struct lt_lstm_opts {
  int64_t num_layers; /* 1 .. LT_LSTM_MAX_LAYERS; default 1 */
  bool bias;          /* default true */
  bool batch_first;   /* x and output [B, T, *] instead of [T, B, *]; default false */
  double dropout;     /* on each layer's output but the last, in training; default 0 */
  bool bidirectional; /* a reverse direction per layer: output [T, B, 2H], states [2L, B, H]; default false */
} lt_lstm_opts;
#define LT_LSTM_DEFAULTS ((lt_lstm_opts){.num_layers = 1, .bias = true})

typedef struct lt_lstm_m {
  int64_t input_size, hidden_size;
  lt_lstm_opts opts;
  lt_tensor *weight_ih[LT_LSTM_MAX_LAYERS]; /* [4H, I] (layer 0) or [4H, D H]: "<name>.weight_ih_l<k>" */
  lt_tensor *weight_hh[LT_LSTM_MAX_LAYERS]; /* [4H, H]: "<name>.weight_hh_l<k>" */
  lt_tensor *bias_ih[LT_LSTM_MAX_LAYERS];   /* [4H] or NULL without bias: "<name>.bias_ih_l<k>" */
  lt_tensor *bias_hh[LT_LSTM_MAX_LAYERS];   /* [4H] or NULL without bias: "<name>.bias_hh_l<k>" */
  /* bidirectional only (else NULL): "<name>.weight_ih_l<k>_reverse", ... */
  lt_tensor *weight_ih_reverse[LT_LSTM_MAX_LAYERS], *weight_hh_reverse[LT_LSTM_MAX_LAYERS];
  lt_tensor *bias_ih_reverse[LT_LSTM_MAX_LAYERS], *bias_hh_reverse[LT_LSTM_MAX_LAYERS];
} lt_lstm_m;

/* Registers the parameters under PyTorch's names in PyTorch's order
 * (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then with
 * bidirectional the same with "_reverse", then l1, ...), each
 * U(-1/sqrt(H), 1/sqrt(H)) drawn from g in that order (f32; biases
 * LT_PARAM_NO_DECAY). opts NULL: LT_LSTM_DEFAULTS. On failure nothing
 * changed (store, generator and struct). Errors: NULL arguments,
 * input_size < 1, hidden_size < 1, num_layers outside [1, LT_LSTM_MAX_LAYERS],
 * dropout outside [0, 1]. */
LT_API lt_status lt_lstm_init(lt_lstm_m *m, lt_params *p, const char *name, int64_t input_size, int64_t hidden_size,
                       const lt_lstm_opts *opts, lt_generator *g);

/* nn.LSTM's forward. x [T, B, I] ([B, T, I] with batch_first) or unbatched
 * [T, I]; h0, c0 [L D, B, H] ([L D, H] unbatched), or NULL for zeros (each
 * independently). ctx gives the mode for inter-layer dropout (NULL:
 * evaluation). Returns new output [T, B, D H] ([B, T, D H] with batch_first,
 * a permuted view then; [T, D H] unbatched): the last layer's h_t (forward
 * then reverse). If h_n / c_n are not NULL they receive new [L D, B, H]
 * ([L D, H]) final states, ordered l0, l0 reverse, l1, ... On failure
 * returns NULL and leaves *h_n and *c_n NULL. Errors name the op and the
 * shapes (x's last dim must be input_size, h0/c0 must be [L D, B, H]). */
LT_API lt_tensor *lt_lstm_forward(const lt_lstm_m *m, const lt_tensor *x, const lt_tensor *h0, const lt_tensor *c0,
                           const lt_nn_ctx *ctx, lt_tensor **h_n, lt_tensor **c_n);

/* ---- GRU ------------------------------------------------------------------- */

/* The recurrence of one GRU layer, as one differentiable op (nn.GRU's cell,
 * https://pytorch.org/docs/stable/generated/torch.nn.GRU.html, gates r, z, n):
 *   xg   [T, B, 3H]  x W_ih^T + b_ih + [b_hr, b_hz, 0] (any strides with a
 *                    unit last stride; others are copied);
 *   w_hh [3H, H]     recurrent weight;
 *   b_hn [H]         the n part of b_hh (inside r * (W_hn h + b_hn)), or NULL;
 *   h0   [B, H]      initial state (NULL: zeros).
 *     r = sigmoid(xg_r + W_hr h),  z = sigmoid(xg_z + W_hz h),
 *     n = tanh(xg_n + r (W_hn h + b_hn)),  h' = (1 - z) n + z h
 * Returns new [T, B, H], every h_t. Gradients flow to xg, w_hh, b_hn, h0.
 * The saved state is r, z, n and W_hn h + b_hn per step ([T, B, 4H]) and the
 * output. Results do not depend on the thread count. Errors as
 * lt_lstm_recurrence's. */
LT_API lt_tensor *lt_gru_recurrence(const lt_tensor *xg, const lt_tensor *w_hh, const lt_tensor *b_hn, const lt_tensor *h0);

/* nn.GRU(input_size, hidden_size, num_layers, bias, batch_first, dropout,
 * bidirectional): the LSTM's options. */
typedef lt_lstm_opts lt_gru_opts;
#define LT_GRU_DEFAULTS LT_LSTM_DEFAULTS

/* Parameters as the LSTM's with 3H rows (gates r, z, n): "<name>.weight_ih_l<k>"
 * [3H, I or D H], "weight_hh_l<k>" [3H, H], "bias_ih_l<k>", "bias_hh_l<k>"
 * [3H], and "..._reverse" with bidirectional; PyTorch's order and init. */
typedef struct lt_gru_m {
  int64_t input_size, hidden_size;
  lt_gru_opts opts;
  lt_tensor *weight_ih[LT_LSTM_MAX_LAYERS], *weight_hh[LT_LSTM_MAX_LAYERS];
  lt_tensor *bias_ih[LT_LSTM_MAX_LAYERS], *bias_hh[LT_LSTM_MAX_LAYERS];
  lt_tensor *weight_ih_reverse[LT_LSTM_MAX_LAYERS], *weight_hh_reverse[LT_LSTM_MAX_LAYERS];
  lt_tensor *bias_ih_reverse[LT_LSTM_MAX_LAYERS], *bias_hh_reverse[LT_LSTM_MAX_LAYERS];
} lt_gru_m;

/* As lt_lstm_init (errors, roll-back, ownership). */
LT_API lt_status lt_gru_init(lt_gru_m *m, lt_params *p, const char *name, int64_t input_size, int64_t hidden_size,
                      const lt_gru_opts *opts, lt_generator *g);
/* nn.GRU's forward: as lt_lstm_forward without the cell (h0 [L D, B, H] or
 * NULL; *h_n [L D, B, H] if h_n is not NULL). Returns new output
 * [T, B, D H] ([B, T, D H] with batch_first; [T, D H] unbatched). */
LT_API lt_tensor *lt_gru_forward(const lt_gru_m *m, const lt_tensor *x, const lt_tensor *h0, const lt_nn_ctx *ctx,
                          lt_tensor **h_n);

#ifdef __cplusplus
}
#endif
#endif /* LT_NN_LSTM_H */
