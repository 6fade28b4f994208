/*
 * autograd/custom.c: the ops users define (autograd/custom.h). One op table
 * entry, "custom" (autograd/ops_autograd.def), serves them all: its node's
 * aux holds the user's lt_custom_op, user pointer and state, its saved
 * tensors are the ones lt_custom_save kept, and lt__bw_custom hands the
 * engine's call on to the user's backward with a context built from the
 * node. Messages name the user's op (lt__node_name).
 *
 * What this is not: a second autograd; everything after the node is the
 * engine's (version checks, anomaly mode, broadcasting and casting of the
 * gradients, hooks).
 */
#include "autograd/custom.h"

#include "autograd/internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct custom_aux {
  const lt_custom_op *op;
  void *user;
  size_t state_size;
  unsigned char state[LT_CUSTOM_STATE_MAX];
} custom_aux;
_Static_assert(sizeof(custom_aux) <= LT__AUX_MAX, "custom_aux must fit a node's aux");

struct lt_custom_ctx {
  const lt_custom_op *op;
  const lt_node *node;  /* backward: the node; forward: NULL */
  int nin;
  bool needs[LT_CUSTOM_MAX_IN];
  int nsaved;
  lt_tensor *saved[LT_CUSTOM_MAX_SAVED]; /* forward: references held until recorded */
  size_t state_size;
  unsigned char state[LT_CUSTOM_STATE_MAX];
};

lt_tensor *lt_custom_apply(const lt_custom_op *op, int nin, lt_tensor *const *in, void *user) {
  if (!op) return lt__err(LT_ERR_NULL, "custom_apply: op is NULL"), NULL;
  if (!op->name || !op->forward)
    return lt__err(LT_ERR_NULL, "custom_apply: op '%s' has no %s", op->name ? op->name : "?",
                   op->name ? "forward" : "name"),
           NULL;
  if (op->nin < 1 || op->nin > LT_CUSTOM_MAX_IN || nin != op->nin || (nin && !in))
    return lt__err(LT_ERR_INVALID, "custom_apply: op '%s' takes %d inputs (1 to %d), given %d%s", op->name, op->nin,
                   LT_CUSTOM_MAX_IN, nin, nin && !in ? " but in is NULL" : ""),
           NULL;
  for (int i = 0; i < nin; i++)
    if (!in[i] && !(op->optional & (1u << i))) {
      char arg[16];
      snprintf(arg, sizeof arg, "in[%d]", i);
      return lt__err_null(op->name, arg), NULL;
    }
  lt_custom_ctx ctx = {.op = op, .nin = nin};
  const bool grad = lt_grad_enabled();
  for (int i = 0; i < nin; i++) ctx.needs[i] = grad && in[i] && in[i]->requires_grad;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *out = op->forward(&ctx, in, user);
  lt_set_grad_enabled(prev);
  lt_status s = LT_OK;
  if (!out) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    s = lt__err(lt_last_status() ? lt_last_status() : LT_ERR_INVALID, "%s: forward failed: %s", op->name,
                lt_last_status() ? msg : "it returned NULL without an error");
  } else {
    for (int i = 0; i < nin && s == LT_OK; i++)
      if (out == in[i])
        s = lt__err(LT_ERR_INVALID, "%s: forward returned its input %d: it must return a new tensor (lt_clone it, "
                    "or return a view made with lt_view)", op->name, i);
    if (s == LT_OK && out->grad_fn)
      s = lt__err(LT_ERR_INVALID, "%s: forward returned a tensor with a graph of its own (%s): it runs under no-grad "
                  "and must not return one of its inputs' graphs", op->name, LT__D(out));
  }
  if (s == LT_OK && lt__needs_grad(nin, (const lt_tensor *const *)in)) {
    s = lt__anomaly_check(op->name, out);
    custom_aux aux = {op, user, ctx.state_size, {0}};
    memcpy(aux.state, ctx.state, ctx.state_size);
    if (s == LT_OK)
      s = lt__record(out, LT__OP_custom, nin, (const lt_tensor *const *)in, ctx.nsaved,
                     (const lt_tensor *const *)ctx.saved, &aux, sizeof aux);
    if (s == LT_OK && out->grad_fn) out->grad_fn->name = op->name; /* its messages name the op */
  }
  for (int k = 0; k < ctx.nsaved; k++) lt__tensor_release(ctx.saved[k]); /* the references lt_custom_save took */
  if (s != LT_OK) {
    lt_scope_end(sc);
    return NULL;
  }
  return lt_scope_return(sc, out);
}

lt_status lt__bw_custom(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const custom_aux *a = (const custom_aux *)node->aux;
  if (!a->op->backward)
    return lt__err(LT_ERR_AUTOGRAD, "op '%s' has no backward (lt_custom_op.backward is NULL)", a->op->name);
  lt_custom_ctx ctx = {.op = a->op, .node = node, .nin = node->nin, .nsaved = node->nsaved,
                       .state_size = a->state_size};
  for (int i = 0; i < node->nin && i < LT_CUSTOM_MAX_IN; i++) ctx.needs[i] = lt__needs_input_grad(node, i);
  memcpy(ctx.state, a->state, a->state_size);
  return a->op->backward(&ctx, gout, gin, a->user);
}

lt_status lt_custom_save(lt_custom_ctx *ctx, const lt_tensor *t) {
  if (!ctx) return lt__err(LT_ERR_NULL, "custom_save: ctx is NULL");
  if (ctx->node) return lt__err(LT_ERR_INVALID, "%s: custom_save: only in forward", ctx->op->name);
  if (ctx->nsaved == LT_CUSTOM_MAX_SAVED)
    return lt__err(LT_ERR_INVALID, "%s: custom_save: %d tensors saved already (LT_CUSTOM_MAX_SAVED)", ctx->op->name,
                   LT_CUSTOM_MAX_SAVED);
  if (!t) return lt__err(LT_ERR_NULL, "%s: custom_save: t is NULL", ctx->op->name);
  ctx->saved[ctx->nsaved++] = lt_tensor_retain((lt_tensor *)t);
  return LT_OK;
}

lt_status lt_custom_set_state(lt_custom_ctx *ctx, const void *data, size_t size) {
  if (!ctx) return lt__err(LT_ERR_NULL, "custom_set_state: ctx is NULL");
  if (ctx->node) return lt__err(LT_ERR_INVALID, "%s: custom_set_state: only in forward", ctx->op->name);
  if (size > LT_CUSTOM_STATE_MAX || (size && !data))
    return lt__err(LT_ERR_INVALID, "%s: custom_set_state: %zu bytes%s (at most %d)", ctx->op->name, size,
                   size && !data ? " from NULL" : "", LT_CUSTOM_STATE_MAX);
  if (size) memcpy(ctx->state, data, size);
  ctx->state_size = size;
  return LT_OK;
}

const lt_tensor *lt_custom_saved(const lt_custom_ctx *ctx, int k) {
  if (!ctx || k < 0 || k >= ctx->nsaved) return NULL;
  return ctx->node ? ctx->node->saved[k] : ctx->saved[k];
}

int lt_custom_num_saved(const lt_custom_ctx *ctx) { return ctx ? ctx->nsaved : 0; }

const void *lt_custom_state(const lt_custom_ctx *ctx, size_t *size) {
  if (size) *size = ctx ? ctx->state_size : 0;
  return ctx && ctx->state_size ? ctx->state : NULL;
}

bool lt_custom_needs_input_grad(const lt_custom_ctx *ctx, int i) {
  return ctx && i >= 0 && i < ctx->nin && ctx->needs[i];
}

const char *lt_custom_name(const lt_custom_ctx *ctx) { return ctx ? ctx->op->name : NULL; }
