/*
 * tests/test_dist.c: data parallelism (dist/dist.h) at three levels.
 *
 *   - the size-1 world (this process, not started by mpirun): every call is a
 *     no-op with the documented results, argument errors have messages;
 *   - the API at N ranks: this program started by mpirun with --worker
 *     (shards, scalar allreduce, the configuration check, the broadcast,
 *     gradient averaging over several bucket sizes and dtypes);
 *   - the train program under mpirun -np 2 and 3 on a tiny decoder-only
 *     model: N ranks x --batch B against 1 process x --batch N*B (losses and
 *     parameters within 1e-5), two runs bit-identical, resume N=2 -> 2
 *     bit-exact (also with dropout: per-rank streams restored) and N=2 -> 1, a configuration that differs across ranks
 *     refused at start, a rank killed mid-run ending the job, and no process
 *     left behind; SIGTERM to mpirun stops every rank and saves one
 *     checkpoint; a stopped rank (SIGSTOP) ends the job after --dist-timeout,
 *     named by rank 0;
 *   - the pair tasks (--task) under mpirun: 2 ranks x 4 against 1 x 8 with
 *     the loss weighted by each rank's share of the target tokens, resume
 *     2 -> 2 bit-exact; the classifier run (examples/fashion_mnist_mlp)
 *     resumed from 2 ranks on 1.
 *
 * The mpirun parts need the library built with Open MPI and mpirun
 * (LT_MPIEXEC, set by tests/CMakeLists.txt); they run in the Release build
 * only (Open MPI's own allocations are not ours to chase under LSan).
 */
#define _DEFAULT_SOURCE /* mkdtemp, usleep */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "dist/dist.h"
#include "models/transformer/config.h"
#include "models/transformer/transformer.h"
#include "test_util.h"
#include "util_run.h"
#include "util_tfckpt.h"

/* ======================================================================== */
/* The size-1 world                                                         */
/* ======================================================================== */

/* Four tensors (aborts on failure: used by the worker outside Check too). */
static lt_params *small_params(double fill, lt_dtype second) {
  lt_params *p = lt_params_new();
  if (!p || lt_params_add(p, "a.weight", lt_full(LT_DTYPE_F32, 2, (int64_t[]){3, 5}, fill), 0) ||
      lt_params_add(p, "b.bias", lt_full(second, 1, (int64_t[]){7}, fill + 1), 0) ||
      lt_params_add(p, "c.weight", lt_full(LT_DTYPE_F32, 1, (int64_t[]){1000}, fill + 2), 0) ||
      lt_params_add(p, "stats", lt_full(LT_DTYPE_F32, 1, (int64_t[]){4}, fill + 3), LT_PARAM_BUFFER)) {
    fprintf(stderr, "small_params: %s\n", lt_last_error());
    abort();
  }
  return p;
}

START_TEST(size_one_world_is_a_no_op) {
  LT_OK_OR_FAIL(lt_dist_init(NULL, NULL));
  LT_OK_OR_FAIL(lt_dist_init(NULL, NULL)); /* again: a no-op */
  ck_assert(!lt_dist_active());
  ck_assert_int_eq(lt_dist_rank(), 0);
  ck_assert_int_eq(lt_dist_size(), 1);
  ck_assert_int_eq(lt_dist_local_rank(), 0);
  ck_assert_int_eq(lt_dist_local_size(), 1);
  LT_OK_OR_FAIL(lt_dist_barrier());
  int64_t a, n;
  lt_dist_shard(10, &a, &n);
  ck_assert(a == 0 && n == 10);
  double v[3] = {1.5, -2, NAN};
  LT_OK_OR_FAIL(lt_dist_allreduce_f64(v, 3, LT_DIST_SUM));
  ck_assert(v[0] == 1.5 && v[1] == -2 && isnan(v[2]));
  int64_t k = 7;
  LT_OK_OR_FAIL(lt_dist_allreduce_i64(&k, 1, LT_DIST_MAX));
  ck_assert_int_eq(k, 7);
  LT_EXPECT_ERR(lt_dist_allreduce_f64(v, -1, LT_DIST_SUM), LT_ERR_INVALID, "n -1");
  LT_EXPECT_ERR(lt_dist_allreduce_f64(NULL, 2, LT_DIST_SUM), LT_ERR_NULL, "dist_allreduce_f64");
  LT_EXPECT_ERR(lt_dist_allreduce_i64(&k, 1, (lt_dist_op)9), LT_ERR_INVALID, "not an lt_dist_op");
  const char *names[] = {"seed"}, *vals[] = {"1"};
  LT_OK_OR_FAIL(lt_dist_check_same("t", 1, names, vals));
  LT_EXPECT_ERR(lt_dist_check_same("t", 1, names, NULL), LT_ERR_NULL, "values");
  lt_params *p = small_params(1, LT_DTYPE_F64);
  uint64_t h = lt_dist_params_hash(p);
  LT_OK_OR_FAIL(lt_dist_broadcast_params(p));
  LT_OK_OR_FAIL(lt_dist_check_params_same(p));
  ck_assert(lt_dist_params_hash(p) == h);
  ((float *)lt_params_find(p, "c.weight")->data)[999] = 3.0000002f; /* one bit of one element */
  ck_assert(lt_dist_params_hash(p) != h);
  lt_dist_grads *g = lt_dist_grads_new(p, 64);
  ck_assert_ptr_nonnull(g);
  ck_assert_int_eq(lt_dist_grads_buckets(g), 3); /* f32 [3,5] | f64 [7] | f32 [1000]; the buffer is left out */
  LT_OK_OR_FAIL(lt_dist_grads_start(g));
  LT_OK_OR_FAIL(lt_dist_grads_finish(g));
  lt_dist_grads_free(g);
  lt_dist_grads_free(NULL);
  LT_EXPECT_ERR(lt_dist_broadcast_params(NULL), LT_ERR_NULL, "dist_broadcast_params");
  ck_assert_ptr_null(lt_dist_grads_new(NULL, 0));
  lt_params_free(p);
  lt_dist_set_bucket_bytes(1 << 20);
  ck_assert_uint_eq(lt_dist_bucket_bytes(), 1 << 20);
  lt_dist_set_bucket_bytes(0);
  ck_assert_uint_eq(lt_dist_bucket_bytes(), LT_DIST_BUCKET_BYTES);
  /* the collectives' timeout: a number of seconds, 0 for none */
  ck_assert(lt_dist_timeout() == LT_DIST_TIMEOUT_DEFAULT || getenv("LT_DIST_TIMEOUT"));
  LT_EXPECT_ERR(lt_dist_set_timeout(-1), LT_ERR_INVALID, "dist_set_timeout: -1 seconds");
  LT_EXPECT_ERR(lt_dist_set_timeout(NAN), LT_ERR_INVALID, "must be in [0, 1e9]");
  LT_OK_OR_FAIL(lt_dist_set_timeout(0));
  ck_assert(lt_dist_timeout() == 0);
  LT_OK_OR_FAIL(lt_dist_set_timeout(LT_DIST_TIMEOUT_DEFAULT));
  lt_dist_finalize();
}
END_TEST

/* ZeRO-1's pieces in a world of one: the shard is everything and the calls
 * are no-ops; the optimizer's shard restricts its updates and its state. */
START_TEST(zero_in_a_world_of_one) {
  lt_params *p = small_params(0.5, LT_DTYPE_F32);
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
  lt_optimizer *o = lt_optimizer_new(p, &oc);
  ck_assert_ptr_nonnull(o);
  ck_assert_int_eq(lt_optimizer_param_count(o), 3); /* the buffer is not optimized */
  lt_dist_zero *z = lt_dist_zero_new(o);
  ck_assert_ptr_nonnull(z);
  int f, c;
  lt_dist_zero_shard(z, 0, &f, &c);
  ck_assert_int_eq(f, 0);
  ck_assert_int_eq(c, 3);
  ck_assert_int_eq(lt_dist_zero_broadcast_params(z), LT_OK);
  ck_assert_int_eq(lt_dist_zero_gather_state(z), LT_OK);
  lt_dist_zero_free(z);
  /* a shard of one parameter: the others keep their values and get no state */
  ck_assert_int_eq(lt_optimizer_set_shard(o, 1, 1), LT_OK);
  ck_assert_int_eq(lt_optimizer_set_shard(o, 2, 2), LT_ERR_INVALID);
  for (int i = 0; i < 3; i++) {
    lt_tensor *t = lt_optimizer_param(o, i, NULL);
    t->grad = lt_tensor_keep(lt_full(t->dtype, t->ndim, t->shape, 1.0));
  }
  ck_assert_int_eq(lt_optimizer_step(o), LT_OK);
  const char *name;
  for (int i = 0; i < 3; i++) {
    const lt_tensor *t = lt_optimizer_param(o, i, &name);
    ck_assert_msg((((const float *)t->data)[0] != (float)(0.5 + i)) == (i == 1), "%s: %g", name,
                  (double)((const float *)t->data)[0]);
    ck_assert_msg((lt_optimizer_state(o, name, "exp_avg") != NULL) == (i == 1), "%s's state", name);
  }
  ck_assert_int_eq(lt_optimizer_state_bytes(o), 7 * 4 * 2 + 8); /* b.bias: two moments and a step */
  ck_assert_int_eq(lt_optimizer_ensure_state(o, "c.weight"), LT_OK);
  ck_assert_int_eq(lt_optimizer_state_bytes(o), (7 + 1000) * 4 * 2 + 16);
  ck_assert_int_eq(lt_optimizer_ensure_state(o, "stats"), LT_ERR_INVALID);
  ck_assert_int_eq(lt_optimizer_set_shard(o, 0, 3), LT_OK);
  ck_assert_int_eq(lt_optimizer_state_bytes(o), (7 + 1000) * 4 * 2 + 16); /* widening drops nothing */
  ck_assert_int_eq(lt_optimizer_set_shard(o, 0, 1), LT_OK);
  ck_assert_int_eq(lt_optimizer_state_bytes(o), 0);
  lt_optimizer_free(o);
  lt_params_free(p);
}
END_TEST

/* ======================================================================== */
/* The API at N ranks (--worker, under mpirun)                              */
/* ======================================================================== */

static int worker_fail;
#define W_CHECK(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d: %s:%d: %s: ", lt_dist_rank(), __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      worker_fail = 1;                                                         \
    }                                                                          \
  } while (0)

/* Check's assertions work only inside its runner: the worker's own. */
#define WK_OK(expr) W_CHECK((expr) == LT_OK, "%s", lt_last_error())
#define W_ERR(expr, code, frag) \
  W_CHECK((expr) == (code) && strstr(lt_last_error(), frag), "want %d '%s', got: %s", (int)(code), frag, lt_last_error())

/* Every rank fills gradients with values of its own; after the reduction each
 * is the mean over the ranks, the same bits on every rank, for any bucket size. */
static void worker_grads(size_t bucket_bytes) {
  const int R = lt_dist_rank(), N = lt_dist_size();
  lt_params *p = small_params(R, LT_DTYPE_F64);
  WK_OK(lt_dist_broadcast_params(p)); /* rank 0's values everywhere */
  W_CHECK(((float *)lt_params_find(p, "a.weight")->data)[0] == 0.0f, "broadcast: not rank 0's value");
  W_CHECK(((float *)lt_params_find(p, "stats")->data)[3] == 3.0f, "broadcast: the buffer is not rank 0's");
  WK_OK(lt_dist_check_params_same(p));
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *q = lt_params_at(p, i);
    if (q->flags & LT_PARAM_BUFFER || !strcmp(q->name, "b.bias")) continue; /* b.bias: no grad on any rank */
    lt_tensor *t = q->value;
    t->grad = lt_tensor_keep(lt_zeros(t->dtype, t->ndim, t->shape));
    float *d = t->grad->data;
    for (int64_t j = 0; j < t->numel; j++) d[j] = (float)(R + 1) * 0.1f + (float)j;
  }
  if (R == 1) { /* a rank whose batch did not use c.weight: it sends zeros */
    lt_zero_grad(lt_params_find(p, "c.weight"));
  }
  lt_dist_grads *g = lt_dist_grads_new(p, bucket_bytes);
  WK_OK(lt_dist_grads_start(g));
  W_ERR(lt_dist_grads_start(g), LT_ERR_STATE, "already in flight");
  WK_OK(lt_dist_grads_finish(g));
  W_ERR(lt_dist_grads_finish(g), LT_ERR_STATE, "no reduction in flight");
  const lt_tensor *a = lt_params_find(p, "a.weight"), *c = lt_params_find(p, "c.weight");
  for (int64_t j = 0; j < a->numel; j++) {
    double want = 0;
    for (int r = 0; r < N; r++) want += (double)((float)(r + 1) * 0.1f + (float)j);
    want /= N;
    float got = ((const float *)a->grad->data)[j];
    W_CHECK(fabs(got - want) <= 1e-6 * fabs(want) + 1e-7, "a.weight.grad[%lld] = %.9g, want %.9g", (long long)j, got, want);
  }
  double want_c = 0;
  for (int r = 0; r < N; r++) want_c += r == 1 ? 0 : (double)((float)(r + 1) * 0.1f + 5.0f);
  want_c /= N;
  W_CHECK(c->grad && fabs(((const float *)c->grad->data)[5] - want_c) <= 1e-6 * want_c, "c.weight.grad[5] wrong");
  W_CHECK(lt_params_find(p, "b.bias")->grad != NULL, "a parameter without a grad gets the (zero) average");
  /* the averaged gradients are the same bits on every rank */
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_tensor *t = lt_params_at(p, i)->value;
    if (!t->grad) continue;
    const unsigned char *b = t->grad->data;
    for (size_t k = 0; k < (size_t)t->numel * lt_dtype_size(t->dtype); k++) h = (h ^ b[k]) * 1099511628211ull;
  }
  char hs[32];
  snprintf(hs, sizeof hs, "%016llx", (unsigned long long)h);
  const char *names[] = {"gradient bits"}, *vals[] = {hs};
  W_CHECK(lt_dist_check_same("grads", 1, names, vals) == LT_OK, "%s", lt_last_error());
  double wait_s, total_s;
  lt_dist_grads_times(g, &wait_s, &total_s);
  W_CHECK(wait_s >= 0 && total_s >= wait_s, "times %g %g", wait_s, total_s);
  lt_dist_grads_free(g);
  lt_params_free(p);
}

/* L = (R+1) (sum(a) + sum(c * c)) on rank R: dL/da = R+1, dL/dc = 2c (R+1). */
static lt_tensor *overlap_loss(lt_params *p, int R) {
  lt_tensor *a = lt_params_find(p, "a.weight"), *c = lt_params_find(p, "c.weight");
  lt_tensor *cc = lt_mul(c, c), *sa = lt_sum(a, 0, NULL, false), *sc = lt_sum(cc, 0, NULL, false);
  lt_tensor *l = lt_add(sa, sc), *r = lt_mul_scalar(l, R + 1.0);
  lt_tensor_free(cc), lt_tensor_free(sa), lt_tensor_free(sc), lt_tensor_free(l);
  return r;
}

/* The reduction starts during backward: bucket 0 (c.weight: reverse store
 * order) when its gradient is final; b.bias is unused, so bucket 1 starts in
 * finish. A backward with sync off starts nothing (gradient accumulation);
 * two backwards with sync on are refused. */
static void worker_overlap(void) {
  const int R = lt_dist_rank(), N = lt_dist_size();
  lt_params *p = small_params(0, LT_DTYPE_F32);
  WK_OK(lt_dist_broadcast_params(p));
  lt_dist_grads *g = lt_dist_grads_new(p, 64);
  W_CHECK(lt_dist_grads_buckets(g) == 2, "%d buckets, want c.weight | b.bias a.weight", lt_dist_grads_buckets(g));
  int64_t early = -1;
  lt_dist_grads_set_sync(g, false); /* micro-batch 1 of 2 */
  lt_tensor *l = overlap_loss(p, R);
  WK_OK(lt_backward(l, NULL, false));
  lt_tensor_free(l);
  lt_dist_grads_overlap(g, &early, NULL);
  W_CHECK(early == 0, "no_sync: %lld buckets started", (long long)early);
  lt_dist_grads_set_sync(g, true); /* micro-batch 2 of 2: the last */
  l = overlap_loss(p, R);
  WK_OK(lt_backward(l, NULL, false));
  lt_tensor_free(l);
  lt_dist_grads_overlap(g, &early, NULL);
  W_CHECK(early == 1, "sync: %lld buckets started during backward, want 1 (c.weight)", (long long)early);
  WK_OK(lt_dist_grads_finish(g));
  double mean = 0;
  for (int r = 0; r < N; r++) mean += 2.0 * (r + 1);
  mean /= N;
  const lt_tensor *a = lt_params_find(p, "a.weight"), *c = lt_params_find(p, "c.weight");
  W_CHECK(fabs(((float *)a->grad->data)[4] - mean) < 1e-5, "a.grad %g, want %g", ((float *)a->grad->data)[4], mean);
  W_CHECK(fabs(((float *)c->grad->data)[999] - 4 * mean) < 1e-5, "c.grad %g, want %g", ((float *)c->grad->data)[999], 4 * mean);
  /* two backwards with sync on before a finish: the second fails, and so does finish */
  lt_params_zero_grad(p);
  l = overlap_loss(p, R);
  WK_OK(lt_backward(l, NULL, false));
  lt_tensor_free(l);
  l = overlap_loss(p, R);
  W_ERR(lt_backward(l, NULL, false), LT_ERR_STATE, "became final twice");
  lt_tensor_free(l);
  W_ERR(lt_dist_grads_finish(g), LT_ERR_STATE, "hook failed");
  lt_clear_error();
  lt_dist_grads_free(g);
  W_CHECK(c->post_hook_ == NULL, "lt_dist_grads_free left its hook on c.weight");
  lt_params_free(p);
}

/* ZeRO-1 (lt_dist_zero): the shards tile the optimizer's parameters in
 * order; a sharded AdamW followed by the owners' broadcast gives the bits of
 * an unsharded one on every rank; the state is split (its bytes summed over
 * the ranks are the unsharded optimizer's); gathered, rank 0 holds every
 * parameter's state, the same bits. With small_params (15, 7 and 1000
 * elements), at N = 3 rank 2 owns nothing. */
static void worker_zero(void) {
  const int R = lt_dist_rank(), N = lt_dist_size();
  lt_params *pa = small_params(0.5, LT_DTYPE_F32), *pb = small_params(0.5, LT_DTYPE_F32);
  lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
  lt_optimizer *oa = lt_optimizer_new(pa, &oc), *ob = lt_optimizer_new(pb, &oc);
  lt_dist_zero *z = oa ? lt_dist_zero_new(oa) : NULL;
  W_CHECK(oa && ob && z, "%s", lt_last_error());
  if (!z) return;
  int next = 0;
  for (int r = 0; r < N; r++) {
    int f, c;
    lt_dist_zero_shard(z, r, &f, &c);
    W_CHECK(f == next && c >= 0, "rank %d's shard starts at %d (count %d), not at %d", r, f, c, next);
    next = f + c;
  }
  W_CHECK(next == lt_optimizer_param_count(oa) && next == 3, "the shards cover %d parameters of %d", next,
          lt_optimizer_param_count(oa));
  for (int step = 1; step <= 3; step++) {
    lt_params *ps[2] = {pa, pb};
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < lt_params_count(ps[k]); i++) { /* the same gradient everywhere (the averaged one) */
        const lt_param *q = lt_params_at(ps[k], i);
        if (q->flags & LT_PARAM_BUFFER) continue;
        lt_tensor *t = q->value;
        t->grad = lt_tensor_keep(lt_zeros(t->dtype, t->ndim, t->shape));
        float *d = t->grad->data;
        for (int64_t j = 0; j < t->numel; j++) d[j] = 0.01f * (float)(step * (i + 1)) - 0.001f * (float)j;
      }
    WK_OK(lt_optimizer_step(oa));
    WK_OK(lt_dist_zero_broadcast_params(z));
    WK_OK(lt_optimizer_step(ob));
    lt_params_zero_grad(pa);
    lt_params_zero_grad(pb);
  }
  for (int i = 0; i < lt_params_count(pa); i++) {
    const lt_tensor *a = lt_params_at(pa, i)->value, *b = lt_params_at(pb, i)->value;
    W_CHECK(memcmp(a->data, b->data, (size_t)a->numel * lt_dtype_size(a->dtype)) == 0,
            "%s differs from the unsharded optimizer's", lt_params_at(pa, i)->name);
  }
  int64_t bytes[2] = {lt_optimizer_state_bytes(oa), 0};
  WK_OK(lt_dist_allreduce_i64(bytes, 1, LT_DIST_SUM));
  W_CHECK(bytes[0] == lt_optimizer_state_bytes(ob), "the shards hold %lld bytes of state, unsharded %lld",
          (long long)bytes[0], (long long)lt_optimizer_state_bytes(ob));
  W_CHECK(lt_optimizer_state_bytes(oa) < lt_optimizer_state_bytes(ob), "rank %d holds all the state", R);
  WK_OK(lt_dist_zero_gather_state(z));
  static const char *const states[] = {"exp_avg", "exp_avg_sq", "step"};
  for (int i = 0; i < lt_optimizer_param_count(ob) && R == 0; i++) {
    const char *name;
    lt_optimizer_param(ob, i, &name);
    for (int k = 0; k < 3; k++) {
      const lt_tensor *a = lt_optimizer_state(oa, name, states[k]), *b = lt_optimizer_state(ob, name, states[k]);
      W_CHECK(a && b && memcmp(a->data, b->data, (size_t)a->numel * lt_dtype_size(a->dtype)) == 0,
              "rank 0's gathered %s of %s differs from the unsharded one", states[k], name);
    }
  }
  WK_OK(lt_dist_zero_release_state(z));
  W_CHECK(lt_optimizer_state_bytes(oa) < lt_optimizer_state_bytes(ob), "rank %d kept the gathered state", R);
  lt_dist_zero_free(z);
  lt_optimizer_free(oa);
  lt_optimizer_free(ob);
  lt_params_free(pa);
  lt_params_free(pb);
}

static int worker(int argc, char **argv) {
  if (lt_dist_init(&argc, &argv) != LT_OK) return fprintf(stderr, "%s\n", lt_last_error()), 1;
  const int R = lt_dist_rank(), N = lt_dist_size();
  W_CHECK(lt_dist_active() && N >= 2, "not started by mpirun with -np >= 2 (size %d)", N);
  W_CHECK(lt_dist_local_size() == N && lt_dist_local_rank() == R, "one machine: local rank %d of %d",
          lt_dist_local_rank(), lt_dist_local_size());
  /* the shard: every example of a global batch once, for sizes around N */
  for (int64_t n = 0; n < 3 * N + 2; n++) {
    int64_t a, c;
    lt_dist_shard(n, &a, &c);
    int64_t v[3] = {c, a == 0 && R == 0 ? 1 : 0, 0};
    int64_t *all = calloc((size_t)N * 2, sizeof *all);
    int64_t mine[2] = {a, c};
    for (int r = 0; r < N; r++) { /* the next rank starts where this one ends: check with an allreduce per rank */
      int64_t e[2] = {r == R ? mine[0] : 0, r == R ? mine[1] : 0};
      lt_dist_allreduce_i64(e, 2, LT_DIST_SUM);
      all[2 * r] = e[0], all[2 * r + 1] = e[1];
    }
    for (int r = 1; r < N; r++) W_CHECK(all[2 * r] == all[2 * r - 2] + all[2 * r - 1], "shard of %lld: gap at rank %d", (long long)n, r);
    free(all);
    lt_dist_allreduce_i64(v, 3, LT_DIST_SUM);
    W_CHECK(v[0] == n && v[1] == 1, "shard of %lld: %lld examples over the ranks", (long long)n, (long long)v[0]);
    W_CHECK(c >= n / N && c <= n / N + 1, "shard of %lld: %lld on rank %d", (long long)n, (long long)c, R);
  }
  /* scalars: rank order, the same bits everywhere */
  double d[3] = {R + 1.0, 0.1 * (R + 1), -(double)R};
  WK_OK(lt_dist_allreduce_f64(d, 3, LT_DIST_SUM));
  double want = 0;
  for (int r = 0; r < N; r++) want += 0.1 * (r + 1);
  W_CHECK(d[0] == N * (N + 1) / 2.0 && d[1] == want, "sum %g %g", d[0], d[1]);
  int64_t m[2] = {R, -R};
  WK_OK(lt_dist_allreduce_i64(m, 1, LT_DIST_MAX));
  WK_OK(lt_dist_allreduce_i64(m + 1, 1, LT_DIST_MIN));
  W_CHECK(m[0] == N - 1 && m[1] == -(N - 1), "max %lld min %lld", (long long)m[0], (long long)m[1]);
  /* the configuration check */
  const char *names[] = {"--seed", "--batch"};
  const char *same[] = {"1", "8"}, *diff[] = {"1", R == N - 1 ? "9" : "8"};
  W_CHECK(lt_dist_check_same("worker", 2, names, same) == LT_OK, "%s", lt_last_error());
  lt_status s = lt_dist_check_same("worker", 2, names, diff);
  W_CHECK(s == LT_ERR_INVALID, "a differing --batch was accepted");
  char expect[160];
  snprintf(expect, sizeof expect, "'--batch' is '8' on rank 0, '9' on rank %d", N - 1);
  if (R == 0) W_CHECK(strstr(lt_last_error(), expect) != NULL, "message: %s", lt_last_error());
  W_CHECK(lt_dist_check_same("worker", R == 0 ? 1 : 2, names, same) == LT_ERR_INVALID, "a differing count was accepted");
  /* gradients, over bucket sizes: one per parameter, a few, all in one (dtypes still split) */
  worker_grads(1);
  worker_grads(64);
  worker_grads(0);
  worker_overlap();
  /* buffers alone from rank 0 (BatchNorm's running statistics); parameters untouched */
  lt_params *bp = small_params(R, LT_DTYPE_F32);
  WK_OK(lt_dist_broadcast_buffers(bp));
  W_CHECK(((float *)lt_params_find(bp, "stats")->data)[0] == 3.0f, "the buffer is not rank 0's");
  W_CHECK(((float *)lt_params_find(bp, "a.weight")->data)[0] == (float)R, "a parameter was broadcast");
  lt_params_free(bp);
  /* every rank its own stream: rank 0 keeps the seed, the others differ */
  int64_t seeds[64] = {0};
  if (N <= 64) {
    seeds[R] = (int64_t)lt_dist_rank_seed(42);
    WK_OK(lt_dist_allreduce_i64(seeds, N, LT_DIST_SUM));
    W_CHECK(seeds[0] == 42, "rank 0's seed %lld", (long long)seeds[0]);
    for (int r = 1; r < N; r++) W_CHECK(seeds[r] != seeds[r - 1] && seeds[r] != 42, "rank %d's seed", r);
  }
  worker_zero();
  /* a diverged copy is found */
  lt_params *p = small_params(0, LT_DTYPE_F32);
  if (R == N - 1) ((float *)lt_params_find(p, "a.weight")->data)[2] = 1;
  s = lt_dist_check_params_same(p);
  W_CHECK(s == LT_ERR_STATE && strstr(lt_last_error(), "diverged"), "divergence not found: %s", lt_last_error());
  lt_params_free(p);
  int64_t bad = worker_fail;
  lt_dist_allreduce_i64(&bad, 1, LT_DIST_MAX);
  if (R == 0) printf("worker: %d ranks: %s\n", N, bad ? "FAILED" : "all checks passed");
  lt_dist_finalize();
  return bad ? 1 : 0;
}

#ifdef LT_MPIEXEC
/* ======================================================================== */
/* mpirun: helpers                                                          */
/* ======================================================================== */

static char tmpdir[256];
static char self_exe[1024];

static void setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_dist_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static pid_t g_mpirun; /* a background mpirun (start_mpirun), ended by teardown */

static void teardown(void) {
  if (g_mpirun > 0 && kill(g_mpirun, SIGTERM) == 0) { /* a failed test: mpirun ends its ranks */
    int st;
    for (int i = 0; i < 100 && waitpid(g_mpirun, &st, WNOHANG) == 0; i++) usleep(100000);
    if (waitpid(g_mpirun, &st, WNOHANG) == 0) kill(g_mpirun, SIGKILL), waitpid(g_mpirun, &st, 0);
  }
  g_mpirun = 0;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

static const char *in_tmp(const char *name) { return lt_test_join(tmpdir, name); }

#define MPIRUN LT_MPIEXEC " --allow-run-as-root --oversubscribe --bind-to none"

/* No process of this test's temporary folder (a rank, an mpirun) is left. */
static void expect_no_leftovers(void) {
  char cmd[512];
  for (int i = 0; i < 50; i++) { /* mpirun reaps its ranks as it exits: allow a moment */
    snprintf(cmd, sizeof cmd, "pgrep -f '[%c]%s' > /dev/null", tmpdir[0], tmpdir + 1); /* not this shell */
    if (system(cmd) != 0) return;
    usleep(100000);
  }
  snprintf(cmd, sizeof cmd, "pgrep -af '[%c]%s'", tmpdir[0], tmpdir + 1);
  if (system(cmd)) {}
  ck_abort_msg("MPI processes of %s are left behind", tmpdir);
}

/* Runs a shell command line (stdout and stderr to log in the temporary
 * folder), bounded by 120 s; its exit status. */
static int run(const char *cmdline, const char *log) {
  char cmd[20000];
  snprintf(cmd, sizeof cmd, "OMP_WAIT_POLICY=PASSIVE timeout -k 5 120 %s > '%s' 2>&1", cmdline, in_tmp(log));
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* The end of a log, short enough for a failure message. */
static const char *tail(const char *s) {
  size_t n = strlen(s);
  return s + (n > 2500 ? n - 2500 : 0);
}

static void expect_exit(int got, int want, const char *log) {
  if (got != want) ck_abort_msg("exit %d, want %d; the output (%s):\n%s", got, want, log, tail(slurp(in_tmp(log))));
}

static int read_losses(const char *path, double *v, int cap) { return lt_test_csv_column(path, 3, v, cap); }

/* The parameters of a checkpoint (returns new store, with the model). */
static lt_transformer *load_model(const char *path) {
  lt_transformer *m = tfckpt_load_model(path);
  ck_assert_msg(m != NULL, "%s", lt_last_error());
  return m;
}

/* The parameters of two checkpoints: equal bits (rtol 0), or within rtol of
 * the larger of the element and the tensor's largest. Returns the largest
 * relative difference. */
static double compare_params(const char *a, const char *b, double rtol) {
  lt_transformer *ma = load_model(a), *mb = load_model(b);
  lt_params *pa = lt_transformer_params(ma), *pb = lt_transformer_params(mb);
  ck_assert_int_eq(lt_params_count(pa), lt_params_count(pb));
  double worst = 0;
  for (int i = 0; i < lt_params_count(pa); i++) {
    const lt_param *x = lt_params_at(pa, i), *y = lt_params_at(pb, i);
    ck_assert_str_eq(x->name, y->name);
    const float *u = x->value->data, *w = y->value->data;
    double big = 0;
    for (int64_t j = 0; j < y->value->numel; j++) big = fmax(big, fabs(w[j]));
    for (int64_t j = 0; j < y->value->numel; j++) {
      double d = fabs((double)u[j] - (double)w[j]) / (fabs(w[j]) + big);
      worst = fmax(worst, d);
      if (rtol == 0) ck_assert_msg(memcmp(&u[j], &w[j], 4) == 0, "%s[%lld]: %.9g in %s, %.9g in %s", x->name,
                                   (long long)j, u[j], a, w[j], b);
      else ck_assert_msg(d <= rtol, "%s[%lld]: %.9g in %s, %.9g in %s (relative %.3g > %g)", x->name, (long long)j,
                         u[j], a, w[j], b, d, rtol);
    }
  }
  lt_transformer_free(ma);
  lt_transformer_free(mb);
  return worst;
}

/* The 20 losses of two run directories' metrics.csv: the same bits. */
static void expect_same_losses(const char *a, const char *b) {
  double la[32], lb[32];
  char p[512];
  snprintf(p, sizeof p, "%s/metrics.csv", in_tmp(a));
  ck_assert_int_eq(read_losses(p, la, 32), 20);
  snprintf(p, sizeof p, "%s/metrics.csv", in_tmp(b));
  ck_assert_int_eq(read_losses(p, lb, 32), 20);
  for (int i = 0; i < 20; i++)
    ck_assert_msg(memcmp(&la[i], &lb[i], 8) == 0, "step %d: loss %.17g in %s, %.17g in %s", i + 1, la[i], a, lb[i], b);
}

static const char *ckpt(const char *dir, long long step) {
  static char buf[2][512];
  static int k;
  k ^= 1;
  snprintf(buf[k], sizeof buf[k], "%s/%s/ckpt-%012lld.h5", tmpdir, dir, step);
  return buf[k];
}

/* A small text from a fixed grammar. */
static void write_text(void) {
  static const char *const w[] = {"the cat", "a dog", "the old man", "my sister", "sees", "likes", "the house",
                                  "a red ball"};
  FILE *f = fopen(in_tmp("text.txt"), "w");
  ck_assert_ptr_nonnull(f);
  uint64_t s = 12345;
  for (int i = 0; i < 3000; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    fprintf(f, "%s ", w[(s >> 33) % 8]);
  }
  fclose(f);
}

/* Flags for mpirun itself in train_cmd (the SIGTERM test's). */
static const char *g_mpirun_flags = "";

/* The train command line: N ranks (0: no mpirun), per-rank batch, the run
 * directory, extra flags. */
static const char *train_cmd(int N, int batch, const char *dir, const char *extra) {
  static char cmd[8192];
  char launch[512] = "";
  if (N > 0) snprintf(launch, sizeof launch, MPIRUN " %s -np %d ", g_mpirun_flags, N);
  snprintf(cmd, sizeof cmd,
           "%s'%s' --arch decoder-only --text '%s' --d-model 32 --heads 2 --layers 1 --d-ff 64 --max-len 16 "
           "--seq-len 16 --batch %d --steps 20 --eval-every 10 --ckpt-every 10 --keep 0 --dropout 0 --gen-tokens 0 "
           "--lr 3e-3 --threads 1 --log-every 5 --ckpt-dir '%s' %s",
           launch, LT_TRAIN_EXE, in_tmp("text.txt"), batch, in_tmp(dir), extra);
  return cmd;
}

/* A 2-rank run with flags stopped after step 10 (in directory part) and
 * resumed with resume_flags: its step 20 (losses and parameters) bit for bit
 * the uninterrupted run's in directory full. */
static void expect_resume_bit_exact(const char *part, const char *flags, const char *resume_flags, const char *full) {
  char stop[512], cmd[4096];
  snprintf(stop, sizeof stop, "%s --stop-after 10", flags);
  expect_exit(run(train_cmd(2, 4, part, stop), "part.log"), 0, "part.log");
  snprintf(cmd, sizeof cmd, MPIRUN " -np 2 '%s' --resume '%s' --threads 1 %s", LT_TRAIN_EXE, in_tmp(part),
           resume_flags);
  expect_exit(run(cmd, "resume.log"), 0, "resume.log");
  compare_params(ckpt(part, 20), ckpt(full, 20), 0);
  expect_same_losses(part, full);
}

/* ======================================================================== */
/* mpirun: the tests                                                        */
/* ======================================================================== */

START_TEST(api_on_2_and_3_ranks) {
  for (int N = 2; N <= 3; N++) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, MPIRUN " -np %d '%s' --worker", N, self_exe);
    char log[32];
    snprintf(log, sizeof log, "worker%d.log", N);
    expect_exit(run(cmd, log), 0, log);
    ck_assert_msg(strstr(slurp(in_tmp(log)), "all checks passed"), "%s", tail(slurp(in_tmp(log))));
  }
  expect_no_leftovers();
}
END_TEST

/* N ranks x batch B against 1 process x batch N*B; two runs at N bit-identical. */
START_TEST(equivalence_and_determinism) {
  write_text();
  static const int cases[][2] = {{2, 4}, {3, 2}};
  for (int c = 0; c < 2; c++) {
    int N = cases[c][0], B = cases[c][1];
    char one[32], d1[32], d2[32];
    snprintf(one, sizeof one, "one%d", N), snprintf(d1, sizeof d1, "np%d_a", N), snprintf(d2, sizeof d2, "np%d_b", N);
    /* SGD: AdamW divides each gradient by its running size, so the rounding
     * noise of gradients that are zero in exact arithmetic (the key
     * projection's bias) becomes a step of lr (1e-4 relative differences) */
    const char *sgd = "--optim sgd --lr 0.1 --momentum 0.9";
    expect_exit(run(train_cmd(0, N * B, one, sgd), "one.log"), 0, "one.log");
    expect_exit(run(train_cmd(N, B, d1, sgd), "a.log"), 0, "a.log");
    if (N == 2) expect_exit(run(train_cmd(N, B, d2, sgd), "b.log"), 0, "b.log"); /* bit-identical: once is enough for the time budget */
    if (c == 0) {
      char *log = slurp(in_tmp("a.log"));
      ck_assert_msg(strstr(log, "data parallel: 2 ranks x --batch 4 = a global batch of 8"), "%s", tail(log));
      /* the trainer's own line, for any program on it (printed once: rank 0) */
      const char *dp = strstr(log, "trainer: data parallel over 2 ranks: parameters from rank 0");
      ck_assert_msg(dp && !strstr(dp + 1, "trainer: data parallel"), "%s", tail(log));
      ck_assert_msg(strstr(log, "step 20/20") && strstr(log, "final validation at step 20"), "%s", tail(log));
    }
    double l1[32], la[32], lb[32];
    char p[512];
    snprintf(p, sizeof p, "%s/metrics.csv", in_tmp(one));
    ck_assert_int_eq(read_losses(p, l1, 32), 20);
    snprintf(p, sizeof p, "%s/metrics.csv", in_tmp(d1));
    ck_assert_int_eq(read_losses(p, la, 32), 20);
    snprintf(p, sizeof p, "%s/metrics.csv", in_tmp(N == 2 ? d2 : d1));
    ck_assert_int_eq(read_losses(p, lb, 32), 20);
    double worst = 0;
    for (int i = 0; i < 20; i++) {
      double d = fabs(la[i] - l1[i]) / fabs(l1[i]);
      worst = fmax(worst, d);
      ck_assert_msg(d <= 1e-5, "N=%d step %d: loss %.17g on %d ranks x %d, %.17g on 1 x %d", N, i + 1, la[i], N, B,
                    l1[i], N * B);
      ck_assert_msg(memcmp(&la[i], &lb[i], sizeof la[i]) == 0, "N=%d step %d: two runs differ: %.17g, %.17g", N,
                    i + 1, la[i], lb[i]);
    }
    double wp = compare_params(ckpt(d1, 20), ckpt(one, 20), 1e-5);
    if (N == 2) compare_params(ckpt(d1, 20), ckpt(d2, 20), 0);
    printf("equivalence: %d ranks x batch %d vs 1 x %d over 20 steps: losses within %.2g, parameters within %.2g "
           "(relative)%s\n", N, B, N * B, worst, wp, N == 2 ? "; two runs bit-identical" : "");
  }
  expect_no_leftovers();
}
END_TEST

/* Resume N=2 -> 2 is bit-exact; N=2 -> 1 continues with the global batch. */
START_TEST(resume_same_and_other_n) {
  write_text();
  expect_exit(run(train_cmd(2, 4, "full", ""), "full.log"), 0, "full.log");
  expect_resume_bit_exact("part", "", "", "full");
  /* with dropout: each rank's own stream, restored from the checkpoint (were
   * rank 1's not, its masks after step 10 would differ) */
  expect_exit(run(train_cmd(2, 4, "fulld", "--dropout 0.2"), "fulld.log"), 0, "fulld.log");
  expect_resume_bit_exact("partd", "--dropout 0.2", "", "fulld");
  /* N=2 -> 1: from the step-10 checkpoint of the full run, on one process */
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/'", in_tmp("one"), ckpt("full", 10), in_tmp("one"));
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "'%s' --resume '%s' --threads 1", LT_TRAIN_EXE, in_tmp("one"));
  expect_exit(run(cmd, "one.log"), 0, "one.log");
  char *log = slurp(in_tmp("one.log"));
  ck_assert_msg(strstr(log, "resuming a run of 2 ranks on 1: --batch 4 -> 8 per rank"), "%s", tail(log));
  double worst = compare_params(ckpt("one", 20), ckpt("full", 20), 1e-4);
  printf("resume: 2 -> 2 ranks bit-exact; 2 -> 1 continues, parameters at step 20 within %.2g of the 2-rank run\n",
         worst);
  expect_no_leftovers();
}
END_TEST

/* ZeRO-1 in the train program (--zero 1, AdamW): the losses and parameters of
 * the unsharded run, bit for bit; its checkpoints are the unsharded format:
 * resumed with ZeRO-1 at the same N, bit-exact; resumed without it, too. */
START_TEST(zero1_is_bit_exact_and_resumes) {
  write_text();
  expect_exit(run(train_cmd(2, 4, "base", "--optim adamw"), "base.log"), 0, "base.log");
  expect_exit(run(train_cmd(2, 4, "z", "--optim adamw --zero 1"), "z.log"), 0, "z.log");
  char *log = slurp(in_tmp("z.log"));
  ck_assert_msg(strstr(log, "ZeRO-1: each rank holds the optimizer state of 1/N"), "%s", tail(log));
  ck_assert_msg(strstr(log, "trainer: data parallel over 2 ranks") && strstr(log, "optimizer state sharded (ZeRO-1)"),
                "%s", tail(log));
  expect_same_losses("z", "base");
  compare_params(ckpt("z", 10), ckpt("base", 10), 0);
  compare_params(ckpt("z", 20), ckpt("base", 20), 0);
  /* stop at 10 and resume with ZeRO-1: every rank's state comes back from rank 0's file */
  expect_resume_bit_exact("zp", "--optim adamw --zero 1", "--zero 1", "base");
  /* a ZeRO-1 checkpoint resumed without ZeRO: the same file format, the same bits */
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/'", in_tmp("zn"), ckpt("z", 10), in_tmp("zn"));
  ck_assert_int_eq(system(cmd), 0);
  snprintf(cmd, sizeof cmd, MPIRUN " -np 2 '%s' --resume '%s' --threads 1", LT_TRAIN_EXE, in_tmp("zn"));
  expect_exit(run(cmd, "zn.log"), 0, "zn.log");
  compare_params(ckpt("zn", 20), ckpt("base", 20), 0);
  printf("ZeRO-1: 2 ranks, AdamW, 20 steps: losses and parameters bit-identical to the unsharded run; resumed at "
         "step 10 with and without ZeRO-1: bit-identical\n");
  expect_no_leftovers();
}
END_TEST

/* Any setting that changes the computation, different on one rank: refused
 * at start, before a step, with the flag, both values and the rank named;
 * the data path compared whole (it was cut at 63 bytes), and the data
 * itself (the same relative path, another file on rank 1). */
START_TEST(different_configurations_are_refused) {
  write_text();
  /* two paths that share their first 100 bytes */
  char longdir[512], a_dir[600], b_dir[600], cmdline[4000];
  snprintf(longdir, sizeof longdir, "%s/%0100d", tmpdir, 0);
  snprintf(a_dir, sizeof a_dir, "%s/a", longdir);
  snprintf(b_dir, sizeof b_dir, "%s/b", longdir);
  snprintf(cmdline, sizeof cmdline, "mkdir -p '%s' '%s' && cp '%s' '%s/text.txt' && sed 's/the cat/the cut/' '%s' > '%s/text.txt'",
           a_dir, b_dir, in_tmp("text.txt"), a_dir, in_tmp("text.txt"), b_dir);
  ck_assert_int_eq(system(cmdline), 0);
  char long_text[700];
  snprintf(long_text, sizeof long_text, "--text '%s/text.txt'", b_dir);
  static const struct {
    const char *flag, *expect;
  } cases[] = {{"--seed 7", "'--seed' is '42' on rank 0, '7' on rank 1"},
               {"--batch 3", "'--batch' is '4' on rank 0, '3' on rank 1"},
               {"--dropout 0.1", "'--dropout' is '0' on rank 0, '0.1' on rank 1"},
               {"--precision bf16", "'--precision' is 'f32' on rank 0, 'bf16' on rank 1"},
               {"--label-smoothing 0.1", "'--label-smoothing' is '0' on rank 0, '0.1' on rank 1"},
               {"--max-nonfinite 2", "'--max-nonfinite' is '5' on rank 0, '2' on rank 1"},
               {"--warmup 3", "'--warmup' is '2' on rank 0, '3' on rank 1"},
               {"--beta2 0.99", "'--beta2' is '0.999' on rank 0, '0.99' on rank 1"},
               {"--schedule constant", "'--schedule' is 'cosine' on rank 0, 'constant' on rank 1"},
               {"--d-ff 48", "'--d-ff' is '64' on rank 0, '48' on rank 1"},
               {NULL, "on rank 0, '"}, /* --text: the long path of rank 1 */
               {"--seed 7 --lr 1e-3", "'--lr' is '0.003' on rank 0, '0.001' on rank 1; also '--seed' differs"}};
  const int n = (int)(sizeof cases / sizeof cases[0]);
  for (int c = 0; c < n; c++) {
    char a[8192], cmd[17000];
    snprintf(a, sizeof a, "%s", train_cmd(0, 4, "cfg", "--overwrite"));
    snprintf(cmd, sizeof cmd, MPIRUN " -np 1 %.8000s : -np 1 %.8000s %.700s", a, a, cases[c].flag ? cases[c].flag : long_text);
    double t0 = lt_monotonic_seconds();
    int code = run(cmd, "cfg.log");
    char *log = slurp(in_tmp("cfg.log"));
    const char *flag = cases[c].flag ? cases[c].flag : "--text (a path of 100+ bytes)";
    ck_assert_msg(code == 2, "%s on rank 1: exit %d\n%s", flag, code, tail(log));
    ck_assert_msg(strstr(log, "the configuration differs across ranks") && strstr(log, cases[c].expect),
                  "%s on rank 1: no clear message\n%s", flag, tail(log));
    ck_assert_msg(!strstr(log, "step "), "%s on rank 1: a step ran\n%s", flag, tail(log));
    if (!cases[c].flag) ck_assert_msg(strstr(log, "'--text' is") && strstr(log, b_dir), "%s", tail(log));
    ck_assert_msg(lt_monotonic_seconds() - t0 < 60, "too slow to fail");
  }
  /* the same relative path, other bytes on rank 1 (a cut for a cat: the same size) */
  char a[8192], cmd[18000];
  snprintf(a, sizeof a, "%s", train_cmd(0, 4, "cfg", "--overwrite"));
  char *t = strstr(a, "--text '");
  ck_assert_ptr_nonnull(t);
  char *q = strchr(t + 8, '\'');
  memmove(t + 15, q + 1, strlen(q + 1) + 1);
  memcpy(t, "--text text.txt", 15);
  snprintf(cmd, sizeof cmd, MPIRUN " -np 1 -wdir '%s' %.8000s : -np 1 -wdir '%s' %.8000s", a_dir, a, b_dir, a);
  int code = run(cmd, "cfg.log");
  char *log = slurp(in_tmp("cfg.log"));
  ck_assert_msg(code == 1 && strstr(log, "mpirun: the data: train: the configuration differs across ranks: 'the "
                                    "training data's fingerprint"), "exit %d\n%s", code, tail(log));
  printf("different configurations: %d settings and the data refused at start, naming the flag, both values and the rank\n",
         n + 1);
  expect_no_leftovers();
}
END_TEST

/* Starts mpirun -np N train in the background; its pid. */
static pid_t start_mpirun(int N, const char *dir, const char *extra, const char *log) {
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "exec %s > '%s' 2>&1", train_cmd(N, 4, dir, extra), in_tmp(log));
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  g_mpirun = pid;
  return pid;
}

/* Waits for pid at most seconds; its exit status (128 + signal), or -1 on a timeout (then kills it). */
static int wait_for(pid_t pid, double seconds, double *took) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    clock_gettime(CLOCK_MONOTONIC, &b);
    *took = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (w == pid) g_mpirun = 0;
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (*took > seconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(20000);
  }
}

/* The pids of the ranks (children of mpirun running train) into pids. */
static int rank_pids(pid_t mpirun, pid_t *pids, int cap) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "pgrep -P %d", (int)mpirun);
  FILE *f = popen(cmd, "r");
  ck_assert_ptr_nonnull(f);
  int n = 0;
  long v;
  while (n < cap && fscanf(f, "%ld", &v) == 1) pids[n++] = (pid_t)v;
  pclose(f);
  return n;
}

/* Waits until the run's log shows step >= the given step (progress lines). */
static void wait_for_step(const char *log, int step) {
  char want[32];
  snprintf(want, sizeof want, "step %6d/100000", step); /* the width of --steps 100000 */
  for (int i = 0; i < 600; i++) {
    FILE *f = fopen(in_tmp(log), "r");
    if (f) {
      fclose(f);
      if (strstr(slurp(in_tmp(log)), want)) return;
    }
    usleep(50000);
  }
  ck_abort_msg("the run did not reach step %d:\n%s", step, tail(slurp(in_tmp(log))));
}

/* A rank killed mid-run ends the job, non-zero, within seconds. */
START_TEST(a_killed_rank_ends_the_job) {
  write_text();
  pid_t m = start_mpirun(2, "kill", "--steps 100000 --eval-every 0 --ckpt-every 0", "kill.log");
  wait_for_step("kill.log", 5);
  pid_t r[8];
  int n = 0;
  for (int i = 0; i < 50 && (n = rank_pids(m, r, 8)) < 1; i++) usleep(100000);
  ck_assert_msg(n >= 1, "no rank process found under mpirun %d", (int)m);
  ck_assert_int_eq(kill(r[n - 1], SIGKILL), 0); /* mpirun's children are the ranks: kill the last one */
  double took;
  int code = wait_for(m, 20, &took);
  ck_assert_msg(code != -1, "the job did not end within 20 s of a rank's death:\n%s", tail(slurp(in_tmp("kill.log"))));
  ck_assert_msg(code != 0, "exit 0 after a rank was killed:\n%s", tail(slurp(in_tmp("kill.log"))));
  printf("a killed rank: mpirun ended the job in %.1f s with exit %d\n", took, code);
  expect_no_leftovers();
}
END_TEST

/* The pid of rank `rank` among mpirun's children (OMPI_COMM_WORLD_RANK in its environment), or -1. */
static pid_t rank_pid(pid_t mpirun, int rank) {
  pid_t r[8];
  int n = rank_pids(mpirun, r, 8);
  char want[64];
  int wl = snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank) + 1; /* with its '\0' */
  for (int i = 0; i < n; i++) {
    char path[64], env[1 << 15];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)r[i]);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    size_t len = fread(env, 1, sizeof env, f);
    fclose(f);
    for (size_t k = 0; k + (size_t)wl <= len; k += strlen(env + k) + 1)
      if (!memcmp(env + k, want, (size_t)wl)) return r[i];
  }
  return -1;
}

/* A rank stopped (SIGSTOP) mid-run: the others' next collective gives up
 * after --dist-timeout, rank 0 names the stopped rank, the job ends non-zero
 * and no process is left (the stopped one included). */
START_TEST(a_stopped_rank_ends_the_job_after_the_timeout) {
  write_text();
  pid_t m = start_mpirun(2, "hang", "--steps 100000 --eval-every 0 --ckpt-every 0 --dist-timeout 6", "hang.log");
  wait_for_step("hang.log", 5);
  pid_t r1 = -1;
  for (int i = 0; i < 50 && (r1 = rank_pid(m, 1)) < 0; i++) usleep(100000);
  ck_assert_msg(r1 > 0, "rank 1's process not found under mpirun %d", (int)m);
  ck_assert_int_eq(kill(r1, SIGSTOP), 0);
  double took;
  int code = wait_for(m, 60, &took);
  if (code == -1 || kill(r1, 0) == 0) kill(r1, SIGKILL); /* ours: never leave it stopped */
  const char *log = slurp(in_tmp("hang.log"));
  ck_assert_msg(code != -1, "the job did not end within 60 s of a rank's stop:\n%s", tail(log));
  ck_assert_msg(code != 0, "exit 0 with a stopped rank:\n%s", tail(log));
  ck_assert_msg(strstr(log, "made no progress for") && strstr(log, "rank 1 did not reach it"),
                "rank 0 did not name the stopped rank:\n%s", tail(log));
  printf("a stopped rank (--dist-timeout 6): the job ended in %.1f s with exit %d, naming rank 1\n", took, code);
  expect_no_leftovers();
}
END_TEST

/* SIGTERM to mpirun (Ctrl-C is the same path): every rank stops after its
 * step, rank 0 saves ONE checkpoint, the job ends and leaves no process.
 * Open MPI 4.1's mpirun SIGKILLs the ranks odls_base_sigkill_timeout seconds
 * after its SIGTERM (default 1 s: too short for a step and a save on a
 * loaded machine), so the run gives it 5 s, as docs/distributed.md advises. */
START_TEST(sigterm_to_mpirun_saves_one_checkpoint) {
  write_text();
  g_mpirun_flags = "--mca odls_base_sigkill_timeout 5";
  pid_t m = start_mpirun(2, "term", "--steps 100000 --eval-every 0 --ckpt-every 0", "term.log");
  g_mpirun_flags = "";
  wait_for_step("term.log", 5);
  ck_assert_int_eq(kill(m, SIGTERM), 0);
  double took;
  int code = wait_for(m, 45, &took);
  const char *log = slurp(in_tmp("term.log"));
  ck_assert_msg(code != -1, "mpirun did not end within 45 s of SIGTERM:\n%s", tail(log));
  /* The handler's line is written at once; the closing "interrupted by
   * SIGTERM at step N" line may be lost, because mpirun stops forwarding the
   * ranks' output once it is tearing the job down (docs/distributed.md). */
  ck_assert_msg(strstr(log, "signal received: stopping after this step"), "no rank reported the signal:\n%s",
                tail(log));
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '^ckpt-.*\\.h5$'", in_tmp("term"));
  FILE *f = popen(cmd, "r");
  int n = -1;
  ck_assert(f && fscanf(f, "%d", &n) == 1);
  pclose(f);
  ck_assert_msg(n == 1, "%d checkpoints after SIGTERM, want 1:\n%s", n, tail(log));
  printf("SIGTERM to mpirun: one checkpoint, mpirun ended in %.1f s with exit %d\n", took, code);
  expect_no_leftovers();
}
END_TEST

/* The pair tasks' command line (a tiny encoder-decoder on --task reverse,
 * SGD: see equivalence_and_determinism), as train_cmd. */
static const char *pairs_cmd(int N, int batch, const char *dir, const char *extra) {
  static char cmd[8192];
  char launch[512] = "";
  if (N > 0) snprintf(launch, sizeof launch, MPIRUN " -np %d ", N);
  snprintf(cmd, sizeof cmd,
           "%s'%s' --task reverse --task-max-len 6 --task-train 400 --task-valid 40 --d-model 32 --heads 2 "
           "--layers 1 --d-ff 64 --batch %d --steps 20 --eval-every 10 --eval-examples 40 --examples 3 "
           "--ckpt-every 10 --keep 0 --dropout 0 --optim sgd --lr 0.1 --momentum 0.9 --threads 1 --log-every 5 "
           "--ckpt-dir '%s' %s",
           launch, LT_TRAIN_EXE, batch, in_tmp(dir), extra);
  return cmd;
}

/* The pair tasks (--task, --tsv): a batch's pairs have different numbers of
 * target tokens, and the loss is the mean over the step's target tokens, so
 * each rank's loss weighs its share of the global batch's tokens. 2 ranks x 4
 * pairs give 1 x 8's losses, validation and parameters; the validation and
 * exact match are split across the ranks; resume 2 -> 2 is bit-exact. */
START_TEST(pair_tasks_equivalence_and_resume) {
  expect_exit(run(pairs_cmd(0, 8, "p1", ""), "p1.log"), 0, "p1.log");
  expect_exit(run(pairs_cmd(2, 4, "p2", ""), "p2.log"), 0, "p2.log");
  const char *log = slurp(in_tmp("p2.log"));
  ck_assert_msg(strstr(log, "data parallel: 2 ranks x --batch 4 = a global batch of 8"), "%s", tail(log));
  ck_assert_msg(strstr(log, "held-out examples") && !strstr(log, "-> ?") && strstr(log, "/40)"),
                "rank 0 lacks decoded examples or the exact match count:\n%s", tail(log));
  /* rank 0 shows the outputs one process shows (other ranks decoded some of them) */
  char shown[2][4096];
  for (int k = 0; k < 2; k++) {
    const char *l = slurp(in_tmp(k ? "p2.log" : "p1.log")), *a0 = strstr(l, "held-out examples"),
               *a1 = a0 ? strstr(a0, "\ndone:") : NULL;
    ck_assert_msg(a0 && a1, "no examples in p%d.log", k + 1);
    snprintf(shown[k], sizeof shown[k], "%.*s", (int)(a1 - a0), a0);
  }
  ck_assert_msg(!strcmp(shown[0], shown[1]), "examples differ:\n%s\n--- 2 ranks:\n%s", shown[0], shown[1]);
  double a[4][32], b[4][32];
  static const int cols[4] = {3, 10, 11, 12}; /* train_loss, val_loss, val_token_acc, val_exact_match */
  char p1[512], p2[512];
  snprintf(p1, sizeof p1, "%s/metrics.csv", in_tmp("p1"));
  snprintf(p2, sizeof p2, "%s/metrics.csv", in_tmp("p2"));
  double worst = 0;
  for (int c = 0; c < 4; c++) {
    ck_assert_int_eq(lt_test_csv_column(p1, cols[c], a[c], 32), 20);
    ck_assert_int_eq(lt_test_csv_column(p2, cols[c], b[c], 32), 20);
    for (int i = 0; i < 20; i++) {
      if (c > 0 && (i + 1) % 10) continue; /* validation at steps 10 and 20 */
      double d = fabs(b[c][i] - a[c][i]) / fmax(fabs(a[c][i]), 1e-3);
      if (c == 0) worst = fmax(worst, d);
      ck_assert_msg(d <= (c == 3 ? 0.026 : 1e-5), "column %d, step %d: %.17g on 2 ranks x 4, %.17g on 1 x 8",
                    cols[c], i + 1, b[c][i], a[c][i]); /* exact match: one example of 40 may flip on rounding */
    }
  }
  double wp = compare_params(ckpt("p2", 20), ckpt("p1", 20), 1e-5);
  /* resume 2 -> 2: bit-exact */
  expect_exit(run(pairs_cmd(2, 4, "pp", "--stop-after 10"), "pp.log"), 0, "pp.log");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, MPIRUN " -np 2 '%s' --resume '%s' --threads 1", LT_TRAIN_EXE, in_tmp("pp"));
  expect_exit(run(cmd, "ppr.log"), 0, "ppr.log");
  compare_params(ckpt("pp", 20), ckpt("p2", 20), 0);
  snprintf(p1, sizeof p1, "%s/metrics.csv", in_tmp("pp"));
  ck_assert_int_eq(read_losses(p1, a[0], 32), 20);
  for (int i = 0; i < 20; i++)
    ck_assert_msg(memcmp(&a[0][i], &b[0][i], 8) == 0, "resumed step %d: %.17g vs %.17g", i + 1, a[0][i], b[0][i]);
  printf("pair task: 2 ranks x 4 vs 1 x 8 over 20 steps: losses within %.2g, parameters within %.2g (relative); "
         "resume 2 -> 2 bit-exact\n", worst, wp);
  expect_no_leftovers();
}
END_TEST

/* examples/dist_mlp.c, a hand-written loop with the dist calls: 2 ranks x
 * batch 8 end where 1 process x batch 16 does. */
START_TEST(the_example_loop_is_equivalent) {
  double v[2][2];
  for (int k = 0; k < 2; k++) {
    char cmd[2048], log[16];
    snprintf(cmd, sizeof cmd, "%s'%s' --batch %d --steps 40", k ? MPIRUN " -np 2 " : "", LT_DIST_MLP_EXE, k ? 8 : 16);
    snprintf(log, sizeof log, "mlp%d.log", k);
    expect_exit(run(cmd, log), 0, log);
    const char *out = slurp(in_tmp(log)), *f = strstr(out, "final loss ");
    ck_assert_msg(f && sscanf(f, "final loss %lf weight sum %lf", &v[k][0], &v[k][1]) == 2, "%s", tail(out));
  }
  for (int i = 0; i < 2; i++)
    ck_assert_msg(fabs(v[1][i] - v[0][i]) <= 1e-5 * fabs(v[0][i]), "%s: %.9g on 2 ranks, %.9g on 1",
                  i ? "weight sum" : "loss", v[1][i], v[0][i]);
  printf("examples/dist_mlp: 2 x 8 vs 1 x 16 after 40 steps: loss %.9g vs %.9g\n", v[1][0], v[0][0]);
  expect_no_leftovers();
}
END_TEST

/* The classifier run (train/classify.h, examples/fashion_mnist_mlp.c):
 * stopped at step 20 of 40 on 2 ranks x batch 16, resumed on 1 process: it
 * keeps the global batch (32 per rank) and ends where the 2-rank run does. */
START_TEST(the_classifier_resumes_on_fewer_ranks) {
  if (access(LT_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
    printf("the classifier's resume: skipped (no Fashion-MNIST in " LT_FASHION_MNIST_DIR ")\n");
    return;
  }
  const char *common = "--batch 16 --max-steps 40 --threads 1 --log-every 10";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, MPIRUN " -np 2 '%s' %s --dir '%s'", LT_MLP_EXE, common, in_tmp("c1"));
  expect_exit(run(cmd, "c1.log"), 0, "c1.log");
  snprintf(cmd, sizeof cmd, MPIRUN " -np 2 '%s' %s --dir '%s' --stop-after 20", LT_MLP_EXE, common, in_tmp("c2"));
  expect_exit(run(cmd, "c2.log"), 0, "c2.log");
  snprintf(cmd, sizeof cmd, "'%s' %s --dir '%s' --resume", LT_MLP_EXE, common, in_tmp("c2"));
  expect_exit(run(cmd, "c2r.log"), 0, "c2r.log");
  const char *log = slurp(in_tmp("c2r.log"));
  ck_assert_msg(strstr(log, "resuming a run of a global batch of 32 on 1 rank: batch 16 -> 32 per rank") &&
                    strstr(log, "resumed from") && strstr(log, "at step 20"),
                "%s", tail(log));
  double a[48], b[48], acc[2];
  char p[512];
  snprintf(p, sizeof p, "%s/metrics.csv", in_tmp("c1"));
  ck_assert_int_eq(read_losses(p, a, 48), 40);
  snprintf(p, sizeof p, "%s/metrics.csv", in_tmp("c2"));
  ck_assert_int_eq(read_losses(p, b, 48), 40);
  double worst = 0;
  for (int i = 0; i < 40; i++) {
    double d = fabs(b[i] - a[i]) / fabs(a[i]);
    worst = fmax(worst, d);
    ck_assert_msg(i >= 20 ? d <= 1e-4 : d == 0, "step %d: loss %.9g resumed on 1, %.9g on 2 ranks", i + 1, b[i], a[i]);
  }
  for (int k = 0; k < 2; k++) {
    const char *f = strstr(slurp(in_tmp(k ? "c2r.log" : "c1.log")), "test_accuracy=");
    ck_assert_msg(f && sscanf(f, "test_accuracy=%lf", &acc[k]) == 1, "no summary in %s", k ? "c2r.log" : "c1.log");
  }
  ck_assert_msg(fabs(acc[0] - acc[1]) <= 2e-3, "test accuracy %.4f after resuming on 1, %.4f on 2 ranks", acc[1], acc[0]);
  printf("the classifier: 2 -> 1 rank resume, losses of steps 21-40 within %.2g of the 2-rank run, test accuracy "
         "%.4f vs %.4f\n", worst, acc[1], acc[0]);
  expect_no_leftovers();
}
END_TEST

#endif /* LT_MPIEXEC */

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--worker")) return worker(argc, argv);
  /* Three ctest entries, each under a minute on a loaded machine: test_dist
   * (the size-1 world and most mpirun tests), test_dist_stop
   * (LT_DIST_PART=stop: SIGTERM to mpirun, the example's loop, the
   * classifier's resume on 1 rank) and test_dist_pairs (LT_DIST_PART=pairs:
   * the pair tasks, a stopped rank). */
  const char *part = getenv("LT_DIST_PART");
  Suite *s = suite_create(part ? part : "dist");
  if (!part) {
    TCase *api = tcase_create("size1");
    tcase_add_test(api, size_one_world_is_a_no_op);
    tcase_add_test(api, zero_in_a_world_of_one);
    suite_add_tcase(s, api);
  }
#ifdef LT_MPIEXEC
  snprintf(self_exe, sizeof self_exe, "%s", argv[0]);
  if (argv[0][0] != '/') {
    char cwd[512];
    if (getcwd(cwd, sizeof cwd)) snprintf(self_exe, sizeof self_exe, "%s/%s", cwd, argv[0]);
  }
  const bool stop_part = part && !strcmp(part, "stop"), pairs_part = part && !strcmp(part, "pairs"),
             zero_part = part && !strcmp(part, "zero");
  TCase *tc = tcase_create(part ? part : "mpirun");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  if (stop_part) {
    tcase_add_test(tc, sigterm_to_mpirun_saves_one_checkpoint);
    tcase_add_test(tc, the_example_loop_is_equivalent);
    tcase_add_test(tc, the_classifier_resumes_on_fewer_ranks);
  } else if (zero_part) {
    tcase_add_test(tc, zero1_is_bit_exact_and_resumes);
  } else if (pairs_part) {
    tcase_add_test(tc, pair_tasks_equivalence_and_resume);
    tcase_add_test(tc, a_stopped_rank_ends_the_job_after_the_timeout);
  } else {
    tcase_add_test(tc, api_on_2_and_3_ranks);
    tcase_add_test(tc, equivalence_and_determinism);
    tcase_add_test(tc, resume_same_and_other_n);
    tcase_add_test(tc, different_configurations_are_refused);
    tcase_add_test(tc, a_killed_rank_ends_the_job);
  }
  suite_add_tcase(s, tc);
#endif
  return lt_test_run(s);
}
