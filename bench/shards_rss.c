/*
 * bench/shards_rss.c: the shard loader's memory against the corpus size
 * (docs/datasets.md "Token shards", memory).
 *
 *   bench_shards_rss DIR MiB [MiB ...]
 *
 * For each size: writes DIR/<MiB>/train_*.bin, a generated corpus of that
 * many MiB of uint16 shards of 100M tokens (llm.c's shard size; 200 MB each,
 * the last shorter) with lt_shard_writer, then in a fresh child process opens
 * it with lt_shard_loader_open (every token checked against a vocabulary of
 * 50,257) and reads 1000 shuffled batches of 8 x 1024 windows, printing the
 * child's peak RSS before opening, after opening and after reading, and the
 * seconds of each phase; then deletes the corpus. The per-size child keeps
 * the measures apart (VmHWM only grows).
 *
 * What this is not: a test (tests/test_shards.c holds the smaller one that
 * runs in ./do.sh test); the figures are for the docs.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "datasets/datasets.h"

static int measure(const char *dir, long mib) {
  char pat[4200];
  snprintf(pat, sizeof pat, "%s/train_*.bin", dir);
  const double h0 = lt_bench_peak_rss_mib();
  double t0 = lt_monotonic_seconds();
  lt_shard_loader_opts o = LT_SHARD_LOADER_DEFAULTS(8, 1024);
  o.vocab = 50257;
  lt_shard_loader *L = lt_shard_loader_open(pat, &o);
  if (!L) return fprintf(stderr, "bench_shards_rss: %s\n", lt_last_error()), 1;
  const double h1 = lt_bench_peak_rss_mib();
  double t1 = lt_monotonic_seconds();
  for (int i = 0; i < 1000; i++) {
    lt_tensor *x, *y;
    if (lt_shard_loader_next(L, &x, &y) != LT_OK) return fprintf(stderr, "bench_shards_rss: %s\n", lt_last_error()), 1;
    lt_tensor_free(x), lt_tensor_free(y);
  }
  const double h2 = lt_bench_peak_rss_mib();
  double t2 = lt_monotonic_seconds();
  printf("| %ld MiB | %lld | %lld | %.1f | %.1f | %.1f | %.1f s | %.2f s |\n", mib,
         (long long)lt_shard_loader_num_shards(L), (long long)lt_shard_loader_num_tokens(L), h0, h1, h2, t1 - t0, t2 - t1);
  fflush(stdout);
  lt_shard_loader_free(L);
  return 0;
}

int main(int argc, char **argv) {
  char *pos[32];
  int npos = 32;
  const int bad = lt_bench_parse(argc, argv, NULL, 0, "bench_shards_rss DIR MiB [MiB ...]", pos, &npos);
  if (bad) return bad;
  if (npos < 2) return fprintf(stderr, "usage: bench_shards_rss DIR MiB [MiB ...]\n"), 2;
  printf("| corpus | shards | tokens | peak RSS at start (MiB) | after open | after 1000 batches | open (check) | "
         "1000 batches |\n|---|---|---|---|---|---|---|---|\n");
  fflush(stdout);
  for (int a = 1; a < npos; a++) {
    long mib = atol(pos[a]);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%ld", pos[0], mib);
    mkdir(pos[0], 0755);
    if (mkdir(dir, 0755) != 0) return fprintf(stderr, "bench_shards_rss: cannot create %s (exists?)\n", dir), 1;
    lt_shard_writer *w = lt_shard_writer_new(dir, "train", 50257, 100000000);
    if (!w) return fprintf(stderr, "bench_shards_rss: %s\n", lt_last_error()), 1;
    enum { CH = 1 << 16 };
    int64_t *buf = malloc(sizeof *buf * CH);
    for (int64_t i = 0; i < (int64_t)mib * (1 << 20) / 2; i += CH) {
      for (int64_t k = 0; k < CH; k++) buf[k] = (i + k) * 7919 % 50257;
      if (lt_shard_writer_add(w, buf, CH) != LT_OK) return fprintf(stderr, "bench_shards_rss: %s\n", lt_last_error()), 1;
    }
    free(buf);
    if (lt_shard_writer_close(w, NULL, NULL) != LT_OK) return fprintf(stderr, "bench_shards_rss: %s\n", lt_last_error()), 1;
    pid_t pid = fork();
    if (pid == 0) _exit(measure(dir, mib));
    int st;
    waitpid(pid, &st, 0);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_shards_rss: could not remove %s\n", dir);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
  }
  return 0;
}
