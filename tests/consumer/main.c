/* A tiny program built against an INSTALLED libtensor, the way a user would
 * (tests/install_test.sh builds it with find_package and with pkg-config). */
#include <libtensor/libtensor.h>
#include <stdio.h>

int main(void) {
  lt_tensor *a = lt_arange(LT_DTYPE_F32, 0, 6, 1);
  lt_tensor *b = a ? lt_view(a, LT_SHAPE(2, 3)) : NULL;
  lt_tensor *t = b ? lt_transpose(b, 0, 1) : NULL;
  double v = 0;
  if (!t || lt_get(t, (int64_t[]){2, 1}, &v) != LT_OK || v != 5.0) {
    fprintf(stderr, "consumer: failed: %s\n", lt_last_error());
    return 1;
  }
  /* The flagship model's headers come with the umbrella header too. */
  lt_tf_config cfg = lt_tf_config_default(LT_TF_DECODER_ONLY);
  cfg.vocab_size = 256;
  if (lt_tf_config_validate(&cfg) != LT_OK) {
    fprintf(stderr, "consumer: default config invalid: %s\n", lt_last_error());
    return 1;
  }
  lt_runtime_info info;
  lt_runtime_get_info(&info);
  printf("consumer: libtensor %s, BLIS kernels %s, t[2,1] = %g\n", info.version, info.blas_arch, v);
  lt_tensor_free(t);
  lt_tensor_free(b);
  lt_tensor_free(a);
  return 0;
}
