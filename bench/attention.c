/*
 * bench/attention.c: lt_scaled_dot_product_attention, fused against unfused
 * (issue 15; docs/attention.md records the results): milliseconds of the
 * forward and of forward + backward, and the peak RSS, for q, k, v of
 * [B, NH, T, HS] f32 at each T, causal or not, head sizes 64 and 128.
 *
 *   bench_attention                       T 128,512,1024,2048,4096; HS 64,128
 *   bench_attention --T 128,1024 --hs 64 --repeat 3 --B 1 --NH 4
 *   bench_attention --one fused 1024 64 1 (one configuration, this process)
 *   OMP_WAIT_POLICY=PASSIVE bench_attention --cpu   (CPU time, not wall time)
 *   bench_attention --autocast   (both paths under lt_set_autocast(bf16):
 *                                 their products on the bf16 engine)
 *   bench_attention --only fwd|fwdbwd --one ...   (only the forward or
 *                                 only the forward + backward runs, 0 printed
 *                                 for the other: for profiles, the backward
 *                                 being fwdbwd's minus fwd's)
 *
 * Every (path, T, HS, causal) runs in its own process (the program runs
 * itself with --one), so each peak RSS (getrusage ru_maxrss) is that
 * configuration's alone: the forward first (its peak read before the
 * backward runs), then forward + backward. The backward is of
 * sum(out * r) with r fixed. Each time is the best of --repeat runs after one
 * warm-up. The load line is uptime's: on a shared machine compare the two
 * paths of the same run (ratios), not absolute figures.
 *
 * What this is not: a whole training step (bench/train_step.c and the
 * train program are; docs/attention.md has both).
 */
#include "bench/bench_util.h"
#include "libtensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what) {
  fprintf(stderr, "bench_attention: %s: %s\n", what, lt_last_error());
  exit(1);
}

/* --cpu: the process's CPU time (all threads) instead of wall time; with
 * OMP_WAIT_POLICY=PASSIVE (no spinning threads) it counts the work done and
 * is steadier than wall time on a loaded machine. */
static bool cpu_time;
/* --autocast: forward and backward under lt_set_autocast(LT_DTYPE_BF16). */
static bool autocast;
/* --only fwd|fwdbwd: run only mode 0 (forward) or 1 (forward + backward);
 * -1: both. */
static int only_mode = -1;

static double now(void) { return cpu_time ? lt_bench_cpu_now() : lt_monotonic_seconds(); }

/* One configuration in this process: prints
 *   fwd_ms fwd_peak_mb fwdbwd_ms fwdbwd_peak_mb */
static int run_one(const char *path, int64_t T, int64_t HS, bool causal, int64_t B, int64_t NH, int repeat) {
  if (autocast) lt_set_autocast(LT_DTYPE_BF16);
  lt_generator *g = lt_generator_new(1);
  lt_tensor *q = lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS));
  lt_tensor *k = lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS));
  lt_tensor *v = lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS));
  lt_tensor *r = lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, NH, T, HS));
  if (!q || !k || !v || !r) die("inputs");
  lt_attention_opts o = {.causal = causal,
                         .impl = strcmp(path, "fused") ? LT_ATTENTION_UNFUSED : LT_ATTENTION_FUSED};
  double best[2] = {1e30, 1e30}, peak[2] = {0, 0};
  for (int mode = 0; mode < 2; mode++) {
    if (only_mode >= 0 && mode != only_mode) {
      best[mode] = 0;
      continue;
    }
    if (mode == 1)
      for (int i = 0; i < 3; i++) lt_requires_grad_((lt_tensor *[]){q, k, v}[i], true);
    for (int it = 0; it <= repeat; it++) {
      lt_scope *s = lt_scope_begin();
      const double t0 = now();
      lt_tensor *out = lt_scaled_dot_product_attention(q, k, v, &o, NULL, NULL);
      if (!out) die("attention");
      if (mode == 1) {
        lt_tensor *loss = lt_sum(lt_mul(out, r), 0, NULL, false);
        if (!loss || lt_backward(loss, NULL, false) != LT_OK) die("backward");
      }
      const double dt = now() - t0;
      lt_scope_end(s);
      if (mode == 1)
        for (int i = 0; i < 3; i++) {
          lt_tensor *x = (lt_tensor *[]){q, k, v}[i];
          lt_tensor_free(x->grad);
          x->grad = NULL;
        }
      if (it > 0 && dt < best[mode]) best[mode] = dt; /* it 0 is the warm-up */
    }
    peak[mode] = lt_bench_peak_rss_mib();
  }
  printf("%.3f %.1f %.3f %.1f\n", 1e3 * best[0], peak[0], 1e3 * best[1], peak[1]);
  lt_tensor_free(q), lt_tensor_free(k), lt_tensor_free(v), lt_tensor_free(r);
  lt_generator_free(g);
  return 0;
}


int main(int argc, char **argv) {
  int64_t Ts[8] = {128, 512, 1024, 2048, 4096}, HSs[4] = {64, 128}, B = 1, NH = 4, repeat = 2;
  int nT = 5, nHS = 2;
  const char *only = NULL, *one = NULL;
  const lt_bench_opt opts[] = {
      {"--cpu", LT_BENCH_FLAG, &cpu_time, 0, 0, NULL},
      {"--autocast", LT_BENCH_FLAG, &autocast, 0, 0, NULL},
      {"--only", LT_BENCH_STRING, &only, 0, 0, NULL},
      {"--one", LT_BENCH_STRING, &one, 0, 0, NULL},
      {"--T", LT_BENCH_INT_LIST, Ts, 1, 8, &nT},
      {"--hs", LT_BENCH_INT_LIST, HSs, 1, 4, &nHS},
      {"--repeat", LT_BENCH_INT, &repeat, 1, 0, NULL},
      {"--B", LT_BENCH_INT, &B, 1, 0, NULL},
      {"--NH", LT_BENCH_INT, &NH, 1, 0, NULL},
  };
  char *pos[3];
  int npos = 3;
  const int bad = lt_bench_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts),
                                 "bench_attention [--T 128,512] [--hs 64,128] [--repeat N] [--B N] [--NH N] [--cpu] "
                                 "[--autocast] [--only fwd|fwdbwd] [--one fused|unfused T HS CAUSAL]",
                                 pos, &npos);
  if (bad) return bad;
  if (only) only_mode = strcmp(only, "fwd") ? 1 : 0;
  if (one) {
    if (npos != 3) return fprintf(stderr, "bench_attention: --one takes PATH T HS CAUSAL\n"), 2;
    return run_one(one, atoll(pos[0]), atoll(pos[1]), atoi(pos[2]), B, NH, (int)repeat);
  }
  if (npos) return fprintf(stderr, "bench_attention: unexpected argument %s\n", pos[0]), 2;
  FILE *up = popen("uptime", "r");
  char load[256] = "";
  if (up && fgets(load, sizeof load, up)) printf("load at start:%s", strchr(load, ',') ? strchr(load, ',') + 1 : load);
  if (up) pclose(up);
  printf("B %lld, NH %lld, f32%s, %d threads, best of %d, %s\n", (long long)B, (long long)NH,
         autocast ? " under autocast (bf16 products)" : "", lt_get_num_threads(), (int)repeat, cpu_time ? "CPU time of all threads (ms)" : "wall time (ms)");
  if (lt_bench_print_runtime(stdout) != LT_OK) die("runtime info");
  printf("| HS | T | causal | fwd unfused ms | fwd fused ms | speed-up | fwd+bwd unfused ms | fwd+bwd fused ms | "
         "speed-up | peak MB unfused | peak MB fused |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int h = 0; h < nHS; h++)
    for (int c = 1; c >= 0; c--)
      for (int t = 0; t < nT; t++) {
        double res[2][4];
        for (int p = 0; p < 2; p++) {
          char cmd[512];
          snprintf(cmd, sizeof cmd, "/proc/%d/exe%s%s --B %lld --NH %lld --repeat %d --one %s %lld %lld %d",
                   (int)getpid(), cpu_time ? " --cpu" : "", autocast ? " --autocast" : "", (long long)B, (long long)NH, (int)repeat,
                   p ? "fused" : "unfused", (long long)Ts[t], (long long)HSs[h], c);
          FILE *f = popen(cmd, "r");
          if (!f || fscanf(f, "%lf %lf %lf %lf", &res[p][0], &res[p][1], &res[p][2], &res[p][3]) != 4) {
            fprintf(stderr, "bench_attention: %s failed\n", cmd);
            return 1;
          }
          pclose(f);
        }
        printf("| %lld | %lld | %s | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %.0f | %.0f |\n", (long long)HSs[h],
               (long long)Ts[t], c ? "yes" : "no", res[0][0], res[1][0], res[0][0] / res[1][0], res[0][2], res[1][2],
               res[0][2] / res[1][2], res[0][3], res[1][3]);
        fflush(stdout);
      }
  up = popen("uptime", "r");
  if (up && fgets(load, sizeof load, up)) printf("load at end:%s", strchr(load, ',') ? strchr(load, ',') + 1 : load);
  if (up) pclose(up);
  return 0;
}
