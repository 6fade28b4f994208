/* tests/util_layout.c: see util_layout.h. */
#include "util_layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lt_test_layout_name(lt_test_layout l) {
  static const char *const names[] = {
#define LT_TEST_LAYOUT_NAME(N, n) #n,
      LT_TEST_LAYOUT_TABLE(LT_TEST_LAYOUT_NAME)
#undef LT_TEST_LAYOUT_NAME
  };
  return (unsigned)l < LT_TEST_LAYOUT_COUNT ? names[l] : "unknown";
}

lt_tensor *lt_test_layout_of(lt_tensor *t, lt_test_layout l) {
  const int nd = t->ndim;
  lt_tensor *r = NULL;
  switch (l) {
    case LT_TEST_TRANSPOSED: {
      if (nd < 2) break;
      lt_tensor *tt = LT_NN(lt_transpose(t, 0, nd - 1));
      lt_tensor *c = LT_NN(lt_contiguous(tt));
      r = LT_NN(lt_transpose(c, 0, nd - 1));
      LT_FREE_ALL(tt, c);
      break;
    }
    case LT_TEST_SLICED: {
      if (nd < 1) break;
      int64_t sh[LT_MAX_DIMS];
      memcpy(sh, t->shape, sizeof(int64_t) * (size_t)nd);
      sh[0] = 2 * t->shape[0];
      lt_tensor *buf = LT_NN(lt_zeros(t->dtype, nd, sh));
      r = LT_NN(lt_slice(buf, 0, 0, sh[0], 2));
      LT_OK_OR_FAIL(lt_copy_(r, t));
      lt_tensor_free(buf);
      break;
    }
    case LT_TEST_STRIDED: {
      if (nd < 1 || nd == LT_MAX_DIMS) break;
      int64_t sh[LT_MAX_DIMS];
      memcpy(sh, t->shape, sizeof(int64_t) * (size_t)nd);
      sh[nd] = 2;
      lt_tensor *buf = LT_NN(lt_zeros(t->dtype, nd + 1, sh));
      r = LT_NN(lt_select(buf, nd, 0));
      LT_OK_OR_FAIL(lt_copy_(r, t));
      lt_tensor_free(buf);
      break;
    }
    case LT_TEST_EXPANDED: {
      int d = 0;
      while (d < nd && t->shape[d] <= 1) d++;
      if (d == nd) break;
      lt_tensor *first = LT_NN(lt_narrow(t, d, 0, 1));
      lt_tensor *c = LT_NN(lt_contiguous(first));
      r = LT_NN(lt_expand(c, nd, t->shape));
      LT_FREE_ALL(first, c);
      break;
    }
    default: break;
  }
  if (!r) r = LT_NN(lt_contiguous(t));
  lt_tensor_free(t);
  return r;
}

/* Element i (row-major) of t as bytes into buf (contiguous copy c of t). */
static const unsigned char *elem(const lt_tensor *c, int64_t i) {
  return (const unsigned char *)c->data + (size_t)i * lt_dtype_size(c->dtype);
}

static bool same_shape(const lt_tensor *a, const lt_tensor *b) {
  return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

bool lt_test_same_bits(const lt_tensor *a, const lt_tensor *b) {
  if (a->dtype != b->dtype || !same_shape(a, b)) return false;
  lt_tensor *ca = LT_NN(lt_contiguous(a)), *cb = LT_NN(lt_contiguous(b));
  bool eq = memcmp(ca->data, cb->data, (size_t)ca->numel * lt_dtype_size(ca->dtype)) == 0;
  LT_FREE_ALL(ca, cb);
  return eq;
}

void lt_test_assert_same_bits(const lt_tensor *a, const lt_tensor *b, const char *ea, const char *eb,
                              const char *file, int line) {
  if (!a || !b) ck_abort_msg("%s:%d: NULL tensor (%s / %s): %s", file, line, ea, eb, lt_last_error());
  char sa[128], sb[128];
  if (a->dtype != b->dtype || !same_shape(a, b))
    ck_abort_msg("%s:%d: %s is %s %s, %s is %s %s", file, line, ea,
                 lt_shape_str(a->ndim, a->shape, sa, sizeof sa), lt_dtype_name(a->dtype), eb,
                 lt_shape_str(b->ndim, b->shape, sb, sizeof sb), lt_dtype_name(b->dtype));
  lt_tensor *ca = LT_NN(lt_contiguous(a)), *cb = LT_NN(lt_contiguous(b));
  const size_t es = lt_dtype_size(a->dtype);
  int64_t bad = 0;
  char report[2048];
  size_t pos = 0;
  report[0] = '\0';
  for (int64_t i = 0; i < ca->numel; i++) {
    if (memcmp(elem(ca, i), elem(cb, i), es) == 0) continue;
    if (bad < 5 && pos < sizeof report - 200) {
      double va = 0, vb = 0;
      uint64_t ba = 0, bb = 0;
      memcpy(&ba, elem(ca, i), es);
      memcpy(&bb, elem(cb, i), es);
      int64_t idx[LT_MAX_DIMS], rem = i;
      for (int d = a->ndim - 1; d >= 0; d--) {
        idx[d] = rem % a->shape[d];
        rem /= a->shape[d];
      }
      LT_OK_OR_FAIL(lt_get(ca, idx, &va));
      LT_OK_OR_FAIL(lt_get(cb, idx, &vb));
      char ix[128];
      pos += (size_t)snprintf(report + pos, sizeof report - pos,
                              "\n    at %s: %.17g (0x%" PRIx64 ") vs %.17g (0x%" PRIx64 ")",
                              lt_shape_str(a->ndim, idx, ix, sizeof ix), va, ba, vb, bb);
    }
    bad++;
  }
  int64_t n = ca->numel;
  LT_FREE_ALL(ca, cb);
  if (bad)
    ck_abort_msg("%s:%d: %s and %s (%s %s) differ in the bits of %lld of %lld elements:%s", file, line,
                 ea, eb, lt_shape_str(a->ndim, a->shape, sa, sizeof sa), lt_dtype_name(a->dtype),
                 (long long)bad, (long long)n, report);
}

void lt_test_same_on_threads(lt_test_outputs_fn f, void *ctx, const char *what) {
  enum { CAP = 16 };
  lt_tensor *one[CAP] = {0}, *two[CAP] = {0};
  const int before = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  int n1 = f(ctx, one, CAP);
  LT_OK_OR_FAIL(lt_set_num_threads(2));
  int n2 = f(ctx, two, CAP);
  LT_OK_OR_FAIL(lt_set_num_threads(before));
  ck_assert_msg(n1 == n2 && n1 <= CAP, "%s: %d outputs on 1 thread, %d on 2", what, n1, n2);
  for (int i = 0; i < n1; i++) {
    char e1[160], e2[160];
    snprintf(e1, sizeof e1, "%s: output %d on 1 thread", what, i);
    snprintf(e2, sizeof e2, "on 2 threads");
    lt_test_assert_same_bits(one[i], two[i], e1, e2, __FILE__, __LINE__);
  }
  for (int i = 0; i < n1; i++) LT_FREE_ALL(one[i], two[i]);
}
