/*
 * autograd/engine.c: the backward pass (lt_backward), the one helper that
 * undoes broadcasting (lt__sum_to), gradient hooks, lt_zero_grad and anomaly
 * mode.
 *
 * What this is: the machinery that runs the per-op backward functions
 * (lt__bw_<op>, each beside its forward) in reverse topological order and
 * accumulates their results. Recording the graph (lt__record, grad mode,
 * requires_grad, anomaly mode) is tensor/graph.c; the derivative rules are in the op
 * files; lt_gradcheck is autograd/gradcheck.c.
 *
 * What this is not: higher-order differentiation (every backward runs with
 * grad mode off) or a multi-threaded scheduler (one sweep on the caller's
 * thread; the kernels inside the backward functions are parallel).
 *
 * The sweep, in short (docs/autograd.md tells the long story):
 *   1. order: a depth-first post-order over the nodes reachable from the
 *      root through edges with a grad_fn, with an explicit stack (a chain of
 *      100,000 ops must not overflow the C stack). node->topo_mark holds the
 *      node's position + 1 while a backward runs, and 0 otherwise;
 *   2. pending: for every node, the number of consumers in the order;
 *   3. reverse sweep: the root first. A node's gradient (grad_acc, the sum of
 *      what its consumers sent) goes through its hook, then into its backward
 *      (grad mode off, inside a scope); each input's gradient is summed to the
 *      input's shape, cast to its dtype, and accumulated into the input node's
 *      grad_acc or into a per-leaf temporary;
 *   4. commit: leaf hooks run on each leaf's total, then the totals are added
 *      to leaf->grad (created if absent; the leaf owns it, never a scope).
 *      A leaf with a post-accumulate hook is committed during step 3 instead,
 *      as soon as its last consumer has run (a per-leaf count of the edges
 *      still to come), and its post-accumulate hook runs then;
 *   5. unless retain_graph, the saved tensors of every traversed node are
 *      released. On any error before step 4, everything made is freed and no
 *      leaf's grad and no node has changed (the graph can be retried).
 *
 * Ownership inside: every tensor the engine makes is taken out of whatever
 * scope the caller has open (lt_tensor_keep) and freed explicitly, so a
 * gradient is freed as soon as it has been consumed and memory does not grow
 * with the depth of the graph.
 */
#include "autograd/internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/iter_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same check on a gradient; what names where it came from. */
static lt_status anomaly_check_grad(const char *what, const lt_tensor *g) {
  if (!lt_anomaly_mode()) return LT_OK;
  char where[LT__DESC_SIZE];
  if (!lt__find_nonfinite(g, where, sizeof where)) return LT_OK;
  return lt__err(LT_ERR_NUMERIC, "anomaly mode: %s produced %s in the gradient %s", what, where,
                 LT__D(g));
}

/* ======================================================================== */
/* lt__sum_to, lt_zero_grad, hooks                                          */
/* ======================================================================== */

/* Take a freshly made tensor out of the caller's scope (if any): the engine
 * frees what it makes itself. NULL passes through. */
static lt_tensor *own(lt_tensor *t) { return t ? lt_tensor_keep(t) : NULL; }

static bool shape_eq(int na, const int64_t *a, int nb, const int64_t *b) {
  return na == nb && memcmp(a, b, sizeof(int64_t) * (size_t)na) == 0;
}

/* g: [*lead, *bshape] with bshape broadcast-compatible with shape (each dim
 * equal, or 1 in shape); returns new [*shape]. g may also have fewer dims
 * than shape when the missing leading dims are all 1. */
lt_tensor *lt__sum_to(const lt_tensor *g, int ndim, const int64_t *shape) {
  if (!g) return lt__err_null("sum_to", "g"), NULL;
  if (ndim < 0 || ndim > LT_MAX_DIMS || (ndim > 0 && !shape)) {
    lt__err(LT_ERR_INVALID, "sum_to: target rank %d is not in [0, %d]", ndim, LT_MAX_DIMS);
    return NULL;
  }
  int lead = g->ndim - ndim;
  int dims[LT_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < lead; i++) dims[nd++] = i;
  for (int i = lead < 0 ? -lead : 0; i < ndim; i++) {
    int64_t gs = g->shape[lead + i], ts = shape[i];
    if (gs == ts) continue;
    if (ts != 1) {
      lt__err(LT_ERR_SHAPE, "sum_to: gradient %s cannot be summed to %s: dim %d is %lld, not %lld or 1",
              LT__D(g), LT__S(ndim, shape), i, (long long)gs, (long long)ts);
      return NULL;
    }
    dims[nd++] = lead + i;
  }
  for (int i = 0; i < -lead; i++) {
    if (shape[i] != 1) {
      lt__err(LT_ERR_SHAPE, "sum_to: gradient %s cannot be summed to %s: it has fewer dims",
              LT__D(g), LT__S(ndim, shape));
      return NULL;
    }
  }
  if (nd == 0) return lt_reshape(g, ndim, shape);
  lt_tensor *s = lt_sum(g, nd, dims, true);
  if (!s) return NULL;
  lt_tensor *r = lt_reshape(s, ndim, shape);
  lt_tensor_free(s);
  return r;
}

void lt_zero_grad(lt_tensor *t) {
  if (!t) return;
  lt_tensor *g = t->grad;
  t->grad = NULL;
  lt_tensor_free(g);
}

lt_status lt_tensor_set_post_accumulate_hook(lt_tensor *t, lt_post_accumulate_hook hook, void *user) {
  if (!t) return lt__err_null("set_post_accumulate_hook", "t");
  if (hook && (t->grad_fn || !t->requires_grad))
    return lt__err(LT_ERR_AUTOGRAD,
                   "set_post_accumulate_hook: tensor %s is %s: only a leaf that requires grad accumulates "
                   "a .grad",
                   LT__D(t), t->grad_fn ? "not a leaf" : "a leaf that does not require grad");
  t->post_hook_ = hook;
  t->post_hook_user_ = hook ? user : NULL;
  return LT_OK;
}

lt_status lt_tensor_set_hook(lt_tensor *t, lt_grad_hook hook, void *user) {
  if (!t) return lt__err_null("set_hook", "t");
  if (hook && !t->requires_grad && !t->grad_fn)
    return lt__err(LT_ERR_AUTOGRAD,
                   "set_hook: tensor %s does not require grad, so a hook on it would never run "
                   "(call lt_requires_grad_ first)",
                   LT__D(t));
  t->hook_ = hook;
  t->hook_user_ = hook ? user : NULL;
  if (t->grad_fn) { /* a non-leaf: the engine finds the hook through the node */
    t->grad_fn->hook = hook;
    t->grad_fn->hook_user = hook ? user : NULL;
  }
  return LT_OK;
}

/* Run hook on g (owned); on a replacement, g is freed and *pg replaced. The
 * replacement must have `shape`; it is cast to dtype. who names the tensor in
 * messages. */
static lt_status apply_hook(lt_grad_hook hook, void *user, const lt_tensor *t, lt_tensor **pg,
                            bool *excl, lt_dtype dtype, int ndim, const int64_t *shape,
                            const char *who) {
  if (!hook) return LT_OK;
  lt_tensor *r = own(hook(t, *pg, user));
  if (!r) return LT_OK;
  if (r == *pg) /* a hook returned its argument: treat as "keep" */
    return LT_OK;
  if (!shape_eq(r->ndim, r->shape, ndim, shape) || !lt_dtype_is_floating(r->dtype)) {
    lt__err(LT_ERR_AUTOGRAD, "backward: the hook of %s returned a gradient %s for a tensor of shape %s %s",
            who, LT__D(r), LT__S(ndim, shape), lt_dtype_name(dtype));
    lt_tensor_free(r);
    return LT_ERR_AUTOGRAD;
  }
  if (r->dtype != dtype) {
    lt_tensor *c = own(lt_to_dtype(r, dtype));
    lt_tensor_free(r);
    if (!c) return lt_last_status();
    r = c;
  }
  lt_tensor_free(*pg);
  *pg = r;
  *excl = false; /* the hook may keep a reference to it */
  return LT_OK;
}

/* ======================================================================== */
/* Accumulation                                                             */
/* ======================================================================== */

/* *acc += g, consuming g. acc may be NULL (then it becomes g). *excl tells
 * whether *acc is a contiguous tensor whose storage only the engine sees, so
 * that it may be updated in place; gradients straight from a backward may be
 * views (of gout, of each other, expanded) and are copied on the first sum. */
static lt_status accumulate(lt_tensor **acc, bool *excl, lt_tensor *g, bool g_excl) {
  if (!*acc) {
    *acc = g;
    *excl = g_excl;
    return LT_OK;
  }
  if (*excl) {
    lt_status s = lt_add_(*acc, g);
    lt_tensor_free(g);
    return s;
  }
  lt_tensor *sum = own(lt_add(*acc, g));
  lt_tensor_free(g);
  if (!sum) return lt_last_status();
  lt_tensor_free(*acc);
  *acc = sum;
  *excl = true;
  return LT_OK;
}

/* Per-leaf temporary accumulators: a small open-addressing map keyed by the
 * leaf pointer, with entries kept in first-seen order (commit order and so
 * hook call order are deterministic). */
typedef struct leaf_acc {
  lt_tensor *leaf;
  lt_tensor *acc;
  bool excl;
  bool committed; /* a post-accumulate leaf committed during the sweep */
  bool due;       /* committed at the end: its post-accumulate hook is due */
  int64_t pending; /* post-accumulate leaves: edges from nodes not yet run */
} leaf_acc;

typedef struct leaf_map {
  leaf_acc *e;
  int64_t n, cap;
  int64_t *slot; /* index into e, or -1; nslot is a power of two */
  int64_t nslot;
} leaf_map;

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static lt_status leaf_map_rehash(leaf_map *m, int64_t nslot) {
  int64_t *s = malloc(sizeof(int64_t) * (size_t)nslot);
  if (!s) return lt__err(LT_ERR_NOMEM, "backward: out of memory for %lld leaf slots", (long long)nslot);
  for (int64_t i = 0; i < nslot; i++) s[i] = -1;
  for (int64_t k = 0; k < m->n; k++) {
    size_t h = ptr_hash(m->e[k].leaf) & (size_t)(nslot - 1);
    while (s[h] >= 0) h = (h + 1) & (size_t)(nslot - 1);
    s[h] = k;
  }
  free(m->slot);
  m->slot = s;
  m->nslot = nslot;
  return LT_OK;
}

static leaf_acc *leaf_map_get(leaf_map *m, lt_tensor *leaf) {
  if (2 * (m->n + 1) > m->nslot &&
      leaf_map_rehash(m, m->nslot ? 2 * m->nslot : 16) != LT_OK)
    return NULL;
  size_t h = ptr_hash(leaf) & (size_t)(m->nslot - 1);
  while (m->slot[h] >= 0) {
    if (m->e[m->slot[h]].leaf == leaf) return &m->e[m->slot[h]];
    h = (h + 1) & (size_t)(m->nslot - 1);
  }
  if (m->n == m->cap) {
    int64_t cap = m->cap ? 2 * m->cap : 8;
    leaf_acc *e = realloc(m->e, sizeof(leaf_acc) * (size_t)cap);
    if (!e) {
      lt__err(LT_ERR_NOMEM, "backward: out of memory for %lld leaf accumulators", (long long)cap);
      return NULL;
    }
    m->e = e;
    m->cap = cap;
  }
  m->e[m->n] = (leaf_acc){leaf, NULL, false, false, false, 0};
  m->slot[h] = m->n;
  return &m->e[m->n++];
}

static void leaf_map_free(leaf_map *m) {
  for (int64_t k = 0; k < m->n; k++) lt_tensor_free(m->e[k].acc);
  free(m->e);
  free(m->slot);
  *m = (leaf_map){0};
}

/* ======================================================================== */
/* lt_backward                                                              */
/* ======================================================================== */

typedef struct engine {
  lt_node **order;      /* post-order: inputs before consumers; the root last */
  int64_t norder;
  unsigned char *excl;  /* per order position: node's grad_acc may be updated in place */
  leaf_map leaves;
  lt_tensor **gin;      /* scratch, max nin entries */
} engine;

/* Build e->order from root by an iterative depth-first search. */
static lt_status topo_order(engine *e, lt_node *root) {
  typedef struct frame {
    lt_node *n;
    int next;
  } frame;
  int64_t cap = 64, sp = 0, ocap = 64;
  frame *st = malloc(sizeof(frame) * (size_t)cap);
  e->order = malloc(sizeof(lt_node *) * (size_t)ocap);
  if (!st || !e->order) {
    free(st);
    return lt__err(LT_ERR_NOMEM, "backward: out of memory for the graph traversal");
  }
  root->topo_mark = -1; /* on the stack */
  st[sp++] = (frame){root, 0};
  while (sp > 0) {
    frame *f = &st[sp - 1];
    if (f->next < f->n->nin) {
      lt_node *c = f->n->in[f->next++].fn;
      if (!c || c->topo_mark != 0) continue;
      if (sp == cap) {
        frame *ns = realloc(st, sizeof(frame) * (size_t)(cap * 2));
        if (!ns) goto nomem;
        st = ns;
        cap *= 2;
      }
      c->topo_mark = -1;
      st[sp++] = (frame){c, 0};
      continue;
    }
    if (e->norder == ocap) {
      lt_node **no = realloc(e->order, sizeof(lt_node *) * (size_t)(ocap * 2));
      if (!no) goto nomem;
      e->order = no;
      ocap *= 2;
    }
    e->order[e->norder] = f->n;
    f->n->topo_mark = ++e->norder;
    sp--;
  }
  free(st);
  return LT_OK;
nomem:
  /* Unmark what is still on the stack; the caller unmarks e->order. */
  for (int64_t i = 0; i < sp; i++) st[i].n->topo_mark = 0;
  free(st);
  return lt__err(LT_ERR_NOMEM, "backward: out of memory for the graph traversal");
}

/* Undo every engine mark, free every gradient still held. */
static void engine_cleanup(engine *e) {
  for (int64_t i = 0; i < e->norder; i++) {
    lt_node *n = e->order[i];
    lt_tensor_free(n->grad_acc);
    n->grad_acc = NULL;
    n->pending = 0;
    n->topo_mark = 0;
  }
  leaf_map_free(&e->leaves);
  free(e->order);
  free(e->excl);
  free(e->gin);
}

/* Sends gradient g (owned; g_excl as in accumulate) along edge ed. */
static lt_status send(engine *e, const lt__edge *ed, lt_tensor *g, bool g_excl) {
  if (!shape_eq(g->ndim, g->shape, ed->ndim, ed->shape)) {
    lt_tensor *r = own(lt__sum_to(g, ed->ndim, ed->shape));
    lt_tensor_free(g);
    if (!r) return lt_last_status();
    g = r;
    g_excl = false; /* may be a reshape view */
  }
  if (g->dtype != ed->dtype) {
    lt_tensor *r = own(lt_to_dtype(g, ed->dtype));
    lt_tensor_free(g);
    if (!r) return lt_last_status();
    g = r;
    g_excl = true;
  }
  if (ed->fn) {
    lt_node *c = ed->fn;
    bool x = e->excl[c->topo_mark - 1];
    lt_status s = accumulate(&c->grad_acc, &x, g, g_excl);
    e->excl[c->topo_mark - 1] = x;
    return s;
  }
  leaf_acc *a = leaf_map_get(&e->leaves, ed->leaf);
  if (!a) {
    lt_tensor_free(g);
    return lt_last_status();
  }
  return accumulate(&a->acc, &a->excl, g, g_excl);
}

static lt_status prepare_leaf(leaf_acc *a);
static lt_status commit_early(leaf_acc *a);

/* Runs one node: hook, checks, its backward, and sends the input gradients. */
static lt_status run_node(engine *e, lt_node *n) {
  const char *name = lt__node_name(n);
  LT_CHECK(n->pending == 0 && n->grad_acc != NULL);
  lt_tensor *gout = n->grad_acc;
  n->grad_acc = NULL;
  bool gx = e->excl[n->topo_mark - 1];
  lt_status s = apply_hook(n->hook, n->hook_user, NULL, &gout, &gx, n->out_dtype, n->out_ndim,
                           n->out_shape, "a non-leaf tensor");
  if (s != LT_OK) {
    lt_tensor_free(gout);
    return s;
  }
  lt__backward_fn bw = lt__ops[n->op].backward;
  if (!bw) {
    lt_tensor_free(gout);
    return lt__err(LT_ERR_AUTOGRAD, "backward: op '%s' has no backward", name);
  }
  if (n->released && n->nsaved > 0) {
    lt_tensor_free(gout);
    return lt__err(LT_ERR_AUTOGRAD,
                   "backward: trying to backward through the graph a second time: the tensors "
                   "saved by '%s' were already freed; pass retain_graph=true to the first "
                   "lt_backward if you need to backward twice",
                   name);
  }
  for (int k = 0; k < n->nsaved; k++) {
    if (!n->saved[k]) continue;
    uint64_t v = lt__version(n->saved[k]);
    if (v != n->saved_version[k]) {
      lt_tensor_free(gout);
      return lt__err(LT_ERR_AUTOGRAD,
                     "backward: one of the tensors saved by '%s' for backward was modified in "
                     "place (version %llu, expected %llu): saved tensor %d is %s",
                     name, (unsigned long long)v, (unsigned long long)n->saved_version[k], k,
                     LT__D(n->saved[k]));
    }
  }

  /* The backward itself: grad mode off, its temporaries in a scope. */
  lt_tensor **gin = e->gin;
  for (int i = 0; i < n->nin; i++) gin[i] = NULL;
  lt_scope *sc = lt_scope_begin();
  if (!sc) {
    lt_tensor_free(gout);
    return lt_last_status();
  }
  s = bw(n, gout, gin);
  bool aliased = false;
  for (int i = 0; i < n->nin; i++) {
    if (gin[i] == gout) { /* contract: every gin[i] is a new tensor */
      gin[i] = NULL;
      aliased = true;
    }
    own(gin[i]);
  }
  lt_scope_end(sc);
  lt_tensor_free(gout);
  if (s != LT_OK) {
    s = lt__err(s, "backward of '%s' failed: %s", name, lt_last_error());
    goto fail;
  }
  if (aliased) {
    s = lt__err(LT_ERR_AUTOGRAD, "backward of '%s' returned its gout as an input gradient "
                "(it must return new tensors)", name);
    goto fail;
  }
  for (int i = 0; i < n->nin; i++) {
    if (!gin[i] && lt__needs_input_grad(n, i)) {
      s = lt__err(LT_ERR_AUTOGRAD, "backward of '%s' returned no gradient for its input %d", name, i);
      goto fail;
    }
    if (gin[i] && !lt_dtype_is_floating(gin[i]->dtype)) {
      s = lt__err(LT_ERR_AUTOGRAD, "backward of '%s' returned a gradient %s for input %d: gradients must be float",
                  name, LT__D(gin[i]), i);
      goto fail;
    }
    if (gin[i] && lt_anomaly_mode()) {
      char what[96];
      snprintf(what, sizeof what, "the backward of op '%s' (input %d)", name, i);
      if ((s = anomaly_check_grad(what, gin[i])) != LT_OK) goto fail;
    }
  }
  for (int i = 0; i < n->nin; i++) {
    lt_tensor *g = gin[i];
    gin[i] = NULL;
    if (!g) continue;
    const lt__edge *ed = &n->in[i];
    if (!ed->fn && !(ed->leaf && ed->leaf->requires_grad)) {
      lt_tensor_free(g);
      continue;
    }
    if ((s = send(e, ed, g, false)) != LT_OK) goto fail;
  }
  for (int i = 0; i < n->nin; i++)
    if (n->in[i].fn) n->in[i].fn->pending--;
  /* A post-accumulate leaf whose last consumer this was: commit it now. */
  for (int i = 0; i < n->nin; i++) {
    lt_tensor *leaf = n->in[i].fn ? NULL : n->in[i].leaf;
    if (!leaf || !leaf->post_hook_ || !leaf->requires_grad) continue;
    leaf_acc *a = leaf_map_get(&e->leaves, leaf);
    if (!a) return lt_last_status();
    if (--a->pending == 0 && a->acc && (s = commit_early(a)) != LT_OK) return s;
  }
  return LT_OK;
fail:
  for (int i = 0; i < n->nin; i++) {
    lt_tensor_free(gin[i]);
    gin[i] = NULL;
  }
  return s;
}

/* Leaf commit, phase 1 (may fail, changes nothing visible): hooks, checks,
 * and a private contiguous copy for a leaf that has no .grad yet. */
static lt_status prepare_leaf(leaf_acc *a) {
  lt_tensor *leaf = a->leaf;
  char who[LT__DESC_SIZE + 16];
  snprintf(who, sizeof who, "leaf %s", LT__D(leaf));
  lt_status s = apply_hook(leaf->hook_, leaf->hook_user_, leaf, &a->acc, &a->excl, leaf->dtype,
                           leaf->ndim, leaf->shape, who);
  if (s != LT_OK) return s;
  if (leaf->grad) {
    if (!shape_eq(leaf->grad->ndim, leaf->grad->shape, a->acc->ndim, a->acc->shape) ||
        !lt_dtype_is_floating(leaf->grad->dtype))
      return lt__err(LT_ERR_AUTOGRAD, "backward: leaf %s has a .grad %s that does not match it",
                     LT__D(leaf), LT__D(leaf->grad));
    return LT_OK;
  }
  if (!a->excl && !lt__tensor_exclusive(a->acc)) {
    lt_tensor *c = own(lt_clone(a->acc));
    if (!c) return lt_last_status();
    lt_tensor_free(a->acc);
    a->acc = c;
    a->excl = true;
  }
  return LT_OK;
}

/* Adds a prepared leaf's total into its .grad (phase 2 of the commit). */
static lt_status add_to_leaf(leaf_acc *a) {
  if (a->leaf->grad) return lt_add_(a->leaf->grad, a->acc);
  a->leaf->grad = a->acc;
  a->acc = NULL;
  return LT_OK;
}

/* The whole commit of one post-accumulate leaf, during the sweep: hook,
 * checks, the sum into .grad, then its post-accumulate hook. */
static lt_status commit_early(leaf_acc *a) {
  lt_status s = prepare_leaf(a);
  if (s == LT_OK && lt_anomaly_mode()) {
    char what[LT__DESC_SIZE + 48];
    snprintf(what, sizeof what, "the sum (or the hook) of the gradients of leaf %s", LT__D(a->leaf));
    s = anomaly_check_grad(what, a->acc);
  }
  if (s == LT_OK) s = add_to_leaf(a);
  lt_tensor_free(a->acc);
  a->acc = NULL;
  a->committed = true;
  if (s == LT_OK) s = a->leaf->post_hook_(a->leaf, a->leaf->post_hook_user_);
  return s;
}

/* Set while a backward runs on this thread: the node marks (topo_mark,
 * pending, grad_acc) are in use, so a hook must not start another one. */
static _Thread_local bool tl_in_backward = false;

static lt_status backward_impl(lt_tensor *root, const lt_tensor *grad_output, bool retain_graph);

lt_status lt_backward(lt_tensor *root, const lt_tensor *grad_output, bool retain_graph) {
  if (tl_in_backward)
    return lt__err(LT_ERR_STATE, "backward: called while another backward is running on this "
                   "thread (from a hook?); hooks must not call lt_backward");
  tl_in_backward = true;
  lt_status s = backward_impl(root, grad_output, retain_graph);
  tl_in_backward = false;
  return s;
}

static lt_status backward_impl(lt_tensor *root, const lt_tensor *grad_output, bool retain_graph) {
  if (!root) return lt__err_null("backward", "root");
  if (!root->grad_fn && !root->requires_grad)
    return lt__err(LT_ERR_AUTOGRAD,
                   "backward: root %s does not require grad and has no grad_fn (was it computed "
                   "with grad mode off, or from inputs that do not require grad?)",
                   LT__D(root));
  if (!lt_dtype_is_floating(root->dtype))
    return lt__err(LT_ERR_DTYPE, "backward: root %s is not a float tensor", LT__D(root));
  if (!grad_output && root->numel != 1)
    return lt__err(LT_ERR_SHAPE,
                   "backward: grad_output may be NULL only for a one-element root; root is %s "
                   "(pass a grad_output of that shape)",
                   LT__D(root));
  if (grad_output && !shape_eq(grad_output->ndim, grad_output->shape, root->ndim, root->shape))
    return lt__err(LT_ERR_SHAPE, "backward: grad_output is %s but root is %s: shapes must match",
                   LT__D(grad_output), LT__D(root));
  if (grad_output && !lt_dtype_is_floating(grad_output->dtype))
    return lt__err(LT_ERR_DTYPE, "backward: grad_output %s must be a float tensor (root is %s)",
                   LT__D(grad_output), LT__D(root));

  bool prev_grad = lt_set_grad_enabled(false);
  engine e = {0};
  lt_status s = LT_OK;

  /* The root's gradient. */
  lt_tensor *g0;
  bool g0_excl;
  if (!grad_output) {
    g0 = own(lt_ones(root->dtype, root->ndim, root->shape));
    g0_excl = true;
  } else if (grad_output->dtype != root->dtype) {
    g0 = own(lt_to_dtype(grad_output, root->dtype));
    g0_excl = true;
  } else {
    g0 = own(lt_detach(grad_output)); /* shares the caller's storage: never written */
    g0_excl = false;
  }
  if (!g0) {
    s = lt_last_status();
    goto done;
  }
  if ((s = anomaly_check_grad("grad_output", g0)) != LT_OK) {
    lt_tensor_free(g0);
    goto done;
  }

  lt_node *rn = root->grad_fn;
  if (!rn) { /* the root is itself a leaf requiring grad */
    leaf_acc *a = leaf_map_get(&e.leaves, root);
    if (!a) {
      lt_tensor_free(g0);
      s = lt_last_status();
      goto done;
    }
    a->acc = g0;
    a->excl = g0_excl;
  } else {
    if ((s = topo_order(&e, rn)) != LT_OK) {
      lt_tensor_free(g0);
      goto done;
    }
    int maxin = 1;
    for (int64_t i = 0; i < e.norder; i++) {
      lt_node *n = e.order[i];
      if (n->nin > maxin) maxin = n->nin;
      for (int k = 0; k < n->nin; k++) {
        if (n->in[k].fn) n->in[k].fn->pending++;
        lt_tensor *leaf = n->in[k].fn ? NULL : n->in[k].leaf;
        if (leaf && leaf->post_hook_ && leaf->requires_grad) { /* counted for an early commit */
          leaf_acc *a = leaf_map_get(&e.leaves, leaf);
          if (!a) {
            lt_tensor_free(g0);
            s = lt_last_status();
            goto done;
          }
          a->pending++;
        }
      }
    }
    e.excl = calloc((size_t)e.norder, 1);
    e.gin = calloc((size_t)maxin, sizeof(lt_tensor *));
    if (!e.excl || !e.gin) {
      lt_tensor_free(g0);
      s = lt__err(LT_ERR_NOMEM, "backward: out of memory for %lld graph nodes", (long long)e.norder);
      goto done;
    }
    /* The root node receives g0 (the root's shape is its node's output shape). */
    rn->grad_acc = g0;
    e.excl[rn->topo_mark - 1] = g0_excl;
    for (int64_t i = e.norder - 1; i >= 0; i--)
      if ((s = run_node(&e, e.order[i])) != LT_OK) goto done;
  }

  /* Commit to the leaves: phase 1 may fail and changes nothing... */
  for (int64_t k = 0; k < e.leaves.n; k++)
    if (e.leaves.e[k].acc && (s = prepare_leaf(&e.leaves.e[k])) != LT_OK) goto done;
  for (int64_t k = 0; k < e.leaves.n && lt_anomaly_mode(); k++) {
    if (!e.leaves.e[k].acc) continue;
    char what[LT__DESC_SIZE + 48];
    snprintf(what, sizeof what, "the sum (or the hook) of the gradients of leaf %s",
             LT__D(e.leaves.e[k].leaf));
    if ((s = anomaly_check_grad(what, e.leaves.e[k].acc)) != LT_OK) goto done;
  }
  /* ...phase 2 only adds into validated, same-shape float tensors. */
  for (int64_t k = 0; k < e.leaves.n; k++) {
    leaf_acc *a = &e.leaves.e[k];
    if (!a->acc) continue; /* committed during the sweep */
    a->due = a->leaf->post_hook_ != NULL;
    lt_status s2 = add_to_leaf(a);
    if (s2 != LT_OK && s == LT_OK) s = s2; /* cannot happen for validated shapes */
  }
  /* Post-accumulate hooks not run during the sweep (the root a leaf itself). */
  for (int64_t k = 0; k < e.leaves.n && s == LT_OK; k++) {
    leaf_acc *a = &e.leaves.e[k];
    if (!a->due) continue;
    a->due = false;
    s = a->leaf->post_hook_(a->leaf, a->leaf->post_hook_user_);
  }
  if (!retain_graph) {
    for (int64_t i = 0; i < e.norder; i++) {
      lt_node *n = e.order[i];
      for (int k = 0; k < n->nsaved; k++) {
        lt_tensor_free(n->saved[k]);
        n->saved[k] = NULL;
      }
      n->released = true;
    }
  }

done:
  engine_cleanup(&e);
  lt_set_grad_enabled(prev_grad);
  return s;
}
