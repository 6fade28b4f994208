/*
 * autograd/internal.h: the engine's table of ops (autograd/op_table.c):
 * each op's inputs and backward function. Recording (nodes, lt__record,
 * names, anomaly mode) is the tensor core's: tensor/graph_internal.h, which
 * this header includes, says how to write a differentiable op. Not
 * installed.
 */
#ifndef LT_AUTOGRAD_INTERNAL_H
#define LT_AUTOGRAD_INTERNAL_H

#include "autograd/autograd.h"
#include "tensor/graph_internal.h"

typedef struct lt__op_def {
  int nin;                      /* -1: variadic */
  lt__backward_fn backward;     /* NULL: no backward */
} lt__op_def;

/* The table, indexed by lt__op_id (defined in autograd/op_table.c). */
extern const lt__op_def lt__ops[LT__OP_COUNT];

/* Sum g over broadcast dims so it has shape (ndim, shape): the one helper that
 * undoes broadcasting for every op's gradient. Returns new. */
lt_tensor *lt__sum_to(const lt_tensor *g, int ndim, const int64_t *shape);

#endif /* LT_AUTOGRAD_INTERNAL_H */
