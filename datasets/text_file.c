/*
 * datasets/text_file.c: reading a whole text file from outside into memory
 * (lt_text_file_read), the bottom of datasets/' text side: corpora and
 * tokenizers read their files through it, and it knows neither.
 *
 * What this is not: a streaming reader (a file is read whole, at most
 * LT_TEXT_MAX_BYTES).
 */
#include "datasets/datasets.h"
#include "tensor/error_internal.h"
#include "tensor/file_internal.h"

lt_status lt_text_file_read(const char *path, char **data, size_t *len) {
  const char *op = "text_file_read";
  if (!path) return lt__err(LT_ERR_NULL, "%s: path is NULL", op);
  if (!data || !len) return lt__err(LT_ERR_NULL, "%s: data and len must not be NULL", op);
  /* Regular files only (a FIFO or /dev/zero would block or never end), at
   * most LT_TEXT_MAX_BYTES: tensor/file.c. */
  return lt__read_regular(path, op, (uint64_t)LT_TEXT_MAX_BYTES, data, len);
}
