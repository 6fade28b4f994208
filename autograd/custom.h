/*
 * autograd/custom.h: differentiable ops defined outside the library, with a
 * forward, a backward, saved tensors and a name (PyTorch's
 * torch.autograd.Function, Candle's CustomOp). Installed; included by
 * libtensor.h.
 *
 * What this is: a user's op takes part in autograd as one graph node, as the
 * library's own ops do (one line in the op table, "custom", serves them
 * all): lt_backward calls its backward with the gradient of its output, its
 * saved tensors are checked against in-place writes, anomaly mode checks its
 * output and gradients, errors name it ("backward of 'my_op' failed: ..."),
 * and lt_gradcheck checks its backward against finite differences.
 *
 *     static lt_tensor *swish_fwd(lt_custom_ctx *ctx, lt_tensor *const *in, void *user) {
 *       lt_tensor *s = lt_sigmoid(in[0]);               // under no-grad: no graph
 *       if (lt_custom_save(ctx, in[0]) != LT_OK || lt_custom_save(ctx, s) != LT_OK) return NULL;
 *       return lt_mul(in[0], s);
 *     }
 *     static lt_status swish_bwd(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user) {
 *       const lt_tensor *x = lt_custom_saved(ctx, 0), *s = lt_custom_saved(ctx, 1);
 *       // d/dx x s(x) = s (1 + x (1 - s))
 *       gin[0] = lt_mul(gout, lt_mul(s, lt_add_scalar(lt_mul(x, lt_sub_scalar(lt_neg(s), -1)), 1)));
 *       return gin[0] ? LT_OK : lt_last_status();
 *     }
 *     static const lt_custom_op SWISH = {.name = "swish", .nin = 1, .forward = swish_fwd, .backward = swish_bwd};
 *     ...
 *     lt_tensor *y = lt_custom_apply(&SWISH, 1, (lt_tensor *[]){x}, NULL);
 *
 * The forward runs with grad mode off inside a scope of its own: any
 * library call may be used, its intermediates are freed when it returns,
 * and only its result enters the graph. The backward runs with grad mode off
 * inside the engine's scope: temporaries need no free, and the gin[i] it sets
 * are taken over by the engine. Both run on the thread of the call.
 *
 * What this is not: double backward (backward runs under no-grad, as every
 * op's), several outputs per op (return one tensor; stack or cat several),
 * or kernels compiled at run time.
 *
 * Ownership: the lt_custom_op is borrowed and must outlive every graph made
 * with it (a static const struct is the usual form), as must user. The ctx
 * is the library's, valid only during the call it is given to. Saved
 * tensors are kept by the graph (aliases sharing storage) until its backward
 * ends or it is freed. lt_custom_apply returns new.
 */
#ifndef LT_AUTOGRAD_CUSTOM_H
#define LT_AUTOGRAD_CUSTOM_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LT_CUSTOM_MAX_IN 8     /* tensor inputs of one custom op */
#define LT_CUSTOM_MAX_SAVED 8  /* tensors saved by one application */
#define LT_CUSTOM_STATE_MAX 64 /* bytes of non-tensor state (sizes, flags, scalars) */

typedef struct lt_custom_ctx lt_custom_ctx; /* opaque; the library's, for one call */

typedef struct lt_custom_op {
  const char *name; /* in errors and in anomaly reports; borrowed (static) */
  int nin;          /* tensor inputs, 1 .. LT_CUSTOM_MAX_IN */
  unsigned optional; /* bit i set: in[i] may be NULL (a bias, a mask); others NULL are LT_ERR_NULL */
  /* Required. The output from in[0 .. nin) (NULL only where optional
   * says); user is lt_custom_apply's. Save what backward needs with
   * lt_custom_save / lt_custom_set_state. Returns new (a tensor made here,
   * not one of the inputs; a view of one is fine), or NULL with the error
   * set by the failing call or lt_error_set. */
  lt_tensor *(*forward)(lt_custom_ctx *ctx, lt_tensor *const *in, void *user);
  /* The gradient of each input: for every i with lt_custom_needs_input_grad
   * (ctx, i), set gin[i] to a new tensor dL/d in[i] from gout (dL/d output,
   * borrowed; the output's shape). gin[i] may have the output's shape where
   * the input was broadcast (the engine sums it back) and another float
   * dtype (the engine casts it). Returns LT_OK or an error status. NULL: the
   * op is not differentiable (a backward through it fails naming it). */
  lt_status (*backward)(lt_custom_ctx *ctx, const lt_tensor *gout, lt_tensor **gin, void *user);
} lt_custom_op;

/* Runs op on in[0 .. nin) (nin must equal op->nin) and, when grad mode is
 * on and an input requires a gradient, records it in the graph. Returns new,
 * or NULL: LT_ERR_NULL (op, its name or forward, an input not optional:
 * "<name>: argument in[i] is NULL", keeping a pending error as every op
 * does), LT_ERR_INVALID (nin, a
 * forward returning one of its inputs or a tensor with a graph), or the
 * forward's own error, prefixed with the op's name. */
LT_API lt_tensor *lt_custom_apply(const lt_custom_op *op, int nin, lt_tensor *const *in, void *user);

/* In forward: keep t for backward (up to LT_CUSTOM_MAX_SAVED; t may be an
 * input or an intermediate; NULL is LT_ERR_NULL).
 * The graph keeps an alias of t's storage; modifying it in place before the
 * backward makes the backward fail, naming the op. Borrowed: t may be freed
 * after the call. LT_ERR_INVALID when full or outside forward. */
LT_API lt_status lt_custom_save(lt_custom_ctx *ctx, const lt_tensor *t);
/* In forward: copy size bytes (<= LT_CUSTOM_STATE_MAX) of state for backward
 * (a struct of sizes and scalars); a second call replaces the first. */
LT_API lt_status lt_custom_set_state(lt_custom_ctx *ctx, const void *data, size_t size);

/* In backward: saved tensor k (in saving order; NULL if k is out of range;
 * borrowed), how many were saved, the state (NULL if none;
 * its size in *size if size is not NULL). */
LT_API const lt_tensor *lt_custom_saved(const lt_custom_ctx *ctx, int k);
LT_API int lt_custom_num_saved(const lt_custom_ctx *ctx);
LT_API const void *lt_custom_state(const lt_custom_ctx *ctx, size_t *size);
/* In backward: does input i need a gradient? In forward: does input i
 * require one (and grad mode is on)? */
LT_API bool lt_custom_needs_input_grad(const lt_custom_ctx *ctx, int i);
/* The op's name (for messages of one's own). */
LT_API const char *lt_custom_name(const lt_custom_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* LT_AUTOGRAD_CUSTOM_H */
