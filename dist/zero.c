/*
 * dist/zero.c: ZeRO-1 (lt_dist_zero): the optimizer state sharded by whole
 * parameters, each rank updating the parameters it owns, the updated ones
 * broadcast from their owner; the state gathered on rank 0 for a checkpoint
 * and released after it.
 *
 * What this is not: gradient averaging (dist/buckets.c), or sharding of
 * gradients or parameters (ZeRO-2/3).
 */
#include "dist/dist_internal.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "autograd/autograd.h"

#include <stdlib.h>
#include <string.h>

struct lt_dist_zero {
  lt_optimizer *o;  /* borrowed */
  int *first;       /* [N + 1]: rank r owns parameters [first[r], first[r + 1]); first[N]: all of them */
};

lt_dist_zero *lt_dist_zero_new(lt_optimizer *o) {
  const char *op = "dist_zero_new";
  if (!o) return lt__err_null(op, "o"), NULL;
  const int n = lt_optimizer_param_count(o), N = lt__dist_W.size;
  lt_dist_zero *z = calloc(1, sizeof *z);
  int *first = calloc((size_t)N + 1, sizeof *first);
  if (!z || !first) {
    free(z), free(first);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for %d ranks", op, N), NULL;
  }
  z->o = o, z->first = first;
  /* Parameter i (elements [a, a + m) of the total T) goes to the rank whose
   * 1/N of the elements holds its midpoint: floor(N (a + m/2) / T), which
   * never decreases with i, so every rank's parameters are contiguous. */
  double T = 0;
  for (int i = 0; i < n; i++) T += (double)lt_optimizer_param(o, i, NULL)->numel;
  double a = 0;
  int r = 0; /* the owner of parameter i */
  for (int i = 0; i < n; i++) {
    double m = (double)lt_optimizer_param(o, i, NULL)->numel;
    int own = T > 0 ? (int)((double)N * (a + m / 2) / T) : 0;
    if (own > N - 1) own = N - 1;
    while (r < own) first[++r] = i; /* ranks r+1 .. own start here (a rank may own nothing) */
    a += m;
  }
  while (r < N) first[++r] = n;
  lt_status s = lt_optimizer_set_shard(o, first[lt__dist_W.rank], first[lt__dist_W.rank + 1] - first[lt__dist_W.rank]);
  if (s != LT_OK) {
    lt_dist_zero_free(z);
    return NULL;
  }
  return z;
}

void lt_dist_zero_free(lt_dist_zero *z) {
  if (!z) return;
  lt_optimizer_set_shard(z->o, 0, z->first[lt__dist_W.size]); /* cannot fail: the whole range */
  free(z->first);
  free(z);
}

void lt_dist_zero_shard(const lt_dist_zero *z, int rank, int *first, int *count) {
  if (!z || rank < 0 || rank >= lt__dist_W.size) {
    *first = *count = 0;
    return;
  }
  *first = z->first[rank];
  *count = z->first[rank + 1] - z->first[rank];
}

lt_status lt_dist_zero_broadcast_params(lt_dist_zero *z) {
  if (!z) return lt__err_null("dist_zero_broadcast_params", "z");
  lt_status s = LT_OK;
  for (int r = 0; r < lt__dist_W.size && lt__dist_W.size > 1; r++)
    for (int i = z->first[r]; i < z->first[r + 1] && s == LT_OK; i++)
      s = lt__dist_bcast_tensor(lt_optimizer_param(z->o, i, NULL), r, "ZeRO-1: broadcast of the updated parameters");
  return s;
}

#ifdef LT_HAVE_MPI
/* Point to point: owner's bytes into rank 0's buf (other ranks do not call
 * it). The collectives' count (lt__dist_W.seq, which the timeout's messages compare
 * across ranks) is left as it was: only two ranks take part. */
static lt_status to_root(void *buf, size_t bytes, int owner, const char *what) {
  enum { TAG = 18 };
  const int64_t seq = lt__dist_W.seq;
  lt_status s = LT_OK;
  for (size_t off = 0; off < bytes && s == LT_OK; off += (size_t)1 << 30) {
    size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
    MPI_Request req;
    int rc = lt__dist_W.rank == owner ? MPI_Isend((char *)buf + off, (int)n, MPI_BYTE, 0, TAG, lt__dist_W.world, &req)
                             : MPI_Irecv((char *)buf + off, (int)n, MPI_BYTE, owner, TAG, lt__dist_W.world, &req);
    s = rc != MPI_SUCCESS ? lt__dist_mpi_err(rc, what) : lt__dist_wait_req(&req, what);
  }
  lt__dist_W.seq = seq;
  return s;
}

/* The state names an optimizer may hold, in the order they are sent. */
static const char *const zero_states[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "step"};
#endif

lt_status lt_dist_zero_gather_state(lt_dist_zero *z) {
  if (!z) return lt__err_null("dist_zero_gather_state", "z");
  lt_status s = LT_OK;
#ifdef LT_HAVE_MPI
  const char *what = "ZeRO-1: gathering the optimizer state to rank 0";
  for (int r = 1; r < lt__dist_W.size && s == LT_OK; r++) {
    if (lt__dist_W.rank != 0 && lt__dist_W.rank != r) continue; /* rank 0 and the owner only */
    for (int i = z->first[r]; i < z->first[r + 1] && s == LT_OK; i++) {
      const char *name;
      lt_optimizer_param(z->o, i, &name);
      int64_t has = 0; /* the owner made state for it (its first update came) */
      for (int k = 0; k < 4 && lt__dist_W.rank == r; k++) has |= lt_optimizer_state(z->o, name, zero_states[k]) != NULL;
      if ((s = to_root(&has, sizeof has, r, what)) != LT_OK || !has) continue;
      if (lt__dist_W.rank == 0 && (s = lt_optimizer_ensure_state(z->o, name)) != LT_OK) break;
      for (int k = 0; k < 4 && s == LT_OK; k++) {
        lt_tensor *t = lt_optimizer_state(z->o, name, zero_states[k]);
        if (!t) continue; /* the same kind, so the same set on rank 0 (ensure_state) as on the owner */
        s = to_root(t->data, (size_t)t->numel * lt_dtype_size(t->dtype), r, what);
      }
    }
  }
#endif
  return s;
}

lt_status lt_dist_zero_release_state(lt_dist_zero *z) {
  if (!z) return lt__err_null("dist_zero_release_state", "z");
  return lt_optimizer_set_shard(z->o, z->first[lt__dist_W.rank], z->first[lt__dist_W.rank + 1] - z->first[lt__dist_W.rank]);
}
