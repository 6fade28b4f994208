/*
 * checkpoint/safetensors.h: reading and writing safetensors files, the
 * tensor format of Hugging Face (https://huggingface.co/docs/safetensors):
 *   8 bytes      N, the header's length, unsigned little-endian;
 *   N bytes      a JSON object (UTF-8): for each tensor name
 *                {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
 *                and an optional "__metadata__" object of string values;
 *   the rest     the data section: every tensor's bytes, row-major and
 *                little-endian, at [begin, end) of the section.
 * The JSON is parsed and written with jansson (Debian libjansson-dev).
 *
 * What this is: the bounded, checked path for weights from elsewhere. Before
 * a tensor is touched, lt_st_open checks, and refuses with LT_ERR_FORMAT
 * naming the file, the tensor and the field:
 *   - a header length over LT_ST_MAX_HEADER (100,000,000 bytes, the cap of
 *     the reference implementation) or past the end of the file;
 *   - JSON that is not an object of the fields above (unknown fields, a
 *     non-string metadata value, negative or non-integer sizes and offsets,
 *     more than LT_MAX_DIMS dimensions, an unsupported dtype, a name that is
 *     empty or given twice);
 *   - dtype size x shape (checked 64-bit arithmetic; LT_ERR_OVERFLOW when it
 *     overflows) not equal to end - begin;
 *   - offsets outside the data section, overlapping another tensor's, or
 *     leaving a gap (the tensors must cover the data section exactly).
 * These rules, their order and their messages are written once in
 * python/libtensor/safetensors_spec.json, which the Python reader follows
 * too; tests/test_safetensors.c runs its crafted cases against this reader.
 * The file is opened as every loader does (tensor/file_internal.h: a regular
 * file only, a FIFO or device is refused without blocking) and mapped
 * read-only (mmap); tensor bytes are then read in place, never copied into a
 * buffer of their own: lt_st_read_into converts straight from the mapping
 * into the destination, and lt_st_view gives a tensor over the mapping when
 * its offset is aligned for its dtype. If the file cannot be mapped, it is
 * read into memory once. A mapped file must not be truncated by another
 * process while it is open (the reads would fault, as with any mmap).
 *
 * Dtypes: F32, F64, BF16, I32 and I64 are read and written as they are
 * (LT_DTYPE_BF16 tensors are written as BF16); BF16 also loads into f32 and
 * f64, exactly. F16 is read, converted exactly to f32 or f64 (libtensor has
 * no f16 dtype, so F16 is never written).
 *
 * What this is not: a writer of F16 (f32 tensors are written as F32, bf16
 * ones as BF16), a reader of sharded checkpoints (model.safetensors.index.json:
 * models/transformer/hf_weights.c opens the shards it names), or a
 * mapping of names (models/transformer/hf.h maps Hugging Face names).
 *
 * Errors and ownership as tensor/tensor.h: a status and lt_last_error();
 * "returns new", "borrowed".
 */
#ifndef LT_SAFETENSORS_H
#define LT_SAFETENSORS_H

#include "nn/nn.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest header accepted, in bytes (the reference implementation's). */
#define LT_ST_MAX_HEADER 100000000u

/* The element types of a safetensors file that libtensor reads. */
typedef enum { LT_ST_F32, LT_ST_F64, LT_ST_F16, LT_ST_BF16, LT_ST_I32, LT_ST_I64, LT_ST_DTYPE_COUNT } lt_st_dtype;
/* "F32", "F64", "F16", "BF16", "I32", "I64" (the file's spelling); "unknown"
 * out of range. */
LT_API const char *lt_st_dtype_name(lt_st_dtype d);
/* Bytes per element (0 out of range). */
LT_API size_t lt_st_dtype_size(lt_st_dtype d);

/* One tensor of an open file. Borrowed from the file (valid until
 * lt_st_close). */
typedef struct lt_st_tensor_info {
  const char *name;
  lt_st_dtype dtype;
  int ndim;
  int64_t shape[LT_MAX_DIMS];
  int64_t numel;
  uint64_t begin, end; /* byte range in the data section */
} lt_st_tensor_info;

typedef struct lt_st_file lt_st_file;

/* Opens path, checks its header and every tensor's entry (above) and maps
 * it. Returns new (close with lt_st_close), or NULL with the error set:
 * LT_ERR_IO (cannot open or read), LT_ERR_FORMAT (not a regular file, or a
 * check above), LT_ERR_OVERFLOW (sizes), LT_ERR_NOMEM. */
LT_API lt_st_file *lt_st_open(const char *path);
LT_API void lt_st_close(lt_st_file *f); /* NULL is a no-op */

/* The tensors, in the order of their data (ascending offsets). */
LT_API int lt_st_count(const lt_st_file *f);
LT_API const lt_st_tensor_info *lt_st_info(const lt_st_file *f, int i); /* borrowed; NULL out of range */
/* Index of the tensor called name, or -1 (no error set). */
LT_API int lt_st_find(const lt_st_file *f, const char *name);
/* Tensor i's bytes in the file (little-endian, possibly unaligned), borrowed
 * until lt_st_close; NULL out of range. */
LT_API const void *lt_st_data(const lt_st_file *f, int i);
/* True when the file is memory-mapped (false: it was read into memory). */
LT_API bool lt_st_is_mapped(const lt_st_file *f);

/* The "__metadata__" map: count, key and value of entry i (borrowed; NULL
 * out of range), and the value of key (NULL if absent). */
LT_API int lt_st_metadata_count(const lt_st_file *f);
LT_API const char *lt_st_metadata_key(const lt_st_file *f, int i);
LT_API const char *lt_st_metadata_value(const lt_st_file *f, int i);
LT_API const char *lt_st_metadata_get(const lt_st_file *f, const char *key);

/* Whether a tensor stored as src loads into dtype dst: floats into f32 from
 * F32, F16, BF16 (exact), into f64 from any float, into bf16 from BF16 only
 * (bits as they are); integers into i64 from
 * I32, I64, into i32 from I32. Narrowing (F64 into f32, I64 into i32) and
 * mixing integers with floats are refused. */
LT_API bool lt_st_dtype_loads_into(lt_st_dtype src, lt_dtype dst);

/* LT_OK when tensor i holds no NaN or infinity (integer dtypes always), else
 * LT_ERR_NUMERIC naming the file, the tensor, the value and its flat index
 * (the HDF5 loader's rule for model tensors). Reads the whole tensor, a
 * slice at a time, releasing each slice once read (lt_st_release_rows: the
 * check of a large file does not leave it resident). */
LT_API lt_status lt_st_check_finite(const lt_st_file *f, int i);

/* Copies tensor i into dst (borrowed; contiguous, the same shape, a dtype
 * lt_st_dtype_loads_into accepts, every value finite: lt_st_check_finite),
 * converting from the file's bytes without an intermediate buffer. No
 * autograd record (dst's version is bumped). Errors: LT_ERR_INDEX,
 * LT_ERR_SHAPE, LT_ERR_DTYPE, LT_ERR_INVALID (dst not contiguous),
 * LT_ERR_NUMERIC (a NaN or infinity), each naming the file and the tensor;
 * dst unchanged then. lt_st_tensor and lt_st_view give the values as they
 * are, non-finite ones included. */
LT_API lt_status lt_st_read_into(const lt_st_file *f, int i, lt_tensor *dst);
/* Tensor i as a new tensor of dtype (conversion as lt_st_read_into).
 * Returns new, or NULL with the error set. */
LT_API lt_tensor *lt_st_tensor(const lt_st_file *f, int i, lt_dtype dtype);
/* Rows [r0, r0 + count) of tensor i (along its first dimension; the
 * elements of a 1-d tensor) converted to f32 into dst (count times the
 * elements of a row, borrowed), as lt_st_tensor converts them: a loader that
 * converts a large tensor a few rows at a time. Values are not checked
 * (lt_st_check_finite does). Errors: LT_ERR_NULL, LT_ERR_INDEX (i or the
 * rows out of range, naming the file and the tensor), LT_ERR_DTYPE (a dtype
 * that does not load into f32). */
LT_API lt_status lt_st_read_rows_f32(const lt_st_file *f, int i, int64_t r0, int64_t count, float *dst);
/* Says that tensor i's bytes will not be read again soon: for a mapped file
 * the whole pages inside them leave the process's resident memory (madvise
 * MADV_DONTNEED; reading them again brings them back from the file), so a
 * loader that converts a model tensor by tensor does not hold the whole file
 * beside the model. Nothing for a file read into memory, a NULL f or an i
 * out of range. */
LT_API void lt_st_release(const lt_st_file *f, int i);
/* The same for rows [r0, r0 + count) of tensor i only (as lt_st_read_rows_f32
 * counts them; rows out of range: nothing): a loader converting a large
 * tensor a block of rows at a time releases each block once read. */
LT_API void lt_st_release_rows(const lt_st_file *f, int i, int64_t r0, int64_t count);

/* Tensor i without a copy: a tensor borrowing the mapping (read-only by
 * contract: never write to it), valid until lt_st_close; only for F32, F64,
 * BF16, I32 and I64 on a little-endian host at an offset aligned for the dtype,
 * else NULL with LT_ERR_INVALID naming the reason (use lt_st_tensor). */
LT_API lt_tensor *lt_st_view(const lt_st_file *f, int i);

/* Writes n tensors (borrowed; f32, f64, i32 or i64, any layout) under names
 * (unique, non-empty, not "__metadata__") to path as one safetensors file,
 * in the given order, with n_meta metadata entries (keys[i] -> values[i],
 * strings, keys unique; may be 0 and NULL). The header is padded with spaces
 * to a multiple of 8 bytes so that every tensor's bytes are 8-byte aligned.
 * Durable as checkpoints are (a temporary in the same directory, fsync,
 * rename): a failed save leaves the old file. Builds the file in memory
 * first. Errors: LT_ERR_NULL, LT_ERR_INVALID (names), LT_ERR_DTYPE,
 * LT_ERR_IO, LT_ERR_NOMEM. */
LT_API lt_status lt_st_save(const char *path, int n, const char *const *names, const lt_tensor *const *tensors, int n_meta,
                     const char *const *keys, const char *const *values);

/* Every parameter and buffer of p under its own name (lt_st_save). */
LT_API lt_status lt_st_save_params(const char *path, const lt_params *p, int n_meta, const char *const *keys,
                            const char *const *values);
/* Loads path into p: every name of p must be in the file and every name of
 * the file in p, with the same shape, a dtype that loads into the
 * parameter's (lt_st_dtype_loads_into) and finite values; all of it is
 * checked before a value is written, so on failure p is unchanged. A name
 * mismatch is one LT_ERR_INVALID listing both the missing and the unexpected
 * names with their counts, as the HDF5 loader's strict load does. */
LT_API lt_status lt_st_load_params(const char *path, lt_params *p);

#ifdef __cplusplus
}
#endif
#endif /* LT_SAFETENSORS_H */
