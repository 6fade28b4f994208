/*
 * tests/test_util.h: shared helpers for the Check test programs.
 *
 * A failing comparison prints the first mismatches and the max difference, not
 * just "fail" (see LT_ASSERT_CLOSE). LT_OK_OR_FAIL prints lt_last_error().
 */
#ifndef LT_TEST_UTIL_H
#define LT_TEST_UTIL_H

#include <check.h>
#include <math.h>

#include "libtensor.h"

#include <stdbool.h>

/* Fail the test with lt_last_error() unless expr returns LT_OK. */
#define LT_OK_OR_FAIL(expr)                                                           \
  do {                                                                                \
    lt_status s_ = (expr);                                                            \
    ck_assert_msg(s_ == LT_OK, "%s returned %s: %s", #expr, lt_status_name(s_),      \
                  lt_last_error());                                                   \
  } while (0)

/* Fail unless the tensor expression is non-NULL; evaluates to it. */
#define LT_NN(expr) lt_test_nonnull((expr), #expr, __FILE__, __LINE__)
lt_tensor *lt_test_nonnull(lt_tensor *t, const char *expr, const char *file, int line);

/* LT_NN for any other pointer result (a loader, a tokenizer): fails unless
 * non-NULL; evaluates to it as void *. */
#define LT_NNP(expr) lt_test_nonnull_ptr((void *)(expr), #expr, __FILE__, __LINE__)
void *lt_test_nonnull_ptr(void *p, const char *expr, const char *file, int line);

/* t as dtype dt: t itself if it has dt, else a converted copy (t is freed).
 * Takes ownership of t; fails the test on error. */
lt_tensor *lt_test_as_dtype(lt_tensor *t, lt_dtype dt);
/* New contiguous tensors of dtype dt from row-major f64 / i64 values (given in
 * the wide type so that one list serves every dtype). */
lt_tensor *lt_test_from_f64(lt_dtype dt, int ndim, const int64_t *shape, const double *v);
lt_tensor *lt_test_from_i64(lt_dtype dt, int ndim, const int64_t *shape, const int64_t *v);

/* Free every listed tensor (NULLs allowed). */
#define LT_FREE_ALL(...)                                                              \
  do {                                                                                \
    lt_tensor *free_all_[] = {__VA_ARGS__};                                           \
    for (size_t i_ = 0; i_ < sizeof free_all_ / sizeof free_all_[0]; i_++)            \
      lt_tensor_free(free_all_[i_]);                                                  \
  } while (0)

/* Expect a failure with status st and a message containing substr (may be NULL). */
#define LT_EXPECT_ERR(expr, st, substr) \
  lt_test_expect_err((lt_status)(expr), (st), (substr), #expr, __FILE__, __LINE__)
#define LT_EXPECT_NULL_ERR(expr, st, substr) \
  lt_test_expect_null_err((expr), (st), (substr), #expr, __FILE__, __LINE__)
void lt_test_expect_err(lt_status got, lt_status want, const char *substr, const char *expr,
                        const char *file, int line);
void lt_test_expect_null_err(lt_tensor *got, lt_status want, const char *substr,
                             const char *expr, const char *file, int line);
/* LT_EXPECT_NULL_ERR for any other pointer result (not freed if non-NULL:
 * the test fails there). */
#define LT_EXPECT_NULLP_ERR(expr, st, substr) \
  lt_test_expect_nullp_err((const void *)(expr), (st), (substr), #expr, __FILE__, __LINE__)
void lt_test_expect_nullp_err(const void *got, lt_status want, const char *substr,
                              const char *expr, const char *file, int line);

/* Compare two tensors elementwise: same shape, |a-b| <= atol + rtol*|b|.
 * On failure prints up to 10 mismatches with indices and the max difference. */
#define LT_ASSERT_CLOSE(a, b, rtol, atol) lt_test_assert_close((a), (b), (rtol), (atol), #a, #b, __FILE__, __LINE__)
void lt_test_assert_close(const lt_tensor *a, const lt_tensor *b, double rtol, double atol,
                          const char *ea, const char *eb, const char *file, int line);
/* Compare a tensor with n expected values given in row-major order. */
#define LT_ASSERT_VALUES(t, tol, ...) \
  lt_test_assert_values((t), (tol), (const double[]){__VA_ARGS__}, \
                        (int64_t)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), #t, __FILE__, __LINE__)
void lt_test_assert_values(const lt_tensor *t, double tol, const double *want, int64_t n,
                           const char *et, const char *file, int line);
/* Assert exact shape. */
#define LT_ASSERT_SHAPE(t, ...) \
  lt_test_assert_shape((t), LT_SHAPE(__VA_ARGS__), #t, __FILE__, __LINE__)
void lt_test_assert_shape(const lt_tensor *t, int ndim, const int64_t *shape, const char *et,
                          const char *file, int line);

/* Writes n bytes to a new file /tmp/lt_test_XXXXXX; returns its path
 * (malloc'd: unlink and free it). Fails the test on error. */
char *lt_test_write_temp(const void *data, size_t n);
/* Writes text to path (created or replaced). Fails the test on error. */
void lt_test_write_text(const char *path, const char *text);

/* Seconds of wall time (monotonic) and of this process's CPU time. On a
 * machine shared with other work, CPU time (with one library thread) is the
 * steadier measure of a test's own work. */
double lt_test_now(void);

/* "<dir>/<name>" in one of 8 rotating static buffers (valid until 8 more
 * calls; up to 511 bytes): a path inside a test's temporary folder. */
char *lt_test_join(const char *dir, const char *name);
/* A new temporary directory /tmp/lt_<tag>_XXXXXX, its path into buf (size
 * bytes); fails the test if it cannot be made. lt_test_rmtree removes it and
 * everything in it (rm -rf; fails the test on error). */
void lt_test_mkdtemp(char *buf, size_t size, const char *tag);
void lt_test_rmtree(const char *dir);
double lt_test_cpu_now(void);

/* Whether autocast rounds products to bf16 on this CPU (oneDNN has a bf16
 * matmul, native or emulated); false where it leaves them in f32 (AVX2
 * CPUs: docs/mixed-precision.md), and a test that compares an autocast run
 * with an f32 one has nothing to tell apart. */
bool lt_test_autocast_rounds(void);

/* Run a suite (CK_NORMAL output); returns the process exit code. */
int lt_test_run(Suite *s);

/* Adds to suite s a test case `name` holding the listed tests (START_TEST
 * names), with a timeout in seconds (0 keeps Check's default); returns the
 * TCase for anything else (loop tests). A test program's main is then:
 *     Suite *s = suite_create("batch");
 *     LT_TEST_CASE(s, "core", 300, test_a, test_b);
 *     return lt_test_run(s); */
#define LT_TEST_CASE(s, name, timeout, ...)                                              \
  lt_test_case((s), (name), (timeout), (const TTest *const[]){__VA_ARGS__},           \
               (int)(sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *)))
TCase *lt_test_case(Suite *s, const char *name, double timeout, const TTest *const *tests, int n);

#endif
