/*
 * bench/bench_util.c: the benchmarks' shared clocks, median, RSS, load
 * mark, flag parser and runtime line (bench/bench_util.h has the contract).
 */
#include "bench/bench_util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

double lt_bench_cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int lt_bench_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double lt_bench_median(double *v, int n) {
  if (n < 1) return NAN;
  qsort(v, (size_t)n, sizeof *v, lt_bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double lt_bench_peak_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

lt_bench_mark lt_bench_mark_now(void) {
  lt_bench_mark m = {lt_monotonic_seconds(), 0, 0};
  FILE *f = fopen("/proc/stat", "r");
  if (f) {
    unsigned long long v[8] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]) == 8) /* user nice system idle iowait irq softirq steal */
      m.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
    fclose(f);
  }
  m.self = lt_bench_cpu_now();
  return m;
}

double lt_bench_others_cores(lt_bench_mark since) {
  const lt_bench_mark now = lt_bench_mark_now();
  if (since.busy == 0 || now.wall <= since.wall) return 0;
  const double others = ((now.busy - since.busy) - (now.self - since.self)) / (now.wall - since.wall);
  return others > 0 ? others : 0;
}

/* A whole number, all of s, at least min; false otherwise. */
static bool parse_int(const char *s, int64_t min, int64_t *out) {
  char *end;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < min) return false;
  *out = (int64_t)v;
  return true;
}

static int bad(const char *what, const char *flag, const char *value, const char *usage) {
  fprintf(stderr, "%s %s%s%s\nusage: %s\n", what, flag, value ? " " : "", value ? value : "", usage);
  return 2;
}

int lt_bench_parse(int argc, char **argv, const lt_bench_opt *opts, int nopts, const char *usage, char **rest,
                   int *nrest) {
  const int cap = nrest ? *nrest : 0;
  int n = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      if (n >= cap) return bad("unexpected argument", a, NULL, usage);
      rest[n++] = argv[i];
      continue;
    }
    const lt_bench_opt *o = NULL;
    for (int k = 0; k < nopts && !o; k++)
      if (!strcmp(a, opts[k].name)) o = &opts[k];
    if (!o) return bad("unknown flag", a, NULL, usage);
    if (o->kind == LT_BENCH_FLAG) {
      *(bool *)o->out = true;
      continue;
    }
    if (i + 1 >= argc) return bad("missing the value of", a, NULL, usage);
    const char *v = argv[++i];
    switch (o->kind) {
    case LT_BENCH_INT:
      if (!parse_int(v, o->min, (int64_t *)o->out)) return bad("bad value for", a, v, usage);
      break;
    case LT_BENCH_DOUBLE: {
      char *end;
      const double d = strtod(v, &end);
      if (end == v || *end || !isfinite(d)) return bad("bad value for", a, v, usage);
      *(double *)o->out = d;
      break;
    }
    case LT_BENCH_STRING:
      *(const char **)o->out = v;
      break;
    case LT_BENCH_INT_LIST: {
      int64_t *out = o->out;
      int m = 0;
      char buf[256];
      if (strlen(v) >= sizeof buf) return bad("too long a list for", a, v, usage);
      strcpy(buf, v);
      for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (m >= o->cap || !parse_int(tok, o->min, &out[m])) return bad("bad list for", a, v, usage);
        m++;
      }
      if (m == 0) return bad("empty list for", a, v, usage);
      *o->count = m;
      break;
    }
    case LT_BENCH_FLAG:
      break;
    }
  }
  if (nrest) *nrest = n;
  return 0;
}

void lt_bench_print_paths(FILE *f, const lt_runtime_info *info) {
  fprintf(f, "paths (= forced, () not on this CPU; docs/architecture.md):");
  const char *fam = NULL;
  for (int i = 0; i < info->num_paths; i++) {
    const lt_runtime_path *p = &info->paths[i];
    if (!fam || strcmp(fam, p->family)) fprintf(f, "%s %s:", fam ? " |" : "", p->family);
    fam = p->family;
    char var[64];
    const char *eq = strchr(p->force, '=');
    const size_t n = eq ? (size_t)(eq - p->force) : 0;
    bool forced = false;
    if (eq && n < sizeof var) {
      memcpy(var, p->force, n);
      var[n] = '\0';
      const char *v = getenv(var);
      forced = v && !strcmp(v, eq + 1) && p->supported;
    }
    fprintf(f, p->supported ? " %s%s" : " (%s%s)", forced ? "=" : "", p->name);
  }
  fprintf(f, "\n");
}

lt_status lt_bench_print_runtime(FILE *f) {
  lt_runtime_info info;
  const lt_status st = lt_runtime_get_info(&info);
  if (st != LT_OK) return st;
  char cpu[256] = "unknown";
  FILE *c = fopen("/proc/cpuinfo", "r");
  if (c) {
    char line[512];
    while (fgets(line, sizeof line, c))
      if (!strncmp(line, "model name", 10)) {
        const char *p = strchr(line, ':');
        if (p) {
          snprintf(cpu, sizeof cpu, "%s", p + 1 + (p[1] == ' '));
          cpu[strcspn(cpu, "\n")] = '\0';
        }
        break;
      }
    fclose(c);
  }
  char date[64];
  const time_t t = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&t));
  fprintf(f, "libtensor %s, BLIS kernels %s (%s%s), %d threads, bf16 products: %s, CPU %s, %s\n", info.version,
          info.blas_arch, info.blas_arch_why, info.blas_arch_from_user ? ", from BLIS_ARCH_TYPE" : "",
          info.num_threads, info.bf16_gemm, cpu, date);
  lt_bench_print_paths(f, &info);
  return LT_OK;
}
