/*
 * bench/paths.h: the benchmarks' header line of alternative implementations
 * (the path table, tensor/paths.def, as lt_runtime_get_info reports it), so
 * that a result says which paths this CPU had and which one a switch forced.
 * Header-only; benchmarks only.
 */
#ifndef LT_BENCH_PATHS_H
#define LT_BENCH_PATHS_H

#include "libtensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints "paths: gemm blis small skinny | ... " to f, one family after the
 * other: a path the CPU lacks in parentheses, a path forced by its switch in
 * the environment marked with '='. */
static inline void lt_bench_print_paths(FILE *f, const lt_runtime_info *info) {
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

#endif /* LT_BENCH_PATHS_H */
