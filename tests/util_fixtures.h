/*
 * tests/util_fixtures.h: reader for the PyTorch reference fixtures
 * (tests/fixtures/nn_*.bin, written by tests/fixtures/make_nn_fixtures.py).
 *
 * The format is a small self-describing list of named tensors (docs/testing.md):
 *     "LTFX", u32 version (1), u32 record count, then per record
 *     u32 name length, name bytes, u8 dtype (lt_dtype code), u8 ndim,
 *     ndim x i64 shape, numel x element bytes; all little-endian, row-major.
 *
 * The whole file is validated when loaded (magic, version, every length and
 * shape checked against the bytes that remain with overflow-checked
 * arithmetic, dtype and ndim in range, bool bytes 0/1, names unique and
 * without NUL, no trailing bytes), so a truncated or corrupt file fails with
 * LT_ERR_FORMAT and a message naming the file, the record and the problem; it
 * never crashes. Errors go through the library's lt_last_error().
 *
 * What this is not: a general serialisation format (checkpoints are HDF5).
 */
#ifndef LT_TEST_UTIL_FIXTURES_H
#define LT_TEST_UTIL_FIXTURES_H

#include <stddef.h>

#include "libtensor.h"

/* The path of fixture file `file` in tests/fixtures/ of the source tree (the
 * sibling of LT_TEST_DATA_DIR, which the build defines as tests/data) into
 * buf; returns buf (always NUL-terminated). */
char *lt_fixture_path(const char *file, char *buf, size_t size);

typedef struct lt_fixture lt_fixture;

/* Reads and validates a fixture file. Returns new (free with lt_fixture_free),
 * or NULL with LT_ERR_IO (cannot open/read), LT_ERR_FORMAT (malformed) or
 * LT_ERR_NOMEM. */
lt_fixture *lt_fixture_load(const char *path);
/* The same from size bytes in memory (copied); what names the source in
 * messages. */
lt_fixture *lt_fixture_parse(const void *buf, size_t size, const char *what);
void lt_fixture_free(lt_fixture *f); /* NULL is a no-op */

int lt_fixture_count(const lt_fixture *f);
/* Name of record i (borrowed, valid while f lives); NULL if out of range. */
const char *lt_fixture_name(const lt_fixture *f, int i);
bool lt_fixture_has(const lt_fixture *f, const char *name);
/* A new contiguous tensor (no grad) with the record's dtype, shape and values;
 * NULL with LT_ERR_INDEX naming the record if there is none. */
lt_tensor *lt_fixture_get(const lt_fixture *f, const char *name);
/* The value of a one-element record as double (LT_ERR_INDEX if absent,
 * LT_ERR_SHAPE if it has more than one element). */
lt_status lt_fixture_scalar(const lt_fixture *f, const char *name, double *out);

#endif
