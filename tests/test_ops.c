/*
 * tests/test_ops.c: the op runner. Every entry of tests/opinfo_<module>.inc
 * (format and checks in tests/opinfo.h) is checked for values against its
 * double reference over dtypes and layouts, for bit-identical results on 1
 * and 2 threads, for its error cases, and by f64 gradcheck; the hand-written
 * gradcheck cases of tests/gradcases_<module>.inc run with their op's entry.
 * The coverage test fails when an op of the autograd op table has no entry
 * or no gradient check, or when a gradcheck case names an op without one.
 *
 * The paths technique checks the values again with each alternative
 * implementation the CPU runs forced in turn (tensor/paths.def: BLIS or the
 * small kernels, oneDNN or widened bf16, fused or unfused attention, oneDNN
 * or im2col convolution, each Philox version), for the entries each can
 * reach.
 *
 * Each (entry, technique) is one Check test named by the entry, and prints
 * how many cases it ran. It is not where special values, promotion or
 * in-place forms are tested (the per-module files).
 */
#include "opinfo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/internal.h"
#include "tensor/matmul_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/storage_internal.h"
#include "util_layout.h"

/* ---- the reference helper shared by the entries -------------------------- */

lt_tensor *oi_ref_broadcast(const opinfo *e, const oi_sample *s, int n, lt_tensor *const *in,
                            oi_scalar_fn f) {
  int nd = 0;
  for (int k = 0; k < n; k++) nd = in[k]->ndim > nd ? in[k]->ndim : nd;
  int64_t shape[LT_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    shape[i] = 1;
    for (int k = 0; k < n; k++) {
      int ik = i - (nd - in[k]->ndim);
      if (ik >= 0 && in[k]->shape[ik] != 1) shape[i] = in[k]->shape[ik];
    }
  }
  int64_t total = 1;
  for (int i = 0; i < nd; i++) total *= shape[i];
  double *ov = malloc(sizeof(double) * (size_t)(total ? total : 1));
  ck_assert(ov);
  for (int64_t f0 = 0; f0 < total; f0++) {
    double x[OI_MAX_IN];
    for (int k = 0; k < n; k++) {
      int64_t rem = f0, off = 0, mul = 1;
      for (int i = nd - 1; i >= 0; i--) {
        int64_t idx = rem % shape[i];
        rem /= shape[i];
        int ik = i - (nd - in[k]->ndim);
        if (ik < 0) continue;
        off += (in[k]->shape[ik] == 1 ? 0 : idx) * mul;
        mul *= in[k]->shape[ik];
      }
      x[k] = ((const double *)in[k]->data)[off];
    }
    ov[f0] = f(e, s->arg, x);
  }
  lt_tensor *r = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, nd, shape, ov));
  free(ov);
  return r;
}

/* ---- the entries ----------------------------------------------------------- */

/* x[0]: the reference of ops that only move values (expand). */
static double oi_first(const opinfo *e, const double *arg, const double *x) { return x[0]; }

#include "opinfo_elementwise.inc"
#include "opinfo_reduce.inc"
#include "opinfo_view.inc"
#include "opinfo_matmul.inc"
#include "opinfo_conv.inc"
#include "opinfo_index.inc"
#include "opinfo_nn.inc"
#include "opinfo_loss.inc"
#include "opinfo_order.inc"
#include "opinfo_custom.inc"
#include "opinfo_attention.inc"

#include "gradcases_view.inc"
#include "gradcases_matmul.inc"
#include "gradcases_index.inc"
#include "gradcases_nn.inc"
#include "gradcases_attention.inc"

static const struct {
  const opinfo *v;
  int n;
} tables[] = {
#define OI_TABLE(t) {t, (int)(sizeof t / sizeof t[0])},
    OI_TABLE(opinfo_elementwise) OI_TABLE(opinfo_reduce) OI_TABLE(opinfo_view) OI_TABLE(opinfo_matmul)
    OI_TABLE(opinfo_conv) OI_TABLE(opinfo_index) OI_TABLE(opinfo_nn) OI_TABLE(opinfo_loss) OI_TABLE(opinfo_order) OI_TABLE(opinfo_custom) OI_TABLE(opinfo_attention)
#undef OI_TABLE
};

/* Hand-written gradcheck cases (tests/gradcases_<module>.inc). */
typedef struct gradcase {
  const char *op;
  lt_status (*fn)(lt_generator *g);
  const char *label;
} gradcase;
#define GRADCASE_ENTRY(op, fn) {op, fn, #fn},
static const gradcase gradcases[] = {
    GRADCASES_VIEW(GRADCASE_ENTRY) GRADCASES_MATMUL(GRADCASE_ENTRY)
    GRADCASES_INDEX(GRADCASE_ENTRY) GRADCASES_NN(GRADCASE_ENTRY) GRADCASES_ATTENTION(GRADCASE_ENTRY)
    {NULL, NULL, NULL}};
#undef GRADCASE_ENTRY
#define NGRADCASES ((int)(sizeof gradcases / sizeof gradcases[0]) - 1)

enum { OI_MAX_ENTRIES = 512 };
static const opinfo *entries[OI_MAX_ENTRIES];
static int nentries;

static void collect_entries(void) {
  nentries = 0;
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (int i = 0; i < tables[t].n; i++) {
      if (nentries == OI_MAX_ENTRIES) {
        fprintf(stderr, "test_ops: more than %d entries\n", OI_MAX_ENTRIES);
        exit(EXIT_FAILURE);
      }
      entries[nentries++] = &tables[t].v[i];
    }
}

/* ---- inputs ---------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }
int oi_rand_int(uint64_t *seed, int n) { return (int)(splitmix(seed) % (uint64_t)n); }
double oi_rand_unif(uint64_t *seed) { return unif(seed); }

/* The seed of input k of sample si of entry e: the same for every dtype and
 * layout, so that they see the same values. */
static uint64_t seed_of(const opinfo *e, int si, int k) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = e->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h ^ ((uint64_t)si << 32) ^ ((uint64_t)k << 48);
}

static bool is_data(int domain) { return domain < OI_BOOL; }

static int fixed_samples(const opinfo *e) {
  int n = 0;
  while (e->samples && e->samples[n].label) n++;
  return n;
}
/* Sanitized builds (LT_OPS_QUICK, defined by tests/CMakeLists.txt with
 * LT_SANITIZE) draw one in OI_QUICK_DIV of each entry's random samples (the
 * first ones: the same inputs as in the full run), check values with all
 * inputs in one layout (not each input alone), samples above OI_HEAVY_NUMEL
 * contiguous and transposed only, and their threads contiguous only,
 * gradchecks of the samples contiguous and transposed only, so
 * that no test_ops ctest entry runs for minutes under ASan. Every fixed
 * sample, dtype, layout, error case and hand-written gradcheck still runs. */
#ifdef LT_OPS_QUICK
enum { OI_QUICK_DIV = 8 };
static const bool oi_quick = true;
#else
enum { OI_QUICK_DIV = 1 };
static const bool oi_quick = false;
#endif
static int total_samples(const opinfo *e) {
  return fixed_samples(e) + (e->random ? (e->nrandom + OI_QUICK_DIV - 1) / OI_QUICK_DIV : 0);
}

/* Sample si of e: a fixed one, or random sample si - fixed made in *buf. */
static const oi_sample *sample_at(const opinfo *e, int si, oi_sample *buf) {
  const int nf = fixed_samples(e);
  if (si < nf) return &e->samples[si];
  memset(buf, 0, sizeof *buf);
  uint64_t seed = seed_of(e, si, OI_MAX_IN + 1);
  e->random(e, &seed, buf);
  if (!buf->label) buf->label = "random";
  return buf;
}

/* One value of input in's domain: a float, or (ints) an integer. */
static double draw(const oi_input *in, bool integer, uint64_t *s) {
  const int domain = in->domain;
  double u = unif(s), sign = unif(s) < 0.5 ? -1 : 1;
  if (domain == OI_INDEX || domain == OI_INDEX32)
    return (double)in->range[0] + floor(u * (double)(in->range[1] - in->range[0]));
  if (integer) {
    switch (domain) {
      case OI_POS: case OI_WIDE_POS: return 1 + floor(5 * u);
      case OI_LOG1P: return floor(6 * u);
      case OI_TIES: return floor(-3 + 6 * u);
      default: return floor(-5 + 11 * u);
    }
  }
  switch (domain) {
    case OI_ANY: return -2 + 4 * u;
    case OI_SIGNED: return sign * (0.2 + 1.8 * u);
    case OI_SMALL: return sign * (0.1 + 0.7 * u);
    case OI_POS: return 0.3 + 1.7 * u;
    case OI_WIDE: return -6 + 12 * u;
    case OI_WIDE_POS: return 0.01 + 5.99 * u;
    case OI_LOG1P: return -0.99 + 6.99 * u;
    case OI_TIES: return floor(-3 + 6 * u);
    case OI_BOOL: return u < 0.5;
    default: ck_abort_msg("unknown domain %d", domain);
  }
  return 0;
}

/* A new contiguous input: dtype dt (bool for OI_BOOL, i64/i32 for indices),
 * values of its domain. */
static lt_tensor *make_input(const oi_input *in, lt_dtype dt, uint64_t seed) {
  lt_dtype t = in->domain == OI_BOOL ? LT_DTYPE_BOOL
               : in->domain == OI_INDEX ? LT_DTYPE_I64
               : in->domain == OI_INDEX32 ? LT_DTYPE_I32
                                          : dt;
  int64_t n = 1;
  for (int i = 0; i < in->ndim; i++) n *= in->shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(v);
  for (int64_t i = 0; i < n; i++) v[i] = draw(in, !lt_dtype_is_floating(t), &seed);
  lt_tensor *x = lt_test_from_f64(t, in->ndim, in->shape, v);
  free(v);
  return x;
}

/* The inputs of sample si in dtype dt, input k in layout lay[k]. Returns false
 * (nothing made) when lay is not all-contiguous but every input came out
 * contiguous: the contiguous variant already covers it. */
static bool make_inputs(const opinfo *e, int si, const oi_sample *s, lt_dtype dt, const lt_test_layout *lay,
                        lt_tensor **in) {
  bool want_strided = false, strided = false;
  for (int k = 0; k < s->nin; k++) {
    in[k] = lt_test_layout_of(make_input(&s->in[k], dt, seed_of(e, si, k)), lay[k]);
    want_strided |= lay[k] != LT_TEST_CONTIGUOUS;
    strided |= !lt_is_contiguous(in[k]);
  }
  if (want_strided && !strided) {
    for (int k = 0; k < s->nin; k++) lt_tensor_free(in[k]);
    return false;
  }
  return true;
}

static void free_inputs(int n, lt_tensor **in) {
  for (int k = 0; k < n; k++) {
    lt_tensor_free(in[k]);
    in[k] = NULL;
  }
}

/* Layout variants of a sample: all contiguous; then per non-contiguous layout
 * all inputs in it and (several inputs) each input alone in it. */
enum { OI_MAX_VARIANTS = 1 + (LT_TEST_LAYOUT_COUNT - 1) * (1 + OI_MAX_IN) };
static int layout_variants(int nin, lt_test_layout out[][OI_MAX_IN]) {
  int nv = 0;
  for (int k = 0; k < OI_MAX_IN; k++) out[nv][k] = LT_TEST_CONTIGUOUS;
  nv++;
  for (int l = 1; l < LT_TEST_LAYOUT_COUNT; l++) {
    for (int k = 0; k < OI_MAX_IN; k++) out[nv][k] = (lt_test_layout)l;
    nv++;
    for (int only = 0; nin > 1 && only < nin; only++, nv++)
      for (int k = 0; k < OI_MAX_IN; k++) out[nv][k] = k == only ? (lt_test_layout)l : LT_TEST_CONTIGUOUS;
  }
  return nv;
}

/* The path the paths technique forces while it checks values (else AUTO). */
static lt__path forced_path = LT__PATH_AUTO;

static void describe(char *buf, size_t size, const opinfo *e, int si, const oi_sample *s, lt_dtype dt,
                     const lt_test_layout *lay) {
  int pos = snprintf(buf, size, "%s sample %s", e->name, s->label);
  if (forced_path != LT__PATH_AUTO)
    pos += snprintf(buf + pos, size - (size_t)pos, " [path %s=%s]",
                    lt__path_family_name(lt__path_family_of(forced_path)), lt__path_name(forced_path));
  if (si >= fixed_samples(e)) pos += snprintf(buf + pos, size - (size_t)pos, " %d", si - fixed_samples(e));
  pos += snprintf(buf + pos, size - (size_t)pos, " %s", lt_dtype_name(dt));
  int nargs = OI_MAX_ARG;
  while (nargs > 0 && s->arg[nargs - 1] == 0) nargs--;
  for (int a = 0; a < nargs; a++) pos += snprintf(buf + pos, size - (size_t)pos, "%s%g", a ? "," : " args ", s->arg[a]);
  for (int k = 0; k < s->nin && pos > 0 && (size_t)pos < size; k++) {
    char sh[96];
    pos += snprintf(buf + pos, size - (size_t)pos, "%s in%d %s %s", k ? "," : ":", k,
                    lt_shape_str(s->in[k].ndim, s->in[k].shape, sh, sizeof sh), lt_test_layout_name(lay[k]));
  }
}

/* ---- values ---------------------------------------------------------------- */

static int64_t sample_numel(const oi_sample *s) {
  int64_t total = 0;
  for (int k = 0; k < s->nin; k++) {
    int64_t n = 1;
    for (int i = 0; i < s->in[k].ndim; i++) n *= s->in[k].shape[i];
    total += n;
  }
  return total;
}

static bool all_same(const lt_test_layout *lay, int n) {
  for (int k = 1; k < n; k++)
    if (lay[k] != lay[0]) return false;
  return true;
}

/* paths: the fixed samples only, all inputs contiguous or all transposed
 * (the paths technique runs this once per path). */
static int check_values(const opinfo *e, bool paths) {
  int runs = 0;
  lt_test_layout lays[OI_MAX_VARIANTS][OI_MAX_IN];
  for (int si = 0; si < (paths ? fixed_samples(e) : total_samples(e)); si++) {
    oi_sample buf;
    const oi_sample *s = sample_at(e, si, &buf);
    const int nv = layout_variants(s->nin, lays);
    const bool heavy = sample_numel(s) > OI_HEAVY_NUMEL;
    for (int dt = 0; dt < LT_DTYPE_COUNT; dt++) {
      if (!(e->dtypes & (1u << dt))) continue;
      const double *tol = s->tol[dt == LT_DTYPE_F64];
      if (tol[0] == 0 && tol[1] == 0) tol = e->tol[dt == LT_DTYPE_F64];
      static const double deflt[2][2] = OI_TOL_DEFAULT;
      if (tol[0] == 0 && tol[1] == 0) tol = deflt[dt == LT_DTYPE_F64];
      double tol_bf16[2] = OI_TOL_BF16;
      if (dt == LT_DTYPE_BF16) {
        tol_bf16[0] = fmax(tol_bf16[0], tol[0]);
        tol_bf16[1] = fmax(tol_bf16[1], tol[1]);
        tol = tol_bf16;
      }
      const bool exact = !lt_dtype_is_floating((lt_dtype)dt);
      for (int v = 0; v < nv; v++) {
        /* big samples (there for the threaded paths): each layout once for
         * all inputs, and integers contiguous only */
        if (heavy && v > 0 && (exact || !all_same(lays[v], s->nin))) continue;
        /* quick (sanitized) runs: all inputs in one layout; heavy samples
         * contiguous and transposed only */
        if (oi_quick && v > 0 && (!all_same(lays[v], s->nin) || (heavy && lays[v][0] != LT_TEST_TRANSPOSED)))
          continue;
        if (paths && v > 0 && (!all_same(lays[v], s->nin) || lays[v][0] != LT_TEST_TRANSPOSED)) continue;
        lt_tensor *in[OI_MAX_IN] = {0}, *in64[OI_MAX_IN] = {0};
        if (!make_inputs(e, si, s, (lt_dtype)dt, lays[v], in)) continue;
        char what[512];
        describe(what, sizeof what, e, si, s, (lt_dtype)dt, lays[v]);
        for (int k = 0; k < s->nin; k++) {
          lt_tensor *c = LT_NN(lt_to_dtype(in[k], LT_DTYPE_F64));
          in64[k] = LT_NN(lt_contiguous(c));
          lt_tensor_free(c);
        }
        lt_clear_error();
        lt_tensor *out = e->call(e, s->arg, in);
        ck_assert_msg(out, "%s: failed: %s: %s", what, lt_status_name(lt_last_status()), lt_last_error());
        for (int k = 0; k < s->nin; k++) /* the op left its inputs unchanged */
          lt_test_assert_close(in[k], in64[k], 0, 0, what, "its input before the call", __FILE__, __LINE__);
        lt_dtype want = e->out == OI_OUT_ARG0 ? (lt_dtype)s->arg[0]
                        : e->out == OI_OUT_BOOL ? LT_DTYPE_BOOL
                        : e->out == OI_OUT_I64 || (e->out == OI_OUT_SUM && exact) ? LT_DTYPE_I64
                                                                                    : (lt_dtype)dt;
        ck_assert_msg(out->dtype == want, "%s: result is %s, expected %s", what, lt_dtype_name(out->dtype),
                      lt_dtype_name(want));
        lt_tensor *ref = e->ref(e, s, in64);
        lt_test_assert_close(out, ref, exact ? 0 : tol[0], exact ? 0 : tol[1], what, "the reference",
                             __FILE__, __LINE__);
        LT_FREE_ALL(ref);
        if (v > 0 && !e->layout_inexact) {
          /* the same bits as on contiguous copies of the same values */
          lt_tensor *cin[OI_MAX_IN] = {0};
          for (int k = 0; k < s->nin; k++) cin[k] = LT_NN(lt_contiguous(in[k]));
          lt_tensor *cout = LT_NN(e->call(e, s->arg, cin));
          lt_test_assert_same_bits(out, cout, what, "the result on contiguous copies", __FILE__, __LINE__);
          lt_tensor_free(cout);
          free_inputs(s->nin, cin);
        }
        lt_tensor_free(out);
        free_inputs(s->nin, in);
        free_inputs(s->nin, in64);
        runs++;
      }
    }
  }
  return runs;
}

/* ---- threads --------------------------------------------------------------- */

typedef struct thread_ctx {
  const opinfo *e;
  int si;
  const oi_sample *s;
  lt_dtype dt;
  const lt_test_layout *lay;
} thread_ctx;

/* The op's output and, for entries with a gradient on float dtypes, the
 * inputs' gradients for a fixed random output gradient. */
static int thread_run(void *u, lt_tensor **out, int cap) {
  const thread_ctx *c = u;
  const oi_sample *s = c->s;
  lt_tensor *in[OI_MAX_IN] = {0};
  ck_assert(make_inputs(c->e, c->si, s, c->dt, c->lay, in));
  const bool grad = c->e->grad && lt_dtype_is_floating(c->dt);
  for (int k = 0; grad && k < s->nin; k++)
    if (is_data(s->in[k].domain)) LT_OK_OR_FAIL(lt_requires_grad_(in[k], true));
  lt_tensor *y = LT_NN(c->e->call(c->e, s->arg, in));
  int n = 0;
  if (grad) {
    oi_input gi = {.ndim = y->ndim, .domain = OI_ANY};
    memcpy(gi.shape, y->shape, sizeof(int64_t) * (size_t)y->ndim);
    lt_tensor *gout = make_input(&gi, y->dtype, seed_of(c->e, c->si, OI_MAX_IN));
    LT_OK_OR_FAIL(lt_backward(y, gout, false));
    lt_tensor_free(gout);
    for (int k = 0; k < s->nin && n < cap - 1; k++)
      if (is_data(s->in[k].domain)) out[n++] = LT_NN(lt_detach(LT_NN(in[k]->grad)));
  }
  out[n++] = LT_NN(lt_detach(y));
  lt_tensor_free(y);
  free_inputs(s->nin, in);
  return n;
}

static int check_threads(const opinfo *e) {
  int runs = 0;
  /* the fixed samples: the random ones are too small for the threaded paths */
  for (int si = 0; si < fixed_samples(e); si++) {
    oi_sample buf;
    const oi_sample *s = sample_at(e, si, &buf);
    lt_test_layout lays[2][OI_MAX_IN];
    for (int k = 0; k < OI_MAX_IN; k++) lays[0][k] = LT_TEST_CONTIGUOUS, lays[1][k] = LT_TEST_TRANSPOSED;
    for (int dt = 0; dt < LT_DTYPE_COUNT; dt++) {
      if (!(e->dtypes & (1u << dt))) continue;
      for (int v = 0; v < (oi_quick && sample_numel(s) > OI_HEAVY_NUMEL ? 1 : 2); v++) {
        lt_tensor *probe[OI_MAX_IN] = {0};
        if (!make_inputs(e, si, s, (lt_dtype)dt, lays[v], probe)) continue;
        free_inputs(s->nin, probe);
        char what[512];
        describe(what, sizeof what, e, si, s, (lt_dtype)dt, lays[v]);
        thread_ctx c = {e, si, s, (lt_dtype)dt, lays[v]};
        lt_test_same_on_threads(thread_run, &c, what);
        runs++;
      }
    }
  }
  return runs;
}

/* ---- paths ----------------------------------------------------------------- */

/* Whether a path of family pf can change what an op of the opinfo family
 * fam computes: the products run in matmul, Linear (nn), conv2d and
 * attention; attention's fused/unfused choice in attention; conv2d's
 * oneDNN/im2col choice and max pooling's kernel in conv; the Philox draws in dropout (nn). The
 * attention_bf16 paths work under autocast only (tests/test_attention.c
 * forces each), and no entry uses a quantized product (qdot:
 * tests/test_quant.c forces each). */
static bool path_reaches(lt__path_family pf, const char *fam) {
  const bool products = !strcmp(fam, "matmul") || !strcmp(fam, "nn") || !strcmp(fam, "conv") ||
                        !strcmp(fam, "attention");
  switch (pf) {
    case LT__PATH_FAMILY_gemm:
    case LT__PATH_FAMILY_gemm_threads:
    case LT__PATH_FAMILY_gemm_bf16: return products;
    case LT__PATH_FAMILY_attention: return !strcmp(fam, "attention");
    case LT__PATH_FAMILY_conv:
    case LT__PATH_FAMILY_pool: return !strcmp(fam, "conv");
    case LT__PATH_FAMILY_philox: return !strcmp(fam, "nn");
    default: return false;
  }
}

/* Every path this CPU runs that can change the entry's results, forced in
 * turn through the path table (as its switch would), each checked for
 * values on the fixed samples, contiguous and transposed. */
static int check_paths(const opinfo *e) {
  int runs = 0;
  for (int i = 0; i < LT__PATH_COUNT; i++) {
    const lt__path p = (lt__path)i;
    const lt__path_family pf = lt__path_family_of(p);
    if (!path_reaches(pf, e->family) || !lt__path_supported(p)) continue;
    const lt__path prev = lt__path_force(pf, p);
    forced_path = p;
    runs += check_values(e, true);
    forced_path = LT__PATH_AUTO;
    lt__path_force(pf, prev);
  }
  return runs;
}

/* ---- errors ---------------------------------------------------------------- */

static int check_errors(const opinfo *e) {
  int runs = 0;
  for (int i = 0; e->errors && e->errors[i].label; i++) {
    const oi_error *c = &e->errors[i];
    lt_tensor *in[OI_MAX_IN] = {0}, *before[OI_MAX_IN] = {0};
    for (int k = 0; k < c->nin; k++) {
      in[k] = make_input(&c->in[k], c->dtype[k], seed_of(e, 1000 + i, k));
      before[k] = LT_NN(lt_clone(in[k]));
    }
    char what[256];
    snprintf(what, sizeof what, "%s error case %s", e->name, c->label);
    lt_clear_error();
    lt_test_expect_null_err(e->call(e, c->arg, in), c->status, c->fragment, what, __FILE__, __LINE__);
    /* a failed call changes nothing */
    for (int k = 0; k < c->nin; k++) lt_test_assert_same_bits(in[k], before[k], what, "its input before", __FILE__, __LINE__);
    free_inputs(c->nin, in);
    free_inputs(c->nin, before);
    runs++;
  }
  /* NULL in place of each input of the first sample */
  const oi_sample *s = &e->samples[0];
  for (int null = 0; null < s->nin; null++) {
    lt_tensor *in[OI_MAX_IN] = {0};
    for (int k = 0; k < s->nin; k++)
      in[k] = k == null ? NULL : make_input(&s->in[k], LT_DTYPE_F32, seed_of(e, 0, k));
    char what[256], fragment[128];
    snprintf(what, sizeof what, "%s with input %d NULL", e->name, null);
    snprintf(fragment, sizeof fragment, "%s: argument ", e->op ? e->op : e->name);
    lt_clear_error();
    lt_test_expect_null_err(e->call(e, s->arg, in), LT_ERR_NULL, fragment, what, __FILE__, __LINE__);
    free_inputs(s->nin, in);
    runs++;
  }
  return runs;
}

/* ---- gradients ------------------------------------------------------------- */

typedef struct grad_ctx {
  const opinfo *e;
  const oi_sample *s;
  lt_tensor **in; /* all inputs; the differentiable ones are replaced by gradcheck's */
} grad_ctx;

static lt_tensor *grad_fn(int n, lt_tensor *const *leaves, void *u) {
  const grad_ctx *c = u;
  lt_tensor *in[OI_MAX_IN] = {0};
  for (int k = 0, j = 0; k < c->s->nin; k++) in[k] = is_data(c->s->in[k].domain) && j < n ? leaves[j++] : c->in[k];
  return c->e->call(c->e, c->s->arg, in);
}

static bool gradable(const oi_sample *s) { return !s->no_grad && sample_numel(s) <= OI_GRAD_MAX_NUMEL; }

static int check_grad(const opinfo *e, lt_generator *g) {
  int runs = 0;
  for (int si = 0; e->grad && e->call && si < total_samples(e); si++) {
    oi_sample buf;
    const oi_sample *s = sample_at(e, si, &buf);
    if (!gradable(s)) continue;
    /* expanded leaves alias their elements: central differences do not apply */
    for (int l = LT_TEST_CONTIGUOUS; l < (oi_quick ? LT_TEST_SLICED : LT_TEST_EXPANDED); l++) {
      lt_test_layout lay[OI_MAX_IN] = {(lt_test_layout)l, (lt_test_layout)l, (lt_test_layout)l, (lt_test_layout)l};
      lt_tensor *in[OI_MAX_IN] = {0}, *leaves[OI_MAX_IN] = {0};
      if (!make_inputs(e, si, s, LT_DTYPE_F64, lay, in)) continue;
      int n = 0;
      for (int k = 0; k < s->nin; k++)
        if (is_data(s->in[k].domain)) {
          LT_OK_OR_FAIL(lt_requires_grad_(in[k], true));
          leaves[n++] = in[k];
        }
      char what[512];
      describe(what, sizeof what, e, si, s, LT_DTYPE_F64, lay);
      grad_ctx c = {e, s, in};
      lt_clear_error();
      lt_status st = lt_gradcheck(grad_fn, &c, n, leaves, NULL);
      ck_assert_msg(st == LT_OK, "gradcheck of %s: %s: %s", what, lt_status_name(st), lt_last_error());
      ck_assert_msg(lt_grad_enabled(), "gradcheck of %s left grad mode off", what);
      free_inputs(s->nin, in);
      runs++;
    }
  }
  for (int i = 0; i < NGRADCASES; i++) {
    if (strcmp(gradcases[i].op, e->name) != 0) continue;
    lt_clear_error();
    lt_status st = gradcases[i].fn(g);
    ck_assert_msg(st == LT_OK, "gradcheck case %s (op '%s') returned %s: %s", gradcases[i].label, e->name,
                  lt_status_name(st), lt_last_error());
    ck_assert_msg(lt_grad_enabled(), "gradcheck case %s left grad mode off", gradcases[i].label);
    runs++;
  }
  return runs;
}

/* ---- the Check tests ------------------------------------------------------- */

enum { T_VALUES, T_THREADS, T_ERRORS, T_GRAD, T_PATHS, T_COUNT };
static const char *const technique[T_COUNT] = {"values", "threads", "errors", "grad", "paths"};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Checks entry i with technique t; prints the cases run and the seconds taken
 * (the profile of the runner: which entries dominate). */
static void check_entry(int i, int t) {
  const opinfo *e = entries[i];
  const double t0 = now_s();
  lt_generator *g = lt_generator_new(0x5eed0000u + (uint64_t)(i * T_COUNT + t));
  ck_assert(g);
  const int64_t live = lt__live_tensors();
  int runs = 0;
  switch (t) {
    case T_VALUES: runs = check_values(e, false); break;
    case T_PATHS: runs = check_paths(e); break;
    case T_THREADS: runs = check_threads(e); break;
    case T_ERRORS: runs = check_errors(e); break;
    default: runs = check_grad(e, g); break;
  }
  lt_generator_free(g);
  ck_assert_msg(lt__live_tensors() == live, "%s %s leaks %lld tensors", e->name, technique[t],
                (long long)(lt__live_tensors() - live));
  ck_assert_msg(runs > 0 || t == T_GRAD || t == T_PATHS, "%s %s: no case ran", e->name, technique[t]);
  printf("opinfo %s %s %s: %d cases, %.2f s\n", e->family, e->name, technique[t], runs, now_s() - t0);
  fflush(stdout);
}

/* The Check test cases: "coverage", and "<technique>_<family>" for values,
 * threads, errors and grad of the entries of one family, so that ctest runs
 * them as separate tests, side by side with -j (tests/CMakeLists.txt selects
 * each with CK_RUN_CASE; LT_OPS_FAMILIES lists the families it registers). One
 * Check loop test per entry: _i indexes by_family, the entries with a call
 * ordered by family, and a family's test case loops over its range. */
#ifndef LT_OPS_FAMILIES
#error "LT_OPS_FAMILIES (the families tests/CMakeLists.txt registers, space-separated) must be defined by the build"
#endif
static int by_family[1024];
/* LT_OPS_PART=k/n (1 <= k <= n; tests/CMakeLists.txt sets it): this process
 * checks the entries _i with _i % n == k - 1 of each test case only, so that
 * a long case runs as n ctest tests side by side. Unset: every entry. */
static int part_k, part_n = 1;
static bool in_part(int i) { return i % part_n == part_k; }
START_TEST(test_values) {
  if (in_part(_i)) check_entry(by_family[_i], T_VALUES);
}
END_TEST
START_TEST(test_threads) {
  if (in_part(_i)) check_entry(by_family[_i], T_THREADS);
}
END_TEST
START_TEST(test_errors) {
  if (in_part(_i)) check_entry(by_family[_i], T_ERRORS);
}
END_TEST
START_TEST(test_grad) {
  if (in_part(_i)) check_entry(by_family[_i], T_GRAD);
}
END_TEST
START_TEST(test_paths) {
  if (in_part(_i)) check_entry(by_family[_i], T_PATHS);
}
END_TEST

/* Is family one of LT_OPS_FAMILIES? */
static bool family_registered(const char *family) {
  const char *list = LT_OPS_FAMILIES;
  size_t n = strlen(family);
  for (const char *p = list; (p = strstr(p, family)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  return false;
}

static const opinfo *find_entry(const char *name) {
  for (int i = 0; i < nentries; i++)
    if (strcmp(entries[i]->name, name) == 0) return entries[i];
  return NULL;
}

static int gradcases_for(const char *op) {
  int k = 0;
  for (int i = 0; i < NGRADCASES; i++) k += strcmp(gradcases[i].op, op) == 0;
  return k;
}

static int gradable_samples(const opinfo *e) {
  int k = 0;
  for (int i = 0; e->grad && e->samples && i < total_samples(e); i++) {
    oi_sample buf;
    k += gradable(sample_at(e, i, &buf));
  }
  return k;
}

/* Appends ", text" (or "text") to buf. */
static void append(char *buf, size_t size, const char *text) {
  size_t len = strlen(buf);
  if (len + 1 < size) snprintf(buf + len, size - len, "%s%s", len ? ", " : "", text);
}

START_TEST(test_coverage) {
  char unregistered[512] = "", missing[4096] = "", nograd[4096] = "", few[4096] = "", unknown[4096] = "", dup[4096] = "", bad[4096] = "";
  int nbw = 0;
  for (int op = 0; op < LT__OP_COUNT; op++) {
    const lt__op_def *d = &lt__ops[op];
    const char *name = lt__op_names[op];
    ck_assert_msg(name != NULL, "op table entry %d has no name", op);
    const opinfo *e = find_entry(name);
    if (!e) {
      append(missing, sizeof missing, name);
      continue;
    }
    if (!d->backward) continue;
    nbw++;
    const int k = gradable_samples(e) + gradcases_for(name);
    if (k == 0) append(nograd, sizeof nograd, name);
    if (k > 0 && k < 3) {
      char t[128];
      snprintf(t, sizeof t, "%s (%d)", name, k);
      append(few, sizeof few, t);
    }
  }
  for (int i = 0; i < NGRADCASES; i++)
    if (!find_entry(gradcases[i].op)) append(unknown, sizeof unknown, gradcases[i].op);
  for (int i = 0; i < nentries; i++) {
    const opinfo *e = entries[i];
    for (int j = 0; j < i; j++)
      if (strcmp(entries[j]->name, e->name) == 0) append(dup, sizeof dup, e->name);
    if (!e->call || !e->ref || !e->dtypes || !e->samples || !e->samples[0].label) {
      append(bad, sizeof bad, e->name);
      continue;
    }
    if (!family_registered(e->family) && !strstr(unregistered, e->family))
      append(unregistered, sizeof unregistered, e->family);
  }
  printf("opinfo: %d entries, %d ops in the op table, %d with a backward, %d hand-written gradcheck cases\n",
         nentries, (int)LT__OP_COUNT, nbw, NGRADCASES);
  if (few[0]) printf("opinfo: warning: ops with fewer than 3 gradient checks: %s\n", few);
  fflush(stdout);
  ck_assert_msg(!missing[0], "ops of the op table without an opinfo entry: %s", missing);
  ck_assert_msg(!nograd[0], "ops with a backward but no gradient check (samples or gradcases): %s", nograd);
  ck_assert_msg(!unknown[0], "gradcheck cases naming ops without an entry: %s", unknown);
  ck_assert_msg(!dup[0], "entries named twice: %s", dup);
  ck_assert_msg(!bad[0], "entries without a call, reference, dtypes or samples: %s", bad);
  ck_assert_msg(!unregistered[0], "families with runner entries that tests/CMakeLists.txt does not register as "
                "test_ops_<technique>_<family> tests (LT_OPS_FAMILIES \"%s\"): %s", LT_OPS_FAMILIES, unregistered);
}
END_TEST

int main(void) {
  collect_entries();
  const char *part = getenv("LT_OPS_PART");
  if (part && (sscanf(part, "%d/%d", &part_k, &part_n) != 2 || part_n < 1 || part_k < 1 || part_k > part_n)) {
    fprintf(stderr, "test_ops: LT_OPS_PART is '%s': want k/n with 1 <= k <= n\n", part);
    return 1;
  }
  part_k = part ? part_k - 1 : 0;
  Suite *s = suite_create("ops");
  LT_TEST_CASE(s, "coverage", 0, test_coverage);
  /* by_family: the entries with a call, family by family; fam_start[k] to
   * fam_start[k + 1] is family k's range. */
  enum { MAX_FAM = 16 };
  const char *fams[MAX_FAM];
  int nfam = 0, n = 0, fam_start[MAX_FAM + 1];
  if ((size_t)nentries > sizeof by_family / sizeof *by_family) {
    fprintf(stderr, "test_ops: %d entries: raise the size of by_family\n", nentries);
    return 1;
  }
  for (int i = 0; i < nentries; i++) {
    if (!entries[i]->call) continue;
    bool seen = false;
    for (int k = 0; k < nfam; k++) seen |= strcmp(fams[k], entries[i]->family) == 0;
    if (!seen && nfam == MAX_FAM) {
      fprintf(stderr, "test_ops: more than %d families: raise MAX_FAM\n", MAX_FAM);
      return 1;
    }
    if (!seen) fams[nfam++] = entries[i]->family;
  }
  for (int k = 0; k < nfam; k++) {
    fam_start[k] = n;
    for (int i = 0; i < nentries; i++)
      if (entries[i]->call && strcmp(entries[i]->family, fams[k]) == 0) by_family[n++] = i;
  }
  fam_start[nfam] = n;
  const TTest *const per_technique[T_COUNT] = {test_values, test_threads, test_errors, test_grad, test_paths};
  static char names[T_COUNT][MAX_FAM][64];
  for (int t = 0; t < T_COUNT; t++)
    for (int k = 0; k < nfam; k++) {
      snprintf(names[t][k], sizeof names[t][k], "%s_%s", technique[t], fams[k]);
      TCase *tc = tcase_create(names[t][k]);
      tcase_set_timeout(tc, 600);
      tcase_add_loop_test(tc, per_technique[t], fam_start[k], fam_start[k + 1]);
      suite_add_tcase(s, tc);
    }
  return lt_test_run(s);
}
