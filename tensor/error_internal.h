/*
 * tensor/error_internal.h: how library code reports failures. Not installed.
 *
 * lt__err is the library's side of the public lt_error_set (tensor.h): same
 * thread-local status and message. LT_CHECK is the other tier of failure, an
 * invariant that stays on in release builds (programmer errors inside the
 * library only; anything a caller, a file or the environment can cause gets
 * a status). Code outside the library uses lt_error_set, lt_error_null_arg
 * and LT_DESC instead.
 */
#ifndef LT_TENSOR_ERROR_INTERNAL_H
#define LT_TENSOR_ERROR_INTERNAL_H

#include "tensor/tensor.h"

#include <stdarg.h>

/* Record a failure (status + printf-style detail) and return the status, so a
 * caller writes `return lt__err(LT_ERR_SHAPE, "add: ...")`. */
lt_status lt__err(lt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For a NULL tensor argument: keeps a pending error (so failures propagate
 * through composed calls with their first message), else sets LT_ERR_NULL
 * naming the op and the argument. Returns LT_ERR_NULL or the pending status. */
lt_status lt__err_null(const char *op, const char *arg);

/* "[4,8] f32" for messages. buf must hold at least LT__DESC_SIZE bytes. */
#define LT__DESC_SIZE LT_TENSOR_DESC_SIZE
char *lt__desc(const lt_tensor *t, char *buf);
/* Convenience for one-shot messages: LT__D(t) expands to a temporary string. */
#define LT__D(t) lt__desc((t), (char[LT__DESC_SIZE]){0})
/* "[4,8]" */
#define LT__S(nd, sh) lt_shape_str((nd), (sh), (char[LT__DESC_SIZE]){0}, LT__DESC_SIZE)

/* Invariant check that is never compiled out. For programmer errors inside the
 * library only (a broken internal contract), never for input validation. */
#define LT_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) lt__check_failed(#cond, __FILE__, __LINE__);                 \
  } while (0)
_Noreturn void lt__check_failed(const char *expr, const char *file, int line);

#endif /* LT_TENSOR_ERROR_INTERNAL_H */
