/*
 * tests/util_run.h: what the tests that run the programs (tokenize, train)
 * share: reading what the programs wrote. Metrics CSV columns (the
 * trainer's CSV: a header line, then one row per step).
 *
 * What this is not: a process runner (each test runs its commands with
 * system(3) and its own log names) or a CSV parser (no quoting: the
 * trainer's fields are numbers).
 */
#ifndef LT_TEST_UTIL_RUN_H
#define LT_TEST_UTIL_RUN_H

/* Column col (0-based) of each data row of the CSV at path into v[0..cap)
 * (an empty cell is NAN); returns the row count. Fails the test if the file
 * cannot be read or a row is short. */
int lt_test_csv_column(const char *path, int col, double *v, int cap);

#endif
