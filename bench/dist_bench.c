/*
 * bench/dist_bench.c: the gradient reduction of dist/dist.h on this machine.
 * Run under mpirun (docs/distributed.md has the figures):
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_dist
 *
 * For f32 messages of 4 B .. 64 MB: the time of lt_dist_grads_start +
 * lt_dist_grads_finish on one parameter of that size (MPI_Iallreduce, a
 * copy in and out, the division by N), median of repeats, and the bus
 * bandwidth 2 (N-1)/N x bytes / time (the bytes a ring allreduce moves per
 * rank, as NCCL's tests report it). Then a 100 MB gradient in buckets of
 * 1, 5, 25 and 100 MB. Rank 0 prints; without mpirun it says so.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench_util.h"
#include "dist/dist.h"

/* Median seconds of one reduction of params (reps repeats after 2 warm-ups). */
static double time_reduce(lt_params *p, size_t bucket, int reps) {
  lt_dist_grads *g = lt_dist_grads_new(p, bucket);
  if (!g) return fprintf(stderr, "%s\n", lt_last_error()), -1;
  double t[64];
  for (int i = 0; i < reps + 2; i++) {
    lt_dist_barrier();
    double t0 = lt_monotonic_seconds();
    if (lt_dist_grads_start(g) != LT_OK || lt_dist_grads_finish(g) != LT_OK) return fprintf(stderr, "%s\n", lt_last_error()), -1;
    double dt = lt_monotonic_seconds() - t0;
    lt_dist_allreduce_f64(&dt, 1, LT_DIST_MAX); /* the slowest rank's */
    if (i >= 2) t[i - 2] = dt;
  }
  lt_dist_grads_free(g);
  qsort(t, (size_t)reps, sizeof t[0], lt_bench_cmp_double);
  return t[reps / 2];
}

/* A store of k parameters of n f32 elements each, with gradients. */
static lt_params *store(int k, int64_t n) {
  lt_params *p = lt_params_new();
  for (int i = 0; i < k; i++) {
    char name[32];
    snprintf(name, sizeof name, "p%d.weight", i);
    lt_tensor *t = lt_zeros(LT_DTYPE_F32, 1, (int64_t[]){n});
    lt_params_add(p, name, t, 0);
    t->grad = lt_tensor_keep(lt_full(LT_DTYPE_F32, 1, (int64_t[]){n}, 1.0));
  }
  return p;
}

int main(int argc, char **argv) {
  if (lt_dist_init(&argc, &argv) != LT_OK) return fprintf(stderr, "%s\n", lt_last_error()), 1;
  const int bad = lt_bench_parse(argc, argv, NULL, 0, "mpirun -np N bench_dist", NULL, NULL);
  if (bad) return lt_dist_finalize(), bad;
  const int N = lt_dist_size(), R = lt_dist_rank();
  if (N < 2) {
    printf("bench_dist: run it under mpirun -np N (N >= 2): this is a world of %d\n", N);
    return 0;
  }
  if (R == 0) printf("bench_dist: %d ranks, f32 gradient allreduce (start + finish), median\n%12s %12s %12s\n", N,
                     "bytes", "time_us", "busbw_GB/s");
  for (int64_t bytes = 4; bytes <= ((int64_t)64 << 20); bytes *= 4) {
    lt_params *p = store(1, bytes / 4);
    int reps = bytes <= (1 << 20) ? 50 : 9;
    double t = time_reduce(p, 0, reps);
    if (R == 0)
      printf("%12lld %12.1f %12.3f\n", (long long)bytes, 1e6 * t, 2.0 * (N - 1) / N * (double)bytes / t / 1e9);
    lt_params_free(p);
  }
  lt_params *p = store(100, 262144); /* 100 parameters of 1 MB: 100 MB */
  if (R == 0) printf("100 MB of gradients (100 tensors of 1 MB) by bucket size:\n%12s %8s %12s\n", "bucket_MB", "buckets", "time_ms");
  static const size_t mb[] = {1, 5, 25, 100};
  for (int i = 0; i < 4; i++) {
    lt_dist_grads *g = lt_dist_grads_new(p, mb[i] << 20);
    int nb = lt_dist_grads_buckets(g);
    lt_dist_grads_free(g);
    double t = time_reduce(p, mb[i] << 20, 5);
    if (R == 0) printf("%12zu %8d %12.1f\n", mb[i], nb, 1e3 * t);
  }
  lt_params_free(p);
  lt_dist_finalize();
  return 0;
}
