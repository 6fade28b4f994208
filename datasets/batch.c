/*
 * datasets/batch.c: batching for seq2seq (teacher forcing, padding, masks,
 * length bucketing) and language modelling (contiguous chunks), with shuffling
 * from a seeded lt_generator and a resumable loader position.
 *
 * Both loaders share one "plan": the order of the items (examples or chunks)
 * for the current epoch and where each batch starts in it. A plan is a pure
 * function of the generator state at the start of the epoch, so a position is
 * (epoch, batches done, that state): restoring it draws the same order again
 * and the next batches are bit-identical.
 *
 * What this is not: a prefetching or multi-threaded loader (making a batch is
 * a few copies, negligible next to a Transformer step), or a sampler with
 * weights. Batches are new tensors each time, not reused buffers.
 */
#include "datasets/datasets.h"
#include "datasets/datasets_internal.h"
#include "tensor/error_internal.h"

#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Collation                                                                */
/* ======================================================================== */

void lt_seq2seq_batch_free(lt_seq2seq_batch *b) {
  if (!b) return;
  lt_tensor_free(b->src);
  lt_tensor_free(b->src_mask);
  lt_tensor_free(b->tgt_in);
  lt_tensor_free(b->tgt_mask);
  lt_tensor_free(b->labels);
  *b = (lt_seq2seq_batch){0};
}

lt_status lt_seq2seq_collate(const lt_seq_pairs *data, const int64_t *idx, int64_t n, lt_seq2seq_batch *out) {
  const char *op = "seq2seq_collate";
  if (!data) return lt__err(LT_ERR_NULL, "%s: data is NULL", op);
  if (!idx || !out) return lt__err(LT_ERR_NULL, "%s: idx and out must not be NULL", op);
  int64_t count = lt_seq_pairs_count(data);
  if (n < 1) return lt__err(LT_ERR_INVALID, "%s: n is %lld, must be >= 1", op, (long long)n);
  int64_t S = 0, T = 0;
  for (int64_t b = 0; b < n; b++) {
    if (idx[b] < 0 || idx[b] >= count)
      return lt__err(LT_ERR_INDEX, "%s: idx[%lld] is %lld, outside [0, %lld)", op, (long long)b,
                     (long long)idx[b], (long long)count);
    int64_t sl, tl;
    lt_status st = lt_seq_pairs_get(data, idx[b], NULL, &sl, NULL, &tl);
    LT_CHECK(st == LT_OK);
    if (sl > S) S = sl;
    if (tl + 1 > T) T = tl + 1;
  }
  lt_seq2seq_batch r = {0};
  r.src = lt_empty(LT_DTYPE_I64, 2, (int64_t[]){n, S});
  r.src_mask = lt_empty(LT_DTYPE_BOOL, 2, (int64_t[]){n, S});
  r.tgt_in = lt_empty(LT_DTYPE_I64, 2, (int64_t[]){n, T});
  r.tgt_mask = lt_empty(LT_DTYPE_BOOL, 2, (int64_t[]){n, T});
  r.labels = lt_empty(LT_DTYPE_I64, 2, (int64_t[]){n, T});
  if (!r.src || !r.src_mask || !r.tgt_in || !r.tgt_mask || !r.labels) {
    lt_seq2seq_batch_free(&r);
    return lt_last_status();
  }
  int64_t *src = r.src->data, *tin = r.tgt_in->data, *lab = r.labels->data;
  const lt_special_ids sp = lt_seq_pairs_special_ids(data);
  bool *sm = r.src_mask->data, *tm = r.tgt_mask->data;
  for (int64_t b = 0; b < n; b++) {
    const int64_t *s, *t;
    int64_t sl, tl;
    lt_seq_pairs_get(data, idx[b], &s, &sl, &t, &tl);
    int64_t *srow = src + b * S, *irow = tin + b * T, *lrow = lab + b * T;
    bool *smrow = sm + b * S, *tmrow = tm + b * T;
    for (int64_t j = 0; j < S; j++) {
      srow[j] = j < sl ? s[j] : sp.pad;
      smrow[j] = j >= sl;
    }
    /* The full decoder sequence is <bos> t[0] .. t[tl-1] <eos> (tl + 2 ids):
     * the input drops its last id, the labels drop its first. */
    for (int64_t j = 0; j < T; j++) {
      bool real = j <= tl;
      irow[j] = !real ? sp.pad : j == 0 ? sp.bos : t[j - 1];
      lrow[j] = !real ? LT_IGNORE_INDEX : j < tl ? t[j] : sp.eos;
      tmrow[j] = !real;
    }
    r.n_tokens += tl + 1;
  }
  *out = r;
  return LT_OK;
}

/* ======================================================================== */
/* The epoch plan shared by both loaders                                    */
/* ======================================================================== */

typedef struct {
  int64_t n;          /* items (examples or chunks) */
  int64_t B;
  bool shuffle, drop_last;
  int64_t bucket;     /* batches per bucketing window; <= 1: off */
  const int64_t *k1, *k2; /* sort keys for bucketing (or NULL) */
  lt_generator *gen;
  int64_t nbatches;
  /* the current epoch */
  int64_t *order;     /* [n] items in epoch order */
  int64_t *start;     /* [nbatches] where each batch starts in order */
  int64_t epoch, index;
  lt_generator_state epoch_state;
  uint64_t fingerprint;
} plan;

uint64_t lt__fnv_mix(uint64_t h, uint64_t v) {
  for (int k = 0; k < 8; k++) h = (h ^ ((v >> (8 * k)) & 0xff)) * 1099511628211ULL;
  return h;
}

static void plan_free(plan *p) {
  lt_generator_free(p->gen);
  free(p->order);
  free(p->start);
}

/* Item, its position in the window (for stability) and its keys. */
typedef struct {
  int64_t item, pos, k1, k2;
} sortent;

static int cmp_sortent(const void *a, const void *b) {
  const sortent *x = a, *y = b;
  if (x->k1 != y->k1) return x->k1 < y->k1 ? -1 : 1;
  if (x->k2 != y->k2) return x->k2 < y->k2 ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Reads a fresh i64 permutation of [0, n) from the generator into dst. */
lt_status lt__draw_perm(lt_generator *g, int64_t n, int64_t *dst) {
  lt_tensor *perm = lt_randperm(g, n);
  if (!perm) return lt_last_status();
  lt_status st = lt_tensor_read(perm, LT_DTYPE_I64, dst, n);
  lt_tensor_free(perm);
  return st;
}

/* Draws the order of an epoch from the generator's current state into new
 * arrays *order and *start. On failure nothing is allocated and the generator
 * is back where it was. */
static lt_status plan_draw(plan *p, int64_t **order_out, int64_t **start_out) {
  const char *op = "loader";
  lt_generator_state before = lt_generator_get_state(p->gen);
  int64_t *order = malloc((size_t)p->n * sizeof *order);
  int64_t *start = malloc((size_t)p->nbatches * sizeof *start);
  int64_t *perm = NULL;
  sortent *tmp = NULL;
  lt_status st = LT_OK;
  if (!order || !start) {
    st = lt__err(LT_ERR_NOMEM, "%s: out of memory for an epoch of %lld items", op, (long long)p->n);
    goto fail;
  }
  if (p->shuffle) {
    if ((st = lt__draw_perm(p->gen, p->n, order)) != LT_OK) goto fail;
  } else {
    for (int64_t i = 0; i < p->n; i++) order[i] = i;
  }
  bool bucketing = p->bucket > 1 && p->k1;
  if (bucketing) {
    int64_t W = p->bucket > p->n / p->B + 1 ? p->n : p->bucket * p->B;
    tmp = malloc((size_t)(W < p->n ? W : p->n) * sizeof *tmp);
    if (!tmp) {
      st = lt__err(LT_ERR_NOMEM, "%s: out of memory for a bucketing window", op);
      goto fail;
    }
    for (int64_t w = 0; w < p->n; w += W) {
      int64_t m = p->n - w < W ? p->n - w : W;
      for (int64_t i = 0; i < m; i++) {
        int64_t it = order[w + i];
        tmp[i] = (sortent){it, i, p->k1[it], p->k2 ? p->k2[it] : 0};
      }
      qsort(tmp, (size_t)m, sizeof *tmp, cmp_sortent);
      for (int64_t i = 0; i < m; i++) order[w + i] = tmp[i].item;
    }
  }
  for (int64_t k = 0; k < p->nbatches; k++) start[k] = k * p->B;
  if (bucketing && p->shuffle && p->nbatches > 1) {
    perm = malloc((size_t)p->nbatches * sizeof *perm);
    if (!perm) {
      st = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
      goto fail;
    }
    if ((st = lt__draw_perm(p->gen, p->nbatches, perm)) != LT_OK) goto fail;
    for (int64_t k = 0; k < p->nbatches; k++) start[k] = perm[k] * p->B;
  }
  free(perm);
  free(tmp);
  *order_out = order;
  *start_out = start;
  return LT_OK;
fail:
  free(order);
  free(start);
  free(perm);
  free(tmp);
  lt_generator_set_state(p->gen, before);
  return st;
}

static lt_status plan_init(plan *p, const char *op, int64_t n, const lt_batch_opts *opts) {
  if (!opts) return lt__err(LT_ERR_NULL, "%s: opts is NULL", op);
  if (opts->batch_size < 1)
    return lt__err(LT_ERR_INVALID, "%s: batch_size is %lld, must be >= 1", op, (long long)opts->batch_size);
  if (opts->bucket_batches < 0)
    return lt__err(LT_ERR_INVALID, "%s: bucket_batches is %lld, must be >= 0", op,
                   (long long)opts->bucket_batches);
  p->n = n;
  p->B = opts->batch_size;
  p->shuffle = opts->shuffle;
  p->drop_last = opts->drop_last;
  p->bucket = opts->bucket_batches;
  p->nbatches = opts->drop_last ? n / p->B : n / p->B + (n % p->B != 0);
  if (p->nbatches < 1)
    return lt__err(LT_ERR_INVALID, "%s: %lld items make no batch of %lld with drop_last", op, (long long)n,
                   (long long)p->B);
  if ((uint64_t)n > SIZE_MAX / sizeof(sortent))
    return lt__err(LT_ERR_OVERFLOW, "%s: %lld items are too many", op, (long long)n);
  p->gen = lt_generator_new(opts->seed);
  if (!p->gen) return lt_last_status();
  /* Data-independent part of the fingerprint; callers mix in their data. */
  uint64_t h = LT__FNV_BASIS;
  h = lt__fnv_mix(h, (uint64_t)n);
  h = lt__fnv_mix(h, (uint64_t)p->B);
  h = lt__fnv_mix(h, (uint64_t)p->shuffle | (uint64_t)p->drop_last << 1);
  h = lt__fnv_mix(h, (uint64_t)(p->bucket > 1 ? p->bucket : 0));
  p->fingerprint = h;
  return LT_OK;
}

/* Starts epoch 0. */
static lt_status plan_start(plan *p) {
  p->epoch_state = lt_generator_get_state(p->gen);
  p->epoch = p->index = 0;
  return plan_draw(p, &p->order, &p->start);
}

/* The items of the next batch (a borrowed pointer into *order or a new epoch's
 * order) and its size; the new epoch's arrays, if one began, in *norder /
 * *nstart (to be committed with plan_commit after the batch is made). */
typedef struct {
  int64_t *norder, *nstart;
  lt_generator_state nstate;
  const int64_t *items;
  int64_t size;
} plan_step;

static lt_status plan_peek(plan *p, plan_step *s) {
  *s = (plan_step){0};
  const int64_t *order = p->order, *start = p->start;
  int64_t index = p->index;
  if (index >= p->nbatches) {
    s->nstate = lt_generator_get_state(p->gen);
    lt_status st = plan_draw(p, &s->norder, &s->nstart);
    if (st != LT_OK) return st;
    order = s->norder;
    start = s->nstart;
    index = 0;
  }
  int64_t b0 = start[index];
  s->items = order + b0;
  s->size = p->n - b0 < p->B ? p->n - b0 : p->B;
  return LT_OK;
}

/* Commits a step: moves to the new epoch if one began, counts the batch. */
static void plan_commit(plan *p, plan_step *s) {
  if (s->norder) {
    free(p->order);
    free(p->start);
    p->order = s->norder;
    p->start = s->nstart;
    p->epoch_state = s->nstate;
    p->epoch++;
    p->index = 0;
  }
  p->index++;
}

/* Undoes a peek whose batch could not be made. */
static void plan_abort(plan *p, plan_step *s) {
  if (s->norder) {
    lt_generator_set_state(p->gen, s->nstate);
    free(s->norder);
    free(s->nstart);
  }
}

static lt_loader_position plan_position(const plan *p) {
  return (lt_loader_position){.epoch = p->epoch, .index = p->index, .gen = p->epoch_state,
                              .fingerprint = p->fingerprint};
}

static lt_status plan_restore(plan *p, const char *op, lt_loader_position pos) {
  if (pos.fingerprint != p->fingerprint)
    return lt__err(LT_ERR_STATE,
                   "%s: position fingerprint %016llx does not match this loader's %016llx: different data or options",
                   op, (unsigned long long)pos.fingerprint, (unsigned long long)p->fingerprint);
  if (pos.epoch < 0 || pos.index < 0 || pos.index > p->nbatches)
    return lt__err(LT_ERR_INVALID, "%s: position epoch %lld, index %lld: need epoch >= 0 and index in [0, %lld]", op,
                   (long long)pos.epoch, (long long)pos.index, (long long)p->nbatches);
  lt_generator_state now = lt_generator_get_state(p->gen);
  lt_status st = lt_generator_set_state(p->gen, pos.gen);
  if (st != LT_OK) return st;
  int64_t *order, *start;
  st = plan_draw(p, &order, &start);
  if (st != LT_OK) {
    lt_generator_set_state(p->gen, now);
    return st;
  }
  free(p->order);
  free(p->start);
  p->order = order;
  p->start = start;
  p->epoch = pos.epoch;
  p->index = pos.index;
  p->epoch_state = pos.gen;
  return LT_OK;
}

/* ======================================================================== */
/* Seq2seq loader                                                           */
/* ======================================================================== */

struct lt_seq2seq_loader {
  const lt_seq_pairs *data;
  int64_t *src_len, *tgt_len; /* bucketing keys */
  plan plan;
};

void lt_seq2seq_loader_free(lt_seq2seq_loader *L) {
  if (!L) return;
  plan_free(&L->plan);
  free(L->src_len);
  free(L->tgt_len);
  free(L);
}

lt_seq2seq_loader *lt_seq2seq_loader_new(const lt_seq_pairs *data, const lt_batch_opts *opts) {
  const char *op = "seq2seq_loader_new";
  if (!data) return lt__err(LT_ERR_NULL, "%s: data is NULL", op), NULL;
  int64_t n = lt_seq_pairs_count(data);
  if (n < 1) return lt__err(LT_ERR_INVALID, "%s: data has no example", op), NULL;
  lt_seq2seq_loader *L = calloc(1, sizeof *L);
  if (!L) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  L->data = data;
  if (plan_init(&L->plan, op, n, opts) != LT_OK) goto fail;
  L->src_len = malloc((size_t)n * sizeof(int64_t));
  L->tgt_len = malloc((size_t)n * sizeof(int64_t));
  if (!L->src_len || !L->tgt_len) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    goto fail;
  }
  uint64_t h = lt__fnv_mix(L->plan.fingerprint, 0x5e525e52); /* kind tag */
  for (int64_t i = 0; i < n; i++) {
    const int64_t *s, *t;
    lt_seq_pairs_get(data, i, &s, &L->src_len[i], &t, &L->tgt_len[i]);
    h = lt__fnv_mix(h, (uint64_t)L->src_len[i]);
    for (int64_t j = 0; j < L->src_len[i]; j++) h = lt__fnv_mix(h, (uint64_t)s[j]);
    h = lt__fnv_mix(h, (uint64_t)L->tgt_len[i]);
    for (int64_t j = 0; j < L->tgt_len[i]; j++) h = lt__fnv_mix(h, (uint64_t)t[j]);
  }
  L->plan.fingerprint = h;
  L->plan.k1 = L->src_len;
  L->plan.k2 = L->tgt_len;
  if (plan_start(&L->plan) != LT_OK) goto fail;
  return L;
fail:
  lt_seq2seq_loader_free(L);
  return NULL;
}

lt_status lt_seq2seq_loader_next(lt_seq2seq_loader *L, lt_seq2seq_batch *out) {
  if (!L || !out) return lt__err(LT_ERR_NULL, "seq2seq_loader_next: loader and out must not be NULL");
  plan_step s;
  lt_status st = plan_peek(&L->plan, &s);
  if (st != LT_OK) return st;
  st = lt_seq2seq_collate(L->data, s.items, s.size, out);
  if (st != LT_OK) {
    plan_abort(&L->plan, &s);
    return st;
  }
  plan_commit(&L->plan, &s);
  return LT_OK;
}

int64_t lt_seq2seq_loader_batches_per_epoch(const lt_seq2seq_loader *L) { return L ? L->plan.nbatches : 0; }

lt_loader_position lt_seq2seq_loader_get_position(const lt_seq2seq_loader *L) {
  return L ? plan_position(&L->plan) : (lt_loader_position){0};
}

lt_status lt_seq2seq_loader_set_position(lt_seq2seq_loader *L, lt_loader_position pos) {
  if (!L) return lt__err(LT_ERR_NULL, "seq2seq_loader_set_position: loader is NULL");
  return plan_restore(&L->plan, "seq2seq_loader_set_position", pos);
}

/* ======================================================================== */
/* Language-modelling loader                                                */
/* ======================================================================== */

struct lt_lm_loader {
  int64_t *tokens; /* [N] */
  int64_t N, T;
  plan plan;
};

void lt_lm_loader_free(lt_lm_loader *L) {
  if (!L) return;
  plan_free(&L->plan);
  free(L->tokens);
  free(L);
}

lt_lm_loader *lt_lm_loader_new(const lt_tensor *tokens, int64_t T, const lt_batch_opts *opts) {
  const char *op = "lm_loader_new";
  if (!tokens) return lt__err_null(op, "tokens"), NULL;
  if (tokens->ndim != 1 || lt_dtype_is_float(tokens->dtype) || tokens->dtype == LT_DTYPE_BOOL)
    return lt__err(LT_ERR_SHAPE, "%s: tokens is %s: must be a 1-d integer tensor", op, LT__D(tokens)), NULL;
  if (T < 1) return lt__err(LT_ERR_INVALID, "%s: T is %lld, must be >= 1", op, (long long)T), NULL;
  int64_t N = tokens->numel;
  if (N < T + 1 || N < 2)
    return lt__err(LT_ERR_INVALID, "%s: %lld tokens, need at least T + 1 = %lld", op, (long long)N,
                   (long long)T + 1), NULL;
  lt_lm_loader *L = calloc(1, sizeof *L);
  if (!L) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  L->N = N;
  L->T = T;
  L->tokens = malloc((size_t)N * sizeof(int64_t));
  if (!L->tokens) {
    lt__err(LT_ERR_NOMEM, "%s: out of memory for %lld tokens", op, (long long)N);
    goto fail;
  }
  if (lt_tensor_read(tokens, LT_DTYPE_I64, L->tokens, N) != LT_OK) goto fail;
  if (plan_init(&L->plan, op, (N - 1) / T, opts) != LT_OK) goto fail;
  uint64_t h = lt__fnv_mix(L->plan.fingerprint, 0x1a1a1a1a);
  h = lt__fnv_mix(h, (uint64_t)T);
  for (int64_t i = 0; i < N; i++) h = lt__fnv_mix(h, (uint64_t)L->tokens[i]);
  L->plan.fingerprint = h;
  if (plan_start(&L->plan) != LT_OK) goto fail;
  return L;
fail:
  lt_lm_loader_free(L);
  return NULL;
}

lt_status lt_lm_loader_next(lt_lm_loader *L, lt_tensor **x, lt_tensor **y) {
  if (!L || !x || !y) return lt__err(LT_ERR_NULL, "lm_loader_next: loader, x and y must not be NULL");
  plan_step s;
  lt_status st = plan_peek(&L->plan, &s);
  if (st != LT_OK) return st;
  int64_t B = s.size, T = L->T;
  lt_tensor *xt = lt_empty(LT_DTYPE_I64, 2, (int64_t[]){B, T});
  lt_tensor *yt = lt_empty(LT_DTYPE_I64, 2, (int64_t[]){B, T});
  if (!xt || !yt) {
    st = lt_last_status();
    lt_tensor_free(xt);
    lt_tensor_free(yt);
    plan_abort(&L->plan, &s);
    return st;
  }
  int64_t *xd = xt->data, *yd = yt->data;
  for (int64_t b = 0; b < B; b++) {
    const int64_t *chunk = L->tokens + s.items[b] * T; /* T + 1 tokens */
    memcpy(xd + b * T, chunk, (size_t)T * sizeof *xd);
    memcpy(yd + b * T, chunk + 1, (size_t)T * sizeof *yd);
  }
  plan_commit(&L->plan, &s);
  *x = xt;
  *y = yt;
  return LT_OK;
}

int64_t lt_lm_loader_batches_per_epoch(const lt_lm_loader *L) { return L ? L->plan.nbatches : 0; }

lt_loader_position lt_lm_loader_get_position(const lt_lm_loader *L) {
  return L ? plan_position(&L->plan) : (lt_loader_position){0};
}

lt_status lt_lm_loader_set_position(lt_lm_loader *L, lt_loader_position pos) {
  if (!L) return lt__err(LT_ERR_NULL, "lm_loader_set_position: loader is NULL");
  return plan_restore(&L->plan, "lm_loader_set_position", pos);
}

/* ======================================================================== */
/* Tensor-rows loader                                                       */
/* ======================================================================== */

struct lt_tensor_loader {
  const lt_tensor *x, *y; /* [N, ...] each (borrowed) */
  lt_tensor *idx;         /* [B] i64 scratch: the rows of the current batch */
  plan plan;
};

void lt_tensor_loader_free(lt_tensor_loader *L) {
  if (!L) return;
  plan_free(&L->plan);
  lt_tensor_free(L->idx);
  free(L);
}

lt_tensor_loader *lt_tensor_loader_new(const lt_tensor *x, const lt_tensor *y, const lt_batch_opts *opts) {
  const char *op = "tensor_loader_new";
  if (!x || !y) return lt__err(LT_ERR_NULL, "%s: x and y must not be NULL", op), NULL;
  if (x->ndim < 1 || y->ndim < 1 || x->shape[0] != y->shape[0])
    return lt__err(LT_ERR_SHAPE, "%s: x is %s, y is %s: need the same first dim N", op, LT__D(x), LT__D(y)),
           NULL;
  int64_t n = x->shape[0];
  if (n < 1) return lt__err(LT_ERR_INVALID, "%s: x is %s: no rows", op, LT__D(x)), NULL;
  lt_tensor_loader *L = calloc(1, sizeof *L);
  if (!L) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
  L->x = x;
  L->y = y;
  if (plan_init(&L->plan, op, n, opts) != LT_OK) goto fail;
  /* Outside any scope: the loader owns its index scratch. */
  L->idx = lt_tensor_keep(lt_empty(LT_DTYPE_I64, 1, (int64_t[]){L->plan.B}));
  if (!L->idx) goto fail;
  uint64_t h = lt__fnv_mix(L->plan.fingerprint, 0x7e7e7e7e); /* kind tag */
  const lt_tensor *t[2] = {x, y};
  for (int k = 0; k < 2; k++) {
    h = lt__fnv_mix(h, (uint64_t)t[k]->dtype);
    for (int d = 0; d < t[k]->ndim; d++) h = lt__fnv_mix(h, (uint64_t)t[k]->shape[d]);
  }
  L->plan.fingerprint = h;
  if (plan_start(&L->plan) != LT_OK) goto fail;
  return L;
fail:
  lt_tensor_loader_free(L);
  return NULL;
}

lt_status lt_tensor_loader_next(lt_tensor_loader *L, lt_tensor **x, lt_tensor **y) {
  if (!L || !x || !y) return lt__err(LT_ERR_NULL, "tensor_loader_next: loader, x and y must not be NULL");
  plan_step s;
  lt_status st = plan_peek(&L->plan, &s);
  if (st != LT_OK) return st;
  memcpy(L->idx->data, s.items, (size_t)s.size * sizeof(int64_t));
  lt_tensor *idx = lt_narrow(L->idx, 0, 0, s.size); /* [b] view of the scratch */
  lt_tensor *xb = idx ? lt_index_select(L->x, 0, idx) : NULL;
  lt_tensor *yb = xb ? lt_index_select(L->y, 0, idx) : NULL;
  if (!yb) {
    st = lt_last_status();
    lt_tensor_free(xb);
    lt_tensor_free(idx);
    plan_abort(&L->plan, &s);
    return st;
  }
  lt_tensor_free(idx);
  plan_commit(&L->plan, &s);
  *x = xb;
  *y = yb;
  return LT_OK;
}

int64_t lt_tensor_loader_batches_per_epoch(const lt_tensor_loader *L) { return L ? L->plan.nbatches : 0; }

lt_loader_position lt_tensor_loader_get_position(const lt_tensor_loader *L) {
  return L ? plan_position(&L->plan) : (lt_loader_position){0};
}

lt_status lt_tensor_loader_set_position(lt_tensor_loader *L, lt_loader_position pos) {
  if (!L) return lt__err(LT_ERR_NULL, "tensor_loader_set_position: loader is NULL");
  return plan_restore(&L->plan, "tensor_loader_set_position", pos);
}
