/*
 * models/transformer/internal.h: helpers shared by the files of the
 * Transformer library (libtensor_transformer), not installed.
 *
 * What this is not: a public header (see libtensor_transformer.h), or the
 * core's internals (tensor/error_internal.h), which the model library does
 * not include: it reports errors through the public lt_error_set.
 */
#ifndef LT_TF_INTERNAL_H
#define LT_TF_INTERNAL_H

#include "tensor/tensor.h"

/* The pending error with "<what>: " before its message (lt_last_status()
 * and lt_last_error() of the call that failed); returns its status. */
static inline lt_status lt__tf_fail(const char *what) {
  return lt_error_set(lt_last_status(), "%s: %s", what, lt_last_error());
}

/* Returns lt__tf_fail(what) from the enclosing function if expr is not LT_OK. */
#define LT__TF_TRY(expr, what)                     \
  do {                                             \
    if ((expr) != LT_OK) return lt__tf_fail(what); \
  } while (0)

#endif /* LT_TF_INTERNAL_H */
