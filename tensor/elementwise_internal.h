/*
 * tensor/elementwise_internal.h: the elementwise kernels
 * (tensor/elementwise_kernels.c) as the ops (tensor/elementwise.c) call
 * them: per op and dtype, an lt__loop_fn for the shared iterator. Not
 * installed.
 *
 * Every kernel sees operands of one dtype (the ops convert the others
 * first); the bf16 entries are the f32 kernels, which the ops' runner feeds
 * widened copies.
 */
#ifndef LT_TENSOR_ELEMENTWISE_INTERNAL_H
#define LT_TENSOR_ELEMENTWISE_INTERNAL_H

#include "tensor/iter_internal.h"

/* Unary kernels: the public ops (LT_UNARY_*), then private ones, the
 * derivatives some backwards use. */
enum {
#define LT__EW_U_ENUM(N, n) LT__EW_U_##N = LT_UNARY_##N,
  LT_UNARY_TABLE(LT__EW_U_ENUM)
#undef LT__EW_U_ENUM
  LT__EW_U_DGELU = LT_UNARY_COUNT,
  LT__EW_U_DGELU_TANH,
  LT__EW_U_DSILU,
  LT__EW_U_COUNT
};

/* Fused backward kernels of unary ops, gin = g * f'(x) in one pass
 * (p[0] = gin, p[1] = g, p[2] = x: what the forward saved, the output for
 * relu, tanh and sigmoid). */
enum {
  LT__EW_G_RELU,
  LT__EW_G_TANH,
  LT__EW_G_SIGMOID,
  LT__EW_G_GELU,
  LT__EW_G_GELU_TANH,
  LT__EW_G_SILU,
  LT__EW_G_COUNT
};

/* The kernel of unary op `op` (LT__EW_U_*) on dt (p[0] = out, p[1] = x),
 * NULL where the op has none for dt. */
lt__loop_fn lt__ew_unary_kernel(int op, lt_dtype dt);
/* The fused backward `op` (LT__EW_G_*) on a float dt. */
lt__loop_fn lt__ew_grad_kernel(int op, lt_dtype dt);
/* The kernel of binary op `op` on dt (p[0] = out, p[1] = a, p[2] = b;
 * comparisons write bool), NULL where the op has none for dt. */
lt__loop_fn lt__ew_binary_kernel(lt_binary_op op, lt_dtype dt);
/* where / masked_fill: p[0] = out, p[1] = cond (bool), p[2] = a, p[3] = b,
 * by element size of d's compute dtype. */
lt__loop_fn lt__ew_where_kernel(lt_dtype d);
/* clamp with ctx = {lo, hi} in dt (p[0] = out, p[1] = x), NULL for bool. */
lt__loop_fn lt__ew_clamp_kernel(lt_dtype dt);

#endif
