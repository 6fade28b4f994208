/*
 * autograd/autograd.h: reverse-mode automatic differentiation over tensor ops.
 *
 * What this is: a tape built as you compute. When grad mode is on (the
 * default) and any input of an op requires a gradient, the op's output gets a
 * grad_fn node that remembers its inputs' nodes and exactly the tensors its
 * backward needs. lt_backward() walks the graph in reverse topological order
 * (an explicit stack: deep graphs do not overflow the C stack) and accumulates
 * gradients into the .grad of every leaf that requires one.
 *
 * What this is not: higher-order differentiation (backward runs with grad mode
 * off) or a graph compiler.
 *
 * Ownership: a node is owned by the tensors whose grad_fn it is and by the
 * nodes downstream of it; it is freed with the last of them. Saved tensors
 * are owned by their node (released after backward unless retain_graph).
 * t->grad is owned by t (freed with t or by lt_zero_grad). With a scope open
 * around a training step, every intermediate and the graph are released at
 * lt_scope_end(); parameters created outside the scope keep their .grad.
 *
 * Errors follow tensor.h: a status plus lt_last_error(), naming the op.
 */
#ifndef LT_AUTOGRAD_H
#define LT_AUTOGRAD_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Grad mode, lt_requires_grad_, lt_is_leaf and anomaly mode are declared in
 * tensor/tensor.h ("Recording for autograd"): recording is the tensor
 * core's; this header is the engine and gradient checking. */

/* Backpropagate from root. grad_output may be NULL only for a one-element
 * root (then it is 1). Gradients accumulate (+=) into leaves' .grad until
 * zeroed. Unless retain_graph, the saved tensors of the traversed graph are
 * released afterwards and a second backward through it is an error. */
LT_API lt_status lt_backward(lt_tensor *root, const lt_tensor *grad_output, bool retain_graph);

/* Free t->grad (t->grad becomes NULL). */
LT_API void lt_zero_grad(lt_tensor *t);

/* Call hook(t, grad, user) with the total gradient computed for t in a
 * backward, before it is accumulated (leaf) or propagated (non-leaf). A hook
 * may return a replacement gradient (returns new; same shape) or NULL to keep
 * it. One hook per tensor; NULL removes it. t must require grad. For a
 * non-leaf the hook receives t == NULL (the graph holds no reference to its
 * outputs, so that freeing them frees the graph). */
LT_API lt_status lt_tensor_set_hook(lt_tensor *t, lt_grad_hook hook, void *user);

/* Call hook(t, user) once per backward, as soon as leaf t's gradient is final
 * for that backward: after its last contribution has been added into t->grad
 * (created if absent), while the rest of the graph is still being swept
 * (PyTorch's register_post_accumulate_grad_hook). This is the moment to start
 * work on the gradient (dist/dist.h starts a bucket's reduction there).
 * The hook runs on the thread of lt_backward and must not call lt_backward;
 * it may read t->grad but not replace or free it. A hook returning an error
 * fails the backward with that status. Not called for a leaf the backward
 * does not reach. One hook per tensor; NULL removes it. t must be a leaf
 * requiring grad (LT_ERR_AUTOGRAD otherwise).
 *
 * What changes for such a leaf: it is committed early, so if the backward
 * fails after its commit (a later op's backward, another hook), its .grad
 * keeps the added gradient (other leaves are unchanged, as usual). */
LT_API lt_status lt_tensor_set_post_accumulate_hook(lt_tensor *t, lt_post_accumulate_hook hook, void *user);

/* ---- gradient checking ------------------------------------------------- */

/* The function under test: computes an output from the n inputs (returns
 * new, or NULL on error). It must be deterministic. */
typedef lt_tensor *(*lt_gradcheck_fn)(int n, lt_tensor *const *inputs, void *user);

typedef struct lt_gradcheck_opts {
  double eps;   /* central-difference step, default 1e-6 */
  double atol;  /* default 1e-5 */
  double rtol;  /* default 1e-3 */
} lt_gradcheck_opts;
#define LT_GRADCHECK_DEFAULTS ((lt_gradcheck_opts){.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3})

/* Compares the analytic gradient of sum(f(inputs) * w), w a fixed random
 * weighting, against central differences, for every element of every input
 * that requires grad. Inputs must be f64. opts NULL means the defaults.
 * Returns LT_OK if |analytic - numeric| <= atol + rtol * |numeric| for all;
 * otherwise LT_ERR_AUTOGRAD with a message naming the input, the element and
 * both values. The inputs' .grad are left as they were. */
LT_API lt_status lt_gradcheck(lt_gradcheck_fn f, void *user, int n, lt_tensor *const *inputs,
                       const lt_gradcheck_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* LT_AUTOGRAD_H */
