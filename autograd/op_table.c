/*
 * autograd/op_table.c: the op table itself, generated from the .def lines
 * (see op_registry.h at the root). Nothing else lists ops.
 */
#include "autograd/internal.h"

#define LT__BW_PTR_1(id) lt__bw_##id
#define LT__BW_PTR_0(id) NULL
#define LT__BW_PTR(bw, id) LT__BW_PTR_##bw(id)

const lt__op_def lt__ops[LT__OP_COUNT] = {
#define LT__OP_DEF(id, nin, bw) [LT__OP_##id] = {nin, LT__BW_PTR(bw, id)},
    LT_OP_TABLE(LT__OP_DEF)
#undef LT__OP_DEF
};
