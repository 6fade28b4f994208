/* tests/test_util.c: see test_util.h. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
double lt_test_now(void) { return seconds(CLOCK_MONOTONIC); }
double lt_test_cpu_now(void) { return seconds(CLOCK_PROCESS_CPUTIME_ID); }

lt_tensor *lt_test_nonnull(lt_tensor *t, const char *expr, const char *file, int line) {
  if (!t)
    ck_abort_msg("%s:%d: %s returned NULL: %s: %s", file, line, expr,
                 lt_status_name(lt_last_status()), lt_last_error());
  return t;
}

void *lt_test_nonnull_ptr(void *p, const char *expr, const char *file, int line) {
  if (!p)
    ck_abort_msg("%s:%d: %s returned NULL: %s: %s", file, line, expr,
                 lt_status_name(lt_last_status()), lt_last_error());
  return p;
}

lt_tensor *lt_test_as_dtype(lt_tensor *t, lt_dtype dt) {
  if (t->dtype == dt) return t;
  lt_tensor *c = LT_NN(lt_to_dtype(t, dt));
  lt_tensor_free(t);
  return c;
}

lt_tensor *lt_test_from_f64(lt_dtype dt, int ndim, const int64_t *shape, const double *v) {
  return lt_test_as_dtype(LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, ndim, shape, v)), dt);
}

lt_tensor *lt_test_from_i64(lt_dtype dt, int ndim, const int64_t *shape, const int64_t *v) {
  return lt_test_as_dtype(LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, ndim, shape, v)), dt);
}

void lt_test_expect_err(lt_status got, lt_status want, const char *substr, const char *expr,
                        const char *file, int line) {
  if (got != want)
    ck_abort_msg("%s:%d: %s returned %s, expected %s (message: %s)", file, line, expr,
                 lt_status_name(got), lt_status_name(want), lt_last_error());
  if (substr && !strstr(lt_last_error(), substr))
    ck_abort_msg("%s:%d: %s: message \"%s\" does not contain \"%s\"", file, line, expr,
                 lt_last_error(), substr);
  lt_clear_error();
}

void lt_test_expect_null_err(lt_tensor *got, lt_status want, const char *substr,
                             const char *expr, const char *file, int line) {
  if (got) {
    lt_tensor_free(got);
    ck_abort_msg("%s:%d: %s succeeded, expected %s", file, line, expr, lt_status_name(want));
  }
  lt_test_expect_err(lt_last_status(), want, substr, expr, file, line);
}

void lt_test_expect_nullp_err(const void *got, lt_status want, const char *substr,
                              const char *expr, const char *file, int line) {
  if (got) ck_abort_msg("%s:%d: %s succeeded, expected %s", file, line, expr, lt_status_name(want));
  lt_test_expect_err(lt_last_status(), want, substr, expr, file, line);
}

static void index_of(const lt_tensor *t, int64_t flat, char *buf, size_t n) {
  int64_t idx[LT_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    idx[d] = t->shape[d] ? flat % t->shape[d] : 0;
    flat = t->shape[d] ? flat / t->shape[d] : 0;
  }
  lt_shape_str(t->ndim, idx, buf, n);
}

void lt_test_assert_close(const lt_tensor *a, const lt_tensor *b, double rtol, double atol,
                          const char *ea, const char *eb, const char *file, int line) {
  if (!a || !b) ck_abort_msg("%s:%d: NULL tensor (%s / %s): %s", file, line, ea, eb, lt_last_error());
  char sa[128], sb[128];
  if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) != 0)
    ck_abort_msg("%s:%d: shapes differ: %s is %s, %s is %s", file, line, ea,
                 lt_shape_str(a->ndim, a->shape, sa, sizeof sa), eb,
                 lt_shape_str(b->ndim, b->shape, sb, sizeof sb));
  int64_t n = a->numel;
  double *va = malloc(sizeof(double) * (n ? n : 1)), *vb = malloc(sizeof(double) * (n ? n : 1));
  ck_assert(va && vb);
  ck_assert(lt_tensor_read(a, LT_DTYPE_F64, va, n) == LT_OK);
  ck_assert(lt_tensor_read(b, LT_DTYPE_F64, vb, n) == LT_OK);
  int64_t bad = 0;
  double maxdiff = 0;
  char report[4096];
  size_t pos = 0;
  report[0] = '\0';
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(va[i] - vb[i]);
    bool ok = (isnan(va[i]) && isnan(vb[i])) || va[i] == vb[i] || d <= atol + rtol * fabs(vb[i]);
    if (!isnan(d) && d > maxdiff) maxdiff = d;
    if (!ok) {
      if (bad < 10 && pos < sizeof report - 200) {
        char ix[128];
        index_of(a, i, ix, sizeof ix);
        pos += (size_t)snprintf(report + pos, sizeof report - pos, "\n    at %s: %.9g vs %.9g (diff %.3g)",
                                ix, va[i], vb[i], d);
      }
      bad++;
    }
  }
  free(va);
  free(vb);
  if (bad)
    ck_abort_msg("%s:%d: %s and %s differ in %lld of %lld elements (max diff %.3g, rtol %g, atol %g):%s",
                 file, line, ea, eb, (long long)bad, (long long)n, maxdiff, rtol, atol, report);
}

void lt_test_assert_values(const lt_tensor *t, double tol, const double *want, int64_t n,
                           const char *et, const char *file, int line) {
  if (!t) ck_abort_msg("%s:%d: %s is NULL: %s", file, line, et, lt_last_error());
  if (t->numel != n)
    ck_abort_msg("%s:%d: %s has %lld elements, expected %lld", file, line, et, (long long)t->numel,
                 (long long)n);
  lt_tensor *w = lt_tensor_from_copy(LT_DTYPE_F64, t->ndim, t->shape, want);
  ck_assert(w);
  lt_test_assert_close(t, w, 0, tol, et, "expected", file, line);
  lt_tensor_free(w);
}

void lt_test_assert_shape(const lt_tensor *t, int ndim, const int64_t *shape, const char *et,
                          const char *file, int line) {
  char sa[128], sb[128];
  if (!t) ck_abort_msg("%s:%d: %s is NULL: %s", file, line, et, lt_last_error());
  if (t->ndim != ndim || memcmp(t->shape, shape, sizeof(int64_t) * ndim) != 0)
    ck_abort_msg("%s:%d: %s has shape %s, expected %s", file, line, et,
                 lt_shape_str(t->ndim, t->shape, sa, sizeof sa), lt_shape_str(ndim, shape, sb, sizeof sb));
}

void lt_test_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  ck_assert(fputs(text, f) >= 0);
  ck_assert(fclose(f) == 0);
}

char *lt_test_write_temp(const void *data, size_t n) {
  char *path = strdup("/tmp/lt_test_XXXXXX");
  ck_assert(path);
  int fd = mkstemp(path);
  ck_assert_msg(fd >= 0, "mkstemp %s failed", path);
  ck_assert(write(fd, data, n) == (ssize_t)n);
  close(fd);
  return path;
}

int lt_test_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

TCase *lt_test_case(Suite *s, const char *name, double timeout, const TTest *const *tests, int n) {
  TCase *tc = tcase_create(name);
  if (timeout > 0) tcase_set_timeout(tc, timeout);
  for (int i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return tc;
}

void lt_test_mkdtemp(char *buf, size_t size, const char *tag) {
  snprintf(buf, size, "/tmp/lt_%s_XXXXXX", tag);
  ck_assert_ptr_nonnull(mkdtemp(buf));
}

void lt_test_rmtree(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

char *lt_test_join(const char *dir, const char *name) {
  static char buf[8][512];
  static int k;
  char *b = buf[k++ & 7];
  snprintf(b, sizeof buf[0], "%s/%s", dir, name);
  return b;
}

bool lt_test_autocast_rounds(void) {
  lt_runtime_info info;
  ck_assert_int_eq(lt_runtime_get_info(&info), LT_OK);
  return strncmp(info.bf16_gemm, "fallback (no oneDNN", 19) != 0;
}
