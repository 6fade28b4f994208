/*
 * tests/util_fxcheck.h: comparing results with PyTorch fixtures in a way that
 * reports and goes on, shared by tests/test_nn_pytorch.c and
 * tests/test_transformer.c.
 *
 * A test compares many tensors (outputs, every gradient) and should list all
 * that differ, not stop at the first: lt_fx_close prints a report and counts
 * a failure in lt_fx_failures, and lt_fx_done ends the test, failing it if
 * any comparison failed. LT_FIXTURE_VERBOSE=1 prints every comparison.
 *
 * What this is not: the fixture reader (tests/util_fixtures.h) or the plain
 * assertions of tests/test_util.h (which stop the test).
 */
#ifndef LT_TEST_UTIL_FXCHECK_H
#define LT_TEST_UTIL_FXCHECK_H

#include <stdbool.h>

#include "libtensor.h"
#include "util_fixtures.h"

/* Mismatches reported in this test so far (Check runs each test in its own
 * process, so every test starts at 0). Tests may count their own too. */
extern int lt_fx_failures;

/* True if LT_FIXTURE_VERBOSE is set (and not "0"). */
bool lt_fx_verbose(void);

/* Compares got with want (shape, then values read as double):
 *     |got - want| <= rtol * |want| + max(rtol * max|want|, atol_floor),
 * equal values (including matching NaNs and infinities) always pass. On a
 * mismatch prints "MISMATCH <label> <shape>: ..." with the first 5 bad
 * elements and the max abs and rel differences, counts a failure and returns
 * false. A NULL got or want is a mismatch (the report shows lt_last_error). */
bool lt_fx_close(const char *label, const lt_tensor *got, const lt_tensor *want, double rtol,
                 double atol_floor);

/* Ends a test: fails it, naming what, if any comparison failed. */
void lt_fx_done(const char *what);

/* Loads tests/fixtures/<file>; fails the test if it cannot. Returns new
 * (free with lt_fixture_free). */
lt_fixture *lt_fx_open(const char *file);
/* The record "<c>.<key>" of a case c: lt_fx_num its one value as double,
 * lt_fx_get a new tensor; either fails the test, naming the record, if it
 * is missing. */
double lt_fx_num(const lt_fixture *f, const char *c, const char *key);
lt_tensor *lt_fx_get(const lt_fixture *f, const char *c, const char *key);

#endif
