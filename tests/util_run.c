/* tests/util_run.c: see util_run.h. */
#include "util_run.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lt_test_csv_column(const char *path, int col, double *v, int cap) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char line[4096];
  int n = 0;
  ck_assert(fgets(line, sizeof line, f) != NULL);
  while (fgets(line, sizeof line, f) && n < cap) {
    char *p = line;
    for (int c = 0; c < col && p; c++) p = strchr(p, ','), p = p ? p + 1 : NULL;
    ck_assert_msg(p != NULL, "short CSV row: %s", line);
    v[n++] = *p == ',' || *p == '\n' ? NAN : strtod(p, NULL);
  }
  fclose(f);
  return n;
}
