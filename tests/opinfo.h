/*
 * tests/opinfo.h: one table entry per op, checked by one runner
 * (tests/test_ops.c). The idea is PyTorch's OpInfo
 * (common_methods_invocations.py) and ggml's tests/test-backend-ops.cpp.
 *
 * An entry (struct opinfo) names the op, says how to call it and how to
 * compute its result naively in double, which dtypes it takes, lists sample
 * inputs (shapes, value domains, scalar arguments) and error cases, and says
 * whether it has a gradient. The runner checks, for every entry:
 *   values   every sample x every supported dtype against the reference, with
 *            the inputs contiguous, transposed, sliced, strided and expanded (all
 *            inputs in one layout, and each input alone; util_layout.h);
 *            a strided variant must also give the same bits as the op on
 *            contiguous copies of its inputs (unless layout_inexact);
 *   threads  every fixed sample x dtype, contiguous and transposed: 1 and 2
 *            threads give the same bits (output and, with grad, gradients);
 *   errors   every error case fails with its status and message fragment
 *            and leaves its inputs unchanged,
 *            and a NULL in place of each input fails with LT_ERR_NULL and
 *            "<op>: argument ...";
 *   grad     (grad set) f64 lt_gradcheck of every sample with at most
 *            OI_GRAD_MAX_NUMEL elements, contiguous, transposed, sliced and
 *            strided,
 *            plus the hand-written gradcheck cases listed for the op in
 *            tests/gradcases_<module>.inc;
 *   paths    (entries of matmul, nn, conv, attention) values again, fixed
 *            samples contiguous and transposed, with each path of
 *            tensor/paths.def this CPU runs forced in turn (each product
 *            engine, bf16 via oneDNN or widened, fused or unfused attention,
 *            oneDNN or im2col convolution, each Philox version);
 *   leaks    each of the above frees what it makes.
 * and that every op of the autograd op table (op_registry.h) has an
 * entry and a gradient check. Entries live in tests/opinfo_<module>.inc;
 * docs/testing.md says how to add one.
 *
 * This is not where special values, hand-computed results, dtype promotion
 * or in-place forms are tested: those stay in the per-module test files.
 */
#ifndef LT_TEST_OPINFO_H
#define LT_TEST_OPINFO_H

#include "test_util.h"

/* The tables give the leading fields of a struct and leave the rest (scalar
 * arguments, flags) zero on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* Value domains of generated inputs (uniform in the range, random sign where
 * said). Integer dtypes get integers: see oi_domain_int in test_ops.c. */
enum {
  OI_ANY,      /* [-2, 2) */
  OI_SIGNED,   /* |x| in [0.2, 2), random sign: away from 0 (relu, abs, div) */
  OI_SMALL,    /* |x| in [0.1, 0.8), random sign (log1p) */
  OI_POS,      /* [0.3, 2) */
  OI_WIDE,     /* [-6, 6) */
  OI_WIDE_POS, /* [0.01, 6) */
  OI_LOG1P,    /* [-0.99, 6) */
  OI_TIES,     /* integers in [-3, 3): many ties (comparisons, maximum) */
  OI_BOOL,     /* bool (always, whatever the tested dtype), p = 0.5 */
  /* Indices and class ids (never differentiable, whatever the tested dtype):
   * integers uniform in [range[0], range[1]) of the input (oi_input.range). */
  OI_INDEX,    /* i64 */
  OI_INDEX32,  /* i32 */
  OI_DOMAIN_COUNT
};

#define OI_MAX_IN 4
#define OI_MAX_ARG 8
/* gradcheck only samples up to this many elements (all inputs together). */
#define OI_GRAD_MAX_NUMEL 256
/* Samples with more elements (there for the threaded paths) are checked in
 * each layout with all inputs in it, not input by input; integers only
 * contiguous. */
#define OI_HEAVY_NUMEL 4096

/* One input: its shape and value domain. {2, {3, 4}, OI_ANY};
 * indices: {1, {5}, OI_INDEX, {0, 7}} (values in [0, 7)). */
typedef struct oi_input {
  int ndim;
  int64_t shape[LT_MAX_DIMS];
  int domain;
  int64_t range[2]; /* OI_INDEX, OI_INDEX32: [lo, hi) */
} oi_input;

/* A sample: inputs and the op's scalar arguments (meaning per entry). */
typedef struct oi_sample {
  const char *label;
  int nin;
  oi_input in[OI_MAX_IN];
  double arg[OI_MAX_ARG];
  bool no_grad;      /* values only (ties, kinks) */
  double tol[2][2];  /* {rtol, atol} for f32, f64 if not {0, 0}: overrides the entry's */
} oi_sample;

/* An error case: inputs of the given dtypes (values from the domains) and
 * the expected status and message fragment. */
typedef struct oi_error {
  const char *label;
  int nin;
  oi_input in[OI_MAX_IN];
  double arg[OI_MAX_ARG];
  lt_status status;
  const char *fragment;
  lt_dtype dtype[OI_MAX_IN]; /* of the non-bool inputs; 0 is LT_DTYPE_F32 */
} oi_error;

typedef struct opinfo opinfo;

/* Calls the op on in[0..s->nin) (any may be NULL, for the NULL checks) with
 * the sample's arguments; returns new, or NULL with the library's error. */
typedef lt_tensor *(*oi_call_fn)(const opinfo *e, const double *arg, lt_tensor *const *in);
/* The naive reference: in are contiguous f64 copies of the inputs the op got;
 * returns a new f64 tensor of the expected result. Fails the test itself. */
typedef lt_tensor *(*oi_ref_fn)(const opinfo *e, const oi_sample *s, lt_tensor *const *in);

/* The result's dtype. */
enum {
  OI_OUT_SAME,     /* the tested dtype */
  OI_OUT_BOOL,     /* bool (comparisons) */
  OI_OUT_I64,      /* i64 (indices) */
  OI_OUT_SUM,      /* the tested float dtype; i64 for integers (sum) */
  OI_OUT_ARG0      /* the dtype in arg[0] (casts) */
};

/* Uniform draws for random samples: an integer in [0, n), a double in [0, 1). */
int oi_rand_int(uint64_t *seed, int n);
double oi_rand_unif(uint64_t *seed);

/* Supported dtypes, as a mask. */
#define OI_F32 (1u << LT_DTYPE_F32)
#define OI_F64 (1u << LT_DTYPE_F64)
#define OI_I32 (1u << LT_DTYPE_I32)
#define OI_I64 (1u << LT_DTYPE_I64)
#define OI_FLOAT (OI_F32 | OI_F64)
/* bf16: computed in f32 and rounded once, so checked against the f64
 * reference on the same (bf16) inputs with OI_TOL_BF16. */
#define OI_BF16 (1u << LT_DTYPE_BF16)
#define OI_NUMERIC (OI_FLOAT | OI_I32 | OI_I64)
/* bool as a tested dtype (ops that only move values: index, cat, ...;
 * inputs drawn as integers, nonzero is true); not the OI_BOOL domain. */
#define OI_DT_BOOL (1u << LT_DTYPE_BOOL)

struct opinfo {
  const char *name;   /* the op: its op-table name where it has one ("add") */
  const char *family; /* "elementwise", ...: the opinfo_<family>.inc it lives in */
  const char *op;     /* the name errors give, if not name ("maximum" for "maximum_ties") */
  int id;             /* entry-specific (an lt_unary_op, ...) */
  oi_call_fn call;
  oi_ref_fn ref;
  unsigned dtypes;    /* OI_* mask */
  int out;            /* the result's dtype: OI_OUT_* */
  bool grad;          /* f64 gradcheck of the samples */
  bool layout_inexact; /* results on strided inputs may differ in the last bits from
                          those on contiguous copies (a different summation order) */
  double tol[2][2];   /* {rtol, atol} for f32, f64; {0, 0}: OI_TOL_DEFAULT */
  const oi_sample *samples; /* ended by an entry with label NULL */
  /* Random samples after the fixed ones: nrandom calls of random, which fills
   * *out (zeroed; label may stay NULL) drawing from *seed with oi_rand_*. */
  void (*random)(const opinfo *e, uint64_t *seed, oi_sample *out);
  int nrandom;
  const oi_error *errors;   /* the same; NULL: none */
};

/* Default tolerances: |got - want| <= atol + rtol * |want|. */
#define OI_TOL_DEFAULT {{1e-5, 1e-6}, {1e-13, 1e-15}}
/* bf16 results: the f32 result rounded to 8 significant bits (half an ulp
 * is 2^-9 relative), so two bf16 ulps relative, plus the entry's f32
 * tolerance (whichever is larger). */
#define OI_TOL_BF16 {7.9e-3, 1e-6}

/* .samples = OI_SAMPLES({...}, {...}); .errors = OI_ERRORS(...): the lists
 * with their end marker. */
#define OI_SAMPLES(...) ((const oi_sample[]){__VA_ARGS__, {0}})
#define OI_ERRORS(...) ((const oi_error[]){__VA_ARGS__, {0}})

/* out[i] = f(in0[i'], in1[i''], ...) with NumPy broadcasting of the n inputs
 * (contiguous f64) to their common shape: the reference of every elementwise
 * entry. Returns a new f64 tensor. */
typedef double (*oi_scalar_fn)(const opinfo *e, const double *arg, const double *x);
lt_tensor *oi_ref_broadcast(const opinfo *e, const oi_sample *s, int n, lt_tensor *const *in,
                            oi_scalar_fn f);

#endif
