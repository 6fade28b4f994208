/*
 * tests/test_matmul.c: lt_matmul against hand-computed values and against the
 * naive reference lt__matmul_ref on transposed / sliced / permuted / expanded
 * operands, both code paths of batched products, gemv and skinny paths,
 * random shapes, zero-size shapes and the errors the op runner does not
 * cover; and the backward through lt_backward against reference products.
 * Every rank combination, the runner's layouts, 1 vs 2 threads, the error
 * cases and the gradchecks are the matmul entry of tests/opinfo_matmul.inc.
 */
#include "test_util.h"
#include "util_layout.h"

#include "tensor/gemm_internal.h"
#include "tensor/matmul_internal.h"
#include "tensor/cpu_internal.h"
#include "tensor/paths_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Forces the f32/f64 products' path (tensor/paths.def: gemm=blis, small,
 * skinny; LT__PATH_AUTO the rule), where this CPU runs it (else the rule),
 * and returns the path forced before. */
static lt__path force_gemm(lt__path p) {
  return lt__path_force(LT__PATH_FAMILY_gemm, p == LT__PATH_AUTO || lt__path_supported(p) ? p : LT__PATH_AUTO);
}

/* ---- helpers ------------------------------------------------------------- */

/* Deterministic uniform values in [-1, 1) (xorshift64*), independent of the
 * library's generator so that these tests only need the core. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double rng_uniform(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static lt_tensor *rnd(lt_dtype dt, int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(v);
  for (int64_t i = 0; i < n; i++) v[i] = rng_uniform();
  lt_tensor *f = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, ndim, shape, v));
  free(v);
  if (dt == LT_DTYPE_F64) return f;
  lt_tensor *t = LT_NN(lt_to_dtype(f, dt));
  lt_tensor_free(f);
  return t;
}

static double tol_for(lt_dtype dt) { return dt == LT_DTYPE_F32 ? 2e-5 : 1e-12; }

/* lt_matmul(a, b) must equal the reference; frees a and b. */
static void check_vs_ref(lt_tensor *a, lt_tensor *b) {
  lt_tensor *got = LT_NN(lt_matmul(a, b));
  lt_tensor *want = LT_NN(lt__matmul_ref(a, b));
  double tol = tol_for(a->dtype);
  LT_ASSERT_CLOSE(got, want, tol, tol);
  ck_assert_int_eq(got->dtype, a->dtype);
  ck_assert(lt_is_contiguous(got));
  lt_tensor_free(got);
  lt_tensor_free(want);
  lt_tensor_free(a);
  lt_tensor_free(b);
}

/* ---- hand-computed ------------------------------------------------------- */

START_TEST(test_hand_2x3_3x2) {
  lt_tensor *a = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6}));
  lt_tensor *b = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(3, 2), (float[]){7, 8, 9, 10, 11, 12}));
  lt_tensor *c = LT_NN(lt_matmul(a, b));
  LT_ASSERT_SHAPE(c, 2, 2);
  LT_ASSERT_VALUES(c, 0, 58, 64, 139, 154);
  lt_tensor *r = LT_NN(lt__matmul_ref(a, b));
  LT_ASSERT_VALUES(r, 0, 58, 64, 139, 154);
  /* b^T a^T = (a b)^T through transposed views */
  lt_tensor *at = LT_NN(lt_transpose(a, 0, 1)), *bt = LT_NN(lt_transpose(b, 0, 1));
  lt_tensor *ct = LT_NN(lt_matmul(bt, at));
  LT_ASSERT_VALUES(ct, 0, 58, 139, 64, 154);
  lt_tensor *objs[] = {a, b, c, r, at, bt, ct};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

START_TEST(test_hand_dot_and_vectors) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (double[]){1, 2, 3}));
  lt_tensor *y = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (double[]){4, 5, 6}));
  lt_tensor *m = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6}));
  lt_tensor *d = LT_NN(lt_matmul(x, y));
  ck_assert_int_eq(d->ndim, 0);
  LT_ASSERT_VALUES(d, 0, 32);
  lt_tensor *xm = LT_NN(lt_matmul(x, m)); /* [3]·[3,2] -> [2] */
  LT_ASSERT_SHAPE(xm, 2);
  LT_ASSERT_VALUES(xm, 0, 22, 28);
  lt_tensor *mt = LT_NN(lt_transpose(m, 0, 1)); /* [2,3]·[3] -> [2] */
  lt_tensor *mx = LT_NN(lt_matmul(mt, x));
  LT_ASSERT_SHAPE(mx, 2);
  LT_ASSERT_VALUES(mx, 0, 22, 28);
  lt_tensor *objs[] = {x, y, m, d, xm, mt, mx};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

/* ---- random against the reference --------------------------------------- */

/* Every rank combination against the reference, in f32 and f64, with each
 * operand contiguous, transposed, sliced, strided and expanded: the matmul
 * entry of the op runner (tests/opinfo_matmul.inc). */

START_TEST(test_transposed_operands) {
  lt_dtype dt = LT_DTYPE_F32;
  /* a^T b, a b^T, a^T b^T: column-major views go to BLIS as they are. */
  lt_tensor *x = rnd(dt, LT_SHAPE(7, 5)), *y = rnd(dt, LT_SHAPE(4, 7)), *z = rnd(dt, LT_SHAPE(7, 4));
  check_vs_ref(LT_NN(lt_transpose(x, 0, 1)), lt_tensor_retain(z));   /* [5,7]·[7,4] */
  check_vs_ref(lt_tensor_retain(y), lt_tensor_retain(x));            /* [4,7]·[7,5] */
  check_vs_ref(LT_NN(lt_transpose(x, 0, 1)), LT_NN(lt_transpose(y, 0, 1)));
  check_vs_ref(LT_NN(lt_transpose(z, 0, 1)), LT_NN(lt_transpose(y, 0, 1))); /* [4,7]·[7,4] */
  lt_tensor_free(x);
  lt_tensor_free(y);
  lt_tensor_free(z);

  /* attention: q [B,T,HS] times k^T with k [B,T,HS], then p [B,T,T] times v */
  lt_tensor *q = rnd(dt, LT_SHAPE(6, 9, 5)), *k = rnd(dt, LT_SHAPE(6, 9, 5));
  check_vs_ref(lt_tensor_retain(q), LT_NN(lt_transpose(k, 1, 2)));
  /* batch dims that do not nest (permuted): no fold, strided batch */
  lt_tensor *p = rnd(dt, LT_SHAPE(9, 6, 5));
  check_vs_ref(LT_NN(lt_permute(p, LT_DIMS(1, 0, 2))), rnd(dt, LT_SHAPE(5, 3)));
  check_vs_ref(LT_NN(lt_permute(p, LT_DIMS(1, 2, 0))), rnd(dt, LT_SHAPE(9, 4)));
  /* 4-d with transposed batch and matrix dims: [B,NH,T,HS] made from [B,T,NH,HS] */
  lt_tensor *h = rnd(dt, LT_SHAPE(2, 7, 3, 4));
  lt_tensor *hq = LT_NN(lt_transpose(h, 1, 2));    /* [2,3,7,4] */
  lt_tensor *hk = LT_NN(lt_permute(h, LT_DIMS(0, 2, 3, 1)));  /* [2,3,4,7] */
  check_vs_ref(lt_tensor_retain(hq), lt_tensor_retain(hk));
  check_vs_ref(lt_tensor_retain(hq), rnd(dt, LT_SHAPE(4, 2)));
  lt_tensor *objs[] = {q, k, p, h, hq, hk};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

START_TEST(test_sliced_and_expanded_operands) {
  for (int dti = 0; dti < 2; dti++) {
    lt_dtype dt = dti ? LT_DTYPE_F64 : LT_DTYPE_F32;
    lt_tensor *x = rnd(dt, LT_SHAPE(10, 14)), *y = rnd(dt, LT_SHAPE(21, 9));
    /* general strides: every other column, every third row */
    lt_tensor *xs = LT_NN(lt_slice(x, 1, 0, 14, 2));       /* [10,7], strides (14,2) */
    lt_tensor *ys = LT_NN(lt_slice(y, 0, 0, 21, 3));       /* [7,9], strides (27,1) */
    check_vs_ref(lt_tensor_retain(xs), lt_tensor_retain(ys));
    lt_tensor *xn = LT_NN(lt_narrow(x, 1, 3, 7));          /* [10,7] inside [10,14] */
    check_vs_ref(lt_tensor_retain(xn), lt_tensor_retain(ys));
    lt_tensor *yst = LT_NN(lt_transpose(ys, 0, 1));        /* [9,7] strides (1,27) */
    lt_tensor *xst = LT_NN(lt_transpose(xs, 0, 1));        /* [7,10] strides (2,14) */
    check_vs_ref(lt_tensor_retain(yst), lt_tensor_retain(xst));
    /* 1-d slices */
    lt_tensor *row = LT_NN(lt_select(x, 0, 2));            /* [14] */
    lt_tensor *col = LT_NN(lt_select(x, 1, 5));            /* [10], stride 14 */
    check_vs_ref(lt_tensor_retain(col), lt_tensor_retain(x));           /* [10]·[10,14] */
    check_vs_ref(lt_tensor_retain(x), rnd(dt, LT_SHAPE(14)));
    check_vs_ref(lt_tensor_retain(row), rnd(dt, LT_SHAPE(14)));          /* dot */
    check_vs_ref(lt_tensor_retain(col), lt_tensor_retain(col));          /* strided dot */

    /* expanded batch dims (stride 0): used as they are */
    lt_tensor *w = rnd(dt, LT_SHAPE(1, 4, 5));
    check_vs_ref(LT_NN(lt_expand(w, LT_SHAPE(3, 4, 5))), rnd(dt, LT_SHAPE(3, 5, 2)));
    check_vs_ref(rnd(dt, LT_SHAPE(3, 2, 4)), LT_NN(lt_expand(w, LT_SHAPE(3, 4, 5))));
    /* expanded matrix dims (stride 0): BLIS cannot take them, copied */
    lt_tensor *r1 = rnd(dt, LT_SHAPE(1, 5)), *c1 = rnd(dt, LT_SHAPE(5, 1)), *s1 = rnd(dt, LT_SHAPE(1));
    check_vs_ref(LT_NN(lt_expand(r1, LT_SHAPE(6, 5))), rnd(dt, LT_SHAPE(5, 3)));
    check_vs_ref(rnd(dt, LT_SHAPE(2, 6, 5)), LT_NN(lt_expand(c1, LT_SHAPE(5, 4))));
    check_vs_ref(LT_NN(lt_expand(s1, LT_SHAPE(5))), rnd(dt, LT_SHAPE(5, 3)));
    check_vs_ref(rnd(dt, LT_SHAPE(3, 5)), LT_NN(lt_expand(s1, LT_SHAPE(5))));
    check_vs_ref(LT_NN(lt_expand(s1, LT_SHAPE(5))), LT_NN(lt_expand(s1, LT_SHAPE(5))));
    lt_tensor *objs[] = {x, y, xs, ys, xn, yst, xst, row, col, w, r1, c1, s1};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
  }
}
END_TEST

/* The batch-parallel path (one product per thread) and the sequential one
 * (BLIS threads inside) give the same bits, and so do 1 and 2 threads. */
START_TEST(test_batched_paths_agree) {
  lt_dtype dt = LT_DTYPE_F32;
  lt_tensor *q = rnd(dt, LT_SHAPE(12, 40, 16)), *k = rnd(dt, LT_SHAPE(12, 40, 16));
  lt_tensor *kt = LT_NN(lt_transpose(k, 1, 2));
  lt_tensor *big_a = rnd(dt, LT_SHAPE(3, 150, 120)), *big_b = rnd(dt, LT_SHAPE(3, 120, 110));
  int64_t prev = lt__matmul_set_batch_par_max(INT64_MAX);
  lt_tensor *par_small = LT_NN(lt_matmul(q, kt));
  lt_tensor *par_big = LT_NN(lt_matmul(big_a, big_b));
  lt__matmul_set_batch_par_max(0);
  lt_tensor *seq_small = LT_NN(lt_matmul(q, kt));
  lt_tensor *seq_big = LT_NN(lt_matmul(big_a, big_b));
  lt__matmul_set_batch_par_max(prev);
  int nt = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  lt_tensor *one_small = LT_NN(lt_matmul(q, kt));
  lt_tensor *one_big = LT_NN(lt_matmul(big_a, big_b));
  LT_OK_OR_FAIL(lt_set_num_threads(nt));
  LT_ASSERT_SAME_BITS(par_small, seq_small);
  LT_ASSERT_SAME_BITS(par_big, seq_big);
  LT_ASSERT_SAME_BITS(par_small, one_small);
  LT_ASSERT_SAME_BITS(par_big, one_big);
  lt_tensor *ref_small = LT_NN(lt__matmul_ref(q, kt)), *ref_big = LT_NN(lt__matmul_ref(big_a, big_b));
  LT_ASSERT_CLOSE(par_small, ref_small, 2e-5, 2e-5);
  LT_ASSERT_CLOSE(par_big, ref_big, 2e-5, 1e-4);
  lt_tensor *objs[] = {q, k, kt, big_a, big_b, par_small, par_big, seq_small, seq_big,
                       one_small, one_big, ref_small, ref_big};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

/* lt_test_same_on_threads callback: a·b. */
typedef struct mm_ctx {
  const lt_tensor *a, *b;
} mm_ctx;
static int mm_run(void *u, lt_tensor **out, int cap) {
  const mm_ctx *c = u;
  out[0] = LT_NN(lt_matmul(c->a, c->b));
  return 1;
}

/* For each pair: lhs[i]·rhs[i] has the same bits on 1 and 2 threads and
 * matches the reference (f64 within 1e-12, f32 within 1e-4). */
static void same_bits_on_1_and_2_threads(const lt_tensor *const *lhs, const lt_tensor *const *rhs, int n) {
  for (int i = 0; i < n; i++) {
    const bool f64 = lhs[i]->dtype == LT_DTYPE_F64;
    char what[64];
    snprintf(what, sizeof what, "case %d (%s)", i, lt_dtype_name(lhs[i]->dtype));
    lt_test_same_on_threads(mm_run, &(mm_ctx){lhs[i], rhs[i]}, what);
    lt_tensor *two = LT_NN(lt_matmul(lhs[i], rhs[i]));
    lt_tensor *ref = LT_NN(lt__matmul_ref(lhs[i], rhs[i]));
    LT_ASSERT_CLOSE(two, ref, f64 ? 1e-12 : 1e-4, f64 ? 1e-12 : 1e-4);
    lt_tensor_free(two);
    lt_tensor_free(ref);
  }
}

/* Products with one row or one column of the output (decoding: every Linear
 * on one position) go through BLIS's gemv, split over threads from 2^22
 * multiply-adds (these are 4.7M): values match
 * the reference, through transposed and strided operands, and the bits are
 * the same on 1 and 2 threads. */
START_TEST(test_gemv_paths) {
  for (int d = 0; d < 2; d++) {
    lt_dtype dt = d ? LT_DTYPE_F64 : LT_DTYPE_F32;
    lt_tensor *x = rnd(dt, LT_SHAPE(1, 1024)), *w = rnd(dt, LT_SHAPE(4608, 1024));
    lt_tensor *wt = LT_NN(lt_transpose(w, 0, 1));            /* [1024, 4608], a view */
    lt_tensor *xc = LT_NN(lt_transpose(x, 0, 1));            /* [1024, 1] */
    lt_tensor *wide = rnd(dt, LT_SHAPE(1024, 9216));
    lt_tensor *ws = LT_NN(lt_slice(wide, 1, 0, 9216, 2));    /* [1024, 4608], stride 2 */
    lt_tensor *wst = LT_NN(lt_transpose(ws, 0, 1));          /* [4608, 1024], strided and transposed */
    /* one row: x·W^T, x·(strided); one column: W·x^T, (strided^T)·x^T */
    const lt_tensor *lhs[] = {x, x, w, wst};
    const lt_tensor *rhs[] = {wt, ws, xc, xc};
    same_bits_on_1_and_2_threads(lhs, rhs, 4);
    lt_tensor *objs[] = {x, w, wt, xc, wide, ws, wst};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
  }
}
END_TEST

/* Products with a short side of C (2..64 rows or columns: batched decoding,
 * attention heads) go through tensor/gemm_small.c's kernels when the layout is
 * theirs: "dot" (A's rows and B's columns contiguous along k, as in x W^T)
 * and "axpy" (B's rows contiguous, A any strides). Values match the
 * reference with k and n tails (not multiples of the vector width), C^T
 * orientation (short side n), strided operands and tiny shapes; from 2^22
 * multiply-adds the long side is split over threads, and 1 and 2 threads
 * give the same bits. */
START_TEST(test_skinny_paths) {
  for (int d = 0; d < 2; d++) {
    lt_dtype dt = d ? LT_DTYPE_F64 : LT_DTYPE_F32;
    lt_tensor *x = rnd(dt, LT_SHAPE(8, 515)), *w = rnd(dt, LT_SHAPE(1100, 515));
    lt_tensor *wt = LT_NN(lt_transpose(w, 0, 1));            /* [515, 1100] view: dot */
    lt_tensor *xt = LT_NN(lt_transpose(x, 0, 1));            /* [515, 8]: C [1100, 8], short side n */
    lt_tensor *wide = rnd(dt, LT_SHAPE(10, 1200));
    lt_tensor *xs = LT_NN(lt_slice(wide, 1, 0, 1200, 2));    /* [10, 600], column stride 2 */
    lt_tensor *x5 = LT_NN(lt_slice(xs, 0, 0, 5, 1));         /* [5, 600] */
    lt_tensor *bw = rnd(dt, LT_SHAPE(600, 1600));
    lt_tensor *bs = LT_NN(lt_slice(bw, 1, 0, 1500, 1));      /* [600, 1500], row stride 1600: axpy */
    lt_tensor *bst = LT_NN(lt_transpose(bs, 0, 1));          /* [1500, 600] */
    lt_tensor *x5t = LT_NN(lt_transpose(x5, 0, 1));          /* [600, 5] */
    lt_tensor *q = rnd(dt, LT_SHAPE(64, 64)), *kk = rnd(dt, LT_SHAPE(64, 64));
    lt_tensor *kkt = LT_NN(lt_transpose(kk, 0, 1));
    lt_tensor *s3 = rnd(dt, LT_SHAPE(3, 70)), *s5 = rnd(dt, LT_SHAPE(5, 70)), *s75 = rnd(dt, LT_SHAPE(70, 5));
    lt_tensor *s5t = LT_NN(lt_transpose(s5, 0, 1));          /* [70, 5] view */
    const lt_tensor *lhs[] = {x, w, x5, bst, q, q, s3, s3};
    const lt_tensor *rhs[] = {wt, xt, bs, x5t, kkt, kk, s5t, s75};
    same_bits_on_1_and_2_threads(lhs, rhs, 8);
    lt_tensor *objs[] = {x, w, wt, xt, wide, xs, x5, bw, bs, bst, x5t, q, kk, kkt, s3, s5, s75, s5t};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
  }
}
END_TEST

/* Small f32 products (tensor/gemm_small.c's panel kernel, docs/gemm.md "Small
 * products"): the ViT's shapes (512 attention products [17,16]x[16,17] and
 * their backward layouts, Linear layers of 2176 rows) and odd sizes (k and n
 * tails, one row, C^T orientation, strided operands), under the shipped rule
 * and with the kernel forced wherever it can run: values match the
 * reference, and 1 and 2 threads give the same bits (the Linear rows are
 * above 2^22 multiply-adds, so they are split over threads). */
START_TEST(test_small_paths) {
  const lt_dtype dt = LT_DTYPE_F32;
  lt_tensor *q = rnd(dt, LT_SHAPE(512, 17, 16)), *k = rnd(dt, LT_SHAPE(512, 17, 16));
  lt_tensor *p = rnd(dt, LT_SHAPE(512, 17, 17));
  lt_tensor *kt = LT_NN(lt_transpose(k, 1, 2)), *pt = LT_NN(lt_transpose(p, 1, 2));
  lt_tensor *x = rnd(dt, LT_SHAPE(128, 17, 64)), *w = rnd(dt, LT_SHAPE(192, 64)), *g = rnd(dt, LT_SHAPE(2176, 192));
  lt_tensor *wt = LT_NN(lt_transpose(w, 0, 1));                 /* [64, 192] view: x W^T */
  lt_tensor *x2 = LT_NN(lt_reshape(x, LT_SHAPE(2176, 64)));
  lt_tensor *gt = LT_NN(lt_transpose(g, 0, 1));                 /* [192, 2176]: dW = g^T x */
  lt_tensor *o1 = rnd(dt, LT_SHAPE(33, 70)), *o2 = rnd(dt, LT_SHAPE(70, 47)), *o3 = rnd(dt, LT_SHAPE(1, 70));
  lt_tensor *wide = rnd(dt, LT_SHAPE(70, 100));
  lt_tensor *os = LT_NN(lt_slice(wide, 1, 0, 100, 2));          /* [70, 50], column stride 2 */
  lt_tensor *o2t = LT_NN(lt_transpose(o2, 0, 1)), *o1t = LT_NN(lt_transpose(o1, 0, 1)); /* both operands views */
  const lt_tensor *lhs[] = {q, p, pt, x, g, gt, o1, o1, o3, o2t};
  const lt_tensor *rhs[] = {kt, k, q, wt, w, x2, o2, os, o2, o1t};
  for (int mode = 0; mode < 2; mode++) { /* the panel kernel wherever it runs, then the rule */
    const lt__path prev = force_gemm(mode == 0 ? LT__PATH_gemm_small : LT__PATH_AUTO);
    same_bits_on_1_and_2_threads(lhs, rhs, (int)(sizeof lhs / sizeof *lhs));
    force_gemm(prev);
  }

  /* alpha, beta and a column-major C (the scalar store path) through the
   * gemm layer: C = 0.5 A B + 0.25 C against the same sum in double. */
  enum { M = 21, N = 18, K = 19 };
  float A[M * K], B[K * N], C[N * M], C0[N * M];
  for (int i = 0; i < M * K; i++) A[i] = (float)rng_uniform();
  for (int i = 0; i < K * N; i++) B[i] = (float)rng_uniform();
  for (int i = 0; i < N * M; i++) C0[i] = C[i] = (float)rng_uniform();
  const lt__path prev = force_gemm(LT__PATH_gemm_small);
  LT_OK_OR_FAIL(lt__mat_gemm(dt, false, 0.5, LT__MAT(A, M, K, K, 1), LT__MAT(B, K, N, N, 1), 0.25,
                             LT__MAT(C, M, N, 1, M)));
  force_gemm(prev);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int t = 0; t < K; t++) s += (double)A[i * K + t] * B[t * N + j];
      const double want = 0.5 * s + 0.25 * C0[j * M + i], e = fabs(C[j * M + i] - want);
      if (e > worst) worst = e;
    }
  ck_assert_msg(worst < 1e-5, "alpha/beta, column-major C: max error %g", worst);
  lt_tensor *objs[] = {q, k, p, kt, pt, x, w, g, wt, x2, gt, o1, o2, o3, wide, os, o2t, o1t};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

/* Many random shapes, strides and broadcasts. */
START_TEST(test_random_shapes) {
  for (int it = 0; it < 200; it++) {
    lt_dtype dt = it % 3 == 0 ? LT_DTYPE_F64 : LT_DTYPE_F32;
    int64_t m = 1 + (int64_t)((rng_uniform() + 1) * 6), n = 1 + (int64_t)((rng_uniform() + 1) * 6);
    int64_t k = 1 + (int64_t)((rng_uniform() + 1) * 6);
    int nbd = (int)((rng_uniform() + 1) * 1.5); /* 0..2 batch dims */
    int64_t bsh[2] = {2 + it % 2, 3};
    int ra = (int)((rng_uniform() + 1) * 2) % 4, rb = (int)((rng_uniform() + 1) * 2) % 4;
    /* rank of a: 1 or 2 + up to nbd batch dims (some broadcast to 1) */
    int64_t sa[5], sb[5];
    int na = 0, nb = 0;
    bool a1 = ra == 0, b1 = rb == 0;
    if (!a1)
      for (int d = 0; d < nbd; d++) sa[na++] = (ra + d) % 3 == 0 ? 1 : bsh[d];
    if (!b1)
      for (int d = 0; d < nbd; d++) sb[nb++] = (rb + d) % 3 == 1 ? 1 : bsh[d];
    bool ta = !a1 && it % 2, tb = !b1 && it % 5 < 2;
    if (a1) sa[na++] = k;
    else if (ta) { sa[na++] = k; sa[na++] = m; }
    else { sa[na++] = m; sa[na++] = k; }
    if (b1) sb[nb++] = k;
    else if (tb) { sb[nb++] = n; sb[nb++] = k; }
    else { sb[nb++] = k; sb[nb++] = n; }
    lt_tensor *a = rnd(dt, na, sa), *b = rnd(dt, nb, sb);
    if (ta) {
      lt_tensor *t = LT_NN(lt_transpose(a, -2, -1));
      lt_tensor_free(a);
      a = t;
    }
    if (tb) {
      lt_tensor *t = LT_NN(lt_transpose(b, -2, -1));
      lt_tensor_free(b);
      b = t;
    }
    if (it % 7 == 3 && a->shape[a->ndim - 1] > 1) { /* slice a's k dim with step 2 (k shrinks) */
      lt_tensor *t = LT_NN(lt_slice(a, -1, 0, a->shape[a->ndim - 1], 2));
      lt_tensor *u = LT_NN(lt_slice(b, b1 ? 0 : -2, 0, b1 ? b->shape[0] : b->shape[b->ndim - 2], 2));
      lt_tensor_free(a);
      lt_tensor_free(b);
      a = t;
      b = u;
    }
    check_vs_ref(a, b);
  }
}
END_TEST

/* ---- zero sizes ---------------------------------------------------------- */

START_TEST(test_zero_size) {
  lt_dtype dt = LT_DTYPE_F32;
  struct {
    int na;
    int64_t a[4];
    int nb;
    int64_t b[4];
    int nout;
    int64_t out[4];
  } cases[] = {
      {2, {0, 3}, 2, {3, 4}, 2, {0, 4}},
      {2, {3, 4}, 2, {4, 0}, 2, {3, 0}},
      {2, {3, 0}, 2, {0, 4}, 2, {3, 4}},          /* k == 0: zeros */
      {1, {0}, 1, {0}, 0, {0}},                    /* empty dot: 0 */
      {4, {2, 0, 3, 5}, 2, {5, 4}, 4, {2, 0, 3, 4}},
      {3, {0, 3, 5}, 3, {1, 5, 4}, 3, {0, 3, 4}},
      {3, {2, 3, 0}, 3, {2, 0, 4}, 3, {2, 3, 4}},  /* batched k == 0 */
      {1, {0}, 2, {0, 3}, 1, {3}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    lt_tensor *a = rnd(dt, cases[i].na, cases[i].a), *b = rnd(dt, cases[i].nb, cases[i].b);
    lt_tensor *c = LT_NN(lt_matmul(a, b));
    lt_test_assert_shape(c, cases[i].nout, cases[i].out, "c", __FILE__, __LINE__);
    lt_tensor *z = LT_NN(lt_zeros(dt, cases[i].nout, cases[i].out));
    LT_ASSERT_CLOSE(c, z, 0, 0);
    lt_tensor_free(z);
    lt_tensor_free(c);
    check_vs_ref(a, b);
  }
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

/* Inner and batch dimensions, f32 vs f64, i32, 0-d operands and NULLs are
 * error cases of the runner's matmul entry (tests/opinfo_matmul.inc); here the
 * reference's own error, bool and mixed integer/float operands, and that a
 * failed call leaves its inputs untouched. */
START_TEST(test_errors) {
  lt_tensor *a = rnd(LT_DTYPE_F32, LT_SHAPE(4, 8)), *b = rnd(LT_DTYPE_F32, LT_SHAPE(7, 3));
  LT_EXPECT_NULL_ERR(lt_matmul(a, b), LT_ERR_SHAPE, "inner dimensions 8 != 7");
  LT_EXPECT_NULL_ERR(lt__matmul_ref(a, b), LT_ERR_SHAPE, "inner dimensions 8 != 7");
  lt_tensor *i1 = LT_NN(lt_zeros(LT_DTYPE_I32, LT_SHAPE(2, 3)));
  lt_tensor *bl = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(3, 2)));
  LT_EXPECT_NULL_ERR(lt_matmul(i1, bl), LT_ERR_DTYPE, "only f32, f64 and bf16");
  lt_tensor *f3 = rnd(LT_DTYPE_F32, LT_SHAPE(3, 2));
  LT_EXPECT_NULL_ERR(lt_matmul(i1, f3), LT_ERR_DTYPE, "i32");
  LT_EXPECT_NULL_ERR(lt_matmul(a, NULL), LT_ERR_NULL, "matmul: argument b is NULL");

  /* inputs untouched */
  ck_assert_int_eq(a->ndim, 2);
  ck_assert(a->shape[0] == 4 && a->shape[1] == 8 && a->stride[0] == 8 && a->stride[1] == 1);
  ck_assert(a->grad_fn == NULL && !a->requires_grad);
  lt_tensor *objs[] = {a, b, i1, bl, f3};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

/* ---- backward through the engine ---------------------------------------- */

/* x [B,T,C] · w [C,N] with an explicit upstream gradient g [B,T,N]: dx = g w^T,
 * dw = sum over B of x_b^T g_b (the folded single GEMM in the backward). */
START_TEST(test_backward_linear_shape) {
  lt_dtype dt = LT_DTYPE_F64;
  lt_tensor *x = rnd(dt, LT_SHAPE(3, 5, 4)), *w = rnd(dt, LT_SHAPE(4, 6)), *g = rnd(dt, LT_SHAPE(3, 5, 6));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  lt_tensor *y = LT_NN(lt_matmul(x, w));
  ck_assert(y->grad_fn != NULL);
  LT_OK_OR_FAIL(lt_backward(y, g, false));
  ck_assert(x->grad && w->grad);
  lt_tensor *wt = LT_NN(lt_transpose(w, 0, 1));
  lt_tensor *dx = LT_NN(lt__matmul_ref(g, wt));
  LT_ASSERT_CLOSE(x->grad, dx, 1e-12, 1e-12);
  lt_tensor *xf = LT_NN(lt_reshape(x, LT_SHAPE(15, 4))), *gf = LT_NN(lt_reshape(g, LT_SHAPE(15, 6)));
  lt_tensor *xft = LT_NN(lt_transpose(xf, 0, 1));
  lt_tensor *dw = LT_NN(lt__matmul_ref(xft, gf));
  LT_ASSERT_CLOSE(w->grad, dw, 1e-12, 1e-12);
  lt_tensor *objs[] = {y, wt, dx, xf, gf, xft, dw, x, w, g};
  for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) lt_tensor_free(objs[i]);
}
END_TEST

/* Broadcast batch dims and 1-d operands: the gradients come back in the
 * inputs' shapes (the engine sums the broadcast dims). */
START_TEST(test_backward_broadcast_shapes) {
  lt_dtype dt = LT_DTYPE_F64;
  struct {
    int na;
    int64_t a[4];
    int nb;
    int64_t b[4];
  } cases[] = {
      {4, {2, 1, 4, 5}, 3, {3, 5, 6}},
      {1, {5}, 3, {2, 5, 3}},
      {3, {2, 4, 5}, 1, {5}},
      {1, {5}, 1, {5}},
      {2, {4, 5}, 3, {2, 5, 3}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    lt_tensor *a = rnd(dt, cases[i].na, cases[i].a), *b = rnd(dt, cases[i].nb, cases[i].b);
    LT_OK_OR_FAIL(lt_requires_grad_(a, true));
    LT_OK_OR_FAIL(lt_requires_grad_(b, true));
    lt_tensor *y = LT_NN(lt_matmul(a, b));
    lt_tensor *g = rnd(dt, y->ndim, y->shape);
    LT_OK_OR_FAIL(lt_backward(y, g, false));
    lt_test_assert_shape(a->grad, a->ndim, a->shape, "a->grad", __FILE__, __LINE__);
    lt_test_assert_shape(b->grad, b->ndim, b->shape, "b->grad", __FILE__, __LINE__);
    lt_tensor *objs[] = {y, g, a, b};
    for (size_t j = 0; j < sizeof objs / sizeof *objs; j++) lt_tensor_free(objs[j]);
  }
}
END_TEST

/* A B packed once and multiplied many times (lt__mat_pack / lt__mat_gemm_packed,
 * tensor/gemm_internal.h: the fused attention's K^T and V^T tiles), and B read
 * in place by the panel kernel (rows contiguous, whole vectors): the packed
 * product has the bits of the same product through lt__mat_gemm's panel kernel,
 * for the first n of pn packed columns, A and C with any strides, alpha and
 * beta; both match a double reference. Without the panel kernel (no AVX-512,
 * path gemm=blis forced) the entry reports 0 floats and callers use lt__mat_gemm. */
START_TEST(test_packed_b) {
  enum { MAXM = 150, MAXN = 256, MAXK = 200 };
  static const int64_t shapes[][4] = {/* m, n, k, pn */
                                      {37, 100, 64, 128}, {128, 256, 64, 256}, {5, 17, 3, 17},
                                      {150, 48, 200, 48}, {33, 64, 129, 200}, {6, 2, 7, 16}};
  float *X = malloc(sizeof(float) * MAXN * MAXK), *A = malloc(sizeof(float) * MAXM * MAXK);
  float *bp = aligned_alloc(64, sizeof(float) * 4 * 64 * MAXK);
  float *C1 = malloc(sizeof(float) * MAXM * MAXN), *C2 = malloc(sizeof(float) * MAXM * MAXN);
  float *C0 = malloc(sizeof(float) * MAXM * MAXN);
  ck_assert(X && A && bp && C1 && C2 && C0);
  const lt__path prev = force_gemm(LT__PATH_gemm_small); /* the reference products run in the panel kernel too */
  if (lt__mat_pack_floats(64, 64) == 0) { /* no AVX-512 here: nothing packed, callers use lt__mat_gemm */
    force_gemm(prev);
    free(X), free(A), free(bp), free(C1), free(C2), free(C0);
    return;
  }
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
    const int64_t m = shapes[t][0], n = shapes[t][1], k = shapes[t][2], pn = shapes[t][3];
    ck_assert(lt__mat_pack_floats(k, pn) <= 4 * 64 * MAXK && lt__mat_pack_floats(k, pn) > 0);
    for (int64_t i = 0; i < pn * k; i++) X[i] = (float)rng_uniform(); /* X [pn, k]: B = X^T, a transposed view */
    for (int64_t i = 0; i < m * k; i++) A[i] = (float)rng_uniform();
    for (int64_t i = 0; i < m * n; i++) C0[i] = C1[i] = C2[i] = (float)rng_uniform();
    const lt__mat B = lt__mat_t(LT__MAT(X, pn, k, k, 1));
    /* A row-major, or (odd t) A^T of a [k, m] matrix; C rows of n, or (t % 3 == 2) columns of m */
    const lt__mat Am = t % 2 ? LT__MAT(A, m, k, 1, m) : LT__MAT(A, m, k, k, 1);
    const bool colc = t % 3 == 2;
    const double alpha = 0.125, beta = t % 2 ? 0.0 : 1.0;
    lt__mat_pack(B, bp);
    lt__mat_gemm_packed(alpha, Am, bp, pn, beta, colc ? LT__MAT(C1, m, n, 1, m) : LT__MAT(C1, m, n, n, 1));
    lt__mat Bn = B;
    Bn.cols = n;
    LT_OK_OR_FAIL(lt__mat_gemm(LT_DTYPE_F32, true, alpha, Am, Bn, beta,
                               colc ? LT__MAT(C2, m, n, 1, m) : LT__MAT(C2, m, n, n, 1)));
    int64_t differ = 0;
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        const int64_t at = colc ? j * m + i : i * n + j;
        differ += memcmp(&C1[at], &C2[at], sizeof(float)) != 0;
        double sum = 0;
        for (int64_t p = 0; p < k; p++) sum += (double)(t % 2 ? A[p * m + i] : A[i * k + p]) * X[j * k + p];
        const double e = fabs(C1[at] - (alpha * sum + beta * C0[at]));
        if (e > worst) worst = e;
      }
    ck_assert_msg(differ == 0, "packed [%lld,%lld]x[%lld,%lld of %lld]: %lld elements differ from lt__mat_gemm",
                  (long long)m, (long long)k, (long long)k, (long long)n, (long long)pn, (long long)differ);
    ck_assert_msg(worst < 1e-5, "packed [%lld,%lld]x[%lld,%lld]: max error %g", (long long)m, (long long)k,
                  (long long)k, (long long)n, worst);
  }
  /* B in place: a [k, 48] column slice of a row-major [k, 80] (rows 80 apart) */
  for (int64_t i = 0; i < 80 * 64; i++) X[i] = (float)rng_uniform();
  for (int64_t i = 0; i < 100 * 64; i++) A[i] = (float)rng_uniform();
  LT_OK_OR_FAIL(lt__mat_gemm(LT_DTYPE_F32, true, 1.0, LT__MAT(A, 100, 64, 64, 1), LT__MAT(X + 16, 64, 48, 80, 1), 0.0,
                             LT__MAT(C1, 100, 48, 48, 1)));
  double worst = 0;
  for (int64_t i = 0; i < 100; i++)
    for (int64_t j = 0; j < 48; j++) {
      double sum = 0;
      for (int64_t p = 0; p < 64; p++) sum += (double)A[i * 64 + p] * X[p * 80 + 16 + j];
      if (fabs(C1[i * 48 + j] - sum) > worst) worst = fabs(C1[i * 48 + j] - sum);
    }
  ck_assert_msg(worst < 1e-5, "B in place: max error %g", worst);
  force_gemm(LT__PATH_gemm_blis); /* BLIS asked for: nothing is packed */
  ck_assert_int_eq(lt__mat_pack_floats(64, 64), 0);
  force_gemm(prev);
  free(X), free(A), free(bp), free(C1), free(C2), free(C0);
}
END_TEST

/* The path table (tensor/paths.def) as lt_runtime_get_info reports it, the
 * one CPU probe against the compiler's own CPUID check, and forcing: every
 * line is reported with its family, name and switch; every family has a
 * path this CPU runs; a forced path is what lt__path_forced says, takes its
 * family alone (lt__path_on), and LT__PATH_AUTO gives the rule back. */
START_TEST(test_path_table) {
  lt_runtime_info info;
  LT_OK_OR_FAIL(lt_runtime_get_info(&info));
  ck_assert_int_eq(info.num_paths, LT__PATH_COUNT);
  bool family_runs[LT__PATH_FAMILY_COUNT] = {false};
  for (int i = 0; i < info.num_paths; i++) {
    const lt__path p = (lt__path)i;
    const lt_runtime_path *r = &info.paths[i];
    ck_assert_str_eq(r->family, lt__path_family_name(lt__path_family_of(p)));
    ck_assert_str_eq(r->name, lt__path_name(p));
    ck_assert_str_eq(r->force, lt__path_switch(p));
    ck_assert_msg(!strncmp(r->force, "LT_", 3) && strchr(r->force, '='), "path %s: switch %s", r->name, r->force);
    ck_assert(r->supported == lt__path_supported(p));
    if (r->supported) family_runs[lt__path_family_of(p)] = true;
  }
  for (int f = 0; f < LT__PATH_FAMILY_COUNT; f++)
    ck_assert_msg(family_runs[f], "family %s: no path this CPU runs", lt__path_family_name((lt__path_family)f));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  const lt__cpu_info *c = lt__cpu();
  ck_assert(c->avx512f == (bool)__builtin_cpu_supports("avx512f"));
  ck_assert(c->avx2 == (bool)__builtin_cpu_supports("avx2"));
  ck_assert(c->avx512vnni == (bool)__builtin_cpu_supports("avx512vnni"));
  ck_assert(c->avx512bf16 == (bool)__builtin_cpu_supports("avx512bf16"));
  ck_assert(c->amx_tile == (bool)__builtin_cpu_supports("amx-tile"));
  ck_assert(lt__path_supported(LT__PATH_gemm_small) == c->avx512f);
  ck_assert(lt__path_supported(LT__PATH_philox_avx2) == c->avx2);
#endif
  const lt__path prev = lt__path_force(LT__PATH_FAMILY_conv, LT__PATH_conv_im2col);
  ck_assert_int_eq(lt__path_forced(LT__PATH_FAMILY_conv), LT__PATH_conv_im2col);
  ck_assert(lt__path_on(LT__PATH_conv_im2col) && !lt__path_on(LT__PATH_conv_dnnl));
  ck_assert_int_eq(lt__path_force(LT__PATH_FAMILY_conv, LT__PATH_AUTO), LT__PATH_conv_im2col);
  ck_assert(lt__path_on(LT__PATH_conv_im2col) && lt__path_on(LT__PATH_conv_dnnl));
  lt__path_force(LT__PATH_FAMILY_conv, prev);
}
END_TEST

int main(void) {
  Suite *s = suite_create("matmul");
  TCase *tc = tcase_create("forward");
  tcase_add_test(tc, test_hand_2x3_3x2);
  tcase_add_test(tc, test_hand_dot_and_vectors);
  tcase_add_test(tc, test_transposed_operands);
  tcase_add_test(tc, test_sliced_and_expanded_operands);
  tcase_add_test(tc, test_batched_paths_agree);
  tcase_add_test(tc, test_gemv_paths);
  tcase_add_test(tc, test_skinny_paths);
  tcase_add_test(tc, test_small_paths);
  tcase_add_test(tc, test_packed_b);
  tcase_add_test(tc, test_path_table);
  tcase_add_test(tc, test_random_shapes);
  tcase_add_test(tc, test_zero_size);
  tcase_add_test(tc, test_errors);
  suite_add_tcase(s, tc);
  TCase *tb = tcase_create("backward");
  tcase_add_test(tb, test_backward_linear_shape);
  tcase_add_test(tb, test_backward_broadcast_shapes);
  suite_add_tcase(s, tb);
  return lt_test_run(s);
}
