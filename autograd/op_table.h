/*
 * autograd/op_table.h: the one table of differentiable ops.
 *
 * Each op is declared exactly once, by a line X(id, nin, has_backward) in the
 * .def file beside its kernels:
 *   - id: a C identifier; the op's name is its spelling ("add");
 *   - nin: number of tensor inputs, or -1 for variadic (cat, stack);
 *   - has_backward: 1 if the op's file defines
 *         lt_status lt__bw_<id>(const lt_node *node, const lt_tensor *gout, lt_tensor **gin);
 *     0 if not (backward through it then fails with an error naming the op).
 * The forward function (public, in tensor.h) records the op with lt__record();
 * the backward sits next to it in the same .c file.
 *
 * tests/test_ops.c enumerates this table: an op without a test entry
 * (tests/opinfo_<module>.inc) or whose backward has no gradcheck fails the suite.
 */
#ifndef LT_AUTOGRAD_OP_TABLE_H
#define LT_AUTOGRAD_OP_TABLE_H

#include "tensor/ops_view.def"
#include "tensor/ops_elementwise.def"
#include "tensor/ops_reduce.def"
#include "tensor/ops_matmul.def"
#include "tensor/ops_index.def"
#include "nn/ops_nn.def"
#include "nn/ops_attention.def"

#define LT_OP_TABLE(X)      \
  LT_OPS_VIEW(X)            \
  LT_OPS_ELEMENTWISE(X)     \
  LT_OPS_REDUCE(X)          \
  LT_OPS_MATMUL(X)          \
  LT_OPS_INDEX(X)           \
  LT_OPS_NN(X)              \
  LT_OPS_ATTENTION(X)

typedef enum {
#define LT__OP_ENUM(id, nin, bw) LT__OP_##id,
  LT_OP_TABLE(LT__OP_ENUM)
#undef LT__OP_ENUM
  LT__OP_COUNT
} lt__op_id;

#endif /* LT_AUTOGRAD_OP_TABLE_H */
