/*
 * autograd/recompute.c: activation checkpointing (autograd/recompute.h).
 *
 * A region is the set of nodes recorded while its function ran. Each keeps
 * a pointer to the region (node->rc, counted: the region lives while one of
 * its nodes does) and its place in recording order (rc_index). At the end
 * of the first run every node of the region drops its saved tensors
 * (rc_dropped). The engine (autograd/engine.c, run_node) calls
 * lt__rc_restore on the first dropped node it reaches: the function runs
 * again on the region's inputs, recording a second graph whose nodes are
 * collected in order and matched one to one with the first (same op, same
 * counts); the saved tensors move from each new node to its twin, and the
 * second graph is freed. After a node's backward the engine drops them
 * again (lt__rc_drop) unless the graph is retained.
 *
 * What this is not: a second engine. The gradients flow through the nodes
 * of the first run, so hooks, accumulation order, version checks and
 * anomaly mode are the engine's as usual.
 */
#include "autograd/recompute.h"

#include "autograd/internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lt__rc_region {
  int refcount;            /* the nodes pointing here, plus the first run while it lasts */
  const char *name;
  lt_recompute_fn fn;
  void *user;              /* borrowed, or user_copy */
  unsigned char *user_copy;
  lt_generator *gen;       /* borrowed, or NULL */
  lt_generator_state gen_state; /* gen's state when the first run began */
  lt_dtype autocast;       /* the autocast mode of the first run */
  int n;
  lt_tensor **in;          /* [n] detached aliases of the inputs, each requiring grad as its input did */
  uint64_t *in_version;    /* [n] their storage versions after the first run */
  lt_node **nodes;         /* recording order; NULL where a node has been freed (not counted) */
  int64_t nnodes, cap;
};

/* Where lt__record sends the nodes it makes while a region runs: into the
 * region (first run), or into a list of new nodes held for matching
 * (second run). */
typedef struct rc_recorder {
  lt__rc_region *region; /* first run, or NULL */
  lt_node **list;        /* second run: references held */
  int64_t n, cap;
} rc_recorder;

static _Thread_local rc_recorder *tl_rec = NULL;

static bool grow(lt_node ***a, int64_t *cap, int64_t need) {
  if (need <= *cap) return true;
  int64_t c = *cap ? 2 * *cap : 32;
  lt_node **p = realloc(*a, sizeof **a * (size_t)c);
  if (!p) return false;
  *a = p;
  *cap = c;
  return true;
}

static void region_release(lt__rc_region *r) {
  if (!r || --r->refcount > 0) return;
  for (int i = 0; i < r->n; i++) lt_tensor_free(r->in[i]);
  free(r->in);
  free(r->in_version);
  free(r->nodes);
  free(r->user_copy);
  free(r);
}

lt_status lt__rc_on_record(lt_node *node) {
  rc_recorder *rec = tl_rec;
  if (!rec) return LT_OK;
  if (rec->region) {
    lt__rc_region *r = rec->region;
    if (!grow(&r->nodes, &r->cap, r->nnodes + 1))
      return lt__err(LT_ERR_NOMEM, "recompute '%s': out of memory for %lld nodes", r->name, (long long)r->nnodes + 1);
    node->rc = r;
    node->rc_index = r->nnodes;
    r->nodes[r->nnodes++] = node;
    r->refcount++;
    return LT_OK;
  }
  if (!grow(&rec->list, &rec->cap, rec->n + 1))
    return lt__err(LT_ERR_NOMEM, "recompute: out of memory for %lld nodes of the second run", (long long)rec->n + 1);
  rec->list[rec->n++] = lt__node_retain(node);
  return LT_OK;
}

void lt__rc_on_free(lt_node *node) {
  lt__rc_region *r = node->rc;
  if (!r) return;
  r->nodes[node->rc_index] = NULL;
  node->rc = NULL;
  region_release(r);
}

void lt__rc_drop(lt_node *node) {
  for (int k = 0; k < node->nsaved; k++) {
    lt_tensor_free(node->saved[k]);
    node->saved[k] = NULL;
  }
  node->rc_dropped = true;
}

lt_status lt__rc_restore(lt_node *node) {
  lt__rc_region *r = node->rc;
  LT_CHECK(r != NULL);
  for (int i = 0; i < r->n; i++) {
    const uint64_t v = lt__version(r->in[i]);
    if (v != r->in_version[i])
      return lt__err(LT_ERR_AUTOGRAD,
                     "recompute '%s': input %d %s was modified in place since the forward (version %llu, expected "
                     "%llu): the second run would not see the first run's values",
                     r->name, i, LT__D(r->in[i]), (unsigned long long)v, (unsigned long long)r->in_version[i]);
  }
  lt_scope *sc = lt_scope_begin();
  if (!sc) return lt_last_status();
  const lt_generator_state now = r->gen ? lt_generator_get_state(r->gen) : (lt_generator_state){0};
  if (r->gen) lt_generator_set_state(r->gen, r->gen_state);
  const lt_dtype prev_ac = lt_set_autocast(r->autocast);
  const bool prev_grad = lt_set_grad_enabled(true);
  rc_recorder rec = {0}, *outer = tl_rec;
  tl_rec = &rec;
  lt_tensor *out = r->fn(r->n, r->in, r->user);
  tl_rec = outer;
  lt_set_grad_enabled(prev_grad);
  lt_set_autocast(prev_ac);
  if (r->gen) lt_generator_set_state(r->gen, now);
  lt_status s = LT_OK;
  if (!out) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lt_last_status() ? lt_last_error() : "its function returned NULL without an error");
    s = lt__err(lt_last_status() ? lt_last_status() : LT_ERR_AUTOGRAD, "recompute '%s': the second run failed: %s",
                r->name, msg);
  } else if (rec.n != r->nnodes) {
    s = lt__err(LT_ERR_AUTOGRAD,
                "recompute '%s': the second run recorded %lld ops, the first %lld: the function must record the same "
                "graph each time (deterministic, reading no state that changed since the forward)",
                r->name, (long long)rec.n, (long long)r->nnodes);
  }
  for (int64_t i = 0; i < rec.n && s == LT_OK; i++) {
    const lt_node *a = r->nodes[i], *b = rec.list[i];
    if (a && (a->op != b->op || a->nin != b->nin || a->nsaved != b->nsaved))
      s = lt__err(LT_ERR_AUTOGRAD,
                  "recompute '%s': op %lld of the second run is '%s' (%d inputs, %d saved), of the first '%s' (%d "
                  "inputs, %d saved): the function must record the same graph each time",
                  r->name, (long long)i, lt__node_name(b), b->nin, b->nsaved, lt__node_name(a), a->nin, a->nsaved);
  }
  for (int64_t i = 0; i < rec.n && s == LT_OK; i++) {
    lt_node *a = r->nodes[i], *b = rec.list[i];
    if (!a || !a->rc_dropped) continue;
    for (int k = 0; k < a->nsaved; k++) {
      a->saved[k] = b->saved[k];
      a->saved_version[k] = b->saved_version[k];
      b->saved[k] = NULL;
    }
    a->rc_dropped = false;
  }
  for (int64_t i = 0; i < rec.n; i++) lt__node_release(rec.list[i]);
  free(rec.list);
  lt_scope_end(sc); /* the second run's output, intermediates and graph */
  return s;
}

lt_tensor *lt_recompute(lt_recompute_fn fn, int n, lt_tensor *const *in, void *user, const lt_recompute_opts *opts) {
  const lt_recompute_opts o = opts ? *opts : (lt_recompute_opts){0};
  const char *name = o.name ? o.name : "recompute";
  if (!fn) return lt__err(LT_ERR_NULL, "recompute '%s': fn is NULL", name), NULL;
  if (n < 0 || (n > 0 && !in))
    return lt__err(LT_ERR_INVALID, "recompute '%s': %d inputs%s", name, n, n > 0 ? " but in is NULL" : ""), NULL;
  for (int i = 0; i < n; i++)
    if (!in[i]) {
      char arg[16];
      snprintf(arg, sizeof arg, "in[%d]", i);
      return lt__err_null(name, arg), NULL;
    }
  if (!lt_grad_enabled() || tl_rec) return fn(n, in, user); /* nothing to record, or inside a region already */

  lt__rc_region *r = calloc(1, sizeof *r);
  if (r) {
    r->in = calloc((size_t)(n ? n : 1), sizeof *r->in);
    r->in_version = calloc((size_t)(n ? n : 1), sizeof *r->in_version);
    r->user_copy = o.user_size ? malloc(o.user_size) : NULL;
  }
  if (!r || !r->in || !r->in_version || (o.user_size && !r->user_copy)) {
    if (r) free(r->in), free(r->in_version), free(r->user_copy);
    free(r);
    return lt__err(LT_ERR_NOMEM, "recompute '%s': out of memory", name), NULL;
  }
  *r = (lt__rc_region){.refcount = 1, .name = name, .fn = fn, .user = user, .user_copy = r->user_copy,
                       .gen = o.gen, .autocast = lt_autocast_dtype(), .in = r->in, .in_version = r->in_version};
  if (o.user_size) {
    memcpy(r->user_copy, user, o.user_size);
    r->user = r->user_copy;
  }
  for (; r->n < n; r->n++) {
    const lt_tensor *t = in[r->n];
    if (!(r->in[r->n] = lt_tensor_keep(lt__view_of(t, t->ndim, t->shape, t->stride, t->offset)))) {
      region_release(r);
      return NULL;
    }
    r->in[r->n]->requires_grad = t->requires_grad;
  }
  if (o.gen) r->gen_state = lt_generator_get_state(o.gen);

  lt_scope *sc = lt_scope_begin();
  if (!sc) {
    region_release(r);
    return NULL;
  }
  rc_recorder rec = {.region = r};
  tl_rec = &rec;
  lt_tensor *out = fn(n, in, r->user);
  tl_rec = NULL;
  lt_status s = LT_OK;
  if (!out) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lt_last_status() ? lt_last_error() : "its function returned NULL without an error");
    s = lt__err(lt_last_status() ? lt_last_status() : LT_ERR_INVALID, "recompute '%s': %s", name, msg);
  }
  for (int i = 0; i < n && s == LT_OK; i++)
    if (out == in[i])
      s = lt__err(LT_ERR_INVALID, "recompute '%s': the function returned its input %d: it must return a new tensor",
                  name, i);
  if (s != LT_OK) {
    lt_scope_end(sc);
    region_release(r);
    return NULL;
  }
  for (int i = 0; i < n; i++) r->in_version[i] = lt__version(r->in[i]);
  for (int64_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i]) lt__rc_drop(r->nodes[i]);
  out = lt_scope_return(sc, out);
  region_release(r); /* the first run's reference: the region now lives with its nodes */
  return out;
}
