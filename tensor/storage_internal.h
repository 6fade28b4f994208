/*
 * tensor/storage_internal.h: the tensor object and its storage, as library
 * code sees them. Not installed.
 *
 * - dtype helpers (load/store one element as double, promotion);
 * - shape and dim helpers (normalising a dim, checked element counts);
 * - views, references, storage sharing and version counters (tensor/tensor.c);
 * - lt__as_contig: an operand as a contiguous tensor of a given dtype, the
 *   one way kernels that want flat rows get them.
 */
#ifndef LT_TENSOR_STORAGE_INTERNAL_H
#define LT_TENSOR_STORAGE_INTERNAL_H

#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

double lt__load(const void *p, lt_dtype d);
void lt__store(void *p, lt_dtype d, double v);
/* Larger of two dtypes in bool < i32 < i64 < f32 < f64. */
lt_dtype lt__promote(lt_dtype a, lt_dtype b);
/* The dtype a float-valued function returns for input d (f64 and bf16 stay,
 * else f32). */
lt_dtype lt__float_result(lt_dtype d);
/* The dtype kernels compute d in: f32 for bf16, d itself otherwise. */
lt_dtype lt__compute_dtype(lt_dtype d);
bool lt__valid_dtype(lt_dtype d);

/* bf16 <-> f32, the one home of the rounding rule (lt_bf16_from_f32 in
 * tensor.h documents it). Round to nearest even by adding 0x7fff plus the
 * lowest kept bit before truncating; a NaN is truncated with the quiet bit
 * set instead (rounding could carry it into an infinity). Inline: the cast
 * loops and the GEMM packing call them per element. Branch-free (both
 * results computed, one selected), so that loops over contiguous rows
 * vectorise (autocast's operand conversion, tensor/matmul.c, runs them over
 * whole rows; figures: docs/mixed-precision.md). Not VCVTNEPS2BF16: it
 * flushes subnormals to zero. */
static inline uint16_t lt__bf16_from_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
static inline float lt__f32_from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
/* ---- shapes and dims --------------------------------------------------- */

/* Normalise dim (negative counts from the end) for a tensor of rank ndim;
 * on failure sets an error naming op and returns it. */
lt_status lt__wrap_dim(const char *op, int dim, int ndim, int *out);
/* Checked product of sizes (LT_ERR_OVERFLOW above 2^62 elements, LT_ERR_INVALID
 * for negative sizes or ndim outside [0, LT_MAX_DIMS]). */
lt_status lt__shape_numel(const char *op, int ndim, const int64_t *shape, int64_t *numel);
bool lt__same_shape(const lt_tensor *a, const lt_tensor *b);

/* A new contiguous tensor of dtype and shape (uninitialised), errors naming
 * op (lt_empty is this with op "empty"). Returns new. */
lt_tensor *lt__tensor_new(const char *op, lt_dtype dtype, int ndim, const int64_t *shape);
/* A new tensor object viewing x's storage with the given geometry (no checks
 * beyond allocation). Not recorded for autograd. Returns new or NULL (NOMEM). */
lt_tensor *lt__view_of(const lt_tensor *x, int ndim, const int64_t *shape,
                       const int64_t *stride, int64_t offset);
/* Drop one reference held by library internals (a graph node, a saved
 * tensor): unlike lt_tensor_free it never touches scope ownership. */
void lt__tensor_release(lt_tensor *t);

/* True if nothing else can see t's memory: one reference, not in a scope,
 * sole user of a storage of exactly its size, contiguous. Such a tensor can
 * be adopted (e.g. as a .grad) without a copy. */
bool lt__tensor_exclusive(const lt_tensor *t);

/* True if t's storage is seen by another tensor object (a view of it, or one
 * it views) or belongs to the user (lt_tensor_from_borrowed). */
bool lt__storage_shared(const lt_tensor *t);
/* Moves src's storage, dtype and geometry into dst, which keeps its identity
 * (the object, its references, scope and autograd fields), and frees src.
 * dst's old storage reference is released; both storages' versions are
 * bumped so that graphs that saved dst (or a view of it) fail their backward. src must be a fresh
 * tensor (one reference, in no scope, no grad_fn, no grad). For in-place
 * conversions such as lt_params_to_dtype. */
void lt__tensor_take_storage(lt_tensor *dst, lt_tensor *src);

/* Contiguous row-major strides for shape. */
void lt__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);

/* The storage's version counter (bumped by every in-place write) and bump. */
uint64_t lt__version(const lt_tensor *x);
void lt__bump_version(lt_tensor *x);
/* x's storage's identity: unique for the process's life (a freed storage's
 * id is never given again, unlike its address), shared by x's views. With
 * lt__version it names the contents of x's memory (the autocast weight cache,
 * tensor/matmul.c). */
uint64_t lt__storage_id(const lt_tensor *x);
/* Validate an in-place write on x by op (not a leaf requiring grad while grad
 * mode is on, etc.). Returns LT_OK or the error. */
lt_status lt__check_inplace(const char *op, const lt_tensor *x);

/* Gives t (in no scope, owned by the caller) to the innermost open scope, if
 * any, as if an op had just made it: how a function that ran its
 * intermediates in a scope of its own hands back several results
 * (lt_scope_return does one). NULL: NULL. On out of memory t is freed and
 * NULL returned (error set). */
lt_tensor *lt__scope_adopt(lt_tensor *t);

/* Live tensor objects and storages in the process (for leak tests). */
int64_t lt__live_tensors(void);
int64_t lt__live_storages(void);
/* The storage cache of large blocks (tensor/tensor.c), for tests: bytes
 * cached, bytes of large blocks in use, their peak; any pointer may be NULL. */
void lt__storage_cache_stats(size_t *cached, size_t *in_use, size_t *peak);
/* Returns every cached block to the system (and, with glibc, the heap's
 * free pages: malloc_trim), so that memory released on purpose (the f32
 * weights lt_params_quantize replaced) leaves the process. */
void lt__storage_cache_release(void);

/* x as a contiguous tensor of dtype dt: x itself (*tmp = NULL) when it
 * already is one (or x is NULL), else a contiguous copy or cast made with
 * grad mode off (*tmp, which the caller frees with lt_tensor_free once done
 * with the result). NULL with the error set on failure. */
const lt_tensor *lt__as_contig(const lt_tensor *x, lt_dtype dt, lt_tensor **tmp);

#endif /* LT_TENSOR_STORAGE_INTERNAL_H */
