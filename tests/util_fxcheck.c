/*
 * tests/util_fxcheck.c: comparisons against PyTorch fixtures that report and
 * go on (contract in util_fxcheck.h).
 */
#include "util_fxcheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lt_fx_failures;

bool lt_fx_verbose(void) {
  const char *v = getenv("LT_FIXTURE_VERBOSE");
  return v && *v && strcmp(v, "0") != 0;
}

bool lt_fx_close(const char *label, const lt_tensor *got, const lt_tensor *want, double rtol,
                 double atol_floor) {
  char sg[64], sw[64];
  if (!got || !want) {
    printf("MISMATCH %s: %s is NULL (%s: %s)\n", label, !got ? "result" : "reference",
           lt_status_name(lt_last_status()), lt_last_error());
    lt_fx_failures++;
    return false;
  }
  if (got->ndim != want->ndim || memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)got->ndim) != 0) {
    printf("MISMATCH %s: shape %s, PyTorch %s\n", label, lt_shape_str(got->ndim, got->shape, sg, sizeof sg),
           lt_shape_str(want->ndim, want->shape, sw, sizeof sw));
    lt_fx_failures++;
    return false;
  }
  int64_t n = got->numel;
  double *a = malloc(sizeof(double) * (size_t)(n ? n : 1)), *b = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(a && b);
  ck_assert(lt_tensor_read(got, LT_DTYPE_F64, a, n) == LT_OK);
  ck_assert(lt_tensor_read(want, LT_DTYPE_F64, b, n) == LT_OK);
  double maxabs = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(b[i]) && fabs(b[i]) > maxabs) maxabs = fabs(b[i]);
  double atol = fmax(rtol * maxabs, atol_floor), maxdiff = 0, maxrel = 0;
  int64_t bad = 0;
  char report[1024];
  size_t pos = 0;
  report[0] = '\0';
  for (int64_t i = 0; i < n; i++) {
    bool same = a[i] == b[i] || (isnan(a[i]) && isnan(b[i]));
    double d = same ? 0 : fabs(a[i] - b[i]);
    if (isnan(d)) d = INFINITY;
    if (d > maxdiff) maxdiff = d;
    if (d > 0 && b[i] != 0 && d / fabs(b[i]) > maxrel) maxrel = d / fabs(b[i]);
    if (!same && !(d <= atol + rtol * fabs(b[i]))) {
      if (bad < 5 && pos < sizeof report - 120)
        pos += (size_t)snprintf(report + pos, sizeof report - pos, "\n      [%lld] got %.9g want %.9g (diff %.3g)",
                                (long long)i, a[i], b[i], d);
      bad++;
    }
  }
  free(a);
  free(b);
  if (bad) {
    printf("MISMATCH %s %s: %lld of %lld elements, max abs diff %.3g, max rel diff %.3g, max|want| %.3g, "
           "rtol %g, atol %.3g%s\n",
           label, lt_shape_str(want->ndim, want->shape, sw, sizeof sw), (long long)bad, (long long)n, maxdiff,
           maxrel, maxabs, rtol, atol, report);
    lt_fx_failures++;
    return false;
  }
  if (lt_fx_verbose()) printf("ok %-60s max abs diff %.3g (max|want| %.3g)\n", label, maxdiff, maxabs);
  return true;
}

void lt_fx_done(const char *what) {
  fflush(stdout);
  ck_assert_msg(lt_fx_failures == 0, "%s: %d mismatches against PyTorch (listed above)", what,
                lt_fx_failures);
}

lt_fixture *lt_fx_open(const char *file) {
  char path[1024];
  lt_fixture_path(file, path, sizeof path);
  lt_fixture *f = lt_fixture_load(path);
  if (!f) ck_abort_msg("%s: %s", path, lt_last_error());
  return f;
}

double lt_fx_num(const lt_fixture *f, const char *c, const char *key) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", c, key);
  double v = 0;
  if (lt_fixture_scalar(f, name, &v) != LT_OK) ck_abort_msg("%s: %s", name, lt_last_error());
  return v;
}

lt_tensor *lt_fx_get(const lt_fixture *f, const char *c, const char *key) {
  char name[512];
  snprintf(name, sizeof name, "%s.%s", c, key);
  lt_tensor *t = lt_fixture_get(f, name);
  if (!t) ck_abort_msg("%s: %s", name, lt_last_error());
  return t;
}
