/*
 * tests/util_layout.h: the one home of three checks that every op test makes:
 * inputs in other memory layouts, bit equality (printing the first
 * mismatches), and "1 and 2 threads give the same bits".
 *
 * Used by the op runner (tests/test_ops.c) and by the per-file tests that the
 * runner does not cover. It is not a reference implementation of anything:
 * values are compared elsewhere (LT_ASSERT_CLOSE in test_util.h).
 */
#ifndef LT_TEST_UTIL_LAYOUT_H
#define LT_TEST_UTIL_LAYOUT_H

#include "test_util.h"

/* X(NAME, name): the layouts an input can be given in.
 *   CONTIGUOUS  row-major, no gaps;
 *   TRANSPOSED  the same values stored with dims 0 and ndim-1 swapped (a
 *               transposed view of a contiguous copy): the last dim has a
 *               stride != 1;
 *   SLICED      the same values at every second row of dim 0 of a buffer
 *               twice as long (lt_slice with step 2): rows stay contiguous
 *               but the tensor is not (1-d: stride 2);
 *   STRIDED     the same values with every stride doubled (lt_select of a
 *               [*shape, 2] buffer): no dim is contiguous;
 *   EXPANDED    a stride-0 view: the first dim of size > 1 becomes a size-1
 *               dim expanded back (lt_expand). This changes the values: every
 *               slice along that dim equals the first one. */
#define LT_TEST_LAYOUT_TABLE(X) \
  X(CONTIGUOUS, contiguous) X(TRANSPOSED, transposed) X(SLICED, sliced) X(STRIDED, strided) \
  X(EXPANDED, expanded)

typedef enum {
#define LT_TEST_LAYOUT_ENUM(N, n) LT_TEST_##N,
  LT_TEST_LAYOUT_TABLE(LT_TEST_LAYOUT_ENUM)
#undef LT_TEST_LAYOUT_ENUM
  LT_TEST_LAYOUT_COUNT
} lt_test_layout;

/* "contiguous", ...; static. */
const char *lt_test_layout_name(lt_test_layout l);

/* t in layout l (see the table). Takes ownership of t; returns new (free with
 * lt_tensor_free), not requiring grad. Where the layout does not apply (0-d,
 * TRANSPOSED of a 1-d tensor, EXPANDED with no dim of size > 1, STRIDED of a
 * tensor of rank LT_MAX_DIMS) or cannot
 * differ from a contiguous tensor, the result is contiguous: callers that
 * want only non-contiguous cases test lt_is_contiguous. Fails the test on a
 * library error. */
lt_tensor *lt_test_layout_of(lt_tensor *t, lt_test_layout l);

/* Same dtype, shape and bytes of every element (any layouts; NaN payloads and
 * the sign of zero count). Borrows a and b. */
bool lt_test_same_bits(const lt_tensor *a, const lt_tensor *b);

/* Fails the test unless lt_test_same_bits(a, b); the message names both
 * expressions, the shapes or dtypes that differ, or the number of differing
 * elements with the first ones (index, both values and their bits). */
#define LT_ASSERT_SAME_BITS(a, b) lt_test_assert_same_bits((a), (b), #a, #b, __FILE__, __LINE__)
void lt_test_assert_same_bits(const lt_tensor *a, const lt_tensor *b, const char *ea, const char *eb,
                              const char *file, int line);

/* A computation run by lt_test_same_on_threads: stores up to cap new tensors
 * in out (a forward output, gradients, ...) and returns how many; fails the
 * test itself on error. */
typedef int (*lt_test_outputs_fn)(void *ctx, lt_tensor **out, int cap);

/* Runs f(ctx) on 1 and on 2 threads (lt_set_num_threads) and fails the test
 * unless the two runs give the same number of outputs with the same bits
 * (LT_ASSERT_SAME_BITS naming `what` and the output index). Restores the
 * thread count; frees the outputs. At most 16 outputs. */
void lt_test_same_on_threads(lt_test_outputs_fn f, void *ctx, const char *what);

#endif
