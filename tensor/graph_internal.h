/*
 * tensor/graph_internal.h: recording ops for autograd. The graph's nodes,
 * lt__record (called by every differentiable op's forward), their release,
 * the op names and anomaly mode live in the tensor core (tensor/graph.c);
 * autograd/ is the engine that runs the recorded graph backward, and its
 * table of backward functions (autograd/internal.h). Not installed.
 *
 * Writing a differentiable op (see tensor/elementwise.c for examples):
 *   1. add X(myop, nin, 1) to the .def file of its module;
 *   2. in the forward, after computing `out`:
 *          if (lt__record(out, LT__OP_myop, 2, (const lt_tensor *[]){a, b},
 *                         2, (const lt_tensor *[]){a, b}, &aux, sizeof aux) != LT_OK) {
 *              lt_tensor_free(out); return NULL;
 *          }
 *      lt__record does nothing (cheaply) unless grad mode is on and an input
 *      requires grad; use lt__needs_grad() first to skip preparing saved
 *      tensors that would not be used;
 *   3. define the backward beside the forward:
 *          lt_status lt__bw_myop(const lt_node *node, const lt_tensor *gout, lt_tensor **gin)
 *      For every input i with lt__needs_input_grad(node, i), set gin[i] to a
 *      new tensor holding dL/d(input i). It may have the broadcast (output)
 *      shape: the engine sums it back to the input's shape (lt__sum_to). It
 *      may have another float dtype: the engine casts it to the input's.
 *      The engine runs backward with grad mode off inside a scope, so
 *      temporaries need no free; gin[i] are taken out of the scope by the engine.
 *      Saved tensors are node->saved[k] (detached aliases; their storage
 *      version is checked by the engine before the call) and the op's
 *      parameters are in node->aux (copied at record time).
 */
#ifndef LT_TENSOR_GRAPH_INTERNAL_H
#define LT_TENSOR_GRAPH_INTERNAL_H

#include "tensor/tensor.h"
#include "op_registry.h"

#define LT__AUX_MAX 128

/* One input of a node: where its gradient goes. */
typedef struct lt__edge {
  lt_node *fn;        /* the input's grad_fn (one reference held), or NULL */
  lt_tensor *leaf;    /* the input itself if it is a leaf requiring grad (reference held), or NULL */
  lt_dtype dtype;     /* the input's dtype and shape, for lt__sum_to and casts */
  int ndim;
  int64_t shape[LT_MAX_DIMS];
} lt__edge;

struct lt_node {
  lt__op_id op;
  const char *name;             /* a custom op's name (static), or NULL: lt__op_names[op] */
  int refcount;
  int nin;
  lt__edge *in;                 /* nin edges */
  int nsaved;
  lt_tensor **saved;            /* detached aliases sharing storage */
  uint64_t *saved_version;      /* storage version at record time */
  bool released;                /* saved tensors freed after a backward */
  _Alignas(16) unsigned char aux[LT__AUX_MAX]; /* aligned: backwards cast it to their aux struct */
  size_t aux_size;
  /* the output this node produced (metadata only: no reference, no cycle) */
  lt_dtype out_dtype;
  int out_ndim;
  int64_t out_shape[LT_MAX_DIMS];
  /* a hook registered on the (non-leaf) output tensor, copied at record time */
  lt_grad_hook hook;
  void *hook_user;
  /* engine scratch */
  int64_t topo_mark;
  int pending;
  lt_tensor *grad_acc;
  lt_node *next_free_;          /* intrusive list used by lt__node_release */
};

typedef lt_status (*lt__backward_fn)(const lt_node *node, const lt_tensor *gout, lt_tensor **gin);

/* Prototypes of every backward named by the table. */
#define LT__OP_BW_DECL(id, nin, bw) \
  lt_status lt__bw_##id(const lt_node *node, const lt_tensor *gout, lt_tensor **gin);
LT_OP_TABLE(LT__OP_BW_DECL)
#undef LT__OP_BW_DECL

/* True if grad mode is on and any of the nin inputs requires grad. */
bool lt__needs_grad(int nin, const lt_tensor *const *in);

/* Record op as the grad_fn of out (see the recipe above). aux (aux_size <=
 * LT__AUX_MAX bytes) is copied. No-op returning LT_OK unless
 * lt__needs_grad(nin, in). On error (out of memory) out is left unchanged. */
lt_status lt__record(lt_tensor *out, lt__op_id op, int nin, const lt_tensor *const *in,
                     int nsaved, const lt_tensor *const *saved, const void *aux,
                     size_t aux_size);

/* Drop one reference to a node (NULL is a no-op); frees it, and iteratively
 * the chain it held, when the last goes (no recursion: graphs may be deep). */
void lt__node_release(lt_node *node);
lt_node *lt__node_retain(lt_node *node);

/* Every op's name, indexed by lt__op_id (from op_registry.h; tensor/graph.c). */
extern const char *const lt__op_names[LT__OP_COUNT];

/* The name of a node's op for messages: a custom op's own (set by
 * autograd/custom.c when it records), else the table's. */
static inline const char *lt__node_name(const lt_node *node) {
  return node->name ? node->name : lt__op_names[node->op];
}

/* Inside a backward: does input i need a gradient? */
static inline bool lt__needs_input_grad(const lt_node *node, int i) {
  return node->in[i].fn != NULL || node->in[i].leaf != NULL;
}

/* Anomaly mode (tensor/graph.c): LT_OK at once when off; otherwise
 * LT_ERR_NUMERIC naming `what` if t holds a NaN or an infinity. */
lt_status lt__anomaly_check(const char *what, const lt_tensor *t);

/* If t (float) holds a NaN or Inf, describes the first one (in row-major
 * order) in buf as "nan at [1,2]" and returns true. */
bool lt__find_nonfinite(const lt_tensor *t, char *buf, size_t size);

#endif /* LT_TENSOR_GRAPH_INTERNAL_H */
