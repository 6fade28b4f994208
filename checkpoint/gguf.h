/*
 * checkpoint/gguf.h: reading and writing GGUF files (version 3, and 2,
 * which has the same layout), the model format of ggml and llama.cpp
 * (ggml's docs/gguf.md). A file is, little-endian throughout:
 *   u32 magic "GGUF", u32 version, u64 tensor count, u64 key-value count;
 *   the key-value pairs: a string key, a u32 value type, the value (a
 *     scalar, a string = u64 length + bytes, or an array = u32 element type,
 *     u64 count, the elements);
 *   the tensor infos: a string name, u32 n_dims, n_dims u64 sizes (ggml's
 *     order: ne[0] is the innermost, fastest-varying dimension), u32 ggml
 *     type, u64 offset into the data section;
 *   padding to the alignment (general.alignment, u32, default 32), then the
 *     data section: each tensor's bytes at its offset (a multiple of the
 *     alignment).
 *
 * What this is: the bounded, checked path for GGUF. lt_gguf_open checks,
 * before a tensor byte is touched, and refuses with LT_ERR_FORMAT naming the
 * file, the key or tensor and the field: the magic and version; counts that
 * cannot fit in the rest of the file (each key-value pair takes at least 13
 * bytes, each tensor info at least 24); every string length and array
 * length against the bytes left (checked 64-bit arithmetic), keys and names
 * that are empty, over LT_GGUF_MAX_NAME bytes or given twice; value types
 * outside the spec's 13 and nested arrays (llama.cpp writes none); a
 * general.alignment that is not a u32 power of two; n_dims outside [1, 4],
 * the element count overflowing, a tensor type libtensor does not read
 * (LT_ERR_DTYPE naming it), ne[0] not a multiple of the type's block; an
 * offset that is not a multiple of the alignment, a tensor reaching past the
 * end of the file, and two tensors overlapping. The file is opened as every
 * loader opens one (tensor/file_internal.h: regular files only, a FIFO or
 * device is refused without blocking) and mapped read-only.
 *
 * Tensor types read and written: F32, F16 (read only), BF16, Q8_0 and Q4_0
 * (ggml's blocks of 32 weights with an f16 scale, made and expanded by
 * tensor/quant.h's reference conversions, byte for byte ggml's).
 *
 * What this is not: a model mapping (models/transformer/gguf.h names the
 * GPT-2 and Llama tensors and keys as llama.cpp does), nor a writer that
 * streams: lt_gguf_write builds the file in memory, then writes it durably.
 *
 * Errors and ownership as tensor/tensor.h: a status and lt_last_error();
 * "returns new", "borrowed".
 */
#ifndef LT_GGUF_H
#define LT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest key or tensor name accepted, in bytes (llama.cpp's tensor
 * names are at most 63, GGML_MAX_NAME - 1; keys get the same room). */
#define LT_GGUF_MAX_NAME 255
/* The default alignment of the data section and of each tensor's offset. */
#define LT_GGUF_DEFAULT_ALIGNMENT 32u

/* Value types of the key-value pairs (the spec's numbering). */
typedef enum {
  LT_GGUF_UINT8 = 0, LT_GGUF_INT8 = 1, LT_GGUF_UINT16 = 2, LT_GGUF_INT16 = 3, LT_GGUF_UINT32 = 4,
  LT_GGUF_INT32 = 5, LT_GGUF_FLOAT32 = 6, LT_GGUF_BOOL = 7, LT_GGUF_STRING = 8, LT_GGUF_ARRAY = 9,
  LT_GGUF_UINT64 = 10, LT_GGUF_INT64 = 11, LT_GGUF_FLOAT64 = 12, LT_GGUF_TYPE_COUNT
} lt_gguf_type;
/* "uint8", ..., "float64" (the gguf Python package's names, lower case);
 * "unknown" out of range. */
LT_API const char *lt_gguf_type_name(lt_gguf_type t);

/* The tensor types libtensor reads (ggml's numbering; others are refused). */
typedef enum { LT_GGML_F32 = 0, LT_GGML_F16 = 1, LT_GGML_Q4_0 = 2, LT_GGML_Q8_0 = 8, LT_GGML_BF16 = 30 } lt_ggml_type;
/* "F32", "F16", "Q4_0", "Q8_0", "BF16"; NULL for a type libtensor does not read. */
LT_API const char *lt_ggml_type_name(int type);
/* Elements per block and bytes per block of type (1 and 4 for F32; 32 and 34
 * for Q8_0; 32 and 18 for Q4_0); false for a type libtensor does not read. */
LT_API bool lt_ggml_type_block(int type, int64_t *block, size_t *bytes);

/* ---- reading --------------------------------------------------------------- */

typedef struct lt_gguf_file lt_gguf_file;

/* One tensor of an open file. Borrowed from the file (valid until
 * lt_gguf_close). shape is row-major (shape[ndim-1] == ne[0]), as libtensor
 * and numpy write it; ne is the file's order. */
typedef struct lt_gguf_tensor_info {
  const char *name;
  int type; /* an lt_ggml_type */
  int ndim;
  int64_t ne[4];
  int64_t shape[4];
  int64_t numel;
  uint64_t offset; /* into the data section */
  uint64_t nbytes;
} lt_gguf_tensor_info;

/* Opens path and checks it (above). Returns new (close with
 * lt_gguf_close), or NULL with the error set: LT_ERR_IO, LT_ERR_FORMAT,
 * LT_ERR_DTYPE (a tensor type not read), LT_ERR_OVERFLOW, LT_ERR_NOMEM. */
LT_API lt_gguf_file *lt_gguf_open(const char *path);
LT_API void lt_gguf_close(lt_gguf_file *f); /* NULL is a no-op */

LT_API uint32_t lt_gguf_version(const lt_gguf_file *f);
LT_API uint32_t lt_gguf_alignment(const lt_gguf_file *f);

/* The key-value pairs, in the file's order. */
LT_API int lt_gguf_kv_count(const lt_gguf_file *f);
/* Key i (borrowed, NUL-terminated); NULL out of range. */
LT_API const char *lt_gguf_kv_key(const lt_gguf_file *f, int i);
/* The index of key, or -1 (no error set). */
LT_API int lt_gguf_find_key(const lt_gguf_file *f, const char *key);
/* The value type of pair i; for an array also its element type and length
 * (either may be NULL). LT_GGUF_TYPE_COUNT out of range. */
LT_API lt_gguf_type lt_gguf_kv_type(const lt_gguf_file *f, int i, lt_gguf_type *elem, uint64_t *n);

/* Typed getters of key: LT_OK and *out, else (no such key: LT_ERR_INVALID
 * "missing"; another type: LT_ERR_FORMAT naming both types; out of range:
 * LT_ERR_FORMAT) with *out untouched. _int accepts every integer type, the
 * value in int64_t (a uint64 above INT64_MAX is out of range); _real accepts
 * float32 and float64; _str gives the bytes (borrowed, not NUL-terminated,
 * may hold a NUL) and their length. */
LT_API lt_status lt_gguf_get_int(const lt_gguf_file *f, const char *key, int64_t *out);
LT_API lt_status lt_gguf_get_real(const lt_gguf_file *f, const char *key, double *out);
LT_API lt_status lt_gguf_get_bool(const lt_gguf_file *f, const char *key, bool *out);
LT_API lt_status lt_gguf_get_str(const lt_gguf_file *f, const char *key, const char **s, size_t *len);

/* Element j of the array key: _arr_str for an array of strings, _arr_int of
 * integers, _arr_real of float32/float64. Errors as the getters, and
 * LT_ERR_INDEX for j outside the array. Each is O(1). */
LT_API lt_status lt_gguf_arr_str(const lt_gguf_file *f, int kv, uint64_t j, const char **s, size_t *len);
LT_API lt_status lt_gguf_arr_int(const lt_gguf_file *f, int kv, uint64_t j, int64_t *out);
LT_API lt_status lt_gguf_arr_real(const lt_gguf_file *f, int kv, uint64_t j, double *out);

/* The tensors, in the file's order. */
LT_API int lt_gguf_tensor_count(const lt_gguf_file *f);
LT_API const lt_gguf_tensor_info *lt_gguf_tensor(const lt_gguf_file *f, int i); /* borrowed; NULL out of range */
/* The index of the tensor called name, or -1 (no error set). */
LT_API int lt_gguf_find_tensor(const lt_gguf_file *f, const char *name);
/* Tensor i's bytes (borrowed until lt_gguf_close; aligned as the file says
 * relative to the mapping); NULL out of range. */
LT_API const void *lt_gguf_tensor_data(const lt_gguf_file *f, int i);

/* Tensor i expanded to f32 into dst[0..numel) (borrowed): F32 as is, F16 and
 * BF16 exactly, Q8_0 and Q4_0 by ggml's dequantization (d * q; d * (q - 8)).
 * Every value must be finite (LT_ERR_NUMERIC naming the tensor, the value
 * and its flat index; dst may then hold part of the tensor). */
LT_API lt_status lt_gguf_read_f32(const lt_gguf_file *f, int i, float *dst);

/* ---- writing --------------------------------------------------------------- */

typedef struct lt_gguf_writer lt_gguf_writer;

/* An empty file to fill: the pairs and tensors are written in the order
 * they are added. Returns new (free with lt_gguf_writer_free), or NULL. */
LT_API lt_gguf_writer *lt_gguf_writer_new(void);
LT_API void lt_gguf_writer_free(lt_gguf_writer *w); /* NULL is a no-op */

/* Adds one pair (the key copied; unique, non-empty, at most LT_GGUF_MAX_NAME
 * bytes: LT_ERR_INVALID otherwise). Strings are copied (s[0..len) for
 * _str_n). general.alignment set with _u32 (a power of two) sets the
 * alignment the file is written with. */
LT_API lt_status lt_gguf_set_u32(lt_gguf_writer *w, const char *key, uint32_t v);
LT_API lt_status lt_gguf_set_i32(lt_gguf_writer *w, const char *key, int32_t v);
LT_API lt_status lt_gguf_set_u64(lt_gguf_writer *w, const char *key, uint64_t v);
LT_API lt_status lt_gguf_set_f32(lt_gguf_writer *w, const char *key, float v);
LT_API lt_status lt_gguf_set_bool(lt_gguf_writer *w, const char *key, bool v);
LT_API lt_status lt_gguf_set_str(lt_gguf_writer *w, const char *key, const char *s);
LT_API lt_status lt_gguf_set_str_n(lt_gguf_writer *w, const char *key, const char *s, size_t len);
/* Arrays: n elements copied (strings: lens[k] bytes of strs[k]; lens NULL:
 * strlen). */
LT_API lt_status lt_gguf_set_arr_str(lt_gguf_writer *w, const char *key, uint64_t n, const char *const *strs,
                              const size_t *lens);
LT_API lt_status lt_gguf_set_arr_i32(lt_gguf_writer *w, const char *key, uint64_t n, const int32_t *v);
LT_API lt_status lt_gguf_set_arr_f32(lt_gguf_writer *w, const char *key, uint64_t n, const float *v);

/* Adds a tensor called name (unique, non-empty, at most 63 bytes as
 * llama.cpp reads them) of ggml type `type`, with a row-major shape
 * (ndim in [1, 4]; the file gets it reversed, as ne), from the f32 values of
 * t (borrowed; any layout, any float dtype; its shape must have numel
 * elements equal to the product of shape), converted: F32 as is, BF16
 * rounded to nearest even (lt_bf16_from_f32's rule), Q8_0/Q4_0 row by row
 * by tensor/quant.h's reference quantization (ggml's; the values must be
 * finite: LT_ERR_NUMERIC). F16 is not written (LT_ERR_DTYPE). The innermost
 * size must be a multiple of the type's block.
 * The bytes are copied. Errors: LT_ERR_INVALID (name, shape), LT_ERR_DTYPE,
 * LT_ERR_NOMEM. */
LT_API lt_status lt_gguf_add_tensor(lt_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
                             const lt_tensor *t);
/* The same from raw bytes already in the type's layout (nbytes must be
 * exactly the type's size for the shape; copied): for tests and for types
 * converted elsewhere. */
LT_API lt_status lt_gguf_add_tensor_bytes(lt_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
                                   const void *bytes, size_t nbytes);

/* Writes the file (version 3) to path durably (a temporary in the same
 * directory, fsync, rename: a failed write leaves the old file). Errors:
 * LT_ERR_IO, LT_ERR_NOMEM. */
LT_API lt_status lt_gguf_write(const lt_gguf_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* LT_GGUF_H */
