/*
 * tensor/internal.h: what kernel files share inside the library. Not installed.
 *
 * - error reporting (lt__err, lt__desc): every failure goes through lt__err;
 * - LT_CHECK: an invariant that stays on in release builds (programmer errors
 *   only; anything a caller, a file or the environment can cause gets a status);
 * - dtype helpers (load/store as double, promotion);
 * - lt__iter: the one strided N-d iterator that every elementwise kernel uses;
 * - view construction and dim normalisation shared by tensor/ files;
 * - little-endian integer load/store for the library's file formats.
 *
 * Internal names use the lt__ prefix (two underscores).
 */
#ifndef LT_TENSOR_INTERNAL_H
#define LT_TENSOR_INTERNAL_H

#include "tensor/tensor.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */

/* Record a failure (status + printf-style detail) and return the status, so a
 * caller writes `return lt__err(LT_ERR_SHAPE, "add: ...")`. */
lt_status lt__err(lt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For a NULL tensor argument: keeps a pending error (so failures propagate
 * through composed calls with their first message), else sets LT_ERR_NULL
 * naming the op and the argument. Returns LT_ERR_NULL or the pending status. */
lt_status lt__err_null(const char *op, const char *arg);

/* "[4,8] f32" for messages. buf must hold at least LT__DESC_SIZE bytes. */
#define LT__DESC_SIZE LT_TENSOR_DESC_SIZE
char *lt__desc(const lt_tensor *t, char *buf);
/* Convenience for one-shot messages: LT__D(t) expands to a temporary string. */
#define LT__D(t) lt__desc((t), (char[LT__DESC_SIZE]){0})
/* "[4,8]" */
#define LT__S(nd, sh) lt_shape_str((nd), (sh), (char[LT__DESC_SIZE]){0}, LT__DESC_SIZE)

/* Invariant check that is never compiled out. For programmer errors inside the
 * library only (a broken internal contract), never for input validation. */
#define LT_CHECK(cond)                                                        \
  do {                                                                        \
    if (!(cond)) lt__check_failed(#cond, __FILE__, __LINE__);                 \
  } while (0)
_Noreturn void lt__check_failed(const char *expr, const char *file, int line);

/* ---- dtypes ------------------------------------------------------------ */

double lt__load(const void *p, lt_dtype d);
void lt__store(void *p, lt_dtype d, double v);
/* Larger of two dtypes in bool < i32 < i64 < f32 < f64. */
lt_dtype lt__promote(lt_dtype a, lt_dtype b);
/* The dtype a float-valued function returns for input d (f64 stays f64, else f32). */
lt_dtype lt__float_result(lt_dtype d);
bool lt__valid_dtype(lt_dtype d);

/* ---- shapes and dims --------------------------------------------------- */

/* Normalise dim (negative counts from the end) for a tensor of rank ndim;
 * on failure sets an error naming op and returns it. */
lt_status lt__wrap_dim(const char *op, int dim, int ndim, int *out);
/* Checked product of sizes (LT_ERR_OVERFLOW above 2^62 elements, LT_ERR_INVALID
 * for negative sizes or ndim outside [0, LT_MAX_DIMS]). */
lt_status lt__shape_numel(const char *op, int ndim, const int64_t *shape, int64_t *numel);
bool lt__same_shape(const lt_tensor *a, const lt_tensor *b);

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
/* Validate an in-place write on x by op (not a leaf requiring grad while grad
 * mode is on, etc.). Returns LT_OK or the error. */
lt_status lt__check_inplace(const char *op, const lt_tensor *x);

/* Live tensor objects and storages in the process (for leak tests). */
int64_t lt__live_tensors(void);
int64_t lt__live_storages(void);

/* ---- the strided iterator --------------------------------------------- */

#define LT__ITER_MAX_OPS 4

/* Iterates over a common shape for up to 4 operands. Operand k may have fewer
 * dims or size-1 dims (NumPy broadcasting: they get stride 0). Dims are
 * coalesced where every operand allows, so contiguous operands give one long
 * inner loop. Strides inside are in bytes. */
typedef struct lt__iter {
  int ndim;                                   /* >= 1 after init */
  int64_t shape[LT_MAX_DIMS];                 /* innermost is shape[ndim-1] */
  int nops;
  char *data[LT__ITER_MAX_OPS];
  int64_t stride[LT__ITER_MAX_OPS][LT_MAX_DIMS];
  int64_t numel;
} lt__iter;

/* Inner loop: n elements; ptrs[k] points at operand k's first element and
 * strides[k] is its byte stride along the run. */
typedef void (*lt__loop_fn)(int64_t n, char *const *ptrs, const int64_t *strides, void *ctx);

/* ops[k] must broadcast to (ndim, shape); the caller checked that. */
void lt__iter_init(lt__iter *it, int ndim, const int64_t *shape, int nops,
                   const lt_tensor *const *ops);
/* Calls fn over all elements. With parallel true and enough work, outer
 * iterations are split statically over the OpenMP threads (results must not
 * depend on the split: fn writes disjoint outputs). */
void lt__iter_run(const lt__iter *it, lt__loop_fn fn, void *ctx, bool parallel);

/* Minimum elements before a kernel goes multi-threaded. */
#define LT__PARALLEL_MIN 32768

/* ---- little-endian integers in byte buffers (file formats) ------------- */

/* Checkpoint headers and serialised tokenizers store integers little-endian
 * whatever the host's byte order. */
static inline void lt__put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void lt__put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t lt__get_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t lt__get_le64(const unsigned char *p) {
  return (uint64_t)lt__get_le32(p) | (uint64_t)lt__get_le32(p + 4) << 32;
}

/* ---- runtime ----------------------------------------------------------- */

/* Lazily initialise the runtime (threads, BLIS). Cheap after the first call. */
lt_status lt__ensure_init(void);

/* ---- BLIS (tensor/blas.c is the only file that includes blis.h) -------- */

/* C = alpha * op(A) * op(B) + beta * C with general strides in elements
 * (rs = row stride, cs = column stride); transposition is expressed through
 * the strides. dtype f32 or f64; m, n, k >= 0. */
lt_status lt__blas_gemm(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha,
                        const void *a, int64_t rsa, int64_t csa,
                        const void *b, int64_t rsb, int64_t csb, double beta,
                        void *c, int64_t rsc, int64_t csc);
/* The same on one thread, for callers that parallelise over a batch of
 * small products themselves (inside an OpenMP region). */
lt_status lt__blas_gemm_1t(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha,
                           const void *a, int64_t rsa, int64_t csa,
                           const void *b, int64_t rsb, int64_t csb, double beta,
                           void *c, int64_t rsc, int64_t csc);
void lt__blas_set_threads(int n);

/* tensor/random.c, for nn/dropout.c: keep = bernoulli(q) over n elements
 * drawn from g (advancing it as lt_bernoulli would), and
 * y = x * (keep ? s : 0) in the same pass (x, y, keep contiguous; dt f32 or
 * f64). */
void lt__dropout_draw(lt_generator *g, lt_dtype dt, int64_t n, double q, double s, const void *x, void *y,
                      uint8_t *keep);

#endif /* LT_TENSOR_INTERNAL_H */
