/*
 * bench/gemm.c: GFLOP/s of lt_matmul next to the same bli_sgemm call made
 * directly, f32, on the shapes a Transformer uses. Prints a Markdown table
 * (docs/gemm.md keeps the latest one) with the ratio lt/raw per row.
 *
 * Usage: bench_gemm [--quick] [--switch] [--small] [--dtype f32|bf16] [threads ...]   (default threads: 1 2)
 *   --quick   fewer repeats (a smoke run)
 *   --dtype bf16  instead of lt vs raw BLIS, time lt_matmul three ways in the
 *             same run: f32 (BLIS), bf16 operands (oneDNN, bf16 out) and f32
 *             under autocast (bf16 copies made per call, f32 out), with the
 *             ratios to f32 (docs/mixed-precision.md keeps the table)
 *   --small   instead, the small and batched products of a ViT and a CNN
 *             (issue 18) and a few Transformer ones, by engine: BLIS (the
 *             path before), the panel kernel, oneDNN's f32 matmul (batched,
 *             one call) and the shipped rule (docs/gemm.md, "Small products")
 *   --switch  also time batched products both ways (one product per thread,
 *             or one after another with BLIS threads) to place the switch
 *             point lt__matmul_batch_par_max
 *
 * Method: each operand is made once; a row is timed by alternating raw and
 * lt calls (so that noise from other processes hits both), best of N after a
 * warm-up. The lt time includes allocating and freeing the output, as a user
 * pays it; raw BLIS writes into a buffer made once. A batched row's raw time
 * is a loop of bli_sgemm calls, one per batch entry, with BLIS threads.
 *
 * What this is not: a BLIS tuning tool; the kernel set is the one libtensor's
 * runtime chose (printed in the header).
 */
#include <blis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "libtensor.h"
#include "tensor/paths_internal.h"
#include "tensor/matmul_internal.h"

#include <oneapi/dnnl/dnnl.h>

static void die(const char *what) {
  fprintf(stderr, "bench_gemm: %s: %s: %s\n", what, lt_status_name(lt_last_status()), lt_last_error());
  exit(1);
}

/* One row: out[nb, m, n] = A[nb, m, k] · B[nb, k, n] (nb == 0: no batch dim,
 * b_shared: B is one [k,n] matrix for the whole batch). ta/tb: the operand is
 * stored transposed ([k,m] / [n,k]) and passed as a transposed view. */
typedef struct {
  const char *name;
  int64_t nb, m, n, k;
  bool ta, tb;
} row;

static const row rows[] = {
    {"128 x 128 x 128", 0, 128, 128, 128, false, false},
    {"256 x 256 x 256", 0, 256, 256, 256, false, false},
    {"512 x 512 x 512", 0, 512, 512, 512, false, false},
    {"1024 x 1024 x 1024", 0, 1024, 1024, 1024, false, false},
    {"2048 x 2048 x 2048", 0, 2048, 2048, 2048, false, false},
    {"[4096,512]·[512,2048] (Linear fwd, W [in,out])", 0, 4096, 2048, 512, false, false},
    {"[4096,512]·[2048,512]^T (Linear fwd, W [out,in])", 0, 4096, 2048, 512, false, true},
    {"[4096,2048]·[2048,512] (Linear bwd dX = g·W)", 0, 4096, 512, 2048, false, false},
    {"[4096,2048]^T·[4096,512] (Linear bwd dW = g^T·X)", 0, 2048, 512, 4096, true, false},
    {"[4096,2048]·[512,2048]^T (Linear bwd dX = g·W^T)", 0, 4096, 512, 2048, false, true},
    {"[4096,512]^T·[4096,2048] (Linear bwd dW = X^T·g)", 0, 512, 2048, 4096, true, false},
    {"[64,128,64]·[64,64,128] (attention q·k^T)", 64, 128, 128, 64, false, false},
    {"[64,128,64]·[64,128,64]^T (q·k^T, k^T a view)", 64, 128, 128, 64, false, true},
    {"[64,128,128]·[64,128,64] (attention p·v)", 64, 128, 64, 128, false, false},
};

typedef struct {
  lt_tensor *a_store, *b_store, *a, *b; /* a, b: the operands lt_matmul gets */
  lt_tensor *a16, *b16;                 /* bf16 copies, same orientation (--dtype bf16) */
  float *c;                             /* raw output */
  int64_t rsa, csa, rsb, csb, bsa, bsb; /* strides raw BLIS gets (elements) */
} operands;

/* Values in [-1, 1) from a small LCG (the values do not matter, only that
 * they are ordinary numbers). */
static lt_tensor *randu(int ndim, const int64_t *shape) {
  lt_tensor *t = lt_empty(LT_DTYPE_F32, ndim, shape);
  if (!t) die("lt_empty");
  static uint64_t state = 42;
  float *p = t->data;
  for (int64_t i = 0; i < t->numel; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)((double)(state >> 40) / 8388608.0 - 1.0);
  }
  return t;
}

static void make(const row *r, operands *o) {
  int64_t nb = r->nb ? r->nb : 1;
  int nd = r->nb ? 3 : 2, o1 = nd - 2;
  int64_t sa[3] = {nb, r->ta ? r->k : r->m, r->ta ? r->m : r->k};
  int64_t sb[3] = {nb, r->tb ? r->n : r->k, r->tb ? r->k : r->n};
  o->a_store = randu(nd, sa + (r->nb ? 0 : 1));
  o->b_store = randu(nd, sb + (r->nb ? 0 : 1));
  o->a = r->ta ? lt_transpose(o->a_store, -2, -1) : lt_tensor_retain(o->a_store);
  o->b = r->tb ? lt_transpose(o->b_store, -2, -1) : lt_tensor_retain(o->b_store);
  if (!o->a || !o->b) die("lt_transpose");
  o->rsa = o->a->stride[o1];
  o->csa = o->a->stride[o1 + 1];
  o->rsb = o->b->stride[o1];
  o->csb = o->b->stride[o1 + 1];
  o->bsa = r->m * r->k;
  o->bsb = r->k * r->n;
  o->a16 = o->b16 = NULL;
  o->c = malloc(sizeof(float) * (size_t)(nb * r->m * r->n));
  if (!o->c) die("malloc");
  memset(o->c, 0, sizeof(float) * (size_t)(nb * r->m * r->n));
}

static void unmake(operands *o) {
  lt_tensor_free(o->a16);
  lt_tensor_free(o->b16);
  lt_tensor_free(o->a);
  lt_tensor_free(o->b);
  lt_tensor_free(o->a_store);
  lt_tensor_free(o->b_store);
  free(o->c);
}

static void run_raw(const row *r, const operands *o) {
  float one = 1.0f, zero = 0.0f;
  const float *A = o->a->data, *B = o->b->data;
  int64_t nb = r->nb ? r->nb : 1;
  for (int64_t i = 0; i < nb; i++)
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, r->m, r->n, r->k, &one, (float *)A + i * o->bsa,
              o->rsa, o->csa, (float *)B + i * o->bsb, o->rsb, o->csb, &zero, o->c + i * r->m * r->n,
              r->n, 1);
}

static void run_lt(const operands *o) {
  lt_tensor *c = lt_matmul(o->a, o->b);
  if (!c) die("lt_matmul");
  lt_tensor_free(c);
}

/* --dtype bf16: bf16 copies of the stores, viewed as the f32 operands are. */
static void make_bf16(const row *r, operands *o) {
  lt_tensor *as = lt_to_dtype(o->a_store, LT_DTYPE_BF16), *bs = lt_to_dtype(o->b_store, LT_DTYPE_BF16);
  if (!as || !bs) die("lt_to_dtype");
  o->a16 = r->ta ? lt_transpose(as, -2, -1) : lt_tensor_retain(as);
  o->b16 = r->tb ? lt_transpose(bs, -2, -1) : lt_tensor_retain(bs);
  lt_tensor_free(as);
  lt_tensor_free(bs);
  if (!o->a16 || !o->b16) die("lt_transpose");
}

static void run_way(const operands *o, int way) { /* 0 f32, 1 bf16, 2 f32 under autocast */
  lt_dtype prev = lt_set_autocast(way == 2 ? LT_DTYPE_BF16 : LT_DTYPE_F32);
  lt_tensor *c = way == 1 ? lt_matmul(o->a16, o->b16) : lt_matmul(o->a, o->b);
  lt_set_autocast(prev);
  if (!c) die("lt_matmul");
  lt_tensor_free(c);
}

/* Best-of times of the three ways, each repeat running them in a rotating
 * order so that noise hits all three alike. */
static void time_ways(const operands *o, bool quick, double best[3]) {
  double t0 = lt_monotonic_seconds();
  for (int w = 0; w < 3; w++) run_way(o, w), run_way(o, w); /* warm-up, primitive cache */
  double once = (lt_monotonic_seconds() - t0) / 6;
  int reps = once > 0 ? (int)((quick ? 0.3 : 1.5) / (3 * once)) : 50;
  if (reps < (quick ? 2 : 5)) reps = quick ? 2 : 5;
  if (reps > 200) reps = 200;
  best[0] = best[1] = best[2] = 1e30;
  for (int i = 0; i < reps; i++)
    for (int j = 0; j < 3; j++) {
      int w = (i + j) % 3;
      double a = lt_monotonic_seconds();
      run_way(o, w);
      double t = lt_monotonic_seconds() - a;
      if (t < best[w]) best[w] = t;
    }
}

/* Best-of times of raw and lt, alternating. */
static void time_row(const row *r, const operands *o, bool quick, double *t_raw, double *t_lt) {
  double t0 = lt_monotonic_seconds();
  run_raw(r, o); /* warm-up: BLIS's packing buffers, the allocator, page faults */
  run_lt(o);
  run_raw(r, o);
  run_lt(o);
  double once = (lt_monotonic_seconds() - t0) / 4;
  int reps = once > 0 ? (int)((quick ? 0.2 : 1.0) / once) : 50;
  if (reps < (quick ? 2 : 5)) reps = quick ? 2 : 5;
  if (reps > 200) reps = 200;
  *t_raw = *t_lt = 1e30;
  for (int i = 0; i < reps; i++) {
    /* Swap the order every other repeat: whichever runs second finds the
     * other's freshly written output to evict from the caches. */
    for (int j = 0; j < 2; j++) {
      bool raw = (i + j) % 2 == 0;
      double a = lt_monotonic_seconds();
      if (raw) run_raw(r, o);
      else run_lt(o);
      double t = lt_monotonic_seconds() - a;
      double *best = raw ? t_raw : t_lt;
      if (t < *best) *best = t;
    }
  }
}

static void print_header(void) {
  if (lt_bench_print_runtime(stdout) != LT_OK) die("lt_runtime_get_info");
  printf("raw BLIS %s\n", bli_info_get_version_str());
}

/* How many cores other processes took on average since m, for the table's footer. */
static void print_others(lt_bench_mark m) {
  printf("\nOther processes used %.2f of %ld cores on average during this table.\n", lt_bench_others_cores(m),
         sysconf(_SC_NPROCESSORS_ONLN));
}

/* Batched products timed both ways, to place lt__matmul_batch_par_max. */
static void switch_sweep(bool quick) {
  printf("\n### Batched: one product per thread vs BLIS threads inside (%d threads)\n\n",
         lt_get_num_threads());
  printf("| shape | m·n·k | per-thread GFLOP/s | BLIS-threads GFLOP/s | ratio |\n|---|---:|---:|---:|---:|\n");
  /* nb batches of q·k^T ([T,64]·[64,T]) and p·v ([T,T]·[T,64]), then 3 square
   * products (a batch that does not spread evenly over 2 threads). */
  const int64_t T[] = {16, 32, 64, 128, 256, 512, 1024};
  const int64_t nT = (int64_t)(sizeof T / sizeof *T);
  for (int64_t c = 0; c < 2 * nT + 3; c++) {
    int64_t nb, m, n, k;
    if (c < 2 * nT) {
      int64_t t = T[c / 2];
      nb = 32;
      m = t;
      n = c % 2 ? 64 : t;
      k = c % 2 ? t : 64;
    } else {
      nb = 3;
      m = n = k = (int64_t)128 << (c - 2 * nT);
    }
    row r = {"", nb, m, n, k, false, false};
    operands o;
    make(&r, &o);
    double best[2];
    for (int way = 0; way < 2; way++) {
      int64_t prev = lt__matmul_set_batch_par_max(way == 0 ? INT64_MAX : 0);
      double dummy;
      time_row(&r, &o, quick, &dummy, &best[way]);
      lt__matmul_set_batch_par_max(prev);
    }
    double fl = 2.0 * (double)(nb * m * n * k);
    printf("| [%lld,%lld,%lld]·[%lld,%lld,%lld] | %lld | %.1f | %.1f | %.2f |\n", (long long)nb,
           (long long)m, (long long)k, (long long)nb, (long long)k, (long long)n,
           (long long)(m * n * k), fl / best[0] * 1e-9, fl / best[1] * 1e-9, best[1] / best[0]);
    unmake(&o);
  }
}

/* ---- --small: engines for small and batched products ---------------------- */

/* The ViT's and the CNN's products (issue 18) and a few of the Transformer
 * benchmark's, each timed with every engine in the same run:
 * - blis: lt_matmul with the panel kernel off (gemm=skinny: BLIS,
 *   the skinny kernels, one BLIS call per batch entry), the path before;
 * - panel: lt_matmul with the panel kernel forced wherever it can run;
 * - dnnl: oneDNN's f32 matmul primitive, made once per row (batch dims as one
 *   3-d primitive, one call for the whole batch, oneDNN's threads);
 * - auto: lt_matmul as shipped (the rule in tensor/gemm.c). */
static const row small_rows[] = {
    {"ViT q·k^T [512,17,16]·[512,17,16]^T", 512, 17, 17, 16, false, true},
    {"ViT p·v [512,17,17]·[512,17,16]", 512, 17, 16, 17, false, false},
    {"ViT bwd dP = dO·V^T [512,17,16]·[512,17,16]^T", 512, 17, 17, 16, false, true},
    {"ViT bwd dV = P^T·dO [512,17,17]^T·[512,17,16]", 512, 17, 16, 17, true, false},
    {"ViT bwd dK = dS^T·Q [512,17,17]^T·[512,17,16]", 512, 17, 16, 17, true, false},
    {"ViT Linear [2176,64]·[64,64]^T", 0, 2176, 64, 64, false, true},
    {"ViT Linear [2176,64]·[128,64]^T", 0, 2176, 128, 64, false, true},
    {"ViT Linear [2176,64]·[192,64]^T", 0, 2176, 192, 64, false, true},
    {"ViT Linear [2176,128]·[64,128]^T", 0, 2176, 64, 128, false, true},
    {"ViT Linear bwd dX [2176,64]·[64,64]", 0, 2176, 64, 64, false, false},
    {"ViT Linear bwd dX [2176,128]·[128,64]", 0, 2176, 64, 128, false, false},
    {"ViT Linear bwd dX [2176,192]·[192,64]", 0, 2176, 64, 192, false, false},
    {"ViT Linear bwd dW [2176,64]^T·[2176,64]", 0, 64, 64, 2176, true, false},
    {"ViT Linear bwd dW [2176,128]^T·[2176,64]", 0, 128, 64, 2176, true, false},
    {"ViT Linear bwd dW [2176,192]^T·[2176,64]", 0, 192, 64, 2176, true, false},
    {"CNN conv1 im2col [100352,9]·[9,16]", 0, 100352, 16, 9, false, false},
    {"CNN conv2 im2col [25088,144]·[144,32]", 0, 25088, 32, 144, false, false},
    {"CNN conv2 bwd dcol [25088,32]·[144,32]^T", 0, 25088, 144, 32, false, true},
    {"CNN conv2 bwd dW [25088,144]^T·[25088,32]", 0, 144, 32, 25088, true, false},
    {"CNN FC [128,1568]·[128,1568]^T", 0, 128, 128, 1568, false, true},
    {"CNN FC bwd dX [128,128]·[128,1568]", 0, 128, 1568, 128, false, false},
    {"Transformer q·k^T [64,128,64]·[64,128,64]^T", 64, 128, 128, 64, false, true},
    {"Transformer p·v [64,128,128]·[64,128,64]", 64, 128, 64, 128, false, false},
    {"Transformer Linear [4096,512]·[2048,512]^T", 0, 4096, 2048, 512, false, true},
    {"Transformer Linear [4096,512]·[512,512]^T", 0, 4096, 512, 512, false, true},
    {"Transformer bwd dW [4096,512]^T·[4096,512]", 0, 512, 512, 4096, true, false},
};

/* A oneDNN f32 matmul primitive for a row, with the operands' own strides. */
typedef struct {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  dnnl_memory_t mem[3];
  void *scratch;
} dnnl_row;

static void dnnl_make(const row *r, const operands *o, dnnl_row *d) {
  const int nd = r->nb ? 3 : 2;
  const int64_t nb = r->nb ? r->nb : 1;
  dnnl_memory_desc_t md[3];
  dnnl_dims_t da = {nb, r->m, r->k}, db = {nb, r->k, r->n}, dc = {nb, r->m, r->n};
  dnnl_dims_t sa = {o->bsa, o->rsa, o->csa}, sb = {o->bsb, o->rsb, o->csb}, sc = {r->m * r->n, r->n, 1};
  const int off = r->nb ? 0 : 1;
  memset(d, 0, sizeof *d);
  if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) || dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags) ||
      dnnl_memory_desc_init_by_strides(&md[0], nd, da + off, dnnl_f32, sa + off) ||
      dnnl_memory_desc_init_by_strides(&md[1], nd, db + off, dnnl_f32, sb + off) ||
      dnnl_memory_desc_init_by_strides(&md[2], nd, dc + off, dnnl_f32, sc + off)) {
    fprintf(stderr, "bench_gemm: oneDNN setup failed\n");
    exit(1);
  }
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd;
  if (dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) ||
      dnnl_primitive_desc_create(&pd, &desc, NULL, d->eng, NULL) || dnnl_primitive_create(&d->prim, pd)) {
    fprintf(stderr, "bench_gemm: oneDNN f32 matmul primitive failed\n");
    exit(1);
  }
  dnnl_primitive_desc_destroy(pd);
  void *h[3] = {o->a->data, o->b->data, o->c};
  for (int i = 0; i < 3; i++)
    if (dnnl_memory_create(&d->mem[i], &md[i], d->eng, h[i])) {
      fprintf(stderr, "bench_gemm: oneDNN memory failed\n");
      exit(1);
    }
}

static void dnnl_run(const dnnl_row *d) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, d->mem[0]}, {DNNL_ARG_WEIGHTS, d->mem[1]}, {DNNL_ARG_DST, d->mem[2]}};
  if (dnnl_primitive_execute(d->prim, d->stream, 3, args) || dnnl_stream_wait(d->stream)) {
    fprintf(stderr, "bench_gemm: oneDNN execute failed\n");
    exit(1);
  }
}

static void dnnl_unmake(dnnl_row *d) {
  for (int i = 0; i < 3; i++) dnnl_memory_destroy(d->mem[i]);
  dnnl_primitive_destroy(d->prim);
  dnnl_stream_destroy(d->stream);
  dnnl_engine_destroy(d->eng);
}

/* engines, in the table's column order: blis, panel, dnnl, auto */
#define N_ENG 4

static void run_eng(const operands *o, const dnnl_row *d, int e) {
  if (e == 2) {
    dnnl_run(d);
    return;
  }
  /* blis: BLIS and the skinny kernels (gemm=skinny); panel: the panel kernel
   * wherever it runs (gemm=small); auto: the rule */
  const lt__path want = e == 0 ? LT__PATH_gemm_skinny : e == 1 ? LT__PATH_gemm_small : LT__PATH_AUTO;
  const lt__path prev =
      lt__path_force(LT__PATH_FAMILY_gemm, want == LT__PATH_AUTO || lt__path_supported(want) ? want : LT__PATH_AUTO);
  run_lt(o);
  lt__path_force(LT__PATH_FAMILY_gemm, prev);
}

static void small_table(bool quick) {
  printf("\n### Small and batched f32 products, %d thread%s, GFLOP/s by engine\n\n", lt_get_num_threads(),
         lt_get_num_threads() > 1 ? "s" : "");
  printf("| shape | blis (before) | panel | oneDNN | auto (shipped) | auto/blis | max err auto |\n"
         "|---|---:|---:|---:|---:|---:|---:|\n");
  fflush(stdout);
  for (size_t i = 0; i < sizeof small_rows / sizeof *small_rows; i++) {
    const row *r = &small_rows[i];
    operands o;
    make(r, &o);
    dnnl_row d;
    dnnl_make(r, &o, &d);
    /* the shipped path against the reference on a few entries */
    lt_tensor *c = lt_matmul(o.a, o.b), *ref = NULL;
    double err = 0;
    if (!c) die("lt_matmul");
    const bool checked = r->m * r->n * r->k <= (int64_t)1 << 24;
    if (checked) {
      ref = lt__matmul_ref(o.a, o.b);
      if (!ref) die("lt__matmul_ref");
      const float *x = c->data, *y = ref->data;
      for (int64_t j = 0; j < c->numel; j++) {
        double e = x[j] > y[j] ? x[j] - y[j] : y[j] - x[j];
        if (e > err) err = e;
      }
    }
    lt_tensor_free(c);
    lt_tensor_free(ref);
    double t0 = lt_monotonic_seconds();
    for (int e = 0; e < N_ENG; e++) run_eng(&o, &d, e), run_eng(&o, &d, e); /* warm-up */
    double once = (lt_monotonic_seconds() - t0) / (2 * N_ENG);
    int reps = once > 0 ? (int)((quick ? 0.2 : 1.0) / (N_ENG * once)) : 50;
    if (reps < (quick ? 2 : 5)) reps = quick ? 2 : 5;
    if (reps > 300) reps = 300;
    double best[N_ENG];
    for (int e = 0; e < N_ENG; e++) best[e] = 1e30;
    for (int rep = 0; rep < reps; rep++)
      for (int j = 0; j < N_ENG; j++) {
        const int e = (rep + j) % N_ENG;
        double a = lt_monotonic_seconds();
        run_eng(&o, &d, e);
        double t = lt_monotonic_seconds() - a;
        if (t < best[e]) best[e] = t;
      }
    double fl = 2.0 * (double)((r->nb ? r->nb : 1) * r->m * r->n * r->k);
    printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f |", r->name, fl / best[0] * 1e-9, fl / best[1] * 1e-9,
           fl / best[2] * 1e-9, fl / best[3] * 1e-9, best[0] / best[3]);
    if (checked) printf(" %.1e |\n", err);
    else printf(" - |\n");
    fflush(stdout);
    dnnl_unmake(&d);
    unmake(&o);
  }
}

int main(int argc, char **argv) {
  bool quick = false, sweep = false, small = false;
  const char *dtype = "f32";
  const lt_bench_opt opts[] = {
      {"--quick", LT_BENCH_FLAG, &quick, 0, 0, NULL},
      {"--switch", LT_BENCH_FLAG, &sweep, 0, 0, NULL},
      {"--small", LT_BENCH_FLAG, &small, 0, 0, NULL},
      {"--dtype", LT_BENCH_STRING, &dtype, 0, 0, NULL},
  };
  const char *usage = "bench_gemm [--quick] [--switch] [--small] [--dtype f32|bf16] [threads ...]";
  char *pos[8];
  int nthreads = 8, threads[8];
  const int bad = lt_bench_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), usage, pos, &nthreads);
  if (bad) return bad;
  if (strcmp(dtype, "f32") && strcmp(dtype, "bf16")) return fprintf(stderr, "usage: %s\n", usage), 2;
  const bool bf16 = !strcmp(dtype, "bf16");
  for (int i = 0; i < nthreads; i++)
    if ((threads[i] = atoi(pos[i])) < 1) return fprintf(stderr, "usage: %s\n", usage), 2;
  if (!nthreads) {
    threads[0] = 1;
    threads[1] = 2;
    nthreads = 2;
  }
  if (lt_init() != LT_OK) die("lt_init"); /* chooses the kernel set before BLIS initialises */
  print_header();

  for (int ti = 0; ti < nthreads; ti++) {
    if (lt_set_num_threads(threads[ti]) != LT_OK) die("lt_set_num_threads");
    bli_thread_set_num_threads(threads[ti]); /* raw calls use BLIS's global setting */
    lt_bench_mark m0 = lt_bench_mark_now();
    if (small) {
      small_table(quick);
      print_others(m0);
      continue;
    }
    if (bf16) {
      lt_runtime_info info;
      if (lt_runtime_get_info(&info) != LT_OK) die("lt_runtime_get_info");
      printf("\n### bf16 vs f32, %d thread%s (bf16 products: %s)\n\n", threads[ti], threads[ti] > 1 ? "s" : "",
             info.bf16_gemm);
      printf("| shape (m x n x k) | f32 GFLOP/s | bf16 GFLOP/s | autocast GFLOP/s | bf16/f32 | autocast/f32 |\n"
             "|---|---:|---:|---:|---:|---:|\n");
      for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        const row *r = &rows[i];
        operands o;
        make(r, &o);
        make_bf16(r, &o);
        double best[3];
        time_ways(&o, quick, best);
        double fl = 2.0 * (double)((r->nb ? r->nb : 1) * r->m * r->n * r->k);
        printf("| %s | %.1f | %.1f | %.1f | %.2f | %.2f |\n", r->name, fl / best[0] * 1e-9, fl / best[1] * 1e-9,
               fl / best[2] * 1e-9, best[0] / best[1], best[0] / best[2]);
        fflush(stdout);
        unmake(&o);
      }
      print_others(m0);
      continue;
    }
    printf("\n### f32, %d thread%s\n\n", threads[ti], threads[ti] > 1 ? "s" : "");
    printf("| shape (m x n x k) | lt GFLOP/s | raw BLIS GFLOP/s | lt/raw |\n|---|---:|---:|---:|\n");
    fflush(stdout);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
      const row *r = &rows[i];
      operands o;
      make(r, &o);
      double t_raw, t_lt;
      time_row(r, &o, quick, &t_raw, &t_lt);
      double fl = 2.0 * (double)((r->nb ? r->nb : 1) * r->m * r->n * r->k);
      printf("| %s | %.1f | %.1f | %.3f |\n", r->name, fl / t_lt * 1e-9, fl / t_raw * 1e-9, t_raw / t_lt);
      fflush(stdout);
      unmake(&o);
    }
    print_others(m0);
    if (sweep && threads[ti] > 1) {
      lt_bench_mark m1 = lt_bench_mark_now();
      switch_sweep(quick);
      print_others(m1);
    }
  }
  return 0;
}
