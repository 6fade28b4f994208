/*
 * dist/buckets.c: gradient averaging in buckets (lt_dist_grads): the
 * trainable parameters packed, in reverse store order, into buckets of about
 * lt_dist_bucket_bytes each; a bucket's MPI_Iallreduce starts as soon as its
 * last gradient is final (autograd's post-accumulate hooks, during the
 * backward), in bucket order on every rank, and lt_dist_grads_finish waits
 * for them all and averages.
 *
 * What this is not: the world, scalar collectives or parameter broadcasts
 * (dist/dist.c), or ZeRO-1 (dist/zero.c).
 */
#include "dist/dist_internal.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "autograd/autograd.h"

#include <stdlib.h>
#include <string.h>

typedef struct bucket {
  int first, count;   /* entries [first, first + count) of g->params */
  lt_dtype dtype;
  int64_t numel;
  void *buf;          /* numel elements of dtype */
  int nready;         /* parameters whose gradient is final (post-accumulate hook) */
  bool started;       /* its MPI_Iallreduce was started this step */
#ifdef LT_HAVE_MPI
  MPI_Request req;
#endif
} bucket;

/* The user pointer of one parameter's post-accumulate hook. */
typedef struct slot {
  lt_dist_grads *g;
  int bucket;
  bool ready;         /* its gradient is final this step */
} slot;

struct lt_dist_grads {
  lt_params *store;
  lt_tensor **params;  /* the trainable parameters, in reverse store order (borrowed) */
  slot *slots;         /* per entry of params */
  int n_params;
  bucket *buckets;
  int n_buckets;
  int next;            /* the next bucket to start: they start in index order on every rank */
  bool sync;           /* the hooks start buckets (else no_sync: gradients accumulate locally) */
  bool started_all;    /* lt_dist_grads_start ran since the last finish */
  bool hooked;         /* the post-accumulate hooks are registered (size > 1) */
  lt_status hook_err;  /* the first error of a hook this step */
  double t_start, wait_s, total_s, hook_s;
  int64_t early;       /* buckets started by the hooks, during backward (all steps) */
#ifdef LT_HAVE_MPI
  MPI_Comm comm;       /* a duplicate of the world: buckets never interleave with scalar collectives */
#endif
};

void lt_dist_grads_free(lt_dist_grads *g) {
  if (!g) return;
#ifdef LT_HAVE_MPI
  if (lt__dist_W.active) {
    for (int b = 0; b < g->next; b++) MPI_Wait(&g->buckets[b].req, MPI_STATUS_IGNORE);
    if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
  }
#endif
  if (g->hooked)
    for (int i = 0; i < g->n_params; i++)
      if (g->params[i]->post_hook_user_ == &g->slots[i]) lt_tensor_set_post_accumulate_hook(g->params[i], NULL, NULL);
  for (int b = 0; b < g->n_buckets; b++) free(g->buckets[b].buf);
  free(g->buckets);
  free(g->params);
  free(g->slots);
  free(g);
}

static size_t g_bucket_bytes = LT_DIST_BUCKET_BYTES;
void lt_dist_set_bucket_bytes(size_t bytes) { g_bucket_bytes = bytes ? bytes : LT_DIST_BUCKET_BYTES; }
size_t lt_dist_bucket_bytes(void) { return g_bucket_bytes; }

static lt_status ready_hook(lt_tensor *t, void *user);

lt_dist_grads *lt_dist_grads_new(lt_params *p, size_t bucket_bytes) {
  if (!p) return lt__err_null("dist_grads_new", "p"), NULL;
  if (bucket_bytes == 0) bucket_bytes = g_bucket_bytes;
  int np = lt_params_count(p);
  lt_dist_grads *g = calloc(1, sizeof *g);
#ifdef LT_HAVE_MPI
  if (g) g->comm = MPI_COMM_NULL;
#endif
  if (g) g->params = calloc((size_t)np + 1, sizeof *g->params);
  if (g) g->slots = calloc((size_t)np + 1, sizeof *g->slots);
  if (g) g->buckets = calloc((size_t)np + 1, sizeof *g->buckets);
  if (!g || !g->params || !g->slots || !g->buckets) {
    lt_dist_grads_free(g);
    return lt__err(LT_ERR_NOMEM, "dist_grads_new: out of memory"), NULL;
  }
  g->store = p;
  g->sync = true;
  /* Reverse store order: a model registers its parameters from input to
   * output, and backward makes their gradients final in about the reverse
   * order, so bucket 0 is ready first (PyTorch DDP does the same). */
  for (int i = np - 1; i >= 0; i--) {
    const lt_param *q = lt_params_at(p, i);
    if (q->flags & LT_PARAM_BUFFER || !q->value->requires_grad) continue;
    if (!lt_dtype_is_float(q->value->dtype)) continue;
    g->params[g->n_params++] = q->value;
  }
  /* Consecutive parameters of one dtype until a bucket holds bucket_bytes. */
  size_t bytes = 0;
  for (int i = 0; i < g->n_params; i++) {
    lt_tensor *t = g->params[i];
    bucket *cur = g->n_buckets ? &g->buckets[g->n_buckets - 1] : NULL;
    if (!cur || cur->dtype != t->dtype || bytes >= bucket_bytes) {
      cur = &g->buckets[g->n_buckets++];
      *cur = (bucket){.first = i, .dtype = t->dtype};
      bytes = 0;
    }
    cur->count++;
    cur->numel += t->numel;
    bytes += (size_t)t->numel * lt_dtype_size(t->dtype);
    g->slots[i] = (slot){g, g->n_buckets - 1, false};
  }
  for (int b = 0; b < g->n_buckets && lt__dist_W.size > 1; b++) {
    bucket *k = &g->buckets[b];
    if (k->numel > INT32_MAX) {
      lt_dist_grads_free(g);
      return lt__err(LT_ERR_OVERFLOW, "dist_grads_new: a bucket of %lld elements: MPI counts are int (at most %d); "
                     "split the parameter", (long long)k->numel, INT32_MAX), NULL;
    }
    k->buf = malloc((size_t)k->numel * lt_dtype_size(k->dtype) + 1);
    if (!k->buf) {
      lt_dist_grads_free(g);
      return lt__err(LT_ERR_NOMEM, "dist_grads_new: out of memory for a bucket of %lld elements", (long long)k->numel), NULL;
    }
  }
#ifdef LT_HAVE_MPI
  if (lt__dist_W.size > 1) {
    int rc = MPI_Comm_dup(lt__dist_W.world, &g->comm);
    if (rc != MPI_SUCCESS) {
      g->comm = MPI_COMM_NULL;
      lt_dist_grads_free(g);
      return lt__dist_mpi_err(rc, "dist_grads_new: MPI_Comm_dup"), NULL;
    }
    MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    for (int i = 0; i < g->n_params; i++)
      if (lt_tensor_set_post_accumulate_hook(g->params[i], ready_hook, &g->slots[i]) != LT_OK) {
        lt_dist_grads_free(g);
        return NULL;
      }
    g->hooked = true;
  }
#endif
  return g;
}

int lt_dist_grads_buckets(const lt_dist_grads *g) { return g ? g->n_buckets : 0; }

void lt_dist_grads_times(const lt_dist_grads *g, double *wait_seconds, double *total_seconds) {
  if (wait_seconds) *wait_seconds = g ? g->wait_s : 0;
  if (total_seconds) *total_seconds = g ? g->total_s : 0;
}

void lt_dist_grads_overlap(const lt_dist_grads *g, int64_t *early_buckets, double *hook_seconds) {
  if (early_buckets) *early_buckets = g ? g->early : 0;
  if (hook_seconds) *hook_seconds = g ? g->hook_s : 0;
}

void lt_dist_grads_set_sync(lt_dist_grads *g, bool sync) {
  if (g) g->sync = sync;
}

#ifdef LT_HAVE_MPI
/* Packs bucket b's gradients into its buffer and starts its MPI_Iallreduce. */
static lt_status start_bucket(lt_dist_grads *g, int b) {
  bucket *k = &g->buckets[b];
  size_t es = lt_dtype_size(k->dtype);
  char *dst = k->buf;
  if (g->next == 0) g->t_start = lt_monotonic_seconds();
  for (int i = k->first; i < k->first + k->count; i++) {
    lt_tensor *t = g->params[i];
    size_t n = (size_t)t->numel * es;
    if (!t->grad) {
      memset(dst, 0, n);
    } else {
      lt_tensor *tmp = NULL;
      const lt_tensor *c = lt__as_contig(t->grad, k->dtype, &tmp);
      if (!c) return lt_last_status(); /* this rank cannot go on: the job ends when the program exits */
      memcpy(dst, c->data, n);
      lt_tensor_free(tmp);
    }
    dst += n;
  }
  int rc = MPI_Iallreduce(MPI_IN_PLACE, k->buf, (int)k->numel, k->dtype == LT_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT,
                          MPI_SUM, g->comm, &k->req);
  if (rc != MPI_SUCCESS) return lt__dist_mpi_err(rc, "gradient allreduce (MPI_Iallreduce)");
  k->started = true;
  g->next = b + 1;
  return LT_OK;
}

/* Lets MPI move the buckets in flight (libnbc advances a schedule only inside
 * MPI calls): one MPI_Test per unfinished bucket. */
static void progress(lt_dist_grads *g) {
  for (int b = 0; b < g->next; b++) {
    if (g->buckets[b].req == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&g->buckets[b].req, &done, MPI_STATUS_IGNORE); /* done: req becomes MPI_REQUEST_NULL */
  }
}
#endif

/* The post-accumulate hook of every parameter (autograd.h): its gradient is
 * final; start every bucket, in index order, whose gradients all are. */
#ifndef LT_HAVE_MPI
__attribute__((unused)) /* registered only with several ranks, so only in a build with MPI */
#endif
static lt_status ready_hook(lt_tensor *t, void *user) {
  slot *sl = user;
  lt_dist_grads *g = sl->g;
  if (!g->sync || lt__dist_W.size == 1) return LT_OK;
  double t0 = lt_monotonic_seconds();
  lt_status s = LT_OK;
  if (sl->ready) {
    s = lt__err(LT_ERR_STATE, "dist_grads: the gradient of %s became final twice before lt_dist_grads_finish "
                "(a second backward: turn lt_dist_grads_set_sync off for the micro-batches before the last)",
                LT__D(t));
  } else {
    sl->ready = true;
    g->buckets[sl->bucket].nready++;
#ifdef LT_HAVE_MPI
    while (s == LT_OK && g->next < g->n_buckets && g->buckets[g->next].nready == g->buckets[g->next].count) {
      s = start_bucket(g, g->next);
      if (s == LT_OK) g->early++;
    }
    progress(g);
#endif
  }
  if (s != LT_OK && g->hook_err == LT_OK) g->hook_err = s;
  g->hook_s += lt_monotonic_seconds() - t0;
  return s;
}

lt_status lt_dist_grads_start(lt_dist_grads *g) {
  if (!g) return lt__err_null("dist_grads_start", "g");
  if (g->started_all) return lt__err(LT_ERR_STATE, "dist_grads_start: a reduction is already in flight (call finish)");
  if (lt__dist_W.size == 1) return LT_OK;
  g->started_all = true;
#ifdef LT_HAVE_MPI
  while (g->next < g->n_buckets) {
    lt_status s = start_bucket(g, g->next);
    if (s != LT_OK) return s;
  }
#endif
  return LT_OK;
}

lt_status lt_dist_grads_finish(lt_dist_grads *g) {
  if (!g) return lt__err_null("dist_grads_finish", "g");
  if (lt__dist_W.size == 1) return LT_OK;
  bool any_ready = false;
  for (int b = 0; b < g->n_buckets && !any_ready; b++) any_ready = g->buckets[b].nready > 0;
  if (!g->started_all && !any_ready)
    return lt__err(LT_ERR_STATE, "dist_grads_finish: no reduction in flight (call start, or run a backward first)");
  lt_status s = LT_OK;
#ifdef LT_HAVE_MPI
  double t0 = lt_monotonic_seconds();
  while (g->next < g->n_buckets && s == LT_OK) s = start_bucket(g, g->next); /* unused parameters, a skipped backward */
  for (int b = 0; b < g->next && s == LT_OK; b++) s = lt__dist_wait_req(&g->buckets[b].req, "gradient allreduce");
  g->wait_s += lt_monotonic_seconds() - t0;
  if (s == LT_OK && g->hook_err != LT_OK)
    s = lt__err(g->hook_err, "dist_grads_finish: a gradient hook failed during backward");
  for (int b = 0; b < g->n_buckets && s == LT_OK; b++) {
    bucket *k = &g->buckets[b];
    size_t es = lt_dtype_size(k->dtype);
    const char *src = k->buf;
    for (int i = k->first; i < k->first + k->count && s == LT_OK; i++) {
      lt_tensor *t = g->params[i];
      if (!t->grad || !lt_is_contiguous(t->grad) || t->grad->dtype != k->dtype || lt__storage_shared(t->grad)) {
        lt_tensor *z = lt_tensor_keep(lt_zeros(t->dtype, t->ndim, t->shape)); /* the leaf owns its .grad */
        if (!z) {
          s = lt_last_status();
          break;
        }
        lt_zero_grad(t);
        t->grad = z;
      }
      if (k->dtype == LT_DTYPE_F64) {
        const double *x = (const double *)src;
        double *y = t->grad->data;
        const double n = (double)lt__dist_W.size;
        for (int64_t j = 0; j < t->numel; j++) y[j] = x[j] / n;
      } else {
        const float *x = (const float *)src;
        float *y = t->grad->data;
        const float n = (float)lt__dist_W.size;
        for (int64_t j = 0; j < t->numel; j++) y[j] = x[j] / n;
      }
      lt__bump_version(t->grad);
      src += (size_t)t->numel * es;
    }
  }
  g->total_s += lt_monotonic_seconds() - g->t_start;
#endif
  /* The next step starts from scratch. */
  for (int b = 0; b < g->n_buckets; b++) g->buckets[b].nready = 0, g->buckets[b].started = false;
  for (int i = 0; i < g->n_params; i++) g->slots[i].ready = false;
  g->next = 0;
  g->started_all = false;
  g->hook_err = LT_OK;
  return s;
}
