/*
 * op_registry.h: the registry of differentiable ops. It sits at the root on
 * purpose: it belongs to no module, lists every module's .def file, and is
 * what lets autograd/ run ops of modules above it (nn/) without including
 * them. Not installed.
 *
 * Each op is declared exactly once, by a line X(id, nin, has_backward) in the
 * .def file beside its kernels:
 *   - id: a C identifier; the op's name is its spelling ("add");
 *   - nin: number of tensor inputs, or -1 for variadic (cat, stack);
 *   - has_backward: 1 if the op's file defines
 *         lt_status lt__bw_<id>(const lt_node *node, const lt_tensor *gout, lt_tensor **gin);
 *     0 if not (backward through it then fails with an error naming the op).
 * The forward function (public, in its module's header) records the op with
 * lt__record() (tensor/graph_internal.h); the backward sits next to it in the
 * same .c file.
 *
 * Adding an op: one line in its module's .def file (nothing here changes).
 * Adding a module that defines ops: a <module>/ops_<name>.def file with
 * `#define LT_OPS_<NAME>(X) ...`, then one #include and one LT_OPS_<NAME>(X)
 * line below.
 *
 * autograd/op_table.c turns the table into lt__ops[] (name, arity, backward);
 * tests/test_ops.c enumerates it: an op without a test entry
 * (tests/opinfo_<module>.inc) or whose backward has no gradcheck fails the suite.
 */
#ifndef LT_OP_REGISTRY_H
#define LT_OP_REGISTRY_H

#include "tensor/ops_view.def"
#include "tensor/ops_elementwise.def"
#include "tensor/ops_reduce.def"
#include "tensor/ops_matmul.def"
#include "tensor/ops_index.def"
#include "nn/ops_nn.def"
#include "nn/ops_attention.def"
#include "nn/ops_conv.def"
#include "autograd/ops_autograd.def"

#define LT_OP_TABLE(X)      \
  LT_OPS_VIEW(X)            \
  LT_OPS_ELEMENTWISE(X)     \
  LT_OPS_REDUCE(X)          \
  LT_OPS_MATMUL(X)          \
  LT_OPS_INDEX(X)           \
  LT_OPS_NN(X)              \
  LT_OPS_ATTENTION(X)       \
  LT_OPS_CONV(X)            \
  LT_OPS_AUTOGRAD(X)

typedef enum {
#define LT__OP_ENUM(id, nin, bw) LT__OP_##id,
  LT_OP_TABLE(LT__OP_ENUM)
#undef LT__OP_ENUM
  LT__OP_COUNT
} lt__op_id;

#endif /* LT_OP_REGISTRY_H */
