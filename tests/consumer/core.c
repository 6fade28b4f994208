/* A tiny program built against an INSTALLED libtensor core alone, the way a
 * user would (tests/install_test.sh builds it with find_package and with
 * pkg-config, shared and --static): tensors, the generic generation loop with
 * a toy model, and a call to sqrt, which links only if the library's CMake
 * target and pkg-config module pass -lm on. */
#include <libtensor/libtensor.h>
#include <math.h>
#include <stdio.h>

#ifdef LT_TRANSFORMER_H
#error "the core's umbrella header must not include the Transformer (libtensor_transformer.h does)"
#endif

/* A model that always prefers the token after the last one (mod V). */
static lt_tensor *next_logits(void *self, const int64_t *ids, int64_t stride, int64_t R, int64_t n) {
  (void)self;
  float l[2 * 5] = {0};
  for (int64_t r = 0; r < R && r < 2; r++) l[r * 5 + (ids[r * stride + n - 1] + 1) % 5] = 3.0f;
  return lt_tensor_from_copy(LT_DTYPE_F32, 2, (int64_t[]){R, 5}, l);
}

int main(void) {
  lt_tensor *a = lt_arange(LT_DTYPE_F32, 0, 6, 1);
  lt_tensor *b = a ? lt_view(a, LT_SHAPE(2, 3)) : NULL;
  lt_tensor *t = b ? lt_transpose(b, 0, 1) : NULL;
  double v = 0;
  if (!t || lt_get(t, (int64_t[]){2, 1}, &v) != LT_OK || v != 5.0) {
    fprintf(stderr, "consumer_core: failed: %s\n", lt_last_error());
    return 1;
  }
  /* generation from prefixes {3}, {0}: 4, 0, 1, ... and 1, 2, 3, ... */
  lt_tensor *prefix = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){2, 1}, (int64_t[]){3, 0});
  lt_generate_model model = {.self = NULL, .vocab_size = 5, .next_logits = next_logits, .reorder = NULL};
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = 3, o.eos_id = -1;
  lt_generate_result r = {0};
  int64_t tok[6];
  if (!prefix || lt_generate(&model, prefix, &o, &r) != LT_OK || lt_tensor_read(r.tokens, LT_DTYPE_I64, tok, 6) ||
      tok[0] != 4 || tok[1] != 0 || tok[2] != 1 || tok[3] != 1 || tok[4] != 2 || tok[5] != 3) {
    fprintf(stderr, "consumer_core: generation failed: %s\n", lt_last_error());
    return 1;
  }
  /* v comes from the library at run time, so the compiler cannot fold the call away. */
  volatile double five = v;
  double root = sqrt(five - 1.0);
  if (root != 2.0) {
    fprintf(stderr, "consumer_core: sqrt(4) gave %g\n", root);
    return 1;
  }
  lt_runtime_info info;
  lt_runtime_get_info(&info);
  printf("consumer_core: libtensor %s, BLIS kernels %s, t[2,1] = %g, generated %lld %lld %lld\n", info.version,
         info.blas_arch, v, (long long)tok[0], (long long)tok[1], (long long)tok[2]);
  lt_generate_result_free(&r);
  lt_tensor_free(prefix);
  lt_tensor_free(t);
  lt_tensor_free(b);
  lt_tensor_free(a);
  return 0;
}
