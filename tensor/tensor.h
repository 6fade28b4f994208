/*
 * tensor/tensor.h: the public contract of libtensor's N-d tensor core.
 *
 * What this is: strided N-d tensors (f32, f64, i32, i64, bool, and bf16 as a
 * storage dtype computed in f32) with views that share storage, NumPy
 * broadcasting, elementwise ops, reductions, matmul (BLIS for f32/f64, oneDNN
 * for bf16) and autocast to bf16, indexing, a counter-based random generator,
 * printing, and the runtime (threads, what this CPU runs: lt_runtime_get_info). Every op here is also
 * differentiable where that makes sense: with grad mode on and an input that
 * requires a gradient, the op records itself for autograd/ (see autograd.h).
 *
 * What this is not: a lazy graph compiler or a GPU backend. Ops run eagerly on CPU.
 *
 * ---------------------------------------------------------------------------
 * Conventions (the same words in every libtensor header)
 *
 * Naming. Ops are lt_<op> (lt_add, lt_matmul, lt_reshape); object lifecycle is
 * lt_<object>_<verb> (lt_tensor_free, lt_generator_new). A trailing underscore
 * marks an in-place op (lt_add_, lt_fill_), as in PyTorch.
 *
 * Errors. A function returning a tensor returns NULL on failure; a function
 * returning lt_status returns a code other than LT_OK. Either way the thread-local
 * lt_last_status() and lt_last_error() describe what happened, naming the op, the
 * shapes and dtypes and the rule broken, e.g.
 *     "matmul: a is [4,8] f32, b is [7,3] f32: inner dimensions 8 != 7".
 * On failure no output was created and no input was modified. The message stays
 * valid until the next failing call on the same thread (successful calls do not
 * clear it). Passing NULL as a tensor argument fails with LT_ERR_NULL; if an
 * error is already pending, its message is kept, so a failure deep inside a
 * composed expression like lt_relu(lt_add(lt_matmul(x, w), b)) surfaces with
 * its original message. The library never prints unasked and never exits.
 *
 * Ownership. "Returns new" means a new tensor object that the caller owns and
 * releases with lt_tensor_free(), unless a scope is open (see lt_scope_begin):
 * then the innermost scope owns it and frees it at lt_scope_end(). Every op
 * returns a distinct tensor object, never one of its arguments. "View of x"
 * means the new tensor shares x's storage (writes through one are seen through
 * the other); the storage lives as long as any tensor that uses it. "Borrows"
 * means the function uses the argument only during the call.
 *
 * Dimensions. A dim argument may be negative and counts from the end, as in
 * Python. Shapes and strides count elements, not bytes. At most LT_MAX_DIMS
 * dimensions; 0-d tensors (scalars) and zero-size dimensions are valid.
 *
 * Dtypes. Binary ops promote to the larger type in the order
 * bool < i32 < i64 < f32 < f64 (division and float-only functions such as exp
 * promote integers and bool to f32). Scalars are passed as double.
 *
 * Threads. Tensor objects are not shared between threads concurrently. Kernels
 * run multi-threaded inside (see lt_set_num_threads in runtime section).
 *
 * Exports. Every public function is declared LT_API. The shared libraries
 * are built with -fvisibility=hidden, so they export exactly those: lt_<name>
 * is the API, lt__<name> (two underscores) is internal and never exported.
 * The ctest api_exports checks both halves of that rule.
 */
#ifndef LT_TENSOR_H
#define LT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a declaration of the public API (see "Exports" above). */
#if defined(__GNUC__) || defined(__clang__)
#define LT_API __attribute__((visibility("default")))
#else
#define LT_API
#endif

/* ======================================================================== */
/* Status codes                                                             */
/* ======================================================================== */

/* X(name, message): the one table of status codes, their names and messages. */
#define LT_STATUS_TABLE(X)                                                    \
  X(LT_OK, "success")                                                         \
  X(LT_ERR_NULL, "a required argument is NULL")                               \
  X(LT_ERR_INVALID, "invalid argument")                                       \
  X(LT_ERR_SHAPE, "incompatible shapes")                                      \
  X(LT_ERR_DTYPE, "unsupported or mismatched dtype")                          \
  X(LT_ERR_INDEX, "index out of range")                                       \
  X(LT_ERR_NOMEM, "out of memory")                                            \
  X(LT_ERR_OVERFLOW, "size arithmetic overflows")                             \
  X(LT_ERR_IO, "input/output error")                                          \
  X(LT_ERR_FORMAT, "malformed or unsupported file")                           \
  X(LT_ERR_AUTOGRAD, "autograd error")                                        \
  X(LT_ERR_STATE, "operation not valid in the current state")                 \
  X(LT_ERR_NUMERIC, "non-finite value")                                       \
  X(LT_ERR_BACKEND, "BLAS backend error")

typedef enum {
#define LT__STATUS_ENUM(name, msg) name,
  LT_STATUS_TABLE(LT__STATUS_ENUM)
#undef LT__STATUS_ENUM
  LT_STATUS_COUNT
} lt_status;

/* The code of the last failure on this thread (LT_OK if none since
 * lt_clear_error). */
LT_API lt_status lt_last_status(void);
/* The detail message of the last failure on this thread ("" if none). Borrowed:
 * valid until the next failing call on this thread. */
LT_API const char *lt_last_error(void);
/* Forget the pending error (status LT_OK, message ""). */
LT_API void lt_clear_error(void);
/* "LT_ERR_SHAPE" for LT_ERR_SHAPE; "LT_UNKNOWN" for an unknown value. Static. */
LT_API const char *lt_status_name(lt_status s);
/* The generic message of a code ("incompatible shapes"). Static. */
LT_API const char *lt_status_message(lt_status s);

/* Raising an error from code outside the library (a model, an extension, a
 * program), through the same channel as libtensor's own calls.
 *
 * lt_error_set records code and the printf-formatted detail (fmt, ...) as this
 * thread's lt_last_status() / lt_last_error() and returns code, so a function
 * ends with `return lt_error_set(LT_ERR_SHAPE, "myop: x is %s: need 2-d", d);`.
 * Name the op, the argument, what it is and the rule broken, as libtensor's
 * messages do. The message is truncated to 1023 bytes; fmt's arguments may
 * point into the current lt_last_error() text. code should be an LT_ERR_*
 * value; a value outside the status table is recorded as LT_ERR_INVALID (and
 * returned as such). fmt must not be NULL. */
LT_API lt_status lt_error_set(lt_status code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* For a NULL argument: keeps a pending error (lt_last_status() != LT_OK), so a
 * failure deep inside a composed expression surfaces with its first message,
 * else records LT_ERR_NULL as "<op>: argument <arg> is NULL". Returns the
 * recorded status. op and arg are borrowed. */
LT_API lt_status lt_error_null_arg(const char *op, const char *arg);

/* ---- enum names ---------------------------------------------------------- */
/* The one rule behind every enum's _name and _parse pair (lt_optim_kind_name,
 * lt_tf_arch_parse, ...): each enum keeps one table of names, indexed by
 * value, beside its declaration; files and command lines both go through it.
 *
 * lt_enum_name: names[v] for 0 <= v < n, else "unknown". Returns a borrowed
 * (normally static) string. */
LT_API const char *lt_enum_name(const char *const *names, int n, int v);
/* An extra spelling accepted by lt_enum_parse (never produced by a _name
 * function): an older file format's name, a command-line shorthand. */
typedef struct lt_enum_alias {
  const char *name;
  int value;
} lt_enum_alias;
/* Sets *out to the index of s in names[0..n), or to the value of the alias
 * named s among aliases[0..naliases) (aliases may be NULL when naliases is 0).
 * Errors: LT_ERR_NULL if s is NULL; LT_ERR_INVALID "unknown <what> '<s>' (one
 * of: <names>)" if s matches nothing. *out is untouched on failure. All
 * arguments are borrowed. */
LT_API lt_status lt_enum_parse(const char *what, const char *const *names, int n, const lt_enum_alias *aliases,
                        int naliases, const char *s, int *out);
/* Defines `lt_status fn(const char *s, T *out)`, the typed parser of enum T
 * over lt_enum_parse with the other arguments as given. */
#define LT_ENUM_PARSER(fn, T, what, names, n, aliases, naliases)                   \
  lt_status fn(const char *s, T *out) {                                            \
    int v_;                                                                        \
    lt_status st_ = lt_enum_parse((what), (names), (n), (aliases), (naliases), s, &v_); \
    if (st_ == LT_OK) *out = (T)v_;                                                \
    return st_;                                                                    \
  }

/* ======================================================================== */
/* Runtime: threads, BLAS kernels, version                                  */
/* ======================================================================== */

/* Initialise the runtime: read LT_NUM_THREADS, choose the BLIS kernel set
 * (unless BLIS_ARCH_TYPE is already set by the user) and initialise BLIS.
 * Called automatically by the first op that needs it; calling it first is only
 * useful to catch an error early. Idempotent, thread-safe.
 * Process-wide effect: with glibc, it raises malloc's mmap threshold to 32 MiB
 * and its trim threshold to 512 MiB (mallopt), so that the memory a training
 * step frees stays in the heap for the next step instead of being returned and
 * faulted in again (docs/benchmarks.md). Set LT_MALLOC_TUNE=0 in the
 * environment to keep glibc's defaults. */
LT_API lt_status lt_init(void);
/* Returns to the system the large freed blocks kept for reuse (the storage
 * cache) and, with glibc, the free pages inside the heap: after a phase that
 * freed memory on purpose and will not need it again (a model converted
 * into a weight format while loading: models/transformer/load.h; its f32
 * scratch would otherwise stay resident). Thread-safe; the next large
 * blocks come from the system again. */
LT_API void lt_release_cached_memory(void);

/* One setting for BLIS and libtensor's OpenMP kernels together. n >= 1; the
 * default is the number of cores, or the LT_NUM_THREADS environment variable. */
LT_API lt_status lt_set_num_threads(int n);
LT_API int lt_get_num_threads(void);

/* Automatic choice between all cores and one thread, for a training loop.
 * A small model on a busy machine can train many times faster on one thread
 * than on all: every parallel region waits for a thread that another process
 * holds. Results never depend on the thread count, so the loop may measure
 * and switch:
 *   - it trains on the chosen setting (all cores at first) and keeps a moving
 *     average of its speed (tokens, or any unit of work, per second);
 *   - now and then it probes the other setting for 8 steps: 10 steps in,
 *     then every 20 seconds (doubling, up to 320, after each probe that
 *     loses), and at once when a step runs at less than a third of the
 *     average;
 *   - a probe step at less than a third of the chosen setting's speed ends
 *     the probe (so a bad probe costs one step);
 *   - the faster setting (by 10%) becomes the chosen one.
 * The caller owns the struct (fields are read-only outside these calls) and
 * sets the thread count itself: lt_set_num_threads(lt_autothreads_next(&T))
 * before a step, lt_autothreads_record after it, then
 * lt_set_num_threads(T.chosen) for anything that is not a timed step. Used by
 * train/trainer.h; plain arithmetic and a monotonic clock, no errors. */
typedef struct lt_autothreads {
  bool on;              /* measuring at all (lt_autothreads_next returns chosen when off) */
  int max;              /* all cores */
  int chosen;           /* max or 1 */
  double rate[2];       /* work/s moving averages: [0] all cores, [1] one thread; 0 = not measured */
  int probe_left;       /* steps left in the current probe of the other setting */
  double probe_work, probe_seconds;
  double next_probe;    /* monotonic time (s) of the next scheduled probe */
  double interval;      /* seconds between scheduled probes */
  int64_t steps;        /* steps recorded */
} lt_autothreads;
/* Initialises *T choosing between max_threads (>= 1) and 1; on = false makes
 * every call return max_threads. */
LT_API void lt_autothreads_init(lt_autothreads *T, bool on, int max_threads);
/* The thread count for the next step: the chosen one, or the other during a probe. */
LT_API int lt_autothreads_next(lt_autothreads *T);
/* Records a step made on threads (the value lt_autothreads_next returned)
 * that did work units in seconds. Returns true when the chosen setting has
 * just changed (T->chosen is the new one; T->rate[] holds both speeds: slot 0
 * all cores, slot 1 one thread). */
LT_API bool lt_autothreads_record(lt_autothreads *T, int threads, double work, double seconds);
/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for durations only, its
 * origin is arbitrary. The one clock of the library's timers (the trainer's
 * progress and timings, the evaluator, the distributed timeouts). */
LT_API double lt_monotonic_seconds(void);

/* One alternative implementation (a path): its family (the choice it
 * belongs to, "gemm"), its name ("small"), the environment setting that
 * forces it ("LT_GEMM=small"), and whether this CPU and build run it. */
typedef struct lt_runtime_path {
  const char *family;
  const char *name;
  const char *force;
  bool supported;
} lt_runtime_path;

typedef struct lt_runtime_info {
  const char *version;        /* libtensor version, e.g. "0.1.0" */
  const char *blas_arch;      /* BLIS kernel set in use, e.g. "skx" */
  const char *blas_arch_why;  /* how it was chosen, e.g. "avx512f+dq+bw+vl on this CPU" */
  int num_threads;
  bool blas_arch_from_user;   /* true when BLIS_ARCH_TYPE was set by the user */
  /* bf16 products (oneDNN): how they run on this CPU, e.g. "native (oneDNN,
   * AVX512_BF16)" or a "fallback (...)" naming what replaces the missing
   * instructions (oneDNN's emulation, or f32 through BLIS). Never an illegal
   * instruction: oneDNN dispatches on CPUID. */
  const char *bf16_gemm;
  bool bf16_native;           /* AVX512_BF16 or AMX in use */
  /* conv2d / conv1d under autocast: "native (oneDNN direct kernels; ...)",
   * "fallback (oneDNN emulates ...)", or "f32 (...)" where oneDNN has no
   * bf16 convolution for this CPU (convolutions then stay f32). */
  const char *bf16_conv;
  /* The kernel of the fused attention's tile products under autocast
   * (tensor/bf16dot.c), where the fused path runs (by default only when T or
   * S exceeds one 256 x 256 tile): "AMX tiles (tdpbf16ps)", "AVX512_BF16
   * (vdpbf16ps)", or "none on this CPU (...)" where each tile goes through
   * the bf16 products above (docs/attention.md, "bf16 tiles under
   * autocast"). */
  const char *bf16_attention;
  /* Every alternative implementation of the library, num_paths of them
   * (static; the path table, docs/architecture.md "Paths and switches"). */
  int num_paths;
  const lt_runtime_path *paths;
} lt_runtime_info;
/* Fills *info (strings are static). Initialises the runtime if needed. */
LT_API lt_status lt_runtime_get_info(lt_runtime_info *info);
LT_API const char *lt_version(void);

/* ======================================================================== */
/* Dtypes and the tensor object                                             */
/* ======================================================================== */

typedef enum {
  LT_DTYPE_F32,
  LT_DTYPE_F64,
  LT_DTYPE_I32,
  LT_DTYPE_I64,
  LT_DTYPE_BOOL, /* one byte per element, 0 or 1 */
  /* bfloat16: the top 16 bits of an f32 (8 exponent bits, 7 mantissa bits).
   * A storage dtype: elementwise ops and reductions compute in f32 and round
   * the result back (as PyTorch); matrix products take it through oneDNN
   * (docs/mixed-precision.md). Appended last: the values above are stored in
   * checkpoints and fixtures and never change. */
  LT_DTYPE_BF16,
  LT_DTYPE_COUNT
} lt_dtype;

LT_API const char *lt_dtype_name(lt_dtype d); /* "f32", ..., "bf16"; static */
LT_API size_t lt_dtype_size(lt_dtype d);      /* bytes per element; 0 if invalid */
/* f32 or f64: the dtypes with kernels of their own, which most ops (nn/,
 * random numbers, initialisers) require. */
LT_API bool lt_dtype_is_float(lt_dtype d);
/* f32, f64 or bf16: any floating-point dtype, the dtypes that can carry
 * gradients (PyTorch's is_floating_point). */
LT_API bool lt_dtype_is_floating(lt_dtype d);

/* One f32 value as bf16 bits, rounded to nearest even; NaN stays NaN (made
 * quiet, sign kept), infinities and zeros keep their sign, and values past
 * the largest finite bf16 (3.3895e38) round to infinity as IEEE rounding
 * says. Subnormal f32 values round to bf16 subnormals (nothing is flushed). */
LT_API uint16_t lt_bf16_from_f32(float x);
/* bf16 bits as f32 (exact: every bf16 is an f32). */
LT_API float lt_f32_from_bf16(uint16_t b);

/* Autocast (mixed precision; docs/mixed-precision.md): thread-local, off by
 * default, scoped like grad mode. lt_set_autocast(LT_DTYPE_BF16) turns it on,
 * lt_set_autocast(LT_DTYPE_F32) off; it returns the previous mode, so a scope
 * is
 *     lt_dtype prev = lt_set_autocast(LT_DTYPE_BF16); ...; lt_set_autocast(prev);
 * Under it every f32 matrix product (lt_matmul, lt_linear, attention's QK^T
 * and AV, and their backward products run by lt_backward while it is on)
 * multiplies bf16 copies of its operands and accumulates in f32; outputs,
 * parameters, gradients and everything else (softmax, norms, losses,
 * optimizers) stay f32. f64 products are never changed. A parameter's bf16
 * copy (a leaf requiring grad) is made once per storage version and kept in
 * a per-thread cache the library owns (bounded; redone after any in-place
 * write, such as an optimizer step); turning autocast off on a thread,
 * lt_set_autocast(LT_DTYPE_F32), frees that thread's copies. The mode of the
 * calling thread also governs the products the library runs for it on its
 * worker threads. Another dtype sets LT_ERR_DTYPE and leaves the mode as it
 * was (the current mode is returned). */
LT_API lt_dtype lt_set_autocast(lt_dtype dtype);
LT_API lt_dtype lt_autocast_dtype(void); /* LT_DTYPE_BF16 when on, LT_DTYPE_F32 when off */

#define LT_MAX_DIMS 8

typedef struct lt_storage lt_storage;   /* refcounted buffer; opaque */
typedef struct lt_node lt_node;         /* autograd graph node; opaque */
typedef struct lt_scope lt_scope;       /* ownership scope; opaque */
typedef struct lt_tensor lt_tensor;

/* Gradient hook: called with the gradient computed for t during backward,
 * before it is accumulated; may return a replacement (returns new) or NULL to
 * keep grad unchanged. See autograd.h. */
typedef lt_tensor *(*lt_grad_hook)(const lt_tensor *t, const lt_tensor *grad, void *user);
/* Post-accumulate hook: called with a leaf once its .grad holds its final
 * value for the running backward. See autograd.h. */
typedef lt_status (*lt_post_accumulate_hook)(lt_tensor *t, void *user);

/* The tensor struct is public and READ-ONLY by convention: read shape, strides
 * and data directly, change them only through the API. */
struct lt_tensor {
  lt_dtype dtype;
  int ndim;                       /* 0..LT_MAX_DIMS */
  int64_t shape[LT_MAX_DIMS];     /* sizes; entries past ndim are 0 */
  int64_t stride[LT_MAX_DIMS];    /* in elements; may be 0 (broadcast) */
  int64_t numel;                  /* product of shape (1 for 0-d) */
  int64_t offset;                 /* element offset of data into storage */
  void *data;                     /* address of element [0,...,0] */
  lt_storage *storage;            /* shared by views */

  /* autograd (see autograd/autograd.h) */
  bool requires_grad;             /* leaf flag, or set on outputs of recorded ops */
  lt_tensor *grad;                /* accumulated gradient (owned by this tensor) or NULL */
  lt_node *grad_fn;               /* node that made this tensor, NULL for leaves */

  /* private bookkeeping: do not touch */
  int refcount_;
  lt_scope *scope_;               /* owning scope or NULL */
  int64_t scope_slot_;
  lt_grad_hook hook_;
  void *hook_user_;
  lt_post_accumulate_hook post_hook_;
  void *post_hook_user_;
  struct lt_qmatrix *qmatrix_;    /* quantized weights (lt_tensor_quantize_, tensor/quant.h) or NULL */
};

/* Helpers to pass shapes and dim lists inline:
 *   lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3))  ->  lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){2, 3})
 *   lt_sum(x, LT_DIMS(0, -1), true) */
#define LT__NARGS(T, ...) ((int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define LT_SHAPE(...) LT__NARGS(int64_t, __VA_ARGS__), (const int64_t[]){__VA_ARGS__}
#define LT_DIMS(...) LT__NARGS(int, __VA_ARGS__), (const int[]){__VA_ARGS__}

/* ======================================================================== */
/* Lifecycle and ownership scopes                                           */
/* ======================================================================== */

/* Release the caller's reference (or the scope's, if t is owned by a scope:
 * it is taken out of the scope). The tensor is destroyed when its last owner
 * releases it; its storage when the last view of it goes. NULL is a no-op. */
LT_API void lt_tensor_free(lt_tensor *t);
/* Add an owner: returns t itself with one more reference, to be balanced by
 * one more lt_tensor_free. The only function returning one of its arguments. */
LT_API lt_tensor *lt_tensor_retain(lt_tensor *t);

/* Scopes free the intermediates of a computation in one call:
 *     lt_scope *s = lt_scope_begin();
 *     lt_tensor *loss = model_forward(...);   // every tensor made here...
 *     lt_backward(loss, NULL, false);
 *     lt_scope_end(s);                         // ...is released here
 * Scopes nest (a thread-local stack); lt_scope_end must be given the innermost
 * open scope (ending an outer one ends the inner ones too). Tensors made while
 * a scope is open belong to it; lt_tensor_keep() takes one out so that it
 * survives (the caller then owns it). lt_scope_begin returns NULL only when
 * out of memory (error set). lt_scope_end(NULL) is a no-op. */
LT_API lt_scope *lt_scope_begin(void);
LT_API void lt_scope_end(lt_scope *s);
/* Take t out of its scope; the caller now owns it. Returns t. No-op if t is
 * not in a scope. */
LT_API lt_tensor *lt_tensor_keep(lt_tensor *t);
/* Ends s (as lt_scope_end) except for t, which goes to the scope enclosing s
 * (or, with none open, to the caller, who frees it): how a function that
 * opens a scope for its own intermediates returns its result, owned as if
 * any op had made it:
 *     lt_scope *s = lt_scope_begin();
 *     if (!s) return NULL;
 *     lt_tensor *y = lt_mul(lt_sigmoid(x), x);  // intermediates: s's
 *     return lt_scope_return(s, y);             // y: the caller's scope's
 * t may be NULL (the error stays set; returns NULL); t's autograd graph keeps
 * what it saved. Returns t, or NULL if out of memory (t freed, error set). */
LT_API lt_tensor *lt_scope_return(lt_scope *s, lt_tensor *t);

/* ======================================================================== */
/* Creation (all return new, contiguous row-major tensors)                  */
/* ======================================================================== */

LT_API lt_tensor *lt_empty(lt_dtype dtype, int ndim, const int64_t *shape);
LT_API lt_tensor *lt_zeros(lt_dtype dtype, int ndim, const int64_t *shape);
LT_API lt_tensor *lt_ones(lt_dtype dtype, int ndim, const int64_t *shape);
LT_API lt_tensor *lt_full(lt_dtype dtype, int ndim, const int64_t *shape, double value);
LT_API lt_tensor *lt_scalar(lt_dtype dtype, double value);              /* 0-d */
LT_API lt_tensor *lt_empty_like(const lt_tensor *x);
LT_API lt_tensor *lt_zeros_like(const lt_tensor *x);
LT_API lt_tensor *lt_ones_like(const lt_tensor *x);
LT_API lt_tensor *lt_full_like(const lt_tensor *x, double value);
/* [start, end) by step, 1-d; as torch.arange (length ceil((end-start)/step)). */
LT_API lt_tensor *lt_arange(lt_dtype dtype, double start, double end, double step);
/* steps points from start to end inclusive, 1-d; as torch.linspace. */
LT_API lt_tensor *lt_linspace(lt_dtype dtype, double start, double end, int64_t steps);
/* [n, m] identity (ones on the main diagonal). */
LT_API lt_tensor *lt_eye(lt_dtype dtype, int64_t n, int64_t m);
/* Copies numel elements of dtype from data (row-major). */
LT_API lt_tensor *lt_tensor_from_copy(lt_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* Borrows data: the tensor (and its views) read and write the caller's buffer,
 * which must outlive them; libtensor never frees it. */
LT_API lt_tensor *lt_tensor_from_borrowed(lt_dtype dtype, int ndim, const int64_t *shape, void *data);

/* ======================================================================== */
/* Inspection and element access                                            */
/* ======================================================================== */

LT_API bool lt_is_contiguous(const lt_tensor *x);  /* row-major, no gaps */
/* Formats a shape as "[4,8]" into buf (always NUL-terminated); returns buf. */
LT_API char *lt_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);
/* Formats x's shape and dtype as "[4,8] f32" ("NULL" for a NULL x) into buf,
 * which holds size bytes (always NUL-terminated when size > 0); returns buf.
 * LT_TENSOR_DESC_SIZE bytes always suffice. For error messages. */
#define LT_TENSOR_DESC_SIZE 160
LT_API char *lt_tensor_desc(const lt_tensor *x, char *buf, size_t size);
#ifndef __cplusplus
/* lt_tensor_desc into a temporary buffer that lives until the end of the
 * enclosing block: lt_error_set(LT_ERR_SHAPE, "f: x is %s", LT_DESC(x)). */
#define LT_DESC(x) lt_tensor_desc((x), (char[LT_TENSOR_DESC_SIZE]){0}, LT_TENSOR_DESC_SIZE)
#endif
/* Value of a one-element tensor, converted to double. */
LT_API lt_status lt_item(const lt_tensor *x, double *out);
/* Element at a full index (ndim entries, negatives count from the end). */
LT_API lt_status lt_get(const lt_tensor *x, const int64_t *index, double *out);
LT_API lt_status lt_set(lt_tensor *x, const int64_t *index, double value);
/* Copies all elements in row-major logical order, converted to dtype, into
 * dst, which holds capacity elements (error if fewer than x->numel). */
LT_API lt_status lt_tensor_read(const lt_tensor *x, lt_dtype dtype, void *dst, int64_t capacity);

/* ======================================================================== */
/* Views (share storage; no copy) and copies                                */
/* ======================================================================== */

/* view: shape must be compatible with x's strides (error otherwise); one entry
 * may be -1 (inferred). reshape: a view when possible, else a copy. */
LT_API lt_tensor *lt_view(const lt_tensor *x, int ndim, const int64_t *shape);
LT_API lt_tensor *lt_reshape(const lt_tensor *x, int ndim, const int64_t *shape);
LT_API lt_tensor *lt_flatten(const lt_tensor *x, int start_dim, int end_dim);
LT_API lt_tensor *lt_permute(const lt_tensor *x, int ndim, const int *perm);
LT_API lt_tensor *lt_transpose(const lt_tensor *x, int dim0, int dim1);
/* Elements start, start+step, ... < end along dim (step >= 1). start and end
 * may be negative and are clamped to [0, size] as in Python slicing. */
LT_API lt_tensor *lt_slice(const lt_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
/* length elements from start (which must be in range). */
LT_API lt_tensor *lt_narrow(const lt_tensor *x, int dim, int64_t start, int64_t length);
/* Index dim at index, removing that dimension. */
LT_API lt_tensor *lt_select(const lt_tensor *x, int dim, int64_t index);
LT_API lt_tensor *lt_squeeze(const lt_tensor *x, int dim);  /* no-op view if size != 1 */
LT_API lt_tensor *lt_squeeze_all(const lt_tensor *x);
LT_API lt_tensor *lt_unsqueeze(const lt_tensor *x, int dim); /* dim in [-ndim-1, ndim] */
/* Broadcast to shape (stride 0 on expanded dims); -1 keeps a size. */
LT_API lt_tensor *lt_expand(const lt_tensor *x, int ndim, const int64_t *shape);
LT_API lt_tensor *lt_broadcast_to(const lt_tensor *x, int ndim, const int64_t *shape);
/* The broadcast shape of two shapes into out (LT_MAX_DIMS entries), or an error. */
LT_API lt_status lt_broadcast_shapes(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b,
                              int *ndim_out, int64_t *out);
/* A contiguous tensor with x's values: a view if x already is, else a copy. */
LT_API lt_tensor *lt_contiguous(const lt_tensor *x);
/* Always a fresh contiguous copy. */
LT_API lt_tensor *lt_clone(const lt_tensor *x);
/* Cast to dtype (a copy; float->int truncates toward zero, ->bool is != 0). */
LT_API lt_tensor *lt_to_dtype(const lt_tensor *x, lt_dtype dtype);
/* A new tensor sharing x's storage but detached from autograd (no grad_fn,
 * requires_grad false). */
LT_API lt_tensor *lt_detach(const lt_tensor *x);

/* ======================================================================== */
/* In-place writes (bump the storage's version counter; see autograd.h)     */
/* ======================================================================== */

LT_API lt_status lt_fill_(lt_tensor *x, double value);
LT_API lt_status lt_zero_(lt_tensor *x);
/* dst[...] = src broadcast to dst's shape, converting dtype. */
LT_API lt_status lt_copy_(lt_tensor *dst, const lt_tensor *src);

/* ======================================================================== */
/* Elementwise                                                              */
/* ======================================================================== */

/* X(NAME, name): every unary elementwise op. lt_<name>(x) returns new;
 * lt_<name>_(x) works in place. gelu is the erf form, gelu_tanh the tanh
 * approximation (PyTorch's approximate='tanh'). Float results for float-only
 * functions (exp, log, ...) on integer input are f32. */
#define LT_UNARY_TABLE(X) \
  X(NEG, neg) X(ABS, abs) X(EXP, exp) X(LOG, log) X(LOG1P, log1p) X(SQRT, sqrt) \
  X(RSQRT, rsqrt) X(SQUARE, square) X(TANH, tanh) X(SIGMOID, sigmoid) X(RELU, relu) \
  X(GELU, gelu) X(GELU_TANH, gelu_tanh) X(SILU, silu) X(SIN, sin) X(COS, cos)

typedef enum {
#define LT__UNARY_ENUM(N, n) LT_UNARY_##N,
  LT_UNARY_TABLE(LT__UNARY_ENUM)
#undef LT__UNARY_ENUM
  LT_UNARY_COUNT
} lt_unary_op;

LT_API lt_tensor *lt_unary(lt_unary_op op, const lt_tensor *x);
LT_API lt_status lt_unary_(lt_unary_op op, lt_tensor *x);
LT_API const char *lt_unary_name(lt_unary_op op);
#define LT__UNARY_DECL(N, n) \
  LT_API lt_tensor *lt_##n(const lt_tensor *x); \
  LT_API lt_status lt_##n##_(lt_tensor *x);
LT_UNARY_TABLE(LT__UNARY_DECL)
#undef LT__UNARY_DECL

/* x ** p, and clamp to [lo, hi] (pass -INFINITY / INFINITY for no bound). */
LT_API lt_tensor *lt_pow_scalar(const lt_tensor *x, double p);
LT_API lt_tensor *lt_clamp(const lt_tensor *x, double lo, double hi);
LT_API lt_status lt_clamp_(lt_tensor *x, double lo, double hi);

/* X(NAME, name, is_comparison): binary ops with NumPy broadcasting.
 * Comparisons return LT_DTYPE_BOOL. */
#define LT_BINARY_TABLE(X) \
  X(ADD, add, 0) X(SUB, sub, 0) X(MUL, mul, 0) X(DIV, div, 0) X(POW, pow, 0) \
  X(MAXIMUM, maximum, 0) X(MINIMUM, minimum, 0) \
  X(EQ, eq, 1) X(NE, ne, 1) X(LT, lt, 1) X(LE, le, 1) X(GT, gt, 1) X(GE, ge, 1)

typedef enum {
#define LT__BINARY_ENUM(N, n, c) LT_BINARY_##N,
  LT_BINARY_TABLE(LT__BINARY_ENUM)
#undef LT__BINARY_ENUM
  LT_BINARY_COUNT
} lt_binary_op;

LT_API lt_tensor *lt_binary(lt_binary_op op, const lt_tensor *a, const lt_tensor *b);
/* a op= b, b broadcast to a's shape; a keeps its dtype. */
LT_API lt_status lt_binary_(lt_binary_op op, lt_tensor *a, const lt_tensor *b);
/* a op s, s a scalar (the result keeps a's dtype when a is a float tensor). */
LT_API lt_tensor *lt_binary_scalar(lt_binary_op op, const lt_tensor *a, double s);
LT_API lt_status lt_binary_scalar_(lt_binary_op op, lt_tensor *a, double s);
LT_API const char *lt_binary_name(lt_binary_op op);
#define LT__BINARY_DECL(N, n, c) \
  LT_API lt_tensor *lt_##n(const lt_tensor *a, const lt_tensor *b); \
  LT_API lt_tensor *lt_##n##_scalar(const lt_tensor *a, double s); \
  LT_API lt_status lt_##n##_(lt_tensor *a, const lt_tensor *b); \
  LT_API lt_status lt_##n##_scalar_(lt_tensor *a, double s);
LT_BINARY_TABLE(LT__BINARY_DECL)
#undef LT__BINARY_DECL

/* cond ? a : b with broadcasting over all three (cond is bool). */
LT_API lt_tensor *lt_where(const lt_tensor *cond, const lt_tensor *a, const lt_tensor *b);
/* x with value where mask (bool, broadcast to x) is true. */
LT_API lt_tensor *lt_masked_fill(const lt_tensor *x, const lt_tensor *mask, double value);

/* ======================================================================== */
/* Reductions (dims: ndims entries; ndims == 0 reduces over all dims)        */
/* ======================================================================== */

LT_API lt_tensor *lt_sum(const lt_tensor *x, int ndims, const int *dims, bool keepdim);
LT_API lt_tensor *lt_mean(const lt_tensor *x, int ndims, const int *dims, bool keepdim);
/* amax/amin over a set of dims (values only). The gradient of tied maxima is
 * split evenly between them (as torch.amax). */
LT_API lt_tensor *lt_amax(const lt_tensor *x, int ndims, const int *dims, bool keepdim);
LT_API lt_tensor *lt_amin(const lt_tensor *x, int ndims, const int *dims, bool keepdim);
/* max/min along one dim: returns the values (new) and, if indices is not
 * NULL, stores the i64 indices of the first occurrence there (new). */
LT_API lt_tensor *lt_max_dim(const lt_tensor *x, int dim, bool keepdim, lt_tensor **indices);
LT_API lt_tensor *lt_min_dim(const lt_tensor *x, int dim, bool keepdim, lt_tensor **indices);
LT_API lt_tensor *lt_argmax(const lt_tensor *x, int dim, bool keepdim);  /* i64 */
LT_API lt_tensor *lt_argmin(const lt_tensor *x, int dim, bool keepdim);  /* i64 */
/* unbiased: divide by N-1 (Bessel) instead of N. */
LT_API lt_tensor *lt_var(const lt_tensor *x, int ndims, const int *dims, bool unbiased, bool keepdim);
LT_API lt_tensor *lt_std(const lt_tensor *x, int ndims, const int *dims, bool unbiased, bool keepdim);
LT_API lt_tensor *lt_logsumexp(const lt_tensor *x, int ndims, const int *dims, bool keepdim);
/* Numerically stable (max-subtracted). A row of all -inf gives NaN, as PyTorch. */
LT_API lt_tensor *lt_softmax(const lt_tensor *x, int dim);
LT_API lt_tensor *lt_log_softmax(const lt_tensor *x, int dim);
/* torch.cumsum: running sums along dim (negative counts from the end; a 0-d x
 * takes 0 or -1). Returns new, of x's shape: f32/f64 keep their dtype (the
 * sums are accumulated in double and rounded once per element, as PyTorch's
 * CPU kernel), i32/i64/bool give i64 (wrapping on overflow). Differentiable
 * (dx is the reversed cumsum of the gradient). Errors: dim out of range
 * (LT_ERR_INDEX). */
LT_API lt_tensor *lt_cumsum(const lt_tensor *x, int dim);

/* ======================================================================== */
/* Matrix multiplication (BLIS)                                             */
/* ======================================================================== */

/* torch.matmul semantics: 1-d x 1-d is a dot product, 2-d x 2-d a matrix
 * product, 1-d operands are promoted and the added dim removed, batch dims
 * broadcast. f32 and f64 (both operands the same dtype). Operands are passed
 * to BLIS with their own strides: a transposed view is never copied. */
LT_API lt_tensor *lt_matmul(const lt_tensor *a, const lt_tensor *b);

/* ======================================================================== */
/* Indexing, joining, splitting                                             */
/* ======================================================================== */

/* Entries of x along dim at the positions in index (1-d, i32 or i64). */
LT_API lt_tensor *lt_index_select(const lt_tensor *x, int dim, const lt_tensor *index);
/* out[i][j][k] = x[index[i][j][k]][j][k] for dim 0, etc. (torch.gather). */
LT_API lt_tensor *lt_gather(const lt_tensor *x, int dim, const lt_tensor *index);
/* A copy of x with src added at index along dim (torch.scatter_add). */
LT_API lt_tensor *lt_scatter_add(const lt_tensor *x, int dim, const lt_tensor *index, const lt_tensor *src);
/* Embedding row gather: table [V, D], ids any shape (i32/i64) -> [*ids.shape, D].
 * Every id is checked to lie in [0, V); the error names the first bad one. */
LT_API lt_tensor *lt_embedding(const lt_tensor *table, const lt_tensor *ids);
/* Lower/upper triangle of the last two dims; diagonal k as in torch.tril. */
LT_API lt_tensor *lt_tril(const lt_tensor *x, int64_t k);
LT_API lt_tensor *lt_triu(const lt_tensor *x, int64_t k);
/* ids (integers in [0, num_classes)) -> i64 one-hot with a trailing dim. */
LT_API lt_tensor *lt_one_hot(const lt_tensor *ids, int64_t num_classes);
/* Join n tensors along an existing dim (cat) or a new one (stack). */
LT_API lt_tensor *lt_cat(int n, lt_tensor *const *xs, int dim);
LT_API lt_tensor *lt_stack(int n, lt_tensor *const *xs, int dim);
/* torch.nn.functional.pad. pad holds npad values (even, at most 2 * ndim):
 * (before, after) of the last dim, then of the second last, and so on, as
 * F.pad's argument. Modes:
 *   LT_PAD_CONSTANT   the new entries are value (cast to x's dtype); negative
 *                     padding crops, as PyTorch;
 *   LT_PAD_REFLECT    mirror without repeating the edge ([1,2,3] padded by
 *                     (2, 1) is [3,2,1,2,3,2]); each pad must be < the dim's size;
 *   LT_PAD_REPLICATE  repeat the edge element; the dim must not be empty.
 * Unlike PyTorch (which limits reflect/replicate to the last 1-3 dims of a
 * 2-d to 5-d input), any number of trailing dims of any rank may be padded
 * in every mode. Any dtype; differentiable for float x (the backward adds the
 * gradient of every copy of an element). Returns new (contiguous).
 * Errors: an odd npad or more than 2 * ndim values, negative reflect or
 * replicate padding, reflect padding >= the size, replicate or reflect
 * padding of an empty dim, a resulting size < 0 (LT_ERR_INVALID/SHAPE). */
typedef enum { LT_PAD_CONSTANT, LT_PAD_REFLECT, LT_PAD_REPLICATE } lt_pad_mode;
LT_API lt_tensor *lt_pad(const lt_tensor *x, int npad, const int64_t *pad, lt_pad_mode mode, double value);
/* Split into views of split_size along dim (the last may be smaller), or into
 * `chunks` nearly equal views (torch.chunk). Stores up to capacity new views
 * in out and their count in *n_out; fails if capacity is too small. */
LT_API lt_status lt_split(const lt_tensor *x, int64_t split_size, int dim, lt_tensor **out,
                   int capacity, int *n_out);
LT_API lt_status lt_chunk(const lt_tensor *x, int chunks, int dim, lt_tensor **out,
                   int capacity, int *n_out);

/* ======================================================================== */
/* Sorting and reordering (tensor/order.c)                                  */
/* ======================================================================== */

/* torch.sort(x, dim, descending): the values of every slice along dim in
 * order and the indices they came from (i64, x's shape). The sort is stable
 * (ties keep their order, in both directions; torch's stable=True), NaN
 * sorts after every number ascending and first descending, as PyTorch's;
 * integers compare exactly. Any dtype but bool; a 0-d x is its own sort.
 * values = lt_gather(x, dim, indices), so they are differentiable (gradient
 * scattered back). values or indices may be NULL (not wanted); each one
 * returned is new. On failure both are NULL. */
LT_API lt_status lt_sort(const lt_tensor *x, int dim, bool descending, lt_tensor **values, lt_tensor **indices);
/* The indices of lt_sort alone (torch.argsort). Returns new i64. */
LT_API lt_tensor *lt_argsort(const lt_tensor *x, int dim, bool descending);
/* torch.topk(x, k, dim, largest, sorted=True): the k largest (largest) or
 * smallest values of every slice along dim, in order, and their indices;
 * ties go to the lower index (torch leaves their order unspecified).
 * k in [0, size of dim]. Outputs as lt_sort's, with dim of size k. */
LT_API lt_status lt_topk(const lt_tensor *x, int64_t k, int dim, bool largest, lt_tensor **values, lt_tensor **indices);
/* torch.flip(x, dims): reversed along each of the ndims dims (distinct).
 * torch.roll(x, shifts, dims): each dims[i] rolled by shifts[i] (elements
 * move to higher indices, wrapping; any sign, any size); dims NULL with one
 * shift rolls the flattened tensor, as torch.roll without dims.
 * Tensor.repeat(repeats): x tiled repeats[i] times along dim i; ndims >=
 * x->ndim, extra leading repeats add dims (x [2, 3] repeated {4, 1, 2} is
 * [4, 2, 6]); a repeat of 0 gives an empty dim.
 * Each returns a new contiguous copy (never a view), differentiable for
 * float x, any dtype. */
LT_API lt_tensor *lt_flip(const lt_tensor *x, int ndims, const int *dims);
LT_API lt_tensor *lt_roll(const lt_tensor *x, int n, const int64_t *shifts, const int *dims);
LT_API lt_tensor *lt_repeat(const lt_tensor *x, int ndims, const int64_t *repeats);

/* ======================================================================== */
/* Random numbers: Philox4x32-10, counter based                             */
/* ======================================================================== */

/* A generator is a (seed, offset) pair. A draw uses Philox blocks offset,
 * offset+1, ... (four 32-bit words per block; docs/random.md gives which words
 * each element uses) and then advances offset past them, so results never
 * depend on the number of threads, and saving and restoring the state resumes
 * the exact sequence. A NULL generator is an error (there is no global one).
 * A failed draw does not advance the generator. */
typedef struct lt_generator lt_generator;
typedef struct lt_generator_state {
  uint64_t seed;
  uint64_t offset;  /* Philox blocks consumed so far */
} lt_generator_state;

LT_API lt_generator *lt_generator_new(uint64_t seed);  /* returns new; free with lt_generator_free */
/* A generator whose random fills (lt_uniform_, lt_normal_, and so nn's
 * initialisers) check their arguments and leave the tensor as it is, as
 * PyTorch's torch.nn.utils.skip_init: for building a model whose every
 * value is replaced next (the GGUF and Hugging Face loaders), without
 * paying the draws or touching the parameters' pages before the file's
 * values do. What it leaves is the allocator's memory, not a defined
 * value. Its other draws (lt_rand, lt_bernoulli, ...) are
 * lt_generator_new(0)'s. Returns new; free with lt_generator_free. */
LT_API lt_generator *lt_generator_new_skip_init(void);
LT_API void lt_generator_free(lt_generator *g);         /* NULL is a no-op */
LT_API lt_generator_state lt_generator_get_state(const lt_generator *g);
LT_API lt_status lt_generator_set_state(lt_generator *g, lt_generator_state state);

/* Float dtypes only except bernoulli (any dtype) and randperm (i64). */
LT_API lt_tensor *lt_rand(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape);   /* U[0,1) */
LT_API lt_tensor *lt_randn(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape);  /* N(0,1) */
/* U[lo, hi): never hi, even after rounding to f32; lo == hi gives lo. */
LT_API lt_tensor *lt_uniform(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape, double lo, double hi);
LT_API lt_tensor *lt_normal(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape, double mean, double std);
/* 1 with probability p, else 0. */
LT_API lt_tensor *lt_bernoulli(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape, double p);
/* A random permutation of 0..n-1 (i64). */
LT_API lt_tensor *lt_randperm(lt_generator *g, int64_t n);
/* torch.multinomial: num_samples category indices (i64) per row of probs
 * ([n] -> [num_samples], [rows, n] -> [rows, num_samples]), drawn with
 * probability proportional to the row's weights (f32/f64, need not sum to
 * 1), with or without replacement (then num_samples <= the row's nonzero
 * categories, each drawn at most once, in the order drawn). A category of
 * weight 0 is never drawn. Row r uses its own Philox blocks (docs/random.md),
 * so rows are independent and results do not depend on the thread count.
 * Errors (nothing drawn, g unchanged): a negative, NaN or infinite weight or
 * a row of zeros (the message names the row and category), num_samples < 1,
 * too few nonzero categories without replacement, no categories. */
LT_API lt_tensor *lt_multinomial(lt_generator *g, const lt_tensor *probs, int64_t num_samples, bool replacement);
/* In-place fills (used by initialisers). */
LT_API lt_status lt_uniform_(lt_generator *g, lt_tensor *x, double lo, double hi);
LT_API lt_status lt_normal_(lt_generator *g, lt_tensor *x, double mean, double std);

/* ======================================================================== */
/* Printing and comparison                                                  */
/* ======================================================================== */

/* PyTorch-like text ("tensor([[1.0000, 2.0000], ...])"; a ", dtype=f64"
 * suffix for every dtype but f32), summarised with "..." when numel > 1000
 * (first and last 3 entries per dim). lt_print adds a trailing newline. */
LT_API lt_status lt_print(const lt_tensor *x, FILE *f);
/* Same text as a new string (free with free()); NULL on error. */
LT_API char *lt_tensor_to_string(const lt_tensor *x);
/* |a - b| <= atol + rtol * |b| everywhere (a, b broadcast); NaNs are equal
 * only if equal_nan. False (no error) if the shapes do not broadcast. */
LT_API bool lt_allclose(const lt_tensor *a, const lt_tensor *b, double rtol, double atol, bool equal_nan);
/* Same shape and exactly equal values (dtypes may differ). */
LT_API bool lt_equal(const lt_tensor *a, const lt_tensor *b);

/* ======================================================================== */
/* Recording for autograd (tensor/graph.c; the engine is autograd/)         */
/* ======================================================================== */

/* Grad mode (thread-local, on by default). lt_set_grad_enabled returns the
 * previous value, so a no-grad scope is
 *     bool prev = lt_set_grad_enabled(false); ...; lt_set_grad_enabled(prev); */
LT_API bool lt_grad_enabled(void);
LT_API bool lt_set_grad_enabled(bool enabled);

/* Mark a leaf as requiring a gradient (float dtypes only). Fails on a
 * non-leaf (a tensor with a grad_fn) or an integer/bool tensor. */
LT_API lt_status lt_requires_grad_(lt_tensor *t, bool requires_grad);
LT_API bool lt_is_leaf(const lt_tensor *t);

/* Anomaly mode (off by default): every recorded op output and every gradient
 * is checked for NaN/Inf; the first bad one fails with LT_ERR_NUMERIC naming
 * the op that produced it. */
LT_API void lt_set_anomaly_mode(bool enabled);
LT_API bool lt_anomaly_mode(void);

#ifdef __cplusplus
}
#endif
#endif /* LT_TENSOR_H */
