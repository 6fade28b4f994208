/*
 * autograd/recompute.h: activation checkpointing (torch.utils.checkpoint):
 * run a function of tensors without keeping the tensors its backward would
 * need, and run it again during the backward to get them back. Installed;
 * included by libtensor.h.
 *
 * What this is: memory for time. lt_recompute(fn, n, in, user, opts) runs
 * fn with the graph recorded as usual, then drops every tensor the graph
 * saved inside fn (its activations; fn's own intermediates are freed as it
 * returns), keeping only the inputs in[]. When lt_backward first reaches a
 * node made inside fn, it runs fn again on the same inputs, with grad mode
 * on, the autocast mode of the first run and the generator given in opts
 * set back to the state it had then (so dropout draws the same masks), and
 * hands each recorded node the tensors the new run saved. The sweep then
 * goes on through the original nodes, so the gradients are the bits of the
 * run without lt_recompute, dropout and bf16 autocast included: the same
 * graph, the same order of accumulation, the same values. After its backward
 * a node of the region drops its tensors again (unless retain_graph), so at
 * most one region's activations are alive at a time.
 *
 *     // A block y = x + W2 gelu(W1 x): the weights are captured (through
 *     // user), the input x is passed.
 *     static lt_tensor *block(int n, lt_tensor *const *in, void *user) {
 *       const my_block *b = user;
 *       lt_tensor *h = lt_gelu(lt_linear(in[0], b->w1, NULL));
 *       return lt_add(in[0], lt_linear(h, b->w2, NULL));
 *     }
 *     ...
 *     lt_tensor *y = lt_recompute(block, 1, (lt_tensor *[]){x}, &blk,
 *                                 &(lt_recompute_opts){.name = "block"});
 *
 * The function: deterministic given its inputs, the tensors it captures,
 * the autocast mode and the generator named in opts (a second generator it
 * draws from would draw other numbers in the second run: the graph check
 * below catches a changed structure, not changed values). It may capture
 * parameters and any tensor that outlives the backward and is not modified
 * in place before it; it must not read other state that changes between the
 * forward and the backward. It may be called with any scope open; its
 * intermediates are freed when it returns (it runs in a scope of its own).
 * Inside a region, lt_recompute calls fn directly: nested regions join the
 * outer one.
 *
 * Errors in the backward name the region: an input modified in place since
 * the forward ("recompute 'block': input 0 ... was modified in place"), or
 * a second run that recorded a different graph (another op, another count).
 *
 * What this is not: offloading to other memory, or a choice of what to
 * keep per op (PyTorch's selective checkpointing): a region keeps its
 * inputs and its output, nothing else.
 *
 * Ownership: fn is called on the thread of the call and of the backward. in
 * is borrowed: the region keeps references to the inputs until its nodes
 * are freed. user is borrowed and must stay valid until the backward,
 * unless opts->user_size is not 0: then user_size bytes of *user are copied
 * and fn gets the copy in both runs (pointers inside stay borrowed). opts
 * and its name are borrowed (the name must be a static string or outlive
 * the graph). lt_recompute returns new.
 */
#ifndef LT_AUTOGRAD_RECOMPUTE_H
#define LT_AUTOGRAD_RECOMPUTE_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The function of a region: an output from in[0 .. n) (returns new, or NULL
 * with the error set). */
typedef lt_tensor *(*lt_recompute_fn)(int n, lt_tensor *const *in, void *user);

typedef struct lt_recompute_opts {
  const char *name;  /* in errors; NULL is "recompute" */
  lt_generator *gen; /* the generator fn draws from (dropout), or NULL; borrowed, must outlive the backward */
  size_t user_size;  /* 0: user is borrowed as is; else bytes of *user copied for both runs */
} lt_recompute_opts;

/* Runs fn(n, in, user) as a region (see above). With grad mode off it is
 * just fn(n, in, user). n >= 0, in[i] not NULL. opts NULL: no name, no
 * generator, user borrowed. Returns new, or NULL: LT_ERR_NULL (fn, an
 * input), LT_ERR_INVALID (n < 0, fn returning one of its inputs), LT_ERR_NOMEM,
 * or fn's own error. */
LT_API lt_tensor *lt_recompute(lt_recompute_fn fn, int n, lt_tensor *const *in, void *user, const lt_recompute_opts *opts);

#ifdef __cplusplus
}
#endif

#endif /* LT_AUTOGRAD_RECOMPUTE_H */
