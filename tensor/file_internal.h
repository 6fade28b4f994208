/* tensor/file_internal.h: opening files from outside, the one way every
 * loader does it (tensor/file.c). Internal (lt__ prefix): used by datasets/
 * (text, TSV, IDX, tokenizer training) and checkpoint/ (the seal check and
 * the HDF5 open). Not the place for writing files: checkpoint/seal.c owns
 * atomic saves.
 */
#ifndef LT_TENSOR_FILE_INTERNAL_H
#define LT_TENSOR_FILE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

/* Opens path for reading the way every loader must (one home): with
 * O_NONBLOCK, so that a FIFO cannot block the open; fstat()ed; refused
 * unless a regular file (status not_regular, naming the path and what it
 * is: FIFO, device, directory, ...; the dataset readers say LT_ERR_IO, the
 * checkpoint loader LT_ERR_FORMAT; LT_ERR_IO if it cannot be opened);
 * refused if larger than max_bytes (LT_ERR_OVERFLOW naming the bound); then
 * switched to blocking reads. Returns the descriptor (the caller closes it)
 * and the size from fstat in *size (may be NULL), or -1 with the error set.
 * op prefixes messages. */
int lt__open_regular(const char *path, const char *op, uint64_t max_bytes, lt_status not_regular,
                     uint64_t *size);

/* Reads the whole regular file at path (opened by lt__open_regular) into a
 * new buffer *data (free with free(); NUL-terminated after *len bytes),
 * never more than max_bytes (LT_ERR_OVERFLOW naming the bound, also for a
 * file that grows while it is read); a file that is not regular is
 * LT_ERR_IO. */
lt_status lt__read_regular(const char *path, const char *op, uint64_t max_bytes, char **data, size_t *len);

/* A whole regular file, read-only: mapped (mmap, MAP_PRIVATE) when it can
 * be, else read into memory once (an empty file, a file system without
 * mmap). The readers of binary formats (safetensors, GGUF) parse from it. */
typedef struct lt__file_map {
  unsigned char *bytes; /* size bytes (NULL for an empty file that was not mapped) */
  size_t size;
  bool mapped;
} lt__file_map;

/* Opens path as lt__open_regular does (not_regular: the status for a FIFO,
 * device or directory) and maps or reads all of it into *out. A mapped file
 * must not be truncated by another process while it is in use (reads would
 * fault, as with any mmap). Errors: those of lt__open_regular, LT_ERR_IO,
 * LT_ERR_NOMEM; *out zeroed then. */
lt_status lt__map_regular(const char *path, const char *op, lt_status not_regular, lt__file_map *out);
/* Drops the whole pages of [p, p + n) (inside m's bytes) from the process's
 * resident memory when m is mapped (madvise MADV_DONTNEED: the next read
 * brings them back from the file; a page shared with bytes outside the range
 * stays): a loader that converts a model tensor by tensor does not keep the
 * whole file resident beside the model. Nothing for a file read into memory;
 * advice only (a failure keeps the pages). */
void lt__map_release(const lt__file_map *m, const void *p, size_t n);
/* Unmaps or frees m's bytes and zeroes it; a zeroed map is a no-op. */
void lt__unmap(lt__file_map *m);

/* "a FIFO (named pipe)", "a directory", ... for an st_mode. */
const char *lt__file_kind(unsigned mode);

#endif
