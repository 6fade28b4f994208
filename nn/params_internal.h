/*
 * nn/params_internal.h (internal, not installed): what nn/ files share about
 * the parameter store beyond nn/nn.h. Today only the roll-back that layer
 * initialisers use when a later parameter of the layer fails to register.
 */
#ifndef LT_NN_PARAMS_INTERNAL_H
#define LT_NN_PARAMS_INTERNAL_H

#include "nn/nn.h"

/* Frees the store's entries from index `count` on (names, tensors, hash
 * slots), so the store is as it was when it held `count` entries. `count`
 * must be between 0 and the current number of entries (nn/params.c). */
void lt__params_truncate(lt_params *p, int count);

#endif
